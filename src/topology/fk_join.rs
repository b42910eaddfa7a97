//! Foreign-key table-table joins (Kafka Streams' KIP-213, `KTable.join(other, foreignKey,
//! joiner)`): each row of the **left** table (orders, keyed by order id) names a key of the
//! **right** table (its customer id) through a foreign-key extractor, and the join keeps, per
//! left key, the joiner's result of the left row and the right row it names — a table keyed
//! like the left one, correct under updates of either side.
//!
//! The two tables are keyed differently, so a left row and the right row it names live in
//! different partitions. The join meets them there, in four nodes and two repartition topics,
//! as Kafka Streams does:
//!
//! 1. `<name>-left` keeps each left row (with its timestamp and the hash of its bytes as the left
//!    serde wrote them for this update) and, on every left update, sends a
//!    **subscription** — (foreign key, left key, that hash) — through the
//!    repartition topic `<app>-<name>-subscription-repartition`, keyed by the foreign key, so it
//!    lands in the partition of the right row. A foreign key that changed also sends an
//!    **unsubscription** to the old one; a deleted left row, or one without a foreign key,
//!    answers itself (no right row to meet).
//! 2. `<name>-subscriptions` (right side) keeps the subscriptions per foreign key and answers
//!    each with a **response** — (left key, the subscription's hash, the right row or none) —
//!    through `<app>-<name>-response-repartition`, keyed by the left key, back to the left
//!    row's partition.
//! 3. `<name>-right` keeps each right row and, on every right update, answers every
//!    subscription of that key again (a prefix scan of the subscriptions), at most
//!    [`ForeignKeyJoin::fan_out_per_call`] per call (see **Hot keys** below).
//! 4. `<name>` (left side) reads the left row the response is for: a response whose hash is not
//!    the one kept beside the current row is **stale** (the row changed, or its foreign key did,
//!    since that subscription) and is dropped
//!    (`eosflow_join_dropped_records_total{reason="stale-response"}`). The hash is the one the
//!    subscription was sent with, kept in the left rows' store (changelogged, so it survives a
//!    restart or a restore), never a hash of the row serialized again: a serde whose bytes are
//!    not canonical (a `HashMap` in JSON, an Avro map, a schema re-registered under a new id)
//!    would otherwise make every response look stale (Kafka Streams serializes the row again
//!    here, and loses those results). Otherwise the joiner's result is written to the
//!    **result table** and forwarded (a tombstone where the result disappears), stamped with
//!    the later of the two rows' times.
//!
//! | kind | a left key has a result when | the joiner gets |
//! |---|---|---|
//! | inner ([`ForeignKeyJoin::inner`]) | its row names a right row that exists | `(key, &left, &right)` |
//! | left ([`ForeignKeyJoin::left`]) | it has a row | `(key, &left, Option<&right>)` |
//!
//! **Exactly once.** Every piece of state — left rows, right rows, subscriptions, the result
//! table — is a named, changelogged store written through the batch overlay, and the
//! subscriptions and responses are records of the batch's transaction: a `kill -9` replays into
//! the same rows, subscriptions and results.
//!
//! **Partitioning.** eosflow's inputs are co-partitioned, so both tables' topics need the
//! same partition count (Kafka Streams lets them differ). The subscription topic is keyed by the
//! foreign key's bytes as the right table's key serde writes them, the response topic by the
//! left key's: both land where the tables' own records do.
//!
//! **Hot keys.** A right row with many subscribers answers them in pages of at most
//! [`ForeignKeyJoin::fan_out_per_call`] (default [`DEFAULT_FAN_OUT_PER_CALL`]), one page per
//! call: the right update answers the first page and, if more remain, writes a cursor (the
//! hash of the right row being fanned out, the time its responses carry, the last subscriber
//! answered) into the subscriptions store and schedules a wall-clock timer keyed by the
//! foreign key; each time it fires — in the next batch, or within about
//! `processor.commit_interval_ms` on an idle instance — it answers the next page and moves the
//! cursor on. The cursor is written in the batch of the responses it covers, so after a
//! `kill -9` the fan-out resumes after the last committed page, never answering a subscriber
//! twice nor skipping one. A newer right row for the key restarts the fan-out from the first
//! subscriber (the older fan-out is dropped), so every subscriber ends with the newest row and
//! none receives an older one after it. A subscription that arrives while a fan-out is under way
//! and ahead of its cursor is answered by the fan-out, not twice. A transaction holds at most
//! that many responses per right update (or fan-out timer) it processes; responses of a
//! continued page carry the time of the right update but not its headers. Kafka Streams
//! answers every subscriber inside the one call; a hot foreign key is still a hot partition.
//!
//! ```
//! use eosflow::processor::StoreHandle;
//! use eosflow::serdes::StringSerde;
//! use eosflow::testing::{TestRecord, TopologyTestDriver};
//! use eosflow::topology::{ForeignKeyJoin, Topology};
//!
//! // Orders ("customer:item" by order id) joined with customers (name by customer id).
//! let joined = StoreHandle::new("orders-with-customer", StringSerde, StringSerde);
//! let join = ForeignKeyJoin::inner(
//!     StoreHandle::new("fk-orders", StringSerde, StringSerde),
//!     StoreHandle::new("fk-customers", StringSerde, StringSerde),
//!     joined.clone(),
//!     |order: &String| order.split_once(':').map(|(c, _)| c.to_string()),
//!     |_id: &String, order: &String, name: &String| Some(format!("{order} for {name}")),
//! );
//! let topology = Topology::builder()
//!     .add_source("orders", &["orders"], StringSerde, StringSerde)
//!     .add_source("customers", &["customers"], StringSerde, StringSerde)
//!     .add_foreign_key_join("joined", join, &["orders"], &["customers"])
//!     .add_sink("out", "orders-enriched", StringSerde, StringSerde, &["joined"])
//!     .build()?;
//!
//! let mut driver = TopologyTestDriver::new(topology)?;
//! driver.pipe(TestRecord::new("customers", Some("c1"), Some("Ann")))?;
//! driver.pipe(TestRecord::new("orders", Some("o1"), Some("c1:book")))?;
//! driver.pipe(TestRecord::new("customers", Some("c1"), Some("Ann B.")))?; // a right update
//! driver.pipe(TestRecord::new("orders", Some("o1"), Some("c2:book")))?; // c2 unknown: retracted
//! let out: Vec<Option<String>> = driver
//!     .read_raw_output("orders-enriched")
//!     .iter()
//!     .map(|r| r.value.as_ref().map(|_| r.value_text()))
//!     .collect();
//! assert_eq!(
//!     out,
//!     [Some("c1:book for Ann".into()), Some("c1:book for Ann B.".into()), None]
//! );
//! assert_eq!(driver.store_get(&joined, &"o1".to_string())?, None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ops::Bound;
use std::sync::Arc;

use super::node::{NodeContext, NodeProcessor, TypedRecord};
use super::stream_joins::JoinKind;
use super::table_joins::{emit_result, table_update, Stamped, StampedSerde};
use crate::processor::{StoreHandle, Timer, TimerKind};
use crate::record::ProcessError;
use crate::serdes::{BytesSerde, Serde, SerdeError};
use crate::state::merge::prefix_bounds;
use crate::telemetry;

type ForeignKey<VL, KR> = Arc<dyn Fn(&VL) -> Option<KR> + Send + Sync>;
type FkJoiner<KL, VL, VR, R> = Arc<dyn Fn(&KL, &VL, Option<&VR>) -> Option<R> + Send + Sync>;

/// A foreign-key join: the stores of the left rows, the right rows and the result table, the
/// foreign-key extractor and the joiner. Add it with
/// [`super::TopologyBuilder::add_foreign_key_join`]; see [`self`](super::fk_join) for how it
/// works.
///
/// The left and right handles name the stores the join keeps each side's rows in (their serdes
/// are the rows'); a third store, `<result>-subscriptions`, keeps the subscriptions. The result
/// store holds the joined table: `result` reads it.
pub struct ForeignKeyJoin<KL, VL, KR, VR, R> {
    kind: JoinKind,
    left: StoreHandle<KL, VL>,
    right: StoreHandle<KR, VR>,
    result: StoreHandle<KL, R>,
    foreign_key: ForeignKey<VL, KR>,
    joiner: FkJoiner<KL, VL, VR, R>,
    fan_out: usize,
}

/// How many subscribers one call of a right row's fan-out answers unless
/// [`ForeignKeyJoin::fan_out_per_call`] says otherwise: enough that a key with a few hundred
/// subscribers is answered at once, few enough that a transaction stays small (1 000
/// responses of a 1 KiB row are 1 MiB).
pub const DEFAULT_FAN_OUT_PER_CALL: usize = 1_000;

impl<KL, VL, KR, VR, R> ForeignKeyJoin<KL, VL, KR, VR, R> {
    /// An inner join: a left key has a result while its row's foreign key names a right row,
    /// `joiner(key, left, right)` (`None`: no row).
    pub fn inner(
        left: StoreHandle<KL, VL>,
        right: StoreHandle<KR, VR>,
        result: StoreHandle<KL, R>,
        foreign_key: impl Fn(&VL) -> Option<KR> + Send + Sync + 'static,
        joiner: impl Fn(&KL, &VL, &VR) -> Option<R> + Send + Sync + 'static,
    ) -> Self {
        let joiner = move |k: &KL, l: &VL, r: Option<&VR>| r.and_then(|r| joiner(k, l, r));
        Self::of(
            JoinKind::Inner,
            left,
            right,
            result,
            Arc::new(foreign_key),
            Arc::new(joiner),
        )
    }

    /// A left join: a left key has a result while it has a row, `joiner(key, left, right)`
    /// with `None` while its foreign key names no right row (or it has none).
    pub fn left(
        left: StoreHandle<KL, VL>,
        right: StoreHandle<KR, VR>,
        result: StoreHandle<KL, R>,
        foreign_key: impl Fn(&VL) -> Option<KR> + Send + Sync + 'static,
        joiner: impl Fn(&KL, &VL, Option<&VR>) -> Option<R> + Send + Sync + 'static,
    ) -> Self {
        Self::of(
            JoinKind::Left,
            left,
            right,
            result,
            Arc::new(foreign_key),
            Arc::new(joiner),
        )
    }

    fn of(
        kind: JoinKind,
        left: StoreHandle<KL, VL>,
        right: StoreHandle<KR, VR>,
        result: StoreHandle<KL, R>,
        foreign_key: ForeignKey<VL, KR>,
        joiner: FkJoiner<KL, VL, VR, R>,
    ) -> Self {
        Self {
            kind,
            left,
            right,
            result,
            foreign_key,
            joiner,
            fan_out: DEFAULT_FAN_OUT_PER_CALL,
        }
    }

    /// Answers at most `n` subscribers of a right row per call (at least 1; default
    /// [`DEFAULT_FAN_OUT_PER_CALL`]): a right update of a key with more subscribers answers
    /// the first `n` and leaves a cursor, and a wall-clock timer continues from it in the next
    /// batches, `n` more each time, until every subscriber is answered — so no transaction
    /// has to hold the responses of a hot key's every subscriber. See [`self`](super::fk_join).
    ///
    /// ```
    /// use eosflow::processor::StoreHandle;
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::topology::ForeignKeyJoin;
    ///
    /// let join = ForeignKeyJoin::inner(
    ///     StoreHandle::new("orders", StringSerde, StringSerde),
    ///     StoreHandle::new("customers", StringSerde, StringSerde),
    ///     StoreHandle::new("orders-with-customer", StringSerde, StringSerde),
    ///     |order: &String| order.split_once(':').map(|(c, _)| c.to_string()),
    ///     |_: &String, order: &String, name: &String| Some(format!("{order} for {name}")),
    /// )
    /// .fan_out_per_call(200);
    /// assert_eq!(join.fan_out(), 200);
    /// ```
    pub fn fan_out_per_call(mut self, n: usize) -> Self {
        self.fan_out = n.max(1);
        self
    }

    /// How many subscribers one call of a right row's fan-out answers at most.
    pub fn fan_out(&self) -> usize {
        self.fan_out
    }

    /// Its kind (inner or left).
    pub fn kind(&self) -> JoinKind {
        self.kind
    }

    /// The result table's store: the joined rows by left key.
    pub fn result(&self) -> &StoreHandle<KL, R> {
        &self.result
    }

    /// The store of the subscriptions.
    fn subscriptions_name(&self) -> String {
        format!("{}-subscriptions", self.result.name())
    }

    /// What is wrong with it, if anything (reported by the builder).
    pub(crate) fn check(&self) -> Result<(), String> {
        let names = [
            self.left.name().to_string(),
            self.right.name().to_string(),
            self.result.name().to_string(),
            self.subscriptions_name(),
        ];
        let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
        if distinct.len() != names.len() {
            return Err(format!(
                "its stores are {:?} (left), {:?} (right), {:?} (result) and {:?} (subscriptions): each needs its own",
                names[0], names[1], names[2], names[3]
            ));
        }
        Ok(())
    }
}

/// The store names of a foreign-key join, by the side whose nodes use them.
pub(crate) struct FkStores {
    /// Left rows and the result table: the left side's nodes.
    pub(crate) left: [String; 2],
    /// Right rows and subscriptions: the right side's nodes.
    pub(crate) right: [String; 2],
}

/// The nodes of a foreign-key join.
pub(crate) struct FkNodes<KL, VL, KR, VR, R> {
    pub(crate) subscribe: Subscribe<KL, VL, KR>,
    pub(crate) subscriptions: Subscriptions,
    pub(crate) right: RightRows<KR, VR>,
    pub(crate) resolve: Resolve<KL, VL, VR, R>,
    pub(crate) stores: FkStores,
}

impl<KL, VL, KR, VR, R> ForeignKeyJoin<KL, VL, KR, VR, R>
where
    KL: Clone + Send + 'static,
    VL: Clone + Send + 'static,
    KR: Clone + Send + 'static,
    VR: Clone + Send + 'static,
    R: Clone + Send + 'static,
{
    pub(crate) fn into_nodes(self, resolve_name: &str) -> FkNodes<KL, VL, KR, VR, R> {
        let (left_keys, left_values) = self.left.serde_arcs();
        let left_rows: StoreHandle<KL, LeftRow<VL>> = StoreHandle::new(
            self.left.name(),
            left_keys.clone(),
            LeftRowSerde(StampedSerde(left_values.clone())),
        );
        let (right_keys, right_values) = self.right.serde_arcs();
        let right_rows: StoreHandle<Vec<u8>, Stamped<VR>> = StoreHandle::new(
            self.right.name(),
            BytesSerde,
            StampedSerde(right_values.clone()),
        );
        let raw_rows: StoreHandle<Vec<u8>, Vec<u8>> =
            StoreHandle::new(self.right.name(), BytesSerde, BytesSerde);
        let subscriptions: StoreHandle<Vec<u8>, Vec<u8>> =
            StoreHandle::new(self.subscriptions_name(), BytesSerde, BytesSerde);
        let stores = FkStores {
            left: [self.left.name().to_string(), self.result.name().to_string()],
            right: [self.right.name().to_string(), self.subscriptions_name()],
        };
        FkNodes {
            subscribe: Subscribe {
                rows: left_rows.clone(),
                keys: left_keys.clone(),
                values: left_values.clone(),
                right_keys: right_keys.clone(),
                foreign_key: self.foreign_key,
                resolve: resolve_name.to_string(),
            },
            subscriptions: Subscriptions {
                subscriptions: subscriptions.clone(),
                rows: raw_rows.clone(),
            },
            right: RightRows {
                subscriptions,
                rows: right_rows,
                raw: raw_rows,
                keys: right_keys,
                fan_out: self.fan_out,
            },
            resolve: Resolve {
                rows: left_rows,
                keys: left_keys,
                values: left_values,
                right: StampedSerde(right_values),
                result: self.result,
                joiner: self.joiner,
            },
            stores,
        }
    }
}

/// FNV-1a (64 bits) of a left row's bytes: what a subscription and its response carry, so the
/// left side can tell a response for its current row from one for a row it has replaced. Stable
/// across processes and versions (it crosses topics and stores).
pub(crate) fn row_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A left row as the join keeps it: the row (stamped) and the hash its latest subscription was
/// sent with — what a response must carry to be current. `None` only for a row written by an
/// eosflow before this hash was kept (its hash is then computed from the row's bytes again).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LeftRow<V> {
    pub(crate) hash: Option<u64>,
    pub(crate) row: Stamped<V>,
}

/// The first byte of a [`LeftRow`] that carries its hash; a [`StampedSerde`] row (what earlier
/// versions kept) starts with 0 or 1.
const HASHED: u8 = 2;

/// Writes a [`LeftRow`] as `2 · hash (u64, big-endian) · the stamped row`; reads that, or a
/// bare stamped row (written before the hash was kept: `hash` is `None`).
pub(crate) struct LeftRowSerde<V>(pub(crate) StampedSerde<V>);

impl<V> Serde<LeftRow<V>> for LeftRowSerde<V> {
    fn serialize(&self, left: &LeftRow<V>) -> Result<Vec<u8>, SerdeError> {
        let row = self.0.serialize(&left.row)?;
        let Some(hash) = left.hash else {
            return Ok(row);
        };
        let mut out = Vec::with_capacity(9 + row.len());
        out.push(HASHED);
        out.extend_from_slice(&hash.to_be_bytes());
        out.extend_from_slice(&row);
        Ok(out)
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<LeftRow<V>, SerdeError> {
        if bytes.first() != Some(&HASHED) {
            return Ok(LeftRow {
                hash: None,
                row: self.0.deserialize(bytes)?,
            });
        }
        let hash = bytes
            .get(1..9)
            .and_then(|h| h.try_into().ok())
            .map(u64::from_be_bytes)
            .ok_or_else(|| SerdeError::new("a foreign-key join's left row is cut short"))?;
        Ok(LeftRow {
            hash: Some(hash),
            row: self.0.deserialize(&bytes[9..])?,
        })
    }
}

const SUBSCRIBE: u8 = b'S';
const UNSUBSCRIBE: u8 = b'U';

/// A subscription message: `op · hash (8) · foreign key length (4) · foreign key · left key`.
fn subscription(op: u8, hash: u64, fk: &[u8], left_key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(13 + fk.len() + left_key.len());
    out.push(op);
    out.extend_from_slice(&hash.to_be_bytes());
    out.extend_from_slice(&(fk.len() as u32).to_be_bytes());
    out.extend_from_slice(fk);
    out.extend_from_slice(left_key);
    out
}

/// A parsed subscription: op, hash, foreign key, left key.
type ParsedSubscription<'a> = (u8, u64, &'a [u8], &'a [u8]);

fn parse_subscription(v: &[u8]) -> Option<ParsedSubscription<'_>> {
    let op = *v.first()?;
    let hash = u64::from_be_bytes(v.get(1..9)?.try_into().ok()?);
    let len = u32::from_be_bytes(v.get(9..13)?.try_into().ok()?) as usize;
    let fk = v.get(13..13 + len)?;
    let left = v.get(13 + len..)?;
    Some((op, hash, fk, left))
}

/// The foreign key bytes of a subscription message (the subscription topic's key).
pub(crate) fn subscription_fk(v: &[u8]) -> Option<Vec<u8>> {
    parse_subscription(v).map(|(_, _, fk, _)| fk.to_vec())
}

/// The subscriptions store's key: `foreign key length · foreign key · left key`, so one
/// foreign key's subscriptions are one prefix.
fn subscription_key(fk: &[u8], left_key: &[u8]) -> Vec<u8> {
    let mut k = fk_prefix(fk);
    k.extend_from_slice(left_key);
    k
}

fn fk_prefix(fk: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + fk.len());
    k.extend_from_slice(&(fk.len() as u32).to_be_bytes());
    k.extend_from_slice(fk);
    k
}

/// A response message: `hash (8) · 1 · right row (stamped)` or `hash (8) · 0` (no right row).
fn response(hash: u64, right: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + right.map_or(0, <[u8]>::len));
    out.extend_from_slice(&hash.to_be_bytes());
    match right {
        Some(row) => {
            out.push(1);
            out.extend_from_slice(row);
        }
        None => out.push(0),
    }
    out
}

fn parse_response(v: &[u8]) -> Option<(u64, Option<&[u8]>)> {
    let hash = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
    match v.get(8)? {
        0 => Some((hash, None)),
        1 => Some((hash, Some(v.get(9..)?))),
        _ => None,
    }
}

fn corrupt(node: &str, what: &str) -> ProcessError {
    ProcessError::permanent(format!(
        "foreign-key join {node}: a {what} message is malformed (was the topic written by another program?)"
    ))
}

/// Node 1: keeps the left rows and subscribes each to the right row its foreign key names.
pub(crate) struct Subscribe<KL, VL, KR> {
    rows: StoreHandle<KL, LeftRow<VL>>,
    keys: Arc<dyn Serde<KL>>,
    values: Arc<dyn Serde<VL>>,
    right_keys: Arc<dyn Serde<KR>>,
    foreign_key: ForeignKey<VL, KR>,
    /// The resolving node, which answers for rows with nothing to meet on the right.
    resolve: String,
}

impl<KL, VL, KR> Subscribe<KL, VL, KR> {
    /// The foreign key bytes of a left row (`None`: it names no right row).
    fn fk_bytes(&self, value: &VL) -> Result<Option<Vec<u8>>, ProcessError> {
        (self.foreign_key)(value)
            .map(|fk| self.right_keys.serialize(&fk))
            .transpose()
            .map_err(|e| ProcessError::permanent(format!("foreign key: {e}")))
    }
}

impl<KL, VL, KR> NodeProcessor<KL, VL> for Subscribe<KL, VL, KR>
where
    KL: Clone + Send + 'static,
    VL: Clone + Send + 'static,
    KR: Clone + Send + 'static,
{
    fn process(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        record: TypedRecord<KL, VL>,
    ) -> Result<(), ProcessError> {
        let Some((key, value, timestamp, headers)) = table_update(ctx, record) else {
            return Ok(());
        };
        let key_bytes = self
            .keys
            .serialize(&key)
            .map_err(|e| ProcessError::permanent(format!("left key: {e}")))?;
        let old = ctx.store(&self.rows)?.get(&key)?;
        let old_fk = match &old {
            Some(old) => self.fk_bytes(&old.row.value)?,
            None => None,
        };
        let (new_fk, hash) = match &value {
            Some(v) => {
                let bytes = self
                    .values
                    .serialize(v)
                    .map_err(|e| ProcessError::permanent(format!("left row: {e}")))?;
                (self.fk_bytes(v)?, row_hash(&bytes))
            }
            None => (None, 0),
        };
        {
            let mut rows = ctx.store(&self.rows)?;
            match value {
                Some(value) => rows.put(
                    &key,
                    &LeftRow {
                        hash: Some(hash),
                        row: Stamped { timestamp, value },
                    },
                )?,
                None => rows.delete(&key)?,
            }
        }
        let message = |v: Vec<u8>| TypedRecord {
            key: Some(key_bytes.clone()),
            value: Some(v),
            timestamp,
            headers: headers.clone(),
        };
        if let Some(old_fk) = old_fk.as_ref().filter(|o| Some(*o) != new_fk.as_ref()) {
            let unsubscribe = subscription(UNSUBSCRIBE, 0, old_fk, &key_bytes);
            ctx.forward_except(Some(&self.resolve), message(unsubscribe));
        }
        match new_fk {
            Some(fk) => {
                let subscribe = subscription(SUBSCRIBE, hash, &fk, &key_bytes);
                ctx.forward_except(Some(&self.resolve), message(subscribe));
            }
            // Deleted, or naming no right row: nothing to meet on the right; the row is
            // answered here (no right row) so the result follows at once.
            None => ctx.forward_to(&self.resolve, message(response(hash, None))),
        }
        Ok(())
    }
}

/// Node 2: keeps the subscriptions (right side) and answers each with the right row.
pub(crate) struct Subscriptions {
    subscriptions: StoreHandle<Vec<u8>, Vec<u8>>,
    /// The right rows as stored (stamped, the right serde's bytes): what responses carry.
    rows: StoreHandle<Vec<u8>, Vec<u8>>,
}

impl NodeProcessor<Vec<u8>, Vec<u8>> for Subscriptions {
    fn process(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        record: TypedRecord<Vec<u8>, Vec<u8>>,
    ) -> Result<(), ProcessError> {
        let Some(message) = record.value else {
            return Ok(());
        };
        let (op, hash, fk, left_key) =
            parse_subscription(&message).ok_or_else(|| corrupt(ctx.node_name(), "subscription"))?;
        let k = subscription_key(fk, left_key);
        if op == UNSUBSCRIBE {
            ctx.store(&self.subscriptions)?.delete(&k)?;
            return Ok(());
        }
        if op != SUBSCRIBE {
            return Err(corrupt(ctx.node_name(), "subscription"));
        }
        // A fan-out of this foreign key under way that has not reached this subscriber yet
        // will answer it (with the same row): answering here too would repeat its result.
        let ahead = {
            let mut subscriptions = ctx.store(&self.subscriptions)?;
            subscriptions.put(&k, &hash.to_be_bytes().to_vec())?;
            subscriptions
                .get(&cursor_key(fk))?
                .and_then(|c| FanOutCursor::from_bytes(&c))
                .is_some_and(|c| k > c.last)
        };
        if ahead {
            return Ok(());
        }
        let right = ctx.store(&self.rows)?.get(&fk.to_vec())?;
        ctx.forward(TypedRecord {
            key: Some(left_key.to_vec()),
            value: Some(response(hash, right.as_deref())),
            timestamp: record.timestamp,
            headers: record.headers,
        });
        Ok(())
    }
}

/// Node 3: keeps the right rows and answers every subscription of a key that changes, at most
/// `fan_out` per call: a right row with more subscribers leaves a [`FanOutCursor`] and a
/// wall-clock timer (keyed by the foreign key) that continues the fan-out in the next batch.
pub(crate) struct RightRows<KR, VR> {
    subscriptions: StoreHandle<Vec<u8>, Vec<u8>>,
    rows: StoreHandle<Vec<u8>, Stamped<VR>>,
    /// The same store, as bytes: what responses carry.
    raw: StoreHandle<Vec<u8>, Vec<u8>>,
    keys: Arc<dyn Serde<KR>>,
    /// Subscribers answered per call at most.
    fan_out: usize,
}

impl<KR, VR> RightRows<KR, VR> {
    /// Answers the subscribers of `fk` after `after` (a subscriptions-store key; `None`: from
    /// the first) with the right row stored now, at most `fan_out` of them. If more remain, the
    /// cursor is written (in this call's batch, with the responses it covers) and the timer
    /// that continues it scheduled for the next batch; otherwise both are removed.
    fn fan_out(
        &self,
        ctx: &mut NodeContext<'_, '_>,
        fk: &[u8],
        after: Option<Vec<u8>>,
        timestamp: Option<i64>,
        headers: &[(String, Vec<u8>)],
    ) -> Result<(), ProcessError> {
        let row = ctx.store(&self.raw)?.get(&fk.to_vec())?;
        let prefix = fk_prefix(fk);
        let (first, end) = prefix_bounds(&prefix);
        let start = match after {
            Some(k) => Bound::Excluded(k),
            None => first,
        };
        let page: Vec<(Vec<u8>, Vec<u8>)> = ctx
            .store(&self.subscriptions)?
            .range((start.as_ref(), end.as_ref()))?
            .take(self.fan_out + 1)
            .collect::<Result<_, _>>()?;
        let more = page.len() > self.fan_out;
        let mut last = None;
        for (k, hash) in page.into_iter().take(self.fan_out) {
            let left_key = k.get(prefix.len()..).unwrap_or_default().to_vec();
            let hash = hash
                .get(..8)
                .and_then(|h| h.try_into().ok())
                .map(u64::from_be_bytes)
                .ok_or_else(|| corrupt(ctx.node_name(), "stored subscription"))?;
            ctx.forward(TypedRecord {
                key: Some(left_key),
                value: Some(response(hash, row.as_deref())),
                timestamp,
                headers: headers.to_vec(),
            });
            last = Some(k);
        }
        let cursor_at = cursor_key(fk);
        match last.filter(|_| more) {
            Some(last) => {
                let cursor = FanOutCursor {
                    row: row.as_deref().map(row_hash),
                    timestamp,
                    last,
                };
                ctx.store(&self.subscriptions)?
                    .put(&cursor_at, &cursor.to_bytes())?;
                let next = ctx.wall_clock_ms().saturating_add(1);
                ctx.schedule_wall_clock(fk, next)?;
            }
            None => {
                let mut subscriptions = ctx.store(&self.subscriptions)?;
                if subscriptions.get(&cursor_at)?.is_some() {
                    subscriptions.delete(&cursor_at)?;
                    ctx.cancel(TimerKind::WallClock, fk)?;
                }
            }
        }
        Ok(())
    }
}

impl<KR, VR> NodeProcessor<KR, VR> for RightRows<KR, VR>
where
    KR: Clone + Send + 'static,
    VR: Clone + Send + 'static,
{
    fn process(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        record: TypedRecord<KR, VR>,
    ) -> Result<(), ProcessError> {
        let Some((key, value, timestamp, headers)) = table_update(ctx, record) else {
            return Ok(());
        };
        let fk = self
            .keys
            .serialize(&key)
            .map_err(|e| ProcessError::permanent(format!("right key: {e}")))?;
        {
            let mut rows = ctx.store(&self.rows)?;
            match value {
                Some(value) => rows.put(&fk, &Stamped { timestamp, value })?,
                None => rows.delete(&fk)?,
            }
        }
        // A fan-out of an older row still under way is superseded: this one starts again from
        // the first subscriber, so every subscriber ends with this row and none gets the older
        // one after it.
        self.fan_out(ctx, &fk, None, timestamp, &headers)
    }

    fn on_timer(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        timer: &Timer,
    ) -> Result<(), ProcessError> {
        let fk = timer.key.clone();
        let Some(bytes) = ctx.store(&self.subscriptions)?.get(&cursor_key(&fk))? else {
            // Nothing under way (a timer left by a fan-out that has finished).
            return Ok(());
        };
        let cursor = FanOutCursor::from_bytes(&bytes)
            .ok_or_else(|| corrupt(ctx.node_name(), "fan-out cursor"))?;
        let row = ctx.store(&self.raw)?.get(&fk)?;
        let after = if row.as_deref().map(row_hash) == cursor.row {
            Some(cursor.last)
        } else {
            // The row is not the one the cursor was fanning out (every right update restarts
            // the fan-out, so this is a store restored from elsewhere): answer everyone again.
            None
        };
        self.fan_out(ctx, &fk, after, cursor.timestamp, &[])
    }
}

/// The first four bytes of a [`FanOutCursor`]'s key in the subscriptions store: a foreign key
/// length no foreign key has, so no prefix scan of a foreign key's subscriptions meets it.
const CURSOR_MARK: [u8; 4] = [0xff; 4];

/// Where the fan-out cursor of foreign key `fk` is kept in the subscriptions store.
fn cursor_key(fk: &[u8]) -> Vec<u8> {
    let mut k = CURSOR_MARK.to_vec();
    k.extend_from_slice(fk);
    k
}

/// How far a right row's fan-out has come: the hash of the right row it answers with (`None`:
/// no row), the time its responses carry, and the subscriptions-store key of the last
/// subscriber answered. Written in the batch of the responses it covers, so a restart resumes
/// after the last committed one.
#[derive(Debug, Clone, PartialEq)]
struct FanOutCursor {
    row: Option<u64>,
    timestamp: Option<i64>,
    last: Vec<u8>,
}

/// The version byte of a [`FanOutCursor`]'s encoding.
const CURSOR_V1: u8 = 1;

impl FanOutCursor {
    /// `1 · row flag · row hash (8) · time flag · time (8) · last key`.
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(19 + self.last.len());
        out.push(CURSOR_V1);
        out.push(u8::from(self.row.is_some()));
        out.extend_from_slice(&self.row.unwrap_or(0).to_be_bytes());
        out.push(u8::from(self.timestamp.is_some()));
        out.extend_from_slice(&self.timestamp.unwrap_or(0).to_be_bytes());
        out.extend_from_slice(&self.last);
        out
    }

    fn from_bytes(b: &[u8]) -> Option<Self> {
        if *b.first()? != CURSOR_V1 {
            return None;
        }
        let row = u64::from_be_bytes(b.get(2..10)?.try_into().ok()?);
        let timestamp = i64::from_be_bytes(b.get(11..19)?.try_into().ok()?);
        Some(Self {
            row: (*b.get(1)? == 1).then_some(row),
            timestamp: (*b.get(10)? == 1).then_some(timestamp),
            last: b.get(19..)?.to_vec(),
        })
    }
}

/// Node 4: meets a response with the left row it answers, and keeps the result table.
pub(crate) struct Resolve<KL, VL, VR, R> {
    rows: StoreHandle<KL, LeftRow<VL>>,
    keys: Arc<dyn Serde<KL>>,
    values: Arc<dyn Serde<VL>>,
    /// Reads the stamped right rows responses carry.
    right: StampedSerde<VR>,
    result: StoreHandle<KL, R>,
    joiner: FkJoiner<KL, VL, VR, R>,
}

impl<KL, VL, VR, R> NodeProcessor<Vec<u8>, Vec<u8>> for Resolve<KL, VL, VR, R>
where
    KL: Clone + Send + 'static,
    VL: Clone + Send + 'static,
    VR: Clone + Send + 'static,
    R: Clone + Send + 'static,
{
    fn process(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        record: TypedRecord<Vec<u8>, Vec<u8>>,
    ) -> Result<(), ProcessError> {
        let r = &*self;
        let (Some(key_bytes), Some(message)) = (record.key, record.value) else {
            return Ok(());
        };
        let (hash, right) =
            parse_response(&message).ok_or_else(|| corrupt(ctx.node_name(), "response"))?;
        let key = r
            .keys
            .deserialize(&key_bytes)
            .map_err(|e| ProcessError::permanent(format!("left key: {e}")))?;
        let right: Option<Stamped<VR>> = right
            .map(|b| r.right.deserialize(b))
            .transpose()
            .map_err(|e| ProcessError::permanent(format!("right row: {e}")))?;
        let Some(left) = ctx.store(&r.rows)?.get(&key)? else {
            // The left row is gone: its result goes with it.
            return emit_result(ctx, &r.result, key, None, record.timestamp, record.headers);
        };
        // The hash the row's subscription was sent with; serializing the row again would give
        // other bytes for a serde that is not canonical (a HashMap in JSON, an Avro map).
        let current = match left.hash {
            Some(h) => h,
            None => r
                .values
                .serialize(&left.row.value)
                .map(|bytes| row_hash(&bytes))
                .map_err(|e| ProcessError::permanent(format!("left row: {e}")))?,
        };
        if current != hash {
            telemetry::join_dropped(ctx.node_name(), "stale-response");
            return Ok(());
        }
        let left = left.row;
        let new = (r.joiner)(&key, &left.value, right.as_ref().map(|s| &s.value));
        let at = match (left.timestamp, right.as_ref().and_then(|s| s.timestamp)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        emit_result(ctx, &r.result, key, new, at, record.headers)
    }
}
