//! The handler-facing types: records in, state and emits through the context, typed failures out.

pub use crate::record::{Emit, ProcessError, Record};
use crate::state::{Column, Overlay, Store};

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
