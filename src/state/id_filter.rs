//! A filter in memory over every message id in a store's `dedup` column: where it says an id
//! is absent, the dedup check skips RocksDB.
//!
//! # Why
//! Nearly every dedup check is a miss (a new message id), and RocksDB answers a miss only after
//! asking every level: the memtables, then each table file's bloom filter through the table
//! cache. In the count benchmark's profile that was 15 % of the processing loop, more than the
//! handler itself. This filter answers the same miss with one 64-bit word read.
//!
//! # What it guarantees
//! It never says "absent" for an id the column holds, so it never changes a dedup verdict:
//! - [`crate::state::Store::apply`] is the only way an id reaches the column (commits, restores,
//!   standbys), and it inserts every id it writes here, before the write;
//! - the ids already in the column are read by a scan that starts after the filter takes
//!   inserts, so an id is either in the scan's snapshot or inserted by an apply;
//! - until that scan is done the filter answers nothing ([`IdFilter::may_contain`] is `None`)
//!   and every check reads RocksDB, as before.
//!
//! Deleted (expired) ids stay in the filter: they only make it answer "maybe" more often. When
//! more ids were inserted than it was sized for, a new one sized for twice what the column
//! holds then is built the same way, beside it, and replaces it when its scan is done (inserts
//! go to both meanwhile): that is how it grows, and how expired ids leave it.
//!
//! # Cost
//! A blocked bloom filter: 16 bits per id it is sized for, four bits set in one 64-bit word per
//! id (about 0.5 % "maybe" for absent ids at its size). It starts at 8 192 ids (16 KiB) and
//! doubles with what the column holds, up to [`MAX_BYTES`] per store; past that it stays
//! correct and answers "maybe" more often. A store whose column holds few ids is scanned on the
//! loop (a few milliseconds at most); a larger one on a thread of its own, so opening a store
//! never waits for it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rocksdb::{IteratorMode, DB};

/// Ids a filter is sized for at least.
const MIN_IDS: u64 = 8_192;
/// Most bytes of one store's filter.
pub(super) const MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Bits per id a filter is sized for.
const BITS_PER_ID: u64 = 16;
/// Estimated ids at or below which the scan runs on the calling thread.
const INLINE_SCAN_IDS: u64 = 20_000;

/// The bits of one filter, shared with the thread scanning the column into it.
struct Bits {
    words: Box<[AtomicU64]>,
    /// Ids it is sized for: past that many inserts a larger one is built.
    capacity: u64,
    /// Ids inserted (by applies and by the scan).
    inserted: AtomicU64,
}

impl Bits {
    fn sized_for(ids: u64) -> Self {
        let max_words = MAX_BYTES / 8;
        let words = (ids.max(MIN_IDS) * BITS_PER_ID / 64)
            .next_power_of_two()
            .min(max_words);
        Self {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            capacity: words * 64 / BITS_PER_ID,
            inserted: AtomicU64::new(0),
        }
    }

    /// The word of `id` and the four bits it sets there.
    fn slot(&self, id: &[u8]) -> (usize, u64) {
        let h = hash(id);
        let word = ((h >> 32) as usize) & (self.words.len() - 1);
        let bits = (1u64 << (h & 63))
            | (1u64 << ((h >> 6) & 63))
            | (1u64 << ((h >> 12) & 63))
            | (1u64 << ((h >> 18) & 63));
        (word, bits)
    }

    fn insert(&self, id: &[u8]) {
        let (w, bits) = self.slot(id);
        self.words[w].fetch_or(bits, Ordering::Relaxed);
        self.inserted.fetch_add(1, Ordering::Relaxed);
    }

    fn may_contain(&self, id: &[u8]) -> bool {
        let (w, bits) = self.slot(id);
        self.words[w].load(Ordering::Relaxed) & bits == bits
    }

    fn bytes(&self) -> u64 {
        self.words.len() as u64 * 8
    }
}

/// A 64-bit hash of an id: word-at-a-time multiply-rotate, then splitmix64's finaliser so that
/// every output bit depends on every input bit (the word index and the bit positions are taken
/// from different bits).
fn hash(id: &[u8]) -> u64 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ id.len() as u64;
    let mut chunks = id.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w))
            .wrapping_mul(0xbf58_476d_1ce4_e5b9)
            .rotate_left(31);
    }
    let mut w = [0u8; 8];
    w[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h ^= u64::from_le_bytes(w);
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// A filter being filled by a scan of the column.
struct Build {
    bits: Arc<Bits>,
    /// `None`: the scan ran on the calling thread and is done.
    scan: Option<JoinHandle<Result<(), String>>>,
}

#[derive(Default)]
struct Filters {
    /// Answers lookups once its scan is done.
    serving: Option<Arc<Bits>>,
    /// Being filled (the first filter, or a larger one replacing `serving`).
    building: Option<Build>,
    /// A scan failed: the filter answers nothing from then on (RocksDB answers every check).
    failed: bool,
}

/// The filter of one store's `dedup` column (see the module docs).
pub(crate) struct IdFilter {
    filters: Mutex<Filters>,
    cancel: Arc<AtomicBool>,
    /// `cf` is the `dedup` column family's name in `db`.
    db: Arc<DB>,
    cf: &'static str,
}

impl IdFilter {
    /// A filter over `cf` of `db` that answers nothing until its first scan is done; the scan
    /// starts now (on this thread when the column holds few ids).
    pub(crate) fn start(db: Arc<DB>, cf: &'static str) -> Self {
        let f = Self {
            filters: Mutex::new(Filters::default()),
            cancel: Arc::new(AtomicBool::new(false)),
            db,
            cf,
        };
        if let Ok(mut filters) = f.filters.lock() {
            f.rebuild(&mut filters);
        }
        f
    }

    /// Starts a scan into a new filter sized for what the column holds now; the caller holds
    /// the lock, so no apply runs between the filter taking inserts and the scan starting.
    fn rebuild(&self, filters: &mut Filters) {
        let estimate = self.estimate();
        // Sized for what the column holds now, not for what was ever inserted: a rebuild is
        // also how expired ids leave the filter.
        let bits = Arc::new(Bits::sized_for(
            estimate.min(MAX_BYTES * 8 / BITS_PER_ID) * 2,
        ));
        if estimate <= INLINE_SCAN_IDS {
            match scan(&self.db, self.cf, &bits, &self.cancel) {
                Ok(()) => {
                    filters.serving = Some(bits);
                    filters.building = None;
                }
                Err(e) => self.fail(filters, &e),
            }
            return;
        }
        let (db, cf, into, cancel) = (self.db.clone(), self.cf, bits.clone(), self.cancel.clone());
        let spawned = std::thread::Builder::new()
            .name("dedup-filter".into())
            .spawn(move || scan(&db, cf, &into, &cancel));
        match spawned {
            Ok(handle) => {
                filters.building = Some(Build {
                    bits,
                    scan: Some(handle),
                })
            }
            Err(e) => {
                tracing::warn!(error = %e, "no thread for the dedup filter's scan: every dedup check reads RocksDB");
                filters.failed = true;
            }
        }
    }

    /// RocksDB's estimate of the ids in the column (memtables included); unknown: the most.
    fn estimate(&self) -> u64 {
        self.db
            .cf_handle(self.cf)
            .and_then(|cf| {
                self.db
                    .property_int_value_cf(cf, "rocksdb.estimate-num-keys")
                    .ok()
                    .flatten()
            })
            .unwrap_or(u64::MAX)
    }

    /// Whether the serving filter took more ids than it is sized for and a rebuild would
    /// help: below the largest size it grows; at it, only if expiry left the column at most
    /// half of that size (a rebuild then drops the expired ids; otherwise it would cost a scan
    /// of the whole column for nothing).
    fn needs_rebuild(&self, s: &Bits) -> bool {
        s.inserted.load(Ordering::Relaxed) > s.capacity
            && (s.bytes() < MAX_BYTES || self.estimate() <= s.capacity / 2)
    }

    fn fail(&self, filters: &mut Filters, e: &dyn std::fmt::Display) {
        tracing::warn!(error = %e, cf = self.cf, "the dedup filter's scan failed: every dedup check reads RocksDB from now on (slower, same results)");
        filters.serving = None;
        filters.building = None;
        filters.failed = true;
    }

    /// Takes a finished scan's filter into service.
    fn settle(&self, filters: &mut Filters) {
        let done = filters
            .building
            .as_ref()
            .is_some_and(|b| b.scan.as_ref().is_none_or(JoinHandle::is_finished));
        if !done {
            return;
        }
        let Some(build) = filters.building.take() else {
            return;
        };
        let outcome = match build.scan {
            None => Ok(()),
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err("the dedup filter's scan panicked".into())),
        };
        match outcome {
            Ok(()) => filters.serving = Some(build.bits),
            Err(e) => self.fail(filters, &e),
        }
    }

    /// `Some(false)`: `id` is certainly not in the column. `Some(true)`: it may be. `None`:
    /// the filter cannot tell yet (its scan is running) or at all (a scan failed).
    pub(crate) fn may_contain(&self, id: &[u8]) -> Option<bool> {
        let mut filters = self.filters.lock().ok()?;
        if filters.building.is_some() {
            self.settle(&mut filters);
        }
        filters.serving.as_ref().map(|b| b.may_contain(id))
    }

    /// Records ids about to be written to the column (before the write, so no check can miss
    /// them). A filter past its size first starts its larger successor, which then takes these
    /// ids too: its scan reads the column as it is before this write.
    pub(crate) fn insert<'a>(&self, ids: impl Iterator<Item = &'a [u8]>) {
        let Ok(mut filters) = self.filters.lock() else {
            return;
        };
        if filters.failed {
            return;
        }
        let full = filters.building.is_none()
            && filters
                .serving
                .as_ref()
                .is_some_and(|s| self.needs_rebuild(s));
        if full {
            self.rebuild(&mut filters);
        }
        for id in ids {
            if let Some(s) = &filters.serving {
                s.insert(id);
            }
            if let Some(b) = &filters.building {
                b.bits.insert(id);
            }
        }
    }

    /// Bytes the filters take (for tests and the memory notes).
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> u64 {
        self.filters.lock().map_or(0, |f| {
            f.serving.as_ref().map_or(0, |s| s.bytes())
                + f.building.as_ref().map_or(0, |b| b.bits.bytes())
        })
    }
}

impl Drop for IdFilter {
    /// Stops a running scan and waits for it: it holds the database open, and the store may be
    /// reopened right after.
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Ok(mut filters) = self.filters.lock() {
            if let Some(h) = filters.building.take().and_then(|b| b.scan) {
                let _ = h.join();
            }
        }
    }
}

/// Inserts every key of `cf` into `bits`; stops early (as a failure) when `cancel` is set.
fn scan(db: &DB, cf: &str, bits: &Bits, cancel: &AtomicBool) -> Result<(), String> {
    let handle = db
        .cf_handle(cf)
        .ok_or_else(|| format!("column family {cf} missing"))?;
    for (n, item) in db.iterator_cf(handle, IteratorMode::Start).enumerate() {
        let (k, _) = item.map_err(|e| e.to_string())?;
        bits.insert(&k);
        if n % 4096 == 4095 && cancel.load(Ordering::Relaxed) {
            return Err("cancelled".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(std::path::PathBuf);
    impl Dir {
        fn new() -> Self {
            Self(std::env::temp_dir().join(format!("eosflow-ids-{}", uuid::Uuid::new_v4())))
        }
        fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn db(dir: &std::path::Path) -> Arc<DB> {
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        Arc::new(DB::open_cf(&o, dir, ["dedup"]).expect("open"))
    }

    fn put(db: &DB, ids: impl Iterator<Item = Vec<u8>>) {
        let cf = db.cf_handle("dedup").expect("cf");
        for id in ids {
            db.put_cf(cf, &id, b"v").expect("put");
        }
    }

    fn id(n: u64) -> Vec<u8> {
        format!("{n:08x}-0000-4000-8000-{n:012x}").into_bytes()
    }

    /// How many ids of `range` (none of them written) the filter answers "maybe" for.
    fn maybes(f: &IdFilter, range: std::ops::Range<u64>) -> usize {
        range
            .filter(|&n| f.may_contain(&id(n)) == Some(true))
            .count()
    }

    /// Waits (at most 30 s) until the filter answers.
    fn answering(f: &IdFilter) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while f.may_contain(b"probe").is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the scan never finished"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn never_says_absent_for_an_id_the_column_holds_or_an_apply_inserted() {
        let dir = Dir::new();
        let db = db(dir.path());
        // More than the inline limit: the first scan runs on a thread.
        put(&db, (0..50_000).map(id));
        let f = IdFilter::start(db.clone(), "dedup");
        // Ids inserted while the scan may still run.
        let late: Vec<Vec<u8>> = (1_000_000..1_010_000).map(id).collect();
        f.insert(late.iter().map(Vec::as_slice));
        answering(&f);
        for n in (0..50_000).chain(1_000_000..1_010_000) {
            assert_eq!(f.may_contain(&id(n)), Some(true), "id {n}");
        }
        // Absent ids are mostly told absent.
        let maybe = maybes(&f, 2_000_000..2_100_000);
        assert!(
            maybe < 3_000,
            "{maybe} of 100 000 absent ids answered maybe"
        );
    }

    #[test]
    fn a_full_filter_is_replaced_by_a_larger_one_without_losing_an_id() {
        let dir = Dir::new();
        let db = db(dir.path());
        let f = IdFilter::start(db.clone(), "dedup");
        assert_eq!(
            f.may_contain(b"x"),
            Some(false),
            "an empty column scans at once"
        );
        let small = f.bytes();
        // Written in batches, as commits do: each insert before its write.
        for batch in 0..40u64 {
            let ids: Vec<Vec<u8>> = (batch * 5_000..(batch + 1) * 5_000).map(id).collect();
            f.insert(ids.iter().map(Vec::as_slice));
            put(&db, ids.into_iter());
            for n in (0..(batch + 1) * 5_000).step_by(97) {
                assert_ne!(
                    f.may_contain(&id(n)),
                    Some(false),
                    "id {n} after batch {batch}"
                );
            }
        }
        answering(&f);
        assert!(f.bytes() > small, "it grew: {} > {small}", f.bytes());
        let maybe = maybes(&f, 5_000_000..5_100_000);
        assert!(
            maybe < 5_000,
            "{maybe} of 100 000 absent ids answered maybe"
        );
    }

    #[test]
    fn dropping_it_stops_its_scan_so_the_store_can_reopen() {
        let dir = Dir::new();
        let db = db(dir.path());
        put(&db, (0..200_000).map(id));
        let f = IdFilter::start(db.clone(), "dedup");
        drop(f);
        drop(db);
        // The lock file is free again: nothing holds the database.
        let _again = self::db(dir.path());
    }
}
