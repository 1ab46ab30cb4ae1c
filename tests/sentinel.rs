//! Sentinel: 1 master, 1 replica, 3 sentinels (spawned with `redis-test`);
//! kill the master while clients hold and wait for locks.

mod common;

use std::time::{Duration, Instant};

use redis::Commands;
use redis_test::sentinel::RedisSentinelCluster;
use redlease::{Client, ErrorKind};
use serial_test::serial;

fn url(s: &redis_test::server::RedisServer) -> String {
    let (host, port) = s.host_and_port().unwrap();
    format!("redis://{host}:{port}/")
}

fn setup() -> (RedisSentinelCluster, Vec<String>) {
    let cluster = RedisSentinelCluster::new(1, 1, 3);
    let sentinels: Vec<String> = cluster.sentinel_servers.iter().map(url).collect();
    // Fail over within a couple of seconds instead of the default 30 s.
    for s in &sentinels {
        let client = redis::Client::open(s.as_str()).unwrap();
        let mut con = None;
        assert!(common::eventually(Duration::from_secs(10), || {
            con = client.get_connection().ok();
            con.is_some()
        }));
        let mut con = con.unwrap();
        for (k, v) in [
            ("down-after-milliseconds", "1000"),
            ("failover-timeout", "3000"),
        ] {
            let _: () = redis::cmd("SENTINEL")
                .arg("SET")
                .arg("master0")
                .arg(k)
                .arg(v)
                .query(&mut con)
                .unwrap();
        }
    }
    (cluster, sentinels)
}

fn client(sentinels: &[String]) -> Client {
    Client::builder()
        .sentinel(sentinels, "master0")
        .watchdog_timeout(Duration::from_millis(1500))
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .fallback_poll(Duration::from_millis(300))
        .build()
        .unwrap()
}

#[test]
#[serial]
fn locks_work_and_replica_ack_is_enforced() {
    let (cluster, sentinels) = setup();
    let c = client(&sentinels);
    let g = c.lock("s").acquire().unwrap();
    assert!(c.lock("s").is_locked().unwrap());
    drop(g);
    drop(c.rw_lock("s").write().unwrap());
    drop(c.semaphore("s", 2).acquire().unwrap());
    // WAIT for the one replica: succeeds.
    let acked = Client::builder()
        .sentinel(&sentinels, "master0")
        .replica_ack(1, Duration::from_secs(2))
        .build()
        .unwrap();
    drop(acked.lock("acked").acquire().unwrap());
    // WAIT for two replicas of one: fails, and leaves no lease behind.
    let greedy = Client::builder()
        .sentinel(&sentinels, "master0")
        .replica_ack(2, Duration::from_millis(200))
        .build()
        .unwrap();
    let err = greedy.lock("greedy").try_acquire().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::QuorumNotReached);
    let mut master = redis::Client::open(url(&cluster.servers[0]))
        .unwrap()
        .get_connection()
        .unwrap();
    let left: bool = master.exists("{greedy}").unwrap();
    assert!(!left, "the unacknowledged lease must be released");
}

#[test]
#[serial]
fn clients_follow_the_master_across_failover() {
    let (mut cluster, sentinels) = setup();
    // A lease much longer than the failover takes (about 5 s here, 8.9 s
    // seen in CI on a loaded machine), so that the replicated lease can
    // survive it: it ends no sooner than 16 s after the kill (its last
    // renewal a third of it before).
    let holder = Client::builder()
        .sentinel(&sentinels, "master0")
        .watchdog_timeout(Duration::from_secs(24))
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    // The failover takes 3-5 s here, and over 10 s (the default outage
    // tolerance) on a loaded 2-core machine: the waiter rides out 30.
    let waiter = Client::builder()
        .sentinel(&sentinels, "master0")
        .outage_tolerance(Duration::from_secs(30))
        .build()
        .unwrap();
    let g = holder.lock("fo").acquire().unwrap();
    let lost_one = holder.lock("fo-lost").acquire().unwrap();
    // Wait until the replica has both leases (replication is asynchronous;
    // this test is about leases that made it).
    let mut replica = redis::Client::open(url(&cluster.servers[1]))
        .unwrap()
        .get_connection()
        .unwrap();
    assert!(common::eventually(Duration::from_secs(5), || {
        replica.exists::<_, bool>("{fo}").unwrap()
            && replica.exists::<_, bool>("{fo-lost}").unwrap()
    }));
    let w = waiter.clone();
    let t = std::thread::spawn(move || {
        w.lock("fo")
            .acquire_timeout(Duration::from_secs(40))
            .map(|g| g.map(|g| g.fencing_token()))
    });
    let killed = Instant::now();
    cluster.servers[0].stop();
    // Clients recover on the promoted replica: a fresh lock succeeds.
    let mut recovered = None;
    while killed.elapsed() < Duration::from_secs(30) {
        if let Ok(Some(g)) = waiter.lock("probe").try_acquire() {
            recovered = Some(killed.elapsed());
            drop(g);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let recovered = recovered.expect("no recovery after failover");
    println!(
        "FIGURES sentinel failover: new master usable {} ms after the kill",
        recovered.as_millis()
    );
    // The replicated lock survived; the holder keeps renewing it on the new
    // master. A lease the replica never got is reported lost: simulate it
    // by removing one key on the new master.
    let new_master = redis::Client::open(url(&cluster.servers[1])).unwrap();
    let mut con = new_master.get_connection().unwrap();
    let _: () = con.del("{fo-lost}").unwrap();
    assert!(
        // Within one renewal period (a third of 24 s) and its retries.
        common::eventually(Duration::from_secs(25), || !lost_one.is_held()),
        "the lost lease must be reported"
    );
    assert!(g.is_held(), "the replicated lease survives the failover");
    assert_eq!(lost_one.release().unwrap_err().kind(), ErrorKind::LockLost);
    g.release().unwrap();
    let got = t.join().unwrap().unwrap();
    assert!(got.is_some(), "the waiter gets the lock on the new master");
}

/// The failover that loses the lease (Kleppmann's case, and the Redis
/// "Distributed Locks" page's own caveat): replication to the replica held
/// back (the replica SIGSTOPped, its link cut), a lock taken on the master, the master
/// killed, the replica resumed and promoted without the lease. Another
/// client then takes the lock. What GUARANTEES.md promises: the second
/// fence is larger than the first; the first holder learns of the loss
/// before the second is let in (its lease ends for it while the failover
/// runs) and its LostSignal fires; with `replica_ack` the acquisition
/// never returns a lease the replica does not have.
#[test]
#[serial]
fn a_failover_that_loses_the_lease_is_reported_and_fences_still_grow() {
    let (mut cluster, sentinels) = setup();
    let holder = client(&sentinels);
    let other = client(&sentinels);
    // Both up, the replica in sync.
    drop(holder.lock("warm").acquire().unwrap());
    let replica_pid = cluster.servers[1].process.id() as i32;
    // SAFETY: kill(2) on a server process this test started.
    unsafe { libc::kill(replica_pid, libc::SIGSTOP) };
    let mut master = redis::Client::open(url(&cluster.servers[0]))
        .unwrap()
        .get_connection()
        .unwrap();
    // A stopped replica still gets what the master writes (it waits in its
    // socket's buffer, applied once it runs): its link is cut too, so that
    // the lease never leaves the master (as in partitions.rs's Cluster
    // case, where CI saw a carried lease renewed on the promoted replica).
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut master)
        .unwrap();
    assert!(killed >= 1, "the replica's link cut");
    // With replica_ack, a lease the replica cannot confirm is never
    // returned: the acquisition fails and leaves nothing behind.
    let acked = Client::builder()
        .sentinel(&sentinels, "master0")
        .replica_ack(1, Duration::from_millis(300))
        .build()
        .unwrap();
    let r = acked.lock("acked").try_acquire();
    assert!(
        matches!(&r, Err(e) if e.kind() == ErrorKind::QuorumNotReached),
        "{r:?}"
    );
    assert!(!master.exists::<_, bool>("{acked}").unwrap());

    // Without it: granted by the master alone.
    let g = holder.lock("lost").acquire().unwrap();
    let first = g.fencing_token();
    let lost = g.lost_signal();
    let learned = std::thread::spawn(move || {
        lost.wait_timeout(Duration::from_secs(60))
            .then(Instant::now)
    });
    cluster.servers[0].stop();
    unsafe { libc::kill(replica_pid, libc::SIGCONT) };
    let killed = Instant::now();
    // The replica is promoted without the lease: someone else gets in.
    let mut second = None;
    while killed.elapsed() < Duration::from_secs(40) {
        if let Ok(Some(g2)) = other.lock("lost").try_acquire() {
            second = Some((g2, Instant::now()));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let Some((g2, granted)) = second else {
        // The replica, stopped a while, is not always promoted in time on
        // a loaded machine (seen once on Redis 6.2 in CI: 40 s without a
        // failover; 3.6–4.9 s when it runs): then nothing was lost yet,
        // and there is no verdict to give. A replica that *was* promoted
        // and never served is the library's failure.
        let mut replica = redis::Client::open(url(&cluster.servers[1]))
            .unwrap()
            .get_connection()
            .unwrap();
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut replica).unwrap();
        let promoted = matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master");
        assert!(
            !promoted,
            "the promoted replica never served (role {role:?})"
        );
        common::skip(
            "a_failover_that_loses_the_lease_is_reported_and_fences_still_grow",
            &format!("Sentinel did not promote the replica within 40 s (role {role:?})"),
        );
        return;
    };
    let learned = learned
        .join()
        .unwrap()
        .expect("the first holder never learned of the loss");
    println!(
        "FIGURES failover that lost the lease: the holder learned {} ms after the kill, the next holder got in {} ms after it; fences {first} then {}",
        (learned - killed).as_millis(),
        (granted - killed).as_millis(),
        g2.fencing_token()
    );
    assert!(
        g2.fencing_token() > first,
        "fences: {first} then {}",
        g2.fencing_token()
    );
    assert!(
        learned <= granted,
        "the first holder learned {} ms after the second was let in",
        (learned - granted).as_millis()
    );
    assert!(!g.is_held());
    assert_eq!(g.release().unwrap_err().kind(), ErrorKind::LockLost);
    assert!(g2.is_held());
}

/// `redlease doctor --sentinel`: the master the Sentinels name, and each of
/// its replicas with its state and lag (a failover promotes one of them).
#[test]
#[serial]
fn the_doctor_checks_the_master_and_its_replicas() {
    let (cluster, sentinels) = setup();
    // The replica in sync first: one still loading (`wait_bgsave`) is
    // rightly reported as degraded.
    let mut master = redis::Client::open(url(&cluster.servers[0]))
        .unwrap()
        .get_connection()
        .unwrap();
    assert!(common::eventually(Duration::from_secs(20), || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut master)
            .unwrap_or_default();
        info.contains("state=online")
    }));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
        .env_remove("REDIS_URL")
        .env_remove("REDLEASE_PREFIX")
        .args([
            "--url",
            &sentinels.join(","),
            "--sentinel",
            "master0",
            "doctor",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("client: Sentinel"), "{text}");
    let replica = text
        .lines()
        .find(|l| l.contains(" replica ") && l.contains(" of "))
        .unwrap_or_else(|| panic!("no replica line:\n{text}"));
    assert!(
        replica.starts_with("ok ") && replica.contains("online"),
        "{replica}"
    );
}

/// Waits until the replica has `key` (the lease under test made it across)
/// and the Sentinels can fail over; returns the master they name now. A
/// failover needs every Sentinel to know the replica (they learn it from
/// the master's INFO, every 10 s) and the other Sentinels (every 2 s):
/// otherwise none is promoted, or no quorum agrees the master is down.
fn ready_to_fail_over(cluster: &RedisSentinelCluster, sentinels: &[String], key: &str) -> String {
    let mut replica = redis::Client::open(url(&cluster.servers[1]))
        .unwrap()
        .get_connection()
        .unwrap();
    assert!(common::eventually(Duration::from_secs(10), || replica
        .exists::<_, bool>(key)
        .unwrap_or(false)));
    assert!(common::eventually(Duration::from_secs(30), || {
        sentinels
            .iter()
            .all(|s| known_replicas(s) >= 1 && known_sentinels(s) >= sentinels.len() - 1)
    }));
    named_master(sentinels).unwrap()
}

/// How many replicas of `master0` a Sentinel knows and sees up.
fn known_replicas(sentinel: &str) -> usize {
    let Ok(mut con) = redis::Client::open(sentinel).and_then(|c| c.get_connection()) else {
        return 0;
    };
    let replicas: Vec<Vec<String>> = redis::cmd("SENTINEL")
        .arg("replicas")
        .arg("master0")
        .query(&mut con)
        .unwrap_or_default();
    replicas
        .iter()
        .filter(|r| r.windows(2).any(|kv| kv[0] == "flags" && kv[1] == "slave"))
        .count()
}

/// How many other Sentinels of `master0` a Sentinel knows.
fn known_sentinels(sentinel: &str) -> usize {
    let Ok(mut con) = redis::Client::open(sentinel).and_then(|c| c.get_connection()) else {
        return 0;
    };
    redis::cmd("SENTINEL")
        .arg("sentinels")
        .arg("master0")
        .query::<Vec<redis::Value>>(&mut con)
        .map_or(0, |v| v.len())
}

/// The master the Sentinels name now, as they say it (`host:port`).
fn named_master(sentinels: &[String]) -> Option<String> {
    sentinels.iter().find_map(|s| {
        let mut con = redis::Client::open(s.as_str())
            .ok()?
            .get_connection_with_timeout(Duration::from_millis(300))
            .ok()?;
        con.set_read_timeout(Some(Duration::from_millis(300)))
            .ok()?;
        let (host, port): (String, String) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("master0")
            .query(&mut con)
            .ok()?;
        Some(format!("{host}:{port}"))
    })
}

/// Issue 53: a master SIGSTOPped, the Sentinels promote its replica (the
/// holder renews there, its replicated lease intact), and the old master
/// comes back still acting as master before the Sentinels demote it. A
/// waiter must not be granted by it: both guards must never report
/// `is_held()` at once once the clients have seen the switch (they hear
/// `+switch-master`, retire every connection to the old master, and treat
/// a grant or renewal it answers as lost).
#[test]
#[serial]
fn a_deposed_master_never_grants_a_second_holder() {
    let runs: usize = std::env::var("REDLEASE_FAILOVER_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    // The leases are 3 s and 5 s; on a loaded machine the failover
    // takes 3-4 s, which a 3 s lease rarely survives (then there is only one
    // holder to see), so the test's default is 5 s and 8 s.
    let leases: Vec<u64> = std::env::var("REDLEASE_FAILOVER_LEASES")
        .ok()
        .map(|l| l.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![5_000, 8_000]);
    for lease in leases {
        for run in 0..runs {
            deposed_master_run(Duration::from_millis(lease), run);
        }
    }
}

fn deposed_master_run(lease: Duration, run: usize) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let (cluster, sentinels) = setup();
    let builder = || {
        Client::builder()
            .sentinel(&sentinels, "master0")
            .watchdog_timeout(lease)
            .outage_tolerance(Duration::from_secs(30))
    };
    let holder = builder().build().unwrap();
    let waiter = builder().build().unwrap();
    let old = url(&cluster.servers[0]);
    let g = holder.lock("two").acquire().unwrap();
    // Warm the waiter's pool, as a busy service's would be.
    drop(waiter.lock("warm").acquire().unwrap());
    let named_before = ready_to_fail_over(&cluster, &sentinels, "{two}");
    let w_held = Arc::new(AtomicBool::new(false));
    let w_fence = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let t = {
        let (w_held, w_fence, stop) = (w_held.clone(), w_fence.clone(), stop.clone());
        std::thread::spawn(move || {
            let got = waiter.lock("two").acquire_timeout(Duration::from_secs(40));
            if let Ok(Some(wg)) = got {
                w_fence.store(wg.fencing_token(), Ordering::SeqCst);
                while !stop.load(Ordering::SeqCst) {
                    w_held.store(wg.is_held(), Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(10));
                }
                w_held.store(false, Ordering::SeqCst);
                let _ = wg.release();
            }
        })
    };
    // When the replica becomes master, and when a Sentinel announces it
    // (what the clients hear): the window a deposed master that kept
    // running could still grant in.
    let promoted_at = {
        let replica_url = url(&cluster.servers[1]);
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(16);
            let client = redis::Client::open(replica_url).unwrap();
            let mut con = client.get_connection().ok();
            while Instant::now() < until {
                // The promotion kills the replica's client connections.
                let role = match con.as_mut().map(|c| redis::cmd("ROLE").query(c)) {
                    Some(Ok(v)) => v,
                    _ => {
                        con = client.get_connection().ok();
                        redis::Value::Nil
                    }
                };
                let first = match &role {
                    redis::Value::Array(parts) => parts.first(),
                    _ => None,
                };
                if matches!(first, Some(redis::Value::BulkString(r)) if r == b"master")
                    || matches!(first, Some(redis::Value::SimpleString(r)) if r == "master")
                {
                    return Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            None
        })
    };
    let announced_at = {
        let sentinel = sentinels[0].clone();
        std::thread::spawn(move || {
            let mut con = redis::Client::open(sentinel)
                .unwrap()
                .get_connection()
                .unwrap();
            con.set_read_timeout(Some(Duration::from_secs(16))).unwrap();
            let mut sub = con.as_pubsub();
            if let Err(e) = sub.subscribe("+switch-master") {
                println!("FIGURES deposed master: cannot subscribe: {e}");
                return None;
            }
            match sub.get_message() {
                Ok(_) => Some(Instant::now()),
                Err(e) => {
                    println!("FIGURES deposed master: no announcement: {e}");
                    None
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let master_pid = cluster.servers[0].process.id() as i32;
    // SAFETY: kill(2) on a server process this test started.
    unsafe { libc::kill(master_pid, libc::SIGSTOP) };
    let stopped = Instant::now();
    let mut switched = None;
    let mut both = 0u32;
    let mut a_held_after = false;
    while stopped.elapsed() < Duration::from_secs(16) {
        if switched.is_none() && named_master(&sentinels).is_some_and(|m| m != named_before) {
            switched = Some(stopped.elapsed());
        }
        // Resumed 5.5 s after the stop, as in the issue, and no sooner than
        // 1.5 s after the Sentinels named the new master (the clients hear
        // it about 0.9 s after the promotion: the window GUARANTEES states,
        // which a slow failover on a loaded machine must not put the
        // resumption in).
        let due = switched.is_some_and(|s| {
            stopped.elapsed()
                >= (s + Duration::from_millis(1_500)).max(Duration::from_millis(5_500))
        });
        if due {
            // SAFETY: as above.
            unsafe { libc::kill(master_pid, libc::SIGCONT) };
        }
        let a = g.is_held();
        if a && w_held.load(Ordering::SeqCst) {
            both += 1;
        }
        a_held_after = a;
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above (never leave it stopped).
    unsafe { libc::kill(master_pid, libc::SIGCONT) };
    stop.store(true, Ordering::SeqCst);
    let a_released = g.release();
    t.join().unwrap();
    let (promoted_at, announced_at) = (promoted_at.join().unwrap(), announced_at.join().unwrap());
    if promoted_at.is_none() || announced_at.is_none() {
        println!(
            "FIGURES deposed master: promotion seen {promoted_at:?}, announcement {announced_at:?}"
        );
    }
    if let (Some(p), Some(a)) = (promoted_at, announced_at) {
        println!(
            "FIGURES deposed master: replica promoted {} ms after the stop, announced (+switch-master) {} ms after the promotion",
            (p - stopped).as_millis(),
            a.saturating_duration_since(p).as_millis()
        );
    }
    println!(
        "FIGURES deposed master (lease {} ms, run {run}): switch named {:?} after the stop; \
         samples with two holders: {both}; holder still held at the end: {a_held_after} \
         ({a_released:?}); waiter's fence {}; old master {old}",
        lease.as_millis(),
        switched,
        w_fence.load(Ordering::SeqCst)
    );
    if switched.is_none() {
        common::skip(
            "a_deposed_master_never_grants_a_second_holder",
            "Sentinel did not fail over within 16 s",
        );
        return;
    }
    assert_eq!(
        both,
        0,
        "two holders at once, lease {} ms",
        lease.as_millis()
    );
}

/// Issue 53: a waiter blocked on the master when it is stopped and
/// replaced. At the switch its blocked connection is shut, so it waits on
/// the new master at once: the holder's release there reaches it in
/// about a round trip, not after its block on the stopped server runs out
/// (up to a look's 5 s plus the response timeout).
#[test]
#[serial]
fn a_waiter_blocked_on_a_replaced_master_waits_on_the_new_one() {
    let (cluster, sentinels) = setup();
    // The holder's lease outlasts any failover the test waits for (20 s,
    // below) after its last renewal on the stopped master (a third of the
    // lease before): with 8 s, a loaded machine's 8.9 s failover cost the
    // holder its lease (CI, 2026-12-01), which is not what this tests.
    let builder = || {
        Client::builder()
            .sentinel(&sentinels, "master0")
            .watchdog_timeout(Duration::from_secs(30))
            .outage_tolerance(Duration::from_secs(30))
    };
    let holder = builder().build().unwrap();
    let waiter = builder().build().unwrap();
    let g = holder.lock("moved").acquire().unwrap();
    let named_before = ready_to_fail_over(&cluster, &sentinels, "{moved}");
    let t = std::thread::spawn(move || {
        let got = waiter
            .lock("moved")
            .acquire_timeout(Duration::from_secs(40));
        (Instant::now(), got.map(|g| g.is_some()))
    });
    std::thread::sleep(Duration::from_millis(500));
    let master_pid = cluster.servers[0].process.id() as i32;
    // SAFETY: kill(2) on a server process this test started.
    unsafe { libc::kill(master_pid, libc::SIGSTOP) };
    let stopped = Instant::now();
    let switched = common::eventually(Duration::from_secs(20), || {
        named_master(&sentinels).is_some_and(|m| m != named_before)
    });
    if !switched {
        unsafe { libc::kill(master_pid, libc::SIGCONT) };
        common::skip(
            "a_waiter_blocked_on_a_replaced_master_waits_on_the_new_one",
            "Sentinel did not fail over within 20 s",
        );
        return;
    }
    // The holder's renewals move to the new master, its lease intact.
    std::thread::sleep(Duration::from_millis(1_500));
    let held = g.is_held();
    let released_at = Instant::now();
    let released = g.release();
    let (granted_at, got) = t.join().unwrap();
    // SAFETY: as above (never leave it stopped).
    unsafe { libc::kill(master_pid, libc::SIGCONT) };
    let after = granted_at.saturating_duration_since(released_at);
    println!(
        "FIGURES waiter blocked on a replaced master: switch seen {} ms after the stop; \
         granted {} ms after the release on the new master (holder held: {held}, {released:?})",
        (released_at - stopped).as_millis() - 1_500,
        after.as_millis()
    );
    assert!(
        held && released.is_ok(),
        "the holder lost its lease: {released:?}"
    );
    assert_eq!(got.ok(), Some(true));
    assert!(after < Duration::from_millis(1_500), "{after:?}");
}
