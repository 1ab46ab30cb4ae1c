//! The seed article's market: sellers list items, buyers buy them, many
//! threads in two "processes" at once. Each trade locks the item and the
//! buyer's wallet (in a fixed order, so no deadlock), checks funds and
//! availability, and moves money and goods. No item is sold twice and no
//! money is created or lost.
//!
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run --example marketplace`

#[path = "support/server.rs"]
mod support;

use redlease::redis::Commands;
use redlease::Client;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::url();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    let items = 20;
    let buyers = 4;
    let price = 10;
    let start_funds = 100;
    for i in 0..items {
        let _: () = con.hset(format!("market:{run}:item:{i}"), "owner", "seller")?;
    }
    for b in 0..buyers {
        let _: () = con.set(format!("market:{run}:funds:{b}"), start_funds)?;
    }
    let _: () = con.set(format!("market:{run}:funds:seller"), 0)?;

    let threads: Vec<_> = (0..buyers)
        .map(|b| {
            let (url, run) = (url.clone(), run.clone());
            std::thread::spawn(move || -> Result<usize, redlease::Error> {
                let client = Client::open(&url)?; // one client per buyer process
                let mut con = redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection())
                    .map_err(redlease::Error::from)?;
                let mut bought = 0;
                for i in (0..items).map(|i| (i + b * 5) % items) {
                    // Lock order: item before wallets, seller's wallet last.
                    let item = client.lock(format!("market:{run}:item:{i}")).acquire()?;
                    let wallet = client.lock(format!("market:{run}:wallet:{b}")).acquire()?;
                    let seller = client
                        .lock(format!("market:{run}:wallet:seller"))
                        .acquire()?;
                    let key = format!("market:{run}:item:{i}");
                    let owner: String = con.hget(&key, "owner").map_err(redlease::Error::from)?;
                    let funds: i64 = con
                        .get(format!("market:{run}:funds:{b}"))
                        .map_err(redlease::Error::from)?;
                    if owner == "seller" && funds >= price {
                        let seller_funds: i64 = con
                            .get(format!("market:{run}:funds:seller"))
                            .map_err(redlease::Error::from)?;
                        let _: () = con
                            .set(format!("market:{run}:funds:{b}"), funds - price)
                            .map_err(redlease::Error::from)?;
                        let _: () = con
                            .set(format!("market:{run}:funds:seller"), seller_funds + price)
                            .map_err(redlease::Error::from)?;
                        let _: () = con
                            .hset(&key, "owner", format!("buyer{b}"))
                            .map_err(redlease::Error::from)?;
                        bought += 1;
                    }
                    seller.release()?;
                    wallet.release()?;
                    item.release()?;
                }
                Ok(bought)
            })
        })
        .collect();
    let mut sold = 0;
    for (b, t) in threads.into_iter().enumerate() {
        let n = t.join().expect("buyer panicked")?;
        println!("buyer {b} bought {n} items");
        sold += n;
    }
    let mut money = con.get::<_, i64>(format!("market:{run}:funds:seller"))?;
    for b in 0..buyers {
        money += con.get::<_, i64>(format!("market:{run}:funds:{b}"))?;
    }
    let mut owned = 0;
    for i in 0..items {
        let owner: String = con.hget(format!("market:{run}:item:{i}"), "owner")?;
        owned += usize::from(owner != "seller");
    }
    println!(
        "items sold {sold}, items owned by buyers {owned}, money in the market {money} (start {})",
        buyers as i64 * start_funds
    );
    assert_eq!(sold, owned);
    assert_eq!(money, buyers as i64 * start_funds);
    for i in 0..items {
        let _: () = con.del(format!("market:{run}:item:{i}"))?;
    }
    for b in 0..buyers {
        let _: () = con.del(format!("market:{run}:funds:{b}"))?;
    }
    let _: () = con.del(format!("market:{run}:funds:seller"))?;
    Ok(())
}
