//! A deploy gate: a coordinator waits until every worker has drained its
//! traffic, using a count-down latch. Workers are separate clients, as
//! separate processes would be; the coordinator is woken by the last
//! `count_down`, not by polling.
//!
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run --example deploy_gate`

#[path = "support/server.rs"]
mod support;

use std::time::{Duration, Instant};

use redlease::Client;

fn main() -> Result<(), redlease::Error> {
    let url = support::url();
    let coordinator = Client::open(&url)?;
    let gate = coordinator.count_down_latch("deploy-gate:v42");
    let workers = 4;
    if !gate.try_set_count(workers)? {
        println!("a deploy is already waiting at this gate; not starting another");
        return Ok(());
    }
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || -> Result<(), redlease::Error> {
                let me = Client::open(&url)?;
                std::thread::sleep(Duration::from_millis(100 + 150 * i));
                println!("worker {i}: drained, counting the gate down");
                me.count_down_latch("deploy-gate:v42").count_down()
            })
        })
        .collect();
    if gate.wait_timeout(Duration::from_secs(30))? {
        println!(
            "coordinator: all {workers} workers drained after {:?}; deploying",
            start.elapsed()
        );
    } else {
        println!(
            "coordinator: gave up waiting; {} still draining",
            gate.count()?
        );
    }
    for h in handles {
        h.join().expect("worker panicked")?;
    }
    // The finished latch left nothing behind: the next deploy can use it.
    assert_eq!(gate.count()?, 0);
    Ok(())
}
