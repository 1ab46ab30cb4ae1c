//! Finding the master a set of Sentinels names, on redlease's own
//! connections: every exchange with a Sentinel (and the check that the
//! server it names is a master) is bounded whole by the response timeout
//! and by the reply size cap, whatever a Sentinel sends (redis-rs's
//! Sentinel client timed each read, not the reply, and capped nothing).
//!
//! And following the Sentinels' switches as they announce them: a
//! watcher thread per Sentinel subscribes to `+switch-master` and keeps
//! [`Named`], the master this client last heard named. A connection to
//! any other server is deposed: retired at checkout, and a reply it
//! carries (a grant, a renewal) is not counted (see `pool::Con`). Why not
//! `ROLE`: a master that was stopped through its failover still says
//! `master` when it comes back, and grants and renews, until the
//! Sentinels reconfigure it (10 s and more later); only the Sentinels
//! know it was replaced.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// The master this client last heard the Sentinels name.
    named: Arc<Named>,
}

/// The master the Sentinels named last, as this client heard it (from a
/// `+switch-master` announcement, or by asking), and a count of its
/// changes, so that a connection checks cheaply whether its server may
/// have been deposed since it opened.
#[derive(Default)]
pub(crate) struct Named {
    addr: Mutex<Option<String>>,
    epoch: AtomicU64,
    /// The client is gone: the watchers stop.
    closed: AtomicBool,
    /// Connections blocked in a call now (a waiter's pop), by a number of
    /// their own, with their server: a switch shuts those to the deposed
    /// master down, so that their waiters ask the new one at once rather
    /// than wait out a block on a server that may stay stopped.
    blocked: Mutex<Vec<(u64, String, std::net::TcpStream)>>,
    next_blocked: AtomicU64,
}

/// A blocked call registered with [`Named::blocking`]; unregistered when
/// dropped.
pub(crate) struct BlockedCall {
    named: Arc<Named>,
    id: u64,
}

impl Drop for BlockedCall {
    fn drop(&mut self) {
        crate::util::mutex::lock(&self.named.blocked).retain(|(id, _, _)| *id != self.id);
    }
}

impl Named {
    /// Bumped at every change of [`Named::addr`].
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// `host:port` of the master named last, if any was heard yet.
    pub(crate) fn addr(&self) -> Option<String> {
        crate::util::mutex::lock(&self.addr).clone()
    }

    /// Registers a call about to block on `socket`, a connection to
    /// `server`, until the returned guard is dropped.
    pub(crate) fn blocking(
        self: &Arc<Named>,
        server: &str,
        socket: std::net::TcpStream,
    ) -> BlockedCall {
        let id = self.next_blocked.fetch_add(1, Ordering::Relaxed);
        crate::util::mutex::lock(&self.blocked).push((id, server.to_owned(), socket));
        BlockedCall {
            named: self.clone(),
            id,
        }
    }

    /// Notes `addr` as the named master; `true` if that is a change.
    fn set(&self, addr: &str) -> bool {
        let mut named = crate::util::mutex::lock(&self.addr);
        if named.as_deref() == Some(addr) {
            return false;
        }
        let first = named.is_none();
        *named = Some(addr.to_owned());
        self.epoch.fetch_add(1, Ordering::AcqRel);
        drop(named);
        for (_, server, socket) in crate::util::mutex::lock(&self.blocked).iter() {
            if server != addr {
                let _ = socket.shutdown(std::net::Shutdown::Both);
            }
        }
        if !first {
            log::warn!(
                "redlease: the Sentinels named {addr} master; connections to the old master are retired and its replies no longer count"
            );
        }
        true
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        self.named.closed.store(true, Ordering::Release);
    }
}

/// How long a watcher waits between two attempts to subscribe to its
/// Sentinel, and its read tick (the bound on noticing the client is gone).
const WATCH_RETRY: Duration = Duration::from_secs(1);
const WATCH_TICK: Duration = Duration::from_millis(500);

impl Sentinels {
    pub(crate) fn new(
        sentinels: Vec<redis::ConnectionInfo>,
        master: &str,
        settings: redis::RedisConnectionInfo,
        secure: bool,
        timeouts: Timeouts,
    ) -> RedisResult<Sentinels> {
        let sentinels = Sentinels {
            sentinels: sentinels
                .into_iter()
                .map(redis::Client::open)
                .collect::<RedisResult<_>>()?,
            master: master.to_owned(),
            settings,
            secure,
            timeouts,
            first: AtomicUsize::new(0),
            named: Arc::new(Named::default()),
        };
        for sentinel in &sentinels.sentinels {
            let watcher = Watcher {
                sentinel: sentinel.clone(),
                master: sentinels.master.clone(),
                timeouts: sentinels.timeouts.clone(),
                named: sentinels.named.clone(),
            };
            let _ = std::thread::Builder::new()
                .name("redlease-sentinel-watch".into())
                .spawn(move || watcher.run());
        }
        Ok(sentinels)
    }

    /// What this client heard the Sentinels name (shared with every
    /// connection it opens to the master).
    pub(crate) fn named(&self) -> &Arc<Named> {
        &self.named
    }

    /// A client for the master the Sentinels name now: the first Sentinel
    /// that answers with a server that says it is a master (one that lags
    /// behind a failover may still name the old one, a replica now).
    ///
    /// With its `host:port`. A Sentinel that names another server than the
    /// one this client heard named last (one that lags behind a switch) is
    /// passed over for the next; only when every Sentinel that answers
    /// names another is that one taken (and noted as named).
    pub(crate) fn master(&self) -> RedisResult<(redis::Client, String)> {
        let n = self.sentinels.len();
        let start = self.first.load(Ordering::Relaxed);
        let heard = self.named.addr();
        let mut last = None;
        let mut other = None;
        for k in 0..n {
            let i = (start + k) % n;
            match self.ask(&self.sentinels[i]) {
                Ok((master, addr)) if heard.is_none() || heard.as_deref() == Some(&addr) => {
                    self.first.store(i, Ordering::Relaxed);
                    return Ok((master, addr));
                }
                Ok(found) => {
                    other.get_or_insert((i, found));
                }
                Err(e) => last = Some(e),
            }
        }
        if let Some((i, (master, addr))) = other {
            self.first.store(i, Ordering::Relaxed);
            self.named.set(&addr);
            return Ok((master, addr));
        }
        Err(last
            .unwrap_or_else(|| RedisError::from((redis::ErrorKind::Client, "no Sentinel to ask"))))
    }

    fn ask(&self, sentinel: &redis::Client) -> RedisResult<(redis::Client, String)> {
        let (host, port) = address_of(&self.timeouts, sentinel, &self.master)?;
        let addr = format!("{host}:{port}");
        let to = if self.secure {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host, port)
        };
        let info = redis::IntoConnectionInfo::into_connection_info(to)?
            .set_redis_settings(self.settings.clone());
        let master = redis::Client::open(info)?;
        match call(&self.timeouts, &master, &redis::cmd("ROLE"))? {
            Value::Array(role) if matches!(role.first(), Some(Value::BulkString(r)) if r == b"master") => {
                Ok((master, addr))
            }
            _ => Err(RedisError::from((
                redis::ErrorKind::Client,
                "the server the Sentinel names is not a master (yet)",
            ))),
        }
    }
}

/// The address a Sentinel gives for `master`.
fn address_of(
    timeouts: &Timeouts,
    sentinel: &redis::Client,
    master: &str,
) -> RedisResult<(String, u16)> {
    let named = call(
        timeouts,
        sentinel,
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(master),
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
                master.to_owned(),
            )))
        }
        _ => (None, None),
    };
    match (host, port) {
        (Some(host), Some(port)) => Ok((host, port)),
        _ => Err(RedisError::from((
            redis::ErrorKind::Parse,
            "the Sentinel's answer is not an address",
        ))),
    }
}

/// One command on a connection of our own to `to`, within the connect
/// timeout (connecting) and the response timeout (the whole reply).
fn call(timeouts: &Timeouts, to: &redis::Client, cmd: &redis::Cmd) -> RedisResult<Value> {
    let mut wire = Wire::open(to, &timeouts.tls, timeouts.connect, timeouts.response)?;
    wire.send_packed_command(&cmd.get_packed_command())?;
    match wire.recv_response()? {
        Value::ServerError(e) => Err(e.into()),
        v => Ok(v),
    }
}

/// Follows one Sentinel's announcements for the client's life: subscribed
/// to `+switch-master`, it notes each switch of our master in [`Named`]
/// as it is announced; each time it (re)subscribes it asks the Sentinel
/// too, for a switch announced while it was not listening.
struct Watcher {
    sentinel: redis::Client,
    master: String,
    timeouts: Timeouts,
    named: Arc<Named>,
}

impl Watcher {
    fn run(self) {
        while !self.named.closed.load(Ordering::Acquire) {
            if let Err(e) = self.listen() {
                log::debug!("redlease: Sentinel watcher: {e}; subscribing again");
            }
            // Bounded pause before the next attempt, cut short when the
            // client goes.
            let until = std::time::Instant::now() + WATCH_RETRY;
            while std::time::Instant::now() < until && !self.named.closed.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// One subscription, until it fails or the client goes.
    fn listen(&self) -> RedisResult<()> {
        let t = &self.timeouts;
        let mut wire = Wire::open(&self.sentinel, &t.tls, t.connect, t.response)?;
        wire.send_packed_command(
            &redis::cmd("SUBSCRIBE")
                .arg("+switch-master")
                .get_packed_command(),
        )?;
        // The confirmation, then what was missed while not subscribed.
        wire.recv_response()?;
        let (host, port) = address_of(t, &self.sentinel, &self.master)?;
        self.named.set(&format!("{host}:{port}"));
        while !self.named.closed.load(Ordering::Acquire) {
            if let Some(message) = wire.next_push(WATCH_TICK)? {
                if let Some(addr) = switched_to(&message, &self.master) {
                    self.named.set(&addr);
                }
            }
        }
        Ok(())
    }
}

/// The new master's `host:port` in a `+switch-master` message about
/// `master` (`<name> <old-ip> <old-port> <new-ip> <new-port>`).
fn switched_to(message: &Value, master: &str) -> Option<String> {
    let Value::Array(parts) = message else {
        return None;
    };
    let Some(Value::BulkString(text)) = parts.get(2) else {
        return None;
    };
    let text = std::str::from_utf8(text).ok()?;
    let words: Vec<&str> = text.split(' ').collect();
    match words.as_slice() {
        [name, _, _, host, port] if *name == master && port.parse::<u16>().is_ok() => {
            Some(format!("{host}:{port}"))
        }
        _ => None,
    }
}
