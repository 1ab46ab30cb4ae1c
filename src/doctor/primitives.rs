//! The checks of every primitive on a scratch name (as the application's
//! ACL meets them), whether waiters can block for direct grants, and the
//! scratch name's clean-up.

use std::time::{Duration, Instant};

use super::{CheckStatus, Diagnosis, BLOCKING_REFUSED};
use crate::{Client, ErrorKind};

/// Every primitive once on the scratch name, as the application would use
/// it: the ACL's key and command rules are met exactly where they matter.
pub(super) fn check_primitives(client: &Client, scratch: &str, d: &mut Diagnosis) {
    let redlock = client.backend().is_redlock();
    let mut outcome = |what: &str, r: crate::Result<()>| match r {
        Ok(()) => d.push(
            what.into(),
            CheckStatus::Ok,
            // A latch is not acquired: it is counted down and waited for.
            if what == "latch" {
                "counted down, and the wait for it returned".into()
            } else {
                "acquired and released".into()
            },
            None,
        ),
        Err(e) => {
            let text = e.to_string();
            let acl = e.kind() == ErrorKind::Auth
                || [
                    "NOPERM",
                    "NoPerm",
                    "no permissions",
                    "can't run this command",
                ]
                .iter()
                .any(|p| text.contains(p));
            d.push(
                what.into(),
                CheckStatus::Refused,
                e.to_string(),
                Some(if acl {
                    "the ACL refuses a command or key the library needs: use the README's ACL line \
                     for this prefix"
                } else {
                    "see the error; `redlease -v doctor` logs more"
                }),
            );
        }
    };
    let short = Duration::from_secs(5);
    outcome(
        "lock",
        (|| {
            let g = client
                .lock(format!("{scratch}-lock"))
                .acquire_timeout(short)?
                .ok_or_else(|| {
                    crate::Error::new(
                        ErrorKind::Server,
                        "a free scratch lock was not granted in 5 s",
                    )
                })?;
            g.release()
        })(),
    );
    if redlock {
        d.push(
            "read-write lock, semaphore, latch".into(),
            CheckStatus::Ok,
            "not checked: on Redlock only the exclusive lock is offered".into(),
            None,
        );
    } else {
        outcome(
            "read-write lock",
            (|| {
                let rw = client.rw_lock(format!("{scratch}-rw"));
                rw.read_timeout(short)?.map(|g| g.release()).transpose()?;
                rw.write_timeout(short)?.map(|g| g.release()).transpose()?;
                Ok(())
            })(),
        );
        outcome(
            "semaphore",
            (|| {
                let s = client.semaphore(format!("{scratch}-sem"), 2);
                s.acquire_timeout(short)?.map(|p| p.release()).transpose()?;
                s.force_release_all().map(|_| ())
            })(),
        );
        outcome(
            "latch",
            (|| {
                let l = client.count_down_latch(format!("{scratch}-latch"));
                l.try_set_count(1)?;
                l.count_down()?;
                l.wait_timeout(short).map(|_| ())
            })(),
        );
    }
    check_blocking(client, scratch, d);
}

/// A waiter on the scratch lock, held meanwhile: where grants go direct,
/// its wait blocks on the server (`BLMOVE`), and a refusal turns them off
/// for the client, which is what is reported.
fn check_blocking(client: &Client, scratch: &str, d: &mut Diagnosis) {
    let backend = client.backend();
    let name = format!("{scratch}-wait");
    if backend.is_redlock() || backend.replica_ack().is_some() {
        d.push(
            "blocking grants".into(),
            CheckStatus::Ok,
            "not used here by design: lock waiters wait for release messages (Redlock and \
             replica_ack cannot grant through a blocking pop)"
                .into(),
            None,
        );
        return;
    }
    if !backend.grants_directly() {
        d.push(
            "blocking grants".into(),
            CheckStatus::Degraded,
            "off: the server refused a blocking pop earlier".into(),
            Some(BLOCKING_REFUSED),
        );
        return;
    }
    let held = match client.lock(&name).try_acquire() {
        Ok(Some(g)) => g,
        other => {
            d.push(
                "blocking grants".into(),
                CheckStatus::Refused,
                match other {
                    Err(e) => format!("not checked: its scratch lock was refused: {e}"),
                    _ => "not checked: its scratch lock was not free".into(),
                },
                Some("see the error; `redlease -v doctor` logs more"),
            );
            return;
        }
    };
    let waiter = client.clone();
    let wait_name = name.clone();
    // Long enough to block (a wait under a second waits for the release
    // message instead: `worth_blocking`); the release below hands the lock
    // over once the waiter has queued and had time to block (or to be
    // refused), so the check takes about that long, not the whole wait. A
    // release before the waiter's first attempt would let it take the
    // free lock without ever blocking, and prove nothing.
    let waiting = std::thread::spawn(move || {
        waiter
            .lock(&wait_name)
            .acquire_timeout(Duration::from_millis(2_500))
            .map(|g| g.map(|g| g.release()))
    });
    if let Ok(names) = client.names(name.as_bytes()) {
        let queue = names.key(crate::protocol::keys::QUEUE);
        let by = Instant::now() + Duration::from_secs(1);
        while Instant::now() < by && !backend.exists(&queue).unwrap_or(true) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let _ = held.release();
    let waited = waiting.join();
    match (waited, backend.grants_directly()) {
        (Ok(Ok(_)), true) => d.push(
            "blocking grants".into(),
            CheckStatus::Ok,
            "a waiter blocked on the server (BLMOVE) and was refused nothing".into(),
            None,
        ),
        (_, false) => d.push(
            "blocking grants".into(),
            CheckStatus::Degraded,
            "the server refused the blocking pop (BLMOVE or LPOP)".into(),
            Some(BLOCKING_REFUSED),
        ),
        (Ok(Err(e)), true) => d.push(
            "blocking grants".into(),
            CheckStatus::Refused,
            e.to_string(),
            Some("see the error; `redlease -v doctor` logs more"),
        ),
        (Err(_), true) => d.push(
            "blocking grants".into(),
            CheckStatus::Refused,
            "the waiting thread panicked".into(),
            Some("a bug in redlease: please report it"),
        ),
    }
}

/// `text` with glob's special characters escaped, for a `SCAN MATCH`
/// pattern that matches it literally.
fn glob_literal(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for &b in text {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

/// How long the clean-up may scan each master.
const CLEAN_UP_FOR: Duration = Duration::from_secs(10);

/// Deletes whatever the checks left under the scratch name on every
/// master (`SCAN`, never `KEYS`), and says so. The pattern is the prefix
/// (escaped: a `[` in it must not widen the match to other keys) and the
/// scratch name's own hash tag. The fence floor is not the checks' to
/// delete: the application's first lock creates it anyway.
pub(super) fn clean_up(client: &Client, scratch: &str, d: &mut Diagnosis) {
    let mut pattern = glob_literal(client.prefix());
    pattern.extend_from_slice(b"{");
    pattern.extend_from_slice(scratch.as_bytes());
    pattern.extend_from_slice(b"*");
    let mut left = 0usize;
    let mut failed: Option<String> = None;
    client.backend().each_master(&mut |node| {
        let mut con = match node.open_spare(node.connect_timeout()) {
            Ok(c) => c,
            Err(e) => {
                failed = Some(format!("{}: {e}", node.addr()));
                return;
            }
        };
        let until = Instant::now() + CLEAN_UP_FOR;
        let mut cursor = 0u64;
        loop {
            if Instant::now() >= until {
                failed = Some(format!(
                    "{}: the keyspace was not scanned to its end within {CLEAN_UP_FOR:?}",
                    node.addr()
                ));
                return;
            }
            let page = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query::<(u64, Vec<Vec<u8>>)>(&mut con);
            let (next, keys) = match page {
                Ok(p) => p,
                Err(e) => {
                    failed = Some(format!("{}: {e}", node.addr()));
                    return;
                }
            };
            // One DEL for the whole page, one round trip: a key at a time,
            // a server slow to delete held the clean-up for minutes (the
            // time was checked only between pages).
            if !keys.is_empty() {
                left += keys.len();
                if let Err(e) = redis::cmd("DEL").arg(&keys).query::<()>(&mut con) {
                    failed = Some(format!("{}: {e}", node.addr()));
                    return;
                }
            }
            cursor = next;
            if cursor == 0 {
                return;
            }
        }
    });
    match failed {
        None => d.push(
            "clean-up".into(),
            CheckStatus::Ok,
            format!("nothing left under {scratch} ({left} key(s) deleted after the checks)"),
            None,
        ),
        Some(e) => d.push(
            "clean-up".into(),
            CheckStatus::Degraded,
            format!("could not make sure nothing is left under {scratch}: {e}"),
            Some("delete the keys whose names contain the scratch name by hand"),
        ),
    }
}
