//! Nemesis soak: worker processes contend for a lock, the write side of a
//! read-write lock and a 2-permit semaphore through a fault-injecting proxy
//! while the parent (the nemesis) drops, delays and blackholes replies,
//! cuts every connection, disturbs renewals during long holds, SIGSTOPs a
//! holder past its lease and restarts the server (AOF with `appendfsync
//! always`, same data directory). Every grant is recorded; the history is
//! checked afterwards by [`checker`], which has tests of its own below.
//!
//! ```text
//! cargo test --all-features --test nemesis -- --nocapture
//! REDLEASE_SOAK_ACQUISITIONS=100000 scripts/soak.sh
//! ```
//!
//! Environment: `REDLEASE_SOAK_ACQUISITIONS` (target, default 10,000),
//! `REDLEASE_SOAK_SEED` (the nemesis schedule; every run prints its seed),
//! `REDLEASE_SOAK_HISTORY_DIR` (keep the histories there).
//!
//! # Workers
//!
//! Four child processes (this test binary itself, re-run with
//! `REDLEASE_NEMESIS_WORKER=<index>`, see `worker_entry`), each with its own
//! `Client` through the proxy (watchdog 1.5 s, response timeout 400 ms) and
//! three threads. Each thread loops: pick L (lock), W (write lock) or S
//! (semaphore of 2), acquire with a 1 s timeout, critical section, check
//! `is_held()` once more, release. In the critical section of L and W the
//! thread does a non-atomic read-modify-write of a plain register on a
//! direct connection to the server (GET; sleep; `is_held()`; SET
//! `"<n+1>/<pid:thread:seq>"` only if still held); for S it adds itself to
//! an occupancy set (informative only). Workers talk to the parent over
//! stdin (`stop`, `pause-next`, `resumed`, `long-next <ms>`) and stdout
//! (`@@ ` lines) and write their history to a file read at the end.
//!
//! # Nemesis
//!
//! Every 40-180 ms one random fault on a random pattern (`EVALSHA`, `EVAL`,
//! `{L}`, `{W}`, `{S}`): reply dropped (connection kept, or closed), closed
//! before forwarding, reply delayed (10-200 ms, or past the response
//! timeout), connection blackholed, every connection cut, or a 150 ms
//! outage of one primitive. Every few seconds a worker is told to hold its
//! next grant for 0.8-2.2 s while, for 1.2-2 s, every renewal is delayed
//! (in time, or past the response timeout), loses its reply, is
//! blackholed, is refused, or loses one reply. Once per round of up to
//! 10,000 acquisitions: at a quarter, a worker is SIGSTOPped right after its
//! register read in an L or W hold, for the lease plus 1 s; at half, the
//! server is killed and restarted on the same port with the same data.
//!
//! # History
//!
//! One `H` line per grant (see [`checker::Hold`]): primitive, holder
//! (`pid:thread`), sequence number, fence (L and W), `t_call` (just before
//! the acquire call), `t_granted` (just after it returned), `t_last_held`
//! (taken just *before* the last `is_held()` call that returned true; the
//! last check is made right before `release()`), `t_set` (just after the
//! register SET was acknowledged), the release outcome, whether the last
//! check said held, what the register read returned, whether the SET was
//! acknowledged (`y`), not sent (`n`) or failed (`m`, maybe executed), the
//! semaphore occupancy seen. Times are CLOCK_MONOTONIC nanoseconds,
//! comparable across the processes of this machine (`Instant`, which the
//! library's local lease expiry uses, is CLOCK_MONOTONIC on Linux as well).
//! The rules are on [`checker::check`].

mod common;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::proxy::{Fault, Proxy};
use common::{worker, Server};

const ROLE_ENV: &str = "REDLEASE_NEMESIS_WORKER";
const WORKERS: usize = 4;
const THREADS: usize = 3;
const WATCHDOG_MS: u64 = 1_500;
const RESPONSE_MS: u64 = 400;
/// Acquisitions per second this machine (2 shared cores) manages under the
/// nemesis, pessimistically; the hard cap is ten times the time it implies.
const EXPECTED_RATE: u64 = 150;
const REGISTER: &str = "nemesis:reg:";
const OCCUPANCY: &str = "nemesis:occ:S";

/// CLOCK_MONOTONIC in nanoseconds.
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// xorshift64*: enough randomness for fault schedules, reproducible by seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// The history checker. Pure: a list of holds and the registers' final
/// values in, a verdict out.
pub mod checker {
    use std::collections::HashMap;
    use std::fmt;

    /// What a critical section's register GET returned.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Read {
        /// No GET was made (not held at the first check, or it failed).
        NotRead,
        /// The register did not exist yet.
        Empty,
        /// Counter `n`, written by the section with id `from`.
        Value { n: u64, from: String },
    }

    /// Whether the section's register SET happened.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Wrote {
        /// Not sent.
        No,
        /// Acknowledged by the server.
        Yes,
        /// Sent, outcome unknown (error): it may have run, even later.
        Maybe,
    }

    /// One grant and what its holder did with it.
    #[derive(Clone, Debug)]
    pub struct Hold {
        pub prim: char,
        /// `pid:thread`
        pub holder: String,
        pub seq: u64,
        /// Fencing token (L and W); 0 for S.
        pub fence: u64,
        pub t_call: u64,
        pub t_granted: u64,
        /// Taken just before the last `is_held()` that returned true; 0 if
        /// no check ever did.
        pub t_last_held: u64,
        /// Taken just after the register SET was acknowledged; 0 if none.
        pub t_set: u64,
        /// `Ok`, or the error kind of `release()`.
        pub release: String,
        /// Whether the last check (right before `release()`) said held.
        pub end_held: bool,
        pub read: Read,
        pub wrote: Wrote,
        /// Semaphore occupancy seen inside (S), -1 if not measured.
        pub occ: i64,
    }

    impl Hold {
        /// The id written into the register: `pid:thread:seq`.
        pub fn id(&self) -> String {
            format!("{}:{}", self.holder, self.seq)
        }

        /// The hold was seen held at least once: `[t_granted, t_last_held]`
        /// is an interval during which the library claimed it exclusive.
        pub fn valid(&self) -> bool {
            self.t_last_held != 0 && self.t_last_held >= self.t_granted
        }

        /// Its read-modify-write lies wholly inside its valid interval: the
        /// GET came after a true check, the SET was acknowledged before a
        /// later true check.
        pub fn sound(&self) -> bool {
            self.valid()
                && self.wrote == Wrote::Yes
                && self.t_set != 0
                && self.t_last_held >= self.t_set
                && matches!(self.read, Read::Empty | Read::Value { .. })
        }

        /// It may have written the register without that write being
        /// covered by its lease (it found its hold lost before its last
        /// check, or its SET's outcome is unknown).
        pub fn unsound_writer(&self) -> bool {
            self.wrote != Wrote::No && !self.sound()
        }

        pub fn limit(&self) -> usize {
            if self.prim == 'S' {
                2
            } else {
                1
            }
        }

        /// Parses one `H` line (the inverse of `Display`).
        pub fn parse(line: &str) -> Option<Hold> {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 14 || f[0] != "H" {
                return None;
            }
            let read = match f[11] {
                "-" => Read::NotRead,
                "E" => Read::Empty,
                v => {
                    let (n, from) = v.split_once('/')?;
                    Read::Value {
                        n: n.parse().ok()?,
                        from: from.to_string(),
                    }
                }
            };
            let wrote = match f[12] {
                "n" => Wrote::No,
                "y" => Wrote::Yes,
                "m" => Wrote::Maybe,
                _ => return None,
            };
            Some(Hold {
                prim: f[1].chars().next()?,
                holder: f[2].to_string(),
                seq: f[3].parse().ok()?,
                fence: f[4].parse().ok()?,
                t_call: f[5].parse().ok()?,
                t_granted: f[6].parse().ok()?,
                t_last_held: f[7].parse().ok()?,
                t_set: f[8].parse().ok()?,
                release: f[9].to_string(),
                end_held: f[10] == "held",
                read,
                wrote,
                occ: f[13].parse().ok()?,
            })
        }
    }

    impl fmt::Display for Hold {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let read = match &self.read {
                Read::NotRead => "-".to_string(),
                Read::Empty => "E".to_string(),
                Read::Value { n, from } => format!("{n}/{from}"),
            };
            let wrote = match self.wrote {
                Wrote::No => "n",
                Wrote::Yes => "y",
                Wrote::Maybe => "m",
            };
            write!(
                f,
                "H {} {} {} {} {} {} {} {} {} {} {} {} {}",
                self.prim,
                self.holder,
                self.seq,
                self.fence,
                self.t_call,
                self.t_granted,
                self.t_last_held,
                self.t_set,
                self.release,
                if self.end_held { "held" } else { "lost" },
                read,
                wrote,
                self.occ
            )
        }
    }

    /// Final register values: `None` if the key does not exist.
    pub type Registers = HashMap<char, Option<(u64, String)>>;

    #[derive(Debug, Default)]
    pub struct Verdict {
        /// Grants at which more than the limit of valid intervals overlapped.
        pub overlaps: usize,
        /// Repeated fences, and fences out of real-time grant order.
        pub fence_violations: usize,
        /// Sound register updates that a sound section failed to see.
        pub lost_updates: usize,
        /// Sound updates overwritten or interleaved by an unsound writer
        /// (a holder that lost its lease, or a SET of unknown outcome): the
        /// documented limit of a lease without fencing, not a violation.
        pub excused: usize,
        /// Per register: (sound writes, unsound writers, final counter).
        pub registers: Vec<(char, usize, usize, u64)>,
        /// The first violations, with the history lines involved.
        pub problems: Vec<String>,
    }

    impl Verdict {
        pub fn ok(&self) -> bool {
            self.overlaps == 0 && self.fence_violations == 0 && self.lost_updates == 0
        }

        fn problem(&mut self, p: String) {
            if self.problems.len() < 20 {
                self.problems.push(p);
            }
        }
    }

    /// Checks a history. For each primitive:
    ///
    /// 1. **Overlap**: the valid intervals `[t_granted, t_last_held]`
    ///    (closed) never have more than the limit (1 for L and W, 2 for S)
    ///    in common at any instant.
    /// 2. **Fences** (L, W): no two grants share a fence; a grant that
    ///    returned before another's call started has the smaller fence (the
    ///    server ran the grants in that order, and the counter only grows);
    ///    a valid hold whose interval ended before a valid hold was granted
    ///    has the smaller fence (their leases were disjoint on the server,
    ///    so the server granted them in that order).
    /// 3. **Lost updates** (registers of L and W): each sound section (see
    ///    [`Hold::sound`]) must have read the write of the sound section
    ///    just before it (in grant order), or a write by an unsound writer
    ///    (excused: that writer may have overwritten the earlier update,
    ///    which is what a lease without fencing allows); the register's
    ///    final value must be the last sound section's write, or an unsound
    ///    writer's (excused).
    pub fn check(holds: &[Hold], registers: &Registers) -> Verdict {
        let mut v = Verdict::default();
        for prim in ['L', 'W', 'S'] {
            let mine: Vec<&Hold> = holds.iter().filter(|h| h.prim == prim).collect();
            overlaps(&mine, &mut v);
            if prim != 'S' {
                fences(&mine, &mut v);
                let fin = registers.get(&prim).cloned().flatten();
                lost_updates(prim, &mine, fin, &mut v);
            }
        }
        v
    }

    fn overlaps(holds: &[&Hold], v: &mut Verdict) {
        // (time, 0 = start / 1 = end, index): starts sort before ends at
        // the same instant, so touching intervals count as overlapping.
        let mut events: Vec<(u64, u8, usize)> = Vec::new();
        for (i, h) in holds.iter().enumerate() {
            if h.valid() {
                events.push((h.t_granted, 0, i));
                events.push((h.t_last_held, 1, i));
            }
        }
        events.sort_unstable();
        let mut active: Vec<usize> = Vec::new();
        for (_, kind, i) in events {
            if kind == 1 {
                active.retain(|&a| a != i);
                continue;
            }
            if active.len() >= holds[i].limit() {
                v.overlaps += 1;
                let mut p = format!(
                    "overlap: {} valid holds of {} at once (limit {}):",
                    active.len() + 1,
                    holds[i].prim,
                    holds[i].limit()
                );
                for &a in active.iter().chain(std::iter::once(&i)) {
                    p.push_str(&format!("\n    {}", holds[a]));
                }
                v.problem(p);
            }
            active.push(i);
        }
    }

    fn fences(holds: &[&Hold], v: &mut Verdict) {
        let mut seen: HashMap<u64, &Hold> = HashMap::new();
        for h in holds {
            if let Some(o) = seen.insert(h.fence, h) {
                v.fence_violations += 1;
                v.problem(format!("repeated fence {}:\n    {o}\n    {h}", h.fence));
            }
        }
        // a.t_granted < b.t_call  =>  a.fence < b.fence
        order(
            holds,
            |a| a.t_granted,
            |b| b.t_call,
            "returned before the other was asked",
            v,
        );
        // valid a, b: a.t_last_held < b.t_granted  =>  a.fence < b.fence
        let valid: Vec<&Hold> = holds.iter().copied().filter(|h| h.valid()).collect();
        order(
            &valid,
            |a| a.t_last_held,
            |b| b.t_granted,
            "was last seen held before the other was granted",
            v,
        );
    }

    /// For every pair with `end(a) < start(b)`: `a.fence < b.fence`.
    fn order(
        holds: &[&Hold],
        end: impl Fn(&Hold) -> u64,
        start: impl Fn(&Hold) -> u64,
        what: &str,
        v: &mut Verdict,
    ) {
        let mut by_end: Vec<&Hold> = holds.to_vec();
        by_end.sort_by_key(|h| end(h));
        let mut by_start: Vec<&Hold> = holds.to_vec();
        by_start.sort_by_key(|h| start(h));
        let mut max: Option<&Hold> = None; // highest fence among ended
        let mut i = 0;
        for b in by_start {
            while i < by_end.len() && end(by_end[i]) < start(b) {
                if max.is_none_or(|m| by_end[i].fence > m.fence) {
                    max = Some(by_end[i]);
                }
                i += 1;
            }
            if let Some(a) = max {
                if a.fence >= b.fence {
                    v.fence_violations += 1;
                    v.problem(format!(
                        "fence order: the first {what}, yet its fence is not smaller:\n    {a}\n    {b}"
                    ));
                }
            }
        }
    }

    fn lost_updates(prim: char, holds: &[&Hold], fin: Option<(u64, String)>, v: &mut Verdict) {
        let by_id: HashMap<String, &Hold> = holds.iter().map(|h| (h.id(), *h)).collect();
        let mut sound: Vec<&Hold> = holds.iter().copied().filter(|h| h.sound()).collect();
        sound.sort_by_key(|h| h.t_granted);
        let unsound = holds.iter().filter(|h| h.unsound_writer()).count();
        let mut prev: Option<&Hold> = None;
        // Judges "the value came from `from`" where `prev` is the latest
        // sound write before.
        let judge = |from: Option<&str>, prev: Option<&Hold>, who: String, v: &mut Verdict| {
            let expected = prev.map(|p| p.id());
            if from.map(str::to_string) == expected {
                return;
            }
            match from.map(|f| by_id.get(f)) {
                Some(Some(w)) if w.unsound_writer() => v.excused += 1,
                Some(Some(w)) => {
                    v.lost_updates += 1;
                    v.problem(format!(
                        "lost update on {prim}: {who} saw the write of an earlier sound section, not the latest:\n    saw  {w}\n    last {}",
                        prev.map_or("(none)".to_string(), |p| p.to_string())
                    ));
                }
                Some(None) => {
                    v.lost_updates += 1;
                    v.problem(format!(
                        "lost update on {prim}: {who} saw a write by {}, which is in no history",
                        from.unwrap_or("?")
                    ));
                }
                None => {
                    v.lost_updates += 1;
                    v.problem(format!(
                        "lost update on {prim}: {who} saw no value at all, after\n    {}",
                        prev.map_or("(none)".to_string(), |p| p.to_string())
                    ));
                }
            }
        };
        for b in &sound {
            let from = match &b.read {
                Read::Value { from, .. } => Some(from.as_str()),
                _ => None,
            };
            judge(from, prev, format!("sound section {}", b.id()), v);
            prev = Some(b);
        }
        judge(
            fin.as_ref().map(|(_, f)| f.as_str()),
            prev,
            "the final register value".to_string(),
            v,
        );
        // With no unsound writer at all, the counter is exactly the number
        // of sound sections (the read chain above implies it; this says it).
        let counter = fin.as_ref().map_or(0, |(n, _)| *n);
        if unsound == 0 && counter != sound.len() as u64 {
            v.lost_updates += (sound.len() as u64).abs_diff(counter) as usize;
            v.problem(format!(
                "lost updates on {prim}: the register counts {counter}, but {} sound sections wrote it",
                sound.len()
            ));
        }
        v.registers.push((prim, sound.len(), unsound, counter));
    }
}

// ---------------------------------------------------------------- worker

fn say(msg: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "@@ {msg}");
    let _ = out.flush();
}

/// A plain connection straight to the server (not through the proxy), for
/// the registers and the occupancy set. Reconnects after any error.
struct Direct {
    url: String,
    con: Option<redis::Connection>,
}

impl Direct {
    fn con(&mut self) -> Option<&mut redis::Connection> {
        if self.con.is_none() {
            let con = redis::Client::open(self.url.as_str())
                .ok()?
                .get_connection_with_timeout(Duration::from_millis(500))
                .ok()?;
            con.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
            con.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
            self.con = Some(con);
        }
        self.con.as_mut()
    }

    /// `None`: not sent (no connection); `Some(Err)`: sent, outcome unknown.
    fn run<T>(
        &mut self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Option<redis::RedisResult<T>> {
        let r = f(self.con()?);
        if r.is_err() {
            self.con = None;
        }
        Some(r)
    }
}

enum Guard {
    L(redlease::LockGuard),
    W(redlease::WriteGuard),
    S(redlease::Permit),
}

impl Guard {
    fn is_held(&self) -> bool {
        match self {
            Guard::L(g) => g.is_held(),
            Guard::W(g) => g.is_held(),
            Guard::S(g) => g.is_held(),
        }
    }

    fn fence(&self) -> u64 {
        match self {
            Guard::L(g) => g.fencing_token(),
            Guard::W(g) => g.fencing_token(),
            Guard::S(_) => 0,
        }
    }

    fn release(self) -> redlease::Result<()> {
        match self {
            Guard::L(g) => g.release(),
            Guard::W(g) => g.release(),
            Guard::S(g) => g.release(),
        }
    }
}

/// `is_held()`, remembering the time taken just before a true answer.
fn check(g: &Guard, last: &mut u64) -> bool {
    let t = mono_ns();
    let held = g.is_held();
    if held {
        *last = t;
    }
    held
}

/// A long critical section of `ms` (announced to the parent, which
/// disturbs renewals meanwhile): sleeps in 50 ms steps while `is_held()`.
fn long_hold(g: &Guard, last: &mut u64, id: &str, ms: u64, stats: &mut HashMap<String, u64>) {
    say(format!("long-hold {id} {ms}"));
    bump(stats, "long-hold");
    let end = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
        if !check(g, last) {
            bump(stats, "long-hold-lost");
            return;
        }
    }
}

struct Shared {
    stop: AtomicBool,
    pause_next: AtomicBool,
    /// The parent has SIGCONTed this process after pausing it.
    resumed: AtomicBool,
    /// The next critical section lasts this long (ms, 0: a normal one),
    /// checking `is_held()` every 50 ms and ending early once it is false.
    long_next_ms: AtomicU64,
    granted: AtomicU64,
}

fn bump(stats: &mut HashMap<String, u64>, key: impl Into<String>) {
    *stats.entry(key.into()).or_default() += 1;
}

/// An error's text on one line, for the figures.
fn one_line(e: &redlease::Error) -> String {
    e.to_string().replace(['\n', '\r'], " ")
}

fn kind(e: &redlease::Error) -> String {
    format!("{:?}", e.kind())
}

/// One worker thread: acquire, critical section, release, record.
fn worker_thread(
    client: redlease::Client,
    direct_url: String,
    shared: Arc<Shared>,
    t: usize,
    seed: u64,
    deadline: Instant,
) -> (Vec<String>, HashMap<String, u64>) {
    let pid = std::process::id();
    let holder = format!("{pid}:{t}");
    let mut rng = Rng::new(seed);
    let mut direct = Direct {
        url: direct_url,
        con: None,
    };
    let (lock, rw, sem) = (
        client.lock("L"),
        client.rw_lock("W"),
        client.semaphore("S", 2),
    );
    let wait = Duration::from_millis(1_000);
    let mut lines = Vec::new();
    let mut stats = HashMap::new();
    let mut seq = 0u64;
    while !shared.stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        seq += 1;
        let prim = ['L', 'W', 'S'][rng.below(3) as usize];
        bump(&mut stats, format!("attempt:{prim}"));
        let t_call = mono_ns();
        let acquired = match prim {
            'L' => lock.acquire_timeout(wait).map(|g| g.map(Guard::L)),
            'W' => rw.write_timeout(wait).map(|g| g.map(Guard::W)),
            _ => sem.acquire_timeout(wait).map(|g| g.map(Guard::S)),
        };
        let t_granted = mono_ns();
        let g = match acquired {
            Ok(Some(g)) => g,
            Ok(None) => {
                bump(&mut stats, "timeout");
                continue;
            }
            Err(e) => {
                bump(&mut stats, format!("acquire:{}", kind(&e)));
                bump(&mut stats, format!("msg:acquire: {}", one_line(&e)));
                // Errors come fast under some faults; do not spin.
                std::thread::sleep(Duration::from_millis(rng.range(1, 20)));
                continue;
            }
        };
        shared.granted.fetch_add(1, Ordering::SeqCst);
        let mut hold = checker::Hold {
            prim,
            holder: holder.clone(),
            seq,
            fence: g.fence(),
            t_call,
            t_granted,
            t_last_held: 0,
            t_set: 0,
            release: String::new(),
            end_held: false,
            read: checker::Read::NotRead,
            wrote: checker::Wrote::No,
            occ: -1,
        };
        let mut last = 0;
        if prim == 'S' {
            let id = hold.id();
            if check(&g, &mut last) {
                let added = direct.run(|c| {
                    redis::pipe()
                        .atomic()
                        .sadd(OCCUPANCY, &id)
                        .scard(OCCUPANCY)
                        .query::<(i64, i64)>(c)
                });
                if let Some(Ok((_, n))) = added {
                    hold.occ = n;
                }
                match shared.long_next_ms.swap(0, Ordering::SeqCst) {
                    0 => std::thread::sleep(Duration::from_micros(rng.range(200, 2_000))),
                    ms => long_hold(&g, &mut last, &id, ms, &mut stats),
                }
                // SREM is idempotent: retrying is harmless. Long enough to
                // outlast a server restart (AOF loading included), or the
                // member would inflate every later occupancy reading.
                let end = Instant::now() + Duration::from_secs(15);
                while Instant::now() < end {
                    if let Some(Ok(_)) =
                        direct.run(|c| redis::cmd("SREM").arg(OCCUPANCY).arg(&id).query::<i64>(c))
                    {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        } else if check(&g, &mut last) {
            let key = format!("{REGISTER}{prim}");
            match direct.run(|c| redis::cmd("GET").arg(&key).query::<Option<String>>(c)) {
                Some(Ok(v)) => {
                    let (n, read) = match v.as_deref().and_then(|s| s.split_once('/')) {
                        Some((n, from)) => {
                            let n: u64 = n.parse().expect("register counter");
                            (
                                n,
                                checker::Read::Value {
                                    n,
                                    from: from.to_string(),
                                },
                            )
                        }
                        None => (0, checker::Read::Empty),
                    };
                    hold.read = read;
                    if shared.pause_next.swap(false, Ordering::SeqCst) {
                        // The parent SIGSTOPs this process on this line and
                        // says "resumed" after SIGCONT: the hold is paused
                        // between the read and the write, whatever the delays.
                        shared.resumed.store(false, Ordering::SeqCst);
                        say(format!("paused-hold {} {}", hold.id(), hold.fence));
                        let end = Instant::now() + Duration::from_secs(30);
                        while !shared.resumed.load(Ordering::SeqCst) && Instant::now() < end {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                    match shared.long_next_ms.swap(0, Ordering::SeqCst) {
                        0 => std::thread::sleep(Duration::from_micros(rng.range(100, 1_500))),
                        ms => long_hold(&g, &mut last, &hold.id(), ms, &mut stats),
                    }
                    if check(&g, &mut last) {
                        let value = format!("{}/{}", n + 1, hold.id());
                        match direct.run(|c| redis::cmd("SET").arg(&key).arg(&value).query::<()>(c))
                        {
                            Some(Ok(())) => {
                                hold.wrote = checker::Wrote::Yes;
                                hold.t_set = mono_ns();
                            }
                            Some(Err(_)) => hold.wrote = checker::Wrote::Maybe,
                            None => {}
                        }
                    }
                }
                Some(Err(_)) | None => bump(&mut stats, "direct-error"),
            }
        }
        // The last check, right before the release.
        hold.end_held = check(&g, &mut last);
        hold.t_last_held = last;
        hold.release = match g.release() {
            Ok(()) => "Ok".to_string(),
            Err(e) => {
                bump(&mut stats, format!("msg:release: {}", one_line(&e)));
                kind(&e)
            }
        };
        bump(&mut stats, format!("release:{}", hold.release));
        lines.push(hold.to_string());
    }
    (lines, stats)
}

/// The child side. Does nothing unless run as a worker.
#[test]
fn worker_entry() {
    let Ok(index) = std::env::var(ROLE_ENV) else {
        return;
    };
    let index: u64 = index.parse().unwrap();
    let proxy_url = std::env::var("REDLEASE_NEMESIS_PROXY").unwrap();
    let direct_url = std::env::var("REDLEASE_NEMESIS_DIRECT").unwrap();
    let history = std::env::var("REDLEASE_NEMESIS_HISTORY").unwrap();
    let seed = env_u64("REDLEASE_NEMESIS_SEED", 1);
    let cap = Duration::from_millis(env_u64("REDLEASE_NEMESIS_CAP_MS", 600_000));
    let deadline = Instant::now() + cap;
    let client = redlease::Client::builder()
        .url(&proxy_url)
        .watchdog_timeout(Duration::from_millis(WATCHDOG_MS))
        .response_timeout(Duration::from_millis(RESPONSE_MS))
        .connect_timeout(Duration::from_millis(RESPONSE_MS))
        .pool_timeout(Duration::from_secs(2))
        .fallback_poll(Duration::from_millis(250))
        .build()
        .unwrap();
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        pause_next: AtomicBool::new(false),
        resumed: AtomicBool::new(false),
        long_next_ms: AtomicU64::new(0),
        granted: AtomicU64::new(0),
    });
    {
        let shared = shared.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                match line.as_deref() {
                    Ok("stop") => break,
                    Ok("pause-next") => shared.pause_next.store(true, Ordering::SeqCst),
                    Ok("resumed") => shared.resumed.store(true, Ordering::SeqCst),
                    Ok(l) if l.starts_with("long-next ") => {
                        let ms = l["long-next ".len()..].parse().unwrap_or(0);
                        shared.long_next_ms.store(ms, Ordering::SeqCst);
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            // "stop", or the parent is gone.
            shared.stop.store(true, Ordering::SeqCst);
        });
    }
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (client, url, shared) = (client.clone(), direct_url.clone(), shared.clone());
            let seed = seed
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(index * 16 + t as u64 + 1);
            std::thread::spawn(move || worker_thread(client, url, shared, t, seed, deadline))
        })
        .collect();
    while !threads.iter().all(|h| h.is_finished()) {
        say(format!("n {}", shared.granted.load(Ordering::SeqCst)));
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(&history).unwrap());
    let mut total: HashMap<String, u64> = HashMap::new();
    for h in threads {
        let (lines, stats) = h.join().unwrap();
        for l in lines {
            writeln!(out, "{l}").unwrap();
        }
        for (k, n) in stats {
            *total.entry(k).or_default() += n;
        }
    }
    for (k, n) in total {
        writeln!(out, "C {k} {n}").unwrap();
    }
    out.flush().unwrap();
    drop(out);
    say(format!("done {}", shared.granted.load(Ordering::SeqCst)));
}

// ---------------------------------------------------------------- parent

/// A child process running `worker_entry`, with its progress.
struct Worker {
    inner: worker::Worker,
    history: std::path::PathBuf,
    granted: u64,
}

impl Worker {
    fn spawn(index: usize, env: &[(&str, String)], history: std::path::PathBuf) -> Worker {
        let mut all = vec![
            (ROLE_ENV, index.to_string()),
            ("REDLEASE_NEMESIS_HISTORY", history.display().to_string()),
        ];
        all.extend(env.iter().cloned());
        Worker {
            inner: worker::Worker::spawn("worker_entry", &all),
            history,
            granted: 0,
        }
    }

    fn tell(&mut self, line: &str) {
        self.inner.tell(line);
    }

    fn signal(&self, sig: i32) {
        self.inner.signal(sig);
    }

    /// Takes the progress lines; returns the other messages.
    fn drain(&mut self) -> Vec<String> {
        let mut other = Vec::new();
        while let Ok(l) = self.inner.lines.try_recv() {
            if let Some(n) = l.strip_prefix("n ") {
                self.granted = n.parse().unwrap_or(self.granted);
            } else {
                other.push(l);
            }
        }
        other
    }

    fn exited(&mut self) -> bool {
        self.inner.exited()
    }
}

#[derive(PartialEq)]
enum Pause {
    Idle,
    Requested(Instant, usize),
    Stopped(Instant, usize),
}

enum Long {
    Idle(Instant),
    Requested(Instant, usize),
    Active(Instant),
}

/// The renewal scripts' hashes: every renewal is an `EVALSHA` of one of
/// them, in a pipeline that starts with `SCRIPT LOAD`.
fn renewal_shas() -> [String; 2] {
    [
        redis::Script::new(&common::lua_source("lock_extend.lua"))
            .get_hash()
            .to_string(),
        redis::Script::new(&common::lua_source("zset_extend.lua"))
            .get_hash()
            .to_string(),
    ]
}

/// Disturbs every renewal until `clear()`, while a long hold runs; returns
/// its name for the figures.
fn disturb_renewals(proxy: &Proxy, rng: &mut Rng, shas: &[String; 2]) -> &'static str {
    let on_shas = |f: Fault| shas.iter().for_each(|s| proxy.always(s.as_bytes(), f));
    match rng.below(6) {
        // Renewals run, their replies come after the response timeout.
        0 => {
            on_shas(Fault::Delay(Duration::from_millis(
                rng.range(RESPONSE_MS + 50, 900),
            )));
            "renewals-late"
        }
        // Renewals run, slowly but in time.
        1 => {
            on_shas(Fault::Delay(Duration::from_millis(
                rng.range(50, RESPONSE_MS - 100),
            )));
            "renewals-slow"
        }
        // Renewals run, their replies never come.
        2 => {
            on_shas(Fault::DropReply);
            "renewals-reply-dropped"
        }
        // Renewal pipelines vanish.
        3 => {
            proxy.always(b"SCRIPT", Fault::Blackhole);
            "renewals-blackholed"
        }
        // Renewal pipelines' connections close before anything runs.
        4 => {
            proxy.always(b"SCRIPT", Fault::CloseBeforeForward);
            "renewals-refused"
        }
        // One renewal runs and its connection closes (then all is normal).
        _ => {
            shas.iter()
                .for_each(|s| proxy.arm(s.as_bytes(), Fault::DropReplyAndClose));
            "renewal-reply-lost-once"
        }
    }
}

/// Arms one random fault; returns its name for the figures.
fn inject(proxy: &Proxy, rng: &mut Rng, outage_ok: bool) -> &'static str {
    let patterns: [&[u8]; 5] = [b"EVALSHA", b"EVAL", b"{L}", b"{W}", b"{S}"];
    let pattern = patterns[rng.below(patterns.len() as u64) as usize];
    match rng.below(if outage_ok { 100 } else { 95 }) {
        0..=19 => {
            proxy.arm(pattern, Fault::DropReplyAndClose);
            "drop-reply-and-close"
        }
        20..=34 => {
            proxy.arm(pattern, Fault::CloseBeforeForward);
            "close-before-forward"
        }
        35..=47 => {
            proxy.arm(pattern, Fault::DropReply);
            "drop-reply"
        }
        48..=67 => {
            let d = Duration::from_millis(rng.range(10, 200));
            proxy.arm(pattern, Fault::Delay(d));
            "delay-short"
        }
        68..=75 => {
            let d = Duration::from_millis(rng.range(RESPONSE_MS + 50, 900));
            proxy.arm(pattern, Fault::Delay(d));
            "delay-late"
        }
        76..=82 => {
            proxy.arm(pattern, Fault::Blackhole);
            "blackhole"
        }
        83..=94 => {
            proxy.cut_all();
            "cut-all"
        }
        _ => {
            // A short outage of one primitive: every command on it is
            // refused for 150 ms (this also drops still-armed rules).
            let p: &[u8] = [b"{L}", b"{W}", b"{S}"][rng.below(3) as usize];
            proxy.always(p, Fault::CloseBeforeForward);
            std::thread::sleep(Duration::from_millis(150));
            proxy.clear();
            "outage-150ms"
        }
    }
}

fn get_string(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

#[test]
fn nemesis_soak() {
    if std::env::var(ROLE_ENV).is_ok() {
        return;
    }
    let target = env_u64("REDLEASE_SOAK_ACQUISITIONS", 10_000);
    let seed = env_u64(
        "REDLEASE_SOAK_SEED",
        mono_ns() ^ u64::from(std::process::id()),
    );
    let expected = Duration::from_secs((target / EXPECTED_RATE).max(20));
    let cap = expected * 10;
    println!(
        "nemesis: target {target} acquisitions, seed {seed} (REDLEASE_SOAK_SEED), cap {cap:?}"
    );
    let mut rng = Rng::new(seed);

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let data_s = data.to_str().unwrap().to_string();
    let mut server = Server::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--save",
        "",
        "--dir",
        &data_s,
    ]);
    let proxy = Proxy::start(server.port());
    let start = Instant::now();

    let env = [
        ("REDLEASE_NEMESIS_PROXY", proxy.url()),
        ("REDLEASE_NEMESIS_DIRECT", server.url()),
        (
            "REDLEASE_NEMESIS_CAP_MS",
            (cap + Duration::from_secs(10)).as_millis().to_string(),
        ),
    ];
    let mut workers: Vec<Worker> = (0..WORKERS)
        .map(|i| {
            let mut env = env.to_vec();
            env.push((
                "REDLEASE_NEMESIS_SEED",
                seed.wrapping_add(i as u64).to_string(),
            ));
            Worker::spawn(i, &env, dir.path().join(format!("history-{i}")))
        })
        .collect();

    let mut faults: HashMap<&'static str, u64> = HashMap::new();
    let mut next_fault = Instant::now() + Duration::from_millis(500);
    // The SIGSTOP and the restart happen once per round of up to 10,000
    // acquisitions: at a quarter and at half of the round.
    let rounds = (target / 10_000).max(1);
    let round = target / rounds;
    let mut pause = Pause::Idle;
    let mut paused_holds: Vec<String> = Vec::new();
    let mut pause_windows: Vec<(u64, u64)> = Vec::new(); // SIGSTOP, SIGCONT (monotonic ns)
    let mut restarts = 0;
    let mut restart_ms = Vec::new();
    let shas = renewal_shas();
    let mut long = Long::Idle(Instant::now() + Duration::from_secs(2));
    loop {
        assert!(
            start.elapsed() < cap,
            "the target of {target} acquisitions was not reached within {cap:?}: {} so far",
            workers.iter().map(|w| w.granted).sum::<u64>()
        );
        let mut messages = Vec::new();
        for (i, w) in workers.iter_mut().enumerate() {
            for m in w.drain() {
                messages.push((i, m));
            }
            assert!(!w.exited(), "worker {i} exited early");
        }
        let granted: u64 = workers.iter().map(|w| w.granted).sum();
        let pauses = pause_windows.iter().filter(|w| w.1 != 0).count() as u64;
        if granted >= target && pauses == rounds && restarts == rounds && pause == Pause::Idle {
            break;
        }
        let now = Instant::now();
        // From time to time: one long critical section, during which
        // renewals are disturbed for 1.2-2 s (the lease is 1.5 s).
        match long {
            Long::Idle(at) if now >= at => {
                let i = rng.below(WORKERS as u64) as usize;
                workers[i].tell(&format!("long-next {}", rng.range(800, 2_200)));
                long = Long::Requested(now, i);
            }
            Long::Requested(at, i) => {
                if messages
                    .iter()
                    .any(|(w, m)| *w == i && m.starts_with("long-hold "))
                {
                    *faults
                        .entry(disturb_renewals(&proxy, &mut rng, &shas))
                        .or_default() += 1;
                    long = Long::Active(now + Duration::from_millis(rng.range(1_200, 2_000)));
                } else if now.duration_since(at) > Duration::from_secs(10) {
                    long = Long::Idle(now);
                }
            }
            Long::Active(end) if now >= end => {
                proxy.clear();
                long = Long::Idle(now + Duration::from_millis(rng.range(2_500, 5_000)));
            }
            _ => {}
        }
        if now >= next_fault {
            let outage_ok = !matches!(long, Long::Active(_));
            *faults
                .entry(inject(&proxy, &mut rng, outage_ok))
                .or_default() += 1;
            next_fault = Instant::now() + Duration::from_millis(rng.range(40, 180));
        }
        // SIGSTOP a worker while it holds L or W (between its register
        // read and write), for longer than the lease.
        match pause {
            Pause::Idle
                if pause_windows.len() < rounds as usize
                    && granted >= pause_windows.len() as u64 * round + round / 4 =>
            {
                let i = rng.below(WORKERS as u64) as usize;
                workers[i].tell("pause-next");
                pause = Pause::Requested(now, i);
            }
            Pause::Requested(at, i) => {
                if let Some((_, m)) = messages
                    .iter()
                    .find(|(w, m)| *w == i && m.starts_with("paused-hold "))
                {
                    workers[i].signal(libc::SIGSTOP);
                    pause_windows.push((mono_ns(), 0));
                    *faults.entry("sigstop-holder").or_default() += 1;
                    paused_holds.push(m.split_whitespace().nth(1).unwrap().to_string());
                    pause = Pause::Stopped(Instant::now(), i);
                } else {
                    assert!(
                        at.elapsed() < Duration::from_secs(20),
                        "worker {i} took no L or W hold within 20 s"
                    );
                }
            }
            Pause::Stopped(at, i) if at.elapsed() >= Duration::from_millis(WATCHDOG_MS + 1_000) => {
                workers[i].signal(libc::SIGCONT);
                workers[i].tell("resumed");
                if let Some(w) = pause_windows.last_mut() {
                    w.1 = mono_ns();
                }
                pause = Pause::Idle;
            }
            _ => {}
        }
        // After the pause: kill the server and start it again on the same
        // port with the same data directory.
        if restarts < pauses && pause == Pause::Idle && granted >= restarts * round + round / 2 {
            let mut con = server.con();
            let fences = |con: &mut redis::Connection| -> (Option<u64>, Option<u64>) {
                redis::cmd("MGET")
                    .arg("{L}:fence")
                    .arg("{W}:fence")
                    .query(con)
                    .unwrap()
            };
            let fence_before = fences(&mut con);
            let probe = format!("probe-{granted}");
            let _: () = redis::cmd("SET")
                .arg("nemesis:probe")
                .arg(&probe)
                .query(&mut con)
                .unwrap();
            drop(con);
            let t = Instant::now();
            server.restart();
            let mut con = server.con();
            // PING (which `restart` waits for) answers while the AOF is
            // still loading; GET does not.
            let loaded = common::eventually(Duration::from_secs(30), || {
                redis::cmd("GET")
                    .arg("nemesis:probe")
                    .query::<Option<String>>(&mut con)
                    .is_ok()
            });
            assert!(loaded, "the restarted server did not finish loading");
            restart_ms.push(t.elapsed().as_millis());
            assert_eq!(
                get_string(&mut con, "nemesis:probe").as_deref(),
                Some(probe.as_str()),
                "the restarted server must keep its data (AOF in {data_s})"
            );
            // A counter may lapse meanwhile (it restarts from the server's
            // clock, above it: fence.lua); one that is there must not have
            // gone back. Repeated fences are caught by the checker anyway.
            let fence_after = fences(&mut con);
            let kept = |after: Option<u64>, before: Option<u64>| after.is_none() || after >= before;
            assert!(
                kept(fence_after.0, fence_before.0) && kept(fence_after.1, fence_before.1),
                "fencing counters went back: {fence_before:?} -> {fence_after:?}"
            );
            *faults.entry("server-restart").or_default() += 1;
            restarts += 1;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    proxy.clear();
    let run_secs = start.elapsed().as_secs_f64();

    // Stop the workers and collect their histories.
    for w in workers.iter_mut() {
        w.tell("stop");
    }
    for (i, w) in workers.iter_mut().enumerate() {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            assert!(Instant::now() < end, "worker {i} did not finish");
            match w.inner.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(l) if l.starts_with("done ") => break,
                _ => {}
            }
        }
        let end = Instant::now() + Duration::from_secs(10);
        while !w.exited() {
            assert!(Instant::now() < end, "worker {i} did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut holds = Vec::new();
    let mut stats: HashMap<String, u64> = HashMap::new();
    for w in &workers {
        let text = std::fs::read_to_string(&w.history).unwrap();
        for line in text.lines() {
            if line.starts_with("H ") {
                holds.push(
                    checker::Hold::parse(line).unwrap_or_else(|| panic!("bad history line {line}")),
                );
            } else if let Some(rest) = line.strip_prefix("C ") {
                let (k, n) = rest.rsplit_once(' ').unwrap();
                *stats.entry(k.to_string()).or_default() += n.parse::<u64>().unwrap();
            }
        }
    }
    let mut con = server.con();
    let mut registers = checker::Registers::new();
    for prim in ['L', 'W'] {
        let v = get_string(&mut con, &format!("{REGISTER}{prim}")).map(|s| {
            let (n, from) = s.split_once('/').unwrap();
            (n.parse::<u64>().unwrap(), from.to_string())
        });
        registers.insert(prim, v);
    }
    let verdict = checker::check(&holds, &registers);
    let wall = start.elapsed().as_secs_f64();

    // Figures.
    let count = |p: char| holds.iter().filter(|h| h.prim == p).count();
    let mut fault_list: Vec<_> = faults.iter().collect();
    fault_list.sort();
    let mut error_list: Vec<_> = stats
        .iter()
        .filter(|(k, _)| {
            k.starts_with("acquire:")
                || (k.starts_with("release:") && k.as_str() != "release:Ok")
                || k.as_str() == "direct-error"
        })
        .collect();
    error_list.sort();
    let lost_reported = holds
        .iter()
        .filter(|h| !h.end_held || h.release == "LockLost")
        .count();
    let release_lost = holds.iter().filter(|h| h.release == "LockLost").count();
    // Informative only (the verdict comes from the intervals): a paused
    // process's permit holders stay in the occupancy set until they resume.
    let max_occ = holds.iter().filter(|h| h.prim == 'S').map(|h| h.occ).max();
    let outside = |h: &&checker::Hold| {
        pause_windows
            .iter()
            .all(|w| h.t_granted > w.1 + 1_000_000_000 || h.t_last_held < w.0)
    };
    let outside_max_occ = holds
        .iter()
        .filter(|h| h.prim == 'S' && h.end_held)
        .filter(outside)
        .map(|h| h.occ)
        .max();
    println!(
        "FIGURES nemesis: {} acquisitions (L {}, W {}, S {}) by {WORKERS} processes x {THREADS} threads, \
         {} timeouts; faults {} ({} rule applications): {}; errors: {}; \
         long holds {} (lost during them {}); \
         lost leases reported {} (release LockLost {}; LockLost although the last check said held {}; \
         is_held false but release Ok {}); overlaps {}, fence violations {}, lost updates {} \
         (excused {}; registers (sound writes, unsound writers, final): {}); \
         semaphore occupancy seen max {:?} (by holders still held at the end, outside the SIGSTOP: {:?}); \
         restart {:?} ms; run {:.1} s, wall {:.1} s, seed {seed}",
        holds.len(),
        count('L'),
        count('W'),
        count('S'),
        stats.get("timeout").copied().unwrap_or(0),
        faults.values().sum::<u64>(),
        proxy.fired(),
        fault_list
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        error_list
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        stats.get("long-hold").copied().unwrap_or(0),
        stats.get("long-hold-lost").copied().unwrap_or(0),
        lost_reported,
        release_lost,
        holds
            .iter()
            .filter(|h| h.end_held && h.release == "LockLost")
            .count(),
        holds
            .iter()
            .filter(|h| !h.end_held && h.release == "Ok")
            .count(),
        verdict.overlaps,
        verdict.fence_violations,
        verdict.lost_updates,
        verdict.excused,
        verdict
            .registers
            .iter()
            .map(|(p, s, u, f)| format!("{p} ({s}, {u}, {f})"))
            .collect::<Vec<_>>()
            .join(" "),
        max_occ,
        outside_max_occ,
        restart_ms,
        run_secs,
        wall,
    );
    let mut messages: Vec<_> = stats
        .iter()
        .filter_map(|(k, n)| k.strip_prefix("msg:").map(|m| (m, n)))
        .collect();
    messages.sort();
    for (m, n) in messages {
        println!("nemesis: {n} x {m}");
    }
    if let Ok(keep) = std::env::var("REDLEASE_SOAK_HISTORY_DIR") {
        // Keep the histories (and the nemesis schedule's seed) for study.
        std::fs::create_dir_all(&keep).unwrap();
        for (i, w) in workers.iter().enumerate() {
            std::fs::copy(&w.history, format!("{keep}/history-{i}")).unwrap();
        }
        println!("nemesis: histories kept in {keep}");
    }
    for p in &verdict.problems {
        println!("VIOLATION {p}");
    }

    // The paused holders: each resumed after its lease ended, so it must
    // have seen the loss before writing, and its release cannot succeed.
    assert_eq!(paused_holds.len() as u64, rounds);
    for id in &paused_holds {
        let paused = holds
            .iter()
            .find(|h| &h.id() == id)
            .unwrap_or_else(|| panic!("the paused hold {id} is in no history"));
        println!("nemesis: paused hold {paused}");
        assert_eq!(paused.wrote, checker::Wrote::No, "{paused}");
        assert!(!paused.end_held, "{paused}");
        assert_ne!(paused.release, "Ok", "{paused}");
    }

    assert!(holds.len() as u64 >= target, "{} < {target}", holds.len());
    assert!(
        verdict.ok(),
        "the history has violations (see VIOLATION lines above)"
    );
}

// ---------------------------------------------------------------- checker tests

#[cfg(test)]
mod checker_tests {
    use super::checker::{check, Hold, Read, Registers, Wrote};

    /// A sound hold of `prim`: granted at `g`, last seen held at `e`
    /// (times in ms), writing counter `n` after reading `from`.
    fn hold(prim: char, who: &str, seq: u64, fence: u64, g: u64, e: u64) -> Hold {
        Hold {
            prim,
            holder: who.to_string(),
            seq,
            fence,
            t_call: g * 1_000_000 - 500_000,
            t_granted: g * 1_000_000,
            t_last_held: e * 1_000_000,
            t_set: 0,
            release: "Ok".to_string(),
            end_held: true,
            read: Read::NotRead,
            wrote: Wrote::No,
            occ: -1,
        }
    }

    fn wrote(mut h: Hold, read: Option<(u64, &str)>) -> Hold {
        h.read = match read {
            None => Read::Empty,
            Some((n, from)) => Read::Value {
                n,
                from: from.to_string(),
            },
        };
        h.wrote = Wrote::Yes;
        h.t_set = h.t_last_held - 100_000;
        h
    }

    fn regs(l: Option<(u64, &str)>) -> Registers {
        let mut r = Registers::new();
        r.insert('L', l.map(|(n, f)| (n, f.to_string())));
        r.insert('W', None);
        r
    }

    fn good() -> Vec<Hold> {
        vec![
            wrote(hold('L', "1:0", 1, 1, 10, 20), None),
            wrote(hold('L', "2:0", 1, 2, 21, 30), Some((1, "1:0:1"))),
            wrote(hold('L', "1:1", 5, 3, 31, 40), Some((2, "2:0:1"))),
            hold('S', "1:0", 2, 0, 10, 30),
            hold('S', "2:1", 2, 0, 15, 25),
            hold('S', "1:1", 2, 0, 26, 35),
        ]
    }

    #[test]
    fn accepts_a_good_history() {
        let v = check(&good(), &regs(Some((3, "1:1:5"))));
        assert!(v.ok(), "{v:?}");
        assert_eq!(v.excused, 0);
    }

    #[test]
    fn history_lines_round_trip() {
        for h in good() {
            let back = Hold::parse(&h.to_string()).unwrap();
            assert_eq!(back.to_string(), h.to_string());
        }
    }

    #[test]
    fn rejects_overlapping_exclusive_holds() {
        let mut h = good();
        h.push(hold('L', "3:0", 1, 4, 35, 45)); // inside [31, 40]
        let v = check(&h, &regs(Some((3, "1:1:5"))));
        assert!(!v.ok());
        assert_eq!(v.overlaps, 1, "{v:?}");
    }

    #[test]
    fn rejects_touching_intervals() {
        let h = vec![
            hold('W', "1:0", 1, 1, 10, 20),
            hold('W', "2:0", 1, 2, 20, 30),
        ];
        assert_eq!(check(&h, &regs(None)).overlaps, 1);
    }

    #[test]
    fn rejects_a_third_permit() {
        let mut h = good();
        h.push(hold('S', "3:0", 9, 0, 20, 22)); // with [10,30] and [15,25]
        let v = check(&h, &regs(Some((3, "1:1:5"))));
        assert_eq!(v.overlaps, 1, "{v:?}");
    }

    #[test]
    fn rejects_a_repeated_fence() {
        let mut h = good();
        h.push(hold('L', "3:0", 1, 3, 50, 60));
        let v = check(&h, &regs(Some((3, "1:1:5"))));
        assert!(!v.ok());
        assert!(v.fence_violations >= 1, "{v:?}");
        assert!(v.problems.iter().any(|p| p.starts_with("repeated fence 3")));
    }

    #[test]
    fn rejects_fences_out_of_grant_order() {
        let mut h = good();
        // Granted after the fence-3 hold ended, with a smaller fence; its
        // interval is empty (never seen held), so only the real-time order
        // of the calls catches it.
        let mut late = hold('L', "3:0", 1, 0, 50, 0);
        late.t_last_held = 0;
        h.push(late);
        let v = check(&h, &regs(Some((3, "1:1:5"))));
        assert!(v.fence_violations >= 1, "{v:?}");
    }

    #[test]
    fn rejects_a_lost_update() {
        let mut h = good();
        // The third section read the first one's write: the second's is lost.
        // (The counters below are kept at 3 so that only the read chain
        // rule can object.)
        h[2] = wrote(hold('L', "1:1", 5, 3, 31, 40), Some((1, "1:0:1")));
        let v = check(&h, &regs(Some((3, "1:1:5"))));
        assert_eq!(v.lost_updates, 1, "{v:?}");
        // A final value that is not the last sound write is one too.
        let v = check(&good(), &regs(Some((3, "2:0:1"))));
        assert_eq!(v.lost_updates, 1, "{v:?}");
        // And so is a register that vanished.
        let v = check(&good(), &regs(None));
        assert!(v.lost_updates >= 1, "{v:?}");
        // And a counter that disagrees with the number of sound sections.
        let v = check(&good(), &regs(Some((2, "1:1:5"))));
        assert_eq!(v.lost_updates, 1, "{v:?}");
    }

    #[test]
    fn excuses_an_overwrite_by_a_holder_that_lost_its_lease() {
        let mut h = good();
        // A holder granted before, paused, resumed and wrote a stale value
        // after finding its hold lost (its last true check precedes its SET).
        let mut stale = wrote(hold('L', "4:0", 1, 0, 1, 5), Some((0, "x")));
        stale.read = Read::Empty;
        stale.t_set = 32 * 1_000_000;
        stale.end_held = false;
        h.push(stale);
        // The third section read the stale value.
        h[2] = wrote(hold('L', "1:1", 5, 3, 31, 40), Some((1, "4:0:1")));
        let v = check(&h, &regs(Some((2, "1:1:5"))));
        assert!(v.ok(), "{v:?}");
        assert_eq!(v.excused, 1);
    }
}
