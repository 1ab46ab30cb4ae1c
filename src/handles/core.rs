//! What every primitive's handle is made of: its client, its keys (or why
//! its name is invalid, reported at first use rather than at `Client::lock`
//! and its siblings, which cannot fail), and the per-handle settings
//! (fixed lease, re-entry). `Lock`, `RwLock` and `Semaphore` each hold a
//! `Core` of their own keys and add only what is theirs.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::backend::{Call, PreparedCall};
use crate::error::{Error, Result};
use crate::lease::context::Context;
use crate::lease::reentrancy::{Held, HoldKey};
use crate::lease::{Reentry, Spec};
use crate::protocol::keys::Names;

pub(crate) struct Core<K> {
    pub(crate) client: Context,
    /// The name as given (for messages and events).
    pub(crate) name: Arc<[u8]>,
    keys: std::result::Result<Arc<K>, Arc<str>>,
    /// A fixed lease (no watchdog); `None`: the client's watchdog timeout.
    pub(crate) lease: Option<Duration>,
    /// `Some(false)`: this handle refuses re-entry; `None`: the client's.
    pub(crate) reentrant: Option<bool>,
    /// The look at the name alone (see [`Core::name_look`]).
    name_look: Arc<OnceLock<Arc<PreparedCall>>>,
}

/// lua/lock_extend.lua for `token`'s hold of `lease_ms` on `keys`: the
/// hold's key, then, where a blocking pop alone may have taken the hold,
/// the waiters' queue and its deadlines, with `claiming` (the grant prefix
/// and the blocked waiters' queue entry life): its first extension claims
/// such a hold. The hold puts its fence in (see `EXTEND_FENCE`). A lock's
/// and a write hold's extension alike.
pub(crate) fn claiming_extend(
    keys: Arc<[Vec<u8>]>,
    token: &[u8],
    lease_ms: &[u8],
    claiming: Option<(&[u8], Duration)>,
) -> PreparedCall {
    let args = crate::protocol::scripts::lock::ExtendArgs {
        token,
        claiming,
        lease_ms,
    };
    PreparedCall::new(&crate::protocol::scripts::LOCK_EXTEND, keys, args.argv())
}

/// What one acquisition asks for, whatever the primitive: its lease, that
/// lease in milliseconds as the scripts read it, and whether it waits (a
/// try never queues: readers would wait for a queued writer, and a try
/// whose reply came late could not take its entry back).
pub(crate) struct Ask {
    pub(crate) lease: Duration,
    pub(crate) lease_ms: String,
    pub(crate) waits: bool,
}

// Not derived: that would ask `K: Clone`, and the keys are shared.
impl<K> Clone for Core<K> {
    fn clone(&self) -> Self {
        Core {
            client: self.client.clone(),
            name: self.name.clone(),
            keys: self.keys.clone(),
            lease: self.lease,
            reentrant: self.reentrant,
            name_look: self.name_look.clone(),
        }
    }
}

impl<K> Core<K> {
    /// The handle of `name`, its keys made by `keys` from the name's key
    /// schema (see `keys.rs`).
    pub(crate) fn new(
        client: Context,
        name: &[u8],
        keys: impl FnOnce(&Context, Names) -> K,
    ) -> Core<K> {
        let keys = client
            .names(name)
            .map(|n| Arc::new(keys(&client, n)))
            .map_err(|e| Arc::from(e.message()));
        Core {
            client,
            name: name.into(),
            keys,
            lease: None,
            reentrant: None,
            name_look: Arc::default(),
        }
    }

    /// The renewal thread's look at the name alone, with no waiter (see
    /// `lease::Spec::look`), made by `make` at its first use and shared by
    /// every hold through this handle and its clones: it names no token,
    /// where each acquisition used to build its own.
    pub(crate) fn name_look(&self, make: impl FnOnce() -> PreparedCall) -> Arc<PreparedCall> {
        self.name_look.get_or_init(|| Arc::new(make())).clone()
    }

    /// Runs a confirming script (see `Backend::confirm`) on the name's
    /// keys; its error says it was about `what` of this name.
    pub(crate) fn confirm(&self, call: &Call<'_>, what: &str) -> Result<i64> {
        let done = self.client.backend().confirm(call);
        done.map_err(|e| e.about(what, &self.name))
    }

    /// The keys, or the invalid name's error.
    pub(crate) fn keys(&self) -> Result<&Arc<K>> {
        self.keys
            .as_ref()
            .map_err(|e| Error::invalid(e.to_string()))
    }

    /// The keys, or why the name is invalid (for what cannot fail).
    pub(crate) fn keys_or_invalid(&self) -> std::result::Result<&Arc<K>, &Arc<str>> {
        self.keys.as_ref()
    }

    /// How a thread that holds the name already is treated.
    pub(crate) fn reentry(&self) -> Reentry {
        Reentry::of(self.reentrant, &self.client)
    }

    /// The lease of an acquisition: the fixed one, or the watchdog's.
    pub(crate) fn lease_or_watchdog(&self) -> Duration {
        self.lease.unwrap_or(self.client.watchdog_timeout())
    }

    /// Acquires through this handle (see `lease::acquire`): `slot` is the
    /// thread's hold of the name, for re-entry as this handle allows it
    /// (`None`: no re-entry, as for permits).
    pub(crate) fn acquire(
        &self,
        slot: Option<&HoldKey>,
        deadline: Option<Instant>,
        spec: impl Fn(&Arc<str>) -> Result<Spec>,
    ) -> Result<Option<Arc<Held>>> {
        let slot = slot.map(|s| (s, self.reentry()));
        crate::lease::acquire(&self.client, slot, deadline, spec)
    }

    /// What an acquisition with `deadline` asks for (see [`Ask`]).
    pub(crate) fn ask(&self, deadline: Option<Instant>) -> Result<Ask> {
        let lease = self.lease_or_watchdog();
        Ok(Ask {
            lease,
            lease_ms: crate::lease::lease_millis(lease)?.to_string(),
            // A try never queues: a waiter queues from its first attempt.
            waits: deadline.is_none_or(|d| d > Instant::now()),
        })
    }

    /// How long a waiter's queue entry lives: not at all for one that does
    /// not queue (a try); [`crate::protocol::timing::ROOM_ENTRY`] for one blocked on
    /// the server; for one that waits for messages, past the gaps between
    /// its retries (`Wakeup::entry_life`).
    pub(crate) fn queue_entry(&self, queues: bool, blocks: bool) -> Duration {
        if !queues {
            Duration::ZERO
        } else if blocks {
            crate::protocol::timing::ROOM_ENTRY
        } else {
            self.client.wakeup().entry_life(false)
        }
    }

    /// The `key` field of a handle's `Debug` (or `invalid` and why), and
    /// its lease.
    pub(crate) fn debug(&self, d: &mut fmt::DebugStruct<'_, '_>, key: impl Fn(&K) -> &[u8]) {
        match &self.keys {
            Ok(k) => d.field("key", &String::from_utf8_lossy(key(k))),
            Err(e) => d.field("invalid", e),
        };
        d.field("lease", &self.lease);
    }
}

/// The three ways every handle waits (as long as it takes, not at all, at
/// most a timeout), over its `$until(…, deadline)`: one text for what they
/// mean, where each handle used to restate it. `$what` names what is
/// waited for; `$pre` are the arguments before the deadline (a count).
macro_rules! waits {
    ($what:literal -> $guard:ty, $until:ident($($pre:expr,)*)
     => $wait:ident, $try:ident, $timeout:ident $(; $k:ident: $kt:ty)?) => {
        #[doc = concat!("Waits for ", $what, " as long as it takes (like `std::sync::Mutex::lock`).")]
        pub fn $wait(&self $(, $k: $kt)?) -> Result<$guard> {
            self.$until($($pre,)* None).and_then(crate::wakeup::waited)
        }

        #[doc = concat!("Takes ", $what, " if it is free right now (`None` otherwise, and nothing")]
        /// held); never waits *for it*. It does wait for the server, as
        /// every call does: one round trip, at most the response timeout
        /// (2 s by default) when the server is paused or overloaded, plus
        /// the connect timeout when a connection must be opened to a server
        /// that does not answer. A refused connection (no server there) is
        /// an error at once.
        pub fn $try(&self $(, $k: $kt)?) -> Result<Option<$guard>> {
            self.$until($($pre,)* Some(std::time::Instant::now()))
        }

        #[doc = concat!("Waits at most `timeout` for ", $what, "; `None` (nothing held) when it timed out.")]
        pub fn $timeout(&self $(, $k: $kt)?, timeout: Duration) -> Result<Option<$guard>> {
            self.$until($($pre,)* crate::wakeup::deadline_after(timeout))
        }
    };
}

pub(crate) use waits;

/// The settings of a handle, consuming as a builder's are: a fixed lease
/// (`$what` names what is held), and for handles with re-entry, refusing
/// it (`$reentry` says what counts as asking again).
macro_rules! settings {
    ($handle:ty, $what:literal) => {
        #[doc = concat!("Gives ", $what, " taken through this handle a fixed lease of `lease` and")]
        /// no watchdog: the hold ends by itself after `lease`, even if its
        /// guard is still alive (then the guard's `is_held()` turns false).
        /// Defaults to the client's watchdog timeout, renewed while the
        /// guard lives.
        pub fn lease(mut self, lease: Duration) -> $handle {
            self.core.lease = Some(lease);
            self
        }
    };
    ($handle:ty, $what:literal, $reentry:literal) => {
        settings!($handle, $what);

        #[doc = concat!("Makes this handle refuse re-entry: a thread that already holds ", $reentry)]
        /// gets [`ErrorKind::WouldDeadlock`](crate::ErrorKind::WouldDeadlock)
        /// at once, without a round trip, and its first hold is untouched.
        /// Use it in work-stealing pools (rayon), where another task may run
        /// on a thread that waits inside a critical section. Defaults to the
        /// client's [`ClientBuilder::reentrant`](crate::ClientBuilder::reentrant)
        /// (reentrant).
        pub fn non_reentrant(mut self) -> $handle {
            self.core.reentrant = Some(false);
            self
        }
    };
}

pub(crate) use settings;
