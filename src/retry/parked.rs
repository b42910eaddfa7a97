//! The parked set: per key, the record waiting in the ladder (its *head*) and the later records
//! of the key that arrived meanwhile (its *followers*), in input order.
//!
//! Followers are kept in the partition's state store (column `parked`, changelog-backed), not
//! sent around the ladder: the partition's offsets keep advancing, nothing overtakes the head,
//! and when the head succeeds (or is dead-lettered under `continue`) the followers are
//! processed in order in the same transaction. Everything commits with the input offsets, so
//! the set moves with its partition on a rebalance and survives a crash.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::processor::Record;

/// Where a key's head is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HeadAt {
    /// On a retry level, identified by its sequence number.
    Ladder {
        /// The head's sequence number (carried in `eosflow.retry.seq`).
        seq: u64,
    },
    /// Dead-lettered, and the key waits for a redrive (policy `park`).
    DeadLetter,
}

/// A follower, owned: everything needed to process it later as if it had just been read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Follower {
    /// Topic it was read from.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp.
    pub timestamp: Option<i64>,
    /// Value.
    pub value: Option<Vec<u8>>,
    /// Headers.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Follower {
    /// Captures a record.
    pub fn of(r: &Record<'_>) -> Self {
        Self {
            topic: r.topic.to_string(),
            partition: r.partition,
            offset: r.offset,
            timestamp: r.timestamp,
            value: r.value.map(<[u8]>::to_vec),
            headers: r.headers.to_vec(),
        }
    }

    /// The record view of it, with `key`.
    pub fn record<'a>(&'a self, key: &'a [u8]) -> Record<'a> {
        Record {
            topic: &self.topic,
            partition: self.partition,
            offset: self.offset,
            timestamp: self.timestamp,
            key: Some(key),
            value: self.value.as_deref(),
            headers: &self.headers,
        }
    }
}

/// One parked key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parked {
    /// Where the head is.
    pub head_at: HeadAt,
    /// Records that arrived behind the head, oldest first.
    pub followers: VecDeque<Follower>,
    /// The next sequence number to give a head.
    pub next_seq: u64,
}

impl Parked {
    /// Parks a key behind a head just sent up the ladder; returns the head's sequence number.
    pub fn behind_ladder(next_seq: u64) -> (Self, u64) {
        (
            Self {
                head_at: HeadAt::Ladder { seq: next_seq },
                followers: VecDeque::new(),
                next_seq: next_seq + 1,
            },
            next_seq,
        )
    }

    /// Whether a ladder record with sequence `seq` is this key's head.
    pub fn is_head(&self, seq: Option<u64>) -> bool {
        matches!((self.head_at, seq), (HeadAt::Ladder { seq: h }, Some(s)) if h == s)
    }

    /// Gives the next head a new sequence number.
    pub fn new_head(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        self.head_at = HeadAt::Ladder { seq: s };
        s
    }

    /// For the store.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// From the store; `None` for bytes that are not a parked entry.
    pub fn decode(b: &[u8]) -> Option<Self> {
        serde_json::from_slice(b).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_recognised_by_sequence_and_entries_round_trip() {
        let (mut p, head) = Parked::behind_ladder(0);
        assert!(p.is_head(Some(head)));
        assert!(!p.is_head(Some(head + 1)));
        assert!(!p.is_head(None));
        let hs = vec![("id".to_string(), b"x".to_vec())];
        let r = Record {
            topic: "t",
            partition: 1,
            offset: 9,
            timestamp: None,
            key: Some(b"k"),
            value: Some(b"v"),
            headers: &hs,
        };
        p.followers.push_back(Follower::of(&r));
        let next = p.new_head();
        assert_eq!(next, 1);
        let back = Parked::decode(&p.encode()).expect("round trip");
        assert_eq!(back, p);
        assert_eq!(back.followers[0].record(b"k").offset, 9);
    }
}
