//! The smallest useful program: run a piece of work under a distributed lock.
//!
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run --example quickstart`

#[path = "support/server.rs"]
mod support;

use std::time::Duration;

use redlease::Client;

fn main() -> Result<(), redlease::Error> {
    let url = support::url();
    let client = Client::open(&url)?;

    // `with_lock` waits for the lock, runs the closure, releases (also on panic).
    let answer = client.with_lock("quickstart:report", || {
        println!("holding quickstart:report; doing the work");
        42
    })?;
    println!("work returned {answer}");

    // Guards give more control: a bounded wait, the fencing token, is_held().
    let lock = client.lock("quickstart:report");
    match lock.acquire_timeout(Duration::from_secs(2))? {
        Some(guard) => {
            println!(
                "acquired again with fencing token {} (held: {}, depth {})",
                guard.fencing_token(),
                guard.is_held(),
                lock.hold_count()
            );
            guard.release()?;
        }
        None => println!("someone else held it for 2 s; giving up"),
    }
    Ok(())
}
