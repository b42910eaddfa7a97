//! Word count on the streams DSL (docs/dsl.md): lines come in on `dsl-word-count.lines` (any key,
//! a line of text as value); after each line, the new count of each of its words goes to
//! `dsl-word-count.counts` (the word as key, the count as 8 big-endian bytes). The words are
//! re-keyed through a repartition topic, so each word is counted in one place whatever the
//! partition of its line; the counts live in the changelogged store `word-counts`.
//! `tests.rs` runs it in the test driver, no broker.
//!
//! ```text
//! eval "$(dev/stack env)"
//! cargo run --example dsl_word_count
//! ```
//!
//! It creates its input and output when they are missing (the application's own topics); the
//! instance creates the internal ones when it starts (the repartition topic, the retry levels
//! and DLTs, the changelogs: docs/topics.md).

#[cfg(test)]
mod tests;

use std::time::Duration;

use eosflow::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::KafkaClients;
use eosflow::serdes::{I64Serde, StringSerde};
use eosflow::topology::{Topology, TopologyError};

/// Input: any key, one line of text.
const LINES: &str = "dsl-word-count.lines";
/// Output: key = a word, value = its count so far.
const COUNTS: &str = "dsl-word-count.counts";

/// lines → words → re-keyed by word → counted → counts.
fn topology() -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new();
    let counts = builder
        .stream(LINES, Consumed::with(StringSerde, StringSerde))
        .flat_map_values(|line| words(line))
        .group_by(
            |_, w| w.clone(),
            Grouped::with(StringSerde, StringSerde).named("words"),
        )
        .count(Materialized::with(StringSerde, I64Serde).named("word-counts"));
    counts
        .to_stream()
        .to(COUNTS, Produced::with(StringSerde, I64Serde));
    builder.build()
}

/// A line's words, in lower case.
fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_lowercase).collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    eosflow::init_logging();
    let mut config = eosflow::Config::load(None)?;
    config.app.id = "dsl-word-count".into();
    let topology = topology()?;
    // The input and output are ours; `run` creates the internal topics with the input's count.
    let ours = [
        TopicSpec::new(LINES, 4, "delete"),
        TopicSpec::new(COUNTS, 4, "delete"),
    ];
    let clients = KafkaClients::new(config.kafka.clone());
    topics::apply_blocking(&clients, &ours, Duration::from_secs(30))?;
    let summary = eosflow::run(&config, topology)?;
    println!("stopped after {} records", summary.records);
    Ok(())
}
