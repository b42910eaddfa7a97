//! Standby replicas (`processor.standby_replicas`, Kafka Streams' `num.standby.replicas`):
//! warm copies of the stores of partitions this instance does not own.
//!
//! A tailer thread reads the changelog partitions of the partitions this instance is a standby
//! for, with `read_committed` and no group (manual assignment), and applies them to the same
//! local stores a restore would open (`<state dir>/<changelog>-<p>`), through restore's own
//! code ([`crate::state::changelog::replay`]) and with the changelog position as the store's
//! checkpoint. When the partition is then assigned here, the runtime's normal restore starts
//! from that checkpoint and replays only the tail.
//!
//! **Placement** is computed by every instance from the group's membership alone, so they
//! agree without talking to each other: the group is described
//! ([`crate::kafka::describe`]: ConsumerGroupDescribe for a KIP-848 consumer-protocol group,
//! DescribeGroups for a classic one); members are ordered by client id (the runtime sets `client.id` = `eosflow-<instance id>` when standbys
//! are on); the owner of partition `p` is the member whose assignment holds `p` of the first
//! input; its standbys are the next `k` members in that order, wrapping, never the owner. It is
//! recomputed after every rebalance this instance sees and every [`REFRESH`] (the other
//! members' rebalances are not seen here). While the group is not `Stable` (rebalancing, or
//! assigning or reconciling under the consumer protocol), the last placement is kept.
//!
//! **Hand-over.** One RocksDB store cannot be open twice. The runtime calls
//! `Standby::own` before it opens a newly assigned partition's stores: the tailer's copies of
//! it are closed under the lock the tailer applies under, and the tailer never opens a
//! partition the runtime owns. `Standby::disown` after a revocation lets the tailer pick the
//! partition up again if the placement says so.
//!
//! **What a copy shows.** A copy applies whole transactions only: under exactly-once the
//! records of a changelog partition come in transactions, each followed by its commit marker,
//! and a round that stops inside one keeps its tail for the next round
//! ([`complete_prefix`]), so an interactive query never reads half of a committed batch. Its
//! lag is offered to queries only when measured: a copy whose changelog end cannot be asked
//! counts as infinitely behind (never within `max_standby_lag`) until it can again.
//!
//! Tables (restored from their own topic up to the group's committed offset) have no standby
//! copy; their restore is unchanged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::kafka::describe::describe_group_with;
use crate::kafka::reader::ReaderContext;
use crate::kafka::{ClientRole, KafkaClients};
use crate::state::changelog::{check_fresh, delete_retention_ms, flush};
use crate::state::{StateError, Store, StoreCache};
use crate::telemetry;

/// How often the placement is recomputed from the group's membership when this instance sees
/// no rebalance of its own.
pub const REFRESH: Duration = Duration::from_secs(2);
/// How long one tailing round polls before it applies what it read.
const ROUND: Duration = Duration::from_millis(100);
/// Most records one round applies per store before it polls again.
const ROUND_RECORDS: usize = 5_000;
/// How often the lag gauges ask the changelog partitions' ends.
const LAG_EVERY: Duration = Duration::from_secs(1);
/// How often an idle, caught-up copy refreshes its checkpoint time (so that it does not look
/// stale to the restore that takes it over: it has missed no tombstone).
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// The `client.id` of an instance's group consumer when standbys are on: what the placement
/// orders members by and how an instance finds itself in the group (it overrides a
/// `client.id` set in `kafka.properties` for that consumer).
///
/// ```
/// assert_eq!(eosflow::internals::processor::standby::client_id("pod-0"), "eosflow-pod-0");
/// ```
pub fn client_id(instance_id: &str) -> String {
    format!("eosflow-{instance_id}")
}

/// The partitions `me` keeps warm: `members` are (client id, partitions it owns); each
/// partition's standbys are the `replicas` members after its owner in client-id order
/// (wrapping), never the owner itself.
///
/// ```
/// use eosflow::internals::processor::standby::placement;
/// let members = vec![
///     ("eosflow-a".to_string(), vec![0, 1]),
///     ("eosflow-b".to_string(), vec![2, 3]),
///     ("eosflow-c".to_string(), vec![]),
/// ];
/// // b follows a, c follows b, a follows c: one copy each, never on the owner.
/// assert_eq!(placement(&members, "eosflow-b", 1), [0, 1].into());
/// assert_eq!(placement(&members, "eosflow-c", 1), [2, 3].into());
/// assert!(placement(&members, "eosflow-a", 1).is_empty());
/// // Two copies with three members: every partition on both members that do not own it.
/// assert_eq!(placement(&members, "eosflow-a", 2), [2, 3].into());
/// // Two threads of instance b are two members with b's client id: one owner.
/// let threads = vec![
///     ("eosflow-a".to_string(), vec![0, 1]),
///     ("eosflow-b".to_string(), vec![2]),
///     ("eosflow-b".to_string(), vec![3]),
/// ];
/// assert_eq!(placement(&threads, "eosflow-a", 1), [2, 3].into());
/// assert_eq!(placement(&threads, "eosflow-b", 1), [0, 1].into());
/// ```
pub fn placement(members: &[(String, Vec<i32>)], me: &str, replicas: usize) -> BTreeSet<i32> {
    // The processing threads of one instance are members with one client id: one instance
    // here, owning what its threads own (a copy on the owner's own disk would be no copy).
    let mut instances: BTreeMap<&str, BTreeSet<i32>> = BTreeMap::new();
    for (client, parts) in members {
        instances
            .entry(client.as_str())
            .or_default()
            .extend(parts.iter().copied());
    }
    let sorted: Vec<(&str, &BTreeSet<i32>)> = instances.iter().map(|(c, p)| (*c, p)).collect();
    let n = sorted.len();
    let copies = replicas.min(n.saturating_sub(1));
    let mut out = BTreeSet::new();
    for (o, (owner, parts)) in sorted.iter().enumerate() {
        for j in 1..=copies {
            let standby = sorted[(o + j) % n].0;
            if standby == me && standby != *owner {
                out.extend(parts.iter().copied());
            }
        }
    }
    out
}

/// One changelog record as restore applies it: key, value (`None`: a tombstone).
type Change = (Vec<u8>, Option<Vec<u8>>);

/// A changelog record read and not applied yet: its offset (boundaries are told by them) and
/// its change (`None`: a record without a key, which changes nothing).
type Read = (i64, Option<Change>);

/// The lag a copy is offered to queries with while it is not known: never within a bound.
const LAG_UNKNOWN: i64 = i64::MAX;

/// How many of `offsets` (one copy's records read and not applied yet, ascending) make up
/// whole transactions, and the checkpoint after them (the next offset to read); `None` when
/// none is known to be whole yet (nothing to apply, the checkpoint stays). `next` is the
/// consumer's position: it moves past a transaction's commit marker once the marker was read.
///
/// Under exactly-once (`transactional`) every transaction of a changelog partition ends with
/// a marker, which takes an offset: a gap in the offsets (or a position past the last record's
/// offset + 1) is a transaction boundary, and what comes before it is whole. The last records
/// with no gap after them may be a transaction whose marker is not read (or written) yet: they
/// wait. (A compacted stretch also has gaps, read as boundaries: a copy catching up through
/// it may show a transaction's keys in two steps, as compaction already merged them anyway.)
/// Without transactions every record stands alone.
///
/// ```
/// use eosflow::internals::processor::standby::complete_prefix;
/// // Records 10, 11 (a transaction), its marker at 12, records 13, 14 with no marker yet.
/// assert_eq!(complete_prefix(&[10, 11, 13, 14], 15, true), (2, Some(13)));
/// // The marker after 14 has been read: all four are whole.
/// assert_eq!(complete_prefix(&[10, 11, 13, 14], 16, true), (4, Some(16)));
/// // Nothing whole yet: nothing applied, the checkpoint stays.
/// assert_eq!(complete_prefix(&[13, 14], 15, true), (0, None));
/// // Only markers (or aborted records) read: the checkpoint moves past them.
/// assert_eq!(complete_prefix(&[], 20, true), (0, Some(20)));
/// // At-least-once: no transactions.
/// assert_eq!(complete_prefix(&[13, 14], 15, false), (2, Some(15)));
/// ```
pub fn complete_prefix(offsets: &[i64], next: i64, transactional: bool) -> (usize, Option<i64>) {
    let Some(&last) = offsets.last() else {
        return (0, Some(next));
    };
    if !transactional || next > last + 1 {
        return (offsets.len(), Some(next));
    }
    match offsets.windows(2).rposition(|w| w[1] > w[0] + 1) {
        Some(i) => (i + 1, Some(offsets[i + 1])),
        None => (0, None),
    }
}

/// What the tailer needs from the runtime.
#[derive(Debug, Clone)]
pub(crate) struct StandbyOptions {
    /// `processor.standby_replicas`.
    pub replicas: usize,
    /// The consumer group (`app.id`).
    pub group: String,
    /// This instance's client id in the group ([`client_id`]).
    pub me: String,
    /// The input whose assignment names a partition's owner.
    pub input: String,
    /// Every changelog whose partitions are kept warm (the default store's first).
    pub changelogs: Vec<String>,
    /// The store of each changelog, in the same order (what interactive queries name them).
    pub names: Vec<String>,
    /// Where warm copies are offered to interactive queries (`with_standbys(max_lag)`).
    pub local: Option<Arc<crate::query::LocalStores>>,
    /// Root of this instance's stores.
    pub state_dir: PathBuf,
    /// Whether the changelogs are written in transactions (exactly-once): a copy then applies
    /// whole transactions only ([`complete_prefix`]).
    pub transactional: bool,
}

/// The copies the tailer keeps and the partitions the runtime owns: changed only under the
/// one lock, so a store is never open on both sides.
#[derive(Default)]
struct Copies {
    /// Partition numbers the runtime owns (never opened here), with how many of its threads
    /// hold them: while a partition moves between two threads of this instance the new owner
    /// may take it before the old one lets go.
    owned: BTreeMap<i32, usize>,
    /// Open warm copies, by (changelog index, partition).
    stores: BTreeMap<(usize, i32), Store>,
}

struct Shared {
    copies: Mutex<Copies>,
    stop: AtomicBool,
    /// Recompute the placement at the next round (a rebalance was seen).
    nudge: AtomicBool,
    /// Interactive queries' view of the copies, and each changelog's store name.
    queries: Option<(Arc<crate::query::LocalStores>, Vec<String>)>,
}

impl Shared {
    /// Offers copy `k`'s store to interactive queries.
    fn offer(&self, (c, p): (usize, i32), store: &Store) {
        if let Some((local, names)) = &self.queries {
            if let Some(name) = names.get(c) {
                local.standby_opened(p, name, store.reader());
            }
        }
    }

    /// Withdraws copy `k` from interactive queries (waiting for reads in flight) before it
    /// closes: a query must not keep its database open under the runtime that opens it next.
    fn withdraw(&self, (c, p): (usize, i32)) {
        if let Some((local, names)) = &self.queries {
            if let Some(name) = names.get(c) {
                local.standby_closing(p, name);
            }
        }
    }

    /// Copy `k` is `lag` records behind its changelog.
    fn lag(&self, (c, p): (usize, i32), lag: i64) {
        if let Some((local, names)) = &self.queries {
            if let Some(name) = names.get(c) {
                local.standby_lag(p, name, lag);
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Copies> {
        // A panic while holding the lock left the map as it was: keep using it.
        self.copies.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running standby tailer of one instance; stopped (and its copies closed) when dropped.
pub(crate) struct Standby {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Standby {
    /// Starts the tailer thread.
    pub(crate) fn start(
        clients: KafkaClients,
        cache: StoreCache,
        opts: StandbyOptions,
        owned: BTreeSet<i32>,
    ) -> Result<Self, KafkaError> {
        let consumer: BaseConsumer<ReaderContext> = clients
            .config(ClientRole::Reader)
            .create_with_context(ReaderContext)?;
        let ends: BaseConsumer<ReaderContext> = clients
            .config(ClientRole::Reader)
            .set("isolation.level", "read_uncommitted")
            .create_with_context(ReaderContext)?;
        let shared = Arc::new(Shared {
            copies: Mutex::new(Copies {
                owned: owned.into_iter().map(|p| (p, 1)).collect(),
                stores: BTreeMap::new(),
            }),
            stop: AtomicBool::new(false),
            nudge: AtomicBool::new(true),
            queries: opts.local.clone().map(|l| (l, opts.names.clone())),
        });
        let tailer = Tailer {
            shared: shared.clone(),
            clients,
            cache,
            opts,
            consumer,
            ends,
            target: BTreeSet::new(),
            assigned: BTreeSet::new(),
            lag: BTreeMap::new(),
            at: BTreeMap::new(),
            last_lag: Instant::now() - LAG_EVERY,
            touched: BTreeMap::new(),
            tails: BTreeMap::new(),
        };
        let thread = std::thread::Builder::new()
            .name("eosflow-standby".into())
            .spawn(move || tailer.run())
            .map_err(|e| KafkaError::ClientCreation(format!("standby tailer thread: {e}")))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// The runtime is about to open `partitions`' stores: the tailer's copies of them are
    /// closed now (waiting for a round that is applying to finish) and not opened again until
    /// [`Standby::disown`].
    pub(crate) fn own(&self, partitions: &[i32]) {
        let mut copies = self.shared.lock();
        for p in partitions {
            *copies.owned.entry(*p).or_default() += 1;
            let keys: Vec<(usize, i32)> = copies
                .stores
                .keys()
                .filter(|(_, q)| q == p)
                .copied()
                .collect();
            for k in keys {
                self.shared.withdraw(k);
                copies.stores.remove(&k);
            }
        }
        drop(copies);
        self.shared.nudge.store(true, Ordering::Relaxed);
    }

    /// The runtime closed `partitions`' stores (revoked): the tailer may keep them warm again.
    pub(crate) fn disown(&self, partitions: &[i32]) {
        let mut copies = self.shared.lock();
        for p in partitions {
            if let Some(n) = copies.owned.get_mut(p) {
                *n -= 1;
                if *n == 0 {
                    copies.owned.remove(p);
                }
            }
        }
        drop(copies);
        self.shared.nudge.store(true, Ordering::Relaxed);
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Tailer {
    shared: Arc<Shared>,
    clients: KafkaClients,
    cache: StoreCache,
    opts: StandbyOptions,
    consumer: BaseConsumer<ReaderContext>,
    /// read_uncommitted: the high watermark, for the lag gauges.
    ends: BaseConsumer<ReaderContext>,
    /// The partitions the placement gives this instance.
    target: BTreeSet<i32>,
    /// The (changelog index, partition) pairs the consumer is assigned.
    assigned: BTreeSet<(usize, i32)>,
    /// Last lag reported per copy (kept to zero a copy's gauge when it goes).
    lag: BTreeMap<(usize, i32), i64>,
    /// Each copy's checkpoint: the next changelog offset it applies.
    at: BTreeMap<(usize, i32), i64>,
    last_lag: Instant,
    /// When each copy's checkpoint was last written.
    touched: BTreeMap<(usize, i32), Instant>,
    /// Each copy's records read and not applied yet, with their offsets: the part of a
    /// transaction whose marker was not read yet (see [`complete_prefix`]).
    tails: BTreeMap<(usize, i32), Vec<Read>>,
}

impl Tailer {
    fn run(mut self) {
        tracing::info!(replicas = self.opts.replicas, me = %self.opts.me, changelogs = ?self.opts.changelogs, "standby replicas on");
        let mut last_placement: Option<Instant> = None;
        while !self.shared.stop.load(Ordering::Relaxed) {
            let due = last_placement.is_none_or(|t| t.elapsed() >= REFRESH);
            if self.shared.nudge.swap(false, Ordering::Relaxed) || due {
                self.replace_target();
                last_placement = Some(Instant::now());
            }
            if let Err(e) = self.reconcile() {
                tracing::warn!(error = %e, "standby: keeping the copies in step failed; trying again");
                self.lags_unknown();
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
            if self.assigned.is_empty() {
                std::thread::sleep(ROUND);
                continue;
            }
            if let Err(e) = self.round() {
                tracing::warn!(error = %e, "standby: applying changelog records failed; reading them again");
                // The copies go back to their checkpoints.
                self.assigned.clear();
                self.lags_unknown();
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        let mut copies = self.shared.lock();
        for k in copies.stores.keys() {
            self.shared.withdraw(*k);
        }
        copies.stores.clear();
        drop(copies);
        telemetry::standby_partitions(0);
        tracing::info!("standby replicas stopped");
    }

    /// Recomputes the placement from the group's membership; keeps the last one while the
    /// group is not `Stable` (rebalancing, or a consumer-protocol group assigning or
    /// reconciling) or cannot be described. Both rebalance protocols are described the same way
    /// ([`describe_group_with`], on the tailer's own client).
    fn replace_target(&mut self) {
        let group = match describe_group_with(
            self.consumer.client(),
            &self.opts.group,
            Duration::from_secs(5),
        ) {
            Ok(g) => g,
            Err(e) => {
                tracing::debug!(error = %e, "standby: describing the group failed; keeping the placement");
                return;
            }
        };
        let Some(members) = group.owners(&self.opts.input) else {
            tracing::debug!(state = %group.state, kind = ?group.kind, "standby: group not stable; keeping the placement");
            return;
        };
        let target = placement(&members, &self.opts.me, self.opts.replicas);
        if target != self.target {
            tracing::info!(standby_for = ?target, members = members.len(), kind = ?group.kind, "standby placement");
            self.target = target;
        }
    }

    /// Opens the copies the placement wants and the runtime does not own, closes the others,
    /// and assigns the consumer from each copy's checkpoint.
    fn reconcile(&mut self) -> Result<(), StateError> {
        let wanted = |copies: &Copies| -> BTreeSet<(usize, i32)> {
            self.target
                .iter()
                .filter(|p| !copies.owned.contains_key(p))
                .flat_map(|p| (0..self.opts.changelogs.len()).map(move |c| (c, *p)))
                .collect()
        };
        let copies = self.shared.lock();
        let (want, open) = (wanted(&copies), copies.stores.keys().copied().collect());
        drop(copies);
        if want == open && want == self.assigned {
            return Ok(());
        }
        // The broker is asked before the lock is taken: the runtime waits on that lock when it
        // is assigned a partition, and must not wait for a network round trip.
        let mut ends = BTreeMap::new();
        for &(c, p) in want.difference(&open) {
            let topic = &self.opts.changelogs[c];
            let (_, end) = self
                .ends
                .fetch_watermarks(topic, p, Duration::from_secs(5))
                .map_err(|e| self.kafka_error(c, p, e))?;
            ends.insert((c, p), end);
            // Fills the cache the stale check reads under the lock.
            let _ = delete_retention_ms(&self.clients, topic);
        }
        let mut copies = self.shared.lock();
        // The runtime may have taken a partition meanwhile.
        let want = wanted(&copies);
        let open: BTreeSet<(usize, i32)> = copies.stores.keys().copied().collect();
        for k in open.difference(&want) {
            self.shared.withdraw(*k);
            copies.stores.remove(k);
        }
        for &(c, p) in want.difference(&open) {
            // Known now, or picked up at the next round.
            if let Some(end) = ends.get(&(c, p)) {
                let store = self.open_copy(c, p, *end)?;
                self.shared.offer((c, p), &store);
                copies.stores.insert((c, p), store);
            }
        }
        let want: BTreeSet<(usize, i32)> = copies.stores.keys().copied().collect();
        let mut tpl = TopicPartitionList::new();
        self.at.clear();
        // Read again from each checkpoint.
        self.tails.clear();
        for (&(c, p), store) in &copies.stores {
            let checkpoint = store.checkpoint()?;
            self.at.insert((c, p), checkpoint.unwrap_or(0));
            let from = checkpoint.map_or(Offset::Beginning, Offset::Offset);
            tpl.add_partition_offset(&self.opts.changelogs[c], p, from)
                .map_err(|e| self.kafka_error(c, p, e))?;
        }
        let kept: BTreeSet<i32> = copies.stores.keys().map(|(_, p)| *p).collect();
        drop(copies);
        self.consumer
            .assign(&tpl)
            .map_err(|e| StateError::Changelog {
                topic: self.opts.changelogs.join(","),
                partition: -1,
                message: format!("standby assign: {e}"),
            })?;
        self.assigned = want;
        for k in self.lag.keys().filter(|k| !self.assigned.contains(k)) {
            telemetry::standby_lag(&self.opts.changelogs[k.0], k.1, 0);
        }
        self.lag.retain(|k, _| self.assigned.contains(k));
        self.touched.retain(|k, _| self.assigned.contains(k));
        self.last_lag = Instant::now() - LAG_EVERY;
        telemetry::standby_partitions(kept.len());
        tracing::info!(partitions = ?kept, "standby copies kept warm");
        Ok(())
    }

    fn kafka_error(&self, c: usize, p: i32, e: KafkaError) -> StateError {
        StateError::Changelog {
            topic: self.opts.changelogs[c].clone(),
            partition: p,
            message: e.to_string(),
        }
    }

    /// Opens the copy of changelog `c`'s partition `p` where the runtime would open it; a copy
    /// whose checkpoint cannot be trusted (stale, past the changelog's `end`) starts empty.
    fn open_copy(&self, c: usize, p: i32, end: i64) -> Result<Store, StateError> {
        let topic = &self.opts.changelogs[c];
        let path = self.opts.state_dir.join(format!("{topic}-{p}"));
        let source = format!("{topic}[{p}]");
        let (store, _) = Store::open(&path, &source, &self.cache)?;
        let ahead = store.checkpoint()?.is_some_and(|cp| cp > end);
        let stale = check_fresh(&self.clients, &store, topic, p);
        if ahead || stale.is_err() {
            tracing::warn!(topic, partition = p, ahead, stale = ?stale.err(), "standby copy cannot be trusted; rebuilding it from the changelog");
            drop(store);
            Store::wipe(&path)?;
            return Ok(Store::open(&path, &source, &self.cache)?.0);
        }
        Ok(store)
    }

    /// Polls for up to [`ROUND`], then applies the whole transactions read to each copy still
    /// kept, in one write with the offset after them as its checkpoint (the consumer's
    /// position, past transaction markers and aborted records, when all were whole); the rest
    /// waits for its marker ([`complete_prefix`]).
    fn round(&mut self) -> Result<(), StateError> {
        let started = Instant::now();
        let mut read = 0usize;
        while started.elapsed() < ROUND && read < ROUND_RECORDS {
            match self.consumer.poll(Duration::from_millis(50)) {
                Some(Ok(m)) => {
                    let Some(c) = self.opts.changelogs.iter().position(|t| t == m.topic()) else {
                        continue;
                    };
                    // A record without a key changes nothing, but its offset tells boundaries.
                    let change = m
                        .key()
                        .map(|k| (k.to_vec(), m.payload().map(<[u8]>::to_vec)));
                    self.tails
                        .entry((c, m.partition()))
                        .or_default()
                        .push((m.offset(), change));
                    read += 1;
                }
                // A copy that reached its end: the position has moved past the markers.
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "standby: consumer error");
                    break;
                }
                None => break,
            }
        }
        let positions = self
            .consumer
            .position()
            .map_err(|e| StateError::Changelog {
                topic: self.opts.changelogs.join(","),
                partition: -1,
                message: format!("standby position: {e}"),
            })?;
        let copies = self.shared.lock();
        for (&(c, p), store) in &copies.stores {
            let Some(Offset::Offset(next)) = positions
                .find_partition(&self.opts.changelogs[c], p)
                .map(|e| e.offset())
            else {
                continue;
            };
            let tail = self.tails.entry((c, p)).or_default();
            let offsets: Vec<i64> = tail.iter().map(|(o, _)| *o).collect();
            let (whole, after) = complete_prefix(&offsets, next, self.opts.transactional);
            let Some(after) = after else {
                continue;
            };
            let mut records: Vec<Change> = tail.drain(..whole).filter_map(|(_, c)| c).collect();
            let checkpoint = store.checkpoint()?;
            let touch = self
                .touched
                .get(&(c, p))
                .is_none_or(|t| t.elapsed() >= TOUCH_EVERY)
                && self.lag.get(&(c, p)) == Some(&0);
            if records.is_empty() && checkpoint == Some(after) && !touch {
                continue;
            }
            flush(store, &mut records, after)?;
            self.at.insert((c, p), after);
            self.touched.insert((c, p), Instant::now());
        }
        drop(copies);
        if self.last_lag.elapsed() >= LAG_EVERY {
            self.report_lag();
            self.last_lag = Instant::now();
        }
        Ok(())
    }

    /// `eosflow_standby_lag_records`: each copy's changelog end (high watermark) minus its
    /// checkpoint. A copy whose end cannot be asked is offered to queries as
    /// [`LAG_UNKNOWN`]: the last lag measured would no longer bound how far behind it is.
    fn report_lag(&mut self) {
        for &(c, p) in &self.assigned {
            let topic = &self.opts.changelogs[c];
            let high = match self.ends.fetch_watermarks(topic, p, Duration::from_secs(5)) {
                Ok((_, high)) => high,
                Err(e) => {
                    tracing::debug!(topic, partition = p, error = %e, "standby: changelog end unknown; the copy is not offered to queries until it is known");
                    self.shared.lag((c, p), LAG_UNKNOWN);
                    continue;
                }
            };
            let at = self.at.get(&(c, p)).copied().unwrap_or(0);
            let lag = (high - at).max(0);
            telemetry::standby_lag(topic, p, lag);
            self.shared.lag((c, p), lag);
            self.lag.insert((c, p), lag);
        }
    }
}

impl Tailer {
    /// Every copy's lag is unknown now (the tailer cannot keep them in step): none is offered
    /// to queries until a lag is measured again.
    fn lags_unknown(&self) {
        for k in self.shared.lock().stores.keys() {
            self.shared.lag(*k, LAG_UNKNOWN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copies_with(stores: BTreeMap<(usize, i32), Store>) -> Arc<Shared> {
        Arc::new(Shared {
            copies: Mutex::new(Copies {
                owned: BTreeMap::new(),
                stores,
            }),
            stop: AtomicBool::new(false),
            nudge: AtomicBool::new(false),
            queries: None,
        })
    }

    #[test]
    fn owning_a_partition_closes_its_copy_so_the_runtime_opens_the_same_store_with_its_data() {
        use crate::state::{Column, Overlay};
        let root = std::env::temp_dir().join(format!("eosflow-standby-{}", uuid::Uuid::new_v4()));
        let path = root.join("cl-0");
        let cache = StoreCache::new(8 << 20);
        let (copy, _) = Store::open(&path, "cl[0]", &cache).expect("open the copy");
        let mut o = Overlay::default();
        o.put(Column::State, b"k", b"warm".to_vec());
        copy.apply(&o, Some(7)).expect("apply");
        let shared = copies_with(BTreeMap::from([((0, 0), copy)]));
        let standby = Standby {
            shared: shared.clone(),
            thread: None,
        };
        standby.own(&[0]);
        {
            let copies = shared.lock();
            assert!(copies.owned.contains_key(&0) && copies.stores.is_empty());
        }
        assert!(shared.nudge.load(Ordering::Relaxed), "the tailer is told");
        // The RocksDB lock is free: the runtime's open neither fails nor rebuilds.
        let (store, rebuilt) = Store::open(&path, "cl[0]", &cache).expect("open as owner");
        assert!(!rebuilt);
        assert_eq!(store.checkpoint().expect("checkpoint"), Some(7));
        assert_eq!(
            store.get(Column::State, b"k").expect("get"),
            Some(b"warm".to_vec())
        );
        // A second thread of this instance takes the partition before the first lets go.
        standby.own(&[0]);
        standby.disown(&[0]);
        assert!(
            shared.lock().owned.contains_key(&0),
            "still owned by the other thread"
        );
        drop(store);
        standby.disown(&[0]);
        assert!(!shared.lock().owned.contains_key(&0));
        drop(standby);
        Store::wipe(&root).expect("wipe");
    }

    /// A tailer over `shared` whose clients reach no broker, keeping the stores `names`
    /// (changelogs `g-<name>-changelog`) under `root`, offering them to `local`.
    fn offline_tailer(
        shared: Arc<Shared>,
        root: &std::path::Path,
        names: &[&str],
        local: Option<Arc<crate::query::LocalStores>>,
    ) -> Tailer {
        let clients = KafkaClients::new(crate::config::KafkaConfig {
            bootstrap: "127.0.0.1:1".into(),
            ..Default::default()
        });
        let reader = || {
            clients
                .config(ClientRole::Reader)
                .create_with_context(ReaderContext)
                .expect("client")
        };
        Tailer {
            shared,
            clients: clients.clone(),
            cache: StoreCache::new(8 << 20),
            opts: StandbyOptions {
                replicas: 1,
                group: "g".into(),
                me: client_id("b"),
                input: "in".into(),
                changelogs: names.iter().map(|n| format!("g-{n}-changelog")).collect(),
                names: names.iter().map(|n| n.to_string()).collect(),
                local,
                state_dir: root.to_path_buf(),
                transactional: true,
            },
            consumer: reader(),
            ends: reader(),
            target: BTreeSet::new(),
            assigned: BTreeSet::new(),
            lag: BTreeMap::new(),
            at: BTreeMap::new(),
            last_lag: Instant::now(),
            touched: BTreeMap::new(),
            tails: BTreeMap::new(),
        }
    }

    #[test]
    fn the_tailer_never_opens_a_partition_the_runtime_owns() {
        // No broker is asked: nothing is to be opened.
        let root = std::env::temp_dir().join(format!("eosflow-standby-{}", uuid::Uuid::new_v4()));
        let shared = copies_with(BTreeMap::new());
        shared.lock().owned.insert(3, 1);
        let mut tailer = offline_tailer(shared.clone(), &root, &["count", "totals"], None);
        tailer.target = BTreeSet::from([3]);
        tailer.reconcile().expect("reconcile");
        assert!(shared.lock().stores.is_empty());
        assert!(tailer.assigned.is_empty());
        assert!(
            !root.join("g-count-changelog-3").exists(),
            "not even created"
        );
    }

    /// Issue 49 (6): a copy whose changelog end cannot be asked is not offered to queries any
    /// more, whatever lag was measured before (the last lag was kept, and the copy served as
    /// within `max_standby_lag` while it fell behind without bound).
    #[test]
    fn a_copy_whose_changelog_end_cannot_be_asked_is_not_offered_to_queries() {
        let root = std::env::temp_dir().join(format!("eosflow-standby-{}", uuid::Uuid::new_v4()));
        let cache = StoreCache::new(8 << 20);
        let (copy, _) =
            Store::open(&root.join("g-count-changelog-0"), "cl[0]", &cache).expect("open the copy");
        let local = crate::query::LocalStores::new();
        let shared = Arc::new(Shared {
            copies: Mutex::new(Copies::default()),
            stop: AtomicBool::new(false),
            nudge: AtomicBool::new(false),
            queries: Some((local.clone(), vec!["count".into()])),
        });
        shared.offer((0, 0), &copy);
        shared.lock().stores.insert((0, 0), copy);
        shared.lag((0, 0), 0);
        assert_eq!(local.standby_partitions("count", 10), [0], "caught up");
        let mut tailer = offline_tailer(shared.clone(), &root, &["count"], Some(local.clone()));
        tailer.target = BTreeSet::from([0]);
        tailer.assigned = BTreeSet::from([(0, 0)]);
        tailer.lag = BTreeMap::from([((0, 0), 0)]);
        // No broker answers: the end is unknown.
        tailer.report_lag();
        assert!(
            local.standby_partitions("count", i64::MAX - 1).is_empty(),
            "not offered under any bound"
        );
        tailer.shared.lag((0, 0), 3);
        tailer.lags_unknown();
        assert!(local.standby_partitions("count", i64::MAX - 1).is_empty());
        shared.withdraw((0, 0));
        shared.lock().stores.clear();
        drop(tailer);
        Store::wipe(&root).expect("wipe");
    }

    #[test]
    fn placement_never_puts_a_copy_on_its_owner_and_caps_at_the_other_members() {
        let members = vec![("b".to_string(), vec![1]), ("a".to_string(), vec![0])];
        assert_eq!(placement(&members, "a", 1), [1].into());
        assert_eq!(placement(&members, "b", 1), [0].into());
        // More copies than other members: each member still holds every partition it does not own.
        assert_eq!(placement(&members, "a", 3), [1].into());
        assert!(placement(&members, "a", 0).is_empty());
        assert!(placement(&[("a".to_string(), vec![0, 1])], "a", 1).is_empty());
        // Not a member (yet): nothing.
        assert!(placement(&members, "z", 1).is_empty());
    }
}
