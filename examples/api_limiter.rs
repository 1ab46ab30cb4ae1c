//! A semaphore capping concurrent calls to a fragile upstream API across
//! every worker of every process: at most 3 calls in flight, whatever the
//! number of workers. Permits of a crashed worker come back after its lease.
//!
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run --example api_limiter`

#[path = "support/server.rs"]
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redlease::Client;

fn main() -> Result<(), redlease::Error> {
    let url = support::url();
    let name = format!("api_limiter:{}", uuid::Uuid::new_v4().simple());
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    // Two "processes" (clients) with four workers each.
    let clients = [Client::open(&url)?, Client::open(&url)?];
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let sem = clients[i % 2].semaphore(&name, 3);
            let (in_flight, peak) = (in_flight.clone(), peak.clone());
            std::thread::spawn(move || -> Result<(), redlease::Error> {
                for _ in 0..5 {
                    let permit = sem.acquire()?;
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(10)); // the API call
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    permit.release()?;
                }
                Ok(())
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker panicked")?;
    }
    let peak = peak.load(Ordering::SeqCst);
    println!("40 calls by 8 workers in 2 clients; peak concurrency {peak} (limit 3)");
    assert!(peak <= 3);
    println!(
        "free permits now: {}",
        clients[0].semaphore(&name, 3).available()?
    );
    Ok(())
}
