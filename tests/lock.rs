//! The reentrant lock against a real redis-server.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{blocked_clients, client, client_with, eventually, Server};
use redis::Commands;
use redlease::{Client, ErrorKind};

/// The critical section every exclusion test runs: a non-atomic
/// read-modify-write of a Redis register (a lost update shows an overlap)
/// plus an occupancy counter that must never exceed 1.
fn critical_section(con: &mut redis::Connection, occupancy: &AtomicUsize, max_seen: &AtomicUsize) {
    let inside = occupancy.fetch_add(1, Ordering::SeqCst) + 1;
    max_seen.fetch_max(inside, Ordering::SeqCst);
    let v: i64 = con.get::<_, Option<i64>>("register").unwrap().unwrap_or(0);
    std::thread::yield_now();
    let _: () = con.set("register", v + 1).unwrap();
    occupancy.fetch_sub(1, Ordering::SeqCst);
}

#[test]
fn exclusive_across_threads_and_clients() {
    let server = Server::start();
    let clients: Vec<Client> = (0..3).map(|_| client(&server)).collect();
    let occupancy = Arc::new(AtomicUsize::new(0));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let per_thread = 40;
    let mut handles = Vec::new();
    for c in &clients {
        for _ in 0..3 {
            let c = c.clone();
            let url = server.url();
            let (occ, max) = (occupancy.clone(), max_seen.clone());
            handles.push(std::thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                let lock = c.lock("shared");
                for _ in 0..per_thread {
                    let g = lock.acquire().unwrap();
                    critical_section(&mut con, &occ, &max);
                    g.release().unwrap();
                }
            }));
        }
    }
    for h in handles {
        h.join().unwrap();
    }
    let total: i64 = server.con().get("register").unwrap();
    assert_eq!(total, 9 * per_thread as i64, "lost updates");
    assert_eq!(max_seen.load(Ordering::SeqCst), 1, "two holders at once");
}

#[test]
fn reentrant_on_one_thread_contended_on_another() {
    let server = Server::start();
    let c = client(&server);
    let lock = c.lock("re");
    let g1 = lock.acquire().unwrap();
    let g2 = c.lock("re").acquire().unwrap(); // another handle, same owner
    let g3 = lock.try_acquire().unwrap().expect("re-entry never waits");
    assert_eq!(lock.hold_count(), 3);
    assert_eq!(g1.fencing_token(), g2.fencing_token());
    assert_eq!(g1.fencing_token(), g3.fencing_token());
    // Another thread of the same client is another owner.
    let l2 = lock.clone();
    let other = std::thread::spawn(move || {
        assert_eq!(l2.hold_count(), 0);
        l2.try_acquire().unwrap().is_none()
    });
    assert!(other.join().unwrap());
    // A separate client is another owner too.
    assert!(client(&server).lock("re").try_acquire().unwrap().is_none());
    drop(g3);
    g2.release().unwrap();
    assert_eq!(lock.hold_count(), 1);
    assert!(lock.is_locked().unwrap(), "inner releases keep the lock");
    g1.release().unwrap();
    assert_eq!(lock.hold_count(), 0);
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn fencing_tokens_strictly_increase() {
    let server = Server::start();
    let c = client(&server);
    let other = client(&server);
    let mut last = 0;
    for i in 0..10 {
        let who = if i % 2 == 0 { &c } else { &other };
        let g = who.lock("fence").acquire().unwrap();
        assert!(g.fencing_token() > last);
        last = g.fencing_token();
    }
}

/// Issue 55: the fence floor is raised 15 above the fence that passes it
/// (lua/fence.lua's reserve), so a busy name's hand-overs write it once in
/// 16 draws rather than at every one, and it stays at or above every fence
/// drawn. Before, every draw wrote it: 21 values for 21 draws here.
#[test]
fn a_busy_names_hand_overs_write_the_fence_floor_once_in_sixteen() {
    enum Cmd {
        Take,
        Give,
    }
    let server = Server::start();
    let mut con = server.con();
    // Two workers, each with its own client: a guard stays on its thread.
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let c = client(&server);
            let (cmd_tx, cmd_rx) = crossbeam_channel::unbounded::<Cmd>();
            let (fence_tx, fence_rx) = crossbeam_channel::unbounded::<u64>();
            let t = std::thread::spawn(move || {
                let lock = c.lock("busy");
                let mut held = None;
                while let Ok(cmd) = cmd_rx.recv() {
                    match cmd {
                        Cmd::Take => {
                            let g = lock
                                .acquire_timeout(Duration::from_secs(10))
                                .unwrap()
                                .unwrap();
                            fence_tx.send(g.fencing_token()).unwrap();
                            held = Some(g);
                        }
                        Cmd::Give => held.take().unwrap().release().unwrap(),
                    }
                }
            });
            (cmd_tx, fence_rx, t)
        })
        .collect();
    let floor = |con: &mut redis::Connection| -> u64 { con.get("redlease:fence-floor").unwrap() };
    workers[0].0.send(Cmd::Take).unwrap();
    let mut fences = vec![workers[0].1.recv().unwrap()];
    let mut floors = vec![floor(&mut con)];
    for i in 1..=20 {
        let (next, last) = (&workers[i % 2], &workers[(i + 1) % 2]);
        next.0.send(Cmd::Take).unwrap();
        // Blocked behind the holder: the release hands it over.
        eventually(Duration::from_secs(5), || blocked_clients(&mut con) == 1);
        last.0.send(Cmd::Give).unwrap();
        fences.push(next.1.recv().unwrap());
        floors.push(floor(&mut con));
    }
    workers[0].0.send(Cmd::Give).unwrap();
    for (tx, _, t) in workers {
        drop(tx);
        t.join().unwrap();
    }
    assert!(fences.windows(2).all(|w| w[1] == w[0] + 1), "{fences:?}");
    assert!(
        fences.iter().zip(&floors).all(|(f, low)| low >= f),
        "fences {fences:?}, floors {floors:?}"
    );
    let mut written = floors.clone();
    written.dedup();
    assert_eq!(
        written,
        [fences[0] + 15, fences[16] + 15],
        "floors {floors:?}"
    );
}

#[test]
fn fixed_lease_expires_and_late_release_cannot_touch_new_holder() {
    let server = Server::start();
    let a = client(&server);
    let b = client(&server);
    let g = a
        .lock("fixed")
        .lease(Duration::from_millis(150))
        .acquire()
        .unwrap();
    assert!(g.is_held());
    // No watchdog: b gets the lock once the lease ends.
    let gb = b
        .lock("fixed")
        .acquire_timeout(Duration::from_secs(3))
        .unwrap()
        .expect("the fixed lease must expire");
    assert!(
        !g.is_held(),
        "a fixed lease reports its end without a round trip"
    );
    assert!(gb.fencing_token() > g.fencing_token());
    let err = g.release().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LockLost);
    assert!(
        b.lock("fixed").is_locked().unwrap(),
        "the late release left the new holder alone"
    );
    // (Taken by its pop, b's hold may not name it in the key yet: it is
    // claimed by its first renewal; `inspect` names it either way.)
    let holder = a.inspect("fixed").unwrap().holder.unwrap_or_default();
    assert!(holder.contains(&b.id().simple().to_string()), "{holder}");
    gb.release().unwrap();
}

#[test]
fn watchdog_keeps_lock_for_ten_timeouts() {
    let server = Server::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_millis(400)));
    let other = client(&server);
    let g = c.lock("dog").acquire().unwrap();
    let end = Instant::now() + Duration::from_millis(4_000);
    while Instant::now() < end {
        assert!(other.lock("dog").try_acquire().unwrap().is_none());
        assert!(g.is_held());
        std::thread::sleep(Duration::from_millis(50));
    }
    g.release().unwrap();
    assert!(other.lock("dog").try_acquire().unwrap().is_some());
}

#[test]
fn flushall_is_detected_as_lost_lease() {
    let server = Server::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_millis(300)));
    let g = c.lock("flush").acquire().unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut server.con()).unwrap();
    assert!(eventually(Duration::from_secs(2), || !g.is_held()));
    assert_eq!(g.release().unwrap_err().kind(), ErrorKind::LockLost);
}

#[test]
fn server_restart_is_detected_as_lost_lease() {
    let mut server = Server::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_millis(300)));
    let g = c.lock("restart").acquire().unwrap();
    server.restart();
    assert!(eventually(Duration::from_secs(3), || !g.is_held()));
    assert_eq!(g.release().unwrap_err().kind(), ErrorKind::LockLost);
    // The pool recovers: the lock works again.
    let g2 = c
        .lock("restart")
        .acquire_timeout(Duration::from_secs(3))
        .unwrap();
    assert!(g2.is_some());
}

#[test]
fn non_owner_cannot_release() {
    let server = Server::start();
    let a = client(&server);
    let b = client(&server);
    let ga = a
        .lock("mine")
        .lease(Duration::from_millis(100))
        .acquire()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let gb = b.lock("mine").acquire().unwrap();
    // a's guard is stale: its release must fail and leave b's hold intact.
    assert_eq!(ga.release().unwrap_err().kind(), ErrorKind::LockLost);
    assert!(a.lock("mine").try_acquire().unwrap().is_none());
    assert!(gb.is_held());
    gb.release().unwrap();
}

#[test]
fn force_unlock_wakes_a_waiter() {
    let server = Server::start();
    let holder = client(&server);
    let waiter = client(&server);
    let g = holder.lock("forced").acquire().unwrap();
    let w = waiter.clone();
    let t = std::thread::spawn(move || {
        let start = Instant::now();
        let got = w
            .lock("forced")
            .acquire_timeout(Duration::from_secs(10))
            .unwrap();
        (got.map(|g| g.fencing_token()), start.elapsed())
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(waiter.lock("forced").force_unlock().unwrap());
    let (fence, waited) = t.join().unwrap();
    assert!(fence.unwrap() > g.fencing_token());
    // The watchdog lease is 30 s and the fallback poll 2 s: only the
    // wake-up explains a prompt acquisition.
    assert!(waited < Duration::from_millis(1_500), "waited {waited:?}");
    assert!(eventually(Duration::from_secs(12), || !g.is_held()));
    assert!(
        !waiter.lock("forced").force_unlock().unwrap(),
        "nothing left to remove"
    );
}

#[test]
fn waiter_wakes_on_release_not_by_polling() {
    let server = Server::start();
    let holder = client(&server);
    let waiter = client_with(&server, |b| b.fallback_poll(Duration::from_secs(30)));
    let rounds = 5;
    for i in 0..rounds {
        let g = holder.lock("wake").acquire().unwrap();
        let w = waiter.clone();
        let t = std::thread::spawn(move || {
            let start = Instant::now();
            let g = w
                .lock("wake")
                .acquire_timeout(Duration::from_secs(20))
                .unwrap();
            assert!(g.is_some());
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(100));
        drop(g);
        let waited = t.join().unwrap();
        assert!(
            waited < Duration::from_secs(5),
            "round {i}: waited {waited:?}"
        );
    }
    // Each round's release was delivered by the subscriber.
    assert!(
        waiter.wakeups_delivered() >= rounds,
        "{}",
        waiter.wakeups_delivered()
    );
}

#[test]
fn acquire_timeout_gives_up_near_its_deadline() {
    let server = Server::start();
    let a = client(&server);
    let b = client(&server);
    let _g = a.lock("busy").acquire().unwrap();
    let start = Instant::now();
    let got = b
        .lock("busy")
        .acquire_timeout(Duration::from_millis(300))
        .unwrap();
    let waited = start.elapsed();
    assert!(got.is_none());
    assert!(waited >= Duration::from_millis(300));
    assert!(waited < Duration::from_millis(800), "overshot: {waited:?}");
    assert!(b.lock("busy").try_acquire().unwrap().is_none());
}

#[test]
fn with_lock_returns_value_and_releases_on_panic() {
    let server = Server::start();
    let c = client(&server);
    assert_eq!(c.with_lock("w", || 7).unwrap(), 7);
    let c2 = c.clone();
    let r = std::thread::spawn(move || {
        c2.with_lock("w", || panic!("boom")).unwrap();
    })
    .join();
    assert!(r.is_err(), "the panic continues");
    assert!(
        !c.lock("w").is_locked().unwrap(),
        "the panic released the lock"
    );
    assert_eq!(c.lock("w").hold_count(), 0);
}

#[test]
fn with_lock_reports_a_lost_lease() {
    let server = Server::start();
    let c = client(&server);
    let other = client(&server);
    let r = c.lock("lost").lease(Duration::from_millis(100)).with(|| {
        std::thread::sleep(Duration::from_millis(250));
        let _taken = other.lock("lost").try_acquire().unwrap().expect("expired");
    });
    assert_eq!(r.unwrap_err().kind(), ErrorKind::LockLost);
}

#[test]
fn bad_input_gives_clear_errors() {
    let server = Server::start();
    let c = client(&server);
    let kind = |r: redlease::Result<_>| {
        r.map(|_: Option<redlease::LockGuard>| ())
            .unwrap_err()
            .kind()
    };
    assert_eq!(kind(c.lock("").try_acquire()), ErrorKind::InvalidArgument);
    let huge = vec![b'x'; redlease::MAX_NAME_LEN + 1];
    assert_eq!(
        kind(c.lock(&huge).try_acquire()),
        ErrorKind::InvalidArgument
    );
    assert!(c
        .lock(vec![b'x'; redlease::MAX_NAME_LEN])
        .try_acquire()
        .unwrap()
        .is_some());
    assert_eq!(
        kind(c.lock("z").lease(Duration::ZERO).try_acquire()),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(c.lock("z").lease(Duration::MAX).try_acquire()),
        ErrorKind::InvalidArgument
    );
    // Binary and brace names are fine, and distinct.
    let g1 = c
        .lock([0u8, 255, b'{', b'}'])
        .try_acquire()
        .unwrap()
        .unwrap();
    let g2 = c.lock("}{").try_acquire().unwrap().unwrap();
    drop((g1, g2));
    // Values the library did not write.
    let mut con = server.con();
    let _: () = con.hset("{hash}", "f", "v").unwrap();
    let _: () = con.set("{plain}", "hello").unwrap();
    let _: () = con.set("{badfence}:fence", "nan").unwrap();
    assert_eq!(kind(c.lock("hash").try_acquire()), ErrorKind::WrongType);
    assert_eq!(kind(c.lock("plain").try_acquire()), ErrorKind::WrongType);
    assert_eq!(kind(c.lock("badfence").try_acquire()), ErrorKind::WrongType);
    assert!(
        !c.lock("badfence").is_locked().unwrap(),
        "no lease left behind"
    );
    // Bad URLs and unreachable servers.
    assert_eq!(
        Client::open("nonsense://x").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        Client::open("").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let dead = redis_test::utils::get_random_available_port();
    let start = Instant::now();
    let err = Client::builder()
        .url(format!("redis://127.0.0.1:{dead}/"))
        .pool_timeout(Duration::from_millis(500))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(start.elapsed() < Duration::from_secs(5));
    // Bad builder values.
    for b in [
        Client::builder().url(server.url()).pool_size(0),
        Client::builder()
            .url(server.url())
            .watchdog_timeout(Duration::ZERO),
        Client::builder().url(server.url()).key_prefix("a{b"),
        Client::builder(),
    ] {
        assert_eq!(b.build().unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
}

#[test]
fn pool_exhaustion_is_an_error_not_a_hang() {
    let server = Server::start();
    let c = client_with(&server, |b| {
        b.pool_size(1)
            .pool_timeout(Duration::from_millis(200))
            .response_timeout(Duration::from_secs(5))
    });
    // Occupy the only connection with a command the paused server does not
    // answer. The busy thread must take it first: on a loaded machine a
    // thread spawned 50 ms earlier may not have run yet, and the acquire
    // below would then hold the connection itself, for the 5 s timeout.
    server.pause();
    let c2 = c.clone();
    let (started, ready) = std::sync::mpsc::channel();
    let busy = std::thread::spawn(move || {
        started.send(()).unwrap();
        let _ = c2.lock("slow").is_locked();
    });
    ready.recv().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let err = c.lock("other").try_acquire().unwrap_err();
    server.resume();
    busy.join().unwrap();
    assert!(
        matches!(err.kind(), ErrorKind::Pool | ErrorKind::Connection),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}: {err:?}",
        start.elapsed()
    );
}

#[test]
fn key_prefix_namespaces_keys() {
    let server = Server::start();
    let c = client_with(&server, |b| b.key_prefix("app:"));
    let g = c.lock("k").acquire().unwrap();
    let exists: bool = server.con().exists("app:{k}").unwrap();
    assert!(exists);
    assert!(
        client(&server).lock("k").try_acquire().unwrap().is_some(),
        "other namespace"
    );
    g.release().unwrap();
}

/// Reproduction (newcomer review): the holder's note (`annotate`, which
/// the CLI writes) stayed until the lease's end after a release, although
/// a name nobody holds or waits for leaves no key.
#[test]
fn a_released_lock_leaves_no_note_behind() {
    let server = Server::start();
    let c = client(&server);
    let g = c.lock("noted-release").acquire().unwrap();
    assert!(g.annotate("host=a pid=1").unwrap());
    let mut con = server.con();
    let note: bool = redis::cmd("EXISTS")
        .arg("{noted-release}:note")
        .query(&mut con)
        .unwrap();
    assert!(note, "the note is stored beside the lock");
    g.release().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*noted-release*")
        .query(&mut con)
        .unwrap();
    assert!(keys.is_empty(), "left {keys:?}");
}

/// Redis work under a lock without plumbing: one error type through the
/// closure (`E: From<redlease::Error>`), and a connection from the
/// client's own pool with the hold's fence (a newcomer's trial opened a
/// `redis` connection per task and unpicked `Result<Result<T, E>, Error>`).
#[test]
fn fallible_work_under_a_lock_with_the_clients_own_connection() {
    use redis::Commands;
    #[derive(Debug)]
    enum JobError {
        #[allow(dead_code)] // shown by Debug only
        Lock(redlease::Error),
        Bad(&'static str),
    }
    impl From<redlease::Error> for JobError {
        fn from(e: redlease::Error) -> Self {
            JobError::Lock(e)
        }
    }
    let server = common::Server::start();
    let c = common::client(&server);
    // f's own error comes back as it was, and the lock is released.
    let r: Result<(), JobError> = c.lock("job").with_result(|| Err(JobError::Bad("no")));
    assert!(matches!(r, Err(JobError::Bad("no"))), "{r:?}");
    assert!(!c.lock("job").is_locked().unwrap());
    let r: Result<u32, JobError> = c.with_lock_result("job", || Ok(7));
    assert!(matches!(r, Ok(7)));
    // The connection and the fence of the hold.
    let total: i64 = c
        .lock("account")
        .with_connection(|con, fence| {
            assert!(fence > 0);
            let _: () = con.set("account:fence", fence)?;
            let total: i64 = con.incr("account:balance", 10)?;
            Ok::<_, redlease::Error>(total)
        })
        .unwrap();
    assert_eq!(total, 10);
    let mut raw = server.con();
    let fence: u64 = raw.get("account:fence").unwrap();
    assert!(fence > 0);
    assert!(!c.lock("account").is_locked().unwrap());
    // A lent connection goes back to the pool: many more than the pool
    // holds, one after the other.
    for _ in 0..50 {
        let mut con = c.connection().unwrap();
        let _: String = redis::cmd("PING").query(&mut con).unwrap();
    }
    // The redis crate redlease is built on, re-exported: its traits apply
    // to the lent connection whatever `redis` the application depends on
    // (issue 57 item 9: with `redis = "0.27"`, `con.set` was E0599).
    {
        use redlease::redis::Commands;
        let mut con = c.connection().unwrap();
        let _: () = con.set("reexported", 1).unwrap();
        let got: i64 = con.get("reexported").unwrap();
        assert_eq!(got, 1);
    }
    // Not on Redlock, where a command's server depends on its keys.
    let other = common::Server::start();
    let redlock = redlease::Client::builder()
        .redlock([server.url(), other.url()])
        .build()
        .unwrap();
    assert_eq!(
        redlock.connection().unwrap_err().kind(),
        redlease::ErrorKind::Unsupported
    );
}

/// The fence floor (lua/fence.lua) holding something redlease did not
/// write: every acquisition is refused as `WrongType` and *nothing* is
/// written — no counter left behind — so once the floor is repaired the
/// name's fences go on growing. Before, the counter's INCR ran first and
/// stayed (1, no expiry), and the fence after the repair was 3 where
/// 1795642277938951 had been handed out (an adversarial review). Values
/// that are not integers Lua holds exactly are foreign too (`inf` gave a
/// fence of -2^63, 2^53 a duplicate fence).
#[test]
fn a_foreign_fence_floor_writes_nothing_and_fences_never_go_back() {
    let server = Server::start();
    let c = client(&server);
    let mut con = server.con();
    let first = {
        let g = c.lock("ff").acquire().unwrap();
        let f = g.fencing_token();
        g.release().unwrap();
        f
    };
    for bad in [
        "garbage",
        "inf",
        "1e300",
        "9223372036854775807",
        "9007199254740992",
        "nan",
        "-5",
        "1.5",
    ] {
        let _: () = con.set("redlease:fence-floor", bad).unwrap();
        for _ in 0..2 {
            let err = c.lock("ff").try_acquire().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::WrongType, "floor {bad:?}: {err}");
        }
        let left: bool = con.exists("{ff}:fence").unwrap();
        assert!(!left, "floor {bad:?}: a counter was left behind");
        assert!(!c.lock("ff").is_locked().unwrap(), "floor {bad:?}");
    }
    let _: () = con.del("redlease:fence-floor").unwrap();
    let g = c.lock("ff").acquire().unwrap();
    assert!(
        g.fencing_token() > first,
        "fence {} after {first}",
        g.fencing_token()
    );
}

/// Every primitive works over a Unix socket (`redis+unix://`), the
/// connection redlease's own: a lock handed to a waiter blocked on the
/// server, and a latch opened to one waiting for its message.
#[test]
fn a_unix_socket_url_works_with_waiters() {
    let dir = std::env::temp_dir().join(format!("redlease-unix-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("r.sock");
    let _server = Server::start_with(&["--unixsocket", sock.to_str().unwrap()]);
    let url = format!("redis+unix://{}", sock.display());
    let (a, b) = (Client::open(&url).unwrap(), Client::open(&url).unwrap());
    let g = a.lock("u").acquire().unwrap();
    let t = std::thread::spawn(move || {
        let g = b
            .lock("u")
            .acquire_timeout(Duration::from_secs(10))
            .unwrap();
        let got = g.is_some();
        drop(g);
        let latch = b.count_down_latch("u:latch");
        (got, latch.wait_timeout(Duration::from_secs(10)).unwrap())
    });
    std::thread::sleep(Duration::from_millis(300));
    let latch = a.count_down_latch("u:latch");
    assert!(latch.try_set_count(1).unwrap());
    g.release().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    latch.count_down().unwrap();
    assert_eq!(t.join().unwrap(), (true, true));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A free name whose queue holds a live waiter (its holder's lease ran out
/// with nobody to hand it on) is not taken by a newcomer: the newcomer's
/// attempt opens it to the waiters and waits. A hand-over nobody took,
/// left on the open list, is cleared by the next acquisition. The
/// uncontended acquisition tells both apart from the usual case (nothing
/// queued, nothing open) in one call, and this is what that call must not
/// skip.
#[test]
fn a_free_name_with_a_live_waiter_queued_is_not_taken_by_a_newcomer() {
    let server = Server::start();
    let c = client(&server);
    let mut con = server.con();
    // A waiter queued, alive for another minute, not blocked right now.
    common::plant_live_waiter(
        &mut con,
        Some("{ahead}:queue"),
        "{ahead}:queue:t",
        "rl:live:w",
    );
    let got = c.lock("ahead").try_acquire().unwrap();
    assert!(
        got.is_none(),
        "a newcomer took a name a live waiter queued for"
    );
    let value: String = con.get("{ahead}").unwrap();
    assert!(
        value.starts_with("rl:grant#"),
        "not opened to the waiters: {value}"
    );
    // A hand-over's fence left on the open list, the queue gone with its
    // waiters: the next acquisition of the free name clears it.
    let _: () = con.rpush("{left}:grant:open", "7").unwrap();
    let g = c
        .lock("left")
        .try_acquire()
        .unwrap()
        .expect("a dead hand-over kept the name");
    let open: bool = con.exists("{left}:grant:open").unwrap();
    assert!(!open, "the dead hand-over's list stayed");
    drop(g);
}
