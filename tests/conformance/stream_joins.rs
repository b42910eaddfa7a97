//! Stream-stream joins (`KStream::join_stream`, `left_join_stream`, `outer_join_stream`)
//! against Kafka Streams' `KStreamKStreamJoinTest`, `KStreamKStreamLeftJoinTest`,
//! `KStreamKStreamOuterJoinTest` and `KStreamKStreamSelfJoinTest`.
//!
//! Kafka Streams' tests read the join's results with a mock processor; here they go to a topic
//! read back with their keys, values and timestamps, in order. Kafka Streams'
//! `MockValueJoiner.TOSTRING_JOINER` is `left + "+" + right` with `null` for a missing side;
//! keys are Kafka's 4-byte integers. A record piped without a timestamp in Kafka Streams' test
//! has timestamp 0 (its input topics start at 0 and do not advance), so it is piped at 0 here.
//!
//! Two deliberate differences recur (docs/coming-from-kafka-streams.md, "Stream-stream
//! joins"): an unmatched left/outer result comes out only once final — when stream time passes
//! `t + before + after + grace`, where Kafka Streams emits a left record at `t + after + grace`
//! and a right one at `t + before + grace`, or at once when it arrives out of order — and a
//! record that joins nothing and that no later record can find any more goes to its input's
//! DLT as `late-record` where Kafka Streams drops it silently.

use std::fmt::Display;
use std::time::Duration;

use eosflow::dsl::{Consumed, Data, Produced, StreamJoined, StreamsBuilder};
use eosflow::serdes::{I64Serde, Serde, SerdeError, StringSerde};
use eosflow::testing::{OutputRecord, TestRecord, TopologyTestDriver};
use eosflow::topology::{JoinWindows, Topology};

/// Kafka's `IntegerSerde`: 4 big-endian bytes.
#[derive(Debug, Clone, Copy)]
struct I32Serde;

impl Serde<i32> for I32Serde {
    fn serialize(&self, value: &i32) -> Result<Vec<u8>, SerdeError> {
        Ok(value.to_be_bytes().to_vec())
    }
    fn deserialize(&self, bytes: &[u8]) -> Result<i32, SerdeError> {
        let b: [u8; 4] = bytes
            .try_into()
            .map_err(|_| SerdeError::new("an int is 4 bytes"))?;
        Ok(i32::from_be_bytes(b))
    }
}

const LEFT: &str = "topic1";
const RIGHT: &str = "topic2";
const OUT: &str = "joined";
/// Kafka Streams' tests' `expectedKeys`.
const KEYS: [i32; 4] = [0, 1, 2, 3];

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `JoinWindows.ofTimeDifferenceWithNoGrace(d)`.
fn no_grace(d: u64) -> JoinWindows {
    JoinWindows::of_time_difference_no_grace(ms(d))
}

/// `JoinWindows.ofTimeDifferenceAndGrace(d, grace)`.
fn with_grace(d: u64, grace: u64) -> JoinWindows {
    JoinWindows::of_time_difference_and_grace(ms(d), ms(grace))
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Inner,
    Left,
    Outer,
}

/// `TOSTRING_JOINER`'s text of one side.
fn show<T: Display>(v: Option<&T>) -> String {
    v.map_or_else(|| "null".to_string(), ToString::to_string)
}

/// A result as Kafka Streams' `KeyValueTimestamp`.
type Kvt = (i32, String, i64);

fn kvt(key: i32, value: &str, ts: i64) -> Kvt {
    (key, value.to_string(), ts)
}

/// `topic1` (integer keys, string values) joined with `topic2` (integer keys, `V2` values),
/// the results written to `joined`.
struct Join<V2> {
    d: TopologyTestDriver<Topology>,
    right: Box<dyn Serde<V2>>,
}

fn join<V2, S>(kind: Kind, windows: JoinWindows, right: S) -> Join<V2>
where
    V2: Data + Display,
    S: Serde<V2> + Clone + 'static,
{
    let b = StreamsBuilder::new();
    let s1 = b.stream(LEFT, Consumed::with(I32Serde, StringSerde));
    let s2 = b.stream(RIGHT, Consumed::with(I32Serde, right.clone()));
    let stores = StreamJoined::with(I32Serde, StringSerde, right.clone());
    let joined = match kind {
        Kind::Inner => s1.join_stream(&s2, |l, r| format!("{l}+{r}"), windows, stores),
        Kind::Left => s1.left_join_stream(
            &s2,
            |l, r: Option<&V2>| format!("{l}+{}", show(r)),
            windows,
            stores,
        ),
        Kind::Outer => s1.outer_join_stream(
            &s2,
            |l: Option<&String>, r: Option<&V2>| format!("{}+{}", show(l), show(r)),
            windows,
            stores,
        ),
    };
    joined.to(OUT, Produced::with(I32Serde, StringSerde));
    let topology = b.build().expect("valid topology");
    Join {
        d: TopologyTestDriver::new(topology).expect("driver"),
        right: Box::new(right),
    }
}

fn inner(windows: JoinWindows) -> Join<String> {
    join(Kind::Inner, windows, StringSerde)
}

fn left(windows: JoinWindows) -> Join<String> {
    join(Kind::Left, windows, StringSerde)
}

/// Kafka Streams' outer join tests join `topic1` with a stream of longs.
fn outer_long(windows: JoinWindows) -> Join<i64> {
    join(Kind::Outer, windows, I64Serde)
}

impl<V2> Join<V2> {
    fn pipe(&mut self, r: TestRecord) {
        self.d.pipe(r).expect("pipe");
    }

    /// `inputTopic1.pipeInput(key, value, t)`.
    fn l(&mut self, key: i32, value: &str, t: i64) {
        let r = TestRecord::new(LEFT, Some(key.to_be_bytes()), Some(value)).timestamp(t);
        self.pipe(r);
    }

    /// `inputTopic2.pipeInput(key, value, t)`.
    fn r(&mut self, key: i32, value: V2, t: i64) {
        let v = self.right.serialize(&value).expect("serializes");
        let r = TestRecord::new(RIGHT, Some(key.to_be_bytes()), Some(v)).timestamp(t);
        self.pipe(r);
    }

    /// `for key in keys: inputTopic1.pipeInput(key, prefix + key, t)`.
    fn ls(&mut self, keys: &[i32], prefix: &str, t: i64) {
        for &k in keys {
            self.l(k, &format!("{prefix}{k}"), t);
        }
    }

    /// `for i: inputTopic1.pipeInput(keys[i], prefix + keys[i], t + i)`.
    fn ls_rising(&mut self, keys: &[i32], prefix: &str, t: i64) {
        for (i, &k) in keys.iter().enumerate() {
            self.l(k, &format!("{prefix}{k}"), t + i as i64);
        }
    }

    /// `for key in keys: inputTopic2.pipeInput(key, value(key), t)`.
    fn rs(&mut self, keys: &[i32], value: impl Fn(i32) -> V2, t: i64) {
        for &k in keys {
            self.r(k, value(k), t);
        }
    }

    /// `for i: inputTopic2.pipeInput(keys[i], value(keys[i]), t + i)`.
    fn rs_rising(&mut self, keys: &[i32], value: impl Fn(i32) -> V2, t: i64) {
        for (i, &k) in keys.iter().enumerate() {
            self.r(k, value(k), t + i as i64);
        }
    }

    fn raw(&mut self) -> Vec<OutputRecord> {
        self.d.read_raw_output(OUT)
    }

    /// `processor.checkAndClearProcessResult`'s list: the results since the last call.
    fn out(&mut self) -> Vec<Kvt> {
        self.raw()
            .iter()
            .map(|r| {
                let key = r
                    .key
                    .as_deref()
                    .map(|k| I32Serde.deserialize(k).expect("int key"))
                    .expect("a key");
                (key, r.value_text(), r.timestamp.expect("a timestamp"))
            })
            .collect()
    }

    /// The records of `topic` dead-lettered since the last call, as (key, timestamp); each
    /// must be a late record.
    fn late(&mut self, topic: &str) -> Vec<(i32, i64)> {
        self.d
            .read_raw_output(&format!("{topic}.DLT"))
            .iter()
            .map(|r| {
                assert_eq!(r.dlt_class(), Some("late-record"), "{r:?}");
                let key = r.key.as_deref().expect("a key");
                let key = I32Serde.deserialize(key).expect("int key");
                (key, r.timestamp.expect("a timestamp"))
            })
            .collect()
    }

    /// Nothing was dead-lettered on either input.
    fn nothing_late(&mut self) {
        assert_eq!(self.late(LEFT), [], "left records dead-lettered");
        assert_eq!(self.late(RIGHT), [], "right records dead-lettered");
    }
}

/// Kafka Streams' `value + key` of a test's letter prefix.
fn s(prefix: &'static str) -> impl Fn(i32) -> String {
    move |k| format!("{prefix}{k}")
}

/// The outer join tests' right values: `key + n`.
fn plus(n: i64) -> impl Fn(i32) -> i64 {
    move |k| i64::from(k) + n
}

// ---------------------------------------------------------------------------------------------
// KStreamKStreamJoinTest
// ---------------------------------------------------------------------------------------------

/// `runJoin` of `KStreamKStreamJoinTest` (string keys, integer values, `Integer::sum`).
fn run_join(windows: JoinWindows) {
    let b = StreamsBuilder::new();
    let left = b.stream("left", Consumed::with(StringSerde, I64Serde));
    let right = b.stream("right", Consumed::with(StringSerde, I64Serde));
    left.join_stream(
        &right,
        |l, r| l + r,
        windows,
        StreamJoined::with(StringSerde, I64Serde, I64Serde),
    )
    .to("out", Produced::with(StringSerde, I64Serde));
    let mut d = TopologyTestDriver::new(b.build().expect("valid")).expect("driver");
    let pipe = |d: &mut TopologyTestDriver<Topology>, topic: &str, k: &str, v: i64, t: i64| {
        let r = TestRecord::new(topic, Some(k), Some(v.to_be_bytes())).timestamp(t);
        d.pipe(r).expect("pipe");
    };
    pipe(&mut d, "left", "A", 1, 1);
    pipe(&mut d, "left", "B", 1, 2);
    pipe(&mut d, "right", "A", 1, 1);
    pipe(&mut d, "right", "B", 2, 2);
    let got: Vec<(String, i64, Option<i64>)> = d
        .read_raw_output("out")
        .iter()
        .map(|r| {
            let v = I64Serde.deserialize(r.value.as_deref().expect("value"));
            (r.key_text(), v.expect("long"), r.timestamp)
        })
        .collect();
    assert_eq!(
        got,
        [("A".to_string(), 2, Some(1)), ("B".to_string(), 3, Some(2))]
    );
}

// KStreamKStreamJoinTest#shouldLogAndMeterOnSkippedRecordsWithNullValueWithBuiltInMetricsVersionLatest
// Left out: the log line and Kafka Streams' dropped-records metric (eosflow counts the record in
// `eosflow_join_dropped_records_total{reason="no-value"}`). The observable part: a record with a
// null value joins nothing, and is not dead-lettered either.
#[test]
fn should_log_and_meter_on_skipped_records_with_null_value_with_built_in_metrics_version_latest() {
    let mut j = inner(no_grace(100));
    j.r(0, "a0".to_string(), 0);
    j.pipe(TestRecord::new(LEFT, Some(0i32.to_be_bytes()), None::<&str>).timestamp(0));
    assert_eq!(j.out(), []);
    j.nothing_late();
}

// KStreamKStreamJoinTest#shouldJoinWithCustomStoreSuppliers
// Left out: the in-memory store suppliers (eosflow buffers every join in its own windowed,
// changelogged store); the join's results are Kafka Streams'.
#[test]
fn should_join_with_custom_store_suppliers() {
    run_join(no_grace(100));
}

// KStreamKStreamJoinTest#shouldJoinWithDslStoreSuppliersIfNoStoreSupplied
// Left out: counting the calls of a DslStoreSuppliers (eosflow has none); the results are
// Kafka Streams'.
#[test]
fn should_join_with_dsl_store_suppliers_if_no_store_supplied() {
    run_join(no_grace(100));
}

// KStreamKStreamJoinTest#shouldJoinWithDslStoreSuppliersFromStreamsConfig
// Left out: the DslStoreSuppliers named in the config (eosflow has none); the results are
// Kafka Streams'.
#[test]
fn should_join_with_dsl_store_suppliers_from_streams_config() {
    run_join(no_grace(100));
}

// KStreamKStreamJoinTest#shouldJoinWithNonTimestampedStore
// Left out: the store's type (eosflow's join buffer keeps each record's event time in its
// window key); the results are Kafka Streams'.
#[test]
fn should_join_with_non_timestamped_store() {
    run_join(no_grace(100));
}

/// `testJoin` and `testOuterJoin` of `KStreamKStreamJoinTest`: the same records, the same
/// pairs (every record finds a partner, so the outer join emits no unmatched result).
fn join_sequence(j: &mut Join<String>) {
    j.ls(&KEYS[..2], "A", 0);
    assert_eq!(j.out(), []);
    j.rs(&KEYS[..2], s("a"), 0);
    assert_eq!(j.out(), [kvt(0, "A0+a0", 0), kvt(1, "A1+a1", 0)]);
    j.ls(&KEYS, "B", 0);
    assert_eq!(j.out(), [kvt(0, "B0+a0", 0), kvt(1, "B1+a1", 0)]);
    j.rs(&KEYS, s("b"), 0);
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+b0", 0),
            kvt(0, "B0+b0", 0),
            kvt(1, "A1+b1", 0),
            kvt(1, "B1+b1", 0),
            kvt(2, "B2+b2", 0),
            kvt(3, "B3+b3", 0)
        ]
    );
    j.ls(&KEYS, "C", 0);
    assert_eq!(
        j.out(),
        [
            kvt(0, "C0+a0", 0),
            kvt(0, "C0+b0", 0),
            kvt(1, "C1+a1", 0),
            kvt(1, "C1+b1", 0),
            kvt(2, "C2+b2", 0),
            kvt(3, "C3+b3", 0)
        ]
    );
    j.rs(&KEYS[..2], s("c"), 0);
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+c0", 0),
            kvt(0, "B0+c0", 0),
            kvt(0, "C0+c0", 0),
            kvt(1, "A1+c1", 0),
            kvt(1, "B1+c1", 0),
            kvt(1, "C1+c1", 0)
        ]
    );
    j.nothing_late();
}

// KStreamKStreamJoinTest#testJoin
#[test]
fn test_join() {
    join_sequence(&mut inner(no_grace(100)));
}

// KStreamKStreamJoinTest#testOuterJoin
#[test]
fn join_test_outer_join() {
    join_sequence(&mut join(
        Kind::Outer,
        with_grace(100, 24 * 3_600_000),
        StringSerde,
    ));
}

// KStreamKStreamJoinTest#testWindowing
// The records Kafka Streams drops silently (they join nothing, and the store's retention hides
// them from every later record) go to their topic's DLT as `late-record` here.
#[test]
fn join_test_windowing() {
    let mut j = inner(no_grace(100));
    j.ls(&KEYS[..2], "A", 0);
    assert_eq!(j.out(), []);
    j.rs(&KEYS[..2], s("a"), 0);
    assert_eq!(j.out(), [kvt(0, "A0+a0", 0), kvt(1, "A1+a1", 0)]);
    j.ls_rising(&KEYS, "B", 1000);
    assert_eq!(j.out(), []);
    j.rs(&KEYS, s("b"), 1100);
    assert_eq!(
        j.out(),
        [
            kvt(0, "B0+b0", 1100),
            kvt(1, "B1+b1", 1100),
            kvt(2, "B2+b2", 1100),
            kvt(3, "B3+b3", 1100)
        ]
    );
    j.rs(&KEYS, s("c"), 1101);
    assert_eq!(
        j.out(),
        [
            kvt(1, "B1+c1", 1101),
            kvt(2, "B2+c2", 1101),
            kvt(3, "B3+c3", 1101)
        ]
    );
    j.rs(&KEYS, s("d"), 1102);
    assert_eq!(j.out(), [kvt(2, "B2+d2", 1102), kvt(3, "B3+d3", 1102)]);
    j.rs(&KEYS, s("e"), 1103);
    assert_eq!(j.out(), [kvt(3, "B3+e3", 1103)]);
    j.rs(&KEYS, s("f"), 1104);
    assert_eq!(j.out(), []);
    // Before the window's lower bound.
    j.rs(&KEYS, s("g"), 899);
    assert_eq!(j.out(), []);
    // Kafka Streams: nothing, dropped silently. eosflow: the same four records in topic2.DLT.
    assert_eq!(j.late(RIGHT), [(0, 899), (1, 899), (2, 899), (3, 899)]);
    j.rs(&KEYS, s("h"), 900);
    assert_eq!(j.out(), [kvt(0, "B0+h0", 1000)]);
    // Kafka Streams drops h1..h3 silently.
    assert_eq!(j.late(RIGHT), [(1, 900), (2, 900), (3, 900)]);
    j.rs(&KEYS, s("i"), 901);
    assert_eq!(j.out(), [kvt(0, "B0+i0", 1000), kvt(1, "B1+i1", 1001)]);
    assert_eq!(j.late(RIGHT), [(2, 901), (3, 901)]);
    j.rs(&KEYS, s("j"), 902);
    assert_eq!(
        j.out(),
        [
            kvt(0, "B0+j0", 1000),
            kvt(1, "B1+j1", 1001),
            kvt(2, "B2+j2", 1002)
        ]
    );
    assert_eq!(j.late(RIGHT), [(3, 902)]);
    j.rs(&KEYS, s("k"), 903);
    assert_eq!(
        j.out(),
        [
            kvt(0, "B0+k0", 1000),
            kvt(1, "B1+k1", 1001),
            kvt(2, "B2+k2", 1002),
            kvt(3, "B3+k3", 1003)
        ]
    );
    j.nothing_late();

    j.rs_rising(&KEYS, s("l"), 2000);
    assert_eq!(j.out(), []);
    j.ls(&KEYS, "C", 2100);
    assert_eq!(
        j.out(),
        [
            kvt(0, "C0+l0", 2100),
            kvt(1, "C1+l1", 2100),
            kvt(2, "C2+l2", 2100),
            kvt(3, "C3+l3", 2100)
        ]
    );
    j.ls(&KEYS, "D", 2101);
    assert_eq!(
        j.out(),
        [
            kvt(1, "D1+l1", 2101),
            kvt(2, "D2+l2", 2101),
            kvt(3, "D3+l3", 2101)
        ]
    );
    j.ls(&KEYS, "E", 2102);
    assert_eq!(j.out(), [kvt(2, "E2+l2", 2102), kvt(3, "E3+l3", 2102)]);
    j.ls(&KEYS, "F", 2103);
    assert_eq!(j.out(), [kvt(3, "F3+l3", 2103)]);
    j.ls(&KEYS, "G", 2104);
    assert_eq!(j.out(), []);
    j.ls(&KEYS, "H", 1899);
    assert_eq!(j.out(), []);
    assert_eq!(j.late(LEFT), [(0, 1899), (1, 1899), (2, 1899), (3, 1899)]);
    j.ls(&KEYS, "I", 1900);
    assert_eq!(j.out(), [kvt(0, "I0+l0", 2000)]);
    assert_eq!(j.late(LEFT), [(1, 1900), (2, 1900), (3, 1900)]);
    j.ls(&KEYS, "J", 1901);
    assert_eq!(j.out(), [kvt(0, "J0+l0", 2000), kvt(1, "J1+l1", 2001)]);
    assert_eq!(j.late(LEFT), [(2, 1901), (3, 1901)]);
    j.ls(&KEYS, "K", 1902);
    assert_eq!(
        j.out(),
        [
            kvt(0, "K0+l0", 2000),
            kvt(1, "K1+l1", 2001),
            kvt(2, "K2+l2", 2002)
        ]
    );
    assert_eq!(j.late(LEFT), [(3, 1902)]);
    j.ls(&KEYS, "L", 1903);
    assert_eq!(
        j.out(),
        [
            kvt(0, "L0+l0", 2000),
            kvt(1, "L1+l1", 2001),
            kvt(2, "L2+l2", 2002),
            kvt(3, "L3+l3", 2003)
        ]
    );
    j.nothing_late();
}

// KStreamKStreamJoinTest#testAsymmetricWindowingAfter
#[test]
fn test_asymmetric_windowing_after() {
    let mut j = inner(no_grace(0).after(ms(100)));
    j.ls_rising(&KEYS, "A", 1000);
    assert_eq!(j.out(), []);
    j.rs(&KEYS, s("a"), 999);
    assert_eq!(j.out(), []);
    j.rs(&KEYS, s("b"), 1000);
    assert_eq!(j.out(), [kvt(0, "A0+b0", 1000)]);
    j.rs(&KEYS, s("c"), 1001);
    assert_eq!(j.out(), [kvt(0, "A0+c0", 1001), kvt(1, "A1+c1", 1001)]);
    j.rs(&KEYS, s("d"), 1002);
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+d0", 1002),
            kvt(1, "A1+d1", 1002),
            kvt(2, "A2+d2", 1002)
        ]
    );
    j.rs(&KEYS, s("e"), 1003);
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+e0", 1003),
            kvt(1, "A1+e1", 1003),
            kvt(2, "A2+e2", 1003),
            kvt(3, "A3+e3", 1003)
        ]
    );
    j.rs(&KEYS, s("f"), 1100);
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+f0", 1100),
            kvt(1, "A1+f1", 1100),
            kvt(2, "A2+f2", 1100),
            kvt(3, "A3+f3", 1100)
        ]
    );
    j.rs(&KEYS, s("g"), 1101);
    assert_eq!(
        j.out(),
        [
            kvt(1, "A1+g1", 1101),
            kvt(2, "A2+g2", 1101),
            kvt(3, "A3+g3", 1101)
        ]
    );
    j.rs(&KEYS, s("h"), 1102);
    assert_eq!(j.out(), [kvt(2, "A2+h2", 1102), kvt(3, "A3+h3", 1102)]);
    j.rs(&KEYS, s("i"), 1103);
    assert_eq!(j.out(), [kvt(3, "A3+i3", 1103)]);
    j.rs(&KEYS, s("j"), 1104);
    assert_eq!(j.out(), []);
    j.nothing_late();
}

// KStreamKStreamJoinTest#testAsymmetricWindowingBefore
#[test]
fn test_asymmetric_windowing_before() {
    let mut j = inner(no_grace(0).before(ms(100)));
    j.ls_rising(&KEYS, "A", 1000);
    assert_eq!(j.out(), []);
    j.rs(&KEYS, s("a"), 899);
    assert_eq!(j.out(), []);
    j.rs(&KEYS, s("b"), 900);
    assert_eq!(j.out(), [kvt(0, "A0+b0", 1000)]);
    j.rs(&KEYS, s("c"), 901);
    assert_eq!(j.out(), [kvt(0, "A0+c0", 1000), kvt(1, "A1+c1", 1001)]);
    j.rs(&KEYS, s("d"), 902);
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+d0", 1000),
            kvt(1, "A1+d1", 1001),
            kvt(2, "A2+d2", 1002)
        ]
    );
    j.rs(&KEYS, s("e"), 903);
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+e0", 1000),
            kvt(1, "A1+e1", 1001),
            kvt(2, "A2+e2", 1002),
            kvt(3, "A3+e3", 1003)
        ]
    );
    j.rs(&KEYS, s("f"), 1000);
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+f0", 1000),
            kvt(1, "A1+f1", 1001),
            kvt(2, "A2+f2", 1002),
            kvt(3, "A3+f3", 1003)
        ]
    );
    j.rs(&KEYS, s("g"), 1001);
    assert_eq!(
        j.out(),
        [
            kvt(1, "A1+g1", 1001),
            kvt(2, "A2+g2", 1002),
            kvt(3, "A3+g3", 1003)
        ]
    );
    j.rs(&KEYS, s("h"), 1002);
    assert_eq!(j.out(), [kvt(2, "A2+h2", 1002), kvt(3, "A3+h3", 1003)]);
    j.rs(&KEYS, s("i"), 1003);
    assert_eq!(j.out(), [kvt(3, "A3+i3", 1003)]);
    j.rs(&KEYS, s("j"), 1004);
    assert_eq!(j.out(), []);
    j.nothing_late();
}

// ---------------------------------------------------------------------------------------------
// KStreamKStreamLeftJoinTest
// ---------------------------------------------------------------------------------------------

/// Kafka Streams' deprecated `JoinWindows.of(d)`: 24 hours of grace by default.
fn old_api(d: u64) -> JoinWindows {
    with_grace(d, 24 * 3_600_000)
}

// KStreamKStreamLeftJoinTest#testLeftJoinWithSpuriousResultFixDisabledOldApi
// Kafka Streams' deprecated `JoinWindows.of` turns its spurious-result fix off: each left record
// that finds nothing is joined with null at once, A0+null@0 and A1+null@0 before the pairs.
// eosflow has no such mode: an unmatched result is emitted only once final (here 24 h later),
// so only the pairs come out.
#[test]
fn test_left_join_with_spurious_result_fix_disabled_old_api() {
    let mut j = left(old_api(100));
    j.ls(&KEYS[..2], "A", 0);
    // Kafka Streams: (0,"A0+null",0), (1,"A1+null",0).
    assert_eq!(j.out(), []);
    j.rs(&KEYS[..2], s("a"), 0);
    assert_eq!(j.out(), [kvt(0, "A0+a0", 0), kvt(1, "A1+a1", 0)]);
}

// KStreamKStreamLeftJoinTest#testLeftJoinDuplicatesWithSpuriousResultFixDisabledOldApi
// As above: Kafka Streams' A0+null@0 and A0-0+null@0 (spurious-result fix off) are not emitted.
#[test]
fn test_left_join_duplicates_with_spurious_result_fix_disabled_old_api() {
    let mut j = left(with_grace(100, 10));
    j.l(0, "A0", 0);
    j.l(0, "A0-0", 0);
    j.r(0, "a0".into(), 0);
    // Kafka Streams: (0,"A0+null",0), (0,"A0-0+null",0), then the two pairs.
    assert_eq!(j.out(), [kvt(0, "A0+a0", 0), kvt(0, "A0-0+a0", 0)]);
}

// KStreamKStreamLeftJoinTest#testLeftJoinDuplicates
#[test]
fn test_left_join_duplicates() {
    let mut j = left(with_grace(100, 10));
    j.l(0, "A0", 0);
    j.l(0, "A0-0", 0);
    j.r(1, "a0".into(), 111);
    j.r(2, "dummy".into(), 500);
    assert_eq!(j.out(), [kvt(0, "A0+null", 0), kvt(0, "A0-0+null", 0)]);
    j.l(2, "A2", 1000);
    j.l(2, "A2-0", 1000);
    j.r(2, "a2".into(), 1001);
    assert_eq!(j.out(), [kvt(2, "A2+a2", 1001), kvt(2, "A2-0+a2", 1001)]);
    j.r(3, "a3".into(), 315);
    assert_eq!(j.out(), []);
    // Kafka Streams drops a3@315 silently (nothing to join, expired in its store at once).
    assert_eq!(j.late(RIGHT), [(3, 315)]);
    assert_eq!(j.late(LEFT), []);
}

// KStreamKStreamLeftJoinTest#testLeftExpiredNonJoinedRecordsAreEmittedByTheLeftProcessor
#[test]
fn left_join_test_left_expired_non_joined_records_are_emitted_by_the_left_processor() {
    let mut j = left(with_grace(100, 0));
    j.l(0, "A0", 1);
    j.l(1, "A1", 2);
    j.l(0, "A0-0", 3);
    assert_eq!(j.out(), []);
    j.r(1, "a1".into(), 3);
    assert_eq!(j.out(), [kvt(1, "A1+a1", 3)]);
    j.l(2, "dummy", 401);
    assert_eq!(j.out(), [kvt(0, "A0+null", 1), kvt(0, "A0-0+null", 3)]);
    j.r(2, "dummy".into(), 401);
    assert_eq!(j.out(), [kvt(2, "dummy+dummy", 401)]);
    j.nothing_late();
}

// KStreamKStreamLeftJoinTest#testLeftExpiredNonJoinedRecordsAreEmittedByTheRightProcessor
#[test]
fn left_join_test_left_expired_non_joined_records_are_emitted_by_the_right_processor() {
    let mut j = left(with_grace(100, 0));
    j.l(0, "A0", 1);
    j.l(1, "A1", 2);
    j.l(0, "A0-0", 3);
    assert_eq!(j.out(), []);
    j.r(1, "a1".into(), 3);
    assert_eq!(j.out(), [kvt(1, "A1+a1", 3)]);
    j.r(2, "dummy".into(), 401);
    assert_eq!(j.out(), [kvt(0, "A0+null", 1), kvt(0, "A0-0+null", 3)]);
    j.l(2, "dummy", 402);
    assert_eq!(j.out(), [kvt(2, "dummy+dummy", 402)]);
    j.nothing_late();
}

// KStreamKStreamLeftJoinTest#testRightNonJoinedRecordsAreNeverEmittedByTheLeftProcessor
#[test]
fn test_right_non_joined_records_are_never_emitted_by_the_left_processor() {
    let mut j = left(with_grace(100, 0));
    j.r(0, "A0".into(), 1);
    j.r(1, "A1".into(), 2);
    j.r(0, "A0-0".into(), 3);
    assert_eq!(j.out(), []);
    j.l(1, "a1", 3);
    assert_eq!(j.out(), [kvt(1, "a1+A1", 3)]);
    j.l(2, "dummy", 401);
    assert_eq!(j.out(), []);
    j.r(2, "dummy".into(), 402);
    assert_eq!(j.out(), [kvt(2, "dummy+dummy", 402)]);
    j.nothing_late();
}

// KStreamKStreamLeftJoinTest#testRightNonJoinedRecordsAreNeverEmittedByTheRightProcessor
#[test]
fn test_right_non_joined_records_are_never_emitted_by_the_right_processor() {
    let mut j = left(no_grace(100));
    j.r(0, "A0".into(), 1);
    j.r(1, "A1".into(), 2);
    j.r(0, "A0-0".into(), 3);
    assert_eq!(j.out(), []);
    j.l(1, "a1", 3);
    assert_eq!(j.out(), [kvt(1, "a1+A1", 3)]);
    j.r(2, "dummy".into(), 401);
    assert_eq!(j.out(), []);
    j.l(2, "dummy", 402);
    assert_eq!(j.out(), [kvt(2, "dummy+dummy", 402)]);
    j.nothing_late();
}

// KStreamKStreamLeftJoinTest#testLeftJoinedRecordsWithZeroAfterAreEmitted
// With after = 0 Kafka Streams emits a left record joined with null as soon as stream time
// passes it (A0+null@1000, A1+null@1001, A2+null@1002 while A1..A3 arrive) and then joins the
// same records with a0..a3 anyway: a right record may come up to `before` = 100 ms earlier.
// eosflow waits those 100 ms: every A joins, and no `+null` result comes out.
#[test]
fn test_left_joined_records_with_zero_after_are_emitted() {
    let mut j = left(no_grace(100).after(Duration::ZERO));
    j.ls_rising(&KEYS, "A", 1000);
    // Kafka Streams: (0,"A0+null",1000), (1,"A1+null",1001), (2,"A2+null",1002).
    assert_eq!(j.out(), []);
    j.rs(&KEYS, s("a"), 999);
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+a0", 1000),
            kvt(1, "A1+a1", 1001),
            kvt(2, "A2+a2", 1002),
            kvt(3, "A3+a3", 1003)
        ]
    );
    j.rs(&KEYS, s("b"), 1000);
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+b0", 1000),
            kvt(1, "A1+b1", 1001),
            kvt(2, "A2+b2", 1002),
            kvt(3, "A3+b3", 1003)
        ]
    );
    j.rs(&KEYS, s("c"), 1001);
    assert_eq!(
        j.out(),
        [
            kvt(1, "A1+c1", 1001),
            kvt(2, "A2+c2", 1002),
            kvt(3, "A3+c3", 1003)
        ]
    );
    j.rs(&KEYS, s("d"), 1002);
    assert_eq!(j.out(), [kvt(2, "A2+d2", 1002), kvt(3, "A3+d3", 1003)]);
    j.rs(&KEYS, s("e"), 1003);
    assert_eq!(j.out(), [kvt(3, "A3+e3", 1003)]);
    j.rs(&KEYS, s("f"), 1100);
    assert_eq!(j.out(), []);
    j.nothing_late();
}

/// `runLeftJoin` of `KStreamKStreamLeftJoinTest`.
fn run_left_join(windows: JoinWindows) {
    let mut j = left(windows);
    j.ls(&KEYS[..2], "A", 0);
    assert_eq!(j.out(), []);
    j.rs(&KEYS[..2], s("a"), 0);
    assert_eq!(j.out(), [kvt(0, "A0+a0", 0), kvt(1, "A1+a1", 0)]);
    j.ls(&KEYS[..3], "B", 0);
    assert_eq!(j.out(), [kvt(0, "B0+a0", 0), kvt(1, "B1+a1", 0)]);
    j.rs(&KEYS, s("b"), 0);
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+b0", 0),
            kvt(0, "B0+b0", 0),
            kvt(1, "A1+b1", 0),
            kvt(1, "B1+b1", 0),
            kvt(2, "B2+b2", 0)
        ]
    );
    j.ls(&KEYS, "C", 0);
    assert_eq!(
        j.out(),
        [
            kvt(0, "C0+a0", 0),
            kvt(0, "C0+b0", 0),
            kvt(1, "C1+a1", 0),
            kvt(1, "C1+b1", 0),
            kvt(2, "C2+b2", 0),
            kvt(3, "C3+b3", 0)
        ]
    );
    j.l(0, "dummy", 1000);
    assert_eq!(j.out(), []);
    j.nothing_late();
}

// KStreamKStreamLeftJoinTest#testLeftJoinWithInMemoryCustomSuppliers
// Left out: the in-memory store suppliers (eosflow has one kind of join buffer).
#[test]
fn test_left_join_with_in_memory_custom_suppliers() {
    run_left_join(with_grace(100, 0));
}

// KStreamKStreamLeftJoinTest#testLeftJoinWithDefaultSuppliers
#[test]
fn test_left_join_with_default_suppliers() {
    run_left_join(no_grace(100));
}

// KStreamKStreamLeftJoinTest#testOrdering
// Kafka Streams emits A0+null@0 when a1@110 moves stream time past 0 + after (100) and before
// a1's pair. eosflow: A0 can still be joined by a right record at 0..100 until stream time
// passes 0 + before + after = 200, so only the pair comes out here, A0+null later.
#[test]
fn left_join_test_ordering() {
    let mut j = left(no_grace(100));
    j.l(0, "A0", 0);
    j.l(1, "A1", 100);
    assert_eq!(j.out(), []);
    j.r(1, "a1".into(), 110);
    // Kafka Streams: (0,"A0+null",0), (1,"A1+a1",110).
    assert_eq!(j.out(), [kvt(1, "A1+a1", 110)]);
    j.r(9, "z".into(), 201);
    assert_eq!(j.out(), [kvt(0, "A0+null", 0)]);
}

// KStreamKStreamLeftJoinTest#testGracePeriod
#[test]
fn left_join_test_grace_period() {
    let mut j = left(with_grace(100, 10));
    j.ls(&KEYS[..2], "A", 0);
    assert_eq!(j.out(), []);
    j.rs(&KEYS, s("a"), 101);
    assert_eq!(j.out(), []);
    j.r(0, "dummy".into(), 1201);
    assert_eq!(j.out(), [kvt(0, "A0+null", 0), kvt(1, "A1+null", 0)]);
    j.nothing_late();
}

/// The part the left and the outer join tests' `testUpperWindowBound` and
/// `testLowerWindowBound` share: after right records `b(k)` at 1000 + k, left records `B`..`F`
/// at 1100..1104, a record at 1405 that closes them, then left records `G`..`K` at 899..903.
fn window_bounds<V2: Display>(j: &mut Join<V2>, b: impl Fn(i32) -> V2) {
    let pair = |l: &str, k: i32, t: i64| kvt(k, &format!("{l}{k}+{}", b(k)), t);
    let alone = |l: &str, k: i32, t: i64| kvt(k, &format!("{l}{k}+null"), t);
    j.ls(&KEYS, "B", 1100);
    let b_pairs: Vec<Kvt> = KEYS.iter().map(|&k| pair("B", k, 1100)).collect();
    assert_eq!(j.out(), b_pairs);
    j.ls(&KEYS, "C", 1101);
    assert_eq!(
        j.out(),
        [pair("C", 1, 1101), pair("C", 2, 1101), pair("C", 3, 1101)]
    );
    j.ls(&KEYS, "D", 1102);
    assert_eq!(j.out(), [pair("D", 2, 1102), pair("D", 3, 1102)]);
    j.ls(&KEYS, "E", 1103);
    assert_eq!(j.out(), [pair("E", 3, 1103)]);
    j.ls(&KEYS, "F", 1104);
    assert_eq!(j.out(), []);
    j.l(0, "dummy", 1405);
    assert_eq!(
        j.out(),
        [
            alone("C", 0, 1101),
            alone("D", 0, 1102),
            alone("D", 1, 1102),
            alone("E", 0, 1103),
            alone("E", 1, 1103),
            alone("E", 2, 1103),
            alone("F", 0, 1104),
            alone("F", 1, 1104),
            alone("F", 2, 1104),
            alone("F", 3, 1104)
        ]
    );
    // testLowerWindowBound
    j.ls(&KEYS, "G", 899);
    let g_alone: Vec<Kvt> = KEYS.iter().map(|&k| alone("G", k, 899)).collect();
    assert_eq!(j.out(), g_alone);
    j.ls(&KEYS, "H", 900);
    assert_eq!(
        j.out(),
        [
            pair("H", 0, 1000),
            alone("H", 1, 900),
            alone("H", 2, 900),
            alone("H", 3, 900)
        ]
    );
    j.ls(&KEYS, "I", 901);
    assert_eq!(
        j.out(),
        [
            pair("I", 0, 1000),
            pair("I", 1, 1001),
            alone("I", 2, 901),
            alone("I", 3, 901)
        ]
    );
    j.ls(&KEYS, "J", 902);
    assert_eq!(
        j.out(),
        [
            pair("J", 0, 1000),
            pair("J", 1, 1001),
            pair("J", 2, 1002),
            alone("J", 3, 902)
        ]
    );
    j.ls(&KEYS, "K", 903);
    assert_eq!(
        j.out(),
        [
            pair("K", 0, 1000),
            pair("K", 1, 1001),
            pair("K", 2, 1002),
            pair("K", 3, 1003)
        ]
    );
}

// KStreamKStreamLeftJoinTest#testWindowing (with its testUpperWindowBound and
// testLowerWindowBound)
#[test]
fn left_join_test_windowing() {
    let mut j = left(no_grace(100));
    j.ls(&KEYS[..2], "A", 0);
    assert_eq!(j.out(), []);
    j.rs(&KEYS, s("a"), 0);
    assert_eq!(j.out(), [kvt(0, "A0+a0", 0), kvt(1, "A1+a1", 0)]);
    // testUpperWindowBound
    j.rs_rising(&KEYS, s("b"), 1000);
    assert_eq!(j.out(), []);
    window_bounds(&mut j, s("b"));
    j.l(0, "dummy", 1203);
    assert_eq!(j.out(), [kvt(0, "dummy+null", 1203)]);
    j.nothing_late();
}

// KStreamKStreamLeftJoinTest#shouldNotEmitLeftJoinResultForAsymmetricWindow
#[test]
fn should_not_emit_left_join_result_for_asymmetric_window() {
    let mut j = left(no_grace(100).before(Duration::ZERO));
    j.ls_rising(&KEYS[..2], "A", 0);
    assert_eq!(j.out(), []);
    j.r(0, "a0".into(), 100);
    assert_eq!(j.out(), [kvt(0, "A0+a0", 100)]);
    j.r(1, "a1".into(), 102);
    assert_eq!(j.out(), [kvt(1, "A1+null", 1)]);
    j.nothing_late();
}

// ---------------------------------------------------------------------------------------------
// KStreamKStreamOuterJoinTest
// ---------------------------------------------------------------------------------------------

// KStreamKStreamOuterJoinTest#testOuterJoinDuplicatesWithFixDisabledOldApi
// Kafka Streams' deprecated `JoinWindows.of` turns the spurious-result fix off: A0+null@0 and
// A0-0+null@0 come out at once, before the pairs, and null+21@0 at once. eosflow emits an
// unmatched result only once final: here only the pairs, null+21 after stream time passes
// 0 + 100 + 100 + 10.
#[test]
fn test_outer_join_duplicates_with_fix_disabled_old_api() {
    let mut j = outer_long(with_grace(100, 10));
    j.l(0, "A0", 0);
    j.l(0, "A0-0", 0);
    j.r(0, 10, 0);
    j.r(1, 21, 0);
    // Kafka Streams: (0,"A0+null",0), (0,"A0-0+null",0), (0,"A0+10",0), (0,"A0-0+10",0),
    // (1,"null+21",0).
    assert_eq!(j.out(), [kvt(0, "A0+10", 0), kvt(0, "A0-0+10", 0)]);
    j.r(9, 0, 211);
    assert_eq!(j.out(), [kvt(1, "null+21", 0)]);
}

// KStreamKStreamOuterJoinTest#testOuterJoinDuplicates
// Unmatched results of the same event time: Kafka Streams emits the right side's first (its
// outer store is ordered by time, then right before left, then key); eosflow the left side's
// first (each side's timers, left then right, then by key).
#[test]
fn test_outer_join_duplicates() {
    let mut j = outer_long(with_grace(100, 10));
    j.l(0, "A0", 0);
    j.l(0, "A0-0", 0);
    j.r(1, 11, 0);
    j.r(1, 12, 0);
    j.r(1, 10, 111);
    j.r(3, 100, 211);
    // Kafka Streams: (1,"null+11",0), (1,"null+12",0), (0,"A0+null",0), (0,"A0-0+null",0).
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+null", 0),
            kvt(0, "A0-0+null", 0),
            kvt(1, "null+11", 0),
            kvt(1, "null+12", 0)
        ]
    );
    j.l(2, "A2", 200);
    j.l(2, "A2-0", 200);
    j.r(2, 13, 201);
    j.r(2, 14, 201);
    assert_eq!(
        j.out(),
        [
            kvt(2, "A2+13", 201),
            kvt(2, "A2-0+13", 201),
            kvt(2, "A2+14", 201),
            kvt(2, "A2-0+14", 201)
        ]
    );
    j.r(3, 100, 1500);
    assert_eq!(j.out(), [kvt(1, "null+10", 111), kvt(3, "null+100", 211)]);
    j.nothing_late();
}

// KStreamKStreamOuterJoinTest#testLeftExpiredNonJoinedRecordsAreEmittedByTheLeftProcessor
#[test]
fn outer_join_test_left_expired_non_joined_records_are_emitted_by_the_left_processor() {
    let mut j = outer_long(no_grace(100));
    j.l(0, "A0", 1);
    j.l(1, "A1", 2);
    j.l(0, "A0-0", 3);
    assert_eq!(j.out(), []);
    j.r(1, 11, 3);
    assert_eq!(j.out(), [kvt(1, "A1+11", 3)]);
    j.l(2, "dummy", 401);
    assert_eq!(j.out(), [kvt(0, "A0+null", 1), kvt(0, "A0-0+null", 3)]);
    j.r(2, 100, 401);
    assert_eq!(j.out(), [kvt(2, "dummy+100", 401)]);
    j.nothing_late();
}

// KStreamKStreamOuterJoinTest#testLeftExpiredNonJoinedRecordsAreEmittedByTheRightProcessor
#[test]
fn outer_join_test_left_expired_non_joined_records_are_emitted_by_the_right_processor() {
    let mut j = outer_long(with_grace(100, 0));
    j.l(0, "A0", 1);
    j.l(1, "A1", 2);
    j.l(0, "A0-0", 3);
    assert_eq!(j.out(), []);
    j.r(1, 11, 3);
    assert_eq!(j.out(), [kvt(1, "A1+11", 3)]);
    j.r(2, 100, 401);
    assert_eq!(j.out(), [kvt(0, "A0+null", 1), kvt(0, "A0-0+null", 3)]);
    j.l(2, "dummy", 402);
    assert_eq!(j.out(), [kvt(2, "dummy+100", 402)]);
    j.nothing_late();
}

// KStreamKStreamOuterJoinTest#testRightExpiredNonJoinedRecordsAreEmittedByTheLeftProcessor
#[test]
fn test_right_expired_non_joined_records_are_emitted_by_the_left_processor() {
    let mut j = outer_long(no_grace(100));
    j.r(0, 10, 1);
    j.r(1, 11, 2);
    j.r(0, 12, 3);
    assert_eq!(j.out(), []);
    j.l(1, "A1", 3);
    assert_eq!(j.out(), [kvt(1, "A1+11", 3)]);
    j.l(2, "dummy", 401);
    assert_eq!(j.out(), [kvt(0, "null+10", 1), kvt(0, "null+12", 3)]);
    j.r(2, 100, 402);
    assert_eq!(j.out(), [kvt(2, "dummy+100", 402)]);
    j.nothing_late();
}

// KStreamKStreamOuterJoinTest#testRightExpiredNonJoinedRecordsAreEmittedByTheRightProcessor
#[test]
fn test_right_expired_non_joined_records_are_emitted_by_the_right_processor() {
    let mut j = outer_long(with_grace(100, 0));
    j.r(0, 10, 1);
    j.r(1, 11, 2);
    j.r(0, 12, 3);
    assert_eq!(j.out(), []);
    j.l(1, "A1", 3);
    assert_eq!(j.out(), [kvt(1, "A1+11", 3)]);
    j.r(2, 100, 401);
    assert_eq!(j.out(), [kvt(0, "null+10", 1), kvt(0, "null+12", 3)]);
    j.l(2, "dummy", 402);
    assert_eq!(j.out(), [kvt(2, "dummy+100", 402)]);
    j.nothing_late();
}

// KStreamKStreamOuterJoinTest#testOrdering
// As in the left join's testOrdering: Kafka Streams emits A0+null@0 before a1's pair at stream
// time 110; eosflow once stream time passes 0 + 100 + 100.
#[test]
fn outer_join_test_ordering() {
    let mut j = outer_long(no_grace(100));
    j.l(0, "A0", 0);
    j.l(1, "A1", 100);
    assert_eq!(j.out(), []);
    j.r(1, 11, 110);
    // Kafka Streams: (0,"A0+null",0), (1,"A1+11",110).
    assert_eq!(j.out(), [kvt(1, "A1+11", 110)]);
    j.r(9, 0, 201);
    assert_eq!(j.out(), [kvt(0, "A0+null", 0)]);
}

// KStreamKStreamOuterJoinTest#testGracePeriod
#[test]
fn outer_join_test_grace_period() {
    let mut j = outer_long(with_grace(100, 10));
    j.l(0, "A0", 0);
    j.r(1, 11, 0);
    assert_eq!(j.out(), []);
    j.l(1, "A1", 101);
    j.r(0, 10, 101);
    assert_eq!(j.out(), []);
    j.r(0, 100, 112);
    // Kafka Streams: (1,"null+11",0), (0,"A0+null",0) — at stream time 112, past 0 + 100 + 10.
    // eosflow: A0 and 11 can still be joined (by a record at 0..100 within its grace) until
    // stream time passes 0 + 100 + 100 + 10 = 210.
    assert_eq!(j.out(), []);
    j.r(9, 0, 211);
    // Kafka Streams orders unmatched results of one event time right side first; eosflow
    // left side first (see testOuterJoinDuplicates).
    assert_eq!(j.out(), [kvt(0, "A0+null", 0), kvt(1, "null+11", 0)]);
}

// KStreamKStreamOuterJoinTest#testEmitAllNonJoinedResultsForAsymmetricWindow
// Kafka Streams emits null+12@31 at stream time 37 (31 + before 5 passed) and A0+null@29,
// null+13@36, null+14@37 at 50. eosflow emits each once stream time passes t + 5 + 20
// (A0@29 at 55, A1@30 at 56, 12@31 at 57, 13@36 at 62, 14@37 at 63).
#[test]
fn test_emit_all_non_joined_results_for_asymmetric_window() {
    let mut j = outer_long(no_grace(5).after(ms(20)));
    j.l(0, "A0", 29);
    assert_eq!(j.out(), []);
    j.l(1, "A1", 30);
    assert_eq!(j.out(), []);
    j.r(2, 12, 31);
    assert_eq!(j.out(), []);
    j.r(3, 13, 36);
    assert_eq!(j.out(), []);
    j.r(4, 14, 37);
    // Kafka Streams: (2,"null+12",31).
    assert_eq!(j.out(), []);
    j.r(5, 15, 50);
    // Kafka Streams: (0,"A0+null",29), (3,"null+13",36), (4,"null+14",37).
    assert_eq!(j.out(), []);
    j.r(9, 0, 62);
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+null", 29),
            kvt(1, "A1+null", 30),
            kvt(2, "null+12", 31),
            kvt(3, "null+13", 36)
        ]
    );
    j.r(9, 0, 63);
    assert_eq!(j.out(), [kvt(4, "null+14", 37)]);
}

/// `runOuterJoin` of `KStreamKStreamOuterJoinTest`.
fn run_outer_join(windows: JoinWindows) {
    let mut j = outer_long(windows);
    j.ls(&KEYS[..2], "A", 0);
    assert_eq!(j.out(), []);
    j.rs(&KEYS[..2], plus(10), 0);
    assert_eq!(j.out(), [kvt(0, "A0+10", 0), kvt(1, "A1+11", 0)]);
    j.ls(&KEYS[..3], "B", 0);
    assert_eq!(j.out(), [kvt(0, "B0+10", 0), kvt(1, "B1+11", 0)]);
    j.rs(&KEYS, plus(20), 0);
    assert_eq!(
        j.out(),
        [
            kvt(0, "A0+20", 0),
            kvt(0, "B0+20", 0),
            kvt(1, "A1+21", 0),
            kvt(1, "B1+21", 0),
            kvt(2, "B2+22", 0)
        ]
    );
    j.ls(&KEYS, "C", 0);
    assert_eq!(
        j.out(),
        [
            kvt(0, "C0+10", 0),
            kvt(0, "C0+20", 0),
            kvt(1, "C1+11", 0),
            kvt(1, "C1+21", 0),
            kvt(2, "C2+22", 0),
            kvt(3, "C3+23", 0)
        ]
    );
    j.l(0, "dummy", 400);
    assert_eq!(j.out(), []);
    j.nothing_late();
}

// KStreamKStreamOuterJoinTest#testOuterJoinWithInMemoryCustomSuppliers
// Left out: the in-memory store suppliers (eosflow has one kind of join buffer).
#[test]
fn test_outer_join_with_in_memory_custom_suppliers() {
    run_outer_join(no_grace(100));
}

// KStreamKStreamOuterJoinTest#testOuterJoinWithDefaultSuppliers
#[test]
fn test_outer_join_with_default_suppliers() {
    run_outer_join(no_grace(100));
}

// KStreamKStreamOuterJoinTest#testWindowing (with its testUpperWindowBound and
// testLowerWindowBound)
#[test]
fn outer_join_test_windowing() {
    let mut j = outer_long(no_grace(100));
    j.ls(&KEYS[..2], "A", 0);
    assert_eq!(j.out(), []);
    j.rs(&KEYS, plus(10), 0);
    assert_eq!(j.out(), [kvt(0, "A0+10", 0), kvt(1, "A1+11", 0)]);
    // testUpperWindowBound
    j.rs_rising(&KEYS, plus(20), 1000);
    assert_eq!(j.out(), [kvt(2, "null+12", 0), kvt(3, "null+13", 0)]);
    window_bounds(&mut j, plus(20));
    j.l(0, "dummy", 1103);
    assert_eq!(j.out(), [kvt(0, "dummy+null", 1103)]);
    j.nothing_late();
}

// KStreamKStreamOuterJoinTest#testShouldNotEmitLeftJoinResultForAsymmetricBeforeWindow
// Kafka Streams emits null+11@102 at stream time 103 (102 + before 0 passed); eosflow waits
// until stream time passes 102 + 0 + 100 (a left record at 2..102 could still join it).
#[test]
fn test_should_not_emit_left_join_result_for_asymmetric_before_window() {
    let mut j = outer_long(no_grace(100).before(Duration::ZERO));
    j.ls_rising(&KEYS[..2], "A", 0);
    assert_eq!(j.out(), []);
    j.r(0, 10, 100);
    assert_eq!(j.out(), [kvt(0, "A0+10", 100)]);
    j.r(1, 11, 102);
    assert_eq!(j.out(), [kvt(1, "A1+null", 1)]);
    j.r(2, 12, 103);
    // Kafka Streams: (1,"null+11",102).
    assert_eq!(j.out(), []);
    j.l(2, "A2", 103);
    assert_eq!(j.out(), [kvt(2, "A2+12", 103)]);
    j.nothing_late();
}

// KStreamKStreamOuterJoinTest#testShouldNotEmitLeftJoinResultForAsymmetricAfterWindow
// Kafka Streams emits A0+null@0 when A1@1 arrives (0 + after 0 passed); eosflow when stream
// time passes 0 + 100 + 0 (a right record at 0..100 could still join A0), at 101.
#[test]
fn test_should_not_emit_left_join_result_for_asymmetric_after_window() {
    let mut j = outer_long(no_grace(100).after(Duration::ZERO));
    j.ls_rising(&KEYS[..2], "A", 0);
    // Kafka Streams: (0,"A0+null",0).
    assert_eq!(j.out(), []);
    j.r(1, 11, 1);
    assert_eq!(j.out(), [kvt(1, "A1+11", 1)]);
    j.r(2, 12, 101);
    // Kafka Streams: nothing (A0+null came out above).
    assert_eq!(j.out(), [kvt(0, "A0+null", 0)]);
    j.r(3, 13, 101);
    assert_eq!(j.out(), []);
    j.l(2, "A2", 201);
    assert_eq!(j.out(), [kvt(2, "A2+12", 201)]);
    j.nothing_late();
}

// KStreamKStreamOuterJoinTest#testShouldForwardCurrentHeaders
// Kafka Streams forwards the headers of the record being processed ("undefined behavior", its
// test says): a pair carries the second record's headers (h=0x5), an unmatched result those of
// the record that moved stream time (h=0x3). eosflow forwards no input header but its
// envelope: a pair is caused by its second record (`causation_id` = its id), an unmatched
// result by its own record.
#[test]
fn test_should_forward_current_headers() {
    let mut j = outer_long(with_grace(100, 10));
    let rec = |topic: &str, k: i32, v: Vec<u8>, h: u8, t: i64, id: &str| {
        TestRecord::new(topic, Some(k.to_be_bytes()), Some(v))
            .timestamp(t)
            .header("h", vec![h])
            .id(id)
    };
    let long = |v: i64| v.to_be_bytes().to_vec();
    j.pipe(rec(LEFT, 0, b"A0".to_vec(), 1, 0, "m1"));
    j.pipe(rec(RIGHT, 1, long(10), 2, 0, "m2"));
    j.pipe(rec(RIGHT, 3, long(100), 3, 211, "m3"));
    let got = j.raw();
    let seen: Vec<(String, Option<&str>, Option<&str>)> = got
        .iter()
        .map(|r| (r.value_text(), r.header("h"), r.header("causation_id")))
        .collect();
    // Kafka Streams: (1,"null+10",0,h=0x3), (0,"A0+null",0,h=0x3) — right side first, as in
    // testOuterJoinDuplicates.
    assert_eq!(
        seen,
        [
            ("A0+null".to_string(), None, Some("m1")),
            ("null+10".to_string(), None, Some("m2"))
        ]
    );
    assert_eq!(got[0].timestamp, Some(0));
    j.pipe(rec(LEFT, 2, b"A2".to_vec(), 4, 200, "m4"));
    j.pipe(rec(RIGHT, 2, long(12), 5, 200, "m5"));
    let got = j.raw();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].value_text(), "A2+12");
    assert_eq!(got[0].timestamp, Some(200));
    // Kafka Streams: h=0x5. eosflow forwards the envelope, not the input's other headers.
    assert_eq!(got[0].header("h"), None);
    assert_eq!(got[0].header("causation_id"), Some("m5"));
}

// ---------------------------------------------------------------------------------------------
// KStreamKStreamSelfJoinTest
// ---------------------------------------------------------------------------------------------
//
// Kafka Streams' self-join tests compare an optimized self-join (one store) with the same join
// built without the optimization; the expected lists below are what that unoptimized join
// emits (derived from Kafka Streams' KStreamKStreamJoin: a record is first joined, as the left
// side, with the earlier records, then, as the right side, with every record in the window,
// itself included). eosflow has no single-store optimization: a stream joined with itself is
// buffered on both sides.

/// `stream.join(stream, (v, v2) -> v + v2, windows)` on one topic; pipes `(key, value, t)` in
/// order; returns the results.
fn self_join(windows: JoinWindows, input: &[(&str, &str, i64)]) -> Vec<(String, String, i64)> {
    let b = StreamsBuilder::new();
    let s1 = b.stream("topic1", Consumed::with(StringSerde, StringSerde));
    s1.join_stream(
        &s1,
        |v, v2| format!("{v}{v2}"),
        windows,
        StreamJoined::with(StringSerde, StringSerde, StringSerde),
    )
    .to(OUT, Produced::with(StringSerde, StringSerde));
    let mut d = TopologyTestDriver::new(b.build().expect("valid")).expect("driver");
    for (k, v, t) in input {
        d.pipe(TestRecord::new("topic1", Some(*k), Some(*v)).timestamp(*t))
            .expect("pipe");
    }
    d.read_raw_output(OUT)
        .iter()
        .map(|r| (r.key_text(), r.value_text(), r.timestamp.expect("ts")))
        .collect()
}

fn skvt(k: &str, v: &str, t: i64) -> (String, String, i64) {
    (k.to_string(), v.to_string(), t)
}

const FIVE: [(&str, &str, i64); 5] = [
    ("A", "1", 1),
    ("B", "1", 2),
    ("A", "2", 3),
    ("B", "2", 4),
    ("B", "3", 5),
];

fn five_expected() -> Vec<(String, String, i64)> {
    vec![
        skvt("A", "11", 1),
        skvt("B", "11", 2),
        skvt("A", "21", 3),
        skvt("A", "12", 3),
        skvt("A", "22", 3),
        skvt("B", "21", 4),
        skvt("B", "12", 4),
        skvt("B", "22", 4),
        skvt("B", "31", 5),
        skvt("B", "32", 5),
        skvt("B", "13", 5),
        skvt("B", "23", 5),
        skvt("B", "33", 5),
    ]
}

// KStreamKStreamSelfJoinTest#shouldMatchInnerJoinWithSelfJoinWithSingleStream
#[test]
fn should_match_inner_join_with_self_join_with_single_stream() {
    assert_eq!(self_join(no_grace(100), &FIVE), five_expected());
}

// KStreamKStreamSelfJoinTest#shouldMatchInnerJoinWithSelfJoinWithTwoStreams
// Kafka Streams lets `builder.stream("topic1")` be called twice and joins the two streams like
// one stream with itself. eosflow refuses a topic read by two sources when the topology is
// built (one source per topic: a record is read once); the join of the one stream with itself
// gives Kafka Streams' results.
#[test]
fn should_match_inner_join_with_self_join_with_two_streams() {
    let b = StreamsBuilder::new();
    let s1 = b.stream("topic1", Consumed::with(StringSerde, StringSerde));
    let s2 = b.stream("topic1", Consumed::with(StringSerde, StringSerde));
    s1.join_stream(
        &s2,
        |v, v2| format!("{v}{v2}"),
        no_grace(100),
        StreamJoined::with(StringSerde, StringSerde, StringSerde),
    )
    .to(OUT, Produced::with(StringSerde, StringSerde));
    let err = b.build().expect_err("two sources of one topic");
    assert!(err.to_string().contains("read by two sources"), "{err}");
    assert_eq!(self_join(no_grace(100), &FIVE), five_expected());
}

// KStreamKStreamSelfJoinTest#shouldMatchInnerJoinWithSelfJoinDifferentBeforeAfterWindows
// (Kafka Streams' test reads the topic with two `stream` calls; here one stream is joined with
// itself, see shouldMatchInnerJoinWithSelfJoinWithTwoStreams.)
#[test]
fn should_match_inner_join_with_self_join_different_before_after_windows() {
    let input = [
        ("A", "1", 0),
        ("A", "2", 11_000),
        ("B", "1", 12_000),
        ("A", "3", 13_000),
        ("A", "4", 15_000),
        ("C", "1", 16_000),
        ("D", "1", 17_000),
        ("A", "5", 30_000),
    ];
    let windows = with_grace(11_000, 10_000);
    assert_eq!(
        self_join(windows, &input),
        [
            skvt("A", "11", 0),
            skvt("A", "21", 11_000),
            skvt("A", "12", 11_000),
            skvt("A", "22", 11_000),
            skvt("B", "11", 12_000),
            skvt("A", "32", 13_000),
            skvt("A", "23", 13_000),
            skvt("A", "33", 13_000),
            skvt("A", "42", 15_000),
            skvt("A", "43", 15_000),
            skvt("A", "24", 15_000),
            skvt("A", "34", 15_000),
            skvt("A", "44", 15_000),
            skvt("C", "11", 16_000),
            skvt("D", "11", 17_000),
            skvt("A", "55", 30_000),
        ]
    );
}

// KStreamKStreamSelfJoinTest#shouldMatchInnerJoinWithSelfJoinOutOfOrderMessages
// (One stream joined with itself, as above.)
#[test]
fn should_match_inner_join_with_self_join_out_of_order_messages() {
    let input = [
        ("A", "1", 0),
        ("A", "2", 9_999),
        ("B", "1", 11_000),
        ("A", "3", 13_000),
        ("A", "4", 15_000),
        ("C", "1", 16_000),
        ("D", "1", 17_000),
        ("A", "5", 30_000),
        ("A", "5", 6_000),
    ];
    let windows = no_grace(10_000);
    assert_eq!(
        self_join(windows, &input),
        [
            skvt("A", "11", 0),
            skvt("A", "21", 9_999),
            skvt("A", "12", 9_999),
            skvt("A", "22", 9_999),
            skvt("B", "11", 11_000),
            skvt("A", "32", 13_000),
            skvt("A", "23", 13_000),
            skvt("A", "33", 13_000),
            skvt("A", "42", 15_000),
            skvt("A", "43", 15_000),
            skvt("A", "24", 15_000),
            skvt("A", "34", 15_000),
            skvt("A", "44", 15_000),
            skvt("C", "11", 16_000),
            skvt("D", "11", 17_000),
            skvt("A", "55", 30_000),
            // A5@6000 arrives after stream time 30000: A2@9999 has left the buffers
            // (9999 + 20000 is not after 30000), A3 and A4 are still there.
            skvt("A", "53", 13_000),
            skvt("A", "54", 15_000),
            skvt("A", "35", 13_000),
            skvt("A", "45", 15_000),
        ]
    );
}
