//! The dedup example's unit tests: the topology in `TopologyTestDriver`, no broker.
//! `cargo test --locked --example dsl_dedup` runs them.

use eosflow::processor::StoreHandle;
use eosflow::serdes::{I64Serde, JsonSerde, StringSerde};
use eosflow::testing::DltClass;
use eosflow::testing::{TestRecord, TopologyTestDriver};
use eosflow::topology::Topology;

use super::{topology, Event, EVENTS, GRACE_MS, TTL_MS, UNIQUE};

type TestResult = Result<(), Box<dyn std::error::Error>>;
type Driver = TopologyTestDriver<Topology>;

/// Where the dedup node's late events go: the DLT of the topic it reads (the driver's
/// application id is `test`).
const LATE_DLT: &str = "test-events-by-id-repartition.DLT";

/// An event record: key = its source, value = the event as JSON, at `ms` of event time.
fn event(event_id: &str, body: &str, ms: i64) -> TestRecord {
    let event = Event {
        event_id: event_id.to_string(),
        body: body.to_string(),
    };
    let json = serde_json::to_vec(&event).expect("an event serializes");
    TestRecord::new(EVENTS, Some("sensor-1"), Some(json)).timestamp(ms)
}

/// The events that passed since the last read, as (event id, body).
fn passed(driver: &mut Driver) -> Result<Vec<(String, String)>, Box<dyn std::error::Error>> {
    let out = driver.read_output(UNIQUE, &StringSerde, &JsonSerde::<Event>::new())?;
    let mut events = Vec::new();
    for (key, event) in out {
        let event = event.ok_or("an output without a value")?;
        assert_eq!(key.as_deref(), Some(event.event_id.as_str()));
        events.push((event.event_id, event.body));
    }
    Ok(events)
}

fn pair(id: &str, body: &str) -> (String, String) {
    (id.to_string(), body.to_string())
}

fn seen() -> StoreHandle<String, i64> {
    StoreHandle::new("seen-event-ids", StringSerde, I64Serde)
}

#[test]
fn a_copy_within_the_ttl_is_dropped_and_from_the_ttl_on_the_id_passes_again() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe(event("e-1", "first", 0))?;
    driver.pipe(event("e-2", "other", 1_000))?;
    driver.pipe(event("e-1", "copy", TTL_MS - 1))?; // 1 ms before the TTL: dropped
    driver.pipe(event("e-1", "again", TTL_MS))?; // at the TTL: passes, a new TTL starts
    driver.pipe(event("e-1", "copy", TTL_MS + 1))?;
    driver.pipe(event("e-2", "copy", TTL_MS + 999))?; // e-2's TTL ends at TTL + 1 000
    assert_eq!(
        passed(&mut driver)?,
        vec![
            pair("e-1", "first"),
            pair("e-2", "other"),
            pair("e-1", "again")
        ]
    );
    assert_eq!(driver.store_get(&seen(), &"e-1".to_string())?, Some(TTL_MS));
    assert!(driver
        .pending_outputs()
        .keys()
        .all(|t| !t.ends_with(".DLT")));
    Ok(())
}

#[test]
fn copies_that_came_in_on_different_partitions_are_dropped_too() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe(event("e-1", "first", 0).partition(0))?;
    driver.pipe(event("e-1", "copy", 500).partition(2))?;
    driver.pipe(event("e-1", "copy", 900).partition(3))?;
    assert_eq!(passed(&mut driver)?, vec![pair("e-1", "first")]);
    Ok(())
}

#[test]
fn an_id_is_forgotten_once_its_ttl_and_grace_have_passed_so_the_store_stays_small() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe(event("e-1", "a", 0))?;
    driver.pipe(event("e-2", "b", TTL_MS + GRACE_MS - 1))?;
    let ids = |d: &mut Driver| -> Result<Vec<String>, Box<dyn std::error::Error>> {
        Ok(d.store_entries(&seen())?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    };
    assert_eq!(ids(&mut driver)?, ["e-1", "e-2"]);
    driver.pipe(event("e-3", "c", TTL_MS + GRACE_MS))?; // e-1's purge timer fires
    assert_eq!(ids(&mut driver)?, ["e-2", "e-3"]);
    driver.pipe(event("e-4", "d", 5 * (TTL_MS + GRACE_MS)))?;
    assert_eq!(ids(&mut driver)?, ["e-4"]);
    // One purge timer per id still remembered.
    assert_eq!(driver.pending_timers(0)?.len(), 1);
    Ok(())
}

#[test]
fn an_event_more_than_the_grace_behind_stream_time_is_dead_lettered_as_late() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    let now = 20 * 60_000;
    driver.pipe(event("e-1", "first", 0))?;
    driver.pipe(event("e-9", "moves stream time", now))?;
    driver.pipe(event("e-2", "just in time", now - GRACE_MS))?; // checked: passes
    driver.pipe(event("e-1", "copy", now - GRACE_MS - 1))?; // e-1 may be forgotten: late
    assert_eq!(
        passed(&mut driver)?,
        vec![
            pair("e-1", "first"),
            pair("e-9", "moves stream time"),
            pair("e-2", "just in time")
        ]
    );
    let late = driver.dead_letters(LATE_DLT);
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].class, DltClass::LateRecord);
    assert_eq!(late[0].record.key_text(), "e-1");
    assert_eq!(late[0].reason, "e-1 at 1139999: its id may be forgotten");
    Ok(())
}

#[test]
fn an_event_without_an_id_or_a_json_value_is_dead_lettered_and_a_tombstone_dropped() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe(event("", "no id", 0))?;
    driver.pipe(TestRecord::new(
        EVENTS,
        Some("sensor-1"),
        Some(b"".as_slice()),
    ))?;
    driver.pipe(TestRecord::new(EVENTS, Some("sensor-1"), None::<&[u8]>))?;
    driver.pipe(event("e-1", "ok", 0))?;
    assert_eq!(passed(&mut driver)?, vec![pair("e-1", "ok")]);
    let dead = driver.dead_letters(EVENTS);
    assert_eq!(dead.len(), 2);
    assert!(dead.iter().all(|d| d.class == DltClass::Permanent));
    assert_eq!(dead[0].reason, "an event needs an event_id");
    assert!(dead[1].reason.contains("not JSON"), "{}", dead[1].reason);
    Ok(())
}

/// A `kill -9` anywhere — inside a batch, at each batch boundary, between a batch's commit and
/// its local apply — changes no committed output, remembered id, purge timer or dead letter:
/// the ids live in the `seen-event-ids` store and their purges in durable timers, the
/// processor's struct holds only the store's handle.
#[test]
fn a_crash_anywhere_changes_no_committed_output() -> TestResult {
    for seed in [1, 2, 3] {
        let mut crash_test = TopologyTestDriver::with_crashes(seed, topology);
        for (id, ms, partition) in [
            ("e-1", 0, 0),
            ("e-2", 1_000, 1),
            ("e-1", 2_000, 2),          // a copy: dropped
            ("e-1", TTL_MS - 1, 0),     // a copy: dropped
            ("e-1", TTL_MS, 0),         // passes again
            ("e-3", 3 * TTL_MS, 1),     // purges e-1 and e-2
            ("e-2", 3 * TTL_MS - 1, 0), // forgotten, within the grace: passes
            ("e-1", TTL_MS + 1, 0),     // far behind stream time: late
            ("", 3 * TTL_MS, 0),        // no id: dead-lettered
        ] {
            crash_test.pipe(event(id, "body", ms).partition(partition));
        }
        let summary = crash_test.run()?;
        assert!(summary.crashes.len() >= summary.batches);
        assert_eq!(summary.written.get(UNIQUE), Some(&5));
        assert_eq!(summary.written.get(LATE_DLT), Some(&1));
        assert_eq!(summary.written.get("dsl-dedup.events.DLT"), Some(&1));
    }
    Ok(())
}
