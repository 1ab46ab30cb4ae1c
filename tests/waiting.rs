//! What waiting costs the server, and who hands a name on when nobody
//! releases it. A lock's waiters block on the server until their deadline
//! (no slices to renew), and the process's renewal thread looks at the
//! lock for them when its holder's lease would end.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::worker::{say, Worker};
use common::{client_with, eventually, Server};
use redis::Commands;
use redlease::Client;

/// A client that never polls: only a grant (or a message) can wake it.
fn no_poll(url: &str) -> Client {
    Client::builder()
        .url(url)
        .fallback_poll(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Every command's call count (scripts' own calls included).
fn commandstats(con: &mut redis::Connection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

fn commands_between(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> u64 {
    b.iter()
        .filter(|(k, _)| k.as_str() != "info")
        .map(|(k, v)| v - a.get(k).copied().unwrap_or(0))
        .sum()
}

/// Reproduction: each waiter blocked a slice (≤ 250 ms) at a time and
/// renewed its queue entry at every slice: 27 commands a second per idle
/// lock waiter (BLPOP, EVALSHA and the script's GET, PTTL, TIME, ZADD...).
/// Now a waiter blocks once until its deadline; the holder's lease (30 s)
/// outlasts the window, so nobody looks.
#[test]
fn idle_lock_waiters_cost_the_server_nothing() {
    let server = Server::start();
    let holder = client_with(&server, |b| b);
    let mut con = server.con();
    for fair in [false, true] {
        let name = if fair { "idle:fair" } else { "idle:plain" };
        let lock = |c: &Client| {
            if fair {
                c.fair_lock(name)
            } else {
                c.lock(name)
            }
        };
        let g = lock(&holder).acquire().unwrap();
        let waiters: Vec<_> = (0..5)
            .map(|_| {
                let c = no_poll(&server.url());
                let l = lock(&c);
                std::thread::spawn(move || {
                    let g = l.acquire_timeout(Duration::from_secs(20)).unwrap();
                    g.map(|g| g.fencing_token())
                })
            })
            .collect();
        let queue = format!("{{{name}}}:queue");
        assert!(eventually(Duration::from_secs(5), || con
            .zcard::<_, usize>(&queue)
            .unwrap()
            == 5));
        std::thread::sleep(Duration::from_millis(200)); // all blocked
        let before = commandstats(&mut con);
        std::thread::sleep(Duration::from_secs(2));
        let after = commandstats(&mut con);
        let sent = commands_between(&before, &after);
        println!("FIGURES 5 idle {name} waiters over 2 s: {sent} server commands");
        // Before: 5 × 27 × 2 = 270. The holder renews every 10 s.
        assert!(sent <= 3, "{sent} commands: {after:?}");
        // And every one of them still gets the lock, in turn.
        let old = g.fencing_token();
        g.release().unwrap();
        let fences: Vec<u64> = waiters
            .into_iter()
            .map(|t| t.join().unwrap().expect("every waiter gets the lock"))
            .collect();
        assert!(fences.iter().all(|&f| f > old), "{fences:?}");
    }
}

/// A waiter already blocked when the holder died: nobody releases, so the
/// waiter's renewal thread looks when the holder's lease would end and
/// opens the name to the blocked waiters. Within the lease and a second.
#[test]
fn a_blocked_waiter_gets_the_lock_of_a_holder_that_died() {
    let server = Server::start();
    let holder = Worker::spawn("holder_entry", &[("REDLEASE_WAITING_HOLDER", server.url())]);
    assert_eq!(holder.next(Duration::from_secs(10)), "held");
    let waiter = no_poll(&server.url());
    let (tx, rx) = crossbeam_channel::bounded(1);
    let t = std::thread::spawn(move || {
        let g = waiter
            .lock("orphaned")
            .acquire_timeout(Duration::from_secs(30))
            .unwrap();
        tx.send(Instant::now()).unwrap();
        g.map(|g| g.fencing_token())
    });
    std::thread::sleep(Duration::from_millis(500)); // blocked
    drop(holder); // SIGKILL: nobody will release
    let killed = Instant::now();
    let at = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the waiter got the lock");
    let took = at - killed;
    println!(
        "FIGURES a blocked waiter got a dead holder's lock {took:?} after the kill (lease 3 s)"
    );
    assert!(t.join().unwrap().is_some());
    // The lease is 3 s, renewed every second: it ends at most 3 s after the
    // kill. One second more is the bound; the margin is for a loaded machine.
    assert!(took < Duration::from_millis(4_500), "took {took:?}");
}

/// A waiter blocked on its lock keeps its place while the holder renews
/// (the looks are made on another connection), and a holder that renews
/// many times does not make it look more than once per renewal.
#[test]
fn a_long_wait_costs_a_look_per_holder_lease() {
    let server = Server::start();
    let holder = client_with(&server, |b| b.watchdog_timeout(Duration::from_millis(900)));
    let g = holder.lock("looked").acquire().unwrap();
    let waiter = no_poll(&server.url());
    let t = std::thread::spawn(move || {
        waiter
            .lock("looked")
            .acquire_timeout(Duration::from_secs(20))
            .unwrap()
            .map(|g| g.fencing_token())
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut con = server.con();
    let before = commandstats(&mut con);
    std::thread::sleep(Duration::from_secs(3));
    let after = commandstats(&mut con);
    let evalsha =
        after.get("evalsha").copied().unwrap_or(0) - before.get("evalsha").copied().unwrap_or(0);
    println!("FIGURES 3 s of waiting under a 0.9 s lease: {evalsha} scripts (renewals and looks)");
    // The holder renews every 0.3 s (10 in 3 s); the waiter looks at most
    // once per lease it saw (about 4). Slices would have been 12 more.
    assert!(evalsha <= 20, "{evalsha} scripts");
    g.release().unwrap();
    assert!(t.join().unwrap().is_some());
}

/// The child side: holds "orphaned" with a 3 s watchdog until killed.
#[test]
fn holder_entry() {
    let Ok(url) = std::env::var("REDLEASE_WAITING_HOLDER") else {
        return;
    };
    let c = Client::builder()
        .url(&url)
        .watchdog_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let _g = c.lock("orphaned").acquire().unwrap();
    say("held");
    std::thread::sleep(Duration::from_secs(600));
}

/// Reproduction: a latch waiter looked at the latch every fallback poll
/// (2 s), renewing its registration: about 3 commands a second each. Its
/// registration only decides whether the opening is published, and a lost
/// subscription wakes every waiter to look, so it now looks every 30 s.
#[test]
fn idle_latch_waiters_cost_the_server_almost_nothing() {
    let server = Server::start();
    let setter = client_with(&server, |b| b);
    let latch = setter.count_down_latch("idle:latch");
    assert!(latch.try_set_count(1).unwrap());
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let c = client_with(&server, |b| b);
            std::thread::spawn(move || {
                c.count_down_latch("idle:latch")
                    .wait_timeout(Duration::from_secs(20))
                    .unwrap()
            })
        })
        .collect();
    let mut con = server.con();
    std::thread::sleep(Duration::from_millis(800)); // all subscribed and waiting
    let before = commandstats(&mut con);
    std::thread::sleep(Duration::from_secs(4));
    let after = commandstats(&mut con);
    let sent = commands_between(&before, &after);
    println!("FIGURES 3 idle latch waiters over 4 s: {sent} server commands");
    // Before: 3 waiters × 2 looks × 6 commands = 36.
    assert!(sent <= 3, "{sent} commands: {after:?}");
    let t = Instant::now();
    latch.count_down().unwrap();
    for w in waiters {
        assert!(w.join().unwrap(), "every waiter sees the opening");
    }
    println!("FIGURES the opening reached 3 waiters in {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(2));
}
