//! A client's calls and what it concludes from each reply, as the
//! library's acquisition, release and clean-up decide; each script's run
//! on the server (`eval`: its messages delivered, its fences judged, the
//! blocked it serves).

use redlease::__protocol as p;

use super::{Hold, Kind, Main, State, Subscriber, WaitModel};
use crate::keyspace::Reply;
use crate::looks::Look;
use crate::parties::{busy, client_id, heard, int, Outcome};
use crate::primitive::{Primitive, Script};
use crate::server::Server;

impl<P: Primitive> WaitModel<P> {
    pub(super) fn eval(
        &self,
        server: &mut Server,
        s: &mut State,
        run: Script,
        log: &mut Option<Vec<String>>,
    ) -> Reply {
        let queued = self.queued(s);
        let ran = server.eval(&mut s.keys, run.file, &run.keys, &run.args);
        self.arrival_order(s, &queued);
        ran.log(log, "", run.file, &run.args);
        // Every client's subscriber receives it and wakes its head. A
        // hand-over's naming of its watchers wakes nobody
        // (`Shared::dispatch`), and these waiters, waiting for messages,
        // watch nothing.
        // Each client's subscriber makes of a message what the library's
        // `heard` says (`Shared::dispatch`).
        let mut pids: Vec<usize> = (0..s.clients.len()).map(|j| self.pid(j)).collect();
        pids.sort_unstable();
        pids.dedup();
        for m in &ran.published {
            for &pid in &pids {
                let first = self.threads(s, pid).next().unwrap_or(pid);
                if s.clients[first].down {
                    continue; // its subscriber is not connected
                }
                match heard(pid, &m.message) {
                    p::Heard::Named(_) => self.hear_watchers(s, pid),
                    p::Heard::Released(key) => {
                        let from = m.message.split(|&c| c == b':').next();
                        let own = from == Some(client_id(pid).as_bytes());
                        if self.subscriber == Subscriber::DropsOwn && own {
                            continue;
                        }
                        self.wake(s, pid, |mode, _| self.prim.wakes(key, mode));
                    }
                    p::Heard::NamedOther | p::Heard::Foreign => {}
                }
            }
        }
        let fences = self.prim.fences_on_server(&s.keys);
        if s.top_fence.len() < fences.len() {
            s.top_fence.resize(fences.len(), 0);
        }
        for (k, f) in fences.into_iter().enumerate() {
            if f == 0 {
                continue; // no fence named there now
            }
            if f < s.top_fence[k] && s.broken.is_none() {
                s.broken = Some(format!(
                    "fence {f} on the server is below {} drawn before",
                    s.top_fence[k]
                ));
            }
            s.top_fence[k] = s.top_fence[k].max(f);
        }
        // An offer it pushed is popped at once by the longest blocked.
        self.serve(server, s, log);
        ran.reply
    }

    /// The next call; an attempt drains the channel first (it sees the
    /// state the messages announced).
    pub(super) fn call(&self, s: &mut State, i: usize, kind: Kind, t: u8) {
        let c = &mut s.clients[i];
        if matches!(kind, Kind::Grant { .. }) {
            c.inbox = false;
        }
        c.main = Main::Call {
            kind,
            token: t,
            at: s.now,
            out: Outcome::Unsent,
            late: false,
        };
    }

    /// A grant whose outcome is unknown (a lost request or reply): retired
    /// with its undo behind it, a new token tries again
    /// (`Acquisition::on_error`), or the wait ends.
    /// At the deadline nothing is cleaned up while the server is late
    /// (`protocol::clean_up::undos`: the entries lapse by themselves).
    pub(super) fn retire(
        &self,
        server: &mut Server,
        s: &mut State,
        i: usize,
        t: u8,
        log: &mut Option<Vec<String>>,
    ) {
        let now = s.now;
        let c = &mut s.clients[i];
        let (retire, left) = crate::parties::lost_call();
        if retire {
            c.retired.push(t);
            c.looks.retain(|l| l.waiter.is_none());
            c.tokens += 1;
        }
        let fresh = c.tokens;
        if now >= c.deadline {
            let (withdrawn, current) = crate::parties::clean_up(c.retired.len(), left);
            if withdrawn.is_empty() && !current {
                self.finish_with(server, s, i, left, log);
                self.give_back(server, s, i, log);
                let c = &mut s.clients[i];
                c.main = Main::Idle;
                c.pc += 1;
                return;
            }
            self.call(s, i, Kind::Leave, fresh);
        } else {
            self.call(s, i, Kind::Grant { queue: true }, fresh);
        }
    }

    /// The wait's end after a reply: its retired tokens' entries withdrawn
    /// (`clean_up`).
    pub(super) fn finish(
        &self,
        server: &mut Server,
        s: &mut State,
        i: usize,
        log: &mut Option<Vec<String>>,
    ) {
        let mut replied = redlease::__protocol::Left::default();
        replied.replied();
        self.finish_with(server, s, i, replied, log);
    }

    /// The wait's end, its current token's record `left`: the retired
    /// tokens' entries withdrawn as the library's clean-up does
    /// (`protocol::clean_up::undos`: none while the server is late).
    pub(super) fn finish_with(
        &self,
        server: &mut Server,
        s: &mut State,
        i: usize,
        left: redlease::__protocol::Left,
        log: &mut Option<Vec<String>>,
    ) {
        let mode = self.at(i, s.clients[i].name);
        let retired = std::mem::take(&mut s.clients[i].retired);
        for n in crate::parties::clean_up(retired.len(), left).0 {
            let run = self.prim.release(self, i, mode, retired[n], true);
            self.eval(server, s, run, log);
        }
        let c = &mut s.clients[i];
        c.subscribed = false;
        c.inbox = false;
        // Its looks end with its wait (`Acquisition::finish`); a look a
        // naming asked for still runs (`Watching`'s drop).
        c.looks.retain(|l| l.waiter.is_none());
        // Leaving the local queue wakes the next (`Membership`'s drop).
        if c.queued.take().is_some() {
            let pid = self.pid(i);
            if let Some(h) = self.head(s, pid) {
                let c = &mut s.clients[h];
                if matches!(c.main, Main::Waiting { .. }) {
                    c.inbox = true;
                }
            }
        }
    }

    /// A hold of name `k` granted with `fence` (0: none).
    #[allow(clippy::too_many_arguments)]
    /// `kept`: the hold's fence is kept, for its release and renewals
    /// (`Alone`), where the acquisition waited and its pop alone may be
    /// the grant (the library's waiting spec; a try's or a multi-lock's
    /// all-at-once hold has no `Direct`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn hold(
        &self,
        s: &mut State,
        i: usize,
        k: u8,
        t: u8,
        fence: i64,
        at: i64,
        first: Option<i64>,
        kept: bool,
    ) -> Result<(), String> {
        let n = self.prim.name_of(self.at(i, k));
        if fence > 0 {
            // One grant, one holder: a fence is never handed to two holds.
            match s
                .fences
                .iter()
                .find(|(m, f, _)| (*m, *f) == (n, fence))
                .map(|(_, _, o)| *o)
            {
                Some(owner) if owner != (i as u8, t) => {
                    return Err(format!(
                        "fence {fence} was handed to c{} and again to c{i}",
                        owner.0
                    ));
                }
                Some(_) => {}
                None => s.fences.push((n, fence, (i as u8, t))),
            }
        }
        let from = if self.lease_from_reply { s.now } else { at };
        let lease = first.unwrap_or(self.lease_ms);
        let slack = self.slack_since(s, from);
        let fence = if kept && self.pops_alone(s, i, k, t) {
            fence
        } else {
            0
        };
        s.clients[i].holds.push(Hold {
            name: k,
            token: t,
            fence,
            valid_until: from + lease - 1,
            slack,
            renew_due: if self.watchdog {
                at + lease / 3
            } else {
                i64::MAX
            },
        });
        Ok(())
    }

    /// The current name granted: the acquisition goes on to the next
    /// name (a multi-lock's next `acquire_until`, with the same deadline
    /// and a new token), or ends.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new_hold(
        &self,
        s: &mut State,
        i: usize,
        t: u8,
        fence: i64,
        at: i64,
        first: Option<i64>,
        kept: bool,
    ) -> Result<(), String> {
        let k = s.clients[i].name;
        self.hold(s, i, k, t, fence, at, first, kept)?;
        if k + 1 < self.prim.names(self.mode(i)) {
            let c = &mut s.clients[i];
            c.name = k + 1;
            c.tokens += 1;
            let fresh = c.tokens;
            c.tried = true;
            self.call(s, i, Kind::Grant { queue: true }, fresh);
            return Ok(());
        }
        let c = &mut s.clients[i];
        c.name = 0;
        c.main = Main::Idle;
        c.pc += 1;
        Ok(())
    }

    /// An acquisition that gave up gives back the names it took
    /// (`MultiLock::acquire_until`: its guards dropped, each released).
    pub(super) fn give_back(
        &self,
        server: &mut Server,
        s: &mut State,
        i: usize,
        log: &mut Option<Vec<String>>,
    ) {
        for h in std::mem::take(&mut s.clients[i].holds) {
            let run = self
                .prim
                .release(self, i, self.at(i, h.name), h.token, false);
            self.eval(server, s, run, log);
        }
        s.clients[i].name = 0;
    }

    pub(super) fn receive(
        &self,
        server: &mut Server,
        s: &mut State,
        i: usize,
        log: &mut Option<Vec<String>>,
    ) -> Result<(), String> {
        let Main::Call {
            kind,
            token: t,
            at,
            out,
            ..
        } = s.clients[i].main.clone()
        else {
            return Ok(());
        };
        let reply = out.reply();
        if let Some(Reply::Error(e)) = &reply {
            return Err(format!("c{i}'s {kind:?} got an error reply: {e}"));
        }
        let now = s.now;
        let mode = self.at(i, s.clients[i].name);
        match kind {
            Kind::All => match reply {
                Some(Reply::Array(fences)) => {
                    for (k, f) in fences.iter().enumerate() {
                        self.hold(s, i, k as u8, t, int(f).unwrap_or(0), at, None, false)?;
                    }
                    let c = &mut s.clients[i];
                    c.main = Main::Idle;
                    c.pc += 1;
                }
                other => {
                    if other.is_none() {
                        // Undecided: whatever it may have granted is
                        // released, token-checked, before the one-by-one
                        // way (`MultiLock::all_at_once`).
                        for k in 0..self.prim.names(self.mode(i)) {
                            let run = self.prim.release(self, i, self.at(i, k), t, false);
                            self.eval(server, s, run, log);
                        }
                    }
                    // One name after another, each its own acquisition.
                    let c = &mut s.clients[i];
                    c.name = 0;
                    c.tokens += 1;
                    let fresh = c.tokens;
                    c.tried = true;
                    self.call(s, i, Kind::Grant { queue: true }, fresh);
                }
            },
            Kind::Grant { queue } => match reply {
                Some(Reply::Int(fence)) => {
                    self.finish(server, s, i, log);
                    self.new_hold(s, i, t, fence, at, None, queue)?;
                }
                Some(r) if !queue => {
                    busy(&r).ok_or_else(|| format!("c{i}: unexpected reply {}", r.show()))?;
                    let c = &mut s.clients[i];
                    c.main = Main::Idle;
                    c.pc += 1;
                }
                Some(r) => {
                    let wait =
                        busy(&r).ok_or_else(|| format!("c{i}: unexpected reply {}", r.show()))?;
                    let fallback = self.fallback(self.prim.patient(mode));
                    if self.blocks_again(s, i) {
                        self.block(server, s, i, t, at, wait, log);
                        return Ok(());
                    }
                    let c = &mut s.clients[i];
                    if now >= c.deadline {
                        self.call(s, i, Kind::Leave, t);
                    } else if !c.subscribed {
                        // Subscribed now, and in the local queue: look
                        // again, or a message sent before the subscription
                        // would be missed.
                        c.subscribed = true;
                        s.seq += 1;
                        c.queued = Some(s.seq);
                        self.listen(s, i);
                        self.call(s, i, Kind::Grant { queue: true }, t);
                    } else {
                        let hint = if wait >= 0 { wait.max(1) } else { fallback };
                        let until = (now + hint.min(fallback)).min(c.deadline);
                        c.main = Main::Waiting { token: t, until };
                    }
                }
                None if !queue => {
                    // Maybe ran: released, token-checked (`clean_up`).
                    let run = self.prim.release(self, i, mode, t, false);
                    self.eval(server, s, run, log);
                    let c = &mut s.clients[i];
                    c.main = Main::Idle;
                    c.pc += 1;
                }
                None => self.retire(server, s, i, t, log),
            },
            Kind::Popped {
                short,
                served,
                left: popped_left,
            } => match reply {
                Some(Reply::Int(fence)) => {
                    self.finish(server, s, i, log);
                    // Behind a pop that timed out: a grant like any
                    // other, its full lease from the block's sending,
                    // extended first when a third of it is gone
                    // (`Acquisition::step`).
                    let (from, left) = match short {
                        // The cap at the reply's reading (`dated`).
                        Some(from) if self.uncapped_dating => (from, popped_left),
                        Some(from) => (crate::parties::dated(from, now), popped_left),
                        None if now - at >= self.lease_ms / 3 => (at, self.lease_ms),
                        None => return self.new_hold(s, i, t, fence, at, None, true),
                    };
                    // `taken_by_pop`: its first lease is the popped one
                    // (`POPPED_LEASE`, or the time the grant a pop alone
                    // took had left), from `from`; after a long block one
                    // extension (claiming it, where the pop alone took it)
                    // sets the full lease first.
                    let (first, claim_now) = crate::parties::popped_hold(
                        self.lease_ms - 1,
                        left,
                        from,
                        now,
                        self.watchdog,
                    );
                    // A jump during the block may date the grant past its
                    // making by up to the time from the pop's serve to
                    // this reading, no more (the cap); one after the serve
                    // shortens it on the server by the jump.
                    let slack = match s.jumped {
                        Some(j) if short.is_some() && j >= served => self.clock_jump_ms,
                        Some(j) if short.is_some() && j >= at => now - served,
                        _ => 0,
                    };
                    let popped = |s: &mut State| {
                        if let Some(h) = s.clients[i].holds.last_mut() {
                            h.slack = h.slack.max(slack);
                        }
                    };
                    if !claim_now {
                        self.new_hold(s, i, t, fence, from, Some(first), true)?;
                        popped(s);
                    } else {
                        let name = s.clients[i].name;
                        let claiming = self.pops_alone(s, i, name, t);
                        let run =
                            self.prim
                                .extend(self, i, mode, t, self.lease_ms, false, claiming);
                        let run = self.fenced(s, i, name, t, run, fence, false);
                        match int(&self.eval(server, s, run, log)) {
                            Some(1) => self.new_hold(s, i, t, fence, now, None, true)?,
                            _ => {
                                self.new_hold(s, i, t, fence, from, Some(first), true)?;
                                popped(s);
                            }
                        }
                    }
                }
                Some(r) => {
                    let wait =
                        busy(&r).ok_or_else(|| format!("c{i}: unexpected reply {}", r.show()))?;
                    if self.blocks_again(s, i) {
                        self.block(server, s, i, t, at, wait, log);
                    } else if now >= s.clients[i].deadline {
                        self.call(s, i, Kind::Leave, t);
                    } else {
                        // Its last second: messages from now on, once
                        // subscribed (an attempt at once).
                        let c = &mut s.clients[i];
                        c.subscribed = true;
                        self.listen(s, i);
                        self.call(s, i, Kind::Grant { queue: true }, t);
                    }
                }
                None => self.retire(server, s, i, t, log),
            },
            Kind::Release { name, fence, left } => {
                if matches!(reply.as_ref().and_then(int), Some(1 | 2)) {
                    // The client's own waiters of that name are woken
                    // directly.
                    self.wake(s, self.pid(i), |_, waits_for| waits_for == name);
                }
                if reply.as_ref().and_then(int) == Some(2) {
                    // Offered or handed on: a look after the claim
                    // (`look_after_hand_over`).
                    let look = crate::looks::opening_look(name, s.now, self.prim.hand_over_claim());
                    let settles = self.prim.exclusive(self.ops[i].0).then_some(fence);
                    crate::looks::after_opening(&mut s.clients[i].looks, look, settles);
                }
                match left.split_first() {
                    Some((&(name, t, fence), rest)) => {
                        let left = rest.to_vec();
                        self.call(s, i, Kind::Release { name, fence, left }, t);
                    }
                    None => {
                        let c = &mut s.clients[i];
                        c.main = Main::Idle;
                        c.pc += 1;
                    }
                }
            }
            Kind::Leave => {
                self.finish(server, s, i, log);
                self.give_back(server, s, i, log);
                let c = &mut s.clients[i];
                c.main = Main::Idle;
                c.pc += 1;
            }
        }
        Ok(())
    }

    /// The guard's `extend(lease)` (`Holding::extend`): the lease set
    /// exactly, and a look at the name at its new end.
    pub(super) fn shorten(
        &self,
        server: &mut Server,
        s: &mut State,
        i: usize,
        t: u8,
        lease: i64,
        log: &mut Option<Vec<String>>,
    ) {
        let (name, fence) = s.clients[i]
            .holds
            .first()
            .map_or((0, 0), |h| (h.name, h.fence));
        let run = self
            .prim
            .extend(self, i, self.at(i, name), t, lease, true, fence > 0);
        let run = self.fenced(s, i, name, t, run, fence, false);
        let reply = self.eval(server, s, run, log);
        let now = s.now;
        let c = &mut s.clients[i];
        if int(&reply) != Some(1) {
            c.holds.retain(|h| h.name != name);
            return;
        }
        // Set now, after any jump so far.
        for h in c.holds.iter_mut().filter(|h| h.name == name) {
            h.valid_until = now + lease - 1;
            h.slack = 0;
        }
        c.looks.push(Look {
            due: crate::looks::runs_at(now + lease - 1, now),
            waiter: None,
            left: p::NAME_LOOKS,
            watch: false,
            name,
            opening: None,
        });
    }
}
