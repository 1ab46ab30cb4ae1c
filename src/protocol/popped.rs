//! What a waiter makes of a grant its pop took from the open list: how
//! long it surely holds, and whether it claims the full lease before the
//! guard is handed out. The library (`lease::taken_by_pop`) and the model
//! checker (`check/`) both decide by [`popped_hold`].

use std::time::Duration;

/// A popped grant's first hold (see [`popped_hold`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoppedHold {
    /// The hold surely runs this long from when the blocking call was
    /// sent (the grant started at some instant between then and its
    /// reply).
    pub first: Duration,
    /// Claim the full lease now (one extension, counted from its own
    /// sending), before the guard is handed out; else the renewal thread
    /// claims it a third of the way through `first`, off the handoff's
    /// path.
    pub claim_now: bool,
}

/// The first hold of a grant a pop took: `left` is what the grant had
/// (the claim the script gave it, or the grant's own `PTTL` where the pop
/// alone took it), less a millisecond (as `valid_for` counts a lease) and
/// the topology's `drift`, and never more than the lease's `valid`. It
/// started between the sending of the blocking call and its reply,
/// `elapsed` apart: after a long block (a third of it gone), or with a
/// fixed lease (`watchdog` false: nothing renews it), the full lease is
/// claimed at once; a process frozen while it was blocked thus holds the
/// name no longer than the grant's claim.
pub fn popped_hold(
    valid: Duration,
    left: Duration,
    drift: Duration,
    elapsed: Duration,
    watchdog: bool,
) -> PoppedHold {
    let first = valid.min(left.saturating_sub(Duration::from_millis(1) + drift));
    PoppedHold {
        first,
        claim_now: !watchdog || elapsed >= first / 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_prompt_pop_holds_its_grants_time_less_a_millisecond_and_claims_later() {
        let h = popped_hold(MS * 29_999, MS * 500, Duration::ZERO, MS * 10, true);
        assert_eq!(
            h,
            PoppedHold {
                first: MS * 499,
                claim_now: false
            }
        );
    }

    #[test]
    fn a_late_reply_or_a_fixed_lease_claims_at_once() {
        let late = popped_hold(MS * 29_999, MS * 500, Duration::ZERO, MS * 167, true);
        assert!(late.claim_now);
        let fixed = popped_hold(MS * 29_999, MS * 500, Duration::ZERO, MS, false);
        assert!(fixed.claim_now);
    }

    #[test]
    fn the_drift_and_a_short_lease_bound_the_first_hold() {
        let h = popped_hold(MS * 200, MS * 1_000, MS * 12, MS, true);
        assert_eq!(h.first, MS * 200);
        let h = popped_hold(MS * 29_999, MS * 1_000, MS * 12, MS, true);
        assert_eq!(h.first, MS * 987);
    }
}
