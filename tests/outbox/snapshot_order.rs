//! The initial snapshot publishes each aggregate's rows in the order they were written
//! (`outbox.snapshot_order_by`, then the id), not in id order: rows with random (uuid v4) ids
//! already in the table reach Kafka in write order per aggregate, also across a `kill -9`
//! mid-snapshot; an order column that may be NULL stops the router at start, naming the key.

use std::collections::HashMap;
use std::time::Duration;

use super::{checkpoint, count_by_id, ns, spawn_expecting_exit, support, Outbox, Seen, PG_RESTART};

/// Asserts every aggregate's `n` rises in the order read; returns the aggregates seen.
fn assert_write_order(seen: &[Seen]) -> usize {
    let mut last: HashMap<&str, (i64, i64)> = HashMap::new();
    for (s, n) in seen.iter().zip(ns(seen)) {
        if let Some((prev, at)) = last.insert(s.key.as_str(), (n, s.offset)) {
            assert!(
                prev < n,
                "{}: n={n} (offset {} of partition {}) after n={prev} (offset {at})",
                s.key,
                s.offset,
                s.partition
            );
        }
    }
    last.len()
}

/// Whether reading `ids_by_n` (the rows of one aggregate, by write order) in id order would
/// break write order: what makes the test able to fail under the old id order.
fn id_order_breaks_write_order(o: &Outbox) -> bool {
    o.pg.text(&format!(
        "select bool_or(prev > n)::text from (select n, lag(n) over (partition by \
             aggregate_id order by id) prev from (select id, aggregate_id, \
             (payload->>'n')::bigint n from {}) r) x",
        o.table
    ))
    .as_deref()
        == Some("true")
}

#[test]
fn the_initial_snapshot_publishes_each_aggregates_rows_in_write_order_across_a_kill() {
    let _shared = PG_RESTART.read().unwrap_or_else(|e| e.into_inner());
    let mut o = Outbox::new("outbox-snaporder");
    o.migrate();
    // 3 000 rows of 30 aggregates written one after the other (occurred_at rising with n), with
    // random ids: id order is not write order.
    o.pg.exec(&format!(
        "insert into {} (id, occurred_at, aggregate_id, type, payload) select gen_random_uuid(), \
         timestamptz '2026-12-01 00:00:00+00' + i * interval '1 ms', 'agg-' || (i % 30), \
         'Order.Changed', jsonb_build_object('n', i) from generate_series(1, 3000) i",
        o.table
    ));
    assert!(
        id_order_breaks_write_order(&o),
        "the data must catch id order"
    );
    // Small chunks (a Kafka transaction each): the snapshot lasts long enough for the progress
    // poll to see it mid-way however fast the machine is (with 100-row chunks it could end
    // between two polls, and the kill never land mid-snapshot).
    let chunks = [("EOSFLOW_OUTBOX_BATCH_SIZE", "20")];
    o.spawn("cdc", &chunks);
    let (app, slot) = (o.app.clone(), o.slot.clone());
    let progress = || checkpoint(&app, &slot).and_then(|c| c.snapshot);
    let at_kill = support::wait_for(
        "the snapshot past 500 rows",
        Duration::from_secs(90),
        || progress().filter(|p| p.rows >= 500),
    );
    o.kill(0);
    let at_kill = progress().unwrap_or(at_kill);
    assert!(at_kill.rows < 3000, "killed mid-snapshot: {at_kill:?}");
    assert_eq!(at_kill.order_by.as_deref(), Some("occurred_at"));
    assert!(at_kill.after_order.is_some(), "{at_kill:?}");
    o.spawn("cdc", &chunks);
    o.wait_streaming();
    let ids = o.all_ids();
    let seen = o.wait_for_ids(&["Order"], &ids, Duration::from_secs(120));
    assert_eq!(seen.len(), 3000, "every row once");
    assert!(count_by_id(&seen).values().all(|&n| n == 1));
    assert_eq!(assert_write_order(&seen), 30);
    eprintln!("killed at {at_kill:?}");
}

#[test]
fn a_sequence_column_orders_the_snapshot_of_rows_written_in_one_transaction() {
    let _shared = PG_RESTART.read().unwrap_or_else(|e| e.into_inner());
    let mut o = Outbox::new("outbox-snapseq");
    o.migrate();
    // One transaction: every row has the same occurred_at (now()), so only the sequence
    // tells write order.
    o.pg.exec(&format!(
        "alter table {t} add column seq bigint generated always as identity, \
         add column note text; \
         do $$ begin for i in 1..1000 loop insert into {t} (id, aggregate_id, type, payload) \
         values (gen_random_uuid(), 'agg-' || (i % 10), 'Order.Changed', \
         jsonb_build_object('n', i)); end loop; end $$",
        t = o.table
    ));
    assert!(
        id_order_breaks_write_order(&o),
        "the data must catch id order"
    );
    // A column that may be NULL cannot order the snapshot: the router stops, naming the key.
    let log = spawn_expecting_exit(&mut o, &[("EOSFLOW_OUTBOX_SNAPSHOT_ORDER_BY", "note")]);
    assert!(
        log.contains("outbox.snapshot_order_by") && log.contains("NOT NULL"),
        "{log}"
    );
    o.spawn(
        "cdc",
        &[
            ("EOSFLOW_OUTBOX_SNAPSHOT_ORDER_BY", "seq"),
            ("EOSFLOW_OUTBOX_BATCH_SIZE", "64"),
        ],
    );
    o.wait_streaming();
    let ids = o.all_ids();
    let seen = o.wait_for_ids(&["Order"], &ids, Duration::from_secs(90));
    assert_eq!(seen.len(), 1000);
    assert_eq!(assert_write_order(&seen), 10);
}
