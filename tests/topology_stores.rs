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
