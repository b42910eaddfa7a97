//! Transactions as a user of Kafka sees them: visibility, markers, fencing, timeouts and
//! KIP-447 offsets.

use eosflow_simkafka::{
    partition_for_key, AutoOffsetReset, Call, Cluster, Consumer, ConsumerConfig, Fault,
    GroupMetadata, Isolation, Producer, ProducerConfig, Record, SimError, TopicConfig,
};

fn cluster(topics: &[(&str, usize)]) -> Cluster {
    let cluster = Cluster::new(7);
    for (name, partitions) in topics {
        cluster
            .create_topic(name, *partitions, TopicConfig::default())
            .unwrap();
    }
    cluster
}

fn txn_producer(cluster: &Cluster, id: &str, timeout_ms: i64) -> Producer {
    let mut producer = cluster.producer(ProducerConfig {
        transactional_id: Some(id.to_owned()),
        transaction_timeout_ms: timeout_ms,
        ..ProducerConfig::default()
    });
    producer.init_transactions().unwrap();
    producer
}

fn send(
    producer: &mut Producer,
    topic: &str,
    partition: i32,
    value: &str,
) -> Result<(i32, i64), SimError> {
    producer.send(
        topic,
        Some(partition),
        None,
        Some(value.as_bytes().to_vec()),
        Some(value.as_bytes().to_vec()),
        Vec::new(),
    )
}

fn consumer(cluster: &Cluster, group: &str, isolation: Isolation) -> Consumer {
    let mut consumer = cluster.consumer(ConsumerConfig {
        group_id: group.to_owned(),
        isolation,
        auto_offset_reset: AutoOffsetReset::Earliest,
        client_id: format!("{group}-client"),
        ..ConsumerConfig::default()
    });
    consumer.subscribe(&["t"]);
    consumer
}

fn offsets(records: &[Record]) -> Vec<i64> {
    records.iter().map(|r| r.offset).collect()
}

fn values(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

#[test]
fn read_committed_hides_open_and_aborted_transactions_and_stops_at_the_lso() {
    let cluster = cluster(&[("t", 1)]);
    let mut plain = cluster.producer(ProducerConfig::default());
    let mut txn = txn_producer(&cluster, "tx", 60_000);
    send(&mut plain, "t", 0, "before").unwrap(); // 0
    txn.begin_transaction().unwrap();
    send(&mut txn, "t", 0, "open").unwrap(); // 1
    send(&mut plain, "t", 0, "after").unwrap(); // 2: stable itself, but behind the open txn
    assert_eq!(cluster.last_stable_offset("t", 0), Some(1));

    let mut committed = consumer(&cluster, "rc", Isolation::ReadCommitted);
    let mut uncommitted = consumer(&cluster, "ru", Isolation::ReadUncommitted);
    let poll = committed.poll().unwrap();
    assert_eq!(values(&poll.records), ["before"], "stops at the LSO");
    assert_eq!(committed.position("t", 0), Some(1));
    assert_eq!(
        values(&uncommitted.poll().unwrap().records),
        ["before", "open", "after"]
    );

    txn.abort_transaction().unwrap(); // marker at 3
    let poll = committed.poll().unwrap();
    assert_eq!(values(&poll.records), ["after"], "aborted data skipped");
    assert_eq!(committed.position("t", 0), Some(4), "past the abort marker");
    assert!(
        uncommitted.poll().unwrap().records.is_empty(),
        "markers are never returned"
    );
    assert_eq!(
        values(&cluster.committed_records("t", 0)),
        ["before", "after"]
    );
    assert_eq!(
        values(&cluster.all_records("t", 0)),
        ["before", "open", "after"]
    );
}

#[test]
fn commit_and_abort_markers_take_one_offset_in_each_partition() {
    let cluster = cluster(&[("t", 2)]);
    let mut txn = txn_producer(&cluster, "tx", 60_000);
    txn.begin_transaction().unwrap();
    assert_eq!(send(&mut txn, "t", 0, "a").unwrap(), (0, 0));
    assert_eq!(send(&mut txn, "t", 0, "b").unwrap(), (0, 1));
    assert_eq!(send(&mut txn, "t", 1, "c").unwrap(), (1, 0));
    txn.commit_transaction().unwrap();
    assert_eq!(cluster.high_watermark("t", 0), Some(3));
    assert_eq!(cluster.high_watermark("t", 1), Some(2));
    txn.begin_transaction().unwrap();
    assert_eq!(
        send(&mut txn, "t", 0, "d").unwrap(),
        (0, 3),
        "offset 2 is the marker"
    );
    txn.abort_transaction().unwrap();
    assert_eq!(cluster.high_watermark("t", 0), Some(5));
    assert_eq!(
        cluster.high_watermark("t", 1),
        Some(2),
        "untouched partition: no marker"
    );
    assert_eq!(offsets(&cluster.committed_records("t", 0)), [0, 1]);
}

#[test]
fn abort_then_retry_gives_exactly_one_committed_copy() {
    let cluster = cluster(&[("t", 1)]);
    let mut txn = txn_producer(&cluster, "tx", 60_000);
    txn.begin_transaction().unwrap();
    send(&mut txn, "t", 0, "x").unwrap();
    txn.abort_transaction().unwrap();
    txn.begin_transaction().unwrap();
    send(&mut txn, "t", 0, "x").unwrap();
    txn.commit_transaction().unwrap();
    assert_eq!(values(&cluster.committed_records("t", 0)), ["x"]);
    assert_eq!(values(&cluster.all_records("t", 0)), ["x", "x"]);
    let mut c = consumer(&cluster, "g", Isolation::ReadCommitted);
    assert_eq!(values(&c.poll().unwrap().records), ["x"]);
}

#[test]
fn init_transactions_fences_the_older_producer_and_aborts_its_open_transaction() {
    let cluster = cluster(&[("t", 1)]);
    let mut old = txn_producer(&cluster, "tx", 60_000);
    old.begin_transaction().unwrap();
    send(&mut old, "t", 0, "zombie").unwrap();
    assert_eq!(cluster.last_stable_offset("t", 0), Some(0));

    let mut new = txn_producer(&cluster, "tx", 60_000);
    assert_eq!(new.producer_id(), old.producer_id(), "same id, new epoch");
    assert_eq!(new.epoch(), old.epoch() + 1);
    assert_eq!(
        cluster.last_stable_offset("t", 0),
        cluster.high_watermark("t", 0)
    );
    assert!(
        cluster.committed_records("t", 0).is_empty(),
        "open transaction aborted"
    );

    for result in [
        send(&mut old, "t", 0, "zombie-2").map(|_| ()),
        old.commit_transaction(),
        old.abort_transaction(),
        old.begin_transaction(),
    ] {
        let error = result.unwrap_err();
        assert!(matches!(error, SimError::ProducerFenced(_)), "{error:?}");
        assert!(error.is_fatal());
        assert_eq!(error.code(), 90);
    }
    assert!(matches!(
        old.init_transactions(),
        Err(SimError::ProducerFenced(_))
    ));

    new.begin_transaction().unwrap();
    send(&mut new, "t", 0, "fresh").unwrap();
    new.commit_transaction().unwrap();
    assert_eq!(values(&cluster.committed_records("t", 0)), ["fresh"]);
}

#[test]
fn transaction_timeout_aborts_and_fences_after_advance() {
    let cluster = cluster(&[("t", 1)]);
    let mut txn = txn_producer(&cluster, "tx", 1_000);
    txn.begin_transaction().unwrap();
    send(&mut txn, "t", 0, "slow").unwrap();
    cluster.advance(1_000);
    assert_eq!(
        cluster.last_stable_offset("t", 0),
        Some(0),
        "still open at the timeout"
    );
    cluster.advance(1);
    assert_eq!(
        cluster.last_stable_offset("t", 0),
        Some(2),
        "aborted: marker at 1"
    );
    assert!(cluster.committed_records("t", 0).is_empty());

    let error = txn.commit_transaction().unwrap_err();
    assert!(
        matches!(error, SimError::InvalidProducerEpoch(_)),
        "{error:?}"
    );
    assert!(error.is_fatal());
    assert!(matches!(
        send(&mut txn, "t", 0, "late"),
        Err(SimError::InvalidProducerEpoch(_))
    ));
    // A producer timed out by the coordinator may initialize again (KIP-588).
    txn.init_transactions().unwrap();
    txn.begin_transaction().unwrap();
    send(&mut txn, "t", 0, "again").unwrap();
    txn.commit_transaction().unwrap();
    assert_eq!(values(&cluster.committed_records("t", 0)), ["again"]);
}

#[test]
fn send_offsets_with_a_stale_generation_is_rejected_and_the_offsets_are_not_committed() {
    let cluster = cluster(&[("t", 2)]);
    let mut c1 = consumer(&cluster, "g", Isolation::ReadCommitted);
    c1.poll().unwrap();
    let stale = c1.group_metadata().unwrap();
    let mut c2 = consumer(&cluster, "g", Isolation::ReadCommitted);
    c2.poll().unwrap(); // joins: rebalance starts
    c1.poll().unwrap(); // rejoins last: generation + 1
    let current = c1.group_metadata().unwrap();
    assert_eq!(current.generation_id, stale.generation_id + 1);

    let mut txn = txn_producer(&cluster, "tx", 60_000);
    txn.begin_transaction().unwrap();
    let error = txn
        .send_offsets_to_transaction(&[("t".into(), 0, 5)], &stale)
        .unwrap_err();
    assert!(matches!(error, SimError::IllegalGeneration(_)), "{error:?}");
    assert_eq!(error.code(), 22);
    let unknown = GroupMetadata {
        member_id: "nobody".into(),
        ..current.clone()
    };
    assert!(matches!(
        txn.send_offsets_to_transaction(&[("t".into(), 0, 5)], &unknown),
        Err(SimError::UnknownMemberId(_))
    ));
    txn.commit_transaction().unwrap();
    assert!(
        cluster.group_offsets("g").is_empty(),
        "rejected offsets never commit"
    );

    txn.begin_transaction().unwrap();
    txn.send_offsets_to_transaction(&[("t".into(), 0, 5)], &current)
        .unwrap();
    assert!(
        cluster.group_offsets("g").is_empty(),
        "held until the commit"
    );
    txn.commit_transaction().unwrap();
    assert_eq!(cluster.group_offsets("g").get(&("t".into(), 0)), Some(&5));
}

#[test]
fn committed_require_stable_is_unstable_while_a_transaction_holds_offsets() {
    let cluster = cluster(&[("t", 1)]);
    let mut c = consumer(&cluster, "g", Isolation::ReadCommitted);
    c.poll().unwrap();
    c.commit(&[("t".into(), 0, 1)]).unwrap();
    let mut txn = txn_producer(&cluster, "tx", 60_000);
    txn.begin_transaction().unwrap();
    txn.send_offsets_to_transaction(&[("t".into(), 0, 7)], &c.group_metadata().unwrap())
        .unwrap();
    let tp = ("t".to_owned(), 0);
    let error = c.committed(std::slice::from_ref(&tp), true).unwrap_err();
    assert!(
        matches!(error, SimError::UnstableOffsetCommit(_)),
        "{error:?}"
    );
    assert!(error.is_retriable());
    assert_eq!(error.code(), 88);
    assert_eq!(
        c.committed(std::slice::from_ref(&tp), false).unwrap(),
        [(tp.clone(), Some(1))],
        "without require_stable: the last committed value"
    );
    txn.commit_transaction().unwrap();
    assert_eq!(
        c.committed(std::slice::from_ref(&tp), true).unwrap(),
        [(tp, Some(7))]
    );
}

#[test]
fn a_new_member_waits_for_offsets_held_by_an_open_transaction() {
    let cluster = cluster(&[("t", 1)]);
    let mut plain = cluster.producer(ProducerConfig::default());
    for i in 0..4 {
        send(&mut plain, "t", 0, &i.to_string()).unwrap();
    }
    let mut txn = txn_producer(&cluster, "tx", 60_000);
    txn.begin_transaction().unwrap();
    txn.send_offsets_to_transaction(&[("t".into(), 0, 3)], &GroupMetadata::unfenced("g"))
        .unwrap();
    let mut c = consumer(&cluster, "g", Isolation::ReadCommitted);
    let poll = c.poll().unwrap();
    assert!(
        poll.records.is_empty(),
        "no start position while offsets are unstable"
    );
    assert_eq!(c.position("t", 0), None);
    txn.commit_transaction().unwrap();
    assert_eq!(values(&c.poll().unwrap().records), ["3"]);
}

#[test]
fn timeout_after_effect_on_commit_commits_while_the_caller_sees_an_unknown_outcome() {
    let cluster = cluster(&[("t", 1)]);
    let mut txn = txn_producer(&cluster, "tx", 60_000);
    txn.begin_transaction().unwrap();
    send(&mut txn, "t", 0, "v").unwrap();
    cluster
        .faults()
        .once(Call::CommitTransaction, Fault::TimeoutAfterEffect);
    let error = txn.commit_transaction().unwrap_err();
    assert!(error.outcome_unknown());
    assert!(error.is_retriable());
    assert_eq!(error.code(), 7);
    assert_eq!(
        values(&cluster.committed_records("t", 0)),
        ["v"],
        "it did commit"
    );
    assert!(
        matches!(txn.abort_transaction(), Err(SimError::InvalidTxnState(_))),
        "after a timed-out commit only the commit may be retried"
    );
    txn.commit_transaction().unwrap();
    assert_eq!(
        cluster.high_watermark("t", 0),
        Some(2),
        "one marker, not two"
    );
}

#[test]
fn a_plain_timeout_on_commit_also_reports_an_unknown_outcome_but_has_no_effect() {
    let cluster = cluster(&[("t", 1)]);
    let mut txn = txn_producer(&cluster, "tx", 60_000);
    txn.begin_transaction().unwrap();
    send(&mut txn, "t", 0, "v").unwrap();
    cluster
        .faults()
        .once(Call::CommitTransaction, Fault::Timeout);
    let error = txn.commit_transaction().unwrap_err();
    assert!(
        error.outcome_unknown(),
        "a client cannot tell the two timeouts apart"
    );
    assert!(cluster.committed_records("t", 0).is_empty());
    assert_eq!(cluster.last_stable_offset("t", 0), Some(0), "still open");
    txn.commit_transaction().unwrap();
    assert_eq!(values(&cluster.committed_records("t", 0)), ["v"]);
}

#[test]
fn a_failed_send_makes_the_transaction_abortable() {
    let cluster = cluster(&[("t", 1)]);
    let mut txn = txn_producer(&cluster, "tx", 60_000);
    txn.begin_transaction().unwrap();
    cluster.faults().once(Call::Send, Fault::TimeoutAfterEffect);
    let error = send(&mut txn, "t", 0, "maybe").unwrap_err();
    assert!(error.outcome_unknown());
    assert_eq!(
        values(&cluster.all_records("t", 0)),
        ["maybe"],
        "the record is in the log"
    );
    let error = txn.commit_transaction().unwrap_err();
    assert!(error.requires_abort(), "{error:?}");
    assert_eq!(error.code(), 120);
    assert!(send(&mut txn, "t", 0, "more").unwrap_err().requires_abort());
    txn.abort_transaction().unwrap();
    assert!(cluster.committed_records("t", 0).is_empty());
}

#[test]
fn calls_out_of_state_return_invalid_txn_state() {
    let cluster = cluster(&[("t", 1)]);
    let mut uninit = cluster.producer(ProducerConfig {
        transactional_id: Some("tx".into()),
        ..ProducerConfig::default()
    });
    assert!(matches!(
        uninit.begin_transaction(),
        Err(SimError::InvalidTxnState(_))
    ));
    let mut txn = txn_producer(&cluster, "tx2", 60_000);
    assert!(matches!(
        send(&mut txn, "t", 0, "x"),
        Err(SimError::InvalidTxnState(_))
    ));
    assert!(matches!(
        txn.commit_transaction(),
        Err(SimError::InvalidTxnState(_))
    ));
    assert!(matches!(
        txn.abort_transaction(),
        Err(SimError::InvalidTxnState(_))
    ));
    txn.begin_transaction().unwrap();
    let error = txn.begin_transaction().unwrap_err();
    assert_eq!(error.code(), 48);
    let mut plain = cluster.producer(ProducerConfig::default());
    assert!(matches!(
        plain.init_transactions(),
        Err(SimError::InvalidRequest(_))
    ));
}

#[test]
fn keyed_records_go_by_murmur2_and_keyless_ones_round_robin() {
    let cluster = cluster(&[("t", 3)]);
    let mut producer = cluster.producer(ProducerConfig::default());
    let (partition, _) = producer
        .send("t", None, None, Some(b"21".to_vec()), None, Vec::new())
        .unwrap();
    // toPositive(murmur2("21")) = 1173551340, 1173551340 % 3 = 0
    assert_eq!(partition, 0);
    assert_eq!(partition, partition_for_key(b"21", 3));
    let keyless: Vec<i32> = (0..4)
        .map(|_| {
            producer
                .send("t", None, None, None, None, Vec::new())
                .unwrap()
                .0
        })
        .collect();
    assert_eq!(keyless, [0, 1, 2, 0]);
    assert!(matches!(
        producer.send("nope", None, None, None, None, Vec::new()),
        Err(SimError::UnknownTopicOrPartition(_))
    ));
    assert!(matches!(
        producer.send("t", Some(3), None, None, None, Vec::new()),
        Err(SimError::UnknownTopicOrPartition(_))
    ));
}
