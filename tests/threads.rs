//! Scaling an instance (issue #21, items 1 and 2) on the real broker.
//!
//! Processing threads: one `eosflow run` instance of the counting topology with
//! `processor.threads = 2` is two members of its consumer group with disjoint partitions, each
//! thread committing its own transactions; the instance is `kill -9`ed twice mid-stream and
//! restarted, and the read_committed output and the final state still hold every input exactly
//! once.
//!
//! Incremental rebalancing: under `processor.group_protocol = "consumer"` (KIP-848) a second
//! instance joining takes some partitions from the first, which keeps processing the others
//! the whole time (never revoked, committing while the newcomer is being assigned).

mod support;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use eosflow::internals::kafka::describe::describe_group;
use eosflow_verify::Workload;
use support::http::{free_addr, get, metric};
use support::pipeline::{
    produce_paced, produce_paced_in_background, produce_range, Pipeline, Running,
};

const PARTITIONS: i32 = 4;

/// The input partitions of each member of `group` once it is stable (`None` while it
/// rebalances or cannot be described).
fn members(group: &str, input: &str) -> Option<Vec<Vec<i32>>> {
    let group = describe_group(&support::clients(), group, Duration::from_secs(5)).ok()?;
    Some(group.owners(input)?.into_iter().map(|(_, p)| p).collect())
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

/// The group's committed offsets of the input, by partition.
fn committed_each(p: &Pipeline) -> Vec<i64> {
    eosflow_verify::group_committed(&support::clients(), &p.app, &p.input, PARTITIONS)
        .expect("committed offsets")
}

/// The group's committed offsets of the input, summed over its partitions: what the instance
/// has processed for sure.
fn committed(p: &Pipeline) -> i64 {
    committed_each(p).iter().sum()
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
    let (producing, producer) = produce_paced_in_background(&p.input, &w, phase1..records);
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
    let log = support::without_colours(
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

/// Input partitions named in the `partitions revoked` lines of an instance's log.
fn revoked_in(log: &str, input: &str) -> BTreeSet<i32> {
    let needle = format!("(\"{input}\", ");
    support::without_colours(log)
        .lines()
        .filter(|l| l.contains("partitions revoked"))
        .flat_map(|l| {
            l.match_indices(&needle)
                .filter_map(|(at, _)| {
                    let rest = &l[at + needle.len()..];
                    rest[..rest.find(')')?].parse().ok()
                })
                .collect::<Vec<i32>>()
        })
        .collect()
}

#[test]
fn a_member_joining_under_the_consumer_protocol_does_not_pause_the_partitions_it_does_not_take() {
    let p = Pipeline::new("incremental", PARTITIONS);
    std::fs::create_dir_all(&p.state_root).expect("state root");
    let records = 60_000u64;
    let w = Workload {
        records,
        keys: 400,
        duplicate_every: 0,
        transient_every: 0,
    };
    let (addr_a, addr_b) = (free_addr(), free_addr());
    let start = |name: &str, addr: &str| {
        p.spawn(
            name,
            &p.state_root.join(format!("{name}.log")),
            &[
                ("EOSFLOW_PROCESSOR_GROUP_PROTOCOL", "consumer"),
                ("EOSFLOW_METRICS_LISTEN", addr),
            ],
        )
    };
    let _a = start("a", &addr_a);
    // Records arrive at about 2 000 records/s (30 s) all along.
    let producer = {
        let input = p.input.clone();
        std::thread::spawn(move || produce_paced(&input, &w, 0..records))
    };
    let before = committed(&p);
    support::wait_for(
        "the first instance processing every partition",
        Duration::from_secs(60),
        || (committed(&p) >= before + 2_000).then_some(()),
    );
    let at_join = committed_each(&p);
    let joined = std::time::Instant::now();
    let _b = start("b", &addr_b);
    support::wait_for(
        "the second instance assigned partitions",
        Duration::from_secs(60),
        || {
            let text = get(&addr_b, "/metrics")?.1;
            (metric(&text, "eosflow_rebalances_total", &["kind=\"assign\""])? >= 1.0).then_some(())
        },
    );
    let at_assigned = committed_each(&p);
    let window = joined.elapsed();
    producer.join().expect("producer");
    p.wait_drained(Duration::from_secs(120));
    let verdict = p.assert_exactly_once(&w);
    println!("incremental: {verdict}");
    let log_a = std::fs::read_to_string(p.state_root.join("a.log")).unwrap_or_default();
    let revoked = revoked_in(&log_a, &p.input);
    let kept: Vec<i32> = (0..PARTITIONS).filter(|q| !revoked.contains(q)).collect();
    println!(
        "incremental: b joined → assigned in {:.1} s; a gave up {revoked:?} and kept {kept:?}; committed per partition at the join {at_join:?}, at b's assignment {at_assigned:?}",
        window.as_secs_f64()
    );
    assert!(!revoked.is_empty(), "the newcomer took no partition from a");
    assert!(
        !kept.is_empty(),
        "a gave up every partition (an eager rebalance)"
    );
    for q in &kept {
        let i = *q as usize;
        let rate = (at_assigned[i] - at_join[i]) as f64 / window.as_secs_f64();
        println!(
            "incremental: partition {q} (kept by a) committed {rate:.0} records/s while b joined"
        );
        assert!(
            at_assigned[i] > at_join[i],
            "partition {q}, which a kept, committed nothing while b joined"
        );
    }
    let _ = std::fs::remove_dir_all(&p.state_root);
}
