//! The `poison` scenario: a corpus of bad-input classes (malformed bytes, bad magic byte,
//! unknown schema id, truncated Avro, wrong types, oversize, null key, tombstone, bad header
//! encoding, handler panic, illegal transition, transient-then-success, always-transient, …)
//! interleaved with good order events, through the `orders` topology (real registry, real
//! broker, separate processes, optional kill -9s).
//!
//! Proven from outside: every good event is in the output exactly once and in order, every bad
//! record is in the DLT exactly once with the reason (and class) its kind must produce, nothing
//! else is in the DLT, and the final per-order state (through `eosflow state dump`) is exact.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use apache_avro::types::Value;
use apache_avro::Schema;
use rand::Rng;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::Message;

use super::scenario::{Scenario, ScenarioEnv, ScenarioReport};
use super::{group_lag, instance_env, Instance};
use eosflow::config::Config;
use eosflow::internals::codec::decode::encode_wire;
use eosflow::internals::codec::registry::Registry;
use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::retry::tooling::{self, Selector};
use eosflow::kafka::topics;
use eosflow::kafka::{ClientRole, KafkaClients};
use eosflow_orders::poison_lifecycle::{OrderOutput, MAX_VALUE_BYTES};

/// Shape of a poison run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Good orders (each 2–3 events).
    pub orders: u64,
    /// Records of each bad class.
    pub copies: u32,
    /// Processor processes.
    pub instances: usize,
    /// kill -9s while the corpus is processed.
    pub kills: u32,
    /// Partitions of every topic.
    pub partitions: i32,
}

impl Options {
    /// The `make test` version: one of each class among ~750 good events, one instance.
    pub fn short() -> Self {
        Self {
            orders: 300,
            copies: 1,
            instances: 1,
            kills: 0,
            partitions: 4,
        }
    }

    /// The long version: 50 of each class among ~50k good events, two instances, kill -9s.
    pub fn long() -> Self {
        Self {
            orders: 20_000,
            copies: 50,
            instances: 2,
            kills: 5,
            partitions: 8,
        }
    }
}

/// A value just under the broker's record limit (1,048,588 bytes with the record's overhead).
const NEAR_BROKER_LIMIT: usize = 1_040_000;

/// One record to produce.
#[derive(Debug, Clone)]
struct Raw {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Vec<u8>)>,
}

/// A bad record and what the DLT must say about it.
#[derive(Debug, Clone)]
struct Bad {
    class: &'static str,
    /// How the DLT letter is recognised: its key, or its `id` header when it has no key.
    identity: String,
    /// Accepted prefixes of `error.message`.
    reasons: &'static [&'static str],
    /// `error.class`.
    dlt_class: &'static str,
}

/// Schemas registered for the run, by role.
struct Schemas {
    placed_v1: (u32, Schema),
    placed_v2: (u32, Schema),
    paid: (u32, Schema),
    shipped: (u32, Schema),
    cancelled: (u32, Schema),
    status: (u32, Schema),
    stranger: (u32, Schema),
    wrong: (u32, Schema),
}

const STRANGER: &str = r#"{"type":"record","name":"Stranger","namespace":"poison.test","doc":"A type no consumer knows.","fields":[{"name":"a","type":"int","doc":"Anything."}]}"#;

/// `orders.v2.OrderPlaced` with `total_minor` as a string: the right name, the wrong type.
const WRONG_TYPE: &str = r#"{"type":"record","name":"OrderPlaced","namespace":"orders.v2","doc":"Wrong field type.","fields":[{"name":"order_id","type":"string"},{"name":"customer_id","type":"string"},{"name":"placed_at","type":"long"},{"name":"currency","type":"string"},{"name":"total_minor","type":"string"},{"name":"lines","type":{"type":"array","items":"string"}}]}"#;

fn register(
    rt: &tokio::runtime::Runtime,
    registry: &Registry,
    subject: &str,
    text: &str,
) -> Result<(u32, Schema), String> {
    let id = rt
        .block_on(registry.register(subject, text))
        .map_err(|e| format!("registering {subject}: {e}"))?;
    let schema = Schema::parse_str(text).map_err(|e| format!("parsing {subject}: {e}"))?;
    Ok((id, schema))
}

fn schemas(config: &Config, input: &str) -> Result<Schemas, String> {
    let catalog = eosflow_orders::contracts::catalog().map_err(|e| e.to_string())?;
    let text = |t: &str| {
        catalog
            .get(t)
            .map(|c| (c.full_name.clone(), c.text.clone()))
            .ok_or_else(|| format!("contract {t} missing from the catalog"))
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let registry = Registry::new(&config.schema_registry.url);
    let reg = |t: &str| -> Result<(u32, Schema), String> {
        let (full, text) = text(t)?;
        register(&rt, &registry, &format!("{input}-{full}"), &text)
    };
    Ok(Schemas {
        placed_v1: reg("orders.order-placed.v1")?,
        placed_v2: reg("orders.order-placed.v2")?,
        paid: reg("orders.order-paid.v1")?,
        shipped: reg("orders.order-shipped.v1")?,
        cancelled: reg("orders.order-cancelled.v1")?,
        status: reg("orders.order-status-changed.v1")?,
        stranger: register(
            &rt,
            &registry,
            &format!("{input}-poison.test.Stranger"),
            STRANGER,
        )?,
        wrong: register(
            &rt,
            &registry,
            &format!("{input}-wrongtype-orders.v2.OrderPlaced"),
            WRONG_TYPE,
        )?,
    })
}

fn text(v: &str) -> Value {
    Value::String(v.to_string())
}

fn placed(order: &str, customer: &str, quantity: i32, v2: bool) -> Value {
    let line = Value::Record(vec![
        ("sku".into(), text("sku-1")),
        ("quantity".into(), Value::Int(quantity)),
        ("unit_price_minor".into(), Value::Long(250)),
    ]);
    let mut f = vec![
        ("order_id".into(), text(order)),
        ("customer_id".into(), text(customer)),
        (
            "placed_at".into(),
            Value::TimestampMillis(1_700_000_000_000),
        ),
        ("currency".into(), text("EUR")),
        ("total_minor".into(), Value::Long(250 * i64::from(quantity))),
        ("lines".into(), Value::Array(vec![line])),
    ];
    if v2 {
        f.push(("channel".into(), Value::Union(1, Box::new(text("web")))));
    }
    Value::Record(f)
}

fn paid(order: &str) -> Value {
    Value::Record(vec![
        ("order_id".into(), text(order)),
        ("paid_at".into(), Value::TimestampMillis(1_700_000_001_000)),
        ("payment_id".into(), text(&format!("pay-{order}"))),
        ("currency".into(), text("EUR")),
        ("amount_minor".into(), Value::Long(250)),
    ])
}

fn shipped(order: &str) -> Value {
    Value::Record(vec![
        ("order_id".into(), text(order)),
        (
            "shipped_at".into(),
            Value::TimestampMillis(1_700_000_002_000),
        ),
        ("carrier".into(), text("post")),
        ("tracking_number".into(), text(&format!("t-{order}"))),
    ])
}

fn cancelled(order: &str) -> Value {
    Value::Record(vec![
        ("order_id".into(), text(order)),
        (
            "cancelled_at".into(),
            Value::TimestampMillis(1_700_000_003_000),
        ),
        ("reason".into(), Value::Enum(0, "CUSTOMER_REQUEST".into())),
        ("note".into(), Value::Union(0, Box::new(Value::Null))),
    ])
}

fn status_changed(order: &str, from: (u32, &str), to: (u32, &str)) -> Value {
    Value::Record(vec![
        ("order_id".into(), text(order)),
        (
            "changed_at".into(),
            Value::TimestampMillis(1_700_000_004_000),
        ),
        ("from_status".into(), Value::Enum(from.0, from.1.into())),
        ("to_status".into(), Value::Enum(to.0, to.1.into())),
    ])
}

fn wire(schema: &(u32, Schema), v: Value) -> Result<Vec<u8>, String> {
    encode_wire(schema.0, &schema.1, v).map_err(|e| format!("encoding: {e}"))
}

fn headers(id: &[u8], type_name: Option<&str>) -> Vec<(String, Vec<u8>)> {
    let mut h = vec![("id".to_string(), id.to_vec())];
    if let Some(t) = type_name {
        h.push(("type".into(), t.as_bytes().to_vec()));
    }
    h
}

/// The good events: per order, in order; expected final state per order.
struct Good {
    /// Per order: the events as records.
    orders: Vec<Vec<Raw>>,
    /// Good ids.
    ids: Vec<String>,
    /// Order → (status, events).
    expected: BTreeMap<String, (String, i64)>,
}

fn good(s: &Schemas, n: u64) -> Result<Good, String> {
    let mut g = Good {
        orders: Vec::new(),
        ids: Vec::new(),
        expected: BTreeMap::new(),
    };
    for i in 0..n {
        let order = format!("o{i}");
        let mut evs: Vec<(&(u32, Schema), Value, &str)> = Vec::new();
        let v2 = i % 2 == 0;
        let placed_schema = if v2 { &s.placed_v2 } else { &s.placed_v1 };
        let placed_type = if v2 {
            "orders.order-placed.v2"
        } else {
            "orders.order-placed.v1"
        };
        // Pattern 4 is transient-then-success: the first attempt fails, retry level 1 succeeds.
        let customer = if i % 5 == 4 {
            "poison:transient:1".to_string()
        } else {
            format!("c{}", i % 97)
        };
        evs.push((placed_schema, placed(&order, &customer, 1, v2), placed_type));
        let status = match i % 5 {
            0 => {
                evs.push((&s.paid, paid(&order), "orders.order-paid.v1"));
                evs.push((&s.shipped, shipped(&order), "orders.order-shipped.v1"));
                "SHIPPED"
            }
            1 | 4 => {
                evs.push((&s.paid, paid(&order), "orders.order-paid.v1"));
                "PAID"
            }
            2 => {
                evs.push((&s.cancelled, cancelled(&order), "orders.order-cancelled.v1"));
                "CANCELLED"
            }
            _ => {
                evs.push((
                    &s.status,
                    status_changed(&order, (0, "PLACED"), (1, "PAID")),
                    "orders.order-status-changed.v1",
                ));
                evs.push((&s.shipped, shipped(&order), "orders.order-shipped.v1"));
                "SHIPPED"
            }
        };
        g.expected
            .insert(order.clone(), (status.to_string(), evs.len() as i64));
        let mut recs = Vec::new();
        for (n, (schema, value, ty)) in evs.into_iter().enumerate() {
            let id = format!("g-{order}-{n}");
            recs.push(Raw {
                key: Some(order.clone().into_bytes()),
                value: Some(wire(schema, value)?),
                headers: headers(id.as_bytes(), Some(ty)),
            });
            g.ids.push(id);
        }
        g.orders.push(recs);
    }
    Ok(g)
}

/// Builds copy `j` of every bad class: the records (a class may need a good record before its
/// bad one) and what the DLT must say.
fn bad(
    s: &Schemas,
    j: u32,
    good_ids: &mut Vec<String>,
    expected: &mut BTreeMap<String, (String, i64)>,
) -> Result<Vec<(Vec<Raw>, Bad)>, String> {
    let mut out = Vec::new();
    let good_bytes = |order: &str| wire(&s.placed_v2, placed(order, "c1", 1, true));
    let mut add = |class: &'static str,
                   key: Option<String>,
                   value: Option<Vec<u8>>,
                   hdrs: Option<Vec<(String, Vec<u8>)>>,
                   reasons: &'static [&'static str],
                   dlt_class: &'static str| {
        let id = format!("b-{class}-{j}");
        let identity = key.clone().unwrap_or_else(|| id.clone());
        out.push((
            vec![Raw {
                key: key.map(String::into_bytes),
                value,
                headers: hdrs.unwrap_or_else(|| headers(id.as_bytes(), None)),
            }],
            Bad {
                class,
                identity,
                reasons,
                dlt_class,
            },
        ));
    };
    let k = |class: &str| Some(format!("bad-{class}-{j}"));
    const P: &str = "permanent";
    let mut malformed = vec![0u8];
    malformed.extend_from_slice(&s.placed_v2.0.to_be_bytes());
    malformed.extend_from_slice(&[0xff; 12]);
    add(
        "malformed-bytes",
        k("malformed-bytes"),
        Some(malformed),
        None,
        &["corrupt-avro:", "truncated-avro:"],
        P,
    );
    let mut magic = good_bytes("x")?;
    magic[0] = 0x01;
    add(
        "bad-magic-byte",
        k("bad-magic-byte"),
        Some(magic),
        None,
        &["unknown-magic-byte: 0x01"],
        P,
    );
    add(
        "text-payload",
        k("text-payload"),
        Some(b"hello, world".to_vec()),
        None,
        &["unknown-magic-byte: 0x68"],
        P,
    );
    add(
        "empty-value",
        k("empty-value"),
        Some(Vec::new()),
        None,
        &["truncated-header: 0 bytes"],
        P,
    );
    add(
        "short-header",
        k("short-header"),
        Some(vec![0, 0, 0]),
        None,
        &["truncated-header: 3 bytes"],
        P,
    );
    let mut unknown = good_bytes("x")?;
    unknown[1..5].copy_from_slice(&0x7fff_fff0u32.to_be_bytes());
    add(
        "unknown-schema-id",
        k("unknown-schema-id"),
        Some(unknown),
        None,
        &["unknown-schema-id:"],
        P,
    );
    let g = good_bytes("x")?;
    add(
        "truncated-avro",
        k("truncated-avro"),
        Some(g[..g.len() - 4].to_vec()),
        None,
        &["truncated-avro:"],
        P,
    );
    let mut trailing = g.clone();
    trailing.extend_from_slice(b"garbage");
    add(
        "trailing-bytes",
        k("trailing-bytes"),
        Some(trailing),
        None,
        &["corrupt-avro:"],
        P,
    );
    add(
        "unknown-type",
        k("unknown-type"),
        Some(wire(
            &s.stranger,
            Value::Record(vec![("a".into(), Value::Int(1))]),
        )?),
        None,
        &["unknown-type: poison.test.Stranger"],
        P,
    );
    let wrong = Value::Record(vec![
        ("order_id".into(), text("x")),
        ("customer_id".into(), text("c")),
        ("placed_at".into(), Value::Long(1)),
        ("currency".into(), text("EUR")),
        ("total_minor".into(), text("a lot")),
        ("lines".into(), Value::Array(vec![])),
    ]);
    add(
        "wrong-field-type",
        k("wrong-field-type"),
        Some(wire(&s.wrong, wrong)?),
        None,
        &["corrupt-avro:", "bad-writer-schema:"],
        P,
    );
    let id = format!("b-type-mismatch-{j}");
    add(
        "type-header-mismatch",
        k("type-header-mismatch"),
        Some(g.clone()),
        Some(headers(id.as_bytes(), Some("orders.order-paid.v1"))),
        &["type-mismatch:"],
        P,
    );
    add(
        "oversize",
        k("oversize"),
        Some(vec![0u8; MAX_VALUE_BYTES + 1]),
        None,
        &["oversize:"],
        P,
    );
    // Accepted by the broker (its limit is 1,048,588 bytes), refused by the topology as
    // oversize: its dead letter (the record plus the eosflow.dlt.* headers) is over the
    // producer's 1,000,000-byte limit and must reach the DLT truncated, not stall the partition.
    add(
        "near-broker-limit",
        k("near-broker-limit"),
        Some(vec![0u8; NEAR_BROKER_LIMIT]),
        None,
        &["oversize:"],
        P,
    );
    add("null-key", None, Some(g.clone()), None, &["null-key:"], P);
    add(
        "tombstone",
        k("tombstone"),
        None,
        None,
        &["missing-value:"],
        P,
    );
    add(
        "bad-header-id",
        k("bad-header-id"),
        Some(g.clone()),
        Some(vec![("id".into(), vec![0xff, 0xfe, 0x00])]),
        &["bad-header: header `id`"],
        P,
    );
    let id = format!("b-bad-header-type-{j}");
    add(
        "bad-header-type",
        k("bad-header-type"),
        Some(g.clone()),
        Some(vec![
            ("id".into(), id.into_bytes()),
            ("type".into(), vec![0xc3, 0x28]),
        ]),
        &["bad-header: header `type`"],
        P,
    );
    add(
        "bad-json",
        k("bad-json"),
        Some(b"{not json".to_vec()),
        None,
        &["bad-json:"],
        P,
    );
    add(
        "untyped-json",
        k("untyped-json"),
        Some(br#"{"order_id":"x"}"#.to_vec()),
        None,
        &["untyped-json:"],
        P,
    );
    let id = format!("b-json-not-accepted-{j}");
    add(
        "json-not-accepted",
        k("json-not-accepted"),
        Some(br#"{"order_id":"x"}"#.to_vec()),
        Some(headers(id.as_bytes(), Some("orders.order-placed.v2"))),
        &["json-not-accepted:"],
        P,
    );
    add(
        "handler-panic",
        k("handler-panic"),
        Some(wire(&s.placed_v2, placed("p", "poison:panic", 1, true))?),
        None,
        &["handler panicked:"],
        P,
    );
    add(
        "illegal-transition",
        k("illegal-transition"),
        Some(wire(&s.shipped, shipped("never-placed"))?),
        None,
        &["illegal-transition: order-shipped"],
        P,
    );
    add(
        "invalid-order",
        k("invalid-order"),
        Some(wire(&s.placed_v2, placed("q", "c1", 0, true))?),
        None,
        &["invalid-order:"],
        P,
    );
    add(
        "always-transient",
        k("always-transient"),
        Some(wire(
            &s.placed_v2,
            placed("t", "poison:always-transient", 1, true),
        )?),
        None,
        &[
            "simulated outage that never ends",
            "transient: simulated outage that never ends",
        ],
        "transient-exhausted",
    );
    // A second order-placed for a live order: the bad record shares a key that has state, and
    // the state must be exactly what the good record made.
    let key = format!("bad-double-placed-{j}");
    let first = format!("g-{key}-0");
    let second = format!("b-double-placed-{j}");
    let bytes = wire(&s.placed_v2, placed(&key, "c1", 1, true))?;
    good_ids.push(first.clone());
    expected.insert(key.clone(), ("PLACED".into(), 1));
    out.push((
        vec![
            Raw {
                key: Some(key.clone().into_bytes()),
                value: Some(bytes.clone()),
                headers: headers(first.as_bytes(), Some("orders.order-placed.v2")),
            },
            Raw {
                key: Some(key.clone().into_bytes()),
                value: Some(bytes),
                headers: headers(second.as_bytes(), Some("orders.order-placed.v2")),
            },
        ],
        Bad {
            class: "double-placed",
            identity: key,
            reasons: &["illegal-transition: order-placed"],
            dlt_class: P,
        },
    ));
    Ok(out)
}

fn produce(clients: &KafkaClients, topic: &str, records: &[Raw]) -> Result<(), String> {
    let producer: ThreadedProducer<DefaultProducerContext> = clients
        .config(ClientRole::Idempotent)
        // Up to the broker's limit: the corpus has a record just under it.
        .set("message.max.bytes", "1048588")
        .create()
        .map_err(|e| format!("creating the corpus producer: {e}"))?;
    for r in records {
        let mut h = OwnedHeaders::new();
        for (k, v) in &r.headers {
            h = h.insert(Header {
                key: k,
                value: Some(v.as_slice()),
            });
        }
        let mut rec: BaseRecord<'_, Vec<u8>, Vec<u8>> = BaseRecord::to(topic).headers(h);
        if let Some(k) = &r.key {
            rec = rec.key(k);
        }
        if let Some(v) = &r.value {
            rec = rec.payload(v);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    back,
                )) if Instant::now() < deadline => {
                    rec = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(format!("producing the corpus: {e}")),
            }
        }
    }
    producer
        .flush(Duration::from_secs(60))
        .map_err(|e| format!("flushing the corpus: {e}"))
}

/// Runs the scenario against the shared broker and registry.
pub fn run(config: &Config, env: &ScenarioEnv, opts: &Options) -> Result<ScenarioReport, String> {
    let started = Instant::now();
    let clients = KafkaClients::new(config.kafka.clone());
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let app_id = format!("poison-{run_id}");
    let input = format!("poison-{run_id}.input");
    let output = format!("poison-{run_id}.output");
    let changelog = format!("{app_id}-orders-changelog");
    let dlt = format!("{input}.DLT");
    // Two short retry levels: always-transient records reach the DLT in about a second.
    let ladder = eosflow::internals::retry::ladder_topics(std::slice::from_ref(&input), 2);
    let specs = super::run_topics(&input, 2, &output, &changelog, opts.partitions);
    topics::apply_blocking(&clients, &specs, Duration::from_secs(30))
        .map_err(|e| format!("creating the run's topics: {e}"))?;
    super::wait_for_topics(&clients, &specs)?;

    let schemas = schemas(config, &input)?;
    let mut g = good(&schemas, opts.orders)?;
    let mut bads: Vec<(Vec<Raw>, Bad)> = Vec::new();
    for j in 0..opts.copies {
        bads.extend(bad(&schemas, j, &mut g.ids, &mut g.expected)?);
    }
    let classes: std::collections::BTreeSet<&str> = bads.iter().map(|(_, b)| b.class).collect();
    // Interleave: events of the orders round-robin (an order's events stay in order), a bad
    // record every `every` good ones.
    let mut stream: Vec<Raw> = Vec::new();
    let longest = g.orders.iter().map(Vec::len).max().unwrap_or(0);
    let good_total: usize = g.orders.iter().map(Vec::len).sum();
    let every = (good_total / bads.len().max(1)).max(1);
    let mut next_bad = bads.iter();
    let mut since = 0;
    for step in 0..longest {
        for order in &g.orders {
            if let Some(r) = order.get(step) {
                stream.push(r.clone());
                since += 1;
                if since >= every {
                    since = 0;
                    if let Some((recs, _)) = next_bad.next() {
                        stream.extend(recs.iter().cloned());
                    }
                }
            }
        }
    }
    for (recs, _) in next_bad {
        stream.extend(recs.iter().cloned());
    }
    produce(&clients, &input, &stream)?;

    let logs = env.work_dir.join(&app_id);
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let mut instances: Vec<Instance> = (0..opts.instances)
        .map(|i| {
            let mut e = instance_env(
                config,
                &app_id,
                &format!("i{i}"),
                &input,
                100,
                &logs.join("state"),
            );
            e.push(("EOSFLOW_RETRY_DELAYS_MS".into(), "300,300".into()));
            e.push(("EOSFLOW_RETRY_JITTER_PERCENT".into(), "0".into()));
            e.push((
                "EOSFLOW_SCHEMA_REGISTRY_URL".into(),
                config.schema_registry.url.clone(),
            ));
            Instance::new(
                format!("i{i}"),
                "order-lifecycle",
                e,
                logs.join(format!("i{i}.log")),
            )
        })
        .collect();
    for inst in &mut instances {
        inst.spawn(&env.exe, &output)?;
    }
    let mut rng = rand::thread_rng();
    let mut kills = 0;
    let mut kills_mid_stream = 0u32;
    let mut next_kill = Instant::now() + Duration::from_secs(3);
    let levels: Vec<String> = ladder
        .iter()
        .filter(|t| !t.ends_with(".DLT"))
        .cloned()
        .collect();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        for inst in instances.iter_mut() {
            if let Some(st) = inst.exited() {
                return Err(format!(
                    "instance {} exited by itself ({st}); see {}",
                    inst.name,
                    inst.log.display()
                ));
            }
        }
        let mut lag = 0;
        for t in &levels {
            lag += group_lag(&clients, &app_id, t, opts.partitions)?;
        }
        if lag == 0 && kills >= opts.kills {
            break;
        }
        if kills < opts.kills && Instant::now() >= next_kill {
            let i = rng.gen_range(0..instances.len());
            instances[i].kill9();
            kills_mid_stream += u32::from(lag > 0);
            std::thread::sleep(Duration::from_millis(rng.gen_range(100..1000)));
            instances[i].spawn(&env.exe, &output)?;
            kills += 1;
            next_kill = Instant::now() + Duration::from_secs(rng.gen_range(2..6));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "lag still {lag} after 600 s; logs in {}",
                logs.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    for inst in instances.iter_mut() {
        inst.kill9();
    }

    // Outputs: every good id once, per order in order; no bad id.
    let bad_ids: HashMap<&str, &Bad> = bads.iter().map(|(_, b)| (b.identity.as_str(), b)).collect();
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut per_order: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut malformed = 0u64;
    read_all(&clients, &output, Duration::from_secs(60), |m| {
        match m
            .payload()
            .and_then(|p| serde_json::from_slice::<OrderOutput>(p).ok())
        {
            Some(o) => {
                *seen.entry(o.id).or_default() += 1;
                let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
                per_order.entry(key).or_default().push(o.events);
            }
            None => malformed += 1,
        }
        Ok(())
    })
    .map_err(|e| format!("reading the output: {e}"))?;
    let (mut lost, mut duplicated) = (0u64, 0u64);
    for id in &g.ids {
        match seen.get(id) {
            None => lost += 1,
            Some(n) => duplicated += u64::from(n - 1),
        }
    }
    let leaked = seen.keys().filter(|id| id.starts_with("b-")).count() as u64;
    let sequence_breaks = per_order
        .values()
        .filter(|l| l.iter().enumerate().any(|(i, e)| *e != i as i64 + 1))
        .count() as u64;

    // The DLT: every bad record once, with its reason and class; nothing else.
    let letters = tooling::read(&clients, &dlt, &Selector::default())
        .map_err(|e| format!("reading the DLT: {e}"))?;
    let mut in_dlt: HashMap<String, u32> = HashMap::new();
    let (mut wrong_reason, mut unexpected) = (Vec::new(), 0u64);
    for l in &letters {
        let identity = l
            .key
            .clone()
            .or_else(|| l.header("id").map(str::to_string))
            .unwrap_or_default();
        let Some(b) = bad_ids.get(identity.as_str()) else {
            unexpected += 1;
            continue;
        };
        *in_dlt.entry(identity.clone()).or_default() += 1;
        let msg = l.dlt("error.message").unwrap_or_default();
        let class = l.dlt("error.class").unwrap_or_default();
        let cut_down = l
            .header(eosflow::internals::retry::dlt::TRUNCATED_FROM)
            .is_some();
        if b.class == "near-broker-limit" && !cut_down {
            wrong_reason.push(format!("{}: not truncated", b.class));
        }
        if !b.reasons.iter().any(|r| msg.starts_with(r)) || class != b.dlt_class {
            wrong_reason.push(format!("{}: class={class} message={msg:?}", b.class));
        }
    }
    for (_, b) in &bads {
        match in_dlt.get(&b.identity) {
            None => lost += 1,
            Some(n) => duplicated += u64::from(n - 1),
        }
    }
    for w in wrong_reason.iter().take(5) {
        tracing::error!(letter = %w, "dead letter with the wrong reason");
    }

    // The final state, through the query command.
    let state = super::query::dump_via_cli(&env.exe, &config.kafka.bootstrap, &changelog, "json")?;
    let mut state_mismatches = 0u64;
    for (order, (status, events)) in &g.expected {
        let ok = state.get(order).is_some_and(|v| {
            v["status"].as_str() == Some(status) && v["events"].as_i64() == Some(*events)
        });
        if !ok {
            state_mismatches += 1;
        }
    }
    state_mismatches += state
        .keys()
        .filter(|k| !g.expected.contains_key(*k))
        .count() as u64;

    let records = (g.ids.len() + bads.len()) as u64;
    let checks_ok = wrong_reason.is_empty()
        && unexpected == 0
        && leaked == 0
        && sequence_breaks == 0
        && malformed == 0
        && state_mismatches == 0;
    Ok(ScenarioReport {
        scenario: Scenario::Poison,
        records,
        lost,
        duplicated,
        dlt: letters.len() as u64,
        stalls: 0,
        checks_ok,
        extra: vec![
            ("classes".into(), classes.len().to_string()),
            ("good".into(), g.ids.len().to_string()),
            ("bad".into(), bads.len().to_string()),
            ("wrong_reasons".into(), wrong_reason.len().to_string()),
            ("unexpected_dlt".into(), unexpected.to_string()),
            ("leaked".into(), leaked.to_string()),
            ("sequence_breaks".into(), sequence_breaks.to_string()),
            ("state_mismatches".into(), state_mismatches.to_string()),
            ("faults".into(), kills.to_string()),
            ("kills_mid_stream".into(), kills_mid_stream.to_string()),
            (
                "elapsed_s".into(),
                format!("{:.1}", started.elapsed().as_secs_f64()),
            ),
        ],
    })
}
