//! Renewal memory: RSS after many acquire+release cycles with a long
//! watchdog, nothing held at the end. Memory must follow the leases held,
//! not the acquisition rate times the watchdog.
//!
//! Run: `cargo bench --bench renewal_memory` (`REDLEASE_BENCH_QUICK=1` for
//! a short smoke run).

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::time::{Duration, Instant};

use common::Server;
use redlease::Client;
use support::scale;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let server = Server::start();
    let client = Client::builder()
        .url(server.url())
        .watchdog_timeout(Duration::from_secs(3600))
        .build()
        .unwrap();
    let cycles = scale(200_000);
    let name = "x".repeat(1024);
    // Warm up allocator and pool before the first reading.
    for _ in 0..1_000 {
        client.lock(&name).acquire().unwrap().release().unwrap();
    }
    let before = rss_kib();
    let t = Instant::now();
    for _ in 0..cycles {
        client.lock(&name).acquire().unwrap().release().unwrap();
    }
    let elapsed = t.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    let after = rss_kib();
    println!(
        "redlease renewal memory: {cycles} acquire+release cycles (1 KiB name, 1 h watchdog) in {:.1} s",
        elapsed.as_secs_f64()
    );
    println!(
        "RSS before {} KiB, after {} KiB: grew {} KiB with nothing held",
        before,
        after,
        after.saturating_sub(before)
    );
    println!(
        "{{\"bench\":\"renewal_memory\",\"cycles\":{cycles},\"rss_before_kib\":{before},\"rss_after_kib\":{after}}}"
    );
}
