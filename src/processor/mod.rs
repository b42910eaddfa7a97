//! The Processor API (what users implement); the exactly-once runtime that drives it is internal.
//!
//! A [`Processor`] sees one [`Record`] at a time with a [`Context`] giving read-your-writes
//! access to the state of the record's partition and a way to emit records. Everything a call
//! does — state writes, emitted records, the dedup mark — commits in one Kafka transaction with
//! the record's input offset, or not at all.
//!
//! A [`Processor`] is only what handles records and timers (`init`, `process`, `on_timer`,
//! `close`); what it runs with — its stores, tables, message id, ordering and event time — is
//! declared beside it in a [`ProcessorSpec`]. [`crate::run`] and the test driver take any
//! [`Application`]: a processor alone (the default wiring), a [`ProcessorSpec`] or a
//! [`crate::topology::Topology`].

mod align;
mod api;
pub(crate) mod config;
pub(crate) mod engine;
mod expiry;
mod fire;
mod globals;
mod handle;
mod purge;
pub(crate) mod runtime;
mod spec;
pub(crate) mod standby;
pub(crate) mod stores;
pub(crate) mod threads;
pub(crate) mod timers;
#[cfg(test)]
mod timers_tests;
mod watermarks;

pub(crate) use api::DeadLetterRequest;
pub use api::{Application, Context, Emit, ProcessError, Processor, Record};
pub use expiry::MAX_EXPIRED_PER_BATCH;
pub use fire::{TIMER_CALL_ATTEMPTS, TIMER_RETRY_BACKOFF_MS};
pub use runtime::{RunSummary, RuntimeError};
pub use spec::ProcessorSpec;
pub use stores::{AsOf, Entries, KeyValueStore, StoreHandle, TtlClock, TtlError, MAX_TTL};
pub(crate) use threads::ProcessorThreads;
pub use timers::{Timer, TimerKind};
