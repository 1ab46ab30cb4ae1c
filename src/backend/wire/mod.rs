//! A connection whose reply is due by a deadline per call, not per read.
//!
//! redis-rs's synchronous connection puts its timeout on each socket read,
//! so a server that dribbles a reply — one byte just inside the timeout,
//! then the next — holds a call for as many timeouts as the reply has
//! bytes (8.4 s for a 1 s timeout, measured). Plain TCP connections are
//! therefore our own: replies framed by `resp.rs` as they are read
//! through a socket whose timeout is cut, before each read, to what is
//! left of the call's budget. A call that has not got its whole reply by
//! then fails as timed out (and its connection is retired by the caller,
//! as for any timeout).
//!
//! Writes share the deadline. TLS connections are ours too (rustls over
//! the same socket, verified against the configured roots or the
//! system's), and so are the node connections of redis-rs's cluster
//! connection, and Unix-socket and RESP3 connections (`HELLO 3`).

use std::cell::Cell;
use std::io::{self, Write};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use redis::{ConnectionLike, RedisError, RedisResult, Value};

use super::Tls;

mod resp;
mod socket;
#[cfg(feature = "tls-rustls")]
mod tls;

#[cfg(all(feature = "cluster", feature = "tls-rustls"))]
use socket::CLUSTER_TLS;
#[cfg(feature = "cluster")]
pub(crate) use socket::{with_tls, within};
use socket::{Deadlined, Socket, Stream, TlsConfig, CALL_DEADLINE};

/// How far the socket's timeout may drift from what is left of the call
/// before it is set again: a reply that arrives in one read (the usual
/// case) costs no system call beyond the read itself.
const SLACK: Duration = Duration::from_millis(1);

/// One connection to one server: ours for plain TCP, redis-rs's otherwise.
pub(crate) enum Wire {
    Own(Box<Own>),
    Redis(redis::Connection),
}

impl Wire {
    /// Connects within `connect` (connection setup included) and gives
    /// every later call `response` to complete.
    #[cfg_attr(not(feature = "tls-rustls"), allow(unused_variables))]
    pub(crate) fn open(
        client: &redis::Client,
        tls: &Tls,
        connect: Duration,
        response: Duration,
    ) -> RedisResult<Wire> {
        #[cfg(feature = "tls-rustls")]
        let ours = || Some(tls::config(tls));
        #[cfg(not(feature = "tls-rustls"))]
        let ours = || None;
        match Own::for_info(client.get_connection_info(), ours, connect)? {
            Some(mut own) => {
                own.stream.sock().budget.set(Some(response));
                Ok(Wire::Own(Box::new(own)))
            }
            None => {
                let con = client.get_connection_with_timeout(connect)?;
                con.set_read_timeout(Some(response))?;
                con.set_write_timeout(Some(response))?;
                Ok(Wire::Redis(con))
            }
        }
    }

    /// Writes `packed` without reading anything.
    pub(crate) fn send_packed_command(&mut self, packed: &[u8]) -> RedisResult<()> {
        match self {
            Wire::Own(own) => {
                own.stream.sock().start();
                own.send(packed)
            }
            Wire::Redis(con) => con.send_packed_command(packed),
        }
    }

    /// Reads one reply (RESP3 pushes are not replies), due within the read
    /// timeout: in all on our connections, per read on redis-rs's.
    pub(crate) fn recv_response(&mut self) -> RedisResult<Value> {
        match self {
            Wire::Own(own) => {
                own.begin()?;
                own.recv()
            }
            Wire::Redis(con) => con.recv_response(),
        }
    }

    /// A second handle on the TCP socket under this connection (TLS or
    /// not), to end a call blocked on it from another thread
    /// (`shutdown`); `None` for Unix sockets and redis-rs's connections.
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    pub(crate) fn interrupter(&self) -> Option<TcpStream> {
        match self {
            Wire::Own(own) => own.stream.sock_ref().stream.tcp()?.try_clone().ok(),
            Wire::Redis(_) => None,
        }
    }

    /// Each later call's budget (see [`Wire::recv_response`]).
    pub(crate) fn set_read_timeout(&self, budget: Option<Duration>) -> RedisResult<()> {
        match self {
            Wire::Own(own) => {
                own.stream.sock_ref().budget.set(budget);
                Ok(())
            }
            Wire::Redis(con) => con.set_read_timeout(budget),
        }
    }

    /// Splits a plain-TCP connection of ours into its reader (this wire,
    /// read with [`Wire::next_push`]) and a writer on the same socket, with
    /// `write_timeout` on each write: a subscriber connection that one
    /// thread reads while others subscribe and unsubscribe on it, neither
    /// waiting for the other. `None` for any other kind (TLS, redis-rs's).
    #[cfg(feature = "cluster")]
    pub(crate) fn split(self, write_timeout: Duration) -> Option<(Wire, TcpStream)> {
        let Wire::Own(own) = &self else {
            return None;
        };
        let writer = own.stream.plain()?.try_clone().ok()?;
        writer.set_write_timeout(Some(write_timeout)).ok()?;
        Some((self, writer))
    }

    /// The next value a subscriber connection sends, waiting at most
    /// `tick`: `None` when nothing came. A value the tick cut in two is
    /// finished by the next call (`Replies` keeps what it has read).
    pub(crate) fn next_push(&mut self, tick: Duration) -> RedisResult<Option<Value>> {
        let Wire::Own(own) = self else {
            return Err(
                io::Error::new(io::ErrorKind::Unsupported, "not a split connection").into(),
            );
        };
        let sock = own.stream.sock();
        sock.budget.set(Some(tick));
        // What a value cut by earlier ticks has read counts on: one value
        // is capped whole (see `MAX_REPLY`), however many ticks it takes.
        let taken = sock.taken;
        sock.start();
        sock.taken = taken;
        match own.replies.next(&mut own.stream) {
            Ok(v) => {
                // A subscriber's messages are each a call of their own.
                own.stream.sock().taken = 0;
                own.replies.new_call();
                Ok(Some(as_resp2(v)))
            }
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Ours: writes share the call's budget with its reads.
    #[cfg(feature = "cluster")]
    fn set_write_timeout(&self, limit: Option<Duration>) -> RedisResult<()> {
        match self {
            Wire::Own(_) => Ok(()),
            Wire::Redis(con) => con.set_write_timeout(limit),
        }
    }
}

impl ConnectionLike for Wire {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        match self {
            Wire::Own(own) => {
                own.begin()?;
                own.send(cmd)?;
                own.recv()
            }
            Wire::Redis(con) => con.req_packed_command(cmd),
        }
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        match self {
            Wire::Own(own) => {
                // One budget for the whole pipeline.
                own.begin()?;
                own.send(cmd)?;
                let mut out = Vec::with_capacity(count);
                for i in 0..offset + count {
                    let v = own.recv()?;
                    if i >= offset {
                        out.push(v);
                    }
                }
                Ok(out)
            }
            Wire::Redis(con) => con.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Wire::Own(own) => own.db,
            Wire::Redis(con) => con.get_db(),
        }
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<()>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        match self {
            Wire::Own(own) => own.open,
            Wire::Redis(con) => con.is_open(),
        }
    }
}

/// The cluster connection's node connections are ours too, so its routed
/// calls have the same deadline. Through `ClusterClient::
/// get_generic_connection`, which redis-rs keeps public for this use
/// (though hidden from its docs). This hook is given no TLS settings of
/// ours, only a `ConnectionInfo`: TLS nodes are ours when the thread
/// connecting has them (see [`with_tls`]), else redis-rs's.
#[cfg(feature = "cluster")]
impl redis::cluster::Connect for Wire {
    fn connect<T>(info: T, timeout: Option<Duration>) -> RedisResult<Wire>
    where
        T: redis::IntoConnectionInfo,
    {
        let info = info.into_connection_info()?;
        #[cfg(feature = "tls-rustls")]
        let ours = || CLUSTER_TLS.with(|t| t.borrow().clone()).map(Ok);
        #[cfg(not(feature = "tls-rustls"))]
        let ours = || None;
        let connect = timeout.unwrap_or(Duration::from_secs(3600));
        match Own::for_info(&info, ours, connect)? {
            // Its first PING runs within what is left of `connect`;
            // redis-rs then sets the budget (`set_read_timeout`).
            Some(own) => Ok(Wire::Own(Box::new(own))),
            None => Ok(Wire::Redis(
                <redis::Connection as redis::cluster::Connect>::connect(info, timeout)?,
            )),
        }
    }

    /// Unlike [`Wire::send_packed_command`], refused once a call failed
    /// on this connection: redis-rs's cluster connection would send a
    /// pipeline again on it (see [`Own::check_open`]).
    fn send_packed_command(&mut self, cmd: &[u8]) -> RedisResult<()> {
        if let Wire::Own(own) = self {
            own.check_open()?;
        }
        Wire::send_packed_command(self, cmd)
    }

    fn set_write_timeout(&self, limit: Option<Duration>) -> RedisResult<()> {
        Wire::set_write_timeout(self, limit)
    }

    fn set_read_timeout(&self, budget: Option<Duration>) -> RedisResult<()> {
        Wire::set_read_timeout(self, budget)
    }

    fn recv_response(&mut self) -> RedisResult<Value> {
        Wire::recv_response(self)
    }
}

/// Our TCP connection, plain or TLS.
pub(crate) struct Own {
    stream: Stream,
    replies: resp::Replies,
    /// False once a read or write failed: the stream may be mid-reply.
    open: bool,
    db: i64,
}

impl Own {
    /// Our connection for `info`, if it is of a kind we make: plain TCP,
    /// or TLS when `tls` gives our settings; opened within `connect`.
    /// `None`: redis-rs's kind (TLS without our settings).
    #[cfg_attr(not(feature = "tls-rustls"), allow(unused_variables))]
    fn for_info(
        info: &redis::ConnectionInfo,
        tls: impl FnOnce() -> Option<RedisResult<TlsConfig>>,
        connect: Duration,
    ) -> RedisResult<Option<Own>> {
        let settings = info.redis_settings();
        let (host, port, config) = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => (host, *port, None),
            #[cfg(feature = "tls-rustls")]
            redis::ConnectionAddr::TcpTls { host, port, .. } => match tls() {
                Some(config) => (host, *port, Some(config?)),
                None => return Ok(None),
            },
            #[cfg(unix)]
            redis::ConnectionAddr::Unix(path) => {
                let until = Own::until(connect);
                let sock = std::os::unix::net::UnixStream::connect(path)?;
                return Own::over(Socket::Unix(sock), "", None, settings, until).map(Some);
            }
            // TLS without our `tls-rustls`: refused, never handed to
            // redis-rs's connection (which another crate of the build may
            // have given TLS), whose reads are timed one by one and whose
            // replies are not capped.
            #[cfg(not(feature = "tls-rustls"))]
            redis::ConnectionAddr::TcpTls { .. } => {
                return Err(RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "rediss:// needs redlease's `tls-rustls` feature, which this build lacks",
                )))
            }
            _ => return Ok(None),
        };
        Own::connect(host, port, config, settings, connect).map(Some)
    }

    /// A call begins: refused if an earlier one failed (see
    /// [`Own::check_open`]), else due within the budget from now.
    fn begin(&mut self) -> RedisResult<()> {
        self.check_open()?;
        self.stream.sock().start();
        Ok(())
    }

    /// Connects to `host:port` (each address in turn, all within
    /// `connect`) and authenticates and selects the database in one round
    /// trip, as redis-rs does.
    fn connect(
        host: &str,
        port: u16,
        tls: Option<TlsConfig>,
        settings: &redis::RedisConnectionInfo,
        connect: Duration,
    ) -> RedisResult<Own> {
        if host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified()) {
            return Err(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "Cannot connect to a wildcard address (0.0.0.0 or ::)",
            )));
        }
        let until = Own::until(connect);
        let mut last = None;
        let mut stream = None;
        for addr in (host, port).to_socket_addrs()? {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match TcpStream::connect_timeout(&addr, left) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = match (stream, last) {
            (Some(s), _) => s,
            (None, Some(e)) => return Err(e.into()),
            (None, None) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("could not connect to {host}:{port} in time"),
                )
                .into())
            }
        };
        // Requests are written whole; Nagle's algorithm would only hold
        // back a request written behind an unacknowledged one (an undo
        // behind a late script, a pipelined pop).
        stream.set_nodelay(true)?;
        Own::over(Socket::Tcp(stream), host, tls, settings, until)
    }

    /// When a connection opened now must be set up: within `connect`, and
    /// within the thread's call deadline too (see `within`): redis-rs's
    /// cluster connection reconnects inside a call, up to 6 times.
    fn until(connect: Duration) -> Instant {
        let until = Instant::now() + connect;
        match CALL_DEADLINE.with(Cell::get) {
            Some(call) => until.min(call),
            None => until,
        }
    }

    /// A connection over `socket` (TLS to `host` with `tls`), set up by
    /// `until`.
    fn over(
        socket: Socket,
        host: &str,
        tls: Option<TlsConfig>,
        settings: &redis::RedisConnectionInfo,
        until: Instant,
    ) -> RedisResult<Own> {
        let sock = Deadlined {
            stream: socket,
            budget: Cell::new(Some(
                until.saturating_duration_since(Instant::now()).max(SLACK),
            )),
            until: None,
            armed: [None, None],
            taken: 0,
        };
        let mut own = Own {
            stream: Stream::new(sock, host, tls)?,
            replies: resp::Replies::new(),
            open: true,
            db: settings.db(),
        };
        if !own.setup(settings, true)? {
            // Still within `connect` in all.
            let left = until.saturating_duration_since(Instant::now());
            own.stream.sock().budget.set(Some(left.max(SLACK)));
            own.setup(settings, false)?;
        }
        Ok(own)
    }

    /// AUTH (or, for RESP3, `HELLO 3` with the credentials), SELECT and
    /// the client's name in one pipeline. False when the server wants AUTH
    /// without a username (before Redis 6).
    fn setup(
        &mut self,
        settings: &redis::RedisConnectionInfo,
        username: bool,
    ) -> RedisResult<bool> {
        let mut pipe = redis::pipe();
        let resp3 = settings.protocol().supports_resp3();
        let auth = if resp3 {
            // RESP3 from the first reply on: `HELLO 3` says so (Redis 6+),
            // authenticating in the same command.
            let cmd = pipe.cmd("HELLO").arg(3);
            if let Some(password) = settings.password() {
                cmd.arg("AUTH")
                    .arg(settings.username().unwrap_or("default"))
                    .arg(password);
            }
            Some(())
        } else {
            settings.password().map(|password| {
                let cmd = pipe.cmd("AUTH");
                if let Some(user) = settings.username().filter(|_| username) {
                    cmd.arg(user);
                }
                cmd.arg(password);
            })
        };
        let select = (settings.db() != 0).then(|| {
            pipe.cmd("SELECT").arg(settings.db());
        });
        if !settings.skip_set_lib_name() {
            pipe.cmd("CLIENT")
                .arg("SETINFO")
                .arg("LIB-NAME")
                .arg(settings.lib_name().unwrap_or("redlease"));
            pipe.cmd("CLIENT")
                .arg("SETINFO")
                .arg("LIB-VER")
                .arg(settings.lib_ver().unwrap_or(env!("CARGO_PKG_VERSION")));
        }
        if pipe.is_empty() {
            return Ok(true);
        }
        let replies = self.req_pipeline(&pipe)?;
        let mut replies = replies.into_iter();
        if auth.is_some() {
            match replies.next() {
                Some(Value::ServerError(e))
                    if resp3 && !matches!(e.code(), "WRONGPASS" | "NOAUTH" | "NOPERM") =>
                {
                    return Err(RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "the server does not speak RESP3 (protocol=resp3 needs Redis 6 or later)",
                        e.details().unwrap_or_default().to_owned(),
                    )));
                }
                Some(Value::ServerError(e)) => {
                    let retry = username
                        && settings.username().is_some()
                        && e.details()
                            .is_some_and(|d| d.contains("wrong number of arguments"));
                    if retry {
                        return Ok(false);
                    }
                    // As redis-rs reports it: any refusal of AUTH is a
                    // failed authentication (not only WRONGPASS), e.g.
                    // a password given to a server that wants none.
                    return Err(RedisError::from((
                        redis::ErrorKind::AuthenticationFailed,
                        "Password authentication failed",
                        e.details().unwrap_or_default().to_owned(),
                    )));
                }
                Some(_) => {}
                None => return Err(missing()),
            }
        }
        if select.is_some() {
            match replies.next() {
                Some(Value::ServerError(e)) => return Err(e.into()),
                Some(_) => {}
                None => return Err(missing()),
            }
        }
        // CLIENT SETINFO's replies are ignored: servers before 7.2 refuse it.
        Ok(true)
    }

    fn req_pipeline(&mut self, pipe: &redis::Pipeline) -> RedisResult<Vec<Value>> {
        // A TLS handshake happens here too, within the same deadline.
        self.stream.sock().start();
        self.send(&pipe.get_packed_pipeline())?;
        (0..pipe.len()).map(|_| self.recv()).collect()
    }

    /// A call on a connection whose earlier call failed is refused as a
    /// dropped connection, never sent: its stream may still hold the rest
    /// of a late reply, which a new call would take for its own. redis-rs's
    /// cluster connection retries a timed-out call on the same connection;
    /// refused, it reconnects instead. (The undo that [`Wire::
    /// send_packed_command`] writes behind a late request is still sent:
    /// that is what it is for.)
    fn check_open(&self) -> RedisResult<()> {
        if self.open {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::NotConnected,
            "an earlier call failed on this connection; it is retired",
        )
        .into())
    }

    fn send(&mut self, packed: &[u8]) -> RedisResult<()> {
        // The replies to this write share one element budget.
        self.replies.new_call();
        let sent = self
            .stream
            .write_all(packed)
            .and_then(|()| self.stream.flush());
        sent.map_err(|e| {
            self.open = false;
            RedisError::from(e)
        })
    }

    /// One reply, by the deadline set by [`Deadlined::start`].
    fn recv(&mut self) -> RedisResult<Value> {
        loop {
            match self.replies.next(&mut self.stream) {
                Ok(Value::Push { .. }) => continue,
                Ok(v) => return Ok(v),
                Err(e) => {
                    // Whatever failed, the stream may hold the rest of a
                    // reply: it must not serve another call.
                    self.open = false;
                    return Err(e);
                }
            }
        }
    }
}

/// A subscriber's value in the shape RESP2 gives it, whatever the
/// connection speaks: a RESP3 push (`>3 message <channel> <payload>`) as
/// the array RESP2 sends, and a `PING`'s plain `PONG` as RESP2's
/// subscribed `["pong", ""]`.
fn as_resp2(v: Value) -> Value {
    let kind = match v {
        Value::Push { kind, data } => {
            let name = match kind {
                redis::PushKind::Message => "message".to_owned(),
                redis::PushKind::SMessage => "smessage".to_owned(),
                redis::PushKind::Subscribe => "subscribe".to_owned(),
                redis::PushKind::SSubscribe => "ssubscribe".to_owned(),
                redis::PushKind::Unsubscribe => "unsubscribe".to_owned(),
                redis::PushKind::SUnsubscribe => "sunsubscribe".to_owned(),
                redis::PushKind::Other(name) => name,
                other => format!("{other:?}").to_lowercase(),
            };
            return Value::Array(
                std::iter::once(Value::BulkString(name.into_bytes()))
                    .chain(data)
                    .collect(),
            );
        }
        Value::SimpleString(kind) => kind,
        v => return v,
    };
    if kind.eq_ignore_ascii_case("pong") {
        return Value::Array(vec![
            Value::BulkString(b"pong".to_vec()),
            Value::BulkString(Vec::new()),
        ]);
    }
    Value::SimpleString(kind)
}

fn missing() -> RedisError {
    RedisError::from((
        redis::ErrorKind::Client,
        "the server sent fewer replies than commands",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 57 item 6: without our `tls-rustls`, a `rediss://` URL (which
    /// redis-rs parses when another crate turns its TLS on: run with
    /// `--features redis/tls-rustls`) is refused, not handed to redis-rs's
    /// connection.
    #[cfg(not(feature = "tls-rustls"))]
    #[test]
    fn tls_without_our_tls_is_refused() {
        let Ok(client) = redis::Client::open("rediss://127.0.0.1:1/") else {
            return; // redis-rs without TLS: nothing to hand over
        };
        let opened = Wire::open(
            &client,
            &Tls::default(),
            Duration::from_millis(100),
            Duration::from_millis(100),
        );
        let err = opened.err().expect("refused");
        assert!(err.to_string().contains("tls-rustls"), "{err}");
    }

    /// A plain connection of ours to `addr`, each call given `budget`.
    fn own_over(addr: std::net::SocketAddr, budget: Option<Duration>) -> Own {
        Own {
            stream: Stream::Plain(Deadlined {
                stream: Socket::Tcp(TcpStream::connect(addr).unwrap()),
                budget: Cell::new(budget),
                until: None,
                armed: [None, None],
                taken: 0,
            }),
            replies: resp::Replies::new(),
            open: true,
            db: 0,
        }
    }

    /// A peer that accepts and never reads: a large request fills the
    /// socket buffers and its write blocks. The write shares the call's
    /// deadline with the reads (found by an adversarial review: a 16 MB
    /// renewal pipeline to a server that read a little at a time took as
    /// long as the server liked).
    #[test]
    fn a_write_the_peer_does_not_take_ends_at_the_deadline() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            std::thread::sleep(Duration::from_secs(3));
            drop(s);
        });
        let mut own = own_over(addr, Some(Duration::from_millis(300)));
        let big = vec![b'x'; 64 << 20];
        let t = Instant::now();
        own.stream.sock().start();
        let sent = own.send(&big);
        let took = t.elapsed();
        assert!(sent.as_ref().is_err_and(|e| e.is_timeout()), "{sent:?}");
        assert!(took < Duration::from_millis(1_000), "took {took:?}");
        assert!(!own.open, "a connection whose write failed is retired");
        peer.join().unwrap();
    }

    /// A subscriber connection read a tick at a time: a value that arrives
    /// over many ticks is capped whole, not per tick (each tick reset the
    /// count, and a terabyte message would have piled up in the parser).
    #[test]
    fn a_value_spread_over_ticks_is_capped_whole() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let _ = s.write_all(b"*3\r\n$7\r\nmessage\r\n$1\r\nx\r\n$1099511627776\r\n");
            let chunk = vec![b'x'; 1 << 20];
            // 2 MiB at a time, a tick apart: each tick reads under the cap.
            for _ in 0..200 {
                if s.write_all(&chunk).is_err() || s.write_all(&chunk).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(30));
            }
        });
        let mut wire = Wire::Own(Box::new(own_over(addr, None)));
        let t = Instant::now();
        let mut failed = None;
        while t.elapsed() < Duration::from_secs(20) {
            match wire.next_push(Duration::from_millis(20)) {
                Ok(Some(v)) => panic!("a terabyte message parsed: {v:?}"),
                Ok(None) => {}
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let e = failed.expect("the message was not cut off");
        assert!(e.to_string().contains("MiB"), "{e}");
        drop(wire);
        peer.join().unwrap();
    }
}
