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

    /// An `EVALSHA` of this script with these keys and arguments (falling
    /// back to `EVAL` on `NOSCRIPT` when invoked).
    pub(crate) fn call<'a, K: AsRef<[u8]>, A: AsRef<[u8]>>(
        &'a self,
        keys: &[K],
        args: &[A],
    ) -> redis::ScriptInvocation<'a> {
        let mut inv = self.script.prepare_invoke();
        for k in keys {
            inv.key(k.as_ref());
        }
        for a in args {
            inv.arg(a.as_ref());
        }
        inv
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
script!(FAIR_ACQUIRE, "fair_acquire.lua");
script!(QUEUE_LEAVE, "queue_leave.lua");
script!(RW_READ_ACQUIRE, "rw_read_acquire.lua");
script!(RW_WRITE_ACQUIRE, "rw_write_acquire.lua");
script!(RW_READ_RELEASE, "rw_read_release.lua");
script!(ZSET_EXTEND, "zset_extend.lua");
script!(RW_STATE, "rw_state.lua");
script!(SEM_ACQUIRE, "sem_acquire.lua");
script!(SEM_RELEASE, "sem_release.lua");
script!(SEM_STATE, "sem_state.lua");
script!(SEM_RESIZE, "sem_resize.lua");
script!(SEM_FORCE_RELEASE, "sem_force_release.lua");
script!(LATCH_SET, "latch_set.lua");
script!(LOCK_NOTE, "lock_note.lua");
script!(LATCH_COUNT_DOWN, "latch_count_down.lua");
script!(INSPECT, "inspect.lua");
script!(FENCE_RAISE, "fence_raise.lua");
