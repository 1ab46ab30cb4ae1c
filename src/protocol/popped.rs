//! What a waiter makes of a grant its pop took from the open list: what
//! its pipeline reads behind the pop ([`behind_pop`]), whether the pop
//! alone took the grant ([`pop_took_grant`]), how long it surely holds,
//! and whether it claims the full lease before the guard is handed out
//! ([`popped_hold`]). The library (`Node::grant_blocking`,
//! `lease::taken_by_pop`) and the model checker (`check/`) both decide by
//! these.

use std::borrow::Cow;
use std::time::Duration;

use crate::protocol::timing::GRANT_CLAIM;

/// The commands a lock waiter's pipeline sends behind its pop, each as
/// its words: the waiter's own list (`into`, where the pop moves the
/// fence) kept for two claim windows (a grant popped and never claimed,
/// its process dead, goes with it), the lock key's (`holder`) `PTTL`
/// then its value (in that order: a value still the grant's proves the
/// time left is its), and for a fair lock whether any waiter keeps its
/// turn waiting for messages (`turns`). Their replies, in this order, are
/// what [`pop_took_grant`] reads.
pub fn behind_pop<'a>(
    into: &'a [u8],
    holder: &'a [u8],
    turns: Option<&'a [u8]>,
) -> Vec<Vec<Cow<'a, [u8]>>> {
    let claim = (GRANT_CLAIM.as_millis() as u64 * 2)
        .to_string()
        .into_bytes();
    let word = |w: &'a [u8]| Cow::Borrowed(w);
    let mut cmds = vec![
        vec![word(b"PEXPIRE"), word(into), Cow::Owned(claim)],
        vec![word(b"PTTL"), word(holder)],
        vec![word(b"GET"), word(holder)],
    ];
    if let Some(turns) = turns {
        cmds.push(vec![word(b"EXISTS"), word(turns)]);
    }
    cmds
}

/// The command read right before a waiter's pop and right behind it (so
/// before everything else behind it), in the same pipeline: the server's
/// clock between the two ([`waited`]) says how long after the pipeline was
/// sent the pop was served. Without it, all the waiter knew was that the
/// grant started after the pipeline's sending, maybe a minute before its
/// reply: after a block of a sixth of a second or more the first hold had
/// too little left (see [`popped_hold`]), and the waiter claimed its lease
/// in a round trip of its own before the guard was handed out (figures in
/// docs/performance-log.md, 2026-12-01).
pub const SERVER_CLOCK: &str = "TIME";

/// How long after a waiter's pipeline was sent its pop was surely served,
/// from the server's clock read before the pop (`before`, microseconds)
/// and behind it (`after`): the difference less the drift allowed between
/// two clocks' rates (a hundredth of it and 2 ms, as between Redlock's
/// masters: `quorum::drift`), and never more than `elapsed`, the time the
/// waiter's own clock says passed from the sending to the reply. Zero
/// when either reading is missing or the server's clock went back (a step
/// back only shortens it). The commands behind the pop ran after `after`
/// was read, and the first command ran no sooner than the pipeline was
/// sent, so the grant they read or made started no sooner than the
/// sending plus this, provided the server's clock ran no more than a
/// hundredth fast and did not step forward meanwhile; the cap keeps a
/// step forward from dating the grant past the reply (a review's case: a
/// 5 s step during a 0.5 s block had the waiter believe in its grant 5 s
/// past its end). A process frozen after the pop reads its reply late and
/// finds its first hold spent, as before.
pub fn waited(before: Option<i64>, after: Option<i64>, elapsed: Duration) -> Duration {
    let (Some(before), Some(after)) = (before, after) else {
        return Duration::ZERO;
    };
    let us = after.saturating_sub(before).max(0) as u64;
    let server = Duration::from_micros(us);
    server
        .saturating_sub(crate::protocol::quorum::drift(server))
        .min(elapsed)
}

/// A reading of the server's clock (`TIME`'s two parts: seconds and
/// microseconds, as text) in microseconds.
pub fn clock_us(secs: &[u8], micros: &[u8]) -> Option<i64> {
    let n = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<i64>().ok();
    n(secs)?.checked_mul(1_000_000)?.checked_add(n(micros)?)
}

/// Whether a queued waiter's granting script goes behind its pop, in the
/// same round trip (the server runs it as soon as the pop returns or times
/// out, and it finds on the waiter's own list what the pop took), or only
/// after it, in a round trip of its own when the pop alone took no grant
/// ([`pop_took_grant`]): where the pop alone can be the grant
/// (`pop_alone_grants`, a lock's: lua/queue.lua `held_by`), nothing but
/// [`behind_pop`]'s reads is on the handoff's path. A waiter that could
/// not block sends the script alone either way.
pub fn script_behind_pop(pop_alone_grants: bool) -> bool {
    !pop_alone_grants
}

/// Whether a lock's pop alone took the grant, from the replies read
/// behind it ([`behind_pop`]): the fence it `popped`, if the lock's
/// `value` (read after its `ttl`, in milliseconds) is that fence's open
/// grant (`rl:grant#<fence>`, written once per fence) with time left,
/// and no waiter keeps its turn waiting for messages (`in_turn`: then the
/// granting script decides whose turn it is). The fence and the time the
/// grant has left; `None`: the script behind the pop says where the
/// waiter stands.
pub fn pop_took_grant(
    popped: Option<&[u8]>,
    ttl: Option<i64>,
    value: Option<&[u8]>,
    in_turn: bool,
) -> Option<(i64, Duration)> {
    let (Some(fence), Some(ms), Some(v)) = (popped, ttl, value) else {
        return None;
    };
    if in_turn || ms <= 0 || v.strip_prefix(b"rl:grant#") != Some(fence) {
        return None;
    }
    let fence = std::str::from_utf8(fence).ok()?.parse::<i64>().ok()?;
    Some((fence, Duration::from_millis(ms as u64)))
}

/// A popped grant's first hold (see [`popped_hold`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoppedHold {
    /// The hold surely runs this long from when the blocking call was
    /// sent (the grant started at some instant between then and its
    /// reply).
    pub first: Duration,
    /// Claim the full lease now (one extension, counted from its own
    /// sending), before the guard is handed out; else the renewal thread
    /// claims it a third of the way through `first`, off the handoff's
    /// path.
    pub claim_now: bool,
}

/// The first hold of a grant a pop took: `left` is what the grant had
/// (the claim the script gave it, or the grant's own `PTTL` where the pop
/// alone took it), less a millisecond (as `valid_for` counts a lease) and
/// the topology's `drift`, and never more than the lease's `valid`. It
/// started between the sending of the blocking call and its reply,
/// `elapsed` apart: after a long block (a third of it gone), or with a
/// fixed lease (`watchdog` false: nothing renews it), the full lease is
/// claimed at once; a process frozen while it was blocked thus holds the
/// name no longer than the grant's claim.
pub fn popped_hold(
    valid: Duration,
    left: Duration,
    drift: Duration,
    elapsed: Duration,
    watchdog: bool,
) -> PoppedHold {
    let first = valid.min(left.saturating_sub(Duration::from_millis(1) + drift));
    PoppedHold {
        first,
        claim_now: !watchdog || elapsed >= first / 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_prompt_pop_holds_its_grants_time_less_a_millisecond_and_claims_later() {
        let h = popped_hold(MS * 29_999, MS * 500, Duration::ZERO, MS * 10, true);
        assert_eq!(
            h,
            PoppedHold {
                first: MS * 499,
                claim_now: false
            }
        );
    }

    #[test]
    fn a_late_reply_or_a_fixed_lease_claims_at_once() {
        let late = popped_hold(MS * 29_999, MS * 500, Duration::ZERO, MS * 167, true);
        assert!(late.claim_now);
        let fixed = popped_hold(MS * 29_999, MS * 500, Duration::ZERO, MS, false);
        assert!(fixed.claim_now);
    }

    #[test]
    fn a_pop_takes_the_grant_the_lock_names_with_time_left_unless_a_turn_is_kept() {
        let g = Some(b"rl:grant#7".as_slice());
        let f = Some(b"7".as_slice());
        assert_eq!(pop_took_grant(f, Some(250), g, false), Some((7, MS * 250)));
        assert_eq!(pop_took_grant(f, Some(250), g, true), None);
        assert_eq!(pop_took_grant(f, Some(0), g, false), None);
        assert_eq!(pop_took_grant(f, Some(-2), g, false), None);
        assert_eq!(pop_took_grant(Some(b"8"), Some(250), g, false), None);
        assert_eq!(pop_took_grant(f, Some(250), Some(b"rl:c:t#7"), false), None);
        assert_eq!(pop_took_grant(None, Some(250), g, false), None);
        assert_eq!(pop_took_grant(f, None, g, false), None);
        let odd = Some(b"rl:grant#x".as_slice());
        assert_eq!(pop_took_grant(Some(b"x"), Some(250), odd, false), None);
    }

    #[test]
    fn behind_a_pop_the_waiter_keeps_its_list_then_reads_the_lock_s_time_before_its_value() {
        let words = |turns| {
            behind_pop(b"mine", b"lock", turns)
                .iter()
                .map(|c| c.iter().map(|w| w.to_vec()).collect())
                .collect::<Vec<Vec<Vec<u8>>>>()
        };
        let claim = (GRANT_CLAIM.as_millis() * 2).to_string().into_bytes();
        let base = vec![
            vec![b"PEXPIRE".to_vec(), b"mine".to_vec(), claim],
            vec![b"PTTL".to_vec(), b"lock".to_vec()],
            vec![b"GET".to_vec(), b"lock".to_vec()],
        ];
        assert_eq!(words(None), base);
        let mut fair = base;
        fair.push(vec![b"EXISTS".to_vec(), b"turns".to_vec()]);
        assert_eq!(words(Some(b"turns")), fair);
    }

    #[test]
    fn the_servers_clock_says_how_long_after_the_sending_a_pop_was_served() {
        let t = |s: &str, us: &str| clock_us(s.as_bytes(), us.as_bytes());
        let before = t("1700000000", "250000");
        assert_eq!(before, Some(1_700_000_000_250_000));
        // 10 s on the server's clock: less a hundredth and 2 ms.
        let after = t("1700000010", "250000");
        let long = MS * 60_000;
        assert_eq!(waited(before, after, long), MS * 9_898);
        // Never past the waiter's own clock (a step forward meanwhile).
        assert_eq!(waited(before, after, MS * 500), MS * 500);
        // A clock gone back, a reading refused: none.
        assert_eq!(waited(after, before, long), Duration::ZERO);
        assert_eq!(waited(None, after, long), Duration::ZERO);
        assert_eq!(
            waited(before, t("1700000000", "251000"), long),
            Duration::ZERO
        );
        assert_eq!(t("x", "1"), None);
    }

    #[test]
    fn the_drift_and_a_short_lease_bound_the_first_hold() {
        let h = popped_hold(MS * 200, MS * 1_000, MS * 12, MS, true);
        assert_eq!(h.first, MS * 200);
        let h = popped_hold(MS * 29_999, MS * 1_000, MS * 12, MS, true);
        assert_eq!(h.first, MS * 987);
    }
}
