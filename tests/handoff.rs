//! Direct grant: a release hands the lock (or a semaphore's permits) to the
//! oldest live waiter, who learns it in its own blocked round trip. These tests break that hand-over
//! on purpose — a lost grant reply, a waiter killed while queued, a waiter
//! that gives up just as it is granted — and check there is no orphan, no
//! stall beyond the documented bound (a grant not taken lapses after 500 ms,
//! and the next waiter takes the name within its next 400 ms slice), and no
//! double grant.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::proxy::{Fault, Proxy};
use common::worker::{say, Worker};
use common::{client_with, eventually, no_poll, Server};
use redis::Commands;
use redlease::Client;
use serial_test::serial;

/// Keys of the name `n` left in Redis (the lock, its counter, queue and
/// grant lists).
fn keys_of(con: &mut redis::Connection, n: &str) -> Vec<String> {
    con.keys(format!("{{{n}}}*")).unwrap()
}

#[test]
fn waiters_are_granted_in_arrival_order_across_clients() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let g = holder.lock("fifo").acquire().unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..4 {
        let c = no_poll(&server.url());
        let order = order.clone();
        threads.push(std::thread::spawn(move || {
            let g = c.lock("fifo").acquire().unwrap();
            order.lock().unwrap().push(i);
            std::thread::sleep(Duration::from_millis(20));
            g.release().unwrap();
        }));
        // Let each one queue before the next arrives.
        std::thread::sleep(Duration::from_millis(150));
    }
    // A try never queues and never jumps the queue.
    assert!(holder.lock("fifo").try_acquire().unwrap().is_some()); // re-entry
    let other = client_with(&server, |b| b);
    g.release().unwrap();
    assert!(other.lock("fifo").try_acquire().unwrap().is_none());
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    // Wake-ups came as grants, each popped by its own waiter.
    let mut con = server.con();
    assert!(eventually(Duration::from_secs(2), || keys_of(
        &mut con, "fifo"
    )
    .is_empty()));
}

#[test]
fn a_release_nobody_waits_for_leaves_no_key_and_publishes_nothing() {
    let server = Server::start();
    let c = client_with(&server, |b| b);
    let mut con = server.con();
    let mut fences = Vec::new();
    for _ in 0..5 {
        let g = c.lock("idle").acquire().unwrap();
        fences.push(g.fencing_token());
        g.release().unwrap();
        // Not even the fencing counter stays behind...
        assert!(keys_of(&mut con, "idle").is_empty());
    }
    // ...and fences still only grow across the idle gaps.
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    // Commands run by scripts are counted too.
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con)
        .unwrap();
    assert!(!info.contains("cmdstat_publish"), "{info}");
}

/// The grant's wake-up is popped, and its reply lost with the connection:
/// the waiter asks again with the same token and gets the same hold.
#[test]
#[serial]
fn a_grant_whose_reply_is_lost_is_taken_once_by_its_waiter() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let holder = client_with(&server, |b| b);
    let waiter = no_poll(&proxy.url());
    let third = client_with(&server, |b| b);
    for round in 0..3 {
        let g = holder.lock("lost").acquire().unwrap();
        // The waiter's first blocked round trip is the one cut.
        proxy.arm("BLMOVE", Fault::DropReplyAndClose);
        let w = waiter.clone();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
        let t = std::thread::spawn(move || {
            let g = w
                .lock("lost")
                .acquire_timeout(Duration::from_secs(10))
                .unwrap()
                .unwrap();
            tx.send((g.fencing_token(), g.is_held(), Instant::now()))
                .unwrap();
            let _ = done_rx.recv();
            g.release().unwrap();
        });
        std::thread::sleep(Duration::from_millis(150));
        let released = Instant::now();
        let old = g.fencing_token();
        g.release().unwrap();
        let (fence, held, at) = rx.recv_timeout(Duration::from_secs(15)).unwrap();
        let took = at - released;
        println!("FIGURES round {round}: granted after a lost grant reply in {took:?}");
        assert!(proxy.fired() > round, "the fault did not fire");
        assert!(held && fence > old);
        // Under the 500 ms claim window: the waiter took its own grant
        // again (same token), rather than waiting for it to lapse.
        assert!(took < Duration::from_millis(400), "took {took:?}");
        // Exactly one holder: nobody else gets it meanwhile.
        assert!(third.lock("lost").try_acquire().unwrap().is_none());
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }
    let mut con = server.con();
    assert!(eventually(Duration::from_secs(3), || keys_of(
        &mut con, "lost"
    )
    .is_empty()));
}

/// A waiter killed while queued is granted after its death (its queue entry
/// is still fresh): that grant lapses, and the next waiter takes the name
/// within the documented bound.
#[test]
fn a_waiter_killed_while_queued_stalls_the_name_under_a_second() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let g = holder.lock("killed").acquire().unwrap();
    let w = Worker::spawn("worker_entry", &[("REDLEASE_HANDOFF_WORKER", server.url())]);
    assert_eq!(w.next(Duration::from_secs(10)), "waiting");
    std::thread::sleep(Duration::from_millis(300)); // it is queued and blocked
    let survivor = no_poll(&server.url());
    let s = std::thread::spawn(move || {
        let g = survivor
            .lock("killed")
            .acquire_timeout(Duration::from_secs(10))
            .unwrap();
        (Instant::now(), g.is_some())
    });
    std::thread::sleep(Duration::from_millis(300)); // queued behind it
    drop(w); // SIGKILL
    std::thread::sleep(Duration::from_millis(50));
    let released = Instant::now();
    g.release().unwrap();
    let (at, got) = s.join().unwrap();
    let took = at - released;
    println!("FIGURES a grant to a dead waiter stalled the name {took:?} (bound: 0.5 s + 0.25 s)");
    assert!(got);
    // 900 ms documented; the margin is for a loaded 2-core machine.
    assert!(took < Duration::from_millis(1_600), "took {took:?}");
    let mut con = server.con();
    assert!(eventually(Duration::from_secs(5), || keys_of(
        &mut con, "killed"
    )
    .is_empty()));
}

/// Reproduction: several waiters killed together each got a grant in turn
/// while their queue entries were fresh (2 s), 500 ms apart, and stalled the
/// name about 2 s. A blocking waiter's entry now lives one slice plus a
/// little, never longer than a grant's claim: when the first dead waiter's
/// grant lapses, the others have lapsed too.
#[test]
fn waiters_killed_together_stall_the_name_once() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let g = holder.lock("killed5").acquire().unwrap();
    let w = Worker::spawn(
        "worker_entry",
        &[
            ("REDLEASE_HANDOFF_WORKER", server.url()),
            ("REDLEASE_HANDOFF_NAME", "killed5".into()),
            ("REDLEASE_HANDOFF_WAITERS", "5".into()),
        ],
    );
    for _ in 0..5 {
        assert_eq!(w.next(Duration::from_secs(10)), "waiting");
    }
    std::thread::sleep(Duration::from_millis(400)); // all five queued, blocked
    let survivor = no_poll(&server.url());
    let s = std::thread::spawn(move || {
        let g = survivor
            .lock("killed5")
            .acquire_timeout(Duration::from_secs(10))
            .unwrap();
        (Instant::now(), g.is_some())
    });
    std::thread::sleep(Duration::from_millis(300)); // queued behind them
    let mut con = server.con();
    let queued: usize = con.zcard("{killed5}:queue").unwrap();
    assert_eq!(queued, 6, "five dead-to-be waiters and the survivor queued");
    drop(w); // SIGKILL: five queued waiters die at once
    std::thread::sleep(Duration::from_millis(50));
    let released = Instant::now();
    g.release().unwrap();
    let (at, got) = s.join().unwrap();
    let took = at - released;
    println!(
        "FIGURES five waiters killed together stalled the name {took:?} (bound: 0.5 s + 0.25 s)"
    );
    assert!(got);
    // One claim and one slice (0.75 s) documented; five claims would be
    // 2.5 s. The margin is for a loaded 2-core machine.
    assert!(took < Duration::from_millis(1_600), "took {took:?}");
}

/// Reproduction: a waiter that cannot block (an ACL that allows RPUSH but
/// refuses BLPOP, as `-@blocking` does) falls back to messages, yet a
/// releaser that grants directly pushed its grant and published nothing:
/// the waiter slept until its fallback poll (5 s here) while the grant
/// lapsed. Its queue entry now says it needs a message.
#[test]
fn a_waiter_that_cannot_block_is_told_of_its_grant() {
    let server = Server::start();
    let mut admin = server.con();
    let url = common::user_without_blocking(&mut admin, &server);
    // The holder grants directly: it never blocked, so it never learnt the
    // server refuses it.
    let holder = client_with(&server, |b| b);
    let waiter = Client::builder()
        .url(&url)
        .fallback_poll(Duration::from_secs(5))
        .build()
        .unwrap();
    for round in 0..3 {
        let g = holder.lock("noblock").acquire().unwrap();
        let w = waiter.clone();
        let t = std::thread::spawn(move || {
            let g = w
                .lock("noblock")
                .acquire_timeout(Duration::from_secs(15))
                .unwrap();
            (Instant::now(), g.map(|g| g.release().is_ok()))
        });
        std::thread::sleep(Duration::from_millis(500)); // queued; BLPOP refused
        let released = Instant::now();
        g.release().unwrap();
        let (at, got) = t.join().unwrap();
        let took = at - released;
        println!(
            "FIGURES round {round}: a waiter that cannot block took {took:?} after the release"
        );
        assert_eq!(got, Some(true));
        assert!(took < Duration::from_millis(1_000), "took {took:?}");
    }
}

/// Reproduction: the connection a waiter blocks on was opened with the
/// full connect timeout, whatever the caller's deadline: with new
/// connections stalling in their handshake, `acquire_timeout(200 ms)`
/// returned after about 4 s. It is now capped like a pooled connection,
/// at the deadline plus the response timeout.
#[test]
#[serial]
fn the_blocking_connection_is_capped_by_the_deadline() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let w = Client::builder()
        .url(proxy.url())
        .connect_timeout(Duration::from_secs(3))
        .response_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    // One pooled connection, made now.
    drop(w.lock("warm").try_acquire().unwrap());
    let holder = client_with(&server, |b| b);
    let g = holder.lock("capped").acquire().unwrap();
    // From now on new connections never finish their handshake.
    proxy.always("SETINFO", Fault::Blackhole);
    let started = Instant::now();
    let r = w.lock("capped").acquire_timeout(Duration::from_millis(200));
    let took = started.elapsed();
    println!(
        "FIGURES acquire_timeout(200 ms) with stalling connects: {:?} after {took:?}",
        r.as_ref().map(|o| o.is_some())
    );
    assert!(!matches!(r, Ok(Some(_))));
    drop(g);
    // 200 ms + 300 ms response allowed; a 3 s connect timeout must not.
    assert!(took < Duration::from_millis(1_500), "took {took:?}");
}

/// Reproduction (review): two threads of one client that start waiting
/// together both queue in Redis, in either order, while only the first to
/// join the client's local queue blocked for its grant: when the other
/// was Redis's head, its grant lapsed unclaimed (≈ 750 ms stalls in a
/// third of the rounds). A thread queued in Redis now always blocks.
#[test]
fn two_threads_of_one_client_waiting_together_do_not_stall() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let w = no_poll(&server.url());
    let mut all = Vec::new();
    for round in 0..12 {
        let name = format!("race{round}");
        let g = holder.lock(&name).acquire().unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let (w, name, b) = (w.clone(), name.clone(), barrier.clone());
                std::thread::spawn(move || {
                    b.wait();
                    let g = w
                        .lock(&name)
                        .acquire_timeout(Duration::from_secs(20))
                        .unwrap()
                        .unwrap();
                    let at = Instant::now();
                    g.release().unwrap();
                    at
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(150));
        let released = Instant::now();
        g.release().unwrap();
        let first = ts.into_iter().map(|t| t.join().unwrap()).min().unwrap();
        all.push(first - released);
    }
    println!("FIGURES two local threads: first acquisition after the release: {all:?}");
    let worst = all.iter().max().unwrap();
    assert!(*worst < Duration::from_millis(300), "worst {worst:?}");
}

/// A waiter whose deadline falls at the moment it is granted either takes
/// the lock or leaves it free: never an orphan hold nobody releases.
#[test]
fn a_waiter_timing_out_as_it_is_granted_leaves_no_orphan() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let waiter = no_poll(&server.url());
    let (mut taken, mut gave_up) = (0, 0);
    let mut con = server.con();
    for round in 0..16u64 {
        let g = holder.lock("edge").acquire().unwrap();
        let w = waiter.clone();
        let t = std::thread::spawn(move || {
            w.lock("edge")
                .acquire_timeout(Duration::from_millis(150))
                .unwrap()
                .map(|g| g.release().is_ok())
        });
        // Release around the waiter's deadline: before, at and after it.
        std::thread::sleep(Duration::from_micros(140_000 + round * 1_500));
        g.release().unwrap();
        match t.join().unwrap() {
            Some(released) => {
                assert!(released);
                taken += 1;
            }
            None => gave_up += 1,
        }
        // Either way nothing is held now: no grant was left to lapse.
        assert!(
            eventually(Duration::from_millis(300), || keys_of(&mut con, "edge")
                .is_empty()),
            "round {round}: left {:?}",
            keys_of(&mut con, "edge")
        );
    }
    println!("FIGURES deadline at the grant: taken {taken}, gave up {gave_up}");
}

/// Separate clients hammering one name with a non-atomic read-modify-write
/// inside: no lost update, and every client gets a fair share.
#[test]
fn separate_clients_take_turns_without_lost_updates() {
    let server = Server::start();
    let url = server.url();
    let stop = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (c, stop, inside, overlaps) = (
                no_poll(&url),
                stop.clone(),
                inside.clone(),
                overlaps.clone(),
            );
            let mut con = redis::Client::open(url.as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            std::thread::spawn(move || {
                let lock = c.lock("turns");
                let mut mine = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let g = lock.acquire().unwrap();
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    let v: u64 = con.get("turns:counter").unwrap_or(0);
                    let _: () = con.set("turns:counter", v + 1).unwrap();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    mine += 1;
                    g.release().unwrap();
                }
                mine
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let total: u64 = counts.iter().sum();
    let counter: u64 = server.con().get("turns:counter").unwrap();
    println!("FIGURES four separate clients: {counts:?}");
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(counter, total, "lost updates");
    let fair = total as f64 / 4.0;
    assert!(
        counts.iter().all(|&n| n as f64 >= 0.5 * fair),
        "unfair: {counts:?}"
    );
}

/// The child side: `REDLEASE_HANDOFF_WAITERS` separate clients (one by
/// default) queue for the lock (or, with `REDLEASE_HANDOFF_KIND`
/// `semaphore`, the one-permit fair semaphore; `writer`, the write lock)
/// named by `REDLEASE_HANDOFF_NAME` ("killed" by
/// default), one after the other, and never get to hold it.
#[test]
fn worker_entry() {
    let Ok(url) = std::env::var("REDLEASE_HANDOFF_WORKER") else {
        return;
    };
    let name = std::env::var("REDLEASE_HANDOFF_NAME").unwrap_or_else(|_| "killed".into());
    let n: usize = std::env::var("REDLEASE_HANDOFF_WAITERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let kind = std::env::var("REDLEASE_HANDOFF_KIND").unwrap_or_default();
    let semaphore = kind == "semaphore";
    let writer = kind == "writer";
    for _ in 0..n {
        let (c, name) = (no_poll(&url), name.clone());
        std::thread::spawn(move || {
            say("waiting");
            if semaphore {
                let _p = c.fair_semaphore(&name, 1).acquire().unwrap();
                say("acquired");
                std::thread::sleep(Duration::from_secs(600));
            }
            if writer {
                let _w = c.rw_lock(&name).write().unwrap();
                say("acquired");
                std::thread::sleep(Duration::from_secs(600));
            }
            let _g = c.lock(&name).acquire().unwrap();
            say("acquired");
            std::thread::sleep(Duration::from_secs(600));
        });
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(600));
}

/// Calls of `PUBLISH` the server ran so far (scripts' included).
fn publishes(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_publish:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Messages published on the client channel from now on (what wakes
/// waiters in every client; a hand-over's word to its watchers goes to
/// each named client's own channel), counted by a subscriber of ours until
/// the counter is dropped.
fn wake_messages(server: &Server) -> Arc<AtomicUsize> {
    let mut con = server.con();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::downgrade(&count);
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        con.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut sub = con.as_pubsub();
        sub.subscribe("redlease:wake").unwrap();
        tx.send(()).unwrap();
        for _ in 0..3_000 {
            let got = sub.get_message();
            let Some(count) = seen.upgrade() else { return };
            match got {
                Ok(_) => {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) if e.is_timeout() => {}
                Err(_) => return,
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    count
}

/// Direct grant for semaphores: released permits go to the waiters blocked
/// on their own grant lists — a fair semaphore's in arrival order, a plain
/// one's as permits fit — with no wake-up message (before: every release
/// published, and every waiter raced for the permits after it).
#[test]
fn permits_are_handed_to_blocked_waiters_in_order_without_messages() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let mut con = server.con();
    for fair in [true, false] {
        let name = if fair { "fsem-order" } else { "sem-order" };
        let sem = |c: &Client| {
            if fair {
                c.fair_semaphore(name, 2)
            } else {
                c.semaphore(name, 2)
            }
        };
        let p = sem(&holder).acquire_many(2).unwrap();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for i in 0..4 {
            let c = no_poll(&server.url());
            let order = order.clone();
            let s = sem(&c);
            threads.push(std::thread::spawn(move || {
                let p = s.acquire_timeout(Duration::from_secs(20)).unwrap().unwrap();
                order.lock().unwrap().push(i);
                std::thread::sleep(Duration::from_millis(100));
                p.release().unwrap();
            }));
            std::thread::sleep(Duration::from_millis(150));
        }
        let wakes = wake_messages(&server);
        let released = Instant::now();
        p.release().unwrap();
        for t in threads {
            t.join().unwrap();
        }
        let took = released.elapsed();
        println!("FIGURES fair={fair}: four waiters, two permits at a time: {took:?}");
        // Two rounds of 100 ms: nobody waited for a fallback poll (60 s).
        assert!(took < Duration::from_secs(3), "{took:?}");
        std::thread::sleep(Duration::from_millis(200)); // anything in flight
        assert_eq!(wakes.load(Ordering::SeqCst), 0, "fair={fair}");
        let order = order.lock().unwrap().clone();
        if fair {
            // The first two in, then the other two; each pair in any order.
            let mut first: Vec<_> = order[..2].to_vec();
            first.sort();
            assert_eq!(first, vec![0, 1], "{order:?}");
        }
        assert_eq!(sem(&holder).available().unwrap(), 2);
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "left behind: {keys:?}");
}

/// A semaphore waiter killed while queued (first in a fair line) is passed
/// over at once: a release offers the permit to the waiters blocked on the
/// open list, and the dead one is not among them. (It used to be granted
/// the permit, which lapsed after its 500 ms claim.)
#[test]
fn a_semaphore_waiter_killed_while_queued_stalls_it_under_a_second() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let p = holder.fair_semaphore("killed-sem", 1).acquire().unwrap();
    let w = Worker::spawn(
        "worker_entry",
        &[
            ("REDLEASE_HANDOFF_WORKER", server.url()),
            ("REDLEASE_HANDOFF_NAME", "killed-sem".into()),
            ("REDLEASE_HANDOFF_KIND", "semaphore".into()),
        ],
    );
    assert_eq!(w.next(Duration::from_secs(10)), "waiting");
    std::thread::sleep(Duration::from_millis(300)); // it is queued and blocked
    let survivor = no_poll(&server.url());
    let s = std::thread::spawn(move || {
        let p = survivor
            .fair_semaphore("killed-sem", 1)
            .acquire_timeout(Duration::from_secs(10))
            .unwrap();
        (Instant::now(), p.map(|p| p.release().is_ok()))
    });
    std::thread::sleep(Duration::from_millis(300)); // it waits too
    drop(w); // SIGKILL
    std::thread::sleep(Duration::from_millis(50));
    let released = Instant::now();
    p.release().unwrap();
    let (at, got) = s.join().unwrap();
    let took = at - released;
    println!("FIGURES a dead waiter first in line held the permit up {took:?} (was ≈ 0.53 s)");
    assert_eq!(got, Some(true));
    assert!(took < Duration::from_millis(150), "took {took:?}");
    let mut con = server.con();
    assert!(eventually(Duration::from_secs(5), || keys_of(
        &mut con,
        "killed-sem"
    )
    .is_empty()));
}

/// A semaphore waiter that cannot block (an ACL refusing BLPOP) waits for
/// messages, and its entry says so: a release tells it.
#[test]
fn a_semaphore_waiter_that_cannot_block_is_told() {
    let server = Server::start();
    let mut admin = server.con();
    let url = common::user_without_blocking(&mut admin, &server);
    let holder = client_with(&server, |b| b);
    let waiter = Client::builder()
        .url(&url)
        .fallback_poll(Duration::from_secs(5))
        .build()
        .unwrap();
    for round in 0..3 {
        let p = holder.semaphore("noblock-sem", 1).acquire().unwrap();
        let w = waiter.clone();
        let t = std::thread::spawn(move || {
            let p = w
                .semaphore("noblock-sem", 1)
                .acquire_timeout(Duration::from_secs(15))
                .unwrap();
            (Instant::now(), p.map(|p| p.release().is_ok()))
        });
        std::thread::sleep(Duration::from_millis(500)); // queued; BLPOP refused
        let released = Instant::now();
        p.release().unwrap();
        let (at, got) = t.join().unwrap();
        let took = at - released;
        println!("FIGURES round {round}: a semaphore waiter that cannot block took {took:?}");
        assert_eq!(got, Some(true));
        assert!(took < Duration::from_millis(1_000), "took {took:?}");
    }
}

/// A semaphore waiter whose deadline falls as it is granted either takes
/// the permit or leaves it free: never a permit nobody returns.
#[test]
fn a_semaphore_waiter_timing_out_as_it_is_granted_leaves_no_orphan() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let waiter = no_poll(&server.url());
    let mut con = server.con();
    let (mut taken, mut gave_up) = (0, 0);
    for round in 0..16u64 {
        let p = holder.semaphore("edge-sem", 1).acquire().unwrap();
        let w = waiter.clone();
        let t = std::thread::spawn(move || {
            w.semaphore("edge-sem", 1)
                .acquire_timeout(Duration::from_millis(150))
                .unwrap()
                .map(|p| p.release().is_ok())
        });
        std::thread::sleep(Duration::from_micros(140_000 + round * 1_500));
        p.release().unwrap();
        match t.join().unwrap() {
            Some(released) => {
                assert!(released);
                taken += 1;
            }
            None => gave_up += 1,
        }
        assert!(
            eventually(Duration::from_millis(300), || keys_of(&mut con, "edge-sem")
                .is_empty()),
            "round {round}: left {:?}",
            keys_of(&mut con, "edge-sem")
        );
    }
    println!("FIGURES semaphore deadline at the grant: taken {taken}, gave up {gave_up}");
}

/// Direct grant for the write lock: a writer waiting behind another writer,
/// or behind readers, is handed the write lock by the release (the last
/// reader's), blocked on its own grant list; nothing is published while no
/// reader waits (before: every writer release published, and a waiting
/// writer was woken by a message).
#[test]
fn a_waiting_writer_is_handed_the_write_lock_without_messages() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let writer = no_poll(&server.url());
    let mut con = server.con();
    for behind_readers in [false, true] {
        let rw = holder.rw_lock("rw-direct");
        let (w, r1, r2) = if behind_readers {
            let other = client_with(&server, |b| b);
            let r2 = other.rw_lock("rw-direct").read().unwrap();
            (None, Some(rw.read().unwrap()), Some((other, r2)))
        } else {
            (Some(rw.write().unwrap()), None, None)
        };
        let c = writer.clone();
        let t = std::thread::spawn(move || {
            let g = c
                .rw_lock("rw-direct")
                .write_timeout(Duration::from_secs(20))
                .unwrap()
                .expect("granted");
            let at = Instant::now();
            g.release().unwrap();
            at
        });
        std::thread::sleep(Duration::from_millis(300)); // it is queued
        let queued: usize = con.zcard("{rw-direct}:rw:wq").unwrap();
        assert_eq!(queued, 1);
        let before = publishes(&mut con);
        if let Some((_other, r2)) = r2 {
            r2.release().unwrap(); // not the last reader: nothing happens
            std::thread::sleep(Duration::from_millis(100));
            assert!(!t.is_finished());
        }
        let released = Instant::now();
        drop(w);
        drop(r1);
        let at = t.join().unwrap();
        println!(
            "FIGURES behind readers {behind_readers}: writer handed the lock after {:?}",
            at - released
        );
        assert!(
            at - released < Duration::from_secs(2),
            "{:?}",
            at - released
        );
        assert_eq!(
            publishes(&mut con),
            before,
            "behind readers {behind_readers}"
        );
    }
    assert!(eventually(Duration::from_secs(2), || keys_of(
        &mut con,
        "rw-direct"
    )
    .is_empty()));
}

/// A writer that died after it queued is handed the write lock once; its
/// grant lapses within the claim, and a reader waiting behind it is told
/// (waiting readers register) and gets in soon after.
#[test]
fn a_reader_behind_a_dead_writer_gets_in_under_a_second() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let w = holder.rw_lock("rw-dead").write().unwrap();
    let worker = Worker::spawn(
        "worker_entry",
        &[
            ("REDLEASE_HANDOFF_WORKER", server.url()),
            ("REDLEASE_HANDOFF_NAME", "rw-dead".into()),
            ("REDLEASE_HANDOFF_KIND", "writer".into()),
        ],
    );
    assert_eq!(worker.next(Duration::from_secs(10)), "waiting");
    std::thread::sleep(Duration::from_millis(300)); // it is queued
    let reader = no_poll(&server.url());
    let r = std::thread::spawn(move || {
        let g = reader
            .rw_lock("rw-dead")
            .read_timeout(Duration::from_secs(10))
            .unwrap();
        (Instant::now(), g.map(|g| g.release().is_ok()))
    });
    std::thread::sleep(Duration::from_millis(300)); // it waits too
    drop(worker); // SIGKILL
    std::thread::sleep(Duration::from_millis(50));
    let released = Instant::now();
    w.release().unwrap();
    let (at, got) = r.join().unwrap();
    let took = at - released;
    println!("FIGURES a reader behind a dead writer's grant got in after {took:?} (claim 0.5 s)");
    assert_eq!(got, Some(true));
    // 0.5 s claim; the margin is for a loaded 2-core machine.
    assert!(took < Duration::from_millis(1_600), "took {took:?}");
}

fn connected_clients(con: &mut redis::Connection) -> usize {
    common::clients_info(con, "connected_clients")
}

/// Waiters block on at most `pool_size` connections per server: a fair lock
/// with eight waiting threads of one client opened eight blocking
/// connections besides its pool (the pool size bounds nothing else). Those
/// beyond the cap look without blocking each slice, and still take their
/// turn.
#[test]
fn blocking_connections_are_capped_by_the_pool_size() {
    let server = Server::start();
    let mut con = server.con();
    let holder = client_with(&server, |b| b);
    let g = holder.fair_lock("capped-pool").acquire().unwrap();
    let base = connected_clients(&mut con);
    let waiter = Client::builder()
        .url(server.url())
        .pool_size(2)
        .fallback_poll(Duration::from_secs(60))
        .build()
        .unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..8 {
        let (w, order) = (waiter.clone(), order.clone());
        threads.push(std::thread::spawn(move || {
            let g = w
                .fair_lock("capped-pool")
                .acquire_timeout(Duration::from_secs(30))
                .unwrap()
                .expect("granted");
            order.lock().unwrap().push(i);
            g.release().unwrap();
        }));
        std::thread::sleep(Duration::from_millis(60));
    }
    std::thread::sleep(Duration::from_millis(500));
    let opened = connected_clients(&mut con) - base;
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
    let blocked = list
        .lines()
        .filter(|l| {
            l.split(' ')
                .any(|f| f.starts_with("flags=") && f.contains('b'))
        })
        .count();
    println!("FIGURES eight waiting threads, pool size 2: {opened} connections, {blocked} blocked");
    // Two blocked. Besides them: the pool's (one is usually all the
    // waiters' looks need), the wake-up subscriber of the waiters beyond
    // the cap (they lost their place among the blocked and wait for
    // messages), and on a loaded machine a second pooled one and a spare
    // opened while r2d2 had not connected yet (`Node::refusal`, kept for
    // the next block): 4 connections idle, 5 and 6 under load (CI's
    // RESP3 run failed on 5 with a bound of 4, which counted neither).
    assert!(blocked <= 2, "{blocked} blocked connections:\n{list}");
    drop(g);
    for t in threads {
        t.join().unwrap();
    }
    // Every one took its turn (a grant waits 0.5 s for a waiter without a
    // slot, which looks every slice, so the order holds unless the machine
    // stalls one for longer: not asserted).
    assert_eq!(order.lock().unwrap().len(), 8);
}

/// Reproduction (review of the pop-alone grant): a fence on the open list
/// that was not the open grant's (put there by hand here, ahead of the
/// grant's own) was a right to the grant. The waiter that popped it took
/// the grant with its script, while the waiter that popped the grant's own
/// fence held it from its pop: both at once. Only the grant's own fence
/// takes it; the other waiter waits its turn.
#[test]
fn a_fence_that_is_not_the_grants_takes_nothing() {
    let server = Server::start();
    let mut con = server.con();
    // A holder that is no client: nobody releases it.
    let _: () = redis::cmd("SET")
        .arg("{stale}")
        .arg("rl:gone#5")
        .arg("PX")
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    let spans = Arc::new(std::sync::Mutex::new(Vec::new()));
    let waiter = |spans: Arc<std::sync::Mutex<Vec<(Instant, Instant)>>>| {
        let c = no_poll(&server.url());
        std::thread::spawn(move || {
            let g = c
                .lock("stale")
                .acquire_timeout(Duration::from_secs(8))
                .unwrap();
            let Some(g) = g else { return false };
            let from = Instant::now();
            // A holder may note itself at once, before its claim.
            assert!(
                g.annotate("here").unwrap(),
                "a fresh holder could not note itself"
            );
            std::thread::sleep(Duration::from_millis(300));
            spans.lock().unwrap().push((from, Instant::now()));
            g.release().is_ok()
        })
    };
    let first = waiter(spans.clone());
    std::thread::sleep(Duration::from_millis(300));
    let second = waiter(spans.clone());
    std::thread::sleep(Duration::from_millis(300));
    // The hand-over, by hand: the grant's fence 7 behind a stale 6, so the
    // waiter blocked first pops the stale one.
    let _: () = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("{stale}")
        .arg("rl:grant#7")
        .arg("PX")
        .arg(500)
        .ignore()
        .cmd("RPUSH")
        .arg("{stale}:grant:open")
        .arg("6")
        .arg("7")
        .ignore()
        .query(&mut con)
        .unwrap();
    let (a, b) = (first.join().unwrap(), second.join().unwrap());
    assert!(a && b, "both waiters hold the lock in turn, and release it");
    let mut spans = spans.lock().unwrap().clone();
    spans.sort();
    assert_eq!(spans.len(), 2);
    assert!(spans[0].1 <= spans[1].0, "held together: {spans:?}");
}

/// Reproduction (review of the pop-alone grant): right after a hand-over,
/// before the new holder's first renewal claims the lock, `inspect` named
/// the holder "grant" (the open grant's marker), counted it among the
/// waiters, and hid its note; a note written then lapsed with the grant's
/// time (0.5 s) rather than the lease.
#[test]
fn inspect_names_a_holder_that_took_the_lock_by_its_pop() {
    let server = Server::start();
    let a = client_with(&server, |b| b);
    let b = no_poll(&server.url());
    let g = a.lock("seen").acquire().unwrap();
    let b2 = b.clone();
    let t = std::thread::spawn(move || {
        let g = b2.lock("seen").acquire().unwrap();
        assert!(g.annotate("b here").unwrap());
        let before = b2.inspect("seen").unwrap();
        // Past the grant's 0.5 s, claimed by then.
        std::thread::sleep(Duration::from_millis(800));
        let after = b2.inspect("seen").unwrap();
        g.release().unwrap();
        (before, after)
    });
    std::thread::sleep(Duration::from_millis(50)); // blocked, well under a claim
    g.release().unwrap();
    let (before, after) = t.join().unwrap();
    let id = b.id().simple().to_string();
    for info in [&before, &after] {
        assert_eq!(info.holder.as_deref(), Some(id.as_str()), "{info:?}");
        assert_eq!(info.waiters, 0, "{info:?}");
        assert_eq!(info.note.as_deref(), Some("b here"), "{info:?}");
        assert!(
            info.remaining.is_some_and(|r| r > Duration::ZERO),
            "{info:?}"
        );
    }
}
