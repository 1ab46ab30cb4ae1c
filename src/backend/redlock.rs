//! Redlock: one lease granted by a majority of independent masters.
//!
//! Every call goes to all masters in parallel, each bounded by the node
//! timeout; votes are combined by majority. A master that errors or times
//! out is one missing vote, never an aborted attempt. A master that could
//! not be reached is skipped for a short window (see `Node`), so a dead
//! master costs one timeout per window, not one per call.

use std::time::{Duration, Instant};

use redis::Value;

use super::{Call, Node};
use crate::error::{Error, ErrorKind, Result};
use crate::scripts::FENCE_RAISE;

/// What a lease loses to clock drift between independent masters: 1 % of
/// the lease plus 2 ms, subtracted at acquisition and at every renewal.
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// Independent masters; a majority decides.
pub(crate) struct Redlock {
    nodes: Vec<Node>,
}

/// Runs `f` on every node at once; results in node order.
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

fn slices(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|x| x.as_slice()).collect()
}

impl Redlock {
    pub(crate) fn new(nodes: Vec<Node>) -> Result<Redlock> {
        if nodes.is_empty() {
            return Err(Error::invalid("Redlock needs at least one master URL"));
        }
        Ok(Redlock { nodes })
    }

    fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// A majority of masters must answer.
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
    pub(crate) fn grant(
        &self,
        call: &Call<'_>,
        undo: &Call<'_>,
        lease: Duration,
        fence: Option<&[u8]>,
    ) -> Result<(i64, i64)> {
        let start = Instant::now();
        let votes = on_all(&self.nodes, |n| {
            n.call::<(i64, i64)>(call, Some(undo), None)
        });
        let mut grants = 0;
        let mut best = 0;
        let mut wait: Option<i64> = None;
        let mut errors = 0;
        let mut foreign = None;
        let mut last_err = None;
        for v in votes {
            match v {
                Ok((1, value)) => {
                    grants += 1;
                    best = best.max(value);
                }
                Ok((_, ms)) if ms > 0 => wait = Some(wait.map_or(ms, |w: i64| w.min(ms))),
                Ok(_) => {}
                Err(e) => {
                    errors += 1;
                    if e.kind() == ErrorKind::WrongType {
                        foreign = Some(e);
                    } else {
                        last_err = Some(e);
                    }
                }
            }
        }
        let q = self.quorum();
        if grants >= q {
            if let Some(e) = &foreign {
                log::warn!(
                    "redlease: a Redlock master refused the lease, counted as a missing vote: {e}"
                );
            }
            let agreed = match fence {
                Some(key) => self.agree_on_fence(key, best, lease),
                None => true,
            };
            let valid = lease
                .checked_sub(start.elapsed() + drift(lease))
                .is_some_and(|v| !v.is_zero());
            if agreed && valid {
                return Ok((1, best));
            }
        }
        self.undo(undo);
        if grants < q && errors > self.nodes.len() - q {
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
                    "{errors} of {} Redlock masters failed; a majority is {q}",
                    self.nodes.len()
                ),
            );
            return Err(match last_err.or(foreign) {
                Some(src) => e.with_source(src),
                None => e,
            });
        }
        // Split votes: retry soon, jittered so contenders fall out of step.
        let jitter = 5 + (uuid::Uuid::new_v4().as_u128() % 45) as i64;
        Ok((0, wait.map_or(jitter, |w| w.min(jitter.max(w / 4)))))
    }

    fn undo(&self, undo: &Call<'_>) {
        let keys = slices(undo.keys);
        let args = slices(undo.args);
        on_all(&self.nodes, |n| {
            let _ = n.eval::<Value>(undo.lua, &keys, &args);
        });
    }

    /// Masters count fences independently: raise every counter to the fence
    /// about to be handed out, and require a majority to confirm it reached
    /// at least that value. A raise that was lost on one master is then
    /// harmless: the majority that confirmed overlaps every later majority.
    fn agree_on_fence(&self, key: &[u8], fence: i64, lease: Duration) -> bool {
        let f = fence.to_string();
        let keys = [key.to_vec()];
        // The counter lapses with the lease, like every counter (fence.lua).
        let ms = (lease.as_millis() as u64).max(1).to_string();
        let args = [f.into_bytes(), ms.into_bytes()];
        let raise = Call {
            lua: &FENCE_RAISE,
            keys: &keys,
            args: &args,
        };
        let confirmed = on_all(&self.nodes, |n| n.call::<i64>(&raise, None, None))
            .into_iter()
            .filter(|r| matches!(r, Ok(v) if *v >= fence))
            .count();
        confirmed >= self.quorum()
    }

    /// A confirming script on every master: `1` when a majority confirms,
    /// `0` when so many deny that no majority can still hold it, otherwise
    /// `QuorumNotReached`.
    pub(crate) fn confirm(&self, call: &Call<'_>) -> Result<i64> {
        let votes = on_all(&self.nodes, |n| n.call::<i64>(call, None, None));
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
        let votes = on_all(&self.nodes, |n| {
            n.query::<i64>(redis::cmd("EXISTS").arg(key))
        });
        votes.iter().filter(|v| matches!(v, Ok(1))).count() >= self.quorum()
    }

    /// Renewal batches: one pipeline per master, in parallel; per call
    /// `Int(1)`/`Int(0)` when a majority decides, `Nil` when undecided.
    pub(crate) fn eval_batch(&self, calls: &[Call<'_>], limit: Duration) -> Vec<Value> {
        let per_node = on_all(&self.nodes, |n| n.eval_batch(calls, limit).ok());
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

    /// A connection to the first master that answers (releases publish on
    /// every master, so any one carries the wake-ups).
    pub(crate) fn dedicated(&self, timeout: Duration) -> Result<redis::Connection> {
        let mut last = None;
        for n in &self.nodes {
            match n.dedicated(timeout) {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::invalid("no Redlock masters configured")))
    }

    /// Majority decision over 1/0 votes (`None` = no answer).
    fn combine(&self, votes: impl Iterator<Item = Option<i64>>) -> Option<i64> {
        let (n, q) = (self.nodes.len(), self.quorum());
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
        } else if no > n - q {
            Some(0)
        } else {
            None
        }
    }
}
