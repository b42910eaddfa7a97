//! A suppressed table (`KTable::suppress(Suppressed::until_time_limit(…))`) on the real broker,
//! under `kill -9`: each key's latest value (`to_table`) held back in the suppression buffer
//! and emitted once the partition's observed stream time is the time limit past the key's
//! first waiting update.
//!
//! The buffer is a changelogged store written in the transaction of the record that changed
//! it, with what that record emitted: an emission lost (buffered, crash, restored without it)
//! or doubled (emitted, crash, emitted again after the replay) would show in the output. The
//! workload pins each key to a partition and gives each update a rising timestamp, so the
//! emissions are computable from the workload alone: a simulation of the buffer (Kafka
//! Streams' `KTableSuppressProcessor`) per partition gives each key's emissions, in order.
//! In one run:
//! - **a backlog**: two thirds of the updates are produced before any instance starts;
//! - **kill -9** of the first instance mid-backlog (asserted: updates left) and of its
//!   replacement once it has written results of its own;
//! - a third instance on a **wiped state directory** (table and buffer restored from their
//!   changelogs) finishing the work.
//!
//! Each key's emissions in the read_committed output must be the simulation's, exactly — none
//! lost, none doubled, in order — and no DLT may hold a record.
//!
//! The instance is this test binary re-executed in child mode (`SUPPRESS_CHILD`).

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use eosflow::config::Config;
use eosflow::dsl::{BufferConfig, Consumed, Materialized, Produced, StreamsBuilder, Suppressed};
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::serdes::StringSerde;
use eosflow::topology::Topology;

const CHILD: &str = "SUPPRESS_CHILD";
const PARTITIONS: i32 = 4;
const KEYS: u64 = 40;
const UPDATES: u64 = 3000;
/// Updates produced before the first instance starts (the backlog).
const BACKLOG: u64 = 2000;
/// Event time between two updates of the workload (ms).
const STEP_MS: i64 = 10;
/// The suppression's time limit: 200 updates of the workload, about 50 per partition (a
/// key's entry absorbs about five updates before it goes out).
const LIMIT_MS: i64 = 2000;

/// Update `i`: its key, the key's partition, its value and its timestamp.
fn update(i: u64, base: i64) -> (String, i32, String, i64) {
    let k = (i * 7 + i / 11) % KEYS;
    (
        format!("k-{k:03}"),
        (k % PARTITIONS as u64) as i32,
        i.to_string(),
        base + i as i64 * STEP_MS,
    )
}

/// input → each key's latest value → suppressed → output.
fn topology(app: &str) -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream(
            format!("{app}.in"),
            Consumed::with(StringSerde, StringSerde),
        )
        .to_table(Materialized::with(StringSerde, StringSerde).named("latest"))
        .suppress(
            Suppressed::until_time_limit(
                Duration::from_millis(LIMIT_MS as u64),
                BufferConfig::unbounded(),
            )
            .named("held"),
        )
        .to_stream()
        .to(
            format!("{app}.out"),
            Produced::with(StringSerde, StringSerde),
        );
    builder.build().expect("the DSL topology builds")
}

fn config(app: &str) -> Config {
    // Small transactions (10 records): the kill lands mid-backlog.
    support::instance_config(app, 10)
}

fn produce(topic: &str, base: i64, range: std::ops::Range<u64>) {
    let records: Vec<support::Timed> = range
        .map(|i| {
            let (key, partition, value, ts) = update(i, base);
            (Some(partition), key, value, ts)
        })
        .collect();
    support::produce_timed(topic, &records);
}

/// Each key's emissions, from the workload alone: per partition, in order, the buffer of
/// Kafka Streams' `KTableSuppressProcessor` — stream time the largest timestamp seen, a key
/// keeps its first buffered time and takes the latest value, and after each update every
/// entry whose buffered time plus the limit is at or before stream time goes out, oldest
/// first (ties by key).
fn expected(base: i64) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in 0..PARTITIONS {
        let mut stream_time = i64::MIN;
        // key → (first buffered time, latest value)
        let mut buffer: BTreeMap<String, (i64, String)> = BTreeMap::new();
        for i in 0..UPDATES {
            let (key, partition, value, ts) = update(i, base);
            if partition != p {
                continue;
            }
            stream_time = stream_time.max(ts);
            let first = buffer.get(&key).map_or(ts, |(t, _)| *t);
            buffer.insert(key, (first, value));
            let mut due: Vec<(i64, String)> = buffer
                .iter()
                .filter(|(_, (t, _))| t + LIMIT_MS <= stream_time)
                .map(|(k, (t, _))| (*t, k.clone()))
                .collect();
            due.sort();
            for (_, k) in due {
                if let Some((_, v)) = buffer.remove(&k) {
                    out.entry(k).or_default().push(v);
                }
            }
        }
    }
    out
}

/// Child mode: runs the topology until killed.
#[test]
fn child_instance() {
    let Ok(app) = std::env::var(CHILD) else {
        return;
    };
    support::run_until_killed(config(&app), topology(&app));
}

#[test]
fn a_suppressed_table_killed_mid_backlog_emits_each_key_exactly_as_computed() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let started = Instant::now();
    let app = support::unique("suppress");
    let (input, output) = (format!("{app}.in"), format!("{app}.out"));
    let cfg = config(&app);
    let t = topology(&app);
    topics::apply_blocking(
        &support::clients(),
        &[
            TopicSpec::new(&input, PARTITIONS, "delete"),
            TopicSpec::new(&output, PARTITIONS, "delete"),
        ],
        Duration::from_secs(30),
    )
    .expect("creating the application's own topics");
    let internal = t.internal_topics(&cfg, PARTITIONS);
    assert!(
        internal
            .iter()
            .any(|s| s.name == format!("{app}-held-store-changelog")),
        "the suppression buffer is changelogged: {:?}",
        internal.iter().map(|s| &s.name).collect::<Vec<_>>()
    );

    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    produce(&input, base, 0..BACKLOG);

    let mut first = support::spawn_child(CHILD, &app);
    support::wait_for(
        "the first updates consumed",
        Duration::from_secs(90),
        || (support::lag(&app, &input, PARTITIONS) <= BACKLOG as i64 - 300).then_some(()),
    );
    first.kill().expect("kill -9");
    first.wait().expect("reaped");
    let left = support::lag(&app, &input, PARTITIONS);
    println!(
        "killed with {left} of {BACKLOG} updates left after {:?}",
        started.elapsed()
    );
    assert!(
        left > 0,
        "the instance must die mid-stream, not after the work"
    );

    // The second instance; the rest of the updates arrive while it runs. Killed once it has
    // written results of its own.
    let written_before = support::written(&output, PARTITIONS);
    let mut second = support::spawn_child(CHILD, &app);
    produce(&input, base, BACKLOG..UPDATES);
    support::wait_for(
        "the second instance's first results",
        Duration::from_secs(90),
        || (support::written(&output, PARTITIONS) > written_before + 20).then_some(()),
    );
    second.kill().expect("kill -9");
    second.wait().expect("reaped");
    println!(
        "killed again with {} updates left after {:?}",
        support::lag(&app, &input, PARTITIONS),
        started.elapsed()
    );

    // The third instance starts on a wiped state directory.
    std::fs::remove_dir_all(&cfg.state.dir).expect("wiping the state directory");
    let mut third = support::spawn_child(CHILD, &app);
    support::wait_for("every update processed", Duration::from_secs(120), || {
        (support::lag(&app, &input, PARTITIONS) == 0).then_some(())
    });
    third.kill().expect("kill -9");
    third.wait().expect("reaped");

    let expected = expected(base);
    let emitted: usize = expected.values().map(Vec::len).sum();
    assert!(
        emitted > 100 && emitted < UPDATES as usize / 2,
        "the workload both emits and suppresses: {emitted} emissions of {UPDATES} updates"
    );
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (key, v) in support::read_payloads(&output) {
        got.entry(key)
            .or_default()
            .push(String::from_utf8(v).expect("text values"));
    }
    assert_eq!(got, expected, "each key's emissions, in order");
    for dead in internal.iter().filter(|s| s.name.ends_with(".DLT")) {
        let letters = support::read_payloads(&dead.name);
        assert!(
            letters.is_empty(),
            "nothing dead-lettered in {}: {} records",
            dead.name,
            letters.len()
        );
    }
    println!("{emitted} emissions; took {:?}", started.elapsed());
    let _ = std::fs::remove_dir_all(&cfg.state.dir);
}
