//! The Lua scripts in `lua/`, compiled into the binary and hashed once.
//!
//! Single calls go out as `EVALSHA`; `redis::Script` falls back to `EVAL`
//! (which also loads the script) when the server answers `NOSCRIPT`, e.g.
//! after a restart or `SCRIPT FLUSH`. Pipelined callers (renewal) cannot
//! retry one command of a pipeline, so they send `SCRIPT LOAD` first, which
//! is why the source text is kept next to the hashed script.

use once_cell::sync::Lazy;
use redis::Script;

/// A script and its source text.
pub(crate) struct Lua {
    pub(crate) script: Script,
    pub(crate) code: &'static str,
}

impl Lua {
    fn new(code: &'static str) -> Lua {
        Lua {
            script: Script::new(code),
            code,
        }
    }
}

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub(crate) static $name: Lazy<Lua> =
            Lazy::new(|| Lua::new(include_str!(concat!("../lua/", $file))));
    };
}

script!(LOCK_ACQUIRE, "lock_acquire.lua");
script!(LOCK_RELEASE, "lock_release.lua");
script!(LOCK_EXTEND, "lock_extend.lua");
script!(FORCE_UNLOCK, "force_unlock.lua");
