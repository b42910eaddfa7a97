//! Page-view sessions on the streams DSL (docs/dsl.md): page views come in on
//! `dsl-sessions.page-views` (key = user id, value = the page). A user's views less than 30
//! minutes apart in event time form one session (`windowed_by_session`); a view that bridges
//! two sessions merges them. When a session closes — its last view plus the 30-minute gap plus
//! 5 minutes of grace for out-of-order views, in stream time — its final result goes to
//! `dsl-sessions.sessions` as JSON, keyed by user id, once:
//! `{"user":"ann","start_ms":0,"end_ms":1500000,"views":3,"pages":["/cart","/home"]}`
//! (`pages`: the distinct pages, sorted; a view with an empty page counts as a view only). A view
//! later than its session's grace, without a user or without a value goes to
//! `dsl-sessions.page-views.DLT`. `tests.rs` runs it in the test driver, no broker.
//!
//! ```text
//! eval "$(dev/stack env)"
//! cargo run --example dsl_sessions
//! ```
//!
//! It creates its input and output when they are missing; the instance creates the internal
//! topics when it starts (the session store's changelog, retry levels and DLTs).

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::time::Duration;

use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::KafkaClients;
use eosflow::serdes::{JsonSerde, StringSerde};
use eosflow::topology::windows::{EmitStrategy, SessionWindows};
use eosflow::topology::{Topology, TopologyError};

/// Input: key = user id, value = the page viewed.
const VIEWS: &str = "dsl-sessions.page-views";
/// Output: key = user id, value = a closed [`Session`] as JSON.
const SESSIONS: &str = "dsl-sessions.sessions";
/// The inactivity that ends a session.
const GAP: Duration = Duration::from_secs(30 * 60);
/// How long after its gap a session still takes out-of-order views.
const GRACE: Duration = Duration::from_secs(5 * 60);

/// What a session holds while it is open (its store's value).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Views {
    views: i64,
    pages: BTreeSet<String>,
}

/// One closed session of one user.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Session {
    user: String,
    start_ms: i64,
    end_ms: i64,
    views: i64,
    /// The distinct pages, sorted (a JSON array).
    pages: BTreeSet<String>,
}

/// page views → grouped by user → session windows → one final result per session.
fn topology() -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new();
    builder
        .stream(VIEWS, Consumed::with(StringSerde, StringSerde))
        .group_by_key()
        .windowed_by_session(SessionWindows::with_inactivity_gap_and_grace(GAP, GRACE))
        .emit_strategy(EmitStrategy::OnWindowClose)
        .aggregate(
            Views::default,
            |_user, page: &String, mut s: Views| {
                s.views += 1;
                if !page.is_empty() {
                    s.pages.insert(page.clone());
                }
                s
            },
            |_user, a, b| Views {
                views: a.views + b.views,
                pages: &a.pages | &b.pages,
            },
            Materialized::with(StringSerde, JsonSerde::new()).named("user-sessions"),
        )
        .to_stream()
        .map(|w, s| {
            let (user, start_ms, end_ms) = w.map_or((String::new(), 0, 0), |w| {
                (w.key.clone(), w.window.start, w.window.end)
            });
            let session = Session {
                user: user.clone(),
                start_ms,
                end_ms,
                views: s.views,
                pages: s.pages.clone(),
            };
            (user, session)
        })
        .to(SESSIONS, Produced::with(StringSerde, JsonSerde::new()));
    builder.build()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    eosflow::init_logging();
    let mut config = eosflow::Config::load(None)?;
    config.app.id = "dsl-sessions".into();
    let topology = topology()?;
    // The input and output are ours; `run` creates the internal topics.
    let ours = [
        TopicSpec::new(VIEWS, 4, "delete"),
        TopicSpec::new(SESSIONS, 4, "delete"),
    ];
    let clients = KafkaClients::new(config.kafka.clone());
    topics::apply_blocking(&clients, &ours, Duration::from_secs(30))?;
    let summary = eosflow::run(&config, topology)?;
    println!("stopped after {} records", summary.records);
    Ok(())
}
