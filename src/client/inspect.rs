//! Read-only views of what is stored: who holds a name, and which names
//! exist. Used by the `redlease` CLI; handy for dashboards too.

use std::time::Duration;

use crate::backend::Call;
use crate::client::Client;
use crate::error::Result;
use crate::protocol::keys as schema;
use crate::protocol::keys::escape_name;
use crate::protocol::scripts::INSPECT;

/// A snapshot of everything stored under one name (lock, read-write lock and
/// semaphore of that name), taken atomically by one script.
///
/// With the `serde` feature it is `Serialize`, times as whole
/// milliseconds (`remaining_ms`, `writer_remaining_ms`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct LockInfo {
    /// Client id of the exclusive lock's holder (never the secret token).
    pub holder: Option<String>,
    /// Time left on the exclusive lock's lease.
    #[cfg_attr(feature = "serde", serde(rename = "remaining_ms", with = "millis"))]
    pub remaining: Option<Duration>,
    /// Last fencing token handed out for this name while it is active (0
    /// once nobody holds or waits for it: the counter lapses with the
    /// name, and fences restart above it from the server's clock).
    pub fence: u64,
    /// Waiters queued on the server: the lock's (plain or fair), the
    /// semaphore's and the read-write lock's writers. Readers waiting for
    /// a writer are not counted.
    pub waiters: usize,
    /// Client id of the read-write lock's writer.
    pub writer: Option<String>,
    /// Time left on the writer's lease.
    #[cfg_attr(feature = "serde", serde(with = "millis"))]
    #[cfg_attr(feature = "serde", serde(rename = "writer_remaining_ms"))]
    pub writer_remaining: Option<Duration>,
    /// Readers whose lease has not ended.
    pub readers: usize,
    /// Semaphore permits in use by holders whose lease has not ended.
    pub permits_in_use: u64,
    /// The semaphore's permit count, while permits are in use (the count
    /// its holders agreed on).
    pub permits: Option<u64>,
    /// What the exclusive lock's holder said about itself with
    /// [`LockGuard::annotate`](crate::LockGuard::annotate) (the CLI writes
    /// host, pid and since when).
    pub note: Option<String>,
}

/// A time as whole milliseconds, for `Serialize`.
#[cfg(feature = "serde")]
mod millis {
    use std::time::Duration;

    pub(super) fn serialize<S: serde::Serializer>(
        d: &Option<Duration>,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }
}

impl LockInfo {
    /// Whether anything is held under the name.
    pub fn is_held(&self) -> bool {
        self.holder.is_some()
            || self.writer.is_some()
            || self.readers > 0
            || self.permits_in_use > 0
    }
}

/// `rl:<client id>:<random>` → the client id.
fn client_of(token: &str) -> Option<String> {
    let mut parts = token.splitn(3, ':');
    match (parts.next(), parts.next()) {
        (Some("rl"), Some(id)) if !id.is_empty() => Some(id.to_owned()),
        _ => None,
    }
}

fn ms(v: i64) -> Option<Duration> {
    (v >= 0).then(|| Duration::from_millis(v as u64))
}

type Snapshot = (
    String,
    i64,
    u64,
    usize,
    String,
    i64,
    usize,
    u64,
    usize,
    String,
    u64,
    usize,
);

impl Client {
    /// What is stored under `name` right now (one round trip).
    pub fn inspect(&self, name: impl AsRef<[u8]>) -> Result<LockInfo> {
        let n = self.names(name.as_ref())?;
        let keys = [
            n.key(schema::LOCK),
            n.key(schema::FENCE),
            n.key(schema::QUEUE),
            n.key(schema::RW_WRITER),
            n.key(schema::RW_READERS),
            n.key(schema::SEM),
            n.key(schema::SEM_QUEUE_DEADLINES),
            n.key(schema::NOTE),
            n.key(schema::SEM_COUNT),
            n.key(schema::RW_WRITER_QUEUE),
        ];
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        let (
            holder,
            pttl,
            fence,
            lock_waiters,
            writer,
            wpttl,
            readers,
            used,
            sem_waiters,
            note,
            count,
            writers_waiting,
        ): Snapshot = self.backend().eval(&Call::borrowed(
            &INSPECT,
            &refs,
            &[n.key(schema::GRANT).as_slice()],
        ))?;
        let holder = client_of(&holder);
        let writer = client_of(&writer);
        Ok(LockInfo {
            remaining: holder.as_ref().and_then(|_| ms(pttl)),
            holder,
            fence,
            waiters: lock_waiters + sem_waiters + writers_waiting,
            writer_remaining: writer.as_ref().and_then(|_| ms(wpttl)),
            writer,
            readers,
            permits_in_use: used,
            permits: (count > 0).then_some(count),
            note: (!note.is_empty()).then_some(note),
        })
    }

    /// Names under this client's prefix that have a lock, read-write lock or
    /// semaphore stored, matching the glob `pattern` (`*` for all). Uses
    /// `SCAN`, never `KEYS`, so it does not block the server. Sorted;
    /// names that are not UTF-8 are shown lossily (two such names may then
    /// look alike: [`Client::list_bytes`] gives them exactly).
    ///
    /// Not available on Redis Cluster (a cursor scans one node) nor on
    /// Redlock: those return [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    pub fn list(&self, pattern: &str) -> Result<Vec<String>> {
        Ok(self
            .list_bytes(pattern)?
            .iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect())
    }

    /// [`Client::list`] with the names as the bytes they were given as (and
    /// a byte pattern): what a tool needs to act on each name it lists.
    /// Sorted, deduplicated.
    pub fn list_bytes(&self, pattern: impl AsRef<[u8]>) -> Result<Vec<Vec<u8>>> {
        let pattern = pattern.as_ref();
        if self.backend().is_cluster() {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::Unsupported,
                "listing names needs a scan of every node; not available on Redis Cluster",
            ));
        }
        let prefix = self.prefix();
        let mut glob = Vec::new();
        for &b in prefix {
            if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
                glob.push(b'\\');
            }
            glob.push(b);
        }
        glob.push(b'{');
        glob.extend_from_slice(&escape_name(pattern));
        glob.extend_from_slice(b"}*");
        let mut names = std::collections::BTreeSet::new();
        let mut cursor: u64 = 0;
        // Bounded: SCAN terminates, but a server that keeps answering
        // nonsense must not keep us here forever.
        for _ in 0..1_000_000 {
            let (next, keys): (u64, Vec<Vec<u8>>) = self.backend().query(
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&glob)
                    .arg("COUNT")
                    .arg(1000),
            )?;
            for key in keys {
                if let Some(name) = name_of(&key[prefix.len().min(key.len())..]) {
                    names.insert(name);
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        Ok(names.into_iter().collect())
    }
}

/// `{escaped}suffix` → the name, for the keys that mark a held primitive.
fn name_of(rest: &[u8]) -> Option<Vec<u8>> {
    let rest = rest.strip_prefix(b"{")?;
    let close = rest.iter().position(|&b| b == b'}')?;
    let suffix = &rest[close + 1..];
    if !schema::IN_USE.iter().any(|k| suffix == k.as_bytes()) {
        return None;
    }
    Some(crate::protocol::keys::unescape_name(&rest[..close]))
}
