//! The properties judged inside a step: arrival order, no idle time
//! without a cause, and when what is free has fitted every live waiter
//! (the bounded liveness `WaitModel::check` reads).

use redlease::__protocol as p;

use super::{Client, Kind, Main, State, WaitModel};
use crate::parties::{int, ms, Life};
use crate::primitive::{Arrival, Primitive};
use crate::server::Server;

/// A waiter as it stood before a script ran (see `WaitModel::queued`).
pub(super) struct Queued {
    client: usize,
    /// Where it is served.
    at: Arrival,
    /// Its place in the queue, if queued.
    place: Option<usize>,
    /// What the holder key said.
    held: Option<Vec<u8>>,
    /// Blocked on the server (not in its own round trip).
    blocked: bool,
    /// In its blocked round trip: the script behind its pop runs.
    popped: bool,
    /// Listed as a waiter for messages (`Arrival::told`).
    told: bool,
}

impl<P: Primitive> WaitModel<P> {
    /// Thread `i` waits for its name (in any of the waiting states), with
    /// a deadline past `bound`, alive and running.
    pub(super) fn live_waiter(&self, c: &Client, bound: i64) -> bool {
        c.life == Life::Running
            && c.deadline > bound
            && match &c.main {
                Main::Blocked { .. } | Main::Waiting { .. } | Main::Local { .. } => true,
                Main::Call { kind, .. } => {
                    matches!(kind, Kind::Grant { queue: true } | Kind::Popped { .. })
                }
                Main::Idle => false,
            }
    }

    /// After every step: since when what is free has fitted every live
    /// waiter whose deadline is past the bound (the claim + 1 s from then).
    pub(super) fn free_since(&self, s: &mut State) {
        let bound = s.free_since.unwrap_or(s.now) + ms(self.prim.hand_over_claim()) + 1000;
        let asks: Vec<P::Mode> = (0..s.clients.len())
            .filter(|&i| self.live_waiter(&s.clients[i], bound))
            .map(|i| self.at(i, s.clients[i].name))
            .collect();
        let free = !asks.is_empty() && self.prim.fits(&s.keys, &asks);
        s.free_since = if free {
            s.free_since.or(Some(s.now))
        } else {
            None
        };
    }

    /// Before a script runs, for the arrival-order check: each client in
    /// an acquisition (or a try) whose primitive promises that order,
    /// where it is served, its place in the queue (if queued) and what
    /// the holder key said. Empty once a fault or an exit excuses the
    /// order.
    pub(super) fn queued(&self, s: &State) -> Vec<Queued> {
        if s.faults > 0 || s.exits > 0 || s.broken.is_some() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, c) in s.clients.iter().enumerate() {
            let (t, blocked, popped) = match &c.main {
                Main::Waiting { token, .. } => (*token, false, false),
                Main::Blocked { token, .. } => (*token, true, false),
                Main::Call {
                    kind: kind @ (Kind::Grant { .. } | Kind::Popped { .. }),
                    token,
                    ..
                } => (*token, false, matches!(kind, Kind::Popped { .. })),
                _ => continue,
            };
            if c.life != Life::Running {
                continue;
            }
            if let Some(a) = self.prim.arrival(self.at(i, c.name), i, t) {
                out.push(Queued {
                    client: i,
                    place: s.keys.rank(&a.queue, &a.token),
                    held: a.held(&s.keys),
                    told: a
                        .told
                        .as_ref()
                        .is_some_and(|k| s.keys.rank(k, &a.token).is_some()),
                    at: a,
                    blocked,
                    popped,
                });
            }
        }
        out
    }

    /// Arrival order: while nobody died, exited or lost a call or a
    /// message, a script that names a new holder names the waiter that
    /// queued first among those still waiting for that name (never a
    /// newcomer, nor a later waiter, while an earlier one waits out its
    /// deadline).
    ///
    /// Where the server tells waiters that block from those that wait for
    /// messages (`Arrival::told`, a fair semaphore), "still waiting" is
    /// what the server knows, as the lock model has it
    /// (`LockModel::granted_in_order`): a waiter listed as waiting for
    /// messages, or one blocked while the grant went to a waiter not
    /// served by a pop (Redis serves the blocked in the order they
    /// blocked; a waiter between its round trips is in neither).
    pub(super) fn arrival_order(&self, s: &mut State, queued: &[Queued]) {
        for q in queued {
            let (i, a, mine) = (q.client, &q.at, q.place);
            let now = a.held(&s.keys);
            if !a.names(now.as_deref()) || now == q.held {
                continue;
            }
            let earlier = queued.iter().find(|o| {
                o.client != i
                    && o.at.holder == a.holder
                    && s.clients[o.client].deadline > s.now
                    && o.place.is_some_and(|r| mine.is_none_or(|m| r < m))
                    && (o.at.told.is_none() || o.told || (o.blocked && !q.popped))
            });
            if let (Some(Queued { client: j, .. }), None) = (earlier, &s.broken) {
                s.broken = Some(format!(
                    "arrival order: c{i} was granted while c{j}, queued before it, still waits"
                ));
            }
        }
    }

    /// No idle time without a cause: while no party died, exited or lost
    /// a message, time passes at most the look margin (a look at a lease
    /// that ended without a release, `LOOK_MARGIN` after its end) while a
    /// waiting client's next attempt would be granted (else it was owed a
    /// message, or its hint was too long). Called as time passes to `to`.
    pub(super) fn idle(&self, server: &mut Server, s: &mut State, to: i64) -> Result<(), String> {
        if s.faults > 0 || s.exits > 0 {
            return Ok(());
        }
        match self.granted_now(server, s) {
            None => s.idle_since = None,
            Some(i) => {
                let since = *s.idle_since.get_or_insert(s.now);
                if to > since + ms(p::LOOK_MARGIN) {
                    return Err(format!(
                        "idle time without a cause: c{i} waits from {since} ms and its attempt \
                         would be granted, no party died, exited or lost a message, and time \
                         passes to {to} ms"
                    ));
                }
            }
        }
        Ok(())
    }

    /// A waiting thread whose attempt would be granted now.
    pub(super) fn granted_now(&self, server: &mut Server, s: &State) -> Option<usize> {
        for (i, c) in s.clients.iter().enumerate() {
            let Main::Waiting { token: t, .. } = c.main else {
                continue;
            };
            if c.life != Life::Running {
                continue;
            }
            // Depends on the keyspace and the attempt alone.
            let key = crate::search::fingerprint(&(P::TAG, &s.keys, i, t, c.name));
            let granted = server.answer(key, |server| {
                let mut probe = s.keys.clone();
                let run = self.prim.acquire(self, i, self.at(i, c.name), t, true);
                let ran = server.eval(&mut probe, run.file, &run.keys, &run.args);
                int(&ran.reply).is_some()
            });
            if granted {
                return Some(i);
            }
        }
        None
    }
}
