//! Redis Cluster's key slots, and a hash tag for each slot: what puts a key
//! in the same slot as a given name (the fence floor, see lua/fence.lua).
//! Plain arithmetic, built without the `cluster` feature too.

use std::sync::OnceLock;

/// The number of slots of a Redis Cluster.
const SLOTS: usize = 16384;

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag, modulo 16384.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .map(|close| &rest[..close])
        })
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    crc16(tagged) % SLOTS as u16
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A short hash tag (`{tag}`) whose keys fall in `slot`: the first of
/// `0`, `1`, ... (base 36) that does. Found once for every slot (about
/// 170,000 CRCs, a few milliseconds), then looked up.
pub(crate) fn slot_tag(slot: u16) -> &'static str {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = vec![String::new(); SLOTS];
        let mut left = SLOTS;
        // Bounded: base-36 strings of up to 4 characters (1.7 million)
        // cover every slot many times over.
        for n in 0u32..36u32.pow(4) {
            let tag = base36(n);
            let s = crc16(tag.as_bytes()) as usize % SLOTS;
            if tags[s].is_empty() {
                tags[s] = tag;
                left -= 1;
                if left == 0 {
                    break;
                }
            }
        }
        tags
    });
    &tags[usize::from(slot) % SLOTS]
}

fn base36(mut n: u32) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_a_tag_in_that_slot() {
        for slot in 0..SLOTS as u16 {
            let tag = slot_tag(slot);
            assert!(!tag.is_empty(), "slot {slot}");
            assert_eq!(key_slot(format!("x{{{tag}}}y").as_bytes()), slot);
        }
    }

    #[test]
    fn slots_are_those_redis_computes() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        // The examples of the `CLUSTER KEYSLOT` documentation.
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b"foo{hash_tag}"), 2515);
        assert_eq!(key_slot(b"hash_tag"), 2515);
        // An empty tag is no tag; only the first `{...}` counts.
        assert_eq!(key_slot(b"{}x"), crc16(b"{}x") % 16384);
        assert_eq!(key_slot(b"{a}{b}"), key_slot(b"a"));
    }
}
