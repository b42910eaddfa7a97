//! Criterion micro-benchmarks of the processor's hot path: Avro decode/encode of a ~300 B order
//! event with the writer schema cached (and the one-field walk the counting topology uses), state overlay put/get, RocksDB batch apply with the
//! checkpoint, a committed value's read from RocksDB and from the record cache, the dedup
//! lookup, and a repartition record's headers without and with its origin. `cargo bench
//! --bench hot_path` measures; under
//! `cargo test --all-targets` each benchmark runs once, as a smoke test.

use std::collections::HashMap;

use apache_avro::types::Value;
use apache_avro::Schema;
use criterion::{criterion_main, BatchSize, Criterion, Throughput};

use eosflow::internals::codec::decode::{encode_wire, Decoder, FixedSource};
use eosflow::internals::processor::engine::{Mark, Origin};
use eosflow::internals::state::{Column, Overlay, Store, StoreCache};

fn order(i: u64) -> Value {
    eosflow_bench::workload::order_event(i, 12_345)
}

fn avro(c: &mut Criterion) {
    let cat = eosflow_orders::contracts::catalog().expect("built-in contracts");
    let text = cat
        .get("orders.order-placed.v1")
        .expect("contract")
        .text
        .clone();
    let schema = Schema::parse_str(&text).expect("schema");
    let bytes = encode_wire(1, &schema, order(7)).expect("encode");
    let mut decoder = Decoder::new(FixedSource(HashMap::from([(1, text)])), cat);
    let mut g = c.benchmark_group("avro");
    g.throughput(Throughput::Elements(1));
    g.bench_function(
        format!("decode order-placed ({} B, cached schema)", bytes.len()),
        |b| b.iter(|| decoder.decode_avro(&bytes).expect("decodes")),
    );
    g.bench_function("read total_minor (one-field walk, no record built)", |b| {
        b.iter(|| {
            let (id, type_name, total) = decoder
                .decode_long_field(&bytes, "total_minor")
                .expect("reads");
            (id, type_name.len(), total)
        })
    });
    g.bench_function("encode order-placed", |b| {
        b.iter_batched(
            || order(7),
            |v| encode_wire(1, &schema, v).expect("encodes"),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// One transaction's worth of dedup ids (batch `b`): the shape both the apply and the lookup
/// benchmarks write.
fn dedup_ids(b: u64) -> Overlay {
    let mut o = Overlay::default();
    for k in 0..1000u64 {
        o.put(
            Column::Dedup,
            format!("id-{b}-{k}").as_bytes(),
            k.to_be_bytes().to_vec(),
        );
    }
    o
}

fn state(c: &mut Criterion) {
    let keys: Vec<Vec<u8>> = (0..10_000)
        .map(|i| format!("key-{i}").into_bytes())
        .collect();
    let mut g = c.benchmark_group("state");
    g.throughput(Throughput::Elements(1));
    let mut overlay = Overlay::default();
    let mut i = 0usize;
    g.bench_function("overlay put", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            overlay.put(Column::State, &keys[i], vec![0u8; 16]);
        })
    });
    g.bench_function("overlay get", |b| {
        b.iter(|| {
            i = (i + 7) % keys.len();
            overlay.get(Column::State, &keys[i])
        })
    });

    let dir = std::env::temp_dir().join(format!("eosflow-hot-path-{}", std::process::id()));
    let cache = StoreCache::new(64 << 20);
    let (store, _) = Store::open(&dir, "bench[0]", &cache).expect("store");
    let batch_no = std::cell::Cell::new(0i64);
    g.throughput(Throughput::Elements(1000));
    g.bench_function("rocksdb apply (1000 puts + checkpoint)", |b| {
        b.iter_batched(
            || {
                let b = batch_no.get() + 1;
                batch_no.set(b);
                dedup_ids(b as u64)
            },
            |o| store.apply(&o, Some(batch_no.get())).expect("apply"),
            BatchSize::SmallInput,
        )
    });
    g.finish();
    drop(store);
    let _ = Store::wipe(&dir);

    // A stateful operator's read of its key's committed value (a count, a window, a join's
    // table row): 1 000 keys of 16 B values, from RocksDB (flushed to a table file, as a key
    // not written since the last memtable flush is) and from the record cache.
    let mut g = c.benchmark_group("store get");
    g.throughput(Throughput::Elements(1));
    for (name, budget) in [("rocksdb", 0u64), ("record cache hit", 10 << 20)] {
        let dir = std::env::temp_dir().join(format!(
            "eosflow-hot-path-get-{budget}-{}",
            std::process::id()
        ));
        let cache = StoreCache::new(64 << 20).with_record_cache(budget);
        let (store, _) = Store::open(&dir, "bench[2]", &cache).expect("store");
        let mut o = Overlay::default();
        for k in &keys[..1000] {
            o.put(Column::State, k, vec![1u8; 16]);
        }
        store.apply(&o, Some(1)).expect("apply");
        store.flush().expect("flush");
        let mut i = 0usize;
        g.bench_function(format!("{name} (1000 keys)"), |b| {
            b.iter(|| {
                i = (i + 7) % 1000;
                store.get(Column::State, &keys[i]).expect("get")
            })
        });
        drop(store);
        let _ = Store::wipe(&dir);
    }
    g.finish();

    // Dedup lookups against a store of a realistic size: 100 000 recent ids applied in batches
    // of 1 000 (the apply benchmark above leaves millions of keys mid-compaction, which is no
    // lookup's situation in a running instance).
    let mut g = c.benchmark_group("dedup");
    g.throughput(Throughput::Elements(1));
    let dir = std::env::temp_dir().join(format!("eosflow-hot-path-dedup-{}", std::process::id()));
    let (store, _) = Store::open(&dir, "bench[1]", &cache).expect("store");
    for b in 0..100u64 {
        store.apply(&dedup_ids(b), Some(b as i64)).expect("apply");
    }
    let mut j = 0u64;
    g.bench_function("lookup (rocksdb hit, 100k ids)", |b| {
        b.iter(|| {
            j = j
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let id = format!("id-{}-{}", (j >> 33) % 100, (j >> 20) % 1000);
            store.contains(Column::Dedup, id.as_bytes()).expect("get")
        })
    });
    g.bench_function("lookup (rocksdb miss, 100k ids)", |b| {
        b.iter(|| {
            j += 1;
            let id = format!("never-{j}");
            store.contains(Column::Dedup, id.as_bytes()).expect("get")
        })
    });
    // The dedup check itself (`dedup::lookup`): a new id is answered by the store's id filter
    // without RocksDB; a seen one passes the filter and is read. `contains` above is RocksDB
    // alone, what every check cost before the filter.
    let none = Overlay::default();
    g.bench_function("check a new id (id filter, 100k ids)", |b| {
        b.iter(|| {
            j += 1;
            let id = format!("never-{j}");
            eosflow::internals::state::dedup::lookup(&store, &none, id.as_bytes(), 7)
                .expect("lookup")
        })
    });
    g.bench_function("check a seen id (id filter, 100k ids)", |b| {
        b.iter(|| {
            j = j
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let id = format!("id-{}-{}", (j >> 33) % 100, (j >> 20) % 1000);
            eosflow::internals::state::dedup::lookup(&store, &none, id.as_bytes(), 7)
                .expect("lookup")
        })
    });
    // The same misses a batch at a time: one `MultiGet` for 1 000 new ids (unsorted, as a
    // poll batch's ids come), against the lookups one by one above.
    g.throughput(Throughput::Elements(1000));
    let mut batch_no = 0u64;
    let mut new_ids = || {
        batch_no += 1;
        (0..1000)
            .map(|n| format!("never-{batch_no}-{n}"))
            .collect::<Vec<_>>()
    };
    g.bench_function("1000 misses one by one", |b| {
        b.iter_batched(
            &mut new_ids,
            |ids| {
                ids.iter()
                    .filter(|id| store.contains(Column::Dedup, id.as_bytes()).expect("get"))
                    .count()
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("1000 misses in one multi_get", |b| {
        b.iter_batched(
            &mut new_ids,
            |ids| {
                store
                    .contains_many(Column::Dedup, &ids, false)
                    .expect("multi_get")
                    .into_iter()
                    .filter(|&seen| seen)
                    .count()
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
    drop(store);
    let _ = Store::wipe(&dir);
}

/// The headers of a record a repartition sink writes, per record (`src/topology/mod.rs`,
/// `run_node`): the forwarded record's headers (a copy of its input's 4 envelope headers) with
/// the writing task's watermark (`Mark::stamp`) — before issue 49 — and then with the input's
/// origin (`Origin::stamp`, the `eosflow.origin` header: one `format!` and one header pushed).
/// The input is a record as read from an input topic, or from a repartition topic (its origin
/// parsed and carried over). The budget they share: a whole record costs 6.6 µs end to end in
/// the count shape at one partition (151 757 records/s, `results/hot-path-ab-ff1d60d.md`); the
/// origin's cost per record is `after` − `before`. Measured in release with `cargo bench
/// --locked --bench hot_path -- origin`.
fn origin(c: &mut Criterion) {
    let envelope: Vec<(String, Vec<u8>)> = [
        ("id", "0b1e4a9c-6f0d-4b52-9a57-3c8e2f51d7a4"),
        ("type", "orders.order-placed.v1"),
        ("correlation_id", "5d2c9e71-0a3b-4f86-b1c4-7e9d2a6f3b10"),
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
    .collect();
    // An order event's size; the stamps never read it.
    let value = vec![0u8; 303];
    let read = |topic, headers| eosflow::record::Record {
        topic,
        partition: 3,
        offset: 1_234_567,
        timestamp: Some(1_765_000_000_000),
        key: Some(b"order-0042".as_slice()),
        value: Some(value.as_slice()),
        headers,
    };
    let input = read("orders", &envelope);
    // The same record as read back from a repartition topic: its writer's mark and origin.
    let mut carried = envelope.clone();
    Mark::stamp(&mut carried, 1, Some(1_765_000_000_000));
    Origin::stamp(&mut carried, &input);
    let repartitioned = read("app-by-customer-repartition", &carried);

    let mut g = c.benchmark_group("origin");
    g.throughput(Throughput::Elements(1));
    let stream_time = Some(1_765_000_000_000);
    g.bench_function("before: input headers + mark", |b| {
        b.iter(|| {
            let mut h = input.headers.to_vec();
            Mark::stamp(&mut h, 3, stream_time);
            h
        })
    });
    g.bench_function("after: input headers + mark + origin", |b| {
        b.iter(|| {
            let mut h = input.headers.to_vec();
            Mark::stamp(&mut h, 3, stream_time);
            Origin::stamp(&mut h, &input);
            h
        })
    });
    g.bench_function("after, input from a repartition (origin carried)", |b| {
        b.iter(|| {
            let mut h = repartitioned.headers.to_vec();
            Mark::stamp(&mut h, 3, stream_time);
            Origin::stamp(&mut h, &repartitioned);
            h
        })
    });
    g.finish();
}

// `criterion_group!` defines a public `fn benches` it cannot document.
#[allow(missing_docs)]
mod group {
    use super::{avro, origin, state};
    criterion::criterion_group!(benches, avro, state, origin);
}
use group::benches;
criterion_main!(benches);
