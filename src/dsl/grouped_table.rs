//! [`KGroupedTable`]: a table re-grouped by a new key ([`KTable::group_by`]) and its
//! aggregations with an adder and a subtractor — Kafka Streams' `KTableRepartitionMap`,
//! `KTableAggregate` and `KTableReduce`.
//!
//! A table row belongs to one group at a time. When the row changes, its old value leaves its
//! old group (the subtractor) and its new value joins its new group (the adder): the select
//! node sends the pair through the repartition topic `<app>-<name>-repartition` as one record
//! (the same group: subtract then add in one step, one result) or two (the old group's
//! subtraction first). The old value is the one the select node kept for the key in its own
//! store `<name>-rows` (changelogged): the table's updates carry only new values, and a table
//! read from a topic has no store that still holds the old one when its update arrives. The
//! store write and the repartition records are in the transaction of the table update that
//! caused them, and the group's aggregate in the transaction of the repartition record: a
//! crash replays neither twice, and loses neither.

use std::sync::Arc;

use super::builder::StreamsBuilder;
use super::join::JoinableTable;
use super::options::{Grouped, Materialized};
use super::stream::KStream;
use super::table::KTable;
use super::Data;
use crate::processor::StoreHandle;
use crate::record::ProcessError;
use crate::serdes::{Serde, SerdeError};
use crate::topology::TypedRecord;

/// A row's move between groups, the value of a repartition record of a [`KGroupedTable`]:
/// the value to subtract from the record key's group, and the value to add to it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Change<V> {
    pub(crate) old: Option<V>,
    pub(crate) new: Option<V>,
}

/// Writes a [`Change`] as a flags byte (1: an old value, 2: a new value), the old value's
/// length (4 bytes, big-endian) and bytes if any, then the new value's bytes.
pub(crate) struct ChangeSerde<V>(pub(crate) Arc<dyn Serde<V>>);

impl<V> Serde<Change<V>> for ChangeSerde<V> {
    fn serialize(&self, change: &Change<V>) -> Result<Vec<u8>, SerdeError> {
        let flags = u8::from(change.old.is_some()) | (u8::from(change.new.is_some()) << 1);
        let mut bytes = vec![flags];
        if let Some(old) = &change.old {
            let old = self.0.serialize(old)?;
            let len = u32::try_from(old.len())
                .map_err(|_| SerdeError::new("a grouped table's old value is over 4 GiB"))?;
            bytes.extend_from_slice(&len.to_be_bytes());
            bytes.extend_from_slice(&old);
        }
        if let Some(new) = &change.new {
            bytes.extend_from_slice(&self.0.serialize(new)?);
        }
        Ok(bytes)
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<Change<V>, SerdeError> {
        let bad = |what: &str| SerdeError::new(format!("a grouped table's change: {what}"));
        let (&flags, mut rest) = bytes.split_first().ok_or_else(|| bad("empty"))?;
        if flags > 3 {
            return Err(bad("unknown flags"));
        }
        let old = if flags & 1 == 1 {
            let (len, after) = rest.split_at_checked(4).ok_or_else(|| bad("truncated"))?;
            let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
            let (old, after) = after
                .split_at_checked(len)
                .ok_or_else(|| bad("truncated"))?;
            rest = after;
            Some(self.0.deserialize(old)?)
        } else {
            None
        };
        let new = if flags & 2 == 2 {
            Some(self.0.deserialize(rest)?)
        } else if rest.is_empty() {
            None
        } else {
            return Err(bad("bytes after the old value"));
        };
        Ok(Change { old, new })
    }
}

/// Adds the select node and the repartition of a [`KGroupedTable`] under the given
/// repartition name; the step of its repartition records, keyed by group. It borrows nothing:
/// a grouped table kept alive does not hold the builder borrowed past its last use.
type Regroup = Box<dyn for<'x> Fn(&'x StreamsBuilder, String) -> usize>;

/// A table grouped by a new key, ready to be aggregated (Kafka Streams' `KGroupedTable<K, V>`):
/// made by [`KTable::group_by`]. Each row of the table is in the group its selector gives
/// (or in none); [`KGroupedTable::count`], [`KGroupedTable::reduce`] and
/// [`KGroupedTable::aggregate`] keep one aggregate per group that follows the table: when a
/// row changes, its old value is subtracted from its old group and its new value added to its
/// new group (see the module docs for how, exactly once).
///
/// The nodes are added by the aggregation: the select node (`KTABLE-SELECT-…`), the
/// repartition topic `<app>-<name>-repartition` — `name` is [`Grouped::named`]'s, else the
/// aggregation's store name, as in Kafka Streams — and the aggregation node. The select node
/// keeps each table row's last value in the store `<name>-rows`, changelogged. Several
/// aggregations of one named grouped table share its select node and repartition topic;
/// unnamed, each has its own.
pub struct KGroupedTable<'b, K, V> {
    builder: &'b StreamsBuilder,
    name: Option<String>,
    regroup: Regroup,
    /// The repartition of a named grouped table, once an aggregation made it: the table's
    /// other aggregations read it too (Kafka Streams reuses a named repartition; unnamed, each
    /// aggregation has its own, named after its store).
    shared: std::cell::Cell<Option<usize>>,
    _types: super::builder::Types<K, V>,
}

impl<K, V> std::fmt::Debug for KGroupedTable<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KGroupedTable")
            .field("name", &self.name)
            .finish()
    }
}

/// The adder or the subtractor of a grouped table's aggregation: the group's new aggregate
/// from its key, a row's value and the aggregate so far.
type Step<K, V, A> = Arc<dyn Fn(&K, &V, A) -> Result<A, ProcessError> + Send + Sync>;

/// A group's aggregate from its first value.
type First<K, V, A> = Arc<dyn Fn(&K, &V) -> Result<A, ProcessError> + Send + Sync>;

impl<'b, K: Data, V: Data> KGroupedTable<'b, K, V> {
    /// The grouped table of `table` (a table step with `store`'s rows), regrouped by
    /// `selector`.
    pub(crate) fn new<K0: Data, V0: Data, S: JoinableTable<K0, V0>>(
        table: &KTable<'b, K0, V0, S>,
        selector: impl Fn(&K0, &V0) -> Option<(K, V)> + Send + Sync + 'static,
        grouped: Grouped<K, V>,
    ) -> Self {
        let builder = table.stream.builder;
        let what = format!("group_by of table {}", table.name());
        table.store.prepare_join(builder, table.stream.id, &what);
        let (row_keys, row_values) = table.store.row_serdes();
        let Grouped { keys, values, name } = grouped;
        if let Some(name) = &name {
            super::options::check_name(builder, "repartition", name);
        }
        let selector = Arc::new(selector);
        let (parent, parent_rekeyed) = (table.stream.id, table.stream.rekeyed);
        let regroup: Regroup = Box::new(move |builder, repartition: String| {
            let stream = KStream::<K0, V0>::new(builder, parent, parent_rekeyed);
            let rows = StoreHandle::new(
                format!("{repartition}-rows"),
                row_keys.clone(),
                row_values.clone(),
            );
            let (attached, handle) = (rows.clone(), rows);
            let (selector, group_keys) = (selector.clone(), keys.clone());
            let select = stream.then(
                "KTABLE-SELECT-",
                true,
                move |ctx, r: TypedRecord<K0, V0>, out| {
                    let Some(key) = &r.key else {
                        return Err(ProcessError::permanent(format!(
                            "{} groups table rows: a row without a key cannot be grouped",
                            ctx.node_name()
                        )));
                    };
                    let old = {
                        let mut rows = ctx.store(&handle)?;
                        let old = rows.get(key)?;
                        match &r.value {
                            Some(v) => rows.put(key, v)?,
                            None if old.is_some() => rows.delete(key)?,
                            None => {}
                        }
                        old
                    };
                    let old = old.and_then(|v| selector(key, &v));
                    let new = r.value.as_ref().and_then(|v| selector(key, v));
                    let record = |group: K, change: Change<V>| TypedRecord {
                        key: Some(group),
                        value: Some(change),
                        timestamp: r.timestamp,
                        headers: r.headers.clone(),
                    };
                    let same_group = match (&old, &new) {
                        // Groups compare by their bytes, which place them in partitions.
                        (Some((a, _)), Some((b, _))) => {
                            let bytes = |k: &K| {
                                group_keys.serialize(k).map_err(|e| {
                                    ProcessError::permanent(format!(
                                        "{} group key: {e}",
                                        ctx.node_name()
                                    ))
                                })
                            };
                            bytes(a)? == bytes(b)?
                        }
                        _ => false,
                    };
                    match (old, new) {
                        (Some((group, old)), Some((_, new))) if same_group => out.push(record(
                            group,
                            Change {
                                old: Some(old),
                                new: Some(new),
                            },
                        )),
                        (old, new) => {
                            // The old group's subtraction first, as Kafka Streams.
                            if let Some((group, old)) = old {
                                out.push(record(
                                    group,
                                    Change {
                                        old: Some(old),
                                        new: None,
                                    },
                                ));
                            }
                            if let Some((group, new)) = new {
                                out.push(record(
                                    group,
                                    Change {
                                        old: None,
                                        new: Some(new),
                                    },
                                ));
                            }
                        }
                    }
                    Ok(())
                },
                Some(Box::new(move |b, node| {
                    b.add_state_store(&attached, &[node]);
                })),
            );
            let changes = Grouped {
                keys: keys.clone(),
                values: Arc::new(ChangeSerde(values.clone())) as Arc<dyn Serde<Change<V>>>,
                name: Some(repartition),
            };
            select
                .repartition_by(
                    "KTABLE-REPARTITION-",
                    |k: Option<&K>, _: &Change<V>| k.cloned(),
                    changes,
                )
                .id
        });
        Self {
            builder,
            name,
            regroup,
            shared: std::cell::Cell::new(None),
            _types: std::marker::PhantomData,
        }
    }

    /// How many rows each group has (Kafka Streams' `KGroupedTable.count`): a row counts in
    /// the group its current value selects; a row that moves or is deleted leaves its group,
    /// whose count goes down (to 0: the group stays, with 0).
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Grouped, Materialized, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// // Users per city, from the compacted `user-cities` topic (user → city).
    /// let builder = StreamsBuilder::new();
    /// let per_city = builder
    ///     .table("user-cities", Consumed::with(StringSerde, StringSerde))
    ///     .group_by(|_user, city: &String| Some((city.clone(), 1)), Grouped::with(StringSerde, I64Serde))
    ///     .count(Materialized::with(StringSerde, I64Serde).named("users-per-city"));
    /// let store = per_city.store().clone();
    /// let topology = builder.build()?;
    /// assert_eq!(topology.repartition_topics_for("app"), vec!["app-users-per-city-repartition"]);
    ///
    /// let mut driver = TopologyTestDriver::new(topology)?;
    /// let s = |t: &str| t.to_string();
    /// driver.pipe_input("user-cities", &StringSerde, &StringSerde, &s("ann"), &s("Paris"))?;
    /// driver.pipe_input("user-cities", &StringSerde, &StringSerde, &s("bob"), &s("Paris"))?;
    /// driver.pipe_input("user-cities", &StringSerde, &StringSerde, &s("ann"), &s("Lyon"))?; // ann moves
    /// assert_eq!(driver.store_get(&store, &s("Paris"))?, Some(1));
    /// assert_eq!(driver.store_get(&store, &s("Lyon"))?, Some(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn count(&self, materialized: Materialized<K, i64>) -> KTable<'b, K, i64> {
        self.fold(
            "KTABLE-AGGREGATE-",
            materialized,
            Arc::new(|| Ok(0)),
            Arc::new(|_, _, n| Ok(n + 1)),
            Arc::new(|_, _, n| Ok(n - 1)),
        )
    }

    /// Each group's values combined (Kafka Streams' `KGroupedTable.reduce(adder,
    /// subtractor)`): a group's first value as it is, then `adder(aggregate, value)` for a
    /// value joining the group and `subtractor(aggregate, value)` for one leaving it.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Grouped, Materialized, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// // Each region's total balance, from the compacted `balances` topic (account → region:amount).
    /// let builder = StreamsBuilder::new();
    /// let totals = builder
    ///     .table("balances", Consumed::with(StringSerde, StringSerde))
    ///     .group_by(
    ///         |_account, row: &String| {
    ///             let (region, amount) = row.split_once(':')?;
    ///             Some((region.to_string(), amount.parse::<i64>().ok()?))
    ///         },
    ///         Grouped::with(StringSerde, I64Serde),
    ///     )
    ///     .reduce(|a, v| a + v, |a, v| a - v, Materialized::with(StringSerde, I64Serde).named("region-totals"));
    /// let store = totals.store().clone();
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// let s = |t: &str| t.to_string();
    /// driver.pipe_input("balances", &StringSerde, &StringSerde, &s("a1"), &s("eu:100"))?;
    /// driver.pipe_input("balances", &StringSerde, &StringSerde, &s("a2"), &s("eu:50"))?;
    /// driver.pipe_input("balances", &StringSerde, &StringSerde, &s("a1"), &s("eu:70"))?; // 100 → 70
    /// assert_eq!(driver.store_get(&store, &s("eu"))?, Some(120));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reduce(
        &self,
        adder: impl Fn(V, &V) -> V + Send + Sync + 'static,
        subtractor: impl Fn(V, &V) -> V + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<'b, K, V> {
        self.try_reduce(
            move |a, v| Ok(adder(a, v)),
            move |a, v| Ok(subtractor(a, v)),
            materialized,
        )
    }

    /// [`KGroupedTable::reduce`] with an adder and a subtractor that can fail: an error
    /// leaves the group's aggregate as it was and sends the repartition record up the retry
    /// ladder (transient) or to its dead-letter topic (permanent).
    pub fn try_reduce(
        &self,
        adder: impl Fn(V, &V) -> Result<V, ProcessError> + Send + Sync + 'static,
        subtractor: impl Fn(V, &V) -> Result<V, ProcessError> + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<'b, K, V> {
        // A group without an aggregate takes its first value as it is.
        self.fold_with(
            "KTABLE-REDUCE-",
            materialized,
            Arc::new(|_, v: &V| Ok(v.clone())),
            Arc::new(move |_, v, a| adder(a, v)),
            Arc::new(move |_, v, a| subtractor(a, v)),
        )
    }

    /// Each group's values folded into an aggregate (Kafka Streams'
    /// `KGroupedTable.aggregate(initializer, adder, subtractor)`): `init()` for a group's
    /// first value, then `adder(group, value, aggregate)` for a value joining the group and
    /// `subtractor(group, value, aggregate)` for one leaving it (subtracted before the new
    /// value is added).
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Grouped, Materialized, StreamsBuilder};
    /// use eosflow::serdes::{JsonSerde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// // The users of each team, from the compacted `user-teams` topic (user → team).
    /// let builder = StreamsBuilder::new();
    /// let members = builder
    ///     .table("user-teams", Consumed::with(StringSerde, StringSerde))
    ///     .group_by(|user: &String, team: &String| Some((team.clone(), user.clone())), Grouped::with(StringSerde, StringSerde))
    ///     .aggregate(
    ///         Vec::<String>::new,
    ///         |_team, user, mut users| { users.push(user.clone()); users },
    ///         |_team, user, mut users| { users.retain(|u| u != user); users },
    ///         Materialized::with(StringSerde, JsonSerde::new()).named("team-members"),
    ///     );
    /// let store = members.store().clone();
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// let s = |t: &str| t.to_string();
    /// driver.pipe_input("user-teams", &StringSerde, &StringSerde, &s("ann"), &s("red"))?;
    /// driver.pipe_input("user-teams", &StringSerde, &StringSerde, &s("bob"), &s("red"))?;
    /// driver.pipe_input("user-teams", &StringSerde, &StringSerde, &s("ann"), &s("blue"))?;
    /// assert_eq!(driver.store_get(&store, &s("red"))?, Some(vec![s("bob")]));
    /// assert_eq!(driver.store_get(&store, &s("blue"))?, Some(vec![s("ann")]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn aggregate<A: Data>(
        &self,
        init: impl Fn() -> A + Send + Sync + 'static,
        adder: impl Fn(&K, &V, A) -> A + Send + Sync + 'static,
        subtractor: impl Fn(&K, &V, A) -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
    ) -> KTable<'b, K, A> {
        self.try_aggregate(
            move || Ok(init()),
            move |k, v, a| Ok(adder(k, v, a)),
            move |k, v, a| Ok(subtractor(k, v, a)),
            materialized,
        )
    }

    /// [`KGroupedTable::aggregate`] with closures that can fail (see
    /// [`KGroupedTable::try_reduce`]).
    pub fn try_aggregate<A: Data>(
        &self,
        init: impl Fn() -> Result<A, ProcessError> + Send + Sync + 'static,
        adder: impl Fn(&K, &V, A) -> Result<A, ProcessError> + Send + Sync + 'static,
        subtractor: impl Fn(&K, &V, A) -> Result<A, ProcessError> + Send + Sync + 'static,
        materialized: Materialized<K, A>,
    ) -> KTable<'b, K, A> {
        self.fold(
            "KTABLE-AGGREGATE-",
            materialized,
            Arc::new(init),
            Arc::new(adder),
            Arc::new(subtractor),
        )
    }

    /// An aggregation starting each group with `init()`.
    fn fold<A: Data>(
        &self,
        prefix: &str,
        materialized: Materialized<K, A>,
        init: Arc<dyn Fn() -> Result<A, ProcessError> + Send + Sync>,
        adder: Step<K, V, A>,
        subtractor: Step<K, V, A>,
    ) -> KTable<'b, K, A> {
        let add = adder.clone();
        let first: First<K, V, A> = Arc::new(move |k, v| add(k, v, init()?));
        self.fold_with(prefix, materialized, first, adder, subtractor)
    }

    /// The select node, the repartition and the aggregation node into `materialized`'s store:
    /// for each repartition record, the group's aggregate less the old value, plus the new
    /// one, written and forwarded in the repartition record's transaction.
    fn fold_with<A: Data>(
        &self,
        prefix: &str,
        materialized: Materialized<K, A>,
        first: First<K, V, A>,
        adder: Step<K, V, A>,
        subtractor: Step<K, V, A>,
    ) -> KTable<'b, K, A> {
        let (store, attach) = materialized.key_value_store(self.builder, prefix);
        let step = match (&self.name, self.shared.get()) {
            (Some(_), Some(shared)) => shared,
            (Some(name), None) => {
                let step = (self.regroup)(self.builder, name.clone());
                self.shared.set(Some(step));
                step
            }
            (None, _) => (self.regroup)(self.builder, store.name().to_string()),
        };
        let changes = KStream::<K, Change<V>>::new(self.builder, step, false);
        let handle = store.clone();
        let table = changes.then(
            prefix,
            false,
            move |ctx, r: TypedRecord<K, Change<V>>, out| {
                let (Some(group), Some(change)) = (&r.key, &r.value) else {
                    return Err(ProcessError::permanent(format!(
                        "{} aggregates into store {} by group: a repartition record without a group or a change",
                        ctx.node_name(),
                        handle.name()
                    )));
                };
                let mut s = ctx.store(&handle)?;
                let old = s.get(group)?;
                let after_old = match (&change.old, old) {
                    (Some(v), Some(agg)) => Some(subtractor(group, v, agg)?),
                    (_, agg) => agg,
                };
                let new = match (&change.new, after_old) {
                    (Some(v), Some(agg)) => Some(adder(group, v, agg)?),
                    (Some(v), None) => Some(first(group, v)?),
                    (None, agg) => agg,
                };
                // A subtraction from a group without an aggregate changes nothing.
                let Some(new) = new else { return Ok(()) };
                s.put(group, &new)?;
                out.push(TypedRecord {
                    key: r.key,
                    value: Some(new),
                    timestamp: r.timestamp,
                    headers: r.headers,
                });
                Ok(())
            },
            Some(attach),
        );
        KTable::new(table, store)
    }
}
