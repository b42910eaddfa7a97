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

impl<'m> Record<'m> {
    /// The polled message `m` as the record a processor sees, over its owned `headers` (on
    /// the hot path: inlined as it was beside the loop).
    #[inline]
    pub(crate) fn of_message(
        m: &'m rdkafka::message::OwnedMessage,
        headers: &'m [(String, Vec<u8>)],
    ) -> Self {
        use rdkafka::Message as _;
        Record {
            topic: m.topic(),
            partition: m.partition(),
            offset: m.offset(),
            timestamp: m.timestamp().to_millis(),
            key: m.key(),
            value: m.payload(),
            headers,
        }
    }
}

impl Record<'_> {
    /// First header named `name`.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }

    /// The input topic this record belongs to: [`Record::topic`] without a retry level's
    /// `.retry.<n>` suffix, so a handler that reads several inputs can tell them apart on any
    /// level of the ladder.
    ///
    /// ```
    /// use eosflow::record::Record;
    ///
    /// let r = Record { topic: "orders.retry.2", partition: 0, offset: 0, timestamp: None, key: None, value: None, headers: &[] };
    /// assert_eq!(r.base_topic(), "orders");
    /// assert_eq!(Record { topic: "orders", ..r }.base_topic(), "orders");
    /// ```
    pub fn base_topic(&self) -> &str {
        crate::retry::base_and_level(self.topic).0
    }

    /// The retry level the record was read from: 0 for the input topic itself, `n` for
    /// `<topic>.retry.<n>`.
    ///
    /// ```
    /// use eosflow::record::Record;
    ///
    /// let r = Record { topic: "orders.retry.2", partition: 0, offset: 0, timestamp: None, key: None, value: None, headers: &[] };
    /// assert_eq!(r.retry_level(), 2);
    /// assert_eq!(Record { topic: "orders", ..r }.retry_level(), 0);
    /// ```
    pub fn retry_level(&self) -> u32 {
        crate::retry::base_and_level(self.topic).1
    }

    /// Attempts made on this record before this one (its [`ATTEMPT_HEADER`]; 0 for a record
    /// never failed): what a handler that behaves differently on a retry reads.
    ///
    /// ```
    /// use eosflow::record::{Record, ATTEMPT_HEADER};
    ///
    /// let headers = vec![(ATTEMPT_HEADER.to_string(), b"2".to_vec())];
    /// let r = Record { topic: "orders.retry.2", partition: 0, offset: 0, timestamp: None, key: None, value: None, headers: &headers };
    /// assert_eq!(r.attempt(), 2);
    /// assert_eq!(Record { headers: &[], ..r }.attempt(), 0);
    /// ```
    pub fn attempt(&self) -> u32 {
        crate::retry::headers::int(self, ATTEMPT_HEADER)
            .unwrap_or(0)
            .max(0) as u32
    }
}

/// The header holding the attempts made on a record so far ([`Record::attempt`]): set by the
/// retry ladder on every forward, and by a test that builds a retried record.
pub use crate::retry::headers::ATTEMPT as ATTEMPT_HEADER;

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
