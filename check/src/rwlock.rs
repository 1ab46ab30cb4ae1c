//! The read-write lock as separate clients use it, readers and writers
//! together, each waiting for messages (`waiters/`: the clients, as the
//! library's waiting loop decides them; readers are patient waiters whose
//! registration decides whether a release publishes). This file says the
//! read-write lock's part: its scripts with the library's arguments
//! (`redlease::__protocol::rwlock`, the structs `handles/rwlock.rs`
//! sends), and its properties: never a writer with a reader or a second
//! writer, every holder known to the server, write fences that only grow
//! and go to one hold each, quiescence.
//!
//! Writers whose server grants directly (`WaitModel::direct`) block on
//! the open list while a second or more of their wait is left, and pop
//! what is there: a hand-over, which the pop alone takes (as a lock's
//! waiter does, claimed by the hold's first renewal), or a reader's probe
//! of their life (lua/rw_grant.lua), after which the writer's script
//! runs. Readers wait for messages.
//!
//! Not modelled yet: a downgrade (a read inside the client's own write
//! hold).

use std::time::Duration;

use redlease::__protocol as p;

use crate::keyspace::{Keyspace, Value};
use crate::parties::b;
use crate::primitive::{Alone, Direct, Holder, Primitive, Script};
use crate::probes::{fence_of, lapsed, tries_succeed};
use crate::server::Server;
use crate::waiters::WaitModel;

/// What a client asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rw {
    Read,
    Write,
}

/// The read-write lock's part of the waiter model.
pub struct RwLock;

/// A read-write lock whose clients wait for messages.
pub type RwModel = WaitModel<RwLock>;

const NAME: &str = "{w}";
const FLOOR: &[u8] = crate::lock::FLOOR;
const CHANNEL: &[u8] = crate::lock::CHANNEL;

fn key(suffix: &str) -> Vec<u8> {
    format!("{NAME}{suffix}").into_bytes()
}

/// `Keys::scripted` (handles/rwlock.rs): writer, readers, fence counter,
/// writer queue and its deadlines, waiting readers, fence floor.
fn scripted() -> Vec<Vec<u8>> {
    vec![
        key(":rw:w"),
        key(":rw:r"),
        key(":fence"),
        key(":rw:wq"),
        key(":rw:wq:t"),
        key(":rw:rq"),
        FLOOR.to_vec(),
    ]
}

use crate::parties::token;

const PREFIX: &[u8] = b"{w}:rw:grant:";

/// Where a client's hand-overs go (`RwLock::open`); its messages carry
/// the client's id.
fn open(client: usize) -> p::rwlock::Open<'static> {
    p::rwlock::Open {
        grant_prefix: PREFIX,
        claim: p::GRANT_CLAIM,
        channel: CHANNEL.to_vec(),
        message: crate::parties::release_message(client, format!("{NAME}:rw:w").as_bytes()),
    }
}

/// Readers, when no live writer waits: nothing holds the write lock (a
/// hand-over included), no writer's proof of life stands, and no writer
/// that waits for messages has an entry left. Readers wait that long for
/// writers they cannot tell from dead ones; once it is over, only a
/// probe's window (`rw_grant.lua`) stands between them and the read hold
/// when dead writers are queued, and a look when a writer that took a
/// hand-over died (its client named among the hand-over's watchers), so
/// they must be in within the liveness bound.
fn free_to_read(keys: &Keyspace, now: i64) -> bool {
    let told = match keys.keys.get(&[PREFIX, b"told"].concat()).map(|e| &e.value) {
        Some(Value::ZSet(z)) => z.iter().any(|(score, _)| score.0 as i64 > now),
        _ => false,
    };
    !keys.keys.contains_key(&key(":rw:w"))
        && !keys.keys.contains_key(&[PREFIX, b"alive"].concat())
        && !told
}

impl Primitive for RwLock {
    type Mode = Rw;
    const TAG: u8 = 3;

    /// `RwLock::read_spec`'s and `write_spec`'s grants (a writer that
    /// waits for messages: its queue entry lives as a message waiter's
    /// registration, `Core::queue_entry`).
    fn acquire(&self, m: &RwModel, i: usize, mode: Rw, t: u8, queue: bool) -> Script {
        let (tok, lease, open) = (token(i, t), b(m.lease_ms), open(m.pid(i)));
        let entry =
            |patient| Duration::from_millis(if queue { m.entry_ms(patient) as u64 } else { 0 });
        let (file, args) = match mode {
            Rw::Read => (
                "rw_read_acquire.lua",
                p::rwlock::ReadAcquireArgs {
                    token: &tok,
                    lease_ms: &lease,
                    own_write: b"",
                    waiting: entry(true),
                    open: &open,
                    own_fence: b"",
                }
                .parts(),
            ),
            Rw::Write => (
                "rw_write_acquire.lua",
                p::rwlock::WriteAcquireArgs {
                    token: &tok,
                    lease_ms: &lease,
                    queue_ttl: entry(false),
                    open: &open,
                    blocks: false,
                }
                .parts(),
            ),
        };
        Script {
            file,
            keys: scripted(),
            args,
        }
    }

    /// `release_call` (handles/rwlock.rs).
    fn release(&self, m: &RwModel, i: usize, mode: Rw, t: u8, leave: bool) -> Script {
        let args = p::rwlock::ReleaseArgs {
            token: &token(i, t),
            open: &open(m.pid(i)),
            leave,
        }
        .parts();
        Script {
            file: match mode {
                Rw::Read => "rw_read_release.lua",
                Rw::Write => "rw_write_release.lua",
            },
            keys: scripted(),
            args,
        }
    }

    /// The specs' `extend`: the reader's score, the writer's key
    /// (`Holding::extend` adds `exact`); for a writer that blocked, in the
    /// form that also claims a write hold its pop alone took (the hold
    /// puts its fence in: `Alone::extend_arg`), with the writers' queue.
    fn extend(
        &self,
        _: &RwModel,
        i: usize,
        mode: Rw,
        t: u8,
        lease: i64,
        exact: bool,
        claiming: bool,
    ) -> Script {
        let (file, keys, mut args) = match mode {
            Rw::Read => (
                "zset_extend.lua",
                vec![key(":rw:r")],
                vec![token(i, t), b(lease)],
            ),
            Rw::Write => {
                let (tok, ms) = (token(i, t), b(lease));
                let args = p::lock::ExtendArgs {
                    token: &tok,
                    claiming: claiming.then_some((PREFIX, p::ROOM_ENTRY)),
                    lease_ms: &ms,
                }
                .parts();
                let keys = if claiming {
                    vec![key(":rw:w"), key(":rw:wq"), key(":rw:wq:t")]
                } else {
                    vec![key(":rw:w")]
                };
                ("lock_extend.lua", keys, args)
            }
        };
        if exact {
            args.push(b"exact".to_vec());
        }
        Script { file, keys, args }
    }

    /// `RwLock::watch` for the name alone.
    fn look(&self, m: &RwModel, i: usize, _: Rw) -> Script {
        let args = p::rwlock::WatchArgs {
            writer: b"",
            entry: p::ROOM_ENTRY,
            open: &open(m.pid(i)),
        }
        .parts();
        Script {
            file: "rw_watch.lua",
            keys: scripted(),
            args,
        }
    }

    /// `read_spec` has no `direct`: readers wait for messages.
    fn blocks(&self, mode: Rw) -> bool {
        mode == Rw::Write
    }

    /// `write_spec`'s writer that blocks: its pop moves a hand-over (or a
    /// reader's probe) from the open list into its own, and the pop alone
    /// is the grant (`Alone`, as a lock's); behind a pop that took none
    /// (a probe, nothing) goes lua/rw_write_acquire.lua with `'popped'`;
    /// the renewal thread looks for it with lua/rw_watch.lua and its
    /// token. Readers wait for messages.
    fn direct(&self, m: &RwModel, i: usize, mode: Rw, t: u8, popped: bool) -> Option<Direct> {
        if mode != Rw::Write {
            return None;
        }
        let (tok, lease, open) = (token(i, t), b(m.lease_ms), open(m.pid(i)));
        let mut args = p::rwlock::WriteAcquireArgs {
            token: &tok,
            lease_ms: &lease,
            queue_ttl: p::ROOM_ENTRY,
            open: &open,
            blocks: true,
        }
        .parts();
        if popped {
            args.push(b"popped".to_vec());
        }
        let watch = p::rwlock::WatchArgs {
            writer: &tok,
            entry: p::ROOM_ENTRY,
            open: &open,
        }
        .parts();
        Some(Direct {
            open: [PREFIX, b"open"].concat(),
            own: [PREFIX, &tok[..]].concat(),
            grant: Script {
                file: "rw_write_acquire.lua",
                keys: scripted(),
                args,
            },
            watch: Script {
                file: "rw_watch.lua",
                keys: scripted(),
                args: watch,
            },
            alone: Some(Alone {
                holder: key(":rw:w"),
                release_arg: p::rwlock::RELEASE_FENCE,
                extend_arg: p::lock::EXTEND_FENCE,
            }),
        })
    }

    /// A writer waits, and nobody holds: no writer but a hand-over in
    /// flight, no reader whose lease runs. (Readers alone are not held to
    /// the claim + 1 s: behind a writer that died queued they wait out its
    /// mark of life, lua/rw_grant.lua.)
    fn fits(&self, keys: &Keyspace, asks: &[Rw]) -> bool {
        let now = keys.now_ms();
        if !asks.contains(&Rw::Write) {
            return free_to_read(keys, now);
        }
        let writer = match keys.keys.get(&key(":rw:w")).map(|e| &e.value) {
            Some(Value::Str(v)) => !v.starts_with(b"rl:grant#"),
            _ => false,
        };
        let reading = match keys.keys.get(&key(":rw:r")).map(|e| &e.value) {
            Some(Value::ZSet(z)) => z.iter().any(|(score, _)| score.0 as i64 > now),
            _ => false,
        };
        !writer && !reading
    }

    fn exclusive(&self, mode: Rw) -> bool {
        mode == Rw::Write
    }

    fn patient(&self, mode: Rw) -> bool {
        mode == Rw::Read
    }

    fn holders(&self, keys: &Keyspace, holders: &[Holder<Rw>]) -> Result<(), String> {
        let writers: Vec<usize> = holders
            .iter()
            .filter(|h| h.1 == Rw::Write)
            .map(|h| h.0)
            .collect();
        let readers: Vec<usize> = holders
            .iter()
            .filter(|h| h.1 == Rw::Read)
            .map(|h| h.0)
            .collect();
        if writers.len() > 1 || (!writers.is_empty() && !readers.is_empty()) {
            return Err(format!(
                "exclusion: writers {writers:?} and readers {readers:?} hold with valid leases"
            ));
        }
        let server_now = keys.now_ms();
        for &(i, mode, t, fence) in holders {
            let tok = token(i, t);
            let known = match mode {
                // A write hold its pop alone took is its hold until its
                // first renewal claims it (lua/queue.lua `held_by`).
                Rw::Write => match keys.keys.get(&key(":rw:w")).map(|e| &e.value) {
                    Some(Value::Str(v)) => {
                        (v.starts_with(&tok) && v.get(tok.len()) == Some(&b'#'))
                            || (fence > 0 && *v == format!("rl:grant#{fence}").into_bytes())
                    }
                    _ => false,
                },
                Rw::Read => match keys.keys.get(&key(":rw:r")).map(|e| &e.value) {
                    Some(Value::ZSet(z)) => z
                        .iter()
                        .any(|(score, x)| *x == tok && score.0 as i64 > server_now),
                    _ => false,
                },
            };
            if !known {
                return Err(format!(
                    "c{i} believes it holds a {mode:?} hold the server does not know"
                ));
            }
        }
        Ok(())
    }

    fn fences_on_server(&self, keys: &Keyspace) -> Vec<i64> {
        vec![fence_of(keys, &key(":rw:w")).unwrap_or(0)]
    }

    fn quiet(&self, m: &RwModel, server: &mut Server, keys: &Keyspace) -> Result<(), String> {
        // `try_read` and `try_write`, each every 100 ms from the end of
        // the last lease (a dead holder's), are granted within the claim +
        // 1 s.
        let writer_until = keys.keys.get(&key(":rw:w")).and_then(|e| e.expires);
        let readers_until = match keys.keys.get(&key(":rw:r")).map(|e| &e.value) {
            Some(Value::ZSet(z)) => z.iter().map(|(sc, _)| sc.0 as i64).max(),
            _ => None,
        };
        let from = writer_until
            .into_iter()
            .chain(readers_until)
            .fold(keys.now_ms(), i64::max);
        for mode in [Rw::Read, Rw::Write] {
            let probe = self.acquire(m, 9, mode, 1, false);
            tries_succeed(server, keys, from, &probe).map_err(|reply| {
                format!(
                    "liveness: nobody holds or waits, yet a try of the {mode:?} hold every \
                     100 ms for the claim + 1 s after the last lease ended got {} at the end",
                    reply.show()
                )
            })?;
        }
        lapsed(keys, &[FLOOR])
    }
}
