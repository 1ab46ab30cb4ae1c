//! Self-test of the fault-injecting proxy in `tests/common/proxy.rs`, with
//! plain `redis` connections through it to a real `redis-server`, and a
//! direct connection to check what the server really executed.

mod common;

use std::time::{Duration, Instant};

use common::proxy::{Fault, Proxy};
use common::{eventually, Server};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A plain connection through the proxy, with the given read timeout.
fn con_with(proxy: &Proxy, read_timeout: Duration) -> redis::Connection {
    let con = redis::Client::open(proxy.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    con.set_read_timeout(Some(read_timeout)).unwrap();
    con
}

fn con(proxy: &Proxy) -> redis::Connection {
    con_with(proxy, ms(300))
}

fn is_timeout(e: &redis::RedisError) -> bool {
    e.is_timeout()
}

/// A dropped connection as redis-rs reports it: EOF / reset, or some other I/O error.
fn is_dropped(e: &redis::RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error()
}

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

#[test]
fn passthrough() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let mut c = con(&proxy);

    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    assert_eq!(get(&mut c, "k").as_deref(), Some("v"));
    assert_eq!(get(&mut server.con(), "k").as_deref(), Some("v"));

    let (ok, n, g): (String, i64, i64) = redis::pipe()
        .cmd("SET")
        .arg("p")
        .arg(1)
        .cmd("INCRBY")
        .arg("p")
        .arg(2)
        .cmd("GET")
        .arg("p")
        .query(&mut c)
        .unwrap();
    assert_eq!((ok.as_str(), n, g), ("OK", 3, 3));

    // 100 KB value: split across many reads in both directions.
    let big: Vec<u8> = (0..100 * 1024).map(|i| (i % 251) as u8).collect();
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .query(&mut c)
        .unwrap();
    let back: Vec<u8> = redis::cmd("GET").arg("big").query(&mut c).unwrap();
    assert_eq!(back, big);

    // Nested and null replies.
    let _: () = redis::cmd("RPUSH")
        .arg("l")
        .arg("a")
        .arg("b")
        .query(&mut c)
        .unwrap();
    let v: redis::Value = redis::cmd("EVAL")
        .arg("return {1, {'x', redis.call('LRANGE', KEYS[1], 0, -1)}, false}")
        .arg(1)
        .arg("l")
        .query(&mut c)
        .unwrap();
    use redis::Value::{Array, BulkString, Int, Nil};
    let bulk = |s: &str| BulkString(s.as_bytes().to_vec());
    let want = Array(vec![
        Int(1),
        Array(vec![bulk("x"), Array(vec![bulk("a"), bulk("b")])]),
        Nil,
    ]);
    assert_eq!(v, want);
    let none: Option<String> = redis::cmd("GET").arg("missing").query(&mut c).unwrap();
    assert_eq!(none, None);

    assert_eq!(proxy.connections(), 1);
    assert_eq!(proxy.fired(), 0);
}

#[test]
fn drop_reply() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let mut c = con(&proxy);
    proxy.arm(b"INCR", Fault::DropReply);

    let e = redis::cmd("INCR")
        .arg("k")
        .query::<i64>(&mut c)
        .unwrap_err();
    assert!(is_timeout(&e), "{e:?}");
    assert_eq!(proxy.fired(), 1);
    // It ran.
    assert_eq!(get(&mut server.con(), "k").as_deref(), Some("1"));
    // The pair stays open.
    assert_eq!(proxy.connections(), 1);

    // What redis-rs (1.x) does next on the same connection: it counts the
    // timed-out reply as late and discards the next reply it reads, which
    // is really the reply to the next command; so that command times out
    // too (and so does every later one). It never returns a wrong value.
    // The command itself does reach the server.
    let r = redis::cmd("INCR").arg("k").query::<i64>(&mut c);
    match &r {
        Ok(n) => assert_eq!(*n, 2, "a late reply was taken for this one"),
        Err(e) => assert!(is_timeout(e), "{e:?}"),
    }
    assert!(
        r.is_err(),
        "redis-rs now handles a dropped reply: update this test and the Fault::DropReply doc"
    );
    assert_eq!(get(&mut server.con(), "k").as_deref(), Some("2"));
    assert_eq!(proxy.fired(), 1);

    // A fresh connection through the proxy is fine.
    let n: i64 = redis::cmd("INCR").arg("k").query(&mut con(&proxy)).unwrap();
    assert_eq!(n, 3);
}

#[test]
fn drop_reply_and_close() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let mut c = con(&proxy);
    proxy.arm(b"executed", Fault::DropReplyAndClose);

    let e = redis::cmd("SET")
        .arg("k")
        .arg("executed")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(is_dropped(&e), "{e:?}");
    assert_eq!(get(&mut server.con(), "k").as_deref(), Some("executed"));
    assert!(eventually(ms(1000), || proxy.connections() == 0));
    assert_eq!(proxy.fired(), 1);

    // In a pipeline, what follows the faulted command is not forwarded.
    let mut c = con(&proxy);
    proxy.arm(b"second", Fault::DropReplyAndClose);
    let e = redis::pipe()
        .cmd("SET")
        .arg("a")
        .arg("first")
        .cmd("SET")
        .arg("b")
        .arg("second")
        .cmd("SET")
        .arg("c")
        .arg("third")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(is_dropped(&e), "{e:?}");
    let mut direct = server.con();
    assert_eq!(get(&mut direct, "a").as_deref(), Some("first"));
    assert_eq!(get(&mut direct, "b").as_deref(), Some("second"));
    assert_eq!(get(&mut direct, "c"), None);
}

#[test]
fn close_before_forward() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let mut c = con(&proxy);
    proxy.arm(b"never", Fault::CloseBeforeForward);

    let t = Instant::now();
    let e = redis::cmd("SET")
        .arg("k")
        .arg("never")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(is_dropped(&e), "{e:?}");
    assert!(
        t.elapsed() < ms(250),
        "closed, not timed out: {:?}",
        t.elapsed()
    );
    assert_eq!(get(&mut server.con(), "k"), None);
    assert_eq!(proxy.fired(), 1);
    assert!(eventually(ms(1000), || proxy.connections() == 0));
}

#[test]
fn delay() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let mut c = con_with(&proxy, ms(1000));

    proxy.arm(b"PING", Fault::Delay(ms(300)));
    let t = Instant::now();
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    let took = t.elapsed();
    assert_eq!(pong, "PONG");
    assert!(took >= ms(300), "{took:?}");
    assert!(took < ms(900), "{took:?}");

    // Each command of a pipeline is matched on its own: only the middle one
    // is delayed, the one after it waits with it, and the order holds.
    proxy.arm(b"slow", Fault::Delay(ms(300)));
    let t = Instant::now();
    let got: (String, String, String) = redis::pipe()
        .cmd("ECHO")
        .arg("fast")
        .cmd("ECHO")
        .arg("slow")
        .cmd("ECHO")
        .arg("after")
        .query(&mut c)
        .unwrap();
    assert!(t.elapsed() >= ms(300), "{:?}", t.elapsed());
    assert_eq!(got, ("fast".into(), "slow".into(), "after".into()));
    assert_eq!(proxy.fired(), 2);

    // Undelayed again.
    let t = Instant::now();
    let _: String = redis::cmd("PING").query(&mut c).unwrap();
    assert!(t.elapsed() < ms(300), "{:?}", t.elapsed());
}

#[test]
fn blackhole_and_refuse() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());

    // Fault::Blackhole: this command and all later ones on the connection vanish.
    let mut c = con(&proxy);
    proxy.arm(b"hole", Fault::Blackhole);
    let e = redis::cmd("SET")
        .arg("k")
        .arg("hole")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(is_timeout(&e), "{e:?}");
    let e = redis::cmd("SET")
        .arg("k2")
        .arg("v")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(is_timeout(&e), "{e:?}");
    let mut direct = server.con();
    assert_eq!(get(&mut direct, "k"), None);
    assert_eq!(get(&mut direct, "k2"), None);
    // Other connections are unaffected.
    let _: String = redis::cmd("PING").query(&mut con(&proxy)).unwrap();

    // set_blackhole: every connection, existing and new.
    let mut c = con(&proxy);
    proxy.set_blackhole(true);
    let e = redis::cmd("SET")
        .arg("k3")
        .arg("v")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(is_timeout(&e), "{e:?}");
    let t = Instant::now();
    let r = redis::Client::open(proxy.url())
        .unwrap()
        .get_connection_with_timeout(ms(300));
    assert!(r.is_err(), "the connection handshake is swallowed too");
    assert!(t.elapsed() >= ms(250), "{:?}", t.elapsed());
    assert_eq!(get(&mut direct, "k3"), None);
    proxy.set_blackhole(false);
    let _: String = redis::cmd("PING").query(&mut con(&proxy)).unwrap();

    // set_refuse: new connections fail fast, existing ones keep working.
    let mut old = con(&proxy);
    proxy.set_refuse(true);
    let t = Instant::now();
    let r = redis::Client::open(proxy.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .and_then(|mut c| {
            c.set_read_timeout(Some(Duration::from_secs(2)))?;
            redis::cmd("PING").query::<String>(&mut c)
        });
    assert!(r.is_err(), "{r:?}");
    assert!(t.elapsed() < ms(500), "{:?}", t.elapsed());
    let _: String = redis::cmd("PING").query(&mut old).unwrap();
    proxy.set_refuse(false);
    let _: String = redis::cmd("PING").query(&mut con(&proxy)).unwrap();
    assert_eq!(proxy.fired(), 1);
}

#[test]
fn cut_all() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let mut a = con(&proxy);
    let mut b = con(&proxy);
    let _: String = redis::cmd("PING").query(&mut a).unwrap();
    let _: String = redis::cmd("PING").query(&mut b).unwrap();
    assert_eq!(proxy.connections(), 2);

    proxy.cut_all();
    assert_eq!(proxy.connections(), 0);
    for c in [&mut a, &mut b] {
        let e = redis::cmd("PING").query::<String>(c).unwrap_err();
        assert!(is_dropped(&e), "{e:?}");
    }

    let mut c = con(&proxy);
    let _: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(proxy.connections(), 1);
    // The server side of the cut pairs is closed too.
    let mut direct = server.con();
    assert!(eventually(ms(2000), || {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut direct).unwrap();
        list.lines().count() == 2 // the new proxied connection and `direct`
    }));
}

#[test]
fn pubsub_is_passthrough() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    proxy.arm(b"message", Fault::DropReply);
    proxy.arm(b"chan2", Fault::CloseBeforeForward);

    let mut sub_con = con_with(&proxy, ms(2000));
    let mut sub = sub_con.as_pubsub();
    sub.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    sub.subscribe("chan").unwrap();
    // Already a byte pipe: this SUBSCRIBE contains "chan2" but is not matched.
    sub.subscribe("chan2").unwrap();

    let mut direct = server.con();
    for (ch, payload) in [("chan", "message one"), ("chan2", "message two")] {
        let n: i64 = redis::cmd("PUBLISH")
            .arg(ch)
            .arg(payload)
            .query(&mut direct)
            .unwrap();
        assert_eq!(n, 1);
        let msg = sub.get_message().unwrap();
        assert_eq!(msg.get_channel_name(), ch);
        assert_eq!(msg.get_payload::<String>().unwrap(), payload);
    }
    assert_eq!(proxy.fired(), 0);
    drop(sub);
    drop(sub_con);

    // The rules are still armed for ordinary connections.
    let mut c = con(&proxy);
    let e = redis::cmd("ECHO")
        .arg("message")
        .query::<String>(&mut c)
        .unwrap_err();
    assert!(is_timeout(&e), "{e:?}");
    assert_eq!(proxy.fired(), 1);
}

#[test]
fn always_then_clear() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    proxy.always(b"PING", Fault::CloseBeforeForward);
    for _ in 0..3 {
        let e = redis::cmd("PING")
            .query::<String>(&mut con(&proxy))
            .unwrap_err();
        assert!(is_dropped(&e), "{e:?}");
    }
    assert!(proxy.wait_fired(3, ms(500)));
    assert!(!proxy.wait_fired(4, ms(50)));
    // Other commands pass.
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut con(&proxy))
        .unwrap();

    proxy.clear();
    let mut c = con(&proxy);
    for _ in 0..3 {
        let pong: String = redis::cmd("PING").query(&mut c).unwrap();
        assert_eq!(pong, "PONG");
    }
    assert_eq!(proxy.fired(), 3);
}

#[test]
fn armed_rules_fire_once_in_order() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let mut c = con_with(&proxy, ms(1000));
    proxy.arm(b"ECHO", Fault::Delay(ms(200)));
    proxy.arm(b"ECHO", Fault::CloseBeforeForward);

    let t = Instant::now();
    let s: String = redis::cmd("ECHO").arg("x").query(&mut c).unwrap();
    assert_eq!(s, "x");
    assert!(t.elapsed() >= ms(200));
    let e = redis::cmd("ECHO")
        .arg("y")
        .query::<String>(&mut c)
        .unwrap_err();
    assert!(is_dropped(&e), "{e:?}");
    let s: String = redis::cmd("ECHO").arg("z").query(&mut con(&proxy)).unwrap();
    assert_eq!(s, "z");
    assert_eq!(proxy.fired(), 2);
}

#[test]
fn drop_is_prompt() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let mut idle = con(&proxy);
    let _: String = redis::cmd("PING").query(&mut idle).unwrap();
    // A connection stuck in a long delay, one in a blackhole.
    let mut slow = con_with(&proxy, Duration::from_secs(5));
    proxy.arm(b"slow", Fault::Delay(Duration::from_secs(30)));
    let waiter =
        std::thread::spawn(move || redis::cmd("ECHO").arg("slow").query::<String>(&mut slow));
    assert!(proxy.wait_fired(1, ms(1000)));
    proxy.set_blackhole(true);
    let _hole = redis::Client::open(proxy.url())
        .unwrap()
        .get_connection_with_timeout(ms(100));

    let t = Instant::now();
    drop(proxy);
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    // Clients see their connections dropped.
    let r = waiter.join().unwrap();
    assert!(r.is_err(), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(redis::cmd("PING").query::<String>(&mut idle).is_err());
}

/// Sends `input` in one write on a raw socket and reads until the reply
/// stream ends with `tail` (at most 2 s).
fn raw_exchange(port: u16, input: &[u8], tail: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(ms(100))).unwrap();
    s.write_all(input).unwrap();
    let end = Instant::now() + Duration::from_secs(2);
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while !out.ends_with(tail) && Instant::now() < end {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
    }
    out
}

/// Replies are paired with commands across every RESP3 type, including an
/// attribute (`|`, annotating the reply after it) and a push (`>`, not a
/// reply at all); inline commands are commands too.
#[test]
fn resp3_replies_and_inline_commands_pair_up() {
    let server = Server::start_with(common::debug_args());
    let proxy = Proxy::start(server.port());
    let mut input = redis::cmd("HELLO").arg(3).get_packed_command();
    for kind in [
        "string", "integer", "double", "bignum", "null", "array", "set", "map", "attrib", "push",
        "verbatim", "true", "false",
    ] {
        input.extend(
            redis::cmd("DEBUG")
                .arg("PROTOCOL")
                .arg(kind)
                .get_packed_command(),
        );
    }
    input.extend(redis::cmd("ECHO").arg("dropped-reply").get_packed_command());
    input.extend(b"ECHO inline-dropped\r\n");
    input.extend(redis::cmd("ECHO").arg("kept").get_packed_command());
    input.extend(b"PING\r\n");

    let direct = raw_exchange(server.port(), &input, b"+PONG\r\n");
    assert!(direct.ends_with(b"+PONG\r\n"));
    for part in [
        &b"|1\r\n"[..],
        b">2\r\n",
        b"%",
        b"~",
        b"(",
        b",",
        b"#t",
        b"_\r\n",
        b"=",
    ] {
        assert!(contains(&direct, part), "{}", String::from_utf8_lossy(part));
    }

    proxy.arm(b"dropped-reply", Fault::DropReply);
    proxy.arm(b"inline-dropped", Fault::DropReply);
    let proxied = raw_exchange(proxy.port(), &input, b"+PONG\r\n");
    assert_eq!(proxy.fired(), 2);
    let mut want = direct.clone();
    for reply in [
        &b"$13\r\ndropped-reply\r\n"[..],
        b"$14\r\ninline-dropped\r\n",
    ] {
        let at = want.windows(reply.len()).position(|w| w == reply).unwrap();
        want.drain(at..at + reply.len());
    }
    // The HELLO map carries the connection id, which differs.
    let text = |b: &[u8]| {
        let s = String::from_utf8_lossy(b).into_owned();
        let at = s.find("$2\r\nid\r\n:").expect("HELLO reply has an id") + 9;
        let end = at + s[at..].find("\r\n").unwrap();
        format!("{}N{}", &s[..at], &s[end..])
    };
    assert_eq!(text(&proxied), text(&want));
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A pitfall for rules on scripts: redis-rs 1.x sends EVALSHA, and on
/// NOSCRIPT sends SCRIPT LOAD and EVALSHA again. On a server that does not
/// have the script yet, a rule on b"EVALSHA" hits the first attempt, which
/// did nothing; load the script first to hit the one that runs.
#[test]
fn evalsha_rules_and_noscript() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let script = redis::Script::new("return redis.call('INCR', KEYS[1])");
    let mut direct = server.con();

    proxy.arm(b"EVALSHA", Fault::DropReplyAndClose);
    let e = script.key("n").invoke::<i64>(&mut con(&proxy)).unwrap_err();
    assert!(is_dropped(&e), "{e:?}");
    assert_eq!(
        get(&mut direct, "n"),
        None,
        "the faulted EVALSHA got NOSCRIPT"
    );

    let _: String = script.prepare_invoke().load(&mut direct).unwrap();
    proxy.arm(b"EVALSHA", Fault::DropReplyAndClose);
    let e = script.key("n").invoke::<i64>(&mut con(&proxy)).unwrap_err();
    assert!(is_dropped(&e), "{e:?}");
    assert_eq!(
        get(&mut direct, "n").as_deref(),
        Some("1"),
        "ran, reply lost"
    );
    assert_eq!(proxy.fired(), 2);
}

/// Tests may share one proxy between threads.
#[test]
fn proxy_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Proxy>();
    check::<Fault>();
}
