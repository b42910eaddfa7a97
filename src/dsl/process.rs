//! [`KStream::process`]: dropping from the DSL into a node of the processor API, typed in and
//! out, with the stores it reads and writes attached.

use super::builder::AddFn;
use super::stream::KStream;
use super::table::KTable;
use super::Data;
use crate::processor::StoreHandle;
use crate::topology::windows::WindowStoreHandle;
pub use crate::topology::{ProcessorContext, StreamProcessor};
use crate::topology::{TableHandle, TopologyBuilder};

/// Attaches one store to a node, by the node's final name.
type AttachOne = Box<dyn FnOnce(&mut TopologyBuilder, &str) + Send>;

/// The stores a [`KStream::process`] node reads and writes (Kafka Streams'
/// `process(supplier, storeNames…)` with `addStateStore`): each key-value or windowed store
/// is created for it — a RocksDB store per partition with its changelog
/// `<application id>-<name>-changelog` — and a table read from a topic is attached
/// read-only. A store belongs to one node: giving it to two fails at build.
#[derive(Default)]
pub struct Stores {
    attach: Vec<AttachOne>,
    names: Vec<String>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("names", &self.names)
            .finish()
    }
}

impl Stores {
    /// No stores.
    pub fn new() -> Self {
        Self::default()
    }

    /// A key-value store, opened in the node with [`ProcessorContext::store`].
    pub fn store<K: 'static, V: 'static>(mut self, handle: &StoreHandle<K, V>) -> Self {
        let handle = handle.clone();
        self.names.push(handle.name().to_string());
        self.attach.push(Box::new(move |b, node| {
            b.add_state_store(&handle, &[node]);
        }));
        self
    }

    /// A windowed store, opened in the node with [`ProcessorContext::window_store`].
    pub fn window_store<K: 'static, V: 'static>(
        mut self,
        handle: &WindowStoreHandle<K, V>,
    ) -> Self {
        let handle = handle.clone();
        self.names.push(handle.name().to_string());
        self.attach.push(Box::new(move |b, node| {
            b.add_window_store(&handle, &[node]);
        }));
        self
    }

    /// A table read from a topic ([`super::StreamsBuilder::table`]), read-only, opened with
    /// [`ProcessorContext::store`]`(table.store().store())`.
    pub fn table<K: 'static, V: 'static>(
        mut self,
        table: &KTable<'_, K, V, TableHandle<K, V>>,
    ) -> Self {
        let handle = table.store.clone();
        self.names.push(handle.name().to_string());
        self.attach.push(Box::new(move |b, node| {
            b.attach_table(&handle, &[node]);
        }));
        self
    }
}

impl<'b, K: Data, V: Data> KStream<'b, K, V> {
    /// Drops into the processor API (Kafka Streams' `process`): `processor` handles each
    /// record with the `stores` attached to its node, and what it forwards is the returned
    /// stream of `(K2, V2)`. For what the DSL has no operation for: timers, state read and
    /// written by hand, several outputs per record.
    ///
    /// The processor may change the key, so grouping or joining its output by key needs a
    /// repartition first ([`super::StreamsBuilder::build`] says so otherwise).
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, ProcessorContext, Produced, Stores, StreamsBuilder};
    /// use eosflow::processor::{ProcessError, StoreHandle};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    /// use eosflow::topology::TypedRecord;
    ///
    /// // Each payment's amount, forwarded only when it is a new maximum for its account.
    /// let best = StoreHandle::new("best", StringSerde, I64Serde);
    /// let store = best.clone();
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("payments", Consumed::with(StringSerde, I64Serde))
    ///     .process(
    ///         move |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>, r: TypedRecord<String, i64>| {
    ///             let (Some(account), Some(amount)) = (&r.key, r.value) else { return Ok(()) };
    ///             let mut s = ctx.store(&store)?;
    ///             if s.get(account)?.is_some_and(|max| max >= amount) {
    ///                 return Ok(());
    ///             }
    ///             s.put(account, &amount)?;
    ///             ctx.forward(r);
    ///             Ok::<(), ProcessError>(())
    ///         },
    ///         Stores::new().store(&best),
    ///     )
    ///     .to("new-maxima", Produced::with(StringSerde, I64Serde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// for amount in [5, 3, 9] {
    ///     driver.pipe_input("payments", &StringSerde, &I64Serde, &"acc".to_string(), &amount)?;
    /// }
    /// let out = driver.read_output("new-maxima", &StringSerde, &I64Serde)?;
    /// assert_eq!(out, vec![(Some("acc".into()), Some(5)), (Some("acc".into()), Some(9))]);
    /// assert_eq!(driver.store_get(&best, &"acc".to_string())?, Some(9));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn process<K2: Data, V2: Data>(
        &self,
        processor: impl StreamProcessor<K, V, K2, V2> + 'static,
        stores: Stores,
    ) -> KStream<'b, K2, V2> {
        let add: AddFn = Box::new(move |b, w| {
            b.add_processor(w.name, processor, &w.parents);
            for attach in stores.attach {
                attach(b, w.name);
            }
        });
        let id = self
            .builder
            .push("KSTREAM-PROCESSOR-", None, vec![self.id], add);
        KStream::new(self.builder, id, true)
    }
}
