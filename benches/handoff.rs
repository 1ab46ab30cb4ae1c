//! Handoff and footprint benchmark (issue: handoff at the physical limit).
//! Every figure is a ratio to a floor measured in the same run on the same
//! private redis-server, interleaved, because this machine is shared and
//! noisy. Contention uses separate `Client`s, as separate processes would.
//!
//! Run: `cargo bench --bench handoff` (`REDLEASE_BENCH_QUICK=1` for a short
//! smoke run).

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::Server;
use redis::Commands;
use redlease::Client;
use support::{
    arm_order, floor_waiter_turn, library_waiter_turn, percentile, quick, raw_con, scale, us,
    GuardedHandoff,
};

fn client(url: &str) -> Client {
    Client::builder().url(url).build().unwrap()
}

fn info_field(con: &mut redis::Connection, section: &str, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The server's own time so far, in µs: the top-level commands a handoff
/// sends (scripts with the calls inside them, and the blocking pops,
/// served or not), from `INFO commandstats`.
fn server_usec(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .filter(|l| {
            [
                "cmdstat_evalsha:",
                "cmdstat_eval:",
                "cmdstat_blmove:",
                "cmdstat_blpop:",
            ]
            .iter()
            .any(|c| l.starts_with(c))
        })
        .filter_map(|l| {
            l.split(',')
                .find_map(|f| f.strip_prefix("usec="))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum()
}

/// One round's handoff: how long it took, and how much of it the server
/// spent (see [`server_usec`]).
#[derive(Default)]
struct Rounds {
    took: Vec<Duration>,
    server: Vec<f64>,
}

/// The least server work any fenced queue handoff does (the owner checked,
/// a fence drawn, the grant written, the next waiter woken with it), as a
/// raw script: the releaser's side of the `fenced` floor in [`handoff`].
/// Numbers go to `redis.call` as text, as the library's scripts send them
/// (a Lua number is printed with %.17g there, about 1.2K instructions).
const FENCED_RELEASE: &str = "local v = redis.call('GET', KEYS[1]) \
    if v ~= ARGV[1] then return 0 end \
    local f = string.format('%d', redis.call('INCR', KEYS[2])) \
    redis.call('SET', KEYS[1], 'grant#' .. f, 'PX', '500') \
    redis.call('RPUSH', KEYS[3], f) \
    return 1";

/// The arms [`handoff`] runs, if not all: `REDLEASE_HANDOFF_ARMS`, a
/// comma-separated list of `lib`, `write`, `plain`, `fenced`, `guarded`;
/// the bench then prints those arms' p50s and stops. The arms warm each
/// other's code (the raw arms share redis-rs), so how many run, and how long
/// the machine idles between them, moves the library's ratio to its
/// guarded floor (docs/performance-log.md, session 59).
fn arms_picked() -> Option<String> {
    std::env::var("REDLEASE_HANDOFF_ARMS").ok()
}

/// One arm of a [`handoff`] round.
#[derive(Clone, Copy, PartialEq)]
enum Arm {
    Library,
    /// The library's write lock: a writer blocked in `write()`.
    Write,
    Plain,
    Fenced,
    /// The library's waiter pipeline, raw, woken by [`GuardedHandoff`]'s release.
    Guarded,
    /// The library's, with the waiter in the holder's own client (threads
    /// of one process contending).
    Own,
}

impl Arm {
    const ALL: [Arm; 6] = [
        Arm::Library,
        Arm::Write,
        Arm::Plain,
        Arm::Fenced,
        Arm::Guarded,
        Arm::Own,
    ];

    /// Its name in `REDLEASE_HANDOFF_ARMS` and the bench's output.
    fn name(self) -> &'static str {
        match self {
            Arm::Library => "lib",
            Arm::Write => "write",
            Arm::Plain => "plain",
            Arm::Fenced => "fenced",
            Arm::Guarded => "guarded",
            Arm::Own => "own",
        }
    }
}

/// The rounds of [`handoff`]: the library's, the plain floor's and the
/// fenced floor's.
struct Handoffs {
    lib: Rounds,
    write: Rounds,
    raw: Rounds,
    fenced: Rounds,
    guarded: Rounds,
    own: Rounds,
    idle: Vec<Duration>,
}

/// One handoff round trip set, each next to an EVALSHA made after 5 ms
/// idle: the library's (two clients); the plain floor the issue names (a
/// waiter blocked in a plain BLPOP, woken by a one-line RPUSH script); and
/// the fenced floor (a waiter blocked in BLMOVE with the grant's GET
/// behind, woken by [`FENCED_RELEASE`]: the least a fenced handoff can do,
/// without the library). In every other round the server's time is read
/// before the 5 ms and after the wake-up (the new holder keeps its guard
/// until then, so its release is not counted), and that round's timing is
/// not: the two are never taken in one round.
fn handoff(url: &str, rounds: usize) -> Handoffs {
    let holder = client(url);
    let waiter = client(url);
    let mut idle_con = raw_con(url);
    let mut stats = raw_con(url);
    let one = redis::Script::new("return 1");
    let _: i64 = one.invoke(&mut idle_con).unwrap();
    let (tx, rx) = crossbeam_channel::bounded::<Instant>(1);
    // Which arm the waiter runs (see `Arm`), and when its clean-up is done.
    let (go_tx, go_rx) = crossbeam_channel::bounded::<Arm>(1);
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
    let (ended_tx, ended_rx) = crossbeam_channel::bounded::<()>(1);
    let mut wcon = raw_con(url);
    let own = holder.lock("bench:handoff");
    let t = std::thread::spawn(move || {
        let lock = waiter.lock("bench:handoff");
        let rw = waiter.rw_lock("bench:handoff:rw");
        while let Ok(arm) = go_rx.recv() {
            match arm {
                Arm::Library => library_waiter_turn(&lock, &tx, &done_rx),
                Arm::Own => library_waiter_turn(&own, &tx, &done_rx),
                Arm::Write => {
                    let g = rw.write().unwrap();
                    tx.send(Instant::now()).unwrap();
                    let _ = done_rx.recv();
                    drop(g);
                }
                Arm::Plain => {
                    let _: (String, String) = redis::cmd("BLPOP")
                        .arg("bench:raw:list")
                        .arg(5)
                        .query(&mut wcon)
                        .unwrap();
                    tx.send(Instant::now()).unwrap();
                    let _ = done_rx.recv();
                }
                Arm::Fenced | Arm::Guarded => {
                    floor_waiter_turn(
                        &mut wcon,
                        "bench:f",
                        matches!(arm, Arm::Guarded),
                        &tx,
                        &done_rx,
                    );
                }
            }
            ended_tx.send(()).unwrap();
        }
    });
    let lock = holder.lock("bench:handoff");
    let rw = holder.rw_lock("bench:handoff:rw");
    let push = redis::Script::new("redis.call('RPUSH', KEYS[1], '1') return 1");
    let _: i64 = push.key("bench:warm").invoke(&mut idle_con).unwrap();
    let fenced_release = redis::Script::new(FENCED_RELEASE);
    let _: i64 = fenced_release
        .key("{bench:f}")
        .key("{bench:f}:fence")
        .key("{bench:f}:open")
        .arg("nobody")
        .invoke(&mut idle_con)
        .unwrap();
    let guarded_floor = GuardedHandoff::new(&mut idle_con, "bench:f");
    let (mut lib, mut write, mut raw, mut fenced, mut guarded, mut own, mut idle) = (
        Rounds::default(),
        Rounds::default(),
        Rounds::default(),
        Rounds::default(),
        Rounds::default(),
        Rounds::default(),
        vec![],
    );
    let pick = arms_picked();
    let arms: Vec<Arm> = Arm::ALL
        .into_iter()
        .filter(|a| {
            pick.as_deref()
                .is_none_or(|p| p.split(',').any(|n| n.trim() == a.name()))
        })
        .collect();
    for round in 0..rounds {
        std::thread::sleep(Duration::from_millis(5));
        let t0 = Instant::now();
        let _: i64 = one.invoke(&mut idle_con).unwrap();
        idle.push(t0.elapsed());
        // The arms run in a new order each round (`arm_order`): which one
        // runs first, or after which, changed a floor by half in this setup.
        for i in arm_order(round, arms.len()) {
            let arm = arms[i];
            // Each releaser makes one round trip just before its waiter
            // blocks (the library's holder takes the lock): a connection
            // idle since the round began was slower to wake.
            let (g, w) = match arm {
                Arm::Library | Arm::Own => (Some(lock.acquire().unwrap()), None),
                Arm::Write => (None, Some(rw.write().unwrap())),
                Arm::Plain => {
                    let _: () = redis::cmd("SET")
                        .arg("bench:raw:held")
                        .arg("holder")
                        .query(&mut idle_con)
                        .unwrap();
                    (None, None)
                }
                Arm::Fenced | Arm::Guarded => {
                    // The same key: the fenced floor's release checks it too.
                    guarded_floor.hold(&mut idle_con);
                    (None, None)
                }
            };
            go_tx.send(arm).unwrap();
            // The waiter blocks.
            std::thread::sleep(Duration::from_millis(5));
            // The server's time is read in every other round, whose timings
            // are not counted: `INFO` builds a long reply, whose work must
            // not be in a timed round (two runs each way showed no
            // difference beyond the noise; this rules it out).
            let timed = round % 2 == 0;
            let before = if timed { 0 } else { server_usec(&mut stats) };
            std::thread::sleep(Duration::from_millis(5)); // idle again
            let t0 = Instant::now();
            match arm {
                Arm::Library | Arm::Own => drop(g),
                Arm::Write => drop(w),
                Arm::Plain => {
                    let _: i64 = push.key("bench:raw:list").invoke(&mut idle_con).unwrap();
                }
                Arm::Fenced => {
                    let _: i64 = fenced_release
                        .key("{bench:f}")
                        .key("{bench:f}:fence")
                        .key("{bench:f}:open")
                        .arg("holder")
                        .invoke(&mut idle_con)
                        .unwrap();
                }
                Arm::Guarded => guarded_floor.release(&mut idle_con),
            }
            let took = rx.recv().unwrap() - t0;
            // The new holder keeps its guard until the server's time is read.
            let server = if timed {
                0.0
            } else {
                (server_usec(&mut stats) - before) as f64
            };
            done_tx.send(()).unwrap();
            ended_rx.recv().unwrap();
            let r = match arm {
                Arm::Library => &mut lib,
                Arm::Write => &mut write,
                Arm::Plain => &mut raw,
                Arm::Fenced => &mut fenced,
                Arm::Guarded => &mut guarded,
                Arm::Own => &mut own,
            };
            if timed {
                r.took.push(took);
            } else {
                r.server.push(server);
            }
        }
    }
    drop(go_tx);
    t.join().unwrap();
    for r in [
        &mut lib,
        &mut write,
        &mut raw,
        &mut fenced,
        &mut guarded,
        &mut own,
    ] {
        r.took.sort();
        r.server.sort_by(f64::total_cmp);
    }
    idle.sort();
    Handoffs {
        lib,
        write,
        raw,
        fenced,
        guarded,
        own,
        idle,
    }
}

/// How long the waiter blocks in [`long_handoff`]'s rounds: longer than a
/// sixth of the grant's 500 ms claim window, past which a waiter used to
/// claim its lease in a round trip of its own before `acquire` returned.
const LONG_BLOCK: Duration = Duration::from_millis(300);

/// The library's handoff after its waiter blocked [`LONG_BLOCK`], and the
/// plain floor's (a raw `BLPOP` woken by a one-line `RPUSH` script) after
/// as long a block, interleaved round by round in turn order: (library,
/// floor) round times. A waiter usually blocks that long or longer (its
/// holder works a while); [`handoff`]'s waiters block 10 ms.
fn long_handoff(url: &str, rounds: usize) -> (Vec<Duration>, Vec<Duration>) {
    let holder = client(url);
    let waiter = client(url);
    let mut rcon = raw_con(url);
    let mut wcon = raw_con(url);
    let push = redis::Script::new("redis.call('RPUSH', KEYS[1], '1') return 1");
    let _: i64 = push.key("bench:warm").invoke(&mut rcon).unwrap();
    let (go_tx, go_rx) = crossbeam_channel::bounded::<bool>(1);
    let (tx, rx) = crossbeam_channel::bounded::<Instant>(1);
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
    let t = std::thread::spawn(move || {
        let lock = waiter.lock("bench:long");
        while let Ok(library) = go_rx.recv() {
            if library {
                library_waiter_turn(&lock, &tx, &done_rx);
            } else {
                let _: (String, String) = redis::cmd("BLPOP")
                    .arg("bench:long:list")
                    .arg(5)
                    .query(&mut wcon)
                    .unwrap();
                tx.send(Instant::now()).unwrap();
                let _ = done_rx.recv();
            }
        }
    });
    let lock = holder.lock("bench:long");
    let (mut lib, mut raw) = (vec![], vec![]);
    for round in 0..rounds {
        for library in [round % 2 == 0, round % 2 == 1] {
            // One round trip each just before its waiter blocks.
            let g = if library {
                Some(lock.acquire().unwrap())
            } else {
                let _: () = redis::cmd("SET")
                    .arg("bench:long:held")
                    .arg("holder")
                    .query(&mut rcon)
                    .unwrap();
                None
            };
            go_tx.send(library).unwrap();
            std::thread::sleep(LONG_BLOCK);
            let t0 = Instant::now();
            match g {
                Some(g) => drop(g),
                None => {
                    let _: i64 = push.key("bench:long:list").invoke(&mut rcon).unwrap();
                }
            }
            let took = rx.recv().unwrap() - t0;
            done_tx.send(()).unwrap();
            if library { &mut lib } else { &mut raw }.push(took);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    drop(go_tx);
    t.join().unwrap();
    lib.sort();
    raw.sort();
    (lib, raw)
}

/// `clients` separate clients (or raw SET NX loops polling every 1 ms),
/// each with its own connection for a non-atomic GET/SET counter inside:
/// acquisitions per second, each one's count, lost updates.
/// Where a contended bench's critical section keeps the register it
/// increments without an atomic read-modify-write (a lost update shows an
/// overlap).
#[derive(Clone, Copy, PartialEq)]
enum Register {
    /// A key on the server: a `GET` and a `SET`, two round trips inside
    /// every hold (what separate processes would share).
    Server,
    /// A word in this process, read and then written back plus one: no
    /// round trip inside the hold, so each turn is one handoff and the
    /// rate can be set against 1 ÷ handoff.
    Process,
}

fn contended(
    url: &str,
    clients: usize,
    run_for: Duration,
    library: bool,
    register: Register,
) -> (f64, Vec<u64>, u64) {
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let counter = if library {
        "bench:c:lib"
    } else {
        "bench:c:raw"
    };
    let _: () = con.del(counter).unwrap();
    let word = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(clients + 1));
    let handles: Vec<_> = (0..clients)
        .map(|i| {
            let (stop, barrier, url, word) =
                (stop.clone(), barrier.clone(), url.to_owned(), word.clone());
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
                let c = client(&url);
                let lock = c.lock("bench:contended");
                let token = format!("raw-{i}");
                let del = redis::Script::new(
                    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
                );
                let mut mine = 0u64;
                barrier.wait();
                while !stop.load(Ordering::Relaxed) {
                    let g = if library {
                        Some(lock.acquire().unwrap())
                    } else {
                        loop {
                            let ok: Option<String> = redis::cmd("SET")
                                .arg("bench:rawlock")
                                .arg(&token)
                                .arg("NX")
                                .arg("PX")
                                .arg(30_000)
                                .query(&mut con)
                                .unwrap();
                            if ok.is_some() || stop.load(Ordering::Relaxed) {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        None
                    };
                    if stop.load(Ordering::Relaxed) && g.is_none() && !library {
                        let _: i64 = del.key("bench:rawlock").arg(&token).invoke(&mut con).unwrap();
                        break;
                    }
                    match register {
                        Register::Server => {
                            let v: u64 = con.get(counter).unwrap_or(0);
                            let _: () = con.set(counter, v + 1).unwrap();
                        }
                        Register::Process => {
                            // Read, let another thread run, write back: an
                            // overlapping holder's update is lost.
                            let v = word.load(Ordering::SeqCst);
                            std::thread::yield_now();
                            word.store(v + 1, Ordering::SeqCst);
                        }
                    }
                    mine += 1;
                    match g {
                        Some(g) => g.release().unwrap(),
                        None => {
                            let _: i64 = del.key("bench:rawlock").arg(&token).invoke(&mut con).unwrap();
                        }
                    }
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
    let stored: u64 = match register {
        Register::Server => con.get(counter).unwrap_or(0),
        Register::Process => word.load(Ordering::SeqCst),
    };
    (
        total as f64 / elapsed.as_secs_f64(),
        counts,
        total.saturating_sub(stored),
    )
}

/// Server output bytes per release cycle of one name, with `idle` other
/// clients waiting on names of their own meanwhile.
fn fan_out(url: &str, idle: usize, cycles: usize) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let holder = client(url);
    let mut held = Vec::new();
    let mut waiters = Vec::new();
    for i in 0..idle {
        let name = format!("bench:idle:{i}");
        held.push(
            holder
                .lock(&name)
                .lease(Duration::from_secs(60))
                .acquire()
                .unwrap(),
        );
        let (c, stop) = (client(url), stop.clone());
        waiters.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = c.lock(&name).acquire_timeout(Duration::from_secs(2));
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(500));
    let c = client(url);
    let lock = c.lock("bench:fan");
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let before = info_field(&mut con, "stats", "total_net_output_bytes");
    let t = Instant::now();
    for _ in 0..cycles {
        lock.acquire().unwrap().release().unwrap();
    }
    let elapsed = t.elapsed();
    let after = info_field(&mut con, "stats", "total_net_output_bytes");
    stop.store(true, Ordering::Relaxed);
    drop(held);
    for w in waiters {
        w.join().unwrap();
    }
    let _ = elapsed;
    (after - before) as f64 / cycles as f64
}

fn main() {
    let server = Server::start();
    let url = server.url();
    let mut con = server.con();

    // Handoff between two separate clients.
    let Handoffs {
        lib: lib_rounds,
        write: write_rounds,
        raw: raw_rounds,
        fenced: fenced_rounds,
        guarded: guarded_rounds,
        own: own_rounds,
        idle,
    } = handoff(&url, scale(800));
    if arms_picked().is_some() {
        // Only some arms ran: their p50s, and nothing else of the bench.
        let p50 = |r: &Rounds| (!r.took.is_empty()).then(|| us(percentile(&r.took, 0.5)));
        let rounds = [
            &lib_rounds,
            &write_rounds,
            &raw_rounds,
            &fenced_rounds,
            &guarded_rounds,
            &own_rounds,
        ];
        for (arm, r) in Arm::ALL.into_iter().zip(rounds) {
            if let Some(p) = p50(r) {
                println!("{:<8} handoff p50 {p:7.1} us", arm.name());
            }
        }
        if let (Some(l), Some(g)) = (p50(&lib_rounds), p50(&guarded_rounds)) {
            println!("lib / guarded p50 {:.3}x", l / g);
        }
        return;
    }
    let guarded = &guarded_rounds.took;
    let guarded_vs_floor = us(percentile(guarded, 0.5)) / us(percentile(&raw_rounds.took, 0.5));
    // The p99 target's floor: a lock keeping the promises, raw.
    let guarded_vs_floor_p99 =
        us(percentile(guarded, 0.99)) / us(percentile(&raw_rounds.took, 0.99));
    let vs_guarded_p50 = us(percentile(&lib_rounds.took, 0.5)) / us(percentile(guarded, 0.5));
    let guarded_server = {
        let v = &guarded_rounds.server;
        v[v.len() / 2]
    };
    let (lib, raw, fenced) = (&lib_rounds.took, &raw_rounds.took, &fenced_rounds.took);
    let fenced_server = {
        let v = &fenced_rounds.server;
        v[v.len() / 2]
    };
    let fenced_vs_floor = us(percentile(fenced, 0.5)) / us(percentile(raw, 0.5));
    let vs_fenced_p50 = us(percentile(lib, 0.5)) / us(percentile(fenced, 0.5));
    let median = |v: &[f64]| v[v.len() / 2];
    let (lib_server, raw_server) = (median(&lib_rounds.server), median(&raw_rounds.server));
    let idle_p50 = us(percentile(&idle, 0.5));
    let lib_p50 = us(percentile(lib, 0.5)) / idle_p50;
    let lib_p99 = us(percentile(lib, 0.99)) / idle_p50;
    let raw_p50 = us(percentile(raw, 0.5)) / idle_p50;
    // Round 3: against the raw blocked pop itself, interleaved round by round.
    let vs_floor_p50 = us(percentile(lib, 0.5)) / us(percentile(raw, 0.5));
    let vs_floor_p99 = us(percentile(lib, 0.99)) / us(percentile(raw, 0.99));
    let over = us(percentile(lib, 0.5)) - us(percentile(raw, 0.5));
    // After a long block.
    let (long_lib, long_raw) = long_handoff(&url, scale(80));
    let long_p50 = us(percentile(&long_lib, 0.5)) / us(percentile(&long_raw, 0.5));
    let long_p90 = us(percentile(&long_lib, 0.9)) / us(percentile(&long_raw, 0.9));

    // Eight separate clients on one key, against raw SET NX 1 ms polling.
    let run_for = if quick() {
        Duration::from_millis(700)
    } else {
        Duration::from_secs(3)
    };
    // Each round also runs the library with the register in this process
    // (no round trip in the hold), whose rate is set against the handoff.
    let (mut lib_rates, mut raw_rates, mut shares, mut lost) = (vec![], vec![], vec![], 0);
    let (mut bare_rates, mut bare_shares) = (vec![], vec![]);
    let mut last_counts = Vec::new();
    let share = |counts: &[u64]| {
        let fair = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
        *counts.iter().min().unwrap() as f64 / fair
    };
    for _ in 0..if quick() { 1 } else { 3 } {
        let (r, _, l) = contended(&url, 8, run_for, false, Register::Server);
        raw_rates.push(r);
        lost += l;
        let (r, counts, l) = contended(&url, 8, run_for, true, Register::Server);
        lib_rates.push(r);
        lost += l;
        shares.push(share(&counts));
        last_counts = counts;
        let (r, counts, l) = contended(&url, 8, run_for, true, Register::Process);
        bare_rates.push(r);
        lost += l;
        bare_shares.push(share(&counts));
    }
    let rate_ratio = lib_rates.iter().sum::<f64>() / raw_rates.iter().sum::<f64>();
    let min_share = shares.iter().cloned().fold(f64::MAX, f64::min);
    let bare_min_share = bare_shares.iter().cloned().fold(f64::MAX, f64::min);

    // Fan-out: server bytes per release with 32 waiting bystanders ÷ none.
    let cycles = scale(2_000);
    let quiet = fan_out(&url, 0, cycles);
    let busy = fan_out(&url, 32, cycles);
    let quiet2 = fan_out(&url, 0, cycles);
    let base = (quiet + quiet2) / 2.0;

    // Footprint: keys and memory per held lease and per released name.
    let names = if quick() { 5_000 } else { 100_000 };
    let c = client(&url);
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    let mem0 = info_field(&mut con, "memory", "used_memory");
    let held: Vec<_> = (0..1_000)
        .map(|i| c.lock(format!("bench:held:{i}")).acquire().unwrap())
        .collect();
    let mem_held = info_field(&mut con, "memory", "used_memory");
    drop(held);
    let mem1 = info_field(&mut con, "memory", "used_memory");
    for i in 0..names {
        c.lock(format!("bench:name:{i}"))
            .acquire()
            .unwrap()
            .release()
            .unwrap();
    }
    let mem2 = info_field(&mut con, "memory", "used_memory");
    // Every key but the server's fence floor (one per server, never
    // removed: fences never go back, lua/fence.lua).
    let left: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    let keys_left = left
        .iter()
        .filter(|k| k.as_str() != "redlease:fence-floor")
        .count();
    let per_lease = (mem_held as f64 - mem0 as f64) / 1_000.0;
    let per_name = (mem2 as f64 - mem1 as f64) / names as f64;

    println!("redlease handoff benchmark (floors measured in this run)");
    println!(
        "{:<52} {:>9.1} us",
        "floor: EVALSHA after 5 ms idle, p50", idle_p50
    );
    println!(
        "{:<52} p50 {:.2}x  p90 {:.2}x  p99 {:.2}x idle RTT (target p50 <= 1.5, p99 <= 3)",
        "handoff, two separate clients",
        lib_p50,
        us(percentile(lib, 0.9)) / idle_p50,
        lib_p99
    );
    println!(
        "{:<52} p50 {:.2}x idle RTT (no library: the physical floor of a blocked pop)",
        "handoff floor: plain BLPOP woken by RPUSH script", raw_p50
    );
    println!(
        "{:<52} p50 {:.2}x (target <= 1.25), p99 {:.2}x (target <= 1.5); floor p50 {:.1} us, p99 {:.1} us",
        "handoff against that floor, interleaved",
        vs_floor_p50,
        vs_floor_p99,
        us(percentile(raw, 0.5)),
        us(percentile(raw, 0.99))
    );
    println!(
        "{:<52} p50 {:.2}x, p99 {:.2}x the handoff to another client's waiter, interleaved ({:.1} us, p99 {:.1} us)",
        "handoff to a waiter in the holder's own client",
        us(percentile(&own_rounds.took, 0.5)) / us(percentile(lib, 0.5)),
        us(percentile(&own_rounds.took, 0.99)) / us(percentile(lib, 0.99)),
        us(percentile(&own_rounds.took, 0.5)),
        us(percentile(&own_rounds.took, 0.99)),
    );
    println!(
        "{:<52} p50 {:.2}x, p99 {:.2}x the plain floor, interleaved ({:.1} us over it at p50)",
        "write lock handoff (a writer blocked in write())",
        us(percentile(&write_rounds.took, 0.5)) / us(percentile(raw, 0.5)),
        us(percentile(&write_rounds.took, 0.99)) / us(percentile(raw, 0.99)),
        us(percentile(&write_rounds.took, 0.5)) - us(percentile(raw, 0.5)),
    );
    println!(
        "{:<52} p50 {long_p50:.2}x, p90 {long_p90:.2}x the plain floor blocked as long, interleaved (floor p50 {:.1} us)",
        format!("handoff after a {} ms block", LONG_BLOCK.as_millis()),
        us(percentile(&long_raw, 0.5)),
    );
    println!(
        "{:<52} p50 {over:.1} us, of which the server's own time {:.1} us (library {lib_server:.0} us, floor {raw_server:.0} us, INFO commandstats) and the rest the clients and the kernel",
        "handoff over its floor, where the time goes",
        lib_server - raw_server
    );
    println!(
        "{:<52} p50 {fenced_vs_floor:.2}x the plain floor ({:.1} us, server {fenced_server:.0} us); the library's handoff {vs_fenced_p50:.2}x it",
        "fenced floor: owner check, INCR fence, grant, RPUSH",
        us(percentile(fenced, 0.5)),
    );
    println!(
        "{:<52} p50 {guarded_vs_floor:.2}x, p99 {guarded_vs_floor_p99:.2}x the plain floor ({:.1} us, server {guarded_server:.0} us); the library's handoff {vs_guarded_p50:.2}x it",
        "guarded floor: + queue, fence floor, expiries, told, TIME, PTTL",
        us(percentile(guarded, 0.5)),
    );
    let lib_rate = lib_rates.iter().sum::<f64>() / lib_rates.len() as f64;
    let bare_rate = bare_rates.iter().sum::<f64>() / bare_rates.len() as f64;
    let handoff_rate = 1e6 / us(percentile(lib, 0.5));
    let fair_vs_handoff = bare_rate / handoff_rate;
    println!(
        "{:<52} {bare_rate:.0}/s = {fair_vs_handoff:.2}x 1 / handoff p50 ({handoff_rate:.0}/s; target >= 0.9): every acquisition is a handoff to the next in line; min share {bare_min_share:.2}, register in this process",
        "8 separate clients, one key, against the handoff",
    );
    println!(
        "{:<52} {lib_rate:.0}/s = {:.2}x 1 / handoff p50: each hold also makes the register's two round trips",
        "  the same, register on the server (GET + SET)",
        lib_rate / handoff_rate
    );
    println!(
        "{:<52} {:.0}/s vs raw SET NX 1 ms poll {:.0}/s = {:.2}x (target >= 1.0); min share {:.2} (target >= 0.8); lost updates {lost}; last run {last_counts:?}",
        "8 separate clients, one key",
        lib_rate,
        raw_rates.iter().sum::<f64>() / raw_rates.len() as f64,
        rate_ratio,
        min_share
    );
    println!(
        "{:<52} {:.1} B with 32 waiting on other names, {:.1} B with none: {:.2}x (target <= 1.2)",
        "server output bytes per acquire+release",
        busy,
        base,
        busy / base
    );
    println!(
        "{:<52} {:.0} B per held lease; {:.2} B per released name, {} keys left after {} names (the fence floor apart)",
        "footprint", per_lease, per_name, keys_left, names
    );
    println!(
        "{{\"bench\":\"handoff\",\"idle_rtt_us\":{idle_p50:.1},\"handoff_p50_ratio\":{lib_p50:.2},\"handoff_p99_ratio\":{lib_p99:.2},\"raw_blpop_p50_ratio\":{raw_p50:.2},\"handoff_vs_floor_p50\":{vs_floor_p50:.2},\"handoff_vs_floor_p99\":{vs_floor_p99:.2},\"handoff_over_floor_us\":{over:.1},\"long_block_handoff_vs_floor_p50\":{long_p50:.2},\"fenced_floor_vs_floor_p50\":{fenced_vs_floor:.2},\"handoff_vs_fenced_floor_p50\":{vs_fenced_p50:.2},\"guarded_floor_vs_floor_p50\":{guarded_vs_floor:.2},\"guarded_floor_vs_floor_p99\":{guarded_vs_floor_p99:.2},\"handoff_vs_guarded_floor_p50\":{vs_guarded_p50:.2},\"server_us_over_floor\":{:.1},\"contended_ratio\":{rate_ratio:.2},\"fair_vs_handoff\":{fair_vs_handoff:.2},\"min_share\":{:.2},\"lost_updates\":{lost},\"fan_out_ratio\":{:.2},\"bytes_per_lease\":{per_lease:.0},\"bytes_per_name\":{per_name:.2},\"keys_left\":{keys_left}}}",
        lib_server - raw_server,
        min_share.min(bare_min_share),
        busy / base
    );
}
