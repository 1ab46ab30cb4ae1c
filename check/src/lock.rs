//! The lock (plain and fair share their scripts) as separate clients use
//! it: each client a process with one `Client`, running its operations
//! (acquire and wait, try, release) as the library decides them, with its
//! renewal thread's renewals, claims and looks; the server running the
//! library's scripts; faults and time as transitions.
//!
//! Where a client rule is restated here rather than called, it names the
//! code it mirrors; the timings and the look rule are the library's own
//! (`redlease::__protocol`).

use std::borrow::Cow;

use redlease::__protocol as p;

use crate::keyspace::{Keyspace, Reply};
use crate::looks::{watch_waiter, Look};
use crate::parties::{
    b, busy, heard, int, ms, renewed, time_may_pass, At, CallStep, Life, Outcome,
};
pub use crate::parties::{Fault, Faults};
use crate::search::Model;
use crate::server::Server;

mod args;
mod properties;

use args::prefix;
pub(crate) use args::{renewal_call, unqueued_acquire_args, unqueued_release_args};

/// What one client does, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `acquire()`: waits as long as it takes.
    Acquire,
    /// `acquire_timeout(ms)`.
    AcquireFor(i64),
    /// `try_acquire()`.
    Try,
    /// The guard's `release()` (nothing when the op before it got none).
    Release,
}

pub struct LockModel {
    pub ops: Vec<Vec<Op>>,
    pub faults: Faults,
    /// The watchdog lease (renewed every third of it).
    pub lease_ms: i64,
    /// Virtual time never passes this.
    pub horizon_ms: i64,
    /// How long a call whose request or reply was lost takes to fail (the
    /// client's response timeout).
    pub response_ms: i64,
    /// Whether a client that has done its operations may exit (its
    /// renewal thread, and the looks it would make, gone with it).
    pub exits: bool,
    /// A waiter whose block was cut blocks again (the rule before
    /// `protocol::blocking::Place`, kept for the checker's own tests);
    /// else it waits for messages, as the library's does.
    pub reblocks: bool,
    /// The fair lock (`Client::fair_lock`): its waiters keep their place
    /// among the blocked to their deadline, and their turn by messages once
    /// a block was cut. Else the plain lock: a waiter whose block was cut
    /// blocks again, and one with a deadline blocks until its last second
    /// (`protocol::blocking::worth_blocking`), then waits for messages;
    /// queue order is not promised.
    pub fair: bool,
    /// A subscriber that starts again makes up for the namings it may
    /// have missed with a look (`Watches::listening`), as the library's
    /// does; else the rule before, kept for the checker's own tests.
    pub restart_looks: bool,
    /// A grant a pop alone took counts its first hold from when its reply
    /// is read (unsound: a waiter frozen after its pop would believe in
    /// it), kept for the checker's own tests; else from the block's
    /// sending plus what the server's clock read around the pop says
    /// (`protocol::popped::waited`), as the library's does.
    pub popped_from_reply: bool,
    /// Every grant a pop alone took is claimed at once, before the guard
    /// is handed out, as the library does only after a block of more
    /// than about 16 s or a pause between the pop and the reading of its
    /// reply (`protocol::popped::popped_hold`), which a bounded search
    /// reaches seldom: kept for the checker's own tests of what follows
    /// such a claim.
    pub popped_claimed_at_once: bool,
    /// How far the server's clock jumps ahead at a `ClockJump` fault (an
    /// NTP step forward, a VM resumed with its clock set right): keys
    /// lapse that much sooner than their holders count.
    pub clock_jump_ms: i64,
    /// A scenario, where a configuration needs more clients than an open
    /// search reaches (`Scenario::default()`: none).
    pub scenario: Scenario,
}

/// What narrows a [`LockModel`]'s search to a scenario. Every interleaving
/// within it is still explored, faults included.
#[derive(Clone, Debug, Default)]
pub struct Scenario {
    /// `(i, j, n)`: client `i` starts its first operation only once client
    /// `j` has done `n`.
    pub after: Vec<(usize, usize, u8)>,
    /// Clients whose subscriber already listens when the run starts (the
    /// process waited on another name before): their first wait makes up
    /// for no naming (`Watches::listening` ran long ago).
    pub subscribed: Vec<usize>,
    /// The only clients a fault may strike (empty: any).
    pub faulty: Vec<usize>,
    /// The claim window its hand-overs get, in ms: a release's (and a
    /// leave's), a look's that opens a lapsed lease, a newcomer's that
    /// finds the name free with a waiter ahead. A Cluster client's right
    /// after it saw the name's slot move (`protocol::timing::
    /// hand_over_claim`, `SETTLING_CLAIM`). `None`: `GRANT_CLAIM`, as
    /// always elsewhere.
    pub hand_over_claim_ms: Option<i64>,
    /// A client that has done its operations exits at once, before any
    /// other step (a cron job, `redlease run`); else it may exit at any
    /// moment after, or never (with [`LockModel::exits`]).
    pub exit_at_once: bool,
}

/// A plain waiter's last second, spent waiting for messages
/// (`protocol::blocking::SHORT_WAIT`).
pub(crate) const SHORT_WAIT: i64 = p::SHORT_WAIT.as_millis() as i64;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum CallKind {
    /// lua/lock_acquire.lua for a waiter that blocks (`'block'`).
    Grant,
    /// lua/lock_acquire.lua that never queues.
    Try,
    /// lua/lock_acquire.lua for a waiter that waits for messages (a fair
    /// waiter whose place among the blocked was lost:
    /// `protocol::blocking::Place`, `Direct::by_message`).
    ByMessage,
    /// lua/lock_acquire.lua with `'popped'`, after a pop that granted
    /// nothing (`Node::after_pop`).
    AfterPop,
    /// The synchronous claim of a grant a pop took long ago
    /// (`lease::taken_by_pop`): lua/lock_extend.lua with the fence.
    Claim { fence: i64, since: i64, first: i64 },
    /// lua/lock_release.lua.
    Release { fence: i64 },
    /// lua/lock_release.lua with `'leave'`: a waiter gives up.
    Leave,
}

/// What a served pop's pipeline read: what it popped, the lock's `PTTL`
/// and value, and when the server's clock says it was served at the
/// earliest, before the cap at the reply's reading (`parties::served_from`,
/// in the clients' milliseconds).
type Served = (Option<Vec<u8>>, i64, Option<Vec<u8>>, i64);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Main {
    Idle,
    Call {
        kind: CallKind,
        token: u8,
        at: i64,
        out: Outcome,
        /// Its request reaches the server at `at + 1` (`Faults::late`).
        late: bool,
    },
    /// Blocked in `BLMOVE open mine` (`Node::grant_blocking`, a lock's pop
    /// alone), the server's clock read before it (`clock`, microseconds).
    /// `served`: the pop and its pipeline ran.
    Blocked {
        token: u8,
        at: i64,
        until: i64,
        seq: u32,
        clock: Option<i64>,
        served: Option<Served>,
    },
    /// Waiting for a release message, or until `until` (the busy reply's
    /// hint, at most the fallback poll, never past the deadline). A
    /// message sets `until` to now (delivered: lost messages are not
    /// modelled for these waiters).
    Listening {
        token: u8,
        until: i64,
    },
}

/// What a client believes it holds (its `LeaseState`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Hold {
    token: u8,
    fence: i64,
    /// The lease surely runs until then, in the client's view.
    valid_until: i64,
    /// The renewal thread renews (or claims) it then.
    renew_due: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Client {
    pc: u8,
    life: Life,
    tokens: u8,
    /// The deadline of the acquisition under way (None: waits for ever).
    deadline: Option<i64>,
    main: Main,
    hold: Option<Hold>,
    looks: Vec<Look>,
    /// Tokens an acquisition retired after a lost reply: withdrawn when it
    /// ends (`Acquisition::finish`, `clean_up`).
    retired: Vec<u8>,
    /// When its acquisition last blocked (the order Redis serves the
    /// blocked in), until it holds or gives up.
    blocked: Option<u32>,
    /// Its block was cut: it waits for messages for the rest of this
    /// acquisition (`Place::lose`).
    lost_place: bool,
    /// Since its block was cut, an attempt of its has reached the server,
    /// which knows from then on that it waits for messages (until then it
    /// is a waiter between round trips, whose turn any blocked one takes).
    told: bool,
    /// A release message reached its channel since its last attempt was
    /// made: its next wait ends at once (`Wakeup::acquire` drains the
    /// channel only before an attempt).
    heard: bool,
    /// Its subscriber listens: started by its first busy reply; namings
    /// sent before then are not heard.
    listening: bool,
    /// Its subscriber lost its connection and has not started again yet
    /// (`Faults::resubscribe`): namings sent now are not heard.
    down: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    keys: Keyspace,
    /// The clients' clock, in milliseconds.
    now: i64,
    /// The server's clock minus the clients' (a clock step).
    offset: i64,
    clients: Vec<Client>,
    faults: u8,
    /// Blocks cut (they count against the fault budget, but excuse no
    /// disorder).
    cuts: u8,
    exits: u8,
    seq: u32,
    /// The largest fence the lock key has named.
    top_fence: i64,
    /// Every hold's fence and its owner (client, token).
    fences: Vec<(i64, (u8, u8))>,
    /// A property broken inside a step (reported by `check`).
    broken: Option<String>,
    /// A fair lock's pop that took a grant while a waiter kept its turn
    /// (its script decides whose it is): the popper, and who waited then
    /// (a bit per client): the order is judged among those.
    decided_at_pop: Option<(u8, u8)>,
    /// Since when the name has been free (or held by nobody alive) while a
    /// live waiter waits.
    free_since: Option<i64>,
}

#[derive(Clone, Debug)]
pub enum Action {
    Start(usize),
    /// A step of client `i`'s call in flight.
    Call(usize, CallStep),
    Popped(usize),
    Renew(usize),
    Look(usize, usize),
    /// The hand-over message that asked for a client's pending watch was
    /// lost (or came before its subscription was live).
    LoseWatch(usize),
    Crash(usize),
    Freeze(usize),
    Resume(usize),
    Exit(usize),
    StepBack,
    JumpAhead,
    Tick,
    /// A blocked waiter's connection breaks.
    Cut(usize),
    /// A waiter that waits for messages attempts (a message, or its wait
    /// ran out).
    Retry(usize),
    /// Client `i`'s subscriber loses its connection, and starts again
    /// (at once: nothing else is due before it, but other clients' steps
    /// may come between).
    SubscriberDown(usize),
    SubscriberUp(usize),
    /// Client `i`'s request, sent now, reaches the server a millisecond
    /// later (`Faults::late`).
    Late(usize),
}

pub(crate) const NAME: &str = "{n}";
/// The clients' fallback poll (`ClientBuilder::fallback_poll`'s default).
pub(crate) const FALLBACK_MS: i64 = p::FALLBACK_POLL.as_millis() as i64;
pub(crate) const FLOOR: &[u8] = p::FENCE_FLOOR.as_bytes();
pub(crate) const CHANNEL: &[u8] = p::WAKE_CHANNEL.as_bytes();

pub(crate) fn key(suffix: &str) -> Vec<u8> {
    // Joined rather than formatted: called in most steps.
    [NAME.as_bytes(), suffix.as_bytes()].concat()
}

pub(crate) use crate::parties::token;

/// lua/lock_acquire.lua, lock_release.lua and lock_watch.lua's keys
/// (`Lock::new`): lock, counter, queue, deadlines, fence floor.
pub(crate) fn scripted() -> &'static [Vec<u8>] {
    // Made once: most steps run one of these scripts.
    static KEYS: std::sync::LazyLock<Vec<Vec<u8>>> = std::sync::LazyLock::new(|| {
        vec![
            key(""),
            key(":fence"),
            key(":queue"),
            key(":queue:t"),
            FLOOR.to_vec(),
        ]
    });
    &KEYS
}

/// A call's script, keys (most share [`scripted`]'s, made once) and
/// arguments.
type CallOf = (&'static str, Cow<'static, [Vec<u8>]>, Vec<Vec<u8>>);

/// Client `c`'s wait ended without the name (`Acquisition::finish`): its
/// looks for the blocked waiter end, and its next operation is due.
fn end_wait(c: &mut Client) {
    c.main = Main::Idle;
    c.deadline = None;
    c.blocked = None;
    c.lost_place = false;
    c.told = false;
    c.looks.retain(|l| l.waiter.is_none());
    c.pc += 1;
}

impl LockModel {
    /// Whether client `c`'s waiter waits for messages now: it does not
    /// block, by the library's rule (`protocol::blocking::blocks_now`,
    /// which `wakeup::blocks_now` asks): a fair one that lost its place
    /// among the blocked, a plain one in its last second. The model's
    /// server always grants directly.
    fn by_message(&self, c: &Client, now: i64) -> bool {
        let place = self.fair.then_some(!c.lost_place || self.reblocks);
        !p::blocks_now(true, place, c.deadline.map(At), At(now))
    }
}

impl State {
    fn server_sync(&mut self) {
        self.keys.advance_to(self.now + self.offset);
    }

    fn lock_value(&self) -> Option<Vec<u8>> {
        match self.keys.keys.get(NAME.as_bytes()).map(|e| &e.value) {
            Some(crate::keyspace::Value::Str(s)) => Some(s.clone()),
            _ => None,
        }
    }
}

impl LockModel {
    fn log(log: &mut Option<Vec<String>>, line: impl FnOnce() -> String) {
        if let Some(l) = log {
            l.push(line());
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
        let before = s.keys.clone();
        let ran = server.eval(&mut s.keys, file, keys, args);
        self.queue_order(s, file, &before);
        self.hear_hand_overs(s, &ran.published);
        self.hear_announcements(s, &ran.published);
        ran.log(log, "", file, args);
        self.serve(s, log);
        self.fence_seen(s);
        ran.reply
    }

    /// A hand-over names its watchers (`@c1:{n}`, lua/queue.lua
    /// `hand_on`): each named client whose waiter is in its acquisition
    /// (blocked, or between its round trips) replaces its pending watch
    /// with a look at the name after the claim (src/wakeup/watch.rs,
    /// `Watches::named`; the message read by the library's `heard`). A
    /// frozen client's subscriber is frozen with
    /// it (it hears the message late, if ever: modelled as never).
    fn hear_hand_overs(&self, s: &mut State, published: &[crate::keyspace::Published]) {
        let now = s.now;
        for m in published {
            for (i, c) in s.clients.iter_mut().enumerate() {
                if !matches!(heard(i, &m.message), p::Heard::Named(_)) {
                    continue;
                }
                if c.life != Life::Running || !watching(c) || !c.listening {
                    continue;
                }
                named_look(c, now);
            }
        }
    }

    /// A release message (`c<id>:{n}`, not a naming of watchers) reaches
    /// every client, and wakes its waiter that waits for messages
    /// (`Shared::dispatch` by the library's `heard`: every release of the
    /// key, its own client's included).
    fn hear_announcements(&self, s: &mut State, published: &[crate::keyspace::Published]) {
        let now = s.now;
        for i in 0..s.clients.len() {
            let released = published
                .iter()
                .any(|m| matches!(heard(i, &m.message), p::Heard::Released(_)));
            if !released {
                continue;
            }
            let by_message = self.by_message(&s.clients[i], now);
            let c = &mut s.clients[i];
            match (&mut c.main, c.life) {
                (Main::Listening { until, .. }, Life::Running) => *until = now,
                (Main::Call { .. }, Life::Running) if by_message => c.heard = true,
                _ => {}
            }
        }
    }

    /// The server serves blocked pops whose list has an element, the
    /// connection blocked longest first, each with its pipeline behind
    /// (`pop_pipeline`: `PEXPIRE mine`, `PTTL lock`, `GET lock`).
    fn serve(&self, s: &mut State, log: &mut Option<Vec<String>>) {
        let open = [prefix(), b"open".to_vec()].concat();
        loop {
            if !s.keys.list_ready(&open) {
                return;
            }
            let next = s
                .clients
                .iter()
                .enumerate()
                .filter_map(|(i, c)| match &c.main {
                    Main::Blocked {
                        served: None, seq, ..
                    } if matches!(c.life, Life::Running | Life::Frozen) => Some((*seq, i)),
                    _ => None,
                })
                .min();
            let Some((_, i)) = next else { return };
            let Main::Blocked { token: t, .. } = s.clients[i].main.clone() else {
                return;
            };
            let mine = [prefix(), token(i, t)].concat();
            let moved = s.keys.lmove(&open, &mine).unwrap_or(Reply::Nil);
            let popped = match moved {
                Reply::Bulk(f) => Some(f),
                _ => None,
            };
            self.finish_pop(s, i, popped, log);
        }
    }

    fn finish_pop(
        &self,
        s: &mut State,
        i: usize,
        popped: Option<Vec<u8>>,
        log: &mut Option<Vec<String>>,
    ) {
        let Main::Blocked {
            token: t,
            at,
            clock,
            ..
        } = s.clients[i].main.clone()
        else {
            return;
        };
        let mine = [prefix(), token(i, t)].concat();
        let (lock, turns) = (key(""), [prefix(), b"turns".to_vec()].concat());
        // The server's clock right behind the pop, before the rest.
        let from = crate::parties::served_from(clock, crate::parties::server_clock(&s.keys), at);
        // The pipeline behind the pop, as the library sends it
        // (`behind_pop`). A fair lock's also asks whether a waiter keeps
        // its turn waiting for messages (`Pop::turns`): then the pop alone
        // is no grant, and the script behind decides (as if the lock's
        // value had not been read).
        let turns = self.fair.then_some(&turns[..]);
        let (ttl, mut value, in_turn) =
            crate::parties::behind_pop(&mut s.keys, &mine, &lock, turns);
        let took = p::pop_took_grant(popped.as_deref(), Some(ttl), value.as_deref(), in_turn);
        Self::log(log, || {
            format!(
                "c{i}'s BLMOVE served: {:?}; PTTL {ttl}; GET {:?}; turns kept: {in_turn}",
                popped.as_deref().map(String::from_utf8_lossy),
                value.as_deref().map(String::from_utf8_lossy)
            )
        });
        if in_turn {
            value = None;
            if popped.is_some() {
                let now = s.now;
                let mask = s.clients.iter().enumerate().fold(0u8, |m, (j, c)| {
                    let waits = match &c.main {
                        Main::Blocked { served: None, .. } => true,
                        Main::Listening { .. }
                        | Main::Call {
                            kind: CallKind::ByMessage | CallKind::AfterPop,
                            ..
                        } => c.told && c.deadline.is_none_or(|d| d > now),
                        _ => false,
                    };
                    if waits {
                        m | (1 << j)
                    } else {
                        m
                    }
                });
                s.decided_at_pop = Some((i as u8, mask));
            }
        }
        // A pop that took the open grant is the grant (the claim later
        // only writes it down).
        if took.is_some() {
            let keys = s.keys.clone();
            self.granted_in_order(s, i, &token(i, t), &keys);
        }
        if let Main::Blocked { served, .. } = &mut s.clients[i].main {
            *served = Some((popped, ttl, value, from));
        }
    }

    fn new_hold(
        &self,
        s: &mut State,
        i: usize,
        t: u8,
        fence: i64,
        valid_until: i64,
        renew_due: i64,
    ) -> Result<(), String> {
        // One grant, one holder: a fence is never handed to two holds.
        if let Some((c, tk)) = s.fences.iter().find(|(f, _)| *f == fence).map(|(_, o)| *o) {
            if (c, tk) != (i as u8, t) {
                return Err(format!(
                    "fence {fence} was handed to c{c} and again to c{i}"
                ));
            }
        } else {
            s.fences.push((fence, (i as u8, t)));
        }
        let c = &mut s.clients[i];
        c.blocked = None;
        c.lost_place = false;
        c.told = false;
        c.hold = Some(Hold {
            token: t,
            fence,
            valid_until,
            renew_due,
        });
        c.main = Main::Idle;
        c.pc += 1;
        c.deadline = None;
        c.looks.retain(|l| l.waiter.is_none());
        Ok(())
    }

    /// `Acquisition::finish`'s clean-up of retired tokens' queue entries,
    /// in the order the library's own rule makes them
    /// (`protocol::clean_up`; each reaches the server here).
    fn withdraw(
        &self,
        server: &mut Server,
        s: &mut State,
        i: usize,
        log: &mut Option<Vec<String>>,
    ) {
        let retired = std::mem::take(&mut s.clients[i].retired);
        for undo in p::undos(retired.len(), |_| true, false, false) {
            let p::Undo::Leave(n) = undo else { continue };
            let args = self.release_args(i, retired[n], true, None);
            self.eval(server, s, "lock_release.lua", scripted(), &args, log);
        }
    }

    /// `lease::taken_by_pop`: a grant a pop took, its first lease `first`
    /// from `since`.
    fn taken_by_pop(
        &self,
        s: &mut State,
        i: usize,
        t: u8,
        fence: i64,
        since: i64,
        first: i64,
    ) -> Result<(), String> {
        let (first, claim_now) =
            crate::parties::popped_hold(self.valid(), first, since, s.now, true);
        if !claim_now && !self.popped_claimed_at_once {
            return self.new_hold(s, i, t, fence, since + first, since + first / 3);
        }
        s.clients[i].main = Main::Call {
            kind: CallKind::Claim {
                fence,
                since,
                first,
            },
            token: t,
            at: s.now,
            out: Outcome::Unsent,
            late: false,
        };
        Ok(())
    }

    /// Blocks in the pop (served at once if the open list has a grant).
    /// `at`: when the call whose busy reply said `wait` was sent.
    fn block(
        &self,
        s: &mut State,
        i: usize,
        t: u8,
        at: i64,
        wait: i64,
        log: &mut Option<Vec<String>>,
    ) {
        let now = s.now;
        let c = &mut s.clients[i];
        // A plain waiter's block ends its last second before the deadline
        // (`protocol::blocking::block_for`, its `block_tail`); a fair
        // one's, which keeps its place, at it.
        let tail = p::block_tail(self.fair);
        let block = p::block_for(p::ROOM_CHUNK, c.deadline.map(At), tail, At(now));
        let until = now + block.map_or(0, ms);
        // The renewal thread looks for it from when the holder's lease
        // would end.
        watch_waiter(&mut c.looks, t, 0, at, now, wait);
        s.seq += 1;
        c.blocked = Some(s.seq);
        // The pipeline reads the server's clock before its pop
        // (`protocol::popped::SERVER_CLOCK`).
        let clock = crate::parties::server_clock(&s.keys);
        let c = &mut s.clients[i];
        c.main = Main::Blocked {
            token: t,
            at: now,
            until,
            seq: s.seq,
            clock,
            served: None,
        };
        self.serve(s, log);
    }

    /// A busy reply: block again, or give up at the deadline.
    fn busy_or_give_up(
        &self,
        s: &mut State,
        i: usize,
        t: u8,
        at: i64,
        wait: i64,
        log: &mut Option<Vec<String>>,
    ) {
        let now = s.now;
        let c = &mut s.clients[i];
        if !c.listening && !c.down {
            // Its subscriber starts: a naming sent before it listened went
            // unheard, and the look it asks for is made up for
            // (`Watches::listening`; `NamedLooks::maybe_named` never moves
            // a look owed already).
            c.listening = true;
            missed_naming(c, now);
        }
        let c = &s.clients[i];
        if c.deadline.is_some_and(|d| s.now >= d) {
            s.clients[i].main = Main::Call {
                kind: CallKind::Leave,
                token: t,
                at: s.now,
                out: Outcome::Unsent,
                late: false,
            };
            return;
        }
        if self.by_message(c, s.now) {
            // `Wakeup::acquire`: the first wait after the block was cut
            // subscribes and attempts at once; then each attempt waits for
            // a message, or the busy reply's hint (at most the fallback
            // poll), never past the deadline.
            let now = s.now;
            let c = &mut s.clients[i];
            c.main = match c.main {
                Main::Call {
                    kind: CallKind::AfterPop,
                    ..
                } => Main::Call {
                    kind: CallKind::ByMessage,
                    token: t,
                    at: now,
                    out: Outcome::Unsent,
                    late: false,
                },
                _ => {
                    let until = match std::mem::take(&mut c.heard) {
                        true => now,
                        false => now + wait.clamp(1, FALLBACK_MS),
                    };
                    Main::Listening {
                        token: t,
                        until: c.deadline.map_or(until, |d| until.min(d)),
                    }
                }
            };
            return;
        }
        self.block(s, i, t, at, wait, log);
    }

    /// A failed grant (a lost request or reply): the token is retired (its
    /// undo went behind it) and the acquisition tries again with a new one
    /// (`Acquisition::on_error`), or gives up at its deadline, with nothing
    /// cleaned up while its server is late (`protocol::clean_up::undos`:
    /// the entries lapse by themselves).
    fn retry(&self, s: &mut State, i: usize, t: u8) {
        if s.decided_at_pop.is_some_and(|(p, _)| p as usize == i) {
            s.decided_at_pop = None;
        }
        let now = s.now;
        let c = &mut s.clients[i];
        let (retire, left) = crate::parties::lost_call();
        if retire {
            c.retired.push(t);
            c.looks.retain(|l| l.waiter.is_none());
            c.tokens += 1;
        }
        let fresh = c.tokens;
        if c.deadline.is_some_and(|d| now >= d) {
            let (withdrawn, current) = crate::parties::clean_up(c.retired.len(), left);
            if withdrawn.is_empty() && !current {
                c.retired.clear();
                end_wait(c);
                return;
            }
            c.main = Main::Call {
                kind: CallKind::Leave,
                token: fresh,
                at: now,
                out: Outcome::Unsent,
                late: false,
            };
        } else {
            let by_message = self.by_message(c, now);
            c.main = Main::Call {
                kind: if by_message {
                    CallKind::ByMessage
                } else {
                    CallKind::Grant
                },
                token: fresh,
                at: now,
                out: Outcome::Unsent,
                late: false,
            };
        }
    }

    /// Client `i`'s call of `kind` with token `t`: its script, keys and
    /// arguments.
    fn call_of(&self, i: usize, kind: &CallKind, t: u8) -> CallOf {
        match kind {
            CallKind::Grant => (
                "lock_acquire.lua",
                Cow::Borrowed(scripted()),
                self.acquire_args(i, t, true, false),
            ),
            CallKind::Try => (
                "lock_acquire.lua",
                Cow::Borrowed(scripted()),
                self.acquire_args(i, t, false, false),
            ),
            CallKind::AfterPop => (
                "lock_acquire.lua",
                Cow::Borrowed(scripted()),
                self.acquire_args(i, t, true, true),
            ),
            CallKind::ByMessage => (
                "lock_acquire.lua",
                Cow::Borrowed(scripted()),
                self.acquire_args_as(i, t, true, false, false),
            ),
            CallKind::Claim { fence, .. } => {
                let (k, a) = self.extend_call(i, t, *fence);
                ("lock_extend.lua", Cow::Owned(k), a)
            }
            CallKind::Release { fence } => (
                "lock_release.lua",
                Cow::Borrowed(scripted()),
                self.release_args(i, t, false, Some(*fence)),
            ),
            CallKind::Leave => (
                "lock_release.lua",
                Cow::Borrowed(scripted()),
                self.release_args(i, t, true, None),
            ),
        }
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
            ..
        } = s.clients[i].main.clone()
        else {
            return Ok(());
        };
        // The popper's script has decided (its reply is in).
        if s.decided_at_pop.is_some_and(|(p, _)| p as usize == i) {
            s.decided_at_pop = None;
        }
        let reply = out.reply();
        if let Some(Reply::Error(e)) = &reply {
            return Err(format!("c{i}'s {kind:?} got an error reply: {e}"));
        }
        match kind {
            CallKind::Grant | CallKind::AfterPop | CallKind::ByMessage => match reply {
                Some(r) if int(&r).is_some() => {
                    let fence = int(&r).unwrap_or(0);
                    self.withdraw(server, s, i, log);
                    if kind == CallKind::AfterPop {
                        // Taken from our own list: the short first lease
                        // from this sending (`Node::after_pop`).
                        self.taken_by_pop(s, i, t, fence, at, ms(p::POPPED_LEASE))?;
                    } else {
                        self.new_hold(s, i, t, fence, at + self.valid(), at + self.lease_ms / 3)?;
                    }
                }
                Some(r) => {
                    let wait =
                        busy(&r).ok_or_else(|| format!("c{i}: unexpected reply {}", r.show()))?;
                    self.busy_or_give_up(s, i, t, at, wait, log);
                }
                None => self.retry(s, i, t),
            },
            CallKind::Try => {
                match reply.as_ref().and_then(int) {
                    Some(fence) => {
                        return self.new_hold(
                            s,
                            i,
                            t,
                            fence,
                            at + self.valid(),
                            at + self.lease_ms / 3,
                        )
                    }
                    None if reply.is_none() => {
                        // Maybe ran: released, token-checked (`clean_up`).
                        let args = self.release_args(i, t, false, None);
                        self.eval(server, s, "lock_release.lua", scripted(), &args, log);
                    }
                    None => {}
                }
                let c = &mut s.clients[i];
                c.main = Main::Idle;
                c.pc += 1;
            }
            CallKind::Claim {
                fence,
                since,
                first,
            } => {
                let until = match reply.as_ref().and_then(int) {
                    Some(1) => at + self.valid(),
                    _ => since + first,
                };
                return self.new_hold(s, i, t, fence, until, at + self.lease_ms / 3);
            }
            CallKind::Release { fence } => {
                if reply.as_ref().and_then(int) == Some(2) {
                    // `look_after_hand_over`.
                    let look = crate::looks::opening_look(0, s.now, self.hand_over_claim());
                    crate::looks::after_opening(&mut s.clients[i].looks, look, Some(fence));
                }
                let c = &mut s.clients[i];
                c.main = Main::Idle;
                c.pc += 1;
            }
            CallKind::Leave => {
                self.withdraw(server, s, i, log);
                end_wait(&mut s.clients[i]);
            }
        }
        Ok(())
    }

    fn popped(&self, s: &mut State, i: usize) -> Result<(), String> {
        let Main::Blocked {
            token: t,
            served: Some((popped, ttl, value, from)),
            ..
        } = s.clients[i].main.clone()
        else {
            return Ok(());
        };
        // The pop took the fence of the grant the lock names, with time
        // left (`pop_took_grant`; the value was left unread where a
        // waiter keeps its turn, see `finish_pop`).
        let taken = p::pop_took_grant(popped.as_deref(), Some(ttl), value.as_deref(), false);
        if let Some((fence, left)) = taken {
            // Its first hold counts from when the server's clock says the
            // pop was served at the earliest (`Node::grant_blocking`).
            let since = if self.popped_from_reply {
                s.now
            } else {
                // Capped at the reply's reading (`parties::dated`).
                crate::parties::dated(from, s.now)
            };
            return self.taken_by_pop(s, i, t, fence, since, ms(left));
        }
        // Nothing granted by the pop alone: the script follows in a round
        // trip of its own (`protocol::popped::script_behind_pop`, pinned by
        // `waiters::blocking::tests`).
        s.clients[i].main = Main::Call {
            kind: CallKind::AfterPop,
            token: t,
            at: s.now,
            out: Outcome::Unsent,
            late: false,
        };
        Ok(())
    }

    /// Whether the name is held or being taken by a live party.
    fn taken_by_live(&self, s: &State) -> bool {
        let Some(v) = s.lock_value() else {
            return false;
        };
        // Held (not a grant in hand-over): the holder's lease is the
        // name's, dead or alive; the name falls free when it ends.
        if !v.starts_with(b"rl:grant#") {
            return true;
        }
        let live = |c: &Client| c.life == Life::Running;
        for (i, c) in s.clients.iter().enumerate() {
            if !live(c) {
                continue;
            }
            let mine = |t: u8| {
                let tok = token(i, t);
                v.starts_with(&tok) && v.get(tok.len()) == Some(&b'#')
            };
            if c.hold.as_ref().is_some_and(|h| {
                mine(h.token) || v == [b"rl:grant#".as_slice(), b(h.fence).as_slice()].concat()
            }) {
                return true;
            }
            match &c.main {
                Main::Call { token: t, .. } if mine(*t) => return true,
                Main::Call {
                    kind: CallKind::Claim { fence, .. } | CallKind::Release { fence },
                    ..
                } if v == [b"rl:grant#".as_slice(), b(fence).as_slice()].concat() => return true,
                Main::Blocked {
                    served: Some((Some(f), _, _, _)),
                    ..
                } if v == [b"rl:grant#".as_slice(), f.as_slice()].concat() => return true,
                Main::Call {
                    kind: CallKind::AfterPop,
                    ..
                } if v.starts_with(b"rl:grant#") => {
                    // Its script may take what its pop took.
                    let mine = [
                        prefix(),
                        token(
                            i,
                            match &c.main {
                                Main::Call { token, .. } => *token,
                                _ => 0,
                            },
                        ),
                    ]
                    .concat();
                    if s.keys.list_ready(&mine) {
                        return true;
                    }
                }
                _ => {}
            }
        }
        false
    }

    /// A live waiter whose deadline (if any) is past `bound`.
    fn live_waiter(&self, s: &State, bound: i64) -> bool {
        s.clients.iter().any(|c| {
            c.life == Life::Running
                && c.deadline.is_none_or(|d| d > bound)
                && matches!(
                    c.main,
                    Main::Blocked { .. }
                        | Main::Listening { .. }
                        | Main::Call {
                            kind: CallKind::Grant | CallKind::AfterPop | CallKind::ByMessage,
                            out: Outcome::Unsent | Outcome::Ran(_),
                            ..
                        }
                )
        })
    }

    /// The next instant something happens by itself, after now.
    fn next_event(&self, s: &State) -> Option<i64> {
        let mut t: Vec<i64> = Vec::new();
        if let Some(e) = s.keys.next_expiry() {
            t.push(e - s.offset);
        }
        for c in &s.clients {
            if matches!(c.life, Life::Crashed | Life::Exited) {
                continue;
            }
            if let Some(h) = &c.hold {
                t.push(h.renew_due);
                t.push(h.valid_until);
            }
            t.extend(c.looks.iter().map(|l| l.due));
            match &c.main {
                Main::Blocked {
                    until,
                    served: None,
                    ..
                } => t.push(*until),
                Main::Listening { until, .. } => t.push(*until),
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

    /// Whether a running client has something to do now (time waits for
    /// it: a request not yet run, a reply in, a timer due).
    fn urgent(&self, s: &State) -> bool {
        s.clients.iter().any(|c| {
            c.life == Life::Running
                && (c.down
                    || c.hold.as_ref().is_some_and(|h| h.renew_due <= s.now)
                    || c.looks.iter().any(|l| l.due <= s.now)
                    || match &c.main {
                        Main::Call { at, out, .. } => {
                            !on_its_way(&c.main, s.now) && out.due(*at, s.now, self.response_ms)
                        }
                        Main::Blocked {
                            served: Some(_), ..
                        } => true,
                        Main::Listening { until, .. } => *until <= s.now,
                        _ => false,
                    })
        })
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init(&self) -> State {
        State {
            keys: Keyspace::starting_at(1_000_000_000),
            now: 0,
            offset: 1_000_000_000,
            clients: (0..self.ops.len())
                .map(|i| Client {
                    pc: 0,
                    life: Life::Running,
                    tokens: 0,
                    deadline: None,
                    main: Main::Idle,
                    hold: None,
                    looks: Vec::new(),
                    retired: Vec::new(),
                    blocked: None,
                    lost_place: false,
                    told: false,
                    heard: false,
                    listening: self.scenario.subscribed.contains(&i),
                    down: false,
                })
                .collect(),
            faults: 0,
            cuts: 0,
            exits: 0,
            seq: 0,
            top_fence: 0,
            fences: Vec::new(),
            broken: None,
            decided_at_pop: None,
            free_since: None,
        }
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if self.exits && self.scenario.exit_at_once {
            let done = s.clients.iter().enumerate().find(|(i, c)| {
                c.life == Life::Running
                    && c.main == Main::Idle
                    && c.hold.is_none()
                    && c.pc as usize >= self.ops[*i].len()
            });
            if let Some((i, _)) = done {
                out.push(Action::Exit(i));
                return;
            }
        }
        let fault = s.faults + s.cuts < self.faults.budget;
        for (i, c) in s.clients.iter().enumerate() {
            match c.life {
                Life::Frozen => {
                    out.push(Action::Resume(i));
                    continue;
                }
                Life::Crashed | Life::Exited => continue,
                Life::Running => {}
            }
            // A fault of this client's (the scenario may spare it).
            let fault =
                fault && (self.scenario.faulty.is_empty() || self.scenario.faulty.contains(&i));
            if fault && self.faults.crash {
                out.push(Action::Crash(i));
            }
            if fault && self.faults.freeze {
                out.push(Action::Freeze(i));
            }
            match &c.main {
                Main::Idle => {
                    let ops = &self.ops[i];
                    let waits = c.pc == 0
                        && self
                            .scenario
                            .after
                            .iter()
                            .any(|&(k, j, n)| k == i && s.clients[j].pc < n);
                    if waits {
                        // Not yet: the scenario's order (`after`).
                    } else if (c.pc as usize) < ops.len() {
                        out.push(Action::Start(i));
                    } else if c.hold.is_none() && self.exits {
                        out.push(Action::Exit(i));
                    }
                }
                Main::Call { .. } if on_its_way(&c.main, s.now) => {}
                Main::Call {
                    at, out: o, late, ..
                } => {
                    let steps = o.steps(*at, s.now, self.response_ms, &self.faults, fault);
                    out.extend(steps.map(|c| Action::Call(i, c)));
                    if *o == Outcome::Unsent && !late && fault && self.faults.late {
                        out.push(Action::Late(i));
                    }
                }
                Main::Blocked {
                    served: Some(_), ..
                } => out.push(Action::Popped(i)),
                Main::Blocked { .. } => {
                    if fault && self.faults.cut {
                        out.push(Action::Cut(i));
                    }
                }
                Main::Listening { until, .. } => {
                    if *until <= s.now {
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
            if fault && self.faults.lost_message && crate::looks::owes(&c.looks, 0, s.now) {
                out.push(Action::LoseWatch(i));
            }
            if c.down {
                out.push(Action::SubscriberUp(i));
            } else if fault && self.faults.resubscribe && c.listening && watching(c) {
                out.push(Action::SubscriberDown(i));
            }
        }
        if fault && self.faults.clock_step {
            out.push(Action::StepBack);
        }
        if fault && self.faults.clock_jump {
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
        s.server_sync();
        match *a {
            Action::Start(i) => {
                let op = self.ops[i][s.clients[i].pc as usize];
                let now = s.now;
                let c = &mut s.clients[i];
                c.tokens += 1;
                c.lost_place = false;
                c.told = false;
                let t = c.tokens;
                let kind = match op {
                    Op::Acquire => {
                        c.deadline = None;
                        CallKind::Grant
                    }
                    Op::AcquireFor(d) => {
                        c.deadline = Some(now + d);
                        // A plain wait under a second never blocks
                        // (`blocks_now`; a fair one's place outweighs it).
                        let place = self.fair.then_some(true);
                        if !p::blocks_now(true, place, c.deadline.map(At), At(now)) {
                            CallKind::ByMessage
                        } else {
                            CallKind::Grant
                        }
                    }
                    Op::Try => CallKind::Try,
                    Op::Release => match c.hold.take() {
                        Some(h) => {
                            c.main = Main::Call {
                                kind: CallKind::Release { fence: h.fence },
                                token: h.token,
                                at: now,
                                out: Outcome::Unsent,
                                late: false,
                            };
                            return self.after(s0, s, log);
                        }
                        None => {
                            c.pc += 1;
                            return self.after(s0, s, log);
                        }
                    },
                };
                c.main = Main::Call {
                    kind,
                    token: t,
                    at: now,
                    out: Outcome::Unsent,
                    late: false,
                };
            }
            Action::Call(i, CallStep::Run | CallStep::LoseReply) => {
                let Main::Call { kind, token: t, .. } = s.clients[i].main.clone() else {
                    return Err("run without a call".into());
                };
                let (file, keys, args) = self.call_of(i, &kind, t);
                s.clients[i].told |= kind == CallKind::ByMessage;
                let reply = self.eval(server, &mut s, file, &keys, &args, log);
                let lost = matches!(a, Action::Call(_, CallStep::LoseReply));
                if lost {
                    s.faults += 1;
                    // A late reply: the grant's undo (its release) is
                    // written behind it (`Node::fail`).
                    if matches!(
                        kind,
                        CallKind::Grant | CallKind::AfterPop | CallKind::ByMessage | CallKind::Try
                    ) {
                        // Written behind on the grant's own connection:
                        // with the usual claim window.
                        let undo = self.release_args_with(p::GRANT_CLAIM, i, t, false, None);
                        self.eval(server, &mut s, "lock_release.lua", scripted(), &undo, log);
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
                if let Main::Call { out, .. } = &mut s.clients[i].main {
                    *out = Outcome::Failed;
                }
            }
            Action::Call(i, CallStep::Receive) => self.receive(server, &mut s, i, log)?,
            Action::Popped(i) => self.popped(&mut s, i)?,
            Action::Late(i) => {
                // Counted, but no excuse: a real request is always this
                // late or later.
                s.faults += 1;
                if let Main::Call { late, .. } = &mut s.clients[i].main {
                    *late = true;
                }
            }
            Action::Renew(i) => {
                let Some(h) = s.clients[i].hold.clone() else {
                    return Err("renew without a hold".into());
                };
                let (keys, args) = self.extend_call(i, h.token, h.fence);
                let reply = self.eval(server, &mut s, "lock_extend.lua", &keys, &args, log);
                let now = s.now;
                let c = &mut s.clients[i];
                if let Some(h) = &mut c.hold {
                    let times = (now, now, h.valid_until);
                    match renewed(int(&reply), times, self.lease_ms, self.valid()) {
                        p::Renewed::Extended { until, next } => {
                            h.valid_until = h.valid_until.max(until);
                            h.renew_due = next;
                        }
                        p::Renewed::Retry { at } => h.renew_due = at,
                        // Lost: the guard says so (`renewal::lost`).
                        p::Renewed::Lost | p::Renewed::Expired => {
                            h.valid_until = h.valid_until.min(now)
                        }
                    }
                    if h.valid_until <= now {
                        c.hold = None;
                    }
                }
            }
            Action::Look(i, k) => {
                let l = s.clients[i].looks[k].clone();
                let args = self.watch_args(i, l.waiter);
                let reply = self.eval(server, &mut s, "lock_watch.lua", scripted(), &args, log);
                let now = s.now;
                let c = &mut s.clients[i];
                c.looks.remove(k);
                if let Some((after, left)) = p::next_look(int(&reply).unwrap_or(0), l.left) {
                    c.looks.push(Look {
                        due: now + ms(after),
                        waiter: l.waiter,
                        left,
                        // Made: a later naming no longer moves it
                        // (`Watches::named` finishes only a look
                        // not yet due).
                        watch: false,
                        name: 0,
                        opening: l.opening,
                    });
                    c.looks.sort_by_key(|l| (l.due, l.waiter));
                }
            }
            Action::SubscriberDown(i) => {
                s.faults += 1;
                let c = &mut s.clients[i];
                c.listening = false;
                c.down = true;
            }
            Action::SubscriberUp(i) => {
                let now = s.now;
                let c = &mut s.clients[i];
                c.down = false;
                c.listening = true;
                // `Watches::listening`: every name a waiter of its waits
                // on gets the look a missed naming asked for, unless one
                // is owed already (`NamedLooks::maybe_named`).
                if self.restart_looks && watching(c) {
                    missed_naming(c, now);
                }
            }
            Action::LoseWatch(i) => {
                s.faults += 1;
                let now = s.now;
                crate::looks::lose_naming(&mut s.clients[i].looks, 0, now);
            }
            Action::Crash(i) => {
                s.faults += 1;
                let c = &mut s.clients[i];
                c.life = Life::Crashed;
                c.hold = None;
                c.looks.clear();
                c.main = Main::Idle;
                c.down = false;
            }
            Action::Freeze(i) => {
                s.faults += 1;
                s.clients[i].life = Life::Frozen;
            }
            Action::Resume(i) => s.clients[i].life = Life::Running,
            Action::Cut(i) => {
                // `Node::grant_blocking`: the broken pop is followed by the
                // script alone ('popped'), and the place is lost, with the
                // renewal thread's looks for the blocked waiter
                // (`Acquisition::step`).
                let Main::Blocked { token: t, .. } = s.clients[i].main else {
                    return Err("a cut without a block".into());
                };
                s.cuts += 1;
                let now = s.now;
                let c = &mut s.clients[i];
                // `Acquisition::step`: a cut block takes the place.
                c.lost_place = !p::keeps_place(!c.lost_place, true);
                c.looks.retain(|l| l.waiter.is_none());
                c.main = Main::Call {
                    kind: CallKind::AfterPop,
                    token: t,
                    at: now,
                    out: Outcome::Unsent,
                    late: false,
                };
            }
            Action::Retry(i) => {
                let Main::Listening { token: t, .. } = s.clients[i].main else {
                    return Err("a retry without a wait".into());
                };
                let now = s.now;
                let c = &mut s.clients[i];
                c.heard = false;
                let kind = if c.deadline.is_some_and(|d| now >= d) {
                    CallKind::Leave
                } else {
                    CallKind::ByMessage
                };
                c.main = Main::Call {
                    kind,
                    token: t,
                    at: now,
                    out: Outcome::Unsent,
                    late: false,
                };
            }
            Action::Exit(i) => {
                s.exits += 1;
                let c = &mut s.clients[i];
                c.life = Life::Exited;
                c.looks.clear();
            }
            Action::JumpAhead => {
                // The server's clock steps ahead: what expires meanwhile
                // goes at once.
                s.faults += 1;
                s.offset += self.clock_jump_ms;
                s.server_sync();
            }
            Action::StepBack => {
                // The server's clock steps back a second (an NTP step):
                // fences drawn from it must still grow.
                s.faults += 1;
                s.offset -= 1000;
                s.keys.now_us = (s.now + s.offset) * 1000;
            }
            Action::Tick => {
                let t = self.next_event(&s).ok_or("no event to wait for")?;
                if let Some(since) = s.free_since {
                    let bound = since + ms(self.hand_over_claim()) + 1000;
                    if t > bound {
                        return Err(format!(
                            "liveness: the name was free from {since} ms with a live waiter waiting, \
                             and nobody took it by {bound} ms (the claim + 1 s)"
                        ));
                    }
                    if s.faults == 0 && s.exits == 0 {
                        return Err(format!(
                            "idle time without a cause: the name was free at {since} ms with a live \
                             waiter waiting, no party died, froze, exited or lost a message, and time \
                             passed to {t} ms"
                        ));
                    }
                }
                s.now = t;
                s.server_sync();
                for i in 0..s.clients.len() {
                    if let Main::Blocked {
                        until,
                        served: None,
                        ..
                    } = s.clients[i].main
                    {
                        if until <= s.now && s.clients[i].life != Life::Crashed {
                            self.finish_pop(&mut s, i, None, log);
                        }
                    }
                    let now = s.now;
                    let c = &mut s.clients[i];
                    if c.hold.as_ref().is_some_and(|h| h.valid_until <= now)
                        && c.life == Life::Running
                    {
                        // Lost by time (`LeaseState`): the guard is dead.
                        c.hold = None;
                    }
                }
            }
        }
        self.after(s0, s, log)
    }

    fn check(&self, server: &mut Server, s: &State) -> Result<(), String> {
        self.properties(server, s)
    }

    fn show(&self, s: &State) -> Vec<String> {
        let mut out = vec![format!(
            "t = {} ms (server clock {:+} ms), faults {}, top fence {}, free since {:?}",
            s.now,
            s.offset - 1_000_000_000,
            s.faults,
            s.top_fence,
            s.free_since
        )];
        for (i, c) in s.clients.iter().enumerate() {
            out.push(format!(
                "c{i}: {:?}, op {}/{}, {:?}, hold {:?}, looks {:?}",
                c.life,
                c.pc,
                self.ops[i].len(),
                c.main,
                c.hold,
                c.looks
            ));
        }
        out.extend(s.keys.show().into_iter().map(|l| format!("  {l}")));
        out
    }
}

impl LockModel {
    /// After every step: where the name stands for the live waiters.
    fn after(
        &self,
        _s0: &State,
        mut s: State,
        _log: &mut Option<Vec<String>>,
    ) -> Result<State, String> {
        // A waiter counts whose deadline is past the bound (the claim + 1 s
        // from when the name fell free).
        let bound = s.free_since.unwrap_or(s.now) + ms(self.hand_over_claim()) + 1000;
        let free = self.live_waiter(&s, bound) && !self.taken_by_live(&s);
        s.free_since = if free {
            s.free_since.or(Some(s.now))
        } else {
            None
        };
        Ok(s)
    }
}

/// Whether `c`'s waiter is in its acquisition (blocked, or between its
/// round trips), so that a naming of its client is its to act on (its
/// watch, `Watches::named`).
fn watching(c: &Client) -> bool {
    match &c.main {
        Main::Blocked { .. } | Main::Listening { .. } => true,
        // A claim comes after the wait (`taken_by_pop`).
        Main::Call { kind, .. } => {
            matches!(
                kind,
                CallKind::Grant | CallKind::AfterPop | CallKind::ByMessage
            )
        }
        Main::Idle => false,
    }
}

/// The look a naming of `c`'s client asks for (`looks::named_look`),
/// its looks kept in order.
fn named_look(c: &mut Client, now: i64) {
    crate::looks::named_look(&mut c.looks, 0, now);
    c.looks.sort_by_key(|l| (l.due, l.waiter));
}

/// The look a possibly missed naming asks for
/// (`looks::missed_naming_look`), its looks kept in order.
fn missed_naming(c: &mut Client, now: i64) {
    crate::looks::missed_naming_look(&mut c.looks, 0, now);
    c.looks.sort_by_key(|l| (l.due, l.waiter));
}

/// [`crate::parties::on_its_way`] for a client's main state.
fn on_its_way(main: &Main, now: i64) -> bool {
    match main {
        Main::Call { at, out, late, .. } => crate::parties::on_its_way(*at, out, *late, now),
        _ => false,
    }
}
