//! What an acquisition leaves to clean up when it gives up (or when a
//! later token of it was granted), decided without I/O: the lease
//! lifecycle (`lease/acquisition.rs`) makes the calls in this order and
//! asks after each whether to go on.

use crate::error::ErrorKind;

/// One clean-up call, in the order they are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undo {
    /// The token-checked release of what the last attempt may have
    /// granted (its outcome is unknown).
    ReleaseLast,
    /// The withdrawal of the `n`th sent token's queue entry or intent.
    Leave(usize),
}

/// The calls that clean up after `sent` tokens reached the server
/// (`leaves(n)`: the `n`th left a queue entry or intent to withdraw),
/// `ambiguous` if the last attempt may have granted. None at all when the
/// server is stalled or unreachable (`late`): each call would wait another
/// timeout, the undo of a late grant is already queued behind its grant,
/// and queue entries and intents lapse by themselves.
pub fn undos(
    sent: usize,
    leaves: impl Fn(usize) -> bool,
    ambiguous: bool,
    late: bool,
) -> Vec<Undo> {
    if late || sent == 0 {
        return Vec::new();
    }
    let release = ambiguous.then_some(Undo::ReleaseLast);
    release
        .into_iter()
        .chain((0..sent).filter(|&n| leaves(n)).map(Undo::Leave))
        .collect()
}

/// Whether the clean-up goes on after a call that came to `failed`: not
/// once the server cannot be reached (every later call would wait a
/// timeout of its own).
pub fn goes_on(failed: Option<ErrorKind>) -> bool {
    failed != Some(ErrorKind::Connection)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ambiguous_attempt_is_released_before_the_entries_are_withdrawn() {
        let plan = undos(3, |n| n != 1, true, false);
        assert_eq!(plan, [Undo::ReleaseLast, Undo::Leave(0), Undo::Leave(2)]);
        assert_eq!(
            undos(2, |_| true, false, false),
            [Undo::Leave(0), Undo::Leave(1)]
        );
    }

    #[test]
    fn nothing_is_cleaned_up_on_a_late_server_or_before_anything_was_sent() {
        assert!(undos(3, |_| true, true, true).is_empty());
        assert!(undos(0, |_| true, true, false).is_empty());
    }

    #[test]
    fn the_clean_up_stops_at_the_first_call_that_cannot_reach_the_server() {
        assert!(goes_on(None));
        assert!(goes_on(Some(ErrorKind::Server)));
        assert!(!goes_on(Some(ErrorKind::Connection)));
    }
}
