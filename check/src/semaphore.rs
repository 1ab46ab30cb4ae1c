//! The semaphore (plain and fair) as separate clients use it, with waiters
//! that wait for release messages: a wait shorter than a second never
//! blocks on the server (`wakeup::worth_blocking`), and every wait ends
//! that way. Each client runs its operations (acquire with a deadline,
//! try, release) as the waiting loop decides them (`Wakeup::acquire`: an
//! attempt, a second one once subscribed, then one at each message or
//! after the busy reply's hint, at most the fallback poll, until the
//! deadline, then the withdrawal of its entry), with its renewal thread's
//! renewals and its look after a release that offered permits. Messages
//! are delivered to each waiting client, or lost (a fault).
//!
//! Not modelled yet: waiters that block on the open list (waits of a
//! second and more), requests for several permits, clock steps.

use std::time::Duration;

use redlease::__protocol as p;

use crate::keyspace::{Keyspace, Reply};
use crate::parties::{b, busy, int, ms, Faults, Life, Look, Outcome};
use crate::search::Model;
use crate::server::Server;

/// What one semaphore client does, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SemOp {
    /// `acquire_timeout(ms)` of one permit (under a second: it waits for
    /// messages).
    AcquireFor(i64),
    /// `try_acquire()`.
    Try,
    /// The permit's `release()` (nothing when the op before got none).
    Release,
}

pub struct SemModel {
    pub ops: Vec<Vec<SemOp>>,
    pub permits: u32,
    pub fair: bool,
    pub faults: Faults,
    pub lease_ms: i64,
    pub horizon_ms: i64,
    pub response_ms: i64,
    /// The client's fallback poll (`ClientBuilder::fallback_poll`).
    pub fallback_ms: i64,
    pub exits: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Kind {
    /// lua/sem_acquire.lua for a waiter that waits for messages (or a try).
    Grant { queue: bool },
    /// lua/sem_release.lua.
    Release,
    /// lua/sem_release.lua with `'leave'`: a waiter gives up.
    Leave,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Main {
    Idle,
    Call {
        kind: Kind,
        token: u8,
        at: i64,
        out: Outcome,
    },
    /// Waiting for a message, or until `until` (the busy reply's hint, at
    /// most the fallback poll, never past the deadline).
    Waiting {
        token: u8,
        until: i64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Hold {
    token: u8,
    valid_until: i64,
    renew_due: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Client {
    pc: u8,
    life: Life,
    tokens: u8,
    deadline: i64,
    /// Subscribed for this wait (the attempt after subscribing is made at
    /// once).
    subscribed: bool,
    /// A message reached this client while it waited.
    inbox: bool,
    main: Main,
    hold: Option<Hold>,
    looks: Vec<Look>,
    /// Tokens retired after a lost reply, withdrawn when the wait ends.
    retired: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    keys: Keyspace,
    now: i64,
    clients: Vec<Client>,
    faults: u8,
}

#[derive(Clone, Debug)]
pub enum Action {
    Start(usize),
    Run(usize),
    LoseRequest(usize),
    LoseReply(usize),
    Receive(usize),
    Message(usize),
    LoseMessage(usize),
    Retry(usize),
    Renew(usize),
    Look(usize, usize),
    Crash(usize),
    Exit(usize),
    Tick,
}

const NAME: &str = "{s}";

fn key(suffix: &str) -> Vec<u8> {
    format!("{NAME}{suffix}").into_bytes()
}

/// `Semaphore::new`'s keys: permits, count, queue, deadlines.
fn scripted() -> Vec<Vec<u8>> {
    vec![
        key(":sem"),
        key(":sem:n"),
        key(":sem:queue"),
        key(":sem:queue:t"),
    ]
}

fn member(client: usize, t: u8) -> Vec<u8> {
    format!("1:rl:c{client}:t{t}").into_bytes()
}

const CHANNEL: &[u8] = b"redlease:wake";

impl SemModel {
    /// Where a client's offers go (`Semaphore::offer`).
    fn offer(&self, client: usize) -> (Vec<u8>, Vec<u8>) {
        (
            key(":sem:grant:"),
            format!("c{client}:{NAME}:sem").into_bytes(),
        )
    }

    /// The registration of a waiter that waits for messages
    /// (`Wakeup::entry_life`).
    fn entry_ms(&self) -> i64 {
        self.fallback_ms * 3 + 1000
    }

    /// lua/sem_acquire.lua's arguments, by message, made by the library's
    /// `AcquireArgs`.
    fn acquire_args(&self, client: usize, t: u8, queue: bool) -> Vec<Vec<u8>> {
        let (m, lease, (prefix, message)) =
            (member(client, t), b(self.lease_ms), self.offer(client));
        p::semaphore::AcquireArgs {
            member: &m,
            lease_ms: &lease,
            k: 1,
            entry: Duration::from_millis(if queue { self.entry_ms() as u64 } else { 0 }),
            blocks: false,
            offer: &self.offer_of(&prefix, message),
        }
        .parts()
    }

    /// lua/sem_release.lua's arguments, made by the library's `ReleaseArgs`.
    fn release_args(&self, client: usize, t: u8, leave: bool) -> Vec<Vec<u8>> {
        let (m, (prefix, message)) = (member(client, t), self.offer(client));
        p::semaphore::ReleaseArgs {
            member: &m,
            offer: &self.offer_of(&prefix, message),
            leave,
        }
        .parts()
    }

    /// lua/sem_watch.lua's arguments, a look at the name alone, made by the
    /// library's `WatchArgs`.
    fn watch_args(&self, client: usize) -> Vec<Vec<u8>> {
        let (prefix, message) = self.offer(client);
        p::semaphore::WatchArgs {
            waiter: b"",
            entry: Duration::from_millis(self.entry_ms() as u64),
            offer: &self.offer_of(&prefix, message),
        }
        .parts()
    }

    fn offer_of<'a>(&self, prefix: &'a [u8], message: Vec<u8>) -> p::semaphore::Offer<'a> {
        p::semaphore::Offer {
            grant_prefix: prefix,
            claim: p::GRANT_CLAIM,
            channel: CHANNEL.to_vec(),
            message,
            permits: self.permits,
            fair: self.fair,
        }
    }

    fn eval(
        &self,
        server: &mut Server,
        s: &mut State,
        file: &'static str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
        log: &mut Option<Vec<String>>,
    ) -> Reply {
        let ran = server.eval(&mut s.keys, file, keys, args);
        if let Some(l) = log {
            let shown: Vec<String> = args
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            l.push(format!(
                "EVALSHA {file} ARGV {shown:?} -> {}",
                ran.reply.show()
            ));
            l.extend(ran.calls.iter().map(|c| format!("    {c}")));
        }
        // Every waiting client subscribed to the channel receives it. A
        // hand-over's naming of its watchers wakes nobody (`Shared::dispatch`),
        // and these waiters, waiting for messages, watch nothing.
        if ran
            .published
            .iter()
            .any(|m| p::hand_over(&m.message).is_none())
        {
            for c in &mut s.clients {
                if c.life == Life::Running && matches!(c.main, Main::Waiting { .. }) {
                    c.inbox = true;
                }
            }
        }
        ran.reply
    }

    fn call(&self, s: &mut State, i: usize, kind: Kind, t: u8) {
        s.clients[i].main = Main::Call {
            kind,
            token: t,
            at: s.now,
            out: Outcome::Unsent,
        };
    }

    /// The wait's end: its retired tokens' entries withdrawn (`clean_up`).
    fn finish(&self, server: &mut Server, s: &mut State, i: usize, log: &mut Option<Vec<String>>) {
        for t in std::mem::take(&mut s.clients[i].retired) {
            let args = self.release_args(i, t, true);
            self.eval(server, s, "sem_release.lua", &scripted(), &args, log);
        }
        let c = &mut s.clients[i];
        c.subscribed = false;
        c.inbox = false;
    }

    fn receive(
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
        } = s.clients[i].main.clone()
        else {
            return Ok(());
        };
        let reply = match out {
            Outcome::Ran(r) => Some(r),
            _ => None,
        };
        if let Some(Reply::Error(e)) = &reply {
            return Err(format!("c{i}'s {kind:?} got an error reply: {e}"));
        }
        let now = s.now;
        match kind {
            Kind::Grant { queue } => match reply {
                Some(Reply::Int(0)) => {
                    self.finish(server, s, i, log);
                    let c = &mut s.clients[i];
                    c.hold = Some(Hold {
                        token: t,
                        valid_until: at + self.lease_ms - 1,
                        renew_due: at + self.lease_ms / 3,
                    });
                    c.main = Main::Idle;
                    c.pc += 1;
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
                    let c = &mut s.clients[i];
                    if now >= c.deadline {
                        self.call(s, i, Kind::Leave, t);
                    } else if !c.subscribed {
                        // Subscribed now: look again, or a message sent
                        // before the subscription would be missed.
                        c.subscribed = true;
                        self.call(s, i, Kind::Grant { queue: true }, t);
                    } else {
                        let hint = if wait >= 0 {
                            wait.max(1)
                        } else {
                            self.fallback_ms
                        };
                        let until = (now + hint.min(self.fallback_ms)).min(c.deadline);
                        c.main = Main::Waiting { token: t, until };
                    }
                }
                None if !queue => {
                    // Maybe ran: released, member-checked (`clean_up`).
                    let args = self.release_args(i, t, false);
                    self.eval(server, s, "sem_release.lua", &scripted(), &args, log);
                    let c = &mut s.clients[i];
                    c.main = Main::Idle;
                    c.pc += 1;
                }
                None => {
                    // Retired with its undo behind it; a new token tries
                    // again (`Acquisition::on_error`), or the wait ends.
                    let c = &mut s.clients[i];
                    c.retired.push(t);
                    c.tokens += 1;
                    let fresh = c.tokens;
                    if now >= c.deadline {
                        self.call(s, i, Kind::Leave, fresh);
                    } else {
                        self.call(s, i, Kind::Grant { queue: true }, fresh);
                    }
                }
            },
            Kind::Release => {
                if reply.as_ref().and_then(int) == Some(2) {
                    let due = (at + ms(p::NAME_LOOK_AFTER) + ms(p::LOOK_MARGIN))
                        .min(at + ms(p::LOOK_MAX));
                    s.clients[i].looks.push(Look {
                        due,
                        waiter: None,
                        left: p::NAME_LOOKS,
                        watch: false,
                    });
                }
                let c = &mut s.clients[i];
                c.main = Main::Idle;
                c.pc += 1;
            }
            Kind::Leave => {
                self.finish(server, s, i, log);
                let c = &mut s.clients[i];
                c.main = Main::Idle;
                c.pc += 1;
            }
        }
        Ok(())
    }

    fn next_event(&self, s: &State) -> Option<i64> {
        let mut t: Vec<i64> = Vec::new();
        if let Some(e) = s.keys.next_expiry() {
            t.push(e - SERVER_OFFSET);
        }
        for c in &s.clients {
            if c.life != Life::Running {
                continue;
            }
            if let Some(h) = &c.hold {
                t.push(h.renew_due);
                t.push(h.valid_until);
            }
            t.extend(c.looks.iter().map(|l| l.due));
            match &c.main {
                Main::Waiting { until, .. } => t.push(*until),
                Main::Call {
                    at,
                    out: Outcome::Failed,
                    ..
                } => t.push(at + self.response_ms),
                _ => {}
            }
        }
        t.into_iter().filter(|&x| x > s.now).min()
    }

    fn urgent(&self, s: &State) -> bool {
        s.clients.iter().any(|c| {
            c.life == Life::Running
                && (c.hold.as_ref().is_some_and(|h| h.renew_due <= s.now)
                    || c.looks.iter().any(|l| l.due <= s.now)
                    || match &c.main {
                        Main::Call {
                            out: Outcome::Unsent | Outcome::Ran(_),
                            ..
                        } => true,
                        Main::Call {
                            at,
                            out: Outcome::Failed,
                            ..
                        } => at + self.response_ms <= s.now,
                        Main::Waiting { until, .. } => *until <= s.now || c.inbox,
                        Main::Idle => false,
                    })
        })
    }
}

/// The server's clock, ahead of the clients' by this (milliseconds).
const SERVER_OFFSET: i64 = 1_000_000_000;

impl Model for SemModel {
    type State = State;
    type Action = Action;

    fn init(&self) -> State {
        State {
            keys: Keyspace {
                keys: Default::default(),
                now_us: SERVER_OFFSET * 1000,
            },
            now: 0,
            clients: (0..self.ops.len())
                .map(|_| Client {
                    pc: 0,
                    life: Life::Running,
                    tokens: 0,
                    deadline: 0,
                    subscribed: false,
                    inbox: false,
                    main: Main::Idle,
                    hold: None,
                    looks: Vec::new(),
                    retired: Vec::new(),
                })
                .collect(),
            faults: 0,
        }
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let fault = s.faults < self.faults.budget;
        for (i, c) in s.clients.iter().enumerate() {
            if c.life != Life::Running {
                continue;
            }
            if fault && self.faults.crash {
                out.push(Action::Crash(i));
            }
            match &c.main {
                Main::Idle => {
                    if (c.pc as usize) < self.ops[i].len() {
                        out.push(Action::Start(i));
                    } else if c.hold.is_none() && self.exits {
                        out.push(Action::Exit(i));
                    }
                }
                Main::Call {
                    out: Outcome::Unsent,
                    ..
                } => {
                    out.push(Action::Run(i));
                    if fault && self.faults.lost_request {
                        out.push(Action::LoseRequest(i));
                    }
                    if fault && self.faults.lost_reply {
                        out.push(Action::LoseReply(i));
                    }
                }
                Main::Call {
                    out: Outcome::Ran(_),
                    ..
                } => out.push(Action::Receive(i)),
                Main::Call {
                    at,
                    out: Outcome::Failed,
                    ..
                } => {
                    if at + self.response_ms <= s.now {
                        out.push(Action::Receive(i));
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
            if c.hold.as_ref().is_some_and(|h| h.renew_due <= s.now) {
                out.push(Action::Renew(i));
            }
            for (k, l) in c.looks.iter().enumerate() {
                if l.due <= s.now {
                    out.push(Action::Look(i, k));
                }
            }
        }
        if !self.urgent(s) {
            if let Some(t) = self.next_event(s) {
                if t <= self.horizon_ms {
                    out.push(Action::Tick);
                }
            }
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
        s.keys.now_us = s.keys.now_us.max((s.now + SERVER_OFFSET) * 1000);
        s.keys.expire();
        match *a {
            Action::Start(i) => {
                let op = self.ops[i][s.clients[i].pc as usize];
                let now = s.now;
                let c = &mut s.clients[i];
                match op {
                    SemOp::AcquireFor(d) => {
                        c.tokens += 1;
                        c.deadline = now + d;
                        let t = c.tokens;
                        self.call(&mut s, i, Kind::Grant { queue: true }, t);
                    }
                    SemOp::Try => {
                        c.tokens += 1;
                        let t = c.tokens;
                        self.call(&mut s, i, Kind::Grant { queue: false }, t);
                    }
                    SemOp::Release => match c.hold.take() {
                        Some(h) => self.call(&mut s, i, Kind::Release, h.token),
                        None => c.pc += 1,
                    },
                }
            }
            Action::Run(i) | Action::LoseReply(i) => {
                let Main::Call { kind, token: t, .. } = s.clients[i].main.clone() else {
                    return Err("run without a call".into());
                };
                let (file, args) = match kind {
                    Kind::Grant { queue } => ("sem_acquire.lua", self.acquire_args(i, t, queue)),
                    Kind::Release => ("sem_release.lua", self.release_args(i, t, false)),
                    Kind::Leave => ("sem_release.lua", self.release_args(i, t, true)),
                };
                let reply = self.eval(server, &mut s, file, &scripted(), &args, log);
                let lost = matches!(a, Action::LoseReply(_));
                if lost {
                    s.faults += 1;
                    if let Kind::Grant { queue: true } = kind {
                        // The late grant's undo, written behind it.
                        let undo = self.release_args(i, t, true);
                        self.eval(server, &mut s, "sem_release.lua", &scripted(), &undo, log);
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
            Action::LoseRequest(i) => {
                s.faults += 1;
                if let Main::Call { out, .. } = &mut s.clients[i].main {
                    *out = Outcome::Failed;
                }
            }
            Action::Receive(i) => self.receive(server, &mut s, i, log)?,
            Action::Message(i) | Action::Retry(i) | Action::LoseMessage(i) => {
                if matches!(a, Action::LoseMessage(_)) {
                    s.faults += 1;
                    s.clients[i].inbox = false;
                } else {
                    let Main::Waiting { token: t, .. } = s.clients[i].main else {
                        return Err("no wait to end".into());
                    };
                    s.clients[i].inbox = false;
                    if s.now >= s.clients[i].deadline {
                        self.call(&mut s, i, Kind::Leave, t);
                    } else {
                        self.call(&mut s, i, Kind::Grant { queue: true }, t);
                    }
                }
            }
            Action::Renew(i) => {
                let Some(h) = s.clients[i].hold.clone() else {
                    return Err("renew without a hold".into());
                };
                let args = vec![member(i, h.token), b(self.lease_ms)];
                let keys = vec![key(":sem"), key(":sem:n")];
                let reply = self.eval(server, &mut s, "zset_extend.lua", &keys, &args, log);
                let now = s.now;
                if let Some(h) = &mut s.clients[i].hold {
                    if int(&reply) == Some(1) {
                        h.valid_until = h.valid_until.max(now + self.lease_ms - 1);
                        h.renew_due = now + self.lease_ms / 3;
                    } else {
                        s.clients[i].hold = None;
                    }
                }
            }
            Action::Look(i, k) => {
                let l = s.clients[i].looks[k].clone();
                let args = self.watch_args(i);
                let reply = self.eval(server, &mut s, "sem_watch.lua", &scripted(), &args, log);
                let now = s.now;
                let c = &mut s.clients[i];
                c.looks.remove(k);
                if let Some((after, left)) = p::next_look(int(&reply).unwrap_or(0), l.left) {
                    c.looks.push(Look {
                        due: now + ms(after),
                        waiter: None,
                        left,
                        watch: false,
                    });
                }
            }
            Action::Crash(i) => {
                s.faults += 1;
                let c = &mut s.clients[i];
                c.life = Life::Crashed;
                c.hold = None;
                c.looks.clear();
                c.main = Main::Idle;
            }
            Action::Exit(i) => {
                let c = &mut s.clients[i];
                c.life = Life::Exited;
                c.looks.clear();
            }
            Action::Tick => {
                let t = self.next_event(&s).ok_or("no event to wait for")?;
                s.now = t;
                s.keys.now_us = s.keys.now_us.max((s.now + SERVER_OFFSET) * 1000);
                s.keys.expire();
                let now = s.now;
                for c in &mut s.clients {
                    if c.hold.as_ref().is_some_and(|h| h.valid_until <= now) {
                        c.hold = None;
                    }
                }
            }
        }
        Ok(s)
    }

    fn check(&self, server: &mut Server, s: &State) -> Result<(), String> {
        let holders: Vec<usize> = s
            .clients
            .iter()
            .enumerate()
            .filter(|(_, c)| c.life == Life::Running)
            .filter(|(_, c)| c.hold.as_ref().is_some_and(|h| h.valid_until > s.now))
            .map(|(i, _)| i)
            .collect();
        if holders.len() > self.permits as usize {
            return Err(format!(
                "permits: {holders:?} hold with valid leases, {} permits",
                self.permits
            ));
        }
        let server_now = s.keys.now_ms();
        for &i in &holders {
            let h = s.clients[i].hold.as_ref().unwrap();
            let m = member(i, h.token);
            let held = match s.keys.keys.get(&key(":sem")).map(|e| &e.value) {
                Some(crate::keyspace::Value::ZSet(z)) => z
                    .iter()
                    .any(|(score, x)| *x == m && score.0 as i64 > server_now),
                _ => false,
            };
            if !held {
                return Err(format!(
                    "c{i} believes it holds a permit the server does not list"
                ));
            }
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
            // Depends on the keyspace alone (its clock included).
            let memo = crate::search::fingerprint(&(2u8, &s.keys));
            return server.memo(memo, |server| {
                // `try_acquire` every 100 ms from the end of the last lease (a
                // dead holder's) is granted within the claim + 1 s.
                let mut probe = s.keys.clone();
                let last = match probe.keys.get(&key(":sem")).map(|e| &e.value) {
                    Some(crate::keyspace::Value::ZSet(z)) => {
                        z.iter().map(|(sc, _)| sc.0 as i64).max().unwrap_or(0)
                    }
                    _ => 0,
                };
                let from = last.max(probe.now_ms());
                let args = self.acquire_args(9, 1, false);
                let mut reply = Reply::Nil;
                let mut granted = false;
                for k in 0..=((ms(p::GRANT_CLAIM) + 1000) / 100) {
                    probe.now_us = probe.now_us.max((from + 100 * k) * 1000);
                    reply = server
                        .eval(&mut probe, "sem_acquire.lua", &scripted(), &args)
                        .reply;
                    if reply == Reply::Int(0) {
                        granted = true;
                        break;
                    }
                }
                if !granted {
                    return Err(format!(
                        "liveness: nobody holds or waits, yet try_acquire every 100 ms for the claim \
                         + 1 s after the last permit's lease ended got {} at the end",
                        reply.show()
                    ));
                }
                let mut later = s.keys.clone();
                later.now_us += 3_600_000_000;
                later.expire();
                if !later.keys.is_empty() {
                    let left: Vec<String> = later
                        .keys
                        .keys()
                        .map(|k| String::from_utf8_lossy(k).into_owned())
                        .collect();
                    return Err(format!("keys of an unused semaphore never lapse: {left:?}"));
                }
                Ok(())
            });
        }
        Ok(())
    }

    fn show(&self, s: &State) -> Vec<String> {
        let mut out = vec![format!("t = {} ms, faults {}", s.now, s.faults)];
        for (i, c) in s.clients.iter().enumerate() {
            out.push(format!(
                "c{i}: {:?}, op {}/{}, deadline {}, {:?}, inbox {}, hold {:?}, looks {:?}",
                c.life,
                c.pc,
                self.ops[i].len(),
                c.deadline,
                c.main,
                c.inbox,
                c.hold,
                c.looks
            ));
        }
        out.extend(s.keys.show().into_iter().map(|l| format!("  {l}")));
        out
    }
}
