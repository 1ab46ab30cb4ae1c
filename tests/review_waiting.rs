mod common;
use common::{client_with, Server};
use redis::Commands;
use redlease::Client;
use std::time::{Duration, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
fn no_poll(url: &str, wd: Duration) -> Client {
    Client::builder()
        .url(url)
        .fallback_poll(Duration::from_secs(60))
        .watchdog_timeout(wd)
        .build()
        .unwrap()
}

/// R1: a waiter whose wait outlasts its own lease gets a guard that is lost on arrival.
#[test]
fn r1_long_wait_guard_lost() {
    let server = Server::start();
    let a = client_with(&server, |b| b.watchdog_timeout(ms(1000)));
    let g = a.lock("r1").acquire().unwrap();
    let url = server.url();
    let t = std::thread::spawn(move || {
        let b = no_poll(&url, ms(1000));
        let g = b.lock("r1").acquire().unwrap();
        let held = g.is_held();
        let exp = g.expires_in();
        std::thread::sleep(ms(1500));
        let held2 = g.is_held();
        let rel = g.release();
        (held, exp, held2, format!("{rel:?}"))
    });
    std::thread::sleep(ms(3000));
    g.release().unwrap();
    // While b "holds" it, can c take it?
    std::thread::sleep(ms(1300));
    let c = client_with(&server, |b| b);
    let cg = c.lock("r1").try_acquire().unwrap();
    println!(
        "R1 third client try_acquire while waiter's guard alive: {}",
        cg.is_some()
    );
    drop(cg);
    let r = t.join().unwrap();
    println!(
        "R1 waiter guard: is_held={} expires_in={:?} is_held_after_1.5s={} release={}",
        r.0, r.1, r.2, r.3
    );
}

/// R2: fixed lease shorter than the wait
#[test]
fn r2_fixed_lease() {
    let server = Server::start();
    let a = client_with(&server, |b| b);
    let g = a.lock("r2").acquire().unwrap();
    let url = server.url();
    let t = std::thread::spawn(move || {
        let b = no_poll(&url, ms(30000));
        let g = b
            .lock("r2")
            .lease(ms(2000))
            .acquire_timeout(Duration::from_secs(20))
            .unwrap()
            .unwrap();
        (g.is_held(), g.expires_in())
    });
    std::thread::sleep(ms(3000));
    g.release().unwrap();
    println!(
        "R2 fixed 2 s lease after a 3 s wait: {:?}",
        t.join().unwrap()
    );
}

/// R3: force_unlock / FLUSHALL while a waiter is blocked.
#[test]
fn r3_flushall() {
    let server = Server::start();
    for mode in ["force_unlock", "flushall", "del"] {
        let a = client_with(&server, |b| b.watchdog_timeout(ms(8000)));
        let name = format!("r3{mode}");
        let g = a.lock(&name).acquire().unwrap();
        let url = server.url();
        let n2 = name.clone();
        let t = std::thread::spawn(move || {
            let b = no_poll(&url, ms(8000));
            let g = b
                .lock(&n2)
                .acquire_timeout(Duration::from_secs(15))
                .unwrap();
            (Instant::now(), g.is_some())
        });
        std::thread::sleep(ms(500));
        let mut con = server.con();
        let at = Instant::now();
        match mode {
            "force_unlock" => {
                let c = client_with(&server, |b| b);
                println!("forced {:?}", c.lock(&name).force_unlock());
            }
            "flushall" => {
                let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
            }
            _ => {
                let _: () = con.del(format!("{{{name}}}")).unwrap();
                let keys: Vec<String> = con.keys("*").unwrap();
                println!("keys {keys:?}");
            }
        }
        let (got, ok) = t.join().unwrap();
        println!("R3 {mode}: waiter got it {:?} after (ok={ok})", got - at);
        std::thread::sleep(ms(200));
        let keys: Vec<String> = con.keys("*").unwrap();
        for k in keys {
            let ty: String = redis::cmd("TYPE").arg(&k).query(&mut con).unwrap();
            let pt: i64 = con.pttl(&k).unwrap();
            let v: String = if ty == "string" {
                con.get(&k).unwrap()
            } else {
                String::new()
            };
            println!("  after {mode}: {k} {ty} pttl={pt} {v}");
        }
        std::mem::forget(g);
    }
}
