//! `redlease-check`: the bounded check of every configuration (what
//! `scripts/check.sh` runs). Exit 0 when every property holds; 1 with the
//! counterexample's trace (also written to `--trace-dir`) when one fails.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use redlease_check::configs::{Checked, Config, Expect};
use redlease_check::search::{explore, replay, Model, Report};
use redlease_check::server::Server;

struct Args {
    depth: Option<usize>,
    max_states: u64,
    trace_dir: std::path::PathBuf,
    only: Option<String>,
    /// Configurations explored at once, each on its own thread.
    jobs: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        depth: None,
        // Keeps the bounded check (41 configurations, 2 jobs) within CI's
        // 5 minutes on a slow day of this shared machine: 205.2 s in CI
        // at 1.2 million, 252.7 s at 1.3 million alone, 354 s at 1.5
        // million with a second load beside them, where 38 of them had
        // taken 217 s in CI at 1.5 million the day before.
        max_states: 1_200_000,
        trace_dir: "target/check".into(),
        only: None,
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match x.as_str() {
            "--depth" => {
                a.depth = Some(
                    val("--depth")?
                        .parse()
                        .map_err(|e| format!("--depth: {e}"))?,
                )
            }
            "--max-states" => {
                a.max_states = val("--max-states")?
                    .parse()
                    .map_err(|e| format!("--max-states: {e}"))?
            }
            "--trace-dir" => a.trace_dir = val("--trace-dir")?.into(),
            "--only" => a.only = Some(val("--only")?),
            "--jobs" => {
                a.jobs = val("--jobs")?
                    .parse::<usize>()
                    .map_err(|e| format!("--jobs: {e}"))?
                    .max(1)
            }
            "-h" | "--help" => {
                println!(
                    "redlease-check [--depth N] [--max-states N] [--only NAME] [--jobs N] [--trace-dir DIR]\n\
                     Explores every configuration (or NAME's) to N steps, --jobs at once (default: \
                     one a core); exit 0 when no property \
                     is broken, 1 with a trace when one is."
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

/// Explores one configuration: whether it passed, and what to print.
fn run<M: Model>(name: &str, model: &M, depth: usize, expect: Expect, a: &Args) -> (bool, String) {
    use std::fmt::Write;
    let mut out = String::new();
    let mut server = Server::new().expect("Lua starts");
    let r: Report<M::Action> = explore(model, &mut server, depth, a.max_states);
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let _ = writeln!(
        out,
        "{name:<28} {:>9} states {:>10} transitions  depth {:>3}{}  {:>6.1} s  {:>7.0} states/s  {}",
        r.states,
        r.transitions,
        r.depth,
        if r.bounded { " (bound)" } else { " (all)  " },
        secs,
        r.states as f64 / secs,
        match (&r.violation, expect) {
            (None, Expect::Holds) => "0 violations",
            (Some(_), Expect::Holds) => "VIOLATION",
            (Some((what, _)), Expect::Finds(known)) if what.contains(known) => "found, as expected",
            (_, Expect::Finds(_)) => "KNOWN BUG NOT FOUND",
        }
    );
    let passed = match (&r.violation, expect) {
        (None, Expect::Holds) => true,
        (Some((what, _)), Expect::Finds(known)) => what.contains(known),
        _ => false,
    };
    if let Some((what, path)) = &r.violation {
        let trace = replay(model, &mut server, path);
        let file = write_trace(a, name, what, &trace);
        let _ = writeln!(
            out,
            "  {what}\n  trace ({} steps) in {}",
            path.len(),
            file.display()
        );
        // A new counterexample is shown whole; a known one by its file.
        if !passed {
            for l in trace.iter().take(400) {
                let _ = writeln!(out, "  | {l}");
            }
        }
    }
    (passed, out)
}

fn write_trace(a: &Args, name: &str, what: &str, trace: &[String]) -> std::path::PathBuf {
    let _ = std::fs::create_dir_all(&a.trace_dir);
    let slug: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let file = a.trace_dir.join(format!("{slug}.trace"));
    let text = format!("{name}: {what}\n\n{}\n", trace.join("\n"));
    let _ = std::fs::write(&file, &text);
    file
}

/// One configuration, to its depth bound.
fn check(c: &Config, a: &Args) -> (bool, String) {
    let depth = a.depth.unwrap_or(c.depth);
    match &c.model {
        Checked::Lock(m) => run(c.name, m, depth, c.expect, a),
        Checked::Semaphore(m) => run(c.name, m, depth, c.expect, a),
        Checked::RwLock(m) => run(c.name, m, depth, c.expect, a),
        Checked::Latch(m) => run(c.name, m, depth, c.expect, a),
        Checked::Redlock(m) => run(c.name, m, depth, c.expect, a),
        Checked::MultiLock(m) => run(c.name, m, depth, c.expect, a),
        Checked::Sentinel(m) => run(c.name, m, depth, c.expect, a),
    }
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("redlease-check: {e}");
            std::process::exit(64);
        }
    };
    let started = Instant::now();
    let chosen: Vec<usize> = redlease_check::configs::all()
        .iter()
        .enumerate()
        .filter(|(_, c)| a.only.as_deref().is_none_or(|o| c.name.contains(o)))
        .map(|(i, _)| i)
        .collect();
    // Configurations are independent: each worker takes the next, with
    // its own Lua and its own models, and prints each result whole as it
    // ends.
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let print = Mutex::new(());
    std::thread::scope(|scope| {
        for _ in 0..a.jobs.min(chosen.len()).max(1) {
            scope.spawn(|| {
                let configs = redlease_check::configs::all();
                while let Some(&i) = chosen.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let (passed, out) = check(&configs[i], &a);
                    if !passed {
                        failed.store(true, Ordering::Relaxed);
                    }
                    let _one_at_a_time = print.lock();
                    print!("{out}");
                }
            });
        }
    });
    let ok = !failed.load(Ordering::Relaxed);
    println!(
        "{} in {:.1} s",
        if ok {
            "every property holds within the bounds"
        } else {
            "FAILED"
        },
        started.elapsed().as_secs_f64()
    );
    std::process::exit(if ok { 0 } else { 1 });
}
