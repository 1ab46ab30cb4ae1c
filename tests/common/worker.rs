//! Child processes: the test binary re-run as a worker (`--exact <entry>`),
//! told what to do through its environment and stdin, answering with
//! `@@ <message>` lines on stdout. Killing one is how tests kill a client.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crossbeam_channel::Receiver;

pub struct Worker {
    child: Child,
    pub lines: Receiver<String>,
}

impl Worker {
    /// Runs the test `entry` of this binary in a child with `env` set.
    pub fn spawn(entry: &str, env: &[(&str, String)]) -> Worker {
        Worker::spawn_in(None, entry, env)
    }

    /// [`Worker::spawn`] inside the network namespace `netns` (a name
    /// under /run/netns, see `common::netns`): every socket the child opens
    /// is in it, so it reaches only what that namespace reaches.
    pub fn spawn_in(netns: Option<&str>, entry: &str, env: &[(&str, String)]) -> Worker {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        if let Some(ns) = netns {
            super::netns::enter_on_exec(&mut cmd, ns);
        }
        cmd.args(["--exact", entry, "--nocapture", "--test-threads", "1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                // libtest may print "test <entry> ... " on the same line.
                if let Some(at) = line.find("@@ ") {
                    if tx.send(line[at + 3..].to_string()).is_err() {
                        return;
                    }
                }
            }
        });
        Worker { child, lines: rx }
    }

    /// The next message, waiting at most `limit`.
    pub fn next(&self, limit: Duration) -> String {
        self.lines
            .recv_timeout(limit)
            .unwrap_or_else(|_| panic!("worker said nothing for {limit:?}"))
    }

    pub fn tell(&mut self, line: &str) {
        if let Some(stdin) = self.child.stdin.as_mut() {
            let _ = writeln!(stdin, "{line}");
            let _ = stdin.flush();
        }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child side: says `msg` to the parent.
pub fn say(msg: impl std::fmt::Display) {
    println!("@@ {msg}");
    let _ = std::io::stdout().flush();
}
