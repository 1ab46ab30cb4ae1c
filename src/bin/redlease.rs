//! `redlease`: run any command under a distributed lock, and inspect locks.
//!
//! Exit codes: the command's own status when it ran; 75 the wait timed out
//! (nothing ran); 73 the lease was lost while the command ran (it was sent
//! the configured signal); 69 Redis was unreachable or failed; 64 bad
//! arguments (bad duration, URL, ...); 65 `unlock` declined at the
//! confirmation; 126/127 the command could not be started; 128+N the command
//! was killed by signal N.

use std::io::{BufRead, Write};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use redlease::{Client, ErrorKind};

const EXIT_USAGE: u8 = 64;
const EXIT_DECLINED: u8 = 65;
const EXIT_UNAVAILABLE: u8 = 69;
const EXIT_LOST: u8 = 73;
const EXIT_TIMEOUT: u8 = 75;

#[derive(Parser)]
#[command(
    name = "redlease",
    version,
    about = "Run commands under Redis locks; inspect locks"
)]
struct Cli {
    /// Redis URL.
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379/",
        global = true
    )]
    url: String,
    /// Key prefix (namespace) shared with the applications using the locks.
    #[arg(long, env = "REDLEASE_PREFIX", default_value = "", global = true)]
    prefix: String,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Acquire NAME, run CMD with REDLEASE_FENCE and REDLEASE_NAME set, release.
    Run {
        name: String,
        /// Longest wait for the lock (e.g. 500ms, 30s, 5m); exit 75 if it passes.
        /// Default: wait as long as needed.
        #[arg(long, value_parser = parse_duration)]
        wait: Option<Duration>,
        /// Fixed lease instead of a watchdog-renewed one.
        #[arg(long, value_parser = parse_duration)]
        lease: Option<Duration>,
        /// Take one permit of a semaphore with this many permits instead of a lock.
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
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Names under the prefix that are held (SCAN, never KEYS).
    List {
        #[arg(default_value = "*")]
        pattern: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove a lock whoever holds it.
    Unlock {
        name: String,
        /// Required: this breaks mutual exclusion for the current holder.
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
}

/// `500ms`, `30s`, `5m`, `1h`; a bare number is seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 500ms, 30s, 5m"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "" | "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("invalid duration unit in {s:?}: use ms, s, m or h")),
    };
    if !secs.is_finite() || !(0.0..=365.0 * 86400.0).contains(&secs) {
        return Err(format!("duration {s:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
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

/// The last SIGINT/SIGTERM received (0 = none), to forward to the child.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::SeqCst);
}

fn install_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores into an atomic, which is
        // async-signal-safe.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
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
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            return fail(
                EXIT_USAGE,
                format!("{} (see --help)", first.trim_start_matches("error: ")),
            );
        }
    };
    let client = match Client::builder()
        .url(&cli.url)
        .key_prefix(&cli.prefix)
        .build()
    {
        Ok(c) => c,
        Err(e) => return fail(error_code(&e), e),
    };
    let result = match cli.command {
        Cmd::Run {
            name,
            wait,
            lease,
            semaphore,
            lost_signal,
            kill_after,
            command,
        } => run(
            &client,
            &name,
            wait,
            lease,
            semaphore,
            lost_signal,
            kill_after,
            &command,
        ),
        Cmd::Status { name, json } => status(&client, &name, json),
        Cmd::List { pattern, json } => list(&client, &pattern, json),
        Cmd::Unlock { name, force, yes } => unlock(&client, &name, force, yes),
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

#[allow(clippy::too_many_arguments)]
fn run(
    client: &Client,
    name: &str,
    wait: Option<Duration>,
    lease: Option<Duration>,
    semaphore: Option<u32>,
    lost_signal: i32,
    kill_after: Duration,
    command: &[String],
) -> redlease::Result<ExitCode> {
    install_handlers();
    let held = match semaphore {
        Some(permits) => {
            let mut sem = client.semaphore(name, permits);
            if let Some(l) = lease {
                sem = sem.lease(l);
            }
            match wait {
                Some(w) => sem.acquire_timeout(w)?,
                None => Some(sem.acquire()?),
            }
            .map(Held::Permit)
        }
        None => {
            let mut lock = client.lock(name);
            if let Some(l) = lease {
                lock = lock.lease(l);
            }
            match wait {
                Some(w) => lock.acquire_timeout(w)?,
                None => Some(lock.acquire()?),
            }
            .map(Held::Lock)
        }
    };
    let Some(held) = held else {
        return Ok(fail(
            EXIT_TIMEOUT,
            format!("timed out waiting for {name:?}; command not run"),
        ));
    };
    if RECEIVED.load(Ordering::SeqCst) != 0 {
        held.release()?;
        return Ok(fail(
            128 + RECEIVED.load(Ordering::SeqCst) as u8,
            "interrupted before the command started",
        ));
    }
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]).env("REDLEASE_NAME", name);
    if let Held::Lock(g) = &held {
        cmd.env("REDLEASE_FENCE", g.fencing_token().to_string());
    }
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
    let pid = child.id() as libc::pid_t;
    let mut lost_at: Option<Instant> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                eprintln!("redlease: waiting for the command failed: {e}");
            }
        }
        let sig = RECEIVED.swap(0, Ordering::SeqCst);
        if sig != 0 {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe { libc::kill(pid, sig) };
        }
        match lost_at {
            None if !held.is_held() => {
                eprintln!("redlease: the lease on {name:?} was lost; stopping the command");
                unsafe { libc::kill(pid, lost_signal) };
                lost_at = Some(Instant::now());
            }
            Some(t) if t.elapsed() >= kill_after => {
                unsafe { libc::kill(pid, libc::SIGKILL) };
                lost_at = Some(Instant::now() + Duration::from_secs(3600));
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let released = held.release();
    if lost_at.is_some() {
        return Ok(fail(
            EXIT_LOST,
            format!("the lease on {name:?} was lost while the command ran"),
        ));
    }
    if let Err(e) = released {
        if e.kind() == ErrorKind::LockLost {
            return Ok(fail(
                EXIT_LOST,
                format!("the lease on {name:?} was lost while the command ran"),
            ));
        }
        eprintln!("redlease: release failed: {e}");
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code as u8),
        (None, Some(sig)) => ExitCode::from(128 + sig as u8),
        _ => ExitCode::FAILURE,
    })
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn opt_json(s: &Option<String>) -> String {
    s.as_deref().map_or("null".into(), json_str)
}

fn opt_ms(d: Option<Duration>) -> String {
    d.map_or("null".into(), |d| d.as_millis().to_string())
}

fn info_json(name: &str, i: &redlease::LockInfo) -> String {
    format!(
        "{{\"name\":{},\"held\":{},\"holder\":{},\"remaining_ms\":{},\"fence\":{},\"waiters\":{},\"writer\":{},\"writer_remaining_ms\":{},\"readers\":{},\"permits_in_use\":{}}}",
        json_str(name),
        i.is_held(),
        opt_json(&i.holder),
        opt_ms(i.remaining),
        i.fence,
        i.waiters,
        opt_json(&i.writer),
        opt_ms(i.writer_remaining),
        i.readers,
        i.permits_in_use
    )
}

fn info_line(name: &str, i: &redlease::LockInfo) -> String {
    let mut parts = Vec::new();
    if let Some(h) = &i.holder {
        parts.push(format!(
            "locked by {h} ({} ms left)",
            i.remaining.map_or(-1, |d| d.as_millis() as i64)
        ));
    }
    if let Some(w) = &i.writer {
        parts.push(format!("write-locked by {w}"));
    }
    if i.readers > 0 {
        parts.push(format!("{} readers", i.readers));
    }
    if i.permits_in_use > 0 {
        parts.push(format!("{} permits in use", i.permits_in_use));
    }
    if parts.is_empty() {
        parts.push("free".into());
    }
    format!(
        "{name}\t{}\tfence {}\twaiters {}",
        parts.join(", "),
        i.fence,
        i.waiters
    )
}

fn status(client: &Client, name: &str, json: bool) -> redlease::Result<ExitCode> {
    let info = client.inspect(name)?;
    if json {
        println!("{}", info_json(name, &info));
    } else {
        println!("{}", info_line(name, &info));
    }
    Ok(ExitCode::SUCCESS)
}

fn list(client: &Client, pattern: &str, json: bool) -> redlease::Result<ExitCode> {
    let names = client.list(pattern)?;
    let mut rows = Vec::new();
    for name in &names {
        rows.push((name, client.inspect(name)?));
    }
    if json {
        let items: Vec<String> = rows.iter().map(|(n, i)| info_json(n, i)).collect();
        println!("[{}]", items.join(","));
    } else {
        for (n, i) in &rows {
            println!("{}", info_line(n, i));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn unlock(client: &Client, name: &str, force: bool, yes: bool) -> redlease::Result<ExitCode> {
    if !force {
        return Ok(fail(
            EXIT_USAGE,
            "unlock needs --force: it removes the lock from whoever holds it",
        ));
    }
    if !yes {
        eprint!("Remove the lock {name:?} from its current holder? [y/N] ");
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
