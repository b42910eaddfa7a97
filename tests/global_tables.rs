//! Global tables against the real broker: a `countries` topic on 4 partitions (100 000 rows
//! and one that cannot be decoded, produced before any instance runs) joined with an
//! `orders` stream by a key extractor (the order's value is its country code).
//!
//! One instance bootstraps the table: `/readyz` answers 503 while `/metrics` shows the
//! bootstrap unfinished, every order produced before the start finds its country (so the
//! table was complete before the first order was processed), the undecodable row is skipped
//! and counted, not stalling the table. An update to the topic while it runs is seen by later
//! orders. The instance is `kill -9`ed, the topic gains 25 rows, and the next instance's
//! bootstrap reads only those 25 (it resumed from the store's checkpoint) and joins an order
//! with one of them. A global table whose topic does not exist fails the start naming both.
//!
//! Exactly once: with the table fixed before the stream starts, 6 000 orders are joined while
//! the instance is `kill -9`ed twice mid-stream (once restarting on its state, once on a wiped
//! state dir: the global store rebuilt from its topic); the read_committed shipments must hold
//! every order with a country exactly once, joined with its row.
//!
//! The instances are this test binary re-executed in child mode (`GLOBALS_CHILD`), serving
//! `/metrics` and `/readyz` on an address the test chose.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::ClientRole;
use eosflow::serdes::StringSerde;
use eosflow::topology::{GlobalTableHandle, Topology};
use eosflow_verify::group_lag;
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::Message;
use support::http::{free_addr, get, metric};

const CHILD: &str = "GLOBALS_CHILD";
const PARTITIONS: i32 = 4;
/// Rows of the global table before the first start.
const ROWS: usize = 100_000;
/// Orders produced before the first start.
const ORDERS: usize = 400;
/// Rows added while no instance runs.
const LATER_ROWS: usize = 25;

fn country(i: usize) -> String {
    format!("c{i:06}")
}

/// Orders joined with the countries by the code in the order's value: `order|name` to
/// `<app>.shipments`.
fn topology(app: &str) -> Topology {
    let countries = GlobalTableHandle::new(
        "countries",
        format!("{app}.countries"),
        StringSerde,
        StringSerde,
    );
    let orders = format!("{app}.orders");
    Topology::builder()
        .add_source("orders", &[orders.as_str()], StringSerde, StringSerde)
        .add_global_table(&countries)
        .add_stream_global_table_join(
            "ship",
            &countries,
            |_order: Option<&String>, code: &String| Some(code.clone()),
            |order: Option<&String>, _code: &String, name: &String| {
                Some(format!("{}|{name}", order.map_or("", String::as_str)))
            },
            &["orders"],
        )
        .add_sink(
            "out",
            format!("{app}.shipments"),
            StringSerde,
            StringSerde,
            &["ship"],
        )
        .build()
        .expect("valid topology")
}

fn config(app: &str) -> Config {
    // Small transactions: a kill lands between two of them.
    support::instance_config(app, 100)
}

/// Child mode: `GLOBALS_CHILD=<app> <metrics address>` runs the topology until killed.
#[test]
fn child_instance() {
    let Ok(arg) = std::env::var(CHILD) else {
        return;
    };
    let (app, addr) = arg.split_once(' ').expect("app and address");
    let mut c = config(app);
    c.metrics.listen = addr.to_string();
    eosflow::run(&c, topology(app)).expect("runs until killed");
}

/// Produces `(key, value bytes, id header)` records in order and waits for them all.
fn produce(topic: &str, records: &[(String, Vec<u8>, Option<String>)]) {
    let producer: ThreadedProducer<DefaultProducerContext> = support::clients()
        .config(ClientRole::Idempotent)
        .set("linger.ms", "20")
        .create()
        .expect("producer");
    for (k, v, id) in records {
        let mut r = BaseRecord::<str, [u8]>::to(topic)
            .key(k.as_str())
            .payload(v.as_slice());
        if let Some(id) = id {
            r = r.headers(OwnedHeaders::new().insert(Header {
                key: "id",
                value: Some(id.as_bytes()),
            }));
        }
        support::send_waiting(&producer, r);
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
}

fn rows(
    range: std::ops::Range<usize>,
    name: impl Fn(usize) -> String,
) -> Vec<(String, Vec<u8>, Option<String>)> {
    range
        .map(|i| (country(i), name(i).into_bytes(), None))
        .collect()
}

fn orders(list: &[(String, String)]) -> Vec<(String, Vec<u8>, Option<String>)> {
    list.iter()
        .map(|(id, code)| (id.clone(), code.clone().into_bytes(), Some(id.clone())))
        .collect()
}

/// Every shipment, read_committed: order id to value; each caused by its order.
fn shipments(app: &str) -> BTreeMap<String, String> {
    let topic = format!("{app}.shipments");
    let mut got = BTreeMap::new();
    read_all(&support::clients(), &topic, Duration::from_secs(60), |m| {
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
        let cause = m
            .headers()
            .and_then(|hs| hs.iter().find(|h| h.key == "causation_id"))
            .and_then(|h| h.value)
            .map(|v| String::from_utf8_lossy(v).to_string());
        if cause.as_deref() != Some(key.as_str()) {
            return Err(format!("{value} has causation {cause:?}"));
        }
        if got.insert(key.clone(), value).is_some() {
            return Err(format!("order {key} joined twice"));
        }
        Ok(())
    })
    .expect("read shipments");
    got
}

fn orders_lag(app: &str) -> i64 {
    group_lag(
        &support::clients(),
        app,
        &format!("{app}.orders"),
        PARTITIONS,
    )
    .unwrap_or(i64::MAX)
}

fn wait_orders_consumed(app: &str) {
    support::wait_for("the orders consumed", Duration::from_secs(60), || {
        (orders_lag(app) == 0).then_some(())
    });
}

/// What a started instance showed until it was ready: whether `/readyz` said 503 while the
/// bootstrap was unfinished (`/metrics` without its duration), and `/metrics` once ready.
struct Started {
    child: support::pipeline::Running,
    addr: String,
    unready_while_bootstrapping: bool,
    metrics: String,
    ready_after: Duration,
}

fn start(app: &str) -> Started {
    let addr = free_addr();
    let child = support::spawn_child(CHILD, &format!("{app} {addr}"));
    let started = Instant::now();
    let mut unready_while_bootstrapping = false;
    let table = "table=\"countries\"";
    let metrics = support::wait_for("the instance ready", Duration::from_secs(60), || {
        let ready = get(&addr, "/readyz").map(|(code, _)| code);
        let text = get(&addr, "/metrics").map(|(_, t)| t)?;
        let bootstrapped =
            metric(&text, "eosflow_global_table_bootstrap_seconds", &[table]).is_some();
        match ready {
            Some(503) if !bootstrapped => unready_while_bootstrapping = true,
            Some(200) => {
                assert!(
                    bootstrapped,
                    "ready before the global table was bootstrapped"
                );
                return Some(text);
            }
            _ => {}
        }
        None
    });
    Started {
        child,
        addr,
        unready_while_bootstrapping,
        metrics,
        ready_after: started.elapsed(),
    }
}

fn stop(mut s: Started) {
    s.child.kill().expect("kill -9");
    s.child.wait().expect("reaped");
}

#[test]
fn a_global_table_bootstraps_before_processing_stays_current_and_resumes_from_its_checkpoint() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let began = Instant::now();
    let app = support::unique("globals");
    let cfg = config(&app);
    let t = topology(&app);
    let mut specs = vec![
        TopicSpec::new(format!("{app}.countries"), PARTITIONS, "compact"),
        TopicSpec::new(format!("{app}.orders"), PARTITIONS, "delete"),
        TopicSpec::new(format!("{app}.shipments"), PARTITIONS, "delete"),
    ];
    specs.extend(t.internal_topics(&cfg, PARTITIONS));
    assert!(
        !specs
            .iter()
            .any(|s| s.name.contains("countries") && s.name != format!("{app}.countries")),
        "a global table has no internal topic of its own"
    );
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");

    // The table and the orders, all before the first start; one row cannot be decoded.
    let countries = format!("{app}.countries");
    produce(&countries, &rows(0..ROWS, |i| format!("name-{i}")));
    produce(&countries, &[("bad".into(), vec![0xff, 0xfe], None)]);
    let mut want: BTreeMap<String, String> = BTreeMap::new();
    let mut list = Vec::new();
    for j in 0..ORDERS {
        let i = (j * 7919) % ROWS;
        let id = format!("o{j:04}");
        want.insert(id.clone(), format!("{id}|name-{i}"));
        list.push((id, country(i)));
    }
    list.push(("o-nowhere".into(), "no-such-country".into()));
    produce(&format!("{app}.orders"), &orders(&list));
    let produced = began.elapsed();

    // (a) Bootstrap before processing; readiness waits for it.
    let a = start(&app);
    let read = metric(
        &a.metrics,
        "eosflow_global_table_bootstrap_records",
        &["countries"],
    );
    let took = metric(
        &a.metrics,
        "eosflow_global_table_bootstrap_seconds",
        &["countries"],
    );
    let skipped = metric(
        &a.metrics,
        "eosflow_global_table_skipped_records_total",
        &["countries", "undecodable"],
    );
    println!(
        "produced in {:.1} s; ready after {:.1} s; bootstrap read {read:?} records in {took:?} s",
        produced.as_secs_f64(),
        a.ready_after.as_secs_f64()
    );
    assert!(
        a.unready_while_bootstrapping,
        "/readyz answered 503 while the bootstrap ran"
    );
    assert_eq!(read, Some((ROWS + 1) as f64), "the whole topic was read");
    assert_eq!(
        skipped,
        Some(1.0),
        "the undecodable row was skipped and counted"
    );
    wait_orders_consumed(&app);
    let got = shipments(&app);
    assert_eq!(
        got, want,
        "every order produced before the start found its country (the no-such-country one none)"
    );

    // (b) An update while running is seen by later orders.
    produce(&countries, &[(country(1), b"renamed".to_vec(), None)]);
    let mut n = 0;
    support::wait_for(
        "an order seeing the update",
        Duration::from_secs(30),
        || {
            n += 1;
            let id = format!("u{n:03}");
            produce(
                &format!("{app}.orders"),
                &orders(&[(id.clone(), country(1))]),
            );
            wait_orders_consumed(&app);
            let value = shipments(&app).remove(&id)?;
            (value == format!("{id}|renamed")).then_some(())
        },
    );
    println!("the update was seen by order {n}");
    let lag = metric(
        &get(&a.addr, "/metrics").map(|r| r.1).unwrap_or_default(),
        "eosflow_global_table_lag_records",
        &["countries"],
    );
    println!("lag gauge while running: {lag:?}");
    stop(a);

    // (c) A restart reads only what the topic gained since the checkpoint.
    produce(
        &countries,
        &rows(ROWS..ROWS + LATER_ROWS, |i| format!("late-{i}")),
    );
    produce(
        &format!("{app}.orders"),
        &orders(&[("o-late".into(), country(ROWS + 3))]),
    );
    let b = start(&app);
    let read = metric(
        &b.metrics,
        "eosflow_global_table_bootstrap_records",
        &["countries"],
    );
    println!(
        "second bootstrap read {read:?} records; ready after {:.1} s",
        b.ready_after.as_secs_f64()
    );
    assert_eq!(
        read,
        Some(LATER_ROWS as f64),
        "the restart resumed from the checkpoint"
    );
    wait_orders_consumed(&app);
    assert_eq!(
        shipments(&app).get("o-late").map(String::as_str),
        Some(format!("o-late|late-{}", ROWS + 3).as_str())
    );
    stop(b);
    println!("{:.1} s in all", began.elapsed().as_secs_f64());
    let _ = std::fs::remove_dir_all(&cfg.state.dir);
}

#[test]
fn global_joins_killed_mid_stream_write_every_order_once_with_its_row() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    const COUNTRIES: usize = 2_000;
    const STREAM: usize = 6_000;
    let began = Instant::now();
    let app = support::unique("globals-eos");
    let cfg = config(&app);
    let mut specs = vec![
        TopicSpec::new(format!("{app}.countries"), PARTITIONS, "compact"),
        TopicSpec::new(format!("{app}.orders"), PARTITIONS, "delete"),
        TopicSpec::new(format!("{app}.shipments"), PARTITIONS, "delete"),
    ];
    specs.extend(topology(&app).internal_topics(&cfg, PARTITIONS));
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");
    // The table is fixed before the stream starts: every result is computable.
    produce(
        &format!("{app}.countries"),
        &rows(0..COUNTRIES, |i| format!("name-{i}")),
    );
    let mut want = BTreeMap::new();
    let list: Vec<(String, String)> = (0..STREAM)
        .map(|j| {
            let (id, i) = (format!("o{j:05}"), (j * 31) % (COUNTRIES + 100));
            if i < COUNTRIES {
                want.insert(id.clone(), format!("{id}|name-{i}"));
            }
            (id, country(i))
        })
        .collect();
    let mut instance = start(&app);
    // The orders arrive over about 15 s, in 30 chunks: each kill lands while they still flow.
    const CHUNKS: usize = 30;
    let sent = Arc::new(AtomicUsize::new(0));
    let producer = {
        let (sent, topic) = (sent.clone(), format!("{app}.orders"));
        std::thread::spawn(move || {
            for chunk in list.chunks(STREAM / CHUNKS) {
                produce(&topic, &orders(chunk));
                sent.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    for (at, wipe) in [(CHUNKS / 4, false), (CHUNKS * 2 / 3, true)] {
        support::wait_for("the orders flowing", Duration::from_secs(60), || {
            (sent.load(Ordering::SeqCst) >= at).then_some(())
        });
        let unprocessed = orders_lag(&app);
        stop(instance);
        let flowing = sent.load(Ordering::SeqCst);
        println!(
            "killed after {flowing} of {CHUNKS} chunks sent, {unprocessed} orders unprocessed (state dir wiped: {wipe})"
        );
        assert!(flowing < CHUNKS, "the instance must die mid-stream");
        if wipe {
            // The global store too: the replacement rebuilds it from the topic.
            std::fs::remove_dir_all(&cfg.state.dir).expect("wipe the state dir");
        }
        instance = start(&app);
        if wipe {
            let read = metric(
                &instance.metrics,
                "eosflow_global_table_bootstrap_records",
                &["countries"],
            );
            assert_eq!(read, Some(COUNTRIES as f64), "rebuilt from the topic");
        }
    }
    producer.join().expect("producer");
    wait_orders_consumed(&app);
    stop(instance);
    let got = shipments(&app);
    assert_eq!(got.len(), want.len(), "every order with a country once");
    assert_eq!(got, want);
    println!(
        "{STREAM} orders, {} joined, 2 kills, {:.1} s",
        want.len(),
        began.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&cfg.state.dir);
}

#[test]
fn a_global_table_whose_topic_does_not_exist_fails_the_start_naming_table_and_topic() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let app = support::unique("globals-missing");
    let t = topology(&app);
    let mut specs = vec![
        TopicSpec::new(format!("{app}.orders"), 1, "delete"),
        TopicSpec::new(format!("{app}.shipments"), 1, "delete"),
    ];
    let cfg = config(&app);
    specs.extend(t.internal_topics(&cfg, 1));
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");
    let err = eosflow::internals::processor::Runtime::new(&cfg, t)
        .err()
        .expect("refuses to start")
        .to_string();
    assert!(err.contains("\"countries\""), "{err}");
    assert!(err.contains(&format!("{app}.countries")), "{err}");
    assert!(err.contains("does not exist"), "{err}");
}

/// Deletes `key` from `topic`: a tombstone (null value).
fn tombstone(topic: &str, key: &str) {
    let producer: ThreadedProducer<DefaultProducerContext> = support::clients()
        .config(ClientRole::Idempotent)
        .create()
        .expect("producer");
    support::send_waiting(&producer, BaseRecord::<str, [u8]>::to(topic).key(key));
    producer.flush(Duration::from_secs(60)).expect("flush");
}

/// Issue 32, item 5: a global store had no freshness check. Kept away longer than its topic's
/// `delete.retention.ms`, it resumed from its checkpoint although the cleaner had removed a
/// tombstone together with the row it deleted — the row stayed in the table for ever, and
/// orders kept joining it. It is now rebuilt from the topic: the row is gone.
#[test]
fn a_global_store_kept_away_past_its_topics_delete_retention_is_rebuilt_without_deleted_rows() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    const RETENTION_MS: u64 = 3_000;
    let app = support::unique("globals-stale");
    let cfg = config(&app);
    let countries = format!("{app}.countries");
    let mut table = TopicSpec::new(countries.clone(), 1, "compact");
    for (k, v) in [
        ("delete.retention.ms", RETENTION_MS.to_string()),
        ("segment.ms", "1000".to_string()),
        ("min.cleanable.dirty.ratio", "0.01".to_string()),
        ("min.compaction.lag.ms", "0".to_string()),
    ] {
        table.config.insert(k.to_string(), v);
    }
    let mut specs = vec![
        table,
        TopicSpec::new(format!("{app}.orders"), PARTITIONS, "delete"),
        TopicSpec::new(format!("{app}.shipments"), PARTITIONS, "delete"),
    ];
    specs.extend(topology(&app).internal_topics(&cfg, PARTITIONS));
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");
    produce(&countries, &rows(0..2, |i| format!("name-{i}")));
    let a = start(&app);
    produce(
        &format!("{app}.orders"),
        &orders(&[("o1".into(), country(0))]),
    );
    wait_orders_consumed(&app);
    assert_eq!(
        shipments(&app).get("o1").map(String::as_str),
        Some("o1|name-0")
    );
    stop(a);
    // Away: country 0 is deleted, and the cleaner removes the row and then the tombstone (the
    // topic keeps getting rows so its segments roll).
    tombstone(&countries, &country(0));
    let mut tick = 0;
    support::wait_for(
        "the cleaner to remove the deleted row and its tombstone",
        Duration::from_secs(240),
        || {
            tick += 1;
            produce(
                &countries,
                &[(format!("filler-{}", tick % 5), b"x".to_vec(), None)],
            );
            let mut seen = false;
            read_all(
                &support::clients(),
                &countries,
                Duration::from_secs(30),
                |m| {
                    seen |= m.key() == Some(country(0).as_bytes());
                    Ok(())
                },
            )
            .expect("read the table's topic");
            if seen {
                std::thread::sleep(Duration::from_secs(1));
            }
            (!seen).then_some(())
        },
    );
    let b = start(&app);
    produce(
        &format!("{app}.orders"),
        &orders(&[("o2".into(), country(0)), ("o3".into(), country(1))]),
    );
    wait_orders_consumed(&app);
    let got = shipments(&app);
    stop(b);
    assert_eq!(got.get("o3").map(String::as_str), Some("o3|name-1"));
    assert_eq!(
        got.get("o2"),
        None,
        "country 0 was deleted: the inner join finds no row (the stale store still had it)"
    );
}
