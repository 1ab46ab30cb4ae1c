//! `redlease run`'s keeper: a small single-threaded process between
//! redlease and the command, so that the command's whole process tree
//! ends with redlease however redlease ends.
//!
//! Why a process of its own: a setting on the command (`PR_SET_PDEATHSIG`)
//! reaches only the direct child, and children do not inherit it, so
//! `kill -9` of redlease left a script's grandchildren running beside the
//! next holder. The keeper is the command's subreaper (every orphan of the
//! tree becomes its child), watches a pipe whose other end only redlease
//! holds, and when that pipe reaches its end (redlease is gone, SIGKILL
//! and the OOM killer included) kills every process of the tree and
//! reaps them. It sits in a process group of its own, so a kill of
//! redlease's group leaves it to clean up.
//!
//! The protocol on the pipe: each byte is a signal for the whole tree (the
//! command's group, and every descendant that left it), sent once to each
//! process; INT, TERM, HUP and the lost-lease signal are followed by
//! SIGCONT, so that a stopped process handles them. End of file: redlease
//! is gone; SIGKILL to all. The keeper exits with the command's status
//! (128+N for signal N) once the command *and every process it started*
//! have exited.
//!
//! A stopped command (Ctrl-Z, SIGSTOP) is continued at once: it holds a
//! lease that redlease keeps renewing, so a stop would hold the name for
//! ever while nothing runs.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The hidden first argument that makes `redlease` the keeper.
pub(crate) const KEEP: &str = "__keep";

/// Signals the keeper ignores: it may write to a terminal it is in the
/// background of. The command gets the default handling back before it
/// starts.
const IGNORED: [i32; 2] = [libc::SIGTTIN, libc::SIGTTOU];

/// Signals a terminal sends to its foreground group (the keeper's and the
/// command's), or someone to the whole group: the keeper passes them on to
/// the processes of the tree outside the group, which did not get them.
/// Ctrl-Z (SIGTSTP) is caught, not passed on: it is refused.
const CAUGHT: [i32; 5] = [
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGHUP,
    libc::SIGTERM,
    libc::SIGTSTP,
];

/// How often the keeper looks at the pipe, its children and signals.
const TICK: Duration = Duration::from_millis(20);

/// How often the keeper looks for stopped processes in the tree, at
/// least: a larger tree is looked at less often (it reads /proc for each
/// process), a millisecond more per process, at most every 2 s.
const STOP_LOOK: Duration = Duration::from_millis(100);

/// Signals in [`CAUGHT`] that reached the keeper from anyone but itself
/// (its own, to its group, come back to it), one bit per signal.
static FROM_OUTSIDE: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler;
    // getpid and an atomic or are async-signal-safe.
    let from = unsafe { (*info).si_pid() };
    if from != unsafe { libc::getpid() } && (0..32).contains(&sig) {
        FROM_OUTSIDE.fetch_or(1 << sig, Ordering::SeqCst);
    }
}

/// The keeper's `main`: `redlease __keep FD TERMINAL -- CMD...`, where FD
/// is the pipe's read end and TERMINAL `1` if the command is to get the
/// terminal's foreground.
///
/// The keeper leads the command's process group (the command joins it),
/// so what the terminal sends the group — Ctrl-C, Ctrl-\, a hang-up,
/// Ctrl-Z — reaches the keeper too, which passes it on to the processes
/// that left the group. Signals for the whole tree go to the group at
/// once (the keeper ignores its own), except SIGKILL, which goes to each
/// process but the keeper.
pub(crate) fn main(args: &[OsString]) -> ExitCode {
    let (Some(fd), Some(terminal), Some(cmd)) = (
        args.first()
            .and_then(|a| a.to_str())
            .and_then(|a| a.parse::<i32>().ok()),
        args.get(1).map(|a| a == "1"),
        args.get(3..).filter(|c| !c.is_empty()),
    ) else {
        say!("redlease: {KEEP} is redlease run's own helper, not a command");
        return ExitCode::from(crate::EXIT_USAGE);
    };
    // SAFETY: process-wide settings of our own single-threaded process;
    // the handler is async-signal-safe (see `on_signal`).
    unsafe {
        #[cfg(target_os = "linux")]
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        // redlease started us as the leader of a group of our own.
        libc::setpgid(0, 0);
        for sig in IGNORED {
            libc::signal(sig, libc::SIG_IGN);
        }
        for sig in CAUGHT {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    if parent_gone(fd) {
        return ExitCode::from(crate::EXIT_UNAVAILABLE);
    }
    let group = std::process::id() as libc::pid_t;
    if terminal {
        crate::run::foreground(group);
    }
    let mut command = Command::new(&cmd[0]);
    command.args(&cmd[1..]).process_group(group);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            // Caught signals go back to their defaults by the exec itself.
            for sig in IGNORED {
                libc::signal(sig, libc::SIG_DFL);
            }
            #[cfg(target_os = "linux")]
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            // The keeper died before the setting above took: stop here.
            if libc::getppid() != group {
                libc::_exit(137);
            }
            Ok(())
        });
    }
    let child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            say!("redlease: cannot run {:?}: {e}", cmd[0]);
            return ExitCode::from(code);
        }
    };
    let command = child.id() as libc::pid_t;
    let mut status: Option<u8> = None;
    let mut told_stopped = false;
    let mut looked_for_stops = Instant::now();
    let mut stop_look = STOP_LOOK;
    loop {
        match read_orders(fd) {
            Orders::Signals(sigs) => {
                for sig in sigs {
                    signal_tree(group, sig);
                    if sig != libc::SIGKILL && sig != libc::SIGCONT {
                        signal_tree(group, libc::SIGCONT);
                    }
                }
            }
            Orders::ParentGone => return kill_all(group),
        }
        for sig in crate::signals::signals(FROM_OUTSIDE.swap(0, Ordering::SeqCst)) {
            if sig != libc::SIGTSTP {
                signal_outside(group, sig);
                signal_outside(group, libc::SIGCONT);
            }
        }
        match reap(command, &mut status) {
            Reaped::Running => {}
            Reaped::AllGone => return ExitCode::from(status.unwrap_or(1)),
        }
        if looked_for_stops.elapsed() < stop_look {
            continue;
        }
        looked_for_stops = Instant::now();
        let tree = descendants();
        stop_look =
            (STOP_LOOK + Duration::from_millis(tree.len() as u64)).min(Duration::from_secs(2));
        let stopped = continue_stopped(&tree);
        if stopped && !told_stopped {
            say!(
                "redlease: the command was stopped (Ctrl-Z or SIGSTOP) and is continued: \
                 while it runs it holds the lease, so it cannot be suspended (Ctrl-C ends it)"
            );
        }
        told_stopped |= stopped;
    }
}

/// What came through the pipe since the last look.
enum Orders {
    Signals(Vec<i32>),
    ParentGone,
}

/// Waits up to [`TICK`] for orders, and takes all that came.
fn read_orders(fd: i32) -> Orders {
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut poll, 1, TICK.as_millis() as i32) };
    let mut sigs = Vec::new();
    loop {
        let mut buf = [0u8; 64];
        // SAFETY: reading into our own buffer, at most its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 => return Orders::ParentGone,
            n if n > 0 => sigs.extend(buf[..n as usize].iter().map(|&b| i32::from(b))),
            _ => match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) => return Orders::Signals(sigs),
                // The pipe is unusable: redlease cannot reach us any more,
                // which is as good as gone.
                _ => return Orders::ParentGone,
            },
        }
    }
}

/// `true` when redlease went away before the command could start (the
/// pipe hung up with nothing left in it); orders already sent stay for the
/// first look after the start.
fn parent_gone(fd: i32) -> bool {
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; no wait.
    unsafe { libc::poll(&mut poll, 1, 0) };
    poll.revents & libc::POLLHUP != 0 && poll.revents & libc::POLLIN == 0
}

/// Whether any process of the tree is left.
enum Reaped {
    Running,
    AllGone,
}

/// Reaps every child that ended (the command, and orphans of the tree that
/// came to us), keeping the command's status.
fn reap(command: libc::pid_t, status: &mut Option<u8>) -> Reaped {
    loop {
        let mut st = 0;
        // SAFETY: waitpid on any child of ours, without blocking.
        let pid = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if pid == 0 {
            return Reaped::Running;
        }
        if pid < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // ECHILD: nobody is left.
            return Reaped::AllGone;
        }
        if pid == command {
            *status = Some(if libc::WIFEXITED(st) {
                libc::WEXITSTATUS(st) as u8
            } else {
                128u8.saturating_add(libc::WTERMSIG(st) as u8)
            });
        }
    }
}

/// Every process below ours, found through `/proc/PID/task/TID/children`
/// (Linux); elsewhere only our own children are known, by the group.
fn descendants() -> Vec<libc::pid_t> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut next = vec![std::process::id() as libc::pid_t];
    while let Some(pid) = next.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
                for child in list
                    .split_whitespace()
                    .filter_map(|p| p.parse::<libc::pid_t>().ok())
                {
                    // A bound against a loop in what /proc showed while
                    // processes came and went.
                    if out.len() < 100_000 && seen.insert(child) {
                        out.push(child);
                        next.push(child);
                    }
                }
            }
        }
    }
    out
}

/// Sends `sig` once to every process of the tree: to the group (the
/// keeper ignores its own), then to each descendant outside it (setsid,
/// its own group, a double fork), whether its parent lives or it came to
/// us. SIGKILL goes to each process of the group but the keeper instead.
fn signal_tree(group: libc::pid_t, sig: i32) {
    let tree = descendants();
    // SAFETY: kill(2) on our own group and descendants.
    unsafe {
        if sig == libc::SIGKILL {
            for &pid in &tree {
                libc::kill(pid, sig);
            }
            return;
        }
        libc::kill(-group, sig);
    }
    send_outside(group, &tree, sig);
}

/// Sends `sig` to the processes of the tree outside the group (which did
/// not get what was sent to the group).
fn signal_outside(group: libc::pid_t, sig: i32) {
    send_outside(group, &descendants(), sig);
}

fn send_outside(group: libc::pid_t, tree: &[libc::pid_t], sig: i32) {
    for &pid in tree {
        // SAFETY: getpgid only reads; kill(2) on our own descendant.
        unsafe {
            if libc::getpgid(pid) != group {
                libc::kill(pid, sig);
            }
        }
    }
}

/// Continues every stopped process of the tree; `true` if there was one.
fn continue_stopped(tree: &[libc::pid_t]) -> bool {
    let mut any = false;
    for &pid in tree {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The state follows the command name, which may hold anything
        // (spaces, parentheses) up to the last ')'.
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next());
        if state == Some('T') {
            // SAFETY: kill(2) on our own descendant.
            unsafe { libc::kill(pid, libc::SIGCONT) };
            any = true;
        }
    }
    any
}

/// redlease is gone: SIGKILL to every process of the tree, again until
/// none is left (one may fork as the first goes out), bounded at 10 s for
/// processes the kernel cannot end at once (uninterruptible sleep).
fn kill_all(group: libc::pid_t) -> ExitCode {
    let until = Instant::now() + Duration::from_secs(10);
    let mut status = None;
    while Instant::now() < until {
        signal_tree(group, libc::SIGKILL);
        if let Reaped::AllGone = reap(group, &mut status) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    ExitCode::from(137)
}
