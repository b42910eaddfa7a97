//! Tables and their joins, against Kafka Streams' unit tests: `KTableSourceTest`,
//! `KTableFilterTest`, `KTableMapValuesTest`, `KStreamKTableJoinTest`,
//! `KStreamKTableLeftJoinTest`, `KStreamGlobalKTableJoinTest`, `KStreamGlobalKTableLeftJoinTest`,
//! `KTableKTable{Inner,Left,Outer}JoinTest` and `GlobalKTableJoinsTest`.
//!
//! Kafka Streams' `Integer` keys and values are `i64` here (eosflow's `I64Serde`); the numbers
//! are the same. eosflow has no record cache on these paths, so the cache-off expectations are
//! the ones ported. Where Kafka Streams' test reads `Change(new, old)` pairs through a mock
//! processor (`sendOldValues`), the old value is read here from the table's store just before
//! the update: the same fact, observed through what eosflow exposes.
//!
//! eosflow's tables read from a topic (`builder.table`) have no `filter`, `map_values` or
//! `to_stream` (a topic's table forwards nothing: see `KTable`'s docs); Kafka Streams' tests of
//! those operators on a topic's table are ported on [`updating_table`], the topic's table
//! left-joined with a table that never gets a row: a table equal to the topic's, row for row and
//! timestamp for timestamp, that forwards its changes.

use std::collections::BTreeMap;
use std::time::Duration;

use eosflow::dsl::{Consumed, Data, Joined, KTable, Materialized, Produced, StreamsBuilder};
use eosflow::serdes::{I64Serde, Serde, StringSerde};
use eosflow::testing::{TestRecord, TopologyTestDriver};
use eosflow::topology::{GlobalTableHandle, TableHandle, Topology};

type Driver = TopologyTestDriver<Topology>;

/// `(key, value or tombstone, timestamp)`, as Kafka Streams' `KeyValueTimestamp`.
type Kvt<K, V> = (K, Option<V>, i64);

fn driver(builder: StreamsBuilder) -> Driver {
    TopologyTestDriver::new(builder.build().expect("valid topology")).expect("driver")
}

/// Pipes `(key, value or tombstone)` at `ts` into `topic`.
fn pipe<K, V>(
    d: &mut Driver,
    topic: &str,
    keys: &dyn Serde<K>,
    values: &dyn Serde<V>,
    key: Option<&K>,
    value: Option<&V>,
    ts: i64,
) {
    let key = key.map(|k| keys.serialize(k).expect("key"));
    let value = value.map(|v| values.serialize(v).expect("value"));
    d.pipe(TestRecord::new(topic, key, value).timestamp(ts))
        .expect("pipe");
}

/// What was written to `topic` since the last read, with timestamps.
fn read<K, V>(
    d: &mut Driver,
    topic: &str,
    keys: &dyn Serde<K>,
    values: &dyn Serde<V>,
) -> Vec<Kvt<K, V>> {
    d.read_raw_output(topic)
        .into_iter()
        .map(|r| {
            let k = keys
                .deserialize(r.key.as_deref().expect("an output with a key"))
                .expect("key");
            let v = r
                .value
                .as_deref()
                .map(|v| values.deserialize(v).expect("value"));
            (k, v, r.timestamp.expect("a timestamp"))
        })
        .collect()
}

/// A table of the rows of `topic` that forwards its changes (see the module docs): the topic's
/// table left-joined with `<topic>-never-written`, materialized in `store`.
fn updating_table<'b, K: Data, V: Data>(
    b: &'b StreamsBuilder,
    topic: &str,
    keys: impl Serde<K> + Clone + 'static,
    values: impl Serde<V> + Clone + 'static,
    store: &str,
) -> KTable<'b, K, V> {
    let rows = b.table(topic, Consumed::with(keys.clone(), values.clone()));
    let never = b.table(
        format!("{topic}-never-written"),
        Consumed::with(keys.clone(), StringSerde),
    );
    rows.left_join(
        &never,
        |v: &V, _: Option<&String>| v.clone(),
        Materialized::with(keys, values).named(store),
    )
}

fn s(v: &str) -> String {
    v.to_string()
}

/// The table of `topic`, with a stream joining it (a topology needs a stream source).
fn table_of<'b>(
    b: &'b StreamsBuilder,
    topic: &str,
) -> KTable<'b, String, String, TableHandle<String, String>> {
    let t = b.table(topic, Consumed::with(StringSerde, StringSerde));
    b.stream("lookups", Consumed::with(StringSerde, StringSerde))
        .left_join_table(&t, |v, _| v.clone())
        .to("looked-up", Produced::with(StringSerde, StringSerde));
    t
}

// ---------------------------------------------------------------------------------------------
// KTableSourceTest

/// A step of KTableSourceTest's old-value tests: the updates `(key, value, ts)`, and the changes
/// `(key, new, old, ts)` they must give.
type Step = (
    &'static [(&'static str, Option<&'static str>, i64)],
    &'static [(
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
        i64,
    )],
);

/// Pipes KTableSourceTest's `("A","01",10) ("B","01",20) ("C","01",15) ("A","02",8)
/// ("B","02",22) ("A","03",12) ("A",null,15) ("B",null,20)` in its four steps, checking the
/// changes `(key, new, old, ts)` of each step; the old value is the table's row before.
fn source_old_values(with_old: bool) {
    let b = StreamsBuilder::new();
    let t = updating_table(&b, "topic1", StringSerde, StringSerde, "table1");
    t.to_stream()
        .to("out", Produced::with(StringSerde, StringSerde));
    let store = t.store().clone();
    let mut d = driver(b);
    let steps: [Step; 4] = [
        (
            &[
                ("A", Some("01"), 10),
                ("B", Some("01"), 20),
                ("C", Some("01"), 15),
            ],
            &[
                ("A", Some("01"), None, 10),
                ("B", Some("01"), None, 20),
                ("C", Some("01"), None, 15),
            ],
        ),
        (
            &[("A", Some("02"), 8), ("B", Some("02"), 22)],
            &[
                ("A", Some("02"), Some("01"), 8),
                ("B", Some("02"), Some("01"), 22),
            ],
        ),
        (
            &[("A", Some("03"), 12)],
            &[("A", Some("03"), Some("02"), 12)],
        ),
        (
            &[("A", None, 15), ("B", None, 20)],
            &[("A", None, Some("03"), 15), ("B", None, Some("02"), 20)],
        ),
    ];
    for (input, want) in steps {
        let mut changes = Vec::new();
        for (k, v, ts) in input {
            let old = d.store_get(&store, &s(k)).expect("store");
            pipe(
                &mut d,
                "topic1",
                &StringSerde,
                &StringSerde,
                Some(&s(k)),
                v.map(s).as_ref(),
                *ts,
            );
            for (key, new, at) in read(&mut d, "out", &StringSerde, &StringSerde) {
                changes.push((key, new, old.clone().filter(|_| with_old), at));
            }
        }
        let want: Vec<_> = want
            .iter()
            .map(|(k, new, old, ts)| (s(k), new.map(s), old.map(s).filter(|_| with_old), *ts))
            .collect();
        assert_eq!(changes, want);
    }
}

// KTableSourceTest#testKTable
#[test]
fn source_test_ktable() {
    let b = StreamsBuilder::new();
    let t = updating_table(&b, "topic1", StringSerde, I64Serde, "table1");
    t.to_stream()
        .to("out", Produced::with(StringSerde, I64Serde));
    let mut d = driver(b);
    let input = [
        ("A", Some(1), 10),
        ("B", Some(2), 11),
        ("C", Some(3), 12),
        ("D", Some(4), 13),
        ("A", None, 14),
        ("B", None, 15),
    ];
    for (k, v, ts) in input {
        pipe(
            &mut d,
            "topic1",
            &StringSerde,
            &I64Serde,
            Some(&s(k)),
            v.as_ref(),
            ts,
        );
    }
    let want: Vec<Kvt<String, i64>> = input.iter().map(|(k, v, ts)| (s(k), *v, *ts)).collect();
    assert_eq!(read(&mut d, "out", &StringSerde, &I64Serde), want);
}

// KTableSourceTest#kTableShouldLogAndMeterOnSkippedRecords
// Kafka Streams' test checks a WARN line; the observable part: a record without a key changes
// no row and is not dead-lettered (eosflow counts it in
// `eosflow_table_records_skipped_total`, logs no line per record).
#[test]
fn source_test_k_table_should_log_and_meter_on_skipped_records() {
    let b = StreamsBuilder::new();
    let t = table_of(&b, "topic");
    let table = t.store().clone();
    let mut d = driver(b);
    pipe(
        &mut d,
        "topic",
        &StringSerde,
        &StringSerde,
        None,
        Some(&s("value")),
        0,
    );
    pipe(
        &mut d,
        "topic",
        &StringSerde,
        &StringSerde,
        Some(&s("k")),
        Some(&s("v")),
        1,
    );
    assert_eq!(d.table_get(&table, &s("k")).expect("row"), Some(s("v")));
    assert!(d.read_raw_output("topic.DLT").is_empty());
}

// KTableSourceTest#kTableShouldLogOnOutOfOrder
// Kafka Streams' test checks a WARN line ("Detected out-of-order KTable update"); eosflow logs
// none. The observable part, the same in both: a plain table takes the update processed last,
// whatever its timestamp.
#[test]
fn source_test_k_table_should_log_on_out_of_order() {
    let b = StreamsBuilder::new();
    let t = table_of(&b, "topic");
    let table = t.store().clone();
    let mut d = driver(b);
    pipe(
        &mut d,
        "topic",
        &StringSerde,
        &StringSerde,
        Some(&s("key")),
        Some(&s("value")),
        10,
    );
    pipe(
        &mut d,
        "topic",
        &StringSerde,
        &StringSerde,
        Some(&s("key")),
        Some(&s("older")),
        5,
    );
    assert_eq!(
        d.table_get(&table, &s("key")).expect("row"),
        Some(s("older"))
    );
}

// KTableSourceTest#testValueGetter
// The value getter's rows are the table's store; eosflow's store keeps no timestamp per row
// (Kafka Streams' `ValueAndTimestamp`), so the values are compared.
#[test]
fn source_test_value_getter() {
    let b = StreamsBuilder::new();
    let t = table_of(&b, "topic1");
    let table = t.store().clone();
    let mut d = driver(b);
    let get = |d: &mut Driver, k: &str| d.table_get(&table, &s(k)).expect("row");
    for (k, v, ts) in [("A", "01", 10), ("B", "01", 20), ("C", "01", 15)] {
        pipe(
            &mut d,
            "topic1",
            &StringSerde,
            &StringSerde,
            Some(&s(k)),
            Some(&s(v)),
            ts,
        );
    }
    assert_eq!(
        [get(&mut d, "A"), get(&mut d, "B"), get(&mut d, "C")],
        [Some(s("01")), Some(s("01")), Some(s("01"))]
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &StringSerde,
        Some(&s("A")),
        Some(&s("02")),
        30,
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &StringSerde,
        Some(&s("B")),
        Some(&s("02")),
        5,
    );
    assert_eq!(
        [get(&mut d, "A"), get(&mut d, "B"), get(&mut d, "C")],
        [Some(s("02")), Some(s("02")), Some(s("01"))]
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &StringSerde,
        Some(&s("A")),
        Some(&s("03")),
        29,
    );
    assert_eq!(
        [get(&mut d, "A"), get(&mut d, "B"), get(&mut d, "C")],
        [Some(s("03")), Some(s("02")), Some(s("01"))]
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &StringSerde,
        Some(&s("A")),
        None,
        50,
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &StringSerde,
        Some(&s("B")),
        None,
        3,
    );
    assert_eq!(
        [get(&mut d, "A"), get(&mut d, "B"), get(&mut d, "C")],
        [None, None, Some(s("01"))]
    );
}

// KTableSourceTest#testNotSendingOldValue
#[test]
fn source_test_not_sending_old_value() {
    source_old_values(false);
}

// KTableSourceTest#testSendingOldValue
// The old values read from the table's store before each update (see the module docs).
#[test]
fn source_test_sending_old_value() {
    source_old_values(true);
}

// ---------------------------------------------------------------------------------------------
// KTableFilterTest: predicate `value % 2 == 0`.

#[allow(clippy::ptr_arg)] // the predicate's signature: Fn(&K, &V) with K = String
fn even(_: &String, v: &i64) -> bool {
    v % 2 == 0
}

/// KTableFilterTest's `doTestKTable`: the filtered and the filtered-out tables' changes.
///
/// Kafka Streams (no `sendOldValues`) forwards a tombstone for every update its filter rejects,
/// also for keys the filtered table never had: `filter` gives `("A",null,10) ("B",2,5)
/// ("C",null,8) ("D",4,14) ("A",null,18) ("B",null,15)` and `filterNot` `("A",1,10)
/// ("B",null,5) ("C",3,8) ("D",null,14) ("A",null,18) ("B",null,15)`. eosflow forwards a
/// tombstone only for a key the filtered table had (deliberate: docs/coming-from-kafka-streams.md,
/// "Tables and stream-table joins"); the tables, and a table folded from the changes, are the same.
fn filter_pass_through(materialize_filter: bool) {
    let b = StreamsBuilder::new();
    let t1 = updating_table(&b, "topic1", StringSerde, I64Serde, "table1");
    let named = |n: &str| Materialized::with(StringSerde, I64Serde).named(n);
    let t2 = t1.filter(
        even,
        if materialize_filter {
            named("store2")
        } else {
            named("filter-2")
        },
    );
    let t3 = t1.filter_not(even, named("filter-not-3"));
    t2.to_stream()
        .to("out2", Produced::with(StringSerde, I64Serde));
    t3.to_stream()
        .to("out3", Produced::with(StringSerde, I64Serde));
    let store2 = t2.store().clone();
    let mut d = driver(b);
    for (k, v, ts) in [
        ("A", Some(1), 10),
        ("B", Some(2), 5),
        ("C", Some(3), 8),
        ("D", Some(4), 14),
        ("A", None, 18),
        ("B", None, 15),
    ] {
        pipe(
            &mut d,
            "topic1",
            &StringSerde,
            &I64Serde,
            Some(&s(k)),
            v.as_ref(),
            ts,
        );
    }
    assert_eq!(
        read(&mut d, "out2", &StringSerde, &I64Serde),
        vec![
            (s("B"), Some(2), 5),
            (s("D"), Some(4), 14),
            (s("B"), None, 15)
        ]
    );
    assert_eq!(
        read(&mut d, "out3", &StringSerde, &I64Serde),
        vec![
            (s("A"), Some(1), 10),
            (s("C"), Some(3), 8),
            (s("A"), None, 18)
        ]
    );
    if materialize_filter {
        assert_eq!(d.store_entries(&store2).expect("store2"), vec![(s("D"), 4)]);
    }
}

// KTableFilterTest#shouldPassThroughWithoutMaterialization
#[test]
fn filter_test_should_pass_through_without_materialization() {
    filter_pass_through(false);
}

// KTableFilterTest#shouldPassThroughOnMaterialization
#[test]
fn filter_test_should_pass_through_on_materialization() {
    filter_pass_through(true);
}

// KTableFilterTest#shouldGetValuesOnMaterialization
// The value getters are the `store2` and `store3` stores; values compared (no per-row
// timestamps in eosflow's stores).
#[test]
fn filter_test_should_get_values_on_materialization() {
    let b = StreamsBuilder::new();
    let t1 = updating_table(&b, "topic1", StringSerde, I64Serde, "table1");
    let t2 = t1.filter(
        even,
        Materialized::with(StringSerde, I64Serde).named("store2"),
    );
    let t3 = t1.filter_not(
        even,
        Materialized::with(StringSerde, I64Serde).named("store3"),
    );
    let (s2, s3) = (t2.store().clone(), t3.store().clone());
    let mut d = driver(b);
    let at = |d: &mut Driver, k: &str| {
        (
            d.store_get(&s2, &s(k)).expect("store2"),
            d.store_get(&s3, &s(k)).expect("store3"),
        )
    };
    for (k, ts) in [("A", 5), ("B", 10), ("C", 15)] {
        pipe(
            &mut d,
            "topic1",
            &StringSerde,
            &I64Serde,
            Some(&s(k)),
            Some(&1),
            ts,
        );
    }
    assert_eq!(
        [at(&mut d, "A"), at(&mut d, "B"), at(&mut d, "C")],
        [(None, Some(1)), (None, Some(1)), (None, Some(1))]
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &I64Serde,
        Some(&s("A")),
        Some(&2),
        10,
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &I64Serde,
        Some(&s("B")),
        Some(&2),
        5,
    );
    assert_eq!(
        [at(&mut d, "A"), at(&mut d, "B"), at(&mut d, "C")],
        [(Some(2), None), (Some(2), None), (None, Some(1))]
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &I64Serde,
        Some(&s("A")),
        Some(&3),
        15,
    );
    assert_eq!(
        [at(&mut d, "A"), at(&mut d, "B"), at(&mut d, "C")],
        [(None, Some(3)), (Some(2), None), (None, Some(1))]
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &I64Serde,
        Some(&s("A")),
        None,
        10,
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &I64Serde,
        Some(&s("B")),
        None,
        20,
    );
    assert_eq!(
        [at(&mut d, "A"), at(&mut d, "B"), at(&mut d, "C")],
        [(None, None), (None, None), (None, Some(1))]
    );
}

/// KTableFilterTest's `doTestNotSendingOldValue` / `doTestSendingOldValue`: the source table's
/// and the filtered table's changes `(key, new, old, ts)` per step, the old values read from the
/// stores before each update when `with_old`.
///
/// Kafka Streams without `sendOldValues` forwards a tombstone from the filter for each rejected
/// update (`("A",null,5) ("B",null,10) ("C",null,15)` for the first step, `("A",null,20)`, then
/// `("A",null,10)` for a key the filtered table no longer had); with `sendOldValues` it
/// forwards only the filtered table's real changes — what eosflow always does.
fn filter_old_values(with_old: bool) {
    let b = StreamsBuilder::new();
    let t1 = updating_table(&b, "topic1", StringSerde, I64Serde, "table1");
    let t2 = t1.filter(
        even,
        Materialized::with(StringSerde, I64Serde).named("store2"),
    );
    t1.to_stream()
        .to("out1", Produced::with(StringSerde, I64Serde));
    t2.to_stream()
        .to("out2", Produced::with(StringSerde, I64Serde));
    let (s1, s2) = (t1.store().clone(), t2.store().clone());
    let mut d = driver(b);
    type Change = (String, Option<i64>, Option<i64>, i64);
    let step = |d: &mut Driver, input: &[(&str, Option<i64>, i64)]| -> (Vec<Change>, Vec<Change>) {
        let (mut c1, mut c2) = (Vec::new(), Vec::new());
        for (k, v, ts) in input {
            let old1 = d
                .store_get(&s1, &s(k))
                .expect("store1")
                .filter(|_| with_old);
            let old2 = d
                .store_get(&s2, &s(k))
                .expect("store2")
                .filter(|_| with_old);
            pipe(
                d,
                "topic1",
                &StringSerde,
                &I64Serde,
                Some(&s(k)),
                v.as_ref(),
                *ts,
            );
            c1.extend(
                read(d, "out1", &StringSerde, &I64Serde)
                    .into_iter()
                    .map(|(k, v, t)| (k, v, old1, t)),
            );
            c2.extend(
                read(d, "out2", &StringSerde, &I64Serde)
                    .into_iter()
                    .map(|(k, v, t)| (k, v, old2, t)),
            );
        }
        (c1, c2)
    };
    let old = |v: i64| Some(v).filter(|_| with_old);
    let (c1, c2) = step(
        &mut d,
        &[("A", Some(1), 5), ("B", Some(1), 10), ("C", Some(1), 15)],
    );
    assert_eq!(
        c1,
        vec![
            (s("A"), Some(1), None, 5),
            (s("B"), Some(1), None, 10),
            (s("C"), Some(1), None, 15)
        ]
    );
    assert_eq!(c2, vec![]);
    let (c1, c2) = step(&mut d, &[("A", Some(2), 15), ("B", Some(2), 8)]);
    assert_eq!(
        c1,
        vec![(s("A"), Some(2), old(1), 15), (s("B"), Some(2), old(1), 8)]
    );
    assert_eq!(
        c2,
        vec![(s("A"), Some(2), None, 15), (s("B"), Some(2), None, 8)]
    );
    let (c1, c2) = step(&mut d, &[("A", Some(3), 20)]);
    assert_eq!(c1, vec![(s("A"), Some(3), old(2), 20)]);
    assert_eq!(c2, vec![(s("A"), None, old(2), 20)]);
    let (c1, c2) = step(&mut d, &[("A", None, 10), ("B", None, 20)]);
    assert_eq!(
        c1,
        vec![(s("A"), None, old(3), 10), (s("B"), None, old(2), 20)]
    );
    assert_eq!(c2, vec![(s("B"), None, old(2), 20)]);
}

// KTableFilterTest#shouldNotSendOldValuesWithoutMaterialization
// Deliberate difference: no tombstones for keys the filtered table did not have (see
// `filter_old_values`).
#[test]
fn filter_test_should_not_send_old_values_without_materialization() {
    filter_old_values(false);
}

// KTableFilterTest#shouldNotSendOldValuesOnMaterialization
// As above.
#[test]
fn filter_test_should_not_send_old_values_on_materialization() {
    filter_old_values(false);
}

// KTableFilterTest#shouldNotEnableSendingOldValuesIfNotAlreadyMaterializedAndNotForcedToMaterialize
// As above.
#[test]
fn filter_test_should_not_enable_sending_old_values_if_not_already_materialized_and_not_forced_to_materialize(
) {
    filter_old_values(false);
}

// KTableFilterTest#shouldEnableSendOldValuesWhenNotMaterializedAlreadyButForcedToMaterialize
// Kafka Streams' output exactly, the old values read from the stores.
#[test]
fn filter_test_should_enable_send_old_values_when_not_materialized_already_but_forced_to_materialize(
) {
    filter_old_values(true);
}

// KTableFilterTest#shouldEnableSendOldValuesWhenMaterializedAlreadyAndForcedToMaterialize
// Kafka Streams' parent table does not send old values here (`parentSendOldVals` false): the
// source's changes carry no old value there; the filtered table's are as above.
#[test]
fn filter_test_should_enable_send_old_values_when_materialized_already_and_forced_to_materialize() {
    filter_old_values(true);
}

// KTableFilterTest#shouldSendOldValuesWhenEnabledOnUpStreamMaterialization
#[test]
fn filter_test_should_send_old_values_when_enabled_on_up_stream_materialization() {
    filter_old_values(true);
}

/// KTableFilterTest's `doTestSkipNullOnMaterialization` with `shouldSkip`: three rejected rows
/// of keys the filtered table never had forward nothing from the filter. (Kafka Streams' test
/// hangs a `groupBy(..).reduce(adder, subtractor)` off the filter to turn `sendOldValues` on;
/// eosflow's filter never forwards those tombstones, so the filter's output is what is checked.)
fn filter_skips_nulls() {
    let b = StreamsBuilder::new();
    let t1 = updating_table(&b, "topic1", StringSerde, StringSerde, "table1");
    let t2 = t1.filter(
        |_, v: &String| v.eq_ignore_ascii_case("accept"),
        Materialized::with(StringSerde, StringSerde).named("store2"),
    );
    t1.to_stream()
        .to("out1", Produced::with(StringSerde, StringSerde));
    t2.to_stream()
        .to("out2", Produced::with(StringSerde, StringSerde));
    let mut d = driver(b);
    for (k, ts) in [("A", 5), ("B", 10), ("C", 20)] {
        pipe(
            &mut d,
            "topic1",
            &StringSerde,
            &StringSerde,
            Some(&s(k)),
            Some(&s("reject")),
            ts,
        );
    }
    assert_eq!(
        read(&mut d, "out1", &StringSerde, &StringSerde),
        vec![
            (s("A"), Some(s("reject")), 5),
            (s("B"), Some(s("reject")), 10),
            (s("C"), Some(s("reject")), 20)
        ]
    );
    assert_eq!(read(&mut d, "out2", &StringSerde, &StringSerde), vec![]);
}

// KTableFilterTest#shouldSkipNullToRepartitionWithoutMaterialization
#[test]
fn filter_test_should_skip_null_to_repartition_without_materialization() {
    filter_skips_nulls();
}

// KTableFilterTest#shouldSkipNullToRepartitionOnMaterialization
#[test]
fn filter_test_should_skip_null_to_repartition_on_materialization() {
    filter_skips_nulls();
}

// KTableFilterTest#shouldSkipNullIfVersionedDownstream
// (The filter's result materialized as a versioned store: eosflow's `filter` has no versioned
// materialization; what the test checks, no tombstones for rejected rows, is the same.)
#[test]
fn filter_test_should_skip_null_if_versioned_downstream() {
    filter_skips_nulls();
}

// ---------------------------------------------------------------------------------------------
// KTableMapValuesTest

/// KTableMapValuesTest's `doTestKTable`: `mapValues(v -> v.charAt(0) - 48)`.
fn map_values_ktable(store: &str) {
    let b = StreamsBuilder::new();
    let t1 = updating_table(&b, "topic1", StringSerde, StringSerde, "table1");
    let t2 = t1.map_values(
        |v: &String| v.bytes().next().map_or(0, |c| i64::from(c) - 48),
        Materialized::with(StringSerde, I64Serde).named(store),
    );
    t2.to_stream()
        .to("out", Produced::with(StringSerde, I64Serde));
    let mut d = driver(b);
    for (k, v, ts) in [
        ("A", "1", 5),
        ("B", "2", 25),
        ("C", "3", 20),
        ("D", "4", 10),
    ] {
        pipe(
            &mut d,
            "topic1",
            &StringSerde,
            &StringSerde,
            Some(&s(k)),
            Some(&s(v)),
            ts,
        );
    }
    assert_eq!(
        read(&mut d, "out", &StringSerde, &I64Serde),
        vec![
            (s("A"), Some(1), 5),
            (s("B"), Some(2), 25),
            (s("C"), Some(3), 20),
            (s("D"), Some(4), 10)
        ]
    );
}

// KTableMapValuesTest#testKTable
#[test]
fn map_values_test_ktable() {
    map_values_ktable("map-values-2");
}

// KTableMapValuesTest#testQueryableKTable
#[test]
fn map_values_test_queryable_ktable() {
    map_values_ktable("anyName");
}

// KTableMapValuesTest#testQueryableValueGetter
// The getters are the `store2` and `store3` stores; values compared (no per-row timestamps).
#[test]
fn map_values_test_queryable_value_getter() {
    let b = StreamsBuilder::new();
    let t1 = updating_table(&b, "topic1", StringSerde, StringSerde, "table1");
    let parse = |v: &String| v.parse::<i64>().unwrap_or_default();
    let t2 = t1.map_values(
        parse,
        Materialized::with(StringSerde, I64Serde).named("store2"),
    );
    let t3 = t1.map_values(
        move |v| -parse(v),
        Materialized::with(StringSerde, I64Serde).named("store3"),
    );
    let (s2, s3) = (t2.store().clone(), t3.store().clone());
    let mut d = driver(b);
    let at = |d: &mut Driver| -> Vec<(Option<i64>, Option<i64>)> {
        ["A", "B", "C"]
            .iter()
            .map(|k| {
                (
                    d.store_get(&s2, &s(k)).expect("s2"),
                    d.store_get(&s3, &s(k)).expect("s3"),
                )
            })
            .collect()
    };
    for (k, ts) in [("A", 50), ("B", 10), ("C", 30)] {
        pipe(
            &mut d,
            "topic1",
            &StringSerde,
            &StringSerde,
            Some(&s(k)),
            Some(&s("01")),
            ts,
        );
    }
    assert_eq!(
        at(&mut d),
        [
            (Some(1), Some(-1)),
            (Some(1), Some(-1)),
            (Some(1), Some(-1))
        ]
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &StringSerde,
        Some(&s("A")),
        Some(&s("02")),
        25,
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &StringSerde,
        Some(&s("B")),
        Some(&s("02")),
        20,
    );
    assert_eq!(
        at(&mut d),
        [
            (Some(2), Some(-2)),
            (Some(2), Some(-2)),
            (Some(1), Some(-1))
        ]
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &StringSerde,
        Some(&s("A")),
        Some(&s("03")),
        35,
    );
    assert_eq!(
        at(&mut d),
        [
            (Some(3), Some(-3)),
            (Some(2), Some(-2)),
            (Some(1), Some(-1))
        ]
    );
    pipe(
        &mut d,
        "topic1",
        &StringSerde,
        &StringSerde,
        Some(&s("A")),
        None,
        1,
    );
    assert_eq!(
        at(&mut d),
        [(None, None), (Some(2), Some(-2)), (Some(1), Some(-1))]
    );
}

/// KTableMapValuesTest's sending-old-values steps on `mapValues(Integer::valueOf)`: changes
/// `(key, new, old, ts)`, the old values read from the store before each update when `with_old`.
fn map_values_old_values(with_old: bool) {
    let b = StreamsBuilder::new();
    let t1 = updating_table(&b, "topic1", StringSerde, StringSerde, "table1");
    let t2 = t1.map_values(
        |v: &String| v.parse::<i64>().unwrap_or_default(),
        Materialized::with(StringSerde, I64Serde).named("bob"),
    );
    t2.to_stream()
        .to("out", Produced::with(StringSerde, I64Serde));
    let store = t2.store().clone();
    let mut d = driver(b);
    let step = |d: &mut Driver, input: &[(&str, Option<&str>, i64)]| {
        let mut changes = Vec::new();
        for (k, v, ts) in input {
            let old = d
                .store_get(&store, &s(k))
                .expect("store")
                .filter(|_| with_old);
            pipe(
                d,
                "topic1",
                &StringSerde,
                &StringSerde,
                Some(&s(k)),
                v.map(s).as_ref(),
                *ts,
            );
            changes.extend(
                read(d, "out", &StringSerde, &I64Serde)
                    .into_iter()
                    .map(|(k, v, t)| (k, v, old, t)),
            );
        }
        changes
    };
    let old = |v: i64| Some(v).filter(|_| with_old);
    assert_eq!(
        step(
            &mut d,
            &[
                ("A", Some("01"), 5),
                ("B", Some("01"), 10),
                ("C", Some("01"), 15)
            ]
        ),
        vec![
            (s("A"), Some(1), None, 5),
            (s("B"), Some(1), None, 10),
            (s("C"), Some(1), None, 15)
        ]
    );
    assert_eq!(
        step(&mut d, &[("A", Some("02"), 10), ("B", Some("02"), 8)]),
        vec![(s("A"), Some(2), old(1), 10), (s("B"), Some(2), old(1), 8)]
    );
    assert_eq!(
        step(&mut d, &[("A", Some("03"), 20)]),
        vec![(s("A"), Some(3), old(2), 20)]
    );
    assert_eq!(
        step(&mut d, &[("A", None, 30)]),
        vec![(s("A"), None, old(3), 30)]
    );
}

// KTableMapValuesTest#testNotSendingOldValue
#[test]
fn map_values_test_not_sending_old_value() {
    map_values_old_values(false);
}

// KTableMapValuesTest#shouldEnableSendingOldValuesOnParentIfMapValuesNotMaterialized
#[test]
fn map_values_test_should_enable_sending_old_values_on_parent_if_map_values_not_materialized() {
    map_values_old_values(true);
}

// KTableMapValuesTest#shouldNotEnableSendingOldValuesOnParentIfMapValuesMaterialized
#[test]
fn map_values_test_should_not_enable_sending_old_values_on_parent_if_map_values_materialized() {
    map_values_old_values(true);
}

// ---------------------------------------------------------------------------------------------
// KStreamKTableJoinTest / KStreamKTableLeftJoinTest: keys 0..3, `MockValueJoiner.TOSTRING_JOINER`
// (`left + "+" + right`, `null` for a missing right).

const KEYS: [i64; 4] = [0, 1, 2, 3];

/// A small deterministic generator: Kafka Streams' `pushToTable` stamps rows with random
/// timestamps, which the results must not depend on.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> i64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % i32::MAX as u64) as i64
    }
}

struct StreamTable {
    d: Driver,
    rng: Lcg,
}

impl StreamTable {
    /// `streamTopic` joined (or left-joined) with the table of `tableTopic`, results to `out`.
    fn new(left: bool) -> Self {
        let b = StreamsBuilder::new();
        let stream = b.stream("streamTopic", Consumed::with(I64Serde, StringSerde));
        let table = b.table("tableTopic", Consumed::with(I64Serde, StringSerde));
        let joined = if left {
            stream.left_join_table(&table, |v, t| {
                format!("{v}+{}", t.map_or("null", String::as_str))
            })
        } else {
            stream.join_table(&table, |v, t| format!("{v}+{t}"))
        };
        joined.to("out", Produced::with(I64Serde, StringSerde));
        let topology = b.build().expect("valid topology");
        assert_eq!(topology.table_topics(), vec![s("tableTopic")]);
        Self {
            d: TopologyTestDriver::new(topology).expect("driver"),
            rng: Lcg(42),
        }
    }

    fn push_to_stream(&mut self, n: usize, prefix: &str) {
        for (i, k) in KEYS.iter().take(n).enumerate() {
            pipe(
                &mut self.d,
                "streamTopic",
                &I64Serde,
                &StringSerde,
                Some(k),
                Some(&format!("{prefix}{k}")),
                i as i64,
            );
        }
    }

    fn push_to_table(&mut self, n: usize, prefix: &str) {
        for k in KEYS.iter().take(n) {
            let ts = self.rng.next();
            pipe(
                &mut self.d,
                "tableTopic",
                &I64Serde,
                &StringSerde,
                Some(k),
                Some(&format!("{prefix}{k}")),
                ts,
            );
        }
    }

    fn push_null_value_to_table_n(&mut self, n: usize) {
        for k in KEYS.iter().take(n) {
            pipe(
                &mut self.d,
                "tableTopic",
                &I64Serde,
                &StringSerde,
                Some(k),
                None::<&String>,
                0,
            );
        }
    }

    /// The results since the last check, as `(key, value, ts)`.
    fn check(&mut self, want: &[(i64, &str, i64)]) {
        let want: Vec<Kvt<i64, String>> = want
            .iter()
            .map(|(k, v, ts)| (*k, Some(s(v)), *ts))
            .collect();
        assert_eq!(read(&mut self.d, "out", &I64Serde, &StringSerde), want);
    }
}

// KStreamKTableJoinTest#shouldRequireCopartitionedStreams
// Kafka Streams checks the co-partition group {streamTopic, tableTopic}; eosflow's stream and
// table are one sub-topology (one task per partition number, the runtime checks the partition
// counts at start).
#[test]
fn stream_table_join_test_should_require_copartitioned_streams() {
    let b = StreamsBuilder::new();
    let stream = b.stream("streamTopic", Consumed::with(I64Serde, StringSerde));
    let table = b.table("tableTopic", Consumed::with(I64Serde, StringSerde));
    stream
        .join_table(&table, |v, t| format!("{v}+{t}"))
        .to("out", Produced::with(I64Serde, StringSerde));
    let topology = b.build().expect("valid topology");
    assert_eq!(topology.sub_topologies().len(), 1);
    assert_eq!(topology.table_topics(), vec![s("tableTopic")]);
    assert_eq!(topology.source_topics(), vec![s("streamTopic")]);
}

// KStreamKTableJoinTest#shouldNotJoinWithEmptyTableOnStreamUpdates
#[test]
fn stream_table_join_test_should_not_join_with_empty_table_on_stream_updates() {
    let mut t = StreamTable::new(false);
    t.push_to_stream(2, "X");
    t.check(&[]);
}

// KStreamKTableJoinTest#shouldNotJoinOnTableUpdates
#[test]
fn stream_table_join_test_should_not_join_on_table_updates() {
    let mut t = StreamTable::new(false);
    t.push_to_stream(2, "X");
    t.check(&[]);
    t.push_to_table(2, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X");
    t.check(&[(0, "X0+Y0", 0), (1, "X1+Y1", 1)]);
    t.push_to_table(4, "YY");
    t.check(&[]);
    t.push_to_stream(4, "X");
    t.check(&[
        (0, "X0+YY0", 0),
        (1, "X1+YY1", 1),
        (2, "X2+YY2", 2),
        (3, "X3+YY3", 3),
    ]);
    t.push_to_table(4, "YYY");
    t.check(&[]);
}

// KStreamKTableJoinTest#shouldJoinOnlyIfMatchFoundOnStreamUpdates
#[test]
fn stream_table_join_test_should_join_only_if_match_found_on_stream_updates() {
    let mut t = StreamTable::new(false);
    t.push_to_table(2, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X");
    t.check(&[(0, "X0+Y0", 0), (1, "X1+Y1", 1)]);
}

// KStreamKTableJoinTest#shouldClearTableEntryOnNullValueUpdates
#[test]
fn stream_table_join_test_should_clear_table_entry_on_null_value_updates() {
    let mut t = StreamTable::new(false);
    t.push_to_table(4, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X");
    t.check(&[
        (0, "X0+Y0", 0),
        (1, "X1+Y1", 1),
        (2, "X2+Y2", 2),
        (3, "X3+Y3", 3),
    ]);
    t.push_null_value_to_table_n(2);
    t.check(&[]);
    t.push_to_stream(4, "XX");
    t.check(&[(2, "XX2+Y2", 2), (3, "XX3+Y3", 3)]);
}

/// Kafka Streams' `shouldLogAndMeterWhenSkippingNull{LeftKey,LeftValue}` check a log line;
/// the observable part: the record joins nothing and is not dead-lettered (eosflow counts it in
/// `eosflow_join_dropped_records_total{reason="no-key"|"no-value"}`).
fn stream_table_skips(key: Option<i64>, value: Option<&str>) {
    let mut t = StreamTable::new(false);
    t.push_to_table(2, "Y");
    pipe(
        &mut t.d,
        "streamTopic",
        &I64Serde,
        &StringSerde,
        key.as_ref(),
        value.map(s).as_ref(),
        0,
    );
    t.check(&[]);
    assert!(t.d.read_raw_output("streamTopic.DLT").is_empty());
}

// KStreamKTableJoinTest#shouldLogAndMeterWhenSkippingNullLeftKey
#[test]
fn stream_table_join_test_should_log_and_meter_when_skipping_null_left_key() {
    stream_table_skips(None, Some("A"));
}

// KStreamKTableJoinTest#shouldLogAndMeterWhenSkippingNullLeftValue
#[test]
fn stream_table_join_test_should_log_and_meter_when_skipping_null_left_value() {
    stream_table_skips(Some(1), None);
}

/// `makeJoin(grace)`: `streamTopic` joined with a versioned table of `tableTopic2` (history 5
/// minutes) with `Joined.with(…, grace)`; rows are pushed at 0 (`pushToTableNonRandom`).
fn graced_join(grace_ms: u64) -> StreamTable {
    let b = StreamsBuilder::new();
    let stream = b.stream("streamTopic", Consumed::with(I64Serde, StringSerde));
    let table = b.versioned_table(
        "tableTopic2",
        Consumed::with(I64Serde, StringSerde),
        Duration::from_secs(300),
    );
    stream
        .join_table_with(
            &table,
            |v, t| format!("{v}+{t}"),
            Joined::with(I64Serde, StringSerde)
                .with_grace_period(Duration::from_millis(grace_ms))
                .named("Grace"),
        )
        .to("out", Produced::with(I64Serde, StringSerde));
    StreamTable {
        d: driver(b),
        rng: Lcg(42),
    }
}

impl StreamTable {
    /// `pushToTableNonRandom`: rows `<prefix><k>` of the first `n` keys, all stamped 0.
    fn push_to_table_non_random(&mut self, n: usize, prefix: &str) {
        for k in KEYS.iter().take(n) {
            let v = format!("{prefix}{k}");
            pipe(
                &mut self.d,
                "tableTopic2",
                &I64Serde,
                &StringSerde,
                Some(k),
                Some(&v),
                0,
            );
        }
    }
}

/// The build error of a stream joined with grace `grace` to a table of history `history`
/// (`None`: not versioned).
fn graced_join_build_error(history: Option<Duration>, grace: Duration) -> String {
    let b = StreamsBuilder::new();
    let stream = b.stream("topic", Consumed::with(StringSerde, StringSerde));
    let consumed = Consumed::with(StringSerde, StringSerde);
    let table = match history {
        Some(h) => b.versioned_table("topic2", consumed, h),
        None => b.table("topic2", consumed),
    };
    stream
        .join_table_with(
            &table,
            |a, b| format!("{a}{b}"),
            Joined::with(StringSerde, StringSerde)
                .with_grace_period(grace)
                .named("first-join"),
        )
        .to("out-one", Produced::with(StringSerde, StringSerde));
    b.build().expect_err("invalid topology").to_string()
}

// KStreamKTableJoinTest#shouldFailIfTableIsNotVersioned
// Kafka Streams throws from `join`; eosflow's `build()` fails, naming the join and the table.
#[test]
fn stream_table_join_test_should_fail_if_table_is_not_versioned() {
    let err = graced_join_build_error(None, Duration::from_millis(6));
    assert!(
        err.contains("must be versioned to use a grace period in a stream-table join"),
        "{err}"
    );
    assert!(
        err.contains("first-join") && err.contains("topic2"),
        "{err}"
    );
}

// KStreamKTableJoinTest#shouldFailIfGracePeriodIsLongerThanHistoryRetention
#[test]
fn stream_table_join_test_should_fail_if_grace_period_is_longer_than_history_retention() {
    let err = graced_join_build_error(Some(Duration::from_secs(300)), Duration::from_secs(360));
    assert!(
        err.contains("history retention must be at least the grace period"),
        "{err}"
    );
    // A grace equal to the history is allowed.
    let b = StreamsBuilder::new();
    let stream = b.stream("topic", Consumed::with(StringSerde, StringSerde));
    let table = b.versioned_table(
        "topic2",
        Consumed::with(StringSerde, StringSerde),
        Duration::from_secs(300),
    );
    stream
        .join_table_with(
            &table,
            |a, b| format!("{a}{b}"),
            Joined::with(StringSerde, StringSerde).with_grace_period(Duration::from_secs(300)),
        )
        .to("out-one", Produced::with(StringSerde, StringSerde));
    b.build().expect("grace equal to the history");
}

// KStreamKTableJoinTest#shouldDelayJoinByGracePeriod
#[test]
fn stream_table_join_test_should_delay_join_by_grace_period() {
    let mut t = graced_join(2);
    t.push_to_table_non_random(4, "Y");
    t.check(&[]);
    // Stream time 3: the records at 0 and 1 leave the buffer.
    t.push_to_stream(4, "X");
    t.check(&[(0, "X0+Y0", 0), (1, "X1+Y1", 1)]);
    t.push_to_table_non_random(4, "YY");
    t.check(&[]);
    // X0@0 is later than the grace (joined at once), X1@1 leaves the buffer at once.
    t.push_to_stream(4, "X");
    t.check(&[(0, "X0+YY0", 0), (1, "X1+YY1", 1)]);
    pipe(
        &mut t.d,
        "streamTopic",
        &I64Serde,
        &StringSerde,
        Some(&5),
        Some(&s("test")),
        7,
    );
    t.check(&[
        (2, "X2+YY2", 2),
        (2, "X2+YY2", 2),
        (3, "X3+YY3", 3),
        (3, "X3+YY3", 3),
    ]);
    t.push_to_table_non_random(4, "YYY");
    t.check(&[]);
}

// KStreamKTableJoinTest#shouldHandleLateJoinsWithGracePeriod
#[test]
fn stream_table_join_test_should_handle_late_joins_with_grace_period() {
    let mut t = graced_join(2);
    t.push_to_table_non_random(4, "Y");
    t.check(&[]);
    // Four records into the buffer; the first two leave it.
    t.push_to_stream(4, "X");
    t.check(&[(0, "X0+Y0", 0), (1, "X1+Y1", 1)]);
    // Later than the grace: joined at once, and nothing else leaves the buffer.
    t.push_to_stream(1, "X");
    t.check(&[(0, "X0+Y0", 0)]);
}

// KStreamKTableLeftJoinTest#shouldRequireCopartitionedStreams
#[test]
fn stream_table_left_join_test_should_require_copartitioned_streams() {
    let b = StreamsBuilder::new();
    let stream = b.stream("streamTopic", Consumed::with(I64Serde, StringSerde));
    let table = b.table("tableTopic", Consumed::with(I64Serde, StringSerde));
    stream
        .left_join_table(&table, |v, _| v.clone())
        .to("out", Produced::with(I64Serde, StringSerde));
    let topology = b.build().expect("valid topology");
    assert_eq!(topology.sub_topologies().len(), 1);
    assert_eq!(topology.table_topics(), vec![s("tableTopic")]);
}

// KStreamKTableLeftJoinTest#shouldJoinWithEmptyTableOnStreamUpdates
#[test]
fn stream_table_left_join_test_should_join_with_empty_table_on_stream_updates() {
    let mut t = StreamTable::new(true);
    t.push_to_stream(2, "X");
    t.check(&[(0, "X0+null", 0), (1, "X1+null", 1)]);
}

// KStreamKTableLeftJoinTest#shouldNotJoinOnTableUpdates
#[test]
fn stream_table_left_join_test_should_not_join_on_table_updates() {
    let mut t = StreamTable::new(true);
    t.push_to_stream(2, "X");
    t.check(&[(0, "X0+null", 0), (1, "X1+null", 1)]);
    t.push_to_table(2, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X");
    t.check(&[
        (0, "X0+Y0", 0),
        (1, "X1+Y1", 1),
        (2, "X2+null", 2),
        (3, "X3+null", 3),
    ]);
    t.push_to_table(4, "YY");
    t.check(&[]);
    t.push_to_stream(4, "X");
    t.check(&[
        (0, "X0+YY0", 0),
        (1, "X1+YY1", 1),
        (2, "X2+YY2", 2),
        (3, "X3+YY3", 3),
    ]);
    t.push_to_table(4, "YYY");
    t.check(&[]);
}

// KStreamKTableLeftJoinTest#shouldJoinRegardlessIfMatchFoundOnStreamUpdates
#[test]
fn stream_table_left_join_test_should_join_regardless_if_match_found_on_stream_updates() {
    let mut t = StreamTable::new(true);
    t.push_to_table(2, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X");
    t.check(&[
        (0, "X0+Y0", 0),
        (1, "X1+Y1", 1),
        (2, "X2+null", 2),
        (3, "X3+null", 3),
    ]);
}

// KStreamKTableLeftJoinTest#shouldClearTableEntryOnNullValueUpdates
#[test]
fn stream_table_left_join_test_should_clear_table_entry_on_null_value_updates() {
    let mut t = StreamTable::new(true);
    t.push_to_table(4, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X");
    t.check(&[
        (0, "X0+Y0", 0),
        (1, "X1+Y1", 1),
        (2, "X2+Y2", 2),
        (3, "X3+Y3", 3),
    ]);
    t.push_null_value_to_table_n(2);
    t.check(&[]);
    t.push_to_stream(4, "XX");
    t.check(&[
        (0, "XX0+null", 0),
        (1, "XX1+null", 1),
        (2, "XX2+Y2", 2),
        (3, "XX3+Y3", 3),
    ]);
}

// ---------------------------------------------------------------------------------------------
// KStreamGlobalKTableJoinTest / KStreamGlobalKTableLeftJoinTest: the stream's value is
// `X<k>[,FKey<k>]`; its second token, when present, is the global table's key (Kafka Streams'
// key mapper returns `null` without one: eosflow's extractor returns `None`, through the
// topology builder, whose extractor is an `Option`; it gets the stream key as an `Option`, so
// a keyless record is joined as in Kafka Streams 3.7, KIP-962). Stream timestamps advance by
// 1 ms per record from 0, as Kafka Streams' input topic does.

struct StreamGlobal {
    d: Driver,
    global: GlobalTableHandle<String, String>,
    ts: i64,
}

impl StreamGlobal {
    fn new(left: bool) -> Self {
        let global =
            GlobalTableHandle::new("globalTable", "globalTableTopic", StringSerde, StringSerde);
        let key_of = |_: Option<&i64>, v: &String| v.split(',').nth(1).map(str::to_string);
        let mut b = Topology::builder();
        b.add_source("stream", &["streamTopic"], I64Serde, StringSerde)
            .add_global_table(&global);
        if left {
            b.add_stream_global_table_left_join(
                "join",
                &global,
                key_of,
                |_: Option<&i64>, v: &String, t: Option<&String>| {
                    Some(format!("{v}+{}", t.map_or("null", String::as_str)))
                },
                &["stream"],
            );
        } else {
            b.add_stream_global_table_join(
                "join",
                &global,
                key_of,
                |_: Option<&i64>, v: &String, t: &String| Some(format!("{v}+{t}")),
                &["stream"],
            );
        }
        let topology = b
            .add_sink("out", "out", I64Serde, StringSerde, &["join"])
            .build()
            .expect("valid topology");
        Self {
            d: TopologyTestDriver::new(topology).expect("driver"),
            global,
            ts: 0,
        }
    }

    fn push_to_stream(&mut self, n: usize, prefix: &str, with_fk: bool, null_key: bool) {
        for (i, k) in KEYS.iter().take(n).enumerate() {
            let mut value = format!("{prefix}{k}");
            if with_fk {
                value = format!("{value},FKey{k}");
            }
            let key = (!(null_key && i == 0)).then_some(*k);
            pipe(
                &mut self.d,
                "streamTopic",
                &I64Serde,
                &StringSerde,
                key.as_ref(),
                Some(&value),
                self.ts,
            );
            self.ts += 1;
        }
    }

    fn push_to_global_table(&mut self, n: usize, prefix: &str) {
        for k in KEYS.iter().take(n) {
            self.d
                .pipe_global(
                    &self.global,
                    &format!("FKey{k}"),
                    Some(&format!("{prefix}{k}")),
                )
                .expect("global row");
        }
    }

    fn push_null_value_to_global_table(&mut self, n: usize) {
        for k in KEYS.iter().take(n) {
            self.d
                .pipe_global(&self.global, &format!("FKey{k}"), None)
                .expect("global row");
        }
    }

    fn check(&mut self, want: &[(Option<i64>, &str, i64)]) {
        let got: Vec<(Option<i64>, Option<String>, i64)> = self
            .d
            .read_raw_output("out")
            .into_iter()
            .map(|r| {
                let k = r
                    .key
                    .as_deref()
                    .map(|k| I64Serde.deserialize(k).expect("key"));
                (
                    k,
                    r.value.as_ref().map(|_| r.value_text()),
                    r.timestamp.expect("ts"),
                )
            })
            .collect();
        let want: Vec<_> = want
            .iter()
            .map(|(k, v, ts)| (*k, Some(s(v)), *ts))
            .collect();
        assert_eq!(got, want);
    }
}

/// `shouldNotRequireCopartitioning`: Kafka Streams has no co-partition group; eosflow's global
/// table is no input of the stream's sub-topology (read by a thread of its own).
fn global_not_copartitioned(left: bool) {
    let b = StreamsBuilder::new();
    let stream = b.stream("streamTopic", Consumed::with(I64Serde, StringSerde));
    let global = b.global_table("globalTableTopic", Consumed::with(StringSerde, StringSerde));
    let joined = if left {
        stream.left_join_global(&global, |_, v| v.clone(), |v, _| v.clone())
    } else {
        stream.join_global(&global, |_, v| v.clone(), |v, _| v.clone())
    };
    joined.to("out", Produced::with(I64Serde, StringSerde));
    let topology = b.build().expect("valid topology");
    assert_eq!(topology.source_topics(), vec![s("streamTopic")]);
    assert_eq!(topology.global_table_topics(), vec![s("globalTableTopic")]);
    assert!(topology.table_topics().is_empty());
}

// KStreamGlobalKTableJoinTest#shouldNotRequireCopartitioning
#[test]
fn stream_global_join_test_should_not_require_copartitioning() {
    global_not_copartitioned(false);
}

// KStreamGlobalKTableJoinTest#shouldNotJoinWithEmptyGlobalTableOnStreamUpdates
#[test]
fn stream_global_join_test_should_not_join_with_empty_global_table_on_stream_updates() {
    let mut t = StreamGlobal::new(false);
    t.push_to_stream(2, "X", true, false);
    t.check(&[]);
}

// KStreamGlobalKTableJoinTest#shouldNotJoinOnGlobalTableUpdates
#[test]
fn stream_global_join_test_should_not_join_on_global_table_updates() {
    let mut t = StreamGlobal::new(false);
    t.push_to_stream(2, "X", true, false);
    t.check(&[]);
    t.push_to_global_table(2, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X", true, false);
    t.check(&[(Some(0), "X0,FKey0+Y0", 2), (Some(1), "X1,FKey1+Y1", 3)]);
    t.push_to_global_table(4, "YY");
    t.check(&[]);
    t.push_to_stream(4, "X", true, false);
    t.check(&[
        (Some(0), "X0,FKey0+YY0", 6),
        (Some(1), "X1,FKey1+YY1", 7),
        (Some(2), "X2,FKey2+YY2", 8),
        (Some(3), "X3,FKey3+YY3", 9),
    ]);
    t.push_to_global_table(4, "YYY");
    t.check(&[]);
}

// KStreamGlobalKTableJoinTest#shouldJoinOnlyIfMatchFoundOnStreamUpdates
#[test]
fn stream_global_join_test_should_join_only_if_match_found_on_stream_updates() {
    let mut t = StreamGlobal::new(false);
    t.push_to_global_table(2, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X", true, false);
    t.check(&[(Some(0), "X0,FKey0+Y0", 0), (Some(1), "X1,FKey1+Y1", 1)]);
}

// KStreamGlobalKTableJoinTest#shouldClearGlobalTableEntryOnNullValueUpdates
#[test]
fn stream_global_join_test_should_clear_global_table_entry_on_null_value_updates() {
    let mut t = StreamGlobal::new(false);
    t.push_to_global_table(4, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X", true, false);
    t.check(&[
        (Some(0), "X0,FKey0+Y0", 0),
        (Some(1), "X1,FKey1+Y1", 1),
        (Some(2), "X2,FKey2+Y2", 2),
        (Some(3), "X3,FKey3+Y3", 3),
    ]);
    t.push_null_value_to_global_table(2);
    t.check(&[]);
    t.push_to_stream(4, "XX", true, false);
    t.check(&[(Some(2), "XX2,FKey2+Y2", 6), (Some(3), "XX3,FKey3+Y3", 7)]);
}

// KStreamGlobalKTableJoinTest#shouldNotJoinOnNullKeyMapperValues
#[test]
fn stream_global_join_test_should_not_join_on_null_key_mapper_values() {
    let mut t = StreamGlobal::new(false);
    t.push_to_global_table(4, "Y");
    t.check(&[]);
    t.push_to_stream(4, "XXX", false, false);
    t.check(&[]);
}

// KStreamGlobalKTableJoinTest#shouldJoinOnNullKeyWithNonNullKeyMapperValues (KIP-962)
#[test]
fn stream_global_join_test_should_join_on_null_key_with_non_null_key_mapper_values() {
    let mut t = StreamGlobal::new(false);
    t.push_to_global_table(2, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X", true, true);
    t.check(&[(None, "X0,FKey0+Y0", 0), (Some(1), "X1,FKey1+Y1", 1)]);
}

// KStreamGlobalKTableLeftJoinTest#shouldNotRequireCopartitioning
#[test]
fn stream_global_left_join_test_should_not_require_copartitioning() {
    global_not_copartitioned(true);
}

// KStreamGlobalKTableLeftJoinTest#shouldNotJoinWithEmptyGlobalTableOnStreamUpdates
#[test]
fn stream_global_left_join_test_should_not_join_with_empty_global_table_on_stream_updates() {
    let mut t = StreamGlobal::new(true);
    t.push_to_stream(2, "X", true, false);
    t.check(&[(Some(0), "X0,FKey0+null", 0), (Some(1), "X1,FKey1+null", 1)]);
}

// KStreamGlobalKTableLeftJoinTest#shouldNotJoinOnGlobalTableUpdates
#[test]
fn stream_global_left_join_test_should_not_join_on_global_table_updates() {
    let mut t = StreamGlobal::new(true);
    t.push_to_stream(2, "X", true, false);
    t.check(&[(Some(0), "X0,FKey0+null", 0), (Some(1), "X1,FKey1+null", 1)]);
    t.push_to_global_table(2, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X", true, false);
    t.check(&[
        (Some(0), "X0,FKey0+Y0", 2),
        (Some(1), "X1,FKey1+Y1", 3),
        (Some(2), "X2,FKey2+null", 4),
        (Some(3), "X3,FKey3+null", 5),
    ]);
    t.push_to_global_table(4, "YY");
    t.check(&[]);
    t.push_to_stream(4, "X", true, false);
    t.check(&[
        (Some(0), "X0,FKey0+YY0", 6),
        (Some(1), "X1,FKey1+YY1", 7),
        (Some(2), "X2,FKey2+YY2", 8),
        (Some(3), "X3,FKey3+YY3", 9),
    ]);
    t.push_to_global_table(4, "YYY");
    t.check(&[]);
}

// KStreamGlobalKTableLeftJoinTest#shouldJoinRegardlessIfMatchFoundOnStreamUpdates
#[test]
fn stream_global_left_join_test_should_join_regardless_if_match_found_on_stream_updates() {
    let mut t = StreamGlobal::new(true);
    t.push_to_global_table(2, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X", true, false);
    t.check(&[
        (Some(0), "X0,FKey0+Y0", 0),
        (Some(1), "X1,FKey1+Y1", 1),
        (Some(2), "X2,FKey2+null", 2),
        (Some(3), "X3,FKey3+null", 3),
    ]);
}

// KStreamGlobalKTableLeftJoinTest#shouldClearGlobalTableEntryOnNullValueUpdates
#[test]
fn stream_global_left_join_test_should_clear_global_table_entry_on_null_value_updates() {
    let mut t = StreamGlobal::new(true);
    t.push_to_global_table(4, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X", true, false);
    t.check(&[
        (Some(0), "X0,FKey0+Y0", 0),
        (Some(1), "X1,FKey1+Y1", 1),
        (Some(2), "X2,FKey2+Y2", 2),
        (Some(3), "X3,FKey3+Y3", 3),
    ]);
    t.push_null_value_to_global_table(2);
    t.check(&[]);
    t.push_to_stream(4, "XX", true, false);
    t.check(&[
        (Some(0), "XX0,FKey0+null", 4),
        (Some(1), "XX1,FKey1+null", 5),
        (Some(2), "XX2,FKey2+Y2", 6),
        (Some(3), "XX3,FKey3+Y3", 7),
    ]);
}

// KStreamGlobalKTableLeftJoinTest#shouldNotJoinOnNullKeyMapperValues
#[test]
fn stream_global_left_join_test_should_not_join_on_null_key_mapper_values() {
    let mut t = StreamGlobal::new(true);
    t.push_to_global_table(4, "Y");
    t.check(&[]);
    t.push_to_stream(4, "XXX", false, false);
    t.check(&[]);
}

// KStreamGlobalKTableLeftJoinTest#shouldJoinOnNullKeyWithNonNullKeyMapperValues (KIP-962)
#[test]
fn stream_global_left_join_test_should_join_on_null_key_with_non_null_key_mapper_values() {
    let mut t = StreamGlobal::new(true);
    t.push_to_global_table(4, "Y");
    t.check(&[]);
    t.push_to_stream(4, "X", true, true);
    t.check(&[
        (None, "X0,FKey0+Y0", 0),
        (Some(1), "X1,FKey1+Y1", 1),
        (Some(2), "X2,FKey2+Y2", 2),
        (Some(3), "X3,FKey3+Y3", 3),
    ]);
}

/// GlobalKTableJoinsTest: global rows `(a,A)@1 (b,B)@5`, stream `(1,a)@2 (2,b)@10 (3,c)@3`
/// joined on the stream's value, `value + "+" + row`: the last result per key with its
/// timestamp.
fn global_joins(left: bool) -> BTreeMap<String, (String, i64)> {
    let b = StreamsBuilder::new();
    let global = b.global_table("global", Consumed::with(StringSerde, StringSerde));
    let stream = b.stream("stream", Consumed::with(StringSerde, StringSerde));
    let joined = if left {
        stream.left_join_global(
            &global,
            |_, v| v.clone(),
            |v, t| format!("{v}+{}", t.map_or("null", String::as_str)),
        )
    } else {
        stream.join_global(&global, |_, v| v.clone(), |v, t| format!("{v}+{t}"))
    };
    joined.to("out", Produced::with(StringSerde, StringSerde));
    let handle = global.handle().clone();
    let mut d = driver(b);
    for (k, v) in [("a", "A"), ("b", "B")] {
        d.pipe_global(&handle, &s(k), Some(&s(v)))
            .expect("global row");
    }
    for (k, v, ts) in [("1", "a", 2), ("2", "b", 10), ("3", "c", 3)] {
        pipe(
            &mut d,
            "stream",
            &StringSerde,
            &StringSerde,
            Some(&s(k)),
            Some(&s(v)),
            ts,
        );
    }
    read(&mut d, "out", &StringSerde, &StringSerde)
        .into_iter()
        .map(|(k, v, ts)| (k, (v.expect("a value"), ts)))
        .collect()
}

// GlobalKTableJoinsTest#shouldLeftJoinWithStream
#[test]
fn global_ktable_joins_test_should_left_join_with_stream() {
    let want = [("1", "a+A", 2), ("2", "b+B", 10), ("3", "c+null", 3)];
    let want: BTreeMap<_, _> = want.iter().map(|(k, v, ts)| (s(k), (s(v), *ts))).collect();
    assert_eq!(global_joins(true), want);
}

// GlobalKTableJoinsTest#shouldInnerJoinWithStream
#[test]
fn global_ktable_joins_test_should_inner_join_with_stream() {
    let want = [("1", "a+A", 2), ("2", "b+B", 10)];
    let want: BTreeMap<_, _> = want.iter().map(|(k, v, ts)| (s(k), (s(v), *ts))).collect();
    assert_eq!(global_joins(false), want);
}

// ---------------------------------------------------------------------------------------------
// KTableKTable{Inner,Left,Outer}JoinTest: the same eight steps for the three kinds.

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Inner,
    Left,
    Outer,
}

/// One step: `(left side?, key (None: no key), value or tombstone, ts)`.
type Update = (bool, Option<i64>, Option<String>, i64);

fn table_join_steps() -> Vec<Vec<Update>> {
    let all = |left: bool, prefix: &str, ts: &dyn Fn(i64) -> i64| -> Vec<Update> {
        KEYS.iter()
            .map(|k| (left, Some(*k), Some(format!("{prefix}{k}")), ts(*k)))
            .collect()
    };
    vec![
        // Two left rows, and one without a key (discarded).
        vec![
            (true, Some(0), Some(s("X0")), 5),
            (true, Some(1), Some(s("X1")), 6),
            (true, None, Some(s("SomeVal")), 42),
        ],
        vec![
            (false, Some(0), Some(s("Y0")), 0),
            (false, Some(1), Some(s("Y1")), 10),
            (false, None, Some(s("AnotherVal")), 73),
        ],
        all(true, "XX", &|_| 7),
        all(false, "YY", &|k| k * 5),
        all(true, "XXX", &|_| 6),
        vec![(false, Some(0), None, 5), (false, Some(1), None, 7)],
        all(true, "XXXX", &|_| 13),
        vec![
            (true, Some(0), None, 0),
            (true, Some(1), None, 42),
            (true, Some(2), None, 5),
            (true, Some(3), None, 20),
        ],
    ]
}

/// Kafka Streams' expected changes of each step, `(key, value or tombstone, ts)`.
fn table_join_expected(kind: Kind) -> Vec<Vec<(i64, Option<&'static str>, i64)>> {
    let inner = kind == Kind::Inner;
    let first = if inner {
        vec![]
    } else {
        vec![(0, Some("X0+null"), 5), (1, Some("X1+null"), 6)]
    };
    let mut third = vec![(0, Some("XX0+Y0"), 7), (1, Some("XX1+Y1"), 10)];
    if !inner {
        third.extend([(2, Some("XX2+null"), 7), (3, Some("XX3+null"), 7)]);
    }
    let sixth = if inner {
        vec![(0, None, 6), (1, None, 7)]
    } else {
        vec![(0, Some("XXX0+null"), 6), (1, Some("XXX1+null"), 7)]
    };
    let mut seventh = if inner {
        vec![]
    } else {
        vec![(0, Some("XXXX0+null"), 13), (1, Some("XXXX1+null"), 13)]
    };
    seventh.extend([(2, Some("XXXX2+YY2"), 13), (3, Some("XXXX3+YY3"), 15)]);
    let eighth = match kind {
        Kind::Inner => vec![(2, None, 10), (3, None, 20)],
        Kind::Left => vec![(0, None, 0), (1, None, 42), (2, None, 10), (3, None, 20)],
        Kind::Outer => vec![
            (0, None, 0),
            (1, None, 42),
            (2, Some("null+YY2"), 10),
            (3, Some("null+YY3"), 20),
        ],
    };
    vec![
        first,
        vec![(0, Some("X0+Y0"), 5), (1, Some("X1+Y1"), 10)],
        third,
        vec![
            (0, Some("XX0+YY0"), 7),
            (1, Some("XX1+YY1"), 7),
            (2, Some("XX2+YY2"), 10),
            (3, Some("XX3+YY3"), 15),
        ],
        vec![
            (0, Some("XXX0+YY0"), 6),
            (1, Some("XXX1+YY1"), 6),
            (2, Some("XXX2+YY2"), 10),
            (3, Some("XXX3+YY3"), 15),
        ],
        sixth,
        seventh,
        eighth,
    ]
}

/// Runs the steps through `topic1` ⋈ `topic2` of `kind` (joiner `left+right`, `null` for a
/// missing side), materialized as `store`: the changes of each step as `(key, new, old, ts)`,
/// the old value read from the result store before each update when `with_old`. Asserts
/// Kafka Streams' expectations, and that nothing was dead-lettered.
fn table_join(kind: Kind, store: &str, with_old: bool) {
    let b = StreamsBuilder::new();
    let t1 = b.table("topic1", Consumed::with(I64Serde, StringSerde));
    let t2 = b.table("topic2", Consumed::with(I64Serde, StringSerde));
    let or_null = |v: Option<&String>| v.map_or(s("null"), String::clone);
    let m = Materialized::with(I64Serde, StringSerde).named(store);
    let joined = match kind {
        Kind::Inner => t1.join(&t2, |l, r| format!("{l}+{r}"), m),
        Kind::Left => t1.left_join(&t2, move |l, r| format!("{l}+{}", or_null(r)), m),
        Kind::Outer => t1.outer_join(&t2, move |l, r| format!("{}+{}", or_null(l), or_null(r)), m),
    };
    joined
        .to_stream()
        .to("output", Produced::with(I64Serde, StringSerde));
    let result = joined.store().clone();
    let topology = b.build().expect("valid topology");
    // Kafka Streams' co-partition group {topic1, topic2}: one sub-topology reads both.
    assert_eq!(topology.sub_topologies().len(), 1);
    let mut sources = topology.source_topics();
    sources.sort();
    assert!(
        sources.contains(&s("topic1")) && sources.contains(&s("topic2")),
        "{sources:?}"
    );
    let mut d = TopologyTestDriver::new(topology).expect("driver");
    for (i, (step, want)) in table_join_steps()
        .into_iter()
        .zip(table_join_expected(kind))
        .enumerate()
    {
        let mut changes = Vec::new();
        for (left, key, value, ts) in step {
            let old = match key {
                Some(k) if with_old => d.store_get(&result, &k).expect("result"),
                _ => None,
            };
            let topic = if left { "topic1" } else { "topic2" };
            pipe(
                &mut d,
                topic,
                &I64Serde,
                &StringSerde,
                key.as_ref(),
                value.as_ref(),
                ts,
            );
            changes.extend(
                read(&mut d, "output", &I64Serde, &StringSerde)
                    .into_iter()
                    .map(|(k, v, t)| (k, v, old.clone(), t)),
            );
        }
        let want: Vec<_> = want
            .into_iter()
            .map(|(k, v, ts)| (k, v.map(s), None::<String>, ts))
            .collect();
        let got: Vec<_> = changes
            .iter()
            .map(|(k, v, _, t)| (*k, v.clone(), None::<String>, *t))
            .collect();
        assert_eq!(got, want, "step {}", i + 1);
        if with_old {
            table_join_old_values_check(kind, i, &changes);
        }
    }
    for topic in ["topic1.DLT", "topic2.DLT"] {
        assert!(d.read_raw_output(topic).is_empty(), "{topic}");
    }
    assert_eq!(
        d.store_entries(&result).expect("result").len(),
        if kind == Kind::Outer { 2 } else { 0 }
    );
}

/// Kafka Streams' `testSendingOldValues` old values: the previous row of each key's result.
fn table_join_old_values_check(
    kind: Kind,
    step: usize,
    changes: &[(i64, Option<String>, Option<String>, i64)],
) {
    let expected = table_join_expected(kind);
    for (k, _, old, _) in changes {
        // The previous result of `k`: its latest change in an earlier step (or earlier in this
        // step), as Kafka Streams' `Change.oldValue`.
        let before = expected[..step]
            .iter()
            .flatten()
            .rfind(|(key, _, _)| key == k)
            .and_then(|(_, v, _)| v.map(s));
        assert_eq!(old, &before, "step {}, key {k}", step + 1);
    }
}

// KTableKTableInnerJoinTest#testJoin
#[test]
fn inner_join_test_join() {
    table_join(Kind::Inner, "joined-inner", false);
}

// KTableKTableInnerJoinTest#testQueryableJoin
#[test]
fn inner_join_test_queryable_join() {
    table_join(Kind::Inner, "queryable", false);
}

// KTableKTableInnerJoinTest#testQueryableNotSendingOldValues
// Kafka Streams' tombstones here are `Change(null, null)`: eosflow's are tombstones.
#[test]
fn inner_join_test_queryable_not_sending_old_values() {
    table_join(Kind::Inner, "queryable", false);
}

// KTableKTableInnerJoinTest#testNotSendingOldValues
#[test]
fn inner_join_test_not_sending_old_values() {
    table_join(Kind::Inner, "joined-inner", false);
}

// KTableKTableInnerJoinTest#testSendingOldValues
// The old values read from the result store before each update (see the module docs).
#[test]
fn inner_join_test_sending_old_values() {
    table_join(Kind::Inner, "joined-inner", true);
}

/// `shouldLogAndMeterSkippedRecordsDueToNullLeftKey`: Kafka Streams checks a log line; the
/// observable part — a left update without a key changes no row, forwards nothing and is not
/// dead-lettered (eosflow counts it as `no-key`).
fn table_join_skips_null_left_key(kind: Kind) {
    let b = StreamsBuilder::new();
    let t1 = b.table("left", Consumed::with(StringSerde, StringSerde));
    let t2 = b.table("right", Consumed::with(StringSerde, StringSerde));
    let m = Materialized::with(StringSerde, StringSerde).named("joined");
    let joined = match kind {
        Kind::Inner => t1.join(&t2, |l, r| format!("{l}+{r}"), m),
        Kind::Left => t1.left_join(&t2, |l, _| l.clone(), m),
        Kind::Outer => t1.outer_join(&t2, |l, _| l.cloned().unwrap_or_default(), m),
    };
    joined
        .to_stream()
        .to("output", Produced::with(StringSerde, StringSerde));
    let store = joined.store().clone();
    let mut d = driver(b);
    pipe(
        &mut d,
        "right",
        &StringSerde,
        &StringSerde,
        Some(&s("k")),
        Some(&s("r")),
        0,
    );
    let _ = d.read_raw_output("output");
    pipe(
        &mut d,
        "left",
        &StringSerde,
        &StringSerde,
        None,
        Some(&s("new")),
        0,
    );
    assert!(d.read_raw_output("output").is_empty());
    assert!(d.read_raw_output("left.DLT").is_empty());
    let rows = d.store_entries(&store).expect("store");
    assert!(rows.iter().all(|(_, v)| v != "new"), "{rows:?}");
}

// KTableKTableInnerJoinTest#shouldLogAndMeterSkippedRecordsDueToNullLeftKey
#[test]
fn inner_join_test_should_log_and_meter_skipped_records_due_to_null_left_key() {
    table_join_skips_null_left_key(Kind::Inner);
}

// KTableKTableLeftJoinTest#testJoin
#[test]
fn left_join_test_join() {
    table_join(Kind::Left, "joined-left", false);
}

// KTableKTableLeftJoinTest#testNotSendingOldValue
#[test]
fn left_join_test_not_sending_old_value() {
    table_join(Kind::Left, "joined-left", false);
}

// KTableKTableLeftJoinTest#testSendingOldValue
#[test]
fn left_join_test_sending_old_value() {
    table_join(Kind::Left, "joined-left", true);
}

// KTableKTableLeftJoinTest#shouldLogAndMeterSkippedRecordsDueToNullLeftKey
#[test]
fn left_join_test_should_log_and_meter_skipped_records_due_to_null_left_key() {
    table_join_skips_null_left_key(Kind::Left);
}

// KTableKTableOuterJoinTest#testJoin
#[test]
fn outer_join_test_join() {
    table_join(Kind::Outer, "joined-outer", false);
}

// KTableKTableOuterJoinTest#testNotSendingOldValue
#[test]
fn outer_join_test_not_sending_old_value() {
    table_join(Kind::Outer, "joined-outer", false);
}

// KTableKTableOuterJoinTest#testSendingOldValue
#[test]
fn outer_join_test_sending_old_value() {
    table_join(Kind::Outer, "joined-outer", true);
}

// KTableKTableOuterJoinTest#shouldLogAndMeterSkippedRecordsDueToNullLeftKey
#[test]
fn outer_join_test_should_log_and_meter_skipped_records_due_to_null_left_key() {
    table_join_skips_null_left_key(Kind::Outer);
}
