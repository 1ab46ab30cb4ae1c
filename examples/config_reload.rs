//! A read-write lock around a shared configuration: many readers use it
//! concurrently; a reloader takes the write lock to replace it atomically,
//! and is not starved by the readers.
//!
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run --example config_reload`

#[path = "support/server.rs"]
mod support;

use std::time::Duration;

use redlease::redis::Commands;
use redlease::Client;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::url();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let (name, a, b) = (
        format!("config:{run}"),
        format!("config:{run}:a"),
        format!("config:{run}:b"),
    );
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    let _: () = con.set(&a, 0)?;
    let _: () = con.set(&b, 0)?;

    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (url, name, a, b) = (url.clone(), name.clone(), a.clone(), b.clone());
            std::thread::spawn(
                move || -> Result<usize, Box<dyn std::error::Error + Send + Sync>> {
                    let client = Client::open(&url)?;
                    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
                    let rw = client.rw_lock(&name);
                    let mut torn = 0;
                    for _ in 0..30 {
                        let g = rw.read()?;
                        // The two halves must always match under the read lock.
                        let (x, y): (u64, u64) = (con.get(&a)?, con.get(&b)?);
                        torn += usize::from(x != y);
                        drop(g);
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Ok(torn)
                },
            )
        })
        .collect();
    let client = Client::open(&url)?;
    let rw = client.rw_lock(&name);
    for version in 1..=5u64 {
        let g = rw.write()?;
        let _: () = con.set(&a, version)?;
        std::thread::sleep(Duration::from_millis(3)); // a reload takes time
        let _: () = con.set(&b, version)?;
        println!(
            "reloaded config to version {version} (fencing token {})",
            g.fencing_token()
        );
        drop(g);
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut torn = 0;
    for r in readers {
        torn += r
            .join()
            .expect("reader panicked")
            .map_err(|e| e.to_string())?;
    }
    println!("readers saw a half-written config {torn} times");
    assert_eq!(torn, 0);
    let _: () = con.del(&[&a, &b])?;
    Ok(())
}
