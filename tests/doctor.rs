//! `redlease doctor` and `Client::capabilities`: what a deployment can do,
//! said before the first wait finds out. Every case against a real server:
//! a plain one, ACL users narrower than the README's line, a wrong
//! password, a closed port, a paused server, Redlock and Cluster.

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{set_acl_user, Server, README_ACL};
use redis_test::cluster::{RedisCluster, RedisClusterConfiguration};
use redlease::{CheckStatus, Client, WakeChannel};

fn doctor(urls: &str, extra: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_redlease"))
        .env_remove("REDIS_URL")
        .env_remove("REDLEASE_PREFIX")
        .arg("--url")
        .arg(urls)
        .args(extra)
        .arg("doctor")
        .output()
        .expect("redlease runs");
    (out, t.elapsed())
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The line of `check` (its name's start), as printed.
fn line<'a>(out: &'a str, check: &str) -> &'a str {
    out.lines()
        .find(|l| {
            l.split_once(' ')
                .map(|x| x.1.trim_start())
                .is_some_and(|r| r.starts_with(check))
        })
        .unwrap_or_else(|| panic!("no {check:?} line in:\n{out}"))
}

#[test]
fn a_plain_server_is_ok_and_the_doctor_leaves_nothing_behind() {
    let server = Server::start();
    let mut con = server.con();
    // Another application's state, which the doctor must not touch.
    let _: () = redis::cmd("SET")
        .arg("other:key")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 'theirs'")
        .query(&mut con)
        .unwrap();
    let (out, _) = doctor(&server.url(), &["--prefix", "myapp:"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    for check in [
        "server",
        "round trip",
        "clock",
        "eviction",
        "scripts",
        "pub/sub",
        "replicas",
        "lock",
        "read-write lock",
        "semaphore",
        "latch",
        "blocking grants",
        "clean-up",
    ] {
        assert!(line(&t, check).starts_with("ok "), "{check}: {t}");
    }
    let (name, v) = common::server_version();
    assert!(
        line(&t, "server").contains(&format!("{name} {}.{}", v.0, v.1)),
        "{t}"
    );
    // Nothing left: the other key alone (and the fence floor, which the
    // application's first lock creates anyway), and the other script
    // still there.
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "myapp:redlease:fence-floor".to_string(),
            "other:key".to_string()
        ]
    );
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, vec![true]);
}

#[test]
fn json_output_has_every_check() {
    let server = Server::start();
    let out = Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args(["--url", &server.url(), "doctor", "--json"])
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let v: serde_json::Value = serde_json::from_str(t.trim()).expect("one JSON document");
    assert_eq!(v["status"], "ok");
    let checks = v["checks"].as_array().unwrap();
    assert!(checks.len() >= 12, "{t}");
    for c in checks {
        assert_eq!(c["status"], "ok", "{c}");
        assert!(c["name"].is_string() && c["detail"].is_string());
    }
}

#[test]
fn an_acl_without_blocking_pops_is_degraded_and_says_what_to_allow() {
    if !common::needs_version(
        "an_acl_without_blocking_pops_is_degraded_and_says_what_to_allow",
        6,
        2,
        "the README's ACL line (BLMOVE)",
    ) {
        return;
    }
    let server = Server::start();
    let rules = README_ACL
        .replace("+blpop", "")
        .replace("+blmove", "")
        .replace("+lpop", "");
    set_acl_user(&mut server.con(), "app", &rules);
    let url = format!("redis://app:s3cret@127.0.0.1:{}/", server.port());
    let (out, _) = doctor(&url, &["--prefix", "myapp:"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    let l = line(&t, "blocking grants");
    assert!(l.starts_with("degraded") && l.contains("+blmove"), "{l}");
    assert!(line(&t, "lock").starts_with("ok "), "{t}");
    // The README's own line is fully ok.
    set_acl_user(&mut server.con(), "full", README_ACL);
    let url = format!("redis://full:s3cret@127.0.0.1:{}/", server.port());
    let (out, _) = doctor(&url, &["--prefix", "myapp:"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn an_acl_without_scripts_is_refused_and_names_the_permission() {
    let server = Server::start();
    set_acl_user(
        &mut server.con(),
        "weak",
        "on >s3cret ~* &* -@all +ping +get +set",
    );
    let url = format!("redis://weak:s3cret@127.0.0.1:{}/", server.port());
    let (out, _) = doctor(&url, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(69), "{t}");
    let l = line(&t, "scripts");
    assert!(l.starts_with("refused") && l.contains("+evalsha"), "{l}");
    let l = line(&t, "lock");
    assert!(l.starts_with("refused") && l.contains("ACL"), "{l}");
    assert!(
        !l.contains("password"),
        "a refused right is not a wrong password: {l}"
    );
    assert!(t.lines().last().unwrap().starts_with("refused"), "{t}");
}

#[test]
fn unreachable_servers_get_one_clear_line_in_bounded_time() {
    let mut server = Server::start_with(&["--requirepass", "s3cret"]);
    let port = server.port();
    // A wrong password.
    let (out, _) = doctor(&format!("redis://:nope@127.0.0.1:{port}/"), &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(69), "{t}");
    assert!(line(&t, "connect").contains("password"), "{t}");
    // TLS spoken to a plain port.
    let (out, took) = doctor(&format!("rediss://127.0.0.1:{port}/"), &[]);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
    assert!(took < Duration::from_secs(20), "{took:?}");
    // A server that does not answer (paused): bounded by the timeouts.
    server.pause();
    let (out, took) = doctor(&format!("redis://:s3cret@127.0.0.1:{port}/"), &[]);
    server.resume();
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
    assert!(took < Duration::from_secs(20), "{took:?}");
    // Nobody listening.
    server.stop();
    let (out, took) = doctor(&format!("redis://127.0.0.1:{port}/"), &["-v"]);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
    assert!(line(&text(&out), "connect").contains("refused"));
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn redlock_reports_each_master_and_the_clock_spread() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let (out, _) = doctor(&urls.join(","), &["--redlock"]);
    let t = text(&out);
    // No blocking grants on Redlock, by design: said, and not a fault.
    assert_eq!(out.status.code(), Some(0), "{t}");
    for s in &servers {
        assert!(t.contains(&format!("clock 127.0.0.1:{}", s.port())), "{t}");
    }
    assert!(line(&t, "clock spread").starts_with("ok "), "{t}");
    assert!(line(&t, "blocking grants").starts_with("ok "), "{t}");
    assert!(line(&t, "lock").starts_with("ok "), "{t}");
    // One master of three down: the majority still serves; degraded, not
    // refused (the review saw 69).
    let mut servers = servers;
    servers[2].stop();
    let (out, _) = doctor(&urls.join(","), &["--redlock"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(line(&t, "lock").starts_with("ok "), "{t}");
}

/// A prefix with glob characters: the clean-up's pattern matches it
/// literally. Unescaped, `x[` swallowed the rest of the pattern into a
/// character class and deleted every key `x` and one character (found by
/// an adversarial review: 6 foreign keys deleted).
#[test]
fn the_clean_up_never_touches_keys_outside_its_scratch_name() {
    let server = Server::start();
    let mut con = server.con();
    let foreign = ["xa", "x0", "xr", "xd", "x*", "a", "[", "x[a"];
    for k in foreign {
        let _: () = redis::cmd("SET")
            .arg(k)
            .arg("foreign")
            .query(&mut con)
            .unwrap();
    }
    for prefix in ["x[", "[", "x[^", "x*", "x?", "x\\"] {
        let (out, _) = doctor(&server.url(), &["--prefix", prefix]);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(0), "prefix {prefix:?}: {t}");
        for k in foreign {
            let v: Option<String> = redis::cmd("GET").arg(k).query(&mut con).unwrap();
            assert_eq!(
                v.as_deref(),
                Some("foreign"),
                "prefix {prefix:?} deleted {k:?}"
            );
        }
        let scratch: Vec<String> = redis::cmd("KEYS")
            .arg("*redlease-doctor-*")
            .query(&mut con)
            .unwrap();
        assert!(scratch.is_empty(), "prefix {prefix:?} left {scratch:?}");
    }
}

#[test]
fn capabilities_say_which_way_waiters_wait() {
    let server = Server::start();
    let c = common::client(&server);
    let caps = c.capabilities();
    assert_eq!(caps.topology, "single server");
    assert!(caps.blocking_grants);
    assert_eq!(caps.wake_channel, WakeChannel::Classic);
    assert_eq!(caps.replica_ack, None);
    let (name, v) = common::server_version();
    assert_eq!(
        caps.servers,
        vec![format!("{name} {}.{}.{}", v.0, v.1, v.2)]
    );
    assert!(caps.to_string().contains("direct grants"), "{caps}");

    let report = c.diagnose();
    assert_eq!(report.status(), CheckStatus::Ok, "{:#?}", report.checks);

    // An ACL without LPOP: the first wait that needs it finds out.
    let rules = README_ACL.replace("+lpop", "");
    set_acl_user(&mut server.con(), "app", &rules);
    let narrow = Client::builder()
        .url(format!("redis://app:s3cret@127.0.0.1:{}/", server.port()))
        .key_prefix("myapp:")
        .build()
        .unwrap();
    assert!(
        narrow.capabilities().blocking_grants,
        "not known before a wait"
    );
    let g = narrow.lock("x").acquire().unwrap();
    let other = narrow.clone();
    let waiter = std::thread::spawn(move || {
        other
            .lock("x")
            .acquire_timeout(Duration::from_secs(10))
            .map(|g| g.is_some())
    });
    std::thread::sleep(Duration::from_millis(200));
    drop(g);
    // A lock's hand-over needs no LPOP: its waiter's pop alone takes it.
    assert!(waiter.join().unwrap().unwrap());
    assert!(narrow.capabilities().blocking_grants);
    // A semaphore's does: the hand-over pops, LPOP is refused, the waiter
    // still gets its permit (through messages), and the client says it now
    // waits that way.
    let p = narrow.semaphore("s", 1).acquire().unwrap();
    let other = narrow.clone();
    let waiter = std::thread::spawn(move || {
        other
            .semaphore("s", 1)
            .acquire_timeout(Duration::from_secs(10))
            .map(|p| p.is_some())
    });
    std::thread::sleep(Duration::from_millis(200));
    drop(p);
    assert!(waiter.join().unwrap().unwrap());
    assert!(!narrow.capabilities().blocking_grants);
}

#[test]
fn a_cluster_reports_every_master_and_its_sharded_channel() {
    let mut cluster = RedisCluster::new(RedisClusterConfiguration::default());
    let urls = common::cluster_urls(&cluster);
    let c = Client::builder().cluster(urls.clone()).build().unwrap();
    let caps = c.capabilities();
    assert_eq!(caps.topology, "Cluster");
    // Sharded from Redis 7.0 (and on Valkey); classic before, and said so.
    let sharded = common::has_sharded_pubsub();
    assert_eq!(
        caps.wake_channel,
        if sharded {
            WakeChannel::Sharded
        } else {
            WakeChannel::Classic
        }
    );
    let (out, _) = doctor(&urls.join(","), &["--cluster"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert_eq!(
        t.lines().filter(|l| l.contains(" scripts ")).count(),
        3,
        "{t}"
    );
    let l = line(&t, "sharded pub/sub");
    assert!(
        l.contains(if sharded { "shard alone" } else { "classic" }),
        "{l}"
    );
    cluster.stop();
}
