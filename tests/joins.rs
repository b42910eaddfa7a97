//! Tables and stream-table joins against the real broker: a compacted `users` table topic and
//! a `clicks` stream, co-partitioned on 4 partitions, joined inner and left by one topology;
//! the instance is `kill -9`ed mid-stream twice — once restarting on its own state directory
//! (the table store replays its topic's tail from its checkpoint), once on a wiped one (the
//! table is rebuilt from its own topic alone). The read_committed outputs must equal, key by
//! key, what the workload alone says: every click once, joined with the row its key had at
//! that point, a tombstone reading as no row.
//!
//! Two workloads. `rows_and_clicks_interleaved_…`: row changes and clicks produced up front,
//! interleaved, each with the next timestamp — the runtime's timestamp alignment must handle
//! each partition number's rows and clicks in that order, and a restarted instance must
//! restore the table only up to the committed offset (the rows after it are still to come, in
//! order with the clicks). `stream_table_joins_…`: phases, a phase's row changes consumed
//! before its clicks are produced and its clicks before the next changes — the order does not
//! depend on alignment, and the run also checks the DLT and the absence of a changelog copy.
//!
//! The killed instance is this test binary re-executed in child mode (`JOINS_CHILD`).

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::pipeline::Running;

use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::ClientRole;
use eosflow::serdes::StringSerde;
use eosflow::topology::{TableHandle, Topology};
use eosflow_verify::group_lag;
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::Message;

const CHILD: &str = "JOINS_CHILD";
const PARTITIONS: i32 = 4;
const KEYS: usize = 24;
/// Clicks per phase; the phases where the instance is killed get more, so the kill lands
/// mid-stream.
const PHASES: [usize; 8] = [300, 300, 3000, 300, 300, 3000, 300, 300];
const KILL_KEEP_STATE: usize = 2;
const KILL_WIPE_STATE: usize = 5;

fn key(k: usize) -> String {
    format!("user-{k:02}")
}

/// Clicks joined with the users table: `click|name` to `<app>.inner` when the user has a row,
/// and to `<app>.left` always (`click|-` without one).
fn topology(app: &str) -> Topology {
    let users = TableHandle::new("users", format!("{app}.users"), StringSerde, StringSerde);
    let clicks = format!("{app}.clicks");
    Topology::builder()
        .add_source("clicks", &[clicks.as_str()], StringSerde, StringSerde)
        .add_table(&users)
        .add_stream_table_join(
            "inner-join",
            &users,
            |_: &String, click: &String, name: &String| Some(format!("{click}|{name}")),
            &["clicks"],
        )
        .add_stream_table_left_join(
            "left-join",
            &users,
            |_: &String, click: &String, name: Option<&String>| {
                Some(format!("{click}|{}", name.map_or("-", String::as_str)))
            },
            &["clicks"],
        )
        .add_sink(
            "inner",
            format!("{app}.inner"),
            StringSerde,
            StringSerde,
            &["inner-join"],
        )
        .add_sink(
            "left",
            format!("{app}.left"),
            StringSerde,
            StringSerde,
            &["left-join"],
        )
        .build()
        .expect("valid topology")
}

fn config(app: &str) -> Config {
    // Small transactions: a phase spans many, so a kill lands between two of them, and the
    // instance is slow enough (a commit per 10 records) for a kill to land mid-phase.
    support::instance_config(app, 10)
}

/// Child mode: runs the topology until killed.
#[test]
fn child_instance() {
    let Ok(app) = std::env::var(CHILD) else {
        return;
    };
    support::run_until_killed(config(&app), topology(&app));
}

fn spawn(app: &str) -> Running {
    support::spawn_child(CHILD, app)
}

fn lag(app: &str, topic: &str) -> i64 {
    group_lag(
        &support::clients(),
        app,
        &format!("{app}.{topic}"),
        PARTITIONS,
    )
    .unwrap_or(i64::MAX)
}

/// The table updates of phase `phase`: per key, a new name, a tombstone, or nothing. Phase 0
/// names every key but every fourth, which stays without a row until a later phase.
fn updates(phase: usize) -> Vec<(String, Option<String>)> {
    (0..KEYS)
        .filter_map(|k| {
            let name = Some(format!("name-{k}-{phase}"));
            match (phase, (k + phase) % 5) {
                (0, _) if k % 4 == 3 => None,
                (0, _) => Some((key(k), name)),
                (_, 0) => Some((key(k), None)),
                (_, 1 | 2) => Some((key(k), name)),
                _ => None,
            }
        })
        .collect()
}

/// The clicks of phase `phase`, numbered from `first`: (key, click id, which is the value).
fn clicks(phase: usize, first: usize) -> Vec<(String, String)> {
    (0..PHASES[phase])
        .map(|i| {
            let n = first + i;
            (key((n * 7 + phase) % KEYS), format!("click-{n}"))
        })
        .collect()
}

/// Produces keyed records in order (a `None` value is a tombstone), each click with its id
/// header, in one transaction: the instance (`read_committed`) sees them all at once when it
/// commits, rather than keeping up with the producer, so a kill can land mid-phase. Both
/// topics use the same partitioner and partition count, so a key's row and its clicks share a
/// partition number.
fn produce(topic: &str, records: &[(String, Option<String>)]) {
    let id = support::unique("joins-producer");
    let timeout = Duration::from_secs(60);
    let producer: ThreadedProducer<DefaultProducerContext> = support::clients()
        .config(ClientRole::Transactional { id: &id, timeout })
        .create()
        .expect("transactional producer");
    producer
        .init_transactions(timeout)
        .expect("init transactions");
    producer.begin_transaction().expect("begin");
    for (k, v) in records {
        let mut r = BaseRecord::<str, str>::to(topic).key(k.as_str());
        if let Some(v) = v {
            r = r
                .payload(v.as_str())
                .headers(OwnedHeaders::new().insert(Header {
                    key: "id",
                    value: Some(v.as_bytes()),
                }));
        }
        support::send_waiting(&producer, r);
    }
    producer.commit_transaction(timeout).expect("commit");
}

/// Every output of `topic`, read_committed, per key in order; each output's `causation_id`
/// must be the click it joined.
fn outputs(topic: &str) -> BTreeMap<String, Vec<String>> {
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    read_all(&support::clients(), topic, Duration::from_secs(60), |m| {
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
        let cause = m
            .headers()
            .and_then(|hs| hs.iter().find(|h| h.key == "causation_id"))
            .and_then(|h| h.value)
            .map(|v| String::from_utf8_lossy(v).to_string());
        let click = value.split('|').next().unwrap_or_default();
        if cause.as_deref() != Some(click) {
            return Err(format!("{topic}: {value} has causation {cause:?}"));
        }
        got.entry(key).or_default().push(value);
        Ok(())
    })
    .expect("read outputs");
    got
}

/// Produces the phase's clicks from another thread in transactions of 100, paced, and kills
/// the instance once a third of them are out and some of those are processed: the producer
/// is still sending, so the instance dies mid-stream whatever its speed. Checks it did.
fn kill_mid_stream(app: &str, instance: &mut Running, produced: Vec<(String, Option<String>)>) {
    let total = produced.len();
    let sent = Arc::new(AtomicUsize::new(0));
    let topic = format!("{app}.clicks");
    let producer = {
        let sent = Arc::clone(&sent);
        std::thread::spawn(move || {
            for chunk in produced.chunks(100) {
                produce(&topic, chunk);
                sent.fetch_add(chunk.len(), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(60));
            }
        })
    };
    support::wait_for(
        "a third of the phase's clicks sent and some processed",
        Duration::from_secs(60),
        || {
            let out = sent.load(Ordering::SeqCst);
            // The lag counts one commit marker per partition and transaction.
            (out >= total / 3 && lag(app, "clicks") < out as i64).then_some(())
        },
    );
    instance.kill().expect("kill -9");
    instance.wait().expect("reaped");
    let out = sent.load(Ordering::SeqCst);
    producer.join().expect("the producer thread");
    println!("killed with {out} of {total} clicks of the phase sent");
    assert!(out < total, "the instance must die mid-stream");
}

/// The topics both workloads need: the clicks, the compacted users table, the two outputs,
/// and the topology's internal topics.
fn topic_specs(app: &str, cfg: &Config, t: &Topology) -> Vec<TopicSpec> {
    let mut specs = vec![
        TopicSpec::new(format!("{app}.clicks"), PARTITIONS, "delete"),
        TopicSpec::new(format!("{app}.users"), PARTITIONS, "compact"),
        TopicSpec::new(format!("{app}.inner"), PARTITIONS, "delete"),
        TopicSpec::new(format!("{app}.left"), PARTITIONS, "delete"),
    ];
    specs.extend(t.internal_topics(cfg, PARTITIONS));
    specs
}

/// Every topic the broker knows.
fn topic_names() -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = support::clients()
        .config(ClientRole::Reader)
        .create()
        .expect("consumer");
    let md = consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .expect("metadata");
    md.topics().iter().map(|t| t.name().to_string()).collect()
}

#[test]
fn stream_table_joins_killed_mid_stream_join_every_click_once_with_its_row() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let started = Instant::now();
    let app = support::unique("joins");
    let cfg = config(&app);
    let t = topology(&app);
    let specs = topic_specs(&app, &cfg, &t);
    assert!(
        !specs.iter().any(|s| s.name.contains("users-changelog")),
        "a table has no changelog of its own"
    );
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");

    let mut instance = spawn(&app);
    let mut table: BTreeMap<String, String> = BTreeMap::new();
    let mut want_inner: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut want_left: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut first = 0;
    for phase in 0..PHASES.len() {
        let rows = updates(phase);
        produce(&format!("{app}.users"), &rows);
        for (k, v) in rows {
            match v {
                Some(v) => table.insert(k, v),
                None => table.remove(&k),
            };
        }
        support::wait_for(
            "the phase's table updates consumed",
            Duration::from_secs(60),
            || (lag(&app, "users") == 0).then_some(()),
        );
        let batch = clicks(phase, first);
        first += batch.len();
        for (k, click) in &batch {
            let row = table.get(k);
            if let Some(name) = row {
                want_inner
                    .entry(k.clone())
                    .or_default()
                    .push(format!("{click}|{name}"));
            }
            let name = row.map_or("-", String::as_str);
            want_left
                .entry(k.clone())
                .or_default()
                .push(format!("{click}|{name}"));
        }
        let produced: Vec<(String, Option<String>)> =
            batch.into_iter().map(|(k, c)| (k, Some(c))).collect();
        if phase == KILL_KEEP_STATE || phase == KILL_WIPE_STATE {
            kill_mid_stream(&app, &mut instance, produced);
            if phase == KILL_WIPE_STATE {
                // The replacement has no state at all: its table comes from the topic alone.
                std::fs::remove_dir_all(&cfg.state.dir).expect("wipe the state dir");
            }
            instance = spawn(&app);
        } else {
            produce(&format!("{app}.clicks"), &produced);
        }
        support::wait_for(
            "the phase's clicks consumed",
            Duration::from_secs(90),
            || (lag(&app, "clicks") == 0).then_some(()),
        );
    }
    instance.kill().expect("kill -9");
    instance.wait().expect("reaped");

    let (inner, left) = (
        outputs(&format!("{app}.inner")),
        outputs(&format!("{app}.left")),
    );
    let total: usize = PHASES.iter().sum();
    assert_eq!(
        left.values().map(Vec::len).sum::<usize>(),
        total,
        "every click once, left"
    );
    for (k, list) in &want_left {
        assert_eq!(left.get(k), Some(list), "left results of {k}");
    }
    assert_eq!(inner.len(), want_inner.len());
    for (k, list) in &want_inner {
        assert_eq!(inner.get(k), Some(list), "inner results of {k}");
    }
    let dropped = total - want_inner.values().map(Vec::len).sum::<usize>();
    assert!(dropped > 0, "the workload has clicks without a row");
    let mut dead = 0;
    read_all(
        &support::clients(),
        &format!("{app}.clicks.DLT"),
        Duration::from_secs(30),
        |_| {
            dead += 1;
            Ok(())
        },
    )
    .expect("read the DLT");
    assert_eq!(dead, 0, "nothing dead-lettered");
    let names = topic_names();
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with(&app) && n.contains("users-changelog")),
        "no changelog copy of the table topic was created"
    );
    println!(
        "{total} clicks, {} inner results ({dropped} clicks without a row), 2 kills, {:.1} s",
        total - dropped,
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&cfg.state.dir);
}

/// One event of the interleaved workload: a table row (`Some(name)` or a tombstone) or a
/// click, in timestamp order.
enum Event {
    Row(String, Option<String>),
    Click(String, String),
}

/// Runs of table rows (1–4) and clicks (5–40) over the keys, deterministic: `n` events.
fn interleaved(n: usize) -> Vec<Event> {
    let mut out = Vec::with_capacity(n);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m) as usize
    };
    let mut clicks = 0;
    while out.len() < n {
        for _ in 0..1 + next(4) {
            let i = out.len();
            let k = key(next(KEYS as u64));
            let name = (next(5) != 0).then(|| format!("name-{i}"));
            out.push(Event::Row(k, name));
        }
        for _ in 0..5 + next(36) {
            out.push(Event::Click(
                key(next(KEYS as u64)),
                format!("click-{clicks}"),
            ));
            clicks += 1;
        }
    }
    out
}

/// Produces the events in order, timestamp `base + i` each, waiting at every switch between
/// the two topics until every record sent is acknowledged: each record is in the log before
/// any later one of the other topic is written. (The waits watch the out-queue:
/// rust-rdkafka's `flush` polls in 100 ms steps.)
fn produce_interleaved(app: &str, events: &[Event], base: i64) {
    let producer = support::test_producer();
    let (users, clicks) = (format!("{app}.users"), format!("{app}.clicks"));
    let mut last_was_row = None;
    for (i, e) in events.iter().enumerate() {
        let (topic, k, v, row) = match e {
            Event::Row(k, v) => (&users, k, v.as_deref(), true),
            Event::Click(k, c) => (&clicks, k, Some(c.as_str()), false),
        };
        if last_was_row.is_some_and(|r| r != row) {
            let deadline = Instant::now() + Duration::from_secs(30);
            while producer.in_flight_count() > 0 {
                assert!(
                    Instant::now() < deadline,
                    "records not acknowledged in 30 s"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        last_was_row = Some(row);
        let mut r = BaseRecord::<str, str>::to(topic)
            .key(k.as_str())
            .timestamp(base + i as i64);
        if let Some(v) = v {
            r = r.payload(v);
            if !row {
                r = r.headers(OwnedHeaders::new().insert(Header {
                    key: "id",
                    value: Some(v.as_bytes()),
                }));
            }
        }
        support::send_waiting(&producer, r);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

#[test]
fn rows_and_clicks_interleaved_by_timestamp_join_as_written_across_kill_9() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let started = Instant::now();
    let app = support::unique("joins-ts");
    let cfg = config(&app);
    let specs = topic_specs(&app, &cfg, &topology(&app));
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");
    let events = interleaved(4_000);
    let base = eosflow::internals::clock::now_ms() - 3_600_000;
    produce_interleaved(&app, &events, base);
    println!(
        "produced {} events in {:.1} s",
        events.len(),
        started.elapsed().as_secs_f64()
    );

    // The expectation, from the events alone: each click with its key's row at that point.
    let mut table: BTreeMap<String, String> = BTreeMap::new();
    let mut want_inner: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut want_left: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut total = 0;
    for e in &events {
        match e {
            Event::Row(k, Some(v)) => {
                table.insert(k.clone(), v.clone());
            }
            Event::Row(k, None) => {
                table.remove(k);
            }
            Event::Click(k, c) => {
                total += 1;
                let row = table.get(k);
                if let Some(name) = row {
                    want_inner
                        .entry(k.clone())
                        .or_default()
                        .push(format!("{c}|{name}"));
                }
                let name = row.map_or("-", String::as_str);
                want_left
                    .entry(k.clone())
                    .or_default()
                    .push(format!("{c}|{name}"));
            }
        }
    }
    let rows = events.len() - total;

    let mut instance = spawn(&app);
    for (n, wipe) in [(3, false), (3 * 2, true)] {
        support::wait_for(
            "part of the clicks processed",
            Duration::from_secs(60),
            || (lag(&app, "clicks") <= (total - total * n / 10) as i64).then_some(()),
        );
        instance.kill().expect("kill -9");
        instance.wait().expect("reaped");
        let left = lag(&app, "clicks");
        println!(
            "killed with {left} of {total} clicks left (state dir wiped: {wipe}) at {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert!(left > 0, "the instance must die mid-stream");
        if wipe {
            std::fs::remove_dir_all(&cfg.state.dir).expect("wipe the state dir");
        }
        instance = spawn(&app);
    }
    support::wait_for(
        "every click and row consumed",
        Duration::from_secs(120),
        || (lag(&app, "clicks") == 0 && lag(&app, "users") == 0).then_some(()),
    );
    instance.kill().expect("kill -9");
    instance.wait().expect("reaped");

    let (inner, left) = (
        outputs(&format!("{app}.inner")),
        outputs(&format!("{app}.left")),
    );
    assert_eq!(
        left.values().map(Vec::len).sum::<usize>(),
        total,
        "every click once, left"
    );
    for (k, list) in &want_left {
        assert_eq!(left.get(k), Some(list), "left results of {k}");
    }
    assert_eq!(inner.len(), want_inner.len());
    for (k, list) in &want_inner {
        assert_eq!(inner.get(k), Some(list), "inner results of {k}");
    }
    println!(
        "{total} clicks interleaved with {rows} rows, {} inner results, 2 kills, {:.1} s",
        want_inner.values().map(Vec::len).sum::<usize>(),
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&cfg.state.dir);
}

#[test]
fn a_table_topic_with_another_partition_count_refuses_to_start() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let app = support::unique("joins-copart");
    let mut cfg = config(&app);
    cfg.processor.static_membership = true;
    let mut specs = vec![
        TopicSpec::new(format!("{app}.clicks"), PARTITIONS, "delete"),
        TopicSpec::new(format!("{app}.users"), 2, "compact"),
    ];
    specs.extend(topology(&app).internal_topics(&cfg, PARTITIONS));
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");
    let err = eosflow::internals::processor::Runtime::new(&cfg, topology(&app))
        .err()
        .expect("a table on 2 partitions beside inputs on 4 must not start")
        .to_string();
    for part in [
        format!("{app}.users=2"),
        format!("{app}.clicks=4"),
        "not co-partitioned".to_string(),
    ] {
        assert!(err.contains(&part), "{part:?} missing from {err}");
    }
}
