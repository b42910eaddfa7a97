//! Named, typed stores against the real broker: a processor with two stores (a running total
//! per key and an event log scanned by prefix and range) keeps both across a replacement
//! instance on another machine, restored from each store's own changelog.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use eosflow::internals::kafka::reader::read_all;
use eosflow::processor::{Context, ProcessError, Processor, ProcessorSpec, Record, StoreHandle};
use eosflow::serdes::{I64Serde, StringSerde};
use eosflow_verify::Workload;
use rdkafka::Message;
use support::pipeline::{produce_range, Instance, Pipeline};

/// Per key: the running total (store `totals`) and every amount under `<key>/<offset>` (store
/// `events`); each output says the total, how many events the key has (a prefix scan) and how
/// many of them are at or after this record (a range scan).
struct TwoStores {
    output: String,
    totals: StoreHandle<String, i64>,
    events: StoreHandle<String, i64>,
}

impl TwoStores {
    /// The processor with its wiring: the default store named `count` (the Pipeline helper's
    /// changelog) and the two named stores.
    fn new(output: &str) -> ProcessorSpec<Self> {
        ProcessorSpec::new(Self {
            output: output.to_string(),
            totals: StoreHandle::new("totals", StringSerde, I64Serde),
            events: StoreHandle::new("events", StringSerde, I64Serde),
        })
        .store_name("count")
        .store("totals")
        .store("events")
    }
}

impl Processor for TwoStores {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        let key = String::from_utf8_lossy(r.key.unwrap_or_default()).to_string();
        let amount: i64 = std::str::from_utf8(r.value.unwrap_or_default())
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| ProcessError::permanent("amount is not a number"))?;
        let mut totals = ctx.store(&self.totals)?;
        let total = totals.get(&key)?.unwrap_or(0) + amount;
        totals.put(&key, &total)?;
        let mut events = ctx.store(&self.events)?;
        let at = format!("{key}/{:012}", r.offset);
        events.put(&at, &amount)?;
        let count = events.prefix(&format!("{key}/"))?.count();
        let end = format!("{key}0");
        let from_here = events.range(&at..&end)?.count();
        let sum: i64 = events
            .prefix(&format!("{key}/"))?
            .map(|e| e.map(|(_, v)| v))
            .sum::<Result<i64, _>>()?;
        let value =
            serde_json::json!({"total": total, "events": count, "tail": from_here, "sum": sum});
        ctx.emit(
            self.output.clone(),
            Some(key.into_bytes()),
            Some(value.to_string().into_bytes()),
            vec![],
        );
        Ok(())
    }
}

/// The last output of each key.
fn last_outputs(topic: &str) -> BTreeMap<String, serde_json::Value> {
    let mut out = BTreeMap::new();
    read_all(&support::clients(), topic, Duration::from_secs(60), |m| {
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        let v: serde_json::Value =
            serde_json::from_slice(m.payload().unwrap_or_default()).map_err(|e| e.to_string())?;
        out.insert(key, v);
        Ok(())
    })
    .expect("read output");
    out
}

#[test]
fn a_two_store_processor_restores_both_stores_from_their_own_changelogs() {
    let p = Pipeline::new("st-two", 2);
    let totals = format!("{}-totals-changelog", p.app);
    let events = format!("{}-events-changelog", p.app);
    support::create_topics(&[&totals, &events], p.partitions);
    let w = Workload {
        records: 400,
        keys: 6,
        duplicate_every: 0,
        transient_every: 0,
    };
    produce_range(&p.input, &w, 0..200);
    let a = Instance::start(&p.config("a"), TwoStores::new(&p.output));
    p.wait_drained(Duration::from_secs(90));
    a.stop();
    // Instance b on another machine: an empty state directory; both stores come back from
    // their changelogs only.
    let mut cfg_b = p.config("b");
    cfg_b.state.dir = p.state_root.join("elsewhere");
    produce_range(&p.input, &w, 200..400);
    let b = Instance::start(&cfg_b, TwoStores::new(&p.output));
    p.wait_drained(Duration::from_secs(90));
    b.stop();

    // The expectation, from the workload alone.
    let mut want: BTreeMap<String, (i64, u64)> = BTreeMap::new();
    for i in 0..w.records {
        let e = want.entry(w.key(i)).or_default();
        e.0 += Workload::amount(i);
        e.1 += 1;
    }
    let got = last_outputs(&p.output);
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (key, (total, count)) in &want {
        let v = &got[key];
        assert_eq!(v["total"], *total, "total of {key}: {v}");
        assert_eq!(v["sum"], *total, "sum of the event log of {key}: {v}");
        assert_eq!(v["events"], *count, "events of {key}: {v}");
        assert_eq!(
            v["tail"], 1,
            "the range from the newest event holds one: {v}"
        );
    }
    // Both changelogs carry their store: one record per key (totals) and per event (events).
    assert!(p.count(&totals) >= want.len());
    assert!(p.count(&events) >= w.records as usize);
}

/// Counts records per key in one named store (`store`, besides the default store `count`).
struct OneStore {
    store: StoreHandle<String, i64>,
}

impl OneStore {
    fn new(store: &str) -> ProcessorSpec<Self> {
        ProcessorSpec::new(Self {
            store: StoreHandle::new(store, StringSerde, I64Serde),
        })
        .store_name("count")
        .store(store)
    }
}

impl Processor for OneStore {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        let key = String::from_utf8_lossy(r.key.unwrap_or_default()).to_string();
        let mut store = ctx.store(&self.store)?;
        let n = store.get(&key)?.unwrap_or(0) + 1;
        store.put(&key, &n)?;
        Ok(())
    }
}

/// A `tracing` writer into a shared buffer: what an instance logged while it started.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).to_string()
    }
}

/// Starts an in-process instance, returning it with what it logged while starting (the start
/// runs on this thread, so a thread-local subscriber sees all of it).
fn start_logged<P: eosflow::processor::Application + 'static>(
    config: &eosflow::Config,
    processor: P,
) -> (Instance, String) {
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let instance =
        tracing::subscriber::with_default(subscriber, || Instance::start(config, processor));
    (instance, log.text())
}

#[test]
fn a_renamed_store_is_reported_at_start_with_its_orphaned_changelog() {
    let p = Pipeline::new("st-rename", 2);
    let old = format!("{}-a-changelog", p.app);
    let new = format!("{}-b-changelog", p.app);
    let w = Workload {
        records: 20,
        keys: 4,
        duplicate_every: 0,
        transient_every: 0,
    };
    produce_range(&p.input, &w, 0..20);
    let (first, log) = start_logged(&p.config("a"), OneStore::new("a"));
    p.wait_drained(Duration::from_secs(90));
    first.stop();
    assert!(
        !log.contains("orphaned changelog"),
        "nothing is orphaned on the first start:\n{log}"
    );
    assert!(p.count(&old) >= 4, "store a's changelog holds its keys");

    // A neighbour application whose id starts with this one's (`<app>-v2`, it has a consumer
    // group) and its store `x`: `<app>-v2-x-changelog` also fits this application's store
    // `v2-x`, and is not reported. `<app>-v3-y-changelog` fits `<app>-v3`, which has no group:
    // reported, naming that id.
    let neighbour = format!("{}-v2-x-changelog", p.app);
    let groupless = format!("{}-v3-y-changelog", p.app);
    support::create_topics(&[&neighbour, &groupless], p.partitions);
    commit_offset_as(&format!("{}-v2", p.app), &neighbour);

    // The same application, its store renamed to `b`.
    let (second, log) = start_logged(&p.config("a"), OneStore::new("b"));
    second.stop();
    let warns: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("orphaned changelog"))
        .collect();
    assert_eq!(
        warns.len(),
        2,
        "one WARN for store a's changelog, one for the groupless neighbour's:\n{log}"
    );
    let warn = warns
        .iter()
        .find(|l| l.contains(&format!("topic={old}")))
        .unwrap_or_else(|| panic!("a WARN names {old}:\n{log}"));
    assert!(warn.contains(&format!("topic={old}")), "{warn}");
    assert!(warn.contains("store=a"), "{warn}");
    assert!(warn.contains("starts EMPTY"), "{warn}");
    let delete = format!(
        "kafka-topics.sh --bootstrap-server {} --delete --topic {old}",
        support::bootstrap()
    );
    assert!(warn.contains(&delete), "names `{delete}`: {warn}");
    assert!(
        !log.contains(&new),
        "store b's own changelog is not flagged:\n{log}"
    );
    assert!(
        !log.contains(&neighbour),
        "the neighbour application's changelog is not flagged:\n{log}"
    );
    let other = warns
        .iter()
        .find(|l| l.contains(&format!("topic={groupless}")))
        .unwrap_or_else(|| panic!("a WARN names {groupless}:\n{log}"));
    assert!(
        other.contains(&format!("\"{}-v3\"", p.app))
            && other.contains("make sure it is not theirs"),
        "it names the other application id it fits: {other}"
    );
    assert!(
        !log.contains(&format!("{}-count-changelog", p.app)),
        "nor the default store's:\n{log}"
    );
}

/// Gives consumer group `group` a committed offset (partition 0 of `topic`): a group the broker
/// lists, as an application that ran has.
fn commit_offset_as(group: &str, topic: &str) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    let consumer: BaseConsumer = support::clients()
        .config(eosflow::kafka::ClientRole::GroupConsumer {
            group,
            session_timeout: Duration::from_secs(10),
            instance: None,
        })
        .create()
        .expect("a consumer of the neighbour's group");
    let mut offsets = rdkafka::TopicPartitionList::new();
    offsets
        .add_partition_offset(topic, 0, rdkafka::Offset::Offset(0))
        .expect("an offset");
    consumer
        .commit(&offsets, CommitMode::Sync)
        .expect("committing the neighbour's offset");
}
