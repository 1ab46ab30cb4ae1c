//! `redlease`: run any command under a distributed lock, and inspect locks.
//!
//! Exit codes: the command's own status when it ran; 75 the wait timed out
//! (nothing ran; `-E`/`--conflict-exit-code` picks another code, as in
//! flock(1), so that it cannot be mistaken for the command's own); 73 the lease was lost while the command ran (it was sent
//! the configured signal); 69 Redis was unreachable or failed; 64 bad
//! arguments (bad duration, URL, ...); 65 `unlock` declined at the
//! confirmation; 126/127 the command could not be started; 128+N the command
//! was killed by signal N; 130/143 interrupted (SIGINT/SIGTERM) while
//! waiting, nothing run.
//!
//! `doctor` exits 0 when every guarantee can hold, 2 when something is
//! degraded (works, with a guarantee or the speed reduced), 69 when the
//! library cannot work there (or the servers cannot be reached).
//!
//! Durations are written `<integer><unit>`, unit one of `ms`, `s`, `m`, `h`
//! (`500ms`, `30s`, `5m`, `1h`); anything else is refused.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

#[path = "redlease/doctor.rs"]
mod doctor;
#[path = "redlease/show.rs"]
mod show;

use doctor::{doctor, doctor_unreachable};
use redlease::{Client, ErrorKind};
use show::{holder_text, list, shown, status};

const EXIT_DEGRADED: u8 = 2;
const EXIT_USAGE: u8 = 64;
const EXIT_DECLINED: u8 = 65;
const EXIT_UNAVAILABLE: u8 = 69;
const EXIT_LOST: u8 = 73;
const EXIT_TIMEOUT: u8 = 75;

/// How long one slice of waiting lasts: the bound on noticing a signal.
const WAIT_SLICE: Duration = Duration::from_millis(250);

#[derive(Parser)]
#[command(
    name = "redlease",
    version,
    about = "Run commands under Redis locks; inspect locks"
)]
struct Cli {
    /// Redis URL (its value is never printed by --help).
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379/",
        global = true
    )]
    url: String,
    /// Read the Redis password from this file (its first line) instead of
    /// putting it in the URL, where it would show in the process list.
    #[arg(long, global = true, value_name = "FILE")]
    password_file: Option<std::path::PathBuf>,
    /// For rediss:// URLs: trust this PEM CA certificate instead of the
    /// system's roots (the server's certificate is always verified).
    #[arg(long, global = true, value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,
    /// For rediss:// URLs: present this PEM client certificate (servers
    /// with tls-auth-clients yes); needs --tls-key.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, global = true, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// `run`: lease of locks without --lease, renewed every third of it; a
    /// lost lease is noticed within about a third of it. E.g. 30s.
    #[arg(long, value_parser = parse_duration, default_value = "30s", global = true)]
    watchdog: Duration,
    /// Log more: -v info, -vv debug, -vvv trace (RUST_LOG=debug works too).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// --url is a comma-separated list of Cluster nodes.
    #[arg(long, global = true, conflicts_with_all = ["redlock", "sentinel"])]
    cluster: bool,
    /// --url is a comma-separated list of independent Redlock masters.
    #[arg(long, global = true, conflicts_with = "sentinel")]
    redlock: bool,
    /// --url is a comma-separated list of Sentinels, and this the name of
    /// the master they watch.
    #[arg(long, global = true, value_name = "MASTER")]
    sentinel: Option<String>,
    /// Key prefix (namespace) shared with the applications using the locks.
    #[arg(long, env = "REDLEASE_PREFIX", default_value = "", global = true)]
    prefix: String,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Acquire NAME, run CMD with REDLEASE_FENCE (or REDLEASE_PERMIT_ID) and
    /// REDLEASE_NAME set, release.
    Run {
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
        /// Signal sent to the command when the lease is lost.
        #[arg(long, default_value = "TERM", value_parser = parse_signal)]
        lost_signal: i32,
        /// After the lost-lease signal, how long before SIGKILL.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        kill_after: Duration,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Who holds NAME, for how long, and the fencing counter.
    Status {
        /// The name, as bytes (the form `list` prints).
        name: OsString,
        /// One JSON object instead of a line.
        #[arg(long)]
        json: bool,
    },
    /// Names under the prefix that are held (SCAN, never KEYS).
    List {
        /// A glob over names (`orders:*`).
        #[arg(default_value = "*")]
        pattern: OsString,
        /// One JSON array instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Check, as the application would connect (same URL, TLS, user,
    /// prefix), that every guarantee can hold here: one line per check,
    /// ok / degraded / refused, and what to do. Writes only a scratch name
    /// under the prefix, and deletes it.
    Doctor {
        /// One JSON document instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Remove a lock whoever holds it.
    Unlock {
        /// The name, as bytes (the form `list` prints).
        name: OsString,
        /// Required: this breaks mutual exclusion for the current holder.
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
}

/// The one duration grammar: `<integer><unit>`, unit `ms`, `s`, `m` or
/// `h` (`500ms`, `30s`, `5m`, `1h`). A bare number or a fraction is refused
/// rather than guessed at.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let bad = || {
        format!("invalid duration {s:?}: write <integer><unit>, unit ms, s, m or h (e.g. 500ms, 30s, 5m)")
    };
    let v: u64 = num.parse().map_err(|_| bad())?;
    let ms = match unit {
        "ms" => Some(v),
        "s" => v.checked_mul(1_000),
        "m" => v.checked_mul(60_000),
        "h" => v.checked_mul(3_600_000),
        _ => return Err(bad()),
    };
    match ms {
        Some(ms) if ms <= 365 * 86_400_000 => Ok(Duration::from_millis(ms)),
        _ => Err(format!("duration {s:?} is out of range (at most a year)")),
    }
}

/// `url` with the password read from `file` (its first line).
fn with_password(url: &str, file: &std::path::Path) -> Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let bytes = std::fs::read(file)
        .map_err(|e| format!("cannot read the password file {}: {e}", file.display()))?;
    // Others who can read the file can read the password.
    if let Ok(meta) = std::fs::metadata(file) {
        if meta.permissions().mode() & 0o077 != 0 {
            eprintln!(
                "redlease: warning: the password file {} can be read by others (mode {:o}); chmod 600 it",
                file.display(),
                meta.permissions().mode() & 0o777
            );
        }
    }
    // Its first line, byte for byte: never percent-decoded (`p%41ss` is
    // that password, not `pAss`).
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let password = line.strip_suffix(b"\r").unwrap_or(line);
    if password.is_empty() {
        return Err(format!("the password file {} is empty", file.display()));
    }
    // Every byte but the unreserved ones escaped, `%` included: redis-rs
    // decodes the URL's password once, back to exactly these bytes.
    let encoded: String = password
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let mut parsed =
        url::Url::parse(url).map_err(|_| "invalid Redis URL (see --help)".to_string())?;
    if matches!(parsed.scheme(), "redis+unix" | "unix" | "valkey+unix") {
        // A socket URL has no user part: its password is the `pass`
        // parameter, which redis-rs form-decodes.
        let kept: Vec<(String, String)> = parsed
            .query_pairs()
            .filter(|(k, _)| k != "pass" && k != "password")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let text = std::str::from_utf8(password)
            .map_err(|_| "a password for a socket URL must be UTF-8".to_string())?;
        parsed
            .query_pairs_mut()
            .clear()
            .extend_pairs(kept)
            .append_pair("pass", text);
        return Ok(parsed.into());
    }
    parsed
        .set_password(Some(&encoded))
        .map_err(|()| "this Redis URL cannot carry a password".to_string())?;
    Ok(parsed.into())
}

/// Whether a Redis URL carries a password: in its user part, or (socket
/// URLs) in a `pass` or `password` parameter.
fn has_password(url: &str) -> bool {
    url::Url::parse(url).map_or(true, |u| {
        u.password().is_some()
            || u.query_pairs()
                .any(|(k, _)| k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password"))
    })
}

fn parse_signal(s: &str) -> Result<i32, String> {
    let name = s.trim_start_matches("SIG");
    Ok(match name {
        "TERM" => libc::SIGTERM,
        "INT" => libc::SIGINT,
        "HUP" => libc::SIGHUP,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "QUIT" => libc::SIGQUIT,
        _ => name.parse().map_err(|_| format!("unknown signal {s:?}"))?,
    })
}

/// SIGINT/SIGTERM/SIGHUP received and not yet handled, one bit per signal
/// (two different signals between two looks are both kept), forwarded to
/// the command. The command has its own group, so a terminal's Ctrl-C
/// reaches it either from the terminal (it is the foreground group) or
/// through us, never both.
static RECEIVED: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // An atomic or is async-signal-safe.
    if (0..32).contains(&sig) {
        RECEIVED.fetch_or(1 << sig, Ordering::SeqCst);
    }
}

/// The signals in a `RECEIVED` bit set, lowest first.
fn signals(bits: u32) -> impl Iterator<Item = i32> {
    (1..32).filter(move |s| bits & (1 << s) != 0)
}

/// The first pending signal, without taking it.
fn pending() -> Option<i32> {
    signals(RECEIVED.load(Ordering::SeqCst)).next()
}

fn install_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with our handler and SA_SIGINFO is a
        // valid argument; the handler is async-signal-safe (see above).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Runs the command as `flock(1)`-style supervisors do: in its own process
/// group (signals and a lost lease reach every process of it), killed if
/// redlease dies (Linux: `PR_SET_PDEATHSIG`; elsewhere it runs on), with
/// redlease as the subreaper of everything it starts (Linux), so the lock
/// is released only once all of them have exited. When the terminal is
/// ours, the command's group becomes its foreground group, so Ctrl-C
/// reaches the command once, from the terminal, and interactive commands
/// can read it.
fn supervise(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    #[cfg(target_os = "linux")]
    // SAFETY: prctl on our own process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            #[cfg(target_os = "linux")]
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgid(libc::getppid()) {
                // Taking the foreground from a background group raises
                // SIGTTOU; ignore it for the call, then restore.
                let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(0, libc::getpid());
                libc::signal(libc::SIGTTOU, old);
            }
            Ok(())
        });
    }
}

/// Takes the terminal's foreground back after the command (see
/// `supervise`); only called when redlease had it before.
fn restore_terminal() {
    // SAFETY: plain terminal calls on our own stdin.
    unsafe {
        if libc::isatty(0) == 1 && libc::tcgetpgrp(0) != libc::getpgrp() {
            let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            libc::tcsetpgrp(0, libc::getpgrp());
            libc::signal(libc::SIGTTOU, old);
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

/// A minimal stderr logger for `-v` and `RUST_LOG` (no extra dependency).
struct StderrLog(log::LevelFilter);

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= self.0
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!("[{} {}] {}", r.level(), r.target(), r.args());
        }
    }
    fn flush(&self) {}
}

/// Level from `-v` count, else `RUST_LOG` (`debug`, or `redlease=debug`:
/// the last level named wins), else warnings only.
fn init_logging(verbose: u8) {
    let from_env = std::env::var("RUST_LOG").ok().and_then(|v| {
        v.rsplit(',').find_map(|part| {
            part.rsplit('=')
                .next()?
                .trim()
                .parse::<log::LevelFilter>()
                .ok()
        })
    });
    let level = match verbose {
        0 => from_env.unwrap_or(log::LevelFilter::Warn),
        1 => log::LevelFilter::Info,
        2 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    if log::set_logger(Box::leak(Box::new(StderrLog(level)))).is_ok() {
        log::set_max_level(level);
    }
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("redlease: {msg}");
    ExitCode::from(code)
}

fn error_code(e: &redlease::Error) -> u8 {
    match e.kind() {
        ErrorKind::InvalidArgument | ErrorKind::WrongType => EXIT_USAGE,
        ErrorKind::LockLost => EXIT_LOST,
        _ => EXIT_UNAVAILABLE,
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout and succeed; the rest is misuse,
            // reported like every other error: one line on stderr.
            if !e.use_stderr() {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // Everything before the usage line: the error and, for missing
            // arguments, the list of what is missing.
            let text = e.render().to_string();
            let what: Vec<&str> = text
                .lines()
                .take_while(|l| !l.starts_with("Usage:"))
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
                .collect();
            let what = what.join(" ");
            let what = what.trim_start_matches("error: ");
            // The form of the command, so that `run foo` (no `-- CMD`) shows
            // what a whole one looks like.
            let usage = text
                .lines()
                .find_map(|l| l.strip_prefix("Usage: "))
                .map(|u| format!("; usage: {}", u.trim()))
                .unwrap_or_default();
            return fail(
                EXIT_USAGE,
                format!(
                    "{}{usage} (see --help)",
                    if what.is_empty() {
                        "invalid arguments"
                    } else {
                        what
                    }
                ),
            );
        }
    };
    init_logging(cli.verbose);
    let several = cli.cluster || cli.redlock || cli.sentinel.is_some();
    let given: Vec<&str> = if several {
        cli.url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .collect()
    } else {
        vec![cli.url.as_str()]
    };
    let mut urls = Vec::new();
    for u in given {
        urls.push(match &cli.password_file {
            Some(file) => match with_password(u, file) {
                Ok(url) => url,
                Err(e) => return fail(EXIT_USAGE, e),
            },
            None => u.to_owned(),
        });
    }
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let builder = Client::builder();
    let builder = if cli.cluster {
        builder.cluster(&urls)
    } else if cli.redlock {
        builder.redlock(&urls)
    } else if let Some(master) = &cli.sentinel {
        builder.sentinel(&urls, master)
    } else {
        builder.url(&urls[0])
    };
    let mut builder = builder
        .key_prefix(&cli.prefix)
        .watchdog_timeout(cli.watchdog)
        .connect_timeout(Duration::from_secs(2));
    if let Some(ca) = &cli.tls_ca {
        match read(ca) {
            Ok(pem) => builder = builder.tls_root_cert(pem),
            Err(e) => return fail(EXIT_USAGE, e),
        }
    }
    if let (Some(cert), Some(key)) = (&cli.tls_cert, &cli.tls_key) {
        match (read(cert), read(key)) {
            (Ok(cert), Ok(key)) => builder = builder.tls_client_cert(cert, key),
            (Err(e), _) | (_, Err(e)) => return fail(EXIT_USAGE, e),
        }
    }
    let client = match (builder.build(), &cli.command) {
        (Ok(c), _) => c,
        (Err(e), Cmd::Doctor { json }) => return doctor_unreachable(&e, *json),
        (Err(e), _) => return fail(error_code(&e), e),
    };
    let result = match cli.command {
        Cmd::Run {
            name,
            wait,
            conflict_exit_code,
            lease,
            semaphore,
            lost_signal,
            kill_after,
            command,
        } => run(
            &client,
            name.as_bytes(),
            (wait, conflict_exit_code),
            lease,
            semaphore,
            lost_signal,
            kill_after,
            &command,
        ),
        Cmd::Status { name, json } => status(&client, name.as_bytes(), json),
        Cmd::List { pattern, json } => list(&client, pattern.as_bytes(), json),
        Cmd::Unlock { name, force, yes } => unlock(&client, name.as_bytes(), force, yes),
        Cmd::Doctor { json } => Ok(doctor(&client, json)),
    };
    match result {
        Ok(code) => code,
        Err(e) => fail(error_code(&e), e),
    }
}

/// What the command runs under: a lock guard or a permit.
enum Held {
    Lock(redlease::LockGuard),
    Permit(redlease::Permit),
}

impl Held {
    fn is_held(&self) -> bool {
        match self {
            Held::Lock(g) => g.is_held(),
            Held::Permit(p) => p.is_held(),
        }
    }

    fn release(self) -> redlease::Result<()> {
        match self {
            Held::Lock(g) => g.release(),
            Held::Permit(p) => p.release(),
        }
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
#[allow(clippy::too_many_arguments)]
fn run(
    client: &Client,
    name: &[u8],
    wait: (Option<Duration>, u8),
    lease: Option<Duration>,
    semaphore: Option<u32>,
    lost_signal: i32,
    kill_after: Duration,
    command: &[String],
) -> redlease::Result<ExitCode> {
    install_handlers();
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(move || {
            let done = hold_and_run(
                client,
                name,
                wait,
                lease,
                semaphore,
                lost_signal,
                kill_after,
                command,
                &tx,
            );
            let _ = tx.send(Phase::Done(done));
        });
        // `-v`: say once that we wait and on whom, then every 10 s.
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
                // The waiting thread is blocked in the server; leaving the
                // process closes its connection.
                std::process::exit(128 + sig);
            }
            if told_waiting.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                if told_waiting.is_none() {
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
                told_waiting = Some(Instant::now());
            }
        }
    })
}

/// [`run`]'s waiting thread: waits for the name until the deadline, then
/// holds it while the command runs.
#[allow(clippy::too_many_arguments)]
fn hold_and_run(
    client: &Client,
    name: &[u8],
    (wait, conflict_exit_code): (Option<Duration>, u8),
    lease: Option<Duration>,
    semaphore: Option<u32>,
    lost_signal: i32,
    kill_after: Duration,
    command: &[String],
    phase: &std::sync::mpsc::Sender<Phase>,
) -> redlease::Result<ExitCode> {
    let sem = semaphore.map(|permits| {
        let s = client.semaphore(name, permits);
        match lease {
            Some(l) => s.lease(l),
            None => s,
        }
    });
    let lock = match lease {
        Some(l) => client.lock(name).lease(l),
        None => client.lock(name),
    };
    let started = Instant::now();
    let got = match (&sem, wait) {
        (Some(s), Some(w)) => s.acquire_timeout(w)?.map(Held::Permit),
        (Some(s), None) => Some(Held::Permit(s.acquire()?)),
        (None, Some(w)) => lock.acquire_timeout(w)?.map(Held::Lock),
        (None, None) => Some(Held::Lock(lock.acquire()?)),
    };
    let Some(held) = got else {
        return Ok(fail(
            conflict_exit_code,
            format!("timed out waiting for \"{}\"; command not run", shown(name)),
        ));
    };
    if ABANDONED.load(Ordering::SeqCst) {
        held.release()?;
        return Ok(ExitCode::from(EXIT_UNAVAILABLE));
    }
    let _ = phase.send(Phase::Acquired);
    match &held {
        Held::Lock(g) => log::info!(
            "acquired \"{}\" with fence {} after {} ms",
            shown(name),
            g.fencing_token(),
            started.elapsed().as_millis()
        ),
        Held::Permit(p) => log::info!(
            "acquired a permit of \"{}\" ({}) after {} ms",
            shown(name),
            p.id(),
            started.elapsed().as_millis()
        ),
    }
    if let Some(sig) = pending() {
        held.release()?;
        return Ok(fail(
            128 + sig as u8,
            "interrupted before the command started; nothing run",
        ));
    }
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..])
        .env("REDLEASE_NAME", OsStr::from_bytes(name))
        .env_remove("REDLEASE_FENCE")
        .env_remove("REDLEASE_PERMIT_ID");
    // The command gets no secret of ours: a `REDIS_URL` with a password
    // stays with us (one without is passed on, for commands that use it).
    if std::env::var("REDIS_URL").is_ok_and(|u| has_password(&u)) {
        cmd.env_remove("REDIS_URL");
    }
    match &held {
        Held::Lock(g) => {
            cmd.env("REDLEASE_FENCE", g.fencing_token().to_string());
        }
        Held::Permit(p) => {
            cmd.env("REDLEASE_PERMIT_ID", p.id().to_string());
        }
    }
    // SIGCHLD ignored (inherited across exec) would let the kernel reap the
    // command before we could: take the default back.
    // SAFETY: resetting a signal disposition of our own process.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    // The terminal is handed to the command only if it was ours.
    // SAFETY: plain terminal queries on our stdin.
    let gave_terminal = unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() };
    supervise(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            held.release()?;
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Ok(fail(code, format!("cannot run {:?}: {e}", command[0])));
        }
    };
    // Say who holds it (host, pid, since), for `status` and `list`; kept
    // fresh every third of the lease while the command runs.
    let note = holder_note();
    let refresh = lease.unwrap_or(client.watchdog_timeout()) / 3;
    let mut noted = Instant::now();
    if let Held::Lock(g) = &held {
        let _ = g.annotate(&note);
    }
    // The command's process group: its pid (it called setpgid(0, 0)).
    let group = -(child.id() as libc::pid_t);
    // Every process of the command: its group, and any descendant that left
    // the group (setsid, a double fork) but is still ours (subreaper).
    let signal_all = |sig: i32| {
        // SAFETY: kill(2) on our command's group and on our own children.
        unsafe { libc::kill(group, sig) };
        // Only those outside the group: the group's members already got it
        // (a second copy may be handled as a second signal).
        for pid in children() {
            if unsafe { libc::getpgid(pid) } != -group {
                unsafe { libc::kill(pid, sig) };
            }
        }
    };
    let mut lost_at: Option<Instant> = None;
    let mut status = None;
    // Until the command *and every process it started* have exited: the
    // direct child first, then (we are their subreaper) any descendant
    // still running, e.g. a background job. Only then is the lock released.
    loop {
        if status.is_none() {
            match child.try_wait() {
                Ok(Some(s)) => status = Some(s),
                Ok(None) => {}
                Err(e) => {
                    // ECHILD: someone reaped it (SIGCHLD ignored is reset
                    // below, but be sure never to loop on it).
                    eprintln!("redlease: waiting for the command failed: {e}");
                    status = Some(std::process::ExitStatus::from_raw(1 << 8));
                }
            }
        }
        if status.is_some() && !reap_descendants() {
            break;
        }
        if let Held::Lock(g) = &held {
            if noted.elapsed() >= refresh && g.is_held() {
                let _ = g.annotate(&note);
                noted = Instant::now();
            }
        }
        for sig in signals(RECEIVED.swap(0, Ordering::SeqCst)) {
            signal_all(sig);
        }
        match lost_at {
            None if !held.is_held() => {
                eprintln!(
                    "redlease: the lease on \"{}\" was lost; stopping the command",
                    shown(name)
                );
                signal_all(lost_signal);
                lost_at = Some(Instant::now());
            }
            Some(t) if t.elapsed() >= kill_after => {
                // Again every second: a process may have been forked since.
                signal_all(libc::SIGKILL);
                lost_at = Some(Instant::now() - kill_after + Duration::from_secs(1));
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if gave_terminal {
        restore_terminal();
    }
    let Some(status) = status else {
        return Ok(ExitCode::FAILURE);
    };
    let released = held.release();
    if released.is_ok() {
        log::info!("released \"{}\"", shown(name));
    }
    if lost_at.is_some() {
        return Ok(fail(
            EXIT_LOST,
            format!(
                "the lease on \"{}\" was lost while the command ran",
                shown(name)
            ),
        ));
    }
    if let Err(e) = released {
        if e.kind() == ErrorKind::LockLost {
            return Ok(fail(
                EXIT_LOST,
                format!(
                    "the lease on \"{}\" was lost while the command ran",
                    shown(name)
                ),
            ));
        }
        eprintln!("redlease: release failed: {e}");
    }
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code as u8),
        (None, Some(sig)) => ExitCode::from(128 + sig as u8),
        _ => ExitCode::FAILURE,
    })
}

fn unlock(client: &Client, name: &[u8], force: bool, yes: bool) -> redlease::Result<ExitCode> {
    if !force {
        return Ok(fail(
            EXIT_USAGE,
            "unlock needs --force: it removes the lock from whoever holds it",
        ));
    }
    if !client.lock(name).is_locked()? {
        println!("\"{}\" was not locked; nothing to remove", shown(name));
        return Ok(ExitCode::SUCCESS);
    }
    if !yes {
        eprint!(
            "Remove the lock \"{}\" from its current holder? [y/N] ",
            shown(name)
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Ok(fail(EXIT_DECLINED, "not confirmed; nothing removed"));
        }
    }
    let removed = client.lock(name).force_unlock()?;
    println!("{}", if removed { "removed" } else { "was not locked" });
    Ok(ExitCode::SUCCESS)
}
