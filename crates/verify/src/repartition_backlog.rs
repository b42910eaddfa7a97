//! The `repartition-backlog` scenario (issue #31): clicks joined with a users table, re-keyed
//! by region through a repartition topic and counted in 1-minute windows (10 s grace, emitted on
//! close) — `eosflow run --topology repartition-windows` — with the whole input (ten minutes of
//! event time on several partitions) produced **before** the instances start, two instances
//! `kill -9`ed in turn while they work through it.
//!
//! A backlog is where a shared stream time loses data: each partition's raw clicks are read far
//! ahead of the re-keyed copies of the others, and the partitions move at different paces
//! across kills. Proven from outside: the committed window results are exactly those computed
//! here from the workload alone (every window once, every click counted), and no record is
//! dead-lettered — on the input or the repartition topic — as late or otherwise.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::group::{self, GroupSpec, Outgoing, Run};
use super::scenario::{Scenario, ScenarioEnv, ScenarioReport};
use super::LagProbe;
use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::kafka::topics::TopicSpec;
use eosflow::kafka::KafkaClients;
use eosflow::serdes::{I64Serde, StringSerde};
use eosflow::topology::windows::{
    EmitStrategy, TimeWindows, WindowStoreHandle, WindowedAggregate, WindowedSerde,
};
use eosflow::topology::{TableHandle, Topology, TopologyError};

/// Window size (ms).
pub const WINDOW_MS: i64 = 60_000;
/// Grace period (ms).
pub const GRACE_MS: i64 = 10_000;
/// Event time the workload spans (ms).
pub const SPAN_MS: i64 = 600_000;
const REGIONS: [&str; 5] = ["eu", "us", "apac", "latam", "africa"];

/// The users table of an input: `<input>.users`.
pub fn users_topic(input: &str) -> String {
    format!("{input}.users")
}

/// The name of the repartition (its topic is `<app>-by-region-repartition`).
pub const REPARTITION: &str = "by-region";

/// The topology the instances run: each click of `input` (key: user, value: click id) joined
/// with the users table ([`users_topic`], value: region), re-keyed by region, counted per
/// region in 1-minute windows with 10 s grace, one result per window when it closes, to
/// `output` (`WindowedSerde<String>` keys, `I64Serde` counts).
///
/// ```
/// let t = eosflow_verify::repartition_backlog::topology("clicks", "per-region")?;
/// assert_eq!(t.sub_topologies().len(), 2);
/// # Ok::<(), eosflow::topology::TopologyError>(())
/// ```
pub fn topology(input: &str, output: &str) -> Result<Topology, TopologyError> {
    let users = TableHandle::new("users", users_topic(input), StringSerde, StringSerde);
    let windows = TimeWindows::of_size_with_grace(
        Duration::from_millis(WINDOW_MS as u64),
        Duration::from_millis(GRACE_MS as u64),
    );
    let store = WindowStoreHandle::new("per-region", StringSerde, I64Serde);
    let count = WindowedAggregate::time(store, windows, || 0, |_, _: &String, n: i64| n + 1)
        .emit(EmitStrategy::OnWindowClose);
    Topology::builder()
        .add_source("clicks", &[input], StringSerde, StringSerde)
        .add_table(&users)
        .add_stream_table_join(
            "with-region",
            &users,
            |_: &String, click: &String, region: &String| Some(format!("{region}|{click}")),
            &["clicks"],
        )
        .add_repartition(
            REPARTITION,
            |_: Option<&String>, v: &String| v.split_once('|').map(|(r, _)| r.to_string()),
            StringSerde,
            StringSerde,
            &["with-region"],
        )
        .add_windowed_aggregate("count", count, &[REPARTITION])
        .add_sink(
            "out",
            output,
            WindowedSerde::new(StringSerde),
            I64Serde,
            &["count"],
        )
        .build()
}

/// A users-table row: user, region, partition.
pub type Row = (String, String, i32);
/// A click: user, id, partition, event time.
pub type Click = (String, String, i32, i64);

/// The workload: `users` users (user `k` in region `k % 5`, on partition `k % partitions`),
/// `clicks` clicks spread evenly over [`SPAN_MS`] from `base` by users picked with a fixed
/// LCG, then one later click of every user (five windows past the last one) that closes every
/// window. Returns the table rows (user, region, partition) and the clicks (user, id,
/// partition, time).
pub fn workload(base: i64, partitions: i32, users: usize, clicks: i64) -> (Vec<Row>, Vec<Click>) {
    let mut seed: u64 = 0x5eed_0031;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n.max(1)
    };
    let user = |k: usize| format!("user-{k:03}");
    let partition = |k: usize| (k as i64 % i64::from(partitions.max(1))) as i32;
    let rows = (0..users)
        .map(|k| {
            (
                user(k),
                REGIONS[k % REGIONS.len()].to_string(),
                partition(k),
            )
        })
        .collect();
    let mut out: Vec<Click> = (0..clicks)
        .map(|i| {
            let k = next(users as u64) as usize;
            (
                user(k),
                format!("c{i}"),
                partition(k),
                base + i * SPAN_MS / clicks.max(1),
            )
        })
        .collect();
    for k in 0..users {
        out.push((
            user(k),
            format!("flush{k}"),
            partition(k),
            base + SPAN_MS + 5 * WINDOW_MS,
        ));
    }
    (rows, out)
}

/// The expected results: clicks per (region, window start), the flush clicks aside (their
/// windows never close).
pub fn expected(rows: &[Row], clicks: &[Click]) -> BTreeMap<(String, i64), i64> {
    let region: BTreeMap<&str, &str> = rows
        .iter()
        .map(|(u, r, _)| (u.as_str(), r.as_str()))
        .collect();
    let mut want = BTreeMap::new();
    for (u, id, _, ts) in clicks {
        if id.starts_with("flush") {
            continue;
        }
        let Some(r) = region.get(u.as_str()) else {
            continue;
        };
        *want
            .entry((r.to_string(), ts - ts.rem_euclid(WINDOW_MS)))
            .or_default() += 1;
    }
    want
}

/// Shape of a run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Clicks (before the flush clicks).
    pub clicks: i64,
    /// Users.
    pub users: usize,
    /// Partitions of every topic.
    pub partitions: i32,
    /// Processor processes.
    pub instances: usize,
    /// kill -9s, one instance at a time in turn, each restarted at once.
    pub kills: u32,
}

impl Options {
    /// The `make test` version: 12 000 clicks, 4 partitions, 2 instances, 3 kills.
    pub fn short() -> Self {
        Self {
            clicks: 12_000,
            users: 60,
            partitions: 4,
            instances: 2,
            kills: 3,
        }
    }

    /// The long version: 120 000 clicks, 4 partitions, 2 instances, 12 kills.
    pub fn long() -> Self {
        Self {
            clicks: 120_000,
            users: 200,
            partitions: 4,
            instances: 2,
            kills: 12,
        }
    }
}

/// Runs the scenario.
pub fn run(config: &Config, env: &ScenarioEnv, opts: &Options) -> Result<ScenarioReport, String> {
    let started = Instant::now();
    let clients = KafkaClients::new(config.kafka.clone());
    let run = Run::new("repartition-backlog");
    let (app_id, input, output) = (run.app_id.as_str(), run.input.as_str(), run.output.as_str());
    let users = users_topic(input);
    let repartition = format!("{app_id}-{REPARTITION}-repartition");
    let topology = topology(input, output).map_err(|e| e.to_string())?;
    run.create_topics(
        config,
        &clients,
        &topology,
        opts.partitions,
        vec![TopicSpec::new(&users, opts.partitions, "compact")],
    )?;
    let base = {
        let t = eosflow::internals::clock::now_ms() - 3 * 3_600_000;
        t - t.rem_euclid(WINDOW_MS)
    };
    let (rows, clicks) = workload(base, opts.partitions, opts.users, opts.clicks);
    let want = expected(&rows, &clicks);
    // The whole backlog before any instance starts: the table (older than every click), then
    // the clicks.
    group::produce(
        &clients,
        rows.iter().map(|(u, r, p)| Outgoing {
            topic: &users,
            partition: *p,
            key: u,
            value: Some(r),
            ts: base - 1_000,
        }),
    )?;
    group::produce(
        &clients,
        clicks.iter().map(|(u, id, p, ts)| Outgoing {
            topic: input,
            partition: *p,
            key: u,
            value: Some(id),
            ts: *ts,
        }),
    )?;
    let total = clicks.len() as i64;

    let spec = GroupSpec {
        app_id,
        topology: "repartition-windows",
        input,
        output,
        instances: opts.instances,
        max_batch: 50,
    };
    let mut instances = group::spawn(config, env, &spec, &env.work_dir.join(app_id))?;
    // Both the clicks and their re-keyed copies must be worked through.
    let mut probe = LagProbe::new(
        &clients,
        app_id,
        &[(input, opts.partitions), (&repartition, opts.partitions)],
    );
    let lag = || probe.lag();
    // Kills are due on observed progress through both: the clicks and their re-keyed copies.
    let killed =
        group::kill_until_drained(&mut instances, env, output, (opts.kills, 2 * total), lag)?;
    let drained_s = started.elapsed().as_secs_f64();
    let pending = group::await_results(want.len(), || {
        super::windows::results(&clients, output).map(|r| r.len())
    })?;
    for inst in &mut instances {
        inst.kill9();
    }
    let got = super::windows::results(&clients, output)?;
    let mut lost = 0u64;
    let mut duplicated = 0u64;
    let mut wrong = 0u64;
    for ((region, start), n) in &want {
        match got.get(&(region.clone(), *start, start + WINDOW_MS)) {
            None => lost += 1,
            Some(results) => {
                duplicated += results.len() as u64 - 1;
                if results.iter().any(|(m, _)| m != n) {
                    wrong += 1;
                }
            }
        }
    }
    wrong += got
        .keys()
        .filter(|(r, s, _)| !want.contains_key(&(r.clone(), *s)))
        .count() as u64;
    let mut dead = 0u64;
    for dlt in [
        eosflow::internals::retry::dlt::topic_for(input),
        eosflow::internals::retry::dlt::topic_for(&repartition),
    ] {
        read_all(&clients, &dlt, Duration::from_secs(120), |_| {
            dead += 1;
            Ok(())
        })
        .map_err(|e| format!("reading {dlt}: {e}"))?;
    }
    // The lag adds the clicks' and the repartition topic's (re-keyed copies and watermark
    // records): any amount between none and "no offsets committed yet" is mid-stream.
    let mid_stream = killed.mid_stream(i64::MAX);
    Ok(ScenarioReport {
        scenario: Scenario::RepartitionBacklog,
        records: total as u64,
        lost,
        duplicated,
        dlt: dead,
        stalls: killed.stalls,
        // A crash test whose kills all landed after the work proves nothing.
        checks_ok: wrong == 0 && dead == 0 && (opts.kills == 0 || mid_stream > 0),
        extra: vec![
            ("pending_at_drain".into(), pending.to_string()),
            ("windows".into(), want.len().to_string()),
            ("wrong_windows".into(), wrong.to_string()),
            ("late".into(), dead.to_string()),
            ("kills".into(), killed.kills.to_string()),
            ("kills_mid_stream".into(), mid_stream.to_string()),
            ("elapsed_s".into(), format!("{drained_s:.1}")),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expectation_counts_every_click_once_and_no_flush() {
        let (rows, clicks) = workload(
            1_700_000_000_000 - 1_700_000_000_000 % WINDOW_MS,
            4,
            60,
            12_000,
        );
        let want = expected(&rows, &clicks);
        assert_eq!(want.values().sum::<i64>(), 12_000);
        assert_eq!(want.len(), REGIONS.len() * (SPAN_MS / WINDOW_MS) as usize);
        assert!(rows
            .iter()
            .all(|(u, _, p)| clicks.iter().filter(|c| &c.0 == u).all(|c| c.2 == *p)));
    }
}
