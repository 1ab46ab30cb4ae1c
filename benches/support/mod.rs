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

/// The order in which the `n` arms of round `round` run: a shuffle of its
/// own for each round (seeded by the round, so runs repeat). Rotating one
/// fixed order kept every arm behind the same neighbour, and the neighbour
/// mattered: whichever arm ran right after the plain blocked pop was 50-80
/// us slower at p50 than in any other place (2026-11-27, the latch's arms
/// on a 2-core machine), which put a bias of up to 1.3x into every ratio
/// that arm entered. Shuffled, each arm follows each other arm as often.
pub fn arm_order(round: usize, n: usize) -> Vec<usize> {
    // splitmix64 of the round, then Fisher-Yates.
    let mut state = (round as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    order
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

/// How a client sends the lock scripts: a single server's (no wake-up
/// channel, every waiter queued) or Redlock's (a wake-up channel and
/// message, the fencing counter kept), as `MONITOR` shows them.
#[derive(Clone, Copy)]
pub enum Sender {
    Single,
    Redlock,
}

impl Sender {
    /// (channel, message, ARGV 'queued', ARGV 'keep') for the name `name`.
    fn wake(self, name: &str) -> (&'static str, String, &'static str, &'static str) {
        match self {
            Sender::Single => ("", String::new(), "queued", ""),
            Sender::Redlock => ("redlease:wake", format!("bench:{name}"), "", "keep"),
        }
    }
}

/// lua/lock_acquire.lua's ten arguments for `token`'s uncontended
/// acquire of the name `name` (grant prefix `prefix`): a 30 s lease, no
/// queue entry, not blocking.
fn acquire_argv(token: &str, name: &str, prefix: &str, by: Sender) -> Vec<String> {
    let (channel, message, queued, _) = by.wake(name);
    let argv = [
        token, "30000", "0", prefix, "500", channel, &message, queued, "", "500",
    ];
    argv.map(str::to_owned).to_vec()
}

/// lua/lock_release.lua's ten arguments for `token`'s release of the
/// name `name` (grant prefix `prefix`).
fn release_argv(token: &str, name: &str, prefix: &str, by: Sender) -> Vec<String> {
    let (channel, message, queued, keep) = by.wake(name);
    let argv = [
        token, channel, &message, prefix, "500", "", keep, queued, "", "",
    ];
    argv.map(str::to_owned).to_vec()
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
        acquire.arg(acquire_argv(&token, &self.name, &prefix, Sender::Single));
        release.arg(release_argv(&token, &self.name, &prefix, Sender::Single));
        // A grant is the fence, an integer; a wait is text.
        let granted: redis::Value = acquire.invoke(con).unwrap();
        assert!(
            matches!(granted, redis::Value::Int(_)),
            "not granted: {granted:?}"
        );
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
            release.arg(release_argv(&token, name, &prefix, Sender::Single));
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
            let (keys, _) = lock_keys(name);
            acquire.key(&keys[..2]);
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

/// The least an uncontended cycle does with this library's guarantees
/// (GUARANTEES.md), as two flat raw scripts for one name: besides
/// [`BareFencedScripts`]' work, the acquire asks in one call whether
/// anybody is queued or a hand-over is open (a newcomer must not take a
/// name from a live waiter), and draws the fence above the server's fence
/// floor, from the clock when the name's counter has lapsed (fences never
/// go back, after a lapse, a lost key or a clock step), raising the floor
/// with its reserve when the fence passes it (lua/fence.lua);
/// the counter gets an expiry, and the release removes it with the lock,
/// the open list and the note when nobody is queued (a name nobody holds
/// or waits for leaves no key). Not in it, and in the library's scripts:
/// the preludes' functions, the blocking waiter's paths, the checks for
/// foreign data, the wake-up. The floor of the uncontended target for a
/// lock that keeps these promises.
pub struct GuardedFencedScripts {
    acquire: redis::Script,
    release: redis::Script,
    name: String,
}

/// See [`GuardedFencedScripts`]. KEYS: lock, counter, open list, queue,
/// fence floor; ARGV: token, lease.
const GUARDED_ACQUIRE: &str = "if redis.call('GET', KEYS[1]) then return 0 end \
    if redis.call('EXISTS', KEYS[3], KEYS[4]) > 0 then return 0 end \
    local low = tonumber(redis.call('GET', KEYS[5]) or '0') \
    local cur = redis.call('GET', KEYS[2]) \
    local f \
    if cur then f = tonumber(cur) + 1 else \
      local t = redis.call('TIME') \
      f = tonumber(t[1]) * 1000000 + tonumber(t[2]) \
      if f <= low then f = low + 1 end \
    end \
    local s = string.format('%d', f) \
    redis.call('SET', KEYS[2], s, 'PX', ARGV[2]) \
    if f > low then redis.call('SET', KEYS[5], string.format('%d', f + 15)) end \
    redis.call('SET', KEYS[1], ARGV[1] .. '#' .. s, 'PX', ARGV[2]) \
    return f";

/// KEYS: lock, counter, queue, open list, note; ARGV: token.
const GUARDED_RELEASE: &str = "local v = redis.call('GET', KEYS[1]) \
    if not v or string.match(v, '^[^#]*') ~= ARGV[1] then return 0 end \
    if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end \
    redis.call('DEL', KEYS[1], KEYS[4], KEYS[5], KEYS[2]) \
    return 1";

impl GuardedFencedScripts {
    pub fn new(name: &str) -> GuardedFencedScripts {
        GuardedFencedScripts {
            acquire: redis::Script::new(GUARDED_ACQUIRE),
            release: redis::Script::new(GUARDED_RELEASE),
            name: name.to_owned(),
        }
    }

    pub fn cycle(&self, con: &mut redis::Connection) {
        let token = owner_token();
        let ([lock, counter, queue, _], prefix) = lock_keys(&self.name);
        let (open, note) = (format!("{prefix}open"), format!("{lock}:note"));
        let fence: i64 = self
            .acquire
            .key(&[&lock, &counter, &open, &queue, FENCE_FLOOR][..])
            .arg(&token)
            .arg(30_000)
            .invoke(con)
            .unwrap();
        assert!(fence > 0, "not granted");
        let code: i64 = self
            .release
            .key(&[&lock, &counter, &queue, &open, &note][..])
            .arg(&token)
            .invoke(con)
            .unwrap();
        assert_eq!(code, 1);
    }
}

/// Raw connections to several servers, used as the library's Redlock uses
/// its masters (src/backend/fan_out.rs): each step writes every server's
/// request first, then reads every reply, so the servers work at the same
/// time. Over one connection it is the same event on one server.
pub struct RawFanOut {
    cons: Vec<redis::Connection>,
    del: redis::Script,
    acquire: redis::Script,
    release: redis::Script,
    bare: BareFencedScripts,
}

impl RawFanOut {
    /// `acquire`, `release`: lua/lock_acquire.lua and lua/lock_release.lua
    /// as the library sends them.
    pub fn new(urls: &[String], acquire: &str, release: &str) -> RawFanOut {
        let mut fan = RawFanOut {
            cons: urls.iter().map(|u| raw_con(u)).collect(),
            del: redis::Script::new(
                "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
            ),
            acquire: redis::Script::new(acquire),
            release: redis::Script::new(release),
            bare: BareFencedScripts::new(&[]),
        };
        for con in &mut fan.cons {
            let scripts = [&fan.del, &fan.acquire, &fan.release];
            for script in scripts
                .into_iter()
                .chain([&fan.bare.acquire, &fan.bare.release])
            {
                script.load(con).unwrap();
            }
        }
        fan
    }

    /// One step: `packed` to every server, then every reply.
    fn step(&mut self, packed: &[u8]) -> Vec<redis::Value> {
        for con in &mut self.cons {
            con.send_packed_command(packed).unwrap();
        }
        self.cons
            .iter_mut()
            .map(|con| con.recv_response().unwrap())
            .collect()
    }

    /// The raw reference lock's cycle on every server at once: `SET NX
    /// PX`, then the token-checked `EVALSHA` delete.
    pub fn reference_cycle(&mut self, name: &str) {
        let token = owner_token();
        let set = redis::cmd("SET")
            .arg(name)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .get_packed_command();
        for v in self.step(&set) {
            assert_eq!(v, redis::Value::Okay);
        }
        let del = redis::cmd("EVALSHA")
            .arg(self.del.get_hash())
            .arg(1)
            .arg(name)
            .arg(&token)
            .get_packed_command();
        for v in self.step(&del) {
            assert_eq!(v, redis::Value::Int(1));
        }
    }

    /// The bare fenced lock's cycle (see [`BareFencedScripts`]) on every
    /// server at once: the least any fenced lock's servers do.
    pub fn bare_cycle(&mut self, name: &str) {
        let token = owner_token();
        let (keys, _) = lock_keys(name);
        let (lock, counter) = (&keys[0], &keys[1]);
        let acquire = redis::cmd("EVALSHA")
            .arg(self.bare.acquire.get_hash())
            .arg(2)
            .arg(lock)
            .arg(counter)
            .arg(&token)
            .arg(30_000)
            .get_packed_command();
        // Each server's counter draws its own fence; the release takes
        // each server's own.
        let fences: Vec<i64> = self
            .step(&acquire)
            .into_iter()
            .map(|v| redis::from_redis_value::<Vec<i64>>(v).unwrap()[0])
            .collect();
        for (con, fence) in self.cons.iter_mut().zip(&fences) {
            let release = redis::cmd("EVALSHA")
                .arg(self.bare.release.get_hash())
                .arg(1)
                .arg(lock)
                .arg(format!("{token}#{fence}"))
                .get_packed_command();
            con.send_packed_command(&release).unwrap();
        }
        for con in &mut self.cons {
            assert_eq!(con.recv_response().unwrap(), redis::Value::Int(1));
        }
    }

    /// The library's lock scripts' cycle on every server at once, with
    /// the arguments `by` sends.
    pub fn scripts_cycle(&mut self, name: &str, by: Sender) {
        let token = owner_token();
        let (keys, prefix) = lock_keys(name);
        let mut acquire = redis::cmd("EVALSHA");
        acquire.arg(self.acquire.get_hash()).arg(5).arg(&keys[..]);
        acquire.arg(FENCE_FLOOR);
        acquire.arg(acquire_argv(&token, name, &prefix, by));
        for v in self.step(&acquire.get_packed_command()) {
            // A grant is the fence, an integer; a wait is text.
            assert!(matches!(v, redis::Value::Int(_)), "not granted: {v:?}");
        }
        let mut release = redis::cmd("EVALSHA");
        release.arg(self.release.get_hash()).arg(5).arg(&keys[..]);
        release.arg(FENCE_FLOOR);
        release.arg(release_argv(&token, name, &prefix, by));
        for v in self.step(&release.get_packed_command()) {
            assert_eq!(v, redis::Value::Int(1));
        }
    }
}

/// The least server work a fenced queue handoff with this library's
/// guarantees does (GUARANTEES.md), as a raw script: benches/handoff.rs's `FENCED_RELEASE`,
/// and whether anybody is queued at all (else the name is freed, not
/// granted), a fence floor per server that fences never fall below after
/// the counter lapses or the clock steps back (read, and raised with its
/// reserve when a fence passes it: once in 16 draws of a busy name), an
/// expiry on the open list (a push nobody pops must not stay), and
/// whether a waiter that waits for messages is queued (it must be told).
/// Not in it, and in the library's release: the queue's expiry cut to the
/// claim (dead waiters' entries go with the grant), the leave and force
/// paths' checks, the prelude functions' closures. Its waiter sends what
/// the library's does behind its pop: the expiry of its own list and the
/// grant's time left, besides the grant's value.
const GUARDED_HANDOFF_RELEASE: &str = "local v = redis.call('GET', KEYS[1]) \
    if v ~= ARGV[1] then return 0 end \
    if redis.call('EXISTS', KEYS[4]) == 0 then return 0 end \
    local low = tonumber(redis.call('GET', KEYS[5]) or '0') \
    local n = redis.call('INCR', KEYS[2]) \
    local f = string.format('%d', n) \
    if n > low then redis.call('SET', KEYS[5], string.format('%d', n + 15)) end \
    redis.call('SET', KEYS[1], 'grant#' .. f, 'PX', '500') \
    redis.call('RPUSH', KEYS[3], f) \
    redis.call('PEXPIRE', KEYS[3], '1000') \
    if redis.call('EXISTS', KEYS[6]) == 1 then redis.call('PUBLISH', KEYS[6], f) end \
    return 1";

/// The guarded floor of a handoff on the name `{name}`, the releaser's
/// side: [`GUARDED_HANDOFF_RELEASE`] loaded, and one waiter queued (nobody
/// waits for messages), so each release hands over to the waiter blocked
/// by [`floor_waiter_turn`].
pub struct GuardedHandoff {
    release: redis::Script,
    /// The lock, its fencing counter, its open list, its queue, the fence
    /// floor, the list of waiters told by message.
    keys: [String; 6],
}

impl GuardedHandoff {
    pub fn new(con: &mut redis::Connection, name: &str) -> GuardedHandoff {
        let floor = GuardedHandoff {
            release: redis::Script::new(GUARDED_HANDOFF_RELEASE),
            keys: ["", ":fence", ":open", ":queue", ":floor", ":told"]
                .map(|k| format!("{{{name}}}{k}")),
        };
        // Loaded: the first release, by nobody, releases nothing.
        floor.release_by(con, "nobody");
        let _: i64 = redis::cmd("ZADD")
            .arg(&floor.keys[3])
            .arg(1)
            .arg("waiter")
            .query(con)
            .unwrap();
        floor
    }

    /// The floor's holder takes the name (the release checks its value).
    pub fn hold(&self, con: &mut redis::Connection) {
        let _: () = redis::cmd("SET")
            .arg(&self.keys[0])
            .arg("holder")
            .query(con)
            .unwrap();
    }

    /// The holder's release: the name handed over to the blocked waiter.
    pub fn release(&self, con: &mut redis::Connection) {
        self.release_by(con, "holder");
    }

    fn release_by(&self, con: &mut redis::Connection, owner: &str) {
        let _: i64 = self
            .release
            .key(&self.keys[..])
            .arg(owner)
            .invoke(con)
            .unwrap();
    }
}

/// The library's waiter's turn in a handoff bench: takes `lock` (blocked
/// until it is handed over), says when on `woken`, holds until `done`.
pub fn library_waiter_turn(
    lock: &redlease::Lock,
    woken: &crossbeam_channel::Sender<Instant>,
    done: &crossbeam_channel::Receiver<()>,
) {
    let g = lock.acquire().unwrap();
    woken.send(Instant::now()).unwrap();
    let _ = done.recv();
    drop(g);
}

/// What a floor's waiter sends to block for a handoff of the name
/// `{name}`: `BLMOVE` from the open list into its own, then the lock's
/// value. `guarded`: the library's waiter pipeline, raw (woken by
/// [`GuardedHandoff`]): the server's clock before and behind the
/// pop (what dates the grant however long the waiter blocked,
/// `protocol::popped::waited`), its own list's expiry (a pop whose taker
/// died must not stay) and the time the grant has left. Only the last
/// reply is kept.
fn floor_waiter_pipe(name: &str, guarded: bool) -> redis::Pipeline {
    let (lock, own) = (format!("{{{name}}}"), format!("{{{name}}}:own"));
    let mut p = redis::pipe();
    if guarded {
        p.cmd("TIME").ignore();
    }
    p.cmd("BLMOVE")
        .arg(format!("{{{name}}}:open"))
        .arg(&own)
        .arg("LEFT")
        .arg("RIGHT")
        .arg(5)
        .ignore();
    if guarded {
        p.cmd("TIME").ignore();
        p.cmd("PEXPIRE").arg(&own).arg(1000).ignore();
        p.cmd("PTTL").arg(&lock).ignore();
    }
    p.cmd("GET").arg(&lock);
    p
}

/// A floor's waiter's turn in a handoff bench: blocks for a handoff of
/// `{name}` ([`floor_waiter_pipe`]), says when it was woken on `woken`,
/// holds until `done`, then empties its own list for the next turn.
pub fn floor_waiter_turn(
    con: &mut redis::Connection,
    name: &str,
    guarded: bool,
    woken: &crossbeam_channel::Sender<Instant>,
    done: &crossbeam_channel::Receiver<()>,
) {
    let _: (Option<String>,) = floor_waiter_pipe(name, guarded).query(con).unwrap();
    woken.send(Instant::now()).unwrap();
    let _ = done.recv();
    let _: () = redis::cmd("DEL")
        .arg(format!("{{{name}}}:own"))
        .query(con)
        .unwrap();
}
