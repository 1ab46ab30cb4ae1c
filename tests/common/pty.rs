//! `redlease` in a pseudo-terminal: what a user at a terminal types
//! (Ctrl-C, Ctrl-Z, a line) reaches it as from a real one.

use std::time::{Duration, Instant};

use super::Server;

/// `redlease` (with `args`) started in a new pseudo-terminal: returns its
/// pid and the terminal's master side. `tostop`: `stty tostop` first;
/// `stdin_null`: its stdin is `/dev/null`, the terminal still its
/// controlling one.
pub fn in_pty(server: &Server, args: &[&str], tostop: bool, stdin_null: bool) -> (i32, i32) {
    let exe = std::ffi::CString::new(env!("CARGO_BIN_EXE_redlease")).unwrap();
    let args: Vec<std::ffi::CString> = std::iter::once("redlease")
        .chain(args.iter().copied())
        .map(|a| std::ffi::CString::new(a).unwrap())
        .collect();
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let url = std::ffi::CString::new(format!("REDIS_URL={}", server.url())).unwrap();
    let path = std::ffi::CString::new("PATH=/usr/local/bin:/usr/bin:/bin").unwrap();
    let envp = [url.as_ptr(), path.as_ptr(), std::ptr::null()];
    let null = c"/dev/null";
    let mut master: libc::c_int = -1;
    // SAFETY: forkpty, then only async-signal-safe calls in the child.
    let pid = unsafe {
        libc::forkpty(
            &mut master,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert!(pid >= 0, "forkpty failed");
    if pid == 0 {
        unsafe {
            if tostop {
                let mut t: libc::termios = std::mem::zeroed();
                libc::tcgetattr(0, &mut t);
                t.c_lflag |= libc::TOSTOP;
                libc::tcsetattr(0, libc::TCSANOW, &t);
            }
            if stdin_null {
                let fd = libc::open(null.as_ptr(), libc::O_RDONLY);
                libc::dup2(fd, 0);
            }
            libc::execve(exe.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(127);
        }
    }
    // SAFETY: our own fd.
    unsafe {
        let flags = libc::fcntl(master, libc::F_GETFL);
        libc::fcntl(master, libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    (pid, master)
}

/// Types `bytes` into the terminal.
pub fn type_in(master: i32, bytes: &[u8]) {
    // SAFETY: writing our buffer to our own fd.
    assert_eq!(
        unsafe { libc::write(master, bytes.as_ptr().cast(), bytes.len()) },
        bytes.len() as isize
    );
}

/// Waits up to `limit` for `pid` (draining the terminal meanwhile): its
/// exit code, or `None` (then it is killed, with its group).
pub fn pty_exit(pid: i32, master: i32, limit: Duration) -> Option<i32> {
    let end = Instant::now() + limit;
    let mut status = 0;
    let mut code = None;
    while Instant::now() < end {
        let mut buf = [0u8; 512];
        // SAFETY: reading into our buffer from our own fd; waitpid on our
        // child.
        unsafe {
            libc::read(master, buf.as_mut_ptr().cast(), buf.len());
            if libc::waitpid(pid, &mut status, libc::WNOHANG) == pid {
                code = Some(if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else {
                    128 + libc::WTERMSIG(status)
                });
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if code.is_none() {
        // SAFETY: cleaning up what this test started.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, &mut status, 0);
        }
    }
    // SAFETY: our own fd.
    unsafe { libc::close(master) };
    code
}
