//! Why a processing loop stopped.

use rdkafka::error::KafkaError;

use crate::sink::SinkError;
use crate::state::StateError;

/// Why the runtime stopped.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The consumer could not be created or subscribed.
    #[error("kafka consumer: {0}")]
    Consumer(#[from] KafkaError),
    /// The producer failed in a way that ends this instance.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// A store could not be opened, restored or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// The configuration cannot run a processor.
    #[error("configuration: {0}")]
    Config(String),
    /// Inputs, retry levels, dead-letter topic and changelog do not share one partition count,
    /// or the group assigned partition `p` of some of them without the others.
    #[error("not co-partitioned: {0}")]
    CoPartitioning(String),
    /// A global table's topic does not exist or cannot be read, or its store cannot be
    /// opened or written: the instance does not start.
    #[error("global table {table:?} (topic {topic:?}): {message}")]
    GlobalTable {
        /// The table's name.
        table: String,
        /// Its topic.
        topic: String,
        /// What went wrong.
        message: String,
    },
    /// A live process with this instance's id took over: this one stops (recreating the
    /// producer would fence the successor).
    #[error("fenced: transactional.id {id} is now used by another instance: {reason}")]
    Superseded {
        /// Our transactional.id.
        id: String,
        /// The evidence.
        reason: String,
    },
}
