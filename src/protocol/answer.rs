//! What a granting script answers (lua/lock_acquire.lua,
//! lua/rw_write_acquire.lua, lua/rw_read_acquire.lua, lua/sem_acquire.lua):
//! a grant, or how long to wait.

use redis::{FromRedisValue, ParsingError, Value};

/// A granting script's answer. On the wire a grant is an integer (the
/// fence) and a wait is text (its milliseconds), so one scalar says both.
/// They were a two-element array, `{1, fence}` or `{0, ms}`: Redis turns a
/// Lua table into a reply only after looking in it for the `err`, `ok`,
/// `double`, `map` and `set` fields, about 5K instructions of every grant
/// (callgrind, docs/performance-log.md "The latch's floors").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Granted, with this fence (0 where the primitive draws none: a read
    /// hold, a permit).
    Granted(i64),
    /// Not granted: the name is busy for about this many milliseconds (-1:
    /// unknown, wait for a message).
    Busy(i64),
}

impl FromRedisValue for Answer {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        match v {
            Value::Int(fence) => Ok(Answer::Granted(fence)),
            Value::BulkString(ms) => std::str::from_utf8(&ms)
                .ok()
                .and_then(|s| s.parse().ok())
                .map(Answer::Busy)
                // The value is not echoed: it came from the server, and may
                // be anything (a hostile one's megabytes).
                .ok_or_else(|| ParsingError::from("a grant's wait is not an integer".to_owned())),
            _ => Err(ParsingError::from(
                "a grant's answer is neither a fence (integer) nor a wait (text)".to_owned(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Answer;
    use redis::{FromRedisValue, Value};

    fn answer(v: Value) -> Option<Answer> {
        Answer::from_redis_value(v).ok()
    }

    #[test]
    fn a_grant_is_an_integer_and_a_wait_is_text() {
        assert_eq!(answer(Value::Int(17)), Some(Answer::Granted(17)));
        assert_eq!(answer(Value::Int(0)), Some(Answer::Granted(0)));
        assert_eq!(
            answer(Value::BulkString(b"250".to_vec())),
            Some(Answer::Busy(250))
        );
        assert_eq!(
            answer(Value::BulkString(b"-1".to_vec())),
            Some(Answer::Busy(-1))
        );
    }

    #[test]
    fn anything_else_is_refused() {
        assert_eq!(answer(Value::BulkString(b"".to_vec())), None);
        assert_eq!(answer(Value::BulkString(b"1.5".to_vec())), None);
        assert_eq!(answer(Value::BulkString(vec![0xff, 0x31])), None);
        assert_eq!(answer(Value::Nil), None);
        assert_eq!(
            answer(Value::Array(vec![Value::Int(1), Value::Int(7)])),
            None
        );
    }
}
