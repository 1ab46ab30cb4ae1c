//! The public API contract of DESIGN.md, checked at compile time.

use std::time::Duration;

use redlease::{Client, ClientBuilder, Error, ErrorKind, Lock, LockInfo, RwLock, Semaphore};

fn send_sync_static<T: Send + Sync + 'static>() {}
fn clone<T: Clone>() {}

#[test]
fn handles_are_clone_send_sync_static() {
    send_sync_static::<Client>();
    send_sync_static::<Lock>();
    send_sync_static::<RwLock>();
    send_sync_static::<Semaphore>();
    send_sync_static::<Error>();
    send_sync_static::<LockInfo>();
    clone::<Client>();
    clone::<Lock>();
    clone::<RwLock>();
    clone::<Semaphore>();
    clone::<ClientBuilder>();
}

/// Never called: it only has to compile, with the names DESIGN.md fixes.
#[allow(dead_code, unused_must_use, clippy::let_underscore_must_use)]
fn contract(client: &Client) -> redlease::Result<()> {
    let _ = Client::builder()
        .url("redis://127.0.0.1:6379/")
        .pool_size(16)
        .key_prefix("myapp:")
        .watchdog_timeout(Duration::from_secs(30));
    let _ = Client::builder().cluster(["redis://a/", "redis://b/"]);
    let _ = Client::builder().sentinel(vec![String::from("redis://s/")], "mymaster");
    let _ = Client::builder().redlock(&["redis://a/".to_string()]);
    let lock = client.lock("orders:42");
    let g = lock.acquire()?;
    let _: Option<redlease::LockGuard> = lock.try_acquire()?;
    let _: Option<redlease::LockGuard> = lock.acquire_timeout(Duration::from_secs(2))?;
    let _fixed: Lock = client.lock("orders:42").lease(Duration::from_secs(5));
    let _: u64 = g.fencing_token();
    let _: bool = g.is_held();
    g.release()?;
    let _: bool = lock.is_locked()?;
    let _: usize = lock.hold_count();
    let _: bool = lock.force_unlock()?;
    let _: u32 = client.with_lock("orders:42", || 1u32)?;
    let _: u32 = lock.with(|| 1u32)?;
    let rw = client.rw_lock("config");
    let _r: redlease::ReadGuard = rw.read()?;
    let _w: Option<redlease::WriteGuard> = rw.try_write()?;
    let _: Option<redlease::ReadGuard> = rw.try_read()?;
    let _: Option<redlease::ReadGuard> = rw.read_timeout(Duration::from_secs(1))?;
    let _: Option<redlease::WriteGuard> = rw.write_timeout(Duration::from_secs(1))?;
    let sem = client.semaphore("api", 5);
    let _p: redlease::Permit = sem.acquire()?;
    let _: Option<redlease::Permit> = sem.try_acquire()?;
    let _: Option<redlease::Permit> = sem.acquire_timeout(Duration::from_secs(1))?;
    let _: redlease::Permit = sem.acquire_many(2)?;
    let _: u32 = sem.available()?;
    let e: Error = lock.acquire().unwrap_err();
    let _: ErrorKind = e.kind();
    let _ = std::error::Error::source(&e);
    Ok(())
}
