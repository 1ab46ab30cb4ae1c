//! Re-entry that can be refused: work-stealing pools (rayon) run unrelated
//! tasks on a thread that waits inside a critical section, and per-thread
//! reentrancy lets such a task in as a "re-entry".

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{client_with, Server};
use redis::Commands;
use redlease::{Client, ErrorKind};
use serial_test::serial;

/// Who is inside the critical section right now, and the most ever at once.
#[derive(Default)]
struct Occupancy {
    now: usize,
    max: usize,
}

fn enter(o: &Mutex<Occupancy>) {
    let mut o = o.lock().unwrap();
    o.now += 1;
    o.max = o.max.max(o.now);
}

fn leave(o: &Mutex<Occupancy>) {
    o.lock().unwrap().now -= 1;
}

/// The reproduction: task A holds "L" across a nested `rayon::join`
/// whose second half is stolen; while A's worker waits for it, it picks up
/// task C, which asks for "L" on the same thread. Returns the most tasks
/// ever inside at once and what C got.
fn nested_join(lock: redlease::Lock) -> (usize, Result<(), ErrorKind>) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let occupancy = Arc::new(Mutex::new(Occupancy::default()));
    let (tx, rx) = crossbeam_channel::bounded(2);
    {
        let (lock, occupancy, tx) = (lock.clone(), occupancy.clone(), tx.clone());
        pool.spawn(move || {
            let r = lock.with(|| {
                enter(&occupancy);
                rayon::join(
                    || std::thread::sleep(Duration::from_millis(20)),
                    || std::thread::sleep(Duration::from_millis(300)),
                );
                leave(&occupancy);
            });
            let _ = tx.send(("A", r.map_err(|e| e.kind())));
        });
    }
    std::thread::sleep(Duration::from_millis(10));
    {
        let (lock, occupancy) = (lock.clone(), occupancy.clone());
        pool.spawn(move || {
            let r = lock.with(|| {
                enter(&occupancy);
                std::thread::sleep(Duration::from_millis(20));
                leave(&occupancy);
            });
            let _ = tx.send(("C", r.map_err(|e| e.kind())));
        });
    }
    let mut c = Ok(());
    for _ in 0..2 {
        let (who, r) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        if who == "A" {
            assert_eq!(r, Ok(()), "task A failed");
        } else {
            c = r;
        }
    }
    let max = occupancy.lock().unwrap().max;
    (max, c)
}

#[test]
#[serial]
fn nested_parallelism_under_a_non_reentrant_lock_lets_one_task_in() {
    let server = Server::start();
    let client = client_with(&server, |b| b);
    for run in 0..3 {
        let (max, c) = nested_join(client.lock("L").non_reentrant());
        println!("FIGURES non_reentrant run {run}: at most {max} inside, task C: {c:?}");
        assert_eq!(max, 1, "two tasks inside a non-reentrant lock");
        assert!(matches!(c, Ok(()) | Err(ErrorKind::WouldDeadlock)), "{c:?}");
    }
    let strict = client_with(&server, |b| b.reentrant(false));
    let (max, c) = nested_join(strict.lock("L"));
    println!("FIGURES reentrant(false): at most {max} inside, task C: {c:?}");
    assert_eq!(max, 1);
    assert!(matches!(c, Ok(()) | Err(ErrorKind::WouldDeadlock)), "{c:?}");
}

#[test]
#[serial]
fn a_second_acquire_on_one_thread_is_would_deadlock_at_once() {
    let server = Server::start();
    let client = client_with(&server, |b| b);
    let strict = client_with(&server, |b| b.reentrant(false));
    let check = |name: &str, second: &dyn Fn() -> redlease::Result<()>| {
        let t = Instant::now();
        let e = second().expect_err(name);
        let took = t.elapsed();
        assert_eq!(e.kind(), ErrorKind::WouldDeadlock, "{name}: {e}");
        assert!(took < Duration::from_millis(50), "{name} took {took:?}");
    };
    for (label, lock) in [
        ("lock", client.lock("d").non_reentrant()),
        ("fair", client.fair_lock("df").non_reentrant()),
        ("client-wide", strict.lock("dc")),
    ] {
        let g = lock.acquire().unwrap();
        let fence = g.fencing_token();
        check(label, &|| lock.acquire().map(drop));
        check(label, &|| lock.try_acquire().map(drop));
        check(label, &|| {
            lock.acquire_timeout(Duration::from_secs(1)).map(drop)
        });
        check(label, &|| lock.with(|| ()));
        assert!(g.is_held());
        assert_eq!(lock.hold_count(), 1);
        assert!(lock.is_locked().unwrap());
        assert_eq!(g.fencing_token(), fence);
        g.release().unwrap();
        assert!(!lock.is_locked().unwrap());
    }
    let rw = client.rw_lock("drw").non_reentrant();
    let w = rw.write().unwrap();
    check("write", &|| rw.try_write().map(drop));
    // A downgrade is a different hold: still allowed.
    let r = rw.read().unwrap();
    check("read", &|| rw.try_read().map(drop));
    drop(r);
    w.release().unwrap();
}

#[test]
#[serial]
fn rayon_tasks_under_a_non_reentrant_lock_lose_no_update() {
    let server = Server::start();
    let client = client_with(&server, |b| b);
    let lock = client.lock("counter").non_reentrant();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    let url = server.url();
    let tasks = 200;
    pool.install(|| {
        use rayon::prelude::*;
        (0..tasks).into_par_iter().for_each_init(
            || {
                redis::Client::open(url.as_str())
                    .unwrap()
                    .get_connection()
                    .unwrap()
            },
            |con, _| {
                lock.with(|| {
                    // A non-atomic read-modify-write: lost without exclusion.
                    let v: i64 = con.get::<_, Option<i64>>("register").unwrap().unwrap_or(0);
                    std::thread::yield_now();
                    let _: () = con.set("register", v + 1).unwrap();
                })
                .unwrap();
            },
        );
    });
    let v: i64 = server.con().get("register").unwrap();
    assert_eq!(v, tasks);
}

#[test]
#[serial]
fn default_handles_still_reenter() {
    let server = Server::start();
    let client: Client = client_with(&server, |b| b);
    let lock = client.lock("re");
    let a = lock.acquire().unwrap();
    let b = lock.acquire().unwrap();
    assert_eq!(a.fencing_token(), b.fencing_token());
    assert_eq!(lock.hold_count(), 2);
    drop(b);
    drop(a);
    let rw = client.rw_lock("rer");
    let r1 = rw.read().unwrap();
    let r2 = rw.read().unwrap();
    assert_eq!(rw.hold_counts(), (2, 0));
    drop((r1, r2));
}
