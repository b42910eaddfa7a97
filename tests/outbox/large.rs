//! A very large Postgres transaction (1M outbox rows) with the default settings: its rows are
//! published as they arrive (pgoutput v1 sends only committed transactions) in Kafka
//! transactions of at most `outbox.max_rows_per_transaction` (100 000) rows, each with the
//! checkpoint saying how far the transaction got, so each commits well within the default 10 s
//! `outbox.transaction_timeout_ms`, and the router's memory stays bounded (peak RSS checked under
//! 256 MiB). A kill between two parts is `tests/outbox/split.rs`.
//!
//! Not part of `make test` (a few minutes); `make bench` runs it:
//! `cargo test --all-targets --test outbox -- --ignored --nocapture large_transaction`.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rdkafka::message::Headers;
use rdkafka::Message;

use super::{support, Outbox, PG_RESTART};

#[test]
#[ignore]
fn large_transaction_of_1m_rows_is_published_exactly_once_in_parts_within_the_default_timeout() {
    let _shared = PG_RESTART.read().unwrap_or_else(|e| e.into_inner());
    const ROWS: usize = 1_000_000;
    let mut o = Outbox::new("outbox-large");
    o.migrate();
    o.spawn("cdc", &[]);
    o.wait_streaming();
    let start = Instant::now();
    let end = o.lsn_inside_tx(&format!(
        "insert into {} (id, aggregate_id, type, payload) \
         select gen_random_uuid(), 'agg-' || (i % 1000), 'Order.Changed', \
                jsonb_build_object('n', i) \
         from generate_series(0, {}) i",
        o.table,
        ROWS - 1
    ));
    let inserted = start.elapsed();
    o.wait_confirmed_within(end, Duration::from_secs(900));
    let published = start.elapsed();
    // The router's peak resident memory (VmHWM) over the whole run.
    let status = std::fs::read_to_string(format!("/proc/{}/status", o.routers[0].id()))
        .expect("the router's /proc status");
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    let mut ids = HashSet::with_capacity(ROWS);
    let mut records = 0usize;
    eosflow::kafka::reader::read_all(
        &support::clients(),
        &o.topic("Order"),
        Duration::from_secs(300),
        |m| {
            records += 1;
            if let Some(id) = m
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == "id"))
                .and_then(|h| h.value)
            {
                ids.insert(id.to_vec());
            }
            Ok(())
        },
    )
    .expect("read");
    assert_eq!(records, ROWS, "records on the routed topic");
    assert_eq!(ids.len(), ROWS, "distinct ids");
    eprintln!(
        "large transaction of {ROWS} rows: inserted in {:.1}s, published (slot confirmed) after \
         {:.1}s, exactly once in Kafka transactions of at most 100000 rows (default 10 s \
         transaction timeout)",
        inserted.as_secs_f64(),
        published.as_secs_f64()
    );
    eprintln!("router peak RSS (VmHWM): {} MiB", peak_kib / 1024);
    assert!(
        peak_kib < 256 * 1024,
        "the router held {} MiB for a {ROWS}-row transaction: its rows must be published as they \
         arrive, not buffered whole",
        peak_kib / 1024
    );
}
