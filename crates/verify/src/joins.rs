//! The `joins` scenario: a stream left-joined with a table (`eosflow run --topology
//! table-join`), over a workload whose table updates race the stream — a key's row changes
//! between, and at the same time as, its stream records, and some updates are tombstones — on
//! several partitions, two instances `kill -9`ed again and again mid-stream.
//!
//! Proven from outside: every stream record has exactly one committed result, and it carries
//! the row its key had *at the stream record's time* — computed here from the workload alone
//! (per partition in time order, a table update before a stream record of the same time; no
//! row: `-`). A table update applied twice, skipped, or applied late or early across a kill
//! shows as a wrong result.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::Message;

use super::group::{self, GroupSpec, Outgoing, Run};
use super::scenario::{Scenario, ScenarioEnv, ScenarioReport};
use super::LagProbe;
use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::kafka::topics::TopicSpec;
use eosflow::kafka::KafkaClients;
use eosflow::serdes::StringSerde;
use eosflow::topology::{TableHandle, Topology, TopologyError};

/// The table topic of an input: `<input>.table`.
pub fn table_topic(input: &str) -> String {
    format!("{input}.table")
}

/// The topology the instances run: each `input` record (value: its id) left-joined by key with
/// the table of [`table_topic`]`(input)`, the result `<id>|<row>` (`-` for no row) to `output`.
///
/// ```
/// use eosflow::serdes::StringSerde;
/// use eosflow::testing::{TestRecord, TopologyTestDriver};
/// use eosflow::topology::TableHandle;
/// use eosflow_verify::joins::{table_topic, topology};
///
/// let mut driver = TopologyTestDriver::new(topology("clicks", "joined")?)?;
/// let table = TableHandle::new("table", table_topic("clicks"), StringSerde, StringSerde);
/// driver.pipe(TestRecord::new("clicks", Some("k"), Some("r1")))?;
/// driver.pipe_table(&table, &"k".to_string(), Some(&"v1".to_string()))?;
/// driver.pipe(TestRecord::new("clicks", Some("k"), Some("r2")))?;
/// let out = driver.read_output("joined", &StringSerde, &StringSerde)?;
/// let values: Vec<String> = out.into_iter().filter_map(|(_, v)| v).collect();
/// assert_eq!(values, ["r1|-", "r2|v1"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn topology(input: &str, output: &str) -> Result<Topology, TopologyError> {
    let table = TableHandle::new("table", table_topic(input), StringSerde, StringSerde);
    Topology::builder()
        .add_source("in", &[input], StringSerde, StringSerde)
        .add_table(&table)
        .add_stream_table_left_join(
            "join",
            &table,
            |_, id: &String, row: Option<&String>| {
                Some(format!("{id}|{}", row.map_or("-", String::as_str)))
            },
            &["in"],
        )
        .add_sink("out", output, StringSerde, StringSerde, &["join"])
        .build()
}

/// One record of the workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A table update: the key's new row, `None` deleting it.
    Update {
        /// Partition.
        partition: i32,
        /// Key.
        key: String,
        /// New row (`None`: a tombstone).
        row: Option<String>,
        /// Event time.
        ts: i64,
    },
    /// A stream record: its id is its value.
    Record {
        /// Partition.
        partition: i32,
        /// Key.
        key: String,
        /// Unique id.
        id: String,
        /// Event time.
        ts: i64,
    },
}

impl Event {
    fn partition(&self) -> i32 {
        match self {
            Event::Update { partition, .. } | Event::Record { partition, .. } => *partition,
        }
    }
}

/// The workload: per partition `per_partition` stream records over `keys` keys, 5–15 ms of
/// event time apart, and one table update per ten of them (one in twenty a tombstone), each
/// for a key likely to be read soon — a third of them at exactly the time of the next stream
/// record. Every partition is in time order. Deterministic (a fixed LCG).
pub fn workload(base: i64, partitions: i32, per_partition: usize, keys: u64) -> Vec<Event> {
    let mut seed: u64 = 0x101e;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let mut out = Vec::new();
    for p in 0..partitions {
        let mut t = base + i64::from(p);
        let mut updates = 0u64;
        for i in 0..per_partition {
            t += 5 + next(11) as i64;
            let key = format!("p{p}k{}", next(keys));
            if next(10) == 0 {
                // The update goes to the key of this record: at its time or just before.
                let ts = if next(3) == 0 {
                    t
                } else {
                    t - 1 - next(4) as i64
                };
                let row = (next(20) != 0).then(|| format!("v{p}-{updates}"));
                updates += 1;
                out.push(Event::Update {
                    partition: p,
                    key: key.clone(),
                    row,
                    ts,
                });
            }
            out.push(Event::Record {
                partition: p,
                key,
                id: format!("r{p}-{i}"),
                ts: t,
            });
        }
    }
    out
}

/// The result each stream record must have: id → `<id>|<row at its time or ->`. Per
/// partition the events are taken in time order, an update before a record of the same time
/// (how the runtime orders a table against its stream).
pub fn expected(events: &[Event]) -> BTreeMap<String, String> {
    let mut by_partition: BTreeMap<i32, Vec<&Event>> = BTreeMap::new();
    for e in events {
        by_partition.entry(e.partition()).or_default().push(e);
    }
    let mut want = BTreeMap::new();
    for (_, mut evs) in by_partition {
        evs.sort_by_key(|e| match e {
            Event::Update { ts, .. } => (*ts, 0),
            Event::Record { ts, .. } => (*ts, 1),
        });
        let mut table: HashMap<&str, &str> = HashMap::new();
        for e in evs {
            match e {
                Event::Update { key, row, .. } => match row {
                    Some(r) => {
                        table.insert(key, r);
                    }
                    None => {
                        table.remove(key.as_str());
                    }
                },
                Event::Record { key, id, .. } => {
                    let row = table.get(key.as_str()).copied().unwrap_or("-");
                    want.insert(id.clone(), format!("{id}|{row}"));
                }
            }
        }
    }
    want
}

/// How the committed results compare with what the workload implies.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Stream records with no result.
    pub lost: u64,
    /// Results beyond one per stream record.
    pub duplicated: u64,
    /// Results with another row than the key's at the record's time, or for no known record.
    pub wrong: u64,
}

/// Compares the committed results (`id` → every result value seen) with `want`.
pub fn compare(want: &BTreeMap<String, String>, got: &BTreeMap<String, Vec<String>>) -> Comparison {
    let mut c = Comparison::default();
    for (id, value) in want {
        match got.get(id) {
            None => c.lost += 1,
            Some(vs) => {
                c.duplicated += vs.len() as u64 - 1;
                c.wrong += vs.iter().filter(|v| *v != value).count() as u64;
            }
        }
    }
    c.wrong += got.keys().filter(|id| !want.contains_key(*id)).count() as u64;
    c
}

/// Reads every committed result of `output`: stream record id → result values.
pub fn results(
    clients: &KafkaClients,
    output: &str,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    read_all(clients, output, Duration::from_secs(120), |m| {
        let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
        let id = v.split('|').next().unwrap_or_default().to_string();
        got.entry(id).or_default().push(v);
        Ok(())
    })
    .map_err(|e| format!("reading the results: {e}"))?;
    Ok(got)
}

/// Shape of a joins run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Stream records per partition (a tenth as many table updates).
    pub per_partition: usize,
    /// Partitions of every topic.
    pub partitions: i32,
    /// Keys per partition.
    pub keys: u64,
    /// Processor processes.
    pub instances: usize,
    /// kill -9s, spread over the run (one instance at a time, restarted at once).
    pub kills: u32,
}

impl Options {
    /// The `make test` version: 20 000 stream records, ~2 000 table updates, 4 partitions, 2
    /// instances, 3 kills.
    pub fn short() -> Self {
        Self {
            per_partition: 5_000,
            partitions: 4,
            keys: 40,
            instances: 2,
            kills: 3,
        }
    }

    /// The long version: 200 000 stream records, ~20 000 table updates, 4 partitions, 2
    /// instances, 12 kills.
    pub fn long() -> Self {
        Self {
            per_partition: 50_000,
            partitions: 4,
            keys: 400,
            instances: 2,
            kills: 12,
        }
    }
}

/// Runs the scenario.
pub fn run(config: &Config, env: &ScenarioEnv, opts: &Options) -> Result<ScenarioReport, String> {
    let started = Instant::now();
    let clients = KafkaClients::new(config.kafka.clone());
    let run = Run::new("joins");
    let (app_id, input, output) = (run.app_id.as_str(), run.input.as_str(), run.output.as_str());
    let table = table_topic(input);
    let topology = topology(input, output).map_err(|e| e.to_string())?;
    run.create_topics(
        config,
        &clients,
        &topology,
        opts.partitions,
        vec![TopicSpec::new(&table, opts.partitions, "compact")],
    )?;
    let events = workload(
        eosflow::internals::clock::now_ms() - 3 * 3_600_000,
        opts.partitions,
        opts.per_partition,
        opts.keys,
    );
    let want = expected(&events);
    let updates = events.len() - want.len();
    group::produce(
        &clients,
        events.iter().map(|e| match e {
            Event::Update {
                partition,
                key,
                row,
                ts,
            } => Outgoing {
                topic: &table,
                partition: *partition,
                key,
                value: row.as_deref(),
                ts: *ts,
            },
            Event::Record {
                partition,
                key,
                id,
                ts,
            } => Outgoing {
                topic: input,
                partition: *partition,
                key,
                value: Some(id),
                ts: *ts,
            },
        }),
    )?;
    let total = want.len() as i64;

    let spec = GroupSpec {
        app_id,
        topology: "table-join",
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
    group::await_results(want.len(), || results(&clients, output).map(|r| r.len()))?;
    for inst in &mut instances {
        inst.kill9();
    }
    let got = results(&clients, output)?;
    let c = compare(&want, &got);
    let with_row = want.values().filter(|v| !v.ends_with("|-")).count();
    Ok(ScenarioReport {
        scenario: Scenario::Joins,
        records: total as u64,
        lost: c.lost,
        duplicated: c.duplicated,
        dlt: 0,
        stalls: killed.stalls,
        checks_ok: c.wrong == 0,
        extra: vec![
            ("table_updates".into(), updates.to_string()),
            ("joined_with_row".into(), with_row.to_string()),
            ("wrong_rows".into(), c.wrong.to_string()),
            ("kills".into(), killed.kills.to_string()),
            (
                "kills_mid_stream".into(),
                killed.mid_stream(total).to_string(),
            ),
            ("elapsed_s".into(), format!("{drained_s:.1}")),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_races_updates_with_the_stream_and_the_expectation_sees_them() {
        let events = workload(1_700_000_000_000, 4, 5_000, 40);
        let want = expected(&events);
        assert_eq!(want.len(), 20_000);
        let updates: Vec<&Event> = events
            .iter()
            .filter(|e| matches!(e, Event::Update { .. }))
            .collect();
        assert!(updates.len() > 1_500, "{}", updates.len());
        let ties = events
            .windows(2)
            .filter(|w| match (&w[0], &w[1]) {
                (Event::Update { ts: a, .. }, Event::Record { ts: b, .. }) => a == b,
                _ => false,
            })
            .count();
        assert!(ties > 300, "{ties} updates at their record's time");
        let with_row = want.values().filter(|v| !v.ends_with("|-")).count();
        assert!(with_row > 10_000 && with_row < 20_000, "{with_row}");

        // A result one update behind is wrong; the right ones compare clean.
        let mut got: BTreeMap<String, Vec<String>> = want
            .iter()
            .map(|(k, v)| (k.clone(), vec![v.clone()]))
            .collect();
        assert_eq!(compare(&want, &got), Comparison::default());
        let (id, _) = want
            .iter()
            .find(|(_, v)| !v.ends_with("|-"))
            .expect("a row");
        got.insert(id.clone(), vec![format!("{id}|-")]);
        got.remove("r0-0");
        assert_eq!(
            compare(&want, &got),
            Comparison {
                lost: 1,
                duplicated: 0,
                wrong: 1
            }
        );
    }
}
