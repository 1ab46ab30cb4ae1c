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

/// When each slot was last seen moving: single slots a reply named, and
/// ranges a slot map read again showed on another master (a failover
/// moves thousands of slots at once: one range, not a slot each). Only
/// sightings within [`MOVE_SETTLING`] matter; older ones are dropped as
/// new ones come.
#[derive(Default)]
pub(super) struct Settling {
    seen: Mutex<Seen>,
}

type Ranges = [(u16, u16, Arc<str>)];

#[derive(Default)]
struct Seen {
    slots: HashMap<u16, Instant>,
    ranges: Vec<(u16, u16, Instant)>,
}

impl Seen {
    fn forget_old(&mut self, now: Instant) {
        self.slots
            .retain(|_, at| now.duration_since(*at) < MOVE_SETTLING);
        self.ranges
            .retain(|(_, _, at)| now.duration_since(*at) < MOVE_SETTLING);
    }
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
        seen.forget_old(now);
        seen.slots.insert(slot, now);
    }

    /// The slot map was read again: every slot whose master changed was
    /// seen moving, as ranges. (`before` empty: the first reading, nothing
    /// moved.)
    pub(super) fn saw_map(&self, before: &Ranges, after: &Ranges) {
        if before.is_empty() || before == after {
            return;
        }
        let changed = changed_ranges(before, after);
        if changed.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut seen = lock(&self.seen);
        seen.forget_old(now);
        seen.ranges
            .extend(changed.into_iter().map(|(first, last)| (first, last, now)));
    }

    /// How long ago `key`'s slot was last seen moving, if within
    /// [`MOVE_SETTLING`].
    pub(super) fn moved_ago(&self, key: &[u8]) -> Option<Duration> {
        let seen = lock(&self.seen);
        if seen.slots.is_empty() && seen.ranges.is_empty() {
            return None;
        }
        let slot = key_slot(key);
        let last = seen
            .ranges
            .iter()
            .filter(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, at)| *at)
            .chain(seen.slots.get(&slot).copied())
            .max()?;
        let ago = last.elapsed();
        (ago < MOVE_SETTLING).then_some(ago)
    }
}

/// The slot ranges whose master differs between two maps (sorted,
/// adjacent ones joined), in one pass over their boundaries.
fn changed_ranges(before: &Ranges, after: &Ranges) -> Vec<(u16, u16)> {
    let owner = |ranges: &Ranges, slot: u16| {
        let at = ranges.partition_point(|(_, last, _)| *last < slot);
        ranges
            .get(at)
            .filter(|(first, _, _)| *first <= slot)
            .map(|(_, _, addr)| addr.clone())
    };
    // Every slot where either map's ownership may change.
    let mut starts: Vec<u32> = vec![0, 16384];
    for (first, last, _) in before.iter().chain(after) {
        starts.extend([u32::from(*first), u32::from(*last) + 1]);
    }
    starts.sort_unstable();
    starts.dedup();
    let mut changed: Vec<(u16, u16)> = Vec::new();
    for pair in starts.windows(2) {
        let (first, next) = (pair[0], pair[1]);
        if first >= 16384 {
            break;
        }
        let (first, last) = (first as u16, (next.min(16384) - 1) as u16);
        if owner(before, first) == owner(after, first) {
            continue;
        }
        match changed.last_mut() {
            Some((_, l)) if u32::from(*l) + 1 == u32::from(first) => *l = last,
            _ => changed.push((first, last)),
        }
    }
    changed
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
        assert!(lock(&s.seen).ranges.is_empty());
        let slot = key_slot(b"{a}x");
        let after = vec![
            (0, slot - 1, a.clone()),
            (slot, slot, b),
            (slot + 1, 16383, a),
        ];
        s.saw_map(&before, &after);
        assert_eq!(lock(&s.seen).ranges.len(), 1);
        assert!(s.moved_ago(b"{a}x").is_some());
        assert!(s.moved_ago(b"{b}x").is_none());
    }

    #[test]
    fn a_failover_is_one_range_and_quick() {
        let (a, b, c): (Arc<str>, Arc<str>, Arc<str>) =
            (Arc::from("h:1"), Arc::from("h:2"), Arc::from("h:3"));
        let before = vec![
            (0, 5460, a.clone()),
            (5461, 10922, b),
            (10923, 16383, c.clone()),
        ];
        let after = vec![
            (0, 5460, a),
            (5461, 10922, Arc::from("h:4")),
            (10923, 16383, c),
        ];
        assert_eq!(changed_ranges(&before, &after), vec![(5461, 10922)]);
        let moved: Vec<(u16, u16, Arc<str>)> = vec![(0, 16383, Arc::from("h:9"))];
        assert_eq!(changed_ranges(&before, &moved), vec![(0, 16383)]);
        let s = Settling::default();
        let t = Instant::now();
        s.saw_map(&before, &moved);
        assert!(t.elapsed() < Duration::from_millis(50), "{:?}", t.elapsed());
        assert!(s.moved_ago(b"anything").is_some());
    }
}
