//! What the benchmarks feed in: the run's topics (created fresh, deleted after), a preloaded
//! backlog of N keyed records, and a paced stream whose send times give the latencies.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apache_avro::types::Value as AvroValue;
use apache_avro::Schema;

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;

use super::BenchError;
use eosflow::internals::codec::decode::encode_wire;
use eosflow::internals::codec::registry::Registry;
use eosflow::kafka::topics::{self, TopicOutcome, TopicSpec};
use eosflow::kafka::{ClientRole, KafkaClients};

/// Bytes of a text input value: a decimal amount padded to the size of an order event.
pub const VALUE_BYTES: usize = 300;

/// Schema id and schema of `orders.order-placed.v1` once registered: every input value is then
/// an Avro order event (wire format), else padded decimal text. Set once per bench process.
static AVRO: OnceLock<(u32, Schema)> = OnceLock::new();

/// The order-placed v1 contract's subject in the registry for the benchmarks.
pub const SUBJECT: &str = "eosflow-bench-orders.v1.OrderPlaced";

/// Registers `orders.order-placed.v1` at `registry_url` and makes every input an Avro event.
pub fn use_avro(registry_url: &str) -> Result<u32, BenchError> {
    let catalog =
        eosflow_orders::contracts::catalog().map_err(|e| BenchError::Kafka(e.to_string()))?;
    let text = catalog
        .get("orders.order-placed.v1")
        .ok_or_else(|| BenchError::Kafka("contract orders.order-placed.v1 missing".into()))?
        .text
        .clone();
    let schema = Schema::parse_str(&text).map_err(|e| BenchError::Kafka(e.to_string()))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| BenchError::Kafka(format!("tokio runtime: {e}")))?;
    let id = rt
        .block_on(Registry::new(registry_url).register(SUBJECT, &text))
        .map_err(|e| BenchError::Kafka(format!("registering {SUBJECT}: {e}")))?;
    let _ = AVRO.set((id, schema));
    Ok(id)
}

/// Lines per benchmark order: twelve make the event about 300 bytes of Avro, the size the
/// benchmark promises (five made 173 B).
const ORDER_LINES: i32 = 12;

/// Order `i` placed with `ORDER_LINES` (12) lines, `total_minor` = `amount`: about 300 bytes of Avro.
pub fn order_event(i: u64, amount: i64) -> AvroValue {
    let lines = (0..ORDER_LINES)
        .map(|l| {
            AvroValue::Record(vec![
                (
                    "sku".into(),
                    AvroValue::String(format!("sku-{:08}-{l}", i % 5000)),
                ),
                ("quantity".into(), AvroValue::Int(1 + l)),
                (
                    "unit_price_minor".into(),
                    AvroValue::Long(1999 + i64::from(l)),
                ),
            ])
        })
        .collect();
    AvroValue::Record(vec![
        (
            "order_id".into(),
            AvroValue::String(format!("order-{i:012}-0000-4000-8000-000000000000")),
        ),
        (
            "customer_id".into(),
            AvroValue::String(format!("customer-{:08}", i % 1000)),
        ),
        (
            "placed_at".into(),
            AvroValue::TimestampMillis(1_700_000_000_000 + i as i64),
        ),
        ("currency".into(), AvroValue::String("EUR".into())),
        ("total_minor".into(), AvroValue::Long(amount)),
        ("lines".into(), AvroValue::Array(lines)),
    ])
}

/// Microseconds since the epoch: the clock both send and arrival times are read from.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or_default()
}

/// The value of record `i`: an Avro order event with its amount after [`use_avro`], else the
/// amount space-padded to [`VALUE_BYTES`] (the counting topology trims it).
pub fn value(i: u64) -> Result<Vec<u8>, BenchError> {
    let amount = eosflow_verify::Workload::amount(i);
    if let Some((id, schema)) = AVRO.get() {
        return encode_wire(*id, schema, order_event(i, amount))
            .map_err(|e| BenchError::Kafka(format!("encoding order {i}: {e}")));
    }
    let mut v = format!("{amount}").into_bytes();
    v.resize(VALUE_BYTES, b' ');
    Ok(v)
}

/// Creates `specs`; every one must be new (names are unique per run).
pub fn create_topics(clients: &KafkaClients, specs: &[TopicSpec]) -> Result<(), BenchError> {
    let outcomes = topics::apply_blocking(clients, specs, Duration::from_secs(30))
        .map_err(|e| BenchError::Kafka(format!("creating topics: {e}")))?;
    if let Some((t, o)) = outcomes.iter().find(|(_, o)| *o != TopicOutcome::Created) {
        return Err(BenchError::Kafka(format!(
            "topic {t} already existed ({o:?}); a benchmark point needs fresh topics"
        )));
    }
    Ok(())
}

/// Deletes every topic named `<app>.…` or `<app>-…` (the point's own, the changelog and the
/// topics Kafka Streams created): the shared broker must not accumulate partitions.
pub fn delete_topics_with_prefix(clients: &KafkaClients, app: &str) -> Result<usize, BenchError> {
    let err = |e: KafkaError| BenchError::Kafka(format!("deleting topics {app}*: {e}"));
    let (dot, dash) = (format!("{app}."), format!("{app}-"));
    let admin: AdminClient<DefaultClientContext> =
        clients.config(ClientRole::Admin).create().map_err(err)?;
    let md = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(30))
        .map_err(err)?;
    let names: Vec<String> = md
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .filter(|n| n.starts_with(&dot) || n.starts_with(&dash))
        .collect();
    if names.is_empty() {
        return Ok(0);
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| BenchError::Kafka(format!("tokio runtime: {e}")))?;
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    rt.block_on(admin.delete_topics(&refs, &opts))
        .map_err(err)?;
    Ok(names.len())
}

/// A producer for the inputs (idempotent, as an upstream service would write).
pub fn producer(clients: &KafkaClients, linger_ms: u32) -> Result<BaseProducer, BenchError> {
    clients
        .config(ClientRole::Idempotent)
        .set("linger.ms", linger_ms.to_string())
        .create()
        .map_err(|e| BenchError::Kafka(format!("creating the input producer: {e}")))
}

/// Sends one record, waiting while librdkafka's queue is full (deadline 60 s).
pub fn send(
    producer: &BaseProducer,
    topic: &str,
    partition: Option<i32>,
    key: &str,
    id: &str,
    value: &[u8],
) -> Result<(), BenchError> {
    send_at(producer, topic, (partition, None), key, id, value)
}

/// [`send`] with the record's timestamp (its event time) set when `ts` is given.
pub fn send_at(
    producer: &BaseProducer,
    topic: &str,
    (partition, ts): (Option<i32>, Option<i64>),
    key: &str,
    id: &str,
    value: &[u8],
) -> Result<(), BenchError> {
    let mut record = BaseRecord::to(topic)
        .key(key.as_bytes())
        .payload(value)
        .headers(OwnedHeaders::new().insert(Header {
            key: "id",
            value: Some(id.as_bytes()),
        }));
    if let Some(p) = partition {
        record = record.partition(p);
    }
    if let Some(ts) = ts {
        record = record.timestamp(ts);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r))
                if Instant::now() < deadline =>
            {
                record = r;
                producer.poll(Duration::from_millis(5));
            }
            Err((e, _)) => return Err(BenchError::Kafka(format!("producing to {topic}: {e}"))),
        }
    }
}

/// Flushes `producer`: every input is in the log before the clock starts.
pub fn flush(producer: &BaseProducer) -> Result<(), BenchError> {
    producer
        .flush(Duration::from_secs(120))
        .map_err(|e| BenchError::Kafka(format!("flushing inputs: {e}")))
}

/// A backlog held back by an open transaction: `read_committed` contenders see none of it until
/// [`Backlog::release`], so they can start, join and warm up first and the clock starts with the
/// whole backlog in the log at once.
pub struct Backlog {
    producer: BaseProducer,
}

impl Backlog {
    /// Writes `records` records `r<i>` over `keys` keys (`k<i % keys>`) in one open transaction;
    /// with `times`, record `i`'s timestamp (event time) is `base + i·step` for `(base, step)`.
    pub fn write(
        clients: &KafkaClients,
        topic: &str,
        (records, keys): (u64, u64),
        id: &str,
        times: Option<(i64, i64)>,
    ) -> Result<Self, BenchError> {
        let kerr = |e: KafkaError| BenchError::Kafka(format!("backlog transaction: {e}"));
        let timeout = Duration::from_secs(600);
        let p: BaseProducer = clients
            .config(ClientRole::Transactional { id, timeout })
            .create()
            .map_err(kerr)?;
        p.init_transactions(Duration::from_secs(30)).map_err(kerr)?;
        p.begin_transaction().map_err(kerr)?;
        fill(&p, topic, records, keys, times)?;
        flush(&p)?;
        Ok(Self { producer: p })
    }

    /// Commits: the whole backlog becomes visible at once.
    pub fn release(self) -> Result<(), BenchError> {
        self.producer
            .commit_transaction(Duration::from_secs(60))
            .map_err(|e| BenchError::Kafka(format!("committing the backlog: {e}")))
    }
}

/// Preloads `records` records `r<i>` over `keys` keys (`k<i % keys>`), visible at once.
pub fn preload(
    clients: &KafkaClients,
    topic: &str,
    records: u64,
    keys: u64,
) -> Result<(), BenchError> {
    let p = producer(clients, 5)?;
    fill(&p, topic, records, keys, None)?;
    flush(&p)
}

/// One probe per partition (`p<base + partition>`): its output shows the partition is being
/// processed.
pub fn probes(
    clients: &KafkaClients,
    topic: &str,
    partitions: i32,
    base: u64,
) -> Result<(), BenchError> {
    probes_at(clients, topic, partitions, base, None)
}

/// [`probes`] with timestamp (event time) `ts` when given.
pub fn probes_at(
    clients: &KafkaClients,
    topic: &str,
    partitions: i32,
    base: u64,
    ts: Option<i64>,
) -> Result<(), BenchError> {
    let p = producer(clients, 0)?;
    for part in 0..partitions {
        let n = base + part as u64;
        send_at(
            &p,
            topic,
            (Some(part), ts),
            &format!("probe-{part}"),
            &format!("p{n}"),
            &value(0)?,
        )?;
    }
    flush(&p)
}

/// Records `r<from>` … `r<from + records - 1>` over `keys` keys (`k<i % keys>`), visible at
/// once: updates of keys a [`preload`] wrote, with ids of their own (eosflow deduplicates by
/// id).
pub fn preload_more(
    clients: &KafkaClients,
    topic: &str,
    (from, records): (u64, u64),
    keys: u64,
) -> Result<(), BenchError> {
    let p = producer(clients, 5)?;
    for i in from..from + records {
        send(
            &p,
            topic,
            None,
            &format!("k{}", i % keys.max(1)),
            &format!("r{i}"),
            &value(i)?,
        )?;
        if i % 1024 == 0 {
            p.poll(Duration::ZERO);
        }
    }
    flush(&p)
}

fn fill(
    p: &BaseProducer,
    topic: &str,
    records: u64,
    keys: u64,
    times: Option<(i64, i64)>,
) -> Result<(), BenchError> {
    for i in 0..records {
        let ts = times.map(|(base, step)| base + i as i64 * step);
        send_at(
            p,
            topic,
            (None, ts),
            &format!("k{}", i % keys.max(1)),
            &format!("r{i}"),
            &value(i)?,
        )?;
        if i % 1024 == 0 {
            p.poll(Duration::ZERO);
        }
    }
    Ok(())
}

/// Sends `count` records `l<i>` at `rate` per second; returns each one's send time (µs).
pub fn paced(
    clients: &KafkaClients,
    topic: &str,
    count: u64,
    rate: u64,
    keys: u64,
) -> Result<Vec<u64>, BenchError> {
    // No linger: a latency sample starts when the record leaves, not when a batch fills.
    let p = producer(clients, 0)?;
    // An idempotent producer's first sends wait for its producer id: one acknowledged warm-up
    // record (`w0`, not measured) keeps that wait out of the latencies.
    send(&p, topic, None, "k0", "w0", &value(0)?)?;
    flush(&p)?;
    let started = Instant::now();
    let mut sent = Vec::with_capacity(count as usize);
    for i in 0..count {
        let due = Duration::from_secs_f64(i as f64 / rate.max(1) as f64);
        let elapsed = started.elapsed();
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
        sent.push(now_us());
        send(
            &p,
            topic,
            None,
            &format!("k{}", i % keys.max(1)),
            &format!("l{i}"),
            &value(i)?,
        )?;
        p.poll(Duration::ZERO);
    }
    flush(&p)?;
    Ok(sent)
}
