//! Redis URLs in what we say: a URL that does not parse explained
//! plainly, and every URL shown without its password (in the user part,
//! or in a parameter however it is spelled or percent-encoded).

/// What is wrong with a Redis URL that does not parse, said plainly, with
/// what a good one looks like: the scheme, the host, the port. `None` when
/// none of those is the trouble (the parser's own reason then stands).
pub(crate) fn url_trouble(url: &str) -> Option<String> {
    const GOOD: &str = "a Redis URL looks like redis://[user:password@]host:port/[db], \
        rediss://… for TLS, or redis+unix:///path/to/socket";
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return Some(format!("it has no scheme (no \"://\"); {GOOD}"));
    };
    let known = [
        "redis",
        "rediss",
        "valkey",
        "valkeys",
        "redis+unix",
        "unix",
        "valkey+unix",
    ];
    if !known.iter().any(|k| scheme.eq_ignore_ascii_case(k)) {
        return Some(format!(
            "the scheme {scheme:?} is not a Redis scheme; {GOOD}"
        ));
    }
    if scheme.to_ascii_lowercase().ends_with("unix") {
        return None;
    }
    // host[:port], after the user part (which ends at the last '@').
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match host_port.strip_prefix('[') {
        // [IPv6]:port
        Some(v6) => match v6.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':')),
            None => return Some(format!("the IPv6 host has no closing ']'; {GOOD}")),
        },
        None => match host_port.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        return Some(format!("it names no host; {GOOD}"));
    }
    if let Some(p) = port {
        if !p.is_empty() && p.parse::<u16>().map_or(true, |n| n == 0) {
            return Some(format!(
                "the port {p:?} is not a number from 1 to 65535; {GOOD}"
            ));
        }
    }
    None
}

/// `url` with its password replaced by `***`, for messages and logs, in
/// every form redis-rs accepts: the user part (anything after its `:`),
/// and the `pass=` / `password=` parameters (the only place a socket URL,
/// `redis+unix://`, `unix://`, can carry one).
pub(crate) fn redact_url(url: &str) -> String {
    redact_params(&redact_user(url))
}

fn redact_user(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    // The user part ends at the *last* `@`: passwords often hold `/`, `@`
    // or `#` unescaped (generated base64), which a URL parser would take
    // for the path or the fragment.
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let user = &rest[..at];
    let user = match user.find(':') {
        Some(colon) => format!("{}:***", &user[..colon]),
        None if user.contains('/') => "***".to_owned(),
        None => user.to_owned(),
    };
    format!("{}://{}@{}", &url[..scheme_end], user, &rest[at + 1..])
}

/// Every `pass=` and `password=` parameter's value (up to the next `&` or
/// `#`) replaced by `***`, wherever a `?` starts the parameters. The name
/// is compared as redis-rs reads it, percent- and plus-decoded
/// (`pa%73s=` is `pass=`, and authenticates).
fn redact_params(url: &str) -> String {
    let Some(q) = url.find('?') else {
        return url.to_owned();
    };
    let (head, query) = url.split_at(q + 1);
    let mut out = head.to_owned();
    for (i, part) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        let key = form_decoded(part.split('=').next().unwrap_or(""));
        let secret = ["pass", "password"]
            .iter()
            .any(|k| key.trim().eq_ignore_ascii_case(k));
        match (secret, part.find('=')) {
            (true, Some(eq)) => {
                // A fragment after the value stays (it is no secret).
                let value = &part[eq + 1..];
                let tail = value.find('#').map_or("", |h| &value[h..]);
                out.push_str(&part[..=eq]);
                out.push_str("***");
                out.push_str(tail);
            }
            _ => out.push_str(part),
        }
    }
    out
}

/// `text` as a form-encoded query decodes it (`+` a space, `%XX` a
/// byte); bytes that are not UTF-8 become U+FFFD.
fn form_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
