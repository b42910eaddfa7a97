//! The fault-injection suite, short versions (`make test`): every named scenario of
//! `eosflow verify --scenario <name> --short` runs as its own process against the real broker,
//! registry and Postgres, and must end with its one closing line saying nothing was lost or
//! duplicated. broker-restart, broker-pause, saga-timeouts and outbox-crash start a PRIVATE
//! broker / Postgres (ports 21092+) and stop it at the end: the shared stack is never restarted.
//! The `fault_cluster_*` scenarios start a private three-broker cluster (dev/cluster, ports
//! 21332+) the same way.
//!
//! The long versions: `make verify-long` (see docs/verification.md).

mod support;

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use eosflow::kafka::topics::{self, TopicOutcome, TopicSpec};
use eosflow::kafka::{ClientRole, KafkaClients};
use eosflow_verify::cluster::Cluster;
use rdkafka::consumer::{BaseConsumer, Consumer};

/// The scenarios that start a private broker run one at a time: two brokers restarting and
/// pausing beside the shared stack on two cores starved a restarted broker for minutes once.
static PRIVATE_BROKERS: Mutex<()> = Mutex::new(());

/// Runs one short scenario; returns its closing line after checking the invariants in it.
fn scenario(name: &str, private_port: u16) -> String {
    scenario_with(name, private_port, &[])
}

/// [`scenario`] with further `eosflow verify` flags.
fn scenario_with(name: &str, private_port: u16, flags: &[&str]) -> String {
    let work = std::env::temp_dir().join(support::unique(&format!("eosflow-fault-{name}")));
    let out = Command::new(env!("CARGO_BIN_EXE_eosflow"))
        .args(["verify", "--scenario", name, "--short", "--work-dir"])
        .arg(&work)
        .arg("--stack-script")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../dev/stack"))
        .args(["--private-port", &private_port.to_string()])
        .args(flags)
        .env("EOSFLOW_KAFKA_BOOTSTRAP", support::bootstrap())
        .env("EOSFLOW_SCHEMA_REGISTRY_URL", support::registry_url())
        .output()
        .expect("run eosflow verify --scenario");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // librdkafka repeats every refused connection to a killed broker (two lines each, several
    // a second): left in, they were the whole tail of a failed isr-shrink run and hid the
    // scenario's own timeline. They are counted, not shown.
    let noise = |l: &&str| l.contains("Connection refused") && l.contains("librdkafka");
    let refused = stderr.lines().filter(noise).count();
    let tail: String = stderr
        .lines()
        .filter(|l| !noise(l))
        .rev()
        // Enough for a private broker's post-mortem (PrivateStack::kafka_post_mortem).
        .take(120)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        out.status.success(),
        "scenario {name} failed ({})\nstdout: {stdout}\nstderr (tail, {refused} librdkafka 'Connection refused' lines left out): {tail}",
        out.status
    );
    let line = stdout.lines().last().unwrap_or_default().to_string();
    for expected in [
        format!("scenario={name} "),
        " lost=0 ".into(),
        " duplicated=0 ".into(),
        " stalls=0 ".into(),
        " ok=true".into(),
    ] {
        assert!(
            line.contains(&expected),
            "closing line {line:?} lacks {expected:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&work);
    line
}

/// The number after `name=` in a closing line.
fn figure(line: &str, name: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
}

#[test]
fn fault_kill_processors_short_with_two_threads_and_a_standby_loses_and_duplicates_nothing() {
    // Issue #21: every instance runs two processing threads (four group members in all) and
    // keeps a standby copy of the other's partitions.
    let line = scenario_with(
        "kill-processors",
        21092,
        &["--threads", "2", "--standby-replicas", "1"],
    );
    assert_eq!(figure(&line, "records"), 10_000);
    assert_eq!(figure(&line, "threads"), 2, "{line}");
    assert_eq!(figure(&line, "standby_replicas"), 1, "{line}");
    assert_eq!(figure(&line, "faults"), 3, "{line}");
    assert_eq!(figure(&line, "state_mismatches"), 0, "{line}");
}

#[test]
fn fault_zombie_short_is_fenced_and_writes_nothing_visible() {
    let line = scenario("zombie", 21092);
    assert_eq!(
        figure(&line, "faults"),
        1,
        "one SIGSTOP past the session timeout: {line}"
    );
    assert_eq!(figure(&line, "sequence_breaks"), 0, "{line}");
}

#[test]
fn fault_broker_restart_short_survives_a_private_broker_restart() {
    let _one_at_a_time = PRIVATE_BROKERS.lock().unwrap_or_else(|e| e.into_inner());
    let line = scenario("broker-restart", 21092);
    assert_eq!(figure(&line, "faults"), 1, "{line}");
    assert_eq!(figure(&line, "state_mismatches"), 0, "{line}");
}

#[test]
fn fault_broker_pause_short_recovers_in_place_without_an_instance_exiting() {
    let _one_at_a_time = PRIVATE_BROKERS.lock().unwrap_or_else(|e| e.into_inner());
    // Its own private port: broker-restart's private broker may run at the same time.
    let line = scenario("broker-pause", 21192);
    assert_eq!(figure(&line, "faults"), 2, "{line}");
    assert_eq!(figure(&line, "state_mismatches"), 0, "{line}");
}

#[test]
fn fault_slow_handler_short_recovers_in_place_from_calls_longer_than_the_transaction_timeout() {
    let line = scenario("slow-handler", 21092);
    assert_eq!(figure(&line, "slow_records"), 4, "{line}");
    assert!(
        figure(&line, "in_place_recoveries") >= 1,
        "a slow call's transaction was aborted under it: {line}"
    );
    assert_eq!(figure(&line, "state_mismatches"), 0, "{line}");
}

#[test]
fn fault_outbox_crash_short_routes_every_row_once_across_router_kills_and_a_postgres_restart() {
    let line = scenario("outbox-crash", 21092);
    assert_eq!(figure(&line, "records"), 5_000);
    assert_eq!(figure(&line, "router_kills"), 3, "{line}");
    assert_eq!(figure(&line, "postgres_restarts"), 1, "{line}");
    assert_eq!(figure(&line, "order_breaks"), 0, "{line}");
}

#[test]
fn fault_poison_short_sends_every_bad_class_to_the_dlt_with_its_reason() {
    let line = scenario("poison", 21092);
    assert!(figure(&line, "classes") >= 20, "{line}");
    assert_eq!(figure(&line, "dlt"), figure(&line, "bad"), "{line}");
    assert_eq!(figure(&line, "wrong_reasons"), 0, "{line}");
    assert_eq!(figure(&line, "leaked"), 0, "{line}");
    assert_eq!(figure(&line, "state_mismatches"), 0, "{line}");
}

/// Forwards connections on `listener` to `target` (both directions) until `until`.
fn forward(listener: std::net::TcpListener, target: String, until: std::time::Instant) {
    use std::net::TcpStream;
    listener.set_nonblocking(true).expect("nonblocking");
    while std::time::Instant::now() < until {
        match listener.accept() {
            Ok((client, _)) => {
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let _ = client.set_nonblocking(false);
                for (mut from, mut to) in [
                    (
                        client.try_clone().expect("clone"),
                        server.try_clone().expect("clone"),
                    ),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// A port in front of the shared broker that stays closed for `closed`, then forwards to it:
/// a broker outage as a client sees it, without touching the shared broker.
fn gated_bootstrap(closed: std::time::Duration) -> eosflow::kafka::KafkaClients {
    use std::time::{Duration, Instant};
    let port = eosflow_verify::free_local_port().expect("a free port");
    let target = support::bootstrap();
    std::thread::spawn(move || {
        std::thread::sleep(closed);
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("reopen the port");
        forward(listener, target, Instant::now() + Duration::from_secs(90));
    });
    let mut kafka = support::config().kafka;
    kafka.bootstrap = format!("127.0.0.1:{port}");
    eosflow::kafka::KafkaClients::new(kafka)
}

/// Regression (found by broker-restart): a processor whose transactional producer was being
/// initialised while the broker restarted gave up after 3 × `transaction.timeout.ms` and exited
/// ("transaction must be aborted: … Timed out waiting for operation to finish"). The broker is
/// gated here by a port that stays closed for 6 s (the old budget with a 1 s timeout was 3 s);
/// the producer must wait for it and come up.
#[test]
fn fault_a_transactional_producer_started_during_a_broker_outage_waits_for_the_broker() {
    use std::time::{Duration, Instant};
    let clients = gated_bootstrap(Duration::from_secs(6));
    let started = Instant::now();
    let sink = eosflow::internals::sink::TxnSink::new(
        &clients,
        &support::unique("fault-init"),
        Duration::from_secs(1),
    );
    let waited = started.elapsed();
    assert!(
        sink.is_ok(),
        "the producer gave up after {waited:?} instead of waiting for the broker: {:?}",
        sink.err()
    );
    assert!(
        waited >= Duration::from_secs(5),
        "the broker was unreachable for 6 s, yet init returned after {waited:?}"
    );
}

/// Regression (found by broker-restart): a restore that began while the broker restarted
/// failed on its first watermark request ("Meta data fetch error: UnknownPartition", or a
/// timeout) and the processor exited. Reading to the end must wait for the broker within the
/// read's own deadline: here the broker is unreachable for 12 s (longer than one 10 s
/// watermark request) and the read has 60 s.
#[test]
fn fault_reading_a_changelog_to_its_end_waits_out_a_broker_outage() {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    use std::collections::BTreeMap;
    use std::time::Duration;
    let topic = support::unique("fault-restore");
    support::create_topics(&[&topic], 1);
    let producer: ThreadedProducer<DefaultProducerContext> = support::clients()
        .config(eosflow::kafka::ClientRole::Idempotent)
        .create()
        .expect("producer");
    for i in 0..3 {
        let v = format!("v{i}");
        producer
            .send(BaseRecord::<str, str>::to(&topic).key("k").payload(&v))
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    let clients = gated_bootstrap(Duration::from_secs(12));
    let mut seen = 0;
    let ends = eosflow::internals::kafka::reader::read_to_end(
        &clients,
        &topic,
        &BTreeMap::from([(0, None)]),
        Duration::from_secs(60),
        |_| {
            seen += 1;
            Ok(())
        },
    );
    let ends = ends.expect("the read waited for the broker and reached the end");
    assert_eq!(ends.get(&0), Some(&3));
    assert_eq!(seen, 3);
}

#[test]
fn fault_parked_flood_short_drains_thousands_of_followers_in_order() {
    let line = scenario("parked-flood", 21092);
    for expected in [
        "lost=0",
        "duplicated=0",
        "state_mismatches=0",
        "stalls=0",
        "sequence_breaks=0",
    ] {
        assert!(line.contains(expected), "{line}");
    }
}

#[test]
fn fault_stale_store_short_rebuilds_a_store_kept_away_past_the_delete_retention() {
    let line = scenario("stale-store", 21092);
    assert!(line.contains("state_mismatches=0"), "{line}");
    assert!(figure(&line, "stale_rebuilds") >= 2, "{line}");
}

#[test]
fn fault_windows_short_emits_every_window_once_and_dead_letters_every_late_record() {
    let line = scenario("windows", 21092);
    for exact in [
        "wrong_windows=0",
        "late_missing=0",
        "dlt_wrong=0",
        "kills=3",
    ] {
        assert!(line.contains(exact), "{line}");
    }
    assert!(figure(&line, "late") > 0, "{line}");
    assert_eq!(figure(&line, "late"), figure(&line, "dlt"), "{line}");
    assert!(figure(&line, "kills_mid_stream") >= 1, "{line}");
}

#[test]
fn fault_repartition_backlog_short_counts_every_click_of_a_backlog_with_none_late() {
    let line = scenario("repartition-backlog", 21092);
    for exact in ["wrong_windows=0", "late=0", "dlt=0", "kills=3"] {
        assert!(line.contains(exact), "{line}");
    }
    assert!(figure(&line, "kills_mid_stream") > 0, "{line}");
}

#[test]
fn fault_joins_short_gives_every_record_the_row_of_its_time_once() {
    let line = scenario("joins", 21092);
    for exact in ["wrong_rows=0", "kills=3"] {
        assert!(line.contains(exact), "{line}");
    }
    assert!(figure(&line, "table_updates") > 1_500, "{line}");
    assert!(figure(&line, "joined_with_row") > 10_000, "{line}");
    assert!(figure(&line, "kills_mid_stream") >= 1, "{line}");
}

/// Issue #32: wall-clock timers firing on partitions that receive nothing more (commits without
/// input offsets), the private broker frozen past the transaction timeout while they are due,
/// instances killed mid-stream: every input's timeout emitted once, with its content.
#[test]
fn fault_saga_timeouts_short_fires_every_timeout_once_across_broker_pauses_and_kills() {
    let _one_at_a_time = PRIVATE_BROKERS.lock().unwrap_or_else(|e| e.into_inner());
    let line = scenario("saga-timeouts", 21592);
    assert_eq!(figure(&line, "records"), 2_000, "{line}");
    for exact in ["dlt=0", "wrong_results=0", "pending_timers=0", "kills=3"] {
        assert!(line.contains(exact), "{line}");
    }
    assert!(figure(&line, "kills_mid_stream") >= 1, "{line}");
    // Two pauses are planned; the second is left out when every result is in before it.
    assert!(figure(&line, "pauses_with_timers_due") >= 1, "{line}");
    println!("{line}");
}

#[test]
fn fault_rebalance_storm_short_with_standbys_loses_and_duplicates_nothing() {
    // A fixed seed: the same choice of events each run (up to how fast graceful stops finish);
    // the long version (`make verify-scenario SCENARIO=rebalance-storm`) draws a new one.
    let line = scenario_with(
        "rebalance-storm",
        21092,
        &["--standby-replicas", "1", "--seed", "9590735510894642721"],
    );
    assert_eq!(figure(&line, "records"), 30_000, "{line}");
    assert_eq!(figure(&line, "standby_replicas"), 1, "{line}");
    assert_eq!(figure(&line, "events"), 12, "{line}");
    for kind in ["graceful_stops", "starts", "kill9s"] {
        assert!(figure(&line, kind) >= 1, "no {kind}: {line}");
    }
    assert_eq!(figure(&line, "state_mismatches"), 0, "{line}");
    assert_eq!(figure(&line, "crashes"), 0, "{line}");
    assert_eq!(figure(&line, "unclean_stops"), 0, "{line}");
    println!("{line}");
}

/// The private port of a cluster test: `EOSFLOW_TEST_CLUSTER_PRIVATE_PORT` when set (a developer
/// whose machine already runs a cluster on the default ports), else `default`. The cluster
/// tests run one at a time, so one override serves them all.
fn cluster_private_port(default: u16) -> u16 {
    std::env::var("EOSFLOW_TEST_CLUSTER_PRIVATE_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(default)
}

/// The replica count of every partition of `topic` (empty while it does not exist), from a fresh
/// client's metadata.
fn replica_counts(clients: &KafkaClients, topic: &str) -> Vec<usize> {
    let consumer: BaseConsumer = clients
        .config(ClientRole::Reader)
        .create()
        .expect("a metadata client");
    let Ok(md) = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)) else {
        return Vec::new();
    };
    md.topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.replicas().len()))
        .collect()
}

/// The brokers a fresh client's metadata lists (the live, unfenced ones).
fn brokers_up(clients: &KafkaClients) -> usize {
    let consumer: BaseConsumer = clients
        .config(ClientRole::Reader)
        .create()
        .expect("a metadata client");
    consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .map_or(0, |md| md.brokers().len())
}

/// Issue #33, the replication-factor bug: `topics::apply` asked for min(3, brokers up), so a
/// topic created while one of three brokers was down kept 2 replicas for good, silently (this
/// test saw `replicas [2, 2, 2, 2]` before the fix). Now a topic without a declared factor
/// takes the cluster's `default.replication.factor` (3 on dev/cluster) and the broker decides:
/// Kafka 4.4's controller places the third replica on the stopped (fenced but registered)
/// broker, so the topic has 3 replicas, one offline until the broker is back; a controller that
/// refused would have to say so in the error. A declared factor above the registered brokers is
/// refused with an error naming the topic, the factor and the brokers, never capped. Never 2.
#[test]
fn fault_cluster_a_topic_created_while_a_broker_is_down_is_refused_never_under_replicated() {
    let _one_at_a_time = PRIVATE_BROKERS.lock().unwrap_or_else(|e| e.into_inner());
    let port = cluster_private_port(21592) + 40;
    let cluster = Cluster::new(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../dev/cluster").into(),
        std::env::temp_dir().join(support::unique("eosflow-rf-cluster")),
        port,
    );
    let _guard = cluster.up().expect("starting the three-node cluster");
    let mut config = eosflow::config::Config::default();
    config.kafka.bootstrap = cluster.bootstrap();
    let clients = KafkaClients::new(config.kafka);
    let topic = support::unique("rf");
    let spec = [TopicSpec::new(topic.clone(), 4, "delete")];

    cluster.stop(3).expect("stopping broker 3");
    let deadline = Instant::now() + Duration::from_secs(60);
    while brokers_up(&clients) != 2 {
        assert!(
            Instant::now() < deadline,
            "the metadata still lists {} brokers 60 s after broker 3 stopped",
            brokers_up(&clients)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    match topics::apply_blocking(&clients, &spec, Duration::from_secs(30)) {
        Err(e) => {
            let said = e.to_string();
            assert!(
                said.contains(&topic)
                    && said.contains("default.replication.factor")
                    && said.contains("brokers"),
                "the refusal must name the topic, the factor asked for and the brokers: {said}"
            );
            assert!(
                replica_counts(&clients, &topic).is_empty(),
                "refused, yet {topic} exists with replicas {:?}",
                replica_counts(&clients, &topic)
            );
        }
        Ok(outcomes) => {
            // A topic just created may take a moment to reach every broker's metadata.
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut replicas = replica_counts(&clients, &topic);
            while replicas.len() != 4 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(250));
                replicas = replica_counts(&clients, &topic);
            }
            assert!(
                replicas.len() == 4 && replicas.iter().all(|r| *r == 3),
                "with a broker down {topic} was created ({outcomes:?}) with replicas {replicas:?}: \
                 under-replicated for good"
            );
        }
    }

    // A declared factor the cluster cannot have: refused, naming it, never capped to 3.
    let four = support::unique("rf4");
    let mut declared = TopicSpec::new(four.clone(), 1, "delete");
    declared.replication = Some(4);
    let said = topics::apply_blocking(&clients, &[declared], Duration::from_secs(30))
        .map(|o| format!("{o:?}; replicas {:?}", replica_counts(&clients, &four)))
        .expect_err("a replication factor of 4 on three brokers was accepted");
    let said = said.to_string();
    assert!(
        said.contains(&four) && said.contains("replication factor 4") && said.contains("brokers"),
        "{said}"
    );
    assert!(replica_counts(&clients, &four).is_empty(), "{four} exists");

    cluster.start(3).expect("starting broker 3 again");
    let deadline = Instant::now() + Duration::from_secs(60);
    let outcomes = loop {
        match topics::apply_blocking(&clients, &spec, Duration::from_secs(30)) {
            Ok(o) => break o,
            Err(e) => {
                // The restarted broker is ready before the controller unfences it.
                assert!(
                    Instant::now() < deadline,
                    "apply after broker 3 came back: {e}"
                );
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    };
    assert!(
        outcomes
            .iter()
            .all(|(_, o)| matches!(o, TopicOutcome::Created | TopicOutcome::Unchanged)),
        "{outcomes:?}"
    );
    assert_eq!(replica_counts(&clients, &topic), vec![3; 4], "{topic}");
}

/// Issue #33: the scenarios on a private three-broker cluster (dev/cluster: replication factor 3,
/// min.insync.replicas=2), one at a time (three JVMs of up to 1 GiB each beside the shared
/// stack), each judged twice: by the verifier and by Apache Kafka's console consumer.
fn cluster_scenario(name: &str, private_port: u16) -> String {
    let _one_at_a_time = PRIVATE_BROKERS.lock().unwrap_or_else(|e| e.into_inner());
    let line = scenario(name, cluster_private_port(private_port));
    for exact in [
        "state_mismatches=0",
        "not_produced=0",
        "console_lost=0",
        "console_duplicated=0",
        "console_agrees=true",
    ] {
        assert!(line.contains(exact), "{line}");
    }
    assert_eq!(figure(&line, "records"), 20_000, "{line}");
    assert_eq!(figure(&line, "console_inputs"), 20_000, "{line}");
    println!("{line}");
    line
}

#[test]
fn fault_cluster_leader_bounce_short_survives_clean_and_hard_bounces_of_the_busiest_leader() {
    let line = cluster_scenario("leader-bounce", 21292);
    assert_eq!(figure(&line, "clean_bounces"), 1, "{line}");
    assert_eq!(figure(&line, "hard_bounces"), 1, "{line}");
}

#[test]
fn fault_cluster_coordinator_bounce_short_survives_kill_9_of_the_transaction_coordinator() {
    let line = cluster_scenario("coordinator-bounce", 21392);
    assert_eq!(figure(&line, "coordinator_bounces"), 2, "{line}");
}

#[test]
fn fault_cluster_broker_pause_one_short_survives_one_broker_frozen_past_the_transaction_timeout() {
    let line = cluster_scenario("broker-pause-one", 21492);
    assert_eq!(figure(&line, "pauses"), 1, "{line}");
}

/// Quarantined (run it with `cargo test --locked --test fault -- --ignored isr_shrink`, or
/// `eosflow verify --scenario isr-shrink --short`): see docs/verification.md, "isr-shrink is
/// quarantined".
#[test]
#[ignore = "quarantined: resume after the follower's return took 63-72 s (> the 60 s stall bound) in 3 of its last 4 runs, lost=0 duplicated=0; docs/verification.md 'isr-shrink is quarantined'"]
fn fault_cluster_isr_shrink_short_waits_out_a_partition_with_no_in_sync_leader_and_resumes_alone() {
    let line = cluster_scenario("isr-shrink", 21692);
    assert_eq!(figure(&line, "isr_shrinks"), 1, "{line}");
    assert_eq!(figure(&line, "resumed_without_leader"), 1, "{line}");
    assert_eq!(figure(&line, "pauses"), 1, "{line}");
    assert_eq!(figure(&line, "hard_bounces"), 1, "{line}");
    // An operator sees what the instances wait for: their /healthz named the partition's
    // leader or its in-sync replicas while nothing could be written.
    assert!(
        line.contains("waits_seen=")
            && (line.contains("partition-leader:") || line.contains("in-sync-replicas:")),
        "{line}"
    );
}

#[test]
fn fault_cluster_outbox_leader_bounce_short_publishes_every_row_once_while_leaders_bounce() {
    let _one_at_a_time = PRIVATE_BROKERS.lock().unwrap_or_else(|e| e.into_inner());
    let line = scenario("outbox-leader-bounce", cluster_private_port(21792));
    for exact in [
        "router_exits=0",
        "order_breaks=0",
        "console_lost=0",
        "console_duplicated=0",
        "console_agrees=true",
    ] {
        assert!(line.contains(exact), "{line}");
    }
    assert_eq!(figure(&line, "records"), 10_000, "{line}");
    assert_eq!(figure(&line, "rows_in_table"), 10_000, "{line}");
    assert_eq!(figure(&line, "clean_bounces"), 1, "{line}");
    assert_eq!(figure(&line, "hard_bounces"), 1, "{line}");
    println!("{line}");
}
