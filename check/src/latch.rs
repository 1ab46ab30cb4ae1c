//! The count-down latch as separate clients use it: a client sets the
//! count, clients count down (each call sent once, never repeated: a lost
//! reply leaves it undecided), and waiters wait for the opening, by
//! message (a wait under a second never blocks on the server), as
//! `Latch::wait_until` decides: a look that reads the round and registers
//! the waiter, a second once subscribed, then the opening's message as the
//! answer (no re-read), and at the deadline one last read, then the
//! withdrawal of its registration.
//!
//! Properties: the count-down that reaches zero opens the latch; a waiter
//! says "opened" only if its round opened (or the latch had no count when
//! it looked), and its last read never shows a round that opened; no idle
//! time without a cause (while no party died, exited or lost a message,
//! time never passes with a waiter whose round has opened still waiting);
//! once the latch is open and nobody waits, every key lapses.
//!
//! A client may freeze (a request it sent still runs; its reply and the
//! opening's message are read when it resumes), and the server's clock
//! may step back a second.
//!
//! Not modelled yet: waiters that block on the opening list (waits of a
//! second and more), several threads of one client.

use redlease::__protocol as p;

use crate::keyspace::{Keyspace, Reply};
use crate::parties::{
    b, heard, release_message, time_may_pass, token, CallStep, Faults, Life, Outcome,
};
use crate::probes::SERVER_OFFSET;
use crate::search::Model;
use crate::server::Server;

/// What one latch client does, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LatchOp {
    /// `try_set_count(n)`.
    Set(u32),
    /// `count_down()`.
    CountDown,
    /// `wait_timeout(ms)` (under a second: it waits for messages).
    WaitFor(i64),
}

pub struct LatchModel {
    pub ops: Vec<Vec<LatchOp>>,
    pub faults: Faults,
    pub horizon_ms: i64,
    pub response_ms: i64,
    /// The client's fallback poll (a latch waiter is patient: 30 s at
    /// least, `Wakeup::fallback_for`).
    pub fallback_ms: i64,
    pub exits: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Kind {
    /// lua/latch_set.lua with a fresh round.
    Set { count: u32, round: u8 },
    /// lua/latch_count_down.lua.
    CountDown,
    /// lua/latch_look.lua, registering the waiter: the first look (no
    /// round yet) or a look in the waiting loop.
    Look { round: Option<Vec<u8>> },
    /// The last read at the deadline (`GET`).
    Last { round: Vec<u8> },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Main {
    Idle,
    Call {
        kind: Kind,
        at: i64,
        out: Outcome,
    },
    /// Waiting for the opening's message, or until `until`.
    Waiting {
        round: Vec<u8>,
        until: i64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Client {
    pc: u8,
    life: Life,
    tokens: u8,
    deadline: i64,
    main: Main,
    /// Subscribed for this wait.
    subscribed: bool,
    /// The opening of the round it waits for was announced to it.
    inbox: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    keys: Keyspace,
    now: i64,
    /// The server's clock minus `SERVER_OFFSET` and the clients' (a clock
    /// step).
    offset: i64,
    clients: Vec<Client>,
    faults: u8,
    exits: u8,
    /// The rounds whose last count-down ran.
    opened: Vec<Vec<u8>>,
    /// The count set, and the count-downs run since.
    count: Option<(u32, u32)>,
    /// A property broken inside a step.
    broken: Option<String>,
}

#[derive(Clone, Debug)]
pub enum Action {
    Start(usize),
    /// A step of client `i`'s call in flight.
    Call(usize, CallStep),
    Message(usize),
    LoseMessage(usize),
    Timeout(usize),
    Crash(usize),
    /// Client `i` is stopped (a request it sent still runs; its reply and
    /// messages are read when it resumes), or resumes.
    Freeze(usize),
    Resume(usize),
    /// The server's clock steps back a second.
    StepBack,
    Exit(usize),
    Tick,
}

const KEY: &[u8] = b"{l}:latch";
const CHANNEL: &[u8] = crate::lock::CHANNEL;
/// `protocol::timing::OPENING_LIFE`, the library's own.
const OPENING_LIFE: i64 = redlease::__protocol::OPENING_LIFE.as_millis() as i64;

fn waiters_key() -> Vec<u8> {
    [KEY, b":w"].concat()
}

fn blocked_key() -> Vec<u8> {
    [KEY, b":b"].concat()
}

/// The round a value `<count>:<round>` names.
fn round_of(v: &Reply) -> Option<Vec<u8>> {
    let Reply::Bulk(v) = v else { return None };
    let colon = v.iter().position(|&c| c == b':')?;
    Some(v[colon + 1..].to_vec())
}

impl LatchModel {
    /// `Wakeup::entry_life(true)`.
    fn entry_ms(&self) -> i64 {
        self.fallback_ms.max(30_000) * 3 + 1000
    }

    fn script(&self, i: usize, kind: &Kind, t: u8) -> (&'static str, Vec<Vec<u8>>, Vec<Vec<u8>>) {
        match kind {
            Kind::Set { count, round } => (
                "latch_set.lua",
                vec![KEY.to_vec()],
                vec![b(count), token(i, *round)],
            ),
            Kind::CountDown => (
                "latch_count_down.lua",
                vec![KEY.to_vec(), waiters_key(), blocked_key()],
                vec![CHANNEL.to_vec(), release_message(i, KEY), b(OPENING_LIFE)],
            ),
            Kind::Look { .. } => (
                "latch_look.lua",
                vec![KEY.to_vec(), waiters_key()],
                vec![token(i, t), b(self.entry_ms())],
            ),
            Kind::Last { .. } => ("", Vec::new(), Vec::new()),
        }
    }

    fn run(
        &self,
        server: &mut Server,
        s: &mut State,
        i: usize,
        kind: &Kind,
        log: &mut Option<Vec<String>>,
    ) -> Reply {
        let t = s.clients[i].tokens;
        if let Kind::Last { .. } = kind {
            let ran = server.command(&mut s.keys, &[b"GET".to_vec(), KEY.to_vec()]);
            if let Some(l) = log {
                l.push(format!(
                    "GET {} -> {}",
                    String::from_utf8_lossy(KEY),
                    ran.reply.show()
                ));
            }
            // The last read decides "timed out": it must not see a round
            // that opened.
            if let (Kind::Last { round }, Some(seen)) = (kind, round_of(&ran.reply)) {
                if seen == *round && s.opened.contains(round) && s.broken.is_none() {
                    s.broken = Some(format!(
                        "c{i} times out: its last read still shows round {:?}, which opened",
                        String::from_utf8_lossy(round)
                    ));
                }
            }
            return ran.reply;
        }
        let (file, keys, args) = self.script(i, kind, t);
        let ran = server.eval(&mut s.keys, file, &keys, &args);
        ran.log(log, "", file, &args);
        match (kind, &ran.reply) {
            (Kind::Set { count, .. }, Reply::Int(1)) => s.count = Some((*count, 0)),
            (Kind::CountDown, r) => {
                if let Some((n, downs)) = &mut s.count {
                    *downs += 1;
                    if *downs >= *n {
                        if !matches!(r, Reply::Bulk(_)) && s.broken.is_none() {
                            s.broken = Some(format!(
                                "count-down {downs} of a count of {n} did not open the latch: {}",
                                r.show()
                            ));
                        }
                        s.count = None;
                    }
                }
                if let Reply::Bulk(round) = r {
                    s.opened.push(round.clone());
                }
            }
            _ => {}
        }
        // The opening's message names `<latch>#<round>`: it reaches every
        // subscribed waiter of that round (`Shared::dispatch`).
        for m in &ran.published {
            for (i, c) in s.clients.iter_mut().enumerate() {
                let p::Heard::Released(named) = heard(i, &m.message) else {
                    continue;
                };
                if let Main::Waiting { round, .. }
                | Main::Call {
                    kind: Kind::Look { round: Some(round) },
                    ..
                } = &c.main
                {
                    let mine = [KEY, b"#", round.as_slice()].concat();
                    // A frozen client's subscriber reads it when it resumes.
                    let listening = matches!(c.life, Life::Running | Life::Frozen);
                    if listening && c.subscribed && named == mine.as_slice() {
                        c.inbox = true;
                    }
                }
            }
        }
        ran.reply
    }

    fn call(&self, s: &mut State, i: usize, kind: Kind) {
        s.clients[i].main = Main::Call {
            kind,
            at: s.now,
            out: Outcome::Unsent,
        };
    }

    /// The wait ends: `opened` or timed out.
    fn end(&self, s: &mut State, i: usize, round: Option<&[u8]>, opened: bool) {
        if let Some(r) = round {
            let known = s.opened.iter().any(|o| o == r);
            if opened && !known && s.broken.is_none() {
                s.broken = Some(format!(
                    "c{i} says the latch opened, but its round {:?} never did",
                    String::from_utf8_lossy(r)
                ));
            }
        }
        let c = &mut s.clients[i];
        c.main = Main::Idle;
        c.subscribed = false;
        c.inbox = false;
        c.pc += 1;
    }

    fn receive(&self, server: &mut Server, s: &mut State, i: usize, log: &mut Option<Vec<String>>) {
        let Main::Call { kind, at: _, out } = s.clients[i].main.clone() else {
            return;
        };
        let now = s.now;
        let reply = out.reply();
        match (kind, reply) {
            (Kind::Set { .. } | Kind::CountDown, _) => {
                // Sent once: a lost reply is an ambiguous error.
                let c = &mut s.clients[i];
                c.main = Main::Idle;
                c.pc += 1;
            }
            (Kind::Look { round }, None) => {
                // A failed look is repeated while there is time
                // (`judged`); past the deadline the wait ends with the
                // error.
                if now >= s.clients[i].deadline {
                    let c = &mut s.clients[i];
                    c.main = Main::Idle;
                    c.subscribed = false;
                    c.inbox = false;
                    c.pc += 1;
                } else {
                    self.call(s, i, Kind::Look { round });
                }
            }
            (Kind::Look { round: None }, Some(r)) => match round_of(&r) {
                // No count: open now.
                None => self.end(s, i, None, true),
                Some(round) => {
                    // Subscribed (`Listening::start`), then the loop's
                    // first look.
                    s.clients[i].subscribed = true;
                    self.call(s, i, Kind::Look { round: Some(round) });
                }
            },
            (Kind::Look { round: Some(round) }, Some(r)) => {
                let c = &s.clients[i];
                if c.inbox || round_of(&r).as_ref() != Some(&round) {
                    return self.end(s, i, Some(&round), true);
                }
                if now >= c.deadline {
                    return self.call(s, i, Kind::Last { round });
                }
                let until = (now + self.fallback_ms.max(30_000)).min(c.deadline);
                s.clients[i].main = Main::Waiting { round, until };
            }
            (Kind::Last { .. }, None) => {
                // Not answering at the deadline: "timed out", the
                // registration left to lapse. No verdict to judge: the
                // server could not be reached.
                let c = &mut s.clients[i];
                c.main = Main::Idle;
                c.subscribed = false;
                c.inbox = false;
                c.pc += 1;
            }
            (Kind::Last { round }, Some(r)) => {
                let open = round_of(&r).as_ref() != Some(&round);
                if !open {
                    // Gave up: its registration withdrawn (`ZREM`s).
                    for set in [waiters_key(), blocked_key()] {
                        let t = s.clients[i].tokens;
                        let ran =
                            server.command(&mut s.keys, &[b"ZREM".to_vec(), set, token(i, t)]);
                        if let Some(l) = log {
                            l.push(format!("ZREM -> {}", ran.reply.show()));
                        }
                    }
                }
                self.end(s, i, Some(&round), open);
            }
        }
    }

    fn next_event(&self, s: &State) -> Option<i64> {
        let mut t: Vec<i64> = Vec::new();
        if let Some(e) = s.keys.next_expiry() {
            t.push(e - SERVER_OFFSET - s.offset);
        }
        for c in &s.clients {
            if c.life != Life::Running {
                continue;
            }
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
                && match &c.main {
                    Main::Call { at, out, .. } => out.due(*at, s.now, self.response_ms),
                    Main::Waiting { until, .. } => *until <= s.now || c.inbox,
                    Main::Idle => false,
                }
        })
    }
}

impl Model for LatchModel {
    type State = State;
    type Action = Action;

    fn init(&self) -> State {
        State {
            keys: Keyspace::starting_at(SERVER_OFFSET),
            now: 0,
            offset: 0,
            clients: (0..self.ops.len())
                .map(|_| Client {
                    pc: 0,
                    life: Life::Running,
                    tokens: 0,
                    deadline: 0,
                    main: Main::Idle,
                    subscribed: false,
                    inbox: false,
                })
                .collect(),
            faults: 0,
            exits: 0,
            opened: Vec::new(),
            count: None,
            broken: None,
        }
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let fault = s.faults < self.faults.budget;
        for (i, c) in s.clients.iter().enumerate() {
            if c.life == Life::Frozen {
                out.push(Action::Resume(i));
                if let Main::Call {
                    out: Outcome::Unsent,
                    ..
                } = c.main
                {
                    out.push(Action::Call(i, CallStep::Run));
                }
            }
            if c.life != Life::Running {
                continue;
            }
            if fault && self.faults.crash {
                out.push(Action::Crash(i));
            }
            if fault && self.faults.freeze {
                out.push(Action::Freeze(i));
            }
            match &c.main {
                Main::Idle => {
                    if (c.pc as usize) < self.ops[i].len() {
                        out.push(Action::Start(i));
                    } else if self.exits {
                        out.push(Action::Exit(i));
                    }
                }
                Main::Call { at, out: o, .. } => {
                    let steps = o.steps(*at, s.now, self.response_ms, &self.faults, fault);
                    out.extend(steps.map(|c| Action::Call(i, c)));
                }
                Main::Waiting { until, .. } => {
                    if c.inbox {
                        out.push(Action::Message(i));
                        if fault && self.faults.lost_message {
                            out.push(Action::LoseMessage(i));
                        }
                    } else if *until <= s.now {
                        out.push(Action::Timeout(i));
                    }
                }
            }
        }
        if fault && self.faults.clock_step {
            out.push(Action::StepBack);
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
                let op = self.ops[i][s.clients[i].pc as usize];
                let now = s.now;
                let c = &mut s.clients[i];
                c.tokens += 1;
                let t = c.tokens;
                let kind = match op {
                    LatchOp::Set(n) => Kind::Set { count: n, round: t },
                    LatchOp::CountDown => Kind::CountDown,
                    LatchOp::WaitFor(d) => {
                        c.deadline = now + d;
                        Kind::Look { round: None }
                    }
                };
                self.call(&mut s, i, kind);
            }
            Action::Call(i, CallStep::Run | CallStep::LoseReply) => {
                let Main::Call { kind, .. } = s.clients[i].main.clone() else {
                    return Err("run without a call".into());
                };
                let reply = self.run(server, &mut s, i, &kind, log);
                let lost = matches!(a, Action::Call(_, CallStep::LoseReply));
                if lost {
                    s.faults += 1;
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
                if let Main::Call { out, .. } = &mut s.clients[i].main {
                    *out = Outcome::Failed;
                }
            }
            Action::Call(i, CallStep::Receive) => self.receive(server, &mut s, i, log),
            Action::Message(i) => {
                // The announcement is the answer: no re-read.
                let Main::Waiting { round, .. } = s.clients[i].main.clone() else {
                    return Err("no wait".into());
                };
                self.end(&mut s, i, Some(&round), true);
            }
            Action::LoseMessage(i) => {
                s.faults += 1;
                s.clients[i].inbox = false;
            }
            Action::Timeout(i) => {
                let Main::Waiting { round, .. } = s.clients[i].main.clone() else {
                    return Err("no wait".into());
                };
                if s.now >= s.clients[i].deadline {
                    self.call(&mut s, i, Kind::Last { round });
                } else {
                    // The fallback poll: a look.
                    self.call(&mut s, i, Kind::Look { round: Some(round) });
                }
            }
            Action::Crash(i) => {
                s.faults += 1;
                let c = &mut s.clients[i];
                c.life = Life::Crashed;
                c.main = Main::Idle;
            }
            Action::Freeze(i) => {
                s.faults += 1;
                s.clients[i].life = Life::Frozen;
            }
            Action::Resume(i) => s.clients[i].life = Life::Running,
            Action::StepBack => {
                s.faults += 1;
                s.offset -= 1000;
                s.keys.now_us = (s.now + SERVER_OFFSET + s.offset) * 1000;
            }
            Action::Exit(i) => {
                s.exits += 1;
                s.clients[i].life = Life::Exited;
            }
            Action::Tick => {
                let t = self.next_event(&s).ok_or("no event to wait for")?;
                if s.faults == 0 && s.exits == 0 {
                    for (i, c) in s.clients.iter().enumerate() {
                        if let Main::Waiting { round, .. } = &c.main {
                            if s.opened.contains(round) {
                                return Err(format!(
                                    "idle time without a cause: c{i}'s round opened, no party \
                                     died, exited or lost a message, and it still waits as time \
                                     passes to {t} ms"
                                ));
                            }
                        }
                    }
                }
                s.now = t;
                s.keys.advance_to(s.now + SERVER_OFFSET + s.offset);
            }
        }
        Ok(s)
    }

    fn check(&self, _server: &mut Server, s: &State) -> Result<(), String> {
        if let Some(e) = &s.broken {
            return Err(e.clone());
        }
        let quiet = s.clients.iter().enumerate().all(|(i, c)| match c.life {
            Life::Crashed | Life::Exited => true,
            Life::Frozen => false,
            Life::Running => c.pc as usize >= self.ops[i].len() && matches!(c.main, Main::Idle),
        });
        if quiet && !s.keys.keys.contains_key(KEY) {
            // Open, and nobody waits: every key lapses.
            crate::probes::lapsed(&s.keys, &[])?;
        }
        Ok(())
    }

    fn show(&self, s: &State) -> Vec<String> {
        let mut out = vec![format!(
            "t = {} ms, server clock {:+} ms, faults {}, exits {}, opened {:?}",
            s.now,
            s.offset,
            s.faults,
            s.exits,
            s.opened
                .iter()
                .map(|r| String::from_utf8_lossy(r).into_owned())
                .collect::<Vec<_>>()
        )];
        for (i, c) in s.clients.iter().enumerate() {
            out.push(format!(
                "c{i}: {:?}, op {}/{}, deadline {}, {:?}, subscribed {}, inbox {}",
                c.life,
                c.pc,
                self.ops[i].len(),
                c.deadline,
                c.main,
                c.subscribed,
                c.inbox
            ));
        }
        out.extend(s.keys.show().into_iter().map(|l| format!("  {l}")));
        out
    }
}
