//! What the models read off a server to judge their properties, shared
//! by every model: the clocks, tries that must succeed once a name is
//! quiet, the keys that must lapse, the fence a holder key names.

use redlease::__protocol as p;

use crate::keyspace::{Keyspace, Reply};
use crate::parties::{int, ms};
use crate::primitive::Script;
use crate::server::Server;

/// The server's clock, ahead of the clients' by this (milliseconds).
pub const SERVER_OFFSET: i64 = 1_000_000_000;

/// `try_*` every 100 ms from `from` (server ms) for the claim + 1 s:
/// whether it was granted, and the last reply.
pub fn tries_succeed(
    server: &mut Server,
    keys: &Keyspace,
    from: i64,
    run: &Script,
) -> Result<(), Reply> {
    tries_succeed_within(server, keys, from, run, p::GRANT_CLAIM)
}

/// [`tries_succeed`] where hand-overs are given `claim`.
pub fn tries_succeed_within(
    server: &mut Server,
    keys: &Keyspace,
    from: i64,
    run: &Script,
    claim: std::time::Duration,
) -> Result<(), Reply> {
    let mut probe = keys.clone();
    let mut reply = Reply::Nil;
    for k in 0..=((ms(claim) + 1000) / 100) {
        probe.now_us = probe.now_us.max((from + 100 * k) * 1000);
        reply = server
            .eval(&mut probe, run.file, &run.keys, &run.args)
            .reply;
        if int(&reply).is_some() {
            return Ok(());
        }
    }
    Err(reply)
}

/// The keys left an hour later, but those named in `kept`.
pub fn lapsed(keys: &Keyspace, kept: &[&[u8]]) -> Result<(), String> {
    let mut later = keys.clone();
    later.now_us += 3_600_000_000;
    later.expire();
    let left: Vec<String> = later
        .keys
        .keys()
        .filter(|k| !kept.contains(&k.as_slice()))
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!("keys of an unused name never lapse: {left:?}"))
    }
}

/// The fence a holder key (`<token>#<fence>`) names.
pub fn fence_of(keys: &Keyspace, key: &[u8]) -> Option<i64> {
    let Some(crate::keyspace::Value::Str(v)) = keys.keys.get(key).map(|e| &e.value) else {
        return None;
    };
    let at = v.iter().rposition(|&c| c == b'#')?;
    String::from_utf8_lossy(&v[at + 1..]).parse().ok()
}
