//! Redlock: one lease granted by a majority of independent masters.
//!
//! Every call goes to all masters in parallel, each bounded by the node
//! timeout; votes are combined by majority. A master that errors or times
//! out is one missing vote, never an aborted attempt. A master that could
//! not be reached is skipped for a short window (see `Node`), so a dead
//! master costs one timeout per window, not one per call.

use std::time::{Duration, Instant};

use redis::Value;

use crate::backend::{Call, Node};
use crate::error::{Error, ErrorKind, Result};
use crate::scripts::FENCE_RAISE;

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
    /// grants *and* time left on the lease (lease − elapsed − drift, drift =
    /// 1 % of the lease + 2 ms); the value is the largest granted value.
    /// Otherwise `undo` runs on every master (also those that seemed to
    /// fail: their reply may have been lost) and the wait is the shortest a
    /// refusing master reported, or a short jittered pause on split votes.
    pub(crate) fn grant(
        &self,
        call: Call<'_>,
        undo: Call<'_>,
        lease: Duration,
    ) -> Result<(i64, i64)> {
        let start = Instant::now();
        let keys: Vec<&[u8]> = call.keys.iter().map(|k| k.as_slice()).collect();
        let args: Vec<&[u8]> = call.args.iter().map(|a| a.as_slice()).collect();
        let votes = on_all(&self.nodes, |n| {
            n.eval::<(i64, i64)>(call.lua, &keys, &args)
        });
        let elapsed = start.elapsed();
        let mut grants = 0;
        let mut best = 0;
        let mut wait: Option<i64> = None;
        let mut errors = 0;
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
                    // A definite refusal (foreign data) is the caller's
                    // error; anything else is one missing vote.
                    if e.kind() == ErrorKind::WrongType {
                        last_err = Some(e);
                        break;
                    }
                    errors += 1;
                    last_err = Some(e);
                }
            }
        }
        let drift = lease / 100 + Duration::from_millis(2);
        let valid = lease
            .checked_sub(elapsed + drift)
            .is_some_and(|v| !v.is_zero());
        let q = self.quorum();
        if grants >= q
            && valid
            && last_err
                .as_ref()
                .is_none_or(|e| e.kind() != ErrorKind::WrongType)
        {
            return Ok((1, best));
        }
        self.undo(&undo);
        if let Some(e) = last_err.take_if(|e| e.kind() == ErrorKind::WrongType) {
            return Err(e);
        }
        if errors > self.nodes.len() - q {
            // Too many masters unreachable for any majority: report it
            // instead of waiting forever on an impossible quorum.
            let e = Error::new(
                ErrorKind::QuorumNotReached,
                format!(
                    "{errors} of {} Redlock masters failed; a majority is {q}",
                    self.nodes.len()
                ),
            );
            return Err(match last_err {
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

    /// Masters count fences independently, so after a grant the counters
    /// are raised to the fence handed out: any later majority shares a
    /// master with this one and so draws a larger fence.
    pub(crate) fn raise_fence(&self, key: &[u8], fence: i64) {
        let f = fence.to_string();
        on_all(&self.nodes, |n| {
            let _ = n.eval::<i64>(&FENCE_RAISE, &[key], &[f.as_bytes()]);
        });
    }

    /// A confirming script on every master: `1` when a majority confirms,
    /// `0` when so many deny that no majority can still hold it, otherwise
    /// `QuorumNotReached`.
    pub(crate) fn confirm(&self, call: Call<'_>) -> Result<i64> {
        let keys = slices(call.keys);
        let args = slices(call.args);
        let votes = on_all(&self.nodes, |n| n.eval::<i64>(call.lua, &keys, &args));
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
    pub(crate) fn eval_batch(&self, calls: &[Call<'_>]) -> Vec<Value> {
        let per_node = on_all(&self.nodes, |n| n.eval_batch(calls).ok());
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
