//! Test support: real `redis-server` processes on free loopback ports,
//! spawned through `redis-test`, with the fault controls the tests need
//! (kill, pause, restart on the same port).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use redis_test::server::RedisServer;
pub mod proxy;
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
    pub fn start_with(extra: &[&str]) -> Server {
        let port = redis_test::utils::get_random_available_port();
        let mut s = Server {
            inner: None,
            port,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
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
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(mut c) = redis::Client::open(self.url()).and_then(|c| c.get_connection()) {
                match redis::cmd("PING").query::<String>(&mut c) {
                    // A server error (NOAUTH) also proves the server is up.
                    Ok(_) => return,
                    Err(e) if e.code().is_some() => return,
                    Err(_) => {}
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not start", self.port);
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
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
pub fn set_acl_user(con: &mut redis::Connection, user: &str, rules: &str) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(user);
    for part in rules.split_whitespace() {
        cmd.arg(part);
    }
    let _: () = cmd.query(con).unwrap();
}

/// A script of `lua/` as the library sends it: the preludes named in its
/// `-- Uses` header line, then the file itself (see src/scripts.rs).
#[allow(dead_code)]
pub fn lua_source(file: &str) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
    let body = std::fs::read_to_string(format!("{dir}/{file}")).unwrap();
    let uses = body
        .lines()
        .take_while(|l| l.starts_with("--"))
        .find_map(|l| l.strip_prefix("-- Uses"))
        .unwrap_or("")
        .to_owned();
    let mut code = String::new();
    for name in uses.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        code.push_str(&std::fs::read_to_string(format!("{dir}/{name}")).unwrap());
        code.push('\n');
    }
    code.push_str(&body);
    code
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

/// Every command's call count on the server (`INFO commandstats`: calls
/// made inside scripts included), by name.
#[allow(dead_code)]
pub fn commandstats(con: &mut redis::Connection) -> std::collections::BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
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
