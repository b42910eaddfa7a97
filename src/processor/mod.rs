//! The Processor API (what users implement) and the exactly-once runtime that drives it.
//!
//! A [`Processor`] sees one [`Record`] at a time with a [`Context`] giving read-your-writes
//! access to the state of the record's partition and a way to emit records. Everything a call
//! does — state writes, emitted records, the dedup mark — commits in one Kafka transaction with
//! the record's input offset, or not at all.

mod align;
mod api;
pub mod config;
pub(crate) mod engine;
mod fire;
mod globals;
mod handle;
mod purge;
pub mod runtime;
pub mod standby;
pub mod stores;
pub mod threads;
pub mod timers;
mod watermarks;

pub(crate) use api::DeadLetterRequest;
pub use api::{Context, Emit, ProcessError, Processor, Record};
pub use fire::{TIMER_CALL_ATTEMPTS, TIMER_RETRY_BACKOFF_MS};
pub use runtime::{RunSummary, Runtime, RuntimeError, RuntimeOptions};
pub use stores::{AsOf, Entries, KeyValueStore, StoreHandle};
pub use threads::ProcessorThreads;
pub use timers::{Timer, TimerKind};
