//! Small shared utilities with no knowledge of Redis or leases: a mutex
//! that shrugs off poisoning, instants kept in atomics, and values freed
//! later off a caller's way.

pub(crate) mod deferred;
pub(crate) mod monotonic;
pub(crate) mod mutex;
