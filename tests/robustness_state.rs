//! Robustness of the state store, the parked set and dedup (issue #17) against the real broker:
//! a parked key's followers beyond the record size limit and beyond the cap, a reused message
//! id, a store read error, and a store kept away longer than its changelog's delete retention.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use eosflow::config::Config;
use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::retry::parked::{Decoded, HeadAt, Parked};
use eosflow::internals::retry::tooling::DeadLetter;
use eosflow::internals::state::{Column, Store, StoreCache};
use eosflow::kafka::ClientRole;
use eosflow_verify::count::{CountOutput, CountProcessor};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::Message;
use support::pipeline::{produce, Instance, Pipeline};

/// Produces `records` (key, value, id, extra headers) in order with one producer.
fn produce_many(topic: &str, records: &[(String, String, String)], pad: usize) {
    let producer: ThreadedProducer<DefaultProducerContext> = support::clients()
        .config(ClientRole::Idempotent)
        .create()
        .expect("producer");
    let padding = vec![b'x'; pad];
    for (key, value, id) in records {
        let headers = rdkafka::message::OwnedHeaders::new()
            .insert(rdkafka::message::Header {
                key: "id",
                value: Some(id.as_bytes()),
            })
            .insert(rdkafka::message::Header {
                key: "pad",
                value: Some(&padding[..]),
            });
        loop {
            match producer.send(
                BaseRecord::to(topic)
                    .key(key.as_bytes())
                    .payload(value.as_bytes())
                    .headers(headers.clone()),
            ) {
                Ok(()) => break,
                Err((e, _)) if e.to_string().contains("Queue full") => {
                    producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => panic!("send: {e}"),
            }
        }
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
}

fn outputs(p: &Pipeline) -> Vec<(String, CountOutput)> {
    p.count_outputs()
}

fn dead_letters(p: &Pipeline) -> Vec<DeadLetter> {
    p.dead_letters()
}

/// Every changelog record as (key, value length, value).
fn changelog(p: &Pipeline) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    read_all(
        &support::clients(),
        &p.changelog,
        Duration::from_secs(60),
        |m| {
            out.push((
                m.key().unwrap_or_default().to_vec(),
                m.payload().map(<[u8]>::to_vec),
            ));
            Ok(())
        },
    )
    .expect("read changelog");
    out
}

fn config(p: &Pipeline, delays_ms: &[u64]) -> Config {
    p.retry_config(delays_ms)
}

/// A head that fails once, then `n` followers of the same key (ids `k-1`…), then one record of
/// another key.
fn parked_key_workload(p: &Pipeline, n: usize, pad: usize) {
    let mut records = vec![(
        "k".to_string(),
        "transient:1:1".to_string(),
        "k-0".to_string(),
    )];
    records.extend((1..=n).map(|i| ("k".to_string(), "1".to_string(), format!("k-{i}"))));
    records.push(("j".into(), "5".into(), "j-0".into()));
    produce_many(&p.input, &records, pad);
}

#[test]
fn followers_past_the_record_size_limit_drain_in_order_across_transactions() {
    // 1500 followers of ~1 KiB each: the old single JSON value of one key's followers passes
    // the producer's 1 MiB limit, and every batch after that aborted.
    let p = Pipeline::new("st-flood", 1);
    parked_key_workload(&p, 1500, 1000);
    let inst = Instance::start(&config(&p, &[2000]), CountProcessor::new(&p.output));
    support::wait_for("1502 outputs", Duration::from_secs(120), || {
        (outputs(&p).len() >= 1502).then_some(())
    });
    p.wait_drained(Duration::from_secs(60));
    let summary = inst.stop();
    let k: Vec<(String, i64)> = outputs(&p)
        .into_iter()
        .filter(|(key, _)| key == "k")
        .map(|(_, o)| (o.id, o.count))
        .collect();
    let want: Vec<(String, i64)> = (0..=1500).map(|i| (format!("k-{i}"), i + 1)).collect();
    assert_eq!(k, want, "the head, then every follower once, in order");
    assert_eq!(summary.parked_followers, 1500, "{summary:?}");
    assert!(dead_letters(&p).is_empty());
    let log = changelog(&p);
    let largest = log
        .iter()
        .map(|(_, v)| v.as_ref().map_or(0, Vec::len))
        .max()
        .unwrap_or(0);
    assert!(
        largest < 64 * 1024,
        "one changelog record per follower: largest {largest} bytes"
    );
    let drained_in_chunks = log.iter().any(|(key, v)| {
        key.as_slice() == b"pk"
            && v.as_deref().and_then(Parked::decode).is_some_and(|d| {
                matches!(
                    d,
                    Decoded::Current(Parked {
                        head_at: HeadAt::Draining,
                        ..
                    })
                )
            })
    });
    assert!(
        drained_in_chunks,
        "1500 followers take two transactions: a draining head was committed in between"
    );
    let followers_left = log
        .iter()
        .filter(|(key, _)| key.first() == Some(&b'f'))
        .fold(BTreeMap::new(), |mut live, (key, v)| {
            live.insert(key.clone(), v.is_some());
            live
        })
        .into_values()
        .filter(|present| *present)
        .count();
    assert_eq!(followers_left, 0, "every drained follower was tombstoned");
}

#[test]
fn followers_beyond_the_cap_are_dead_lettered_as_parked_overflow() {
    let p = Pipeline::new("st-cap", 1);
    parked_key_workload(&p, 80, 0);
    let mut cfg = config(&p, &[1500]);
    cfg.retry.max_parked_followers_per_key = 50;
    let inst = Instance::start(&cfg, CountProcessor::new(&p.output));
    support::wait_for(
        "52 outputs and 30 dead letters",
        Duration::from_secs(60),
        || (outputs(&p).len() >= 52 && dead_letters(&p).len() >= 30).then_some(()),
    );
    p.wait_drained(Duration::from_secs(60));
    let summary = inst.stop();
    let k: Vec<String> = outputs(&p)
        .into_iter()
        .filter(|(key, _)| key == "k")
        .map(|(_, o)| o.id)
        .collect();
    let want: Vec<String> = (0..=50).map(|i| format!("k-{i}")).collect();
    assert_eq!(k, want, "the head and the first 50 followers, in order");
    let dl = dead_letters(&p);
    assert_eq!(dl.len(), 30, "{summary:?}");
    for (i, d) in dl.iter().enumerate() {
        assert_eq!(d.header("id"), Some(format!("k-{}", 51 + i).as_str()));
        assert_eq!(d.dlt("error.class"), Some("parked-overflow"));
        assert!(d
            .dlt("error.message")
            .is_some_and(|m| m.contains("max_parked_followers_per_key = 50")));
    }
}

#[test]
fn a_reused_id_with_another_payload_is_dead_lettered_as_an_id_conflict_also_after_a_restore() {
    let p = Pipeline::new("st-conflict", 1);
    produce(&p.input, "a", "1", "c1");
    produce(&p.input, "a", "2", "c1"); // same id, other payload: a conflict
    produce(&p.input, "a", "1", "c1"); // same id, same payload: a duplicate
    let inst = Instance::start(&p.config("a"), CountProcessor::new(&p.output));
    support::wait_for("one dead letter", Duration::from_secs(60), || {
        (!dead_letters(&p).is_empty()).then_some(())
    });
    p.wait_drained(Duration::from_secs(60));
    let summary = inst.stop();
    assert_eq!(summary.dedup_hits, 1, "{summary:?}");
    // Another instance rebuilds the ids from the changelog alone: the digests came along.
    produce(&p.input, "a", "3", "c1");
    produce(&p.input, "a", "1", "c1");
    let inst = Instance::start(&p.config("b"), CountProcessor::new(&p.output));
    support::wait_for("two dead letters", Duration::from_secs(60), || {
        (dead_letters(&p).len() >= 2).then_some(())
    });
    p.wait_drained(Duration::from_secs(60));
    let summary = inst.stop();
    assert_eq!(summary.dedup_hits, 1, "{summary:?}");
    let ids: Vec<String> = outputs(&p).into_iter().map(|(_, o)| o.id).collect();
    assert_eq!(ids, vec!["c1"], "one output for the id");
    let dl = dead_letters(&p);
    assert_eq!(dl.len(), 2);
    for (d, value) in dl.iter().zip(["2", "3"]) {
        assert_eq!(d.dlt("error.class"), Some("id-conflict"));
        assert_eq!(d.value.as_deref(), Some(value.as_bytes()));
        let stored = d.dlt("id.digest.stored").expect("stored digest");
        let received = d.dlt("id.digest.received").expect("received digest");
        assert_eq!((stored.len(), received.len()), (16, 16));
        assert_ne!(stored, received);
    }
}

#[test]
fn a_store_read_error_aborts_the_batch_instead_of_reading_as_not_seen() {
    let p = Pipeline::new("st-readerr", 1);
    for i in 0..20 {
        produce(&p.input, &format!("k{}", i % 4), "1", &format!("r{i}"));
    }
    let inst = Instance::start(&p.config("a"), CountProcessor::new(&p.output));
    p.wait_drained(Duration::from_secs(60));
    inst.stop();
    assert_eq!(outputs(&p).len(), 20);
    // Damage the data blocks of the dedup column's tables: RocksDB reports the corruption on
    // every lookup that reaches them.
    let path = p
        .state_root
        .join(&p.app)
        .join("a")
        .join(format!("{}-0", p.changelog));
    {
        let (store, rebuilt) = Store::open(
            &path,
            &format!("{}[0]", p.changelog),
            &StoreCache::new(8 << 20),
        )
        .expect("open the instance's store");
        assert!(!rebuilt);
        store.flush().expect("flush");
        let tables = store.table_files(Column::Dedup).expect("tables");
        assert!(!tables.is_empty(), "the dedup ids are in a table file");
        drop(store);
        for t in tables {
            let mut bytes = std::fs::read(&t).expect("read table");
            let n = bytes.len().min(64);
            bytes[..n].fill(0xA5);
            std::fs::write(&t, bytes).expect("damage table");
        }
    }
    // Redeliveries of processed ids: with the read failing, they must not count as new.
    for i in 0..4 {
        produce(&p.input, &format!("k{}", i % 4), "1", &format!("r{i}"));
    }
    let inst = Instance::start(&p.config("a"), CountProcessor::new(&p.output));
    // The batch can never commit while the table is damaged: watch it for a while.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < deadline {
        assert_eq!(
            outputs(&p).len(),
            20,
            "a redelivered id was processed again"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let summary = inst.stop();
    assert!(summary.aborts >= 1, "{summary:?}");
    assert_eq!(summary.records, 0, "nothing committed: {summary:?}");
    assert_eq!(outputs(&p).len(), 20);
}

/// Sets the changelog's `delete.retention.ms` (AlterConfigs replaces the topic's dynamic
/// configs, so the compaction policy is restated).
fn set_delete_retention(topic: &str, ms: u64) {
    use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = support::clients()
        .config(ClientRole::Admin)
        .create()
        .expect("admin");
    let ms = ms.to_string();
    let config = AlterConfig::new(ResourceSpecifier::Topic(topic))
        .set("cleanup.policy", "compact")
        .set("delete.retention.ms", &ms);
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    let result =
        futures::executor::block_on(admin.alter_configs([&config], &opts)).expect("alter configs");
    for r in result {
        r.expect("delete.retention.ms set");
    }
}

#[test]
fn a_store_kept_away_past_the_changelogs_delete_retention_is_rebuilt_from_the_changelog() {
    const RETENTION_MS: u64 = 15_000;
    let p = Pipeline::new("st-stale", 1);
    set_delete_retention(&p.changelog, RETENTION_MS);
    let records: Vec<(String, String, String)> = (0..2000)
        .map(|i| (format!("k{i}"), "1".to_string(), format!("r{i}")))
        .collect();
    produce_many(&p.input, &records, 0);
    let inst = Instance::start(&p.config("a"), CountProcessor::new(&p.output));
    p.wait_drained(Duration::from_secs(90));
    inst.stop();
    let stopped = std::time::Instant::now();
    // Back well within the retention: only the tail after its checkpoint is replayed.
    let inst = Instance::start(&p.config("a"), CountProcessor::new(&p.output));
    p.wait_drained(Duration::from_secs(60));
    let fresh = inst.stop().restores;
    assert!(
        stopped.elapsed() < Duration::from_millis(RETENTION_MS / 2),
        "the fresh restart took too long to prove anything"
    );
    let (_, fresh) = fresh.first().copied().expect("a restore");
    assert!(fresh.from_offset > 0 && fresh.records == 0, "{fresh:?}");
    // Kept away longer than the retention: tombstones written meanwhile may be gone, so the
    // store is rebuilt from the changelog alone.
    let away = Duration::from_millis(RETENTION_MS + 1000);
    if let Some(left) = away.checked_sub(stopped.elapsed()) {
        std::thread::sleep(left);
    }
    let inst = Instance::start(&p.config("a"), CountProcessor::new(&p.output));
    p.wait_drained(Duration::from_secs(60));
    let stale = inst.stop().restores;
    let (_, stale) = stale.first().copied().expect("a restore");
    assert!(
        stale.from_offset < fresh.from_offset && stale.records > 0,
        "rebuilt from the log start: {stale:?} (fresh: {fresh:?})"
    );
    eprintln!(
        "rebuild of a stale store: {} changelog records in {} ms",
        stale.records, stale.millis
    );
    assert_eq!(outputs(&p).len(), 2000);
}
