//! Tasks per sub-topology against the real broker (issue #31): a re-key or a lagging second
//! input must never make good records late.
//!
//! 1. Clicks joined with a users table, re-keyed by region through a repartition topic and
//!    counted in 1-minute windows (10 s grace, emitted on close), with ten minutes of event
//!    time produced on 4 partitions **before** the instance starts (a backlog: what a restart
//!    or a burst looks like). Each partition's raw clicks reach their end long before their
//!    re-keyed copies are counted, and the partitions are consumed at different paces; the
//!    instance is `kill -9`ed mid-backlog and its replacement starts on a wiped state dir. The
//!    read_committed window results must equal those computed from the workload alone, and no
//!    click may be dead-lettered as late — on the input or the repartition topic. (Before
//!    tasks per sub-topology, 20 of 30 clicks of such a burst went to the repartition topic's
//!    DLT as `late-record`.) The repartition topic is purged as its records are committed.
//! 2. A stream-stream join whose right side is produced five minutes (event time) behind its
//!    left side, both as a backlog: the joined results equal the join computed from the
//!    workload, nothing late.
//!
//! The instances are this test binary re-executed in child mode (`SUBTOPOLOGIES_CHILD`,
//! `<test>:<app>`).

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use eosflow::config::Config;
use eosflow::internals::kafka::reader::{read_all, watermarks};
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::serdes::StringSerde;
use eosflow::topology::windows::WindowStoreHandle;
use eosflow::topology::{JoinWindows, StreamJoin, Topology};
use eosflow_verify::group_lag;
use rdkafka::Message;

const CHILD: &str = "SUBTOPOLOGIES_CHILD";
const PARTITIONS: i32 = 4;
const USERS: usize = 40;
const REGIONS: [&str; 5] = ["eu", "us", "apac", "latam", "africa"];
const CLICKS: i64 = 3_000;
/// Ten minutes of event time.
const SPAN_MS: i64 = 600_000;
const WINDOW_MS: i64 = eosflow_verify::repartition_backlog::WINDOW_MS;

fn user(k: usize) -> String {
    format!("user-{k:02}")
}

fn region(k: usize) -> &'static str {
    REGIONS[k % REGIONS.len()]
}

/// clicks ⋈ users → re-key by region → 1-minute windows (10 s grace) on close: the
/// `repartition-backlog` scenario's topology (`<app>.clicks` joined with `<app>.clicks.users`).
fn region_counts(app: &str) -> Topology {
    eosflow_verify::repartition_backlog::topology(&format!("{app}.clicks"), &format!("{app}.out"))
        .expect("valid topology")
}

const BEFORE_MS: i64 = 500;
const AFTER_MS: i64 = 1_000;
const JOIN_GRACE_MS: i64 = 10_000;
const JOIN_KEYS: u64 = 24;
/// The right side runs this far (event time) behind the left one.
const LAG_MS: i64 = 300_000;
const STEP_MS: i64 = 400;

/// left ⋈ right within [-500 ms, +1000 ms], 10 s grace, values `l|r`.
fn lagging_join(app: &str) -> Topology {
    let windows = JoinWindows::of_time_difference_and_grace(
        Duration::ZERO,
        Duration::from_millis(JOIN_GRACE_MS as u64),
    )
    .before(Duration::from_millis(BEFORE_MS as u64))
    .after(Duration::from_millis(AFTER_MS as u64));
    let l = WindowStoreHandle::new("join-left-buffer", StringSerde, StringSerde);
    let r = WindowStoreHandle::new("join-right-buffer", StringSerde, StringSerde);
    let join = StreamJoin::inner(windows, l, r, |_: &String, l: &String, r: &String| {
        Some(format!("{l}|{r}"))
    });
    let (lt, rt) = (format!("{app}.left"), format!("{app}.right"));
    Topology::builder()
        .add_source("left", &[lt.as_str()], StringSerde, StringSerde)
        .add_source("right", &[rt.as_str()], StringSerde, StringSerde)
        .add_stream_stream_join("join", join, &["left"], &["right"])
        .add_sink(
            "out",
            format!("{app}.out"),
            StringSerde,
            StringSerde,
            &["join"],
        )
        .build()
        .expect("valid topology")
}

fn config(app: &str) -> Config {
    // Small transactions (10 records): the kill lands mid-backlog. With 50 a loaded CI machine
    // once saw the whole backlog of 3 040 clicks done within one poll of the group's lag.
    let mut c = support::instance_config(app, 10);
    // Purge consumed repartition records often enough to see it within the test.
    c.processor.repartition_purge_interval_ms = 500;
    c
}

fn topology_of(test: &str, app: &str) -> Topology {
    match test {
        "join" => lagging_join(app),
        _ => region_counts(app),
    }
}

/// Child mode: `<test>:<app>` runs that test's topology until killed.
#[test]
fn child_instance() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let (test, app) = spec.split_once(':').expect("<test>:<app>");
    support::run_until_killed(config(app), topology_of(test, app));
}

fn create(app: &str, t: &Topology, own: &[(String, &str)]) {
    let mut specs: Vec<TopicSpec> = own
        .iter()
        .map(|(n, policy)| TopicSpec::new(n.clone(), PARTITIONS, policy))
        .collect();
    specs.extend(t.internal_topics(&config(app), PARTITIONS));
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");
}

fn lag(app: &str, topic: &str) -> i64 {
    group_lag(&support::clients(), app, topic, PARTITIONS).unwrap_or(i64::MAX)
}

/// Every record of `topic` (read_committed): its value text.
fn values(topic: &str) -> Vec<String> {
    let mut out = Vec::new();
    read_all(&support::clients(), topic, Duration::from_secs(60), |m| {
        out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string());
        Ok(())
    })
    .expect("read");
    out
}

/// A deterministic generator (an LCG): the workload is the same every run.
fn lcg(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut s = seed;
    move |n| {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (s >> 33) % n
    }
}

#[test]
fn a_rekeyed_windowed_count_over_a_backlog_loses_no_click_to_lateness_across_kill_9_and_a_wiped_state_dir(
) {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let started = Instant::now();
    let app = support::unique("subtopo");
    let t = region_counts(&app);
    assert_eq!(t.sub_topologies().len(), 2, "{:?}", t.sub_topologies());
    let (clicks, users, out) = (
        format!("{app}.clicks"),
        eosflow_verify::repartition_backlog::users_topic(&format!("{app}.clicks")),
        format!("{app}.out"),
    );
    let repartition = format!("{app}-by-region-repartition");
    create(
        &app,
        &t,
        &[
            (clicks.clone(), "delete"),
            (users.clone(), "compact"),
            (out.clone(), "delete"),
        ],
    );
    // Three hours ago: old enough to be a backlog, young enough for the topics' retention.
    let base = {
        let now = eosflow::internals::clock::now_ms() - 3 * 3_600_000;
        now - now.rem_euclid(WINDOW_MS)
    };
    let rows: Vec<support::Timed> = (0..USERS)
        .map(|k| (None, user(k), region(k).to_string(), base - 1_000))
        .collect();
    support::produce_timed(&users, &rows);
    let mut next = lcg(0x005e_ed31);
    let mut workload: Vec<(usize, i64)> = Vec::new();
    for i in 0..CLICKS {
        let k = next(USERS as u64) as usize;
        workload.push((k, base + i * SPAN_MS / CLICKS));
    }
    let mut timed: Vec<support::Timed> = workload
        .iter()
        .enumerate()
        .map(|(i, (k, ts))| (None, user(*k), format!("click-{i}"), *ts))
        .collect();
    // A later click of every user: every partition's stream time passes the last window's
    // close, on the input and (so) on the repartition topic.
    for k in 0..USERS {
        timed.push((
            None,
            user(k),
            format!("flush-{k}"),
            base + SPAN_MS + 5 * WINDOW_MS,
        ));
    }
    support::produce_timed(&clicks, &timed);
    let total = timed.len() as i64;

    // The expectation, from the workload alone: clicks per (region, window).
    let mut want: BTreeMap<(String, i64, i64), i64> = BTreeMap::new();
    for (k, ts) in &workload {
        let start = ts - ts.rem_euclid(WINDOW_MS);
        *want
            .entry((region(*k).to_string(), start, start + WINDOW_MS))
            .or_default() += 1;
    }

    let spec = format!("windows:{app}");
    let mut first = support::spawn_child(CHILD, &spec);
    support::wait_for("the first clicks consumed", Duration::from_secs(90), || {
        (lag(&app, &clicks) < total).then_some(())
    });
    first.kill().expect("kill -9");
    first.wait().expect("reaped");
    let (left, rekeyed_left) = (lag(&app, &clicks), lag(&app, &repartition));
    println!("killed with {left} of {total} clicks and {rekeyed_left} repartition records left");
    assert!(
        left + rekeyed_left > 0,
        "the instance must die mid-backlog, not after the work"
    );
    let _ = std::fs::remove_dir_all(&config(&app).state.dir);
    let mut second = support::spawn_child(CHILD, &spec);
    let clients = support::clients();
    let got = support::wait_for("every window's result", Duration::from_secs(180), || {
        let got = eosflow_verify::windows::results(&clients, &out).ok()?;
        (got.len() >= want.len()).then_some(got)
    });
    // Windows closed: what a purge left of the repartition topic lies past offset 0.
    let purged = support::wait_for(
        "the repartition topic purged",
        Duration::from_secs(60),
        || {
            let low: i64 = (0..PARTITIONS)
                .map(|p| {
                    watermarks(&clients, &repartition, p, Duration::from_secs(10))
                        .map_or(0, |(low, _)| low)
                })
                .sum();
            (low > 0).then_some(low)
        },
    );
    second.kill().expect("kill -9");
    second.wait().expect("reaped");
    let counts: BTreeMap<(String, i64, i64), Vec<i64>> = got
        .into_iter()
        .map(|(k, v)| (k, v.into_iter().map(|(n, _)| n).collect()))
        .collect();
    let expected: BTreeMap<(String, i64, i64), Vec<i64>> =
        want.iter().map(|(k, n)| (k.clone(), vec![*n])).collect();
    assert_eq!(
        counts, expected,
        "every window once, with every click counted"
    );
    for dlt in [format!("{clicks}.DLT"), format!("{repartition}.DLT")] {
        let dead = values(&dlt);
        assert!(
            dead.is_empty(),
            "{} dead letters in {dlt}: {dead:?}",
            dead.len()
        );
    }
    println!(
        "{} windows exact, 0 late; {purged} repartition records purged; took {:?}",
        want.len(),
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&config(&app).state.dir);
}

#[test]
fn a_stream_stream_join_whose_right_side_lags_five_minutes_joins_every_pair_of_a_backlog() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let started = Instant::now();
    let app = support::unique("lagjoin");
    let t = lagging_join(&app);
    let (left, right, out) = (
        format!("{app}.left"),
        format!("{app}.right"),
        format!("{app}.out"),
    );
    create(
        &app,
        &t,
        &[
            (left.clone(), "delete"),
            (right.clone(), "delete"),
            (out.clone(), "delete"),
        ],
    );
    let base = eosflow::internals::clock::now_ms() - 3 * 3_600_000;
    // Left: ten minutes from `base`; right: ten minutes from five minutes earlier, 150 ms
    // after a step. Both written in full before the instance starts.
    let mut next = lcg(0x106a);
    let n = SPAN_MS / STEP_MS;
    let lefts: Vec<(String, String, i64)> = (0..n)
        .map(|i| {
            let key = format!("k{:02}", next(JOIN_KEYS));
            (key, format!("l{i}"), base + i * STEP_MS)
        })
        .collect();
    let rights: Vec<(String, String, i64)> = (0..n)
        .map(|i| {
            let key = format!("k{:02}", next(JOIN_KEYS));
            (key, format!("r{i}"), base - LAG_MS + i * STEP_MS + 150)
        })
        .collect();
    let as_timed = |v: &[(String, String, i64)]| -> Vec<support::Timed> {
        v.iter()
            .map(|(k, val, ts)| (None, k.clone(), val.clone(), *ts))
            .collect()
    };
    support::produce_timed(&left, &as_timed(&lefts));
    support::produce_timed(&right, &as_timed(&rights));

    // The expectation: every (left, right) pair of a key with right - left in [-500, 1000].
    let mut want: BTreeMap<String, usize> = BTreeMap::new();
    for (lk, lv, lt) in &lefts {
        for (rk, rv, rt) in &rights {
            if lk == rk && (-BEFORE_MS..=AFTER_MS).contains(&(rt - lt)) {
                *want.entry(format!("{lv}|{rv}")).or_default() += 1;
            }
        }
    }
    assert!(want.len() > 100, "the workload has pairs: {}", want.len());

    let mut instance = support::spawn_child(CHILD, &format!("join:{app}"));
    support::wait_for("both sides consumed", Duration::from_secs(120), || {
        (lag(&app, &left) == 0 && lag(&app, &right) == 0).then_some(())
    });
    instance.kill().expect("kill -9");
    instance.wait().expect("reaped");
    let mut got: BTreeMap<String, usize> = BTreeMap::new();
    for v in values(&out) {
        *got.entry(v).or_default() += 1;
    }
    let missing: Vec<&String> = want.keys().filter(|k| !got.contains_key(*k)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} pairs missing, e.g. {:?}",
        missing.len(),
        want.len(),
        missing.iter().take(5).collect::<Vec<_>>()
    );
    assert_eq!(got, want, "every pair once, nothing else");
    for dlt in [format!("{left}.DLT"), format!("{right}.DLT")] {
        let dead = values(&dlt);
        assert!(dead.is_empty(), "{} late in {dlt}", dead.len());
    }
    println!(
        "{} pairs exact, 0 late; took {:?}",
        want.len(),
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&config(&app).state.dir);
}
