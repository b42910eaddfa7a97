//! The stream thread (Kafka Streams' `StreamThread`): one exactly-once loop — poll a batch,
//! run it in one transaction, commit or recover — over its owners: the [`GroupMember`], the
//! [`TaskManager`], the [`RecordCollector`], the batch bounds of [`Isolation`], timestamp
//! [`Alignment`] and the repartition [`Watermarks`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::producer::DeliveryFuture;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::faults;
use super::group_member::{GroupEvent, GroupMember, Polled};
use super::isolation::Isolation;
use super::record_collector::{EngineOutput, KafkaOut, RecordCollector};
use super::task_manager::TaskManager;
use super::{RunSummary, RuntimeError, RuntimeOptions};
use crate::clock::now_ms;
use crate::config::Config;
use crate::kafka::KafkaClients;
use crate::processor::align::{self, Alignment};
use crate::processor::engine::{work_pending, Engine};
use crate::processor::purge::Purger;
use crate::processor::standby::Standby;
use crate::processor::threads::Leases;
use crate::processor::watermarks::Watermarks;
use crate::processor::{Application, Record};
use crate::retry::depth::DepthWatcher;
use crate::retry::{dlt, ladder_topics};
use crate::sink::SinkError;
use crate::state::StoreCache;
use crate::telemetry::{self, Health, WaitingOn};

/// How long a poll waits for a record while partitions still wait to open: long enough for
/// the partitions a step just resumed to fetch their first records, short against a step.
const RESTORING_POLL: Duration = Duration::from_millis(20);

/// What an instance runs once beside its processing loops, whatever their number: the global
/// tables' stores and tailing threads, the DLT depth gauges, the standby tailer. Stopped when
/// dropped, after the loops.
pub(crate) struct InstanceServices {
    globals: Option<crate::processor::globals::Globals>,
    _depth: Option<DepthWatcher>,
    standby: Option<Arc<Standby>>,
}

/// Why one batch did not commit, with what the loop needs to find the record to blame.
struct BatchFailure {
    error: SinkError,
    /// Index of the record being handled when a send failed on that record.
    culprit: Option<usize>,
    /// The offsets the transaction would have committed (to learn an unknown outcome).
    next_offsets: Vec<(String, i32, i64)>,
    /// The order records were handled in (indexes into the batch).
    order: Vec<usize>,
    /// Records handled before the failure (a prefix of `order`).
    handled: usize,
    /// The record whose handler call took longest, if it outlived half the transaction timeout.
    slow: Option<(usize, Duration)>,
}

/// A batch whose transaction committed.
struct Committed {
    /// Last changelog offset written per (store, partition); store 0 is the default one,
    /// `i + 1` the named store `i`.
    ends: HashMap<(usize, i32), i64>,
    /// The order records were handled in (indexes into the batch).
    order: Vec<usize>,
    /// Records handled (a prefix of `order`; the rest are read again).
    handled: usize,
    /// Next offsets committed.
    next_offsets: Vec<(String, i32, i64)>,
}

/// The order a batch is handled in: round-robin over its (topic, partition) runs, each run in
/// offset order. A batch closed early (half the transaction timeout used) then leaves a little
/// of every partition for the next one, rather than starving the partitions that happen to come
/// last in the poll order. The run of `first` (a record to run alone) goes first, so that record
/// reaches the head of a batch.
fn fair_order(batch: &[OwnedMessage], first: Option<&(String, i32, i64)>) -> Vec<usize> {
    let mut runs: Vec<(&str, i32, Vec<usize>)> = Vec::new();
    // Polled records come in long runs of one partition: the last run is asked first.
    let mut last = 0;
    for (i, m) in batch.iter().enumerate() {
        let same = |(t, p, _): &(&str, i32, Vec<usize>)| *p == m.partition() && *t == m.topic();
        if !runs.get(last).is_some_and(same) {
            last = match runs.iter().position(same) {
                Some(at) => at,
                None => {
                    runs.push((m.topic(), m.partition(), Vec::new()));
                    runs.len() - 1
                }
            };
        }
        runs[last].2.push(i);
    }
    if runs.len() <= 1 {
        return (0..batch.len()).collect();
    }
    if let Some((t, p, _)) = first {
        if let Some(at) = runs.iter().position(|(rt, rp, _)| rt == t && rp == p) {
            let run = runs.remove(at);
            runs.insert(0, run);
        }
    }
    let mut order = Vec::with_capacity(batch.len());
    let longest = runs.iter().map(|r| r.2.len()).max().unwrap_or(0);
    for k in 0..longest {
        order.extend(runs.iter().filter_map(|r| r.2.get(k)));
    }
    order
}

/// The headers of the record being handled, as the owned pairs [`Record::headers`] lends out,
/// kept from record to record: refilling it reuses the pairs' `String` and `Vec` buffers, so a
/// record with headers costs no allocation once the loop has seen as many headers as it has
/// (a fresh `Vec` of owned pairs per record was 5 % of the loop's time in the count shape's
/// profile, and as much again to free them).
#[derive(Default)]
struct HeaderBuf {
    pairs: Vec<(String, Vec<u8>)>,
    len: usize,
}

impl HeaderBuf {
    /// Copies `m`'s headers in (a header without a value becomes empty) and lends them out.
    fn of(&mut self, m: &OwnedMessage) -> &[(String, Vec<u8>)] {
        self.len = 0;
        for h in m.headers().into_iter().flat_map(|hs| hs.iter()) {
            let value = h.value.unwrap_or_default();
            match self.pairs.get_mut(self.len) {
                Some((k, v)) => {
                    k.clear();
                    k.push_str(h.key);
                    v.clear();
                    v.extend_from_slice(value);
                }
                None => self.pairs.push((h.key.to_string(), value.to_vec())),
            }
            self.len += 1;
        }
        &self.pairs[..self.len]
    }
}

/// The time `m` is aligned by: its event time as `processor` extracts it (what moves stream
/// time), or its Kafka timestamp.
fn alignment_time<P: Application>(processor: &P, headers: &mut HeaderBuf, m: &OwnedMessage) -> i64 {
    processor
        .event_time(&Record::of_message(m, headers.of(m)))
        .unwrap_or_else(|| align::kafka_ts(m))
}

/// The exactly-once runtime of one instance (one processing thread of it: see
/// [`crate::processor::threads::ProcessorThreads`]).
pub struct Runtime<P: Application> {
    opts: RuntimeOptions,
    clients: KafkaClients,
    processor: P,
    member: GroupMember,
    tasks: TaskManager,
    collector: RecordCollector,
    isolation: Isolation,
    alignment: Alignment,
    /// What the upstream tasks broadcast to the repartition topics they write.
    watermarks: Watermarks,
    /// Deletes consumed repartition records.
    purger: Purger,
    health: Arc<Health>,
    summary: RunSummary,
    /// Records in the last batch: the next one's starting capacity.
    last_batch_len: usize,
    /// The handled record's headers, their buffers reused from record to record.
    headers: HeaderBuf,
    /// The processor's global tables, bootstrapped by `run`.
    globals: Vec<crate::topology::GlobalTable>,
    /// Partitions whose records the last batch held for timestamp alignment, paused while the
    /// next batch is polled: a held task waits for another partition's records, and a batch
    /// refilled with the held ones (they come back first after the seek) could never reach
    /// them, however small `processor.max_batch_records` is.
    aligning: Vec<(String, i32)>,
}

impl<P: Application> Runtime<P> {
    /// Connects: creates the transactional producer (fencing a previous incarnation of this
    /// instance) and subscribes the group consumer.
    pub fn new(config: &Config, processor: P) -> Result<Self, RuntimeError> {
        Self::new_member(config, processor, 0)
    }

    /// The loop of processing thread `thread` (see [`crate::processor::threads`]).
    pub(crate) fn new_member(
        config: &Config,
        mut processor: P,
        thread: usize,
    ) -> Result<Self, RuntimeError> {
        // A topology names its repartition topics for the application before its inputs are
        // asked for: they are inputs too (retry levels, DLT, co-partitioned, subscribed).
        processor.bind_application(&config.app.id);
        let mut opts = match processor.input_topics() {
            Some(inputs) => {
                let mut config = config.clone();
                config.processor.input_topics = inputs;
                RuntimeOptions::from_config(&config)?
            }
            None => RuntimeOptions::from_config(config)?,
        };
        opts.thread = thread;
        opts.tables = processor.tables();
        opts.versioned_tables = processor.versioned_tables();
        let clients = KafkaClients::new(config.kafka.clone());
        let standby_replicas = config.processor.standby_replicas as usize;
        let tasks = TaskManager::new(
            &clients,
            &opts,
            processor.store_name(),
            processor.stores(),
            processor.sub_topology_count(),
            standby_replicas,
        )?;
        let mut collector = RecordCollector::new(&clients, &opts)?;
        let mut member = GroupMember::connect(
            Arc::new(faults::FaultySupplier {
                inner: Arc::new(clients.clone()),
                app_id: opts.app_id.clone(),
            }),
            Arc::new(crate::clock::SystemClock),
            &opts,
        )?;
        let not_created = if opts.create_topics {
            super::internal_topics::ensure(
                &clients,
                &member,
                &opts,
                tasks.changelogs(),
                &processor.repartition_topics(),
            )
        } else {
            None
        };
        let mut needed: Vec<String> = opts
            .input_topics
            .iter()
            .flat_map(|t| ladder_topics(std::slice::from_ref(t), opts.retry_for(t).levels()))
            .collect();
        needed.extend(tasks.changelogs().cloned());
        // A table's topic is consumed with the inputs and co-partitioned with them; it has no
        // retry levels, DLT or changelog of its own.
        needed.extend(opts.tables.iter().map(|(_, t)| t.clone()));
        // Topics created a moment ago (by `topics apply` or a test) may take a few seconds to
        // show in metadata: a missing topic is asked for again before it is reported.
        let missing_from = |known: &[String]| -> Vec<String> {
            let known: BTreeSet<&str> = known.iter().map(String::as_str).collect();
            needed
                .iter()
                .filter(|t| !known.contains(t.as_str()))
                .cloned()
                .collect()
        };
        let mut known = member.topic_names(Duration::from_secs(30))?;
        let mut missing = missing_from(&known);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !missing.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(250));
            known = member.topic_names(Duration::from_secs(30))?;
            missing = missing_from(&known);
        }
        if !missing.is_empty() {
            return Err(RuntimeError::Config(format!(
                "topics missing on {}: {}; {}",
                clients.bootstrap(),
                missing.join(", "),
                if let Some(why) = &not_created {
                    why.as_str()
                } else if opts.create_topics {
                    "create the inputs (and the tables' topics) first: eosflow creates only its internal topics (retry levels, DLTs, changelogs, repartition topics), with the inputs' partition count"
                } else {
                    "processor.create_topics is off: declare them in topics/ and run `eosflow topics apply` (inputs, their .retry.<n> levels and .DLT, and the changelogs share one partition count)"
                }
            )));
        }
        // Once per instance: its threads share the topology.
        if opts.thread == 0 {
            let n = super::internal_topics::warn_orphaned_changelogs(
                &member,
                &known,
                clients.bootstrap(),
                &opts.app_id,
                &needed,
            );
            telemetry::orphaned_changelogs(n);
        }
        let subscription: Vec<String> = needed
            .iter()
            .filter(|t| !t.ends_with(".DLT") && !tasks.changelogs().any(|c| c == *t))
            .cloned()
            .collect();
        let mut copartitioned = needed;
        copartitioned.extend(opts.input_topics.iter().map(|t| dlt::topic_for(t)));
        member.set_topics(subscription, copartitioned)?;
        let alignment = Alignment::new(&opts, |t| processor.sub_topology(t));
        let writers: Vec<(String, usize)> = processor
            .repartition_topics()
            .into_iter()
            .filter_map(|t| Some((t.clone(), processor.repartition_writer(&t)?)))
            .collect();
        let purger = Purger::new(
            &clients,
            processor.repartition_topics(),
            opts.repartition_purge_interval,
        );
        // A global table's topic is read whole, by every instance, before the group is joined
        // (`run`): it must exist now, and is not co-partitioned with anything.
        let globals = processor.global_tables();
        crate::processor::globals::check_topics(&clients, &globals, Duration::from_secs(10))?;
        tracing::info!(
            transactional_id = %opts.transactional_id(),
            group = %opts.app_id,
            inputs = ?opts.input_topics,
            changelog = %tasks.changelog(),
            "runtime started"
        );
        let health = Arc::new(Health::new(Duration::from_secs(60)));
        collector.set_waits(health.waits());
        Ok(Self {
            isolation: Isolation::new(opts.max_batch_records, opts.transaction_timeout),
            opts,
            clients,
            processor,
            member,
            tasks,
            collector,
            alignment,
            watermarks: Watermarks::new(writers),
            purger,
            health,
            summary: RunSummary::default(),
            last_batch_len: 0,
            headers: HeaderBuf::default(),
            globals,
            aligning: Vec::new(),
        })
    }

    /// Reports liveness and readiness to `health` (served on `/healthz` and `/readyz`).
    pub fn with_health(mut self, health: Arc<Health>) -> Self {
        self.tasks.set_health(health.clone());
        self.collector.set_waits(health.waits());
        self.health = health;
        self
    }

    /// The changelog topic this runtime writes.
    pub fn changelog_topic(&self) -> &str {
        self.tasks.changelog()
    }

    /// Runs until `shutdown` is set (the open batch is committed first) or a fatal error.
    pub fn run(mut self, shutdown: Arc<AtomicBool>) -> Result<RunSummary, RuntimeError> {
        let services = self.start_services()?;
        self.join_services(&services)?;
        self.run_member(&shutdown)
    }

    /// Starts what an instance runs once beside its processing loops, from this loop's
    /// processor and settings. Global tables first, read to their end while `/readyz` says 503
    /// (a restore: alive, not ready); only then is the group joined, so no partition waits on
    /// this instance.
    pub(crate) fn start_services(&self) -> Result<InstanceServices, RuntimeError> {
        Ok(InstanceServices {
            globals: self.bootstrap_globals()?,
            _depth: self.watch_dlt_depth(),
            standby: self.tasks.start_standby(),
        })
    }

    /// Makes this loop read through `services`: its processor's global tables are bound to
    /// the instance's stores, and its partitions are handed to and from the instance's standby
    /// tailer.
    pub(crate) fn join_services(
        &mut self,
        services: &InstanceServices,
    ) -> Result<(), RuntimeError> {
        if let Some(g) = &services.globals {
            g.bind(&self.globals)?;
        }
        self.tasks.set_standby(services.standby.clone());
        Ok(())
    }

    /// The block cache this loop's stores share (one per instance).
    pub(crate) fn cache(&self) -> &StoreCache {
        self.tasks.cache()
    }

    /// Shares `cache` with the instance's other processing threads.
    pub(crate) fn set_cache(&mut self, cache: StoreCache) {
        self.tasks.set_cache(cache);
    }

    /// Opens partitions only under `leases`, shared by the instance's processing threads.
    /// Registers this loop's tasks in the instance's queryable state (interactive queries).
    pub(crate) fn set_local_stores(&mut self, local: Arc<crate::query::LocalStores>) {
        local.set_layout(
            self.member.partitions(),
            self.opts.input_topics.first().map(String::as_str),
        );
        let topics = self
            .opts
            .input_topics
            .iter()
            .chain(self.opts.tables.iter().map(|(_, t)| t));
        local.set_sub_topologies(
            self.processor.store_name(),
            topics.map(|t| (t.clone(), self.processor.sub_topology(t))),
            std::iter::once(self.processor.store_name().to_string())
                .chain(self.processor.stores())
                .chain(self.opts.tables.iter().map(|(s, _)| s.clone()))
                .map(|s| {
                    let sub = self.processor.store_writer(&s);
                    (s, sub)
                }),
        );
        self.tasks.set_local_stores(local);
    }

    pub(crate) fn set_leases(&mut self, leases: Option<Arc<Leases>>) {
        self.tasks.set_leases(leases);
    }

    /// Reads the processor's global tables to their end and keeps them current (`None`
    /// without any).
    fn bootstrap_globals(
        &self,
    ) -> Result<Option<crate::processor::globals::Globals>, RuntimeError> {
        if self.globals.is_empty() {
            return Ok(None);
        }
        self.health.set_restoring(true);
        let globals = crate::processor::globals::bootstrap(
            &self.clients,
            &self.opts.state_dir,
            &self.globals,
            self.opts.restore_timeout,
        );
        self.health.set_restoring(false);
        globals.map(Some)
    }

    /// The DLT depth gauges' watcher (one per instance).
    fn watch_dlt_depth(&self) -> Option<DepthWatcher> {
        if self.opts.dlt_depth_interval.is_zero() {
            return None;
        }
        let dlts = self.opts.input_topics.iter().map(|t| dlt::topic_for(t));
        DepthWatcher::start(&self.clients, dlts.collect(), self.opts.dlt_depth_interval)
            .map_err(|e| tracing::warn!(error = %e, "DLT depth gauges are off"))
            .ok()
    }

    /// Joins the group and runs the loop until `shutdown` or a fatal error; then leaves the
    /// group and closes the stores.
    pub(crate) fn run_member(mut self, shutdown: &AtomicBool) -> Result<RunSummary, RuntimeError> {
        self.member.subscribe()?;
        let result = self.run_loop(shutdown);
        self.member.leave();
        self.tasks.close_all();
        self.tasks.clear_pending();
        self.tasks.set_standby(None);
        self.processor.close();
        result.map(|()| self.summary)
    }

    fn run_loop(&mut self, shutdown: &AtomicBool) -> Result<(), RuntimeError> {
        while !shutdown.load(Ordering::Relaxed) {
            let batch = self.poll_batch(shutdown)?;
            if batch.is_empty() && !work_pending(self.tasks.tasks(), now_ms()) {
                continue;
            }
            self.commit_batch(batch)?;
        }
        Ok(())
    }

    /// Collects records until the batch is full or the commit interval has passed.
    fn poll_batch(&mut self, shutdown: &AtomicBool) -> Result<Vec<OwnedMessage>, RuntimeError> {
        self.open_pending()?;
        let deadline = Instant::now() + self.opts.commit_interval;
        let mut batch: Vec<OwnedMessage> = Vec::with_capacity(self.last_batch_len);
        let mut bytes = 0usize;
        let max_records = self.isolation.max_records();
        while batch.len() < max_records
            && bytes < self.opts.max_batch_bytes
            && !shutdown.load(Ordering::Relaxed)
        {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            self.member.resume_due()?;
            self.member.retry_seeks()?;
            self.member.check_incomplete()?;
            // Liveness: at every idle poll, and every 256 records while busy (a clock read per
            // record is a measurable share of the loop).
            if batch.len().is_multiple_of(256) {
                self.health.beat();
            }
            // While partitions still wait to open, the batch takes what is fetched (waiting
            // a moment for the partitions the last step resumed) and the loop goes back to
            // opening them.
            let restoring = self.tasks.has_pending();
            let polled = self.member.poll(if restoring {
                left.min(RESTORING_POLL)
            } else {
                left
            })?;
            // Rebalances happened inside poll: drop records of revoked partitions (they were not
            // processed; their new owner reads them from the committed offset) and restore new ones.
            let events = self.member.take_events();
            if !events.is_empty() {
                self.on_group_events(events, &mut batch)?;
            }
            match polled {
                Polled::Record(m) => {
                    bytes += m.payload().map_or(0, <[u8]>::len) + m.key().map_or(0, <[u8]>::len);
                    if self.member.admit(&m)? {
                        batch.push(m);
                    } else if self.tasks.is_pending(m.partition()) {
                        self.tasks.dropped_pending(m.partition());
                    }
                }
                Polled::Rejoined => {
                    // Nothing processed under the refused membership survives it: its records
                    // are read again by the new one, from the group's committed offsets.
                    batch.clear();
                    self.tasks.close_all();
                    self.tasks.clear_pending();
                    self.alignment.retain(&BTreeSet::new());
                    self.watermarks.forget();
                }
                Polled::Nothing if restoring => break,
                Polled::Nothing => {}
            }
        }
        // The held partitions come back for the next batch, behind what this one fetched.
        self.member.release(&std::mem::take(&mut self.aligning));
        Ok(batch)
    }

    /// Opens the next step of the partitions still waiting for their tasks (see
    /// [`TaskManager::open_pending`]) and resumes them: between batches, so the partitions
    /// already open go on processing while the rest restore (Kafka Streams restores in its
    /// stream thread's loop too). Ready once none waits.
    fn open_pending(&mut self) -> Result<(), RuntimeError> {
        if !self.tasks.has_pending() {
            return Ok(());
        }
        let opening = self.tasks.open_pending(&self.member, &mut self.summary)?;
        // Asked again while the coordinator is away, up to the restore timeout, as a restore
        // waits for the broker.
        let deadline = Instant::now() + self.opts.restore_timeout;
        while !opening.resume.is_empty() {
            match self.member.seek_to_start(&opening.resume, &opening.rewind) {
                Ok(()) => break,
                Err(e) if Instant::now() < deadline => {
                    tracing::warn!(error = %e, partitions = opening.resume.len(), "reading the committed offsets of partitions just opened; asking again");
                    self.health.beat();
                    std::thread::sleep(Duration::from_secs(1));
                }
                Err(e) => return Err(e),
            }
        }
        self.member.take(opening.resume);
        let (open, waiting) = (self.tasks.tasks().len(), self.tasks.pending_count());
        let processed = self.summary.records;
        tracing::info!(
            open,
            waiting,
            processed,
            "partitions opened: open={open} waiting={waiting} processed={processed}"
        );
        if waiting == 0 {
            self.health.set_ready(true);
        }
        Ok(())
    }

    fn on_group_events(
        &mut self,
        events: Vec<GroupEvent>,
        batch: &mut Vec<OwnedMessage>,
    ) -> Result<(), RuntimeError> {
        self.health.set_ready(false);
        for event in events {
            match event {
                GroupEvent::Revoked(parts) => {
                    tracing::info!(partitions = ?parts, "partitions revoked");
                    telemetry::rebalance("revoke");
                    let live = self.member.revoke(&parts);
                    self.tasks.forget_pending(&parts);
                    batch.retain(|m| self.member.owns(m.topic(), m.partition()));
                    self.tasks.retain(&live);
                    self.alignment.retain(&live);
                    self.watermarks.forget();
                }
                // The consumer protocol follows every revocation with an empty assignment.
                GroupEvent::Assigned(parts) if parts.is_empty() => {}
                GroupEvent::Assigned(parts) => {
                    tracing::info!(partitions = ?parts, "partitions assigned");
                    telemetry::rebalance("assign");
                    let parts = self.member.complete_assignment(parts)?;
                    if parts.is_empty() {
                        continue;
                    }
                    let numbers: BTreeSet<i32> = parts.iter().map(|(_, p)| *p).collect();
                    let new: Vec<i32> = numbers
                        .into_iter()
                        .filter(|p| !self.tasks.contains(*p) && !self.tasks.is_pending(*p))
                        .collect();
                    self.tasks.claim(&new);
                    self.member.await_stable_offsets(&parts, &new);
                    // A few are opened before any record, as they always were; more wait
                    // paused and open a step at a time between batches (`open_pending`).
                    if new.len() <= self.tasks.step() {
                        self.tasks.open_all(&new, &self.member, &mut self.summary)?;
                    }
                    let (open, waiting): (Vec<_>, Vec<_>) = parts
                        .into_iter()
                        .partition(|(_, p)| self.tasks.contains(*p));
                    self.member.hold(&waiting)?;
                    self.tasks.queue(waiting);
                    self.member.take(open);
                }
            }
        }
        self.health.set_ready(!self.tasks.has_pending());
        Ok(())
    }

    /// Runs `f` on the engine over this loop's tasks, with the producer as its output.
    fn with_engine<T>(&mut self, f: impl FnOnce(&mut Engine<'_, P, KafkaOut<'_>>) -> T) -> T {
        let EngineOutput {
            mut out,
            stamps,
            produced,
            processed,
        } = self.collector.engine_output();
        let (isolated, forced_dead_letter) = self.isolation.engine_parts();
        let mut engine = Engine {
            opts: &self.opts,
            processor: &mut self.processor,
            tasks: self.tasks.tasks_mut(),
            summary: &mut self.summary,
            isolated,
            forced_dead_letter,
            produced,
            processed,
            stamps,
            out: &mut out,
        };
        f(&mut engine)
    }

    /// Processes one polled record inside the open transaction.
    fn handle(&mut self, m: &OwnedMessage, now: i64) -> Result<(), SinkError> {
        let mut headers = std::mem::take(&mut self.headers);
        let record = Record::of_message(m, headers.of(m));
        let handled = self.with_engine(|e| e.handle(&record, now));
        self.headers = headers;
        handled
    }

    /// Fires the timers due at the start of a batch (at most `budget`); how many fired.
    fn fire_due(&mut self, budget: usize, now: i64) -> Result<usize, SinkError> {
        self.collector.set_current(usize::MAX);
        self.with_engine(|e| e.fire_due(budget, now))
    }

    /// Fires the event-time timers the last record's partition reached (at most `budget`).
    fn fire_event_time(
        &mut self,
        partition: i32,
        budget: usize,
        now: i64,
    ) -> Result<usize, SinkError> {
        self.with_engine(|e| e.fire_event_time(partition, budget, now))
    }

    /// Continues draining parked keys left draining by earlier batches (a chunk each).
    fn drain_parked(&mut self, now: i64) -> Result<(), SinkError> {
        self.with_engine(|e| e.drain_parked(now))
    }

    fn commit_batch(&mut self, batch: Vec<OwnedMessage>) -> Result<(), RuntimeError> {
        let started = Instant::now();
        self.last_batch_len = batch.len();
        // The membership the batch's offsets are sent under: if it changed by the time an
        // unknown outcome is looked into, the group's offsets may be another owner's.
        let generation = self.member.generation();
        let result = self.try_commit_batch(&batch);
        let deliveries = self.collector.take_deliveries();
        self.isolation.batch_ended();
        match result {
            Ok(done) => {
                drop(deliveries);
                self.on_committed(&batch, done, started)
            }
            Err(failure) => self.on_failed(&batch, *failure, deliveries, started, generation),
        }
    }

    /// After a commit: the overlays go to RocksDB with the changelog offsets reached, the
    /// counters move, and records the batch did not get to (closed early, or held for
    /// alignment) are read again.
    fn on_committed(
        &mut self,
        batch: &[OwnedMessage],
        done: Committed,
        started: Instant,
    ) -> Result<(), RuntimeError> {
        self.tasks.apply_committed(&done.ends, &done.next_offsets)?;
        let (handled, rest) = done.order.split_at(done.handled.min(done.order.len()));
        let handled: Vec<&OwnedMessage> = handled.iter().filter_map(|i| batch.get(*i)).collect();
        self.summary.commits += 1;
        self.summary.records += handled.len() as u64;
        let mut per_partition: BTreeMap<(&str, i32), u64> = BTreeMap::new();
        for m in &handled {
            *per_partition.entry((m.topic(), m.partition())).or_default() += 1;
        }
        for ((t, p), n) in per_partition {
            telemetry::consumed(t, p, n);
        }
        telemetry::committed(handled.len(), started.elapsed());
        telemetry::end_to_end_latency(
            now_ms(),
            handled.iter().filter_map(|m| m.timestamp().to_millis()),
        );
        self.collector.publish_counts();
        if let Some(stats) = self.tasks.record_cache_stats() {
            telemetry::record_cache(self.opts.thread, stats);
        }
        self.isolation
            .committed(&done.next_offsets, handled.len(), !rest.is_empty());
        let held = self.alignment.committed();
        if !rest.is_empty() || !held.is_empty() {
            // One seek for both: a partition's held records come before its unread rest.
            let again = rest.iter().chain(&held);
            self.member.seek_back(again.filter_map(|i| batch.get(*i)))?;
        }
        if !held.is_empty() {
            let pairs: BTreeSet<(String, i32)> = held
                .iter()
                .filter_map(|i| batch.get(*i))
                .map(|m| (m.topic().to_string(), m.partition()))
                .collect();
            self.aligning = pairs.into_iter().collect();
            self.member.hold(&self.aligning)?;
        }
        self.purger.committed(&done.next_offsets);
        Ok(())
    }

    /// A batch that did not commit (or may have): settle the producer, learn the outcome if it
    /// is unknown, and otherwise drop the batch's writes, blame the record that made it fail
    /// (if one did) and read the batch again. Only a producer superseded by a live process
    /// with this instance's id ends the instance.
    fn on_failed(
        &mut self,
        batch: &[OwnedMessage],
        failure: BatchFailure,
        deliveries: Vec<(DeliveryFuture, usize)>,
        started: Instant,
        generation: Option<(i32, String)>,
    ) -> Result<(), RuntimeError> {
        let BatchFailure {
            error,
            culprit,
            next_offsets,
            order,
            handled,
            slow,
        } = failure;
        // What the batch broadcast may not have committed: say it again.
        self.watermarks.forget();
        if let Some((on, detail)) = error.waiting_on() {
            self.health.waits().start(on, detail);
        }
        if error.commit_outcome_unknown() {
            // A commit flushes the batch's records first: stuck there, it may be waiting on a
            // partition with no leader rather than on the coordinator. Asked now, as the paths
            // below that learn the outcome return before the look at the end.
            self.diagnose_wait(&error);
        }
        let age = started.elapsed();
        match &error {
            SinkError::Abortable(_)
            | SinkError::NoGroupMetadata
            | SinkError::Unwritable { .. }
            | SinkError::StateRead(_) => {
                if let Err(abort_err) = self.collector.abort() {
                    tracing::warn!(error = %abort_err, "abort failed; recreating the producer");
                    let cause = match abort_err {
                        SinkError::Stuck(_) => "stuck",
                        _ => "fatal",
                    };
                    self.recover_producer(&abort_err, cause, age)?;
                }
            }
            SinkError::Fenced { .. } => self.recover_producer(&error, "epoch-bumped", age)?,
            SinkError::Fatal(_) => self.recover_producer(&error, "fatal", age)?,
            // A stuck call wedged the producer; stuck in the commit, the outcome is unknown.
            SinkError::Stuck(_) if !error.commit_outcome_unknown() => {
                self.recover_producer(&error, "stuck", age)?
            }
            SinkError::CommitUnknown(_) | SinkError::Stuck(_) => {
                let cause = match error {
                    SinkError::Stuck(_) => "stuck",
                    _ => "commit-unknown",
                };
                self.recover_producer(&error, cause, age)?;
                if next_offsets.is_empty() {
                    // No input offset to ask the group about (due timers, draining followers,
                    // records held for alignment): the changelogs decide. Every task is opened
                    // again and restored to their last stable offset, which holds this batch's
                    // state changes (a fired timer's removal among them) if and only if it
                    // committed.
                    tracing::warn!(error = %error, "the outcome of a commit without input offsets is unknown: restoring every task from its changelogs");
                    telemetry::commit_resolved("restored");
                    return self.restore_after_unknown(batch);
                }
                let now = self.member.generation();
                if now != generation || faults::take_membership_change(&self.opts.app_id) {
                    // Another owner may have committed past the batch's offsets since: they
                    // no longer tell this batch's outcome.
                    tracing::warn!(error = %error, before = ?generation, now = ?now, "the outcome of a commit is unknown and the group membership changed since its offsets were sent: restoring every task from its changelogs");
                    telemetry::commit_resolved("restored");
                    return self.restore_after_unknown(batch);
                }
                if self
                    .member
                    .committed_for_sure(&next_offsets, &self.health)?
                {
                    tracing::warn!(error = %error, records = handled, "the commit whose outcome was unknown had landed: keeping the batch");
                    telemetry::commit_resolved("committed");
                    let done = Committed {
                        ends: HashMap::new(),
                        order,
                        handled,
                        next_offsets,
                    };
                    return self.on_committed(batch, done, started);
                }
                tracing::warn!(error = %error, records = batch.len(), "the commit whose outcome was unknown did not land: processing the batch again");
                telemetry::commit_resolved("not-committed");
            }
        }
        self.tasks.drop_batch();
        self.collector.forget_counts();
        self.alignment.drop_batch();
        self.summary.aborts += 1;
        telemetry::aborted();
        tracing::warn!(error = %error, records = batch.len(), "batch aborted");
        if let Some((on, detail)) = self
            .isolation
            .blame(batch, &error, culprit, deliveries, slow)
        {
            // A delivery names the partition whose leader or replicas are away.
            self.health.waits().start(on, detail);
        }
        self.diagnose_wait(&error);
        self.member.seek_back(batch.iter())?;
        Ok(())
    }

    /// A wait on partitions (records not acknowledged, deliveries timed out), or a batch that
    /// failed on a bare timeout, a stuck call or a commit of unknown outcome, says which
    /// partition and why, from fresh metadata: no leader, or too few in-sync replicas.
    fn diagnose_wait(&mut self, error: &SinkError) {
        use rdkafka::types::RDKafkaErrorCode as C;
        let timed_out = matches!(
            error.kafka_error().and_then(KafkaError::rdkafka_error_code),
            Some(C::OperationTimedOut | C::MessageTimedOut | C::RequestTimedOut)
        ) || matches!(error, SinkError::Stuck(_) | SinkError::CommitUnknown(_));
        let waits = self.health.waits();
        let on_partitions = waits.is_waiting_on(WaitingOn::PartitionLeader)
            || waits.is_waiting_on(WaitingOn::InSyncReplicas);
        if !timed_out && !on_partitions {
            return;
        }
        let repartition = self.processor.repartition_topics();
        let also = self
            .tasks
            .changelogs()
            .map(String::as_str)
            .chain(repartition.iter().map(String::as_str));
        if let Some((on, detail)) = self.collector.diagnose(also) {
            if on == WaitingOn::InSyncReplicas {
                // The more precise reason the records were not acknowledged.
                waits.clear_if(WaitingOn::PartitionLeader);
            }
            waits.start(on, detail);
        }
    }

    /// Replaces the producer in place (see [`RecordCollector::recover_producer`]).
    fn recover_producer(
        &mut self,
        error: &SinkError,
        cause: &'static str,
        txn_age: Duration,
    ) -> Result<(), RuntimeError> {
        self.collector
            .recover_producer(error, cause, txn_age, &self.member, &self.health)
    }

    /// After a commit whose outcome is unknown and cannot be read from the group's offsets:
    /// drops every task (its overlays and open stores) and opens it again, restored from its
    /// changelogs to their last stable offset — the truth whatever the outcome — then reads
    /// the batch's records again from the group's committed offsets.
    fn restore_after_unknown(&mut self, batch: &[OwnedMessage]) -> Result<(), RuntimeError> {
        self.collector.forget_counts();
        self.alignment.drop_batch();
        self.tasks.reopen_all(&self.member, &mut self.summary)?;
        let mut pairs: Vec<(String, i32)> = batch
            .iter()
            .map(|m| (m.topic().to_string(), m.partition()))
            .collect();
        pairs.sort();
        pairs.dedup();
        if !pairs.is_empty() {
            self.member.seek_to_committed(&pairs)?;
        }
        Ok(())
    }

    /// The transaction of one batch. Records are handled in order until the batch is done or
    /// half the transaction timeout has gone (the rest is read again), so a batch always
    /// commits well inside `transaction.timeout.ms`.
    fn try_commit_batch(&mut self, batch: &[OwnedMessage]) -> Result<Committed, Box<BatchFailure>> {
        let order = fair_order(batch, self.isolation.alone());
        let processor = &self.processor;
        let headers = &mut self.headers;
        let (order, mut gate) = self
            .alignment
            .begin_batch(batch, order, |m| alignment_time(processor, headers, m));
        // The tasks (partition number, sub-topology) that handled a record: not idle.
        let mut busy: BTreeSet<(i32, usize)> = BTreeSet::new();
        let tracks_busy = self.watermarks.is_on();
        let plain = |error: SinkError, order: Vec<usize>| {
            Box::new(BatchFailure {
                error,
                culprit: None,
                next_offsets: Vec::new(),
                order,
                handled: 0,
                slow: None,
            })
        };
        // Round trips asked before the transaction begins, not inside it.
        let member = &self.member;
        self.alignment
            .ask_ends(batch, &mut gate, |t, p| member.read_to_its_end(t, p));
        if let Err(e) = self.collector.begin() {
            return Err(plain(e, order));
        }
        // Keyed by the batch's own topic names: no String per record.
        let mut next_offsets: BTreeMap<(&str, i32), i64> = BTreeMap::new();
        let now = now_ms();
        if let Err(e) = self.drain_parked(now) {
            return Err(plain(e, order));
        }
        // Timers fired count like records against the batch's limit.
        let limit = self.opts.max_batch_records.max(1);
        let mut fired = match self.fire_due(limit, now) {
            Ok(n) => n,
            Err(e) => return Err(plain(e, order)),
        };
        let budget = self.opts.transaction_timeout / 2;
        let begun = Instant::now();
        let mut handled = order.len();
        let mut slow: Option<(usize, Duration)> = None;
        let mut last = begun;
        let mut previous = 0;
        for (k, &i) in order.iter().enumerate() {
            let m = &batch[i];
            // One clock read per record: it times the previous record's handler call too.
            let t = Instant::now();
            if k > 0 {
                let took = t.duration_since(last);
                if took >= budget && slow.is_none_or(|(_, s)| took > s) {
                    slow = Some((previous, took));
                }
                if t.duration_since(begun) >= budget {
                    handled = k;
                    tracing::warn!(handled = k, of = batch.len(), "batch closed early: half the transaction timeout is used; the rest is read again");
                    telemetry::batch_closed_early();
                    break;
                }
            }
            if k + fired >= limit {
                handled = k;
                tracing::debug!(
                    handled = k,
                    fired,
                    "batch closed at its limit by timers fired; the rest is read again"
                );
                break;
            }
            last = t;
            previous = i;
            let is_alone = self.isolation.is_alone(m);
            if is_alone && k > 0 {
                // Commit what came before; the suspect starts the next transaction.
                handled = k;
                break;
            }
            let member = &self.member;
            if !self
                .alignment
                .may_handle(&mut gate, k, i, m, |t, p| member.read_to_its_end(t, p))
            {
                continue;
            }
            // A mark-only record (another task's watermark) is no work: counted as work, it made
            // the reading task say "busy" in its own marks, and in a cycle of sub-topologies
            // (a foreign-key join: subscriptions one way, responses back) the marks then went
            // round for ever, a transaction every few hundred milliseconds on an idle instance
            // and repartition lag never 0.
            if tracks_busy && !is_mark_only(m) {
                busy.insert((m.partition(), self.processor.sub_topology(m.topic())));
            }
            self.collector.set_current(i);
            let handled_record = self.handle(m, now).and_then(|()| {
                let left = limit.saturating_sub(k + 1 + fired);
                self.fire_event_time(m.partition(), left, now)
            });
            if let Err(error) = handled_record.map(|n| fired += n) {
                let culprit = matches!(error, SinkError::Unwritable { .. }).then_some(i);
                return Err(Box::new(BatchFailure {
                    error,
                    culprit,
                    next_offsets: Vec::new(),
                    order,
                    handled: k,
                    slow,
                }));
            }
            next_offsets.insert((m.topic(), m.partition()), m.offset() + 1);
            self.alignment.handled(&mut gate, i, m);
            if is_alone {
                handled = 1;
                let took = last.elapsed();
                if took >= budget {
                    slow = Some((i, took));
                }
                break;
            }
        }
        if handled == order.len() {
            let took = last.elapsed();
            if took >= budget && slow.is_none_or(|(_, s)| took > s) {
                slow = Some((previous, took));
            }
        }
        self.alignment
            .end_batch(gate, batch, &order[handled.min(order.len())..]);
        let owned_offsets: Vec<(String, i32, i64)> = next_offsets
            .iter()
            .map(|((t, p), o)| (t.to_string(), *p, *o))
            .collect();
        let fail = |error: SinkError, slow| {
            Box::new(BatchFailure {
                error,
                culprit: None,
                next_offsets: owned_offsets.clone(),
                order: order.clone(),
                handled,
                slow,
            })
        };
        self.tasks.purge_expired_dedup(now);
        if self.watermarks.is_on() {
            self.broadcast_watermarks(&busy)
                .map_err(|e| fail(e, slow))?;
        }
        let last_changelog = self
            .collector
            .send_changelogs(&mut self.tasks, now)
            .map_err(|e| fail(e, slow))?;
        let mut offsets = TopicPartitionList::new();
        for ((t, p), o) in &next_offsets {
            offsets
                .add_partition_offset(t, *p, Offset::Offset(*o))
                .map_err(|e| fail(SinkError::Abortable(e), slow))?;
        }
        let committing = Instant::now();
        if self.collector.is_transactional() {
            let group = self
                .member
                .group_metadata()
                .and_then(|g| g.into_rdkafka())
                .ok_or_else(|| fail(SinkError::NoGroupMetadata, slow))?;
            self.collector
                .send_offsets(&offsets, group)
                .map_err(|e| fail(e, slow))?;
            if !next_offsets.is_empty() && faults::take_abort_next_batch(&self.opts.app_id) {
                // Test fault: what an abortable transaction error does to the batch.
                tracing::warn!("test fault: aborting a batch before its commit");
                let e = KafkaError::Global(rdkafka::types::RDKafkaErrorCode::Fail);
                return Err(fail(SinkError::Abortable(e), slow));
            }
            self.collector.commit().map_err(|e| fail(e, slow))?;
            // Test faults: a landed commit reported unknown, without input offsets, or with
            // them and (checked in `on_failed`) a membership change since.
            let app = &self.opts.app_id;
            let fault = if next_offsets.is_empty() {
                faults::take_offsetless_commit_unknown(app)
            } else {
                faults::membership_change_armed(app)
            };
            if fault {
                tracing::warn!(
                    offsetless = next_offsets.is_empty(),
                    "test fault: reporting a landed commit as unknown"
                );
                let e = KafkaError::Global(rdkafka::types::RDKafkaErrorCode::OperationTimedOut);
                return Err(fail(SinkError::CommitUnknown(e), slow));
            }
        } else {
            // At-least-once: outputs and changelog acknowledged first, then the offsets,
            // without waiting for the coordinator (a lost commit only repeats records, which
            // at-least-once allows and dedup mostly absorbs); the last ones are committed
            // synchronously at shutdown.
            self.collector.commit().map_err(|e| fail(e, slow))?;
            self.member
                .commit_async(&owned_offsets)
                .map_err(|e| fail(SinkError::Abortable(e), slow))?;
        }
        telemetry::commit_latency(committing.elapsed());
        self.member.note_committed(next_offsets.into_iter());
        let mut ends = HashMap::new();
        for (p, f) in last_changelog {
            match self.collector.delivered(f) {
                Some((_, offset)) => {
                    ends.insert(p, offset);
                }
                None => tracing::warn!(partition = p.1, store = p.0, "no delivery report for a committed changelog record; the next restore replays more"),
            }
        }
        Ok(Committed {
            ends,
            order,
            handled,
            next_offsets: owned_offsets,
        })
    }

    /// Broadcasts the stream time of this loop's upstream tasks to the repartition topics they
    /// write (see [`crate::processor::watermarks`]), in the open transaction. `busy`: the tasks
    /// that handled a record in this batch.
    fn broadcast_watermarks(&mut self, busy: &BTreeSet<(i32, usize)>) -> Result<(), SinkError> {
        let Some(partitions) = self.member.partitions() else {
            return Ok(());
        };
        let (opts, processor, member, collector) =
            (&self.opts, &self.processor, &self.member, &self.collector);
        let mut caught_up = |p: i32, sub: usize| {
            opts.input_topics
                .iter()
                .chain(opts.tables.iter().map(|(_, t)| t))
                .filter(|t| processor.sub_topology(t) == sub)
                .all(|t| member.read_to_its_end(t, p))
        };
        let mut send = |topic: &str, q: i32, headers: &[(String, Vec<u8>)], ts: Option<i64>| {
            collector.send_to(topic, q, ts, headers)
        };
        let sent = self.watermarks.broadcast(
            self.tasks.tasks(),
            partitions,
            busy,
            &mut caught_up,
            &mut send,
        )?;
        if sent > 0 {
            telemetry::watermarks_sent(sent);
        }
        Ok(())
    }
}

/// Whether `m` only carries another task's watermark (see [`crate::processor::watermarks`]).
fn is_mark_only(m: &OwnedMessage) -> bool {
    m.headers().is_some_and(|h| {
        h.iter().any(|h| {
            h.key == crate::processor::engine::MARK_ONLY && h.value == Some(b"1".as_slice())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(topic: &str, partition: i32, offset: i64) -> OwnedMessage {
        OwnedMessage::new(
            None,
            None,
            topic.to_string(),
            rdkafka::Timestamp::NotAvailable,
            partition,
            offset,
            None,
        )
    }

    #[test]
    fn a_batch_is_handled_round_robin_over_its_partitions_each_in_offset_order() {
        // As polled: all of partition 0, then partition 1, then the retry level.
        let batch = vec![
            msg("in", 0, 10),
            msg("in", 0, 11),
            msg("in", 0, 12),
            msg("in", 1, 5),
            msg("in", 1, 6),
            msg("in.retry.1", 0, 3),
        ];
        assert_eq!(fair_order(&batch, None), vec![0, 3, 5, 1, 4, 2]);
        // A record to run alone brings its partition's run to the front.
        let alone = ("in".to_string(), 1, 5);
        assert_eq!(fair_order(&batch, Some(&alone)), vec![3, 0, 5, 4, 1, 2]);
        // One partition: poll order.
        assert_eq!(fair_order(&batch[..3], None), vec![0, 1, 2]);
    }
}
