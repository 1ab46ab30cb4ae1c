//! An in-memory Redis keyspace: exactly the commands redlease's scripts and
//! its clients send, with Redis's replies and error replies, over a clock
//! the checker sets (virtual time). Where it could differ from Redis,
//! `tests/differential.rs` runs the same commands on a real redis-server
//! and compares the replies.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, OnceLock};

/// A reply, as the server would write it (RESP2).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
    Status(String),
    Error(String),
}

impl Reply {
    pub fn bulk(s: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(s.as_ref().to_vec())
    }

    /// Short, readable, for traces.
    pub fn show(&self) -> String {
        match self {
            Reply::Int(n) => n.to_string(),
            Reply::Bulk(b) => format!("{:?}", String::from_utf8_lossy(b)),
            Reply::Nil => "nil".into(),
            Reply::Array(a) => format!(
                "[{}]",
                a.iter().map(Reply::show).collect::<Vec<_>>().join(", ")
            ),
            Reply::Status(s) => format!("+{s}"),
            Reply::Error(e) => format!("-{e}"),
        }
    }
}

/// A sorted-set score. Scores the scripts write are integers (server
/// milliseconds and microseconds); kept as the f64 Redis keeps, compared
/// and hashed by value.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Score(pub f64);

impl Eq for Score {}

impl std::hash::Hash for Score {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.to_bits().hash(h)
    }
}

/// A sorted set's members, in Redis's order.
pub type Members = Vec<(Score, Vec<u8>)>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    Str(Vec<u8>),
    List(VecDeque<Vec<u8>>),
    /// Members in Redis's order: by score, then by member bytes.
    ZSet(Vec<(Score, Vec<u8>)>),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    pub value: Value,
    /// Server-clock milliseconds at which the key is gone (Redis keeps the
    /// wall clock's absolute time, so a clock step moves every expiry).
    pub expires: Option<i64>,
}

/// The keys, shared by the states that have them alike until a step
/// changes them (most steps do not: a tick of the clock, a client's own
/// step), with their fingerprint kept once made: a state's clone and hash
/// then cost nothing for its keys. Changed only through [`Keys::make_mut`].
#[derive(Clone, Default)]
pub struct Keys(Arc<Shared>);

#[derive(Clone, Default)]
struct Shared {
    map: BTreeMap<Vec<u8>, Entry>,
    fingerprint: OnceLock<u128>,
}

impl Keys {
    /// The map, to change: copied first if another state shares it.
    pub fn make_mut(&mut self) -> &mut BTreeMap<Vec<u8>, Entry> {
        let shared = Arc::make_mut(&mut self.0);
        shared.fingerprint = OnceLock::new();
        &mut shared.map
    }

    fn fingerprint(&self) -> u128 {
        *self
            .0
            .fingerprint
            .get_or_init(|| crate::search::fingerprint(&self.0.map))
    }
}

impl std::ops::Deref for Keys {
    type Target = BTreeMap<Vec<u8>, Entry>;
    fn deref(&self) -> &Self::Target {
        &self.0.map
    }
}

impl PartialEq for Keys {
    fn eq(&self, other: &Keys) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.map == other.0.map
    }
}

impl Eq for Keys {}

impl std::hash::Hash for Keys {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.fingerprint().hash(h)
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.map.fmt(f)
    }
}

/// The keyspace and the server's clock.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Keyspace {
    pub keys: Keys,
    /// The server's clock, in microseconds.
    pub now_us: i64,
}

/// A message published, in the order published.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Published {
    pub channel: Vec<u8>,
    pub message: Vec<u8>,
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn err(s: &str) -> Reply {
    Reply::Error(s.to_string())
}

fn arity(cmd: &str) -> Reply {
    Reply::Error(format!(
        "ERR wrong number of arguments for '{}' command",
        cmd.to_ascii_lowercase()
    ))
}

fn int_arg(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with('+') || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    s.parse().ok()
}

fn float_arg(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?.to_ascii_lowercase();
    match s.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        _ => {
            let v: f64 = s.trim().parse().ok()?;
            (!v.is_nan() && s.trim() == s).then_some(v)
        }
    }
}

/// A score as Redis writes it in replies (`%.17g`): integral scores in
/// full, without exponent while they have at most 17 digits.
pub fn score_text(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v == v.trunc() && v.abs() < 1e17 {
        return format!("{}", v as i64);
    }
    format!("{v}")
}

/// A range bound of ZRANGEBYSCORE and friends: the value and whether it is
/// exclusive.
fn bound(b: &[u8]) -> Option<(f64, bool)> {
    match b.strip_prefix(b"(") {
        Some(rest) => Some((float_arg(rest)?, true)),
        None => Some((float_arg(b)?, false)),
    }
}

fn in_range(s: f64, min: (f64, bool), max: (f64, bool)) -> bool {
    let above = if min.1 { s > min.0 } else { s >= min.0 };
    let below = if max.1 { s < max.0 } else { s <= max.0 };
    above && below
}

impl Keyspace {
    /// An empty keyspace whose clock reads `ms` (server milliseconds).
    pub fn starting_at(ms: i64) -> Keyspace {
        Keyspace {
            keys: Default::default(),
            now_us: ms * 1000,
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.now_us.div_euclid(1000)
    }

    /// The server's clock moved to `ms` (never back: a step back is
    /// written to `now_us` directly), and the keys whose time has come
    /// gone.
    pub fn advance_to(&mut self, ms: i64) {
        self.now_us = self.now_us.max(ms * 1000);
        self.expire();
    }

    /// Removes every key whose time has come (Redis's lazy and active
    /// expiry, taken together: no expired key is ever seen). A key lives
    /// through its expiry's own millisecond, as in Redis (`keyIsExpired`:
    /// `now > when`), where `PTTL` answers 0 for it: a script must read
    /// that as "still there" (a review found an offer read then sent its
    /// waiter to the 2 s poll).
    pub fn expire(&mut self) {
        let now = self.now_ms();
        let live = |e: &Entry| e.expires.is_none_or(|at| at >= now);
        if !self.keys.values().all(live) {
            self.keys.make_mut().retain(|_, e| live(e));
        }
    }

    /// `member`'s place in the sorted set `k` (0: the first), if there.
    pub fn rank(&self, k: &[u8], member: &[u8]) -> Option<usize> {
        let z = self.zset(k).ok()??;
        z.iter().position(|(_, m)| m == member)
    }

    /// The string at `k`, if there.
    pub fn string(&self, k: &[u8]) -> Option<&[u8]> {
        match self.get(k).map(|e| &e.value) {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// The earliest millisecond at which a key is gone (the one after its
    /// expiry: [`Keyspace::expire`]), in server milliseconds.
    pub fn next_expiry(&self) -> Option<i64> {
        self.keys
            .values()
            .filter_map(|e| e.expires)
            .min()
            .map(|at| at + 1)
    }

    fn get(&self, k: &[u8]) -> Option<&Entry> {
        self.keys.get(k)
    }

    fn zset(&self, k: &[u8]) -> Result<Option<&Members>, Reply> {
        match self.get(k).map(|e| &e.value) {
            None => Ok(None),
            Some(Value::ZSet(z)) => Ok(Some(z)),
            Some(_) => Err(err(WRONGTYPE)),
        }
    }

    fn zset_mut(&mut self, k: &[u8]) -> Result<Option<&mut Members>, Reply> {
        match self.keys.make_mut().get_mut(k).map(|e| &mut e.value) {
            None => Ok(None),
            Some(Value::ZSet(z)) => Ok(Some(z)),
            Some(_) => Err(err(WRONGTYPE)),
        }
    }

    fn drop_if_empty(&mut self, k: &[u8]) {
        let empty = match self.keys.get(k).map(|e| &e.value) {
            Some(Value::ZSet(z)) => z.is_empty(),
            Some(Value::List(l)) => l.is_empty(),
            _ => false,
        };
        if empty {
            self.keys.make_mut().remove(k);
        }
    }

    /// Runs one command. `published` gets the messages of PUBLISH and
    /// SPUBLISH (the caller decides who receives them).
    pub fn run(&mut self, args: &[Vec<u8>], published: &mut Vec<Published>) -> Reply {
        let Some(name) = args.first() else {
            return err("ERR empty command");
        };
        let cmd = String::from_utf8_lossy(name).to_ascii_uppercase();
        let a = &args[1..];
        match self.command(&cmd, a, published) {
            Ok(r) | Err(r) => r,
        }
    }

    fn command(
        &mut self,
        cmd: &str,
        a: &[Vec<u8>],
        published: &mut Vec<Published>,
    ) -> Result<Reply, Reply> {
        let now = self.now_ms();
        let need = |n: usize, exact: bool| -> Result<(), Reply> {
            if a.len() < n || (exact && a.len() != n) {
                Err(arity(cmd))
            } else {
                Ok(())
            }
        };
        Ok(match cmd {
            "TIME" => {
                need(0, true)?;
                // Each reading a microsecond later: two arrivals in one
                // step are ordered as on a real server, whose clock moves
                // between two scripts.
                self.now_us += 1;
                let s = self.now_us.div_euclid(1_000_000);
                let us = self.now_us.rem_euclid(1_000_000);
                Reply::Array(vec![
                    Reply::bulk(s.to_string()),
                    Reply::bulk(us.to_string()),
                ])
            }
            "EXISTS" => {
                need(1, false)?;
                Reply::Int(a.iter().filter(|k| self.keys.contains_key(*k)).count() as i64)
            }
            "DEL" => {
                need(1, false)?;
                Reply::Int(
                    a.iter()
                        .filter(|k| self.keys.make_mut().remove(*k).is_some())
                        .count() as i64,
                )
            }
            "TYPE" => {
                need(1, true)?;
                Reply::Status(
                    match self.get(&a[0]).map(|e| &e.value) {
                        None => "none",
                        Some(Value::Str(_)) => "string",
                        Some(Value::List(_)) => "list",
                        Some(Value::ZSet(_)) => "zset",
                    }
                    .into(),
                )
            }
            "GET" => {
                need(1, true)?;
                match self.get(&a[0]).map(|e| &e.value) {
                    None => Reply::Nil,
                    Some(Value::Str(s)) => Reply::Bulk(s.clone()),
                    Some(_) => return Err(err(WRONGTYPE)),
                }
            }
            "SET" => {
                need(2, false)?;
                let mut expires = None;
                let mut keep = false;
                let mut i = 2;
                while i < a.len() {
                    let opt = String::from_utf8_lossy(&a[i]).to_ascii_uppercase();
                    match opt.as_str() {
                        "PX" | "EX" if i + 1 < a.len() && expires.is_none() && !keep => {
                            let n = int_arg(&a[i + 1]).ok_or_else(|| {
                                err("ERR value is not an integer or out of range")
                            })?;
                            if n <= 0 {
                                return Err(err("ERR invalid expire time in 'set' command"));
                            }
                            expires = Some(now + if opt == "EX" { n * 1000 } else { n });
                            i += 2;
                        }
                        "KEEPTTL" if expires.is_none() => {
                            keep = true;
                            i += 1;
                        }
                        _ => return Err(err("ERR syntax error")),
                    }
                }
                if keep {
                    expires = self.get(&a[0]).and_then(|e| e.expires);
                }
                self.keys.make_mut().insert(
                    a[0].clone(),
                    Entry {
                        value: Value::Str(a[1].clone()),
                        expires,
                    },
                );
                Reply::Status("OK".into())
            }
            "PEXPIRE" => {
                need(2, true)?;
                let ms = int_arg(&a[1])
                    .ok_or_else(|| err("ERR value is not an integer or out of range"))?;
                if !self.keys.contains_key(&a[0]) {
                    Reply::Int(0)
                } else if ms <= 0 {
                    self.keys.make_mut().remove(&a[0]);
                    Reply::Int(1)
                } else {
                    self.keys.make_mut().get_mut(&a[0]).unwrap().expires = Some(now + ms);
                    Reply::Int(1)
                }
            }
            "PTTL" => {
                need(1, true)?;
                match self.get(&a[0]) {
                    None => Reply::Int(-2),
                    Some(Entry { expires: None, .. }) => Reply::Int(-1),
                    Some(Entry {
                        expires: Some(at), ..
                    }) => Reply::Int((at - now).max(0)),
                }
            }
            "RPUSH" => {
                need(2, false)?;
                let e = self.keys.make_mut().entry(a[0].clone()).or_insert(Entry {
                    value: Value::List(VecDeque::new()),
                    expires: None,
                });
                let Value::List(l) = &mut e.value else {
                    return Err(err(WRONGTYPE));
                };
                l.extend(a[1..].iter().cloned());
                Reply::Int(l.len() as i64)
            }
            "LPOP" => {
                need(1, true)?;
                let r = match self.keys.make_mut().get_mut(&a[0]).map(|e| &mut e.value) {
                    None => Reply::Nil,
                    Some(Value::List(l)) => l.pop_front().map(Reply::Bulk).unwrap_or(Reply::Nil),
                    Some(_) => return Err(err(WRONGTYPE)),
                };
                self.drop_if_empty(&a[0]);
                r
            }
            "LINDEX" => {
                need(2, true)?;
                let i = int_arg(&a[1])
                    .ok_or_else(|| err("ERR value is not an integer or out of range"))?;
                match self.get(&a[0]).map(|e| &e.value) {
                    None => Reply::Nil,
                    Some(Value::List(l)) => {
                        let at = if i < 0 { l.len() as i64 + i } else { i };
                        if at < 0 {
                            Reply::Nil
                        } else {
                            l.get(at as usize)
                                .cloned()
                                .map(Reply::Bulk)
                                .unwrap_or(Reply::Nil)
                        }
                    }
                    Some(_) => return Err(err(WRONGTYPE)),
                }
            }
            "LMOVE" => {
                // What a served BLMOVE does: LEFT to RIGHT only.
                need(4, true)?;
                self.lmove(&a[0], &a[1])?
            }
            "ZADD" => {
                if a.len() < 3 || (a.len() - 1) % 2 != 0 {
                    return Err(err("ERR syntax error"));
                }
                let mut pairs = Vec::new();
                for p in a[1..].chunks(2) {
                    let s =
                        float_arg(&p[0]).ok_or_else(|| err("ERR value is not a valid float"))?;
                    pairs.push((s, p[1].clone()));
                }
                if self.zset(&a[0])?.is_none() {
                    self.keys.make_mut().insert(
                        a[0].clone(),
                        Entry {
                            value: Value::ZSet(Vec::new()),
                            expires: None,
                        },
                    );
                }
                let z = self.zset_mut(&a[0])?.unwrap();
                let mut added = 0;
                for (s, m) in pairs {
                    if let Some(i) = z.iter().position(|(_, x)| *x == m) {
                        z.remove(i);
                    } else {
                        added += 1;
                    }
                    let at = z
                        .iter()
                        .position(|(sc, x)| (sc.0, x.as_slice()) > (s, m.as_slice()))
                        .unwrap_or(z.len());
                    z.insert(at, (Score(s), m));
                }
                Reply::Int(added)
            }
            "ZSCORE" => {
                need(2, true)?;
                match self.zset(&a[0])? {
                    None => Reply::Nil,
                    Some(z) => z
                        .iter()
                        .find(|(_, m)| *m == a[1])
                        .map(|(s, _)| Reply::bulk(score_text(s.0)))
                        .unwrap_or(Reply::Nil),
                }
            }
            "ZREM" => {
                need(2, false)?;
                let Some(z) = self.zset_mut(&a[0])? else {
                    return Ok(Reply::Int(0));
                };
                let before = z.len();
                z.retain(|(_, m)| !a[1..].contains(m));
                let n = before - z.len();
                self.drop_if_empty(&a[0]);
                Reply::Int(n as i64)
            }
            "ZCARD" => {
                need(1, true)?;
                Reply::Int(self.zset(&a[0])?.map_or(0, |z| z.len()) as i64)
            }
            "ZCOUNT" => {
                need(3, true)?;
                let (min, max) = (bound(&a[1]), bound(&a[2]));
                let (Some(min), Some(max)) = (min, max) else {
                    return Err(err("ERR min or max is not a float"));
                };
                Reply::Int(self.zset(&a[0])?.map_or(0, |z| {
                    z.iter().filter(|(s, _)| in_range(s.0, min, max)).count()
                }) as i64)
            }
            "ZRANGE" => {
                need(3, false)?;
                let scores = match a.len() {
                    3 => false,
                    4 if a[3].eq_ignore_ascii_case(b"WITHSCORES") => true,
                    _ => return Err(err("ERR syntax error")),
                };
                let (Some(start), Some(stop)) = (int_arg(&a[1]), int_arg(&a[2])) else {
                    return Err(err("ERR value is not an integer or out of range"));
                };
                let z = self.zset(&a[0])?.cloned().unwrap_or_default();
                let len = z.len() as i64;
                let start = if start < 0 {
                    (len + start).max(0)
                } else {
                    start
                };
                let stop = if stop < 0 {
                    len + stop
                } else {
                    stop.min(len - 1)
                };
                let mut out = Vec::new();
                if start <= stop && start < len {
                    for (s, m) in &z[start as usize..=stop as usize] {
                        out.push(Reply::Bulk(m.clone()));
                        if scores {
                            out.push(Reply::bulk(score_text(s.0)));
                        }
                    }
                }
                Reply::Array(out)
            }
            "ZRANGEBYSCORE" => {
                need(3, false)?;
                let (Some(min), Some(max)) = (bound(&a[1]), bound(&a[2])) else {
                    return Err(err("ERR min or max is not a float"));
                };
                let mut scores = false;
                let mut limit: Option<(i64, i64)> = None;
                let mut i = 3;
                while i < a.len() {
                    if a[i].eq_ignore_ascii_case(b"WITHSCORES") {
                        scores = true;
                        i += 1;
                    } else if a[i].eq_ignore_ascii_case(b"LIMIT") && i + 2 < a.len() {
                        let (Some(o), Some(c)) = (int_arg(&a[i + 1]), int_arg(&a[i + 2])) else {
                            return Err(err("ERR value is not an integer or out of range"));
                        };
                        limit = Some((o, c));
                        i += 3;
                    } else {
                        return Err(err("ERR syntax error"));
                    }
                }
                let z = self.zset(&a[0])?.cloned().unwrap_or_default();
                let mut hits = z.iter().filter(|(s, _)| in_range(s.0, min, max));
                let (skip, take) = match limit {
                    Some((o, _)) if o < 0 => (usize::MAX, 0),
                    Some((o, c)) if c < 0 => (o as usize, usize::MAX),
                    Some((o, c)) => (o as usize, c as usize),
                    None => (0, usize::MAX),
                };
                let mut out = Vec::new();
                for (s, m) in hits.by_ref().skip(skip).take(take) {
                    out.push(Reply::Bulk(m.clone()));
                    if scores {
                        out.push(Reply::bulk(score_text(s.0)));
                    }
                }
                Reply::Array(out)
            }
            "ZREMRANGEBYSCORE" => {
                need(3, true)?;
                let (Some(min), Some(max)) = (bound(&a[1]), bound(&a[2])) else {
                    return Err(err("ERR min or max is not a float"));
                };
                let Some(z) = self.zset_mut(&a[0])? else {
                    return Ok(Reply::Int(0));
                };
                let before = z.len();
                z.retain(|(s, _)| !in_range(s.0, min, max));
                let n = before - z.len();
                self.drop_if_empty(&a[0]);
                Reply::Int(n as i64)
            }
            "PUBLISH" | "SPUBLISH" => {
                need(2, true)?;
                published.push(Published {
                    channel: a[0].clone(),
                    message: a[1].clone(),
                });
                // How many receive it is the model's to say; scripts only
                // check that it is not an error.
                Reply::Int(0)
            }
            _ => return Err(Reply::Error(format!("ERR unknown command '{cmd}'"))),
        })
    }

    /// LMOVE src dst LEFT RIGHT: the head of `src` to the tail of `dst`.
    pub fn lmove(&mut self, src: &[u8], dst: &[u8]) -> Result<Reply, Reply> {
        for k in [src, dst] {
            if let Some(e) = self.keys.get(k) {
                if !matches!(e.value, Value::List(_)) {
                    return Err(err(WRONGTYPE));
                }
            }
        }
        let item = match self.keys.make_mut().get_mut(src).map(|e| &mut e.value) {
            Some(Value::List(l)) => l.pop_front(),
            _ => None,
        };
        self.drop_if_empty(src);
        let Some(item) = item else {
            return Ok(Reply::Nil);
        };
        let e = self.keys.make_mut().entry(dst.to_vec()).or_insert(Entry {
            value: Value::List(VecDeque::new()),
            expires: None,
        });
        if let Value::List(l) = &mut e.value {
            l.push_back(item.clone());
        }
        Ok(Reply::Bulk(item))
    }

    /// Whether `key` is a non-empty list (a blocked pop on it is served).
    pub fn list_ready(&self, key: &[u8]) -> bool {
        matches!(self.keys.get(key).map(|e| &e.value), Some(Value::List(l)) if !l.is_empty())
    }

    /// The keyspace as lines, for traces.
    pub fn show(&self) -> Vec<String> {
        let now = self.now_ms();
        self.keys
            .iter()
            .map(|(k, e)| {
                let v = match &e.value {
                    Value::Str(s) => format!("{:?}", String::from_utf8_lossy(s)),
                    Value::List(l) => format!(
                        "list{:?}",
                        l.iter()
                            .map(|x| String::from_utf8_lossy(x).into_owned())
                            .collect::<Vec<_>>()
                    ),
                    Value::ZSet(z) => format!(
                        "zset{{{}}}",
                        z.iter()
                            .map(|(s, m)| format!(
                                "{}:{}",
                                String::from_utf8_lossy(m),
                                score_text(s.0)
                            ))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                let ttl = e
                    .expires
                    .map(|at| format!(" (pttl {})", at - now))
                    .unwrap_or_default();
                format!("{} = {v}{ttl}", String::from_utf8_lossy(k))
            })
            .collect()
    }
}
