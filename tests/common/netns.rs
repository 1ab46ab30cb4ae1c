//! Real network partitions: servers and clients each in a network
//! namespace of their own, every client joined to every server by a veth
//! pair whose TEST-NET-1 addresses (192.0.2.0/24, a /30 per pair) exist
//! only inside those namespaces — the machine's own interfaces and routes
//! are never touched (on these machines the host itself sits in
//! 192.0.2.0/24, so nothing here may live in the host namespace). Cutting
//! a pair sets its server end down: the client's end keeps its route and
//! loses its carrier, so what the client sends is dropped — no RST, no
//! FIN, no error — and a read waits until its deadline, as across a real
//! partition. Joining sets it up again.
//!
//! Clients run as worker processes started inside a client namespace
//! ([`crate::common::worker::Worker::spawn_in`]); a client whose path is
//! never cut runs in a server's namespace (127.0.0.1). Everything is
//! removed on drop, on failure too: the servers are killed and every
//! namespace deleted (which deletes the pairs).

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The port every server listens on (each has its own namespace).
pub const PORT: u16 = 6379;

/// Makes `cmd`'s child enter the network namespace `ns` before it runs.
pub fn enter_on_exec(cmd: &mut Command, ns: &str) {
    let path = std::ffi::CString::new(format!("/run/netns/{ns}")).unwrap();
    // SAFETY: between fork and exec only async-signal-safe calls: open(2),
    // setns(2), close(2).
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let r = libc::setns(fd, libc::CLONE_NEWNET);
            libc::close(fd);
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("`ip` could not run ({e}): install iproute2"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Servers and clients, each in a namespace of its own, every client
/// joined to every server by a veth pair of its own (192.0.2.4k+1 on the
/// client's end, 192.0.2.4k+2 on the server's, /30): a partition cuts one
/// client off from one server and nothing else.
pub struct Net {
    servers: Vec<String>,
    clients: Vec<String>,
    /// `(client, server)` → the server's end of their pair.
    ends: Vec<((usize, usize), String)>,
    running: Vec<Child>,
}

impl Net {
    /// One server and one client namespace (see [`Net::mesh`]).
    pub fn new(server_args: &[&str]) -> Result<Net, String> {
        Net::mesh(1, 1, server_args)
    }

    /// `servers` redis-servers and `clients` client namespaces, fully
    /// joined; each server listens on its ends and its own loopback.
    /// `Err` says why the machine cannot (not root, no namespaces, no
    /// `ip`): the caller skips, visibly.
    pub fn mesh(servers: usize, clients: usize, server_args: &[&str]) -> Result<Net, String> {
        static N: AtomicU32 = AtomicU32::new(0);
        assert!(servers * clients <= 60, "addresses for 60 pairs at most");
        let tag = format!(
            "rl{}x{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut net = Net {
            servers: Vec::new(),
            clients: Vec::new(),
            ends: Vec::new(),
            running: Vec::new(),
        };
        // Pushed as soon as made, so that a failure half-way is undone.
        for i in 0..servers {
            let ns = format!("{tag}s{i}");
            ip(&["netns", "add", &ns])?;
            net.servers.push(ns);
        }
        for i in 0..clients {
            let ns = format!("{tag}c{i}");
            ip(&["netns", "add", &ns])?;
            net.clients.push(ns);
        }
        for ns in net.servers.iter().chain(&net.clients) {
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        for c in 0..clients {
            for s in 0..servers {
                let k = c * servers + s;
                let (cend, send) = (format!("{tag}a{k}"), format!("{tag}b{k}"));
                let (cns, sns) = (net.clients[c].clone(), net.servers[s].clone());
                // Made inside the client's namespace with its peer straight
                // in the server's: neither end ever exists in the host's.
                ip(&[
                    "-n", &cns, "link", "add", &cend, "type", "veth", "peer", "name", &send,
                    "netns", &sns,
                ])?;
                net.ends.push(((c, s), send.clone()));
                ip(&[
                    "-n",
                    &cns,
                    "addr",
                    "add",
                    &format!("{}/30", addr(k, 1)),
                    "dev",
                    &cend,
                ])?;
                ip(&[
                    "-n",
                    &sns,
                    "addr",
                    "add",
                    &format!("{}/30", addr(k, 2)),
                    "dev",
                    &send,
                ])?;
                ip(&["-n", &cns, "link", "set", &cend, "up"])?;
                ip(&["-n", &sns, "link", "set", &send, "up"])?;
            }
        }
        for s in 0..servers {
            let mut binds = vec!["127.0.0.1".to_string()];
            binds.extend((0..clients).map(|c| addr(c * servers + s, 2)));
            let mut cmd = Command::new(super::server_binary());
            cmd.args(["--port", &PORT.to_string(), "--bind"])
                .args(&binds)
                .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                .args(server_args)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            enter_on_exec(&mut cmd, &net.servers[s]);
            net.running
                .push(cmd.spawn().map_err(|e| format!("redis-server: {e}"))?);
        }
        for s in 0..servers {
            net.wait_ready(s)?;
        }
        Ok(net)
    }

    /// The client namespace `c`'s name (for `Worker::spawn_in`).
    pub fn client_ns(&self, c: usize) -> &str {
        &self.clients[c]
    }

    /// Server `s`'s namespace's name.
    pub fn server_ns(&self, s: usize) -> &str {
        &self.servers[s]
    }

    /// Server `s` as client namespace `c` reaches it.
    pub fn url_from(&self, c: usize, s: usize) -> String {
        format!("redis://{}:{PORT}/", addr(c * self.servers.len() + s, 2))
    }

    /// Every server as client namespace `c` reaches them, comma-separated
    /// (for Redlock).
    pub fn urls_from(&self, c: usize) -> Vec<String> {
        (0..self.servers.len())
            .map(|s| self.url_from(c, s))
            .collect()
    }

    /// The server as client namespace 0 reaches it (one-server nets).
    pub fn url(&self) -> String {
        self.url_from(0, 0)
    }

    /// A server as its own namespace reaches it (never partitioned).
    pub fn local_url(&self) -> String {
        format!("redis://127.0.0.1:{PORT}/")
    }

    fn wait_ready(&self, s: usize) -> Result<(), String> {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if self.cli(s, &["ping"]).contains("PONG") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("server {s} in its namespace did not answer"))
    }

    fn end(&self, c: usize, s: usize) -> &str {
        &self
            .ends
            .iter()
            .find(|(k, _)| *k == (c, s))
            .expect("a pair for every client and server")
            .1
    }

    /// Cuts client `c` off from server `s`: its packets vanish from now on.
    pub fn cut(&self, c: usize, s: usize) {
        ip(&[
            "-n",
            &self.servers[s],
            "link",
            "set",
            self.end(c, s),
            "down",
        ])
        .unwrap();
    }

    /// Joins client `c` and server `s` again.
    pub fn join(&self, c: usize, s: usize) {
        ip(&["-n", &self.servers[s], "link", "set", self.end(c, s), "up"]).unwrap();
    }

    /// Cuts the one client off from the one server.
    pub fn partition(&self) {
        self.cut(0, 0);
    }

    /// Heals [`Net::partition`].
    pub fn heal(&self) {
        self.join(0, 0);
    }

    /// A command run with `redis-cli` inside server `s`'s namespace.
    pub fn cli(&self, s: usize, args: &[&str]) -> String {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.servers[s],
                "redis-cli",
                "-p",
                &PORT.to_string(),
            ])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }
}

/// The address of end `side` (1: client, 2: server) of pair `k`.
fn addr(k: usize, side: usize) -> String {
    format!("192.0.2.{}", 4 * k + side)
}

impl Drop for Net {
    fn drop(&mut self) {
        for mut s in self.running.drain(..) {
            let _ = s.kill();
            let _ = s.wait();
        }
        // Deleting a namespace deletes the veth ends in it, and with them
        // the pairs. Best effort: a failure here must not hide the test's.
        for ns in self.servers.iter().chain(&self.clients) {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// A clock every process on the machine shares (CLOCK_MONOTONIC), in µs:
/// workers stamp what they saw with it, and the test orders the stamps.
pub fn now_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}
