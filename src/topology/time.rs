//! Event time of a source's records: which timestamp a record carries in the topology, moves
//! its partition's stream time, fires event-time timers and stamps the outputs it causes.

use std::sync::Arc;

use crate::record::Record;

/// The earliest event time a record may carry: 0001-01-01T00:00:00Z (ms since the epoch).
/// Window, join, retention and timer arithmetic stays far from `i64`'s limits inside
/// `MIN_EVENT_TIME_MS..=MAX_EVENT_TIME_MS`; a record outside it (a Java `Long.MIN_VALUE`
/// sentinel, 8 arbitrary header bytes, seconds mistaken for nanoseconds) is dead-lettered as
/// `bad-timestamp` before it can move stream time or reach a node.
pub const MIN_EVENT_TIME_MS: i64 = -62_135_596_800_000;

/// The latest event time a record may carry: 9999-12-31T23:59:59.999Z (see
/// [`MIN_EVENT_TIME_MS`]).
pub const MAX_EVENT_TIME_MS: i64 = 253_402_300_799_999;

/// A record's event time outside [`MIN_EVENT_TIME_MS`]`..=`[`MAX_EVENT_TIME_MS`]: the value,
/// where it came from and how to fix it. The record goes to its DLT as `bad-timestamp` with
/// this message; it never reaches the topology, never moves stream time, and can be redriven
/// once the producer or the extractor is fixed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event time {value} ms read by {extractor} is outside the supported range {MIN_EVENT_TIME_MS}..={MAX_EVENT_TIME_MS} (years 1 to 9999): fix the producer's timestamps or the source's timestamp extractor (milliseconds since the epoch), then redrive the record")]
pub struct BadEventTime {
    /// The event time read.
    pub value: i64,
    /// What read it: the source and its extractor, e.g. `source "clicks": header "ts"`.
    pub extractor: String,
}

/// `time` (read by `extractor`) when it is a usable event time, else why not.
pub fn check_event_time(
    time: Option<i64>,
    extractor: impl FnOnce() -> String,
) -> Result<Option<i64>, BadEventTime> {
    match time {
        Some(value) if !(MIN_EVENT_TIME_MS..=MAX_EVENT_TIME_MS).contains(&value) => {
            Err(BadEventTime {
                value,
                extractor: extractor(),
            })
        }
        t => Ok(t),
    }
}

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

    /// What this extractor read from `record` (for a [`BadEventTime`]): its own source, or the
    /// Kafka timestamp it fell back to.
    pub fn describe(&self, record: &Record<'_>) -> String {
        match self {
            Self::Header(name) if record.header(name).and_then(header_millis).is_some() => {
                format!("header {name:?}")
            }
            Self::Header(name) => {
                format!("the Kafka timestamp (header {name:?} absent or unreadable)")
            }
            Self::Function(_) => {
                "the timestamp extractor function (or the Kafka timestamp it fell back to)".into()
            }
            Self::RecordTimestamp => "the Kafka timestamp".into(),
        }
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

    #[test]
    fn event_times_outside_years_1_to_9999_are_refused_with_their_value_and_source() {
        let from = || "header \"ts\"".to_string();
        for ok in [
            None,
            Some(0),
            Some(-5),
            Some(MIN_EVENT_TIME_MS),
            Some(MAX_EVENT_TIME_MS),
        ] {
            assert_eq!(check_event_time(ok, from), Ok(ok));
        }
        for bad in [
            i64::MIN,
            i64::MIN + 5,
            i64::MAX,
            MAX_EVENT_TIME_MS + 1,
            MIN_EVENT_TIME_MS - 1,
        ] {
            let e = check_event_time(Some(bad), from).unwrap_err();
            assert_eq!(e.value, bad);
            let text = e.to_string();
            assert!(
                text.contains(&bad.to_string()) && text.contains("header \"ts\""),
                "{text}"
            );
        }
    }
}
