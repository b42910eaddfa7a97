//! Timestamp alignment inside a task (Kafka Streams' record choice across a task's
//! partitions, `max.task.idle.ms`): within one sub-topology on one partition number, the
//! records of its table topics and of its inputs (not their retry levels) are handled in
//! event-time order — a table record before a stream record of the same time — and a record is
//! handled only once every other of these partitions has shown it holds nothing earlier: a
//! record of it at a later time is in the batch or was handled, or it is read to its end (the
//! consumer's position at its last stable offset; with `processor.max_task_idle_ms = n > 0`,
//! read to its end for `n` ms). Otherwise the task is *held*: its aligned records are read
//! again in the next batch. Each partition is assumed to be in event-time order (a record
//! older than one before it in its own partition is handled where it stands). A sub-topology
//! reading one topic (a repartition topic, most often) has nothing to align.
//!
//! The time is the one the sources' timestamp extractors give (what moves stream time), not
//! necessarily the Kafka timestamp.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rdkafka::message::OwnedMessage;
use rdkafka::Message;

use super::runtime::RuntimeOptions;

/// A timestamp per (topic, partition).
pub(super) type Times = HashMap<(String, i32), i64>;

/// The topics that take part in alignment, with their rank (tables first at equal times, then
/// inputs) and sub-topology: those of every sub-topology reading two or more of them. None
/// when `processor.max_task_idle_ms` is `-1`.
pub(super) fn aligned_topics(
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
    all.into_iter()
        .filter(|(_, _, sub)| per_sub.get(sub).is_some_and(|n| *n >= 2))
        .collect()
}

/// The rank and sub-topology of `topic` among the aligned topics (none: not aligned).
pub(super) fn rank_of(aligned: &[(String, u8, usize)], topic: &str) -> Option<(u8, usize)> {
    aligned
        .iter()
        .find(|(t, _, _)| t == topic)
        .map(|(_, r, s)| (*r, *s))
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
pub(super) fn merge(
    batch: &[OwnedMessage],
    order: Vec<usize>,
    ts: &[i64],
    rank: impl Fn(&str) -> Option<(u8, usize)>,
) -> Vec<usize> {
    // Per task: the slots of its aligned records, and each topic's queue.
    type Queues = BTreeMap<String, std::collections::VecDeque<usize>>;
    let mut slots: BTreeMap<(usize, i32), (Vec<usize>, Queues)> = BTreeMap::new();
    for (k, &i) in order.iter().enumerate() {
        let m = &batch[i];
        let Some((_, sub)) = rank(m.topic()) else {
            continue;
        };
        let (s, q) = slots.entry((sub, m.partition())).or_default();
        s.push(k);
        q.entry(m.topic().to_string()).or_default().push_back(i);
    }
    let mut out = order;
    for (_, (s, mut queues)) in slots {
        if queues.len() < 2 {
            continue;
        }
        for k in s {
            let next = queues
                .iter()
                .filter_map(|(t, q)| {
                    let i = *q.front()?;
                    let r = rank(t).map_or(u8::MAX, |(r, _)| r);
                    Some((
                        (ts.get(i).copied().unwrap_or(i64::MIN), r, t.clone()),
                        t.clone(),
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
    pub(super) held: BTreeSet<(usize, i32)>,
    /// Aligned records held (indexes into the batch): read again.
    pub(super) held_records: Vec<usize>,
    /// Last slot in the order of each aligned (topic, partition) of the batch.
    pub(super) last_slot: HashMap<(String, i32), usize>,
    /// Latest time handled per aligned (topic, partition): committed, then this batch's.
    pub(super) seen: HashMap<(String, i32), i64>,
    /// Whether an aligned (topic, partition) is read to its end (asked once per batch).
    pub(super) caught_up: HashMap<(String, i32), bool>,
}

/// Whether the other partition `other` (of rank `other_rank`) holds nothing that must come
/// before a record at `t` of rank `rank`, judging by the latest time handled there.
pub(super) fn seen_past(seen: Option<i64>, t: i64, rank: u8, other_rank: u8) -> bool {
    seen.is_some_and(|s| s > t || (other_rank > rank && s >= t))
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
        let order = merge(&batch, (0..batch.len()).collect(), &ts, |t| {
            rank_of(&aligned, t)
        });
        assert_eq!(order, vec![2, 0, 3, 1, 4, 5]);
        assert!(seen_past(Some(11), 10, 1, 0));
        assert!(
            !seen_past(Some(10), 10, 1, 0),
            "a table row at the same time may follow"
        );
        assert!(seen_past(Some(10), 10, 0, 1));
        assert!(!seen_past(None, 10, 0, 1));
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
        let order = merge(&batch, vec![0, 1, 2], &ts, |t| rank_of(&aligned, t));
        assert_eq!(order, vec![2, 1, 0]);
        let mut opts = crate::processor::RuntimeOptions::from_config(&{
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
}
