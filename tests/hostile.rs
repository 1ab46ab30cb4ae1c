//! What a hostile or broken server can do to a client: fake servers on
//! loopback that answer the handshake like Redis and then misbehave. The
//! client must fail the call, bounded in time and in memory, never abort.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::Client;

/// Reads one RESP command (an array of bulk strings) and returns its name,
/// upper-cased; `None` when the client went away.
fn command(r: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let n: usize = line.trim().strip_prefix('*')?.parse().ok()?;
    let mut name = None;
    for _ in 0..n {
        line.clear();
        r.read_line(&mut line).ok()?;
        let len: usize = line.trim().strip_prefix('$')?.parse().ok()?;
        let mut arg = vec![0; len + 2];
        r.read_exact(&mut arg).ok()?;
        name.get_or_insert_with(|| String::from_utf8_lossy(&arg[..len]).to_uppercase());
    }
    name
}

/// A server on a free loopback port that answers `PING` and turns down
/// `CONFIG`, and answers every other command with `huge`: a bulk string
/// header announcing a terabyte, then 1 MiB chunks for as long as the
/// client reads (at most 30 s).
fn hostile_server() -> (String, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    std::thread::spawn(move || {
        listener.set_nonblocking(true).unwrap();
        let end = Instant::now() + Duration::from_secs(60);
        while !s.load(Ordering::Relaxed) && Instant::now() < end {
            let Ok((con, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            con.set_nonblocking(false).unwrap();
            std::thread::spawn(move || {
                let mut out = con.try_clone().unwrap();
                let mut r = BufReader::new(con);
                while let Some(cmd) = command(&mut r) {
                    let ok = match cmd.as_str() {
                        "PING" => out.write_all(b"+PONG\r\n").is_ok(),
                        "CONFIG" | "CLIENT" | "HELLO" => out.write_all(b"-ERR no\r\n").is_ok(),
                        _ => {
                            let _ = out.write_all(b"$1099511627776\r\n");
                            let chunk = vec![b'x'; 1 << 20];
                            let end = Instant::now() + Duration::from_secs(30);
                            while Instant::now() < end && out.write_all(&chunk).is_ok() {}
                            false
                        }
                    };
                    if !ok {
                        return;
                    }
                }
            });
        }
    });
    (url, stop)
}

/// Peak resident memory of this process, in KiB (`VmHWM`).
fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Reproduction (security review): a reply had no size cap. `$1099511627776`
/// in answer to an `EVALSHA`, then a stream: the call failed at its
/// deadline, but the process peaked at 1.9 GB (and aborted under a 2 GB
/// limit). A call now reads at most 64 MiB, and fails there.
#[test]
fn a_terabyte_reply_fails_the_call_without_filling_memory() {
    let (url, stop) = hostile_server();
    let c = Client::builder()
        .url(&url)
        .response_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let before = peak_kib();
    let t = Instant::now();
    let r = c.lock("huge").try_acquire();
    let took = t.elapsed();
    let grew = peak_kib().saturating_sub(before) / 1024;
    stop.store(true, Ordering::Relaxed);
    println!("FIGURES a terabyte reply: {r:?} after {took:?}, peak memory +{grew} MiB");
    assert!(r.is_err());
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert!(grew < 512, "peak memory grew {grew} MiB");
}
