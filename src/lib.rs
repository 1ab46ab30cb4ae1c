//! # redlease
//!
//! Distributed locks on Redis for **synchronous** Rust: threaded services,
//! rayon batch jobs, cron-driven tools. No async runtime.
//!
//! ## A first lock
//!
//! ```no_run
//! use redlease::Client;
//!
//! let client = Client::open("redis://127.0.0.1:6379/")?;
//! let total = client.with_lock("orders:42", || {
//!     // Only one thread of one process, across every machine sharing this
//!     // Redis, runs this at a time.
//!     40 + 2
//! })?;
//! assert_eq!(total, 42);
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! ## Guards
//!
//! [`Lock::acquire`] waits like `std::sync::Mutex::lock` and returns a
//! [`LockGuard`]; dropping the guard releases the lock. [`Lock::try_acquire`]
//! never waits, [`Lock::acquire_timeout`] waits at most as long as you say.
//!
//! ```no_run
//! use std::time::Duration;
//! # let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
//! let lock = client.lock("report:daily");
//! if let Some(guard) = lock.acquire_timeout(Duration::from_secs(2))? {
//!     // Hand the fencing token to the storage you write, so that a holder
//!     // that paused past its lease is rejected there.
//!     let fence = guard.fencing_token();
//!     # let _ = fence;
//!     guard.release()?; // or just drop it
//! }
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! ## Leases and the watchdog
//!
//! A lock is a lease: if its holder dies, it ends by itself. By default the
//! lease is the client's watchdog timeout (30 s) and one renewal thread per
//! process extends it every third of that while the guard lives. If the
//! renewal finds the lease gone (expired during a pause, flushed,
//! force-unlocked, server restarted), [`LockGuard::is_held`] turns false —
//! no round trip — and [`LockGuard::release`] fails with
//! [`ErrorKind::LockLost`].
//!
//! A fixed lease has no watchdog: the lock ends after it, whatever happens.
//!
//! ```no_run
//! use std::time::Duration;
//! # let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
//! let guard = client.lock("nightly").lease(Duration::from_secs(5)).acquire()?;
//! // ... at most 5 s of work ...
//! # let _ = guard.is_held();
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! ## Re-entry
//!
//! The owner of a lock is the pair (client, thread). A thread that holds a
//! lock may take it again: no round trip, same fencing token, and only the
//! outermost release touches Redis. Guards are not `Send`.
//!
//! ```no_run
//! # let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
//! let lock = client.lock("a");
//! let outer = lock.acquire()?;
//! let inner = lock.acquire()?; // re-entry
//! assert_eq!(lock.hold_count(), 2);
//! assert_eq!(outer.fencing_token(), inner.fencing_token());
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! ## Work-stealing pools (rayon)
//!
//! A worker of a work-stealing pool that waits inside a critical section
//! (say, for a nested `rayon::join`) runs other tasks meanwhile; one of them
//! asking for the same lock on that thread would be a re-entry, and two
//! tasks would be inside at once. Use a non-reentrant handle there: the
//! second acquisition fails at once with [`ErrorKind::WouldDeadlock`].
//!
//! ```no_run
//! # let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
//! let lock = client.lock("batch").non_reentrant();
//! let guard = lock.acquire()?;
//! assert_eq!(
//!     lock.try_acquire().unwrap_err().kind(),
//!     redlease::ErrorKind::WouldDeadlock
//! );
//! # drop(guard);
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! ## When a reply is lost
//!
//! Every call is *not sent* (no connection: it fails within the connect
//! timeout, nothing to undo), *maybe executed* (the grant is repeated with
//! the same token, which re-grants the same hold, or undone on its own
//! connection when the reply is late) or *executed*. No call outlives its
//! deadline by more than one response timeout. See GUARANTEES.md.
//!
//! ## Read-write locks
//!
//! Many readers or one writer; each holder has its own lease, and a waiting
//! writer stops new readers so it is not starved.
//!
//! ```no_run
//! # let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
//! let rw = client.rw_lock("config");
//! let r = rw.read()?;
//! drop(r);
//! let w = rw.write()?;
//! println!("writing under fence {}", w.fencing_token());
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! ## Semaphores
//!
//! At most N permits held at once, everywhere. Permits expire with their
//! holder's lease (server time), so a crashed holder does not leak them.
//!
//! ```no_run
//! # let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
//! let sem = client.semaphore("upstream-api", 5);
//! let permit = sem.acquire()?;
//! // ... call the API ...
//! drop(permit);
//! let fifo = client.fair_semaphore("batch", 2); // granted in arrival order
//! # let _ = fifo;
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! ## Topologies
//!
//! Only the builder changes: `.url(...)`, `.sentinel(urls, "mymaster")`
//! (feature `sentinel`), `.cluster(urls)` (feature `cluster`) or
//! `.redlock(urls)`. See the README's "Choosing a topology" and
//! GUARANTEES.md for what each one guarantees.
//!
//! ```no_run
//! let client = redlease::Client::builder()
//!     .redlock(["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", "redis://10.0.0.3:6379/"])
//!     .build()?;
//! let guard = client.lock("payments").acquire()?;
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! ## Knowing the lease is still yours
//!
//! Every guard has [`LockGuard::lost_signal`] (a [`LostSignal`] to hand to
//! worker threads: no round trip to check it), [`LockGuard::expires_in`]
//! (the conservative remaining time) and [`LockGuard::extend`]:
//!
//! ```no_run
//! # let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
//! use std::time::Duration;
//! let guard = client.lock("migration").acquire()?;
//! let lost = guard.lost_signal();
//! let worker = std::thread::spawn(move || {
//!     // Stops within a second of the lease being lost.
//!     while !lost.wait_timeout(Duration::from_secs(1)) { /* a step of work */ break; }
//! });
//! guard.extend(Duration::from_secs(300))?; // the lease now ends 5 min from now
//! worker.join().expect("worker panicked");
//! guard.release()?;
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! Closures: [`Lock::try_with`], [`Lock::with_timeout`],
//! [`RwLock::with_read`], [`RwLock::with_write`], [`Semaphore::with_permit`].
//! Events (acquired, released, lease lost) go to a [`HandleEvent`] given to
//! [`ClientBuilder::event_handler`].
//!
//! ## Latches, multi-locks, permits by id
//!
//! [`CountDownLatch`] (`client.count_down_latch(name)`) lets a coordinator
//! wait for N events from anywhere; [`MultiLock`] (`client.multi_lock(names)`)
//! takes several plain locks all or nothing, without deadlock between
//! overlapping sets; [`Permit::detach`] turns a permit into a [`PermitId`]
//! that [`Semaphore::release_id`] returns from any thread, client or process.
//!
//! ```no_run
//! # let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
//! let g = client.multi_lock(["stock:7", "order:9"]).acquire()?;
//! println!("fences {:?}", g.fencing_tokens());
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! ## Logging
//!
//! The library logs through the [`log`](https://docs.rs/log) facade under
//! the target `redlease`: a warning naming the lease whenever one is lost,
//! one warning per outage of a server (connection failures are folded, at
//! most one a minute), a warning when a server's `maxmemory-policy` may
//! evict lock keys. Nothing is logged on the happy path.
//!
//! ## Fencing
//!
//! A lease cannot stop a holder that pauses longer than its lease from
//! acting afterwards. Pass [`LockGuard::fencing_token`] to the storage you
//! write and have it refuse tokens older than the newest it has seen
//! (`examples/fenced_write.rs`).
//!
//! ## Waiting
//!
//! Nobody polls. A waiter for a lock, the write hold or permits queues in
//! Redis and blocks on the server until its deadline, on the name's open
//! list: a release opens the name (or offers its free permits) inside its
//! script and Redis hands it to the waiter blocked longest, who returns in
//! its own round trip, first come, first served across clients. A waiter
//! that died is never chosen, and an idle waiter costs the server almost
//! nothing (at most one command a second): its process's renewal thread
//! looks at the name for it when the holder's lease would end (and every
//! 5 s), so a holder that dies without releasing is noticed then. Other waits (readers behind a writer, latches, a server
//! that refuses the blocking pops) are woken by a message
//! published on release, through one subscriber connection per client,
//! and only while somebody waits. On a Redis 7 Cluster that message goes
//! to a channel in the name's own slot (sharded pub/sub), so it crosses no
//! cluster bus and reaches only the clients waiting on that name (the ACL
//! needs `+spublish +ssubscribe +sunsubscribe`; without them, classic
//! pub/sub). Threads of one client waiting for the
//! same name queue in arrival order; at most `pool_size` of them block on
//! a connection at once.
//!
//! ## Errors
//!
//! Every fallible call returns [`Error`]; match on [`Error::kind`]. Bad input
//! (empty or oversized names, zero leases, a key that holds someone else's
//! data) is an error, never a panic. Messages name the primitive and the
//! server (`[lock "orders" at redis://:***@10.0.0.5:6379/]`), never a
//! password or a script hash; a refused password or ACL right is
//! [`ErrorKind::Auth`].

#![warn(missing_docs)]

mod backend;
mod client;
mod doctor;
mod error;
mod events;
mod handles;
mod lease;
mod metrics;
mod protocol;
mod renewal;
mod util;
mod wakeup;

/// Guards are tied to the thread that acquired them (its reentrancy
/// count), so they are not `Send`:
///
/// ```compile_fail
/// fn send<T: Send>() {}
/// send::<redlease::LockGuard>();
/// ```
/// ```compile_fail
/// fn send<T: Send>() {}
/// send::<redlease::ReadGuard>();
/// ```
/// ```compile_fail
/// fn send<T: Send>() {}
/// send::<redlease::WriteGuard>();
/// ```
/// ```compile_fail
/// fn send<T: Send>() {}
/// send::<redlease::Permit>();
/// ```
#[cfg(doctest)]
struct GuardsAreNotSend;

/// The README's examples, compiled (not run) as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use client::builder::ClientBuilder;
pub use client::capabilities::{Capabilities, WakeChannel};
pub use client::connection::Connection;
pub use client::inspect::LockInfo;
pub use client::Client;
pub use doctor::{Check, CheckStatus, Diagnosis};
pub use error::{Error, ErrorKind, RedisErrorText, Result};
pub use events::{AcquireEvent, HandleEvent, LeaseLostEvent, ReleaseEvent};
pub use handles::latch::CountDownLatch;
pub use handles::lock::{Lock, LockGuard};
pub use handles::multilock::{MultiLock, MultiLockGuard};
pub use handles::rwlock::{ReadGuard, RwLock, WriteGuard};
pub use handles::semaphore::{Permit, PermitId, Semaphore};
pub use protocol::keys::MAX_NAME_LEN;
pub use protocol::signal::LostSignal;

/// The `redis` crate (version 1) redlease is built on, for the pooled
/// connections [`Client::connection`] and `with_connection` lend: use
/// `redlease::redis::Commands`, so that a `redis` of another version in
/// your own `Cargo.toml` cannot make its traits not apply (E0599, "trait
/// bounds were not satisfied").
pub use redis;

#[doc(hidden)]
pub use protocol::scripts::sent_code as __sent_code;

/// The protocol's timings, the client's pure decision rules and the
/// scripts' arguments, for the model checker (`check/`), which drives the
/// same rules and sends the same arguments the library does. Not part of
/// the API.
#[doc(hidden)]
pub mod __protocol {
    pub use crate::protocol::blocking::{
        block_for, block_tail, blocks_now, keeps_place, worth_blocking, SHORT_WAIT,
    };
    pub use crate::protocol::clean_up::{goes_on, undos, Failure, Left, Undo};
    pub use crate::protocol::delivery::{announced, heard, release_message, Heard, InLine};
    pub use crate::protocol::keys::{owner_token, FENCE_FLOOR, WAKE_CHANNEL};
    pub use crate::protocol::looks::{
        look_runs_at, next_look, watch_on_busy, watches_hand_overs, LOOK_MARGIN, LOOK_MAX,
        NAME_LOOKS, WAITER_LOOKS,
    };
    pub use crate::protocol::popped::{
        behind_pop, clock_us, pop_took_grant, popped_hold, script_behind_pop, waited, PoppedHold,
        SERVER_CLOCK,
    };
    pub use crate::protocol::quorum::{
        combine, drift, jitter, lease_left, quorum, Tally, Vote, JITTER_MAX,
    };
    pub use crate::protocol::renewal::{renewed, retry, Renewed};
    pub use crate::protocol::scripts::{lock, rwlock, semaphore};
    pub use crate::protocol::timing::{
        first_look, hand_over_claim, look_after, FALLBACK_POLL, GRANT_CLAIM, GRANT_SLICE,
        MOVE_SETTLING, NAME_LOOK_AFTER, OPENING_LIFE, OUTAGE_TOLERANCE, POPPED_LEASE, ROOM_CHUNK,
        ROOM_ENTRY, SETTLING_CLAIM,
    };
    pub use crate::protocol::tries::ride_out;
    pub use crate::protocol::watch::{hand_over, NamedLooks, OpeningLooks};
}
