//! Transfers between accounts under one multi-lock: both accounts are
//! locked together (all or nothing, in a canonical order, so opposite
//! transfers never deadlock), and the books always balance.
//!
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run --example transfer`

#[path = "support/server.rs"]
mod support;

use redlease::redis::Commands;
use redlease::Client;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::url();
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    let accounts = ["transfer:alice", "transfer:bob", "transfer:carol"];
    for a in accounts {
        let _: () = con.set(a, 1_000)?;
    }
    // Three tellers (separate clients), each moving money around in a
    // different direction: a→b, b→c, c→a.
    let tellers: Vec<_> = (0..3)
        .map(|t| {
            let url = url.clone();
            std::thread::spawn(
                move || -> Result<u32, Box<dyn std::error::Error + Send + Sync>> {
                    let client = Client::open(&url)?;
                    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
                    let (from, to) = (accounts[t], accounts[(t + 1) % 3]);
                    let both = client.multi_lock([to, from]); // any order is fine
                    let mut moved = 0;
                    for _ in 0..50 {
                        let guard = both.acquire()?;
                        // A non-atomic read-modify-write of two keys: only the
                        // lock keeps it correct.
                        let a: i64 = con.get(from)?;
                        let b: i64 = con.get(to)?;
                        let _: () = con.set(from, a - 7)?;
                        let _: () = con.set(to, b + 7)?;
                        moved += 7;
                        guard.release()?;
                    }
                    Ok(moved)
                },
            )
        })
        .collect();
    let mut moved = 0;
    for t in tellers {
        moved += t
            .join()
            .expect("teller panicked")
            .map_err(|e| e.to_string())?;
    }
    let total: i64 = accounts
        .iter()
        .map(|a| con.get::<_, i64>(a))
        .sum::<redis::RedisResult<i64>>()?;
    println!("moved {moved} in 150 transfers; total is {total} (started with 3000)");
    assert_eq!(total, 3_000, "the books must balance");
    for a in accounts {
        let _: () = con.del(a)?;
    }
    Ok(())
}
