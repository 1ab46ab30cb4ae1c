//! Real network partitions: a server in a network namespace of its own,
//! clients in another, joined by one veth pair whose TEST-NET-1 addresses
//! (192.0.2.0/30) exist only inside those two namespaces — the machine's
//! own interfaces and routes are never touched (on these machines the
//! host itself sits in 192.0.2.0/24, so nothing here may live in the host
//! namespace). A partition sets the server's end of the pair down: the
//! client's end keeps its route and loses its carrier, so what the client
//! sends is dropped — no RST, no FIN, no error — and a read waits until
//! its deadline, as across a real partition. Healing sets it up again.
//!
//! Clients run as worker processes started inside the client namespace
//! ([`crate::common::worker::Worker::spawn_in`]); a second client with a
//! path that is never cut runs in the server's namespace (127.0.0.1).
//! Everything is removed on drop, on failure too: the server is killed
//! and both namespaces deleted (which deletes the pair).

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The server's address on the pair, seen from the client namespace.
pub const SERVER_IP: &str = "192.0.2.2";
const CLIENT_IP: &str = "192.0.2.1";
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

pub struct Net {
    pub server_ns: String,
    pub client_ns: String,
    server_end: String,
    server: Option<Child>,
}

impl Net {
    /// Two namespaces joined by a veth pair, and a redis-server in the
    /// server's, listening on the pair and on its own loopback. `Err` says
    /// why the machine cannot (not root, no namespaces, no `ip`): the
    /// caller skips, visibly.
    pub fn new(server_args: &[&str]) -> Result<Net, String> {
        static N: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "rl{}x{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let (s, c) = (format!("{tag}s"), format!("{tag}c"));
        ip(&["netns", "add", &s])?;
        let mut net = Net {
            server_ns: s.clone(),
            client_ns: c.clone(),
            server_end: format!("{tag}v"),
            server: None,
        };
        ip(&["netns", "add", &c])?;
        // Made inside the client namespace with its peer straight in the
        // server's: neither end ever exists in the host namespace.
        let client_end = format!("{tag}w");
        ip(&[
            "-n",
            &c,
            "link",
            "add",
            &client_end,
            "type",
            "veth",
            "peer",
            "name",
            &net.server_end,
            "netns",
            &s,
        ])?;
        ip(&[
            "-n",
            &s,
            "addr",
            "add",
            &format!("{SERVER_IP}/30"),
            "dev",
            &net.server_end,
        ])?;
        ip(&[
            "-n",
            &c,
            "addr",
            "add",
            &format!("{CLIENT_IP}/30"),
            "dev",
            &client_end,
        ])?;
        for (ns, dev) in [(&s, net.server_end.as_str()), (&c, client_end.as_str())] {
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        let mut cmd = Command::new(super::server_binary());
        cmd.args([
            "--port",
            &PORT.to_string(),
            "--bind",
            SERVER_IP,
            "127.0.0.1",
        ])
        .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
        .args(server_args)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        enter_on_exec(&mut cmd, &s);
        net.server = Some(cmd.spawn().map_err(|e| format!("redis-server: {e}"))?);
        net.wait_ready()?;
        Ok(net)
    }

    /// The server as the client namespace reaches it.
    pub fn url(&self) -> String {
        format!("redis://{SERVER_IP}:{PORT}/")
    }

    /// The server as its own namespace reaches it (never partitioned).
    pub fn local_url(&self) -> String {
        format!("redis://127.0.0.1:{PORT}/")
    }

    fn wait_ready(&self) -> Result<(), String> {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            let out = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &self.server_ns,
                    "redis-cli",
                    "-p",
                    &PORT.to_string(),
                    "ping",
                ])
                .output();
            if out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("PONG")) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err("the server in the namespace did not answer".into())
    }

    /// Cuts the pair: the client's packets vanish from now on.
    pub fn partition(&self) {
        ip(&[
            "-n",
            &self.server_ns,
            "link",
            "set",
            &self.server_end,
            "down",
        ])
        .unwrap();
    }

    /// Joins the pair again.
    pub fn heal(&self) {
        ip(&["-n", &self.server_ns, "link", "set", &self.server_end, "up"]).unwrap();
    }

    /// A command run with `redis-cli` inside the server's namespace.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.server_ns,
                "redis-cli",
                "-p",
                &PORT.to_string(),
            ])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        // Deleting a namespace deletes the veth end in it, and with it the
        // pair. Best effort: a failure here must not hide the test's own.
        let _ = ip(&["netns", "del", &self.server_ns]);
        let _ = ip(&["netns", "del", &self.client_ns]);
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
