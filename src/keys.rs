//! The key schema: every key a name owns, by its suffix, in one place.
//! A name's keys are `<prefix>{<name>}<suffix>` (`Client::names`), so all
//! of them share the name's Cluster slot. Scripts derive a few more from
//! these (a lock's note is its key and `:note`, a grant prefix is followed
//! by `open`, `offer`, `told` or a waiter's token): see each `lua/` file.

/// A lock: `"<token>#<fence>"` while held (lua/lock_acquire.lua).
pub(crate) const LOCK: &str = "";
/// The fencing counter of a name's lock and write hold (lua/fence.lua).
pub(crate) const FENCE: &str = ":fence";
/// What a lock's holder said about itself (lua/lock_note.lua).
pub(crate) const NOTE: &str = ":note";
/// A lock's waiters, in arrival order, and their deadlines (lua/queue.lua).
pub(crate) const QUEUE: &str = ":queue";
pub(crate) const QUEUE_DEADLINES: &str = ":queue:t";
/// What a lock's grants are named after (lua/queue.lua).
pub(crate) const GRANT: &str = ":grant:";

/// A read-write lock's writer, readers, waiting writers (and their
/// deadlines), waiting readers, and grant prefix (lua/rw_grant.lua).
pub(crate) const RW_WRITER: &str = ":rw:w";
pub(crate) const RW_READERS: &str = ":rw:r";
pub(crate) const RW_WRITER_QUEUE: &str = ":rw:wq";
pub(crate) const RW_WRITER_DEADLINES: &str = ":rw:wq:t";
pub(crate) const RW_WAITING_READERS: &str = ":rw:rq";
pub(crate) const RW_GRANT: &str = ":rw:grant:";

/// A semaphore's permits, count, fair queue, waiters' deadlines and grant
/// prefix (lua/sem_acquire.lua, lua/sem_grant.lua).
pub(crate) const SEM: &str = ":sem";
pub(crate) const SEM_COUNT: &str = ":sem:n";
pub(crate) const SEM_QUEUE: &str = ":sem:queue";
pub(crate) const SEM_QUEUE_DEADLINES: &str = ":sem:queue:t";
pub(crate) const SEM_GRANT: &str = ":sem:grant:";

/// A count-down latch (lua/latch_set.lua).
pub(crate) const LATCH: &str = ":latch";

/// The keys by which `Client::list` knows a name is in use: a lock, a
/// write hold, read holds, permits.
pub(crate) const IN_USE: [&str; 4] = [LOCK, RW_WRITER, RW_READERS, SEM];

/// The open list under a grant prefix: where a release puts what it hands
/// on, and where waiters block (lua/queue.lua, sem_grant.lua, rw_grant.lua).
pub(crate) fn open_list(grant_prefix: &[u8]) -> Vec<u8> {
    [grant_prefix, b"open"].concat()
}
