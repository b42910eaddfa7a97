//! `KTable.suppress(untilTimeLimit(…))` with unbounded, `maxRecords` and `maxBytes` buffers,
//! ported from Kafka Streams' `KTableSuppressProcessorTest` and `SuppressScenarioTest`
//! (`streams/src/test/java/org/apache/kafka/streams/kstream/internals/`). The
//! `untilWindowCloses` methods are eosflow's `EmitStrategy::OnWindowClose`, in `windows.rs`.
//!
//! How the facts carry over:
//! - `KTableSuppressProcessorTest` hands the suppression node changes directly; here a table
//!   of each key's latest value (`to_table`) produces them, one update per input record with
//!   the record's key, value and timestamp. Its `Change<>(null, 5L)` "tombstone" changes carry
//!   a new value (5) and are ported as such; a real tombstone is checked beside them.
//! - A windowed key is produced by a windowed count of one record; eosflow stamps a window's
//!   result with the window's last millisecond (see windows.rs), so the timestamp the
//!   suppression keeps is that one rather than Kafka Streams' record time.
//! - Kafka Streams' `shutDownWhenFull` has no eosflow counterpart (an instance does not exit
//!   while it can go on): its two methods assert that the same input emits early instead.
//! - `maxBytes` counts eosflow's stored bytes, not Kafka Streams' heap estimate, so a bound
//!   holds a different number of keys (docs/coming-from-kafka-streams.md, "Semantics
//!   differences").
//! - Not ported: `shouldWorkBeforeGroupBy`, `shouldWorkBeforeJoinRight` and
//!   `shouldWorkBeforeJoinLeft` (a suppressed table can be streamed, not yet grouped or
//!   joined), `shouldWorkWithCogrouped` (`untilWindowCloses`).

use std::time::Duration;

use eosflow::dsl::{
    BufferConfig, Consumed, Grouped, KTable, Materialized, Produced, StreamsBuilder, Suppressed,
};
use eosflow::serdes::{I64Serde, Serde, StringSerde};
use eosflow::testing::{TestRecord, TopologyTestDriver};
use eosflow::topology::windows::{SessionWindows, TimeWindows, Windowed, WindowedSerde};
use eosflow::topology::Topology;

type Driver = TopologyTestDriver<Topology>;

const IN: &str = "input";
const OUT: &str = "output";
/// `KTableSuppressProcessorTest.ARBITRARY_LONG`.
const ARBITRARY_LONG: i64 = 5;
/// A hundred days (`Duration.ofDays(100)`).
const HUNDRED_DAYS: Duration = Duration::from_secs(100 * 24 * 3600);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn driver(builder: StreamsBuilder) -> Driver {
    TopologyTestDriver::new(builder.build().expect("a valid topology")).expect("a driver")
}

/// Each key's latest value of `input`, suppressed, to `output`.
fn latest(suppressed: Suppressed) -> Driver {
    let builder = StreamsBuilder::new();
    builder
        .stream(IN, Consumed::with(StringSerde, I64Serde))
        .to_table(Materialized::with(StringSerde, I64Serde).named("latest"))
        .suppress(suppressed)
        .to_stream()
        .to(OUT, Produced::with(StringSerde, I64Serde));
    driver(builder)
}

/// Pipes `key → value` (`None`: a tombstone) at `ts` into `input`.
fn put(d: &mut Driver, key: &str, value: Option<i64>, ts: i64) {
    let value = value.map(|v| I64Serde.serialize(&v).expect("a long"));
    d.pipe(TestRecord::new(IN, Some(key), value).timestamp(ts))
        .expect("piped");
}

/// What `topic` got since the last read: key, value (`None`: a tombstone), timestamp.
fn read(d: &mut Driver, topic: &str) -> Vec<(String, Option<i64>, i64)> {
    d.read_raw_output(topic)
        .into_iter()
        .map(|r| {
            let v = r
                .value
                .as_deref()
                .map(|v| I64Serde.deserialize(v).expect("a long"));
            (r.key_text(), v, r.timestamp.expect("a timestamp"))
        })
        .collect()
}

fn kvt(rows: &[(&str, i64, i64)]) -> Vec<(String, Option<i64>, i64)> {
    rows.iter()
        .map(|(k, v, t)| (k.to_string(), Some(*v), *t))
        .collect()
}

// ---------------------------------------------------------------------------------------
// KTableSuppressProcessorTest
// ---------------------------------------------------------------------------------------

// KTableSuppressProcessorTest#zeroTimeLimitShouldImmediatelyEmit
#[test]
fn zero_time_limit_should_immediately_emit() {
    let mut d = latest(Suppressed::until_time_limit(
        Duration::ZERO,
        BufferConfig::unbounded(),
    ));
    put(&mut d, "hey", Some(14), ARBITRARY_LONG);
    assert_eq!(read(&mut d, OUT), kvt(&[("hey", 14, ARBITRARY_LONG)]));
}

/// A count of `input` in time windows of 100 ms (or sessions with a gap of 100 ms),
/// suppressed, to `output`.
fn windowed_counts(session: bool, suppressed: Suppressed) -> Driver {
    let builder = StreamsBuilder::new();
    let grouped = builder
        .stream(IN, Consumed::with(StringSerde, StringSerde))
        .group_by_key();
    let windowed = WindowedSerde::new(StringSerde);
    let counts = Materialized::with(StringSerde, I64Serde).named("counts");
    if session {
        grouped
            .windowed_by_session(SessionWindows::with_inactivity_gap_no_grace(ms(100)))
            .count(counts)
            .suppress(suppressed)
            .to_stream()
            .to(OUT, Produced::with(windowed, I64Serde));
    } else {
        grouped
            .windowed_by(TimeWindows::of_size_no_grace(ms(100)))
            .count(counts)
            .suppress(suppressed)
            .to_stream()
            .to(OUT, Produced::with(windowed, I64Serde));
    }
    driver(builder)
}

/// What a windowed `output` got: key, window start, window end, count, timestamp.
fn read_windowed(d: &mut Driver) -> Vec<(String, i64, i64, i64, i64)> {
    let keys = WindowedSerde::new(StringSerde);
    d.read_raw_output(OUT)
        .into_iter()
        .map(|r| {
            let k: Windowed<String> = keys
                .deserialize(r.key.as_deref().expect("a key"))
                .expect("a windowed key");
            let v = I64Serde
                .deserialize(r.value.as_deref().expect("a count"))
                .expect("a long");
            (
                k.key,
                k.window.start,
                k.window.end,
                v,
                r.timestamp.expect("a timestamp"),
            )
        })
        .collect()
}

// KTableSuppressProcessorTest#windowedZeroTimeLimitShouldImmediatelyEmit
/// `hey [0, 100)` at 5: emitted at once. Kafka Streams' timestamp is the record's (5);
/// eosflow's windowed count stamps the window's last millisecond (99).
#[test]
fn windowed_zero_time_limit_should_immediately_emit() {
    let mut d = windowed_counts(
        false,
        Suppressed::until_time_limit(Duration::ZERO, BufferConfig::unbounded()),
    );
    d.pipe(TestRecord::new(IN, Some("hey"), Some("v")).timestamp(ARBITRARY_LONG))
        .expect("piped");
    assert_eq!(read_windowed(&mut d), vec![("hey".into(), 0, 100, 1, 99)]);
}

// KTableSuppressProcessorTest#intermediateSuppressionShouldBufferAndEmitLater
/// Time limit 1 ms: `hey@0` waits, and comes out (with its own timestamp) when `tick@1` moves
/// stream time to 1. Kafka Streams hands the node a `tick` change `null → null`; a table
/// forwards no change for a key it never had, so the tick here is an upsert.
#[test]
fn intermediate_suppression_should_buffer_and_emit_later() {
    let mut d = latest(Suppressed::until_time_limit(
        ms(1),
        BufferConfig::unbounded(),
    ));
    put(&mut d, "hey", Some(1), 0);
    assert!(read(&mut d, OUT).is_empty());
    put(&mut d, "tick", Some(0), 1);
    assert_eq!(read(&mut d, OUT), kvt(&[("hey", 1, 0)]));
}

// KTableSuppressProcessorTest#suppressShouldNotDropTombstonesForTimeWindows
/// `untilTimeLimit(0, maxRecords(0))` on a windowed table: the update is emitted at once.
/// Kafka Streams' harness hands over `hey [0, 100)` at 100, which no windowed count produces;
/// here `hey@100` updates `hey [100, 200)`.
/// Kafka Streams' comes out at 100 with the input record's header `k: v`; eosflow's at 99 (the
/// window stamp, see the module doc) and without it: a DSL record carries the headers its
/// nodes set, not the input's (the runtime writes its envelope headers). What an update does
/// carry, the suppression keeps (a unit test of `topology::suppress`).
#[test]
fn suppress_should_not_drop_tombstones_for_time_windows() {
    let mut d = windowed_counts(
        false,
        Suppressed::until_time_limit(Duration::ZERO, BufferConfig::max_records(0)),
    );
    d.pipe(
        TestRecord::new(IN, Some("hey"), Some("v"))
            .timestamp(100)
            .header("k", "v"),
    )
    .expect("piped");
    let out = d.read_raw_output(OUT);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].timestamp, Some(199));
    assert!(!out[0].headers.iter().any(|(k, _)| k == "k"));
}

// KTableSuppressProcessorTest#suppressShouldNotDropTombstonesForSessionWindows
/// The session `hey [100, 100]` is emitted at once (`maxRecords(0)`), timestamp its end.
#[test]
fn suppress_should_not_drop_tombstones_for_session_windows() {
    let mut d = windowed_counts(
        true,
        Suppressed::until_time_limit(Duration::ZERO, BufferConfig::max_records(0)),
    );
    d.pipe(TestRecord::new(IN, Some("hey"), Some("v")).timestamp(100))
        .expect("piped");
    assert_eq!(
        read_windowed(&mut d),
        vec![("hey".into(), 100, 100, 1, 100)]
    );
}

// KTableSuppressProcessorTest#suppressShouldNotDropTombstonesForKTable
/// The update (`null → 5`) comes out at once; so does a real tombstone, as a tombstone.
#[test]
fn suppress_should_not_drop_tombstones_for_k_table() {
    let mut d = latest(Suppressed::until_time_limit(
        Duration::ZERO,
        BufferConfig::max_records(0),
    ));
    put(&mut d, "hey", Some(ARBITRARY_LONG), 100);
    assert_eq!(read(&mut d, OUT), kvt(&[("hey", ARBITRARY_LONG, 100)]));
    put(&mut d, "hey", None, 101);
    assert_eq!(read(&mut d, OUT), vec![("hey".to_string(), None, 101)]);
}

// KTableSuppressProcessorTest#suppressShouldEmitWhenOverRecordCapacity
/// A hundred days' limit, one record of room: `dummyKey@101` pushes `hey@100` out early.
#[test]
fn suppress_should_emit_when_over_record_capacity() {
    let mut d = latest(Suppressed::until_time_limit(
        HUNDRED_DAYS,
        BufferConfig::max_records(1),
    ));
    put(&mut d, "hey", Some(ARBITRARY_LONG), 100);
    put(&mut d, "dummyKey", Some(ARBITRARY_LONG), 101);
    assert_eq!(read(&mut d, OUT), kvt(&[("hey", ARBITRARY_LONG, 100)]));
}

// KTableSuppressProcessorTest#suppressShouldEmitWhenOverByteCapacity
/// 60 bytes: `hey` alone fits (46 bytes in eosflow's count), `hey` and `dummyKey` (56) do not,
/// so `hey` is emitted early — the same cut as Kafka Streams'.
#[test]
fn suppress_should_emit_when_over_byte_capacity() {
    let mut d = latest(Suppressed::until_time_limit(
        HUNDRED_DAYS,
        BufferConfig::max_bytes(60),
    ));
    put(&mut d, "hey", Some(ARBITRARY_LONG), 100);
    assert!(read(&mut d, OUT).is_empty());
    put(&mut d, "dummyKey", Some(ARBITRARY_LONG), 101);
    assert_eq!(read(&mut d, OUT), kvt(&[("hey", ARBITRARY_LONG, 100)]));
}

// KTableSuppressProcessorTest#suppressShouldShutDownWhenOverRecordCapacity
/// Kafka Streams' `maxRecords(1).shutDownWhenFull()` throws on `dummyKey`; eosflow has no
/// such policy (docs/coming-from-kafka-streams.md): the same input emits the oldest entry
/// early and the instance goes on. Both were buffered at 100, so the oldest is the lesser key
/// (Kafka Streams' buffer order: time, then key bytes): `dummyKey`.
#[test]
fn suppress_should_shut_down_when_over_record_capacity() {
    let mut d = latest(Suppressed::until_time_limit(
        HUNDRED_DAYS,
        BufferConfig::max_records(1),
    ));
    put(&mut d, "hey", Some(ARBITRARY_LONG), 100);
    put(&mut d, "dummyKey", Some(ARBITRARY_LONG), 100);
    assert_eq!(read(&mut d, OUT), kvt(&[("dummyKey", ARBITRARY_LONG, 100)]));
    assert!(d.read_raw_output("input.DLT").is_empty());
}

// KTableSuppressProcessorTest#suppressShouldShutDownWhenOverByteCapacity
/// As above with `maxBytes(60).shutDownWhenFull()`: eosflow emits `dummyKey` early.
#[test]
fn suppress_should_shut_down_when_over_byte_capacity() {
    let mut d = latest(Suppressed::until_time_limit(
        HUNDRED_DAYS,
        BufferConfig::max_bytes(60),
    ));
    put(&mut d, "hey", Some(ARBITRARY_LONG), 100);
    put(&mut d, "dummyKey", Some(ARBITRARY_LONG), 100);
    assert_eq!(read(&mut d, OUT), kvt(&[("dummyKey", ARBITRARY_LONG, 100)]));
    assert!(d.read_raw_output("input.DLT").is_empty());
}

// ---------------------------------------------------------------------------------------
// SuppressScenarioTest
// ---------------------------------------------------------------------------------------

/// `table(input).groupBy((k, v) -> (v, k)).count()`: every update to `output-raw`, the
/// suppressed ones to `output-suppressed`.
fn value_counts(suppressed: Suppressed) -> Driver {
    let builder = StreamsBuilder::new();
    let counts: KTable<'_, String, i64> = builder
        .table(IN, Consumed::with(StringSerde, StringSerde))
        .group_by(
            |k: &String, v: &String| Some((v.clone(), k.clone())),
            Grouped::with(StringSerde, StringSerde),
        )
        .count(Materialized::with(StringSerde, I64Serde).named("counts"));
    counts
        .suppress(suppressed)
        .to_stream()
        .to("output-suppressed", Produced::with(StringSerde, I64Serde));
    counts
        .to_stream()
        .to("output-raw", Produced::with(StringSerde, I64Serde));
    driver(builder)
}

fn row(d: &mut Driver, key: &str, value: &str, ts: i64) {
    d.pipe(TestRecord::new(IN, Some(key), Some(value)).timestamp(ts))
        .expect("piped");
}

/// `k1 → v1 @0`, `k1 → v2 @1`, `k2 → v1 @2`, and their raw counts.
fn first_three(d: &mut Driver) {
    row(d, "k1", "v1", 0);
    row(d, "k1", "v2", 1);
    row(d, "k2", "v1", 2);
    assert_eq!(
        read(d, "output-raw"),
        kvt(&[("v1", 1, 0), ("v1", 0, 1), ("v2", 1, 1), ("v1", 1, 2)])
    );
}

// SuppressScenarioTest#shouldImmediatelyEmitEventsWithZeroEmitAfter
#[test]
fn should_immediately_emit_events_with_zero_emit_after() {
    let mut d = value_counts(Suppressed::until_time_limit(
        Duration::ZERO,
        BufferConfig::unbounded(),
    ));
    first_three(&mut d);
    assert_eq!(
        read(&mut d, "output-suppressed"),
        kvt(&[("v1", 1, 0), ("v1", 0, 1), ("v2", 1, 1), ("v1", 1, 2)])
    );
    row(&mut d, "x", "x", 3);
    assert_eq!(read(&mut d, "output-raw"), kvt(&[("x", 1, 3)]));
    assert_eq!(read(&mut d, "output-suppressed"), kvt(&[("x", 1, 3)]));
    row(&mut d, "x", "y", 4);
    assert_eq!(read(&mut d, "output-raw"), kvt(&[("x", 0, 4), ("y", 1, 4)]));
    assert_eq!(
        read(&mut d, "output-suppressed"),
        kvt(&[("x", 0, 4), ("y", 1, 4)])
    );
}

// SuppressScenarioTest#shouldSuppressIntermediateEventsWithTimeLimit
#[test]
fn should_suppress_intermediate_events_with_time_limit() {
    let mut d = value_counts(Suppressed::until_time_limit(
        ms(2),
        BufferConfig::unbounded(),
    ));
    first_three(&mut d);
    assert_eq!(read(&mut d, "output-suppressed"), kvt(&[("v1", 1, 2)]));
    // A "tick" only to advance stream time: now 3, so v2 (buffered at 1) is due.
    row(&mut d, "tick", "tick", 3);
    assert_eq!(read(&mut d, "output-raw"), kvt(&[("tick", 1, 3)]));
    assert_eq!(read(&mut d, "output-suppressed"), kvt(&[("v2", 1, 1)]));
    row(&mut d, "tick", "tock", 4);
    assert_eq!(
        read(&mut d, "output-raw"),
        kvt(&[("tick", 0, 4), ("tock", 1, 4)])
    );
    // tick is still buffered: first buffered at 3, and stream time is only 4.
    assert!(read(&mut d, "output-suppressed").is_empty());
}

// SuppressScenarioTest#shouldSuppressIntermediateEventsWithRecordLimit
#[test]
fn should_suppress_intermediate_events_with_record_limit() {
    let mut d = value_counts(Suppressed::until_time_limit(
        Duration::MAX,
        BufferConfig::max_records(1).emit_early_when_full(),
    ));
    first_three(&mut d);
    // Consecutive updates to v1 are suppressed into the latter; the last update waits until
    // another key comes along.
    assert_eq!(
        read(&mut d, "output-suppressed"),
        kvt(&[("v1", 0, 1), ("v2", 1, 1)])
    );
    row(&mut d, "x", "x", 3);
    assert_eq!(read(&mut d, "output-raw"), kvt(&[("x", 1, 3)]));
    assert_eq!(read(&mut d, "output-suppressed"), kvt(&[("v1", 1, 2)]));
}

// SuppressScenarioTest#shouldSuppressIntermediateEventsWithBytesLimit
/// `maxBytes(200)`: Kafka Streams' entries here are "a little over 100 bytes" (its heap
/// estimate), so two do not fit and it emits `v1 = 0 @1`, `v2 = 1 @1` after the first three
/// rows, then `v1 = 1 @2` after `x`. eosflow's entries are 44 bytes (a 2-byte key twice, an
/// 8-byte count, 32 bytes of times and flags), so four fit: nothing is emitted early until a
/// fifth key comes, and then the oldest goes first — the same order, a later cut
/// (docs/coming-from-kafka-streams.md, "Semantics differences").
#[test]
fn should_suppress_intermediate_events_with_bytes_limit() {
    let mut d = value_counts(Suppressed::until_time_limit(
        Duration::MAX,
        BufferConfig::max_bytes(200).emit_early_when_full(),
    ));
    first_three(&mut d);
    // Kafka Streams: [v1 = 0 @1, v2 = 1 @1]. eosflow: v1 and v2 (88 bytes) still fit.
    assert!(read(&mut d, "output-suppressed").is_empty());
    row(&mut d, "x", "x", 3);
    assert_eq!(read(&mut d, "output-raw"), kvt(&[("x", 1, 3)]));
    // Kafka Streams: [v1 = 1 @2]. eosflow: v1, v2, x (130 bytes) still fit.
    assert!(read(&mut d, "output-suppressed").is_empty());
    // Two more keys (y, z: 214 bytes) take the buffer past 200: the oldest, v1 (buffered at
    // 0, latest 1 @2), is emitted early.
    row(&mut d, "k3", "y", 4);
    row(&mut d, "k4", "z", 5);
    assert_eq!(read(&mut d, "output-suppressed"), kvt(&[("v1", 1, 2)]));
}
