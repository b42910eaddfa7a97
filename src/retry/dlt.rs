//! Dead-letter topic naming and the headers that tell an operator what failed, where and why.

use super::headers::{bound_message, user_headers, History};
use crate::record::{ProcessError, Record};

/// `eosflow.dlt.*` header prefix.
pub const PREFIX: &str = "eosflow.dlt.";

/// Why a record is in the DLT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DltClass {
    /// Retrying cannot help (decode, validation, panic).
    Permanent,
    /// Every retry level failed.
    TransientExhausted,
    /// Its key was parked behind a dead-lettered record (policy `park`).
    ParkedBehindDeadLetter,
    /// An output, retry forward or the dead letter itself could not be written (over the size
    /// limit, unknown topic): the record was isolated from its batch so the partition moves on.
    Unwritable,
    /// Its key already had `retry.max_parked_followers_per_key` records waiting behind a
    /// parked head.
    ParkedOverflow,
    /// Its message id was processed before with another key or value.
    IdConflict,
    /// Its event time lies before every window it belongs to that is still open (stream time
    /// passed their end plus grace): a windowed aggregate could not count it (see
    /// [`crate::topology::windows`]).
    LateRecord,
    /// Its event time (the source's timestamp extractor, or the Kafka timestamp) lies outside
    /// years 1 to 9999 ([`crate::topology::time::MIN_EVENT_TIME_MS`]): it never reached the
    /// handler or moved stream time. Redrive it once the producer or extractor is fixed.
    BadTimestamp,
}

impl DltClass {
    /// As written in `eosflow.dlt.error.class`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Permanent => "permanent",
            Self::TransientExhausted => "transient-exhausted",
            Self::ParkedBehindDeadLetter => "parked-behind-dead-letter",
            Self::Unwritable => "unwritable",
            Self::ParkedOverflow => "parked-overflow",
            Self::IdConflict => "id-conflict",
            Self::LateRecord => "late-record",
            Self::BadTimestamp => "bad-timestamp",
        }
    }

    /// The class of a failure that ran out of options on its own (no more specific reason such
    /// as a parked key or an unwritable output): one mapping for records and timers alike.
    pub fn of(err: &ProcessError) -> Self {
        match err {
            ProcessError::Transient(_) => Self::TransientExhausted,
            ProcessError::Permanent(_) => Self::Permanent,
        }
    }
}

/// Owned Kafka headers, in order.
pub type Headers = Vec<(String, Vec<u8>)>;

/// Value bytes kept in a dead letter cut down to fit ([`truncated`]).
pub const TRUNCATE_VALUE_TO: usize = 64 * 1024;

/// Header on a cut-down dead letter: the original value's size in bytes.
pub const TRUNCATED_FROM: &str = "eosflow.dlt.truncated.from.bytes";

/// A dead letter cut down to fit: the first [`TRUNCATE_VALUE_TO`] bytes of the value (none at
/// all when `pointer_only`) and only the `eosflow.dlt.*` headers, which carry the pointer to
/// the original record (topic, partition, offset) and the reason. The record itself stays
/// readable at that offset for as long as the input topic retains it.
pub fn truncated<'v>(
    value: Option<&'v [u8]>,
    headers: &[(String, Vec<u8>)],
    pointer_only: bool,
) -> (Option<&'v [u8]>, Headers) {
    let original = value.map_or(0, <[u8]>::len);
    let kept = if pointer_only {
        None
    } else {
        value.map(|v| &v[..v.len().min(TRUNCATE_VALUE_TO)])
    };
    let mut h: Vec<(String, Vec<u8>)> = headers
        .iter()
        .filter(|(k, _)| k.starts_with(PREFIX))
        .cloned()
        .collect();
    h.push((
        TRUNCATED_FROM.to_string(),
        original.to_string().into_bytes(),
    ));
    (kept, h)
}

/// `<topic>.DLT`; a retry level's records go to their base topic's DLT.
pub fn topic_for(topic: &str) -> String {
    format!("{}.DLT", super::base_and_level(topic).0)
}

/// The original headers plus the `eosflow.dlt.*` headers describing the failure.
pub fn headers(
    record: &Record<'_>,
    history: &History,
    group: &str,
    class: DltClass,
    err: Option<&ProcessError>,
    now_ms: i64,
) -> Vec<(String, Vec<u8>)> {
    let mut h = user_headers(record);
    let mut add = |k: &str, v: String| h.push((format!("{PREFIX}{k}"), v.into_bytes()));
    let (t, p, o, ts) = &history.original;
    add("original.topic", t.clone());
    add("original.partition", p.to_string());
    add("original.offset", o.to_string());
    add(
        "original.timestamp",
        ts.map(|t| t.to_string()).unwrap_or_default(),
    );
    add("group", group.to_string());
    add("error.class", class.as_str().to_string());
    let message = match err {
        Some(e) => e.message().to_string(),
        None => record
            .header(super::headers::ERROR_MESSAGE)
            .map(|m| String::from_utf8_lossy(m).to_string())
            .unwrap_or_default(),
    };
    add("error.message", bound_message(&message));
    let attempts = history.attempt + u32::from(err.is_some());
    add("attempts", attempts.to_string());
    add(
        "first.failure.at",
        history.first_failure.unwrap_or(now_ms).to_string(),
    );
    add("last.failure.at", now_ms.to_string());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_truncated_dead_letter_keeps_the_pointer_and_drops_the_bulk() {
        let value = vec![7u8; 1_046_000];
        let hs = vec![
            ("big".to_string(), vec![1u8; 500_000]),
            (format!("{PREFIX}original.offset"), b"42".to_vec()),
        ];
        let (v, h) = truncated(Some(&value), &hs, false);
        assert_eq!(v.map(<[u8]>::len), Some(TRUNCATE_VALUE_TO));
        assert!(h.iter().all(|(k, _)| k != "big"), "user headers dropped");
        assert!(h
            .iter()
            .any(|(k, v)| k == TRUNCATED_FROM && v == b"1046000"));
        assert!(h
            .iter()
            .any(|(k, v)| k.ends_with("original.offset") && v == b"42"));
        let (v, _) = truncated(Some(&value), &hs, true);
        assert!(v.is_none(), "pointer-only keeps no value");
    }

    #[test]
    fn retry_levels_share_their_base_dlt() {
        assert_eq!(topic_for("events"), "events.DLT");
        assert_eq!(topic_for("events.retry.2"), "events.DLT");
        assert_eq!(topic_for("events.retry.x"), "events.retry.x.DLT");
    }

    #[test]
    fn headers_name_origin_and_bound_the_message() {
        let hs = vec![
            ("id".to_string(), b"m1".to_vec()),
            ("eosflow.retry.attempt".to_string(), b"3".to_vec()),
            ("eosflow.original.topic".to_string(), b"events".to_vec()),
            ("eosflow.original.offset".to_string(), b"7".to_vec()),
            ("eosflow.failure.first_at".to_string(), b"100".to_vec()),
        ];
        let r = Record {
            topic: "events.retry.3",
            partition: 3,
            offset: 70,
            timestamp: Some(5),
            key: None,
            value: None,
            headers: &hs,
        };
        let e = ProcessError::transient("é".repeat(3000));
        let h = headers(
            &r,
            &History::of(&r),
            "g",
            DltClass::TransientExhausted,
            Some(&e),
            900,
        );
        let get = |k: &str| {
            h.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| String::from_utf8_lossy(v).to_string())
        };
        assert_eq!(get("id").as_deref(), Some("m1"));
        assert_eq!(
            get("eosflow.retry.attempt"),
            None,
            "ladder headers are not copied"
        );
        assert_eq!(get("eosflow.dlt.original.topic").as_deref(), Some("events"));
        assert_eq!(get("eosflow.dlt.original.offset").as_deref(), Some("7"));
        assert_eq!(
            get("eosflow.dlt.error.class").as_deref(),
            Some("transient-exhausted")
        );
        assert_eq!(get("eosflow.dlt.attempts").as_deref(), Some("4"));
        assert_eq!(get("eosflow.dlt.first.failure.at").as_deref(), Some("100"));
        assert_eq!(get("eosflow.dlt.last.failure.at").as_deref(), Some("900"));
        assert!(
            get("eosflow.dlt.error.message")
                .map(|m| m.len())
                .unwrap_or(0)
                <= 2048
        );
    }
}
