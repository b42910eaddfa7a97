//! A streams-DSL application on the real broker, under `kill -9`: clicks joined with their
//! user's region (a table read at a different speed), re-keyed by region and counted in
//! 10-second windows — the join → re-key → window shape of issue #34 (and the app that lost 20
//! of 30 clicks to `late-record` while a task was one partition number).
//!
//! What a user of the DSL hits first, in one run:
//! - **a backlog**: the users and the first two thirds of the clicks are produced before any
//!   instance starts;
//! - **two inputs at different speeds**: the users table is 60 rows, the clicks 3 000; region
//!   changes and new users arrive mid-stream, at timestamps inside the clicks' span, so which
//!   region a click counts for depends on the join meeting the row valid at its timestamp;
//! - **topics created for you**: only the inputs and the output exist beforehand; the instance
//!   creates the repartition topic, the window store's changelog, retry levels and DLTs;
//! - **kill -9** of the first instance mid-stream and of its replacement once it has counted,
//!   and a third instance on a **wiped state directory** (restored from the changelogs).
//!
//! The read_committed output must hold, per (region, window), exactly the counts 1, 2, …, n in
//! order, n computed from the workload alone (each click counts for the region its user had at
//! the click's timestamp, `unknown` for a user with no row yet), and no DLT may hold a record.
//!
//! The instance is this test binary re-executed in child mode (`DSL_CHILD`).

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use eosflow::config::Config;
use eosflow::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::serdes::{I64Serde, StringSerde};
use eosflow::topology::windows::TimeWindows;
use eosflow::topology::Topology;

const CHILD: &str = "DSL_CHILD";
const PARTITIONS: i32 = 4;
const CLICKS: u64 = 3000;
/// Clicks produced before the first instance starts (the backlog).
const BACKLOG: u64 = 2000;
/// Users with a row from the start; users `KNOWN..USERS` get theirs mid-stream.
const KNOWN: u64 = 40;
const USERS: u64 = 50;
/// Each click is 20 ms after the one before: 3 000 clicks span 60 s, six windows.
const STEP_MS: i64 = 20;
const WINDOW_MS: i64 = 10_000;
/// Users that move region, and when (ms after the first click): inside the backlog's span.
const MOVE_AT_MS: i64 = 15_000;
/// When the late users' rows arrive (after the backlog's span, before the rest of the clicks'
/// timestamps end).
const JOIN_AT_MS: i64 = 45_000;

fn region(n: u64) -> String {
    ["eu", "us", "apac", "latam", "mena"][(n % 5) as usize].to_string()
}

fn user(n: u64) -> String {
    format!("u-{n:02}")
}

/// Click `i`'s user.
fn user_of(i: u64) -> u64 {
    (i * 7 + i / 3) % USERS
}

/// The users' rows as (user, region, ms after the first click), in production order: every
/// known user at -1 s, every fifth one moving at [`MOVE_AT_MS`], the late ones at
/// [`JOIN_AT_MS`].
fn user_rows() -> Vec<(u64, String, i64)> {
    let mut rows: Vec<_> = (0..KNOWN).map(|u| (u, region(u), -1000)).collect();
    rows.extend(
        (0..KNOWN)
            .step_by(5)
            .map(|u| (u, region(u + 1), MOVE_AT_MS)),
    );
    rows.extend((KNOWN..USERS).map(|u| (u, region(u + 2), JOIN_AT_MS)));
    rows
}

/// clicks ⋈ users → re-keyed by region → counted per 10 s window → `region@start` = count.
fn topology(app: &str) -> Topology {
    let builder = StreamsBuilder::new();
    let users = builder.table(
        format!("{app}.users"),
        Consumed::with(StringSerde, StringSerde),
    );
    let windows = TimeWindows::of_size_with_grace(
        Duration::from_millis(WINDOW_MS as u64),
        Duration::from_secs(120),
    );
    builder
        .stream(
            format!("{app}.clicks"),
            Consumed::with(StringSerde, StringSerde),
        )
        .left_join_table(&users, |_page, region| {
            region.cloned().unwrap_or_else(|| "unknown".to_string())
        })
        .group_by(
            |_, region| region.clone(),
            Grouped::with(StringSerde, StringSerde).named("by-region"),
        )
        .windowed_by(windows)
        .count(Materialized::with(StringSerde, I64Serde).named("clicks"))
        .to_stream()
        .map(|w, n| {
            let key = w.map_or_else(String::new, |w| format!("{}@{}", w.key, w.window.start));
            (key, *n)
        })
        .to(format!("{app}.out"), Produced::with(StringSerde, I64Serde));
    builder.build().expect("the DSL topology builds")
}

fn config(app: &str) -> Config {
    // Small transactions (10 records): the kill lands mid-backlog. With 50 a clean-clone CI run
    // saw the whole backlog of 2 000 clicks done before the first poll of the group's lag.
    let mut c = support::instance_config(app, 10);
    // The test reads every repartition record back at the end: none purged.
    c.processor.repartition_purge_interval_ms = 0;
    c
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
fn a_dsl_join_rekey_window_app_killed_mid_backlog_counts_every_click_once_in_its_region() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let started = Instant::now();
    let app = support::unique("dsl");
    let (clicks, users, output) = (
        format!("{app}.clicks"),
        format!("{app}.users"),
        format!("{app}.out"),
    );
    let cfg = config(&app);
    let t = topology(&app);
    // Only what the application owns; the instance creates the rest at start.
    topics::apply_blocking(
        &support::clients(),
        &[
            TopicSpec::new(&clicks, PARTITIONS, "delete"),
            TopicSpec::new(&users, PARTITIONS, "compact"),
            TopicSpec::new(&output, PARTITIONS, "delete"),
        ],
        Duration::from_secs(30),
    )
    .expect("creating the application's own topics");
    let internal = t.internal_topics(&cfg, PARTITIONS);
    let repartition = format!("{app}-by-region-repartition");
    assert!(
        internal.iter().any(|s| s.name == repartition),
        "the repartition topic is an internal topic: {:?}",
        internal.iter().map(|s| &s.name).collect::<Vec<_>>()
    );

    // Recent timestamps: records older than the topics' retention would be deleted.
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
        / WINDOW_MS
        * WINDOW_MS;
    let rows = user_rows();
    let row = |&(u, ref r, at): &(u64, String, i64)| (None, user(u), r.clone(), base + at);
    let click = |i: u64| {
        (
            None,
            user(user_of(i)),
            format!("page-{i}"),
            base + i as i64 * STEP_MS,
        )
    };
    // The backlog: the users' rows up to the moves, and two thirds of the clicks.
    let early: Vec<support::Timed> = rows.iter().filter(|r| r.2 < JOIN_AT_MS).map(row).collect();
    support::produce_timed(&users, &early);
    support::produce_timed(&clicks, &(0..BACKLOG).map(click).collect::<Vec<_>>());

    let run = support::kill::KillTest::new(
        CHILD,
        &cfg,
        PARTITIONS,
        (&[&clicks], &[&repartition]),
        &output,
    );
    run.kill_first_mid_backlog(BACKLOG as i64, 300);
    let internal_created: Vec<String> = {
        let clients = support::clients();
        internal
            .iter()
            .filter(|s| {
                eosflow::internals::kafka::reader::watermarks(
                    &clients,
                    &s.name,
                    0,
                    Duration::from_secs(10),
                )
                .is_err()
            })
            .map(|s| s.name.clone())
            .collect()
    };
    assert!(
        internal_created.is_empty(),
        "the instance created every internal topic at start; missing: {internal_created:?}"
    );

    // The second instance; the late users' rows, then the rest of the clicks, arrive while it
    // runs.
    let second = run.start_second();
    let late: Vec<support::Timed> = rows.iter().filter(|r| r.2 >= JOIN_AT_MS).map(row).collect();
    support::produce_timed(&users, &late);
    support::produce_timed(&clicks, &(BACKLOG..CLICKS).map(click).collect::<Vec<_>>());
    // Killed once it has written counts of its own; the third instance starts on a wiped
    // state directory: its stores come back from their changelogs.
    run.kill_then_drain_on_wiped_state(second);

    // The expectation, from the workload alone: each click counts for the region its user's
    // latest row at or before the click's timestamp names (a row before a click of the same
    // timestamp), `unknown` without one.
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..CLICKS {
        let at = i as i64 * STEP_MS;
        let region = rows
            .iter()
            .filter(|(u, _, t)| *u == user_of(i) && *t <= at)
            .max_by_key(|(_, _, t)| *t)
            .map_or_else(|| "unknown".to_string(), |(_, r, _)| r.clone());
        let start = base + at / WINDOW_MS * WINDOW_MS;
        *expected.entry(format!("{region}@{start}")).or_default() += 1;
    }
    assert!(expected.keys().any(|k| k.starts_with("unknown@")));
    let mut got: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (key, v) in support::read_payloads(&output) {
        let bytes: [u8; 8] = v.try_into().expect("an i64 count");
        got.entry(key).or_default().push(i64::from_be_bytes(bytes));
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "the (region, window) pairs counted"
    );
    for (key, n) in &expected {
        let want: Vec<i64> = (1..=*n).collect();
        assert_eq!(
            &got[key], &want,
            "the counts of {key}, each once and in order"
        );
    }
    support::kill::assert_no_dead_letters(&internal);
    println!("took {:?}", started.elapsed());
}
