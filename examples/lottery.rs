//! The seed article's lottery: several service instances wake at noon and
//! each would draw 10 winners. Only one draw may happen. Each worker takes the
//! lock with `try_acquire`; the winner checks that no draw exists yet, draws,
//! and records the result with the fencing token.
//!
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run --example lottery`

#[path = "support/server.rs"]
mod support;

use std::time::{SystemTime, UNIX_EPOCH};

use redlease::redis::Commands;
use redlease::Client;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::url();
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    let day = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let draw_key = format!("lottery:{day}:winners");

    // Five "instances": separate clients, as if in separate processes.
    let workers: Vec<_> = (0..5)
        .map(|id| {
            let url = url.clone();
            let draw_key = draw_key.clone();
            std::thread::spawn(move || -> Result<bool, redlease::Error> {
                let client = Client::open(&url)?;
                let mut con = redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection())
                    .map_err(redlease::Error::from)?;
                let Some(guard) = client.lock(format!("lottery:{day}")).try_acquire()? else {
                    println!("instance {id}: another instance is drawing; nothing to do");
                    return Ok(false);
                };
                // The lock serialises draws; the check makes the draw happen
                // once even if an instance arrives after the winner released.
                let drawn: bool = con.exists(&draw_key).map_err(redlease::Error::from)?;
                if drawn {
                    println!("instance {id}: the draw already happened");
                    return Ok(false);
                }
                let users: Vec<u32> = (1..=1000).collect();
                let seed = uuid::Uuid::new_v4().as_u128();
                let winners: Vec<u32> = (0..10)
                    .map(|i| users[((seed >> (i * 10)) % users.len() as u128) as usize])
                    .collect();
                let _: () = con
                    .rpush(&draw_key, &winners)
                    .map_err(redlease::Error::from)?;
                println!(
                    "instance {id}: drew {winners:?} under fencing token {}",
                    guard.fencing_token()
                );
                guard.release()?;
                Ok(true)
            })
        })
        .collect();
    let draws = workers
        .into_iter()
        .map(|w| w.join().expect("worker panicked"))
        .filter(|r| matches!(r, Ok(true)))
        .count();
    let recorded: usize = con.llen(&draw_key)?;
    println!("draws: {draws}, winners recorded: {recorded}");
    assert_eq!(draws, 1);
    assert_eq!(recorded, 10);
    let _: () = con.del(&draw_key)?;
    Ok(())
}
