//! Clients whose waiters wait for messages, as the library's waiting loop
//! decides them, for any primitive whose scripts follow the one pattern
//! (an acquire that grants or says how long to wait and registers the
//! waiter, a release that may offer or hand on and publish, a `'leave'`
//! that withdraws, a renewal, a look at the name): the semaphores
//! (`semaphore.rs`) and the read-write lock (`rwlock.rs`) say only their
//! scripts, arguments and properties ([`Primitive`]).
//!
//! A wait shorter than a second never blocks on the server
//! (`wakeup::worth_blocking`), and every wait ends that way. Each client
//! runs its operations (acquire with a deadline, try, release) as
//! `Wakeup::acquire` makes its attempts (one, a second once subscribed,
//! then one at each message or after the busy reply's hint, at most the
//! fallback poll, until the deadline, then the withdrawal of its entry),
//! with its renewal thread's renewals and its look after a release that
//! offered or handed on. A message reaches every subscribed client (it
//! waits in the client's channel until its next wait: the attempt before
//! that wait drains it, `Wakeup::acquire`'s "stale wake-up"), or is lost
//! (a fault).
//!
//! Several threads may share one client (`process`): they share its id
//! (in their messages) and its life, and queue locally as the library's
//! local queue makes them (`wakeup::lines`: a thread that finds another of
//! its client waiting does not try first, but waits until it is the head;
//! a message, or the client's own release, wakes each client's head only;
//! a head that leaves wakes the next).
//!
//! A client may be frozen (SIGSTOP, a long pause: all its threads, its
//! renewal thread and subscriber with them; messages wait in its socket
//! until it resumes, and its timers fire late), and the server's clock may
//! step back a second.
//!
//! A client whose server grants directly (`WaitModel::direct`: its ACL
//! allows the blocking pop) blocks on the server while a second or more
//! of its wait is left (`protocol::blocking::worth_blocking`): in a
//! `BLMOVE` from the name's open list into its own, with its acquire
//! script pipelined behind (`Node::grant_blocking`), which the server runs
//! as soon as the pop returns or times out; Redis serves the connection
//! blocked longest first. Its renewal thread looks for it (the watch
//! script with its member) from when the holder's lease would end, and a
//! hand-over that names its client as a watcher replaces the pending
//! watch with a look at the name after the claim (src/wakeup/watch.rs).
//! A blocked client that crashed is never served; a frozen one is (its
//! script was sent), and reads the reply when it resumes. A block may be
//! cut (the connection breaks): the script then runs on its own. The
//! reply of the blocking round trip may come too late (`LosePopped`):
//! the undo queued behind it runs and the client retires its token, as
//! after any grant's late reply. Not modelled for these waiters: a lost
//! naming of watchers.
//!
//! Liveness, bounded: while no message or call was lost, a name whose free
//! permits fit every live waiter with a deadline past the bound goes to
//! one within the claim + 1 s (`Primitive::fits`), whoever died, froze or
//! exited.

use redlease::__protocol as p;

use crate::keyspace::{Keyspace, Reply};
use crate::parties::{
    busy, int, ms, time_may_pass, watch_waiter, CallStep, Faults, Life, Look, Outcome,
};
use crate::primitive::{Arrival, Direct, Holder, Primitive, Script};
use crate::probes::SERVER_OFFSET;
use crate::search::Model;
use crate::server::Server;

/// What one client does, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitOp {
    /// An acquisition with a timeout of this many milliseconds (under a
    /// second: it waits for messages).
    AcquireFor(i64),
    /// A `try_*` acquisition.
    Try,
    /// The guard's `release()` (nothing when the op before got none).
    Release,
    /// The guard's `extend(ms)`, shorter than the lease (the hold kept):
    /// the library's look at its new end (`Holding::extend`).
    Shorten(i64),
}

pub struct WaitModel<P: Primitive> {
    pub prim: P,
    /// Each client's role (what it asks for) and its operations.
    pub ops: Vec<(P::Mode, Vec<WaitOp>)>,
    pub faults: Faults,
    pub lease_ms: i64,
    pub horizon_ms: i64,
    pub response_ms: i64,
    /// The client's fallback poll (`ClientBuilder::fallback_poll`).
    pub fallback_ms: i64,
    pub exits: bool,
    /// Each thread's client (empty: every thread its own client).
    pub process: Vec<usize>,
    /// Holds are renewed by the watchdog (else a fixed lease).
    pub watchdog: bool,
    /// Whom a client's announcement wakes (the library's rule, or an old
    /// one, kept for the checker's own tests).
    pub subscriber: Subscriber,
    /// A lease counted from when its grant's reply is read, not from when
    /// the request was sent (`LeaseState`'s rule): a wrong rule, for the
    /// checker's own tests (a client frozen between the two believes in
    /// a lease the server has let go).
    pub lease_from_reply: bool,
    /// Which threads' servers grant directly (their waiters block while
    /// a second or more is left, and watch hand-overs); empty: none.
    pub direct: Vec<bool>,
}

/// Whom an announcement of a key (a message, or a release of the client's
/// own) wakes among the client's waiting threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subscriber {
    /// Each local line's head, and every thread that tried the server
    /// before it joined the line (`wakeup::lines::announced`).
    Now,
    /// The rule before the checker found a writer that tried behind its
    /// own client's reader deaf to its hand-over: heads only.
    HeadsOnly,
    /// The rule before round 4: messages carrying the client's own id
    /// dropped, taken for releases whose local waiters were woken
    /// directly.
    DropsOwn,
    /// The rule before a client's first wait was found deaf to namings
    /// sent before its subscriber listened: nothing made up for them when
    /// it starts.
    NoMakeUp,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Kind {
    /// Every name at once (`Primitive::acquire_all`).
    All,
    /// The acquire script, for the current name, of a waiter that waits
    /// for messages (or a try).
    Grant { queue: bool },
    /// The release of the hold of `name`; then those of `left` (name,
    /// token), one after another.
    Release { name: u8, left: Vec<(u8, u8)> },
    /// The release with `'leave'`: a waiter gives up.
    Leave,
    /// The acquire script behind a blocking pop (or on its own after a
    /// cut block), `at` the block's sending: a grant it takes has the
    /// short first lease of one taken by a pop.
    Popped,
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
    /// Waiting in the client's local queue for its turn (or the deadline).
    Local {
        token: u8,
    },
    /// Blocked in `BLMOVE open own` since `at`, until `until`, its script
    /// behind it; `seq` orders the blocked (the longest first).
    Blocked {
        token: u8,
        at: i64,
        until: i64,
        seq: u32,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Hold {
    /// Which of the acquisition's names.
    name: u8,
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
    /// A message reached this client's channel since its last attempt.
    inbox: bool,
    main: Main,
    /// The name its acquisition waits for now.
    name: u8,
    holds: Vec<Hold>,
    looks: Vec<Look>,
    /// Tokens retired after a lost reply, withdrawn when the wait ends.
    retired: Vec<u8>,
    /// A hand-over named this client while it was frozen: its subscriber
    /// reads the naming when it resumes.
    named: bool,
    /// Its client's subscriber listens (kept on the client's first
    /// thread): started by a thread's first busy reply, or its first
    /// subscription; namings sent before then are not heard.
    listening: bool,
    /// Its place in its client's local queue (`Membership::join`).
    queued: Option<u32>,
    /// It tried the server before it joined the local queue.
    tried: bool,
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
    /// The largest fence the server has named, per name.
    top_fence: Vec<i64>,
    /// Every hold's name, fence and owner (client, token).
    fences: Vec<(u8, i64, (u8, u8))>,
    /// A property broken inside a step (reported by `check`).
    broken: Option<String>,
    /// The local queues' order.
    seq: u32,
    /// Since when a waiting thread's attempt would have been granted.
    idle_since: Option<i64>,
    /// Since when what is free has fitted every live waiter (bounded
    /// liveness).
    free_since: Option<i64>,
    /// A message or a call was lost (the bounded liveness rests on
    /// messages, and a lost call is noticed a response timeout later).
    lost: bool,
}

/// A waiter as it stood before a script ran (see `WaitModel::queued`).
struct Queued {
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

#[derive(Clone, Debug)]
pub enum Action {
    Start(usize),
    /// A step of client `i`'s call in flight.
    Call(usize, CallStep),
    Message(usize),
    LoseMessage(usize),
    Retry(usize),
    Renew(usize),
    Look(usize, usize),
    /// A thread waiting in its local queue is now the head: it attempts.
    Head(usize),
    Crash(usize),
    /// Client `i`'s process is stopped (every thread of it), or resumes.
    Freeze(usize),
    Resume(usize),
    /// The server's clock steps back a second (an NTP step).
    StepBack,
    Exit(usize),
    /// A blocked waiter's connection breaks.
    Cut(usize),
    /// The reply of a blocked waiter's round trip (its pop and the script
    /// behind it, which ran) is lost: it comes too late.
    LosePopped(usize),
    Tick,
}

impl<P: Primitive> WaitModel<P> {
    /// The configurations' defaults: the lease the lock's configurations
    /// use (`LockModel::default_lease`), a 12 s horizon, 2 s response timeout and fallback poll,
    /// clients that exit when done, one thread a client, the watchdog, the
    /// library's subscriber.
    pub fn new(prim: P, ops: Vec<(P::Mode, Vec<WaitOp>)>, faults: Faults) -> WaitModel<P> {
        WaitModel {
            prim,
            ops,
            faults,
            lease_ms: 3_000,
            horizon_ms: 12_000,
            response_ms: 2_000,
            fallback_ms: 2_000,
            exits: true,
            process: Vec::new(),
            watchdog: true,
            subscriber: Subscriber::Now,
            lease_from_reply: false,
            direct: Vec::new(),
        }
    }

    /// Whether thread `i`'s waiters block on its server: the server grants
    /// directly (for its primitive), and what it asks can be granted so
    /// (a read-write lock's readers wait for messages).
    fn grants_directly(&self, s: &State, i: usize) -> bool {
        self.direct.get(i).copied().unwrap_or(false)
            && self.prim.blocks(self.at(i, s.clients[i].name))
    }

    /// Whether thread `i`'s acquisition blocks on the server now
    /// (`blocks_now`: its server grants directly, and a second or more of
    /// its wait is left). Strictly more here: the library's clock has
    /// moved on by the time it asks (a block ends its last second before
    /// the deadline, and the attempt behind it is made after that).
    fn blocks_now(&self, s: &State, i: usize, at: i64) -> bool {
        self.grants_directly(s, i) && s.clients[i].deadline - at > crate::lock::SHORT_WAIT
    }

    /// Whether a busy reply read now blocks thread `i` again: a
    /// millisecond or more is left to block before its last second
    /// (`block_for`; else it waits for messages from now on).
    fn blocks_again(&self, s: &State, i: usize) -> bool {
        self.grants_directly(s, i) && s.clients[i].deadline - s.now > crate::lock::SHORT_WAIT
    }

    /// Client `i`'s blocking round trip: its pop and its script.
    fn direct_of(&self, s: &State, i: usize, t: u8, popped: bool) -> Option<Direct> {
        let mode = self.at(i, s.clients[i].name);
        self.prim.direct(self, i, mode, t, popped)
    }

    /// Blocks in the pop (served at once if the open list has an offer),
    /// its block ending a second before its deadline
    /// (`protocol::blocking::block_for`); the renewal thread looks for it
    /// from when the holder's lease would end (`Acquisition::on_busy`).
    /// `at`: when the call whose busy reply said `wait` was sent.
    #[allow(clippy::too_many_arguments)]
    fn block(
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
        c.main = Main::Blocked {
            token: t,
            at: now,
            until,
            seq: s.seq,
        };
        self.listen(s, i);
        self.serve(server, s, log);
    }

    /// The server serves blocked pops whose list has an offer, the
    /// connection blocked longest first, each with its script behind.
    fn serve(&self, server: &mut Server, s: &mut State, log: &mut Option<Vec<String>>) {
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
    /// timed out) and its script runs behind it; the reply waits to be
    /// read.
    fn popped(
        &self,
        server: &mut Server,
        s: &mut State,
        i: usize,
        pop: bool,
        log: &mut Option<Vec<String>>,
    ) {
        let Main::Blocked { token: t, at, .. } = s.clients[i].main else {
            return;
        };
        let Some(d) = self.direct_of(s, i, t, true) else {
            return;
        };
        if pop {
            let moved = s.keys.lmove(&d.open, &d.own);
            if let Some(log) = log {
                log.push(format!("c{i}'s BLMOVE served: {moved:?}"));
            }
        }
        // Its state first: the script's own offers serve the next blocked.
        s.clients[i].main = Main::Call {
            kind: Kind::Popped,
            token: t,
            at,
            out: Outcome::Unsent,
        };
        let reply = self.eval(server, s, d.grant, log);
        if let Main::Call { out, .. } = &mut s.clients[i].main {
            *out = Outcome::Ran(reply);
        }
    }

    /// A hand-over names its watchers (`@c1:{s}:sem`, lua/publish.lua
    /// `name_watchers`): a named client whose server grants directly and
    /// which is in an acquisition replaces its pending watch with a look
    /// at the name after the claim (`Watches::on_message`). A frozen
    /// client's subscriber reads it when the client resumes.
    fn hear_watchers(&self, s: &mut State, id: &[u8]) {
        let Some(pid) = std::str::from_utf8(id)
            .ok()
            .and_then(|id| id.strip_prefix('c'))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&pid| self.threads(s, pid).next().is_some())
        else {
            return;
        };
        let first = self.threads(s, pid).next().unwrap_or(pid);
        if !s.clients[first].listening {
            return; // sent before its subscriber listened
        }
        match s.clients[first].life {
            Life::Frozen => s.clients[first].named = true,
            Life::Running => self.read_naming(s, pid),
            Life::Crashed | Life::Exited => {}
        }
    }

    /// Thread `i`'s client starts its subscriber, if it was not listening
    /// yet: namings sent before went unheard, so each name a blocked
    /// waiter of the client waits on gets the look a naming asks for
    /// (`Watches::listening`).
    fn listen(&self, s: &mut State, i: usize) {
        let pid = self.pid(i);
        let first = self.threads(s, pid).next().unwrap_or(i);
        if !s.clients[first].listening {
            s.clients[first].listening = true;
            // `NamedLooks::maybe_named`: never moves a look owed already.
            let owed = self
                .threads(s, pid)
                .any(|j| s.clients[j].looks.iter().any(|l| l.watch));
            if self.subscriber != Subscriber::NoMakeUp && !owed {
                self.read_naming(s, pid);
            }
        }
    }

    /// Client `pid`'s subscriber reads a naming: the look it asks for.
    fn read_naming(&self, s: &mut State, pid: usize) {
        let now = s.now;
        let Some(j) = self.threads(s, pid).find(|&j| {
            let c = &s.clients[j];
            c.life == Life::Running
                && self.grants_directly(s, j)
                && match &c.main {
                    Main::Blocked { .. } | Main::Waiting { .. } | Main::Local { .. } => true,
                    Main::Call { kind, .. } => {
                        matches!(kind, Kind::Grant { queue: true } | Kind::Popped)
                    }
                    Main::Idle => false,
                }
        }) else {
            return;
        };
        let c = &mut s.clients[j];
        crate::parties::named_look(&mut c.looks, c.name, now);
    }

    /// Thread `i` waits for its name (in any of the waiting states), with
    /// a deadline past `bound`, alive and running.
    fn live_waiter(&self, c: &Client, bound: i64) -> bool {
        c.life == Life::Running
            && c.deadline > bound
            && match &c.main {
                Main::Blocked { .. } | Main::Waiting { .. } | Main::Local { .. } => true,
                Main::Call { kind, .. } => {
                    matches!(kind, Kind::Grant { queue: true } | Kind::Popped)
                }
                Main::Idle => false,
            }
    }

    /// After every step: since when what is free has fitted every live
    /// waiter whose deadline is past the bound (the claim + 1 s from then).
    fn free_since(&self, s: &mut State) {
        let bound = s.free_since.unwrap_or(s.now) + ms(p::GRANT_CLAIM) + 1000;
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

    /// The registration of a waiter that waits for messages
    /// (`Wakeup::entry_life`).
    pub fn entry_ms(&self, patient: bool) -> i64 {
        self.fallback(patient) * 3 + 1000
    }

    /// `Wakeup::fallback_for`: a patient waiter polls every 30 s at most.
    fn fallback(&self, patient: bool) -> i64 {
        if patient {
            self.fallback_ms.max(30_000)
        } else {
            self.fallback_ms
        }
    }

    fn mode(&self, i: usize) -> P::Mode {
        self.ops[i].0
    }

    /// What client `i` asks of its name `k`.
    fn at(&self, i: usize, k: u8) -> P::Mode {
        self.prim.at(self.mode(i), k)
    }

    /// The client thread `i` belongs to.
    pub fn pid(&self, i: usize) -> usize {
        self.process.get(i).copied().unwrap_or(i)
    }

    /// Threads of one client.
    fn threads(&self, s: &State, pid: usize) -> impl Iterator<Item = usize> + '_ {
        let n = s.clients.len();
        (0..n).filter(move |&j| self.pid(j) == pid)
    }

    /// The head of client `pid`'s local queue.
    fn head(&self, s: &State, pid: usize) -> Option<usize> {
        self.threads(s, pid)
            .filter_map(|j| s.clients[j].queued.map(|q| (q, j)))
            .min()
            .map(|(_, j)| j)
    }

    /// Wakes client `pid`'s head, and its threads that tried first
    /// (`Lines::notify`), of those `waits` says wait for what was
    /// announced (given what each asks, and of which name): a message, or
    /// a release of its own.
    fn wake(&self, s: &mut State, pid: usize, waits: impl Fn(P::Mode, u8) -> bool) {
        let head = self.head(s, pid);
        for j in (0..s.clients.len()).filter(|&j| self.pid(j) == pid) {
            let name = s.clients[j].name;
            let mode = self.at(j, name);
            let c = &mut s.clients[j];
            let tried = c.tried && self.subscriber != Subscriber::HeadsOnly;
            // A frozen client's subscriber reads it when it resumes.
            if matches!(c.life, Life::Running | Life::Frozen)
                && c.subscribed
                && (head == Some(j) || tried)
                && waits(mode, name)
            {
                c.inbox = true;
            }
        }
    }

    fn eval(
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
        for m in &ran.published {
            if let Some((id, _)) = p::hand_over(&m.message) {
                self.hear_watchers(s, id);
                continue;
            }
            let from = m.message.split(|&c| c == b':').next().unwrap_or_default();
            let pids: Vec<usize> = (0..s.clients.len()).map(|j| self.pid(j)).collect();
            for pid in pids {
                if self.subscriber == Subscriber::DropsOwn && from == format!("c{pid}").as_bytes() {
                    continue;
                }
                self.wake(s, pid, |mode, _| self.prim.wakes(&m.message, mode));
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

    /// Before a script runs, for the arrival-order check: each client in
    /// an acquisition (or a try) whose primitive promises that order,
    /// where it is served, its place in the queue (if queued) and what
    /// the holder key said. Empty once a fault or an exit excuses the
    /// order.
    fn queued(&self, s: &State) -> Vec<Queued> {
        if s.faults > 0 || s.exits > 0 || s.broken.is_some() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, c) in s.clients.iter().enumerate() {
            let (t, blocked, popped) = match &c.main {
                Main::Waiting { token, .. } => (*token, false, false),
                Main::Blocked { token, .. } => (*token, true, false),
                Main::Call {
                    kind: kind @ (Kind::Grant { .. } | Kind::Popped),
                    token,
                    ..
                } => (*token, false, *kind == Kind::Popped),
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
    fn arrival_order(&self, s: &mut State, queued: &[Queued]) {
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

    /// The next call; an attempt drains the channel first (it sees the
    /// state the messages announced).
    fn call(&self, s: &mut State, i: usize, kind: Kind, t: u8) {
        let c = &mut s.clients[i];
        if matches!(kind, Kind::Grant { .. }) {
            c.inbox = false;
        }
        c.main = Main::Call {
            kind,
            token: t,
            at: s.now,
            out: Outcome::Unsent,
        };
    }

    /// A grant whose outcome is unknown (a lost request or reply): retired
    /// with its undo behind it, a new token tries again
    /// (`Acquisition::on_error`), or the wait ends.
    fn retire(&self, s: &mut State, i: usize, t: u8) {
        let now = s.now;
        let c = &mut s.clients[i];
        c.retired.push(t);
        c.looks.retain(|l| l.waiter.is_none());
        c.tokens += 1;
        let fresh = c.tokens;
        if now >= c.deadline {
            self.call(s, i, Kind::Leave, fresh);
        } else {
            self.call(s, i, Kind::Grant { queue: true }, fresh);
        }
    }

    /// The wait's end: its retired tokens' entries withdrawn (`clean_up`).
    fn finish(&self, server: &mut Server, s: &mut State, i: usize, log: &mut Option<Vec<String>>) {
        let mode = self.at(i, s.clients[i].name);
        for t in std::mem::take(&mut s.clients[i].retired) {
            let run = self.prim.release(self, i, mode, t, true);
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
    fn hold(
        &self,
        s: &mut State,
        i: usize,
        k: u8,
        t: u8,
        fence: i64,
        at: i64,
        first: Option<i64>,
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
        s.clients[i].holds.push(Hold {
            name: k,
            token: t,
            valid_until: from + lease - 1,
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
    fn new_hold(
        &self,
        s: &mut State,
        i: usize,
        t: u8,
        fence: i64,
        at: i64,
        first: Option<i64>,
    ) -> Result<(), String> {
        let k = s.clients[i].name;
        self.hold(s, i, k, t, fence, at, first)?;
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
    fn give_back(
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
                        self.hold(s, i, k as u8, t, int(f).unwrap_or(0), at, None)?;
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
                    self.new_hold(s, i, t, fence, at, None)?;
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
                None => self.retire(s, i, t),
            },
            Kind::Popped => match reply {
                Some(Reply::Int(fence)) => {
                    // `taken_by_pop`: its first lease is the popped one
                    // (`POPPED_LEASE`), from the block's sending; after a
                    // long block one extension sets the full lease first.
                    self.finish(server, s, i, log);
                    let first = self.lease_ms.min(ms(p::POPPED_LEASE)) - 1;
                    if self.watchdog && now - at < first / 3 {
                        self.new_hold(s, i, t, fence, at, Some(first))?;
                    } else {
                        let run = self.prim.extend(self, i, mode, t, self.lease_ms, false);
                        match int(&self.eval(server, s, run, log)) {
                            Some(1) => self.new_hold(s, i, t, fence, now, None)?,
                            _ => self.new_hold(s, i, t, fence, at, Some(first))?,
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
                None => self.retire(s, i, t),
            },
            Kind::Release { name, left } => {
                if matches!(reply.as_ref().and_then(int), Some(1 | 2)) {
                    // The client's own waiters of that name are woken
                    // directly.
                    self.wake(s, self.pid(i), |_, waits_for| waits_for == name);
                }
                if reply.as_ref().and_then(int) == Some(2) {
                    // Offered or handed on: a look after the claim
                    // (`look_after_hand_over`).
                    let due = (at + ms(p::NAME_LOOK_AFTER) + ms(p::LOOK_MARGIN))
                        .min(at + ms(p::LOOK_MAX));
                    s.clients[i].looks.push(Look {
                        due,
                        waiter: None,
                        left: p::NAME_LOOKS,
                        watch: false,
                        name,
                    });
                }
                match left.split_first() {
                    Some((&(name, t), rest)) => {
                        let left = rest.to_vec();
                        self.call(s, i, Kind::Release { name, left }, t);
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

    fn next_event(&self, s: &State) -> Option<i64> {
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
                _ => {}
            }
        }
        t.into_iter().filter(|&x| x > s.now).min()
    }

    fn urgent(&self, s: &State) -> bool {
        s.clients.iter().enumerate().any(|(i, c)| {
            c.life == Life::Running
                && (c.holds.iter().any(|h| h.renew_due <= s.now)
                    || c.looks.iter().any(|l| l.due <= s.now)
                    || match &c.main {
                        Main::Call { at, out, .. } => out.due(*at, s.now, self.response_ms),
                        Main::Waiting { until, .. } => *until <= s.now || c.inbox,
                        Main::Local { .. } => {
                            c.deadline <= s.now || self.head(s, self.pid(i)) == Some(i)
                        }
                        Main::Idle | Main::Blocked { .. } => false,
                    })
        })
    }

    /// No idle time without a cause: while no party died, exited or lost
    /// a message, time passes at most the look margin (a look at a lease
    /// that ended without a release, `LOOK_MARGIN` after its end) while a
    /// waiting client's next attempt would be granted (else it was owed a
    /// message, or its hint was too long). Called as time passes to `to`.
    fn idle(&self, server: &mut Server, s: &mut State, to: i64) -> Result<(), String> {
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

    /// The guard's `extend(lease)` (`Holding::extend`): the lease set
    /// exactly, and a look at the name at its new end.
    fn shorten(
        &self,
        server: &mut Server,
        s: &mut State,
        i: usize,
        t: u8,
        lease: i64,
        log: &mut Option<Vec<String>>,
    ) {
        let name = s.clients[i].holds.first().map_or(0, |h| h.name);
        let run = self.prim.extend(self, i, self.at(i, name), t, lease, true);
        let reply = self.eval(server, s, run, log);
        let now = s.now;
        let c = &mut s.clients[i];
        if int(&reply) != Some(1) {
            c.holds.retain(|h| h.name != name);
            return;
        }
        for h in c.holds.iter_mut().filter(|h| h.name == name) {
            h.valid_until = now + lease - 1;
        }
        c.looks.push(Look {
            due: (now + lease - 1 + ms(p::LOOK_MARGIN)).min(now + ms(p::LOOK_MAX)),
            waiter: None,
            left: p::NAME_LOOKS,
            watch: false,
            name,
        });
    }

    /// A waiting thread whose attempt would be granted now.
    fn granted_now(&self, server: &mut Server, s: &State) -> Option<usize> {
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

impl<P: Primitive> Model for WaitModel<P> {
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
                    subscribed: false,
                    inbox: false,
                    main: Main::Idle,
                    name: 0,
                    holds: Vec::new(),
                    looks: Vec::new(),
                    retired: Vec::new(),
                    named: false,
                    listening: false,
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
                    out.push(Action::Call(i, CallStep::Run));
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
                Main::Call {
                    at, out: o, kind, ..
                } => {
                    let steps = o.steps(*at, s.now, self.response_ms, &self.faults, fault);
                    out.extend(steps.map(|c| Action::Call(i, c)));
                    if let (Kind::Popped, Outcome::Ran(_), true) =
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
                        let holds: Vec<(u8, u8)> =
                            c.holds.drain(..).map(|h| (h.name, h.token)).collect();
                        match holds.split_first() {
                            Some((&(name, t), rest)) => {
                                let left = rest.to_vec();
                                self.call(&mut s, i, Kind::Release { name, left }, t);
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
                    Kind::Popped => direct(true)?,
                    Kind::Release { name, .. } => {
                        self.prim.release(self, i, self.at(i, *name), t, false)
                    }
                    Kind::Leave => self.prim.release(self, i, mode, t, true),
                };
                let reply = self.eval(server, &mut s, run, log);
                let lost = matches!(a, Action::Call(_, CallStep::LoseReply));
                if lost {
                    s.faults += 1;
                    s.lost = true;
                    if let Kind::Grant { queue: true } | Kind::Popped = kind {
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
                let run =
                    self.prim
                        .extend(self, i, self.at(i, h.name), h.token, self.lease_ms, false);
                let reply = self.eval(server, &mut s, run, log);
                let c = &mut s.clients[i];
                if int(&reply) == Some(1) {
                    for g in c.holds.iter_mut().filter(|g| g.name == h.name) {
                        g.valid_until = g.valid_until.max(now + self.lease_ms - 1);
                        g.renew_due = now + self.lease_ms / 3;
                    }
                } else {
                    c.holds.retain(|g| g.name != h.name);
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
            Action::Cut(i) => {
                // Closing the connection ends the pop; the script is sent
                // on its own (`grant_blocking`'s "not blocked").
                s.faults += 1;
                let Main::Blocked { token, .. } = s.clients[i].main else {
                    return Err("cut without a block".into());
                };
                self.call(&mut s, i, Kind::Popped, token);
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
                    let bound = since + ms(p::GRANT_CLAIM) + 1000;
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
                holds.map(move |h| (i, self.at(i, h.name), h.token))
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
