//! The real parts answer: Kafka (plain and transactional, seen through read_committed),
//! PostgreSQL with logical decoding, and the schema registry with Avro.

mod support;

use std::time::Duration;

use eosflow::internals::codec::registry::Registry;
use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::sink::TxnSink;
use eosflow::kafka::ClientRole;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::Message;

fn read_values(topic: &str) -> Vec<String> {
    let mut out = Vec::new();
    read_all(&support::clients(), topic, Duration::from_secs(60), |m| {
        out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string());
        Ok(())
    })
    .expect("reading the topic to its end");
    out
}

#[test]
fn kafka_produce_then_consume_round_trips() {
    let topic = support::unique("stack-plain");
    support::create_topics(&[&topic], 3);
    let producer: ThreadedProducer<DefaultProducerContext> = support::clients()
        .config(ClientRole::Idempotent)
        .create()
        .expect("producer");
    for i in 0..30 {
        let v = format!("v{i}");
        let k = format!("k{}", i % 5);
        producer
            .send(
                BaseRecord::to(&topic)
                    .key(k.as_bytes())
                    .payload(v.as_bytes()),
            )
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    let mut got = read_values(&topic);
    got.sort_by_key(|v| v[1..].parse::<u32>().unwrap_or(u32::MAX));
    let want: Vec<String> = (0..30).map(|i| format!("v{i}")).collect();
    assert_eq!(got, want);
}

#[test]
fn read_committed_sees_committed_transactions_and_never_aborted_ones() {
    let topic = support::unique("stack-txn");
    support::create_topics(&[&topic], 1);
    let clients = support::clients();
    let sink = TxnSink::new(
        &clients,
        &support::unique("stack-txn-id"),
        Duration::from_secs(10),
    )
    .expect("init_transactions");

    sink.begin().expect("begin");
    sink.send(&topic, None, Some(b"k"), Some(b"committed-1"), &[])
        .expect("send");
    sink.send(&topic, None, Some(b"k"), Some(b"committed-2"), &[])
        .expect("send");
    sink.commit().expect("commit");

    sink.begin().expect("begin");
    sink.send(&topic, None, Some(b"k"), Some(b"aborted"), &[])
        .expect("send");
    // The record reaches the log before the abort: read_committed must still never return it.
    std::thread::sleep(Duration::from_millis(300));
    sink.abort().expect("abort");

    sink.begin().expect("begin");
    sink.send(&topic, None, Some(b"k"), Some(b"committed-3"), &[])
        .expect("send");
    sink.commit().expect("commit");

    assert_eq!(
        read_values(&topic),
        vec!["committed-1", "committed-2", "committed-3"]
    );

    // read_uncommitted shows the aborted record is really in the log (the test can fail).
    let consumer: rdkafka::consumer::BaseConsumer = clients
        .config(ClientRole::Reader)
        .set("isolation.level", "read_uncommitted")
        .create()
        .expect("consumer");
    use rdkafka::consumer::Consumer;
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, rdkafka::Offset::Beginning)
        .expect("tpl");
    consumer.assign(&tpl).expect("assign");
    let mut raw = Vec::new();
    support::wait_for(
        "4 records via read_uncommitted",
        Duration::from_secs(30),
        || {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
                raw.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string());
            }
            (raw.len() >= 4).then_some(())
        },
    );
    assert!(raw.contains(&"aborted".to_string()), "{raw:?}");
}

#[test]
fn postgres_accepts_writes_and_decodes_them_logically() {
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    rt.block_on(async {
        let (client, conn) = tokio::time::timeout(
            Duration::from_secs(20),
            tokio_postgres::connect(&support::postgres_url(), tokio_postgres::NoTls),
        )
        .await
        .expect("connect timed out")
        .expect("connect to the stack's postgres (dev/stack up)");
        tokio::spawn(conn);
        let level: String = client.query_one("show wal_level", &[]).await.expect("wal_level").get(0);
        assert_eq!(level, "logical", "the outbox router needs wal_level=logical");

        let table = support::unique("stack_pg").replace('-', "_");
        let slot = format!("{table}_slot");
        client
            .batch_execute(&format!("create table {table} (id bigint primary key, body text not null)"))
            .await
            .expect("create table");
        client
            .query_one(&format!("select lsn::text from pg_create_logical_replication_slot('{slot}', 'test_decoding')"), &[])
            .await
            .expect("create a logical slot (needs REPLICATION and wal_level=logical)");
        client
            .execute(&format!("insert into {table} values (1, 'hello')"), &[])
            .await
            .expect("insert");
        let body: String = client
            .query_one(&format!("select body from {table} where id = 1"), &[])
            .await
            .expect("select")
            .get(0);
        assert_eq!(body, "hello");
        let changes = client
            .query(&format!("select data from pg_logical_slot_get_changes('{slot}', null, null)"), &[])
            .await
            .expect("read the slot");
        let text: Vec<String> = changes.iter().map(|r| r.get::<_, String>(0)).collect();
        assert!(
            text.iter().any(|t| t.contains(&table) && t.contains("INSERT") && t.contains("hello")),
            "{text:?}"
        );
        client
            .batch_execute(&format!("select pg_drop_replication_slot('{slot}'); drop table {table}"))
            .await
            .expect("cleanup");
    });
}

#[test]
fn registry_registers_fetches_and_round_trips_avro() {
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    rt.block_on(async {
        let registry = Registry::new(&support::registry_url());
        let name = support::unique("StackProbe").replace('-', "_");
        let schema = format!(
            r#"{{"type":"record","name":"{name}","namespace":"eosflow.test","fields":[{{"name":"id","type":"string"}},{{"name":"amount","type":"long"}}]}}"#
        );
        let subject = format!("{}-value", support::unique("stack-subject"));
        let id = tokio::time::timeout(Duration::from_secs(30), registry.register(&subject, &schema))
            .await
            .expect("register timed out")
            .expect("register");
        let again = registry.register(&subject, &schema).await.expect("register again");
        assert_eq!(id, again, "registering the same schema twice must keep its id");
        let fetched = registry.fetch(id).await.expect("fetch by id");
        let fetched: serde_json::Value = serde_json::from_str(&fetched).expect("fetched schema is JSON");
        assert_eq!(fetched["name"], serde_json::Value::String(name.clone()));

        use apache_avro::types::Value;
        let value = Value::Record(vec![
            ("id".into(), Value::String("o-1".into())),
            ("amount".into(), Value::Long(42)),
        ]);
        let topic = support::unique("stack-avro");
        let bytes = registry.encode(&topic, &schema, value.clone()).await.expect("encode");
        assert_eq!(bytes[0], 0, "Confluent wire format starts with magic byte 0");
        let decoded = Registry::new(&support::registry_url()).decode(&bytes).await.expect("decode with a cold cache");
        assert_eq!(decoded, value);
    });
}
