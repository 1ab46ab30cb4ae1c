//! What every model's clients share: the faults a search may inject, a
//! client's life, a call's outcome, a look of its renewal thread, and
//! small readers of replies.

use std::time::Duration;

use crate::keyspace::Reply;

pub(crate) fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

/// Which faults the search may inject (each counts against the budget).
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    pub budget: u8,
    pub lost_request: bool,
    pub lost_reply: bool,
    pub crash: bool,
    pub freeze: bool,
    pub clock_step: bool,
    /// A wake-up message lost (models with message waiters).
    pub lost_message: bool,
    /// A blocked waiter's connection broken (a Cluster slot move
    /// redirects it, a network cut): a fair waiter's place among the
    /// blocked is lost (the lock model). Not an excuse for the order.
    pub cut: bool,
    /// A client's subscriber loses its connection and starts again (the
    /// lock model): namings sent meanwhile go unheard, and its start makes
    /// up for them (`Watches::listening`). Not an excuse for liveness.
    pub resubscribe: bool,
    /// A server's clock jumps ahead a lease (Redlock: one master's), the
    /// fault Redlock's safety rests on not happening.
    pub clock_jump: bool,
}

/// One kind of fault (see [`Faults`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    LostRequest,
    LostReply,
    Crash,
    Freeze,
    ClockStep,
    LostMessage,
    Cut,
    Resubscribe,
    ClockJump,
}

impl Faults {
    /// Every kind, `budget` of them in a run.
    pub fn all(budget: u8) -> Faults {
        use Fault::*;
        Faults::only(
            budget,
            &[
                LostRequest,
                LostReply,
                Crash,
                Freeze,
                ClockStep,
                LostMessage,
            ],
        )
    }

    /// These kinds only, `budget` of them in a run.
    pub fn only(budget: u8, kinds: &[Fault]) -> Faults {
        Faults {
            budget,
            lost_request: kinds.contains(&Fault::LostRequest),
            lost_reply: kinds.contains(&Fault::LostReply),
            crash: kinds.contains(&Fault::Crash),
            freeze: kinds.contains(&Fault::Freeze),
            clock_step: kinds.contains(&Fault::ClockStep),
            lost_message: kinds.contains(&Fault::LostMessage),
            cut: kinds.contains(&Fault::Cut),
            resubscribe: kinds.contains(&Fault::Resubscribe),
            clock_jump: kinds.contains(&Fault::ClockJump),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Life {
    Running,
    Frozen,
    Crashed,
    /// Finished its operations and exited: its renewal thread is gone.
    Exited,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Outcome {
    Unsent,
    Ran(Reply),
    /// The request or its reply was lost: an error after the response
    /// timeout.
    Failed,
}

/// What may happen next to a call in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallStep {
    /// It reaches the server and runs.
    Run,
    /// Its request is lost (a fault): it never ran.
    LoseRequest,
    /// It runs and its reply is lost (a fault).
    LoseReply,
    /// Its caller reads the outcome.
    Receive,
}

impl Outcome {
    /// The steps open to a call sent at `at` with this outcome: unsent, it
    /// runs, or (with a fault left) its request or its reply is lost; once
    /// it ran, it is received; once failed, when the response timeout
    /// has passed.
    pub(crate) fn steps(
        &self,
        at: i64,
        now: i64,
        response_ms: i64,
        faults: &Faults,
        fault: bool,
    ) -> impl Iterator<Item = CallStep> {
        let (run, request, reply, receive) = match self {
            Outcome::Unsent => (
                true,
                fault && faults.lost_request,
                fault && faults.lost_reply,
                false,
            ),
            Outcome::Ran(_) => (false, false, false, true),
            Outcome::Failed => (false, false, false, at + response_ms <= now),
        };
        [
            (run, CallStep::Run),
            (request, CallStep::LoseRequest),
            (reply, CallStep::LoseReply),
            (receive, CallStep::Receive),
        ]
        .into_iter()
        .filter_map(|(open, step)| open.then_some(step))
    }

    /// The reply, if the call ran and its reply came.
    pub(crate) fn reply(self) -> Option<Reply> {
        match self {
            Outcome::Ran(r) => Some(r),
            _ => None,
        }
    }

    /// Whether the call has a step now (time waits for it).
    pub(crate) fn due(&self, at: i64, now: i64, response_ms: i64) -> bool {
        match self {
            Outcome::Unsent | Outcome::Ran(_) => true,
            Outcome::Failed => at + response_ms <= now,
        }
    }
}

/// Whether a model may let time pass: nobody has anything to do now, and
/// the next event (`next`) is within the horizon.
pub(crate) fn time_may_pass(urgent: bool, next: Option<i64>, horizon_ms: i64) -> bool {
    !urgent && next.is_some_and(|t| t <= horizon_ms)
}

pub(crate) fn b(s: impl ToString) -> Vec<u8> {
    s.to_string().into_bytes()
}

pub(crate) fn int(r: &Reply) -> Option<i64> {
    match r {
        Reply::Int(n) => Some(*n),
        _ => None,
    }
}

/// A script's "wait ms" reply (text).
pub(crate) fn busy(r: &Reply) -> Option<i64> {
    match r {
        Reply::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// `protocol::popped::popped_hold`, the library's own rule, in the
/// models' milliseconds: a grant a pop took, with `left` ms of it (less
/// a millisecond, at most `valid`), its block sent at `since`, read at
/// `now`: the first hold's length, and whether the full lease is claimed
/// at once (a single server: no drift).
pub(crate) fn popped_hold(
    valid: i64,
    left: i64,
    since: i64,
    now: i64,
    watchdog: bool,
) -> (i64, bool) {
    let d = |v: i64| std::time::Duration::from_millis(v.max(0) as u64);
    let h = redlease::__protocol::popped_hold(
        d(valid),
        d(left),
        std::time::Duration::ZERO,
        d(now - since),
        watchdog,
    );
    (ms(h.first), h.claim_now)
}
