//! Timestamp alignment inside a task (Kafka Streams' record choice across a task's
//! partitions, `max.task.idle.ms`): within one sub-topology on one partition number, the
//! records of its table topics and of its inputs (not their retry levels) are handled in
//! event-time order — a table record before a stream record of the same time — and a record is
//! handled only once every other of these partitions has shown it holds nothing earlier: a
//! record of it at a later time is in the batch or was handled, or it is read to its end (the
//! consumer's position at its last stable offset; with `processor.max_task_idle_ms = n > 0`,
//! read to its end for `n` ms). Otherwise the task is *held*: its aligned records are read
//! again in the next batch, and the partitions they came from are paused while that batch is
//! polled: after the seek they would come back first and could fill a small batch
//! (`processor.max_batch_records`) every time, keeping out the very records they wait for (a
//! foreign-key join's task, seven topics on one partition number, stalled that way at 20
//! records per batch). Each partition is assumed to be in event-time order (a record
//! older than one before it in its own partition is handled where it stands). A sub-topology
//! reading one topic (a repartition topic, most often) has nothing to align.
//!
//! The time is the one the sources' timestamp extractors give (what moves stream time), not
//! necessarily the Kafka timestamp.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use rdkafka::message::OwnedMessage;
use rdkafka::Message;

use super::runtime::RuntimeOptions;

/// An aligned (topic, partition): the topic by its index among the aligned topics, so that
/// the per-record bookkeeping neither allocates nor hashes a topic name.
type Tp = (usize, i32);

/// A timestamp per aligned (topic, partition).
pub(super) type Times = HashMap<Tp, i64>;

/// The topics that take part in alignment, with their rank (tables first at equal times, then
/// inputs) and sub-topology: those of every sub-topology reading two or more of them. None
/// when `processor.max_task_idle_ms` is `-1`.
fn aligned_topics(
    opts: &RuntimeOptions,
    sub_of: impl Fn(&str) -> usize,
) -> Vec<(String, u8, usize)> {
    if opts.max_task_idle_ms < 0 {
        return Vec::new();
    }
    let all: Vec<(String, u8, usize)> = opts
        .tables
        .iter()
        .map(|(_, t)| (t.clone(), 0u8))
        .chain(opts.input_topics.iter().map(|t| (t.clone(), 1u8)))
        .map(|(t, r)| {
            let sub = sub_of(&t);
            (t, r, sub)
        })
        .collect();
    let mut per_sub: BTreeMap<usize, usize> = BTreeMap::new();
    for (_, _, sub) in &all {
        *per_sub.entry(*sub).or_default() += 1;
    }
    let mut aligned: Vec<(String, u8, usize)> = Vec::new();
    for t in all
        .into_iter()
        .filter(|(_, _, sub)| per_sub.get(sub).is_some_and(|n| *n >= 2))
    {
        // A topic once, at its first rank: the bookkeeping keys topics by their index here.
        if !aligned.iter().any(|(name, _, _)| *name == t.0) {
            aligned.push(t);
        }
    }
    aligned
}

/// The rank and sub-topology of `topic` among the aligned topics (none: not aligned).
fn rank_of(aligned: &[(String, u8, usize)], topic: &str) -> Option<(u8, usize)> {
    slot_of(aligned, topic).map(|(_, r, s)| (r, s))
}

/// The index, rank and sub-topology of `topic` among the aligned topics (none: not aligned).
fn slot_of(aligned: &[(String, u8, usize)], topic: &str) -> Option<(usize, u8, usize)> {
    aligned
        .iter()
        .position(|(t, _, _)| t == topic)
        .map(|i| (i, aligned[i].1, aligned[i].2))
}

/// A record's Kafka timestamp (none: first), the alignment time of a processor that extracts
/// none of its own.
pub(super) fn kafka_ts(m: &OwnedMessage) -> i64 {
    m.timestamp().to_millis().unwrap_or(i64::MIN)
}

/// Reorders `order` so that, per task (sub-topology and partition number), the aligned records
/// are merged by (time, rank, topic), each partition kept in offset order; they take the slots
/// aligned records had, and every other record keeps its slot. `ts` is each batch record's
/// time (by batch index).
fn merge(
    batch: &[OwnedMessage],
    order: Vec<usize>,
    ts: &[i64],
    aligned: &[(String, u8, usize)],
) -> Vec<usize> {
    // Per task: the slots of its aligned records, and each topic's queue (by topic index).
    type Queues = BTreeMap<usize, std::collections::VecDeque<usize>>;
    let mut slots: BTreeMap<(usize, i32), (Vec<usize>, Queues)> = BTreeMap::new();
    for (k, &i) in order.iter().enumerate() {
        let m = &batch[i];
        let Some((t, _, sub)) = slot_of(aligned, m.topic()) else {
            continue;
        };
        let (s, q) = slots.entry((sub, m.partition())).or_default();
        s.push(k);
        q.entry(t).or_default().push_back(i);
    }
    let mut out = order;
    for (_, (s, mut queues)) in slots {
        if queues.len() < 2 {
            continue;
        }
        for k in s {
            let next = queues
                .iter()
                .filter_map(|(&t, q)| {
                    let i = *q.front()?;
                    let (name, r, _) = &aligned[t];
                    Some((
                        (ts.get(i).copied().unwrap_or(i64::MIN), *r, name.as_str()),
                        t,
                    ))
                })
                .min();
            let Some((_, topic)) = next else { break };
            if let Some(i) = queues.get_mut(&topic).and_then(|q| q.pop_front()) {
                out[k] = i;
            }
        }
    }
    out
}

/// One batch's view of alignment.
#[derive(Default)]
pub(super) struct Gate {
    /// Tasks (sub-topology, partition number) whose aligned records wait for the next batch.
    held: BTreeSet<(usize, i32)>,
    /// Aligned records held (indexes into the batch): read again.
    held_records: Vec<usize>,
    /// Last slot in the order of each aligned (topic, partition) of the batch.
    last_slot: HashMap<Tp, usize>,
    /// Latest time handled per aligned (topic, partition): committed, then this batch's.
    seen: Times,
    /// Whether an aligned (topic, partition) is read to its end (asked once per batch).
    caught_up: HashMap<Tp, bool>,
    /// Each batch record's time (by batch index; `i64::MIN` for records not aligned).
    times: Vec<i64>,
}

/// Timestamp alignment across batches: the aligned topics, what each aligned partition
/// handled last and offers next, how long each task has idled on a partition read to its end,
/// and the open batch's outcome (applied only if it commits).
#[derive(Default)]
pub(super) struct Alignment {
    /// The topics taking part, with their rank (tables first) and sub-topology.
    aligned: Vec<(String, u8, usize)>,
    /// `processor.max_task_idle_ms`.
    max_task_idle_ms: i64,
    /// The latest timestamp committed per input or table (topic, partition).
    seen: Times,
    /// A lower bound of the timestamps not handled yet per input or table (topic, partition):
    /// the earliest record of it a batch polled and did not handle (records are assumed in
    /// timestamp order within a partition). It lets a partition number progress when a batch
    /// holds records of only one of its topics.
    head: Times,
    /// The open batch's records held (indexes into the batch), the latest timestamps it
    /// handled and the heads it left: applied if it commits (on any path), dropped if not.
    batch: (Vec<usize>, Times, Times),
    /// With `max_task_idle_ms > 0`: since when each task (sub-topology, partition number) has
    /// waited for a partition that is read to its end.
    idle_since: HashMap<(usize, i32), Instant>,
}

impl Alignment {
    /// Alignment of `opts`' tables and inputs, with `sub_of` each topic's sub-topology.
    pub(super) fn new(opts: &RuntimeOptions, sub_of: impl Fn(&str) -> usize) -> Self {
        Self {
            aligned: aligned_topics(opts, sub_of),
            max_task_idle_ms: opts.max_task_idle_ms,
            ..Self::default()
        }
    }

    /// Whether any task aligns its inputs.
    pub(super) fn is_on(&self) -> bool {
        !self.aligned.is_empty()
    }

    /// Starts a batch: each aligned record's time (`time_of`, the sources' extractor), and the
    /// batch's `order` merged by time per task. Returns the order and the batch's gate.
    pub(super) fn begin_batch(
        &mut self,
        batch: &[OwnedMessage],
        order: Vec<usize>,
        mut time_of: impl FnMut(&OwnedMessage) -> i64,
    ) -> (Vec<usize>, Gate) {
        self.batch = (Vec::new(), HashMap::new(), HashMap::new());
        let mut gate = Gate::default();
        if !self.is_on() {
            return (order, gate);
        }
        gate.times = batch
            .iter()
            .map(|m| match rank_of(&self.aligned, m.topic()) {
                Some(_) => time_of(m),
                None => i64::MIN,
            })
            .collect();
        let aligned = &self.aligned;
        let order = merge(batch, order, &gate.times, aligned);
        for (k, &i) in order.iter().enumerate() {
            let m = &batch[i];
            if let Some((t, _, _)) = slot_of(aligned, m.topic()) {
                gate.last_slot.insert((t, m.partition()), k);
            }
        }
        gate.seen = self.seen.clone();
        (order, gate)
    }

    /// Asks, before the transaction begins, whether the aligned partitions a held record would
    /// wait for are read to their end (a broker round trip each, `read_to_its_end`). Those
    /// with a record in the batch are asked only if a record waits for them.
    pub(super) fn ask_ends(
        &self,
        batch: &[OwnedMessage],
        gate: &mut Gate,
        read_to_its_end: impl Fn(&str, i32) -> bool,
    ) {
        if !self.is_on() {
            return;
        }
        let present: BTreeSet<(&str, i32)> =
            batch.iter().map(|m| (m.topic(), m.partition())).collect();
        let tasks: BTreeSet<(usize, i32)> = batch
            .iter()
            .filter_map(|m| rank_of(&self.aligned, m.topic()).map(|(_, sub)| (sub, m.partition())))
            .collect();
        for (sub, p) in tasks {
            for (j, (t, _, s)) in self.aligned.iter().enumerate() {
                if *s == sub && !present.contains(&(t.as_str(), p)) {
                    let c = read_to_its_end(t, p);
                    gate.caught_up.insert((j, p), c);
                }
            }
        }
    }

    /// Whether record `m` (index `i` of the batch, slot `k` of the order) may be handled now —
    /// every other table or input partition of its task (its sub-topology on its partition
    /// number) holds nothing that must come first. If not, the task is held for the rest of
    /// the batch and `m` is read again. Records of other topics are always handled.
    pub(super) fn may_handle(
        &mut self,
        gate: &mut Gate,
        k: usize,
        i: usize,
        m: &OwnedMessage,
        read_to_its_end: impl Fn(&str, i32) -> bool,
    ) -> bool {
        let Some((ti, r, sub)) = slot_of(&self.aligned, m.topic()) else {
            return true;
        };
        let t = gate.times.get(i).copied().unwrap_or(i64::MIN);
        let p = m.partition();
        if gate.held.contains(&(sub, p)) {
            gate.held_records.push(i);
            return false;
        }
        let mut waited_idle = false;
        for (j, (other, other_rank, s)) in self.aligned.iter().enumerate() {
            if *s != sub || j == ti {
                continue;
            }
            let key = (j, p);
            if gate.last_slot.get(&key).is_some_and(|l| *l > k) {
                continue;
            }
            let (this, that) = ((t, r, m.topic()), (*other_rank, other.as_str()));
            if seen_past(gate.seen.get(&key).copied(), this, that)
                || seen_past(self.head.get(&key).copied(), this, that)
            {
                continue;
            }
            let caught_up = match gate.caught_up.get(&key) {
                Some(c) => *c,
                None => {
                    let c = read_to_its_end(other, p);
                    gate.caught_up.insert(key, c);
                    c
                }
            };
            // Read to its end: with `max_task_idle_ms > 0`, still waited for that long (a
            // producer that lags), then passed.
            let idle_wait = caught_up && self.max_task_idle_ms > 0 && {
                waited_idle = true;
                let since = *self.idle_since.entry((sub, p)).or_insert_with(Instant::now);
                since.elapsed() < Duration::from_millis(self.max_task_idle_ms.unsigned_abs())
            };
            if !caught_up || idle_wait {
                tracing::debug!(
                    topic = m.topic(),
                    partition = p,
                    offset = m.offset(),
                    waits_for = %other,
                    "held for timestamp alignment"
                );
                gate.held.insert((sub, p));
                gate.held_records.push(i);
                return false;
            }
        }
        if !waited_idle {
            self.idle_since.remove(&(sub, p));
        }
        true
    }

    /// Record `m` (index `i` of the batch) was handled: its partition has shown its time.
    pub(super) fn handled(&self, gate: &mut Gate, i: usize, m: &OwnedMessage) {
        if let Some((t, _, _)) = slot_of(&self.aligned, m.topic()) {
            let seen = gate.seen.entry((t, m.partition())).or_insert(i64::MIN);
            *seen = (*seen).max(gate.times.get(i).copied().unwrap_or(i64::MIN));
        }
    }

    /// Ends the batch's handling: `rest` (indexes into the batch) were not handled. Keeps the
    /// first record (in offset order) of each aligned partition left for later (held, or after
    /// the batch closed) as that partition's head: in a partition in timestamp order nothing
    /// after it is earlier. In one out of order (late stream records beside a versioned table)
    /// its timestamp, not the least one left, is what the partition offers next: taking the
    /// least could hold two partitions each waiting for the other for good.
    pub(super) fn end_batch(&mut self, gate: Gate, batch: &[OwnedMessage], rest: &[usize]) {
        if !self.is_on() {
            return;
        }
        let mut heads: Times = HashMap::new();
        for &i in gate.held_records.iter().chain(rest) {
            let m = &batch[i];
            if let Some((t, _, _)) = slot_of(&self.aligned, m.topic()) {
                heads
                    .entry((t, m.partition()))
                    .or_insert(gate.times.get(i).copied().unwrap_or(i64::MIN));
            }
        }
        self.batch = (gate.held_records, gate.seen, heads);
    }

    /// The batch committed: what it handled and left becomes the alignment's. Returns the held
    /// records (indexes into the batch), to be read again.
    pub(super) fn committed(&mut self) -> Vec<usize> {
        let (held, seen, heads) = std::mem::take(&mut self.batch);
        if self.is_on() {
            self.seen = seen;
            self.head.extend(heads);
        }
        held
    }

    /// Drops the open batch's outcome (its records are read again).
    pub(super) fn drop_batch(&mut self) {
        self.batch = (Vec::new(), HashMap::new(), HashMap::new());
    }

    /// Forgets the partitions no longer assigned: what their next owner handled is not known
    /// here.
    pub(super) fn retain(&mut self, live: &BTreeSet<i32>) {
        self.seen.retain(|(_, p), _| live.contains(p));
        self.head.retain(|(_, p), _| live.contains(p));
        self.idle_since.retain(|(_, p), _| live.contains(p));
    }
}

/// Whether the other partition (`other`: its topic's rank and name) holds nothing that must
/// come before a record `this` (time, rank, topic), judging by a time it has shown (`seen`:
/// the latest handled there, or the head it offers next). Records are ordered by (time, rank,
/// topic) — the batch merge's order — so two partitions whose heads share a time never wait
/// for each other: the one whose topic sorts first goes.
fn seen_past(seen: Option<i64>, this: (i64, u8, &str), other: (u8, &str)) -> bool {
    seen.is_some_and(|s| (s, other.0, other.1) > this)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::Timestamp;

    fn msg(topic: &str, partition: i32, offset: i64, ts: i64) -> OwnedMessage {
        OwnedMessage::new(
            None,
            None,
            topic.to_string(),
            Timestamp::CreateTime(ts),
            partition,
            offset,
            None,
        )
    }

    #[test]
    fn aligned_records_are_merged_by_time_table_first_and_others_keep_their_slots() {
        let batch = vec![
            msg("clicks", 0, 0, 10),
            msg("clicks", 0, 1, 30),
            msg("users", 0, 0, 10),
            msg("users", 0, 1, 20),
            msg("clicks.retry.1", 0, 5, 0),
            msg("clicks", 1, 0, 5),
        ];
        let aligned = vec![
            ("users".to_string(), 0u8, 0usize),
            ("clicks".to_string(), 1, 0),
        ];
        let ts: Vec<i64> = batch.iter().map(kafka_ts).collect();
        let order = merge(&batch, (0..batch.len()).collect(), &ts, &aligned);
        assert_eq!(order, vec![2, 0, 3, 1, 4, 5]);
        assert!(seen_past(Some(11), (10, 1, "clicks"), (0, "users")));
        assert!(
            !seen_past(Some(10), (10, 1, "clicks"), (0, "users")),
            "a table row at the same time may follow"
        );
        assert!(seen_past(Some(10), (10, 0, "users"), (1, "clicks")));
        assert!(!seen_past(None, (10, 0, "users"), (1, "clicks")));
        assert!(
            seen_past(Some(10), (10, 1, "left"), (1, "right"))
                && !seen_past(Some(10), (10, 1, "right"), (1, "left")),
            "two inputs at one time: the first topic goes, the other waits"
        );
    }

    #[test]
    fn only_topics_of_one_task_are_merged_and_a_lone_topic_is_not_aligned() {
        // `clicks` (sub-topology 0) and the repartition topic (sub-topology 1) share partition
        // numbers but not a task: their records keep their slots.
        let batch = vec![
            msg("clicks", 0, 0, 50),
            msg("app-by-region-repartition", 0, 0, 10),
            msg("users", 0, 0, 40),
        ];
        let aligned = vec![
            ("users".to_string(), 0u8, 0usize),
            ("clicks".to_string(), 1, 0),
        ];
        let ts: Vec<i64> = batch.iter().map(kafka_ts).collect();
        let order = merge(&batch, vec![0, 1, 2], &ts, &aligned);
        assert_eq!(order, vec![2, 1, 0]);
        let mut opts = crate::processor::runtime::RuntimeOptions::from_config(&{
            let mut c = crate::config::Config::default();
            c.app.instance_id = "i".into();
            c.processor.input_topics = vec!["clicks".into(), "app-by-region-repartition".into()];
            c
        })
        .expect("options");
        opts.tables = vec![("users".into(), "users".into())];
        let sub_of = |t: &str| usize::from(t.ends_with("-repartition"));
        let topics: Vec<String> = aligned_topics(&opts, sub_of)
            .into_iter()
            .map(|(t, _, _)| t)
            .collect();
        assert_eq!(topics, vec!["users".to_string(), "clicks".to_string()]);
        opts.max_task_idle_ms = -1;
        assert!(
            aligned_topics(&opts, sub_of).is_empty(),
            "-1: never aligned"
        );
    }

    /// A consumer over two aligned inputs of one task whose partitions are out of event-time
    /// order and share many timestamps, delivering random prefixes of each (mostly one topic
    /// per batch, as a consumer does right after seeking both back) with seeks back for held
    /// records: whatever the interleaving, every record is handled, each partition in offset
    /// order, within a bounded number of batches. Two heads at the same time once held each
    /// other for good when no batch brought both (a restarted stream-stream join stalled).
    #[test]
    fn two_out_of_order_inputs_delivered_at_random_always_drain() {
        for seed in 1..=300u64 {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = |m: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % m
            };
            let topics = ["left", "right"];
            // Each topic: 60 records, 40 ms apart, each moved by up to ±300 ms, on a 100 ms
            // grid (many equal times across the two).
            let times: Vec<Vec<i64>> = topics
                .iter()
                .map(|_| {
                    (0..60)
                        .map(|i| (1_000_000 + i * 40 + next(601) as i64 - 300) / 100 * 100)
                        .collect()
                })
                .collect();
            let mut alignment = Alignment {
                aligned: topics
                    .iter()
                    .map(|t| (t.to_string(), 1u8, 0usize))
                    .collect(),
                ..Alignment::default()
            };
            // Next offset to handle, and the consumer's position (next to deliver).
            let mut handled = [0usize; 2];
            let mut position = [0usize; 2];
            let mut batches = 0;
            while handled.iter().zip(&times).any(|(h, t)| *h < t.len()) {
                batches += 1;
                assert!(
                    batches < 2_000,
                    "seed {seed}: stuck at {handled:?} of 60 each"
                );
                let mut batch = Vec::new();
                // Odd seeds: strictly one topic per batch, in turn (the worst case); even: at
                // random, both now and then.
                let mut which: Vec<usize> = match (seed % 2, next(8)) {
                    (1, _) => vec![batches % 2],
                    (_, 0) => vec![0, 1],
                    (_, n) => vec![(n % 2) as usize],
                };
                if next(2) == 0 {
                    which.reverse();
                }
                for &t in &which {
                    let n = 1 + next(20) as usize;
                    let end = (position[t] + n).min(times[t].len());
                    for (o, ts) in times[t].iter().enumerate().take(end).skip(position[t]) {
                        batch.push(msg(topics[t], 0, o as i64, *ts));
                    }
                    position[t] = end;
                }
                let ends = |t: &str, _p: i32| {
                    let i = usize::from(t == "right");
                    position[i] >= times[i].len()
                };
                let order: Vec<usize> = (0..batch.len()).collect();
                let (order, mut gate) = alignment.begin_batch(&batch, order, kafka_ts);
                alignment.ask_ends(&batch, &mut gate, ends);
                let mut got = Vec::new();
                for (k, &i) in order.iter().enumerate() {
                    if alignment.may_handle(&mut gate, k, i, &batch[i], ends) {
                        alignment.handled(&mut gate, i, &batch[i]);
                        got.push(i);
                    }
                }
                alignment.end_batch(gate, &batch, &[]);
                let held = alignment.committed();
                for i in got {
                    let m = &batch[i];
                    let t = usize::from(m.topic() == "right");
                    assert_eq!(m.offset() as usize, handled[t], "seed {seed}: offset order");
                    handled[t] += 1;
                }
                for i in held {
                    let m = &batch[i];
                    let t = usize::from(m.topic() == "right");
                    position[t] = position[t].min(m.offset() as usize);
                }
            }
        }
    }
}
