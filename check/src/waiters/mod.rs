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
//!
//! Its parts: this file, the model's types and its clients' settings;
//! `replies.rs`, what a client sends and concludes from each reply;
//! `blocking.rs`, the waiter that blocks on its server; `messages.rs`,
//! what wakes a client or names it a watcher; `properties.rs`, the
//! properties judged inside a step; `model.rs`, the actions, steps and
//! checks the search explores.

mod blocking;
mod messages;
mod model;
mod properties;
mod replies;

use crate::keyspace::Keyspace;
use crate::looks::Look;
use crate::parties::{CallStep, Faults, Life, Outcome};
use crate::primitive::Primitive;

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
    /// How far the server's clock jumps ahead at a `ClockJump` fault (as
    /// the lock model's `clock_jump_ms`); 0 where the configuration has
    /// none.
    pub clock_jump_ms: i64,
    /// A popped grant dated from the server's clock alone, without the
    /// cap at the waiter's own reading of its reply
    /// (`protocol::popped::waited`): a wrong rule, for the checker's own
    /// tests (a step ahead during the block has the waiter believe in its
    /// grant past its end).
    pub uncapped_dating: bool,
    /// A subscriber that starts again makes up for the namings it may
    /// have missed with looks (`Watches::listening`), as the library's
    /// does; off, for the checker's own tests.
    pub restart_looks: bool,
    /// A subscriber wakes its client's waiters as it ends and as it
    /// starts again (`listen`'s `notify_all`), as the library's does; off,
    /// for the checker's own tests.
    pub restart_wakes: bool,
    /// Threads whose client's subscriber listens from the start (its
    /// process waited before: `Watches::listening` ran long ago, and
    /// its first wait makes up for no naming); empty: none.
    pub listening: Vec<usize>,
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
    /// The release of the hold of `name` (its fence `fence`); then those
    /// of `left` (name, token, fence), one after another.
    Release {
        name: u8,
        fence: i64,
        left: Vec<(u8, u8, i64)>,
    },
    /// The release with `'leave'`: a waiter gives up.
    Leave,
    /// The acquire script behind a blocking pop (or on its own after a
    /// cut block), `at` the block's sending. A grant it takes has the
    /// short first lease of one taken by a pop from `short` (behind a pop
    /// that took something: the sending plus what the server's clock
    /// read around it says; on its own: its own sending), as
    /// `Node::grant_blocking` and `Node::after_pop` give it; `None` (the
    /// pop timed out, the script behind it granted): the full lease from
    /// the block's sending, extended before the guard is handed out when
    /// a third of it is gone (`Acquisition::step`).
    /// Behind a pop that took something, `short` is the sending plus the
    /// server's clock's difference less the drift, capped at the reply's
    /// reading when the reply is read (`parties::dated`); `served`: when
    /// the pop was served (kept only where the server's clock may jump,
    /// for `Hold::slack`; else 0). `left`: the first lease of a grant
    /// taken so (`POPPED_LEASE`, or where the pop alone took the grant,
    /// the time the grant had left: `pop_took_grant`).
    Popped {
        short: Option<i64>,
        served: i64,
        left: i64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Main {
    Idle,
    Call {
        kind: Kind,
        token: u8,
        at: i64,
        out: Outcome,
        /// Its request reaches the server at `at + 1` (`Faults::late`).
        late: bool,
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
    /// behind it; `seq` orders the blocked (the longest first); `clock`:
    /// the server's clock read before the pop (microseconds).
    Blocked {
        token: u8,
        at: i64,
        until: i64,
        seq: u32,
        clock: Option<i64>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Hold {
    /// Which of the acquisition's names.
    name: u8,
    token: u8,
    /// Its fence (0: none), which a waiter whose pop alone is the grant
    /// puts in its release and renewals (`Alone`).
    fence: i64,
    valid_until: i64,
    renew_due: i64,
    /// How long before `valid_until` the server may let the lease go
    /// without a broken promise: where the server's clock jumped ahead
    /// (`ClockJump`) after the lease was set, the jump (the limit
    /// GUARANTEES states, "Clock jumps"); for a grant popped behind a
    /// block the jump fell in, the time between the pop's serve and the
    /// reading of its reply (the dating's cap, `protocol::popped::waited`,
    /// bounds it by no less); else 0. Kept only where the server's clock
    /// may jump (else always 0, so no state splits on it).
    slack: i64,
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
    /// Its client's subscriber lost its connection and has not started
    /// again yet (`Faults::resubscribe`; kept on the client's first
    /// thread): messages and namings sent now do not reach the client.
    down: bool,
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
    /// When the server's clock jumped ahead (`ClockJump`), if it did.
    jumped: Option<i64>,
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
    /// The server's clock jumps ahead `clock_jump_ms` at once.
    JumpAhead,
    /// Client `i`'s subscriber loses its connection, or starts again.
    SubscriberDown(usize),
    SubscriberUp(usize),
    Exit(usize),
    /// A blocked waiter's connection breaks.
    Cut(usize),
    /// The reply of a blocked waiter's round trip (its pop and the script
    /// behind it, which ran) is lost: it comes too late.
    LosePopped(usize),
    /// The naming that asked for a client's pending look after a
    /// hand-over was lost (a pub/sub message is not delivered for sure).
    LoseWatch(usize),
    /// Client `i`'s request, sent now, reaches the server a millisecond
    /// later (`Faults::late`).
    Late(usize),
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
            fallback_ms: crate::lock::FALLBACK_MS,
            exits: true,
            process: Vec::new(),
            watchdog: true,
            subscriber: Subscriber::Now,
            lease_from_reply: false,
            direct: Vec::new(),
            clock_jump_ms: 0,
            uncapped_dating: false,
            restart_looks: true,
            restart_wakes: true,
            listening: Vec::new(),
        }
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

    /// A moment kept in the state only where the server's clock may jump
    /// ahead (`Hold::slack`); else 0.
    fn if_jumps(&self, t: i64) -> i64 {
        if self.clock_jump_ms > 0 {
            t
        } else {
            0
        }
    }

    /// The slack (`Hold::slack`) of a lease set by a call sent at `at`
    /// (conservative: the call may have run after a jump since).
    fn slack_since(&self, s: &State, at: i64) -> i64 {
        match s.jumped {
            Some(j) if j >= at => self.clock_jump_ms,
            _ => 0,
        }
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
}
