//! Wake-ups over sharded pub/sub (Redis Cluster, Redis ≥ 7).
//!
//! A classic `PUBLISH` on a cluster is broadcast to every node over the
//! cluster bus, and reaches every client subscribed anywhere. Here a name's
//! releases go to a channel in the name's own slot (`SPUBLISH`, see
//! lua/publish.lua), which only the master serving that slot (and its
//! replicas) carries; a client subscribes to it (`SSUBSCRIBE`) on that
//! master while one of its threads waits on the name, and unsubscribes when
//! the last one stops. So a release reaches the clients waiting on that name
//! and nobody else.
//!
//! Each master gets one subscriber connection per client (a *link*): a
//! thread reads it, and waiting threads write their subscriptions on it
//! directly (the socket is split, see `Wire::split`), so subscribing costs
//! one round trip and no thread hop. Everything that can go wrong with a
//! subscription — the slot moved (`MOVED`, or the server's own
//! `sunsubscribe` when a slot migrates), the master failed, the connection
//! dropped, an ACL refused the channel — ends in the same place: the
//! channel is no longer live, the slot map is read again, and the waiters
//! are nudged to look again and to subscribe anew where the slot now is.
//! Until then they poll gently, as a classic waiter without its subscriber
//! does; a message lost meanwhile costs at most that poll.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use redis::Value;

use super::{Shared, REFUSED_RETRY, SUBSCRIBER_TICK};
use crate::backend::{Backend, Wire};
use crate::util::mutex::lock;

/// How long a channel is not asked for again after its master could not
/// be reached (after an ACL refused it: `REFUSED_RETRY`); the slot map is read
/// again meanwhile (at most once a second).
const MOVED_RETRY: Duration = Duration::from_secs(1);

/// How long a link that carries subscriptions may stay silent before its
/// master is asked whether it is still there.
const PING_EVERY: Duration = Duration::from_secs(1);

/// How long a link nobody uses stays open (the next wait on a name of
/// that master would open it again).
const LINK_IDLE: Duration = Duration::from_secs(30);

/// The sharded subscriptions of one client.
pub(super) struct Shards {
    state: Mutex<State>,
    /// A subscription was confirmed or refused.
    changed: Condvar,
    /// Numbers the links, so a link's reader never touches its successor.
    next_link: AtomicU64,
}

#[derive(Default)]
struct State {
    /// By shard channel.
    channels: HashMap<Vec<u8>, Channel>,
    /// By master address.
    links: HashMap<Arc<str>, Link>,
    /// An ACL refusal was logged (once per client).
    refusal_logged: bool,
}

struct Channel {
    /// Local waiters using it.
    users: usize,
    /// The link it was asked for on (master address, link id).
    on: Option<(Arc<str>, u64)>,
    /// The master confirmed it.
    live: bool,
    /// Not asked for again before then (its last subscription failed).
    retry_at: Option<Instant>,
}

struct Link {
    id: u64,
    writer: TcpStream,
    /// Requests whose replies are due, in the order they were written:
    /// the server answers in that order.
    pending: VecDeque<Req>,
}

/// A request written on a link.
#[derive(PartialEq)]
enum Req {
    Subscribe(Vec<u8>),
    Unsubscribe(Vec<u8>),
    /// Is the master still there? (see [`read_link`])
    Ping,
}

impl Shards {
    pub(super) fn new() -> Shards {
        Shards {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            next_link: AtomicU64::new(1),
        }
    }

    /// A waiter starts using `channel` (the shard channel of `key`).
    pub(super) fn join(&self, channel: &[u8]) {
        let mut st = lock(&self.state);
        st.channels
            .entry(channel.to_vec())
            .or_insert(Channel {
                users: 0,
                on: None,
                live: false,
                retry_at: None,
            })
            .users += 1;
    }

    /// A waiter stops using `channel`; the last one unsubscribes.
    pub(super) fn leave(&self, channel: &[u8]) {
        let mut st = lock(&self.state);
        let Some(c) = st.channels.get_mut(channel) else {
            return;
        };
        c.users -= 1;
        if c.users > 0 {
            return;
        }
        let on = st.channels.remove(channel).and_then(|c| c.on);
        if let Some((addr, id)) = on {
            if let Some(link) = st.links.get_mut(&addr).filter(|l| l.id == id) {
                // A failed write leaves the link to its reader, which
                // finds it broken.
                if send(&mut link.writer, "SUNSUBSCRIBE", channel).is_ok() {
                    link.pending.push_back(Req::Unsubscribe(channel.to_vec()));
                }
            }
        }
    }

    /// Whether `channel`'s subscription is confirmed.
    pub(super) fn live(&self, channel: &[u8]) -> bool {
        lock(&self.state)
            .channels
            .get(channel)
            .is_some_and(|c| c.live)
    }

    /// Subscribes to `channel` (of `key`) on the master serving its slot,
    /// unless it is live or was refused a moment ago, and waits until
    /// `limit` at most (connecting included) for the confirmation: the
    /// caller looks again once it is live, so no release after that look
    /// goes unheard. Whether it is live.
    pub(super) fn subscribe(
        &self,
        shared: &Arc<Shared>,
        backend: &Arc<Backend>,
        channel: &[u8],
        key: &[u8],
        limit: Instant,
    ) -> bool {
        {
            let st = lock(&self.state);
            match st.channels.get(channel) {
                None => return false,
                Some(c) if c.live => return true,
                Some(c) if c.retry_at.is_some_and(|t| Instant::now() < t) => return false,
                _ => {}
            }
        }
        let Some(addr) = backend.shard_master(key) else {
            return false;
        };
        if !self.has_link(&addr) {
            let connect = limit.saturating_duration_since(Instant::now());
            if connect.is_zero() {
                return false;
            }
            match backend.shard_link(&addr, connect) {
                Ok((reader, writer)) => self.add_link(shared, backend, &addr, reader, writer),
                Err(e) => {
                    log::debug!("redlease: no wake-up link to {addr}: {e}");
                    backend.shard_failed(&addr);
                    self.refuse(channel, MOVED_RETRY);
                    return false;
                }
            }
        }
        let mut st = lock(&self.state);
        let Some(id) = st.links.get(&addr).map(|l| l.id) else {
            return false; // it failed meanwhile; the next look tries again
        };
        let Some(c) = st.channels.get_mut(channel) else {
            return false;
        };
        if c.on.as_ref() != Some(&(addr.clone(), id)) {
            c.on = Some((addr.clone(), id));
            c.live = false;
            let link = st.links.get_mut(&addr).expect("found above, same lock");
            if send(&mut link.writer, "SSUBSCRIBE", channel).is_err() {
                // Its reader finds the link broken and clears it.
                let _ = link.writer.shutdown(Shutdown::Both);
                return false;
            }
            link.pending.push_back(Req::Subscribe(channel.to_vec()));
        }
        // Wait for the reply (asked just now, or by another waiter).
        loop {
            match st.channels.get(channel) {
                Some(c) if c.live => return true,
                Some(c) if c.on.as_ref().is_some_and(|(a, i)| *a == addr && *i == id) => {}
                _ => return false, // refused, or the link failed
            }
            let left = limit.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st = crate::util::mutex::wait_timeout(&self.changed, st, left);
        }
    }

    fn has_link(&self, addr: &Arc<str>) -> bool {
        lock(&self.state).links.contains_key(addr)
    }

    /// Keeps a new link to `addr` (unless another thread made one first)
    /// and starts its reader.
    fn add_link(
        &self,
        shared: &Arc<Shared>,
        backend: &Arc<Backend>,
        addr: &Arc<str>,
        reader: Wire,
        writer: TcpStream,
    ) {
        let id = self.next_link.fetch_add(1, Ordering::Relaxed);
        {
            let mut st = lock(&self.state);
            if st.links.contains_key(addr) {
                return; // dropping ours closes it
            }
            st.links.insert(
                addr.clone(),
                Link {
                    id,
                    writer,
                    pending: VecDeque::new(),
                },
            );
        }
        let (shared2, backend2, addr2) = (shared.clone(), backend.clone(), addr.clone());
        let spawned = std::thread::Builder::new()
            .name("redlease-wakeup-shard".into())
            .spawn(move || read_link(shared2, backend2, addr2, id, reader));
        if let Err(e) = spawned {
            log::error!("redlease: cannot start a wake-up reader: {e}");
            self.drop_link(shared, backend, addr, id, false);
        }
    }

    /// Not asked for again for `wait` (its waiters poll meanwhile).
    fn refuse(&self, channel: &[u8], wait: Duration) {
        let mut st = lock(&self.state);
        if let Some(c) = st.channels.get_mut(channel) {
            c.on = None;
            c.live = false;
            c.retry_at = Some(Instant::now() + wait);
        }
        drop(st);
        self.changed.notify_all();
    }

    /// A link failed (`failed`: its master did not answer), or is given
    /// up, or its client is closing: its channels are no longer live, and
    /// every waiter looks again (messages may have been lost) and
    /// subscribes anew once the slot map has been read again (asking a
    /// master that failed last, so that it holds nobody up).
    fn drop_link(
        &self,
        shared: &Shared,
        backend: &Backend,
        addr: &Arc<str>,
        id: u64,
        failed: bool,
    ) {
        let mut st = lock(&self.state);
        if st.links.get(addr).is_some_and(|l| l.id == id) {
            if let Some(l) = st.links.remove(addr) {
                let _ = l.writer.shutdown(Shutdown::Both);
            }
        }
        let mut lost = false;
        for c in st.channels.values_mut() {
            if c.on.as_ref().is_some_and(|(a, i)| a == addr && *i == id) {
                c.on = None;
                c.live = false;
                lost = true;
            }
        }
        drop(st);
        self.changed.notify_all();
        if !lost || shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        if failed {
            backend.shard_failed(addr);
        } else {
            backend.shard_moved();
        }
        shared.notify_all();
    }

    /// One value read from link `id` to `addr`; what the link does next.
    fn on_value(&self, shared: &Shared, addr: &Arc<str>, id: u64, v: Value) -> Flow {
        let event = Event::of(v);
        if let Event::Message(payload) = &event {
            shared.dispatch(payload);
            return Flow::Go;
        }
        let mut st = lock(&self.state);
        let State {
            channels,
            links,
            refusal_logged,
        } = &mut *st;
        let Some(link) = links.get_mut(addr).filter(|l| l.id == id) else {
            return Flow::Drop(false);
        };
        let ours = |c: &Channel| c.on.as_ref().is_some_and(|(a, i)| a == addr && *i == id);
        // Replies come in the order of the requests; a `sunsubscribe` that
        // is not the next reply is the server's own (the slot left).
        let next = link.pending.front();
        match event {
            Event::Subscribed(channel) if next == Some(&Req::Subscribe(channel.clone())) => {
                link.pending.pop_front();
                if let Some(c) = channels.get_mut(&channel).filter(|c| ours(c)) {
                    c.live = true;
                    c.retry_at = None;
                }
                drop(st);
                self.changed.notify_all();
                Flow::Go
            }
            Event::Unsubscribed(channel) if next == Some(&Req::Unsubscribe(channel.clone())) => {
                link.pending.pop_front();
                Flow::Go
            }
            Event::Pong if next == Some(&Req::Ping) => {
                link.pending.pop_front();
                Flow::Go
            }
            Event::Unsubscribed(channel) => {
                // Subscribe again where the slot is now.
                let Some(c) = channels.get_mut(&channel).filter(|c| ours(c)) else {
                    return Flow::Go;
                };
                c.on = None;
                c.live = false;
                drop(st);
                self.changed.notify_all();
                Flow::Moved
            }
            Event::Refused(e) => {
                let refused = e.code() == "NOPERM";
                if refused && matches!(next, Some(Req::Subscribe(_))) {
                    // An ACL refusal answers a subscription, and nothing
                    // else we send: this one. It will not change soon; the
                    // link and its other channels are fine.
                    let Some(Req::Subscribe(channel)) = link.pending.pop_front() else {
                        return Flow::Drop(false);
                    };
                    if !std::mem::replace(refusal_logged, true) {
                        log::warn!(
                            "redlease: the server refuses the wake-up channel {:?} ({}); waiters \
                             poll instead (slower). Allow the channels, as the README's ACL line does",
                            String::from_utf8_lossy(&channel),
                            e.details().unwrap_or(e.code())
                        );
                    }
                    drop(st);
                    self.refuse(&channel, REFUSED_RETRY);
                    return Flow::Go;
                }
                // Which request anything else answers cannot always be told
                // (a `MOVED` to an unsubscription may follow the server's
                // own `sunsubscribe` of the same channel), so the link is
                // given up, and its subscriptions with it: their waiters
                // subscribe again on a new link once the slot map has been
                // read again.
                log::debug!("redlease: wake-up link to {addr} refused a request: {e:?}");
                Flow::Drop(false)
            }
            // Anything else out of order: the link cannot be trusted.
            Event::Subscribed(_) | Event::Pong => Flow::Drop(false),
            Event::Message(_) | Event::Other => Flow::Go,
        }
    }

    /// Closes every link (the client is being dropped): their readers end.
    pub(super) fn close(&self) {
        for link in lock(&self.state).links.values() {
            let _ = link.writer.shutdown(Shutdown::Both);
        }
    }
}

/// What a link's reader read.
enum Event {
    Message(Vec<u8>),
    Subscribed(Vec<u8>),
    Unsubscribed(Vec<u8>),
    Pong,
    Refused(redis::ServerError),
    Other,
}

/// What a link's reader does after a value.
enum Flow {
    Go,
    /// A subscription moved away: read the slot map again.
    Moved,
    /// Give the link up (`true`: its master failed).
    Drop(bool),
}

impl Event {
    fn of(v: Value) -> Event {
        let parts = match v {
            Value::Array(parts) => parts,
            Value::ServerError(e) => return Event::Refused(e),
            _ => return Event::Other,
        };
        let mut parts = parts.into_iter();
        let (Some(Value::BulkString(kind)), Some(Value::BulkString(channel))) =
            (parts.next(), parts.next())
        else {
            return Event::Other;
        };
        match kind.as_slice() {
            b"smessage" => match parts.next() {
                Some(Value::BulkString(payload)) => Event::Message(payload),
                _ => Event::Other,
            },
            b"ssubscribe" => Event::Subscribed(channel),
            b"sunsubscribe" => Event::Unsubscribed(channel),
            b"pong" => Event::Pong,
            _ => Event::Other,
        }
    }
}

/// Writes `command channel` on a link (bounded by its write timeout).
fn send(writer: &mut TcpStream, command: &str, channel: &[u8]) -> std::io::Result<()> {
    let packed = redis::cmd(command).arg(channel).get_packed_command();
    writer.write_all(&packed)
}

/// A link's reader thread: dispatches messages and replies until the link
/// fails or the client is dropped. While the link carries subscriptions,
/// a link silent for [`PING_EVERY`] is asked for a `PING`: a master that
/// does not answer within the response timeout, and at least a second
/// (stopped, cut off, failed over), is given up, so that its waiters look again and subscribe where
/// their slots are now, instead of sleeping until their fallback poll.
fn read_link(
    shared: Arc<Shared>,
    backend: Arc<Backend>,
    addr: Arc<str>,
    id: u64,
    mut reader: Wire,
) {
    let shards = &shared.shards;
    // A master busy for a moment (a slow command, a fork) is not a failed
    // one: it gets at least a second to answer.
    let patience = backend.timeouts().response.max(PING_EVERY);
    let mut unused_since: Option<Instant> = None;
    let mut heard = Instant::now();
    let mut pinged: Option<Instant> = None;
    let mut failed = true;
    while !shared.shutdown.load(Ordering::Acquire) {
        match reader.next_push(SUBSCRIBER_TICK) {
            Ok(Some(v)) => {
                heard = Instant::now();
                pinged = None;
                match shards.on_value(&shared, &addr, id, v) {
                    Flow::Go => {}
                    Flow::Moved => {
                        backend.shard_moved();
                        shared.notify_all();
                    }
                    Flow::Drop(master_failed) => {
                        failed = master_failed;
                        break;
                    }
                }
            }
            Ok(None) => {
                if pinged.is_some_and(|at| at.elapsed() >= patience) {
                    log::debug!("redlease: wake-up link to {addr} went silent");
                    break;
                }
                let mut st = lock(&shards.state);
                let used = st
                    .channels
                    .values()
                    .any(|c| c.on.as_ref().is_some_and(|(a, i)| *a == addr && *i == id));
                let Some(link) = st.links.get_mut(&addr).filter(|l| l.id == id) else {
                    failed = false;
                    break;
                };
                let busy = used || !link.pending.is_empty();
                if used && pinged.is_none() && heard.elapsed() >= PING_EVERY {
                    let ping = redis::cmd("PING").get_packed_command();
                    if link.writer.write_all(&ping).is_err() {
                        break;
                    }
                    link.pending.push_back(Req::Ping);
                    pinged = Some(Instant::now());
                }
                drop(st);
                // A link nobody has used for a while is closed.
                if busy {
                    unused_since = None;
                } else if unused_since.get_or_insert_with(Instant::now).elapsed() >= LINK_IDLE {
                    failed = false;
                    break;
                }
            }
            Err(e) => {
                log::debug!("redlease: wake-up link to {addr} failed: {e}");
                break;
            }
        }
    }
    // (A client being dropped ends here too; nothing is asked then.)
    shards.drop_link(&shared, &backend, &addr, id, failed);
}
