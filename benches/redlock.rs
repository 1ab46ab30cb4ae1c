//! Redlock and renewal benchmark (issue: handoff at the physical limit).
//! Every figure is a ratio to a floor measured in the same run, interleaved
//! in blocks so that the machine's drifting load hits both alike.
//!
//! - Redlock cycle (acquire + release on 5 local masters) ÷ the same cycle
//!   on one server, healthy and with 2 of the 5 masters down. Beside the
//!   healthy one, its floors on this machine: the raw reference lock, a
//!   bare fenced lock and the library's own scripts, each sent to 5
//!   masters at once (every request written, then every reply read, as
//!   the library does) ÷ sent to one — five servers and the client share
//!   the machine's cores, so the ratio is bounded below by what five
//!   servers' work costs here.
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
use support::{mean, scale, us, RawFanOut, Sender};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The same events without the library, on the same servers: the raw
/// reference lock, a bare fenced lock and the library's two lock scripts,
/// each sent by one thread to one server, and to every master at once.
struct Floors {
    one: RawFanOut,
    all: RawFanOut,
    ping: redis::Connection,
}

/// Medians over the blocks of one `cycles` run.
#[derive(Default)]
struct Figures {
    single_us: f64,
    red_us: f64,
    ratio: f64,
    /// With floors: the idle round trip (`PING`), the raw reference lock
    /// on every master ÷ on one, the library's scripts (Redlock's
    /// arguments) on every master ÷ one server's scripts on one, and
    /// Redlock ÷ its scripts sent raw to every master.
    rtt_us: f64,
    raw_ratio: f64,
    scripts_ratio: f64,
    own_ratio: f64,
    /// The bare fenced lock on every master ÷ on one.
    bare_ratio: f64,
}

/// Acquire+release cycles of `single` and `red` (and of the floors, if
/// any), interleaved in blocks; each ratio is the median of the per-block
/// ratios.
fn cycles(single: &Client, red: &Client, n: usize, mut floors: Option<&mut Floors>) -> Figures {
    let (a, b) = (single.lock("bench:one"), red.lock("bench:red"));
    let blocks = 10;
    let per_block = (n / blocks).max(10);
    let mut v: [Vec<f64>; 8] = Default::default();
    for _ in 0..blocks {
        let s = us(mean(per_block, || a.acquire().unwrap().release().unwrap()));
        let r = us(mean(per_block, || b.acquire().unwrap().release().unwrap()));
        v[0].push(s);
        v[1].push(r);
        v[2].push(r / s);
        if let Some(f) = floors.as_deref_mut() {
            let rtt = us(mean(per_block, || {
                let _: String = redis::cmd("PING").query(&mut f.ping).unwrap();
            }));
            let raw1 = us(mean(per_block, || f.one.reference_cycle("bench:raw")));
            let raw5 = us(mean(per_block, || f.all.reference_cycle("bench:raw")));
            let sc1 = us(mean(per_block, || {
                f.one.scripts_cycle("bench:sc1", Sender::Single)
            }));
            let sc5 = us(mean(per_block, || {
                f.all.scripts_cycle("bench:sc5", Sender::Redlock)
            }));
            v[3].push(rtt);
            v[4].push(raw5 / raw1);
            v[5].push(sc5 / sc1);
            v[6].push(r / sc5);
            let bare1 = us(mean(per_block, || f.one.bare_cycle("bench:bare")));
            let bare5 = us(mean(per_block, || f.all.bare_cycle("bench:bare")));
            v[7].push(bare5 / bare1);
        }
    }
    let m = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            median(v.to_vec())
        }
    };
    Figures {
        single_us: m(&v[0]),
        red_us: m(&v[1]),
        ratio: m(&v[2]),
        rtt_us: m(&v[3]),
        raw_ratio: m(&v[4]),
        scripts_ratio: m(&v[5]),
        own_ratio: m(&v[6]),
        bare_ratio: m(&v[7]),
    }
}

fn redlock_cycles() {
    let mut servers: Vec<Server> = (0..5).map(|_| Server::start()).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let single = Client::builder().url(&urls[0]).build().unwrap();
    let red = Client::builder().redlock(&urls).build().unwrap();
    let (acquire, release) = (
        common::lua_source("lock_acquire.lua"),
        common::lua_source("lock_release.lua"),
    );
    let mut floors = Floors {
        one: RawFanOut::new(&urls[..1], &acquire, &release),
        all: RawFanOut::new(&urls, &acquire, &release),
        ping: support::raw_con(&urls[0]),
    };
    let n = scale(5_000);
    let f = cycles(&single, &red, n, Some(&mut floors));
    println!(
        "redlock healthy: single cycle {:.0} µs, Redlock (5 masters) {:.0} µs → {:.2}× (target ≤ 2.5); idle round trip {:.1} µs",
        f.single_us, f.red_us, f.ratio, f.rtt_us
    );
    println!(
        "  floor: the raw reference lock (SET NX PX + EVALSHA del) on 5 masters at once ÷ on one: {:.2}×",
        f.raw_ratio
    );
    println!(
        "  floor: a bare fenced lock (INCR + SET PX; GET + DEL) on 5 masters at once ÷ on one: {:.2}×",
        f.bare_ratio
    );
    println!(
        "  floor: the library's two scripts sent raw to 5 masters at once (Redlock's arguments) ÷ to one (a single server's): {:.2}×",
        f.scripts_ratio
    );
    println!(
        "  Redlock ÷ its scripts sent raw to 5 masters (the library's own overhead): {:.2}×",
        f.own_ratio
    );
    println!(
        "{{\"bench\":\"redlock\",\"idle_rtt_us\":{:.1},\"healthy_ratio\":{:.3},\"raw_fan_out_ratio\":{:.3},\"bare_fan_out_ratio\":{:.3},\"scripts_fan_out_ratio\":{:.3},\"own_overhead\":{:.3}}}",
        f.rtt_us, f.ratio, f.raw_ratio, f.bare_ratio, f.scripts_ratio, f.own_ratio
    );
    // Two masters down: their connections are refused.
    servers[3].stop();
    servers[4].stop();
    let f = cycles(&single, &red, n, None);
    println!(
        "redlock 2 of 5 down: single cycle {:.0} µs, Redlock {:.0} µs → {:.2}× (target ≤ 3)",
        f.single_us, f.red_us, f.ratio
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
