//! The read-write lock against a real redis-server.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{client, client_with, eventually, no_poll, Server};
use redis::Commands;
use redlease::{Client, ErrorKind};

#[test]
fn readers_share_writers_exclude() {
    let server = Server::start();
    let clients: Vec<Client> = (0..2).map(|_| client(&server)).collect();
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let max_readers = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let register = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for (i, c) in clients.iter().cycle().take(6).enumerate() {
        let c = c.clone();
        let (readers, writers, max_readers, violations, register) = (
            readers.clone(),
            writers.clone(),
            max_readers.clone(),
            violations.clone(),
            register.clone(),
        );
        handles.push(std::thread::spawn(move || {
            let rw = c.rw_lock("cfg");
            for _ in 0..25 {
                if i % 3 == 0 {
                    let g = rw.write().unwrap();
                    if writers.fetch_add(1, Ordering::SeqCst) != 0
                        || readers.load(Ordering::SeqCst) != 0
                    {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    // Non-atomic read-modify-write: only safe under the write lock.
                    let v = register.load(Ordering::SeqCst);
                    std::thread::sleep(Duration::from_micros(200));
                    register.store(v + 1, Ordering::SeqCst);
                    writers.fetch_sub(1, Ordering::SeqCst);
                    g.release().unwrap();
                } else {
                    let g = rw.read().unwrap();
                    let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    max_readers.fetch_max(now, Ordering::SeqCst);
                    if writers.load(Ordering::SeqCst) != 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    readers.fetch_sub(1, Ordering::SeqCst);
                    g.release().unwrap();
                }
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(violations.load(Ordering::SeqCst), 0);
    assert_eq!(register.load(Ordering::SeqCst), 2 * 25, "lost updates");
    assert!(
        max_readers.load(Ordering::SeqCst) >= 2,
        "readers never overlapped"
    );
}

#[test]
fn reentrant_reads_and_writes_and_downgrade() {
    let server = Server::start();
    let c = client(&server);
    let rw = c.rw_lock("re");
    let w1 = rw.write().unwrap();
    let w2 = rw.write().unwrap();
    assert_eq!(w1.fencing_token(), w2.fencing_token());
    // Downgrade: the writer may read.
    let r1 = rw.read().unwrap();
    let r2 = rw.try_read().unwrap().unwrap();
    assert_eq!(rw.hold_counts(), (2, 2));
    drop(w2);
    w1.release().unwrap();
    // Still reading: another writer is excluded, another reader is not.
    let other = client(&server);
    assert!(other.rw_lock("re").try_write().unwrap().is_none());
    let r_other = other
        .rw_lock("re")
        .try_read()
        .unwrap()
        .expect("readers share");
    drop((r1, r2, r_other));
    assert!(other.rw_lock("re").try_write().unwrap().is_some());
}

#[test]
fn upgrade_is_an_error_not_a_deadlock() {
    let server = Server::start();
    let c = client(&server);
    let rw = c.rw_lock("up");
    let _r = rw.read().unwrap();
    let err = rw.write_timeout(Duration::from_secs(5)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldDeadlock);
}

#[test]
fn one_readers_expiry_or_release_does_not_end_anothers() {
    let server = Server::start();
    let a = client(&server);
    let b = client(&server);
    let short = a
        .rw_lock("rd")
        .lease(Duration::from_millis(200))
        .read()
        .unwrap();
    let long = b.rw_lock("rd").read().unwrap(); // watchdog
    std::thread::sleep(Duration::from_millis(400));
    assert!(!short.is_held());
    assert_eq!(a.rw_lock("rd").state().unwrap(), (false, 1));
    assert_eq!(short.release().unwrap_err().kind(), ErrorKind::LockLost);
    assert!(long.is_held());
    // The live reader still excludes writers.
    assert!(a.rw_lock("rd").try_write().unwrap().is_none());
    long.release().unwrap();
    assert!(a.rw_lock("rd").try_write().unwrap().is_some());
}

#[test]
fn writer_is_not_starved_by_a_stream_of_readers() {
    let server = Server::start();
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..4 {
        let c = client(&server);
        let stop = stop.clone();
        readers.push(std::thread::spawn(move || {
            let rw = c.rw_lock("stream");
            let end = Instant::now() + Duration::from_secs(20);
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) && Instant::now() < end {
                if let Some(g) = rw.read_timeout(Duration::from_millis(200)).unwrap() {
                    std::thread::sleep(Duration::from_millis(20));
                    drop(g);
                    n += 1;
                }
            }
            n
        }));
    }
    std::thread::sleep(Duration::from_millis(200));
    let writer = client(&server);
    let start = Instant::now();
    let g = writer
        .rw_lock("stream")
        .write_timeout(Duration::from_secs(10))
        .unwrap();
    let waited = start.elapsed();
    stop.store(true, Ordering::SeqCst);
    assert!(g.is_some(), "the writer starved");
    assert!(waited < Duration::from_secs(3), "writer waited {waited:?}");
    drop(g);
    let reads: usize = readers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(reads > 0);
}

/// A writer that died while queued holds new readers back at most a claim
/// window (0.5 s): its queue entry says nothing of its life (a blocked
/// writer sends nothing), so the first reader to ask pushes a probe that
/// only a live blocked writer pops; one nobody popped proves the queue
/// dead. (It used to be an intent the writer renewed every slice.)
#[test]
fn a_dead_writers_queue_entry_holds_readers_back_briefly() {
    let server = Server::start();
    let c = client_with(&server, |b| b.fallback_poll(Duration::from_millis(100)));
    let reader = c.rw_lock("intent").read().unwrap();
    // A writer that queued and "died" (we plant its entries as it would).
    let mut con = server.con();
    let now_ms = common::server_ms(&mut con);
    for (key, score) in [
        ("{intent}:rw:wq", now_ms * 1000),
        ("{intent}:rw:wq:t", now_ms + 75_000),
    ] {
        let _: () = redis::cmd("ZADD")
            .arg(key)
            .arg(score)
            .arg("rl:dead:writer")
            .query(&mut con)
            .unwrap();
    }
    let other = client(&server);
    assert!(
        other.rw_lock("intent").try_read().unwrap().is_none(),
        "a queued writer holds readers back until it is known dead"
    );
    let start = Instant::now();
    let g = other
        .rw_lock("intent")
        .read_timeout(Duration::from_secs(3))
        .unwrap();
    println!(
        "FIGURES a reader behind a dead queued writer got in after {:?}",
        start.elapsed()
    );
    assert!(
        g.is_some(),
        "a dead writer's entry must not hold readers back"
    );
    assert!(
        start.elapsed() < Duration::from_millis(1_500),
        "{:?}",
        start.elapsed()
    );
    drop((g, reader));
}

/// A live writer queued behind readers holds new readers back, however long
/// they come (its process answers the probes without waking its thread:
/// the writer's script does).
#[test]
fn a_live_queued_writer_holds_new_readers_back() {
    let server = Server::start();
    let c = client(&server);
    let reader = c.rw_lock("live-w").read().unwrap();
    let w = no_poll(&server.url());
    let t = std::thread::spawn(move || {
        let g = w
            .rw_lock("live-w")
            .write_timeout(Duration::from_secs(20))
            .unwrap();
        g.map(|g| g.fencing_token())
    });
    std::thread::sleep(Duration::from_millis(300)); // queued and blocked
    let other = client(&server);
    for _ in 0..4 {
        // Spread over more than the 1 s a probe's answer lasts.
        let r = other
            .rw_lock("live-w")
            .read_timeout(Duration::from_millis(600))
            .unwrap();
        assert!(r.is_none(), "a reader passed a live queued writer");
    }
    drop(reader);
    assert!(t.join().unwrap().is_some());
}

#[test]
fn a_free_write_hold_with_a_live_writer_queued_is_not_taken_by_a_newcomer() {
    let server = Server::start();
    let c = client(&server);
    let mut con = server.con();
    // A writer queued, alive for another minute, not blocked right now.
    common::plant_live_waiter(
        &mut con,
        Some("{ahead}:rw:wq"),
        "{ahead}:rw:wq:t",
        "rl:live:w",
    );
    let got = c.rw_lock("ahead").try_write().unwrap();
    assert!(
        got.is_none(),
        "a newcomer took a write hold a live writer queued for"
    );
    let value: String = con.get("{ahead}:rw:w").unwrap();
    assert!(
        value.starts_with("rl:grant#"),
        "not opened to the writers: {value}"
    );
    // A hand-over's fence left on the open list, the queue gone with its
    // writers: the next write acquisition of the free name clears it.
    let _: () = con.rpush("{left}:rw:grant:open", "7").unwrap();
    let g = c
        .rw_lock("left")
        .try_write()
        .unwrap()
        .expect("a dead hand-over kept the write hold");
    let open: bool = con.exists("{left}:rw:grant:open").unwrap();
    assert!(!open, "the dead hand-over's list stayed");
    drop(g);
    // A reader holds, nothing else: a writer waits for it.
    let r = c.rw_lock("read").read().unwrap();
    let got = client(&server).rw_lock("read").try_write().unwrap();
    assert!(got.is_none(), "a writer took a name a reader holds");
    drop(r);
}

#[test]
fn a_first_reader_yields_to_queued_writers_keeps_other_leases_and_leaves_no_wait() {
    let server = Server::start();
    let c = client(&server);
    let mut con = server.con();
    // A writer queued, alive for another minute, not blocked right now:
    // the first reader of the free name opens it to the writers instead.
    common::plant_live_waiter(&mut con, Some("{wq}:rw:wq"), "{wq}:rw:wq:t", "rl:live:w");
    let got = c.rw_lock("wq").try_read().unwrap();
    assert!(got.is_none(), "a reader passed a live queued writer");
    let value: String = con.get("{wq}:rw:w").unwrap();
    assert!(
        value.starts_with("rl:grant#"),
        "not opened to the writers: {value}"
    );
    // Another reader holds for two more minutes: a new reader with a
    // shorter lease must not cut the set's life to its own.
    let far = common::server_ms(&mut con) + 120_000;
    let _: () = con.zadd("{long}:rw:r", "rl:long:r", far).unwrap();
    let _: () = con.pexpire("{long}:rw:r", 120_000).unwrap();
    let r = c.rw_lock("long").read().unwrap();
    let life: i64 = con.pttl("{long}:rw:r").unwrap();
    assert!(life > 60_000, "the readers' set lives {life} ms only");
    drop(r);
    // A reader that waited for a writer is struck from the waiting
    // readers once it gets in.
    let w = c.rw_lock("waited").write().unwrap();
    let r = no_poll(&server.url());
    let t = std::thread::spawn(move || {
        r.rw_lock("waited")
            .read_timeout(Duration::from_secs(20))
            .unwrap()
            .map(|g| g.release())
    });
    let waiting = eventually(Duration::from_secs(10), || {
        con.exists::<_, bool>("{waited}:rw:rq").unwrap()
    });
    assert!(waiting, "the reader never registered as waiting");
    drop(w);
    // The reader got in and left again (its release does not touch the
    // waiting readers).
    t.join().unwrap().expect("the reader never got in").unwrap();
    let left: bool = con.exists("{waited}:rw:rq").unwrap();
    assert!(!left, "a reader that got in is still listed as waiting");
}

#[test]
fn write_release_wakes_readers_and_renewal_covers_both() {
    let server = Server::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_millis(300)));
    let rw = c.rw_lock("renew");
    let w = rw.write().unwrap();
    let other = client(&server);
    let t = std::thread::spawn(move || {
        let g = other
            .rw_lock("renew")
            .read_timeout(Duration::from_secs(5))
            .unwrap();
        g.is_some()
    });
    std::thread::sleep(Duration::from_millis(1000)); // > 3 leases
    assert!(w.is_held());
    w.release().unwrap();
    assert!(t.join().unwrap());
    let r = rw.read().unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    assert!(r.is_held());
    assert_eq!(rw.state().unwrap(), (false, 1));
    let _: () = redis::cmd("FLUSHALL").query(&mut server.con()).unwrap();
    assert!(eventually(Duration::from_secs(2), || !r.is_held()));
}

#[test]
fn write_fencing_tokens_increase() {
    let server = Server::start();
    let c = client(&server);
    let a = c.rw_lock("f").write().unwrap().fencing_token();
    let b = client(&server)
        .rw_lock("f")
        .write()
        .unwrap()
        .fencing_token();
    assert!(b > a);
}

#[test]
fn bad_input() {
    let server = Server::start();
    let c = client(&server);
    assert_eq!(
        c.rw_lock("").try_read().unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        c.rw_lock("x")
            .lease(Duration::ZERO)
            .try_write()
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    let _: () = redis::cmd("SET")
        .arg("{str}:rw:r")
        .arg("x")
        .query(&mut server.con())
        .unwrap();
    assert_eq!(
        c.rw_lock("str").try_read().unwrap_err().kind(),
        ErrorKind::WrongType
    );
}

#[test]
fn downgrade_does_not_queue_behind_a_local_writer() {
    let server = Server::start();
    let c = client(&server);
    let rw = c.rw_lock("dg");
    let w = rw.write().unwrap();
    // Another thread of the same client queues for the write lock.
    let rw2 = rw.clone();
    let t = std::thread::spawn(move || {
        let g = rw2.write_timeout(Duration::from_secs(10)).unwrap();
        g.map(|g| g.fencing_token())
    });
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let r = rw.read_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        r.is_some(),
        "the downgrade waited for the writer queued behind us"
    );
    assert!(start.elapsed() < Duration::from_secs(1));
    let first = w.fencing_token();
    drop(w);
    // The queued writer still waits for our read hold.
    std::thread::sleep(Duration::from_millis(200));
    assert!(!t.is_finished());
    drop(r);
    assert!(t.join().unwrap().unwrap() > first);
}

/// A try never queues (review of the write lock's direct grant): `try_write`
/// used to leave a writer's intent for up to 7 s, which kept readers out
/// though nobody held or waited for the write lock. Two ways: a try refused
/// while readers held wrote the intent, withdrawn a round trip later (readers
/// trying meanwhile were refused); and a try whose reply was late left it
/// for its whole lifetime.
#[test]
fn a_write_try_never_keeps_readers_out() {
    let server = Server::start();
    let holder = client(&server);
    let _read = holder.rw_lock("tw").read().unwrap();

    // Tries of the write lock beside tries of a read lock, from two clients.
    let writer = client(&server);
    let end = Instant::now() + Duration::from_millis(1_500);
    let tries = std::thread::spawn(move || {
        let rw = writer.rw_lock("tw");
        let mut n = 0;
        while Instant::now() < end && n < 20_000 {
            assert!(rw.try_write().unwrap().is_none());
            n += 1;
        }
        n
    });
    let reader = client(&server);
    let rw = reader.rw_lock("tw");
    let (mut ok, mut refused) = (0, 0);
    while Instant::now() < end && ok + refused < 20_000 {
        match rw.try_read().unwrap() {
            Some(g) => {
                ok += 1;
                g.release().unwrap();
            }
            None => refused += 1,
        }
    }
    let tries = tries.join().unwrap();
    println!("FIGURES write tries beside read tries: {tries} write tries; reads {ok} ok, {refused} refused");
    assert!(tries > 0 && ok > 0);
    assert_eq!(refused, 0, "a write try kept readers out");

    // A try whose reply is late: the server stalls 0.3 s, the response
    // timeout is 100 ms.
    let late = client_with(&server, |b| b.response_timeout(Duration::from_millis(100)));
    assert!(late.rw_lock("tw").try_write().unwrap().is_none()); // scripts loaded
    let url = server.url();
    let stall = std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.3")
            .query(&mut con)
            .unwrap();
    });
    std::thread::sleep(Duration::from_millis(50));
    let r = late.rw_lock("tw").try_write();
    assert!(!matches!(r, Ok(Some(_))), "readers hold: {r:?}");
    stall.join().unwrap();
    let t = Instant::now();
    let got = rw.read_timeout(Duration::from_secs(10)).unwrap();
    println!(
        "FIGURES a reader after a late write try got in after {:?}",
        t.elapsed()
    );
    assert!(got.is_some());
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "a late write try kept readers out for {:?}",
        t.elapsed()
    );
}
