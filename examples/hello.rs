//! Hello, eosflow: a per-key running total, exactly once.
//!
//! Reads decimal amounts from `hello.input` (key = account), keeps each key's total in the
//! processor's store, and writes `<key> total=<n>` to `hello.totals` in the same transaction
//! as the input offset. Kill it anywhere: no amount is ever counted twice or lost.
//!
//! ```text
//! eval "$(dev/stack env)"
//! cargo run --example hello -- --create-topics     # creates the topics and runs
//! ```

use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::processor::{Context, ProcessError, Processor, Record};

/// Adds each record's amount to its key's total.
struct RunningTotal;

impl Processor for RunningTotal {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        let key = r
            .key
            .ok_or_else(|| ProcessError::permanent("record without a key"))?;
        let text =
            std::str::from_utf8(r.value.unwrap_or_default()).map_err(ProcessError::permanent)?;
        let amount: i64 = text.trim().parse().map_err(ProcessError::permanent)?;
        let before = match ctx.get(key)? {
            Some(b) => i64::from_le_bytes(
                b.try_into()
                    .map_err(|_| ProcessError::permanent("bad state"))?,
            ),
            None => 0,
        };
        let total = before + amount;
        ctx.put(key, total.to_le_bytes().to_vec());
        let line = format!("{} total={total}", String::from_utf8_lossy(key));
        ctx.emit(
            "hello.totals",
            Some(key.to_vec()),
            Some(line.into_bytes()),
            vec![],
        );
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    eosflow::init_logging();
    let mut config = eosflow::Config::load(None)?;
    config.app.id = "hello".into();
    config.processor.input_topics = vec!["hello.input".into()];
    if std::env::args().any(|a| a == "--create-topics") {
        // Input, its dead-letter topic and the store's changelog share one partition count.
        let specs = [
            TopicSpec::new("hello.input", 4, "delete"),
            TopicSpec::new("hello.input.DLT", 4, "delete"),
            TopicSpec::new("hello.totals", 4, "delete"),
            TopicSpec::new("hello-state-changelog", 4, "compact"),
        ];
        let clients = eosflow::kafka::KafkaClients::new(config.kafka.clone());
        topics::apply_blocking(&clients, &specs, std::time::Duration::from_secs(30))?;
    }
    eosflow::run(&config, RunningTotal)?;
    Ok(())
}
