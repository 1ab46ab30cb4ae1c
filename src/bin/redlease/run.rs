//! `redlease run NAME -- CMD...`: wait for the name in one blocking call
//! while another thread watches for signals, then run the command under
//! the hold as `flock(1)` would, supervising its whole process tree.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redlease::{Client, ErrorKind};

use crate::show::{holder_text, shown};
use crate::signals::{install_handlers, parse_signal, pending, signals, RECEIVED};
use crate::{fail, has_password, parse_duration, EXIT_LOST, EXIT_TIMEOUT, EXIT_UNAVAILABLE};

/// `run`'s arguments.
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// The name, as bytes (shell: `$'job-\xff'`, the form `list` prints).
    name: OsString,
    /// Longest wait for the lock (<integer><unit>: 500ms, 30s, 5m, 1h);
    /// exit 75 if it passes.
    /// Default: wait as long as needed.
    #[arg(long, value_parser = parse_duration)]
    wait: Option<Duration>,
    /// Exit status when the wait times out (nothing ran), so that it can
    /// be told apart from the command's own statuses.
    #[arg(short = 'E', long, default_value_t = EXIT_TIMEOUT,
          value_parser = clap::value_parser!(u8).range(1..))]
    conflict_exit_code: u8,
    /// Fixed lease instead of a watchdog-renewed one.
    #[arg(long, value_parser = parse_duration)]
    lease: Option<Duration>,
    /// Take one permit of a semaphore with this many permits instead of a
    /// lock; the command gets REDLEASE_PERMIT_ID (no REDLEASE_FENCE).
    #[arg(long)]
    semaphore: Option<u32>,
    /// Signal sent to the command when the lease is lost or about to end
    /// (see --kill-after).
    #[arg(long, default_value = "TERM", value_parser = parse_signal)]
    lost_signal: i32,
    /// After the lost-lease signal, how long before SIGKILL. The signal
    /// goes out early enough that SIGKILL comes before the lease can end.
    /// Default: 10s, or a third of the lease if that is shorter.
    #[arg(long, value_parser = parse_duration)]
    kill_after: Option<Duration>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

impl RunArgs {
    fn name(&self) -> &[u8] {
        self.name.as_bytes()
    }
}

/// How long one slice of waiting lasts: the bound on noticing a signal.
const WAIT_SLICE: Duration = Duration::from_millis(250);

/// Starts the command under the keeper (see `keeper.rs`): a process of
/// its own that is the subreaper of everything the command starts, in its
/// own process group, and kills the whole tree if redlease dies however it
/// dies. Orders go to it through a pipe only redlease holds the writing end
/// of; the returned `Keeper` is that end. `terminal`: the command's group
/// becomes the terminal's foreground group, so Ctrl-C reaches the command
/// once, from the terminal, and interactive commands can read it.
fn start_keeper(
    mut keeper: Command,
    terminal: bool,
    args: &RunArgs,
) -> std::io::Result<(Child, Keeper)> {
    use std::os::unix::process::CommandExt;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds; both close on exec (the read end is
    // kept open across the keeper's exec below, and only there).
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let [read, write] = fds;
    keeper
        .arg0("redlease")
        .arg(crate::keeper::KEEP)
        .arg(read.to_string())
        .arg(if terminal { "1" } else { "0" })
        .arg("--")
        .args(&args.command)
        .process_group(0);
    // SAFETY: only fcntl(2) between fork and exec.
    unsafe {
        keeper.pre_exec(move || {
            libc::fcntl(read, libc::F_SETFD, 0);
            Ok(())
        });
    }
    let spawned = keeper.spawn();
    // SAFETY: our copy of the read end; the keeper has its own.
    unsafe { libc::close(read) };
    match spawned {
        Ok(child) => Ok((child, Keeper(write))),
        Err(e) => {
            // SAFETY: the write end is ours and unused.
            unsafe { libc::close(write) };
            Err(e)
        }
    }
}

/// The writing end of the keeper's pipe: each byte a signal for the whole
/// command. Closed when redlease exits (by the kernel, whatever kills it),
/// which tells the keeper to kill the command.
struct Keeper(libc::c_int);

impl Keeper {
    /// Has the keeper send `sig` to every process of the command once.
    fn signal(&self, sig: i32) {
        let byte = [sig as u8];
        // SAFETY: one byte from our buffer to our own pipe. A full pipe
        // (64 KiB of signals unread) or a gone keeper loses the order;
        // the keeper being gone is seen by its exit.
        unsafe { libc::write(self.0, byte.as_ptr().cast(), 1) };
    }
}

/// The controlling terminal, opened for `tcgetpgrp`/`tcsetpgrp` (closed
/// when dropped); `None` without one. Not stdin: a command whose stdin is
/// a pipe may still read the terminal (a password prompt), and Ctrl-C and
/// Ctrl-Z typed there must reach it, not us.
struct Terminal(libc::c_int);

impl Terminal {
    fn open() -> Option<Terminal> {
        // SAFETY: open(2) of a constant path; the fd is ours.
        let fd = unsafe {
            libc::open(
                c"/dev/tty".as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            )
        };
        (fd >= 0).then_some(Terminal(fd))
    }

    /// Whether `group` is the terminal's foreground group.
    fn foreground_is(&self, group: libc::pid_t) -> bool {
        // SAFETY: tcgetpgrp on our own fd.
        unsafe { libc::tcgetpgrp(self.0) == group }
    }

    /// Makes `group` the foreground group; SIGTTOU, which a background
    /// caller would get, is ignored for the call.
    fn hand_to(&self, group: libc::pid_t) {
        // SAFETY: signal and tcsetpgrp on our own process and fd.
        unsafe {
            let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            libc::tcsetpgrp(self.0, group);
            libc::signal(libc::SIGTTOU, old);
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // SAFETY: our own fd, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// The keeper's side: makes its group (the command's) the terminal's
/// foreground group.
pub(crate) fn foreground(group: libc::pid_t) {
    if let Some(tty) = Terminal::open() {
        tty.hand_to(group);
    }
}

/// Whether the terminal's foreground is ours: then the command gets it.
fn terminal_is_ours() -> bool {
    // SAFETY: getpgrp has no preconditions.
    Terminal::open().is_some_and(|tty| tty.foreground_is(unsafe { libc::getpgrp() }))
}

/// Takes the terminal's foreground back after the command; only called
/// when redlease had it before.
fn restore_terminal() {
    if let Some(tty) = Terminal::open() {
        // SAFETY: getpgrp has no preconditions.
        let ours = unsafe { libc::getpgrp() };
        if !tty.foreground_is(ours) {
            tty.hand_to(ours);
        }
    }
}

/// `host=<hostname> pid=<pid> since=<unix seconds>`.
fn holder_note() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let host = if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "?".into()
    };
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("host={host} pid={} since={since}", std::process::id())
}

/// Our children now (Linux: `/proc/self/task/*/children`; elsewhere none
/// are known, and only the group is signalled).
fn children() -> Vec<libc::pid_t> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
                out.extend(
                    list.split_whitespace()
                        .filter_map(|p| p.parse::<libc::pid_t>().ok()),
                );
            }
        }
    }
    out
}

/// Reaps descendants that have exited; `true` while any is still running.
fn reap_descendants() -> bool {
    loop {
        let mut status = 0;
        // SAFETY: waitpid on any child of ours, without blocking.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        match pid {
            0 => return true,  // some are still running
            p if p > 0 => {}   // reaped one; look again
            _ => return false, // ECHILD: none left
        }
    }
}

/// What the command runs under: a lock guard or a permit.
enum Guard {
    Lock(redlease::LockGuard),
    Permit(redlease::Permit),
}

impl Guard {
    /// Waits for the name as `args` say: `None` when the wait timed out.
    fn acquire(client: &Client, args: &RunArgs) -> redlease::Result<Option<Guard>> {
        let name = args.name();
        if let Some(permits) = args.semaphore {
            let mut s = client.semaphore(name, permits);
            if let Some(l) = args.lease {
                s = s.lease(l);
            }
            return Ok(match args.wait {
                Some(w) => s.acquire_timeout(w)?.map(Guard::Permit),
                None => Some(Guard::Permit(s.acquire()?)),
            });
        }
        let mut lock = client.lock(name);
        if let Some(l) = args.lease {
            lock = lock.lease(l);
        }
        Ok(match args.wait {
            Some(w) => lock.acquire_timeout(w)?.map(Guard::Lock),
            None => Some(Guard::Lock(lock.acquire()?)),
        })
    }

    /// Extends a renewed lease to `lease` when it was handed over with a
    /// short first lease (see `hold_and_run`): less than nine tenths of
    /// the lease left. Renewed at a third of the way through, a first
    /// lease of nine tenths or more still has three fifths left then, as
    /// much above the stopper's threshold (at most half the lease, less a
    /// margin: `Stop::of`) as any renewed lease; a shorter one may fall
    /// to it, and the stopper would stop the command though the lease is
    /// sound. Nothing for a lease granted outright, nor for a fixed lease
    /// (`renewed` false), which the library claims in full before it
    /// hands the guard out. `Err` when the extension failed: the short
    /// lease is all that is known.
    fn firm_up(&self, lease: Duration, renewed: bool) -> redlease::Result<()> {
        let signal = self.lost_signal();
        if !renewed || signal.is_lost() || signal.expires_in() >= lease / 10 * 9 {
            return Ok(());
        }
        match self {
            Guard::Lock(g) => g.extend(lease),
            Guard::Permit(p) => p.extend(lease),
        }
    }

    fn lost_signal(&self) -> redlease::LostSignal {
        match self {
            Guard::Lock(g) => g.lost_signal(),
            Guard::Permit(p) => p.lost_signal(),
        }
    }

    fn release(self) -> redlease::Result<()> {
        match self {
            Guard::Lock(g) => g.release(),
            Guard::Permit(p) => p.release(),
        }
    }

    /// `-v`: what was taken, after how long.
    fn log_acquired(&self, name: &[u8], started: Instant) {
        match self {
            Guard::Lock(g) => log::info!(
                "acquired \"{}\" with fence {} after {} ms",
                shown(name),
                g.fencing_token(),
                started.elapsed().as_millis()
            ),
            Guard::Permit(p) => log::info!(
                "acquired a permit of \"{}\" ({}) after {} ms",
                shown(name),
                p.id(),
                started.elapsed().as_millis()
            ),
        }
    }

    /// The keeper (`redlease` itself, see `keeper.rs`) with the command's
    /// environment: the name, and the fence or the permit's id.
    fn keeper(&self, args: &RunArgs) -> Command {
        // Linux: this very binary, even if it was replaced since it started.
        let exe = if cfg!(target_os = "linux") {
            std::path::PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe().unwrap_or_else(|_| "redlease".into())
        };
        let mut cmd = Command::new(exe);
        cmd.env("REDLEASE_NAME", OsStr::from_bytes(args.name()))
            .env_remove("REDLEASE_FENCE")
            .env_remove("REDLEASE_PERMIT_ID");
        // The command gets no secret of ours: a `REDIS_URL` with a password
        // stays with us (one without is passed on, for commands that use it).
        if std::env::var("REDIS_URL").is_ok_and(|u| has_password(&u)) {
            cmd.env_remove("REDIS_URL");
        }
        match self {
            Guard::Lock(g) => cmd.env("REDLEASE_FENCE", g.fencing_token().to_string()),
            Guard::Permit(p) => cmd.env("REDLEASE_PERMIT_ID", p.id().to_string()),
        };
        cmd
    }
}

/// How `run`'s waiting thread tells the thread that watches for signals
/// how far it got.
enum Phase {
    /// Holding: from now on the waiting thread answers signals itself.
    Acquired,
    Done(redlease::Result<ExitCode>),
}

/// Set when a signal ended the wait: a hold granted at that moment is
/// given back at once, and nothing is run.
static ABANDONED: AtomicBool = AtomicBool::new(false);

/// `run`, on two threads: one waits for the name in a single blocking call
/// until the deadline (the server hands the name over; nothing polls), then
/// holds it and runs the command (guards belong to the thread that took
/// them); this one watches for SIGINT/SIGTERM/SIGHUP meanwhile, and ends
/// the wait within [`WAIT_SLICE`] of one (nothing run). A waiter that goes
/// away stalls nobody: the server hands the name to waiters blocked on it,
/// and ours no longer is.
pub(crate) fn run(client: &Client, args: &RunArgs) -> redlease::Result<ExitCode> {
    let stop = match Stop::of(args, client.watchdog_timeout()) {
        Ok(stop) => stop,
        Err(e) => return Ok(fail(crate::EXIT_USAGE, e)),
    };
    install_handlers();
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(move || {
            let done = hold_and_run(client, args, stop, &tx);
            let _ = tx.send(Phase::Done(done));
        });
        let mut told_waiting: Option<Instant> = None;
        loop {
            match rx.recv_timeout(WAIT_SLICE) {
                Ok(Phase::Done(done)) => return done,
                Ok(Phase::Acquired) => {
                    return match rx.recv() {
                        Ok(Phase::Done(done)) => done,
                        _ => Ok(fail(
                            EXIT_UNAVAILABLE,
                            "internal: the command's thread ended without a result",
                        )),
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Ok(fail(
                        EXIT_UNAVAILABLE,
                        "internal: the waiting thread ended without a result",
                    ))
                }
            }
            if let Some(sig) = pending() {
                abandon(args.name(), sig, &rx);
            }
            tell_waiting(client, args.name(), started, &mut told_waiting);
        }
    })
}

/// A signal came while we wait: nothing is run, and the process ends.
fn abandon(name: &[u8], sig: i32, rx: &std::sync::mpsc::Receiver<Phase>) -> ! {
    ABANDONED.store(true, Ordering::SeqCst);
    // Granted right now? Its thread gives the hold back at once.
    let _ = rx.recv_timeout(Duration::from_millis(200));
    let _ = fail(
        128 + sig as u8,
        format!(
            "interrupted while waiting for \"{}\"; command not run",
            shown(name)
        ),
    );
    // The waiting thread is blocked in the server; leaving the process
    // closes its connection.
    std::process::exit(128 + sig);
}

/// `-v`: says once that we wait and on whom, then every 10 s.
fn tell_waiting(client: &Client, name: &[u8], started: Instant, told: &mut Option<Instant>) {
    if told.is_some_and(|t| t.elapsed() < Duration::from_secs(10)) {
        return;
    }
    if told.is_none() {
        let whom = client
            .inspect(name)
            .map(|i| holder_text(&i))
            .unwrap_or_else(|e| format!("holder not known: {e}"));
        log::info!("waiting for \"{}\": {whom}", shown(name));
    } else {
        log::info!(
            "still waiting for \"{}\" ({} s)",
            shown(name),
            started.elapsed().as_secs()
        );
    }
    *told = Some(Instant::now());
}

/// [`run`]'s waiting thread: waits for the name until the deadline, then
/// holds it while the command runs.
fn hold_and_run(
    client: &Client,
    args: &RunArgs,
    stop: Stop,
    phase: &std::sync::mpsc::Sender<Phase>,
) -> redlease::Result<ExitCode> {
    let name = args.name();
    let started = Instant::now();
    let Some(held) = Guard::acquire(client, args)? else {
        return Ok(fail(
            args.conflict_exit_code,
            format!("timed out waiting for \"{}\"; command not run", shown(name)),
        ));
    };
    if ABANDONED.load(Ordering::SeqCst) {
        held.release()?;
        return Ok(ExitCode::from(EXIT_UNAVAILABLE));
    }
    let _ = phase.send(Phase::Acquired);
    held.log_acquired(name, started);
    // A name handed over comes with the grant's own time left (half a
    // second for a lock, a second for a permit or a write lock) until the
    // renewal thread raises it, a third of the way through: near or below
    // what the stopper allows, it would stop the command at once or at a
    // server's hiccup. One extension to the whole lease first (nothing
    // when it was granted outright); when that fails, the command is not
    // started at all.
    if let Err(e) = held.firm_up(
        args.lease.unwrap_or(client.watchdog_timeout()),
        args.lease.is_none(),
    ) {
        let released = match held.release() {
            Ok(()) => "released".to_owned(),
            Err(r) => {
                format!("its release failed too ({r}): it may stay held until its lease ends")
            }
        };
        return Ok(fail(
            EXIT_LOST,
            format!(
                "\"{}\" was handed over with a short lease that could not be extended ({e}); {released}; command not run",
                shown(name)
            ),
        ));
    }
    if let Some(sig) = pending() {
        held.release()?;
        return Ok(fail(
            128 + sig as u8,
            "interrupted before the command started; nothing run",
        ));
    }
    // SIGCHLD ignored (inherited across exec) would let the kernel reap the
    // command before we could: take the default back.
    // SAFETY: resetting a signal disposition of our own process.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    // Should the keeper die, what is left of the command comes to us.
    #[cfg(target_os = "linux")]
    // SAFETY: prctl on our own process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    // While the command runs, redlease is in the background of its
    // terminal (if it had it) and must not be stopped by it: a message
    // written there with `stty tostop`, or a stray Ctrl-Z, would stop us,
    // and the lease would run out with the command still running.
    // SAFETY: setting dispositions of our own process; the keeper gives
    // the command the defaults back.
    unsafe {
        for sig in [libc::SIGTTOU, libc::SIGTTIN, libc::SIGTSTP] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    // The terminal is handed to the command only if it was ours.
    let gave_terminal = terminal_is_ours();
    let (child, keeper) = match start_keeper(held.keeper(args), gave_terminal, args) {
        Ok(started) => started,
        Err(e) => {
            held.release()?;
            return Ok(fail(126, format!("cannot start the command's keeper: {e}")));
        }
    };
    let ran = watch_command(client, args, stop, &held, child, &keeper);
    if gave_terminal {
        restore_terminal();
    }
    finish(name, held, ran)
}

/// How the command ended: its status (none if it could not be waited
/// for), and whether the lease was lost while it ran.
struct Ran {
    status: Option<ExitStatus>,
    lost: bool,
}

/// When a command is stopped for its lease: the lost-lease signal goes out
/// as soon as the lease surely runs less than `kill_after` and a margin,
/// so that SIGKILL, `kill_after` later, comes a margin before the lease
/// could end and the next holder get in.
#[derive(Clone, Copy)]
pub(crate) struct Stop {
    kill_after: Duration,
    signal_below: Duration,
}

impl Stop {
    /// From `--kill-after` and the lease (`--lease`, or the watchdog's);
    /// refused when the lease leaves no room for it.
    pub(crate) fn of(args: &RunArgs, watchdog: Duration) -> Result<Stop, String> {
        let lease = args.lease.unwrap_or(watchdog);
        // For the clock rates of two machines and a busy scheduler.
        let margin = (lease / 10).min(Duration::from_millis(500));
        let kill_after = args
            .kill_after
            .unwrap_or_else(|| (lease / 3).min(Duration::from_secs(10)));
        // A renewed lease surely runs two thirds of itself just before each
        // renewal: the signal must not go out then.
        let room = match args.lease {
            Some(_) => lease.saturating_sub(margin),
            None => (lease / 2).saturating_sub(margin),
        };
        if kill_after > room {
            let (what, flag) = match args.lease {
                Some(_) => ("lease", "--lease"),
                None => ("watchdog's lease", "--watchdog"),
            };
            return Err(format!(
                "--kill-after {} leaves no room in a {what} of {}: the command must be gone \
                 before the lease can end; give --kill-after {} or less, or a longer {flag}",
                millis(kill_after),
                millis(lease),
                millis(room)
            ));
        }
        Ok(Stop {
            kill_after,
            signal_below: kill_after + margin,
        })
    }
}

/// `1500ms`, `3s`.
fn millis(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Sends `sig` to every process of the command, through the keeper; and
/// to any process of it that came to us because the keeper is gone.
fn signal_all(keeper: &Keeper, keeper_pid: u32, sig: i32) {
    keeper.signal(sig);
    for pid in children() {
        if pid as u32 != keeper_pid {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// Supervises the command until it *and every process it started* have
/// exited: the keeper exits only then. Meanwhile it keeps the holder's
/// note fresh, and a thread of its own (see [`stop_when_due`]) forwards
/// our signals and stops the command before the lease can end.
fn watch_command(
    client: &Client,
    args: &RunArgs,
    stop: Stop,
    held: &Guard,
    mut child: Child,
    keeper: &Keeper,
) -> Ran {
    // Say who holds it (host, pid, since), for `status` and `list`; kept
    // fresh every third of the lease while the command runs.
    let note = holder_note();
    let refresh = args.lease.unwrap_or(client.watchdog_timeout()) / 3;
    let mut noted = Instant::now();
    if let Guard::Lock(g) = held {
        let _ = g.annotate(&note);
    }
    let keeper_pid = child.id();
    let lease = held.lost_signal();
    let done = AtomicBool::new(false);
    let mut status = None;
    let lost = std::thread::scope(|s| {
        let stopper = s.spawn(|| stop_when_due(args, stop, &lease, keeper, keeper_pid, &done));
        loop {
            if status.is_none() {
                match child.try_wait() {
                    Ok(Some(s)) => status = Some(s),
                    Ok(None) => {}
                    Err(e) => {
                        // ECHILD: someone reaped it (SIGCHLD ignored is
                        // reset before the spawn, but be sure never to loop
                        // on it).
                        say!("redlease: waiting for the command failed: {e}");
                        status = Some(ExitStatus::from_raw(1 << 8));
                    }
                }
            }
            if status.is_some() && !reap_descendants() {
                break;
            }
            // A round trip, which a paused server holds up to the response
            // timeout: never on the stopper's thread.
            if let Guard::Lock(g) = held {
                if noted.elapsed() >= refresh && g.is_held() {
                    let _ = g.annotate(&note);
                    noted = Instant::now();
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        done.store(true, Ordering::SeqCst);
        stopper.join().unwrap_or(true)
    });
    Ran { status, lost }
}

/// The stopper: forwards our signals to the command, and sends it the
/// lost-lease signal once the lease is lost or surely runs less than
/// `--kill-after` and a margin (renewals failing, or a fixed lease's end
/// near), then SIGKILL `--kill-after` later, again every second. Runs until
/// `done`; returns whether the command was stopped for its lease. No round
/// trip here: a paused server cannot delay it.
fn stop_when_due(
    args: &RunArgs,
    stop: Stop,
    lease: &redlease::LostSignal,
    keeper: &Keeper,
    keeper_pid: u32,
    done: &AtomicBool,
) -> bool {
    let mut lost_at: Option<Instant> = None;
    while !done.load(Ordering::SeqCst) {
        for sig in signals(RECEIVED.swap(0, Ordering::SeqCst)) {
            signal_all(keeper, keeper_pid, sig);
        }
        match lost_at {
            None if lease.is_lost() || lease.expires_in() <= stop.signal_below => {
                let name = shown(args.name());
                let left = lease.expires_in().as_millis();
                if lease.is_lost() {
                    say!("redlease: the lease on \"{name}\" was lost; stopping the command");
                } else if args.lease.is_some() {
                    say!(
                        "redlease: the lease on \"{name}\" ends in {left} ms; stopping the command so that it is gone by then"
                    );
                } else {
                    say!(
                        "redlease: renewals of \"{name}\" are failing and its lease surely runs only {left} ms more; stopping the command so that it is gone by then"
                    );
                }
                signal_all(keeper, keeper_pid, args.lost_signal);
                lost_at = Some(Instant::now());
            }
            Some(t) if t.elapsed() >= stop.kill_after => {
                // Again every second: a process may have been forked since.
                signal_all(keeper, keeper_pid, libc::SIGKILL);
                lost_at = Some(Instant::now() - stop.kill_after + Duration::from_secs(1));
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    lost_at.is_some()
}

/// Releases the name once the command is done; `run`'s exit status: the
/// command's, or `EXIT_LOST` when the lease was lost while it ran.
fn finish(name: &[u8], held: Guard, ran: Ran) -> redlease::Result<ExitCode> {
    let Some(status) = ran.status else {
        return Ok(ExitCode::FAILURE);
    };
    let released = held.release();
    if released.is_ok() {
        log::info!("released \"{}\"", shown(name));
    }
    let lost = || {
        Ok(fail(
            EXIT_LOST,
            format!(
                "the lease on \"{}\" was lost while the command ran",
                shown(name)
            ),
        ))
    };
    if ran.lost {
        return lost();
    }
    if let Err(e) = released {
        if e.kind() == ErrorKind::LockLost {
            return lost();
        }
        say!("redlease: release failed: {e}");
    }
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code as u8),
        (None, Some(sig)) => ExitCode::from(128 + sig as u8),
        _ => ExitCode::FAILURE,
    })
}
