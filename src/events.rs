//! Hooks for what happens to leases: r2d2's `HandleEvent` style.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Told about acquisitions, releases and lost leases of a client's
/// primitives. Every method has a no-op default: implement the ones you
/// need, e.g. to feed your metrics or tracing.
///
/// Calls are made on the thread where the event happens (the acquiring or
/// releasing thread; for a lost lease, usually the renewal thread), so keep
/// them short and never block: a slow handler delays renewals.
///
/// `name` is the primitive's name as given (`client.lock("orders")` →
/// `b"orders"`). Re-entries are not events: only holds taken from and
/// returned to Redis are.
///
/// ```no_run
/// use std::time::Duration;
///
/// struct Log;
/// impl redlease::HandleEvent for Log {
///     fn on_lease_lost(&self, name: &[u8]) {
///         eprintln!("lost the lease of {}", String::from_utf8_lossy(name));
///     }
/// }
///
/// let client = redlease::Client::builder()
///     .url("redis://127.0.0.1:6379/")
///     .event_handler(Log)
///     .build()?;
/// # Ok::<(), redlease::Error>(())
/// ```
pub trait HandleEvent: Send + Sync + 'static {
    /// A hold was granted after waiting `waited` (from the call to the grant).
    fn on_acquired(&self, name: &[u8], waited: Duration) {
        let _ = (name, waited);
    }

    /// A hold held for `held` was returned.
    fn on_released(&self, name: &[u8], held: Duration) {
        let _ = (name, held);
    }

    /// A lease was found lost while its guard lived (expired unrenewed,
    /// taken over, force-unlocked, flushed).
    fn on_lease_lost(&self, name: &[u8]) {
        let _ = name;
    }
}

/// The handler a client was built with (cloned with the builder).
#[derive(Clone)]
pub(crate) struct Handler(pub(crate) Arc<dyn HandleEvent>);

impl fmt::Debug for Handler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HandleEvent")
    }
}
