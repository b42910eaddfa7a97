//! Timestamp alignment between a task's tables and its inputs (Kafka Streams' record choice
//! across a task's partitions): within one partition number, the records of the table topics
//! and of the inputs (not their retry levels) are handled in timestamp order — a table record
//! before a stream record of the same timestamp — and a record is handled only once every
//! other of these partitions has shown it holds nothing earlier: a record of it at a later
//! time is in the batch or was handled, or it is read to its end (the consumer's position at
//! its last stable offset). Otherwise the partition number is *held*: its aligned records are
//! read again in the next batch. Each partition is assumed to be in timestamp order (a record
//! older than one before it in its own partition is handled where it stands).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rdkafka::message::OwnedMessage;
use rdkafka::Message;

/// A timestamp per (topic, partition).
pub(super) type Times = HashMap<(String, i32), i64>;

/// How a topic takes part in alignment: tables first at equal times, then inputs.
pub(super) fn rank(tables: &[(String, String)], inputs: &[String], topic: &str) -> Option<u8> {
    if tables.iter().any(|(_, t)| t == topic) {
        Some(0)
    } else if inputs.iter().any(|t| t == topic) {
        Some(1)
    } else {
        None
    }
}

/// A record's timestamp for alignment (none: first).
pub(super) fn ts(m: &OwnedMessage) -> i64 {
    m.timestamp().to_millis().unwrap_or(i64::MIN)
}

/// Reorders `order` so that, per partition number, the aligned records are merged by
/// (timestamp, rank, topic), each partition kept in offset order; they take the slots aligned
/// records had, and every other record keeps its slot.
pub(super) fn merge(
    batch: &[OwnedMessage],
    order: Vec<usize>,
    rank: impl Fn(&str) -> Option<u8>,
) -> Vec<usize> {
    // Per partition number: the slots of its aligned records, and each topic's queue.
    type Queues = BTreeMap<String, std::collections::VecDeque<usize>>;
    let mut slots: BTreeMap<i32, (Vec<usize>, Queues)> = BTreeMap::new();
    for (k, &i) in order.iter().enumerate() {
        let m = &batch[i];
        if rank(m.topic()).is_none() {
            continue;
        }
        let (s, q) = slots.entry(m.partition()).or_default();
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
                    Some((
                        (ts(&batch[i]), rank(t).unwrap_or(u8::MAX), t.clone()),
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
    /// Partition numbers whose aligned records wait for the next batch.
    pub(super) held: BTreeSet<i32>,
    /// Aligned records held (indexes into the batch): read again.
    pub(super) held_records: Vec<usize>,
    /// Last slot in the order of each aligned (topic, partition) of the batch.
    pub(super) last_slot: HashMap<(String, i32), usize>,
    /// Latest timestamp handled per aligned (topic, partition): committed, then this batch's.
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
        let tables = vec![("users".to_string(), "users".to_string())];
        let inputs = vec!["clicks".to_string()];
        let order = merge(&batch, (0..batch.len()).collect(), |t| {
            rank(&tables, &inputs, t)
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
}
