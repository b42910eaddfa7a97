//! The parked set: per key, the record waiting in the ladder (its *head*) and the later records
//! of the key that arrived meanwhile (its *followers*), in input order.
//!
//! Followers are kept in the partition's state store (changelog-backed), not sent around the
//! ladder: the partition's offsets keep advancing, nothing overtakes the head, and when the
//! head succeeds (or is dead-lettered under `continue`) the followers are processed in order.
//! Everything commits with the input offsets, so the set moves with its partition on a
//! rebalance and survives a crash.
//!
//! Layout: the head is one small record in column `parked` (key → [`Parked`], 34 bytes), and
//! each follower is its own record in column `parked_followers`, keyed
//! `key length (u32 BE) · key · sequence (u64 BE)`: adding a follower writes one changelog
//! record of the follower's own size (never a rewrite of all of them), and a key's followers
//! sort in arrival order. The head holds the sequence range `[first, next)` still waiting.
//! Draining takes at most [`DRAIN_CHUNK`] followers of a key per transaction; a key with more
//! left is marked [`HeadAt::Draining`] and continued at the start of the next batch.
//!
//! Stores and changelogs written before this layout hold a key's followers inline in one JSON
//! value in `parked`; such an entry still reads, and is migrated to the layout above (in the
//! open transaction, so through the changelog too) the first time its key is touched.

use std::collections::{BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::record::Record;
use crate::state::{Column, Overlay, StateError, Store};

/// Most followers of one key processed in one transaction; the rest wait for the next batch.
pub const DRAIN_CHUNK: u64 = 1_000;

/// Default cap on the followers waiting behind one key (`retry.max_parked_followers_per_key`).
pub const DEFAULT_MAX_FOLLOWERS: u64 = 10_000;

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
    /// The head is done and its followers are being processed, a chunk per transaction:
    /// records of the key arriving meanwhile queue behind them.
    Draining,
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

/// Version byte of a follower record.
const FOLLOWER_V1: u8 = 1;
/// Version byte of a binary head record (a JSON entry starts with `{`).
const HEAD_V2: u8 = 2;
const HEAD_LEN: usize = 2 + 8 * 4;

/// Reads length-framed fields back; every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
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

    /// Binary form of a follower record: version, topic, partition, offset, timestamp and
    /// value (each behind a presence byte), headers; lengths are u32 big-endian.
    pub fn encode(&self) -> Vec<u8> {
        let value_len = self.value.as_ref().map_or(0, Vec::len);
        let headers_len: usize = self
            .headers
            .iter()
            .map(|(k, v)| 8 + k.len() + v.len())
            .sum();
        let mut out = Vec::with_capacity(40 + self.topic.len() + value_len + headers_len);
        out.push(FOLLOWER_V1);
        put_bytes(&mut out, self.topic.as_bytes());
        out.extend_from_slice(&self.partition.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        match self.timestamp {
            Some(t) => {
                out.push(1);
                out.extend_from_slice(&t.to_be_bytes());
            }
            None => out.push(0),
        }
        match &self.value {
            Some(v) => {
                out.push(1);
                put_bytes(&mut out, v);
            }
            None => out.push(0),
        }
        out.extend_from_slice(&(self.headers.len() as u32).to_be_bytes());
        for (k, v) in &self.headers {
            put_bytes(&mut out, k.as_bytes());
            put_bytes(&mut out, v);
        }
        out
    }

    /// From a follower record; `None` for bytes that are not one.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let mut r = Reader(b);
        if r.u8()? != FOLLOWER_V1 {
            return None;
        }
        let topic = String::from_utf8(r.bytes()?.to_vec()).ok()?;
        let partition = r.u32()? as i32;
        let offset = r.u64()? as i64;
        let timestamp = match r.u8()? {
            0 => None,
            _ => Some(r.u64()? as i64),
        };
        let value = match r.u8()? {
            0 => None,
            _ => Some(r.bytes()?.to_vec()),
        };
        let n = r.u32()? as usize;
        let mut headers = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            let k = String::from_utf8(r.bytes()?.to_vec()).ok()?;
            headers.push((k, r.bytes()?.to_vec()));
        }
        r.0.is_empty().then_some(Self {
            topic,
            partition,
            offset,
            timestamp,
            value,
            headers,
        })
    }
}

/// One parked key: where its head is and which followers wait behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parked {
    /// Where the head is.
    pub head_at: HeadAt,
    /// The next sequence number to give a head.
    pub next_seq: u64,
    /// Sequence of the oldest follower still waiting.
    pub first: u64,
    /// Sequence the next follower gets: `next - first` followers wait.
    pub next: u64,
}

/// A parked entry as written before followers had records of their own: all of them inline.
#[derive(Deserialize)]
struct LegacyParked {
    head_at: HeadAt,
    followers: VecDeque<Follower>,
    next_seq: u64,
}

/// A decoded `parked` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// The current layout.
    Current(Parked),
    /// The JSON layout of older versions, with its followers inline (oldest first).
    Legacy(Parked, VecDeque<Follower>),
}

impl Parked {
    /// Parks a key behind a head just sent up the ladder; returns the head's sequence number.
    pub fn behind_ladder(next_seq: u64) -> (Self, u64) {
        (
            Self {
                head_at: HeadAt::Ladder { seq: next_seq },
                next_seq: next_seq + 1,
                first: 0,
                next: 0,
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

    /// Followers waiting behind the head.
    pub fn waiting(&self) -> u64 {
        self.next.saturating_sub(self.first)
    }

    /// For the store: 34 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let (tag, seq) = match self.head_at {
            HeadAt::Ladder { seq } => (0u8, seq),
            HeadAt::DeadLetter => (1, 0),
            HeadAt::Draining => (2, 0),
        };
        let mut out = Vec::with_capacity(HEAD_LEN);
        out.extend_from_slice(&[HEAD_V2, tag]);
        for n in [seq, self.next_seq, self.first, self.next] {
            out.extend_from_slice(&n.to_be_bytes());
        }
        out
    }

    /// From the store, either layout; `None` for bytes that are not a parked entry.
    pub fn decode(b: &[u8]) -> Option<Decoded> {
        if b.first() == Some(&HEAD_V2) {
            let mut r = Reader(b.get(1..)?);
            let tag = r.u8()?;
            let seq = r.u64()?;
            let (next_seq, first, next) = (r.u64()?, r.u64()?, r.u64()?);
            let head_at = match tag {
                0 => HeadAt::Ladder { seq },
                1 => HeadAt::DeadLetter,
                2 => HeadAt::Draining,
                _ => return None,
            };
            return (r.0.is_empty() && first <= next).then_some(Decoded::Current(Self {
                head_at,
                next_seq,
                first,
                next,
            }));
        }
        let legacy: LegacyParked = serde_json::from_slice(b).ok()?;
        Some(Decoded::Legacy(
            Self {
                head_at: legacy.head_at,
                next_seq: legacy.next_seq,
                first: 0,
                next: legacy.followers.len() as u64,
            },
            legacy.followers,
        ))
    }
}

/// The `parked_followers` key of `key`'s follower number `seq`.
pub fn follower_key(key: &[u8], seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(12 + key.len());
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// `key`'s parked entry as the open batch sees it (its overlay, else the store; the store is
/// only asked when `store_has_parked`). An entry in the old JSON layout is migrated into the
/// overlay on the way. A store read error is returned, never taken for "not parked".
pub fn load(
    store: &Store,
    overlay: &mut Overlay,
    key: &[u8],
    store_has_parked: bool,
) -> Result<Option<Parked>, StateError> {
    let bytes = match overlay.get(Column::Parked, key) {
        Some(v) => v.map(<[u8]>::to_vec),
        None if !store_has_parked => None,
        None => store.get(Column::Parked, key)?,
    };
    let Some(bytes) = bytes else {
        return Ok(None);
    };
    match Parked::decode(&bytes) {
        Some(Decoded::Current(p)) => Ok(Some(p)),
        Some(Decoded::Legacy(p, followers)) => {
            for (seq, f) in followers.iter().enumerate() {
                overlay.put(
                    Column::ParkedFollower,
                    &follower_key(key, seq as u64),
                    f.encode(),
                );
            }
            save(overlay, key, Some(&p));
            tracing::info!(
                followers = followers.len(),
                "parked entry migrated from the JSON layout to one record per follower"
            );
            Ok(Some(p))
        }
        None => {
            tracing::error!(
                bytes = bytes.len(),
                "a parked entry cannot be read; its key is treated as not parked"
            );
            Ok(None)
        }
    }
}

/// Writes `key`'s parked entry (`None`: the key is free).
pub fn save(overlay: &mut Overlay, key: &[u8], parked: Option<&Parked>) {
    match parked {
        Some(p) => overlay.put(Column::Parked, key, p.encode()),
        None => overlay.delete(Column::Parked, key),
    }
}

/// Queues `f` behind `key`'s head: one follower record (the caller saves the entry).
pub fn push(overlay: &mut Overlay, key: &[u8], parked: &mut Parked, f: &Follower) {
    overlay.put(
        Column::ParkedFollower,
        &follower_key(key, parked.next),
        f.encode(),
    );
    parked.next += 1;
}

/// Takes `key`'s oldest waiting follower off the queue (its record is deleted; the caller saves
/// the entry). `None` when none waits. A follower record that is missing or unreadable is
/// skipped with an error log rather than blocking the key for ever.
pub fn pop(
    store: &Store,
    overlay: &mut Overlay,
    key: &[u8],
    parked: &mut Parked,
) -> Result<Option<Follower>, StateError> {
    while parked.first < parked.next {
        let k = follower_key(key, parked.first);
        parked.first += 1;
        let bytes = match overlay.get(Column::ParkedFollower, &k) {
            Some(v) => v.map(<[u8]>::to_vec),
            None => store.get(Column::ParkedFollower, &k)?,
        };
        overlay.delete(Column::ParkedFollower, &k);
        match bytes.as_deref().map(Follower::decode) {
            Some(Some(f)) => return Ok(Some(f)),
            found => tracing::error!(
                seq = parked.first - 1,
                present = found.is_some(),
                "a parked follower record is missing or unreadable; skipped"
            ),
        }
    }
    Ok(None)
}

/// Keys of the committed store whose followers are being drained (they continue at the start
/// of the next batch): read once when a partition's store is opened.
pub fn draining_keys(store: &Store) -> Result<BTreeSet<Vec<u8>>, StateError> {
    Ok(store
        .entries(Column::Parked)?
        .into_iter()
        .filter(|(_, v)| {
            matches!(
                Parked::decode(v),
                Some(Decoded::Current(Parked {
                    head_at: HeadAt::Draining,
                    ..
                }))
            )
        })
        .map(|(k, _)| k)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StoreCache;

    fn record<'a>(hs: &'a [(String, Vec<u8>)], offset: i64) -> Record<'a> {
        Record {
            topic: "t",
            partition: 1,
            offset,
            timestamp: Some(5),
            key: Some(b"k"),
            value: Some(b"v"),
            headers: hs,
        }
    }

    #[test]
    fn heads_are_recognised_by_sequence_and_entries_round_trip() {
        let (mut p, head) = Parked::behind_ladder(0);
        assert!(p.is_head(Some(head)));
        assert!(!p.is_head(Some(head + 1)));
        assert!(!p.is_head(None));
        p.next = 7;
        p.first = 3;
        let next = p.new_head();
        assert_eq!(next, 1);
        assert_eq!(p.encode().len(), HEAD_LEN);
        assert_eq!(Parked::decode(&p.encode()), Some(Decoded::Current(p)));
        p.head_at = HeadAt::Draining;
        assert_eq!(Parked::decode(&p.encode()), Some(Decoded::Current(p)));
        assert_eq!(Parked::decode(b"\x02short"), None);
        assert_eq!(Parked::decode(b"junk"), None);
    }

    #[test]
    fn followers_round_trip_in_binary() {
        let hs = vec![("id".to_string(), b"x".to_vec()), ("e".into(), Vec::new())];
        let f = Follower::of(&record(&hs, 9));
        assert_eq!(Follower::decode(&f.encode()), Some(f.clone()));
        let bare = Follower {
            timestamp: None,
            value: None,
            headers: Vec::new(),
            ..f
        };
        assert_eq!(Follower::decode(&bare.encode()), Some(bare.clone()));
        let mut long = bare.encode();
        long.push(0);
        assert_eq!(Follower::decode(&long), None, "trailing bytes are refused");
        assert_eq!(Follower::decode(&bare.encode()[..10]), None);
    }

    #[test]
    fn follower_keys_sort_by_sequence_within_a_key() {
        let a = follower_key(b"k", 2);
        let b = follower_key(b"k", 256);
        let other = follower_key(b"k2", 0);
        assert!(a < b);
        assert!(
            !other.starts_with(&a[..5]),
            "another key never shares the prefix"
        );
    }

    #[test]
    fn a_json_entry_of_an_older_version_reads_and_migrates_to_follower_records() {
        let dir = std::env::temp_dir().join(format!("eosflow-parked-{}", uuid::Uuid::new_v4()));
        let (store, _) = Store::open(&dir, "cl[0]", &StoreCache::new(8 << 20)).expect("open");
        let hs = vec![("id".to_string(), b"x".to_vec())];
        let followers: Vec<Follower> = (0..3).map(|o| Follower::of(&record(&hs, o))).collect();
        let legacy = serde_json::json!({
            "head_at": {"Ladder": {"seq": 4}},
            "followers": followers,
            "next_seq": 5,
        });
        let mut o = Overlay::default();
        o.put(
            Column::Parked,
            b"k",
            serde_json::to_vec(&legacy).expect("json"),
        );
        store.apply(&o, Some(1)).expect("apply");
        let mut o = Overlay::default();
        let mut p = load(&store, &mut o, b"k", true)
            .expect("load")
            .expect("parked");
        assert_eq!(p.head_at, HeadAt::Ladder { seq: 4 });
        assert_eq!((p.first, p.next, p.next_seq), (0, 3, 5));
        assert_eq!(o.column(Column::ParkedFollower).count(), 3);
        store.apply(&o, Some(2)).expect("apply");
        let mut o = Overlay::default();
        push(&mut o, b"k", &mut p, &Follower::of(&record(&hs, 3)));
        let mut offsets = Vec::new();
        while let Some(f) = pop(&store, &mut o, b"k", &mut p).expect("pop") {
            offsets.push(f.offset);
        }
        assert_eq!(offsets, vec![0, 1, 2, 3], "in arrival order");
        assert_eq!(p.waiting(), 0);
        drop(store);
        Store::wipe(&dir).expect("wipe");
    }
}
