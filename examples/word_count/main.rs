//! Word count with the streams DSL: per author, how often each word was written and how many
//! lines in the last seven days — a processor with two named stores, a prefix scan and a range
//! scan, exactly once. Lines come in on `word-count.lines` (key = author, value = a line of
//! text); after each line the author's summary goes to `word-count.summaries`. The guide
//! `docs/write-your-own-topology.md` walks through this file and `tests.rs` (its unit tests, in
//! the test driver, no broker). `topology_by_hand` is the same topology on the lower-level
//! builder.
//!
//! ```text
//! eval "$(dev/stack env)"
//! cargo run --example word_count -- apply     # create the topics, then run
//! ```

#[cfg(test)]
mod tests;

use std::time::Duration;

use eosflow::dsl::{Consumed, Produced, Stores, StreamsBuilder};
use eosflow::kafka::topics;
use eosflow::kafka::KafkaClients;
use eosflow::processor::{ProcessError, StoreHandle};
use eosflow::serdes::{I64Serde, StringSerde};
use eosflow::topology::{ProcessorContext, StreamProcessor, Topology, TopologyError, TypedRecord};

/// Input: key = author, value = one line of text.
const LINES: &str = "word-count.lines";
/// Output: key = author, value = the author's summary after each line.
const SUMMARIES: &str = "word-count.summaries";
const DAY_MS: i64 = 24 * 3_600_000;

/// `words`: `<author>/<word>` → count. `days`: `<author>/<day number>` → lines that day.
fn stores() -> (StoreHandle<String, i64>, StoreHandle<String, i64>) {
    let words = StoreHandle::new("words", StringSerde, I64Serde);
    let days = StoreHandle::new("days", StringSerde, I64Serde);
    (words, days)
}

/// lines → count (both stores) → summaries.
fn topology() -> Result<Topology, TopologyError> {
    let (words, days) = stores();
    let builder = StreamsBuilder::new();
    builder
        .stream(LINES, Consumed::with(StringSerde, StringSerde))
        .process(
            count(&words, &days),
            Stores::new().store(&words).store(&days),
        )
        .to(SUMMARIES, Produced::with(StringSerde, StringSerde));
    builder.build()
}

/// Takes `(author, line)`, updates the author's two stores and forwards `(author, summary)`.
fn count(
    words: &StoreHandle<String, i64>,
    days: &StoreHandle<String, i64>,
) -> impl StreamProcessor<String, String, String, String> {
    let (w, d) = (words.clone(), days.clone());
    move |ctx: &mut ProcessorContext<'_, '_, '_, String, String>,
          line: TypedRecord<String, String>|
          -> Result<(), ProcessError> {
        let author = line
            .key
            .ok_or_else(|| ProcessError::permanent("a line needs an author"))?;
        let mut counts = ctx.store(&w)?;
        for word in line.value.unwrap_or_default().split_whitespace() {
            let key = format!("{author}/{}", word.to_lowercase());
            let n = counts.get(&key)?.unwrap_or(0) + 1;
            counts.put(&key, &n)?;
        }
        // Every word of the author, in key order; the scan sees this call's writes too.
        let (mut total, mut distinct, mut top) = (0, 0, (String::new(), 0));
        for entry in counts.prefix(&format!("{author}/"))? {
            let (key, n) = entry?;
            total += n;
            distinct += 1;
            if n > top.1 {
                top = (key[author.len() + 1..].to_string(), n);
            }
        }
        // Event time, not the wall clock: a batch that aborts runs again, later.
        let day = line.timestamp.unwrap_or(0) / DAY_MS;
        let mut per_day = ctx.store(&d)?;
        let today = format!("{author}/{day:08}");
        per_day.put(&today, &(per_day.get(&today)?.unwrap_or(0) + 1))?;
        let week_start = format!("{author}/{:08}", day - 6);
        let week: i64 = per_day
            .range(&week_start..=&today)?
            .map(|entry| entry.map(|(_, n)| n))
            .sum::<Result<_, _>>()?;
        let summary = format!(
            "words={total} distinct={distinct} top={}:{} week={week}",
            top.0, top.1
        );
        ctx.forward(TypedRecord::new(Some(author), Some(summary)));
        Ok(())
    }
}

/// The same topology on the lower-level builder: nodes wired by name.
fn topology_by_hand() -> Result<Topology, TopologyError> {
    let (words, days) = stores();
    Topology::builder()
        .add_source("lines", LINES, StringSerde, StringSerde)
        .add_processor("count", count(&words, &days), &["lines"])
        .add_state_store(&words, &["count"])
        .add_state_store(&days, &["count"])
        .add_sink("summaries", SUMMARIES, StringSerde, StringSerde, &["count"])
        .build()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    eosflow::init_logging();
    let mut config = eosflow::Config::load(None)?;
    config.app.id = "word-count".into();
    // `-- by-hand` (after `plan` or `apply`, or alone) runs the builder's version instead.
    let by_hand = std::env::args().any(|arg| arg == "by-hand");
    let topology = if by_hand {
        topology_by_hand()?
    } else {
        topology()?
    };
    // Every topic it reads or writes — the input, its retry levels and DLT, one compacted
    // changelog per store, the output — with 4 partitions, and the group sharing one count.
    let (specs, group) = topology.topics(&config, 4);
    let clients = KafkaClients::new(config.kafka.clone());
    let timeout = Duration::from_secs(30);
    match std::env::args().nth(1).as_deref() {
        Some("plan") => {
            for item in topics::plan_blocking(&clients, &specs, &[group], timeout)? {
                println!("{item}");
            }
            return Ok(());
        }
        Some("apply") => {
            for (topic, outcome) in topics::apply_blocking(&clients, &specs, timeout)? {
                println!("{topic}: {outcome:?}");
            }
        }
        _ => {}
    }
    let summary = eosflow::run(&config, topology)?;
    println!("stopped after {} records", summary.records);
    Ok(())
}
