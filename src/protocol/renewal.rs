//! What a renewal's reply means for the lease, with no I/O: extended to
//! when, given up as lost, or tried again when. The renewal thread
//! (`crate::renewal`) drives it with the server's replies and its clock;
//! the model checker (`check/`) with its models' replies and virtual
//! milliseconds, so both hold a lease by the same rule.

use std::ops::{Add, Sub};
use std::time::Duration;

/// What the renewal thread does with a lease after one renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewed<T> {
    /// The server extended it.
    Extended {
        /// Where the lease runs to in the holder's view: its validity
        /// from when the call was sent, never from the reply (the
        /// server's new expiry started after the send).
        until: T,
        /// When the next renewal is due: a third of the lease after the
        /// send.
        next: T,
    },
    /// The server answered that it is not ours: another owner, or no key.
    Lost,
    /// Undecided (no reply, an error reply, no Redlock majority).
    Retry {
        /// When it is tried again: before the lease runs out in the
        /// holder's view.
        at: T,
    },
    /// Undecided, and the lease has run out in the holder's view: lost.
    Expired,
}

/// The outcome of a renewal sent at `sent` whose reply (the extend
/// script's: 1 extended, 0 not ours) is `reply` (`None`: none, or not an
/// integer), read at `now`, for a lease of `lease` of which the holder
/// counts `valid` (the lease less the clock drift it allows for), whose
/// holder's view ends at `expires` so far.
pub fn renewed<T>(
    reply: Option<i64>,
    sent: T,
    now: T,
    expires: T,
    lease: Duration,
    valid: Duration,
) -> Renewed<T>
where
    T: Copy + Ord + Add<Duration, Output = T> + Sub<Output = Duration>,
{
    match reply {
        Some(1) => Renewed::Extended {
            until: sent + valid,
            next: sent + lease / 3,
        },
        Some(0) => Renewed::Lost,
        _ => retry(now, expires, lease),
    }
}

/// An undecided renewal of a lease of `lease` whose holder's view ends at
/// `expires`, at `now`: lost if that has passed; else tried again soon
/// but not in a tight loop (a tenth of the lease, 10 ms to 1 s), and
/// within half of the time left, so that a short first lease (a grant
/// taken by a pop) gets its retry before it ends.
pub fn retry<T>(now: T, expires: T, lease: Duration) -> Renewed<T>
where
    T: Copy + Ord + Add<Duration, Output = T> + Sub<Output = Duration>,
{
    if now >= expires {
        return Renewed::Expired;
    }
    let left = expires - now;
    let wait = (lease / 10)
        .clamp(Duration::from_millis(10), Duration::from_secs(1))
        .min((left / 2).max(Duration::from_millis(5)));
    Renewed::Retry {
        at: (now + wait).min(expires),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_renewal_extends_from_its_send_and_is_due_again_a_third_later() {
        let sent = Instant::now();
        let now = sent + Duration::from_millis(40);
        let (lease, valid) = (Duration::from_secs(30), Duration::from_millis(29_698));
        assert_eq!(
            renewed(Some(1), sent, now, sent, lease, valid),
            Renewed::Extended {
                until: sent + valid,
                next: sent + Duration::from_secs(10)
            }
        );
        assert_eq!(
            renewed(Some(0), sent, now, sent, lease, valid),
            Renewed::Lost
        );
    }

    #[test]
    fn an_undecided_renewal_is_retried_within_half_of_what_is_left() {
        let now = Instant::now();
        let lease = Duration::from_secs(30);
        // A tenth of the lease, at most a second.
        let far = now + Duration::from_secs(20);
        let at = now + Duration::from_secs(1);
        assert_eq!(
            renewed(None, now, now, far, lease, lease),
            Renewed::Retry { at }
        );
        assert_eq!(
            renewed(Some(7), now, now, far, lease, lease),
            Renewed::Retry { at }
        );
        // Within half of what is left (a popped grant's short lease).
        let soon = now + Duration::from_millis(300);
        let at = now + Duration::from_millis(150);
        assert_eq!(retry(now, soon, lease), Renewed::Retry { at });
        // At least 5 ms, never past the end.
        let end = now + Duration::from_millis(4);
        assert_eq!(retry(now, end, lease), Renewed::Retry { at: end });
        // At least 10 ms for a short lease with time left.
        let at = now + Duration::from_millis(10);
        assert_eq!(
            retry(now, far, Duration::from_millis(50)),
            Renewed::Retry { at }
        );
        assert_eq!(retry(far, far, lease), Renewed::Expired);
    }
}
