//! The topology builder: named sources, processor nodes, state stores and sinks, checked for
//! dangling names when built (Kafka Streams' `Topology.addSource/addProcessor/addStateStore/
//! addSink`).

use std::marker::PhantomData;

use super::globals::{GlobalTable, GlobalTableHandle, StreamGlobalTableJoin};
use super::node::{downcast, AnyRecord, NodeProcessor, TypedRecord};
use super::stream_joins::StreamJoin;
use super::table_joins::TableJoin;
use super::tables::{StreamTableJoin, TableHandle};
use super::time::TimestampExtractor;
use super::windows::{WindowStoreHandle, WindowedAggregate};
use super::TopologyError;
use crate::processor::StoreHandle;
use crate::record::{ProcessError, Record};
use crate::serdes::Serde;

/// Decodes an input record into a typed record carrying its event time (source).
pub(crate) type Decode =
    Box<dyn Fn(&Record<'_>, Option<i64>) -> Result<Box<dyn AnyRecord>, ProcessError> + Send>;
/// Encodes a typed record into key, value and headers (sink).
pub(crate) type Encode =
    Box<dyn Fn(&str, Box<dyn AnyRecord>) -> Result<Encoded, ProcessError> + Send>;
/// A sink's key, value, headers and timestamp.
pub(crate) type Encoded = (
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(String, Vec<u8>)>,
    Option<i64>,
);

/// The topic names a source reads: one name (`&str`, `String`, `&String`) or a slice, a borrowed
/// array or a `Vec` of them, so a topic held in a `String` needs no `.as_str()`. (No array by
/// value: `&["a", "b"]` stays the one spelling, and clippy does not flag its borrow.)
///
/// ```
/// use eosflow::serdes::StringSerde;
/// use eosflow::topology::Topology;
///
/// let clicks = String::from("clicks");
/// let mut b = Topology::builder();
/// b.add_source("one", "orders", StringSerde, StringSerde)
///     .add_source("owned", &clicks, StringSerde, StringSerde)
///     .add_source("many", &["views", "shares"], StringSerde, StringSerde)
///     .add_source("vec", vec![String::from("likes")], StringSerde, StringSerde);
/// assert!(b.build().is_ok());
/// ```
pub trait Topics {
    /// The names, in order.
    fn topic_names(self) -> Vec<String>;
}

impl Topics for &str {
    fn topic_names(self) -> Vec<String> {
        vec![self.to_string()]
    }
}

impl Topics for String {
    fn topic_names(self) -> Vec<String> {
        vec![self]
    }
}

impl Topics for &String {
    fn topic_names(self) -> Vec<String> {
        vec![self.clone()]
    }
}

impl<T: AsRef<str>> Topics for &[T] {
    fn topic_names(self) -> Vec<String> {
        self.iter().map(|t| t.as_ref().to_string()).collect()
    }
}

impl<T: AsRef<str>, const N: usize> Topics for &[T; N] {
    fn topic_names(self) -> Vec<String> {
        self.iter().map(|t| t.as_ref().to_string()).collect()
    }
}

impl<T: AsRef<str>> Topics for Vec<T> {
    fn topic_names(self) -> Vec<String> {
        self.iter().map(|t| t.as_ref().to_string()).collect()
    }
}

impl<T: AsRef<str>> Topics for &Vec<T> {
    fn topic_names(self) -> Vec<String> {
        self.iter().map(|t| t.as_ref().to_string()).collect()
    }
}

/// A typed node with its types erased.
pub(crate) trait ErasedNode: Send {
    fn process(
        &mut self,
        ctx: &mut super::NodeContext<'_, '_>,
        record: Box<dyn AnyRecord>,
    ) -> Result<(), ProcessError>;

    fn on_timer(
        &mut self,
        ctx: &mut super::NodeContext<'_, '_>,
        timer: &crate::processor::Timer,
    ) -> Result<(), ProcessError>;
}

struct Typed<P, K, V> {
    inner: P,
    _types: PhantomData<fn(K, V)>,
}

impl<P, K, V> ErasedNode for Typed<P, K, V>
where
    P: NodeProcessor<K, V>,
    K: 'static,
    V: 'static,
{
    fn process(
        &mut self,
        ctx: &mut super::NodeContext<'_, '_>,
        record: Box<dyn AnyRecord>,
    ) -> Result<(), ProcessError> {
        let record = downcast::<K, V>(ctx.node, record)?;
        self.inner.process(ctx, record)
    }

    fn on_timer(
        &mut self,
        ctx: &mut super::NodeContext<'_, '_>,
        timer: &crate::processor::Timer,
    ) -> Result<(), ProcessError> {
        self.inner.on_timer(ctx, timer)
    }
}

/// What a node is.
pub(crate) enum Kind {
    /// Reads `topics` and decodes them, with their event time read by `time`.
    Source {
        topics: Vec<String>,
        decode: Decode,
        time: TimestampExtractor,
    },
    /// Runs user code.
    Processor {
        node: Box<dyn ErasedNode>,
        stores: Vec<String>,
    },
    /// Writes to `topic`.
    Sink { topic: String, encode: Encode },
}

/// The `(K, V)` record type of one side of an edge, recorded when a node is added so that
/// [`TopologyBuilder::build`] rejects a mismatched edge instead of the runtime dead-lettering
/// every record that crosses it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EdgeType {
    id: std::any::TypeId,
    key: &'static str,
    value: &'static str,
}

impl EdgeType {
    pub(crate) fn of<K: 'static, V: 'static>() -> Self {
        Self {
            id: std::any::TypeId::of::<(K, V)>(),
            key: std::any::type_name::<K>(),
            value: std::any::type_name::<V>(),
        }
    }
}

impl std::fmt::Display for EdgeType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({}, {})", self.key, self.value)
    }
}

/// One named node and the names of its parents.
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) parents: Vec<String>,
    pub(crate) kind: Kind,
    /// The records it takes (processors and sinks).
    pub(crate) input: Option<EdgeType>,
    /// The records it forwards, when known (sources, the built-in operators, processors
    /// declared with [`TopologyBuilder::forwards`]).
    pub(crate) output: Option<EdgeType>,
    /// A child it forwards other records to (a windowed aggregate's late-record sink).
    pub(crate) output_to: Option<(String, EdgeType)>,
    /// Indexes of the nodes whose parent this one is (set by `build`).
    pub(crate) children: Vec<usize>,
}

/// Builds a [`Topology`]. Each `add_*` names a node; a mistake (a name used twice, a parent or
/// processor that does not exist) is reported by [`TopologyBuilder::build`], naming it.
#[derive(Default)]
pub struct TopologyBuilder {
    nodes: Vec<Node>,
    stores: Vec<String>,
    errors: Vec<String>,
    default_store: Option<String>,
    unordered: bool,
    /// The tables added: (store name, topic).
    tables: Vec<(String, String)>,
    /// The versioned tables among them: (store name, history).
    versioned: Vec<(String, std::time::Duration)>,
    /// The global tables added.
    globals: Vec<GlobalTable>,
    /// The repartitions added.
    repartitions: Vec<Repartition>,
    /// The topics of tables read as streams of updates ([`TopologyBuilder::add_table_source`]).
    table_sources: Vec<String>,
}

/// A repartition: its name, and the indexes of its sink and source nodes (the topic they
/// write and read is `<app>-<name>-repartition` once the application id is bound).
#[derive(Debug, Clone)]
pub(crate) struct Repartition {
    pub(crate) name: String,
    pub(crate) sink: usize,
    pub(crate) source: usize,
}

impl Repartition {
    /// The repartition topic of `name` under application `app_id`.
    pub(crate) fn topic(app_id: &str, name: &str) -> String {
        format!("{app_id}-{name}-repartition")
    }
}

/// A runnable topology: give it to [`crate::run`] (it is a
/// [`crate::processor::Processor`]) or to [`crate::testing::TopologyTestDriver`].
pub struct Topology {
    pub(crate) nodes: Vec<Node>,
    pub(crate) stores: Vec<String>,
    pub(crate) default_store: String,
    pub(crate) ordered: bool,
    /// The tables: (store name, topic).
    pub(crate) tables: Vec<(String, String)>,
    /// The versioned tables among them: (store name, history).
    pub(crate) versioned: Vec<(String, std::time::Duration)>,
    /// The global tables.
    pub(crate) globals: Vec<GlobalTable>,
    /// The repartitions (their topics are named when the application id is bound).
    pub(crate) repartitions: Vec<Repartition>,
    /// The application id the repartition topics are named for, once bound.
    pub(crate) app_id: Option<String>,
    /// The topics of tables read as streams of updates: inputs, declared compacted.
    pub(crate) table_sources: Vec<String>,
    /// Each node's sub-topology (see [`sub_topologies`]).
    pub(crate) node_sub: Vec<usize>,
    /// How many sub-topologies there are.
    pub(crate) sub_count: usize,
}

/// Splits the nodes into sub-topologies, as Kafka Streams does: the groups of nodes connected
/// by parent–child links or by a store (or table) they share; a repartition topic links
/// nothing (its sink and the source reading it back are separate nodes). Sub-topologies are
/// numbered in the order of their first node, so a topology without repartitions is one
/// sub-topology, `0`. Returns each node's sub-topology and their number.
pub(crate) fn sub_topologies(nodes: &[Node]) -> (Vec<usize>, usize) {
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut parent: Vec<usize> = (0..nodes.len()).collect();
    let union = |parent: &mut Vec<usize>, a: usize, b: usize| {
        let (ra, rb) = (root(parent, a), root(parent, b));
        if ra != rb {
            parent[ra.max(rb)] = ra.min(rb);
        }
    };
    for (i, n) in nodes.iter().enumerate() {
        for &c in &n.children {
            union(&mut parent, i, c);
        }
    }
    let mut by_store: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if let Kind::Processor { stores, .. } = &n.kind {
            for s in stores {
                match by_store.get(s.as_str()) {
                    Some(&j) => union(&mut parent, i, j),
                    None => {
                        by_store.insert(s, i);
                    }
                }
            }
        }
    }
    let mut ids: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    let mut out = Vec::with_capacity(nodes.len());
    for i in 0..nodes.len() {
        let r = root(&mut parent, i);
        let next = ids.len();
        out.push(*ids.entry(r).or_insert(next));
    }
    (out, ids.len().max(1))
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<&str> = self.nodes.iter().map(|n| n.name.as_str()).collect();
        f.debug_struct("Topology")
            .field("nodes", &nodes)
            .field("stores", &self.stores)
            .field("tables", &self.tables)
            .field("globals", &self.globals)
            .field("repartitions", &self.repartitions)
            .finish()
    }
}

impl TopologyBuilder {
    /// An empty topology.
    pub fn new() -> Self {
        Self::default()
    }

    fn add(&mut self, name: &str, parents: &[&str], kind: Kind) -> &mut Self {
        if self.nodes.iter().any(|n| n.name == name) {
            self.errors
                .push(format!("node name {name:?} is used twice"));
        }
        self.nodes.push(Node {
            name: name.to_string(),
            parents: parents.iter().map(|p| p.to_string()).collect(),
            kind,
            input: None,
            output: None,
            output_to: None,
            children: Vec::new(),
        });
        self
    }

    /// The node added last: its record types are set right after it is added.
    fn last_node(&mut self) -> Option<&mut Node> {
        self.nodes.last_mut()
    }

    /// Declares that node `node` forwards `(K, V)` records, so that
    /// [`TopologyBuilder::build`] checks the nodes it feeds against that type. The built-in
    /// operators (sources, joins, windowed aggregates, repartitions), every DSL step and
    /// [`TopologyBuilder::add_processor`] declare theirs.
    pub(crate) fn forwards<K: 'static, V: 'static>(&mut self, node: &str) -> &mut Self {
        match self.nodes.iter_mut().find(|n| n.name == node) {
            Some(
                n @ Node {
                    kind: Kind::Processor { .. },
                    ..
                },
            ) => n.output = Some(EdgeType::of::<K, V>()),
            _ => self.errors.push(format!(
                "forwards() names {node:?}, which is not a processor added before it"
            )),
        }
        self
    }

    /// A source `name` reading `topics` (co-partitioned: the same key lands in the same
    /// partition of each) with key and value serdes. A record that does not deserialize is
    /// dead-lettered as permanent.
    pub fn add_source<K, V>(
        &mut self,
        name: &str,
        topics: impl Topics,
        keys: impl Serde<K> + 'static,
        values: impl Serde<V> + 'static,
    ) -> &mut Self
    where
        K: Clone + Send + 'static,
        V: Clone + Send + 'static,
    {
        let topics: Vec<String> = topics.topic_names();
        if topics.is_empty() {
            self.errors.push(format!("source {name:?} names no topic"));
        }
        let source = name.to_string();
        let decode: Decode = Box::new(move |r: &Record<'_>, event_time: Option<i64>| {
            let bad = |what: &str, e| {
                ProcessError::permanent(format!("source {source} {what} of {}: {e}", r.topic))
            };
            let key = r
                .key
                .map(|k| keys.deserialize(k))
                .transpose()
                .map_err(|e| bad("key", e))?;
            let value = r
                .value
                .map(|v| values.deserialize(v))
                .transpose()
                .map_err(|e| bad("value", e))?;
            Ok(Box::new(TypedRecord {
                key,
                value,
                timestamp: event_time,
                headers: Vec::new(),
            }) as Box<dyn AnyRecord>)
        });
        let time = TimestampExtractor::default();
        self.add(
            name,
            &[],
            Kind::Source {
                topics,
                decode,
                time,
            },
        );
        if let Some(n) = self.last_node() {
            n.output = Some(EdgeType::of::<K, V>());
        }
        self
    }

    /// Reads the event time of source `source`'s records with `extractor` instead of taking
    /// their Kafka timestamp (see [`TimestampExtractor`]).
    pub fn timestamp_extractor(
        &mut self,
        source: &str,
        extractor: TimestampExtractor,
    ) -> &mut Self {
        match self.nodes.iter_mut().find(|n| n.name == source) {
            Some(Node {
                kind: Kind::Source { time, .. },
                ..
            }) => *time = extractor,
            _ => self.errors.push(format!(
                "timestamp extractor for {source:?}, which is not a source added before it"
            )),
        }
        self
    }

    /// A processor node `name` receiving what `parents` forward, as `(K, V)` records, and
    /// forwarding `(K2, V2)` ones to its children through its
    /// [`ProcessorContext`](super::ProcessorContext) (Kafka Streams' `addProcessor`). Both
    /// types are recorded: [`TopologyBuilder::build`] checks every edge into and out of it.
    /// The processor is a [`super::StreamProcessor`] — a closure or a type with timers — and
    /// keeps its state in the stores attached to it ([`TopologyBuilder::add_state_store`]).
    ///
    /// ```
    /// use eosflow::processor::ProcessError;
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    /// use eosflow::topology::{ProcessorContext, Topology, TypedRecord};
    ///
    /// // Each word's length: takes (String, String), forwards (String, i64).
    /// let length = |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>, r: TypedRecord<String, String>| {
    ///     let n = r.value.as_ref().map_or(0, |v| v.len() as i64);
    ///     ctx.forward(TypedRecord::new(r.key, Some(n)));
    ///     Ok::<(), ProcessError>(())
    /// };
    /// let topology = Topology::builder()
    ///     .add_source("words", "words", StringSerde, StringSerde)
    ///     .add_processor("length", length, &["words"])
    ///     .add_sink("out", "lengths", StringSerde, I64Serde, &["length"])
    ///     .build()?;
    /// let mut driver = TopologyTestDriver::new(topology)?;
    /// driver.pipe_input("words", &StringSerde, &StringSerde, &"w".to_string(), &"kafka".to_string())?;
    /// let out = driver.read_output("lengths", &StringSerde, &I64Serde)?;
    /// assert_eq!(out, vec![(Some("w".to_string()), Some(5))]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_processor<K, V, K2, V2>(
        &mut self,
        name: &str,
        processor: impl super::StreamProcessor<K, V, K2, V2> + 'static,
        parents: &[&str],
    ) -> &mut Self
    where
        K: 'static,
        V: 'static,
        K2: Clone + Send + 'static,
        V2: Clone + Send + 'static,
    {
        let node = super::processor::ProcessorNode::<_, K2, V2>::new(processor);
        self.add_node::<K, V>(name, node, parents);
        self.forwards::<K2, V2>(name)
    }

    /// A node of the topology's own operators (and the DSL's steps), written against the
    /// untyped `NodeContext`: its output type is declared apart with
    /// [`TopologyBuilder::forwards`], where it has one.
    pub(crate) fn add_node<K, V>(
        &mut self,
        name: &str,
        processor: impl NodeProcessor<K, V> + 'static,
        parents: &[&str],
    ) -> &mut Self
    where
        K: 'static,
        V: 'static,
    {
        let node = Box::new(Typed {
            inner: processor,
            _types: PhantomData,
        });
        self.add(
            name,
            parents,
            Kind::Processor {
                node,
                stores: Vec::new(),
            },
        );
        if let Some(n) = self.last_node() {
            n.input = Some(EdgeType::of::<K, V>());
        }
        self
    }

    /// A state store attached to `processors` (its changelog is `<app>-<name>-changelog`).
    pub fn add_state_store<K, V>(
        &mut self,
        store: &StoreHandle<K, V>,
        processors: &[&str],
    ) -> &mut Self {
        self.attach_store(store.name(), processors)
    }

    /// A windowed store attached to `processors` (a named store with its own changelog,
    /// opened with [`super::ProcessorContext::window_store`]).
    pub fn add_window_store<K, V>(
        &mut self,
        store: &WindowStoreHandle<K, V>,
        processors: &[&str],
    ) -> &mut Self {
        self.attach_store(store.name(), processors)
    }

    /// A windowed aggregate node `name` over what `parents` forward (keyed `(K, V)` records),
    /// with its windowed store attached; it forwards `(Windowed<K>, A)` results (see
    /// [`super::windows`]).
    pub fn add_windowed_aggregate<K, V, A>(
        &mut self,
        name: &str,
        aggregate: WindowedAggregate<K, V, A>,
        parents: &[&str],
    ) -> &mut Self
    where
        K: Clone + Send + 'static,
        V: Clone + Send + 'static,
        A: Clone + Send + 'static,
    {
        if let Err(e) = aggregate.check() {
            self.errors
                .push(format!("windowed aggregate {name:?}: {e}"));
        }
        let store = aggregate.store().name().to_string();
        let late_child = aggregate.late_child().map(str::to_string);
        self.add_node(name, aggregate, parents);
        self.forwards::<super::windows::Windowed<K>, A>(name);
        if let Some(n) = self.last_node() {
            n.output_to = late_child.map(|c| (c, EdgeType::of::<K, V>()));
        }
        self.attach_store(&store, &[name])
    }

    fn attach_store(&mut self, name: &str, processors: &[&str]) -> &mut Self {
        let name = name.to_string();
        if self.stores.contains(&name) {
            self.errors.push(format!("store {name:?} is added twice"));
        } else {
            self.stores.push(name.clone());
        }
        for p in processors {
            match self.nodes.iter_mut().find(|n| n.name == *p) {
                Some(Node {
                    kind: Kind::Processor { stores, .. },
                    ..
                }) => stores.push(name.clone()),
                _ => self.errors.push(format!(
                    "store {name:?} is attached to {p:?}, which is not a processor added before it"
                )),
            }
        }
        self
    }

    /// A table materializing `table`'s topic (see [`super::tables`]): the topic is consumed
    /// with the sources (co-partitioned with them) and is the table's changelog — no
    /// `<app>-<name>-changelog` is created. Join it with
    /// [`TopologyBuilder::add_stream_table_join`] or
    /// [`TopologyBuilder::add_stream_table_left_join`].
    pub fn add_table<K, V>(&mut self, table: &TableHandle<K, V>) -> &mut Self {
        let (name, topic) = (table.name().to_string(), table.topic().to_string());
        if self.tables.iter().any(|(n, _)| *n == name) {
            self.errors.push(format!("table {name:?} is added twice"));
        }
        if let Some(history) = table.history() {
            self.versioned.push((name.clone(), history));
        }
        self.tables.push((name, topic));
        self
    }

    /// An inner stream-table join node `name`: each `(K, V)` record its `parents` forward is
    /// looked up in `table` by key; when the table has the key, `joiner(key, value, row)` is
    /// forwarded as `(K, R)` (nothing if it returns `None`). A record whose key the table
    /// lacks gives nothing and is counted (`eosflow_join_dropped_records_total`). The table
    /// must be added first ([`TopologyBuilder::add_table`]).
    pub fn add_stream_table_join<K, V, T, R>(
        &mut self,
        name: &str,
        table: &TableHandle<K, T>,
        joiner: impl Fn(&K, &V, &T) -> Option<R> + Send + 'static,
        parents: &[&str],
    ) -> &mut Self
    where
        K: Clone + Send + 'static,
        V: Send + 'static,
        T: 'static,
        R: Clone + Send + 'static,
    {
        let joiner = move |k: &K, v: &V, t: Option<&T>| t.and_then(|t| joiner(k, v, t));
        self.add_join(name, parents, table, Box::new(joiner), false, None)
    }

    /// A left stream-table join node `name`: as [`TopologyBuilder::add_stream_table_join`],
    /// but a record whose key the table lacks is joined with `None`.
    pub fn add_stream_table_left_join<K, V, T, R>(
        &mut self,
        name: &str,
        table: &TableHandle<K, T>,
        joiner: impl Fn(&K, &V, Option<&T>) -> Option<R> + Send + 'static,
        parents: &[&str],
    ) -> &mut Self
    where
        K: Clone + Send + 'static,
        V: Send + 'static,
        T: 'static,
        R: Clone + Send + 'static,
    {
        self.add_join(name, parents, table, Box::new(joiner), true, None)
    }

    /// A stream-table join node `name` (inner, or `left`), with a grace period when `grace`
    /// is set (Kafka Streams' `Joined.withGracePeriod`): stream records wait in a durable
    /// buffer until stream time passes their timestamp by the grace, then join the table's
    /// version at their timestamp (see [`super::tables`]). With a grace the table must be
    /// versioned with a history at least as long, else [`TopologyBuilder::build`] fails.
    pub(crate) fn add_stream_table_join_with<K, V, T, R>(
        &mut self,
        name: &str,
        table: &TableHandle<K, T>,
        joiner: super::tables::Joiner<K, V, T, R>,
        left: bool,
        grace: Option<super::tables::JoinGrace<K, V>>,
        parents: &[&str],
    ) -> &mut Self
    where
        K: Clone + Send + 'static,
        V: Send + 'static,
        T: 'static,
        R: Clone + Send + 'static,
    {
        let grace_ms = grace.as_ref().map(|g| g.ms);
        match (grace_ms, table.history()) {
            (None, _) => {}
            (Some(_), None) => self.errors.push(format!(
                "join {name:?} has a grace period but table {:?} is not versioned: a table must be versioned to use a grace period in a stream-table join",
                table.name()
            )),
            (Some(ms), Some(history))
                if i64::try_from(history.as_millis()).unwrap_or(i64::MAX) < ms =>
            {
                self.errors.push(format!(
                    "join {name:?}: the history of table {:?} ({history:?}) is shorter than the join's grace period ({ms} ms): history retention must be at least the grace period",
                    table.name(),
                ))
            }
            (Some(_), Some(_)) => {}
        }
        self.add_join(name, parents, table, joiner, left, grace)
    }

    fn add_join<K, V, T, R>(
        &mut self,
        name: &str,
        parents: &[&str],
        table: &TableHandle<K, T>,
        joiner: super::tables::Joiner<K, V, T, R>,
        left: bool,
        grace: Option<super::tables::JoinGrace<K, V>>,
    ) -> &mut Self
    where
        K: Clone + Send + 'static,
        V: Send + 'static,
        T: 'static,
        R: Clone + Send + 'static,
    {
        let known = self
            .tables
            .iter()
            .any(|(n, t)| n == table.name() && t == table.topic());
        if !known {
            self.errors.push(format!(
                "join {name:?} reads table {:?} of {:?}, which is not added before it (add_table)",
                table.name(),
                table.topic()
            ));
        }
        let node = StreamTableJoin {
            table: table.store().clone(),
            joiner,
            left,
            as_of: table.history().is_some(),
            grace,
            _types: PhantomData,
        };
        self.add_node(name, node, parents);
        self.forwards::<K, R>(name);
        if let Some(Node {
            kind: Kind::Processor { stores, .. },
            ..
        }) = self.nodes.last_mut()
        {
            stores.push(table.name().to_string());
        }
        self
    }

    /// A global table replicating every partition of `table`'s topic on every instance (see
    /// [`super::globals`]): read to the end before processing starts, kept current by a thread
    /// of its own, not co-partitioned with the sources and without a changelog of its own.
    /// Join it with [`TopologyBuilder::add_stream_global_table_join`] or
    /// [`TopologyBuilder::add_stream_global_table_left_join`].
    pub fn add_global_table<K: 'static, V: 'static>(
        &mut self,
        table: &GlobalTableHandle<K, V>,
    ) -> &mut Self {
        if self.globals.iter().any(|g| g.name() == table.name()) {
            self.errors
                .push(format!("global table {:?} is added twice", table.name()));
        }
        self.globals.push(GlobalTable::of(table));
        self
    }

    /// An inner stream-global-table join node `name`: each `(K, V)` record its `parents`
    /// forward is mapped to the table's key by `key_extractor` (which gets `None` for a keyless
    /// record: Kafka Streams 3.7 joins those too, KIP-962) and looked up in `table` as it
    /// stands now; when the table has a row, `joiner(key, value, row)` is forwarded as
    /// `(K, R)`, keyless for a keyless record (nothing if it returns `None`). A record without
    /// a value or a row, or whose extractor returns `None`, gives nothing and is counted
    /// (`eosflow_join_dropped_records_total`). The global table must be added first
    /// ([`TopologyBuilder::add_global_table`]).
    pub fn add_stream_global_table_join<K, V, GK, T, R>(
        &mut self,
        name: &str,
        table: &GlobalTableHandle<GK, T>,
        key_extractor: impl Fn(Option<&K>, &V) -> Option<GK> + Send + 'static,
        joiner: impl Fn(Option<&K>, &V, &T) -> Option<R> + Send + 'static,
        parents: &[&str],
    ) -> &mut Self
    where
        K: Clone + Send + 'static,
        V: Send + 'static,
        GK: 'static,
        T: 'static,
        R: Clone + Send + 'static,
    {
        let joiner = move |k: Option<&K>, v: &V, t: Option<&T>| t.and_then(|t| joiner(k, v, t));
        let extractor = Box::new(key_extractor);
        self.add_global_join(name, parents, table, extractor, Box::new(joiner), false)
    }

    /// A left stream-global-table join node `name`: as
    /// [`TopologyBuilder::add_stream_global_table_join`], but a record without a row is joined
    /// with `None`. A record whose extractor returns `None` is dropped as by the inner join,
    /// unless it has no key either: then it is joined with `None` (Kafka Streams' rule).
    pub fn add_stream_global_table_left_join<K, V, GK, T, R>(
        &mut self,
        name: &str,
        table: &GlobalTableHandle<GK, T>,
        key_extractor: impl Fn(Option<&K>, &V) -> Option<GK> + Send + 'static,
        joiner: impl Fn(Option<&K>, &V, Option<&T>) -> Option<R> + Send + 'static,
        parents: &[&str],
    ) -> &mut Self
    where
        K: Clone + Send + 'static,
        V: Send + 'static,
        GK: 'static,
        T: 'static,
        R: Clone + Send + 'static,
    {
        let extractor = Box::new(key_extractor);
        self.add_global_join(name, parents, table, extractor, Box::new(joiner), true)
    }

    fn add_global_join<K, V, GK, T, R>(
        &mut self,
        name: &str,
        parents: &[&str],
        table: &GlobalTableHandle<GK, T>,
        extractor: super::globals::KeyExtractor<K, V, GK>,
        joiner: super::globals::GlobalJoiner<K, V, T, R>,
        left: bool,
    ) -> &mut Self
    where
        K: Clone + Send + 'static,
        V: Send + 'static,
        GK: 'static,
        T: 'static,
        R: Clone + Send + 'static,
    {
        let slot = self
            .globals
            .iter()
            .find(|g| g.name() == table.name() && g.topic() == table.topic())
            .map(|g| g.slot.clone());
        let Some(slot) = slot else {
            self.errors.push(format!(
                "join {name:?} reads global table {:?} of {:?}, which is not added before it (add_global_table)",
                table.name(),
                table.topic()
            ));
            return self;
        };
        let node = StreamGlobalTableJoin {
            table: table.name().to_string(),
            slot,
            keys: table.key_serde_arc(),
            values: table.value_serde_arc(),
            extractor,
            joiner,
            left,
            _types: PhantomData,
        };
        self.add_node(name, node, parents);
        self.forwards::<K, R>(name)
    }

    /// Lets `processors` read `table` with [`super::ProcessorContext::store`]`(table.store())`
    /// (read-only: a table changes only through its topic).
    pub fn attach_table<K, V>(
        &mut self,
        table: &TableHandle<K, V>,
        processors: &[&str],
    ) -> &mut Self {
        for p in processors {
            match self.nodes.iter_mut().find(|n| n.name == *p) {
                Some(Node {
                    kind: Kind::Processor { stores, .. },
                    ..
                }) => stores.push(table.name().to_string()),
                _ => self.errors.push(format!(
                    "table {:?} is attached to {p:?}, which is not a processor added before it",
                    table.name()
                )),
            }
        }
        self
    }

    /// A stream-stream join `name` of the `(K, V1)` records `left_parents` forward with the
    /// `(K, V2)` records `right_parents` forward, within `join`'s windows (see
    /// [`super::stream_joins`]); it forwards `(K, R)` results: attach children to `name`.
    /// Adds the nodes `<name>-left` and `<name>-right` (each side's records) and `name`
    /// (their results), and `join`'s two windowed stores, attached to both side nodes and
    /// changelogged like every store. Both inputs must be co-partitioned.
    pub fn add_stream_stream_join<K, V1, V2, R>(
        &mut self,
        name: &str,
        join: StreamJoin<K, V1, V2, R>,
        left_parents: &[&str],
        right_parents: &[&str],
    ) -> &mut Self
    where
        K: Clone + Send + 'static,
        V1: Clone + Send + 'static,
        V2: Clone + Send + 'static,
        R: Clone + Send + 'static,
    {
        if let Err(e) = join.check() {
            self.errors
                .push(format!("stream-stream join {name:?}: {e}"));
        }
        let (left_store, right_store) = join.store_names();
        let (left, right) = join.into_nodes();
        let (l, r) = (format!("{name}-left"), format!("{name}-right"));
        self.add_node(&l, left, left_parents);
        self.forwards::<K, R>(&l);
        self.add_node(&r, right, right_parents);
        self.forwards::<K, R>(&r);
        let results = |ctx: &mut super::NodeContext<'_, '_>, record: TypedRecord<K, R>| {
            ctx.forward(record);
            Ok(())
        };
        self.add_node(name, results, &[&l, &r]);
        self.forwards::<K, R>(name);
        self.attach_store(&left_store, &[&l, &r]);
        self.attach_store(&right_store, &[&l, &r])
    }

    /// A **table source** `name`: `table`'s topic read as a stream of the table's updates, for
    /// a node that needs each change rather than lookups — a table-table join
    /// ([`TopologyBuilder::add_table_table_join`]). Each record is forwarded as `(K, V)`, an
    /// upsert of its key, or `(K, None)`, a tombstone deleting it; nothing is materialized here
    /// (the join keeps the rows it needs in its own changelogged stores). It is an input like a
    /// source's — co-partitioned, aligned by timestamp with the task's other inputs, deduplicated
    /// by `id`, an undecodable record dead-lettered as permanent — and
    /// [`Topology::topics`] declares its topic compacted. A plain table only: a versioned one is
    /// refused (its versions would be lost).
    pub fn add_table_source<K, V>(&mut self, name: &str, table: &TableHandle<K, V>) -> &mut Self
    where
        K: Clone + Send + 'static,
        V: Clone + Send + 'static,
    {
        if table.history().is_some() {
            self.errors.push(format!(
                "table source {name:?}: table {:?} is versioned, and a table source forwards latest rows only",
                table.name()
            ));
        }
        let (keys, values) = table.store().serde_arcs();
        self.table_sources.push(table.topic().to_string());
        self.add_source(name, table.topic(), keys, values)
    }

    /// A table-table join `name` of the table whose updates `left_parents` forward (`(K, V1)`
    /// rows, tombstones deleting them) with the table whose updates `right_parents` forward
    /// (`(K, V2)`), into a result table of `(K, R)` rows (see [`super::table_joins`]); it
    /// forwards the result table's changes: attach children to `name`. Adds the nodes
    /// `<name>-left` and `<name>-right` (each side's updates) and `name` (their results), and
    /// `join`'s three stores (each side's rows, the result), attached to both side nodes and
    /// changelogged like every store. Both sides must be co-partitioned: the shared stores put
    /// them in one sub-topology, whose task aligns them by timestamp.
    pub fn add_table_table_join<K, V1, V2, R>(
        &mut self,
        name: &str,
        join: TableJoin<K, V1, V2, R>,
        left_parents: &[&str],
        right_parents: &[&str],
    ) -> &mut Self
    where
        K: Clone + Send + 'static,
        V1: Clone + Send + 'static,
        V2: Clone + Send + 'static,
        R: Clone + Send + 'static,
    {
        if let Err(e) = join.check() {
            self.errors.push(format!("table-table join {name:?}: {e}"));
        }
        let stores = join.store_names();
        let (left, right) = join.into_nodes();
        let (l, r) = (format!("{name}-left"), format!("{name}-right"));
        self.add_node(&l, left, left_parents);
        self.forwards::<K, R>(&l);
        self.add_node(&r, right, right_parents);
        self.forwards::<K, R>(&r);
        let results = |ctx: &mut super::NodeContext<'_, '_>, record: TypedRecord<K, R>| {
            ctx.forward(record);
            Ok(())
        };
        self.add_node(name, results, &[&l, &r]);
        self.forwards::<K, R>(name);
        for store in &stores {
            self.attach_store(store, &[&l, &r]);
        }
        self
    }

    /// A foreign-key join `name` (Kafka Streams' KIP-213; see [`super::fk_join`]) of the left
    /// table whose updates `left_parents` forward with the right table whose updates
    /// `right_parents` forward; its result table's changes come out of node `name`. Adds the
    /// nodes `<name>-left`, `<name>-subscriptions`, `<name>-right` and the repartition topics
    /// `<app>-<name>-subscription-repartition` and `<app>-<name>-response-repartition`.
    pub fn add_foreign_key_join<KL, VL, KR, VR, R>(
        &mut self,
        name: &str,
        join: super::ForeignKeyJoin<KL, VL, KR, VR, R>,
        left_parents: &[&str],
        right_parents: &[&str],
    ) -> &mut Self
    where
        KL: Clone + Send + 'static,
        VL: Clone + Send + 'static,
        KR: Clone + Send + 'static,
        VR: Clone + Send + 'static,
        R: Clone + Send + 'static,
    {
        use crate::serdes::BytesSerde;
        if let Err(e) = join.check() {
            self.errors.push(format!("foreign-key join {name:?}: {e}"));
        }
        let nodes = join.into_nodes(name);
        let left = format!("{name}-left");
        let subscription = format!("{name}-subscription");
        let subscriptions = format!("{name}-subscriptions");
        let right = format!("{name}-right");
        let response = format!("{name}-response");
        self.add_node(&left, nodes.subscribe, left_parents);
        self.forwards::<Vec<u8>, Vec<u8>>(&left);
        self.add_repartition(
            &subscription,
            |_: Option<&Vec<u8>>, v: &Vec<u8>| super::fk_join::subscription_fk(v),
            BytesSerde,
            BytesSerde,
            &[&left],
        );
        self.add_node(&subscriptions, nodes.subscriptions, &[&subscription]);
        self.forwards::<Vec<u8>, Vec<u8>>(&subscriptions);
        self.add_node(&right, nodes.right, right_parents);
        self.forwards::<Vec<u8>, Vec<u8>>(&right);
        self.add_repartition(
            &response,
            |k: Option<&Vec<u8>>, _: &Vec<u8>| k.cloned(),
            BytesSerde,
            BytesSerde,
            &[&subscriptions, &right],
        );
        self.add_node(name, nodes.resolve, &[&response, &left]);
        self.forwards::<KL, R>(name);
        for store in &nodes.stores.left {
            self.attach_store(store, &[&left, name]);
        }
        for store in &nodes.stores.right {
            self.attach_store(store, &[&subscriptions, &right]);
        }
        self
    }

    /// A sink `name` writing what `parents` forward to `topic`, serialized with these serdes.
    pub fn add_sink<K, V>(
        &mut self,
        name: &str,
        topic: impl AsRef<str>,
        keys: impl Serde<K> + 'static,
        values: impl Serde<V> + 'static,
        parents: &[&str],
    ) -> &mut Self
    where
        K: 'static,
        V: 'static,
    {
        let sink = name.to_string();
        let encode: Encode = Box::new(move |node: &str, record: Box<dyn AnyRecord>| {
            let r = downcast::<K, V>(node, record)?;
            let bad = |what: &str, e| ProcessError::permanent(format!("sink {sink} {what}: {e}"));
            let key = r
                .key
                .as_ref()
                .map(|k| keys.serialize(k))
                .transpose()
                .map_err(|e| bad("key", e))?;
            let value = r
                .value
                .as_ref()
                .map(|v| values.serialize(v))
                .transpose()
                .map_err(|e| bad("value", e))?;
            Ok((key, value, r.headers, r.timestamp))
        });
        self.add(
            name,
            parents,
            Kind::Sink {
                topic: topic.as_ref().to_string(),
                encode,
            },
        );
        if let Some(n) = self.last_node() {
            n.input = Some(EdgeType::of::<K, V>());
        }
        self
    }

    /// Re-keys what `parents` forward through the internal topic `<app>-<name>-repartition`
    /// (Kafka Streams' `selectKey` + `repartition()`): each `(K, V)` record is written there
    /// as `(key_fn(key, value), value)`, inside the transaction of the input that caused it,
    /// and read back by a source node named `name` — attach the downstream nodes to `name`.
    /// The topic is partitioned by the new key like every output, so a store downstream sees
    /// every record of a new key in one partition, exactly once.
    ///
    /// A record keeps its event time (the repartition record's timestamp) and its headers
    /// (correlation and tenant carried; causation is the input's id). A tombstone (no value)
    /// or a record whose `key_fn` returns `None` is not written. The topic (the inputs'
    /// partition count, `cleanup.policy=delete`) is one of
    /// [`Topology::internal_topics`]; records read from it follow the rules of every input:
    /// its own retry levels and DLT, dedup by their own fresh `id`. Consumed records are not
    /// purged (no DeleteRecords): the topic's retention bounds it.
    ///
    /// ```
    /// use eosflow::processor::StoreHandle;
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    /// use eosflow::topology::{ProcessorContext, Topology, TypedRecord};
    ///
    /// // Orders keyed by order id, valued `customer:item`, counted per customer.
    /// let counts = StoreHandle::new("counts", StringSerde, I64Serde);
    /// let store = counts.clone();
    /// let count = move |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>, r: TypedRecord<String, String>| {
    ///     let customer = r.key.unwrap_or_default();
    ///     let mut s = ctx.store(&store)?;
    ///     let n = s.get(&customer)?.unwrap_or(0) + 1;
    ///     s.put(&customer, &n)?;
    ///     ctx.forward(TypedRecord::new(Some(customer), Some(n)));
    ///     Ok(())
    /// };
    /// let topology = Topology::builder()
    ///     .add_source("orders", &["orders"], StringSerde, StringSerde)
    ///     .add_repartition(
    ///         "by-customer",
    ///         |_order: Option<&String>, v: &String| v.split_once(':').map(|(c, _)| c.to_string()),
    ///         StringSerde,
    ///         StringSerde,
    ///         &["orders"],
    ///     )
    ///     .add_processor("count", count, &["by-customer"])
    ///     .add_state_store(&counts, &["count"])
    ///     .add_sink("out", "counts", StringSerde, I64Serde, &["count"])
    ///     .build()?;
    ///
    /// // The driver (application id `test`) pipes what reaches the repartition topic back in.
    /// let mut driver = TopologyTestDriver::new(topology)?;
    /// driver.pipe(TestRecord::new("orders", Some("o-1"), Some("ann:book")).partition(0))?;
    /// driver.pipe(TestRecord::new("orders", Some("o-2"), Some("ann:pen")).partition(3))?;
    /// let out = driver.read_output("counts", &StringSerde, &I64Serde)?;
    /// assert_eq!(out, vec![(Some("ann".into()), Some(1)), (Some("ann".into()), Some(2))]);
    /// assert_eq!(driver.read_raw_output("test-by-customer-repartition").len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_repartition<K, V, K2>(
        &mut self,
        name: &str,
        key_fn: impl Fn(Option<&K>, &V) -> Option<K2> + Send + 'static,
        keys: impl Serde<K2> + 'static,
        values: impl Serde<V> + 'static,
        parents: &[&str],
    ) -> &mut Self
    where
        K: Clone + Send + 'static,
        V: Clone + Send + 'static,
        K2: Clone + Send + 'static,
    {
        let select = format!("{name}-select-key");
        let sink = format!("{name}-repartition-sink");
        let rekey = move |ctx: &mut super::NodeContext<'_, '_>, r: TypedRecord<K, V>| {
            let Some(value) = r.value else {
                return Ok(());
            };
            if let Some(key) = key_fn(r.key.as_ref(), &value) {
                ctx.forward(TypedRecord {
                    key: Some(key),
                    value: Some(value),
                    timestamp: r.timestamp,
                    headers: r.headers,
                });
            }
            Ok(())
        };
        // Until bound, the topic is named for a placeholder application.
        let topic = Repartition::topic("<app>", name);
        let (keys, values) = (std::sync::Arc::new(keys), std::sync::Arc::new(values));
        self.add_node(&select, rekey, parents);
        self.forwards::<K2, V>(&select);
        self.add_sink(&sink, &topic, keys.clone(), values.clone(), &[&select]);
        let sink_at = self.nodes.len() - 1;
        self.add_source(name, &[&topic], keys, values);
        let source_at = self.nodes.len() - 1;
        self.repartitions.push(Repartition {
            name: name.to_string(),
            sink: sink_at,
            source: source_at,
        });
        self
    }

    /// Names the default store (dedup ids, parked keys, and `Context::get/put`), and so its
    /// changelog `<app>-<name>-changelog`; `state` when not set.
    pub fn default_store(&mut self, name: &str) -> &mut Self {
        self.default_store = Some(name.to_string());
        self
    }

    /// Whether a key's later records wait behind one in the retry ladder (default: yes).
    pub fn ordered(&mut self, ordered: bool) -> &mut Self {
        self.unordered = !ordered;
        self
    }

    /// Checks every name and links parents to children.
    pub fn build(&mut self) -> Result<Topology, TopologyError> {
        let mut errors = std::mem::take(&mut self.errors);
        let mut nodes = std::mem::take(&mut self.nodes);
        let default_store = self.default_store.take().unwrap_or_else(|| "state".into());
        if self.stores.contains(&default_store) {
            errors.push(format!(
                "store {default_store:?} is also the default store's name"
            ));
        }
        for g in &self.globals {
            let (name, topic) = (g.name(), g.topic());
            if self.stores.iter().any(|s| s == name)
                || name == default_store
                || self.tables.iter().any(|(t, _)| t == name)
            {
                errors.push(format!(
                    "global table {name:?} has the name of a store or table"
                ));
            }
            let read_by_source = nodes.iter().any(
                |n| matches!(&n.kind, Kind::Source { topics, .. } if topics.iter().any(|t| t == topic)),
            );
            if read_by_source || self.tables.iter().any(|(_, t)| t == topic) {
                errors.push(format!(
                    "topic {topic:?} of global table {name:?} is also read by a source or a table"
                ));
            }
        }
        for (name, topic) in &self.tables {
            if self.stores.contains(name) || *name == default_store {
                errors.push(format!("table {name:?} has the name of a store"));
            }
            if nodes
                .iter()
                .any(|n| matches!(&n.kind, Kind::Source { topics, .. } if topics.contains(topic)))
            {
                errors.push(format!(
                    "topic {topic:?} is read by a source and by table {name:?}"
                ));
            }
        }
        let mut seen_topics: Vec<&str> = Vec::new();
        for n in &nodes {
            match &n.kind {
                Kind::Source { topics, .. } => {
                    for t in topics {
                        if seen_topics.contains(&t.as_str()) {
                            errors.push(format!("topic {t:?} is read by two sources"));
                        }
                        seen_topics.push(t);
                    }
                }
                _ if n.parents.is_empty() => {
                    errors.push(format!("node {:?} has no parent", n.name))
                }
                _ => {}
            }
        }
        if seen_topics.is_empty() {
            errors.push("the topology has no source".into());
        }
        let mut links = Vec::new();
        for (child, n) in nodes.iter().enumerate() {
            for p in &n.parents {
                match nodes.iter().position(|m| m.name == *p) {
                    Some(i) if i >= child => errors.push(format!(
                        "node {:?} names {p:?} as its parent, which is added after it",
                        n.name
                    )),
                    Some(i) if matches!(nodes[i].kind, Kind::Sink { .. }) => {
                        errors.push(format!("node {:?} names sink {p:?} as its parent", n.name))
                    }
                    Some(i) => links.push((i, child)),
                    None => errors.push(format!(
                        "node {:?} names {p:?} as its parent, which does not exist",
                        n.name
                    )),
                }
            }
        }
        if !errors.is_empty() {
            return Err(TopologyError::Invalid(errors.join("; ")));
        }
        for &(parent, child) in &links {
            let (from, to) = (&nodes[parent], &nodes[child]);
            let out = match &from.output_to {
                Some((c, t)) if *c == to.name => Some(*t),
                _ => from.output,
            };
            if let (Some(out), Some(input)) = (out, to.input) {
                if out.id != input.id {
                    errors.push(format!(
                        "node {:?} takes {input} records but its parent {:?} forwards {out}",
                        to.name, from.name
                    ));
                }
            }
        }
        if !errors.is_empty() {
            return Err(TopologyError::Invalid(errors.join("; ")));
        }
        for (parent, child) in links {
            nodes[parent].children.push(child);
        }
        let (node_sub, sub_count) = sub_topologies(&nodes);
        if sub_count > crate::processor::timers::MAX_SUB_TOPOLOGIES {
            return Err(TopologyError::Invalid(format!(
                "the topology has {sub_count} sub-topologies (repartitions split it); at most {} are supported",
                crate::processor::timers::MAX_SUB_TOPOLOGIES
            )));
        }
        Ok(Topology {
            node_sub,
            sub_count,
            nodes,
            stores: std::mem::take(&mut self.stores),
            default_store,
            ordered: !self.unordered,
            tables: std::mem::take(&mut self.tables),
            versioned: std::mem::take(&mut self.versioned),
            globals: std::mem::take(&mut self.globals),
            repartitions: std::mem::take(&mut self.repartitions),
            table_sources: std::mem::take(&mut self.table_sources),
            app_id: None,
        })
    }
}
