//! Clicks per region per minute on the streams DSL (docs/dsl.md, issue #34's shape): clicks
//! come in on `dsl-clicks.clicks` (key = user id, value = the page), users on the compacted
//! `dsl-clicks.users` (key = user id, value = the user's region). Each click is joined with its
//! user's region (a click of a user not in the table counts for `unknown`), re-keyed by region
//! through a repartition topic, and counted in 1-minute windows; when a window closes (after
//! 10 s of grace), its final count goes to `dsl-clicks.per-region` as JSON, keyed by region:
//! `{"region":"eu","start_ms":0,"end_ms":60000,"clicks":2}`. `tests.rs` runs it in the test
//! driver, no broker.
//!
//! ```text
//! eval "$(dev/stack env)"
//! cargo run --example dsl_clicks_per_region
//! ```
//!
//! It creates its inputs and output when they are missing (`clicks` and `users` with the same
//! partition count: the join needs them co-partitioned); the instance creates the internal
//! topics when it starts (the repartition topic, the window store's changelog, retry levels
//! and DLTs).

#[cfg(test)]
mod tests;

use std::time::Duration;

use eosflow::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::KafkaClients;
use eosflow::serdes::{I64Serde, JsonSerde, StringSerde};
use eosflow::topology::windows::{EmitStrategy, TimeWindows};
use eosflow::topology::{Topology, TopologyError};

/// Input: key = user id, value = the page clicked.
const CLICKS: &str = "dsl-clicks.clicks";
/// Input (compacted): key = user id, value = the user's region.
const USERS: &str = "dsl-clicks.users";
/// Output: key = region, value = a window's final count as JSON.
const PER_REGION: &str = "dsl-clicks.per-region";

/// One region's clicks in one minute.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct RegionClicks {
    region: String,
    start_ms: i64,
    end_ms: i64,
    clicks: i64,
}

/// clicks ⋈ users → re-keyed by region → counted per minute → final counts out.
fn topology() -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new();
    let users = builder.table(USERS, Consumed::with(StringSerde, StringSerde));
    let minute = TimeWindows::of_size_with_grace(Duration::from_secs(60), Duration::from_secs(10));
    builder
        .stream(CLICKS, Consumed::with(StringSerde, StringSerde))
        .left_join_table(&users, |_page, region| {
            region.cloned().unwrap_or_else(|| "unknown".to_string())
        })
        .group_by(
            |_, region| region.clone(),
            Grouped::with(StringSerde, StringSerde).named("by-region"),
        )
        .windowed_by(minute)
        .emit_strategy(EmitStrategy::OnWindowClose)
        .count(Materialized::with(StringSerde, I64Serde).named("clicks-per-region"))
        .to_stream()
        .map(|w, clicks| {
            let (region, start_ms, end_ms) = w.map_or((String::new(), 0, 0), |w| {
                (w.key.clone(), w.window.start, w.window.end)
            });
            let out = RegionClicks {
                region: region.clone(),
                start_ms,
                end_ms,
                clicks: *clicks,
            };
            (region, out)
        })
        .to(PER_REGION, Produced::with(StringSerde, JsonSerde::new()));
    builder.build()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    eosflow::init_logging();
    let mut config = eosflow::Config::load(None)?;
    config.app.id = "dsl-clicks-per-region".into();
    let topology = topology()?;
    // The inputs and output are ours; `run` creates the internal topics.
    let ours = [
        TopicSpec::new(CLICKS, 4, "delete"),
        TopicSpec::new(USERS, 4, "compact"),
        TopicSpec::new(PER_REGION, 4, "delete"),
    ];
    let clients = KafkaClients::new(config.kafka.clone());
    topics::apply_blocking(&clients, &ours, Duration::from_secs(30))?;
    let summary = eosflow::run(&config, topology)?;
    println!("stopped after {} records", summary.records);
    Ok(())
}
