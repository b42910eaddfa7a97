//! Processing threads (issue #21, item 1) on the real broker: one `eosflow run` instance of the
//! counting topology with `processor.threads = 2` is two members of its consumer group with
//! disjoint partitions, each thread committing its own transactions; the instance is
//! `kill -9`ed twice mid-stream and restarted, and the read_committed output and the final
//! state still hold every input exactly once.

mod support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eosflow::processor::standby::assigned_partitions;
use eosflow_verify::Workload;
use rdkafka::consumer::{BaseConsumer, Consumer};
use support::pipeline::{produce_paced, produce_range, Pipeline, Running};

const PARTITIONS: i32 = 4;

/// The input partitions of each member of `group` once it is stable (`None` while it
/// rebalances or cannot be described).
fn members(group: &str, input: &str) -> Option<Vec<Vec<i32>>> {
    let consumer: BaseConsumer = support::clients()
        .config(eosflow::kafka::ClientRole::Reader)
        .create()
        .ok()?;
    let list = consumer
        .fetch_group_list(Some(group), Duration::from_secs(5))
        .ok()?;
    let g = list.groups().iter().find(|g| g.name() == group)?;
    if g.state() != "Stable" {
        return None;
    }
    g.members()
        .iter()
        .map(|m| assigned_partitions(m.assignment()?, input))
        .collect()
}

/// Waits until the group is the instance's two threads, with disjoint partitions covering the
/// input; returns them.
fn two_threads_share_the_partitions(p: &Pipeline) -> Vec<Vec<i32>> {
    support::wait_for(
        "the group to be two members (the instance's threads) splitting the partitions",
        Duration::from_secs(90),
        || {
            let m = members(&p.app, &p.input)?;
            let all: BTreeSet<i32> = m.iter().flatten().copied().collect();
            let total: usize = m.iter().map(Vec::len).sum();
            (m.len() == 2
                && m.iter().all(|parts| !parts.is_empty())
                && total == PARTITIONS as usize
                && all == (0..PARTITIONS).collect())
            .then_some(m)
        },
    )
}

/// The group's committed offsets of the input, summed over its partitions: what the instance
/// has processed for sure.
fn committed(p: &Pipeline) -> i64 {
    use rdkafka::{Offset, TopicPartitionList};
    let consumer: BaseConsumer = support::clients()
        .config(eosflow::kafka::ClientRole::Reader)
        .set("group.id", &p.app)
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        tpl.add_partition(&p.input, partition);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    committed
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => o,
            _ => 0,
        })
        .sum()
}

/// `text` without its ANSI colour sequences (`ESC [ … m`).
fn without_colours(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn spawn(p: &Pipeline) -> Running {
    p.spawn(
        "solo",
        &p.state_root.join("solo.log"),
        &[
            ("EOSFLOW_PROCESSOR_THREADS", "2"),
            ("EOSFLOW_PROCESSOR_SESSION_TIMEOUT_MS", "4000"),
            ("EOSFLOW_PROCESSOR_TRANSACTION_TIMEOUT_MS", "5000"),
        ],
    )
}

#[test]
fn two_threads_of_one_instance_process_disjoint_partitions_exactly_once_across_kill_9() {
    let p = Pipeline::new("threads", PARTITIONS);
    std::fs::create_dir_all(&p.state_root).expect("state root");
    let (records, phase1) = (48_000u64, 8_000u64);
    let w = Workload {
        records,
        keys: 400,
        duplicate_every: 50,
        transient_every: 0,
    };
    produce_range(&p.input, &w, 0..phase1);
    let mut instance = spawn(&p);
    let split = two_threads_share_the_partitions(&p);
    println!("threads: partitions per thread {split:?}");
    // The rest arrives at about 2 000 records/s (20 s) while the instance is killed twice.
    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (input, producing) = (p.input.clone(), producing.clone());
        std::thread::spawn(move || {
            produce_paced(&input, &w, phase1..records);
            producing.store(false, Ordering::Relaxed);
        })
    };
    for kill in 1..=2 {
        // The instance committing again (after the first start or the last restart).
        let before = committed(&p);
        support::wait_for(
            "the instance committing again",
            Duration::from_secs(60),
            || (committed(&p) >= before + 1_000).then_some(()),
        );
        instance.kill().expect("kill -9");
        instance.wait().expect("reaped");
        let (left, still) = (p.lag(), producing.load(Ordering::Relaxed));
        println!("threads: kill {kill} with {left} records uncommitted (producing: {still})");
        assert!(still || left > 0, "kill {kill} must land mid-stream");
        instance = spawn(&p);
        let split = two_threads_share_the_partitions(&p);
        println!("threads: after restart {kill}, partitions per thread {split:?}");
    }
    producer.join().expect("producer");
    p.wait_drained(Duration::from_secs(120));
    let verdict = p.assert_exactly_once(&w);
    println!("threads: {verdict}");
    // Each thread committed under its own transactional id.
    let log = without_colours(
        &std::fs::read_to_string(p.state_root.join("solo.log")).unwrap_or_default(),
    );
    for id in [format!("{}-solo", p.app), format!("{}-solo-t1", p.app)] {
        assert!(
            log.contains(&format!("transactional_id={id} ")),
            "no loop started with transactional.id {id}"
        );
    }
    drop(instance);
    let _ = std::fs::remove_dir_all(&p.state_root);
}
