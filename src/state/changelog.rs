//! Restore: replay a store's changelog partition from its checkpoint to the end.
//!
//! "The end" is the high watermark with no open transaction below it (see
//! `kafka::reader`): a dead instance's open transaction, whose input offsets may
//! still commit, is waited out rather than skipped, so a store never misses writes whose
//! offsets the group will resume after.
//!
//! A store whose checkpoint is older than the changelog's `delete.retention.ms` is not replayed
//! from its checkpoint: compaction may have removed tombstones written since, and the store
//! would keep keys deleted meanwhile. [`restore`] reports it as
//! [`StateError::StaleCheckpoint`], and the store is rebuilt from the changelog alone.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::Message;

use super::store::CheckpointAt;
use super::{dedup, versioned, Column, Overlay, StateError, Store};
use crate::kafka::reader::{read_until, ReadError};
use crate::kafka::{ClientRole, KafkaClients};

/// Kafka's default `delete.retention.ms` (one day): assumed when the topic's cannot be read.
pub const DEFAULT_DELETE_RETENTION_MS: i64 = 86_400_000;
/// How long a topic's `delete.retention.ms` is reused before it is described again.
const RETENTION_CACHE_FOR: Duration = Duration::from_secs(60);

/// Reads `delete.retention.ms` of `topic` (DescribeConfigs), cached for a minute per topic.
pub fn delete_retention_ms(clients: &KafkaClients, topic: &str) -> Result<i64, String> {
    static CACHE: OnceLock<Mutex<HashMap<String, (Instant, i64)>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    if let Ok(c) = cache.lock() {
        if let Some((at, ms)) = c.get(topic) {
            if at.elapsed() < RETENTION_CACHE_FOR {
                return Ok(*ms);
            }
        }
    }
    let admin: AdminClient<DefaultClientContext> = clients
        .config(ClientRole::Admin)
        .create()
        .map_err(|e| format!("admin client: {e}"))?;
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    // The admin client answers from its own thread: any executor can wait for it.
    let described = futures::executor::block_on(
        admin.describe_configs(&[ResourceSpecifier::Topic(topic)], &opts),
    )
    .map_err(|e| format!("describe configs of {topic}: {e}"))?;
    let resource = described
        .into_iter()
        .next()
        .ok_or_else(|| format!("describe configs of {topic}: no answer"))?
        .map_err(|code| format!("describe configs of {topic}: {code:?}"))?;
    let ms = resource
        .get("delete.retention.ms")
        .and_then(|e| e.value.as_deref()?.parse::<i64>().ok())
        .ok_or_else(|| format!("{topic} has no readable delete.retention.ms"))?;
    if let Ok(mut c) = cache.lock() {
        c.insert(topic.to_string(), (Instant::now(), ms));
    }
    Ok(ms)
}

/// Whether a checkpoint reached at `at` is too old to replay from at `now` under
/// `retention_ms`: older than the retention less a tenth of it (the margin covers clock skew
/// between this host and the brokers and the cleaner's own timing).
pub fn stale_checkpoint(
    topic: &str,
    partition: i32,
    at: CheckpointAt,
    now: i64,
    retention_ms: i64,
) -> Option<StateError> {
    let margin_ms = retention_ms / 10;
    let age_ms = now - at.millis();
    (age_ms > retention_ms - margin_ms).then(|| StateError::StaleCheckpoint {
        topic: topic.to_string(),
        partition,
        checkpoint_at_ms: at.millis(),
        how: match at {
            CheckpointAt::Recorded(_) => "recorded",
            CheckpointAt::FilesModified(_) => "file-mtime",
        },
        age_ms,
        retention_ms,
        margin_ms,
    })
}

/// [`StateError::StaleCheckpoint`] if `store` has a checkpoint too old for `topic`'s
/// `delete.retention.ms` (Kafka's default one day when the topic's cannot be read).
pub(crate) fn check_fresh(
    clients: &KafkaClients,
    store: &Store,
    topic: &str,
    partition: i32,
) -> Result<(), StateError> {
    let Some(at) = store.checkpoint_at()? else {
        return Ok(());
    };
    let retention_ms = delete_retention_ms(clients, topic).unwrap_or_else(|e| {
        tracing::warn!(topic, error = %e, default_ms = DEFAULT_DELETE_RETENTION_MS, "delete.retention.ms of the changelog unknown; assuming Kafka's default");
        DEFAULT_DELETE_RETENTION_MS
    });
    let now = crate::clock::now_ms();
    match stale_checkpoint(topic, partition, at, now, retention_ms) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

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

/// How long in all a restore keeps waiting for a broker it cannot reach (a restart, a network
/// cut) before it fails: an instance that exits instead would only be restarted to wait again,
/// after a longer rebalance.
pub const BROKER_WAIT_MAX: Duration = Duration::from_secs(600);

/// Replays `topic[partition]` into `store` from its checkpoint to the end, within `timeout`
/// while the broker answers; while it cannot be reached the restore waits for it (ERROR logs,
/// `eosflow_restore_broker_waits_total`) for up to [`BROKER_WAIT_MAX`], starting again from
/// the checkpoint reached with new clients.
///
/// Fails with [`StateError::StaleCheckpoint`] (before reading anything) when the checkpoint is
/// older than the changelog's `delete.retention.ms` allows, and with
/// [`StateError::CheckpointAhead`] when it lies past the changelog's end: in both cases the
/// caller wipes the store and restores again from the changelog alone.
pub fn restore(
    clients: &KafkaClients,
    store: &Store,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Result<RestoreStats, StateError> {
    restore_known_end(clients, store, topic, partition, timeout, None)
}

/// [`restore`] given the changelog partition's high watermark, when the caller asked for it in
/// one batch with others ([`crate::kafka::reader::end_offsets`]): a store whose checkpoint is
/// that end, or a changelog that never held a record (end 0), has nothing to replay, and no
/// consumer is created for it. Anything else (an end not known) is read as [`restore`] reads.
/// The same as what [`restore`] does with such a store, which reads up to the high watermark
/// it finds, minus the consumer and its round trips.
pub fn restore_known_end(
    clients: &KafkaClients,
    store: &Store,
    topic: &str,
    partition: i32,
    timeout: Duration,
    end: Option<i64>,
) -> Result<RestoreStats, StateError> {
    let started = Instant::now();
    if let Some(end) = end {
        let checkpoint = store.checkpoint()?;
        if checkpoint == Some(end) || (checkpoint.is_none() && end == 0) {
            // Only here: the long way checks it itself (a `describe_configs` round trip each).
            check_fresh(clients, store, topic, partition)?;
            if checkpoint != Some(end) {
                flush_changelog(store, &mut Vec::new(), end)?;
            }
            return Ok(RestoreStats {
                from_offset: end,
                to_offset: end,
                records: 0,
                millis: started.elapsed().as_millis() as u64,
            });
        }
    }
    restore_waiting(
        clients,
        store,
        topic,
        partition,
        timeout,
        BROKER_WAIT_MAX,
        None,
    )
}

/// Restores a table's store from the table's own topic (which is its changelog: there is no
/// second copy), from the store's checkpoint up to `until`, the group's committed offset of
/// `topic[partition]` — not to the end: the records after it are input the runtime has yet to
/// process, in order with the stream. Records are applied as they are (key bytes → value
/// bytes; a null value deletes the key; a record without a key is skipped), and the checkpoint
/// is the table topic's offset.
///
/// A versioned table (`history` is `Some`) keeps each record as a version at its timestamp,
/// with the live path's rules (`src/state/versioned.rs`): the same records in the same order build
/// the same versions, and the history is pruned as the restore goes.
///
/// Fails like [`restore`] when the checkpoint is stale, and with
/// [`StateError::CheckpointAhead`] when it lies past `until` (the group's offsets were reset
/// or expired): the caller wipes the store and restores it again from the topic alone.
pub fn restore_table(
    clients: &KafkaClients,
    store: &Store,
    topic: &str,
    partition: i32,
    until: i64,
    history: Option<Duration>,
    timeout: Duration,
) -> Result<RestoreStats, StateError> {
    restore_waiting(
        clients,
        store,
        topic,
        partition,
        timeout,
        BROKER_WAIT_MAX,
        Some(Table {
            until,
            history_ms: history.map(history_ms),
        }),
    )
}

/// A versioned table's history in milliseconds (saturating).
pub(crate) fn history_ms(history: Duration) -> i64 {
    i64::try_from(history.as_millis()).unwrap_or(i64::MAX)
}

/// A table's restore: up to the group's committed offset, versioned or not.
#[derive(Clone, Copy)]
struct Table {
    until: i64,
    history_ms: Option<i64>,
}

/// One attempt at a restore did not finish.
enum Attempt {
    /// It failed for good.
    Failed(StateError),
    /// The broker could not be reached: a later attempt may finish.
    Unreachable(ReadError),
}

impl From<StateError> for Attempt {
    fn from(e: StateError) -> Self {
        Attempt::Failed(e)
    }
}

/// [`restore`], waiting at most `broker_wait` in all for an unreachable broker.
fn restore_waiting(
    clients: &KafkaClients,
    store: &Store,
    topic: &str,
    partition: i32,
    timeout: Duration,
    broker_wait: Duration,
    table: Option<Table>,
) -> Result<RestoreStats, StateError> {
    let started = Instant::now();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let e = match restore_once(clients, store, topic, partition, timeout, started, table) {
            Ok(stats) => return Ok(stats),
            Err(Attempt::Failed(e)) => return Err(e),
            Err(Attempt::Unreachable(e)) => e,
        };
        let waited = started.elapsed();
        if waited >= broker_wait {
            return Err(StateError::Changelog {
                topic: topic.to_string(),
                partition,
                message: format!(
                    "{e}; the broker stayed unreachable through {attempts} attempt(s) over {} s",
                    waited.as_secs()
                ),
            });
        }
        tracing::error!(
            topic,
            partition,
            attempts,
            waited_s = waited.as_secs(),
            max_wait_s = broker_wait.as_secs(),
            error = %e,
            "restore cannot reach the broker: waiting for it, then restoring again from the checkpoint with new clients"
        );
        crate::telemetry::restore_waiting_for_broker(partition);
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// One attempt: from the store's checkpoint to the end (a table: to `until`, its records
/// applied as they are), within `timeout`.
fn restore_once(
    clients: &KafkaClients,
    store: &Store,
    topic: &str,
    partition: i32,
    timeout: Duration,
    started: Instant,
    table: Option<Table>,
) -> Result<RestoreStats, Attempt> {
    check_fresh(clients, store, topic, partition)?;
    let checkpoint = store.checkpoint()?;
    let until = table.map(|t| t.until);
    if let (Some(c), Some(u)) = (checkpoint, until) {
        if c > u {
            return Err(Attempt::Failed(StateError::CheckpointAhead {
                topic: topic.to_string(),
                partition,
                checkpoint: c,
                end: u,
            }));
        }
    }
    let versioned = table.and_then(|t| t.history_ms);
    let flush = |store: &Store, pending: &mut Vec<Pending>, next: i64| match (table, versioned) {
        (_, Some(history_ms)) => flush_versioned(store, pending, next, history_ms),
        (Some(_), None) => flush_table(store, pending, next),
        (None, _) => flush_changelog(store, pending, next),
    };
    let mut pending: Vec<Pending> = Vec::with_capacity(APPLY_EVERY);
    let mut records = 0u64;
    let mut first: Option<i64> = None;
    let mut apply_error: Option<StateError> = None;
    let starts = BTreeMap::from([(partition, checkpoint)]);
    let bound: BTreeMap<i32, i64> = until.map(|u| (partition, u)).into_iter().collect();
    let result = read_until(clients, topic, &starts, &bound, timeout, |m| {
        first.get_or_insert(m.offset());
        if let Some(k) = m.key() {
            pending.push((
                k.to_vec(),
                m.payload().map(<[u8]>::to_vec),
                m.timestamp().to_millis(),
            ));
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
        return Err(e.into());
    }
    let ends = result.map_err(|e| match e {
        e @ ReadError::Unreachable { .. } => Attempt::Unreachable(e),
        ReadError::Timeout {
            topic,
            partition,
            position,
            end,
            seconds,
        } => Attempt::Failed(StateError::RestoreTimeout {
            topic,
            partition,
            target: end,
            position,
            seconds,
        }),
        ReadError::BeyondEnd { start, end, .. } => Attempt::Failed(StateError::CheckpointAhead {
            topic: topic.to_string(),
            partition,
            checkpoint: start,
            end,
        }),
        other => Attempt::Failed(StateError::Changelog {
            topic: topic.to_string(),
            partition,
            message: other.to_string(),
        }),
    })?;
    let to = until.unwrap_or_else(|| ends.get(&partition).copied().unwrap_or_default());
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

/// Applies `pending` changelog records (key, value) to `store` with the checkpoint `next`, in
/// one write batch: restore's path, also taken by standby replicas. Returns the records applied.
pub(crate) fn flush(
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

/// A record read for a restore: key, value (`None`: a tombstone), timestamp.
type Pending = (Vec<u8>, Option<Vec<u8>>, Option<i64>);

/// [`flush`] for records read with their timestamps.
fn flush_changelog(
    store: &Store,
    pending: &mut Vec<Pending>,
    next: i64,
) -> Result<usize, StateError> {
    let mut plain: Vec<_> = pending.drain(..).map(|(k, v, _)| (k, v)).collect();
    flush(store, &mut plain, next)
}

/// Applies a table's records (raw key → value, a null value deleting the key) with the table
/// topic's offset `next` as the checkpoint.
fn flush_table(store: &Store, pending: &mut Vec<Pending>, next: i64) -> Result<usize, StateError> {
    let mut overlay = Overlay::default();
    for (k, v, _) in pending.iter() {
        match v {
            Some(v) => overlay.put(Column::State, k, v.clone()),
            None => overlay.delete(Column::State, k),
        }
    }
    store.apply(&overlay, Some(next))?;
    let n = pending.len();
    pending.clear();
    Ok(n)
}

/// Applies a versioned table's records as versions at their timestamps (the live path's
/// [`versioned::put`] and [`versioned::prune`], in the same order), with the table topic's
/// offset `next` as the checkpoint. A record without a timestamp, or older than the history
/// cutoff, is skipped as the live path skipped it.
fn flush_versioned(
    store: &Store,
    pending: &mut Vec<Pending>,
    next: i64,
    history_ms: i64,
) -> Result<usize, StateError> {
    let mut overlay = Overlay::default();
    let mut n = 0;
    for (k, v, ts) in pending.iter() {
        let Some(ts) = *ts else { continue };
        let applied = versioned::put(&mut overlay, &[], store, k, ts, v.as_deref(), history_ms)?;
        if !matches!(applied, versioned::Applied::TooOld { .. }) {
            n += 1;
        }
        versioned::prune(
            &mut overlay,
            &[],
            store,
            history_ms,
            versioned::PRUNE_PER_RECORD,
        )?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StoreCache;

    #[test]
    fn a_checkpoint_older_than_the_delete_retention_less_a_tenth_is_stale() {
        let day = DEFAULT_DELETE_RETENTION_MS;
        let at = CheckpointAt::Recorded(1_000);
        assert!(stale_checkpoint("cl", 0, at, 1_000 + day * 9 / 10, day).is_none());
        let e = stale_checkpoint("cl", 3, at, 1_001 + day * 9 / 10, day).expect("stale");
        let text = e.to_string();
        assert!(
            text.contains("cl[3]")
                && text.contains("1000 ms (recorded)")
                && text.contains("86400000"),
            "{text}"
        );
        let old = CheckpointAt::FilesModified(0);
        assert!(stale_checkpoint("cl", 0, old, day, day)
            .is_some_and(|e| e.to_string().contains("file-mtime")));
    }

    #[test]
    fn a_restore_waits_for_an_unreachable_broker_in_attempts_then_says_so() {
        // Nothing listens on port 1: every attempt meets a broker that cannot be reached.
        let clients = KafkaClients::new(crate::config::KafkaConfig {
            bootstrap: "127.0.0.1:1".into(),
            ..Default::default()
        });
        let dir = std::env::temp_dir().join(format!("eosflow-away-{}", uuid::Uuid::new_v4()));
        let cache = StoreCache::new(8 << 20);
        let (s, _) = Store::open(&dir, "cl[0]", &cache).expect("open");
        let got = restore_waiting(
            &clients,
            &s,
            "cl",
            0,
            Duration::from_secs(1),
            Duration::from_secs(2),
            None,
        );
        match got {
            Err(StateError::Changelog { message, .. }) => {
                assert!(message.contains("broker unreachable"), "{message}");
                assert!(!message.contains("through 1 attempt"), "{message}");
            }
            other => panic!("expected a changelog error after waiting, got {other:?}"),
        }
        drop(s);
        Store::wipe(&dir).expect("wipe");
    }

    #[test]
    fn every_checkpoint_records_its_time_and_an_older_store_falls_back_to_its_files() {
        let dir = std::env::temp_dir().join(format!("eosflow-cpat-{}", uuid::Uuid::new_v4()));
        let cache = StoreCache::new(8 << 20);
        let (s, _) = Store::open(&dir, "cl[0]", &cache).expect("open");
        assert_eq!(
            s.checkpoint_at().expect("at"),
            None,
            "no checkpoint, no age"
        );
        let before = crate::clock::now_ms();
        s.apply(&Overlay::default(), Some(5)).expect("apply");
        match s.checkpoint_at().expect("at") {
            Some(CheckpointAt::Recorded(t)) => assert!(t >= before, "{t} < {before}"),
            other => panic!("{other:?}"),
        }
        drop(s);
        Store::wipe(&dir).expect("wipe");
    }
}
