//! The judge of one acquisition's attempts: what each outcome means
//! (done, repeat at once, wait, fail), and how long an outage is ridden
//! out. It is given each outcome and the times, and sends nothing: the
//! waiting loop (`Wakeup::acquire`) makes the attempts.

use std::ops::Sub;
use std::time::{Duration, Instant};

use crate::error::{ErrorKind, Result};
use crate::protocol::timing::span;

/// Errors a waiter retries through: the server is unreachable or slow, or
/// (Redlock) too many masters failed at once for this attempt to decide.
fn is_outage(e: &crate::error::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Connection | ErrorKind::Pool | ErrorKind::QuorumNotReached
    )
}

/// The outcome of one attempt to acquire.
pub(crate) enum Attempt<T> {
    Acquired(T),
    /// Held by someone else; retry after at most this long (the holder's
    /// remaining lease), or after the fallback wait if unknown.
    Busy(Option<Duration>),
}

impl<T> Attempt<T> {
    /// Busy, from a script's "wait this many ms": 0 means the holder's
    /// lease ends within the millisecond (retry at once, not after the
    /// fallback wait); negative means unknown.
    pub(crate) fn busy_ms(ms: i64) -> Attempt<T> {
        Attempt::Busy((ms >= 0).then(|| Duration::from_millis(ms.max(1) as u64)))
    }
}

/// How a waiter rides out an outage (a server unreachable, too few Redlock
/// masters answering): a short one (a restart, a Sentinel failover) is
/// waited out, each wait twice the last of this acquisition (`backoff`,
/// zero before the first), from 20 ms to at most 500 ms; a longer one
/// (`tolerance` since the attempt that started it, at `since`), or one
/// that reached the caller's deadline (`past_deadline`), ends the wait:
/// `None`. Else the next wait, which is the next `backoff`.
pub fn ride_out<T>(
    since: T,
    now: T,
    backoff: Duration,
    tolerance: Duration,
    past_deadline: bool,
) -> Option<Duration>
where
    T: Copy + PartialOrd + Sub<Output = Duration>,
{
    if span(since, now) >= tolerance || past_deadline {
        return None;
    }
    Some((backoff * 2).clamp(Duration::from_millis(20), Duration::from_millis(500)))
}

/// What to do after one attempt.
pub(crate) enum Step<T> {
    Done(T),
    /// Its connection broke at once: the script may have run. Repeat now:
    /// the same token gets the same hold, or a definite "busy".
    Again,
    /// Busy, or riding out an outage: wait at most this long.
    Wait(Option<Duration>),
    Fail(crate::error::Error),
}

/// The judge of one acquisition's attempts (see `Wakeup::acquire`).
pub(crate) struct Tries {
    tolerance: Duration,
    response: Duration,
    deadline: Option<Instant>,
    /// When the attempt that started the current outage began.
    outage: Option<Instant>,
    /// The error of the last attempt, if it failed (reported at the deadline).
    last: Option<crate::error::Error>,
    backoff: Duration,
    /// Immediate repeats left (bounds a flapping connection).
    repeats: u32,
}

impl Tries {
    pub(crate) fn new(tolerance: Duration, response: Duration, deadline: Option<Instant>) -> Tries {
        Tries {
            tolerance,
            response,
            deadline,
            outage: None,
            last: None,
            backoff: Duration::ZERO,
            repeats: 3,
        }
    }

    /// Whether the last attempts failed to reach the server.
    pub(crate) fn in_outage(&self) -> bool {
        self.outage.is_some()
    }

    /// Whether the deadline has passed by `now`.
    pub(crate) fn past_deadline(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }

    /// At the deadline: "timed out", or the error that kept us from knowing.
    pub(crate) fn timed_out<T>(&mut self) -> Result<Option<T>> {
        match self.last.take() {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    /// What `outcome`, of an attempt sent at `started`, means `now` it is
    /// known.
    pub(crate) fn judge<T>(
        &mut self,
        outcome: Result<Attempt<T>>,
        started: Instant,
        now: Instant,
    ) -> Step<T> {
        let took = now.saturating_duration_since(started);
        match outcome {
            Ok(Attempt::Acquired(v)) => Step::Done(v),
            Ok(Attempt::Busy(retry)) => {
                self.outage = None;
                self.last = None;
                Step::Wait(retry)
            }
            Err(e) if self.repeats > 0 && e.broke_at_once(took, self.response) => {
                self.repeats -= 1;
                self.last = Some(e);
                Step::Again
            }
            Err(e) if is_outage(&e) => {
                let since = *self.outage.get_or_insert(started);
                let past = self.past_deadline(now);
                let Some(backoff) = ride_out(since, now, self.backoff, self.tolerance, past) else {
                    return Step::Fail(e);
                };
                self.last = Some(e);
                self.backoff = backoff;
                Step::Wait(Some(backoff))
            }
            Err(e) => Step::Fail(e),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The judge driven without a server: outcomes and times in, steps out.
    use super::{Attempt, Step, Tries};
    use crate::error::{Error, ErrorKind};
    use std::time::{Duration, Instant};

    const MS: Duration = Duration::from_millis(1);

    fn broke() -> Result<Attempt<()>, Error> {
        Err(Error::new(ErrorKind::Connection, "connection reset"))
    }

    fn refused() -> Result<Attempt<()>, Error> {
        Err(Error::new(ErrorKind::Connection, "connection refused").unsent())
    }

    fn wait<T>(step: Step<T>) -> Option<Option<Duration>> {
        match step {
            Step::Wait(d) => Some(d),
            _ => None,
        }
    }

    #[test]
    fn a_connection_that_broke_at_once_is_tried_again_three_times_then_waited_out() {
        let t0 = Instant::now();
        let mut tries = Tries::new(Duration::from_secs(10), Duration::from_secs(2), None);
        for _ in 0..3 {
            assert!(matches!(tries.judge(broke(), t0, t0 + MS), Step::Again));
        }
        // The fourth: an outage, ridden out with a growing pause.
        assert_eq!(wait(tries.judge(broke(), t0, t0 + MS)), Some(Some(20 * MS)));
        assert!(tries.in_outage());
        assert_eq!(
            wait(tries.judge(broke(), t0, t0 + 2 * MS)),
            Some(Some(40 * MS))
        );
    }

    #[test]
    fn a_late_failure_is_an_outage_not_a_repeat() {
        let t0 = Instant::now();
        let mut tries = Tries::new(Duration::from_secs(10), Duration::from_secs(2), None);
        // A reply missing for a whole second (half the response timeout):
        // asking again would wait as long.
        let step = tries.judge(broke(), t0, t0 + Duration::from_secs(1));
        assert_eq!(wait(step), Some(Some(20 * MS)));
    }

    #[test]
    fn an_outage_ends_the_wait_at_its_tolerance_or_the_deadline() {
        let t0 = Instant::now();
        let tolerance = Duration::from_secs(3);
        let mut tries = Tries::new(tolerance, Duration::from_secs(2), None);
        assert!(wait(tries.judge(refused(), t0, t0 + MS)).is_some());
        assert!(wait(tries.judge(refused(), t0 + tolerance / 2, t0 + tolerance / 2)).is_some());
        let late = t0 + tolerance;
        assert!(matches!(tries.judge(refused(), late, late), Step::Fail(_)));

        let deadline = t0 + Duration::from_secs(1);
        let mut tries = Tries::new(tolerance, Duration::from_secs(2), Some(deadline));
        assert!(wait(tries.judge(refused(), t0, t0 + MS)).is_some());
        assert!(matches!(
            tries.judge(refused(), deadline, deadline),
            Step::Fail(_)
        ));
    }

    #[test]
    fn a_busy_answer_ends_an_outage_and_says_how_long_to_wait() {
        let t0 = Instant::now();
        let mut tries = Tries::new(Duration::from_secs(10), Duration::from_secs(2), None);
        assert!(wait(tries.judge(refused(), t0, t0 + MS)).is_some());
        assert!(tries.in_outage());
        let step = tries.judge(Ok(Attempt::<()>::busy_ms(250)), t0, t0 + MS);
        assert_eq!(wait(step), Some(Some(250 * MS)));
        assert!(!tries.in_outage());
        assert!(tries.timed_out::<()>().unwrap().is_none());
        assert!(matches!(
            tries.judge(Ok(Attempt::Acquired(7)), t0, t0 + MS),
            Step::Done(7)
        ));
    }

    #[test]
    fn other_errors_end_the_wait_at_once() {
        let t0 = Instant::now();
        let mut tries = Tries::new(Duration::from_secs(10), Duration::from_secs(2), None);
        let e = Err::<Attempt<()>, _>(Error::new(ErrorKind::Auth, "wrong password"));
        assert!(matches!(tries.judge(e, t0, t0 + MS), Step::Fail(_)));
    }

    #[test]
    fn an_outage_s_waits_double_from_20_ms_to_500_ms_until_its_tolerance() {
        use super::ride_out;
        let t0 = Instant::now();
        let tol = Duration::from_secs(10);
        let mut backoff = Duration::ZERO;
        let mut waits = Vec::new();
        for _ in 0..7 {
            backoff = ride_out(t0, t0 + MS, backoff, tol, false).unwrap();
            waits.push(backoff.as_millis());
        }
        assert_eq!(waits, [20, 40, 80, 160, 320, 500, 500]);
        assert_eq!(ride_out(t0, t0 + tol, backoff, tol, false), None);
        assert_eq!(ride_out(t0, t0 + MS, backoff, tol, true), None);
        // A clock read before the outage's start counts as none of it.
        assert!(ride_out(t0 + MS, t0, Duration::ZERO, tol, false).is_some());
    }
}
