//! Restore: replay a store's changelog partition from its checkpoint to the end.
//!
//! "The end" is the high watermark with no open transaction below it (see
//! [`crate::kafka::reader`]): a dead instance's open transaction, whose input offsets may
//! still commit, is waited out rather than skipped, so a store never misses writes whose
//! offsets the group will resume after.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::Message;

use super::{dedup, Column, Overlay, StateError, Store};
use crate::kafka::reader::{read_to_end, ReadError};
use crate::kafka::KafkaClients;

/// What a restore did, for logs, metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestoreStats {
    /// Changelog offset restore started from (the checkpoint, or the log start).
    pub from_offset: i64,
    /// Offset reached (the next to read).
    pub to_offset: i64,
    /// Changelog records applied.
    pub records: u64,
    /// Wall time.
    pub millis: u64,
}

const APPLY_EVERY: usize = 5_000;

/// Replays `topic[partition]` into `store` from its checkpoint to the end, within `timeout`.
pub fn restore(
    clients: &KafkaClients,
    store: &Store,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Result<RestoreStats, StateError> {
    let started = Instant::now();
    let checkpoint = store.checkpoint()?;
    let mut pending: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::with_capacity(APPLY_EVERY);
    let mut records = 0u64;
    let mut first: Option<i64> = None;
    let mut apply_error: Option<StateError> = None;
    let starts = BTreeMap::from([(partition, checkpoint)]);
    let result = read_to_end(clients, topic, &starts, timeout, |m| {
        first.get_or_insert(m.offset());
        if let Some(k) = m.key() {
            pending.push((k.to_vec(), m.payload().map(<[u8]>::to_vec)));
        }
        if pending.len() >= APPLY_EVERY {
            match flush(store, &mut pending, m.offset() + 1) {
                Ok(n) => records += n as u64,
                Err(e) => {
                    let msg = e.to_string();
                    apply_error = Some(e);
                    return Err(msg);
                }
            }
        }
        Ok(())
    });
    if let Some(e) = apply_error {
        return Err(e);
    }
    let ends = result.map_err(|e| match e {
        ReadError::Timeout {
            topic,
            partition,
            position,
            end,
            seconds,
        } => StateError::RestoreTimeout {
            topic,
            partition,
            target: end,
            position,
            seconds,
        },
        ReadError::BeyondEnd { start, end, .. } => StateError::CheckpointAhead {
            topic: topic.to_string(),
            partition,
            checkpoint: start,
            end,
        },
        other => StateError::Changelog {
            topic: topic.to_string(),
            partition,
            message: other.to_string(),
        },
    })?;
    let to = ends.get(&partition).copied().unwrap_or_default();
    if !pending.is_empty() || checkpoint != Some(to) {
        records += flush(store, &mut pending, to)? as u64;
    }
    Ok(RestoreStats {
        from_offset: checkpoint.unwrap_or(first.unwrap_or(to)),
        to_offset: to,
        records,
        millis: started.elapsed().as_millis() as u64,
    })
}

fn flush(
    store: &Store,
    pending: &mut Vec<(Vec<u8>, Option<Vec<u8>>)>,
    next: i64,
) -> Result<usize, StateError> {
    let mut overlay = Overlay::default();
    let mut n = 0;
    for (k, v) in pending.iter() {
        if replay(store, &mut overlay, k, v.as_deref())? {
            n += 1;
        }
    }
    store.apply(&overlay, Some(next))?;
    pending.clear();
    Ok(n)
}

/// Writes one changelog record into `overlay` as the store must hold it; false for a record
/// that is not ours (skipped). Later records of a chunk see earlier ones through the overlay.
pub fn replay(
    store: &Store,
    overlay: &mut Overlay,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<bool, StateError> {
    let Some((col, key)) = Column::parse_changelog_key(key) else {
        return Ok(false);
    };
    match (col, value) {
        (Column::DedupBatch, Some(v)) => dedup::restore_batch(overlay, key, v),
        (Column::DedupBatch, None) => {
            dedup::remove(store, overlay, key)?;
        }
        (Column::Dedup, Some(v)) => dedup::restore_legacy(overlay, key, v),
        (Column::Dedup, None) => dedup::remove_legacy(store, overlay, key)?,
        (col, Some(v)) => overlay.put(col, key, v.to_vec()),
        (col, None) => overlay.delete(col, key),
    }
    Ok(true)
}
