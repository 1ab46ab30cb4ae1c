//! How semaphore waiters are served (plain and fair): offers on the open
//! list, the fair line and its first waiter, waiters that died, froze, or
//! cannot block, and what idle waiting costs. Most of these began as the
//! reproductions of a review of the open-list design; each failed on it
//! before its fix.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::worker::{say, Worker};
use common::{client_with, commands_between, commandstats, eventually, no_poll, Server};
use redis::Commands;

fn sum(d: &BTreeMap<String, u64>) -> u64 {
    d.values().sum()
}

/// Plain semaphore, free permits that fit no waiter: each blocked waiter's
/// look offers them every ~0.5 s, and the offer goes round all waiters.
#[test]
fn free_permits_that_fit_no_waiter_cost_nothing_while_idle() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let mut con = server.con();
    let _p = holder
        .semaphore("busy", 3)
        .lease(Duration::from_secs(60))
        .acquire_many(2)
        .unwrap();
    for waiters in [1usize, 4] {
        let ts: Vec<_> = (0..waiters)
            .map(|_| {
                let s = no_poll(&server.url()).semaphore("busy", 3);
                std::thread::spawn(move || {
                    s.acquire_many_timeout(2, Duration::from_secs(8))
                        .unwrap()
                        .is_some()
                })
            })
            .collect();
        common::queued(&mut con, "{busy}:sem:queue:t", waiters);
        std::thread::sleep(Duration::from_millis(1000));
        let before = commandstats(&mut con);
        std::thread::sleep(Duration::from_secs(5));
        let after = commandstats(&mut con);
        let mut between = commands_between(&before, &after);
        common::without_script_loads(&mut between);
        let n = sum(&between);
        println!(
            "FIGURES {waiters} idle plain waiters (k=2, 1 of 3 free): {n} commands in 5 s = {:.1}/s each: {between:?}",
            n as f64 / 5.0 / waiters as f64
        );
        // Was 60–78 a second each: every look offered them again.
        assert!(n as f64 / 5.0 / waiters as f64 <= 1.0, "{n} commands");
        for t in ts {
            assert!(!t.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn waiter_entry() {
    let Ok(url) = std::env::var("R_WAITER_URL") else {
        return;
    };
    let k: u32 = std::env::var("R_WAITER_K").unwrap().parse().unwrap();
    let name = std::env::var("R_WAITER_NAME").unwrap();
    let n: u32 = std::env::var("R_WAITER_N")
        .map(|v| v.parse().unwrap())
        .unwrap_or(3);
    let fair = std::env::var("R_WAITER_PLAIN").is_err();
    let c = no_poll(&url);
    say("waiting");
    let s = if fair {
        c.fair_semaphore(&name, n)
    } else {
        c.semaphore(&name, n)
    };
    let _p = s.acquire_many(k).unwrap();
    say("acquired");
    std::thread::sleep(Duration::from_secs(600));
}

/// Fair semaphore: a waiter first in line (head) dies while its k does not
/// fit; a live waiter behind it that needs 1 of the free permits waits
/// until the dead head's k would fit (here: as long as the holder holds).
#[test]
fn a_dead_waiter_first_in_a_fair_line_is_passed_over() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let mut con = server.con();
    let line = holder.fair_semaphore("dh", 3);
    let held = line.acquire_many(2).unwrap(); // 1 of 3 free
    let head = Worker::spawn(
        "waiter_entry",
        &[
            ("R_WAITER_URL", server.url()),
            ("R_WAITER_K", "2".into()),
            ("R_WAITER_NAME", "dh".into()),
        ],
    );
    assert_eq!(head.next(Duration::from_secs(10)), "waiting");
    assert!(eventually(Duration::from_secs(5), || con
        .exists::<_, bool>("{dh}:sem:grant:head")
        .unwrap()));
    drop(head); // SIGKILL the head
    std::thread::sleep(Duration::from_millis(200));
    let killed = Instant::now();
    let live = no_poll(&server.url()).fair_semaphore("dh", 3);
    let t = std::thread::spawn(move || {
        let p = live.acquire_timeout(Duration::from_secs(12)).unwrap();
        (Instant::now(), p.is_some())
    });
    let (at, got) = t.join().unwrap();
    println!(
        "FIGURES dead head (k=2), 1 permit free, live waiter k=1: got={got} after {:?}; head key pttl {}",
        at - killed,
        con.pttl::<_, i64>("{dh}:sem:grant:head").unwrap()
    );
    drop(held);
    // About 1.5 s (its place lapses, then the offer goes round); margin
    // for a loaded 2-core machine. It stalled past 12 s before.
    assert!(got && at - killed < Duration::from_secs(3), "stalled");
}

/// Fair semaphore: A arrives first, B second; both block with no deadline
/// (60 s chunks). A's chunk ends first, it re-blocks behind B; a release
/// after that goes to B.
#[test]
fn a_fair_line_keeps_its_order_across_a_60_s_block() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let mut con = server.con();
    let held = holder
        .fair_semaphore("chunk", 1)
        .lease(Duration::from_secs(120))
        .acquire()
        .unwrap();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let spawn = |who: &'static str| {
        let s = no_poll(&server.url()).fair_semaphore("chunk", 1);
        let order = order.clone();
        std::thread::spawn(move || {
            let p = s.acquire_timeout(Duration::from_secs(100)).unwrap();
            order.lock().unwrap().push(who);
            std::thread::sleep(Duration::from_millis(200));
            drop(p);
        })
    };
    let a = spawn("A");
    common::queued(&mut con, "{chunk}:sem:queue:t", 1);
    std::thread::sleep(Duration::from_secs(2));
    let b = spawn("B");
    common::queued(&mut con, "{chunk}:sem:queue:t", 2);
    // A's 60 s chunk ends ~60 s after it blocked; B's 2 s later.
    std::thread::sleep(Duration::from_millis(59_000));
    held.release().unwrap();
    a.join().unwrap();
    b.join().unwrap();
    let all = order.lock().unwrap().clone();
    println!("FIGURES fair arrival A then B, release ~61 s later: served {all:?}");
    assert_eq!(all, ["A", "B"]);
}

/// ACL fallback (no blocking commands): two waiters told by messages. The
/// first takes the offer directly and leaves the open list behind; a try
/// 0.8 s later purges the queue (and the `told` set); the next release
/// offers to nobody and publishes nothing: the second waiter is stuck
/// until its fallback poll.
#[test]
fn waiters_told_by_messages_keep_their_place_after_a_purge() {
    let server = Server::start();
    let mut admin = server.con();
    let url = common::user_without_blocking(&mut admin, &server);
    let holder = client_with(&server, |b| b);
    let p = holder.semaphore("msg", 1).acquire().unwrap();
    let spawn = || {
        let c = redlease::Client::builder()
            .url(&url)
            .fallback_poll(Duration::from_secs(30))
            .build()
            .unwrap();
        std::thread::spawn(move || {
            let p = c
                .semaphore("msg", 1)
                .acquire_timeout(Duration::from_secs(12))
                .unwrap();
            let got = Instant::now();
            println!("FIGURES message waiter got a permit: {}", p.is_some());
            if p.is_some() {
                std::thread::sleep(Duration::from_secs(2));
            }
            drop(p);
            (got, Instant::now())
        })
    };
    let (a, b) = (spawn(), spawn());
    assert!(eventually(Duration::from_secs(5), || admin
        .zcard::<_, usize>("{msg}:sem:grant:told")
        .unwrap()
        == 2));
    std::thread::sleep(Duration::from_millis(300));
    p.release().unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let keys: Vec<String> = admin.keys("{msg}*").unwrap();
    println!("FIGURES keys before the try: {keys:?}");
    assert!(holder.semaphore("msg", 1).try_acquire().unwrap().is_none());
    let keys: Vec<String> = admin.keys("{msg}*").unwrap();
    println!("FIGURES keys after the try: {keys:?}");
    let (ga, ra) = a.join().unwrap();
    let (gb, rb) = b.join().unwrap();
    let (first_release, second_got) = if ga < gb { (ra, gb) } else { (rb, ga) };
    let gap = second_got.saturating_duration_since(first_release);
    println!("FIGURES second message waiter got the permit {gap:?} after the first released");
    // A message, a few ms; it waited its fallback poll (9.7 s) before.
    assert!(gap < Duration::from_millis(1_500), "{gap:?}");
}

/// A blocked waiter process frozen (SIGSTOP) when the permit is offered:
/// its pipelined script takes the permit with a 1 s lease; the next live
/// waiter should have it about 1 s after the release.
#[test]
fn a_frozen_waiter_holds_an_offer_a_second_at_most() {
    let server = Server::start();
    // Also after `force_release_all`, which offers the permits like a
    // release (reproduction: nothing looked afterwards, and the live
    // waiter got its permit only at its own look, seconds later).
    for (plain, forced) in [(true, false), (false, false), (true, true)] {
        let name = match (plain, forced) {
            (true, false) => "frz",
            (false, false) => "ffrz",
            _ => "xfrz",
        };
        let holder = client_with(&server, |b| b);
        let mut con = server.con();
        let mk = |c: &redlease::Client| {
            if plain {
                c.semaphore(name, 1)
            } else {
                c.fair_semaphore(name, 1)
            }
        };
        let p = mk(&holder).acquire().unwrap();
        let mut env = vec![
            ("R_WAITER_URL", server.url()),
            ("R_WAITER_K", "1".into()),
            ("R_WAITER_N", "1".into()),
            ("R_WAITER_NAME", name.into()),
        ];
        if plain {
            env.push(("R_WAITER_PLAIN", "1".into()));
        }
        let w = Worker::spawn("waiter_entry", &env);
        assert_eq!(w.next(Duration::from_secs(10)), "waiting");
        let qt = format!("{{{name}}}:sem:queue:t");
        assert!(eventually(Duration::from_secs(5), || con
            .zcard::<_, usize>(&qt)
            .unwrap()
            == 1));
        std::thread::sleep(Duration::from_millis(300));
        let live = mk(&no_poll(&server.url()));
        let t = std::thread::spawn(move || {
            let p = live.acquire_timeout(Duration::from_secs(10)).unwrap();
            (Instant::now(), p.is_some())
        });
        assert!(eventually(Duration::from_secs(5), || con
            .zcard::<_, usize>(&qt)
            .unwrap()
            == 2));
        std::thread::sleep(Duration::from_millis(300));
        w.signal(libc::SIGSTOP);
        std::thread::sleep(Duration::from_millis(100));
        let released = Instant::now();
        let forcer = client_with(&server, |b| b);
        if forced {
            assert_eq!(mk(&forcer).force_release_all().unwrap(), 1);
            drop(p); // its release finds nothing of it, and touches nothing
        } else {
            p.release().unwrap();
        }
        let (at, got) = t.join().unwrap();
        println!(
            "FIGURES plain={plain} forced={forced}: frozen waiter first; live one got={got} {:?} after the release",
            at - released
        );
        drop(w);
        // 1 s first lease and a look after it; a loaded machine's margin.
        assert!(got && at - released < Duration::from_millis(2_500));
    }
}

/// Fair semaphore, pool_size 1: T1 and T2 of one client wait (T2 cannot
/// block: it polls), then T3 of another client. Arrival order T1, T2, T3.
#[test]
fn a_fair_waiter_without_a_blocking_connection_keeps_its_turn() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let mut con = server.con();
    let p = holder.fair_semaphore("pool", 1).acquire().unwrap();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let small = redlease::Client::builder()
        .url(server.url())
        .pool_size(1)
        .fallback_poll(Duration::from_secs(60))
        .build()
        .unwrap();
    let spawn = |c: redlease::Client, who: &'static str| {
        let order = order.clone();
        std::thread::spawn(move || {
            let p = c
                .fair_semaphore("pool", 1)
                .acquire_timeout(Duration::from_secs(15))
                .unwrap();
            order.lock().unwrap().push(who);
            std::thread::sleep(Duration::from_millis(300));
            drop(p);
        })
    };
    let mut ts = vec![spawn(small.clone(), "T1")];
    for (i, (c, who)) in [(small.clone(), "T2"), (no_poll(&server.url()), "T3")]
        .into_iter()
        .enumerate()
    {
        common::queued(&mut con, "{pool}:sem:queue:t", i + 1);
        std::thread::sleep(Duration::from_millis(300));
        ts.push(spawn(c, who));
    }
    common::queued(&mut con, "{pool}:sem:queue:t", 3);
    std::thread::sleep(Duration::from_millis(300));
    p.release().unwrap();
    for t in ts {
        t.join().unwrap();
    }
    let all = order.lock().unwrap().clone();
    println!("FIGURES fair, pool_size 1, arrival T1 T2 T3: served {all:?}");
    assert_eq!(all, ["T1", "T2", "T3"]);
}

/// Fair semaphore: X (k=3) first in line (head) does not fit while 2 of 3
/// permits are held; Y (k=1) behind it. The place (its key) lived 150 s
/// and was never renewed: after that Y took the free permit ahead of X.
/// Its process now renews it while it lives (here, long past the key's
/// own 1.5 s).
#[test]
fn the_first_in_a_fair_line_keeps_its_place_while_it_lives() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let mut con = server.con();
    let s = holder
        .fair_semaphore("hl", 3)
        .lease(Duration::from_secs(400));
    let h1 = s.acquire().unwrap();
    let _h2 = s.acquire_many(2).unwrap();
    let start = Instant::now();
    let spawn = |k: u32, wait: u64| {
        let s = no_poll(&server.url()).fair_semaphore("hl", 3);
        std::thread::spawn(move || {
            let p = s
                .acquire_many_timeout(k, Duration::from_secs(wait))
                .unwrap();
            (Instant::now(), p.is_some())
        })
    };
    let x = spawn(3, 12);
    common::queued(&mut con, "{hl}:sem:queue:t", 1);
    std::thread::sleep(Duration::from_millis(300));
    // Y gives up first: X, alive and first in line, is still waiting then.
    let y = spawn(1, 6);
    common::queued(&mut con, "{hl}:sem:queue:t", 2);
    std::thread::sleep(Duration::from_millis(300));
    h1.release().unwrap(); // 1 free: X takes the offer, does not fit, becomes head
    std::thread::sleep(Duration::from_millis(300));
    let head: Option<String> = con.get("{hl}:sem:grant:head").unwrap();
    println!(
        "FIGURES head {head:?}, pttl {}",
        con.pttl::<_, i64>("{hl}:sem:grant:head").unwrap()
    );
    let (yat, ygot) = y.join().unwrap();
    println!(
        "FIGURES Y (k=1, behind X) got={ygot} {:?} after start; X still waiting: {}",
        yat - start,
        !x.is_finished()
    );
    assert!(!ygot, "Y served ahead of the head X");
    let _ = x.join();
}

/// Fair semaphore, mixed modes: M (ACL without blocking commands, told by
/// messages) arrives first, B (blocks) second. The release's offer is
/// popped by B at once.
#[test]
fn a_fair_waiter_told_by_messages_is_not_passed_by_a_blocked_one() {
    let server = Server::start();
    let mut admin = server.con();
    let url = common::user_without_blocking(&mut admin, &server);
    let holder = client_with(&server, |b| b);
    let p = holder.fair_semaphore("mix", 1).acquire().unwrap();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let spawn = |c: redlease::Client, who: &'static str| {
        let order = order.clone();
        std::thread::spawn(move || {
            let p = c
                .fair_semaphore("mix", 1)
                .acquire_timeout(Duration::from_secs(10))
                .unwrap();
            order.lock().unwrap().push(who);
            std::thread::sleep(Duration::from_millis(200));
            drop(p);
        })
    };
    let m = redlease::Client::builder()
        .url(&url)
        .fallback_poll(Duration::from_secs(5))
        .build()
        .unwrap();
    let a = spawn(m, "M");
    assert!(eventually(Duration::from_secs(5), || admin
        .zcard::<_, usize>("{mix}:sem:grant:told")
        .unwrap()
        == 1));
    std::thread::sleep(Duration::from_millis(300));
    let b = spawn(no_poll(&server.url()), "B");
    common::queued(&mut admin, "{mix}:sem:queue:t", 2);
    std::thread::sleep(Duration::from_millis(300));
    p.release().unwrap();
    a.join().unwrap();
    b.join().unwrap();
    let all = order.lock().unwrap().clone();
    println!("FIGURES fair, message waiter M first, blocked B second: served {all:?}");
    assert_eq!(all, ["M", "B"]);
}

/// After r2's dead head: a try_acquire of 1 of the 1 free permit, with
/// nobody alive waiting, fails for as long as the head key lives.
#[test]
fn a_try_is_not_refused_for_a_dead_waiter_first_in_line() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let mut con = server.con();
    let held = holder.fair_semaphore("dt", 3).acquire_many(2).unwrap();
    let head = Worker::spawn(
        "waiter_entry",
        &[
            ("R_WAITER_URL", server.url()),
            ("R_WAITER_K", "2".into()),
            ("R_WAITER_NAME", "dt".into()),
        ],
    );
    assert_eq!(head.next(Duration::from_secs(10)), "waiting");
    assert!(eventually(Duration::from_secs(5), || con
        .exists::<_, bool>("{dt}:sem:grant:head")
        .unwrap()));
    drop(head);
    let other = client_with(&server, |b| b).fair_semaphore("dt", 3);
    let start = Instant::now();
    let mut tries = 0;
    let mut got = false;
    while start.elapsed() < Duration::from_secs(5) && !got {
        tries += 1;
        got = other.try_acquire().unwrap().is_some();
        std::thread::sleep(Duration::from_millis(250));
    }
    println!("FIGURES dead head, 1 of 3 free, nobody alive waiting: try_acquire got={got} after {tries} tries over {:?}; available() = {}", start.elapsed(), other.available().unwrap());
    drop(held);
    assert!(got);
}

/// Stress: N=3, threads of separate clients take 1 or 2 permits (timeouts,
/// tries), occupancy counted locally; afterwards no key without a TTL.
#[test]
fn mixed_requests_never_exceed_the_permits_and_leave_no_key() {
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;
    let server = Server::start();
    let mut con = server.con();
    for fair in [false, true] {
        let name = if fair { "st:f" } else { "st:p" };
        let occ = Arc::new(AtomicI64::new(0));
        let max = Arc::new(AtomicI64::new(0));
        let counts = Arc::new(AtomicI64::new(0));
        let ts: Vec<_> = (0..6u64)
            .map(|i| {
                let c = no_poll(&server.url());
                let (occ, max, counts) = (occ.clone(), max.clone(), counts.clone());
                std::thread::spawn(move || {
                    let s = if fair {
                        c.fair_semaphore(name, 3)
                    } else {
                        c.semaphore(name, 3)
                    };
                    let mut x = i * 7919 + 13;
                    let start = Instant::now();
                    for _ in 0..40 {
                        if start.elapsed() > Duration::from_secs(40) {
                            break;
                        }
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let k = 1 + ((x >> 33) % 2) as u32;
                        let p = if (x >> 40) % 5 == 0 {
                            s.try_acquire_many(k).unwrap()
                        } else {
                            s.acquire_many_timeout(k, Duration::from_millis(50 + (x >> 45) % 400))
                                .unwrap()
                        };
                        if let Some(p) = p {
                            let now = occ.fetch_add(k as i64, Ordering::SeqCst) + k as i64;
                            max.fetch_max(now, Ordering::SeqCst);
                            counts.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis((x >> 50) % 30));
                            occ.fetch_sub(k as i64, Ordering::SeqCst);
                            p.release().unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        std::thread::sleep(Duration::from_millis(200));
        let keys: Vec<String> = con.keys(format!("{{{name}}}*")).unwrap();
        let ttls: Vec<(String, i64)> = keys
            .iter()
            .map(|k| (k.clone(), con.pttl(k).unwrap()))
            .collect();
        println!(
            "FIGURES fair={fair}: {} acquisitions, max occupancy {}, keys 200 ms later {ttls:?}",
            counts.load(Ordering::SeqCst),
            max.load(Ordering::SeqCst)
        );
        assert!(max.load(Ordering::SeqCst) <= 3);
        assert!(ttls.iter().all(|(_, t)| *t > 0), "{ttls:?}");
        std::thread::sleep(Duration::from_millis(2000));
        let keys: Vec<String> = con.keys(format!("{{{name}}}*")).unwrap();
        println!("FIGURES fair={fair}: keys 2.2 s later {keys:?}");
    }
}

/// ACL with BLMOVE but without LPOP: L (k=2) blocked first pops the offer
/// of a 1-permit release; its script cannot read it and deletes it. B
/// (k=1, blocked second, fits) is not offered the free permit until a look.
#[test]
fn an_acl_without_lpop_does_not_lose_an_offer() {
    let server = Server::start();
    let mut admin = server.con();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "nolpop", "reset", "on", ">pw", "~*", "&*", "+@all", "-lpop",
        ])
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://nolpop:pw@127.0.0.1:{}/", server.port());
    let holder = client_with(&server, |b| b);
    let s = holder.semaphore("nl", 2).lease(Duration::from_secs(60));
    let p1 = s.acquire().unwrap();
    let _p2 = s.acquire().unwrap();
    let l = redlease::Client::builder()
        .url(&url)
        .fallback_poll(Duration::from_secs(30))
        .build()
        .unwrap();
    let lt = std::thread::spawn(move || {
        l.semaphore("nl", 2)
            .acquire_many_timeout(2, Duration::from_secs(10))
            .unwrap()
            .is_some()
    });
    common::queued(&mut admin, "{nl}:sem:queue:t", 1);
    std::thread::sleep(Duration::from_millis(300));
    let b = no_poll(&server.url()).semaphore("nl", 2);
    let bt = std::thread::spawn(move || {
        let p = b.acquire_timeout(Duration::from_secs(10)).unwrap();
        (Instant::now(), p.is_some())
    });
    common::queued(&mut admin, "{nl}:sem:queue:t", 2);
    std::thread::sleep(Duration::from_millis(300));
    let released = Instant::now();
    p1.release().unwrap();
    let (at, got) = bt.join().unwrap();
    println!(
        "FIGURES no-LPOP waiter first (k=2), B (k=1) second: B got={got} {:?} after the release",
        at - released
    );
    let _ = lt.join();
    // At once; before, only the releaser's look a second later saved it.
    assert!(got && at - released < Duration::from_millis(900));
}

/// A holder of 2 of the 3 permits of `name` (fair or plain), and a waiter
/// for 2 in another client waiting 950-980 ms (under a second: it waits
/// for messages), queued. The waiter's thread keeps what it gets for
/// `keep`, and says when it got it and whether.
fn two_of_three_held_and_a_waiter_for_two(
    server: &Server,
    name: &'static str,
    fair: bool,
    keep: Duration,
) -> (redlease::Permit, std::thread::JoinHandle<(Instant, bool)>) {
    let mk = move |c: &redlease::Client| {
        if fair {
            c.fair_semaphore(name, 3)
        } else {
            c.semaphore(name, 3)
        }
    };
    let held = mk(&client_with(server, |b| b)).acquire_many(2).unwrap();
    let waiter = mk(&no_poll(&server.url()));
    let t = std::thread::spawn(move || {
        let p = waiter
            .acquire_many_timeout(2, Duration::from_millis(960))
            .unwrap();
        let got = (Instant::now(), p.is_some());
        std::thread::sleep(keep);
        got
    });
    let mut con = server.con();
    let qt = format!("{{{name}}}:sem:queue:t");
    assert!(eventually(Duration::from_secs(5), || con
        .zcard::<_, usize>(&qt)
        .unwrap()
        == 1));
    (held, t)
}

/// Reproduction (the model checker: "semaphore: 3 permits, clients asking
/// 2, 2 and 1"): a holder of 2 of 3 permits, and a waiter for 2 in
/// another client waiting under a second (it waits for messages). Its
/// first attempt offers the one free permit, which it cannot use; the
/// holder's release then found that offer in flight, offered nothing and
/// told nobody, and the waiter slept to its deadline with every permit
/// free. A release now tells the waiters that wait for messages whenever
/// it frees permits, an offer in flight or not.
#[test]
fn a_waiter_for_several_permits_hears_the_release_behind_a_smaller_offer() {
    let server = Server::start();
    for fair in [false, true] {
        let name = if fair { "many-fair" } else { "many-plain" };
        let (held, t) = two_of_three_held_and_a_waiter_for_two(&server, name, fair, Duration::ZERO);
        std::thread::sleep(Duration::from_millis(100));
        let released = Instant::now();
        held.release().unwrap();
        let (at, got) = t.join().unwrap();
        let took = at.saturating_duration_since(released);
        println!("FIGURES fair={fair}: a waiter for 2 of 3 permits, got={got} {took:?} after the release");
        // It slept to its deadline (about 0.8 s after the release).
        assert!(
            got && took < Duration::from_millis(400),
            "fair={fair}: got={got} after {took:?}"
        );
    }
}

/// Reproduction (the model checker, the same configuration): a holder of
/// 2 of 3 permits, a waiter for 2 waiting for messages, and the offer of
/// the one free permit (too small for it) lapsing untaken. A try of one
/// permit then purged the line as if the waiter were gone and took the
/// permit; the holder's release found nobody queued and told nobody, and
/// the waiter slept to its deadline with 2 permits free. The purge now
/// keeps the list of waiters told, and the release tells them.
#[test]
fn a_waiter_purged_after_an_offer_too_small_for_it_hears_the_release() {
    let server = Server::start();
    let name = "purged-many";
    let (held, t) = two_of_three_held_and_a_waiter_for_two(&server, name, false, Duration::ZERO);
    // The offer's claim window (0.5 s) passes untaken.
    std::thread::sleep(Duration::from_millis(600));
    let other = client_with(&server, |b| b);
    let one = other.semaphore(name, 3).try_acquire().unwrap();
    assert!(one.is_some(), "the free permit");
    let released = Instant::now();
    held.release().unwrap();
    let (at, got) = t.join().unwrap();
    let took = at.saturating_duration_since(released);
    println!("FIGURES a waiter for 2 of 3 permits purged after a lapsed offer: got={got} {took:?} after the release");
    assert!(
        got && took < Duration::from_millis(250),
        "got={got} after {took:?}"
    );
}

/// Reproduction (the model checker: "fair semaphore: 3 permits, clients
/// asking 2, 2 and 1"): a fair semaphore, a holder of 2 of 3 permits, and
/// a waiter for 2, first in line, waiting for messages. The offer of the
/// one free permit (too small for it) lapsed untaken, and a try of one
/// permit then purged the line as if the waiter were gone and took the
/// permit ahead of it. First in line with a request that does not fit,
/// it now keeps its place (as a blocked one does), and the try is
/// refused.
#[test]
fn a_fair_waiter_for_several_permits_keeps_its_place_behind_a_small_offer() {
    let server = Server::start();
    let name = "fair-head-many";
    let (held, t) = two_of_three_held_and_a_waiter_for_two(&server, name, true, Duration::ZERO);
    std::thread::sleep(Duration::from_millis(600));
    let other = client_with(&server, |b| b);
    let tried = other.fair_semaphore(name, 3).try_acquire().unwrap();
    let released = Instant::now();
    held.release().unwrap();
    let (at, got) = t.join().unwrap();
    let took = at.saturating_duration_since(released);
    println!(
        "FIGURES fair: a try of 1 behind a waiter for 2 (first in line): got={}; the waiter got={got} {took:?} after the release",
        tried.is_some()
    );
    assert!(tried.is_none(), "the try passed the waiter first in line");
    assert!(
        got && took < Duration::from_millis(250),
        "got={got} after {took:?}"
    );
}

/// Found by review of the fix above: a fair waiter that kept its place
/// first in line (waiting for messages) and then got its permits left
/// that place behind for up to 1.5 s, and a try of a free permit with
/// nobody waiting was refused meanwhile. Taking its permits now ends it.
#[test]
fn a_fair_waiter_that_got_its_permits_leaves_no_place_first_in_line() {
    let server = Server::start();
    let name = "stale-head";
    let mut con = server.con();
    let keep = Duration::from_millis(1500);
    let (held, t) = two_of_three_held_and_a_waiter_for_two(&server, name, true, keep);
    std::thread::sleep(Duration::from_millis(100));
    held.release().unwrap();
    let permits = format!("{{{name}}}:sem");
    assert!(eventually(Duration::from_secs(2), || con
        .zcard::<_, usize>(&permits)
        .unwrap()
        == 1));
    let tried = client_with(&server, |b| b)
        .fair_semaphore(name, 3)
        .try_acquire()
        .unwrap();
    let head: Option<String> = con.get(format!("{{{name}}}:sem:grant:head")).unwrap();
    println!(
        "FIGURES fair: a try of the free permit after the first in line got its 2: got={}, place left: {head:?}",
        tried.is_some()
    );
    assert!(t.join().unwrap().1);
    assert!(
        tried.is_some(),
        "refused with a free permit and nobody waiting"
    );
}

/// Reproduction (a review of round 4's semaphore fixes): a fair line whose
/// first waiter waits for messages (M: its ACL has no blocking commands)
/// and dies there, a waiter B blocked behind it, and the holder releases,
/// staying alive or exiting at once. B's pop took the offer and left it
/// to M, first in line and told of it; nobody took it, and every look
/// offered again, for M to ignore, until M's entry lapsed: B got the
/// permit about 7 s later with the default fallback poll, 3 minutes with a
/// 60 s one. M, told and silent through the offer's claim window, now
/// loses its place: B gets the permit within the claim and a look.
#[test]
fn a_dead_message_waiter_first_in_a_fair_line_holds_an_offer_its_claim_only() {
    for exits in [false, true] {
        let server = Server::start();
        let mut admin = server.con();
        let url = common::user_without_blocking(&mut admin, &server);
        let name = if exits { "dmx" } else { "dml" };
        let mut holder = Worker::spawn(
            "sem_holder_entry",
            &[
                ("R_HOLDER_URL", server.url()),
                ("R_HOLDER_NAME", name.into()),
            ],
        );
        assert_eq!(holder.next(Duration::from_secs(10)), "held");
        let m = Worker::spawn(
            "waiter_entry",
            &[
                ("R_WAITER_URL", url),
                ("R_WAITER_K", "1".into()),
                ("R_WAITER_N", "1".into()),
                ("R_WAITER_NAME", name.into()),
            ],
        );
        assert_eq!(m.next(Duration::from_secs(10)), "waiting");
        let told = format!("{{{name}}}:sem:grant:told");
        assert!(eventually(Duration::from_secs(5), || admin
            .zcard::<_, usize>(&told)
            .unwrap()
            == 1));
        std::thread::sleep(Duration::from_millis(300));
        let b = no_poll(&server.url()).fair_semaphore(name, 1);
        let t = std::thread::spawn(move || {
            let p = b.acquire_timeout(Duration::from_secs(15)).unwrap();
            (Instant::now(), p.is_some())
        });
        common::queued(&mut admin, &format!("{{{name}}}:sem:queue:t"), 2);
        std::thread::sleep(Duration::from_millis(300));
        drop(m); // SIGKILL: M, first in line, is gone
        std::thread::sleep(Duration::from_millis(200));
        holder.tell(if exits { "release and exit" } else { "release" });
        assert_eq!(holder.next(Duration::from_secs(10)), "released");
        let released = Instant::now();
        let (at, got) = t.join().unwrap();
        println!(
            "FIGURES fair, dead message waiter first, blocked B behind, releaser {}: got={got} \
             after {:?}",
            if exits { "exits" } else { "lives" },
            at - released
        );
        // The claim (0.5 s) and a look after it (0.55 s): about 0.6 s;
        // GUARANTEES promises 1.5 s; a loaded machine's margin.
        assert!(
            got && at - released < Duration::from_millis(2_500),
            "stalled"
        );
    }
}

/// The child side: holds the one permit of the fair semaphore
/// `R_HOLDER_NAME`; told "release", releases and stays; told "release and
/// exit", releases and exits at once (as `redlease run` and cron jobs do).
#[test]
fn sem_holder_entry() {
    let Ok(url) = std::env::var("R_HOLDER_URL") else {
        return;
    };
    let name = std::env::var("R_HOLDER_NAME").unwrap();
    let c = no_poll(&url);
    let p = c.fair_semaphore(&name, 1).acquire().unwrap();
    say("held");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    p.release().unwrap();
    say("released");
    if line.trim() == "release and exit" {
        std::process::exit(0);
    }
    std::thread::sleep(Duration::from_secs(600));
}

/// Trace "fair semaphore: a waiter for messages first, one blocked behind,
/// 1 crash" (the model checker, check/): W queued first, its busy reply
/// on its way (held back 400 ms here; a slow process does the same); the
/// holder released and exited, and its offer waited on the open list,
/// nobody blocked yet. A newcomer N blocked, popped it, passed it on for
/// W, popped it again, took W's place and the permit, and died (here: its
/// server silenced, its permit left unreleased). W, blocked at last,
/// waited for its own first look, timed by the holder's lease, which had
/// ended early: 5 s. A newcomer queued while an offer waits on the open
/// list now names the older waiters as its watchers (as a lock's do), and
/// W's look after the claim finds the permit when N's short first lease
/// runs out.
#[test]
fn a_newcomer_that_took_an_offer_and_died_holds_it_its_first_lease_only() {
    let server = Server::start();
    let w_proxy = common::proxy::Proxy::start(server.port());
    let n_proxy = common::proxy::Proxy::start(server.port());
    let mut holder = Worker::spawn(
        "sem_holder_entry",
        &[
            ("R_HOLDER_URL", server.url()),
            ("R_HOLDER_NAME", "nc".into()),
        ],
    );
    assert_eq!(holder.next(Duration::from_secs(10)), "held");
    let w = common::via(&w_proxy.url()).fair_semaphore("nc", 1);
    let n = common::via(&n_proxy.url()).fair_semaphore("nc", 1);
    // Scripts loaded, connections made, subscribers listening.
    for s in [&w, &n] {
        assert!(s
            .acquire_timeout(Duration::from_millis(300))
            .unwrap()
            .is_none());
    }
    std::thread::sleep(Duration::from_millis(300));
    // A blocking waiter's attempt (its entry: 75 s).
    w_proxy.arm(
        b"\r\n75000\r\n",
        common::proxy::Fault::Delay(Duration::from_millis(400)),
    );
    // N dies once it has taken the permit: its renewal thread's claim
    // (lua/zset_extend.lua, sent within a few hundred milliseconds of the
    // take) must never reach the server, however late this thread cuts N
    // off below (the write lock's twin of this test once lost that race
    // in CI: N held its full lease, and W rightly waited past 15 s).
    n_proxy.always(
        common::script_sha("zset_extend.lua"),
        common::proxy::Fault::Blackhole,
    );
    let started = Instant::now();
    let t = std::thread::spawn(move || {
        let p = w.acquire_timeout(Duration::from_secs(15)).unwrap();
        (started.elapsed(), p.is_some())
    });
    assert!(w_proxy.wait_fired(1, Duration::from_secs(5)));
    holder.tell("release and exit");
    assert_eq!(holder.next(Duration::from_secs(5)), "released");
    let taken = n.acquire_timeout(Duration::from_secs(2)).unwrap();
    let took_at = started.elapsed();
    assert!(taken.is_some(), "N took the offer");
    // N dies: nothing of it reaches the server again.
    n_proxy.set_blackhole(true);
    std::mem::forget(taken);
    let (at, got) = t.join().unwrap();
    println!(
        "FIGURES W's reply held 400 ms; N took the permit at {took_at:?} and died; W got={got} at \
         {at:?}"
    );
    // N's first lease (1 s) and a look after it: about 1.1 s. Before: W's
    // own first look, about 5.4 s.
    assert!(
        got && at < Duration::from_millis(2_800),
        "W got it at {at:?}"
    );
}

/// Plain semaphore, free permits that fit no waiter, the waiters' ACL
/// without blocking commands (they wait for messages): a review found
/// them at about 60 commands a second each (1,202 in 5 s for 4; 103-143
/// after this round's first fixes). Every look and every attempt offered
/// the free permits again, and each offer told every waiter to look; the
/// looks themselves were a blocked waiter's, kept after the server
/// refused the blocking pop. Now an offer is made to blocked waiters only,
/// and a waiter whose server refuses the pop stops looking: each polls at
/// the fallback poll (2 s), one attempt of about 25 server commands
/// (counting its script's calls).
#[test]
fn free_permits_that_fit_no_waiter_that_waits_for_messages_cost_little_while_idle() {
    let server = Server::start();
    let url = common::user_without_blocking(&mut server.con(), &server);
    let (wait, settle) = (Duration::from_secs(8), Duration::from_secs(1));
    let (each, between) = idle_cost_of_a_stuck_line(&server, &url, false, "mbusy", wait, settle);
    println!(
        "FIGURES 4 idle plain waiters for messages (k=2, 1 of 3 free): {each:.1}/s each: {between:?}"
    );
    // About 13-15 a second each: the fallback poll's attempts. Was 60-143.
    assert!(each <= 25.0, "{each:.1} a second each");
}

/// Server commands a second per waiter (scripts' calls counted) of 4
/// separate clients on `url` waiting up to `wait` for 2 permits of a
/// semaphore of 3 (fair or not) whose other client holds 2: the permit
/// left fits none of them. Measured for 5 s after they all queued and
/// `settle` passed; each waiter's wait must end empty.
fn idle_cost_of_a_stuck_line(
    server: &Server,
    url: &str,
    fair: bool,
    name: &str,
    wait: Duration,
    settle: Duration,
) -> (f64, BTreeMap<String, u64>) {
    let mut admin = server.con();
    let semaphore = |c: &redlease::Client| {
        if fair {
            c.fair_semaphore(name, 3)
        } else {
            c.semaphore(name, 3)
        }
    };
    let holder = client_with(server, |b| b);
    let _p = semaphore(&holder)
        .lease(Duration::from_secs(60))
        .acquire_many(2)
        .unwrap();
    let waiters = 4usize;
    let ts: Vec<_> = (0..waiters)
        .map(|_| {
            let s = semaphore(&redlease::Client::builder().url(url).build().unwrap());
            std::thread::spawn(move || s.acquire_many_timeout(2, wait).unwrap().is_some())
        })
        .collect();
    common::queued(&mut admin, &format!("{{{name}}}:sem:queue:t"), waiters);
    std::thread::sleep(settle);
    let before = commandstats(&mut admin);
    std::thread::sleep(Duration::from_secs(5));
    let after = commandstats(&mut admin);
    let mut between = commands_between(&before, &after);
    common::without_script_loads(&mut between);
    for t in ts {
        assert!(!t.join().unwrap());
    }
    (sum(&between) as f64 / 5.0 / waiters as f64, between)
}

/// Reproduction (a review of this round's fixes): a fair line of X (a
/// blocking waiter whose busy reply is held back 1.5 s: alive, not yet
/// blocked), A (waits for messages: its ACL has no blocking commands) and
/// B (blocks). The holder releases. B popped the offer, passed it on for
/// X until the passes ran out, took X's place and the permit: A, alive
/// and ahead of it, came second (B, A, X). The offer is now left to A.
#[test]
fn a_blocked_waiter_never_passes_a_live_waiter_for_messages_ahead_of_it() {
    let server = Server::start();
    let mut admin = server.con();
    let nob = common::user_without_blocking(&mut admin, &server);
    let x_proxy = common::proxy::Proxy::start(server.port());
    let holder = client_with(&server, |b| b).fair_semaphore("fi", 1);
    let held = holder.acquire().unwrap();
    let x = common::via(&x_proxy.url()).fair_semaphore("fi", 1);
    assert!(x
        .acquire_timeout(Duration::from_millis(300))
        .unwrap()
        .is_none());
    let a = no_poll(&nob).fair_semaphore("fi", 1);
    let b = no_poll(&server.url()).fair_semaphore("fi", 1);
    std::thread::sleep(Duration::from_millis(300));
    x_proxy.arm(
        b"\r\n75000\r\n",
        common::proxy::Fault::Delay(Duration::from_millis(1500)),
    );
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let spawn = |s: redlease::Semaphore, who: &'static str| {
        let order = order.clone();
        std::thread::spawn(move || {
            if let Some(p) = s.acquire_timeout(Duration::from_secs(10)).unwrap() {
                order.lock().unwrap().push(who);
                std::thread::sleep(Duration::from_millis(100));
                p.release().unwrap();
            }
        })
    };
    let hx = spawn(x, "X");
    assert!(x_proxy.wait_fired(1, Duration::from_secs(5)));
    common::queued(&mut admin, "{fi}:sem:queue:t", 1);
    let ha = spawn(a, "A");
    common::queued(&mut admin, "{fi}:sem:queue:t", 2);
    let hb = spawn(b, "B");
    common::queued(&mut admin, "{fi}:sem:queue:t", 3);
    std::thread::sleep(Duration::from_millis(200));
    held.release().unwrap();
    for h in [hx, ha, hb] {
        h.join().unwrap();
    }
    let all = order.lock().unwrap().clone();
    println!("FIGURES X (reply late), A (messages), B (blocks): served {all:?}");
    assert_eq!(all.first(), Some(&"A"), "A, alive and ahead, was passed");
}

/// An offer named its watchers at every offer, with no spacing (a lock's
/// hand-overs keep 50 ms between namings, lua/publish.lua
/// name_watchers_spaced): under contention (one permit taken in turn by 3
/// separate clients) nearly every turn published a naming, and each named
/// client made a look. Now the semaphores keep the same spacing.
#[test]
fn offers_under_contention_name_watchers_a_few_times_a_second() {
    // Waits longer than a second: a semaphore's waiters block (and have
    // watchers) until their last second.
    let wait = Duration::from_secs(5);
    for kind in ["semaphore", "fair semaphore"] {
        let (per_turn, turns) = common::namings::namings_per_turn(kind, wait);
        println!("FIGURES {kind}, waits of {wait:?}: {per_turn:.3} namings a turn ({turns} turns)");
        assert!(turns > 100, "{turns} turns");
        assert!(per_turn < 0.2, "{kind}: {per_turn:.3} namings a turn");
    }
}

/// What GUARANTEES.md states as not met: a fair line whose first waiter's
/// request does not fit what is free. That waiter keeps its place with a
/// look every half claim, and the one behind it looks when that place
/// would lapse, so that a dead first waiter holds the line about 1.5 s
/// (`a_dead_waiter_first_in_a_fair_line_is_passed_over`). Measured here
/// (4 waiters asking 2 of 3 permits, 1 free, separate clients): about 43
/// commands a second for the line when they block, about 30 a waiter
/// when their ACL refuses the blocking pop (they wait for messages).
/// Pinned so that it does not grow unseen.
///
/// Reproduction (this round): waiting for messages, the first waiter
/// polled at the fallback poll (2 s), past its place's life (1.5 s); the
/// waiters behind, looking when that place lapsed, offered what was free
/// to the line, and every waiter woke to try (an offer every 1-2 s: 38-56
/// commands a second each). Its attempts now come before its place
/// lapses, and nothing is offered while it waits.
#[test]
fn a_fair_line_whose_first_request_does_not_fit_costs_its_first_waiters_looks() {
    for blocking in [true, false] {
        let server = Server::start();
        let url = if blocking {
            server.url()
        } else {
            common::user_without_blocking(&mut server.con(), &server)
        };
        let (wait, settle) = (Duration::from_secs(9), Duration::from_millis(1500));
        let (each, between) = idle_cost_of_a_stuck_line(&server, &url, true, "fline", wait, settle);
        println!(
            "FIGURES 4 idle fair waiters (k=2, 1 of 3 free), blocking {blocking}: \
             {each:.1} commands a second each: {between:?}"
        );
        let bound = if blocking { 15.0 } else { 40.0 };
        assert!(
            each <= bound,
            "blocking {blocking}: {each:.1} a second each"
        );
        let offers = between.get("rpush").copied().unwrap_or(0);
        assert_eq!(offers, 0, "blocking {blocking}: {offers} offers while idle");
    }
}

/// A review: a fair line's order (`{<name>}:sem:queue`) lived twice an
/// entry's life from the last waiter that joined, and was not lengthened
/// when waiters already in it asked again: a quiet line lost its order
/// (after about 150 s) while every waiter was still there, and a newcomer
/// came first. The key's end is brought near here (as 150 s of quiet
/// would), and the waiters' attempts must keep it.
#[test]
fn a_quiet_fair_line_keeps_its_order() {
    let server = Server::start();
    let mut admin = server.con();
    let url = common::user_without_blocking(&mut admin, &server);
    let holder = client_with(&server, |b| b);
    let held = holder
        .fair_semaphore("qlife", 3)
        .lease(Duration::from_secs(60))
        .acquire_many(2)
        .unwrap();
    let served = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let waiter = |id: usize| {
        let s = redlease::Client::builder()
            .url(&url)
            .build()
            .unwrap()
            .fair_semaphore("qlife", 3);
        let served = served.clone();
        std::thread::spawn(move || {
            if let Some(p) = s.acquire_many_timeout(2, Duration::from_secs(20)).unwrap() {
                served.lock().unwrap().push(id);
                p.release().unwrap();
            }
        })
    };
    let mut ts = Vec::new();
    for id in 1..=3 {
        ts.push(waiter(id));
        common::queued(&mut admin, "{qlife}:sem:queue:t", id);
        std::thread::sleep(Duration::from_millis(200));
    }
    // The order's end, 2 s away; the waiters ask again every 1.5 s.
    let _: () = redis::cmd("PEXPIRE")
        .arg("{qlife}:sem:queue")
        .arg(2_000)
        .query(&mut admin)
        .unwrap();
    // Sampled every 100 ms for 3 s: the key must never be gone.
    let mut gone = 0;
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(100));
        let exists: i64 = redis::cmd("EXISTS")
            .arg("{qlife}:sem:queue")
            .query(&mut admin)
            .unwrap();
        gone += usize::from(exists == 0);
    }
    ts.push(waiter(4));
    common::queued(&mut admin, "{qlife}:sem:queue:t", 4);
    std::thread::sleep(Duration::from_millis(300));
    held.release().unwrap();
    for t in ts {
        t.join().unwrap();
    }
    let served = served.lock().unwrap().clone();
    println!("FIGURES the order gone in {gone} of 30 samples; served {served:?}");
    assert_eq!(gone, 0, "the line's order lapsed with its waiters there");
    assert_eq!(served, vec![1, 2, 3, 4]);
}
