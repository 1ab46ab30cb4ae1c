//! The masters as renewal (and direct grants) see them: our own slot map
//! (`CLUSTER SLOTS`) and a node for each master, so that a batch goes to
//! each master on its own connection and a stalled one holds up only its
//! own leases.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Value;

use super::super::slots::key_slot;
use super::super::source::Source;
use super::super::{Call, Node, Timeouts};

/// The masters as renewal sees them: which master serves each slot
/// (`CLUSTER SLOTS`), and a node (spare connections, like a Redlock
/// master's) for each.
pub(super) struct Masters {
    /// The seeds; the first one's connection settings (credentials, TLS)
    /// serve every master, with the master's own address.
    pub(super) seeds: Vec<redis::Client>,
    pub(super) timeouts: Timeouts,
    /// The client's pool size, for each master's node.
    pub(super) pool_size: u32,
    pub(super) state: Mutex<SlotMap>,
    /// Slots seen moving lately (see `settling`).
    pub(super) settling: super::settling::Settling,
}

#[derive(Default)]
pub(super) struct SlotMap {
    /// `(first slot, last slot, master address)`, sorted.
    pub(super) ranges: Vec<(u16, u16, Arc<str>)>,
    pub(super) nodes: HashMap<Arc<str>, Arc<Node>>,
    /// When the map was last read: a read after a failure waits a while
    /// (a dead master fails every batch until the cluster moves its slots).
    pub(super) read_at: Option<Instant>,
    /// The map may be stale (a `MOVED` reply, a master that failed).
    pub(super) stale: bool,
    /// The masters that answered the last batch: asked first when the map
    /// is read again, since a stalled one would cost a response timeout.
    pub(super) answered: Vec<Arc<Node>>,
    /// Masters that failed a call since: asked last (after the seeds).
    pub(super) suspects: Vec<Arc<Node>>,
}

/// How often the slot map may be read again after failures.
pub(super) const REREAD_AFTER: Duration = Duration::from_secs(1);

impl SlotMap {
    /// The master serving `key`'s slot, as the map says.
    pub(super) fn master_of(&self, key: &[u8]) -> Option<&Arc<Node>> {
        self.nodes.get(self.addr_of(key)?)
    }

    /// The address of the master serving `key`'s slot, as the map says.
    pub(super) fn addr_of(&self, key: &[u8]) -> Option<&Arc<str>> {
        let slot = key_slot(key);
        let at = self.ranges.partition_point(|(_, last, _)| *last < slot);
        let (first, _, addr) = self.ranges.get(at)?;
        (*first <= slot).then_some(addr)
    }
}

impl Masters {
    /// The slot map, read first if it is missing or stale (at most once
    /// per [`REREAD_AFTER`]).
    pub(super) fn current(&self) -> std::sync::MutexGuard<'_, SlotMap> {
        let mut state = crate::util::mutex::lock(&self.state);
        let due = state.read_at.is_none_or(|t| t.elapsed() >= REREAD_AFTER);
        if (state.ranges.is_empty() || state.stale) && due {
            self.read(&mut state);
        }
        state
    }

    /// The master serving `key`'s slot, if the map is known and fresh.
    pub(super) fn master_of(&self, key: &[u8]) -> Option<Arc<Node>> {
        let state = self.current();
        if state.stale {
            return None;
        }
        state.master_of(key).cloned()
    }

    /// The master serving `key`'s slot as the map last said, stale or not
    /// (read first if due): a grant needs our own connection to some
    /// master, so that its undo can follow a late reply, and a stale map's
    /// master is the best guess. One that no longer serves the slot says
    /// `MOVED` (nothing ran); one that failed is skipped by its breaker.
    pub(super) fn last_known(&self, key: &[u8]) -> Option<Arc<Node>> {
        self.current().master_of(key).cloned()
    }

    /// The master serving each call's slot, with the indexes of its calls;
    /// the calls no known master serves are left out (undecided).
    pub(super) fn route(&self, calls: &[Call<'_>]) -> Vec<(Arc<Node>, Vec<usize>)> {
        let state = self.current();
        let mut groups: Vec<(Arc<Node>, Vec<usize>)> = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let Some(node) = call.keys.first().and_then(|key| state.master_of(key)) else {
                continue;
            };
            match groups.iter_mut().find(|(n, _)| Arc::ptr_eq(n, node)) {
                Some((_, idx)) => idx.push(i),
                None => groups.push((node.clone(), vec![i])),
            }
        }
        groups
    }

    /// Reads `CLUSTER SLOTS` from the first known master, or else seed,
    /// that answers.
    pub(super) fn read(&self, state: &mut SlotMap) {
        state.read_at = Some(Instant::now());
        let seeds = self.seeds.iter().map(|seed| {
            let source = Source::Url(seed.clone());
            Arc::new(Node::with_source(source, 1, self.timeouts.clone(), false))
        });
        let suspects = std::mem::take(&mut state.suspects);
        let suspect = |n: &Arc<Node>| suspects.iter().any(|s| Arc::ptr_eq(s, n));
        let mut known: Vec<Arc<Node>> = std::mem::take(&mut state.answered);
        known.retain(|n| !suspect(n));
        for node in state.nodes.values() {
            if !suspect(node) && !known.iter().any(|k| Arc::ptr_eq(k, node)) {
                known.push(node.clone());
            }
        }
        for node in known.into_iter().chain(seeds).chain(suspects.clone()) {
            // Each node within a response timeout: a stopped one must not
            // hold up everyone waiting for the map.
            let asked =
                node.query::<Value>(redis::cmd("CLUSTER").arg("SLOTS"), Some(Instant::now()));
            let Ok(reply) = asked else {
                continue;
            };
            let Some(ranges) = parse_slots(reply, &node.addr()) else {
                continue;
            };
            let mut nodes = HashMap::new();
            for (_, _, addr) in &ranges {
                let node = state
                    .nodes
                    .get(addr)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(self.node_at(addr)));
                nodes.insert(addr.clone(), node);
            }
            self.settling.saw_map(&state.ranges, &ranges);
            state.ranges = ranges;
            state.nodes = nodes;
            state.stale = false;
            return;
        }
        // Nobody answered: still suspects next time.
        state.suspects = suspects;
    }

    /// Our node for the master at `addr` (`host:port`), as a redirection
    /// from `asked` names it (`:port` where the nodes name no host: see
    /// [`or_asked_host`]): the map's own, or a new one kept in the map
    /// until it is read again.
    pub(super) fn node_for(&self, addr: &str, asked: &Node) -> Arc<Node> {
        let addr = match addr.rsplit_once(':') {
            Some((host, port)) => format!("{}:{port}", or_asked_host(host, &asked.addr())),
            None => addr.to_owned(),
        };
        let addr = addr.as_str();
        let mut state = crate::util::mutex::lock(&self.state);
        if let Some(node) = state.nodes.get(addr) {
            return node.clone();
        }
        let node = Arc::new(self.node_at(addr));
        state.nodes.insert(Arc::from(addr), node.clone());
        node
    }

    /// A node for `addr` (`host:port`) with the seed's settings.
    pub(super) fn node_at(&self, addr: &str) -> Node {
        // Skipped for a while once it failed (breaker), like a Redlock
        // master: a stalled master costs one timeout per window.
        // The pool size bounds the waiters blocked on this master too
        // (its pool opens connections only as they are needed).
        let source = Source::Url(self.client_at(addr));
        Node::with_source(source, self.pool_size, self.timeouts.clone(), true)
    }

    /// A client for `addr` (`host:port`) with the seed's settings.
    pub(super) fn client_at(&self, addr: &str) -> redis::Client {
        let info = self.seeds[0].get_connection_info().clone();
        let (host, port) = match addr.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().unwrap_or(0)),
            None => (addr.to_string(), 0),
        };
        let addr = match info.addr().clone() {
            redis::ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => redis::ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            },
            _ => redis::ConnectionAddr::Tcp(host, port),
        };
        // Cannot fail (the seed's own settings); a node that never
        // connects makes its calls undecided.
        redis::Client::open(info.set_addr(addr)).unwrap_or_else(|_| self.seeds[0].clone())
    }

    /// The address of the master serving `key`'s slot, if the map is known
    /// and fresh.
    pub(super) fn addr_of(&self, key: &[u8]) -> Option<Arc<str>> {
        let state = self.current();
        if state.stale {
            return None;
        }
        state.addr_of(key).cloned()
    }

    /// Reads the map now.
    pub(super) fn refresh(&self) {
        let mut state = crate::util::mutex::lock(&self.state);
        self.read(&mut state);
    }

    /// `node` failed a call: the map is to be read again, asking it last.
    pub(super) fn suspect(&self, node: &Arc<Node>) {
        let mut state = crate::util::mutex::lock(&self.state);
        state.stale = true;
        if !state.suspects.iter().any(|s| Arc::ptr_eq(s, node)) {
            state.suspects.push(node.clone());
        }
    }

    /// The map is to be read again (at most once per [`REREAD_AFTER`]),
    /// asking first the masters that just `answered`.
    pub(super) fn mark_stale(&self, answered: Vec<Arc<Node>>) {
        let mut state = crate::util::mutex::lock(&self.state);
        state.stale = true;
        state.answered = answered;
    }
}

/// `CLUSTER SLOTS` as sorted `(first, last, "host:port")` master ranges.
/// The host of `asked` (`host:port`, the node that answered) where a node
/// names none (`cluster-preferred-endpoint-type unknown-endpoint`: "the
/// host you asked"), else `host` itself.
pub(super) fn or_asked_host<'a>(host: &'a str, asked: &'a str) -> &'a str {
    if host.is_empty() {
        asked.rsplit_once(':').map_or(asked, |(h, _)| h)
    } else {
        host
    }
}

/// `asked`: the address of the node that answered (`host:port`), whose
/// host stands for an empty or missing one (see [`or_asked_host`]).
pub(super) fn parse_slots(reply: Value, asked: &str) -> Option<Vec<(u16, u16, Arc<str>)>> {
    let Value::Array(entries) = reply else {
        return None;
    };
    let mut ranges = Vec::new();
    for entry in entries {
        let Value::Array(fields) = entry else {
            return None;
        };
        let [Value::Int(first), Value::Int(last), Value::Array(master), ..] = fields.as_slice()
        else {
            return None;
        };
        // An empty or missing (`nil`: `cluster-preferred-endpoint-type
        // unknown-endpoint`) host means "the host you asked"; `?`, a host
        // the node does not know, makes the map unusable. A map refused
        // here left grants without a master (see `ClusterLeader::grant`).
        let host = match master.first()? {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(s) => s.clone(),
            Value::Nil => String::new(),
            _ => return None,
        };
        let host = or_asked_host(&host, asked).to_owned();
        let Value::Int(port) = master.get(1)? else {
            return None;
        };
        if host.is_empty() || host == "?" {
            return None;
        }
        let (first, last) = (u16::try_from(*first).ok()?, u16::try_from(*last).ok()?);
        ranges.push((first, last, Arc::from(format!("{host}:{port}"))));
    }
    ranges.sort();
    Some(ranges)
}
