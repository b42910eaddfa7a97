//! The orders application's processors on `eosflow::testing::TopologyTestDriver`: no broker,
//! no registry, no Postgres. Records go in in the wire format the processors read in
//! production (the order service's JSON outbox events, or the Avro the outbox router encodes
//! with `payload_format = "avro"`, Confluent-framed with a schema id), and the tests assert what
//! a user of the application sees: the commands and events on each topic, the stores, the
//! dead letters with their reason and class, the retry ladder, dedup.
//!
//! - [`saga`] — the order processor and the fulfilment saga, alone and wired to the services;
//! - [`input`] — bad input, the registry down (retry ladder, parked followers), re-sent events;
//! - [`services`] — the stock and payment services and the customers read model;
//! - [`timeouts`] — saga timeouts: each step unanswered, late replies, replies in time;
//! - [`enrichment`] — the catalog global table stamped into the feed, the customer profiles
//!   table joined into the read model's view.

mod enrichment;
mod input;
mod saga;
mod services;
mod support;
mod timeouts;
