//! What the handles and the lease lifecycle need of the client that made
//! them: its id and settings, its backend, its waiting. The `Client`
//! facade (`src/client/`) wraps one `Context`, and every handle holds a
//! clone of it, so nothing below the client knows the facade or the
//! handles it makes.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use uuid::Uuid;

use crate::backend::Backend;
use crate::error::Result;
use crate::events::{HandleEvent, Handler};
use crate::protocol::keys::{owner_token, Names};
use crate::protocol::lease_state::LeaseState;
use crate::protocol::watch::OpeningLooks;
use crate::wakeup::Wakeup;

/// A client's shared state; cheap to clone (an `Arc` inside). Clones are
/// the same owner: same id, same tokens' prefix, same re-entry.
#[derive(Clone)]
pub(crate) struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

/// One client's state, dropped with its last handle: the drop stops its
/// waiting (the subscriber).
pub(crate) struct ContextInner {
    pub(crate) id: Uuid,
    pub(crate) config: Config,
    pub(crate) backend: Arc<Backend>,
    pub(crate) wakeup: Wakeup,
    /// The looks this client's releases of locks and write holds asked
    /// for, by name (see `lease::look_after_opening`).
    pub(crate) opening_looks: Mutex<OpeningLooks<Weak<LeaseState>>>,
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        self.wakeup.shutdown();
    }
}

/// Validated settings of a client.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) prefix: Vec<u8>,
    pub(crate) watchdog: Duration,
    pub(crate) reentrant: bool,
    pub(crate) events: Option<Handler>,
}

impl Context {
    /// The lease of every hold without a fixed lease.
    pub(crate) fn watchdog_timeout(&self) -> Duration {
        self.inner.config.watchdog
    }

    /// Whether handles made by this client re-enter a hold their thread
    /// already has (see [`ClientBuilder::reentrant`](crate::ClientBuilder::reentrant)).
    pub(crate) fn reentrant(&self) -> bool {
        self.inner.config.reentrant
    }

    pub(crate) fn backend(&self) -> &Arc<Backend> {
        &self.inner.backend
    }

    pub(crate) fn wakeup(&self) -> &Wakeup {
        &self.inner.wakeup
    }

    /// The event handler, if the client has one.
    pub(crate) fn events(&self) -> Option<&Arc<dyn HandleEvent>> {
        self.inner.config.events.as_ref().map(|h| &h.0)
    }

    /// The client's id as a number (what a thread's holds are keyed by).
    pub(crate) fn id_u128(&self) -> u128 {
        self.inner.id.as_u128()
    }

    /// A fresh owner token: `rl:<client id>:<random>`, 122 random bits from
    /// the OS generator.
    pub(crate) fn new_token(&self) -> Arc<str> {
        owner_token(self.inner.id.simple(), Uuid::new_v4().simple()).into()
    }

    /// The key prefix (namespace).
    pub(crate) fn prefix(&self) -> &[u8] {
        &self.inner.config.prefix
    }

    /// Builds the keys of one primitive: `<prefix>{<escaped name>}<suffix>`.
    pub(crate) fn names(&self, name: &[u8]) -> Result<Names> {
        Names::new(&self.inner.config.prefix, name)
    }
}
