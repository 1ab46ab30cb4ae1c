//! What a client hears: wake-up messages for its local line's head (and
//! the threads that tried first), and a hand-over's naming of its watchers
//! (the look after the claim), from when its subscriber listens.

use super::{Kind, Main, State, Subscriber, WaitModel};
use crate::parties::Life;
use crate::primitive::Primitive;

impl<P: Primitive> WaitModel<P> {
    /// A hand-over names its watchers (`@c1:{s}:sem`, lua/publish.lua
    /// `name_watchers_spaced`): a named client whose server grants directly and
    /// which is in an acquisition replaces its pending watch with a look
    /// at the name after the claim (`Watches::on_message`). A frozen
    /// client's subscriber reads it when the client resumes.
    pub(super) fn hear_watchers(&self, s: &mut State, id: &[u8]) {
        let Some(pid) = std::str::from_utf8(id)
            .ok()
            .and_then(|id| id.strip_prefix('c'))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&pid| self.threads(s, pid).next().is_some())
        else {
            return;
        };
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
                && self.grants_directly(s, j)
                && match &c.main {
                    Main::Blocked { .. } | Main::Waiting { .. } | Main::Local { .. } => true,
                    Main::Call { kind, .. } => {
                        matches!(kind, Kind::Grant { queue: true } | Kind::Popped)
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
        let head = self.head(s, pid);
        for j in (0..s.clients.len()).filter(|&j| self.pid(j) == pid) {
            let name = s.clients[j].name;
            let mode = self.at(j, name);
            let c = &mut s.clients[j];
            let tried = c.tried && self.subscriber != Subscriber::HeadsOnly;
            // A frozen client's subscriber reads it when it resumes.
            if matches!(c.life, Life::Running | Life::Frozen)
                && c.subscribed
                && (head == Some(j) || tried)
                && waits(mode, name)
            {
                c.inbox = true;
            }
        }
    }
}
