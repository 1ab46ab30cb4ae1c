//! Redlock: one lease granted by a majority of independent masters.
//!
//! Every call is written to all masters first and their replies read
//! after, on the calling thread: the masters work at once, and there is no
//! thread per master (see `Node::send`; only connecting to several masters
//! at once takes a thread each). Each master's reply is bounded by
//! the node timeout, counted from its send; votes are combined by
//! majority. A master that errors or times out is one missing vote, never
//! an aborted attempt. A master that could not be reached is skipped for a
//! short window (see `Node`), so a dead master costs one refused connect
//! per window, not one per call.

use std::time::{Duration, Instant};

use redis::{FromRedisValue, Value};

use super::pool::batch;
use super::{fan_out, Answer, Call, GrantCall, Node};
use crate::error::{Error, ErrorKind, Result};
use crate::protocol::quorum::{self, Tally, Vote};
use crate::protocol::scripts::{Parts, FENCE_RAISE};

/// Independent masters; a majority decides.
pub(crate) struct Redlock {
    nodes: Vec<Node>,
}

/// Runs `f` on every node at once, a thread each; results in node order.
/// Only for checking the masters when the client is built: every call
/// after that goes through [`Redlock::fan_out`].
fn on_all<T: Send>(nodes: &[Node], f: impl Fn(&Node) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes[1..].iter().map(|n| s.spawn(|| f(n))).collect();
        let mut out = vec![f(&nodes[0])];
        for h in handles {
            // A node call never panics (errors are values); if one did, the
            // panic is propagated rather than turned into a silent vote.
            out.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        out
    })
}

/// A master's reply to one script call as `T`. A master that does not
/// know the script yet (restarted) gets it through an ordinary call, which
/// loads it.
fn script_reply<T: FromRedisValue>(
    node: &Node,
    mut replies: Vec<Value>,
    call: &Call<'_>,
    undo: Option<&Call<'_>>,
) -> Result<T> {
    match replies.pop() {
        Some(Value::ServerError(e)) if e.code() == "NOSCRIPT" => node.call(call, undo, None),
        Some(reply) => decode(reply),
        None => Err(Error::new(ErrorKind::Server, "a master sent no reply")),
    }
}

/// One reply as `T`: an error reply is that master's error.
fn decode<T: FromRedisValue>(reply: Value) -> Result<T> {
    match reply {
        Value::ServerError(e) => Err(redis::RedisError::from(e).into()),
        v => T::from_redis_value(v).map_err(|e| redis::RedisError::from(e).into()),
    }
}

impl Redlock {
    pub(crate) fn new(nodes: Vec<Node>) -> Result<Redlock> {
        if nodes.is_empty() {
            return Err(Error::invalid("Redlock needs at least one master URL"));
        }
        Ok(Redlock { nodes })
    }

    fn quorum(&self) -> usize {
        quorum::quorum(self.nodes.len())
    }

    /// Writes `pipe` to every master, then reads every master's replies
    /// (see [`fan_out::fan_out`]): a master's replies are due within
    /// `limit` (by default the node timeout), and one that fails or is late
    /// is an error in its place.
    fn fan_out(
        &self,
        pipe: &redis::Pipeline,
        count: usize,
        limit: Option<Duration>,
        undo: Option<&Call<'_>>,
    ) -> Vec<Result<Vec<Value>>> {
        let packed = pipe.get_packed_pipeline();
        let undo = undo.map(std::slice::from_ref);
        let requests: Vec<fan_out::Request<'_>> = self
            .nodes
            .iter()
            .map(|n| (n, &packed[..], count, undo))
            .collect();
        fan_out::fan_out(&requests, limit)
    }

    /// One script on every master (see [`Redlock::fan_out`]). A master
    /// whose connection broke at once (an idle connection the server had
    /// closed: it restarted, or its idle `timeout` passed) is asked again
    /// on a fresh connection, like a master that does not know the script
    /// yet (restarted), which gets it loaded. Repeating is safe: every
    /// script re-grants the same hold to the same token.
    fn call_all<T: FromRedisValue>(
        &self,
        call: &Call<'_>,
        undo: Option<&Call<'_>>,
    ) -> Vec<Result<T>> {
        let started = Instant::now();
        let mut pipe = redis::pipe();
        pipe.add_command(call.command(false));
        let replies = self.fan_out(&pipe, 1, None, undo);
        let (took, response) = (started.elapsed(), self.nodes[0].response_timeout());
        replies
            .into_iter()
            .zip(&self.nodes)
            .map(|(replies, node)| match replies {
                Ok(v) => script_reply(node, v, call, undo),
                Err(e) if e.broke_at_once(took, response) => Self::call_fresh(node, call, undo),
                Err(e) => Err(e),
            })
            .collect()
    }

    /// One script on one master over a new connection (opened directly, so
    /// a master that is down now refuses at once, where the pool would
    /// wait out its timeout).
    fn call_fresh<T: FromRedisValue>(
        node: &Node,
        call: &Call<'_>,
        undo: Option<&Call<'_>>,
    ) -> Result<T> {
        let mut pipe = redis::pipe();
        pipe.add_command(call.command(false));
        let con = node.open_spare(node.connect_timeout() / 2)?;
        let replies = node
            .send(con, &pipe.get_packed_pipeline(), 1, None)?
            .recv(undo.map(std::slice::from_ref))?;
        script_reply(node, replies, call, undo)
    }

    /// A majority of masters must answer.
    /// The masters, in the order given.
    pub(crate) fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub(crate) fn check(&self) -> Result<()> {
        let results = on_all(&self.nodes, |n| n.check());
        let ok = results.iter().filter(|r| r.is_ok()).count();
        if ok < self.quorum() {
            let e = Error::new(
                ErrorKind::QuorumNotReached,
                format!("only {ok} of {} Redlock masters answered", self.nodes.len()),
            );
            return Err(match results.into_iter().find_map(|r| r.err()) {
                Some(src) => e.with_source(src),
                None => e,
            });
        }
        Ok(())
    }

    /// A granting script on every master: granted only with a majority of
    /// grants *and* time left on the lease (lease − elapsed − drift); the
    /// value is the largest granted value. A master that fails or answers
    /// an error (foreign data included) is one missing vote, as in
    /// go-redsync: a majority still decides, and the error is logged.
    ///
    /// With a fencing counter (`fence`), the fence is handed out only after
    /// a majority of masters confirms its counter is at least that fence,
    /// so any later majority overlaps one of them and draws a larger one.
    ///
    /// Otherwise `undo` runs on every master (also those that seemed to
    /// fail: their reply may have been lost) and the wait is the shortest a
    /// refusing master reported, or a short jittered pause on split votes.
    pub(crate) fn grant(&self, g: &GrantCall<'_>) -> Result<Answer> {
        let (call, undo, lease, fence) = (&g.call, g.undo, g.lease, g.fence);
        let start = Instant::now();
        let votes = self.call_all::<Answer>(call, Some(undo));
        let mut foreign = None;
        let mut last_err = None;
        // The votes, decided by the protocol core (`protocol::quorum`, as
        // the model checker decides them); the errors kept to report.
        let tally = Tally::of(votes.into_iter().map(|v| match v {
            Ok(Answer::Granted(fence)) => Vote::Granted(fence),
            Ok(Answer::Busy(ms)) => Vote::Busy(ms),
            Err(e) => {
                if e.kind() == ErrorKind::WrongType {
                    foreign = Some(e);
                } else {
                    last_err = Some(e);
                }
                Vote::Failed
            }
        }));
        if tally.granted() {
            if let Some(e) = &foreign {
                log::warn!(
                    "redlease: a Redlock master refused the lease, counted as a missing vote: {e}"
                );
            }
            let agreed = match fence {
                Some(key) if tally.needs_raise() => self.agree_on_fence(key, &tally, lease),
                _ => true,
            };
            if agreed && quorum::lease_left(lease, start.elapsed()) {
                return Ok(Answer::Granted(tally.fence()));
            }
        }
        self.undo(undo);
        if tally.hopeless() {
            // Too many masters failing for any majority: report it instead
            // of waiting forever on an impossible quorum.
            if last_err.is_none() {
                if let Some(e) = foreign {
                    return Err(e);
                }
            }
            let e = Error::new(
                ErrorKind::QuorumNotReached,
                format!(
                    "{} of {} Redlock masters failed; a majority is {}",
                    tally.failed(),
                    self.nodes.len(),
                    self.quorum()
                ),
            );
            return Err(match last_err.or(foreign) {
                Some(src) => e.with_source(src),
                None => e,
            });
        }
        // Split votes: retry soon, jittered so contenders fall out of step.
        let jitter = quorum::jitter(uuid::Uuid::new_v4().as_u128());
        Ok(Answer::Busy(tally.retry_after(jitter)))
    }

    /// Runs `undo` on every master.
    fn undo(&self, undo: &Call<'_>) {
        let _ = self.call_all::<Value>(undo, None);
    }

    /// Masters count fences independently: raise every counter to the fence
    /// about to be handed out, and require a majority of masters where this
    /// grant owns it (`Tally::owned_after_raise` says which;
    /// lua/fence_raise.lua says what each master knew before).
    fn agree_on_fence(&self, key: &[u8], tally: &Tally, lease: Duration) -> bool {
        let f = tally.fence().to_string();
        // The floor too: a lapsed counter restarts above it (fence.lua).
        let keys = [key.to_vec(), super::fence_floor(key, false)];
        // The counter lapses with the lease, like every counter (fence.lua).
        let ms = (lease.as_millis() as u64).max(1).to_string();
        let args = [f.into_bytes(), ms.into_bytes()];
        let raise = Call {
            lua: &FENCE_RAISE,
            keys: Parts::Owned(&keys),
            args: Parts::Owned(&args),
        };
        let before: Vec<Option<i64>> = self
            .call_all::<i64>(&raise, None)
            .into_iter()
            .map(|b| b.ok())
            .collect();
        tally.owned_after_raise(&before)
    }

    /// A confirming script on every master: `1` when a majority confirms,
    /// `0` when so many deny that no majority can still hold it, otherwise
    /// `QuorumNotReached`.
    pub(crate) fn confirm(&self, call: &Call<'_>) -> Result<i64> {
        let votes = self.call_all::<i64>(call, None);
        self.combine(votes.iter().map(|v| v.as_ref().ok().copied()))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::QuorumNotReached,
                    "too few Redlock masters answered to decide",
                )
            })
    }

    /// Whether `key` exists on a majority.
    pub(crate) fn exists(&self, key: &[u8]) -> bool {
        let mut pipe = redis::pipe();
        pipe.cmd("EXISTS").arg(key);
        let votes = self.fan_out(&pipe, 1, None, None);
        let votes = votes
            .into_iter()
            .map(|r| r.and_then(|mut v| decode::<i64>(v.pop().unwrap_or(Value::Nil))));
        votes.filter(|v| matches!(v, Ok(1))).count() >= self.quorum()
    }

    /// Renewal batches: one pipeline per master, in parallel; per call
    /// `Int(1)`/`Int(0)` when a majority decides, `Nil` when undecided.
    pub(crate) fn eval_batch(&self, calls: &[Call<'_>], limit: Duration) -> Vec<Value> {
        let (pipe, loads) = batch(calls);
        let limit = limit
            .min(self.nodes[0].response_timeout())
            .max(Duration::from_millis(1));
        let per_node: Vec<Option<Vec<Value>>> = self
            .fan_out(&pipe, loads + calls.len(), Some(limit), None)
            .into_iter()
            // The script loads come first; their replies are not votes.
            .map(|r| r.ok().map(|v| v.into_iter().skip(loads).collect()))
            .collect();
        (0..calls.len())
            .map(|i| {
                let votes = per_node
                    .iter()
                    .map(|r| match r.as_ref().and_then(|v| v.get(i)) {
                        Some(Value::Int(x)) => Some(*x),
                        _ => None,
                    });
                match self.combine(votes) {
                    Some(x) => Value::Int(x),
                    None => Value::Nil,
                }
            })
            .collect()
    }

    /// The subscriber's connection (ours, see `Node::subscriber`) to the
    /// first master that answers.
    pub(crate) fn subscriber(&self, timeout: Duration) -> Result<super::Wire> {
        let mut last = None;
        for n in &self.nodes {
            match n.subscriber(timeout) {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::invalid("no Redlock masters configured")))
    }

    /// Majority decision over 1/0 votes (`None` = no answer).
    fn combine(&self, votes: impl Iterator<Item = Option<i64>>) -> Option<i64> {
        quorum::combine(self.nodes.len(), votes)
    }
}
