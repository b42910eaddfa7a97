//! The DSL through the broker-free `TopologyTestDriver`: what a user of each operation would
//! notice in the outputs, the stores, the dead letters and the built topology.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{
    Consumed, Grouped, Materialized, Printed, ProcessorContext, Produced, Stores, StreamJoined,
    StreamProcessor, StreamsBuilder,
};
use crate::processor::{ProcessError, StoreHandle, Timer};
use crate::serdes::{I64Serde, JsonSerde, StringSerde};
use crate::testing::{DriverError, KeyValues, TestRecord, TopologyTestDriver};
use crate::topology::windows::{
    EmitStrategy, SessionWindows, SlidingWindows, TimeWindows, Windowed, WindowedSerde,
};
use crate::topology::{JoinWindows, TimestampExtractor, Topology, TopologyError, TypedRecord};

type Driver = TopologyTestDriver<Topology>;
type TestResult = Result<(), Box<dyn std::error::Error>>;

fn s(text: &str) -> String {
    text.to_string()
}

/// Pipes `key → value` (text) into `topic`, partition 0.
fn pipe(
    d: &mut Driver,
    topic: &str,
    key: Option<&str>,
    value: Option<&str>,
) -> Result<(), DriverError> {
    d.pipe(TestRecord::new(topic, key, value))
}

fn text_out(d: &mut Driver, topic: &str) -> Result<KeyValues<String, String>, DriverError> {
    d.read_output(topic, &StringSerde, &StringSerde)
}

fn count_out(d: &mut Driver, topic: &str) -> Result<KeyValues<String, i64>, DriverError> {
    d.read_output(topic, &StringSerde, &I64Serde)
}

fn kv<V>(k: &str, v: V) -> (Option<String>, Option<V>) {
    (Some(s(k)), Some(v))
}

/// Word count: lines in, each word's new count out after every line.
fn word_count() -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new();
    let counts = builder
        .stream("lines", Consumed::with(StringSerde, StringSerde))
        .flat_map_values(|line| words(line))
        .group_by(|_, w| w.clone(), Grouped::with(StringSerde, StringSerde))
        .count(Materialized::with(StringSerde, I64Serde).named("word-counts"));
    counts
        .to_stream()
        .to("word-counts", Produced::with(StringSerde, I64Serde));
    builder.build()
}

/// A line's words, in lower case.
fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_lowercase).collect()
}

#[test]
fn word_count_counts_each_word_across_partitions_in_a_changelogged_store() -> TestResult {
    let topology = word_count()?;
    // The repartition and the store are named after the operations that made them.
    assert_eq!(
        topology.repartition_topics_for("wc"),
        vec![s("wc-KSTREAM-REPARTITION-0000000002-repartition")]
    );
    assert_eq!(
        topology.changelog_topics("wc"),
        vec![s("wc-state-changelog"), s("wc-word-counts-changelog")]
    );
    let store = StoreHandle::new("word-counts", StringSerde, I64Serde);
    let mut d = TopologyTestDriver::new(topology)?;
    // Lines without keys, on two partitions: the repartition brings each word to one task.
    d.pipe(TestRecord::new("lines", None::<&str>, Some("The cat")).partition(0))?;
    d.pipe(TestRecord::new("lines", None::<&str>, Some("the hat")).partition(1))?;
    assert_eq!(
        count_out(&mut d, "word-counts")?,
        vec![kv("the", 1), kv("cat", 1), kv("the", 2), kv("hat", 1)]
    );
    assert_eq!(d.store_get(&store, &s("the"))?, Some(2));
    assert_eq!(
        d.read_raw_output("test-KSTREAM-REPARTITION-0000000002-repartition")
            .len(),
        4
    );
    assert!(d.pending_outputs().is_empty(), "{:?}", d.pending_outputs());
    Ok(())
}

#[test]
fn generated_names_are_kafka_streams_names_and_named_ones_win() -> TestResult {
    let builder = StreamsBuilder::new();
    let src = builder.stream("in", Consumed::with(StringSerde, StringSerde));
    src.filter(|_, _| true)
        .map_values(|v| v.len() as i64)
        .named("lengths")
        .to("out", Produced::with(StringSerde, I64Serde));
    src.group_by_key()
        .count(Materialized::with(StringSerde, I64Serde))
        .to_stream()
        .to(
            "counts",
            Produced::with(StringSerde, I64Serde).named("counts-sink"),
        );
    let t = builder.build()?;
    assert_eq!(
        t.sub_topologies(),
        vec![vec![
            s("KSTREAM-SOURCE-0000000000"),
            s("KSTREAM-FILTER-0000000001"),
            s("lengths"),
            s("KSTREAM-SINK-0000000003"),
            s("KSTREAM-AGGREGATE-0000000005"),
            s("KTABLE-TOSTREAM-0000000006"),
            s("counts-sink"),
        ]]
    );
    assert_eq!(
        t.store_names(),
        [s("KSTREAM-AGGREGATE-STATE-STORE-0000000004")]
    );
    Ok(())
}

#[test]
fn stateless_operations_transform_filter_and_fan_out() -> TestResult {
    let builder = StreamsBuilder::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let peeked = seen.clone();
    let orders = builder.stream("orders", Consumed::with(StringSerde, StringSerde));
    // `customer:item:amount`
    let parsed = orders.map(|id, order| {
        let mut parts = order.split(':');
        let customer = s(parts.next().unwrap_or_default());
        let amount: i64 = parts.nth(1).and_then(|a| a.parse().ok()).unwrap_or(0);
        (customer, (id.cloned().unwrap_or_default(), amount))
    });
    parsed
        .filter(|_, (_, amount)| *amount >= 100)
        .map_values(|(id, _)| id.clone())
        .to("large-orders", Produced::with(StringSerde, StringSerde));
    parsed
        .filter_not(|_, (_, amount)| *amount >= 100)
        .peek(move |k, _| peeked.lock().map(|mut s| s.push(k.cloned())).unwrap_or(()))
        .select_key(|_, (id, _)| id.clone())
        .map_values(|(_, amount)| *amount)
        .to("small-orders", Produced::with(StringSerde, I64Serde));
    orders
        .flat_map(|_, order| {
            order
                .split(':')
                .map(|p| (s(p), p.len() as i64))
                .collect::<Vec<_>>()
        })
        .to("parts", Produced::with(StringSerde, I64Serde));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    pipe(&mut d, "orders", Some("o1"), Some("ann:book:250"))?;
    pipe(&mut d, "orders", Some("o2"), Some("bob:pen:3"))?;
    assert_eq!(text_out(&mut d, "large-orders")?, vec![kv("ann", s("o1"))]);
    assert_eq!(count_out(&mut d, "small-orders")?, vec![kv("o2", 3)]);
    assert_eq!(
        *seen.lock().map_err(|e| e.to_string())?,
        vec![Some(s("bob"))]
    );
    let parts = count_out(&mut d, "parts")?;
    assert_eq!(parts.len(), 6);
    assert_eq!(parts[1], kv("book", 4));
    Ok(())
}

#[test]
fn outputs_keep_the_input_timestamp() -> TestResult {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(StringSerde, StringSerde))
        .flat_map_values(|v| v.chars().map(String::from).collect::<Vec<_>>())
        .map_values(|c| c.to_uppercase())
        .to("out", Produced::with(StringSerde, StringSerde));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    d.pipe(TestRecord::new("in", Some("k"), Some("ab")).timestamp(1_234))?;
    let out = d.read_raw_output("out");
    assert_eq!(out.len(), 2);
    for r in &out {
        assert_eq!(r.timestamp, Some(1_234));
    }
    assert_eq!(out[1].value_text(), "B");
    Ok(())
}

#[test]
fn tombstones_pass_key_keeping_operations_and_not_re_keying_ones() -> TestResult {
    let builder = StreamsBuilder::new();
    let src = builder.stream("in", Consumed::with(StringSerde, StringSerde));
    src.filter(|_, v| v.len() > 3)
        .map_values(|v| v.len() as i64)
        .to("lengths", Produced::with(StringSerde, I64Serde));
    src.select_key(|_, v| v.clone())
        .to("rekeyed", Produced::with(StringSerde, StringSerde));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    pipe(&mut d, "in", Some("k"), None)?;
    // The delete reaches the key-keeping output as a delete, without calling the closures.
    assert_eq!(count_out(&mut d, "lengths")?, vec![(Some(s("k")), None)]);
    assert!(text_out(&mut d, "rekeyed")?.is_empty());
    pipe(&mut d, "in", None, Some("hello"))?;
    assert_eq!(count_out(&mut d, "lengths")?, vec![(None, Some(5))]);
    assert_eq!(text_out(&mut d, "rekeyed")?, vec![kv("hello", s("hello"))]);
    Ok(())
}

#[test]
fn aggregations_dead_letter_records_without_a_key_or_a_value() -> TestResult {
    let builder = StreamsBuilder::new();
    let src = builder.stream("in", Consumed::with(StringSerde, StringSerde));
    src.to("copy", Produced::with(StringSerde, StringSerde));
    let counts = src
        .group_by_key()
        .count(Materialized::with(StringSerde, I64Serde).named("counts"));
    let store = counts.store().clone();
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    pipe(&mut d, "in", Some("k"), None)?;
    pipe(&mut d, "in", None, Some("v"))?;
    let dead = d.read_raw_output("in.DLT");
    assert_eq!(dead.len(), 2);
    for r in &dead {
        assert_eq!(r.dlt_class(), Some("permanent"));
        let reason = r.dlt_reason().unwrap_or_default();
        assert!(reason.contains("without a key or a value"), "{reason}");
        assert!(reason.contains("store counts"), "{reason}");
    }
    // The record failed as a whole: the copy written before the count failed is discarded.
    assert!(text_out(&mut d, "copy")?.is_empty());
    pipe(&mut d, "in", Some("k"), Some("v"))?;
    assert_eq!(d.store_get(&store, &s("k"))?, Some(1));
    assert_eq!(text_out(&mut d, "copy")?, vec![kv("k", s("v"))]);
    Ok(())
}

#[test]
fn a_failing_closure_discards_what_the_record_did_and_takes_the_retry_or_dlt_path() -> TestResult {
    let builder = StreamsBuilder::new();
    let counts = builder
        .stream("words", Consumed::with(StringSerde, StringSerde))
        .flat_map_values(|line| line.split(' ').map(String::from).collect::<Vec<_>>())
        .try_map_values(|w| match w.as_str() {
            "busy" => Err(ProcessError::transient("the dictionary is busy")),
            "bad" => Err(ProcessError::permanent("not a word")),
            _ => Ok(w.clone()),
        })
        .group_by_key()
        .count(Materialized::with(StringSerde, I64Serde).named("per-author"));
    counts
        .to_stream()
        .to("counts", Produced::with(StringSerde, I64Serde));
    let store = counts.store().clone();
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    pipe(&mut d, "words", Some("ann"), Some("good bad"))?;
    // The first word was counted and forwarded before the second failed: both discarded.
    assert!(count_out(&mut d, "counts")?.is_empty());
    assert_eq!(d.store_get(&store, &s("ann"))?, None);
    let dead = d.read_raw_output("words.DLT");
    assert_eq!(dead[0].dlt_reason(), Some("not a word"));
    pipe(&mut d, "words", Some("ann"), Some("good busy"))?;
    assert!(count_out(&mut d, "counts")?.is_empty());
    assert_eq!(d.read_raw_output("words.retry.1").len(), 1);
    // `ann` now waits behind its record in the retry ladder; another author is counted.
    pipe(&mut d, "words", Some("bob"), Some("good good"))?;
    assert_eq!(
        count_out(&mut d, "counts")?,
        vec![kv("bob", 1), kv("bob", 2)]
    );
    assert_eq!(d.store_get(&store, &s("bob"))?, Some(2));
    assert_eq!(d.store_get(&store, &s("ann"))?, None);
    Ok(())
}

/// Each `try_` variant on its own input topic: an `Err` dead-letters the input with its message.
#[test]
fn every_try_variant_dead_letters_its_input_with_the_error() -> TestResult {
    fn no(what: &str) -> ProcessError {
        ProcessError::permanent(format!("{what} says no"))
    }
    let builder = StreamsBuilder::new();
    let text = || Consumed::with(StringSerde, StringSerde);
    let out = || Produced::with(StringSerde, StringSerde);
    builder
        .stream("filter", text())
        .try_filter(|_, _| Err(no("filter")))
        .to("o1", out());
    builder
        .stream("map", text())
        .try_map(|_, _| Err::<(String, String), _>(no("map")))
        .to("o2", out());
    builder
        .stream("with-key", text())
        .try_map_values_with_key(|_, _| Err::<String, _>(no("with-key")))
        .to("o3", out());
    builder
        .stream("flat", text())
        .try_flat_map_values(|_| Err::<Vec<String>, _>(no("flat")))
        .to("o4", out());
    let branches = builder
        .stream("branch", text())
        .split()
        .try_branch(|_, _| Err(no("branch")))
        .default_branch();
    branches[1].to("o5", out());
    builder
        .stream("aggregate", text())
        .group_by_key()
        .try_aggregate(
            || Ok(0),
            |_, _, _| Err(no("aggregate")),
            Materialized::with(StringSerde, I64Serde),
        );
    builder.stream("init", text()).group_by_key().try_aggregate(
        || Err(no("init")),
        |_, _, n: i64| Ok(n),
        Materialized::with(StringSerde, I64Serde),
    );
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    for topic in [
        "filter",
        "map",
        "with-key",
        "flat",
        "branch",
        "aggregate",
        "init",
    ] {
        pipe(&mut d, topic, Some("k"), Some("v"))?;
        let dead = d.read_raw_output(&format!("{topic}.DLT"));
        assert_eq!(dead.len(), 1, "{topic}");
        assert_eq!(
            dead[0].dlt_reason(),
            Some(format!("{topic} says no").as_str())
        );
    }
    assert!(d.pending_outputs().is_empty(), "{:?}", d.pending_outputs());
    Ok(())
}

#[test]
fn a_panicking_closure_is_a_permanent_failure() -> TestResult {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(StringSerde, StringSerde))
        .map_values(|v| {
            assert!(!v.is_empty(), "empty value");
            v.clone()
        })
        .to("out", Produced::with(StringSerde, StringSerde));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    pipe(&mut d, "in", Some("k"), Some(""))?;
    assert!(text_out(&mut d, "out")?.is_empty());
    assert_eq!(
        d.read_raw_output("in.DLT")[0].dlt_class(),
        Some("permanent")
    );
    Ok(())
}

#[test]
fn reduce_and_aggregate_keep_their_state_in_the_store() -> TestResult {
    let builder = StreamsBuilder::new();
    let amounts = builder.stream("amounts", Consumed::with(StringSerde, I64Serde));
    let grouped = amounts.group_by_key();
    let max = grouped.reduce(
        |a, b| a.max(*b),
        Materialized::with(StringSerde, I64Serde).named("max"),
    );
    let stats = grouped.aggregate(
        || (0_i64, 0_i64),
        |_, amount, (n, sum)| (n + 1, sum + amount),
        Materialized::with(StringSerde, JsonSerde::<(i64, i64)>::new()).named("stats"),
    );
    stats
        .to_stream()
        .map_values(|(n, sum)| format!("{n} for {sum}"))
        .to("stats", Produced::with(StringSerde, StringSerde));
    let (max, stats) = (max.store().clone(), stats.store().clone());
    let topology = builder.build()?;
    assert_eq!(
        topology.changelog_topics("app"),
        vec![
            s("app-state-changelog"),
            s("app-max-changelog"),
            s("app-stats-changelog")
        ]
    );
    let mut d = TopologyTestDriver::new(topology)?;
    for (k, a) in [("a", 5), ("b", 1), ("a", 9), ("a", 2)] {
        d.pipe_input("amounts", &StringSerde, &I64Serde, &s(k), &a)?;
    }
    assert_eq!(d.store_get(&max, &s("a"))?, Some(9));
    assert_eq!(
        d.store_entries(&stats)?,
        vec![(s("a"), (3, 16)), (s("b"), (1, 1))]
    );
    assert_eq!(
        text_out(&mut d, "stats")?.last(),
        Some(&kv("a", s("3 for 16")))
    );
    Ok(())
}

#[test]
fn group_by_key_after_a_key_change_is_rejected_at_build_until_repartitioned() -> TestResult {
    let builder = StreamsBuilder::new();
    builder
        .stream("orders", Consumed::with(StringSerde, StringSerde))
        .select_key(|_, v| v.clone())
        .named("by-item")
        .group_by_key()
        .count(Materialized::with(StringSerde, I64Serde));
    let err = builder
        .build()
        .expect_err("a key change before group_by_key");
    let text = err.to_string();
    assert!(text.contains("group_by_key after by-item"), "{text}");
    assert!(text.contains("repartition"), "{text}");

    let builder = StreamsBuilder::new();
    let items = builder
        .stream("orders", Consumed::with(StringSerde, StringSerde))
        .select_key(|_, v| v.clone())
        .repartition(Grouped::with(StringSerde, StringSerde).named("by-item"))
        .filter(|_, _| true)
        .group_by_key()
        .count(Materialized::with(StringSerde, I64Serde));
    let store = items.store().clone();
    let t = builder.build()?;
    assert_eq!(
        t.repartition_topics_for("shop"),
        vec![s("shop-by-item-repartition")]
    );
    assert_eq!(t.sub_topologies().len(), 2);
    let mut d = TopologyTestDriver::new(t)?;
    d.pipe(TestRecord::new("orders", Some("o1"), Some("pen")).partition(2))?;
    d.pipe(TestRecord::new("orders", Some("o2"), Some("pen")).partition(5))?;
    assert_eq!(d.store_get(&store, &s("pen"))?, Some(2));
    Ok(())
}

#[test]
fn build_reports_mistakes_by_name() {
    // Two nodes with one name.
    let builder = StreamsBuilder::new();
    let src = builder.stream("in", Consumed::with(StringSerde, StringSerde));
    src.filter(|_, _| true).named("same");
    src.filter(|_, _| false).named("same");
    let err = builder.build().expect_err("a name used twice").to_string();
    assert!(err.contains("node name \"same\" is used twice"), "{err}");

    // A stream of another builder merged in.
    let (one, two) = (StreamsBuilder::new(), StreamsBuilder::new());
    let a = one.stream("a", Consumed::with(StringSerde, StringSerde));
    let b = two.stream("b", Consumed::with(StringSerde, StringSerde));
    a.merge(&b)
        .to("out", Produced::with(StringSerde, StringSerde));
    let err = one.build().expect_err("a foreign stream").to_string();
    assert!(err.contains("another StreamsBuilder"), "{err}");

    // Nothing read.
    let err = StreamsBuilder::new()
        .build()
        .expect_err("no source")
        .to_string();
    assert!(err.contains("no source"), "{err}");
}

/// A chain through every kind of edge (retyped keys and values, a repartition, a store, a
/// window, a merge, a split): no record reaches a node with other types than it was built
/// for, so nothing is dead-lettered.
#[test]
fn typed_edges_never_fail_a_record_at_run_time() -> TestResult {
    let builder = StreamsBuilder::new();
    let a = builder.stream("a", Consumed::with(StringSerde, StringSerde));
    let b = builder
        .stream("b", Consumed::with(I64Serde, StringSerde))
        .map(|k, v| (format!("{}", k.copied().unwrap_or(-1)), v.clone()));
    let merged = a
        .merge(&b)
        .repartition(Grouped::with(StringSerde, StringSerde));
    let branches = merged
        .split()
        .branch(|_, v| v.starts_with('x'))
        .default_branch();
    for branch in &branches {
        branch
            .map_values(|v| v.len() as i64)
            .group_by(|_, n| *n, Grouped::with(I64Serde, I64Serde))
            .windowed_by(TimeWindows::of_size_no_grace(Duration::from_secs(10)))
            .aggregate(
                Vec::new,
                |_, n, mut all: Vec<i64>| {
                    all.push(*n);
                    all
                },
                Materialized::with(I64Serde, JsonSerde::new()),
            )
            .to_stream()
            .map(|w, all| (w.map(|w| w.key).unwrap_or(0), all.len() as i64))
            .to(
                format!("out-{}", branch.name()),
                Produced::with(I64Serde, I64Serde),
            );
    }
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    pipe(&mut d, "a", Some("k"), Some("xyz"))?;
    pipe(&mut d, "a", Some("k"), Some("hello"))?;
    d.pipe(TestRecord::new("b", Some(7_i64.to_be_bytes()), Some("x")))?;
    let outs = d.pending_outputs();
    assert!(outs.keys().all(|t| !t.ends_with(".DLT")), "{outs:?}");
    let total: usize = outs
        .iter()
        .filter(|(t, _)| t.starts_with("out-"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(total, 3, "{outs:?}");
    Ok(())
}

#[test]
fn a_repartitioned_stream_merges_with_a_source_keyed_the_same_way() -> TestResult {
    let builder = StreamsBuilder::new();
    let direct = builder.stream("by-user", Consumed::with(StringSerde, StringSerde));
    let rekeyed = builder
        .stream("by-page", Consumed::with(StringSerde, StringSerde))
        .select_key(|_, user| user.clone())
        .repartition(Grouped::with(StringSerde, StringSerde).named("page-by-user"));
    let visits = direct
        .merge(&rekeyed)
        .group_by_key()
        .count(Materialized::with(StringSerde, I64Serde).named("visits"));
    let store = visits.store().clone();
    let t = builder.build()?;
    // The merge joins the repartition's reader to the source's sub-topology.
    assert_eq!(t.sub_topologies().len(), 2);
    let mut d = TopologyTestDriver::new(t)?;
    pipe(&mut d, "by-user", Some("ann"), Some("/home"))?;
    d.pipe(TestRecord::new("by-page", Some("/cart"), Some("ann")).partition(3))?;
    assert_eq!(d.store_get(&store, &s("ann"))?, Some(2));
    Ok(())
}

#[test]
fn split_sends_each_record_to_its_first_matching_branch() -> TestResult {
    let builder = StreamsBuilder::new();
    let src = builder.stream("in", Consumed::with(StringSerde, I64Serde));
    let with_default = src
        .split()
        .branch(|_, n| *n < 0)
        .branch(|_, n| *n < 10)
        .default_branch();
    assert_eq!(with_default.len(), 3);
    for (b, topic) in with_default.iter().zip(["negative", "small", "rest"]) {
        b.to(topic, Produced::with(StringSerde, I64Serde));
    }
    let only = src.split().branch(|_, n| n % 2 == 0).no_default_branch();
    only[0]
        .named("even")
        .to("even", Produced::with(StringSerde, I64Serde));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    for n in [-4, 3, 42, -1] {
        d.pipe_input("in", &StringSerde, &I64Serde, &s("k"), &n)?;
    }
    assert_eq!(
        count_out(&mut d, "negative")?,
        vec![kv("k", -4), kv("k", -1)]
    );
    assert_eq!(count_out(&mut d, "small")?, vec![kv("k", 3)]);
    assert_eq!(count_out(&mut d, "rest")?, vec![kv("k", 42)]);
    assert_eq!(count_out(&mut d, "even")?, vec![kv("k", -4), kv("k", 42)]);
    assert!(d.pending_outputs().is_empty(), "{:?}", d.pending_outputs());
    Ok(())
}

fn click(d: &mut Driver, user: &str, ms: i64) -> Result<(), DriverError> {
    d.pipe(TestRecord::new("clicks", Some(user), Some("/")).timestamp(ms))
}

#[test]
fn windowed_count_emits_on_update_or_once_on_close_and_dead_letters_late_records() -> TestResult {
    let minute = TimeWindows::of_size_with_grace(Duration::from_secs(60), Duration::from_secs(10));
    let windowed = WindowedSerde::new(StringSerde);
    let builder = StreamsBuilder::new();
    let per_user = builder
        .stream("clicks", Consumed::with(StringSerde, StringSerde))
        .group_by_key()
        .windowed_by(minute);
    per_user
        .count(Materialized::with(StringSerde, I64Serde).named("updates"))
        .to_stream()
        .to("updates", Produced::with(windowed, I64Serde));
    let finals = per_user
        .emit_strategy(EmitStrategy::OnWindowClose)
        .count(Materialized::with(StringSerde, I64Serde).named("finals"));
    finals
        .to_stream()
        .to("finals", Produced::with(windowed, I64Serde));
    let store = finals.store().clone();
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    click(&mut d, "ann", 1_000)?;
    click(&mut d, "ann", 59_000)?;
    click(&mut d, "bob", 65_000)?;
    assert_eq!(d.window_fetch_range(&store, &s("ann"), 0, 0)?.len(), 1);
    click(&mut d, "ann", 30_000)?; // within grace
    let first = |k: &str| Some(Windowed::new(s(k), 0, 60_000));
    let updates = d.read_output("updates", &windowed, &I64Serde)?;
    assert_eq!(updates.len(), 4);
    assert_eq!(updates[3], (first("ann"), Some(3)));
    assert!(d.read_output("finals", &windowed, &I64Serde)?.is_empty());
    click(&mut d, "bob", 70_000)?; // stream time 70 s: the first minute closes
    assert_eq!(
        d.read_output("finals", &windowed, &I64Serde)?,
        vec![(first("ann"), Some(3))]
    );
    assert_eq!(d.read_output("updates", &windowed, &I64Serde)?.len(), 1);
    click(&mut d, "ann", 2_000)?; // too late: dead-lettered once, counted by neither
    let dead = d.read_raw_output("clicks.DLT");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dlt_class(), Some("late-record"));
    assert!(d.read_output("updates", &windowed, &I64Serde)?.is_empty());
    Ok(())
}

#[test]
fn hopping_windows_count_a_record_in_each_of_its_windows() -> TestResult {
    let hopping =
        TimeWindows::of_size_no_grace(Duration::from_secs(10)).advance_by(Duration::from_secs(5));
    let builder = StreamsBuilder::new();
    builder
        .stream("clicks", Consumed::with(StringSerde, StringSerde))
        .group_by_key()
        .windowed_by(hopping)
        .count(Materialized::with(StringSerde, I64Serde))
        .to_stream()
        .map(|w, n| {
            (
                w.map(|w| format!("{}@{}", w.key, w.window.start))
                    .unwrap_or_default(),
                *n,
            )
        })
        .to("out", Produced::with(StringSerde, I64Serde));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    click(&mut d, "ann", 7_000)?;
    assert_eq!(
        count_out(&mut d, "out")?,
        vec![kv("ann@0", 1), kv("ann@5000", 1)]
    );
    Ok(())
}

#[test]
fn a_windowed_result_is_formatted_with_its_key_and_keeps_it() -> TestResult {
    let windowed = WindowedSerde::new(StringSerde);
    let builder = StreamsBuilder::new();
    builder
        .stream("clicks", Consumed::with(StringSerde, StringSerde))
        .group_by_key()
        .windowed_by(TimeWindows::of_size_no_grace(Duration::from_secs(60)))
        .count(Materialized::with(StringSerde, I64Serde))
        .to_stream()
        .map_values_with_key(|w, n| match w {
            Some(w) => format!("{}: {n} in [{}, {})", w.key, w.window.start, w.window.end),
            None => format!("{n}"),
        })
        .to("text", Produced::with(windowed, StringSerde));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    click(&mut d, "ann", 61_000)?;
    let out = d.read_output("text", &windowed, &StringSerde)?;
    let minute = Windowed::new(s("ann"), 60_000, 120_000);
    assert_eq!(
        out,
        vec![(Some(minute), Some(s("ann: 1 in [60000, 120000)")))]
    );
    Ok(())
}

#[test]
fn session_windows_merge_a_users_clicks_closer_than_the_gap() -> TestResult {
    let gap = SessionWindows::with_inactivity_gap_no_grace(Duration::from_secs(30));
    let windowed = WindowedSerde::new(StringSerde);
    let builder = StreamsBuilder::new();
    builder
        .stream("clicks", Consumed::with(StringSerde, StringSerde))
        .group_by_key()
        .windowed_by_session(gap)
        .emit_strategy(EmitStrategy::OnWindowClose)
        .count(Materialized::with(StringSerde, I64Serde).named("sessions"))
        .to_stream()
        .to("sessions", Produced::with(windowed, I64Serde));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    for ms in [0, 20_000, 45_000, 200_000] {
        click(&mut d, "ann", ms)?;
    }
    let out = d.read_output("sessions", &windowed, &I64Serde)?;
    assert_eq!(
        out,
        vec![(Some(Windowed::new(s("ann"), 0, 45_000)), Some(3))]
    );
    Ok(())
}

/// `windowed_by_sliding` builds the same node as `WindowedAggregate::sliding`: an aggregate on
/// update over the windows of records within 10 s of each other, in a named windowed store.
#[test]
fn sliding_windows_aggregate_the_records_within_the_time_difference() -> TestResult {
    let ten = SlidingWindows::of_time_difference_no_grace(Duration::from_secs(10));
    let windowed = WindowedSerde::new(StringSerde);
    let builder = StreamsBuilder::new();
    builder
        .stream("clicks", Consumed::with(StringSerde, StringSerde))
        .group_by_key()
        .windowed_by_sliding(ten)
        .aggregate(
            String::new,
            |_, v: &String, a| a + v,
            Materialized::with(StringSerde, StringSerde).named("within-10s"),
        )
        .to_stream()
        .to("within", Produced::with(windowed, StringSerde));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    for (ms, v) in [(100_000, "a"), (104_000, "b"), (120_000, "c")] {
        d.pipe(TestRecord::new("clicks", Some("ann"), Some(v)).timestamp(ms))?;
    }
    let out = d.read_output("within", &windowed, &StringSerde)?;
    let w = |start, end| Some(Windowed::new(s("ann"), start, end));
    assert_eq!(
        out,
        vec![
            (w(90_000, 100_000), Some(s("a"))),
            (w(100_001, 110_001), Some(s("b"))),
            (w(94_000, 104_000), Some(s("ab"))),
            (w(110_000, 120_000), Some(s("c"))),
        ]
    );
    Ok(())
}

#[test]
fn a_timestamp_extractor_sets_the_event_time_windows_use() -> TestResult {
    let builder = StreamsBuilder::new();
    let consumed = Consumed::with(StringSerde, StringSerde)
        .named("clicks")
        .with_timestamp_extractor(TimestampExtractor::Header(s("at")));
    builder
        .stream("clicks", consumed)
        .group_by_key()
        .windowed_by(TimeWindows::of_size_no_grace(Duration::from_secs(60)))
        .count(Materialized::with(StringSerde, I64Serde))
        .to_stream()
        .map(|w, n| {
            (
                w.map(|w| w.window.start.to_string()).unwrap_or_default(),
                *n,
            )
        })
        .to("out", Produced::with(StringSerde, I64Serde));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    d.pipe(
        TestRecord::new("clicks", Some("ann"), Some("/"))
            .timestamp(1_000)
            .header("at", "125000"),
    )?;
    assert_eq!(count_out(&mut d, "out")?, vec![kv("120000", 1)]);
    Ok(())
}

/// Pipes `key → value` (text) into `topic`, partition 0, at `ms`.
fn pipe_at(
    d: &mut Driver,
    topic: &str,
    key: &str,
    value: &str,
    ms: i64,
) -> Result<(), DriverError> {
    d.pipe(TestRecord::new(topic, Some(key), Some(value)).timestamp(ms))
}

/// The values written to `topic` (text), in order.
fn values_out(d: &mut Driver, topic: &str) -> Result<Vec<String>, DriverError> {
    Ok(text_out(d, topic)?
        .into_iter()
        .filter_map(|(_, v)| v)
        .collect())
}

#[test]
fn a_stream_joins_the_row_its_key_has_in_a_table_read_from_a_topic() -> TestResult {
    let builder = StreamsBuilder::new();
    let users = builder.table("users", Consumed::with(StringSerde, StringSerde));
    let views = builder.stream("views", Consumed::with(StringSerde, StringSerde));
    views
        .join_table(&users, |page, name| format!("{page} by {name}"))
        .to("known", Produced::with(StringSerde, StringSerde));
    views
        .left_join_table(&users, |page, name| {
            format!("{page} by {}", name.map_or("someone", String::as_str))
        })
        .to("all", Produced::with(StringSerde, StringSerde));
    assert_eq!(users.name(), "users");
    assert_eq!(users.topic(), "users");
    let table = users.store().clone();
    let t = builder.build()?;
    assert_eq!(t.table_topics(), vec![s("users")]);
    // The topic is the table's changelog: no `<app>-users-changelog`.
    assert!(!t
        .changelog_topics("app")
        .contains(&s("app-users-changelog")));

    let mut d = TopologyTestDriver::new(t)?;
    pipe_at(&mut d, "views", "ann", "/home", 1)?;
    d.pipe_table_at(&table, &s("ann"), Some(&s("Ann")), 2)?; // joins nothing by itself
    pipe_at(&mut d, "views", "ann", "/cart", 3)?;
    d.pipe_table_at(&table, &s("ann"), None, 4)?; // a tombstone deletes the row
    pipe_at(&mut d, "views", "ann", "/exit", 5)?;
    pipe(&mut d, "views", None, Some("/anonymous"))?; // no key: no join
    assert_eq!(values_out(&mut d, "known")?, vec![s("/cart by Ann")]);
    let all = d.read_raw_output("all");
    let all: Vec<(String, Option<i64>)> =
        all.iter().map(|r| (r.value_text(), r.timestamp)).collect();
    assert_eq!(
        all,
        vec![
            (s("/home by someone"), Some(1)),
            (s("/cart by Ann"), Some(3)),
            (s("/exit by someone"), Some(5)),
        ]
    );
    assert_eq!(d.table_get(&table, &s("ann"))?, None);
    Ok(())
}

#[test]
fn a_table_join_after_a_key_change_is_rejected_at_build_until_repartitioned() -> TestResult {
    let builder = StreamsBuilder::new();
    let users = builder.table("users", Consumed::with(StringSerde, StringSerde));
    builder
        .stream("clicks", Consumed::with(StringSerde, StringSerde))
        .select_key(|_, user| user.clone())
        .named("by-user")
        .join_table(&users, |page, name| format!("{page}:{name}"))
        .to("out", Produced::with(StringSerde, StringSerde));
    let text = builder
        .build()
        .expect_err("a re-keyed table join")
        .to_string();
    assert!(
        text.contains("join_table of by-user with table users: the key of by-user was changed"),
        "{text}"
    );
    assert!(text.contains("repartition"), "{text}");

    // Repartitioned first: each click meets its user's row, whatever partition it came in on.
    let builder = StreamsBuilder::new();
    let users = builder.table("users", Consumed::with(StringSerde, StringSerde));
    builder
        .stream("clicks", Consumed::with(StringSerde, StringSerde))
        .select_key(|_, user| user.clone())
        .repartition(Grouped::with(StringSerde, StringSerde).named("by-user"))
        .join_table(&users, |user, name| format!("{user} is {name}"))
        .to("out", Produced::with(StringSerde, StringSerde));
    let table = users.store().clone();
    let t = builder.build()?;
    assert_eq!(
        t.repartition_topics_for("app"),
        vec![s("app-by-user-repartition")]
    );
    let mut d = TopologyTestDriver::new(t)?;
    d.pipe_table(&table, &s("u1"), Some(&s("Ann")))?;
    d.pipe(TestRecord::new("clicks", Some("c-1"), Some("u1")).partition(3))?;
    assert_eq!(text_out(&mut d, "out")?, vec![kv("u1", s("u1 is Ann"))]);
    Ok(())
}

#[test]
fn a_versioned_table_joins_the_row_valid_at_the_records_time() -> TestResult {
    let builder = StreamsBuilder::new();
    let prices = builder.versioned_table(
        "prices",
        Consumed::with(StringSerde, I64Serde),
        Duration::from_secs(3600),
    );
    builder
        .stream("orders", Consumed::with(StringSerde, I64Serde))
        .join_table(&prices, |quantity, price| quantity * price)
        .to("totals", Produced::with(StringSerde, I64Serde));
    let prices = prices.store().clone();
    assert_eq!(prices.history(), Some(Duration::from_secs(3600)));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    d.pipe_table_at(&prices, &s("tea"), Some(&3), 1_000)?;
    d.pipe_table_at(&prices, &s("tea"), Some(&5), 5_000)?;
    // Ordered at 4 s, arriving after the change at 5 s: the price of 4 s.
    d.pipe(TestRecord::new("orders", Some("tea"), Some(2_i64.to_be_bytes())).timestamp(4_000))?;
    d.pipe(TestRecord::new("orders", Some("tea"), Some(2_i64.to_be_bytes())).timestamp(6_000))?;
    assert_eq!(
        count_out(&mut d, "totals")?,
        vec![kv("tea", 6), kv("tea", 10)]
    );
    Ok(())
}

#[test]
fn a_global_table_joins_by_the_key_a_record_maps_to_without_a_repartition() -> TestResult {
    let builder = StreamsBuilder::new();
    let countries = builder.global_table(
        "countries",
        Consumed::with(StringSerde, StringSerde).named("country-names"),
    );
    // Re-keyed by customer: a global table needs no repartition.
    let orders = builder
        .stream("orders", Consumed::with(StringSerde, StringSerde))
        .select_key(|_, order| order.split(':').next().unwrap_or_default().to_string());
    let code = |_: Option<&String>, order: &String| {
        order.split(':').nth(1).unwrap_or_default().to_string()
    };
    orders
        .join_global(&countries, code, |order, country| {
            format!("{order} to {country}")
        })
        .to("shipped", Produced::with(StringSerde, StringSerde));
    orders
        .left_join_global(&countries, code, |order, country| {
            format!("{order} to {}", country.map_or("?", String::as_str))
        })
        .to("all", Produced::with(StringSerde, StringSerde));
    assert_eq!(countries.name(), "country-names");
    let handle = countries.handle().clone();
    let t = builder.build()?;
    assert_eq!(t.global_table_topics(), vec![s("countries")]);

    let mut d = TopologyTestDriver::new(t)?;
    d.pipe_global(&handle, &s("fr"), Some(&s("France")))?;
    pipe(&mut d, "orders", Some("o-1"), Some("ann:fr"))?;
    pipe(&mut d, "orders", Some("o-2"), Some("bob:xx"))?;
    assert_eq!(
        text_out(&mut d, "shipped")?,
        vec![kv("ann", s("ann:fr to France"))]
    );
    assert_eq!(
        values_out(&mut d, "all")?,
        vec![s("ann:fr to France"), s("bob:xx to ?")]
    );
    Ok(())
}

#[test]
fn stream_stream_joins_pair_records_within_the_window_and_emit_unmatched_ones_once_final(
) -> TestResult {
    let builder = StreamsBuilder::new();
    let shown = builder.stream("impressions", Consumed::with(StringSerde, StringSerde));
    let clicks = builder.stream("clicks", Consumed::with(StringSerde, StringSerde));
    let windows = JoinWindows::of_time_difference_no_grace(Duration::from_secs(10));
    let stores = || StreamJoined::with(StringSerde, StringSerde, StringSerde);
    shown
        .join_stream(
            &clicks,
            |i, c| format!("{i}+{c}"),
            windows,
            stores().named("inner"),
        )
        .to("inner", Produced::with(StringSerde, StringSerde));
    shown
        .left_join_stream(
            &clicks,
            |i, c| format!("{i}+{}", c.map_or("-", String::as_str)),
            windows,
            stores().named("left"),
        )
        .to("left", Produced::with(StringSerde, StringSerde));
    shown
        .outer_join_stream(
            &clicks,
            |i, c| {
                let side = |v: Option<&String>| v.map_or(s("-"), String::clone);
                format!("{}+{}", side(i), side(c))
            },
            windows,
            stores(),
        )
        .named("outer")
        .to("outer", Produced::with(StringSerde, StringSerde));
    let t = builder.build()?;
    let changelogs = t.changelog_topics("ads");
    for store in [
        "inner-this-join-store",
        "left-other-join-store",
        "outer-this-join-store",
    ] {
        assert!(
            changelogs.contains(&format!("ads-{store}-changelog")),
            "{changelogs:?}"
        );
    }

    let mut d = TopologyTestDriver::new(t)?;
    pipe_at(&mut d, "impressions", "ad-1", "i1", 1_000)?;
    pipe_at(&mut d, "impressions", "ad-2", "i2", 2_000)?;
    pipe_at(&mut d, "clicks", "ad-1", "c1", 4_000)?; // 3 s after i1: a pair
    pipe_at(&mut d, "clicks", "ad-3", "c3", 5_000)?; // no impression
    assert_eq!(values_out(&mut d, "inner")?, vec![s("i1+c1")]);
    assert_eq!(values_out(&mut d, "left")?, vec![s("i1+c1")]);
    assert_eq!(values_out(&mut d, "outer")?, vec![s("i1+c1")]);
    // i2 can be clicked until 12 s and c3 matched until 15 s: only past 22 s (2 s + 10 s
    // before + 10 s after) is i2's "no click" final, past 25 s c3's "no impression".
    pipe_at(&mut d, "clicks", "ad-9", "c9", 30_000)?;
    assert_eq!(values_out(&mut d, "inner")?, Vec::<String>::new());
    assert_eq!(values_out(&mut d, "left")?, vec![s("i2+-")]);
    assert_eq!(values_out(&mut d, "outer")?, vec![s("i2+-"), s("-+c3")]);
    // A click too late for its window joins nothing and is dead-lettered: once the impressions
    // have moved on too (until then i2 is still buffered, and a click at 2 s would join it, as
    // in Kafka Streams).
    pipe_at(&mut d, "impressions", "ad-9", "i9", 30_000)?;
    pipe_at(&mut d, "clicks", "ad-2", "late", 2_000)?;
    let dead = d.read_raw_output("clicks.DLT");
    assert_eq!(dead.len(), 1, "one DLT record per input, not per join");
    assert_eq!(dead[0].dlt_class(), Some("late-record"));
    Ok(())
}

#[test]
fn a_stream_join_of_a_re_keyed_stream_is_rejected_at_build() {
    let builder = StreamsBuilder::new();
    let a = builder
        .stream("a", Consumed::with(StringSerde, StringSerde))
        .map(|_, v| (v.clone(), v.clone()))
        .named("a-by-value");
    let b = builder.stream("b", Consumed::with(StringSerde, StringSerde));
    b.join_stream(
        &a,
        |x, y| format!("{x}{y}"),
        JoinWindows::of_time_difference_no_grace(Duration::from_secs(1)),
        StreamJoined::with(StringSerde, StringSerde, StringSerde),
    )
    .to("out", Produced::with(StringSerde, StringSerde));
    let text = builder.build().expect_err("a re-keyed side").to_string();
    assert!(
        text.contains("join_stream of KSTREAM-SOURCE-0000000002 with a-by-value: the key of a-by-value was changed"),
        "{text}"
    );
}

#[test]
fn tables_report_their_mistakes_at_build() {
    // A timestamp extractor on a table.
    let builder = StreamsBuilder::new();
    let extractor = TimestampExtractor::header("at");
    builder.table(
        "users",
        Consumed::with(StringSerde, StringSerde).with_timestamp_extractor(extractor),
    );
    builder.stream("in", Consumed::with(StringSerde, StringSerde));
    let text = builder.build().expect_err("an extractor").to_string();
    assert!(
        text.contains("table users of users has a timestamp extractor"),
        "{text}"
    );

    // A table of another builder.
    let (one, two) = (StreamsBuilder::new(), StreamsBuilder::new());
    let users = two.table("users", Consumed::with(StringSerde, StringSerde));
    one.stream("in", Consumed::with(StringSerde, StringSerde))
        .join_table(&users, |a, b| format!("{a}{b}"))
        .to("out", Produced::with(StringSerde, StringSerde));
    let text = one.build().expect_err("a foreign table").to_string();
    assert!(text.contains("join_table of"), "{text}");
    assert!(text.contains("another StreamsBuilder"), "{text}");
}

/// Forwards a user's clicks once per session of silence: counts them in a store and emits
/// the count when no click came for 10 s (an event-time timer per user).
struct QuietCount {
    counts: StoreHandle<String, i64>,
}

impl StreamProcessor<String, String, String, i64> for QuietCount {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, i64>,
        r: TypedRecord<String, String>,
    ) -> Result<(), ProcessError> {
        let Some(user) = r.key else {
            return Err(ProcessError::permanent("a click without a user"));
        };
        let at = ctx.event_time_ms().unwrap_or(0) + 10_000;
        let mut counts = ctx.store(&self.counts)?;
        let n = counts.get(&user)?.unwrap_or(0) + 1;
        counts.put(&user, &n)?;
        ctx.schedule_event_time(user.as_bytes(), at)
    }

    fn on_timer(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, i64>,
        timer: &Timer,
    ) -> Result<(), ProcessError> {
        let user = String::from_utf8_lossy(&timer.key).to_string();
        let mut counts = ctx.store(&self.counts)?;
        let n = counts.get(&user)?;
        counts.delete(&user)?;
        if let Some(n) = n {
            ctx.forward(TypedRecord::new(Some(user), Some(n)));
        }
        Ok(())
    }
}

#[test]
fn process_forwards_typed_records_and_keeps_state_in_its_stores_across_timers() -> TestResult {
    let counts = StoreHandle::new("quiet-counts", StringSerde, I64Serde);
    let builder = StreamsBuilder::new();
    let quiet = builder
        .stream("clicks", Consumed::with(StringSerde, StringSerde))
        .process(
            QuietCount {
                counts: counts.clone(),
            },
            Stores::new().store(&counts),
        );
    assert!(quiet.name().starts_with("KSTREAM-PROCESSOR-"));
    quiet.to("sessions", Produced::with(StringSerde, I64Serde));
    let t = builder.build()?;
    assert!(t
        .changelog_topics("app")
        .contains(&s("app-quiet-counts-changelog")));

    let mut d = TopologyTestDriver::new(t)?;
    pipe_at(&mut d, "clicks", "ann", "/a", 1_000)?;
    pipe_at(&mut d, "clicks", "ann", "/b", 5_000)?;
    pipe_at(&mut d, "clicks", "bob", "/a", 6_000)?;
    assert_eq!(d.store_get(&counts, &s("ann"))?, Some(2));
    assert!(count_out(&mut d, "sessions")?.is_empty());
    pipe_at(&mut d, "clicks", "cat", "/a", 15_000)?; // ann quiet since 5 s
    assert_eq!(count_out(&mut d, "sessions")?, vec![kv("ann", 2)]);
    assert_eq!(d.store_get(&counts, &s("ann"))?, None);
    pipe_at(&mut d, "clicks", "cat", "/b", 16_000)?; // bob quiet since 6 s
    assert_eq!(count_out(&mut d, "sessions")?, vec![kv("bob", 1)]);
    // An error of the processor dead-letters its input.
    pipe(&mut d, "clicks", None, Some("/nobody"))?;
    let dead = d.read_raw_output("clicks.DLT");
    assert_eq!(dead[0].dlt_reason(), Some("a click without a user"));
    Ok(())
}

/// Remembers each reading and forwards it, unless it is more than 5 s behind stream time:
/// then it is dead-lettered as late (after its store write, which is kept). Its timer records
/// whether `dead_letter_late` refused to run in `on_timer`.
struct LateReadings {
    seen: StoreHandle<String, i64>,
}

impl StreamProcessor<String, String, String, String> for LateReadings {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
        r: TypedRecord<String, String>,
    ) -> Result<(), ProcessError> {
        let at = ctx.event_time_ms().unwrap_or(0);
        let sensor = r.key.clone().unwrap_or_default();
        ctx.store(&self.seen)?.put(&sensor, &at)?;
        ctx.schedule_event_time(sensor.as_bytes(), at + 100_000)?;
        if at + 5_000 < ctx.stream_time_ms().unwrap_or(at) {
            return ctx.dead_letter_late(format!("reading of {sensor} at {at} is late"));
        }
        ctx.forward(r);
        Ok(())
    }

    fn on_timer(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
        _timer: &Timer,
    ) -> Result<(), ProcessError> {
        let refused = ctx.dead_letter_late("from a timer").is_err();
        ctx.store(&self.seen)?
            .put(&s("refused"), &i64::from(refused))
    }
}

#[test]
fn a_processor_dead_letters_a_record_as_late_and_keeps_what_the_call_did() -> TestResult {
    let seen = StoreHandle::new("seen", StringSerde, I64Serde);
    let builder = StreamsBuilder::new();
    builder
        .stream("readings", Consumed::with(StringSerde, StringSerde))
        .process(
            LateReadings { seen: seen.clone() },
            Stores::new().store(&seen),
        )
        .to("on-time", Produced::with(StringSerde, StringSerde));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    pipe_at(&mut d, "readings", "s1", "20", 10_000)?;
    pipe_at(&mut d, "readings", "s2", "21", 5_000)?; // 5 s behind: on time
    pipe_at(&mut d, "readings", "s3", "22", 4_999)?; // 1 ms more: late
    assert_eq!(
        text_out(&mut d, "on-time")?,
        vec![kv("s1", s("20")), kv("s2", s("21"))]
    );
    let dead = d.read_raw_output("readings.DLT");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].key_text(), "s3");
    assert_eq!(dead[0].dlt_class(), Some("late-record"));
    assert_eq!(dead[0].dlt_reason(), Some("reading of s3 at 4999 is late"));
    assert_eq!(
        dead[0].header("eosflow.dlt.late.stream.time"),
        Some("10000")
    );
    assert!(dead[0]
        .header("eosflow.dlt.late.node")
        .is_some_and(|n| n.starts_with("KSTREAM-PROCESSOR-")));
    // The late record's store write was kept: the call succeeded.
    assert_eq!(d.store_get(&seen, &s("s3"))?, Some(4_999));
    // In on_timer there is no input record: the call is refused, and the timer runs on.
    pipe_at(&mut d, "readings", "s4", "23", 200_000)?;
    assert_eq!(d.store_get(&seen, &s("refused"))?, Some(1));
    assert!(d.read_raw_output("readings.DLT").is_empty());
    Ok(())
}

#[test]
fn a_processor_reads_a_table_and_its_output_is_repartitioned_before_grouping() -> TestResult {
    let builder = StreamsBuilder::new();
    let users = builder.table("users", Consumed::with(StringSerde, StringSerde));
    let table = users.store().clone();
    let rows = table.store().clone();
    // Clicks re-keyed by the user's region, read from the table by hand.
    let by_region = builder
        .stream("clicks", Consumed::with(StringSerde, StringSerde))
        .process(
            move |ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
                  r: TypedRecord<String, String>| {
                let region = match &r.key {
                    Some(user) => ctx.store(&rows)?.get(user)?,
                    None => None,
                };
                let region = region.unwrap_or_else(|| s("unknown"));
                ctx.forward(TypedRecord::new(Some(region), r.value));
                Ok(())
            },
            Stores::new().table(&users),
        );
    by_region
        .group_by_key()
        .count(Materialized::with(StringSerde, I64Serde));
    let text = builder
        .build()
        .expect_err("grouped after process")
        .to_string();
    assert!(
        text.contains("group_by_key after KSTREAM-PROCESSOR-"),
        "{text}"
    );

    let builder = StreamsBuilder::new();
    let users = builder.table("users", Consumed::with(StringSerde, StringSerde));
    let rows = users.store().store().clone();
    let per_region = builder
        .stream("clicks", Consumed::with(StringSerde, StringSerde))
        .process(
            move |ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
                  r: TypedRecord<String, String>| {
                let region = match &r.key {
                    Some(user) => ctx.store(&rows)?.get(user)?,
                    None => None,
                };
                ctx.forward(TypedRecord::new(region, r.value));
                Ok(())
            },
            Stores::new().table(&users),
        )
        .repartition(Grouped::with(StringSerde, StringSerde))
        .group_by_key()
        .count(Materialized::with(StringSerde, I64Serde).named("per-region"));
    let store = per_region.store().clone();
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    d.pipe_table(&table, &s("ann"), Some(&s("eu")))?;
    d.pipe_table(&table, &s("bob"), Some(&s("eu")))?;
    pipe(&mut d, "clicks", Some("ann"), Some("/a"))?;
    pipe(&mut d, "clicks", Some("bob"), Some("/b"))?;
    assert_eq!(d.store_get(&store, &s("eu"))?, Some(2));
    assert!(d.pending_outputs().keys().all(|t| !t.ends_with(".DLT")));
    Ok(())
}

#[test]
fn table_filter_and_map_values_keep_derived_tables_and_delete_rows_that_stop_passing() -> TestResult
{
    let builder = StreamsBuilder::new();
    let totals = builder
        .stream("orders", Consumed::with(StringSerde, I64Serde))
        .group_by_key()
        .reduce(
            |a, b| a + b,
            Materialized::with(StringSerde, I64Serde).named("totals"),
        );
    let big = totals.filter(
        |_, total| *total >= 100,
        Materialized::with(StringSerde, I64Serde).named("big"),
    );
    let small = totals.filter_not(
        |_, total| *total >= 100,
        Materialized::with(StringSerde, I64Serde),
    );
    let labels = big.map_values(
        |total| format!("VIP ({total})"),
        Materialized::with(StringSerde, StringSerde).named("labels"),
    );
    labels
        .to_stream()
        .to("vips", Produced::with(StringSerde, StringSerde));
    let (big_store, small_store, labels_store) = (
        big.store().clone(),
        small.store().clone(),
        labels.store().clone(),
    );
    assert!(small_store.name().starts_with("KTABLE-FILTER-STATE-STORE-"));

    let mut d = TopologyTestDriver::new(builder.build()?)?;
    let order = |d: &mut Driver, who: &str, amount: i64| {
        d.pipe(TestRecord::new(
            "orders",
            Some(who),
            Some(amount.to_be_bytes()),
        ))
    };
    order(&mut d, "ann", 60)?;
    order(&mut d, "bob", 10)?;
    order(&mut d, "ann", 60)?; // 120: in
    order(&mut d, "ann", -50)?; // 70: out again
    assert_eq!(
        text_out(&mut d, "vips")?,
        vec![kv("ann", s("VIP (120)")), (Some(s("ann")), None)]
    );
    assert_eq!(d.store_get(&big_store, &s("ann"))?, None);
    assert_eq!(d.store_get(&labels_store, &s("ann"))?, None);
    assert_eq!(
        d.store_entries(&small_store)?,
        vec![(s("ann"), 70), (s("bob"), 10)]
    );
    Ok(())
}

#[test]
fn joins_and_processors_get_kafka_streams_names_and_typed_edges() -> TestResult {
    let builder = StreamsBuilder::new();
    let users = builder.table("users", Consumed::with(StringSerde, StringSerde));
    let regions = builder.global_table("regions", Consumed::with(StringSerde, I64Serde));
    let a = builder.stream("a", Consumed::with(StringSerde, StringSerde));
    let b = builder.stream("b", Consumed::with(StringSerde, I64Serde));
    let joined = a.join_table(&users, |v, name| format!("{v}/{name}"));
    let left = joined.left_join_global(
        &regions,
        |_, v| v.clone(),
        |v, r| (v.len() as i64) + r.copied().unwrap_or(0),
    );
    let pairs = left.join_stream(
        &b,
        |x, y| x + y,
        JoinWindows::of_time_difference_no_grace(Duration::from_secs(5)),
        StreamJoined::with(StringSerde, I64Serde, I64Serde),
    );
    let doubled = pairs.process(
        |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>, r: TypedRecord<String, i64>| {
            ctx.forward(TypedRecord::new(r.key, r.value.map(|n| n * 2)));
            Ok(())
        },
        Stores::new(),
    );
    doubled.to("out", Produced::with(StringSerde, I64Serde));
    assert_eq!(
        [joined.name(), left.name(), pairs.name(), doubled.name()],
        [
            s("KSTREAM-JOIN-0000000002"),
            s("KSTREAM-LEFTJOIN-0000000003"),
            s("KSTREAM-JOIN-0000000004"),
            s("KSTREAM-PROCESSOR-0000000005"),
        ]
    );
    let (table, global) = (users.store().clone(), regions.handle().clone());
    let t = builder.build()?;
    let nodes: Vec<String> = t.sub_topologies().concat();
    for node in [
        "KSTREAM-JOIN-0000000004-left",
        "KSTREAM-JOIN-0000000004-right",
    ] {
        assert!(nodes.contains(&s(node)), "{nodes:?}");
    }
    assert!(t
        .changelog_topics("app")
        .contains(&s("app-KSTREAM-JOIN-0000000004-other-join-store-changelog")));

    let mut d = TopologyTestDriver::new(t)?;
    d.pipe_table(&table, &s("k"), Some(&s("Ann")))?;
    d.pipe_global(&global, &s("x/Ann"), Some(&100))?;
    pipe_at(&mut d, "a", "k", "x", 1_000)?;
    d.pipe(TestRecord::new("b", Some("k"), Some(7_i64.to_be_bytes())).timestamp(2_000))?;
    // ("x/Ann".len() + 100 + 7) * 2
    assert_eq!(count_out(&mut d, "out")?, vec![kv("k", 224)]);
    assert!(d.pending_outputs().keys().all(|t| !t.ends_with(".DLT")));
    Ok(())
}

#[test]
fn a_store_given_to_two_processors_is_reported_at_build() {
    let shared = StoreHandle::new("shared", StringSerde, I64Serde);
    let builder = StreamsBuilder::new();
    let src = builder.stream("in", Consumed::with(StringSerde, StringSerde));
    for _ in 0..2 {
        src.process(
            |ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
             r: TypedRecord<String, String>| {
                ctx.forward(r);
                Ok(())
            },
            Stores::new().store(&shared),
        );
    }
    let text = builder.build().expect_err("a shared store").to_string();
    assert!(text.contains("store \"shared\" is added twice"), "{text}");
}

/// Clicks per region per minute: clicks joined with the users table, re-keyed by region,
/// counted in 1-minute windows, each window's final count out.
fn clicks_per_region() -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new();
    let users = builder.table("users", Consumed::with(StringSerde, StringSerde));
    builder
        .stream("clicks", Consumed::with(StringSerde, StringSerde))
        .join_table(&users, |_page, region| region.clone())
        .group_by(
            |_, region| region.clone(),
            Grouped::with(StringSerde, StringSerde),
        )
        .windowed_by(TimeWindows::of_size_no_grace(Duration::from_secs(60)))
        .emit_strategy(EmitStrategy::OnWindowClose)
        .count(Materialized::with(StringSerde, I64Serde).named("clicks-per-region"))
        .to_stream()
        .map(|w, n| {
            (
                w.map_or(s("?"), |w| w.key.clone()),
                format!("{n} at {}", w.map_or(0, |w| w.window.start)),
            )
        })
        .to("region-clicks", Produced::with(StringSerde, StringSerde));
    builder.build()
}

#[test]
fn clicks_per_region_per_minute_joins_re_keys_and_counts_in_windows() -> TestResult {
    let users = crate::topology::TableHandle::new("users", "users", StringSerde, StringSerde);
    let mut d = TopologyTestDriver::new(clicks_per_region()?)?;
    d.pipe_table(&users, &s("ann"), Some(&s("eu")))?;
    d.pipe_table(&users, &s("bob"), Some(&s("us")))?;
    for (user, ms) in [
        ("ann", 1_000),
        ("bob", 2_000),
        ("ann", 30_000),
        ("ann", 61_000),
    ] {
        pipe_at(&mut d, "clicks", user, "/page", ms)?;
    }
    // The first minute closed at 60 s: one final count per region.
    assert_eq!(
        text_out(&mut d, "region-clicks")?,
        vec![kv("eu", s("2 at 0")), kv("us", s("1 at 0"))]
    );
    Ok(())
}

#[test]
fn a_suppressed_table_emits_a_key_s_latest_total_once_its_minute_is_over() -> TestResult {
    use crate::dsl::{BufferConfig, Suppressed};
    use crate::serdes::Serde as _;
    let builder = StreamsBuilder::new();
    let totals = builder
        .stream("amounts", Consumed::with(StringSerde, I64Serde))
        .group_by_key()
        .reduce(
            |a, b| a + b,
            Materialized::with(StringSerde, I64Serde).named("totals"),
        );
    let per_minute = totals.suppress(Suppressed::until_time_limit(
        Duration::from_secs(60),
        BufferConfig::max_records(10_000).emit_early_when_full(),
    ));
    per_minute
        .to_stream()
        .to("totals-per-minute", Produced::with(StringSerde, I64Serde));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    let amount = |d: &mut Driver, k: &str, v: i64, ms: i64| -> TestResult {
        let v = I64Serde.serialize(&v)?;
        Ok(d.pipe(TestRecord::new("amounts", Some(k), Some(v)).timestamp(ms))?)
    };
    amount(&mut d, "a", 5, 0)?;
    amount(&mut d, "a", 7, 30_000)?;
    amount(&mut d, "b", 1, 40_000)?;
    // Nothing before a minute has passed since a's first update.
    assert_eq!(count_out(&mut d, "totals-per-minute")?, vec![]);
    amount(&mut d, "b", 2, 60_000)?;
    // a's latest total, once; b (first at 40 s) still waits.
    assert_eq!(count_out(&mut d, "totals-per-minute")?, vec![kv("a", 12)]);
    amount(&mut d, "c", 1, 100_000)?;
    assert_eq!(count_out(&mut d, "totals-per-minute")?, vec![kv("b", 3)]);
    Ok(())
}

#[test]
fn every_rust_block_of_the_dsl_page_is_in_the_tests() {
    crate::testing::assert_rust_blocks_are_in(
        "docs/dsl.md",
        include_str!("../../docs/dsl.md"),
        "src/dsl/tests.rs",
        include_str!("tests.rs"),
        7,
    );
}

/// Users per city from check-ins: each user's latest city (an aggregated table), regrouped by
/// city and counted.
fn users_per_city() -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new();
    let latest_city = builder
        .stream("check-ins", Consumed::with(StringSerde, StringSerde))
        .group_by_key()
        .reduce(
            |_, city| city.clone(),
            Materialized::with(StringSerde, StringSerde).named("cities"),
        );
    latest_city
        .group_by(
            |_user, city| Some((city.clone(), 1)),
            Grouped::with(StringSerde, I64Serde).named("by-city"),
        )
        .count(Materialized::with(StringSerde, I64Serde).named("users-per-city"))
        .to_stream()
        .to("users-per-city", Produced::with(StringSerde, I64Serde));
    builder.build()
}

#[test]
fn a_grouped_aggregated_table_moves_a_row_from_its_old_group_to_its_new_one() -> TestResult {
    let topology = users_per_city()?;
    assert_eq!(
        topology.repartition_topics_for("app"),
        vec!["app-by-city-repartition"]
    );
    assert!(topology
        .changelog_topics("app")
        .contains(&s("app-by-city-rows-changelog")));
    let mut d = TopologyTestDriver::new(topology)?;
    for (user, city) in [
        ("ann", "Paris"),
        ("bob", "Paris"),
        ("ann", "Lyon"),
        ("ann", "Lyon"),
    ] {
        pipe(&mut d, "check-ins", Some(user), Some(city))?;
    }
    // ann leaves Paris for Lyon (two records: Paris less one, Lyon plus one); her second
    // check-in in Lyon is one record to one group (less one, plus one): one result, no
    // passing 0.
    assert_eq!(
        count_out(&mut d, "users-per-city")?,
        vec![
            kv("Paris", 1),
            kv("Paris", 2),
            kv("Paris", 1),
            kv("Lyon", 1),
            kv("Lyon", 1),
        ]
    );
    let counts = StoreHandle::new("users-per-city", StringSerde, I64Serde);
    assert_eq!(
        d.store_entries(&counts)?,
        vec![(s("Lyon"), 1), (s("Paris"), 1)]
    );
    Ok(())
}

#[test]
fn a_grouped_filtered_table_subtracts_a_row_that_leaves_the_filter() -> TestResult {
    let builder = StreamsBuilder::new();
    let balances = builder
        .stream("movements", Consumed::with(StringSerde, I64Serde))
        .group_by_key()
        .reduce(
            |a, b| a + b,
            Materialized::with(StringSerde, I64Serde).named("balances"),
        );
    let total = balances
        .filter(
            |_, b| *b > 0,
            Materialized::with(StringSerde, I64Serde).named("positive"),
        )
        .group_by(
            |_, b| Some((s("all"), *b)),
            Grouped::with(StringSerde, I64Serde),
        )
        .reduce(
            |a, b| a + b,
            |a, b| a - b,
            Materialized::with(StringSerde, I64Serde).named("total"),
        );
    let store = total.store().clone();
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    for (account, amount) in [("a", 10), ("b", 5), ("a", -30), ("b", 2)] {
        d.pipe_input("movements", &StringSerde, &I64Serde, &s(account), &amount)?;
    }
    // a: 10, then -20 (out of the filter: a tombstone, 10 subtracted); b: 5, then 7.
    assert_eq!(d.store_get(&store, &s("all"))?, Some(7));
    Ok(())
}

#[test]
fn a_grouped_topic_table_takes_tombstones_and_rows_in_no_group() -> TestResult {
    let builder = StreamsBuilder::new();
    let users = builder.table("users", Consumed::with(StringSerde, StringSerde));
    users
        .group_by(
            |_, team: &String| (!team.is_empty()).then(|| (team.clone(), s("x"))),
            Grouped::with(StringSerde, StringSerde),
        )
        .count(Materialized::with(StringSerde, I64Serde))
        .to_stream()
        .to("teams", Produced::with(StringSerde, I64Serde));
    // A stream cannot look rows up in it any more: its topic is read as updates.
    builder
        .stream("views", Consumed::with(StringSerde, StringSerde))
        .join_table(&users, |v, _| v.clone());
    let err = builder
        .build()
        .err()
        .ok_or("a lookup of a grouped topic table")?;
    assert!(err.to_string().contains("grouped (group_by)"), "{err}");

    let builder = StreamsBuilder::new();
    builder
        .table("users", Consumed::with(StringSerde, StringSerde))
        .group_by(
            |_, team: &String| (!team.is_empty()).then(|| (team.clone(), s("x"))),
            Grouped::with(StringSerde, StringSerde),
        )
        .count(Materialized::with(StringSerde, I64Serde))
        .to_stream()
        .to("teams", Produced::with(StringSerde, I64Serde));
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    pipe(&mut d, "users", Some("ann"), Some("red"))?;
    pipe(&mut d, "users", Some("ann"), Some(""))?; // in no group: leaves red
    pipe(&mut d, "users", Some("bob"), None)?; // a tombstone of no row: nothing
    pipe(&mut d, "users", Some("ann"), Some("red"))?;
    pipe(&mut d, "users", Some("ann"), None)?; // deleted: leaves red
    assert_eq!(
        count_out(&mut d, "teams")?,
        vec![kv("red", 1), kv("red", 0), kv("red", 1), kv("red", 0)]
    );
    Ok(())
}

#[test]
fn a_grouped_table_change_round_trips_through_its_serde() -> TestResult {
    use super::grouped_table::{Change, ChangeSerde};
    use crate::serdes::Serde;
    let serde = ChangeSerde::<String>(Arc::new(StringSerde));
    for change in [
        Change {
            old: Some(s("a")),
            new: Some(s("bc")),
        },
        Change {
            old: Some(s("")),
            new: None,
        },
        Change {
            old: None,
            new: Some(s("")),
        },
        Change {
            old: None,
            new: None,
        },
    ] {
        let bytes = serde.serialize(&change)?;
        assert_eq!(serde.deserialize(&bytes)?, change);
    }
    assert!(serde.deserialize(&[]).is_err());
    assert!(serde.deserialize(&[1, 0, 0, 0, 9, b'a']).is_err());
    assert!(serde.deserialize(&[0, b'a']).is_err());
    assert!(serde.deserialize(&[4]).is_err());
    Ok(())
}

#[test]
fn a_stream_to_table_upserts_deletes_and_forwards_only_changes_of_its_rows() -> TestResult {
    let builder = StreamsBuilder::new();
    let status = builder
        .stream("status", Consumed::with(StringSerde, StringSerde))
        .to_table(Materialized::with(StringSerde, StringSerde).named("status"));
    status
        .to_stream()
        .to("changes", Produced::with(StringSerde, StringSerde));
    let store = status.store().clone();
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    pipe(&mut d, "status", Some("h1"), Some("up"))?;
    pipe(&mut d, "status", Some("h2"), None)?; // no row: nothing
    pipe(&mut d, "status", Some("h1"), Some("down"))?;
    pipe(&mut d, "status", Some("h1"), None)?;
    pipe(&mut d, "status", None, Some("up"))?; // no key: dead-lettered
    assert_eq!(
        text_out(&mut d, "changes")?,
        vec![
            kv("h1", s("up")),
            kv("h1", s("down")),
            (Some(s("h1")), None)
        ]
    );
    assert_eq!(d.store_get(&store, &s("h1"))?, None);
    assert_eq!(d.read_raw_output("status.DLT").len(), 1);
    Ok(())
}

#[test]
fn to_table_after_a_key_change_fails_at_build_until_repartitioned() {
    let builder = StreamsBuilder::new();
    builder
        .stream("status", Consumed::with(StringSerde, StringSerde))
        .select_key(|_, v| v.clone())
        .named("by-status")
        .to_table(Materialized::with(StringSerde, StringSerde));
    let err = builder
        .build()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("to_table after by-status"), "{err}");
}

#[test]
fn foreach_sees_each_record_with_a_value_and_print_writes_labelled_lines() -> TestResult {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let path = std::env::temp_dir().join(format!("eosflow-dsl-print-{}.txt", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let builder = StreamsBuilder::new();
    let alerts = builder.stream("alerts", Consumed::with(StringSerde, StringSerde));
    alerts.foreach(move |k, v| {
        if let Ok(mut seen) = sink.lock() {
            seen.push((k.cloned(), v.clone()));
        }
    });
    alerts.print(Printed::to_file(&path));
    alerts.print(
        Printed::to_file(&path)
            .with_label("custom")
            .with_key_value_mapper(|k, v: &String| {
                format!("{}={v}", k.map_or("-", String::as_str))
            }),
    );
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    pipe(&mut d, "alerts", Some("h1"), Some("disk"))?;
    pipe(&mut d, "alerts", Some("h1"), None)?;
    pipe(&mut d, "alerts", None, Some("cpu"))?;
    assert_eq!(
        *seen.lock().map_err(|_| "poisoned")?,
        vec![(Some(s("h1")), s("disk")), (None, s("cpu"))]
    );
    let printed = std::fs::read_to_string(&path)?;
    std::fs::remove_file(&path)?;
    assert_eq!(
        printed.lines().collect::<Vec<_>>(),
        [
            "[KSTREAM-PRINTER-0000000002]: \"h1\", \"disk\"",
            "[custom]: h1=disk",
            "[KSTREAM-PRINTER-0000000002]: None, \"cpu\"",
            "[custom]: -=cpu",
        ]
    );
    Ok(())
}

#[test]
fn a_session_reduce_merges_the_sessions_a_record_bridges_with_the_reducer() -> TestResult {
    let builder = StreamsBuilder::new();
    let sums = builder
        .stream("spend", Consumed::with(StringSerde, I64Serde))
        .group_by_key()
        .windowed_by_session(SessionWindows::with_inactivity_gap_and_grace(
            Duration::from_millis(10),
            Duration::from_millis(100),
        ))
        .reduce(
            |a, v| a + v,
            Materialized::with(StringSerde, I64Serde).named("sums"),
        );
    let store = sums.store().clone();
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    for (ms, v) in [(0, 1i64), (20, 2), (10, 4)] {
        d.pipe(TestRecord::new("spend", Some("k"), Some(v.to_be_bytes())).timestamp(ms))?;
    }
    let sessions = d.window_fetch_range(&store, &s("k"), 0, 100)?;
    let found: Vec<_> = sessions.iter().map(|(w, v)| (w.start, w.end, *v)).collect();
    assert_eq!(found, vec![(0, 20, 7)]);
    Ok(())
}

#[test]
fn a_sliding_reduce_keeps_each_windows_reduction() -> TestResult {
    let builder = StreamsBuilder::new();
    let maxima = builder
        .stream("readings", Consumed::with(StringSerde, I64Serde))
        .group_by_key()
        .windowed_by_sliding(SlidingWindows::of_time_difference_no_grace(
            Duration::from_millis(10),
        ))
        .reduce(
            |a, v| a.max(*v),
            Materialized::with(StringSerde, I64Serde).named("maxima"),
        );
    let store = maxima.store().clone();
    let mut d = TopologyTestDriver::new(builder.build()?)?;
    for (ms, v) in [(10, 3i64), (15, 9)] {
        d.pipe(TestRecord::new("readings", Some("k"), Some(v.to_be_bytes())).timestamp(ms))?;
    }
    let windows = d.window_fetch_range(&store, &s("k"), 0, 100)?;
    let found: Vec<_> = windows.iter().map(|(w, v)| (w.start, w.end, *v)).collect();
    // [0,10] holds 3, [5,15] both, [11,21] (10's right window) 9.
    assert_eq!(found, vec![(0, 10, 3), (5, 15, 9), (11, 21, 9)]);
    Ok(())
}

#[test]
fn a_cogroup_folds_each_input_with_its_aggregator_into_one_store() -> TestResult {
    let builder = StreamsBuilder::new();
    let refunds = builder
        .stream("refunds", Consumed::with(StringSerde, I64Serde))
        .group_by_key();
    let summary = builder
        .stream("orders", Consumed::with(StringSerde, StringSerde))
        .group_by_key()
        .cogroup(|_, _: &String, (n, r): (i64, i64)| (n + 1, r))
        .cogroup(&refunds, |_, v: &i64, (n, r)| (n, r + v))
        .aggregate(
            || (0, 0),
            Materialized::with(StringSerde, JsonSerde::new()).named("summary"),
        );
    summary
        .to_stream()
        .map_values(|(n, r)| format!("{n}/{r}"))
        .to("summary", Produced::with(StringSerde, StringSerde));
    let topology = builder.build()?;
    assert!(topology
        .changelog_topics("app")
        .contains(&s("app-summary-changelog")));
    let mut d = TopologyTestDriver::new(topology)?;
    pipe(&mut d, "orders", Some("ann"), Some("o-1"))?;
    d.pipe_input("refunds", &StringSerde, &I64Serde, &s("ann"), &5)?;
    pipe(&mut d, "orders", Some("bob"), Some("o-2"))?;
    pipe(&mut d, "orders", Some("ann"), Some("o-3"))?;
    assert_eq!(
        values_out(&mut d, "summary")?,
        vec![s("1/0"), s("1/5"), s("1/0"), s("2/5")]
    );
    Ok(())
}
