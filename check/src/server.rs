//! The server as the checker runs it: the library's scripts, exactly as it
//! sends them (`redlease::__sent_code`), run by Lua 5.1 (Redis's dialect)
//! over a [`Keyspace`], with `redis.call`, `redis.pcall`,
//! `redis.error_reply`, `redis.log` and Redis's conversions between Lua
//! values and replies.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use mlua::{Function, Lua, MultiValue, Table, Value as LuaValue};

use crate::keyspace::{Keyspace, Published, Reply};

/// What a script run sees of the world: the keyspace it changes and the
/// messages it publishes. Moved in before a run and out after it.
#[derive(Default)]
struct World {
    keys: Keyspace,
    published: Vec<Published>,
    /// The commands a run made, for traces (off in the search).
    log: Option<Vec<String>>,
}

pub struct Server {
    lua: Lua,
    world: Rc<RefCell<World>>,
    scripts: HashMap<&'static str, Function>,
    /// `KEYS` and `ARGV`, made once and refilled for each run.
    keys: Table,
    argv: Table,
    /// Verdicts of checks that depend on the keyspace alone, by its
    /// fingerprint (see [`Server::memo`]).
    memo: HashMap<u128, Result<(), String>, crate::search::Fingerprints>,
    /// Answers of yes-or-no probes, by the fingerprint of what they read.
    answers: HashMap<u128, bool, crate::search::Fingerprints>,
    /// Script runs by the fingerprint of what they read (the keyspace with
    /// its clock, the script, its keys and arguments): a script is a
    /// function of these, and the search meets the same run again in many
    /// states that differ only in the clients (the keyspace after, the
    /// reply, what was published).
    runs: HashMap<u128, (Keyspace, Reply, Vec<Published>), crate::search::Fingerprints>,
}

/// Runs kept at most (then forgotten at once): a few hundred MB.
const RUNS_KEPT: usize = 2_000_000;

/// A script's or command's outcome on the server.
pub struct Ran {
    pub reply: Reply,
    pub published: Vec<Published>,
    /// The commands the script called (with `trace` on).
    pub calls: Vec<String>,
}

impl Ran {
    /// Writes this run to a trace (if one is kept): `head` (which server,
    /// or nothing), the script, its arguments and reply, then each command
    /// it called.
    pub fn log(&self, log: &mut Option<Vec<String>>, head: &str, file: &str, args: &[Vec<u8>]) {
        let Some(l) = log else { return };
        let shown: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        l.push(format!(
            "{head}EVALSHA {file} ARGV {shown:?} -> {}",
            self.reply.show()
        ));
        l.extend(self.calls.iter().map(|c| format!("    {c}")));
    }
}

fn text(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    if s.len() > 48 {
        format!(
            "{}…",
            &s[..s.char_indices().nth(47).map_or(s.len(), |(i, _)| i)]
        )
    } else {
        s.into_owned()
    }
}

/// A Lua value handed to `redis.call`, as the argument Redis makes of it:
/// strings as they are, numbers as `%.17g` prints them (integers in full).
fn arg_of(v: &LuaValue) -> Option<Vec<u8>> {
    match v {
        LuaValue::String(s) => Some(s.as_bytes().to_vec()),
        LuaValue::Integer(n) => Some(n.to_string().into_bytes()),
        LuaValue::Number(n) => Some(crate::keyspace::score_text(*n).into_bytes()),
        _ => None,
    }
}

/// A reply as Lua receives it from `redis.call` (Redis's conversion): nil
/// as `false`, a status as `{ok = …}`, an error as `{err = …}`.
fn to_lua(lua: &Lua, r: &Reply) -> mlua::Result<LuaValue> {
    Ok(match r {
        Reply::Int(n) => LuaValue::Number(*n as f64),
        Reply::Bulk(b) => LuaValue::String(lua.create_string(b)?),
        Reply::Nil => LuaValue::Boolean(false),
        Reply::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", s.as_str())?;
            LuaValue::Table(t)
        }
        Reply::Error(e) => {
            let t = lua.create_table()?;
            t.raw_set("err", e.as_str())?;
            LuaValue::Table(t)
        }
    })
}

/// A script's return value as its reply (Redis's conversion): numbers
/// truncated to integers, `false` and nil as nil, `true` as 1, a table
/// with `err` or `ok` as an error or a status, another table as an array
/// up to its first nil.
fn from_lua(v: &LuaValue) -> Reply {
    match v {
        LuaValue::Nil | LuaValue::Boolean(false) => Reply::Nil,
        LuaValue::Boolean(true) => Reply::Int(1),
        LuaValue::Integer(n) => Reply::Int(*n),
        LuaValue::Number(n) => Reply::Int(n.trunc() as i64),
        LuaValue::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        LuaValue::Table(t) => {
            if let Ok(LuaValue::String(e)) = t.raw_get::<LuaValue>("err") {
                return Reply::Error(e.to_string_lossy().to_string());
            }
            if let Ok(LuaValue::String(s)) = t.raw_get::<LuaValue>("ok") {
                return Reply::Status(s.to_string_lossy().to_string());
            }
            let mut out = Vec::new();
            for i in 1.. {
                match t.raw_get::<LuaValue>(i) {
                    Ok(LuaValue::Nil) | Err(_) => break,
                    Ok(v) => out.push(from_lua(&v)),
                }
            }
            Reply::Array(out)
        }
        _ => Reply::Nil,
    }
}

impl Server {
    pub fn new() -> mlua::Result<Server> {
        let lua = Lua::new();
        let world = Rc::new(RefCell::new(World::default()));
        let redis: Table = lua.create_table()?;
        for (name, protected) in [("call", false), ("pcall", true)] {
            let world = world.clone();
            let f = lua.create_function(move |lua, args: MultiValue| {
                let mut cmd = Vec::with_capacity(args.len());
                for a in args.iter() {
                    match arg_of(a) {
                        Some(b) => cmd.push(b),
                        None => {
                            let e =
                                "ERR Lua redis lib command arguments must be strings or integers";
                            if protected {
                                return to_lua(lua, &Reply::Error(e.into()));
                            }
                            return Err(mlua::Error::RuntimeError(e.into()));
                        }
                    }
                }
                let reply = {
                    let mut w = world.borrow_mut();
                    let World {
                        keys,
                        published,
                        log,
                    } = &mut *w;
                    let reply = keys.run(&cmd, published);
                    if let Some(log) = log {
                        let shown: Vec<String> = cmd.iter().map(|b| text(b)).collect();
                        log.push(format!("{} -> {}", shown.join(" "), reply.show()));
                    }
                    reply
                };
                match (&reply, protected) {
                    // redis.call raises the error: the script ends with it.
                    (Reply::Error(e), false) => {
                        Err(mlua::Error::RuntimeError(format!("REPLY:{e}")))
                    }
                    _ => to_lua(lua, &reply),
                }
            })?;
            redis.set(name, f)?;
        }
        redis.set(
            "error_reply",
            lua.create_function(|lua, e: String| {
                let t = lua.create_table()?;
                t.raw_set("err", e)?;
                Ok(t)
            })?,
        )?;
        redis.set(
            "status_reply",
            lua.create_function(|lua, s: String| {
                let t = lua.create_table()?;
                t.raw_set("ok", s)?;
                Ok(t)
            })?,
        )?;
        redis.set("log", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
        redis.set("LOG_WARNING", 3)?;
        lua.globals().set("redis", redis)?;
        let (keys, argv) = (lua.create_table()?, lua.create_table()?);
        lua.globals().set("KEYS", keys.clone())?;
        lua.globals().set("ARGV", argv.clone())?;
        Ok(Server {
            lua,
            world,
            scripts: HashMap::new(),
            keys,
            argv,
            memo: HashMap::default(),
            answers: HashMap::default(),
            runs: HashMap::default(),
        })
    }

    /// `check`'s verdict for a keyspace whose fingerprint (with the
    /// check's own tag) is `key`, computed once: the quiescence checks
    /// probe a keyspace with up to sixteen script runs, and many states
    /// share one (their clients differ, the server does not). A third of
    /// the search's time went there.
    pub fn memo(
        &mut self,
        key: u128,
        check: impl FnOnce(&mut Server) -> Result<(), String>,
    ) -> Result<(), String> {
        if let Some(v) = self.memo.get(&key) {
            return v.clone();
        }
        let v = check(self);
        self.memo.insert(key, v.clone());
        v
    }

    /// Turns the per-run command log on (for traces) or off (the search).
    /// A yes-or-no probe whose answer depends only on what `key` is the
    /// fingerprint of (a keyspace and a waiter), computed once.
    pub fn answer(&mut self, key: u128, probe: impl FnOnce(&mut Server) -> bool) -> bool {
        if let Some(&v) = self.answers.get(&key) {
            return v;
        }
        let v = probe(self);
        self.answers.insert(key, v);
        v
    }

    pub fn trace(&mut self, on: bool) {
        self.world.borrow_mut().log = on.then(Vec::new);
    }

    fn script(&mut self, file: &'static str) -> Function {
        if let Some(f) = self.scripts.get(file) {
            return f.clone();
        }
        let code = redlease::__sent_code(file)
            .unwrap_or_else(|| panic!("the library sends no script {file}"));
        self.load(file, code)
    }

    /// Compiles `code` as the script `file` (a mutated copy, in the
    /// checker's own tests).
    pub fn load(&mut self, file: &'static str, code: &str) -> Function {
        let f = self
            .lua
            .load(code)
            .set_name(file)
            .into_function()
            .unwrap_or_else(|e| panic!("{file} does not compile: {e}"));
        self.scripts.insert(file, f.clone());
        // Runs of the script this replaces are no answer for it.
        self.runs.clear();
        f
    }

    /// Runs the script `file` with `keys` and `args` on `keys_of`, as
    /// `EVALSHA` would: atomically, with the keyspace's clock.
    pub fn eval(
        &mut self,
        space: &mut Keyspace,
        file: &'static str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> Ran {
        let f = self.script(file);
        space.expire();
        let tracing = self.world.borrow().log.is_some();
        let run = (!tracing).then(|| crate::search::fingerprint(&(&*space, file, keys, args)));
        if let Some((after, reply, published)) = run.and_then(|r| self.runs.get(&r)) {
            *space = after.clone();
            return Ran {
                reply: reply.clone(),
                published: published.clone(),
                calls: Vec::new(),
            };
        }
        {
            let mut w = self.world.borrow_mut();
            w.keys = std::mem::take(space);
            if let Some(log) = &mut w.log {
                log.clear();
            }
        }
        let reply = self.call(&f, keys, args);
        let mut w = self.world.borrow_mut();
        *space = std::mem::take(&mut w.keys);
        let ran = Ran {
            reply,
            published: std::mem::take(&mut w.published),
            calls: w.log.as_mut().map(std::mem::take).unwrap_or_default(),
        };
        drop(w);
        if let Some(r) = run {
            if self.runs.len() >= RUNS_KEPT {
                self.runs.clear();
            }
            self.runs
                .insert(r, (space.clone(), ran.reply.clone(), ran.published.clone()));
        }
        ran
    }

    fn call(&self, f: &Function, keys: &[Vec<u8>], args: &[Vec<u8>]) -> Reply {
        let result = (|| -> mlua::Result<LuaValue> {
            for (table, items) in [(&self.keys, keys), (&self.argv, args)] {
                for (i, item) in items.iter().enumerate() {
                    table.raw_set(i + 1, self.lua.create_string(item)?)?;
                }
                // What a longer call before this one left.
                for i in items.len() + 1..=table.raw_len() {
                    table.raw_set(i, LuaValue::Nil)?;
                }
            }
            f.call::<LuaValue>(())
        })();
        match result {
            Ok(v) => from_lua(&v),
            Err(e) => {
                let msg = match &e {
                    mlua::Error::CallbackError { cause, .. } => cause.to_string(),
                    other => other.to_string(),
                };
                match msg.find("REPLY:") {
                    Some(at) => {
                        Reply::Error(msg[at + 6..].lines().next().unwrap_or("").to_string())
                    }
                    // A Lua error (`error(...)`): Redis answers ERR with
                    // the message.
                    None => Reply::Error(format!("ERR {}", msg.lines().next().unwrap_or(""))),
                }
            }
        }
    }

    /// Runs one plain command (the client's own: a pop's companions, a
    /// look at a key).
    pub fn command(&mut self, space: &mut Keyspace, args: &[Vec<u8>]) -> Ran {
        space.expire();
        let mut published = Vec::new();
        let reply = space.run(args, &mut published);
        Ran {
            reply,
            published,
            calls: Vec::new(),
        }
    }
}
