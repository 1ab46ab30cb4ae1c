//! The search's view of the model: the actions open in a state, the step
//! each makes, the check after it, and when time may pass.

use redlease::__protocol as p;

use super::{Action, Client, Hold, Kind, Main, State, WaitModel, WaitOp};
use crate::keyspace::Keyspace;
use crate::looks::Look;
use crate::parties::{int, ms, renewed, time_may_pass, CallStep, Life, Outcome};
use crate::primitive::{Holder, Primitive};
use crate::probes::SERVER_OFFSET;
use crate::search::Model;
use crate::server::Server;

impl<P: Primitive> WaitModel<P> {
    /// The next instant something is due (an expiry on the server, a
    /// renewal, a look, a wait's end, a response timeout): where time
    /// jumps to.
    pub(super) fn next_event(&self, s: &State) -> Option<i64> {
        let mut t: Vec<i64> = Vec::new();
        if let Some(e) = s.keys.next_expiry() {
            t.push(e - SERVER_OFFSET - s.offset);
        }
        for c in &s.clients {
            if let (Main::Blocked { until, .. }, Life::Frozen) = (&c.main, c.life) {
                // The server times a frozen client's pop out.
                t.push(*until);
            }
            if c.life != Life::Running {
                continue;
            }
            for h in &c.holds {
                t.push(h.renew_due);
                t.push(h.valid_until);
            }
            t.extend(c.looks.iter().map(|l| l.due));
            match &c.main {
                Main::Waiting { until, .. } | Main::Blocked { until, .. } => t.push(*until),
                Main::Local { .. } => t.push(c.deadline),
                Main::Call {
                    at,
                    out: Outcome::Failed,
                    ..
                } => t.push(at + self.response_ms),
                Main::Call {
                    at,
                    out: Outcome::Unsent,
                    late: true,
                    ..
                } => t.push(at + 1),
                _ => {}
            }
        }
        t.into_iter().filter(|&x| x > s.now).min()
    }

    /// Something is due now: time waits for it.
    pub(super) fn urgent(&self, s: &State) -> bool {
        s.clients.iter().enumerate().any(|(i, c)| {
            c.life == Life::Running
                && (c.down
                    || c.holds.iter().any(|h| h.renew_due <= s.now)
                    || c.looks.iter().any(|l| l.due <= s.now)
                    || match &c.main {
                        Main::Call { at, out, .. } => {
                            !on_its_way(&c.main, s.now) && out.due(*at, s.now, self.response_ms)
                        }
                        Main::Waiting { until, .. } => *until <= s.now || c.inbox,
                        Main::Local { .. } => {
                            c.deadline <= s.now || self.head(s, self.pid(i)) == Some(i)
                        }
                        Main::Idle | Main::Blocked { .. } => false,
                    })
        })
    }
}

impl<P: Primitive> Model for WaitModel<P> {
    type State = State;
    type Action = Action;

    fn init(&self) -> State {
        State {
            keys: Keyspace::starting_at(SERVER_OFFSET),
            now: 0,
            offset: 0,
            clients: (0..self.ops.len())
                .map(|i| Client {
                    pc: 0,
                    life: Life::Running,
                    tokens: 0,
                    deadline: 0,
                    subscribed: false,
                    inbox: false,
                    main: Main::Idle,
                    name: 0,
                    holds: Vec::new(),
                    looks: Vec::new(),
                    retired: Vec::new(),
                    named: false,
                    listening: self.listening.contains(&i),
                    down: false,
                    queued: None,
                    tried: false,
                })
                .collect(),
            faults: 0,
            exits: 0,
            top_fence: Vec::new(),
            fences: Vec::new(),
            broken: None,
            seq: 0,
            idle_since: None,
            free_since: None,
            lost: false,
            jumped: None,
        }
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let fault = s.faults < self.faults.budget;
        for (i, c) in s.clients.iter().enumerate() {
            // A client's first thread stands for it: it crashes, freezes,
            // resumes, or exits once every thread of it is done.
            let first = self.threads(s, self.pid(i)).next() == Some(i);
            if c.life == Life::Frozen && first {
                out.push(Action::Resume(i));
            }
            // A request sent before the freeze still runs; its reply is
            // read when the client resumes.
            if c.life == Life::Frozen {
                if let Main::Call {
                    out: Outcome::Unsent,
                    ..
                } = c.main
                {
                    if !on_its_way(&c.main, s.now) {
                        out.push(Action::Call(i, CallStep::Run));
                    }
                }
            }
            if c.life != Life::Running {
                continue;
            }
            if fault && self.faults.crash && first {
                out.push(Action::Crash(i));
            }
            if fault && self.faults.freeze && first {
                out.push(Action::Freeze(i));
            }
            if c.down {
                out.push(Action::SubscriberUp(i));
            } else if fault && self.faults.resubscribe && first && c.listening {
                let pid = self.pid(i);
                if self
                    .threads(s, pid)
                    .any(|j| self.live_waiter(&s.clients[j], s.now))
                {
                    out.push(Action::SubscriberDown(i));
                }
            }
            let done = |j: usize| {
                let c = &s.clients[j];
                c.pc as usize >= self.ops[j].1.len()
                    && matches!(c.main, Main::Idle)
                    && c.holds.is_empty()
            };
            match &c.main {
                Main::Idle => {
                    if (c.pc as usize) < self.ops[i].1.len() {
                        out.push(Action::Start(i));
                    } else if self.exits && first && self.threads(s, self.pid(i)).all(done) {
                        out.push(Action::Exit(i));
                    }
                }
                Main::Local { .. } => {
                    if self.head(s, self.pid(i)) == Some(i) {
                        out.push(Action::Head(i));
                    } else if c.deadline <= s.now {
                        out.push(Action::Retry(i));
                    }
                }
                Main::Call { .. } if on_its_way(&c.main, s.now) => {}
                Main::Call {
                    at,
                    out: o,
                    kind,
                    late,
                    ..
                } => {
                    let steps = o.steps(*at, s.now, self.response_ms, &self.faults, fault);
                    out.extend(steps.map(|c| Action::Call(i, c)));
                    if *o == Outcome::Unsent && !late && fault && self.faults.late {
                        out.push(Action::Late(i));
                    }
                    if let (Kind::Popped { .. }, Outcome::Ran(_), true) =
                        (kind, o, fault && self.faults.lost_reply)
                    {
                        out.push(Action::LosePopped(i));
                    }
                }
                Main::Blocked { .. } => {
                    if fault && self.faults.cut {
                        out.push(Action::Cut(i));
                    }
                }
                Main::Waiting { until, .. } => {
                    if c.inbox {
                        out.push(Action::Message(i));
                        if fault && self.faults.lost_message {
                            out.push(Action::LoseMessage(i));
                        }
                    } else if *until <= s.now {
                        out.push(Action::Retry(i));
                    }
                }
            }
            if c.holds.iter().any(|h| h.renew_due <= s.now) {
                out.push(Action::Renew(i));
            }
            for (k, l) in c.looks.iter().enumerate() {
                if l.due <= s.now {
                    out.push(Action::Look(i, k));
                }
            }
            if fault && self.faults.lost_message && crate::looks::owes(&c.looks, c.name, s.now) {
                out.push(Action::LoseWatch(i));
            }
        }
        if fault && self.faults.clock_step {
            out.push(Action::StepBack);
        }
        if fault && self.faults.clock_jump && s.jumped.is_none() {
            out.push(Action::JumpAhead);
        }
        if time_may_pass(self.urgent(s), self.next_event(s), self.horizon_ms) {
            out.push(Action::Tick);
        }
    }

    fn step(
        &self,
        server: &mut Server,
        s0: &State,
        a: &Action,
        log: &mut Option<Vec<String>>,
    ) -> Result<State, String> {
        let mut s = s0.clone();
        s.keys.advance_to(s.now + SERVER_OFFSET + s.offset);
        match *a {
            Action::Start(i) => {
                let op = self.ops[i].1[s.clients[i].pc as usize];
                let now = s.now;
                let c = &mut s.clients[i];
                match op {
                    WaitOp::AcquireFor(d) => {
                        c.tokens += 1;
                        c.deadline = now + d;
                        c.name = 0;
                        let t = c.tokens;
                        if self.prim.names(self.mode(i)) > 1 {
                            // Every name at once first (`MultiLock::all_at_once`).
                            self.call(&mut s, i, Kind::All, t);
                            return Ok(s);
                        }
                        let pid = self.pid(i);
                        let queued = self
                            .threads(&s, pid)
                            .any(|j| j != i && s.clients[j].queued.is_some());
                        s.clients[i].tried = !queued;
                        if queued {
                            // Another thread of its client waits: no first
                            // try; subscribed and in the local queue, it
                            // waits for its turn (`Wakeup::acquire`).
                            let c = &mut s.clients[i];
                            c.subscribed = true;
                            s.seq += 1;
                            c.queued = Some(s.seq);
                            c.main = Main::Local { token: t };
                            self.listen(&mut s, i);
                        } else {
                            self.call(&mut s, i, Kind::Grant { queue: true }, t);
                        }
                    }
                    WaitOp::Try => {
                        c.tokens += 1;
                        let t = c.tokens;
                        self.call(&mut s, i, Kind::Grant { queue: false }, t);
                    }
                    WaitOp::Release => {
                        // Every name, one after another.
                        let holds: Vec<(u8, u8, i64)> = c
                            .holds
                            .drain(..)
                            .map(|h| (h.name, h.token, h.fence))
                            .collect();
                        match holds.split_first() {
                            Some((&(name, t, fence), rest)) => {
                                let left = rest.to_vec();
                                self.call(&mut s, i, Kind::Release { name, fence, left }, t);
                            }
                            None => c.pc += 1,
                        }
                    }
                    WaitOp::Shorten(lease) => {
                        c.pc += 1;
                        if let Some(h) = c.holds.first().cloned() {
                            self.shorten(server, &mut s, i, h.token, lease, log);
                        }
                    }
                }
            }
            Action::Head(i) => {
                let Main::Local { token: t } = s.clients[i].main else {
                    return Err("no local wait".into());
                };
                self.call(&mut s, i, Kind::Grant { queue: true }, t);
            }
            Action::Call(i, CallStep::Run | CallStep::LoseReply) => {
                let Main::Call {
                    kind, token: t, at, ..
                } = s.clients[i].main.clone()
                else {
                    return Err("run without a call".into());
                };
                let mode = self.at(i, s.clients[i].name);
                let direct = |popped: bool| {
                    self.direct_of(&s, i, t, popped)
                        .map(|d| d.grant)
                        .ok_or("no direct grant")
                };
                let run = match &kind {
                    Kind::All => self
                        .prim
                        .acquire_all(self, i, self.mode(i), t)
                        .ok_or("no script takes every name")?,
                    // A waiter that blocks says so in its attempts too.
                    Kind::Grant { queue: true } if self.blocks_now(&s, i, at) => direct(false)?,
                    Kind::Grant { queue } => self.prim.acquire(self, i, mode, t, *queue),
                    Kind::Popped { .. } => direct(true)?,
                    Kind::Release { name, fence, .. } => {
                        let run = self.prim.release(self, i, self.at(i, *name), t, false);
                        self.fenced(&s, i, *name, t, run, *fence, true)
                    }
                    Kind::Leave => self.prim.release(self, i, mode, t, true),
                };
                let reply = self.eval(server, &mut s, run, log);
                let lost = matches!(a, Action::Call(_, CallStep::LoseReply));
                if lost {
                    s.faults += 1;
                    s.lost = true;
                    if let Kind::Grant { queue: true } | Kind::Popped { .. } = kind {
                        // The late grant's undo, written behind it.
                        let undo = self.prim.release(self, i, mode, t, true);
                        self.eval(server, &mut s, undo, log);
                    }
                }
                if let Main::Call { out, .. } = &mut s.clients[i].main {
                    *out = if lost {
                        Outcome::Failed
                    } else {
                        Outcome::Ran(reply)
                    };
                }
            }
            Action::Call(i, CallStep::LoseRequest) => {
                s.faults += 1;
                s.lost = true;
                if let Main::Call { out, .. } = &mut s.clients[i].main {
                    *out = Outcome::Failed;
                }
            }
            Action::Call(i, CallStep::Receive) => self.receive(server, &mut s, i, log)?,
            Action::Late(i) => {
                // Not `lost`: a real request always arrives this late or
                // later, so liveness must hold through it.
                s.faults += 1;
                if let Main::Call { late, .. } = &mut s.clients[i].main {
                    *late = true;
                }
            }
            Action::LoseWatch(i) => {
                s.faults += 1;
                s.lost = true;
                let (now, c) = (s.now, &mut s.clients[i]);
                crate::looks::lose_naming(&mut c.looks, c.name, now);
            }
            Action::Message(i) | Action::Retry(i) | Action::LoseMessage(i) => {
                if matches!(a, Action::LoseMessage(_)) {
                    s.faults += 1;
                    s.lost = true;
                    s.clients[i].inbox = false;
                } else if let Main::Local { .. } = s.clients[i].main {
                    // Its deadline came in the local queue: nothing of it
                    // reached the server.
                    self.finish(server, &mut s, i, log);
                    let c = &mut s.clients[i];
                    c.main = Main::Idle;
                    c.pc += 1;
                } else {
                    let Main::Waiting { token: t, .. } = s.clients[i].main else {
                        return Err("no wait to end".into());
                    };
                    if s.now >= s.clients[i].deadline {
                        s.clients[i].inbox = false;
                        self.call(&mut s, i, Kind::Leave, t);
                    } else {
                        self.call(&mut s, i, Kind::Grant { queue: true }, t);
                    }
                }
            }
            Action::Renew(i) => {
                let now = s.now;
                let Some(h) = s.clients[i]
                    .holds
                    .iter()
                    .find(|h| h.renew_due <= now)
                    .cloned()
                else {
                    return Err("renew without a hold due".into());
                };
                let run = self.prim.extend(
                    self,
                    i,
                    self.at(i, h.name),
                    h.token,
                    self.lease_ms,
                    false,
                    h.fence > 0,
                );
                let run = self.fenced(&s, i, h.name, h.token, run, h.fence, false);
                let reply = self.eval(server, &mut s, run, log);
                let c = &mut s.clients[i];
                let times = (now, now, h.valid_until);
                match renewed(int(&reply), times, self.lease_ms, self.lease_ms - 1) {
                    p::Renewed::Extended { until, next } => {
                        // Set now, after any jump so far.
                        for g in c.holds.iter_mut().filter(|g| g.name == h.name) {
                            if until > g.valid_until {
                                (g.valid_until, g.slack) = (until, 0);
                            }
                            g.renew_due = next;
                        }
                    }
                    p::Renewed::Retry { at } => {
                        for g in c.holds.iter_mut().filter(|g| g.name == h.name) {
                            g.renew_due = at;
                        }
                    }
                    p::Renewed::Lost | p::Renewed::Expired => c.holds.retain(|g| g.name != h.name),
                }
            }
            Action::Look(i, k) => {
                let l = s.clients[i].looks[k].clone();
                let run = match l.waiter {
                    Some(t) => self.direct_of(&s, i, t, false).ok_or("no watch")?.watch,
                    None => self.prim.look(self, i, self.at(i, l.name)),
                };
                let reply = self.eval(server, &mut s, run, log);
                let now = s.now;
                let c = &mut s.clients[i];
                c.looks.remove(k);
                if let Some((after, left)) = p::next_look(int(&reply).unwrap_or(0), l.left) {
                    c.looks.push(Look {
                        due: now + ms(after),
                        left,
                        ..l
                    });
                }
            }
            Action::Crash(i) => {
                s.faults += 1;
                for j in self.threads(s0, self.pid(i)) {
                    let c = &mut s.clients[j];
                    c.life = Life::Crashed;
                    c.holds.clear();
                    c.looks.clear();
                    c.main = Main::Idle;
                    c.down = false;
                }
            }
            Action::Freeze(i) => {
                s.faults += 1;
                for j in self.threads(s0, self.pid(i)) {
                    s.clients[j].life = Life::Frozen;
                }
            }
            Action::Resume(i) => {
                for j in self.threads(s0, self.pid(i)) {
                    s.clients[j].life = Life::Running;
                }
                if std::mem::take(&mut s.clients[i].named) {
                    self.read_naming(&mut s, self.pid(i));
                }
            }
            Action::StepBack => {
                // Fences drawn from the server's clock must still grow,
                // and leases keep their length (Redis keeps expiries as
                // absolute times: a step back lengthens them a second).
                s.faults += 1;
                s.offset -= 1000;
                s.keys.now_us = (s.now + SERVER_OFFSET + s.offset) * 1000;
            }
            Action::JumpAhead => {
                // What expires meanwhile goes at once (the next step's
                // `advance_to`); leases set before lapse that much sooner
                // on the server than their holders count.
                s.faults += 1;
                s.offset += self.clock_jump_ms;
                s.jumped = Some(s.now);
                s.keys.advance_to(s.now + SERVER_OFFSET + s.offset);
                for c in &mut s.clients {
                    for h in &mut c.holds {
                        h.slack = self.clock_jump_ms;
                    }
                }
            }
            Action::SubscriberDown(i) => {
                // Its waiters are woken as it ends (`listen`: messages may
                // be missed from now on), and it reconnects before time
                // passes (as in the lock model): what is published in
                // between is not heard.
                s.faults += 1;
                let c = &mut s.clients[i];
                c.listening = false;
                c.down = true;
                if self.restart_wakes {
                    self.wake(&mut s, self.pid(i), |_, _| true);
                }
            }
            Action::SubscriberUp(i) => {
                // It listens again (`listen`): its waiters are woken, and
                // the names its blocked waiters wait on get the looks a
                // missed naming asked for (`Watches::listening`).
                s.clients[i].down = false;
                if self.restart_looks {
                    self.listen(&mut s, i);
                } else {
                    s.clients[i].listening = true;
                }
                if self.restart_wakes {
                    self.wake(&mut s, self.pid(i), |_, _| true);
                }
            }
            Action::Cut(i) => {
                // Closing the connection ends the pop; the script is sent
                // on its own (`grant_blocking`'s "not blocked").
                s.faults += 1;
                let Main::Blocked { token, .. } = s.clients[i].main else {
                    return Err("cut without a block".into());
                };
                let now = s.now;
                self.call(
                    &mut s,
                    i,
                    Kind::Popped {
                        short: Some(now),
                        served: self.if_jumps(now),
                        left: ms(p::POPPED_LEASE),
                    },
                    token,
                );
            }
            Action::LosePopped(i) => {
                // As a late reply of any grant (`Acquisition::on_error`:
                // undone): the undo `grant_blocking` queued behind it
                // runs, and the client notices a response timeout from
                // now.
                s.faults += 1;
                s.lost = true;
                let mode = self.at(i, s.clients[i].name);
                let Main::Call { token: t, .. } = s.clients[i].main else {
                    return Err("no blocking round trip".into());
                };
                let undo = self.prim.release(self, i, mode, t, true);
                self.eval(server, &mut s, undo, log);
                let now = s.now;
                if let Main::Call { at, out, .. } = &mut s.clients[i].main {
                    (*at, *out) = (now, Outcome::Failed);
                }
            }
            Action::Exit(i) => {
                s.exits += 1;
                for j in self.threads(s0, self.pid(i)) {
                    let c = &mut s.clients[j];
                    c.life = Life::Exited;
                    c.looks.clear();
                }
            }
            Action::Tick => {
                let t = self.next_event(&s).ok_or("no event to wait for")?;
                self.idle(server, &mut s, t)?;
                if let (Some(since), false) = (s.free_since, s.lost) {
                    let bound = since + ms(self.prim.hand_over_claim()) + 1000;
                    if t > bound {
                        return Err(format!(
                            "liveness: from {since} ms what is free fitted every live waiter, and \
                             none had it by {bound} ms (the claim + 1 s)"
                        ));
                    }
                }
                s.now = t;
                s.keys.advance_to(s.now + SERVER_OFFSET + s.offset);
                let now = s.now;
                for c in &mut s.clients {
                    c.holds.retain(|h| h.valid_until > now);
                }
                // Pops that time out run their script (a crashed client's
                // connection is gone).
                for i in 0..s.clients.len() {
                    if let Main::Blocked { until, .. } = s.clients[i].main {
                        if until <= now && s.clients[i].life != Life::Crashed {
                            self.popped(server, &mut s, i, false, log);
                        }
                    }
                }
            }
        }
        self.free_since(&mut s);
        Ok(s)
    }

    fn check(&self, server: &mut Server, s: &State) -> Result<(), String> {
        if let Some(e) = &s.broken {
            return Err(e.clone());
        }
        let holders: Vec<Holder<P::Mode>> = s
            .clients
            .iter()
            .enumerate()
            // A frozen holder still believes what it believed.
            .filter(|(_, c)| matches!(c.life, Life::Running | Life::Frozen))
            .flat_map(|(i, c)| {
                let holds = c.holds.iter().filter(|h| h.valid_until > s.now);
                // A lease set before the server's clock jumped ahead lapses
                // there that much sooner: within that, its holder's belief
                // is the limit GUARANTEES states ("Clock jumps"), not a
                // violation. One set after the jump is judged in full.
                let excused = |h: &&Hold| s.now + h.slack > h.valid_until;
                holds
                    .filter(move |h| !excused(h))
                    .map(move |h| (i, self.at(i, h.name), h.token, h.fence))
            })
            .collect();
        self.prim.holders(&s.keys, &holders)?;
        let quiet = s.clients.iter().enumerate().all(|(i, c)| match c.life {
            Life::Crashed | Life::Exited => true,
            Life::Frozen => false,
            Life::Running => {
                c.pc as usize >= self.ops[i].1.len()
                    && matches!(c.main, Main::Idle)
                    && c.holds.is_empty()
            }
        });
        if quiet {
            // Depends on the keyspace alone (its clock included).
            let memo = crate::search::fingerprint(&(P::TAG, &s.keys));
            return server.memo(memo, |server| self.prim.quiet(self, server, &s.keys));
        }
        Ok(())
    }

    fn show(&self, s: &State) -> Vec<String> {
        let mut out = vec![format!(
            "t = {} ms, server clock {:+} ms, faults {}, exits {}, top fences {:?}",
            s.now, s.offset, s.faults, s.exits, s.top_fence
        )];
        for (i, c) in s.clients.iter().enumerate() {
            out.push(format!(
                "c{i} ({:?}): {:?}, op {}/{}, deadline {}, {:?}, subscribed {}, inbox {}, \
                 hold {:?}, looks {:?}",
                self.mode(i),
                c.life,
                c.pc,
                self.ops[i].1.len(),
                c.deadline,
                c.main,
                c.subscribed,
                c.inbox,
                c.holds,
                c.looks
            ));
        }
        out.extend(s.keys.show().into_iter().map(|l| format!("  {l}")));
        out
    }
}

/// [`crate::parties::on_its_way`] for a client's main state.
fn on_its_way(main: &Main, now: i64) -> bool {
    match main {
        Main::Call { at, out, late, .. } => crate::parties::on_its_way(*at, out, *late, now),
        _ => false,
    }
}
