//! The judge of one acquisition's attempts: what each outcome means
//! (done, repeat at once, wait, fail), and how long an outage is ridden out.

use std::time::{Duration, Instant};

use super::Attempt;
use crate::error::{ErrorKind, Result};

/// Errors a waiter retries through: the server is unreachable or slow, or
/// (Redlock) too many masters failed at once for this attempt to decide.
fn is_outage(e: &crate::error::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Connection | ErrorKind::Pool | ErrorKind::QuorumNotReached
    )
}

/// What to do after one attempt.
pub(super) enum Step<T> {
    Done(T),
    /// Its connection broke at once: the script may have run. Repeat now:
    /// the same token gets the same hold, or a definite "busy".
    Again,
    /// Busy, or riding out an outage: wait at most this long.
    Wait(Option<Duration>),
    Fail(crate::error::Error),
}

/// The judge of one acquisition's attempts (see [`Wakeup::acquire`]).
pub(super) struct Tries {
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
    pub(super) fn new(tolerance: Duration, response: Duration, deadline: Option<Instant>) -> Tries {
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
    pub(super) fn in_outage(&self) -> bool {
        self.outage.is_some()
    }

    pub(super) fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// At the deadline: "timed out", or the error that kept us from knowing.
    pub(super) fn timed_out<T>(&mut self) -> Result<Option<T>> {
        match self.last.take() {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    pub(super) fn judge<T>(&mut self, attempt: &mut impl FnMut() -> Result<Attempt<T>>) -> Step<T> {
        let started = Instant::now();
        match attempt() {
            Ok(Attempt::Acquired(v)) => Step::Done(v),
            Ok(Attempt::Busy(retry)) => {
                self.outage = None;
                self.last = None;
                Step::Wait(retry)
            }
            Err(e) if self.repeats > 0 && e.broke_at_once(started.elapsed(), self.response) => {
                self.repeats -= 1;
                self.last = Some(e);
                Step::Again
            }
            Err(e) if is_outage(&e) => {
                // A waiter rides out a short outage (a restart, a Sentinel
                // failover); a longer one, or the caller's deadline, ends it.
                let since = *self.outage.get_or_insert(started);
                if since.elapsed() >= self.tolerance || self.past_deadline() {
                    return Step::Fail(e);
                }
                self.last = Some(e);
                self.backoff =
                    (self.backoff * 2).clamp(Duration::from_millis(20), Duration::from_millis(500));
                Step::Wait(Some(self.backoff))
            }
            Err(e) => Step::Fail(e),
        }
    }
}
