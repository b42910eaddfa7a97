//! Partition logs: records, transaction markers, offsets and the stable offset.
//!
//! Modelled, as a Kafka partition leader keeps them:
//! - offsets are assigned at append, one per record; a transaction's commit or abort writes a
//!   control marker that takes one offset too, so data offsets are not contiguous;
//! - the high watermark is the log end offset (there is no replication);
//! - the last stable offset (LSO) is the first offset of the earliest open transaction in
//!   the partition, or the high watermark when none is open;
//! - `read_committed` fetches stop at the LSO and skip aborted data and markers;
//!   `read_uncommitted` fetches stop at the high watermark and skip only markers;
//! - `delete_records` moves the log start offset (never past the high watermark);
//! - compaction keeps the latest record per key among the stable data.
//!
//! Not modelled: segments, batches, retention by time or size, replication and ISR,
//! log-append time, the aborted-transaction index (each record carries its outcome instead),
//! tombstone expiry (`delete.retention.ms`) and the removal of markers by the cleaner.

use std::collections::{BTreeMap, BTreeSet};

use crate::{Isolation, Record, SimError};

/// The outcome of a transactional record, known once its marker is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Open,
    Committed,
    Aborted,
}

#[derive(Debug, Clone)]
enum Kind {
    /// A record outside any transaction: visible once appended.
    Plain,
    /// A record in a transaction of `producer_id`.
    Txn { producer_id: i64, outcome: Outcome },
    /// A commit or abort marker of `producer_id`'s transaction.
    Marker,
}

#[derive(Debug, Clone)]
struct Entry {
    record: Record,
    kind: Kind,
}

impl Entry {
    fn is_stable_data(&self) -> bool {
        matches!(
            self.kind,
            Kind::Plain
                | Kind::Txn {
                    outcome: Outcome::Committed,
                    ..
                }
        )
    }
}

/// The data to append: a record before it has a place in a log.
#[derive(Debug, Clone, Default)]
pub(crate) struct NewRecord {
    pub(crate) timestamp_ms: i64,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) headers: Vec<(String, Option<Vec<u8>>)>,
}

/// One partition's log.
#[derive(Debug, Clone)]
pub(crate) struct PartitionLog {
    topic: String,
    partition: i32,
    entries: Vec<Entry>,
    log_start: i64,
    next_offset: i64,
    /// Open transactions by producer id: the offset of their first record here.
    open: BTreeMap<i64, i64>,
}

impl PartitionLog {
    pub(crate) fn new(topic: &str, partition: i32) -> Self {
        Self {
            topic: topic.to_owned(),
            partition,
            entries: Vec::new(),
            log_start: 0,
            next_offset: 0,
            open: BTreeMap::new(),
        }
    }

    pub(crate) fn log_start(&self) -> i64 {
        self.log_start
    }

    pub(crate) fn high_watermark(&self) -> i64 {
        self.next_offset
    }

    pub(crate) fn last_stable(&self) -> i64 {
        self.open
            .values()
            .min()
            .copied()
            .unwrap_or(self.next_offset)
    }

    /// Appends a record (in `producer_id`'s open transaction when given); returns its offset.
    pub(crate) fn append(&mut self, new: NewRecord, txn_producer: Option<i64>) -> i64 {
        let offset = self.next_offset;
        self.next_offset += 1;
        let kind = match txn_producer {
            Some(producer_id) => {
                self.open.entry(producer_id).or_insert(offset);
                Kind::Txn {
                    producer_id,
                    outcome: Outcome::Open,
                }
            }
            None => Kind::Plain,
        };
        self.entries.push(Entry {
            record: Record {
                topic: self.topic.clone(),
                partition: self.partition,
                offset,
                timestamp_ms: new.timestamp_ms,
                key: new.key,
                value: new.value,
                headers: new.headers,
            },
            kind,
        });
        offset
    }

    /// Writes `producer_id`'s commit or abort marker if it has a transaction open here;
    /// returns the marker's offset.
    pub(crate) fn write_marker(
        &mut self,
        producer_id: i64,
        commit: bool,
        timestamp_ms: i64,
    ) -> Option<i64> {
        let first = self.open.remove(&producer_id)?;
        let outcome = if commit {
            Outcome::Committed
        } else {
            Outcome::Aborted
        };
        let from = self.index_of(first);
        for entry in &mut self.entries[from..] {
            if let Kind::Txn {
                producer_id: pid,
                outcome: o @ Outcome::Open,
            } = &mut entry.kind
            {
                if *pid == producer_id {
                    *o = outcome;
                }
            }
        }
        let offset = self.next_offset;
        self.next_offset += 1;
        self.entries.push(Entry {
            record: Record {
                topic: self.topic.clone(),
                partition: self.partition,
                offset,
                timestamp_ms,
                key: None,
                value: None,
                headers: Vec::new(),
            },
            kind: Kind::Marker,
        });
        Some(offset)
    }

    /// The index of the first entry at or after `offset`.
    fn index_of(&self, offset: i64) -> usize {
        self.entries.partition_point(|e| e.record.offset < offset)
    }

    /// Up to `max` records from `from`, as a consumer with `isolation` sees them, and the
    /// position after them (past skipped markers and aborted data up to the fetch limit).
    pub(crate) fn read(&self, from: i64, isolation: Isolation, max: usize) -> (Vec<Record>, i64) {
        let limit = match isolation {
            Isolation::ReadCommitted => self.last_stable(),
            Isolation::ReadUncommitted => self.next_offset,
        };
        let mut records = Vec::new();
        if max == 0 {
            return (records, from);
        }
        for entry in &self.entries[self.index_of(from)..] {
            if entry.record.offset >= limit {
                break;
            }
            let visible = match (&entry.kind, isolation) {
                (Kind::Marker, _) => false,
                (Kind::Plain, _) => true,
                (Kind::Txn { .. }, Isolation::ReadUncommitted) => true,
                (Kind::Txn { outcome, .. }, Isolation::ReadCommitted) => {
                    *outcome == Outcome::Committed
                }
            };
            if visible {
                records.push(entry.record.clone());
                if records.len() == max {
                    return (records, entry.record.offset + 1);
                }
            }
        }
        (records, from.max(limit))
    }

    /// Every record a `read_committed` consumer could ever see (stable data from the log
    /// start).
    pub(crate) fn committed_records(&self) -> Vec<Record> {
        self.entries
            .iter()
            .filter(|e| e.is_stable_data())
            .map(|e| e.record.clone())
            .collect()
    }

    /// Every data record from the log start, open and aborted transactions included.
    pub(crate) fn all_records(&self) -> Vec<Record> {
        self.entries
            .iter()
            .filter(|e| !matches!(e.kind, Kind::Marker))
            .map(|e| e.record.clone())
            .collect()
    }

    /// Moves the log start to `before` (`-1`: the high watermark); returns the new log start.
    pub(crate) fn delete_before(&mut self, before: i64) -> Result<i64, SimError> {
        let before = if before == -1 {
            self.next_offset
        } else {
            before
        };
        if before < 0 || before > self.next_offset {
            return Err(SimError::OffsetOutOfRange(format!(
                "{}-{}: delete_records before {before}, high watermark {}",
                self.topic, self.partition, self.next_offset
            )));
        }
        if before > self.log_start {
            let cut = self.index_of(before);
            self.entries.drain(..cut);
            self.log_start = before;
        }
        Ok(self.log_start)
    }

    /// Compacts the stable part of the log (below the LSO): a keyed record is removed when a
    /// later stable record has the same key; aborted data is removed; markers and the latest
    /// record per key (tombstones included) stay. Returns how many records were removed.
    pub(crate) fn compact(&mut self) -> usize {
        let lso = self.last_stable();
        let mut latest: BTreeMap<&[u8], i64> = BTreeMap::new();
        for entry in self.entries.iter().filter(|e| e.record.offset < lso) {
            if let (true, Some(key)) = (entry.is_stable_data(), entry.record.key.as_deref()) {
                latest.insert(key, entry.record.offset);
            }
        }
        let mut remove = BTreeSet::new();
        for entry in self.entries.iter().filter(|e| e.record.offset < lso) {
            let offset = entry.record.offset;
            let aborted = matches!(
                entry.kind,
                Kind::Txn {
                    outcome: Outcome::Aborted,
                    ..
                }
            );
            let superseded = entry.is_stable_data()
                && entry
                    .record
                    .key
                    .as_deref()
                    .and_then(|k| latest.get(k))
                    .is_some_and(|&last| last != offset);
            if aborted || superseded {
                remove.insert(offset);
            }
        }
        self.entries.retain(|e| !remove.contains(&e.record.offset));
        remove.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(key: &str, value: &str) -> NewRecord {
        NewRecord {
            key: Some(key.as_bytes().to_vec()),
            value: Some(value.as_bytes().to_vec()),
            ..NewRecord::default()
        }
    }

    #[test]
    fn read_committed_stops_at_the_first_open_transaction() {
        let mut log = PartitionLog::new("t", 0);
        log.append(rec("a", "1"), None); // 0
        log.append(rec("b", "2"), Some(7)); // 1, open
        log.append(rec("c", "3"), None); // 2, plain but after the open txn
        assert_eq!(log.last_stable(), 1);
        let (records, next) = log.read(0, Isolation::ReadCommitted, 10);
        assert_eq!(records.len(), 1);
        assert_eq!(next, 1);
        let (records, next) = log.read(0, Isolation::ReadUncommitted, 10);
        assert_eq!(records.len(), 3);
        assert_eq!(next, 3);
        assert_eq!(log.write_marker(7, false, 0), Some(3));
        let (records, next) = log.read(1, Isolation::ReadCommitted, 10);
        assert_eq!(
            records.iter().map(|r| r.offset).collect::<Vec<_>>(),
            vec![2]
        );
        assert_eq!(next, 4);
    }

    #[test]
    fn max_records_stops_after_the_last_returned_record() {
        let mut log = PartitionLog::new("t", 0);
        for i in 0..5 {
            log.append(rec("k", &i.to_string()), None);
        }
        let (records, next) = log.read(1, Isolation::ReadCommitted, 2);
        assert_eq!(records.len(), 2);
        assert_eq!(next, 3);
    }
}
