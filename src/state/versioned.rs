//! The versions of a versioned table (see [`crate::topology::tables`]): every value a key had
//! within the table's history, so a lookup can ask for the value *as of* a time (Kafka
//! Streams' `VersionedKeyValueStore`, KIP-889).
//!
//! A versioned table's store keeps its latest rows in [`Column::State`] exactly as a plain
//! table does (key bytes → value bytes, a tombstone deleting the key), so reading the latest
//! row costs what it always did. The history lives in the store's [`Column::Time`] (a
//! table's store has no clocks of its own there otherwise), tagged like the windowed store's
//! entries:
//!
//! - `v · key length (4 bytes, big-endian) · key · timestamp (descending)` → `1 · value`, or
//!   `0` for a tombstone: one entry per version, a key's newest first, so the version valid at
//!   a time is one seek away. A version is valid from its timestamp until the next version's.
//! - `l · key length · key` → the timestamp of the key's newest version: a record in
//!   timestamp order learns it has no successor without a scan.
//! - `x · expiry (sign-flipped) · key length · key · timestamp` → empty: the expiry index.
//!   A version whose successor starts at `s` is of no use once the history cutoff reaches
//!   `s` (a lookup at the cutoff or later finds the successor or a newer one); it is indexed
//!   at `s`. A tombstone is also indexed at its own timestamp: once the cutoff passes it, it
//!   reads as no version at all. Pruning walks the index from its start up to the cutoff, a
//!   bounded number of entries at a time, so no scan of all keys is ever needed.
//! - `mobserved` → the table's observed stream time (the largest timestamp of its records,
//!   sign-flipped): the history cutoff is `observed − history`.
//!
//! The rules (KIP-889/KIP-914):
//!
//! - A record older than the cutoff is dropped ([`Applied::TooOld`]): its version could not
//!   be looked up anyway.
//! - A record with a timestamp before the key's latest version is inserted into the history
//!   ([`Applied::History`]); the latest row does not change. One with the timestamp of an
//!   existing version replaces that version.
//! - A lookup at a time before the cutoff is [`Lookup::TooOld`]: the versions valid then may
//!   have been pruned, so "no row" would be a guess. The newest version at or before the
//!   cutoff is kept, so a lookup at the cutoff itself still answers.
//!
//! Every function reads through overlays (highest first) over the committed store and writes
//! into the top overlay: the runtime's batch, the restore's chunk. Both apply a table topic's
//! records in offset order with the same functions, so a restore builds exactly the versions
//! the live path built.

use std::ops::Bound;

use super::merge::{prefix_bounds, KeyBounds, Layer, Merged};
use super::{Column, Overlay, StateError, Store};

/// The column of a versioned table's history, expiry index and observed time.
const COL: Column = Column::Time;
const VERSION: u8 = b'v';
const EXPIRY: u8 = b'x';
const LATEST: u8 = b'l';
const OBSERVED: &[u8] = b"mobserved";

/// Expired index entries pruned per table record applied: each record adds at most two index
/// entries (its own and, for a tombstone, its marker; its predecessor's moves), so pruning
/// four per record keeps up with any rate of updates while bounding a batch's work.
pub(crate) const PRUNE_PER_RECORD: usize = 4;

/// The least time between two WARN logs of [`warn_limited`] (per process).
pub(crate) const WARN_EVERY_MS: i64 = 10_000;

/// Runs `log` unless another call did less than [`WARN_EVERY_MS`] ago: records older than a
/// table's history come in runs (a lagging producer, a replay), and one line per record would
/// drown the log; the metrics count every one.
pub(crate) fn warn_limited(log: impl FnOnce()) {
    use std::sync::atomic::{AtomicI64, Ordering};
    static LAST: AtomicI64 = AtomicI64::new(i64::MIN);
    let now = crate::clock::now_ms();
    let last = LAST.load(Ordering::Relaxed);
    if now.saturating_sub(last) >= WARN_EVERY_MS
        && LAST
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        log();
    }
}

/// What applying a table record to a versioned table did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    /// The record is the key's latest version: the latest row changed.
    Latest,
    /// The record is older than the key's latest version: inserted into its history only.
    History,
    /// The record is older than the history cutoff: dropped.
    TooOld {
        /// The cutoff it is older than.
        cutoff: i64,
    },
}

/// What a lookup as of a time found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The version valid at the time: its value and the timestamp it is valid from.
    Found {
        /// The value's bytes.
        value: Vec<u8>,
        /// Where the version's validity starts.
        timestamp: i64,
    },
    /// No version was valid at the time (none yet, or a tombstone).
    Absent,
    /// The time is older than the history cutoff: the table cannot say.
    TooOld {
        /// The cutoff (observed stream time − history).
        cutoff: i64,
    },
}

/// `t` as 8 bytes that sort like the number.
fn flip(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

fn unflip(b: &[u8]) -> Option<i64> {
    Some((u64::from_be_bytes(b.try_into().ok()?) ^ (1 << 63)) as i64)
}

/// `t` as 8 bytes that sort against the number: a key's newest version comes first.
fn desc(t: i64) -> [u8; 8] {
    (!((t as u64) ^ (1 << 63))).to_be_bytes()
}

fn undesc(b: &[u8]) -> Option<i64> {
    Some(((!u64::from_be_bytes(b.try_into().ok()?)) ^ (1 << 63)) as i64)
}

/// `tag · key length · key`.
fn tagged(tag: u8, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(13 + key.len());
    k.push(tag);
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// `v · key length · key · timestamp (descending)`.
fn version_key(key: &[u8], ts: i64) -> Vec<u8> {
    let mut k = tagged(VERSION, key);
    k.extend_from_slice(&desc(ts));
    k
}

fn expiry_key(expiry: i64, key: &[u8], ts: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(21 + key.len());
    k.push(EXPIRY);
    k.extend_from_slice(&flip(expiry));
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&flip(ts));
    k
}

/// The expiry, key and version timestamp of an expiry index entry.
fn parse_expiry(k: &[u8]) -> Option<(i64, &[u8], i64)> {
    let (&EXPIRY, rest) = k.split_first()? else {
        return None;
    };
    let expiry = unflip(rest.get(..8)?)?;
    let len = u32::from_be_bytes(rest.get(8..12)?.try_into().ok()?) as usize;
    let key = rest.get(12..12 + len)?;
    let ts = unflip(rest.get(12 + len..)?)?;
    Some((expiry, key, ts))
}

/// A live entry of the column: key, value.
type Entry = (Vec<u8>, Vec<u8>);

/// One version of a key: its timestamp and value (`None`: a tombstone).
type Version = (i64, Option<Vec<u8>>);

/// The merged entries of `bounds` over `overlays` (highest first) and `store`, owned, at most
/// `limit` of them.
fn scan(
    overlays: &[&Overlay],
    store: &Store,
    bounds: &KeyBounds,
    limit: usize,
) -> Result<Vec<Entry>, StateError> {
    let mut layers: Vec<Layer<'_>> = overlays
        .iter()
        .map(|o| -> Layer<'_> {
            Box::new(
                o.range(COL, bounds)
                    .map(|(k, v)| Ok((k.to_vec(), v.map(<[u8]>::to_vec)))),
            )
        })
        .collect();
    layers.push(Box::new(store.range(COL, bounds)?));
    Merged::new(layers).take(limit).collect()
}

fn get(overlays: &[&Overlay], store: &Store, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
    for o in overlays {
        if let Some(v) = o.get(COL, key) {
            return Ok(v.map(<[u8]>::to_vec));
        }
    }
    store.get(COL, key)
}

/// The table's observed stream time: the largest timestamp of the records applied to it.
pub(crate) fn observed(overlays: &[&Overlay], store: &Store) -> Result<Option<i64>, StateError> {
    Ok(get(overlays, store, OBSERVED)?.and_then(|v| unflip(&v)))
}

/// The history cutoff (`observed − history`), `None` before any record.
fn cutoff(
    overlays: &[&Overlay],
    store: &Store,
    history_ms: i64,
) -> Result<Option<i64>, StateError> {
    Ok(observed(overlays, store)?.map(|o| o.saturating_sub(history_ms)))
}

/// The timestamp of `key`'s newest version.
fn latest(overlays: &[&Overlay], store: &Store, key: &[u8]) -> Result<Option<i64>, StateError> {
    Ok(get(overlays, store, &tagged(LATEST, key))?.and_then(|v| unflip(&v)))
}

/// `key`'s versions at or before `ts`, newest first, at most `limit`: one seek.
fn at_or_before(
    overlays: &[&Overlay],
    store: &Store,
    key: &[u8],
    ts: i64,
    limit: usize,
) -> Result<Vec<Version>, StateError> {
    let prefix = tagged(VERSION, key);
    let bounds = (
        Bound::Included(version_key(key, ts)),
        prefix_bounds(&prefix).1,
    );
    Ok(parse_versions(
        &prefix,
        scan(overlays, store, &bounds, limit)?,
    ))
}

/// `key`'s versions after `ts`, newest first: only a late record asks, and they are the
/// versions its lateness spans.
fn after(
    overlays: &[&Overlay],
    store: &Store,
    key: &[u8],
    ts: i64,
) -> Result<Vec<Version>, StateError> {
    let prefix = tagged(VERSION, key);
    let bounds = (
        Bound::Included(prefix.clone()),
        Bound::Excluded(version_key(key, ts)),
    );
    Ok(parse_versions(
        &prefix,
        scan(overlays, store, &bounds, usize::MAX)?,
    ))
}

fn parse_versions(prefix: &[u8], entries: Vec<Entry>) -> Vec<Version> {
    entries
        .into_iter()
        .filter_map(|(k, v)| Some((undesc(k.get(prefix.len()..)?)?, decode(&v))))
        .collect()
}

fn decode(v: &[u8]) -> Option<Vec<u8>> {
    match v.split_first() {
        Some((1, value)) => Some(value.to_vec()),
        _ => None,
    }
}

fn encode(value: Option<&[u8]>) -> Vec<u8> {
    match value {
        Some(v) => {
            let mut out = Vec::with_capacity(v.len() + 1);
            out.push(1);
            out.extend_from_slice(v);
            out
        }
        None => vec![0],
    }
}

/// Applies a table record (`value` `None`: a tombstone) at `ts` to a versioned table whose
/// history is `history_ms`, into `top` (read over `below` and `store`): the version, its
/// expiry entries, the latest row when it is the latest, the observed stream time. A record
/// in timestamp order costs a few point reads and one seek; a late one also reads the
/// versions its lateness spans.
pub(crate) fn put(
    top: &mut Overlay,
    below: &[&Overlay],
    store: &Store,
    key: &[u8],
    ts: i64,
    value: Option<&[u8]>,
    history_ms: i64,
) -> Result<Applied, StateError> {
    let (observed, same, pred, succ) = {
        let layers: Vec<&Overlay> = std::iter::once(&*top)
            .chain(below.iter().copied())
            .collect();
        let observed = observed(&layers, store)?;
        if let Some(cutoff) = observed.map(|o| o.saturating_sub(history_ms)) {
            if ts < cutoff {
                return Ok(Applied::TooOld { cutoff });
            }
        }
        let older = at_or_before(&layers, store, key, ts, 2)?;
        let same = older.first().is_some_and(|(t, _)| *t == ts);
        let pred = older.iter().map(|(t, _)| *t).find(|t| *t < ts);
        let succ = match latest(&layers, store, key)? {
            Some(l) if l > ts => after(&layers, store, key, ts)?.last().map(|(t, _)| *t),
            _ => None,
        };
        (observed, same, pred, succ)
    };
    if observed.is_none_or(|o| ts > o) {
        top.put(COL, OBSERVED, flip(ts).to_vec());
    }
    top.put(COL, &version_key(key, ts), encode(value));
    if let (Some(p), false) = (pred, same) {
        // The predecessor's validity now ends here instead of at the successor.
        if let Some(s) = succ {
            top.delete(COL, &expiry_key(s, key, p));
        }
        top.put(COL, &expiry_key(ts, key, p), Vec::new());
    }
    if let Some(s) = succ {
        top.put(COL, &expiry_key(s, key, ts), Vec::new());
    }
    match value {
        None => top.put(COL, &expiry_key(ts, key, ts), Vec::new()),
        Some(_) => top.delete(COL, &expiry_key(ts, key, ts)),
    }
    if succ.is_some() {
        return Ok(Applied::History);
    }
    top.put(COL, &tagged(LATEST, key), flip(ts).to_vec());
    match value {
        Some(v) => top.put(Column::State, key, v.to_vec()),
        None => top.delete(Column::State, key),
    }
    Ok(Applied::Latest)
}

/// Removes up to `max` versions the cutoff has made useless (with their index entries), into
/// `top`. Returns how many index entries it handled.
pub(crate) fn prune(
    top: &mut Overlay,
    below: &[&Overlay],
    store: &Store,
    history_ms: i64,
    max: usize,
) -> Result<usize, StateError> {
    let (expired, latest_gone) = {
        let layers: Vec<&Overlay> = std::iter::once(&*top)
            .chain(below.iter().copied())
            .collect();
        let Some(cutoff) = cutoff(&layers, store, history_ms)? else {
            return Ok(0);
        };
        let upper = match cutoff.checked_add(1) {
            Some(next) => {
                let mut u = vec![EXPIRY];
                u.extend_from_slice(&flip(next));
                Bound::Excluded(u)
            }
            None => Bound::Excluded(vec![EXPIRY + 1]),
        };
        let expired = scan(&layers, store, &(Bound::Included(vec![EXPIRY]), upper), max)?;
        // A key whose newest version is a tombstone the cutoff passed has nothing left.
        let mut gone = Vec::new();
        for (k, _) in &expired {
            if let Some((expiry, key, ts)) = parse_expiry(k) {
                if expiry == ts && latest(&layers, store, key)? == Some(ts) {
                    gone.push(tagged(LATEST, key));
                }
            }
        }
        (expired, gone)
    };
    for (k, _) in &expired {
        top.delete(COL, k);
        if let Some((_, key, ts)) = parse_expiry(k) {
            top.delete(COL, &version_key(key, ts));
        }
    }
    for k in latest_gone {
        top.delete(COL, &k);
    }
    Ok(expired.len())
}

/// The version of `key` valid at `ts` in a versioned table whose history is `history_ms`,
/// read over `overlays` (highest first) and `store`: one seek.
pub(crate) fn get_as_of(
    overlays: &[&Overlay],
    store: &Store,
    key: &[u8],
    ts: i64,
    history_ms: i64,
) -> Result<Lookup, StateError> {
    if let Some(cutoff) = cutoff(overlays, store, history_ms)? {
        if ts < cutoff {
            return Ok(Lookup::TooOld { cutoff });
        }
    }
    Ok(match at_or_before(overlays, store, key, ts, 1)?.pop() {
        Some((timestamp, Some(value))) => Lookup::Found { value, timestamp },
        _ => Lookup::Absent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StoreCache;

    struct Fixture {
        dir: std::path::PathBuf,
        store: Store,
        batch: Overlay,
    }

    impl Fixture {
        fn new() -> Self {
            let dir = std::env::temp_dir().join(format!("eosflow-vers-{}", uuid::Uuid::new_v4()));
            let cache = StoreCache::new(8 << 20);
            let (store, _) = Store::open(&dir, "t[0]", &cache).expect("open");
            Self {
                dir,
                store,
                batch: Overlay::default(),
            }
        }

        fn put(&mut self, key: &str, ts: i64, value: Option<&str>) -> Applied {
            let applied = put(
                &mut self.batch,
                &[],
                &self.store,
                key.as_bytes(),
                ts,
                value.map(str::as_bytes),
                100,
            )
            .expect("put");
            prune(&mut self.batch, &[], &self.store, 100, PRUNE_PER_RECORD).expect("prune");
            applied
        }

        fn commit(&mut self) {
            self.store.apply(&self.batch, Some(1)).expect("apply");
            self.batch = Overlay::default();
        }

        fn at(&self, key: &str, ts: i64) -> Lookup {
            get_as_of(&[&self.batch], &self.store, key.as_bytes(), ts, 100).expect("get")
        }

        fn found(&self, key: &str, ts: i64) -> Option<String> {
            match self.at(key, ts) {
                Lookup::Found { value, .. } => Some(String::from_utf8(value).expect("utf8")),
                Lookup::Absent => None,
                Lookup::TooOld { cutoff } => panic!("{key}@{ts}: older than {cutoff}"),
            }
        }

        fn entries(&self) -> usize {
            let all = (Bound::Unbounded, Bound::Unbounded);
            scan(&[&self.batch], &self.store, &all, usize::MAX)
                .expect("scan")
                .len()
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = Store::wipe(&self.dir);
        }
    }

    #[test]
    fn a_lookup_finds_the_version_valid_at_its_time_across_commits_and_tombstones() {
        let mut f = Fixture::new();
        assert_eq!(f.put("a", 10, Some("a10")), Applied::Latest);
        f.commit();
        assert_eq!(f.put("a", 30, None), Applied::Latest);
        assert_eq!(
            f.put("a", 20, Some("a20")),
            Applied::History,
            "out of order"
        );
        assert_eq!(f.put("a", 40, Some("a40")), Applied::Latest);
        for committed in [false, true] {
            assert_eq!(f.found("a", 9), None, "before the first version");
            assert_eq!(f.found("a", 10).as_deref(), Some("a10"));
            assert_eq!(f.found("a", 19).as_deref(), Some("a10"));
            assert_eq!(f.found("a", 20).as_deref(), Some("a20"), "inserted late");
            assert_eq!(f.found("a", 30), None, "the tombstone");
            assert_eq!(f.found("a", 45).as_deref(), Some("a40"));
            assert_eq!(f.found("b", 45), None);
            let latest: &[u8] = if committed { b"a40" } else { b"a10" };
            assert_eq!(
                f.store.get(Column::State, b"a").expect("get").as_deref(),
                Some(latest),
                "the latest row lands with the commit"
            );
            f.commit();
        }
        // Same timestamp: the version is replaced.
        assert_eq!(f.put("a", 20, Some("a20bis")), Applied::History);
        assert_eq!(f.found("a", 25).as_deref(), Some("a20bis"));
    }

    #[test]
    fn history_is_pruned_behind_the_cutoff_but_the_version_valid_at_it_stays() {
        let mut f = Fixture::new();
        for ts in [0, 10, 20, 30] {
            f.put("a", ts, Some(&format!("a{ts}")));
        }
        f.put("gone", 5, Some("g"));
        f.put("gone", 15, None);
        f.commit();
        // Observed 30, history 100: nothing is older than the cutoff.
        assert_eq!(f.found("a", 0).as_deref(), Some("a0"));
        // Observed 125: cutoff 25. a0 and a10 are useless (a20 is valid at 25), the
        // tombstone and the version before it too.
        f.put("b", 125, Some("b"));
        for _ in 0..4 {
            f.put("b", 125, Some("b"));
        }
        f.commit();
        assert_eq!(f.at("a", 24), Lookup::TooOld { cutoff: 25 });
        assert_eq!(
            f.found("a", 25).as_deref(),
            Some("a20"),
            "kept for the cutoff"
        );
        assert_eq!(f.found("a", 31).as_deref(), Some("a30"));
        assert_eq!(f.found("gone", 25), None);
        assert_eq!(
            f.put("a", 24, Some("late")),
            Applied::TooOld { cutoff: 25 },
            "a record older than the cutoff is dropped"
        );
        // Left: a20, a30, their index entry (a20 expires at 30), b125, the latest entries of
        // a and b (not of `gone`, whose tombstone the cutoff passed), the observed time.
        assert_eq!(f.entries(), 7, "pruned to what a lookup can still reach");
    }
}
