//! Wake-ups over sharded pub/sub on a Redis 7 Cluster: through the name's
//! master alone, following its slot and its failover, coming back after a
//! dropped link, under the README's ACL.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::cluster::*;
use redis_test::cluster::RedisClusterConfiguration;
use redlease::Client;

/// Issue 10: on a cluster, a release was a classic `PUBLISH`, broadcast to
/// every node over the cluster bus and heard by every subscribed client.
/// It now goes to the name's shard channel (`SPUBLISH`), which only the
/// slot's master carries, and clients subscribe to it there (`SSUBSCRIBE`)
/// only while they wait on the name.
#[test]
fn wake_ups_go_through_the_names_master_alone() {
    let Some(mut cluster) = sharded_cluster(
        "wake_ups_go_through_the_names_master_alone",
        RedisClusterConfiguration::default(),
    ) else {
        return;
    };
    let ports = ports(&cluster);
    let (a, b) = sharded_clients(&ports);
    let name = "cl:sharded";
    let channel = format!("redlease:wake:{{{name}}}");
    let owner = ports[owner(&ports, name)];
    let before = bus_publishes(&ports);
    for _ in 0..3 {
        let latch = a.count_down_latch(name);
        assert!(latch.try_set_count(1).unwrap());
        let t = wait_on_latch(&b, name);
        assert!(
            common::eventually(Duration::from_secs(5), || shard_subscribers(
                owner, &channel
            ) == 1),
            "the waiter did not subscribe on the name's master"
        );
        open_and_expect_woken(&latch, t);
    }
    // A reader waiting for a writer.
    let writer = a.rw_lock(name).write().unwrap();
    let w = b.clone();
    let t = std::thread::spawn(move || {
        w.rw_lock(name)
            .read_timeout(Duration::from_secs(30))
            .unwrap()
            .map(|_| Instant::now())
    });
    assert!(common::eventually(Duration::from_secs(5), || {
        shard_subscribers(owner, &channel) == 1
    }));
    let at = Instant::now();
    writer.release().unwrap();
    let back = t.join().unwrap().expect("the reader got in");
    assert!(back - at < Duration::from_secs(5), "{:?}", back - at);
    // Nobody waits any more: nobody listens.
    assert!(common::eventually(Duration::from_secs(5), || {
        shard_subscribers(owner, &channel) == 0
    }));
    assert_eq!(
        bus_publishes(&ports),
        before,
        "a release was broadcast over the cluster bus"
    );
    cluster.stop();
}

/// A slot that moves while a client waits on one of its names: the old
/// master drops the subscription (`sunsubscribe`), and the waiter
/// subscribes again on the new one, so the opening still wakes it at once.
#[test]
fn a_sharded_wake_up_follows_its_slot() {
    let Some(mut cluster) = sharded_cluster(
        "a_sharded_wake_up_follows_its_slot",
        RedisClusterConfiguration::default(),
    ) else {
        return;
    };
    let ports = ports(&cluster);
    let addrs: Vec<(String, u16)> = ports.iter().map(|p| ("127.0.0.1".into(), *p)).collect();
    let (a, b) = sharded_clients(&ports);
    let name = "cl:sharded-moving";
    let channel = format!("redlease:wake:{{{name}}}");
    let latch = a.count_down_latch(name);
    assert!(latch.try_set_count(1).unwrap());
    let t = wait_on_latch(&b, name);
    let first = ports[owner(&ports, name)];
    assert!(common::eventually(Duration::from_secs(5), || {
        shard_subscribers(first, &channel) == 1
    }));
    let (_, to) = move_slot(&addrs, name);
    assert!(
        common::eventually(Duration::from_secs(10), || shard_subscribers(
            ports[to], &channel
        ) == 1),
        "the waiter did not subscribe again where the slot went"
    );
    open_and_expect_woken(&latch, t);
    cluster.stop();
}

/// A subscriber connection the server drops (here `CLIENT KILL`): the
/// waiter subscribes again and is still woken by the opening.
#[test]
fn a_sharded_subscription_comes_back_after_its_connection_drops() {
    let Some(mut cluster) = sharded_cluster(
        "a_sharded_subscription_comes_back_after_its_connection_drops",
        RedisClusterConfiguration::default(),
    ) else {
        return;
    };
    let ports = ports(&cluster);
    let (a, b) = sharded_clients(&ports);
    let name = "cl:sharded-killed";
    let channel = format!("redlease:wake:{{{name}}}");
    let owner = ports[owner(&ports, name)];
    let latch = a.count_down_latch(name);
    assert!(latch.try_set_count(1).unwrap());
    let t = wait_on_latch(&b, name);
    assert!(common::eventually(Duration::from_secs(5), || {
        shard_subscribers(owner, &channel) == 1
    }));
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut con(owner))
        .unwrap();
    assert_eq!(killed, 1);
    assert!(
        common::eventually(Duration::from_secs(10), || shard_subscribers(
            owner, &channel
        ) == 1),
        "the waiter did not subscribe again"
    );
    open_and_expect_woken(&latch, t);
    cluster.stop();
}

/// The README's ACL line, for the prefix `myapp:`.
const ACL: &str = common::README_ACL;

/// Under the README's ACL line, wake-ups are sharded. Under the line from
/// before (no `SPUBLISH`, one channel) they fall back to classic pub/sub,
/// and still wake a waiter at once.
#[test]
fn wake_ups_under_the_readme_acl_and_the_line_before_it() {
    let Some(mut cluster) = sharded_cluster(
        "wake_ups_under_the_readme_acl_and_the_line_before_it",
        RedisClusterConfiguration::default(),
    ) else {
        return;
    };
    let ports = ports(&cluster);
    let before_sharding = ACL
        .replace("&myapp:redlease:wake*", "&myapp:redlease:wake")
        .replace(" +spublish +ssubscribe +sunsubscribe", "");
    let name = "acl";
    let channel = "myapp:redlease:wake:{acl}";
    let owner = ports[owner(&ports, name)];
    for (acl, sharded) in [(ACL.to_string(), true), (before_sharding, false)] {
        for p in &ports {
            common::set_acl_user(&mut con(*p), "app", &format!("reset {acl}"));
        }
        let urls: Vec<String> = ports
            .iter()
            .map(|p| format!("redis://app:s3cret@127.0.0.1:{p}/"))
            .collect();
        let make = || {
            Client::builder()
                .cluster(urls.clone())
                .key_prefix("myapp:")
                .fallback_poll(Duration::from_secs(60))
                .build()
                .unwrap()
        };
        let (a, b) = (make(), make());
        let bus = bus_publishes(&ports);
        let latch = a.count_down_latch(name);
        assert!(latch.try_set_count(1).unwrap());
        let t = wait_on_latch(&b, name);
        if sharded {
            assert!(common::eventually(Duration::from_secs(5), || {
                shard_subscribers(owner, channel) == 1
            }));
        } else {
            // The classic subscription is made before the waiter looks
            // again; give it time to be waiting.
            std::thread::sleep(Duration::from_millis(500));
            assert_eq!(shard_subscribers(owner, channel), 0);
        }
        open_and_expect_woken(&latch, t);
        let broadcast = bus_publishes(&ports) - bus;
        assert_eq!(broadcast > 0, !sharded, "{broadcast} bus messages");
    }
    cluster.stop();
}

/// The name's master stopped (SIGSTOP) and failed over while a client
/// waited: its subscription sat on the stopped master, nothing told it, and
/// the opening on the new master woke it only when the old one was
/// resumed (found by an adversarial review). A link silent for a second is
/// now asked for a PING; no answer within the response timeout gives it
/// up, and the waiter subscribes where the slot is now.
#[test]
fn a_sharded_waiter_follows_its_master_failing_over() {
    let Some(mut cluster) = sharded_cluster(
        "a_sharded_waiter_follows_its_master_failing_over",
        RedisClusterConfiguration::single_replica_config(),
    ) else {
        return;
    };
    let ports = ports(&cluster);
    let urls = urls_of(&ports);
    let make = || {
        Client::builder()
            .cluster(urls.clone())
            .response_timeout(Duration::from_millis(500))
            .connect_timeout(Duration::from_millis(500))
            .fallback_poll(Duration::from_secs(60))
            // The waiter looks again when its link is given up, and rides
            // out the failover.
            .outage_tolerance(Duration::from_secs(50))
            .build()
            .unwrap()
    };
    let (a, b) = (make(), make());
    let name = "cl:sharded-failover";
    let channel = format!("redlease:wake:{{{name}}}");
    let m = owner(&ports, name);
    let latch = a.count_down_latch(name);
    assert!(latch.try_set_count(1).unwrap());
    let w = b.clone();
    let t = std::thread::spawn(move || {
        let opened = w
            .count_down_latch(name)
            .wait_timeout(Duration::from_secs(60))
            .unwrap();
        (opened, Instant::now())
    });
    assert!(common::eventually(Duration::from_secs(5), || {
        shard_subscribers(ports[m], &channel) == 1
    }));
    let pid = cluster.servers[m].process.id() as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let failed_over = common::eventually(Duration::from_secs(40), || {
        (0..ports.len()).any(|i| i != m && serves(ports[i], name))
    });
    // Count down on the new master (retried through the failover).
    let mut counted = None;
    for _ in 0..100 {
        if latch.count_down().is_ok() {
            counted = Some(Instant::now());
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let woken = common::eventually(Duration::from_secs(10), || t.is_finished());
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let (opened, back) = t.join().unwrap();
    cluster.stop();
    assert!(failed_over, "no replica took over");
    let counted = counted.expect("the count-down never ran on the new master");
    assert!(woken && opened, "the opening did not wake the waiter");
    assert!(
        back.saturating_duration_since(counted) < Duration::from_secs(5),
        "woken {:?} after the opening",
        back.saturating_duration_since(counted)
    );
}

/// How many times the library logged a request its wake-up connection
/// refused.
static REFUSALS_LOGGED: AtomicUsize = AtomicUsize::new(0);

struct RefusalCounter;

impl log::Log for RefusalCounter {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }

    fn log(&self, record: &log::Record) {
        let text = record.args().to_string();
        // (The wording before the fix was "SSUBSCRIBE refused".)
        let refusal = text.contains("refused a request") || text.contains("SSUBSCRIBE refused");
        if record.target().starts_with("redlease") && refusal {
            REFUSALS_LOGGED.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn flush(&self) {}
}

/// A slot left a master while a client's last waiter on one of its names
/// was leaving: the master's own `sunsubscribe` was taken for the reply to
/// our SUNSUBSCRIBE, and the real reply (`-MOVED`) for the reply to the
/// next request on that connection, another name's SSUBSCRIBE, which the
/// server had accepted. That name was then believed unsubscribed, its last
/// waiter left without SUNSUBSCRIBE, and the subscription stayed on the
/// master (found by an adversarial review). An error reply now gives the
/// connection up, with every subscription on it.
#[test]
fn a_moved_unsubscription_leaves_no_subscription_behind() {
    let Some(mut cluster) = sharded_cluster(
        "a_moved_unsubscription_leaves_no_subscription_behind",
        RedisClusterConfiguration::default(),
    ) else {
        return;
    };
    let _ = log::set_logger(&RefusalCounter);
    log::set_max_level(log::LevelFilter::Debug);
    let ports = ports(&cluster);
    let addrs: Vec<(String, u16)> = ports.iter().map(|p| ("127.0.0.1".into(), *p)).collect();
    let (a, b) = sharded_clients(&ports);
    // Three names on one master.
    let first = owner(&ports, "cl:mv:0");
    let same: Vec<&'static str> = (0..400)
        .map(|i| format!("cl:mv:{i}"))
        .filter(|n| owner(&ports, n) == first)
        .take(3)
        .map(|n| &*Box::leak(n.into_boxed_str()))
        .collect();
    let (x, c, d) = (same[0], same[1], same[2]);
    let master = ports[first];
    for n in [x, c, d] {
        assert!(a.count_down_latch(n).try_set_count(1).unwrap());
    }
    let channel = |n: &str| format!("redlease:wake:{{{n}}}");
    let (b0, b1) = (b.clone(), b.clone());
    let w0 = std::thread::spawn(move || {
        b0.count_down_latch(x)
            .wait_timeout(Duration::from_secs(40))
            .unwrap()
    });
    let w1 = std::thread::spawn(move || {
        b1.count_down_latch(c)
            .wait_timeout(Duration::from_secs(40))
            .unwrap()
    });
    assert!(common::eventually(Duration::from_secs(5), || {
        shard_subscribers(master, &channel(x)) == 1 && shard_subscribers(master, &channel(c)) == 1
    }));
    // Back the link's reader up with messages on X's channel, so that
    // what follows reaches it in one batch.
    let mut flood = redis::pipe();
    for _ in 0..250_000 {
        flood
            .cmd("SPUBLISH")
            .arg(channel(x))
            .arg("zz:none")
            .ignore();
    }
    let mut fc = con(master);
    fc.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let () = flood.query(&mut fc).unwrap();
    // C's slot leaves the master; C opens from the waiter's own client, so
    // its waiter leaves and unsubscribes after the slot left (-MOVED).
    move_slot(&addrs, c);
    b.count_down_latch(c).count_down().unwrap();
    assert!(w1.join().unwrap());
    // Another name of the master is waited on meanwhile, and opens as soon
    // as the reader has met the `-MOVED`.
    let b2 = b.clone();
    let w2 = std::thread::spawn(move || {
        b2.count_down_latch(d)
            .wait_timeout(Duration::from_secs(30))
            .unwrap()
    });
    // The flood makes the `-MOVED` meet the reader with D's subscription
    // in one batch; on a quick reader (seen once on Valkey 9.1 in a loaded
    // CI run) it never comes, and the run checks only that D's
    // subscription goes with its waiter, saying so.
    let met = common::eventually(Duration::from_secs(20), || {
        REFUSALS_LOGGED.load(Ordering::SeqCst) > 0
    });
    if !met {
        println!(
            "FIGURES the -MOVED unsubscription was not met this run: the race was not reached"
        );
    }
    a.count_down_latch(d).count_down().unwrap();
    assert!(w2.join().unwrap());
    // Nobody waits on D any more: nobody listens.
    let left = common::eventually(Duration::from_secs(5), || {
        shard_subscribers(master, &channel(d)) == 0
    });
    a.count_down_latch(x).count_down().unwrap();
    assert!(w0.join().unwrap());
    cluster.stop();
    assert!(left, "D's subscription outlived its last waiter");
}

/// One name whose channel an ACL refuses: the error reply gave the whole
/// connection up with a 10 s pause for every channel on it, so the other
/// names of that master lost their subscriptions again and again, and
/// their waiters were woken by the 100 ms poll (found by an adversarial
/// review). A refusal answers the subscription it refuses: only that one
/// pauses.
#[test]
fn a_refused_channel_leaves_the_other_names_subscribed() {
    let Some(mut cluster) = sharded_cluster(
        "a_refused_channel_leaves_the_other_names_subscribed",
        RedisClusterConfiguration::default(),
    ) else {
        return;
    };
    let ports = ports(&cluster);
    for p in &ports {
        let rules = "resetchannels &redlease:wake:{redlease} &redlease:wake:{ok*";
        common::set_acl_user(&mut con(*p), "default", rules);
    }
    let (a, b) = sharded_clients(&ports);
    let ok = names_on(&ports, 0, "ok", 1)[0];
    let no = names_on(&ports, 0, "no", 1)[0];
    assert!(a.count_down_latch(ok).try_set_count(1).unwrap());
    assert!(a.count_down_latch(no).try_set_count(1).unwrap());
    let t = wait_on_latch(&b, ok);
    let channel = format!("redlease:wake:{{{ok}}}");
    assert!(common::eventually(Duration::from_secs(5), || {
        shard_subscribers(ports[0], &channel) == 1
    }));
    let bn = b.clone();
    let refused = std::thread::spawn(move || {
        let _ = bn
            .count_down_latch(no)
            .wait_timeout(Duration::from_secs(12));
    });
    let (mut samples, mut gone) = (0, 0);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(11) {
        samples += 1;
        if shard_subscribers(ports[0], &channel) == 0 {
            gone += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = b.wakeups_delivered();
    let at = Instant::now();
    a.count_down_latch(ok).count_down().unwrap();
    let (opened, back) = t.join().unwrap();
    refused.join().unwrap();
    let by_message = b.wakeups_delivered() > before;
    cluster.stop();
    assert!(opened);
    assert_eq!(
        gone, 0,
        "the other name's subscription was gone in {gone} of {samples} samples"
    );
    assert!(
        by_message,
        "woken {:?} after the opening, not by its message",
        back - at
    );
}
