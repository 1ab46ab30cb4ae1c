//! Semaphores (plain and fair) and the fair lock against a real redis-server.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{blocked_clients, client, client_with, eventually, Server};
use redis::Commands;
use redlease::{Client, ErrorKind};

fn occupancy_never_exceeds(fair: bool) {
    let server = Server::start();
    let limit = 3;
    let clients: Vec<Client> = (0..3).map(|_| client(&server)).collect();
    let inside = Arc::new(AtomicUsize::new(0));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for c in clients.iter().cycle().take(9) {
        let c = c.clone();
        let (inside, max_seen, done) = (inside.clone(), max_seen.clone(), done.clone());
        handles.push(std::thread::spawn(move || {
            let sem = if fair {
                c.fair_semaphore("api", limit)
            } else {
                c.semaphore("api", limit)
            };
            for _ in 0..15 {
                let p = sem.acquire().unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                max_seen.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(500));
                inside.fetch_sub(1, Ordering::SeqCst);
                done.fetch_add(1, Ordering::SeqCst);
                p.release().unwrap();
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 9 * 15);
    let max = max_seen.load(Ordering::SeqCst);
    assert!(max <= limit as usize, "{max} holders of {limit} permits");
    assert!(max >= 2, "permits were never shared");
    assert_eq!(
        clients[0].semaphore("api", limit).available().unwrap(),
        limit
    );
}

#[test]
fn a_free_semaphore_is_taken_only_when_nothing_stands_in_the_way() {
    let server = Server::start();
    let c = client(&server);
    let mut con = server.con();
    let later = common::server_ms(&mut con) + 60_000;
    // Each planted alone, on a name of its own: what a newcomer must wait
    // behind although no permit is held, or what it must clear.
    // A permit held by another, all five of them.
    let _: () = con.zadd("{held}:sem", "5:rl:other", later).unwrap();
    let _: () = con.pexpire("{held}:sem", 60_000).unwrap();
    let got = c.semaphore("held", 5).try_acquire().unwrap();
    assert!(got.is_none(), "a permit was taken beyond the count");
    // A live waiter queued, in a fair semaphore.
    common::plant_live_waiter(&mut con, None, "{queued}:sem:queue:t", "1:rl:live:w");
    let got = c.fair_semaphore("queued", 5).try_acquire().unwrap();
    assert!(
        got.is_none(),
        "a newcomer passed a live waiter of a fair semaphore"
    );
    // An offer in flight to the blocked waiters.
    let _: () = con.set_ex("{offered}:sem:grant:offer", "1", 60).unwrap();
    let got = c.semaphore("offered", 5).try_acquire().unwrap();
    assert!(
        got.is_none(),
        "a newcomer took permits offered to the blocked waiters"
    );
    // Another member first in line, in a fair semaphore.
    let _: () = con
        .set_ex("{first}:sem:grant:head", "1:rl:first", 60)
        .unwrap();
    let got = c.fair_semaphore("first", 5).try_acquire().unwrap();
    assert!(got.is_none(), "a newcomer passed the one first in line");
    // An offer nobody took (its list outlived it): cleared by the next
    // acquisition, which takes a permit.
    let _: () = con.rpush("{left}:sem:grant:open", "0").unwrap();
    let p = c
        .semaphore("left", 5)
        .try_acquire()
        .unwrap()
        .expect("a dead offer kept the permits");
    let open: bool = con.exists("{left}:sem:grant:open").unwrap();
    assert!(!open, "the dead offer's list stayed");
    drop(p);
}

#[test]
fn semaphore_occupancy_never_exceeds_limit() {
    occupancy_never_exceeds(false);
}

#[test]
fn fair_semaphore_occupancy_never_exceeds_limit() {
    occupancy_never_exceeds(true);
}

#[test]
fn weighted_permits_and_available() {
    let server = Server::start();
    let c = client(&server);
    let sem = c.semaphore("w", 5);
    let three = sem.acquire_many(3).unwrap();
    assert_eq!(three.count(), 3);
    assert_eq!(sem.available().unwrap(), 2);
    assert!(sem.try_acquire_many(3).unwrap().is_none());
    let two = sem.try_acquire_many(2).unwrap().unwrap();
    assert_eq!(sem.available().unwrap(), 0);
    assert!(sem.try_acquire().unwrap().is_none());
    drop(three);
    assert_eq!(sem.available().unwrap(), 3);
    two.release().unwrap();
    assert_eq!(sem.available().unwrap(), 5);
}

#[test]
fn crashed_holders_permits_are_reclaimed_after_their_lease() {
    let server = Server::start();
    let a = client(&server);
    let b = client(&server);
    // A fixed lease models a holder that crashed: nobody renews it.
    let p = a
        .semaphore("crash", 1)
        .lease(Duration::from_millis(200))
        .acquire()
        .unwrap();
    assert!(b.semaphore("crash", 1).try_acquire().unwrap().is_none());
    let start = Instant::now();
    let got = b
        .semaphore("crash", 1)
        .acquire_timeout(Duration::from_secs(3))
        .unwrap();
    assert!(got.is_some());
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(!p.is_held());
    assert_eq!(p.release().unwrap_err().kind(), ErrorKind::LockLost);
    // The late release did not free b's permit.
    assert!(a.semaphore("crash", 1).try_acquire().unwrap().is_none());
}

#[test]
fn watchdog_keeps_permits_and_release_wakes_waiters() {
    let server = Server::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_millis(300)));
    let p = c.semaphore("dog", 1).acquire().unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    assert!(p.is_held());
    let other = client_with(&server, |b| b.fallback_poll(Duration::from_secs(30)));
    let o = other.clone();
    let t = std::thread::spawn(move || {
        let start = Instant::now();
        let got = o
            .semaphore("dog", 1)
            .acquire_timeout(Duration::from_secs(10))
            .unwrap();
        (got.is_some(), start.elapsed())
    });
    std::thread::sleep(Duration::from_millis(200));
    drop(p);
    let (got, waited) = t.join().unwrap();
    assert!(got);
    assert!(waited < Duration::from_secs(3), "{waited:?}");
}

#[test]
fn only_the_holder_can_release() {
    let server = Server::start();
    let c = client(&server);
    let p = c.semaphore("own", 1).acquire().unwrap();
    // Someone removes the set: the holder's release reports the loss.
    let _: () = redis::cmd("DEL")
        .arg("{own}:sem")
        .query(&mut server.con())
        .unwrap();
    assert_eq!(p.release().unwrap_err().kind(), ErrorKind::LockLost);
}

#[test]
fn bad_input() {
    let server = Server::start();
    let c = client(&server);
    let kind = |r: redlease::Result<Option<redlease::Permit>>| r.unwrap_err().kind();
    assert_eq!(
        kind(c.semaphore("z", 0).try_acquire()),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(c.semaphore("z", 2).try_acquire_many(3)),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(c.semaphore("z", 2).try_acquire_many(0)),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(c.semaphore("", 2).try_acquire()),
        ErrorKind::InvalidArgument
    );
    // u32::MAX permits is a valid (if generous) semaphore.
    let big = c
        .semaphore("big", u32::MAX)
        .try_acquire_many(u32::MAX)
        .unwrap();
    assert!(big.is_some());
    drop(big);
    // Handles that disagree on the count while permits are held.
    let _held = c.semaphore("m", 2).acquire().unwrap();
    assert_eq!(
        kind(c.semaphore("m", 3).try_acquire()),
        ErrorKind::InvalidArgument
    );
    // Resizing changes it for everyone.
    let bigger = c.semaphore("m", 2).resize(3).unwrap();
    assert_eq!(bigger.available().unwrap(), 2);
    assert!(bigger.try_acquire_many(2).unwrap().is_some());
    assert_eq!(
        kind(c.semaphore("m", 2).try_acquire()),
        ErrorKind::InvalidArgument
    );
    // A foreign value under the key.
    let _: () = redis::cmd("SET")
        .arg("{s}:sem")
        .arg("x")
        .query(&mut server.con())
        .unwrap();
    assert_eq!(
        kind(c.semaphore("s", 1).try_acquire()),
        ErrorKind::WrongType
    );
}

/// Waiters must be served in the order they arrived. `queue` is the key of
/// the server-side queue, watched to know that each waiter has arrived
/// before the next one starts.
fn fifo_order(
    queue: &str,
    make: impl Fn(&Client) -> Box<dyn Fn() -> Box<dyn std::any::Any> + Send> + Sync,
) {
    let server = Server::start();
    let holder = client(&server);
    let hold = make(&holder);
    let first = hold();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for i in 0..5 {
        // Separate clients: FIFO is the server's doing, not a local queue.
        let c = client(&server);
        let acquire = make(&c);
        let order = order.clone();
        handles.push(std::thread::spawn(move || {
            let g = acquire();
            order.lock().unwrap().push(i);
            std::thread::sleep(Duration::from_millis(20));
            drop(g);
        }));
        // Let each waiter register, and block on the server (the order of
        // blocking is the order of service), before the next arrives.
        let mut con = server.con();
        assert!(eventually(Duration::from_secs(10), || {
            redis::cmd("ZCARD")
                .arg(queue)
                .query::<usize>(&mut con)
                .unwrap()
                == i + 1
                && blocked_clients(&mut con) == i + 1
        }));
    }
    drop(first);
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[test]
fn fair_lock_is_fifo() {
    fifo_order("{fifo}:queue", |c| {
        let lock = c.fair_lock("fifo");
        Box::new(move || Box::new(lock.acquire().unwrap()) as Box<dyn std::any::Any>)
    });
}

#[test]
fn fair_semaphore_is_fifo() {
    fifo_order("{fifo}:sem:queue", |c| {
        let sem = c.fair_semaphore("fifo", 1);
        Box::new(move || Box::new(sem.acquire().unwrap()) as Box<dyn std::any::Any>)
    });
}

#[test]
fn fair_queue_survives_waiters_that_give_up_or_die() {
    let server = Server::start();
    let c = client_with(&server, |b| b.fallback_poll(Duration::from_millis(100)));
    let g = c.fair_lock("q").acquire().unwrap();
    // A waiter that gives up leaves the queue.
    let quitter = client(&server);
    assert!(quitter
        .fair_lock("q")
        .acquire_timeout(Duration::from_millis(200))
        .unwrap()
        .is_none());
    let queued: usize = redis::cmd("ZCARD")
        .arg("{q}:queue")
        .query(&mut server.con())
        .unwrap();
    assert_eq!(queued, 0);
    // A waiter that died: planted at the head of the queue with a deadline.
    let mut con = server.con();
    let _: () = redis::cmd("ZADD")
        .arg("{q}:queue")
        .arg(0)
        .arg("rl:dead:w")
        .query(&mut con)
        .unwrap();
    let now_ms = common::server_ms(&mut con);
    let _: () = redis::cmd("ZADD")
        .arg("{q}:queue:t")
        .arg(now_ms + 300)
        .arg("rl:dead:w")
        .query(&mut con)
        .unwrap();
    drop(g);
    let other = client_with(&server, |b| b.fallback_poll(Duration::from_millis(100)));
    let start = Instant::now();
    let got = other
        .fair_lock("q")
        .acquire_timeout(Duration::from_secs(5))
        .unwrap();
    assert!(got.is_some(), "a dead waiter stalled the queue");
    // The release opened the lock to the blocked waiters, and the dead one
    // is not among them: it is passed over at once (it held the lock up
    // for its whole entry, 300 ms, before waiters blocked on a shared list).
    assert!(
        start.elapsed() < Duration::from_millis(150),
        "a dead waiter held the lock up for {:?}",
        start.elapsed()
    );
    drop(got);
    // Nobody waits now: its entry is gone with the queue.
    assert!(eventually(Duration::from_secs(3), || {
        redis::cmd("ZCARD")
            .arg("{q}:queue")
            .query::<usize>(&mut con)
            .unwrap()
            == 0
    }));
}

#[test]
fn fair_lock_is_exclusive_and_reentrant() {
    let server = Server::start();
    let c = client(&server);
    let lock = c.fair_lock("fx");
    let g1 = lock.acquire().unwrap();
    let g2 = lock.acquire().unwrap();
    assert_eq!(g1.fencing_token(), g2.fencing_token());
    assert!(client(&server)
        .fair_lock("fx")
        .try_acquire()
        .unwrap()
        .is_none());
    drop((g2, g1));
    assert!(client(&server)
        .fair_lock("fx")
        .try_acquire()
        .unwrap()
        .is_some());
}

fn publishes(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_publish:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Wake-ups cost O(waiters): a permit or read hold released while nobody
/// waits publishes nothing, and a refused `try_acquire` leaves no waiter
/// entry behind that would make later releases publish. A real waiter (in
/// another client, no fallback poll to speak of) is handed the permit by
/// the release, which publishes nothing either: the waiter blocks on its
/// own grant list.
#[test]
fn releases_nobody_waits_for_publish_nothing() {
    let server = Server::start();
    let c = client(&server);
    let other = client_with(&server, |b| b.fallback_poll(Duration::from_secs(60)));
    let mut con = server.con();
    for _ in 0..3 {
        c.semaphore("idle-sem", 2)
            .acquire()
            .unwrap()
            .release()
            .unwrap();
        c.fair_semaphore("idle-fsem", 1)
            .acquire()
            .unwrap()
            .release()
            .unwrap();
        c.rw_lock("idle-rw").read().unwrap().release().unwrap();
        c.rw_lock("idle-rw").write().unwrap().release().unwrap();
        // A latch nobody waits for opens silently.
        let latch = c.count_down_latch("idle-latch");
        assert!(latch.try_set_count(2).unwrap());
        latch.count_down().unwrap();
        latch.count_down().unwrap();
        let p = c.semaphore("busy-sem", 1).acquire().unwrap();
        assert!(other
            .semaphore("busy-sem", 1)
            .try_acquire()
            .unwrap()
            .is_none());
        p.release().unwrap();
    }
    assert_eq!(publishes(&mut con), 0);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    let keys: Vec<&String> = keys.iter().filter(|k| !common::is_fence_floor(k)).collect();
    assert!(keys.is_empty(), "left behind: {keys:?}");

    // A waiter: the release grants it the permit directly.
    let p = c.semaphore("wait-sem", 1).acquire().unwrap();
    let o = other.clone();
    let t = std::thread::spawn(move || {
        let start = Instant::now();
        let got = o
            .semaphore("wait-sem", 1)
            .acquire_timeout(Duration::from_secs(20))
            .unwrap()
            .is_some();
        (got, start.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    p.release().unwrap();
    let (got, waited) = t.join().unwrap();
    assert!(got && waited < Duration::from_secs(5), "{waited:?}");
    assert_eq!(publishes(&mut con), 0);
}

/// A plain semaphore lets a request that fits pass one that does not; the
/// threads of one client used to take turns in one local line, so a thread
/// asking for 1 free permit waited behind its own client's thread asking
/// for 2 (found by an adversarial review: 1.5 s, to its timeout). Each
/// permit count is a line of its own now.
#[test]
fn a_small_request_is_not_held_behind_a_larger_one_of_the_same_client() {
    let server = Server::start();
    let other = client(&server);
    let held = other.semaphore("hol", 2).acquire().unwrap(); // 1 of 2 free
    let c = client(&server);
    let big = c.clone();
    let (started, ready) = std::sync::mpsc::channel();
    let a = std::thread::spawn(move || {
        started.send(()).unwrap();
        big.semaphore("hol", 2)
            .acquire_many_timeout(2, Duration::from_secs(5))
            .unwrap()
            .map(|p| p.release().is_ok())
    });
    ready.recv().unwrap();
    std::thread::sleep(Duration::from_millis(300)); // A waits for 2
    let t = Instant::now();
    let got = c
        .semaphore("hol", 2)
        .acquire_timeout(Duration::from_millis(1_500))
        .unwrap();
    println!(
        "FIGURES a 1-permit request behind a 2-permit one of its client: {} after {:?}",
        got.is_some(),
        t.elapsed()
    );
    assert!(got.is_some(), "the free permit was not taken");
    drop(got);
    drop(held);
    assert_eq!(a.join().unwrap(), Some(true), "the 2-permit request then");
}

/// Handles that disagree on the permit count: the error says so in words,
/// without the script's internal code (`REDLEASE_MISMATCH` showed in the
/// message; a newcomer's trial).
#[test]
fn a_permit_count_mismatch_reads_as_words() {
    let server = Server::start();
    let c = client(&server);
    let _p = c.semaphore("mm", 2).acquire().unwrap();
    let err = c.semaphore("mm", 3).try_acquire().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let text = format!("{err} {err:?}");
    assert!(!text.contains("REDLEASE_"), "{text}");
    assert!(text.contains("disagree"), "{text}");
}

/// Issue 57 item 15: `resize(3)` of an idle semaphore returned `Ok`, then
/// another process's handle still saying 1 took a permit and fixed the
/// count at 1, and the resized handle's `try_acquire` failed with a count
/// mismatch it did not cause. The resize is the latest word: the resized
/// handle puts its count back, and the stale handle is the one told.
#[test]
fn a_resize_of_an_idle_semaphore_is_not_undone_by_a_stale_handle() {
    let server = Server::start();
    let ours = client(&server);
    let theirs = client(&server);
    let resized = ours.semaphore("resized", 1).resize(3).unwrap();
    let stale = theirs.semaphore("resized", 1);
    let p1 = stale.try_acquire().unwrap().expect("a free permit");
    let p2 = resized
        .try_acquire()
        .expect("no mismatch for the resized handle")
        .expect("a permit of 3");
    let p3 = resized.try_acquire().unwrap().expect("a permit of 3");
    assert!(resized.try_acquire().unwrap().is_none(), "only 3 permits");
    let err = stale.try_acquire().unwrap_err();
    assert_eq!(err.kind(), redlease::ErrorKind::InvalidArgument, "{err}");
    for p in [p1, p2, p3] {
        p.release().unwrap();
    }
}
