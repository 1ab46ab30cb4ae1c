//! The Lua scripts in `lua/`, compiled into the binary and hashed once.
//!
//! Single calls go out as `EVALSHA`; `redis::Script` falls back to `EVAL`
//! (which also loads the script) when the server answers `NOSCRIPT`, e.g.
//! after a restart or `SCRIPT FLUSH`. Pipelined callers (renewal) cannot
//! retry one command of a pipeline, so they send `SCRIPT LOAD` first, which
//! is why the source text is kept next to the hashed script.
//!
//! Code several scripts share (drawing a fence, the waiter queue) lives in
//! prelude files, once; a script names the preludes it needs in its
//! `-- Uses` header line and is sent with them in front.
//!
//! The server gets the code without its comment lines and indentation
//! (a third of the bytes): an undo written behind a late grant runs only
//! if the server reads it in the same read as the grant, before its reply
//! to the grant resets our closed socket, and Redis 6.2 reads 16 KiB at a
//! time. With the comments, `SCRIPT LOAD` of the lock's release alone was
//! 16 KB, and a multi-lock's undo on a stalled 6.2 server never ran.

use once_cell::sync::Lazy;
use redis::Script;

/// A script and its source text.
pub(crate) struct Lua {
    pub(crate) script: Script,
    pub(crate) code: &'static str,
}

/// The preludes a script may name in its `-- Uses` line.
const PRELUDES: &[(&str, &str)] = &[
    ("clock.lua", include_str!("../lua/clock.lua")),
    ("took.lua", include_str!("../lua/took.lua")),
    ("fence.lua", include_str!("../lua/fence.lua")),
    ("publish.lua", include_str!("../lua/publish.lua")),
    ("queue.lua", include_str!("../lua/queue.lua")),
    ("sem_grant.lua", include_str!("../lua/sem_grant.lua")),
    ("rw_grant.lua", include_str!("../lua/rw_grant.lua")),
];

/// The preludes `body` names in its header's `-- Uses` line, in order.
fn uses(body: &str) -> impl Iterator<Item = &str> {
    body.lines()
        .take_while(|l| l.starts_with("--"))
        .find_map(|l| l.strip_prefix("-- Uses"))
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
}

/// `body` with the preludes it uses in front (made once per script, and
/// kept for the life of the process like the script itself).
fn compose(body: &'static str) -> &'static str {
    let mut code = String::new();
    for name in uses(body) {
        // Every name resolves: checked by the tests below.
        if let Some((_, text)) = PRELUDES.iter().find(|(n, _)| *n == name) {
            code.push_str(text);
            code.push('\n');
        }
    }
    code.push_str(body);
    Box::leak(compact(&code).into_boxed_str())
}

/// `code` without whole-line comments, indentation and blank lines. Safe
/// because no script has a long string or block comment (`[[`, checked by
/// the tests below), so every line that starts with `--` is a comment.
fn compact(code: &str) -> String {
    let mut out = String::with_capacity(code.len() / 2);
    for line in code.lines().map(str::trim) {
        if !line.is_empty() && !line.starts_with("--") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

impl Lua {
    fn new(body: &'static str) -> Lua {
        let code = compose(body);
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

/// A script's yes/no argument: the word the script tests for, or empty.
pub(crate) fn word(on: bool, word: &str) -> Vec<u8> {
    if on {
        word.as_bytes().to_vec()
    } else {
        Vec::new()
    }
}

/// A script's duration argument, in whole milliseconds.
pub(crate) fn millis(d: std::time::Duration) -> Vec<u8> {
    d.as_millis().to_string().into_bytes()
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
script!(LOCK_WATCH, "lock_watch.lua");
script!(FORCE_UNLOCK, "force_unlock.lua");
script!(WAKE, "wake.lua");
script!(RW_READ_ACQUIRE, "rw_read_acquire.lua");
script!(RW_WRITE_ACQUIRE, "rw_write_acquire.lua");
script!(RW_READ_RELEASE, "rw_read_release.lua");
script!(RW_WRITE_RELEASE, "rw_write_release.lua");
script!(RW_WATCH, "rw_watch.lua");
script!(ZSET_EXTEND, "zset_extend.lua");
script!(RW_STATE, "rw_state.lua");
script!(SEM_ACQUIRE, "sem_acquire.lua");
script!(SEM_RELEASE, "sem_release.lua");
script!(SEM_STATE, "sem_state.lua");
script!(SEM_RESIZE, "sem_resize.lua");
script!(SEM_FORCE_RELEASE, "sem_force_release.lua");
script!(SEM_WATCH, "sem_watch.lua");
script!(LATCH_SET, "latch_set.lua");
script!(LOCK_NOTE, "lock_note.lua");
script!(LATCH_COUNT_DOWN, "latch_count_down.lua");
script!(LATCH_LOOK, "latch_look.lua");
script!(INSPECT, "inspect.lua");
script!(FENCE_RAISE, "fence_raise.lua");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prelude_a_script_uses_exists() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let body = std::fs::read_to_string(&path).unwrap();
            for name in uses(&body) {
                assert!(
                    PRELUDES.iter().any(|(n, _)| *n == name),
                    "{} uses an unknown prelude {name}",
                    path.display()
                );
            }
        }
    }

    #[test]
    fn a_script_is_sent_with_its_preludes_in_front() {
        assert!(LOCK_ACQUIRE.code.starts_with(&compact(PRELUDES[0].1)));
        assert!(LOCK_ACQUIRE
            .code
            .ends_with(&compact(include_str!("../lua/lock_acquire.lua"))));
        assert_eq!(
            LOCK_EXTEND.code,
            compact(include_str!("../lua/lock_extend.lua"))
        );
    }

    #[test]
    fn no_script_has_a_long_string_or_block_comment() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let body = std::fs::read_to_string(&path).unwrap();
            assert!(!body.contains("[["), "{}: `[[`", path.display());
            assert!(!body.contains("[="), "{}: `[=`", path.display());
        }
    }

    /// A multi-lock of three names writes three grants, then the release
    /// script and three calls of it as the undo: all of it must fit one
    /// 16 KiB read of Redis 6.2 (see the module's docs), with room.
    #[test]
    fn a_late_grant_and_its_undo_fit_one_read_of_the_server() {
        for lua in [
            &*LOCK_RELEASE,
            &*RW_WRITE_RELEASE,
            &*RW_READ_RELEASE,
            &*SEM_RELEASE,
        ] {
            assert!(lua.code.len() < 8 * 1024, "{}", lua.code.len());
        }
    }
}
