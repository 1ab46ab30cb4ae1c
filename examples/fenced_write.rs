//! Fencing tokens: why a lock alone cannot protect storage from a holder
//! that paused past its lease, and how the token fixes it.
//!
//! A takes the lock with a short lease and "pauses" (a GC pause, a swapped-out
//! VM) past it. B takes the lock and writes. A wakes up and writes too — the
//! storage rejects A's write because A's fencing token is older than the
//! newest it has seen.
//!
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run --example fenced_write`

#[path = "support/server.rs"]
mod support;

use std::time::Duration;

use redlease::Client;

/// The storage side: accept a write only with a token at least as new as
/// every token seen before. Here the storage is a Redis key; in real life it
/// is your database (`UPDATE ... WHERE fence <= $token`).
const FENCED_SET: &str = r"
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < seen then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1";

fn write(con: &mut redis::Connection, run: &str, token: u64, value: &str) -> bool {
    redis::Script::new(FENCED_SET)
        .key(format!("fenced:{run}:value"))
        .key(format!("fenced:{run}:seen"))
        .arg(token)
        .arg(value)
        .invoke::<i64>(con)
        .expect("storage write")
        == 1
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::url();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let name = format!("fenced:{run}");
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    let a = Client::open(&url)?;
    let b = Client::open(&url)?;

    let guard_a = a.lock(&name).lease(Duration::from_millis(300)).acquire()?;
    println!(
        "A holds the lock with fencing token {}",
        guard_a.fencing_token()
    );
    std::thread::sleep(Duration::from_millis(600)); // A "pauses" past its lease

    let guard_b = b.lock(&name).acquire()?;
    let ok_b = write(&mut con, &run, guard_b.fencing_token(), "written by B");
    println!(
        "B holds the lock with token {}; B's write accepted: {ok_b}",
        guard_b.fencing_token()
    );

    println!("A wakes up: is_held() = {}", guard_a.is_held());
    let ok_a = write(&mut con, &run, guard_a.fencing_token(), "written by A");
    println!(
        "A writes anyway with token {}: accepted = {ok_a}",
        guard_a.fencing_token()
    );
    println!("A's release: {:?}", guard_a.release().map_err(|e| e.kind()));
    guard_b.release()?;

    let value: String = redis::cmd("GET")
        .arg(format!("fenced:{run}:value"))
        .query(&mut con)?;
    println!("stored value: {value:?}");
    assert!(ok_b && !ok_a);
    assert_eq!(value, "written by B");
    let _: () = redis::cmd("DEL")
        .arg(format!("fenced:{run}:value"))
        .arg(format!("fenced:{run}:seen"))
        .query(&mut con)?;
    Ok(())
}
