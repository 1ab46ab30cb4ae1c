//! What a client found its servers can do, and which way its waiters wait
//! as a result ([`Client::capabilities`]).

use std::fmt;

use crate::Client;

/// How release wake-ups reach waiting clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum WakeChannel {
    /// Classic pub/sub (`PUBLISH` / `SUBSCRIBE`): one server, Sentinel,
    /// Redlock, and a Cluster before Redis 7 (where every message is
    /// broadcast to every node).
    Classic,
    /// Sharded pub/sub (`SPUBLISH` / `SSUBSCRIBE`, Redis 7 and Valkey
    /// Cluster): a message goes only to the shard of its name.
    Sharded,
}

/// What a [`Client`] decided about its servers: found when it was built
/// (and, for blocking grants, when a server first refused one). Shown in
/// one `info` log line when the client is built; `redlease doctor` checks
/// the same things, and more, from the outside.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Capabilities {
    /// `single server`, `Sentinel`, `Cluster` or `Redlock`.
    pub topology: &'static str,
    /// What the servers said they are (`Redis 7.0.15`, `Valkey 9.1.2`),
    /// each different answer once; empty if an ACL refused both `HELLO`
    /// and `INFO`.
    pub servers: Vec<String>,
    /// Whether lock waiters block on the server for a direct grant
    /// (`BLMOVE`): a release hands the lock to the longest-blocked waiter
    /// in one round trip, and an idle waiter sends nothing. When false
    /// (Redlock; `replica_ack`; an ACL without `BLMOVE`/`LPOP`), waiters
    /// wait for release messages and look again every `fallback_poll`.
    pub blocking_grants: bool,
    /// How release wake-ups travel (read-write locks, semaphores, latches,
    /// and lock waiters without blocking grants).
    pub wake_channel: WakeChannel,
    /// Replicas each grant waits for (`replica_ack`), if set.
    pub replica_ack: Option<u32>,
}

impl fmt::Display for Capabilities {
    /// One line: `single server (Redis 7.0.15): lock waiters block for
    /// direct grants; wake-ups over classic pub/sub`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.topology)?;
        if self.servers.is_empty() {
            write!(f, " (server version not visible to this user)")?;
        } else {
            write!(f, " ({})", self.servers.join(", "))?;
        }
        if self.blocking_grants {
            write!(f, ": lock waiters block for direct grants")?;
        } else {
            write!(
                f,
                ": lock waiters wait for release messages (no blocking grants here)"
            )?;
        }
        match self.wake_channel {
            WakeChannel::Classic => write!(f, "; wake-ups over classic pub/sub")?,
            WakeChannel::Sharded => write!(f, "; wake-ups over sharded pub/sub")?,
        }
        if let Some(n) = self.replica_ack {
            write!(f, "; every grant waits for {n} replica(s)")?;
        }
        Ok(())
    }
}

impl Client {
    /// What this client found its servers can do, and which way its
    /// waiters wait as a result. No I/O: these were decided when the
    /// client was built (blocking grants also turn off when a server
    /// first refuses one).
    ///
    /// ```no_run
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let caps = client.capabilities();
    /// println!("{caps}");
    /// assert!(caps.blocking_grants, "the ACL should allow BLMOVE and LPOP");
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn capabilities(&self) -> Capabilities {
        let backend = self.backend();
        Capabilities {
            topology: backend.shape(),
            servers: backend.identities(),
            blocking_grants: backend.grants_directly(),
            wake_channel: if backend.sharded() {
                WakeChannel::Sharded
            } else {
                WakeChannel::Classic
            },
            replica_ack: backend.replica_ack(),
        }
    }
}
