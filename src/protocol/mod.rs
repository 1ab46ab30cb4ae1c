//! The protocol core: what redlease's scripts are and what the client
//! concludes from them, with no I/O. The key schema, the scripts and
//! their typed arguments, the protocol's timings and the rules that
//! decide when to look at a name, what to clean up after a wait, and what
//! a guard believes of its lease.
//! The drivers (the backend, the renewal thread, the waiting loop, the
//! lease lifecycle) and the model checker (`check/`) use the same items.

pub(crate) mod answer;
pub(crate) mod blocking;
pub(crate) mod clean_up;
pub(crate) mod delivery;
pub(crate) mod keys;
pub(crate) mod lease_state;
pub(crate) mod looks;
pub(crate) mod popped;
pub(crate) mod quorum;
pub(crate) mod renewal;
pub(crate) mod scripts;
pub(crate) mod signal;
pub(crate) mod timing;
pub(crate) mod tries;
pub(crate) mod watch;
