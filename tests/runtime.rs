//! The exactly-once runtime against the real broker: commit/abort, dedup, restore after an
//! instance is replaced, rebalancing between instances, and crash recovery from the checkpoint.

mod support;

use support::pipeline::{produce_range, produce_raw, Instance, Pipeline};

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::processor::Runtime;
use eosflow::processor::{Application, Context, ProcessError, Processor, ProcessorSpec, Record};
use eosflow_verify::check::read_state;
use eosflow_verify::count::CountProcessor;
use eosflow_verify::Workload;
use rdkafka::Message;

#[test]
fn aborted_batches_leave_no_trace_and_are_processed_again_exactly_once() {
    /// Fails the transaction the first time it meets "boom" (an oversize emit the producer
    /// refuses after other records of the batch were sent), then dead-letters it.
    struct AbortOnce {
        inner: CountProcessor,
        failed: bool,
    }
    impl Processor for AbortOnce {
        fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
            if r.value == Some(b"boom") && !self.failed {
                self.failed = true;
                ctx.emit("nowhere", None, Some(vec![0u8; 8 * 1024 * 1024]), vec![]);
                return Ok(());
            }
            self.inner.process(ctx, r)
        }
    }

    let p = Pipeline::new("rt-abort", 2);
    let w = Workload {
        records: 400,
        keys: 10,
        duplicate_every: 0,
        transient_every: 0,
    };
    w.produce(&support::clients(), &p.input, Duration::ZERO)
        .expect("produce");
    produce_raw(&p.input, "k1", "boom");
    let mut cfg = p.config("a");
    cfg.processor.commit_interval_ms = 500;
    let inst = Instance::start(
        &cfg,
        ProcessorSpec::new(AbortOnce {
            inner: CountProcessor::new(&p.output),
            failed: false,
        })
        .store_name("count"),
    );
    p.wait_drained(Duration::from_secs(90));
    let summary = inst.stop();
    assert!(
        summary.aborts >= 1,
        "the oversize emit must abort a transaction: {summary:?}"
    );
    assert_eq!(summary.dead_lettered, 1, "{summary:?}");

    let verdict = p.assert_exactly_once(&w);
    assert_eq!(verdict.outputs, 400, "{verdict}");
    let mut dlt_reason = String::new();
    read_all(&support::clients(), &p.dlt, Duration::from_secs(30), |m| {
        use rdkafka::message::Headers;
        if let Some(h) = m.headers() {
            for h in h.iter() {
                if h.key == "eosflow.dlt.error.message" {
                    dlt_reason = String::from_utf8_lossy(h.value.unwrap_or_default()).to_string();
                }
            }
        }
        Ok(())
    })
    .expect("read DLT");
    // The record whose output could not be written is isolated and dead-lettered with the
    // cause, instead of aborting its batch again and again.
    assert!(dlt_reason.contains("nowhere"), "DLT reason: {dlt_reason:?}");
}

#[test]
fn resent_ids_are_processed_once() {
    let p = Pipeline::new("rt-dedup", 3);
    let w = Workload {
        records: 300,
        keys: 7,
        duplicate_every: 10,
        transient_every: 0,
    };
    let sent = w
        .produce(&support::clients(), &p.input, Duration::ZERO)
        .expect("produce");
    assert_eq!(sent, 330);
    let inst = Instance::start(&p.config("a"), CountProcessor::new(&p.output));
    p.wait_drained(Duration::from_secs(90));
    let summary = inst.stop();
    assert_eq!(summary.dedup_hits, 30, "{summary:?}");
    let verdict = p.assert_exactly_once(&w);
    assert_eq!(verdict.outputs, 300);
}

#[test]
fn a_replacement_instance_restores_state_from_the_changelog() {
    let p = Pipeline::new("rt-restore", 2);
    let w = Workload {
        records: 600,
        keys: 12,
        duplicate_every: 0,
        transient_every: 0,
    };
    // First half by instance a.
    let first = Workload { records: 300, ..w };
    first
        .produce(&support::clients(), &p.input, Duration::ZERO)
        .expect("produce");
    let a = Instance::start(&p.config("a"), CountProcessor::new(&p.output));
    p.wait_drained(Duration::from_secs(90));
    a.stop();
    // Instance b on another machine: empty state dir, must rebuild from the changelog.
    let mut cfg_b = p.config("b");
    cfg_b.state.dir = p.state_root.join("elsewhere");
    // Ten ids a already processed, re-sent (an upstream retry): b knows them only from the
    // changelog's dedup batches.
    produce_range(&p.input, &w, 0..10);
    // Second half: records 300..600 of the same workload (ids, keys and amounts continue).
    produce_range(&p.input, &w, 300..600);
    let b = Instance::start(&cfg_b, CountProcessor::new(&p.output));
    p.wait_drained(Duration::from_secs(90));
    let summary = b.stop();
    assert_eq!(summary.dedup_hits, 10, "{summary:?}");
    let replayed: u64 = summary.restores.iter().map(|(_, s)| s.records).sum();
    assert!(
        replayed > 0,
        "b started empty and must have replayed the changelog: {summary:?}"
    );
    assert!(
        summary.restores.iter().all(|(_, s)| s.from_offset == 0),
        "{summary:?}"
    );
    // Counts continue where a stopped: per key 1..=n with no restart at 1.
    p.assert_exactly_once(&w);
}

#[test]
fn partitions_move_between_two_instances_without_loss_or_duplicates() {
    let p = Pipeline::new("rt-rebalance", 6);
    let w = Workload {
        records: 6000,
        keys: 60,
        duplicate_every: 0,
        transient_every: 0,
    };
    let producer = {
        let input = p.input.clone();
        std::thread::spawn(move || w.produce(&support::clients(), &input, Duration::from_secs(12)))
    };
    let a = Instance::start(&p.config("a"), CountProcessor::new(&p.output));
    std::thread::sleep(Duration::from_secs(3));
    // b joins: the group splits the partitions (and a's stores move to b through the changelog).
    let b = Instance::start(&p.config("b"), CountProcessor::new(&p.output));
    std::thread::sleep(Duration::from_secs(4));
    // a leaves cleanly: all partitions move to b.
    let sa = a.stop();
    producer.join().expect("producer thread").expect("produce");
    p.wait_drained(Duration::from_secs(120));
    let sb = b.stop();
    assert!(
        sa.records > 0 && sb.records > 0,
        "both instances must have worked: a={sa:?} b={sb:?}"
    );
    assert!(!sb.restores.is_empty());
    let verdict = p.assert_exactly_once(&w);
    assert_eq!(verdict.outputs, 6000);
}

/// `(partition, replayed, store_keys)` from the runtime's "restored" log lines.
fn restore_lines(log: &Path) -> Vec<(i32, u64, u64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let field = |name: &str| -> Option<u64> {
                let start = l.find(&format!("{name}="))? + name.len() + 1;
                l[start..]
                    .split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            };
            if !l.contains("restored partition=") {
                return None;
            }
            Some((
                field("restored partition")? as i32,
                field("replayed")?,
                field("store_keys")?,
            ))
        })
        .collect()
}

#[test]
fn after_kill_9_only_the_changelog_tail_is_replayed() {
    let p = Pipeline::new("rt-crash", 2);
    let w = Workload {
        records: 4000,
        keys: 200,
        duplicate_every: 0,
        transient_every: 0,
    };
    std::fs::create_dir_all(&p.state_root).expect("state root");
    let log1 = p.state_root.join("first.log");
    let log2 = p.state_root.join("second.log");
    let producer = {
        let input = p.input.clone();
        std::thread::spawn(move || w.produce(&support::clients(), &input, Duration::from_secs(6)))
    };
    let mut first = p.spawn("a", &log1, &[]);
    // Let it commit some batches, then kill it mid-stream: no shutdown, no commit, no leave.
    support::wait_for(
        "the first incarnation to commit output",
        Duration::from_secs(60),
        || (p.count(&p.output) > 1000).then_some(()),
    );
    first.kill().expect("kill -9");
    first.wait().expect("reap");
    producer.join().expect("producer thread").expect("produce");
    let changelog_total = p.count(&p.changelog) as u64;

    let mut second = p.spawn("a", &log2, &[]);
    p.wait_drained(Duration::from_secs(120));
    second.kill().expect("stop");
    second.wait().expect("reap");

    let restores = restore_lines(&log2);
    assert_eq!(
        restores.len(),
        2,
        "one restore per partition; log: {}",
        log2.display()
    );
    let replayed: u64 = restores.iter().map(|r| r.1).sum();
    let store_keys: u64 = restores.iter().map(|r| r.2).sum();
    assert!(store_keys > 0, "{restores:?}");
    assert!(
        replayed * 5 < changelog_total,
        "the restart must replay only the tail after the checkpoint: replayed {replayed} of {changelog_total} changelog records ({restores:?})"
    );
    p.assert_exactly_once(&w);
    let state =
        read_state(&support::clients(), &p.changelog, Duration::from_secs(60)).expect("state");
    assert_eq!(state.len(), 200);
}

#[test]
fn reading_to_the_end_waits_for_an_open_transaction_instead_of_skipping_it() {
    // Regression: the end used to be asked of a read_committed client, which answers the last
    // stable offset. A restore that started while the previous owner's commit markers were in
    // flight ended early and missed committed state (found by `eosflow verify`).
    let topic = support::unique("rt-open-txn");
    support::create_topics(&[&topic], 1);
    let clients = support::clients();
    let sink = eosflow::internals::sink::TxnSink::new(
        &clients,
        &support::unique("rt-open-txn"),
        Duration::from_secs(20),
    )
    .expect("init_transactions");
    sink.begin().expect("begin");
    for v in ["a", "b", "c"] {
        sink.send(&topic, Some(0), Some(b"k"), Some(v.as_bytes()), &[])
            .expect("send");
    }
    // Make sure the records are in the log (high watermark 3) while the transaction is open.
    support::wait_for(
        "the open transaction's records to reach the log",
        Duration::from_secs(20),
        || {
            let c: rdkafka::consumer::BaseConsumer = clients
                .config(eosflow::kafka::ClientRole::Reader)
                .set("isolation.level", "read_uncommitted")
                .create()
                .ok()?;
            use rdkafka::consumer::Consumer;
            let (_, high) = c.fetch_watermarks(&topic, 0, Duration::from_secs(5)).ok()?;
            (high >= 3).then_some(())
        },
    );
    let reader = {
        let topic = topic.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            read_all(&support::clients(), &topic, Duration::from_secs(60), |m| {
                got.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string());
                Ok(())
            })
            .map(|_| got)
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !reader.is_finished(),
        "the read must not end below an open transaction"
    );
    sink.commit().expect("commit");
    let got = reader.join().expect("reader thread").expect("read");
    assert_eq!(got, vec!["a", "b", "c"]);
}

#[test]
fn a_fenced_instance_stops_with_an_error_instead_of_spinning() {
    let p = Pipeline::new("rt-fenced", 1);
    let mut cfg = p.config("x");
    cfg.processor.static_membership = true;
    let runtime = Runtime::new(&cfg, CountProcessor::new(&p.output)).expect("runtime starts");
    let stop = Arc::new(AtomicBool::new(false));
    let handle = {
        let stop = stop.clone();
        std::thread::spawn(move || runtime.run(stop))
    };
    let first = Workload {
        records: 60,
        keys: 5,
        duplicate_every: 0,
        transient_every: 0,
    };
    produce_range(&p.input, &first, 0..50);
    p.wait_drained(Duration::from_secs(60));
    // A second pod with the same name starts (same instance id, same static membership): its
    // producer fences ours and its consumer takes our place in the group.
    let mut successor_cfg = cfg.clone();
    successor_cfg.state.dir = p.state_root.join("successor");
    let successor = Instance::start(&successor_cfg, CountProcessor::new(&p.output));
    produce_range(&p.input, &first, 50..60);
    support::wait_for(
        "the superseded runtime to stop by itself",
        Duration::from_secs(60),
        || handle.is_finished().then_some(()),
    );
    let outcome = handle.join().expect("runtime thread");
    let err = outcome.expect_err("a superseded runtime must return an error");
    assert!(err.to_string().contains("fenced"), "{err}");
    assert!(
        !stop.load(Ordering::Relaxed),
        "it stopped on its own, not because it was asked to"
    );
    // The successor carries on, and nothing of the fenced attempt is visible.
    p.wait_drained(Duration::from_secs(60));
    successor.stop();
    let verdict = p.assert_exactly_once(&first);
    assert_eq!(verdict.outputs, 60, "{verdict}");
}

#[test]
fn dedup_ids_expire_after_the_retention_window_with_changelog_tombstones() {
    let p = Pipeline::new("rt-dedup-expiry", 1);
    let mut cfg = p.config("a");
    cfg.state.dedup_retention_secs = 1;
    cfg.state.dedup_purge_interval_secs = 1;
    let w = Workload {
        records: 20,
        keys: 4,
        duplicate_every: 0,
        transient_every: 0,
    };
    w.produce(&support::clients(), &p.input, Duration::ZERO)
        .expect("produce");
    let inst = Instance::start(&cfg, CountProcessor::new(&p.output));
    p.wait_drained(Duration::from_secs(60));
    // Purging happens inside a transaction: keep feeding fresh records until the 20 ids are gone.
    let mut trigger = 1000;
    // Ids reach the changelog in one record per batch (`b…`); expiry tombstones the batch.
    support::wait_for(
        "the batches holding the 20 ids tombstoned in the changelog",
        Duration::from_secs(60),
        || {
            trigger += 1;
            produce_raw(&p.input, "k0", &trigger.to_string());
            std::thread::sleep(Duration::from_millis(500));
            let mut batches: Vec<(Vec<u8>, Vec<String>)> = Vec::new();
            let mut tombstoned = std::collections::BTreeSet::new();
            read_all(
                &support::clients(),
                &p.changelog,
                Duration::from_secs(30),
                |m| {
                    let Some(k) = m.key().filter(|k| k.starts_with(b"b")) else {
                        return Ok(());
                    };
                    match m.payload() {
                        None => {
                            tombstoned.insert(k.to_vec());
                        }
                        Some(v) => {
                            let ids = eosflow::internals::state::dedup::decode(v)
                                .expect("a dedup batch record")
                                .into_iter()
                                .map(|i| String::from_utf8_lossy(i).to_string())
                                .collect();
                            batches.push((k.to_vec(), ids));
                        }
                    }
                    Ok(())
                },
            )
            .expect("read changelog");
            let expired: std::collections::BTreeSet<&String> = batches
                .iter()
                .filter(|(k, _)| tombstoned.contains(k))
                .flat_map(|(_, ids)| ids)
                .collect();
            (0..20)
                .all(|i| expired.contains(&format!("r{i}")))
                .then_some(())
        },
    );
    // Past the window, a re-sent id is new again (the window is the promise, not forever).
    produce_range(&p.input, &w, 0..1);
    p.wait_drained(Duration::from_secs(60));
    let summary = inst.stop();
    assert_eq!(summary.dedup_hits, 0, "{summary:?}");
    let mut r0 = 0;
    read_all(
        &support::clients(),
        &p.output,
        Duration::from_secs(30),
        |m| {
            if m.payload()
                .is_some_and(|v| v.starts_with(br#"{"id":"r0","#))
            {
                r0 += 1;
            }
            Ok(())
        },
    )
    .expect("read output");
    assert_eq!(r0, 2, "r0 was processed before expiry and again after it");
}
