//! A fan-out on the streams DSL (docs/dsl.md): payments come in on `dsl-fan-out.payments`
//! (key = account id, value = JSON `{"amount_cents":1250,"currency":"EUR"}`) and each goes to
//! exactly one output topic, by the first of these that holds (`split` and `branch`):
//!
//! 1. `dsl-fan-out.refunds`: a negative amount;
//! 2. `dsl-fan-out.large`: 10 000.00 or more (whatever the currency);
//! 3. `dsl-fan-out.foreign`: a currency other than EUR (in any case);
//! 4. the default branch, `dsl-fan-out.domestic`: every other payment — and a tombstone (a
//!    record without a value), which no predicate can judge.
//!
//! Key, value and timestamp go out unchanged. A value that is not JSON goes to
//! `dsl-fan-out.payments.DLT`. `tests.rs` runs it in the test driver, no broker.
//!
//! ```text
//! eval "$(dev/stack env)"
//! cargo run --example dsl_fan_out
//! ```
//!
//! It creates its input and outputs when they are missing; the instance creates the internal
//! topics when it starts (retry levels and DLTs; the fan-out keeps no state).

#[cfg(test)]
mod tests;

use std::time::Duration;

use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::KafkaClients;
use eosflow::serdes::{JsonSerde, StringSerde};
use eosflow::topology::{Topology, TopologyError};

/// Input: key = account id, value = a [`Payment`] as JSON.
const PAYMENTS: &str = "dsl-fan-out.payments";
/// Outputs, one per branch in branch order, the default branch last.
const OUTPUTS: [&str; 4] = [REFUNDS, LARGE, FOREIGN, DOMESTIC];
/// Payments of a negative amount.
const REFUNDS: &str = "dsl-fan-out.refunds";
/// Payments of [`LARGE_CENTS`] or more.
const LARGE: &str = "dsl-fan-out.large";
/// Payments in another currency than EUR.
const FOREIGN: &str = "dsl-fan-out.foreign";
/// Everything else (the default branch).
const DOMESTIC: &str = "dsl-fan-out.domestic";
/// From this amount on (10 000.00), a payment is large.
const LARGE_CENTS: i64 = 1_000_000;

/// One payment.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Payment {
    amount_cents: i64,
    currency: String,
}

/// payments → the first branch whose predicate holds (or the default) → its topic.
fn topology() -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new();
    let branches = builder
        .stream(PAYMENTS, Consumed::with(StringSerde, JsonSerde::new()))
        .split()
        .branch(|_, p: &Payment| p.amount_cents < 0)
        .branch(|_, p| p.amount_cents >= LARGE_CENTS)
        .branch(|_, p| !p.currency.eq_ignore_ascii_case("EUR"))
        .default_branch();
    for (branch, topic) in branches.iter().zip(OUTPUTS) {
        branch.to(topic, Produced::with(StringSerde, JsonSerde::new()));
    }
    builder.build()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    eosflow::init_logging();
    let mut config = eosflow::Config::load(None)?;
    config.app.id = "dsl-fan-out".into();
    let topology = topology()?;
    // The input and outputs are ours; `run` creates the internal topics.
    let mut ours = vec![TopicSpec::new(PAYMENTS, 4, "delete")];
    ours.extend(OUTPUTS.map(|topic| TopicSpec::new(topic, 4, "delete")));
    let clients = KafkaClients::new(config.kafka.clone());
    topics::apply_blocking(&clients, &ours, Duration::from_secs(30))?;
    let summary = eosflow::run(&config, topology)?;
    println!("stopped after {} records", summary.records);
    Ok(())
}
