//! The raw pipe: an rdkafka consume → produce loop with no transaction and no state, the
//! ceiling the benchmarks state every contender against. Run as its own process
//! (`eosflow bench-pipe`) so it starts, fetches and produces exactly like the others.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::consumer::{ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Message};

/// Says when the pipe joined (the benchmark waits for every instance's first assignment).
struct PipeContext;

impl ClientContext for PipeContext {}

impl ConsumerContext for PipeContext {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            eprintln!("raw pipe: partitions assigned ({})", tpl.count());
        }
    }
}

use eosflow::kafka::{ClientRole, KafkaClients};

/// Copies every record of `input` to `output` (key, value, headers, plus `causation_id` = the
/// `id` header, as the counting topology writes it) until `shutdown`.
pub fn run(
    clients: &KafkaClients,
    input: &str,
    output: &str,
    group: &str,
    shutdown: &AtomicBool,
) -> Result<u64, KafkaError> {
    let consumer: BaseConsumer<PipeContext> = clients
        .config(ClientRole::GroupConsumer {
            group,
            session_timeout: Duration::from_secs(6),
            instance: None,
        })
        .set("enable.auto.offset.store", "true")
        .create_with_context(PipeContext)?;
    consumer.subscribe(&[input])?;
    let producer: BaseProducer = clients.config(ClientRole::Idempotent).create()?;
    let mut copied = 0u64;
    let mut last_commit = Instant::now();
    while !shutdown.load(Ordering::Relaxed) {
        producer.poll(Duration::ZERO);
        let Some(polled) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let m = match polled {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "raw pipe: consumer error");
                continue;
            }
        };
        let mut headers = OwnedHeaders::new();
        let mut id: Option<Vec<u8>> = None;
        if let Some(hs) = m.headers() {
            for h in hs.iter() {
                if h.key == "id" {
                    id = h.value.map(<[u8]>::to_vec);
                }
                headers = headers.insert(Header {
                    key: h.key,
                    value: h.value,
                });
            }
        }
        if let Some(id) = &id {
            headers = headers.insert(Header {
                key: "causation_id",
                value: Some(id.as_slice()),
            });
        }
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(output).headers(headers);
        if let Some(k) = m.key() {
            record = record.key(k);
        }
        if let Some(v) = m.payload() {
            record = record.payload(v);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(e),
            }
        }
        copied += 1;
        if last_commit.elapsed() >= Duration::from_millis(100) {
            last_commit = Instant::now();
            if let Err(e) = consumer.commit_consumer_state(CommitMode::Async) {
                tracing::debug!(error = %e, "raw pipe: offset commit");
            }
        }
    }
    producer.flush(Duration::from_secs(10))?;
    Ok(copied)
}
