//! Several outbox tables served by one router (`[[outbox.tables]]`): each with its own column
//! names, a schema-qualified one routed by a column through a topic pattern with a schema-version
//! header; rows of both, interleaved in the same SQL transactions, each on its routed topic
//! exactly once and in order per aggregate.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::{count_by_id, Outbox, Pg, PG_RESTART};

/// Drops the test's schema (and the second table in it) at the end, after the router is gone.
struct DropSchema(String);

impl Drop for DropSchema {
    fn drop(&mut self) {
        Pg::connect().exec(&format!("drop schema if exists {} cascade", self.0));
    }
}

#[test]
fn two_tables_in_one_router_publish_interleaved_rows_once_each_on_its_routed_topic_in_aggregate_order(
) {
    let _shared = PG_RESTART.read().unwrap_or_else(|e| e.into_inner());
    let schema = format!("{}_s", super::support::unique("tables").replace('-', "_"));
    let _schema = DropSchema(schema.clone());
    let mut o = Outbox::new("outbox-tables");
    o.migrate();
    let second = format!("{schema}.events");
    o.pg.exec(&format!(
        "create schema {schema}; create table {second} (event_id uuid primary key, \
         created timestamptz not null default now(), kind text not null, agg text not null, \
         event_type text not null, body jsonb, meta jsonb, version text)"
    ));
    let config = o.logs.join("tables.toml");
    std::fs::write(
        &config,
        format!(
            "[[outbox.tables]]\ntable = \"{second}\"\ncolumn_id = \"event_id\"\n\
             column_occurred_at = \"created\"\ncolumn_aggregate_id = \"agg\"\n\
             column_type = \"event_type\"\ncolumn_payload = \"body\"\ncolumn_headers = \"meta\"\n\
             column_schema_version = \"version\"\nroute_by = \"kind\"\n\
             topic_template = \"{}.second.${{routedByValue}}\"\n",
            o.app
        ),
    )
    .expect("config file");
    let first = o.table.clone();
    let insert_first = |agg: &str, seq: usize| {
        format!(
            "insert into {first} (id, aggregate_id, type, payload) values (gen_random_uuid(), \
             '{agg}', 'Order.Changed', '{{\"seq\": {seq}}}');"
        )
    };
    let insert_second = |agg: &str, seq: usize| {
        let kind = ["Shipment", "Invoice"][seq % 2];
        format!(
            "insert into {second} (event_id, kind, agg, event_type, body, version) values \
             (gen_random_uuid(), '{kind}', '{agg}', '{kind}.Changed', '{{\"seq\": {seq}}}', '3');"
        )
    };
    // Rows already there: the initial snapshot reads both tables (one row per aggregate each).
    let mut seq = 0;
    let mut sql = String::new();
    for a in 0..5 {
        seq += 1;
        sql += &insert_first(&format!("pre-{a}"), seq);
        seq += 1;
        sql += &insert_second(&format!("pre-{a}"), seq);
    }
    o.pg.exec(&sql);
    o.spawn(
        "cdc",
        &[("EOSFLOW_CONFIG_FILE", config.to_str().expect("utf-8 path"))],
    );
    o.wait_streaming();
    // 40 SQL transactions, each interleaving 5 rows of each table over 4 aggregates.
    for _ in 0..40 {
        let mut sql = String::from("begin;");
        for i in 0..10 {
            seq += 1;
            let agg = format!("agg-{}", i % 4);
            sql += &if i % 2 == 0 {
                insert_first(&agg, seq)
            } else {
                insert_second(&agg, seq)
            };
        }
        o.pg.exec(&(sql + "commit;"));
    }
    let ids = o.all_ids();
    let second_ids: HashSet<String> = {
        let rows =
            o.pg.rt
                .block_on(
                    o.pg.client
                        .query(&format!("select event_id::text from {second}"), &[]),
                )
                .expect("ids");
        rows.iter().map(|r| r.get(0)).collect()
    };
    assert_eq!((ids.len(), second_ids.len()), (205, 205));
    let topics = [
        o.topic("Order"),
        o.topic("second.Shipment"),
        o.topic("second.Invoice"),
    ];
    let all: HashSet<String> = ids.union(&second_ids).cloned().collect();
    let seen = super::support::wait_for("every row in Kafka", Duration::from_secs(90), || {
        let seen: Vec<_> = topics.iter().flat_map(|t| o.read_named(t)).collect();
        let got: HashSet<&String> = seen.iter().filter_map(|s| s.headers.get("id")).collect();
        all.iter().all(|i| got.contains(i)).then_some(seen)
    });
    let counts = count_by_id(&seen);
    assert_eq!(seen.len(), 410, "every row once");
    assert!(counts.values().all(|&n| n == 1), "duplicates");
    let mut last: HashMap<(&str, &str), i64> = HashMap::new();
    for s in &seen {
        let id = s.headers.get("id").expect("id header");
        let v: serde_json::Value =
            serde_json::from_str(s.value.as_deref().unwrap_or("null")).expect("json payload");
        let seq = v["seq"].as_i64().expect("seq");
        if second_ids.contains(id) {
            let kind = s.topic.rsplit('.').next().unwrap_or_default();
            assert_eq!(s.headers.get("type"), Some(&format!("{kind}.Changed")));
            assert_eq!(
                s.headers.get("schema_version").map(String::as_str),
                Some("3")
            );
            assert!(s.headers.contains_key("occurred_at"), "{s:?}");
        } else {
            assert_eq!(s.topic, topics[0]);
            assert_eq!(s.headers.get("schema_version"), None);
        }
        if let Some(prev) = last.insert((s.topic.as_str(), s.key.as_str()), seq) {
            assert!(prev < seq, "{} {}: {seq} after {prev}", s.topic, s.key);
        }
    }
}
