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
///
/// Each event also comes as a struct ([`AcquireEvent`], [`ReleaseEvent`],
/// [`LeaseLostEvent`]) to the `handle_*` methods, which can grow fields
/// without breaking implementors; by default they call the `on_*` method
/// of the same event. Implement one or the other for each event.
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

    /// A hold was granted. Defaults to [`HandleEvent::on_acquired`].
    fn handle_acquired(&self, event: &AcquireEvent<'_>) {
        self.on_acquired(event.name(), event.waited());
    }

    /// A hold was returned. Defaults to [`HandleEvent::on_released`].
    fn handle_released(&self, event: &ReleaseEvent<'_>) {
        self.on_released(event.name(), event.held());
    }

    /// A lease was found lost while its guard lived. Defaults to
    /// [`HandleEvent::on_lease_lost`].
    fn handle_lease_lost(&self, event: &LeaseLostEvent<'_>) {
        self.on_lease_lost(event.name());
    }
}

/// A hold granted (see [`HandleEvent::handle_acquired`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AcquireEvent<'a> {
    pub(crate) name: &'a [u8],
    pub(crate) kind: &'static str,
    pub(crate) waited: Duration,
    pub(crate) fence: Option<u64>,
}

impl AcquireEvent<'_> {
    /// The primitive's name as given.
    pub fn name(&self) -> &[u8] {
        self.name
    }

    /// What it is: `"lock"`, `"fair lock"`, `"read lock"`, `"write lock"`,
    /// `"semaphore"`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// How long the acquisition took, from the call to the grant.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// The hold's fencing token (locks and write holds; `None` for
    /// permits and read holds).
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }
}

/// A hold returned (see [`HandleEvent::handle_released`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReleaseEvent<'a> {
    pub(crate) name: &'a [u8],
    pub(crate) kind: &'static str,
    pub(crate) held: Duration,
}

impl ReleaseEvent<'_> {
    /// The primitive's name as given.
    pub fn name(&self) -> &[u8] {
        self.name
    }

    /// What it is (see [`AcquireEvent::kind`]).
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// How long it was held.
    pub fn held(&self) -> Duration {
        self.held
    }
}

/// A lease found lost (see [`HandleEvent::handle_lease_lost`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LeaseLostEvent<'a> {
    pub(crate) name: &'a [u8],
    pub(crate) kind: &'static str,
}

impl LeaseLostEvent<'_> {
    /// The primitive's name as given.
    pub fn name(&self) -> &[u8] {
        self.name
    }

    /// What it is (see [`AcquireEvent::kind`]).
    pub fn kind(&self) -> &'static str {
        self.kind
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
