//! `redlease run` keeps its word about the command's processes: every one
//! of them ends with redlease however redlease ends and however they
//! detach, signals reach each once, and the command is stopped before its
//! lease can end, not after the next holder is in (issue 54, items 1-4).
//!
//! Overlap is seen in a shared log: the first run's processes write `A`
//! lines until they end, the next holder writes `B`; an `A` after a `B` is
//! an overlap.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::pty::{in_pty, pty_exit, type_in};
use common::{eventually, Server};

fn redlease(server: &Server) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_redlease"));
    c.env("REDIS_URL", server.url())
        .env_remove("REDLEASE_PREFIX")
        .stdin(Stdio::null());
    c
}

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "redlease-supervision-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Whether `pid` runs (a zombie does not: it has ended, and only waits to
/// be reaped).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rfind(')')
            .and_then(|i| s[i + 1..].trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X')
    })
}

fn read_pid(file: &Path) -> i32 {
    assert!(
        eventually(Duration::from_secs(10), || std::fs::read_to_string(file)
            .is_ok_and(|s| s.trim().parse::<i32>().is_ok())),
        "the command never wrote {}",
        file.display()
    );
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// An `A` line after the first `B` line: the first holder's processes ran
/// beside the next.
fn overlaps(log: &Path) -> bool {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    match lines.iter().position(|l| l.starts_with('B')) {
        Some(b) => lines[b..].iter().any(|l| l.starts_with('A')),
        None => false,
    }
}

fn kill_if_alive(pid: i32) {
    if alive(pid) {
        // SAFETY: kill(2) on a process this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Item 1: `kill -9` of redlease. The grandchild (started through `sh`, so
/// it never had the parent-death setting) must die with it, and the next
/// run must not overlap it.
#[test]
fn a_killed_redlease_takes_every_process_of_its_command_with_it() {
    let server = Server::start();
    for round in 0..2 {
        let dir = scratch();
        let log = dir.join("log");
        let pidf = dir.join("pid");
        let job = format!(
            "sh -c 'echo $$ > {pid}; while :; do echo A >> {log}; sleep 0.05; done'; echo x",
            pid = pidf.display(),
            log = log.display()
        );
        let name = format!("k9-{round}");
        let mut first = redlease(&server)
            .args(["--watchdog", "3s", "run", &name, "--", "sh", "-c", &job])
            .spawn()
            .unwrap();
        let grandchild = read_pid(&pidf);
        std::thread::sleep(Duration::from_millis(200));
        first.kill().unwrap();
        first.wait().unwrap();
        std::thread::sleep(Duration::from_secs(1));
        let survived = alive(grandchild);
        kill_if_alive(grandchild);
        assert!(
            !survived,
            "round {round}: the grandchild outlived a killed redlease by 1 s"
        );
        let second = redlease(&server)
            .args(["--watchdog", "3s", "run", &name, "--", "sh", "-c"])
            .arg(format!(
                "echo B >> {0}; sleep 0.3; echo B >> {0}",
                log.display()
            ))
            .status()
            .unwrap();
        assert!(second.success());
        assert!(!overlaps(&log), "round {round}: the next holder overlapped");
    }
}

/// Item 2: a descendant that called `setsid` while its parent still lives
/// gets SIGTERM with the rest, once, and redlease ends with it.
#[test]
fn sigterm_reaches_a_setsid_descendant_whose_parent_still_lives() {
    let server = Server::start();
    for round in 0..3 {
        let dir = scratch();
        let log = dir.join("log");
        let pidf = dir.join("pid");
        let script = format!(
            "setsid sh -c 'echo $$ > {pid}; trap \"echo T >> {log}; exit 0\" TERM; \
             while :; do sleep 0.05; done' & while :; do sleep 0.05; done",
            pid = pidf.display(),
            log = log.display()
        );
        let name = format!("setsid-{round}");
        let mut rl = redlease(&server)
            .args(["run", &name, "--", "sh", "-c", &script])
            .spawn()
            .unwrap();
        let escapee = read_pid(&pidf);
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: kill(2) on the redlease this test started.
        unsafe { libc::kill(rl.id() as i32, libc::SIGTERM) };
        let status = wait_exit(&mut rl, Duration::from_secs(3));
        let survived = alive(escapee);
        kill_if_alive(escapee);
        if status.is_none() {
            let _ = rl.kill();
            let _ = rl.wait();
        }
        assert!(
            !survived,
            "round {round}: the setsid'd process outlived TERM"
        );
        assert!(status.is_some(), "round {round}: redlease did not end");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(
            text, "T\n",
            "round {round}: TERM must reach it exactly once"
        );
    }
}

/// A command that takes `secs` to stop after TERM, logging `A` lines until
/// it is gone.
fn slow_to_stop(log: &Path, secs: &str) -> String {
    format!(
        "trap 'i=0; while [ $i -lt {n} ]; do echo A >> {log}; sleep 0.1; i=$((i+1)); done; exit 0' TERM; \
         echo A >> {log}; while :; do sleep 0.05; done",
        n = (secs.parse::<f64>().unwrap() * 10.0) as u32,
        log = log.display()
    )
}

/// Item 3, fixed lease: the command is told early enough that it is gone
/// (`--kill-after` included) before the lease ends, so the next holder,
/// which gets in at the lease's end at the latest, never overlaps it.
#[test]
fn a_fixed_lease_stops_the_command_before_the_lease_ends() {
    let server = Server::start();
    let dir = scratch();
    let log = dir.join("log");
    let mut first = redlease(&server)
        .args(["run", "fixed", "--lease", "2s", "--kill-after", "1s", "--"])
        .args(["sh", "-c", &slow_to_stop(&log, "0.7")])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || log.exists()));
    let second = redlease(&server)
        .args(["run", "fixed", "--", "sh", "-c"])
        .arg(format!("echo B >> {}", log.display()))
        .status()
        .unwrap();
    assert!(second.success());
    let status = wait_exit(&mut first, Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(73));
    assert!(
        !overlaps(&log),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    // One that ignores TERM is killed before the lease ends, too.
    let log2 = dir.join("log2");
    let mut deaf = redlease(&server)
        .args([
            "run",
            "deaf",
            "--lease",
            "2s",
            "--kill-after",
            "500ms",
            "--",
        ])
        .arg("sh")
        .arg("-c")
        .arg(format!(
            "trap '' TERM; while :; do echo A >> {}; sleep 0.05; done",
            log2.display()
        ))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || log2.exists()));
    let second = redlease(&server)
        .args(["run", "deaf", "--", "sh", "-c"])
        .arg(format!("echo B >> {}", log2.display()))
        .status()
        .unwrap();
    assert!(second.success());
    assert_eq!(
        wait_exit(&mut deaf, Duration::from_secs(10)).and_then(|s| s.code()),
        Some(73)
    );
    assert!(
        !overlaps(&log2),
        "{}",
        std::fs::read_to_string(&log2).unwrap()
    );
}

/// Item 3, watchdog: renewals start failing (the server is paused); the
/// command is stopped while the lease surely still runs, and is gone
/// before the lease lapses on the server and the next holder gets in.
#[test]
fn failing_renewals_stop_the_command_before_the_lease_lapses() {
    let server = Server::start();
    let dir = scratch();
    let log = dir.join("log");
    let mut first = redlease(&server)
        .args(["--watchdog", "3s", "run", "renewed", "--"])
        .args(["sh", "-c", &slow_to_stop(&log, "0.8")])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || log.exists()));
    std::thread::sleep(Duration::from_millis(300));
    server.pause();
    // The lease surely lapses on the server 3 s after the last renewal,
    // which was at most 1 s before the pause.
    std::thread::sleep(Duration::from_millis(3_300));
    server.resume();
    let second = redlease(&server)
        .args(["run", "renewed", "--", "sh", "-c"])
        .arg(format!("echo B >> {}", log.display()))
        .status()
        .unwrap();
    assert!(second.success());
    let status = wait_exit(&mut first, Duration::from_secs(10));
    let mut err = String::new();
    if let Some(mut e) = first.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    assert_eq!(status.and_then(|s| s.code()), Some(73), "{err}");
    assert!(err.contains("renewals"), "{err}");
    assert!(
        !overlaps(&log),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
}

/// Item 3: a `--kill-after` the lease has no room for is refused.
#[test]
fn a_kill_after_the_lease_has_no_room_for_is_refused() {
    let server = Server::start();
    for args in [
        &[
            "run",
            "room",
            "--lease",
            "2s",
            "--kill-after",
            "5s",
            "--",
            "true",
        ][..],
        &[
            "--watchdog",
            "3s",
            "run",
            "room",
            "--kill-after",
            "10s",
            "--",
            "true",
        ],
    ] {
        let o = redlease(&server).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains("--kill-after"), "{err}");
    }
    // The default fits any lease.
    let o = redlease(&server)
        .args(["--watchdog", "900ms", "run", "room", "--", "true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Item 4: Ctrl-Z stops the command's group (the terminal sends SIGTSTP to
/// it). Refused: the command is continued at once and keeps running, and
/// a TERM afterwards ends it.
#[test]
fn a_stopped_command_is_continued_and_term_still_ends_it() {
    let server = Server::start();
    let dir = scratch();
    let log = dir.join("log");
    let pidf = dir.join("pid");
    let script = format!(
        "echo $$ > {pid}; while :; do echo A >> {log}; sleep 0.05; done",
        pid = pidf.display(),
        log = log.display()
    );
    let mut rl = redlease(&server)
        .args(["run", "tstp", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let command = read_pid(&pidf);
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: getpgid only reads.
    let group = unsafe { libc::getpgid(command) };
    // SAFETY: kill(2) on the command's group, as Ctrl-Z would.
    unsafe { libc::kill(-group, libc::SIGTSTP) };
    std::thread::sleep(Duration::from_millis(300));
    let len = std::fs::metadata(&log).unwrap().len();
    std::thread::sleep(Duration::from_millis(500));
    let grew = std::fs::metadata(&log).unwrap().len() > len;
    // SAFETY: kill(2) on the redlease this test started.
    unsafe { libc::kill(rl.id() as i32, libc::SIGTERM) };
    let status = wait_exit(&mut rl, Duration::from_secs(3));
    let survived = alive(command);
    if status.is_none() {
        // SAFETY: as above; clean up what the failure left.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = rl.kill();
        let _ = rl.wait();
    }
    let mut err = String::new();
    if let Some(mut e) = rl.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    assert!(grew, "the command stayed stopped: {err}");
    assert!(err.contains("continued"), "{err}");
    assert!(
        status.is_some() && !survived,
        "TERM did not end a stopped command"
    );
}

/// A closed stderr (its reader went away) must not stop redlease from
/// stopping the command before its lease ends, nor change its exit codes
/// (a message written there panicked the thread that stops the command).
#[test]
fn a_closed_stderr_changes_nothing() {
    let server = Server::start();
    let started = Instant::now();
    let mut rl = redlease(&server)
        .args(["run", "closed", "--lease", "2s", "--", "sleep", "6"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(rl.stderr.take());
    let status = wait_exit(&mut rl, Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(73));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let mut rl = redlease(&server)
        .args(["run", "closed", "--", "no-such-command-here"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(rl.stderr.take());
    let status = wait_exit(&mut rl, Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(127));
}

/// With `stty tostop`, redlease (in the background of its terminal while
/// the command has it) writes its "stopping the command" message without
/// being stopped by SIGTTOU, and stops the command before its lease ends.
#[test]
fn a_terminal_with_tostop_does_not_stop_redlease() {
    let server = Server::start();
    let (pid, master) = in_pty(
        &server,
        &["run", "tostop", "--lease", "2s", "--", "sleep", "6"],
        true,
        false,
    );
    let code = pty_exit(pid, master, Duration::from_secs(5));
    assert_eq!(code, Some(73));
}

/// stdin not the terminal (a pipe, /dev/null), the terminal still the
/// controlling one: the command gets its foreground all the same, so
/// Ctrl-Z typed there is refused (not a stop of redlease itself), a
/// command can read the terminal, and Ctrl-C ends it.
#[test]
fn a_command_whose_stdin_is_not_the_terminal_still_has_the_terminal() {
    let server = Server::start();
    let dir = scratch();
    let out = dir.join("out");
    let script = format!(
        "read a < /dev/tty; echo got:$a > {0}; while :; do echo A >> {0}.log; sleep 0.05; done",
        out.display()
    );
    let (pid, master) = in_pty(
        &server,
        &["run", "tty", "--", "sh", "-c", &script],
        false,
        true,
    );
    std::thread::sleep(Duration::from_millis(1_500));
    type_in(master, b"hello\n");
    assert!(eventually(Duration::from_secs(5), || {
        std::fs::read_to_string(&out).is_ok_and(|s| s.contains("got:hello"))
    }));
    // Ctrl-Z: refused; the command runs on.
    type_in(master, &[0x1a]);
    std::thread::sleep(Duration::from_millis(400));
    let log = PathBuf::from(format!("{}.log", out.display()));
    let len = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    std::thread::sleep(Duration::from_millis(500));
    let grew = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) > len;
    // Ctrl-C: ends it.
    type_in(master, &[0x03]);
    let code = pty_exit(pid, master, Duration::from_secs(5));
    assert!(grew, "Ctrl-Z stopped the command (or redlease)");
    assert_eq!(code, Some(130));
}

/// Ctrl-C typed into the terminal reaches a descendant that left the
/// command's group too, once, and redlease ends.
#[test]
fn a_terminal_ctrl_c_reaches_a_setsid_descendant_once() {
    let server = Server::start();
    let dir = scratch();
    let log = dir.join("log");
    let pidf = dir.join("pid");
    // Not started with `&`: a non-interactive shell ignores SIGINT in its
    // background jobs, and then no trap can catch it.
    let script = format!(
        "setsid sh -c 'echo $$ > {pid}; trap \"echo I >> {log}; exit 0\" INT; \
         while :; do sleep 0.05; done'",
        pid = pidf.display(),
        log = log.display()
    );
    let (pid, master) = in_pty(
        &server,
        &["run", "ttyint", "--", "sh", "-c", &script],
        false,
        false,
    );
    let escapee = read_pid(&pidf);
    std::thread::sleep(Duration::from_millis(300));
    type_in(master, &[0x03]);
    let code = pty_exit(pid, master, Duration::from_secs(5));
    let survived = alive(escapee);
    kill_if_alive(escapee);
    assert!(!survived, "the setsid'd process outlived a terminal Ctrl-C");
    assert_eq!(std::fs::read_to_string(&log).unwrap_or_default(), "I\n");
    assert!(code.is_some(), "redlease did not end");
}

/// A name handed over to a waiting run comes with a short first lease (the
/// grant's own time left: half a second for a lock, a second for a permit)
/// that the renewal thread raises only a third of it later, when a third of
/// it has gone: the run must raise it before it starts the command, or its
/// stopper sees a lease that surely runs less than `--kill-after` and a
/// margin and stops a command whose lease was never in doubt. The first
/// cases' stoppers signal below 970 ms left (`--kill-after` and half a
/// second), just under a handed-over permit's first lease; the short
/// watchdogs' first leases fall to within tens of milliseconds of their
/// stoppers' thresholds before the first renewal (a review's cases: a
/// server slow for 50 ms at that moment had the command stopped).
#[test]
fn a_run_handed_the_name_is_not_stopped_for_its_short_first_lease() {
    let server = Server::start();
    let c = common::client(&server);
    let (lock, permit) = (vec![], vec!["--semaphore", "1"]);
    // (name, flags before `run`, mode, stop flags)
    type Case<'a> = (&'a str, &'a [&'a str], &'a [&'a str], &'a [&'a str]);
    let cases: [Case; 5] = [
        ("handed-lock", &[], &lock, &["--kill-after", "470ms"]),
        ("handed-permit", &[], &permit, &["--kill-after", "470ms"]),
        ("handed-permit", &[], &permit, &["--kill-after", "470ms"]),
        ("handed-lock-750", &["--watchdog", "750ms"], &lock, &[]),
        (
            "handed-permit-1500",
            &["--watchdog", "1500ms"],
            &permit,
            &[],
        ),
    ];
    for (name, global, mode, stop) in cases {
        let held: Box<dyn FnOnce()> = if mode.is_empty() {
            let g = c.lock(name).acquire().unwrap();
            Box::new(move || g.release().unwrap())
        } else {
            let p = c.semaphore(name, 1).acquire().unwrap();
            Box::new(move || p.release().unwrap())
        };
        let mut waiting = redlease(&server)
            .args(global)
            .args(["run", name])
            .args(mode)
            .args(stop)
            .args(["--", "sh", "-c", "sleep 1.5"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Queued, then long enough to be blocked on the server: the name
        // is handed over, not found free.
        assert!(
            eventually(Duration::from_secs(10), || c
                .inspect(name)
                .is_ok_and(|i| i.waiters >= 1)),
            "{name}: the run never queued"
        );
        std::thread::sleep(Duration::from_millis(300));
        held();
        let status = wait_exit(&mut waiting, Duration::from_secs(15));
        let mut err = String::new();
        if let Some(mut e) = waiting.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        assert_eq!(status.and_then(|s| s.code()), Some(0), "{name}: {err}");
        assert!(!err.contains("stopping the command"), "{name}: {err}");
    }
}
