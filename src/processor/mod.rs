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

/// The headers of a dead letter that a processor writes itself, with [`Context::emit`] in its
/// own transaction: `record`'s own headers plus the `eosflow.dlt.*` headers the runtime writes
/// on a record it dead-letters (original topic, partition and offset, `group`, the error's
/// class and message, attempts, failure times at `now_ms`), so `eosflow dlt list` and redrive
/// read it like any other. For a handler that sends a record to a dead-letter topic without
/// failing the call (a saga's reply that arrives for no pending step); a handler that fails
/// returns its [`ProcessError`] and the runtime dead-letters the record.
///
/// ```
/// use eosflow::kafka::topics::dlt_topic;
/// use eosflow::processor::{dead_letter_headers, ProcessError, Record};
///
/// let r = Record { topic: "replies", partition: 3, offset: 42, timestamp: None, key: None, value: None, headers: &[] };
/// let err = ProcessError::permanent("no pending step");
/// let h = dead_letter_headers(&r, "orders", &err, 1_000);
/// let get = |k: &str| h.iter().find(|(n, _)| n == k).map(|(_, v)| String::from_utf8_lossy(v).to_string());
/// assert_eq!(get("eosflow.dlt.original.offset").as_deref(), Some("42"));
/// assert_eq!(get("eosflow.dlt.error.class").as_deref(), Some("permanent"));
/// assert_eq!(get("eosflow.dlt.error.message").as_deref(), Some("no pending step"));
/// assert_eq!(dlt_topic(r.topic), "replies.DLT");
/// ```
pub fn dead_letter_headers(
    record: &Record<'_>,
    group: &str,
    err: &ProcessError,
    now_ms: i64,
) -> Vec<(String, Vec<u8>)> {
    use crate::retry::{dlt, headers::History};
    dlt::headers(
        record,
        &History::of(record),
        group,
        dlt::DltClass::of(err),
        Some(err),
        now_ms,
    )
}
