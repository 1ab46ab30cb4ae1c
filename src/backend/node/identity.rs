//! What a server says of itself: its product and version, made safe to
//! print, and whether its eviction policy may remove lease keys.

use redis::Value;

/// The server's product and version (`Redis 7.0.15`, `Valkey 9.1.2`), from
/// `HELLO` (no protocol switch) or else `INFO server`; `None` if an ACL
/// refuses both (nothing depends on it: it is shown, not used).
pub(crate) fn identify(con: &mut dyn redis::ConnectionLike) -> Option<String> {
    let hello = redis::cmd("HELLO").query::<Value>(con).map(|v| match v {
        Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        Value::Array(items) => items,
        _ => Vec::new(),
    });
    if let Ok(items) = hello {
        let text = |v: &Value| match v {
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        };
        let mut product = None;
        let mut version = None;
        for pair in items.chunks(2) {
            if let [k, v] = pair {
                match text(k).as_deref() {
                    Some("server") => product = text(v),
                    Some("version") => version = text(v),
                    _ => {}
                }
            }
        }
        if let (Some(p), Some(v)) = (product, version) {
            return Some(format!("{} {}", titled(&plain(&p)), plain(&v)));
        }
    }
    let info: String = redis::cmd("INFO").arg("server").query(con).ok()?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_owned)
    };
    // Valkey also reports a `redis_version` (7.2.4) for old clients.
    match (field("valkey_version"), field("redis_version")) {
        (Some(v), _) => Some(format!("Valkey {}", plain(&v))),
        (None, Some(v)) => Some(format!("Redis {}", plain(&v))),
        _ => None,
    }
}

/// What a server says of itself, made safe to print anywhere: at most 32
/// characters of those a name or version is written with (`7.0.15`,
/// `8.0.0-rc1+build`), each other one a `?`. A hostile server's version
/// with a newline and terminal escapes forged `doctor` lines, cleared the
/// screen and set the terminal's title.
fn plain(said: &str) -> String {
    said.chars()
        .take(32)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_' | '~') {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// `redis` → `Redis`, `valkey` → `Valkey`.
fn titled(product: &str) -> String {
    let mut c = product.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Logs a warning when the server's `maxmemory-policy` may evict keys:
/// every lease key has a TTL, so `volatile-*` policies evict them too.
pub(crate) fn warn_if_evicting(con: &mut dyn redis::ConnectionLike) {
    // CONFIG may be forbidden (ACL, managed services): then we cannot tell.
    // (Pairs in an array on RESP2, a map on RESP3: a map reads either.)
    if let Ok(v) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query::<std::collections::HashMap<String, String>>(con)
    {
        if let Some(policy) = v.get("maxmemory-policy") {
            if policy.starts_with("allkeys-") || policy.starts_with("volatile-") {
                log::warn!(
                    "redlease: maxmemory-policy is {policy}: Redis may evict lock keys under \
                     memory pressure, silently ending leases; use noeviction"
                );
            }
        }
    }
}
