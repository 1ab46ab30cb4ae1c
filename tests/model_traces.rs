//! Counterexamples the model checker (`check/`) found, each replayed on a
//! real redis-server, with the fault proxy where the trace has a fault.
//! Each failed before its fix.

mod common;

use std::time::{Duration, Instant};

use common::proxy::{Fault, Proxy};
use common::{client, Server};
use serial_test::serial;

fn sha(file: &str) -> Vec<u8> {
    redis::Script::new(&common::lua_source(file))
        .get_hash()
        .as_bytes()
        .to_vec()
}

/// Trace "waiter frozen across a hand-over" (check/src/configs.rs): a
/// waiter's busy reply is read late (its process froze, or the reply was
/// delayed); meanwhile the holder released, nobody was blocked to take the
/// hand-over, and the releaser's look found it lapsed and cleared the
/// queue. The waiter then blocked on an empty open list with its first
/// look at the old holder's lease end (up to 5 s later), the name free all
/// that time. Now a stale busy reply is followed by a look at once.
#[test]
#[serial]
fn a_waiter_whose_busy_reply_came_late_looks_at_once() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let holder = client(&server);
    let waiter = redlease::Client::builder()
        .url(proxy.url())
        .response_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let lock = waiter.lock("stale");
    // Scripts loaded, connections made.
    lock.acquire().unwrap().release().unwrap();
    let held = holder.lock("stale").acquire().unwrap();
    proxy.arm(
        sha("lock_acquire.lua"),
        Fault::Delay(Duration::from_millis(1_500)),
    );
    let started = Instant::now();
    let wait = std::thread::spawn(move || {
        let got = lock.acquire_timeout(Duration::from_secs(15)).unwrap();
        (got.is_some(), started.elapsed())
    });
    // The waiter's attempt has run (its reply is held back): release.
    assert!(proxy.wait_fired(1, Duration::from_secs(5)));
    std::thread::sleep(Duration::from_millis(200));
    held.release().unwrap();
    let (granted, took) = wait.join().unwrap();
    assert!(granted);
    // The reply came at ~1.5 s; the name has been free since ~0.9 s (the
    // releaser's look). Before: ~6.5 s (the first look 5 s after the reply).
    assert!(
        took < Duration::from_millis(3_000),
        "granted {took:?} after the call: the name was free from about 0.9 s"
    );
}

/// Trace "3 waiters, one frozen while blocked" (check/src/configs.rs): a
/// waiter's queue entry went away while it waited (the queue was purged
/// while its process was paused; here: deleted by hand, as a `FLUSHALL` or
/// an eviction would), its look found the lock held and left it unqueued,
/// and the holder's release then found nobody queued: the name free, the
/// waiter blocked until its next look (5 s). Now a waiter's look queues it
/// again.
#[test]
#[serial]
fn a_waiter_whose_queue_entry_went_away_is_queued_again_by_its_look() {
    let server = Server::start();
    let holder = client(&server);
    let waiter = client(&server);
    let held = holder.lock("requeue").acquire().unwrap();
    let lock = waiter.lock("requeue");
    let wait = std::thread::spawn(move || {
        let got = lock.acquire_timeout(Duration::from_secs(20)).unwrap();
        (got.is_some(), Instant::now())
    });
    let mut con = server.con();
    assert!(common::eventually(Duration::from_secs(5), || {
        redis::cmd("EXISTS")
            .arg("{requeue}:queue")
            .query::<bool>(&mut con)
            .unwrap()
    }));
    let _: () = redis::cmd("DEL")
        .arg("{requeue}:queue")
        .arg("{requeue}:queue:t")
        .query(&mut con)
        .unwrap();
    // The waiter's first look comes 5 s after it blocked (the holder's
    // lease is 30 s): after it, release.
    std::thread::sleep(Duration::from_millis(6_000));
    let released = Instant::now();
    held.release().unwrap();
    let (granted, at) = wait.join().unwrap();
    assert!(granted);
    let took = at - released;
    // Before: granted at the waiter's next look, ~4 s after the release.
    assert!(
        took < Duration::from_millis(1_500),
        "granted {took:?} after the release"
    );
}

/// Trace "semaphore: 2 permits, 3 clients waiting for messages, 1 fault"
/// (check/src/configs.rs): a waiter that waits for messages goes away
/// without withdrawing its entry (its withdrawal was lost; a crash does
/// the same). A release offers the permit, the offer lapses untaken, and
/// each look (a `try_acquire` too) purged the queue but put the waiters
/// that wait for messages back, without an expiry on the deadlines' set:
/// the offer was made again for the gone waiter, a claim window after
/// another, until its entry's deadline, with nobody holding (the issue's
/// "semaphore refused ~3 s after faults heal"). Now a lapsed offer
/// purges them too.
#[test]
#[serial]
fn a_gone_message_waiter_stalls_a_semaphore_no_longer_than_its_offer() {
    for fair in [false, true] {
        let server = Server::start();
        let proxy = Proxy::start(server.port());
        let sem = |c: &redlease::Client| {
            if fair {
                c.fair_semaphore("gone", 1)
            } else {
                c.semaphore("gone", 1)
            }
        };
        let holder = client(&server);
        let gone = redlease::Client::builder()
            .url(proxy.url())
            .response_timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let prober = client(&server);
        // Scripts loaded through the proxy.
        sem(&gone).acquire().unwrap().release().unwrap();
        let held = sem(&holder).acquire().unwrap();
        // Its withdrawal at the deadline never reaches the server.
        proxy.arm(sha("sem_release.lua"), Fault::Blackhole);
        let waited = sem(&gone).acquire_timeout(Duration::from_millis(800));
        assert!(!matches!(waited, Ok(Some(_))), "{fair}: nobody released");
        assert!(proxy.fired() >= 1, "{fair}: its withdrawal was sent");
        drop(gone);
        let released = Instant::now();
        held.release().unwrap();
        let probe = sem(&prober);
        let got = loop {
            if probe.try_acquire().unwrap().is_some() {
                break released.elapsed();
            }
            assert!(
                released.elapsed() < Duration::from_secs(12),
                "{fair}: no permit 12 s after the release"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        // The offer's claim window (0.5 s) and a poll; before: over 12 s
        // (fair).
        assert!(
            got < Duration::from_millis(1_500),
            "{fair}: a permit only {got:?} after the release, nobody holding"
        );
        // Nothing is left without an expiry (before: the waiters'
        // deadlines, put back by the purge).
        let mut con = server.con();
        for key in [
            "{gone}:sem:queue:t",
            "{gone}:sem:queue",
            "{gone}:sem:grant:told",
        ] {
            let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut con).unwrap();
            assert_ne!(ttl, -1, "{fair}: {key} never expires");
        }
    }
}
