//! Read-write lock, semaphore and fair-lock benchmark, as ratios against a
//! floor measured in the same run on the same private redis-server.
//! Prints a table and one JSON line.
//!
//! Run: `cargo bench --bench primitives` (`REDLEASE_BENCH_QUICK=1` for a
//! short smoke run).

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::Server;
use redlease::Client;
use support::{arm_order, quick, scale, us};

/// Runs `threads` threads doing `work` until `run_for` passes; returns the
/// per-thread counts and the elapsed time.
fn run_threads(
    threads: usize,
    run_for: Duration,
    work: impl Fn(usize) -> Box<dyn FnMut() + Send>,
) -> (Vec<u64>, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let mut step = work(i);
            let (stop, barrier) = (stop.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                barrier.wait();
                while !stop.load(Ordering::Relaxed) {
                    step();
                    n += 1;
                }
                n
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    std::thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    let counts = handles.into_iter().map(|h| h.join().unwrap()).collect();
    (counts, start.elapsed())
}

fn main() {
    let server = Server::start();
    let url = server.url();
    let client = Client::builder().url(&url).pool_size(32).build().unwrap();
    let mut raw = server.con();
    let one = redis::Script::new("return 1");
    let _: i64 = one.invoke(&mut raw).unwrap();
    let n = scale(10_000);
    let run_for = if quick() {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(3)
    };

    // The uncontended cycles and their floor (two `EVALSHA` of a one-line
    // script: a cycle is two round trips), interleaved: each round runs a
    // block of every arm, in a new order each round, so that the machine's
    // drift from one moment to the next falls on every arm alike.
    let sem = client.semaphore("bench:sem", 4);
    let fair_sem = client.fair_semaphore("bench:fsem", 4);
    let rw = client.rw_lock("bench:rw");
    let mut arms: Vec<Box<dyn FnMut() + '_>> = vec![
        Box::new(|| {
            let _: i64 = one.invoke(&mut raw).unwrap();
            let _: i64 = one.invoke(&mut raw).unwrap();
        }),
        Box::new(|| sem.acquire().unwrap().release().unwrap()),
        Box::new(|| fair_sem.acquire().unwrap().release().unwrap()),
        Box::new(|| rw.read().unwrap().release().unwrap()),
        Box::new(|| rw.write().unwrap().release().unwrap()),
    ];
    const BLOCK: usize = 10;
    let mut spent = vec![Duration::ZERO; arms.len()];
    for round in 0..n / BLOCK + 1 {
        for i in arm_order(round, arms.len()) {
            let start = Instant::now();
            for _ in 0..BLOCK {
                arms[i]();
            }
            // Round 0 warms every arm up.
            if round > 0 {
                spent[i] += start.elapsed();
            }
        }
    }
    drop(arms);
    let per_op = |i: usize| spent[i] / (n / BLOCK * BLOCK) as u32;
    let (two_evalsha, sem_cycle, fair_sem_cycle, read_cycle, write_cycle) =
        (per_op(0), per_op(1), per_op(2), per_op(3), per_op(4));
    let evalsha = two_evalsha / 2;

    // 16 readers + 1 writer, each in its own client (separate owners).
    let writes = Arc::new(AtomicU64::new(0));
    let register = Arc::new(AtomicU64::new(0));
    let (rw_counts, rw_elapsed) = run_threads(17, run_for, |i| {
        let c = Client::open(&url).unwrap();
        let rw = c.rw_lock("bench:rw16");
        let (writes, register) = (writes.clone(), register.clone());
        if i == 0 {
            Box::new(move || {
                let g = rw.write().unwrap();
                let v = register.load(Ordering::SeqCst);
                register.store(v + 1, Ordering::SeqCst);
                writes.fetch_add(1, Ordering::SeqCst);
                drop(g);
            })
        } else {
            Box::new(move || {
                let g = rw.read().unwrap();
                drop(g);
            })
        }
    });
    let reads: u64 = rw_counts[1..].iter().sum();
    let writes_done = rw_counts[0];
    let lost_writes = writes_done - register.load(Ordering::SeqCst);

    // Fair vs non-fair handoff rate: 4 clients contend for one lock.
    let handoff_rate = |fair: bool| {
        let (counts, elapsed) = run_threads(4, run_for, |_| {
            let c = Client::open(&url).unwrap();
            let lock = if fair {
                c.fair_lock("bench:fair")
            } else {
                c.lock("bench:unfair")
            };
            Box::new(move || {
                let g = lock.acquire().unwrap();
                drop(g);
            })
        });
        let total: u64 = counts.iter().sum();
        let min = *counts.iter().min().unwrap() as f64 / (total as f64 / counts.len() as f64);
        (total as f64 / elapsed.as_secs_f64(), min)
    };
    let (unfair_rate, unfair_min) = handoff_rate(false);
    let (fair_rate, fair_min) = handoff_rate(true);

    println!("redlease primitives benchmark (floor measured in this run)");
    println!(
        "{:<40} {:>10.1} us",
        "floor: EVALSHA 'return 1' (interleaved)",
        us(evalsha)
    );
    for (label, d) in [
        ("semaphore acquire+release", sem_cycle),
        ("fair semaphore acquire+release", fair_sem_cycle),
        ("rwlock read acquire+release", read_cycle),
        ("rwlock write acquire+release", write_cycle),
    ] {
        println!(
            "{:<40} {:>10.1} us   {:.2}x 2x floor",
            label,
            us(d),
            us(d) / (2.0 * us(evalsha))
        );
    }
    println!(
        "{:<40} {:>10.0} reads/s, {:.0} writes/s, lost writes {lost_writes}",
        "16 readers + 1 writer (17 clients)",
        reads as f64 / rw_elapsed.as_secs_f64(),
        writes_done as f64 / rw_elapsed.as_secs_f64()
    );
    println!(
        "{:<40} {:>10.0}/s   min share {:.2}",
        "non-fair lock, 4 clients", unfair_rate, unfair_min
    );
    println!(
        "{:<40} {:>10.0}/s   min share {:.2}",
        "fair lock, 4 clients", fair_rate, fair_min
    );
    println!(
        "{{\"bench\":\"primitives\",\"floor_evalsha_us\":{:.2},\"sem_cycle_ratio\":{:.3},\"fair_sem_cycle_ratio\":{:.3},\"read_cycle_ratio\":{:.3},\"write_cycle_ratio\":{:.3},\"rw16_reads_per_s\":{:.0},\"rw16_writes_per_s\":{:.0},\"lost_writes\":{lost_writes},\"unfair_per_s\":{:.0},\"unfair_min_share\":{:.2},\"fair_per_s\":{:.0},\"fair_min_share\":{:.2}}}",
        us(evalsha),
        us(sem_cycle) / (2.0 * us(evalsha)),
        us(fair_sem_cycle) / (2.0 * us(evalsha)),
        us(read_cycle) / (2.0 * us(evalsha)),
        us(write_cycle) / (2.0 * us(evalsha)),
        reads as f64 / rw_elapsed.as_secs_f64(),
        writes_done as f64 / rw_elapsed.as_secs_f64(),
        unfair_rate,
        unfair_min,
        fair_rate,
        fair_min,
    );
}
