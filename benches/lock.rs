//! Lock benchmark: every figure is a ratio against a floor measured in the
//! same run on the same private redis-server, because this machine is shared
//! and noisy. Prints a table and one JSON line.
//!
//! Run: `cargo bench --bench lock` (set `REDLEASE_BENCH_QUICK=1` for a short
//! smoke run, as CI does).

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::Server;
use redlease::Client;
use support::{mean, percentile, quick, scale, us, RawLockScripts};

/// CPU time (user + system) of this process's thread with the given name.
fn thread_cpu(name: &str) -> Option<Duration> {
    let tick = 100.0; // USER_HZ on Linux
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let comm = std::fs::read_to_string(path.join("comm")).ok()?;
        if comm.trim() == name {
            let stat = std::fs::read_to_string(path.join("stat")).ok()?;
            let after = stat.rsplit(')').next()?;
            let fields: Vec<&str> = after.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            return Some(Duration::from_secs_f64((utime + stime) / tick));
        }
    }
    None
}

fn main() {
    let server = Server::start();
    let url = server.url();
    let client = Client::builder().url(&url).build().unwrap();
    let mut raw = server.con();
    let one = redis::Script::new("return 1");
    let _: i64 = one.invoke(&mut raw).unwrap();
    let n = scale(20_000);

    // Floors and the uncontended cycle, interleaved in blocks so that the
    // machine's drifting load hits both alike; the ratio is the median of
    // the per-block ratios.
    let raw_scripts = RawLockScripts::new(
        "bench:raw",
        &common::lua_source("lock_acquire.lua"),
        &common::lua_source("lock_release.lua"),
    );
    let lock = client.lock("bench:uncontended");
    let blocks = 10;
    let per_block = (n / blocks).max(10);
    let (mut evalshas, mut pings, mut raws, mut cycles) = (vec![], vec![], vec![], vec![]);
    let (mut cycle_ratios, mut raw_ratios) = (vec![], vec![]);
    for _ in 0..blocks {
        let e = mean(per_block, || {
            let _: i64 = one.invoke(&mut raw).unwrap();
        });
        let p = mean(per_block, || {
            let _: String = redis::cmd("PING").query(&mut raw).unwrap();
        });
        // The same two scripts sent raw (no library): what the server's
        // work costs, so the library's own overhead can be told apart.
        let r = mean(per_block, || raw_scripts.cycle(&mut raw));
        let c = mean(per_block, || {
            let g = lock.acquire().unwrap();
            g.release().unwrap();
        });
        cycle_ratios.push(us(c) / (2.0 * us(e)));
        raw_ratios.push(us(r) / (2.0 * us(e)));
        evalshas.push(e);
        pings.push(p);
        raws.push(r);
        cycles.push(c);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let median_d = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let evalsha = median_d(&mut evalshas);
    let ping = median_d(&mut pings);
    let raw_scripts = median_d(&mut raws);
    let cycle = median_d(&mut cycles);
    let cycle_ratio = median(&mut cycle_ratios);
    let raw_ratio = median(&mut raw_ratios);

    // Re-entry on the same thread.
    let outer = lock.acquire().unwrap();
    let reentry = mean(scale(1_000_000), || {
        let g = lock.acquire().unwrap();
        drop(g);
    });
    drop(outer);

    // Handoff: the holder releases, a thread blocked in acquire gets it.
    // Each round also measures the floor — one EVALSHA after 5 ms idle — so
    // floor and handoff see the same machine state.
    let url2 = url.clone();
    let handoff =
        |holder: Client, waiter: Client, rounds: usize| -> (Vec<Duration>, Vec<Duration>) {
            let mut idle_con = redis::Client::open(url2.as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            let one = redis::Script::new("return 1");
            let _: i64 = one.invoke(&mut idle_con).unwrap();
            let name = format!("bench:handoff:{}", waiter.id());
            let (tx, rx) = crossbeam_channel::bounded::<Instant>(1);
            let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
            let wname = name.clone();
            let t = std::thread::spawn(move || {
                let lock = waiter.lock(wname);
                for _ in 0..rounds {
                    if go_rx.recv().is_err() {
                        return;
                    }
                    let g = lock.acquire().unwrap();
                    tx.send(Instant::now()).unwrap();
                    drop(g);
                }
            });
            let lock = holder.lock(name);
            let mut out = Vec::new();
            let mut idle = Vec::new();
            for _ in 0..rounds {
                std::thread::sleep(Duration::from_millis(5));
                let t = Instant::now();
                let _: i64 = one.invoke(&mut idle_con).unwrap();
                idle.push(t.elapsed());
                let g = lock.acquire().unwrap();
                go_tx.send(()).unwrap();
                // Let the waiter block (and the machine go idle) before release.
                std::thread::sleep(Duration::from_millis(5));
                let t0 = Instant::now();
                drop(g);
                let t1 = rx.recv().unwrap();
                out.push(t1 - t0);
            }
            t.join().unwrap();
            out.sort();
            idle.sort();
            (out, idle)
        };
    let other = Client::builder().url(&url).build().unwrap();
    let rounds = scale(400);
    let (cross, idle_cross) = handoff(client.clone(), other.clone(), rounds);
    let (local, idle_local) = handoff(client.clone(), client.clone(), rounds);
    let mut idle: Vec<Duration> = idle_cross
        .iter()
        .chain(idle_local.iter())
        .copied()
        .collect();
    idle.sort();
    let idle_p50 = percentile(&idle, 0.5);

    // Contended: 8 threads, one key, a non-atomic read-modify-write inside.
    let threads = 8;
    let run_for = if quick() {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(3)
    };
    let register = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (client, register, stop, barrier) = (
                client.clone(),
                register.clone(),
                stop.clone(),
                barrier.clone(),
            );
            std::thread::spawn(move || {
                let lock = client.lock("bench:contended");
                let mut mine = 0u64;
                barrier.wait();
                while !stop.load(Ordering::Relaxed) {
                    let g = lock.acquire().unwrap();
                    let v = register.load(Ordering::SeqCst);
                    register.store(v + 1, Ordering::SeqCst);
                    mine += 1;
                    drop(g);
                }
                mine
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    std::thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let elapsed = start.elapsed();
    let total: u64 = counts.iter().sum();
    let lost = total - register.load(Ordering::SeqCst);
    let rate = total as f64 / elapsed.as_secs_f64();
    let fair = total as f64 / threads as f64;
    let min_share = *counts.iter().min().unwrap() as f64 / fair;

    // Renewal: many held watchdog leases kept alive by the one thread.
    let leases = if quick() { 1_000 } else { 10_000 };
    let watchdog = Duration::from_secs(3);
    let rclient = Client::builder()
        .url(&url)
        .watchdog_timeout(watchdog)
        .build()
        .unwrap();
    let cpu_before = thread_cpu("redlease-renew").unwrap_or_default();
    let guards: Vec<_> = (0..leases)
        .map(|i| rclient.lock(format!("bench:lease:{i}")).acquire().unwrap())
        .collect();
    let held_for = watchdog + Duration::from_millis(200); // 3 renewal periods
    std::thread::sleep(held_for);
    let cpu = thread_cpu("redlease-renew").unwrap_or_default() - cpu_before;
    let lost_leases = guards.iter().filter(|g| !g.is_held()).count();
    let live: usize = redis::cmd("DBSIZE").query::<usize>(&mut raw).unwrap();
    drop(guards);

    println!("redlease lock benchmark (floor measured in this run)");
    println!(
        "{:<44} {:>12}",
        "floor: EVALSHA 'return 1'",
        format!("{:.1} us", us(evalsha))
    );
    println!(
        "{:<44} {:>12}",
        "floor: PING",
        format!("{:.1} us", us(ping))
    );
    println!(
        "{:<44} {:>12}",
        "floor: EVALSHA after 5 ms idle, p50",
        format!("{:.1} us", us(idle_p50))
    );
    println!(
        "{:<44} {:>12}   ratio to 2x EVALSHA {:.2} (the scripts' own cost)",
        "raw acquire+release scripts, no library",
        format!("{:.1} us", us(raw_scripts)),
        raw_ratio
    );
    println!(
        "{:<44} {:>12}   ratio to 2x EVALSHA {:.2} (target <= 1.10)",
        "uncontended acquire+release",
        format!("{:.1} us", us(cycle)),
        cycle_ratio
    );
    println!(
        "{:<44} {:>12}   (target < 1 us)",
        "re-entry",
        format!("{:.3} us", us(reentry))
    );
    for (label, v) in [
        ("handoff, two clients", &cross),
        ("handoff, same client", &local),
    ] {
        println!(
            "{:<44} p50 {:.1} us ({:.2}x idle RTT, target <= 2.5)  p90 {:.1} us  p99 {:.1} us (target < 1000)",
            label,
            us(percentile(v, 0.5)),
            us(percentile(v, 0.5)) / us(idle_p50),
            us(percentile(v, 0.9)),
            us(percentile(v, 0.99)),
        );
    }
    println!(
        "{:<44} {:>9.0}/s   min share {:.2} of fair (target >= 0.25), lost updates {lost}, per thread {counts:?}",
        "contended, 8 threads one key", rate, min_share
    );
    println!(
        "{:<44} {leases} leases, {} lost, keys live {live}, renewal thread CPU {:.0} ms over {:.1} s",
        "renewal",
        lost_leases,
        cpu.as_secs_f64() * 1e3,
        held_for.as_secs_f64()
    );
    println!(
        "{{\"bench\":\"lock\",\"floor_evalsha_us\":{:.2},\"floor_ping_us\":{:.2},\"idle_rtt_p50_us\":{:.2},\"raw_scripts_ratio\":{:.3},\"cycle_us\":{:.2},\"cycle_ratio\":{:.3},\"reentry_us\":{:.4},\"handoff_cross_p50_us\":{:.1},\"handoff_cross_p99_us\":{:.1},\"handoff_cross_p50_ratio\":{:.2},\"handoff_local_p50_us\":{:.1},\"handoff_local_p99_us\":{:.1},\"contended_per_s\":{:.0},\"contended_min_share\":{:.2},\"lost_updates\":{lost},\"leases\":{leases},\"leases_lost\":{lost_leases},\"renewal_cpu_ms\":{:.0}}}",
        us(evalsha),
        us(ping),
        us(idle_p50),
        raw_ratio,
        us(cycle),
        cycle_ratio,
        us(reentry),
        us(percentile(&cross, 0.5)),
        us(percentile(&cross, 0.99)),
        us(percentile(&cross, 0.5)) / us(idle_p50),
        us(percentile(&local, 0.5)),
        us(percentile(&local, 0.99)),
        rate,
        min_share,
        cpu.as_secs_f64() * 1e3,
    );
}
