//! A script call's keys and arguments as the server reads them: `Args`,
//! one buffer per call with every argument already encoded (RESP bulk
//! strings), and `Parts`, owned, borrowed or encoded, so that calls are
//! put together without copying.

/// A call's keys, or its arguments: each in a buffer of its own, all in
/// one (`Args`), or borrowed from other calls (several calls put together
/// as one run, see `PreparedCall::together`, without copying a byte of
/// theirs: the copies were a tenth of a multi-lock's cost on the client):
/// picked one by one, or each call's arguments whole, one after another.
#[derive(Clone, Copy)]
pub(crate) enum Parts<'a> {
    Owned(&'a [Vec<u8>]),
    Borrowed(&'a [&'a [u8]]),
    Encoded(&'a Args),
    Runs(&'a [&'a Args]),
}

impl<'a> Parts<'a> {
    pub(crate) fn len(self) -> usize {
        match self {
            Parts::Owned(p) => p.len(),
            Parts::Borrowed(p) => p.len(),
            Parts::Encoded(p) => p.len(),
            Parts::Runs(p) => p.iter().map(|a| a.len()).sum(),
        }
    }

    pub(crate) fn get(self, i: usize) -> Option<&'a [u8]> {
        match self {
            Parts::Owned(p) => p.get(i).map(Vec::as_slice),
            Parts::Borrowed(p) => p.get(i).copied(),
            Parts::Encoded(_) | Parts::Runs(_) => self.iter().nth(i),
        }
    }

    /// The key a call is routed by on Cluster.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn first(self) -> Option<&'a [u8]> {
        self.get(0)
    }

    pub(crate) fn iter(self) -> PartsIter<'a> {
        let (run, runs) = match self {
            Parts::Encoded(a) => (Some(a), &[][..]),
            Parts::Runs(r) => (r.first().copied(), r.get(1..).unwrap_or_default()),
            _ => (None, &[][..]),
        };
        PartsIter {
            parts: self,
            next: 0,
            run,
            runs,
            at: 0,
        }
    }
}

/// [`Parts::iter`]: in order, without looking each part up from the start
/// (an `Args` is read front to back).
#[derive(Clone)]
pub(crate) struct PartsIter<'a> {
    parts: Parts<'a>,
    next: usize,
    /// `Parts::Encoded` and `Parts::Runs`: the arguments being read, those
    /// after them, and where the next part's encoding starts.
    run: Option<&'a Args>,
    runs: &'a [&'a Args],
    at: usize,
}

impl<'a> Iterator for PartsIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let part = match self.parts {
            Parts::Encoded(_) | Parts::Runs(_) => loop {
                let run = self.run?;
                if let Some((part, end)) = run.part_at(self.at) {
                    self.at = end;
                    break part;
                }
                self.run = self.runs.first().copied();
                self.runs = self.runs.get(1..).unwrap_or_default();
                self.at = 0;
            },
            other => other.get(self.next)?,
        };
        self.next += 1;
        Some(part)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.parts.len().saturating_sub(self.next);
        (left, Some(left))
    }
}

impl ExactSizeIterator for PartsIter<'_> {}

impl<'a> From<&'a [Vec<u8>]> for Parts<'a> {
    fn from(p: &'a [Vec<u8>]) -> Parts<'a> {
        Parts::Owned(p)
    }
}

impl<'a> From<&'a [&'a [u8]]> for Parts<'a> {
    fn from(p: &'a [&'a [u8]]) -> Parts<'a> {
        Parts::Borrowed(p)
    }
}

impl<'a> From<&'a Args> for Parts<'a> {
    fn from(p: &'a Args) -> Parts<'a> {
        Parts::Encoded(p)
    }
}

/// A kept call's arguments, in one buffer, each already as the server
/// reads it (`$<len>\r\n<bytes>\r\n`): one allocation for all of them,
/// and packing a call copies them in one piece. Each argument in a
/// `Vec<u8>` of its own was about half the allocations of a lock's cycle
/// (a spec builds several calls of about ten arguments each), and the
/// allocator a fifth of the client's time in a multi-lock's.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Args {
    resp: Vec<u8>,
    count: usize,
}

impl std::fmt::Debug for Args {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

impl Args {
    /// Room for the arguments a script call usually has (a handful of
    /// tokens, keys' prefixes and numbers) without growing.
    const ROOM: usize = 256;

    pub(crate) fn new() -> Args {
        Args {
            resp: Vec::with_capacity(Self::ROOM),
            count: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Appends one argument.
    pub(crate) fn push(&mut self, part: &[u8]) {
        push_bulk(&mut self.resp, part);
        self.count += 1;
    }

    /// Appends a duration in whole milliseconds (see [`millis`]).
    pub(crate) fn push_millis(&mut self, d: std::time::Duration) {
        self.push_number(d.as_millis());
    }

    /// Appends a number in decimal.
    pub(crate) fn push_number(&mut self, n: impl Into<u128>) {
        let mut digits = [0u8; 40];
        self.push(u128_digits(&mut digits, n.into()));
    }

    /// What the release scripts of a lock and a read-write lock take
    /// first: who releases, the wake-up channel and message, the grant
    /// prefix and the claim window.
    pub(crate) fn release_head(
        who: &[u8],
        wake: (&[u8], &[u8]),
        prefix: &[u8],
        claim: std::time::Duration,
    ) -> Args {
        let mut a = Args::new();
        for part in [who, wake.0, wake.1, prefix] {
            a.push(part);
        }
        a.push_millis(claim);
        a
    }

    /// Appends a yes/no argument: the word the script tests for, or empty.
    pub(crate) fn push_word(&mut self, on: bool, word: &str) {
        self.push(if on { word.as_bytes() } else { b"" });
    }

    pub(crate) fn get(&self, i: usize) -> Option<&[u8]> {
        Parts::Encoded(self).get(i)
    }

    /// Each argument as a byte string of its own (the model checker's
    /// form).
    pub(crate) fn to_vecs(&self) -> Vec<Vec<u8>> {
        self.iter().map(<[u8]>::to_vec).collect()
    }

    pub(crate) fn iter(&self) -> PartsIter<'_> {
        Parts::Encoded(self).iter()
    }

    /// Replaces argument `i` (if there is one) with `part`, in place.
    pub(crate) fn set(&mut self, i: usize, part: &[u8]) {
        let mut at = 0;
        for _ in 0..i {
            match self.part_at(at) {
                Some((_, end)) => at = end,
                None => return,
            }
        }
        let Some((_, end)) = self.part_at(at) else {
            return;
        };
        let mut encoded = Vec::with_capacity(part.len() + 24);
        push_bulk(&mut encoded, part);
        self.resp.splice(at..end, encoded);
    }

    /// Replaces the last argument (if there is one) with `part`.
    pub(crate) fn set_last(&mut self, part: &[u8]) {
        if let Some(last) = self.count.checked_sub(1) {
            self.set(last, part);
        }
    }

    /// The arguments as the server reads them, one after another.
    pub(crate) fn resp(&self) -> &[u8] {
        &self.resp
    }

    /// The argument whose encoding starts at byte `at`, and where the next
    /// one starts. Only `push` and `set` write the buffer, so every
    /// encoding is whole; `None` at the end.
    fn part_at(&self, at: usize) -> Option<(&[u8], usize)> {
        let rest = self.resp.get(at..)?.strip_prefix(b"$")?;
        let mut len = 0usize;
        let mut digits = 0;
        for &b in rest {
            if !b.is_ascii_digit() {
                break;
            }
            len = len.checked_mul(10)?.checked_add(usize::from(b - b'0'))?;
            digits += 1;
        }
        let start = at + 1 + digits + 2;
        let part = self.resp.get(start..start.checked_add(len)?)?;
        Some((part, start + len + 2))
    }
}

impl<T: AsRef<[u8]>> FromIterator<T> for Args {
    fn from_iter<I: IntoIterator<Item = T>>(parts: I) -> Args {
        let mut args = Args::new();
        for p in parts {
            args.push(p.as_ref());
        }
        args
    }
}

/// `part` as a RESP bulk string: `$<len>\r\n<bytes>\r\n`.
pub(super) fn push_bulk(out: &mut Vec<u8>, part: &[u8]) {
    out.push(b'$');
    push_decimal(out, part.len());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(part);
    out.extend_from_slice(b"\r\n");
}

/// `n` in decimal, without a `String` of its own.
pub(super) fn push_decimal(out: &mut Vec<u8>, n: usize) {
    let mut digits = [0u8; 40];
    out.extend_from_slice(u128_digits(&mut digits, n as u128));
}

/// `n` in decimal, written at the end of `digits` (39 digits hold any
/// `u128`).
pub(super) fn u128_digits(digits: &mut [u8; 40], mut n: u128) -> &[u8] {
    let mut at = digits.len();
    // Every number sent fits 64 bits, whose division is a tenth of the
    // cost of a 128-bit one (a library call).
    if let Ok(mut n) = u64::try_from(n) {
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                return &digits[at..];
            }
        }
    }
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &digits[at..]
}

/// A script's duration argument, in whole milliseconds.
pub(crate) fn millis(d: std::time::Duration) -> Vec<u8> {
    d.as_millis().to_string().into_bytes()
}
