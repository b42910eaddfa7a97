//! A Postgres transaction over `outbox.max_rows_per_transaction` rows is published in several
//! Kafka transactions (a `read_committed` reader sees its parts arrive), and a `kill -9` between
//! two parts resumes after the last part in Kafka: every row exactly once, in order per
//! aggregate. A transaction over the limit that is rolled back publishes nothing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::Message;

use super::{count_by_id, support, Outbox, PG_RESTART};

#[test]
fn a_transaction_over_the_limit_is_published_in_parts_and_a_kill_between_parts_resumes_exactly_once(
) {
    let _shared = PG_RESTART.read().unwrap_or_else(|e| e.into_inner());
    let limits = [
        ("EOSFLOW_OUTBOX_MAX_ROWS_PER_TRANSACTION", "2000"),
        ("EOSFLOW_OUTBOX_BATCH_SIZE", "1000"),
    ];
    let mut o = Outbox::new("outbox-split");
    o.migrate();
    o.spawn("cdc", &limits);
    o.wait_streaming();
    const BIG: usize = 100_000;
    let topic = o.topic("Order");
    // Counts what a read_committed reader sees, from the start of the routed topic.
    let consumer: BaseConsumer = support::clients()
        .config(eosflow::kafka::ClientRole::Reader)
        .set("enable.partition.eof", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("consumer");
    let small = |n: usize, tag: &str| {
        format!(
            "insert into {} (id, aggregate_id, type, payload) \
             select gen_random_uuid(), 'small-{tag}-' || i, 'Order.Created', '{{}}'::jsonb \
             from generate_series(1, {n}) i",
            o.table
        )
    };
    o.pg.exec(&small(100, "before"));
    // Over the limit too, then rolled back: none of it may reach Kafka.
    o.pg.exec(&format!(
        "begin; insert into {} (id, aggregate_id, type, payload) \
         select gen_random_uuid(), 'rolled-back-' || (i % 50), 'Order.Changed', '{{}}'::jsonb \
         from generate_series(1, 5000) i; rollback",
        o.table
    ));
    // One transaction of 100 000 rows over 50 aggregates, `n` rising in insertion order.
    o.pg.exec(&format!(
        "insert into {} (id, aggregate_id, type, payload) \
         select gen_random_uuid(), 'agg-' || (i % 50), 'Order.Changed', jsonb_build_object('n', i) \
         from generate_series(0, {}) i",
        o.table,
        BIG - 1
    ));
    o.pg.exec(&small(100, "after"));
    let total = BIG + 200;
    support::wait_for("the routed topic", Duration::from_secs(60), || {
        let md = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(5))
            .ok()?;
        (md.topics().first()?.partitions().len() == 4).then_some(())
    });
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..4 {
        tpl.add_partition_offset(&topic, p, rdkafka::Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&tpl).expect("assign");
    // Kill the router once part of the big transaction is visible, and not all of it.
    let mut seen = 0usize;
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen < 100 + 10_000 {
        assert!(
            Instant::now() < deadline,
            "{seen} rows visible after 2 minutes (logs in {})",
            o.logs.display()
        );
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            if m.payload().is_some() {
                seen += 1;
            }
        }
    }
    o.kill(0);
    assert!(
        seen < total,
        "the big transaction became visible in parts: {seen} of {total} rows before the kill"
    );
    o.spawn("cdc", &limits);
    let ids = o.all_ids();
    assert_eq!(ids.len(), total);
    let got = o.wait_for_ids(&["Order"], &ids, Duration::from_secs(180));
    let counts = count_by_id(&got);
    let dups: Vec<_> = counts.iter().filter(|(_, &n)| n > 1).take(5).collect();
    assert!(
        dups.is_empty(),
        "rows published twice after a kill between parts: {dups:?} (logs in {})",
        o.logs.display()
    );
    let rolled_back = got
        .iter()
        .filter(|s| s.key.starts_with("rolled-back-"))
        .count();
    assert_eq!(
        rolled_back, 0,
        "rows of a rolled-back transaction were published"
    );
    assert_eq!(got.len(), total);
    let mut last: HashMap<&str, i64> = HashMap::new();
    for s in got.iter().filter(|s| s.key.starts_with("agg-")) {
        let v: serde_json::Value =
            serde_json::from_str(s.value.as_deref().unwrap_or("null")).expect("json payload");
        let n = v["n"].as_i64().expect("n");
        if let Some(prev) = last.insert(s.key.as_str(), n) {
            assert!(prev < n, "{}: {n} after {prev}", s.key);
        }
    }
    let log = std::fs::read_to_string(o.logs.join("router-1.log")).unwrap_or_default();
    assert!(
        log.contains("resuming a split transaction"),
        "the second router resumed inside the big transaction (logs in {})",
        o.logs.display()
    );
}
