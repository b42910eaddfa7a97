//! How processed message ids reach the changelog and leave the store again.
//!
//! Each id lives in the `dedup` column (id → the time it was seen), but the changelog gets one
//! *dedup batch* record per partition and transaction (all the ids that batch saw), not one
//! record per id: a record per input would double what every transaction produces. Batches are
//! also kept in the `dedup_batches` column, keyed by the time they were seen first, so expiry
//! walks them oldest first and stops at the first one still inside the retention window: its
//! cost is what expires, never the size of the store.
//!
//! A `dedup_batches` key is `seen_at (8 bytes, big-endian) · kind · rest`: kind 1 is a batch
//! (rest: 8 random bytes, so two batches never share a key); kind 2 is one id restored from a
//! changelog written before batches existed (`d<id>` records; rest: the id), expired the same
//! way and tombstoned as `d<id>`.
//!
//! An id's `dedup` value is `seen_at (8 bytes) · digest (8 bytes)`, the digest being
//! [`digest`] of the record's key and value: the same id arriving with another payload is an
//! *id conflict*, not a duplicate. Batch records carry each id's digest (value version 2), so
//! it survives a restore; ids restored from version-1 batches or per-id records have no
//! digest and are treated as plain duplicates.

use super::{Column, Overlay, StateError, Store};

/// Kind byte of a batch key.
const KIND_BATCH: u8 = 1;
/// Kind byte of a single id restored from a per-id (`d<id>`) changelog record.
const KIND_LEGACY: u8 = 2;
/// Version byte of a batch record's value: ids only.
const VALUE_V1: u8 = 1;
/// Version byte of a batch record's value: each id followed by a digest flag and its digest.
const VALUE_V2: u8 = 2;
/// Most bytes of ids in one changelog record: far below the broker's `message.max.bytes`
/// (1 MiB by default); a batch that saw more ids is split over several records.
pub const MAX_RECORD_BYTES: usize = 256 * 1024;

/// What a `dedup_batches` key stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchKey<'a> {
    /// A batch of ids, all seen at `seen_at`.
    Batch {
        /// When its ids were processed (ms since the epoch).
        seen_at: i64,
    },
    /// One id from a per-id changelog record.
    Legacy {
        /// When it was processed.
        seen_at: i64,
        /// The id.
        id: &'a [u8],
    },
}

impl<'a> BatchKey<'a> {
    /// Parses a `dedup_batches` key; `None` for bytes no version of eosflow wrote.
    pub fn parse(key: &'a [u8]) -> Option<Self> {
        let seen_at = i64::from_be_bytes(key.get(..8)?.try_into().ok()?);
        match (key.get(8)?, &key[9..]) {
            (&KIND_BATCH, rest) if rest.len() == 8 => Some(Self::Batch { seen_at }),
            (&KIND_LEGACY, id) => Some(Self::Legacy { seen_at, id }),
            _ => None,
        }
    }

    /// When its ids were processed.
    pub fn seen_at(self) -> i64 {
        match self {
            Self::Batch { seen_at } | Self::Legacy { seen_at, .. } => seen_at,
        }
    }
}

/// A fresh batch key for ids seen at `seen_at`.
fn batch_key(seen_at: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(17);
    k.extend_from_slice(&seen_at.to_be_bytes());
    k.push(KIND_BATCH);
    k.extend_from_slice(&rand::random::<u64>().to_be_bytes());
    k
}

fn legacy_key(seen_at: i64, id: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + id.len());
    k.extend_from_slice(&seen_at.to_be_bytes());
    k.push(KIND_LEGACY);
    k.extend_from_slice(id);
    k
}

/// A 64-bit digest of a record's key and value, stable across builds, platforms and Rust
/// releases (it is stored, and compared after restores and upgrades): FNV-1a's multiply over
/// 8-byte little-endian words (a byte-wise FNV costs a nanosecond per byte on the hot path),
/// with splitmix64's finaliser. Key and value are length-framed, so moving bytes between them
/// changes the digest. Not cryptographic: it tells a reused id from a redelivery.
pub fn digest(key: Option<&[u8]>, value: Option<&[u8]>) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut word = |w: u64| {
        h = (h ^ w).wrapping_mul(PRIME).rotate_left(29);
    };
    for part in [key, value] {
        let Some(bytes) = part else {
            word(u64::MAX);
            continue;
        };
        word(bytes.len() as u64);
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            word(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            word(u64::from_le_bytes(w));
        }
    }
    // splitmix64's finaliser: every input bit reaches every output bit.
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The `dedup` value of an id seen at `seen_at` in a record with digest `digest`.
pub fn mark(seen_at: i64, digest: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&seen_at.to_be_bytes());
    v.extend_from_slice(&digest.to_be_bytes());
    v
}

/// The digest in a `dedup` value; `None` for an id restored from a format without one.
fn digest_of(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.get(8..16)?.try_into().ok()?))
}

/// What the dedup column says of a record's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Never processed (or expired).
    New,
    /// Processed before, with the same key and value (or with no digest recorded).
    Duplicate,
    /// Processed before with another key or value: the id was reused.
    Conflict {
        /// The digest recorded when the id was processed.
        stored: u64,
    },
}

/// Looks `id` up as the open batch sees it (its overlay, else the store) and compares the
/// digest recorded for it with `digest`. A store read error is returned, never taken for "new".
pub fn lookup(
    store: &Store,
    overlay: &Overlay,
    id: &[u8],
    digest: u64,
) -> Result<Seen, StateError> {
    let judge = |value: Option<&[u8]>| match value {
        None => Seen::New,
        Some(v) => match digest_of(v) {
            Some(stored) if stored != digest => Seen::Conflict { stored },
            _ => Seen::Duplicate,
        },
    };
    match overlay.get(Column::Dedup, id) {
        Some(v) => Ok(judge(v)),
        None => store.with_value(Column::Dedup, id, judge),
    }
}

/// Encodes ids and their digests as a batch record's value: a version byte, then each id as a
/// 4-byte big-endian length, its bytes, a flag byte (1: a digest follows) and the digest.
fn encode(ids: &[(&[u8], Option<u64>)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(
        1 + ids
            .iter()
            .map(|(i, _)| ENTRY_OVERHEAD + i.len())
            .sum::<usize>(),
    );
    v.push(VALUE_V2);
    for (id, digest) in ids {
        v.extend_from_slice(&(id.len() as u32).to_be_bytes());
        v.extend_from_slice(id);
        match digest {
            Some(d) => {
                v.push(1);
                v.extend_from_slice(&d.to_be_bytes());
            }
            None => v.push(0),
        }
    }
    v
}

/// Bytes a batch record spends on an id besides the id itself (length, flag, digest).
const ENTRY_OVERHEAD: usize = 4 + 1 + 8;

/// The ids of a batch record's value; `None` if it is not one.
pub fn decode(value: &[u8]) -> Option<Vec<&[u8]>> {
    Some(
        decode_entries(value)?
            .into_iter()
            .map(|(id, _)| id)
            .collect(),
    )
}

/// The ids of a batch record's value with their digests (`None` for a version-1 record, which
/// has none); `None` if it is not a batch record.
pub fn decode_entries(value: &[u8]) -> Option<Vec<(&[u8], Option<u64>)>> {
    let (&version, mut rest) = value.split_first()?;
    if version != VALUE_V1 && version != VALUE_V2 {
        return None;
    }
    let mut out = Vec::new();
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let id = rest.get(4..4 + len)?;
        rest = &rest[4 + len..];
        let digest = if version == VALUE_V2 {
            let (&flag, after) = rest.split_first()?;
            rest = after;
            match flag {
                0 => None,
                1 => {
                    let d = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
                    rest = &rest[8..];
                    Some(d)
                }
                _ => return None,
            }
        } else {
            None
        };
        out.push((id, digest));
    }
    Some(out)
}

/// The value of `col`/`key` as the open batch sees it: the overlay's write, else the store's.
fn read(
    store: &Store,
    overlay: &Overlay,
    col: Column,
    key: &[u8],
) -> Result<Option<Vec<u8>>, StateError> {
    match overlay.get(col, key) {
        Some(v) => Ok(v.map(<[u8]>::to_vec)),
        None => store.get(col, key),
    }
}

/// Turns the ids the open batch marked as processed (the overlay's `dedup` puts, all seen at
/// `seen_at`) into batch records in `dedup_batches`, which the changelog carries.
pub fn seal(overlay: &mut Overlay, seen_at: i64) {
    let mut records: Vec<Vec<u8>> = Vec::new();
    {
        let mut chunk: Vec<(&[u8], Option<u64>)> = Vec::new();
        let mut bytes = 0;
        for (id, value) in overlay.column(Column::Dedup) {
            let Some(value) = value else {
                continue;
            };
            if bytes + ENTRY_OVERHEAD + id.len() > MAX_RECORD_BYTES && !chunk.is_empty() {
                records.push(encode(&chunk));
                chunk.clear();
                bytes = 0;
            }
            bytes += ENTRY_OVERHEAD + id.len();
            chunk.push((id, digest_of(value)));
        }
        if !chunk.is_empty() {
            records.push(encode(&chunk));
        }
    }
    for r in records {
        overlay.put(Column::DedupBatch, &batch_key(seen_at), r);
    }
}

/// Writes a batch (or a per-id record) read from the changelog: its ids into `dedup`, itself
/// into `dedup_batches`. A value that is not a batch is skipped with a warning (a foreign
/// record cannot be turned into ids).
pub fn restore_batch(overlay: &mut Overlay, key: &[u8], value: &[u8]) {
    let (Some(BatchKey::Batch { seen_at }), Some(ids)) =
        (BatchKey::parse(key), decode_entries(value))
    else {
        tracing::warn!("a dedup batch record in the changelog cannot be read; skipped");
        return;
    };
    let seen = seen_at.to_be_bytes();
    for (id, digest) in ids {
        match digest {
            Some(d) => overlay.put(Column::Dedup, id, mark(seen_at, d)),
            None => overlay.put(Column::Dedup, id, seen.to_vec()),
        }
    }
    overlay.put(Column::DedupBatch, key, value.to_vec());
}

/// Writes a per-id `d<id>` record (a changelog from before batches): the id into `dedup`,
/// and a one-id entry into `dedup_batches` so that it expires like a batch.
pub fn restore_legacy(overlay: &mut Overlay, id: &[u8], seen_at_bytes: &[u8]) {
    let seen_at = <[u8; 8]>::try_from(seen_at_bytes)
        .map(i64::from_be_bytes)
        .unwrap_or(0);
    overlay.put(Column::Dedup, id, seen_at_bytes.to_vec());
    overlay.put(Column::DedupBatch, &legacy_key(seen_at, id), Vec::new());
}

/// A `d<id>` tombstone (a changelog from before batches): the id and its one-id entry go.
pub fn remove_legacy(store: &Store, overlay: &mut Overlay, id: &[u8]) -> Result<(), StateError> {
    if let Some(seen) = read(store, overlay, Column::Dedup, id)? {
        if let Some(Ok(b)) = seen.get(..8).map(<[u8; 8]>::try_from) {
            overlay.delete(Column::DedupBatch, &legacy_key(i64::from_be_bytes(b), id));
        }
    }
    overlay.delete(Column::Dedup, id);
    Ok(())
}

/// Removes a batch and the ids it holds that were not seen again since; returns how many ids
/// went. Expiry and a replayed batch tombstone both come here.
pub fn remove(store: &Store, overlay: &mut Overlay, key: &[u8]) -> Result<usize, StateError> {
    let Some(parsed) = BatchKey::parse(key) else {
        overlay.delete(Column::DedupBatch, key);
        return Ok(0);
    };
    let owned_ids: Vec<Vec<u8>> = match parsed {
        BatchKey::Legacy { id, .. } => vec![id.to_vec()],
        BatchKey::Batch { .. } => match read(store, overlay, Column::DedupBatch, key)? {
            Some(v) => decode(&v)
                .unwrap_or_default()
                .into_iter()
                .map(<[u8]>::to_vec)
                .collect(),
            // Compacted away before this store saw it: its ids were never restored here.
            None => Vec::new(),
        },
    };
    let seen = parsed.seen_at().to_be_bytes();
    let mut removed = 0;
    for id in &owned_ids {
        // An id processed again after an earlier expiry belongs to a newer batch now.
        let value = read(store, overlay, Column::Dedup, id)?;
        if value.as_deref().and_then(|v| v.get(..8)) == Some(&seen[..]) {
            overlay.delete(Column::Dedup, id);
            removed += 1;
        }
    }
    overlay.delete(Column::DedupBatch, key);
    Ok(removed)
}

/// The changelog key a write of `col`/`key` goes out under, if it goes out at all: `dedup`
/// writes travel inside their batch record, and a one-id entry's removal is the `d<id>`
/// tombstone its original record needs.
pub fn changelog_key(col: Column, key: &[u8], value: Option<&[u8]>) -> Option<Vec<u8>> {
    match (col, value) {
        (Column::Dedup, _) => None,
        (Column::DedupBatch, None) => match BatchKey::parse(key) {
            Some(BatchKey::Legacy { id, .. }) => Some(Column::Dedup.changelog_key(id)),
            _ => Some(col.changelog_key(key)),
        },
        // A one-id entry is local bookkeeping of a per-id record already in the changelog.
        (Column::DedupBatch, Some(_)) => match BatchKey::parse(key) {
            Some(BatchKey::Legacy { .. }) => None,
            _ => Some(col.changelog_key(key)),
        },
        _ => Some(col.changelog_key(key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PINNED: u64 = 18_387_874_530_421_320_694;
    use crate::state::StoreCache;

    fn store() -> (Store, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("eosflow-dedup-{}", uuid::Uuid::new_v4()));
        let (s, _) = Store::open(&dir, "cl[0]", &StoreCache::new(8 << 20)).expect("open");
        (s, dir)
    }

    #[test]
    fn a_batch_becomes_one_changelog_record_and_round_trips() {
        let mut o = Overlay::default();
        for id in ["a", "bb", "ccc"] {
            o.put(Column::Dedup, id.as_bytes(), 7i64.to_be_bytes().to_vec());
        }
        seal(&mut o, 7);
        let logged: Vec<_> = o
            .iter()
            .filter_map(|(c, k, v)| changelog_key(c, k, v).map(|k| (k, v.map(<[u8]>::to_vec))))
            .collect();
        assert_eq!(logged.len(), 1, "three ids, one record: {logged:?}");
        let (k, v) = &logged[0];
        let (col, key) = Column::parse_changelog_key(k).expect("ours");
        assert_eq!(col, Column::DedupBatch);
        assert_eq!(BatchKey::parse(key), Some(BatchKey::Batch { seen_at: 7 }));
        let v = v.as_deref().expect("a put");
        assert_eq!(decode(v), Some(vec![&b"a"[..], b"bb", b"ccc"]));
        // Replayed into an empty overlay, it gives the ids back.
        let mut r = Overlay::default();
        restore_batch(&mut r, key, v);
        assert_eq!(
            r.get(Column::Dedup, b"bb"),
            Some(Some(&7i64.to_be_bytes()[..]))
        );
    }

    #[test]
    fn a_large_batch_is_split_below_the_record_limit() {
        let mut o = Overlay::default();
        let id = [b'x'; 1000];
        for i in 0..600u32 {
            let mut k = id.to_vec();
            k.extend_from_slice(&i.to_be_bytes());
            o.put(Column::Dedup, &k, 1i64.to_be_bytes().to_vec());
        }
        seal(&mut o, 1);
        let values: Vec<usize> = o
            .column(Column::DedupBatch)
            .map(|(_, v)| v.map_or(0, <[u8]>::len))
            .collect();
        assert!(values.len() >= 3, "{values:?}");
        assert!(
            values.iter().all(|l| *l <= MAX_RECORD_BYTES + 1),
            "{values:?}"
        );
        let ids: usize = o
            .column(Column::DedupBatch)
            .filter_map(|(_, v)| decode(v?).map(|i| i.len()))
            .sum();
        assert_eq!(ids, 600);
    }

    #[test]
    fn removing_a_batch_spares_an_id_seen_again_later() {
        let (s, dir) = store();
        let mut o = Overlay::default();
        for id in ["a", "b"] {
            o.put(Column::Dedup, id.as_bytes(), 5i64.to_be_bytes().to_vec());
        }
        seal(&mut o, 5);
        let key = o
            .column(Column::DedupBatch)
            .next()
            .expect("batch")
            .0
            .to_vec();
        s.apply(&o, Some(1)).expect("apply");
        // "b" expired once and was processed again at 9: it belongs to a newer batch.
        let mut o = Overlay::default();
        o.put(Column::Dedup, b"b", 9i64.to_be_bytes().to_vec());
        s.apply(&o, Some(2)).expect("apply");
        let mut o = Overlay::default();
        assert_eq!(remove(&s, &mut o, &key).expect("remove"), 1);
        s.apply(&o, Some(3)).expect("apply");
        assert_eq!(s.get(Column::Dedup, b"a").expect("get"), None);
        assert!(s.get(Column::Dedup, b"b").expect("get").is_some());
        assert_eq!(s.count(Column::DedupBatch).expect("count"), 0);
        drop(s);
        Store::wipe(&dir).expect("wipe");
    }

    #[test]
    fn per_id_records_from_an_older_changelog_expire_as_d_tombstones() {
        let (s, dir) = store();
        let mut o = Overlay::default();
        restore_legacy(&mut o, b"old-id", &3i64.to_be_bytes());
        // Local bookkeeping only: nothing of it goes back to the changelog.
        assert!(o.iter().all(|(c, k, v)| changelog_key(c, k, v).is_none()));
        s.apply(&o, Some(1)).expect("apply");
        let expired = s.dedup_batches_before(4, 10).expect("expired");
        assert_eq!(expired.len(), 1);
        let mut o = Overlay::default();
        remove(&s, &mut o, &expired[0]).expect("remove");
        let logged: Vec<_> = o
            .iter()
            .filter_map(|(c, k, v)| changelog_key(c, k, v).map(|k| (k, v.is_none())))
            .collect();
        assert_eq!(logged, vec![(b"dold-id".to_vec(), true)]);
        s.apply(&o, Some(2)).expect("apply");
        assert_eq!(s.get(Column::Dedup, b"old-id").expect("get"), None);
        drop(s);
        Store::wipe(&dir).expect("wipe");
    }

    #[test]
    fn a_reused_id_is_a_conflict_through_the_changelog_and_an_old_format_id_a_duplicate() {
        let (s, dir) = store();
        let same = digest(Some(b"k"), Some(b"1"));
        let other = digest(Some(b"k"), Some(b"2"));
        assert_ne!(same, other);
        assert_ne!(
            digest(Some(b"ab"), Some(b"c")),
            digest(Some(b"a"), Some(b"bc")),
            "framed"
        );
        assert_ne!(digest(None, Some(b"")), digest(Some(b""), None));
        // The verdicts on id-1 for its own payload, another one, and on an unknown id.
        let judged = |o: &Overlay| {
            [(b"id-1", same), (b"id-1", other), (b"id-2", same)]
                .map(|(id, d)| lookup(&s, o, id, d).expect("lookup"))
        };
        let want = [Seen::Duplicate, Seen::Conflict { stored: same }, Seen::New];
        // Marked in an open batch: judged from the overlay...
        let mut o = Overlay::default();
        o.put(Column::Dedup, b"id-1", mark(7, same));
        assert_eq!(judged(&o), want);
        // ...then sealed into a batch record, which is all the changelog carries.
        seal(&mut o, 7);
        let (key, value) = o
            .column(Column::DedupBatch)
            .find_map(|(k, v)| Some((k.to_vec(), v?.to_vec())))
            .expect("a batch record");
        assert_eq!(
            decode_entries(&value),
            Some(vec![(&b"id-1"[..], Some(same))])
        );
        // A store rebuilt from that record still tells the conflict from the duplicate.
        let mut r = Overlay::default();
        restore_batch(&mut r, &key, &value);
        s.apply(&r, Some(1)).expect("apply");
        let empty = Overlay::default();
        assert_eq!(judged(&empty), want);
        // Ids from a version-1 batch (no digest) are plain duplicates whatever the payload.
        let v1 = b"\x01\x00\x00\x00\x04id-9";
        let mut r = Overlay::default();
        restore_batch(&mut r, &batch_key(8), v1);
        s.apply(&r, Some(2)).expect("apply");
        assert_eq!(
            lookup(&s, &empty, b"id-9", other).expect("lookup"),
            Seen::Duplicate
        );
        // Expiry still recognises marks that carry a digest.
        let mut o = Overlay::default();
        assert_eq!(remove(&s, &mut o, &key).expect("remove"), 1);
        drop(s);
        Store::wipe(&dir).expect("wipe");
    }

    #[test]
    fn the_digest_is_pinned() {
        // Stored digests are compared after upgrades: this value must never change.
        assert_eq!(digest(Some(b"key"), Some(b"value")), PINNED);
    }

    #[test]
    fn foreign_bytes_are_not_batches() {
        assert_eq!(BatchKey::parse(b"short"), None);
        assert_eq!(decode(b"\x02junk"), None);
        assert_eq!(decode(b"\x03"), None);
        assert_eq!(decode(b"\x01\x00\x00\x00\x09ab"), None);
    }
}
