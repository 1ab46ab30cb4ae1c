//! `MONITOR` on one server, read on a thread of its own: the commands it
//! ran, each at the server's time, for a test that must see what a client
//! sent and when (an order or a gap no counter shows).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A command as `MONITOR` printed it: the server's time in seconds, and
/// the command's name and first argument (upper-cased name; for
/// `EVALSHA`, the script's SHA).
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: f64,
    pub name: String,
    pub first: String,
    /// Run by a script (`[0 lua]`), not sent by a client.
    pub by_script: bool,
}

pub struct Monitor {
    stop: Arc<AtomicBool>,
    reader: JoinHandle<Vec<Seen>>,
}

/// Reads for at most this long, however long the test forgets to stop it.
const LONGEST: Duration = Duration::from_secs(60);

impl Monitor {
    /// Starts monitoring the server on 127.0.0.1:`port` (no password);
    /// returns once the server has said OK, so that every command after
    /// this call is seen.
    pub fn start(port: u16) -> Monitor {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        s.write_all(b"MONITOR\r\n").unwrap();
        let mut r = BufReader::new(s);
        let mut ok = String::new();
        r.read_line(&mut ok).unwrap();
        assert_eq!(ok.trim_end(), "+OK", "MONITOR refused");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let reader = std::thread::spawn(move || {
            let (mut seen, mut line, began) = (Vec::new(), String::new(), Instant::now());
            while !flag.load(Ordering::Relaxed) && began.elapsed() < LONGEST {
                match r.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) if line.ends_with('\n') => {
                        seen.extend(parse(&line));
                        line.clear();
                    }
                    // A timeout keeps what was read of the line so far.
                    _ => {}
                }
            }
            seen
        });
        Monitor { stop, reader }
    }

    /// Stops monitoring; what the server ran meanwhile, in order.
    pub fn stop(self) -> Vec<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        self.reader.join().unwrap()
    }
}

/// `+1700000000.123456 [0 127.0.0.1:5000] "EVALSHA" "ab12…" "3" …`, or
/// `None` for any other line.
fn parse(line: &str) -> Option<Seen> {
    let line = line.strip_prefix('+')?;
    let (at, rest) = line.split_once(' ')?;
    let (source, rest) = rest.split_once("] ")?;
    let mut quoted = rest.split('"').skip(1).step_by(2);
    Some(Seen {
        at: at.parse().ok()?,
        name: quoted.next()?.to_ascii_uppercase(),
        first: quoted.next().unwrap_or("").to_owned(),
        by_script: source.ends_with(" lua"),
    })
}
