//! What `status` and `list` print, for people (lines) and machines
//! (JSON), and how names and server text are shown safely in a terminal.

use std::process::ExitCode;
use std::time::Duration;

use redlease::Client;

/// One row of `status --json` / `list --json`: the name as `list` shows
/// it, then what `LockInfo` says (serialized by serde, times in whole
/// milliseconds), with `held` and `fence` as `null` when the counter
/// lapsed.
#[derive(serde::Serialize)]
struct Row<'a> {
    name: String,
    held: bool,
    holder: &'a Option<String>,
    note: &'a Option<String>,
    remaining_ms: Option<u64>,
    fence: Option<u64>,
    waiters: usize,
    writer: &'a Option<String>,
    writer_remaining_ms: Option<u64>,
    readers: usize,
    permits_in_use: u64,
    permits: Option<u64>,
}

impl<'a> Row<'a> {
    fn of(name: &[u8], i: &'a redlease::LockInfo) -> Row<'a> {
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
        Row {
            name: shown(name),
            held: i.is_held(),
            holder: &i.holder,
            note: &i.note,
            remaining_ms: ms(i.remaining),
            // `null`, not 0: no fence is there (the counter lapsed).
            fence: (i.fence != 0).then_some(i.fence),
            waiters: i.waiters,
            writer: &i.writer,
            writer_remaining_ms: ms(i.writer_remaining),
            readers: i.readers,
            permits_in_use: i.permits_in_use,
            permits: i.permits,
        }
    }
}

/// `value` as one line of JSON.
pub(crate) fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value)
        .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }).to_string())
}

/// A name as text that shows every byte and reads back exactly: valid
/// UTF-8 as is, except that a backslash is doubled and control
/// characters and bytes that are not UTF-8 are written `\xNN` — the form
/// bash's `$'...'` quoting turns back into the same bytes. Two names never
/// look alike, and no name can move the cursor or forge a row.
pub(crate) fn shown(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u8)),
                c if c.is_control() => out.extend(c.escape_default()),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// `s` with control characters escaped, so that tokens and notes cannot
/// forge rows or send terminal escapes in text output.
pub(crate) fn printable(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Who holds it, for people: `locked by <holder> (<note>; held 12 s,
/// since 2026-11-25 21:10:03 UTC; 18000 ms left)`, or `free`.
pub(crate) fn holder_text(i: &redlease::LockInfo) -> String {
    let mut parts = Vec::new();
    if let Some(h) = &i.holder {
        let mut about = Vec::new();
        if let Some(n) = i.note.as_deref() {
            about.push(printable(n));
            if let Some(since) = note_since(n) {
                about.push(age_text(since));
            }
        }
        about.push(format!(
            "{} ms left",
            i.remaining.map_or(-1, |d| d.as_millis() as i64)
        ));
        parts.push(format!("locked by {} ({})", printable(h), about.join("; ")));
    }
    if let Some(w) = &i.writer {
        parts.push(format!("write-locked by {}", printable(w)));
    }
    if i.readers > 0 {
        parts.push(format!("{} readers", i.readers));
    }
    if i.permits_in_use > 0 {
        let of = i.permits.map(|n| format!(" of {n}")).unwrap_or_default();
        let permits = if i.permits_in_use == 1 {
            "permit"
        } else {
            "permits"
        };
        parts.push(format!("{} {permits} in use{of}", i.permits_in_use));
    }
    if parts.is_empty() {
        parts.push("free".into());
    }
    parts.join(", ")
}

/// The `since=<epoch seconds>` of a holder note written by `run`.
pub(crate) fn note_since(note: &str) -> Option<u64> {
    note.split_whitespace()
        .find_map(|w| w.strip_prefix("since="))?
        .parse()
        .ok()
}

/// `held 12 s, since 2026-11-25 21:10:03 UTC` for an epoch second.
pub(crate) fn age_text(since: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("held {} s, since {}", now.saturating_sub(since), utc(since))
}

/// An epoch second as `YYYY-MM-DD hh:mm:ss UTC` (civil from days, after
/// Howard Hinnant's algorithm; no time zone database needed).
pub(crate) fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

pub(crate) fn info_line(name: &[u8], i: &redlease::LockInfo) -> String {
    let name = shown(name);
    // A fence of 0: the counter lapsed (nobody held or waited for a
    // while); the next one will be larger than any before.
    let fence = if i.fence != 0 {
        format!("fence {}", i.fence)
    } else if i.holder.is_none() && i.writer.is_none() && i.permits_in_use > 0 {
        // Permits have no fence: only locks and write holds draw them.
        "no fence (permits only)".to_string()
    } else {
        "no fence (the counter lapsed with the last hold; the next is larger than any before)"
            .to_string()
    };
    format!("{name}\t{}\t{fence}\twaiters {}", holder_text(i), i.waiters)
}

pub(crate) fn status(client: &Client, name: &[u8], as_json: bool) -> redlease::Result<ExitCode> {
    let info = client.inspect(name)?;
    if as_json {
        println!("{}", json(&Row::of(name, &info)));
    } else {
        println!("{}", info_line(name, &info));
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn list(client: &Client, pattern: &[u8], as_json: bool) -> redlease::Result<ExitCode> {
    let names = client.list_bytes(pattern)?;
    let mut rows = Vec::new();
    for name in &names {
        rows.push((name, client.inspect(name)?));
    }
    if as_json {
        let items: Vec<Row<'_>> = rows.iter().map(|(n, i)| Row::of(n, i)).collect();
        println!("{}", json(&items));
    } else {
        for (n, i) in &rows {
            println!("{}", info_line(n, i));
        }
        if rows.is_empty() {
            // On stderr: a script reading stdout still sees no rows.
            say!(
                "redlease: nothing held matches {:?}",
                String::from_utf8_lossy(pattern)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
