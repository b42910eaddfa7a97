//! Windowed aggregations through the test driver: what a topology author sees — which results
//! tumbling, hopping and session windows forward, when on-close results come out, where late
//! records go, and that retention empties the store.

use std::time::{Duration, Instant};

use crate::processor::StoreHandle;
use crate::serdes::{BytesSerde, I64Serde, StringSerde};
use crate::testing::{TestRecord, TopologyTestDriver};
use crate::topology::windows::{
    EmitStrategy, SessionWindows, TimeWindows, WindowStoreHandle, Windowed, WindowedAggregate,
    WindowedSerde,
};
use crate::topology::{TimestampExtractor, Topology};

const IN: &str = "clicks";
const OUT: &str = "counts";
const STORE: &str = "windows";

type Driver = TopologyTestDriver<Topology>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Counts per key in `agg`, results to `counts`, late records (optionally) to `late`.
fn topology(agg: WindowedAggregate<String, String, i64>, late_sink: bool) -> Topology {
    let mut b = Topology::builder();
    b.add_source("in", &[IN], StringSerde, StringSerde)
        .add_windowed_aggregate("count", agg, &["in"])
        .add_sink(
            "out",
            OUT,
            WindowedSerde::new(StringSerde),
            I64Serde,
            &["count"],
        );
    if late_sink {
        b.add_sink("late", "late-clicks", StringSerde, StringSerde, &["count"]);
    }
    b.build().expect("valid topology")
}

fn store() -> WindowStoreHandle<String, i64> {
    WindowStoreHandle::new(STORE, StringSerde, I64Serde)
}

fn count(windows: TimeWindows, emit: EmitStrategy) -> WindowedAggregate<String, String, i64> {
    WindowedAggregate::time(store(), windows, || 0, |_, _, n| n + 1).emit(emit)
}

fn driver(agg: WindowedAggregate<String, String, i64>) -> Driver {
    TopologyTestDriver::new(topology(agg, false)).expect("driver")
}

fn click(d: &mut Driver, key: &str, at: i64) {
    d.pipe(TestRecord::new(IN, Some(key), Some("click")).timestamp(at))
        .expect("pipe");
}

/// Results as `key@start-end=count` (`=gone` for a tombstone) with their timestamps.
fn results(d: &mut Driver) -> Vec<(String, Option<i64>)> {
    let serde = WindowedSerde::new(StringSerde);
    d.read_raw_output(OUT)
        .into_iter()
        .map(|r| {
            let key: Windowed<String> = r
                .key
                .as_deref()
                .map(|k| crate::serdes::Serde::deserialize(&serde, k))
                .transpose()
                .expect("a windowed key")
                .expect("keyed");
            let value = match r.value.as_deref() {
                Some(v) => crate::serdes::Serde::deserialize(&I64Serde, v)
                    .expect("a count")
                    .to_string(),
                None => "gone".to_string(),
            };
            let text = format!(
                "{}@{}-{}={value}",
                key.key, key.window.start, key.window.end
            );
            (text, r.timestamp)
        })
        .collect()
}

fn texts(d: &mut Driver) -> Vec<String> {
    results(d).into_iter().map(|(t, _)| t).collect()
}

/// Entries of the windowed store (data and index) on partition 0.
fn stored(d: &mut Driver) -> usize {
    let raw = StoreHandle::new(STORE, BytesSerde, BytesSerde);
    d.store_entries(&raw)
        .expect("store")
        .iter()
        .filter(|(k, _)| k.first() == Some(&b'w'))
        .count()
}

#[test]
fn tumbling_windows_on_update_forward_every_update_keyed_by_the_window() {
    let windows = TimeWindows::of_size_with_grace(ms(100), ms(50));
    let mut d = driver(count(windows, EmitStrategy::OnWindowUpdate));
    click(&mut d, "a", -1);
    click(&mut d, "a", 10);
    click(&mut d, "a", 99);
    click(&mut d, "b", 50);
    click(&mut d, "a", 100);
    let got = results(&mut d);
    assert_eq!(
        got,
        [
            ("a@-100-0=1".to_string(), Some(-1)),
            ("a@0-100=1".to_string(), Some(99)),
            ("a@0-100=2".to_string(), Some(99)),
            ("b@0-100=1".to_string(), Some(99)),
            ("a@100-200=1".to_string(), Some(199)),
        ],
        "the result's timestamp is the window's last millisecond"
    );
}

#[test]
fn on_close_emits_one_final_result_per_window_when_stream_time_passes_end_plus_grace() {
    let windows = TimeWindows::of_size_with_grace(ms(100), ms(50));
    let mut d = driver(count(windows, EmitStrategy::OnWindowClose));
    click(&mut d, "a", 10);
    click(&mut d, "b", 20);
    click(&mut d, "a", 120); // window 0-100 open until stream time 150
    click(&mut d, "a", 90); // out of order, within grace: counted
    click(&mut d, "b", 149);
    assert!(texts(&mut d).is_empty(), "nothing closed yet");
    click(&mut d, "c", 150); // closes 0-100 for every key of the partition
    assert_eq!(texts(&mut d), ["a@0-100=2", "b@0-100=1"]);
    click(&mut d, "c", 151);
    click(&mut d, "a", 400);
    assert_eq!(
        texts(&mut d),
        ["a@100-200=1", "b@100-200=1", "c@100-200=2"],
        "each window once, none again"
    );
    assert_eq!(d.summary().timers_fired, 5);
}

#[test]
fn hopping_windows_count_a_record_in_every_window_it_falls_in() {
    let windows = TimeWindows::of_size_no_grace(ms(100)).advance_by(ms(50));
    let mut d = driver(count(windows, EmitStrategy::OnWindowClose));
    click(&mut d, "a", 60); // windows 0-100 and 50-150
    click(&mut d, "a", 120); // 50-150 and 100-200
    click(&mut d, "a", 1_000);
    assert_eq!(texts(&mut d), ["a@0-100=1", "a@50-150=2", "a@100-200=1"]);
}

#[test]
fn a_record_late_for_every_window_goes_to_the_dlt_with_the_windows_and_its_key_goes_on() {
    let windows = TimeWindows::of_size_with_grace(ms(100), ms(20)).advance_by(ms(50));
    let mut d = driver(count(windows, EmitStrategy::OnWindowUpdate));
    click(&mut d, "a", 300);
    click(&mut d, "a", 210); // windows 150-250 (closed at 270) and 200-300 (open): counted
    click(&mut d, "a", 70); // windows 0-100 and 50-150: both closed
    click(&mut d, "a", 310); // the key is not parked behind the late record
    assert_eq!(
        texts(&mut d),
        [
            "a@250-350=1",
            "a@300-400=1",
            "a@200-300=1",
            "a@250-350=2",
            "a@300-400=2"
        ]
    );
    let dead = d.read_raw_output("clicks.DLT");
    assert_eq!(dead.len(), 1);
    let late = &dead[0];
    assert_eq!(late.dlt_class(), Some("late-record"));
    assert_eq!(late.timestamp, Some(70));
    assert_eq!(
        late.header("eosflow.dlt.late.windows"),
        Some("0-100,50-150")
    );
    assert_eq!(late.header("eosflow.dlt.late.stream.time"), Some("300"));
    assert_eq!(late.header("eosflow.dlt.late.node"), Some("count"));
    assert!(late
        .dlt_reason()
        .unwrap_or_default()
        .contains("late record"));
    assert_eq!(d.summary().dead_lettered, 1);
    assert!(
        d.read_raw_output("clicks.retry.1").is_empty(),
        "never retried"
    );
}

#[test]
fn late_records_can_go_to_a_sink_of_the_node_instead() {
    let windows = TimeWindows::of_size_no_grace(ms(100));
    let agg = count(windows, EmitStrategy::OnWindowClose).late_records_to("late");
    let mut d = TopologyTestDriver::new(topology(agg, true)).expect("driver");
    click(&mut d, "a", 250);
    click(&mut d, "a", 50);
    let late = d.read_raw_output("late-clicks");
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].key_text(), "a");
    assert_eq!(late[0].header("eosflow.late.windows"), Some("0-100"));
    assert_eq!(late[0].header("eosflow.late.stream.time"), Some("250"));
    assert!(d.read_raw_output("clicks.DLT").is_empty());
}

fn sessions(emit: EmitStrategy) -> Driver {
    let windows = SessionWindows::with_inactivity_gap_and_grace(ms(10), ms(20));
    let agg = WindowedAggregate::session(store(), windows, || 0, |_, _, n| n + 1, |_, a, b| a + b)
        .emit(emit);
    driver(agg)
}

#[test]
fn sessions_grow_and_merge_and_a_merged_away_session_is_a_tombstone_on_update() {
    let mut d = sessions(EmitStrategy::OnWindowUpdate);
    click(&mut d, "a", 100);
    click(&mut d, "a", 115); // more than the gap after: a new session
    click(&mut d, "a", 107); // within the gap of both: merges them
    click(&mut d, "b", 110);
    assert_eq!(
        texts(&mut d),
        [
            "a@100-100=1",
            "a@115-115=1",
            // Both replaced sessions, the one that keeps its start (100) included: Kafka
            // Streams forwards a tombstone for every session a record merges.
            "a@100-100=gone",
            "a@115-115=gone",
            "a@100-115=3",
            "b@110-110=1",
        ]
    );
}

#[test]
fn sessions_on_close_emit_once_after_end_plus_gap_plus_grace() {
    let mut d = sessions(EmitStrategy::OnWindowClose);
    click(&mut d, "a", 100);
    // a's session 100-105 is open while stream time <= 105 + 10 + 20 (Kafka Streams:
    // `end >= streamTime - gap - grace`): it closes at 136.
    click(&mut d, "a", 105);
    click(&mut d, "b", 119);
    click(&mut d, "b", 135); // more than the gap after b's first: b's second session
    assert!(texts(&mut d).is_empty(), "still open at 135");
    click(&mut d, "c", 136);
    assert_eq!(results(&mut d), [("a@100-105=2".to_string(), Some(105))]);
    click(&mut d, "a", 106); // within the gap of a closed session: a new one
    click(&mut d, "a", 200);
    assert_eq!(
        texts(&mut d),
        ["a@106-106=1", "b@119-119=1", "b@135-135=1", "c@136-136=1"]
    );
    click(&mut d, "a", 150); // its own session would close at 181 <= 200: late
    assert_eq!(d.read_raw_output("clicks.DLT").len(), 1);
}

#[test]
fn a_record_inside_a_session_still_open_joins_it_however_old_its_own_timestamp() {
    // Gap 10, grace 20: a session closes 30 after its end.
    let mut d = sessions(EmitStrategy::OnWindowUpdate);
    for t in [100, 108, 116, 124, 132, 140] {
        click(&mut d, "a", t); // one session 100-140, open until 170
    }
    click(&mut d, "b", 160); // stream time 160
    let _ = texts(&mut d);
    // Its own single-point session would have closed at 104 + 31 = 135 <= 160, but it lies
    // inside a's open session: it counts there (Kafka Streams judges the merged session).
    click(&mut d, "a", 104);
    // The session is replaced (Kafka Streams forwards it as a tombstone first, issue 48).
    assert_eq!(texts(&mut d), ["a@100-140=gone", "a@100-140=7"]);
    assert!(d.read_raw_output("clicks.DLT").is_empty());
    // Outside every open session and past its own close: late.
    click(&mut d, "a", 60);
    assert!(texts(&mut d).is_empty());
    assert_eq!(d.read_raw_output("clicks.DLT").len(), 1);
}

#[test]
fn retention_deletes_windows_once_stream_time_passes_their_close_plus_retention() {
    let windows = TimeWindows::of_size_with_grace(ms(100), ms(10));
    let agg = count(windows, EmitStrategy::OnWindowUpdate).retention(ms(200));
    let mut d = driver(agg);
    for t in [0, 100, 200, 300] {
        click(&mut d, "a", t);
        click(&mut d, "b", t);
    }
    assert_eq!(stored(&mut d), 8);
    // 0-100 closes at 110 and is kept until 310 <= 409; 100-200 until 410. (Before issue 48 a
    // window went 1 ms after its close plus retention; now at it, as its close timer deletes
    // it.)
    click(&mut d, "a", 409);
    assert_eq!(stored(&mut d), 7, "0-100 of both keys gone, 400-500 added");
    click(&mut d, "a", 410);
    assert_eq!(stored(&mut d), 5, "100-200 of both keys gone");
    click(&mut d, "a", 10_000);
    assert_eq!(stored(&mut d), 1, "only the newest window is left");

    let mut closing = driver(count(windows, EmitStrategy::OnWindowClose));
    for t in [0, 100, 200, 300] {
        click(&mut closing, "a", t);
    }
    click(&mut closing, "a", 1_000);
    assert_eq!(texts(&mut closing).len(), 4);
    assert_eq!(stored(&mut closing), 1, "a window goes when it closes");
}

#[test]
fn the_window_store_reads_a_keys_windows_in_time_order() {
    let windows = TimeWindows::of_size_with_grace(ms(10), ms(1_000));
    let mut d = driver(count(windows, EmitStrategy::OnWindowUpdate));
    for t in [35, 5, 15, 16, 900] {
        click(&mut d, "a", t);
    }
    click(&mut d, "b", 15);
    let a = "a".to_string();
    let w = |start, end| crate::topology::windows::Window { start, end };
    assert_eq!(
        d.window_fetch_range(&store(), &a, 0, 900).expect("read"),
        vec![
            (w(0, 10), 1),
            (w(10, 20), 2),
            (w(30, 40), 1),
            (w(900, 910), 1)
        ]
    );
    assert_eq!(
        d.window_fetch_range(&store(), &a, 10, 30).expect("read"),
        vec![(w(10, 20), 2), (w(30, 40), 1)]
    );
    let b = d.window_fetch_range(&store(), &"b".to_string(), i64::MIN, i64::MAX);
    assert_eq!(b.expect("read"), vec![(w(10, 20), 1)]);
}

#[test]
fn windowed_counting_throughput_in_the_driver() {
    let windows = TimeWindows::of_size_with_grace(ms(1_000), ms(100));
    let mut d = driver(count(windows, EmitStrategy::OnWindowClose));
    let n = 5_000i64;
    let started = Instant::now();
    for i in 0..n {
        click(&mut d, &format!("k{}", i % 50), i * 10);
    }
    let elapsed = started.elapsed();
    let out = d.read_raw_output(OUT).len();
    println!(
        "{n} records, {out} window results in {elapsed:?}: {:.0} records/s",
        n as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(out, 49 * 50, "every closed window of every key once");
}

/// Issue 32, item 2: an event time near `i64::MIN` or `i64::MAX` (8 arbitrary header bytes)
/// used to reach the window arithmetic (a debug build panicked, a release build looped) or move
/// stream time to the end of time (every later record late). It is dead-lettered as
/// `bad-timestamp`, naming the value and the extractor, and the partition goes on.
#[test]
fn an_event_time_out_of_range_is_dead_lettered_as_bad_timestamp_and_the_partition_goes_on() {
    let windows = TimeWindows::of_size_no_grace(ms(100)).advance_by(ms(50));
    let mut b = Topology::builder();
    b.add_source("in", &[IN], StringSerde, StringSerde)
        .timestamp_extractor("in", TimestampExtractor::header("ts"))
        .add_windowed_aggregate(
            "count",
            count(windows, EmitStrategy::OnWindowUpdate),
            &["in"],
        )
        .add_sink(
            "out",
            OUT,
            WindowedSerde::new(StringSerde),
            I64Serde,
            &["count"],
        );
    let mut d = TopologyTestDriver::new(b.build().expect("valid topology")).expect("driver");
    let at = |ts: Vec<u8>| TestRecord::new(IN, Some("a"), Some("click")).header("ts", ts);
    d.pipe(at(b"120".to_vec())).expect("pipe");
    let bad = [i64::MIN, i64::MIN + 5, i64::MAX, -400_000_000_000_000];
    for t in bad {
        d.pipe(at(t.to_be_bytes().to_vec())).expect("pipe");
    }
    d.pipe(at(b"-30".to_vec())).expect("pipe"); // negative but sane: counted (late here)
    d.pipe(at(b"140".to_vec())).expect("pipe");
    assert_eq!(
        texts(&mut d),
        ["a@50-150=1", "a@100-200=1", "a@50-150=2", "a@100-200=2"],
        "the records around the bad ones are counted; stream time was not moved"
    );
    assert_eq!(d.stream_time_ms(), Some(140));
    let dead = d.read_raw_output("clicks.DLT");
    let (bad_ts, late): (Vec<_>, Vec<_>) = dead
        .iter()
        .partition(|r| r.dlt_class() == Some("bad-timestamp"));
    assert_eq!(late.len(), 1, "the -30 record is late, not bad");
    assert_eq!(bad_ts.len(), bad.len());
    for (r, t) in bad_ts.iter().zip(bad) {
        assert_eq!(
            r.header("eosflow.dlt.bad.timestamp"),
            Some(t.to_string().as_str())
        );
        let from = r
            .header("eosflow.dlt.bad.timestamp.extractor")
            .unwrap_or_default();
        assert!(
            from.contains("\"in\"") && from.contains("header \"ts\""),
            "{from}"
        );
        let reason = r.dlt_reason().unwrap_or_default();
        assert!(
            reason.contains(&t.to_string()) && reason.contains("extractor"),
            "{reason}"
        );
        assert!(r.value.is_some(), "the record itself is kept");
    }
}

/// Issue 32, item 3: the dedup mark was written before a late record was dead-lettered, so its
/// redrive (after the grace was raised) was a silent dedup hit. Now it is counted once, and a
/// second redrive is the duplicate.
#[test]
fn a_late_record_redriven_after_the_grace_was_raised_is_counted_exactly_once() {
    let strict = TimeWindows::of_size_no_grace(ms(100));
    let mut d = driver(count(strict, EmitStrategy::OnWindowUpdate));
    let click = |id: &str, at: i64| {
        TestRecord::new(IN, Some("a"), Some("click"))
            .id(id)
            .timestamp(at)
    };
    d.pipe(click("c1", 150)).expect("pipe");
    d.pipe(click("c2", 50)).expect("pipe"); // late: window 0-100 closed at stream time 100
    let dead = d.read_raw_output("clicks.DLT");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dlt_class(), Some("late-record"));
    // The operator raises the grace and redeploys, then redrives the letter (twice, by mistake):
    // `eosflow dlt redrive` keeps the user headers (the id) and the original timestamp.
    let lenient = TimeWindows::of_size_with_grace(ms(100), ms(500));
    d.replace_processor(topology(
        count(lenient, EmitStrategy::OnWindowUpdate),
        false,
    ));
    let redrive = || click("c2", 50).header("eosflow.redrive", "clicks.DLT:0:0");
    d.pipe(redrive()).expect("pipe");
    d.pipe(redrive()).expect("pipe");
    assert_eq!(
        texts(&mut d),
        ["a@100-200=1", "a@0-100=1"],
        "the redriven record counted once"
    );
    assert_eq!(
        d.summary().dedup_hits,
        1,
        "the second redrive is the duplicate"
    );
    assert!(d.read_raw_output("clicks.DLT").is_empty());
}

/// Issue 32, item 6: hopping windows with `size / advance > 64` and a new key per record
/// created more windows per record (200 here) than expiry deleted (64): the store grew without
/// bound. Expiry now keeps up: the store holds about the open windows only.
#[test]
fn hopping_window_expiry_keeps_up_with_creation_for_sparse_keys() {
    let windows = TimeWindows::of_size_no_grace(ms(200)).advance_by(ms(1));
    assert_eq!(windows.windows_per_record(), 200);
    let mut d = driver(count(windows, EmitStrategy::OnWindowUpdate));
    for i in 0..20 {
        click(&mut d, &format!("k{i}"), i * 1_000);
        let kept = stored(&mut d);
        assert!(
            kept <= 400,
            "after {} records the store holds {kept} windows",
            i + 1
        );
    }
    assert_eq!(
        stored(&mut d),
        200,
        "only the last record's windows are open"
    );
}

/// Counts that cannot be read back once they reach 3 (a corrupt or incompatible value).
struct NoThree;

impl crate::serdes::Serde<i64> for NoThree {
    fn serialize(&self, value: &i64) -> Result<Vec<u8>, crate::serdes::SerdeError> {
        crate::serdes::Serde::serialize(&I64Serde, value)
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<i64, crate::serdes::SerdeError> {
        match crate::serdes::Serde::deserialize(&I64Serde, bytes)? {
            3 => Err(crate::serdes::SerdeError::new("3 is unreadable")),
            n => Ok(n),
        }
    }
}

/// Issue 32, item 4: a close timer whose window could not be read was dead-lettered with the
/// store's internal key as its key (garbage if redriven) and the window stayed in the store
/// for ever. Now the window is deleted, and the dead letter names the timer and is marked not
/// redrivable.
#[test]
fn a_window_whose_close_cannot_read_it_is_deleted_and_its_timer_dead_lettered_by_name() {
    let store = WindowStoreHandle::new(STORE, StringSerde, NoThree);
    let windows = TimeWindows::of_size_no_grace(ms(100));
    let agg = WindowedAggregate::time(store, windows, || 0, |_, _: &String, n| n + 1)
        .emit(EmitStrategy::OnWindowClose);
    let mut d = driver(agg);
    for (key, at) in [("a", 10), ("a", 20), ("a", 30), ("b", 40)] {
        click(&mut d, key, at);
    }
    click(&mut d, "c", 500); // closes 0-100 of a (unreadable) and b
    assert_eq!(texts(&mut d), ["b@0-100=1"]);
    let dead = d.read_raw_output("clicks.DLT");
    assert_eq!(dead.len(), 1);
    let letter = &dead[0];
    assert_eq!(letter.dlt_class(), Some("permanent"));
    assert_eq!(letter.header("eosflow.dlt.timer.name"), Some("count"));
    assert_eq!(letter.header("eosflow.dlt.timer.kind"), Some("event-time"));
    assert_eq!(letter.header("eosflow.dlt.timer.due"), Some("100"));
    assert_eq!(letter.header("eosflow.dlt.redrivable"), Some("false"));
    let reason = letter.dlt_reason().unwrap_or_default();
    assert!(reason.contains("deleted without a result"), "{reason}");
    assert_eq!(stored(&mut d), 1, "only c's window: no orphan of a");
}

/// Issue 32, item 6: each session record scanned every retained session of its key
/// (`fetch_range(key, i64::MIN, …)`). Now only those within the gap are read: an old session
/// that cannot even be decoded (count 3 here) is never touched by later records far from it.
#[test]
fn a_session_record_reads_only_the_sessions_within_the_gap_of_it() {
    let windows = SessionWindows::with_inactivity_gap_no_grace(ms(100));
    let store = WindowStoreHandle::new(STORE, StringSerde, NoThree);
    let agg = WindowedAggregate::session(
        store,
        windows,
        || 0,
        |_, _: &String, n| n + 1,
        |_, a, b| a + b,
    )
    .retention(Duration::from_secs(3_600));
    let mut d = driver(agg);
    for t in [0, 10, 20] {
        click(&mut d, "a", t); // session 0-20 of 3: retained for an hour, unreadable
    }
    for t in [1_000, 1_050, 5_000, 4_990] {
        click(&mut d, "a", t);
    }
    assert!(
        d.read_raw_output("clicks.DLT").is_empty(),
        "the old session was never read"
    );
    assert_eq!(
        texts(&mut d)[5..],
        [
            "a@1000-1000=1",
            "a@1000-1000=gone",
            "a@1000-1050=2",
            "a@5000-5000=1",
            "a@5000-5000=gone",
            "a@4990-5000=2"
        ]
    );
    assert_eq!(stored(&mut d), 3, "0-20, 1000-1050, 4990-5000");
}
