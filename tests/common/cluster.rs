//! A local 3-master Redis Cluster for the cluster test files: one shared
//! per test binary (`CLUSTER`, started on first use), or one of a test's
//! own (`proxied_cluster`), and what those tests ask of its nodes.
#![allow(dead_code)]

use std::sync::Mutex;
use std::time::{Duration, Instant};

use once_cell::sync::Lazy;
use redis_test::cluster::{RedisCluster, RedisClusterConfiguration};
use redlease::Client;

pub static CLUSTER: Lazy<Mutex<RedisCluster>> = Lazy::new(|| {
    // Statics are never dropped: stop the servers when the process exits.
    unsafe { libc::atexit(stop_cluster) };
    Mutex::new(RedisCluster::new(RedisClusterConfiguration::default()))
});

extern "C" fn stop_cluster() {
    if let Ok(mut c) = CLUSTER.lock() {
        c.stop();
    }
}

pub fn urls() -> Vec<String> {
    let cluster = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    super::cluster_urls(&cluster)
}

pub fn client() -> Client {
    Client::builder()
        .cluster(urls())
        .watchdog_timeout(Duration::from_millis(900))
        .build()
        .unwrap()
}

/// The score of `token`'s entry in the queue deadlines of lock `name`, on
/// whichever master serves it (message waiters are marked by half a ms).
pub fn entry_score(urls: &[String], name: &str) -> Option<f64> {
    for url in urls {
        let mut con = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        // Another master's key is a MOVED error.
        if let Ok(scores) = redis::cmd("ZRANGE")
            .arg(format!("{{{name}}}:queue:t"))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query::<Vec<(String, f64)>>(&mut con)
        {
            if let Some((_, score)) = scores.first() {
                return Some(*score);
            }
        }
    }
    None
}

/// `name`'s slot half-way between two masters: `from` (its master) marked
/// MIGRATING, `to` IMPORTING, its keys not moved yet.
pub struct Migration {
    pub cons: Vec<redis::Connection>,
    pub slot: i64,
    pub ids: Vec<String>,
    pub from: usize,
    pub to: usize,
}

impl Migration {
    /// Starts moving `name`'s slot from its master to the next node.
    pub fn start(ports: &[u16], name: &str) -> Migration {
        let mut cons: Vec<redis::Connection> = ports.iter().map(|p| con(*p)).collect();
        let tag = format!("{{{name}}}");
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&tag)
            .query(&mut cons[0])
            .unwrap();
        let ids: Vec<String> = cons
            .iter_mut()
            .map(|c| redis::cmd("CLUSTER").arg("MYID").query(c).unwrap())
            .collect();
        // The master: the node that does not redirect a key of the slot.
        let from = (0..cons.len())
            .find(|&i| {
                redis::cmd("EXISTS")
                    .arg(&tag)
                    .query::<i64>(&mut cons[i])
                    .is_ok()
            })
            .expect("the slot's master");
        let to = (from + 1) % cons.len();
        // `to` takes the slot (`SETSLOT … NODE` on the importing node) by
        // bumping its config epoch past every epoch it knows, and a node
        // that still names `from` gives way to the higher epoch. Had `to`
        // not yet heard of a bump `from` made a moment ago (as `to` of an
        // earlier migration), its new epoch could come out at or below
        // `from`'s: a node still naming `from` then tells `to` its claim is
        // stale (an UPDATE message), `to` hands the slot back to `from`,
        // which redirects to `to`, and the slot MOVEs between the two for
        // good (Redis 6.2 under load: an acquire met MOVED for its whole
        // 3 s). So the migration waits until gossip has brought `to`
        // `from`'s epoch; then `to`'s is the highest a node may name.
        let from_epoch = epoch(&mut cons[from], "cluster_my_epoch");
        let t = Instant::now();
        while epoch(&mut cons[to], "cluster_current_epoch") < from_epoch {
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "node {to} has not heard of epoch {from_epoch} in 15 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut m = Migration {
            cons,
            slot,
            ids,
            from,
            to,
        };
        let (from_id, to_id) = (m.ids[from].clone(), m.ids[to].clone());
        m.set(to, "IMPORTING", &from_id);
        m.set(from, "MIGRATING", &to_id);
        m
    }

    /// `CLUSTER SETSLOT <slot> <how> [<id>]` on node `node`.
    pub fn set(&mut self, node: usize, how: &str, id: &str) {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(self.slot).arg(how);
        if !id.is_empty() {
            cmd.arg(id);
        }
        cmd.query::<()>(&mut self.cons[node]).unwrap();
    }

    /// `MIGRATE`s `keys` (of the slot) from `from` to `to` (on 127.0.0.1,
    /// `to_port`).
    pub fn migrate(&mut self, to_port: u16, keys: &[String]) {
        if keys.is_empty() {
            return;
        }
        redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(to_port)
            .arg("")
            .arg(0)
            .arg(5_000)
            .arg("KEYS")
            .arg(keys)
            .query::<()>(&mut self.cons[self.from])
            .unwrap();
    }

    /// Hands the slot to `to` on every node, the importing one first (as
    /// `redis-cli --cluster` does).
    pub fn finish(&mut self) {
        let to_id = self.ids[self.to].clone();
        let (from, to) = (self.from, self.to);
        let others = (0..self.cons.len()).filter(|n| *n != from && *n != to);
        let order: Vec<usize> = [to, from].into_iter().chain(others).collect();
        for node in order {
            self.set(node, "NODE", &to_id);
        }
    }

    /// The keys of the slot still on `from`.
    pub fn keys_left(&mut self) -> Vec<String> {
        redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(self.slot)
            .arg(100)
            .query(&mut self.cons[self.from])
            .unwrap()
    }
}

/// The number `CLUSTER INFO` gives for `field` on `con`'s node.
fn epoch(con: &mut redis::Connection, field: &str) -> u64 {
    let info: String = redis::cmd("CLUSTER").arg("INFO").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in CLUSTER INFO: {info}"))
}

/// Moves the slot of `{name}` (with its keys) from its master to the next
/// one, as a resharding does; returns (from, to) as indexes of `addrs`.
pub fn move_slot(addrs: &[(String, u16)], name: &str) -> (usize, usize) {
    let ports: Vec<u16> = addrs.iter().map(|(_, p)| *p).collect();
    let mut m = Migration::start(&ports, name);
    let (from, to) = (m.from, m.to);
    let keys = m.keys_left();
    if !keys.is_empty() {
        redis::cmd("MIGRATE")
            .arg(&addrs[to].0)
            .arg(addrs[to].1)
            .arg("")
            .arg(0)
            .arg(5_000)
            .arg("KEYS")
            .arg(&keys)
            .query::<()>(&mut m.cons[from])
            .unwrap();
    }
    let to_id = m.ids[to].clone();
    for node in 0..m.cons.len() {
        m.set(node, "NODE", &to_id);
    }
    (from, to)
}

pub fn con(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap()
}

/// `CONFIG SET <key> <value>` on every node.
pub fn config_set_all(ports: &[u16], key: &str, value: &str) {
    for &port in ports {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(key)
            .arg(value)
            .query(&mut con(port))
            .unwrap();
    }
}

/// A `try_acquire` of `lock`, timed: how long it took, and whether it
/// got the lock (or the error's kind).
pub fn timed_try(lock: &redlease::Lock) -> (Duration, Result<bool, redlease::ErrorKind>) {
    let t = Instant::now();
    let r = lock.try_acquire();
    (t.elapsed(), r.map(|g| g.is_some()).map_err(|e| e.kind()))
}

/// The nodes' URLs.
pub fn urls_of(ports: &[u16]) -> Vec<String> {
    ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}/"))
        .collect()
}

pub fn ports(cluster: &RedisCluster) -> Vec<u16> {
    cluster
        .iter_servers()
        .map(|s| s.host_and_port().unwrap().1)
        .collect()
}

/// A cluster whose nodes announce proxies in front of them, or `None` (a
/// recorded skip for `test`) before Redis 7.0, where the announced port
/// does not change at run time.
pub fn proxied_cluster(test: &str) -> Option<(RedisCluster, Vec<super::proxy::Proxy>)> {
    if !super::needs_version(
        test,
        7,
        0,
        "announcing a proxy's port at run time (CONFIG SET cluster-announce-port taking effect in CLUSTER SLOTS)",
    ) {
        return None;
    }
    let cluster = RedisCluster::new(RedisClusterConfiguration::default());
    let ports = ports(&cluster);
    let proxies: Vec<super::proxy::Proxy> = ports
        .iter()
        .map(|&p| super::proxy::Proxy::start(p))
        .collect();
    for (port, proxy) in ports.iter().zip(&proxies) {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-announce-port")
            .arg(proxy.port())
            .query(&mut con(*port))
            .unwrap();
    }
    let announced = super::eventually(Duration::from_secs(20), || {
        ports.iter().all(|port| {
            let slots: redis::Value =
                match redis::cmd("CLUSTER").arg("SLOTS").query(&mut con(*port)) {
                    Ok(v) => v,
                    Err(_) => return false,
                };
            let text = format!("{slots:?}");
            !ports.iter().any(|p| text.contains(&format!("int({p})")))
        })
    });
    assert!(announced);
    Some((cluster, proxies))
}

/// The owner port of `name`'s slot (the node that does not answer MOVED).
pub fn owner(ports: &[u16], name: &str) -> usize {
    (0..ports.len())
        .find(|&i| {
            redis::cmd("EXISTS")
                .arg(format!("{{{name}}}"))
                .query::<i64>(&mut con(ports[i]))
                .is_ok()
        })
        .unwrap()
}

/// How many clients subscribe to the shard channel `channel` on a node.
pub fn shard_subscribers(port: u16, channel: &str) -> i64 {
    let v: Vec<redis::Value> = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query(&mut con(port))
        .unwrap();
    match v.get(1) {
        Some(redis::Value::Int(n)) => *n,
        _ => 0,
    }
}

/// Classic `PUBLISH` messages the nodes sent each other over the bus.
pub fn bus_publishes(ports: &[u16]) -> u64 {
    ports
        .iter()
        .map(|p| {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut con(*p))
                .unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("cluster_stats_messages_publish_sent:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// Two clients on a private cluster whose waiters only a message can wake
/// within the tests' bounds (the fallback poll is a minute).
pub fn sharded_clients(ports: &[u16]) -> (Client, Client) {
    let urls = urls_of(ports);
    let make = || {
        Client::builder()
            .cluster(urls.clone())
            .fallback_poll(Duration::from_secs(60))
            .build()
            .unwrap()
    };
    (make(), make())
}

/// A latch waiter of `waiter` on `name`, started: it returns whether the
/// latch opened and how long after `opened_at` it returned.
pub fn wait_on_latch(
    waiter: &Client,
    name: &'static str,
) -> std::thread::JoinHandle<(bool, Instant)> {
    let w = waiter.clone();
    std::thread::spawn(move || {
        let opened = w
            .count_down_latch(name)
            .wait_timeout(Duration::from_secs(30))
            .unwrap();
        (opened, Instant::now())
    })
}

/// Opens `latch` and checks that its waiter `t` ([`wait_on_latch`]) was
/// woken by it, within 5 s (the fallback poll of these tests' clients is
/// far longer, so only the wake-up can do it).
pub fn open_and_expect_woken(
    latch: &redlease::CountDownLatch,
    t: std::thread::JoinHandle<(bool, Instant)>,
) {
    let at = Instant::now();
    latch.count_down().unwrap();
    let (opened, back) = t.join().unwrap();
    assert!(opened);
    assert!(back - at < Duration::from_secs(5), "{:?}", back - at);
}

/// A cluster for a test of sharded pub/sub, or `None` (a recorded skip)
/// on a server before Redis 7.0, which has none.
pub fn sharded_cluster(test: &str, config: RedisClusterConfiguration) -> Option<RedisCluster> {
    super::needs_version(
        test,
        7,
        0,
        "sharded pub/sub (SSUBSCRIBE, PUBSUB SHARDNUMSUB)",
    )
    .then(|| RedisCluster::new(config))
}

/// Whether the node at `port` answers for `name`'s slot, within 300 ms (a
/// stopped node does not).
pub fn serves(port: u16, name: &str) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return false;
    };
    let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(300)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_millis(300)));
    redis::cmd("EXISTS")
        .arg(format!("{{{name}}}"))
        .query::<i64>(&mut c)
        .is_ok()
}

/// `n` names whose slots master `m` (an index of `ports`) serves.
pub fn names_on(ports: &[u16], m: usize, prefix: &str, n: usize) -> Vec<&'static str> {
    (0..2000)
        .map(|i| format!("{prefix}{i}"))
        .filter(|s| owner(ports, s) == m)
        .take(n)
        .map(|s| &*Box::leak(s.into_boxed_str()))
        .collect()
}
