//! Table-table joins (Kafka Streams' `KTable.join/leftJoin/outerJoin(KTable, joiner)`): two
//! tables keyed alike, co-partitioned, whose rows of one key are joined into a third table.
//!
//! Each side is the **update stream** of a table: a `(K, V)` record is the key's new row, a
//! record without a value (a tombstone) deletes the key. That is what a table source of a
//! compacted topic forwards ([`super::TopologyBuilder::add_table_source`], or any source of
//! it), what an aggregation forwards (its new aggregate), and what a table's `filter` or
//! `map_values` forwards (tombstones when a row goes).
//!
//! - **State.** The join keeps each side's latest row (with its timestamp) in a store of its
//!   own, and the join's result in a third store: the **result table**. All three are named
//!   stores, written through the batch's overlay and changelogged in the batch's transaction
//!   (`<app>-<store>-changelog`), so a `kill -9` between two commits replays into exactly the
//!   state and the results the committed batches had. The result store holds the joined table
//!   itself: read it like any store (`TopologyTestDriver::store_get`, a processor it is
//!   attached to).
//! - **Either side triggers.** An update of either side writes that side's row, looks the key
//!   up in the other side's store and recomputes the key's result:
//!
//! | kind | the result exists when | the joiner gets |
//! |---|---|---|
//! | inner ([`TableJoin::inner`]) | both sides have a row | `(key, &left, &right)` |
//! | left ([`TableJoin::left`]) | the left side has a row | `(key, &left, Option<&right>)` |
//! | outer ([`TableJoin::outer`]) | either side has a row | `(key, Option<&left>, Option<&right>)` |
//!
//! - **Emitted on change, tombstones where the result disappears.** A recomputed result is
//!   written to the result store and forwarded as `(key, result)`. When the result disappears
//!   (inner: either side deleted; left: the left side deleted; outer: both deleted) the key is
//!   deleted from the result store and a tombstone `(key, None)` is forwarded — once: a
//!   tombstone of a key that had no result forwards nothing. An update that recomputes the
//!   same result forwards it again, as Kafka Streams does (comparing would need the result
//!   type to be comparable, and a downstream table takes the same row twice harmlessly). The
//!   joiner returning `None` means "no row": the key is deleted from the result table as if
//!   a side were missing.
//! - **Timestamps and causes.** A result is stamped with the later of the two rows'
//!   timestamps (Kafka Streams' rule); its envelope is caused by the update that triggered it
//!   (the runtime stamps `causation_id`).
//! - **Order between the sides** is the task's: both sides must be co-partitioned and are
//!   handled in one sub-topology task, whose inputs the runtime aligns by timestamp (see
//!   [`super::tables`]). An update processed later wins, whatever its timestamp: the tables
//!   are plain (latest-row) tables, as in Kafka Streams without versioned stores.
//! - **Bad input.** An update without a key is dropped and counted in
//!   `eosflow_join_dropped_records_total{node, reason="no-key"}` (a table row needs a key); a
//!   record whose bytes the source cannot decode never reaches the join: it goes to its
//!   topic's DLT as `permanent` with the serde's reason, like every source record; a stored
//!   row that no longer decodes fails the record (permanent, to the DLT) naming the store.
//!
//! The builder ([`super::TopologyBuilder::add_table_table_join`]) adds three nodes:
//! `<name>-left` and `<name>-right` (one per side, all three stores attached to both) and
//! `name`, which forwards the result table's changes: attach children to `name`.
//!
//! A foreign-key join (KIP-213) would reuse these pieces: the stamped rows of the side stores,
//! and the step that writes or deletes a key's result and forwards the change (the result
//! table), whatever computed it.
//!
//! ```
//! use eosflow::processor::StoreHandle;
//! use eosflow::serdes::StringSerde;
//! use eosflow::testing::{TestRecord, TopologyTestDriver};
//! use eosflow::topology::{TableJoin, Topology};
//!
//! // Users (compacted topic `users`: name by user id) outer-joined with their addresses.
//! let profiles = StoreHandle::new("profiles", StringSerde, StringSerde);
//! let join = TableJoin::outer(
//!     StoreHandle::new("profiles-users", StringSerde, StringSerde),
//!     StoreHandle::new("profiles-addresses", StringSerde, StringSerde),
//!     profiles.clone(),
//!     |_id: &String, name: Option<&String>, address: Option<&String>| {
//!         let or = |v: Option<&String>| v.map_or("?".to_string(), String::clone);
//!         Some(format!("{} @ {}", or(name), or(address)))
//!     },
//! );
//! let topology = Topology::builder()
//!     .add_source("users", &["users"], StringSerde, StringSerde)
//!     .add_source("addresses", &["addresses"], StringSerde, StringSerde)
//!     .add_table_table_join("profile", join, &["users"], &["addresses"])
//!     .add_sink("out", "profiles", StringSerde, StringSerde, &["profile"])
//!     .build()?;
//!
//! let mut driver = TopologyTestDriver::new(topology)?;
//! let row = |topic: &str, v: Option<&str>, ms: i64| TestRecord::new(topic, Some("u1"), v).timestamp(ms);
//! driver.pipe(row("users", Some("Ann"), 1_000))?;
//! driver.pipe(row("addresses", Some("Paris"), 2_000))?;
//! driver.pipe(row("users", None, 3_000))?; // Ann deleted: the address alone is left
//! driver.pipe(row("addresses", None, 4_000))?; // both gone: the row goes
//! let out: Vec<(Option<String>, Option<i64>)> = driver
//!     .read_raw_output("profiles")
//!     .iter()
//!     .map(|r| (r.value.as_ref().map(|_| r.value_text()), r.timestamp))
//!     .collect();
//! assert_eq!(
//!     out,
//!     [
//!         (Some("Ann @ ?".to_string()), Some(1_000)),
//!         (Some("Ann @ Paris".to_string()), Some(2_000)),
//!         (Some("? @ Paris".to_string()), Some(3_000)),
//!         (None, Some(4_000)), // a tombstone: the joined row is gone
//!     ]
//! );
//! assert_eq!(driver.store_get(&profiles, &"u1".to_string())?, None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Arc;

use super::node::{NodeContext, NodeProcessor, TypedRecord};
use super::stream_joins::JoinKind;
use crate::processor::StoreHandle;
use crate::record::ProcessError;
use crate::serdes::{Serde, SerdeError};
use crate::telemetry;

/// The user's joiner seen uniformly: both sides optional, `None` when the kind's sides are
/// missing (or the user's joiner says "no row").
type Joiner<K, V1, V2, R> = Arc<dyn Fn(&K, Option<&V1>, Option<&V2>) -> Option<R> + Send + Sync>;

/// A table-table join: its kind, the stores keeping each side's latest row, the store of the
/// result table, and the joiner. Add it with
/// [`super::TopologyBuilder::add_table_table_join`]; see [`self`](super::table_joins) for the
/// semantics.
///
/// The side stores are named by the handles given (their serdes are the rows'); they hold
/// each row with its timestamp, so read them through the join, not with those handles. The
/// result store holds the joined rows as they are: `result` reads it.
pub struct TableJoin<K, V1, V2, R> {
    kind: JoinKind,
    left: StoreHandle<K, V1>,
    right: StoreHandle<K, V2>,
    result: StoreHandle<K, R>,
    joiner: Joiner<K, V1, V2, R>,
}

impl<K, V1, V2, R> TableJoin<K, V1, V2, R> {
    /// An inner join: a key has a result while both sides have a row,
    /// `joiner(key, left, right)` (`None`: no row).
    pub fn inner(
        left: StoreHandle<K, V1>,
        right: StoreHandle<K, V2>,
        result: StoreHandle<K, R>,
        joiner: impl Fn(&K, &V1, &V2) -> Option<R> + Send + Sync + 'static,
    ) -> Self {
        let joiner = move |k: &K, l: Option<&V1>, r: Option<&V2>| match (l, r) {
            (Some(l), Some(r)) => joiner(k, l, r),
            _ => None,
        };
        Self::of(JoinKind::Inner, left, right, result, Arc::new(joiner))
    }

    /// A left join: a key has a result while the left side has a row,
    /// `joiner(key, left, right)` with `None` while the right side has none.
    pub fn left(
        left: StoreHandle<K, V1>,
        right: StoreHandle<K, V2>,
        result: StoreHandle<K, R>,
        joiner: impl Fn(&K, &V1, Option<&V2>) -> Option<R> + Send + Sync + 'static,
    ) -> Self {
        let joiner = move |k: &K, l: Option<&V1>, r: Option<&V2>| l.and_then(|l| joiner(k, l, r));
        Self::of(JoinKind::Left, left, right, result, Arc::new(joiner))
    }

    /// An outer join: a key has a result while either side has a row,
    /// `joiner(key, left, right)` with `None` for the side that has none.
    pub fn outer(
        left: StoreHandle<K, V1>,
        right: StoreHandle<K, V2>,
        result: StoreHandle<K, R>,
        joiner: impl Fn(&K, Option<&V1>, Option<&V2>) -> Option<R> + Send + Sync + 'static,
    ) -> Self {
        let joiner = move |k: &K, l: Option<&V1>, r: Option<&V2>| {
            if l.is_none() && r.is_none() {
                return None;
            }
            joiner(k, l, r)
        };
        Self::of(JoinKind::Outer, left, right, result, Arc::new(joiner))
    }

    fn of(
        kind: JoinKind,
        left: StoreHandle<K, V1>,
        right: StoreHandle<K, V2>,
        result: StoreHandle<K, R>,
        joiner: Joiner<K, V1, V2, R>,
    ) -> Self {
        Self {
            kind,
            left,
            right,
            result,
            joiner,
        }
    }

    /// Its kind.
    pub fn kind(&self) -> JoinKind {
        self.kind
    }

    /// The result table's store: the joined rows, to read in tests or from a processor.
    pub fn result(&self) -> &StoreHandle<K, R> {
        &self.result
    }

    /// The names of the left, the right and the result store.
    pub(crate) fn store_names(&self) -> [String; 3] {
        [
            self.left.name().to_string(),
            self.right.name().to_string(),
            self.result.name().to_string(),
        ]
    }

    /// What is wrong with it, if anything (reported by the builder).
    pub(crate) fn check(&self) -> Result<(), String> {
        let [l, r, out] = self.store_names();
        if l == r || l == out || r == out {
            return Err(format!(
                "its stores are {l:?} (left), {r:?} (right) and {out:?} (result): each needs its own"
            ));
        }
        Ok(())
    }
}

impl<K, V1, V2, R> TableJoin<K, V1, V2, R>
where
    K: Clone + Send + 'static,
    V1: Clone + Send + 'static,
    V2: Clone + Send + 'static,
    R: Clone + Send + 'static,
{
    /// The two side nodes: the left one, then the right one.
    pub(crate) fn into_nodes(self) -> SideNodes<K, V1, V2, R> {
        let left_rows = stamped_handle(&self.left);
        let right_rows = stamped_handle(&self.right);
        let j = self.joiner.clone();
        let left = TableSide {
            own: left_rows.clone(),
            other: right_rows.clone(),
            result: self.result.clone(),
            join: Box::new(move |k, this, other| j(k, this, other)),
        };
        let j = self.joiner;
        let right = TableSide {
            own: right_rows,
            other: left_rows,
            result: self.result,
            join: Box::new(move |k, this, other| j(k, other, this)),
        };
        (left, right)
    }
}

/// A table row as a join keeps it: the value and the timestamp of the update that set it (a
/// result is stamped with the later of its two rows').
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stamped<V> {
    pub(crate) timestamp: Option<i64>,
    pub(crate) value: V,
}

/// Writes a [`Stamped`] row as `1 · timestamp (i64, big-endian)` or `0`, then the value's bytes
/// (the user's serde; empty bytes are a value like any other).
pub(crate) struct StampedSerde<V>(pub(crate) Arc<dyn Serde<V>>);

impl<V> Serde<Stamped<V>> for StampedSerde<V> {
    fn serialize(&self, row: &Stamped<V>) -> Result<Vec<u8>, SerdeError> {
        let value = self.0.serialize(&row.value)?;
        let mut out = Vec::with_capacity(9 + value.len());
        match row.timestamp {
            Some(t) => {
                out.push(1);
                out.extend_from_slice(&t.to_be_bytes());
            }
            None => out.push(0),
        }
        out.extend_from_slice(&value);
        Ok(out)
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<Stamped<V>, SerdeError> {
        let short = || SerdeError::new("a joined table row is cut short");
        let (timestamp, value) = match bytes.first() {
            Some(0) => (None, &bytes[1..]),
            Some(1) => {
                let t = bytes.get(1..9).ok_or_else(short)?;
                let t = i64::from_be_bytes(t.try_into().map_err(|_| short())?);
                (Some(t), &bytes[9..])
            }
            Some(other) => {
                return Err(SerdeError::new(format!(
                    "a joined table row starts with {other}, not a timestamp flag"
                )))
            }
            None => return Err(short()),
        };
        Ok(Stamped {
            timestamp,
            value: self.0.deserialize(value)?,
        })
    }
}

/// The store a side's rows are kept in: the user's store name and serdes, rows stamped.
pub(crate) fn stamped_handle<K: 'static, V: 'static>(
    user: &StoreHandle<K, V>,
) -> StoreHandle<K, Stamped<V>> {
    let (keys, values) = user.serde_arcs();
    StoreHandle::new(user.name(), keys, StampedSerde(values))
}

/// The later of two optional timestamps.
fn later(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// A key's result recomputed to `new`: written to (or deleted from) the result store and
/// forwarded as the result table's change — a tombstone only where a result was before.
/// Shared by every join whose output is a table.
pub(crate) fn emit_result<K, R>(
    ctx: &mut NodeContext<'_, '_>,
    result: &StoreHandle<K, R>,
    key: K,
    new: Option<R>,
    timestamp: Option<i64>,
    headers: Vec<(String, Vec<u8>)>,
) -> Result<(), ProcessError>
where
    K: Clone + Send + 'static,
    R: Clone + Send + 'static,
{
    let mut results = ctx.store(result)?;
    match &new {
        Some(r) => results.put(&key, r)?,
        None if results.get(&key)?.is_some() => results.delete(&key)?,
        // No result before, none now: the result table did not change.
        None => return Ok(()),
    }
    ctx.forward(TypedRecord {
        key: Some(key),
        value: new,
        timestamp,
        headers,
    });
    Ok(())
}

/// A table update as a join side takes it: key, new row (`None`: deleted), its time (the
/// record's, else the task's event time) and headers; `None` (counted as `no-key`) for an
/// update without a key, which no table row can have.
pub(crate) type Update<K, V> = (K, Option<V>, Option<i64>, Vec<(String, Vec<u8>)>);

pub(crate) fn table_update<K, V>(
    ctx: &NodeContext<'_, '_>,
    record: TypedRecord<K, V>,
) -> Option<Update<K, V>> {
    let TypedRecord {
        key,
        value,
        timestamp,
        headers,
    } = record;
    let Some(key) = key else {
        telemetry::join_dropped(ctx.node_name(), "no-key");
        return None;
    };
    Some((
        key,
        value,
        timestamp.or_else(|| ctx.event_time_ms()),
        headers,
    ))
}

/// The left and the right node of a table-table join.
pub(crate) type SideNodes<K, V1, V2, R> = (TableSide<K, V1, V2, R>, TableSide<K, V2, V1, R>);

type SideJoiner<K, This, Other, R> =
    Box<dyn Fn(&K, Option<&This>, Option<&Other>) -> Option<R> + Send>;

/// The node of one side of a table-table join: `This` is its rows' value, `Other` the other
/// side's.
pub(crate) struct TableSide<K, This, Other, R> {
    own: StoreHandle<K, Stamped<This>>,
    other: StoreHandle<K, Stamped<Other>>,
    result: StoreHandle<K, R>,
    /// The joiner seen from this side: (key, this row, the other row).
    join: SideJoiner<K, This, Other, R>,
}

impl<K, This, Other, R> NodeProcessor<K, This> for TableSide<K, This, Other, R>
where
    K: Clone + Send + 'static,
    This: Clone + Send + 'static,
    Other: Clone + Send + 'static,
    R: Clone + Send + 'static,
{
    fn process(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        record: TypedRecord<K, This>,
    ) -> Result<(), ProcessError> {
        let Some((key, value, timestamp, headers)) = table_update(ctx, record) else {
            return Ok(());
        };
        let this = value.map(|value| Stamped { timestamp, value });
        {
            let mut own = ctx.store(&self.own)?;
            match &this {
                Some(row) => own.put(&key, row)?,
                None => own.delete(&key)?,
            }
        }
        let other = ctx.store(&self.other)?.get(&key)?;
        let new = (self.join)(
            &key,
            this.as_ref().map(|r| &r.value),
            other.as_ref().map(|r| &r.value),
        );
        let at = later(timestamp, other.and_then(|r| r.timestamp));
        emit_result(ctx, &self.result, key, new, at, headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serdes::StringSerde;

    #[test]
    fn a_stamped_row_round_trips_with_and_without_a_timestamp_and_empty_values() {
        let serde = StampedSerde::<String>(Arc::new(StringSerde));
        for row in [
            Stamped {
                timestamp: Some(-5),
                value: "a".to_string(),
            },
            Stamped {
                timestamp: None,
                value: String::new(),
            },
            Stamped {
                timestamp: Some(i64::MAX),
                value: String::new(),
            },
        ] {
            let bytes = serde.serialize(&row).expect("serializes");
            assert_eq!(serde.deserialize(&bytes).expect("deserializes"), row);
        }
        assert!(serde.deserialize(&[]).is_err());
        assert!(serde.deserialize(&[1, 0, 0]).is_err());
        assert!(serde.deserialize(&[7]).is_err());
    }

    #[test]
    fn later_takes_the_greater_known_timestamp() {
        assert_eq!(later(Some(1), Some(3)), Some(3));
        assert_eq!(later(None, Some(3)), Some(3));
        assert_eq!(later(Some(4), None), Some(4));
        assert_eq!(later(None, None), None);
    }
}
