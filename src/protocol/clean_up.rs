//! What an acquisition leaves to clean up when it gives up (or when a
//! later token of it was granted), decided without I/O: the lease
//! lifecycle (`lease/acquisition.rs`) makes the calls in this order and
//! asks after each whether to go on.

use crate::error::ErrorKind;

/// What an acquisition's attempts with its current token have left for
/// the clean-up ([`undos`]), kept as each reply or failure comes in
/// (`Acquisition::on_busy`, `on_error`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Left {
    /// The current token may hold a grant nobody confirmed: an attempt's
    /// outcome was unknown, and no reply has decided since (a repeat that
    /// could not even be sent does not).
    pub ambiguous: bool,
    /// The last attempt's reply was late (the server stalled: its undo is
    /// queued behind it), or the server was unreachable with nothing of
    /// ours possibly granted: clean-up calls would only wait out timeouts
    /// of their own.
    pub late: bool,
    /// The current token's grant reached the server (it may have left a
    /// queue entry to withdraw).
    pub reached: bool,
}

/// How one round trip failed, as [`Left::failed`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Sent, and its outcome unknown (the connection broke, or the reply
    /// was late).
    pub ambiguous: bool,
    /// Nothing was written (the connection was refused).
    pub unsent: bool,
    /// The reply was late and the call's undo was written behind it on the
    /// same connection (`Node::fail`).
    pub undone: bool,
}

impl Left {
    /// A reply decided the attempt (busy): it reached the server, and
    /// nothing of it is unknown.
    pub fn replied(&mut self) {
        *self = Left {
            ambiguous: false,
            late: false,
            reached: true,
        };
    }

    /// A failed round trip. Returns whether its token is retired: a late
    /// reply's undo is queued behind it and could remove a new hold made
    /// with the same token, so the acquisition goes on with a fresh one
    /// (the retired token's entries are the clean-up's, unless the wait
    /// ends while the server is late: see [`undos`]), whose record starts
    /// afresh but for `late`.
    pub fn failed(&mut self, f: Failure) -> bool {
        self.ambiguous |= f.ambiguous;
        self.late = f.undone || (f.unsent && !self.ambiguous);
        self.reached |= !f.unsent;
        if f.undone {
            (self.ambiguous, self.reached) = (false, false);
        }
        f.undone
    }
}

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
    fn a_late_reply_retires_the_token_and_leaves_nothing_to_clean_up_while_late() {
        let late = Failure {
            ambiguous: true,
            unsent: false,
            undone: true,
        };
        let mut left = Left::default();
        left.replied();
        assert!(left.failed(late));
        assert_eq!(
            left,
            Left {
                ambiguous: false,
                late: true,
                reached: false
            }
        );
        // A broken connection: the grant may stand, to be released.
        let broke = Failure {
            undone: false,
            ..late
        };
        let mut left = Left::default();
        assert!(!left.failed(broke));
        assert!(left.ambiguous && left.reached && !left.late);
        // Refused after that: still ambiguous, so not late.
        let refused = Failure {
            ambiguous: false,
            unsent: true,
            undone: false,
        };
        assert!(!left.failed(refused));
        assert!(left.ambiguous && !left.late);
        // Refused with nothing possibly granted: late, nothing to do.
        let mut left = Left::default();
        assert!(!left.failed(refused));
        assert!(left.late && !left.reached);
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
