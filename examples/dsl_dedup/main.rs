//! Deduplication by business key with a TTL on the streams DSL (docs/dsl.md): events come in
//! on `dsl-dedup.events` (any key, value = JSON `{"event_id":"e-1","body":"…"}`); the first
//! event of an `event_id` goes to `dsl-dedup.unique` (key = the event id, the event as JSON),
//! and every later one less than 10 minutes after it, in event time, is dropped. From 10
//! minutes on, the id passes again (and starts a new 10 minutes).
//!
//! The events are re-keyed by `event_id` through a repartition topic, so all copies of an
//! event meet in one partition whatever partition they came in on. A `process` node keeps the
//! time each id last passed in the store `seen-event-ids` and forgets it by a durable
//! event-time timer once no copy it must drop can still arrive: 10 minutes (the TTL) plus 1
//! minute of grace after it passed, so the store holds only the ids of the last 11 minutes.
//! An event more than the grace behind stream time could be a copy of a forgotten id: it goes
//! to the repartition topic's DLT (`dsl-dedup-events-by-id-repartition.DLT`) as
//! `late-record`, never through unchecked. An event without an `event_id`, or a value that is
//! not JSON, goes to `dsl-dedup.events.DLT`. `tests.rs` runs it in the test driver, no broker.
//!
//! ```text
//! eval "$(dev/stack env)"
//! cargo run --example dsl_dedup
//! ```
//!
//! It creates its input and output when they are missing; the instance creates the internal
//! topics when it starts (the repartition topic, the store's changelog, retry levels and DLTs).
//! Copies sent with the same message id are dropped by the runtime's dedup before this; this
//! drops copies with different message ids, e.g. an event sent again by its producer.

#[cfg(test)]
mod tests;

use std::time::Duration;

use eosflow::dsl::{
    Consumed, Grouped, ProcessorContext, Produced, Stores, StreamProcessor, StreamsBuilder,
};
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::KafkaClients;
use eosflow::processor::{ProcessError, StoreHandle, Timer};
use eosflow::serdes::{I64Serde, JsonSerde, StringSerde};
use eosflow::topology::{Topology, TopologyError, TypedRecord};

/// Input: any key, value = an [`Event`] as JSON.
const EVENTS: &str = "dsl-dedup.events";
/// Output: key = event id, value = the first [`Event`] of its id in each TTL.
const UNIQUE: &str = "dsl-dedup.unique";
/// How long after an id passed its copies are dropped (event time).
const TTL_MS: i64 = 10 * 60_000;
/// How far behind stream time an event may be and still be checked.
const GRACE_MS: i64 = 60_000;

/// One event; `event_id` is its business key.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Event {
    event_id: String,
    body: String,
}

/// events → checked → re-keyed by event id → copies within the TTL dropped → unique.
fn topology() -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new();
    let seen = StoreHandle::new("seen-event-ids", StringSerde, I64Serde);
    builder
        .stream(EVENTS, Consumed::with(StringSerde, JsonSerde::new()))
        .try_map(|_, event: &Event| match event.event_id.is_empty() {
            true => Err(ProcessError::permanent("an event needs an event_id")),
            false => Ok((event.event_id.clone(), event.clone())),
        })
        .repartition(Grouped::with(StringSerde, JsonSerde::new()).named("events-by-id"))
        .process(DropCopies(seen.clone()), Stores::new().store(&seen))
        .to(UNIQUE, Produced::with(StringSerde, JsonSerde::new()));
    builder.build()
}

/// Forwards an event unless its id passed less than [`TTL_MS`] before it. Its state is the
/// store it holds the handle of (event id → when it last passed), each id purged by a timer.
struct DropCopies(StoreHandle<String, i64>);

type Ctx<'c, 'n, 'a> = ProcessorContext<'c, 'n, 'a, String, Event>;
type Done = Result<(), ProcessError>;

impl StreamProcessor<String, Event, String, Event> for DropCopies {
    fn process(&mut self, ctx: &mut Ctx, r: TypedRecord<String, Event>) -> Done {
        let (Some(id), Some(at)) = (r.key.clone(), ctx.event_time_ms()) else {
            return Ok(());
        };
        if at + GRACE_MS < ctx.stream_time_ms().unwrap_or(at) {
            return ctx.dead_letter_late(format!("{id} at {at}: its id may be forgotten"));
        }
        let passed = ctx.store(&self.0)?.get(&id)?;
        if passed.is_some_and(|passed| at < passed + TTL_MS) {
            return Ok(()); // a copy within the TTL
        }
        ctx.store(&self.0)?.put(&id, &at)?;
        ctx.schedule_event_time(id.as_bytes(), at + TTL_MS + GRACE_MS)?;
        ctx.forward(r);
        Ok(())
    }

    fn on_timer(&mut self, ctx: &mut Ctx, timer: &Timer) -> Done {
        let id = String::from_utf8_lossy(&timer.key).into_owned();
        ctx.store(&self.0)?.delete(&id)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    eosflow::init_logging();
    let mut config = eosflow::Config::load(None)?;
    config.app.id = "dsl-dedup".into();
    let topology = topology()?;
    // The input and output are ours; `run` creates the internal topics.
    let ours = [
        TopicSpec::new(EVENTS, 4, "delete"),
        TopicSpec::new(UNIQUE, 4, "delete"),
    ];
    let clients = KafkaClients::new(config.kafka.clone());
    topics::apply_blocking(&clients, &ours, Duration::from_secs(30))?;
    let summary = eosflow::run(&config, topology)?;
    println!("stopped after {} records", summary.records);
    Ok(())
}
