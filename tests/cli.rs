//! The `redlease` binary against a real redis-server.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{client, eventually, Server};

fn redlease(server: &Server) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_redlease"));
    c.env("REDIS_URL", server.url())
        .env_remove("REDLEASE_PREFIX");
    c
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("redlease runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn concurrent_runs_never_overlap() {
    let server = Server::start();
    let dir = tempfile_dir();
    let log = dir.join("log");
    let script = format!(
        "echo start $(date +%s%N) >> {0}; sleep 0.2; echo end $(date +%s%N) >> {0}",
        log.display()
    );
    let children: Vec<_> = (0..3)
        .map(|_| {
            redlease(&server)
                .args(["run", "job", "--", "sh", "-c", &script])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let events: Vec<(String, u128)> = text
        .lines()
        .map(|l| {
            let (what, t) = l.split_once(' ').unwrap();
            (what.to_string(), t.parse().unwrap())
        })
        .collect();
    assert_eq!(events.len(), 6);
    // Strictly alternating start/end in time order means no overlap.
    let mut sorted = events.clone();
    sorted.sort_by_key(|e| e.1);
    for (i, (what, _)) in sorted.iter().enumerate() {
        assert_eq!(what, if i % 2 == 0 { "start" } else { "end" }, "{text}");
    }
}

#[test]
fn exit_status_and_environment_pass_through() {
    let server = Server::start();
    let o = run(redlease(&server).args(["run", "st", "--", "sh", "-c", "exit 7"]));
    assert_eq!(o.status.code(), Some(7));
    let o = run(redlease(&server).args([
        "run",
        "env",
        "--",
        "sh",
        "-c",
        "echo $REDLEASE_NAME $REDLEASE_FENCE",
    ]));
    assert!(o.status.success());
    let out = stdout(&o);
    let mut parts = out.split_whitespace();
    assert_eq!(parts.next(), Some("env"));
    let fence: u64 = parts.next().unwrap().parse().unwrap();
    assert!(fence >= 1);
    let o = run(redlease(&server).args(["run", "x", "--", "/nonexistent/cmd"]));
    assert_eq!(o.status.code(), Some(127));
    assert!(
        !client(&server).lock("x").is_locked().unwrap(),
        "released after failing to start"
    );
}

#[test]
fn wait_timeout_exits_75_without_running() {
    let server = Server::start();
    let c = client(&server);
    let _g = c.lock("busy").acquire().unwrap();
    let dir = tempfile_dir();
    let marker = dir.join("ran");
    let start = Instant::now();
    let o = run(redlease(&server).args([
        "run",
        "busy",
        "--wait",
        "300ms",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]));
    assert_eq!(o.status.code(), Some(75));
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(!marker.exists(), "the command must not run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "one line on stderr: {err}");
}

#[test]
fn lost_lease_terminates_the_command() {
    let server = Server::start();
    let start = Instant::now();
    let o = run(redlease(&server).args(["run", "short", "--lease", "300ms", "--", "sleep", "20"]));
    assert_eq!(o.status.code(), Some(73));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("lost"));
}

#[test]
fn sigterm_is_forwarded_and_the_lock_released() {
    let server = Server::start();
    let c = client(&server);
    let mut child = redlease(&server)
        .args(["run", "term", "--", "sleep", "20"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || c
        .lock("term")
        .is_locked()
        .unwrap()));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    let status = child.wait().unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert!(!c.lock("term").is_locked().unwrap());
}

#[test]
fn semaphore_mode_allows_n_at_once() {
    let server = Server::start();
    let c = client(&server);
    let _p = c.semaphore("pool", 2).acquire().unwrap();
    let o = run(redlease(&server).args([
        "run",
        "pool",
        "--semaphore",
        "2",
        "--wait",
        "1s",
        "--",
        "true",
    ]));
    assert!(o.status.success());
    let _q = c.semaphore("pool", 2).acquire().unwrap();
    let o = run(redlease(&server).args([
        "run",
        "pool",
        "--semaphore",
        "2",
        "--wait",
        "200ms",
        "--",
        "true",
    ]));
    assert_eq!(o.status.code(), Some(75));
}

#[test]
fn status_and_list_in_text_and_json() {
    let server = Server::start();
    let c = client(&server);
    let g = c.lock("orders:1").acquire().unwrap();
    let _r = c.rw_lock("config").read().unwrap();
    let o = run(redlease(&server).args(["status", "orders:1"]));
    let out = stdout(&o);
    assert!(out.contains(&c.id().simple().to_string()), "{out}");
    assert!(
        out.contains(&format!("fence {}", g.fencing_token())),
        "{out}"
    );
    let o = run(redlease(&server).args(["status", "orders:1", "--json"]));
    let out = stdout(&o);
    assert!(out.contains("\"held\":true"), "{out}");
    assert!(
        out.contains(&format!("\"holder\":\"{}\"", c.id().simple())),
        "{out}"
    );
    let o = run(redlease(&server).args(["list"]));
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("orders:1") && out.contains("config") && out.contains("1 readers"));
    let o = run(redlease(&server).args(["list", "orders:*", "--json"]));
    let out = stdout(&o);
    assert!(
        out.starts_with('[') && out.contains("\"name\":\"orders:1\"") && !out.contains("config")
    );
    drop(g);
    let out = stdout(&run(redlease(&server).args(["status", "orders:1"])));
    assert!(out.contains("free"), "{out}");
}

#[test]
fn unlock_needs_force_and_confirmation() {
    let server = Server::start();
    let c = client(&server);
    let _g = c.lock("stuck").acquire().unwrap();
    let o = run(redlease(&server).args(["unlock", "stuck"]));
    assert_eq!(o.status.code(), Some(64));
    let mut child = redlease(&server)
        .args(["unlock", "--force", "stuck"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"n\n").unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(65));
    assert!(c.lock("stuck").is_locked().unwrap());
    let o = run(redlease(&server).args(["unlock", "--force", "--yes", "stuck"]));
    assert!(o.status.success());
    assert!(!c.lock("stuck").is_locked().unwrap());
}

/// A semaphore's permits are freed too (it printed "was not locked;
/// nothing to remove" and freed nothing), all of them or one by id, with
/// the same confirmation.
#[test]
fn unlock_frees_a_semaphores_permits() {
    let server = Server::start();
    let c = client(&server);
    let sem = c.semaphore("semr", 3);
    let kept: Vec<_> = (0..3).map(|_| sem.acquire().unwrap().detach()).collect();
    assert_eq!(sem.available().unwrap(), 0);
    let o = run(redlease(&server).args([
        "unlock",
        "--force",
        "--yes",
        "semr",
        "--permit",
        &kept[0].to_string(),
    ]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout(&o).trim(), "removed");
    assert_eq!(sem.available().unwrap(), 1);
    let mut child = redlease(&server)
        .args(["unlock", "--force", "semr"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"n\n").unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(65));
    assert_eq!(sem.available().unwrap(), 1);
    let o = run(redlease(&server).args(["unlock", "--force", "--yes", "semr"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout(&o).trim(), "removed 2 permits");
    assert_eq!(sem.available().unwrap(), 3);
    let o =
        run(redlease(&server).args(["unlock", "--force", "--yes", "semr", "--permit", "nonsense"]));
    assert_eq!(o.status.code(), Some(64));
}

#[test]
fn bad_arguments_give_one_line_errors() {
    let server = Server::start();
    for (args, code) in [
        (vec!["run", "x", "--wait", "5q", "--", "true"], 64),
        (vec!["run", "x", "--lease", "-1s", "--", "true"], 64),
        (vec!["run", "", "--", "true"], 64),
        (vec!["--url", "nonsense://", "status", "x"], 64),
        // 0 sends nothing and 99 is no signal: a lost lease would stop
        // nothing until --kill-after (they were accepted).
        (vec!["run", "x", "--lost-signal", "0", "--", "true"], 64),
        (vec!["run", "x", "--lost-signal", "99", "--", "true"], 64),
    ] {
        let o = run(redlease(&server).args(&args));
        assert_eq!(
            o.status.code(),
            Some(code),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let dead = redis_test::utils::get_random_available_port();
    let o = run(redlease(&server).args([
        "--url",
        &format!("redis://127.0.0.1:{dead}/"),
        "status",
        "x",
    ]));
    assert_eq!(o.status.code(), Some(69));
    assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1);
    // Help never prints the environment's values (REDLEASE_PREFIX's was).
    let o = run(redlease(&server)
        .env("REDLEASE_PREFIX", "secret-prefix:")
        .arg("--help"));
    assert!(!stdout(&o).contains("secret-prefix"), "{}", stdout(&o));
    // A bad URL's reason, without redis-rs's "did not parse" tail after it
    // (issue 57 item 10).
    let o = run(redlease(&server).args(["--url", "redis://127.0.0.1:notaport/", "status", "x"]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("notaport") && !err.contains("InvalidClientConfig"),
        "{err}"
    );
}

/// Waits until the command under test wrote `ready` to `log` (its traps
/// are installed by then).
fn wait_ready(log: &std::path::Path) {
    assert!(
        eventually(Duration::from_secs(10), || std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains("ready")),
        "the command never got ready"
    );
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("redlease-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn signals_while_waiting_end_the_wait_at_once_and_run_nothing() {
    let server = Server::start();
    let c = client(&server);
    let g = c.lock("busy").acquire().unwrap();
    let dir = tempfile_dir();
    let marker = dir.join("ran");
    for (sig, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let mut child = redlease(&server)
            .args(["run", "busy", "--", "touch", marker.to_str().unwrap()])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(700));
        let t = Instant::now();
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(t.elapsed() < Duration::from_secs(5), "still waiting");
            std::thread::sleep(Duration::from_millis(10));
        };
        let took = t.elapsed();
        assert_eq!(status.code(), Some(code));
        assert!(took < Duration::from_secs(1), "{took:?}");
        assert!(!marker.exists(), "the command must not run");
    }
    g.release().unwrap();
}

#[test]
fn a_kill_is_forwarded_once_to_the_command() {
    let server = Server::start();
    let dir = tempfile_dir();
    let log = dir.join("got");
    let script = format!(
        "trap 'echo INT >> {0}' INT; echo ready >> {0}; i=0; while [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done",
        log.display()
    );
    let mut child = redlease(&server)
        .args(["run", "fw", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_ready(&log);
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("INT").count(), 1, "{text}");
}

#[test]
fn help_never_prints_the_url_and_usage_errors_say_what_is_missing() {
    let server = Server::start();
    let o = run(redlease(&server)
        .env("REDIS_URL", "redis://:topsecret@127.0.0.1:1/")
        .args(["run", "--help"]));
    assert!(o.status.success());
    let all = format!("{}{}", stdout(&o), String::from_utf8_lossy(&o.stderr));
    assert!(!all.contains("topsecret"), "{all}");
    assert!(all.contains("--watchdog"), "{all}");
    let o = run(redlease(&server).args(["run"]));
    assert_eq!(o.status.code(), Some(64));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("<NAME>") && err.contains("<COMMAND>"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // One duration grammar: integer + unit; bare numbers and fractions refused.
    for bad in ["10", "1.5s", "5q", "s", "-1s", "1d", "99999999h"] {
        let o = run(redlease(&server).args(["run", "x", "--wait", bad, "--", "true"]));
        assert_eq!(o.status.code(), Some(64), "{bad}");
    }
    for good in ["500ms", "2s", "1m", "1h"] {
        let o = run(redlease(&server).args(["run", "x", "--wait", good, "--", "true"]));
        assert_eq!(
            o.status.code(),
            Some(0),
            "{good}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn semaphore_runs_get_a_permit_id_and_no_fence() {
    let server = Server::start();
    let o = run(redlease(&server).env("REDLEASE_FENCE", "stale").args([
        "run",
        "pool",
        "--semaphore",
        "2",
        "--",
        "sh",
        "-c",
        "echo \"fence=[$REDLEASE_FENCE] id=$REDLEASE_PERMIT_ID\"",
    ]));
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(out.contains("fence=[]"), "{out}");
    let id = out.trim().rsplit("id=").next().unwrap();
    assert!(id.parse::<redlease::PermitId>().is_ok(), "{out}");
}

#[test]
fn unlock_force_on_a_free_lock_does_not_ask_and_watchdog_is_honoured() {
    let server = Server::start();
    let mut child = redlease(&server)
        .args(["unlock", "--force", "free"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "it asked for confirmation"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success());
    // --watchdog: a lost lease is noticed within about a third of it.
    let c = client(&server);
    let mut child = redlease(&server)
        .args(["--watchdog", "900ms", "run", "wd", "--", "sleep", "20"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || c
        .lock("wd")
        .is_locked()
        .unwrap()));
    let t = Instant::now();
    assert!(c.lock("wd").force_unlock().unwrap());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(73));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

#[test]
fn refused_connection_exits_69_fast_with_the_address() {
    let server = Server::start();
    let dead = redis_test::utils::get_random_available_port();
    let t = Instant::now();
    let o = run(redlease(&server)
        .env("REDIS_URL", format!("redis://:pw@127.0.0.1:{dead}/"))
        .args(["run", "x", "--", "true"]));
    assert_eq!(o.status.code(), Some(69));
    assert!(t.elapsed() < Duration::from_millis(2_500));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains(&format!("127.0.0.1:{dead}")), "{err}");
    assert!(!err.contains(":pw@"), "{err}");
    let o = run(redlease(&server)
        .env("RUST_LOG", "debug")
        .args(["-v", "status", "x"]));
    assert!(o.status.success());
}

#[test]
fn the_lock_is_held_until_every_process_of_the_command_exits() {
    let server = Server::start();
    let dir = tempfile_dir();
    let f = dir.join("order");
    let bg = format!("(sleep 1; echo A >> {0}) & exit 0", f.display());
    let mut first = redlease(&server)
        .args(["run", "tree", "--", "sh", "-c", &bg])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let second = run(redlease(&server).args([
        "run",
        "tree",
        "--",
        "sh",
        "-c",
        &format!("echo B >> {0}", f.display()),
    ]));
    assert!(second.status.success());
    assert!(first.wait().unwrap().success());
    let text = std::fs::read_to_string(&f).unwrap();
    assert_eq!(
        text, "A\nB\n",
        "the background job ran beside the next holder"
    );
}

#[test]
fn signals_and_death_of_redlease_reach_the_whole_command() {
    let server = Server::start();
    let dir = tempfile_dir();
    // SIGTERM to redlease: the background job dies too.
    let f = dir.join("term");
    let script = format!("(sleep 1.5; echo A >> {0}) & wait", f.display());
    let mut child = redlease(&server)
        .args(["run", "grp", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap();
    // SIGKILL to redlease (the OOM killer): the command dies with it.
    let g = dir.join("kill");
    let script = format!("sleep 1.5; echo A >> {0}", g.display());
    let mut child = redlease(&server)
        .args(["run", "grp2", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1_800));
    assert!(!f.exists(), "a background job outlived SIGTERM");
    assert!(!g.exists(), "the command outlived a killed redlease");
}

#[test]
fn status_shows_the_holders_host_pid_and_start_and_escapes_control_characters() {
    let server = Server::start();
    let mut child = redlease(&server)
        .args(["run", "noted", "--", "sleep", "3"])
        .spawn()
        .unwrap();
    let c = client(&server);
    assert!(eventually(Duration::from_secs(10), || c
        .inspect("noted")
        .unwrap()
        .note
        .is_some()));
    let o = run(redlease(&server).args(["status", "noted"]));
    let text = stdout(&o);
    assert!(text.contains(&format!("pid={}", child.id())), "{text}");
    assert!(text.contains("host=") && text.contains("since="), "{text}");
    let o = run(redlease(&server).args(["status", "noted", "--json"]));
    assert!(stdout(&o).contains("\"note\":\"host="), "{}", stdout(&o));
    child.kill().unwrap();
    child.wait().unwrap();
    // A name with a newline and an escape cannot forge a row.
    let g = c.lock("evil\n\x1b[2Jrow").acquire().unwrap();
    let o = run(redlease(&server).args(["status", "evil\n\x1b[2Jrow"]));
    let text = stdout(&o);
    assert_eq!(text.lines().count(), 1, "{text:?}");
    assert!(!text.contains('\x1b'), "{text:?}");
    drop(g);
}

/// A real terminal: Ctrl-C typed into a pty goes to the terminal's
/// foreground process group. The command must get it exactly once (not
/// once from the terminal and again forwarded by redlease).
#[test]
fn a_terminal_ctrl_c_reaches_the_command_once() {
    let server = Server::start();
    let dir = tempfile_dir();
    let log = dir.join("int");
    let script = format!(
        "trap 'echo INT >> {0}' INT; echo ready >> {0}; i=0; while [ $i -lt 30 ]; do sleep 0.05; i=$((i+1)); done",
        log.display()
    );
    let (pid, master) = common::pty::in_pty(
        &server,
        &["run", "tty", "--", "sh", "-c", &script],
        false,
        false,
    );
    wait_ready(&log);
    std::thread::sleep(Duration::from_millis(100));
    // Ctrl-C, as typed.
    common::pty::type_in(master, &[3]);
    let code = common::pty::pty_exit(pid, master, Duration::from_secs(10));
    assert!(code.is_some(), "redlease did not finish");
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("INT").count(), 1, "{text}");
}

fn wait_exit(child: &mut std::process::Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn a_descendant_that_left_the_group_is_still_stopped_on_lease_loss() {
    let server = Server::start();
    let dir = tempfile_dir();
    let pidf = dir.join("pid");
    let script = format!("setsid sleep 30 & echo $! > {}; exit 0", pidf.display());
    let mut rl = redlease(&server)
        .args([
            "--watchdog",
            "900ms",
            "run",
            "escapee",
            "--kill-after",
            "200ms",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || {
        std::fs::read_to_string(&pidf).is_ok_and(|s| !s.trim().is_empty())
    }));
    let escapee: i32 = std::fs::read_to_string(&pidf)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Still running: the lock is held for it.
    assert!(client(&server).lock("escapee").is_locked().unwrap());
    assert!(client(&server).lock("escapee").force_unlock().unwrap());
    let status = wait_exit(&mut rl, Duration::from_secs(6));
    let alive = unsafe { libc::kill(escapee, 0) } == 0;
    if alive {
        unsafe { libc::kill(escapee, libc::SIGKILL) };
    }
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(73),
        "redlease did not finish"
    );
    assert!(!alive, "the escaped descendant outlived the lost lease");
}

#[test]
fn an_ignored_sigchld_does_not_hang_the_run() {
    use std::os::unix::process::CommandExt;
    let server = Server::start();
    let mut cmd = redlease(&server);
    cmd.args(["run", "chld", "--", "true"]);
    // SAFETY: only signal(2) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(5));
    assert_eq!(status.and_then(|s| s.code()), Some(0));
    assert!(!client(&server).lock("chld").is_locked().unwrap());
}

#[test]
fn two_different_signals_both_reach_the_command() {
    let server = Server::start();
    let dir = tempfile_dir();
    let log = dir.join("sigs");
    // The TERM trap does not exit at once: the shell runs traps in its own
    // order, and one that exits could pre-empt the other's (a rare flake
    // under load, with both signals delivered). It leaves two loop turns
    // later instead.
    let script = format!(
        "trap 'echo HUP >> {0}' HUP; trap 'echo TERM >> {0}; t=0' TERM; echo ready >> {0}; i=0; while [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); if [ -n \"$t\" ]; then t=$((t+1)); [ $t -ge 2 ] && exit 0; fi; done",
        log.display()
    );
    let mut child = redlease(&server)
        .args(["run", "two", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_ready(&log);
    unsafe {
        libc::kill(child.id() as i32, libc::SIGHUP);
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    assert!(wait_exit(&mut child, Duration::from_secs(5)).is_some());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("HUP") && text.contains("TERM"), "{text}");
}

#[test]
fn a_foreign_writer_value_cannot_forge_status_rows() {
    let server = Server::start();
    let _: () = redis::cmd("SET")
        .arg("{n}:rw:w")
        .arg("rl:\x1b[2Jevil\nforged\tlocked by nobody:x#1")
        .arg("PX")
        .arg(60_000)
        .query(&mut server.con())
        .unwrap();
    let o = run(redlease(&server).args(["status", "n"]));
    let text = stdout(&o);
    assert_eq!(text.lines().count(), 1, "{text:?}");
    assert!(!text.contains('\x1b'), "{text:?}");
}

#[test]
fn conflict_exit_code_sets_the_timeout_status() {
    let server = Server::start();
    let c = client(&server);
    let _g = c.lock("busy-e").acquire().unwrap();
    for flag in ["-E", "--conflict-exit-code"] {
        let o =
            run(redlease(&server)
                .args(["run", "busy-e", "--wait", "100ms", flag, "10", "--", "true"]));
        assert_eq!(o.status.code(), Some(10), "{flag}");
    }
    // 0 would read as the command's success: refused.
    let o = run(redlease(&server).args(["run", "busy-e", "-E", "0", "--", "true"]));
    assert_eq!(o.status.code(), Some(64));
}

#[test]
fn the_password_comes_from_a_file_and_never_reaches_the_command() {
    let server = Server::start_with(&["--requirepass", "s3cret"]);
    let dir = tempfile_dir();
    let file = dir.join("pw");
    std::fs::write(&file, "s3cret\n").unwrap();
    let echo = ["--", "sh", "-c", "echo \"url=[$REDIS_URL]\""];
    // From a file: the URL (and argv) carry no password.
    let o = run(redlease(&server)
        .arg("--password-file")
        .arg(&file)
        .args(["run", "pw"])
        .args(echo));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout(&o).trim(), format!("url=[{}]", server.url()));
    // In REDIS_URL: the command does not inherit it.
    let secret = format!("redis://:s3cret@127.0.0.1:{}/", server.port());
    let o = run(redlease(&server)
        .env("REDIS_URL", &secret)
        .args(["run", "pw"])
        .args(echo));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout(&o).trim(), "url=[]");
    // A missing or empty file is a usage error, before anything runs.
    let empty = dir.join("empty");
    std::fs::write(&empty, "").unwrap();
    for f in [&empty, &dir.join("missing")] {
        let o = run(redlease(&server)
            .arg("--password-file")
            .arg(f)
            .args(["run", "pw", "--", "true"]));
        assert_eq!(o.status.code(), Some(64));
    }
}

/// The CLI as the README builds it (`--features cli`) speaks TLS, with the
/// CA given by `--tls-ca`, and refuses a server it cannot verify.
#[test]
fn the_cli_speaks_tls_with_a_given_ca() {
    if !common::needs_tls("the_cli_speaks_tls_with_a_given_ca") {
        return;
    }
    let (mut server, certs, _dir, url) = common::tls_server(false);
    let cli = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_redlease"));
        c.env("REDIS_URL", &url).env_remove("REDLEASE_PREFIX");
        c
    };
    let mut ok = None;
    assert!(eventually(Duration::from_secs(10), || {
        let o = run(cli()
            .arg("--tls-ca")
            .arg(&certs.ca_crt)
            .args(["run", "tls-job", "--", "sh", "-c", "echo ran"]));
        let done = o.status.success();
        ok = Some(o);
        done
    }));
    assert_eq!(stdout(&ok.unwrap()).trim(), "ran");
    // Without the CA the server is not trusted: unavailable, nothing run.
    let o = run(cli().args(["run", "tls-job", "--", "sh", "-c", "echo ran"]));
    assert_eq!(o.status.code(), Some(69));
    assert!(stdout(&o).is_empty());
    server.stop();
}

/// Names that are not UTF-8 round-trip through the CLI: `list` shows two
/// held names that differ in one invalid byte as two rows, each `held`,
/// in the `\xNN` form bash's `$'...'` reads back, and `status` and `unlock`
/// take those bytes. (Before: both showed as one row, "free", since the
/// lossy name matched neither.)
#[test]
fn names_that_are_not_utf8_round_trip_through_list_status_and_unlock() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let server = Server::start();
    let c = client(&server);
    let _a = c.lock(b"job-\xff".as_slice()).acquire().unwrap();
    let _b = c.lock(b"job-\xfe".as_slice()).acquire().unwrap();
    let _s = c.lock("back\\slash").acquire().unwrap();
    let o = run(redlease(&server).args(["list", "job-*"]));
    let out = stdout(&o);
    let rows: Vec<&str> = out.lines().collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(rows.iter().any(|r| r.starts_with("job-\\xfe\t")), "{out}");
    assert!(rows.iter().any(|r| r.starts_with("job-\\xff\t")), "{out}");
    assert!(rows.iter().all(|r| r.contains("locked by")), "{out}");
    let o = run(redlease(&server).args(["list", "back*", "--json"]));
    assert!(
        stdout(&o).contains(r#""name":"back\\\\slash""#),
        "{}",
        stdout(&o)
    );
    let name = OsStr::from_bytes(b"job-\xff");
    let o = run(redlease(&server).arg("status").arg(name));
    assert!(stdout(&o).contains("locked by"), "{}", stdout(&o));
    let o = run(redlease(&server)
        .args(["unlock", "--force", "--yes"])
        .arg(name));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!c.lock(b"job-\xff".as_slice()).is_locked().unwrap());
    assert!(c.lock(b"job-\xfe".as_slice()).is_locked().unwrap());
}

/// Reproduction (security review): the password file's text went into the
/// URL as it was, and the URL's password is percent-decoded: `p%41ss`
/// authenticated as `pAss`. It is read as bytes now, and a file others can
/// read gets a warning.
#[test]
fn the_password_file_is_taken_byte_for_byte() {
    use std::os::unix::fs::PermissionsExt;
    let server = Server::start_with(&["--requirepass", "p%41ss"]);
    let dir = tempfile_dir();
    let file = dir.join("pw");
    std::fs::write(&file, "p%41ss\r\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = run(redlease(&server)
        .arg("--password-file")
        .arg(&file)
        .args(["run", "pct", "--", "true"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("can be read by others"));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = run(redlease(&server)
        .arg("--password-file")
        .arg(&file)
        .args(["run", "pct", "--", "true"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("can be read by others"), "{err}");
    assert!(!err.contains("p%41ss"), "{err}");
}

/// Reproduction (security review): a socket URL carries its password in
/// a `pass` parameter, which the CLI neither redacted nor kept from the
/// command's environment (`REDIS_URL`).
#[test]
fn a_socket_urls_password_is_redacted_and_kept_from_the_command() {
    let dir = tempfile_dir();
    let sock = dir.join("r.sock");
    let server = Server::start_with(&[
        "--unixsocket",
        sock.to_str().unwrap(),
        "--requirepass",
        "S3CRETpass",
    ]);
    let url = format!("redis+unix://{}?pass=S3CRETpass", sock.display());
    let o = run(redlease(&server).env("REDIS_URL", &url).args([
        "run",
        "sock",
        "--",
        "sh",
        "-c",
        "echo \"url=[$REDIS_URL]\"",
    ]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout(&o).trim(), "url=[]");
    // A wrong password: the error names the URL without it.
    let bad = format!("redis+unix://{}?pass=WRONGpass", sock.display());
    let o = run(redlease(&server)
        .env("REDIS_URL", &bad)
        .args(["run", "sock", "--", "true"]));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("WRONGpass"), "{err}");
    // Its name percent-encoded (redis-rs decodes it, and authenticates
    // with it): redacted all the same (issue 57 item 2).
    for key in ["pa%73s", "%70assword", "%70%61%73%73"] {
        let bad = format!("redis+unix://{}?{key}=WRONGpass", sock.display());
        let o = run(redlease(&server)
            .env("REDIS_URL", &bad)
            .args(["run", "sock", "--", "true"]));
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("WRONGpass"), "{key}: {err}");
    }
}

/// `-v` says what `run` is doing: on whom it waits (holder, note, age),
/// the fence it got and after how long, and the release; `status` shows a
/// holder's age and start in UTC, a lapsed counter in words, and `list`
/// says when nothing matches (on stderr: stdout stays rows only).
/// Before, `-vvv run` printed nothing of the kind (a newcomer's trial).
#[test]
fn the_cli_says_what_it_is_doing() {
    let server = Server::start();
    let mut holder = redlease(&server)
        .args(["run", "told", "--", "sleep", "2"])
        .spawn()
        .unwrap();
    let c = client(&server);
    assert!(eventually(Duration::from_secs(10), || c
        .inspect("told")
        .unwrap()
        .note
        .is_some()));
    let o = run(redlease(&server).args(["status", "told"]));
    let text = stdout(&o);
    assert!(text.contains("held ") && text.contains(" UTC"), "{text}");
    let o = run(redlease(&server).args(["-v", "run", "told", "--", "true"]));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("waiting for \"told\": locked by") && err.contains("pid="),
        "{err}"
    );
    assert!(err.contains("acquired \"told\" with fence "), "{err}");
    assert!(err.contains("released \"told\""), "{err}");
    holder.wait().unwrap();
    let text = stdout(&run(redlease(&server).args(["status", "told"])));
    assert!(
        text.contains("free") && text.contains("no fence (the counter lapsed"),
        "{text}"
    );
    let o = run(redlease(&server).args(["list", "nothing-here*"]));
    assert!(stdout(&o).is_empty());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("nothing held matches"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Reproduction (issue: waiting that costs nothing): `redlease run` waited
/// in 250 ms slices of `acquire_timeout`, each one queueing, blocking and
/// withdrawing again: 71 server commands a second per waiting process. It
/// now waits in one blocking call (a second thread watches for signals),
/// so a waiting `run` costs what any waiter does.
#[test]
fn a_waiting_run_costs_the_server_almost_nothing() {
    let server = Server::start();
    let c = client(&server);
    let g = c
        .lock("nightly")
        .lease(Duration::from_secs(60))
        .acquire()
        .unwrap();
    let mut runs: Vec<_> = (0..3)
        .map(|_| {
            redlease(&server)
                .args(["run", "nightly", "--", "true"])
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut con = server.con();
    assert!(eventually(Duration::from_secs(10), || redis::cmd("ZCARD")
        .arg("{nightly}:queue")
        .query::<usize>(&mut con)
        .unwrap()
        == 3));
    std::thread::sleep(Duration::from_millis(300)); // all blocked
    let before = common::commandstats(&mut con);
    let window = Duration::from_secs(4);
    std::thread::sleep(window);
    let after = common::commandstats(&mut con);
    let mut between = common::commands_between(&before, &after);
    // Each process loads the look's script once, at its first look.
    common::without_script_loads(&mut between);
    let sent: u64 = between.values().sum();
    let per = sent as f64 / 3.0 / window.as_secs_f64();
    println!("FIGURES 3 waiting `redlease run`s over 4 s: {sent} server commands, {per:.2}/s each");
    // Before: 3 × 71 × 4 ≈ 850.
    assert!(per <= 1.0, "{sent} commands: {between:?}");
    g.release().unwrap();
    for r in &mut runs {
        let t = Instant::now();
        let status = loop {
            if let Some(s) = r.try_wait().unwrap() {
                break s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "a run never got the lock"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success());
    }
}

/// Reproduction (issue: a newcomer never guesses): a semaphore's status
/// read `1 permits in use`, showed a fence (permits have none) and no
/// limit, and a plain semaphore's waiters were not counted.
#[test]
fn a_semaphores_status_says_how_many_of_how_many_and_who_waits() {
    let server = Server::start();
    let c = client(&server);
    let sem = c.semaphore("pool", 3);
    let p = sem.acquire().unwrap();
    let out = run(redlease(&server).args(["status", "pool"]));
    let text = stdout(&out);
    println!("FIGURES {text}");
    assert!(text.contains("1 permit in use of 3"), "{text}");
    assert!(text.contains("no fence (permits only)"), "{text}");
    let two = sem.acquire_many(2).unwrap();
    let waiter = client(&server);
    let t = std::thread::spawn(move || {
        waiter
            .semaphore("pool", 3)
            .acquire_timeout(Duration::from_secs(10))
            .unwrap()
            .is_some()
    });
    let mut con = server.con();
    assert!(eventually(Duration::from_secs(5), || redis::cmd("ZCARD")
        .arg("{pool}:sem:queue:t")
        .query::<usize>(&mut con)
        .unwrap()
        == 1));
    let text = stdout(&run(redlease(&server).args(["status", "pool"])));
    assert!(text.contains("3 permits in use of 3"), "{text}");
    assert!(text.contains("waiters 1"), "{text}");
    let json = stdout(&run(redlease(&server).args(["status", "pool", "--json"])));
    assert!(
        json.contains("\"permits_in_use\":3,\"permits\":3"),
        "{json}"
    );
    drop((p, two));
    assert!(t.join().unwrap());
}

/// Issue 57 item 11, a newcomer's frictions: bare `redlease` lists the
/// commands; clap's tip is a sentence of its own (was "found tip:"); a
/// usage line does not show `--url` as required; `run --help` keeps the
/// global options apart; doctor says no "-0 ms" and does not "acquire" a
/// latch.
#[test]
fn help_and_errors_read_well_to_a_newcomer() {
    let server = Server::start();
    let o = run(&mut Command::new(env!("CARGO_BIN_EXE_redlease")));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(64));
    assert!(err.contains("Commands:") && err.contains("  run "), "{err}");
    let o = run(redlease(&server).args(["run", "x", "--frobnicate"]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("found tip:") && err.contains("(to pass"),
        "{err}"
    );
    let o = run(redlease(&server).arg("status"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("--url <URL>") && err.contains("<NAME>"),
        "{err}"
    );
    let o = run(redlease(&server).args(["run", "--help"]));
    let help = stdout(&o);
    let global = help
        .find("Global options:")
        .expect("a heading for global options");
    assert!(help.find("--url").unwrap() > global, "{help}");
    assert!(help.find("--kill-after").unwrap() < global, "{help}");
    let o = run(redlease(&server).arg("doctor"));
    let text = stdout(&o);
    assert!(!text.contains("-0 ms"), "{text}");
    assert!(text.contains("latch: counted down"), "{text}");
}
