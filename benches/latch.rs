//! Count-down latch wake-up latency: the last `count_down` in one client →
//! a waiter blocked in `wait` in another client returns. Reported as a
//! ratio to floors measured in the same run, interleaved round by round:
//! one raw PING round trip made after the same 5 ms idle (the machine's
//! wake-up cost), and the same wake-up without the library, two ways: a
//! thread blocked in a plain `BLPOP`, woken by a one-line `RPUSH` script
//! (the floor of the blocking pop the latch's waiters use), and a thread
//! reading its own subscription, woken by a one-line `PUBLISH` script (the
//! floor of the release message they used before, and still use where the
//! server refuses blocking pops). They run in a new order each round
//! (`support::arm_order`), each signaller making one round trip before
//! its waiter blocks; raw connections use TCP_NODELAY. Beside them the
//! **guarded floor**: the library's own server work sent raw, without the
//! library: its count-down script (lua/latch_count_down.lua, with its
//! prelude) run by `EVALSHA`, and a raw waiter blocked as the library's
//! waiter blocks (`BLMOVE` of the round's opening list onto itself). The
//! latch's distance from it is what the library's client
//! adds. Between the two, the **bare floor**: the least any latch counted
//! down on the server and woken by a blocking pop does, as a raw script
//! (`DECR`; at zero the count removed, one element pushed for every waiter
//! to pop and put back, its expiry set) and a raw waiter in `BLMOVE` of
//! that list onto itself. The guarded floor's distance from it is what
//! this library's latch does on the server beyond that (rounds, the
//! waiters' registrations, a message for those that cannot block, a
//! foreign value refused, no key left by a waiter killed while blocked).
//!
//! Run: `cargo bench --bench latch` (`REDLEASE_BENCH_QUICK=1` for a short
//! smoke run).

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::time::{Duration, Instant};

use common::Server;
use redlease::Client;
use support::{arm_order, percentile, raw_con, scale, us};

/// One arm of a round.
#[derive(Clone, Copy)]
enum Arm {
    Latch,
    Pop,
    PubSub,
    Bare,
    Guarded,
}

fn main() {
    let server = Server::start();
    let url = server.url();
    // Long fallback poll: a waiter that returns fast was woken by the
    // opening, not by a look of its own.
    let builder = || {
        Client::builder()
            .url(&url)
            .fallback_poll(Duration::from_secs(30))
    };
    let counter = builder().build().unwrap();
    let waiter = builder().build().unwrap();
    let mut raw = raw_con(&url);
    let rounds = scale(400);
    // One waiting thread for every arm, told which to run.
    let (go_tx, go_rx) = crossbeam_channel::bounded::<(Arm, String)>(1);
    // The guarded floor's signaller: the library's count-down of latch
    // `g`, sent raw; its reply is the round when it opened the latch (the
    // count left is then 0), else the count left.
    let count_down = redis::Script::new(&common::lua_source("latch_count_down.lua"));
    let count_down_raw = |con: &mut redis::Connection, g: &str| -> i64 {
        let reply: redis::Value = count_down
            .key(g)
            .key(format!("{g}:waiters"))
            .key(format!("{g}:blocked"))
            .arg("")
            .arg("")
            .arg(60_000)
            .invoke(con)
            .unwrap();
        match reply {
            redis::Value::Int(left) => left,
            redis::Value::BulkString(_) => 0,
            other => panic!("a count-down replied {other:?}"),
        }
    };
    // The bare floor's signaller: a count-down and, at zero, the opening.
    let bare_count_down = redis::Script::new(
        "local n = redis.call('DECR', KEYS[1]) \
         if n == 0 then \
           redis.call('DEL', KEYS[1]) \
           redis.call('RPUSH', KEYS[2], 'open') \
           redis.call('PEXPIRE', KEYS[2], '60000') \
         end \
         return n",
    );
    let (done_tx, done_rx) = crossbeam_channel::bounded::<Instant>(1);
    let mut pop_con = raw_con(&url);
    let sub = raw_con(&url);
    let w = std::thread::spawn(move || {
        let mut sub = sub;
        let mut ps = sub.as_pubsub();
        ps.subscribe("bench:raw").unwrap();
        while let Ok((arm, name)) = go_rx.recv() {
            match arm {
                Arm::Latch => waiter.count_down_latch(&name).wait().unwrap(),
                Arm::Pop => {
                    let _: (String, String) = redis::cmd("BLPOP")
                        .arg("bench:raw:list")
                        .arg(40)
                        .query(&mut pop_con)
                        .unwrap();
                }
                Arm::PubSub => {
                    let _ = ps.get_message().unwrap();
                }
                // The library's waiter's pop (the guarded floor's) is the
                // bare floor's too.
                Arm::Bare | Arm::Guarded => {
                    let _: String = redis::cmd("BLMOVE")
                        .arg(&name)
                        .arg(&name)
                        .arg("LEFT")
                        .arg("RIGHT")
                        .arg(40)
                        .query(&mut pop_con)
                        .unwrap();
                }
            }
            done_tx.send(Instant::now()).unwrap();
        }
    });
    let publish = redis::Script::new("return redis.call('PUBLISH', KEYS[1], ARGV[1])");
    let push = redis::Script::new("return redis.call('RPUSH', KEYS[1], ARGV[1])");
    let _: i64 = publish.key("bench:warm").arg("x").invoke(&mut raw).unwrap();
    let _: i64 = push
        .key("bench:warm:list")
        .arg("x")
        .invoke(&mut raw)
        .unwrap();
    // Loaded like the library's: a count-down of a latch with no count.
    count_down_raw(&mut raw, "bench:warm:latch");
    let _: i64 = bare_count_down
        .key("bench:warm:bare")
        .key("bench:warm:bare:open")
        .invoke(&mut raw)
        .unwrap();
    let mut floor = Vec::with_capacity(rounds);
    let mut wake = Vec::with_capacity(rounds);
    let mut popped = Vec::with_capacity(rounds);
    let mut subscribed = Vec::with_capacity(rounds);
    let mut bare = Vec::with_capacity(rounds);
    let mut guarded = Vec::with_capacity(rounds);
    let arms = [Arm::Latch, Arm::Pop, Arm::PubSub, Arm::Bare, Arm::Guarded];
    for i in 0..rounds {
        // Floor: one round trip after 5 ms idle.
        std::thread::sleep(Duration::from_millis(5));
        let t = Instant::now();
        let _: String = redis::cmd("PING").query(&mut raw).unwrap();
        floor.push(t.elapsed());
        // The arms run in a new order each round (`arm_order`: a fixed
        // order measured one arm against a server and machine the other had
        // just woken), and each signaller makes one round trip before its
        // waiter blocks (the latch's `try_set_count`).
        for k in arm_order(i, arms.len()) {
            let arm = arms[k];
            let name = format!("bench:latch:{}", i % 8);
            let latch = counter.count_down_latch(&name);
            // The guarded floor's latch: counted to 1 in round `r<i>`,
            // with a waiter registered as blocked (so the count-down
            // pushes the opening), blocked on the round's opening list.
            let g = format!("bench:guarded:{}", i % 8);
            // The bare floor's latch: a count of 1, its list per round.
            let b = format!("bench:bare:{}", i % 8);
            match arm {
                Arm::Latch => assert!(latch.try_set_count(1).unwrap()),
                Arm::Guarded => {
                    let _: () = redis::pipe()
                        .cmd("SET")
                        .arg(&g)
                        .arg(format!("1:r{i}"))
                        .ignore()
                        .cmd("SET")
                        .arg(format!("{g}:blocked"))
                        .arg(1)
                        .arg("PX")
                        .arg(60_000)
                        .ignore()
                        .query(&mut raw)
                        .unwrap();
                }
                Arm::Bare => {
                    let _: () = redis::cmd("SET").arg(&b).arg(1).query(&mut raw).unwrap();
                }
                _ => {
                    let _: String = redis::cmd("PING").query(&mut raw).unwrap();
                }
            }
            let waits_on = match arm {
                Arm::Guarded => format!("{g}#r{i}:open"),
                Arm::Bare => format!("{b}#r{i}:open"),
                _ => name,
            };
            go_tx.send((arm, waits_on)).unwrap();
            std::thread::sleep(Duration::from_millis(5)); // the waiter blocks
            let t = Instant::now();
            match arm {
                Arm::Latch => latch.count_down().unwrap(),
                Arm::Pop => {
                    let _: i64 = push
                        .key("bench:raw:list")
                        .arg("x")
                        .invoke(&mut raw)
                        .unwrap();
                }
                Arm::PubSub => {
                    let _: i64 = publish.key("bench:raw").arg("x").invoke(&mut raw).unwrap();
                }
                Arm::Bare => {
                    let left: i64 = bare_count_down
                        .key(&b)
                        .key(format!("{b}#r{i}:open"))
                        .invoke(&mut raw)
                        .unwrap();
                    assert_eq!(left, 0);
                }
                Arm::Guarded => assert_eq!(count_down_raw(&mut raw, &g), 0),
            }
            let returned = done_rx.recv_timeout(Duration::from_secs(40)).unwrap();
            let took = returned.saturating_duration_since(t);
            match arm {
                Arm::Latch => wake.push(took),
                Arm::Pop => popped.push(took),
                Arm::PubSub => subscribed.push(took),
                Arm::Bare => bare.push(took),
                Arm::Guarded => guarded.push(took),
            }
        }
    }
    drop(go_tx);
    w.join().unwrap();
    floor.sort();
    wake.sort();
    popped.sort();
    subscribed.sort();
    bare.sort();
    guarded.sort();
    let g50 = percentile(&guarded, 0.5);
    let bare50 = percentile(&bare, 0.5);
    let b50 = percentile(&subscribed, 0.5);
    let p50 = percentile(&popped, 0.5);
    let p99 = percentile(&popped, 0.99);
    let f50 = percentile(&floor, 0.5);
    let (w50, w90, w99) = (
        percentile(&wake, 0.5),
        percentile(&wake, 0.9),
        percentile(&wake, 0.99),
    );
    println!("redlease latch benchmark ({rounds} rounds, interleaved with the floors)");
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
        "{:<44} {:>9.1} us   {:.2}x floor (p99 {:.1} us; no library: the floor of a blocking-pop wake-up)",
        "raw RPUSH script -> BLPOP returns, p50",
        us(p50),
        us(p50) / us(f50),
        us(p99)
    );
    println!(
        "{:<44} {:>9.1} us   {:.2}x floor (no library: the floor of a pub/sub wake-up)",
        "raw PUBLISH script -> subscriber returns, p50",
        us(b50),
        us(b50) / us(f50)
    );
    println!(
        "{:<44} {:>9.1} us   {:.2}x the BLPOP floor (the least any latch counted down on the server does)",
        "bare floor: DECR, DEL, RPUSH, PEXPIRE -> BLMOVE",
        us(bare50),
        us(bare50) / us(p50)
    );
    println!(
        "{:<44} {:>9.1} us   {:.2}x the BLPOP floor, {:.2}x the bare (the library's server work, no library); the latch {:.2}x it",
        "guarded floor: its script raw -> BLMOVE returns",
        us(g50),
        us(g50) / us(p50),
        us(g50) / us(bare50),
        us(w50) / us(g50)
    );
    println!(
        "{:<44} {:.2}x (target <= 1.25), p99 {:.2}x",
        "the latch against the raw BLPOP wake-up, p50",
        us(w50) / us(p50),
        us(w99) / us(p99)
    );
    println!(
        "{:<44} {:.2}x",
        "the latch against the raw pub/sub wake-up",
        us(w50) / us(b50)
    );
    println!(
        "{{\"bench\":\"latch\",\"wake_vs_pop_p50\":{:.2},\"wake_vs_pop_p99\":{:.2},\"wake_vs_raw_p50\":{:.2},\"floor_p50_us\":{:.1},\"wake_p50_us\":{:.1},\"wake_p99_us\":{:.1},\"pop_p50_us\":{:.1},\"wake_p50_ratio\":{:.2},\"wake_p99_ratio\":{:.2},\"raw_pubsub_p50_ratio\":{:.2},\"bare_vs_pop_p50\":{:.2},\"guarded_vs_pop_p50\":{:.2},\"wake_vs_guarded_p50\":{:.2}}}",
        us(w50) / us(p50),
        us(w99) / us(p99),
        us(w50) / us(b50),
        us(f50),
        us(w50),
        us(w99),
        us(p50),
        us(w50) / us(f50),
        us(w99) / us(f50),
        us(b50) / us(f50),
        us(bare50) / us(p50),
        us(g50) / us(p50),
        us(w50) / us(g50)
    );
}
