//! The retry ladder and dead letters against the real broker: healing, exhaustion with delays
//! respected, permanent failures, a poison record not blocking its partition, per-key order
//! through retries (also across a rebalance), kill -9 during forwarding, and redrive.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::retry::tooling::{self, DeadLetter, Selector};
use eosflow::processor::{Application, Context, ProcessError, Processor, ProcessorSpec, Record};
use eosflow_verify::count::{CountOutput, CountProcessor};
use rdkafka::Message;
use support::pipeline::{produce, Instance, Pipeline};

fn config(p: &Pipeline, delays_ms: &[u64]) -> Config {
    p.retry_config(delays_ms)
}

/// Outputs as (key, output) in each partition's order.
fn outputs(p: &Pipeline) -> Vec<(String, CountOutput)> {
    p.count_outputs()
}

fn dead_letters(p: &Pipeline) -> Vec<DeadLetter> {
    p.dead_letters()
}

fn ids_of(p: &Pipeline, key: &str) -> Vec<String> {
    outputs(p)
        .into_iter()
        .filter(|(k, _)| k == key)
        .map(|(_, o)| o.id)
        .collect()
}

#[test]
fn a_transient_failure_that_heals_on_retry_is_output_once() {
    let p = Pipeline::new("retry-heal", 1);
    produce(&p.input, "a", "transient:1:5", "t1");
    let inst = Instance::start(
        &config(&p, &[300, 300, 300]),
        CountProcessor::new(&p.output),
    );
    support::wait_for("t1's output", Duration::from_secs(30), || {
        (!ids_of(&p, "a").is_empty()).then_some(())
    });
    p.wait_drained(Duration::from_secs(30));
    let summary = inst.stop();
    assert_eq!(ids_of(&p, "a"), vec!["t1"]);
    assert_eq!(summary.retried, 1, "{summary:?}");
    assert!(dead_letters(&p).is_empty());
}

#[test]
fn an_always_failing_record_climbs_every_level_with_its_delays_then_lands_in_the_dlt() {
    let p = Pipeline::new("retry-exhaust", 1);
    let delays = [400u64, 800, 1200];
    produce(&p.input, "a", "transient:99:1", "t2");
    let started = Instant::now();
    // The input's own ladder (three levels) overrides the one-level default.
    let mut cfg = config(&p, &[50]);
    cfg.retry.per_topic.insert(p.input.clone(), delays.to_vec());
    let inst = Instance::start(&cfg, CountProcessor::new(&p.output));
    let d = support::wait_for("the DLT record", Duration::from_secs(60), || {
        dead_letters(&p).into_iter().next()
    });
    inst.stop();
    assert!(started.elapsed() >= Duration::from_millis(2400));
    assert_eq!(d.key.as_deref(), Some("a"));
    assert_eq!(d.value.as_deref(), Some(&b"transient:99:1"[..]));
    assert_eq!(d.header("id"), Some("t2"), "the original headers are kept");
    assert_eq!(d.dlt("error.class"), Some("transient-exhausted"));
    assert_eq!(d.dlt("attempts"), Some("4"));
    assert_eq!(d.dlt("original.topic"), Some(p.input.as_str()));
    assert_eq!(d.dlt("original.partition"), Some("0"));
    assert_eq!(d.dlt("original.offset"), Some("0"));
    assert_eq!(d.dlt("group"), Some(p.app.as_str()));
    assert!(d
        .dlt("error.message")
        .is_some_and(|m| m.contains("simulated dependency outage")));
    let first: i64 = d
        .dlt("first.failure.at")
        .and_then(|v| v.parse().ok())
        .expect("first failure");
    let last: i64 = d
        .dlt("last.failure.at")
        .and_then(|v| v.parse().ok())
        .expect("last failure");
    let total: i64 = delays.iter().sum::<u64>() as i64;
    assert!(
        last - first >= total - 50,
        "delays not respected: {} ms between first and last failure",
        last - first
    );
    assert!(
        last - first <= total + 6000,
        "too slow: {} ms",
        last - first
    );
    // Each level held the record until its due time: the next failure is never before it.
    let mut due_and_failed = Vec::new();
    for level in 1..=3 {
        let topic = eosflow::internals::retry::retry_topic(&p.input, level);
        read_all(&support::clients(), &topic, Duration::from_secs(30), |m| {
            use rdkafka::message::Headers;
            let h = |name: &str| -> Option<i64> {
                m.headers()?
                    .iter()
                    .find(|h| h.key == name)
                    .and_then(|h| std::str::from_utf8(h.value?).ok()?.parse().ok())
            };
            due_and_failed.push((
                level,
                h("eosflow.retry.due_at"),
                h("eosflow.failure.last_at"),
            ));
            Ok(())
        })
        .expect("read retry level");
    }
    assert_eq!(
        due_and_failed.len(),
        3,
        "one record per level: {due_and_failed:?}"
    );
    for (i, (level, due, failed)) in due_and_failed.iter().enumerate() {
        let (due, failed) = (due.expect("due_at"), failed.expect("last_at"));
        assert_eq!(due - failed, delays[i] as i64, "level {level} delay");
        let next_failure = due_and_failed.get(i + 1).and_then(|x| x.2).unwrap_or(last);
        assert!(
            next_failure >= due - 20,
            "level {level} was processed {} ms before due",
            due - next_failure
        );
    }
}

#[test]
fn a_permanent_failure_skips_the_ladder() {
    let p = Pipeline::new("retry-permanent", 1);
    produce(&p.input, "a", "not-a-number", "bad1");
    produce(&p.input, "a", "7", "good1");
    let inst = Instance::start(
        &config(&p, &[300, 300, 300]),
        CountProcessor::new(&p.output),
    );
    support::wait_for("the good record's output", Duration::from_secs(30), || {
        (!ids_of(&p, "a").is_empty()).then_some(())
    });
    p.wait_drained(Duration::from_secs(30));
    let summary = inst.stop();
    assert_eq!(summary.retried, 0);
    let dl = dead_letters(&p);
    assert_eq!(dl.len(), 1);
    assert_eq!(dl[0].dlt("error.class"), Some("permanent"));
    assert_eq!(dl[0].dlt("attempts"), Some("1"));
    assert!(dl[0]
        .dlt("error.message")
        .is_some_and(|m| m.contains("not a decimal integer")));
    assert_eq!(
        p.count(&eosflow::internals::retry::retry_topic(&p.input, 1)),
        0
    );
    assert_eq!(ids_of(&p, "a"), vec!["good1"]);
}

#[test]
fn records_behind_a_poison_record_keep_flowing() {
    let p = Pipeline::new("retry-poison", 1);
    produce(&p.input, "poison", "transient:99:1", "p1");
    for i in 0..50 {
        produce(&p.input, &format!("k{i}"), "1", &format!("o{i}"));
    }
    let inst = Instance::start(
        &config(&p, &[4000, 4000, 4000]),
        CountProcessor::new(&p.output),
    );
    support::wait_for(
        "50 outputs of the other keys",
        Duration::from_secs(30),
        || (outputs(&p).len() == 50).then_some(()),
    );
    assert!(
        dead_letters(&p).is_empty(),
        "the others flowed while the poison record was still in the ladder"
    );
    inst.stop();
}

#[test]
fn a_keys_later_records_wait_behind_its_retried_record() {
    let p = Pipeline::new("retry-order", 1);
    produce(&p.input, "k", "transient:1:1", "k1");
    produce(&p.input, "k", "2", "k2");
    produce(&p.input, "j", "5", "j1");
    produce(&p.input, "k", "3", "k3");
    let inst = Instance::start(
        &config(&p, &[800, 800, 800]),
        CountProcessor::new(&p.output),
    );
    support::wait_for("4 outputs", Duration::from_secs(30), || {
        (outputs(&p).len() == 4).then_some(())
    });
    p.wait_drained(Duration::from_secs(30));
    let summary = inst.stop();
    let out = outputs(&p);
    // j was not held up by k's retry...
    assert_eq!(out[0].1.id, "j1", "{out:?}");
    // ...and k's records kept their order through the retry, counts 1, 2, 3.
    let k: Vec<(String, i64)> = out
        .iter()
        .filter(|(key, _)| key == "k")
        .map(|(_, o)| (o.id.clone(), o.count))
        .collect();
    assert_eq!(
        k,
        vec![("k1".into(), 1), ("k2".into(), 2), ("k3".into(), 3)]
    );
    assert_eq!(summary.parked_followers, 2, "{summary:?}");
    assert_eq!(
        p.count(&eosflow::internals::retry::retry_topic(&p.input, 1)),
        1,
        "only the head climbs the ladder; its followers wait in the state store"
    );
}

#[test]
fn a_parked_key_keeps_its_order_when_its_partition_moves_to_another_instance() {
    let p = Pipeline::new("retry-rebalance", 2);
    // Enough keys that both partitions hold parked keys; each key: a failing head, then followers.
    let keys: Vec<String> = (0..6).map(|i| format!("key{i}")).collect();
    for k in &keys {
        produce(&p.input, k, "transient:1:1", &format!("{k}-1"));
    }
    for k in &keys {
        produce(&p.input, k, "2", &format!("{k}-2"));
        produce(&p.input, k, "3", &format!("{k}-3"));
    }
    let cfg = config(&p, &[3000, 3000, 3000]);
    let a = Instance::start(&cfg, CountProcessor::new(&p.output));
    // While every head waits in retry.1, the followers are parked in a's stores...
    support::wait_for(
        "6 heads in the ladder and 12 followers parked",
        Duration::from_secs(30),
        || {
            let input_lag =
                eosflow_verify::group_lag(&support::clients(), &p.app, &p.input, 2).expect("lag");
            (input_lag == 0 && p.count(&eosflow::internals::retry::retry_topic(&p.input, 1)) >= 6)
                .then_some(())
        },
    );
    // ...then b joins and a leaves: the partitions, their parked sets and ladders move to b.
    let mut cfg_b = cfg.clone();
    cfg_b.app.instance_id = "b".into();
    let b = Instance::start(&cfg_b, CountProcessor::new(&p.output));
    std::thread::sleep(Duration::from_secs(1));
    let sa = a.stop();
    support::wait_for("18 outputs", Duration::from_secs(60), || {
        (outputs(&p).len() == 18).then_some(())
    });
    p.wait_drained(Duration::from_secs(30));
    let sb = b.stop();
    assert!(sa.parked_followers > 0, "a parked the followers: {sa:?}");
    assert!(!sb.restores.is_empty(), "b took partitions over: {sb:?}");
    let mut per_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, o) in outputs(&p) {
        per_key.entry(k).or_default().push(o.id);
    }
    for k in &keys {
        let want: Vec<String> = (1..=3).map(|n| format!("{k}-{n}")).collect();
        assert_eq!(per_key.get(k), Some(&want), "order of {k}");
    }
}

/// Fails transiently on `dep` values until healed; counts otherwise.
struct Dependent {
    healthy: Arc<AtomicBool>,
    inner: CountProcessor,
}

impl Processor for Dependent {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        if r.value == Some(b"dep") {
            if !self.healthy.load(Ordering::Relaxed) {
                return Err(ProcessError::transient("payment service unavailable"));
            }
            return self.inner.process(
                ctx,
                &Record {
                    value: Some(b"10"),
                    ..*r
                },
            );
        }
        self.inner.process(ctx, r)
    }
}

#[test]
fn redriving_a_dead_letter_twice_yields_one_output() {
    let p = Pipeline::new("retry-redrive", 1);
    let healthy = Arc::new(AtomicBool::new(false));
    produce(&p.input, "a", "dep", "d1");
    let inst = Instance::start(
        &config(&p, &[200, 200]),
        ProcessorSpec::new(Dependent {
            healthy: healthy.clone(),
            inner: CountProcessor::new(&p.output),
        })
        .store_name("count"),
    );
    support::wait_for("the DLT record", Duration::from_secs(30), || {
        (!dead_letters(&p).is_empty()).then_some(())
    });
    // The CLI reports it.
    let list = std::process::Command::new(env!("CARGO_BIN_EXE_eosflow"))
        .args(["dlt", "list", &p.input])
        .env("EOSFLOW_KAFKA_BOOTSTRAP", support::bootstrap())
        .output()
        .expect("eosflow dlt list");
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success() && text.contains("transient-exhausted") && text.contains("1 records"),
        "{text}"
    );

    healthy.store(true, Ordering::Relaxed);
    let clients = support::clients();
    for _ in 0..2 {
        let letters = tooling::read(
            &clients,
            &p.dlt,
            &Selector {
                id: Some("d1".into()),
                ..Selector::default()
            },
        )
        .expect("read");
        assert_eq!(letters.len(), 1);
        tooling::redrive(
            &clients,
            &p.app,
            &p.dlt,
            &letters,
            "payment service is back",
            |_| {},
        )
        .expect("redrive");
    }
    support::wait_for("the redriven output", Duration::from_secs(30), || {
        (!ids_of(&p, "a").is_empty()).then_some(())
    });
    p.wait_drained(Duration::from_secs(30));
    let summary = inst.stop();
    assert_eq!(ids_of(&p, "a"), vec!["d1"], "two redrives, one output");
    assert_eq!(summary.dedup_hits, 1, "{summary:?}");
    let mut audit = 0;
    read_all(
        &clients,
        tooling::AUDIT_TOPIC,
        Duration::from_secs(30),
        |m| {
            if m.payload()
                .map(|v| String::from_utf8_lossy(v).to_string())
                .is_some_and(|v| v.contains("payment service is back") && v.contains(&p.dlt))
            {
                audit += 1;
            }
            Ok(())
        },
    )
    .expect("read audit");
    assert_eq!(audit, 2, "each redrive is audited");

    // Purge needs a reason, records it, and empties the DLT.
    let purge = std::process::Command::new(env!("CARGO_BIN_EXE_eosflow"))
        .args([
            "dlt",
            "purge",
            &p.input,
            "--reason",
            "redriven and verified",
        ])
        .env("EOSFLOW_KAFKA_BOOTSTRAP", support::bootstrap())
        .output()
        .expect("eosflow dlt purge");
    assert!(
        purge.status.success(),
        "{}",
        String::from_utf8_lossy(&purge.stderr)
    );
    assert!(
        dead_letters(&p).is_empty(),
        "the DLT is empty after the purge"
    );
    let mut purges = 0;
    read_all(
        &clients,
        tooling::AUDIT_TOPIC,
        Duration::from_secs(30),
        |m| {
            let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
            if v.contains("\"purge\"") && v.contains("redriven and verified") && v.contains(&p.dlt)
            {
                purges += 1;
            }
            Ok(())
        },
    )
    .expect("read audit");
    assert_eq!(purges, 1);
}

#[test]
fn kill_9_during_forwarding_neither_loses_nor_duplicates_forwarded_records() {
    let work = std::env::temp_dir().join(support::unique("eosflow-retry-verify"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_eosflow"))
        .args([
            "verify",
            "--records",
            "6000",
            "--keys",
            "60",
            "--partitions",
            "4",
            "--instances",
            "2",
            "--kills",
            "3",
            "--duration-secs",
            "10",
            "--duplicate-every",
            "0",
            "--transient-every",
            "5",
            "--drain-timeout-secs",
            "150",
            "--work-dir",
        ])
        .arg(&work)
        .env("EOSFLOW_KAFKA_BOOTSTRAP", support::bootstrap())
        .env("EOSFLOW_RETRY_DELAYS_MS", "300,300,300")
        .output()
        .expect("run eosflow verify");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "verify failed\nstdout: {stdout}\nstderr: {stderr}"
    );
    let line = stdout.lines().last().unwrap_or_default();
    for expected in [
        "records=6000",
        "lost=0",
        "duplicated=0",
        "state_mismatches=0",
        "sequence_breaks=0",
        "kills=3",
    ] {
        assert!(
            line.contains(expected),
            "closing line {line:?} lacks {expected}"
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// Writes `records` (key, value, id header) to `topic` in order with one producer.
fn produce_all(topic: &str, records: &[(String, String, String)]) {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let producer: ThreadedProducer<DefaultProducerContext> = support::clients()
        .config(eosflow::kafka::ClientRole::Idempotent)
        .create()
        .expect("producer");
    for (key, value, id) in records {
        let headers = OwnedHeaders::new().insert(Header {
            key: "id",
            value: Some(id.as_bytes()),
        });
        let mut record = BaseRecord::<str, str>::to(topic)
            .key(key)
            .payload(value)
            .headers(headers);
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Err((e, back)) = producer.send(record) {
            assert!(
                e.to_string().contains("Queue full") && Instant::now() < deadline,
                "send: {e}"
            );
            let _ = producer.flush(Duration::from_millis(50));
            record = back;
        }
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
}

/// Issue #32 (1), the drain-only batch: a key's head fails once, and more followers than one
/// drain chunk wait behind it. When the head succeeds (a batch with the retry level's offset)
/// the first chunk drains; the rest drains in the next batch, which consumes no input: a
/// commit without input offsets. That commit lands but is reported unknown (the hidden fault
/// switch). The runtime cannot ask the group's offsets about it: it restores the partition
/// from its changelog, which holds the drained followers as gone, so none is processed twice.
/// (Before, such a batch counted as not committed and the followers were drained again.)
#[test]
fn a_drain_only_batch_whose_commit_outcome_is_unknown_emits_each_follower_once() {
    let p = Pipeline::new("retry-drain-unknown", 1);
    let followers = eosflow::internals::retry::parked::DRAIN_CHUNK + 500;
    let mut records = vec![(
        "k".to_string(),
        "transient:1:1".to_string(),
        "k0".to_string(),
    )];
    records.extend((1..=followers).map(|i| ("k".to_string(), "1".to_string(), format!("k{i}"))));
    produce_all(&p.input, &records);
    // The topology has no timers, tables or re-keys: only draining can make a batch without
    // input offsets.
    eosflow::internals::processor::runtime::faults::report_next_offsetless_commit_unknown(&p.app);
    let inst = Instance::start(
        &config(&p, &[800, 800, 800]),
        CountProcessor::new(&p.output),
    );
    support::wait_for(
        "the drain-only batch's commit reported unknown",
        Duration::from_secs(90),
        || {
            (!eosflow::internals::processor::runtime::faults::offsetless_commit_unknown_armed(
                &p.app,
            ))
            .then_some(())
        },
    );
    support::wait_for("every follower's output", Duration::from_secs(90), || {
        (ids_of(&p, "k").len() as u64 > followers).then_some(())
    });
    // A later record of the key: its output follows any second drain of the followers.
    produce(&p.input, "k", "1", "last");
    support::wait_for("the later record's output", Duration::from_secs(60), || {
        ids_of(&p, "k").iter().any(|id| id == "last").then_some(())
    });
    p.wait_drained(Duration::from_secs(30));
    let summary = inst.stop();
    let k: Vec<(String, i64)> = outputs(&p)
        .into_iter()
        .filter(|(key, _)| key == "k")
        .map(|(_, o)| (o.id, o.count))
        .collect();
    let want: Vec<(String, i64)> = (0..=followers)
        .map(|i| format!("k{i}"))
        .chain(["last".to_string()])
        .zip(1..)
        .collect();
    assert_eq!(k.len(), want.len(), "each record's output once");
    assert!(k == want, "in order, counted once each");
    assert_eq!(summary.parked_followers, followers, "{summary:?}");
    assert!(
        summary.restores.len() >= 2,
        "restored at the start and again after the unknown outcome: {:?}",
        summary.restores
    );
    assert!(dead_letters(&p).is_empty());
    let _ = std::fs::remove_dir_all(&p.state_root);
}
