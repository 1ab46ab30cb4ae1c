//! Thread-local hold counts: re-entry costs no round trip.
//!
//! The owner of a hold is the pair (client, thread). Each thread keeps a map
//! from (client id, primitive kind, key) to the hold it has: how deep, and
//! the shared record of the hold ([`Held`]). Only the outermost acquire and
//! the last release go to Redis.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::PreparedCall;
use crate::protocol::lease_state::LeaseState;

/// Which hold of a key: a key may be held as a lock, a read or a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Mode {
    Exclusive,
    Read,
    Write,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct HoldKey {
    pub(crate) client: u128,
    pub(crate) mode: Mode,
    pub(crate) key: Arc<[u8]>,
}

/// One hold in Redis, shared by its guards (every re-entry of it).
pub(crate) struct Held {
    pub(crate) token: Arc<str>,
    pub(crate) fence: u64,
    pub(crate) state: Arc<LeaseState>,
    /// The token-checked release (`1` released, `0` not ours; a lock's
    /// `2`: released and opened to its waiters).
    pub(crate) release: PreparedCall,
    /// A lock's look at its name alone (lua/lock_watch.lua with no token),
    /// made once after a release opened it to the waiters, or after an
    /// extension shortened the lease: a lock key that then goes without a
    /// release still opens to the blocked waiters.
    pub(crate) look: Option<Arc<PreparedCall>>,
    /// The token-checked extension; its last argument is the lease in ms.
    pub(crate) extend: Arc<PreparedCall>,
    /// Renewed by the watchdog (else a fixed lease).
    pub(crate) watchdog: bool,
    /// The key waiters of this name wait on.
    pub(crate) wake: Arc<[u8]>,
    /// The primitive's kind and name, for messages and events.
    pub(crate) what: &'static str,
    pub(crate) name: Arc<[u8]>,
    /// When the granting command was sent.
    pub(crate) acquired: std::time::Instant,
}

impl Held {
    /// The event of this hold's grant, `waited` after the call.
    pub(crate) fn acquire_event(
        &self,
        waited: std::time::Duration,
    ) -> crate::events::AcquireEvent<'_> {
        crate::events::AcquireEvent {
            name: &self.name,
            kind: self.what,
            waited,
            // Permits and read holds draw no fence.
            fence: (self.fence > 0).then_some(self.fence),
        }
    }
}

struct Entry {
    count: usize,
    held: Arc<Held>,
}

thread_local! {
    static HOLDS: RefCell<HashMap<HoldKey, Entry>> = RefCell::new(HashMap::new());
}

/// Re-enters a hold this thread already has: returns it with the depth
/// increased, or `None` if the thread does not hold the key. A hold whose
/// lease is known lost is not re-entered; the caller acquires afresh.
pub(crate) fn reenter(key: &HoldKey) -> Option<Arc<Held>> {
    HOLDS
        .try_with(|h| {
            let mut h = h.borrow_mut();
            let entry = h.get_mut(key)?;
            if entry.held.state.is_lost() {
                return None;
            }
            entry.count += 1;
            Some(entry.held.clone())
        })
        .ok()
        .flatten()
}

/// Records the outermost hold (depth 1). If a lost hold of the same key is
/// still recorded (its guards are alive), the new one replaces it; each old
/// guard then makes a token-checked release of its own, which reports the
/// loss and cannot touch the new hold (see `leave`).
pub(crate) fn enter(key: HoldKey, held: Arc<Held>) {
    // During thread teardown the map may be gone: the hold then simply is
    // not re-entrant, which is safe.
    let _ = HOLDS.try_with(|h| {
        h.borrow_mut().insert(key, Entry { count: 1, held });
    });
}

/// Leaves one level of a hold. Returns `true` when that was the last level
/// of *this* hold (the caller must then release it in Redis). A guard whose
/// hold was replaced (see `enter`) returns `true` without touching the map.
pub(crate) fn leave(key: &HoldKey, token: &str) -> bool {
    // A guard dropped during thread teardown (the map already gone)
    // releases in Redis: better one release too many than an orphan lease.
    HOLDS
        .try_with(|h| {
            let mut h = h.borrow_mut();
            match h.get_mut(key) {
                Some(entry) if &*entry.held.token == token => {
                    entry.count -= 1;
                    if entry.count == 0 {
                        h.remove(key);
                        true
                    } else {
                        false
                    }
                }
                _ => true,
            }
        })
        .unwrap_or(true)
}

/// A hold this thread has, without entering it again.
pub(crate) fn peek(key: &HoldKey) -> Option<Arc<Held>> {
    HOLDS
        .try_with(|h| h.borrow().get(key).map(|e| e.held.clone()))
        .ok()
        .flatten()
}

/// This thread's depth for a key.
pub(crate) fn depth(key: &HoldKey) -> usize {
    HOLDS
        .try_with(|h| h.borrow().get(key).map_or(0, |e| e.count))
        .unwrap_or(0)
}
