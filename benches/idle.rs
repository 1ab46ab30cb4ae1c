//! What an idle waiter costs the server (issue: waiting that costs
//! nothing). K separate `Client`s (as K processes would be) each block one
//! thread on a name that another client holds; over a window the server's
//! `INFO commandstats` counts every command, calls made inside scripts
//! included. The figure is commands per second per waiter, next to the
//! same window with nobody waiting (the holder's own renewal), measured in
//! the same run.
//!
//! Run: `cargo bench --bench idle` (`REDLEASE_BENCH_QUICK=1`: 10 waiters,
//! a 3 s window; otherwise 40 waiters, a 10 s window after 7 s settling). `REDLEASE_IDLE_ONLY=lock,semaphore` picks primitives,
//! `REDLEASE_IDLE_WAITERS=20` the number of waiters.

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{commands_between, commandstats, Server};
use redlease::Client;
use support::quick;

/// The primitives measured: (label, how a waiter waits, how the holder
/// holds). Each waiter waits at most `limit`.
type Hold = Box<dyn FnOnce()>;
type Wait = Arc<dyn Fn(&Client, Duration) + Send + Sync>;

fn primitive(name: &str, holder: &Client, url: &str) -> (Hold, Wait) {
    let key = format!("idle:{name}");
    match name {
        "lock" => {
            let g = holder.lock(&key).acquire().unwrap();
            (
                Box::new(move || drop(g)),
                Arc::new(move |c: &Client, d| {
                    let _ = c.lock(&key).acquire_timeout(d).unwrap();
                }),
            )
        }
        "fair_lock" => {
            let g = holder.fair_lock(&key).acquire().unwrap();
            (
                Box::new(move || drop(g)),
                Arc::new(move |c: &Client, d| {
                    let _ = c.fair_lock(&key).acquire_timeout(d).unwrap();
                }),
            )
        }
        "rw_write" => {
            let g = holder.rw_lock(&key).write().unwrap();
            (
                Box::new(move || drop(g)),
                Arc::new(move |c: &Client, d| {
                    let _ = c.rw_lock(&key).write_timeout(d).unwrap();
                }),
            )
        }
        "rw_write_behind_reader" => {
            // Writers behind a read hold (issue: 1.75 commands a second
            // each with 20 writers).
            let g = holder.rw_lock(&key).read().unwrap();
            (
                Box::new(move || drop(g)),
                Arc::new(move |c: &Client, d| {
                    let _ = c.rw_lock(&key).write_timeout(d).unwrap();
                }),
            )
        }
        "rw_read" => {
            let g = holder.rw_lock(&key).write().unwrap();
            (
                Box::new(move || drop(g)),
                Arc::new(move |c: &Client, d| {
                    let _ = c.rw_lock(&key).read_timeout(d).unwrap();
                }),
            )
        }
        "rw_read_behind_writer" => {
            // Readers behind a waiting writer (of another client), which
            // they let go first: the name's look at the writer is shared
            // by its readers. The writer's own cost is in the baseline.
            let g = holder.rw_lock(&key).read().unwrap();
            let (w, k2) = (Client::open(url).unwrap(), key.clone());
            let writer = std::thread::spawn(move || {
                let _ = w
                    .rw_lock(&k2)
                    .write_timeout(Duration::from_secs(600))
                    .unwrap();
            });
            std::thread::sleep(Duration::from_millis(500)); // the writer waits
            (
                Box::new(move || {
                    drop(g);
                    writer.join().unwrap();
                }),
                Arc::new(move |c: &Client, d| {
                    let _ = c.rw_lock(&key).read_timeout(d).unwrap();
                }),
            )
        }
        "semaphore" => {
            let g = holder.semaphore(&key, 1).acquire().unwrap();
            (
                Box::new(move || drop(g)),
                Arc::new(move |c: &Client, d| {
                    let _ = c.semaphore(&key, 1).acquire_timeout(d).unwrap();
                }),
            )
        }
        "fair_semaphore" => {
            let g = holder.fair_semaphore(&key, 1).acquire().unwrap();
            (
                Box::new(move || drop(g)),
                Arc::new(move |c: &Client, d| {
                    let _ = c.fair_semaphore(&key, 1).acquire_timeout(d).unwrap();
                }),
            )
        }
        "latch" => {
            assert!(holder.count_down_latch(&key).try_set_count(1).unwrap());
            let h = holder.clone();
            let k2 = key.clone();
            (
                Box::new(move || h.count_down_latch(&k2).count_down().unwrap()),
                Arc::new(move |c: &Client, d| {
                    let _ = c.count_down_latch(&key).wait_timeout(d).unwrap();
                }),
            )
        }
        other => panic!("unknown primitive {other}"),
    }
}

fn main() {
    let k = std::env::var("REDLEASE_IDLE_WAITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick() { 10 } else { 40 });
    // Two whole look periods (LOOK_MAX, 5 s): waiters behind a long hold
    // look in step, so a 6 s window counted one wave of looks or two, and
    // writers behind a read hold showed 2.03 commands a second where a
    // 10 s window shows 1.2.
    let window = if quick() {
        Duration::from_secs(3)
    } else {
        Duration::from_secs(10)
    };
    let settle = Duration::from_secs(1);
    let all = [
        "lock",
        "fair_lock",
        "rw_write",
        "rw_write_behind_reader",
        "rw_read",
        "rw_read_behind_writer",
        "semaphore",
        "fair_semaphore",
        "latch",
    ];
    let only = std::env::var("REDLEASE_IDLE_ONLY").ok();
    let chosen: Vec<&str> = all
        .iter()
        .copied()
        .filter(|p| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|x| x == *p))
        })
        .collect();

    let server = Server::start();
    let url = server.url();
    let mut con = server.con();
    let t0 = Instant::now();
    let _: String = redis::cmd("PING").query(&mut con).unwrap();
    let rtt = t0.elapsed();
    println!(
        "idle waiters: {k} separate clients each, a {:.0} s window; idle round trip {:.0} µs",
        window.as_secs_f64(),
        rtt.as_secs_f64() * 1e6
    );
    println!("| primitive | commands/s per waiter (target ≤ 1) | baseline commands/s (holder alone) | top commands in the window |");
    println!("|---|---|---|---|");
    for name in chosen {
        let holder = Client::open(&url).unwrap();
        let (release, wait) = primitive(name, &holder, &url);
        // Baseline: the holder alone, same window.
        std::thread::sleep(settle);
        let b0 = commandstats(&mut con);
        std::thread::sleep(window);
        let b1 = commandstats(&mut con);
        let base: u64 = commands_between(&b0, &b1).values().sum();

        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<Client> = (0..k).map(|_| Client::open(&url).unwrap()).collect();
        let threads: Vec<_> = clients
            .into_iter()
            .map(|c| {
                let wait = wait.clone();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    // Long enough to outlast the window; released after it.
                    while !stop.load(Ordering::Relaxed) {
                        wait(&c, Duration::from_secs(60));
                    }
                })
            })
            .collect();
        // Everybody queued and settled before the window starts, their
        // first looks made (at most 5 s in: a look loads its script once).
        std::thread::sleep(if quick() { settle * 2 } else { settle * 7 });
        let s0 = commandstats(&mut con);
        std::thread::sleep(window);
        let s1 = commandstats(&mut con);
        let d = commands_between(&s0, &s1);
        let total: u64 = d.values().sum();
        let per = (total.saturating_sub(base)) as f64 / window.as_secs_f64() / k as f64;
        let mut top: Vec<_> = d.iter().collect();
        top.sort_by(|a, b| b.1.cmp(a.1));
        let top: Vec<String> = top
            .iter()
            .take(6)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!(
            "| {name} | {per:.2} | {:.2} | {} |",
            base as f64 / window.as_secs_f64(),
            top.join(", ")
        );
        stop.store(true, Ordering::Relaxed);
        release();
        for t in threads {
            t.join().unwrap();
        }
    }
}
