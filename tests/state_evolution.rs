//! Evolvable state against the real broker and registry (docs/state-evolution.md): a counting
//! processor whose store value is Avro v1 is stopped mid-stream and replaced by v2 of the value
//! schema (a field renamed through an upcaster, one added with a default) on an empty state
//! directory, so every value comes back from the changelog in its v1 wire format; and
//! `eosflow schemas check` refuses a store schema that cannot read what the store holds. Without
//! a broker (the test driver): a store value read while the registry is out of reach is retried,
//! one whose schema id the registry does not know is dead-lettered at once (issue 49).

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use apache_avro::types::Value;
use eosflow::internals::codec::Upcasters;
use eosflow::internals::kafka::reader::read_all;
use eosflow::processor::{Context, ProcessError, Processor, ProcessorSpec, Record, StoreHandle};
use eosflow::serdes::{AvroSerde, Registry, StoreSchema, StringSerde};
use eosflow_verify::Workload;
use rdkafka::Message;
use support::pipeline::{produce_range, Instance, Pipeline};

/// v1 of store `counts`: records and amount total per key.
const V1: &str = r#"{"type":"record","name":"Count","namespace":"counts.v1","doc":"A key's count.",
    "fields":[{"name":"count","type":"long","doc":"Records seen."},
              {"name":"total","type":"long","doc":"Sum of their amounts."}]}"#;
/// v2: `count` renamed `hits` (with a default, so resolution alone would read v1 values as 0:
/// the upcaster carries the count over), `last_seen` added with a default.
const V2: &str = r#"{"type":"record","name":"Count","namespace":"counts.v2","doc":"A key's count.",
    "fields":[{"name":"hits","type":"long","default":0,"doc":"Records seen (was count)."},
              {"name":"total","type":"long","doc":"Sum of their amounts."},
              {"name":"last_seen","type":"long","default":-1,"doc":"Offset of the last record; -1 unknown."}]}"#;

/// The store's values as maps of field to `long`, one type for both versions (any `serde`
/// type works: an application derives its structs; a JSON value would not, its non-negative
/// numbers serialize as u64, which Avro has not).
type Fields = BTreeMap<String, i64>;

/// The field `name` of a value (0 when absent).
fn long(v: &Fields, name: &str) -> i64 {
    v.get(name).copied().unwrap_or(0)
}

/// A value of the given fields.
fn fields<const N: usize>(f: [(&str, i64); N]) -> Fields {
    f.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// `stores.counts.v1` → v2: `hits` is the old `count`; `last_seen` is unknown (-1).
fn count_v1_to_v2(v: Value) -> Result<Value, String> {
    let Value::Record(fields) = v else {
        return Err(format!("expected a record, got {v:?}"));
    };
    let field = |name: &str| {
        fields
            .iter()
            .find_map(|(n, v)| (n == name).then(|| v.clone()))
            .ok_or(format!("no {name}"))
    };
    Ok(Value::Record(vec![
        ("hits".into(), field("count")?),
        ("total".into(), field("total")?),
        ("last_seen".into(), Value::Long(-1)),
    ]))
}

fn registry() -> Registry {
    Registry::new(&support::registry_url())
}

/// The processor at v1 or v2 of the value schema: each record adds its amount to its key's
/// value and outputs JSON `{version, n, total, prev_last_seen}`.
enum Counter {
    V1(StoreHandle<String, Fields>),
    V2(StoreHandle<String, Fields>),
}

/// The processor and its output topic.
struct Counting(Counter, String);

fn v1(app: &str, output: &str) -> ProcessorSpec<Counting> {
    let schema = StoreSchema::new("counts", 1, V1).expect("v1");
    let values = AvroSerde::for_store(&registry(), app, schema).expect("registers v1");
    spec(
        Counter::V1(StoreHandle::new("counts", StringSerde, values)),
        output,
    )
}

fn v2(app: &str, output: &str) -> ProcessorSpec<Counting> {
    let mut up = Upcasters::new();
    up.register("stores.counts.v1", "stores.counts.v2", count_v1_to_v2);
    let schema = StoreSchema::new("counts", 2, V2)
        .and_then(|s| s.with_previous(1, V1))
        .expect("v2")
        .with_upcasters(up);
    let values = AvroSerde::for_store(&registry(), app, schema).expect("registers v2");
    spec(
        Counter::V2(StoreHandle::new("counts", StringSerde, values)),
        output,
    )
}

fn spec(c: Counter, output: &str) -> ProcessorSpec<Counting> {
    ProcessorSpec::new(Counting(c, output.to_string()))
        .store_name("count")
        .store("counts")
}

impl Processor for Counting {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        let key = String::from_utf8_lossy(r.key.unwrap_or_default()).to_string();
        let amount: i64 = std::str::from_utf8(r.value.unwrap_or_default())
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| ProcessError::permanent("amount is not a number"))?;
        let out = match &self.0 {
            Counter::V1(h) => {
                let mut s = ctx.store(h)?;
                let prev = s.get(&key)?.unwrap_or_default();
                let (count, total) = (long(&prev, "count") + 1, long(&prev, "total") + amount);
                s.put(&key, &fields([("count", count), ("total", total)]))?;
                serde_json::json!({"version": 1, "n": count, "total": total})
            }
            Counter::V2(h) => {
                let mut s = ctx.store(h)?;
                let prev = s.get(&key)?;
                let prev_last_seen = prev.as_ref().map_or(0, |p| long(p, "last_seen"));
                let prev = prev.unwrap_or_default();
                let (hits, total) = (long(&prev, "hits") + 1, long(&prev, "total") + amount);
                s.put(
                    &key,
                    &fields([("hits", hits), ("total", total), ("last_seen", r.offset)]),
                )?;
                serde_json::json!({"version": 2, "n": hits, "total": total,
                    "prev_last_seen": prev_last_seen})
            }
        };
        ctx.emit(
            self.1.clone(),
            Some(key.into_bytes()),
            Some(out.to_string().into_bytes()),
            vec![],
        );
        Ok(())
    }
}

/// Every output, read_committed, as (key, JSON) in each partition's order.
fn outputs(topic: &str) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    read_all(&support::clients(), topic, Duration::from_secs(60), |m| {
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        let v =
            serde_json::from_slice(m.payload().unwrap_or_default()).map_err(|e| e.to_string())?;
        out.push((key, v));
        Ok(())
    })
    .expect("read output");
    out
}

#[test]
fn state_evolution_a_store_upgraded_mid_stream_from_v1_to_v2_keeps_every_value_and_count() {
    let p = Pipeline::new("se-upgrade", 2);
    let changelog = format!("{}-counts-changelog", p.app);
    support::create_topics(&[&changelog], p.partitions);
    let w = Workload {
        records: 700,
        keys: 9,
        duplicate_every: 0,
        transient_every: 0,
    };
    // v1 runs on a backlog of 400 in small transactions and is stopped mid-stream.
    produce_range(&p.input, &w, 0..400);
    let mut cfg_a = p.config("a");
    cfg_a.processor.max_batch_records = 10;
    let a = Instance::start(&cfg_a, v1(&p.app, &p.output));
    support::wait_for("v1 to count 100 records", Duration::from_secs(90), || {
        (p.count(&p.output) >= 100).then_some(())
    });
    a.stop();
    let by_v1 = p.count(&p.output);
    // v2 on another machine: an empty state directory, so the store comes back from its
    // changelog, every value in v1's wire format.
    produce_range(&p.input, &w, 400..700);
    let mut cfg_b = p.config("b");
    cfg_b.state.dir = p.state_root.join("elsewhere");
    let b = Instance::start(&cfg_b, v2(&p.app, &p.output));
    p.wait_drained(Duration::from_secs(120));
    b.stop();
    println!(
        "v1 counted {by_v1} of {} records before it was stopped",
        w.records
    );
    verify(&p, &w, &changelog, by_v1);
}

/// The environment variable naming the child instance's `<app>+v<n>`.
const CHILD: &str = "EOSFLOW_STATE_EVOLUTION_CHILD";

/// Not a test of its own: the body of an instance [`spawn`] starts as a process.
#[test]
fn child_instance() {
    let Ok(which) = std::env::var(CHILD) else {
        return;
    };
    let Some((app, version)) = which.rsplit_once('+') else {
        panic!("{CHILD}={which}: expected <app>+v<n>");
    };
    let mut c = support::instance_config(app, 10);
    c.processor.input_topics = vec![format!("{app}.input")];
    let output = format!("{app}.output");
    match version {
        "v1" => support::run_until_killed(c, v1(app, &output)),
        _ => support::run_until_killed(c, v2(app, &output)),
    }
}

fn spawn(app: &str, version: &str) -> support::pipeline::Running {
    support::spawn_child(CHILD, &format!("{app}+{version}"))
}

#[test]
fn state_evolution_a_store_killed_mid_stream_at_v1_and_restarted_at_v2_keeps_every_count() {
    let p = Pipeline::new("se-kill", 2);
    let changelog = format!("{}-counts-changelog", p.app);
    support::create_topics(&[&changelog], p.partitions);
    let w = Workload {
        records: 700,
        keys: 9,
        duplicate_every: 0,
        transient_every: 0,
    };
    produce_range(&p.input, &w, 0..400);
    let mut a = spawn(&p.app, "v1");
    support::wait_for("v1 to count 100 records", Duration::from_secs(90), || {
        (p.count(&p.output) >= 100).then_some(())
    });
    a.kill().expect("kill -9");
    a.wait().expect("reaped");
    let by_v1 = p.count(&p.output);
    // v2 on the same state directory: the values committed to RocksDB by v1 and the
    // changelog's tail after the last checkpoint, all in v1's wire format.
    produce_range(&p.input, &w, 400..700);
    let b = spawn(&p.app, "v2");
    p.wait_drained(Duration::from_secs(120));
    drop(b);
    println!(
        "v1 committed {by_v1} of {} records before it was killed",
        w.records
    );
    verify(&p, &w, &changelog, by_v1);
}

/// Judges the outputs, dead letters, changelog and registry subject of an upgraded run after
/// v1 committed `by_v1` outputs.
fn verify(p: &Pipeline, w: &Workload, changelog: &str, by_v1: usize) {
    // The expectation, from the workload alone.
    let mut want: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for i in 0..w.records {
        let e = want.entry(w.key(i)).or_default();
        e.0 += 1;
        e.1 += Workload::amount(i);
    }
    assert!(p.dead_letters().is_empty(), "{:?}", p.dead_letters());
    let out = outputs(&p.output);
    assert_eq!(out.len(), w.records as usize, "one output per record");
    let mut n: BTreeMap<String, i64> = BTreeMap::new();
    let mut v1_counts: BTreeMap<String, i64> = BTreeMap::new();
    let mut upcast_reads = 0;
    let mut last: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for (key, v) in &out {
        let seen = n.entry(key.clone()).or_default();
        *seen += 1;
        assert_eq!(
            v["n"], *seen,
            "{key}'s count goes on without a gap or a reset: {v}"
        );
        match v["version"].as_i64() {
            Some(1) => *v1_counts.entry(key.clone()).or_default() += 1,
            Some(2) => {
                let had = v1_counts.get(key).copied().unwrap_or(0);
                if *seen == had + 1 && had > 0 {
                    assert_eq!(v["prev_last_seen"], -1, "v2 read {key}'s v1 value: {v}");
                    upcast_reads += 1;
                }
            }
            _ => panic!("{v}"),
        }
        last.insert(key.clone(), v.clone());
    }
    assert!(by_v1 >= 100 && by_v1 < w.records as usize, "{by_v1}");
    assert_eq!(
        upcast_reads,
        v1_counts.len(),
        "every key's v1 value was read by v2"
    );
    assert_eq!(last.len(), want.len());
    for (key, (count, total)) in &want {
        assert_eq!(last[key]["n"], *count, "{key}");
        assert_eq!(last[key]["total"], *total, "{key}");
        assert_eq!(last[key]["version"], 2, "{key}");
    }
    // The changelog holds values in the wire format: v1's id first, v2's last; the registry's
    // changelog subject lists both versions.
    let versions = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(registry().versions(&format!("{changelog}-value")))
        .expect("registry")
        .expect("the subject exists");
    let ids: Vec<u32> = versions.iter().map(|v| v.id).collect();
    assert_eq!(ids.len(), 2, "{versions:?}");
    let mut final_ids: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
    let mut seen_ids = std::collections::BTreeSet::new();
    read_all(
        &support::clients(),
        changelog,
        Duration::from_secs(60),
        |m| {
            let (Some(key), Some(v)) = (m.key(), m.payload()) else {
                return Ok(());
            };
            if v.len() < 5 || v[0] != 0 {
                return Err(format!("not the wire format: {v:?}"));
            }
            let id = u32::from_be_bytes([v[1], v[2], v[3], v[4]]);
            seen_ids.insert(id);
            final_ids.insert(key.to_vec(), id);
            Ok(())
        },
    )
    .expect("read changelog");
    assert_eq!(seen_ids.into_iter().collect::<Vec<_>>(), ids);
    assert!(final_ids.values().all(|id| *id == ids[1]), "{final_ids:?}");
}

/// A schema directory with one topic contract and the given store schema files.
fn store_dir(files: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(support::unique("se-schemas"));
    std::fs::create_dir_all(dir.join("shop")).expect("mkdir");
    std::fs::create_dir_all(dir.join("stores")).expect("mkdir");
    std::fs::write(
        dir.join("shop/thing.v1.avsc"),
        r#"{"type":"record","name":"Thing","namespace":"shop.v1","fields":[{"name":"a","type":"string","doc":"a"}]}"#,
    )
    .expect("write");
    for (name, text) in files {
        std::fs::write(dir.join("stores").join(name), text).expect("write");
    }
    dir
}

/// Runs `eosflow schemas check` on `dir` with `extra`; (exit ok, output).
fn check_cli(dir: &Path, extra: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_eosflow"))
        .args(["schemas", "check", "--dir"])
        .arg(dir)
        .args(extra)
        .env("EOSFLOW_SCHEMA_REGISTRY_URL", support::registry_url())
        .output()
        .expect("run eosflow schemas check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// v2 with `last_seen` added without a default: old values cannot be read.
const V2_NO_DEFAULT: &str = r#"{"type":"record","name":"Count","namespace":"counts.v2",
    "fields":[{"name":"count","type":"long"},{"name":"total","type":"long"},
              {"name":"last_seen","type":"long"}]}"#;

#[test]
fn state_evolution_schemas_check_refuses_a_store_schema_that_cannot_read_the_previous_version() {
    let dir = store_dir(&[("counts.v1.avsc", V1), ("counts.v2.avsc", V2)]);
    let (ok, out) = check_cli(&dir, &["--no-registry", "--no-git"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("ok   stores.counts.v2 vs stores.counts.v1"),
        "{out}"
    );
    let dir = store_dir(&[("counts.v1.avsc", V1), ("counts.v2.avsc", V2_NO_DEFAULT)]);
    let (ok, out) = check_cli(&dir, &["--no-registry", "--no-git"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL stores.counts.v2 vs stores.counts.v1")
            && out.contains("store counts: Count.last_seen: field `last_seen` (long) was added without a default"),
        "{out}"
    );
}

#[test]
fn state_evolution_schemas_check_compares_with_every_version_the_store_holds() {
    // The store was written with two schemas, both registered under its changelog subject: an
    // early one without `count`, then the repo's v1. The repo's v2 reads `hits` from `count`
    // (an alias) without a default: it reads v1, the previous file, but not the early values,
    // which only the registry knows of.
    let app = support::unique("se-check");
    let subject = StoreSchema::subject(&app, "counts");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let held_v1 = r#"{"type":"record","name":"Count","namespace":"counts.v1",
        "fields":[{"name":"total","type":"long"}]}"#;
    rt.block_on(registry().register(&subject, held_v1))
        .expect("register the first value schema");
    rt.block_on(registry().register(&subject, V1))
        .expect("register the second");
    let v2_requires_count = r#"{"type":"record","name":"Count","namespace":"counts.v2",
        "fields":[{"name":"hits","type":"long","aliases":["count"]},
                  {"name":"total","type":"long"}]}"#;
    let dir = store_dir(&[
        ("counts.v1.avsc", V1),
        ("counts.v2.avsc", v2_requires_count),
    ]);
    let (ok, out) = check_cli(&dir, &["--no-git", "--app-id", &app]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("ok   stores.counts.v2 vs stores.counts.v1"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "ok   stores.counts.v2 vs registry subject {subject} version 2"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "FAIL stores.counts.v2 vs registry subject {subject} version 1"
        )) && out
            .contains("store counts: Count.hits: field `hits` (long) was added without a default"),
        "{out}"
    );
    // An application that never wrote the store: nothing to compare with, said so.
    let (ok, out) = check_cli(
        &store_dir(&[("counts.v1.avsc", V1)]),
        &["--no-git", "--app-id", &support::unique("se-none")],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("skip stores.counts.v1 vs registry subject"),
        "{out}"
    );
}

/// A schema source that is out of reach for its first `down_for` questions, then knows
/// schema id 1 (v1) and nothing else.
struct Flaky {
    down_for: u32,
    asked: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl eosflow::serdes::SchemaSource for Flaky {
    fn schema(&mut self, id: u32) -> Result<String, eosflow::serdes::SourceError> {
        use eosflow::serdes::SourceError;
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.down_for > 0 {
            self.down_for -= 1;
            return Err(SourceError::Unavailable(
                "connection refused (registry down)".into(),
            ));
        }
        match id {
            1 => Ok(V1.to_string()),
            _ => Err(SourceError::NotFound(format!(
                "schema {id} not found (40403)"
            ))),
        }
    }
}

/// A driver running the v1 counter whose store values are written with schema id `id`, read
/// through `source`: the first record of key `k` writes its value without asking the source,
/// the second reads it back (the source is asked then).
fn flaky_driver(
    id: u32,
    source: Flaky,
) -> eosflow::testing::TopologyTestDriver<ProcessorSpec<Counting>> {
    let schema = StoreSchema::new("counts", 1, V1).expect("v1");
    let values = AvroSerde::for_store_with(id, schema, source).expect("store serde");
    let spec = spec(
        Counter::V1(StoreHandle::new("counts", StringSerde, values)),
        "out",
    );
    eosflow::testing::TopologyTestDriver::new(spec).expect("driver")
}

/// The `n` and `total` of each output, in order.
fn driver_outputs(
    d: &mut eosflow::testing::TopologyTestDriver<ProcessorSpec<Counting>>,
) -> Vec<(i64, i64)> {
    d.read_raw_output("out")
        .iter()
        .map(|o| {
            let v: serde_json::Value = serde_json::from_str(&o.value_text()).expect("JSON");
            (
                v["n"].as_i64().unwrap_or(-1),
                v["total"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

/// Issue 49 (11): the registry is out of reach the first two times a store value's schema is
/// asked for (connection refused). The read fails transiently: the record goes up its retry
/// ladder (1 s, then 10 s) instead of to the DLT, and once the registry answers it is read and
/// counted, once. (Before, `store-schema-unavailable` was permanent: the record was
/// dead-lettered at the first failure and its amount never counted.)
#[test]
fn a_store_value_read_while_the_registry_is_down_is_retried_not_dead_lettered() {
    use eosflow::testing::TestRecord;
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut d = flaky_driver(
        1,
        Flaky {
            down_for: 2,
            asked: asked.clone(),
        },
    );
    d.pipe(TestRecord::new("in", Some("k"), Some("5")))
        .expect("pipe");
    d.pipe(TestRecord::new("in", Some("k"), Some("7")))
        .expect("pipe");
    assert_eq!(driver_outputs(&mut d), [(1, 5)], "the second waits");
    assert!(d.read_raw_output("in.DLT").is_empty(), "not dead-lettered");
    let forwards = d.read_raw_output("in.retry.1");
    assert_eq!(forwards.len(), 1, "retried");
    assert_eq!(forwards[0].header("eosflow.error.class"), Some("transient"));
    assert!(
        forwards[0]
            .header("eosflow.error.message")
            .is_some_and(|e| e.contains("store-schema-unavailable")),
        "{:?}",
        forwards[0].header("eosflow.error.message")
    );
    // Still down at the first retry: up one more level.
    d.advance_wall_clock(Duration::from_secs(1))
        .expect("advance");
    assert!(driver_outputs(&mut d).is_empty());
    assert!(d.read_raw_output("in.DLT").is_empty(), "not dead-lettered");
    assert_eq!(d.read_raw_output("in.retry.2").len(), 1, "retried again");
    // The registry answers: read and counted.
    d.advance_wall_clock(Duration::from_secs(10))
        .expect("advance");
    assert_eq!(driver_outputs(&mut d), [(2, 12)]);
    assert!(d.read_raw_output("in.DLT").is_empty(), "not dead-lettered");
    assert_eq!(d.summary().retried, 2, "{:?}", d.summary());
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 3);
}

/// Issue 49 (11), the other side: a store value whose schema id the registry does not know
/// (deleted) cannot be read however often it is tried: dead-lettered at the first read, with
/// the `store-unknown-schema-id` reason, and never retried.
#[test]
fn a_store_value_whose_schema_id_the_registry_does_not_know_is_dead_lettered_at_once() {
    use eosflow::testing::TestRecord;
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    // Written with id 9, which the source does not know.
    let mut d = flaky_driver(
        9,
        Flaky {
            down_for: 0,
            asked: asked.clone(),
        },
    );
    d.pipe(TestRecord::new("in", Some("k"), Some("5")))
        .expect("pipe");
    d.pipe(TestRecord::new("in", Some("k"), Some("7")))
        .expect("pipe");
    assert_eq!(driver_outputs(&mut d), [(1, 5)]);
    assert!(d.read_raw_output("in.retry.1").is_empty(), "not retried");
    let dead = d.read_raw_output("in.DLT");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dlt_class(), Some("permanent"));
    assert!(
        dead[0]
            .dlt_reason()
            .is_some_and(|r| r.contains("store-unknown-schema-id")),
        "{:?}",
        dead[0].dlt_reason()
    );
    assert_eq!(d.summary().retried, 0);
}
