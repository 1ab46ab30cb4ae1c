//! A script call as the backend sends it: the script, its keys and its
//! arguments (`Call`), one kept ready for every attempt of an acquisition
//! (`PreparedCall`), and several names' calls put together into one
//! script run without copying (`Joined`).

use std::sync::Arc;

use redis::{ConnectionLike, ErrorKind, FromRedisValue, RedisResult, ServerErrorKind};

use crate::protocol::scripts::{Args, Lua, Parts};

/// One script call: the script, its keys and its arguments.
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) lua: &'static Lua,
    pub(crate) keys: Parts<'a>,
    pub(crate) args: Parts<'a>,
}

impl<'a> Call<'a> {
    /// `lua` on keys and arguments borrowed as they are.
    pub(crate) fn borrowed(lua: &'static Lua, keys: &'a [&'a [u8]], args: &'a [&'a [u8]]) -> Self {
        Call {
            lua,
            keys: Parts::Borrowed(keys),
            args: Parts::Borrowed(args),
        }
    }

    /// The same script on the same keys with other arguments.
    pub(crate) fn with_args<'b>(&self, args: &'b Args) -> Call<'b>
    where
        'a: 'b,
    {
        Call {
            lua: self.lua,
            keys: self.keys,
            args: Parts::Encoded(args),
        }
    }

    /// The same script on the same keys with the arguments `args`.
    #[cfg(feature = "cluster")]
    pub(crate) fn with_parts<'b>(&self, args: Parts<'b>) -> Call<'b>
    where
        'a: 'b,
    {
        Call {
            lua: self.lua,
            keys: self.keys,
            args,
        }
    }

    /// This call as one raw command, for pipelines and fire-and-forget
    /// sends (which cannot fall back on `NOSCRIPT` the way an invocation
    /// does): `EVALSHA <hash>`, or with `text` the self-contained
    /// `EVAL <code>`.
    pub(crate) fn command(&self, text: bool) -> redis::Cmd {
        let mut cmd = if text {
            let mut c = redis::cmd("EVAL");
            c.arg(self.lua.code);
            c
        } else {
            let mut c = redis::cmd("EVALSHA");
            c.arg(self.lua.script.get_hash());
            c
        };
        cmd.arg(self.keys.len());
        for k in self.keys.iter() {
            cmd.arg(k);
        }
        for a in self.args.iter() {
            cmd.arg(a);
        }
        cmd
    }
}

/// A granting script's one run ([`Backend::grant`](super::Backend::grant)):
/// the call, the token-checked release of what it may have granted (written
/// behind a late reply; on Redlock, run on every master after a failed
/// attempt), the lease, the fencing counter it draws from (on Redlock a
/// fence is handed out only once a majority confirms its counter reached
/// it), and the caller's deadline.
pub(crate) struct GrantCall<'a> {
    pub(crate) call: Call<'a>,
    pub(crate) undo: &'a Call<'a>,
    pub(crate) lease: std::time::Duration,
    pub(crate) fence: Option<&'a [u8]>,
    pub(crate) deadline: Option<std::time::Instant>,
}

/// An owned script call, kept for later (a release, a renewal).
#[derive(Clone)]
pub(crate) struct PreparedCall {
    pub(crate) lua: &'static Lua,
    /// Shared: a handle's calls name the same keys, made once per handle
    /// (an acquisition builds several calls; each key copied into each
    /// was most of the allocations its spec cost).
    pub(crate) keys: Arc<[Vec<u8>]>,
    pub(crate) args: Args,
}

impl PreparedCall {
    pub(crate) fn new(
        lua: &'static Lua,
        keys: impl Into<Arc<[Vec<u8>]>>,
        args: Args,
    ) -> PreparedCall {
        PreparedCall {
            lua,
            keys: keys.into(),
            args,
        }
    }

    pub(crate) fn call(&self) -> Call<'_> {
        Call {
            lua: self.lua,
            keys: Parts::Owned(&self.keys),
            args: Parts::Encoded(&self.args),
        }
    }

    /// Several calls of one script that takes several names in a run
    /// (`Lua::per_name`) as one call: each call's keys but the last, then
    /// the last (the fence floor, which they must share), and their
    /// arguments in turn. Its reply is an array of what each call would
    /// have answered, in order. `None` when they cannot go as one: other
    /// scripts, a script that does not repeat, another shape of call, or
    /// different floors (servers or slots).
    ///
    /// One script run instead of several: each run costs the server about
    /// 10 µs of its own (setting up the run, its closures) before any of
    /// the script's calls.
    pub(crate) fn together<'a>(calls: &[&'a PreparedCall]) -> Option<Joined<'a>> {
        let first = calls.first()?;
        let (keys, args) = first.lua.per_name?;
        let floor = first.keys.last()?;
        let fits = |c: &&PreparedCall| {
            std::ptr::eq(c.lua, first.lua)
                && c.keys.len() == keys + 1
                && c.args.len() == args
                && c.keys.last() == Some(floor)
        };
        if !calls.iter().all(fits) {
            return None;
        }
        let mut all_keys: Vec<&[u8]> = Vec::with_capacity(calls.len() * keys + 1);
        let mut all_args: Vec<&Args> = Vec::with_capacity(calls.len());
        for c in calls {
            all_keys.extend(c.keys[..keys].iter().map(Vec::as_slice));
            all_args.push(&c.args);
        }
        all_keys.push(floor);
        Some(Joined {
            lua: first.lua,
            keys: all_keys,
            args: JoinedArgs::Runs(all_args),
        })
    }
}

/// Several calls as one, borrowing their keys and arguments (see
/// [`PreparedCall::together`]).
pub(crate) struct Joined<'a> {
    pub(crate) lua: &'static Lua,
    pub(crate) keys: Vec<&'a [u8]>,
    pub(crate) args: JoinedArgs<'a>,
}

/// A [`Joined`] call's arguments: some of each call's, or each call's
/// whole, one call's after another's.
pub(crate) enum JoinedArgs<'a> {
    Picked(Vec<&'a [u8]>),
    Runs(Vec<&'a Args>),
}

impl Joined<'_> {
    pub(crate) fn call(&self) -> Call<'_> {
        Call {
            lua: self.lua,
            keys: Parts::Borrowed(&self.keys),
            args: match &self.args {
                JoinedArgs::Picked(a) => Parts::Borrowed(a),
                JoinedArgs::Runs(a) => Parts::Runs(a),
            },
        }
    }
}

/// Running a script is the backend's: the protocol core only says what
/// the script and its arguments are.
impl Lua {
    /// Runs this script on `con` with these keys and arguments: one
    /// `EVALSHA`, packed straight into the bytes the server reads (see
    /// [`Lua::packed`]); on `NOSCRIPT` (a restart, `SCRIPT FLUSH`) the
    /// script is loaded and the same bytes sent again.
    pub(crate) fn invoke<'a, T: FromRedisValue>(
        &self,
        con: &mut dyn ConnectionLike,
        keys: impl Into<Parts<'a>>,
        args: impl Into<Parts<'a>>,
    ) -> RedisResult<T> {
        let packed = self.packed(keys, args);
        match run(con, &packed) {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load(con)?;
                run(con, &packed)
            }
            other => other,
        }
    }
}

/// One packed command's reply, an error reply as an error.
fn run<T: FromRedisValue>(con: &mut dyn ConnectionLike, packed: &[u8]) -> RedisResult<T> {
    Ok(redis::from_redis_value(
        con.req_packed_command(packed)?.extract_error()?,
    )?)
}
