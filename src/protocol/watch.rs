//! What a client does when a hand-over names it a watcher (see
//! `wakeup/watch.rs` for why): the message's form, and the one look per
//! name it owes, which a later naming moves rather than adds to. Given
//! the time; the subscriber thread makes the looks due. Also the looks a
//! client's own releases that opened a name ask for, which a later such
//! release of the name settles (`OpeningLooks`).

use std::collections::HashMap;
use std::time::Instant;

/// A hand-over message's payload `@<client id>:<key>` as (client id, key);
/// `None` for any other message (a release's `<client id>:<key>`).
pub fn hand_over(payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = payload.strip_prefix(b"@")?;
    let colon = rest.iter().position(|&b| b == b':')?;
    Some((&rest[..colon], &rest[colon + 1..]))
}

/// The looks a client owes after namings, one per key, each with when it
/// is due (an `Instant` in the library; the model checker's virtual
/// milliseconds, `check/`, which drives this same rule).
pub struct NamedLooks<L, T = Instant> {
    due: HashMap<Vec<u8>, (L, T)>,
}

impl<L, T> Default for NamedLooks<L, T> {
    fn default() -> Self {
        NamedLooks {
            due: HashMap::new(),
        }
    }
}

impl<L, T: Copy + Ord> NamedLooks<L, T> {
    /// A naming for `key` asks for `look` at `due`. A later hand-over
    /// settles the earlier one (its grant was claimed and released, or
    /// opened again by a look): a look not yet made moves to after this
    /// one, so each client makes at most one per quiet spell of a name.
    pub fn named(&mut self, key: &[u8], look: L, due: T) {
        self.due.insert(key.to_vec(), (look, due));
    }

    /// A naming for `key` may have been missed: `look` at `due`, unless a
    /// look is owed for it already (it is due no later: a subscriber that
    /// reconnects every few hundred milliseconds would otherwise put it
    /// off for ever, as a review found).
    pub fn maybe_named(&mut self, key: &[u8], look: L, due: T) {
        self.due.entry(key.to_vec()).or_insert((look, due));
    }

    /// The looks due by `now`, taken out, and when the next one is due.
    pub fn take_due(&mut self, now: T) -> (Vec<L>, Option<T>) {
        let mut next: Option<T> = None;
        let mut taken = Vec::new();
        for (key, (_, at)) in self.due.iter() {
            if *at > now {
                next = Some(next.map_or(*at, |n| n.min(*at)));
            } else {
                taken.push(key.clone());
            }
        }
        let looks = taken
            .into_iter()
            .filter_map(|k| self.due.remove(&k).map(|(look, _)| look))
            .collect();
        (looks, next)
    }
}

/// The looks a client's own releases that opened a name to its waiters
/// asked for (`lease::look_after_opening`), one per name, for a lock's and
/// a write hold's releases alone: a later such release of the name by the
/// same client settles the earlier one's look. The client held the name
/// in between, so that hand-over was claimed, or lapsed and went on, and
/// the later release's look is the one still owed. Under contention each
/// client released every few milliseconds, and each release's look ran
/// half a second later to find the name held (8 clients on one name: 2.7
/// looks an acquisition, 213 of 374 scripts). Not for permits: offers of
/// several permits run side by side, and a later one settles none of the
/// others. `L` stands for a look the caller can end (the library's, a
/// weak handle to its state).
///
/// "Later" is the released hold's fence, not when the look is asked for:
/// a thread may ask late (a multi-lock's release asks for each name's
/// look in turn, after the event handler of the name before it), after
/// another thread of the client took the name, released it and asked for
/// its own. Fences only grow, so a hold taken after a hand-over has the
/// higher fence; a look asked for late by a lower one ends nothing and is
/// not kept (it runs, one look more). A review found the order of asking
/// ending the look still owed: 4.4 s before the next live waiter got the
/// name, 0.57 s before this rule.
pub struct OpeningLooks<L> {
    pending: HashMap<Vec<u8>, (u64, L)>,
    /// When the map is swept of looks already over.
    sweep_at: usize,
}

impl<L> Default for OpeningLooks<L> {
    fn default() -> Self {
        OpeningLooks {
            pending: HashMap::new(),
            sweep_at: OpeningLooks::<L>::SWEEP_FROM,
        }
    }
}

impl<L> OpeningLooks<L> {
    /// A map this long is swept; then one twice as long as what stayed.
    const SWEEP_FROM: usize = 64;

    /// The release of the hold with `fence` opened `key` and asks for
    /// `look`; returns the look a release of `key` by a lower fence asked
    /// for, which this one settles (the caller ends it, if still pending).
    /// A look that is over stands for nothing, whatever its fence (fences
    /// that went back after a failover lost writes cost looks, not the
    /// rule). Looks `running` says are over are swept now and then, so a
    /// client's many names cost nothing once quiet.
    pub fn opened(
        &mut self,
        key: &[u8],
        fence: u64,
        look: L,
        running: impl Fn(&L) -> bool,
    ) -> Option<L> {
        // The name's entry is replaced in place: under contention a
        // client's releases of one name come every few milliseconds, and
        // each would copy the key again.
        if let Some(entry) = self.pending.get_mut(key) {
            if entry.0 >= fence && running(&entry.1) {
                // Asked for late: a later hold's look stands.
                return None;
            }
            return Some(std::mem::replace(entry, (fence, look)).1);
        }
        self.pending.insert(key.to_vec(), (fence, look));
        if self.pending.len() >= self.sweep_at {
            self.pending.retain(|_, (_, l)| running(l));
            self.sweep_at = (2 * self.pending.len()).max(Self::SWEEP_FROM);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{hand_over, NamedLooks, OpeningLooks};
    use std::time::{Duration, Instant};

    #[test]
    fn a_hand_over_message_names_clients_and_a_key() {
        assert_eq!(
            hand_over(b"@a1:{x}:lock"),
            Some((&b"a1"[..], &b"{x}:lock"[..]))
        );
        assert_eq!(hand_over(b"a1:{x}"), None);
        assert_eq!(hand_over(b"@a1"), None);
    }

    #[test]
    fn a_later_naming_moves_the_look_rather_than_adds_one() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut looks = NamedLooks::default();
        looks.named(b"{x}", 1, t0 + 550 * ms);
        looks.named(b"{x}", 2, t0 + 600 * ms);
        looks.named(b"{y}", 3, t0 + 700 * ms);
        assert_eq!(looks.take_due(t0 + 560 * ms), (vec![], Some(t0 + 600 * ms)));
        assert_eq!(
            looks.take_due(t0 + 600 * ms),
            (vec![2], Some(t0 + 700 * ms))
        );
        assert_eq!(looks.take_due(t0 + 800 * ms), (vec![3], None));
        assert_eq!(looks.take_due(t0 + 900 * ms), (vec![], None));
    }

    #[test]
    fn a_later_opening_of_a_name_settles_the_earlier_ones_look() {
        let mut looks = OpeningLooks::default();
        assert_eq!(looks.opened(b"{x}", 10, 1, |_| true), None);
        assert_eq!(looks.opened(b"{y}", 10, 2, |_| true), None);
        assert_eq!(looks.opened(b"{x}", 12, 3, |_| true), Some(1));
        assert_eq!(looks.opened(b"{y}", 11, 4, |_| true), Some(2));
    }

    /// The review's case: a release asks for its look late, after the
    /// client took the name again (a higher fence) and asked for that
    /// release's look, which must stand.
    #[test]
    fn a_look_asked_for_late_never_ends_a_later_holds_look() {
        let mut looks = OpeningLooks::default();
        assert_eq!(looks.opened(b"{a}", 21, "second", |_| true), None);
        assert_eq!(looks.opened(b"{a}", 20, "first, late", |_| true), None);
        assert_eq!(looks.opened(b"{a}", 22, "third", |_| true), Some("second"));
    }

    /// Fences that went back (a failover that lost writes): the look of
    /// the higher one, once over, no longer keeps the rule from the name.
    #[test]
    fn a_look_that_is_over_stands_for_nothing_whatever_its_fence() {
        let mut looks = OpeningLooks::default();
        assert_eq!(looks.opened(b"{a}", 900, 1, |_| true), None);
        assert_eq!(looks.opened(b"{a}", 5, 2, |&l| l != 1), Some(1));
        assert_eq!(looks.opened(b"{a}", 6, 3, |_| true), Some(2));
    }

    #[test]
    fn looks_over_are_swept_so_many_names_cost_nothing_once_quiet() {
        let mut looks = OpeningLooks::default();
        for i in 0..10_000u32 {
            // Only the last ten are still running.
            looks.opened(&i.to_be_bytes(), 1, i, |&l| l + 10 > i);
        }
        assert!(looks.pending.len() < 200, "{}", looks.pending.len());
    }

    #[test]
    fn a_possibly_missed_naming_never_puts_off_a_look_owed() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut looks = NamedLooks::default();
        looks.named(b"{x}", 1, t0 + 550 * ms);
        // The subscriber reconnects, again and again.
        looks.maybe_named(b"{x}", 2, t0 + 870 * ms);
        looks.maybe_named(b"{x}", 3, t0 + 1_170 * ms);
        looks.maybe_named(b"{y}", 4, t0 + 870 * ms);
        assert_eq!(
            looks.take_due(t0 + 560 * ms),
            (vec![1], Some(t0 + 870 * ms))
        );
        assert_eq!(looks.take_due(t0 + 900 * ms), (vec![4], None));
    }
}
