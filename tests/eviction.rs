//! Connecting to a server that may evict lock keys logs a warning.

mod common;

use std::sync::Mutex;

use common::Server;

static LOGGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Recorder;

impl log::Log for Recorder {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        LOGGED
            .lock()
            .unwrap()
            .push(format!("{} {}", record.level(), record.args()));
    }
    fn flush(&self) {}
}

#[test]
fn warns_when_keys_can_be_evicted() {
    log::set_logger(&Recorder).unwrap();
    log::set_max_level(log::LevelFilter::Warn);
    let safe = Server::start();
    redlease::Client::open(safe.url()).unwrap();
    assert!(!LOGGED
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("maxmemory-policy")));
    for policy in ["allkeys-lru", "volatile-ttl"] {
        let risky = Server::start_with(&["--maxmemory-policy", policy]);
        redlease::Client::open(risky.url()).unwrap();
        let logged = LOGGED.lock().unwrap();
        assert!(
            logged
                .iter()
                .any(|l| l.starts_with("WARN") && l.contains(policy)),
            "{logged:?}"
        );
    }
}
