//! Thread-local hold counts: re-entry costs no round trip.
//!
//! The owner of a hold is the pair (client, thread). Each thread keeps a map
//! from (client id, primitive kind, key) to the hold it has: how deep, with
//! which token and fencing token, and the shared lease state. Only the
//! outermost acquire and the last release go to Redis.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use crate::renewal::LeaseState;

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

/// What a thread holds for one key.
#[derive(Clone, Debug)]
pub(crate) struct Hold {
    pub(crate) token: Arc<str>,
    pub(crate) fence: u64,
    pub(crate) lease: Arc<LeaseState>,
}

struct Entry {
    count: usize,
    hold: Hold,
}

thread_local! {
    static HOLDS: RefCell<HashMap<HoldKey, Entry>> = RefCell::new(HashMap::new());
}

/// Re-enters a hold this thread already has: returns it with the depth
/// increased, or `None` if the thread does not hold the key. A hold whose
/// lease is known lost is not re-entered; the caller acquires afresh.
pub(crate) fn reenter(key: &HoldKey) -> Option<Hold> {
    HOLDS
        .try_with(|h| {
            let mut h = h.borrow_mut();
            let entry = h.get_mut(key)?;
            if entry.hold.lease.is_lost() {
                return None;
            }
            entry.count += 1;
            Some(entry.hold.clone())
        })
        .ok()
        .flatten()
}

/// Records the outermost hold (depth 1). If a lost hold of the same key is
/// still recorded (its guards are alive), the new one replaces it; each old
/// guard then makes a token-checked release of its own, which reports the
/// loss and cannot touch the new hold (see `leave`).
pub(crate) fn enter(key: HoldKey, hold: Hold) {
    // During thread teardown the map may be gone: the hold then simply is
    // not re-entrant, which is safe.
    let _ = HOLDS.try_with(|h| {
        h.borrow_mut().insert(key, Entry { count: 1, hold });
    });
}

/// Records a fresh outermost hold of `key` (see `enter`) and returns it.
pub(crate) fn begin(key: &HoldKey, token: Arc<str>, fence: u64, lease: Arc<LeaseState>) -> Hold {
    let hold = Hold {
        token,
        fence,
        lease,
    };
    enter(key.clone(), hold.clone());
    hold
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
                Some(entry) if &*entry.hold.token == token => {
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
pub(crate) fn peek(key: &HoldKey) -> Option<Hold> {
    HOLDS
        .try_with(|h| h.borrow().get(key).map(|e| e.hold.clone()))
        .ok()
        .flatten()
}

/// A guard's release of one level. `Ok(true)`: that was the outermost level;
/// renewal is stopped and the caller must release in Redis. `Ok(false)`: an
/// inner level, nothing to do. `Err(LockLost)`: an inner level of a lease
/// that is already lost.
pub(crate) fn release_level(key: &HoldKey, hold: &Hold) -> crate::error::Result<bool> {
    if leave(key, &hold.token) {
        hold.lease.finish();
        return Ok(true);
    }
    if hold.lease.is_lost() {
        return Err(crate::error::Error::lost(
            "the lease was lost while it was held",
        ));
    }
    Ok(false)
}

/// This thread's depth for a key.
pub(crate) fn depth(key: &HoldKey) -> usize {
    HOLDS
        .try_with(|h| h.borrow().get(key).map_or(0, |e| e.count))
        .unwrap_or(0)
}
