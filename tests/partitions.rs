//! Real network partitions (Linux network namespaces, see
//! `common::netns`): packets vanish, nothing is refused. A client cut off
//! from its master while it acquires, holds or releases must learn what
//! GUARANTEES.md says, within the bound it states, and nobody else may be
//! let in while its lease is valid. Needs root (namespaces); elsewhere each
//! test says SKIPPED with the reason.
//!
//! Times are CLOCK_MONOTONIC stamps taken by the processes themselves
//! (shared by every process on the machine), so the order of what the cut
//! off holder learned and what the other client was granted is measured,
//! not inferred.

mod common;

use std::io::BufRead;
use std::time::Duration;

use common::netns::{now_us, ClusterNet, Net};
use common::worker::{say, Worker};
use serial_test::serial;

/// The lease (watchdog) of the cut-off holder: short, so that each test
/// is quick, and long enough for a loaded machine's scheduling.
const LEASE_MS: u64 = 1500;

fn net(test: &str) -> Option<Net> {
    match Net::new(&[]) {
        Ok(n) => Some(n),
        Err(why) => {
            common::skip(test, &format!("no network namespaces here: {why}"));
            None
        }
    }
}

/// `"<word> <a> <b> ..."` → the numbers after the word.
fn nums(line: &str, word: &str) -> Vec<u64> {
    let rest = line
        .strip_prefix(word)
        .unwrap_or_else(|| panic!("expected {word:?}, got {line:?}"));
    rest.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

fn worker(net: &Net, inside_server: bool, role: &str, name: &str) -> Worker {
    let (ns, url) = if inside_server {
        (net.server_ns(0), net.local_url())
    } else {
        (net.client_ns(0), net.url())
    };
    Worker::spawn_in(
        Some(ns),
        "net_worker",
        &[
            ("REDLEASE_NET_ROLE", role.into()),
            ("REDLEASE_NET_URL", url),
            ("REDLEASE_NET_NAME", name.into()),
        ],
    )
}

/// The worker side. Roles:
/// - `holder`: takes the lock (watchdog `LEASE_MS`), says `held <fence>
///   <t>`, then `lost <t>` when its LostSignal fires; on `release` from
///   the test it releases and says `released ok|<error kind> <t>`.
/// - `taker`: tries every 5 ms for up to 30 s; says `granted <fence> <t>`
///   and holds it; on `check` says `holds <0|1>`.
/// - `waiter`: waits up to 3 s; says `waiting <t>`, then `got <fence> <t>` or
///   `none <t>` or `error <kind> <t>`.
#[test]
fn net_worker() {
    let Ok(role) = std::env::var("REDLEASE_NET_ROLE") else {
        return;
    };
    let url = std::env::var("REDLEASE_NET_URL").unwrap();
    let name = std::env::var("REDLEASE_NET_NAME").unwrap();
    let builder = redlease::Client::builder();
    // Several URLs: Redlock over them, or the seeds of a Cluster.
    let cluster = std::env::var("REDLEASE_NET_MODE").is_ok_and(|m| m == "cluster");
    let builder = if cluster {
        builder.cluster(url.split(','))
    } else if url.contains(',') {
        builder.redlock(url.split(','))
    } else {
        builder.url(&url)
    };
    let client = builder
        .watchdog_timeout(Duration::from_millis(LEASE_MS))
        .response_timeout(Duration::from_millis(1000))
        .connect_timeout(Duration::from_millis(1000))
        .build()
        .unwrap();
    let lines = std::io::stdin().lock().lines();
    match role.as_str() {
        "holder" => {
            let g = client.lock(&name).acquire().unwrap();
            let lost = g.lost_signal();
            say(format!("held {} {}", g.fencing_token(), now_us()));
            // A release also fires the signal: only a loss before it is
            // reported.
            let releasing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let told = releasing.clone();
            std::thread::spawn(move || {
                if lost.wait_timeout(Duration::from_secs(60))
                    && !told.load(std::sync::atomic::Ordering::SeqCst)
                {
                    say(format!("lost {}", now_us()));
                }
            });
            for line in lines.map_while(Result::ok) {
                if line == "deadline" {
                    // When this holder's own view of its lease ends: what
                    // `is_held` goes by, whatever its threads' scheduling.
                    say(format!(
                        "deadline {}",
                        now_us() + g.expires_in().as_micros() as u64
                    ));
                }
                if line == "release" {
                    releasing.store(true, std::sync::atomic::Ordering::SeqCst);
                    let r = g.release();
                    let what = match &r {
                        Ok(()) => "ok".to_string(),
                        Err(e) => format!("{:?}", e.kind()),
                    };
                    say(format!("released {what} {}", now_us()));
                    break;
                }
            }
        }
        "taker" => {
            let end = std::time::Instant::now() + Duration::from_secs(30);
            let g = loop {
                assert!(std::time::Instant::now() < end, "never granted");
                if let Ok(Some(g)) = client.lock(&name).try_acquire() {
                    break g;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            say(format!("granted {} {}", g.fencing_token(), now_us()));
            for line in lines.map_while(Result::ok) {
                if line == "check" {
                    say(format!(
                        "holds {}",
                        u8::from(client.lock(&name).is_locked().unwrap_or(false) && g.is_held())
                    ));
                }
            }
        }
        "waiter" => {
            say(format!("waiting {}", now_us()));
            match client.lock(&name).acquire_timeout(Duration::from_secs(3)) {
                Ok(Some(g)) => say(format!("got {} {}", g.fencing_token(), now_us())),
                Ok(None) => say(format!("none {}", now_us())),
                Err(e) => say(format!("error {:?} {}", e.kind(), now_us())),
            }
        }
        "cmd" => {
            // Driven line by line: `acquire`, `release`, `deadline`.
            let releasing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let mut held: Option<redlease::LockGuard> = None;
            for line in lines.map_while(Result::ok) {
                match line.as_str() {
                    "acquire" => match client.lock(&name).acquire_timeout(Duration::from_secs(5)) {
                        Ok(Some(g)) => {
                            say(format!("held {} {}", g.fencing_token(), now_us()));
                            releasing.store(false, std::sync::atomic::Ordering::SeqCst);
                            let (lost, told) = (g.lost_signal(), releasing.clone());
                            std::thread::spawn(move || {
                                if lost.wait_timeout(Duration::from_secs(60))
                                    && !told.load(std::sync::atomic::Ordering::SeqCst)
                                {
                                    say(format!("lost {}", now_us()));
                                }
                            });
                            held = Some(g);
                        }
                        Ok(None) => say(format!("none {}", now_us())),
                        Err(e) => say(format!("error {:?} {}", e.kind(), now_us())),
                    },
                    "release" => {
                        releasing.store(true, std::sync::atomic::Ordering::SeqCst);
                        let what = match held.take().map(|g| g.release()) {
                            Some(Ok(())) => "ok".to_string(),
                            Some(Err(e)) => format!("{:?}", e.kind()),
                            None => "nothing".to_string(),
                        };
                        say(format!("released {what} {}", now_us()));
                    }
                    "deadline" => {
                        let left = held
                            .as_ref()
                            .map_or(0, |g| g.expires_in().as_micros() as u64);
                        say(format!("deadline {}", now_us() + left));
                    }
                    _ => {}
                }
            }
        }
        other => panic!("unknown role {other}"),
    }
}

/// Cut off while it holds: its renewals vanish. It must learn of the loss
/// (LostSignal) before the server lets anyone else in — never after — and
/// within one lease of the cut; the next holder's fence is larger; once
/// the network heals, its release cannot touch the new holder's lock.
#[test]
#[serial]
fn a_holder_cut_off_learns_it_lost_before_anyone_else_gets_in() {
    let Some(net) = net("a_holder_cut_off_learns_it_lost_before_anyone_else_gets_in") else {
        return;
    };
    let mut holder = worker(&net, false, "holder", "cut");
    let held = nums(&holder.next(Duration::from_secs(10)), "held ");
    // Let a renewal or two succeed first: the cut lands mid-lease.
    std::thread::sleep(Duration::from_millis(700));
    let cut_at = now_us();
    net.partition();
    let mut taker = worker(&net, true, "taker", "cut");
    // Once no reply can arrive any more, the holder's view of its lease is
    // fixed: it ends at `deadline`.
    std::thread::sleep(Duration::from_millis(100));
    holder.tell("deadline");
    let deadline = nums(&holder.next(Duration::from_secs(10)), "deadline ")[0];
    let lost = nums(&holder.next(Duration::from_secs(10)), "lost ")[0];
    let granted = nums(&taker.next(Duration::from_secs(10)), "granted ");
    check_holder_knew_first(
        "partition while held",
        cut_at,
        (held[0], deadline, lost),
        &granted,
    );
    assert!(
        lost - cut_at <= LEASE_MS * 1000,
        "learned {} ms after the cut, beyond one lease",
        (lost - cut_at) / 1000
    );
    net.heal();
    holder.tell("release");
    let released = holder.next(Duration::from_secs(10));
    assert!(!released.starts_with("released ok"), "{released}");
    taker.tell("check");
    assert_eq!(taker.next(Duration::from_secs(10)), "holds 1");
}

/// Cut off while it releases: the release cannot reach the server, so it
/// fails within the response timeout (it must not hang, nor claim a
/// release it could not make), and the lease runs out by itself — nobody
/// is let in before the lease the server knows has ended.
#[test]
#[serial]
fn a_release_cut_off_fails_in_time_and_the_lease_ends_by_itself() {
    let Some(net) = net("a_release_cut_off_fails_in_time_and_the_lease_ends_by_itself") else {
        return;
    };
    let mut holder = worker(&net, false, "holder", "rel");
    let held = nums(&holder.next(Duration::from_secs(10)), "held ");
    net.partition();
    let cut_at = now_us();
    holder.tell("release");
    let taker = worker(&net, true, "taker", "rel");
    let mut released = None;
    let mut lost = None;
    // The release's answer and the LostSignal come in either order.
    for _ in 0..2 {
        let line = holder.next(Duration::from_secs(10));
        if line.starts_with("released") {
            released = Some(line);
        } else {
            lost = Some(nums(&line, "lost ")[0]);
        }
        if released.is_some() {
            break;
        }
    }
    let released = released.unwrap();
    let at = *nums(&released, "released ").last().expect("a time stamp");
    assert!(!released.starts_with("released ok"), "{released}");
    assert!(
        at - cut_at <= 2_500_000,
        "the release took {} ms (response timeout 1 s)",
        (at - cut_at) / 1000
    );
    let granted = nums(&taker.next(Duration::from_secs(10)), "granted ");
    println!(
        "FIGURES partition during release: failed after {} ms; next holder in after {} ms (lease {LEASE_MS} ms)",
        (at - cut_at) / 1000,
        (granted[1] - cut_at) / 1000
    );
    assert!(granted[0] > held[0]);
    if let Some(lost) = lost {
        assert!(lost <= granted[1]);
    }
    net.heal();
}

/// Cut off while it is blocked waiting: the holder's release hands the
/// lock to it, and the grant's reply vanishes. The waiter never learns it
/// was granted, so nobody may be left holding for it: the grant its pop
/// took lapses within the claim window (0.5 s) and someone else gets in; the
/// cut-off waiter's call returns by its deadline.
#[test]
#[serial]
fn a_grant_to_a_cut_off_waiter_lapses_and_its_wait_ends_in_time() {
    let Some(net) = net("a_grant_to_a_cut_off_waiter_lapses_and_its_wait_ends_in_time") else {
        return;
    };
    let mut holder = worker(&net, true, "holder", "grant");
    nums(&holder.next(Duration::from_secs(10)), "held ");
    let waiter = worker(&net, false, "waiter", "grant");
    let began = nums(&waiter.next(Duration::from_secs(10)), "waiting ")[0];
    std::thread::sleep(Duration::from_millis(300)); // blocked on the server
    net.partition();
    let cut_at = now_us();
    holder.tell("release");
    let released = holder.next(Duration::from_secs(10));
    assert!(released.starts_with("released ok"), "{released}");
    let mut taker = worker(&net, true, "taker", "grant");
    let granted = nums(&taker.next(Duration::from_secs(10)), "granted ");
    let waited = waiter.next(Duration::from_secs(10));
    println!(
        "FIGURES partition of a blocked waiter: the lost grant freed after {} ms; the waiter returned {waited:?}",
        (granted[1] - cut_at) / 1000
    );
    assert!(
        granted[1] - cut_at <= 2_500_000,
        "a grant nobody could take held the name {} ms",
        (granted[1] - cut_at) / 1000
    );
    assert!(
        !waited.starts_with("got"),
        "the cut-off waiter cannot have it: {waited}"
    );
    // Its 3 s wait ends by its deadline (and one response timeout, 1 s,
    // for a call in flight at the deadline).
    let returned: u64 = waited.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        returned - began <= 4_500_000,
        "a 3 s wait returned after {} ms",
        (returned - began) / 1000
    );
    net.heal();
    taker.tell("check");
    assert_eq!(taker.next(Duration::from_secs(10)), "holds 1");
}

fn redlock_net(test: &str, clients: usize) -> Option<Net> {
    match Net::mesh(3, clients, &[]) {
        Ok(n) => Some(n),
        Err(why) => {
            common::skip(test, &format!("no network namespaces here: {why}"));
            None
        }
    }
}

/// A Redlock client in client namespace `c`, driven by `cmd` lines.
fn redlock_worker(net: &Net, c: usize, name: &str) -> Worker {
    Worker::spawn_in(
        Some(net.client_ns(c)),
        "net_worker",
        &[
            ("REDLEASE_NET_ROLE", "cmd".into()),
            ("REDLEASE_NET_URL", net.urls_from(c).join(",")),
            ("REDLEASE_NET_NAME", name.into()),
        ],
    )
}

/// Tells the `cmd` worker `other` to acquire until it gets in (each try
/// waits up to 5 s); `[fence, time]`. Fails past `limit` after `cut_at`.
fn until_granted(
    other: &mut Worker,
    cut_at: u64,
    limit: Duration,
    premise: Premise,
) -> Option<Vec<u64>> {
    loop {
        other.tell("acquire");
        let line = other.next(Duration::from_secs(20));
        if let Some(rest) = line.strip_prefix("held ") {
            return Some(rest.split(' ').filter_map(|w| w.parse().ok()).collect());
        }
        if now_us() - cut_at >= limit.as_micros() as u64 {
            // Nobody could get in because the fault never became what the
            // test is about (the cluster did not fail over): not a verdict.
            if premise.and_then(|p| p()).is_some() {
                return None;
            }
            panic!("never granted: {line}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The history check of a holder cut off at `cut_at` while another client
/// got in (`granted`: `[fence, time]`): its own view of its lease
/// (`deadline`) ended before the other was let in, its LostSignal (`lost`)
/// fired promptly, the next fence is larger than its (`first`). Prints
/// the figures under `what`.
fn check_holder_knew_first(
    what: &str,
    cut_at: u64,
    (first, deadline, lost): (u64, u64, u64),
    granted: &[u64],
) {
    println!(
        "FIGURES {what}: the holder's lease ended for it {} ms after the cut, its LostSignal \
         fired {} ms after that, the next holder got in {} ms after the cut (lease {LEASE_MS} ms)",
        (deadline - cut_at) / 1000,
        lost.saturating_sub(deadline) / 1000,
        (granted[1] - cut_at) / 1000
    );
    // No overlap as the holder sees it.
    assert!(
        deadline <= granted[1],
        "the cut-off holder believed in its lease {} µs after the next holder was let in",
        deadline - granted[1]
    );
    // And it was told promptly (a thread's wake-up on a loaded machine).
    assert!(
        lost.saturating_sub(deadline) <= 250_000,
        "LostSignal fired {} ms after the lease ended",
        (lost - deadline) / 1000
    );
    assert!(granted[0] > first, "fences {first} then {}", granted[0]);
}

/// What must have happened for a test's verdict to mean anything, asked
/// when nobody got in: `Some(why)` if it did not.
type Premise<'a> = Option<&'a dyn Fn() -> Option<String>>;

/// Cuts (`cut`) while `holder` holds the name with fence `first`, then the
/// history check against `other` (a `cmd` worker) getting in within
/// `limit` (see [`check_holder_knew_first`]).
fn cut_while_held(
    what: &str,
    (holder, other): (&mut Worker, &mut Worker),
    first: u64,
    limit: Duration,
    cut: impl FnOnce(),
    premise: Premise,
) -> Result<(), String> {
    let cut_at = now_us();
    cut();
    // Once no reply can arrive any more, the holder's view of its lease is
    // fixed: it ends at `deadline`.
    std::thread::sleep(Duration::from_millis(100));
    holder.tell("deadline");
    let deadline = nums(&holder.next(Duration::from_secs(10)), "deadline ")[0];
    let Some(granted) = until_granted(other, cut_at, limit, premise) else {
        return Err(premise.and_then(|p| p()).unwrap_or_default());
    };
    let lost = nums(&holder.next(Duration::from_secs(10)), "lost ")[0];
    check_holder_knew_first(what, cut_at, (first, deadline, lost), &granted);
    Ok(())
}

/// A Cluster in namespaces (3 masters, node timeout 1 s), or a visible skip.
fn cluster_net(test: &str) -> Option<ClusterNet> {
    if !cfg!(feature = "cluster") {
        common::skip(test, "needs the cluster feature");
        return None;
    }
    match ClusterNet::start(3, 1000) {
        Ok(n) => Some(n),
        Err(why) => {
            common::skip(test, &format!("no network namespaces here: {why}"));
            None
        }
    }
}

/// Redlock, one master of three cut off from the client: the majority
/// serves — the hold is released and taken again with a larger fence
/// while the minority is unreachable — and the key the cut-off master
/// kept (the release could not reach it) does not block anyone after the
/// network heals.
#[test]
#[serial]
fn a_redlock_minority_cut_off_does_not_stop_the_majority() {
    let Some(net) = redlock_net("a_redlock_minority_cut_off_does_not_stop_the_majority", 1) else {
        return;
    };
    let mut w = redlock_worker(&net, 0, "min");
    w.tell("acquire");
    let first = nums(&w.next(Duration::from_secs(10)), "held ")[0];
    net.cut(0, 2);
    w.tell("release");
    let released = w.next(Duration::from_secs(10));
    assert!(released.starts_with("released ok"), "{released}");
    // The cut-off master still has the first hold's key.
    assert_eq!(net.cli(2, &["exists", "{min}"]), "1");
    w.tell("acquire");
    let second = nums(&w.next(Duration::from_secs(10)), "held ")[0];
    assert!(second > first, "fences {first} then {second}");
    w.tell("release");
    assert!(w.next(Duration::from_secs(10)).starts_with("released ok"));
    net.join(0, 2);
    // The stale key is still there after healing, and blocks nobody.
    assert_eq!(net.cli(2, &["exists", "{min}"]), "1");
    w.tell("acquire");
    let third = nums(&w.next(Duration::from_secs(10)), "held ")[0];
    assert!(third > second, "fences {second} then {third}");
    w.tell("release");
    assert!(w.next(Duration::from_secs(10)).starts_with("released ok"));
}

/// Redlock, a holder cut off from two masters of three: its renewals no
/// longer reach a majority, so it loses the lease by quorum. Its own view
/// of the lease ends before another client (which reaches every master)
/// is let in, its LostSignal fires, and the next fence is larger.
#[test]
#[serial]
fn a_redlock_holder_cut_off_from_its_majority_learns_it_lost() {
    let Some(net) = redlock_net(
        "a_redlock_holder_cut_off_from_its_majority_learns_it_lost",
        2,
    ) else {
        return;
    };
    let mut holder = redlock_worker(&net, 0, "maj");
    let mut other = redlock_worker(&net, 1, "maj");
    holder.tell("acquire");
    let first = nums(&holder.next(Duration::from_secs(10)), "held ")[0];
    std::thread::sleep(Duration::from_millis(700));
    cut_while_held(
        "Redlock holder cut off from 2 of 3 masters",
        (&mut holder, &mut other),
        first,
        Duration::from_secs(20),
        || {
            net.cut(0, 0);
            net.cut(0, 1);
        },
        None,
    )
    .expect("no premise to fail");
}

/// Cluster: the master serving the name is cut off from everyone (the
/// client and the rest of the cluster) while a client holds the name; its
/// replica takes over (the cluster's own failover, node timeout 1 s).
/// The holder's renewals reach no master of that slot, so its own view of
/// the lease ends before another client is let in on the new master; its
/// LostSignal fires; the next fence is larger.
#[test]
#[serial]
fn a_cluster_master_cut_off_fails_over_and_its_holder_learns_it_lost() {
    let Some(net) =
        cluster_net("a_cluster_master_cut_off_fails_over_and_its_holder_learns_it_lost")
    else {
        return;
    };
    let mut holder = cluster_worker(&net, "cl-cut");
    let mut other = cluster_worker(&net, "cl-cut");
    holder.tell("acquire");
    let first = nums(&holder.next(Duration::from_secs(20)), "held ")[0];
    let master = net.master_of(0, "{cl-cut}").expect("a master for the name");
    std::thread::sleep(Duration::from_millis(700));
    cut_while_held(
        "Cluster master cut off (its replica takes over)",
        (&mut holder, &mut other),
        first,
        Duration::from_secs(40),
        || net.isolate(master),
        None,
    )
    .expect("no premise to fail");
    net.rejoin(master);
}

/// A Cluster worker (`cmd` role) in the client namespace.
fn cluster_worker(net: &ClusterNet, name: &str) -> Worker {
    Worker::spawn_in(
        Some(net.client_ns()),
        "net_worker",
        &[
            ("REDLEASE_NET_ROLE", "cmd".into()),
            ("REDLEASE_NET_MODE", "cluster".into()),
            ("REDLEASE_NET_URL", net.urls().join(",")),
            ("REDLEASE_NET_NAME", name.into()),
        ],
    )
}

/// The Cluster failover that *loses* the lease: the name's replica stopped
/// and its replication link cut (replication cannot carry the lease), a
/// lock taken on the master, the master cut off and the replica resumed:
/// the cluster promotes it without the lease, and another client takes
/// the lock there. The second fence is larger, and the first holder's own
/// view of its lease ended before the second was let in (its LostSignal
/// fired).
#[test]
#[serial]
fn a_cluster_failover_that_loses_the_lease_is_reported_and_fences_still_grow() {
    let Some(net) =
        cluster_net("a_cluster_failover_that_loses_the_lease_is_reported_and_fences_still_grow")
    else {
        return;
    };
    let master = net
        .master_of(0, "{cl-lost}")
        .expect("a master for the name");
    let replica = net
        .replica_of((master + 1) % 6, master)
        .expect("a replica for the master");
    let mut holder = cluster_worker(&net, "cl-lost");
    let mut other = cluster_worker(&net, "cl-lost");
    // Warm: the slot map read, connections open.
    holder.tell("acquire");
    nums(&holder.next(Duration::from_secs(20)), "held ");
    holder.tell("release");
    assert!(holder
        .next(Duration::from_secs(10))
        .starts_with("released ok"));
    // A stopped replica alone still gets the lease: the master's writes
    // wait in its socket's buffer and are applied once it runs (seen in
    // CI: the holder's renewals then found the promoted replica holding
    // its lease, rightly, and nobody else got in). Its replication link is
    // cut too, so that the lease never leaves the master.
    net.pause(replica);
    let killed = net.cli(master, &["client", "kill", "type", "replica"]);
    assert!(
        killed.parse::<u32>().is_ok_and(|n| n >= 1),
        "the replica's link cut: {killed:?}"
    );
    holder.tell("acquire");
    let first = nums(&holder.next(Duration::from_secs(20)), "held ")[0];
    assert_eq!(
        net.cli(master, &["exists", "{cl-lost}"]),
        "1",
        "the master has the lease"
    );
    let checked = cut_while_held(
        "Cluster failover that lost the lease",
        (&mut holder, &mut other),
        first,
        Duration::from_secs(40),
        || {
            net.isolate(master);
            net.resume(replica);
        },
        // The replica, stopped a while, does not always win its election
        // in time (seen 1 time in 4 on Valkey 9.1): then nothing was lost
        // yet, and there is no verdict to give.
        Some(&|| {
            let role = net.cli(replica, &["role"]);
            role.contains("slave")
                .then(|| format!("the replica was not promoted within 40 s (role: {role:?})"))
        }),
    );
    net.rejoin(master);
    if let Err(why) = checked {
        common::skip(
            "a_cluster_failover_that_loses_the_lease_is_reported_and_fences_still_grow",
            &why,
        );
    }
}

/// Cut off before it acquires: the request vanishes. The call returns by
/// its deadline (5 s here, and one response timeout for a call in flight),
/// holding nothing; after healing, anything TCP still delivers holds the
/// name for one lease at most.
#[test]
#[serial]
fn an_acquire_cut_off_returns_by_its_deadline_and_leaves_nothing() {
    let Some(net) = net("an_acquire_cut_off_returns_by_its_deadline_and_leaves_nothing") else {
        return;
    };
    let mut w = Worker::spawn_in(
        Some(net.client_ns(0)),
        "net_worker",
        &[
            ("REDLEASE_NET_ROLE", "cmd".into()),
            ("REDLEASE_NET_URL", net.url()),
            ("REDLEASE_NET_NAME", "acq".into()),
        ],
    );
    // Warm (connections open), then cut.
    w.tell("acquire");
    nums(&w.next(Duration::from_secs(10)), "held ");
    w.tell("release");
    assert!(w.next(Duration::from_secs(10)).starts_with("released ok"));
    net.partition();
    let cut_at = now_us();
    w.tell("acquire");
    let line = w.next(Duration::from_secs(20));
    assert!(!line.starts_with("held"), "{line}");
    let at: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    println!(
        "FIGURES acquire cut off: returned {line:?} after {} ms (deadline 5 s)",
        (at - cut_at) / 1000
    );
    assert!(at - cut_at <= 6_500_000, "{} ms", (at - cut_at) / 1000);
    net.heal();
    // TCP goes on retransmitting what was written while cut off, and the
    // server may receive it after healing: the blocked acquire, and the
    // undo written behind it when its reply did not come. Watched for 8 s
    // (past the retransmission backoff). What GUARANTEES.md admits for an
    // acquire whose outcome the caller never learned: a hold nobody renews,
    // which ends by itself within one lease. Seen once on Redis 6.2 (a hold
    // of one lease after healing); usually none.
    let end = std::time::Instant::now() + Duration::from_secs(8);
    let (mut first, mut last) = (None, None);
    while std::time::Instant::now() < end {
        if net.cli(0, &["exists", "{acq}"]) == "1" {
            let now = std::time::Instant::now();
            first.get_or_insert(now);
            last = Some(now);
            let ttl: i64 = net.cli(0, &["pttl", "{acq}"]).parse().unwrap_or(-2);
            assert!(ttl <= LEASE_MS as i64, "an orphan with {ttl} ms to live");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let held = first.zip(last).map(|(f, l)| l - f);
    println!("FIGURES acquire cut off: after healing, held for the caller that gave up: {held:?}");
    if let Some(held) = held {
        assert!(
            held <= Duration::from_millis(LEASE_MS + 500),
            "held {held:?} for a caller that gave up, beyond one lease"
        );
    }
}
