//! The runtime side of global tables (see [`crate::topology::globals`]): each table's local
//! RocksDB store, its bootstrap (the topic read to its end before the instance joins its
//! group) and the thread that keeps it current afterwards.
//!
//! The store lives in `<state.dir>/global/<table>`: rows in the default column family, the
//! next offset to read of each partition in `offsets`, both written in one RocksDB write batch,
//! so the checkpoint never claims a row that is not in the store (and a row written past the
//! checkpoint is only written again, in order: upserts of the same records end in the same
//! state). Kafka Streams keeps an offset file beside its global store instead; one write batch
//! gives the same resume point without a second file to keep consistent.
//!
//! Freshness: each write also records when the checkpoint was written. A store resumed later
//! than the topic's `delete.retention.ms` (less a tenth, the stores' rule:
//! [`crate::state::changelog::stale_checkpoint`]) may miss tombstones the cleaner has removed
//! meanwhile, so it is rebuilt from the topic instead. A write that fails leaves the rows and
//! the checkpoint pending: the thread stops reading and retries the same write with backoff,
//! so the checkpoint never moves past a row that is not in the store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};
use rocksdb::{ColumnFamilyDescriptor, Options, WriteBatch, DB};

use super::RuntimeError;
use crate::kafka::reader::{self, ReadError};
use crate::kafka::{ClientRole, KafkaClients};
use crate::telemetry;
use crate::topology::globals::GlobalReader;
use crate::topology::GlobalTable;

/// Column family of the per-partition next offsets (and the topic the store was built from).
const OFFSETS: &str = "offsets";
/// Key (in [`OFFSETS`]) of the topic name the store holds.
const TOPIC_KEY: &[u8] = b"topic";
/// Key (in [`OFFSETS`]) of when the checkpoint was last written (ms since the epoch).
const AT_KEY: &[u8] = b"at";
/// The longest wait between two attempts at a store write that keeps failing.
const WRITE_RETRY_MAX: Duration = Duration::from_secs(5);
/// Rows written per RocksDB write batch while bootstrapping or tailing.
const WRITE_EVERY: usize = 5_000;
/// How often the lag gauge is refreshed.
const LAG_EVERY: Duration = Duration::from_secs(1);

fn global_error(table: &GlobalTable, message: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::GlobalTable {
        table: table.name().to_string(),
        topic: table.topic().to_string(),
        message: message.to_string(),
    }
}

/// A global table's local store: rows and the checkpoint, shared by the processing loop
/// (reads) and the table's thread (writes). RocksDB serves both at once.
pub(crate) struct GlobalStore {
    db: DB,
    path: PathBuf,
}

impl GlobalReader for GlobalStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        self.db
            .get(key)
            .map_err(|e| format!("rocksdb at {}: {e}", self.path.display()))
    }
}

impl GlobalStore {
    /// Opens the store at `path` for `topic`; a store built from another topic (or that cannot
    /// be opened) is deleted and started empty: the topic alone rebuilds it.
    fn open(path: &Path, topic: &str) -> Result<Self, String> {
        match Self::open_raw(path) {
            Ok(store) => match store.topic()? {
                Some(t) if t == topic => return Ok(store),
                None if store.offsets()?.is_empty() => {
                    store.set_topic(topic)?;
                    return Ok(store);
                }
                other => {
                    tracing::warn!(path = %path.display(), built_from = ?other, topic, "global table store holds another topic; rebuilding it");
                }
            },
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "global table store cannot be opened; rebuilding it");
            }
        }
        Self::wipe(path)?;
        let store = Self::open_raw(path)?;
        store.set_topic(topic)?;
        Ok(store)
    }

    fn open_raw(path: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let cfs = [ColumnFamilyDescriptor::new(OFFSETS, Options::default())];
        let db = DB::open_cf_descriptors(&opts, path, cfs)
            .map_err(|e| format!("rocksdb at {}: {e}", path.display()))?;
        Ok(Self {
            db,
            path: path.to_path_buf(),
        })
    }

    fn wipe(path: &Path) -> Result<(), String> {
        match std::fs::remove_dir_all(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    fn rocks(&self, e: rocksdb::Error) -> String {
        format!("rocksdb at {}: {e}", self.path.display())
    }

    fn offsets_cf(&self) -> Result<&rocksdb::ColumnFamily, String> {
        self.db
            .cf_handle(OFFSETS)
            .ok_or_else(|| format!("{}: no {OFFSETS} column family", self.path.display()))
    }

    fn topic(&self) -> Result<Option<String>, String> {
        let cf = self.offsets_cf()?;
        let t = self.db.get_cf(cf, TOPIC_KEY).map_err(|e| self.rocks(e))?;
        Ok(t.map(|t| String::from_utf8_lossy(&t).into_owned()))
    }

    fn set_topic(&self, topic: &str) -> Result<(), String> {
        let cf = self.offsets_cf()?;
        self.db
            .put_cf(cf, TOPIC_KEY, topic.as_bytes())
            .map_err(|e| self.rocks(e))
    }

    /// When the checkpoint was last written (`None`: never, or by a version that did not
    /// record it).
    fn checkpoint_at(&self) -> Result<Option<i64>, String> {
        let cf = self.offsets_cf()?;
        let at = self.db.get_cf(cf, AT_KEY).map_err(|e| self.rocks(e))?;
        Ok(at
            .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
            .map(i64::from_be_bytes))
    }

    /// Why this store cannot be resumed from its checkpoint at `now` under the topic's
    /// `retention_ms` (`delete.retention.ms`), if it cannot: the stores' rule.
    fn stale(&self, topic: &str, now: i64, retention_ms: i64) -> Result<Option<String>, String> {
        if self.offsets()?.is_empty() {
            return Ok(None);
        }
        let Some(at) = self.checkpoint_at()? else {
            return Ok(Some(
                "its checkpoint has no recorded time (written by an older version)".into(),
            ));
        };
        let at = crate::state::CheckpointAt::Recorded(at);
        Ok(
            crate::state::changelog::stale_checkpoint(topic, 0, at, now, retention_ms).map(|_| {
                format!(
                    "its checkpoint is {} ms old, past the topic's delete.retention.ms of {retention_ms} ms less a tenth: tombstones written meanwhile may have been compacted away",
                    now - at.millis()
                )
            }),
        )
    }

    /// The checkpoint: next offset to read per partition.
    fn offsets(&self) -> Result<BTreeMap<i32, i64>, String> {
        let cf = self.offsets_cf()?;
        let mut out = BTreeMap::new();
        for item in self.db.iterator_cf(cf, rocksdb::IteratorMode::Start) {
            let (k, v) = item.map_err(|e| self.rocks(e))?;
            if let (Ok(p), Ok(o)) = (<[u8; 4]>::try_from(&*k), <[u8; 8]>::try_from(&*v)) {
                out.insert(i32::from_be_bytes(p), i64::from_be_bytes(o));
            }
        }
        Ok(out)
    }
}

/// Rows read and not yet written, with the offsets they take the checkpoint to.
struct Pending<'s> {
    store: &'s GlobalStore,
    batch: WriteBatch,
    rows: usize,
    next: BTreeMap<i32, i64>,
}

impl<'s> Pending<'s> {
    fn new(store: &'s GlobalStore) -> Self {
        Self {
            store,
            batch: WriteBatch::default(),
            rows: 0,
            next: BTreeMap::new(),
        }
    }

    /// Applies one record of the topic: an upsert, a delete, or a skip (logged and counted).
    fn add(&mut self, table: &GlobalTable, m: &BorrowedMessage<'_>) {
        self.next.insert(m.partition(), m.offset() + 1);
        self.rows += 1;
        let Some(key) = m.key() else {
            tracing::error!(
                table = table.name(),
                topic = m.topic(),
                partition = m.partition(),
                offset = m.offset(),
                "global table record without a key skipped"
            );
            telemetry::global_table_skipped(table.name(), "no-key");
            return;
        };
        if let Err(e) = table.check(key, m.payload()) {
            tracing::error!(table = table.name(), topic = m.topic(), partition = m.partition(), offset = m.offset(), error = %e, "global table record that cannot be decoded skipped");
            telemetry::global_table_skipped(table.name(), "undecodable");
            return;
        }
        match m.payload() {
            Some(v) => self.batch.put(key, v),
            None => self.batch.delete(key),
        }
    }

    /// Moves partition `p`'s checkpoint to `next` (past control records the reads skipped).
    fn reached(&mut self, p: i32, next: i64) {
        let slot = self.next.entry(p).or_insert(next);
        *slot = (*slot).max(next);
    }

    /// Writes the rows and the checkpoint (with its time) in one batch. On failure nothing is
    /// dropped: the rows and offsets stay pending for the next attempt, so a later write can
    /// never carry the checkpoint past them.
    fn write(&mut self) -> Result<(), String> {
        if self.next.is_empty() {
            return Ok(());
        }
        let cf = self.store.offsets_cf()?;
        let mut batch = WriteBatch::from_data(self.batch.data());
        for (p, o) in &self.next {
            batch.put_cf(cf, p.to_be_bytes(), o.to_be_bytes());
        }
        batch.put_cf(cf, AT_KEY, crate::clock::now_ms().to_be_bytes());
        #[cfg(test)]
        if tests::fail_write() {
            return Err(format!(
                "{}: injected write failure",
                self.store.path.display()
            ));
        }
        self.store
            .db
            .write(batch)
            .map_err(|e| self.store.rocks(e))?;
        self.batch.clear();
        self.next.clear();
        self.rows = 0;
        Ok(())
    }
}

/// The global tables of a runtime once bootstrapped: their stores, bound to the topology, and
/// the threads keeping them current. Dropping it stops the threads.
pub(crate) struct Globals {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Each table's store, by table name: the instance's other processing threads read the
    /// same one.
    stores: Vec<(String, Arc<GlobalStore>)>,
}

impl Globals {
    /// Binds `tables` (a processing thread's handles of the same tables) to the stores
    /// this instance already keeps current.
    pub(crate) fn bind(&self, tables: &[GlobalTable]) -> Result<(), RuntimeError> {
        for table in tables {
            let Some((_, store)) = self.stores.iter().find(|(n, _)| n == table.name()) else {
                return Err(global_error(
                    table,
                    "this processing thread's processor lists a global table the first thread's does not: build every thread's processor the same way".to_string(),
                ));
            };
            table
                .bind(store.clone())
                .map_err(|e| global_error(table, e))?;
        }
        Ok(())
    }
}

impl Drop for Globals {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Refuses to start when a global table's topic does not exist, naming the table and topic.
pub(crate) fn check_topics(
    clients: &KafkaClients,
    tables: &[GlobalTable],
    timeout: Duration,
) -> Result<(), RuntimeError> {
    for t in tables {
        let deadline = Instant::now() + timeout;
        loop {
            let n = reader::partition_count(clients, t.topic(), Duration::from_secs(10))
                .map_err(|e| global_error(t, e))?;
            if n > 0 {
                break;
            }
            if Instant::now() >= deadline {
                return Err(global_error(
                    t,
                    format!(
                        "the topic does not exist on {}: create it (every partition is read by every instance)",
                        clients.bootstrap()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    Ok(())
}

/// Reads every global table's topic to its end into its store (from the store's checkpoint),
/// binds the stores to the topology, and starts one thread per table keeping it current.
pub(crate) fn bootstrap(
    clients: &KafkaClients,
    state_dir: &Path,
    tables: &[GlobalTable],
    timeout: Duration,
) -> Result<Globals, RuntimeError> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut globals = Globals {
        stop: stop.clone(),
        threads: Vec::new(),
        stores: Vec::new(),
    };
    for table in tables {
        let started = Instant::now();
        let path = state_dir.join("global").join(table.name());
        let store = GlobalStore::open(&path, table.topic()).map_err(|e| global_error(table, e))?;
        let store = Arc::new(fresh(clients, store, &path, table)?);
        let (next, records) = match read_to_end(clients, &store, table, timeout) {
            Err(ReadError::BeyondEnd { .. }) => {
                // The topic was recreated: its offsets mean something else now.
                tracing::warn!(table = table.name(), topic = table.topic(), "global table checkpoint is beyond its topic's end (topic recreated?); rebuilding the store");
                drop(store);
                GlobalStore::wipe(&path).map_err(|e| global_error(table, e))?;
                let fresh = GlobalStore::open(&path, table.topic());
                let fresh = Arc::new(fresh.map_err(|e| global_error(table, e))?);
                let read = read_to_end(clients, &fresh, table, timeout);
                (read.map_err(|e| global_error(table, e))?, fresh)
            }
            read => (read.map_err(|e| global_error(table, e))?, store),
        };
        telemetry::global_table_bootstrapped(table.name(), next.1, started.elapsed());
        telemetry::global_table_lag(table.name(), 0);
        tracing::info!(
            table = table.name(),
            topic = table.topic(),
            records = next.1,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "global table bootstrapped"
        );
        table
            .bind(records.clone())
            .map_err(|e| global_error(table, e))?;
        globals
            .stores
            .push((table.name().to_string(), records.clone()));
        let (t, stop) = (table.clone(), stop.clone());
        let (clients, offsets) = (clients.clone(), next.0);
        let thread = std::thread::Builder::new()
            .name(format!("eos-global-{}", table.name()))
            .spawn(move || tail(&clients, &records, &t, offsets, &stop))
            .map_err(|e| global_error(table, format!("spawning its thread: {e}")))?;
        globals.threads.push(thread);
    }
    Ok(globals)
}

/// `store` if its checkpoint is fresh enough to resume from, else (logged) a new empty store at
/// `path` that bootstrap rebuilds from the topic: the stores' freshness rule.
fn fresh(
    clients: &KafkaClients,
    store: GlobalStore,
    path: &Path,
    table: &GlobalTable,
) -> Result<GlobalStore, RuntimeError> {
    let topic = table.topic();
    let retention_ms = crate::state::changelog::delete_retention_ms(clients, topic)
        .unwrap_or_else(|e| {
            let default_ms = crate::state::changelog::DEFAULT_DELETE_RETENTION_MS;
            tracing::warn!(table = table.name(), topic, error = %e, default_ms, "delete.retention.ms of the global table's topic unknown; assuming Kafka's default");
            default_ms
        });
    let now = crate::clock::now_ms();
    let Some(why) = store
        .stale(topic, now, retention_ms)
        .map_err(|e| global_error(table, e))?
    else {
        return Ok(store);
    };
    tracing::warn!(table = table.name(), topic, reason = %why, "global table store is stale; rebuilding it from the topic");
    drop(store);
    GlobalStore::wipe(path).map_err(|e| global_error(table, e))?;
    GlobalStore::open(path, topic).map_err(|e| global_error(table, e))
}

/// Reads `table`'s topic from the store's checkpoint to its end into the store; the next
/// offset of every partition and the number of records read.
fn read_to_end(
    clients: &KafkaClients,
    store: &GlobalStore,
    table: &GlobalTable,
    timeout: Duration,
) -> Result<(BTreeMap<i32, i64>, u64), ReadError> {
    let topic = table.topic();
    let checkpoint = store.offsets().map_err(ReadError::Callback)?;
    let partitions = reader::partition_count(clients, topic, Duration::from_secs(30))?;
    let mut starts = BTreeMap::new();
    let mut behind: i64 = 0;
    for p in 0..partitions {
        let start = checkpoint.get(&p).copied();
        let (low, high) = reader::watermarks(clients, topic, p, timeout)?;
        behind += (high - start.unwrap_or(low).max(low)).max(0);
        starts.insert(p, start);
    }
    telemetry::global_table_lag(table.name(), behind);
    let mut pending = Pending::new(store);
    let mut read: u64 = 0;
    let mut last_lag = Instant::now();
    let next = reader::read_to_end(clients, topic, &starts, timeout, |m| {
        pending.add(table, m);
        read += 1;
        if pending.rows >= WRITE_EVERY {
            pending.write()?;
        }
        if last_lag.elapsed() >= LAG_EVERY {
            telemetry::global_table_lag(table.name(), (behind - read as i64).max(0));
            last_lag = Instant::now();
        }
        Ok(())
    })?;
    for (p, o) in &next {
        pending.reached(*p, *o);
    }
    pending.write().map_err(ReadError::Callback)?;
    Ok((next, read))
}

/// Keeps `table`'s store current from `offsets` on until `stop`: a read_committed consumer
/// without a group assigned every partition. Errors are logged and waited out: the table goes
/// stale (its lag gauge shows it) but the instance keeps processing.
fn tail(
    clients: &KafkaClients,
    store: &GlobalStore,
    table: &GlobalTable,
    offsets: BTreeMap<i32, i64>,
    stop: &AtomicBool,
) {
    let topic = table.topic();
    let consumer = match assign(clients, topic, &offsets) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(table = table.name(), topic, error = %e, "global table cannot be kept current: its consumer failed to start");
            return;
        }
    };
    let mut pending = Pending::new(store);
    let mut last_write = Instant::now();
    let mut last_lag: Option<Instant> = None;
    let mut last_warn: Option<Instant> = None;
    // After a failed write: the wait before the next attempt. Nothing more is read meanwhile.
    let mut retry_in: Option<Duration> = None;
    while !stop.load(Ordering::Relaxed) {
        if let Some(wait) = retry_in {
            std::thread::sleep(wait);
            retry_in = match pending.write() {
                Ok(()) => {
                    tracing::info!(table = table.name(), "global table store written again");
                    None
                }
                Err(e) => {
                    tracing::error!(table = table.name(), error = %e, rows = pending.rows, "writing the global table's store failed again; the table is stale until it succeeds");
                    Some((wait * 2).min(WRITE_RETRY_MAX))
                }
            };
            last_write = Instant::now();
            continue;
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => pending.add(table, &m),
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => {
                if last_warn.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!(table = table.name(), topic, error = %e, "reading the global table's topic; retrying");
                    last_warn = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if pending.rows >= WRITE_EVERY
            || (pending.rows > 0 && last_write.elapsed() >= Duration::from_millis(50))
        {
            if let Err(e) = pending.write() {
                tracing::error!(table = table.name(), error = %e, rows = pending.rows, "writing the global table's store failed; reading stops until the write is retried and succeeds");
                retry_in = Some(Duration::from_millis(100));
            }
            last_write = Instant::now();
        }
        if last_lag.is_none_or(|at| at.elapsed() >= LAG_EVERY) {
            let mut lag = 0;
            if let Ok(pos) = consumer.position() {
                for e in pos.elements_for_topic(topic) {
                    if let (Offset::Offset(o), Ok((_, high))) = (
                        e.offset(),
                        consumer.fetch_watermarks(topic, e.partition(), Duration::from_secs(2)),
                    ) {
                        lag += (high - o).max(0);
                        // Past control records too: a restart resumes after them.
                        if pending.rows == 0 {
                            pending.reached(e.partition(), o);
                        }
                    }
                }
            }
            if pending.rows == 0 && retry_in.is_none() {
                if let Err(e) = pending.write() {
                    tracing::error!(table = table.name(), error = %e, "writing the global table's checkpoint failed; retrying");
                    retry_in = Some(Duration::from_millis(100));
                }
            }
            telemetry::global_table_lag(table.name(), lag);
            last_lag = Some(Instant::now());
        }
    }
    if let Err(e) = pending.write() {
        tracing::error!(table = table.name(), error = %e, "writing the global table's store");
    }
}

/// A read_committed consumer without a group, assigned every partition of `topic` at
/// `offsets`.
fn assign(
    clients: &KafkaClients,
    topic: &str,
    offsets: &BTreeMap<i32, i64>,
) -> Result<BaseConsumer, KafkaError> {
    let consumer: BaseConsumer = clients
        .config(ClientRole::Reader)
        .set("enable.partition.eof", "false")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for (p, o) in offsets {
        tpl.add_partition_offset(topic, *p, Offset::Offset(*o))?;
    }
    consumer.assign(&tpl)?;
    Ok(consumer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// Store writes left to fail on this thread (the fault switch of the tests below).
        static FAIL_WRITES: Cell<u32> = const { Cell::new(0) };
    }

    /// Whether this write is to fail (and one fewer is left).
    pub(super) fn fail_write() -> bool {
        FAIL_WRITES.with(|n| {
            let left = n.get();
            n.set(left.saturating_sub(1));
            left > 0
        })
    }

    /// Issue 32, item 5: a failed write dropped its rows but kept going, and the next write
    /// moved the checkpoint past them: rows lost for good. Now they stay pending and the retry
    /// writes them with the checkpoint.
    #[test]
    fn a_failed_write_keeps_its_rows_pending_and_never_moves_the_checkpoint_past_them() {
        let path = dir();
        let store = GlobalStore::open(&path, "countries").expect("open");
        let mut pending = Pending::new(&store);
        pending.batch.put(b"fr", b"France");
        pending.rows += 1;
        pending.reached(0, 7);
        FAIL_WRITES.with(|n| n.set(1));
        assert!(pending.write().is_err(), "the injected failure");
        assert_eq!(store.get(b"fr").expect("get"), None);
        assert!(
            store.offsets().expect("offsets").is_empty(),
            "no checkpoint moved"
        );
        pending.batch.put(b"de", b"Germany");
        pending.rows += 1;
        pending.reached(0, 8);
        pending.write().expect("the retry");
        assert_eq!(
            store.get(b"fr").expect("get"),
            Some(b"France".to_vec()),
            "not lost"
        );
        assert_eq!(store.get(b"de").expect("get"), Some(b"Germany".to_vec()));
        assert_eq!(store.offsets().expect("offsets"), BTreeMap::from([(0, 8)]));
        drop(store);
        let _ = std::fs::remove_dir_all(&path);
    }

    /// Issue 32, item 5: a global store had no freshness check. Its checkpoint's time is now
    /// recorded, and one older than the topic's `delete.retention.ms` (less a tenth) is stale.
    #[test]
    fn a_global_checkpoint_older_than_the_delete_retention_is_stale() {
        let path = dir();
        let store = GlobalStore::open(&path, "countries").expect("open");
        assert_eq!(
            store.stale("countries", 0, 1_000).expect("stale"),
            None,
            "empty"
        );
        let mut pending = Pending::new(&store);
        pending.reached(0, 3);
        pending.write().expect("write");
        let at = store.checkpoint_at().expect("at").expect("recorded");
        let retention = 60_000;
        assert_eq!(
            store
                .stale("countries", at + 50_000, retention)
                .expect("stale"),
            None
        );
        let why = store
            .stale("countries", at + 55_000, retention)
            .expect("stale");
        assert!(why.is_some_and(|w| w.contains("delete.retention.ms")));
        drop(store);
        let _ = std::fs::remove_dir_all(&path);
    }

    fn dir() -> PathBuf {
        std::env::temp_dir().join(format!("eosflow-global-{}", uuid::Uuid::new_v4()))
    }

    #[test]
    fn a_store_keeps_its_rows_and_checkpoint_and_is_rebuilt_for_another_topic() {
        let path = dir();
        {
            let store = GlobalStore::open(&path, "countries").expect("open");
            let mut pending = Pending::new(&store);
            pending.batch.put(b"fr", b"France");
            pending.reached(0, 7);
            pending.reached(3, 2);
            pending.write().expect("write");
        }
        let store = GlobalStore::open(&path, "countries").expect("reopen");
        assert_eq!(store.get(b"fr").expect("get"), Some(b"France".to_vec()));
        assert_eq!(
            store.offsets().expect("offsets"),
            BTreeMap::from([(0, 7), (3, 2)])
        );
        drop(store);
        // The same directory for another topic: the rows and offsets meant something else.
        let store = GlobalStore::open(&path, "products").expect("open for another topic");
        assert_eq!(store.get(b"fr").expect("get"), None);
        assert!(store.offsets().expect("offsets").is_empty());
        assert_eq!(store.topic().expect("topic").as_deref(), Some("products"));
        drop(store);
        let _ = std::fs::remove_dir_all(&path);
    }
}
