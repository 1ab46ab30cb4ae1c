//! The one error type of the crate.

mod url;

pub(crate) use url::{redact_url, url_trouble};

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

/// The error code of a reply that a master the Sentinels have replaced
/// gave instead of running the call (the backend's `Deposal`): `Error`
/// maps it to a call that did not run.
pub(crate) const DEPOSED: &str = "REDLEASE_DEPOSED";

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
    /// The server refused the credentials or the ACL user's rights
    /// (`WRONGPASS`, `NOAUTH`, `NOPERM`). Retrying will not help.
    Auth,
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
            ErrorKind::Auth => "authentication or permission refused",
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
    /// A read interrupted by a signal (Linux interrupts a socket read that
    /// has a timeout when a stopped process is continued): the connection
    /// did not fail, however long the call took.
    interrupted: bool,
    message: Cow<'static, str>,
    /// What the error is about: the primitive (`lock "orders"`) and where
    /// (`redis://127.0.0.1:6379/`, password redacted), for `Display`.
    about: Option<Box<About>>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

#[derive(Default)]
struct About {
    primitive: Option<String>,
    place: Option<std::sync::Arc<str>>,
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Error {
        Error {
            kind,
            unsent: false,
            undone: false,
            interrupted: false,
            message: message.into(),
            about: None,
            source: None,
        }
    }

    /// The error's own message, without kind or context.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    /// Names the primitive the error is about (`lock "orders"`), unless
    /// an inner layer already did.
    pub(crate) fn about(mut self, what: &str, name: &[u8]) -> Error {
        let about = self.about.get_or_insert_with(Default::default);
        if about.primitive.is_none() {
            let mut name = String::from_utf8_lossy(name).into_owned();
            if name.len() > 120 {
                let mut cut = 117;
                while !name.is_char_boundary(cut) {
                    cut -= 1;
                }
                name.truncate(cut);
                name.push_str("...");
            }
            about.primitive = Some(format!("{what} {name:?}"));
        }
        self
    }

    /// Says where the error happened (a URL with its password redacted, or
    /// a topology), unless an inner layer already did.
    pub(crate) fn at(mut self, place: &std::sync::Arc<str>) -> Error {
        let about = self.about.get_or_insert_with(Default::default);
        if about.place.is_none() {
            about.place = Some(place.clone());
        }
        self
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

    /// This error, said of a call that may have run after all (an earlier
    /// attempt of the same acquisition may have been granted).
    pub(crate) fn maybe_ran(mut self) -> Error {
        self.unsent = false;
        self
    }

    /// Whether the server said this semaphore has another permit count
    /// than the handle's.
    pub(crate) fn is_count_mismatch(&self) -> bool {
        self.kind == ErrorKind::InvalidArgument && self.message == COUNT_MISMATCH
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

    /// Whether this ambiguous failure came at once (the connection broke,
    /// or a signal interrupted the read), within half the `response`
    /// timeout of the call's start, so the server is answering and asking
    /// again costs no long wait. A late reply (the server stalled) is not:
    /// asking again would wait another timeout, and its undo is already
    /// queued behind it.
    pub(crate) fn broke_at_once(&self, took: Duration, response: Duration) -> bool {
        self.is_ambiguous() && !self.undone && (self.interrupted || took < response / 2)
    }

    /// The server's error code, when the error is a server's reply.
    pub(crate) fn server_code(&self) -> Option<&str> {
        self.redis_text().and_then(RedisErrorText::code)
    }

    /// Where a Cluster redirection (`MOVED`, `ASK`) sends the command:
    /// `host:port`.
    #[cfg(feature = "cluster")]
    pub(crate) fn redirected_to(&self) -> Option<&str> {
        self.redis_text().and_then(|t| t.redirect.as_deref())
    }

    fn redis_text(&self) -> Option<&RedisErrorText> {
        self.source.as_deref().and_then(|s| {
            (s as &(dyn std::error::Error + 'static)).downcast_ref::<RedisErrorText>()
        })
    }

    /// Whether a server answered that it will not run the command *for
    /// now*, and nothing ran: loading, busy, a replica without its master
    /// (`LOADING`, `BUSY`, `MASTERDOWN`), a Cluster slot in migration or a
    /// cluster without quorum (`TRYAGAIN`, `ASK`, `CLUSTERDOWN`, a slot
    /// that kept moving). Asking again later is safe even for a script
    /// that must run at most once.
    pub(crate) fn is_refused_for_now(&self) -> bool {
        // A Cluster node's refusal is wrapped once, with the server's
        // error as its source (`cluster::migrating`, `kept_moving`).
        let wrapped = self.source.as_deref().and_then(|s| {
            (s as &(dyn std::error::Error + 'static))
                .downcast_ref::<Error>()
                .and_then(Error::server_code)
        });
        self.unsent && self.server_code().or(wrapped).is_some_and(not_run_for_now)
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
        if let Some(about) = &self.about {
            d.field("primitive", &about.primitive)
                .field("at", &about.place);
        }
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

/// Whether a server's error code says it did not run the command *for
/// now* (see [`Error::is_refused_for_now`]): loading, busy, a replica
/// without its master, a Cluster slot in migration or moved, a cluster
/// without quorum.
pub(crate) fn not_run_for_now(code: &str) -> bool {
    matches!(
        code,
        "LOADING" | "BUSY" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" | "ASK" | "MOVED"
    )
}

/// Semaphore handles that disagree on the permit count.
const COUNT_MISMATCH: &str = "handles of this semaphore disagree on its permit count";

/// The message of a connection that failed (broke, timed out); shown as
/// one of the two below, by whether the command had been sent.
const CONNECTION_FAILED: &str = "redis connection failed";

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Whether a failed call may have run is what its caller must know
        // (a release that failed may still free the name), so it is said.
        let message = match (&*self.message, self.unsent) {
            (CONNECTION_FAILED, true) => {
                "redis connection failed before the command was sent; it did not run"
            }
            (CONNECTION_FAILED, false) => {
                "redis connection failed after the command was sent; it may have run (the outcome is unknown)"
            }
            (message, _) => message,
        };
        write!(f, "{}: {message}", self.kind)?;
        if let Some(about) = &self.about {
            match (&about.primitive, &about.place) {
                (Some(p), Some(at)) => write!(f, " [{p} at {at}]")?,
                (Some(p), None) => write!(f, " [{p}]")?,
                (None, Some(at)) => write!(f, " [at {at}]")?,
                (None, None) => {}
            }
        }
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
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
        let code = err.code().unwrap_or("");
        let e = |kind, message: &'static str| Error::new(kind, message);
        let error = if matches!(
            err.kind(),
            redis::ErrorKind::UnexpectedReturnType | redis::ErrorKind::Parse
        ) && !err.is_io_error()
        {
            e(
                ErrorKind::Server,
                "the server's reply did not have the expected shape",
            )
        } else if err.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(code, "NOAUTH" | "WRONGPASS" | "NOPERM")
        {
            auth_error(&text).unwrap_or_else(|| {
                e(
                    ErrorKind::Auth,
                    "authentication failed: wrong or missing username or password",
                )
            })
        } else if code == DEPOSED {
            // Answered by a master the Sentinels have replaced (see
            // `pool::Deposal`): whatever it did does not count, and the
            // call goes to the master of record, as after an outage.
            e(
                ErrorKind::Connection,
                "answered by a server the Sentinels no longer name as master (a failover); not counted, the command was not run on the master",
            )
            .unsent()
        } else if matches!(
            code,
            "LOADING" | "BUSY" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN"
        ) {
            // The server refused to run the command for now (loading its data
            // set, running a script, a replica without its master, a
            // resharding): nothing ran, and waiting callers ride it out like
            // an outage.
            e(
                ErrorKind::Connection,
                "the server is not serving commands right now (loading, busy or without a master); the command was not run",
            )
            .unsent()
        } else if err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
            || err.is_unrecoverable_error() && err.code().is_none()
        {
            let mut error = e(ErrorKind::Connection, CONNECTION_FAILED);
            error.interrupted =
                io_error_of(&err).is_some_and(|io| io.kind() == std::io::ErrorKind::Interrupted);
            error
        } else if text
            .to_ascii_lowercase()
            .contains("attempted to access a non local key")
        {
            // A script stopped part-way on a Cluster node whose slot began
            // migrating under it (a key it had removed, touched again, is
            // asked for on the importing node): what it wrote before stays.
            // "Script attempted to access a non local key" (Redis 7),
            // "Lua script attempted …" (6.2), "Attempted …" (Valkey).
            // Ambiguous, like a lost reply: an acquisition cleans up after
            // it (token-checked), waiters ride it out, and a release asks
            // again. As a server error it said nothing ran, and failed an
            // `acquire` during a resharding.
            e(
                ErrorKind::Connection,
                "a script stopped part-way: its name's slot began moving between masters (what it wrote before stays)",
            )
        } else if code == "WRONGTYPE" || text.contains("WRONGTYPE") {
            e(
                ErrorKind::WrongType,
                "the key holds a value of another type",
            )
        } else if text.contains("REDLEASE_FOREIGN") {
            e(
                ErrorKind::WrongType,
                "the key holds a value that was not written by redlease",
            )
        } else if text.contains("REDLEASE_MISMATCH") {
            e(ErrorKind::InvalidArgument, COUNT_MISMATCH)
        } else if err.kind() == redis::ErrorKind::InvalidClientConfig {
            e(ErrorKind::InvalidArgument, "invalid redis URL")
        } else if let Some(auth) = auth_error(&text) {
            auth
        } else {
            e(ErrorKind::Server, "redis returned an error")
        };
        error.with_source(RedisErrorText::of(err))
    }
}

/// The I/O error under a redis-rs error, if any. redis-rs keeps it behind
/// an `Arc<dyn Error>`, which is what its `source()` gives.
fn io_error_of(err: &redis::RedisError) -> Option<&std::io::Error> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let source = std::error::Error::source(err)?;
    match source.downcast_ref::<Shared>() {
        Some(shared) => shared.downcast_ref(),
        None => source.downcast_ref(),
    }
}

/// The `Auth` error for a refusal of credentials or rights, if `text` is one.
fn auth_error(text: &str) -> Option<Error> {
    // A refused right first: redis-rs may file `NOPERM` under its
    // authentication kind, and "wrong password" would send the user to the
    // wrong fix.
    if text.contains("NOPERM") || text.contains("NoPerm") {
        Some(Error::new(
            ErrorKind::Auth,
            "the ACL user may not run this command or touch this key (see the README's ACL line)",
        ))
    } else if text.contains("NOAUTH")
        || text.contains("WRONGPASS")
        || text.contains("AuthenticationFailed")
    {
        Some(Error::new(
            ErrorKind::Auth,
            "authentication failed: wrong or missing username or password",
        ))
    } else {
        None
    }
}

impl From<r2d2::Error> for Error {
    fn from(err: r2d2::Error) -> Error {
        if let Some(auth) = auth_error(&err.to_string()) {
            return auth.with_source(err);
        }
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

/// A `redis` error as its text with script hashes cut out, so that no
/// message of this crate shows one (they mean nothing to a reader and
/// change between versions). Its kind and code stay inspectable.
#[derive(Debug)]
pub struct RedisErrorText {
    kind: redis::ErrorKind,
    code: Option<String>,
    text: String,
    /// A redirection's target (see `Error::redirected_to`).
    #[cfg(feature = "cluster")]
    redirect: Option<String>,
}

impl RedisErrorText {
    fn of(err: redis::RedisError) -> RedisErrorText {
        RedisErrorText {
            kind: err.kind(),
            #[cfg(feature = "cluster")]
            redirect: err.redirect_node().map(|(addr, _)| addr.to_owned()),
            // The scripts' own codes are how the library recognises them
            // (see `From<RedisError>`); the message already says what they
            // mean, so they are not shown again.
            code: err
                .code()
                .filter(|c| !c.starts_with("REDLEASE_"))
                .map(str::to_owned),
            text: without_internal_codes(&without_script_hash(&err.to_string())),
        }
    }

    /// The `redis` crate's classification of the error.
    pub fn kind(&self) -> redis::ErrorKind {
        self.kind
    }

    /// The server's error code (`WRONGTYPE`, `NOPERM`, ...), if it sent one.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }
}

impl fmt::Display for RedisErrorText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for RedisErrorText {}

/// `text` without the scripts' internal error codes (`REDLEASE_FOREIGN`,
/// `REDLEASE_MISMATCH`), however redis-rs quoted them.
fn without_internal_codes(text: &str) -> String {
    let mut out = text.to_owned();
    for code in ["REDLEASE_FOREIGN", "REDLEASE_MISMATCH"] {
        for form in [
            format!("\"{code}\": "),
            format!("{code}: "),
            format!("{code} "),
        ] {
            out = out.replace(&form, "");
        }
    }
    out
}

/// Cuts `script: <40 hex digits>` (and any other run of 40 hex digits, the
/// form of a SHA-1) out of a server error text.
pub(crate) fn without_script_hash(text: &str) -> String {
    let text = text.replace("script: ", "");
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let run = bytes[i..]
            .iter()
            .take_while(|b| b.is_ascii_hexdigit())
            .count();
        if run == 40 {
            out.push_str("<script>");
            i += run;
        } else if run > 0 {
            out.push_str(&text[i..i + run]);
            i += run;
        } else {
            let c = text[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_password() {
        assert_eq!(
            redact_url("redis://:s3cret@127.0.0.1:6379/0"),
            "redis://:***@127.0.0.1:6379/0"
        );
        assert_eq!(
            redact_url("rediss://bob:p@ss@host:1/"),
            "rediss://bob:***@host:1/"
        );
        assert_eq!(redact_url("redis://bob@host/"), "redis://bob@host/");
        assert_eq!(
            redact_url("redis://:se/cr@t@127.0.0.1:6379/"),
            "redis://:***@127.0.0.1:6379/"
        );
        assert_eq!(redact_url("redis://host:1"), "redis://host:1");
        assert_eq!(redact_url("not a url"), "not a url");
    }

    /// Issue 57 item 2: redis-rs decodes parameter names, so `pa%73s=`
    /// authenticates; its value must be redacted as `pass=`'s is.
    #[test]
    fn encoded_password_parameters_lose_their_value() {
        for url in [
            "redis+unix:///tmp/r.sock?pa%73s=SECRET",
            "redis+unix:///tmp/r.sock?%70assword=SECRET",
            "redis+unix:///tmp/r.sock?db=1&%50%41%53%53=SECRET#x",
            "redis+unix:///tmp/r.sock?+pass=SECRET",
        ] {
            let shown = redact_url(url);
            assert!(!shown.contains("SECRET"), "{url} -> {shown}");
            assert!(shown.contains("=***"), "{url} -> {shown}");
        }
        assert_eq!(
            redact_url("redis+unix:///tmp/r.sock?db=%31"),
            "redis+unix:///tmp/r.sock?db=%31"
        );
    }

    /// Reproduction (newcomer review): three bad URLs read the same, "Redis
    /// URL did not parse - InvalidClientConfig".
    #[test]
    fn bad_urls_say_what_is_wrong() {
        let says = |u: &str| url_trouble(u).unwrap_or_default();
        assert!(says("http://127.0.0.1:6379/").contains("scheme \"http\""));
        assert!(says("redis//oops").contains("no scheme"));
        assert!(says("redis://127.0.0.1:notaport/").contains("port \"notaport\""));
        assert!(says("redis://127.0.0.1:70000/").contains("port \"70000\""));
        assert!(says("redis://:6379/").contains("no host"));
        assert!(says("redis://u:p@w@127.0.0.1:x/").contains("port \"x\""));
        assert!(says("redis://u:p@w@127.0.0.1:x/").contains("redis://[user:password@]host:port"));
        assert_eq!(url_trouble("redis://127.0.0.1:6379/0"), None);
        assert_eq!(url_trouble("rediss://[::1]:6380/"), None);
        assert_eq!(url_trouble("redis+unix:///tmp/r.sock?db=1"), None);
    }

    /// Reproduction (security review): socket URLs carry their password in
    /// a parameter, which was never redacted.
    #[test]
    fn socket_urls_and_parameters_lose_their_password() {
        assert_eq!(
            redact_url("redis+unix:///tmp/r.sock?db=1&pass=SECRET"),
            "redis+unix:///tmp/r.sock?db=1&pass=***"
        );
        assert_eq!(
            redact_url("unix:///tmp/r.sock?password=SECRET&db=2"),
            "unix:///tmp/r.sock?password=***&db=2"
        );
        assert_eq!(
            redact_url("redis://host/0?PASS=SECRET#insecure"),
            "redis://host/0?PASS=***#insecure"
        );
        assert_eq!(
            redact_url("redis://u:x@host/?pass=SECRET"),
            "redis://u:***@host/?pass=***"
        );
        assert_eq!(redact_url("redis://host/?db=3"), "redis://host/?db=3");
    }

    #[test]
    fn script_hashes_are_cut() {
        let t = "WRONGTYPE: Operation against a key script: e0e1f9fabfc9d4800c877a703b823ac0578ff831, on @user_script:3.";
        let out = without_script_hash(t);
        assert!(!out.contains("e0e1f9fa"), "{out}");
        assert!(out.contains("WRONGTYPE"), "{out}");
    }
}
