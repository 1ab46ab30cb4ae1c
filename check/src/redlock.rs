//! The lock on Redlock: three independent masters, each running the
//! lock's scripts on its own keyspace, and clients that decide by
//! majority as `backend::redlock` does. An acquisition writes its grant to
//! every master (each runs it at its own moment, or the request or the
//! reply is lost: a missing vote, the undo written behind a lost reply as
//! `Node::fail` does); with a majority of grants the fence is the largest,
//! agreed by a majority of counters (raised with lua/fence_raise.lua when
//! fewer than a majority returned it), and the lease's validity is what is
//! left of it after the time spent and the drift allowance
//! (`protocol::quorum::drift`); otherwise the attempt is undone on every master and
//! the waiter retries at the hint (`Redlock::grant`: the wait, at most a
//! quarter of it and at least the jitter, here its largest, 49 ms) or on
//! a release message from the first master (its subscriber's). Renewals
//! and releases go by majority. A master restarts without its keys: at
//! once, or (Redlock's rule) staying down for a lease and the drift first.
//!
//! Properties: never two holders whose leases are valid in their own view;
//! each grant's fence above every earlier grant's; once nobody holds or
//! waits, every key but the fence floors lapses.
//!
//! A renewal's or a release's call to one master may be lost too (its
//! request: it never ran there; or its reply: it ran, and its vote is
//! missing); the calls to the other masters run in the same step.
//!
//! A fence raise (run on every master in one step, when the granting
//! masters' counters disagree) may lose one master's call the same way,
//! its time spent from the lease's validity.
//!
//! A client may be frozen (SIGSTOP, a long pause): requests it sent
//! still run, and it decides on their votes, renews and releases only
//! once it resumes, its lease's validity counted from when it sent them.
//! A master's clock may step back a second (fences must still grow), or
//! jump ahead a lease: the limit Redlock's safety rests on, where the
//! check finds two holders.

use redlease::__protocol as p;

use crate::keyspace::{Keyspace, Reply};
use crate::lock::{
    key, renewal_call, scripted, unqueued_acquire_args, unqueued_release_args, FLOOR,
};
use crate::parties::{b, busy, heard, int, renewed, time_may_pass, At, Faults, Life};
use crate::probes::SERVER_OFFSET;
use crate::search::Model;
use crate::server::Server;

/// What one client does, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RlOp {
    /// `acquire_timeout(ms)`.
    AcquireFor(i64),
    /// `try_acquire()`.
    Try,
    /// The guard's `release()`.
    Release,
}

pub struct RedlockModel {
    pub ops: Vec<Vec<RlOp>>,
    /// `crash` means a master restarting without its keys.
    pub faults: Faults,
    pub lease_ms: i64,
    pub horizon_ms: i64,
    /// A lost request or reply costs the node timeout.
    pub response_ms: i64,
    pub fallback_ms: i64,
    /// A restarted master stays down a lease and the drift first.
    pub delayed_restart: bool,
    pub exits: bool,
    /// A lease counted from when the votes are counted, not from when
    /// the grant was sent (`Redlock::grant`'s rule): a wrong rule, for the
    /// checker's own tests (a client frozen between the two believes in
    /// a lease the masters have let go).
    pub lease_from_decision: bool,
}

const MASTERS: usize = 3;
/// The largest jitter of `Redlock::grant`'s retry hint.
const JITTER: i64 = p::JITTER_MAX;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Vote {
    Pending,
    Ran(Reply),
    /// Lost: `slow` after the node timeout, else at once (a master down
    /// refuses the connection).
    Failed {
        slow: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Main {
    Idle,
    Grant { at: i64, votes: Vec<Vote> },
    Waiting { until: i64 },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Hold {
    fence: i64,
    valid_until: i64,
    renew_due: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Client {
    pc: u8,
    life: Life,
    tokens: u8,
    deadline: Option<i64>,
    main: Main,
    hold: Option<Hold>,
    subscribed: bool,
    inbox: bool,
    /// The acquisition's outage (`Tries`): when the attempt that started
    /// it was sent, and the last wait it rode out (0 before the first; not
    /// reset by a busy vote, as the library's is not).
    outage: Option<i64>,
    backoff: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    masters: Vec<Keyspace>,
    /// A restarted master answers again from then.
    down_until: Vec<i64>,
    /// Each master's clock minus the clients' (a step or a jump).
    offsets: Vec<i64>,
    now: i64,
    clients: Vec<Client>,
    faults: u8,
    exits: u8,
    /// The largest fence granted so far.
    top_fence: i64,
    broken: Option<String>,
}

#[derive(Clone, Debug)]
pub enum Action {
    Start(usize),
    RunOn(usize, usize),
    LoseRequest(usize, usize),
    LoseReply(usize, usize),
    /// `Redlock::grant`'s verdict; the fence raise it makes when the
    /// counters disagree may lose one master's call.
    Decide(usize, Option<Loss>),
    Message(usize),
    LoseMessage(usize),
    Retry(usize),
    /// A renewal, or the guard's release, its call to one master perhaps
    /// lost.
    Renew(usize, Option<Loss>),
    Release(usize, Option<Loss>),
    Restart(usize),
    /// Master `m`'s clock steps back a second (an NTP step).
    StepBack(usize),
    /// Master `m`'s clock jumps ahead a lease.
    JumpAhead(usize),
    Freeze(usize),
    Resume(usize),
    Exit(usize),
    Tick,
}

/// One master's call of a renewal or release lost: its request (it never
/// ran there), or its reply (it ran; its vote is missing).
#[derive(Clone, Copy, Debug)]
pub enum Loss {
    Request(usize),
    Reply(usize),
}

/// The votes as `Redlock::grant` reads them (an integer a grant, a
/// text a wait, anything else or nothing a missing vote), counted by the
/// library's own rules (`protocol::quorum::Tally`).
fn tally(votes: &[Vote]) -> p::Tally {
    p::Tally::of(votes.iter().map(|v| match v {
        Vote::Ran(Reply::Int(fence)) => p::Vote::Granted(*fence),
        Vote::Ran(r) => busy(r).map_or(p::Vote::Failed, p::Vote::Busy),
        _ => p::Vote::Failed,
    }))
}

/// Whether a grant with these votes raises the counters
/// (`Redlock::agree_on_fence`): a majority granted, and fewer than a
/// majority returned the largest fence.
fn raise_needed(votes: &[Vote]) -> bool {
    let t = tally(votes);
    t.granted() && t.needs_raise()
}

impl RedlockModel {
    /// `protocol::quorum::drift`, the library's own, in milliseconds.
    fn drift(&self) -> i64 {
        p::drift(std::time::Duration::from_millis(self.lease_ms as u64)).as_millis() as i64
    }

    /// lua/lock_acquire.lua's arguments on Redlock (`Lock`'s spec: no
    /// queue, no blocking).
    fn acquire_args(&self, i: usize, t: u8) -> Vec<Vec<u8>> {
        unqueued_acquire_args(i, t, self.lease_ms)
    }

    /// lua/lock_release.lua's arguments on Redlock (`keep`: the counter
    /// lapses by itself).
    fn release_args(&self, i: usize, t: u8) -> Vec<Vec<u8>> {
        unqueued_release_args(i, t, true)
    }

    /// Every master's clock moved to the clients' `now` (its offset
    /// apart), and its keys whose time has come gone.
    fn sync(&self, s: &mut State) {
        for (m, k) in s.masters.iter_mut().enumerate() {
            k.advance_to(s.now + SERVER_OFFSET + s.offsets[m]);
        }
    }

    fn up(&self, s: &State, m: usize) -> bool {
        s.now >= s.down_until[m]
    }

    fn eval(
        &self,
        server: &mut Server,
        s: &mut State,
        m: usize,
        (file, keys, args): (&'static str, &[Vec<u8>], &[Vec<u8>]),
        log: &mut Option<Vec<String>>,
    ) -> Reply {
        let ran = server.eval(&mut s.masters[m], file, keys, args);
        ran.log(log, &format!("master {m}: "), file, args);
        // The subscriber listens on the first master.
        if m == 0 {
            // A frozen client's subscriber reads it when it resumes; a
            // release wakes its waiter (`heard`, as `Shared::dispatch`).
            for (i, c) in s.clients.iter_mut().enumerate() {
                let released = ran
                    .published
                    .iter()
                    .any(|msg| matches!(heard(i, &msg.message), p::Heard::Released(_)));
                if released && matches!(c.life, Life::Running | Life::Frozen) && c.subscribed {
                    c.inbox = true;
                }
            }
        }
        ran.reply
    }

    /// A call on every master that answers, in one step: the votes.
    fn on_all(
        &self,
        server: &mut Server,
        s: &mut State,
        file: &'static str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
        log: &mut Option<Vec<String>>,
    ) -> Vec<Option<Reply>> {
        self.on_all_losing(server, s, (file, keys, args), None, log)
    }

    /// [`RedlockModel::on_all`], one master's call perhaps lost.
    fn on_all_losing(
        &self,
        server: &mut Server,
        s: &mut State,
        (file, keys, args): (&'static str, &[Vec<u8>], &[Vec<u8>]),
        loss: Option<Loss>,
        log: &mut Option<Vec<String>>,
    ) -> Vec<Option<Reply>> {
        if loss.is_some() {
            s.faults += 1;
        }
        (0..MASTERS)
            .map(|m| {
                if !self.up(s, m) || matches!(loss, Some(Loss::Request(x)) if x == m) {
                    return None;
                }
                let reply = self.eval(server, s, m, (file, keys, args), log);
                (!matches!(loss, Some(Loss::Reply(x)) if x == m)).then_some(reply)
            })
            .collect()
    }

    /// The choices of a renewal's or release's lost call, with the fault
    /// budget left.
    fn losses(&self, fault: bool) -> Vec<Option<Loss>> {
        let mut out = vec![None];
        for m in 0..MASTERS {
            if fault && self.faults.lost_request {
                out.push(Some(Loss::Request(m)));
            }
            if fault && self.faults.lost_reply {
                out.push(Some(Loss::Reply(m)));
            }
        }
        out
    }

    fn attempt(&self, s: &mut State, i: usize) {
        let c = &mut s.clients[i];
        c.inbox = false;
        c.main = Main::Grant {
            at: s.now,
            votes: vec![Vote::Pending; MASTERS],
        };
    }

    fn end_wait(&self, s: &mut State, i: usize) {
        let c = &mut s.clients[i];
        c.main = Main::Idle;
        c.deadline = None;
        c.subscribed = false;
        c.inbox = false;
        // The next acquisition judges its attempts afresh (`Tries::new`).
        (c.outage, c.backoff) = (None, 0);
        c.pc += 1;
    }

    /// `Redlock::grant`'s verdict on the votes.
    fn decide(
        &self,
        server: &mut Server,
        s: &mut State,
        i: usize,
        loss: Option<Loss>,
        log: &mut Option<Vec<String>>,
    ) -> Result<(), String> {
        let Main::Grant { at, votes } = s.clients[i].main.clone() else {
            return Err("no votes".into());
        };
        let t = s.clients[i].tokens;
        let votes_tally = tally(&votes);
        if votes_tally.granted() {
            let best = votes_tally.fence();
            let agreed = !votes_tally.needs_raise() || {
                let keys = [key(":fence"), FLOOR.to_vec()];
                let args = [b(best), b(self.lease_ms)];
                let call = ("fence_raise.lua", &keys[..], &args[..]);
                let befores = self.on_all_losing(server, s, call, loss, log);
                let befores: Vec<Option<i64>> =
                    befores.iter().map(|r| r.as_ref().and_then(int)).collect();
                votes_tally.owned_after_raise(&befores)
            };
            // A lost call of the raise is noticed at the node timeout,
            // spent from the lease's validity.
            let lost = if loss.is_some() { self.response_ms } else { 0 };
            let from = if self.lease_from_decision { s.now } else { at };
            let ms = |v: i64| std::time::Duration::from_millis(v.max(0) as u64);
            if agreed && p::lease_left(ms(self.lease_ms), ms(s.now - from + lost)) {
                if best <= s.top_fence {
                    return Err(format!(
                        "fence {best} granted to c{i}, not above {} granted before",
                        s.top_fence
                    ));
                }
                s.top_fence = best;
                let c = &mut s.clients[i];
                c.hold = Some(Hold {
                    fence: best,
                    valid_until: from + self.lease_ms - self.drift() - 1,
                    renew_due: from + self.lease_ms / 3,
                });
                self.end_wait(s, i);
                return Ok(());
            }
        }
        // Undone on every master.
        let args = self.release_args(i, t);
        self.on_all(server, s, "lock_release.lua", scripted(), &args, log);
        let c = &mut s.clients[i];
        match c.deadline {
            None => self.end_wait(s, i),
            Some(d) if s.now >= d => self.end_wait(s, i),
            Some(d) => {
                // Too many masters failed for any majority: an outage
                // (`QuorumNotReached`), ridden out by the library's rule
                // (`Tries::judge`, `ride_out`) until its tolerance or the
                // deadline; else busy, at the votes' hint.
                let wait = if votes_tally.hopeless() {
                    let since = *c.outage.get_or_insert(at);
                    let backoff = std::time::Duration::from_millis(c.backoff as u64);
                    let ride = p::ride_out(
                        At(since),
                        At(s.now),
                        backoff,
                        p::OUTAGE_TOLERANCE,
                        s.now >= d,
                    );
                    let Some(next) = ride else {
                        self.end_wait(s, i);
                        return Ok(());
                    };
                    c.backoff = crate::parties::ms(next);
                    c.backoff
                } else {
                    c.outage = None;
                    votes_tally.retry_after(JITTER)
                };
                if !c.subscribed {
                    // Subscribed now: again at once.
                    c.subscribed = true;
                    self.attempt(s, i);
                } else {
                    let until = (s.now + wait.min(self.fallback_ms)).min(d);
                    c.main = Main::Waiting { until };
                }
            }
        }
        Ok(())
    }

    fn next_event(&self, s: &State) -> Option<i64> {
        let mut t: Vec<i64> = s
            .masters
            .iter()
            .enumerate()
            .filter_map(|(m, k)| k.next_expiry().map(|e| e - SERVER_OFFSET - s.offsets[m]))
            .collect();
        t.extend(s.down_until.iter().copied());
        for c in &s.clients {
            if c.life != Life::Running {
                continue;
            }
            if let Some(h) = &c.hold {
                t.push(h.renew_due);
                t.push(h.valid_until);
            }
            match &c.main {
                Main::Waiting { until } => t.push(*until),
                Main::Grant { at, votes } => {
                    if votes.contains(&Vote::Failed { slow: true }) {
                        t.push(at + self.response_ms);
                    }
                }
                Main::Idle => {}
            }
        }
        t.into_iter().filter(|&x| x > s.now).min()
    }

    fn decidable(&self, s: &State, at: i64, votes: &[Vote]) -> bool {
        !votes.contains(&Vote::Pending)
            && (!votes.contains(&Vote::Failed { slow: true }) || at + self.response_ms <= s.now)
    }

    fn urgent(&self, s: &State) -> bool {
        s.clients.iter().any(|c| {
            c.life == Life::Running
                && (c.hold.as_ref().is_some_and(|h| h.renew_due <= s.now)
                    || match &c.main {
                        Main::Grant { at, votes } => {
                            votes.contains(&Vote::Pending) || self.decidable(s, *at, votes)
                        }
                        Main::Waiting { until } => *until <= s.now || c.inbox,
                        Main::Idle => false,
                    })
        })
    }
}

impl Model for RedlockModel {
    type State = State;
    type Action = Action;

    fn init(&self) -> State {
        State {
            masters: (0..MASTERS)
                .map(|_| Keyspace::starting_at(SERVER_OFFSET))
                .collect(),
            down_until: vec![0; MASTERS],
            offsets: vec![0; MASTERS],
            now: 0,
            clients: (0..self.ops.len())
                .map(|_| Client {
                    pc: 0,
                    life: Life::Running,
                    tokens: 0,
                    deadline: None,
                    main: Main::Idle,
                    hold: None,
                    subscribed: false,
                    outage: None,
                    backoff: 0,
                    inbox: false,
                })
                .collect(),
            faults: 0,
            exits: 0,
            top_fence: 0,
            broken: None,
        }
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let fault = s.faults < self.faults.budget;
        if fault && self.faults.crash {
            for m in 0..MASTERS {
                if self.up(s, m) {
                    out.push(Action::Restart(m));
                }
            }
        }
        for m in 0..MASTERS {
            if fault && self.faults.clock_step {
                out.push(Action::StepBack(m));
            }
            if fault && self.faults.clock_jump {
                out.push(Action::JumpAhead(m));
            }
        }
        for (i, c) in s.clients.iter().enumerate() {
            if c.life == Life::Frozen {
                out.push(Action::Resume(i));
                // Requests it sent before it froze still run.
                if let Main::Grant { votes, .. } = &c.main {
                    for (m, v) in votes.iter().enumerate() {
                        if *v == Vote::Pending {
                            out.push(Action::RunOn(i, m));
                        }
                    }
                }
                continue;
            }
            if c.life != Life::Running {
                continue;
            }
            if fault && self.faults.freeze {
                out.push(Action::Freeze(i));
            }
            match &c.main {
                Main::Idle => {
                    if (c.pc as usize) < self.ops[i].len() {
                        if self.ops[i][c.pc as usize] == RlOp::Release {
                            let losses = self.losses(fault);
                            out.extend(losses.into_iter().map(|l| Action::Release(i, l)));
                        } else {
                            out.push(Action::Start(i));
                        }
                    } else if c.hold.is_none() && self.exits {
                        out.push(Action::Exit(i));
                    }
                }
                Main::Grant { at, votes } => {
                    for (m, v) in votes.iter().enumerate() {
                        if *v == Vote::Pending {
                            out.push(Action::RunOn(i, m));
                            if fault && self.faults.lost_request {
                                out.push(Action::LoseRequest(i, m));
                            }
                            if fault && self.faults.lost_reply {
                                out.push(Action::LoseReply(i, m));
                            }
                        }
                    }
                    if self.decidable(s, *at, votes) {
                        out.push(Action::Decide(i, None));
                        if fault && raise_needed(votes) {
                            let losses = self.losses(fault).into_iter().flatten();
                            out.extend(losses.map(|l| Action::Decide(i, Some(l))));
                        }
                    }
                }
                Main::Waiting { until } => {
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
            if c.hold.as_ref().is_some_and(|h| h.renew_due <= s.now) {
                let losses = self.losses(fault);
                out.extend(losses.into_iter().map(|l| Action::Renew(i, l)));
            }
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
        self.sync(&mut s);
        match *a {
            Action::Start(i) => {
                let op = self.ops[i][s.clients[i].pc as usize];
                let now = s.now;
                let c = &mut s.clients[i];
                match op {
                    RlOp::AcquireFor(d) => {
                        c.tokens += 1;
                        c.deadline = Some(now + d);
                        self.attempt(&mut s, i);
                    }
                    RlOp::Try => {
                        c.tokens += 1;
                        c.deadline = None;
                        self.attempt(&mut s, i);
                    }
                    RlOp::Release => return Err("a release starts as Action::Release".into()),
                }
            }
            Action::Release(i, loss) => {
                let c = &mut s.clients[i];
                c.pc += 1;
                if c.hold.take().is_some() {
                    let t = c.tokens;
                    let args = self.release_args(i, t);
                    let release = ("lock_release.lua", scripted(), &args[..]);
                    self.on_all_losing(server, &mut s, release, loss, log);
                }
            }
            Action::RunOn(i, m) | Action::LoseReply(i, m) => {
                let t = s.clients[i].tokens;
                let vote = if !self.up(&s, m) {
                    Vote::Failed { slow: false }
                } else {
                    let args = self.acquire_args(i, t);
                    let grant = ("lock_acquire.lua", scripted(), &args[..]);
                    let reply = self.eval(server, &mut s, m, grant, log);
                    if matches!(a, Action::LoseReply(..)) {
                        s.faults += 1;
                        // The undo written behind the lost reply.
                        let undo = self.release_args(i, t);
                        let undo = ("lock_release.lua", scripted(), &undo[..]);
                        self.eval(server, &mut s, m, undo, log);
                        Vote::Failed { slow: true }
                    } else {
                        Vote::Ran(reply)
                    }
                };
                if let Main::Grant { votes, .. } = &mut s.clients[i].main {
                    votes[m] = vote;
                }
            }
            Action::LoseRequest(i, m) => {
                s.faults += 1;
                if let Main::Grant { votes, .. } = &mut s.clients[i].main {
                    votes[m] = Vote::Failed { slow: true };
                }
            }
            Action::Decide(i, loss) => self.decide(server, &mut s, i, loss, log)?,
            Action::Message(i) | Action::Retry(i) => {
                let c = &s.clients[i];
                if c.deadline.is_some_and(|d| s.now >= d) {
                    self.end_wait(&mut s, i);
                } else {
                    self.attempt(&mut s, i);
                }
            }
            Action::LoseMessage(i) => {
                s.faults += 1;
                s.clients[i].inbox = false;
            }
            Action::Renew(i, loss) => {
                let t = s.clients[i].tokens;
                let (keys, args) = renewal_call(i, t, self.lease_ms);
                let renewal = ("lock_extend.lua", &keys[..], &args[..]);
                let votes = self.on_all_losing(server, &mut s, renewal, loss, log);
                // `Redlock::eval_batch`: a majority decides (`combine`).
                let verdict = p::combine(MASTERS, votes.iter().map(|v| v.as_ref().and_then(int)));
                let now = s.now;
                let c = &mut s.clients[i];
                if let Some(h) = &mut c.hold {
                    let valid = self.lease_ms - self.drift() - 1;
                    let times = (now, now, h.valid_until);
                    match renewed(verdict, times, self.lease_ms, valid) {
                        p::Renewed::Extended { until, next } => {
                            h.valid_until = h.valid_until.max(until);
                            h.renew_due = next;
                        }
                        p::Renewed::Retry { at } => h.renew_due = at,
                        p::Renewed::Lost | p::Renewed::Expired => c.hold = None,
                    }
                }
            }
            Action::Restart(m) => {
                s.faults += 1;
                s.masters[m].keys = Default::default();
                if self.delayed_restart {
                    s.down_until[m] = s.now + self.lease_ms + self.drift();
                }
                if m == 0 {
                    // The subscriber's connection broke: a nudge to every
                    // waiter (`notify_all`).
                    for c in &mut s.clients {
                        if c.life == Life::Running && c.subscribed {
                            c.inbox = true;
                        }
                    }
                }
            }
            Action::StepBack(m) => {
                s.faults += 1;
                s.offsets[m] -= 1000;
                s.masters[m].now_us = (s.now + SERVER_OFFSET + s.offsets[m]) * 1000;
            }
            Action::JumpAhead(m) => {
                s.faults += 1;
                s.offsets[m] += self.lease_ms;
                self.sync(&mut s);
            }
            Action::Freeze(i) => {
                s.faults += 1;
                s.clients[i].life = Life::Frozen;
            }
            Action::Resume(i) => s.clients[i].life = Life::Running,
            Action::Exit(i) => {
                s.exits += 1;
                s.clients[i].life = Life::Exited;
            }
            Action::Tick => {
                let t = self.next_event(&s).ok_or("no event to wait for")?;
                s.now = t;
                self.sync(&mut s);
                for c in &mut s.clients {
                    if c.hold.as_ref().is_some_and(|h| h.valid_until <= t) {
                        c.hold = None;
                    }
                }
            }
        }
        Ok(s)
    }

    fn check(&self, _server: &mut Server, s: &State) -> Result<(), String> {
        if let Some(e) = &s.broken {
            return Err(e.clone());
        }
        let holders: Vec<usize> = s
            .clients
            .iter()
            .enumerate()
            // A frozen holder still believes what it believed.
            .filter(|(_, c)| matches!(c.life, Life::Running | Life::Frozen))
            .filter(|(_, c)| c.hold.as_ref().is_some_and(|h| h.valid_until > s.now))
            .map(|(i, _)| i)
            .collect();
        if holders.len() > 1 {
            return Err(format!(
                "exclusion: c{} and c{} both hold the lock with valid leases",
                holders[0], holders[1]
            ));
        }
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
            for k in &s.masters {
                crate::probes::lapsed(k, &[FLOOR])?;
            }
        }
        Ok(())
    }

    fn show(&self, s: &State) -> Vec<String> {
        let mut out = vec![format!(
            "t = {} ms, faults {}, top fence {}, masters down until {:?}, clocks {:+?} ms",
            s.now, s.faults, s.top_fence, s.down_until, s.offsets
        )];
        for (i, c) in s.clients.iter().enumerate() {
            out.push(format!(
                "c{i}: {:?}, op {}/{}, token {}, deadline {:?}, {:?}, hold {:?}, subscribed {}, inbox {}",
                c.life,
                c.pc,
                self.ops[i].len(),
                c.tokens,
                c.deadline,
                c.main,
                c.hold,
                c.subscribed,
                c.inbox
            ));
        }
        for (m, k) in s.masters.iter().enumerate() {
            out.push(format!("  master {m}:"));
            out.extend(k.show().into_iter().map(|l| format!("    {l}")));
        }
        out
    }
}
