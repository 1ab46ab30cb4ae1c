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
