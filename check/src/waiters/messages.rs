//! What a client hears: wake-up messages for its local line's head (and
//! the threads that tried first), and a hand-over's naming of its watchers
//! (the look after the claim), from when its subscriber listens.

use redlease::__protocol as p;

use super::{Kind, Main, State, Subscriber, WaitModel};
use crate::parties::Life;
use crate::primitive::Primitive;

impl<P: Primitive> WaitModel<P> {
    /// A hand-over names its watchers (`@c1:{s}:sem`, lua/publish.lua
    /// `name_watchers_spaced`): a named client whose server grants directly and
    /// which is in an acquisition that blocks or is patient (a reader)
    /// replaces its pending watch with a look at the name after the claim
    /// (`Watches::named`). A frozen client's subscriber reads it when the
    /// client resumes.
    pub(super) fn hear_watchers(&self, s: &mut State, pid: usize) {
        let first = self.threads(s, pid).next().unwrap_or(pid);
        if !s.clients[first].listening {
            return; // sent before its subscriber listened
        }
        match s.clients[first].life {
            Life::Frozen => s.clients[first].named = true,
            Life::Running => self.read_naming(s, pid),
            Life::Crashed | Life::Exited => {}
        }
    }

    /// Thread `i`'s client starts its subscriber, if it was not listening
    /// yet: namings sent before went unheard, so each name a blocked
    /// waiter of the client waits on gets the look a naming asks for
    /// (`Watches::listening`).
    pub(super) fn listen(&self, s: &mut State, i: usize) {
        let pid = self.pid(i);
        let first = self.threads(s, pid).next().unwrap_or(i);
        if !s.clients[first].listening {
            s.clients[first].listening = true;
            // `NamedLooks::maybe_named`: never moves a look owed already.
            let owed = self.threads(s, pid).any(|j| {
                let c = &s.clients[j];
                crate::looks::owes(&c.looks, c.name, s.now)
            });
            if self.subscriber != Subscriber::NoMakeUp && !owed {
                self.read_naming(s, pid);
            }
        }
    }

    /// Client `pid`'s subscriber reads a naming: the look it asks for.
    pub(super) fn read_naming(&self, s: &mut State, pid: usize) {
        let now = s.now;
        let Some(j) = self.threads(s, pid).find(|&j| {
            let c = &s.clients[j];
            c.life == Life::Running
                && self.watches_hand_overs(s, j)
                && match &c.main {
                    Main::Blocked { .. } | Main::Waiting { .. } | Main::Local { .. } => true,
                    Main::Call { kind, .. } => {
                        matches!(kind, Kind::Grant { queue: true } | Kind::Popped { .. })
                    }
                    Main::Idle => false,
                }
        }) else {
            return;
        };
        let c = &mut s.clients[j];
        crate::looks::named_look(&mut c.looks, c.name, now);
    }

    /// Wakes client `pid`'s head, and its threads that tried first
    /// (`Lines::notify`), of those `waits` says wait for what was
    /// announced (given what each asks, and of which name): a message, or
    /// a release of its own.
    pub(super) fn wake(&self, s: &mut State, pid: usize, waits: impl Fn(P::Mode, u8) -> bool) {
        // The client's local queue in arrival order (one line: its threads
        // ask alike), then its threads subscribed outside it (each in its
        // last second after a block, and each one that tried first), and
        // whom of them the library's rule wakes.
        let mut line: Vec<Thread> = self
            .threads(s, pid)
            .filter(|&j| s.clients[j].subscribed)
            .map(|j| {
                let c = &s.clients[j];
                Thread {
                    at: c.queued.unwrap_or(u32::MAX),
                    j,
                    tried: c.tried && self.subscriber != Subscriber::HeadsOnly,
                }
            })
            .collect();
        line.sort_by_key(|t| (t.at, t.j));
        let woken: Vec<usize> = p::announced(&line).map(|t| t.j).collect();
        for j in woken {
            let name = s.clients[j].name;
            let mode = self.at(j, name);
            let c = &mut s.clients[j];
            // A frozen client's subscriber reads it when it resumes.
            if matches!(c.life, Life::Running | Life::Frozen) && waits(mode, name) {
                c.inbox = true;
            }
        }
    }
}

/// A thread in its client's local queue, as the library's rule
/// (`protocol::delivery::announced`) sees it.
struct Thread {
    at: u32,
    j: usize,
    tried: bool,
}

impl p::InLine for Thread {
    fn line(&self) -> u32 {
        0
    }
    fn tried(&self) -> bool {
        self.tried
    }
}
