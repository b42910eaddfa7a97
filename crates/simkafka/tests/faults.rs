//! Each fault kind, scripted and random injection, and determinism per seed.

use eosflow_simkafka::{
    AutoOffsetReset, Call, Cluster, Consumer, ConsumerConfig, Fault, FaultCause, FaultKind,
    GroupEvent, Producer, ProducerConfig, SimError, TopicConfig, TraceEvent,
};

fn cluster(seed: u64, partitions: usize) -> Cluster {
    let cluster = Cluster::new(seed);
    cluster
        .create_topic("t", partitions, TopicConfig::default())
        .unwrap();
    cluster
}

fn producer(cluster: &Cluster, transactional_id: Option<&str>) -> Producer {
    let mut producer = cluster.producer(ProducerConfig {
        client_id: transactional_id.unwrap_or("plain").to_owned(),
        transactional_id: transactional_id.map(str::to_owned),
        transaction_timeout_ms: 1_000,
    });
    if transactional_id.is_some() {
        producer.init_transactions().unwrap();
    }
    producer
}

fn send(producer: &mut Producer, partition: i32, value: &str) -> Result<(i32, i64), SimError> {
    producer.send(
        "t",
        Some(partition),
        None,
        None,
        Some(value.as_bytes().to_vec()),
        Vec::new(),
    )
}

fn consumer(cluster: &Cluster, client: &str) -> Consumer {
    let mut consumer = cluster.consumer(ConsumerConfig {
        group_id: "g".into(),
        client_id: client.into(),
        auto_offset_reset: AutoOffsetReset::Earliest,
        session_timeout_ms: 10_000,
        ..ConsumerConfig::default()
    });
    consumer.subscribe(&["t"]);
    consumer
}

#[test]
fn timeout_fails_the_call_without_effect() {
    let cluster = cluster(1, 1);
    let mut p = producer(&cluster, None);
    cluster.faults().once(Call::Send, Fault::Timeout);
    let error = send(&mut p, 0, "v").unwrap_err();
    assert!(matches!(
        error,
        SimError::RequestTimedOut { call: Call::Send }
    ));
    assert!(error.is_retriable() && error.outcome_unknown());
    assert!(cluster.all_records("t", 0).is_empty());
    let trace = cluster.trace();
    assert_eq!(trace.len(), 1);
    assert_eq!(
        (trace[0].call, &trace[0].fault, trace[0].cause),
        (Call::Send, &Fault::Timeout, FaultCause::Scripted)
    );
}

#[test]
fn timeout_after_effect_on_send_leaves_the_record_in_the_log() {
    let cluster = cluster(1, 1);
    let mut p = producer(&cluster, None);
    cluster.faults().once(Call::Send, Fault::TimeoutAfterEffect);
    assert!(send(&mut p, 0, "v").unwrap_err().outcome_unknown());
    send(&mut p, 0, "v").unwrap(); // the caller's retry: a duplicate, as in Kafka
    assert_eq!(cluster.committed_records("t", 0).len(), 2);
}

#[test]
fn a_timeout_on_a_read_has_a_known_outcome() {
    let cluster = cluster(1, 1);
    let mut c = consumer(&cluster, "c");
    cluster
        .faults()
        .once(Call::Committed, Fault::TimeoutAfterEffect);
    let error = c.committed(&[("t".into(), 0)], true).unwrap_err();
    assert!(error.is_retriable() && !error.outcome_unknown());
}

#[test]
fn coordinator_errors_are_retriable_and_have_no_effect() {
    let cluster = cluster(1, 1);
    let mut c = consumer(&cluster, "c");
    c.poll().unwrap();
    let mut txn = producer(&cluster, Some("tx"));
    txn.begin_transaction().unwrap();
    let metadata = c.group_metadata().unwrap();
    for (fault, code) in [
        (Fault::NotCoordinator, 16),
        (Fault::CoordinatorLoadInProgress, 14),
    ] {
        cluster.faults().once(Call::SendOffsets, fault);
        let error = txn
            .send_offsets_to_transaction(&[("t".into(), 0, 3)], &metadata)
            .unwrap_err();
        assert!(error.is_retriable() && !error.outcome_unknown());
        assert_eq!(error.code(), code);
        assert!(
            c.committed(&[("t".into(), 0)], true).is_ok(),
            "no offsets held"
        );
    }
    txn.send_offsets_to_transaction(&[("t".into(), 0, 3)], &metadata)
        .unwrap();
    txn.commit_transaction().unwrap();
    assert_eq!(cluster.group_offsets("g").get(&("t".into(), 0)), Some(&3));
}

#[test]
fn not_leader_fails_a_send_and_skips_a_partition_of_a_poll() {
    let cluster = cluster(1, 2);
    let mut p = producer(&cluster, None);
    cluster
        .faults()
        .once(Call::Send, Fault::NotLeader(Some(("t".into(), 1))));
    send(&mut p, 0, "a").unwrap(); // partition 0: not hit
    let error = send(&mut p, 1, "b").unwrap_err();
    assert_eq!(error.code(), 6);
    assert!(error.is_retriable());
    assert!(cluster.all_records("t", 1).is_empty());
    send(&mut p, 1, "b").unwrap();

    let mut c = consumer(&cluster, "c");
    c.poll().unwrap();
    c.seek(&[("t".into(), 0, 0), ("t".into(), 1, 0)]);
    cluster
        .faults()
        .once(Call::Poll, Fault::NotLeader(Some(("t".into(), 0))));
    let poll = c.poll().unwrap();
    assert_eq!(poll.records.len(), 1);
    assert_eq!(poll.records[0].partition, 1);
    assert_eq!(poll.errors.len(), 1);
    assert_eq!(poll.errors[0].0, ("t".to_owned(), 0));
    assert_eq!(
        c.position("t", 0),
        Some(0),
        "skipped partition keeps its position"
    );
    assert_eq!(c.poll().unwrap().records[0].partition, 0, "nothing lost");
}

#[test]
fn fetch_error_skips_one_partition_and_loses_nothing() {
    let cluster = cluster(1, 2);
    let mut p = producer(&cluster, None);
    send(&mut p, 0, "a").unwrap();
    send(&mut p, 1, "b").unwrap();
    let mut c = consumer(&cluster, "c");
    c.poll().unwrap(); // joined; fetched both
    send(&mut p, 0, "a2").unwrap();
    send(&mut p, 1, "b2").unwrap();
    cluster.faults().once(Call::Poll, Fault::FetchError(None));
    let poll = c.poll().unwrap();
    assert_eq!(poll.records.len(), 1);
    assert!(matches!(poll.errors[0].1, SimError::KafkaStorageError(_)));
    let skipped = poll.errors[0].0.clone();
    let next = c.poll().unwrap();
    assert_eq!(next.records.len(), 1);
    assert_eq!(
        (next.records[0].topic.clone(), next.records[0].partition),
        skipped
    );
}

#[test]
fn producer_fenced_fault_bumps_the_epoch_and_aborts_the_open_transaction() {
    let cluster = cluster(1, 1);
    let mut txn = producer(&cluster, Some("tx"));
    txn.begin_transaction().unwrap();
    send(&mut txn, 0, "v").unwrap();
    cluster
        .faults()
        .once(Call::CommitTransaction, Fault::ProducerFenced);
    let error = txn.commit_transaction().unwrap_err();
    assert!(matches!(error, SimError::ProducerFenced(_)) && error.is_fatal());
    assert!(cluster.committed_records("t", 0).is_empty());
    assert_eq!(
        cluster.last_stable_offset("t", 0),
        Some(2),
        "aborted: marker written"
    );
    assert!(matches!(
        txn.begin_transaction(),
        Err(SimError::ProducerFenced(_))
    ));
    assert!(matches!(
        txn.init_transactions(),
        Err(SimError::ProducerFenced(_))
    ));
    let mut replacement = producer(&cluster, Some("tx"));
    replacement.begin_transaction().unwrap();
    assert_eq!(replacement.epoch(), txn.epoch() + 2);
}

#[test]
fn broker_pause_fails_every_call_until_time_passes_and_can_time_out_transactions() {
    let cluster = cluster(1, 1);
    let mut txn = producer(&cluster, Some("tx"));
    txn.begin_transaction().unwrap();
    send(&mut txn, 0, "v").unwrap();
    let mut c = consumer(&cluster, "c");
    cluster
        .faults()
        .once(Call::Flush, Fault::BrokerPause { ms: 5_000 });
    assert!(matches!(txn.flush(), Err(SimError::RequestTimedOut { .. })));
    assert!(matches!(
        c.poll(),
        Err(SimError::RequestTimedOut { call: Call::Poll })
    ));
    assert!(txn.commit_transaction().unwrap_err().outcome_unknown());
    cluster.advance(4_999);
    assert!(c.poll().is_err(), "still paused");
    assert!(cluster.committed_records("t", 0).is_empty());
    cluster.advance(1);
    c.poll().unwrap();
    // The pause outlived the 1 s transaction timeout: the coordinator aborted it.
    assert!(matches!(
        txn.commit_transaction(),
        Err(SimError::InvalidProducerEpoch(_))
    ));
    let paused = cluster
        .trace()
        .iter()
        .filter(|e| e.cause == FaultCause::BrokerPaused)
        .count();
    assert_eq!(paused, 3);
}

#[test]
fn session_expired_fault_makes_the_member_lose_its_partitions_and_rejoin() {
    let cluster = cluster(1, 2);
    let mut a = consumer(&cluster, "a");
    a.poll().unwrap();
    let old = a.group_metadata().unwrap();
    cluster
        .faults()
        .once_for("a", Call::Poll, Fault::SessionExpired);
    let poll = a.poll().unwrap();
    assert_eq!(
        poll.events[0],
        GroupEvent::Lost(vec![("t".into(), 0), ("t".into(), 1)])
    );
    assert_eq!(
        poll.events[1],
        GroupEvent::Assigned(vec![("t".into(), 0), ("t".into(), 1)])
    );
    assert_ne!(a.group_metadata().unwrap().member_id, old.member_id);

    cluster.faults().once(Call::Commit, Fault::SessionExpired);
    assert!(matches!(
        a.commit(&[("t".into(), 0, 1)]),
        Err(SimError::UnknownMemberId(_))
    ));
    assert!(cluster.group_offsets("g").is_empty());
}

#[test]
fn seek_failed_leaves_that_partition_unchanged_and_reports_it_alone() {
    let cluster = cluster(1, 2);
    let mut c = consumer(&cluster, "c");
    c.poll().unwrap();
    cluster
        .faults()
        .once(Call::Seek, Fault::SeekFailed(Some(("t".into(), 1))));
    let results = c.seek(&[("t".into(), 0, 5), ("t".into(), 1, 5)]);
    assert_eq!(results[0], (("t".into(), 0), Ok(())));
    assert_eq!(results[1].0, ("t".to_owned(), 1));
    assert!(results[1].1.is_err());
    assert_eq!(c.position("t", 0), Some(5));
    assert_eq!(c.position("t", 1), Some(0), "unchanged");
    let unassigned = c.seek(&[("other".into(), 0, 1)]);
    assert!(matches!(unassigned[0].1, Err(SimError::InvalidRequest(_))));
}

#[test]
fn scripted_faults_fire_at_the_nth_matching_call_of_the_named_client() {
    let cluster = cluster(1, 1);
    let mut a = producer(&cluster, None);
    let mut b = cluster.producer(ProducerConfig {
        client_id: "b".into(),
        ..ProducerConfig::default()
    });
    cluster.faults().nth_for("b", Call::Send, 2, Fault::Timeout);
    send(&mut a, 0, "a1").unwrap();
    send(&mut a, 0, "a2").unwrap();
    send(&mut b, 0, "b1").unwrap();
    assert_eq!(cluster.faults().pending(), 1);
    assert!(send(&mut b, 0, "b2").is_err());
    assert_eq!(cluster.faults().pending(), 0);
    assert_eq!(cluster.trace()[0].client, "b");
    cluster.faults().nth(Call::Flush, 3, Fault::Timeout);
    assert!(a.flush().is_ok() && b.flush().is_ok());
    assert!(a.flush().is_err());
}

/// A fixed workload whose calls do not depend on their results, so two runs make the same
/// calls; returns the trace and every call's outcome.
fn workload(seed: u64) -> (Vec<TraceEvent>, Vec<String>) {
    let cluster = cluster(seed, 2);
    cluster
        .faults()
        .random(0.3, FaultKind::ALL)
        .max_random_pause_ms(300);
    let mut outcomes = Vec::new();
    let mut record = |r: Result<String, SimError>| outcomes.push(format!("{r:?}"));
    let mut txn = cluster.producer(ProducerConfig {
        transactional_id: Some("tx".into()),
        transaction_timeout_ms: 2_000,
        ..ProducerConfig::default()
    });
    let mut c = consumer(&cluster, "c");
    for i in 0..100 {
        record(txn.init_transactions().map(|()| String::new()));
        record(txn.begin_transaction().map(|()| String::new()));
        record(send(&mut txn, i % 2, &i.to_string()).map(|r| format!("{r:?}")));
        record(
            c.poll()
                .map(|p| format!("{:?}", (p.events, p.records.len(), p.errors))),
        );
        if let Some(metadata) = c.group_metadata() {
            record(
                txn.send_offsets_to_transaction(&[("t".into(), i % 2, i64::from(i))], &metadata)
                    .map(|()| String::new()),
            );
        }
        record(txn.commit_transaction().map(|()| String::new()));
        record(txn.abort_transaction().map(|()| String::new()));
        record(Ok(format!("{:?}", c.seek(&[("t".into(), 0, 0)]))));
        record(
            c.committed(&[("t".into(), 0)], true)
                .map(|r| format!("{r:?}")),
        );
        cluster.advance(97);
    }
    (cluster.trace(), outcomes)
}

#[test]
fn random_faults_are_deterministic_per_seed() {
    let (trace_a, outcomes_a) = workload(42);
    let (trace_b, outcomes_b) = workload(42);
    assert!(
        trace_a.len() > 50,
        "faults were injected: {}",
        trace_a.len()
    );
    assert_eq!(trace_a, trace_b);
    assert_eq!(outcomes_a, outcomes_b);
    let kinds: std::collections::BTreeSet<FaultKind> =
        trace_a.iter().map(|e| e.fault.kind()).collect();
    assert!(kinds.len() >= 6, "{kinds:?}");
    let (trace_c, _) = workload(43);
    assert_ne!(trace_a, trace_c, "another seed, other faults");
}

#[test]
fn error_codes_match_kafka() {
    let cases = [
        (SimError::OffsetOutOfRange(String::new()), 1),
        (SimError::UnknownTopicOrPartition(String::new()), 3),
        (SimError::RebalanceInProgress, 27),
        (SimError::TopicAlreadyExists(String::new()), 36),
        (SimError::InvalidProducerEpoch(String::new()), 47),
        (SimError::UnknownMemberId(String::new()), 25),
    ];
    for (error, code) in cases {
        assert_eq!(error.code(), code, "{error}");
    }
    let cluster = cluster(1, 1);
    assert_eq!(
        cluster.create_topic("t", 1, TopicConfig::default()),
        Err(SimError::TopicAlreadyExists("t".into()))
    );
}
