//! [`CogroupedKStream`]: several grouped streams, each with its own aggregator, folded into
//! one aggregate per key (Kafka Streams' `cogroup`).

use std::sync::Arc;

use super::builder::{AddFn, StreamsBuilder};
use super::group::KGroupedStream;
use super::options::Materialized;
use super::stream::KStream;
use super::table::KTable;
use super::Data;
use crate::processor::StoreHandle;
use crate::record::ProcessError;
use crate::topology::{NodeContext, TypedRecord};

/// The initializer shared by every input of a cogroup.
type Init<A> = Arc<dyn Fn() -> A + Send + Sync>;

/// Adds one input's aggregation node over the shared store (named so when the cogroup is
/// named); its step id. It borrows nothing, so a cogroup kept alive does not hold the builder
/// borrowed past its last use.
type AddInput<K, A> =
    Box<dyn for<'x> Fn(&'x StreamsBuilder, &StoreHandle<K, A>, &Init<A>, Option<String>) -> usize>;

/// Grouped streams aggregated together (Kafka Streams' `CogroupedKStream<K, A>`): made by
/// [`KGroupedStream::cogroup`], extended by [`CogroupedKStream::cogroup`], turned into a
/// table of one aggregate per key by [`CogroupedKStream::aggregate`].
///
/// Each input has an aggregator of its own value type; all fold into one store. Each input is
/// one node (`COGROUPKSTREAM-AGGREGATE-…`) that reads the key's aggregate, folds its record in
/// and writes it back in the record's transaction; a merge node (`COGROUPKSTREAM-MERGE-…`)
/// forwards every new aggregate. The shared store puts every input in one sub-topology, so the
/// inputs must be co-partitioned (keyed alike, the same partition count) — group a re-keyed
/// stream with [`KStream::group_by`] first, as in Kafka Streams.
pub struct CogroupedKStream<'b, K, A> {
    builder: &'b StreamsBuilder,
    inputs: Vec<AddInput<K, A>>,
    name: Option<String>,
}

impl<K, A> std::fmt::Debug for CogroupedKStream<'_, K, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CogroupedKStream")
            .field("inputs", &self.inputs.len())
            .field("name", &self.name)
            .finish()
    }
}

impl<'b, K: Data, A: Data> CogroupedKStream<'b, K, A> {
    /// A cogroup of `grouped` alone, folded with `aggregator`.
    pub(crate) fn new<V: Data>(
        grouped: KStream<'b, K, V>,
        aggregator: impl Fn(&K, &V, A) -> A + Send + Sync + 'static,
    ) -> Self {
        let mut cogrouped = Self {
            builder: grouped.builder,
            inputs: Vec::new(),
            name: None,
        };
        cogrouped.push(grouped, aggregator);
        cogrouped
    }

    fn push<V: Data>(
        &mut self,
        stream: KStream<'b, K, V>,
        aggregator: impl Fn(&K, &V, A) -> A + Send + Sync + 'static,
    ) {
        if !std::ptr::eq(self.builder, stream.builder) {
            self.builder.error(format!(
                "cogroup of {}, a stream of another StreamsBuilder",
                stream.name()
            ));
        }
        let aggregator = Arc::new(aggregator);
        let (input, rekeyed) = (stream.id, stream.rekeyed);
        let add: AddInput<K, A> = Box::new(move |builder, store, init, name| {
            let stream = KStream::<K, V>::new(builder, input, rekeyed);
            let (handle, init, aggregator) = (store.clone(), init.clone(), aggregator.clone());
            let node = stream.then(
                "COGROUPKSTREAM-AGGREGATE-",
                false,
                move |ctx: &mut NodeContext<'_, '_>, r: TypedRecord<K, V>, out| {
                    let (Some(key), Some(value)) = (&r.key, &r.value) else {
                        return Err(ProcessError::permanent(format!(
                            "{} aggregates into store {} by key: a record without a key or a value cannot be aggregated",
                            ctx.node_name(),
                            handle.name()
                        )));
                    };
                    let mut s = ctx.store(&handle)?;
                    let agg = aggregator(key, value, s.get(key)?.unwrap_or_else(|| init()));
                    s.put(key, &agg)?;
                    out.push(TypedRecord {
                        key: r.key,
                        value: Some(agg),
                        timestamp: r.timestamp,
                        headers: r.headers,
                    });
                    Ok(())
                },
                None,
            );
            if let Some(name) = name {
                node.named(name);
            }
            node.id
        });
        self.inputs.push(add);
    }

    /// Adds `grouped` with its own `aggregator` (Kafka Streams' `cogroup(groupedStream,
    /// aggregator)`): its records fold into the same aggregate as the others'.
    pub fn cogroup<V: Data>(
        mut self,
        grouped: &KGroupedStream<'b, K, V>,
        aggregator: impl Fn(&K, &V, A) -> A + Send + Sync + 'static,
    ) -> Self {
        self.push(grouped.stream(), aggregator);
        self
    }

    /// Names the nodes (Kafka Streams' `Named` of `aggregate`): `<name>-cogroup-agg-<i>` for
    /// the `i`-th input's and `<name>-cogroup-merge` for the merge node.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The table of each key's aggregate (Kafka Streams' `aggregate(initializer,
    /// Materialized)`): `init()` for a key's first record, then the aggregator of the input the
    /// record came from; every new aggregate is forwarded. Called twice, it makes two
    /// independent tables (two stores, each input read by both).
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, JsonSerde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// // Per customer: how many orders and how much refunded, from two topics of other types.
    /// let builder = StreamsBuilder::new();
    /// let orders = builder.stream("orders", Consumed::with(StringSerde, StringSerde)).group_by_key();
    /// let refunds = builder.stream("refunds", Consumed::with(StringSerde, I64Serde)).group_by_key();
    /// let summary = orders
    ///     .cogroup(|_, _order: &String, (n, refunded): (i64, i64)| (n + 1, refunded))
    ///     .cogroup(&refunds, |_, amount: &i64, (n, refunded)| (n, refunded + amount))
    ///     .aggregate(|| (0, 0), Materialized::with(StringSerde, JsonSerde::new()).named("summary"));
    /// let store = summary.store().clone();
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// let ann = "ann".to_string();
    /// driver.pipe_input("orders", &StringSerde, &StringSerde, &ann, &"o-1".to_string())?;
    /// driver.pipe_input("refunds", &StringSerde, &I64Serde, &ann, &15)?;
    /// driver.pipe_input("orders", &StringSerde, &StringSerde, &ann, &"o-2".to_string())?;
    /// assert_eq!(driver.store_get(&store, &ann)?, Some((2, 15)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn aggregate(
        &self,
        init: impl Fn() -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
    ) -> KTable<'b, K, A> {
        let (builder, name) = (self.builder, self.name.as_ref());
        let (store, _) = materialized.key_value_store(builder, "COGROUPKSTREAM-AGGREGATE-");
        let init: Init<A> = Arc::new(init);
        let ids: Vec<usize> = self
            .inputs
            .iter()
            .enumerate()
            .map(|(i, add)| {
                let named = name.map(|n| format!("{n}-cogroup-agg-{i}"));
                add(builder, &store, &init, named)
            })
            .collect();
        let attached = store.clone();
        let add: AddFn = Box::new(move |b, w| {
            let merge = |ctx: &mut NodeContext<'_, '_>, r: TypedRecord<K, A>| {
                ctx.forward(r);
                Ok(())
            };
            b.add_node(w.name, merge, &w.parents);
            b.forwards::<K, A>(w.name);
            b.add_state_store(&attached, &w.parents);
        });
        let merge_name = name.map(|n| format!("{n}-cogroup-merge"));
        let id = builder.push("COGROUPKSTREAM-MERGE-", merge_name, ids, add);
        KTable::new(KStream::new(builder, id, false), store)
    }
}
