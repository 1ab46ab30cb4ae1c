//! The key schema: every key a name owns, by its suffix, in one place.
//! A name's keys are `<prefix>{<name>}<suffix>` (`Client::names`), so all
//! of them share the name's Cluster slot. Scripts derive a few more from
//! these (a lock's note is its key and `:note`, a grant prefix is followed
//! by `open`, `offer`, `told` or a waiter's token): see each `lua/` file.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// Longest accepted primitive name, in bytes.
pub const MAX_NAME_LEN: usize = 8 * 1024;

/// A server's fence floor (one per server; on Cluster one per slot), after
/// the client's prefix: the least any fencing counter starts from once it
/// lapsed (lua/fence.lua, `backend::fence_floor`).
pub const FENCE_FLOOR: &str = "redlease:fence-floor";

/// The channel release messages go to, after the client's prefix (a
/// client's own namings go to it followed by `:<client id>`).
pub const WAKE_CHANNEL: &str = "redlease:wake";

/// An owner token: `rl:<client id>:<unique>`. The scripts know a holder
/// of ours by its `rl:` (lua/lock_acquire.lua) and a waiter's client by
/// what stands between the colons (lua/publish.lua names its watchers
/// by it), so neither part may hold a `:` or a `#`.
pub fn owner_token(client: impl fmt::Display, unique: impl fmt::Display) -> String {
    format!("rl:{client}:{unique}")
}

/// A lock: `"<token>#<fence>"` while held (lua/lock_acquire.lua).
pub(crate) const LOCK: &str = "";
/// The fencing counter of a name's lock and write hold (lua/fence.lua).
pub(crate) const FENCE: &str = ":fence";
/// What a lock's holder said about itself (lua/lock_note.lua).
pub(crate) const NOTE: &str = ":note";
/// A lock's waiters, in arrival order, and their deadlines (lua/queue.lua).
pub(crate) const QUEUE: &str = ":queue";
pub(crate) const QUEUE_DEADLINES: &str = ":queue:t";
/// What a lock's grants are named after (lua/queue.lua).
pub(crate) const GRANT: &str = ":grant:";

/// A read-write lock's writer, readers, waiting writers (and their
/// deadlines), waiting readers, and grant prefix (lua/rw_grant.lua).
pub(crate) const RW_WRITER: &str = ":rw:w";
pub(crate) const RW_READERS: &str = ":rw:r";
pub(crate) const RW_WRITER_QUEUE: &str = ":rw:wq";
pub(crate) const RW_WRITER_DEADLINES: &str = ":rw:wq:t";
pub(crate) const RW_WAITING_READERS: &str = ":rw:rq";
pub(crate) const RW_GRANT: &str = ":rw:grant:";

/// A semaphore's permits, count, fair queue, waiters' deadlines and grant
/// prefix (lua/sem_acquire.lua, lua/sem_grant.lua).
pub(crate) const SEM: &str = ":sem";
pub(crate) const SEM_COUNT: &str = ":sem:n";
pub(crate) const SEM_QUEUE: &str = ":sem:queue";
pub(crate) const SEM_QUEUE_DEADLINES: &str = ":sem:queue:t";
pub(crate) const SEM_GRANT: &str = ":sem:grant:";

/// A count-down latch (lua/latch_set.lua).
pub(crate) const LATCH: &str = ":latch";

/// The keys by which `Client::list` knows a name is in use: a lock, a
/// write hold, read holds, permits.
pub(crate) const IN_USE: [&str; 4] = [LOCK, RW_WRITER, RW_READERS, SEM];

/// The open list under a grant prefix: where a release puts what it hands
/// on, and where waiters block (lua/queue.lua, sem_grant.lua, rw_grant.lua).
pub(crate) fn open_list(grant_prefix: &[u8]) -> Vec<u8> {
    [grant_prefix, b"open"].concat()
}

/// A fair lock's waiters that keep their turn waiting for messages, under
/// a grant prefix (lua/queue.lua `offer`).
pub(crate) fn turns(grant_prefix: &[u8]) -> Vec<u8> {
    [grant_prefix, b"turns"].concat()
}

/// The keys of one named primitive. All share the hash tag `{name}` so that
/// one script may touch them all, also on Redis Cluster.
#[derive(Clone, Debug)]
pub(crate) struct Names {
    base: Vec<u8>,
    name: Arc<[u8]>,
}

impl Names {
    pub(crate) fn new(prefix: &[u8], name: &[u8]) -> Result<Names> {
        if name.is_empty() {
            return Err(Error::invalid("a name must not be empty"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(Error::invalid(format!(
                "a name must be at most {MAX_NAME_LEN} bytes, got {}",
                name.len()
            )));
        }
        let mut base = Vec::with_capacity(prefix.len() + name.len() + 2);
        base.extend_from_slice(prefix);
        base.push(b'{');
        base.extend_from_slice(&escape_name(name));
        base.push(b'}');
        Ok(Names {
            base,
            name: name.into(),
        })
    }

    /// The name as the user gave it.
    pub(crate) fn name(&self) -> &Arc<[u8]> {
        &self.name
    }

    /// `<prefix>{name}` followed by `suffix`.
    pub(crate) fn key(&self, suffix: &str) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.base.len() + suffix.len());
        k.extend_from_slice(&self.base);
        k.extend_from_slice(suffix.as_bytes());
        k
    }
}

/// The name inside a key's hash tag, as the user gave it: what
/// [`escape_name`] made of it, undone.
pub(crate) fn unescape_name(escaped: &[u8]) -> Vec<u8> {
    let mut name = Vec::with_capacity(escaped.len());
    let mut i = 0;
    while i < escaped.len() {
        match &escaped[i..] {
            [b'%', b'7', b'B', ..] => {
                name.push(b'{');
                i += 3;
            }
            [b'%', b'7', b'D', ..] => {
                name.push(b'}');
                i += 3;
            }
            [b'%', b'2', b'5', ..] => {
                name.push(b'%');
                i += 3;
            }
            [b, ..] => {
                name.push(*b);
                i += 1;
            }
            [] => break,
        }
    }
    name
}

/// The user's name of a primitive from one of its keys
/// (`<prefix>{<escaped name>}<suffix>`); the key itself if it has no tag.
pub(crate) fn name_of_key(key: &[u8]) -> Vec<u8> {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .map(|close| &rest[..close])
    });
    match tagged {
        Some(escaped) => unescape_name(escaped),
        None => key.to_vec(),
    }
}

/// Braces inside the hash tag would end it early (or make it empty, which
/// disables hash tags), so they and the escape byte itself are %-encoded.
pub(crate) fn escape_name(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len());
    for &b in name {
        match b {
            b'{' => out.extend_from_slice(b"%7B"),
            b'}' => out.extend_from_slice(b"%7D"),
            b'%' => out.extend_from_slice(b"%25"),
            _ => out.push(b),
        }
    }
    out
}
