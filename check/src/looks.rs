//! A client's looks at a name (the renewal thread's watch scripts): the
//! blocked waiter's, the one after a release that opened the name, and
//! the one a hand-over's naming asks for, with when each runs. The times
//! are the library's own rules (`protocol::looks`, `protocol::timing`);
//! the naming rule is restated on the models' looks and pinned to the
//! library's `NamedLooks` by the test below.

use crate::parties::{ms, At};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Look {
    pub(crate) due: i64,
    /// The blocked waiter's token, or none for a look at the name alone.
    pub(crate) waiter: Option<u8>,
    pub(crate) left: u32,
    /// Asked for by a hand-over that named this client as a watcher
    /// (src/wakeup/watch.rs): the next naming replaces it.
    pub(crate) watch: bool,
    /// Which of the client's names it looks at (a multi-lock's; else 0).
    pub(crate) name: u8,
    /// Asked for by the client's own release of a lock or a write hold
    /// that opened the name, that hold's fence: a later such release of
    /// the name (a higher fence) ends it ([`after_opening`]).
    pub(crate) opening: Option<i64>,
}

/// The renewal thread's looks for a waiter that blocks now, its attempt
/// sent at `at` found busy for `wait` ms (`Acquisition::on_busy` →
/// `renewal::watch_for`), decided by the library's rule
/// (`protocol::looks::watch_on_busy`): from when the holder's lease would
/// end (at once after a reply read late), unless token `t` has them
/// already (a retired token's end with it, as `Acquisition::on_error`
/// finishes them).
pub(crate) fn watch_waiter(looks: &mut Vec<Look>, t: u8, name: u8, at: i64, now: i64, wait: i64) {
    let watching = looks.iter().any(|l| l.waiter == Some(t));
    let Some(first) = redlease::__protocol::watch_on_busy(watching, true, At(at), At(now), wait)
    else {
        return;
    };
    looks.retain(|l| l.waiter.is_none());
    looks.push(Look {
        due: runs_at(first.0, now),
        waiter: Some(t),
        left: redlease::__protocol::WAITER_LOOKS,
        watch: false,
        name,
        opening: None,
    });
}

/// When a look asked for at `first` runs, asked at `now`
/// (`protocol::looks::look_runs_at`, as `renewal::watch_for` has it), in
/// the models' milliseconds.
pub(crate) fn runs_at(first: i64, now: i64) -> i64 {
    redlease::__protocol::look_runs_at(At(first), At(now)).0
}

/// The look a release that opened `name` to its waiters makes, its reply
/// read at `now` (`lease::look_after_opening`): at most `NAME_LOOKS`
/// looks, the first once the hand-over's claim window (`claim`) has
/// passed.
pub(crate) fn opening_look(name: u8, now: i64, claim: std::time::Duration) -> Look {
    use redlease::__protocol as p;
    Look {
        due: runs_at(now + ms(p::look_after(claim)), now),
        waiter: None,
        left: p::NAME_LOOKS,
        watch: false,
        name,
        opening: None,
    }
}

/// The client's release that opened `look.name` asks for `look`
/// (`lease::look_after_opening`). One of a lock or a write hold, whose
/// fence `settles` has, ends the look an earlier such release of the name
/// (a lower fence) asked for, made or not: decided by the library's own
/// rule (`protocol::watch::OpeningLooks`), fed the looks pending.
pub(crate) fn after_opening(looks: &mut Vec<Look>, look: Look, settles: Option<i64>) {
    let Some(fence) = settles else {
        looks.push(look);
        return;
    };
    let mut rule = redlease::__protocol::OpeningLooks::default();
    for (k, l) in looks.iter().enumerate() {
        if let Some(f) = l.opening {
            rule.opened(&[l.name], f.max(0) as u64, k, |_| true);
        }
    }
    let keep = match rule.opened(&[look.name], fence.max(0) as u64, usize::MAX, |_| true) {
        Some(k) => {
            looks.remove(k);
            true
        }
        // Kept unless a later hold's look stands (then it runs alone).
        None => !looks
            .iter()
            .any(|l| l.name == look.name && l.opening.is_some_and(|f| f >= fence)),
    };
    looks.push(Look {
        opening: keep.then_some(fence),
        ..look
    });
}

/// The look a naming of a client as a hand-over's watcher asks for, at
/// `name` (`Watches::named` → `NamedLooks::named`, then
/// `renewal::watch_for`): the client owes it until `NAME_LOOK_AFTER` has
/// passed and hands it to its renewal thread then, which makes it a
/// `LOOK_MARGIN` later. A later naming moves a look still owed; one handed
/// over runs. Pinned to the library's `NamedLooks` by
/// `tests/named_looks.rs`.
pub(crate) fn named_look(looks: &mut Vec<Look>, name: u8, now: i64) {
    use redlease::__protocol as p;
    looks.retain(|l| !(l.watch && l.name == name && owed_at(l, now)));
    looks.push(Look {
        due: runs_at(now + ms(p::NAME_LOOK_AFTER), now),
        waiter: None,
        left: p::NAME_LOOKS,
        watch: true,
        name,
        opening: None,
    });
}

/// A naming of the client for `name` may have been missed (its
/// subscriber starts listening: `Watches::listening` →
/// `NamedLooks::maybe_named`): the look a naming asks for, unless one is
/// owed already. Pinned with [`named_look`].
pub(crate) fn missed_naming_look(looks: &mut Vec<Look>, name: u8, now: i64) {
    if !owes(looks, name, now) {
        named_look(looks, name, now);
    }
}

/// The naming that asked for the look still owed at `name` was lost: the
/// look goes (a model's naming is heard as it is sent; losing it after
/// takes back what it asked for, and also the earlier look it moved, one
/// look fewer than the library would make: the stricter case).
pub(crate) fn lose_naming(looks: &mut Vec<Look>, name: u8, now: i64) {
    looks.retain(|l| !(l.watch && l.name == name && owed_at(l, now)));
}

/// Whether the client still owes a look a naming asked for at `name` (not
/// yet handed to its renewal thread).
pub(crate) fn owes(looks: &[Look], name: u8, now: i64) -> bool {
    looks
        .iter()
        .any(|l| l.watch && l.name == name && owed_at(l, now))
}

/// Whether a naming's look `l` is still owed at `now`: `NamedLooks`
/// hands it over once its due time (`LOOK_MARGIN` before it runs) is
/// reached.
fn owed_at(l: &Look, now: i64) -> bool {
    l.due - ms(redlease::__protocol::LOOK_MARGIN) > now
}

#[cfg(test)]
mod tests {
    //! The models' naming rules pinned to the library's own `NamedLooks`
    //! (the looks a client owes after namings) and `renewal::watch_for`
    //! (a look handed over runs a `LOOK_MARGIN` later): every sequence of
    //! namings and subscriber starts, at gaps around each boundary, makes
    //! its looks at the same moments in both.
    use super::{missed_naming_look, named_look, Look};
    use crate::parties::ms;
    use redlease::__protocol as p;

    #[derive(Clone, Copy, Debug)]
    enum Event {
        /// A hand-over names the client (`Watches::named`).
        Named,
        /// Its subscriber starts listening (`Watches::listening`).
        Missed,
    }

    /// When the library's client makes its looks.
    fn library(events: &[(i64, Event)]) -> Vec<i64> {
        let mut owed = p::NamedLooks::<(), i64>::default();
        let mut runs = Vec::new();
        // The subscriber thread hands each look over when it is due.
        let mut hand_over = |owed: &mut p::NamedLooks<(), i64>, until: i64| loop {
            match owed.take_due(i64::MIN).1 {
                Some(at) if at <= until => {
                    for () in owed.take_due(at).0 {
                        let first = at + ms(p::LOOK_MARGIN);
                        runs.push(first.min(at + ms(p::LOOK_MAX)));
                    }
                }
                _ => break,
            }
        };
        let mut now = 0;
        for &(gap, e) in events {
            now += gap;
            hand_over(&mut owed, now);
            let due = now + ms(p::NAME_LOOK_AFTER);
            match e {
                Event::Named => owed.named(b"k", (), due),
                Event::Missed => owed.maybe_named(b"k", (), due),
            }
        }
        hand_over(&mut owed, i64::MAX);
        runs.sort();
        runs
    }

    /// When a model's client makes them.
    fn model(events: &[(i64, Event)]) -> Vec<i64> {
        let mut looks: Vec<Look> = Vec::new();
        let mut runs = Vec::new();
        let mut run = |looks: &mut Vec<Look>, until: i64| {
            looks.retain(|l| {
                let due = l.due <= until;
                if due {
                    runs.push(l.due);
                }
                !due
            })
        };
        let mut now = 0;
        for &(gap, e) in events {
            now += gap;
            run(&mut looks, now - 1);
            match e {
                Event::Named => named_look(&mut looks, 0, now),
                Event::Missed => missed_naming_look(&mut looks, 0, now),
            }
        }
        run(&mut looks, i64::MAX);
        runs.sort();
        runs
    }

    #[test]
    fn the_models_make_a_naming_s_looks_when_the_library_does() {
        let after = ms(p::NAME_LOOK_AFTER);
        let margin = ms(p::LOOK_MARGIN);
        let gaps = [
            0,
            1,
            10,
            after - 1,
            after,
            after + 1,
            after + margin - 1,
            after + margin,
            after + margin + 1,
            2_000,
        ];
        let kinds = [Event::Named, Event::Missed];
        let steps: Vec<(i64, Event)> = gaps
            .iter()
            .flat_map(|&g| kinds.iter().map(move |&k| (g, k)))
            .collect();
        let mut seqs: Vec<Vec<(i64, Event)>> = vec![vec![]];
        let mut checked = 0;
        for _ in 0..4 {
            let mut next = Vec::new();
            for s in &seqs {
                for &st in &steps {
                    let mut s = s.clone();
                    s.push(st);
                    assert_eq!(library(&s), model(&s), "{s:?}");
                    checked += 1;
                    next.push(s);
                }
            }
            seqs = next;
        }
        assert!(checked > 100_000);
    }
}
