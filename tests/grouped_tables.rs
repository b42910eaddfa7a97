//! A grouped table (`KTable::group_by` → `aggregate(init, adder, subtractor)`) on the real
//! broker, under `kill -9`: accounts (a compacted topic, account → `region:amount`) regrouped
//! by region, each region's (row count, total amount) kept current as accounts move between
//! regions, change amount, close (in no region) or are deleted (tombstones).
//!
//! Each update moves a value out of one group and into another through the repartition topic:
//! a subtraction applied twice (a replay after a crash) or lost would leave a region's count
//! or total wrong for good, so the final results say whether the pair went out exactly once
//! with the table update. In one run:
//! - **a backlog**: two thirds of the updates are produced before any instance starts;
//! - **kill -9** of the first instance mid-backlog (asserted: updates or repartition records
//!   left) and of its replacement once it has written results of its own;
//! - a third instance on a **wiped state directory** (the rows and aggregates restored from
//!   their changelogs) finishing the work.
//!
//! Each region's last result in the read_committed output must be the (count, total) of the
//! accounts' final rows, computed from the workload alone, and no DLT may hold a record.
//!
//! The instance is this test binary re-executed in child mode (`GROUPED_CHILD`).

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use eosflow::config::Config;
use eosflow::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::serdes::{I64Serde, JsonSerde, StringSerde};
use eosflow::topology::Topology;
use rdkafka::producer::BaseRecord;

const CHILD: &str = "GROUPED_CHILD";
const PARTITIONS: i32 = 4;
const ACCOUNTS: u64 = 120;
const UPDATES: u64 = 3000;
/// Updates produced before the first instance starts (the backlog).
const BACKLOG: u64 = 2000;
const STEP_MS: i64 = 10;
const REGIONS: [&str; 5] = ["eu", "us", "apac", "latam", "mena"];

/// Update `i`: its account and its new row (`None`: a tombstone; `"closed"`: a row in no
/// region).
fn update(i: u64) -> (String, Option<String>) {
    let account = format!("a-{:03}", (i * 7 + i / 3) % ACCOUNTS);
    let row = if i % 23 == 11 {
        None
    } else if i % 17 == 5 {
        Some("closed".to_string())
    } else {
        let region = REGIONS[((i * 3 + i / 5) % 5) as usize];
        Some(format!("{region}:{}", (i % 97) as i64 - 20))
    };
    (account, row)
}

/// A row's region and amount; `None` for a closed account.
fn parse(row: &str) -> Option<(String, i64)> {
    let (region, amount) = row.split_once(':')?;
    Some((region.to_string(), amount.parse().ok()?))
}

/// accounts → regrouped by region → (count, total) per region → `region` = `count:total`.
fn topology(app: &str) -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .table(
            format!("{app}.accounts"),
            Consumed::with(StringSerde, StringSerde),
        )
        .group_by(
            |_account, row: &String| parse(row),
            Grouped::with(StringSerde, I64Serde).named("by-region"),
        )
        .aggregate(
            || (0i64, 0i64),
            |_region, amount, (n, total)| (n + 1, total + amount),
            |_region, amount, (n, total)| (n - 1, total - amount),
            Materialized::with(StringSerde, JsonSerde::new()).named("region-totals"),
        )
        .to_stream()
        .map_values(|(n, total)| format!("{n}:{total}"))
        .to(
            format!("{app}.out"),
            Produced::with(StringSerde, StringSerde),
        );
    builder.build().expect("the DSL topology builds")
}

fn config(app: &str) -> Config {
    // Small transactions (10 records): the kill lands mid-backlog.
    let mut c = support::instance_config(app, 10);
    c.processor.repartition_purge_interval_ms = 0;
    c
}

/// Produces updates `range` to `topic` (a tombstone as a record without a value), in order.
fn produce_updates(topic: &str, base: i64, range: std::ops::Range<u64>) {
    let producer = support::test_producer();
    for i in range {
        let (key, row) = update(i);
        let ts = base + i as i64 * STEP_MS;
        let r = BaseRecord::<[u8], [u8]>::to(topic)
            .key(key.as_bytes())
            .timestamp(ts);
        let r = match &row {
            Some(row) => r.payload(row.as_bytes()),
            None => r,
        };
        support::send_waiting(&producer, r);
    }
    rdkafka::producer::Producer::flush(&producer, Duration::from_secs(30)).expect("flush");
}

/// Child mode: runs the topology until killed.
#[test]
fn child_instance() {
    let Ok(app) = std::env::var(CHILD) else {
        return;
    };
    support::run_until_killed(config(&app), topology(&app));
}

#[test]
fn a_grouped_table_killed_mid_backlog_subtracts_and_adds_each_update_once() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let started = Instant::now();
    let app = support::unique("grouped");
    let (accounts, output) = (format!("{app}.accounts"), format!("{app}.out"));
    let cfg = config(&app);
    let t = topology(&app);
    topics::apply_blocking(
        &support::clients(),
        &[
            TopicSpec::new(&accounts, PARTITIONS, "compact"),
            TopicSpec::new(&output, PARTITIONS, "delete"),
        ],
        Duration::from_secs(30),
    )
    .expect("creating the application's own topics");
    let repartition = format!("{app}-by-region-repartition");
    assert_eq!(t.repartition_topics_for(&app), vec![repartition.clone()]);
    let internal = t.internal_topics(&cfg, PARTITIONS);
    assert!(
        internal
            .iter()
            .any(|s| s.name == format!("{app}-by-region-rows-changelog")),
        "the select node's rows are changelogged: {:?}",
        internal.iter().map(|s| &s.name).collect::<Vec<_>>()
    );

    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    produce_updates(&accounts, base, 0..BACKLOG);

    let run = support::kill::KillTest::new(
        CHILD,
        &cfg,
        PARTITIONS,
        (&[&accounts], &[&repartition]),
        &output,
    );
    run.kill_first_mid_backlog(BACKLOG as i64, 300);

    // The second instance; the rest of the updates arrive while it runs. Killed once it has
    // written results of its own; the third instance starts on a wiped state directory.
    let second = run.start_second();
    produce_updates(&accounts, base, BACKLOG..UPDATES);
    run.kill_then_drain_on_wiped_state(second);

    // The expectation, from the workload alone: each account's last row, folded by region;
    // a region that ever had a row keeps a result (0:0 once it has none).
    let mut last: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut regions_seen = std::collections::BTreeSet::new();
    for i in 0..UPDATES {
        let (account, row) = update(i);
        if let Some((region, _)) = row.as_deref().and_then(parse) {
            regions_seen.insert(region);
        }
        last.insert(account, row);
    }
    let mut expected: BTreeMap<String, (i64, i64)> =
        regions_seen.into_iter().map(|r| (r, (0, 0))).collect();
    for (region, amount) in last.values().flatten().filter_map(|r| parse(r)) {
        let e = expected.entry(region).or_default();
        *e = (e.0 + 1, e.1 + amount);
    }
    assert!(
        last.values().any(Option::is_none),
        "the workload deletes accounts"
    );
    assert!(
        last.values().flatten().any(|r| r == "closed"),
        "the workload closes accounts"
    );

    let mut got: BTreeMap<String, String> = BTreeMap::new();
    for (region, v) in support::read_payloads(&output) {
        got.insert(region, String::from_utf8(v).expect("text results"));
    }
    let expected: BTreeMap<String, String> = expected
        .into_iter()
        .map(|(r, (n, total))| (r, format!("{n}:{total}")))
        .collect();
    assert_eq!(got, expected, "each region's last (count, total)");
    support::kill::assert_no_dead_letters(&internal);
    println!("took {:?}", started.elapsed());
}
