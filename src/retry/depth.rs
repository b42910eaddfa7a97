//! DLT depth and age: how many dead letters wait in each `<topic>.DLT`, and how long the oldest
//! of them has waited, as gauges an operator can alert on (`eosflow_dlt_depth_records{topic}`,
//! `eosflow_dlt_oldest_age_seconds{topic}`).
//!
//! A DLT's offsets include transaction markers (every dead letter is written in a transaction),
//! so "high watermark − low watermark" overcounts. The watcher instead reads the DLT
//! `read_committed` from the start, remembers the offsets of committed records, and drops those
//! below the low watermark (what `eosflow dlt purge` deleted). A redriven letter stays counted
//! until it is purged: redrive copies, it does not delete. Memory: 16 bytes per waiting letter.
//!
//! The age is now minus the Kafka timestamp (the time it was dead-lettered) of the oldest
//! letter still waiting, the same letters the depth counts: committed, not purged (`eosflow dlt
//! purge` is how an operator marks letters handled). Per partition the oldest is taken to be
//! the one at the lowest offset; 0 when the DLT is empty.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::kafka::{ClientRole, KafkaClients};

/// The background thread that keeps the DLT depth gauges current; stops when dropped.
#[derive(Debug)]
pub struct DepthWatcher {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

/// One waiting dead letter: its offset and Kafka timestamp (ms), if it has one.
type Letter = (i64, Option<i64>);

/// Committed dead letters not yet purged, per DLT partition, in offset order.
#[derive(Debug, Default)]
struct Depth {
    offsets: BTreeMap<(String, i32), VecDeque<Letter>>,
}

impl Depth {
    fn seen(&mut self, topic: &str, partition: i32, offset: i64, timestamp_ms: Option<i64>) {
        self.offsets
            .entry((topic.to_string(), partition))
            .or_default()
            .push_back((offset, timestamp_ms));
    }

    fn purged_below(&mut self, topic: &str, partition: i32, low: i64) {
        if let Some(q) = self.offsets.get_mut(&(topic.to_string(), partition)) {
            while q.front().is_some_and(|(o, _)| *o < low) {
                q.pop_front();
            }
        }
    }

    /// Seconds the oldest waiting letter of `topic` has waited at `now_ms` (0: none waits).
    fn oldest_age_secs(&self, topic: &str, now_ms: i64) -> f64 {
        self.offsets
            .iter()
            .filter(|((t, _), _)| t == topic)
            .filter_map(|(_, q)| q.front().and_then(|(_, ts)| *ts))
            .min()
            .map_or(0.0, |oldest| (now_ms - oldest).max(0) as f64 / 1000.0)
    }

    fn of_topic(&self, topic: &str) -> usize {
        self.offsets
            .iter()
            .filter(|((t, _), _)| t == topic)
            .map(|(_, q)| q.len())
            .sum()
    }
}

impl DepthWatcher {
    /// Starts watching `dlt_topics` (which must exist), refreshing the gauges every `interval`.
    pub fn start(
        clients: &KafkaClients,
        dlt_topics: Vec<String>,
        interval: Duration,
    ) -> Result<Self, KafkaError> {
        // No end-of-partition events: it tails forever, and each would be logged as an error.
        let consumer: BaseConsumer = clients
            .config(ClientRole::Reader)
            .set("enable.partition.eof", "false")
            .create()?;
        let mut tpl = TopicPartitionList::new();
        let mut partitions = vec![];
        for t in &dlt_topics {
            let md = consumer.fetch_metadata(Some(t), Duration::from_secs(30))?;
            let n = md
                .topics()
                .iter()
                .find(|m| m.name() == t)
                .map_or(0, |m| m.partitions().len() as i32);
            for p in 0..n {
                tpl.add_partition_offset(t, p, Offset::Beginning)?;
                partitions.push((t.clone(), p));
            }
        }
        consumer.assign(&tpl)?;
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("dlt-depth".into())
                .spawn(move || watch(consumer, dlt_topics, partitions, interval, &stop))
                .map_err(|e| {
                    tracing::warn!(error = %e, "could not start the DLT depth watcher");
                    KafkaError::Canceled
                })?
        };
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for DepthWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn watch(
    consumer: BaseConsumer,
    topics: Vec<String>,
    partitions: Vec<(String, i32)>,
    interval: Duration,
    stop: &AtomicBool,
) {
    let mut depth = Depth::default();
    let mut last = Instant::now() - interval;
    while !stop.load(Ordering::Relaxed) {
        if last.elapsed() >= interval {
            for (t, p) in &partitions {
                // A failed lookup leaves the last value: the gauge is a view, not a record.
                if let Ok((low, _high)) = consumer.fetch_watermarks(t, *p, Duration::from_secs(5)) {
                    depth.purged_below(t, *p, low);
                }
            }
            let now = crate::clock::now_ms();
            for t in &topics {
                crate::telemetry::dlt_depth(t, depth.of_topic(t), depth.oldest_age_secs(t, now));
            }
            last = Instant::now();
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => depth.seen(
                m.topic(),
                m.partition(),
                m.offset(),
                m.timestamp().to_millis(),
            ),
            Some(Err(e)) => tracing::debug!(error = %e, "DLT depth watcher"),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_committed_letters_and_forgets_purged_ones() {
        let mut d = Depth::default();
        for o in [0, 2, 4, 6] {
            d.seen("a.DLT", 0, o, Some(1_000 + o));
        }
        d.seen("a.DLT", 1, 10, Some(1_003));
        d.seen("b.DLT", 0, 0, None);
        assert_eq!(d.of_topic("a.DLT"), 5);
        d.purged_below("a.DLT", 0, 5);
        assert_eq!(d.of_topic("a.DLT"), 2);
        assert_eq!(d.of_topic("b.DLT"), 1);
    }

    #[test]
    fn age_is_that_of_the_oldest_letter_not_purged() {
        let mut d = Depth::default();
        assert_eq!(d.oldest_age_secs("a.DLT", 10_000), 0.0, "empty: 0");
        d.seen("a.DLT", 0, 0, Some(1_000));
        d.seen("a.DLT", 0, 1, Some(7_000));
        d.seen("a.DLT", 1, 0, Some(4_000));
        d.seen("b.DLT", 0, 0, Some(0));
        assert_eq!(d.oldest_age_secs("a.DLT", 10_000), 9.0);
        d.purged_below("a.DLT", 0, 1);
        assert_eq!(d.oldest_age_secs("a.DLT", 10_000), 6.0);
        d.purged_below("a.DLT", 1, 1);
        assert_eq!(d.oldest_age_secs("a.DLT", 10_000), 3.0);
        d.purged_below("a.DLT", 0, 2);
        assert_eq!(d.oldest_age_secs("a.DLT", 10_000), 0.0);
        assert_eq!(d.oldest_age_secs("b.DLT", 10_000), 10.0);
    }
}
