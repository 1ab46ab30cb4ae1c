//! Signals: the ones `run` catches while it waits or supervises (SIGINT,
//! SIGTERM, SIGHUP), kept as bits for the main loop, and `--lost-signal`'s
//! names.

use std::sync::atomic::{AtomicU32, Ordering};

pub(crate) fn parse_signal(s: &str) -> Result<i32, String> {
    let name = s.trim_start_matches("SIG");
    Ok(match name {
        "TERM" => libc::SIGTERM,
        "INT" => libc::SIGINT,
        "HUP" => libc::SIGHUP,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "QUIT" => libc::SIGQUIT,
        _ => {
            let n: i32 = name.parse().map_err(|_| format!("unknown signal {s:?}"))?;
            // 0 sends nothing (it only checks the process exists), and a
            // number past the real-time signals is refused by kill(2): a
            // lost lease would then stop nothing until --kill-after.
            if !(1..=libc::SIGRTMAX()).contains(&n) {
                return Err(format!(
                    "{n} is not a signal (1 to {} on this system)",
                    libc::SIGRTMAX()
                ));
            }
            n
        }
    })
}

/// SIGINT/SIGTERM/SIGHUP received and not yet handled, one bit per signal
/// (two different signals between two looks are both kept), forwarded to
/// the command. The command has its own group, so a terminal's Ctrl-C
/// reaches it either from the terminal (it is the foreground group) or
/// through us, never both.
pub(crate) static RECEIVED: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // An atomic or is async-signal-safe.
    if (0..32).contains(&sig) {
        RECEIVED.fetch_or(1 << sig, Ordering::SeqCst);
    }
}

/// The signals in a `RECEIVED` bit set, lowest first.
pub(crate) fn signals(bits: u32) -> impl Iterator<Item = i32> {
    (1..32).filter(move |s| bits & (1 << s) != 0)
}

/// The first pending signal, without taking it.
pub(crate) fn pending() -> Option<i32> {
    signals(RECEIVED.load(Ordering::SeqCst)).next()
}

pub(crate) fn install_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with our handler and SA_SIGINFO is a
        // valid argument; the handler is async-signal-safe (see above).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}
