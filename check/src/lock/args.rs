//! The lock's script arguments, made by the library's own structs
//! (`redlease::__protocol::lock`): what each call of the model sends.

use std::time::Duration;

use redlease::__protocol as p;

use super::{key, token, LockModel, CHANNEL, FALLBACK_MS, NAME};
use crate::parties::b;

pub(super) fn prefix() -> Vec<u8> {
    key(":grant:")
}

fn message(client: usize) -> Vec<u8> {
    crate::parties::release_message(client, NAME.as_bytes())
}

/// Where a client's hand-overs are announced (`Lock::announce`): every
/// waiter queues.
pub(super) fn announce(client: usize) -> p::lock::Announce<'static> {
    p::lock::Announce {
        channel: std::borrow::Cow::Borrowed(CHANNEL),
        message: message(client),
        queued: true,
    }
}

impl LockModel {
    /// lua/lock_acquire.lua's arguments, made by the library's
    /// `AcquireArgs` (and `"popped"` behind a pop, as `Node::grant_blocking`
    /// adds it).
    pub(super) fn acquire_args(
        &self,
        client: usize,
        t: u8,
        queue: bool,
        popped: bool,
    ) -> Vec<Vec<u8>> {
        self.acquire_args_as(client, t, queue, queue, popped)
    }

    /// [`LockModel::acquire_args`], saying whether the waiter blocks (else
    /// it waits for messages, keeping its turn: a fair lock's waiter whose
    /// place was lost).
    pub(super) fn acquire_args_as(
        &self,
        client: usize,
        t: u8,
        queue: bool,
        blocks: bool,
        popped: bool,
    ) -> Vec<Vec<u8>> {
        let (tok, lease, prefix, announce) = (
            token(client, t),
            b(self.lease_ms),
            prefix(),
            announce(client),
        );
        let mut a = p::lock::AcquireArgs {
            token: &tok,
            lease_ms: &lease,
            // A message waiter's entry lives as `Wakeup::entry_life`
            // makes it.
            queue_ttl: match (queue, blocks) {
                (false, _) => Duration::ZERO,
                (true, true) => p::ROOM_ENTRY,
                (true, false) => Duration::from_millis(FALLBACK_MS as u64 * 3 + 1000),
            },
            grant_prefix: &prefix,
            claim: p::GRANT_CLAIM,
            announce: &announce,
            waits: match (self.fair, blocks) {
                (true, true) => p::lock::Waits::FairBlocking,
                (true, false) => p::lock::Waits::FairMessages,
                (false, true) => p::lock::Waits::Blocking,
                (false, false) => p::lock::Waits::Messages,
            },
            hand_over: self.hand_over_claim(),
        }
        .parts();
        if popped {
            a.push(b"popped".to_vec());
        }
        a
    }

    /// lua/lock_release.lua's arguments, made by the library's
    /// `ReleaseArgs` (the hold's fence put in as `Spec::fenced` does).
    pub(super) fn release_args(
        &self,
        client: usize,
        t: u8,
        leave: bool,
        fence: Option<i64>,
    ) -> Vec<Vec<u8>> {
        self.release_args_with(self.hand_over_claim(), client, t, leave, fence)
    }

    /// The claim window this model's hand-overs get
    /// (`Scenario::hand_over_claim_ms`).
    pub(crate) fn hand_over_claim(&self) -> Duration {
        self.scenario
            .hand_over_claim_ms
            .map_or(p::GRANT_CLAIM, |ms| Duration::from_millis(ms as u64))
    }

    /// [`LockModel::release_args`] with the claim window `claim`.
    pub(super) fn release_args_with(
        &self,
        claim: Duration,
        client: usize,
        t: u8,
        leave: bool,
        fence: Option<i64>,
    ) -> Vec<Vec<u8>> {
        let (tok, prefix, announce) = (token(client, t), prefix(), announce(client));
        let mut a = p::lock::ReleaseArgs {
            token: &tok,
            announce: &announce,
            grant_prefix: &prefix,
            claim,
            force: false,
            keep: false,
            leave,
        }
        .parts();
        a[p::lock::RELEASE_FENCE] = fence.map(b).unwrap_or_default();
        a
    }

    /// lua/lock_extend.lua's keys and arguments (`Lock::extend`, claiming),
    /// the arguments made by the library's `ExtendArgs`.
    pub(super) fn extend_call(
        &self,
        client: usize,
        t: u8,
        fence: i64,
    ) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let (tok, prefix, lease) = (token(client, t), prefix(), b(self.lease_ms));
        let mut a = p::lock::ExtendArgs {
            token: &tok,
            claiming: Some((&prefix, p::ROOM_ENTRY)),
            lease_ms: &lease,
        }
        .parts();
        a[p::lock::EXTEND_FENCE] = b(fence);
        (vec![key(""), key(":queue"), key(":queue:t")], a)
    }

    /// lua/lock_watch.lua's arguments, made by the library's `WatchArgs`.
    pub(super) fn watch_args(&self, client: usize, waiter: Option<u8>) -> Vec<Vec<u8>> {
        let (tok, prefix, announce) = (
            waiter.map(|t| token(client, t)).unwrap_or_default(),
            prefix(),
            announce(client),
        );
        p::lock::WatchArgs {
            waiter: &tok,
            entry: p::ROOM_ENTRY,
            grant_prefix: &prefix,
            claim: p::GRANT_CLAIM,
            announce: &announce,
            hand_over: self.hand_over_claim(),
        }
        .parts()
    }

    /// The lease's validity in the client's view (`valid_for`: whole
    /// milliseconds less one).
    pub(super) fn valid(&self) -> i64 {
        self.lease_ms - 1
    }
}

/// Where a client's releases are announced when nobody queues (Redlock,
/// the Sentinel model's waiters that try again at the busy reply's hint).
fn unqueued_announce(client: usize) -> p::lock::Announce<'static> {
    p::lock::Announce {
        channel: std::borrow::Cow::Borrowed(CHANNEL),
        message: message(client),
        queued: false,
    }
}

/// lua/lock_acquire.lua's arguments for an attempt that never queues (the
/// lock's spec on Redlock: no queue, no blocking).
pub(crate) fn unqueued_acquire_args(client: usize, t: u8, lease_ms: i64) -> Vec<Vec<u8>> {
    let (tok, lease, announce) = (token(client, t), b(lease_ms), unqueued_announce(client));
    p::lock::AcquireArgs {
        token: &tok,
        lease_ms: &lease,
        queue_ttl: Duration::ZERO,
        grant_prefix: &prefix(),
        claim: p::GRANT_CLAIM,
        announce: &announce,
        waits: p::lock::Waits::Messages,
        hand_over: p::GRANT_CLAIM,
    }
    .parts()
}

/// lua/lock_release.lua's arguments where nobody queues (`keep`: the
/// counter lapses by itself, as Redlock's masters keep agreeing on it).
pub(crate) fn unqueued_release_args(client: usize, t: u8, keep: bool) -> Vec<Vec<u8>> {
    let (tok, announce) = (token(client, t), unqueued_announce(client));
    p::lock::ReleaseArgs {
        token: &tok,
        announce: &announce,
        grant_prefix: &prefix(),
        claim: p::GRANT_CLAIM,
        force: false,
        keep,
        leave: false,
    }
    .parts()
}

/// lua/lock_extend.lua's keys and arguments for a renewal (no claim).
pub(crate) fn renewal_call(client: usize, t: u8, lease_ms: i64) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let (tok, lease) = (token(client, t), b(lease_ms));
    let args = p::lock::ExtendArgs {
        token: &tok,
        claiming: None,
        lease_ms: &lease,
    }
    .parts();
    (vec![key(""), key(":queue"), key(":queue:t")], args)
}
