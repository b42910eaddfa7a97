//! The `windows` scenario: a tumbling count per key, emitted once per window when it closes
//! (`eosflow run --topology windowed-count`), over a workload with known event times — about
//! 2% out of order within the grace period and 1% too late for it — on several partitions,
//! two instances `kill -9`ed again and again mid-stream.
//!
//! Proven from outside: the committed results are exactly the windows this module computes
//! from the workload alone (every window once, the right count, the window's last millisecond
//! as timestamp), and every late record is in the input's DLT once, class `late-record`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::message::Headers;
use rdkafka::Message;

use super::group::{self, GroupSpec, Outgoing, Run};
use super::scenario::{Scenario, ScenarioEnv, ScenarioReport};
use super::LagProbe;
use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::kafka::KafkaClients;
use eosflow::serdes::{I64Serde, Serde, StringSerde};
use eosflow::topology::windows::{
    EmitStrategy, TimeWindows, WindowStoreHandle, WindowedAggregate, WindowedSerde,
};
use eosflow::topology::{Topology, TopologyError};

/// Window size (ms).
pub const SIZE_MS: i64 = 1_000;
/// Grace period (ms).
pub const GRACE_MS: i64 = 300;

/// The topology the instances run: `input` counted per key in tumbling windows of
/// [`SIZE_MS`] with [`GRACE_MS`] grace, one final result per window to `output`
/// (`WindowedSerde<String>` keys, `I64Serde` counts).
pub fn topology(input: &str, output: &str) -> Result<Topology, TopologyError> {
    let windows = TimeWindows::of_size_with_grace(
        Duration::from_millis(SIZE_MS as u64),
        Duration::from_millis(GRACE_MS as u64),
    );
    let store = WindowStoreHandle::new("windows", StringSerde, I64Serde);
    let count = WindowedAggregate::time(store, windows, || 0, |_, _: &String, n: i64| n + 1)
        .emit(EmitStrategy::OnWindowClose);
    Topology::builder()
        .add_source("in", &[input], StringSerde, StringSerde)
        .add_windowed_aggregate("count", count, &["in"])
        .add_sink(
            "out",
            output,
            WindowedSerde::new(StringSerde),
            I64Serde,
            &["count"],
        )
        .build()
}

/// One input record: partition, key, value (a unique id), event time.
#[derive(Debug, Clone)]
pub struct Input {
    /// Its partition.
    pub partition: i32,
    /// Its key.
    pub key: String,
    /// Its value: a unique id.
    pub id: String,
    /// Its event time (the Kafka timestamp).
    pub ts: i64,
}

/// The workload: per partition `per_partition` records over `keys` keys, event times rising
/// ~37 ms a record from `base`, 2% of them out of order (up to the grace period back) and 1%
/// late (more than a window plus grace back), then one flush record a minute later that closes
/// every window. Deterministic (a fixed LCG).
pub fn workload(base: i64, partitions: i32, per_partition: usize, keys: u64) -> Vec<Input> {
    let mut seed: u64 = 0x5eed;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let mut out = Vec::new();
    for p in 0..partitions {
        let mut t = base + i64::from(p) * 7;
        let mut max = i64::MIN;
        for i in 0..per_partition {
            t += 37;
            let roll = next(100);
            let ts = if roll < 2 && max > base {
                max - next(GRACE_MS as u64) as i64
            } else if roll < 3 && max > base + 10 * SIZE_MS {
                max - SIZE_MS - GRACE_MS - next(5_000) as i64
            } else {
                t
            };
            max = max.max(ts);
            out.push(Input {
                partition: p,
                key: format!("p{p}k{}", next(keys)),
                id: format!("r{p}-{i}"),
                ts,
            });
        }
        out.push(Input {
            partition: p,
            key: format!("flush{p}"),
            id: format!("flush{p}"),
            ts: t + 60_000,
        });
    }
    out
}

/// What a workload implies, computed without eosflow.
#[derive(Debug, Default)]
pub struct Expected {
    /// (key, window start) → count.
    pub windows: BTreeMap<(String, i64), i64>,
    /// Ids of the late records.
    pub late: BTreeSet<String>,
    /// Records behind stream time but counted.
    pub out_of_order: usize,
}

/// Per partition in order, stream time is the largest event time so far; a record counts in
/// its window if stream time is before the window's end plus grace, else it is late. Every
/// window closes (the flush records); the flush records' own windows do not.
pub fn expected(input: &[Input]) -> Expected {
    let mut stream: BTreeMap<i32, i64> = BTreeMap::new();
    let mut e = Expected::default();
    for r in input {
        let s = stream.entry(r.partition).or_insert(i64::MIN);
        let behind = r.ts < *s;
        *s = (*s).max(r.ts);
        let start = r.ts - r.ts.rem_euclid(SIZE_MS);
        if start + SIZE_MS + GRACE_MS > *s {
            e.out_of_order += usize::from(behind);
            if !r.key.starts_with("flush") {
                *e.windows.entry((r.key.clone(), start)).or_default() += 1;
            }
        } else {
            e.late.insert(r.id.clone());
        }
    }
    e
}

/// Every committed window result: (key, start, end) → [(count, timestamp)].
pub type Results = BTreeMap<(String, i64, i64), Vec<(i64, Option<i64>)>>;

/// Reads every committed result of `output` (read_committed).
pub fn results(clients: &KafkaClients, output: &str) -> Result<Results, String> {
    let keys = WindowedSerde::new(StringSerde);
    let mut got: Results = BTreeMap::new();
    read_all(clients, output, Duration::from_secs(120), |m| {
        let k = keys
            .deserialize(m.key().unwrap_or_default())
            .map_err(|e| e.to_string())?;
        let n = I64Serde
            .deserialize(m.payload().unwrap_or_default())
            .map_err(|e| e.to_string())?;
        got.entry((k.key, k.window.start, k.window.end))
            .or_default()
            .push((n, m.timestamp().to_millis()));
        Ok(())
    })
    .map_err(|e| format!("reading the results: {e}"))?;
    Ok(got)
}

/// Every dead letter of `dlt`: value (the record id) → its `eosflow.dlt.error.class`es.
pub fn dead_letters(
    clients: &KafkaClients,
    dlt: &str,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut dead: BTreeMap<String, Vec<String>> = BTreeMap::new();
    read_all(clients, dlt, Duration::from_secs(120), |m| {
        let class = m
            .headers()
            .and_then(|h| {
                h.iter()
                    .find(|h| h.key == "eosflow.dlt.error.class")
                    .and_then(|h| h.value)
            })
            .map(|v| String::from_utf8_lossy(v).to_string())
            .unwrap_or_default();
        let id = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
        dead.entry(id).or_default().push(class);
        Ok(())
    })
    .map_err(|e| format!("reading the DLT: {e}"))?;
    Ok(dead)
}

/// How the committed results and dead letters compare with what the workload implies.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Windows with no result.
    pub lost: u64,
    /// Results beyond one per window.
    pub duplicated: u64,
    /// Windows whose result has the wrong count or timestamp, or that should not exist.
    pub wrong: u64,
    /// Late records not in the DLT.
    pub late_missing: u64,
    /// Dead letters that are not late records, or late records dead-lettered more than once.
    pub dlt_wrong: u64,
}

/// Compares `got` and `dead` with `want`.
pub fn compare(want: &Expected, got: &Results, dead: &BTreeMap<String, Vec<String>>) -> Comparison {
    let mut c = Comparison::default();
    for ((key, start), n) in &want.windows {
        let end = start + SIZE_MS;
        match got.get(&(key.clone(), *start, end)) {
            None => c.lost += 1,
            Some(results) => {
                c.duplicated += results.len() as u64 - 1;
                if results.iter().any(|r| *r != (*n, Some(end - 1))) {
                    c.wrong += 1;
                }
            }
        }
    }
    c.wrong += got
        .keys()
        .filter(|(k, s, _)| !want.windows.contains_key(&(k.clone(), *s)))
        .count() as u64;
    c.late_missing = want
        .late
        .iter()
        .filter(|id| !dead.contains_key(*id))
        .count() as u64;
    c.dlt_wrong = dead
        .iter()
        .filter(|(id, classes)| {
            !want.late.contains(*id) || classes.len() != 1 || classes[0] != "late-record"
        })
        .count() as u64;
    c
}

/// Shape of a windows run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Records per partition (before the flush record).
    pub per_partition: usize,
    /// Partitions of every topic.
    pub partitions: i32,
    /// Processor processes.
    pub instances: usize,
    /// kill -9s, spread over the run (one instance at a time, restarted at once).
    pub kills: u32,
}

impl Options {
    /// The `make test` version: 20 000 records, 4 partitions, 2 instances, 3 kills.
    pub fn short() -> Self {
        Self {
            per_partition: 5_000,
            partitions: 4,
            instances: 2,
            kills: 3,
        }
    }

    /// The long version: 200 000 records, 4 partitions, 2 instances, 12 kills.
    pub fn long() -> Self {
        Self {
            per_partition: 50_000,
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
    let run = Run::new("windows");
    let (app_id, input, output) = (run.app_id.as_str(), run.input.as_str(), run.output.as_str());
    let topology = topology(input, output).map_err(|e| e.to_string())?;
    run.create_topics(config, &clients, &topology, opts.partitions, Vec::new())?;
    let workload = workload(
        eosflow::internals::clock::now_ms() - 3 * 3_600_000,
        opts.partitions,
        opts.per_partition,
        50,
    );
    let want = expected(&workload);
    group::produce(
        &clients,
        workload.iter().map(|r| Outgoing {
            topic: input,
            partition: r.partition,
            key: &r.key,
            value: Some(&r.id),
            ts: r.ts,
        }),
    )?;
    let total = workload.len() as i64;

    let spec = GroupSpec {
        app_id,
        topology: "windowed-count",
        input,
        output,
        instances: opts.instances,
        max_batch: 50,
    };
    let mut instances = group::spawn(config, env, &spec, &env.work_dir.join(app_id))?;
    let mut probe = LagProbe::new(&clients, app_id, &[(input, opts.partitions)]);
    let lag = || probe.lag();
    let killed = group::kill_until_drained(&mut instances, env, output, (opts.kills, total), lag)?;
    let drained_s = started.elapsed().as_secs_f64();
    let pending = group::await_results(want.windows.len(), || {
        results(&clients, output).map(|r| r.len())
    })?;
    for inst in &mut instances {
        inst.kill9();
    }
    let got = results(&clients, output)?;
    let dead = dead_letters(&clients, &eosflow::internals::retry::dlt::topic_for(input))?;
    let c = compare(&want, &got, &dead);
    let mid_stream = killed.mid_stream(total);
    Ok(ScenarioReport {
        scenario: Scenario::Windows,
        records: total as u64,
        lost: c.lost,
        duplicated: c.duplicated,
        dlt: dead.len() as u64,
        stalls: killed.stalls,
        checks_ok: c.wrong == 0 && c.late_missing == 0 && c.dlt_wrong == 0,
        extra: vec![
            ("pending_at_drain".into(), pending.to_string()),
            ("windows".into(), want.windows.len().to_string()),
            ("wrong_windows".into(), c.wrong.to_string()),
            ("out_of_order".into(), want.out_of_order.to_string()),
            ("late".into(), want.late.len().to_string()),
            ("late_missing".into(), c.late_missing.to_string()),
            ("dlt_wrong".into(), c.dlt_wrong.to_string()),
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
    fn the_workload_has_its_share_of_out_of_order_and_late_records() {
        let input = workload(1_700_000_000_000, 4, 5_000, 50);
        let want = expected(&input);
        assert!(want.out_of_order * 100 >= 20_000, "{}", want.out_of_order);
        assert!(want.late.len() * 200 >= 20_000, "{}", want.late.len());
        let got: Results = want
            .windows
            .iter()
            .map(|((k, s), n)| {
                (
                    (k.clone(), *s, s + SIZE_MS),
                    vec![(*n, Some(s + SIZE_MS - 1))],
                )
            })
            .collect();
        let dead = want
            .late
            .iter()
            .map(|id| (id.clone(), vec!["late-record".to_string()]))
            .collect();
        assert_eq!(compare(&want, &got, &dead), Comparison::default());
    }
}
