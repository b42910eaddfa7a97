//! The handler-facing types: records in, state and emits through the context, typed failures out.

use super::stores::{layered_get, KeyValueStore, StoreHandle, StoreView};
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

    /// The named stores the handler opens with [`Context::store`], beside the default one:
    /// each gets its own RocksDB store per partition and changelog `<app>-<name>-changelog`.
    fn stores(&self) -> Vec<String> {
        Vec::new()
    }

    /// The input topics, when the processor knows them (a [`crate::topology::Topology`]
    /// does); `None` takes `processor.input_topics` from the configuration.
    fn input_topics(&self) -> Option<Vec<String>> {
        None
    }
}

/// The handler's view of its partition during one call.
pub struct Context<'a> {
    store: &'a Store,
    batch: &'a Overlay,
    pending: Overlay,
    emits: Vec<Emit>,
    message_id: Option<&'a [u8]>,
    named: Vec<StoreView<'a>>,
    wall_clock_ms: i64,
}

impl<'a> Context<'a> {
    pub(crate) fn new(store: &'a Store, batch: &'a Overlay, message_id: Option<&'a [u8]>) -> Self {
        Self {
            store,
            batch,
            pending: Overlay::default(),
            emits: Vec::new(),
            message_id,
            named: Vec::new(),
            wall_clock_ms: 0,
        }
    }

    /// Adds the named stores of the record's partition and the batch's wall-clock time.
    pub(crate) fn with(mut self, named: Vec<StoreView<'a>>, wall_clock_ms: i64) -> Self {
        self.named = named;
        self.wall_clock_ms = wall_clock_ms;
        self
    }

    /// Reads state: this call's writes, then the open batch's, then the committed store.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ProcessError> {
        layered_get(&self.pending, self.batch, self.store, Column::State, key)
    }

    /// Opens the named store `handle` names, typed by its serdes. Fails (permanently) when the
    /// processor did not list the store in [`Processor::stores`].
    pub fn store<'c, K, V>(
        &'c mut self,
        handle: &'c StoreHandle<K, V>,
    ) -> Result<KeyValueStore<'c, 'a, K, V>, ProcessError> {
        let view = self
            .named
            .iter_mut()
            .find(|v| v.name == handle.name())
            .ok_or_else(|| {
                ProcessError::permanent(format!(
                    "store {} is not attached to this processor (list it in Processor::stores or Topology::add_state_store)",
                    handle.name()
                ))
            })?;
        Ok(KeyValueStore::new(view, handle))
    }

    /// The wall-clock time of the batch (ms since the epoch): the runtime's clock, or the test
    /// driver's, which only moves when the test advances it.
    pub fn wall_clock_ms(&self) -> i64 {
        self.wall_clock_ms
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

    /// The call's writes (default store, then each named store in order) and emits.
    pub(crate) fn into_parts(self) -> (Overlay, Vec<Overlay>, Vec<Emit>) {
        let named = self.named.into_iter().map(|v| v.pending).collect();
        (self.pending, named, self.emits)
    }
}
