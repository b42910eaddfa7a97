//! The `parked-flood` scenario: one key's head is dead-lettered under the `park` policy while
//! thousands of its followers arrive (among records of other keys), then the head is redriven
//! and the key drains, a chunk per transaction, through the counting topology in separate
//! processes (kill -9s during the drain in the long version).
//!
//! Proven from outside: every record is in the output exactly once, the flooded key's outputs
//! are in input order with counts 1, 2, 3, …, the final state matches, and nothing but the
//! head ever reached the DLT.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::Message;

use super::scenario::{Scenario, ScenarioEnv, ScenarioReport};
use super::{group_lag, instance_env, run_topics, wait_for_topics, Instance};
use crate::count::CountOutput;
use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::retry::tooling::{self, Selector};
use eosflow::kafka::topics;
use eosflow::kafka::{ClientRole, KafkaClients};

/// The flooded key.
const KEY: &str = "flood";

/// Shape of a parked-flood run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Followers of the flooded key.
    pub followers: u64,
    /// Records of other keys, interleaved.
    pub others: u64,
    /// Partitions of every topic.
    pub partitions: i32,
    /// kill -9s of the instance while the key drains.
    pub kills: u32,
}

impl Options {
    /// The `make test` version: 3000 followers (three drain chunks), one instance.
    pub fn short() -> Self {
        Self {
            followers: 3_000,
            others: 1_000,
            partitions: 2,
            kills: 0,
        }
    }

    /// The long version: 9000 followers of ~1 KiB (9 MiB behind one key), kill -9s.
    pub fn long() -> Self {
        Self {
            followers: 9_000,
            others: 20_000,
            partitions: 4,
            kills: 3,
        }
    }
}

/// Sends one record, waiting while the producer's queue is full.
pub(crate) fn send_waiting(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    key: &str,
    value: &str,
    headers: OwnedHeaders,
) -> Result<(), String> {
    loop {
        match producer.send(
            BaseRecord::to(topic)
                .key(key)
                .payload(value)
                .headers(headers.clone()),
        ) {
            Ok(()) => return Ok(()),
            Err((e, _)) if e.to_string().contains("Queue full") => {
                producer.poll(Duration::from_millis(50));
            }
            Err((e, _)) => return Err(format!("producing: {e}")),
        }
    }
}

/// Produces the head (fails on every attempt until redriven with a good value), then the
/// followers interleaved with other keys' records; returns the ids expected per key in order.
fn produce(
    clients: &KafkaClients,
    input: &str,
    opts: &Options,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let producer: ThreadedProducer<DefaultProducerContext> = clients
        .config(ClientRole::Idempotent)
        .create()
        .map_err(|e| format!("producer: {e}"))?;
    let padding = vec![b'x'; 1000];
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut send = |key: &str, value: &str, id: String| -> Result<(), String> {
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "id",
                value: Some(id.as_bytes()),
            })
            .insert(Header {
                key: "pad",
                value: Some(&padding[..]),
            });
        send_waiting(&producer, input, key, value, headers)?;
        expected.entry(key.to_string()).or_default().push(id);
        Ok(())
    };
    send(KEY, "transient:1000:1", format!("{KEY}-0"))?;
    let others_per_follower = opts.others.div_ceil(opts.followers.max(1));
    let mut other = 0;
    for i in 1..=opts.followers {
        send(KEY, "1", format!("{KEY}-{i}"))?;
        for _ in 0..others_per_follower {
            if other < opts.others {
                send(&format!("o{}", other % 97), "1", format!("o-{other}"))?;
                other += 1;
            }
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(|e| format!("flushing: {e}"))?;
    Ok(expected)
}

/// Output ids per key, in output order.
fn outputs(clients: &KafkaClients, output: &str) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    read_all(clients, output, Duration::from_secs(120), |m| {
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        let v: CountOutput =
            serde_json::from_slice(m.payload().unwrap_or_default()).map_err(|e| e.to_string())?;
        out.entry(key).or_default().push(v.id);
        Ok(())
    })
    .map_err(|e| format!("reading the output: {e}"))?;
    Ok(out)
}

/// Runs the scenario.
pub fn run(config: &Config, env: &ScenarioEnv, opts: &Options) -> Result<ScenarioReport, String> {
    let started = Instant::now();
    let clients = KafkaClients::new(config.kafka.clone());
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let app_id = format!("flood-{run_id}");
    let input = format!("{app_id}.input");
    let output = format!("{app_id}.output");
    let changelog = format!("{app_id}-count-changelog");
    let dlt = eosflow::internals::retry::dlt::topic_for(&input);
    let specs = run_topics(&input, 1, &output, &changelog, opts.partitions);
    topics::apply_blocking(&clients, &specs, Duration::from_secs(30))
        .map_err(|e| format!("creating the run's topics: {e}"))?;
    wait_for_topics(&clients, &specs)?;
    let expected = produce(&clients, &input, opts)?;
    let records: u64 = expected.values().map(|v| v.len() as u64).sum();

    let logs = env.work_dir.join(&app_id);
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let mut e = instance_env(config, &app_id, "i0", &input, 100, &logs.join("state"));
    e.extend(
        [
            ("EOSFLOW_RETRY_DELAYS_MS", "200"),
            ("EOSFLOW_RETRY_JITTER_PERCENT", "0"),
            ("EOSFLOW_RETRY_ON_DEAD_LETTER", "park"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    e.push((
        "EOSFLOW_RETRY_MAX_PARKED_FOLLOWERS_PER_KEY".into(),
        opts.followers.to_string(),
    ));
    let mut inst = Instance::new("i0".into(), "count", e, logs.join("i0.log"));
    inst.spawn(&env.exe, &output)?;

    // Every record read: the head in the DLT, its followers parked, the others processed.
    let lag = |clients: &KafkaClients| -> i64 {
        [
            input.clone(),
            eosflow::internals::retry::retry_topic(&input, 1),
        ]
        .iter()
        .map(|t| group_lag(clients, &app_id, t, opts.partitions).unwrap_or(i64::MAX / 4))
        .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut letters = Vec::new();
    while Instant::now() < deadline {
        if let Some(status) = inst.exited() {
            return Err(format!("the instance exited ({status}); see its log"));
        }
        letters = tooling::read(&clients, &dlt, &Selector::default())
            .map_err(|e| format!("reading the DLT: {e}"))?;
        if !letters.is_empty() && lag(&clients) == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let parked_s = started.elapsed().as_secs_f64();
    let mut head: Vec<_> = letters
        .into_iter()
        .filter(|d| d.header("id") == Some(format!("{KEY}-0").as_str()))
        .collect();
    if head.len() != 1 {
        return Err(format!(
            "expected the head alone in the DLT, found {}",
            head.len()
        ));
    }
    // The operator fixes the head and redrives it: the key unparks and drains.
    head[0].value = Some(b"1".to_vec());
    let redriven_at = Instant::now();
    tooling::redrive(
        &clients,
        &app_id,
        &dlt,
        &head,
        "parked-flood: head fixed",
        |_| {},
    )
    .map_err(|e| format!("redrive: {e}"))?;
    let mut kills = 0;
    let mut stalls = 0;
    // Outputs committed as last seen: a kill with some missing lands mid-drain.
    let mut done_before = 0u64;
    let mut kills_mid_stream = 0u32;
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        if let Some(status) = inst.exited() {
            return Err(format!("the instance exited ({status}); see its log"));
        }
        if kills < opts.kills
            && redriven_at.elapsed() > Duration::from_secs(2 + 3 * u64::from(kills))
        {
            inst.kill9();
            inst.spawn(&env.exe, &output)?;
            kills += 1;
            kills_mid_stream += u32::from(done_before < records);
        }
        let done: usize = outputs(&clients, &output)?.values().map(Vec::len).sum();
        done_before = done as u64;
        if done as u64 >= records && lag(&clients) == 0 && kills >= opts.kills {
            break;
        }
        if Instant::now() > deadline {
            stalls += 1;
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let drain_s = redriven_at.elapsed().as_secs_f64();
    inst.kill9();

    let got = outputs(&clients, &output)?;
    let (mut lost, mut duplicated, mut sequence_breaks) = (0u64, 0u64, 0u64);
    for (key, ids) in &expected {
        let have = got.get(key).cloned().unwrap_or_default();
        let mut seen: BTreeMap<&str, u64> = BTreeMap::new();
        for id in &have {
            *seen.entry(id.as_str()).or_default() += 1;
        }
        for id in ids {
            match seen.get(id.as_str()) {
                None => lost += 1,
                Some(n) => duplicated += n - 1,
            }
        }
        let mut firsts: Vec<&String> = Vec::new();
        for id in &have {
            if !firsts.contains(&id) {
                firsts.push(id);
            }
        }
        if firsts.len() == ids.len() && firsts.iter().zip(ids).any(|(a, b)| *a != b) {
            sequence_breaks += 1;
        }
    }
    let state = super::check::read_state(&clients, &changelog, Duration::from_secs(120))
        .map_err(|e| format!("reading the changelog: {e}"))?;
    let state_mismatches = expected
        .iter()
        .filter(|(key, ids)| state.get(*key).map(|s| s.count) != Some(ids.len() as i64))
        .count();
    let dlt_now = tooling::read(&clients, &dlt, &Selector::default())
        .map_err(|e| format!("reading the DLT: {e}"))?
        .len() as u64;
    Ok(ScenarioReport {
        scenario: Scenario::ParkedFlood,
        records,
        lost,
        duplicated,
        dlt: dlt_now,
        stalls,
        // Only the head was ever dead-lettered (once), and the flooded key kept its order.
        checks_ok: sequence_breaks == 0 && state_mismatches == 0 && dlt_now == 1,
        extra: vec![
            ("state_mismatches".into(), state_mismatches.to_string()),
            ("sequence_breaks".into(), sequence_breaks.to_string()),
            ("followers".into(), opts.followers.to_string()),
            ("kills".into(), kills.to_string()),
            ("kills_mid_stream".into(), kills_mid_stream.to_string()),
            ("parked_s".into(), format!("{parked_s:.1}")),
            ("drain_s".into(), format!("{drain_s:.1}")),
            (
                "elapsed_s".into(),
                format!("{:.1}", started.elapsed().as_secs_f64()),
            ),
        ],
    })
}
