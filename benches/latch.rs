//! Count-down latch wake-up latency: the last `count_down` in one client →
//! a waiter blocked in `wait` in another client returns. Reported as a
//! ratio to the floor measured in the same run, interleaved: one raw PING
//! round trip made after the same 5 ms idle (the machine's wake-up cost).
//! Next to it, interleaved too, the same wake-up without the library: a
//! one-line script that `PUBLISH`es, and a thread reading its own
//! subscription, which returns on the message (no script logic, no thread
//! hop: what any pub/sub wake-up costs on this machine). The two take
//! turns at each place in the round, each signaller making one round trip
//! before its waiter blocks.
//!
//! Run: `cargo bench --bench latch` (`REDLEASE_BENCH_QUICK=1` for a short
//! smoke run).

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::time::{Duration, Instant};

use common::Server;
use redlease::Client;
use support::{percentile, scale, us};

fn main() {
    let server = Server::start();
    let url = server.url();
    // Long fallback poll: a waiter that returns fast was woken by a message.
    let builder = || {
        Client::builder()
            .url(&url)
            .fallback_poll(Duration::from_secs(30))
    };
    let counter = builder().build().unwrap();
    let waiter = builder().build().unwrap();
    let mut raw = server.con();
    let rounds = scale(400);
    let (go_tx, go_rx) = crossbeam_channel::bounded::<String>(1);
    let (done_tx, done_rx) = crossbeam_channel::bounded::<Instant>(1);
    let w = std::thread::spawn(move || {
        while let Ok(name) = go_rx.recv() {
            waiter.count_down_latch(&name).wait().unwrap();
            done_tx.send(Instant::now()).unwrap();
        }
    });
    // The raw wake-up: a reader of its own subscription.
    let mut sub = server.con();
    let (raw_go_tx, raw_go_rx) = crossbeam_channel::bounded::<()>(1);
    let (raw_done_tx, raw_done_rx) = crossbeam_channel::bounded::<Instant>(1);
    let reader = std::thread::spawn(move || {
        let mut ps = sub.as_pubsub();
        ps.subscribe("bench:raw").unwrap();
        while raw_go_rx.recv().is_ok() {
            let _ = ps.get_message().unwrap();
            raw_done_tx.send(Instant::now()).unwrap();
        }
    });
    let publish = redis::Script::new("return redis.call('PUBLISH', KEYS[1], ARGV[1])");
    let _: i64 = publish.key("bench:warm").arg("x").invoke(&mut raw).unwrap();
    let mut floor = Vec::with_capacity(rounds);
    let mut wake = Vec::with_capacity(rounds);
    let mut bare = Vec::with_capacity(rounds);
    for i in 0..rounds {
        // Floor: one round trip after 5 ms idle.
        std::thread::sleep(Duration::from_millis(5));
        let t = Instant::now();
        let _: String = redis::cmd("PING").query(&mut raw).unwrap();
        floor.push(t.elapsed());
        // The latch and the same wake-up without the library take turns at
        // each place in the round (a fixed order measured one arm against
        // a server and machine the other had just woken), and each
        // signaller makes one round trip before its waiter blocks (the
        // latch's `try_set_count`).
        for arm in 0..2 {
            if (i + arm) % 2 == 0 {
                // The latch: the waiter is blocked (its subscription is
                // live after the first round), then the last count-down.
                let name = format!("bench:latch:{}", i % 8);
                let latch = counter.count_down_latch(&name);
                assert!(latch.try_set_count(1).unwrap());
                go_tx.send(name).unwrap();
                std::thread::sleep(Duration::from_millis(5));
                let t = Instant::now();
                latch.count_down().unwrap();
                let returned = done_rx.recv_timeout(Duration::from_secs(40)).unwrap();
                wake.push(returned.saturating_duration_since(t));
            } else {
                let _: String = redis::cmd("PING").query(&mut raw).unwrap();
                raw_go_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(5));
                let t = Instant::now();
                let _: i64 = publish.key("bench:raw").arg("x").invoke(&mut raw).unwrap();
                let returned = raw_done_rx.recv_timeout(Duration::from_secs(40)).unwrap();
                bare.push(returned.saturating_duration_since(t));
            }
        }
    }
    drop(go_tx);
    w.join().unwrap();
    drop(raw_go_tx);
    reader.join().unwrap();
    floor.sort();
    wake.sort();
    bare.sort();
    let b50 = percentile(&bare, 0.5);
    let f50 = percentile(&floor, 0.5);
    let (w50, w90, w99) = (
        percentile(&wake, 0.5),
        percentile(&wake, 0.9),
        percentile(&wake, 0.99),
    );
    println!("redlease latch benchmark ({rounds} rounds, interleaved with the floor)");
    println!(
        "{:<44} {:>9.1} us",
        "floor: PING after 5 ms idle, p50",
        us(f50)
    );
    println!(
        "{:<44} {:>9.1} us   {:.2}x floor (p90 {:.1} us, p99 {:.1} us = {:.2}x)",
        "last count_down -> waiter returns, p50",
        us(w50),
        us(w50) / us(f50),
        us(w90),
        us(w99),
        us(w99) / us(f50)
    );
    println!(
        "{:<44} {:>9.1} us   {:.2}x floor (no library: the floor of a pub/sub wake-up)",
        "raw PUBLISH script -> subscriber returns, p50",
        us(b50),
        us(b50) / us(f50)
    );
    println!(
        "{:<44} {:.2}x (target <= 1.25)",
        "the latch against the raw wake-up, p50",
        us(w50) / us(b50)
    );
    println!(
        "{{\"bench\":\"latch\",\"wake_vs_raw_p50\":{:.2},\"floor_p50_us\":{:.1},\"wake_p50_us\":{:.1},\"wake_p99_us\":{:.1},\"wake_p50_ratio\":{:.2},\"wake_p99_ratio\":{:.2},\"raw_pubsub_p50_ratio\":{:.2}}}",
        us(w50) / us(b50),
        us(f50),
        us(w50),
        us(w99),
        us(w50) / us(f50),
        us(w99) / us(f50),
        us(b50) / us(f50)
    );
}
