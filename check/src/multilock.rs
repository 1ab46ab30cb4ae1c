//! The multi-lock (and the plain lock it is made of) as separate clients
//! use it (`waiters/`: the clients, as the library's waiting loop decides
//! them), each name's waiter waiting for messages, or, where the server
//! grants directly (`WaitModel::direct`), blocking on the name's open
//! list, its pop alone the grant (`Primitive::direct`'s `Alone`, claimed
//! by the hold's first renewal). A multi-lock's acquisition tries
//! every name at once first (lua/lock_acquire_all.lua, one token, never
//! queueing; an undecided outcome released name by name), then takes its
//! names one after another in their canonical order, each an acquisition
//! of its own with the shared deadline, and gives back what it took when
//! one times out (`MultiLock::acquire_until`). Both orders a user may give
//! the names in come to one canonical order (`MultiLock::new` sorts
//! them), so two multi-lock clients and a plain lock on one of the names
//! cover the orders that could deadlock.
//!
//! Properties: never two holders of a name whose leases are valid in
//! their own view; every hold known to the server; fences that grow per
//! name and go to one hold each; no idle time without a cause (no
//! deadlock: a waiter whose attempt would be granted is never left
//! waiting while time passes); quiescence per name.

use std::time::Duration;

use redlease::__protocol as p;

use crate::keyspace::{Keyspace, Value};
use crate::parties::b;
use crate::primitive::{Alone, Arrival, Direct, Holder, Primitive, Script};
use crate::probes::{fence_of, lapsed, tries_succeed};
use crate::server::Server;
use crate::waiters::WaitModel;

/// Which names a client asks for: `count` of them from name `from` in
/// canonical order (a plain lock: one), and the one its acquisition is at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Names {
    pub from: u8,
    pub count: u8,
    pub at: u8,
    /// A fair lock's waiter (it keeps its turn: lua/queue.lua `offer`).
    pub fair: bool,
}

impl Names {
    /// A multi-lock of names `from..from + count`.
    pub fn multi(from: u8, count: u8) -> Names {
        Names {
            from,
            count,
            at: from,
            fair: false,
        }
    }

    /// A plain lock of name `name`.
    pub fn lock(name: u8) -> Names {
        Names::multi(name, 1)
    }

    /// A fair lock of name `name` whose waiters wait for messages (their
    /// place among the blocked lost: a Cluster slot move).
    pub fn fair_lock(name: u8) -> Names {
        Names {
            fair: true,
            ..Names::lock(name)
        }
    }
}

/// The multi-lock's part of the waiter model.
pub struct MultiLock;

/// Multi-lock and lock clients that wait for messages.
pub type MultiModel = WaitModel<MultiLock>;

const FLOOR: &[u8] = crate::lock::FLOOR;
const CHANNEL: &[u8] = crate::lock::CHANNEL;

/// Name `k`'s lock key (canonical order is the keys' order).
fn lock_key(k: u8) -> Vec<u8> {
    format!("{{{}}}", (b'a' + k) as char).into_bytes()
}

fn key(k: u8, suffix: &str) -> Vec<u8> {
    [lock_key(k), suffix.as_bytes().to_vec()].concat()
}

/// `Lock::new`'s keys before the fence floor: lock, counter, queue,
/// deadlines.
fn lock_keys(k: u8) -> Vec<Vec<u8>> {
    vec![
        lock_key(k),
        key(k, ":fence"),
        key(k, ":queue"),
        key(k, ":queue:t"),
    ]
}

fn scripted(k: u8) -> Vec<Vec<u8>> {
    let mut keys = lock_keys(k);
    keys.push(FLOOR.to_vec());
    keys
}

use crate::parties::token;

/// Where a client's hand-overs of name `k` are announced (every waiter
/// queues on one server).
fn announce(pid: usize, k: u8) -> p::lock::Announce<'static> {
    p::lock::Announce {
        channel: std::borrow::Cow::Borrowed(CHANNEL),
        message: crate::parties::release_message(pid, &lock_key(k)),
        queued: true,
    }
}

impl MultiLock {
    /// lua/lock_acquire.lua for client `i`'s token `t` on `mode`'s name,
    /// made by the library's `AcquireArgs` (`queue_ttl`, `waits`: as
    /// `Lock`'s spec makes them for a waiter that waits for messages, or
    /// one that blocks).
    fn acquire_script(
        &self,
        m: &MultiModel,
        i: usize,
        mode: Names,
        t: u8,
        queue_ttl: Duration,
        waits: p::lock::Waits,
    ) -> Script {
        let k = mode.at;
        let (tok, lease, prefix, announce) = (
            token(i, t),
            b(m.lease_ms),
            key(k, ":grant:"),
            announce(m.pid(i), k),
        );
        let args = p::lock::AcquireArgs {
            token: &tok,
            lease_ms: &lease,
            queue_ttl,
            grant_prefix: &prefix,
            claim: p::GRANT_CLAIM,
            announce: &announce,
            waits,
            hand_over: p::GRANT_CLAIM,
        }
        .parts();
        Script {
            file: "lock_acquire.lua",
            keys: scripted(k),
            args,
        }
    }

    fn release_args(&self, m: &MultiModel, i: usize, k: u8, t: u8, leave: bool) -> Vec<Vec<u8>> {
        let (tok, prefix, announce) = (token(i, t), key(k, ":grant:"), announce(m.pid(i), k));
        p::lock::ReleaseArgs {
            token: &tok,
            announce: &announce,
            grant_prefix: &prefix,
            claim: p::GRANT_CLAIM,
            force: false,
            keep: false,
            leave,
        }
        .parts()
    }
}

impl Primitive for MultiLock {
    type Mode = Names;
    const TAG: u8 = 4;

    /// `Lock`'s spec for a waiter that waits for messages (its queue entry
    /// lives as a message waiter's registration).
    fn acquire(&self, m: &MultiModel, i: usize, mode: Names, t: u8, queue: bool) -> Script {
        let entry = if queue { m.entry_ms(false) as u64 } else { 0 };
        let waits = if mode.fair {
            p::lock::Waits::FairMessages
        } else {
            p::lock::Waits::Messages
        };
        self.acquire_script(m, i, mode, t, Duration::from_millis(entry), waits)
    }

    fn release(&self, m: &MultiModel, i: usize, mode: Names, t: u8, leave: bool) -> Script {
        Script {
            file: "lock_release.lua",
            keys: scripted(mode.at),
            args: self.release_args(m, i, mode.at, t, leave),
        }
    }

    /// `Lock::extend`: for a hold of a waiter that blocked, in the form
    /// that also claims a grant its pop alone took (the hold puts its
    /// fence in: `Alone::extend_arg`).
    fn extend(
        &self,
        _: &MultiModel,
        i: usize,
        mode: Names,
        t: u8,
        lease: i64,
        exact: bool,
        claiming: bool,
    ) -> Script {
        let (tok, ms, prefix) = (token(i, t), b(lease), key(mode.at, ":grant:"));
        let mut args = p::lock::ExtendArgs {
            token: &tok,
            claiming: claiming.then_some((&prefix[..], p::ROOM_ENTRY)),
            lease_ms: &ms,
        }
        .parts();
        if exact {
            args.push(b"exact".to_vec());
        }
        let k = mode.at;
        Script {
            file: "lock_extend.lua",
            keys: vec![lock_key(k), key(k, ":queue"), key(k, ":queue:t")],
            args,
        }
    }

    /// `Lock::look` for the name alone.
    fn look(&self, m: &MultiModel, i: usize, mode: Names) -> Script {
        let k = mode.at;
        let (prefix, announce) = (key(k, ":grant:"), announce(m.pid(i), k));
        let args = p::lock::WatchArgs {
            waiter: b"",
            entry: p::ROOM_ENTRY,
            grant_prefix: &prefix,
            claim: p::GRANT_CLAIM,
            announce: &announce,
            hand_over: p::GRANT_CLAIM,
        }
        .parts();
        Script {
            file: "lock_watch.lua",
            keys: scripted(k),
            args,
        }
    }

    fn exclusive(&self, _: Names) -> bool {
        true
    }

    fn patient(&self, _: Names) -> bool {
        false
    }

    /// `Lock`'s spec for a waiter that blocks (a plain lock's, as a
    /// multi-lock's names are; a fair one's pop also asks whether a waiter
    /// keeps its turn, which the lock model has): its pop from the name's
    /// open list into its own is the grant
    /// (`Alone`); behind a pop that took none goes lua/lock_acquire.lua
    /// with `'popped'`; the renewal thread's look for it is
    /// lua/lock_watch.lua with its token.
    fn direct(&self, m: &MultiModel, i: usize, mode: Names, t: u8, popped: bool) -> Option<Direct> {
        if mode.fair {
            return None;
        }
        let k = mode.at;
        let mut grant = self.acquire_script(m, i, mode, t, p::ROOM_ENTRY, p::lock::Waits::Blocking);
        if popped {
            grant.args.push(b"popped".to_vec());
        }
        let (tok, prefix, announce) = (token(i, t), key(k, ":grant:"), announce(m.pid(i), k));
        let watch = p::lock::WatchArgs {
            waiter: &tok,
            entry: p::ROOM_ENTRY,
            grant_prefix: &prefix,
            claim: p::GRANT_CLAIM,
            announce: &announce,
            hand_over: p::GRANT_CLAIM,
        }
        .parts();
        Some(Direct {
            open: key(k, ":grant:open"),
            own: [prefix, tok].concat(),
            grant,
            watch: Script {
                file: "lock_watch.lua",
                keys: scripted(k),
                args: watch,
            },
            alone: Some(Alone {
                holder: lock_key(k),
                release_arg: p::lock::RELEASE_FENCE,
                extend_arg: p::lock::EXTEND_FENCE,
            }),
        })
    }

    fn names(&self, mode: Names) -> u8 {
        mode.count
    }

    fn at(&self, mode: Names, k: u8) -> Names {
        Names {
            at: mode.from + k,
            ..mode
        }
    }

    /// `MultiLock::all_at_once` on one server: lua/lock_acquire_all.lua,
    /// every name's keys in canonical order, then the fence floor; the
    /// token, then each name's lease and grant prefix.
    fn acquire_all(&self, m: &MultiModel, i: usize, mode: Names, t: u8) -> Option<Script> {
        let names = mode.from..mode.from + mode.count;
        let mut keys: Vec<Vec<u8>> = names.clone().flat_map(lock_keys).collect();
        keys.push(FLOOR.to_vec());
        let mut args = vec![token(i, t)];
        for k in names {
            args.push(b(m.lease_ms));
            args.push(key(k, ":grant:"));
        }
        Some(Script {
            file: "lock_acquire_all.lua",
            keys,
            args,
        })
    }

    /// A fair lock's waiters are served in arrival order (lua/queue.lua
    /// `offer`); a plain lock's and a multi-lock's promise none.
    fn arrival(&self, mode: Names, i: usize, t: u8) -> Option<Arrival> {
        mode.fair.then(|| Arrival {
            queue: key(mode.at, ":queue"),
            holder: lock_key(mode.at),
            token: token(i, t),
            set: false,
            told: None,
        })
    }

    fn name_of(&self, mode: Names) -> u8 {
        mode.at
    }

    fn wakes(&self, key: &[u8], mode: Names) -> bool {
        key == lock_key(mode.at)
    }

    fn holders(&self, keys: &Keyspace, holders: &[Holder<Names>]) -> Result<(), String> {
        for k in 0..2u8 {
            let of: Vec<&Holder<Names>> = holders.iter().filter(|h| h.1.at == k).collect();
            if of.len() > 1 {
                return Err(format!(
                    "exclusion: c{} and c{} both hold name {k} with valid leases",
                    of[0].0, of[1].0
                ));
            }
            let v = match keys.keys.get(&lock_key(k)).map(|e| &e.value) {
                Some(Value::Str(v)) => v.clone(),
                _ => Vec::new(),
            };
            for &&(i, _, t, fence) in &of {
                let tok = token(i, t);
                // A grant its pop alone took is its hold until its first
                // renewal claims it (lua/queue.lua `held_by`).
                let popped = fence > 0 && v == format!("rl:grant#{fence}").into_bytes();
                let named = v.starts_with(&tok) && v.get(tok.len()) == Some(&b'#');
                if !(popped || named) {
                    return Err(format!(
                        "c{i} believes it holds name {k} but the server has {:?}",
                        String::from_utf8_lossy(&v)
                    ));
                }
            }
        }
        Ok(())
    }

    fn fences_on_server(&self, keys: &Keyspace) -> Vec<i64> {
        (0..2u8)
            .map(|k| fence_of(keys, &lock_key(k)).unwrap_or(0))
            .collect()
    }

    fn quiet(&self, m: &MultiModel, server: &mut Server, keys: &Keyspace) -> Result<(), String> {
        // Each name: `try_acquire` every 100 ms from the end of its last
        // lease (a dead holder's) is granted within the claim + 1 s.
        for k in 0..2u8 {
            let from = keys
                .keys
                .get(&lock_key(k))
                .and_then(|e| e.expires)
                .unwrap_or(keys.now_ms())
                .max(keys.now_ms());
            let probe = self.acquire(m, 9, Names::lock(k), 1, false);
            tries_succeed(server, keys, from, &probe).map_err(|reply| {
                format!(
                    "liveness: nobody holds or waits, yet try_acquire of name {k} every 100 ms \
                     for the claim + 1 s after its last lease ended got {} at the end",
                    reply.show()
                )
            })?;
        }
        lapsed(keys, &[FLOOR])
    }
}
