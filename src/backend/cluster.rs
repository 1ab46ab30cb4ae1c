//! Redis Cluster: commands are routed by key slot (MOVED/ASK handled by the
//! `redis` cluster connection). Every key of one primitive shares the hash
//! tag `{name}`, so each script touches one slot and never sees CROSSSLOT.

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection};
use redis::{FromRedisValue, Value};

use super::single::{client_for, pool, warn_if_evicting};
use super::{Call, Timeouts};
use crate::error::{Error, Result};
use crate::scripts::Lua;

/// A pooled cluster connection, plus plain clients for the seed nodes (the
/// wake-up subscriber connects to one of them: `PUBLISH` reaches every node
/// of a cluster).
pub(crate) struct ClusterLeader {
    pool: r2d2::Pool<ClusterClient>,
    seeds: Vec<redis::Client>,
    response: Duration,
}

impl ClusterLeader {
    pub(crate) fn open(
        urls: &[String],
        pool_size: u32,
        timeouts: Timeouts,
    ) -> Result<ClusterLeader> {
        if urls.is_empty() {
            return Err(Error::invalid("a cluster needs at least one seed URL"));
        }
        let seeds = urls
            .iter()
            .map(|u| client_for(u, &timeouts))
            .collect::<Result<Vec<_>>>()?;
        let client = ClusterClientBuilder::new(urls.iter().map(|u| u.as_str()))
            .connection_timeout(timeouts.connect)
            .response_timeout(timeouts.response)
            .build()
            .map_err(|e| Error::invalid("invalid cluster configuration").with_source(e))?;
        let pool = pool(client, pool_size, &timeouts);
        Ok(ClusterLeader {
            pool,
            seeds,
            response: timeouts.response,
        })
    }

    /// A pooled cluster connection, or a *not sent* error.
    fn conn(&self) -> Result<r2d2::PooledConnection<ClusterClient>> {
        self.pool.get().map_err(|e| Error::from(e).unsent())
    }

    /// Runs one script once (the cluster connection routes it by slot).
    pub(crate) fn call<T: FromRedisValue>(
        &self,
        call: &Call<'_>,
        _deadline: Option<std::time::Instant>,
    ) -> Result<T> {
        let mut con = self.conn()?;
        Ok(call
            .lua
            .call(call.keys, call.args)
            .invoke(&mut *con as &mut ClusterConnection)?)
    }

    pub(crate) fn check(&self) -> Result<()> {
        let mut con = self.conn()?;
        redis::cmd("PING").query::<()>(&mut *con)?;
        for seed in &self.seeds {
            if let Ok(mut c) = seed.get_connection_with_timeout(Duration::from_secs(1)) {
                warn_if_evicting(&mut c);
            }
        }
        Ok(())
    }

    pub(crate) fn eval<T: FromRedisValue>(
        &self,
        lua: &Lua,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<T> {
        // The cluster connection itself reconnects and retries moved or
        // dropped calls; these scripts are harmless to repeat.
        let mut con = self.conn()?;
        Ok(lua
            .call(keys, args)
            .invoke(&mut *con as &mut ClusterConnection)?)
    }

    pub(crate) fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut con = self.conn()?;
        Ok(cmd.query(&mut *con)?)
    }

    /// A cluster pipeline groups the calls per node. `EVALSHA` cannot be
    /// routed in one (nor `SCRIPT LOAD` sent to every node), so renewals go
    /// as `EVAL` with the script text: a few hundred bytes more per lease,
    /// and no `NOSCRIPT` after a restart or `SCRIPT FLUSH`. The extend
    /// scripts catch their own write errors (`redis.pcall`), so one bad
    /// entry does not fail the pipeline here either.
    ///
    /// Each read waits at most `limit` (the earliest lease in the batch):
    /// a late answer is no use after that.
    pub(crate) fn eval_batch(&self, calls: &[Call<'_>], limit: Duration) -> Result<Vec<Value>> {
        let mut pipe = redis::cluster::cluster_pipe();
        for call in calls {
            pipe.add_command(call.command(true));
        }
        let mut con = self.conn()?;
        let bound = limit.clamp(Duration::from_millis(1), self.response);
        con.set_read_timeout(Some(bound))?;
        let replies = pipe.query(&mut con);
        // Pooled: back to the normal response timeout for the next user.
        let _ = con.set_read_timeout(Some(self.response));
        Ok(replies?)
    }

    pub(crate) fn dedicated(&self, timeout: Duration) -> Result<redis::Connection> {
        let mut last = None;
        for seed in &self.seeds {
            match seed.get_connection_with_timeout(timeout) {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(Error::from(e)),
            }
        }
        Err(last.unwrap_or_else(|| Error::invalid("no cluster seeds")))
    }
}
