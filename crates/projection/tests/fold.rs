//! The headline property: a fold applied in batches, with crashes between batches and the
//! replays a restarted consumer produces, ends equal to the fold computed from the input alone.

mod common;

use std::collections::BTreeMap;

use common::*;
use eosflow_projection::{Batch, PartitionBatch, Record, RowOp, Value};

struct Event {
    partition: i32,
    offset: i64,
    seq: i64,
    key: i64,
    amount: i64,
}

/// A deterministic workload (a small LCG: no randomness crate needed).
fn workload(n: usize) -> Vec<Event> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x >> 33
    };
    let mut offsets = [0i64; 3];
    (0..n)
        .map(|i| {
            let partition = (next() % 3) as i32;
            let o = &mut offsets[partition as usize];
            *o += 1 + (next() % 2) as i64; // gaps, like transaction markers
            Event {
                partition,
                offset: *o,
                seq: i as i64,
                key: (next() % 17) as i64,
                amount: (next() % 1000) as i64 - 300,
            }
        })
        .collect()
}

fn ops(t: &Tables, e: &Event) -> Vec<RowOp> {
    vec![
        RowOp::Sql {
            statement: format!(
                "INSERT INTO {} (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = {}.n + 1",
                t.counts, t.counts
            ),
            params: vec![Value::Int(e.key)],
        },
        RowOp::Sql {
            statement: format!(
                "INSERT INTO {} (k, total) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET total = {}.total + $2",
                t.sums, t.sums
            ),
            params: vec![Value::Int(e.key), Value::Int(e.amount)],
        },
        RowOp::Insert {
            table: t.events.clone(),
            columns: vec![
                ("p".into(), Value::Int(e.partition.into())),
                ("o".into(), Value::Int(e.offset)),
                ("k".into(), Value::Int(e.key)),
                ("amount".into(), Value::Int(e.amount)),
            ],
        },
        RowOp::Upsert {
            table: t.latest.clone(),
            key: vec![("k".into(), Value::Int(e.key))],
            columns: vec![("amount".into(), Value::Int(e.amount))],
            version: Some(e.seq),
        },
    ]
}

struct Tables {
    counts: String,
    sums: String,
    events: String,
    latest: String,
}

/// Batches of `size` events, all partitions mixed, in input order per partition.
fn batches(t: &Tables, events: &[Event], size: usize, topic: &str) -> Vec<Vec<PartitionBatch>> {
    events
        .chunks(size)
        .map(|chunk| {
            let mut by_p: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
            for e in chunk {
                by_p.entry(e.partition).or_default().push(Record {
                    offset: e.offset,
                    message_id: None,
                    ops: ops(t, e),
                });
            }
            by_p.into_iter()
                .map(|(partition, records)| PartitionBatch {
                    topic: topic.into(),
                    partition,
                    records,
                })
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fold_with_crashes_and_replays_equals_the_fold_of_the_input() {
    let admin = admin().await;
    let name = unique("fold");
    let t = Tables {
        counts: format!("{name}_counts"),
        sums: format!("{name}_sums"),
        events: format!("{name}_events"),
        latest: format!("{name}_latest"),
    };
    admin
        .batch_execute(&format!(
            "CREATE TABLE {} (k bigint PRIMARY KEY, n bigint NOT NULL);
             CREATE TABLE {} (k bigint PRIMARY KEY, total bigint NOT NULL);
             CREATE TABLE {} (p int NOT NULL, o bigint NOT NULL, k bigint NOT NULL, amount bigint NOT NULL);
             CREATE TABLE {} (k bigint PRIMARY KEY, amount bigint NOT NULL, version bigint);",
            t.counts, t.sums, t.events, t.latest
        ))
        .await
        .expect("tables");
    let topic = "orders";
    let events = workload(900);
    let all = batches(&t, &events, 40, topic);

    let mut epoch = 1;
    let mut store = store(&name).await;
    let positions = store.open(topic, &[0, 1, 2], epoch).await.expect("open");
    assert!(positions.values().all(Option::is_none), "{positions:?}");
    let mut replayed_total = 0;
    for (i, parts) in all.iter().enumerate() {
        let applied = store
            .apply(&Batch {
                epoch,
                partitions: parts.clone(),
            })
            .await
            .expect("apply");
        assert!(applied.dead_lettered.is_empty(), "{applied:?}");
        if i % 5 == 4 {
            // Crash: the process dies after the commit; a new one rejoins with a new
            // generation and, not knowing what committed, replays the last batch and an
            // earlier one (as a consumer restarted from stale Kafka offsets would).
            drop(store);
            epoch += 1;
            store = common::store(&name).await;
            let positions = store.open(topic, &[0, 1, 2], epoch).await.expect("reopen");
            for p in parts {
                assert_eq!(
                    positions[&p.partition],
                    Some(p.records.last().expect("records").offset + 1),
                    "position of partition {} after the crash",
                    p.partition
                );
            }
            for replay in [i, i / 2] {
                let again = store
                    .apply(&Batch {
                        epoch,
                        partitions: all[replay].clone(),
                    })
                    .await
                    .expect("replay");
                assert_eq!(again.applied, 0, "replaying batch {replay}: {again:?}");
                let n: usize = all[replay].iter().map(|p| p.records.len()).sum();
                assert_eq!(again.replayed, n);
                replayed_total += n;
            }
        }
    }
    assert!(
        replayed_total > 100,
        "the test replayed only {replayed_total} records"
    );

    // The fold from the input alone.
    let mut counts: BTreeMap<i64, i64> = BTreeMap::new();
    let mut sums: BTreeMap<i64, i64> = BTreeMap::new();
    let mut latest: BTreeMap<i64, i64> = BTreeMap::new();
    for e in &events {
        *counts.entry(e.key).or_default() += 1;
        *sums.entry(e.key).or_default() += e.amount;
        latest.insert(e.key, e.amount);
    }
    let read = |sql: String| {
        let admin = &admin;
        async move {
            admin
                .query(&sql, &[])
                .await
                .expect("read")
                .iter()
                .map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1)))
                .collect::<BTreeMap<i64, i64>>()
        }
    };
    assert_eq!(read(format!("SELECT k, n FROM {}", t.counts)).await, counts);
    assert_eq!(read(format!("SELECT k, total FROM {}", t.sums)).await, sums);
    assert_eq!(
        read(format!("SELECT k, amount FROM {}", t.latest)).await,
        latest
    );
    assert_eq!(count(&admin, &t.events).await, events.len() as i64);
    let distinct: i64 = admin
        .query_one(
            &format!("SELECT count(DISTINCT (p, o)) FROM {}", t.events),
            &[],
        )
        .await
        .expect("distinct")
        .get(0);
    assert_eq!(
        distinct,
        events.len() as i64,
        "one append row per input record"
    );
}
