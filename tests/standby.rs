//! Standby replicas (issue #21, item 3) on the real broker: two `eosflow run` instances of the
//! counting topology with `processor.standby_replicas = 1`; the owner of a partition is
//! `kill -9`ed mid-stream and the survivor, which kept a warm copy of that partition's store,
//! restores fewer than 1% of the store's records from the changelog (its
//! `eosflow_restore_records_total`), while the read_committed output still holds every input
//! exactly once. The same run without standbys restores (nearly) the whole store: the
//! comparison shows the copy is what saves the replay. Both print their failover times. The
//! run with a standby is repeated under the KIP-848 consumer protocol
//! (`processor.group_protocol = "consumer"`), whose groups the placement describes with
//! ConsumerGroupDescribe (`eosflow::internals::kafka::describe`).

mod support;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use eosflow::internals::kafka::reader::read_to_end;
use eosflow::internals::state::Column;
use eosflow_verify::Workload;
use rdkafka::Message;
use support::http::{free_addr, get, metric};
use support::pipeline::{produce_paced_in_background, produce_range, Pipeline, Running};

/// Records in all (`STANDBY_TEST_RECORDS` overrides it, for measuring larger stores by hand),
/// over half as many keys: each key gets two records. The first phase (four fifths) is
/// produced before the instances start; the second phase's records are all second ones, whose
/// counts the survivor can only get right from the state the dead owner left.
fn records() -> u64 {
    std::env::var("STANDBY_TEST_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// The values of label `label` on the series of `name`.
fn label_values(text: &str, name: &str, label: &str) -> BTreeSet<String> {
    let prefix = format!("{name}{{");
    let needle = format!("{label}=\"");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let rest = &l[l.find(&needle)? + needle.len()..];
            Some(rest[..rest.find('"')?].to_string())
        })
        .collect()
}

/// Records of `topic[partition]` the group `group` has not committed (read_committed offsets
/// against the high watermark).
fn partition_lag(group: &str, topic: &str, partition: i32) -> i64 {
    let clients = support::clients();
    let committed = eosflow_verify::group_committed(&clients, group, topic, partition + 1)
        .expect("committed offsets");
    let (_, high) = eosflow::internals::kafka::reader::watermarks(
        &clients,
        topic,
        partition,
        Duration::from_secs(10),
    )
    .expect("watermarks");
    high - committed[partition as usize]
}

fn scrape(addr: &str) -> Option<String> {
    get(addr, "/metrics").map(|(_, t)| t)
}

/// What one failover measured.
struct Failover {
    /// The partition that moved.
    partition: i32,
    /// Changelog records the survivor replayed for it.
    restored: f64,
    /// How long that restore took (its `eosflow_restore_seconds`).
    restore_seconds: f64,
    /// Keys in that partition's store at the end.
    store_keys: usize,
    /// Records in that partition's changelog at the end (what a restore from nothing replays,
    /// before compaction).
    changelog_records: usize,
    /// Kill → the survivor's assignment (detection: the session timeout).
    detected: Duration,
    /// Kill → the partition's store restored on the survivor.
    restored_after: Duration,
    /// Kill → the survivor consuming the partition's input again.
    processing_after: Duration,
}

fn spawn(p: &Pipeline, instance: &str, addr: &str, standbys: &str, protocol: &str) -> Running {
    let log = p.state_root.join(format!("{instance}.log"));
    p.spawn(
        instance,
        &log,
        &[
            ("EOSFLOW_METRICS_LISTEN", addr),
            ("EOSFLOW_PROCESSOR_STANDBY_REPLICAS", standbys),
            ("EOSFLOW_PROCESSOR_GROUP_PROTOCOL", protocol),
            ("EOSFLOW_PROCESSOR_SESSION_TIMEOUT_MS", "4000"),
            ("EOSFLOW_PROCESSOR_TRANSACTION_TIMEOUT_MS", "5000"),
        ],
    )
}

/// Runs the scenario with `standbys` replicas under the group `protocol` (`classic` or
/// `consumer`) and returns what the failover measured, after checking that the output holds
/// every input exactly once.
fn failover(name: &str, standbys: u32, protocol: &str) -> Failover {
    let p = Pipeline::new(name, 2);
    std::fs::create_dir_all(&p.state_root).expect("state root");
    let (records, phase1) = (records(), records() / 5 * 4);
    let w = Workload {
        records,
        keys: records / 2,
        duplicate_every: 0,
        transient_every: 0,
    };
    // In chunks: the producer's queue holds 100 000 messages.
    for from in (0..phase1).step_by(50_000) {
        produce_range(&p.input, &w, from..(from + 50_000).min(phase1));
    }
    let (addr_a, addr_b) = (free_addr(), free_addr());
    let standbys_text = standbys.to_string();
    // `a` alone first works off the first phase; `b` then joins and takes one partition.
    let mut a = spawn(&p, "a", &addr_a, &standbys_text, protocol);
    p.wait_drained(Duration::from_secs(120 + records / 1000));
    let _b = spawn(&p, "b", &addr_b, &standbys_text, protocol);
    let b_owns = support::wait_for(
        "b restored the partition it was given and a kept the other",
        Duration::from_secs(60),
        || {
            let b = scrape(&addr_b)?;
            let owns = label_values(&b, "eosflow_restore_records_total", "partition");
            let a = scrape(&addr_a)?;
            // Classic (eager): a is assigned again, the kept partition with it; consumer
            // (incremental): a only gives the moved partition up.
            let a_settled = if protocol == "consumer" {
                metric(&a, "eosflow_rebalances_total", &["kind=\"revoke\""])? >= 1.0
            } else {
                metric(&a, "eosflow_rebalances_total", &["kind=\"assign\""])? >= 2.0
            };
            (owns.len() == 1 && a_settled).then_some(owns)
        },
    );
    let b_partition: i32 = b_owns.iter().next().expect("one").parse().expect("number");
    let moved = 1 - b_partition;
    let changelog_label = format!("topic=\"{}\"", p.changelog);
    let moved_label = format!("partition=\"{moved}\"");
    if standbys > 0 {
        // Both copies warm: b keeps a's partition, a keeps b's, each with nothing left to apply.
        support::wait_for(
            "each instance's standby copy caught up with its changelog",
            Duration::from_secs(60),
            || {
                let b = scrape(&addr_b)?;
                let a = scrape(&addr_a)?;
                let b_lag = metric(
                    &b,
                    "eosflow_standby_lag_records",
                    &[&changelog_label, &moved_label],
                )?;
                let a_kept = metric(&a, "eosflow_standby_partitions", &[])?;
                let b_kept = metric(&b, "eosflow_standby_partitions", &[])?;
                (b_lag == 0.0 && a_kept == 1.0 && b_kept == 1.0).then_some(())
            },
        );
    }
    let consumed = |text: &str| {
        metric(
            text,
            "eosflow_records_consumed_total",
            &[&format!("topic=\"{}\"", p.input), &moved_label],
        )
        .unwrap_or(0.0)
    };
    let a_before = consumed(&scrape(&addr_a).expect("a's metrics"));
    let b_assigns = metric(
        &scrape(&addr_b).expect("b's metrics"),
        "eosflow_rebalances_total",
        &["kind=\"assign\""],
    )
    .unwrap_or(0.0);
    // The second phase arrives at about 2 000 records/s while `a` is killed in the middle of it.
    let (producing, producer) = produce_paced_in_background(&p.input, &w, phase1..records);
    support::wait_for(
        "a processing the second phase of its partition",
        Duration::from_secs(30),
        || (consumed(&scrape(&addr_a)?) >= a_before + 200.0).then_some(()),
    );
    a.kill().expect("kill -9");
    let killed = Instant::now();
    a.wait().expect("reaped");
    // Mid-stream: input of the moved partition that `a` never committed, or still arriving.
    let still_producing = producing.load(Ordering::Relaxed);
    let left = partition_lag(&p.app, &p.input, moved);
    println!("{name}: killed with {left} records of partition {moved} left (producing: {still_producing})");
    assert!(still_producing || left > 0, "the kill must land mid-stream");
    let (mut detected, mut restored_after) = (None, None);
    let processing_after = support::wait_for(
        "the survivor processing the moved partition",
        Duration::from_secs(60),
        || {
            let b = scrape(&addr_b)?;
            let assigns =
                metric(&b, "eosflow_rebalances_total", &["kind=\"assign\""]).unwrap_or(0.0);
            if assigns > b_assigns {
                detected.get_or_insert(killed.elapsed());
            }
            if metric(&b, "eosflow_restore_records_total", &[&moved_label]).is_some() {
                restored_after.get_or_insert(killed.elapsed());
            }
            (consumed(&b) > 0.0).then(|| killed.elapsed())
        },
    );
    producer.join().expect("producer");
    p.wait_drained(Duration::from_secs(120 + records / 1000));
    let b = scrape(&addr_b).expect("b's metrics");
    let restored = metric(&b, "eosflow_restore_records_total", &[&moved_label])
        .expect("the survivor restored the moved partition");
    let restore_seconds =
        metric(&b, "eosflow_restore_seconds_sum", &[&moved_label]).unwrap_or(f64::NAN);
    let verdict = p.assert_exactly_once(&w);
    println!("{name}: {verdict}");
    let mut keys = BTreeSet::new();
    let mut changelog_records = 0;
    read_to_end(
        &support::clients(),
        &p.changelog,
        &[(moved, None)].into(),
        Duration::from_secs(60),
        |m| {
            changelog_records += 1;
            if let Some((Column::State, k)) =
                Column::parse_changelog_key(m.key().unwrap_or_default())
            {
                keys.insert(k.to_vec());
            }
            Ok(())
        },
    )
    .expect("read the changelog");
    // The instances' logs are there too: `STANDBY_TEST_KEEP=1` keeps them for a look.
    if std::env::var_os("STANDBY_TEST_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&p.state_root);
    } else {
        println!("{name}: logs and stores kept in {}", p.state_root.display());
    }
    Failover {
        partition: moved,
        restored,
        restore_seconds,
        store_keys: keys.len(),
        changelog_records,
        detected: detected.unwrap_or(processing_after),
        restored_after: restored_after.unwrap_or(processing_after),
        processing_after,
    }
}

fn report(what: &str, f: &Failover) {
    println!(
        "{what}: partition {} moved; the survivor restored {} changelog records ({:.2}% of the store's {} keys; its changelog holds {} records) in {:.3} s; kill → assigned {:.1} s, → restored {:.1} s, → processing {:.1} s",
        f.partition,
        f.restored,
        100.0 * f.restored / f.store_keys.max(1) as f64,
        f.store_keys,
        f.changelog_records,
        f.restore_seconds,
        f.detected.as_secs_f64(),
        f.restored_after.as_secs_f64(),
        f.processing_after.as_secs_f64(),
    );
}

/// The moved partition's store is large enough to tell, and the survivor that kept a copy of
/// it restored under 1% of it.
fn assert_restored_under_one_percent(warm: &Failover) {
    assert!(
        warm.store_keys as u64 >= records() / 5,
        "the moved partition's store holds {} keys",
        warm.store_keys
    );
    assert!(
        warm.restored < warm.store_keys as f64 / 100.0,
        "with a standby the survivor restored {} of {} records",
        warm.restored,
        warm.store_keys
    );
}

#[test]
fn a_standby_takes_over_restoring_under_one_percent_of_the_store_and_exactly_once_holds() {
    let warm = failover("standby", 1, "classic");
    report("with a standby", &warm);
    let cold = failover("standby-none", 0, "classic");
    report("without standbys", &cold);
    assert_restored_under_one_percent(&warm);
    // Without a copy the survivor replays the store (what the first phase left at least).
    assert!(
        cold.restored >= cold.store_keys as f64 / 2.0,
        "without standbys the survivor restored only {} of {} records",
        cold.restored,
        cold.store_keys
    );
}

#[test]
fn under_the_consumer_protocol_a_standby_takes_over_restoring_under_one_percent_of_the_store() {
    // KIP-848 (`processor.group_protocol = "consumer"`): the placement describes the group with
    // ConsumerGroupDescribe (DescribeGroups sees no member of such a group, so without it no
    // copy would be placed and the survivor would replay the whole store).
    let warm = failover("standby-kip848", 1, "consumer");
    report("consumer protocol, with a standby", &warm);
    assert_restored_under_one_percent(&warm);
}
