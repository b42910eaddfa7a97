//! Publishing routed rows in Kafka transactions that also carry the slot's LSN checkpoint.
//!
//! One transaction = the routed records of whole Postgres transactions + one record on the
//! compacted offsets topic (`key` = slot name, value = the last commit's end LSN). Either all
//! of it is visible to `read_committed` readers or none of it; the LSN is confirmed to Postgres
//! only after the commit, and a restarted router resumes after the LSN it reads back here.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::Message;
use serde::{Deserialize, Serialize};

use crate::kafka::reader::read_all;
use crate::kafka::topics::{self, TopicSpec};
use crate::kafka::KafkaClients;
use crate::sink::{SinkError, TxnSink};

use super::router::RoutedRecord;
use super::OutboxError;

/// The offsets topic's value for one slot.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LsnCheckpoint {
    /// The replication slot.
    pub slot: String,
    /// End LSN of the last published Postgres transaction, as a number.
    pub lsn: u64,
    /// The same, as Postgres prints it (`0/16B3748`), for people.
    pub lsn_text: String,
}

/// Formats an LSN the way Postgres does (`X/Y`, hex).
pub fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// Parses `X/Y` (hex) into an LSN.
pub fn parse_lsn(s: &str) -> Option<u64> {
    let (hi, lo) = s.trim().split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// The declaration of the offsets topic (also in `topics/outbox.toml`).
pub fn offsets_topic_spec(name: &str) -> TopicSpec {
    TopicSpec {
        name: name.to_string(),
        partitions: 1,
        replication: 3,
        cleanup_policy: "compact".into(),
        retention_ms: None,
        config: BTreeMap::from([("min.compaction.lag.ms".to_string(), "0".to_string())]),
    }
}

/// Creates `names` that are missing (routed topics get `partitions`, delete policy).
pub async fn ensure_topics(
    clients: &KafkaClients,
    specs: Vec<TopicSpec>,
) -> Result<(), OutboxError> {
    topics::apply(clients, &specs, Duration::from_secs(30)).await?;
    Ok(())
}

/// A routed topic's declaration.
pub fn routed_topic_spec(name: &str, partitions: i32) -> TopicSpec {
    TopicSpec {
        name: name.to_string(),
        partitions,
        replication: 3,
        cleanup_policy: "delete".into(),
        retention_ms: None,
        config: BTreeMap::new(),
    }
}

/// The last committed LSN of `slot` in the offsets topic (`read_committed`), if any.
pub fn read_committed_lsn(
    clients: &KafkaClients,
    topic: &str,
    slot: &str,
    timeout: Duration,
) -> Result<Option<u64>, OutboxError> {
    let mut last = None;
    read_all(clients, topic, timeout, |m| {
        if m.key() == Some(slot.as_bytes()) {
            match m.payload() {
                Some(p) => {
                    let c: LsnCheckpoint = serde_json::from_slice(p)
                        .map_err(|e| format!("offset {} of {topic}: {e}", m.offset()))?;
                    last = Some(c.lsn);
                }
                None => last = None,
            }
        }
        Ok(())
    })
    .map_err(|e| OutboxError::Offsets(e.to_string()))?;
    Ok(last)
}

/// Whether a delivery failed because a newer producer with our `transactional.id` exists.
fn is_fencing(e: &KafkaError) -> bool {
    use rdkafka::error::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(C::ProducerFenced | C::InvalidProducerEpoch | C::Fenced)
    )
}

/// The router's transactional producer plus the topics it has made sure exist.
#[derive(Debug)]
pub struct Publisher {
    sink: TxnSink,
    clients: KafkaClients,
    offsets_topic: String,
    slot: String,
    partitions: i32,
    known: HashSet<String>,
}

impl Publisher {
    /// Creates the producer (`init_transactions` fences a predecessor with the same id and
    /// aborts its open transaction) and the offsets topic if missing.
    pub async fn new(
        clients: &KafkaClients,
        transactional_id: &str,
        timeout: Duration,
        offsets_topic: &str,
        slot: &str,
        partitions: i32,
    ) -> Result<Self, OutboxError> {
        ensure_topics(clients, vec![offsets_topic_spec(offsets_topic)]).await?;
        let sink =
            tokio::task::block_in_place(|| TxnSink::new(clients, transactional_id, timeout))?;
        Ok(Self {
            sink,
            clients: clients.clone(),
            offsets_topic: offsets_topic.to_string(),
            slot: slot.to_string(),
            partitions,
            known: HashSet::from([offsets_topic.to_string()]),
        })
    }

    /// Publishes `records` and the checkpoint `end_lsn` in one Kafka transaction. An abortable
    /// failure is aborted and retried (nothing of an aborted attempt is visible); a fatal one
    /// recreates the producer; fencing is returned.
    pub async fn publish(
        &mut self,
        records: &[RoutedRecord],
        end_lsn: u64,
    ) -> Result<(), OutboxError> {
        let missing: Vec<TopicSpec> = records
            .iter()
            .map(|r| r.topic.as_str())
            .filter(|t| !self.known.contains(*t))
            .collect::<HashSet<_>>()
            .into_iter()
            .map(|t| routed_topic_spec(t, self.partitions))
            .collect();
        if !missing.is_empty() {
            let names: Vec<String> = missing.iter().map(|s| s.name.clone()).collect();
            ensure_topics(&self.clients, missing).await?;
            self.known.extend(names);
        }
        let checkpoint = serde_json::to_vec(&LsnCheckpoint {
            slot: self.slot.clone(),
            lsn: end_lsn,
            lsn_text: lsn_text(end_lsn),
        })
        .map_err(|e| OutboxError::Other(format!("encoding the checkpoint: {e}")))?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = tokio::task::block_in_place(|| self.attempt(records, &checkpoint));
            match result {
                Ok(()) => return Ok(()),
                Err(e @ SinkError::Fenced { .. }) => return Err(e.into()),
                Err(e) if attempt >= 5 => return Err(e.into()),
                Err(SinkError::Fatal(e)) => {
                    tracing::warn!(error = %e, "producer unusable; recreating it");
                    tokio::task::block_in_place(|| self.sink.reset())?;
                }
                Err(e) => {
                    tracing::warn!(error = %e, attempt, "outbox transaction aborted; retrying");
                    match self.sink.abort() {
                        Ok(()) => {}
                        // Never recreate the producer of a fenced instance: a new epoch would
                        // fence the successor that legitimately took over.
                        Err(e @ SinkError::Fenced { .. }) => return Err(e.into()),
                        Err(e) => {
                            tracing::warn!(error = %e, "abort failed; recreating the producer");
                            tokio::task::block_in_place(|| self.sink.reset())?;
                        }
                    }
                }
            }
        }
    }

    fn attempt(&self, records: &[RoutedRecord], checkpoint: &[u8]) -> Result<(), SinkError> {
        self.sink.begin()?;
        let mut deliveries = Vec::with_capacity(records.len() + 1);
        for r in records {
            deliveries.push(self.sink.send(
                &r.topic,
                None,
                r.key.as_deref(),
                r.value.as_deref(),
                &r.headers,
            )?);
        }
        deliveries.push(self.sink.send(
            &self.offsets_topic,
            Some(0),
            Some(self.slot.as_bytes()),
            Some(checkpoint),
            &[],
        )?);
        // Wait for the acknowledgments here rather than in commit: rust-rdkafka's
        // commit_transaction first flushes, and while rd_kafka_outq_len() > 0 its flush polls
        // for a full 100 ms (the events go to FutureProducer's own thread) — a ~100 ms floor on
        // every transaction. A delivery future completes a moment before its report leaves the
        // out-queue, so wait for the queue to be empty too; then the flush returns at once.
        let t0 = std::time::Instant::now();
        let results = futures::executor::block_on(futures::future::join_all(deliveries));
        let t1 = t0.elapsed();
        let deadline = std::time::Instant::now() + Duration::from_millis(100);
        while self.sink.in_flight() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(100));
        }
        let t2 = t0.elapsed();
        let left = self.sink.in_flight();
        for d in results {
            match d {
                Ok(Ok(_)) => {}
                Ok(Err((e, _))) if is_fencing(&e) => {
                    return Err(SinkError::Fenced {
                        id: self.sink.id().to_string(),
                        source: e,
                    })
                }
                Ok(Err((e, _))) => return Err(SinkError::Abortable(e)),
                Err(_) => return Err(SinkError::Abortable(KafkaError::Canceled)),
            }
        }
        let r = self.sink.commit();
        tracing::trace!(
            delivered_us = t1.as_micros() as u64,
            drained_us = t2.as_micros() as u64,
            left,
            committed_us = t0.elapsed().as_micros() as u64,
            "txn timing"
        );
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_round_trips_in_postgres_notation() {
        assert_eq!(lsn_text(0x0192_6DE0), "0/1926DE0");
        assert_eq!(parse_lsn("0/1926DE0"), Some(0x1926DE0));
        assert_eq!(parse_lsn("16/B374D848"), Some((0x16 << 32) | 0xB374_D848));
        assert_eq!(parse_lsn("nope"), None);
    }
}
