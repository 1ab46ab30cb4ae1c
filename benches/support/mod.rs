//! Helpers shared by the benchmarks.
#![allow(dead_code)]

use std::time::{Duration, Instant};

pub fn quick() -> bool {
    std::env::var_os("REDLEASE_BENCH_QUICK").is_some()
}

pub fn scale(n: usize) -> usize {
    if quick() {
        (n / 10).max(10)
    } else {
        n
    }
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Mean duration of one call of `f`, over `n` calls after a warm-up.
pub fn mean(n: usize, mut f: impl FnMut()) -> Duration {
    for _ in 0..n / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed() / n as u32
}

/// A raw connection for a floor: redis-rs leaves Nagle's algorithm on by
/// default, the library's own connections turn it off, so the floors do too.
pub fn raw_con(url: &str) -> redis::Connection {
    use redis::IntoConnectionInfo;
    let info = url
        .into_connection_info()
        .unwrap()
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
    redis::Client::open(info).unwrap().get_connection().unwrap()
}

/// A fresh owner token as the library's scripts take it (`rl:`, no `#`).
fn owner_token() -> String {
    format!("rl:bench:{}", uuid::Uuid::new_v4().simple())
}

/// The server's one fence floor (lua/fence.lua), the last key of each
/// lock script.
const FENCE_FLOOR: &str = "redlease:fence-floor";

/// The name `{name}`'s lock keys before the fence floor (lock, fencing
/// counter, queue, its deadlines: src/keys.rs), and its grant prefix.
fn lock_keys(name: &str) -> ([String; 4], String) {
    (
        [
            format!("{{{name}}}"),
            format!("{{{name}}}:fence"),
            format!("{{{name}}}:queue"),
            format!("{{{name}}}:queue:t"),
        ],
        format!("{{{name}}}:grant:"),
    )
}

/// lua/lock_release.lua's ten arguments for `token`'s release of the name
/// under `prefix`: no wake-up channel, every waiter queued.
fn release_args(call: &mut redis::ScriptInvocation<'_>, token: &str, prefix: &str) {
    call.arg(token).arg("").arg("").arg(prefix).arg(500);
    call.arg("").arg("").arg("queued").arg("").arg("");
}

/// The library's lock scripts (lua/lock_acquire.lua, lua/lock_release.lua,
/// with their preludes), sent raw on `con` for the name `{name}`: one
/// uncontended acquire and release, what the server's work for a fenced,
/// queue-aware lock costs without the library.
pub struct RawLockScripts {
    acquire: redis::Script,
    release: redis::Script,
    name: String,
}

impl RawLockScripts {
    /// `sources`: the two scripts as the library sends them.
    pub fn new(name: &str, acquire: &str, release: &str) -> RawLockScripts {
        RawLockScripts {
            acquire: redis::Script::new(acquire),
            release: redis::Script::new(release),
            name: name.to_string(),
        }
    }

    pub fn cycle(&self, con: &mut redis::Connection) {
        let token = owner_token();
        let (keys, prefix) = lock_keys(&self.name);
        let mut acquire = self.acquire.prepare_invoke();
        let mut release = self.release.prepare_invoke();
        acquire.key(&keys[..]).key(FENCE_FLOOR);
        release.key(&keys[..]).key(FENCE_FLOOR);
        // Token, lease, no queue entry, grant prefix, claim window, no
        // wake-up channel, every waiter queued (lua/lock_acquire.lua).
        acquire.arg(&token).arg(30_000).arg(0).arg(&prefix).arg(500);
        acquire.arg("").arg("").arg("queued").arg("");
        release_args(&mut release, &token, &prefix);
        let _: (i64, i64) = acquire.invoke(con).unwrap();
        let code: i64 = release.invoke(con).unwrap();
        assert_eq!(code, 1);
    }
}

/// A multi-lock's two scripts (lua/lock_acquire_all.lua, then
/// lua/lock_release.lua for every name in one run) sent raw over one
/// connection: the server's work for a multi-lock on one server, without
/// the library.
pub struct RawMultiScripts {
    acquire: redis::Script,
    release: redis::Script,
    names: Vec<String>,
}

impl RawMultiScripts {
    /// `sources`: the two scripts as the library sends them.
    pub fn new(names: &[&str], acquire: &str, release: &str) -> RawMultiScripts {
        RawMultiScripts {
            acquire: redis::Script::new(acquire),
            release: redis::Script::new(release),
            names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    pub fn cycle(&self, con: &mut redis::Connection) {
        let token = owner_token();
        let mut acquire = self.acquire.prepare_invoke();
        let mut release = self.release.prepare_invoke();
        acquire.arg(&token);
        for name in &self.names {
            let (keys, prefix) = lock_keys(name);
            acquire.key(&keys[..]).arg(30_000).arg(&prefix);
            release.key(&keys[..]);
            release_args(&mut release, &token, &prefix);
        }
        acquire.key(FENCE_FLOOR);
        release.key(FENCE_FLOOR);
        let fences: Vec<i64> = acquire.invoke(con).unwrap();
        assert_eq!(fences.len(), self.names.len());
        let codes: Vec<i64> = release.invoke(con).unwrap();
        assert_eq!(codes, vec![1; self.names.len()]);
    }
}

/// The least any fenced lock does, as raw scripts, for one name or several
/// in one run: the acquire checks that no name is held, draws each name's
/// fence from a counter (`INCR`, never lapsing) and sets each lock to
/// `token#fence` with its lease; the release deletes the names whose lock
/// still holds the token. No waiter queue, no fence floor, no counter
/// expiry, no wake-up: what fencing tokens alone cost the server, the floor
/// of the uncontended target for any lock that hands out fences, and of a
/// multi-lock's against one lock's.
pub struct BareFencedScripts {
    acquire: redis::Script,
    release: redis::Script,
    names: Vec<String>,
}

/// See [`BareFencedScripts`]. KEYS: each name's lock and counter; ARGV:
/// token, lease.
const BARE_ACQUIRE: &str = "local locks = {} \
    for i = 1, #KEYS, 2 do locks[#locks + 1] = KEYS[i] end \
    if redis.call('EXISTS', unpack(locks)) > 0 then return 0 end \
    local out = {} \
    for i = 1, #KEYS, 2 do \
      local f = redis.call('INCR', KEYS[i + 1]) \
      redis.call('SET', KEYS[i], ARGV[1] .. '#' .. f, 'PX', ARGV[2]) \
      out[#out + 1] = f \
    end \
    return out";

/// KEYS: each name's lock; ARGV: each name's `token#fence`.
const BARE_RELEASE: &str = "local gone = {} \
    for i = 1, #KEYS do \
      if redis.call('GET', KEYS[i]) == ARGV[i] then gone[#gone + 1] = KEYS[i] end \
    end \
    if #gone == 0 then return 0 end \
    return redis.call('DEL', unpack(gone))";

impl BareFencedScripts {
    pub fn new(names: &[&str]) -> BareFencedScripts {
        BareFencedScripts {
            acquire: redis::Script::new(BARE_ACQUIRE),
            release: redis::Script::new(BARE_RELEASE),
            names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    pub fn cycle(&self, con: &mut redis::Connection) {
        let token = owner_token();
        let mut acquire = self.acquire.prepare_invoke();
        for name in &self.names {
            acquire
                .key(format!("{{{name}}}"))
                .key(format!("{{{name}}}:fence"));
        }
        acquire.arg(&token).arg(30_000);
        let fences: Vec<i64> = acquire.invoke(con).unwrap();
        assert_eq!(fences.len(), self.names.len());
        let mut release = self.release.prepare_invoke();
        for (name, fence) in self.names.iter().zip(&fences) {
            release
                .key(format!("{{{name}}}"))
                .arg(format!("{token}#{fence}"));
        }
        let gone: i64 = release.invoke(con).unwrap();
        assert_eq!(gone as usize, self.names.len());
    }
}
