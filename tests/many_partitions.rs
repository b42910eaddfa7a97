//! Many partitions in one instance (issue #38): a count per key over 128 partitions, one instance
//! owning them all, with a 32 MiB RocksDB budget (`state.memory_bytes`). Its peak resident
//! memory (`VmHWM`) must stay within the budget, plus about a megabyte per open store (RocksDB's
//! per-database structures, outside the budget: docs/operations.md) and a fixed allowance for
//! the process. Before the budget covered the memtables, an idle store cost 8.3 MiB (a bloom
//! filter allocated with every memtable of nine column families): 256 stores were 2 GiB.
//!
//! Every record is also counted once (the read_committed output holds, per key, 1..n), and
//! records are processed while partitions still restore: the partitions open a step at a time
//! between batches (`processor.restore_threads` × 2 a step). The times from the assignment to
//! the first processing and to the last partition open are printed, not asserted (issue #38,
//! item 2).
//!
//! The instance is this test binary re-executed in child mode (`MANY_CHILD`).

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use eosflow::config::Config;
use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::serdes::{I64Serde, StringSerde};
use eosflow::topology::Topology;

const CHILD: &str = "MANY_CHILD";
/// Partitions of the input (and so tasks of the instance); `MANY_PARTITIONS` overrides it for
/// the curve in docs/operations.md (e.g. 256, or a release build's run).
fn partitions() -> i32 {
    std::env::var("MANY_PARTITIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128)
}
const KEYS: u64 = 512;
const RECORDS: u64 = 6400;
const BUDGET: u64 = 32 << 20;
/// Outside the budget per open store (measured 0.92–1.0 MiB; docs/operations.md).
const PER_STORE: u64 = 1_200 << 10;
/// The process itself: the binary, its threads, librdkafka's buffers, the batch's overlay.
const PROCESS: u64 = 160 << 20;

/// A count per key, out as `key` = count.
fn topology(app: &str) -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream(
            format!("{app}.in"),
            Consumed::with(StringSerde, StringSerde),
        )
        .group_by_key()
        .count(Materialized::with(StringSerde, I64Serde).named("counts"))
        .to_stream()
        .to(format!("{app}.out"), Produced::with(StringSerde, I64Serde));
    builder.build().expect("the topology builds")
}

/// The group's lag on `input` in two requests (its committed offsets, and the high watermarks
/// of all partitions in one `ListOffsets`): `support::lag` asks each partition with a client
/// of its own, seconds per check at 256 partitions, which the time to "all processed" would
/// measure instead of the instance. The input is not transactional, so a drained partition's
/// committed offset is its high watermark.
fn lag(app: &str, input: &str, partitions: i32) -> i64 {
    let clients = support::clients();
    let Ok(committed) = eosflow_verify::group_committed(&clients, app, input, partitions) else {
        return i64::MAX;
    };
    let pairs: Vec<(String, i32)> = (0..partitions).map(|p| (input.to_string(), p)).collect();
    let Ok(ends) =
        eosflow::internals::kafka::reader::end_offsets(&clients, &pairs, Duration::from_secs(10))
    else {
        return i64::MAX;
    };
    let mut lag = 0;
    for (p, at) in (0..partitions).zip(committed) {
        match ends.get(&(input.to_string(), p)) {
            Some(high) => lag += (high - at).max(0),
            None => return i64::MAX,
        }
    }
    lag
}

fn config(app: &str) -> Config {
    let mut c = support::instance_config(app, 500);
    c.state.memory_bytes = BUDGET;
    c
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
fn an_instance_owning_128_partitions_stays_within_its_rocksdb_budget() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let app = support::unique("many");
    let partitions = partitions();
    let (input, output) = (format!("{app}.in"), format!("{app}.out"));
    let cfg = config(&app);
    let t = topology(&app);
    // The changelogs too, as `eosflow topics apply` does before a deploy: an instance that
    // creates 2 × 128 partitions itself first waits seconds for the broker to lead them all,
    // which is the broker's time, not the instance's.
    let mut specs = vec![
        TopicSpec::new(&input, partitions, "delete"),
        TopicSpec::new(&output, partitions, "delete"),
    ];
    specs.extend(
        t.changelog_topics(&app)
            .iter()
            .map(|c| TopicSpec::new(c, partitions, "compact")),
    );
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(60))
        .expect("creating the input, output and changelogs");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let records: Vec<support::Timed> = (0..RECORDS)
        .map(|i| {
            (
                None,
                format!("k-{:03}", i % KEYS),
                "v".to_string(),
                now + i as i64,
            )
        })
        .collect();
    support::produce_timed(&input, &records);

    let started = Instant::now();
    let instance = support::spawn_child(CHILD, &app);
    support::wait_for(
        "every record of all partitions processed",
        Duration::from_secs(240),
        || (lag(&app, &input, partitions) == 0).then_some(()),
    );
    let took = started.elapsed();
    let peak = support::peak_rss(instance.id());
    drop(instance);
    // Assignment to the last partition restored (`processor.restore_threads` at a time): the
    // instance's own log lines, printed, not asserted (docs/benchmarks.md has the curve).
    let ready = support::log_span(&app, "partitions assigned", "restored partition=");
    println!("{partitions} partitions: assignment to the last partition restored in {ready:?}");
    // The partitions open a step at a time between batches: the restored ones process while
    // the rest restore (issue #38 item 2), each step's line saying how far it got.
    let steps: Vec<(Duration, usize, u64)> =
        support::log_lines_since(&app, "partitions assigned", "partitions opened: ")
            .into_iter()
            .filter_map(|(at, line)| {
                let field = |name: &str| -> Option<u64> {
                    let from = line.find(&format!("{name}="))? + name.len() + 1;
                    line[from..]
                        .split(|c: char| !c.is_ascii_digit())
                        .next()?
                        .parse()
                        .ok()
                };
                Some((at, field("waiting")? as usize, field("processed")?))
            })
            .collect();
    let first_processing = steps.iter().find(|(_, _, processed)| *processed > 0);
    let all_open = steps.iter().find(|(_, waiting, _)| *waiting == 0);
    println!(
        "{partitions} partitions: assignment to processing {:?}, to every partition open {:?} ({} steps)",
        first_processing.map(|s| s.0),
        all_open.map(|s| s.0),
        steps.len()
    );
    assert!(
        steps
            .iter()
            .any(|(_, waiting, processed)| *waiting > 0 && *processed > 0),
        "no record was processed while partitions still restored: {steps:?}"
    );

    // The stores: each changelog partition is one store (the count and the default store).
    let stores = t.changelog_topics(&app).len() as u64 * partitions as u64;
    let bound = BUDGET + PER_STORE * stores + PROCESS;
    println!(
        "{partitions} partitions, {stores} stores: peak RSS {} MiB (bound {} MiB: budget {} + {stores} × {} KiB + {} MiB); start to all processed {took:?}",
        peak >> 20,
        bound >> 20,
        BUDGET >> 20,
        PER_STORE >> 10,
        PROCESS >> 20
    );
    assert!(
        peak <= bound,
        "peak RSS {} MiB over the bound {} MiB",
        peak >> 20,
        bound >> 20
    );

    // Every record counted once: per key, the counts 1..n in order.
    let mut got: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (key, v) in support::read_payloads(&output) {
        let bytes: [u8; 8] = v.try_into().expect("an i64 count");
        got.entry(key).or_default().push(i64::from_be_bytes(bytes));
    }
    // The expectation, from the workload: how many records each key has.
    let mut per_key: BTreeMap<String, i64> = BTreeMap::new();
    for (_, key, _, _) in &records {
        *per_key.entry(key.clone()).or_default() += 1;
    }
    assert_eq!(got.len(), per_key.len());
    for (key, n) in &per_key {
        let want: Vec<i64> = (1..=*n).collect();
        assert_eq!(got.get(key), Some(&want), "the counts of {key}");
    }
    let _ = std::fs::remove_dir_all(&cfg.state.dir);
    // Eight topics of 128 partitions each: a broker shared by the whole suite (and by repeated
    // runs with `MANY_PARTITIONS=256`) runs out of file descriptors if they stay.
    if let Err(e) = eosflow_bench::workload::delete_topics_with_prefix(&support::clients(), &app) {
        eprintln!("deleting the test's topics: {e}");
    }
}
