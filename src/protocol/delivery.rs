//! Who hears a wake-up, with no I/O: the message a release publishes,
//! what a client's subscriber makes of each message it reads, and which
//! of the client's waiting threads an announcement of a key wakes. The
//! subscriber thread (`wakeup`) and the model checker's clients (`check/`)
//! both decide by these, so the checker explores the deliveries the
//! library makes.

use crate::protocol::watch::hand_over;

/// The message a release of `key` by client `me` publishes on the wake
/// channel: `<client id>:<key>`.
pub fn release_message(me: &str, key: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(me.len() + 1 + key.len());
    m.extend_from_slice(me.as_bytes());
    m.push(b':');
    m.extend_from_slice(key);
    m
}

/// What a message read by client `me`'s subscriber is to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heard<'a> {
    /// A hand-over naming this client a watcher of the key: it owes the
    /// name a look after the claim (`watch`); it wakes nobody.
    Named(&'a [u8]),
    /// A hand-over naming another client: nothing to do.
    NamedOther,
    /// A release of the key, by any client. This client's own releases
    /// count too: its renewal thread's looks (a shortened lease's, an
    /// offer's) publish for waiters in its own process, and nothing else
    /// tells them (round 3 dropped these, and its readers waited to their
    /// deadline).
    Released(&'a [u8]),
    /// Not a message this library sends.
    Foreign,
}

/// What `payload`, read on the wake channel, is to client `me`.
pub fn heard<'a>(me: &[u8], payload: &'a [u8]) -> Heard<'a> {
    if let Some((id, key)) = hand_over(payload) {
        return if id == me {
            Heard::Named(key)
        } else {
            Heard::NamedOther
        };
    }
    match payload.iter().position(|&b| b == b':') {
        Some(colon) => Heard::Released(&payload[colon + 1..]),
        None => Heard::Foreign,
    }
}

/// A thread waiting in a client's local queue of a key, as the queue's
/// rule sees it.
pub trait InLine {
    /// The local line it waits in (one line per permit count asked).
    fn line(&self) -> u32;
    /// It tried the server before it joined its line: it may be queued
    /// in Redis, and a grant made to it lapses unless it hears of it.
    fn tried(&self) -> bool;
}

/// The first waiter of each line of a local queue (in arrival order), in
/// one pass (lines are few: one per permit count asked for).
pub fn heads<'a, W, I>(q: I) -> impl Iterator<Item = &'a W>
where
    W: InLine + 'a,
    I: IntoIterator<Item = &'a W>,
{
    let mut seen: Vec<u32> = Vec::new();
    q.into_iter().filter(move |w| {
        let first = !seen.contains(&w.line());
        if first {
            seen.push(w.line());
        }
        first
    })
}

/// The waiters of a local queue (in arrival order) that hear an
/// announcement of its key: each line's head, and every waiter that tried
/// the server first (a head that tried comes twice; its wake-up slot
/// keeps one).
pub fn announced<'a, W, I>(q: I) -> impl Iterator<Item = &'a W>
where
    W: InLine + 'a,
    I: IntoIterator<Item = &'a W>,
    I::IntoIter: Clone,
{
    let q = q.into_iter();
    heads(q.clone()).chain(q.filter(|w| w.tried()))
}

#[cfg(test)]
mod tests {
    use super::*;

    impl InLine for (u32, bool) {
        fn line(&self) -> u32 {
            self.0
        }
        fn tried(&self) -> bool {
            self.1
        }
    }

    #[test]
    fn an_announcement_reaches_heads_and_waiters_that_tried() {
        // Line 0: a head that tried, one that waits its turn, one that
        // tried behind it (two threads both got to the server first).
        // Line 1: a head that did not try.
        let q = [(0, true), (0, false), (0, true), (1, false)];
        let got: Vec<usize> = announced(&q)
            .map(|w| q.iter().position(|x| std::ptr::eq(x, w)).unwrap())
            .collect();
        assert_eq!(got, [0, 3, 0, 2]);
    }

    #[test]
    fn a_client_hears_its_own_releases_and_only_its_own_namings() {
        let key = b"{n}".as_slice();
        assert_eq!(heard(b"c1", b"c1:{n}"), Heard::Released(key));
        assert_eq!(heard(b"c1", b"c2:{n}"), Heard::Released(key));
        assert_eq!(heard(b"c1", b"@c1:{n}"), Heard::Named(key));
        assert_eq!(heard(b"c1", b"@c2:{n}"), Heard::NamedOther);
        assert_eq!(heard(b"c1", b"@c1"), Heard::Foreign);
        assert_eq!(heard(b"c1", b"nothing"), Heard::Foreign);
        assert_eq!(release_message("c1", key), b"c1:{n}");
    }
}
