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
    /// The servers' working directory: whatever they write (a full sync's
    /// RDB) goes here, never into the test's own directory.
    dir: tempfile::TempDir,
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
            dir: tempfile::tempdir().map_err(|e| e.to_string())?,
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
                .arg("--dir")
                .arg(net.dir.path())
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

/// A Redis Cluster whose nodes each live in a namespace of their own, all
/// on one bridge (in a hub namespace) with the client namespace: every
/// node reaches every other and the client, over 192.0.2.0/24 addresses
/// that exist only in these namespaces. Isolating a node sets its port on
/// the bridge down: the client *and* the other nodes lose it silently, and
/// the cluster fails it over to its replica.
pub struct ClusterNet {
    hub: String,
    client: String,
    nodes: Vec<String>,
    /// Node `i`'s port on the bridge (in the hub namespace).
    ports: Vec<String>,
    running: Vec<Child>,
    /// The nodes' working directory (RDBs of full syncs, nodes.conf).
    dir: tempfile::TempDir,
}

impl ClusterNet {
    /// `masters` masters with one replica each; `node_timeout_ms` is the
    /// cluster's failure detection time.
    pub fn start(masters: usize, node_timeout_ms: u64) -> Result<ClusterNet, String> {
        static N: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "rk{}x{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut net = ClusterNet {
            hub: format!("{tag}h"),
            client: format!("{tag}c"),
            nodes: Vec::new(),
            ports: Vec::new(),
            running: Vec::new(),
            dir: tempfile::tempdir().map_err(|e| e.to_string())?,
        };
        ip(&["netns", "add", &net.hub])?;
        ip(&["netns", "add", &net.client])?;
        ip(&["-n", &net.hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &net.hub, "link", "set", "br0", "up"])?;
        let n = masters * 2;
        // The client is .100, node i is .(10 + i).
        let attach = |ns: &str, k: usize, addr: &str| -> Result<String, String> {
            let (inner, outer) = (format!("{tag}i{k}"), format!("{tag}o{k}"));
            ip(&[
                "-n", ns, "link", "add", &inner, "type", "veth", "peer", "name", &outer, "netns",
                &net.hub,
            ])?;
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                &inner,
            ])?;
            ip(&["-n", ns, "link", "set", &inner, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", &net.hub, "link", "set", &outer, "master", "br0"])?;
            ip(&["-n", &net.hub, "link", "set", &outer, "up"])?;
            Ok(outer)
        };
        let client = net.client.clone();
        attach(&client, n, "192.0.2.100")?;
        for i in 0..n {
            let ns = format!("{tag}n{i}");
            ip(&["netns", "add", &ns])?;
            net.nodes.push(ns.clone());
            let port = attach(&ns, i, &Self::addr(i))?;
            net.ports.push(port);
        }
        for i in 0..n {
            let conf = net.dir.path().join(format!("nodes-{i}.conf"));
            let mut cmd = Command::new(super::server_binary());
            cmd.args(["--port", &PORT.to_string(), "--bind", &Self::addr(i)])
                .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                .args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(&conf)
                .arg("--dir")
                .arg(net.dir.path())
                .args(["--cluster-node-timeout", &node_timeout_ms.to_string()])
                // A replica syncs at once (the default waits 5 s for more
                // replicas): one that never synced cannot take over.
                .args(["--repl-diskless-sync-delay", "0"])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            enter_on_exec(&mut cmd, &net.nodes[i]);
            net.running
                .push(cmd.spawn().map_err(|e| format!("redis-server: {e}"))?);
        }
        let end = Instant::now() + Duration::from_secs(10);
        while (0..n).any(|i| !net.cli(i, &["ping"]).contains("PONG")) {
            if Instant::now() > end {
                return Err("cluster nodes did not start".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let addrs: Vec<String> = (0..n)
            .map(|i| format!("{}:{PORT}", Self::addr(i)))
            .collect();
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &net.client,
                "redis-cli",
                "--cluster",
                "create",
            ])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        let end = Instant::now() + Duration::from_secs(20);
        let synced = |i: usize| {
            let info = net.cli(i, &["info", "replication"]);
            info.contains("role:master") || info.contains("master_link_status:up")
        };
        // Every node knows every replica as one (gossip spreads roles a
        // while after the state turns ok): tests look replicas up from
        // any node (seen: none found 1 time in 10 under load).
        let knows_replicas = |i: usize| {
            let nodes = net.cli(i, &["cluster", "nodes"]);
            let replicas = nodes
                .lines()
                .filter(|l| {
                    l.split_whitespace()
                        .nth(2)
                        .is_some_and(|f| f.contains("slave"))
                })
                .count();
            replicas == n - masters
        };
        while (0..n).any(|i| {
            !net.cli(i, &["cluster", "info"])
                .contains("cluster_state:ok")
                || !synced(i)
                || !knows_replicas(i)
        }) {
            if Instant::now() > end {
                return Err("the cluster did not become ok with every replica in sync".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(net)
    }

    fn addr(i: usize) -> String {
        format!("192.0.2.{}", 10 + i)
    }

    /// The client namespace's name.
    pub fn client_ns(&self) -> &str {
        &self.client
    }

    /// Every node's URL, as the client reaches it.
    pub fn urls(&self) -> Vec<String> {
        (0..self.nodes.len())
            .map(|i| format!("redis://{}:{PORT}/", Self::addr(i)))
            .collect()
    }

    /// The node (index) serving `key`'s slot as master, as node `asked`
    /// sees it.
    pub fn master_of(&self, asked: usize, key: &str) -> Option<usize> {
        let slot: u16 = self.cli(asked, &["cluster", "keyslot", key]).parse().ok()?;
        let nodes = self.cli(asked, &["cluster", "nodes"]);
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            for range in &f[8..] {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
                    if a <= slot && slot <= b {
                        let ip = f[1].split(':').next()?;
                        return (0..self.nodes.len()).find(|&i| Self::addr(i) == ip);
                    }
                }
            }
        }
        None
    }

    /// The node that replicates master `m`, as node `asked` sees it.
    pub fn replica_of(&self, asked: usize, m: usize) -> Option<usize> {
        let nodes = self.cli(asked, &["cluster", "nodes"]);
        let ip_of = |line: &str| {
            line.split_whitespace()
                .nth(1)?
                .split(':')
                .next()
                .map(str::to_owned)
        };
        let id = nodes
            .lines()
            .find(|l| ip_of(l).as_deref() == Some(Self::addr(m).as_str()))?
            .split_whitespace()
            .next()?
            .to_owned();
        let line = nodes.lines().find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[2].contains("slave") && f[3] == id
        })?;
        let ip = ip_of(line)?;
        (0..self.nodes.len()).find(|&i| Self::addr(i) == ip)
    }

    /// SIGSTOPs node `i` (its replication stops where it is).
    pub fn pause(&self, i: usize) {
        // SAFETY: kill(2) on a server process this harness started.
        unsafe { libc::kill(self.running[i].id() as i32, libc::SIGSTOP) };
    }

    /// SIGCONTs node `i`.
    pub fn resume(&self, i: usize) {
        // SAFETY: as in `pause`.
        unsafe { libc::kill(self.running[i].id() as i32, libc::SIGCONT) };
    }

    /// Cuts node `i` off from everyone (client and cluster alike).
    pub fn isolate(&self, i: usize) {
        ip(&["-n", &self.hub, "link", "set", &self.ports[i], "down"]).unwrap();
    }

    /// Joins node `i` again.
    pub fn rejoin(&self, i: usize) {
        ip(&["-n", &self.hub, "link", "set", &self.ports[i], "up"]).unwrap();
    }

    /// `redis-cli` inside node `i`'s namespace, against node `i`.
    pub fn cli(&self, i: usize, args: &[&str]) -> String {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.nodes[i],
                "redis-cli",
                "-h",
                &Self::addr(i),
            ])
            .args(["-p", &PORT.to_string()])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }
}

impl Drop for ClusterNet {
    fn drop(&mut self) {
        for mut s in self.running.drain(..) {
            // SAFETY: as in `pause`: a stopped process dies on SIGKILL
            // too, but let it go on first.
            unsafe { libc::kill(s.id() as i32, libc::SIGCONT) };
            let _ = s.kill();
            let _ = s.wait();
        }
        for ns in self.nodes.iter().chain([&self.client, &self.hub]) {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
