//! Purging repartition topics (Kafka Streams' `repartition.purge.interval.ms`): once a batch
//! that read a repartition topic's records committed, those records are never read again by
//! this application, so every `processor.repartition_purge_interval_ms` the records below the
//! committed offsets are deleted with `DeleteRecords`, and the topic stays about as large as
//! what is still to be processed instead of growing with its retention.
//!
//! The call runs on a thread of its own with its own admin client, so a slow or failing broker
//! never holds up the processing loop: a failed purge is logged at WARN and counted
//! (`eosflow_repartition_purges_total{outcome="failed"}`), and the next one covers it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::{Offset, TopicPartitionList};

use crate::kafka::client::{ClientRole, KafkaClients};
use crate::telemetry;

/// Next offsets to purge below: (topic, partition, offset).
type Offsets = Vec<(String, i32, i64)>;

/// How long one `DeleteRecords` call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Collects the committed offsets of repartition topics and deletes what lies below them.
pub(crate) struct Purger {
    topics: BTreeSet<String>,
    interval: Duration,
    due: BTreeMap<(String, i32), i64>,
    last: Instant,
    worker: Option<(Sender<Offsets>, JoinHandle<()>)>,
}

impl Purger {
    /// A purger of `topics` every `interval` (zero, or no topics: one that never purges).
    pub(crate) fn new(clients: &KafkaClients, topics: Vec<String>, interval: Duration) -> Self {
        let worker = if topics.is_empty() || interval.is_zero() {
            None
        } else {
            match clients
                .config(ClientRole::Admin)
                .create::<AdminClient<DefaultClientContext>>()
            {
                Ok(admin) => {
                    let (tx, rx) = mpsc::channel();
                    std::thread::Builder::new()
                        .name("eosflow-purge".into())
                        .spawn(move || purge_loop(&admin, &rx))
                        .map_err(|e| tracing::warn!(error = %e, "repartition purge thread not started; repartition topics are bounded by their retention only"))
                        .ok()
                        .map(|h| (tx, h))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "repartition purge client not created; repartition topics are bounded by their retention only");
                    None
                }
            }
        };
        Self {
            topics: topics.into_iter().collect(),
            interval,
            due: BTreeMap::new(),
            last: Instant::now(),
            worker,
        }
    }

    /// Takes the next offsets a batch committed; every interval, hands those of repartition
    /// topics to the purge thread.
    pub(crate) fn committed(&mut self, next_offsets: &[(String, i32, i64)]) {
        let Some((tx, _)) = &self.worker else {
            return;
        };
        for (t, p, o) in next_offsets {
            if self.topics.contains(t) {
                let at = self.due.entry((t.clone(), *p)).or_insert(*o);
                *at = (*at).max(*o);
            }
        }
        if self.due.is_empty() || self.last.elapsed() < self.interval {
            return;
        }
        self.last = Instant::now();
        let batch: Vec<(String, i32, i64)> = std::mem::take(&mut self.due)
            .into_iter()
            .map(|((t, p), o)| (t, p, o))
            .collect();
        // A thread that ended has logged why; the topics are then bounded by retention.
        let _ = tx.send(batch);
    }
}

impl Drop for Purger {
    fn drop(&mut self) {
        if let Some((tx, handle)) = self.worker.take() {
            drop(tx);
            let _ = handle.join();
        }
    }
}

fn purge_loop(admin: &AdminClient<DefaultClientContext>, rx: &Receiver<Offsets>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "repartition purge runtime not started; repartition topics are bounded by their retention only");
            return;
        }
    };
    let opts = AdminOptions::new().request_timeout(Some(CALL_TIMEOUT));
    while let Ok(batch) = rx.recv() {
        let mut tpl = TopicPartitionList::new();
        for (t, p, o) in &batch {
            if tpl.add_partition_offset(t, *p, Offset::Offset(*o)).is_err() {
                continue;
            }
        }
        match runtime.block_on(admin.delete_records(&tpl, &opts)) {
            Ok(result) => {
                for e in result.elements() {
                    match e.error() {
                        Ok(()) => telemetry::repartition_purged(e.topic(), "deleted"),
                        Err(err) => {
                            telemetry::repartition_purged(e.topic(), "failed");
                            tracing::warn!(topic = e.topic(), partition = e.partition(), error = %err, "repartition records not deleted; the next purge tries again");
                        }
                    }
                }
            }
            Err(err) => {
                for (t, _, _) in &batch {
                    telemetry::repartition_purged(t, "failed");
                }
                tracing::warn!(error = %err, "repartition purge failed; the next one tries again");
            }
        }
    }
}
