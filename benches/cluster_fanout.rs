//! Wake-up fan-out on Redis Cluster: the bytes every node sends (to clients
//! and over the cluster bus) per latch opening heard by one waiter, with 32
//! clients waiting on latches of their own meanwhile ÷ with none. Measured
//! in the same run, interleaved, for clients on sharded pub/sub (the
//! README's ACL line) and on classic pub/sub (the ACL line before it, which
//! has no `SPUBLISH`: what every cluster client did before).
//!
//! Run: `cargo bench --bench cluster_fanout --features cluster`
//! (`REDLEASE_BENCH_QUICK=1` for a short smoke run).

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_test::cluster::{RedisCluster, RedisClusterConfiguration};
use redlease::Client;
use support::scale;

fn con(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap()
}

fn field(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Bytes every node sent to its clients, and `PUBLISH` messages the nodes
/// sent each other over the cluster bus.
fn output(ports: &[u16]) -> (u64, u64) {
    ports.iter().fold((0, 0), |(bytes, bus), p| {
        let mut c = con(*p);
        let info: String = redis::cmd("INFO").arg("stats").query(&mut c).unwrap();
        let cluster: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
        (
            bytes + field(&info, "total_net_output_bytes:"),
            bus + field(&cluster, "cluster_stats_messages_publish_sent:"),
        )
    })
}

/// Client output bytes and bus messages per opening of one latch that one
/// waiter (another client) waits on, with `idle` clients waiting on
/// latches of their own meanwhile.
fn per_opening(
    ports: &[u16],
    urls: &[String],
    user: &str,
    idle: usize,
    cycles: usize,
) -> (f64, f64) {
    let make = || {
        Client::builder()
            .cluster(urls.to_vec())
            .key_prefix("myapp:")
            .fallback_poll(Duration::from_secs(60))
            .build()
            .unwrap()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let bystanders: Vec<_> = (0..idle)
        .map(|i| {
            let (c, stop) = (make(), stop.clone());
            let name = format!("fan:{user}:idle:{i}");
            assert!(c.count_down_latch(&name).try_set_count(1).unwrap());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = c
                        .count_down_latch(&name)
                        .wait_timeout(Duration::from_millis(500));
                }
                let _ = c.count_down_latch(&name).count_down();
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let (counter, waiter) = (make(), make());
    let name = format!("fan:{user}:cycled");
    let mut raw = redis::cluster::ClusterClient::new(
        ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect::<Vec<_>>(),
    )
    .unwrap()
    .get_connection()
    .unwrap();
    let waiters_key = format!("myapp:{{{name}}}:latch:w");
    let before = output(ports);
    for _ in 0..cycles {
        let latch = counter.count_down_latch(&name);
        assert!(latch.try_set_count(1).unwrap());
        let w = waiter.clone();
        let n = name.clone();
        let t = std::thread::spawn(move || {
            w.count_down_latch(&n)
                .wait_timeout(Duration::from_secs(30))
                .unwrap()
        });
        // The waiter is waiting (registered, and subscribed a moment
        // later) before the opening.
        for _ in 0..5_000 {
            let n: i64 = redis::cmd("ZCARD")
                .arg(&waiters_key)
                .query(&mut raw)
                .unwrap();
            if n > 0 {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        std::thread::sleep(Duration::from_millis(2));
        latch.count_down().unwrap();
        assert!(t.join().unwrap());
    }
    let after = output(ports);
    stop.store(true, Ordering::Relaxed);
    for b in bystanders {
        b.join().unwrap();
    }
    let per = |a: u64, b: u64| (a - b) as f64 / cycles as f64;
    (per(after.0, before.0), per(after.1, before.1))
}

fn main() {
    let mut cluster = RedisCluster::new(RedisClusterConfiguration::default());
    let ports: Vec<u16> = cluster
        .iter_servers()
        .map(|s| s.host_and_port().unwrap().1)
        .collect();
    let classic_acl = common::README_ACL
        .replace("&myapp:redlease:wake*", "&myapp:redlease:wake")
        .replace(" +spublish +ssubscribe +sunsubscribe", "");
    let mut urls = Vec::new();
    for (user, acl) in [
        ("sharded", common::README_ACL.to_string()),
        ("classic", classic_acl),
    ] {
        for p in &ports {
            common::set_acl_user(&mut con(*p), user, &acl);
        }
        urls.push(
            ports
                .iter()
                .map(|p| format!("redis://{user}:s3cret@127.0.0.1:{p}/"))
                .collect::<Vec<_>>(),
        );
    }
    let cycles = scale(300);
    let rounds = if support::quick() { 1 } else { 3 };
    let mut ratios = [Vec::new(), Vec::new()];
    let mut detail = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (i, user) in ["sharded", "classic"].iter().enumerate() {
            let quiet = per_opening(&ports, &urls[i], user, 0, cycles);
            let busy = per_opening(&ports, &urls[i], user, 32, cycles);
            ratios[i].push(busy.0 / quiet.0);
            detail[i].push(format!(
                "{:.0}/{:.0} B, bus {:.1}/{:.1}",
                quiet.0, busy.0, quiet.1, busy.1
            ));
        }
    }
    println!("redlease cluster fan-out benchmark (3 masters, {cycles} latch openings per measure)");
    println!("client output bytes of all nodes per opening, 32 clients waiting on other names / none (target <= 1.2); bus PUBLISH messages per opening");
    for (i, user) in ["sharded pub/sub", "classic pub/sub"].iter().enumerate() {
        println!(
            "{:<16} {:?}  ({})",
            user,
            ratios[i]
                .iter()
                .map(|r| format!("{r:.2}x"))
                .collect::<Vec<_>>(),
            detail[i].join("; ")
        );
    }
    let max = |v: &Vec<f64>| v.iter().cloned().fold(0.0, f64::max);
    println!(
        "{{\"bench\":\"cluster_fanout\",\"sharded_ratio_max\":{:.2},\"classic_ratio_max\":{:.2}}}",
        max(&ratios[0]),
        max(&ratios[1])
    );
    cluster.stop();
}
