//! The semaphore (plain and fair) as separate clients use it, with waiters
//! that wait for release messages (`waiters/`: the clients, as the
//! library's waiting loop decides them). This file says the semaphore's
//! part: its scripts with the library's arguments, and its properties
//! (never more permits held than it has; every holder listed by the
//! server; quiescence). A client asks for one permit or several
//! (`Mode`: how many, `Semaphore::acquire_many`).

use std::time::Duration;

use redlease::__protocol as p;

use crate::keyspace::{Keyspace, Value};
use crate::parties::b;
use crate::primitive::{Arrival, Direct, Holder, Primitive, Script};
use crate::probes::{lapsed, tries_succeed_within};
use crate::server::Server;
use crate::waiters::WaitModel;

pub use crate::waiters::WaitOp as SemOp;

/// The semaphore's part of the waiter model: its permits, and whether it
/// is fair.
pub struct Semaphore {
    pub permits: u32,
    pub fair: bool,
    /// The claim window its releases give their offers, in ms: a Cluster
    /// client's right after it saw the name's slot move
    /// (`protocol::timing::hand_over_claim`, `SETTLING_CLAIM`). `None`:
    /// `GRANT_CLAIM`, as always elsewhere.
    pub release_claim_ms: Option<i64>,
}

/// A semaphore whose clients wait for messages.
pub type SemModel = WaitModel<Semaphore>;

const NAME: &str = "{s}";

fn key(suffix: &str) -> Vec<u8> {
    // Joined rather than formatted: called in most steps.
    [NAME.as_bytes(), suffix.as_bytes()].concat()
}

/// The permits' key (`{s}:sem`), looked up in most steps.
const PERMITS: &[u8] = b"{s}:sem";

/// `Semaphore::new`'s keys: permits, count, queue, deadlines.
fn scripted() -> Vec<Vec<u8>> {
    vec![
        key(":sem"),
        key(":sem:n"),
        key(":sem:queue"),
        key(":sem:queue:t"),
    ]
}

/// `<k>:<token>` (`Semaphore`'s member of a request for `k` permits).
fn member(client: usize, t: u8, k: u32) -> Vec<u8> {
    [
        k.to_string().into_bytes(),
        b":".to_vec(),
        crate::parties::token(client, t),
    ]
    .concat()
}

const CHANNEL: &[u8] = crate::lock::CHANNEL;

impl Semaphore {
    /// A semaphore of `permits` whose releases offer for the usual claim
    /// window.
    pub fn new(permits: u32, fair: bool) -> Semaphore {
        Semaphore {
            permits,
            fair,
            release_claim_ms: None,
        }
    }

    /// Where a client's offers go (`Semaphore::offer`).
    fn offer(&self, client: usize) -> p::semaphore::Offer<'static> {
        self.offer_for(client, p::GRANT_CLAIM)
    }

    /// [`Semaphore::offer`] with the claim window `claim` (a release's).
    fn offer_for(&self, client: usize, claim: Duration) -> p::semaphore::Offer<'static> {
        p::semaphore::Offer {
            grant_prefix: b"{s}:sem:grant:",
            claim,
            channel: CHANNEL.to_vec(),
            message: crate::parties::release_message(client, PERMITS),
            permits: self.permits,
            fair: self.fair,
        }
    }

    /// lua/sem_acquire.lua's arguments, made by the library's
    /// `AcquireArgs`: by message (`entry` its registration's life, 0 for
    /// a try), or for a waiter that blocks.
    fn acquire_args(
        &self,
        m: &SemModel,
        client: usize,
        t: u8,
        k: u32,
        entry: Duration,
        blocks: bool,
    ) -> Vec<Vec<u8>> {
        let (member, lease) = (member(client, t, k), b(m.lease_ms));
        p::semaphore::AcquireArgs {
            member: &member,
            lease_ms: &lease,
            k,
            entry,
            blocks,
            offer: &self.offer(m.pid(client)),
        }
        .parts()
    }

    /// lua/sem_watch.lua's arguments, made by the library's `WatchArgs`
    /// (`waiter` empty: a look at the name alone).
    fn watch_args(&self, m: &SemModel, client: usize, waiter: &[u8]) -> Script {
        let args = p::semaphore::WatchArgs {
            waiter,
            entry: p::ROOM_ENTRY,
            offer: &self.offer(m.pid(client)),
        }
        .parts();
        Script {
            file: "sem_watch.lua",
            keys: scripted(),
            args,
        }
    }
}

impl Primitive for Semaphore {
    /// The permits asked for.
    type Mode = u32;
    const TAG: u8 = 2;

    fn acquire(&self, m: &SemModel, i: usize, k: u32, t: u8, queue: bool) -> Script {
        Script {
            file: "sem_acquire.lua",
            keys: scripted(),
            args: self.acquire_args(
                m,
                i,
                t,
                k,
                Duration::from_millis(if queue { m.entry_ms(false) as u64 } else { 0 }),
                false,
            ),
        }
    }

    /// `Semaphore`'s spec for a waiter that blocks: its pop moves an offer
    /// from the open list into its own, and lua/sem_acquire.lua runs
    /// behind it (`Direct`).
    fn direct(&self, m: &SemModel, i: usize, k: u32, t: u8, popped: bool) -> Option<Direct> {
        let prefix = "{s}:sem:grant:";
        let mut args = self.acquire_args(m, i, t, k, p::ROOM_ENTRY, true);
        if popped {
            args.push(b"popped".to_vec());
        }
        let me = member(i, t, k);
        Some(Direct {
            open: b"{s}:sem:grant:open".to_vec(),
            own: [prefix.as_bytes(), &me].concat(),
            grant: Script {
                file: "sem_acquire.lua",
                keys: scripted(),
                args,
            },
            watch: self.watch_args(m, i, &me),
            alone: None,
        })
    }

    /// A fair semaphore serves its queue (lua/sem_acquire.lua's KEYS[3],
    /// member -> arrival) in order; its holders are the permits' members.
    fn arrival(&self, k: u32, i: usize, t: u8) -> Option<Arrival> {
        self.fair.then(|| Arrival {
            queue: key(":sem:queue"),
            holder: key(":sem"),
            token: member(i, t, k),
            set: true,
            told: Some(key(":sem:grant:told")),
        })
    }

    /// Every request fits in what the unexpired permits leave free.
    fn fits(&self, keys: &Keyspace, asks: &[u32]) -> bool {
        let now = keys.now_ms();
        let used: u32 = match keys.keys.get(PERMITS).map(|e| &e.value) {
            Some(Value::ZSet(z)) => z
                .iter()
                .filter(|(score, _)| score.0 as i64 > now)
                .map(|(_, m)| {
                    std::str::from_utf8(m)
                        .ok()
                        .and_then(|m| m.split(':').next())
                        .and_then(|k| k.parse::<u32>().ok())
                        .unwrap_or(1)
                })
                .sum(),
            _ => 0,
        };
        asks.iter().all(|&k| used + k <= self.permits)
    }

    /// lua/sem_release.lua's arguments, made by the library's `ReleaseArgs`.
    fn release(&self, m: &SemModel, i: usize, k: u32, t: u8, leave: bool) -> Script {
        let args = p::semaphore::ReleaseArgs {
            member: &member(i, t, k),
            offer: &self.offer_for(m.pid(i), self.hand_over_claim()),
            leave,
        }
        .parts();
        Script {
            file: "sem_release.lua",
            keys: scripted(),
            args,
        }
    }

    /// The permit's `extend` (`Semaphore`'s spec): lua/zset_extend.lua.
    fn extend(
        &self,
        _: &SemModel,
        i: usize,
        k: u32,
        t: u8,
        lease: i64,
        exact: bool,
        _: bool,
    ) -> Script {
        let mut args = vec![member(i, t, k), b(lease)];
        if exact {
            args.push(b"exact".to_vec());
        }
        Script {
            file: "zset_extend.lua",
            keys: vec![key(":sem"), key(":sem:n")],
            args,
        }
    }

    /// lua/sem_watch.lua's arguments, a look at the name alone, made by the
    /// library's `WatchArgs`.
    fn look(&self, m: &SemModel, i: usize, _: u32) -> Script {
        self.watch_args(m, i, b"")
    }

    fn patient(&self, _: u32) -> bool {
        false
    }

    fn hand_over_claim(&self) -> Duration {
        self.release_claim_ms
            .map_or(p::GRANT_CLAIM, |ms| Duration::from_millis(ms as u64))
    }

    fn holders(&self, keys: &Keyspace, holders: &[Holder<u32>]) -> Result<(), String> {
        let held: u32 = holders.iter().map(|h| h.1).sum();
        if held > self.permits {
            let who: Vec<(usize, u32)> = holders.iter().map(|h| (h.0, h.1)).collect();
            return Err(format!(
                "permits: (client, permits) {who:?} hold with valid leases, {} permits",
                self.permits
            ));
        }
        let server_now = keys.now_ms();
        for &(i, k, t, _) in holders {
            let m = member(i, t, k);
            let held = match keys.keys.get(PERMITS).map(|e| &e.value) {
                Some(Value::ZSet(z)) => z
                    .iter()
                    .any(|(score, x)| *x == m && score.0 as i64 > server_now),
                _ => false,
            };
            if !held {
                return Err(format!(
                    "c{i} believes it holds a permit the server does not list"
                ));
            }
        }
        Ok(())
    }

    fn fences_on_server(&self, _: &Keyspace) -> Vec<i64> {
        Vec::new()
    }

    fn quiet(&self, m: &SemModel, server: &mut Server, keys: &Keyspace) -> Result<(), String> {
        // `try_acquire` every 100 ms from the end of the last lease (a dead
        // holder's) is granted within the claim + 1 s.
        let last = match keys.keys.get(PERMITS).map(|e| &e.value) {
            Some(Value::ZSet(z)) => z.iter().map(|(sc, _)| sc.0 as i64).max().unwrap_or(0),
            _ => 0,
        };
        // A try of every permit: nothing may be left holding any.
        let probe = self.acquire(m, 9, self.permits, 1, false);
        let claim = self.hand_over_claim();
        tries_succeed_within(server, keys, last.max(keys.now_ms()), &probe, claim).map_err(
            |reply| {
                format!(
                    "liveness: nobody holds or waits, yet try_acquire every 100 ms for the claim \
                 + 1 s after the last permit's lease ended got {} at the end",
                    reply.show()
                )
            },
        )?;
        lapsed(keys, &[])
    }
}
