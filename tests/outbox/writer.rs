//! The outbox writer library (`eosflow-outbox-writer`) against the real Postgres, router and
//! broker: rows appended inside a service's tokio-postgres and sqlx transactions arrive on Kafka
//! once with the envelope headers of the caller's context; a rolled-back transaction publishes
//! nothing; an Avro payload is registered and published in the Confluent wire format.

use std::collections::HashSet;
use std::time::Duration;

use eosflow_outbox_writer::{AvroRegistry, Columns, Context, OutboxEvent, OutboxWriter, Payload};
use sqlx::Connection;

use super::{count_by_id, support, Outbox, PG_RESTART};

/// A test event of aggregate `Order`.
struct Placed {
    order_id: String,
    payload: Payload,
}

impl OutboxEvent for Placed {
    fn aggregate_type(&self) -> &str {
        "Order"
    }
    fn aggregate_id(&self) -> &str {
        &self.order_id
    }
    fn event_type(&self) -> &str {
        "orders.placed.v1"
    }
    fn payload(&self) -> Payload {
        self.payload.clone()
    }
}

fn placed(order_id: &str) -> Placed {
    Placed {
        order_id: order_id.into(),
        payload: Payload::Json(serde_json::json!({ "order_id": order_id })),
    }
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn rows_appended_in_tokio_postgres_and_sqlx_transactions_arrive_once_with_the_context_headers_and_a_rollback_publishes_nothing(
) {
    let _shared = PG_RESTART.read().unwrap_or_else(|e| e.into_inner());
    let mut o = Outbox::new("outbox-writer");
    o.migrate();
    o.spawn("cdc", &[]);
    o.wait_streaming();
    let writer = OutboxWriter::new(&o.table);
    let ctx = |n: &str| {
        Context::caused_by(format!("req-{n}"))
            .correlated("conv-1")
            .traced(TRACEPARENT)
            .for_tenant("acme")
    };
    // The connection's task lives on the test connection's runtime: drive it there.
    let super::Pg { rt, client } = &mut o.pg;
    let (via_tokio, rolled_back_tokio) = rt.block_on(async {
        let tx = client.transaction().await.expect("begin");
        let id = writer
            .append_tokio_postgres(&tx, &placed("o-tokio"), &ctx("tokio"))
            .await
            .expect("append");
        tx.commit().await.expect("commit");
        let tx = client.transaction().await.expect("begin");
        let gone = writer
            .append_tokio_postgres(&tx, &placed("o-rolled-back"), &ctx("rb"))
            .await
            .expect("append");
        tx.rollback().await.expect("rollback");
        (id, gone)
    });
    let (via_sqlx, rolled_back_sqlx, last) = rt.block_on(async {
        let mut conn = sqlx::PgConnection::connect(&support::postgres_url())
            .await
            .expect("sqlx connect");
        let mut tx = conn.begin().await.expect("begin");
        let id = writer
            .append_sqlx(&mut tx, &placed("o-sqlx"), &ctx("sqlx"))
            .await
            .expect("append");
        tx.commit().await.expect("commit");
        let mut tx = conn.begin().await.expect("begin");
        let gone = writer
            .append_sqlx(&mut tx, &placed("o-rolled-back"), &ctx("rb"))
            .await
            .expect("append");
        tx.rollback().await.expect("rollback");
        // Committed after the rollbacks: once it is in Kafka, they would have been too.
        let mut tx = conn.begin().await.expect("begin");
        let last = writer
            .append_sqlx(&mut tx, &placed("o-last"), &ctx("last"))
            .await
            .expect("append");
        tx.commit().await.expect("commit");
        (id, gone, last)
    });
    let committed: HashSet<String> = [via_tokio, via_sqlx, last]
        .iter()
        .map(|u| u.to_string())
        .collect();
    o.wait_for_ids(&["Order"], &committed, Duration::from_secs(60));
    let seen = o.read(&["Order"]);
    let counts = count_by_id(&seen);
    assert_eq!(seen.len(), 3, "{seen:#?}");
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");
    for gone in [rolled_back_tokio, rolled_back_sqlx] {
        assert!(
            !counts.contains_key(&gone.to_string()),
            "rolled back: {gone}"
        );
    }
    for (id, order, req) in [
        (via_tokio, "o-tokio", "tokio"),
        (via_sqlx, "o-sqlx", "sqlx"),
    ] {
        let s = seen
            .iter()
            .find(|s| s.headers.get("id") == Some(&id.to_string()))
            .expect("the row");
        assert_eq!(s.key, order);
        let h = |k: &str| s.headers.get(k).map(String::as_str);
        assert_eq!(h("type"), Some("orders.placed.v1"));
        assert_eq!(h("aggregate_id"), Some(order));
        assert_eq!(h("aggregate_type"), Some("Order"));
        assert_eq!(h("causation_id"), Some(format!("req-{req}").as_str()));
        assert_eq!(h("correlation_id"), Some("conv-1"));
        assert_eq!(h("traceparent"), Some(TRACEPARENT));
        assert_eq!(h("tenant"), Some("acme"));
        assert!(h("occurred_at").is_some_and(|t| !t.is_empty()));
        let v: serde_json::Value =
            serde_json::from_str(s.value.as_deref().unwrap_or("null")).expect("json");
        assert_eq!(v["order_id"], order);
    }
}

#[test]
fn an_avro_payload_is_registered_and_published_in_the_confluent_wire_format_from_a_bytea_column() {
    let _shared = PG_RESTART.read().unwrap_or_else(|e| e.into_inner());
    let mut o = Outbox::new("outbox-writer-avro");
    o.pg.exec(&format!(
        "create table {} (id uuid primary key, occurred_at timestamptz not null default now(), \
         aggregate_type text, aggregate_id text not null, type text not null, payload bytea, \
         headers jsonb, sent_at timestamptz)",
        o.table
    ));
    o.spawn("cdc", &[]);
    o.wait_streaming();
    let template = format!("{}.${{routedByValue}}", o.app);
    let writer = OutboxWriter::with_columns(
        &o.table,
        Columns {
            payload_bytea: true,
            ..Columns::default()
        },
    )
    .with_registry(AvroRegistry::new(&support::registry_url(), &template));
    let schema = r#"{"type":"record","name":"Placed","namespace":"test.writer","fields":[{"name":"order_id","type":"string"},{"name":"total_minor","type":"long"}]}"#;
    let event = Placed {
        order_id: "o-avro".into(),
        payload: Payload::Avro {
            schema: schema.into(),
            value: apache_avro::types::Value::Record(vec![
                (
                    "order_id".into(),
                    apache_avro::types::Value::String("o-avro".into()),
                ),
                ("total_minor".into(), apache_avro::types::Value::Long(4200)),
            ]),
        },
    };
    // The connection's task lives on the test connection's runtime: drive it there.
    let super::Pg { rt, client } = &mut o.pg;
    let id = rt.block_on(async {
        let tx = client.transaction().await.expect("begin");
        let id = writer
            .append_tokio_postgres(&tx, &event, &Context::caused_by("req-avro"))
            .await
            .expect("append");
        tx.commit().await.expect("commit");
        id
    });
    let ids = HashSet::from([id.to_string()]);
    o.wait_for_ids(&["Order"], &ids, Duration::from_secs(60));
    let topic = o.topic("Order");
    let mut values = vec![];
    eosflow::internals::kafka::reader::read_all(
        &support::clients(),
        &topic,
        Duration::from_secs(30),
        |m| {
            use rdkafka::Message;
            values.push(m.payload().map(<[u8]>::to_vec));
            Ok(())
        },
    )
    .expect("read");
    assert_eq!(values.len(), 1);
    let bytes = values[0].clone().expect("a value");
    assert_eq!(bytes[0], 0, "Confluent magic byte");
    let registry = eosflow::internals::codec::registry::Registry::new(&support::registry_url());
    let decoded = o.pg.rt.block_on(registry.decode(&bytes)).expect("decodes");
    assert_eq!(
        decoded,
        apache_avro::types::Value::Record(vec![
            (
                "order_id".into(),
                apache_avro::types::Value::String("o-avro".into())
            ),
            ("total_minor".into(), apache_avro::types::Value::Long(4200)),
        ])
    );
}
