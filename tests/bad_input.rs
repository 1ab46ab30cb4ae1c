//! One table over every public entry point with hostile values: each must
//! yield its documented error kind (or succeed where the value is legal),
//! never panic and never hang.

mod common;

use std::time::{Duration, Instant};

use common::{client, Server};
use redis::Commands;
use redlease::{Client, ErrorKind};

type Case = (&'static str, Box<dyn Fn(&Client) -> Result<(), ErrorKind>>);

fn kind<T>(r: redlease::Result<T>) -> Result<(), ErrorKind> {
    r.map(|_| ()).map_err(|e| e.kind())
}

#[test]
fn hostile_values_matrix() {
    let server = Server::start();
    let mut con = server.con();
    let _: () = con.set("{str}", "hello").unwrap();
    let _: () = con.hset("{hash}", "f", "v").unwrap();
    let _: () = con.rpush("{list}", "x").unwrap();
    let _: () = con.hset("{hash}:rw:w", "f", "v").unwrap();
    let _: () = con.rpush("{list}:rw:r", "x").unwrap();
    let _: () = con.set("{str}:sem", "x").unwrap();
    let _: () = con.rpush("{list}:sem", "x").unwrap();
    let huge = vec![b'n'; redlease::MAX_NAME_LEN + 1];
    let max = vec![b'n'; redlease::MAX_NAME_LEN];
    let h1 = huge.clone();
    let h2 = huge.clone();
    let h3 = huge.clone();
    let h4 = huge.clone();
    let m1 = max.clone();
    let ok = Ok(());
    let invalid = Err(ErrorKind::InvalidArgument);
    let wrong = Err(ErrorKind::WrongType);
    let cases: Vec<(Case, Result<(), ErrorKind>)> = vec![
        // Names.
        (
            ("lock empty", Box::new(|c| kind(c.lock("").try_acquire()))),
            invalid,
        ),
        (
            (
                "lock huge",
                Box::new(move |c| kind(c.lock(&h1).try_acquire())),
            ),
            invalid,
        ),
        (
            (
                "lock max",
                Box::new(move |c| kind(c.lock(&m1).try_acquire())),
            ),
            ok,
        ),
        (
            (
                "lock binary",
                Box::new(|c| kind(c.lock([0u8, 255, 10, 13]).try_acquire())),
            ),
            ok,
        ),
        (
            (
                "lock braces",
                Box::new(|c| kind(c.lock("}{%}{").try_acquire())),
            ),
            ok,
        ),
        (
            (
                "lock only close brace",
                Box::new(|c| kind(c.lock("}").try_acquire())),
            ),
            ok,
        ),
        (
            (
                "is_locked empty",
                Box::new(|c| kind(c.lock("").is_locked())),
            ),
            invalid,
        ),
        (
            (
                "force_unlock huge",
                Box::new(move |c| kind(c.lock(&h2).force_unlock())),
            ),
            invalid,
        ),
        (
            ("with empty", Box::new(|c| kind(c.lock("").with(|| ())))),
            invalid,
        ),
        (
            (
                "with_lock huge",
                Box::new(move |c| kind(c.with_lock(&h3, || ()))),
            ),
            invalid,
        ),
        (
            (
                "fair_lock empty",
                Box::new(|c| kind(c.fair_lock("").try_acquire())),
            ),
            invalid,
        ),
        (
            ("rw empty", Box::new(|c| kind(c.rw_lock("").try_write()))),
            invalid,
        ),
        (
            (
                "rw huge",
                Box::new(move |c| kind(c.rw_lock(&h4).try_read())),
            ),
            invalid,
        ),
        (
            (
                "semaphore empty",
                Box::new(|c| kind(c.semaphore("", 1).try_acquire())),
            ),
            invalid,
        ),
        (
            ("inspect empty", Box::new(|c| kind(c.inspect("")))),
            invalid,
        ),
        // Durations.
        (
            (
                "lease zero",
                Box::new(|c| kind(c.lock("d").lease(Duration::ZERO).try_acquire())),
            ),
            invalid,
        ),
        (
            (
                "lease huge",
                Box::new(|c| kind(c.lock("d").lease(Duration::MAX).try_acquire())),
            ),
            invalid,
        ),
        (
            (
                "lease 1ns",
                Box::new(|c| kind(c.lock("d1").lease(Duration::from_nanos(1)).try_acquire())),
            ),
            ok,
        ),
        (
            (
                "rw lease zero",
                Box::new(|c| kind(c.rw_lock("d").lease(Duration::ZERO).try_read())),
            ),
            invalid,
        ),
        (
            (
                "sem lease zero",
                Box::new(|c| kind(c.semaphore("d", 1).lease(Duration::ZERO).try_acquire())),
            ),
            invalid,
        ),
        (
            (
                "timeout zero",
                Box::new(|c| kind(c.lock("t0").acquire_timeout(Duration::ZERO))),
            ),
            ok,
        ),
        (
            (
                "timeout huge",
                Box::new(|c| kind(c.lock("tmax").acquire_timeout(Duration::MAX))),
            ),
            ok,
        ),
        // Permit counts.
        (
            (
                "permits 0",
                Box::new(|c| kind(c.semaphore("p", 0).try_acquire())),
            ),
            invalid,
        ),
        (
            (
                "permits max",
                Box::new(|c| kind(c.semaphore("pmax", u32::MAX).try_acquire())),
            ),
            ok,
        ),
        (
            (
                "take 0",
                Box::new(|c| kind(c.semaphore("p", 3).try_acquire_many(0))),
            ),
            invalid,
        ),
        (
            (
                "take more than n",
                Box::new(|c| kind(c.semaphore("p", 3).try_acquire_many(4))),
            ),
            invalid,
        ),
        (
            (
                "take u32::MAX of max",
                Box::new(|c| kind(c.semaphore("pmax2", u32::MAX).try_acquire_many(u32::MAX))),
            ),
            ok,
        ),
        (
            (
                "resize 0",
                Box::new(|c| kind(c.semaphore("p", 3).resize(0))),
            ),
            invalid,
        ),
        // Keys holding foreign data.
        (
            (
                "lock on string",
                Box::new(|c| kind(c.lock("str").try_acquire())),
            ),
            wrong,
        ),
        (
            (
                "lock on hash",
                Box::new(|c| kind(c.lock("hash").try_acquire())),
            ),
            wrong,
        ),
        (
            (
                "lock on list",
                Box::new(|c| kind(c.lock("list").try_acquire())),
            ),
            wrong,
        ),
        (
            (
                "fair lock on hash",
                Box::new(|c| kind(c.fair_lock("hash").try_acquire())),
            ),
            wrong,
        ),
        (
            (
                "rw write on hash",
                Box::new(|c| kind(c.rw_lock("hash").try_write())),
            ),
            wrong,
        ),
        (
            (
                "rw read on list",
                Box::new(|c| kind(c.rw_lock("list").try_read())),
            ),
            wrong,
        ),
        (
            (
                "sem on string",
                Box::new(|c| kind(c.semaphore("str", 2).try_acquire())),
            ),
            wrong,
        ),
        (
            (
                "sem on list",
                Box::new(|c| kind(c.semaphore("list", 2).try_acquire())),
            ),
            wrong,
        ),
        (
            ("inspect foreign", Box::new(|c| kind(c.inspect("hash")))),
            ok,
        ),
    ];
    let c = client(&server);
    let mut failures = Vec::new();
    for ((name, case), expected) in &cases {
        let start = Instant::now();
        let got = case(&c);
        if &got != expected {
            failures.push(format!("{name}: expected {expected:?}, got {got:?}"));
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{name} took {:?}",
            start.elapsed()
        );
    }
    println!(
        "FIGURES bad input: {} cases, {} mismatches",
        cases.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn hostile_client_settings() {
    let server = Server::start_with(&["--requirepass", "s3cret"]);
    let port = server.port();
    let dead = redis_test::utils::get_random_available_port();
    let b = || {
        Client::builder()
            .connect_timeout(Duration::from_millis(500))
            .pool_timeout(Duration::from_millis(500))
    };
    let cases: Vec<(&str, redlease::Result<Client>, ErrorKind)> = vec![
        (
            "wrong password",
            b().url(format!("redis://:wrong@127.0.0.1:{port}/")).build(),
            ErrorKind::Auth,
        ),
        (
            "no password",
            b().url(format!("redis://127.0.0.1:{port}/")).build(),
            ErrorKind::Auth,
        ),
        (
            "unreachable",
            b().url(format!("redis://127.0.0.1:{dead}/")).build(),
            ErrorKind::Connection,
        ),
        (
            "malformed",
            b().url("redis://[::1").build(),
            ErrorKind::InvalidArgument,
        ),
        (
            "wrong scheme",
            b().url("http://127.0.0.1/").build(),
            ErrorKind::InvalidArgument,
        ),
        ("empty", b().url("").build(), ErrorKind::InvalidArgument),
        ("no url", b().build(), ErrorKind::InvalidArgument),
        (
            "pool 0",
            b().url(format!("redis://:s3cret@127.0.0.1:{port}/"))
                .pool_size(0)
                .build(),
            ErrorKind::InvalidArgument,
        ),
        (
            "watchdog 0",
            b().url(format!("redis://:s3cret@127.0.0.1:{port}/"))
                .watchdog_timeout(Duration::ZERO)
                .build(),
            ErrorKind::InvalidArgument,
        ),
        (
            "watchdog huge",
            b().url(format!("redis://:s3cret@127.0.0.1:{port}/"))
                .watchdog_timeout(Duration::MAX)
                .build(),
            ErrorKind::InvalidArgument,
        ),
        (
            "prefix brace",
            b().url(format!("redis://:s3cret@127.0.0.1:{port}/"))
                .key_prefix("a}")
                .build(),
            ErrorKind::InvalidArgument,
        ),
    ];
    for (name, got, expected) in cases {
        match got {
            Ok(_) => panic!("{name}: expected {expected:?}, got a client"),
            Err(e) => assert_eq!(e.kind(), expected, "{name}: {e}"),
        }
    }
    // The right password works.
    let c = Client::open(format!("redis://:s3cret@127.0.0.1:{port}/")).unwrap();
    assert!(c.lock("ok").try_acquire().unwrap().is_some());
}

#[test]
fn builder_debug_never_shows_a_password_and_pool_size_is_bounded() {
    let b = Client::builder()
        .url("redis://:hunter2@127.0.0.1:1/")
        .redlock(["redis://u:hunter3@127.0.0.1:2/"]);
    let text = format!("{b:?}");
    assert!(!text.contains("hunter"), "{text}");
    let b = Client::builder().url("redis://:hun/ter2@127.0.0.1:1/");
    let text = format!("{b:?}");
    assert!(!text.contains("ter2"), "{text}");
    let b = Client::builder().url("redis://:hunter2@127.0.0.1:1/");
    let text = format!("{b:?}");
    assert!(!text.contains("hunter2") && text.contains("***"), "{text}");
    let err = Client::builder()
        .url("redis://:hunter2@[::1")
        .build()
        .unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
    let err = Client::builder()
        .url("redis://127.0.0.1:1/")
        .pool_size(u32::MAX)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
}

#[test]
fn keys_without_expiry_are_refused_not_waited_for_forever() {
    let server = Server::start();
    let c = Client::open(server.url()).unwrap();
    let mut con = server.con();
    let _: () = redis::cmd("SET")
        .arg("{stuck}")
        .arg("rl:someone:x#1")
        .query(&mut con)
        .unwrap();
    let t = std::time::Instant::now();
    let wait = Duration::from_secs(2);
    let err = c.lock("stuck").acquire_timeout(wait).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
    let err = c.fair_lock("stuck").acquire_timeout(wait).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
    assert!(t.elapsed() < Duration::from_secs(2));
    let _: () = redis::cmd("SET")
        .arg("{rw}:rw:w")
        .arg("rl:someone:x#1")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        c.rw_lock("rw").read().unwrap_err().kind(),
        ErrorKind::WrongType
    );
    assert_eq!(
        c.rw_lock("rw").write().unwrap_err().kind(),
        ErrorKind::WrongType
    );
    let _: () = redis::cmd("SET")
        .arg("{rwi}:rw:wq")
        .arg("rl:someone:x")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        c.rw_lock("rwi").read().unwrap_err().kind(),
        ErrorKind::WrongType
    );
}

#[test]
fn members_that_never_expire_are_refused() {
    let server = Server::start();
    let c = Client::open(server.url()).unwrap();
    let mut con = server.con();
    let _: () = redis::cmd("ZADD")
        .arg("{inf}:sem")
        .arg("+inf")
        .arg("1:rl:a:b")
        .query(&mut con)
        .unwrap();
    let err = c.semaphore("inf", 2).try_acquire().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
    let _: () = redis::cmd("ZADD")
        .arg("{infr}:rw:r")
        .arg("+inf")
        .arg("rl:a:b")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        c.rw_lock("infr").try_write().unwrap_err().kind(),
        ErrorKind::WrongType
    );
    assert_eq!(
        c.rw_lock("infr").try_read().unwrap_err().kind(),
        ErrorKind::WrongType
    );
}

#[test]
fn replica_ack_is_bounded_and_says_what_happened() {
    let server = Server::start();
    for t in [
        Duration::from_micros(999),
        Duration::ZERO,
        Duration::from_secs(60),
    ] {
        let err = Client::builder()
            .url(server.url())
            .replica_ack(1, t)
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{t:?}: {err}");
    }
    // No replica at all: the grant is undone, and the message says so.
    let c = Client::builder()
        .url(server.url())
        .replica_ack(1, Duration::from_millis(100))
        .build()
        .unwrap();
    let err = c.lock("acked").try_acquire().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::QuorumNotReached, "{err}");
    assert!(err.to_string().contains("released it"), "{err}");
    let left: bool = redis::cmd("EXISTS")
        .arg("{acked}")
        .query(&mut server.con())
        .unwrap();
    assert!(!left);
    // The pool is still usable afterwards.
    let plain = Client::open(server.url()).unwrap();
    assert!(plain.lock("acked").try_acquire().unwrap().is_some());
    assert_eq!(
        c.lock("acked2").try_acquire().unwrap_err().kind(),
        ErrorKind::QuorumNotReached
    );
}

/// A password refused after build, on a pooled connection: the server
/// drops its password (`requirepass ""`) and the clients. Redis then
/// refuses `AUTH <password>` with a plain `ERR`, not `WRONGPASS`; that is
/// still a refusal of credentials (`Auth`, as redis-rs classed it), not an
/// outage to ride out (found by an adversarial review of our connections).
#[test]
fn a_refused_auth_on_a_pooled_connection_is_an_auth_error() {
    let server = Server::start_with(&["--requirepass", "pw"]);
    let c = Client::builder()
        .url(format!("redis://:pw@127.0.0.1:{}/", server.port()))
        .connect_timeout(Duration::from_millis(500))
        .pool_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let mut admin = redis::Client::open(format!("redis://:pw@127.0.0.1:{}/", server.port()))
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("")
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut admin)
        .unwrap_or(());
    for _ in 0..3 {
        let err = c.lock("auth").try_acquire().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Auth, "{err:?}");
    }
}

/// Reproduction (newcomer review): `http://…`, `redis//oops` and
/// `redis://host:notaport/` all read "Redis URL did not parse -
/// InvalidClientConfig". Each now says what is wrong and what a good URL
/// looks like.
#[test]
fn bad_urls_say_what_is_wrong_and_what_a_good_one_looks_like() {
    for (url, says) in [
        ("http://127.0.0.1:6379/", "scheme \"http\""),
        ("redis//oops", "no scheme"),
        ("redis://127.0.0.1:notaport/", "port \"notaport\""),
    ] {
        let err = redlease::Client::open(url).unwrap_err();
        assert_eq!(
            err.kind(),
            redlease::ErrorKind::InvalidArgument,
            "{url}: {err}"
        );
        let text = err.to_string();
        assert!(text.contains(says), "{url}: {text}");
        assert!(
            text.contains("redis://[user:password@]host:port"),
            "{url}: {text}"
        );
    }
}
