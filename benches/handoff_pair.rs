//! The library's handoff against its guarded floor alone, two arms, with
//! the harness's own knobs: how far the ratio moves with things that are
//! not the library (docs/performance-log.md, session 59). The `handoff`
//! bench runs five arms; this one runs the library and the guarded floor
//! (the waiter's pipeline and the guarded release, raw: `GuardedHandoff`) turn about, in a
//! shuffled order per round, and prints their p50s for each of four
//! harness shapes, interleaved shape by shape in one process:
//!
//! - `tight`: the next round's arm starts as soon as the last one's waiter
//!   has cleaned up (as the `handoff` bench does);
//! - `gap`: 2 ms idle after each arm;
//! - `info`: as `tight`, with the server's `INFO commandstats` read 5 ms
//!   before the release in the rounds that are not timed (as the `handoff`
//!   bench reads the server's time);
//! - `info+gap`: both.
//!
//! Run: `cargo bench --bench handoff_pair` (`REDLEASE_BENCH_QUICK=1` for a
//! short smoke run).

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::time::{Duration, Instant};

use common::Server;
use redlease::Client;
use support::{
    arm_order, floor_waiter_turn, library_waiter_turn, percentile, raw_con, scale, us,
    GuardedHandoff,
};

/// A harness shape: idle after each arm, and `INFO` in untimed rounds.
#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    gap: bool,
    info: bool,
}

const SHAPES: [Shape; 4] = [
    Shape {
        name: "tight",
        gap: false,
        info: false,
    },
    Shape {
        name: "gap",
        gap: true,
        info: false,
    },
    Shape {
        name: "info",
        gap: false,
        info: true,
    },
    Shape {
        name: "info+gap",
        gap: true,
        info: true,
    },
];

fn main() {
    let server = Server::start();
    let url = server.url();
    let holder = Client::builder().url(&url).build().unwrap();
    let waiter = Client::builder().url(&url).build().unwrap();
    let mut idle = raw_con(&url);
    let mut stats = raw_con(&url);
    let mut wcon = raw_con(&url);
    let (tx, rx) = crossbeam_channel::bounded::<Instant>(1);
    let (go_tx, go_rx) = crossbeam_channel::bounded::<bool>(1);
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
    let (ended_tx, ended_rx) = crossbeam_channel::bounded::<()>(1);
    let t = std::thread::spawn(move || {
        let lock = waiter.lock("pair:lock");
        while let Ok(library) = go_rx.recv() {
            if library {
                library_waiter_turn(&lock, &tx, &done_rx);
            } else {
                floor_waiter_turn(&mut wcon, "pair:f", true, &tx, &done_rx);
            }
            ended_tx.send(()).unwrap();
        }
    });
    let lock = holder.lock("pair:lock");
    let guarded = GuardedHandoff::new(&mut idle, "pair:f");
    let one = redis::Script::new("return 1");
    let _: i64 = one.invoke(&mut idle).unwrap();
    let rounds = scale(400);
    // Per shape: (library, guarded) timed handoffs.
    let mut took: Vec<(Vec<Duration>, Vec<Duration>)> = vec![(vec![], vec![]); SHAPES.len()];
    for round in 0..rounds {
        for (s, shape) in SHAPES.iter().enumerate() {
            std::thread::sleep(Duration::from_millis(5));
            let _: i64 = one.invoke(&mut idle).unwrap();
            let timed = !shape.info || round % 2 == 0;
            for arm in arm_order(round * SHAPES.len() + s, 2) {
                let library = arm == 0;
                let g = if library {
                    Some(lock.acquire().unwrap())
                } else {
                    guarded.hold(&mut idle);
                    None
                };
                go_tx.send(library).unwrap();
                std::thread::sleep(Duration::from_millis(5));
                if !timed {
                    let _: String = redis::cmd("INFO")
                        .arg("commandstats")
                        .query(&mut stats)
                        .unwrap();
                }
                std::thread::sleep(Duration::from_millis(5));
                let t0 = Instant::now();
                match g {
                    Some(g) => drop(g),
                    None => guarded.release(&mut idle),
                }
                let d = rx.recv().unwrap() - t0;
                done_tx.send(()).unwrap();
                ended_rx.recv().unwrap();
                if timed {
                    let (l, r) = &mut took[s];
                    if library {
                        l.push(d)
                    } else {
                        r.push(d)
                    }
                }
                if shape.gap {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }
    drop(go_tx);
    t.join().unwrap();
    println!(
        "redlease handoff, the library against its guarded floor alone (two arms, interleaved)"
    );
    let mut json = vec![];
    for (shape, (l, r)) in SHAPES.iter().zip(&mut took) {
        l.sort();
        r.sort();
        let (lp, rp) = (us(percentile(l, 0.5)), us(percentile(r, 0.5)));
        println!(
            "{:<9} library p50 {lp:6.1} us, guarded floor {rp:6.1} us: {:.3}x",
            shape.name,
            lp / rp
        );
        json.push(format!("\"{}\":{:.3}", shape.name, lp / rp));
    }
    println!("{{\"bench\":\"handoff_pair\",{}}}", json.join(","));
}
