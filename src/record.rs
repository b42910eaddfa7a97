//! The records every layer shares: an input [`Record`], an output [`Emit`], and the typed
//! failure [`ProcessError`] that decides between the retry ladder and the dead-letter topic.
//!
//! They live here, below every other module, so that `codec`, `retry`, `state` and
//! `processor` can all name them without importing one another.

/// One input record, borrowed from the batch.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Topic it was read from (an input or one of its retry levels).
    pub topic: &'a str,
    /// Partition: also names the state store the handler sees.
    pub partition: i32,
    /// Offset in `topic[partition]`.
    pub offset: i64,
    /// Producer or log-append time, in ms since the epoch.
    pub timestamp: Option<i64>,
    /// The aggregate id.
    pub key: Option<&'a [u8]>,
    /// The payload; `None` is a tombstone.
    pub value: Option<&'a [u8]>,
    /// Kafka headers in order.
    pub headers: &'a [(String, Vec<u8>)],
}

impl Record<'_> {
    /// First header named `name`.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// A record the handler asks to produce in the batch's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emit {
    /// Destination topic.
    pub topic: String,
    /// Key (partitioned with murmur2, as Java clients do).
    pub key: Option<Vec<u8>>,
    /// Value; `None` produces a tombstone.
    pub value: Option<Vec<u8>>,
    /// Headers.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Kafka timestamp (ms since the epoch); `None` takes the event time of what caused the
    /// output (the input record's, or a firing timer's due time).
    pub timestamp: Option<i64>,
}

/// How a handler failed: decides between retrying and dead-lettering.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessError {
    /// Retrying later may succeed (a dependency is down, a timeout).
    #[error("transient: {0}")]
    Transient(String),
    /// Retrying cannot help (bad input, impossible transition, a panic).
    #[error("permanent: {0}")]
    Permanent(String),
}

impl ProcessError {
    /// A failure retrying cannot fix.
    pub fn permanent(e: impl std::fmt::Display) -> Self {
        Self::Permanent(e.to_string())
    }
    /// A failure retrying may fix.
    pub fn transient(e: impl std::fmt::Display) -> Self {
        Self::Transient(e.to_string())
    }
    /// `permanent` or `transient`, as written in DLT headers.
    pub fn class(&self) -> &'static str {
        match self {
            Self::Transient(_) => "transient",
            Self::Permanent(_) => "permanent",
        }
    }
    /// The message without the class prefix.
    pub fn message(&self) -> &str {
        match self {
            Self::Transient(m) | Self::Permanent(m) => m,
        }
    }
}
