//! Several servers at once, on the calling thread: every request is
//! written first, then every reply is read, so the servers work at the
//! same time and one thread waits for all of them. Redlock's votes and
//! Cluster's renewal batches (one per master) both go this way, so one
//! stalled server costs its own requests a timeout and nobody else's.

use std::time::Duration;

use redis::Value;

use super::node::Sent;
use super::pool::Con;
use super::{Call, Node};
use crate::error::{Error, ErrorKind, Result};

/// One server's part: the node, its packed commands, how many there are,
/// and what is written behind them when their replies are late (the undo
/// of the grants among them: the server runs it after them, however late).
pub(crate) type Request<'a> = (&'a Node, &'a [u8], usize, Option<&'a [Call<'a>]>);

/// Writes each request to its node, then reads every node's replies. A
/// node's replies are due within `limit` (by default the response timeout)
/// of its own send; one that fails or is late is an error in its place,
/// and a late one gets its request's undo written behind it.
///
/// Nodes with an idle spare connection are written to first, so that
/// their servers work while the others connect. Those without one connect
/// at the same time and are written to as soon as connected — a thread
/// each, only when several must: a stalled server's handshake must not
/// hold up the others' — within half the connect timeout (or of `limit`,
/// if shorter), so that the handshake's own round trips (redis-rs sends
/// two) end within one.
pub(crate) fn fan_out(
    requests: &[Request<'_>],
    limit: Option<Duration>,
) -> Vec<Result<Vec<Value>>> {
    fn send<'a>(r: &Request<'a>, con: Result<Con>, limit: Option<Duration>) -> Result<Sent<'a>> {
        let (n, packed, count, _) = *r;
        con.and_then(|con| n.send(con, packed, count, limit))
    }
    let mut sent: Vec<Option<Result<Sent<'_>>>> = requests
        .iter()
        .map(|r| match r.0.idle() {
            Ok(Some(con)) => Some(send(r, Ok(con), limit)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        })
        .collect();
    let missing: Vec<usize> = (0..sent.len()).filter(|&i| sent[i].is_none()).collect();
    let open = |n: &Node| n.open_spare(n.connect_timeout().min(limit.unwrap_or(Duration::MAX)) / 2);
    match missing.as_slice() {
        [] => {}
        [i] => sent[*i] = Some(send(&requests[*i], open(requests[*i].0), limit)),
        _ => {
            // Each thread writes as soon as its own connection is open.
            let opened = std::thread::scope(|s| {
                let handles: Vec<_> = missing
                    .iter()
                    .map(|&i| {
                        let r = &requests[i];
                        s.spawn(move || send(r, open(r.0), limit))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect::<Vec<_>>()
            });
            for (&i, s) in missing.iter().zip(opened) {
                sent[i] = Some(s);
            }
        }
    }
    sent.into_iter()
        .zip(requests)
        .map(|(s, r)| {
            s.unwrap_or_else(|| Err(Error::new(ErrorKind::Connection, "no connection").unsent()))
                .and_then(|s| s.recv(r.3))
        })
        .collect()
}
