//! The Debezium Outbox Event Router options beyond the column mapping, configured by their
//! Debezium names and checked on the real Postgres and broker against what Debezium's router
//! (`EventRouterDelegate`, serialized by Kafka Connect's `JsonConverter` without schemas) makes
//! of the same rows: `route.topic.regex` with `route.topic.replacement`'s group references,
//! `table.expand.json.payload` and `table.json.payload.null.behavior`, the `envelope` and
//! `partition` placements of `table.fields.additional.placement`, and
//! `tracing.span.context.field` into a `traceparent` header. A configuration the router cannot
//! run with stops it at start, naming the key.

use std::time::Duration;

use super::{support, Outbox, Seen, PG_RESTART};

/// Writes a TOML configuration with the `[outbox.debezium]` options `lines`; returns its path.
fn config(o: &Outbox, name: &str, lines: &[String]) -> String {
    let path = o.logs.join(name);
    std::fs::write(&path, format!("[outbox.debezium]\n{}\n", lines.join("\n"))).expect("config");
    path.display().to_string()
}

/// The records of `topic` once there are `n`.
fn wait_records(o: &Outbox, topic: &str, n: usize) -> Vec<Seen> {
    let seen = support::wait_for(
        &format!("{n} records on {topic}"),
        Duration::from_secs(90),
        || {
            let seen = o.read_named(topic);
            (seen.len() >= n).then_some(seen)
        },
    );
    assert_eq!(seen.len(), n, "{seen:#?}");
    seen
}

#[test]
fn debezium_regex_routing_expanded_payload_envelope_partition_and_trace_context_on_real_rows() {
    let _shared = PG_RESTART.read().unwrap_or_else(|e| e.into_inner());
    let mut o = Outbox::new("outbox-dbzopts");
    o.migrate();
    o.pg.exec(&format!(
        "alter table {} add column part int, add column amount int, add column tenant text, \
         add column tracingspancontext text",
        o.table
    ));
    // The harness's own template would contradict route.topic.replacement.
    let template = (
        "EOSFLOW_OUTBOX_TOPIC_TEMPLATE",
        "outbox.event.${routedByValue}",
    );
    // Keys the router cannot run with stop it at start, naming the key.
    for (lines, key) in [
        (
            vec![r#""route.topic.regex" = "(?<routedByValue>.*"#.to_string() + "\""],
            "outbox.route_topic_regex",
        ),
        (
            vec![r#""route.topic.replacement" = "x.${version}""#.to_string()],
            "outbox.topic_template",
        ),
        (
            vec![r#""tracing.operation.name" = "debezium-read""#.to_string()],
            "tracing.operation.name",
        ),
        (
            vec![r#""table.json.payload.null.behavior" = "drop""#.to_string()],
            "table.json.payload.null.behavior",
        ),
        (
            vec![r#""table.fields.additional.placement" = "part:body""#.to_string()],
            "outbox.additional_placement",
        ),
    ] {
        let file = config(&o, "bad.toml", &lines);
        let mut cmd = o.command("cdc", &[("EOSFLOW_CONFIG_FILE", &file), template]);
        let out = cmd.output().expect("run eosflow outbox");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{lines:?} accepted");
        assert!(err.contains(key), "{lines:?}: no {key} in {err}");
    }
    let app = o.app.clone();
    let good = config(
        &o,
        "dbz.toml",
        &[
            r#""route.topic.regex" = "(?<routedByValue>[A-Za-z]+)\\.v(?<version>[0-9]+)""#.into(),
            format!(r#""route.topic.replacement" = "{app}.${{routedByValue}}-v$2""#),
            r#""table.expand.json.payload" = "true""#.into(),
            r#""table.fields.additional.placement" = "type:envelope:eventType,amount:envelope,tenant:header:tenant_id,part:partition""#.into(),
            r#""tracing.span.context.field" = "tracingspancontext""#.into(),
        ],
    );
    o.spawn("cdc", &[("EOSFLOW_CONFIG_FILE", &good), template]);
    o.wait_streaming();
    let unmatched = format!("{app}_plain");
    let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    o.pg.exec(&format!(
        "insert into {t} (id, aggregate_type, aggregate_id, type, payload, part, amount, tenant, \
         tracingspancontext) values \
         ('00000000-0000-0000-0000-000000000001', 'Order.v2', 'o-1', 'Created', \
          '{{\"total\": 1.5, \"a\": null, \"b\": [1, 2], \"big\": 10000000, \"items\": [{{\"x\": 1}}, {{\"y\": \"z\"}}], \"empty\": []}}', \
          3, 42, 't-1', E'#Debezium span context\\ntraceparent={trace}\\ntracestate=k=v\\n'), \
         ('00000000-0000-0000-0000-000000000002', 'Order.v2', 'o-2', 'Deleted', null, 1, null, null, null), \
         ('00000000-0000-0000-0000-000000000003', '{unmatched}', 'c-1', 'Created', '[1, 2]', null, 7, null, '{trace}'), \
         ('00000000-0000-0000-0000-000000000004', 'Order.v2', 'o-4', 'Created', '{{}}', 99, 1, null, null)",
        t = o.table
    ));
    // The regex matches `Order.v2`: `${routedByValue}` and `$2` are its groups.
    let routed = format!("{app}.Order-v2");
    let seen = wait_records(&o, &routed, 2);
    let by_key = |k: &str| {
        seen.iter()
            .find(|s| s.key == k)
            .unwrap_or_else(|| panic!("no {k} in {seen:#?}"))
    };
    let (first, deleted) = (by_key("o-1"), by_key("o-2"));
    assert_eq!(first.partition, 3, "part:partition");
    assert_eq!(first.key, "o-1");
    // Expanded (nulls and empty arrays left out, array objects with the union of their
    // fields), inside the envelope with the typed additional fields.
    assert_eq!(
        first.value.as_deref(),
        Some(
            r#"{"payload":{"b":[1,2],"big":10000000,"items":[{"x":1,"y":null},{"x":null,"y":"z"}],"total":1.5},"eventType":"Created","amount":42}"#
        )
    );
    assert_eq!(
        first.headers.get("traceparent").map(String::as_str),
        Some(trace)
    );
    assert_eq!(
        first.headers.get("tracestate").map(String::as_str),
        Some("k=v")
    );
    assert_eq!(
        first.headers.get("tenant_id").map(String::as_str),
        Some("t-1")
    );
    // A NULL payload is a tombstone, envelope or not; partition 1 as its column says.
    assert_eq!(deleted.partition, 1);
    assert_eq!(deleted.value, None);
    assert!(!deleted.headers.contains_key("traceparent"));
    // Not matched by the regex: the route value itself is the topic (Connect's RegexRouter).
    let plain = wait_records(&o, &unmatched, 1);
    // A top-level array is not expanded: the envelope carries the payload as a JSON string.
    assert_eq!(
        plain[0].value.as_deref(),
        Some(r#"{"payload":"[1, 2]","eventType":"Created","amount":7}"#)
    );
    assert_eq!(
        plain[0].headers.get("traceparent").map(String::as_str),
        Some(trace)
    );
    // Partition 99 of a 4-partition topic cannot be written: dead-lettered, the rest flows.
    let dead = o.wait_dead_letters(1);
    assert_eq!(dead[0].key, "o-4");
    let reason = super::dlt_header(&dead[0], "reason");
    assert!(reason.contains("UnknownPartition"), "{reason}");
}

#[test]
fn an_expanded_payload_keeps_its_nulls_with_optional_bytes_and_the_default_publishes_the_text() {
    let _shared = PG_RESTART.read().unwrap_or_else(|e| e.into_inner());
    let mut o = Outbox::new("outbox-dbznull");
    o.migrate();
    let payload = r#"{"a": null, "b": {"c": null, "d": 1.0}, "e": []}"#;
    // Two routers one after the other on one outbox: the second takes over at the first's LSN.
    o.spawn(
        "cdc",
        &[
            ("EOSFLOW_OUTBOX_EXPAND_JSON_PAYLOAD", "true"),
            (
                "EOSFLOW_OUTBOX_JSON_PAYLOAD_NULL_BEHAVIOR",
                "optional_bytes",
            ),
        ],
    );
    o.wait_streaming();
    o.insert_tx(&[("n-1".into(), "Order.Created", payload.into(), None)]);
    let seen = wait_records(&o, &o.topic("Order"), 1);
    assert_eq!(
        seen[0].value.as_deref(),
        Some(r#"{"a":null,"b":{"c":null,"d":1.0}}"#)
    );
    o.kill(0);
    o.spawn("cdc", &[]);
    o.wait_streaming();
    o.insert_tx(&[("n-2".into(), "Order.Created", payload.into(), None)]);
    let seen = wait_records(&o, &o.topic("Order"), 2);
    // Without expansion: the payload's text as Postgres prints the jsonb.
    assert_eq!(
        seen.iter()
            .find(|s| s.key == "n-2")
            .and_then(|s| s.value.as_deref()),
        Some(r#"{"a": null, "b": {"c": null, "d": 1.0}, "e": []}"#)
    );
}
