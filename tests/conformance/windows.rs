//! Windowed aggregations: Kafka Streams' `KStreamWindowAggregateTest`,
//! `KStreamSlidingWindowAggregateTest`, `KStreamSessionWindowAggregateProcessorTest`,
//! `TimeWindowedKStreamImplTest`, `SessionWindowedKStreamImplTest`,
//! `SlidingWindowedKStreamImplTest`, `SuppressScenarioTest` and `KTableSuppressProcessorTest`
//! (`streams/src/test/java/org/apache/kafka/streams/kstream/internals/`), ported onto
//! `group_by_key().windowed_by(…)` (`windowed_by_sliding`, `windowed_by_session`) and the test
//! driver.
//!
//! How the facts carry over:
//! - Kafka Streams' expected rows are kept as they are, **its timestamps included**, in
//!   `ks(…)` tables: `(key, window start, window end, value, Kafka Streams' timestamp)`, value
//!   `None` for a tombstone. The one difference in every row is the timestamp (documented in
//!   docs/coming-from-kafka-streams.md, "Windowed aggregations"): Kafka Streams stamps a result
//!   with the latest record time of its window, eosflow with the window's last millisecond
//!   (`end - 1` for a time window, `end` for a sliding window or a session). [`assert_ks`]
//!   checks key, window and value exactly, and that the timestamp is eosflow's.
//! - Kafka Streams runs these tests with the record cache on and off; eosflow has no cache on
//!   the aggregation path, so the cache-off expectations are ported.
//! - `suppress(untilWindowCloses)` is `EmitStrategy::OnWindowClose` on the aggregation: a test
//!   that reads the raw and the suppressed output of one table builds two aggregations of the
//!   same stream, one per emit strategy.
//! - Windowed `reduce` (`MockReducer.STRING_ADDER`) is expressed with `aggregate` (the first
//!   value as is, then `agg + "+" + value`: the same outputs): the DSL's windowed `reduce` is
//!   another change's.
//! - Kafka Streams drops a late record or a record without a key (log line and metric);
//!   eosflow dead-letters it (`input.DLT`, class `late-record` or `permanent`), never silently:
//!   the tests assert that instead of the log line.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use eosflow::dsl::{Consumed, Data, KStream, Materialized, Produced, StreamsBuilder};
use eosflow::serdes::{I64Serde, Serde, StringSerde};
use eosflow::testing::{TestRecord, TopologyTestDriver};
use eosflow::topology::windows::{
    EmitStrategy, SessionWindows, SlidingWindows, TimeWindows, WindowStoreHandle, Windowed,
    WindowedAggregate, WindowedSerde,
};
use eosflow::topology::Topology;

const IN: &str = "input";
const OUT: &str = "output";
const UPDATE: EmitStrategy = EmitStrategy::OnWindowUpdate;
const CLOSE: EmitStrategy = EmitStrategy::OnWindowClose;

type Driver = TopologyTestDriver<Topology>;

/// One result as eosflow forwards it: key, window start, window end, value (`None`: a
/// tombstone), timestamp.
type Row = (String, i64, i64, Option<String>, i64);

/// One of Kafka Streams' expected rows: key, window start, window end, value, Kafka Streams'
/// timestamp.
type Ks = (&'static str, i64, i64, Option<&'static str>, i64);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Which windows, for [`build`].
#[derive(Clone, Copy)]
enum Win {
    Time(TimeWindows),
    Sliding(SlidingWindows),
    Session(SessionWindows),
}

impl Win {
    fn time(size: u64, grace: u64) -> Self {
        Self::Time(TimeWindows::of_size_with_grace(ms(size), ms(grace)))
    }

    fn hopping(size: u64, grace: u64, advance: u64) -> Self {
        Self::Time(TimeWindows::of_size_with_grace(ms(size), ms(grace)).advance_by(ms(advance)))
    }

    fn sliding(td: u64, grace: u64) -> Self {
        Self::Sliding(SlidingWindows::of_time_difference_and_grace(
            ms(td),
            ms(grace),
        ))
    }

    fn session(gap: u64, grace: u64) -> Self {
        Self::Session(SessionWindows::with_inactivity_gap_and_grace(
            ms(gap),
            ms(grace),
        ))
    }

    /// eosflow's timestamp of a result of window `[start, end]`.
    fn stamp(self, end: i64) -> i64 {
        match self {
            Win::Time(_) => end - 1,
            Win::Sliding(_) | Win::Session(_) => end,
        }
    }
}

/// An aggregation's functions: `init`, `aggregate`, `merge` (sessions only).
struct Fold<A> {
    init: fn() -> A,
    aggregate: fn(&String, &String, A) -> A,
    merge: fn(&String, A, A) -> A,
}

/// `MockInitializer.STRING_INIT` and `MockAggregator.TOSTRING_ADDER`: `"0+1+2"`; sessions
/// merge as `SessionWindowedKStreamImplTest`'s merger, `a + "+" + b`.
const ADDER: Fold<String> = Fold {
    init: || "0".to_string(),
    aggregate: |_, v, a| format!("{a}+{v}"),
    merge: |_, a, b| format!("{a}+{b}"),
};

/// `MockAggregator.toStringInstance("+")` from `() -> ""`: `"+1+2"`.
const PLUS: Fold<String> = Fold {
    init: String::new,
    aggregate: |_, v, a| format!("{a}+{v}"),
    merge: |_, a, b| format!("{a}{b}"),
};

/// `MockReducer.STRING_ADDER` as an aggregation: `"1+2"` (a window's first value as is).
const REDUCER: Fold<String> = Fold {
    init: String::new,
    aggregate: |_, v, a| {
        if a.is_empty() {
            v.clone()
        } else {
            format!("{a}+{v}")
        }
    },
    merge: |_, a, b| {
        if a.is_empty() {
            b
        } else {
            format!("{a}+{b}")
        }
    },
};

/// `count()`.
const COUNT: Fold<i64> = Fold {
    init: || 0,
    aggregate: |_, _, n| n + 1,
    merge: |_, a, b| a + b,
};

/// Adds to `stream` its aggregation in `win` with `emit` into store `store`, results to
/// `topic`.
fn aggregate_into<A: Data>(
    stream: KStream<'_, String, String>,
    (win, emit): (Win, EmitStrategy),
    fold: &Fold<A>,
    values: impl Serde<A> + Clone + 'static,
    (store, topic): (&str, &str),
) {
    let m = Materialized::with(StringSerde, values.clone()).named(store);
    let grouped = stream.group_by_key();
    let (init, agg, merge) = (fold.init, fold.aggregate, fold.merge);
    let table = match win {
        Win::Time(w) => grouped
            .windowed_by(w)
            .emit_strategy(emit)
            .aggregate(init, agg, m),
        Win::Sliding(w) => grouped
            .windowed_by_sliding(w)
            .emit_strategy(emit)
            .aggregate(init, agg, m),
        Win::Session(w) => grouped
            .windowed_by_session(w)
            .emit_strategy(emit)
            .aggregate(init, agg, merge, m),
    };
    table.to_stream().to(
        topic,
        Produced::with(WindowedSerde::new(StringSerde), values),
    );
}

/// `input` grouped by key, in `win`, folded with `fold` into store `store`, results to
/// `output`.
fn build<A: Data>(
    win: Win,
    emit: EmitStrategy,
    fold: &Fold<A>,
    values: impl Serde<A> + Clone + 'static,
) -> Driver {
    let builder = StreamsBuilder::new();
    let input = builder.stream(IN, Consumed::with(StringSerde, StringSerde));
    aggregate_into(input, (win, emit), fold, values, ("store", OUT));
    TopologyTestDriver::new(builder.build().expect("a valid topology")).expect("a driver")
}

/// A string aggregation (`build` with `StringSerde`).
fn strings(win: Win, emit: EmitStrategy, fold: &Fold<String>) -> Driver {
    build(win, emit, fold, StringSerde)
}

/// A count (`build` with `COUNT`).
fn counts(win: Win, emit: EmitStrategy) -> Driver {
    build(win, emit, &COUNT, I64Serde)
}

fn pipe(d: &mut Driver, topic: &str, key: &str, value: &str, at: i64) {
    d.pipe(TestRecord::new(topic, Some(key), Some(value)).timestamp(at))
        .expect("pipe");
}

/// Pipes `(key, value, timestamp)` records into `input`.
fn send(d: &mut Driver, records: &[(&str, &str, i64)]) {
    for (k, v, t) in records {
        pipe(d, IN, k, v, *t);
    }
}

/// Every result written to `topic` since the last read, the value shown with `show`.
fn read_with<A>(
    d: &mut Driver,
    topic: &str,
    values: &dyn Serde<A>,
    show: fn(A) -> String,
) -> Vec<Row> {
    let keys = WindowedSerde::new(StringSerde);
    d.read_raw_output(topic)
        .into_iter()
        .map(|r| {
            let k: Windowed<String> = keys
                .deserialize(r.key.as_deref().expect("a windowed key"))
                .expect("a windowed key");
            let v = r
                .value
                .as_deref()
                .map(|v| show(values.deserialize(v).expect("a value")));
            let ts = r.timestamp.expect("a timestamp");
            (k.key, k.window.start, k.window.end, v, ts)
        })
        .collect()
}

/// String results from `topic`.
fn read_strings(d: &mut Driver, topic: &str) -> Vec<Row> {
    read_with(d, topic, &StringSerde, |s| s)
}

/// Count results from `topic` (the counts as text, as in the `ks` tables).
fn read_counts(d: &mut Driver, topic: &str) -> Vec<Row> {
    read_with(d, topic, &I64Serde, |n| n.to_string())
}

/// Kafka Streams' expected rows as eosflow forwards them: the same keys, windows and values;
/// the timestamp is eosflow's (see the module docs).
fn eos(win: Win, ks: &[Ks]) -> Vec<Row> {
    ks.iter()
        .map(|(k, s, e, v, _)| (k.to_string(), *s, *e, v.map(str::to_string), win.stamp(*e)))
        .collect()
}

/// `got` is Kafka Streams' `ks`, row for row, with eosflow's timestamps.
#[track_caller]
fn assert_ks(win: Win, got: &[Row], ks: &[Ks]) {
    assert_eq!(got, eos(win, ks).as_slice());
}

/// Records dead-lettered from `input` since the last read, by class.
fn dead(d: &mut Driver) -> Vec<String> {
    d.read_raw_output("input.DLT")
        .iter()
        .map(|r| r.dlt_class().unwrap_or_default().to_string())
        .collect()
}

/// `n` late records.
fn late(n: usize) -> Vec<String> {
    vec!["late-record".to_string(); n]
}

/// The committed windows of the windowed store `store` (every key, in key then start order).
fn stored<A: Data>(d: &mut Driver, values: impl Serde<A> + 'static) -> Vec<(String, i64, i64, A)> {
    let handle = WindowStoreHandle::new("store", StringSerde, values);
    d.window_all(&handle)
        .expect("the store")
        .into_iter()
        .map(|(k, w, v)| (k, w.start, w.end, v))
        .collect()
}

// ---------------------------------------------------------------------------------------
// KStreamWindowAggregateTest
// ---------------------------------------------------------------------------------------

/// `testAggBasic`'s input: `(key, value, timestamp)`.
const AGG_BASIC: &[(&str, &str, i64)] = &[
    ("A", "1", 0),
    ("B", "2", 1),
    ("C", "3", 2),
    ("D", "4", 3),
    ("A", "1", 4),
    ("A", "1", 5),
    ("B", "2", 6),
    ("D", "4", 7),
    ("B", "2", 8),
    ("C", "3", 9),
    ("A", "1", 10),
    ("B", "2", 11),
    ("D", "4", 12),
    ("B", "2", 13),
    ("C", "3", 14),
    ("B", "1", 3),
    ("B", "2", 2),
    ("B", "3", 9),
];

// KStreamWindowAggregateTest#testAggBasic
/// Hopping windows of 10 every 5, grace 100. Before issue 48, eosflow also forwarded the
/// windows starting at -5 (`[A@-5/5]` "0+1" and six more): a record at or after 0 now belongs
/// to no window that starts before 0, as in Kafka Streams.
#[test]
fn test_agg_basic() {
    let win = Win::hopping(10, 100, 5);
    let mut d = strings(win, UPDATE, &ADDER);
    send(&mut d, AGG_BASIC);
    let got = read_strings(&mut d, OUT);
    #[rustfmt::skip]
    assert_ks(win, &got, &[
        ("A", 0, 10, Some("0+1"), 0),
        ("B", 0, 10, Some("0+2"), 1),
        ("C", 0, 10, Some("0+3"), 2),
        ("D", 0, 10, Some("0+4"), 3),
        ("A", 0, 10, Some("0+1+1"), 4),
        ("A", 0, 10, Some("0+1+1+1"), 5),
        ("A", 5, 15, Some("0+1"), 5),
        ("B", 0, 10, Some("0+2+2"), 6),
        ("B", 5, 15, Some("0+2"), 6),
        ("D", 0, 10, Some("0+4+4"), 7),
        ("D", 5, 15, Some("0+4"), 7),
        ("B", 0, 10, Some("0+2+2+2"), 8),
        ("B", 5, 15, Some("0+2+2"), 8),
        ("C", 0, 10, Some("0+3+3"), 9),
        ("C", 5, 15, Some("0+3"), 9),
        ("A", 5, 15, Some("0+1+1"), 10),
        ("A", 10, 20, Some("0+1"), 10),
        ("B", 5, 15, Some("0+2+2+2"), 11),
        ("B", 10, 20, Some("0+2"), 11),
        ("D", 5, 15, Some("0+4+4"), 12),
        ("D", 10, 20, Some("0+4"), 12),
        ("B", 5, 15, Some("0+2+2+2+2"), 13),
        ("B", 10, 20, Some("0+2+2"), 13),
        ("C", 5, 15, Some("0+3+3"), 14),
        ("C", 10, 20, Some("0+3"), 14),
        ("B", 0, 10, Some("0+2+2+2+1"), 8),
        ("B", 0, 10, Some("0+2+2+2+1+2"), 8),
        ("B", 0, 10, Some("0+2+2+2+1+2+3"), 9),
        ("B", 5, 15, Some("0+2+2+2+2+3"), 13),
    ]);
    // On close: grace 100, no window closes.
    let mut d = strings(win, CLOSE, &ADDER);
    send(&mut d, AGG_BASIC);
    assert!(read_strings(&mut d, OUT).is_empty());
}

/// `testJoin`'s two windowed aggregations (topic1 to `output1`, topic2 to `output2`).
fn two_aggregations(win: Win, emit: EmitStrategy) -> Driver {
    let builder = StreamsBuilder::new();
    for (topic, n) in [("topic1", "1"), ("topic2", "2")] {
        let s = builder.stream(topic, Consumed::with(StringSerde, StringSerde));
        let (store, out) = (format!("store{n}"), format!("output{n}"));
        aggregate_into(
            s,
            (win, emit),
            &ADDER,
            StringSerde,
            (store.as_str(), out.as_str()),
        );
    }
    TopologyTestDriver::new(builder.build().expect("a valid topology")).expect("a driver")
}

fn pipe_all(d: &mut Driver, topic: &str, records: &[(&str, &str, i64)]) {
    for (k, v, t) in records {
        pipe(d, topic, k, v, *t);
    }
}

// KStreamWindowAggregateTest#testJoin
/// The two windowed aggregations' outputs (Kafka Streams' processors 0 and 1), on update
/// (grace 100) and on close (grace 5). Left out: their `KTable` join (processor 2), since a
/// windowed table has no join in eosflow.
#[test]
fn test_join() {
    let win = Win::hopping(10, 100, 5);
    let mut d = two_aggregations(win, UPDATE);
    pipe_all(
        &mut d,
        "topic1",
        &[
            ("A", "1", 0),
            ("B", "2", 1),
            ("C", "3", 2),
            ("D", "4", 3),
            ("A", "1", 9),
        ],
    );
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, "output1"), &[
        ("A", 0, 10, Some("0+1"), 0),
        ("B", 0, 10, Some("0+2"), 1),
        ("C", 0, 10, Some("0+3"), 2),
        ("D", 0, 10, Some("0+4"), 3),
        ("A", 0, 10, Some("0+1+1"), 9),
        ("A", 5, 15, Some("0+1"), 9),
    ]);
    pipe_all(
        &mut d,
        "topic1",
        &[
            ("A", "1", 5),
            ("B", "2", 6),
            ("D", "4", 7),
            ("B", "2", 8),
            ("C", "3", 9),
        ],
    );
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, "output1"), &[
        ("A", 0, 10, Some("0+1+1+1"), 9),
        ("A", 5, 15, Some("0+1+1"), 9),
        ("B", 0, 10, Some("0+2+2"), 6),
        ("B", 5, 15, Some("0+2"), 6),
        ("D", 0, 10, Some("0+4+4"), 7),
        ("D", 5, 15, Some("0+4"), 7),
        ("B", 0, 10, Some("0+2+2+2"), 8),
        ("B", 5, 15, Some("0+2+2"), 8),
        ("C", 0, 10, Some("0+3+3"), 9),
        ("C", 5, 15, Some("0+3"), 9),
    ]);
    pipe_all(
        &mut d,
        "topic2",
        &[
            ("A", "a", 0),
            ("B", "b", 1),
            ("C", "c", 2),
            ("D", "d", 20),
            ("A", "a", 20),
        ],
    );
    assert!(read_strings(&mut d, "output1").is_empty());
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, "output2"), &[
        ("A", 0, 10, Some("0+a"), 0),
        ("B", 0, 10, Some("0+b"), 1),
        ("C", 0, 10, Some("0+c"), 2),
        ("D", 15, 25, Some("0+d"), 20),
        ("D", 20, 30, Some("0+d"), 20),
        ("A", 15, 25, Some("0+a"), 20),
        ("A", 20, 30, Some("0+a"), 20),
    ]);
    pipe_all(
        &mut d,
        "topic2",
        &[
            ("A", "a", 5),
            ("B", "b", 6),
            ("D", "d", 7),
            ("D", "d", 18),
            ("A", "a", 21),
        ],
    );
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, "output2"), &[
        ("A", 0, 10, Some("0+a+a"), 5),
        ("A", 5, 15, Some("0+a"), 5),
        ("B", 0, 10, Some("0+b+b"), 6),
        ("B", 5, 15, Some("0+b"), 6),
        ("D", 0, 10, Some("0+d"), 7),
        ("D", 5, 15, Some("0+d"), 7),
        ("D", 10, 20, Some("0+d"), 18),
        ("D", 15, 25, Some("0+d+d"), 20),
        ("A", 15, 25, Some("0+a+a"), 21),
        ("A", 20, 30, Some("0+a+a"), 21),
    ]);

    let win = Win::hopping(10, 5, 5);
    let mut d = two_aggregations(win, CLOSE);
    pipe_all(
        &mut d,
        "topic1",
        &[
            ("A", "1", 0),
            ("B", "2", 1),
            ("C", "3", 2),
            ("D", "4", 3),
            ("A", "1", 9),
            ("A", "1", 15),
        ],
    );
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, "output1"), &[
        ("A", 0, 10, Some("0+1+1"), 9),
        ("B", 0, 10, Some("0+2"), 1),
        ("C", 0, 10, Some("0+3"), 2),
        ("D", 0, 10, Some("0+4"), 3),
    ]);
    pipe_all(
        &mut d,
        "topic1",
        &[
            ("A", "1", 10),
            ("B", "2", 11),
            ("D", "4", 12),
            ("B", "2", 13),
            ("C", "3", 14),
            ("A", "1", 20),
        ],
    );
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, "output1"), &[
        ("A", 5, 15, Some("0+1+1"), 10),
        ("B", 5, 15, Some("0+2+2"), 13),
        ("C", 5, 15, Some("0+3"), 14),
        ("D", 5, 15, Some("0+4"), 12),
    ]);
    pipe_all(
        &mut d,
        "topic2",
        &[
            ("A", "a", 0),
            ("B", "b", 1),
            ("C", "c", 2),
            ("D", "d", 10),
            ("A", "a", 15),
        ],
    );
    pipe_all(
        &mut d,
        "topic2",
        &[
            ("A", "a", 5),
            ("B", "b", 6),
            ("D", "d", 7),
            ("D", "d", 18),
            ("A", "a", 21),
        ],
    );
    assert!(read_strings(&mut d, "output1").is_empty());
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, "output2"), &[
        ("A", 0, 10, Some("0+a"), 0),
        ("B", 0, 10, Some("0+b"), 1),
        ("C", 0, 10, Some("0+c"), 2),
        ("A", 5, 15, Some("0+a"), 5),
        ("B", 5, 15, Some("0+b"), 6),
        ("D", 5, 15, Some("0+d+d"), 10),
    ]);
}

// KStreamWindowAggregateTest#shouldLogAndMeterWhenSkippingNullKey
/// Kafka Streams skips a record without a key (a log line and the dropped-records metric);
/// eosflow dead-letters it as `permanent` (documented: a null key or value is dead-lettered,
/// never skipped silently). No result either way.
#[test]
fn should_log_and_meter_when_skipping_null_key() {
    for emit in [UPDATE, CLOSE] {
        let mut d = strings(Win::hopping(10, 0, 5), emit, &PLUS);
        d.pipe(TestRecord::new(IN, None::<&str>, Some("1")).timestamp(0))
            .expect("pipe");
        assert!(read_strings(&mut d, OUT).is_empty());
        assert_eq!(dead(&mut d), ["permanent"]);
    }
}

// KStreamWindowAggregateTest#shouldLogAndMeterWhenSkippingExpiredWindow
/// Hopping windows of 10 every 5, grace 90: at stream time 100 the records at 0 to 6 are late
/// for `[0, 10)` (Kafka Streams drops them, eosflow dead-letters them: 7 either way); 5 and 6
/// still count in `[5, 15)`, which closes at 105. Kafka Streams' `withRetention(100)` has no
/// observable effect here.
#[test]
fn should_log_and_meter_when_skipping_expired_window() {
    let input: &[(&str, &str, i64)] = &[
        ("k", "100", 100),
        ("k", "0", 0),
        ("k", "1", 1),
        ("k", "2", 2),
        ("k", "3", 3),
        ("k", "4", 4),
        ("k", "5", 5),
        ("k", "6", 6),
        ("k", "105", 105),
        ("k", "106", 106),
    ];
    let win = Win::hopping(10, 90, 5);
    let mut d = strings(win, UPDATE, &PLUS);
    send(&mut d, input);
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("k", 95, 105, Some("+100"), 100),
        ("k", 100, 110, Some("+100"), 100),
        ("k", 5, 15, Some("+5"), 5),
        ("k", 5, 15, Some("+5+6"), 6),
        ("k", 100, 110, Some("+100+105"), 105),
        ("k", 105, 115, Some("+105"), 105),
        ("k", 100, 110, Some("+100+105+106"), 106),
        ("k", 105, 115, Some("+105+106"), 106),
    ]);
    // Kafka Streams: dropped-records-total 7, one per record and closed window: 0 to 6 for
    // [0, 10). eosflow: 0 to 4, late for every window they belong to; 5 and 6 went into
    // [5, 15) and are not late (a deliberate difference, documented).
    assert_eq!(dead(&mut d), late(5));

    let mut d = strings(win, CLOSE, &PLUS);
    send(&mut d, input);
    assert_ks(
        win,
        &read_strings(&mut d, OUT),
        &[("k", 5, 15, Some("+5+6"), 6)],
    );
    assert_eq!(dead(&mut d), late(5));
}

// KStreamWindowAggregateTest#shouldLogAndMeterWhenSkippingExpiredWindowByGrace
/// Tumbling windows of 10 (advance 10), grace 90: at stream time 200 the records at 100 to 105
/// and at 6 are late (7).
#[test]
fn should_log_and_meter_when_skipping_expired_window_by_grace() {
    let input: &[(&str, &str, i64)] = &[
        ("k", "100", 200),
        ("k", "0", 100),
        ("k", "1", 101),
        ("k", "2", 102),
        ("k", "3", 103),
        ("k", "4", 104),
        ("k", "5", 105),
        ("k", "6", 6),
    ];
    let win = Win::hopping(10, 90, 10);
    let mut d = strings(win, UPDATE, &PLUS);
    send(&mut d, input);
    assert_ks(
        win,
        &read_strings(&mut d, OUT),
        &[("k", 200, 210, Some("+100"), 200)],
    );
    assert_eq!(dead(&mut d), late(7));
    // On close (Kafka Streams asserts only the metrics): nothing has closed.
    let mut d = strings(win, CLOSE, &PLUS);
    send(&mut d, input);
    assert!(read_strings(&mut d, OUT).is_empty());
    assert_eq!(dead(&mut d), late(7));
}

// KStreamWindowAggregateTest#shouldNotEmitFinalIfNotProgressEnough
/// Hopping windows of 10 every 5, grace 5 (Kafka Streams drives the processor directly, with
/// an emit interval of 0; the DSL's node is the same). On close, stream time 15 closes
/// `[0, 10)`; a record at 15 again, or at 19, closes nothing more.
#[test]
fn should_not_emit_final_if_not_progress_enough() {
    let win = Win::hopping(10, 5, 5);
    let mut d = strings(win, CLOSE, &ADDER);
    send(&mut d, &[("A", "1", 0), ("B", "2", 5), ("C", "3", 15)]);
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("A", 0, 10, Some("0+1"), 0),
        ("B", 0, 10, Some("0+2"), 5),
    ]);
    send(&mut d, &[("D", "4", 15)]);
    assert!(
        read_strings(&mut d, OUT).is_empty(),
        "stream time did not move"
    );
    send(&mut d, &[("E", "5", 19)]);
    assert!(
        read_strings(&mut d, OUT).is_empty(),
        "no window closes before 20"
    );

    let mut d = strings(win, UPDATE, &ADDER);
    send(&mut d, &[("A", "1", 0), ("B", "2", 5), ("C", "3", 15)]);
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("A", 0, 10, Some("0+1"), 0),
        ("B", 0, 10, Some("0+2"), 5),
        ("B", 5, 15, Some("0+2"), 5),
        ("C", 10, 20, Some("0+3"), 15),
        ("C", 15, 25, Some("0+3"), 15),
    ]);
    send(&mut d, &[("D", "4", 15)]);
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("D", 10, 20, Some("0+4"), 15),
        ("D", 15, 25, Some("0+4"), 15),
    ]);
    send(&mut d, &[("E", "5", 19)]);
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("E", 10, 20, Some("0+5"), 19),
        ("E", 15, 25, Some("0+5"), 19),
    ]);
}

const EMIT_INPUT: &[(&str, &str, i64)] =
    &[("A", "1", 0), ("A", "1", 5), ("B", "2", 10), ("C", "3", 15)];

// KStreamWindowAggregateTest#shouldEmitWithInterval0
#[test]
fn should_emit_with_interval0() {
    let win = Win::hopping(10, 5, 5);
    let mut d = strings(win, CLOSE, &ADDER);
    send(&mut d, EMIT_INPUT);
    send(&mut d, &[("D", "4", 20)]);
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("A", 0, 10, Some("0+1+1"), 5),
        ("A", 5, 15, Some("0+1"), 5),
        ("B", 5, 15, Some("0+2"), 10),
    ]);
    let mut d = strings(win, UPDATE, &ADDER);
    send(&mut d, EMIT_INPUT);
    send(&mut d, &[("D", "4", 20)]);
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("A", 0, 10, Some("0+1"), 0),
        ("A", 0, 10, Some("0+1+1"), 5),
        ("A", 5, 15, Some("0+1"), 5),
        ("B", 5, 15, Some("0+2"), 10),
        ("B", 10, 20, Some("0+2"), 10),
        ("C", 10, 20, Some("0+3"), 15),
        ("C", 15, 25, Some("0+3"), 15),
        ("D", 15, 25, Some("0+4"), 20),
        ("D", 20, 30, Some("0+4"), 20),
    ]);
}

// KStreamWindowAggregateTest#shouldEmitWithLargeInterval
/// Kafka Streams throttles on-close emission by wall-clock time
/// (`emit.interval.ms.kstreams.windowed.aggregation`, here 1 s): with the wall clock still at
/// 0 it emits nothing at stream time 15, and `A [0, 10)` only at 20, with the windows that
/// closed at 20. eosflow has no throttle — a window's durable close timer fires when stream
/// time reaches its close — so `A [0, 10)` comes out at 15: the same results, once each,
/// sooner (a deliberate difference, documented).
#[test]
fn should_emit_with_large_interval() {
    let win = Win::hopping(10, 5, 5);
    let mut d = strings(win, CLOSE, &ADDER);
    send(&mut d, EMIT_INPUT);
    // Kafka Streams: nothing yet.
    assert_ks(
        win,
        &read_strings(&mut d, OUT),
        &[("A", 0, 10, Some("0+1+1"), 5)],
    );
    d.advance_wall_clock(Duration::from_secs(10))
        .expect("clock");
    send(&mut d, &[("D", "4", 20)]);
    // Kafka Streams: A [0, 10) "0+1+1" first, then these two.
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("A", 5, 15, Some("0+1"), 5),
        ("B", 5, 15, Some("0+2"), 10),
    ]);
    send(&mut d, &[("E", "5", 40)]);
    // Kafka Streams: nothing, its wall clock moved only 100 ms. eosflow: every window that
    // closed by 40.
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("B", 10, 20, Some("0+2"), 10),
        ("C", 10, 20, Some("0+3"), 15),
        ("C", 15, 25, Some("0+3"), 15),
        ("D", 15, 25, Some("0+4"), 20),
        ("D", 20, 30, Some("0+4"), 20),
    ]);

    let mut d = strings(win, UPDATE, &ADDER);
    send(&mut d, EMIT_INPUT);
    send(&mut d, &[("D", "4", 20), ("E", "5", 40)]);
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("A", 0, 10, Some("0+1"), 0),
        ("A", 0, 10, Some("0+1+1"), 5),
        ("A", 5, 15, Some("0+1"), 5),
        ("B", 5, 15, Some("0+2"), 10),
        ("B", 10, 20, Some("0+2"), 10),
        ("C", 10, 20, Some("0+3"), 15),
        ("C", 15, 25, Some("0+3"), 15),
        ("D", 15, 25, Some("0+4"), 20),
        ("D", 20, 30, Some("0+4"), 20),
        ("E", 35, 45, Some("0+5"), 40),
        ("E", 40, 50, Some("0+5"), 40),
    ]);
}

// KStreamWindowAggregateTest#shouldEmitFromLastEmitTime
/// A new processor on the same store emits only the windows that closed since the last emit
/// (`B [5, 15)`, `C [10, 20)` at stream time 25), never the ones already emitted. eosflow's
/// close timers are durable: each fires once, across restarts too (the driver's crash tests
/// and `tests/windows.rs` prove the restart part; here one driver runs on).
#[test]
fn should_emit_from_last_emit_time() {
    let win = Win::hopping(10, 5, 5);
    let mut d = strings(win, CLOSE, &ADDER);
    send(&mut d, &[("A", "1", 0), ("B", "2", 5), ("C", "3", 15)]);
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("A", 0, 10, Some("0+1"), 0),
        ("B", 0, 10, Some("0+2"), 5),
    ]);
    send(&mut d, &[("D", "4", 25)]);
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("B", 5, 15, Some("0+2"), 5),
        ("C", 10, 20, Some("0+3"), 15),
    ]);
    let mut d = strings(win, UPDATE, &ADDER);
    send(&mut d, &[("A", "1", 0), ("B", "2", 5), ("C", "3", 15)]);
    let _ = read_strings(&mut d, OUT);
    send(&mut d, &[("D", "4", 25)]);
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("D", 20, 30, Some("0+4"), 25),
        ("D", 25, 35, Some("0+4"), 25),
    ]);
}

// ---------------------------------------------------------------------------------------
// TimeWindowedKStreamImplTest: tumbling windows of 500, no grace
// ---------------------------------------------------------------------------------------

/// `TimeWindowedKStreamImplTest#processData`.
const TIME_DATA: &[(&str, &str, i64)] = &[
    ("1", "1", 10),
    ("1", "2", 15),
    ("1", "3", 500),
    ("2", "10", 550),
    ("2", "20", 500),
    ("2", "30", 1000),
];

fn time_windowed() -> Win {
    Win::time(500, 0)
}

/// Runs `TIME_DATA` through `fold` on update and on close; checks each against Kafka Streams'
/// rows.
fn time_windowed_case<A: Data>(
    fold: &Fold<A>,
    values: impl Serde<A> + Clone + 'static,
    read: fn(&mut Driver, &str) -> Vec<Row>,
    (update, close): (&[Ks], &[Ks]),
) {
    let win = time_windowed();
    for (emit, ks) in [(UPDATE, update), (CLOSE, close)] {
        let mut d = build(win, emit, fold, values.clone());
        send(&mut d, TIME_DATA);
        assert_ks(win, &read(&mut d, OUT), ks);
    }
}

// TimeWindowedKStreamImplTest#shouldCountWindowed
#[test]
fn time_windowed_should_count_windowed() {
    #[rustfmt::skip]
    time_windowed_case(&COUNT, I64Serde, read_counts, (
        &[
            ("1", 0, 500, Some("1"), 10),
            ("1", 0, 500, Some("2"), 15),
            ("1", 500, 1000, Some("1"), 500),
            ("2", 500, 1000, Some("1"), 550),
            ("2", 500, 1000, Some("2"), 550),
            ("2", 1000, 1500, Some("1"), 1000),
        ],
        &[
            ("1", 0, 500, Some("2"), 15),
            ("1", 500, 1000, Some("1"), 500),
            ("2", 500, 1000, Some("2"), 550),
        ],
    ));
}

// TimeWindowedKStreamImplTest#shouldReduceWindowed
/// Windowed `reduce(STRING_ADDER)` as `aggregate` (see the module docs).
#[test]
fn time_windowed_should_reduce_windowed() {
    #[rustfmt::skip]
    time_windowed_case(&REDUCER, StringSerde, read_strings, (
        &[
            ("1", 0, 500, Some("1"), 10),
            ("1", 0, 500, Some("1+2"), 15),
            ("1", 500, 1000, Some("3"), 500),
            ("2", 500, 1000, Some("10"), 550),
            ("2", 500, 1000, Some("10+20"), 550),
            ("2", 1000, 1500, Some("30"), 1000),
        ],
        &[
            ("1", 0, 500, Some("1+2"), 15),
            ("1", 500, 1000, Some("3"), 500),
            ("2", 500, 1000, Some("10+20"), 550),
        ],
    ));
}

// TimeWindowedKStreamImplTest#shouldAggregateWindowed
#[test]
fn time_windowed_should_aggregate_windowed() {
    #[rustfmt::skip]
    time_windowed_case(&ADDER, StringSerde, read_strings, (
        &[
            ("1", 0, 500, Some("0+1"), 10),
            ("1", 0, 500, Some("0+1+2"), 15),
            ("1", 500, 1000, Some("0+3"), 500),
            ("2", 500, 1000, Some("0+10"), 550),
            ("2", 500, 1000, Some("0+10+20"), 550),
            ("2", 1000, 1500, Some("0+30"), 1000),
        ],
        &[
            ("1", 0, 500, Some("0+1+2"), 15),
            ("1", 500, 1000, Some("0+3"), 500),
            ("2", 500, 1000, Some("0+10+20"), 550),
        ],
    ));
}

// TimeWindowedKStreamImplTest#shouldMaterializeCount
/// The store after `processData` (Kafka Streams' cache-off expectation): on update only the
/// window still open, `2 [1000, 1500)`, as in Kafka Streams. On close Kafka Streams still holds
/// the windows that closed at 1000 (its retention, `size + grace`, keeps them until 1500);
/// eosflow deletes a window when it closes unless `WindowedAggregate::retention` says
/// otherwise (a deliberate difference, documented).
#[test]
fn time_windowed_should_materialize_count() {
    let mut d = counts(time_windowed(), UPDATE);
    send(&mut d, TIME_DATA);
    assert_eq!(stored(&mut d, I64Serde), [("2".to_string(), 1000, 1500, 1)]);
    let mut d = counts(time_windowed(), CLOSE);
    send(&mut d, TIME_DATA);
    // Kafka Streams: [1@500/1000]=1, [2@500/1000]=2, [2@1000/1500]=1.
    assert_eq!(stored(&mut d, I64Serde), [("2".to_string(), 1000, 1500, 1)]);
}

// TimeWindowedKStreamImplTest#shouldMaterializeReduced
#[test]
fn time_windowed_should_materialize_reduced() {
    let mut d = strings(time_windowed(), UPDATE, &REDUCER);
    send(&mut d, TIME_DATA);
    assert_eq!(
        stored(&mut d, StringSerde),
        [("2".to_string(), 1000, 1500, "30".to_string())]
    );
}

// TimeWindowedKStreamImplTest#shouldMaterializeAggregated
#[test]
fn time_windowed_should_materialize_aggregated() {
    let mut d = strings(time_windowed(), UPDATE, &ADDER);
    send(&mut d, TIME_DATA);
    assert_eq!(
        stored(&mut d, StringSerde),
        [("2".to_string(), 1000, 1500, "0+30".to_string())]
    );
}

// ---------------------------------------------------------------------------------------
// KStreamSessionWindowAggregateProcessorTest: sessions of a 5-minute gap, no grace, counted
// ---------------------------------------------------------------------------------------

const GAP_MS: i64 = 5 * 60 * 1000;

/// The node Kafka Streams' test drives: a session count with `gap` and `grace` (ms), its store
/// retained `3 · GAP_MS` as the test's store is (`Stores.persistentSessionStore(…, GAP_MS *
/// 3)`), results to `output`.
fn session_node(gap: u64, grace: u64, emit: EmitStrategy) -> Driver {
    let windows = SessionWindows::with_inactivity_gap_and_grace(ms(gap), ms(grace));
    let store = WindowStoreHandle::new("store", StringSerde, I64Serde);
    let agg = WindowedAggregate::session(
        store,
        windows,
        || 0i64,
        |_, _: &String, n| n + 1,
        |_, a, b| a + b,
    )
    .emit(emit)
    .retention(ms(3 * GAP_MS as u64));
    let topology = Topology::builder()
        .add_source("in", &[IN], StringSerde, StringSerde)
        .add_windowed_aggregate("agg", agg, &["in"])
        .add_sink(
            "out",
            OUT,
            WindowedSerde::new(StringSerde),
            I64Serde,
            &["agg"],
        )
        .build()
        .expect("a valid topology");
    TopologyTestDriver::new(topology).expect("a driver")
}

fn gap_node(emit: EmitStrategy) -> Driver {
    session_node(GAP_MS as u64, 0, emit)
}

/// `sessionStore.findSessions(key, earliestEnd, latestStart)`: `key`'s sessions ending at or
/// after `earliest_end` and starting at or before `latest_start`, as `(start, end, count)`.
fn find_sessions(
    d: &mut Driver,
    key: &str,
    earliest_end: i64,
    latest_start: i64,
) -> Vec<(i64, i64, i64)> {
    stored(d, I64Serde)
        .into_iter()
        .filter(|(k, s, e, _)| k == key && *e >= earliest_end && *s <= latest_start)
        .map(|(_, s, e, n)| (s, e, n))
        .collect()
}

/// The last value forwarded for each window, tombstoned windows left out: what a record cache
/// flushed at the end would have forwarded (for Kafka Streams' cache-on expectations).
fn last_values(rows: &[Row]) -> BTreeMap<(String, i64, i64), String> {
    let mut m = BTreeMap::new();
    for (k, s, e, v, _) in rows {
        match v {
            Some(v) => m.insert((k.clone(), *s, *e), v.clone()),
            None => m.remove(&(k.clone(), *s, *e)),
        };
    }
    m
}

fn ks_values(ks: &[Ks]) -> BTreeMap<(String, i64, i64), String> {
    ks.iter()
        .filter_map(|(k, s, e, v, _)| v.map(|v| ((k.to_string(), *s, *e), v.to_string())))
        .collect()
}

fn session() -> Win {
    Win::session(GAP_MS as u64, 0)
}

// KStreamSessionWindowAggregateProcessorTest#shouldCreateSingleSessionWhenWithinGap
#[test]
fn should_create_single_session_when_within_gap() {
    for emit in [UPDATE, CLOSE] {
        let mut d = gap_node(emit);
        send(&mut d, &[("john", "first", 0), ("john", "second", 500)]);
        assert_eq!(find_sessions(&mut d, "john", 0, 2000), [(0, 500, 2)]);
    }
}

// KStreamSessionWindowAggregateProcessorTest#shouldMergeSessions
/// `mel@0`, `mel@GAP+1` (stream time GAP+1 closes `[0, 0]`), then `mel@GAP/2`, within the gap
/// of both. Kafka Streams merges the closed `[0, 0]` too: one session `[0, GAP+1]` of 3.
/// eosflow never reopens a closed session (its result may already be final and emitted): the
/// record merges with the open `[GAP+1, GAP+1]` only, `[0, 0]` of 1 stays as it was. A
/// deliberate difference, documented.
#[test]
fn should_merge_sessions() {
    for emit in [UPDATE, CLOSE] {
        let mut d = gap_node(emit);
        send(&mut d, &[("mel", "first", 0)]);
        assert_eq!(find_sessions(&mut d, "mel", 0, 0), [(0, 0, 1)]);
        send(&mut d, &[("mel", "second", GAP_MS + 1)]);
        assert_eq!(
            find_sessions(&mut d, "mel", GAP_MS + 1, GAP_MS + 1),
            [(GAP_MS + 1, GAP_MS + 1, 1)]
        );
        assert_eq!(
            find_sessions(&mut d, "mel", 0, 0),
            [(0, 0, 1)],
            "not within the gap"
        );
        send(&mut d, &[("mel", "third", GAP_MS / 2)]);
        // Kafka Streams: [(0, GAP_MS + 1, 3)].
        assert_eq!(
            find_sessions(&mut d, "mel", 0, GAP_MS + 1),
            [(0, 0, 1), (GAP_MS / 2, GAP_MS + 1, 2)]
        );
        assert!(dead(&mut d).is_empty());
    }
}

// KStreamSessionWindowAggregateProcessorTest#shouldUpdateSessionIfTheSameTime
#[test]
fn should_update_session_if_the_same_time() {
    for emit in [UPDATE, CLOSE] {
        let mut d = gap_node(emit);
        send(&mut d, &[("mel", "first", 0), ("mel", "second", 0)]);
        assert_eq!(find_sessions(&mut d, "mel", 0, 0), [(0, 0, 2)]);
    }
}

// KStreamSessionWindowAggregateProcessorTest#shouldHaveMultipleSessionsForSameIdWhenTimestampApartBySessionGap
/// Kafka Streams' expectation on update is with its cache on (the last update of each
/// session); eosflow forwards every update, whose last per session are Kafka Streams' rows.
#[test]
fn should_have_multiple_sessions_for_same_id_when_timestamp_apart_by_session_gap() {
    let (t1, t2) = (GAP_MS + 1, 2 * (GAP_MS + 1));
    let input = [
        ("mel", "first", 0),
        ("mel", "second", t1),
        ("mel", "second", t1),
        ("mel", "third", t2),
        ("mel", "third", t2),
        ("mel", "third", t2),
    ];
    let mut d = gap_node(UPDATE);
    send(&mut d, &input);
    let got = read_counts(&mut d, OUT);
    #[rustfmt::skip]
    let ks: &[Ks] = &[
        ("mel", 0, 0, Some("1"), 0),
        ("mel", t1, t1, Some("2"), t1),
        ("mel", t2, t2, Some("3"), t2),
    ];
    assert_eq!(last_values(&got), ks_values(ks));
    #[rustfmt::skip]
    assert_ks(session(), &got, &[
        ("mel", 0, 0, Some("1"), 0),
        ("mel", t1, t1, Some("1"), t1),
        ("mel", t1, t1, Some("2"), t1),
        ("mel", t2, t2, Some("1"), t2),
        ("mel", t2, t2, Some("2"), t2),
        ("mel", t2, t2, Some("3"), t2),
    ]);

    let mut d = gap_node(CLOSE);
    send(&mut d, &input);
    #[rustfmt::skip]
    assert_ks(session(), &read_counts(&mut d, OUT), &[
        ("mel", 0, 0, Some("1"), 0),
        ("mel", t1, t1, Some("2"), t1),
    ]);
}

// KStreamSessionWindowAggregateProcessorTest#shouldRemoveMergedSessionsFromStateStore
#[test]
fn should_remove_merged_sessions_from_state_store() {
    for emit in [UPDATE, CLOSE] {
        let mut d = gap_node(emit);
        send(&mut d, &[("a", "1", 0)]);
        assert_eq!(find_sessions(&mut d, "a", 0, 0), [(0, 0, 1)]);
        send(&mut d, &[("a", "2", 100)]);
        assert_eq!(find_sessions(&mut d, "a", 0, 100), [(0, 100, 2)]);
    }
}

// KStreamSessionWindowAggregateProcessorTest#shouldHandleMultipleSessionsAndMerging
/// On update Kafka Streams' expectation is with its cache on: eosflow's last value of each
/// session (merged-away sessions end as tombstones) are its rows.
#[test]
fn should_handle_multiple_sessions_and_merging() {
    let (g, h) = (GAP_MS, GAP_MS / 2);
    let input = [
        ("a", "1", 0),
        ("b", "1", 0),
        ("c", "1", 0),
        ("d", "1", 0),
        ("d", "2", h),
        ("a", "2", g + 1),
        ("b", "2", g + 1),
        ("a", "3", g + 1 + h),
        ("c", "3", g + 1 + h),
    ];
    let mut d = gap_node(UPDATE);
    send(&mut d, &input);
    let got = read_counts(&mut d, OUT);
    #[rustfmt::skip]
    let ks: &[Ks] = &[
        ("a", 0, 0, Some("1"), 0),
        ("b", 0, 0, Some("1"), 0),
        ("c", 0, 0, Some("1"), 0),
        ("d", 0, h, Some("2"), h),
        ("b", g + 1, g + 1, Some("1"), g + 1),
        ("a", g + 1, g + 1 + h, Some("2"), g + 1 + h),
        ("c", g + 1 + h, g + 1 + h, Some("1"), g + 1 + h),
    ];
    assert_eq!(last_values(&got), ks_values(ks));
    #[rustfmt::skip]
    assert_ks(session(), &got, &[
        ("a", 0, 0, Some("1"), 0),
        ("b", 0, 0, Some("1"), 0),
        ("c", 0, 0, Some("1"), 0),
        ("d", 0, 0, Some("1"), 0),
        ("d", 0, 0, None, 0),
        ("d", 0, h, Some("2"), h),
        ("a", g + 1, g + 1, Some("1"), g + 1),
        ("b", g + 1, g + 1, Some("1"), g + 1),
        ("a", g + 1, g + 1, None, g + 1),
        ("a", g + 1, g + 1 + h, Some("2"), g + 1 + h),
        ("c", g + 1 + h, g + 1 + h, Some("1"), g + 1 + h),
    ]);

    let mut d = gap_node(CLOSE);
    send(&mut d, &input);
    #[rustfmt::skip]
    assert_ks(session(), &read_counts(&mut d, OUT), &[
        ("a", 0, 0, Some("1"), 0),
        ("b", 0, 0, Some("1"), 0),
        ("c", 0, 0, Some("1"), 0),
        ("d", 0, h, Some("2"), h),
    ]);
}

// KStreamSessionWindowAggregateProcessorTest#shouldGetAggregatedValuesFromValueGetter
/// Kafka Streams reads the sessions through the aggregate's value getter; eosflow's
/// counterpart is the windowed store (retained `3 · GAP_MS` as the test's).
#[test]
fn should_get_aggregated_values_from_value_getter() {
    for emit in [UPDATE, CLOSE] {
        let mut d = gap_node(emit);
        send(
            &mut d,
            &[
                ("a", "1", 0),
                ("a", "1", GAP_MS + 1),
                ("a", "2", GAP_MS + 1),
            ],
        );
        assert_eq!(find_sessions(&mut d, "a", 0, 0), [(0, 0, 1)]);
        assert_eq!(
            find_sessions(&mut d, "a", GAP_MS + 1, GAP_MS + 1),
            [(GAP_MS + 1, GAP_MS + 1, 2)]
        );
    }
}

// KStreamSessionWindowAggregateProcessorTest#shouldImmediatelyForwardNewSessionWhenNonCachedStore
#[test]
fn should_immediately_forward_new_session_when_non_cached_store() {
    let mut d = gap_node(UPDATE);
    send(&mut d, &[("a", "1", 0), ("b", "1", 0), ("c", "1", 0)]);
    #[rustfmt::skip]
    assert_ks(session(), &read_counts(&mut d, OUT), &[
        ("a", 0, 0, Some("1"), 0),
        ("b", 0, 0, Some("1"), 0),
        ("c", 0, 0, Some("1"), 0),
    ]);
}

// KStreamSessionWindowAggregateProcessorTest#shouldImmediatelyForwardRemovedSessionsWhenMerging
/// A session that grows at its end replaces `[0, 0]` by `[0, 5]`: the old session is
/// forwarded as a tombstone first (issue 48: eosflow forwarded none, so a table keyed by the
/// windowed key kept a stale `[0, 0]` row).
#[test]
fn should_immediately_forward_removed_sessions_when_merging() {
    let mut d = gap_node(UPDATE);
    send(&mut d, &[("a", "1", 0), ("a", "1", 5)]);
    #[rustfmt::skip]
    assert_ks(session(), &read_counts(&mut d, OUT), &[
        ("a", 0, 0, Some("1"), 0),
        ("a", 0, 0, None, 0),
        ("a", 0, 5, Some("2"), 5),
    ]);
}

// KStreamSessionWindowAggregateProcessorTest#shouldLogAndMeterWhenSkippingNullKeyWithBuiltInMetrics
/// Kafka Streams skips the record (log line, dropped-records metric); eosflow dead-letters it
/// as `permanent`.
#[test]
fn should_log_and_meter_when_skipping_null_key_with_built_in_metrics() {
    for emit in [UPDATE, CLOSE] {
        let mut d = gap_node(emit);
        d.pipe(TestRecord::new(IN, None::<&str>, Some("1")).timestamp(0))
            .expect("pipe");
        assert!(read_counts(&mut d, OUT).is_empty());
        assert_eq!(dead(&mut d), ["permanent"]);
    }
}

// KStreamSessionWindowAggregateProcessorTest#shouldLogAndMeterWhenSkippingLateRecordWithZeroGrace
/// Gap 10, no grace: at stream time 11 a session `[0, 0]` is closed (`0 < 11 - 10 - 0`);
/// `Late1@0` is late — dropped by Kafka Streams (dropped-records-total 1), dead-lettered by
/// eosflow.
#[test]
fn should_log_and_meter_when_skipping_late_record_with_zero_grace() {
    let win = Win::session(10, 0);
    let mut d = session_node(10, 0, UPDATE);
    send(
        &mut d,
        &[
            ("dummy", "dummy", 0),
            ("OnTime1", "1", 0),
            ("dummy", "dummy", 11),
        ],
    );
    #[rustfmt::skip]
    assert_ks(win, &read_counts(&mut d, OUT), &[
        ("dummy", 0, 0, Some("1"), 0),
        ("OnTime1", 0, 0, Some("1"), 0),
        ("dummy", 11, 11, Some("1"), 11),
    ]);
    send(&mut d, &[("Late1", "1", 0)]);
    assert!(read_counts(&mut d, OUT).is_empty());
    let late_one = d.read_raw_output("input.DLT");
    assert_eq!(late_one.len(), 1);
    assert_eq!(late_one[0].dlt_class(), Some("late-record"));
    // Kafka Streams' log line: window=[0,0] expiration=[1] streamTime=[11].
    assert_eq!(late_one[0].header("eosflow.dlt.late.windows"), Some("0-0"));
    assert_eq!(
        late_one[0].header("eosflow.dlt.late.stream.time"),
        Some("11")
    );
}

// KStreamSessionWindowAggregateProcessorTest#shouldLogAndMeterWhenSkippingLateRecordWithNonzeroGrace
/// Gap 10, grace 1: at stream time 11 a session `[0, 0]` is still open (`0 >= 11 - 10 - 1`), so
/// `OnTime2@0` is aggregated (issue 48: eosflow closed sessions 1 ms early and dead-lettered
/// it); at 12 it is closed and `Late1@0` is late.
#[test]
fn should_log_and_meter_when_skipping_late_record_with_nonzero_grace() {
    let win = Win::session(10, 1);
    let mut d = session_node(10, 1, UPDATE);
    send(
        &mut d,
        &[
            ("dummy", "dummy", 0),
            ("OnTime1", "1", 0),
            ("dummy", "dummy", 11),
            ("OnTime2", "1", 0),
        ],
    );
    #[rustfmt::skip]
    assert_ks(win, &read_counts(&mut d, OUT), &[
        ("dummy", 0, 0, Some("1"), 0),
        ("OnTime1", 0, 0, Some("1"), 0),
        ("dummy", 11, 11, Some("1"), 11),
        ("OnTime2", 0, 0, Some("1"), 0),
    ]);
    assert!(dead(&mut d).is_empty(), "OnTime2 is on time");
    send(&mut d, &[("dummy", "dummy", 12), ("Late1", "1", 0)]);
    // dummy@12 joins dummy's session [11, 11], which grows: a tombstone, then [11, 12].
    #[rustfmt::skip]
    assert_ks(win, &read_counts(&mut d, OUT), &[
        ("dummy", 11, 11, None, 11),
        ("dummy", 11, 12, Some("2"), 12),
    ]);
    assert_eq!(dead(&mut d), late(1));
}

// ---------------------------------------------------------------------------------------
// SessionWindowedKStreamImplTest: sessions of a 500 ms gap, no grace
// ---------------------------------------------------------------------------------------

/// `SessionWindowedKStreamImplTest#processData`.
const SESSION_DATA: &[(&str, &str, i64)] = &[
    ("1", "1", 10),
    ("1", "2", 15),
    ("1", "3", 600),
    ("2", "1", 600),
    ("2", "2", 599),
];

fn session_windowed() -> Win {
    Win::session(500, 0)
}

/// Runs `SESSION_DATA` through `fold` on update and on close, against Kafka Streams' rows.
fn session_windowed_case<A: Data>(
    fold: &Fold<A>,
    values: impl Serde<A> + Clone + 'static,
    read: fn(&mut Driver, &str) -> Vec<Row>,
    (update, close): (&[Ks], &[Ks]),
) {
    let win = session_windowed();
    for (emit, ks) in [(UPDATE, update), (CLOSE, close)] {
        let mut d = build(win, emit, fold, values.clone());
        send(&mut d, SESSION_DATA);
        assert_ks(win, &read(&mut d, OUT), ks);
    }
}

/// `shouldCountSessionWindowed`, which both the cache-on and the cache-off method run with
/// the same expectation.
fn session_windowed_count() {
    #[rustfmt::skip]
    session_windowed_case(&COUNT, I64Serde, read_counts, (
        &[
            ("1", 10, 10, Some("1"), 10),
            ("1", 10, 10, None, 10),
            ("1", 10, 15, Some("2"), 15),
            ("1", 600, 600, Some("1"), 600),
            ("2", 600, 600, Some("1"), 600),
            ("2", 600, 600, None, 600),
            ("2", 599, 600, Some("2"), 600),
        ],
        &[("1", 10, 15, Some("2"), 15)],
    ));
}

// SessionWindowedKStreamImplTest#shouldCountSessionWindowedWithCachingDisabled
#[test]
fn should_count_session_windowed_with_caching_disabled() {
    session_windowed_count();
}

// SessionWindowedKStreamImplTest#shouldCountSessionWindowedWithCachingEnabled
/// Kafka Streams expects the same rows with its cache on (eosflow has no cache here).
#[test]
fn should_count_session_windowed_with_caching_enabled() {
    session_windowed_count();
}

// SessionWindowedKStreamImplTest#shouldReduceWindowed
/// Windowed `reduce(STRING_ADDER)` as `aggregate`.
#[test]
fn session_windowed_should_reduce_windowed() {
    #[rustfmt::skip]
    session_windowed_case(&REDUCER, StringSerde, read_strings, (
        &[
            ("1", 10, 10, Some("1"), 10),
            ("1", 10, 10, None, 10),
            ("1", 10, 15, Some("1+2"), 15),
            ("1", 600, 600, Some("3"), 600),
            ("2", 600, 600, Some("1"), 600),
            ("2", 600, 600, None, 600),
            ("2", 599, 600, Some("1+2"), 600),
        ],
        &[("1", 10, 15, Some("1+2"), 15)],
    ));
}

// SessionWindowedKStreamImplTest#shouldAggregateSessionWindowed
/// The session `[10, 10]` grows to `[10, 15]`: Kafka Streams forwards `([1@10/10], null)`
/// before `([1@10/15], "0+0+1+2")` (issue 48: eosflow did not).
#[test]
fn should_aggregate_session_windowed() {
    #[rustfmt::skip]
    session_windowed_case(&ADDER, StringSerde, read_strings, (
        &[
            ("1", 10, 10, Some("0+1"), 10),
            ("1", 10, 10, None, 10),
            ("1", 10, 15, Some("0+0+1+2"), 15),
            ("1", 600, 600, Some("0+3"), 600),
            ("2", 600, 600, Some("0+1"), 600),
            ("2", 600, 600, None, 600),
            ("2", 599, 600, Some("0+0+1+2"), 600),
        ],
        &[("1", 10, 15, Some("0+0+1+2"), 15)],
    ));
}

/// The session store after `SESSION_DATA`, on update and on close. Kafka Streams' on-close
/// expectation is eosflow's in both: eosflow deletes a session when it closes (`[10, 15]` at
/// stream time 516); Kafka Streams on update still holds it at 600 (its retention, `gap +
/// grace`, counts from segment boundaries). A deliberate difference, documented.
fn session_windowed_materialized<A: Data + PartialEq + std::fmt::Debug>(
    fold: &Fold<A>,
    values: impl Serde<A> + Clone + 'static,
    want: [(&str, i64, i64, A); 2],
) {
    let want: Vec<(String, i64, i64, A)> = want
        .into_iter()
        .map(|(k, s, e, v)| (k.to_string(), s, e, v))
        .collect();
    for emit in [UPDATE, CLOSE] {
        let mut d = build(session_windowed(), emit, fold, values.clone());
        send(&mut d, SESSION_DATA);
        assert_eq!(stored(&mut d, values.clone()), want, "{emit:?}");
    }
}

// SessionWindowedKStreamImplTest#shouldMaterializeCount
/// Kafka Streams on update: also `[1@10/15]=2`.
#[test]
fn session_windowed_should_materialize_count() {
    session_windowed_materialized(&COUNT, I64Serde, [("1", 600, 600, 1), ("2", 599, 600, 2)]);
}

// SessionWindowedKStreamImplTest#shouldMaterializeReduced
/// Kafka Streams on update: also `[1@10/15]="1+2"`.
#[test]
fn session_windowed_should_materialize_reduced() {
    session_windowed_materialized(
        &REDUCER,
        StringSerde,
        [
            ("1", 600, 600, "3".to_string()),
            ("2", 599, 600, "1+2".to_string()),
        ],
    );
}

// SessionWindowedKStreamImplTest#shouldMaterializeAggregated
/// Kafka Streams on update: also `[1@10/15]="0+0+1+2"`.
#[test]
fn session_windowed_should_materialize_aggregated() {
    session_windowed_materialized(
        &ADDER,
        StringSerde,
        [
            ("1", 600, 600, "0+3".to_string()),
            ("2", 599, 600, "0+0+1+2".to_string()),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// SlidingWindowedKStreamImplTest: sliding windows of 100, grace 1000
// ---------------------------------------------------------------------------------------

/// `SlidingWindowedKStreamImplTest#processData`.
const SLIDING_DATA: &[(&str, &str, i64)] = &[
    ("1", "1", 100),
    ("1", "2", 150),
    ("1", "3", 500),
    ("2", "10", 200),
    ("2", "20", 150),
];

fn sliding_windowed() -> Win {
    Win::sliding(100, 1000)
}

/// Kafka Streams checks the last value (and timestamp) forwarded for each window
/// (`lastValueAndTimestampPerKey`); the values are checked here, the timestamps are eosflow's
/// (each window's end) in every forwarded row.
fn sliding_windowed_case<A: Data>(
    fold: &Fold<A>,
    values: impl Serde<A> + Clone + 'static,
    read: fn(&mut Driver, &str) -> Vec<Row>,
    ks: &[Ks],
) {
    let win = sliding_windowed();
    let mut d = build(win, UPDATE, fold, values);
    send(&mut d, SLIDING_DATA);
    let got = read(&mut d, OUT);
    assert!(got.iter().all(|(_, _, e, _, ts)| ts == e), "{got:?}");
    assert_eq!(last_values(&got), ks_values(ks));
}

// SlidingWindowedKStreamImplTest#shouldCountSlidingWindows
#[test]
fn should_count_sliding_windows() {
    #[rustfmt::skip]
    sliding_windowed_case(&COUNT, I64Serde, read_counts, &[
        ("1", 0, 100, Some("1"), 100),
        ("1", 101, 201, Some("1"), 150),
        ("1", 50, 150, Some("2"), 150),
        ("1", 400, 500, Some("1"), 500),
        ("2", 100, 200, Some("2"), 200),
        ("2", 50, 150, Some("1"), 150),
        ("2", 151, 251, Some("1"), 200),
    ]);
}

// SlidingWindowedKStreamImplTest#shouldReduceSlidingWindows
/// Windowed `reduce(STRING_ADDER)` as `aggregate`.
#[test]
fn should_reduce_sliding_windows() {
    #[rustfmt::skip]
    sliding_windowed_case(&REDUCER, StringSerde, read_strings, &[
        ("1", 0, 100, Some("1"), 100),
        ("1", 101, 201, Some("2"), 150),
        ("1", 50, 150, Some("1+2"), 150),
        ("1", 400, 500, Some("3"), 500),
        ("2", 100, 200, Some("10+20"), 200),
        ("2", 50, 150, Some("20"), 150),
        ("2", 151, 251, Some("10"), 200),
    ]);
}

// SlidingWindowedKStreamImplTest#shouldAggregateSlidingWindows
#[test]
fn should_aggregate_sliding_windows() {
    #[rustfmt::skip]
    sliding_windowed_case(&ADDER, StringSerde, read_strings, &[
        ("1", 0, 100, Some("0+1"), 100),
        ("1", 101, 201, Some("0+2"), 150),
        ("1", 50, 150, Some("0+1+2"), 150),
        ("1", 400, 500, Some("0+3"), 500),
        ("2", 100, 200, Some("0+10+20"), 200),
        ("2", 50, 150, Some("0+20"), 150),
        ("2", 151, 251, Some("0+10"), 200),
    ]);
}

/// The store after `SLIDING_DATA`: every window, still within grace.
fn sliding_materialized<A: Data + PartialEq + std::fmt::Debug>(
    fold: &Fold<A>,
    values: impl Serde<A> + Clone + 'static,
    want: [(&str, i64, i64, A); 7],
) {
    let mut d = build(sliding_windowed(), UPDATE, fold, values.clone());
    send(&mut d, SLIDING_DATA);
    let want: Vec<(String, i64, i64, A)> = want
        .into_iter()
        .map(|(k, s, e, v)| (k.to_string(), s, e, v))
        .collect();
    assert_eq!(stored(&mut d, values), want);
}

// SlidingWindowedKStreamImplTest#shouldMaterializeCount
#[test]
fn sliding_windowed_should_materialize_count() {
    sliding_materialized(
        &COUNT,
        I64Serde,
        [
            ("1", 0, 100, 1),
            ("1", 50, 150, 2),
            ("1", 101, 201, 1),
            ("1", 400, 500, 1),
            ("2", 50, 150, 1),
            ("2", 100, 200, 2),
            ("2", 151, 251, 1),
        ],
    );
}

// SlidingWindowedKStreamImplTest#shouldMaterializeReduced
#[test]
fn sliding_windowed_should_materialize_reduced() {
    let s = |v: &str| v.to_string();
    sliding_materialized(
        &REDUCER,
        StringSerde,
        [
            ("1", 0, 100, s("1")),
            ("1", 50, 150, s("1+2")),
            ("1", 101, 201, s("2")),
            ("1", 400, 500, s("3")),
            ("2", 50, 150, s("20")),
            ("2", 100, 200, s("10+20")),
            ("2", 151, 251, s("10")),
        ],
    );
}

// SlidingWindowedKStreamImplTest#shouldMaterializeAggregated
#[test]
fn sliding_windowed_should_materialize_aggregated() {
    let s = |v: &str| v.to_string();
    sliding_materialized(
        &ADDER,
        StringSerde,
        [
            ("1", 0, 100, s("0+1")),
            ("1", 50, 150, s("0+1+2")),
            ("1", 101, 201, s("0+2")),
            ("1", 400, 500, s("0+3")),
            ("2", 50, 150, s("0+20")),
            ("2", 100, 200, s("0+10+20")),
            ("2", 151, 251, s("0+10")),
        ],
    );
}

// SlidingWindowedKStreamImplTest#shouldDropWindowsOutsideOfRetention
/// Kafka Streams' store retains windows 1200 ms past their end (`inMemoryWindowStore(…,
/// 1200, …)`); eosflow's retention counts from a window's close (`end + grace + 1`), so the
/// same store is `retention(1200 - 1000 - 1)`, through the topology builder (the DSL's
/// `Materialized` has no retention).
#[test]
fn should_drop_windows_outside_of_retention() {
    let windows = SlidingWindows::of_time_difference_and_grace(ms(100), ms(1000));
    let store = WindowStoreHandle::new("store", StringSerde, StringSerde);
    let agg = WindowedAggregate::sliding(
        store,
        windows,
        || "0".to_string(),
        |_, v: &String, a| format!("{a}+{v}"),
    )
    .retention(ms(199));
    let topology = Topology::builder()
        .add_source("in", &[IN], StringSerde, StringSerde)
        .add_windowed_aggregate("agg", agg, &["in"])
        .add_sink(
            "out",
            OUT,
            WindowedSerde::new(StringSerde),
            StringSerde,
            &["agg"],
        )
        .build()
        .expect("a valid topology");
    let mut d = TopologyTestDriver::new(topology).expect("a driver");
    send(
        &mut d,
        &[
            ("1", "2", 100),
            ("1", "3", 500),
            ("1", "4", 799),
            ("1", "4", 1000),
            ("1", "5", 2000),
        ],
    );
    let s = |v: &str| v.to_string();
    assert_eq!(
        stored(&mut d, StringSerde),
        [
            ("1".to_string(), 900, 1000, s("0+4")),
            ("1".to_string(), 1900, 2000, s("0+5"))
        ]
    );
}

// ---------------------------------------------------------------------------------------
// KStreamSlidingWindowAggregateTest
// ---------------------------------------------------------------------------------------

/// Kafka Streams' `gatherOutput`: every value forwarded for each window start, with Kafka
/// Streams' timestamps (`ValueAndTimestamp`) in its tables; eosflow's are checked apart (each
/// window's end).
type Gathered = BTreeMap<i64, BTreeSet<String>>;

fn gather(rows: &[Row]) -> Gathered {
    let mut m: Gathered = BTreeMap::new();
    for (_, s, e, v, ts) in rows {
        assert_eq!(ts, e, "a sliding result is stamped with its window's end");
        m.entry(*s)
            .or_default()
            .insert(v.clone().unwrap_or_default());
    }
    m
}

fn ks_gathered(ks: &[(i64, &[(&str, i64)])]) -> Gathered {
    ks.iter()
        .map(|(s, vs)| (*s, vs.iter().map(|(v, _)| v.to_string()).collect()))
        .collect()
}

/// eosflow's results sorted by key then window start, as Kafka Streams' comparator sorts
/// them (stable: updates of a window stay in order).
fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    rows
}

/// Runs `input` through sliding windows of `td` and `grace` with `fold`, on `emit`.
fn sliding_run(
    td: u64,
    grace: u64,
    emit: EmitStrategy,
    fold: &Fold<String>,
    input: &[(&str, &str, i64)],
) -> Vec<Row> {
    sliding_late(td, grace, emit, fold, input, 0)
}

/// [`sliding_run`] where `late` records are late (Kafka Streams drops them; eosflow
/// dead-letters them).
fn sliding_late(
    td: u64,
    grace: u64,
    emit: EmitStrategy,
    fold: &Fold<String>,
    input: &[(&str, &str, i64)],
    late_n: usize,
) -> Vec<Row> {
    let mut d = strings(Win::sliding(td, grace), emit, fold);
    send(&mut d, input);
    assert_eq!(dead(&mut d), late(late_n));
    read_strings(&mut d, OUT)
}

const SLIDING_SMALL: &[(&str, &str, i64)] = &[
    ("A", "1", 10),
    ("A", "2", 10),
    ("A", "3", 14),
    ("A", "4", 15),
    ("A", "5", 20),
    ("A", "6", 22),
    ("A", "7", 30),
];

// KStreamSlidingWindowAggregateTest#testAggregateSmallInput
#[test]
fn test_aggregate_small_input() {
    #[rustfmt::skip]
    let update: &[(i64, &[(&str, i64)])] = &[
        (0, &[("0+1", 10), ("0+1+2", 10)]),
        (4, &[("0+1+2+3", 14)]),
        (5, &[("0+1+2+3+4", 15)]),
        (10, &[("0+1+2+3+4+5", 20)]),
        (11, &[("0+3", 14), ("0+3+4", 15), ("0+3+4+5", 20)]),
        (12, &[("0+3+4+5+6", 22)]),
        (15, &[("0+4", 15), ("0+4+5", 20), ("0+4+5+6", 22)]),
        (16, &[("0+5", 20), ("0+5+6", 22)]),
        (20, &[("0+5+6+7", 30)]),
        (21, &[("0+6", 22), ("0+6+7", 30)]),
        (23, &[("0+7", 30)]),
    ];
    #[rustfmt::skip]
    let close: &[(i64, &[(&str, i64)])] = &[
        (0, &[("0+1+2", 10)]),
        (4, &[("0+1+2+3", 14)]),
        (5, &[("0+1+2+3+4", 15)]),
        (10, &[("0+1+2+3+4+5", 20)]),
        (11, &[("0+3+4+5", 20)]),
        (12, &[("0+3+4+5+6", 22)]),
    ];
    let got = sliding_run(10, 5, UPDATE, &ADDER, SLIDING_SMALL);
    assert_eq!(gather(&got), ks_gathered(update));
    let got = sliding_run(10, 5, CLOSE, &ADDER, SLIDING_SMALL);
    assert_eq!(gather(&got), ks_gathered(close));
    assert_eq!(got.len(), close.len(), "each window once");
}

// KStreamSlidingWindowAggregateTest#testReduceSmallInput
/// Windowed `reduce(STRING_ADDER)` as `aggregate`.
#[test]
fn test_reduce_small_input() {
    let input: &[(&str, &str, i64)] = &[
        ("A", "1", 10),
        ("A", "2", 14),
        ("A", "3", 15),
        ("A", "4", 22),
        ("A", "5", 26),
        ("A", "6", 30),
    ];
    #[rustfmt::skip]
    let update: &[(i64, &[(&str, i64)])] = &[
        (0, &[("1", 10)]),
        (4, &[("1+2", 14)]),
        (5, &[("1+2+3", 15)]),
        (11, &[("2", 14), ("2+3", 15)]),
        (12, &[("2+3+4", 22)]),
        (15, &[("3", 15), ("3+4", 22)]),
        (16, &[("4", 22), ("4+5", 26)]),
        (20, &[("4+5+6", 30)]),
        (23, &[("5", 26), ("5+6", 30)]),
        (27, &[("6", 30)]),
    ];
    #[rustfmt::skip]
    let close: &[(i64, &[(&str, i64)])] = &[
        (0, &[("1", 10)]),
        (4, &[("1+2", 14)]),
        (5, &[("1+2+3", 15)]),
        (11, &[("2+3", 15)]),
        (12, &[("2+3+4", 22)]),
    ];
    assert_eq!(
        gather(&sliding_run(10, 5, UPDATE, &REDUCER, input)),
        ks_gathered(update)
    );
    assert_eq!(
        gather(&sliding_run(10, 5, CLOSE, &REDUCER, input)),
        ks_gathered(close)
    );
}

// KStreamSlidingWindowAggregateTest#testAggregateLargeInput
/// On update with grace 50, on close with grace 10 (where the records marked "skip" in
/// Kafka Streams' test find their left windows closed: those windows are not created).
#[test]
fn test_aggregate_large_input() {
    let input: &[(&str, &str, i64)] = &[
        ("A", "1", 10),
        ("A", "2", 20),
        ("A", "3", 22),
        ("A", "4", 15),
        ("B", "1", 12),
        ("B", "2", 13),
        ("B", "3", 18),
        ("B", "4", 19),
        ("B", "5", 25),
        ("B", "6", 14),
        ("C", "1", 11),
        ("C", "2", 15),
        ("C", "3", 16),
        ("C", "4", 21),
        ("C", "5", 23),
        ("D", "4", 11),
        ("D", "2", 12),
        ("D", "3", 29),
        ("D", "5", 16),
    ];
    let win = Win::sliding(10, 50);
    let got = sorted(sliding_run(10, 50, UPDATE, &ADDER, input));
    #[rustfmt::skip]
    assert_ks(win, &got, &[
        ("A", 0, 10, Some("0+1"), 10),
        ("A", 5, 15, Some("0+1+4"), 15),
        ("A", 10, 20, Some("0+1+2"), 20),
        ("A", 10, 20, Some("0+1+2+4"), 20),
        ("A", 11, 21, Some("0+2"), 20),
        ("A", 11, 21, Some("0+2+4"), 20),
        ("A", 12, 22, Some("0+2+3"), 22),
        ("A", 12, 22, Some("0+2+3+4"), 22),
        ("A", 16, 26, Some("0+2+3"), 22),
        ("A", 21, 31, Some("0+3"), 22),
        ("B", 2, 12, Some("0+1"), 12),
        ("B", 3, 13, Some("0+1+2"), 13),
        ("B", 4, 14, Some("0+1+2+6"), 14),
        ("B", 8, 18, Some("0+1+2+3"), 18),
        ("B", 8, 18, Some("0+1+2+3+6"), 18),
        ("B", 9, 19, Some("0+1+2+3+4"), 19),
        ("B", 9, 19, Some("0+1+2+3+4+6"), 19),
        ("B", 13, 23, Some("0+2"), 13),
        ("B", 13, 23, Some("0+2+3"), 18),
        ("B", 13, 23, Some("0+2+3+4"), 19),
        ("B", 13, 23, Some("0+2+3+4+6"), 19),
        ("B", 14, 24, Some("0+3"), 18),
        ("B", 14, 24, Some("0+3+4"), 19),
        ("B", 14, 24, Some("0+3+4+6"), 19),
        ("B", 15, 25, Some("0+3+4+5"), 25),
        ("B", 19, 29, Some("0+4"), 19),
        ("B", 19, 29, Some("0+4+5"), 25),
        ("B", 20, 30, Some("0+5"), 25),
        ("C", 1, 11, Some("0+1"), 11),
        ("C", 5, 15, Some("0+1+2"), 15),
        ("C", 6, 16, Some("0+1+2+3"), 16),
        ("C", 11, 21, Some("0+1+2+3+4"), 21),
        ("C", 12, 22, Some("0+2"), 15),
        ("C", 12, 22, Some("0+2+3"), 16),
        ("C", 12, 22, Some("0+2+3+4"), 21),
        ("C", 13, 23, Some("0+2+3+4+5"), 23),
        ("C", 16, 26, Some("0+3"), 16),
        ("C", 16, 26, Some("0+3+4"), 21),
        ("C", 16, 26, Some("0+3+4+5"), 23),
        ("C", 17, 27, Some("0+4"), 21),
        ("C", 17, 27, Some("0+4+5"), 23),
        ("C", 22, 32, Some("0+5"), 23),
        ("D", 1, 11, Some("0+4"), 11),
        ("D", 2, 12, Some("0+4+2"), 12),
        ("D", 6, 16, Some("0+4+2+5"), 16),
        ("D", 12, 22, Some("0+2"), 12),
        ("D", 12, 22, Some("0+2+5"), 16),
        ("D", 13, 23, Some("0+5"), 16),
        ("D", 19, 29, Some("0+3"), 29),
    ]);
    let win = Win::sliding(10, 10);
    // C1@11, D4@11, D2@12 and D5@16 find their left windows closed and no open window: late,
    // as Kafka Streams' "skip for emit final" comments say (B6@14 still goes into [8, 18]).
    let got = sorted(sliding_late(10, 10, CLOSE, &ADDER, input, 4));
    #[rustfmt::skip]
    assert_ks(win, &got, &[
        ("A", 0, 10, Some("0+1"), 10),
        ("A", 5, 15, Some("0+1+4"), 15),
        ("B", 2, 12, Some("0+1"), 12),
        ("B", 3, 13, Some("0+1+2"), 13),
        ("B", 8, 18, Some("0+1+2+3+6"), 18),
        ("C", 5, 15, Some("0+2"), 15),
        ("C", 6, 16, Some("0+2+3"), 16),
    ]);
}

// KStreamSlidingWindowAggregateTest#testNoGracePeriodSmallInput
#[test]
fn test_no_grace_period_small_input() {
    let input: &[(&str, &str, i64)] = &[
        ("A", "1", 100),
        ("A", "2", 105),
        ("A", "3", 106),
        ("A", "4", 103),
        ("A", "5", 113),
        ("A", "6", 110),
    ];
    let mut d = strings(Win::sliding(50, 0), UPDATE, &ADDER);
    send(&mut d, input);
    #[rustfmt::skip]
    assert_eq!(gather(&read_strings(&mut d, OUT)), ks_gathered(&[
        (50, &[("0+1", 100)]),
        (55, &[("0+1+2", 105)]),
        (56, &[("0+1+2+3", 106), ("0+1+2+3+4", 106)]),
        (63, &[("0+1+2+3+4+5", 113), ("0+1+2+3+4+5+6", 113)]),
        (101, &[("0+2", 105), ("0+2+3", 106), ("0+2+3+4", 106), ("0+2+3+4+5", 113), ("0+2+3+4+5+6", 113)]),
        (104, &[("0+2+3", 106), ("0+2+3+5", 113), ("0+2+3+5+6", 113)]),
        (106, &[("0+3", 106), ("0+3+5", 113), ("0+3+5+6", 113)]),
        (107, &[("0+5", 113), ("0+5+6", 113)]),
        (111, &[("0+5", 113)]),
    ]));
    // Records 4@103 and 6@110 find some of their windows closed (no grace): as in Kafka
    // Streams, they update only the open ones and none is late.
    assert!(dead(&mut d).is_empty());
    let mut d = strings(Win::sliding(50, 0), CLOSE, &ADDER);
    send(&mut d, input);
    #[rustfmt::skip]
    assert_eq!(gather(&read_strings(&mut d, OUT)), ks_gathered(&[
        (50, &[("0+1", 100)]),
        (55, &[("0+1+2", 105)]),
        (56, &[("0+1+2+3+4", 106)]),
    ]));
}

/// `testNoGracePeriodLargeInput`'s input; `testEarlyNoGracePeriodLargeInput`'s is the same
/// 100 ms earlier.
const SLIDING_LARGE_E: &[(&str, &str, i64)] = &[
    ("E", "1", 100),
    ("E", "3", 105),
    ("E", "4", 106),
    ("E", "2", 103),
    ("E", "6", 113),
    ("E", "5", 110),
    ("E", "7", 104),
    ("E", "8", 102),
    ("E", "9", 115),
];

// KStreamSlidingWindowAggregateTest#testNoGracePeriodLargeInput
#[test]
fn test_no_grace_period_large_input() {
    let win = Win::sliding(10, 0);
    // E8@102 at stream time 113: even [102, 112] has closed, late (Kafka Streams drops it).
    let got = sorted(sliding_late(10, 0, UPDATE, &ADDER, SLIDING_LARGE_E, 1));
    #[rustfmt::skip]
    assert_ks(win, &got, &[
        ("E", 90, 100, Some("0+1"), 100),
        ("E", 95, 105, Some("0+1+3"), 105),
        ("E", 96, 106, Some("0+1+3+4"), 106),
        ("E", 96, 106, Some("0+1+3+4+2"), 106),
        ("E", 101, 111, Some("0+3"), 105),
        ("E", 101, 111, Some("0+3+4"), 106),
        ("E", 101, 111, Some("0+3+4+2"), 106),
        ("E", 103, 113, Some("0+3+4+2+6"), 113),
        ("E", 103, 113, Some("0+3+4+2+6+5"), 113),
        ("E", 103, 113, Some("0+3+4+2+6+5+7"), 113),
        ("E", 104, 114, Some("0+3+4"), 106),
        ("E", 104, 114, Some("0+3+4+6"), 113),
        ("E", 104, 114, Some("0+3+4+6+5"), 113),
        ("E", 104, 114, Some("0+3+4+6+5+7"), 113),
        ("E", 105, 115, Some("0+3+4+6+5"), 113),
        ("E", 105, 115, Some("0+3+4+6+5+9"), 115),
        ("E", 106, 116, Some("0+4"), 106),
        ("E", 106, 116, Some("0+4+6"), 113),
        ("E", 106, 116, Some("0+4+6+5"), 113),
        ("E", 106, 116, Some("0+4+6+5+9"), 115),
        ("E", 107, 117, Some("0+6"), 113),
        ("E", 107, 117, Some("0+6+5"), 113),
        ("E", 107, 117, Some("0+6+5+9"), 115),
        ("E", 111, 121, Some("0+6"), 113),
        ("E", 111, 121, Some("0+6+9"), 115),
        ("E", 114, 124, Some("0+9"), 115),
    ]);
    let got = sorted(sliding_late(10, 0, CLOSE, &ADDER, SLIDING_LARGE_E, 1));
    #[rustfmt::skip]
    assert_ks(win, &got, &[
        ("E", 90, 100, Some("0+1"), 100),
        ("E", 95, 105, Some("0+1+3"), 105),
        ("E", 96, 106, Some("0+1+3+4+2"), 106),
        ("E", 101, 111, Some("0+3+4+2"), 106),
        ("E", 103, 113, Some("0+3+4+2+6+5+7"), 113),
        ("E", 104, 114, Some("0+3+4+6+5+7"), 113),
    ]);
}

/// The early-record tests: Kafka Streams puts every record earlier than the time difference
/// into one window `[0, td]`; eosflow gives each its own left window `[t - td, t]`, starting
/// before 0 (a deliberate difference, documented: eosflow's event times may be negative, and
/// no time is special). Every other window — the right windows and the left windows of the
/// later records, those starting after 0 — is Kafka Streams', with its every update
/// (`ks_after_0`); eosflow's windows starting at or before 0 are left windows of early records
/// (`t - td` for a record at `t`), listed in `own` with their values.
fn assert_early(got: &[Row], ks: &[(i64, &[(&str, i64)])], own: &[(i64, &[&str])]) {
    let all = gather(got);
    let after: Gathered = all
        .iter()
        .filter(|(s, _)| **s > 0)
        .map(|(s, v)| (*s, v.clone()))
        .collect();
    let ks_after: Gathered = ks_gathered(ks)
        .into_iter()
        .filter(|(s, _)| *s > 0)
        .collect();
    assert_eq!(
        after, ks_after,
        "the windows starting after 0 are Kafka Streams'"
    );
    let before: Gathered = all.into_iter().filter(|(s, _)| *s <= 0).collect();
    let own: Gathered = own
        .iter()
        .map(|(s, vs)| (*s, vs.iter().map(|v| v.to_string()).collect()))
        .collect();
    assert_eq!(before, own, "the early records' own left windows");
}

const EARLY_SMALL: &[(&str, &str, i64)] = &[
    ("A", "1", 0),
    ("A", "2", 5),
    ("A", "3", 6),
    ("A", "4", 3),
    ("A", "5", 13),
    ("A", "6", 10),
];

/// `testEarlyRecordsSmallInput` and `testEarlyNoGracePeriodSmallInput` (time difference 50,
/// grace 0; they differ in the value of the last record, at 70). Kafka Streams' window 0
/// (`[0, 50]`: every record) is eosflow's left windows of 0, 5, 6 and 13; with no grace a left
/// window is created only when still open as its record arrives: 3's `[-47, 3]` and 10's
/// `[-40, 10]` had closed (at 4 and 11, stream time 6 and 13), and 3 and 10 went into the open
/// windows that hold them.
fn early_small_case(last: &str) {
    let mut input = EARLY_SMALL.to_vec();
    input.push(("A", last, 70));
    let at_70 = format!("0+{last}");
    #[rustfmt::skip]
    let update: &[(i64, &[(&str, i64)])] = &[
        (0, &[("0+1", 0), ("0+1+2", 5), ("0+1+2+3", 6), ("0+1+2+3+4", 6), ("0+1+2+3+4+5", 13), ("0+1+2+3+4+5+6", 13)]),
        (1, &[("0+2", 5), ("0+2+3", 6), ("0+2+3+4", 6), ("0+2+3+4+5", 13), ("0+2+3+4+5+6", 13)]),
        (4, &[("0+2+3", 6), ("0+2+3+5", 13), ("0+2+3+5+6", 13)]),
        (6, &[("0+3", 6), ("0+3+5", 13), ("0+3+5+6", 13)]),
        (7, &[("0+5", 13), ("0+5+6", 13)]),
        (11, &[("0+5", 13)]),
        (20, &[(at_70.as_str(), 70)]),
    ];
    #[rustfmt::skip]
    let close: &[(i64, &[(&str, i64)])] = &[
        (0, &[("0+1+2+3+4+5+6", 13)]),
        (1, &[("0+2+3+4+5+6", 13)]),
        (4, &[("0+2+3+5+6", 13)]),
        (6, &[("0+3+5+6", 13)]),
        (7, &[("0+5+6", 13)]),
        (11, &[("0+5", 13)]),
    ];
    let got = sliding_run(50, 0, UPDATE, &ADDER, &input);
    #[rustfmt::skip]
    assert_early(&got, update, &[
        (-50, &["0+1"]),
        (-45, &["0+1+2"]),
        (-44, &["0+1+2+3", "0+1+2+3+4"]),
        (-37, &["0+1+2+3+4+5", "0+1+2+3+4+5+6"]),
    ]);
    let got = sliding_run(50, 0, CLOSE, &ADDER, &input);
    #[rustfmt::skip]
    assert_early(&got, close, &[
        (-50, &["0+1"]),
        (-45, &["0+1+2"]),
        (-44, &["0+1+2+3+4"]),
        (-37, &["0+1+2+3+4+5+6"]),
    ]);
}

// KStreamSlidingWindowAggregateTest#testEarlyRecordsSmallInput
#[test]
fn test_early_records_small_input() {
    early_small_case("7");
}

// KStreamSlidingWindowAggregateTest#testEarlyNoGracePeriodSmallInput
/// `ofTimeDifferenceWithNoGrace(50)`: the same as `ofTimeDifferenceAndGrace(50, 0)`.
#[test]
fn test_early_no_grace_period_small_input() {
    early_small_case("6");
}

/// Kafka Streams' sorted rows of one key as `gatherOutput` would see them.
fn ks_rows_gathered(ks: &[Ks]) -> Vec<(i64, Vec<(&'static str, i64)>)> {
    let mut m: BTreeMap<i64, Vec<(&'static str, i64)>> = BTreeMap::new();
    for (_, s, _, v, ts) in ks {
        m.entry(*s).or_default().push((v.unwrap_or_default(), *ts));
    }
    m.into_iter().collect()
}

fn assert_early_rows(got: &[Row], ks: &[Ks], own: &[(i64, &[&str])]) {
    let rows = ks_rows_gathered(ks);
    let ks: Vec<(i64, &[(&str, i64)])> = rows.iter().map(|(s, v)| (*s, v.as_slice())).collect();
    assert_early(got, &ks, own);
}

// KStreamSlidingWindowAggregateTest#testEarlyRecordsRepeatedInput
/// Time difference 5, grace 0, records repeated at 0 and 2.
#[test]
fn test_early_records_repeated_input() {
    let input: &[(&str, &str, i64)] = &[
        ("A", "1", 0),
        ("A", "2", 2),
        ("A", "3", 4),
        ("A", "4", 0),
        ("A", "5", 2),
        ("A", "6", 2),
        ("A", "7", 0),
        ("A", "8", 7),
    ];
    #[rustfmt::skip]
    let update: &[(i64, &[(&str, i64)])] = &[
        (0, &[("0+1", 0), ("0+1+2", 2), ("0+1+2+3+4+5", 4), ("0+1+2+3+4+5+6", 4), ("0+1+2+3", 4), ("0+1+2+3+4", 4), ("0+1+2+3+4+5+6+7", 4)]),
        (1, &[("0+2+3+5+6", 4), ("0+2", 2), ("0+2+3", 4), ("0+2+3+5", 4)]),
        (2, &[("0+2+3+5+6+8", 7)]),
        (3, &[("0+3", 4), ("0+3+8", 7)]),
        (5, &[("0+8", 7)]),
    ];
    #[rustfmt::skip]
    let close: &[(i64, &[(&str, i64)])] = &[
        (0, &[("0+1+2+3+4+5+6+7", 4)]),
        (1, &[("0+2+3+5+6", 4)]),
    ];
    let got = sliding_run(5, 0, UPDATE, &ADDER, input);
    #[rustfmt::skip]
    assert_early(&got, update, &[
        (-5, &["0+1"]),
        (-3, &["0+1+2"]),
        (-1, &["0+1+2+3", "0+1+2+3+4", "0+1+2+3+4+5", "0+1+2+3+4+5+6", "0+1+2+3+4+5+6+7"]),
    ]);
    let got = sliding_run(5, 0, CLOSE, &ADDER, input);
    assert_early(
        &got,
        close,
        &[(-5, &["0+1"]), (-3, &["0+1+2"]), (-1, &["0+1+2+3+4+5+6+7"])],
    );
}

/// `testEarlyRecordsLargeInput`'s input: `SLIDING_LARGE_E` 100 ms earlier.
fn early_large() -> Vec<(&'static str, &'static str, i64)> {
    SLIDING_LARGE_E
        .iter()
        .map(|(k, v, t)| (*k, *v, t - 100))
        .collect()
}

// KStreamSlidingWindowAggregateTest#testEarlyRecordsLargeInput
/// Time difference 10; grace 50 on update, 1 on close.
#[test]
fn test_early_records_large_input() {
    let input = early_large();
    let got = sliding_run(10, 50, UPDATE, &ADDER, &input);
    #[rustfmt::skip]
    assert_early_rows(&got, &[
        ("E", 0, 10, Some("0+1"), 0),
        ("E", 0, 10, Some("0+1+3"), 5),
        ("E", 0, 10, Some("0+1+3+4"), 6),
        ("E", 0, 10, Some("0+1+3+4+2"), 6),
        ("E", 0, 10, Some("0+1+3+4+2+5"), 10),
        ("E", 0, 10, Some("0+1+3+4+2+5+7"), 10),
        ("E", 0, 10, Some("0+1+3+4+2+5+7+8"), 10),
        ("E", 1, 11, Some("0+3"), 5),
        ("E", 1, 11, Some("0+3+4"), 6),
        ("E", 1, 11, Some("0+3+4+2"), 6),
        ("E", 1, 11, Some("0+3+4+2+5"), 10),
        ("E", 1, 11, Some("0+3+4+2+5+7"), 10),
        ("E", 1, 11, Some("0+3+4+2+5+7+8"), 10),
        ("E", 3, 13, Some("0+3+4+2+6"), 13),
        ("E", 3, 13, Some("0+3+4+2+6+5"), 13),
        ("E", 3, 13, Some("0+3+4+2+6+5+7"), 13),
        ("E", 4, 14, Some("0+3+4"), 6),
        ("E", 4, 14, Some("0+3+4+6"), 13),
        ("E", 4, 14, Some("0+3+4+6+5"), 13),
        ("E", 4, 14, Some("0+3+4+6+5+7"), 13),
        ("E", 5, 15, Some("0+3+4+6+5"), 13),
        ("E", 5, 15, Some("0+3+4+6+5+9"), 15),
        ("E", 6, 16, Some("0+4"), 6),
        ("E", 6, 16, Some("0+4+6"), 13),
        ("E", 6, 16, Some("0+4+6+5"), 13),
        ("E", 6, 16, Some("0+4+6+5+9"), 15),
        ("E", 7, 17, Some("0+6"), 13),
        ("E", 7, 17, Some("0+6+5"), 13),
        ("E", 7, 17, Some("0+6+5+9"), 15),
        ("E", 11, 21, Some("0+6"), 13),
        ("E", 11, 21, Some("0+6+9"), 15),
        ("E", 14, 24, Some("0+9"), 15),
    ], &[
        (-10, &["0+1"]),
        (-8, &["0+1+8"]),
        (-7, &["0+1+2", "0+1+2+8"]),
        (-6, &["0+1+2+7", "0+1+2+7+8"]),
        (-5, &["0+1+3", "0+1+3+2", "0+1+3+2+7", "0+1+3+2+7+8"]),
        (-4, &["0+1+3+4", "0+1+3+4+2", "0+1+3+4+2+7", "0+1+3+4+2+7+8"]),
        // 5@10's left window [0, 10]: at the end Kafka Streams' early window's value.
        (0, &["0+1+3+4+2+5", "0+1+3+4+2+5+7", "0+1+3+4+2+5+7+8"]),
    ]);
    // E8@2 at stream time 13: every window holding 2 has closed, late (Kafka Streams skips
    // it: its early window [0, 10] is closed).
    let got = sliding_late(10, 1, CLOSE, &ADDER, &input, 1);
    #[rustfmt::skip]
    assert_early_rows(&got, &[
        ("E", 0, 10, Some("0+1+3+4+2"), 6),
        ("E", 1, 11, Some("0+3+4+2"), 6),
        ("E", 3, 13, Some("0+3+4+2+6+5+7"), 13),
    ], &[(-10, &["0+1"]), (-5, &["0+1+3+2"]), (-4, &["0+1+3+4+2"])]);
}

// KStreamSlidingWindowAggregateTest#testEarlyNoGracePeriodLargeInput
/// Time difference 10, no grace.
#[test]
fn test_early_no_grace_period_large_input() {
    let input = early_large();
    // E8@2 at stream time 13: even [2, 12] has closed, late (Kafka Streams drops it).
    let got = sliding_late(10, 0, UPDATE, &ADDER, &input, 1);
    #[rustfmt::skip]
    assert_early_rows(&got, &[
        ("E", 0, 10, Some("0+1"), 0),
        ("E", 0, 10, Some("0+1+3"), 5),
        ("E", 0, 10, Some("0+1+3+4"), 6),
        ("E", 0, 10, Some("0+1+3+4+2"), 6),
        ("E", 1, 11, Some("0+3"), 5),
        ("E", 1, 11, Some("0+3+4"), 6),
        ("E", 1, 11, Some("0+3+4+2"), 6),
        ("E", 3, 13, Some("0+3+4+2+6"), 13),
        ("E", 3, 13, Some("0+3+4+2+6+5"), 13),
        ("E", 3, 13, Some("0+3+4+2+6+5+7"), 13),
        ("E", 4, 14, Some("0+3+4"), 6),
        ("E", 4, 14, Some("0+3+4+6"), 13),
        ("E", 4, 14, Some("0+3+4+6+5"), 13),
        ("E", 4, 14, Some("0+3+4+6+5+7"), 13),
        ("E", 5, 15, Some("0+3+4+6+5"), 13),
        ("E", 5, 15, Some("0+3+4+6+5+9"), 15),
        ("E", 6, 16, Some("0+4"), 6),
        ("E", 6, 16, Some("0+4+6"), 13),
        ("E", 6, 16, Some("0+4+6+5"), 13),
        ("E", 6, 16, Some("0+4+6+5+9"), 15),
        ("E", 7, 17, Some("0+6"), 13),
        ("E", 7, 17, Some("0+6+5"), 13),
        ("E", 7, 17, Some("0+6+5+9"), 15),
        ("E", 11, 21, Some("0+6"), 13),
        ("E", 11, 21, Some("0+6+9"), 15),
        ("E", 14, 24, Some("0+9"), 15),
    ], &[(-10, &["0+1"]), (-5, &["0+1+3"]), (-4, &["0+1+3+4", "0+1+3+4+2"])]);
    let got = sliding_late(10, 0, CLOSE, &ADDER, &input, 1);
    #[rustfmt::skip]
    assert_early_rows(&got, &[
        ("E", 0, 10, Some("0+1+3+4+2"), 6),
        ("E", 1, 11, Some("0+3+4+2"), 6),
        ("E", 3, 13, Some("0+3+4+2+6+5+7"), 13),
        ("E", 4, 14, Some("0+3+4+6+5+7"), 13),
    ], &[(-10, &["0+1"]), (-5, &["0+1+3"]), (-4, &["0+1+3+4+2"])]);
}

// KStreamSlidingWindowAggregateTest#shouldLogAndMeterWhenSkippingNullKey
/// Kafka Streams skips the record; eosflow dead-letters it as `permanent`.
#[test]
fn sliding_should_log_and_meter_when_skipping_null_key() {
    for emit in [UPDATE, CLOSE] {
        let mut d = strings(Win::sliding(10, 100), emit, &ADDER);
        d.pipe(TestRecord::new(IN, None::<&str>, Some("1")).timestamp(0))
            .expect("pipe");
        assert!(read_strings(&mut d, OUT).is_empty());
        assert_eq!(dead(&mut d), ["permanent"]);
    }
}

// KStreamSlidingWindowAggregateTest#shouldLogAndMeterWhenSkippingExpiredWindowByGrace
/// Time difference 10, grace 90: at stream time 200 the records at 100 to 105 and at 15 are
/// late (7: dropped by Kafka Streams, dead-lettered by eosflow).
#[test]
fn sliding_should_log_and_meter_when_skipping_expired_window_by_grace() {
    let input: &[(&str, &str, i64)] = &[
        ("k", "100", 200),
        ("k", "0", 100),
        ("k", "1", 101),
        ("k", "2", 102),
        ("k", "3", 103),
        ("k", "4", 104),
        ("k", "5", 105),
        ("k", "6", 15),
        ("k", "101", 300),
        ("k", "102", 400),
    ];
    let win = Win::sliding(10, 90);
    let mut d = strings(win, UPDATE, &ADDER);
    send(&mut d, input);
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("k", 190, 200, Some("0+100"), 200),
        ("k", 290, 300, Some("0+101"), 300),
        ("k", 390, 400, Some("0+102"), 400),
    ]);
    assert_eq!(dead(&mut d), late(7));
    let mut d = strings(win, CLOSE, &ADDER);
    send(&mut d, input);
    #[rustfmt::skip]
    assert_ks(win, &read_strings(&mut d, OUT), &[
        ("k", 190, 200, Some("0+100"), 200),
        ("k", 290, 300, Some("0+101"), 300),
    ]);
    assert_eq!(dead(&mut d), late(7));
}

/// A small deterministic generator (xorshift64*): every run shuffles the same way.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        usize::try_from(x % n as u64).expect("an index")
    }
}

// KStreamSlidingWindowAggregateTest#testAggregateRandomInput
/// Time difference 10, grace 100, the input shuffled (25 fixed seeds here, one random seed per
/// run in Kafka Streams), then `V@181`; the aggregate sorts its characters, so each window's
/// last value is the same whatever the order. On update: Kafka Streams' last values for every
/// window, its early window `[0, 10]` ("ARSTU") included (A@10's left window in eosflow), plus
/// eosflow's left windows of R@2, S@3, T@5 and U@8 (see `assert_early`). On close, V@181 closes every window (end + 101 ≤
/// 181) and eosflow emits each once; Kafka Streams emits only those still in its store
/// (`52..=70`: its on-close store drops windows past `td + grace` before they are emitted),
/// losing the others' final results — eosflow keeps a window until it is emitted (a deliberate
/// difference, documented).
#[test]
fn test_aggregate_random_input() {
    let input: Vec<(&str, i64)> = vec![
        ("A", 10),
        ("B", 15),
        ("C", 16),
        ("D", 18),
        ("E", 30),
        ("F", 40),
        ("G", 55),
        ("H", 56),
        ("I", 58),
        ("J", 58),
        ("K", 62),
        ("L", 63),
        ("M", 63),
        ("N", 63),
        ("O", 76),
        ("P", 77),
        ("Q", 80),
        ("R", 2),
        ("S", 3),
        ("T", 5),
        ("U", 8),
    ];
    let sort = Fold {
        init: String::new,
        aggregate: |_: &String, v: &String, a: String| {
            let mut c: Vec<char> = (a + v).chars().collect();
            c.sort_unstable();
            c.into_iter().collect()
        },
        merge: |_: &String, a: String, b: String| a + &b,
    };
    #[rustfmt::skip]
    let ks: BTreeMap<i64, &str> = [
        (0, "ARSTU"), (3, "ASTU"), (4, "ATU"), (5, "ABTU"), (6, "ABCU"), (8, "ABCDU"), (9, "ABCD"),
        (11, "BCD"), (16, "CD"), (17, "D"), (20, "E"), (30, "EF"), (31, "F"), (45, "G"),
        (46, "GH"), (48, "GHIJ"), (52, "GHIJK"), (53, "GHIJKLMN"), (56, "HIJKLMN"),
        (57, "IJKLMN"), (59, "KLMN"), (63, "LMN"), (66, "O"), (67, "OP"), (70, "OPQ"),
        (77, "PQ"), (78, "Q"), (171, "V"),
    ].into_iter().collect();
    // Kafka Streams' early window `[0, 10]` ("ARSTU") is also eosflow's: A@10's left window.
    let mut want: BTreeMap<i64, String> = ks.iter().map(|(s, v)| (*s, v.to_string())).collect();
    for (s, v) in [(-8, "R"), (-7, "RS"), (-5, "RST"), (-2, "RSTU")] {
        want.insert(s, v.to_string());
    }
    for seed in 1..=25u64 {
        let mut shuffled = input.clone();
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.below(i + 1));
        }
        let mut records: Vec<(&str, &str, i64)> =
            shuffled.iter().map(|(v, t)| ("A", *v, *t)).collect();
        records.push(("A", "V", 181));
        let got = sliding_run(10, 100, UPDATE, &sort, &records);
        let last: BTreeMap<i64, String> = got
            .iter()
            .map(|(_, s, _, v, _)| (*s, v.clone().unwrap_or_default()))
            .collect();
        assert_eq!(last, want, "seed {seed}: {shuffled:?}");

        let got = sliding_run(10, 100, CLOSE, &sort, &records);
        let once: BTreeMap<i64, String> = got
            .iter()
            .map(|(_, s, _, v, _)| (*s, v.clone().unwrap_or_default()))
            .collect();
        assert_eq!(once.len(), got.len(), "seed {seed}: each window once");
        // Kafka Streams: only 52, 53, 56, 57, 59, 63, 66, 67 and 70 of these.
        let closed: BTreeMap<i64, String> = want
            .iter()
            .filter(|(s, _)| **s + 10 + 101 <= 181)
            .map(|(s, v)| (*s, v.clone()))
            .collect();
        assert_eq!(once, closed, "seed {seed}");
        assert_eq!(once.len(), 29, "seed {seed}");
    }
}

// ---------------------------------------------------------------------------------------
// SuppressScenarioTest and KTableSuppressProcessorTest: `suppress(untilWindowCloses)`
// ---------------------------------------------------------------------------------------

/// One windowed count of `input` twice: every update to `output-raw`, the final results
/// (`suppress(untilWindowCloses(unbounded()))`, eosflow's `OnWindowClose`) to
/// `output-suppressed`.
fn raw_and_suppressed(win: Win) -> Driver {
    let builder = StreamsBuilder::new();
    let input = builder.stream(IN, Consumed::with(StringSerde, StringSerde));
    aggregate_into(
        input,
        (win, UPDATE),
        &COUNT,
        I64Serde,
        ("counts", "output-raw"),
    );
    aggregate_into(
        input,
        (win, CLOSE),
        &COUNT,
        I64Serde,
        ("final", "output-suppressed"),
    );
    TopologyTestDriver::new(builder.build().expect("a valid topology")).expect("a driver")
}

fn k1(times: &[i64]) -> Vec<(&'static str, &'static str, i64)> {
    times.iter().map(|t| ("k1", "v1", *t)).collect()
}

// SuppressScenarioTest#shouldSupportFinalResultsForTimeWindows
/// Tumbling windows of 2, grace 1; the last `k1@0` is late (dropped by Kafka Streams,
/// dead-lettered by eosflow).
#[test]
fn should_support_final_results_for_time_windows() {
    let win = Win::time(2, 1);
    let mut d = raw_and_suppressed(win);
    send(&mut d, &k1(&[0, 1, 2, 1, 0, 5, 0]));
    #[rustfmt::skip]
    assert_ks(win, &read_counts(&mut d, "output-raw"), &[
        ("k1", 0, 2, Some("1"), 0),
        ("k1", 0, 2, Some("2"), 1),
        ("k1", 2, 4, Some("1"), 2),
        ("k1", 0, 2, Some("3"), 1),
        ("k1", 0, 2, Some("4"), 1),
        ("k1", 4, 6, Some("1"), 5),
    ]);
    #[rustfmt::skip]
    assert_ks(win, &read_counts(&mut d, "output-suppressed"), &[
        ("k1", 0, 2, Some("4"), 1),
        ("k1", 2, 4, Some("1"), 2),
    ]);
    // Read by both aggregations, late for both: dead-lettered once.
    assert_eq!(dead(&mut d), late(1));
}

// SuppressScenarioTest#shouldSupportFinalResultsForTimeWindowsWithLargeJump
#[test]
fn should_support_final_results_for_time_windows_with_large_jump() {
    let win = Win::time(2, 2);
    let mut d = raw_and_suppressed(win);
    send(&mut d, &k1(&[0, 1, 2, 0, 3, 0, 4, 0, 30]));
    #[rustfmt::skip]
    assert_ks(win, &read_counts(&mut d, "output-raw"), &[
        ("k1", 0, 2, Some("1"), 0),
        ("k1", 0, 2, Some("2"), 1),
        ("k1", 2, 4, Some("1"), 2),
        ("k1", 0, 2, Some("3"), 1),
        ("k1", 2, 4, Some("2"), 3),
        ("k1", 0, 2, Some("4"), 1),
        ("k1", 4, 6, Some("1"), 4),
        ("k1", 30, 32, Some("1"), 30),
    ]);
    #[rustfmt::skip]
    assert_ks(win, &read_counts(&mut d, "output-suppressed"), &[
        ("k1", 0, 2, Some("4"), 1),
        ("k1", 2, 4, Some("2"), 3),
        ("k1", 4, 6, Some("1"), 4),
    ]);
    // Read by both aggregations, late for both: dead-lettered once.
    assert_eq!(dead(&mut d), late(1));
}

// SuppressScenarioTest#shouldSupportFinalResultsForSlidingWindows
/// Time difference 5, grace 15. Kafka Streams sorts the raw output by key and timestamp; its
/// timestamps (the latest record's) are not eosflow's (the window's end), so both are sorted
/// by window start here, a window's updates in order.
#[test]
fn should_support_final_results_for_sliding_windows() {
    let win = Win::sliding(5, 15);
    let mut d = raw_and_suppressed(win);
    send(&mut d, &k1(&[10, 11, 10, 13, 10, 24, 5, 7, 90]));
    let raw = sorted(read_counts(&mut d, "output-raw"));
    #[rustfmt::skip]
    let ks: &[Ks] = &[
        ("k1", 5, 10, Some("1"), 10),
        ("k1", 5, 10, Some("2"), 10),
        ("k1", 5, 10, Some("3"), 10),
        ("k1", 5, 10, Some("4"), 10),
        ("k1", 5, 10, Some("5"), 10),
        ("k1", 6, 11, Some("2"), 11),
        ("k1", 6, 11, Some("3"), 11),
        ("k1", 6, 11, Some("4"), 11),
        ("k1", 6, 11, Some("5"), 11),
        ("k1", 8, 13, Some("4"), 13),
        ("k1", 8, 13, Some("5"), 13),
        ("k1", 11, 16, Some("1"), 11),
        ("k1", 11, 16, Some("2"), 13),
        ("k1", 12, 17, Some("1"), 13),
        ("k1", 19, 24, Some("1"), 24),
        ("k1", 85, 90, Some("1"), 90),
    ];
    assert_ks(win, &raw, ks);
    #[rustfmt::skip]
    assert_ks(win, &read_counts(&mut d, "output-suppressed"), &[
        ("k1", 5, 10, Some("5"), 10),
        ("k1", 6, 11, Some("5"), 11),
        ("k1", 8, 13, Some("5"), 13),
        ("k1", 11, 16, Some("2"), 13),
        ("k1", 12, 17, Some("1"), 13),
        ("k1", 19, 24, Some("1"), 24),
    ]);
    assert!(dead(&mut d).is_empty(), "5 and 7 still find open windows");
}

// SuppressScenarioTest#shouldSupportFinalResultsForSessionWindows
/// Gap 5, no grace: `k1@0`, `k1@5` (within the gap: one session `[0, 5]`), `k1@1` (inside
/// it), `k2@11` (stream time 11 closes `[0, 5]`: `5 < 11 - 5`), `k1@5` (late), `k1@30`.
/// Issue 48: eosflow closed the session at stream time 5 and emitted `[0, 0]` of 1 and
/// `[1, 5]` of 2; it is now Kafka Streams' one session `[0, 5]` of 3, and each replaced session
/// is a tombstone in the raw output.
#[test]
fn should_support_final_results_for_session_windows() {
    let win = Win::session(5, 0);
    let mut d = raw_and_suppressed(win);
    send(
        &mut d,
        &[
            ("k1", "v1", 0),
            ("k1", "v1", 5),
            ("k1", "v1", 1),
            ("k2", "v1", 11),
            ("k1", "v1", 5),
            ("k1", "v1", 30),
        ],
    );
    #[rustfmt::skip]
    assert_ks(win, &read_counts(&mut d, "output-raw"), &[
        ("k1", 0, 0, Some("1"), 0),
        ("k1", 0, 0, None, 0),
        ("k1", 0, 5, Some("2"), 5),
        ("k1", 0, 5, None, 5),
        ("k1", 0, 5, Some("3"), 5),
        ("k2", 11, 11, Some("1"), 11),
        ("k1", 30, 30, Some("1"), 30),
    ]);
    #[rustfmt::skip]
    assert_ks(win, &read_counts(&mut d, "output-suppressed"), &[
        ("k1", 0, 5, Some("3"), 5),
        ("k2", 11, 11, Some("1"), 11),
    ]);
    // Read by both aggregations, late for both: dead-lettered once.
    assert_eq!(dead(&mut d), late(1));
}

// KTableSuppressProcessorTest#finalResultsSuppressionShouldBufferAndEmitAtGraceExpiration
/// Kafka Streams feeds the suppression node windowed updates directly; here a count in
/// windows of 1 ms with grace 1 produces them. `hey [99, 100)` is not emitted at stream time
/// 100 (1 ms of grace after its end), and is at 101.
#[test]
fn final_results_suppression_should_buffer_and_emit_at_grace_expiration() {
    let win = Win::time(1, 1);
    let mut d = counts(win, CLOSE);
    send(&mut d, &[("hey", "v", 99)]);
    send(&mut d, &[("dummyKey1", "v", 100)]);
    assert!(read_counts(&mut d, OUT).is_empty());
    send(&mut d, &[("dummyKey2", "v", 101)]);
    assert_ks(
        win,
        &read_counts(&mut d, OUT),
        &[("hey", 99, 100, Some("1"), 99)],
    );
}

// KTableSuppressProcessorTest#finalResultsWithZeroGraceShouldStillBufferUntilTheWindowEnd
/// Windows of 100, no grace: `hey@5`'s window `[0, 100)` is emitted when stream time reaches
/// its end, 100.
#[test]
fn final_results_with_zero_grace_should_still_buffer_until_the_window_end() {
    let win = Win::time(100, 0);
    let mut d = counts(win, CLOSE);
    send(&mut d, &[("hey", "v", 5)]);
    assert!(read_counts(&mut d, OUT).is_empty());
    send(&mut d, &[("dummyKey", "v", 100)]);
    assert_ks(
        win,
        &read_counts(&mut d, OUT),
        &[("hey", 0, 100, Some("1"), 5)],
    );
}

// KTableSuppressProcessorTest#finalResultsShouldDropTombstonesForSessionWindows
/// The tombstone a session merge produces is never a final result: on close, a merged-away
/// session's close timer is cancelled and only the merged session comes out.
#[test]
fn final_results_should_drop_tombstones_for_session_windows() {
    // Gap 10, grace 10: `hey@8` bridges the open sessions `[0, 0]` and `[15, 15]`.
    let win = Win::session(10, 10);
    let mut d = counts(win, CLOSE);
    send(
        &mut d,
        &[
            ("hey", "v", 0),
            ("hey", "v", 15),
            ("hey", "v", 8),
            ("other", "v", 100),
        ],
    );
    assert_ks(
        win,
        &read_counts(&mut d, OUT),
        &[("hey", 0, 15, Some("3"), 15)],
    );
    // On update the same input forwards the two replaced sessions as tombstones.
    let mut d = counts(win, UPDATE);
    send(
        &mut d,
        &[("hey", "v", 0), ("hey", "v", 15), ("hey", "v", 8)],
    );
    let tombstones = read_counts(&mut d, OUT)
        .into_iter()
        .filter(|r| r.3.is_none())
        .count();
    assert_eq!(tombstones, 2);
}
