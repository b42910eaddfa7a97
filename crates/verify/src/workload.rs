//! The verifier's workload: N records with known ids over K keys, some re-sent on purpose, and
//! the expected final state computed from the same deterministic formula.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::message::{Header, OwnedHeaders};
use std::sync::atomic::{AtomicU64, Ordering};

use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use crate::count::CountState;
use eosflow::kafka::{ClientRole, KafkaClients};

/// Counts deliveries that failed, so a lost workload record is never blamed on the processor.
#[derive(Default)]
struct DeliveryCheck {
    failed: AtomicU64,
}

impl ClientContext for DeliveryCheck {}

impl ProducerContext for DeliveryCheck {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {
        if let Err((e, _)) = result {
            tracing::error!(error = %e, "workload record not delivered");
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The shape of a workload.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Distinct records (distinct ids).
    pub records: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Every n-th record is sent a second time (same id, key, value); 0 = none.
    pub duplicate_every: u64,
    /// Every n-th record fails transiently once (`transient:1:<amount>`) and succeeds from
    /// retry level 1; 0 = none.
    pub transient_every: u64,
}

impl Workload {
    /// The id of record `i`.
    pub fn id(i: u64) -> String {
        format!("r{i}")
    }
    /// The key of record `i`.
    pub fn key(&self, i: u64) -> String {
        format!("k{}", i % self.keys.max(1))
    }
    /// The amount of record `i`.
    pub fn amount(i: u64) -> i64 {
        // Fibonacci hashing: amounts vary within a key, so a lost or doubled update shows in the sum.
        ((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % 1000) as i64 + 1
    }
    /// Re-sent copies included in what is produced.
    pub fn duplicates(&self) -> u64 {
        self.records.checked_div(self.duplicate_every).unwrap_or(0)
    }

    /// Whether record `i` fails once: spread by a hash, not by `i % n`, so that with K keys
    /// a key is not made of failing records only (which would serialise it behind its ladder).
    pub fn is_transient(&self, i: u64) -> bool {
        self.transient_every > 0
            && (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32).is_multiple_of(self.transient_every)
    }

    /// Final per-key state if every distinct record is counted exactly once.
    pub fn expected_state(&self) -> BTreeMap<String, CountState> {
        let mut m: BTreeMap<String, CountState> = BTreeMap::new();
        for i in 0..self.records {
            let s = m.entry(self.key(i)).or_default();
            s.count += 1;
            s.sum += Self::amount(i);
        }
        m
    }

    /// Produces the workload to `topic`, paced to take about `duration` (zero = as fast as
    /// possible). Duplicates follow their original a few records later.
    pub fn produce(
        &self,
        clients: &KafkaClients,
        topic: &str,
        duration: Duration,
    ) -> Result<u64, String> {
        let producer: ThreadedProducer<DeliveryCheck> = clients
            .config(ClientRole::Idempotent)
            .create_with_context(DeliveryCheck::default())
            .map_err(|e| format!("creating the workload producer: {e}"))?;
        let started = Instant::now();
        let mut sent = 0u64;
        let mut redo: Vec<u64> = Vec::new();
        for i in 0..self.records {
            self.send(&producer, topic, i)?;
            sent += 1;
            if self.duplicate_every > 0 && i % self.duplicate_every == self.duplicate_every - 1 {
                redo.push(i);
            }
            if redo.len() > 3 || (i + 1 == self.records && !redo.is_empty()) {
                for j in redo.drain(..) {
                    self.send(&producer, topic, j)?;
                    sent += 1;
                }
            }
            if !duration.is_zero() && i % 256 == 0 {
                let target = duration.mul_f64(i as f64 / self.records as f64);
                let elapsed = started.elapsed();
                if target > elapsed {
                    std::thread::sleep(target - elapsed);
                }
            }
        }
        producer
            .flush(Duration::from_secs(60))
            .map_err(|e| format!("flushing the workload: {e}"))?;
        let failed = producer.context().failed.load(Ordering::Relaxed);
        if failed > 0 {
            return Err(format!("{failed} workload records were not delivered"));
        }
        Ok(sent)
    }

    fn send(
        &self,
        producer: &ThreadedProducer<DeliveryCheck>,
        topic: &str,
        i: u64,
    ) -> Result<(), String> {
        let key = self.key(i);
        let value = if self.is_transient(i) {
            format!("transient:1:{}", Self::amount(i))
        } else {
            Self::amount(i).to_string()
        };
        let id = Self::id(i);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut record = BaseRecord::to(topic)
            .key(key.as_bytes())
            .payload(value.as_bytes())
            .headers(OwnedHeaders::new().insert(Header {
                key: "id",
                value: Some(id.as_bytes()),
            }));
        loop {
            match producer.send(record) {
                Ok(()) => return Ok(()),
                Err((e, r)) if Instant::now() < deadline => {
                    if !matches!(
                        e,
                        rdkafka::error::KafkaError::MessageProduction(
                            rdkafka::types::RDKafkaErrorCode::QueueFull
                        )
                    ) {
                        return Err(format!("producing record {i}: {e}"));
                    }
                    record = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(format!("producing record {i}: {e}")),
            }
        }
    }
}
