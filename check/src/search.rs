//! Exhaustive breadth-first search with state hashing: every state
//! reachable within the bound, each expanded once; a violation ends the
//! search with the shortest path to it.

use std::collections::HashSet;
use std::hash::Hash;
use std::time::{Duration, Instant};

use crate::server::Server;

/// A system the checker explores.
pub trait Model {
    type State: Clone + Hash + Eq;
    type Action: Clone + std::fmt::Debug;

    fn init(&self) -> Self::State;
    /// Every action enabled in `s`.
    fn actions(&self, s: &Self::State, out: &mut Vec<Self::Action>);
    /// `s` after `a`; `Err` with the property broken on the way (a
    /// liveness bound passed by a time step). `log` gets readable lines
    /// when a trace is being written.
    fn step(
        &self,
        server: &mut Server,
        s: &Self::State,
        a: &Self::Action,
        log: &mut Option<Vec<String>>,
    ) -> Result<Self::State, String>;
    /// The safety properties of one state: `Err` names the one broken.
    fn check(&self, server: &mut Server, s: &Self::State) -> Result<(), String>;
    /// One state, for traces.
    fn show(&self, s: &Self::State) -> Vec<String>;
}

/// What a search found.
pub struct Report<A> {
    pub states: u64,
    pub transitions: u64,
    pub depth: usize,
    /// The search stopped at the depth bound with states still unexpanded.
    pub bounded: bool,
    pub elapsed: Duration,
    /// The property broken and the actions from the initial state to it.
    pub violation: Option<(String, Vec<A>)>,
}

/// A set or map keyed by fingerprints, which are hashes already: hashing
/// them again (SipHash, the default) is work wasted on every state.
pub(crate) type Fingerprints = std::hash::BuildHasherDefault<Spread>;

/// The hasher of [`Fingerprints`]: a fingerprint's own low bits.
#[derive(Default)]
pub(crate) struct Spread(u64);

impl std::hash::Hasher for Spread {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u128` is expected; anything else is still hashed.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

/// A 128-bit hash of `t`: what `t.hash` writes, gathered into a buffer
/// and hashed in one pass. The same value as feeding xxh3's streaming
/// hasher the same bytes, at a fraction of the cost: a state writes
/// hundreds of small fields, and the streaming hasher's bookkeeping on
/// each was the search's largest single cost (perf: 8 %).
pub(crate) fn fingerprint<T: Hash>(t: &T) -> u128 {
    thread_local! {
        // A pool, not one buffer: hashing a state fingerprints its
        // keyspace inside it (`Keyspace`'s `Hash`).
        static BUFFERS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let mut buf = BUFFERS
        .with(|b| b.borrow_mut().pop())
        .unwrap_or_else(|| Vec::with_capacity(4096));
    t.hash(&mut Gather(&mut buf));
    let f = xxhash_rust::xxh3::xxh3_128(&buf);
    buf.clear();
    BUFFERS.with(|b| b.borrow_mut().push(buf));
    f
}

/// The [`std::hash::Hasher`] of [`fingerprint`]: the bytes written, in
/// order (the integer writes as `Hasher`'s defaults make them).
struct Gather<'a>(&'a mut Vec<u8>);

impl std::hash::Hasher for Gather<'_> {
    fn finish(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
    fn write_u8(&mut self, n: u8) {
        self.0.push(n);
    }
    fn write_u32(&mut self, n: u32) {
        self.0.extend_from_slice(&n.to_ne_bytes());
    }
    fn write_u64(&mut self, n: u64) {
        self.0.extend_from_slice(&n.to_ne_bytes());
    }
    fn write_usize(&mut self, n: usize) {
        self.0.extend_from_slice(&n.to_ne_bytes());
    }
}

/// Explores `model` breadth first up to `max_depth` steps (and at most
/// `max_states` states).
pub fn explore<M: Model>(
    model: &M,
    server: &mut Server,
    max_depth: usize,
    max_states: u64,
) -> Report<M::Action> {
    let started = Instant::now();
    let init = model.init();
    let mut seen: HashSet<u128, Fingerprints> = HashSet::default();
    seen.insert(fingerprint(&init));
    // Every state's parent and the action that made it, for traces.
    let mut parents: Vec<(u32, Option<M::Action>)> = vec![(0, None)];
    let mut level: Vec<(u32, M::State)> = vec![(0, init)];
    let mut transitions = 0u64;
    let mut depth = 0;
    let mut actions = Vec::new();
    let path = |parents: &Vec<(u32, Option<M::Action>)>, mut at: u32| {
        let mut out = Vec::new();
        while let (p, Some(a)) = &parents[at as usize] {
            out.push(a.clone());
            at = *p;
        }
        out.reverse();
        out
    };
    let report = |violation, states: usize, depth, bounded, transitions| Report {
        states: states as u64,
        transitions,
        depth,
        bounded,
        elapsed: started.elapsed(),
        violation,
    };
    if let Err(e) = model.check(server, &level[0].1) {
        return report(Some((e, Vec::new())), 1, 0, false, 0);
    }
    while !level.is_empty() {
        if depth == max_depth || parents.len() as u64 >= max_states {
            return report(None, parents.len(), depth, true, transitions);
        }
        let mut next = Vec::new();
        for (id, s) in &level {
            actions.clear();
            model.actions(s, &mut actions);
            for a in &actions {
                transitions += 1;
                let t = match model.step(server, s, a, &mut None) {
                    Ok(t) => t,
                    Err(e) => {
                        let mut p = path(&parents, *id);
                        p.push(a.clone());
                        return report(Some((e, p)), parents.len(), depth + 1, false, transitions);
                    }
                };
                if !seen.insert(fingerprint(&t)) {
                    continue;
                }
                parents.push((*id, Some(a.clone())));
                let tid = (parents.len() - 1) as u32;
                if let Err(e) = model.check(server, &t) {
                    let p = path(&parents, tid);
                    return report(Some((e, p)), parents.len(), depth + 1, false, transitions);
                }
                next.push((tid, t));
            }
        }
        level = next;
        depth += 1;
    }
    report(None, parents.len(), depth, false, transitions)
}

/// The steps of `path` replayed from the initial state, each with what it
/// did, as readable lines (a counterexample's trace).
pub fn replay<M: Model>(model: &M, server: &mut Server, path: &[M::Action]) -> Vec<String> {
    let mut out = Vec::new();
    let mut s = model.init();
    out.push("initial state:".into());
    out.extend(model.show(&s).into_iter().map(|l| format!("    {l}")));
    server.trace(true);
    for (i, a) in path.iter().enumerate() {
        out.push(format!("step {}: {:?}", i + 1, a));
        let mut log = Some(Vec::new());
        match model.step(server, &s, a, &mut log) {
            Ok(t) => {
                out.extend(
                    log.unwrap_or_default()
                        .into_iter()
                        .map(|l| format!("    {l}")),
                );
                out.push("  state after:".into());
                out.extend(model.show(&t).into_iter().map(|l| format!("    {l}")));
                s = t;
            }
            Err(e) => {
                out.extend(
                    log.unwrap_or_default()
                        .into_iter()
                        .map(|l| format!("    {l}")),
                );
                out.push(format!("  VIOLATION: {e}"));
                break;
            }
        }
    }
    if let Err(e) = model.check(server, &s) {
        out.push(format!("VIOLATION: {e}"));
    }
    server.trace(false);
    out
}
