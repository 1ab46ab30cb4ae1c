//! Namings of watchers under contention: how often a hand-over's (or an
//! offer's) watchers are told to look, counted on the server.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{client_with, Server};

/// Namings of watchers (`@<client>:<key>` messages) a turn, with 3
/// separate clients taking `kind` ("lock", "write", "semaphore" or "fair
/// semaphore", of one permit) in turn for 1.5 s,
/// each waiting up to `wait`.
pub fn namings_per_turn(kind: &'static str, wait: Duration) -> (f64, u64) {
    let server = Server::start();
    let stop = Arc::new(AtomicBool::new(false));
    let named = Arc::new(AtomicU64::new(0));
    let listener = {
        let (stop, named) = (stop.clone(), named.clone());
        let mut con = server.con();
        std::thread::spawn(move || {
            let mut ps = con.as_pubsub();
            ps.psubscribe("*").unwrap();
            ps.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(m) = ps.get_message() {
                    if m.get_payload_bytes().first() == Some(&b'@') {
                        named.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let end = Instant::now() + Duration::from_millis(1_500);
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let c = client_with(&server, |b| b);
            std::thread::spawn(move || {
                let mut turns = 0u64;
                while Instant::now() < end {
                    let got = match kind {
                        "lock" => c
                            .lock("cont")
                            .acquire_timeout(wait)
                            .unwrap()
                            .map(|g| g.release()),
                        "write" => c
                            .rw_lock("cont")
                            .write_timeout(wait)
                            .unwrap()
                            .map(|g| g.release()),
                        "semaphore" => c
                            .semaphore("cont", 1)
                            .acquire_timeout(wait)
                            .unwrap()
                            .map(|p| p.release()),
                        _ => c
                            .fair_semaphore("cont", 1)
                            .acquire_timeout(wait)
                            .unwrap()
                            .map(|p| p.release()),
                    };
                    if let Some(r) = got {
                        r.unwrap();
                        turns += 1;
                    }
                }
                turns
            })
        })
        .collect();
    let turns: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    listener.join().unwrap();
    let n = named.load(Ordering::Relaxed);
    (n as f64 / turns.max(1) as f64, turns)
}
