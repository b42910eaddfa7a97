//! Exactly-once under `kill -9` for a topology built through the public API only: two stores
//! (a running total per key, and an event log scanned by `prefix` and `range`), an instance
//! SIGKILLed mid-stream and replaced, and the read_committed output plus both stores'
//! changelogs compared with what the workload alone says.
//!
//! The instance is this test binary re-executed in child mode (`TOPOLOGY_EOS_CHILD`), so it
//! can be killed as a process.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use support::pipeline::Running;

use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::processor::Runtime;
use eosflow::internals::state::Column;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::processor::{ProcessError, StoreHandle};
use eosflow::serdes::{I64Serde, StringSerde};
use eosflow::topology::{ProcessorContext, Topology, TypedRecord};
use eosflow_verify::{group_lag, Workload};
use rdkafka::Message;

const CHILD: &str = "TOPOLOGY_EOS_CHILD";
const PARTITIONS: i32 = 4;

/// The two-store topology: per key the running total and the event log `<key>/<n>`; each
/// output is `total,events`, where the events are counted by a prefix scan and their amounts
/// summed by a range scan, which must agree with the total.
fn topology(input: &str, output: &str) -> Topology {
    let totals = StoreHandle::new("totals", StringSerde, I64Serde);
    let log = StoreHandle::new("log", StringSerde, I64Serde);
    let (t, l) = (totals.clone(), log.clone());
    let node = move |ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
                     r: TypedRecord<String, String>| {
        let key = r.key.ok_or_else(|| ProcessError::permanent("no key"))?;
        let amount: i64 = r
            .value
            .as_deref()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| ProcessError::permanent("amount is not a number"))?;
        let mut totals = ctx.store(&t)?;
        let total = totals.get(&key)?.unwrap_or(0) + amount;
        totals.put(&key, &total)?;
        let mut log = ctx.store(&l)?;
        let n = log.prefix(&format!("{key}/"))?.count();
        log.put(&format!("{key}/{n:08}"), &amount)?;
        let (from, to) = (format!("{key}/"), format!("{key}/99999999"));
        let summed: i64 = log
            .range(&from..&to)?
            .map(|e| e.map(|(_, v)| v))
            .sum::<Result<i64, _>>()?;
        if summed != total {
            return Err(ProcessError::permanent(format!(
                "log of {key} sums to {summed}, total says {total}"
            )));
        }
        ctx.forward(TypedRecord::new(
            Some(key),
            Some(format!("{total},{}", n + 1)),
        ));
        Ok(())
    };
    Topology::builder()
        .add_source("amounts", &[input], StringSerde, StringSerde)
        .add_processor("sum", node, &["amounts"])
        .add_state_store(&totals, &["sum"])
        .add_state_store(&log, &["sum"])
        .add_sink("out", output, StringSerde, StringSerde, &["sum"])
        .build()
        .expect("valid topology")
}

fn config(app: &str) -> Config {
    let mut c = support::instance_config(app, 50);
    c.processor.static_membership = true;
    c
}

/// Child mode: runs the topology until killed.
#[test]
fn child_instance() {
    let Ok(app) = std::env::var(CHILD) else {
        return;
    };
    let runtime = Runtime::new(
        &config(&app),
        topology(&format!("{app}.in"), &format!("{app}.out")),
    )
    .expect("runtime starts");
    runtime
        .run(Arc::new(AtomicBool::new(false)))
        .expect("runs until killed");
}

fn spawn(app: &str) -> Running {
    support::spawn_child(CHILD, app)
}

fn lag(app: &str) -> i64 {
    group_lag(&support::clients(), app, &format!("{app}.in"), PARTITIONS).unwrap_or(i64::MAX)
}

/// Every record of `topic` as (key, value), read_committed, each partition in order.
fn read(topic: &str) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    read_all(&support::clients(), topic, Duration::from_secs(60), |m| {
        out.push((
            m.key().unwrap_or_default().to_vec(),
            m.payload().map(<[u8]>::to_vec),
        ));
        Ok(())
    })
    .expect("read");
    out
}

#[test]
fn a_two_store_topology_killed_mid_stream_reflects_every_input_exactly_once() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let app = support::unique("topo-eos");
    let (input, output) = (format!("{app}.in"), format!("{app}.out"));
    let cfg = config(&app);
    let mut specs = vec![
        TopicSpec::new(&input, PARTITIONS, "delete"),
        TopicSpec::new(&output, PARTITIONS, "delete"),
    ];
    specs.extend(topology(&input, &output).internal_topics(&cfg, PARTITIONS));
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");
    let w = Workload {
        records: 6000,
        keys: 24,
        duplicate_every: 0,
        transient_every: 0,
    };
    support::pipeline::produce_range(&input, &w, 0..w.records);

    let mut first = spawn(&app);
    support::wait_for(
        "a third of the input processed",
        Duration::from_secs(120),
        || (lag(&app) <= 2 * w.records as i64 / 3).then_some(()),
    );
    first.kill().expect("kill -9");
    first.wait().expect("reaped");
    let left = lag(&app);
    println!("killed with {left} of {} records left", w.records);
    assert!(
        left > 0,
        "the instance must die mid-stream, not after the input"
    );
    let mut second = spawn(&app);
    support::wait_for(
        "the whole input processed",
        Duration::from_secs(180),
        || (lag(&app) == 0).then_some(()),
    );
    second.kill().expect("kill -9");
    second.wait().expect("reaped");

    // The expectation, from the workload alone: per key, the running totals in order.
    let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..w.records {
        let key = w.key(i);
        let t = totals.entry(key.clone()).or_default();
        *t += Workload::amount(i);
        let list = want.entry(key).or_default();
        list.push(format!("{t},{}", list.len() + 1));
    }
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in read(&output) {
        got.entry(String::from_utf8_lossy(&k).to_string())
            .or_default()
            .push(String::from_utf8_lossy(&v.unwrap_or_default()).to_string());
    }
    assert_eq!(got.len(), want.len());
    for (key, outputs) in &want {
        assert_eq!(&got[key], outputs, "outputs of {key}");
    }
    // The stores, as their changelogs hold them: the last total of each key, and one log
    // entry per input record.
    let mut stored: BTreeMap<String, i64> = BTreeMap::new();
    for (k, v) in read(&format!("{app}-totals-changelog")) {
        let Some((Column::State, key)) = Column::parse_changelog_key(&k) else {
            continue;
        };
        let bytes: [u8; 8] = v.unwrap_or_default().try_into().expect("an i64");
        stored.insert(
            String::from_utf8_lossy(key).to_string(),
            i64::from_be_bytes(bytes),
        );
    }
    assert_eq!(stored, totals);
    let mut entries = std::collections::BTreeSet::new();
    for (k, _) in read(&format!("{app}-log-changelog")) {
        if let Some((Column::State, key)) = Column::parse_changelog_key(&k) {
            entries.insert(key.to_vec());
        }
    }
    assert_eq!(entries.len(), w.records as usize);
    assert!(
        read(&format!("{input}.DLT")).is_empty(),
        "nothing dead-lettered"
    );
    // The instances' stores hold one directory per partition and instance; a passing run
    // leaves nothing behind (a failing one keeps them for inspection).
    let _ = std::fs::remove_dir_all(&config(&app).state.dir);
}
