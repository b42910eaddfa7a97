//! Sliding windows through the test driver: the windows and aggregates Kafka Streams'
//! `KStreamSlidingWindowAggregateTest` expects (in order and shuffled), the same windows as a
//! brute-force model over the whole input, grace and late records, on-close results once per
//! window, negative times and windows that `i64` cannot hold.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::serdes::{Serde, StringSerde};
use crate::testing::{TestRecord, TopologyTestDriver};
use crate::topology::time::{MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS};
use crate::topology::windows::{
    EmitStrategy, SlidingWindows, WindowStoreHandle, Windowed, WindowedAggregate, WindowedSerde,
};
use crate::topology::{TimestampExtractor, Topology};

const IN: &str = "events";
const OUT: &str = "windows";
const STORE: &str = "sliding";

type Driver = TopologyTestDriver<Topology>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn store() -> WindowStoreHandle<String, String> {
    WindowStoreHandle::new(STORE, StringSerde, StringSerde)
}

/// A window's values concatenated in sorted order (Kafka Streams' random test's aggregator:
/// the same string whatever order the records came in).
fn sorted_concat(windows: SlidingWindows, emit: EmitStrategy) -> Driver {
    let agg = WindowedAggregate::sliding(store(), windows, String::new, |_, v: &String, a| {
        let mut chars: Vec<char> = (a + v).chars().collect();
        chars.sort_unstable();
        chars.into_iter().collect()
    })
    .emit(emit);
    driver(agg, None)
}

/// `"0+1+2"`: Kafka Streams' `MockInitializer.STRING_INIT` and `MockAggregator.TOSTRING_ADDER`.
fn adder(windows: SlidingWindows, emit: EmitStrategy) -> Driver {
    let agg = WindowedAggregate::sliding(
        store(),
        windows,
        || "0".to_string(),
        |_, v: &String, a| format!("{a}+{v}"),
    )
    .emit(emit);
    driver(agg, None)
}

/// The topology of `agg` (results to `windows`), reading event times from header `ts` when
/// `extractor` says so.
fn driver(
    agg: WindowedAggregate<String, String, String>,
    extractor: Option<TimestampExtractor>,
) -> Driver {
    let mut b = Topology::builder();
    b.add_source("in", &[IN], StringSerde, StringSerde);
    if let Some(x) = extractor {
        b.timestamp_extractor("in", x);
    }
    b.add_windowed_aggregate("agg", agg, &["in"]).add_sink(
        "out",
        OUT,
        WindowedSerde::new(StringSerde),
        StringSerde,
        &["agg"],
    );
    TopologyTestDriver::new(b.build().expect("valid topology")).expect("driver")
}

fn send(d: &mut Driver, key: &str, value: &str, at: i64) {
    d.pipe(TestRecord::new(IN, Some(key), Some(value)).timestamp(at))
        .expect("pipe");
}

/// One forwarded result: key, window, value and the record's timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Out {
    key: String,
    start: i64,
    end: i64,
    value: String,
    timestamp: Option<i64>,
}

fn results(d: &mut Driver) -> Vec<Out> {
    let serde = WindowedSerde::new(StringSerde);
    d.read_raw_output(OUT)
        .into_iter()
        .map(|r| {
            let k: Windowed<String> = serde
                .deserialize(r.key.as_deref().expect("keyed"))
                .expect("a windowed key");
            let value = StringSerde
                .deserialize(r.value.as_deref().expect("a value"))
                .expect("a string");
            Out {
                key: k.key,
                start: k.window.start,
                end: k.window.end,
                value,
                timestamp: r.timestamp,
            }
        })
        .collect()
}

/// Results by window start: every value forwarded for it (Kafka Streams' `gatherOutput`).
fn by_start(out: &[Out]) -> BTreeMap<i64, BTreeSet<String>> {
    let mut m: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    for o in out {
        m.entry(o.start).or_default().insert(o.value.clone());
    }
    m
}

fn expected(rows: &[(i64, &[&str])]) -> BTreeMap<i64, BTreeSet<String>> {
    rows.iter()
        .map(|(s, vs)| (*s, vs.iter().map(|v| v.to_string()).collect()))
        .collect()
}

/// Every result's window is `[start, start + timeDifference]` and its timestamp the window's
/// last millisecond (its inclusive end).
fn assert_shapes(out: &[Out], td: i64) {
    for o in out {
        assert_eq!(o.end, o.start + td, "{o:?}");
        assert_eq!(o.timestamp, Some(o.end), "{o:?}");
    }
}

/// The brute-force model: the windows sliding windows of `td` hold over `records` (time,
/// value) once all have arrived, nothing closed: every record's left window
/// `[t - td, t]`, and the right window `[t + 1, t + 1 + td]` of every record with a later one
/// in it; each window's value is its records' values sorted.
fn model(records: &[(i64, char)], td: i64) -> BTreeMap<i64, String> {
    let mut starts = BTreeSet::new();
    for (t, _) in records {
        starts.insert(t - td);
        if records.iter().any(|(u, _)| *u > *t && *u <= t + 1 + td) {
            starts.insert(t + 1);
        }
    }
    starts
        .into_iter()
        .map(|s| {
            let mut v: Vec<char> = records
                .iter()
                .filter(|(t, _)| *t >= s && *t <= s + td)
                .map(|(_, c)| *c)
                .collect();
            v.sort_unstable();
            (s, v.into_iter().collect())
        })
        .collect()
}

/// The last result forwarded for each window start of `key`.
fn last_by_start(out: &[Out], key: &str) -> BTreeMap<i64, String> {
    out.iter()
        .filter(|o| o.key == key)
        .map(|o| (o.start, o.value.clone()))
        .collect()
}

/// A small deterministic generator (xorshift64*), so every run shuffles the same way.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = usize::try_from(self.below(i as u64 + 1)).expect("an index");
            v.swap(i, j);
        }
    }
}

/// Kafka Streams' `testAggregateSmallInput` (time difference 10, grace 5), on update: the
/// same values for the same window starts.
#[test]
fn sliding_windows_on_update_match_kafka_streams_small_input() {
    let windows = SlidingWindows::of_time_difference_and_grace(ms(10), ms(5));
    let mut d = adder(windows, EmitStrategy::OnWindowUpdate);
    for (v, t) in [
        ("1", 10),
        ("2", 10),
        ("3", 14),
        ("4", 15),
        ("5", 20),
        ("6", 22),
        ("7", 30),
    ] {
        send(&mut d, "A", v, t);
    }
    let out = results(&mut d);
    assert_shapes(&out, 10);
    assert_eq!(
        by_start(&out),
        expected(&[
            (0, &["0+1", "0+1+2"]),
            (4, &["0+1+2+3"]),
            (5, &["0+1+2+3+4"]),
            (10, &["0+1+2+3+4+5"]),
            (11, &["0+3", "0+3+4", "0+3+4+5"]),
            (12, &["0+3+4+5+6"]),
            (15, &["0+4", "0+4+5", "0+4+5+6"]),
            (16, &["0+5", "0+5+6"]),
            (20, &["0+5+6+7"]),
            (21, &["0+6", "0+6+7"]),
            (23, &["0+7"]),
        ])
    );
    assert_eq!(
        out.len(),
        18,
        "one result per window update, as Kafka Streams"
    );
}

/// The same input on close (Kafka Streams' `emitFinal` expectation): at stream time 30 the
/// windows ending before 25 have closed, each forwarded once with its final value; later
/// records close the rest, never a window twice.
#[test]
fn sliding_windows_on_close_emit_each_window_once_as_kafka_streams() {
    let windows = SlidingWindows::of_time_difference_and_grace(ms(10), ms(5));
    let mut d = adder(windows, EmitStrategy::OnWindowClose);
    for (v, t) in [
        ("1", 10),
        ("2", 10),
        ("3", 14),
        ("4", 15),
        ("5", 20),
        ("6", 22),
        ("7", 30),
    ] {
        send(&mut d, "A", v, t);
    }
    let out = results(&mut d);
    assert_shapes(&out, 10);
    assert_eq!(
        by_start(&out),
        expected(&[
            (0, &["0+1+2"]),
            (4, &["0+1+2+3"]),
            (5, &["0+1+2+3+4"]),
            (10, &["0+1+2+3+4+5"]),
            (11, &["0+3+4+5"]),
            (12, &["0+3+4+5+6"]),
        ])
    );
    assert_eq!(out.len(), 6);
    // Stream time 45 closes the windows ending before 40 (close time end + 5 + 1 <= 45).
    send(&mut d, "B", "x", 45);
    let later = results(&mut d);
    assert_eq!(
        by_start(&later),
        expected(&[
            (15, &["0+4+5+6"]),
            (16, &["0+5+6"]),
            (20, &["0+5+6+7"]),
            (21, &["0+6+7"]),
            (23, &["0+7"]),
        ])
    );
    assert_eq!(later.len(), 5, "each window once");
    send(&mut d, "B", "y", 10_000);
    let last = results(&mut d);
    assert_eq!(
        last.iter()
            .map(|o| (o.key.as_str(), o.start, o.value.as_str()))
            .collect::<Vec<_>>(),
        [("B", 35, "0+x")],
        "only B's window was left; A's never come again"
    );
}

/// Kafka Streams' `testAggregateRandomInput` (time difference 10, grace 100, records shuffled
/// with a fixed seed each run), shifted by 1000 ms: Kafka Streams puts its records before
/// 10 ms into one window `[0, 10]` (its timestamps cannot be negative), eosflow gives each its
/// own left window, so the shift keeps every window comparable. The last value of each window
/// is Kafka Streams' expectation, plus the four left windows of the records Kafka Streams
/// treats as early, and equals the brute-force model.
#[test]
fn sliding_windows_out_of_order_match_kafka_streams_random_input() {
    let input: Vec<(i64, char)> = [
        ('A', 10),
        ('B', 15),
        ('C', 16),
        ('D', 18),
        ('E', 30),
        ('F', 40),
        ('G', 55),
        ('H', 56),
        ('I', 58),
        ('J', 58),
        ('K', 62),
        ('L', 63),
        ('M', 63),
        ('N', 63),
        ('O', 76),
        ('P', 77),
        ('Q', 80),
        ('R', 2),
        ('S', 3),
        ('T', 5),
        ('U', 8),
    ]
    .iter()
    .map(|(c, t)| (t + 1000, *c))
    .collect();
    // Kafka Streams' expected map, start + 1000; 1000 is its `[0, 10]` window ("ARSTU").
    let ks: BTreeMap<i64, String> = [
        (0, "ARSTU"),
        (3, "ASTU"),
        (4, "ATU"),
        (5, "ABTU"),
        (6, "ABCU"),
        (8, "ABCDU"),
        (9, "ABCD"),
        (11, "BCD"),
        (16, "CD"),
        (17, "D"),
        (20, "E"),
        (30, "EF"),
        (31, "F"),
        (45, "G"),
        (46, "GH"),
        (48, "GHIJ"),
        (52, "GHIJK"),
        (53, "GHIJKLMN"),
        (56, "HIJKLMN"),
        (57, "IJKLMN"),
        (59, "KLMN"),
        (63, "LMN"),
        (66, "O"),
        (67, "OP"),
        (70, "OPQ"),
        (77, "PQ"),
        (78, "Q"),
        (171, "V"),
    ]
    .iter()
    .map(|(s, v)| (s + 1000, v.to_string()))
    .collect();
    let mut want = ks.clone();
    // The left windows of R (1002), S (1003), T (1005) and U (1008).
    for (s, v) in [(992, "R"), (993, "RS"), (995, "RST"), (998, "RSTU")] {
        want.insert(s, v.to_string());
    }
    let mut with_v = input.clone();
    with_v.push((1181, 'V'));
    assert_eq!(
        model(&with_v, 10),
        want,
        "the model agrees with the hand count"
    );
    for seed in 1..=25u64 {
        let mut shuffled = input.clone();
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)).shuffle(&mut shuffled);
        let windows = SlidingWindows::of_time_difference_and_grace(ms(10), ms(100));
        let mut d = sorted_concat(windows, EmitStrategy::OnWindowUpdate);
        for (t, c) in &shuffled {
            send(&mut d, "A", &c.to_string(), *t);
        }
        send(&mut d, "A", "V", 1181);
        let out = results(&mut d);
        assert_shapes(&out, 10);
        assert_eq!(last_by_start(&out, "A"), want, "seed {seed}: {shuffled:?}");
    }
}

/// A record is late when even `[t, t + 10]` has closed (`t + 10 + grace < stream time`): it
/// goes to the DLT as `late-record`, naming its first and last possible windows. A record that
/// is not late updates only its open windows: a closed window is neither updated nor created;
/// one that finds its left window closed and no open window to go into is late too (before
/// issue 48 it vanished without a trace: aggregated nowhere, not dead-lettered).
#[test]
fn sliding_windows_late_records_go_to_the_dlt_and_closed_windows_stay_untouched() {
    let windows = SlidingWindows::of_time_difference_and_grace(ms(10), ms(5));
    let mut d = adder(windows, EmitStrategy::OnWindowUpdate);
    send(&mut d, "a", "1", 100);
    send(&mut d, "a", "2", 120); // stream time 120: windows ending before 115 are closed
    send(&mut d, "a", "late", 104); // [104, 114] closed: late
    send(&mut d, "a", "3", 112); // [102, 112] closed, [110, 120] open
    send(&mut d, "a", "4", 105); // [95, 105] closed, no open window holds 105: late
    let got: Vec<(i64, i64, String)> = results(&mut d)
        .into_iter()
        .map(|o| (o.start, o.end, o.value))
        .collect();
    assert_eq!(
        got,
        [
            (90, 100, "0+1".to_string()),
            (110, 120, "0+2".to_string()),
            (110, 120, "0+2+3".to_string()),
            (113, 123, "0+2".to_string()), // 112's right window: 120's record
        ]
    );
    let dead = d.read_raw_output("events.DLT");
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert_eq!(dead[1].timestamp, Some(105));
    assert_eq!(dead[1].dlt_class(), Some("late-record"));
    let late = &dead[0];
    assert_eq!(late.dlt_class(), Some("late-record"));
    assert_eq!(late.timestamp, Some(104));
    assert_eq!(
        late.header("eosflow.dlt.late.windows"),
        Some("94-104,104-114")
    );
    assert_eq!(late.header("eosflow.dlt.late.stream.time"), Some("120"));
    assert!(late
        .dlt_reason()
        .unwrap_or_default()
        .contains("late record"));
    // At stream time end + grace a window is still open (Kafka Streams:
    // `end >= stream - grace`): [110, 120] takes a record at 110 at stream time 125.
    send(&mut d, "b", "x", 125);
    send(&mut d, "a", "5", 110);
    let got: Vec<(String, i64, String)> = results(&mut d)
        .into_iter()
        .map(|o| (o.key, o.start, o.value))
        .collect();
    assert_eq!(
        got,
        [
            ("b".to_string(), 115, "0+x".to_string()),
            ("a".to_string(), 110, "0+2+3+5".to_string()),
            ("a".to_string(), 111, "0+2+3".to_string()), // 110's right window: 112 and 120
        ]
    );
    assert!(d.read_raw_output("events.DLT").is_empty());
}

/// Records at negative times and at 0 get their full windows (no early-record window at 0),
/// and the windows' arithmetic holds across 0.
#[test]
fn sliding_windows_at_negative_times_and_zero_are_full_windows() {
    let windows = SlidingWindows::of_time_difference_no_grace(ms(10));
    let mut d = sorted_concat(windows, EmitStrategy::OnWindowUpdate);
    for (t, c) in [(-5, 'a'), (0, 'b'), (3, 'c')] {
        send(&mut d, "k", &c.to_string(), t);
    }
    let out = results(&mut d);
    assert_shapes(&out, 10);
    let want: BTreeMap<i64, String> = [(-15, "a"), (-10, "ab"), (-7, "abc"), (-4, "bc"), (1, "c")]
        .iter()
        .map(|(s, v)| (*s, v.to_string()))
        .collect();
    assert_eq!(last_by_start(&out, "k"), want);
    assert_eq!(model(&[(-5, 'a'), (0, 'b'), (3, 'c')], 10), want);
}

/// Event times near `i64::MIN` or `i64::MAX` never reach the node (the runtime dead-letters
/// them as `bad-timestamp`); at the ends of the supported range the windows' arithmetic holds;
/// and with a time difference so large that a record's windows do not fit in `i64`, that
/// record is dead-lettered as permanent with the reason, never a panic or a wrap, while the
/// records around it are aggregated.
#[test]
fn sliding_windows_at_extreme_times_never_overflow_and_unrepresentable_windows_are_dead_lettered() {
    let windows = SlidingWindows::of_time_difference_no_grace(ms(10));
    let agg = WindowedAggregate::sliding(store(), windows, String::new, |_, v: &String, a| a + v);
    let mut d = driver(agg, Some(TimestampExtractor::header("ts")));
    let at = |ts: i64, v: &str| {
        TestRecord::new(IN, Some("k"), Some(v)).header("ts", ts.to_be_bytes().to_vec())
    };
    for t in [i64::MIN, i64::MIN + 1, i64::MAX, i64::MAX - 1] {
        d.pipe(at(t, "bad")).expect("pipe");
    }
    d.pipe(at(MIN_EVENT_TIME_MS, "a")).expect("pipe");
    d.pipe(at(MIN_EVENT_TIME_MS + 3, "b")).expect("pipe");
    d.pipe(at(MAX_EVENT_TIME_MS - 1, "c")).expect("pipe");
    d.pipe(at(MAX_EVENT_TIME_MS, "d")).expect("pipe");
    let got: Vec<(i64, i64, String)> = results(&mut d)
        .into_iter()
        .map(|o| (o.start, o.end, o.value))
        .collect();
    let (lo, hi) = (MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS);
    assert_eq!(
        got,
        [
            (lo - 10, lo, "a".to_string()),
            (lo + 1, lo + 11, "b".to_string()),
            (lo - 7, lo + 3, "ab".to_string()),
            (hi - 11, hi - 1, "c".to_string()),
            (hi, hi + 10, "d".to_string()),
            (hi - 10, hi, "cd".to_string()),
        ]
    );
    let dead = d.read_raw_output("events.DLT");
    assert_eq!(dead.len(), 4);
    assert!(dead.iter().all(|r| r.dlt_class() == Some("bad-timestamp")));

    // A time difference of i64::MAX - 100 ms: a record at 0 fits ([-(MAX - 100), 0] and
    // [1, MAX - 99]); one at 200 (right window past i64::MAX) or at -200 (left window before
    // i64::MIN) does not. The close times of the windows near i64::MAX saturate.
    let huge = SlidingWindows::of_time_difference_and_grace(ms(i64::MAX as u64 - 100), ms(1000));
    let agg = WindowedAggregate::sliding(store(), huge, String::new, |_, v: &String, a| a + v);
    let mut d = driver(agg, None);
    send(&mut d, "k", "x", 200);
    send(&mut d, "k", "y", -200);
    send(&mut d, "k", "z", 0);
    send(&mut d, "k", "w", 50);
    let got: Vec<(i64, i64, String)> = results(&mut d)
        .into_iter()
        .map(|o| (o.start, o.end, o.value))
        .collect();
    let td = i64::MAX - 100;
    assert_eq!(
        got,
        [
            (-td, 0, "z".to_string()),
            (1, 1 + td, "w".to_string()),
            (50 - td, 50, "zw".to_string()),
        ]
    );
    let dead = d.read_raw_output("events.DLT");
    assert_eq!(dead.len(), 2, "{dead:?}");
    for (r, t) in dead.iter().zip(["200", "-200"]) {
        assert_eq!(r.dlt_class(), Some("permanent"), "{r:?}");
        let reason = r.dlt_reason().unwrap_or_default();
        assert!(
            reason.contains("cannot represent the windows of event time") && reason.contains(t),
            "{reason}"
        );
    }
}

/// A backlog: 6000 records of 12 keys, out of order by up to the grace, piped before anything
/// is read. Every window's last value on update equals the brute-force model of each key's
/// records; on close each window comes out exactly once, with the model's value; and expiry
/// keeps the store to the windows still open or within their retention.
#[test]
fn sliding_windows_backlog_matches_the_model_on_update_and_on_close() {
    let (td, grace) = (50i64, 40u64);
    let mut rng = Rng(0xDEAD_BEEF);
    let mut records: Vec<(String, i64, char)> = Vec::new();
    let mut clock = 10_000i64;
    for i in 0..6000u64 {
        clock += i64::try_from(rng.below(7)).expect("small");
        // Up to `grace` behind the clock: never late, never a closed window to touch.
        let t = clock - i64::try_from(rng.below(grace + 1)).expect("small");
        let key = format!("k{}", rng.below(12));
        let c = char::from(b'a' + u8::try_from(i % 26).expect("a letter"));
        records.push((key, t, c));
    }
    let flush = clock + 10_000;
    let keys: BTreeSet<String> = records.iter().map(|r| r.0.clone()).collect();
    for emit in [EmitStrategy::OnWindowUpdate, EmitStrategy::OnWindowClose] {
        let windows = SlidingWindows::of_time_difference_and_grace(ms(td as u64), ms(grace));
        let mut d = sorted_concat(windows, emit);
        for (k, t, c) in &records {
            send(&mut d, k, &c.to_string(), *t);
        }
        // Enough records at the flush time for expiry (at most 64 windows a call) to catch up.
        for _ in 0..200 {
            send(&mut d, "flush", "z", flush);
        }
        let out: Vec<Out> = results(&mut d)
            .into_iter()
            .filter(|o| o.key != "flush")
            .collect();
        assert_shapes(&out, td);
        for key in &keys {
            let mine: Vec<(i64, char)> = records
                .iter()
                .filter(|r| &r.0 == key)
                .map(|r| (r.1, r.2))
                .collect();
            let want = model(&mine, td);
            assert_eq!(last_by_start(&out, key), want, "{emit:?} {key}");
            if emit == EmitStrategy::OnWindowClose {
                let n = out.iter().filter(|o| &o.key == key).count();
                assert_eq!(n, want.len(), "{key}: each window exactly once");
            }
        }
        // Everything but the flush's window is past close + 2·td: expired from the store
        // (on close, by the timers: the windows closing within 2·td of the last close stay).
        let left = d.window_all(&store()).expect("store");
        let old = left.iter().filter(|(k, _, _)| k != "flush").count();
        match emit {
            EmitStrategy::OnWindowUpdate => assert_eq!(old, 0, "{left:?}"),
            EmitStrategy::OnWindowClose => assert!(old < 200, "{} windows left", old),
        }
    }
}

/// `SlidingWindows`' bounds at the ends of `i64`: representable windows, or an error, never
/// an overflow.
#[test]
fn sliding_window_spans_at_the_ends_of_i64() {
    let ten = SlidingWindows::of_time_difference_no_grace(ms(10));
    assert_eq!(ten.span(0), Ok((-10, 11)));
    assert_eq!(ten.span(i64::MIN + 10), Ok((i64::MIN, i64::MIN + 21)));
    assert!(ten.span(i64::MIN + 9).is_err());
    assert_eq!(ten.span(i64::MAX - 11), Ok((i64::MAX - 21, i64::MAX)));
    assert!(ten.span(i64::MAX - 10).is_err());
    let zero = SlidingWindows::of_time_difference_no_grace(Duration::ZERO);
    assert_eq!(zero.span(i64::MIN), Ok((i64::MIN, i64::MIN + 1)));
    assert!(zero.span(i64::MAX).is_err());
    let max = SlidingWindows::of_time_difference_no_grace(Duration::MAX);
    assert_eq!(max.time_difference_ms(), i64::MAX);
    assert_eq!(max.span(-1), Ok((i64::MIN, i64::MAX)));
    assert!(max.span(0).is_err() && max.span(-2).is_err());
}
