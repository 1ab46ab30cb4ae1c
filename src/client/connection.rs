//! A connection of the client's pool, lent to the application for its own
//! commands ([`Client::connection`]), and the closures that do Redis work
//! under a lock with it ([`Lock::with_connection`]).

use crate::backend::Manager;
use crate::{Client, Error, Lock, Result};

/// A connection from the client's pool (same server, TLS, user and
/// timeouts as the library's own calls), for the application's commands.
/// Use it with redis-rs as any connection (`redis::cmd(..).query(&mut con)`,
/// `redis::Commands`); it goes back to the pool when dropped.
///
/// Leave it as you found it: no `SUBSCRIBE`, `MONITOR`, `SELECT`, `CLIENT
/// REPLY OFF`, and no `MULTI` left open — the next caller, perhaps the
/// library itself, gets it next. A connection whose command failed on the
/// network is discarded, not reused.
#[must_use = "a lent connection goes back to the pool when dropped"]
pub struct Connection(r2d2::PooledConnection<Manager>);

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Connection")
    }
}

impl redis::ConnectionLike for Connection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        self.0.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.0.check_connection()
    }

    fn is_open(&self) -> bool {
        self.0.is_open()
    }
}

impl Client {
    /// A connection from this client's pool, for your own commands: no
    /// second pool to size, no second set of credentials and TLS settings.
    /// One server or Sentinel only (`Unsupported` on Cluster and Redlock,
    /// where a command's server depends on its keys).
    ///
    /// ```no_run
    /// use redlease::redis::Commands;
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let mut con = client.connection()?;
    /// let _: () = con.set("greeting", "hello").map_err(redlease::Error::from)?;
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn connection(&self) -> Result<Connection> {
        Ok(Connection(self.backend().lend()?))
    }

    /// [`Lock::with_result`] on the lock `name`.
    pub fn with_lock_result<T, E: From<Error>>(
        &self,
        name: impl AsRef<[u8]>,
        f: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        self.lock(name).with_result(f)
    }
}

impl Lock {
    /// Runs a fallible `f` while holding the lock (waiting as long as
    /// needed), with one error type: `f`'s own, into which the library's
    /// converts (`E: From<redlease::Error>`). No `Result<Result<T, E>,
    /// Error>` to unpick.
    ///
    /// `f`'s error is returned as it came, the lock released. If `f`
    /// succeeded but the lease was lost meanwhile, the result is the
    /// `LockLost` error (converted): another holder may have run
    /// concurrently for part of `f`.
    ///
    /// ```no_run
    /// #[derive(Debug)]
    /// enum JobError { Lock(redlease::Error), Io(std::io::Error) }
    /// impl From<redlease::Error> for JobError {
    ///     fn from(e: redlease::Error) -> Self { JobError::Lock(e) }
    /// }
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let text: Result<String, JobError> = client
    ///     .lock("report")
    ///     .with_result(|| std::fs::read_to_string("report.txt").map_err(JobError::Io));
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn with_result<T, E: From<Error>>(
        &self,
        f: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let guard = self.acquire()?;
        let value = f();
        let released = guard.release();
        let value = value?;
        released?;
        Ok(value)
    }

    /// Runs a fallible `f` while holding the lock, with a connection from
    /// the client's pool and the hold's fencing token: the Redis work the
    /// lock guards, and the fence to pass with the write (see
    /// `examples/fenced_write.rs`). Errors as [`Lock::with_result`].
    ///
    /// ```no_run
    /// use redlease::redis::Commands;
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let total: i64 = client.lock("account:7").with_connection(|con, fence| {
    ///     let _: () = con.set("account:7:fence", fence)?;
    ///     let total: i64 = con.incr("account:7:balance", 10)?;
    ///     Ok::<_, redlease::Error>(total)
    /// })?;
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn with_connection<T, E: From<Error>>(
        &self,
        f: impl FnOnce(&mut Connection, u64) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let guard = self.acquire()?;
        let value = match self.client().backend().lend().map(Connection) {
            Ok(mut con) => f(&mut con, guard.fencing_token()),
            Err(e) => Err(E::from(e)),
        };
        let released = guard.release();
        let value = value?;
        released?;
        Ok(value)
    }
}
