//! A connection whose reply is due by a deadline per call, not per read.
//!
//! redis-rs's synchronous connection puts its timeout on each socket read,
//! so a server that dribbles a reply — one byte just inside the timeout,
//! then the next — holds a call for as many timeouts as the reply has
//! bytes (8.4 s for a 1 s timeout, measured). Plain TCP connections are
//! therefore our own: redis-rs's RESP parser reading through a socket
//! whose timeout is cut, before each read, to what is left of the call's
//! budget. A call that has not got its whole reply by then fails as timed
//! out (and its connection is retired by the caller, as for any timeout).
//!
//! TLS, Unix-socket and RESP3 connections keep redis-rs's connection, and
//! with it the per-read timeout: a dribbling server can hold their calls
//! longer (documented in GUARANTEES.md).

use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use redis::{ConnectionLike, RedisError, RedisResult, Value};

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
    pub(crate) fn open(
        client: &redis::Client,
        connect: Duration,
        response: Duration,
    ) -> RedisResult<Wire> {
        let info = client.get_connection_info();
        match info.addr() {
            redis::ConnectionAddr::Tcp(host, port)
                if !info.redis_settings().protocol().supports_resp3() =>
            {
                let own = Own::connect(host, *port, info.redis_settings(), connect)?;
                own.sock.stream.set_write_timeout(Some(response))?;
                let mut wire = Wire::Own(Box::new(own));
                wire.set_read_timeout(Some(response))?;
                Ok(wire)
            }
            _ => {
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
            Wire::Own(own) => own.send(packed),
            Wire::Redis(con) => con.send_packed_command(packed),
        }
    }

    /// Reads one reply (RESP3 pushes are not replies), due within the read
    /// timeout: in all on our connections, per read on redis-rs's.
    pub(crate) fn recv_response(&mut self) -> RedisResult<Value> {
        match self {
            Wire::Own(own) => {
                own.sock.start();
                own.recv()
            }
            Wire::Redis(con) => con.recv_response(),
        }
    }

    /// Each later call's budget (see [`Wire::recv_response`]).
    pub(crate) fn set_read_timeout(&mut self, budget: Option<Duration>) -> RedisResult<()> {
        match self {
            Wire::Own(own) => {
                own.sock.budget = budget;
                Ok(())
            }
            Wire::Redis(con) => con.set_read_timeout(budget),
        }
    }
}

impl ConnectionLike for Wire {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        match self {
            Wire::Own(own) => {
                own.send(cmd)?;
                own.sock.start();
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
                own.send(cmd)?;
                // One budget for the whole pipeline.
                own.sock.start();
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

/// Our plain TCP connection.
pub(crate) struct Own {
    sock: Deadlined,
    parser: redis::Parser,
    /// False once a read or write failed: the stream may be mid-reply.
    open: bool,
    db: i64,
}

impl Own {
    /// Connects to `host:port` (each address in turn, all within
    /// `connect`) and authenticates and selects the database in one round
    /// trip, as redis-rs does.
    fn connect(
        host: &str,
        port: u16,
        settings: &redis::RedisConnectionInfo,
        connect: Duration,
    ) -> RedisResult<Own> {
        if host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified()) {
            return Err(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "Cannot connect to a wildcard address (0.0.0.0 or ::)",
            )));
        }
        let until = Instant::now() + connect;
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
        stream.set_write_timeout(Some(connect.max(SLACK)))?;
        let mut own = Own {
            sock: Deadlined {
                stream,
                budget: None,
                until: None,
                armed: None,
            },
            parser: redis::Parser::new(),
            open: true,
            db: settings.db(),
        };
        own.sock.budget = Some(until.saturating_duration_since(Instant::now()).max(SLACK));
        if !own.setup(settings, true)? {
            own.setup(settings, false)?;
        }
        Ok(own)
    }

    /// AUTH, SELECT and the client's name in one pipeline. False when the
    /// server wants AUTH without a username (before Redis 6).
    fn setup(
        &mut self,
        settings: &redis::RedisConnectionInfo,
        username: bool,
    ) -> RedisResult<bool> {
        let mut pipe = redis::pipe();
        let auth = settings.password().map(|password| {
            let cmd = pipe.cmd("AUTH");
            if let Some(user) = settings.username().filter(|_| username) {
                cmd.arg(user);
            }
            cmd.arg(password);
        });
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
                Some(Value::ServerError(e)) => {
                    let retry = username
                        && settings.username().is_some()
                        && e.details()
                            .is_some_and(|d| d.contains("wrong number of arguments"));
                    if retry {
                        return Ok(false);
                    }
                    return Err(e.into());
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
        self.send(&pipe.get_packed_pipeline())?;
        self.sock.start();
        (0..pipe.len()).map(|_| self.recv()).collect()
    }

    fn send(&mut self, packed: &[u8]) -> RedisResult<()> {
        self.sock.stream.write_all(packed).map_err(|e| {
            self.open = false;
            RedisError::from(e)
        })
    }

    /// One reply, by the deadline set by [`Deadlined::start`].
    fn recv(&mut self) -> RedisResult<Value> {
        loop {
            match self.parser.parse_value(&mut self.sock) {
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

fn missing() -> RedisError {
    RedisError::from((
        redis::ErrorKind::Client,
        "the server sent fewer replies than commands",
    ))
}

/// A socket whose reads end at the current call's deadline.
struct Deadlined {
    stream: TcpStream,
    /// How long each call may take; `None`: no limit.
    budget: Option<Duration>,
    /// The current call's deadline.
    until: Option<Instant>,
    /// The read timeout set on the socket now.
    armed: Option<Duration>,
}

impl Deadlined {
    /// A call begins: its reply is due within the budget from now.
    fn start(&mut self) {
        self.until = self.budget.map(|b| Instant::now() + b);
    }
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(until) = self.until else {
            if self.armed.is_some() {
                self.stream.set_read_timeout(None)?;
                self.armed = None;
            }
            return self.stream.read(buf);
        };
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the reply was not complete by the call's deadline",
                ));
            }
            if self.armed.is_none_or(|armed| armed.abs_diff(left) > SLACK) {
                self.stream.set_read_timeout(Some(left))?;
                self.armed = Some(left);
            }
            match self.stream.read(buf) {
                // The socket's timeout may end a little before the
                // deadline (it lags by up to `SLACK`): look again.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                r => return r,
            }
        }
    }
}
