//! Everything that talks to the broker: client settings, topic declarations and the admin API.
//!
//! The transactional producer and the group consumer are configured here so every part of
//! eosflow (processors, outbox router, verifier, tools) connects the same way.

pub(crate) mod client;
pub(crate) mod config;
pub(crate) mod describe;
pub(crate) mod reader;
pub mod topics;

pub use client::{ClientRole, ConnectError, KafkaClients};
