//! Fault injection: separate processes, paused and killed holders, server
//! faults, ambiguous replies. Every test bounds its own time. Figures are
//! printed (`cargo test --test process_faults -- --nocapture`) and quoted in
//! GUARANTEES.md.
//!
//! Child processes are this test binary itself, re-run with
//! `REDLEASE_FAULT_WORKER=<role>`: see `worker_entry`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::worker::{say, Worker};
use common::{client, client_with, eventually, Server};
use redis::Commands;
use redlease::{Client, ErrorKind};
use serial_test::serial;

const FENCED_SET: &str = r"
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < seen then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1";

fn fenced_write(con: &mut redis::Connection, token: u64, value: &str) -> bool {
    redis::Script::new(FENCED_SET)
        .key("resource")
        .key("resource:seen")
        .arg(token)
        .arg(value)
        .invoke::<i64>(con)
        .unwrap()
        == 1
}

/// A child process running `worker_entry` in the given role.
fn fault_worker(role: &str, url: &str, extra: &[(&str, String)]) -> Worker {
    let mut env = vec![
        ("REDLEASE_FAULT_WORKER", role.to_string()),
        ("REDLEASE_FAULT_URL", url.to_string()),
    ];
    env.extend(extra.iter().cloned());
    Worker::spawn("worker_entry", &env)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The child side. Does nothing unless run as a worker.
#[test]
fn worker_entry() {
    let Ok(role) = std::env::var("REDLEASE_FAULT_WORKER") else {
        return;
    };
    let url = std::env::var("REDLEASE_FAULT_URL").unwrap();
    let watchdog = Duration::from_millis(env_u64("REDLEASE_FAULT_WATCHDOG_MS", 30_000));
    let response = Duration::from_millis(env_u64("REDLEASE_FAULT_RESPONSE_MS", 2_000));
    let client = Client::builder()
        .url(&url)
        .watchdog_timeout(watchdog)
        .response_timeout(response)
        .build()
        .unwrap();
    match role.as_str() {
        "exclusion" => {
            let threads = env_u64("REDLEASE_FAULT_THREADS", 4) as usize;
            let iters = env_u64("REDLEASE_FAULT_ITERS", 50) as usize;
            let keys = env_u64("REDLEASE_FAULT_KEYS", 3) as usize;
            let overlaps = Arc::new(AtomicUsize::new(0));
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (client, url, overlaps) = (client.clone(), url.clone(), overlaps.clone());
                    std::thread::spawn(move || {
                        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                        for i in 0..iters {
                            let k = (i + t) % keys;
                            let g = client.lock(format!("ex:{k}")).acquire().unwrap();
                            let inside: i64 = con.incr(format!("occ:{k}"), 1).unwrap();
                            if inside > 1 {
                                overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            // Non-atomic read-sleep-write of the register.
                            let v: i64 = con
                                .get::<_, Option<i64>>(format!("reg:{k}"))
                                .unwrap()
                                .unwrap_or(0);
                            std::thread::sleep(Duration::from_micros(100));
                            let _: () = con.set(format!("reg:{k}"), v + 1).unwrap();
                            let _: i64 = con.decr(format!("occ:{k}"), 1).unwrap();
                            g.release().unwrap();
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            say(format!(
                "done {} {}",
                threads * iters,
                overlaps.load(Ordering::SeqCst)
            ));
        }
        "holder" => {
            let g = client.lock("paused").acquire().unwrap();
            say(format!("acquired {}", g.fencing_token()));
            // Wait for the parent's "go" (sent after SIGCONT), then report
            // what a resumed holder sees, in order.
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
            let resumed = Instant::now();
            let period = watchdog / 3;
            let seen_lost = eventually(period + Duration::from_millis(200), || !g.is_held());
            say(format!(
                "lost {} {}",
                seen_lost,
                resumed.elapsed().as_millis()
            ));
            let mut con = redis::Client::open(url.as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            say(format!(
                "write {}",
                fenced_write(&mut con, g.fencing_token(), "stale holder")
            ));
            let kind = g.release().map_err(|e| format!("{:?}", e.kind()));
            say(format!("release {kind:?}"));
        }
        "stopped_release" => {
            let g = client.lock("stopped").acquire().unwrap();
            say("acquired");
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
            say("releasing");
            let kind = g.release().map_err(|e| format!("{:?}", e.kind()));
            say(format!("release {kind:?}"));
        }
        "crash" => {
            let _g = client.lock("crash").acquire().unwrap();
            say("acquired");
            std::thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
#[serial]
fn mutual_exclusion_across_processes_under_load() {
    let server = Server::start();
    let (processes, threads, iters, keys) = (4, 4, 150, 3);
    let start = Instant::now();
    let workers: Vec<Worker> = (0..processes)
        .map(|_| {
            fault_worker(
                "exclusion",
                &server.url(),
                &[
                    ("REDLEASE_FAULT_THREADS", threads.to_string()),
                    ("REDLEASE_FAULT_ITERS", iters.to_string()),
                    ("REDLEASE_FAULT_KEYS", keys.to_string()),
                ],
            )
        })
        .collect();
    let mut acquisitions = 0;
    let mut overlaps = 0;
    for w in &workers {
        let msg = w.next(Duration::from_secs(120));
        let mut parts = msg.split_whitespace().skip(1);
        acquisitions += parts.next().unwrap().parse::<usize>().unwrap();
        overlaps += parts.next().unwrap().parse::<usize>().unwrap();
    }
    let mut con = server.con();
    let mut total = 0;
    for k in 0..keys {
        total += con.get::<_, usize>(format!("reg:{k}")).unwrap();
    }
    let lost = acquisitions - total;
    println!(
        "FIGURES exclusion: {processes} processes x {threads} threads, {acquisitions} acquisitions on {keys} keys in {:.1} s, lost updates {lost}, overlaps {overlaps}",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(acquisitions, processes * threads * iters);
    assert_eq!(lost, 0);
    assert_eq!(overlaps, 0);
}

#[test]
#[serial]
fn paused_holder_learns_it_lost_and_is_fenced_off() {
    let server = Server::start();
    let watchdog_ms = 900;
    let mut holder = fault_worker(
        "holder",
        &server.url(),
        &[("REDLEASE_FAULT_WATCHDOG_MS", watchdog_ms.to_string())],
    );
    let first: u64 = holder.next(Duration::from_secs(10))["acquired ".len()..]
        .parse()
        .unwrap();
    holder.signal(libc::SIGSTOP);
    // The paused holder cannot renew: the lease lapses and another takes over.
    let other = client(&server);
    let g = other
        .lock("paused")
        .acquire_timeout(Duration::from_secs(10))
        .unwrap()
        .expect("the paused holder's lease must lapse");
    assert!(g.fencing_token() > first);
    let mut con = server.con();
    assert!(fenced_write(&mut con, g.fencing_token(), "new holder"));
    holder.signal(libc::SIGCONT);
    holder.tell("go");
    let lost = holder.next(Duration::from_secs(10));
    let write = holder.next(Duration::from_secs(10));
    let release = holder.next(Duration::from_secs(10));
    println!("FIGURES pause: watchdog {watchdog_ms} ms; after SIGCONT the holder saw {lost}; {write}; {release}");
    assert!(lost.starts_with("lost true"), "{lost}");
    assert_eq!(
        write, "write false",
        "the stale holder's write must be fenced off"
    );
    assert!(release.contains("LockLost"), "{release}");
    // The late release did not touch the new holder.
    assert!(g.is_held());
    let value: String = con.get("resource").unwrap();
    assert_eq!(value, "new holder");
    g.release().unwrap();
}

/// A holder stopped (SIGSTOP) while it waits for its release's reply gets
/// `EINTR` from the read when it is resumed, however long it was stopped:
/// Linux interrupts a socket read with a timeout on SIGCONT. The release
/// ran; the reply is simply not read yet. Before, a stop longer than half
/// the response timeout made that a slow ambiguous failure and `release()`
/// returned `Err(Connection)` though the lock was released; an interrupted
/// read is a failure at once, and the release is asked again.
#[test]
#[serial]
fn a_holder_stopped_during_its_release_learns_it_released() {
    let server = Server::start();
    let proxy = common::proxy::Proxy::start(server.port());
    let mut w = fault_worker(
        "stopped_release",
        &proxy.url(),
        &[("REDLEASE_FAULT_RESPONSE_MS", "3000".to_string())],
    );
    assert_eq!(w.next(Duration::from_secs(10)), "acquired");
    // The release runs; its reply reaches the holder only after it resumed.
    proxy.arm(
        "stopped",
        common::proxy::Fault::Delay(Duration::from_secs(6)),
    );
    w.tell("go");
    assert_eq!(w.next(Duration::from_secs(10)), "releasing");
    assert!(proxy.wait_fired(1, Duration::from_secs(5)));
    std::thread::sleep(Duration::from_millis(200));
    w.signal(libc::SIGSTOP);
    // Longer than half the response timeout, shorter than all of it.
    std::thread::sleep(Duration::from_millis(1_900));
    w.signal(libc::SIGCONT);
    let resumed = Instant::now();
    let said = w.next(Duration::from_secs(10));
    println!("after SIGCONT: {said} in {:?}", resumed.elapsed());
    assert_eq!(said, "release Ok(())");
    assert!(
        resumed.elapsed() < Duration::from_secs(2),
        "{:?}",
        resumed.elapsed()
    );
    let held: bool = server.con().exists("stopped").unwrap();
    assert!(!held);
}

#[test]
#[serial]
fn crashed_holders_lock_is_free_within_its_lease() {
    let server = Server::start();
    let watchdog_ms = 1_000;
    let w = fault_worker(
        "crash",
        &server.url(),
        &[("REDLEASE_FAULT_WATCHDOG_MS", watchdog_ms.to_string())],
    );
    assert_eq!(w.next(Duration::from_secs(10)), "acquired");
    let waiter = client(&server);
    assert!(waiter.lock("crash").try_acquire().unwrap().is_none());
    w.signal(libc::SIGKILL);
    let killed = Instant::now();
    let g = waiter
        .lock("crash")
        .acquire_timeout(Duration::from_secs(10))
        .unwrap();
    let waited = killed.elapsed();
    println!(
        "FIGURES crash: lease {watchdog_ms} ms, lock free again {} ms after SIGKILL",
        waited.as_millis()
    );
    assert!(g.is_some());
    // Within the lease plus the fallback poll (the holder's last renewal
    // may have happened just before the kill).
    assert!(
        waited < Duration::from_millis(watchdog_ms + 2_500),
        "{waited:?}"
    );
}

/// Several threads contend with bounded waits while `fault` strikes; every
/// call must return within its deadline plus the response timeout, and
/// holders that overlap must be ones the library told about a loss.
fn contend_through(server: &Server, fault: impl FnOnce(&Server)) -> (usize, usize, usize) {
    let c = client_with(server, |b| {
        b.watchdog_timeout(Duration::from_millis(900))
            .response_timeout(Duration::from_millis(500))
            .fallback_poll(Duration::from_millis(200))
    });
    let inside = Arc::new(Mutex::new(Vec::<Arc<AtomicUsize>>::new()));
    let stats = Arc::new(Mutex::new((0usize, 0usize, 0usize))); // acquired, errors, undetected overlaps
    let end = Instant::now() + Duration::from_secs(4);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (c, inside, stats) = (c.clone(), inside.clone(), stats.clone());
            std::thread::spawn(move || {
                let lock = c.lock("faulty");
                while Instant::now() < end {
                    let t = Instant::now();
                    let r = lock.acquire_timeout(Duration::from_millis(300));
                    // Deadline + one response timeout (+ scheduling slack).
                    assert!(
                        t.elapsed() < Duration::from_millis(300 + 500 + 700),
                        "hung {:?}",
                        t.elapsed()
                    );
                    match r {
                        Ok(Some(g)) => {
                            let me = Arc::new(AtomicUsize::new(1));
                            {
                                let mut ins = inside.lock().unwrap();
                                // Any other holder still inside must have
                                // been told its lease is gone (is_held false).
                                let live =
                                    ins.iter().filter(|o| o.load(Ordering::SeqCst) == 1).count();
                                if live > 0 && g.is_held() {
                                    stats.lock().unwrap().2 += 1;
                                }
                                ins.push(me.clone());
                            }
                            std::thread::sleep(Duration::from_millis(5));
                            me.store(0, Ordering::SeqCst);
                            inside.lock().unwrap().retain(|o| !Arc::ptr_eq(o, &me));
                            stats.lock().unwrap().0 += 1;
                            let _ = g.release();
                        }
                        Ok(None) => {}
                        Err(_) => stats.lock().unwrap().1 += 1,
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    fault(server);
    for h in handles {
        h.join().unwrap();
    }
    // The pool recovered: the lock works normally afterwards.
    let g = c
        .lock("faulty")
        .acquire_timeout(Duration::from_secs(5))
        .unwrap();
    assert!(g.is_some(), "no recovery after the fault");
    let s = *stats.lock().unwrap();
    s
}

#[test]
#[serial]
fn client_kill_during_contention() {
    let server = Server::start();
    let (acquired, errors, overlaps) = contend_through(&server, |s| {
        let mut con = s.con();
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .arg("SKIPME")
            .arg("yes")
            .query(&mut con)
            .unwrap();
        let killed_sub: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut con)
            .unwrap();
        println!("FIGURES client-kill: killed {killed} connections and {killed_sub} subscribers");
    });
    println!("FIGURES client-kill: {acquired} acquisitions, {errors} errors, {overlaps} undetected overlaps");
    assert!(acquired > 0);
    assert_eq!(overlaps, 0);
}

#[test]
#[serial]
fn debug_sleep_longer_than_a_renewal_period() {
    let server = Server::start();
    let (acquired, errors, overlaps) = contend_through(&server, |s| {
        let mut con = s.con();
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("1.2")
            .query(&mut con)
            .unwrap();
    });
    println!("FIGURES debug-sleep 1.2 s (watchdog 0.9 s): {acquired} acquisitions, {errors} errors, {overlaps} undetected overlaps");
    assert!(acquired > 0);
    assert_eq!(overlaps, 0);
}

#[test]
#[serial]
fn script_flush_during_contention() {
    let server = Server::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_millis(600)));
    let held = c.lock("held-through-flush").acquire().unwrap();
    let (acquired, errors, overlaps) = contend_through(&server, |s| {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut s.con())
            .unwrap();
    });
    println!("FIGURES script-flush: {acquired} acquisitions, {errors} errors, {overlaps} undetected overlaps");
    assert_eq!(errors, 0, "NOSCRIPT must be handled");
    assert_eq!(overlaps, 0);
    // Renewal (pipelined EVALSHA) survived the flush too.
    assert!(held.is_held());
    held.release().unwrap();
}

#[test]
#[serial]
fn restart_without_persistence_reports_every_destroyed_lease() {
    let mut server = Server::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_millis(900)));
    let n = 50;
    let guards: Vec<_> = (0..n)
        .map(|i| c.lock(format!("r{i}")).acquire().unwrap())
        .collect();
    let sem = c.semaphore("rs", 5).acquire().unwrap();
    let read = c.rw_lock("rr").read().unwrap();
    server.restart();
    let all_lost = eventually(Duration::from_secs(3), || {
        guards.iter().all(|g| !g.is_held()) && !sem.is_held() && !read.is_held()
    });
    let reported = guards.iter().filter(|g| !g.is_held()).count();
    println!("FIGURES restart: {n} locks + 1 permit + 1 read hold destroyed; {reported} locks reported lost");
    assert!(all_lost);
    for g in guards {
        assert_eq!(g.release().unwrap_err().kind(), ErrorKind::LockLost);
    }
    // The pool recovered.
    assert!(c
        .lock("r0")
        .acquire_timeout(Duration::from_secs(3))
        .unwrap()
        .is_some());
}

#[test]
#[serial]
fn ambiguous_acquire_leaves_no_orphan_lease() {
    let server = Server::start();
    let c = client_with(&server, |b| b.response_timeout(Duration::from_millis(200)));
    let url = server.url();
    // Freeze the server so the acquire's reply cannot arrive in time; the
    // script still runs when the server wakes.
    let sleeper = std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.6")
            .query(&mut con)
            .unwrap();
    });
    std::thread::sleep(Duration::from_millis(50));
    let err = c.lock("maybe").try_acquire().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection);
    sleeper.join().unwrap();
    // The token-checked cleanup ran after the acquire: no lease is left.
    let mut con = server.con();
    let orphan = !eventually(Duration::from_secs(2), || {
        !con.exists::<_, bool>("{maybe}").unwrap()
    });
    println!("FIGURES ambiguous acquire: orphan lease left = {orphan}");
    assert!(!orphan);
    assert!(client(&server)
        .lock("maybe")
        .try_acquire()
        .unwrap()
        .is_some());
}
