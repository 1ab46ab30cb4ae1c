//! What every model's clients share: the faults a search may inject, a
//! client's life, a call's outcome, a look of its renewal thread, and
//! small readers of replies.

use std::ops::{Add, Sub};
use std::time::Duration;

use redlease::__protocol as p;

use crate::keyspace::Reply;

/// Client `i`'s id (`c<i>`): in its tokens, its release messages and the
/// hand-overs that name it, as the library's client id is.
pub(crate) fn client_id(i: usize) -> std::borrow::Cow<'static, str> {
    // Looked up rather than formatted: every client hears every message.
    const IDS: [&str; 8] = ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"];
    match IDS.get(i) {
        Some(id) => std::borrow::Cow::Borrowed(id),
        None => std::borrow::Cow::Owned(format!("c{i}")),
    }
}

/// Client `i`'s token `n`, made by the library's rule
/// (`protocol::keys::owner_token`, as `Client::new_token` makes them:
/// hand-overs name watchers by the client id in it).
pub(crate) fn token(i: usize, n: u8) -> Vec<u8> {
    // Made once per client and number (most steps compare tokens).
    static TOKENS: std::sync::LazyLock<Vec<Vec<Vec<u8>>>> = std::sync::LazyLock::new(|| {
        (0..8)
            .map(|i| (0..32).map(|n| make_token(i, n)).collect())
            .collect()
    });
    match TOKENS.get(i).and_then(|t| t.get(usize::from(n))) {
        Some(t) => t.clone(),
        None => make_token(i, n),
    }
}

fn make_token(i: usize, n: u8) -> Vec<u8> {
    p::owner_token(client_id(i), format_args!("t{n}")).into_bytes()
}

/// The message a release of `key` by client `i` publishes, made by the
/// library's rule (`protocol::delivery::release_message`).
pub(crate) fn release_message(i: usize, key: &[u8]) -> Vec<u8> {
    p::release_message(&client_id(i), key)
}

/// What a message published on the wake channel is to client `i`'s
/// subscriber, decided by the library's rule (`protocol::delivery::heard`,
/// which `Shared::dispatch` follows).
pub(crate) fn heard(i: usize, message: &[u8]) -> p::Heard<'_> {
    p::heard(client_id(i).as_bytes(), message)
}

pub(crate) fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

/// A moment of a model's virtual clock, in milliseconds, for the
/// library's rules that are generic over their clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct At(pub(crate) i64);

impl Add<Duration> for At {
    type Output = At;
    fn add(self, d: Duration) -> At {
        At(self.0 + ms(d))
    }
}

impl Sub for At {
    type Output = Duration;
    fn sub(self, earlier: At) -> Duration {
        Duration::from_millis((self.0 - earlier.0).max(0) as u64)
    }
}

/// What a renewal's reply means for the hold, by the library's rule
/// (`protocol::renewal::renewed`, which the renewal thread follows): sent
/// at `sent`, read at `now`, the hold believed until `valid_until`, a
/// lease of `lease_ms` of which the model counts `valid_ms` (its clock's
/// millisecond less than the lease: the script runs in the send's step).
pub(crate) fn renewed(
    reply: Option<i64>,
    (sent, now, valid_until): (i64, i64, i64),
    lease_ms: i64,
    valid_ms: i64,
) -> p::Renewed<i64> {
    let d = |v: i64| Duration::from_millis(v.max(0) as u64);
    match p::renewed(
        reply,
        At(sent),
        At(now),
        At(valid_until),
        d(lease_ms),
        d(valid_ms),
    ) {
        p::Renewed::Extended { until, next } => p::Renewed::Extended {
            until: until.0,
            next: next.0,
        },
        p::Renewed::Retry { at } => p::Renewed::Retry { at: at.0 },
        p::Renewed::Lost => p::Renewed::Lost,
        p::Renewed::Expired => p::Renewed::Expired,
    }
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
    /// A request reaches the server a millisecond after its client sent it
    /// (the waiter model). A client times a retry to when a key lapses,
    /// and a key lives through its last millisecond: a retry on the dot
    /// and one a millisecond later see different keyspaces. Not an excuse
    /// for liveness: a real round trip is always that late or later.
    pub late: bool,
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
    Late,
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
            late: kinds.contains(&Fault::Late),
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

/// A call whose request is still on its way to the server: sent at `at`
/// and late (`Faults::late`), it arrives at `at + 1`, and nothing happens
/// to it before then.
pub(crate) fn on_its_way(at: i64, out: &Outcome, late: bool, now: i64) -> bool {
    late && *out == Outcome::Unsent && now < at + 1
}

/// A grant call whose request or reply was lost: to the client its reply
/// is late, and its undo was written behind it (`Node::fail`). What the
/// acquisition's record for its clean-up says after it, by the library's
/// rule (`protocol::clean_up::Left::failed`, which `Acquisition::on_error`
/// follows): the token is retired, and the record is late with nothing
/// reached (the same whatever it was before: a late reply starts it
/// afresh). Returns whether the token is retired, and the record.
pub(crate) fn lost_call() -> (bool, p::Left) {
    let mut left = p::Left::default();
    let retired = left.failed(p::Failure {
        ambiguous: true,
        unsent: false,
        undone: true,
    });
    (retired, left)
}

/// The clean-up's calls when a wait ends with `retired` tokens retired and
/// the current one's record `left` (`protocol::clean_up::undos`, as
/// `Acquisition::finish` makes them): the retired tokens' withdrawals
/// (indices into `retired`), and whether the current token's entry is
/// withdrawn too (it reached the server and the server is not late).
pub(crate) fn clean_up(retired: usize, left: p::Left) -> (Vec<usize>, bool) {
    let sent = retired + usize::from(left.reached);
    let mut withdrawn = Vec::new();
    let mut current = false;
    for undo in p::undos(sent, |_| true, left.ambiguous, left.late) {
        match undo {
            p::Undo::Leave(n) if n < retired => withdrawn.push(n),
            p::Undo::Leave(_) => current = true,
            p::Undo::ReleaseLast => {}
        }
    }
    (withdrawn, current)
}

/// Whether a model may let time pass: nobody has anything to do now, and
/// the next event (`next`) is within the horizon.
pub(crate) fn time_may_pass(urgent: bool, next: Option<i64>, horizon_ms: i64) -> bool {
    !urgent && next.is_some_and(|t| t <= horizon_ms)
}

/// What a lock waiter's pipeline reads behind its pop
/// (`protocol::popped::behind_pop`, run on `keys` in the pop's step): the
/// holder's `PTTL` (-2: none), its value, and whether a waiter keeps its
/// turn (`turns` asked: a fair lock's).
pub(crate) fn behind_pop(
    keys: &mut crate::keyspace::Keyspace,
    own: &[u8],
    holder: &[u8],
    turns: Option<&[u8]>,
) -> (i64, Option<Vec<u8>>, bool) {
    let mut none = Vec::new();
    let replies: Vec<Reply> = p::behind_pop(own, holder, turns)
        .iter()
        .map(|words| {
            let words: Vec<Vec<u8>> = words.iter().map(|w| w.to_vec()).collect();
            keys.run(&words, &mut none)
        })
        .collect();
    let ttl = replies.get(1).and_then(int).unwrap_or(-2);
    let value = match replies.get(2) {
        Some(Reply::Bulk(v)) => Some(v.clone()),
        _ => None,
    };
    let in_turn = replies.get(3).and_then(int).is_some_and(|n| n > 0);
    (ttl, value, in_turn)
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

/// The server's clock as a waiter's pipeline reads it around its pop
/// (`protocol::popped::SERVER_CLOCK`), in microseconds: the keyspace's
/// clock as it stands (not through its `TIME`, which moves it on a
/// microsecond to order two arrivals in one step: here that split states
/// that differ in nothing else, and cost the search a level or more).
pub(crate) fn server_clock(keys: &crate::keyspace::Keyspace) -> Option<i64> {
    Some(keys.now_us)
}

/// When a popped grant started at the earliest, in the models'
/// milliseconds, before the cap at the reply's reading: the block sent at
/// `at`, the server's clock read before its pop (`before`) and right
/// behind it (`after`), the difference less the drift
/// (`protocol::popped::waited` with no cap). The pop is served in one
/// step and its reply read in a later one, so the cap the library puts
/// at its reply's reading (the waiter's own elapsed time) is applied
/// there: [`dated`].
pub(crate) fn served_from(before: Option<i64>, after: Option<i64>, at: i64) -> i64 {
    at + ms(redlease::__protocol::waited(
        before,
        after,
        std::time::Duration::MAX,
    ))
}

/// A popped grant's dating as the library makes it when it reads the
/// reply at `read`: `at + waited(before, after, read - at)` is
/// `min(served_from, read)` (pinned by `tests::dated_is_the_library_s_cap`).
/// Only a server clock that jumped ahead during the block makes the cap
/// bind (`ClockJump`).
pub(crate) fn dated(served_from: i64, read: i64) -> i64 {
    served_from.min(read)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// The models date a popped grant in two halves (`served_from` when
    /// the pop is served, `dated` when its reply is read); together they
    /// are the library's `waited` with its cap at the reply's reading,
    /// with and without a jump of the server's clock during the block.
    #[test]
    fn dated_is_the_library_s_cap() {
        for at in [0, 1_000, 7_777] {
            for block in [0, 1, 10, 400, 1_000] {
                for jump in [0, 1, 50, 100, 5_000] {
                    for late in [0, 1, 30, 200] {
                        let before = Some(at * 1000 + 123);
                        let after = before.map(|b| b + (block + jump) * 1000);
                        let read = at + block + late;
                        let elapsed = Duration::from_millis((read - at) as u64);
                        let library =
                            at + super::ms(redlease::__protocol::waited(before, after, elapsed));
                        let model = super::dated(super::served_from(before, after, at), read);
                        assert_eq!(
                            model, library,
                            "at {at} block {block} jump {jump} late {late}"
                        );
                    }
                }
            }
        }
    }
}
