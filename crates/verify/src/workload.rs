//! The verifier's workload: N records with known ids over K keys, some re-sent on purpose, and
//! the expected final state computed from the same deterministic formula.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::message::{Header, OwnedHeaders};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use crate::count::CountState;
use eosflow::kafka::{ClientRole, KafkaClients};

/// The delivery reports of a workload's sends: a send counts as produced only when the broker
/// acknowledged it, so a record the harness failed to produce is never blamed on the processor.
/// Each send slot is `2 * record + copy` (copy 1: the re-sent duplicate).
struct DeliveryCheck {
    acked: Vec<AtomicBool>,
    failed: Mutex<Vec<usize>>,
}

impl DeliveryCheck {
    fn new(records: u64) -> Self {
        Self {
            acked: (0..records * 2).map(|_| AtomicBool::new(false)).collect(),
            failed: Mutex::new(Vec::new()),
        }
    }

    fn take_failed(&self) -> Vec<usize> {
        std::mem::take(&mut *self.failed.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn fail(&self, slot: usize) {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(slot);
    }
}

impl ClientContext for DeliveryCheck {}

impl ProducerContext for DeliveryCheck {
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &DeliveryResult<'_>, slot: usize) {
        match result {
            Ok(_) => {
                if let Some(a) = self.acked.get(slot) {
                    a.store(true, Ordering::Relaxed);
                }
            }
            Err((e, _)) => {
                tracing::warn!(error = %e, record = slot / 2, "workload send not delivered");
                self.fail(slot);
            }
        }
    }
}

/// What producing a workload achieved, by delivery report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Produced {
    /// Sends the workload asked for: every record once, plus its re-sent copy if it has one.
    pub sent: u64,
    /// Of those, the sends the broker acknowledged (on the first attempt or a retry).
    pub acked: u64,
    /// Sends made again after a failed delivery report or a refused send.
    pub retried: u64,
    /// Distinct records none of whose sends was acknowledged: not produced, whatever the
    /// processor does.
    pub not_produced: u64,
}

/// Rounds of re-sending what failed, after the first attempt.
const RETRY_ROUNDS: u32 = 3;
/// How long the workload's flush waits in all for its sends to be acknowledged.
const FLUSH_PATIENCE: Duration = Duration::from_secs(300);

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
        self.expected_state_of(|_| true)
    }

    /// Final per-key state if every distinct record `i` for which `present(i)` (those the input
    /// topic holds) is counted exactly once.
    pub fn expected_state_of(&self, present: impl Fn(u64) -> bool) -> BTreeMap<String, CountState> {
        let mut m: BTreeMap<String, CountState> = BTreeMap::new();
        for i in (0..self.records).filter(|i| present(*i)) {
            let s = m.entry(self.key(i)).or_default();
            s.count += 1;
            s.sum += Self::amount(i);
        }
        m
    }

    /// Produces the workload to `topic`, paced to take about `duration` (zero = as fast as
    /// possible). Duplicates follow their original a few records later. Returns the sends made
    /// (records plus duplicates); an error if any was not acknowledged.
    pub fn produce(
        &self,
        clients: &KafkaClients,
        topic: &str,
        duration: Duration,
    ) -> Result<u64, String> {
        let p = self.produce_counted(clients, topic, duration, 0)?;
        if p.acked < p.sent {
            return Err(format!(
                "{} of {} workload sends were not acknowledged ({} records not produced)",
                p.sent - p.acked,
                p.sent,
                p.not_produced
            ));
        }
        Ok(p.sent)
    }

    /// Whether record `i` is one the harness is made to fail (`unsendable_every`, 0 = none).
    pub fn is_unsendable(i: u64, unsendable_every: u64) -> bool {
        unsendable_every > 0 && i % unsendable_every == unsendable_every / 2
    }

    /// [`Workload::produce`] that counts instead of failing: a send counts only once its
    /// delivery report says the broker has it; a send that failed (refused by the client or
    /// reported undelivered) is made again, up to three more rounds, and a record still without
    /// an acknowledged send is counted as not produced. `unsendable_every` (a test of the
    /// verifier itself; 0 = none) sends every n-th record to a partition that does not exist,
    /// so all its sends fail.
    pub fn produce_counted(
        &self,
        clients: &KafkaClients,
        topic: &str,
        duration: Duration,
        unsendable_every: u64,
    ) -> Result<Produced, String> {
        let producer: ThreadedProducer<DeliveryCheck> = clients
            .config(ClientRole::Idempotent)
            .create_with_context(DeliveryCheck::new(self.records))
            .map_err(|e| format!("creating the workload producer: {e}"))?;
        let started = Instant::now();
        let mut out = Produced::default();
        let mut redo: Vec<u64> = Vec::new();
        let send = |slot: usize| {
            let i = (slot / 2) as u64;
            let partition =
                Self::is_unsendable(i, unsendable_every).then_some(UNSENDABLE_PARTITION);
            self.send(&producer, topic, i, slot, partition)
        };
        for i in 0..self.records {
            send(2 * i as usize)?;
            out.sent += 1;
            if self.duplicate_every > 0 && i % self.duplicate_every == self.duplicate_every - 1 {
                redo.push(i);
            }
            if redo.len() > 3 || (i + 1 == self.records && !redo.is_empty()) {
                for j in redo.drain(..) {
                    send(2 * j as usize + 1)?;
                    out.sent += 1;
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
        // A paused or restarted broker can hold the workload's sends past one wait (the
        // idempotent producer asks for its producer id again first): the flush waits on, up to
        // FLUSH_PATIENCE in all, instead of failing the scenario for its own producer (a CI run
        // of broker-pause did, 60 s after the pause). What stays unacknowledged is sent again
        // or counted as not produced.
        let flush = |producer: &ThreadedProducer<DeliveryCheck>| {
            let deadline = Instant::now() + FLUSH_PATIENCE;
            loop {
                match producer.flush(Duration::from_secs(30)) {
                    Ok(()) => return Ok(()),
                    Err(e) if Instant::now() < deadline => {
                        tracing::warn!(error = %e, "workload sends not all acknowledged yet; waiting on");
                    }
                    Err(e) => return Err(format!("flushing the workload: {e}")),
                }
            }
        };
        flush(&producer)?;
        for round in 1..=RETRY_ROUNDS {
            let failed = producer.context().take_failed();
            if failed.is_empty() {
                break;
            }
            tracing::warn!(
                sends = failed.len(),
                round,
                "workload sends failed; sending them again"
            );
            std::thread::sleep(Duration::from_millis(500));
            for slot in failed {
                send(slot)?;
                out.retried += 1;
            }
            flush(&producer)?;
        }
        let acked = &producer.context().acked;
        let is_acked = |slot: usize| acked.get(slot).is_some_and(|a| a.load(Ordering::Relaxed));
        out.acked = (0..acked.len()).filter(|s| is_acked(*s)).count() as u64;
        out.not_produced = (0..self.records as usize)
            .filter(|i| !is_acked(2 * i) && !is_acked(2 * i + 1))
            .count() as u64;
        if out.not_produced > 0 {
            tracing::warn!(
                records = out.not_produced,
                "workload records not produced (no send acknowledged)"
            );
        }
        Ok(out)
    }

    /// Sends slot `slot` (record `i`, to `partition` if given); a send the client refuses
    /// (other than a full queue, which is waited out) is counted as failed, for a retry round.
    fn send(
        &self,
        producer: &ThreadedProducer<DeliveryCheck>,
        topic: &str,
        i: u64,
        slot: usize,
        partition: Option<i32>,
    ) -> Result<(), String> {
        let key = self.key(i);
        let value = if self.is_transient(i) {
            format!("transient:1:{}", Self::amount(i))
        } else {
            Self::amount(i).to_string()
        };
        let id = Self::id(i);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut record = BaseRecord::with_opaque_to(topic, slot)
            .key(key.as_bytes())
            .payload(value.as_bytes())
            .headers(OwnedHeaders::new().insert(Header {
                key: "id",
                value: Some(id.as_bytes()),
            }));
        if let Some(p) = partition {
            record = record.partition(p);
        }
        loop {
            match producer.send(record) {
                Ok(()) => return Ok(()),
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    r,
                )) => {
                    if Instant::now() >= deadline {
                        return Err(format!(
                            "producing record {i}: the queue stayed full for 60 s"
                        ));
                    }
                    record = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => {
                    tracing::warn!(error = %e, record = i, "workload send refused");
                    producer.context().fail(slot);
                    return Ok(());
                }
            }
        }
    }
}

/// The partition unsendable records go to: none of the verifier's topics has it.
const UNSENDABLE_PARTITION: i32 = 1_000_000;
