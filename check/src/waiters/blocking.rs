//! The waiter that blocks on its server (`WaitModel::direct`): its
//! `BLMOVE` from the name's open list with its acquire script pipelined
//! behind, the server serving the connection blocked longest first.

use redlease::__protocol as p;

use super::{Kind, Main, State, WaitModel};
use crate::keyspace::Reply;
use crate::looks::watch_waiter;
use crate::parties::{ms, At, Life, Outcome};
use crate::primitive::{Direct, Primitive, Script};
use crate::server::Server;

impl<P: Primitive> WaitModel<P> {
    /// Whether thread `i`'s waiters block on its server: the server grants
    /// directly (for its primitive), and what it asks can be granted so
    /// (a read-write lock's readers wait for messages).
    pub(super) fn grants_directly(&self, s: &State, i: usize) -> bool {
        self.direct.get(i).copied().unwrap_or(false)
            && self.prim.blocks(self.at(i, s.clients[i].name))
    }

    /// Whether thread `i`'s acquisition watches hand-overs (`Wakeup::acquire`
    /// joins `Watches`): its server grants directly, and it blocks or is
    /// patient (a reader, which a writer that took a hand-over and died
    /// holds back unannounced).
    pub(super) fn watches_hand_overs(&self, s: &State, i: usize) -> bool {
        let mode = self.at(i, s.clients[i].name);
        self.direct.get(i).copied().unwrap_or(false)
            && p::watches_hand_overs(self.prim.blocks(mode), self.prim.patient(mode))
    }

    /// Whether thread `i`'s acquisition, sent at `at`, blocks on the
    /// server, by the library's rule (`protocol::blocking::blocks_now`:
    /// its server grants directly, and a second or more of its wait is
    /// left), asked a millisecond after `at`: the library's clock has
    /// moved on by the time it asks (a block ends its last second before
    /// the deadline, and the attempt behind it is made after that), so
    /// the model takes the stricter side.
    pub(super) fn blocks_now(&self, s: &State, i: usize, at: i64) -> bool {
        let deadline = Some(At(s.clients[i].deadline));
        p::blocks_now(self.grants_directly(s, i), None, deadline, At(at + 1))
    }

    /// Whether a busy reply read now blocks thread `i` again: a
    /// millisecond or more is left to block before its last second
    /// (`protocol::blocking::block_for`; else it waits for messages from
    /// now on).
    pub(super) fn blocks_again(&self, s: &State, i: usize) -> bool {
        let deadline = Some(At(s.clients[i].deadline));
        let block = p::block_for(p::ROOM_CHUNK, deadline, p::SHORT_WAIT, At(s.now));
        self.grants_directly(s, i) && block.is_some()
    }

    /// Client `i`'s blocking round trip: its pop and its script.
    pub(super) fn direct_of(&self, s: &State, i: usize, t: u8, popped: bool) -> Option<Direct> {
        let mode = self.at(i, s.clients[i].name);
        self.prim.direct(self, i, mode, t, popped)
    }

    /// `run` (thread `i`'s release, `release`, or renewal of its hold of
    /// name `name` with token `t`) with the hold's `fence` put in where
    /// the hold of a waiter whose pop alone is the grant puts it (the
    /// library's `PopAlone::release_arg`, `extend_arg`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fenced(
        &self,
        s: &State,
        i: usize,
        name: u8,
        t: u8,
        mut run: Script,
        fence: i64,
        release: bool,
    ) -> Script {
        let alone = self
            .grants_directly(s, i)
            .then(|| self.prim.direct(self, i, self.at(i, name), t, false))
            .flatten()
            .and_then(|d| d.alone);
        if let Some(a) = alone.filter(|_| fence > 0) {
            let at = if release { a.release_arg } else { a.extend_arg };
            if let Some(arg) = run.args.get_mut(at) {
                *arg = crate::parties::b(fence);
            }
        }
        run
    }

    /// Blocks in the pop (served at once if the open list has an offer),
    /// its block ending a second before its deadline
    /// (`protocol::blocking::block_for`); the renewal thread looks for it
    /// from when the holder's lease would end (`Acquisition::on_busy`).
    /// `at`: when the call whose busy reply said `wait` was sent.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn block(
        &self,
        server: &mut Server,
        s: &mut State,
        i: usize,
        t: u8,
        at: i64,
        wait: i64,
        log: &mut Option<Vec<String>>,
    ) {
        let now = s.now;
        let name = s.clients[i].name;
        let c = &mut s.clients[i];
        let until = (c.deadline - crate::lock::SHORT_WAIT).min(now + ms(p::ROOM_CHUNK));
        watch_waiter(&mut c.looks, t, name, at, now, wait);
        s.seq += 1;
        // The pipeline reads the server's clock before its pop
        // (`protocol::popped::SERVER_CLOCK`).
        let clock = crate::parties::server_clock(&s.keys);
        s.clients[i].main = Main::Blocked {
            token: t,
            at: now,
            until,
            seq: s.seq,
            clock,
        };
        self.listen(s, i);
        self.serve(server, s, log);
    }

    /// The server serves blocked pops whose list has an offer, the
    /// connection blocked longest first, each with its script behind.
    pub(super) fn serve(&self, server: &mut Server, s: &mut State, log: &mut Option<Vec<String>>) {
        loop {
            let next = s
                .clients
                .iter()
                .enumerate()
                .filter_map(|(i, c)| match c.main {
                    Main::Blocked { token, seq, .. }
                        if matches!(c.life, Life::Running | Life::Frozen) =>
                    {
                        let d = self.direct_of(s, i, token, true)?;
                        s.keys.list_ready(&d.open).then_some((seq, i))
                    }
                    _ => None,
                })
                .min();
            let Some((_, i)) = next else { return };
            self.popped(server, s, i, true, log);
        }
    }

    /// A blocked waiter's pop returns (`pop`: it took an offer; else it
    /// timed out) and its script runs behind it, in the same step: the
    /// library pipelines it there for every waiter whose pop alone is no
    /// grant (`protocol::popped::script_behind_pop`; pinned by
    /// `tests::the_models_send_the_script_where_the_library_does`); the
    /// reply waits to be read.
    pub(super) fn popped(
        &self,
        server: &mut Server,
        s: &mut State,
        i: usize,
        pop: bool,
        log: &mut Option<Vec<String>>,
    ) {
        let Main::Blocked {
            token: t,
            at,
            clock,
            ..
        } = s.clients[i].main
        else {
            return;
        };
        let Some(d) = self.direct_of(s, i, t, true) else {
            return;
        };
        let mut took = false;
        let mut taken = None;
        if pop {
            let moved = s.keys.lmove(&d.open, &d.own);
            if let Ok(Reply::Bulk(f)) = &moved {
                (took, taken) = (true, Some(f.clone()));
            }
            if let Some(log) = log {
                log.push(format!("c{i}'s BLMOVE served: {moved:?}"));
            }
        }
        if let Some(alone) = &d.alone {
            return self.popped_alone(s, i, t, at, clock, taken, &d.own, &alone.holder, log);
        }
        // The server's clock behind the pop, before the script: the grant
        // the script makes starts no sooner than the block's sending plus
        // what the two readings say (`protocol::popped::waited`; capped
        // at the waiter's own elapsed time when the reply is read), and
        // its first hold counts from then when the pop took something; a
        // grant behind a pop that timed out has the full lease from the
        // sending (`Node::grant_blocking`).
        let from = crate::parties::served_from(clock, crate::parties::server_clock(&s.keys), at);
        // Its state first: the script's own offers serve the next blocked.
        s.clients[i].main = Main::Call {
            kind: Kind::Popped {
                short: took.then_some(from),
                served: self.if_jumps(s.now),
                left: ms(p::POPPED_LEASE),
            },
            token: t,
            at,
            out: Outcome::Unsent,
            late: false,
        };
        let reply = self.eval(server, s, d.grant, log);
        if let Main::Call { out, .. } = &mut s.clients[i].main {
            *out = Outcome::Ran(reply);
        }
    }
}

impl<P: Primitive> WaitModel<P> {
    /// Whether thread `i`'s hold of name `k` (token `t`) is one whose pop
    /// alone may be the grant: its server grants directly, and the
    /// primitive's waiters pop their grant (`Alone`).
    pub(super) fn pops_alone(&self, s: &State, i: usize, k: u8, t: u8) -> bool {
        self.grants_directly(s, i)
            && self
                .prim
                .direct(self, i, self.at(i, k), t, false)
                .is_some_and(|d| d.alone.is_some())
    }

    /// A served pop whose taking alone is the grant (a lock's,
    /// `Node::grant_blocking` with `Pop::holder`): behind it only the
    /// reads `protocol::popped::behind_pop` makes, in the same step; they
    /// say whether the popped fence is the open grant and how long it has
    /// left (`pop_took_grant`), its first hold dated as a script's behind
    /// a pop is. A pop that took no grant (it timed out, or the fence was
    /// not the grant's) is followed by the script on its own, in a round
    /// trip of its own (`Node::after_pop`: the short first lease from
    /// that sending), sent once the client reads the pop's reply.
    #[allow(clippy::too_many_arguments)]
    fn popped_alone(
        &self,
        s: &mut State,
        i: usize,
        t: u8,
        at: i64,
        clock: Option<i64>,
        taken: Option<Vec<u8>>,
        own: &[u8],
        holder: &[u8],
        log: &mut Option<Vec<String>>,
    ) {
        let from = crate::parties::served_from(clock, crate::parties::server_clock(&s.keys), at);
        let (ttl, value, _) = crate::parties::behind_pop(&mut s.keys, own, holder, None);
        let granted = p::pop_took_grant(taken.as_deref(), Some(ttl), value.as_deref(), false);
        if let Some(log) = log {
            log.push(format!(
                "c{i}'s pipeline behind its pop: PTTL {ttl}; GET {:?}; the grant: {granted:?}",
                value.as_deref().map(String::from_utf8_lossy)
            ));
        }
        let now = s.now;
        match granted {
            Some((fence, left)) => {
                s.clients[i].main = Main::Call {
                    kind: Kind::Popped {
                        short: Some(from),
                        served: self.if_jumps(now),
                        left: ms(left),
                    },
                    token: t,
                    at,
                    out: Outcome::Ran(Reply::Int(fence)),
                    late: false,
                };
            }
            None => {
                let kind = Kind::Popped {
                    short: Some(now),
                    served: self.if_jumps(now),
                    left: ms(p::POPPED_LEASE),
                };
                self.call(s, i, kind, t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use redlease::__protocol as p;

    /// The models send a waiter's granting script where the library does
    /// (`Node::grant_blocking`): behind the pop, in the serve's step, for
    /// the waiter model's semaphores and writers (their pop alone is no
    /// grant, [`super::WaitModel::popped`]); after it, as a call of its
    /// own only when the pop alone took no grant, for the lock
    /// (`LockModel::popped`'s `CallKind::AfterPop`, and the waiter model's
    /// multi-lock, `popped_alone`). Fails when the library's rule changes,
    /// so the models are changed with it.
    #[test]
    fn the_models_send_the_script_where_the_library_does() {
        assert!(p::script_behind_pop(false), "the waiter model's shape");
        assert!(!p::script_behind_pop(true), "the lock model's shape");
    }
}
