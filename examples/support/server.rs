//! Where the examples find Redis, and what they say when it is not there.

use std::time::Duration;

/// `$REDIS_URL`, or the local default, checked with one quick PING; when
/// nothing answers, prints what was tried and how to get a server, and
/// exits.
pub fn url() -> String {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let answered = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
        .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
    if let Err(e) = answered {
        eprintln!(
            "no Redis server answered at {} ({e}).\n\
             Set REDIS_URL to a server you can use, or run ./scripts/demo.sh, \
             which starts a private redis-server and runs every example against it.",
            redlease_redact(&url)
        );
        std::process::exit(2);
    }
    url
}

/// The URL without its password, for the message.
fn redlease_redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let user = &url[s + 3..at];
            let user = user.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..s + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}
