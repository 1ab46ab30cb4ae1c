//! Counters and histograms on the `metrics` crate facade (feature
//! `metrics`); without the feature every function here compiles to nothing.
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `redlease_acquisitions_total` | counter | `primitive` |
//! | `redlease_wait_seconds` | histogram | `primitive` |
//! | `redlease_hold_seconds` | histogram | `primitive` |
//! | `redlease_leases_lost_total` | counter | — |
//! | `redlease_renewals_total` | counter | `outcome` (`ok`, `lost`, `retry`) |
//! | `redlease_wakeups_total` | counter | — |

use std::time::Duration;

#[cfg(feature = "metrics")]
pub(crate) fn acquired(what: &'static str, waited: Duration) {
    metrics::counter!("redlease_acquisitions_total", "primitive" => what).increment(1);
    metrics::histogram!("redlease_wait_seconds", "primitive" => what).record(waited.as_secs_f64());
}

#[cfg(feature = "metrics")]
pub(crate) fn released(what: &'static str, held: Duration) {
    metrics::histogram!("redlease_hold_seconds", "primitive" => what).record(held.as_secs_f64());
}

#[cfg(feature = "metrics")]
pub(crate) fn lease_lost() {
    metrics::counter!("redlease_leases_lost_total").increment(1);
}

#[cfg(feature = "metrics")]
pub(crate) fn renewals(outcome: &'static str, n: u64) {
    metrics::counter!("redlease_renewals_total", "outcome" => outcome).increment(n);
}

#[cfg(feature = "metrics")]
pub(crate) fn wakeup() {
    metrics::counter!("redlease_wakeups_total").increment(1);
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn acquired(_: &'static str, _: Duration) {}

#[cfg(not(feature = "metrics"))]
pub(crate) fn released(_: &'static str, _: Duration) {}

#[cfg(not(feature = "metrics"))]
pub(crate) fn lease_lost() {}

#[cfg(not(feature = "metrics"))]
pub(crate) fn renewals(_: &'static str, _: u64) {}

#[cfg(not(feature = "metrics"))]
pub(crate) fn wakeup() {}
