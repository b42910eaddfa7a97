//! Repartitioning under `kill -9`: orders keyed by order id, re-keyed by customer through
//! `<app>-by-customer-repartition` (written in the transaction of the order that caused it,
//! read back by the same application) and counted per customer, one output per update. An
//! instance is SIGKILLed mid-stream (once 500 orders are consumed: it re-keys or already
//! counts), its replacement SIGKILLed once it has written counts of its own, and a third one
//! finishes; the read_committed output must hold, per
//! customer, exactly the counts 1, 2, …, n in order — n computed from the workload alone — and
//! the repartition topic exactly one record per order.
//!
//! The orders carry no `id` header, so dedup does not absorb a replayed order: only the
//! transactions keep each one counted once. (Repartition records carry the fresh `id` every
//! output gets, and are deduplicated by it like any input's.)
//!
//! Besides the orders, the repartition topic holds the upstream tasks' watermark records (no
//! key, no value: see the architecture's task model), which the test skips.
//!
//! The instance is this test binary re-executed in child mode (`REPARTITION_CHILD`).

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use eosflow::config::Config;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::topology::Topology;

const CHILD: &str = "REPARTITION_CHILD";
const PARTITIONS: i32 = 4;
const ORDERS: u64 = 4000;
const CUSTOMERS: u64 = 17;

/// Order `i`: its id (the key) and its value `customer:order-id`.
fn order(i: u64) -> (String, String) {
    let customer = format!("c-{:02}", (i * 7 + i / 5) % CUSTOMERS);
    let id = format!("o-{i:05}");
    (id.clone(), format!("{customer}:{id}"))
}

/// Orders re-keyed by customer and counted per customer (`support::rekeyed_count`).
fn topology(input: &str, output: &str) -> Topology {
    support::rekeyed_count(input, output)
}

fn config(app: &str) -> Config {
    let mut c = support::config();
    c.app.id = app.to_string();
    c.app.instance_id = "a".into();
    c.processor.session_timeout_ms = 6000;
    c.processor.commit_interval_ms = 100;
    c.processor.max_batch_records = 50;
    // The test reads every repartition record back at the end: none purged.
    c.processor.repartition_purge_interval_ms = 0;
    c.state.dir = std::env::temp_dir().join(format!("eosflow-test-{app}"));
    c
}

/// Child mode: runs the topology until killed.
#[test]
fn child_instance() {
    let Ok(app) = std::env::var(CHILD) else {
        return;
    };
    support::run_until_killed(
        config(&app),
        topology(&format!("{app}.in"), &format!("{app}.out")),
    );
}

#[test]
fn a_repartitioned_count_killed_mid_stream_counts_every_order_once_per_customer() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let started = Instant::now();
    let app = support::unique("repart");
    let (input, output) = (format!("{app}.in"), format!("{app}.out"));
    let repartition = format!("{app}-by-customer-repartition");
    let cfg = config(&app);
    let t = topology(&input, &output);
    let mut specs = vec![
        TopicSpec::new(&input, PARTITIONS, "delete"),
        TopicSpec::new(&output, PARTITIONS, "delete"),
    ];
    let internal = t.internal_topics(&cfg, PARTITIONS);
    assert!(
        internal
            .iter()
            .any(|s| s.name == repartition && s.partitions == PARTITIONS),
        "the repartition topic is an internal topic"
    );
    specs.extend(internal);
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");
    // Timestamps of now: records older than the topics' retention would be deleted under the
    // test's feet (a segment of old records is rolled and dropped at once).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let records: Vec<support::Timed> = (0..ORDERS)
        .map(|i| {
            let (key, value) = order(i);
            (None, key, value, now + i as i64)
        })
        .collect();
    support::produce_timed(&input, &records);

    let mut first = support::spawn_child(CHILD, &app);
    // Re-keying an order is quick, counting comes after: kill once some orders are consumed,
    // while the orders or their repartition records are still being worked through (the
    // whole input may be consumed by the time the lag is seen: then it dies counting).
    support::wait_for("the first orders consumed", Duration::from_secs(60), || {
        (support::lag(&app, &input, PARTITIONS) <= ORDERS as i64 - 500).then_some(())
    });
    first.kill().expect("kill -9");
    first.wait().expect("reaped");
    let (left, rekeyed_left) = (
        support::lag(&app, &input, PARTITIONS),
        support::lag(&app, &repartition, PARTITIONS),
    );
    let counted_before = support::written(&output, PARTITIONS);
    println!(
        "killed with {left} of {ORDERS} orders and {rekeyed_left} repartition records left after {:?}",
        started.elapsed()
    );
    assert!(
        left + rekeyed_left > 0,
        "the instance must die mid-stream, not after the work"
    );
    // The second instance first re-keys the rest of the orders, then counts (the consumer's
    // queue holds the orders' backlog ahead of the repartition records): kill it again
    // once it has written counts of its own: more than 20 new offsets in the output (the
    // abort of the first instance's open transaction adds at most one marker a partition).
    let mut second = support::spawn_child(CHILD, &app);
    support::wait_for(
        "the second instance's first counts",
        Duration::from_secs(60),
        || (support::written(&output, PARTITIONS) > counted_before + 20).then_some(()),
    );
    second.kill().expect("kill -9");
    second.wait().expect("reaped");
    let rekeyed_left = support::lag(&app, &repartition, PARTITIONS);
    println!(
        "killed again with {rekeyed_left} repartition records left after {:?}",
        started.elapsed()
    );
    // Not asserted: a replacement that counts the rest between two polls is killed after it.
    if rekeyed_left == 0 {
        println!("the second instance finished before it was killed");
    }
    let mut third = support::spawn_child(CHILD, &app);
    support::wait_for(
        "every order and every repartition record processed",
        Duration::from_secs(90),
        || {
            (support::lag(&app, &input, PARTITIONS) == 0
                && support::lag(&app, &repartition, PARTITIONS) == 0)
                .then_some(())
        },
    );
    third.kill().expect("kill -9");
    third.wait().expect("reaped");

    // The expectation, from the workload alone: per customer, its number of orders.
    let mut orders_of: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..ORDERS {
        let (_, value) = order(i);
        let customer = value.split_once(':').map(|(c, _)| c.to_string());
        *orders_of.entry(customer.unwrap_or_default()).or_default() += 1;
    }
    let mut got: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (customer, v) in support::read_payloads(&output) {
        let bytes: [u8; 8] = v.try_into().expect("an i64 count");
        got.entry(customer)
            .or_default()
            .push(i64::from_be_bytes(bytes));
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        orders_of.keys().collect::<Vec<_>>()
    );
    for (customer, n) in &orders_of {
        let want: Vec<i64> = (1..=*n).collect();
        assert_eq!(&got[customer], &want, "counts of {customer}");
    }
    // The repartition topic holds each order exactly once, keyed by its customer.
    let mut rekeyed: BTreeMap<String, String> = BTreeMap::new();
    for (customer, v) in support::read_payloads(&repartition) {
        let value = String::from_utf8_lossy(&v).to_string();
        let (c, id) = value.split_once(':').expect("customer:order");
        assert_eq!(c, customer, "{value} keyed by its customer");
        assert!(
            rekeyed.insert(id.to_string(), customer).is_none(),
            "order {id} repartitioned twice"
        );
    }
    assert_eq!(rekeyed.len(), ORDERS as usize);
    for dead in [format!("{input}.DLT"), format!("{repartition}.DLT")] {
        assert!(
            support::read_payloads(&dead).is_empty(),
            "nothing dead-lettered in {dead}"
        );
    }
    println!("took {:?}", started.elapsed());
    let _ = std::fs::remove_dir_all(&cfg.state.dir);
}
