//! Every primitive on a Redis Cluster; only the builder differs.
//!
//! `REDIS_CLUSTER_URLS=redis://127.0.0.1:7000/,redis://127.0.0.1:7001/ \
//!  cargo run --example cluster --features cluster`
//! (the test suite's `tests/cluster.rs` starts a local 3-master cluster).

fn main() -> Result<(), redlease::Error> {
    let Ok(urls) = std::env::var("REDIS_CLUSTER_URLS") else {
        println!("set REDIS_CLUSTER_URLS to the seed nodes of a cluster to run this example");
        return Ok(());
    };
    let client = redlease::Client::builder()
        .cluster(urls.split(','))
        .key_prefix("example:")
        .build()?;
    // All keys of one primitive share the hash tag {name}: one slot, no CROSSSLOT.
    let n = client.with_lock("orders:42", || 42)?;
    let rw = client.rw_lock("config");
    drop(rw.read()?);
    let sem = client.semaphore("api", 5);
    let permit = sem.acquire()?;
    println!(
        "lock returned {n}; read lock ok; {} of 5 permits free while holding one",
        sem.available()?
    );
    drop(permit);
    Ok(())
}
