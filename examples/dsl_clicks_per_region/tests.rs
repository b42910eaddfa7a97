//! The clicks-per-region example's unit tests: the topology in `TopologyTestDriver`, no
//! broker. `cargo test --locked --example dsl_clicks_per_region` runs them.

use eosflow::serdes::{JsonSerde, StringSerde};
use eosflow::testing::{TestRecord, TopologyTestDriver};
use eosflow::topology::{TableHandle, Topology};

use super::{topology, RegionClicks, CLICKS, PER_REGION, USERS};

type TestResult = Result<(), Box<dyn std::error::Error>>;
type Driver = TopologyTestDriver<Topology>;

fn driver_with_users(users: &[(&str, &str)]) -> Result<Driver, Box<dyn std::error::Error>> {
    let table = TableHandle::new(USERS, USERS, StringSerde, StringSerde);
    let mut driver = TopologyTestDriver::new(topology()?)?;
    for (user, region) in users {
        driver.pipe_table(&table, &user.to_string(), Some(&region.to_string()))?;
    }
    Ok(driver)
}

fn click(driver: &mut Driver, user: &str, partition: i32, ms: i64) -> TestResult {
    driver.pipe(
        TestRecord::new(CLICKS, Some(user), Some("/page"))
            .partition(partition)
            .timestamp(ms),
    )?;
    Ok(())
}

/// The final counts written so far, by window and region (windows closing together come out
/// in their timers' order).
fn finals(driver: &mut Driver) -> Result<Vec<RegionClicks>, Box<dyn std::error::Error>> {
    let out = driver.read_output(PER_REGION, &StringSerde, &JsonSerde::<RegionClicks>::new())?;
    let mut finals: Vec<RegionClicks> = out.into_iter().filter_map(|(_, v)| v).collect();
    finals.sort_by(|a, b| (a.start_ms, &a.region).cmp(&(b.start_ms, &b.region)));
    Ok(finals)
}

fn counted(region: &str, start_ms: i64, clicks: i64) -> RegionClicks {
    RegionClicks {
        region: region.to_string(),
        start_ms,
        end_ms: start_ms + 60_000,
        clicks,
    }
}

#[test]
fn each_regions_clicks_are_counted_once_per_minute_when_the_minute_closes() -> TestResult {
    let mut driver = driver_with_users(&[("ann", "eu"), ("bob", "us"), ("cat", "eu")])?;
    click(&mut driver, "ann", 0, 1_000)?;
    click(&mut driver, "bob", 0, 2_000)?;
    click(&mut driver, "cat", 0, 59_000)?;
    click(&mut driver, "ann", 0, 61_000)?;
    // The first minute is still open (10 s of grace): nothing final yet.
    assert!(finals(&mut driver)?.is_empty());
    click(&mut driver, "bob", 0, 70_000)?;
    assert_eq!(
        finals(&mut driver)?,
        vec![counted("eu", 0, 2), counted("us", 0, 1)]
    );
    Ok(())
}

#[test]
fn a_click_of_an_unknown_user_counts_for_unknown_and_a_move_counts_from_then_on() -> TestResult {
    let mut driver = driver_with_users(&[("ann", "eu")])?;
    click(&mut driver, "zed", 0, 1_000)?;
    click(&mut driver, "ann", 0, 2_000)?;
    let users = TableHandle::new(USERS, USERS, StringSerde, StringSerde);
    driver.pipe(TestRecord::new(USERS, Some("ann"), Some("us")).timestamp(3_000))?;
    click(&mut driver, "ann", 0, 4_000)?;
    click(&mut driver, "zed", 0, 75_000)?;
    assert_eq!(
        finals(&mut driver)?,
        vec![
            counted("eu", 0, 1),
            counted("unknown", 0, 1),
            counted("us", 0, 1)
        ]
    );
    assert_eq!(
        driver.table_get(&users, &"ann".to_string())?.as_deref(),
        Some("us")
    );
    Ok(())
}

#[test]
fn a_click_later_than_its_minutes_grace_is_dead_lettered_not_counted() -> TestResult {
    let mut driver = driver_with_users(&[("ann", "eu")])?;
    click(&mut driver, "ann", 0, 1_000)?;
    click(&mut driver, "ann", 0, 80_000)?; // closes the first minute
    click(&mut driver, "ann", 0, 2_000)?; // too late for it
    assert_eq!(finals(&mut driver)?, vec![counted("eu", 0, 1)]);
    let dead: Vec<String> = driver
        .pending_outputs()
        .into_keys()
        .filter(|t| t.ends_with(".DLT"))
        .collect();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let late = driver.read_raw_output(&dead[0]);
    assert_eq!(late[0].dlt_class(), Some("late-record"));
    Ok(())
}

/// A `kill -9` anywhere — inside a batch, at each batch boundary, between a batch's commit and
/// its local apply — changes no committed count, store entry, pending timer or dead letter:
/// the users table, the re-keyed clicks and the open minutes all live in stores and topics.
#[test]
fn a_crash_anywhere_changes_no_committed_count() -> TestResult {
    for seed in [1] {
        let mut crash_test = TopologyTestDriver::with_crashes(seed, topology);
        for (user, region) in [("ann", "eu"), ("bob", "us"), ("cat", "eu")] {
            crash_test.pipe(TestRecord::new(USERS, Some(user), Some(region)));
        }
        for (user, partition, ms) in [
            ("ann", 0, 1_000),
            ("bob", 1, 2_000),
            ("cat", 0, 59_000),
            ("ann", 1, 61_000),
            ("dan", 0, 62_000),
            ("bob", 0, 70_000),
            ("ann", 0, 5_000), // later than its minute's grace: dead-lettered
            ("cat", 1, 135_000),
        ] {
            crash_test.pipe(
                TestRecord::new(CLICKS, Some(user), Some("/page"))
                    .partition(partition)
                    .timestamp(ms),
            );
        }
        let summary = crash_test.run()?;
        // The input closed minutes and dead-lettered the late click, in every run alike.
        assert!(summary.written.get(PER_REGION).copied().unwrap_or(0) >= 3);
        let dead: usize = summary
            .written
            .iter()
            .filter(|(t, _)| t.ends_with(".DLT"))
            .map(|(_, n)| n)
            .sum();
        assert_eq!(dead, 1, "{:?}", summary.written);
    }
    Ok(())
}
