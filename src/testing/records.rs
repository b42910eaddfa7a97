//! The records a test pipes into a [`super::TopologyTestDriver`] and reads back out of it.

use crate::retry::{dlt, headers as rh};

/// A record to pipe in: topic, partition (0 unless set), key, value, headers and timestamp
/// (the driver's wall clock unless set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRecord {
    /// Input topic (or one of its retry levels).
    pub topic: String,
    /// Partition: the task, and so the stores, that handle it.
    pub partition: i32,
    /// Key bytes.
    pub key: Option<Vec<u8>>,
    /// Value bytes; `None` is a tombstone.
    pub value: Option<Vec<u8>>,
    /// Kafka headers in order (`id` is what dedup remembers by default).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Record timestamp (ms); `None` takes the driver's wall clock.
    pub timestamp: Option<i64>,
}

impl TestRecord {
    /// A record of `key` and `value` for `topic`, partition 0, without headers.
    pub fn new(
        topic: impl Into<String>,
        key: Option<impl Into<Vec<u8>>>,
        value: Option<impl Into<Vec<u8>>>,
    ) -> Self {
        Self {
            topic: topic.into(),
            partition: 0,
            key: key.map(Into::into),
            value: value.map(Into::into),
            headers: Vec::new(),
            timestamp: None,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    /// Sets the `id` header dedup remembers.
    pub fn id(self, id: &str) -> Self {
        self.header("id", id)
    }

    /// Sets the partition.
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = partition;
        self
    }

    /// Sets the timestamp (ms).
    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp = Some(ms);
        self
    }
}

/// A record the topology wrote: an output, a retry-level forward or a dead letter, with every
/// header the runtime would have written (envelope, `eosflow.retry.*`, `eosflow.dlt.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputRecord {
    /// Topic written.
    pub topic: String,
    /// Partition, when the runtime names one (forwards go to the input's partition).
    pub partition: Option<i32>,
    /// Kafka timestamp the runtime would set: the event time of the record (or the due time
    /// of the timer) that caused it; `None` leaves it to the producer's clock.
    pub timestamp: Option<i64>,
    /// Key bytes.
    pub key: Option<Vec<u8>>,
    /// Value bytes.
    pub value: Option<Vec<u8>>,
    /// Headers in order.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl OutputRecord {
    /// The first header named `name`, as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// The key as text (lossy), empty without one.
    pub fn key_text(&self) -> String {
        String::from_utf8_lossy(self.key.as_deref().unwrap_or_default()).to_string()
    }

    /// The value as text (lossy), empty for a tombstone.
    pub fn value_text(&self) -> String {
        String::from_utf8_lossy(self.value.as_deref().unwrap_or_default()).to_string()
    }

    /// A dead letter's class (`permanent`, `transient-exhausted`, `id-conflict` …).
    pub fn dlt_class(&self) -> Option<&str> {
        self.header(&format!("{}error.class", dlt::PREFIX))
    }

    /// A dead letter's reason: the handler's error message.
    pub fn dlt_reason(&self) -> Option<&str> {
        self.header(&format!("{}error.message", dlt::PREFIX))
    }

    /// A retry forward's attempt number (the ladder level it went to).
    pub fn retry_attempt(&self) -> Option<u32> {
        self.header(rh::ATTEMPT)?.parse().ok()
    }

    /// When a retry forward is due (ms).
    pub fn due_at(&self) -> Option<i64> {
        self.header(rh::DUE_AT)?.parse().ok()
    }
}
