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

/// Gives each script-arguments struct named `parts()`: its arguments as
/// separate byte strings, the model checker's form.
macro_rules! parts {
    ($($t:ident),*) => {$(
        impl $t<'_> {
            #[doc(hidden)]
            #[allow(dead_code)] // the checker's, which builds only some scripts' arguments this way
            pub fn parts(&self) -> Vec<Vec<u8>> {
                self.argv().to_vecs()
            }
        }
    )*};
}

/// A script's arguments by name, whose order is the script's: the struct,
/// written once, and its `argv`, which pushes each field in the order it
/// is written (each as its [`Arg`] says; a yes/no field written `= "word"`
/// as that word or nothing), and `parts()`. Used where a script takes its
/// arguments in the order of one struct; the others write `argv` out.
macro_rules! script_args {
    ($(#[$m:meta])* $vis:vis struct $name:ident<$lt:lifetime> {
        $($(#[$fm:meta])* $fvis:vis $field:ident: $ty:ty $(= $word:literal)?,)*
    }) => {
        $(#[$m])*
        $vis struct $name<$lt> {
            $($(#[$fm])* $fvis $field: $ty,)*
        }

        impl $name<'_> {
            pub(crate) fn argv(&self) -> Args {
                let mut a = Args::new();
                $(script_args!(@push a, self.$field $(, $word)?);)*
                a
            }
        }

        parts!($name);
    };
    (@push $a:ident, $v:expr) => {
        $crate::protocol::scripts::Arg::push_to(&$v, &mut $a)
    };
    (@push $a:ident, $v:expr, $word:literal) => {
        $a.push_word($v, $word)
    };
}

/// How one field of a script's arguments goes to the server (see
/// `script_args!`): bytes as they are, a duration in whole milliseconds, a
/// count in decimal, a group (`Announce`, `Open`) as its own fields.
pub(crate) trait Arg {
    fn push_to(&self, a: &mut Args);
}

impl Arg for [u8] {
    fn push_to(&self, a: &mut Args) {
        a.push(self);
    }
}

impl<T: Arg + ?Sized> Arg for &T {
    fn push_to(&self, a: &mut Args) {
        (**self).push_to(a);
    }
}

impl Arg for std::time::Duration {
    fn push_to(&self, a: &mut Args) {
        a.push_millis(*self);
    }
}

mod args;
pub mod lock;
pub mod rwlock;
pub mod semaphore;

pub(crate) use args::{millis, Args, Parts};
use args::{push_bulk, push_decimal, u128_digits};

use once_cell::sync::Lazy;
use redis::Script;

/// A script and its source text.
pub(crate) struct Lua {
    pub(crate) script: Script,
    pub(crate) code: &'static str,
    /// For a script that takes several names in one run (its header says
    /// so): how many keys and arguments each name has. The last key, the
    /// server's fence floor, is shared and comes once, at the end. See
    /// `PreparedCall::together`.
    pub(crate) per_name: Option<(usize, usize)>,
    /// For a script that may hand the name on (a release, a look that
    /// opens a lapsed lease, a newcomer that finds the name free with a
    /// waiter ahead): the argument (ARGV[n], counted from 1, in each name's
    /// run) that is its hand-over's claim window, which a Cluster client
    /// lengthens right after the slot moved (see [`Lua::with_claim`]).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) claim_arg: Option<usize>,
}

/// The preludes a script may name in its `-- Uses` line.
const PRELUDES: &[(&str, &str)] = &[
    ("clock.lua", include_str!("../../../lua/clock.lua")),
    ("took.lua", include_str!("../../../lua/took.lua")),
    ("fence.lua", include_str!("../../../lua/fence.lua")),
    ("publish.lua", include_str!("../../../lua/publish.lua")),
    ("queue.lua", include_str!("../../../lua/queue.lua")),
    ("sem_grant.lua", include_str!("../../../lua/sem_grant.lua")),
    ("rw_grant.lua", include_str!("../../../lua/rw_grant.lua")),
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

/// A line that splits a script's body (see [`compose`]): the definitions
/// only the part after it calls are made there, not in front. A body may
/// have several: each part gets what it calls and no part before it did.
const REST_OF_PRELUDES: &str = "-- (the rest of the preludes)";

/// `body` with the preludes it uses in front (made once per script, and
/// kept for the life of the process like the script itself): of each
/// prelude only the definitions the script calls, directly or through
/// another. Every definition in front is a closure the server makes at
/// each run; the lock's release carried 25, of which it calls 8, on the
/// handoff's path. A body with the line [`REST_OF_PRELUDES`] has in front
/// only what the part before that line calls; what only the part after it
/// calls is defined at that line, so a run that returns before it (an
/// uncontended acquisition: 9 definitions of 26; a lock's release with
/// nobody queued: 3 of its 21 functions; a reader's, a writer's and a
/// permit's release likewise; a waiter's look at a name still held: 4 of
/// a lock's 22, 2 of a writer's 25, 1 of a permit's 14) never makes them
/// (1.1 us of the server's 11 us per acquisition, session 59; 1.5 us of
/// 6.4 per release, session 60; 0.7-1.4 us of 3.3-4.9 per look, session
/// 61). With more such lines, each part after one gets what it calls
/// that no part before it had: the lock's release hands over to its
/// queue in a part of its own, before `release()` and what only that
/// calls are made.
/// Definitions keep their preludes' order in each group, and each group
/// holds every definition its members call that no earlier group made,
/// so nothing calls one made later.
fn compose(body: &'static str) -> &'static str {
    let defs: Vec<(&str, String)> = uses(body)
        .filter_map(|name| PRELUDES.iter().find(|(n, _)| *n == name))
        .flat_map(|(_, text)| definitions(text))
        .collect();
    let mut made = vec![false; defs.len()];
    let mut code = String::new();
    for part in body.split(&format!("\n{REST_OF_PRELUDES}\n")).map(compact) {
        let now = called(&defs, &part, &made);
        for (((_, text), _), _) in defs
            .iter()
            .zip(&now)
            .zip(&made)
            .filter(|((_, &needed), &before)| needed && !before)
        {
            code.push_str(text);
        }
        code.push_str(&part);
        made = now;
    }
    Box::leak(code.into_boxed_str())
}

/// Which of `defs` `code` calls, directly or through another definition,
/// besides those `have` marks already (made earlier, so not again).
fn called(defs: &[(&str, String)], code: &str, have: &[bool]) -> Vec<bool> {
    let mut keep = have.to_vec();
    // Each pass keeps at least one more, or ends.
    loop {
        let wanted = (0..defs.len()).find(|&i| {
            !keep[i]
                && (mentions(code, defs[i].0)
                    || (0..defs.len()).any(|j| keep[j] && mentions(&defs[j].1, defs[i].0)))
        });
        match wanted {
            Some(i) => keep[i] = true,
            None => break,
        }
    }
    keep
}

/// A prelude's top-level definitions, each with its name, compacted, in
/// order. Every top-level line of a prelude is a comment, a blank line, a
/// `local` definition or the `end` of a function (checked by the tests
/// below), so a definition runs from its `local` line to the next.
fn definitions(prelude: &'static str) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let mut text = String::new();
    for line in prelude.lines() {
        if let Some(rest) = line.strip_prefix("local ") {
            if let Some(last) = out.last_mut() {
                last.1 = compact(&std::mem::take(&mut text));
            }
            let rest = rest.strip_prefix("function ").unwrap_or(rest);
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            out.push((&rest[..end], String::new()));
        }
        if !out.is_empty() {
            text.push_str(line);
            text.push('\n');
        }
    }
    if let Some(last) = out.last_mut() {
        last.1 = compact(&text);
    }
    out
}

/// Whether `code` uses the name `name` (not as part of a longer one).
fn mentions(code: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    code.match_indices(name)
        .any(|(at, _)| !code[..at].ends_with(word) && !code[at + name.len()..].starts_with(word))
}

/// `code` without comments, indentation and blank lines. Safe because no
/// script has a long string or block comment (`[[`, checked by the tests
/// below), so every line that starts with `--` is a comment, and so is a
/// line's ` --` with no quote before it (it cannot be inside a string);
/// a trailing comment after a string is kept.
fn compact(code: &str) -> String {
    let mut out = String::with_capacity(code.len() / 2);
    for line in code.lines().map(str::trim) {
        let line = match line.find(" --") {
            Some(at) if !line[..at].contains(['\'', '"']) => line[..at].trim_end(),
            _ => line,
        };
        if !line.is_empty() && !line.starts_with("--") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

impl Lua {
    fn new(body: &'static str, per_name: Option<(usize, usize)>, claim_arg: Option<usize>) -> Lua {
        let code = compose(body);
        Lua {
            script: Script::new(code),
            code,
            per_name,
            claim_arg,
        }
    }

    /// `args` (this script's) with its hand-over's claim window (see
    /// [`Lua::claim_arg`]; each name's, for a script that takes several)
    /// set to `claim`, or `None` when it has none or already says so.
    /// Cluster clients send a release this way right after its slot moved
    /// (`protocol::timing::hand_over_claim`).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn with_claim(
        &self,
        args: Parts<'_>,
        claim: std::time::Duration,
    ) -> Option<Vec<Vec<u8>>> {
        let at = self.claim_arg?.checked_sub(1)?;
        let stride = self.per_name.map_or(usize::MAX, |(_, a)| a.max(1));
        let claim = claim.as_millis().to_string().into_bytes();
        let mut changed = false;
        let out = args
            .iter()
            .enumerate()
            .map(|(i, a)| {
                if i % stride == at && a != claim.as_slice() {
                    changed = true;
                    claim.clone()
                } else {
                    a.to_vec()
                }
            })
            .collect();
        changed.then_some(out)
    }

    /// This script's `EVALSHA` with these keys and arguments, as the
    /// server reads it (RESP), in one buffer sized up front. The lock's
    /// release is on the handoff's critical path: redis-rs's
    /// `ScriptInvocation` copies every key and argument into vectors of
    /// its own, then into a `Cmd`, then packs that, and on a machine whose
    /// caches went cold while the lock was held that cost about 5 µs
    /// before the release was written.
    pub(crate) fn packed<'a>(
        &self,
        keys: impl Into<Parts<'a>>,
        args: impl Into<Parts<'a>>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        self.pack_into(&mut out, keys.into(), args.into());
        out
    }

    /// [`Lua::packed`], appended to `out`: a pipeline of several calls is
    /// packed into one buffer, with no buffer of each call's own to copy.
    pub(crate) fn pack_into(&self, out: &mut Vec<u8>, keys: Parts<'_>, args: Parts<'_>) {
        let hash = self.script.get_hash().as_bytes();
        let mut count = [0u8; 40];
        let count = u128_digits(&mut count, keys.len() as u128);
        // Arguments already encoded go in one piece per call.
        let one;
        let (encoded, loose): (&[&Args], _) = match args {
            Parts::Encoded(a) => {
                one = [a];
                (&one, Parts::Borrowed(&[]))
            }
            Parts::Runs(runs) => (runs, Parts::Borrowed(&[])),
            other => (&[], other),
        };
        let encoded_len: usize = encoded.iter().map(|a| a.resp().len()).sum();
        let parts = || {
            [b"EVALSHA".as_slice(), hash, count]
                .into_iter()
                .chain(keys.iter())
                .chain(loose.iter())
        };
        // Each part: "$<len>\r\n<bytes>\r\n", its length under 20 digits.
        out.reserve(32 + encoded_len + parts().map(|p| p.len() + 25).sum::<usize>());
        out.push(b'*');
        push_decimal(out, 3 + keys.len() + args.len());
        out.extend_from_slice(b"\r\n");
        for part in parts() {
            push_bulk(out, part);
        }
        for a in encoded {
            out.extend_from_slice(a.resp());
        }
    }

    /// An `EVALSHA` of this script with these keys and arguments (falling
    /// back to `EVAL` on `NOSCRIPT` when invoked): for a cluster
    /// connection, which routes a `Cmd` rather than packed bytes.
    #[cfg(feature = "cluster")]
    pub(crate) fn call<'s, 'a>(
        &'s self,
        keys: impl Into<Parts<'a>>,
        args: impl Into<Parts<'a>>,
    ) -> redis::ScriptInvocation<'s> {
        let mut inv = self.script.prepare_invoke();
        for k in keys.into().iter() {
            inv.key(k);
        }
        for a in args.into().iter() {
            inv.arg(a);
        }
        inv
    }
}

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub(crate) static $name: Lazy<Lua> =
            Lazy::new(|| Lua::new(include_str!(concat!("../../../lua/", $file)), None, None));
    };
    ($name:ident, $file:literal, claim($claim:literal)) => {
        pub(crate) static $name: Lazy<Lua> = Lazy::new(|| {
            Lua::new(
                include_str!(concat!("../../../lua/", $file)),
                None,
                Some($claim),
            )
        });
    };
    ($name:ident, $file:literal, per_name($keys:literal, $args:literal), claim($claim:literal)) => {
        pub(crate) static $name: Lazy<Lua> = Lazy::new(|| {
            Lua::new(
                include_str!(concat!("../../../lua/", $file)),
                Some(($keys, $args)),
                Some($claim),
            )
        });
    };
}

script!(LOCK_ACQUIRE, "lock_acquire.lua", claim(10));
script!(LOCK_ACQUIRE_ALL, "lock_acquire_all.lua");
script!(LOCK_RELEASE, "lock_release.lua", per_name(4, 10), claim(5));
script!(LOCK_EXTEND, "lock_extend.lua");
script!(LOCK_WATCH, "lock_watch.lua", claim(8));
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
script!(SEM_RELEASE, "sem_release.lua", claim(5));
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

/// Every script, by its file name in `lua/`.
const ALL: &[(&str, &Lazy<Lua>)] = &[
    ("lock_acquire.lua", &LOCK_ACQUIRE),
    ("lock_acquire_all.lua", &LOCK_ACQUIRE_ALL),
    ("lock_release.lua", &LOCK_RELEASE),
    ("lock_extend.lua", &LOCK_EXTEND),
    ("lock_watch.lua", &LOCK_WATCH),
    ("force_unlock.lua", &FORCE_UNLOCK),
    ("wake.lua", &WAKE),
    ("rw_read_acquire.lua", &RW_READ_ACQUIRE),
    ("rw_write_acquire.lua", &RW_WRITE_ACQUIRE),
    ("rw_read_release.lua", &RW_READ_RELEASE),
    ("rw_write_release.lua", &RW_WRITE_RELEASE),
    ("rw_watch.lua", &RW_WATCH),
    ("zset_extend.lua", &ZSET_EXTEND),
    ("rw_state.lua", &RW_STATE),
    ("sem_acquire.lua", &SEM_ACQUIRE),
    ("sem_release.lua", &SEM_RELEASE),
    ("sem_state.lua", &SEM_STATE),
    ("sem_resize.lua", &SEM_RESIZE),
    ("sem_force_release.lua", &SEM_FORCE_RELEASE),
    ("sem_watch.lua", &SEM_WATCH),
    ("latch_set.lua", &LATCH_SET),
    ("lock_note.lua", &LOCK_NOTE),
    ("latch_count_down.lua", &LATCH_COUNT_DOWN),
    ("latch_look.lua", &LATCH_LOOK),
    ("inspect.lua", &INSPECT),
    ("fence_raise.lua", &FENCE_RAISE),
];

/// The code sent for the script `file` of `lua/` (its SHA1 is what
/// `EVALSHA` names): for the tests and benchmarks, which match or run the
/// library's scripts by it. Not part of the API.
#[doc(hidden)]
pub fn sent_code(file: &str) -> Option<&'static str> {
    ALL.iter()
        .find(|(f, _)| *f == file)
        .map(|(_, lua)| lua.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A script's claim argument is the one its header calls the claim
    /// window of a hand-over, and `with_claim` sets it in every name's run
    /// only.
    #[test]
    fn a_scripts_claim_argument_is_its_claim_window() {
        let mut named = Vec::new();
        for (file, lua) in ALL {
            let Some(n) = lua.claim_arg else { continue };
            let path = format!("{}/lua/{file}", env!("CARGO_MANIFEST_DIR"));
            let source = std::fs::read_to_string(path).unwrap();
            let at = format!("-- ARGV[{n}]");
            let line = source.lines().find(|l| l.starts_with(&at));
            let said = line.map(|l| l[at.len()..].trim_start());
            assert!(
                said.is_some_and(|s| s.starts_with("claim window of a hand-over")),
                "{file}: {line:?}"
            );
            named.push(*file);
        }
        assert_eq!(
            named,
            [
                "lock_acquire.lua",
                "lock_release.lua",
                "lock_watch.lua",
                "sem_release.lua"
            ]
        );
        let claim = std::time::Duration::from_secs(2);
        let one: Args = [&b"t"[..], b"c", b"m", b"p", b"500", b"", b"", b"", b"", b""]
            .into_iter()
            .collect();
        let set = LOCK_RELEASE
            .with_claim(Parts::Encoded(&one), claim)
            .unwrap();
        assert_eq!(set[4], b"2000");
        assert_eq!(set.iter().filter(|a| *a == b"2000").count(), 1);
        let runs = [&one, &one];
        let both = LOCK_RELEASE.with_claim(Parts::Runs(&runs), claim).unwrap();
        assert_eq!(
            (both[4].as_slice(), both[14].as_slice()),
            (&b"2000"[..], &b"2000"[..])
        );
        assert_eq!(both.len(), 20);
        let again: Vec<&[u8]> = set.iter().map(Vec::as_slice).collect();
        assert!(LOCK_RELEASE
            .with_claim(Parts::Borrowed(&again), claim)
            .is_none());
        assert!(LOCK_EXTEND
            .with_claim(Parts::Encoded(&one), claim)
            .is_none());
        let looked = LOCK_WATCH.with_claim(Parts::Encoded(&one), claim).unwrap();
        assert_eq!(
            (looked[3].as_slice(), looked[7].as_slice()),
            (&b"p"[..], &b"2000"[..])
        );
    }

    /// The bytes `Lua::packed` writes are the `EVALSHA` redis-rs packs
    /// (the pipelines' and the cluster's way), for every kind of argument.
    #[test]
    fn packed_is_the_evalsha_redis_rs_packs() {
        let big = vec![b'x'; 100_000];
        type Case<'a> = (&'a [&'a [u8]], &'a [&'a [u8]]);
        let cases: [Case; 4] = [
            (&[], &[]),
            (&[b""], &[b""]),
            (&[b"{k}\0\xff\r\n"], &[b"$3\r\n*", &big]),
            (&[b"a", b"b", b"c"], &[b"1", b"22", b"333", b"popped"]),
        ];
        for (keys, args) in cases {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(LOCK_RELEASE.script.get_hash())
                .arg(keys.len())
                .arg(keys)
                .arg(args);
            assert_eq!(LOCK_RELEASE.packed(keys, args), cmd.get_packed_command());
            let encoded: Args = args.iter().collect();
            assert_eq!(
                LOCK_RELEASE.packed(keys, &encoded),
                cmd.get_packed_command()
            );
            let (x, y) = args.split_at(args.len() / 2);
            let (x, y): (Args, Args) = (x.iter().collect(), y.iter().collect());
            let runs = [&x, &y];
            assert_eq!(Parts::Runs(&runs).iter().collect::<Vec<_>>(), args);
            assert_eq!(Parts::Runs(&runs).len(), args.len());
            assert_eq!(
                LOCK_RELEASE.packed(keys, Parts::Runs(&runs)),
                cmd.get_packed_command()
            );
        }
    }

    /// An `Args` reads back what was put in, in order, and an argument
    /// replaced in place (longer, shorter, empty) leaves the others whole.
    #[test]
    fn args_read_back_and_replace_in_place() {
        let big = vec![b'y'; 1000];
        let mut a = Args::new();
        a.push(b"token");
        a.push(b"");
        a.push(b"$3\r\n*");
        a.push_millis(std::time::Duration::from_millis(1500));
        a.push_number(u64::MAX);
        a.push_word(true, "queued");
        a.push_word(false, "leave");
        let want: [&[u8]; 7] = [
            b"token",
            b"",
            b"$3\r\n*",
            b"1500",
            b"18446744073709551615",
            b"queued",
            b"",
        ];
        assert_eq!(a.len(), 7);
        assert_eq!(a.iter().collect::<Vec<_>>(), want);
        assert_eq!(a.iter().len(), 7);
        assert_eq!(a.get(2), Some(&b"$3\r\n*"[..]));
        assert_eq!(a.get(7), None);
        let mut b = a.clone();
        b.set(1, &big);
        b.set(0, b"t");
        b.set_last(b"12");
        b.set(9, b"nothing");
        let got: Vec<&[u8]> = b.iter().collect();
        assert_eq!(
            got,
            [
                &b"t"[..],
                &big,
                b"$3\r\n*",
                b"1500",
                b"18446744073709551615",
                b"queued",
                b"12"
            ]
        );
        b.set(1, b"");
        assert_eq!(b.get(1), Some(&b""[..]));
        assert_eq!(b.get(2), Some(&b"$3\r\n*"[..]));
        assert_eq!(b.len(), 7);
        let empty = Args::new();
        assert_eq!(empty.iter().next(), None);
        let mut e = empty.clone();
        e.set_last(b"x");
        assert_eq!(e, empty);
    }

    /// `sent_code` knows every script in `lua/` (the preludes aside).
    #[test]
    fn every_script_is_listed() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
        for entry in std::fs::read_dir(dir).unwrap() {
            let file = entry.unwrap().file_name().into_string().unwrap();
            let prelude = PRELUDES.iter().any(|(n, _)| *n == file);
            assert!(prelude || sent_code(&file).is_some(), "{file}");
        }
    }

    /// Every file in `lua/`, with its text.
    fn lua_files() -> Vec<(std::path::PathBuf, String)> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
        let files = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path());
        files
            .map(|path| (path.clone(), std::fs::read_to_string(&path).unwrap()))
            .collect()
    }

    #[test]
    fn every_prelude_a_script_uses_exists() {
        for (path, body) in lua_files() {
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
        assert!(LOCK_WATCH.code.starts_with(&compact(PRELUDES[0].1)));
        // Behind the split, the rest of its body, as written.
        let body = include_str!("../../../lua/lock_watch.lua");
        let (_, rest) = body.split_once(&format!("\n{REST_OF_PRELUDES}\n")).unwrap();
        assert!(LOCK_WATCH.code.ends_with(&compact(rest)));
        assert_eq!(
            LATCH_SET.code,
            compact(include_str!("../../../lua/latch_set.lua"))
        );
    }

    /// A script defines of its preludes what it calls, directly or through
    /// another definition, and nothing else.
    #[test]
    fn a_script_carries_only_the_prelude_code_it_calls() {
        let release = LOCK_RELEASE.code;
        // queue_head and its clock: a hand-over whose head keeps its turn
        // (lua/queue.lua offer, only when a fair waiter waits for
        // messages).
        for called in [
            "hand_on",
            "next_fence",
            "floor_value",
            "as_fence",
            "now_us",
            "queue_head",
            "now_ms",
        ] {
            assert!(
                release.contains(&format!("local function {called}(")),
                "{called}"
            );
        }
        assert!(release.contains("local fence_floor = "));
        for unused in ["queue_join", "queue_take_open", "raise_floor"] {
            assert!(
                !release.contains(&format!("local function {unused}(")),
                "{unused}"
            );
        }
        assert!(LOCK_ACQUIRE.code.contains("local function queue_join("));
        assert!(mentions("a(x_y, b)", "x_y") && !mentions("a(x_yz)", "x_y"));
    }

    /// A body split by [`REST_OF_PRELUDES`]: the part in front returns
    /// before the definitions only the rest calls are made. Those are made
    /// after its locals, so they would see a local of it named as a
    /// definition, or as a global they use (`type`, `error`, `string`...),
    /// instead of what they mean: it declares none. (Found by review: a
    /// `local type` in front broke a hand-over's naming of watchers.)
    #[test]
    fn a_usual_run_makes_only_the_definitions_it_calls() {
        // A script, the line of its usual case, what is defined in front
        // of it and what only after.
        type Side<'a> = (&'a Lazy<Lua>, &'a str, &'a [&'a str], &'a [&'a str]);
        let sides: [Side; 9] = [
            (
                &LOCK_ACQUIRE,
                "if not busy then",
                &["next_fence", "took_from_open", "now_us"],
                &[
                    "queue_join",
                    "queue_take_open",
                    "hand_on",
                    "announce",
                    "now_ms",
                ],
            ),
            (
                &LOCK_RELEASE,
                "if #KEYS == 5 and ARGV[9] ~= 'leave' then",
                &["held_by", "announce", "publish"],
                &["hand_on", "queue_leave", "offer", "next_fence", "now_us"],
            ),
            // Its hand-over, in a part of its own: release() and what only
            // it calls come after.
            (
                &LOCK_RELEASE,
                "if front_len then",
                &["hand_on", "offer", "next_fence", "now_us"],
                &["queue_leave", "release"],
            ),
            (
                &RW_READ_RELEASE,
                "if redis.call('EXISTS', KEYS[4]) == 0 then",
                &["now_ms"],
                &["rw_open", "hand_on", "publish"],
            ),
            (
                &RW_WRITE_RELEASE,
                "if ARGV[6] ~= 'leave' then",
                &["now_ms", "held_by", "publish"],
                &["rw_open", "hand_on", "queue_leave", "next_fence"],
            ),
            (
                &SEM_RELEASE,
                "if ARGV[8] ~= 'leave'",
                &["now_ms"],
                &["sem_offer", "sem_leave", "sem_pass", "publish"],
            ),
            // A waiter's look at a name held (or a key nobody's).
            (
                &LOCK_WATCH,
                "if pttl == 0 then",
                &["queue_join", "now_ms"],
                &["hand_on", "queue_untaken", "announce", "next_fence"],
            ),
            (
                &RW_WATCH,
                "if found == 1 then",
                &["rw_alive", "now_ms"],
                &["rw_open", "rw_stale", "queue_join", "hand_on", "publish"],
            ),
            (
                &SEM_WATCH,
                "if soonest and used >= tonumber(ARGV[7]) then",
                &["now_ms"],
                &["sem_purge", "sem_join", "sem_offer", "publish"],
            ),
        ];
        for (script, fast, early, late) in sides {
            let code = script.code;
            let fast = code.find(fast).unwrap();
            for early in early {
                let at = code.find(&format!("local function {early}(")).unwrap();
                assert!(at < fast, "{early}");
            }
            for late in late {
                let at = code.find(&format!("local function {late}(")).unwrap();
                assert!(at > fast, "{late}");
            }
        }
        for (path, body) in lua_files() {
            // Every part but the last has definitions made after it.
            let Some((first, _)) = body.rsplit_once(&format!("\n{REST_OF_PRELUDES}\n")) else {
                continue;
            };
            let defs: Vec<(&str, String)> = uses(&body)
                .filter_map(|name| PRELUDES.iter().find(|(n, _)| *n == name))
                .flat_map(|(_, text)| definitions(text))
                .collect();
            // Lua 5.1's and Redis's globals a definition may use.
            const GLOBALS: [&str; 26] = [
                "redis",
                "KEYS",
                "ARGV",
                "string",
                "table",
                "math",
                "tonumber",
                "tostring",
                "type",
                "error",
                "pcall",
                "xpcall",
                "ipairs",
                "pairs",
                "unpack",
                "select",
                "next",
                "assert",
                "rawget",
                "rawset",
                "setmetatable",
                "getmetatable",
                "cjson",
                "cmsgpack",
                "bit",
                "struct",
            ];
            let names = defs.iter().map(|(n, _)| *n).chain(GLOBALS);
            let first = compact(first);
            for name in names {
                for line in first.lines().filter(|l| l.starts_with("local ")) {
                    let declared = line.split('=').next().unwrap_or(line);
                    assert!(
                        !mentions(declared, name),
                        "{}: `{line}` declares {name}, which a definition made after it may use",
                        path.display()
                    );
                }
            }
        }
    }

    /// What `definitions` relies on.
    #[test]
    fn a_preludes_top_level_holds_only_definitions() {
        for (name, text) in PRELUDES {
            for line in text.lines() {
                let top = !line.starts_with([' ', '\t']);
                assert!(
                    !top || line.is_empty()
                        || line.starts_with("--")
                        || line.starts_with("local ")
                        || line == "end",
                    "{name}: {line}"
                );
            }
        }
    }

    #[test]
    fn compacting_drops_comments_but_never_a_string() {
        let code = "  -- a line\nx = 1 -- why\ny = 'a -- b' -- kept\n\nz = x - -y\n";
        assert_eq!(compact(code), "x = 1\ny = 'a -- b' -- kept\nz = x - -y\n");
    }

    #[test]
    fn no_script_has_a_long_string_or_block_comment() {
        for (path, body) in lua_files() {
            assert!(!body.contains("[["), "{}: `[[`", path.display());
            assert!(!body.contains("[="), "{}: `[=`", path.display());
        }
    }

    /// A multi-lock of three names writes three grants, then the release
    /// script and three calls of it as the undo: all of it must fit one
    /// 16 KiB read of Redis 6.2 (see the module's docs). Counted as sent
    /// (each grant an `EVALSHA`, the release loaded by `SCRIPT LOAD` in
    /// front of its calls), with keys and arguments of 40 bytes (a name of
    /// 20 or so, a token, a channel), and 2 KiB of the read left over for
    /// longer ones. Past it, a late grant is not undone on a stalled 6.2
    /// server: it stays until its lease lapses, as before the undo.
    #[test]
    fn a_late_grant_and_its_undo_fit_one_read_of_the_server() {
        let keys: Vec<Vec<u8>> = (0..5).map(|_| vec![b'k'; 40]).collect();
        let args: Vec<Vec<u8>> = (0..10).map(|_| vec![b'a'; 40]).collect();
        for lua in [
            &*LOCK_RELEASE,
            &*RW_WRITE_RELEASE,
            &*RW_READ_RELEASE,
            &*SEM_RELEASE,
        ] {
            let mut sent = Vec::new();
            for _ in 0..3 {
                LOCK_ACQUIRE.pack_into(&mut sent, keys[..].into(), args[..].into());
            }
            sent.extend(
                redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(lua.code)
                    .get_packed_command(),
            );
            for _ in 0..3 {
                lua.pack_into(&mut sent, keys[..].into(), args[..].into());
            }
            assert!(sent.len() < 14 * 1024, "{} bytes", sent.len());
        }
    }
}
