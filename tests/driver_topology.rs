//! The test driver, no broker: a topology's outputs, stores, dead letters and retry ladder as
//! the runtime would produce them, record by record, with a clock the test moves.

use std::time::{Duration, Instant};

use eosflow::processor::{ProcessError, StoreHandle};
use eosflow::serdes::{I64Serde, JsonSerde, StringSerde};
use eosflow::testing::{TestRecord, TopologyTestDriver};
use eosflow::topology::{ProcessorContext, Topology, TypedRecord};

/// Per key: the running total (`totals`) and every amount under `<key>/<seq>` (`events`);
/// outputs `(key, [total, events of the key, sum of the key's events])`. The amount `-1` fails
/// permanently, `0` transiently until the clock passes `recover_at`.
fn totals_topology(
    recover_at: i64,
) -> (Topology, StoreHandle<String, i64>, StoreHandle<String, i64>) {
    let totals = StoreHandle::new("totals", StringSerde, I64Serde);
    let events = StoreHandle::new("events", StringSerde, I64Serde);
    let (t, e) = (totals.clone(), events.clone());
    let sum = move |ctx: &mut ProcessorContext<'_, '_, '_, String, Vec<i64>>,
                    r: TypedRecord<String, i64>| {
        let key = r.key.ok_or_else(|| ProcessError::permanent("no key"))?;
        let amount = r
            .value
            .ok_or_else(|| ProcessError::permanent("no amount"))?;
        match amount {
            -1 => return Err(ProcessError::permanent("negative amount")),
            0 if ctx.wall_clock_ms() < recover_at => {
                return Err(ProcessError::transient("pricing service down"))
            }
            _ => {}
        }
        let mut totals = ctx.store(&t)?;
        let total = totals.get(&key)?.unwrap_or(0) + amount;
        totals.put(&key, &total)?;
        let mut log = ctx.store(&e)?;
        let n = log.prefix(&format!("{key}/"))?.count();
        log.put(&format!("{key}/{n:06}"), &amount)?;
        // The scan sees this call's own write, merged with the committed entries.
        let sum: i64 = log
            .prefix(&format!("{key}/"))?
            .map(|e| e.map(|(_, v)| v))
            .sum::<Result<i64, _>>()?;
        ctx.forward(TypedRecord::new(
            Some(key),
            Some(vec![total, n as i64 + 1, sum]),
        ));
        Ok(())
    };
    let topology = Topology::builder()
        .add_source("amounts", &["amounts"], StringSerde, I64Serde)
        .add_processor("sum", sum, &["amounts"])
        .add_state_store(&totals, &["sum"])
        .add_state_store(&events, &["sum"])
        .add_sink(
            "out",
            "totals",
            StringSerde,
            JsonSerde::<Vec<i64>>::new(),
            &["sum"],
        )
        .build()
        .expect("valid topology");
    (topology, totals, events)
}

fn amount(key: &str, v: i64, id: &str) -> TestRecord {
    TestRecord::new("amounts", Some(key), Some(v.to_be_bytes().to_vec())).id(id)
}

#[test]
fn outputs_and_both_stores_follow_the_records_and_a_bad_one_is_dead_lettered_with_its_reason() {
    let (topology, totals, events) = totals_topology(i64::MIN);
    let mut d = TopologyTestDriver::new(topology).expect("driver");
    d.pipe(amount("a", 5, "1")).expect("pipe");
    d.pipe(amount("b", 2, "2")).expect("pipe");
    d.pipe(amount("a", -1, "3")).expect("pipe");
    d.pipe(amount("a", 7, "4")).expect("pipe");
    let out = d
        .read_output("totals", &StringSerde, &JsonSerde::<Vec<i64>>::new())
        .expect("typed output");
    assert_eq!(
        out,
        vec![
            (Some("a".to_string()), Some(vec![5, 1, 5])),
            (Some("b".to_string()), Some(vec![2, 1, 2])),
            (Some("a".to_string()), Some(vec![12, 2, 12])),
        ]
    );
    let dead = d.read_raw_output("amounts.DLT");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dlt_class(), Some("permanent"));
    assert_eq!(dead[0].dlt_reason(), Some("negative amount"));
    assert_eq!(dead[0].key_text(), "a");
    assert_eq!(
        d.store_get(&totals, &"a".to_string()).expect("get"),
        Some(12)
    );
    let a_events = d.store_prefix(&events, &"a/".to_string()).expect("prefix");
    assert_eq!(
        a_events,
        vec![("a/000000".to_string(), 5), ("a/000001".to_string(), 7)]
    );
    assert_eq!(d.store_entries(&events).expect("all").len(), 3);
    let from_second = d
        .store_range(&events, &"a/000001".to_string(), &"b".to_string())
        .expect("range");
    assert_eq!(from_second, vec![("a/000001".to_string(), 7)]);
}

#[test]
fn a_resent_id_is_processed_once() {
    let (topology, totals, _) = totals_topology(i64::MIN);
    let mut d = TopologyTestDriver::new(topology).expect("driver");
    d.pipe(amount("a", 5, "same")).expect("pipe");
    d.pipe(amount("a", 5, "same")).expect("pipe");
    assert_eq!(d.read_raw_output("totals").len(), 1);
    assert_eq!(d.summary().dedup_hits, 1);
    assert_eq!(
        d.store_get(&totals, &"a".to_string()).expect("get"),
        Some(5)
    );
}

#[test]
fn a_transient_failure_climbs_the_ladder_its_key_waits_and_all_come_out_in_order_when_due() {
    let start = eosflow::testing::START_MS;
    // Transient until 5 s in: the level-1 retry (due after 1 s) fails again, level 2 (10 s) works.
    let (topology, totals, _) = totals_topology(start + 5_000);
    let mut d = TopologyTestDriver::new(topology).expect("driver");
    d.pipe(amount("a", 0, "1")).expect("pipe");
    d.pipe(amount("a", 3, "2")).expect("pipe");
    d.pipe(amount("b", 4, "3")).expect("pipe");
    // b is not held up; a's second record waits behind its head in the ladder.
    let first = d.read_raw_output("totals");
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].key_text(), "b");
    let level1 = d.read_raw_output("amounts.retry.1");
    assert_eq!(level1.len(), 1);
    assert_eq!(level1[0].retry_attempt(), Some(1));
    assert_eq!(level1[0].due_at(), Some(start + 1_000));
    assert_eq!(d.summary().parked_followers, 1);

    d.advance_wall_clock(Duration::from_secs(2))
        .expect("advance");
    let level2 = d.read_raw_output("amounts.retry.2");
    assert_eq!(level2.len(), 1, "the first retry failed again");
    assert!(
        d.read_raw_output("totals").is_empty(),
        "the follower still waits"
    );

    d.advance_wall_clock(Duration::from_secs(10))
        .expect("advance");
    let out = d
        .read_output("totals", &StringSerde, &JsonSerde::<Vec<i64>>::new())
        .expect("typed output");
    assert_eq!(
        out,
        vec![
            (Some("a".to_string()), Some(vec![0, 1, 0])),
            (Some("a".to_string()), Some(vec![3, 2, 3])),
        ],
        "the head, then its follower"
    );
    assert_eq!(
        d.store_get(&totals, &"a".to_string()).expect("get"),
        Some(3)
    );
    assert!(d.read_raw_output("amounts.DLT").is_empty());
}

#[test]
fn a_record_failing_every_level_is_dead_lettered_as_transient_exhausted() {
    let (topology, _, _) = totals_topology(i64::MAX);
    let mut d = TopologyTestDriver::new(topology).expect("driver");
    d.pipe(amount("a", 0, "1")).expect("pipe");
    // Level n is due its delay after level n-1 was tried: 1 s, 10 s, 60 s.
    for step in [2, 11, 61] {
        d.advance_wall_clock(Duration::from_secs(step))
            .expect("advance");
    }
    for level in 1..=3 {
        assert_eq!(
            d.read_raw_output(&format!("amounts.retry.{level}")).len(),
            1
        );
    }
    let dead = d.read_raw_output("amounts.DLT");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dlt_class(), Some("transient-exhausted"));
    assert_eq!(dead[0].dlt_reason(), Some("pricing service down"));
}

#[test]
fn range_and_prefix_scans_merge_the_calls_writes_and_deletes_over_committed_keys() {
    let store = StoreHandle::new("kv", StringSerde, StringSerde);
    let s = store.clone();
    // "put k v" writes, "del k" deletes, "scan a c" outputs the keys in [a, c) as one line.
    let node = move |ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
                     r: TypedRecord<String, String>| {
        let line = r.value.unwrap_or_default();
        let words: Vec<&str> = line.split(' ').collect();
        let mut kv = ctx.store(&s)?;
        match words.as_slice() {
            ["put", k, v] => kv.put(&k.to_string(), &v.to_string())?,
            ["del", k] => kv.delete(&k.to_string())?,
            ["scan", from, to, then @ ..] => {
                // Writes of this very call are seen by the scan.
                for w in then {
                    match w.split_once('=') {
                        Some((k, "")) => kv.delete(&k.to_string())?,
                        Some((k, v)) => kv.put(&k.to_string(), &v.to_string())?,
                        None => {}
                    }
                }
                let (from, to) = (from.to_string(), to.to_string());
                let seen: Vec<String> = kv
                    .range(&from..&to)?
                    .map(|e| e.map(|(k, v)| format!("{k}={v}")))
                    .collect::<Result<_, _>>()?;
                ctx.forward(TypedRecord::new(None::<String>, Some(seen.join(","))));
            }
            _ => return Err(ProcessError::permanent(format!("bad command {line}"))),
        }
        Ok(())
    };
    let topology = Topology::builder()
        .add_source("cmd", &["cmd"], StringSerde, StringSerde)
        .add_processor("kv", node, &["cmd"])
        .add_state_store(&store, &["kv"])
        .add_sink("out", "scans", StringSerde, StringSerde, &["kv"])
        .build()
        .expect("valid");
    let mut d = TopologyTestDriver::new(topology).expect("driver");
    for c in ["put a 1", "put b 2", "put bb 3", "put c 4"] {
        d.pipe_raw("cmd", None, Some(c.as_bytes())).expect("pipe");
    }
    for c in ["scan a c", "scan b c b=", "scan a z ab=9 c=", "scan c a"] {
        d.pipe_raw("cmd", None, Some(c.as_bytes())).expect("pipe");
    }
    let got: Vec<String> = d
        .read_raw_output("scans")
        .iter()
        .map(|r| r.value_text())
        .collect();
    assert_eq!(got, vec!["a=1,b=2,bb=3", "bb=3", "a=1,ab=9,bb=3", "",]);
    let committed = d.store_entries(&store).expect("entries");
    let keys: Vec<&str> = committed.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, vec!["a", "ab", "bb"]);
}

/// A running total per key: one typed get and put per record.
fn running_total() -> (Topology, StoreHandle<String, i64>) {
    let totals = StoreHandle::new("totals", StringSerde, I64Serde);
    let t = totals.clone();
    let sum = move |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>,
                    r: TypedRecord<String, i64>| {
        let key = r.key.ok_or_else(|| ProcessError::permanent("no key"))?;
        let mut s = ctx.store(&t)?;
        let total = s.get(&key)?.unwrap_or(0) + r.value.unwrap_or(0);
        s.put(&key, &total)?;
        ctx.forward(TypedRecord::new(Some(key), Some(total)));
        Ok(())
    };
    let topology = Topology::builder()
        .add_source("amounts", &["amounts"], StringSerde, I64Serde)
        .add_processor("sum", sum, &["amounts"])
        .add_state_store(&totals, &["sum"])
        .add_sink("out", "totals", StringSerde, I64Serde, &["sum"])
        .build()
        .expect("valid topology");
    (topology, totals)
}

#[test]
fn ten_thousand_records_take_milliseconds() {
    let (topology, totals) = running_total();
    let mut d = TopologyTestDriver::new(topology).expect("driver");
    let n = 10_000;
    let started = Instant::now();
    for i in 0..n {
        let key = format!("k{}", i % 100);
        d.pipe(amount(&key, 1, &format!("id-{i}"))).expect("pipe");
    }
    let took = started.elapsed();
    // Reported, not asserted (no timed asserts): see the test output with --nocapture.
    println!(
        "driver: {n} records in {} ms ({:.1} µs/record)",
        took.as_millis(),
        took.as_micros() as f64 / n as f64
    );
    assert_eq!(d.read_raw_output("totals").len(), n);
    assert_eq!(
        d.store_get(&totals, &"k7".to_string()).expect("get"),
        Some(100)
    );
}
