//! The byte stream under our connections: a TCP or Unix socket (TLS over
//! it when asked) whose reads and writes end at the current call's
//! deadline and stop at the reply cap, and the per-thread settings that
//! reach the connections redis-rs's cluster connection opens (a deadline,
//! TLS).

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use redis::RedisResult;

#[cfg(feature = "cluster")]
use super::super::Tls;
#[cfg(feature = "tls-rustls")]
use super::tls;
use super::SLACK;

#[cfg(feature = "tls-rustls")]
pub(super) type TlsConfig = std::sync::Arc<rustls::ClientConfig>;
#[cfg(not(feature = "tls-rustls"))]
pub(super) type TlsConfig = std::convert::Infallible;

/// The byte stream of a connection.
pub(super) enum Stream {
    Plain(Deadlined),
    #[cfg(feature = "tls-rustls")]
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, Deadlined>>),
}

impl Stream {
    #[cfg_attr(not(feature = "tls-rustls"), allow(unused_variables))]
    pub(super) fn new(sock: Deadlined, host: &str, tls: Option<TlsConfig>) -> RedisResult<Stream> {
        match tls {
            None => Ok(Stream::Plain(sock)),
            #[cfg(feature = "tls-rustls")]
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                    .map_err(|e| tls::refused("not a valid TLS server name", e))?;
                let conn = rustls::ClientConnection::new(config, name)
                    .map_err(|e| tls::refused("cannot start TLS", e))?;
                Ok(Stream::Tls(Box::new(rustls::StreamOwned::new(conn, sock))))
            }
            #[cfg(not(feature = "tls-rustls"))]
            Some(never) => match never {},
        }
    }

    /// The socket under the stream, whose deadline is the call's.
    pub(super) fn sock(&mut self) -> &mut Deadlined {
        match self {
            Stream::Plain(s) => s,
            #[cfg(feature = "tls-rustls")]
            Stream::Tls(s) => &mut s.sock,
        }
    }

    /// The TCP socket, when nothing sits between it and the protocol.
    #[cfg(feature = "cluster")]
    pub(super) fn plain(&self) -> Option<&TcpStream> {
        match self {
            Stream::Plain(s) => s.stream.tcp(),
            #[cfg(feature = "tls-rustls")]
            Stream::Tls(_) => None,
        }
    }

    pub(super) fn sock_ref(&self) -> &Deadlined {
        match self {
            Stream::Plain(s) => s,
            #[cfg(feature = "tls-rustls")]
            Stream::Tls(s) => &s.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            #[cfg(feature = "tls-rustls")]
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            #[cfg(feature = "tls-rustls")]
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            #[cfg(feature = "tls-rustls")]
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A connected socket: TCP, or a Unix socket (`redis+unix://`).
pub(super) enum Socket {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(std::os::unix::net::UnixStream),
}

impl Socket {
    #[cfg_attr(not(any(feature = "cluster", feature = "sentinel")), allow(dead_code))]
    pub(super) fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Socket::Tcp(s) => Some(s),
            #[cfg(unix)]
            Socket::Unix(_) => None,
        }
    }

    pub(super) fn set_timeout(&self, which: usize, limit: Option<Duration>) -> io::Result<()> {
        match (self, which) {
            (Socket::Tcp(s), WRITE) => s.set_write_timeout(limit),
            (Socket::Tcp(s), _) => s.set_read_timeout(limit),
            #[cfg(unix)]
            (Socket::Unix(s), WRITE) => s.set_write_timeout(limit),
            #[cfg(unix)]
            (Socket::Unix(s), _) => s.set_read_timeout(limit),
        }
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Socket::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            #[cfg(unix)]
            Socket::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.flush(),
            #[cfg(unix)]
            Socket::Unix(s) => s.flush(),
        }
    }
}

/// A socket whose reads and writes end at the current call's deadline.
pub(super) struct Deadlined {
    pub(super) stream: Socket,
    /// How long each call may take; `None`: no limit. A cell: redis-rs's
    /// cluster connection sets it through `&self`.
    pub(super) budget: Cell<Option<Duration>>,
    /// The current call's deadline.
    pub(super) until: Option<Instant>,
    /// The read and write timeouts set on the socket now.
    pub(super) armed: [Option<Duration>; 2],
    /// Bytes read since the current call began (see [`MAX_REPLY`]).
    pub(super) taken: usize,
}

/// The most a call may read, replies of a pipeline together: far above the
/// largest reply redlease expects (a renewal batch of 2,000 calls, a page
/// of names of up to 8 KiB each from `list` or `inspect`), far below what
/// would hurt a process. A server that sends more (a hostile or broken one:
/// `$1099511627776` and a stream) makes the call fail and the connection
/// retire, with at most this much read.
pub(crate) const MAX_REPLY: usize = 64 << 20;

thread_local! {
    /// A deadline for every call this thread makes until it is lifted (see
    /// [`within`]).
    pub(super) static CALL_DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

#[cfg(all(feature = "cluster", feature = "tls-rustls"))]
thread_local! {
    /// The TLS settings for cluster node connections this thread opens
    /// (see [`with_tls`]).
    pub(super) static CLUSTER_TLS: std::cell::RefCell<Option<TlsConfig>> = const {
        std::cell::RefCell::new(None)
    };
}

/// Runs `f` with the cluster node connections it opens made with our TLS
/// settings, if given (redis-rs's cluster connection opens them in the
/// calling thread, when it first routes to a node or reconnects).
#[cfg(feature = "cluster")]
#[cfg_attr(not(feature = "tls-rustls"), allow(unused_variables))]
pub(crate) fn with_tls<T>(tls: Option<&Tls>, f: impl FnOnce() -> T) -> T {
    #[cfg(feature = "tls-rustls")]
    if let Some(tls) = tls {
        struct Restore(Option<TlsConfig>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let old = self.0.take();
                CLUSTER_TLS.with(|t| *t.borrow_mut() = old);
            }
        }
        // Unusable settings: redis-rs's connection reports them.
        let config = tls::config(tls).ok();
        let _restore = Restore(CLUSTER_TLS.with(|t| t.replace(config)));
        return f();
    }
    f()
}

/// Runs `f` with every call it makes on our connections due by `until` in
/// all: redis-rs's cluster connection retries a failed call (re-sending it,
/// reconnecting, re-reading the slot map), each with a whole
/// response timeout of its own.
#[cfg(feature = "cluster")]
pub(crate) fn within<T>(until: Instant, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CALL_DEADLINE.with(|d| d.set(self.0));
        }
    }
    let _restore = Restore(CALL_DEADLINE.with(|d| d.replace(Some(until))));
    f()
}

impl Deadlined {
    /// A call begins: its reply is due within the budget from now (and by
    /// the thread's call deadline, if one is set).
    pub(super) fn start(&mut self) {
        self.taken = 0;
        let own = self.budget.get().map(|b| Instant::now() + b);
        let outer = CALL_DEADLINE.with(Cell::get);
        self.until = match (own, outer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Runs one socket operation (`WRITE` or `READ`) within the deadline:
    /// its timeout is cut to what is left; one that the socket ends early
    /// (its timeout lags the deadline by up to `SLACK`) is tried again.
    pub(super) fn bounded<T>(
        &mut self,
        which: usize,
        mut op: impl FnMut(&mut Socket) -> io::Result<T>,
    ) -> io::Result<T> {
        let Some(until) = self.until else {
            if self.armed[which].is_some() {
                self.arm(which, None)?;
            }
            return op(&mut self.stream);
        };
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the call did not complete by its deadline",
                ));
            }
            if self.armed[which].is_none_or(|armed| armed.abs_diff(left) > SLACK) {
                self.arm(which, Some(left))?;
            }
            match op(&mut self.stream) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                r => return r,
            }
        }
    }

    pub(super) fn arm(&mut self, which: usize, limit: Option<Duration>) -> io::Result<()> {
        self.stream.set_timeout(which, limit)?;
        self.armed[which] = limit;
        Ok(())
    }
}

pub(super) const WRITE: usize = 0;
pub(super) const READ: usize = 1;

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.taken >= MAX_REPLY {
            return Err(io::Error::other(format!(
                "the server sent more than {} MiB for one call",
                MAX_REPLY >> 20
            )));
        }
        let room = (MAX_REPLY - self.taken).min(buf.len());
        let n = self.bounded(READ, |s| s.read(&mut buf[..room]))?;
        self.taken += n;
        Ok(n)
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bounded(WRITE, |s| s.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}
