//! Waiting for a release without polling.
//!
//! Each client has one subscriber connection (started on the first wait) on
//! one channel; every release publishes `<publisher id>:<key>` there. Threads
//! of one client that wait for the same key queue locally in arrival order;
//! only the head of that queue retries in Redis, and it is woken by the
//! release message (or directly, when the releasing thread is in the same
//! client). A bounded fallback wait covers lost messages and reconnects.
//! A hand-over also tells the clients that look at the name after its
//! claim, each on a channel of its own (see [`watch`]); that wakes nobody.
//! On a Redis 7 Cluster the channel is per name instead, in the name's slot,
//! and subscribed on its master only while someone waits on it (see
//! [`sharded`]).
//!
//! The local queue is what keeps contention fair and cheap: a thread that
//! releases and immediately asks again queues behind the threads already
//! waiting instead of winning every race against their wake-up.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::backend::Backend;
use crate::error::Result;
use crate::util::mutex::lock;

mod deadlines;
mod lines;
mod sharded;
mod subscriber;
mod watch;

use crate::protocol::blocking::{block_for, block_tail, Place};
use crate::protocol::delivery::{heard, release_message, Heard};
use crate::protocol::looks::watches_hand_overs;
pub(crate) use crate::protocol::tries::Attempt;
use crate::protocol::tries::{Step, Tries};
pub(crate) use deadlines::{blocks_now, deadline_after, waited};
pub(crate) use lines::Turns;
use lines::{Membership, Queues, Waiter};
use sharded::Shards;
use subscriber::subscriber;
pub(crate) use watch::OnHandOver;
use watch::Watches;

/// How long the subscriber waits before asking again for a channel the
/// server refused (an ACL).
const REFUSED_RETRY: Duration = Duration::from_secs(10);

/// How long a waiter whose wake-up is an announcement (a latch's opening)
/// sleeps between looks at least: its registration only decides whether
/// the opening is published, and a subscription either delivers the
/// announcement or is lost and made again, which wakes every waiter to
/// look (so the look only guards against what cannot be seen). Its
/// registration lives three of these and a second.
pub(crate) const ANNOUNCED_LOOK: Duration = Duration::from_secs(30);

/// How long the subscriber blocks in one read before checking for shutdown.
const SUBSCRIBER_TICK: Duration = Duration::from_millis(200);

/// One wait, as [`Wakeup::acquire`] runs it.
pub(crate) struct Wait<'a> {
    /// The key whose releases wake the waiter (and its messages name).
    pub(crate) key: &'a [u8],
    pub(crate) turns: Turns,
    pub(crate) deadline: Option<Instant>,
    /// Skip this client's local queue (a downgrade must not wait behind
    /// waiters that wait for itself).
    pub(crate) jump: bool,
    /// The caller's own look, just made, found the key busy (a latch
    /// reads its round before it knows what to wait on): that was the
    /// first attempt, so the loop makes none before it waits, and the
    /// first one blocks at once where waiting is direct.
    pub(crate) looked: bool,
    /// Block on the server for a direct grant, this long per round trip.
    pub(crate) direct: Option<Duration>,
    /// The waiter's turn is its place among the blocked (a fair lock):
    /// it blocks until the deadline however near it is, rather than wait
    /// for messages for its last `SHORT_WAIT` (see
    /// `protocol::blocking::worth_blocking`), which would lose its turn to
    /// any later blocked waiter; such a wait may end up to a server clock
    /// tick late. Once the place is lost (a block cut short), it waits for
    /// messages for the rest of its wait (see [`Place`]).
    pub(crate) place: Option<&'a Place>,
    /// Set when an announcement of `key` (a message, or a local notify)
    /// arrived, as opposed to a nudge or a timeout: for keys that name a
    /// single event (a latch round opening), the announcement itself is
    /// the answer. Such a waiter looks every [`ANNOUNCED_LOOK`].
    pub(crate) signalled: Option<&'a std::cell::Cell<bool>>,
    /// The waiter's registration only decides whether a release publishes
    /// (readers): it looks every [`ANNOUNCED_LOOK`] too, or when what
    /// blocks it ends.
    pub(crate) patient: bool,
    /// While it blocks on the server: what its client does when a
    /// hand-over names it as a watcher (see [`watch`]).
    pub(crate) watch: Option<OnHandOver>,
}

#[derive(Default)]
struct SubState {
    started: bool,
    connected: bool,
}

struct Shared {
    channel: Vec<u8>,
    me: String,
    /// Waiters by (key, server-ordered).
    queues: Mutex<Queues>,
    sub: Mutex<SubState>,
    sub_changed: Condvar,
    shutdown: AtomicBool,
    fallback: Duration,
    outage_tolerance: Duration,
    /// Wake-ups delivered by the subscriber (for tests and diagnostics).
    delivered: AtomicU64,
    /// Sharded subscriptions (Cluster), instead of the subscriber.
    shards: Shards,
    /// The keys our blocked waiters wait on, for hand-over messages.
    watches: Watches,
}

/// The wake-up service of one client.
pub(crate) struct Wakeup {
    shared: Arc<Shared>,
    backend: Arc<Backend>,
}

impl Wakeup {
    pub(crate) fn new(
        backend: Arc<Backend>,
        channel: Vec<u8>,
        me: String,
        fallback: Duration,
        outage_tolerance: Duration,
    ) -> Wakeup {
        Wakeup {
            shared: Arc::new(Shared {
                channel,
                me,
                queues: Mutex::new(HashMap::new()),
                sub: Mutex::new(SubState::default()),
                sub_changed: Condvar::new(),
                shutdown: AtomicBool::new(false),
                fallback,
                outage_tolerance,
                delivered: AtomicU64::new(0),
                shards: Shards::new(),
                watches: Watches::new(&backend),
            }),
            backend,
        }
    }

    /// How long callers ride out an outage (`ClientBuilder::outage_tolerance`).
    pub(crate) fn outage_tolerance(&self) -> Duration {
        self.shared.outage_tolerance
    }

    /// The channel a release of `key` publishes on: the client's channel,
    /// or on a sharded cluster that channel followed by `key`'s hash tag,
    /// so that it lies in the key's slot (lua/publish.lua sends a channel
    /// with a `{`, which a key prefix never has, with `SPUBLISH`).
    pub(crate) fn channel(&self, key: &[u8]) -> std::borrow::Cow<'_, [u8]> {
        let base = &self.shared.channel;
        match hash_tag(key).filter(|_| self.backend.sharded()) {
            Some(tag) => [base.as_slice(), b":", tag].concat().into(),
            None => base.as_slice().into(),
        }
    }

    /// The message a release of `key` publishes.
    pub(crate) fn message(&self, key: &[u8]) -> Vec<u8> {
        release_message(&self.shared.me, key)
    }

    /// Wakes this client's head waiter for `key` (after a local release; the
    /// published message from ourselves is then ignored).
    pub(crate) fn notify_local(&self, key: &[u8]) {
        self.shared.notify(key);
    }

    /// The longest a waiter sleeps without a wake-up when the wake-up is an
    /// announcement (see [`ANNOUNCED_LOOK`]), or otherwise.
    pub(crate) fn fallback_for(&self, announced: bool) -> Duration {
        if announced {
            self.shared.fallback.max(ANNOUNCED_LOOK)
        } else {
            self.shared.fallback
        }
    }

    /// How long the registration of a waiter that waits for messages
    /// lives (a queue entry, a reader's or a latch waiter's): it renews it
    /// at each retry, so three of its longest sleeps and a second of room.
    pub(crate) fn entry_life(&self, announced: bool) -> Duration {
        self.fallback_for(announced) * 3 + Duration::from_secs(1)
    }

    /// Number of wake-ups the subscriber has delivered so far.
    pub(crate) fn delivered(&self) -> u64 {
        self.shared.delivered.load(Ordering::Relaxed)
    }

    /// Counts a wake-up that came as a direct grant (the waiter popped it
    /// itself, without the subscriber).
    pub(crate) fn delivered_directly(&self) {
        self.shared.delivered.fetch_add(1, Ordering::Relaxed);
        crate::metrics::wakeup();
    }

    /// Stops the subscriber thread and the sharded links' readers (the
    /// client is being dropped).
    pub(crate) fn shutdown(&self) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.shards.close();
    }

    /// The waiting loop every primitive shares, for `wait` (see [`Wait`]).
    /// `attempt` is one round trip that either acquires or reports how
    /// long the holder may keep it; it must be safe to repeat (every
    /// granting script re-grants the same hold to the same token). Returns
    /// `None` when the deadline passes first (`Some(now)` = try once).
    ///
    /// With `direct` (a slice), the attempt is told to block on the server
    /// for a direct grant, at most that long per round trip
    /// (`attempt(Some(d))`): the head waiter learns of its grant in its own
    /// reply, and no release message is involved. Without it, waiters
    /// sleep until a release message (or the fallback wait) and retry.
    ///
    /// Outcomes: a reply decides; an attempt whose connection broke at once
    /// (it may have run) is repeated at once to learn the outcome; a server
    /// that cannot be reached is ridden out for up to the outage tolerance
    /// by a caller willing to wait, and reported at once by `try_*`. An
    /// error ends the wait with that error, also at the deadline.
    ///
    /// One loop, longer than most here on purpose: whether the next attempt
    /// blocks, whether messages are subscribed, and the judge of attempts
    /// are state that every branch reads and changes, and each branch is a
    /// few lines; split, each part would take all of them as arguments.
    pub(crate) fn acquire<T>(
        &self,
        wait: Wait<'_>,
        mut attempt: impl FnMut(Option<Duration>) -> Result<Attempt<T>>,
    ) -> Result<Option<T>> {
        let Wait {
            key,
            turns,
            deadline,
            jump,
            looked,
            direct,
            place,
            signalled,
            patient,
            watch,
        } = wait;
        let server = turns == Turns::Server;
        let fallback = self.fallback_for(patient || signalled.is_some());
        let line = match turns {
            Turns::Local(line) => line,
            Turns::Server => 0,
        };
        let mut tries = Tries::new(
            self.shared.outage_tolerance,
            self.backend.timeouts().response,
            deadline,
        );
        // A waiter that blocks hears hand-overs that name its client as a
        // watcher (not on a sharded cluster, where it joins no channel),
        // from its first attempt on: a hand-over made while that attempt's
        // busy reply is on its way may be taken by a newcomer that then
        // dies, and the busy reply, read after it, times the waiter's
        // first look by a lease that has ended early (found by the model
        // checker, check/: "fair semaphore: a waiter for messages first,
        // one blocked behind, 1 crash"). The subscriber starts only once
        // the first attempt found the name busy: a client that never
        // waits opens no subscription. A naming sent before it listens is
        // made up for by a look per key when it starts
        // (`Watches::listening`).
        let watched = watches_hand_overs(direct.is_some(), patient);
        let watching = match (&watch, watched, self.backend.sharded()) {
            (Some(on), true, false) => Some(self.shared.watches.join(key, on)),
            _ => None,
        };
        // Fast path: nobody of ours is queued, so trying first is fair.
        let tried = server || jump || !self.shared.has_queue(key, line);
        if tried && !looked {
            if let Some(outcome) = try_first(&mut tries, &mut attempt) {
                return outcome;
            }
        }
        if watching.is_some() {
            self.start_subscriber();
        }
        // Direct waiting while it is worth it: the server must grant
        // directly (an old ACL may refuse it meanwhile), and the deadline
        // must be far enough (see `worth_blocking`). Once it is not, the
        // waiter waits for messages for the rest of its wait.
        let blocking = || direct.filter(|_| blocks_now(&self.backend, place, deadline));
        // Blocks end that long before the deadline (see `block_for`).
        let tail = block_tail(place.is_some());
        // Waiters that block for a direct grant need no messages.
        let mut listening = Listening::new(self, key, deadline);
        if blocking().is_none() {
            listening.start();
        }
        let waiter = Waiter::new(line, tried);
        let _member = Membership::join(&self.shared, key, server, waiter.clone());
        // The next attempt blocks for a grant (direct waiting, head only):
        // at once if the fast path found the name busy (and queued us).
        let mut block = match blocking() {
            Some(slice) if tried && !tries.in_outage() => {
                block_for(slice, deadline, tail, Instant::now())
            }
            _ => None,
        };
        loop {
            let now = Instant::now();
            let left = deadline.map(|d| d.saturating_duration_since(now));
            if left == Some(Duration::ZERO) {
                return tries.timed_out();
            }
            // A thread that tried on the fast path may be queued in Redis
            // (two threads of this client can both get there before either
            // joins the local queue, in either order): it must stay able to
            // take a grant, or one made to it lapses unclaimed.
            if !server && !tried && !self.shared.is_head(key, &waiter) {
                // Wait for our turn; the head's departure wakes us.
                let wait = left
                    .unwrap_or(self.shared.fallback)
                    .min(self.shared.fallback);
                let _ = waiter.rx.recv_timeout(wait);
                block = None;
                continue;
            }
            // Drop a stale wake-up: this attempt sees the current state.
            if let (Ok(true), Some(flag)) = (waiter.rx.try_recv(), signalled) {
                flag.set(true);
            }
            let retry = match judged(&mut tries, || attempt(block)) {
                Step::Done(v) => return Ok(Some(v)),
                Step::Again => continue,
                Step::Fail(e) => return Err(e),
                Step::Wait(retry) => retry,
            };
            block = None;
            // Direct waiting, unless the server refused it meanwhile (an
            // old ACL) or the deadline is near: then messages wake us.
            let direct = blocking();
            if direct.is_none() && !listening.started {
                // Messages from now on: look again once the subscription
                // is live, or one sent before it would be missed.
                listening.start();
                continue;
            }
            if let (Some(slice), false) = (direct, tries.in_outage()) {
                // Queued in Redis: block there for our grant. Under a
                // millisecond before the deadline there is nothing left to
                // block for: the loop ends at the deadline.
                block = block_for(slice, deadline, tail, Instant::now());
                if block.is_none() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                continue;
            }
            let wait = retry.unwrap_or(fallback).min(fallback);
            wait_for_message(&mut listening, &waiter, wait, deadline, signalled);
        }
    }

    /// A look a waiter makes before it knows what to wait on (a latch
    /// reads its round), judged as [`Wakeup::acquire`]'s attempts are: one
    /// whose connection broke at once (a pooled connection a restart
    /// closed) is repeated, and an unreachable server is ridden out within
    /// the outage tolerance, never past the deadline. `look` must be safe
    /// to repeat. `None`: the deadline passed first.
    pub(crate) fn look<T>(
        &self,
        deadline: Option<Instant>,
        mut look: impl FnMut() -> Result<T>,
    ) -> Result<Option<T>> {
        let mut tries = Tries::new(
            self.shared.outage_tolerance,
            self.backend.timeouts().response,
            deadline,
        );
        loop {
            match judged(&mut tries, || look().map(Attempt::Acquired)) {
                Step::Done(v) => return Ok(Some(v)),
                Step::Again => continue,
                Step::Fail(e) => return Err(e),
                Step::Wait(backoff) => {
                    let now = Instant::now();
                    let left = deadline.map(|d| d.saturating_duration_since(now));
                    if left == Some(Duration::ZERO) {
                        return tries.timed_out();
                    }
                    // An outage's backoff (a look is never busy).
                    let pause = backoff.unwrap_or(self.shared.fallback);
                    std::thread::sleep(left.map_or(pause, |l| l.min(pause)));
                }
            }
        }
    }

    /// How long a waiter waits for its subscription: the connect timeout,
    /// and never past its own deadline.
    fn subscribe_by(&self, deadline: Option<Instant>) -> Instant {
        let limit = Instant::now() + self.backend.timeouts().connect;
        deadline.map_or(limit, |d| d.min(limit))
    }

    fn is_connected(&self) -> bool {
        lock(&self.shared.sub).connected
    }

    /// Starts the subscriber on first use and waits (at most the connect
    /// timeout) until it listens, so that the retry after joining the queue
    /// happens with the subscription in place.
    fn ensure_subscribed(&self, deadline: Option<Instant>) {
        let mut sub = lock(&self.shared.sub);
        if sub.connected {
            return;
        }
        if !sub.started && !self.spawn_subscriber(&mut sub) {
            return;
        }
        let limit = self.subscribe_by(deadline);
        while !sub.connected {
            let left = limit.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            sub = crate::util::mutex::wait_timeout(&self.shared.sub_changed, sub, left);
        }
    }

    /// Starts the subscriber on first use, without waiting for it to
    /// listen (a blocked waiter only needs it for hand-over messages).
    fn start_subscriber(&self) {
        let mut sub = lock(&self.shared.sub);
        if !sub.started {
            self.spawn_subscriber(&mut sub);
        }
    }

    /// Starts the subscriber thread; whether it started.
    fn spawn_subscriber(&self, sub: &mut SubState) -> bool {
        sub.started = true;
        let shared = self.shared.clone();
        let backend = self.backend.clone();
        let spawned = std::thread::Builder::new()
            .name("redlease-wakeup".into())
            .spawn(move || subscriber(shared, backend));
        if let Err(e) = spawned {
            log::error!("redlease: cannot start the wake-up subscriber: {e}");
            sub.started = false;
            return false;
        }
        true
    }
}

impl Shared {
    /// A message `<client id>:<key>` wakes this client's waiters of `key`,
    /// whichever client sent it. Our own client's messages included: a
    /// release of ours woke the local head directly too (one wake more, at
    /// worst an attempt that finds the name taken), but the renewal
    /// thread's looks (a shortened lease that ran out, a semaphore's offer)
    /// and a grant made for a waiter that waits for messages publish with
    /// our id and wake nobody else; dropping them left readers in a
    /// writer's own client waiting to their deadline.
    fn dispatch(&self, payload: &[u8]) {
        match heard(self.me.as_bytes(), payload) {
            // A hand-over naming its watchers wakes nobody (see `watch`).
            Heard::Named(key) => self.watches.named(key),
            Heard::Released(key) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
                crate::metrics::wakeup();
                self.notify(key);
            }
            Heard::NamedOther | Heard::Foreign => {}
        }
    }

    fn set_connected(&self, connected: bool) {
        lock(&self.sub).connected = connected;
        self.sub_changed.notify_all();
    }
}

/// A waiter's subscription to the wake-ups of its key, from
/// [`Listening::start`] until it is dropped: the client's subscriber, or on
/// a sharded cluster the key's shard channel (see [`sharded`]).
struct Listening<'a> {
    wakeup: &'a Wakeup,
    key: &'a [u8],
    /// The waiter's deadline, which no subscription outlasts.
    deadline: Option<Instant>,
    started: bool,
    /// The shard channel joined, if sharded.
    channel: Option<Vec<u8>>,
}

impl<'a> Listening<'a> {
    fn new(wakeup: &'a Wakeup, key: &'a [u8], deadline: Option<Instant>) -> Listening<'a> {
        Listening {
            wakeup,
            key,
            deadline,
            started: false,
            channel: None,
        }
    }

    /// Subscribes, waiting at most the connect timeout (and never past the
    /// deadline) for it to be live.
    fn start(&mut self) {
        self.started = true;
        let w = self.wakeup;
        if !w.backend.sharded() {
            w.ensure_subscribed(self.deadline);
            return;
        }
        if self.channel.is_none() {
            let channel = w.channel(self.key).into_owned();
            w.shared.shards.join(&channel);
            self.channel = Some(channel);
        }
        self.renew();
    }

    /// Whether messages reach us now.
    fn live(&self) -> bool {
        match &self.channel {
            Some(channel) => self.wakeup.shared.shards.live(channel),
            None => self.wakeup.is_connected(),
        }
    }

    /// Subscribes again a shard channel that was lost; whether it is live
    /// now. (The classic subscriber reconnects by itself.)
    fn renew(&self) -> bool {
        match &self.channel {
            Some(channel) => {
                let w = self.wakeup;
                let by = w.subscribe_by(self.deadline);
                w.shared
                    .shards
                    .subscribe(&w.shared, &w.backend, channel, self.key, by)
            }
            None => false,
        }
    }
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        if let Some(channel) = &self.channel {
            self.wakeup.shared.shards.leave(channel);
        }
    }
}

/// `key`'s hash tag with its braces (the first `{`, up to the next `}`,
/// with something in between), as Redis Cluster finds it.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let len = key[open + 1..].iter().position(|&b| b == b'}')?;
    (len > 0).then(|| &key[open..open + len + 2])
}

/// [`Wakeup::acquire`]'s fast path: attempts until one says to wait.
/// `Some` when that decided the outcome (acquired, failed, or the
/// deadline passed).
fn try_first<T>(
    tries: &mut Tries,
    attempt: &mut impl FnMut(Option<Duration>) -> Result<Attempt<T>>,
) -> Option<Result<Option<T>>> {
    loop {
        match judged(tries, || attempt(None)) {
            Step::Done(v) => return Some(Ok(Some(v))),
            Step::Again => continue,
            Step::Fail(e) => return Some(Err(e)),
            Step::Wait(_) => break,
        }
    }
    tries
        .past_deadline(Instant::now())
        .then(|| tries.timed_out())
}

/// Sleeps until a release message wakes `waiter`, at most `wait` and never
/// past the deadline; sets `signalled` when a message came. Returns at once
/// after renewing a lost subscription: the caller looks again.
fn wait_for_message(
    listening: &mut Listening<'_>,
    waiter: &Waiter,
    mut wait: Duration,
    deadline: Option<Instant>,
    signalled: Option<&std::cell::Cell<bool>>,
) {
    if !listening.live() {
        // A shard channel lost (its slot moved, its master failed):
        // subscribe where it is now, then look again.
        if listening.renew() {
            return;
        }
        // Without a subscription nothing wakes us; poll gently.
        wait = wait.min(Duration::from_millis(100));
    }
    if let Some(left) = deadline.map(|d| d.saturating_duration_since(Instant::now())) {
        wait = wait.min(left);
    }
    if let (Ok(true), Some(flag)) = (waiter.rx.recv_timeout(wait), signalled) {
        flag.set(true);
    }
}

/// Runs one attempt and has `tries` judge its outcome, with the times it
/// took.
fn judged<T>(tries: &mut Tries, attempt: impl FnOnce() -> Result<Attempt<T>>) -> Step<T> {
    let started = Instant::now();
    let outcome = attempt();
    tries.judge(outcome, started, Instant::now())
}
