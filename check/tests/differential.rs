//! The checker's keyspace against a real redis-server: the same commands
//! (every command the scripts and clients send, with the forms they use,
//! and errors), and the same script runs, give the same replies. Where
//! this fails, the emulation differs from Redis and the model is wrong.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redlease_check::keyspace::{Keyspace, Reply};
use redlease_check::server::Server;

struct Real {
    child: Child,
    con: redis::Connection,
}

impl Drop for Real {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn real() -> Real {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Killed and waited for by `Real`'s drop.
    #[allow(clippy::zombie_processes)]
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server on PATH (scripts/ensure-redis.sh)");
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let started = Instant::now();
    loop {
        if let Ok(con) = client.get_connection() {
            return Real { child, con };
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "redis-server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn from_value(v: redis::Value) -> Reply {
    use redis::Value as V;
    match v {
        V::Nil => Reply::Nil,
        V::Int(n) => Reply::Int(n),
        V::BulkString(b) => Reply::Bulk(b),
        V::Array(a) => Reply::Array(a.into_iter().map(from_value).collect()),
        V::SimpleString(s) => Reply::Status(s),
        V::Okay => Reply::Status("OK".into()),
        V::ServerError(e) => Reply::Error(format!("{} {}", e.code(), e.details().unwrap_or(""))),
        other => panic!("unexpected reply {other:?}"),
    }
}

fn send(con: &mut redis::Connection, args: &[&[u8]]) -> Reply {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        cmd.arg(*a);
    }
    match cmd.query::<redis::Value>(con) {
        Ok(v) => from_value(v),
        Err(e) => Reply::Error(format!(
            "{} {}",
            e.code().unwrap_or("ERR"),
            e.detail().unwrap_or("")
        )),
    }
}

/// `file` run on the real server by `EVAL` of the code the library sends.
fn eval_real(con: &mut redis::Connection, file: &str, keys: &[Vec<u8>], args: &[Vec<u8>]) -> Reply {
    let code = redlease::__sent_code(file).unwrap();
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(code).arg(keys.len()).arg(keys).arg(args);
    match cmd.query::<redis::Value>(con) {
        Ok(v) => from_value(v),
        Err(e) => Reply::Error(format!(
            "{} {}",
            e.code().unwrap_or("ERR"),
            e.detail().unwrap_or("")
        )),
    }
}

/// Error replies compared by their code (the first word): messages differ
/// between versions.
fn same(a: &Reply, b: &Reply) -> bool {
    match (a, b) {
        (Reply::Error(x), Reply::Error(y)) => x.split(' ').next() == y.split(' ').next(),
        (Reply::Array(x), Reply::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        _ => a == b,
    }
}

#[test]
fn commands_answer_as_redis_does() {
    let mut r = real();
    let mut ks = Keyspace {
        now_us: 1_000_000_000_000,
        ..Default::default()
    };
    let script: &[&[&str]] = &[
        &["SET", "s", "v"],
        &["SET", "s", "w", "PX", "5000"],
        &["SET", "s", "x", "KEEPTTL"],
        &["SET", "s", "x", "PX", "0"],
        &["SET", "s", "x", "PX", "abc"],
        &["SET", "s", "x", "NOPE"],
        &["GET", "s"],
        &["GET", "nothing"],
        &["TYPE", "s"],
        &["TYPE", "nothing"],
        &["EXISTS", "s", "nothing", "s"],
        &["PEXPIRE", "s", "1000000"],
        &["PEXPIRE", "nothing", "10"],
        &["PEXPIRE", "s", "x"],
        &["PTTL", "nothing"],
        &["SET", "p", "1"],
        &["PTTL", "p"],
        &["RPUSH", "l", "a", "b"],
        &["RPUSH", "s", "a"],
        &["GET", "l"],
        &["LINDEX", "l", "0"],
        &["LINDEX", "l", "-1"],
        &["LINDEX", "l", "5"],
        &["LPOP", "l"],
        &["LPOP", "l"],
        &["LPOP", "l"],
        &["EXISTS", "l"],
        &["LMOVE", "l", "m", "LEFT", "RIGHT"],
        &["RPUSH", "l", "7"],
        &["LMOVE", "l", "m", "LEFT", "RIGHT"],
        &["LINDEX", "m", "0"],
        &["TYPE", "m"],
        &["ZADD", "z", "3", "c", "1", "a", "2", "b"],
        &["ZADD", "z", "1", "b"],
        &["ZADD", "z", "x", "b"],
        &["ZADD", "s", "1", "a"],
        &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
        &["ZRANGE", "z", "0", "0"],
        &["ZRANGE", "z", "-1", "-1", "WITHSCORES"],
        &["ZRANGE", "z", "1", "1"],
        &["ZRANGE", "z", "5", "9"],
        &["ZRANGE", "z", "0", "63"],
        &["ZRANGE", "nothing", "0", "0"],
        &["ZSCORE", "z", "b"],
        &["ZSCORE", "z", "q"],
        &["ZCARD", "z"],
        &["ZCARD", "nothing"],
        &["ZCOUNT", "z", "(1", "+inf"],
        &["ZCOUNT", "z", "-inf", "1"],
        &["ZRANGEBYSCORE", "z", "-inf", "1"],
        &[
            "ZRANGEBYSCORE",
            "z",
            "(1",
            "+inf",
            "WITHSCORES",
            "LIMIT",
            "0",
            "1",
        ],
        &["ZRANGEBYSCORE", "z", "(1", "+inf"],
        &[
            "ZADD",
            "t",
            "1700000000123456",
            "m",
            "1700000000123457",
            "n",
        ],
        &["ZRANGE", "t", "0", "-1", "WITHSCORES"],
        &["ZSCORE", "t", "n"],
        &["ZREMRANGEBYSCORE", "z", "-inf", "1"],
        &["ZREM", "z", "c", "q"],
        &["ZREM", "z", "a"],
        &["EXISTS", "z"],
        &["ZREM", "nothing", "a"],
        &["GET", "t"],
        &["DEL", "s", "t", "nothing"],
        &["PUBLISH", "ch", "hello"],
    ];
    let mut published = Vec::new();
    for cmd in script {
        let args: Vec<Vec<u8>> = cmd.iter().map(|a| a.as_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let want = send(&mut r.con, &refs);
        let got = ks.run(&args, &mut published);
        // The TTL a real server reports is a millisecond or two under the
        // one set (its clock moved): compare PTTL of a live key loosely.
        if cmd[0] == "PTTL" {
            if let (Reply::Int(a), Reply::Int(b)) = (&want, &got) {
                assert!(
                    if *a < 0 || *b < 0 {
                        a == b
                    } else {
                        (a - b).abs() <= 50
                    },
                    "{cmd:?}: {a} vs {b}"
                );
                continue;
            }
        }
        assert!(
            same(&want, &got),
            "{cmd:?}: redis {want:?}, checker {got:?}"
        );
    }
}

/// The library's scripts, run on both, from the same keys, where their
/// replies do not depend on the clock: a try that takes a free name (its
/// fence from the counter), a retry by the same token, another token's
/// refusal written as a wait, a release, a foreign value.
#[test]
fn scripts_answer_as_redis_does() {
    let mut r = real();
    let mut server = Server::new().unwrap();
    let mut ks = Keyspace {
        now_us: 1_000_000_000_000,
        ..Default::default()
    };
    let keys: Vec<Vec<u8>> = [
        "{d}",
        "{d}:fence",
        "{d}:queue",
        "{d}:queue:t",
        "redlease:fence-floor",
    ]
    .iter()
    .map(|k| k.as_bytes().to_vec())
    .collect();
    let acquire = |token: &str| -> Vec<Vec<u8>> {
        [
            token,
            "60000",
            "0",
            "{d}:grant:",
            "500",
            "",
            "m",
            "queued",
            "",
            "500",
        ]
        .iter()
        .map(|a| a.as_bytes().to_vec())
        .collect()
    };
    let release = |token: &str| -> Vec<Vec<u8>> {
        [
            token,
            "",
            "m",
            "{d}:grant:",
            "500",
            "",
            "",
            "queued",
            "",
            "",
        ]
        .iter()
        .map(|a| a.as_bytes().to_vec())
        .collect()
    };
    let mut published = Vec::new();
    for setup in [
        ["SET", "{d}:fence", "41"],
        ["SET", "redlease:fence-floor", "41"],
    ] {
        let args: Vec<Vec<u8>> = setup.iter().map(|a| a.as_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        send(&mut r.con, &refs);
        ks.run(&args, &mut published);
    }
    let steps: Vec<(&'static str, Vec<Vec<u8>>)> = vec![
        ("lock_acquire.lua", acquire("rl:a")),
        ("lock_acquire.lua", acquire("rl:a")),
        ("lock_release.lua", release("rl:b")),
        ("lock_release.lua", release("rl:a")),
        ("lock_release.lua", release("rl:a")),
    ];
    for (file, args) in steps {
        let want = eval_real(&mut r.con, file, &keys, &args);
        let got = server.eval(&mut ks, file, &keys, &args).reply;
        assert!(
            same(&want, &got),
            "{file} {args:?}: redis {want:?}, checker {got:?}"
        );
    }
    // A value redlease did not write: both refuse it the same way.
    let mut published = Vec::new();
    let _: () = redis::cmd("SET")
        .arg("{d}")
        .arg("foreign")
        .query(&mut r.con)
        .unwrap();
    ks.run(
        &[b"SET".to_vec(), b"{d}".to_vec(), b"foreign".to_vec()],
        &mut published,
    );
    let want = eval_real(&mut r.con, "lock_acquire.lua", &keys, &acquire("rl:c"));
    let got = server
        .eval(&mut ks, "lock_acquire.lua", &keys, &acquire("rl:c"))
        .reply;
    match (&want, &got) {
        (Reply::Error(a), Reply::Error(b)) => {
            assert!(
                a.contains("REDLEASE_FOREIGN") && b.contains("REDLEASE_FOREIGN"),
                "{a} / {b}"
            )
        }
        _ => panic!("redis {want:?}, checker {got:?}"),
    }
}

/// A script run: the file, its keys, its arguments.
type Step = (&'static str, Vec<Vec<u8>>, Vec<Vec<u8>>);

/// Replies alike, a wait's milliseconds (text) within 250 ms, and a
/// fence a fresh counter drew from the clock (microseconds) within a
/// second: the real server's clock runs on while the checker's stands
/// still.
fn near(a: &Reply, b: &Reply) -> bool {
    let ms = |r: &Reply| match r {
        Reply::Bulk(v) => std::str::from_utf8(v).ok()?.parse::<i64>().ok(),
        _ => None,
    };
    match (a, b, ms(a), ms(b)) {
        (_, _, Some(x), Some(y)) => (x - y).abs() <= 250,
        (Reply::Int(x), Reply::Int(y), _, _) if *x > 1_000_000_000_000 => {
            (x - y).abs() <= 1_000_000
        }
        (Reply::Array(x), Reply::Array(y), _, _) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| near(a, b))
        }
        _ => same(a, b),
    }
}

/// The read-write lock's, the latch's, Redlock's and the multi-lock's
/// scripts: readers in and out, a writer refused then in, a count-down
/// latch set, looked at and opened, fences raised, a reader's lease
/// extended, two names taken at once and then refused.
#[test]
fn the_other_primitives_scripts_answer_as_redis_does() {
    let mut r = real();
    let mut server = Server::new().unwrap();
    // The checker's clock set to the real server's.
    let time = send(&mut r.con, &[b"TIME"]);
    let Reply::Array(parts) = time else {
        panic!("TIME: {time:?}")
    };
    let num = |r: &Reply| match r {
        Reply::Bulk(v) => std::str::from_utf8(v).unwrap().parse::<i64>().unwrap(),
        other => panic!("{other:?}"),
    };
    let mut ks = Keyspace {
        now_us: num(&parts[0]) * 1_000_000 + num(&parts[1]),
        ..Default::default()
    };
    let mut published = Vec::new();
    for setup in [
        ["SET", "{d}:fence", "41"],
        ["SET", "redlease:fence-floor", "41"],
    ] {
        let args: Vec<Vec<u8>> = setup.iter().map(|a| a.as_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        send(&mut r.con, &refs);
        ks.run(&args, &mut published);
    }
    let v = |xs: &[&str]| -> Vec<Vec<u8>> { xs.iter().map(|a| a.as_bytes().to_vec()).collect() };
    let rw = v(&[
        "{d}:rw:w",
        "{d}:rw:r",
        "{d}:fence",
        "{d}:rw:wq",
        "{d}:rw:wq:t",
        "{d}:rw:rq",
        "redlease:fence-floor",
    ]);
    let latch = v(&["{d}:latch", "{d}:latch:w", "{d}:latch:b"]);
    let read =
        |t: &str, waiting: &str| v(&[t, "60000", "", waiting, "{d}:rw:grant:", "500", "ch", "m"]);
    let write =
        |t: &str, queue: &str| v(&[t, "60000", queue, "{d}:rw:grant:", "500", "ch", "m", ""]);
    let release = |t: &str| v(&[t, "ch", "m", "{d}:rw:grant:", "500", ""]);
    let steps: Vec<Step> = vec![
        ("rw_read_acquire.lua", rw.clone(), read("rl:r1", "0")),
        ("rw_read_acquire.lua", rw.clone(), read("rl:r2", "0")),
        ("rw_write_acquire.lua", rw.clone(), write("rl:w", "0")),
        ("rw_write_acquire.lua", rw.clone(), write("rl:w", "7000")),
        ("rw_read_acquire.lua", rw.clone(), read("rl:r3", "91000")),
        ("zset_extend.lua", v(&["{d}:rw:r"]), v(&["rl:r1", "30000"])),
        ("rw_read_release.lua", rw.clone(), release("rl:r1")),
        ("rw_read_release.lua", rw.clone(), release("rl:r2")),
        ("rw_write_acquire.lua", rw.clone(), write("rl:w", "7000")),
        ("rw_read_acquire.lua", rw.clone(), read("rl:r3", "91000")),
        ("rw_write_release.lua", rw.clone(), release("rl:w")),
        ("rw_read_acquire.lua", rw.clone(), read("rl:r3", "91000")),
        ("rw_read_release.lua", rw.clone(), release("rl:r3")),
        ("latch_set.lua", latch[..1].to_vec(), v(&["2", "round1"])),
        ("latch_set.lua", latch[..1].to_vec(), v(&["3", "round2"])),
        ("latch_look.lua", latch[..2].to_vec(), v(&["rl:x", "91000"])),
        (
            "latch_count_down.lua",
            latch.clone(),
            v(&["ch", "m", "500"]),
        ),
        (
            "latch_count_down.lua",
            latch.clone(),
            v(&["ch", "m", "500"]),
        ),
        (
            "latch_count_down.lua",
            latch.clone(),
            v(&["ch", "m", "500"]),
        ),
        ("latch_look.lua", latch[..2].to_vec(), v(&["rl:x", "91000"])),
        (
            "fence_raise.lua",
            v(&["{d}:fence", "redlease:fence-floor"]),
            v(&["100", "60000"]),
        ),
        (
            "lock_acquire_all.lua",
            v(&[
                "{x}",
                "{x}:fence",
                "{x}:queue",
                "{x}:queue:t",
                "{y}",
                "{y}:fence",
                "{y}:queue",
                "{y}:queue:t",
                "redlease:fence-floor",
            ]),
            v(&["rl:m1", "60000", "{x}:grant:", "60000", "{y}:grant:"]),
        ),
        (
            "lock_acquire_all.lua",
            v(&[
                "{x}",
                "{x}:fence",
                "{x}:queue",
                "{x}:queue:t",
                "{y}",
                "{y}:fence",
                "{y}:queue",
                "{y}:queue:t",
                "redlease:fence-floor",
            ]),
            v(&["rl:m2", "60000", "{x}:grant:", "60000", "{y}:grant:"]),
        ),
        (
            "fence_raise.lua",
            v(&["{d}:fence", "redlease:fence-floor"]),
            v(&["90", "60000"]),
        ),
    ];
    for (file, keys, args) in steps {
        let want = eval_real(&mut r.con, file, &keys, &args);
        let got = server.eval(&mut ks, file, &keys, &args).reply;
        assert!(
            near(&want, &got),
            "{file} {args:?}: redis {want:?}, checker {got:?}"
        );
    }
}
