//! The bounded configurations `scripts/check.sh` explores, and the known
//! counterexamples it must go on finding until their fix lands.

use crate::latch::{LatchModel, LatchOp};
use crate::lock::{LockModel, Op, Scenario};
use crate::multilock::{MultiLock, MultiModel, Names};
use crate::parties::{Fault, Faults};
use crate::redlock::{RedlockModel, RlOp};
use crate::rwlock::{Rw, RwLock, RwModel};
use crate::semaphore::{SemModel, Semaphore};
use crate::sentinel::{SOp, SentinelModel};
use crate::waiters::WaitOp;
use redlease::__protocol as p;

/// What a configuration's search must end with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Every property holds in every state within the bound.
    Holds,
    /// A known bug, not fixed yet: the search must find a violation whose
    /// text contains this (a model that stops finding it has lost
    /// something, or the bug was fixed: then this becomes `Holds`).
    Finds(&'static str),
}

/// A model of one primitive.
pub enum Checked {
    Lock(LockModel),
    Semaphore(SemModel),
    RwLock(RwModel),
    Latch(LatchModel),
    Redlock(RedlockModel),
    MultiLock(MultiModel),
    Sentinel(SentinelModel),
}

pub struct Config {
    pub name: &'static str,
    pub model: Checked,
    pub expect: Expect,
    /// The depth bound of the default check (`--depth` overrides it).
    pub depth: usize,
}

impl LockModel {
    /// The lease the configurations use: short, so that time steps reach
    /// its end within the horizon (the rules scale with it).
    pub fn default_lease() -> i64 {
        3_000
    }
}

fn model(ops: Vec<Vec<Op>>, faults: Faults, horizon_ms: i64) -> Checked {
    Checked::Lock(lock_model(ops, faults, horizon_ms))
}

fn lock_model(ops: Vec<Vec<Op>>, faults: Faults, horizon_ms: i64) -> LockModel {
    LockModel {
        ops,
        faults,
        lease_ms: LockModel::default_lease(),
        horizon_ms,
        response_ms: 2_000,
        exits: true,
        reblocks: false,
        fair: true,
        restart_looks: true,
        popped_from_reply: false,
        popped_claimed_at_once: false,
        clock_jump_ms: 0,
        scenario: Scenario::default(),
    }
}

/// The scenario of the review's case of the naming spacing (the
/// configurations "lock: 4 clients, a waiter queued after a naming, …"):
/// clients 1 and 2 start once client 0 holds, client 3 (its subscriber
/// already listening) once client 1 holds; only client 2 may freeze;
/// releasers exit at once.
fn naming_scenario() -> LockModel {
    use Op::*;
    LockModel {
        scenario: Scenario {
            after: vec![(1, 0, 1), (2, 0, 1), (3, 1, 1)],
            subscribed: vec![3],
            faulty: vec![2],
            exit_at_once: true,
            hand_over_claim_ms: None,
        },
        ..lock_model(
            vec![
                vec![Acquire, Release],
                vec![Acquire, Release],
                vec![Acquire],
                vec![Acquire],
            ],
            Faults::only(1, &[Fault::Freeze]),
            4_000,
        )
    }
}

/// The plain lock (`Client::lock`): no order promised, waiters with a
/// deadline wait for messages in their last second.
fn plain(ops: Vec<Vec<Op>>, faults: Faults, horizon_ms: i64) -> Checked {
    Checked::Lock(LockModel {
        fair: false,
        ..lock_model(ops, faults, horizon_ms)
    })
}

/// The same, where no client exits after its operations.
fn staying(ops: Vec<Vec<Op>>, faults: Faults, horizon_ms: i64) -> Checked {
    Checked::Lock(LockModel {
        exits: false,
        ..lock_model(ops, faults, horizon_ms)
    })
}

/// `model` whose hand-overs (releases, looks, newcomers) get the window a
/// Cluster client gives them right after it saw the name's slot move
/// (`protocol::timing::SETTLING_CLAIM`).
fn settling(model: Checked) -> LockModel {
    let Checked::Lock(mut m) = model else {
        unreachable!("a lock model")
    };
    m.scenario.hand_over_claim_ms = Some(p::SETTLING_CLAIM.as_millis() as i64);
    m
}

/// A semaphore of `permits` with three clients, each waiting up to
/// 800 ms for a permit and releasing it.
fn semaphore(permits: u32, fair: bool, faults: Faults) -> Checked {
    semaphore_asking(permits, fair, &[1; 3], faults)
}

/// A semaphore of `permits` whose clients ask for `asks` permits each,
/// waiting up to 800 ms and releasing them.
fn semaphore_asking(permits: u32, fair: bool, asks: &[u32], faults: Faults) -> Checked {
    let ops = wait_and_release(asks);
    Checked::Semaphore(SemModel::new(Semaphore::new(permits, fair), ops, faults))
}

/// A semaphore of `permits` whose clients wait up to `wait_ms` each for
/// the permits they ask (`asks`) and release them; `direct` says whose
/// server grants directly (they block while a second or more is left; the
/// others' ACL refuses blocking commands, and they wait for messages).
pub fn semaphore_blocking(
    permits: u32,
    fair: bool,
    asks: &[u32],
    wait_ms: i64,
    direct: &[bool],
    faults: Faults,
) -> SemModel {
    let ops = asks
        .iter()
        .map(|&k| (k, vec![WaitOp::AcquireFor(wait_ms), WaitOp::Release]))
        .collect();
    SemModel {
        direct: direct.to_vec(),
        ..SemModel::new(Semaphore::new(permits, fair), ops, faults)
    }
}

/// Three clients of a semaphore of `permits`, one permit each, every one
/// blocking on the server ([`semaphore_blocking`]).
fn blocking_semaphore(permits: u32, fair: bool, wait_ms: i64, faults: Faults) -> Checked {
    Checked::Semaphore(semaphore_blocking(
        permits,
        fair,
        &[1, 1, 1],
        wait_ms,
        &[true, true, true],
        faults,
    ))
}

/// A fair semaphore of one permit: a blocked waiter, one that waits for
/// messages, another blocked, one of them crashing.
fn messages_first_semaphore() -> Checked {
    Checked::Semaphore(semaphore_blocking(
        1,
        true,
        &[1, 1, 1],
        4_000,
        &[true, false, true],
        Faults::only(1, &[Fault::Crash]),
    ))
}

/// `model` (a semaphore's) whose releases offer with the window a Cluster
/// client gives them right after it saw the name's slot move
/// (`protocol::timing::SETTLING_CLAIM`).
fn settling_offers(model: Checked) -> Checked {
    let Checked::Semaphore(mut m) = model else {
        unreachable!("a semaphore model")
    };
    m.prim.release_claim_ms = Some(p::SETTLING_CLAIM.as_millis() as i64);
    Checked::Semaphore(m)
}

/// A read-write lock whose clients (each a reader or a writer) run `ops`.
fn rw_lock(ops: Vec<(Rw, Vec<WaitOp>)>, faults: Faults) -> Checked {
    Checked::RwLock(rw_model(ops, faults))
}

/// The same, as a model to change.
pub fn rw_model(ops: Vec<(Rw, Vec<WaitOp>)>, faults: Faults) -> RwModel {
    RwModel::new(RwLock, ops, faults)
}

/// A read-write lock whose clients (each a reader or a writer) acquire
/// within `wait_ms` and release; `direct` says whose server grants
/// directly (its writers block on the open list).
pub fn rw_blocking(roles: &[Rw], wait_ms: i64, direct: &[bool], faults: Faults) -> RwModel {
    let ops = roles
        .iter()
        .map(|&r| (r, vec![WaitOp::AcquireFor(wait_ms), WaitOp::Release]))
        .collect();
    RwModel {
        direct: direct.to_vec(),
        ..rw_model(ops, faults)
    }
}

/// Two clients of a lock on three Redlock masters, each acquiring within
/// 1.5 s and releasing.
fn redlock(faults: Faults, delayed_restart: bool) -> Checked {
    Checked::Redlock(RedlockModel {
        ops: vec![
            vec![RlOp::AcquireFor(1_500), RlOp::Release],
            vec![RlOp::AcquireFor(1_500), RlOp::Release],
        ],
        faults,
        lease_ms: LockModel::default_lease(),
        horizon_ms: 12_000,
        response_ms: 2_000,
        fallback_ms: crate::lock::FALLBACK_MS,
        delayed_restart,
        exits: true,
        lease_from_decision: false,
    })
}

/// A holder that keeps the lock 6 s and `waiters` waiters that wait up to
/// 8 s each, across a Sentinel failover (the master stopped first, or cut
/// off from the Sentinels only).
fn sentinel(stops: bool, waiters: usize) -> Checked {
    let holder = vec![SOp::AcquireFor(1_000), SOp::Sleep(6_000), SOp::Release];
    let waiter = vec![SOp::AcquireFor(8_000), SOp::Release];
    Checked::Sentinel(SentinelModel {
        ops: std::iter::once(holder)
            .chain(std::iter::repeat_n(waiter, waiters))
            .collect(),
        lease_ms: LockModel::default_lease(),
        horizon_ms: 10_000,
        response_ms: 2_000,
        stops,
        discounts_deposed: true,
        lag: false,
        replica_ack: false,
        watchdog: true,
    })
}

/// [`sentinel`] with asynchronous replication (`lag`), and `replica_ack`
/// or not; `watchdog: false`: the holder's lease is a fixed 10 s, longer
/// than it keeps the lock.
fn sentinel_lagging(stops: bool, replica_ack: bool, watchdog: bool) -> Checked {
    let Checked::Sentinel(model) = sentinel(stops, 1) else {
        unreachable!("a Sentinel model");
    };
    Checked::Sentinel(SentinelModel {
        lag: true,
        replica_ack,
        watchdog,
        lease_ms: if watchdog { model.lease_ms } else { 10_000 },
        ..model
    })
}

/// Clients of these roles, each waiting up to 800 ms (for messages) and
/// releasing what it got.
pub fn wait_and_release<M: Copy>(roles: &[M]) -> Vec<(M, Vec<WaitOp>)> {
    roles
        .iter()
        .map(|&r| (r, vec![WaitOp::AcquireFor(800), WaitOp::Release]))
        .collect()
}

/// A multi-lock (and locks) whose clients ask `roles` within `wait_ms`
/// and release (time may pass between the two: a grant a pop alone took
/// is claimed by a renewal), every client's server granting directly:
/// each name's waiter blocks on its open list, its pop alone the grant.
pub fn multi_blocking(roles: &[Names], wait_ms: i64, faults: Faults) -> MultiModel {
    let ops = roles
        .iter()
        .map(|&r| (r, vec![WaitOp::AcquireFor(wait_ms), WaitOp::Release]))
        .collect();
    MultiModel {
        direct: vec![true; roles.len()],
        ..MultiModel::new(MultiLock, ops, faults)
    }
}

/// A count-down latch whose clients run `ops`.
fn latch(ops: Vec<Vec<LatchOp>>, faults: Faults) -> Checked {
    Checked::Latch(LatchModel {
        ops,
        faults,
        horizon_ms: 12_000,
        response_ms: 2_000,
        fallback_ms: crate::lock::FALLBACK_MS,
        exits: true,
    })
}

/// Every configuration, in the order the check runs them.
pub fn all() -> Vec<Config> {
    use Op::*;
    let two = || vec![vec![Acquire, Release], vec![Acquire, Release]];
    let three = || {
        vec![
            vec![Acquire, Release],
            vec![Acquire, Release],
            vec![Acquire, Release],
        ]
    };
    use Fault::{ClockStep, Crash, LostReply, LostRequest};
    let no_pause = |budget| Faults::only(budget, &[LostRequest, LostReply, ClockStep]);
    let no_freeze = |budget| Faults::only(budget, &[LostRequest, LostReply, Crash, ClockStep]);
    vec![
        Config {
            name: "lock: 2 clients, 2 faults (no freeze)",
            model: model(two(), no_freeze(2), 12_000),
            expect: Expect::Holds,
            depth: 80,
        },
        // The plain lock's waiters in their last second wait for messages
        // beside blocked ones (a review found the first version of the
        // fair-order change stalling them:
        // `waiting.rs::a_plain_short_waiter_behind_a_dead_blocked_one_takes_the_hand_over`).
        Config {
            name: "plain lock: a waiter in its last second beside 2 blocked, a crash or freeze",
            model: plain(
                vec![
                    vec![Acquire, Release],
                    vec![AcquireFor(1_500), Release],
                    vec![Acquire, Release],
                ],
                Faults::only(1, &[Crash, Fault::Freeze]),
                10_000,
            ),
            expect: Expect::Holds,
            depth: 80,
        },
        Config {
            name: "plain lock: a blocked waiter and a short one, 2 faults",
            model: plain(
                vec![
                    vec![Acquire, Release],
                    vec![AcquireFor(1_500), Release],
                ],
                no_freeze(2),
                10_000,
            ),
            expect: Expect::Holds,
            depth: 80,
        },
        Config {
            name: "lock: try beside a timed wait, 2 faults",
            model: model(
                vec![vec![Try, Release], vec![AcquireFor(1_000), Release]],
                no_freeze(2),
                8_000,
            ),
            expect: Expect::Holds,
            depth: 80,
        },
        Config {
            name: "lock: 3 waiters, 1 lost call or clock step, nobody exits",
            model: staying(three(), no_pause(1), 12_000),
            expect: Expect::Holds,
            depth: 80,
        },
        // Found "a waiter frozen between its busy reply and its block
        // misses the hand-over" before `lease::first_look`.
        Config {
            name: "lock: 2 clients, freeze or crash, nobody exits",
            model: staying(two(), Faults::all(1), 12_000),
            expect: Expect::Holds,
            depth: 80,
        },
        // Found "a waiter's entry purged while it was paused is never
        // queued again by its looks" before lua/lock_watch.lua re-queued it.
        Config {
            name: "lock: 3 waiters, one frozen, nobody exits",
            model: staying(three(), Faults::only(1, &[Fault::Freeze]), 10_000),
            expect: Expect::Holds,
            depth: 24,
        },
        // The server's clock stepping ahead (GUARANTEES.md, "Clock
        // jumps"): by less than a renewal's slack, every lease is renewed
        // before it lapses there, a hand-over's grant claimed before its
        // window ends, and nobody holds beside another.
        Config {
            name: "lock: 3 waiters, the server's clock jumping ahead 100 ms, nobody exits",
            model: Checked::Lock(LockModel {
                clock_jump_ms: 100,
                exits: false,
                ..lock_model(three(), Faults::only(1, &[Fault::ClockJump]), 10_000)
            }),
            expect: Expect::Holds,
            depth: 24,
        },
        // With a frozen holder, though, its lease lapses on the server 100
        // ms before it counts, and the holder still believes in it (7
        // steps) when the name is free or another client's. A lease rests
        // on the server's clock not stepping ahead by more than the drift
        // allowed; the check finds the limit.
        Config {
            name: "limit: lock: a frozen holder and the server's clock jumping ahead 100 ms",
            model: Checked::Lock(LockModel {
                clock_jump_ms: 100,
                exits: false,
                ..lock_model(two(), Faults::only(2, &[Fault::Freeze, Fault::ClockJump]), 10_000)
            }),
            expect: Expect::Finds("believes it holds"),
            depth: 60,
        },
        // Found "a fair waiter whose block was cut (a Cluster slot move)
        // blocks again behind later waiters and is served after them"
        // before `protocol::blocking::Place` and lua/queue.lua `offer`.
        Config {
            name: "lock: 3 waiters, one's block cut (a slot move), nobody exits",
            model: staying(three(), Faults::only(1, &[Fault::Cut]), 10_000),
            expect: Expect::Holds,
            depth: 40,
        },
        // A Cluster release right after its slot moved hands over for 2 s
        // (`protocol::timing::SETTLING_CLAIM`): Redis redirects the
        // waiters blocked at the old master from its clients cron, up to a
        // second later. The same orders and faults hold with that window.
        Config {
            name: "lock: 3 waiters, one's block cut, 2 s hand-overs (a slot just moved)",
            model: Checked::Lock(settling(staying(three(), Faults::only(1, &[Fault::Cut]), 10_000))),
            expect: Expect::Holds,
            depth: 40,
        },
        Config {
            name: "lock: taker of a hand-over dies, releaser exits, 2 s hand-overs (a slot just moved)",
            model: Checked::Lock(settling(model(three(), Faults::only(1, &[Fault::Crash]), 12_000))),
            expect: Expect::Holds,
            depth: 40,
        },
        // Found by review: the head gives up (between its block's end and
        // its leave it is not blocked), the hand-over goes onto the open
        // list, and the holder, waiting again, pops it ahead of the cut
        // waiter that arrived before it. A fair lock's pop is now the
        // grant only while nobody keeps a turn (`Pop::turns`).
        Config {
            name: "lock: a cut waiter behind one that gives up, the holder waiting again",
            model: staying(
                vec![
                    vec![Acquire, Release, Acquire, Release],
                    vec![AcquireFor(1_000), Release],
                    vec![Acquire, Release],
                ],
                Faults::only(1, &[Fault::Cut]),
                8_000,
            ),
            expect: Expect::Holds,
            depth: 24,
        },
        // Found as a known bug: a holder whose grant came by a pop loses
        // its release (a lost message) and the releaser of the hand-over
        // exits: the next live waiter waited for its own look. The
        // hand-over's watchers now look (src/wakeup/watch.rs).
        Config {
            name: "lock: release of a popped grant lost, releaser exits",
            model: model(three(), no_pause(1), 12_000),
            expect: Expect::Holds,
            depth: 40,
        },
        // Found as a known bug: a waiter whose pop took a hand-over dies
        // (or freezes) before its claim, and the releaser exits: the next
        // live waiter waited for its own look (up to 5 s), not the claim +
        // 1 s.
        Config {
            name: "lock: taker of a hand-over dies, releaser exits",
            model: model(three(), Faults::only(1, &[Fault::Crash]), 12_000),
            expect: Expect::Holds,
            depth: 40,
        },
        // A client's later release of a name ends the look its earlier
        // release asked for (`protocol::watch::OpeningLooks`: it held the
        // name in between). The releaser takes the name again; the taker
        // of either hand-over may die or freeze; releasers exit.
        Config {
            name: "lock: a releaser taking the name again, a taker dying or freezing, releasers exit",
            model: model(
                vec![
                    vec![Acquire, Release, Acquire, Release],
                    vec![Acquire, Release],
                    vec![Acquire, Release],
                ],
                Faults::only(1, &[Crash, Fault::Freeze]),
                12_000,
            ),
            expect: Expect::Holds,
            depth: 40,
        },
        // The same with a request a millisecond late: retries timed to a
        // claim window's end see the key's last millisecond or its lapse.
        Config {
            name: "lock: taker of a hand-over dies, releaser exits, a late request",
            model: model(three(), Faults::only(2, &[Fault::Crash, Fault::Late]), 12_000),
            expect: Expect::Holds,
            depth: 40,
        },
        // A subscriber that loses its connection misses the namings sent
        // until it starts again; its start makes up for them with a look
        // (`Watches::listening`), which the next live waiter needs when
        // the taker of a hand-over dies with the releaser gone.
        Config {
            name: "lock: a subscriber starting again, a taker dying, releaser exits",
            model: model(
                three(),
                Faults::only(2, &[Fault::Crash, Fault::Resubscribe]),
                12_000,
            ),
            expect: Expect::Holds,
            depth: 40,
        },
        // The review of the 50 ms spacing of watcher namings (session 44),
        // which an open search of 3 clients cannot reach: H holds and exits
        // at its release; A takes the hand-over, releases and exits; B,
        // blocked behind, froze and takes the second hand-over; C, whose
        // process waited before (its subscriber listens), queued after the
        // first naming. A hand-over within 50 ms of a naming that named
        // nobody left C to its own look (4.97 s on real Redis,
        // model_traces.rs `a_waiter_that_queued_after_a_naming_…`); now it
        // names the watchers not named yet. Every interleaving of the four
        // within that order, B's freeze at any step.
        Config {
            name: "lock: 4 clients, a waiter queued after a naming, a frozen taker, releasers exit",
            model: Checked::Lock(naming_scenario()),
            expect: Expect::Holds,
            depth: 32,
        },
        // The same, with every popped grant claimed before the guard is
        // handed out, as after a block of over about 16 s or a pause
        // between the pop and its reading: the hand-over the spacing rule
        // is about is reached only this way since the server's clock
        // dates popped grants.
        Config {
            name: "lock: 4 clients, a waiter queued after a naming, popped grants claimed at once",
            model: Checked::Lock(LockModel {
                popped_claimed_at_once: true,
                ..naming_scenario()
            }),
            expect: Expect::Holds,
            depth: 32,
        },
        Config {
            name: "semaphore: 2 permits, 3 clients waiting for messages, 1 fault",
            model: semaphore(2, false, Faults::all(1)),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "fair semaphore: 2 permits, 3 clients waiting for messages, 1 fault",
            model: semaphore(2, true, Faults::all(1)),
            expect: Expect::Holds,
            depth: 60,
        },
        // Found (a review, then the checker): a waiter that waits for
        // messages, first in a fair line, dies; a blocked waiter's pop
        // left every offer to it until its entry lapsed (7 s).
        Config {
            name: "fair semaphore: a waiter for messages first, one blocked behind, 1 crash",
            model: messages_first_semaphore(),
            expect: Expect::Holds,
            depth: 60,
        },
        // The same right after a Cluster slot move: a release that saw it
        // offers for 2 s (`SETTLING_CLAIM`), and a look at the name alone
        // finding an offer open that long looks again when it would lapse
        // (lua/sem_watch.lua).
        Config {
            name: "fair semaphore: a waiter for messages first, one blocked behind, 1 crash, 2 s offers (a slot just moved)",
            model: settling_offers(messages_first_semaphore()),
            expect: Expect::Holds,
            depth: 60,
        },
        // Arrival order in a fair semaphore, with no fault: a holder, a
        // waiter that blocks, one that waits for messages, and one more
        // that blocks. The review's inversion (a blocked waiter whose
        // passes ran out took the permit ahead of a live waiter for
        // messages) needs the four.
        Config {
            name: "fair semaphore: 1 permit, 4 clients, one waiting for messages",
            model: Checked::Semaphore(semaphore_blocking(
                1,
                true,
                &[1, 1, 1, 1],
                4_000,
                &[true, true, false, true],
                Faults::only(0, &[]),
            )),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "semaphore: 2 permits, 3 clients blocking, 1 fault",
            model: blocking_semaphore(2, false, 3_000, Faults::all(1)),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "fair semaphore: 2 permits, 3 clients blocking, 1 fault",
            model: blocking_semaphore(2, true, 3_000, Faults::all(1)),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "fair semaphore: 1 permit, 3 clients blocking, 2 frozen or crashed",
            model: blocking_semaphore(1, true, 4_000, Faults::only(2, &[Fault::Freeze, Fault::Crash])),
            expect: Expect::Holds,
            depth: 60,
        },
        // The server's clock jumping ahead 100 ms at any moment, and a
        // freeze (GUARANTEES, "Clock jumps"): a lease set before the jump
        // lapses that much sooner on the server, the limit stated (its
        // holder's belief then is not judged); a grant made after it,
        // popped behind a block the jump fell in, is dated from the
        // server's two clock readings capped at the waiter's own reading
        // of the reply (`protocol::popped::waited`) and judged in full.
        // Without the cap the taker believes in its grant past its end
        // (mutation test `a_popped_grant_dated_past_its_reply_is_reported`).
        Config {
            name: "fair semaphore: 1 permit, 2 clients blocking, the server's clock jumping ahead 100 ms, a freeze",
            model: Checked::Semaphore(SemModel {
                clock_jump_ms: 100,
                ..semaphore_blocking(
                    1,
                    true,
                    &[1, 1],
                    3_000,
                    &[true, true],
                    Faults::only(2, &[Fault::Freeze, Fault::ClockJump]),
                )
            }),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "rw lock: 2 writers blocking, the server's clock jumping ahead 100 ms, a freeze",
            model: Checked::RwLock(RwModel {
                clock_jump_ms: 100,
                ..rw_blocking(
                    &[Rw::Write, Rw::Write],
                    3_000,
                    &[true, true],
                    Faults::only(2, &[Fault::Freeze, Fault::ClockJump]),
                )
            }),
            expect: Expect::Holds,
            depth: 60,
        },
        // A subscriber that loses its connection misses the messages and
        // namings sent until it starts again; it wakes its waiters as it
        // ends and as it starts, and its start makes up for namings with
        // looks (`Watches::listening`), as in the lock model.
        Config {
            name: "fair semaphore: 1 permit, 3 clients blocking, a subscriber starting again, a crash",
            model: blocking_semaphore(1, true, 4_000, Faults::only(2, &[Fault::Crash, Fault::Resubscribe])),
            expect: Expect::Holds,
            depth: 60,
        },
        // Waits of 3 s, so the bounded liveness judges them (a wait
        // shorter than the claim + 1 s is not).
        Config {
            name: "semaphore: 2 permits, 3 clients waiting 3 s for messages, a subscriber starting again, a crash",
            model: Checked::Semaphore(semaphore_blocking(
                2,
                false,
                &[1, 1, 1],
                3_000,
                &[false, false, false],
                Faults::only(2, &[Fault::Crash, Fault::Resubscribe]),
            )),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "rw lock: 2 writers blocking and a reader, a subscriber starting again, a crash",
            model: Checked::RwLock(rw_blocking(
                &[Rw::Write, Rw::Write, Rw::Read],
                3_000,
                &[true, true, true],
                Faults::only(2, &[Fault::Crash, Fault::Resubscribe]),
            )),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "rw lock: a writer and 2 readers waiting for messages, 1 fault",
            model: rw_lock(
                wait_and_release(&[Rw::Write, Rw::Read, Rw::Read]),
                Faults::all(1),
            ),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "semaphore: 3 permits, clients asking 2, 2 and 1, 1 fault",
            model: semaphore_asking(3, false, &[2, 2, 1], Faults::all(1)),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "fair semaphore: 3 permits, clients asking 2, 2 and 1, 1 fault",
            model: semaphore_asking(3, true, &[2, 2, 1], Faults::all(1)),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "semaphore: 2 permits, 3 clients waiting for messages, 2 faults",
            model: semaphore(2, false, Faults::all(2)),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "rw lock: a writer and a reader waiting for messages, 2 faults",
            model: rw_lock(wait_and_release(&[Rw::Write, Rw::Read]), Faults::all(2)),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "rw lock: 2 writers waiting for messages, 2 faults",
            model: rw_lock(wait_and_release(&[Rw::Write, Rw::Write]), Faults::all(2)),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "rw lock: 2 writers and a reader waiting for messages, 1 fault",
            model: rw_lock(
                wait_and_release(&[Rw::Write, Rw::Write, Rw::Read]),
                Faults::all(1),
            ),
            expect: Expect::Holds,
            depth: 60,
        },
        // Writers that block on the open list: the newcomer that queued
        // while a hand-over waited there took it and died, and the older
        // writer, never named a watcher, waited for its own look (5 s).
        Config {
            name: "rw lock: 3 writers blocking, 1 crash",
            model: Checked::RwLock(rw_blocking(
                &[Rw::Write, Rw::Write, Rw::Write],
                5_000,
                &[true, true, true],
                Faults::only(1, &[Fault::Crash]),
            )),
            expect: Expect::Holds,
            depth: 60,
        },
        // A writer's later release of the name ends the look its earlier
        // one asked for (`protocol::watch::OpeningLooks`), as a lock's.
        Config {
            name: "rw lock: a writer taking it again beside 2 writers blocking, 1 crash",
            model: Checked::RwLock(RwModel {
                direct: vec![true, true, true],
                ..rw_model(
                    vec![
                        (
                            Rw::Write,
                            vec![
                                WaitOp::AcquireFor(5_000),
                                WaitOp::Release,
                                WaitOp::AcquireFor(5_000),
                                WaitOp::Release,
                            ],
                        ),
                        (Rw::Write, vec![WaitOp::AcquireFor(5_000), WaitOp::Release]),
                        (Rw::Write, vec![WaitOp::AcquireFor(5_000), WaitOp::Release]),
                    ],
                    Faults::only(1, &[Fault::Crash]),
                )
            }),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "rw lock: 2 writers blocking and a reader, 1 fault",
            model: Checked::RwLock(rw_blocking(
                &[Rw::Write, Rw::Write, Rw::Read],
                3_000,
                &[true, true, true],
                Faults::all(1),
            )),
            expect: Expect::Holds,
            depth: 60,
        },
        // A reader behind a writer that blocks behind another reader and
        // dies: the waiting reader probes the writer's life once its proof
        // of life lapses, and must then be in within the bound. Found,
        // with a request a millisecond late, readers that came back on the
        // probe's last millisecond and probed again, a second more each
        // time (lua/rw_grant.lua before the fix).
        Config {
            name: "rw lock: a writer blocking between two readers, a crash and a late request",
            // The first reader holds throughout (a fixed 10 s lease, no
            // release), the others ask once: the search's depth goes to
            // the probe, not to renewals and releases.
            model: Checked::RwLock(RwModel {
                direct: vec![true, true, true],
                lease_ms: 10_000,
                watchdog: false,
                exits: false,
                ..rw_model(
                    vec![
                        (Rw::Read, vec![WaitOp::AcquireFor(10_000)]),
                        (Rw::Write, vec![WaitOp::AcquireFor(10_000)]),
                        (Rw::Read, vec![WaitOp::AcquireFor(10_000)]),
                    ],
                    Faults::only(2, &[Fault::Crash, Fault::Late]),
                )
            }),
            expect: Expect::Holds,
            depth: 60,
        },
        // Finds, with the subscriber's older rules (`Subscriber`, kept as
        // the checker's own tests): readers in the writer's own client
        // waiting to their deadline when its look told them a shortened
        // lease had ended (`DropsOwn`), and a writer that tried behind its
        // own client's reader deaf to its hand-over (`HeadsOnly`).
        Config {
            name: "rw lock: a writer shortening its lease, a reader in its client and one apart",
            model: Checked::RwLock(RwModel {
                process: vec![0, 0, 1],
                watchdog: false,
                ..rw_model(
                    vec![
                        (
                            Rw::Write,
                            vec![
                                WaitOp::AcquireFor(800),
                                WaitOp::Shorten(300),
                                WaitOp::Release,
                            ],
                        ),
                    ]
                    .into_iter()
                    .chain(wait_and_release(&[Rw::Read, Rw::Read]))
                    .collect(),
                    Faults::all(1),
                )
            }),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "latch: count 2, a counter and 2 waiters, 2 faults",
            model: latch(
                vec![
                    vec![LatchOp::Set(2), LatchOp::CountDown, LatchOp::CountDown],
                    vec![LatchOp::WaitFor(800)],
                    vec![LatchOp::WaitFor(800)],
                ],
                Faults::all(2),
            ),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "latch: 2 counters and a waiter, 2 faults",
            model: latch(
                vec![
                    vec![LatchOp::Set(2), LatchOp::CountDown],
                    vec![LatchOp::CountDown],
                    vec![LatchOp::WaitFor(800)],
                ],
                Faults::all(2),
            ),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "redlock: 3 masters, 2 clients, a master restarting without its keys (down a lease first) or a lost call",
            model: redlock(
                Faults::only(1, &[Fault::Crash, LostRequest, LostReply, Fault::LostMessage]),
                true,
            ),
            expect: Expect::Holds,
            depth: 36,
        },
        Config {
            name: "redlock: 3 masters, 2 clients, 2 faults (restarts down a lease first, lost calls)",
            model: redlock(
                Faults::only(2, &[Fault::Crash, LostRequest, LostReply, Fault::LostMessage]),
                true,
            ),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "multi-lock: 2 clients taking both names, 2 faults",
            model: Checked::MultiLock(MultiModel::new(
                MultiLock,
                wait_and_release(&[Names::multi(0, 2), Names::multi(0, 2)]),
                Faults::only(2, &[LostRequest, LostReply, Crash, Fault::LostMessage]),
            )),
            expect: Expect::Holds,
            depth: 90,
        },
        Config {
            name: "multi-lock: 2 clients taking both names, a lock on one, 1 fault",
            model: Checked::MultiLock(MultiModel::new(
                MultiLock,
                wait_and_release(&[Names::multi(0, 2), Names::multi(0, 2), Names::lock(1)]),
                Faults::only(1, &[LostRequest, LostReply, Crash, Fault::LostMessage]),
            )),
            expect: Expect::Holds,
            depth: 60,
        },
        // Each name's waiter blocks on the server, as the library's do on
        // a server that grants directly: its pop alone is the grant.
        Config {
            name: "multi-lock: 2 clients blocking for both names, 1 fault",
            model: Checked::MultiLock(multi_blocking(
                &[Names::multi(0, 2), Names::multi(0, 2)],
                3_000,
                Faults::all(1),
            )),
            expect: Expect::Holds,
            depth: 60,
        },
        Config {
            name: "multi-lock: 2 clients blocking for both names, a lock blocking on one, 1 fault",
            model: Checked::MultiLock(multi_blocking(
                &[Names::multi(0, 2), Names::multi(0, 2), Names::lock(1)],
                3_000,
                Faults::all(1),
            )),
            expect: Expect::Holds,
            depth: 60,
        },
        // A fair lock's waiters wait for messages once their place among
        // the blocked is lost (a Cluster slot move, a broken connection:
        // `protocol::blocking::Place`); the hand-over keeps their order.
        Config {
            name: "lock: 3 waiters waiting for messages (a fair lock's after a slot move), 1 fault",
            model: Checked::MultiLock(MultiModel::new(
                MultiLock,
                wait_and_release(&[Names::fair_lock(0); 3]),
                Faults::only(1, &[LostRequest, LostReply, Crash, Fault::LostMessage]),
            )),
            expect: Expect::Holds,
            depth: 60,
        },
        // Issue 53: a master the Sentinels replaced, stopped through its
        // failover, resumes still acting as master and runs what its
        // sockets held; no reply of it counts once the switch is heard.
        Config {
            name: "sentinel: a holder and a waiter, the master stopped, replaced and resumed as master",
            model: sentinel(true, 1),
            expect: Expect::Holds,
            depth: 80,
        },
        Config {
            name: "sentinel: a holder and 2 waiters, the master cut off from the Sentinels and replaced",
            model: sentinel(false, 2),
            expect: Expect::Holds,
            depth: 90,
        },
        // Replication lag at the failover (GUARANTEES, "On Sentinel"):
        // without `replica_ack` a grant the replica never got is lost (the
        // holder believes in a lease the new master does not know, and the
        // waiter can take it there); with it,
        // no grant is lost and a deposed master's grant is withdrawn (a
        // fixed lease: 0 violations), but a renewal the replica never got
        // leaves the lease shorter there than its holder counts: both
        // limits the check must keep finding.
        Config {
            name: "limit: sentinel: replication lag at the failover, no replica_ack",
            model: sentinel_lagging(true, false, true),
            expect: Expect::Finds("but the master named has"),
            depth: 80,
        },
        Config {
            name: "sentinel: replication lag, replica_ack, a fixed lease, the master cut off and replaced",
            model: sentinel_lagging(false, true, false),
            expect: Expect::Holds,
            depth: 600,
        },
        Config {
            name: "sentinel: replication lag, replica_ack, a fixed lease, the master stopped and replaced",
            model: sentinel_lagging(true, true, false),
            expect: Expect::Holds,
            depth: 600,
        },
        Config {
            name: "limit: sentinel: replication lag, replica_ack, renewals not waited for",
            model: sentinel_lagging(true, true, true),
            expect: Expect::Finds("but the master named has"),
            depth: 80,
        },
        // A client frozen past its lease believes in it only until its
        // validity, counted from when it sent the grant; a master's clock
        // stepped back keeps a lease longer, and fences still grow above
        // its floor.
        Config {
            name: "redlock: 3 masters, 2 clients, a client frozen or a master's clock stepped back",
            model: redlock(Faults::only(1, &[Fault::Freeze, Fault::ClockStep]), true),
            expect: Expect::Holds,
            depth: 60,
        },
        // Both together: a client frozen past its lease on masters one of
        // which keeps its keys longer (its clock stepped back). Shallower
        // (depth 18 at the bound) than either alone above; 6.1 million
        // states to depth 26 held too (2026-12-01).
        Config {
            name: "redlock: 3 masters, 2 clients, a client frozen and a master's clock stepped back",
            model: redlock(Faults::only(2, &[Fault::Freeze, Fault::ClockStep]), true),
            expect: Expect::Holds,
            depth: 60,
        },
        // Kleppmann's case: a master whose clock jumps ahead a lease
        // while the grants are written lets the holder's key lapse there;
        // it grants a second client, which with a master the first did
        // not reach yet makes its own majority while the first holds.
        // Redlock rests on bounded clock drift; the check finds it at
        // once (21 steps).
        Config {
            name: "limit: redlock: a master's clock jumping ahead a lease",
            model: redlock(Faults::only(1, &[Fault::ClockJump]), true),
            expect: Expect::Finds("exclusion"),
            depth: 60,
        },
        // Redlock's own limit (GUARANTEES.md, "On Redlock"): a master that
        // restarts at once without its keys lets a second client win a
        // majority while the first holds. Redlock asks restarted masters
        // to stay down a lease; the check above holds with that.
        Config {
            name: "limit: redlock: a master restarting at once without its keys",
            model: redlock(Faults::only(1, &[Fault::Crash]), false),
            expect: Expect::Finds("exclusion"),
            depth: 60,
        },
    ]
}
