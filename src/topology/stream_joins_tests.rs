//! Stream-stream joins through the test driver: what a topology author sees — pairs found from
//! either side, the window's exact edges, out-of-order records joining what is still buffered,
//! records nothing can join any more in the DLT, duplicates kept, left and outer results only
//! once final, causation on every result, buffers emptied after retention, and the builder's
//! refusals.

use std::time::Duration;

use crate::processor::StoreHandle;
use crate::serdes::{BytesSerde, StringSerde};
use crate::testing::{OutputRecord, TestRecord, TopologyTestDriver};
use crate::topology::windows::WindowStoreHandle;
use crate::topology::{JoinWindows, StreamJoin, Topology};

const LEFT: &str = "views";
const RIGHT: &str = "clicks";
const OUT: &str = "joined";
const LEFT_STORE: &str = "views-buffer";
const RIGHT_STORE: &str = "clicks-buffer";

type Driver = TopologyTestDriver<Topology>;
type Join = StreamJoin<String, String, String, String>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn stores() -> (
    WindowStoreHandle<String, String>,
    WindowStoreHandle<String, String>,
) {
    (
        WindowStoreHandle::new(LEFT_STORE, StringSerde, StringSerde),
        WindowStoreHandle::new(RIGHT_STORE, StringSerde, StringSerde),
    )
}

fn inner(w: JoinWindows) -> Join {
    let (l, r) = stores();
    StreamJoin::inner(w, l, r, |_k, l: &String, r: &String| {
        Some(format!("{l}+{r}"))
    })
}

fn left(w: JoinWindows) -> Join {
    let (l, r) = stores();
    StreamJoin::left(w, l, r, |_k, l: &String, r: Option<&String>| {
        Some(format!("{l}+{}", r.map_or("-", String::as_str)))
    })
}

fn outer(w: JoinWindows) -> Join {
    let (l, r) = stores();
    StreamJoin::outer(w, l, r, |_k, l: Option<&String>, r: Option<&String>| {
        let side = |v: Option<&String>| v.map_or("-".to_string(), String::clone);
        Some(format!("{}+{}", side(l), side(r)))
    })
}

fn driver(join: Join) -> Driver {
    let topology = Topology::builder()
        .add_source("views", &[LEFT], StringSerde, StringSerde)
        .add_source("clicks", &[RIGHT], StringSerde, StringSerde)
        .add_stream_stream_join("join", join, &["views"], &["clicks"])
        .add_sink("out", OUT, StringSerde, StringSerde, &["join"])
        .build()
        .expect("valid topology");
    TopologyTestDriver::new(topology).expect("driver")
}

/// Pipes `value` of `key` at `at` to `topic`, with the id `<value>`.
fn send(d: &mut Driver, topic: &str, key: &str, value: &str, at: i64) {
    d.pipe(
        TestRecord::new(topic, Some(key), Some(value))
            .timestamp(at)
            .id(value),
    )
    .expect("pipe");
}

fn out(d: &mut Driver) -> Vec<OutputRecord> {
    d.read_raw_output(OUT)
}

/// Results as `key:value@timestamp`.
fn texts(d: &mut Driver) -> Vec<String> {
    out(d)
        .iter()
        .map(|r| {
            let at = r.timestamp.map_or("?".to_string(), |t| t.to_string());
            format!("{}:{}@{at}", r.key_text(), r.value_text())
        })
        .collect()
}

/// Buffered slots (data entries) in a side's store, partition 0.
fn buffered(d: &mut Driver, store: &str) -> usize {
    let raw = StoreHandle::new(store, BytesSerde, BytesSerde);
    d.store_entries(&raw)
        .expect("store")
        .iter()
        .filter(|(k, _)| k.first() == Some(&b'w'))
        .count()
}

#[test]
fn an_inner_join_pairs_records_from_either_side_up_to_the_window_edges_inclusive() {
    // A right record joins a left one at t when it is in [t - 10, t + 20].
    let w = JoinWindows::of_time_difference_and_grace(ms(0), ms(50))
        .before(ms(10))
        .after(ms(20));
    let mut d = driver(inner(w));
    send(&mut d, LEFT, "a", "L1000", 1_000);
    for at in [989, 990, 1_020, 1_021] {
        send(&mut d, RIGHT, "a", &format!("R{at}"), at);
    }
    assert_eq!(
        texts(&mut d),
        ["a:L1000+R990@1000", "a:L1000+R1020@1020"],
        "the right side triggers; the result carries the larger event time"
    );
    // The left side triggers too: a left record at t joins right records in [t - 10, t + 20].
    send(&mut d, RIGHT, "b", "R2000", 2_000);
    for at in [1_979, 1_980, 2_010, 2_011] {
        send(&mut d, LEFT, "b", &format!("L{at}"), at);
    }
    assert_eq!(texts(&mut d), ["b:L1980+R2000@2000", "b:L2010+R2000@2010"]);
    // Other keys never join.
    send(&mut d, RIGHT, "c", "R2001", 2_001);
    assert!(texts(&mut d).is_empty());
}

#[test]
fn a_record_behind_stream_time_joins_what_is_buffered_and_only_one_nothing_can_join_goes_to_the_dlt(
) {
    // Retention (how long a side keeps a record): 100 + 100 + 50 = 250 ms.
    let w = JoinWindows::of_time_difference_and_grace(ms(100), ms(50));
    let mut d = driver(inner(w));
    send(&mut d, LEFT, "a", "L1000", 1_000);
    send(&mut d, LEFT, "z", "Lz", 1_120); // stream time 1120
    send(&mut d, RIGHT, "a", "R1000", 1_000);
    assert_eq!(texts(&mut d), ["a:L1000+R1000@1000"]);

    send(&mut d, LEFT, "z", "Lz2", 1_200); // the left side's newest record: 1200
                                           // 1049 + 100 + 50 is before stream time 1200, yet R1000 is still buffered and in its
                                           // window: it joins (Kafka Streams' rule: nothing bounds the arriving record, only the
                                           // retention of what it is joined with).
    send(&mut d, LEFT, "a", "L1049", 1_049);
    assert_eq!(texts(&mut d), ["a:L1049+R1000@1049"]);
    // b joins nothing, and 900 + 250 is not after 1200: no later right record could find it.
    send(&mut d, LEFT, "b", "Lb900", 900);
    assert!(texts(&mut d).is_empty());
    let dead = d.read_raw_output(&format!("{LEFT}.DLT"));
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dlt_class(), Some("late-record"));
    assert_eq!(dead[0].value_text(), "Lb900");
    assert_eq!(dead[0].header("eosflow.dlt.late.stream.time"), Some("1200"));
    // b at 1000 joins nothing either, but stays findable until the left side passes 1250.
    send(&mut d, LEFT, "b", "Lb1000", 1_000);
    assert!(d.read_raw_output(&format!("{LEFT}.DLT")).is_empty());
    send(&mut d, RIGHT, "b", "Rb", 1_090);
    assert_eq!(texts(&mut d), ["b:Lb1000+Rb@1090"]);

    // A right record at 1100 finds both left records of a (both kept, the left side's newest
    // being 1200).
    send(&mut d, RIGHT, "a", "R1100", 1_100);
    assert_eq!(texts(&mut d), ["a:L1000+R1100@1100", "a:L1049+R1100@1100"]);
    assert_eq!(buffered(&mut d, LEFT_STORE), 5);
    // Once the left side passes 1000 + 250 its records at 1000 go; the others stay until
    // their own turn.
    send(&mut d, LEFT, "z", "Lz3", 1_251);
    assert_eq!(
        buffered(&mut d, LEFT_STORE),
        4,
        "a@1000 and b@1000 went, z@1251 came"
    );
    send(&mut d, LEFT, "z", "Lz4", 2_000);
    assert_eq!(buffered(&mut d, LEFT_STORE), 1, "only z@2000 is left");
    // A side's records go by that side's newest record (Kafka Streams' window store
    // retention): the right side has not moved past 1100 yet.
    assert_eq!(buffered(&mut d, RIGHT_STORE), 3);
    send(&mut d, RIGHT, "z", "Rz", 2_000);
    assert_eq!(buffered(&mut d, RIGHT_STORE), 1, "only z@2000 is left");
    assert_eq!(texts(&mut d), ["z:Lz4+Rz@2000"]);
}

#[test]
fn records_with_the_same_key_and_time_are_all_kept_and_all_joined() {
    let w = JoinWindows::of_time_difference_no_grace(ms(10));
    let mut d = driver(inner(w));
    send(&mut d, LEFT, "a", "x1", 1_000);
    send(&mut d, LEFT, "a", "x2", 1_000);
    send(&mut d, RIGHT, "a", "y1", 1_000);
    send(&mut d, RIGHT, "a", "y2", 1_000);
    let mut got = texts(&mut d);
    got.sort();
    assert_eq!(
        got,
        [
            "a:x1+y1@1000",
            "a:x1+y2@1000",
            "a:x2+y1@1000",
            "a:x2+y2@1000"
        ]
    );
}

#[test]
fn a_left_join_emits_an_unmatched_left_record_once_no_right_record_can_join_it() {
    // Retention 100 + 100 + 50 = 250: a left record at 1000 is final after stream time 1250.
    let w = JoinWindows::of_time_difference_and_grace(ms(100), ms(50));
    let mut d = driver(left(w));
    send(&mut d, LEFT, "a", "A", 1_000);
    send(&mut d, LEFT, "b", "B", 1_000);
    send(&mut d, RIGHT, "a", "Ra", 1_050);
    assert_eq!(texts(&mut d), ["a:A+Ra@1050"]);
    send(&mut d, RIGHT, "z", "Rz", 1_250);
    assert!(
        texts(&mut d).is_empty(),
        "at 1250 a right record at 1100 could still come and join B"
    );
    send(&mut d, RIGHT, "z", "Rz2", 1_251);
    let got = out(&mut d);
    let values: Vec<String> = got
        .iter()
        .map(|r| format!("{}:{}@{:?}", r.key_text(), r.value_text(), r.timestamp))
        .collect();
    assert_eq!(
        values,
        ["b:B+-@Some(1000)"],
        "only B, once, with its own event time; A joined and right records are never alone"
    );
    assert_eq!(
        got[0].header("causation_id"),
        Some("B"),
        "a timer has no input: the unmatched result names the record it stands for"
    );
    assert_eq!(got[0].header("correlation_id"), Some("B"));
    send(&mut d, RIGHT, "z", "Rz3", 5_000);
    assert!(texts(&mut d).is_empty());
    assert_eq!(buffered(&mut d, RIGHT_STORE), 1, "only z@5000 is left");
    // The left side's newest record is still at 1000: as in Kafka Streams, a right record at
    // 1000..1100 arriving now would still find A and B, so they stay buffered (B marked as
    // emitted) until the left side moves past 1000 + 250.
    assert_eq!(buffered(&mut d, LEFT_STORE), 2, "a@1000 (A) and b@1000 (B)");
    send(&mut d, LEFT, "y", "Ly", 5_000);
    send(&mut d, LEFT, "y", "Ly2", 5_001);
    assert!(texts(&mut d).is_empty());
    assert_eq!(
        buffered(&mut d, LEFT_STORE),
        2,
        "A and B went once the left side passed 1250: y@5000 and y@5001 are left"
    );
}

#[test]
fn an_outer_join_emits_unmatched_records_of_both_sides_and_nothing_for_matched_ones() {
    let w = JoinWindows::of_time_difference_no_grace(ms(100));
    let mut d = driver(outer(w));
    send(&mut d, LEFT, "a", "La", 1_000);
    send(&mut d, RIGHT, "b", "Rb", 1_010);
    send(&mut d, RIGHT, "c", "Rc", 1_020);
    send(&mut d, LEFT, "c", "Lc", 1_100);
    assert_eq!(texts(&mut d), ["c:Lc+Rc@1100"]);
    // Retention 200: a@1000 is final after 1200, b@1010 after 1210, c's records joined.
    send(&mut d, LEFT, "z", "Lz", 1_200);
    assert!(texts(&mut d).is_empty());
    send(&mut d, LEFT, "z", "Lz2", 1_211);
    let got = out(&mut d);
    let values: Vec<String> = got.iter().map(|r| r.value_text()).collect();
    assert_eq!(values, ["La+-", "-+Rb"]);
    let causes: Vec<Option<&str>> = got.iter().map(|r| r.header("causation_id")).collect();
    assert_eq!(causes, [Some("La"), Some("Rb")]);
}

#[test]
fn a_result_is_caused_by_the_record_that_completed_the_pair() {
    let w = JoinWindows::of_time_difference_no_grace(ms(100));
    let mut d = driver(inner(w));
    send(&mut d, LEFT, "a", "first-left", 1_000);
    d.pipe(
        TestRecord::new(RIGHT, Some("a"), Some("then-right"))
            .timestamp(1_001)
            .id("click-7")
            .header("correlation_id", "journey-1")
            .header("tenant", "acme"),
    )
    .expect("pipe");
    let got = out(&mut d);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].header("causation_id"), Some("click-7"));
    assert_eq!(got[0].header("correlation_id"), Some("journey-1"));
    assert_eq!(got[0].header("tenant"), Some("acme"));
    send(&mut d, LEFT, "a", "second-left", 1_002);
    let got = out(&mut d);
    assert_eq!(got[0].value_text(), "second-left+then-right");
    assert_eq!(got[0].header("causation_id"), Some("second-left"));
}

#[test]
fn records_without_key_or_value_join_nothing() {
    let w = JoinWindows::of_time_difference_no_grace(ms(100));
    let mut d = driver(outer(w));
    d.pipe(TestRecord::new(LEFT, None::<&str>, Some("no-key")).timestamp(1_000))
        .expect("pipe");
    d.pipe(TestRecord::new(LEFT, Some("a"), None::<&str>).timestamp(1_000))
        .expect("pipe");
    send(&mut d, RIGHT, "a", "Ra", 1_000);
    send(&mut d, RIGHT, "z", "Rz", 5_000);
    assert_eq!(texts(&mut d), ["a:-+Ra@1000"]);
    assert!(d.read_raw_output(&format!("{LEFT}.DLT")).is_empty());
}

#[test]
fn the_builder_adds_both_buffers_with_changelogs_and_refuses_one_store_for_both_sides() {
    let w = JoinWindows::of_time_difference_no_grace(ms(100));
    let topology = Topology::builder()
        .add_source("views", &[LEFT], StringSerde, StringSerde)
        .add_source("clicks", &[RIGHT], StringSerde, StringSerde)
        .add_stream_stream_join("join", inner(w), &["views"], &["clicks"])
        .add_sink("out", OUT, StringSerde, StringSerde, &["join"])
        .build()
        .expect("valid");
    assert_eq!(
        topology.changelog_topics("app"),
        [
            "app-state-changelog",
            "app-views-buffer-changelog",
            "app-clicks-buffer-changelog"
        ]
    );
    let same = WindowStoreHandle::new("one", StringSerde, StringSerde);
    let join: Join = StreamJoin::inner(w, same.clone(), same, |_, _, _| None);
    let err = Topology::builder()
        .add_source("views", &[LEFT], StringSerde, StringSerde)
        .add_source("clicks", &[RIGHT], StringSerde, StringSerde)
        .add_stream_stream_join("join", join, &["views"], &["clicks"])
        .build()
        .expect_err("one store for both sides");
    assert!(err.to_string().contains("each side needs its own"), "{err}");
}
