//! Event time of a source's records: which timestamp a record carries in the topology, moves
//! its partition's stream time, fires event-time timers and stamps the outputs it causes.

use std::sync::Arc;

use crate::record::Record;

/// How a source reads a record's event time (Kafka Streams' `TimestampExtractor`). Whatever
/// it cannot read (a missing or malformed header, a function returning `None`) falls back to
/// the record's Kafka timestamp.
///
/// ```
/// use eosflow::record::Record;
/// use eosflow::topology::TimestampExtractor;
///
/// let headers = vec![("event-time".to_string(), b"1700000000123".to_vec())];
/// let record = Record {
///     topic: "t",
///     partition: 0,
///     offset: 0,
///     timestamp: Some(5),
///     key: None,
///     value: Some(b"42"),
///     headers: &headers,
/// };
/// assert_eq!(TimestampExtractor::RecordTimestamp.extract(&record), Some(5));
/// let header = TimestampExtractor::header("event-time");
/// assert_eq!(header.extract(&record), Some(1_700_000_000_123));
/// let from_value = TimestampExtractor::function(|r: &Record<'_>| {
///     std::str::from_utf8(r.value?).ok()?.parse().ok()
/// });
/// assert_eq!(from_value.extract(&record), Some(42));
/// assert_eq!(TimestampExtractor::header("absent").extract(&record), Some(5));
/// ```
#[derive(Clone, Default)]
pub enum TimestampExtractor {
    /// The record's Kafka timestamp (producer or log-append time): the default.
    #[default]
    RecordTimestamp,
    /// A header holding milliseconds since the epoch, either as decimal text (`1700000000123`)
    /// or as 8 big-endian bytes (Kafka's `LongSerializer`); text is tried first.
    Header(String),
    /// A function of the record (parse the value, read an Avro field …).
    Function(ExtractFn),
}

/// A user function reading a record's event time.
pub type ExtractFn = Arc<dyn Fn(&Record<'_>) -> Option<i64> + Send + Sync>;

impl std::fmt::Debug for TimestampExtractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RecordTimestamp => f.write_str("RecordTimestamp"),
            Self::Header(h) => f.debug_tuple("Header").field(h).finish(),
            Self::Function(_) => f.write_str("Function(..)"),
        }
    }
}

impl TimestampExtractor {
    /// The header `name` (decimal text or 8 big-endian bytes).
    pub fn header(name: impl Into<String>) -> Self {
        Self::Header(name.into())
    }

    /// A function of the record; `None` falls back to the Kafka timestamp.
    pub fn function(f: impl Fn(&Record<'_>) -> Option<i64> + Send + Sync + 'static) -> Self {
        Self::Function(Arc::new(f))
    }

    /// The event time of `record`.
    pub fn extract(&self, record: &Record<'_>) -> Option<i64> {
        let own = match self {
            Self::RecordTimestamp => None,
            Self::Header(name) => record.header(name).and_then(header_millis),
            Self::Function(f) => f(record),
        };
        own.or(record.timestamp)
    }
}

/// Milliseconds from a header value: decimal text, else 8 big-endian bytes.
fn header_millis(v: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(v)
        .ok()
        .and_then(|t| t.trim().parse().ok());
    text.or_else(|| Some(i64::from_be_bytes(v.try_into().ok()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_is_read_as_text_or_as_eight_big_endian_bytes() {
        assert_eq!(header_millis(b"1700000000000"), Some(1_700_000_000_000));
        assert_eq!(header_millis(&42i64.to_be_bytes()), Some(42));
        assert_eq!(header_millis(b"-5"), Some(-5));
        assert_eq!(header_millis(b"soon"), None);
        assert_eq!(header_millis(&[1, 2, 3]), None);
    }
}
