//! The lock's properties: those judged inside a step (queue order where
//! a grant is decided, fences seen on the server) and those of a state
//! (exclusion, every hold known to the server, quiescence).

use super::{key, scripted, token, CallKind, Client, Hold, LockModel, Main, State, FLOOR};
use crate::keyspace::{Keyspace, Reply};
use crate::parties::{b, int, ms, Life};
use crate::server::Server;

impl LockModel {
    /// Queue order, where a script decides who gets the name: it names a
    /// new holder, or keeps a hand-over for a waiter (lua/queue.lua
    /// `offer`: that waiter's take later only writes it down, as a claim
    /// names the holder its pop chose, checked at the pop:
    /// [`LockModel::finish_pop`]).
    pub(super) fn queue_order(&self, s: &mut State, file: &str, before: &Keyspace) {
        let kept = key(":grant:kept");
        let owner = |v: &[u8]| v[..v.iter().position(|&c| c == b'#').unwrap_or(v.len())].to_vec();
        let client = |t: &[u8]| {
            (0..s.clients.len()).find(|&i| {
                let tok = token(i, 0);
                t.starts_with(&tok[..tok.len() - 1])
            })
        };
        if let Some(k) = s
            .keys
            .string(&kept)
            .filter(|k| before.string(&kept) != Some(*k))
        {
            let taker = owner(k);
            if let Some(i) = client(&taker) {
                self.granted_in_order(s, i, &taker, before);
            }
            return;
        }
        if file == "lock_extend.lua" {
            return;
        }
        let Some(v) = s.lock_value() else { return };
        if before.string(&key("")) == Some(v.as_slice()) {
            return;
        }
        let held_by = owner(&v);
        let Some(i) = client(&held_by) else { return };
        if s.clients[i].hold.is_some() {
            return; // its claim of a grant its pop took
        }
        if before.string(&kept).is_some_and(|k| owner(k) == held_by) {
            return; // kept for it: checked when it was kept
        }
        self.granted_in_order(s, i, &held_by, before);
    }

    /// Queue order: while nobody died, froze, exited or lost a call, the
    /// lock never goes to a newcomer, or to a waiter behind another that
    /// still waits (`keys`: the queue as it stood when the grant was
    /// decided; `granted`: the token it went to). Two waiters blocked all
    /// along are served in the order they blocked (Redis's); a waiter
    /// whose block was cut, once the server knows it waits for messages,
    /// keeps its arrival (its place in the server's queue) against every
    /// other.
    pub(super) fn granted_in_order(
        &self,
        s: &mut State,
        i: usize,
        granted: &[u8],
        keys: &Keyspace,
    ) {
        if !self.fair || s.faults > 0 || s.exits > 0 || s.broken.is_some() {
            return;
        }
        let waited = s.decided_at_pop.map_or(u8::MAX, |(_, mask)| mask);
        let queue = key(":queue");
        let arrived = keys.rank(&queue, granted);
        let ahead_of_it = |j: usize, t: u8| {
            keys.rank(&queue, &token(j, t))
                .is_some_and(|r| arrived.is_none_or(|m| r < m))
        };
        let now = s.now;
        let ci = &s.clients[i];
        let placed = |c: &Client| !c.lost_place;
        for (j, c) in s.clients.iter().enumerate() {
            if j == i || c.life != Life::Running || waited & (1 << j) == 0 {
                continue;
            }
            let ahead = match &c.main {
                // Blocked all along: by when each blocked.
                Main::Blocked { served: None, .. } if placed(ci) && placed(c) => {
                    c.blocked.unwrap_or(u32::MAX) < ci.blocked.unwrap_or(u32::MAX)
                }
                // One of the two lost its place: by arrival.
                Main::Blocked {
                    served: None,
                    token: t,
                    ..
                } => ahead_of_it(j, *t),
                Main::Listening { token: t, .. }
                | Main::Call {
                    kind: CallKind::ByMessage | CallKind::AfterPop,
                    token: t,
                    ..
                } if c.told && c.deadline.is_none_or(|d| d > now) => ahead_of_it(j, *t),
                _ => false,
            };
            if ahead {
                s.broken = Some(format!(
                    "queue order: c{i} was granted the lock while c{j}, ahead of it, still waits"
                ));
                return;
            }
        }
    }

    /// Fences only ever grow on the server: the fence the lock key names
    /// after a script is never below one it named before.
    pub(super) fn fence_seen(&self, s: &mut State) {
        let Some(v) = s.lock_value() else { return };
        let Some(at) = v.iter().rposition(|&c| c == b'#') else {
            return;
        };
        let Ok(f) = String::from_utf8_lossy(&v[at + 1..]).parse::<i64>() else {
            return;
        };
        if f < s.top_fence && s.broken.is_none() {
            s.broken = Some(format!(
                "fence {f} on the server ({:?}) is below {} drawn before",
                String::from_utf8_lossy(&v),
                s.top_fence
            ));
        }
        s.top_fence = s.top_fence.max(f);
    }

    /// The safety properties of a state (`Model::check`).
    pub(super) fn properties(&self, server: &mut Server, s: &State) -> Result<(), String> {
        if let Some(e) = &s.broken {
            return Err(e.clone());
        }
        let holders: Vec<(usize, &Hold)> = s
            .clients
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c.life, Life::Running | Life::Frozen))
            .filter_map(|(i, c)| c.hold.as_ref().map(|h| (i, h)))
            .filter(|(_, h)| h.valid_until > s.now)
            .collect();
        if holders.len() > 1 {
            return Err(format!(
                "exclusion: c{} and c{} both hold the lock with valid leases",
                holders[0].0, holders[1].0
            ));
        }
        let v = s.lock_value().unwrap_or_default();
        for (i, h) in &holders {
            let tok = token(*i, h.token);
            let named = v.starts_with(&tok) && v.get(tok.len()) == Some(&b'#');
            let popped = v == [b"rl:grant#".as_slice(), b(h.fence).as_slice()].concat();
            if !named && !popped {
                return Err(format!(
                    "c{i} believes it holds (fence {}, valid {} ms more) but the server has {:?}",
                    h.fence,
                    h.valid_until - s.now,
                    String::from_utf8_lossy(&v)
                ));
            }
        }
        // Quiescent: nobody holds, waits or will act. A try succeeds
        // within the claim + 1 s of the last lease's end, and every key
        // but the fence floor lapses.
        let quiet = s.clients.iter().enumerate().all(|(i, c)| match c.life {
            Life::Crashed | Life::Exited => true,
            Life::Frozen => false,
            Life::Running => {
                c.pc as usize >= self.ops[i].len()
                    && matches!(c.main, Main::Idle)
                    && c.hold.is_none()
            }
        });
        if quiet {
            // Depends on the keyspace alone (its clock included).
            let memo = crate::search::fingerprint(&(1u8, &s.keys));
            return server.memo(memo, |server| {
                // A user polling `try_acquire` every 100 ms from the end of
                // the last lease (a dead holder's) is granted within the claim
                // + 1 s.
                let mut probe = s.keys.clone();
                let held_until = probe
                    .keys
                    .get(&key(""))
                    .and_then(|e| e.expires)
                    .unwrap_or(probe.now_ms())
                    .max(probe.now_ms());
                let args = self.acquire_args(9, 1, false, false);
                let mut last = Reply::Nil;
                let mut granted = false;
                for k in 0..=((ms(self.hand_over_claim()) + 1000) / 100) {
                    probe.now_us = probe.now_us.max((held_until + 100 * k) * 1000);
                    last = server
                        .eval(&mut probe, "lock_acquire.lua", scripted(), &args)
                        .reply;
                    if int(&last).is_some() {
                        granted = true;
                        break;
                    }
                }
                if !granted {
                    return Err(format!(
                        "liveness: nobody holds or waits, yet try_acquire every 100 ms for the claim \
                         + 1 s after the last lease ended got {} at the end",
                        last.show()
                    ));
                }
                let mut later = s.keys.clone();
                later.now_us += 3_600_000_000;
                later.expire();
                let left: Vec<String> = later
                    .keys
                    .keys()
                    .filter(|k| k.as_slice() != FLOOR)
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .collect();
                if !left.is_empty() {
                    return Err(format!("keys of an unused name never lapse: {left:?}"));
                }
                Ok(())
            });
        }
        Ok(())
    }
}
