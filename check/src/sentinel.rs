//! The lock across a Sentinel failover: one master, its replica, and a
//! failover the Sentinels make while the clients keep calling. The master
//! may be stopped (SIGSTOP) first; the replica is promoted with every write
//! the master had made (replication caught up), or with what reached it
//! (`lag`);
//! the old master may then resume *still acting as master*, as a stopped
//! one does until the Sentinels reconfigure it, and runs whatever its
//! sockets held. Each client hears the switch (`+switch-master`) at a
//! moment of its own, as `sentinel::Named` does.
//!
//! The clients decide as the library does (`pool::Deposal`): a client that
//! heard the switch sends to the master named, and no reply of another
//! server counts (it is a not-sent error: a grant is tried again with its
//! token, a renewal is retried at its pace). A call to the stopped master
//! times out after the response timeout; its request stays in the
//! server's socket and runs when the server resumes, a grant's undo
//! behind it (`Node::fail`), and the acquisition goes on with a fresh
//! token. Waiters try again at the busy reply's hint, within their
//! deadline (the lock's attempts without a queue, as on Redlock): how
//! waiters wait is the lock model's concern; here what matters is which
//! server answers and which answers count.
//!
//! Properties:
//! - **Exclusion**: never two clients whose leases are valid in their own
//!   view, leaving out a lease that rests on a reply of the deposed master
//!   counted before its client heard the switch: the window GUARANTEES
//!   states (from the promotion to the announcement reaching the client).
//! - **Known to the master named**: such a lease (one outside the window)
//!   is named by the lock key on the master the Sentinels name.
//! - Once nobody holds or waits, every key on the master named but the
//!   fence floor lapses.
//!
//! With `lag`, the replica has only what reached it, and is promoted with
//! that: a lease lost at the failover is the stated limit, found (its
//! holder believes in a lease the new master does not know);
//! `replica_ack` makes a grant wait for the replica (so none is lost, and
//! a deposed master's grant is withdrawn), but renewals are not waited
//! for, and the limit is found again with the watchdog on.
//!
//! Not modelled: blocked waiters (the switch shuts their connections:
//! tested on real servers), liveness, faults other than the failover.

use redlease::__protocol as p;

use crate::keyspace::{Keyspace, Reply};
use crate::lock::{
    key, renewal_call, scripted, token, unqueued_acquire_args, unqueued_release_args, FLOOR,
};
use crate::parties::{busy, int, renewed, time_may_pass, At};
use crate::probes::SERVER_OFFSET;
use crate::search::Model;
use crate::server::Server;

/// What one client does, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SOp {
    /// `acquire_timeout(ms)`.
    AcquireFor(i64),
    /// Keeps what it holds this long before its next operation.
    Sleep(i64),
    /// The guard's `release()`.
    Release,
}

pub struct SentinelModel {
    pub ops: Vec<Vec<SOp>>,
    pub lease_ms: i64,
    pub horizon_ms: i64,
    /// The client's response timeout: a call to the stopped master fails
    /// after it.
    pub response_ms: i64,
    /// The master may be stopped before its failover (and resumed after);
    /// otherwise it keeps running, cut off from the Sentinels only.
    pub stops: bool,
    /// The library's rule: once a client heard the switch, no reply of a
    /// server the Sentinels no longer name counts (`pool::Con::counted`).
    /// `false`: the rule before issue 53, for the checker's own tests.
    pub discounts_deposed: bool,
    /// Replication is asynchronous: the replica has what reached it
    /// (`Replicate`, any time the master runs), and is promoted with that
    /// (a write it never got is lost at the failover). `false`: promoted
    /// caught up.
    pub lag: bool,
    /// `ClientBuilder::replica_ack`: a grant is followed by `WAIT` on its
    /// connection (`Node::grant_acked`). On the master the Sentinels name,
    /// the replica then has every write so far; on a deposed one no
    /// replica acknowledges, the grant's undo runs behind it and the
    /// acquisition is told `QuorumNotReached`, ridden out as the library
    /// does (`protocol::tries::ride_out`). Renewals are not waited for.
    pub replica_ack: bool,
    /// Holds are renewed by the watchdog (else a fixed lease).
    pub watchdog: bool,
}

/// The first master, and the replica the Sentinels promote.
const OLD: u8 = 0;
const NEW: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Grant,
    Renew,
    Release,
    /// A timed-out grant's undo, written behind it (`Node::fail`).
    Undo,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Out {
    Unsent,
    /// It ran; `by_named`: on the master the Sentinels named when it ran.
    Ran {
        reply: Reply,
        by_named: bool,
    },
    /// Sent to the stopped master and not answered within the response
    /// timeout (the request stays in the server's socket).
    Late,
    /// A grant whose `WAIT` no replica acknowledged (`replica_ack` on a
    /// deposed master): undone behind it, `QuorumNotReached`.
    NotAcked,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Call {
    kind: Kind,
    token: u8,
    /// The master it was sent to.
    to: u8,
    at: i64,
    out: Out,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Main {
    Idle,
    Call(Call),
    Waiting { until: i64 },
    Sleeping { until: i64 },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Hold {
    token: u8,
    valid_until: i64,
    renew_due: i64,
    /// The lease's validity rests on a reply of the deposed master,
    /// counted before the client heard the switch: the stated window.
    window: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Client {
    pc: u8,
    tokens: u8,
    deadline: Option<i64>,
    /// The switch was announced to it.
    heard: bool,
    main: Main,
    renewal: Option<Call>,
    hold: Option<Hold>,
    /// The acquisition's outage (`Tries`): when the attempt that started
    /// it was sent, and its last wait (ms; 0 before the first).
    outage: Option<i64>,
    backoff: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    masters: Vec<Keyspace>,
    /// The master the Sentinels name.
    named: u8,
    /// The old master is stopped.
    stopped: bool,
    /// Whether it was stopped, and resumed, already (each happens once).
    was_stopped: bool,
    /// Requests the stopped master's sockets hold whose callers gave up:
    /// run in order when it resumes (client, token, kind).
    pending: Vec<(u8, u8, Kind)>,
    now: i64,
    clients: Vec<Client>,
}

#[derive(Clone, Debug)]
pub enum Action {
    Start(usize),
    /// Client `i`'s call (`false`) or renewal (`true`) runs on its server.
    Run(usize, bool),
    /// It times out (its server stopped).
    TimeOut(usize, bool),
    Receive(usize, bool),
    Renew(usize),
    /// A waiter's next attempt, or the end of a sleep.
    Retry(usize),
    Stop,
    Promote,
    Resume,
    /// The resumed old master runs the first request its sockets held.
    Drain,
    /// The replica receives every write the master made so far (`lag`).
    Replicate,
    /// Client `i` hears `+switch-master`.
    Hear(usize),
    Tick,
}

impl SentinelModel {
    /// The master a client's next call goes to: the one it heard named
    /// (its pooled connections to the old one are retired at checkout).
    fn target(&self, s: &State, i: usize) -> u8 {
        if s.clients[i].heard {
            s.named
        } else {
            OLD
        }
    }

    fn call_of(&self, i: usize, kind: Kind, t: u8) -> (&'static str, Vec<Vec<u8>>, Vec<Vec<u8>>) {
        match kind {
            Kind::Grant => (
                "lock_acquire.lua",
                scripted().to_vec(),
                unqueued_acquire_args(i, t, self.lease_ms),
            ),
            Kind::Renew => {
                let (keys, args) = renewal_call(i, t, self.lease_ms);
                ("lock_extend.lua", keys, args)
            }
            Kind::Release | Kind::Undo => (
                "lock_release.lua",
                scripted().to_vec(),
                unqueued_release_args(i, t, false),
            ),
        }
    }

    fn eval(
        &self,
        server: &mut Server,
        s: &mut State,
        m: u8,
        (i, t, kind): (usize, u8, Kind),
        log: &mut Option<Vec<String>>,
    ) -> Reply {
        let (file, keys, args) = self.call_of(i, kind, t);
        let ran = server.eval(&mut s.masters[m as usize], file, &keys, &args);
        let head = if m == OLD {
            "old master: "
        } else {
            "new master: "
        };
        ran.log(log, head, file, &args);
        ran.reply
    }

    fn call(&self, s: &State, i: usize, kind: Kind, t: u8) -> Call {
        Call {
            kind,
            token: t,
            to: self.target(s, i),
            at: s.now,
            out: Out::Unsent,
        }
    }

    fn slot(s: &mut State, i: usize, renewal: bool) -> Option<&mut Call> {
        let c = &mut s.clients[i];
        if renewal {
            c.renewal.as_mut()
        } else {
            match &mut c.main {
                Main::Call(call) => Some(call),
                _ => None,
            }
        }
    }

    /// The acquisition's next attempt, or its end at the deadline.
    fn attempt(&self, s: &mut State, i: usize) {
        let c = &s.clients[i];
        if c.deadline.is_some_and(|d| s.now >= d) {
            self.done(s, i);
            return;
        }
        let call = self.call(s, i, Kind::Grant, c.tokens);
        s.clients[i].main = Main::Call(call);
    }

    fn done(&self, s: &mut State, i: usize) {
        let c = &mut s.clients[i];
        c.main = Main::Idle;
        c.deadline = None;
        c.pc += 1;
        (c.outage, c.backoff) = (None, 0);
    }

    /// A grant sent at `at` came back `QuorumNotReached` (`replica_ack`):
    /// ridden out by the library's rule (`Tries::judge`, `ride_out`) until
    /// its tolerance or the deadline, then the same token again.
    fn ride_out(&self, s: &mut State, i: usize, at: i64) -> Result<(), String> {
        let now = s.now;
        let c = &mut s.clients[i];
        let since = *c.outage.get_or_insert(at);
        let backoff = std::time::Duration::from_millis(c.backoff as u64);
        let past = c.deadline.is_some_and(|d| now >= d);
        let ride = p::ride_out(At(since), At(now), backoff, p::OUTAGE_TOLERANCE, past);
        let Some(next) = ride else {
            self.done(s, i);
            return Ok(());
        };
        c.backoff = crate::parties::ms(next);
        let until = (now + c.backoff).min(c.deadline.unwrap_or(i64::MAX));
        c.main = Main::Waiting { until };
        Ok(())
    }

    /// A reply is counted unless it came from a server other than the
    /// master the client heard named (`pool::Deposal::deposed`).
    fn counted(&self, c: &Client, call: &Call, named: u8) -> bool {
        !(self.discounts_deposed && c.heard && call.to != named)
    }

    fn receive(&self, s: &mut State, i: usize, renewal: bool) -> Result<(), String> {
        let call = if renewal {
            s.clients[i].renewal.take()
        } else {
            match std::mem::replace(&mut s.clients[i].main, Main::Idle) {
                Main::Call(call) => Some(call),
                other => {
                    s.clients[i].main = other;
                    None
                }
            }
        }
        .ok_or("receive without a call")?;
        let (reply, by_named) = match &call.out {
            Out::Ran { reply, by_named } if self.counted(&s.clients[i], &call, s.named) => {
                (Some(reply.clone()), *by_named)
            }
            Out::Ran { .. } | Out::Late => (None, false),
            Out::NotAcked => return self.ride_out(s, i, call.at),
            Out::Unsent => return Err("receive before the call ran".into()),
        };
        if let Some(Reply::Error(e)) = &reply {
            return Err(format!("c{i}'s {:?} got an error reply: {e}", call.kind));
        }
        let timed_out = call.out == Out::Late;
        // Counted from a server not named when it ran: only before the
        // client heard the switch (the window).
        let window = !by_named && !s.clients[i].heard;
        let now = s.now;
        match call.kind {
            Kind::Grant => match reply {
                Some(r) if int(&r).is_some_and(|f| f > 0) => {
                    s.clients[i].hold = Some(Hold {
                        token: call.token,
                        valid_until: call.at + self.lease_ms - 1,
                        renew_due: if self.watchdog {
                            call.at + self.lease_ms / 3
                        } else {
                            i64::MAX
                        },
                        window,
                    });
                    self.done(s, i);
                }
                Some(r) => {
                    let wait = busy(&r).ok_or_else(|| format!("c{i}: reply {}", r.show()))?;
                    match s.clients[i].deadline {
                        Some(d) if now >= d => self.done(s, i),
                        d => {
                            let until = (now + wait.max(1)).min(d.unwrap_or(i64::MAX));
                            s.clients[i].main = Main::Waiting { until };
                        }
                    }
                }
                None => {
                    // Late: its undo is queued behind it and the token is
                    // retired (`Acquisition::on_error`); not counted (a
                    // deposed master's reply): the same token again.
                    if timed_out {
                        s.clients[i].tokens += 1;
                    }
                    self.attempt(s, i);
                }
            },
            Kind::Renew => {
                let c = &mut s.clients[i];
                let Some(h) = c.hold.as_mut().filter(|h| h.token == call.token) else {
                    return Ok(());
                };
                let times = (call.at, now, h.valid_until);
                match renewed(
                    reply.as_ref().and_then(int),
                    times,
                    self.lease_ms,
                    self.lease_ms - 1,
                ) {
                    p::Renewed::Extended { until, next } => {
                        h.valid_until = h.valid_until.max(until);
                        h.renew_due = next;
                        h.window = window;
                    }
                    // Retried at its pace.
                    p::Renewed::Retry { at } => h.renew_due = at,
                    p::Renewed::Lost | p::Renewed::Expired => c.hold = None,
                }
            }
            Kind::Release | Kind::Undo => self.done(s, i),
        }
        Ok(())
    }

    fn next_event(&self, s: &State) -> Option<i64> {
        let mut t: Vec<i64> = s
            .masters
            .iter()
            .filter_map(|k| k.next_expiry())
            .map(|e| e - SERVER_OFFSET)
            .collect();
        for c in &s.clients {
            if let Some(h) = &c.hold {
                t.push(h.valid_until);
                if c.renewal.is_none() {
                    t.push(h.renew_due);
                }
            }
            if let Main::Waiting { until } | Main::Sleeping { until } = c.main {
                t.push(until);
            }
            let calls = [c.renewal.as_ref(), self.main_call(c)];
            for call in calls.into_iter().flatten() {
                if call.out == Out::Unsent && call.to == OLD && s.stopped {
                    t.push(call.at + self.response_ms);
                }
            }
        }
        t.into_iter().filter(|&x| x > s.now).min()
    }

    fn main_call<'c>(&self, c: &'c Client) -> Option<&'c Call> {
        match &c.main {
            Main::Call(call) => Some(call),
            _ => None,
        }
    }

    fn urgent(&self, s: &State) -> bool {
        let mut a = Vec::new();
        self.client_actions(s, &mut a);
        !a.is_empty() || (!s.stopped && !s.pending.is_empty())
    }

    /// The clients' own steps (not the failover's, nor hearing it).
    fn client_actions(&self, s: &State, out: &mut Vec<Action>) {
        for (i, c) in s.clients.iter().enumerate() {
            match &c.main {
                Main::Idle => {
                    if (c.pc as usize) < self.ops[i].len() {
                        out.push(Action::Start(i));
                    }
                }
                Main::Waiting { until } | Main::Sleeping { until } => {
                    if *until <= s.now {
                        out.push(Action::Retry(i));
                    }
                }
                Main::Call(_) => {}
            }
            for (renewal, call) in [(false, self.main_call(c)), (true, c.renewal.as_ref())] {
                let Some(call) = call else { continue };
                match call.out {
                    Out::Unsent if !(call.to == OLD && s.stopped) => {
                        out.push(Action::Run(i, renewal))
                    }
                    Out::Unsent if call.at + self.response_ms <= s.now => {
                        out.push(Action::TimeOut(i, renewal))
                    }
                    Out::Unsent => {}
                    Out::Ran { .. } | Out::Late | Out::NotAcked => {
                        out.push(Action::Receive(i, renewal))
                    }
                }
            }
            if c.renewal.is_none() && c.hold.as_ref().is_some_and(|h| h.renew_due <= s.now) {
                out.push(Action::Renew(i));
            }
        }
    }
}

impl Model for SentinelModel {
    type State = State;
    type Action = Action;

    fn init(&self) -> State {
        State {
            masters: vec![Keyspace::starting_at(SERVER_OFFSET); 2],
            named: OLD,
            stopped: false,
            was_stopped: false,
            pending: Vec::new(),
            now: 0,
            clients: (0..self.ops.len())
                .map(|_| Client {
                    pc: 0,
                    tokens: 1,
                    deadline: None,
                    heard: false,
                    main: Main::Idle,
                    renewal: None,
                    hold: None,
                    outage: None,
                    backoff: 0,
                })
                .collect(),
        }
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        self.client_actions(s, out);
        let promoted = s.named == NEW;
        if self.stops && !s.was_stopped && !promoted {
            out.push(Action::Stop);
        }
        if !promoted && (s.stopped || !self.stops) {
            out.push(Action::Promote);
        }
        if promoted && s.stopped {
            out.push(Action::Resume);
        }
        if !s.stopped && !s.pending.is_empty() {
            out.push(Action::Drain);
        }
        if self.lag && !promoted && !s.stopped && s.masters[NEW as usize] != s.masters[OLD as usize]
        {
            out.push(Action::Replicate);
        }
        if promoted {
            for (i, c) in s.clients.iter().enumerate() {
                if !c.heard {
                    out.push(Action::Hear(i));
                }
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
        match *a {
            Action::Start(i) => match self.ops[i][s.clients[i].pc as usize] {
                SOp::AcquireFor(d) => {
                    s.clients[i].deadline = Some(s.now + d);
                    s.clients[i].tokens += 1;
                    self.attempt(&mut s, i);
                }
                SOp::Sleep(d) => s.clients[i].main = Main::Sleeping { until: s.now + d },
                SOp::Release => match s.clients[i].hold.take() {
                    Some(h) => {
                        let call = self.call(&s, i, Kind::Release, h.token);
                        s.clients[i].main = Main::Call(call);
                    }
                    None => self.done(&mut s, i),
                },
            },
            Action::Run(i, renewal) => {
                let call = Self::slot(&mut s, i, renewal).ok_or("run without a call")?;
                let (to, t, kind) = (call.to, call.token, call.kind);
                let reply = self.eval(server, &mut s, to, (i, t, kind), log);
                let by_named = to == s.named;
                let mut out = Out::Ran { reply, by_named };
                if self.replica_ack && kind == Kind::Grant && to == OLD {
                    if by_named {
                        // `WAIT` acknowledged: the replica has it all.
                        let copy = s.masters[OLD as usize].clone();
                        s.masters[NEW as usize] = copy;
                    } else if matches!(&out, Out::Ran { reply, .. } if int(reply).is_some_and(|f| f > 0))
                    {
                        // Its replica was promoted: nobody acknowledges,
                        // and the grant is undone behind it.
                        self.eval(server, &mut s, to, (i, t, Kind::Undo), log);
                        out = Out::NotAcked;
                    }
                }
                if let Some(call) = Self::slot(&mut s, i, renewal) {
                    call.out = out;
                }
            }
            Action::TimeOut(i, renewal) => {
                let call = Self::slot(&mut s, i, renewal).ok_or("time-out without a call")?;
                call.out = Out::Late;
                let (t, kind) = (call.token, call.kind);
                s.pending.push((i as u8, t, kind));
                if kind == Kind::Grant {
                    s.pending.push((i as u8, t, Kind::Undo));
                }
            }
            Action::Receive(i, renewal) => self.receive(&mut s, i, renewal)?,
            Action::Renew(i) => {
                let t = s.clients[i]
                    .hold
                    .as_ref()
                    .ok_or("renew without a hold")?
                    .token;
                s.clients[i].renewal = Some(self.call(&s, i, Kind::Renew, t));
            }
            Action::Retry(i) => match s.clients[i].main {
                Main::Sleeping { .. } => self.done(&mut s, i),
                _ => self.attempt(&mut s, i),
            },
            Action::Stop => {
                s.stopped = true;
                s.was_stopped = true;
            }
            Action::Promote => {
                // Caught up, the replica has every write the master made;
                // lagging, what reached it.
                if !self.lag {
                    let copy = s.masters[OLD as usize].clone();
                    s.masters[NEW as usize] = copy;
                }
                s.masters[NEW as usize].advance_to(s.now + SERVER_OFFSET);
                s.named = NEW;
            }
            Action::Replicate => {
                let copy = s.masters[OLD as usize].clone();
                s.masters[NEW as usize] = copy;
            }
            Action::Resume => s.stopped = false,
            Action::Drain => {
                let (i, t, kind) = s.pending.remove(0);
                self.eval(server, &mut s, OLD, (i as usize, t, kind), log);
            }
            Action::Hear(i) => s.clients[i].heard = true,
            Action::Tick => {
                let t = self.next_event(&s).ok_or("no event to wait for")?;
                s.now = t;
                for k in &mut s.masters {
                    k.advance_to(t + SERVER_OFFSET);
                }
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
        let holders: Vec<(usize, &Hold)> = s
            .clients
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.hold.as_ref().map(|h| (i, h)))
            .filter(|(_, h)| h.valid_until > s.now && !h.window)
            .collect();
        if holders.len() > 1 {
            return Err(format!(
                "exclusion: c{} and c{} both hold the lock with valid leases, neither in the window before hearing the switch",
                holders[0].0, holders[1].0
            ));
        }
        let named = &s.masters[s.named as usize];
        let value = match named.keys.get(&key("")).map(|e| &e.value) {
            Some(crate::keyspace::Value::Str(v)) => v.clone(),
            _ => Vec::new(),
        };
        for (i, h) in &holders {
            let tok = token(*i, h.token);
            if !(value.starts_with(&tok) && value.get(tok.len()) == Some(&b'#')) {
                return Err(format!(
                    "c{i} believes it holds (valid {} ms more) but the master named has {:?}",
                    h.valid_until - s.now,
                    String::from_utf8_lossy(&value)
                ));
            }
        }
        let quiet = s.clients.iter().enumerate().all(|(i, c)| {
            c.pc as usize >= self.ops[i].len() && c.main == Main::Idle && c.hold.is_none()
        });
        if quiet {
            crate::probes::lapsed(named, &[FLOOR])?;
        }
        Ok(())
    }

    fn show(&self, s: &State) -> Vec<String> {
        let mut out = vec![format!(
            "t = {} ms, named master {}, old master {}, pending on it {:?}",
            s.now,
            if s.named == OLD { "old" } else { "new" },
            if s.stopped { "stopped" } else { "running" },
            s.pending
        )];
        for (i, c) in s.clients.iter().enumerate() {
            out.push(format!(
                "c{i}: op {}/{}, token {}, deadline {:?}, heard {}, {:?}, renewal {:?}, hold {:?}",
                c.pc,
                self.ops[i].len(),
                c.tokens,
                c.deadline,
                c.heard,
                c.main,
                c.renewal,
                c.hold
            ));
        }
        for (m, k) in s.masters.iter().enumerate() {
            out.push(format!("  {} master:", if m == 0 { "old" } else { "new" }));
            out.extend(k.show().into_iter().map(|l| format!("    {l}")));
        }
        out
    }
}
