//! The distributed read-write lock and its guards.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::PreparedCall;
use crate::error::{Error, ErrorKind, Result};
use crate::handles::core::{claiming_extend, settings, waits, Ask, Core};
use crate::lease::context::Context;
use crate::lease::reentrancy::{self, HoldKey, Mode};
use crate::lease::{self, guard_controls, Direct, Holding, PopAlone, Spec};
use crate::protocol::keys as schema;
use crate::protocol::scripts::lock::EXTEND_FENCE;
use crate::protocol::scripts::rwlock::{
    Open, ReadAcquireArgs, ReleaseArgs, WatchArgs, WriteAcquireArgs, RELEASE_FENCE,
};
use crate::protocol::scripts::{
    RW_READ_ACQUIRE, RW_READ_RELEASE, RW_WATCH, RW_WRITE_ACQUIRE, RW_WRITE_RELEASE, ZSET_EXTEND,
};
use crate::wakeup::Turns;

#[derive(Debug)]
struct Keys {
    writer: Arc<[u8]>,
    readers: Vec<u8>,
    /// Waiting writers (lua/queue.lua): while a live one waits, new
    /// readers wait too (lua/rw_grant.lua).
    writer_queue: Vec<u8>,
    writer_deadlines: Vec<u8>,
    fence: Vec<u8>,
    /// The fence floor of the counter's server or slot (lua/fence.lua).
    floor: Vec<u8>,
    /// Prefix of a waiting writer's grant list (its token follows).
    grant_prefix: Vec<u8>,
    /// Waiting readers (lua/rw_read_acquire.lua).
    waiting_readers: Vec<u8>,
    /// The keys of every read-write lock script that reads or changes the
    /// holds (lua/rw_*.lua), in their one order, made once: an
    /// acquisition's calls share them (see `PreparedCall::keys`).
    scripted: Arc<[Vec<u8>]>,
}

impl Keys {
    fn new(client: &Context, n: crate::protocol::keys::Names) -> Keys {
        let fence = n.key(schema::FENCE);
        let mut keys = Keys {
            writer: n.key(schema::RW_WRITER).into(),
            readers: n.key(schema::RW_READERS),
            writer_queue: n.key(schema::RW_WRITER_QUEUE),
            writer_deadlines: n.key(schema::RW_WRITER_DEADLINES),
            floor: client.backend().fence_floor(&fence),
            fence,
            grant_prefix: n.key(schema::RW_GRANT),
            waiting_readers: n.key(schema::RW_WAITING_READERS),
            scripted: Arc::new([]),
        };
        keys.scripted = Arc::from([
            keys.writer.to_vec(),
            keys.readers.clone(),
            keys.fence.clone(),
            keys.writer_queue.clone(),
            keys.writer_deadlines.clone(),
            keys.waiting_readers.clone(),
            keys.floor.clone(),
        ]);
        keys
    }
}

/// A named distributed read-write lock: many readers or one writer.
///
/// Made by [`Client::rw_lock`](crate::Client::rw_lock). Every holder has its own lease (readers are
/// members of a sorted set scored by their expiry in server time), so one
/// reader's release or crash never ends another's hold. A waiting writer
/// stops new readers from entering (while it lives: a writer that died
/// stops nobody), so readers cannot starve writers.
///
/// Reads and writes are reentrant per thread. A thread holding the write
/// lock may also take the read lock (a downgrade: release the write guard
/// afterwards and keep reading). A thread holding only a read lock that asks
/// for the write lock gets [`ErrorKind::WouldDeadlock`] instead of waiting
/// forever.
#[derive(Clone)]
pub struct RwLock {
    core: Core<Keys>,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("RwLock");
        self.core.debug(&mut d, |k| &k.writer);
        d.finish()
    }
}

impl RwLock {
    pub(crate) fn new(client: Context, name: &[u8]) -> RwLock {
        let core = Core::new(client, name, Keys::new);
        RwLock { core }
    }

    settings!(
        RwLock,
        "holds",
        "the read (or the write) hold and asks for the same again (a writer may still take the read hold: a downgrade)"
    );

    fn hold_key(&self, keys: &Keys, mode: Mode) -> HoldKey {
        HoldKey {
            client: self.core.client.id_u128(),
            mode,
            key: keys.writer.clone(),
        }
    }

    /// Removes the write hold and every read hold, whoever holds them, and
    /// wakes waiters; returns whether any hold was removed. Holders learn it
    /// at their next renewal (`is_held()` turns false, `release()` fails
    /// with `LockLost`). A writer's waiting intent is left alone.
    pub fn force_unlock(&self) -> Result<bool> {
        let keys = self.core.keys()?;
        let removed = lease::force_remove(
            &self.core.client,
            &[keys.writer.to_vec(), keys.readers.clone()],
            &keys.writer,
        )
        .map_err(|e| e.about("read-write lock", &self.core.name))?;
        // Blocked writers hear no message: a look now opens the write hold
        // to them.
        let backend = self.core.client.backend();
        if backend.grants_directly() {
            let look = self.core.name_look(|| self.watch(keys, b""));
            drop(crate::renewal::watch_for(
                backend,
                look,
                Instant::now(),
                crate::protocol::looks::NAME_LOOKS,
            ));
        }
        Ok(removed)
    }

    /// Runs `f` under a read hold (waiting as long as needed), then
    /// releases it. A lease lost while `f` ran is an error of kind
    /// `LockLost` (see [`Client::with_lock`](crate::Client::with_lock)).
    pub fn with_read<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let guard = self.read()?;
        let value = f();
        guard.release()?;
        Ok(value)
    }

    /// Runs `f` under the write hold (waiting as long as needed), then
    /// releases it. A lease lost while `f` ran is an error of kind `LockLost`.
    pub fn with_write<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let guard = self.write()?;
        let value = f();
        guard.release()?;
        Ok(value)
    }

    waits!("a read hold" -> ReadGuard, read_until() => read, try_read, read_timeout);

    waits!("the write hold" -> WriteGuard, write_until() => write, try_write, write_timeout);

    /// This thread's read depth and write depth.
    pub fn hold_counts(&self) -> (usize, usize) {
        match self.core.keys_or_invalid() {
            Ok(k) => (
                reentrancy::depth(&self.hold_key(k, Mode::Read)),
                reentrancy::depth(&self.hold_key(k, Mode::Write)),
            ),
            Err(_) => (0, 0),
        }
    }

    /// Whether anyone holds the write lock, and how many readers there are
    /// (readers whose lease ended are not counted). One round trip.
    pub fn state(&self) -> Result<(bool, usize)> {
        let keys = self.core.keys()?;
        let (writer, readers): (bool, usize) =
            self.core
                .client
                .backend()
                .eval(&crate::backend::Call::borrowed(
                    &crate::protocol::scripts::RW_STATE,
                    &[&keys.writer, &keys.readers],
                    &[],
                ))?;
        Ok((writer, readers))
    }

    /// What an acquisition asks for (`Core::ask`), where there is one leader.
    fn ask(&self, deadline: Option<Instant>) -> Result<Ask> {
        if self.core.client.backend().is_redlock() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "read-write locks need a single leader (one server, Sentinel or Cluster)",
            ));
        }
        self.core.ask(deadline)
    }

    /// Where a hand-over of the write hold goes (lua/rw_grant.lua).
    fn open<'a>(&self, keys: &'a Keys) -> Open<'a> {
        let wakeup = self.core.client.wakeup();
        Open {
            grant_prefix: &keys.grant_prefix,
            claim: crate::protocol::timing::GRANT_CLAIM,
            channel: wakeup.channel(&keys.writer).to_vec(),
            message: wakeup.message(&keys.writer),
        }
    }

    /// The renewal thread's look at the write hold (lua/rw_watch.lua): for
    /// a writer blocked on it (`writer`), and (none) for the name once a
    /// hold of it is handed over, shortened or forced open.
    fn watch(&self, keys: &Keys, writer: &[u8]) -> PreparedCall {
        let args = WatchArgs {
            writer,
            entry: crate::protocol::timing::ROOM_ENTRY,
            open: &self.open(keys),
        };
        PreparedCall::new(&RW_WATCH, keys.scripted.clone(), args.argv())
    }

    /// What a read acquisition with `token` sends (see `lease::Spec`).
    fn read_spec(&self, keys: &Keys, token: &str, ask: &Ask, own_write: &OwnWrite) -> Spec {
        let (lease, lease_arg, waits) = (ask.lease, ask.lease_ms.as_str(), ask.waits);
        let waiting = if waits {
            self.core.client.wakeup().entry_life(true)
        } else {
            Duration::ZERO
        };
        let t = token.as_bytes().to_vec();
        let ms = lease_arg.as_bytes().to_vec();
        let open = self.open(keys);
        let release = |leave| release_call(&RW_READ_RELEASE, keys, &t, &open, leave);
        let leave = waits.then(|| Arc::new(release(true)));
        let grant = ReadAcquireArgs {
            token: &t,
            lease_ms: &ms,
            own_write: own_write.token.as_bytes(),
            waiting,
            open: &open,
            own_fence: own_write.fence.as_bytes(),
        };
        Spec {
            what: "read lock",
            name: self.core.name.clone(),
            wake: keys.writer.clone(),
            turns: Turns::Local(0),
            jump: !own_write.token.is_empty(),
            // Readers are told by a writer's release.
            patient: true,
            lease,
            watchdog: self.core.lease.is_none(),
            grant: PreparedCall::new(&RW_READ_ACQUIRE, keys.scripted.clone(), grant.argv()),
            fence: None,
            release: release(false),
            extend: PreparedCall::new(
                &ZSET_EXTEND,
                vec![keys.readers.clone()],
                [&t, &ms].into_iter().collect(),
            ),
            // A waiting reader's entry goes when it gives up, and behind a
            // late grant.
            undo: leave.clone(),
            leave,
            direct: None,
            // The last reader's release may hand the write hold to a writer
            // that then freezes, and a shortened read lease may lapse: a
            // look at the name then reaches the blocked writers and the
            // waiting readers.
            look: self
                .core
                .client
                .backend()
                .grants_directly()
                .then(|| self.core.name_look(|| self.watch(keys, b""))),
        }
    }

    /// What a write acquisition with `token` sends (see `lease::Spec`). A
    /// waiter blocks on the write hold's open list where the backend
    /// allows it.
    fn write_spec(&self, keys: &Keys, token: &str, ask: &Ask) -> Spec {
        let (lease, lease_arg, waits) = (ask.lease, ask.lease_ms.as_str(), ask.waits);
        let backend = self.core.client.backend();
        let blocks = waits && backend.grants_directly();
        let t = token.as_bytes().to_vec();
        let ms = lease_arg.as_bytes().to_vec();
        let open = self.open(keys);
        let grant = |blocks: bool| {
            let args = WriteAcquireArgs {
                token: &t,
                lease_ms: &ms,
                queue_ttl: self.core.queue_entry(waits, blocks),
                open: &open,
                blocks,
            };
            PreparedCall::new(&RW_WRITE_ACQUIRE, keys.scripted.clone(), args.argv())
        };
        let release = |leave| release_call(&RW_WRITE_RELEASE, keys, &t, &open, leave);
        let leave = waits.then(|| Arc::new(release(true)));
        Spec {
            what: "write lock",
            name: self.core.name.clone(),
            wake: keys.writer.clone(),
            turns: Turns::Local(0),
            jump: false,
            patient: false,
            lease,
            watchdog: self.core.lease.is_none(),
            grant: grant(blocks),
            fence: Some(keys.fence.clone()),
            release: release(false),
            // Where its pop alone may take the write hold, the first
            // extension claims it (lua/lock_extend.lua, as a lock's): the
            // writers' queue is its keys' too, and the hold puts its fence
            // in (see `EXTEND_FENCE`).
            extend: {
                let mut on = vec![keys.writer.to_vec()];
                if blocks {
                    on.extend([keys.writer_queue.clone(), keys.writer_deadlines.clone()]);
                }
                let entry = self.core.queue_entry(waits, true);
                let claiming = blocks.then_some((keys.grant_prefix.as_slice(), entry));
                claiming_extend(on.into(), &t, &ms, claiming)
            },
            // Withdraw our queue entry so readers need not wait for it, and
            // hand on a write hold granted meanwhile; also behind a late
            // grant. A try has neither.
            undo: leave.clone(),
            leave,
            // Writers block on the open list, moving what they pop into
            // their own (lua/rw_grant.lua rw_open).
            direct: blocks.then(|| Direct {
                list: schema::open_list(&keys.grant_prefix),
                into: [keys.grant_prefix.as_slice(), &t].concat(),
                // The pop alone takes the write hold, as a lock's: the
                // hold's first renewal claims it (the extend above). A pop
                // that took a reader's probe runs the script after it.
                alone: Some(PopAlone {
                    holder: keys.writer.to_vec(),
                    turns: None,
                    release_arg: RELEASE_FENCE,
                    extend_arg: EXTEND_FENCE,
                }),
                watch: Some(self.watch(keys, &t)),
                by_message: grant(false),
                // Writers are served first blocked, first served, with no
                // order promised beyond it (as a plain lock's).
                ordered: false,
            }),
            look: backend
                .grants_directly()
                .then(|| self.core.name_look(|| self.watch(keys, b""))),
        }
    }

    fn read_until(&self, deadline: Option<Instant>) -> Result<Option<ReadGuard>> {
        let keys = self.core.keys()?;
        let ask = self.ask(deadline)?;
        let slot = self.hold_key(keys, Mode::Read);
        // A downgrade: this thread's live write hold lets the read in, and
        // it must not queue behind this client's other waiters (they wait
        // for our write lock, so we would wait for ourselves).
        let own_write = reentrancy::peek(&self.hold_key(keys, Mode::Write))
            .filter(|h| !h.state.is_lost())
            .map(|h| OwnWrite {
                token: h.token.to_string(),
                fence: h.fence.to_string(),
            })
            .unwrap_or_default();
        let held = self.core.acquire(Some(&slot), deadline, |token| {
            Ok(self.read_spec(keys, token, &ask, &own_write))
        })?;
        Ok(held.map(|held| {
            ReadGuard::new(
                self.clone(),
                Holding::new(self.core.client.clone(), Some(slot), held),
            )
        }))
    }

    fn write_until(&self, deadline: Option<Instant>) -> Result<Option<WriteGuard>> {
        let keys = self.core.keys()?;
        let ask = self.ask(deadline)?;
        let slot = self.hold_key(keys, Mode::Write);
        if reentrancy::depth(&slot) == 0 && reentrancy::depth(&self.hold_key(keys, Mode::Read)) > 0
        {
            return Err(Error::new(
                ErrorKind::WouldDeadlock,
                "this thread holds a read lock; asking for the write lock would wait for \
                 itself (release the read guard first)",
            ));
        }
        let held = self.core.acquire(Some(&slot), deadline, |token| {
            Ok(self.write_spec(keys, token, &ask))
        })?;
        Ok(held.map(|held| {
            WriteGuard::new(
                self.clone(),
                Holding::new(self.core.client.clone(), Some(slot), held),
            )
        }))
    }
}

/// This thread's own live write hold, for a read inside it (a downgrade):
/// its token, and its fence (a hold the writer's pop alone took is proved
/// by it until claimed). Both empty: none.
#[derive(Default)]
struct OwnWrite {
    token: String,
    fence: String,
}

/// The release of a read hold or the write hold (`lua`) by `token`, or with
/// `leave` the withdrawal of its waiting entry.
fn release_call(
    lua: &'static crate::protocol::scripts::Lua,
    keys: &Keys,
    token: &[u8],
    open: &Open<'_>,
    leave: bool,
) -> PreparedCall {
    let args = ReleaseArgs { token, open, leave };
    PreparedCall::new(lua, keys.scripted.clone(), args.argv())
}

macro_rules! rw_guard {
    ($name:ident, $what:literal) => {
        #[doc = concat!("Proof that this thread holds ", $what, " of an [`RwLock`]; released when dropped.")]
        ///
        /// Not `Send`: the hold belongs to the thread that acquired it.
        #[must_use = "the hold is released as soon as the guard is dropped"]
        pub struct $name {
            lock: RwLock,
            inner: Holding,
        }

        impl $name {
            fn new(lock: RwLock, inner: Holding) -> $name {
                $name { lock, inner }
            }

            guard_controls!($what);
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("lock", &self.lock)
                    .field("held", &self.is_held())
                    .finish()
            }
        }
    };
}

rw_guard!(ReadGuard, "a read hold");
rw_guard!(WriteGuard, "the write hold");

impl WriteGuard {
    /// The fencing token of this write hold (strictly increasing per name,
    /// shared with [`Client::lock`](crate::Client::lock) of the same name).
    pub fn fencing_token(&self) -> u64 {
        self.inner.held().fence
    }
}
