//! An ACL user restricted to the documented commands, keys and channel.
//! (TLS is in `tls.rs`, behind the `tls-rustls` feature.)

mod common;

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::Server;
use redis::Commands;
use redlease::{Client, ErrorKind};

/// The README's ACL line, for the prefix `myapp:`.
const ACL: &str = common::README_ACL;

#[test]
fn restricted_acl_user_can_use_every_primitive() {
    every_primitive_under(ACL);
}

/// The ACL line from before direct grants (no BLPOP, no RPUSH): waiters
/// fall back to release messages.
#[test]
fn an_acl_without_blocking_commands_still_works() {
    every_primitive_under(&ACL.replace(" +blpop +blmove +lpop +rpush", ""));
}

/// The README's line before locks blocked on a shared open list (BLPOP
/// and RPUSH, no BLMOVE or LPOP): the refused BLMOVE turns the client's
/// waiters to release messages, and every primitive still works.
#[test]
fn the_acl_line_before_blmove_still_works() {
    every_primitive_under(&ACL.replace(" +blmove +lpop", ""));
}

/// Creates the user `app` with `acl` on `server` and returns its URL.
fn restricted_user(server: &Server, acl: &str) -> String {
    common::set_acl_user(&mut server.con(), "app", acl);
    format!("redis://app:s3cret@127.0.0.1:{}/", server.port())
}

/// A client of the restricted user (keys under `myapp:`) whose waiters
/// look for themselves only every `poll`.
fn app_client(url: &str, poll: Duration) -> Client {
    Client::builder()
        .url(url)
        .key_prefix("myapp:")
        .fallback_poll(poll)
        .build()
        .unwrap()
}

/// A thread of `c` waiting up to `limit` for latch `name`: whether it
/// opened, and how long the wait took.
fn wait_on_latch(c: &Client, name: &str, limit: Duration) -> JoinHandle<(bool, Duration)> {
    let (c, name) = (c.clone(), name.to_owned());
    std::thread::spawn(move || {
        let start = Instant::now();
        let opened = c.count_down_latch(&name).wait_timeout(limit).unwrap();
        (opened, start.elapsed())
    })
}

fn every_primitive_under(acl: &str) {
    let server = Server::start();
    let url = restricted_user(&server, acl);
    let c = Client::builder()
        .url(&url)
        .key_prefix("myapp:")
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    let g = c.lock("a").acquire().unwrap();
    assert!(c.lock("a").is_locked().unwrap());
    // Renewal runs under the same restrictions.
    std::thread::sleep(Duration::from_millis(1_000));
    assert!(g.is_held());
    // A waiter in another client is woken through the allowed channel.
    let other = app_client(&url, Duration::from_secs(30));
    let o = other.clone();
    let t = std::thread::spawn(move || {
        o.lock("a")
            .acquire_timeout(Duration::from_secs(10))
            .unwrap()
            .is_some()
    });
    std::thread::sleep(Duration::from_millis(200));
    drop(g);
    assert!(t.join().unwrap());
    assert!(other.wakeups_delivered() >= 1);
    // A latch waiter is woken too.
    assert!(c.count_down_latch("l").try_set_count(1).unwrap());
    let t = wait_on_latch(&other, "l", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    c.count_down_latch("l").count_down().unwrap();
    let (opened, waited) = t.join().unwrap();
    assert!(opened && waited < Duration::from_secs(3), "{waited:?}");
    // The opening leaves nothing once its list lapses (half a second),
    // whether its waiter blocked or waited for the message (an opening
    // list pushed for message waiters lingered).
    let left = common::keys_left(&server, "myapp:*latch*", Duration::from_secs(3));
    assert!(left.is_empty(), "left behind: {left:?}");
    drop(c.fair_lock("f").acquire().unwrap());
    drop(c.rw_lock("rw").write().unwrap());
    drop(c.rw_lock("rw").read().unwrap());
    drop(c.semaphore("s", 2).acquire().unwrap());
    drop(c.fair_semaphore("fs", 1).acquire().unwrap());
    assert!(c.lock("a").force_unlock().is_ok());
    assert!(c.inspect("a").is_ok());
    assert!(c.list("*").is_ok());
    // Outside its prefix the user is refused, with a clear error.
    let outside = Client::builder().url(&url).build().unwrap();
    assert_eq!(
        outside.lock("a").try_acquire().unwrap_err().kind(),
        ErrorKind::Auth
    );
}

/// Redis 7's default `resetchannels`: a user without rights on the wake-up
/// channel. Before, a release ran (the key was deleted) and then failed on
/// its `PUBLISH`, so `release()` returned an error and a caller could redo
/// the work; a release is now `Ok` (the wake-up is lost, and waiters in
/// other clients learn at their next look).
#[test]
fn releases_succeed_without_channel_rights() {
    let server = Server::start();
    let mut con = server.con();
    let url = restricted_user(&server, &ACL.replace(" &myapp:redlease:wake*", ""));
    let c = Client::builder()
        .url(&url)
        .key_prefix("myapp:")
        .build()
        .unwrap();
    // A waiter queued in Redis makes the lock's release publish.
    let waiter = Client::builder()
        .url(&url)
        .key_prefix("myapp:")
        .fallback_poll(Duration::from_millis(200))
        .build()
        .unwrap();
    for fair in [false, true] {
        let lock = |c: &Client| if fair { c.fair_lock("p") } else { c.lock("p") };
        let g = lock(&c).acquire().unwrap();
        let w = waiter.clone();
        let t = std::thread::spawn(move || {
            let l = if fair { w.fair_lock("p") } else { w.lock("p") };
            l.acquire_timeout(Duration::from_secs(10))
                .unwrap()
                .is_some()
        });
        std::thread::sleep(Duration::from_millis(300));
        g.release().unwrap();
        assert!(t.join().unwrap());
    }
    c.semaphore("s", 1).acquire().unwrap().release().unwrap();
    c.rw_lock("rw").read().unwrap().release().unwrap();
    c.rw_lock("rw").write().unwrap().release().unwrap();
    let latch = c.count_down_latch("l");
    assert!(latch.try_set_count(1).unwrap());
    latch.count_down().unwrap();
    assert_eq!(latch.count().unwrap(), 0);
    let keys: Vec<String> = redis::cmd("KEYS").arg("myapp:*").query(&mut con).unwrap();
    assert!(
        keys.iter()
            .all(|k| k.ends_with(":fence") || common::is_fence_floor(k)),
        "{keys:?}"
    );
}

/// Under the ACL line before direct grants, a latch's waiters wait for
/// its message, and a client ignores the messages it published itself:
/// a waiter in the client whose count-down opened the latch is woken by
/// the round that count-down's reply names (`notify_local`), not by a
/// poll (30 s here).
#[test]
fn a_latch_waiter_in_the_client_that_opens_it_is_woken_at_once() {
    let server = Server::start();
    let url = restricted_user(&server, &ACL.replace(" +blpop +blmove +lpop +rpush", ""));
    let c = app_client(&url, Duration::from_secs(30));
    let latch = c.count_down_latch("same");
    assert!(latch.try_set_count(1).unwrap());
    let t = wait_on_latch(&c, "same", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(300));
    let opened_at = Instant::now();
    latch.count_down().unwrap();
    let (opened, waited) = t.join().unwrap();
    assert!(opened);
    assert!(
        waited < Duration::from_secs(10),
        "the waiter was not woken by its own client's count-down ({:?} after it)",
        opened_at.elapsed()
    );
}

/// The README's ACL line is the one these tests run under (bar the
/// password), and it grants every command a script of `lua/` calls: a
/// script's call the line leaves out is `NOPERM` for its users on exactly
/// the path that makes it (`ZRANK`, in a fair semaphore's hand-over, was).
#[test]
fn the_readme_acl_line_grants_every_command_the_scripts_call() {
    let readme = include_str!("../README.md");
    let line = readme
        .lines()
        .find_map(|l| l.trim().strip_prefix("ACL SETUSER app "))
        .expect("no ACL line in the README");
    let without_password = |rules: &str| -> Vec<String> {
        rules
            .split_whitespace()
            .filter(|r| !r.starts_with('>'))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        without_password(line),
        without_password(ACL),
        "tests/common/mod.rs README_ACL is not the README's line"
    );
    let granted: Vec<String> = ACL
        .split_whitespace()
        .filter_map(|r| r.strip_prefix('+'))
        .map(str::to_ascii_uppercase)
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/lua")).unwrap() {
        let path = entry.unwrap().path();
        let lua = std::fs::read_to_string(&path).unwrap();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        for (call, rest) in lua
            .split("redis.call('")
            .skip(1)
            .map(|r| ("call", r))
            .chain(lua.split("redis.pcall('").skip(1).map(|r| ("pcall", r)))
        {
            let command = rest.split('\'').next().unwrap().to_ascii_uppercase();
            // `inspect.lua` reads a list's head with `pcall` and goes on
            // without it: the line need not grant it.
            if call == "pcall" && command == "LINDEX" {
                continue;
            }
            if !granted.contains(&command) {
                missing.push(format!("{file}: {command}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not granted by the README's ACL line: {missing:?}"
    );
}

/// A fair semaphore's hand-overs under the README's ACL line, on the two
/// paths that called `ZRANK` (which the line does not grant: `NOPERM`):
/// the look of a waiter second in line behind one whose request does not
/// fit yet (`sem_watch.lua`), and an offer passed along a queue whose
/// first member is alive but not blocked (`sem_acquire.lua`).
#[test]
fn a_fair_semaphore_hands_over_under_the_readme_acl() {
    let server = Server::start();
    let url = restricted_user(&server, ACL);
    // Second in line: one of three permits held, the first in line waits
    // for three, and the look of the one behind it (the renewal thread's,
    // made as the restricted user) says when the first one's place would
    // lapse. A refused look goes unseen by the waiter (the next one, or a
    // release, does its work), so it is made here.
    let (q, qt) = ("myapp:{fs}:sem:queue", "myapp:{fs}:sem:queue:t");
    let mut con = server.con();
    let later = common::server_ms(&mut con) + 60_000;
    let _: () = con.zadd("myapp:{fs}:sem", "1:rl:holder", later).unwrap();
    common::plant_live_waiter(&mut con, Some(q), qt, "3:rl:big");
    common::plant_live_waiter(&mut con, None, qt, "1:rl:small");
    let _: () = con.zadd(q, "1:rl:small", 2).unwrap();
    let _: () = con
        .set_ex("myapp:{fs}:sem:grant:head", "3:rl:big", 30)
        .unwrap();
    let mut app = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let next: Result<i64, _> = redis::cmd("EVAL")
        .arg(common::lua_source("sem_watch.lua"))
        .arg(4)
        .arg(&["myapp:{fs}:sem", "myapp:{fs}:sem:n", q, qt])
        .arg(&["1:rl:small", "30000", "myapp:{fs}:sem:grant:", "1000"])
        .arg(&["myapp:redlease:wake:{fs}", "fs", "3", "1"])
        .query(&mut app);
    let next = next.map_err(|e| e.to_string());
    assert!(
        next.as_ref().is_ok_and(|ms| (29_000..=30_050).contains(ms)),
        "the look second in line: {next:?}"
    );
    // Passed along: a member first in line, alive but not blocked, and
    // one blocked behind it that the offer reaches.
    let c = app_client(&url, Duration::from_secs(30));
    let held = c.fair_semaphore("fs1", 1).acquire().unwrap();
    common::plant_live_waiter(
        &mut con,
        Some("myapp:{fs1}:sem:queue"),
        "myapp:{fs1}:sem:queue:t",
        "1:rl:quiet",
    );
    let behind = {
        let c = app_client(&url, Duration::from_secs(30));
        std::thread::spawn(move || {
            let got = c
                .fair_semaphore("fs1", 1)
                .acquire_timeout(Duration::from_secs(10));
            got.map(|p| p.is_some()).map_err(|e| e.to_string())
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    // And one behind it, alive too: only those ahead lose their place.
    let (q1, qt1) = ("myapp:{fs1}:sem:queue", "myapp:{fs1}:sem:queue:t");
    common::plant_live_waiter(&mut con, None, qt1, "1:rl:after");
    let _: () = con.zadd(q1, "1:rl:after", 100).unwrap();
    drop(held);
    assert_eq!(behind.join().unwrap(), Ok(true));
    assert_eq!(refused_in_scripts(&server), Vec::<String>::new());
    let quiet: Option<f64> = con.zscore(q1, "1:rl:quiet").unwrap();
    let after: Option<f64> = con.zscore(q1, "1:rl:after").unwrap();
    assert_eq!((quiet, after), (None, Some(100.0)), "(ahead, behind)");
}

/// The commands `ACL LOG` says a script was refused (the client's own
/// probes, such as `CONFIG GET`, are refused outside scripts, and
/// handled).
fn refused_in_scripts(server: &Server) -> Vec<String> {
    let log: Vec<Vec<redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut server.con())
        .unwrap();
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    };
    log.iter()
        .filter_map(|entry| {
            let field = |name: &str| {
                entry
                    .chunks(2)
                    .find(|kv| text(&kv[0]) == name)
                    .map(|kv| text(&kv[1]))
            };
            (field("context").as_deref() == Some("lua"))
                .then(|| field("object").unwrap_or_default())
        })
        .collect()
}
