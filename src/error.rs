//! The one error type of the crate.

use std::borrow::Cow;
use std::fmt;

/// What went wrong, coarsely: enough to decide whether to retry, give up or alert.
///
/// The enum is `#[non_exhaustive]`: match the kinds you act on and keep a
/// catch-all arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The server could not be reached, a connection broke, or a reply did not
    /// arrive within the response timeout. The outcome of the command is unknown.
    Connection,
    /// No pooled connection became free within the pool timeout.
    Pool,
    /// The server answered with an error the library did not expect.
    Server,
    /// The lease ended while it was believed held: it expired, was flushed,
    /// force-unlocked, or the server restarted. Work done under it may have
    /// overlapped with another holder.
    LockLost,
    /// The caller tried to release or extend something it does not hold.
    NotOwner,
    /// A name, duration, count, URL or option is not acceptable.
    InvalidArgument,
    /// The key already holds a value that is not one of this library's
    /// (another data type, or a foreign string).
    WrongType,
    /// Redlock: fewer than a majority of masters granted or confirmed the lease.
    QuorumNotReached,
    /// The operation cannot be made safe on the configured topology.
    Unsupported,
    /// The request would deadlock (e.g. a reader asking for the write lock).
    WouldDeadlock,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Connection => "connection error",
            ErrorKind::Pool => "connection pool exhausted",
            ErrorKind::Server => "server error",
            ErrorKind::LockLost => "lock lost",
            ErrorKind::NotOwner => "not the owner",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::WrongType => "wrong type",
            ErrorKind::QuorumNotReached => "quorum not reached",
            ErrorKind::Unsupported => "unsupported on this backend",
            ErrorKind::WouldDeadlock => "would deadlock",
        })
    }
}

/// The error returned by every fallible operation of the crate.
///
/// Inspect [`Error::kind`] to decide what to do; [`std::error::Error::source`]
/// gives the underlying `redis` or pool error where there is one.
pub struct Error {
    kind: ErrorKind,
    /// The command never left this process (no connection could be had):
    /// nothing ran, nothing needs undoing.
    unsent: bool,
    /// The command's reply was late and the undo of what it may have
    /// granted was written right after it on the same connection.
    undone: bool,
    message: Cow<'static, str>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Error {
        Error {
            kind,
            unsent: false,
            undone: false,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        self.source = Some(Box::new(source));
        self
    }

    pub(crate) fn invalid(message: impl Into<Cow<'static, str>>) -> Error {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    pub(crate) fn lost(message: impl Into<Cow<'static, str>>) -> Error {
        Error::new(ErrorKind::LockLost, message)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Marks the error as raised before anything was sent.
    pub(crate) fn unsent(mut self) -> Error {
        self.unsent = true;
        self
    }

    /// Marks a late grant whose undo followed it on the same connection.
    pub(crate) fn undone(mut self) -> Error {
        self.undone = true;
        self
    }

    /// Whether this late grant was followed by its undo (so the token it
    /// used must not be granted again: the undo may still be on its way).
    pub(crate) fn is_undone(&self) -> bool {
        self.undone
    }

    /// Whether the command was never sent (no connection could be had), so
    /// that it certainly did not run.
    pub(crate) fn is_unsent(&self) -> bool {
        self.unsent
    }

    /// Whether the error leaves the outcome of a command unknown: it was
    /// sent, but the connection broke or the reply did not arrive within the
    /// response timeout. A refused connection is not ambiguous (nothing was
    /// sent), nor is an error reply (the server answered).
    pub fn is_ambiguous(&self) -> bool {
        self.kind == ErrorKind::Connection && !self.unsent
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind).field("message", &self.message);
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)?;
        if let Some(source) = &self.source {
            write!(f, " ({source})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Error {
        let text = err.to_string();
        let (kind, message): (ErrorKind, Cow<'static, str>) = if matches!(
            err.kind(),
            redis::ErrorKind::UnexpectedReturnType | redis::ErrorKind::Parse
        ) && !err.is_io_error()
        {
            (
                ErrorKind::Server,
                "the server's reply did not have the expected shape".into(),
            )
        } else if err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
            || err.is_unrecoverable_error() && err.code().is_none()
        {
            (ErrorKind::Connection, "redis connection failed".into())
        } else if text.contains("WRONGTYPE") {
            (
                ErrorKind::WrongType,
                "the key holds a value of another type".into(),
            )
        } else if text.contains("REDLEASE_FOREIGN") {
            (
                ErrorKind::WrongType,
                "the key holds a value that was not written by redlease".into(),
            )
        } else if text.contains("REDLEASE_MISMATCH") {
            (
                ErrorKind::InvalidArgument,
                "handles of this semaphore disagree on its permit count".into(),
            )
        } else if err.kind() == redis::ErrorKind::InvalidClientConfig {
            (ErrorKind::InvalidArgument, "invalid redis URL".into())
        } else if text.contains("NOAUTH") || text.contains("WRONGPASS") {
            (ErrorKind::Connection, "authentication failed".into())
        } else if text.contains("NOPERM") {
            (
                ErrorKind::Server,
                "the ACL user may not run this command or touch this key (see the README's ACL line)"
                    .into(),
            )
        } else {
            (ErrorKind::Server, "redis returned an error".into())
        };
        Error::new(kind, message).with_source(err)
    }
}

impl From<r2d2::Error> for Error {
    fn from(err: r2d2::Error) -> Error {
        // r2d2 appends the last connect error when the pool could not open a
        // connection at all; that is an unreachable server, not a busy pool.
        if err.to_string().contains(": ") {
            Error::new(ErrorKind::Connection, "could not connect to redis").with_source(err)
        } else {
            Error::new(
                ErrorKind::Pool,
                "no pooled connection became available in time",
            )
            .with_source(err)
        }
    }
}
