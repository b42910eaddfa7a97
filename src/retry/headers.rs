//! The headers a record carries through the ladder: where it came from, how often it failed,
//! when it is due, its place in its key's order. Read back on every level, so a record's
//! history travels with it and nothing is kept outside Kafka.

use crate::record::{ProcessError, Record};

/// Attempts made so far (0 for a record never failed).
pub const ATTEMPT: &str = "eosflow.retry.attempt";
/// Wall-clock ms before which the record must not be processed.
pub const DUE_AT: &str = "eosflow.retry.due_at";
/// The record's sequence number within its parked key.
pub const SEQ: &str = "eosflow.retry.seq";
/// Set on records a `dlt redrive` sent back: they unpark a key parked behind the DLT.
pub const REDRIVE: &str = "eosflow.redrive";
/// First failure, ms.
pub const FIRST_FAILURE: &str = "eosflow.failure.first_at";
/// Latest failure, ms.
pub const LAST_FAILURE: &str = "eosflow.failure.last_at";
/// Latest error class.
pub const ERROR_CLASS: &str = "eosflow.error.class";
/// Latest error message (bounded).
pub const ERROR_MESSAGE: &str = "eosflow.error.message";
/// The input topic the record was first read from.
pub const ORIGINAL_TOPIC: &str = "eosflow.original.topic";
/// Its partition there.
pub const ORIGINAL_PARTITION: &str = "eosflow.original.partition";
/// Its offset there.
pub const ORIGINAL_OFFSET: &str = "eosflow.original.offset";
/// Its timestamp there.
pub const ORIGINAL_TIMESTAMP: &str = "eosflow.original.timestamp";

/// Longest error message kept in a header.
pub const MAX_ERROR_LEN: usize = 2048;

/// A header's value as an integer.
pub fn int(record: &Record<'_>, name: &str) -> Option<i64> {
    std::str::from_utf8(record.header(name)?)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What the ladder knows of a record's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    /// Attempts made before this one.
    pub attempt: u32,
    /// Input topic, partition, offset, timestamp of the first read.
    pub original: (String, i32, i64, Option<i64>),
    /// First failure time, ms.
    pub first_failure: Option<i64>,
    /// Sequence within a parked key.
    pub seq: Option<u64>,
    /// Sent back by a redrive.
    pub redriven: bool,
}

impl History {
    /// Reads the ladder headers (absent on a record read for the first time).
    pub fn of(record: &Record<'_>) -> Self {
        let original = match record.header(ORIGINAL_TOPIC) {
            Some(t) => (
                String::from_utf8_lossy(t).to_string(),
                int(record, ORIGINAL_PARTITION).unwrap_or(-1) as i32,
                int(record, ORIGINAL_OFFSET).unwrap_or(-1),
                int(record, ORIGINAL_TIMESTAMP),
            ),
            None => (
                record.topic.to_string(),
                record.partition,
                record.offset,
                record.timestamp,
            ),
        };
        Self {
            attempt: int(record, ATTEMPT).unwrap_or(0).max(0) as u32,
            original,
            first_failure: int(record, FIRST_FAILURE),
            seq: int(record, SEQ).map(|s| s as u64),
            redriven: record.header(REDRIVE).is_some(),
        }
    }
}

/// `message` cut to [`MAX_ERROR_LEN`] bytes on a character boundary.
pub fn bound_message(message: &str) -> String {
    let mut m = message.to_string();
    if m.len() > MAX_ERROR_LEN {
        let mut cut = MAX_ERROR_LEN;
        while !m.is_char_boundary(cut) {
            cut -= 1;
        }
        m.truncate(cut);
    }
    m
}

/// The record's own headers without eosflow's ladder and DLT headers.
pub fn user_headers(record: &Record<'_>) -> Vec<(String, Vec<u8>)> {
    record
        .headers
        .iter()
        .filter(|(k, _)| !k.starts_with("eosflow."))
        .cloned()
        .collect()
}

/// Headers for a record forwarded up the ladder (or, as a follower, behind its key's head).
pub fn forward(
    record: &Record<'_>,
    history: &History,
    attempt: u32,
    due_at: i64,
    seq: Option<u64>,
    error: Option<(&ProcessError, i64)>,
) -> Vec<(String, Vec<u8>)> {
    let mut h = user_headers(record);
    let mut add = |k: &str, v: String| h.push((k.to_string(), v.into_bytes()));
    let (t, p, o, ts) = &history.original;
    add(ORIGINAL_TOPIC, t.clone());
    add(ORIGINAL_PARTITION, p.to_string());
    add(ORIGINAL_OFFSET, o.to_string());
    if let Some(ts) = ts {
        add(ORIGINAL_TIMESTAMP, ts.to_string());
    }
    add(ATTEMPT, attempt.to_string());
    add(DUE_AT, due_at.to_string());
    if let Some(s) = seq {
        add(SEQ, s.to_string());
    }
    match error {
        Some((e, now)) => {
            add(
                FIRST_FAILURE,
                history.first_failure.unwrap_or(now).to_string(),
            );
            add(LAST_FAILURE, now.to_string());
            add(ERROR_CLASS, e.class().to_string());
            add(ERROR_MESSAGE, bound_message(e.message()));
        }
        None => {
            // A follower carries its own history unchanged.
            if let Some(f) = history.first_failure {
                add(FIRST_FAILURE, f.to_string());
            }
            for k in [LAST_FAILURE, ERROR_CLASS, ERROR_MESSAGE] {
                if let Some(v) = record.header(k) {
                    h_push(&mut h, k, v);
                }
            }
        }
    }
    h
}

fn h_push(h: &mut Vec<(String, Vec<u8>)>, k: &str, v: &[u8]) {
    h.push((k.to_string(), v.to_vec()));
}
