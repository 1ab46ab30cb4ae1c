//! `redlease`: run any command under a distributed lock, and inspect locks.
//!
//! Exit codes: the command's own status when it ran; 75 the wait timed out
//! (nothing ran; `-E`/`--conflict-exit-code` picks another code, as in
//! flock(1), so that it cannot be mistaken for the command's own); 73 the command was stopped for its lease: lost, or
//! about to end (it was sent the configured signal); 69 Redis was unreachable or failed; 64 bad
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

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// `eprintln!` that never panics: a closed or full stderr (a pipe whose
/// reader went away, a terminal we are in the background of) must not
/// kill the thread that stops the command or the keeper.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

#[path = "redlease/doctor.rs"]
mod doctor;
#[path = "redlease/keeper.rs"]
mod keeper;
#[path = "redlease/run.rs"]
mod run;
#[path = "redlease/show.rs"]
mod show;
#[path = "redlease/signals.rs"]
mod signals;

use doctor::{doctor, doctor_unreachable};
use redlease::{Client, ErrorKind};
use run::{run, RunArgs};
use show::{list, shown, status};

const EXIT_DEGRADED: u8 = 2;
const EXIT_USAGE: u8 = 64;
const EXIT_DECLINED: u8 = 65;
const EXIT_UNAVAILABLE: u8 = 69;
const EXIT_LOST: u8 = 73;
const EXIT_TIMEOUT: u8 = 75;

#[derive(Parser)]
#[command(
    name = "redlease",
    version,
    about = "Run commands under Redis locks; inspect locks",
    arg_required_else_help = true,
    next_help_heading = "Global options"
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
    #[arg(
        long,
        env = "REDLEASE_PREFIX",
        hide_env_values = true,
        default_value = "",
        global = true
    )]
    prefix: String,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Acquire NAME, run CMD with REDLEASE_FENCE (or REDLEASE_PERMIT_ID) and
    /// REDLEASE_NAME set, release.
    Run(RunArgs),
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
    /// Remove a lock, a read-write lock's holds or a semaphore's permits,
    /// whoever holds them.
    Unlock {
        /// The name, as bytes (the form `list` prints).
        name: OsString,
        /// Required: this breaks mutual exclusion for the current holders.
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
        /// Of a semaphore, free only this permit (the id `Permit::detach`
        /// returns); otherwise every permit is freed.
        #[arg(long, value_name = "ID")]
        permit: Option<String>,
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
            say!(
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

/// Logging to stderr (env_logger): one level per `-v` (info, debug,
/// trace); without `-v`, `RUST_LOG`'s filters (`debug`,
/// `redlease=debug,r2d2=warn`), else warnings only.
fn init_logging(verbose: u8) {
    let mut logger = env_logger::Builder::new();
    logger
        .filter_level(log::LevelFilter::Warn)
        .target(env_logger::Target::Stderr);
    match verbose {
        0 => {
            if let Ok(filters) = std::env::var("RUST_LOG") {
                logger.parse_filters(&filters);
            }
        }
        1 => {
            logger.filter_level(log::LevelFilter::Info);
        }
        2 => {
            logger.filter_level(log::LevelFilter::Debug);
        }
        _ => {
            logger.filter_level(log::LevelFilter::Trace);
        }
    }
    let _ = logger.try_init();
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    say!("redlease: {msg}");
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
    // `run`'s keeper is this binary started again (see keeper.rs).
    let argv: Vec<OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == keeper::KEEP) {
        return keeper::main(&argv[2..]);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    init_logging(cli.verbose);
    let client = match (connect(&cli), &cli.command) {
        (Ok(c), _) => c,
        (Err(Refused::Usage(e)), _) => return fail(EXIT_USAGE, e),
        (Err(Refused::Client(e)), Cmd::Doctor { json }) => return doctor_unreachable(&e, *json),
        (Err(Refused::Client(e)), _) => return fail(error_code(&e), e),
    };
    let result = match cli.command {
        Cmd::Run(args) => run(&client, &args),
        Cmd::Status { name, json } => status(&client, name.as_bytes(), json),
        Cmd::List { pattern, json } => list(&client, pattern.as_bytes(), json),
        Cmd::Unlock {
            name,
            force,
            yes,
            permit,
        } => unlock(&client, name.as_bytes(), force, yes, permit.as_deref()),
        Cmd::Doctor { json } => Ok(doctor(&client, json)),
    };
    match result {
        Ok(code) => code,
        Err(e) => fail(error_code(&e), e),
    }
}

/// Help and version go to stdout and succeed; the rest is misuse, reported
/// like every other error: one line on stderr.
fn usage_error(e: clap::Error) -> ExitCode {
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    // Bare `redlease`: the whole help (the commands and what they do), as
    // a usage error.
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = e.print();
        return ExitCode::from(EXIT_USAGE);
    }
    // Everything before the usage line: the error and, for missing
    // arguments, the list of what is missing.
    let text = e.render().to_string();
    // A tip is a sentence of its own, not glued to the error ("found
    // tip: ...").
    let what: Vec<String> = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:"))
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
        .map(|l| match l.strip_prefix("tip: ") {
            Some(tip) => format!("({tip})"),
            None => l.to_owned(),
        })
        .collect();
    let what = what.join(" ");
    let what = what.trim_start_matches("error: ");
    // The form of the command, so that `run foo` (no `-- CMD`) shows what a
    // whole one looks like.
    let usage = text
        .lines()
        .find_map(|l| l.strip_prefix("Usage: "))
        // `--url` has a default (and REDIS_URL): clap names it in every
        // usage line, as if it were required.
        .map(|u| format!("; usage: {}", u.trim().replace(" --url <URL>", "")))
        .unwrap_or_default();
    let what = if what.is_empty() {
        "invalid arguments"
    } else {
        what
    };
    fail(EXIT_USAGE, format!("{what}{usage} (see --help)"))
}

/// Why no client was made: bad arguments (a password or TLS file), or the
/// client's own error.
enum Refused {
    Usage(String),
    Client(redlease::Error),
}

/// The client the global options describe.
fn connect(cli: &Cli) -> Result<Client, Refused> {
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
    let urls = given
        .into_iter()
        .map(|u| match &cli.password_file {
            Some(file) => with_password(u, file),
            None => Ok(u.to_owned()),
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(Refused::Usage)?;
    let read = |path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|e| Refused::Usage(format!("cannot read {}: {e}", path.display())))
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
        builder = builder.tls_root_cert(read(ca)?);
    }
    if let (Some(cert), Some(key)) = (&cli.tls_cert, &cli.tls_key) {
        builder = builder.tls_client_cert(read(cert)?, read(key)?);
    }
    builder.build().map_err(Refused::Client)
}

fn unlock(
    client: &Client,
    name: &[u8],
    force: bool,
    yes: bool,
    permit: Option<&str>,
) -> redlease::Result<ExitCode> {
    if !force {
        return Ok(fail(
            EXIT_USAGE,
            "unlock needs --force: it removes the lock from whoever holds it",
        ));
    }
    let permit = match permit.map(str::parse::<redlease::PermitId>).transpose() {
        Ok(p) => p,
        Err(e) => return Ok(fail(EXIT_USAGE, format!("--permit: {e}"))),
    };
    // What is held under the name: a lock, a read-write lock's holds, a
    // semaphore's permits (a name is usually one of them).
    let info = client.inspect(name)?;
    let locked = info.holder.is_some();
    let rw = info.writer.is_some() || info.readers > 0;
    let permits = info.permits_in_use > 0;
    if !(locked || rw || permits) {
        println!("\"{}\" was not locked; nothing to remove", shown(name));
        return Ok(ExitCode::SUCCESS);
    }
    if !yes {
        let what = match (&permit, permits) {
            (Some(id), _) => format!("the permit {id} of \"{}\"", shown(name)),
            (None, true) => format!("every permit of \"{}\"", shown(name)),
            (None, false) => format!("the lock \"{}\"", shown(name)),
        };
        eprint!("Remove {what} from its current holder? [y/N] ");
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Ok(fail(EXIT_DECLINED, "not confirmed; nothing removed"));
        }
    }
    // The count matters only when none is stored; permits in use store it.
    let sem = client.semaphore(name, info.permits.unwrap_or(1).max(1) as u32);
    if let Some(id) = permit {
        let freed = sem.release_id(&id)?;
        println!("{}", if freed { "removed" } else { "no such permit" });
        return Ok(ExitCode::SUCCESS);
    }
    let mut removed = Vec::new();
    if locked && client.lock(name).force_unlock()? {
        removed.push("the lock".to_string());
    }
    if rw && client.rw_lock(name).force_unlock()? {
        removed.push("the read-write lock's holds".to_string());
    }
    if permits {
        let n = sem.force_release_all()?;
        if n > 0 {
            removed.push(format!("{n} permit{}", if n == 1 { "" } else { "s" }));
        }
    }
    if removed.is_empty() {
        println!("was not locked");
    } else {
        println!("removed {}", removed.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}
