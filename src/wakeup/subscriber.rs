//! The classic subscriber: one connection per client on the client's one
//! channel, every release of the client's servers announced there.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::{Shared, REFUSED_RETRY, SUBSCRIBER_TICK};
use crate::backend::{Backend, Wire};

/// The subscriber thread: listens until the client is dropped, reconnecting
/// with backoff; after each (re)subscription it wakes every head waiter,
/// since messages may have been missed while disconnected.
pub(super) fn subscriber(shared: Arc<Shared>, backend: Arc<Backend>) {
    let mut backoff = Duration::from_millis(50);
    let mut refused = false;
    while !shared.shutdown.load(Ordering::Acquire) {
        let con = match backend.subscriber() {
            Ok(con) => con,
            Err(e) => {
                log::debug!("redlease: wake-up subscriber cannot connect: {e}");
                sleep_unless_shutdown(&shared, backoff);
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let listened = match con {
            Wire::Redis(con) => listen_theirs(&shared, con),
            own => listen_ours(&shared, own, backend.timeouts().response),
        };
        match listened {
            Ok(()) => {
                refused = false;
                backoff = Duration::from_millis(50);
            }
            Err(e) if e.code() == Some("NOPERM") => {
                // An ACL without the channel (Redis 7's default
                // `resetchannels`): it will not change soon. Say so once;
                // waiters look again every fallback poll meanwhile.
                if !refused {
                    log::warn!(
                        "redlease: the server refuses the wake-up channel {:?} ({e}); waiters poll instead \
                         (slower). Allow the channel, as the README's ACL line does",
                        String::from_utf8_lossy(&shared.channel)
                    );
                }
                refused = true;
                backoff = REFUSED_RETRY;
                sleep_unless_shutdown(&shared, backoff);
            }
            Err(e) => {
                log::debug!("redlease: wake-up subscribe failed: {e}");
                backoff = (backoff * 2).min(Duration::from_secs(1));
                sleep_unless_shutdown(&shared, backoff);
            }
        }
    }
}

/// Subscribes on redlease's own connection and listens until it fails or
/// the client is dropped. Every value read is bounded: a whole reply by
/// the response timeout (the confirmation) and, whatever a server sends,
/// by the reply size cap, however many reads it takes (a server that
/// confirmed and then sent a terabyte message took a client to 3.8 GB).
/// `Err` only when the subscription was not confirmed.
fn listen_ours(shared: &Shared, mut con: Wire, response: Duration) -> redis::RedisResult<()> {
    let subscribe = redis::cmd("SUBSCRIBE")
        .arg(shared.channel.as_slice())
        .get_packed_command();
    con.send_packed_command(&subscribe)?;
    let until = Instant::now() + response;
    let confirmed = loop {
        match con.next_push(SUBSCRIBER_TICK.min(response))? {
            Some(v) => break v,
            None if Instant::now() < until => {}
            None => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the subscription was not confirmed in time",
                )
                .into())
            }
        }
    };
    if let Value::ServerError(e) = confirmed {
        return Err(e.into());
    }
    // Our own channel, for hand-overs naming us (see `watch`): asked for
    // apart, so that an ACL refusing it leaves the client channel live.
    // Its confirmation, or its refusal, is read and passed over below.
    let own = redis::cmd("SUBSCRIBE")
        .arg(own_channel(shared))
        .get_packed_command();
    con.send_packed_command(&own)?;
    listen(shared, |tick| {
        Ok(match con.next_push(tick)? {
            Some(Value::Array(parts)) => match <[Value; 3]>::try_from(parts) {
                Ok([Value::BulkString(kind), _, Value::BulkString(payload)])
                    if kind == b"message" =>
                {
                    Some(payload)
                }
                _ => None,
            },
            _ => None,
        })
    });
    Ok(())
}

/// [`listen_ours`] on redis-rs's connection (`Wire::open` falls back to
/// it only for TLS without our settings), which times each read.
fn listen_theirs(shared: &Shared, mut con: redis::Connection) -> redis::RedisResult<()> {
    con.set_read_timeout(Some(SUBSCRIBER_TICK))?;
    let mut pubsub = con.as_pubsub();
    pubsub.subscribe(shared.channel.as_slice())?;
    // As in `listen_ours`: refused by an ACL, the client channel stays.
    if let Err(e) = pubsub.subscribe(own_channel(shared)) {
        log::debug!("redlease: hand-over channel refused: {e}");
    }
    listen(shared, |tick| {
        pubsub.set_read_timeout(Some(tick))?;
        match pubsub.get_message() {
            Ok(msg) => Ok(Some(msg.get_payload_bytes().to_vec())),
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(e),
        }
    });
    Ok(())
}

/// A confirmed subscription, live until `next` fails or the client is
/// dropped: `next(tick)` waits at most `tick` for a message's payload
/// (`None`: nothing, or not a message). Between reads it hands the
/// hand-over looks that are due to the renewal thread (see `watch`), so a
/// read waits no longer than the next of them. Waiters are woken when it
/// starts and when it ends, since messages may have been missed around
/// either.
fn listen(shared: &Shared, mut next: impl FnMut(Duration) -> redis::RedisResult<Option<Vec<u8>>>) {
    shared.set_connected(true);
    shared.notify_all();
    // Namings of our client as a hand-over's watcher may have been missed
    // too: the looks they would have asked for.
    shared.watches.listening();
    while !shared.shutdown.load(Ordering::Acquire) {
        let tick = shared.watches.run_due().map_or(SUBSCRIBER_TICK, |due| {
            due.saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(1), SUBSCRIBER_TICK)
        });
        match next(tick) {
            Ok(Some(payload)) => shared.dispatch(&payload),
            Ok(None) => {}
            Err(e) => {
                log::debug!("redlease: wake-up subscriber lost its connection: {e}");
                break;
            }
        }
    }
    shared.set_connected(false);
    shared.notify_all();
}

/// The channel hand-overs that name this client publish on
/// (lua/publish.lua `name_watchers_spaced`): the client channel, `:`, our id.
fn own_channel(shared: &Shared) -> Vec<u8> {
    [shared.channel.as_slice(), b":", shared.me.as_bytes()].concat()
}

fn sleep_unless_shutdown(shared: &Shared, d: Duration) {
    let end = Instant::now() + d;
    while !shared.shutdown.load(Ordering::Acquire) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(SUBSCRIBER_TICK));
    }
}
