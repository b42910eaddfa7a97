//! [`StreamsBuilder`]: the DSL's graph of steps, named and emitted into a
//! [`TopologyBuilder`] when built.

use std::cell::RefCell;
use std::marker::PhantomData;

use std::time::Duration;

use super::options::Consumed;
use super::stream::KStream;
use super::table::{GlobalKTable, KTable};
use super::Data;
use crate::topology::{GlobalTableHandle, TableHandle, Topology, TopologyBuilder, TopologyError};

/// What a step needs to add its nodes: its own name, its parents' names, and every step's
/// final name (a split forwards to its branches by name).
pub(crate) struct Wiring<'a> {
    pub(crate) id: usize,
    pub(crate) name: &'a str,
    pub(crate) parents: Vec<&'a str>,
    pub(crate) names: &'a [String],
    /// The step is a table read from a topic whose updates a step downstream needs (a
    /// table-table join): its topic is read by a source named after the table, which forwards
    /// each upsert and tombstone, instead of being materialized by the runtime.
    pub(crate) updates: bool,
}

/// Adds one step's nodes (and stores) to the topology builder.
pub(crate) type AddFn = Box<dyn FnOnce(&mut TopologyBuilder, &Wiring<'_>) + Send>;

/// One DSL operation: one node of the topology (a repartition: three, named after it).
struct Step {
    name: String,
    parents: Vec<usize>,
    add: AddFn,
}

/// The steps so far, the counter of generated names, and the mistakes found while adding.
#[derive(Default)]
struct Graph {
    counter: usize,
    steps: Vec<Step>,
    errors: Vec<String>,
    /// Steps of tables read from a topic whose updates are needed ([`Wiring::updates`]).
    updates: Vec<usize>,
    /// Steps of tables read from a topic that a stream looks rows up in, with what does.
    lookups: Vec<(usize, String)>,
}

/// Builds a [`Topology`] from typed streams and tables: Kafka Streams' `StreamsBuilder`.
///
/// Every operation adds one step to the builder and returns a typed handle to its output
/// ([`KStream`], [`super::KTable`], …); handles borrow the builder, so nothing can be added
/// after [`StreamsBuilder::build`] (the borrow checker says so; merging in a stream of another
/// builder is reported by `build`). [`StreamsBuilder::build`] emits the steps, in the order
/// they were added, as nodes of the existing [`TopologyBuilder`]: the result is the same
/// [`Topology`] that `eosflow::run` and the `TopologyTestDriver` run.
///
/// Nodes get Kafka Streams' generated names (`KSTREAM-FILTER-0000000001`: the operation and a
/// counter shared by the whole builder) unless renamed with `named`. Stores and repartition
/// topics are named the same way; name them ([`super::Materialized::named`],
/// [`super::Grouped::named`]) in an application that will change: a generated name moves when
/// a step is added before it, and with it the changelog or repartition topic.
///
/// # Example: word count
///
/// ```
/// use eosflow::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
/// use eosflow::serdes::{I64Serde, StringSerde};
/// use eosflow::testing::{TestRecord, TopologyTestDriver};
///
/// let builder = StreamsBuilder::new();
/// let counts = builder
///     .stream("lines", Consumed::with(StringSerde, StringSerde))
///     .flat_map_values(|line: &String| {
///         line.split_whitespace().map(str::to_lowercase).collect::<Vec<_>>()
///     })
///     .group_by(|_, word: &String| word.clone(), Grouped::with(StringSerde, StringSerde))
///     .count(Materialized::with(StringSerde, I64Serde).named("word-counts"));
/// counts
///     .to_stream()
///     .to("counts", Produced::with(StringSerde, I64Serde));
/// let store = counts.store().clone();
/// let topology = builder.build()?;
///
/// let mut driver = TopologyTestDriver::new(topology)?;
/// driver.pipe(TestRecord::new("lines", None::<&str>, Some("the cat and the hat")))?;
/// let out = driver.read_output("counts", &StringSerde, &I64Serde)?;
/// assert_eq!(out.last(), Some(&(Some("hat".to_string()), Some(1))));
/// assert_eq!(driver.store_get(&store, &"the".to_string())?, Some(2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Default)]
pub struct StreamsBuilder {
    graph: RefCell<Graph>,
}

impl std::fmt::Debug for StreamsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let graph = self.graph.borrow();
        let steps: Vec<&str> = graph.steps.iter().map(|s| s.name.as_str()).collect();
        f.debug_struct("StreamsBuilder")
            .field("steps", &steps)
            .field("errors", &graph.errors)
            .finish()
    }
}

impl StreamsBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// The records of `topic`, keys and values read with `consumed`'s serdes. A record that
    /// does not deserialize is dead-lettered as permanent (the source's rule).
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    ///
    /// let builder = StreamsBuilder::new();
    /// let lines = builder.stream("lines", Consumed::with(StringSerde, StringSerde));
    /// assert_eq!(lines.name(), "KSTREAM-SOURCE-0000000000");
    /// ```
    pub fn stream<K: Data, V: Data>(
        &self,
        topic: impl AsRef<str>,
        consumed: Consumed<K, V>,
    ) -> KStream<'_, K, V> {
        let topic = topic.as_ref().to_string();
        let Consumed {
            keys,
            values,
            name,
            extractor,
        } = consumed;
        let add: AddFn = Box::new(move |b, w| {
            b.add_source(w.name, &[topic.as_str()], keys, values);
            if let Some(extractor) = extractor {
                b.timestamp_extractor(w.name, extractor);
            }
        });
        let id = self.push("KSTREAM-SOURCE-", name, Vec::new(), add);
        KStream::new(self, id, false)
    }

    /// The compacted topic `topic` as a table (Kafka Streams' `builder.table`): each record
    /// an upsert of its key, a tombstone a delete, kept in a store per partition named
    /// [`Consumed::named`]'s name, or the topic's. The topic is co-partitioned with the
    /// streams (each stream partition joins the same table partition) and is the table's
    /// changelog: no `<app>-<name>-changelog` copy, so `consumed`'s serdes are the store's too
    /// — no `Materialized` is needed to give them again. The runtime reads the table's records
    /// and the streams' in timestamp order, so a stream record joins the row its key had at
    /// the record's time, across restarts (see [`crate::topology::tables`]).
    ///
    /// A stream joins it by key ([`KStream::join_table`], [`KStream::left_join_table`]) — its
    /// key serde must write keys as the table's does: the lookup is by key bytes. A table
    /// record cannot take a timestamp extractor: [`StreamsBuilder::build`] says so.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    ///
    /// let builder = StreamsBuilder::new();
    /// let users = builder.table("users", Consumed::with(StringSerde, StringSerde));
    /// builder
    ///     .stream("views", Consumed::with(StringSerde, StringSerde))
    ///     .left_join_table(&users, |page, name| format!("{page} by {}", name.map_or("someone", String::as_str)))
    ///     .to("enriched", Produced::with(StringSerde, StringSerde));
    /// let users = users.store().clone();
    /// let topology = builder.build()?;
    /// assert_eq!(topology.table_topics(), vec!["users".to_string()]);
    ///
    /// let mut driver = TopologyTestDriver::new(topology)?;
    /// driver.pipe(TestRecord::new("views", Some("ann"), Some("/home")))?;
    /// driver.pipe_table(&users, &"ann".to_string(), Some(&"Ann".to_string()))?;
    /// driver.pipe(TestRecord::new("views", Some("ann"), Some("/cart")))?;
    /// let out = driver.read_output("enriched", &StringSerde, &StringSerde)?;
    /// let pages: Vec<_> = out.into_iter().filter_map(|(_, v)| v).collect();
    /// assert_eq!(pages, ["/home by someone", "/cart by Ann"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn table<K: Data, V: Data>(
        &self,
        topic: impl AsRef<str>,
        consumed: Consumed<K, V>,
    ) -> KTable<'_, K, V, TableHandle<K, V>> {
        self.add_table(topic.as_ref(), consumed, None)
    }

    /// [`StreamsBuilder::table`] as a **versioned** table (Kafka Streams' `Materialized` with
    /// a `persistentVersionedKeyValueStore`): it keeps each key's versions within `history`,
    /// and a stream joins the row valid *at the stream record's timestamp*, even when the
    /// record arrives after a later update (a temporal join; see [`TableHandle::versioned`]).
    pub fn versioned_table<K: Data, V: Data>(
        &self,
        topic: impl AsRef<str>,
        consumed: Consumed<K, V>,
        history: Duration,
    ) -> KTable<'_, K, V, TableHandle<K, V>> {
        self.add_table(topic.as_ref(), consumed, Some(history))
    }

    /// A table's serdes and name (`consumed`'s, else the topic's); a timestamp extractor is
    /// reported at `build()` (a `kind` keeps its records' Kafka timestamps).
    fn table_serdes<K: Data, V: Data>(
        &self,
        kind: &str,
        topic: &str,
        consumed: Consumed<K, V>,
    ) -> (
        std::sync::Arc<dyn crate::serdes::Serde<K>>,
        std::sync::Arc<dyn crate::serdes::Serde<V>>,
        String,
    ) {
        let Consumed {
            keys,
            values,
            name,
            extractor,
        } = consumed;
        let name = name.unwrap_or_else(|| topic.to_string());
        if extractor.is_some() {
            self.error(format!(
                "{kind} {name} of {topic} has a timestamp extractor: a table's records keep their Kafka timestamps"
            ));
        }
        (keys, values, name)
    }

    fn add_table<K: Data, V: Data>(
        &self,
        topic: &str,
        consumed: Consumed<K, V>,
        history: Option<Duration>,
    ) -> KTable<'_, K, V, TableHandle<K, V>> {
        let (keys, values, name) = self.table_serdes("table", topic, consumed);
        let handle = match history {
            Some(h) => TableHandle::versioned(name.as_str(), topic, keys, values, h),
            None => TableHandle::new(name.as_str(), topic, keys, values),
        };
        let added = handle.clone();
        let add: AddFn = Box::new(move |b, w| {
            if w.updates {
                // Joined with a table: a source forwarding each upsert and tombstone.
                b.add_table_source(w.name, &added);
            } else {
                b.add_table(&added);
            }
        });
        let id = self.push("", Some(name), Vec::new(), add);
        KTable::new(KStream::new(self, id, false), handle)
    }

    /// Every partition of the topic `topic` as a table on every instance (Kafka Streams'
    /// `builder.globalTable`): reference data a stream looks up by any key it can compute
    /// ([`KStream::join_global`]). Named [`Consumed::named`]'s name, or the topic's. Not
    /// co-partitioned and not synchronized with the streams: see [`GlobalKTable`].
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    ///
    /// // Orders (keyed by order id, valued by a country code) with the country's name.
    /// let builder = StreamsBuilder::new();
    /// let countries = builder.global_table("countries", Consumed::with(StringSerde, StringSerde));
    /// builder
    ///     .stream("orders", Consumed::with(StringSerde, StringSerde))
    ///     .join_global(&countries, |_order, code| code.clone(), |order, country| {
    ///         format!("{order} ships to {country}")
    ///     })
    ///     .to("shipments", Produced::with(StringSerde, StringSerde));
    /// let countries = countries.handle().clone();
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// driver.pipe_global(&countries, &"fr".to_string(), Some(&"France".to_string()))?;
    /// driver.pipe(TestRecord::new("orders", Some("o-1"), Some("fr")))?;
    /// driver.pipe(TestRecord::new("orders", Some("o-2"), Some("xx")))?; // no row: nothing
    /// let out = driver.read_output("shipments", &StringSerde, &StringSerde)?;
    /// assert_eq!(out, vec![(Some("o-1".to_string()), Some("fr ships to France".to_string()))]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn global_table<K: Data, V: Data>(
        &self,
        topic: impl AsRef<str>,
        consumed: Consumed<K, V>,
    ) -> GlobalKTable<'_, K, V> {
        let topic = topic.as_ref();
        let (keys, values, name) = self.table_serdes("global table", topic, consumed);
        let handle = GlobalTableHandle::new(name.as_str(), topic, keys, values);
        let added = handle.clone();
        let add: AddFn = Box::new(move |b, _| {
            b.add_global_table(&added);
        });
        self.push("", Some(name), Vec::new(), add);
        GlobalKTable {
            builder: self,
            handle,
        }
    }

    /// Emits every step into a [`TopologyBuilder`] and builds it: a mistake found while adding
    /// steps (a key-changed stream grouped by key, …) or by the topology builder (a name used
    /// twice, a topic read twice) is reported here, each named.
    pub fn build(self) -> Result<Topology, TopologyError> {
        let mut graph = self.graph.into_inner();
        for (id, what) in &graph.lookups {
            if graph.updates.contains(id) {
                let table = graph.steps.get(*id).map_or("", |s| s.name.as_str());
                graph.errors.push(format!(
                    "{what}: table {table} is also joined with a table or grouped (group_by), so its topic is read as a stream of updates, not materialized as a table a stream can look rows up in (a stream-table join of such a table is not supported yet)"
                ));
            }
        }
        if !graph.errors.is_empty() {
            return Err(TopologyError::Invalid(graph.errors.join("; ")));
        }
        let names: Vec<String> = graph.steps.iter().map(|s| s.name.clone()).collect();
        let mut builder = TopologyBuilder::new();
        for (id, step) in graph.steps.into_iter().enumerate() {
            let wiring = Wiring {
                id,
                name: &step.name,
                parents: step
                    .parents
                    .iter()
                    .filter_map(|p| names.get(*p).map(String::as_str))
                    .collect(),
                names: &names,
                updates: graph.updates.contains(&id),
            };
            (step.add)(&mut builder, &wiring);
        }
        builder.build()
    }

    /// A generated name: `prefix` and the next number of the counter, ten digits.
    pub(crate) fn next_name(&self, prefix: &str) -> String {
        let mut graph = self.graph.borrow_mut();
        let n = graph.counter;
        graph.counter += 1;
        format!("{prefix}{n:010}")
    }

    /// Adds a step named `name` (or a generated name with `prefix`); its id.
    pub(crate) fn push(
        &self,
        prefix: &str,
        name: Option<String>,
        parents: Vec<usize>,
        add: AddFn,
    ) -> usize {
        let name = name.unwrap_or_else(|| self.next_name(prefix));
        let mut graph = self.graph.borrow_mut();
        graph.steps.push(Step { name, parents, add });
        graph.steps.len() - 1
    }

    /// Renames step `id`.
    pub(crate) fn rename(&self, id: usize, name: String) {
        if let Some(step) = self.graph.borrow_mut().steps.get_mut(id) {
            step.name = name;
        }
    }

    /// The current name of step `id`.
    pub(crate) fn name_of(&self, id: usize) -> String {
        self.graph
            .borrow()
            .steps
            .get(id)
            .map(|s| s.name.clone())
            .unwrap_or_default()
    }

    /// Step `id` (a table read from a topic) is read as a stream of updates: a table-table
    /// join or a `group_by` needs each of its upserts and tombstones.
    pub(crate) fn read_as_updates(&self, id: usize) {
        let mut graph = self.graph.borrow_mut();
        if !graph.updates.contains(&id) {
            graph.updates.push(id);
        }
    }

    /// Step `id` (a table read from a topic) is looked up by `what` (a stream-table join),
    /// which needs it materialized: reported by [`StreamsBuilder::build`] if it is also read
    /// as a stream of updates.
    pub(crate) fn table_lookup(&self, id: usize, what: String) {
        self.graph.borrow_mut().lookups.push((id, what));
    }

    /// Records a mistake, reported by [`StreamsBuilder::build`].
    pub(crate) fn error(&self, message: String) {
        self.graph.borrow_mut().errors.push(message);
    }
}

/// A zero-sized marker of a handle's key and value types (no ownership, always `Send`).
pub(crate) type Types<K, V> = PhantomData<fn() -> (K, V)>;
