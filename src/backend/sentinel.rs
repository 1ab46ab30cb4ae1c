//! Finding the master a set of Sentinels names, on redlease's own
//! connections: every exchange with a Sentinel (and the check that the
//! server it names is a master) is bounded whole by the response timeout
//! and by the reply size cap, whatever a Sentinel sends (redis-rs's
//! Sentinel client timed each read, not the reply, and capped nothing).

use std::sync::atomic::{AtomicUsize, Ordering};

use redis::{ConnectionAddr, RedisError, RedisResult, Value};

use super::wire::Wire;
use super::Timeouts;

/// The Sentinels of one master, and how to reach the master they name.
pub(crate) struct Sentinels {
    sentinels: Vec<redis::Client>,
    master: String,
    /// The master's credentials and database (not the Sentinels').
    settings: redis::RedisConnectionInfo,
    /// Sentinels over TLS name masters that speak TLS: the master (and its
    /// password) is never reached in clear text.
    secure: bool,
    timeouts: Timeouts,
    /// The Sentinel that answered last, asked first next time.
    first: AtomicUsize,
}

impl Sentinels {
    pub(crate) fn new(
        sentinels: Vec<redis::ConnectionInfo>,
        master: &str,
        settings: redis::RedisConnectionInfo,
        secure: bool,
        timeouts: Timeouts,
    ) -> RedisResult<Sentinels> {
        Ok(Sentinels {
            sentinels: sentinels
                .into_iter()
                .map(redis::Client::open)
                .collect::<RedisResult<_>>()?,
            master: master.to_owned(),
            settings,
            secure,
            timeouts,
            first: AtomicUsize::new(0),
        })
    }

    /// A client for the master the Sentinels name now: the first Sentinel
    /// that answers with a server that says it is a master (one that lags
    /// behind a failover may still name the old one, a replica now).
    pub(crate) fn master(&self) -> RedisResult<redis::Client> {
        let n = self.sentinels.len();
        let start = self.first.load(Ordering::Relaxed);
        let mut last = None;
        for k in 0..n {
            let i = (start + k) % n;
            match self.ask(&self.sentinels[i]) {
                Ok(master) => {
                    self.first.store(i, Ordering::Relaxed);
                    return Ok(master);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last
            .unwrap_or_else(|| RedisError::from((redis::ErrorKind::Client, "no Sentinel to ask"))))
    }

    fn ask(&self, sentinel: &redis::Client) -> RedisResult<redis::Client> {
        let named = self.call(
            sentinel,
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&self.master),
        )?;
        let (host, port) = match named {
            Value::Array(parts) => match <[Value; 2]>::try_from(parts) {
                Ok([Value::BulkString(host), Value::BulkString(port)]) => (
                    String::from_utf8(host).ok(),
                    std::str::from_utf8(&port)
                        .ok()
                        .and_then(|p| p.parse::<u16>().ok()),
                ),
                _ => (None, None),
            },
            Value::Nil => {
                return Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "the Sentinel does not know this master",
                    self.master.clone(),
                )))
            }
            _ => (None, None),
        };
        let (Some(host), Some(port)) = (host, port) else {
            return Err(RedisError::from((
                redis::ErrorKind::Parse,
                "the Sentinel's answer is not an address",
            )));
        };
        let addr = if self.secure {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host, port)
        };
        let info = redis::IntoConnectionInfo::into_connection_info(addr)?
            .set_redis_settings(self.settings.clone());
        let master = redis::Client::open(info)?;
        match self.call(&master, &redis::cmd("ROLE"))? {
            Value::Array(role) if matches!(role.first(), Some(Value::BulkString(r)) if r == b"master") => {
                Ok(master)
            }
            _ => Err(RedisError::from((
                redis::ErrorKind::Client,
                "the server the Sentinel names is not a master (yet)",
            ))),
        }
    }

    /// One command on a connection of our own to `to`, within the connect
    /// timeout (connecting) and the response timeout (the whole reply).
    fn call(&self, to: &redis::Client, cmd: &redis::Cmd) -> RedisResult<Value> {
        let t = &self.timeouts;
        let mut wire = Wire::open(to, &t.tls, t.connect, t.response)?;
        wire.send_packed_command(&cmd.get_packed_command())?;
        match wire.recv_response()? {
            Value::ServerError(e) => Err(e.into()),
            v => Ok(v),
        }
    }
}
