//! Slots seen moving lately: where a release's hand-over waits longer.
//!
//! When a slot moves to another master, Redis redirects the clients
//! blocked on it at the old master (a waiter's `BLMOVE`) only from its
//! clients cron, each within a second at the default `hz 10`. A release
//! that runs on the new master meanwhile hands the name over to waiters
//! still blocked at the old one, and a hand-over nobody took within its
//! claim window drops the waiters that block (lua/queue.lua
//! `queue_untaken`): a fair lock's oldest waiter, redirected 0.5 s after
//! the release, went to the back of the line. A client that saw a slot
//! moving (a `MOVED`, `ASK` or `TRYAGAIN` reply for a name in it, or its
//! slot map read again with the slot on another master) sends its
//! releases of names in that slot for a while with a longer claim window
//! (`protocol::timing::hand_over_claim`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::super::slots::key_slot;

use crate::protocol::timing::MOVE_SETTLING;
use crate::util::mutex::lock;

/// When each slot was last seen moving (only slots seen within
/// [`MOVE_SETTLING`] matter; older sightings are dropped as new ones come).
#[derive(Default)]
pub(super) struct Settling {
    seen: Mutex<HashMap<u16, Instant>>,
}

impl Settling {
    /// A reply for `key` said its slot is moving or moved (`code`: the
    /// error reply's code).
    pub(super) fn saw_code(&self, key: Option<&[u8]>, code: Option<&str>) {
        if let (Some(key), Some("MOVED" | "ASK" | "TRYAGAIN")) = (key, code) {
            self.saw(key_slot(key));
        }
    }

    /// `slot` was seen moving now.
    pub(super) fn saw(&self, slot: u16) {
        let now = Instant::now();
        let mut seen = lock(&self.seen);
        seen.retain(|_, at| now.duration_since(*at) < MOVE_SETTLING);
        seen.insert(slot, now);
    }

    /// The slot map was read again: every slot whose master changed was
    /// seen moving. (`before` empty: the first reading, nothing moved.)
    pub(super) fn saw_map(&self, before: &[(u16, u16, Arc<str>)], after: &[(u16, u16, Arc<str>)]) {
        if before.is_empty() || before == after {
            return;
        }
        let owner = |ranges: &[(u16, u16, Arc<str>)], slot: u16| {
            let at = ranges.partition_point(|(_, last, _)| *last < slot);
            ranges
                .get(at)
                .filter(|(first, _, _)| *first <= slot)
                .map(|(_, _, addr)| addr.clone())
        };
        for slot in 0..16384u16 {
            if owner(before, slot) != owner(after, slot) {
                self.saw(slot);
            }
        }
    }

    /// How long ago `key`'s slot was last seen moving, if within
    /// [`MOVE_SETTLING`].
    pub(super) fn moved_ago(&self, key: &[u8]) -> Option<Duration> {
        let seen = lock(&self.seen);
        if seen.is_empty() {
            return None;
        }
        let ago = seen.get(&key_slot(key))?.elapsed();
        (ago < MOVE_SETTLING).then_some(ago)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_seen_moving_settles_for_a_while_and_others_do_not() {
        let s = Settling::default();
        assert_eq!(s.moved_ago(b"{a}x"), None);
        s.saw_code(Some(b"{a}x"), Some("TRYAGAIN"));
        assert!(s.moved_ago(b"{a}y").is_some());
        assert_eq!(s.moved_ago(b"{b}x"), None);
        s.saw_code(Some(b"{b}x"), Some("NOSCRIPT"));
        assert_eq!(s.moved_ago(b"{b}x"), None);
    }

    #[test]
    fn a_map_read_again_marks_only_the_slots_whose_master_changed() {
        let s = Settling::default();
        let a: Arc<str> = Arc::from("h:1");
        let b: Arc<str> = Arc::from("h:2");
        let before = vec![(0, 16383, a.clone())];
        s.saw_map(&[], &before);
        assert!(lock(&s.seen).is_empty());
        let slot = key_slot(b"{a}x");
        let after = vec![
            (0, slot - 1, a.clone()),
            (slot, slot, b),
            (slot + 1, 16383, a),
        ];
        s.saw_map(&before, &after);
        assert_eq!(lock(&s.seen).len(), 1);
        assert!(s.moved_ago(b"{a}x").is_some());
    }
}
