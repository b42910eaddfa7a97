//! Grouped tables (`KTable.groupBy` → `KGroupedTable`), ported from Kafka Streams'
//! `KGroupedTableImplTest`, `KTableAggregateTest` and `KTableReduceTest`.
//!
//! Kafka Streams stamps a grouped table's result with the later of the update's timestamp
//! and the group's previous result's; eosflow stamps it with the update's (it keeps no
//! timestamp beside a store's value). Where the two differ, the expected record carries
//! eosflow's timestamp with Kafka Streams' in a comment; the difference is documented in
//! docs/coming-from-kafka-streams.md ("Grouped tables, cogroup and the other operators").
//! Kafka Streams' timestamped stores (`getTimestampedKeyValueStore`) have no eosflow
//! counterpart: their values are checked, their timestamps left out.

use std::collections::BTreeSet;

use eosflow::dsl::{Consumed, Grouped, KTable, Materialized, Produced, StreamsBuilder};
use eosflow::serdes::{I64Serde, JsonSerde, Serde, StringSerde};
use eosflow::testing::{TestRecord, TopologyTestDriver};
use eosflow::topology::TableHandle;

type Driver = TopologyTestDriver<eosflow::topology::Topology>;
type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

const OUT: &str = "output";

fn s(text: &str) -> String {
    text.to_string()
}

/// Pipes `(key, value, timestamp)` rows (`None`: a tombstone) into `topic`.
fn pipe(driver: &mut Driver, topic: &str, rows: &[(&str, Option<&str>, i64)]) -> Result {
    for (key, value, ts) in rows {
        driver.pipe(TestRecord::new(topic, Some(*key), *value).timestamp(*ts))?;
    }
    Ok(())
}

/// What was written to `topic`: key, value read with `values`, timestamp.
fn outputs<V>(
    driver: &mut Driver,
    topic: &str,
    values: &impl Serde<V>,
) -> Result<Vec<(String, V, i64)>> {
    let mut out = Vec::new();
    for r in driver.read_raw_output(topic) {
        let value = r.value.as_deref().ok_or("a tombstone in the output")?;
        let ts = r.timestamp.ok_or("no timestamp")?;
        out.push((r.key_text(), values.deserialize(value)?, ts));
    }
    Ok(out)
}

/// `MockAggregator.TOSTRING_ADDER` and `TOSTRING_REMOVER`, `MockInitializer.STRING_INIT`.
fn to_string_aggregate<'b>(
    table: &KTable<'b, String, String, TableHandle<String, String>>,
    selector: impl Fn(&String, &String) -> Option<(String, String)> + Send + Sync + 'static,
    store: &str,
) -> KTable<'b, String, String> {
    table
        .group_by(selector, Grouped::with(StringSerde, StringSerde))
        .aggregate(
            || s("0"),
            |_, v, agg| format!("{agg}+{v}"),
            |_, v, agg| format!("{agg}-{v}"),
            Materialized::with(StringSerde, StringSerde).named(store),
        )
}

fn strings<'b>(
    topic: &str,
    builder: &'b StreamsBuilder,
) -> KTable<'b, String, String, TableHandle<String, String>> {
    builder.table(topic, Consumed::with(StringSerde, StringSerde))
}

/// `(key, value, timestamp)` expectations with string keys.
fn kvt<V>(rows: &[(&str, V, i64)]) -> Vec<(String, V, i64)>
where
    V: Clone,
{
    rows.iter().map(|(k, v, t)| (s(k), v.clone(), *t)).collect()
}

// KTableAggregateTest#testAggBasic
#[test]
fn test_agg_basic() -> Result {
    let builder = StreamsBuilder::new();
    let table = strings("topic1", &builder);
    let agg = to_string_aggregate(
        &table,
        |k, v| Some((k.clone(), v.clone())),
        "topic1-Canonized",
    );
    agg.to_stream()
        .to(OUT, Produced::with(StringSerde, StringSerde));
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    pipe(
        &mut driver,
        "topic1",
        &[
            ("A", Some("1"), 10),
            ("B", Some("2"), 15),
            ("A", Some("3"), 20),
            ("B", Some("4"), 18),
            ("C", Some("5"), 5),
            ("D", Some("6"), 25),
            ("B", Some("7"), 15),
            ("C", Some("8"), 10),
        ],
    )?;
    assert_eq!(
        outputs(&mut driver, OUT, &StringSerde)?,
        kvt(&[
            ("A", s("0+1"), 10),
            ("B", s("0+2"), 15),
            ("A", s("0+1-1+3"), 20),
            ("B", s("0+2-2+4"), 18),
            ("C", s("0+5"), 5),
            ("D", s("0+6"), 25),
            ("B", s("0+2-2+4-4+7"), 15), // Kafka Streams: 18
            ("C", s("0+5-5+8"), 10),
        ])
    );
    Ok(())
}

/// `testAggRepartition`'s selector: `"null"` → a null key, `"NULL"` → no pair (both: in no
/// group), else `(value, value)`.
#[allow(clippy::ptr_arg)] // the selector's or aggregator's signature: `&K`, `&V`
fn value_or_nothing(key: &String, value: &String) -> Option<(String, String)> {
    match key.as_str() {
        "null" | "NULL" => None,
        _ => Some((value.clone(), value.clone())),
    }
}

// KTableAggregateTest#testAggRepartition
#[test]
fn test_agg_repartition() -> Result {
    let builder = StreamsBuilder::new();
    let table = strings("topic1", &builder);
    let agg = to_string_aggregate(&table, value_or_nothing, "topic1-Canonized");
    agg.to_stream()
        .to(OUT, Produced::with(StringSerde, StringSerde));
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    pipe(
        &mut driver,
        "topic1",
        &[
            ("A", Some("1"), 10),
            ("A", None, 15),
            ("A", Some("1"), 12),
            ("B", Some("2"), 20),
            ("null", Some("3"), 25),
            ("B", Some("4"), 23),
            ("NULL", Some("5"), 24),
            ("B", Some("7"), 22),
        ],
    )?;
    assert_eq!(
        outputs(&mut driver, OUT, &StringSerde)?,
        kvt(&[
            ("1", s("0+1"), 10),
            ("1", s("0+1-1"), 15),
            ("1", s("0+1-1+1"), 12), // Kafka Streams: 15
            ("2", s("0+2"), 20),
            ("2", s("0+2-2"), 23),
            ("4", s("0+4"), 23),
            ("4", s("0+4-4"), 22), // Kafka Streams: 23
            ("7", s("0+7"), 22),
        ])
    );
    Ok(())
}

/// `testCountHelper`: the count of each colour over `count-test-input`, `store` named or not.
fn count_colours(store: Option<&str>) -> Result {
    let builder = StreamsBuilder::new();
    let materialized = Materialized::with(StringSerde, I64Serde);
    let materialized = match store {
        Some(name) => materialized.named(name),
        None => materialized,
    };
    strings("count-test-input", &builder)
        .group_by(
            |_, v| Some((v.clone(), v.clone())),
            Grouped::with(StringSerde, StringSerde),
        )
        .count(materialized)
        .to_stream()
        .to(OUT, Produced::with(StringSerde, I64Serde));
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    pipe(
        &mut driver,
        "count-test-input",
        &[
            ("A", Some("green"), 10),
            ("B", Some("green"), 9),
            ("A", Some("blue"), 12),
            ("C", Some("yellow"), 15),
            ("D", Some("green"), 11),
        ],
    )?;
    assert_eq!(
        outputs(&mut driver, OUT, &I64Serde)?,
        kvt(&[
            ("green", 1, 10),
            ("green", 2, 9), // Kafka Streams: 10
            ("green", 1, 12),
            ("blue", 1, 12),
            ("yellow", 1, 15),
            ("green", 2, 11), // Kafka Streams: 12
        ])
    );
    Ok(())
}

// KTableAggregateTest#testCount
#[test]
fn test_count() -> Result {
    count_colours(Some("count"))
}

// KTableAggregateTest#testCountWithInternalStore
#[test]
fn test_count_with_internal_store() -> Result {
    count_colours(None)
}

// KTableAggregateTest#testRemoveOldBeforeAddNew
#[test]
fn test_remove_old_before_add_new() -> Result {
    let builder = StreamsBuilder::new();
    strings("count-test-input", &builder)
        .group_by(
            |k: &String, _: &String| {
                let mut chars = k.chars().map(String::from);
                Some((chars.next()?, chars.next()?))
            },
            Grouped::with(StringSerde, StringSerde),
        )
        .aggregate(
            String::new,
            |_, v, agg| agg + v,
            |_, v, agg| agg.replace(v.as_str(), ""),
            Materialized::with(StringSerde, StringSerde).named("someStore"),
        )
        .to_stream()
        .to(OUT, Produced::with(StringSerde, StringSerde));
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    pipe(
        &mut driver,
        "count-test-input",
        &[
            ("11", Some("A"), 10),
            ("12", Some("B"), 8),
            ("11", None, 12),
            ("12", Some("C"), 6),
        ],
    )?;
    assert_eq!(
        outputs(&mut driver, OUT, &StringSerde)?,
        kvt(&[
            ("1", s("1"), 10),
            ("1", s("12"), 8), // Kafka Streams: 10
            ("1", s("2"), 12),
            ("1", s("2"), 6), // Kafka Streams: 12
        ])
    );
    Ok(())
}

/// `testUpgradeFromConfig` / `testKeyWithNoEquals`: a table regrouped by `selector` and
/// counted, fed `("1", value)@8` then `("1", value)@9`.
fn count_same_key(
    value: &str,
    selector: fn(&String, &String) -> Option<(String, String)>,
) -> Result<Vec<(String, i64, i64)>> {
    let builder = StreamsBuilder::new();
    strings("input-topic", &builder)
        .group_by(selector, Grouped::with(StringSerde, StringSerde))
        .count(Materialized::with(StringSerde, I64Serde))
        .to_stream()
        .to("output-topic", Produced::with(StringSerde, I64Serde));
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    pipe(
        &mut driver,
        "input-topic",
        &[("1", Some(value), 8), ("1", Some(value), 9)],
    )?;
    outputs(&mut driver, "output-topic", &I64Serde)
}

// KTableAggregateTest#testShouldNotSendTransientStateIfNotUpgrading
#[test]
fn test_should_not_send_transient_state_if_not_upgrading() -> Result {
    let out = count_same_key("", |k, v| Some((k.clone(), v.clone())))?;
    assert_eq!(out, kvt(&[("1", 1, 8), ("1", 1, 9)]));
    Ok(())
}

// KTableAggregateTest#testNoEqualsAndNotSameObject
#[test]
fn test_no_equals_and_not_same_object() -> Result {
    // Kafka Streams compares the old and the new group with `equals`: a key type without it
    // makes the same group look like two, and the count passes through a transient 0 —
    // ("1", 1)@8, ("1", 0)@9, ("1", 1)@9. eosflow compares the groups' serialized bytes
    // (what places them in a partition), so the same group is one step and no 0 appears.
    let out = count_same_key("1", |_, v| Some((v.clone(), v.clone())))?;
    assert_eq!(out, kvt(&[("1", 1, 8), ("1", 1, 9)]));
    Ok(())
}

// KTableAggregateTest#testNoEqualsAndSameObject
#[test]
fn test_no_equals_and_same_object() -> Result {
    let out = count_same_key("1", |k, v| Some((k.clone(), v.clone())))?;
    assert_eq!(out, kvt(&[("1", 1, 8), ("1", 1, 9)]));
    Ok(())
}

// KTableReduceTest#shouldAddAndSubtract
#[test]
fn should_add_and_subtract() -> Result {
    // Kafka Streams drives the reduce processor with `Change` records for key "A"; here a
    // table row "x" carries the sets and is regrouped to "A": new {a}, then {b} replacing
    // {a}, then a tombstone removing {b}.
    type Set = BTreeSet<String>;
    let builder = StreamsBuilder::new();
    let reduced = builder
        .table("sets", Consumed::with(StringSerde, JsonSerde::<Set>::new()))
        .group_by(
            |_, set| Some((s("A"), set.clone())),
            Grouped::with(StringSerde, JsonSerde::new()),
        )
        .reduce(
            |agg: Set, v| agg.union(v).cloned().collect(),
            |agg: Set, v| agg.difference(v).cloned().collect(),
            Materialized::with(StringSerde, JsonSerde::new()).named("myStore"),
        );
    let store = reduced.store().clone();
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    let set = |items: &[&str]| items.iter().map(|i| s(i)).collect::<Set>();
    pipe(&mut driver, "sets", &[("x", Some(r#"["a"]"#), 10)])?;
    assert_eq!(driver.store_get(&store, &s("A"))?, Some(set(&["a"])));
    pipe(&mut driver, "sets", &[("x", Some(r#"["b"]"#), 15)])?;
    assert_eq!(driver.store_get(&store, &s("A"))?, Some(set(&["b"])));
    pipe(&mut driver, "sets", &[("x", None, 12)])?;
    assert_eq!(driver.store_get(&store, &s("A"))?, Some(set(&[])));
    Ok(())
}

/// `KGroupedTableImplTest`'s table of doubles regrouped by `intProjection` (each value cut
/// to an integer) and reduced with `INTEGER_ADDER`/`INTEGER_SUBTRACTOR`.
fn reduced_ints(
    builder: &StreamsBuilder,
    materialized: Materialized<String, i64>,
) -> KTable<'_, String, i64> {
    let reduced = builder
        .table(
            "input",
            Consumed::with(StringSerde, JsonSerde::<f64>::new()),
        )
        .group_by(
            |k, v| Some((k.clone(), v.trunc() as i64)),
            Grouped::with(StringSerde, I64Serde),
        )
        .reduce(|a, v| a + v, |a, v| a - v, materialized);
    reduced
        .to_stream()
        .to(OUT, Produced::with(StringSerde, I64Serde));
    reduced
}

/// `assertReduced`: each key's last result (value, timestamp) after two rounds of doubles.
fn assert_reduced(driver: &mut Driver) -> Result {
    let mut last = std::collections::BTreeMap::new();
    let mut round = |driver: &mut Driver, rows: &[(&str, f64, i64)]| -> Result<_> {
        for (k, v, ts) in rows {
            let bytes = JsonSerde::<f64>::new().serialize(v)?;
            driver.pipe(TestRecord::new("input", Some(*k), Some(bytes)).timestamp(*ts))?;
        }
        for (k, v, ts) in outputs(driver, OUT, &I64Serde)? {
            last.insert(k, (v, ts));
        }
        Ok(last.clone())
    };
    let first = round(driver, &[("A", 1.1, 10), ("B", 2.2, 11)])?;
    assert_eq!(first.get("A"), Some(&(1, 10)));
    assert_eq!(first.get("B"), Some(&(2, 11)));
    let second = round(
        driver,
        &[
            ("A", 2.6, 30),
            ("B", 1.3, 30),
            ("A", 5.7, 50),
            ("B", 6.2, 20),
        ],
    )?;
    assert_eq!(second.get("A"), Some(&(5, 50)));
    assert_eq!(second.get("B"), Some(&(6, 20))); // Kafka Streams: (6, 30)
    Ok(())
}

// KGroupedTableImplTest#shouldReduce
#[test]
fn should_reduce() -> Result {
    let builder = StreamsBuilder::new();
    let reduced = reduced_ints(
        &builder,
        Materialized::with(StringSerde, I64Serde).named("reduced"),
    );
    assert_eq!(reduced.store().name(), "reduced");
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    assert_reduced(&mut driver)
}

// KGroupedTableImplTest#shouldReduceWithInternalStoreName
#[test]
fn should_reduce_with_internal_store_name() -> Result {
    // Kafka Streams' `queryableStoreName()` is null for an unnamed store; eosflow's store is
    // always queryable, under its generated name.
    let builder = StreamsBuilder::new();
    let reduced = reduced_ints(&builder, Materialized::with(StringSerde, I64Serde));
    assert!(reduced
        .store()
        .name()
        .starts_with("KTABLE-REDUCE-STATE-STORE-"));
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    assert_reduced(&mut driver)
}

// KGroupedTableImplTest#shouldReduceAndMaterializeResults
#[test]
fn should_reduce_and_materialize_results() -> Result {
    let builder = StreamsBuilder::new();
    let reduced = reduced_ints(
        &builder,
        Materialized::with(StringSerde, I64Serde).named("reduce"),
    );
    let store = reduced.store().clone();
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    assert_reduced(&mut driver)?;
    assert_eq!(driver.store_get(&store, &s("A"))?, Some(5));
    assert_eq!(driver.store_get(&store, &s("B"))?, Some(6));
    Ok(())
}

/// `processData`: rows A..E of `input` valued "1", "1", "1", "2", "2".
fn process_data(driver: &mut Driver) -> Result {
    pipe(
        driver,
        "input",
        &[
            ("A", Some("1"), 10),
            ("B", Some("1"), 50),
            ("C", Some("1"), 30),
            ("D", Some("2"), 40),
            ("E", Some("2"), 60),
        ],
    )
}

// KGroupedTableImplTest#shouldCountAndMaterializeResults
#[test]
fn should_count_and_materialize_results() -> Result {
    let builder = StreamsBuilder::new();
    let counts = strings("input", &builder)
        .group_by(
            |_, v| Some((v.clone(), v.clone())),
            Grouped::with(StringSerde, StringSerde),
        )
        .count(Materialized::with(StringSerde, I64Serde).named("count"));
    let store = counts.store().clone();
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    process_data(&mut driver)?;
    assert_eq!(driver.store_get(&store, &s("1"))?, Some(3));
    assert_eq!(driver.store_get(&store, &s("2"))?, Some(2));
    Ok(())
}

// KGroupedTableImplTest#shouldAggregateAndMaterializeResults
#[test]
fn should_aggregate_and_materialize_results() -> Result {
    let builder = StreamsBuilder::new();
    let table = strings("input", &builder);
    let agg = to_string_aggregate(&table, |_, v| Some((v.clone(), v.clone())), "aggregate");
    let store = agg.store().clone();
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    process_data(&mut driver)?;
    assert_eq!(driver.store_get(&store, &s("1"))?, Some(s("0+1+1+1")));
    assert_eq!(driver.store_get(&store, &s("2"))?, Some(s("0+2+2")));
    Ok(())
}

/// A grouped table aggregated into a store named `~foo bar~` (`INVALID_STORE_NAME`).
fn invalid_store_name(reduce: bool) -> Result<String> {
    let builder = StreamsBuilder::new();
    let grouped = strings("blah", &builder).group_by(
        |_, v| Some((v.clone(), v.clone())),
        Grouped::with(StringSerde, StringSerde),
    );
    let named = Materialized::with(StringSerde, StringSerde).named("~foo bar~");
    if reduce {
        grouped.reduce(|a, v| a + v, |a, _| a, named);
    } else {
        grouped.aggregate(|| s("0"), |_, v, a| a + v, |_, _, a| a, named);
    }
    match builder.build() {
        Ok(_) => Err("a store named ~foo bar~ was accepted".into()),
        Err(e) => Ok(e.to_string()),
    }
}

// KGroupedTableImplTest#shouldNotAllowInvalidStoreNameOnAggregate
#[test]
fn should_not_allow_invalid_store_name_on_aggregate() -> Result {
    assert!(invalid_store_name(false)?.contains("~foo bar~"));
    Ok(())
}

// KGroupedTableImplTest#shouldNotAllowInvalidStoreNameOnReduce
#[test]
fn should_not_allow_invalid_store_name_on_reduce() -> Result {
    assert!(invalid_store_name(true)?.contains("~foo bar~"));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// CogroupedKStreamImplTest. Kafka Streams stamps a stream aggregate's result with the later
// of the record's timestamp and the key's previous result's; eosflow with the record's (as
// its `KGroupedStream` aggregations): where they differ, Kafka Streams' is in a comment.

/// `STRING_AGGREGATOR`: the aggregate with the value appended.
#[allow(clippy::ptr_arg)] // the selector's or aggregator's signature: `&K`, `&V`
fn append(_: &String, v: &String, agg: String) -> String {
    agg + v
}

/// `STRING_SUM_AGGREGATOR`: the aggregate plus the value read as a number.
#[allow(clippy::ptr_arg)] // the selector's or aggregator's signature: `&K`, `&V`
fn add_text(_: &String, v: &String, agg: i64) -> i64 {
    agg + v.parse::<i64>().unwrap_or_default()
}

/// The grouped records of topic `topic` (strings), grouped by key.
fn grouped<'b>(
    builder: &'b StreamsBuilder,
    topic: &str,
) -> eosflow::dsl::KGroupedStream<'b, String, String> {
    builder
        .stream(topic, Consumed::with(StringSerde, StringSerde))
        .group_by_key()
}

/// Writes a string table's changes to [`OUT`].
fn to_out(table: &KTable<'_, String, String>) {
    table
        .to_stream()
        .to(OUT, Produced::with(StringSerde, StringSerde));
}

// CogroupedKStreamImplTest#shouldCogroupAndAggregateSingleKStreams
#[test]
fn should_cogroup_and_aggregate_single_k_streams() -> Result {
    let builder = StreamsBuilder::new();
    let table = grouped(&builder, "one")
        .cogroup(append)
        .aggregate(String::new, Materialized::with(StringSerde, StringSerde));
    to_out(&table);
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    pipe(
        &mut driver,
        "one",
        &[
            ("k1", Some("A"), 0),
            ("k2", Some("B"), 0),
            ("k2", Some("B"), 0),
            ("k1", Some("A"), 0),
        ],
    )?;
    assert_eq!(
        outputs(&mut driver, OUT, &StringSerde)?,
        kvt(&[
            ("k1", s("A"), 0),
            ("k2", s("B"), 0),
            ("k2", s("BB"), 0),
            ("k1", s("AA"), 0)
        ])
    );
    Ok(())
}

// CogroupedKStreamImplTest#testCogroupHandleNullValues
#[test]
fn test_cogroup_handle_null_values() -> Result {
    // Kafka Streams skips `(k2, null)` silently; eosflow's aggregations dead-letter a record
    // without a value as `permanent` (docs/dsl.md, "Keys, values and tombstones"). The
    // results are Kafka Streams'.
    let builder = StreamsBuilder::new();
    let table = grouped(&builder, "one")
        .cogroup(append)
        .aggregate(String::new, Materialized::with(StringSerde, StringSerde));
    to_out(&table);
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    pipe(
        &mut driver,
        "one",
        &[
            ("k1", Some("A"), 0),
            ("k2", Some("B"), 0),
            ("k2", None, 0),
            ("k2", Some("B"), 0),
            ("k1", Some("A"), 0),
        ],
    )?;
    assert_eq!(
        outputs(&mut driver, OUT, &StringSerde)?,
        kvt(&[
            ("k1", s("A"), 0),
            ("k2", s("B"), 0),
            ("k2", s("BB"), 0),
            ("k1", s("AA"), 0)
        ])
    );
    let dead = driver.read_raw_output("one.DLT");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dlt_class(), Some("permanent"));
    Ok(())
}

/// Two string streams `one` and `two` cogrouped with `STRING_AGGREGATOR` into [`OUT`].
fn two_appended(builder: &StreamsBuilder) {
    let two = grouped(builder, "two");
    let table = grouped(builder, "one")
        .cogroup(append)
        .cogroup(&two, append)
        .aggregate(String::new, Materialized::with(StringSerde, StringSerde));
    to_out(&table);
}

// CogroupedKStreamImplTest#shouldCogroupAndAggregateTwoKStreamsWithDistinctKeys
#[test]
fn should_cogroup_and_aggregate_two_k_streams_with_distinct_keys() -> Result {
    let builder = StreamsBuilder::new();
    two_appended(&builder);
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    let a = Some("A");
    pipe(
        &mut driver,
        "one",
        &[("k1", a, 0), ("k1", a, 1), ("k1", a, 10), ("k1", a, 100)],
    )?;
    let b = Some("B");
    pipe(
        &mut driver,
        "two",
        &[
            ("k2", b, 100),
            ("k2", b, 200),
            ("k2", b, 1),
            ("k2", b, 500),
            ("k2", b, 500),
            ("k2", b, 100),
        ],
    )?;
    assert_eq!(
        outputs(&mut driver, OUT, &StringSerde)?,
        kvt(&[
            ("k1", s("A"), 0),
            ("k1", s("AA"), 1),
            ("k1", s("AAA"), 10),
            ("k1", s("AAAA"), 100),
            ("k2", s("B"), 100),
            ("k2", s("BB"), 200),
            ("k2", s("BBB"), 1), // Kafka Streams: 200
            ("k2", s("BBBB"), 500),
            ("k2", s("BBBBB"), 500),
            ("k2", s("BBBBBB"), 100), // Kafka Streams: 500
        ])
    );
    Ok(())
}

/// The inputs of the shared-keys tests: `one` then `two`, `v1`/`v2` each stream's values.
fn shared_keys(driver: &mut Driver, two: &[(&str, &str, i64)]) -> Result {
    pipe(
        driver,
        "one",
        &[
            ("k1", Some("A"), 0),
            ("k2", Some("A"), 1),
            ("k1", Some("A"), 10),
            ("k2", Some("A"), 100),
        ],
    )?;
    let two: Vec<_> = two.iter().map(|(k, v, t)| (*k, Some(*v), *t)).collect();
    pipe(driver, "two", &two)
}

// CogroupedKStreamImplTest#shouldCogroupAndAggregateTwoKStreamsWithSharedKeys
#[test]
fn should_cogroup_and_aggregate_two_k_streams_with_shared_keys() -> Result {
    let builder = StreamsBuilder::new();
    two_appended(&builder);
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    shared_keys(
        &mut driver,
        &[
            ("k2", "B", 100),
            ("k2", "B", 200),
            ("k1", "B", 1),
            ("k2", "B", 500),
            ("k1", "B", 500),
            ("k2", "B", 500),
            ("k3", "B", 500),
            ("k2", "B", 100),
        ],
    )?;
    // Kafka Streams' assertions stop before the last two results; here every result is read.
    assert_eq!(
        outputs(&mut driver, OUT, &StringSerde)?,
        kvt(&[
            ("k1", s("A"), 0),
            ("k2", s("A"), 1),
            ("k1", s("AA"), 10),
            ("k2", s("AA"), 100),
            ("k2", s("AAB"), 100),
            ("k2", s("AABB"), 200),
            ("k1", s("AAB"), 1), // Kafka Streams: 10
            ("k2", s("AABBB"), 500),
            ("k1", s("AABB"), 500),
            ("k2", s("AABBBB"), 500),
            ("k3", s("B"), 500),
            ("k2", s("AABBBBB"), 100),
        ])
    );
    Ok(())
}

/// The expected sums of `shouldAllowDifferentOutputTypeInCoGroup` and
/// `shouldCoGroupStreamsWithDifferentInputTypes`.
fn expected_sums() -> Vec<(String, i64, i64)> {
    kvt(&[
        ("k1", 1, 0),
        ("k2", 1, 1),
        ("k1", 2, 10),
        ("k2", 2, 100),
        ("k2", 4, 100),
        ("k2", 6, 200),
        ("k1", 4, 1), // Kafka Streams: 10
        ("k2", 8, 500),
        ("k1", 6, 500),
        ("k2", 11, 500),
        ("k3", 2, 500),
        ("k2", 13, 100), // Kafka Streams: 500 (not asserted by its test)
    ])
}

/// The second stream's records of the two sum tests.
const SUM_TWO: [(&str, &str, i64); 8] = [
    ("k2", "2", 100),
    ("k2", "2", 200),
    ("k1", "2", 1),
    ("k2", "2", 500),
    ("k1", "2", 500),
    ("k2", "3", 500),
    ("k3", "2", 500),
    ("k2", "2", 100),
];

/// `one` (and for the sum tests, `two`) with "1" values at Kafka Streams' timestamps.
fn ones(driver: &mut Driver) -> Result {
    pipe(
        driver,
        "one",
        &[
            ("k1", Some("1"), 0),
            ("k2", Some("1"), 1),
            ("k1", Some("1"), 10),
            ("k2", Some("1"), 100),
        ],
    )
}

// CogroupedKStreamImplTest#shouldAllowDifferentOutputTypeInCoGroup
#[test]
fn should_allow_different_output_type_in_co_group() -> Result {
    let builder = StreamsBuilder::new();
    let two = grouped(&builder, "two");
    grouped(&builder, "one")
        .cogroup(add_text)
        .cogroup(&two, add_text)
        .aggregate(
            || 0,
            Materialized::with(StringSerde, I64Serde).named("store1"),
        )
        .to_stream()
        .to(OUT, Produced::with(StringSerde, I64Serde));
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    ones(&mut driver)?;
    let two: Vec<_> = SUM_TWO.iter().map(|(k, v, t)| (*k, Some(*v), *t)).collect();
    pipe(&mut driver, "two", &two)?;
    assert_eq!(outputs(&mut driver, OUT, &I64Serde)?, expected_sums());
    Ok(())
}

// CogroupedKStreamImplTest#shouldCoGroupStreamsWithDifferentInputTypes
#[test]
fn should_co_group_streams_with_different_input_types() -> Result {
    let builder = StreamsBuilder::new();
    let two = builder
        .stream("two", Consumed::with(StringSerde, I64Serde))
        .group_by_key();
    grouped(&builder, "one")
        .cogroup(add_text)
        .cogroup(&two, |_, v: &i64, agg: i64| agg + v)
        .aggregate(
            || 0,
            Materialized::with(StringSerde, I64Serde).named("store1"),
        )
        .to_stream()
        .to(OUT, Produced::with(StringSerde, I64Serde));
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    ones(&mut driver)?;
    for (k, v, t) in SUM_TWO {
        let n: i64 = v.parse()?;
        driver.pipe(TestRecord::new("two", Some(k), Some(n.to_be_bytes())).timestamp(t))?;
    }
    assert_eq!(outputs(&mut driver, OUT, &I64Serde)?, expected_sums());
    Ok(())
}

// CogroupedKStreamImplTest#testCogroupKeyMixedAggregators
#[test]
fn test_cogroup_key_mixed_aggregators() -> Result {
    let builder = StreamsBuilder::new();
    let two = grouped(&builder, "two");
    let table = grouped(&builder, "one")
        .cogroup(|_, v: &String, agg: String| format!("{agg}-{v}"))
        .cogroup(&two, |_, v: &String, agg: String| format!("{agg}+{v}"))
        .aggregate(
            || s("0"),
            Materialized::with(StringSerde, StringSerde).named("store1"),
        );
    to_out(&table);
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    ones(&mut driver)?;
    pipe(
        &mut driver,
        "two",
        &[
            ("k1", Some("2"), 500),
            ("k2", Some("2"), 500),
            ("k1", Some("2"), 500),
            ("k2", Some("2"), 100),
        ],
    )?;
    assert_eq!(
        outputs(&mut driver, OUT, &StringSerde)?,
        kvt(&[
            ("k1", s("0-1"), 0),
            ("k2", s("0-1"), 1),
            ("k1", s("0-1-1"), 10),
            ("k2", s("0-1-1"), 100),
            ("k1", s("0-1-1+2"), 500),
            ("k2", s("0-1-1+2"), 500),
            ("k1", s("0-1-1+2+2"), 500),
            ("k2", s("0-1-1+2+2"), 100), // Kafka Streams: 500
        ])
    );
    Ok(())
}

// CogroupedKStreamImplTest#testCogroupWithThreeGroupedStreams
#[test]
fn test_cogroup_with_three_grouped_streams() -> Result {
    let builder = StreamsBuilder::new();
    let (two, three) = (grouped(&builder, "two"), grouped(&builder, "three"));
    let table = grouped(&builder, "one")
        .cogroup(append)
        .cogroup(&two, append)
        .cogroup(&three, append)
        .aggregate(String::new, Materialized::with(StringSerde, StringSerde));
    to_out(&table);
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    let b = Some("B");
    pipe(
        &mut driver,
        "one",
        &[
            ("k1", Some("A"), 0),
            ("k2", Some("A"), 1),
            ("k1", Some("A"), 10),
            ("k2", Some("A"), 100),
        ],
    )?;
    pipe(
        &mut driver,
        "two",
        &[("k2", b, 100), ("k2", b, 200), ("k1", b, 1), ("k2", b, 500)],
    )?;
    pipe(
        &mut driver,
        "three",
        &[
            ("k1", b, 500),
            ("k2", b, 500),
            ("k3", b, 500),
            ("k2", b, 100),
        ],
    )?;
    assert_eq!(
        outputs(&mut driver, OUT, &StringSerde)?,
        kvt(&[
            ("k1", s("A"), 0),
            ("k2", s("A"), 1),
            ("k1", s("AA"), 10),
            ("k2", s("AA"), 100),
            ("k2", s("AAB"), 100),
            ("k2", s("AABB"), 200),
            ("k1", s("AAB"), 1), // Kafka Streams: 10
            ("k2", s("AABBB"), 500),
            ("k1", s("AABB"), 500),
            ("k2", s("AABBBB"), 500),
            ("k3", s("B"), 500),
            ("k2", s("AABBBBB"), 100), // not asserted by Kafka Streams' test
        ])
    );
    Ok(())
}

// CogroupedKStreamImplTest#testCogroupWithKTableKTableInnerJoin
#[test]
fn test_cogroup_with_k_table_k_table_inner_join() -> Result {
    let builder = StreamsBuilder::new();
    let two = grouped(&builder, "two");
    let table1 = grouped(&builder, "one")
        .cogroup(append)
        .cogroup(&two, append)
        .named("name")
        .aggregate(
            String::new,
            Materialized::with(StringSerde, StringSerde).named("store"),
        );
    let table2 = strings("three", &builder);
    let joined = table1.join(
        &table2,
        |a, b| format!("{a}+{b}"),
        Materialized::with(StringSerde, StringSerde),
    );
    to_out(&joined);
    let mut driver = TopologyTestDriver::new(builder.build()?)?;
    pipe(&mut driver, "one", &[("k1", Some("A"), 5)])?;
    pipe(&mut driver, "two", &[("k2", Some("B"), 6)])?;
    assert!(driver.read_raw_output(OUT).is_empty());
    pipe(
        &mut driver,
        "three",
        &[("k1", Some("C"), 0), ("k2", Some("D"), 10)],
    )?;
    assert_eq!(
        outputs(&mut driver, OUT, &StringSerde)?,
        kvt(&[("k1", s("A+C"), 5), ("k2", s("B+D"), 10)])
    );
    Ok(())
}

// CogroupedKStreamImplTest#shouldNameProcessorsAndStoreBasedOnNamedParameter
#[test]
fn should_name_processors_and_store_based_on_named_parameter() -> Result {
    // Kafka Streams compares `describe()`'s text; the names and the grouping in one
    // sub-topology are what carries over.
    let builder = StreamsBuilder::new();
    let two = grouped(&builder, "two");
    let table = grouped(&builder, "one")
        .cogroup(append)
        .cogroup(&two, append)
        .named("test")
        .aggregate(
            String::new,
            Materialized::with(StringSerde, StringSerde).named("store"),
        );
    to_out(&table);
    let topology = builder.build()?;
    let subs = topology.sub_topologies();
    assert_eq!(subs.len(), 1, "{subs:?}");
    for node in [
        "test-cogroup-agg-0",
        "test-cogroup-agg-1",
        "test-cogroup-merge",
    ] {
        assert!(subs[0].iter().any(|n| n == node), "{node} in {subs:?}");
    }
    assert!(topology.store_names().iter().any(|n| n == "store"));
    Ok(())
}

// CogroupedKStreamImplTest#shouldNameRepartitionTopic
#[test]
fn should_name_repartition_topic() -> Result {
    // Kafka Streams inserts the repartition itself after `map` (named by `Grouped.as`);
    // eosflow asks for it (`repartition(Grouped)`, or `group_by`): same topic, same result.
    let builder = StreamsBuilder::new();
    let one = builder
        .stream("one", Consumed::with(StringSerde, StringSerde))
        .map(|k, v| (v.clone(), k.cloned().unwrap_or_default()))
        .repartition(Grouped::with(StringSerde, StringSerde).named("repartition-test"))
        .group_by_key();
    let two = grouped(&builder, "two");
    let table = one
        .cogroup(append)
        .cogroup(&two, append)
        .aggregate(String::new, Materialized::with(StringSerde, StringSerde));
    to_out(&table);
    let topology = builder.build()?;
    assert_eq!(
        topology.repartition_topics_for("app"),
        vec![s("app-repartition-test-repartition")]
    );
    assert_eq!(topology.sub_topologies().len(), 2);
    Ok(())
}

// CogroupedKStreamImplTest#shouldInsertRepartitionsTopicForUpstreamKeyModification
#[test]
fn should_insert_repartitions_topic_for_upstream_key_modification() -> Result {
    // Kafka Streams inserts a repartition topic for a `groupByKey` after `map`; eosflow does
    // not repartition behind the user's back: `build()` fails and names the stream
    // (documented in docs/dsl.md, "Re-keying and repartitioning").
    let builder = StreamsBuilder::new();
    let one = builder
        .stream("one", Consumed::with(StringSerde, StringSerde))
        .map(|k, v| (v.clone(), k.cloned().unwrap_or_default()))
        .group_by_key();
    let two = grouped(&builder, "two");
    let table = one
        .cogroup(append)
        .cogroup(&two, append)
        .named("test")
        .aggregate(
            String::new,
            Materialized::with(StringSerde, StringSerde).named("store"),
        );
    to_out(&table);
    let err = builder
        .build()
        .err()
        .ok_or("a group_by_key after map was accepted")?;
    assert!(err.to_string().contains("repartition"), "{err}");
    Ok(())
}

// CogroupedKStreamImplTest#shouldInsertRepartitionsTopicForCogroupsUsedTwice
#[test]
fn should_insert_repartitions_topic_for_cogroups_used_twice() -> Result {
    let builder = StreamsBuilder::new();
    let one = builder
        .stream("one", Consumed::with(StringSerde, StringSerde))
        .map(|k, v| (v.clone(), k.cloned().unwrap_or_default()))
        .repartition(Grouped::with(StringSerde, StringSerde).named("foo"))
        .group_by_key();
    let cogrouped = one.cogroup(append);
    let first = cogrouped.aggregate(String::new, Materialized::with(StringSerde, StringSerde));
    let second = cogrouped.aggregate(String::new, Materialized::with(StringSerde, StringSerde));
    assert_ne!(first.store().name(), second.store().name());
    drop(cogrouped);
    let topology = builder.build()?;
    // One repartition topic read by both aggregations, each with its own store.
    assert_eq!(
        topology.repartition_topics_for("app"),
        vec![s("app-foo-repartition")]
    );
    let stores: Vec<_> = topology
        .store_names()
        .iter()
        .filter(|n| n.starts_with("COGROUPKSTREAM-AGGREGATE-STATE-STORE-"))
        .collect();
    assert_eq!(stores.len(), 2, "{stores:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// RepartitionTopicNamingTest. Kafka Streams counts the `-repartition` sinks of
// `describe()`'s text; here `Topology::repartition_topics_for`. Kafka Streams repartitions a
// `groupByKey` after `selectKey` itself; eosflow asks for `repartition(Grouped)` (or
// `group_by`) there, with the same name.

/// The repartition topics of `builder`'s topology under application `app`.
fn repartitions(builder: StreamsBuilder) -> Result<Vec<String>> {
    Ok(builder.build()?.repartition_topics_for("app"))
}

/// `topic` re-keyed by `selectKey((k, v) -> k)` and repartitioned as `name`, grouped by key.
fn regrouped<'b>(
    builder: &'b StreamsBuilder,
    topic: &str,
    name: &str,
) -> eosflow::dsl::KGroupedStream<'b, String, String> {
    builder
        .stream(topic, Consumed::with(StringSerde, StringSerde))
        .select_key(|k, _| k.cloned().unwrap_or_default())
        .repartition(Grouped::with(StringSerde, StringSerde).named(name))
        .group_by_key()
}

fn ms(n: u64) -> std::time::Duration {
    std::time::Duration::from_millis(n)
}

/// Two windowed counts (10 and 30 ms) of one grouped stream, to `output-one` and `output-two`.
fn two_windowed_counts(grouped: &eosflow::dsl::KGroupedStream<'_, String, String>) {
    use eosflow::topology::windows::{TimeWindows, WindowedSerde};
    for (size, out) in [(10, "output-one"), (30, "output-two")] {
        grouped
            .windowed_by(TimeWindows::of_size_no_grace(ms(size)))
            .count(Materialized::with(StringSerde, I64Serde))
            .to_stream()
            .to(
                out,
                Produced::with(WindowedSerde::new(StringSerde), I64Serde),
            );
    }
}

// RepartitionTopicNamingTest#shouldFailWithSameRepartitionTopicName
#[test]
fn should_fail_with_same_repartition_topic_name() {
    let builder = StreamsBuilder::new();
    for topic in ["topic", "topicII"] {
        regrouped(&builder, topic, "grouping").count(Materialized::with(StringSerde, I64Serde));
    }
    assert!(builder.build().is_err(), "two repartitions named grouping");
}

// RepartitionTopicNamingTest#shouldNotFailWithSameRepartitionTopicNameUsingSameKGroupedStream
#[test]
fn should_not_fail_with_same_repartition_topic_name_using_same_k_grouped_stream() -> Result {
    let builder = StreamsBuilder::new();
    two_windowed_counts(&regrouped(&builder, "topic", "grouping"));
    assert_eq!(repartitions(builder)?, vec![s("app-grouping-repartition")]);
    Ok(())
}

// RepartitionTopicNamingTest#shouldNotFailWithSameRepartitionTopicNameUsingSameTimeWindowStream
#[test]
fn should_not_fail_with_same_repartition_topic_name_using_same_time_window_stream() -> Result {
    use eosflow::topology::windows::{TimeWindows, WindowedSerde};
    let builder = StreamsBuilder::new();
    let grouped = regrouped(&builder, "topic", "grouping");
    let windowed = grouped.windowed_by(TimeWindows::of_size_no_grace(ms(10)));
    let out = || Produced::with(WindowedSerde::new(StringSerde), I64Serde);
    windowed
        .count(Materialized::with(StringSerde, I64Serde))
        .to_stream()
        .to("output-one", out());
    windowed
        .reduce(|a, b| a + b, Materialized::with(StringSerde, StringSerde))
        .to_stream()
        .to(
            "output-two",
            Produced::with(WindowedSerde::new(StringSerde), StringSerde),
        );
    grouped
        .windowed_by(TimeWindows::of_size_no_grace(ms(30)))
        .count(Materialized::with(StringSerde, I64Serde))
        .to_stream()
        .to("output-two", out());
    assert_eq!(repartitions(builder)?, vec![s("app-grouping-repartition")]);
    Ok(())
}

// RepartitionTopicNamingTest#shouldNotFailWithSameRepartitionTopicNameUsingSameSessionWindowStream
#[test]
fn should_not_fail_with_same_repartition_topic_name_using_same_session_window_stream() -> Result {
    use eosflow::topology::windows::{SessionWindows, TimeWindows, WindowedSerde};
    let builder = StreamsBuilder::new();
    let grouped = regrouped(&builder, "topic", "grouping");
    let sessions =
        grouped.windowed_by_session(SessionWindows::with_inactivity_gap_no_grace(ms(10)));
    let out = || Produced::with(WindowedSerde::new(StringSerde), I64Serde);
    sessions
        .count(Materialized::with(StringSerde, I64Serde))
        .to_stream()
        .to("output-one", out());
    sessions
        .reduce(|a, b| a + b, Materialized::with(StringSerde, StringSerde))
        .to_stream()
        .to(
            "output-two",
            Produced::with(WindowedSerde::new(StringSerde), StringSerde),
        );
    grouped
        .windowed_by(TimeWindows::of_size_no_grace(ms(30)))
        .count(Materialized::with(StringSerde, I64Serde))
        .to_stream()
        .to("output-two", out());
    assert_eq!(repartitions(builder)?, vec![s("app-grouping-repartition")]);
    Ok(())
}

/// `table("topic").groupBy(KeyValue::pair, grouped)`, counted and reduced.
fn grouped_table_twice(grouped: Grouped<String, String>) -> Result<Vec<String>> {
    let builder = StreamsBuilder::new();
    let by = strings("topic", &builder).group_by(|k, v| Some((k.clone(), v.clone())), grouped);
    by.count(Materialized::with(StringSerde, I64Serde))
        .to_stream()
        .to("output-count", Produced::with(StringSerde, I64Serde));
    by.reduce(
        |_, v| v.clone(),
        |_, v| v.clone(),
        Materialized::with(StringSerde, StringSerde),
    )
    .to_stream()
    .to("output-reduce", Produced::with(StringSerde, StringSerde));
    repartitions(builder)
}

// RepartitionTopicNamingTest#shouldNotFailWithSameRepartitionTopicNameUsingSameKGroupedTable
#[test]
fn should_not_fail_with_same_repartition_topic_name_using_same_k_grouped_table() -> Result {
    let topics = grouped_table_twice(Grouped::with(StringSerde, StringSerde).named("grouping"))?;
    assert_eq!(topics, vec![s("app-grouping-repartition")]);
    Ok(())
}

// RepartitionTopicNamingTest#shouldNotReuseRepartitionNodeWithUnnamedRepartitionTopics
#[test]
fn should_not_reuse_repartition_node_with_unnamed_repartition_topics() -> Result {
    // Kafka Streams: 2 repartition topics (one per aggregation of the grouped stream, each
    // inserted by the aggregation). eosflow repartitions where the user asks, once, and both
    // aggregations read that topic: 1 (same results, one topic fewer).
    let builder = StreamsBuilder::new();
    let grouped = builder
        .stream("topic", Consumed::with(StringSerde, StringSerde))
        .select_key(|k, _| k.cloned().unwrap_or_default())
        .repartition(Grouped::with(StringSerde, StringSerde))
        .group_by_key();
    two_windowed_counts(&grouped);
    let topics = repartitions(builder)?;
    assert_eq!(topics.len(), 1, "{topics:?}");
    Ok(())
}

// RepartitionTopicNamingTest#shouldNotReuseRepartitionNodeWithUnnamedRepartitionTopicsKGroupedTable
#[test]
fn should_not_reuse_repartition_node_with_unnamed_repartition_topics_k_grouped_table() -> Result {
    let topics = grouped_table_twice(Grouped::with(StringSerde, StringSerde))?;
    assert_eq!(topics.len(), 2, "{topics:?}");
    Ok(())
}

// RepartitionTopicNamingTest#shouldNotFailWithSameRepartitionTopicNameUsingSameKGroupedStreamOptimizationsOn
#[test]
fn should_not_fail_with_same_repartition_topic_name_using_same_k_grouped_stream_optimizations_on(
) -> Result {
    // eosflow has no topology optimizer: the topology is the one without it, already one topic.
    let builder = StreamsBuilder::new();
    two_windowed_counts(&regrouped(&builder, "topic", "grouping"));
    assert_eq!(repartitions(builder)?.len(), 1);
    Ok(())
}

// RepartitionTopicNamingTest#shouldPassWithSameRepartitionTopicNameUsingSameKGroupedStreamOptimized
#[test]
fn should_pass_with_same_repartition_topic_name_using_same_k_grouped_stream_optimized() -> Result {
    let builder = StreamsBuilder::new();
    two_windowed_counts(&regrouped(&builder, "topic", "grouping"));
    builder.build()?;
    Ok(())
}

/// `topic` re-keyed by `selectKey((k, v) -> k + v)` (with `filter` and `mapValues` after it
/// when `other_operations`), then grouped through a repartition named `name`: by key, or by
/// `kvMapper` (`group_by`).
fn select_key_grouped<'b>(
    builder: &'b StreamsBuilder,
    name: &str,
    other_operations: bool,
    by_key: bool,
) -> eosflow::dsl::KGroupedStream<'b, String, String> {
    let mut stream = builder
        .stream("topic", Consumed::with(StringSerde, StringSerde))
        .select_key(|k, v| format!("{}{v}", k.map_or("", String::as_str)));
    if other_operations {
        stream = stream.filter(|_, _| true).map_values(String::clone);
    }
    let grouped = Grouped::with(StringSerde, StringSerde).named(name);
    if by_key {
        stream.repartition(grouped).group_by_key()
    } else {
        stream.group_by(|k, _| k.cloned().unwrap_or_default(), grouped)
    }
}

/// What each `shouldKeepRepartitionTopicNameFor…` asserts: with and without other operations
/// before the grouping, the repartition topic keeps its name.
fn keeps_name(
    name: &str,
    by_key: bool,
    aggregate: impl Fn(eosflow::dsl::KGroupedStream<'_, String, String>),
) -> Result {
    for other_operations in [false, true] {
        let builder = StreamsBuilder::new();
        aggregate(select_key_grouped(&builder, name, other_operations, by_key));
        assert_eq!(
            repartitions(builder)?,
            vec![format!("app-{name}-repartition")]
        );
    }
    Ok(())
}

fn time_windowed_count(g: eosflow::dsl::KGroupedStream<'_, String, String>) {
    g.windowed_by(eosflow::topology::windows::TimeWindows::of_size_no_grace(
        ms(10),
    ))
    .count(Materialized::with(StringSerde, I64Serde));
}

fn session_count(g: eosflow::dsl::KGroupedStream<'_, String, String>) {
    g.windowed_by_session(
        eosflow::topology::windows::SessionWindows::with_inactivity_gap_no_grace(ms(10)),
    )
    .count(Materialized::with(StringSerde, I64Serde));
}

fn plain_count(g: eosflow::dsl::KGroupedStream<'_, String, String>) {
    g.count(Materialized::with(StringSerde, I64Serde));
}

// RepartitionTopicNamingTest#shouldKeepRepartitionTopicNameForGroupByKeyTimeWindows
#[test]
fn should_keep_repartition_topic_name_for_group_by_key_time_windows() -> Result {
    keeps_name("time-window-grouping", true, time_windowed_count)
}

// RepartitionTopicNamingTest#shouldKeepRepartitionTopicNameForGroupByTimeWindows
#[test]
fn should_keep_repartition_topic_name_for_group_by_time_windows() -> Result {
    // Kafka Streams' `groupBy` variant counts without windows; so does this one.
    keeps_name("time-window-grouping", false, plain_count)
}

// RepartitionTopicNamingTest#shouldKeepRepartitionTopicNameForGroupByKeyNoWindows
#[test]
fn should_keep_repartition_topic_name_for_group_by_key_no_windows() -> Result {
    keeps_name("kstream-grouping", true, plain_count)
}

// RepartitionTopicNamingTest#shouldKeepRepartitionTopicNameForGroupByNoWindows
#[test]
fn should_keep_repartition_topic_name_for_group_by_no_windows() -> Result {
    keeps_name("kstream-grouping", false, plain_count)
}

// RepartitionTopicNamingTest#shouldKeepRepartitionTopicNameForGroupByKeySessionWindows
#[test]
fn should_keep_repartition_topic_name_for_group_by_key_session_windows() -> Result {
    keeps_name("session-window-grouping", true, session_count)
}

// RepartitionTopicNamingTest#shouldKeepRepartitionTopicNameForGroupBySessionWindows
#[test]
fn should_keep_repartition_topic_name_for_group_by_session_windows() -> Result {
    keeps_name("session-window-grouping", false, session_count)
}

// RepartitionTopicNamingTest#shouldKeepRepartitionNameForGroupByKTable
#[test]
fn should_keep_repartition_name_for_group_by_k_table() -> Result {
    // The "other operations" variant filters the table first: eosflow filters a table that a
    // node forwards, so that table is `stream("topic").to_table(…)` rather than
    // `table("topic")`.
    let grouped = || Grouped::with(StringSerde, StringSerde).named("ktable-group-by");
    let builder = StreamsBuilder::new();
    strings("topic", &builder)
        .group_by(|k, v| Some((k.clone(), v.clone())), grouped())
        .count(Materialized::with(StringSerde, I64Serde));
    assert_eq!(
        repartitions(builder)?,
        vec![s("app-ktable-group-by-repartition")]
    );

    let builder = StreamsBuilder::new();
    builder
        .stream("topic", Consumed::with(StringSerde, StringSerde))
        .to_table(Materialized::with(StringSerde, StringSerde))
        .filter(|_, _| true, Materialized::with(StringSerde, StringSerde))
        .group_by(|k, v| Some((k.clone(), v.clone())), grouped())
        .count(Materialized::with(StringSerde, I64Serde));
    assert_eq!(
        repartitions(builder)?,
        vec![s("app-ktable-group-by-repartition")]
    );
    Ok(())
}
