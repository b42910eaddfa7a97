//! Consumer groups as a user of Kafka sees them: rebalances, assignment, static membership,
//! sessions, positions.

use eosflow_simkafka::{
    Admin, AutoOffsetReset, Cluster, Consumer, ConsumerConfig, GroupEvent, GroupState, Isolation,
    NewTopic, ProducerConfig, RebalanceProtocol, Record, SimError, TopicConfig, TopicPartition,
};

fn cluster(topics: &[(&str, usize)]) -> Cluster {
    let cluster = Cluster::new(11);
    for (name, partitions) in topics {
        cluster
            .create_topic(name, *partitions, TopicConfig::default())
            .unwrap();
    }
    cluster
}

fn member(
    cluster: &Cluster,
    client: &str,
    protocol: RebalanceProtocol,
    topics: &[&str],
) -> Consumer {
    member_with(cluster, client, protocol, None, topics)
}

fn member_with(
    cluster: &Cluster,
    client: &str,
    protocol: RebalanceProtocol,
    instance: Option<&str>,
    topics: &[&str],
) -> Consumer {
    let mut consumer = cluster.consumer(ConsumerConfig {
        group_id: "g".into(),
        client_id: client.into(),
        protocol,
        group_instance_id: instance.map(str::to_owned),
        session_timeout_ms: 10_000,
        auto_offset_reset: AutoOffsetReset::Earliest,
        ..ConsumerConfig::default()
    });
    consumer.subscribe(topics);
    consumer
}

fn tps(topic: &str, partitions: &[i32]) -> Vec<TopicPartition> {
    partitions.iter().map(|p| (topic.to_owned(), *p)).collect()
}

fn fill(cluster: &Cluster, topic: &str, partitions: i32, per_partition: usize) {
    let mut producer = cluster.producer(ProducerConfig::default());
    for p in 0..partitions {
        for i in 0..per_partition {
            producer
                .send(
                    topic,
                    Some(p),
                    None,
                    None,
                    Some(format!("{p}-{i}").into_bytes()),
                    Vec::new(),
                )
                .unwrap();
        }
    }
}

fn values(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

#[test]
fn eager_rebalance_revokes_everything_before_anything_is_assigned() {
    let cluster = cluster(&[("t", 4)]);
    fill(&cluster, "t", 4, 1);
    let mut c1 = member(&cluster, "c1", RebalanceProtocol::Eager, &["t"]);
    let poll = c1.poll().unwrap();
    assert_eq!(poll.events, [GroupEvent::Assigned(tps("t", &[0, 1, 2, 3]))]);
    assert_eq!(poll.records.len(), 4);

    fill(&cluster, "t", 4, 1);
    let mut c2 = member(&cluster, "c2", RebalanceProtocol::Eager, &["t"]);
    let poll = c2.poll().unwrap();
    assert!(
        poll.events.is_empty() && poll.records.is_empty(),
        "waits for c1 to rejoin"
    );
    let poll = c1.poll().unwrap();
    assert_eq!(
        poll.events,
        [
            GroupEvent::Revoked(tps("t", &[0, 1, 2, 3])),
            GroupEvent::Assigned(tps("t", &[0, 1])),
        ]
    );
    let poll = c2.poll().unwrap();
    assert_eq!(poll.events, [GroupEvent::Assigned(tps("t", &[2, 3]))]);
    assert_eq!(c1.group_metadata().unwrap().generation_id, 2);
    assert_eq!(c2.group_metadata().unwrap().generation_id, 2);
}

#[test]
fn cooperative_rebalance_revokes_only_moved_partitions_and_hands_them_over_after_revocation() {
    let cluster = cluster(&[("t", 6)]);
    let mut c1 = member(&cluster, "c1", RebalanceProtocol::Cooperative, &["t"]);
    let mut c2 = member(&cluster, "c2", RebalanceProtocol::Cooperative, &["t"]);
    c1.poll().unwrap();
    c2.poll().unwrap();
    c1.poll().unwrap();
    c2.poll().unwrap();
    assert_eq!(c1.assignment(), tps("t", &[0, 1, 2]));
    assert_eq!(c2.assignment(), tps("t", &[3, 4, 5]));

    fill(&cluster, "t", 6, 1);
    let mut c3 = member(&cluster, "c3", RebalanceProtocol::Cooperative, &["t"]);
    assert!(c3.poll().unwrap().events.is_empty());
    let poll = c1.poll().unwrap(); // rejoins; keeps consuming what it owns
    assert!(poll.events.is_empty());
    assert_eq!(values(&poll.records).len(), 3, "no stop-the-world");
    // c2 rejoins last: target c1 [0,1], c2 [2,3], c3 [4,5]
    let poll = c2.poll().unwrap();
    assert_eq!(
        poll.events,
        [GroupEvent::Revoked(tps("t", &[4, 5]))],
        "2 is still c1's"
    );
    let poll = c3.poll().unwrap();
    assert_eq!(poll.events, [GroupEvent::Assigned(tps("t", &[4, 5]))]);
    let poll = c1.poll().unwrap();
    assert_eq!(poll.events, [GroupEvent::Revoked(tps("t", &[2]))]);
    let poll = c2.poll().unwrap();
    assert_eq!(poll.events, [GroupEvent::Assigned(tps("t", &[2]))]);
    assert_eq!(c1.assignment(), tps("t", &[0, 1]));
    assert_eq!(c2.assignment(), tps("t", &[2, 3]));
    // Partition 3 never moved and never appeared in an event.
}

#[test]
fn range_assignment_co_partitions_topics_with_equal_partition_counts() {
    let cluster = cluster(&[("orders", 3), ("customers", 3)]);
    let topics = ["orders", "customers"];
    let mut c1 = member(&cluster, "c1", RebalanceProtocol::Eager, &topics);
    let mut c2 = member(&cluster, "c2", RebalanceProtocol::Eager, &topics);
    c1.poll().unwrap();
    c2.poll().unwrap();
    c1.poll().unwrap();
    c2.poll().unwrap();
    for c in [&c1, &c2] {
        let assignment = c.assignment();
        for (topic, p) in &assignment {
            let other = if topic == "orders" {
                "customers"
            } else {
                "orders"
            };
            assert!(
                assignment.contains(&(other.to_owned(), *p)),
                "{assignment:?}"
            );
        }
    }
    assert_eq!(
        c1.assignment().len(),
        4,
        "range: the first member gets the extra partition"
    );
    let described = cluster.admin().describe_group("g").unwrap();
    assert_eq!(described.state, GroupState::Stable);
    assert_eq!(described.members.len(), 2);
}

#[test]
fn static_member_restart_keeps_its_assignment_and_fences_the_old_instance() {
    let cluster = cluster(&[("t", 4)]);
    let mut a = member_with(&cluster, "a", RebalanceProtocol::Eager, Some("i-a"), &["t"]);
    let mut b = member_with(&cluster, "b", RebalanceProtocol::Eager, Some("i-b"), &["t"]);
    a.poll().unwrap();
    b.poll().unwrap();
    a.poll().unwrap();
    b.poll().unwrap();
    let before = a.assignment();
    let old_metadata = a.group_metadata().unwrap();
    let admin = cluster.admin();
    let generation = admin.describe_group("g").unwrap().generation_id;

    let mut restarted = member_with(
        &cluster,
        "a2",
        RebalanceProtocol::Eager,
        Some("i-a"),
        &["t"],
    );
    let poll = restarted.poll().unwrap();
    assert_eq!(poll.events, [GroupEvent::Assigned(before.clone())]);
    assert_eq!(
        admin.describe_group("g").unwrap().generation_id,
        generation,
        "no rebalance"
    );
    assert!(
        b.poll().unwrap().events.is_empty(),
        "the other member notices nothing"
    );

    assert!(matches!(a.poll(), Err(SimError::FencedInstanceId(_))));
    assert!(matches!(
        a.commit(&[("t".into(), 0, 1)]),
        Err(SimError::FencedInstanceId(_))
    ));
    let mut txn = cluster.producer(ProducerConfig {
        transactional_id: Some("tx".into()),
        ..ProducerConfig::default()
    });
    txn.init_transactions().unwrap();
    txn.begin_transaction().unwrap();
    let error = txn
        .send_offsets_to_transaction(&[("t".into(), 0, 1)], &old_metadata)
        .unwrap_err();
    assert!(matches!(error, SimError::FencedInstanceId(_)), "{error:?}");
    assert_eq!(error.code(), 82);
    assert!(error.is_fatal());
}

#[test]
fn a_static_member_that_closes_keeps_its_partitions_until_its_session_expires() {
    let cluster = cluster(&[("t", 2)]);
    let mut a = member_with(&cluster, "a", RebalanceProtocol::Eager, Some("i-a"), &["t"]);
    let mut b = member(&cluster, "b", RebalanceProtocol::Eager, &["t"]);
    a.poll().unwrap();
    b.poll().unwrap();
    a.poll().unwrap();
    b.poll().unwrap();
    a.close();
    let admin = cluster.admin();
    assert_eq!(
        admin.describe_group("g").unwrap().members.len(),
        2,
        "did not leave"
    );
    cluster.advance(6_000);
    assert!(b.poll().unwrap().events.is_empty());
    cluster.advance(6_000); // a: 12 s without a poll > 10 s
    let poll = b.poll().unwrap();
    assert_eq!(
        poll.events,
        [
            GroupEvent::Revoked(tps("t", &[1])),
            GroupEvent::Assigned(tps("t", &[0, 1]))
        ]
    );
}

#[test]
fn a_dynamic_member_that_closes_leaves_at_once() {
    let cluster = cluster(&[("t", 2)]);
    let mut a = member(&cluster, "a", RebalanceProtocol::Eager, &["t"]);
    let mut b = member(&cluster, "b", RebalanceProtocol::Eager, &["t"]);
    a.poll().unwrap();
    b.poll().unwrap();
    a.poll().unwrap();
    b.poll().unwrap();
    a.close();
    assert_eq!(
        b.poll().unwrap().events.last(),
        Some(&GroupEvent::Assigned(tps("t", &[0, 1])))
    );
}

#[test]
fn session_expiry_after_advance_reassigns_and_the_expired_member_rejoins_as_new() {
    let cluster = cluster(&[("t", 2)]);
    let mut a = member(&cluster, "a", RebalanceProtocol::Eager, &["t"]);
    let mut b = member(&cluster, "b", RebalanceProtocol::Eager, &["t"]);
    a.poll().unwrap();
    b.poll().unwrap();
    a.poll().unwrap();
    b.poll().unwrap();
    let old = a.group_metadata().unwrap();
    cluster.advance(5_000);
    b.poll().unwrap();
    cluster.advance(6_000); // a silent for 11 s
    let poll = b.poll().unwrap();
    assert_eq!(
        poll.events.last(),
        Some(&GroupEvent::Assigned(tps("t", &[0, 1])))
    );
    assert!(matches!(
        a.commit(&[("t".into(), 0, 0)]),
        Err(SimError::UnknownMemberId(_))
    ));
    let poll = a.poll().unwrap();
    assert_eq!(poll.events, [GroupEvent::Lost(tps("t", &[0]))]);
    assert!(a.assignment().is_empty());
    let new = a.group_metadata().unwrap();
    assert_ne!(
        new.member_id, old.member_id,
        "rejoined with a new member id"
    );
}

#[test]
fn a_commit_after_the_group_moved_on_is_an_illegal_generation() {
    let cluster = cluster(&[("t", 2)]);
    let mut a = member(&cluster, "a", RebalanceProtocol::Eager, &["t"]);
    a.poll().unwrap();
    a.commit(&[("t".into(), 0, 0)]).unwrap();
    let mut b = member(&cluster, "b", RebalanceProtocol::Eager, &["t"]);
    b.poll().unwrap();
    // Rebalance started but not complete: a's generation is still current (onPartitionsRevoked).
    a.commit(&[("t".into(), 0, 1)]).unwrap();
    a.poll().unwrap(); // completes the rebalance
    let error = b.commit(&[("t".into(), 1, 1)]).unwrap_err();
    assert!(
        matches!(error, SimError::IllegalGeneration(_)),
        "b has not synced: {error:?}"
    );
    b.poll().unwrap();
    b.commit(&[("t".into(), 1, 1)]).unwrap();
    assert_eq!(cluster.group_offsets("g").len(), 2);
}

#[test]
fn a_newly_assigned_partition_starts_at_the_committed_offset() {
    let cluster = cluster(&[("t", 1)]);
    fill(&cluster, "t", 1, 5);
    let mut a = member(&cluster, "a", RebalanceProtocol::Eager, &["t"]);
    a.poll().unwrap();
    a.commit(&[("t".into(), 0, 3)]).unwrap();
    a.close();
    let mut b = member(&cluster, "b", RebalanceProtocol::Eager, &["t"]);
    assert_eq!(values(&b.poll().unwrap().records), ["0-3", "0-4"]);
}

#[test]
fn paused_partitions_return_no_records_until_resumed() {
    let cluster = cluster(&[("t", 2)]);
    let mut c = member(&cluster, "c", RebalanceProtocol::Eager, &["t"]);
    c.poll().unwrap();
    fill(&cluster, "t", 2, 2);
    c.pause(&tps("t", &[0]));
    let poll = c.poll().unwrap();
    assert_eq!(values(&poll.records), ["1-0", "1-1"]);
    assert_eq!(c.position("t", 0), Some(0));
    assert_eq!(c.paused(), tps("t", &[0]));
    c.resume(&tps("t", &[0]));
    assert_eq!(values(&c.poll().unwrap().records), ["0-0", "0-1"]);
}

#[test]
fn max_poll_records_limits_a_poll_without_starving_a_partition() {
    let cluster = cluster(&[("t", 2)]);
    fill(&cluster, "t", 2, 3);
    let mut c = cluster.consumer(ConsumerConfig {
        group_id: "g".into(),
        auto_offset_reset: AutoOffsetReset::Earliest,
        max_poll_records: 2,
        ..ConsumerConfig::default()
    });
    c.subscribe(&["t"]);
    let first = c.poll().unwrap();
    let second = c.poll().unwrap();
    assert_eq!(values(&first.records), ["0-0", "0-1"]);
    assert_eq!(values(&second.records), ["1-0", "1-1"]);
}

#[test]
fn delete_records_moves_the_log_start_and_a_consumer_below_it_resets() {
    let cluster = cluster(&[("t", 1)]);
    fill(&cluster, "t", 1, 10);
    let mut c = cluster.consumer(ConsumerConfig {
        group_id: "g".into(),
        auto_offset_reset: AutoOffsetReset::Earliest,
        max_poll_records: 2,
        ..ConsumerConfig::default()
    });
    c.subscribe(&["t"]);
    assert_eq!(values(&c.poll().unwrap().records), ["0-0", "0-1"]);
    let admin: Admin = cluster.admin();
    let results = admin.delete_records(&[("t".into(), 0, 5)]).unwrap();
    assert_eq!(results, [(("t".to_owned(), 0), Ok(5))]);
    assert_eq!(cluster.log_start_offset("t", 0), Some(5));
    assert_eq!(cluster.committed_records("t", 0)[0].offset, 5);
    assert_eq!(c.watermarks("t", 0).unwrap(), (5, 10));
    assert_eq!(
        values(&c.poll().unwrap().records),
        ["0-5", "0-6"],
        "reset to the log start"
    );

    let past = admin.delete_records(&[("t".into(), 0, 11)]).unwrap();
    assert!(
        matches!(past[0].1, Err(SimError::OffsetOutOfRange(_))),
        "never past the HW"
    );
    assert_eq!(cluster.log_start_offset("t", 0), Some(5));

    let mut strict = cluster.consumer(ConsumerConfig {
        group_id: "strict".into(),
        auto_offset_reset: AutoOffsetReset::None,
        ..ConsumerConfig::default()
    });
    strict.subscribe(&["t"]);
    let poll = strict.poll().unwrap();
    assert!(poll.records.is_empty());
    assert!(matches!(poll.errors[0].1, SimError::OffsetOutOfRange(_)));
    strict.seek(&[("t".into(), 0, 8)]);
    assert_eq!(values(&strict.poll().unwrap().records), ["0-8", "0-9"]);
}

#[test]
fn compaction_keeps_the_latest_stable_record_per_key_and_tombstones() {
    let cluster = Cluster::new(1);
    let admin = cluster.admin();
    let created = admin
        .create_topics(&[
            NewTopic {
                name: "table".into(),
                partitions: 1,
                config: TopicConfig { compacted: true },
            },
            NewTopic {
                name: "stream".into(),
                partitions: 1,
                config: TopicConfig::default(),
            },
        ])
        .unwrap();
    assert!(created.iter().all(|(_, r)| r.is_ok()));
    let mut p = cluster.producer(ProducerConfig::default());
    let mut put = |key: &str, value: Option<&str>| {
        p.send(
            "table",
            Some(0),
            None,
            Some(key.as_bytes().to_vec()),
            value.map(|v| v.as_bytes().to_vec()),
            Vec::new(),
        )
        .unwrap();
    };
    put("a", Some("1"));
    put("b", Some("1"));
    put("a", Some("2"));
    put("b", None);
    put("c", Some("1"));
    let mut txn = cluster.producer(ProducerConfig {
        transactional_id: Some("tx".into()),
        ..ProducerConfig::default()
    });
    txn.init_transactions().unwrap();
    txn.begin_transaction().unwrap();
    txn.send(
        "table",
        Some(0),
        None,
        Some(b"c".to_vec()),
        Some(b"aborted".to_vec()),
        Vec::new(),
    )
    .unwrap();
    txn.abort_transaction().unwrap();
    assert!(matches!(
        p.send(
            "table",
            Some(0),
            None,
            None,
            Some(b"x".to_vec()),
            Vec::new()
        ),
        Err(SimError::InvalidRecord(_))
    ));

    assert_eq!(admin.compact("table").unwrap(), 3);
    let kept: Vec<(String, Option<String>)> = cluster
        .committed_records("table", 0)
        .into_iter()
        .map(|r| {
            (
                String::from_utf8_lossy(&r.key.unwrap_or_default()).into_owned(),
                r.value.map(|v| String::from_utf8_lossy(&v).into_owned()),
            )
        })
        .collect();
    assert_eq!(
        kept,
        [
            ("a".to_owned(), Some("2".to_owned())),
            ("b".to_owned(), None),
            ("c".to_owned(), Some("1".to_owned()))
        ]
    );
    assert_eq!(
        cluster.all_records("table", 0).len(),
        3,
        "aborted data removed too"
    );
    assert_eq!(
        cluster.high_watermark("table", 0),
        Some(7),
        "offsets never move"
    );
    assert!(matches!(
        admin.compact("stream"),
        Err(SimError::InvalidRequest(_))
    ));
    let mut reader = cluster.consumer(ConsumerConfig {
        group_id: "r".into(),
        isolation: Isolation::ReadUncommitted,
        auto_offset_reset: AutoOffsetReset::Earliest,
        ..ConsumerConfig::default()
    });
    reader.subscribe(&["table"]);
    assert_eq!(reader.poll().unwrap().records.len(), 3);
}

#[test]
fn a_topic_created_after_subscribing_triggers_a_rebalance() {
    let cluster = cluster(&[]);
    let mut c = member(&cluster, "c", RebalanceProtocol::Eager, &["late"]);
    assert_eq!(c.poll().unwrap().events, [GroupEvent::Assigned(Vec::new())]);
    cluster
        .create_topic("late", 2, TopicConfig::default())
        .unwrap();
    let poll = c.poll().unwrap(); // notices the metadata change, rejoins alone
    assert_eq!(poll.events, [GroupEvent::Assigned(tps("late", &[0, 1]))]);
    assert_eq!(c.assignment(), tps("late", &[0, 1]));
}
