//! What a client does when a hand-over names it a watcher (see
//! `wakeup/watch.rs` for why): the message's form, and the one look per
//! name it owes, which a later naming moves rather than adds to. Given
//! the time; the subscriber thread makes the looks due.

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

#[cfg(test)]
mod tests {
    use super::{hand_over, NamedLooks};
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
