//! An in-process, fault-injecting TCP proxy between a Redis client and a
//! real `redis-server`, for tests that need lost replies, dropped
//! connections, slow replies or a silent server.
//!
//! Each client connection gets its own upstream connection and two threads:
//! one reads client → proxy, splits the byte stream into RESP commands and
//! applies the rules; the other reads server → proxy, splits it into RESP
//! replies and pairs each reply with its command through a FIFO, so a fault
//! decided for a command can act on that command's reply.
//!
//! Rules match the raw bytes of one command (`*N\r\n$len\r\n...` or an
//! inline line). A connection that sends SUBSCRIBE, SSUBSCRIBE, PSUBSCRIBE,
//! MONITOR or CLIENT REPLY (after which replies no longer pair up with
//! commands), or bytes that do not parse as RESP, turns into a plain byte
//! pipe in both directions: no rule ever fires on its later traffic.
//!
//! Every thread wakes at least every [`TICK`] to notice shutdown; dropping
//! the [`Proxy`] closes everything and waits at most about a second.
//!
//! ```ignore
//! let server = common::Server::start();
//! let proxy = Proxy::start(server.port());
//! proxy.arm(b"EVALSHA", Fault::DropReplyAndClose);
//! // ... a client of proxy.url() runs a script: it ran, the client saw a dropped connection
//! assert!(proxy.wait_fired(1, Duration::from_secs(1)));
//! ```

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How often blocked threads wake up to check for shutdown.
const TICK: Duration = Duration::from_millis(100);
/// How often the accept loop polls its non-blocking listener.
const ACCEPT_POLL: Duration = Duration::from_millis(5);
/// How long `Drop` waits for threads before detaching them.
const DROP_WAIT: Duration = Duration::from_secs(1);
/// A write that makes no progress for this long closes the pair.
const WRITE_STALL: Duration = Duration::from_secs(10);
/// Upstream connect timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const READ_CHUNK: usize = 64 * 1024;

/// What happens to a command that a rule matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward the command; when the server's reply for it arrives, drop the reply; keep the connection open
    /// (the client sees a response timeout; later replies on that connection are forwarded normally).
    ///
    /// Note: redis-rs 1.x counts a timed-out reply as "late" and discards the next reply it reads on that
    /// connection, so a dropped (never late) reply leaves a sync `redis::Connection` answering every later
    /// command with a timeout. Use a fresh connection afterwards.
    DropReply,
    /// Forward the command, wait for the server's reply (so it surely ran), drop the reply, then close the
    /// client connection (client sees a dropped connection: executed, reply lost).
    ///
    /// Commands the client sends after this one on the same connection (e.g. later in the same pipeline)
    /// are not forwarded: they did not run.
    DropReplyAndClose,
    /// Close the client connection without forwarding the command (not executed, but the client cannot know).
    ///
    /// Commands before it in the same pipeline were forwarded; their replies are lost with the connection.
    CloseBeforeForward,
    /// Forward the command, but hold its reply back for this long (replies after it on the same connection are
    /// delayed too, to keep order). The delay counts from the reply's arrival at the proxy.
    Delay(Duration),
    /// Forward the command, then deliver its reply one byte at a time, this long apart (a server or link that
    /// dribbles: each byte arrives within a per-read timeout, the whole reply does not). Replies after it on
    /// the same connection wait behind it.
    Dribble(Duration),
    /// Hold this command back this long before forwarding it (commands after it on the same connection
    /// wait behind it): it runs late, and its reply comes late with it.
    Hold(Duration),
    /// Swallow this command and everything after it on this connection: never forwarded, never answered.
    /// Replies to commands forwarded before it are still delivered.
    Blackhole,
}

struct Rules {
    /// One-shot rules, in arming order.
    armed: Vec<(Vec<u8>, Fault)>,
    /// Standing rules, in order of `always` calls.
    standing: Vec<(Vec<u8>, Fault)>,
    fired: usize,
}

struct Inner {
    rules: Mutex<Rules>,
    fired_cv: Condvar,
    refuse: AtomicBool,
    blackhole: AtomicBool,
    /// Gap between bytes sent to clients, in µs (0: none); see `set_dribble`.
    dribble_us: AtomicU64,
    stopping: AtomicBool,
    conns: Mutex<Vec<Arc<Conn>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    next_id: AtomicU64,
    upstream: SocketAddr,
}

/// Poison-tolerant lock: a panicking test thread must not wedge the proxy.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// The fault for one command, if a rule matches: armed rules first (the
    /// oldest matching one is consumed), then standing rules.
    fn match_rules(&self, cmd: &[u8]) -> Option<Fault> {
        let mut rules = lock(&self.rules);
        let fault = if let Some(i) = rules.armed.iter().position(|(p, _)| contains(cmd, p)) {
            Some(rules.armed.remove(i).1)
        } else {
            rules
                .standing
                .iter()
                .find(|(p, _)| contains(cmd, p))
                .map(|(_, f)| *f)
        };
        if fault.is_some() {
            rules.fired += 1;
            self.fired_cv.notify_all();
        }
        fault
    }

    fn spawn(self: &Arc<Self>, name: &str, f: impl FnOnce() + Send + 'static) {
        let Ok(handle) = thread::Builder::new().name(name.into()).spawn(f) else {
            return;
        };
        let mut threads = lock(&self.threads);
        threads.retain(|t| !t.is_finished());
        threads.push(handle);
    }
}

/// One client connection and its upstream connection.
struct Conn {
    id: u64,
    client: TcpStream,
    upstream: TcpStream,
    closed: AtomicBool,
    state: Mutex<ConnState>,
}

struct ConnState {
    /// One entry per forwarded command still awaiting its reply.
    pending: VecDeque<Option<Fault>>,
    /// Set (before the triggering bytes are forwarded) once replies no longer
    /// pair up with commands; the server side switches to raw bytes once the
    /// replies still pending have been handled.
    passthrough: bool,
}

impl Conn {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Closes both sockets (waking both threads) and unregisters the pair.
    fn close(&self, inner: &Inner) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.upstream.shutdown(Shutdown::Both);
        lock(&inner.conns).retain(|c| c.id != self.id);
    }
}

/// A fault-injecting proxy on `127.0.0.1:<free port>` in front of
/// `127.0.0.1:<upstream_port>`. Dropping it closes every connection.
pub struct Proxy {
    inner: Arc<Inner>,
    port: u16,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on 127.0.0.1:<free port>, forwards to 127.0.0.1:upstream_port.
    pub fn start(upstream_port: u16) -> Proxy {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("proxy: bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("proxy: non-blocking listener");
        let port = listener.local_addr().expect("proxy: local addr").port();
        let inner = Arc::new(Inner {
            rules: Mutex::new(Rules {
                armed: Vec::new(),
                standing: Vec::new(),
                fired: 0,
            }),
            fired_cv: Condvar::new(),
            refuse: AtomicBool::new(false),
            blackhole: AtomicBool::new(false),
            dribble_us: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            upstream: SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port)),
        });
        let acceptor = {
            let inner = inner.clone();
            thread::Builder::new()
                .name(format!("proxy-accept-{port}"))
                .spawn(move || accept_loop(inner, listener))
                .expect("proxy: spawn accept thread")
        };
        Proxy {
            inner,
            port,
            acceptor: Some(acceptor),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// One-shot rule: the next command (from any connection opened through this proxy, after this call)
    /// whose RESP bytes contain `pattern` (byte substring; e.g. b"EVALSHA", a key name, a token) gets `fault`.
    /// Several rules may be armed; each fires once, in arming order.
    pub fn arm(&self, pattern: impl AsRef<[u8]>, fault: Fault) {
        lock(&self.inner.rules)
            .armed
            .push((pattern.as_ref().to_vec(), fault));
    }

    /// Standing rule: every command containing `pattern` gets `fault` until `clear()`.
    pub fn always(&self, pattern: impl AsRef<[u8]>, fault: Fault) {
        lock(&self.inner.rules)
            .standing
            .push((pattern.as_ref().to_vec(), fault));
    }

    /// Removes all rules (armed and standing) and standing modes (refuse,
    /// blackhole). Connections already blackholed by [`Fault::Blackhole`]
    /// stay so. `fired()` is not reset.
    pub fn clear(&self) {
        {
            let mut rules = lock(&self.inner.rules);
            rules.armed.clear();
            rules.standing.clear();
        }
        self.inner.refuse.store(false, Ordering::SeqCst);
        self.inner.blackhole.store(false, Ordering::SeqCst);
    }

    /// How many rule applications have happened so far.
    pub fn fired(&self) -> usize {
        lock(&self.inner.rules).fired
    }

    /// Waits until `fired() >= n` or `limit` passes; returns whether it was reached.
    pub fn wait_fired(&self, n: usize, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        let mut rules = lock(&self.inner.rules);
        loop {
            if rules.fired >= n {
                return true;
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            rules = match self.inner.fired_cv.wait_timeout(rules, end - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// Closes every currently open client+upstream connection pair at once.
    pub fn cut_all(&self) {
        let conns: Vec<Arc<Conn>> = lock(&self.inner.conns).clone();
        for c in conns {
            c.close(&self.inner);
        }
    }

    /// While on: new client connections are accepted and closed immediately (like a refused/dead server);
    /// existing ones unaffected.
    pub fn set_refuse(&self, on: bool) {
        self.inner.refuse.store(on, Ordering::SeqCst);
    }

    /// While on: everything from clients is swallowed (never forwarded, never answered), new connections too.
    /// Replies to commands forwarded before are still delivered. Swallowed commands are lost for good.
    pub fn set_blackhole(&self, on: bool) {
        self.inner.blackhole.store(on, Ordering::SeqCst);
    }

    /// While set: everything servers send to clients is delivered one byte at a time, this long apart, on every
    /// connection and whatever the protocol (TLS included, which rules cannot see into).
    pub fn set_dribble(&self, gap: Option<Duration>) {
        let us = gap.map_or(0, |g| g.as_micros().max(1) as u64);
        self.inner.dribble_us.store(us, Ordering::SeqCst);
    }

    /// Currently open client connections.
    pub fn connections(&self) -> usize {
        lock(&self.inner.conns).len()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join(); // polls every ACCEPT_POLL
        }
        self.cut_all();
        let end = Instant::now() + DROP_WAIT;
        let mut threads = std::mem::take(&mut *lock(&self.inner.threads));
        while !threads.is_empty() && Instant::now() < end {
            threads.retain(|t| !t.is_finished());
            thread::sleep(Duration::from_millis(5));
        }
        // Whatever is still running after DROP_WAIT is detached; it exits
        // on its next tick because `stopping` is set.
    }
}

fn accept_loop(inner: Arc<Inner>, listener: TcpListener) {
    while !inner.stopping() {
        match listener.accept() {
            Ok((client, _)) => {
                if inner.refuse.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let inner2 = inner.clone();
                inner.spawn("proxy-client", move || open_pair(inner2, client));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(ACCEPT_POLL),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // e.g. EMFILE or ECONNABORTED: back off a little, keep serving.
            Err(_) => thread::sleep(ACCEPT_POLL),
        }
    }
}

/// Connects upstream, registers the pair, runs the client side here and the
/// server side on a second thread.
fn open_pair(inner: Arc<Inner>, client: TcpStream) {
    let setup = || -> io::Result<(Arc<Conn>, [TcpStream; 4])> {
        client.set_nonblocking(false)?;
        let upstream = TcpStream::connect_timeout(&inner.upstream, CONNECT_TIMEOUT)?;
        for s in [&client, &upstream] {
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(TICK))?;
            s.set_write_timeout(Some(TICK))?;
        }
        let streams = [
            client.try_clone()?,
            upstream.try_clone()?,
            client.try_clone()?,
            upstream.try_clone()?,
        ];
        let conn = Arc::new(Conn {
            id: inner.next_id.fetch_add(1, Ordering::SeqCst),
            client: client.try_clone()?,
            upstream,
            closed: AtomicBool::new(false),
            state: Mutex::new(ConnState {
                pending: VecDeque::new(),
                passthrough: false,
            }),
        });
        Ok((conn, streams))
    };
    let Ok((conn, [c1, u1, c2, u2])) = setup() else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    lock(&inner.conns).push(conn.clone());
    if inner.stopping() {
        conn.close(&inner);
        return;
    }
    {
        let (inner2, conn2) = (inner.clone(), conn.clone());
        inner.spawn("proxy-server", move || {
            server_side(&inner2, &conn2, c2, u2);
            conn2.close(&inner2);
        });
    }
    client_side(&inner, &conn, c1, u1);
    conn.close(&inner);
}

/// Reads once; `Ok(None)` on a timeout tick, `Err` on EOF or error.
fn read_some(s: &mut TcpStream, chunk: &mut [u8]) -> io::Result<Option<usize>> {
    match s.read(chunk) {
        Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
        Ok(n) => Ok(Some(n)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Writes all of `buf`, retrying on write-timeout ticks until the pair is
/// closed, the proxy stops, or no progress is made for `WRITE_STALL`.
fn write_all(inner: &Inner, conn: &Conn, s: &mut TcpStream, mut buf: &[u8]) -> io::Result<()> {
    let mut last_progress = Instant::now();
    while !buf.is_empty() {
        if conn.is_closed() || inner.stopping() {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        match s.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                last_progress = Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                if last_progress.elapsed() > WRITE_STALL {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sleeps until `until`, in short slices; false if the pair closed or the
/// proxy stopped meanwhile.
fn sleep_until(inner: &Inner, conn: &Conn, until: Instant) -> bool {
    loop {
        if conn.is_closed() || inner.stopping() {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        thread::sleep((until - now).min(Duration::from_millis(20)));
    }
}

/// Client → server: split into commands, apply rules, forward.
fn client_side(inner: &Inner, conn: &Conn, mut client: TcpStream, mut upstream: TcpStream) {
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut buf: Vec<u8> = Vec::new();
    let mut raw = false; // plain byte pipe from now on
    let mut swallow = false; // Blackhole fault or DropReplyAndClose: drop all later input
    while !inner.stopping() && !conn.is_closed() {
        let n = match read_some(&mut client, &mut chunk) {
            Ok(Some(n)) => n,
            Ok(None) => continue,
            Err(_) => return,
        };
        if swallow || inner.blackhole.load(Ordering::SeqCst) {
            buf.clear();
            continue;
        }
        if raw {
            if write_all(inner, conn, &mut upstream, &chunk[..n]).is_err() {
                return;
            }
            continue;
        }
        buf.extend_from_slice(&chunk[..n]);

        let mut out: Vec<u8> = Vec::new();
        let mut at = 0;
        while at < buf.len() {
            let rest = &buf[at..];
            let (len, args) = match parse_command(rest) {
                Parsed::Incomplete => break,
                Parsed::Invalid => {
                    // Not RESP we understand: stop interpreting, let the server judge.
                    lock(&conn.state).passthrough = true;
                    raw = true;
                    out.extend_from_slice(rest);
                    at = buf.len();
                    break;
                }
                Parsed::Complete(len, args) => (len, args),
            };
            let cmd = &rest[..len];
            if args.is_empty() {
                // Empty command (`*0`, blank inline line): the server sends no reply.
                out.extend_from_slice(cmd);
                at += len;
                continue;
            }
            if ends_pairing(&args) {
                lock(&conn.state).passthrough = true;
                raw = true;
                out.extend_from_slice(rest);
                at = buf.len();
                break;
            }
            let fault = inner.match_rules(cmd);
            match fault {
                None | Some(Fault::DropReply) | Some(Fault::Delay(_)) | Some(Fault::Dribble(_)) => {
                    lock(&conn.state).pending.push_back(fault);
                    out.extend_from_slice(cmd);
                    at += len;
                }
                Some(Fault::DropReplyAndClose) => {
                    lock(&conn.state).pending.push_back(fault);
                    out.extend_from_slice(cmd);
                    swallow = true;
                    at = buf.len();
                }
                Some(Fault::CloseBeforeForward) => {
                    let _ = write_all(inner, conn, &mut upstream, &out);
                    return;
                }
                Some(Fault::Blackhole) => {
                    swallow = true;
                    at = buf.len();
                }
                Some(Fault::Hold(d)) => {
                    // What came before it goes now; it goes after `d`.
                    if write_all(inner, conn, &mut upstream, &out).is_err() {
                        return;
                    }
                    out.clear();
                    if !sleep_until(inner, conn, Instant::now() + d) {
                        return;
                    }
                    lock(&conn.state).pending.push_back(None);
                    out.extend_from_slice(cmd);
                    at += len;
                }
            }
        }
        if !out.is_empty() && write_all(inner, conn, &mut upstream, &out).is_err() {
            return;
        }
        buf.drain(..at);
    }
}

/// Server → client: split into replies, pair each with its command, act.
fn server_side(inner: &Inner, conn: &Conn, mut client: TcpStream, mut upstream: TcpStream) {
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut buf: Vec<u8> = Vec::new();
    let mut raw = false;
    while !inner.stopping() && !conn.is_closed() {
        let n = match read_some(&mut upstream, &mut chunk) {
            Ok(Some(n)) => n,
            Ok(None) => continue,
            Err(_) => return,
        };
        let arrived = Instant::now();
        if raw {
            if deliver(inner, conn, &mut client, &chunk[..n]).is_err() {
                return;
            }
            continue;
        }
        buf.extend_from_slice(&chunk[..n]);

        let mut out: Vec<u8> = Vec::new();
        let mut at = 0;
        while at < buf.len() {
            let rest = &buf[at..];
            {
                let st = lock(&conn.state);
                if st.passthrough && st.pending.is_empty() {
                    raw = true;
                }
            }
            let len = match (raw, value_len(rest)) {
                (false, Parsed::Complete(len, ())) => len,
                (false, Parsed::Incomplete) => break,
                (true, _) | (false, Parsed::Invalid) => {
                    raw = true;
                    out.extend_from_slice(rest);
                    at = buf.len();
                    break;
                }
            };
            let reply = &rest[..len];
            // RESP3 pushes (`>`) are not replies to a command.
            let fault = if reply[0] == b'>' {
                None
            } else {
                lock(&conn.state).pending.pop_front().flatten()
            };
            match fault {
                Some(Fault::DropReply) => {}
                Some(Fault::DropReplyAndClose) => {
                    let _ = write_all(inner, conn, &mut client, &out);
                    return;
                }
                Some(Fault::Delay(d)) => {
                    if write_all(inner, conn, &mut client, &out).is_err() {
                        return;
                    }
                    out.clear();
                    if !sleep_until(inner, conn, arrived + d) {
                        return;
                    }
                    out.extend_from_slice(reply);
                }
                Some(Fault::Dribble(gap)) => {
                    if write_all(inner, conn, &mut client, &out).is_err() {
                        return;
                    }
                    out.clear();
                    for byte in reply.chunks(1) {
                        if !sleep_until(inner, conn, Instant::now() + gap)
                            || write_all(inner, conn, &mut client, byte).is_err()
                        {
                            return;
                        }
                    }
                }
                _ => out.extend_from_slice(reply),
            }
            at += len;
        }
        if !out.is_empty() && deliver(inner, conn, &mut client, &out).is_err() {
            return;
        }
        buf.drain(..at);
    }
}

/// Server → client bytes, dribbled while `set_dribble` is on.
fn deliver(inner: &Inner, conn: &Conn, client: &mut TcpStream, bytes: &[u8]) -> io::Result<()> {
    let us = inner.dribble_us.load(Ordering::SeqCst);
    if us == 0 {
        return write_all(inner, conn, client, bytes);
    }
    for byte in bytes.chunks(1) {
        if !sleep_until(inner, conn, Instant::now() + Duration::from_micros(us)) {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        write_all(inner, conn, client, byte)?;
    }
    Ok(())
}

/// Commands after which replies no longer pair up one-to-one with commands.
fn ends_pairing(args: &[&[u8]]) -> bool {
    let is = |i: usize, name: &str| {
        args.get(i)
            .is_some_and(|a| a.eq_ignore_ascii_case(name.as_bytes()))
    };
    is(0, "SUBSCRIBE")
        || is(0, "SSUBSCRIBE")
        || is(0, "PSUBSCRIBE")
        || is(0, "MONITOR")
        || (is(0, "CLIENT") && is(1, "REPLY"))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

enum Parsed<T> {
    /// Length in bytes of the complete item at the start of the buffer.
    Complete(usize, T),
    Incomplete,
    Invalid,
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i)
}

/// A length or count, bounded so that arithmetic on it cannot overflow
/// (Redis caps bulk strings at 512 MB anyway).
fn parse_int(s: &[u8]) -> Option<i64> {
    let n: i64 = std::str::from_utf8(s).ok()?.parse().ok()?;
    (n.abs() <= 1 << 40).then_some(n)
}

/// One client command: an array of bulk strings, or an inline line. Gives
/// its length and its first two arguments (fewer if it has fewer).
fn parse_command(buf: &[u8]) -> Parsed<Vec<&[u8]>> {
    if buf.is_empty() {
        return Parsed::Incomplete;
    }
    if buf[0] == 0x16 {
        // A TLS handshake record: nothing to interpret on this connection.
        return Parsed::Invalid;
    }
    if buf[0] != b'*' {
        // Inline command: one line, arguments split on whitespace.
        let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
            return Parsed::Incomplete;
        };
        let args = buf[..nl]
            .split(|b| b.is_ascii_whitespace())
            .filter(|a| !a.is_empty())
            .take(2)
            .collect();
        return Parsed::Complete(nl + 1, args);
    }
    let Some(end) = find_crlf(buf, 1) else {
        return Parsed::Incomplete;
    };
    let Some(count) = parse_int(&buf[1..end]) else {
        return Parsed::Invalid;
    };
    let mut pos = end + 2;
    let mut args = Vec::new();
    for i in 0..count.max(0) {
        if pos >= buf.len() {
            return Parsed::Incomplete;
        }
        if buf[pos] != b'$' {
            return Parsed::Invalid;
        }
        let Some(end) = find_crlf(buf, pos + 1) else {
            return Parsed::Incomplete;
        };
        let len = match parse_int(&buf[pos + 1..end]) {
            Some(l) if l >= 0 => l as usize,
            _ => return Parsed::Invalid,
        };
        let start = end + 2;
        let stop = start + len;
        if buf.len() < stop + 2 {
            return Parsed::Incomplete;
        }
        if &buf[stop..stop + 2] != b"\r\n" {
            return Parsed::Invalid;
        }
        if i < 2 {
            args.push(&buf[start..stop]);
        }
        pos = stop + 2;
    }
    Parsed::Complete(pos, args)
}

/// Length of one complete RESP2/RESP3 value at the start of `buf`
/// (aggregates including all their nested elements; an attribute `|`
/// together with the value it annotates).
fn value_len(buf: &[u8]) -> Parsed<()> {
    let mut pos = 0;
    let mut todo: u64 = 1; // values still to read
    while todo > 0 {
        todo -= 1;
        if pos >= buf.len() {
            return Parsed::Incomplete;
        }
        let kind = buf[pos];
        let Some(end) = find_crlf(buf, pos + 1) else {
            return Parsed::Incomplete;
        };
        let line = &buf[pos + 1..end];
        pos = end + 2;
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'(' | b'#' => {}
            b'$' | b'!' | b'=' => match parse_int(line) {
                Some(n) if n < 0 => {} // null bulk `$-1`
                Some(n) => {
                    let stop = pos + n as usize;
                    if buf.len() < stop + 2 {
                        return Parsed::Incomplete;
                    }
                    if &buf[stop..stop + 2] != b"\r\n" {
                        return Parsed::Invalid;
                    }
                    pos = stop + 2;
                }
                None => return Parsed::Invalid,
            },
            b'*' | b'~' | b'>' => match parse_int(line) {
                Some(n) if n <= 0 => {} // empty or null `*-1`
                Some(n) => todo += n as u64,
                None => return Parsed::Invalid,
            },
            b'%' => match parse_int(line) {
                Some(n) if n >= 0 => todo += 2 * n as u64,
                _ => return Parsed::Invalid,
            },
            b'|' => match parse_int(line) {
                Some(n) if n >= 0 => todo += 2 * n as u64 + 1,
                _ => return Parsed::Invalid,
            },
            // Includes RESP3 streamed aggregates (`$?`), which Redis does not send.
            _ => return Parsed::Invalid,
        }
    }
    Parsed::Complete(pos, ())
}
