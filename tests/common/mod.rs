//! Test support: real `redis-server` processes on free loopback ports,
//! spawned through `redis-test`, with the fault controls the tests need
//! (kill, pause, restart on the same port).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use redis_test::server::RedisServer;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod monitor;
pub mod namings;
pub mod netns;
pub mod proxy;
#[cfg(feature = "cli")]
pub mod pty;
pub mod worker;

pub struct Server {
    inner: Option<RedisServer>,
    port: u16,
    extra: Vec<String>,
}

impl Server {
    /// A fresh server on a free port, ready to answer.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// A fresh server with extra `redis-server` arguments.
    ///
    /// The port is free when picked but may be taken before the server
    /// binds it (an outgoing connection of another test is given ports
    /// from the same range), so a server that exits at start is tried
    /// again on another port.
    pub fn start_with(extra: &[&str]) -> Server {
        let mut failures = Vec::new();
        for _ in 0..5 {
            let mut s = Server {
                inner: None,
                port: redis_test::utils::get_random_available_port(),
                extra: extra.iter().map(|s| s.to_string()).collect(),
            };
            match s.try_spawn() {
                Ok(()) => return s,
                Err(why) => failures.push(why),
            }
        }
        panic!("redis-server did not start: {}", failures.join("; "));
    }

    fn spawn(&mut self) {
        if let Err(why) = self.try_spawn() {
            panic!("{why}");
        }
    }

    /// Starts the server on `self.port` and waits until it answers; the
    /// error says why not, with the end of the server's log.
    fn try_spawn(&mut self) -> Result<(), String> {
        let extra = self.extra.clone();
        let server = RedisServer::new_with_addr_tls_modules_and_spawner(
            redis::ConnectionAddr::Tcp("127.0.0.1".into(), self.port),
            None,
            None,
            false,
            None,
            &[],
            |cmd| {
                cmd.args(&extra);
                cmd.spawn().expect("redis-server must be installed")
            },
        );
        self.inner = Some(server);
        let ready = self.wait_ready();
        if ready.is_err() {
            // Leave nothing running on a port we are giving up.
            self.stop();
        }
        ready
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let end = Instant::now() + Duration::from_secs(10);
        let plain = format!("redis://127.0.0.1:{}/", self.port);
        while Instant::now() < end {
            if let Ok(mut c) = redis::Client::open(plain.as_str()).and_then(|c| c.get_connection())
            {
                match redis::cmd("PING").query::<String>(&mut c) {
                    // A server error (NOAUTH) also proves the server is up.
                    Ok(_) => return Ok(()),
                    Err(e) if e.code().is_some() => return Ok(()),
                    Err(_) => {}
                }
            }
            let server = self.inner.as_mut().expect("server spawned");
            if let Ok(Some(status)) = server.process.try_wait() {
                return Err(format!(
                    "redis-server on port {} exited ({status}): {}",
                    self.port,
                    log_tail(server)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let server = self.inner.as_ref().expect("server spawned");
        Err(format!(
            "redis-server on port {} did not answer within 10 s: {}",
            self.port,
            log_tail(server)
        ))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's URL; RESP3 (`?protocol=resp3`) when
    /// `REDLEASE_TEST_RESP3` is set, so the suite can run in either.
    pub fn url(&self) -> String {
        let resp3 = if std::env::var_os("REDLEASE_TEST_RESP3").is_some() {
            "?protocol=resp3"
        } else {
            ""
        };
        format!("redis://127.0.0.1:{}/{resp3}", self.port)
    }

    pub fn pid(&self) -> i32 {
        self.inner.as_ref().expect("server running").process.id() as i32
    }

    /// A plain connection for inspecting or sabotaging the server.
    pub fn con(&self) -> redis::Connection {
        let c = redis::Client::open(self.url()).unwrap();
        let con = c
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        con
    }

    pub fn stop(&mut self) {
        if let Some(mut s) = self.inner.take() {
            s.stop();
        }
    }

    /// Kills the server (no persistence: all data is gone) and starts a new
    /// one on the same port.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn pause(&self) {
        unsafe { libc::kill(self.pid(), libc::SIGSTOP) };
    }

    pub fn resume(&self) {
        unsafe { libc::kill(self.pid(), libc::SIGCONT) };
    }
}

/// The last lines of a server's log, for a failure message.
fn log_tail(server: &RedisServer) -> String {
    let log = server.log_file_contents().unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

/// A TLS-only redis-server on a free port with a CA made now (needs
/// `openssl`); with `mtls`, it also requires client certificates
/// (`tls-auth-clients yes`). Keep the directory alive as long as the server.
#[allow(dead_code)]
pub fn tls_server(
    mtls: bool,
) -> (
    redis_test::server::RedisServer,
    redis_test::utils::TlsFilePaths,
    tempfile::TempDir,
    String,
) {
    let dir = tempfile::Builder::new()
        .prefix("redlease-tls")
        .tempdir()
        .unwrap();
    let certs = redis_test::utils::build_keys_and_certs_for_tls(&dir);
    let port = redis_test::utils::get_random_available_port();
    let server = RedisServer::new_with_addr_tls_modules_and_spawner(
        redis::ConnectionAddr::TcpTls {
            host: "127.0.0.1".into(),
            port,
            insecure: false,
            tls_params: None,
        },
        None,
        Some(certs.clone()),
        mtls,
        None,
        &[],
        |cmd| cmd.spawn().expect("redis-server must be installed"),
    );
    (server, certs, dir, format!("rediss://127.0.0.1:{port}/"))
}

/// The server's clock in milliseconds (a queue's deadlines are on it, so
/// entries planted by a test must be too).
pub fn server_ms(con: &mut redis::Connection) -> u64 {
    let t: Vec<String> = redis::cmd("TIME").query(con).unwrap();
    t[0].parse::<u64>().unwrap() * 1000 + t[1].parse::<u64>().unwrap() / 1000
}

/// Plants `member` as a waiter alive for another minute and not blocked
/// right now: its arrival in `queue` (left out where `None`) and its
/// deadline, on the server's clock, in `deadlines`.
#[allow(dead_code)]
pub fn plant_live_waiter(
    con: &mut redis::Connection,
    queue: Option<&str>,
    deadlines: &str,
    member: &str,
) {
    let deadline = server_ms(con) + 60_000;
    if let Some(queue) = queue {
        let _: () = redis::cmd("ZADD")
            .arg(queue)
            .arg(1)
            .arg(member)
            .query(con)
            .unwrap();
    }
    let _: () = redis::cmd("ZADD")
        .arg(deadlines)
        .arg(deadline)
        .arg(member)
        .query(con)
        .unwrap();
}

/// The keys matching `pattern` still there after waiting up to `limit`
/// for them all to go (a finished latch's opening list lapses by itself
/// within a second); empty when they went.
#[allow(dead_code)]
pub fn keys_left(server: &Server, pattern: &str, limit: Duration) -> Vec<String> {
    let mut con = server.con();
    let mut left = Vec::new();
    eventually(limit, || {
        left = redis::cmd("KEYS").arg(pattern).query(&mut con).unwrap();
        left.is_empty()
    });
    left
}

/// Polls `cond` every 5 ms until it holds or `limit` passes.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn client(server: &Server) -> redlease::Client {
    redlease::Client::open(server.url()).unwrap()
}

/// A client of `server` with the builder adjusted by `f`, e.g. a short
/// watchdog: `client_with(&server, |b| b.watchdog_timeout(ms(300)))`.
pub fn client_with(
    server: &Server,
    f: impl FnOnce(redlease::ClientBuilder) -> redlease::ClientBuilder,
) -> redlease::Client {
    f(redlease::Client::builder().url(server.url()))
        .build()
        .unwrap()
}

/// The README's ACL line, for the prefix `myapp:` (a user's rules after
/// `ACL SETUSER app`).
#[allow(dead_code)]
pub const README_ACL: &str = "on >s3cret resetkeys ~myapp:* resetchannels &myapp:redlease:wake* \
    -@all +ping +evalsha +eval +script|load +exists +scan +subscribe +wait \
    +publish +time +get +set +del +incr +pexpire +pttl +type \
    +zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zcard +zcount +zscore \
    +blpop +blmove +lpop +rpush +cluster|slots +spublish +ssubscribe +sunsubscribe";

/// `ACL SETUSER user <rules>` on `con` (rules as in an ACL line).
#[allow(dead_code)]
///
/// Before Redis 7.0 the sharded pub/sub commands do not exist and the
/// server refuses a line naming them: they are left out there, as the
/// README tells users of Redis 6.2 to do.
pub fn set_acl_user(con: &mut redis::Connection, user: &str, rules: &str) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(user);
    let sharded = ["+spublish", "+ssubscribe", "+sunsubscribe"];
    let old = !has_sharded_pubsub();
    for part in rules
        .split_whitespace()
        .filter(|p| !(old && sharded.contains(p)))
    {
        cmd.arg(part);
    }
    let _: () = cmd.query(con).unwrap();
}

/// A script of `lua/` as the library sends it (see src/scripts.rs): what
/// an `EVALSHA` of the library names.
#[allow(dead_code)]
pub fn lua_source(file: &str) -> String {
    redlease::__sent_code(file)
        .unwrap_or_else(|| panic!("no script {file}"))
        .to_owned()
}

/// The SHA1 a script is sent under (`EVALSHA <sha>`): what a proxy rule
/// matches.
#[allow(dead_code)]
pub fn script_sha(file: &str) -> Vec<u8> {
    redis::Script::new(&lua_source(file))
        .get_hash()
        .as_bytes()
        .to_vec()
}

/// A client that never polls: only a grant (or a message) can wake its
/// waiters.
#[allow(dead_code)]
pub fn no_poll(url: &str) -> redlease::Client {
    redlease::Client::builder()
        .url(url)
        .fallback_poll(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// [`no_poll`], giving up on a silent server after 2 s (a client behind a
/// proxy that will blackhole it).
#[allow(dead_code)]
pub fn via(url: &str) -> redlease::Client {
    redlease::Client::builder()
        .url(url)
        .fallback_poll(Duration::from_secs(60))
        .response_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// One count of the server's `INFO clients` now (`blocked_clients`,
/// `connected_clients`, ...); 0 if absent.
#[allow(dead_code)]
pub fn clients_info(con: &mut redis::Connection, field: &str) -> usize {
    let info: String = redis::cmd("INFO").arg("clients").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Clients blocked on the server now.
#[allow(dead_code)]
pub fn blocked_clients(con: &mut redis::Connection) -> usize {
    clients_info(con, "blocked_clients")
}

/// Every command's call count on the server (`INFO commandstats`: calls
/// made inside scripts included), by name.
#[allow(dead_code)]
pub fn commandstats(con: &mut redis::Connection) -> std::collections::BTreeMap<String, u64> {
    commandstat_field(con, "calls")
}

/// One field of every command's `INFO commandstats` line (`calls`,
/// `rejected_calls` on Redis 6.2 and later, ...), by command name.
#[allow(dead_code)]
pub fn commandstat_field(
    con: &mut redis::Connection,
    field: &str,
) -> std::collections::BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    let prefix = format!("{field}=");
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let value = rest
                .split(',')
                .find_map(|f| f.strip_prefix(prefix.as_str()))?
                .parse()
                .ok()?;
            Some((name.to_string(), value))
        })
        .collect()
}

/// Commands run between two `commandstats` readings, `INFO` left out, by
/// name.
#[allow(dead_code)]
pub fn commands_between(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    after
        .iter()
        .filter(|(k, _)| k.as_str() != "info")
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// Leaves `SCRIPT LOAD`s out of `commands_between`: each new client loads
/// a script once, at its first use, which is no cost of waiting longer.
/// Redis 7 counts it as `script|load`, Redis 6.2 as `script` (all of
/// `SCRIPT`'s subcommands together; the library sends no other).
#[allow(dead_code)]
pub fn without_script_loads(between: &mut std::collections::BTreeMap<String, u64>) {
    between.remove("script|load");
    between.remove("script");
}

/// The server binary the suite runs against: `redis-server` on PATH, which
/// `scripts/test.sh` points at `$REDLEASE_SERVER` (e.g. Valkey 9.1 or
/// Redis 6.2, see `scripts/servers.sh`).
pub fn server_binary() -> String {
    std::env::var("REDISRS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into())
}

/// The server's name and version as `redis-server --version` prints them:
/// `("Redis", (7, 0, 15))`, `("Valkey", (9, 1, 2))`.
pub fn server_version() -> &'static (String, (u32, u32, u32)) {
    static V: std::sync::OnceLock<(String, (u32, u32, u32))> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let out = std::process::Command::new(server_binary())
            .arg("--version")
            .output()
            .expect("redis-server must be installed");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let name = text.split_whitespace().next().unwrap_or("?").to_string();
        let v = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .unwrap_or("0.0.0");
        let mut n = v.split('.').map(|p| p.parse().unwrap_or(0));
        let version = (
            n.next().unwrap_or(0),
            n.next().unwrap_or(0),
            n.next().unwrap_or(0),
        );
        (name, version)
    })
}

/// Whether the server binary was built with TLS: asked to listen for TLS
/// with a certificate that does not exist, a TLS build refuses at once
/// ("Failed to configure TLS"); one without TLS rejects the option or
/// ignores it.
pub fn server_has_tls() -> bool {
    static TLS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TLS.get_or_init(|| {
        let port = redis_test::utils::get_random_available_port();
        let mut child = std::process::Command::new(server_binary())
            .args(["--port", "0", "--save", "", "--tls-port"])
            .arg(port.to_string())
            .args(["--tls-cert-file", "/nonexistent/redlease.crt"])
            .args(["--tls-key-file", "/nonexistent/redlease.key"])
            .args(["--tls-ca-cert-file", "/nonexistent/redlease.ca"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("redis-server must be installed");
        // A refusal comes within milliseconds; a server that ignored the
        // option keeps running, and is stopped after the wait.
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if child.try_wait().ok().flatten().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let out = child.wait_with_output().expect("wait for the probe");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        text.contains("Failed to configure TLS")
    })
}

/// Records that the calling test did not run, and why: printed, and
/// appended to `target/tmp/skipped.log`, which `scripts/test.sh` counts
/// and prints at the end (a skip is never a silent pass).
pub fn skip(test: &str, reason: &str) {
    let (name, v) = server_version();
    let line = format!("SKIPPED {test} on {name} {}.{}.{}: {reason}", v.0, v.1, v.2);
    eprintln!("{line}");
    use std::io::Write;
    let path = concat!(env!("CARGO_TARGET_TMPDIR"), "/skipped.log");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        // One write per line: tests of several threads and processes
        // append at once, and `writeln!` may write the line and its end
        // apart (two skips ran together on one line).
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// Skips (and records) the calling test unless the server was built with
/// TLS: `if !needs_tls("my_test") { return; }`.
pub fn needs_tls(test: &str) -> bool {
    if server_has_tls() {
        return true;
    }
    skip(test, "this server binary was built without TLS");
    false
}

/// Skips (and records) the calling test unless the server is at least
/// `major.minor` (Valkey counts as Redis 7.2 and later).
pub fn needs_version(test: &str, major: u32, minor: u32, what: &str) -> bool {
    let (name, v) = server_version();
    let effective = if name == "Valkey" {
        (7.max(v.0), v.1)
    } else {
        (v.0, v.1)
    };
    if effective >= (major, minor) {
        return true;
    }
    skip(
        test,
        &format!("{what} needs Redis {major}.{minor} or later"),
    );
    false
}

/// Whether the server has sharded pub/sub (Redis 7.0 and later, Valkey).
pub fn has_sharded_pubsub() -> bool {
    let (name, v) = server_version();
    name == "Valkey" || v.0 >= 7
}

/// The arguments that let a test server run `DEBUG` (needed from Redis
/// 7.0, unknown before it, where `DEBUG` is always allowed).
pub fn debug_args() -> &'static [&'static str] {
    if has_sharded_pubsub() {
        &["--enable-debug-command", "yes"]
    } else {
        &[]
    }
}

/// The argument that sets how long a script may run before other clients
/// get `BUSY`, in ms (`busy-reply-threshold` from Redis 7.0,
/// `lua-time-limit` before).
pub fn busy_threshold_arg() -> &'static str {
    if has_sharded_pubsub() {
        "--busy-reply-threshold"
    } else {
        "--lua-time-limit"
    }
}

/// Whether `key` is a fence floor (lua/fence.lua): one per server (per slot
/// on Cluster), kept for good by design, so not a key left behind.
pub fn is_fence_floor(key: &str) -> bool {
    key.ends_with("redlease:fence-floor")
}

/// The nodes of a `redis-test` cluster as `redis://host:port/` URLs.
pub fn cluster_urls(cluster: &redis_test::cluster::RedisCluster) -> Vec<String> {
    cluster
        .iter_servers()
        .map(|s| {
            let (host, port) = s.host_and_port().unwrap();
            format!("redis://{host}:{port}/")
        })
        .collect()
}

/// A user on `server` that may run everything but the blocking commands
/// (`-@blocking`: no BLPOP, no BLMOVE), and the URL that logs in as it:
/// its waiters wait for messages.
#[allow(dead_code)]
pub fn user_without_blocking(admin: &mut redis::Connection, server: &Server) -> String {
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "noblock",
            "reset",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-@blocking",
        ])
        .query(admin)
        .unwrap();
    format!("redis://noblock:pw@127.0.0.1:{}/", server.port())
}

/// Waits (at most 5 s) until the sorted set `queue` (a name's waiters on
/// the server) holds `n` entries.
#[allow(dead_code)]
pub fn queued(con: &mut redis::Connection, queue: &str, n: usize) {
    assert!(
        eventually(Duration::from_secs(5), || redis::cmd("ZCARD")
            .arg(queue)
            .query::<usize>(con)
            .unwrap()
            == n),
        "{n} waiters never queued in {queue}"
    );
}
