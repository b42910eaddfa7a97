//! Hot-path micro-benchmarks of the state layer: overlay put/get, RocksDB batch apply with the
//! checkpoint, and the dedup lookup. `cargo bench --bench state_ops` prints ops/s; under
//! `cargo test` it runs a few iterations only, as a smoke test.

use std::time::Instant;

use eosflow::state::{Column, Overlay, Store, StoreCache};

fn report(name: &str, ops: u64, started: Instant) {
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    println!(
        "{name:<32} {ops:>10} ops  {:>12.0} ops/s",
        ops as f64 / secs
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let full = std::env::args().any(|a| a == "--bench");
    let n: u64 = if full { 200_000 } else { 2_000 };
    let dir = std::env::temp_dir().join(format!("eosflow-bench-{}", std::process::id()));
    let cache = StoreCache::new(64 << 20);
    let (store, _) = Store::open(&dir, "bench[0]", &cache)?;

    let started = Instant::now();
    let mut overlay = Overlay::default();
    for i in 0..n {
        overlay.put(
            Column::State,
            format!("key-{}", i % 10_000).as_bytes(),
            i.to_be_bytes().to_vec(),
        );
    }
    report("overlay put", n, started);

    let started = Instant::now();
    let mut hits = 0u64;
    for i in 0..n {
        if overlay
            .get(Column::State, format!("key-{}", i % 20_000).as_bytes())
            .is_some()
        {
            hits += 1;
        }
    }
    report("overlay get", n, started);
    assert!(hits > 0);

    let started = Instant::now();
    let batches = n / 1_000;
    for b in 0..batches {
        let mut o = Overlay::default();
        for i in 0..1_000u64 {
            o.put(
                Column::Dedup,
                format!("id-{b}-{i}").as_bytes(),
                i.to_be_bytes().to_vec(),
            );
        }
        store.apply(&o, Some(b as i64))?;
    }
    report("rocksdb apply (1000/batch)", batches * 1_000, started);

    let started = Instant::now();
    let mut found = 0u64;
    for i in 0..n {
        let b = i % batches.max(1);
        if store
            .get(Column::Dedup, format!("id-{b}-{}", i % 1_000).as_bytes())?
            .is_some()
        {
            found += 1;
        }
    }
    report("dedup lookup (rocksdb)", n, started);
    assert_eq!(found, n);
    println!("block cache in use: {} bytes", cache.usage());
    drop(store);
    Store::wipe(&dir)?;
    Ok(())
}
