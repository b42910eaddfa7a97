//! A group of processor processes a topology scenario (`windows`, `joins`) runs and kills: each
//! instance started with the run's environment and small transactions, then `kill -9`ed one at
//! a time, round robin, and restarted at once, until the kills are done and the input drained.

use std::path::Path;
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

use super::scenario::ScenarioEnv;
use super::{instance_env, wait_for_topics, Instance};
use eosflow::config::Config;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::{ClientRole, KafkaClients};
use eosflow::topology::Topology;

/// A topology scenario's run: its application id `<scenario>-<run id>` and topics.
pub(crate) struct Run {
    /// Application (group) id.
    pub app_id: String,
    /// `<app_id>.input`.
    pub input: String,
    /// `<app_id>.output`.
    pub output: String,
}

impl Run {
    /// A new run of `scenario`: names only, nothing created.
    pub fn new(scenario: &str) -> Self {
        let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
        let app_id = format!("{scenario}-{run_id}");
        Self {
            input: format!("{app_id}.input"),
            output: format!("{app_id}.output"),
            app_id,
        }
    }

    /// Creates the input and output, `extra` topics and `topology`'s internal topics, all with
    /// `partitions`, and waits until the broker shows every partition.
    pub fn create_topics(
        &self,
        config: &Config,
        clients: &KafkaClients,
        topology: &Topology,
        partitions: i32,
        extra: Vec<TopicSpec>,
    ) -> Result<(), String> {
        let mut app = config.clone();
        app.app.id = self.app_id.clone();
        let mut specs = vec![
            TopicSpec::new(&self.input, partitions, "delete"),
            TopicSpec::new(&self.output, partitions, "delete"),
        ];
        specs.extend(extra);
        specs.extend(topology.internal_topics(&app, partitions));
        topics::apply_blocking(clients, &specs, Duration::from_secs(30))
            .map_err(|e| format!("creating the run's topics: {e}"))?;
        wait_for_topics(clients, &specs)
    }
}

/// What a run's group is.
pub(crate) struct GroupSpec<'a> {
    /// Application (group) id.
    pub app_id: &'a str,
    /// `eosflow run --topology <this>`.
    pub topology: &'a str,
    /// The input topic.
    pub input: &'a str,
    /// The output topic.
    pub output: &'a str,
    /// Processes.
    pub instances: usize,
    /// `processor.max_batch_records`: small transactions make a run last long enough for every
    /// kill to land mid-stream.
    pub max_batch: usize,
}

/// Starts the group's instances, logs and state under `logs`.
pub(crate) fn spawn(
    config: &Config,
    env: &ScenarioEnv,
    spec: &GroupSpec<'_>,
    logs: &Path,
) -> Result<Vec<Instance>, String> {
    std::fs::create_dir_all(logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let mut instances = Vec::new();
    for i in 0..spec.instances {
        let name = format!("i{i}");
        let mut e = instance_env(
            config,
            spec.app_id,
            &name,
            spec.input,
            100,
            &logs.join(&name),
        );
        e.push((
            "EOSFLOW_PROCESSOR_MAX_BATCH_RECORDS".into(),
            spec.max_batch.to_string(),
        ));
        let mut inst = Instance::new(
            name.clone(),
            spec.topology,
            e,
            logs.join(format!("{name}.log")),
        );
        inst.spawn(&env.exe, spec.output)?;
        instances.push(inst);
    }
    Ok(instances)
}

/// What the kill loop did.
pub(crate) struct Killed {
    /// `kill -9`s done.
    pub kills: u32,
    /// The input's lag at each kill.
    pub left_at_kill: Vec<i64>,
    /// 1 when the input did not drain before the deadline.
    pub stalls: u32,
}

impl Killed {
    /// Kills that landed mid-stream: with some, but not all, of the `total` input left.
    pub fn mid_stream(&self, total: i64) -> usize {
        self.left_at_kill
            .iter()
            .filter(|l| **l > 0 && **l < total)
            .count()
    }
}

/// `kill -9`s `kills` instances (the first 4 s in, then every 3 s), each restarted at once,
/// and waits until `lag()` is 0 after the last; 15 minutes at most. An instance exiting by
/// itself is an error.
pub(crate) fn kill_until_drained(
    instances: &mut [Instance],
    env: &ScenarioEnv,
    output: &str,
    kills: u32,
    mut lag: impl FnMut() -> i64,
) -> Result<Killed, String> {
    let mut done = Killed {
        kills: 0,
        left_at_kill: Vec::new(),
        stalls: 0,
    };
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut next_kill = Instant::now() + Duration::from_secs(4);
    loop {
        for inst in instances.iter_mut() {
            if let Some(status) = inst.exited() {
                return Err(format!(
                    "instance {} exited ({status}); see {}",
                    inst.name,
                    inst.log.display()
                ));
            }
        }
        let left = lag();
        if done.kills < kills && Instant::now() >= next_kill {
            let n = instances.len();
            let inst = &mut instances[done.kills as usize % n];
            inst.kill9();
            inst.spawn(&env.exe, output)?;
            done.kills += 1;
            done.left_at_kill.push(left);
            next_kill = Instant::now() + Duration::from_secs(3);
        }
        if done.kills >= kills && left == 0 {
            return Ok(done);
        }
        if Instant::now() > deadline {
            done.stalls += 1;
            return Ok(done);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// One record a scenario writes: topic, partition, key, value (`None`: a tombstone), time.
pub(crate) struct Outgoing<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub key: &'a str,
    pub value: Option<&'a str>,
    pub ts: i64,
}

/// Writes `records` in order (idempotent producer: no duplicates, per-partition order kept),
/// waiting while the queue is full; all written when it returns.
pub(crate) fn produce<'a>(
    clients: &KafkaClients,
    records: impl IntoIterator<Item = Outgoing<'a>>,
) -> Result<(), String> {
    let producer: ThreadedProducer<DefaultProducerContext> = clients
        .config(ClientRole::Idempotent)
        .create()
        .map_err(|e| format!("producer: {e}"))?;
    for r in records {
        let mut record = BaseRecord::<str, str>::to(r.topic)
            .partition(r.partition)
            .key(r.key)
            .timestamp(r.ts);
        if let Some(v) = r.value {
            record = record.payload(v);
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while let Err((e, back)) = producer.send(record) {
            if !e.to_string().contains("Queue full") || Instant::now() > deadline {
                return Err(format!("producing to {}: {e}", r.topic));
            }
            let _ = producer.flush(Duration::from_millis(50));
            record = back;
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(|e| format!("flushing: {e}"))
}
