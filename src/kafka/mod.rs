//! Everything that talks to the broker: client settings, topic declarations and the admin API.
//!
//! The transactional producer and the group consumer are configured here so every part of
//! eosflow (processors, outbox router, verifier, tools) connects the same way.

pub(crate) mod client;
pub(crate) mod config;
pub(crate) mod describe;
pub(crate) mod reader;
pub mod seams;
pub mod topics;

pub use client::{ClientRole, ConnectError, KafkaClients};
/// Reading a whole topic's committed records, for an application's own checks and tools (the
/// orders application's summary reads its outputs and dead-letter topics with it).
pub use reader::{read_all, ReadError};
