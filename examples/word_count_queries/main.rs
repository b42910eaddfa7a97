//! Interactive queries end to end (docs/interactive-queries.md): the DSL word count, started
//! with `eosflow::start` instead of `run`, serves its `word-counts` store on its query listener
//! (`queries.listen`). The example writes three lines that hold a word made up for this run,
//! then asks for that word's count the way a service would — `GET
//! /stores/word-counts/keys/<word>` with the bearer token — until the answer says 3, prints the
//! answer (value, partition, the input offsets it reflects), reads the same key through the
//! library API and stops. Locally it serves plain HTTP on 127.0.0.1 with a token made up for
//! the run (`allow_plaintext`); in production set the `ssl_*` keys (docs/security.md).
//!
//! ```text
//! eval "$(dev/stack env)"
//! make query-demo        # or: cargo run --example word_count_queries
//! ```

use std::time::{Duration, Instant};

use eosflow::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::{ClientRole, KafkaClients};
use eosflow::processor::StoreHandle;
use eosflow::serdes::{I64Serde, StringSerde};
use eosflow::topology::{Topology, TopologyError};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

const LINES: &str = "word-count-queries.lines";
const COUNTS: &str = "word-count-queries.counts";

/// lines → words → re-keyed by word → counted in `word-counts` → counts; and the store's
/// handle, to query it with.
fn topology() -> Result<(Topology, StoreHandle<String, i64>), TopologyError> {
    let builder = StreamsBuilder::new();
    let counts = builder
        .stream(LINES, Consumed::with(StringSerde, StringSerde))
        .flat_map_values(|line: &String| {
            line.split_whitespace()
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
        })
        .group_by(
            |_, w| w.clone(),
            Grouped::with(StringSerde, StringSerde).named("words"),
        )
        .count(Materialized::with(StringSerde, I64Serde).named("word-counts"));
    counts
        .to_stream()
        .to(COUNTS, Produced::with(StringSerde, I64Serde));
    let store = counts.store().clone();
    Ok((builder.build()?, store))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    eosflow::init_logging();
    let mut config = eosflow::Config::load(None)?;
    config.app.id = "word-count-queries".into();
    if config.app.instance_id.is_empty() {
        config.app.instance_id = "example".into();
    }
    if config.queries.listen.is_empty() {
        config.queries.listen = "127.0.0.1:9469".into();
        config.queries.allow_plaintext = true; // loopback only: a local demo
    }
    if config.queries.token.is_empty() && !config.queries.ssl_client_auth {
        config.queries.token = eosflow::config::Secret::new(format!("demo-{}", uuid_like()));
    }
    // Other instances (and clients) reach this one at its query listener.
    config.processor.application_server = config.queries.listen.clone();
    let addr = config.queries.listen.clone();
    let client = eosflow::query::QueryClient::from_config(&config.queries)?;

    let clients = KafkaClients::new(config.kafka.clone());
    let ours = [
        TopicSpec::new(LINES, 4, "delete"),
        TopicSpec::new(COUNTS, 4, "delete"),
    ];
    topics::apply_blocking(&clients, &ours, Duration::from_secs(30))?;
    // A word no earlier run wrote: its count is exactly what this run adds.
    let word = format!("w{}", uuid_like());
    let producer: BaseProducer = clients.config(ClientRole::Idempotent).create()?;
    for line in [
        format!("the {word} jumps"),
        format!("a {word} sleeps"),
        format!("{word} again"),
    ] {
        producer
            .send(BaseRecord::<str, str>::to(LINES).payload(&line))
            .map_err(|(e, _)| e)?;
    }
    producer.flush(Duration::from_secs(30))?;

    let (topology, store) = topology()?;
    let instance = eosflow::start(&config, topology)?;
    instance.queries().serve_store(&store);

    let path = format!("/stores/word-counts/keys/{word}");
    let deadline = Instant::now() + Duration::from_secs(90);
    let answer = loop {
        match client
            .get_blocking(&addr, &path)
            .map(|a| (a.status, a.body))
        {
            Ok((200, body)) if body.contains("\"value\":3") => break body,
            Ok((status, body)) if Instant::now() < deadline => {
                println!("GET {path} → {status} {}", body.trim());
            }
            Err(e) if Instant::now() < deadline => println!("GET {path}: {e}"),
            other => {
                let _ = instance.close();
                return Err(
                    format!("{word} was not counted 3 times within 90 s: {other:?}").into(),
                );
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    println!("GET {addr}{path}\n{}", answer.trim());
    let local = instance.store(&store).get(&word)?;
    println!(
        "library: {word} = {:?} (partition {:?}, positions {:?})",
        local.value, local.partitions, local.positions
    );
    let summary = instance.close()?;
    println!("stopped after {} records", summary.records);
    Ok(())
}

/// A short unique suffix (time and process id) without a UUID dependency.
fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}{:x}", nanos, std::process::id())
}
