//! A rayon batch job: many items processed in parallel, each under its own
//! lock, with the same items also touched by a second "process" (another
//! client) running at the same time. Per-item counters must come out exact.
//!
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run --example rayon_batch`

#[path = "support/server.rs"]
mod support;

use rayon::prelude::*;
use redlease::redis::Commands;
use redlease::Client;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::url();
    let items: Vec<u32> = (0..20).collect();
    let passes = 10;
    let run = uuid::Uuid::new_v4().simple().to_string();

    let job = |client: Client| {
        let url = url.clone();
        let items = items.clone();
        let run = run.clone();
        std::thread::spawn(move || {
            (0..passes)
                .flat_map(|_| items.clone())
                .collect::<Vec<_>>()
                .par_iter()
                .try_for_each_init(
                    || {
                        redis::Client::open(url.as_str())
                            .unwrap()
                            .get_connection()
                            .unwrap()
                    },
                    |con, item| -> Result<(), redlease::Error> {
                        let key = format!("batch:{run}:item:{item}");
                        client.with_lock(format!("batch:{run}:{item}"), || {
                            // Read-modify-write: only correct under the lock.
                            let v: u64 = con.get::<_, Option<u64>>(&key).unwrap().unwrap_or(0);
                            let _: () = con.set(&key, v + 1).unwrap();
                        })
                    },
                )
        })
    };
    let a = job(Client::open(&url)?);
    let b = job(Client::open(&url)?);
    a.join().expect("job a panicked")?;
    b.join().expect("job b panicked")?;

    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    let mut ok = true;
    for item in &items {
        let key = format!("batch:{run}:item:{item}");
        let v: u64 = con.get(&key)?;
        ok &= v == 2 * passes as u64;
        let _: () = con.del(&key)?;
    }
    println!(
        "{} items x {passes} passes x 2 jobs: every counter exact: {ok}",
        items.len()
    );
    assert!(ok, "lost updates");
    Ok(())
}
