//! The uncontended cycle against the raw reference lock, and the multi-lock
//! against one lock's cycle (issue: waiting that costs nothing). Every
//! figure is a ratio of means measured in the same run, interleaved block
//! by block, on one private redis-server; the raw floor runs over a
//! TCP_NODELAY connection, as the library's own connections do.
//!
//! Run: `cargo bench --bench cycle` (`REDLEASE_BENCH_QUICK=1` for a short
//! smoke run).

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use common::Server;
use redlease::Client;
use support::{
    mean, quick, raw_con, scale, us, BareFencedScripts, GuardedFencedScripts, RawLockScripts,
    RawMultiScripts,
};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let server = Server::start();
    let url = server.url();
    let client = Client::builder().url(&url).build().unwrap();
    let mut raw = raw_con(&url);
    let del = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    );
    let one = redis::Script::new("return 1");
    let _: i64 = one.invoke(&mut raw).unwrap();
    let _: i64 = del.key("bench:raw").arg("x").invoke(&mut raw).unwrap();
    // The library's own two scripts sent raw (no library): what the
    // server's work for a fenced, queue-aware lock costs, apart from the
    // library's own overhead.
    let raw_scripts = RawLockScripts::new(
        "bench:rawscripts",
        &common::lua_source("lock_acquire.lua"),
        &common::lua_source("lock_release.lua"),
    );
    // A multi-lock's two scripts sent raw: its server work, against one
    // lock's two scripts sent raw.
    let raw_multi = RawMultiScripts::new(
        &["bench:rm:a", "bench:rm:b", "bench:rm:c"],
        &common::lua_source("lock_acquire_all.lua"),
        &common::lua_source("lock_release.lua"),
    );
    // The least any fenced lock does (see `BareFencedScripts`), for one
    // name and for three in one run each way.
    let bare = BareFencedScripts::new(&["bench:bare"]);
    let bare_multi = BareFencedScripts::new(&["bench:bm:a", "bench:bm:b", "bench:bm:c"]);
    // The least with this library's guarantees (see `GuardedFencedScripts`).
    let guarded = GuardedFencedScripts::new("bench:guarded");
    let lock = client.lock("bench:cycle");
    let multi = client.multi_lock(["bench:m:a", "bench:m:b", "bench:m:c"]);
    lock.acquire().unwrap().release().unwrap();
    multi.acquire().unwrap().release().unwrap();

    let blocks = if quick() { 5 } else { 20 };
    let per_block = scale(2_000) / 10;
    let (mut rtt, mut raws, mut cycles, mut multis) = (vec![], vec![], vec![], vec![]);
    let (mut cycle_ratio, mut multi_ratio, mut scripts_ratio, mut own_ratio) =
        (vec![], vec![], vec![], vec![]);
    let (mut multi_floor, mut multi_own) = (vec![], vec![]);
    let (mut bare_ratio, mut bare_multi_ratio, mut guarded_ratio) = (vec![], vec![], vec![]);
    for _ in 0..blocks {
        let e = mean(per_block, || {
            let _: i64 = one.invoke(&mut raw).unwrap();
        });
        // The reference lock: SET NX PX, then a token-checked EVALSHA DEL.
        let r = mean(per_block, || {
            let token = uuid::Uuid::new_v4().simple().to_string();
            let ok: Option<String> = redis::cmd("SET")
                .arg("bench:raw")
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query(&mut raw)
                .unwrap();
            assert!(ok.is_some());
            let _: i64 = del.key("bench:raw").arg(&token).invoke(&mut raw).unwrap();
        });
        let sc = mean(per_block, || raw_scripts.cycle(&mut raw));
        let c = mean(per_block, || {
            lock.acquire().unwrap().release().unwrap();
        });
        let m = mean(per_block, || {
            multi.acquire().unwrap().release().unwrap();
        });
        let ms = mean(per_block, || raw_multi.cycle(&mut raw));
        let b = mean(per_block, || bare.cycle(&mut raw));
        let bm = mean(per_block, || bare_multi.cycle(&mut raw));
        let g = mean(per_block, || guarded.cycle(&mut raw));
        bare_ratio.push(us(b) / us(r));
        guarded_ratio.push(us(g) / us(r));
        bare_multi_ratio.push(us(bm) / us(b));
        multi_floor.push(us(ms) / us(sc));
        multi_own.push(us(m) / us(ms));
        cycle_ratio.push(us(c) / us(r));
        scripts_ratio.push(us(sc) / us(r));
        own_ratio.push(us(c) / us(sc));
        multi_ratio.push(us(m) / us(c));
        rtt.push(us(e));
        raws.push(us(r));
        cycles.push(us(c));
        multis.push(us(m));
    }
    let (rtt, raw_us, cycle_us, multi_us) =
        (median(rtt), median(raws), median(cycles), median(multis));
    let (cr, mr) = (median(cycle_ratio), median(multi_ratio));
    let (sr, or) = (median(scripts_ratio), median(own_ratio));
    let (mf, mo) = (median(multi_floor), median(multi_own));
    let (bf, bmf) = (median(bare_ratio), median(bare_multi_ratio));
    let gf = median(guarded_ratio);
    println!("redlease cycle benchmark (interleaved, {blocks} blocks of {per_block})");
    println!(
        "{:<56} {rtt:>8.1} us",
        "idle round trip (EVALSHA return 1), median of blocks"
    );
    println!(
        "{:<56} {raw_us:>8.1} us",
        "raw reference lock: SET NX PX + EVALSHA del"
    );
    println!(
        "{:<56} {cycle_us:>8.1} us = {cr:.3}x the raw lock (target <= 1.05)",
        "uncontended acquire + release"
    );
    println!(
        "{:<56} {sr:>8.3}x the raw lock (the floor of a fenced, queue-aware lock)",
        "floor: the library's two scripts sent raw"
    );
    println!(
        "{:<56} {or:>8.3}x its own scripts sent raw (the library's own overhead)",
        "uncontended acquire + release"
    );
    println!(
        "{:<56} {bf:>8.3}x the raw lock (the floor of any lock that hands out fences)",
        "floor: a bare fenced lock (INCR + SET PX; GET + DEL)"
    );
    println!(
        "{:<56} {gf:>8.3}x the raw lock (the floor of a lock with this library's guarantees)",
        "floor: + queue check, fence floor, clock, no key left"
    );
    println!(
        "{:<56} {multi_us:>8.1} us = {mr:.3}x one lock's cycle (target <= 1.3)",
        "multi-lock of 3 names, acquire + release"
    );
    println!(
        "{:<56} {mf:>8.3}x one lock's scripts sent raw (its floor)",
        "floor: the multi-lock's two scripts sent raw"
    );
    println!(
        "{:<56} {mo:>8.3}x its own scripts sent raw (the library's own overhead)",
        "multi-lock of 3 names, acquire + release"
    );
    println!(
        "{:<56} {bmf:>8.3}x the bare fenced lock of one name (the floor of any multi-lock)",
        "floor: a bare fenced lock of 3 names, one run each way"
    );
    println!(
        "{{\"bench\":\"cycle\",\"idle_rtt_us\":{rtt:.1},\"raw_lock_us\":{raw_us:.1},\"cycle_ratio\":{cr:.3},\"scripts_ratio\":{sr:.3},\"own_overhead\":{or:.3},\"multi_lock_ratio\":{mr:.3},\"multi_scripts_ratio\":{mf:.3},\"multi_own_overhead\":{mo:.3},\"bare_fenced_ratio\":{bf:.3},\"bare_multi_ratio\":{bmf:.3},\"guarded_fenced_ratio\":{gf:.3}}}"
    );
}
