//! A server clock that steps (NTP correction, VM restore, an operator):
//! redis-server runs under libfaketime, whose offset the test rewrites
//! while it runs (`FAKETIME_TIMESTAMP_FILE`, read at every call with
//! `FAKETIME_NO_CACHE=1`; the monotonic clock is left alone, as a real
//! step leaves it). Redis expires keys by the wall clock, and fencing
//! counters restart from it after they lapse: these tests hold the library
//! to what GUARANTEES.md says about both.
//!
//! Needs libfaketime (Debian: `libfaketime`) and a server built with libc
//! malloc (Debian's jemalloc build aborts under libfaketime): the Valkey
//! 9.1 and Redis 6.2 binaries of `scripts/servers.sh`. Without either, each
//! test says SKIPPED with the reason.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::eventually;
use redlease::Client;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// A server binary that runs under libfaketime: the suite's own if it is
/// not Debian's jemalloc build, else one fetched by scripts/servers.sh.
fn libc_server() -> Result<String, String> {
    if !std::path::Path::new(LIBFAKETIME).exists() {
        return Err(format!(
            "{LIBFAKETIME} is missing (apt-get install libfaketime)"
        ));
    }
    let jemalloc = |bin: &str| {
        Command::new(bin)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("malloc=jemalloc"))
            .unwrap_or(true)
    };
    let own = common::server_binary();
    if !jemalloc(&own) {
        return Ok(own);
    }
    for name in ["valkey-9.1/valkey-server", "redis-6.2/redis-server"] {
        let p = format!("{}/target/servers/{name}", env!("CARGO_MANIFEST_DIR"));
        if std::path::Path::new(&p).exists() && !jemalloc(&p) {
            return Ok(p);
        }
    }
    Err("no libc-malloc server binary (run scripts/servers.sh valkey-9.1)".into())
}

/// A redis-server whose wall clock the test steps.
struct SteppedServer {
    child: Child,
    port: u16,
    clock: PathBuf,
    _dir: tempfile::TempDir,
}

impl SteppedServer {
    fn start(test: &str) -> Option<SteppedServer> {
        let bin = match libc_server() {
            Ok(b) => b,
            Err(why) => {
                common::skip(test, &why);
                return None;
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let clock = dir.path().join("offset");
        std::fs::write(&clock, "+0\n").unwrap();
        let port = redis_test::utils::get_random_available_port();
        let child = Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME_TIMESTAMP_FILE", &clock)
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let s = SteppedServer {
            child,
            port,
            clock,
            _dir: dir,
        };
        let up = eventually(Duration::from_secs(10), || {
            redis::Client::open(s.url())
                .and_then(|c| c.get_connection())
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                .is_ok()
        });
        assert!(up, "{bin} did not start under libfaketime");
        Some(s)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's wall clock is `secs` away from the real one from now
    /// on (negative: behind).
    /// Waits until the server's `TIME` shows it: libfaketime may take a
    /// moment to read the file again.
    fn step(&self, secs: i64) {
        let real = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64
        };
        // Written whole, then renamed over: never read half-written.
        let part = self.clock.with_extension("part");
        std::fs::write(&part, format!("{secs:+}\n")).unwrap();
        std::fs::rename(&part, &self.clock).unwrap();
        let shown = eventually(Duration::from_secs(5), || {
            (self.time() as i64 - real() - secs).abs() <= 2
        });
        assert!(shown, "the server's clock did not step by {secs} s");
    }

    /// The server's clock, in seconds.
    fn time(&self) -> u64 {
        let mut con = redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let (s, _): (u64, u64) = redis::cmd("TIME").query(&mut con).unwrap();
        s
    }
}

impl Drop for SteppedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client(s: &SteppedServer, watchdog: Duration) -> Client {
    Client::builder()
        .url(s.url())
        .watchdog_timeout(watchdog)
        .build()
        .unwrap()
}

/// GUARANTEES.md's case: a name's fencing counter lapses (its last holder
/// released it and nobody waits), then the server's clock steps back an
/// hour. A counter that restarts from the clock would hand out a fence an
/// hour's worth of microseconds *smaller* than one already used, and a
/// fenced store would take the stale writer's word over the new one's.
/// The fence floor (lua/fence.lua) makes that impossible: fails before it.
#[test]
fn a_clock_stepped_back_after_a_counter_lapsed_never_gives_a_smaller_fence() {
    let Some(s) = SteppedServer::start(
        "a_clock_stepped_back_after_a_counter_lapsed_never_gives_a_smaller_fence",
    ) else {
        return;
    };
    let c = client(&s, Duration::from_secs(5));
    let mut last = 0;
    for name in ["fence:a", "fence:b"] {
        let g = c.lock(name).acquire().unwrap();
        last = last.max(g.fencing_token());
        g.release().unwrap();
    }
    // The counters are gone with their releases (nobody waited).
    s.step(-3600);
    for name in ["fence:a", "fence:b", "fence:new"] {
        let g = c.lock(name).acquire().unwrap();
        assert!(
            g.fencing_token() > last,
            "{name}: fence {} after {last}: a smaller fence after the clock stepped back",
            g.fencing_token()
        );
        last = g.fencing_token();
        g.release().unwrap();
    }
    // And the other primitive that draws fences.
    let w = c.rw_lock("fence:a").write().unwrap();
    assert!(w.fencing_token() > last);
}

/// A forward step beyond the lease while held expires the lock at once on
/// the server. The holder learns it at its next renewal (within one
/// renewal period, a third of the lease) and its LostSignal fires; the
/// next holder's fence is larger.
#[test]
fn a_clock_stepped_forward_past_the_lease_is_noticed_at_the_next_renewal() {
    let Some(s) = SteppedServer::start(
        "a_clock_stepped_forward_past_the_lease_is_noticed_at_the_next_renewal",
    ) else {
        return;
    };
    let lease = Duration::from_millis(3000);
    let holder = client(&s, lease);
    let g = holder.lock("fwd").acquire().unwrap();
    let lost = g.lost_signal();
    std::thread::sleep(Duration::from_millis(200));
    s.step(120);
    let stepped = Instant::now();
    // Expired at once on the server: another client gets in.
    let other = client(&s, lease);
    let g2 = other
        .lock("fwd")
        .acquire_timeout(Duration::from_secs(5))
        .unwrap()
        .expect("the stepped clock expired the lease");
    assert!(g2.fencing_token() > g.fencing_token());
    assert!(
        lost.wait_timeout(lease),
        "the holder never learned its lease was gone"
    );
    let noticed = stepped.elapsed();
    println!("FIGURES clock +120 s while held: the holder learned of the loss after {noticed:?} (renewal period {:?})", lease / 3);
    assert!(
        noticed <= lease / 3 + Duration::from_millis(700),
        "{noticed:?}"
    );
    assert!(!g.is_held());
    assert!(
        g.release().is_err(),
        "a lost lease cannot be released as held"
    );
    assert!(g2.is_held());
}

/// A backward step while held lengthens nothing the holder relies on: its
/// renewals go on (each sets the expiry from the server's new clock), it
/// is not told of a loss, nobody else gets in, and after its release the
/// next fence is still larger.
#[test]
fn a_clock_stepped_back_while_held_changes_nothing_for_the_holder() {
    let Some(s) =
        SteppedServer::start("a_clock_stepped_back_while_held_changes_nothing_for_the_holder")
    else {
        return;
    };
    let lease = Duration::from_millis(1500);
    let holder = client(&s, lease);
    let other = client(&s, lease);
    let g = holder.lock("back").acquire().unwrap();
    let lost = g.lost_signal();
    s.step(-3600);
    // Three leases' worth: renewals must keep it.
    let end = Instant::now() + lease * 3;
    while Instant::now() < end {
        assert!(other.lock("back").try_acquire().unwrap().is_none());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!lost.is_lost(), "a backward step was taken for a loss");
    assert!(g.is_held());
    let f = g.fencing_token();
    g.release().unwrap();
    let g2 = other.lock("back").try_acquire().unwrap().unwrap();
    assert!(g2.fencing_token() > f);
}
