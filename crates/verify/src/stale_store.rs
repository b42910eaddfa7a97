//! The `stale-store` scenario: an instance is kept away longer than its changelog's
//! `delete.retention.ms` (a short one on this run's changelog, with aggressive compaction)
//! while another instance deletes half of its keys, then it is brought back alone.
//!
//! Proven from outside: the returning instance rebuilt its stores from the changelog (its log
//! says so for every partition), every record has exactly one output, and after one more record
//! per key the state is exact: a deleted key counts from 1 again instead of resuming the count
//! it had in the returning instance's old store.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::Message;

use super::scenario::{Scenario, ScenarioEnv, ScenarioReport};
use super::{group_lag, instance_env, run_topics, wait_for_topics, Instance};
use crate::count::CountOutput;
use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::state::Column;
use eosflow::kafka::topics;
use eosflow::kafka::{ClientRole, KafkaClients};

/// Shape of a stale-store run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Keys; every second one is deleted while the instance is away.
    pub keys: u64,
    /// `delete.retention.ms` of the run's changelog.
    pub retention_ms: u64,
    /// How long the instance stays away beyond the retention.
    pub extra_away: Duration,
    /// Partitions of every topic.
    pub partitions: i32,
}

impl Options {
    /// The `make test` version: 200 keys, a 3 s retention, away 8 s.
    pub fn short() -> Self {
        Self {
            keys: 200,
            retention_ms: 3_000,
            extra_away: Duration::from_secs(5),
            partitions: 2,
        }
    }

    /// The long version: 20 000 keys, a 10 s retention, away 70 s (the broker's cleaner gets
    /// time to drop the tombstones).
    pub fn long() -> Self {
        Self {
            keys: 20_000,
            retention_ms: 10_000,
            extra_away: Duration::from_secs(60),
            partitions: 4,
        }
    }
}

/// Produces `records` (key, value, id) in order.
fn produce(
    clients: &KafkaClients,
    input: &str,
    records: &[(String, String, String)],
) -> Result<(), String> {
    let producer: ThreadedProducer<DefaultProducerContext> = clients
        .config(ClientRole::Idempotent)
        .create()
        .map_err(|e| format!("producer: {e}"))?;
    for (key, value, id) in records {
        let headers = OwnedHeaders::new().insert(Header {
            key: "id",
            value: Some(id.as_bytes()),
        });
        super::parked_flood::send_waiting(&producer, input, key, value, headers)?;
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(|e| format!("flushing: {e}"))
}

/// A round of one record per key: `value` of key `k<i>` for the keys `pick` selects.
fn round(
    opts: &Options,
    name: &str,
    pick: impl Fn(u64) -> Option<&'static str>,
) -> Vec<(String, String, String)> {
    (0..opts.keys)
        .filter_map(|i| pick(i).map(|v| (format!("k{i}"), v.to_string(), format!("{name}-{i}"))))
        .collect()
}

/// Runs the scenario.
pub fn run(config: &Config, env: &ScenarioEnv, opts: &Options) -> Result<ScenarioReport, String> {
    let started = Instant::now();
    let clients = KafkaClients::new(config.kafka.clone());
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let app_id = format!("stale-{run_id}");
    let input = format!("{app_id}.input");
    let output = format!("{app_id}.output");
    let changelog = format!("{app_id}-count-changelog");
    let levels = config.retry.policy_for(&input).levels();
    let mut specs = run_topics(&input, levels, &output, &changelog, opts.partitions);
    for s in specs.iter_mut().filter(|s| s.name == changelog) {
        for (k, v) in [
            ("delete.retention.ms", opts.retention_ms.to_string()),
            ("segment.ms", "1000".to_string()),
            ("min.cleanable.dirty.ratio", "0.01".to_string()),
            ("min.compaction.lag.ms", "0".to_string()),
        ] {
            s.config.insert(k.to_string(), v);
        }
    }
    topics::apply_blocking(&clients, &specs, Duration::from_secs(30))
        .map_err(|e| format!("creating the run's topics: {e}"))?;
    wait_for_topics(&clients, &specs)?;
    let logs = env.work_dir.join(&app_id);
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let instance = |name: &str| {
        Instance::new(
            name.to_string(),
            "count",
            instance_env(config, &app_id, name, &input, 100, &logs.join("state")),
            logs.join(format!("{name}.log")),
        )
    };
    let drained = |what: &str, inst: &mut Instance| -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Some(status) = inst.exited() {
                return Err(format!(
                    "instance {} exited ({status}) during {what}",
                    inst.name
                ));
            }
            if group_lag(&clients, &app_id, &input, opts.partitions)? == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("{what}: the lag did not drain in 300 s"));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut ids = 0u64;
    let mut apply = |records: &[(String, String, String)]| {
        for (k, v, _) in records {
            let c = expected.entry(k.clone()).or_default();
            *c = if v == "delete" { 0 } else { *c + 1 };
        }
        ids += records.len() as u64;
    };

    // a counts every key once, then goes away (kill -9: its stores keep their checkpoints).
    let mut a = instance("a");
    a.spawn(&env.exe, &output)?;
    let r1 = round(opts, "r1", |_| Some("1"));
    produce(&clients, &input, &r1)?;
    apply(&r1);
    drained("round 1", &mut a)?;
    a.kill9();
    let away_from = Instant::now();
    // b deletes every second key and counts the others, then keeps writing so the changelog's
    // segments roll and the cleaner drops the tombstones once the retention has passed.
    let mut b = instance("b");
    b.spawn(&env.exe, &output)?;
    let r2 = round(opts, "r2", |i| {
        Some(if i % 2 == 0 { "delete" } else { "1" })
    });
    produce(&clients, &input, &r2)?;
    apply(&r2);
    drained("round 2", &mut b)?;
    let away = Duration::from_millis(opts.retention_ms) + opts.extra_away;
    let mut tick = 0;
    while away_from.elapsed() < away {
        let filler = vec![("filler".to_string(), "1".to_string(), format!("f-{tick}"))];
        produce(&clients, &input, &filler)?;
        apply(&filler);
        tick += 1;
        std::thread::sleep(Duration::from_millis(1000));
    }
    drained("the away period", &mut b)?;
    b.kill9();
    // a comes back alone, past the retention: its stores must be rebuilt.
    a.spawn(&env.exe, &output)?;
    let r3 = round(opts, "r3", |_| Some("1"));
    produce(&clients, &input, &r3)?;
    apply(&r3);
    drained("round 3", &mut a)?;
    a.kill9();

    // Every id has one output.
    let mut outputs: BTreeMap<String, u64> = BTreeMap::new();
    read_all(&clients, &output, Duration::from_secs(120), |m| {
        let v: CountOutput =
            serde_json::from_slice(m.payload().unwrap_or_default()).map_err(|e| e.to_string())?;
        *outputs.entry(v.id).or_default() += 1;
        Ok(())
    })
    .map_err(|e| format!("reading the output: {e}"))?;
    let distinct = outputs.len() as u64;
    let duplicated: u64 = outputs.values().map(|n| n - 1).sum();
    let lost = ids.saturating_sub(distinct);
    // The state: a deleted key counted from 1 again.
    let state = super::check::read_state(&clients, &changelog, Duration::from_secs(120))
        .map_err(|e| format!("reading the changelog: {e}"))?;
    let state_mismatches = expected
        .iter()
        .filter(|(k, want)| state.get(*k).map_or(0, |s| s.count) != **want)
        .count();
    // Tombstones of the deleted keys still in the changelog (the cleaner's progress).
    let mut tombstones = 0u64;
    read_all(&clients, &changelog, Duration::from_secs(120), |m| {
        if m.payload().is_none()
            && m.key()
                .and_then(Column::parse_changelog_key)
                .is_some_and(|(c, _)| c == Column::State)
        {
            tombstones += 1;
        }
        Ok(())
    })
    .map_err(|e| format!("reading the changelog: {e}"))?;
    let rebuilds = std::fs::read_to_string(logs.join("a.log"))
        .map(|l| {
            l.matches("rebuilding the store from the changelog alone")
                .count()
        })
        .unwrap_or(0);
    Ok(ScenarioReport {
        scenario: Scenario::StaleStore,
        records: ids,
        lost,
        duplicated,
        dlt: 0,
        stalls: 0,
        checks_ok: state_mismatches == 0 && rebuilds >= opts.partitions as usize,
        extra: vec![
            ("state_mismatches".into(), state_mismatches.to_string()),
            ("stale_rebuilds".into(), rebuilds.to_string()),
            ("deleted_keys".into(), opts.keys.div_ceil(2).to_string()),
            ("tombstones_left".into(), tombstones.to_string()),
            ("away_s".into(), format!("{:.1}", away.as_secs_f64())),
            (
                "elapsed_s".into(),
                format!("{:.1}", started.elapsed().as_secs_f64()),
            ),
        ],
    })
}
