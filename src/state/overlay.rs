//! The in-memory writes of one open batch: read-your-writes for the handler, the changelog
//! records to produce, and the `WriteBatch` to apply once the transaction has committed.

use std::collections::BTreeMap;

use super::merge::{is_empty_range, KeyBounds};

/// Which key space a write belongs to; also the first byte of a changelog key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Column {
    /// The handler's per-key state.
    State,
    /// Processed message ids with the time they were processed.
    Dedup,
    /// Keys with a record waiting in the retry ladder (per-key order).
    Parked,
    /// Processed ids grouped by the batch that saw them, oldest first (see [`super::dedup`]).
    DedupBatch,
    /// The records waiting behind a parked key's head, one entry per record, keyed
    /// `key length (4 bytes, big-endian) · key · sequence (8 bytes, big-endian)` so that a
    /// key's followers sort in arrival order (see [`crate::retry::parked`]).
    ParkedFollower,
    /// Pending timers in due order: `kind · due (sign-flipped, big-endian) · name · key` →
    /// payload (see `processor::timers`).
    Timer,
    /// Each pending timer's due time by `kind · name · key`, so rescheduling or cancelling a
    /// key finds its entry in [`Column::Timer`] with one read.
    TimerIndex,
    /// The partition's clocks: its stream time (the largest event time seen), changelogged with
    /// the batch that moved it so it survives a crash and moves with the partition.
    Time,
}

impl Column {
    /// RocksDB column family name.
    pub fn cf(self) -> &'static str {
        match self {
            Column::State => "state",
            Column::Dedup => "dedup",
            Column::Parked => "parked",
            Column::DedupBatch => "dedup_batches",
            Column::ParkedFollower => "parked_followers",
            Column::Timer => "timers",
            Column::TimerIndex => "timer_index",
            Column::Time => "time",
        }
    }

    /// Every column, in the order the changelog and the overlay list them.
    pub const ALL: [Column; 8] = [
        Column::State,
        Column::Dedup,
        Column::Parked,
        Column::DedupBatch,
        Column::ParkedFollower,
        Column::Timer,
        Column::TimerIndex,
        Column::Time,
    ];

    /// The column's slot in per-column arrays (the order of [`Column::ALL`]).
    fn index(self) -> usize {
        match self {
            Column::State => 0,
            Column::Dedup => 1,
            Column::Parked => 2,
            Column::DedupBatch => 3,
            Column::ParkedFollower => 4,
            Column::Timer => 5,
            Column::TimerIndex => 6,
            Column::Time => 7,
        }
    }

    fn tag(self) -> u8 {
        match self {
            Column::State => b's',
            Column::Dedup => b'd',
            Column::Parked => b'p',
            Column::DedupBatch => b'b',
            Column::ParkedFollower => b'f',
            Column::Timer => b't',
            Column::TimerIndex => b'i',
            Column::Time => b'c',
        }
    }

    /// The changelog key of `key` in this column.
    pub fn changelog_key(self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(key.len() + 1);
        k.push(self.tag());
        k.extend_from_slice(key);
        k
    }

    /// Splits a changelog key back into column and key; `None` for a foreign record.
    pub fn parse_changelog_key(k: &[u8]) -> Option<(Column, &[u8])> {
        match k.split_first()? {
            (b's', rest) => Some((Column::State, rest)),
            (b'd', rest) => Some((Column::Dedup, rest)),
            (b'p', rest) => Some((Column::Parked, rest)),
            (b'b', rest) => Some((Column::DedupBatch, rest)),
            (b'f', rest) => Some((Column::ParkedFollower, rest)),
            (b't', rest) => Some((Column::Timer, rest)),
            (b'i', rest) => Some((Column::TimerIndex, rest)),
            (b'c', rest) => Some((Column::Time, rest)),
            _ => None,
        }
    }
}

/// Pending writes: `Some(value)` puts, `None` deletes (a changelog tombstone).
#[derive(Debug, Default, Clone)]
pub struct Overlay {
    /// One map per column (indexed by [`Column::index`]): a lookup borrows the caller's key
    /// instead of building a `(Column, Vec<u8>)` for it, and that lookup runs several times per
    /// record.
    writes: [BTreeMap<Vec<u8>, Option<Vec<u8>>>; Column::ALL.len()],
}

impl Overlay {
    /// What the overlay says of a key: `None` if it has no write, `Some(None)` if deleted.
    pub fn get(&self, col: Column, key: &[u8]) -> Option<Option<&[u8]>> {
        self.writes[col.index()].get(key).map(|v| v.as_deref())
    }

    /// Records a put.
    pub fn put(&mut self, col: Column, key: &[u8], value: Vec<u8>) {
        self.writes[col.index()].insert(key.to_vec(), Some(value));
    }

    /// Records a delete.
    pub fn delete(&mut self, col: Column, key: &[u8]) {
        self.writes[col.index()].insert(key.to_vec(), None);
    }

    /// Moves `other`'s writes over this one's (a record's writes into its batch).
    pub fn absorb(&mut self, other: Overlay) {
        for (mine, theirs) in self.writes.iter_mut().zip(other.writes) {
            mine.extend(theirs);
        }
    }

    /// The writes of one column, in key order.
    pub fn column(&self, col: Column) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.writes[col.index()]
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
    }

    /// The writes of one column within `bounds`, in key order (a scan's uncommitted layer).
    pub fn range<'s>(
        &'s self,
        col: Column,
        bounds: &KeyBounds,
    ) -> impl Iterator<Item = (&'s [u8], Option<&'s [u8]>)> + 's {
        let inner = (!is_empty_range(bounds)).then(|| {
            let lower = bounds.0.as_ref().map(Vec::as_slice);
            let upper = bounds.1.as_ref().map(Vec::as_slice);
            self.writes[col.index()].range::<[u8], _>((lower, upper))
        });
        inner
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
    }

    /// No writes pending.
    pub fn is_empty(&self) -> bool {
        self.writes.iter().all(BTreeMap::is_empty)
    }

    /// Number of keys written.
    pub fn len(&self) -> usize {
        self.writes.iter().map(BTreeMap::len).sum()
    }

    /// The writes in key order: the last write of each key only, so the changelog gets one record per key.
    pub fn iter(&self) -> impl Iterator<Item = (Column, &[u8], Option<&[u8]>)> {
        Column::ALL.into_iter().flat_map(move |c| {
            self.writes[c.index()]
                .iter()
                .map(move |(k, v)| (c, k.as_slice(), v.as_deref()))
        })
    }

    /// Drops every write (an aborted batch).
    pub fn clear(&mut self) {
        for w in &mut self.writes {
            w.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_write_wins_and_deletes_are_visible() {
        let mut o = Overlay::default();
        o.put(Column::State, b"k", b"1".to_vec());
        o.put(Column::State, b"k", b"2".to_vec());
        assert_eq!(o.get(Column::State, b"k"), Some(Some(&b"2"[..])));
        o.delete(Column::State, b"k");
        assert_eq!(o.get(Column::State, b"k"), Some(None));
        assert_eq!(o.get(Column::Dedup, b"k"), None);
        assert_eq!(o.len(), 1);
    }

    #[test]
    fn a_range_lists_one_column_in_key_order_within_its_bounds() {
        use std::ops::Bound;
        let mut o = Overlay::default();
        for k in ["c", "a", "b", "d"] {
            o.put(Column::State, k.as_bytes(), k.as_bytes().to_vec());
        }
        o.delete(Column::State, b"bb");
        o.put(Column::Dedup, b"b", b"x".to_vec());
        let bounds = (
            Bound::Excluded(b"a".to_vec()),
            Bound::Included(b"c".to_vec()),
        );
        let keys: Vec<&[u8]> = o.range(Column::State, &bounds).map(|(k, _)| k).collect();
        assert_eq!(keys, vec![&b"b"[..], b"bb", b"c"]);
        let reversed = (
            Bound::Included(b"d".to_vec()),
            Bound::Excluded(b"a".to_vec()),
        );
        assert_eq!(o.range(Column::State, &reversed).count(), 0);
    }

    #[test]
    fn changelog_keys_round_trip() {
        let k = Column::Dedup.changelog_key(b"id-1");
        assert_eq!(
            Column::parse_changelog_key(&k),
            Some((Column::Dedup, &b"id-1"[..]))
        );
        assert_eq!(Column::parse_changelog_key(b"xjunk"), None);
    }
}
