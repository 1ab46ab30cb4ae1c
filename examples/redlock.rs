//! Redlock over five independent local masters: the lock holds while a
//! majority is up, and fails cleanly (no partial keys) without one.
//!
//! `cargo run --example redlock` starts five private redis-server processes
//! on free loopback ports (or set `REDLOCK_URLS` to a comma-separated list).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redlease::Client;

struct Master {
    child: Child,
    url: String,
}

impl Drop for Master {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_master() -> Master {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (scripts/ensure-redis.sh)");
    let url = format!("redis://127.0.0.1:{port}/");
    let client = redis::Client::open(url.as_str()).unwrap();
    let start = Instant::now();
    while client.get_connection().is_err() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    Master { child, url }
}

fn main() -> Result<(), redlease::Error> {
    let mut masters: Vec<Master> = Vec::new();
    let urls: Vec<String> = match std::env::var("REDLOCK_URLS") {
        Ok(list) => list.split(',').map(str::to_owned).collect(),
        Err(_) => {
            masters = (0..5).map(|_| start_master()).collect();
            masters.iter().map(|m| m.url.clone()).collect()
        }
    };
    let client = Client::builder()
        .redlock(&urls)
        .node_timeout(Duration::from_millis(200))
        .build()?;
    let lock = client.lock("redlock-demo");

    let start = Instant::now();
    let g = lock.acquire()?;
    println!(
        "acquired on a majority of {} masters in {:?}, fencing token {}",
        urls.len(),
        start.elapsed(),
        g.fencing_token()
    );
    g.release()?;

    if masters.len() == 5 {
        // Lose two masters: three of five still make a majority.
        masters.truncate(3);
        let start = Instant::now();
        let g = lock.acquire_timeout(Duration::from_secs(2))?;
        println!(
            "with 2 of 5 masters down: acquired = {} in {:?}",
            g.is_some(),
            start.elapsed()
        );
        drop(g);
        // Lose a third: no majority, so no lock — an error, not a hang.
        masters.truncate(2);
        let start = Instant::now();
        let r = lock.acquire_timeout(Duration::from_secs(1));
        println!(
            "with 3 of 5 masters down: {:?} after {:?}",
            r.as_ref().map(|g| g.is_some()).map_err(|e| e.kind()),
            start.elapsed()
        );
        assert!(r.is_err());
    }
    Ok(())
}
