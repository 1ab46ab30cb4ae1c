//! The `metrics` feature: acquisitions, wait and hold times, lost leases,
//! renewals and wake-ups reach the installed recorder.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{client_with, Server};
use metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

#[derive(Default)]
struct Count(AtomicU64);

impl CounterFn for Count {
    fn increment(&self, v: u64) {
        self.0.fetch_add(v, Ordering::Relaxed);
    }
    fn absolute(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
}

impl HistogramFn for Count {
    fn record(&self, _: f64) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Sums every metric by name (labels folded).
#[derive(Default, Clone)]
struct Totals(Arc<Mutex<HashMap<String, Arc<Count>>>>);

impl Totals {
    fn get(&self, name: &str) -> u64 {
        self.0
            .lock()
            .unwrap()
            .get(name)
            .map_or(0, |c| c.0.load(Ordering::Relaxed))
    }
    fn slot(&self, key: &Key) -> Arc<Count> {
        self.0
            .lock()
            .unwrap()
            .entry(key.name().to_string())
            .or_default()
            .clone()
    }
}

impl Recorder for Totals {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.slot(key))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.slot(key))
    }
}

#[test]
fn the_library_reports_to_the_metrics_facade() {
    let totals = Totals::default();
    metrics::set_global_recorder(totals.clone()).unwrap();
    let server = Server::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_millis(300)));
    let lock = c.lock("m");
    let g = lock.acquire().unwrap();
    std::thread::sleep(Duration::from_millis(350)); // a renewal or two
    g.release().unwrap();
    let g = lock.acquire().unwrap();
    lock.force_unlock().unwrap();
    assert!(g.lost_signal().wait_timeout(Duration::from_secs(5)));
    drop(g);
    assert_eq!(totals.get("redlease_acquisitions_total"), 2);
    assert_eq!(totals.get("redlease_wait_seconds"), 2);
    assert_eq!(totals.get("redlease_hold_seconds"), 1);
    assert_eq!(totals.get("redlease_leases_lost_total"), 1);
    assert!(totals.get("redlease_renewals_total") >= 1);
}
