//! A model checker for redlease's grant protocol: the library's real Lua
//! scripts, run by Lua 5.1 over an in-memory keyspace with virtual time,
//! driven by clients that decide as the library does, through every
//! interleaving of their calls, faults and time within a bound. See
//! README.md beside this crate.

pub mod configs;
pub mod keyspace;
pub mod latch;
pub mod lock;
pub mod looks;
pub mod multilock;
pub mod parties;
pub mod primitive;
pub mod probes;
pub mod redlock;
pub mod rwlock;
pub mod search;
pub mod semaphore;
pub mod sentinel;
pub mod server;
pub mod waiters;
