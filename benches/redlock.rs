//! Redlock and renewal benchmark (issue: handoff at the physical limit).
//! Every figure is a ratio to a floor measured in the same run, interleaved
//! in blocks so that the machine's drifting load hits both alike.
//!
//! - Redlock cycle (acquire + release on 5 local masters) ÷ the same cycle
//!   on one server, healthy and with 2 of the 5 masters down.
//! - Renewal of 10,000 leases over 3 servers with one stalled (SIGSTOP)
//!   for twice the lease: leases on the healthy servers must all survive.
//!   Once with three single-server clients, once with one Redlock client
//!   over the three (a majority stays healthy).
//!
//! Run: `cargo bench --bench redlock` (`REDLEASE_BENCH_QUICK=1` for a short
//! smoke run).

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::time::{Duration, Instant};

use common::Server;
use redlease::Client;
use support::{mean, scale, us};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Mean acquire+release cycle of `single` and `red`, interleaved in
/// blocks; the ratio is the median of the per-block ratios.
fn cycles(single: &Client, red: &Client, n: usize) -> (Duration, Duration, f64) {
    let (a, b) = (single.lock("bench:one"), red.lock("bench:red"));
    let blocks = 10;
    let per_block = (n / blocks).max(10);
    let (mut singles, mut reds, mut ratios) = (vec![], vec![], vec![]);
    for _ in 0..blocks {
        let s = mean(per_block, || a.acquire().unwrap().release().unwrap());
        let r = mean(per_block, || b.acquire().unwrap().release().unwrap());
        singles.push(s);
        reds.push(r);
        ratios.push(r.as_secs_f64() / s.as_secs_f64());
    }
    let avg = |v: &[Duration]| v.iter().sum::<Duration>() / v.len() as u32;
    (avg(&singles), avg(&reds), median(ratios))
}

fn redlock_cycles() {
    let mut servers: Vec<Server> = (0..5).map(|_| Server::start()).collect();
    let single = Client::builder().url(servers[0].url()).build().unwrap();
    let red = Client::builder()
        .redlock(servers.iter().map(|s| s.url()))
        .build()
        .unwrap();
    let n = scale(5_000);
    let (s, r, ratio) = cycles(&single, &red, n);
    println!(
        "redlock healthy: single cycle {:.0} µs, Redlock (5 masters) {:.0} µs → {ratio:.2}× (target ≤ 2.5)",
        us(s),
        us(r)
    );
    // Two masters down: their connections are refused.
    servers[3].stop();
    servers[4].stop();
    let (s, r, ratio) = cycles(&single, &red, n);
    println!(
        "redlock 2 of 5 down: single cycle {:.0} µs, Redlock {:.0} µs → {ratio:.2}× (target ≤ 3)",
        us(s),
        us(r)
    );
}

/// Holds `n` leases spread over `clients` (lease `lease`), stalls the
/// server of `stalled` for twice the lease, and counts the leases lost,
/// per client.
fn renewal(label: &str, clients: &[Client], stall: &Server, n: usize, lease: Duration) {
    let started = Instant::now();
    let guards: Vec<(usize, redlease::LockGuard)> = (0..n)
        .map(|i| {
            let c = i % clients.len();
            let g = clients[c]
                .lock(format!("bench:renew:{i}"))
                .acquire()
                .unwrap();
            (c, g)
        })
        .collect();
    let took = started.elapsed();
    stall.pause();
    std::thread::sleep(lease * 2);
    stall.resume();
    let mut lost = vec![0usize; clients.len()];
    let mut held = vec![0usize; clients.len()];
    for (c, g) in &guards {
        if g.is_held() {
            held[*c] += 1;
        } else {
            lost[*c] += 1;
        }
    }
    println!(
        "renewal {label}: {n} leases (taken in {:.1} s), one server stalled for {:?}: lost per client {lost:?}, held {held:?}",
        took.as_secs_f64(),
        lease * 2
    );
    drop(guards);
}

fn renewals() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let lease = Duration::from_secs(3);
    let n = scale(10_000);
    let clients: Vec<Client> = servers
        .iter()
        .map(|s| {
            Client::builder()
                .url(s.url())
                .watchdog_timeout(lease)
                .build()
                .unwrap()
        })
        .collect();
    // The third client's server stalls: the first two must lose nothing.
    renewal("3 servers, 3 clients", &clients, &servers[2], n, lease);
    drop(clients);
    let red = Client::builder()
        .redlock(servers.iter().map(|s| s.url()))
        .watchdog_timeout(lease)
        .build()
        .unwrap();
    // One master of three stalled: a majority renews, nothing is lost.
    renewal("Redlock over 3, one stalled", &[red], &servers[2], n, lease);
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    redlock_cycles();
    renewals();
}
