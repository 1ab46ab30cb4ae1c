//! Logging under an outage: one warning per outage, not one per attempt
//! (r2d2 alone logged an ERROR for every failed connection attempt), and
//! every lease warning names the lease.

mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{client_with, Server};

static LINES: Mutex<Vec<(log::Level, String, String)>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            LINES
                .lock()
                .unwrap()
                .push((r.level(), r.target().to_string(), r.args().to_string()));
        }
    }
    fn flush(&self) {}
}

#[test]
fn an_outage_logs_a_few_warnings_not_one_per_attempt() {
    log::set_logger(&Capture).unwrap();
    log::set_max_level(log::LevelFilter::Warn);
    let mut server = Server::start();
    let c = client_with(&server, |b| {
        b.watchdog_timeout(Duration::from_millis(600))
            .connect_timeout(Duration::from_millis(100))
    });
    let g = c.lock("logged-lease").acquire().unwrap();
    server.stop();
    // Many attempts during the outage, each failing fast.
    let end = Instant::now() + Duration::from_secs(2);
    let mut attempts = 0;
    while Instant::now() < end {
        let t = Instant::now();
        let r = c.lock("other").try_acquire();
        // try_ during an outage returns within the connect timeout.
        assert!(
            t.elapsed() < Duration::from_millis(600),
            "{:?}",
            t.elapsed()
        );
        assert!(r.is_err());
        attempts += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!g.is_held());
    drop(g);
    let lines = LINES.lock().unwrap().clone();
    let text: Vec<String> = lines
        .iter()
        .map(|(l, t, m)| format!("{l} {t}: {m}"))
        .collect();
    assert!(attempts > 10, "{attempts} attempts");
    assert!(
        lines.len() <= 6,
        "{} warnings for {attempts} attempts:\n{}",
        lines.len(),
        text.join("\n")
    );
    let lost: Vec<&String> = text.iter().filter(|l| l.contains("lease of")).collect();
    assert!(
        !lost.is_empty(),
        "the loss was not logged:\n{}",
        text.join("\n")
    );
    assert!(
        lost.iter().all(|l| l.contains("logged-lease")),
        "a lease warning without its name: {lost:?}"
    );
}
