//! Where commands go: a pool of connections to one Redis server.
//!
//! The backend speaks scripts, keys and arguments only; it knows nothing of
//! locks, so every primitive (and the renewal thread) reaches Redis through
//! the same few calls.

use std::time::Duration;

use redis::{FromRedisValue, Value};

use crate::error::{Error, Result};
use crate::scripts::Lua;

/// Connection settings shared by pooled and dedicated connections.
#[derive(Clone, Debug)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) response: Duration,
    pub(crate) pool: Duration,
}

/// Opens connections with timeouts, so that no command can hang forever.
pub(crate) struct Manager {
    client: redis::Client,
    timeouts: Timeouts,
}

impl r2d2::ManageConnection for Manager {
    type Connection = redis::Connection;
    type Error = redis::RedisError;

    fn connect(&self) -> Result<redis::Connection, redis::RedisError> {
        let con = self
            .client
            .get_connection_with_timeout(self.timeouts.connect)?;
        con.set_read_timeout(Some(self.timeouts.response))?;
        con.set_write_timeout(Some(self.timeouts.response))?;
        Ok(con)
    }

    fn is_valid(&self, con: &mut redis::Connection) -> Result<(), redis::RedisError> {
        redis::cmd("PING").query::<()>(con)
    }

    fn has_broken(&self, con: &mut redis::Connection) -> bool {
        !redis::ConnectionLike::is_open(con)
    }
}

/// A pooled standalone (or sentinel-resolved) Redis server.
pub(crate) struct Backend {
    pool: r2d2::Pool<Manager>,
    client: redis::Client,
    timeouts: Timeouts,
}

/// One script call of a batch: the script, its keys and its arguments.
pub(crate) struct Call<'a> {
    pub(crate) lua: &'static Lua,
    pub(crate) keys: &'a [Vec<u8>],
    pub(crate) args: &'a [Vec<u8>],
}

impl Backend {
    pub(crate) fn open(url: &str, pool_size: u32, timeouts: Timeouts) -> Result<Backend> {
        let client = redis::Client::open(url)
            .map_err(|e| Error::invalid(format!("cannot use redis URL {url:?}")).with_source(e))?;
        let manager = Manager {
            client: client.clone(),
            timeouts: timeouts.clone(),
        };
        // No test on checkout: a PING per checkout would double the round
        // trips of every acquire. Broken connections are noticed by
        // `has_broken` and replaced.
        let pool = r2d2::Pool::builder()
            .max_size(pool_size)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(timeouts.pool)
            .build_unchecked(manager);
        Ok(Backend {
            pool,
            client,
            timeouts,
        })
    }

    /// A pooled connection; returned to the pool when dropped.
    pub(crate) fn conn(&self) -> Result<r2d2::PooledConnection<Manager>> {
        Ok(self.pool.get()?)
    }

    /// Runs one script (EVALSHA, loading it on NOSCRIPT).
    pub(crate) fn eval<T: FromRedisValue>(
        &self,
        lua: &Lua,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<T> {
        let mut con = self.conn()?;
        let mut inv = lua.script.prepare_invoke();
        for k in keys {
            inv.key(*k);
        }
        for a in args {
            inv.arg(*a);
        }
        Ok(inv.invoke(&mut *con)?)
    }

    /// Runs one plain command.
    pub(crate) fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut con = self.conn()?;
        Ok(cmd.query(&mut *con)?)
    }

    /// Runs many script calls in one pipeline (one round trip), loading the
    /// scripts first so that a flushed script cache cannot fail the batch.
    pub(crate) fn eval_batch(&self, calls: &[Call<'_>]) -> Result<Vec<Value>> {
        let mut pipe = redis::pipe();
        let mut loaded: Vec<&str> = Vec::new();
        for call in calls {
            let hash = call.lua.script.get_hash();
            if !loaded.contains(&hash) {
                loaded.push(hash);
                pipe.cmd("SCRIPT").arg("LOAD").arg(call.lua.code).ignore();
            }
        }
        for call in calls {
            let cmd = pipe
                .cmd("EVALSHA")
                .arg(call.lua.script.get_hash())
                .arg(call.keys.len());
            for k in call.keys {
                cmd.arg(k.as_slice());
            }
            for a in call.args {
                cmd.arg(a.as_slice());
            }
        }
        // Renewal serves every backend of the process from one thread: a
        // server that is down must cost it one short wait, not the pool's.
        let mut con = self
            .pool
            .get_timeout(self.timeouts.connect.min(self.timeouts.pool))?;
        Ok(pipe.query(&mut *con)?)
    }

    /// A dedicated connection outside the pool (for the wake-up subscriber).
    pub(crate) fn dedicated(&self) -> Result<redis::Connection> {
        Ok(self
            .client
            .get_connection_with_timeout(self.timeouts.connect)?)
    }

    pub(crate) fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }
}
