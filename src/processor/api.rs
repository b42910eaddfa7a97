//! The handler-facing types: records in, state and emits through the context, typed failures out.

use crate::state::{Column, Overlay, Store};

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

/// What a handler implements. One instance serves every partition of the runtime; per-key
/// data belongs in the context's state, which moves with the partition.
pub trait Processor: Send {
    /// Handles one record. Returning an error (or panicking) discards this record's state writes
    /// and emits, and routes the record to its dead-letter topic in the same transaction.
    fn process(&mut self, ctx: &mut Context<'_>, record: &Record<'_>) -> Result<(), ProcessError>;

    /// The id dedup remembers: by default the `id` header; override to name a business key.
    /// `None` disables dedup for the record.
    fn message_id(&self, record: &Record<'_>) -> Option<Vec<u8>> {
        record.header("id").map(<[u8]>::to_vec)
    }

    /// Whether a key's later records must wait behind one in the retry ladder. Handlers whose
    /// records commute (idempotent upserts, counters) return `false` and skip the parked set.
    fn ordered(&self) -> bool {
        true
    }

    /// Names the store and so its changelog topic, `<app>-<store>-changelog`.
    fn store_name(&self) -> &str {
        "state"
    }
}

/// The handler's view of its partition during one call.
pub struct Context<'a> {
    store: &'a Store,
    batch: &'a Overlay,
    pending: Overlay,
    emits: Vec<Emit>,
    message_id: Option<&'a [u8]>,
}

impl<'a> Context<'a> {
    pub(crate) fn new(store: &'a Store, batch: &'a Overlay, message_id: Option<&'a [u8]>) -> Self {
        Self {
            store,
            batch,
            pending: Overlay::default(),
            emits: Vec::new(),
            message_id,
        }
    }

    /// Reads state: this call's writes, then the open batch's, then the committed store.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ProcessError> {
        if let Some(v) = self.pending.get(Column::State, key) {
            return Ok(v.map(<[u8]>::to_vec));
        }
        if let Some(v) = self.batch.get(Column::State, key) {
            return Ok(v.map(<[u8]>::to_vec));
        }
        self.store
            .get(Column::State, key)
            .map_err(|e| ProcessError::transient(format!("state read: {e}")))
    }

    /// Writes state (committed with the record's offset).
    pub fn put(&mut self, key: &[u8], value: Vec<u8>) {
        self.pending.put(Column::State, key, value);
    }

    /// Deletes state (a changelog tombstone).
    pub fn delete(&mut self, key: &[u8]) {
        self.pending.delete(Column::State, key);
    }

    /// Produces a record in the same transaction.
    pub fn emit(
        &mut self,
        topic: impl Into<String>,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        headers: Vec<(String, Vec<u8>)>,
    ) {
        self.emits.push(Emit {
            topic: topic.into(),
            key,
            value,
            headers,
        });
    }

    /// The id dedup uses for this record, if any.
    pub fn message_id(&self) -> Option<&[u8]> {
        self.message_id
    }

    pub(crate) fn into_parts(self) -> (Overlay, Vec<Emit>) {
        (self.pending, self.emits)
    }
}
