//! How Redlock's independent masters decide (see `backend/redlock.rs` for
//! the calls): a grant counts only with a majority of votes, a fence only
//! where a majority of counters agree on it, a lease only with time left
//! after the drift allowance. No I/O: the backend feeds the masters'
//! replies and the time spent, and the model checker (`check/`, "redlock")
//! feeds its own masters' replies to these same rules.

use std::time::Duration;

/// A majority of `masters`.
pub fn quorum(masters: usize) -> usize {
    masters / 2 + 1
}

/// What a lease loses to clock drift between independent masters: 1 % of
/// the lease plus 2 ms, subtracted at acquisition and at every renewal.
pub fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// Whether a lease granted by a majority still has time left in the
/// holder's view once `elapsed` (since the grant was sent) and the drift
/// are spent.
pub fn lease_left(lease: Duration, elapsed: Duration) -> bool {
    lease
        .checked_sub(elapsed + drift(lease))
        .is_some_and(|v| !v.is_zero())
}

/// One master's answer to a granting script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vote {
    /// Granted, with the fence it drew.
    Granted(i64),
    /// Refused: busy for about this many milliseconds (-1 or 0: unknown).
    Busy(i64),
    /// No vote: the call failed, timed out or was answered with an error.
    Failed,
}

/// The masters' votes on one grant, in master order.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    grants: usize,
    best: i64,
    /// What each master drew for this grant (its vote), in master order.
    drew: Vec<Option<i64>>,
    /// The shortest wait a refusing master reported.
    wait: Option<i64>,
    failed: usize,
}

impl Tally {
    /// Counts the votes, in master order.
    pub fn of(votes: impl IntoIterator<Item = Vote>) -> Tally {
        let mut t = Tally::default();
        for v in votes {
            t.drew.push(match v {
                Vote::Granted(f) => Some(f),
                _ => None,
            });
            match v {
                Vote::Granted(f) => {
                    t.grants += 1;
                    t.best = t.best.max(f);
                }
                Vote::Busy(ms) if ms > 0 => {
                    t.wait = Some(t.wait.map_or(ms, |w| w.min(ms)));
                }
                Vote::Busy(_) => {}
                Vote::Failed => t.failed += 1,
            }
        }
        t
    }

    fn quorum(&self) -> usize {
        quorum(self.drew.len())
    }

    /// A majority granted.
    pub fn granted(&self) -> bool {
        self.grants >= self.quorum()
    }

    /// The fence handed out if the grant holds: the largest one drawn.
    pub fn fence(&self) -> i64 {
        self.best
    }

    /// Whether the fence must be agreed by raising every master's counter
    /// to it: fewer than a majority drew it. A granting master's counter
    /// is at least the fence it drew, so when a majority drew the largest
    /// one a majority holds counters at it already (the usual case,
    /// counters moving in step), and the cycle costs no more round trips
    /// than on one server.
    pub fn needs_raise(&self) -> bool {
        self.drew.iter().filter(|&&d| d == Some(self.best)).count() < self.quorum()
    }

    /// Whether the raise (lua/fence_raise.lua, run on every master, in
    /// master order: each counter's value before it, `None` where it
    /// failed) leaves the fence owned by this grant on a majority: the
    /// raise moved the counter up to it, or this grant's own vote drew it
    /// there and nothing moved past it since. A fence is then owned on a
    /// majority by one grant only, and a raise lost on one master is
    /// harmless: that majority overlaps every later one. A master whose
    /// counter was at the fence already, from another grant's draw,
    /// confirmed it before, and a grant whose vote was drawn before that
    /// other grant was decided held the same fence again (found by the
    /// model checker, check/: "redlock: 3 masters, 2 clients, 2 faults";
    /// `fault_model.rs::redlock_never_repeats_a_fence_a_raise_found_already_drawn`).
    pub fn owned_after_raise(&self, before: &[Option<i64>]) -> bool {
        let fence = self.best;
        let owned = before
            .iter()
            .zip(&self.drew)
            .filter(|(before, drew)| match before {
                Some(b) => (0..fence).contains(b) || (*b == fence && **drew == Some(fence)),
                None => false,
            })
            .count();
        owned >= self.quorum()
    }

    /// How many masters gave no vote (failed, timed out or answered an
    /// error).
    pub fn failed(&self) -> usize {
        self.failed
    }

    /// Whether no majority could have granted: so many masters failed that
    /// the attempt reports an error rather than waiting on a quorum that
    /// cannot form.
    pub fn hopeless(&self) -> bool {
        !self.granted() && self.failed > self.drew.len() - self.quorum()
    }

    /// When a refused attempt tries again: the shortest wait a refusing
    /// master reported, cut to a quarter of it but not below `jitter` (a
    /// few milliseconds, random, so that contenders fall out of step), or
    /// `jitter` alone on split votes.
    pub fn retry_after(&self, jitter: i64) -> i64 {
        self.wait.map_or(jitter, |w| w.min(jitter.max(w / 4)))
    }
}

/// The jitter of a refused attempt's retry (`Tally::retry_after`), from
/// a random `draw`: 5 to 49 ms.
pub fn jitter(draw: u128) -> i64 {
    5 + (draw % 45) as i64
}

/// The largest [`jitter`].
pub const JITTER_MAX: i64 = 49;

/// A majority decision over 1/0 votes (`None`: no answer) of `masters`:
/// `Some(1)` when a majority says 1, `Some(0)` when so many say otherwise
/// that no majority can, else `None` (undecided).
pub fn combine(masters: usize, votes: impl IntoIterator<Item = Option<i64>>) -> Option<i64> {
    let q = quorum(masters);
    let (mut yes, mut no) = (0, 0);
    for v in votes {
        match v {
            Some(1) => yes += 1,
            Some(_) => no += 1,
            None => {}
        }
    }
    if yes >= q {
        Some(1)
    } else if no > masters - q {
        Some(0)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_of_grants_agrees_on_the_largest_fence() {
        let t = Tally::of([Vote::Granted(7), Vote::Granted(7), Vote::Busy(300)]);
        assert!(t.granted() && !t.needs_raise());
        assert_eq!(t.fence(), 7);
        let t = Tally::of([Vote::Granted(7), Vote::Granted(9), Vote::Failed]);
        assert!(t.granted() && t.needs_raise());
        assert_eq!(t.fence(), 9);
    }

    #[test]
    fn a_raise_owns_the_fence_only_where_it_moved_or_drew_it() {
        let t = Tally::of([Vote::Granted(7), Vote::Granted(9), Vote::Failed]);
        // Moved up on the first and third, drawn on the second.
        assert!(t.owned_after_raise(&[Some(7), Some(9), Some(3)]));
        // At 9 already on the first: another grant drew it there.
        assert!(!t.owned_after_raise(&[Some(9), Some(9), None]));
        // Past it on the third.
        assert!(!t.owned_after_raise(&[Some(7), None, Some(10)]));
    }

    #[test]
    fn too_many_failures_report_rather_than_wait() {
        assert!(Tally::of([Vote::Failed, Vote::Failed, Vote::Granted(1)]).hopeless());
        assert!(!Tally::of([Vote::Failed, Vote::Busy(5), Vote::Granted(1)]).hopeless());
    }

    #[test]
    fn a_refused_attempt_retries_at_a_quarter_of_the_wait_or_the_jitter() {
        let t = Tally::of([Vote::Busy(400), Vote::Busy(1_000), Vote::Granted(1)]);
        assert_eq!(t.retry_after(20), 100);
        assert_eq!(t.retry_after(120), 120);
        let t = Tally::of([Vote::Busy(10), Vote::Busy(-1), Vote::Granted(1)]);
        assert_eq!(t.retry_after(20), 10);
        assert_eq!(
            Tally::of([Vote::Busy(-1), Vote::Failed]).retry_after(20),
            20
        );
        assert!((0..1_000).all(|d| (5..=JITTER_MAX).contains(&jitter(d))));
    }

    #[test]
    fn a_lease_holds_only_with_time_left_after_the_drift() {
        let s = Duration::from_secs(1);
        let ms = Duration::from_millis(1);
        assert!(lease_left(s, 987 * ms));
        assert!(!lease_left(s, 988 * ms));
    }

    #[test]
    fn a_majority_decides_and_too_many_noes_deny() {
        assert_eq!(combine(3, [Some(1), Some(1), None]), Some(1));
        assert_eq!(combine(3, [Some(0), Some(0), Some(1)]), Some(0));
        assert_eq!(combine(3, [Some(0), None, Some(1)]), None);
    }
}
