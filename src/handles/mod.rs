//! The handles a user holds (`Lock`, `RwLock`, `Semaphore`,
//! `CountDownLatch`, `MultiLock`) and their guards. Each describes its
//! acquisitions as `Spec`s for the lease lifecycle below it; none of them
//! decides what an uncertain outcome means.

pub(crate) mod core;
pub(crate) mod latch;
pub(crate) mod lock;
pub(crate) mod multilock;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
