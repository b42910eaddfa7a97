//! Versioned tables and temporal stream-table joins through the test driver: stream records
//! (in or out of timestamp order) joining the version valid at their timestamp, a late table
//! update going into the history without becoming the latest row, tombstone versions, the
//! latest row read as before, and a stream record older than the history dropped and counted.

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;

use crate::processor::AsOf;
use crate::serdes::StringSerde;
use crate::testing::{TestRecord, TopologyTestDriver};
use crate::topology::{TableHandle, Topology};

const CLICKS: &str = "clicks";
const USERS: &str = "users";
/// The table's history: small, so that the tests can outrun it.
const HISTORY_MS: u64 = 100;

type Driver = TopologyTestDriver<Topology>;

fn users() -> TableHandle<String, String> {
    TableHandle::versioned(
        "users",
        USERS,
        StringSerde,
        StringSerde,
        Duration::from_millis(HISTORY_MS),
    )
}

/// Clicks joined as of their timestamps with the versioned users table: inner results to
/// `inner`, left results to `left`.
fn topology() -> Topology {
    let users = users();
    Topology::builder()
        .add_source("clicks", &[CLICKS], StringSerde, StringSerde)
        .add_table(&users)
        .add_stream_table_join(
            "inner-join",
            &users,
            |_user: &String, page: &String, name: &String| Some(format!("{page} by {name}")),
            &["clicks"],
        )
        .add_stream_table_left_join(
            "left-join",
            &users,
            |_user: &String, page: &String, name: Option<&String>| {
                Some(format!("{page} by {}", name.map_or("?", String::as_str)))
            },
            &["clicks"],
        )
        .add_sink("inner", "inner", StringSerde, StringSerde, &["inner-join"])
        .add_sink("left", "left", StringSerde, StringSerde, &["left-join"])
        .build()
        .expect("valid topology")
}

fn driver() -> Driver {
    TopologyTestDriver::new(topology()).expect("driver")
}

fn row(d: &mut Driver, user: &str, name: Option<&str>, at: i64) {
    d.pipe_table_at(
        &users(),
        &user.to_string(),
        name.map(str::to_string).as_ref(),
        at,
    )
    .expect("pipe table");
}

fn click(d: &mut Driver, user: &str, page: &str, at: i64) {
    d.pipe(TestRecord::new(CLICKS, Some(user), Some(page)).timestamp(at))
        .expect("pipe click");
}

fn values(d: &mut Driver, topic: &str) -> Vec<String> {
    d.read_raw_output(topic)
        .iter()
        .map(|r| r.value_text())
        .collect()
}

fn as_of(d: &mut Driver, user: &str, at: i64) -> AsOf<String> {
    d.table_get_as_of(&users(), &user.to_string(), at)
        .expect("as of")
}

#[test]
fn out_of_order_clicks_join_the_version_valid_at_their_timestamp() {
    let mut d = driver();
    row(&mut d, "ann", Some("Ann"), 10);
    row(&mut d, "ann", Some("Annie"), 20);
    row(&mut d, "ann", None, 30);
    row(&mut d, "ann", Some("Anna"), 40);
    // Clicks after every row, most with earlier timestamps: a plain table would join each
    // with Anna.
    for (page, at) in [
        ("/a", 45),
        ("/b", 15),
        ("/c", 5),
        ("/d", 25),
        ("/e", 35),
        ("/f", 20),
        ("/g", 40),
    ] {
        click(&mut d, "ann", page, at);
    }
    assert_eq!(
        values(&mut d, "left"),
        [
            "/a by Anna",
            "/b by Ann",
            "/c by ?",
            "/d by Annie",
            "/e by ?",
            "/f by Annie",
            "/g by Anna"
        ],
        "each click meets the version valid at its timestamp: none before 10, none after the tombstone at 30"
    );
    assert_eq!(
        values(&mut d, "inner"),
        [
            "/a by Anna",
            "/b by Ann",
            "/d by Annie",
            "/f by Annie",
            "/g by Anna"
        ]
    );
    // The latest row reads as a plain table's.
    assert_eq!(
        d.table_get(&users(), &"ann".to_string()).expect("get"),
        Some("Anna".to_string())
    );
}

#[test]
fn a_late_table_update_goes_into_the_history_and_does_not_become_the_latest_row() {
    let mut d = driver();
    row(&mut d, "bob", Some("Bob"), 10);
    row(&mut d, "bob", Some("Robert"), 30);
    row(&mut d, "bob", Some("Bobby"), 20); // arrives last, valid from 20 to 30
    click(&mut d, "bob", "/x", 25);
    click(&mut d, "bob", "/y", 35);
    click(&mut d, "bob", "/z", 15);
    assert_eq!(
        values(&mut d, "left"),
        ["/x by Bobby", "/y by Robert", "/z by Bob"]
    );
    assert_eq!(
        d.table_get(&users(), &"bob".to_string()).expect("get"),
        Some("Robert".to_string()),
        "the latest row is the version with the latest timestamp, not the last record"
    );
    assert_eq!(
        as_of(&mut d, "bob", 29),
        AsOf::Value {
            value: "Bobby".to_string(),
            valid_from: 20
        }
    );
    // A tombstone as the latest version deletes the latest row and reads as no row from then.
    row(&mut d, "bob", None, 50);
    assert_eq!(
        d.table_get(&users(), &"bob".to_string()).expect("get"),
        None
    );
    assert_eq!(as_of(&mut d, "bob", 50), AsOf::Absent);
    assert_eq!(
        as_of(&mut d, "bob", 49).into_value().as_deref(),
        Some("Robert")
    );
    // A late tombstone inside the history ends the version before it early.
    row(&mut d, "bob", None, 12);
    assert_eq!(as_of(&mut d, "bob", 15), AsOf::Absent);
    assert_eq!(
        as_of(&mut d, "bob", 11).into_value().as_deref(),
        Some("Bob")
    );
}

#[test]
fn a_click_older_than_the_history_is_dropped_by_both_joins_and_counted() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let mut d = driver();
    metrics::with_local_recorder(&recorder, || {
        row(&mut d, "cy", Some("Cy"), 0);
        row(&mut d, "cy", Some("Cyrus"), 500); // observed 500: the cutoff is 400
        click(&mut d, "cy", "/old", 399);
        click(&mut d, "cy", "/edge", 400);
        click(&mut d, "cy", "/new", 501);
        // A table record older than the cutoff is dropped as well.
        row(&mut d, "cy", Some("Late"), 300);
    });
    assert_eq!(
        values(&mut d, "left"),
        ["/edge by Cy", "/new by Cyrus"],
        "the version valid at the cutoff is kept; older clicks are not joined with a guess"
    );
    assert_eq!(values(&mut d, "inner"), ["/edge by Cy", "/new by Cyrus"]);
    assert_eq!(
        as_of(&mut d, "cy", 399),
        AsOf::BeyondHistory { cutoff: 400 }
    );
    assert_eq!(as_of(&mut d, "cy", 450).into_value().as_deref(), Some("Cy"));
    let text = handle.render();
    for node in ["inner-join", "left-join"] {
        let line = format!(
            "eosflow_join_dropped_records_total{{node=\"{node}\",reason=\"history-too-short\"}} 1"
        );
        assert!(text.contains(&line), "{line} missing from\n{text}");
    }
    assert!(
        text.contains("eosflow_table_records_skipped_total{table=\"users\"} 1"),
        "the late table record is counted\n{text}"
    );
}

#[test]
fn only_a_versioned_table_answers_as_of_a_time() {
    let plain = TableHandle::new("users", USERS, StringSerde, StringSerde);
    let topology = Topology::builder()
        .add_source("clicks", &[CLICKS], StringSerde, StringSerde)
        .add_table(&plain)
        .add_stream_table_left_join(
            "left-join",
            &plain,
            |_: &String, page: &String, name: Option<&String>| {
                Some(format!("{page} by {}", name.map_or("?", String::as_str)))
            },
            &["clicks"],
        )
        .add_sink("left", "left", StringSerde, StringSerde, &["left-join"])
        .build()
        .expect("valid topology");
    let mut d = TopologyTestDriver::new(topology).expect("driver");
    d.pipe_table_at(&plain, &"dee".to_string(), Some(&"Dee".to_string()), 20)
        .expect("pipe");
    d.pipe(TestRecord::new(CLICKS, Some("dee"), Some("/p")).timestamp(10))
        .expect("pipe click");
    assert_eq!(
        values(&mut d, "left"),
        ["/p by Dee"],
        "a plain table joins its latest row, whatever the timestamps"
    );
    let err = d
        .table_get_as_of(&plain, &"dee".to_string(), 10)
        .expect_err("a plain table keeps no versions");
    assert!(err.to_string().contains("not a versioned table"), "{err}");
}

/// The graced DSL join (`Joined::with_grace_period`): clicks and late user rows, crashed at
/// every batch boundary, mid-batch and before the local apply — the buffered clicks (event-time
/// timers) must each be joined exactly once, as in the crash-free run, with the version valid
/// at their timestamp, a row that arrived after its click included.
#[test]
fn a_graced_join_killed_anywhere_joins_each_buffered_click_once() {
    use crate::dsl::{Consumed, Joined, Produced, StreamsBuilder};
    let topology = || {
        let b = StreamsBuilder::new();
        let users = b.versioned_table(
            USERS,
            Consumed::with(StringSerde, StringSerde),
            Duration::from_secs(60),
        );
        b.stream(CLICKS, Consumed::with(StringSerde, StringSerde))
            .left_join_table_with(
                &users,
                |c, n| format!("{c}|{}", n.map_or("-", String::as_str)),
                Joined::with(StringSerde, StringSerde).with_grace_period(Duration::from_millis(50)),
            )
            .to("left", Produced::with(StringSerde, StringSerde));
        b.build()
    };
    let mut test = TopologyTestDriver::with_crashes(7, topology);
    let at = |topic: &str, k: &str, v: &str, ts: i64| {
        TestRecord::new(topic, Some(k), Some(v)).timestamp(ts)
    };
    let mut steps = Vec::new();
    for i in 0..12_i64 {
        let user = if i % 2 == 0 { "ann" } else { "bob" };
        steps.push(at(CLICKS, user, &format!("c{i}"), 100 + 20 * i));
        // A row stamped before the click just sent, arriving after it (within the grace).
        steps.push(at(USERS, user, &format!("n{i}"), 95 + 20 * i));
    }
    steps.push(at(CLICKS, "zed", "flush", 1_000));
    for s in steps {
        test.pipe(s);
    }
    let summary = test
        .run()
        .expect("every crash gives the crash-free results");
    assert!(summary.crashes.len() >= summary.batches, "{summary:?}");
    assert_eq!(summary.written.get("left"), Some(&12), "{summary:?}");
}
