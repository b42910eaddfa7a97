//! Hello, eosflow: a per-key running total, exactly once. Reads decimal amounts from
//! `hello.input` (key = account), keeps each key's total in the processor's store and writes
//! `<key> total=<n>` to `hello.totals` in the transaction that commits the input offset: kill it
//! anywhere, no amount is counted twice or lost. With the local stack (docs/quick-start.md):
//!
//! ```text
//! eval "$(dev/stack env)"
//! EOSFLOW_APP_INSTANCE_ID=hello-1 cargo run --example hello -- --create-topics
//! ```

use eosflow::kafka::{topics, KafkaClients};
use eosflow::processor::{Context, ProcessError, Processor, Record};

/// Adds each record's amount to its key's total.
struct RunningTotal;

/// A decimal number (an input value, or a total in the store).
fn number(bytes: &[u8]) -> Result<i64, ProcessError> {
    let text = std::str::from_utf8(bytes).map_err(ProcessError::permanent)?;
    text.trim().parse().map_err(ProcessError::permanent)
}

impl Processor for RunningTotal {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        let key = r.key.ok_or_else(|| ProcessError::permanent("no key"))?;
        let amount = number(r.value.unwrap_or_default())?;
        let total = ctx.get(key)?.map_or(Ok(0), |b| number(&b))? + amount;
        ctx.put(key, total.to_string().into_bytes());
        let line = format!("{} total={total}", String::from_utf8_lossy(key));
        ctx.emit(
            "hello.totals",
            Some(key.to_vec()),
            Some(line.into()),
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
        // The input, its retry levels and DLT, the store's changelog: one partition count.
        let (mut specs, _) = topics::processor_topics(&config, "state", 4);
        specs.push(topics::TopicSpec::new("hello.totals", 4, "delete"));
        let clients = KafkaClients::new(config.kafka.clone());
        topics::apply_blocking(&clients, &specs, std::time::Duration::from_secs(30))?;
    }
    eosflow::run(&config, RunningTotal)?;
    Ok(())
}
