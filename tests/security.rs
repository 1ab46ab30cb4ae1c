//! An ACL user restricted to the documented commands, keys and channel.
//! (TLS is in `tls.rs`, behind the `tls-rustls` feature.)

mod common;

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::Server;
use redlease::{Client, ErrorKind};

/// The README's ACL line, for the prefix `myapp:`.
const ACL: &str = common::README_ACL;

#[test]
fn restricted_acl_user_can_use_every_primitive() {
    every_primitive_under(ACL);
}

/// The ACL line from before direct grants (no BLPOP, no RPUSH): waiters
/// fall back to release messages.
#[test]
fn an_acl_without_blocking_commands_still_works() {
    every_primitive_under(&ACL.replace(" +blpop +blmove +lpop +rpush", ""));
}

/// The README's line before locks blocked on a shared open list (BLPOP
/// and RPUSH, no BLMOVE or LPOP): the refused BLMOVE turns the client's
/// waiters to release messages, and every primitive still works.
#[test]
fn the_acl_line_before_blmove_still_works() {
    every_primitive_under(&ACL.replace(" +blmove +lpop", ""));
}

/// Creates the user `app` with `acl` on `server` and returns its URL.
fn restricted_user(server: &Server, acl: &str) -> String {
    common::set_acl_user(&mut server.con(), "app", acl);
    format!("redis://app:s3cret@127.0.0.1:{}/", server.port())
}

/// A client of the restricted user (keys under `myapp:`) whose waiters
/// look for themselves only every `poll`.
fn app_client(url: &str, poll: Duration) -> Client {
    Client::builder()
        .url(url)
        .key_prefix("myapp:")
        .fallback_poll(poll)
        .build()
        .unwrap()
}

/// A thread of `c` waiting up to `limit` for latch `name`: whether it
/// opened, and how long the wait took.
fn wait_on_latch(c: &Client, name: &str, limit: Duration) -> JoinHandle<(bool, Duration)> {
    let (c, name) = (c.clone(), name.to_owned());
    std::thread::spawn(move || {
        let start = Instant::now();
        let opened = c.count_down_latch(&name).wait_timeout(limit).unwrap();
        (opened, start.elapsed())
    })
}

fn every_primitive_under(acl: &str) {
    let server = Server::start();
    let url = restricted_user(&server, acl);
    let c = Client::builder()
        .url(&url)
        .key_prefix("myapp:")
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    let g = c.lock("a").acquire().unwrap();
    assert!(c.lock("a").is_locked().unwrap());
    // Renewal runs under the same restrictions.
    std::thread::sleep(Duration::from_millis(1_000));
    assert!(g.is_held());
    // A waiter in another client is woken through the allowed channel.
    let other = app_client(&url, Duration::from_secs(30));
    let o = other.clone();
    let t = std::thread::spawn(move || {
        o.lock("a")
            .acquire_timeout(Duration::from_secs(10))
            .unwrap()
            .is_some()
    });
    std::thread::sleep(Duration::from_millis(200));
    drop(g);
    assert!(t.join().unwrap());
    assert!(other.wakeups_delivered() >= 1);
    // A latch waiter is woken too.
    assert!(c.count_down_latch("l").try_set_count(1).unwrap());
    let t = wait_on_latch(&other, "l", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    c.count_down_latch("l").count_down().unwrap();
    let (opened, waited) = t.join().unwrap();
    assert!(opened && waited < Duration::from_secs(3), "{waited:?}");
    // The opening leaves nothing, whether its waiter blocked or waited
    // for the message (an opening list pushed for message waiters lingered).
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("myapp:*latch*")
        .query(&mut server.con())
        .unwrap();
    assert!(left.is_empty(), "left behind: {left:?}");
    drop(c.fair_lock("f").acquire().unwrap());
    drop(c.rw_lock("rw").write().unwrap());
    drop(c.rw_lock("rw").read().unwrap());
    drop(c.semaphore("s", 2).acquire().unwrap());
    drop(c.fair_semaphore("fs", 1).acquire().unwrap());
    assert!(c.lock("a").force_unlock().is_ok());
    assert!(c.inspect("a").is_ok());
    assert!(c.list("*").is_ok());
    // Outside its prefix the user is refused, with a clear error.
    let outside = Client::builder().url(&url).build().unwrap();
    assert_eq!(
        outside.lock("a").try_acquire().unwrap_err().kind(),
        ErrorKind::Auth
    );
}

/// Redis 7's default `resetchannels`: a user without rights on the wake-up
/// channel. Before, a release ran (the key was deleted) and then failed on
/// its `PUBLISH`, so `release()` returned an error and a caller could redo
/// the work; a release is now `Ok` (the wake-up is lost, and waiters in
/// other clients learn at their next look).
#[test]
fn releases_succeed_without_channel_rights() {
    let server = Server::start();
    let mut con = server.con();
    let url = restricted_user(&server, &ACL.replace(" &myapp:redlease:wake*", ""));
    let c = Client::builder()
        .url(&url)
        .key_prefix("myapp:")
        .build()
        .unwrap();
    // A waiter queued in Redis makes the lock's release publish.
    let waiter = Client::builder()
        .url(&url)
        .key_prefix("myapp:")
        .fallback_poll(Duration::from_millis(200))
        .build()
        .unwrap();
    for fair in [false, true] {
        let lock = |c: &Client| if fair { c.fair_lock("p") } else { c.lock("p") };
        let g = lock(&c).acquire().unwrap();
        let w = waiter.clone();
        let t = std::thread::spawn(move || {
            let l = if fair { w.fair_lock("p") } else { w.lock("p") };
            l.acquire_timeout(Duration::from_secs(10))
                .unwrap()
                .is_some()
        });
        std::thread::sleep(Duration::from_millis(300));
        g.release().unwrap();
        assert!(t.join().unwrap());
    }
    c.semaphore("s", 1).acquire().unwrap().release().unwrap();
    c.rw_lock("rw").read().unwrap().release().unwrap();
    c.rw_lock("rw").write().unwrap().release().unwrap();
    let latch = c.count_down_latch("l");
    assert!(latch.try_set_count(1).unwrap());
    latch.count_down().unwrap();
    assert_eq!(latch.count().unwrap(), 0);
    let keys: Vec<String> = redis::cmd("KEYS").arg("myapp:*").query(&mut con).unwrap();
    assert!(
        keys.iter()
            .all(|k| k.ends_with(":fence") || common::is_fence_floor(k)),
        "{keys:?}"
    );
}

/// Under the ACL line before direct grants, a latch's waiters wait for
/// its message, and a client ignores the messages it published itself:
/// a waiter in the client whose count-down opened the latch is woken by
/// the round that count-down's reply names (`notify_local`), not by a
/// poll (30 s here).
#[test]
fn a_latch_waiter_in_the_client_that_opens_it_is_woken_at_once() {
    let server = Server::start();
    let url = restricted_user(&server, &ACL.replace(" +blpop +blmove +lpop +rpush", ""));
    let c = app_client(&url, Duration::from_secs(30));
    let latch = c.count_down_latch("same");
    assert!(latch.try_set_count(1).unwrap());
    let t = wait_on_latch(&c, "same", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(300));
    let opened_at = Instant::now();
    latch.count_down().unwrap();
    let (opened, waited) = t.join().unwrap();
    assert!(opened);
    assert!(
        waited < Duration::from_secs(10),
        "the waiter was not woken by its own client's count-down ({:?} after it)",
        opened_at.elapsed()
    );
}
