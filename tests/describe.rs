//! Describing consumer groups of both rebalance protocols (issue #21) on the real broker:
//! `eosflow::internals::kafka::describe` against a classic group (`group.protocol=classic`) and a KIP-848
//! consumer-protocol group (`group.protocol=consumer`, broker-side `range` assignor), each with
//! two running members, one of them static. The description must name both members with their
//! client ids and instance ids, and give each the partitions its own consumer reports as
//! assigned; the standby placement computed from it puts each member's copies on the other.
//! rust-rdkafka's `fetch_group_list` (DescribeGroups), which the placement used before, sees no
//! member of a consumer-protocol group.
//!
//! Also (no broker): `src/kafka/describe.rs` is the only file of the workspace that allows
//! `unsafe` code.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use eosflow::internals::kafka::describe::{
    describe_group, DescribeError, GroupDescription, GroupKind,
};
use eosflow::internals::processor::standby::placement;
use eosflow::kafka::ClientRole;
use rdkafka::consumer::{BaseConsumer, Consumer};

const PARTITIONS: i32 = 4;
const WAIT: Duration = Duration::from_secs(60);

/// A group member polled by its own thread until dropped.
struct Member {
    consumer: Arc<BaseConsumer>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Member {
    fn join(
        protocol: &str,
        group: &str,
        topic: &str,
        client: &str,
        instance: Option<&str>,
    ) -> Self {
        Self::join_topics(protocol, "range", group, &[topic], client, instance)
    }

    /// A member subscribed to `topics`; `assignor` is the broker's under the consumer protocol.
    fn join_topics(
        protocol: &str,
        assignor: &str,
        group: &str,
        topics: &[&str],
        client: &str,
        instance: Option<&str>,
    ) -> Self {
        let mut config = support::clients().config(ClientRole::Admin);
        config
            .set("group.id", group)
            .set("client.id", client)
            .set("group.protocol", protocol)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest");
        if protocol == "consumer" {
            // librdkafka refuses session.timeout.ms, heartbeat.interval.ms and
            // partition.assignment.strategy under this protocol: the broker assigns.
            config.set("group.remote.assignor", assignor);
        } else {
            config
                .set("partition.assignment.strategy", "range")
                .set("session.timeout.ms", "10000")
                .set("heartbeat.interval.ms", "1000");
        }
        if let Some(i) = instance {
            config.set("group.instance.id", i);
        }
        let consumer: Arc<BaseConsumer> = Arc::new(config.create().expect("group consumer"));
        consumer.subscribe(topics).expect("subscribe");
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (consumer, stop) = (consumer.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // The topic is empty: polling only keeps the membership alive.
                    let _ = consumer.poll(Duration::from_millis(100));
                }
            })
        };
        Self {
            consumer,
            stop,
            thread: Some(thread),
        }
    }

    /// The (topic, partition) pairs this member's own consumer holds, sorted.
    fn own_assignment(&self) -> Vec<(String, i32)> {
        let mut out: Vec<(String, i32)> = self
            .consumer
            .assignment()
            .map(|tpl| {
                tpl.elements()
                    .iter()
                    .map(|e| (e.topic().to_string(), e.partition()))
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts two members (`<group>-a`, static as `<group>-a-static`, and `<group>-b`, dynamic) of
/// a new group of `protocol` on a new 4-partition topic, waits until both hold partitions
/// covering the topic and the group describes as stable with two members, and checks the
/// description against what each consumer holds.
fn described_group(protocol: &str, kind: GroupKind) {
    let clients = support::clients();
    let topic = support::unique(&format!("describe-{protocol}"));
    let group = support::unique(&format!("describe-{protocol}-g"));
    support::create_topics(&[&topic], PARTITIONS);
    let (client_a, client_b) = (format!("{group}-a"), format!("{group}-b"));
    let instance_a = format!("{group}-a-static");
    let members = [
        Member::join(protocol, &group, &topic, &client_a, Some(&instance_a)),
        Member::join(protocol, &group, &topic, &client_b, None),
    ];
    let started = std::time::Instant::now();
    support::wait_for("both members to hold the topic's partitions", WAIT, || {
        let held: Vec<Vec<(String, i32)>> = members.iter().map(Member::own_assignment).collect();
        let all: BTreeSet<i32> = held.iter().flatten().map(|(_, p)| *p).collect();
        (held.iter().all(|h| !h.is_empty()) && all.len() == PARTITIONS as usize).then_some(())
    });
    let described = support::wait_for("a stable description with two members", WAIT, || {
        let d = describe_group(&clients, &group, Duration::from_secs(5)).ok()?;
        (d.is_stable() && d.members.len() == 2).then_some(d)
    });
    println!(
        "{protocol}: stable after {:?}: {described:?}",
        started.elapsed()
    );
    check(
        &described,
        kind,
        &topic,
        &members,
        [&client_a, &client_b],
        &instance_a,
    );
}

fn check(
    d: &GroupDescription,
    kind: GroupKind,
    topic: &str,
    members: &[Member; 2],
    clients: [&String; 2],
    instance_a: &str,
) {
    assert_eq!(d.state, "Stable");
    assert_eq!(d.kind, kind);
    let ids: BTreeSet<&str> = d.members.iter().map(|m| m.client_id.as_str()).collect();
    assert_eq!(ids, clients.iter().map(|c| c.as_str()).collect());
    for (member, client) in members.iter().zip(clients) {
        let m = d
            .members
            .iter()
            .find(|m| &m.client_id == client)
            .expect("described");
        let mut described = m.assignment.clone();
        described.sort();
        assert_eq!(
            described,
            member.own_assignment(),
            "{client}: the description's assignment is the one its consumer holds"
        );
        assert!(described.iter().all(|(t, _)| t == topic), "{described:?}");
    }
    let a = &d.members.iter().find(|m| &m.client_id == clients[0]);
    let b = &d.members.iter().find(|m| &m.client_id == clients[1]);
    assert_eq!(
        a.and_then(|m| m.instance_id.as_deref()),
        Some(instance_a),
        "the static member's group.instance.id"
    );
    assert_eq!(
        b.and_then(|m| m.instance_id.clone()),
        None,
        "a dynamic member"
    );
    // Range over one topic: the partitions split between the two, each held once.
    let (pa, pb) = (
        a.map(|m| m.partitions_of(topic)).unwrap_or_default(),
        b.map(|m| m.partitions_of(topic)).unwrap_or_default(),
    );
    assert_eq!(pa.len() + pb.len(), PARTITIONS as usize, "{pa:?} {pb:?}");
    let all: BTreeSet<i32> = pa.iter().chain(&pb).copied().collect();
    assert_eq!(all, (0..PARTITIONS).collect());
    // What the standby placement makes of it: each member keeps the other's partitions warm.
    let owners = d.owners(topic).expect("stable");
    assert_eq!(
        placement(&owners, clients[0], 1),
        pb.iter().copied().collect()
    );
    assert_eq!(
        placement(&owners, clients[1], 1),
        pa.iter().copied().collect()
    );
}

#[test]
fn a_classic_group_is_described_with_its_members_and_their_assignments() {
    described_group("classic", GroupKind::Classic);
}

#[test]
fn a_consumer_protocol_group_is_described_with_its_members_and_their_assignments() {
    described_group("consumer", GroupKind::Consumer);
}

#[test]
fn describe_groups_sees_no_member_of_a_consumer_protocol_group_where_describe_group_does() {
    // Why the placement moved off rust-rdkafka's fetch_group_list (DescribeGroups).
    let clients = support::clients();
    let topic = support::unique("describe-legacy");
    let group = support::unique("describe-legacy-g");
    support::create_topics(&[&topic], 2);
    let _member = Member::join("consumer", &group, &topic, &format!("{group}-a"), None);
    // A consumer-protocol group can be described as stable with its one member before that
    // member's assignment is reconciled (seen on a loaded machine): wait for both partitions.
    let described = support::wait_for(
        "a stable description with one member owning both partitions",
        WAIT,
        || {
            let d = describe_group(&clients, &group, Duration::from_secs(5)).ok()?;
            (d.is_stable() && d.members.len() == 1 && d.members[0].partitions_of(&topic) == [0, 1])
                .then_some(d)
        },
    );
    assert_eq!(described.kind, GroupKind::Consumer);
    let reader: BaseConsumer = clients.config(ClientRole::Reader).create().expect("reader");
    let list = reader
        .fetch_group_list(Some(&group), Duration::from_secs(10))
        .expect("DescribeGroups answers");
    let legacy: Vec<(String, usize)> = list
        .groups()
        .iter()
        .map(|g| (g.state().to_string(), g.members().len()))
        .collect();
    println!("DescribeGroups of a consumer-protocol group: {legacy:?}");
    assert!(
        legacy.iter().all(|(_, members)| *members == 0),
        "DescribeGroups lists no member: {legacy:?}"
    );
}

#[test]
fn a_group_nobody_joined_is_not_described_as_stable() {
    let group = support::unique("describe-nobody");
    match describe_group(&support::clients(), &group, Duration::from_secs(10)) {
        Ok(d) => {
            println!("unknown group: {d:?}");
            assert!(!d.is_stable() && d.members.is_empty(), "{d:?}");
            assert_eq!(d.owners("any"), None);
        }
        Err(e) => {
            println!("unknown group: {e}");
            assert!(
                matches!(e, DescribeError::Failed { .. }),
                "a broker error, not a timeout: {e:?}"
            );
        }
    }
}

/// Every `.rs` file under `dir`, skipping build output.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name();
        if path.is_dir() {
            if name != "target" && name != ".git" {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn describe_rs_is_the_only_file_that_allows_unsafe_code() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut files = Vec::new();
    for dir in ["src", "crates", "benches", "tests", "examples", "fuzz"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 50, "found {} files", files.len());
    // An attribute naming the lint (`allow(…)`, `expect(…)`); split so this file does not
    // match itself.
    let needle = ["(unsafe", "_code"].concat();
    let allowing: Vec<String> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).is_ok_and(|text| text.contains(&needle)))
        .filter_map(|f| f.strip_prefix(root).ok().map(|p| p.display().to_string()))
        .collect();
    assert_eq!(allowing, vec!["src/kafka/describe.rs".to_string()]);
    // And every crate takes the workspace's lints (which deny unsafe code).
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    assert!(manifest.contains("unsafe_code = \"deny\""));
    for member in [
        "crates/outbox",
        "crates/outbox-writer",
        "crates/orders",
        "crates/verify",
        "crates/cli",
        "crates/simkafka",
        "crates/projection",
        "benches",
    ] {
        let text = std::fs::read_to_string(root.join(member).join("Cargo.toml")).expect(member);
        assert!(text.contains("[lints]\nworkspace = true"), "{member}");
    }
    assert!(manifest.contains("[lints]\nworkspace = true"), "the core");
}

/// Each member's partitions of each topic: `true` when every member holds the same partition
/// numbers of every topic (partition p of all topics on one member).
fn copartitioned(members: &[&Member], topics: &[String]) -> bool {
    members.iter().all(|m| {
        let held = m.own_assignment();
        let of = |t: &String| -> BTreeSet<i32> {
            held.iter()
                .filter(|(ht, _)| ht == t)
                .map(|(_, p)| *p)
                .collect()
        };
        topics.iter().all(|t| of(t) == of(&topics[0]))
    })
}

/// Waits until every one of `members` holds partitions and between them they hold every
/// partition of `topics` once (the group settled on its target assignment).
fn settled(members: &[&Member], topics: &[String], partitions: i32) {
    support::wait_for(
        "every member to hold its share of the partitions",
        WAIT,
        || {
            let held: Vec<Vec<(String, i32)>> =
                members.iter().map(|m| m.own_assignment()).collect();
            let all: BTreeSet<&(String, i32)> = held.iter().flatten().collect();
            let total: usize = held.iter().map(Vec::len).sum();
            let want = topics.len() * partitions as usize;
            (held.iter().all(|h| !h.is_empty()) && all.len() == want && total == want).then_some(())
        },
    );
}

#[test]
fn the_brokers_range_assignor_keeps_partition_p_of_every_topic_on_one_member_as_members_come_and_go(
) {
    // eosflow's task of partition p needs p of every input, retry level and table: under the
    // consumer protocol it asks the broker for `range` (its default, `uniform`, spreads each
    // topic on its own).
    const N: i32 = 6;
    for assignor in ["range", "uniform"] {
        let group = support::unique(&format!("assignor-{assignor}"));
        let topics: Vec<String> = ["in", "in.retry.1", "table"]
            .iter()
            .map(|t| format!("{group}.{t}"))
            .collect();
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        support::create_topics(&names, N);
        let join = |m: &str| {
            Member::join_topics(
                "consumer",
                assignor,
                &group,
                &names,
                &format!("{group}-{m}"),
                None,
            )
        };
        let (a, b) = (join("a"), join("b"));
        settled(&[&a, &b], &topics, N);
        let two = copartitioned(&[&a, &b], &topics);
        let c = join("c");
        settled(&[&a, &b, &c], &topics, N);
        let three = copartitioned(&[&a, &b, &c], &topics);
        let held: Vec<_> = [&a, &b, &c].iter().map(|m| m.own_assignment()).collect();
        drop(b);
        settled(&[&a, &c], &topics, N);
        let after_leave = copartitioned(&[&a, &c], &topics);
        println!("{assignor}: co-partitioned with two members {two}, after a join {three}, after a leave {after_leave}; three members held {held:?}");
        if assignor == "range" {
            assert!(
                two && three && after_leave,
                "range split a partition number: {held:?}"
            );
        }
    }
}
