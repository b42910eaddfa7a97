//! The sessions example's unit tests: the topology in `TopologyTestDriver`, no broker.
//! `cargo test --locked --example dsl_sessions` runs them.

use eosflow::serdes::{JsonSerde, StringSerde};
use eosflow::testing::DltClass;
use eosflow::testing::{TestRecord, TopologyTestDriver};
use eosflow::topology::Topology;

use super::{topology, Session, SESSIONS, VIEWS};

type TestResult = Result<(), Box<dyn std::error::Error>>;
type Driver = TopologyTestDriver<Topology>;

/// `m` minutes, in ms.
fn min(m: i64) -> i64 {
    m * 60_000
}

fn view(user: &str, page: &str, ms: i64) -> TestRecord {
    TestRecord::new(VIEWS, Some(user), Some(page)).timestamp(ms)
}

/// The sessions written since the last read (sessions closing together come out in their
/// timers' order: sorted here by start, then user).
fn closed(driver: &mut Driver) -> Result<Vec<Session>, Box<dyn std::error::Error>> {
    let out = driver.read_output(SESSIONS, &StringSerde, &JsonSerde::<Session>::new())?;
    let mut sessions = Vec::new();
    for (key, session) in out {
        let session = session.ok_or("a session without a value")?;
        assert_eq!(key.as_deref(), Some(session.user.as_str()));
        sessions.push(session);
    }
    sessions.sort_by(|a, b| (a.start_ms, &a.user).cmp(&(b.start_ms, &b.user)));
    Ok(sessions)
}

fn session(user: &str, start_ms: i64, end_ms: i64, views: i64, pages: &[&str]) -> Session {
    Session {
        user: user.to_string(),
        start_ms,
        end_ms,
        views,
        pages: pages.iter().map(|p| p.to_string()).collect(),
    }
}

#[test]
fn a_users_views_closer_than_the_gap_are_one_session_reported_once_it_closes() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe(view("ann", "/home", 0))?;
    driver.pipe(view("ann", "/cart", min(10)))?;
    driver.pipe(view("ann", "/home", min(25)))?;
    driver.pipe(view("bob", "/home", min(59)))?;
    // Ann's session closes once stream time passes 25 + 30 (gap) + 5 (grace) = 60 minutes,
    // as in Kafka Streams: at 60 minutes it is still open.
    driver.pipe(view("cat", "/help", min(60)))?;
    assert!(closed(&mut driver)?.is_empty());
    driver.pipe(view("dan", "/help", min(60) + 1))?;
    assert_eq!(
        closed(&mut driver)?,
        vec![session("ann", 0, min(25), 3, &["/cart", "/home"])]
    );
    driver.pipe(view("cat", "/help", min(200)))?;
    assert_eq!(
        closed(&mut driver)?,
        vec![
            session("bob", min(59), min(59), 1, &["/home"]),
            session("cat", min(60), min(60), 1, &["/help"]),
            session("dan", min(60) + 1, min(60) + 1, 1, &["/help"]),
        ]
    );
    Ok(())
}

#[test]
fn a_session_goes_out_as_the_json_the_module_doc_shows() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    for (page, at) in [("/home", 0), ("/cart", min(10)), ("/home", min(25))] {
        driver.pipe(view("ann", page, at))?;
    }
    driver.pipe(view("bob", "/home", min(90)))?;
    let out = driver.read_raw_output(SESSIONS);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].key_text(), "ann");
    assert_eq!(
        out[0].value_text(),
        r#"{"user":"ann","start_ms":0,"end_ms":1500000,"views":3,"pages":["/cart","/home"]}"#
    );
    // A session's result carries its end as timestamp.
    assert_eq!(out[0].timestamp, Some(min(25)));
    Ok(())
}

#[test]
fn a_view_one_gap_after_the_last_continues_the_session_one_ms_more_starts_another() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe(view("ann", "/a", 0))?;
    driver.pipe(view("ann", "/b", min(30)))?; // exactly the gap: the same session
    driver.pipe(view("ann", "/c", min(60) + 1))?; // 30 min and 1 ms after: a new one
    driver.pipe(view("ann", "/d", min(300)))?;
    assert_eq!(
        closed(&mut driver)?,
        vec![
            session("ann", 0, min(30), 2, &["/a", "/b"]),
            session("ann", min(60) + 1, min(60) + 1, 1, &["/c"]),
        ]
    );
    Ok(())
}

#[test]
fn an_out_of_order_view_that_bridges_two_sessions_merges_them() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe(view("ann", "/a", 0))?;
    driver.pipe(view("ann", "/b", min(32)))?; // more than the gap: a second session
    driver.pipe(view("ann", "/c", min(16)))?; // within the gap of both: one session
    driver.pipe(view("bob", "/x", min(300)))?;
    assert_eq!(
        closed(&mut driver)?,
        vec![session("ann", 0, min(32), 3, &["/a", "/b", "/c"])]
    );
    Ok(())
}

#[test]
fn a_late_view_joins_its_session_within_the_grace_and_is_dead_lettered_after() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe(view("ann", "/a", 0))?;
    driver.pipe(view("bob", "/x", min(33)))?; // Ann's session is open until 35 minutes
    driver.pipe(view("ann", "/b", min(5)))?; // out of order, in time: counted
    driver.pipe(view("bob", "/x", min(42)))?; // Ann's session [0, 5] closed after 40 minutes
    driver.pipe(view("ann", "/c", min(6)))?; // its own close time (41 minutes) has passed: late
    assert_eq!(
        closed(&mut driver)?,
        vec![session("ann", 0, min(5), 2, &["/a", "/b"])]
    );
    let dead = driver.dead_letters(VIEWS);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].class, DltClass::LateRecord);
    assert_eq!(dead[0].record.value_text(), "/c");
    Ok(())
}

#[test]
fn a_view_without_a_user_or_a_value_is_dead_lettered_one_with_an_empty_page_counts() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe(TestRecord::new(VIEWS, None::<&str>, Some("/a")).timestamp(0))?;
    driver.pipe(TestRecord::new(VIEWS, Some("ann"), None::<&str>).timestamp(0))?;
    driver.pipe(view("ann", "", min(1)))?;
    driver.pipe(view("ann", "/a", min(2)))?;
    driver.pipe(view("bob", "/x", min(100)))?;
    assert_eq!(
        closed(&mut driver)?,
        vec![session("ann", min(1), min(2), 2, &["/a"])]
    );
    let dead = driver.dead_letters(VIEWS);
    assert_eq!(dead.len(), 2);
    assert!(dead.iter().all(|d| d.class == DltClass::Permanent));
    Ok(())
}

/// A `kill -9` anywhere — inside a batch, at each batch boundary, between a batch's commit and
/// its local apply — changes no committed session, store entry, pending timer or dead letter:
/// open sessions live in the `user-sessions` store, their closes in durable timers.
#[test]
fn a_crash_anywhere_changes_no_committed_session() -> TestResult {
    for seed in [1, 2] {
        let mut crash_test = TopologyTestDriver::with_crashes(seed, topology);
        for (user, page, at) in [
            ("ann", "/home", 0),
            ("bob", "/home", min(2)),
            ("ann", "/cart", min(20)),
            ("ann", "/pay", min(45)),
            ("bob", "/help", min(50)),  // bob's second session
            ("ann", "/home", min(16)),  // out of order, in grace
            ("cat", "/home", min(120)), // closes ann's and bob's
            ("ann", "/late", min(30)),  // later than its grace
            ("cat", "/cart", min(400)),
        ] {
            crash_test.pipe(view(user, page, at));
        }
        let summary = crash_test.run()?;
        assert!(summary.crashes.len() >= summary.batches);
        // ann [0, 45], bob [2, 2], bob [50, 50], cat [120, 120].
        assert_eq!(summary.written.get(SESSIONS), Some(&4));
        assert_eq!(summary.written.get("dsl-sessions.page-views.DLT"), Some(&1));
    }
    Ok(())
}
