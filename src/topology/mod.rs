//! Topologies: named sources, processor nodes, state stores and sinks, wired by name — the
//! shape Kafka Streams users know from `Topology` — and everything the runtime derives from
//! them (input topics, the retry ladder and DLT of each input, one changelog per store).
//!
//! A [`Topology`] is an [`crate::processor::Application`]: the exactly-once runtime runs it like
//! any processor (dedup, retry ladder, parked keys, transactions all apply to the input
//! record), and [`crate::testing::TopologyTestDriver`] runs it without a broker.
//!
//! ```
//! use eosflow::processor::{ProcessError, StoreHandle};
//! use eosflow::serdes::{I64Serde, StringSerde};
//! use eosflow::topology::{ProcessorContext, TopologyBuilder, TypedRecord};
//!
//! let totals = StoreHandle::new("totals", StringSerde, I64Serde);
//! let store = totals.clone();
//! let sum = move |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>, r: TypedRecord<String, i64>| {
//!     let key = r.key.ok_or_else(|| ProcessError::permanent("no key"))?;
//!     let mut s = ctx.store(&store)?;
//!     let total = s.get(&key)?.unwrap_or(0) + r.value.unwrap_or(0);
//!     s.put(&key, &total)?;
//!     ctx.forward(TypedRecord::new(Some(key), Some(total)));
//!     Ok(())
//! };
//! let topology = TopologyBuilder::new()
//!     .add_source("amounts", &["amounts"], StringSerde, I64Serde)
//!     .add_processor("sum", sum, &["amounts"])
//!     .add_state_store(&totals, &["sum"])
//!     .add_sink("out", "totals", StringSerde, I64Serde, &["sum"])
//!     .build()
//!     .expect("a valid topology");
//! assert_eq!(topology.source_topics(), vec!["amounts".to_string()]);
//! assert_eq!(
//!     topology.changelog_topics("app"),
//!     vec!["app-state-changelog".to_string(), "app-totals-changelog".to_string()]
//! );
//! ```

mod builder;
pub mod fk_join;
#[cfg(test)]
mod fk_join_tests;
pub mod globals;
#[cfg(test)]
mod globals_tests;
mod node;
mod processor;
#[cfg(test)]
mod repartition_tests;
pub mod stream_joins;
#[cfg(test)]
mod stream_joins_tests;
pub(crate) mod suppress;
pub mod table_joins;
#[cfg(test)]
mod table_joins_tests;
pub mod tables;
#[cfg(test)]
mod tables_tests;
pub mod time;
#[cfg(test)]
mod versioned_tests;
pub mod windows;

pub use builder::{Topics, Topology, TopologyBuilder};
pub use fk_join::ForeignKeyJoin;
pub use globals::{GlobalTable, GlobalTableHandle};
pub use node::TypedRecord;
pub(crate) use node::{NodeContext, NodeProcessor};
pub use processor::{ProcessorContext, StreamProcessor};
pub use stream_joins::{JoinKind, JoinWindows, StreamJoin};
pub use table_joins::TableJoin;
pub use tables::TableHandle;
pub use time::{ExtractFn, TimestampExtractor};

use builder::Kind;
use node::AnyRecord;

use crate::config::Config;
use crate::kafka::topics::TopicSpec;
use crate::processor::{Application, Context, Emit, Timer};
use crate::record::{ProcessError, Record};
use crate::retry::base_and_level;

/// Why a topology cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// Names that do not fit together, each mistake listed.
    #[error("invalid topology: {0}")]
    Invalid(String),
}

impl Topology {
    /// A builder (the same as [`TopologyBuilder::new`]).
    pub fn builder() -> TopologyBuilder {
        TopologyBuilder::new()
    }

    /// Every topic a source reads, in the order the sources were added. A repartition topic is
    /// named for the application id the topology is bound to (the runtime and the test driver
    /// bind it), `<app>-<name>-repartition` until then.
    pub fn source_topics(&self) -> Vec<String> {
        let mut out = Vec::new();
        for n in &self.nodes {
            if let Kind::Source { topics, .. } = &n.kind {
                out.extend(topics.iter().cloned());
            }
        }
        out
    }

    /// The repartition topics of application `app_id`, in the order the repartitions were
    /// added (see [`TopologyBuilder::add_repartition`]): written and read by the topology
    /// itself, each an input with its retry levels and DLT.
    pub fn repartition_topics_for(&self, app_id: &str) -> Vec<String> {
        self.repartitions
            .iter()
            .map(|r| builder::Repartition::topic(app_id, &r.name))
            .collect()
    }

    /// Every topic a source reads under application `app_id` (repartition topics named for
    /// it), in the order the sources were added.
    fn inputs_for(&self, app_id: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(r) = self.repartitions.iter().find(|r| r.source == i) {
                out.push(builder::Repartition::topic(app_id, &r.name));
            } else if let Kind::Source { topics, .. } = &n.kind {
                out.extend(topics.iter().cloned());
            }
        }
        out
    }

    /// The sub-topologies, each as the names of its nodes in the order they were added: the
    /// topology split at its repartition topics, as Kafka Streams splits it (nodes linked as
    /// parent and child, or sharing a store or table, are in one). Each sub-topology on each
    /// partition number is a task of its own: its own stream time, timers and timestamp
    /// alignment. A topology without repartitions is one sub-topology.
    ///
    /// ```
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::topology::Topology;
    ///
    /// let t = Topology::builder()
    ///     .add_source("orders", &["orders"], StringSerde, StringSerde)
    ///     .add_repartition(
    ///         "by-customer",
    ///         |_: Option<&String>, v: &String| Some(v.clone()),
    ///         StringSerde,
    ///         StringSerde,
    ///         &["orders"],
    ///     )
    ///     .add_sink("out", "per-customer", StringSerde, StringSerde, &["by-customer"])
    ///     .build()?;
    /// assert_eq!(
    ///     t.sub_topologies(),
    ///     vec![
    ///         vec!["orders", "by-customer-select-key", "by-customer-repartition-sink"],
    ///         vec!["by-customer", "out"],
    ///     ]
    /// );
    /// # Ok::<(), eosflow::topology::TopologyError>(())
    /// ```
    pub fn sub_topologies(&self) -> Vec<Vec<String>> {
        let mut out = vec![Vec::new(); self.sub_count];
        for (n, sub) in self.nodes.iter().zip(&self.node_sub) {
            if let Some(names) = out.get_mut(*sub) {
                names.push(n.name.clone());
            }
        }
        out
    }

    /// The sub-topology of the source or table reading `topic` (a retry level counts as its
    /// input); `0` for a topic the topology does not read.
    fn sub_topology_of(&self, topic: &str) -> usize {
        if self.sub_count <= 1 {
            return 0;
        }
        if let Some(at) = self.source_of(topic) {
            return self.node_sub.get(at).copied().unwrap_or(0);
        }
        let Some((table, _)) = self.tables.iter().find(|(_, t)| t == topic) else {
            return 0;
        };
        self.nodes
            .iter()
            .zip(&self.node_sub)
            .find(|(n, _)| matches!(&n.kind, Kind::Processor { stores, .. } if stores.contains(table)))
            .map_or(0, |(_, sub)| *sub)
    }

    /// Every topic a sink writes.
    pub fn sink_topics(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter_map(|n| match &n.kind {
                Kind::Sink { topic, .. } => Some(topic.clone()),
                _ => None,
            })
            .collect()
    }

    /// Every table's topic, in the order the tables were added: consumed with the sources,
    /// co-partitioned with them, and each its table's changelog.
    pub fn table_topics(&self) -> Vec<String> {
        self.tables.iter().map(|(_, t)| t.clone()).collect()
    }

    /// Every global table's topic, in the order the global tables were added: read whole by
    /// every instance, not co-partitioned with the sources, each its table's changelog.
    pub fn global_table_topics(&self) -> Vec<String> {
        self.globals.iter().map(|g| g.topic().to_string()).collect()
    }

    /// The named stores, in the order they were added.
    pub fn store_names(&self) -> &[String] {
        &self.stores
    }

    /// The changelog of the default store, then one per named store: `<app>-<store>-changelog`.
    pub fn changelog_topics(&self, app_id: &str) -> Vec<String> {
        std::iter::once(&self.default_store)
            .chain(&self.stores)
            .map(|s| format!("{app_id}-{s}-changelog"))
            .collect()
    }

    /// Every internal topic the runtime needs, with `partitions` (the inputs' count): each
    /// repartition topic (`<app>-<name>-repartition`, delete policy), each input's retry
    /// levels (as many as `config`'s retry policy of that input has) and its DLT — a
    /// repartition topic is an input too — and each store's compacted changelog. Inputs and
    /// sink topics are the user's own.
    pub fn internal_topics(&self, config: &Config, partitions: i32) -> Vec<TopicSpec> {
        crate::processor::runtime::internal_topics::specs(
            &self.inputs_for(&config.app.id),
            |input| config.retry.policy_for(input).levels(),
            &self.changelog_topics(&config.app.id),
            &self.repartition_topics_for(&config.app.id),
            partitions,
        )
    }

    /// Every topic the topology reads or writes as application `config.app.id`, each declared
    /// with `partitions` partitions, and the co-partitioned group the runtime checks at start:
    /// what a deploy tool plans and applies ([`crate::kafka::topics::plan_blocking`],
    /// [`crate::kafka::topics::apply_blocking`]; `eosflow topics --topology`). The inputs,
    /// tables' topics (compacted) and outputs are the application's own, to exist before it
    /// starts; the [internal topics](Self::internal_topics) are also created by the instance
    /// when it starts (`processor.create_topics`). Global tables' topics are the user's and
    /// not listed: they are read whole, with any partition count.
    ///
    /// ```
    /// use eosflow::config::Config;
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::topology::Topology;
    ///
    /// let t = Topology::builder()
    ///     .add_source("in", &["clicks"], StringSerde, StringSerde)
    ///     .add_sink("out", "clicks-copy", StringSerde, StringSerde, &["in"])
    ///     .build()?;
    /// let mut config = Config::default();
    /// config.app.id = "copy".into();
    /// config.retry.delays_ms = vec![1_000];
    /// let (specs, group) = t.topics(&config, 6);
    /// let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    /// assert_eq!(
    ///     names,
    ///     ["clicks", "clicks.retry.1", "clicks.DLT", "copy-state-changelog", "clicks-copy"]
    /// );
    /// assert!(!group.topics.contains(&"clicks-copy".to_string()), "outputs are not co-partitioned");
    /// # Ok::<(), eosflow::topology::TopologyError>(())
    /// ```
    pub fn topics(
        &self,
        config: &Config,
        partitions: i32,
    ) -> (Vec<TopicSpec>, crate::kafka::topics::CoPartitioned) {
        let app = config.app.id.as_str();
        let repartition: Vec<String> = self
            .repartitions
            .iter()
            .flat_map(|r| {
                [
                    builder::Repartition::topic(app, &r.name),
                    builder::Repartition::topic("<app>", &r.name),
                ]
            })
            .collect();
        let mut specs: Vec<TopicSpec> = self
            .inputs_for(app)
            .into_iter()
            .filter(|t| !repartition.contains(t))
            .map(|t| {
                // A table read as a stream of updates is still a table: compacted.
                let policy = if self.table_sources.contains(&t) {
                    "compact"
                } else {
                    "delete"
                };
                TopicSpec::new(t, partitions, policy)
            })
            .collect();
        specs.extend(
            self.table_topics()
                .into_iter()
                .map(|t| TopicSpec::new(t, partitions, "compact")),
        );
        specs.extend(self.internal_topics(config, partitions));
        let group = crate::kafka::topics::CoPartitioned {
            name: app.to_string(),
            topics: specs.iter().map(|s| s.name.clone()).collect(),
        };
        for out in self.sink_topics() {
            if !repartition.contains(&out) && !specs.iter().any(|s| s.name == out) {
                specs.push(TopicSpec::new(out, partitions, "delete"));
            }
        }
        (specs, group)
    }

    /// Sends `record` from node `from` to its children (or to the child named `child`).
    fn deliver(
        &mut self,
        from: usize,
        (child, except): (Option<&str>, Option<&str>),
        record: Box<dyn AnyRecord>,
        ctx: &mut Context<'_>,
        input: &Record<'_>,
    ) -> Result<(), ProcessError> {
        let targets: Vec<usize> = self.nodes[from]
            .children
            .iter()
            .copied()
            .filter(|c| child.is_none_or(|name| self.nodes[*c].name == name))
            .filter(|c| except.is_none_or(|name| self.nodes[*c].name != name))
            .collect();
        if let (Some(name), true) = (child, targets.is_empty()) {
            return Err(ProcessError::permanent(format!(
                "node {} forwarded to {name}, which is not its child",
                self.nodes[from].name
            )));
        }
        let mut record = Some(record);
        let last = targets.len();
        for (i, target) in targets.into_iter().enumerate() {
            let r = if i + 1 == last {
                record.take()
            } else {
                record.as_ref().map(|r| r.clone_box())
            };
            if let Some(r) = r {
                self.run_node(target, r, ctx, input)?;
            }
        }
        Ok(())
    }

    /// Runs one processor or sink node on `record`, then delivers what it forwarded.
    fn run_node(
        &mut self,
        at: usize,
        record: Box<dyn AnyRecord>,
        ctx: &mut Context<'_>,
        input: &Record<'_>,
    ) -> Result<(), ProcessError> {
        let repartition_sink = self.repartitions.iter().any(|r| r.sink == at);
        let builder::Node { name, kind, .. } = &mut self.nodes[at];
        let forwards = match kind {
            Kind::Sink { topic, encode } => {
                let (key, value, mut headers, timestamp) = encode(name, record)?;
                if repartition_sink {
                    // The writing task's partition and stream time: the reading task's stream
                    // time is the least of its writers' (see the architecture's task model).
                    use crate::processor::engine::{Mark, Origin};
                    Mark::stamp(&mut headers, ctx.task_partition(), ctx.stream_time_ms());
                    // The input record this one comes from (its own origin if it came through
                    // a repartition already): the reading task's query positions (issue 49).
                    Origin::stamp(&mut headers, input);
                }
                ctx.emit_record(Emit {
                    topic: topic.clone(),
                    key,
                    value,
                    headers,
                    timestamp,
                });
                return Ok(());
            }
            Kind::Source { .. } => {
                return Err(ProcessError::permanent(format!(
                    "source {name} cannot receive records"
                )))
            }
            Kind::Processor { node, stores } => {
                let mut nctx = NodeContext {
                    inner: ctx,
                    input,
                    node: name,
                    stores,
                    forwards: Vec::new(),
                };
                node.process(&mut nctx, record)?;
                nctx.forwards
            }
        };
        for f in forwards {
            self.deliver(
                at,
                (f.child.as_deref(), f.except.as_deref()),
                f.record,
                ctx,
                input,
            )?;
        }
        Ok(())
    }
}

impl Topology {
    /// The node of the source reading `topic` (or the input of its retry level).
    fn source_of(&self, topic: &str) -> Option<usize> {
        let reads = |name: &str| {
            self.nodes.iter().position(
                |n| matches!(&n.kind, Kind::Source { topics, .. } if topics.iter().any(|t| t == name)),
            )
        };
        // An input topic itself first: most records come from one, and the retry-level parse
        // (a reverse substring search) ran two or three times per record.
        reads(topic).or_else(|| {
            let base = base_and_level(topic).0;
            (base != topic).then(|| reads(base)).flatten()
        })
    }
}

impl Application for Topology {
    fn process(&mut self, ctx: &mut Context<'_>, record: &Record<'_>) -> Result<(), ProcessError> {
        let Some(at) = self.source_of(record.topic) else {
            return Err(ProcessError::permanent(format!(
                "no source of the topology reads {}",
                base_and_level(record.topic).0
            )));
        };
        let typed = match &self.nodes[at].kind {
            Kind::Source { decode, .. } => decode(record, ctx.event_time_ms())?,
            _ => return Err(ProcessError::permanent("not a source")),
        };
        self.deliver(at, (None, None), typed, ctx, record)
    }

    fn event_time(&self, record: &Record<'_>) -> Option<i64> {
        match self.source_of(record.topic).map(|at| &self.nodes[at].kind) {
            Some(Kind::Source { time, .. }) => time.extract(record),
            _ => record.timestamp,
        }
    }

    fn checked_event_time(&self, record: &Record<'_>) -> Result<Option<i64>, time::BadEventTime> {
        let at = self.source_of(record.topic);
        let (t, extractor) = match at.map(|at| (&self.nodes[at].name, &self.nodes[at].kind)) {
            Some((name, Kind::Source { time, .. })) => (time.extract(record), Some((name, time))),
            _ => (record.timestamp, None),
        };
        time::check_event_time(t, || match extractor {
            Some((name, time)) => format!("source {name:?}: {}", time.describe(record)),
            None => "the Kafka timestamp".to_string(),
        })
    }

    /// Hands the timer to the processor node that scheduled it (the timer's name is the node's
    /// name); what it forwards flows to its children as a record's would.
    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        let at = self
            .nodes
            .iter()
            .position(|n| n.name == timer.name && matches!(n.kind, Kind::Processor { .. }));
        let Some(at) = at else {
            return Err(ProcessError::permanent(format!(
                "timer named {:?}: no processor node of that name",
                timer.name
            )));
        };
        // The node sees the timer as its input: no topic, offset -1, the key and payload.
        let input = Record {
            topic: "",
            partition: -1,
            offset: -1,
            timestamp: Some(timer.due_ms),
            key: Some(&timer.key),
            value: Some(&timer.payload),
            headers: &[],
        };
        let builder::Node { name, kind, .. } = &mut self.nodes[at];
        let forwards = match kind {
            Kind::Processor { node, stores } => {
                let mut nctx = NodeContext {
                    inner: ctx,
                    input: &input,
                    node: name,
                    stores,
                    forwards: Vec::new(),
                };
                node.on_timer(&mut nctx, timer)?;
                nctx.forwards
            }
            _ => Vec::new(),
        };
        for f in forwards {
            self.deliver(
                at,
                (f.child.as_deref(), f.except.as_deref()),
                f.record,
                ctx,
                &input,
            )?;
        }
        Ok(())
    }

    fn ordered(&self) -> bool {
        self.ordered
    }

    fn store_name(&self) -> &str {
        &self.default_store
    }

    fn stores(&self) -> Vec<String> {
        self.stores.clone()
    }

    fn input_topics(&self) -> Option<Vec<String>> {
        Some(self.source_topics())
    }

    /// Names the repartition topics `<app_id>-<name>-repartition`: their sinks write and their
    /// sources read them from now on.
    fn bind_application(&mut self, app_id: &str) {
        self.app_id = Some(app_id.to_string());
        for r in &self.repartitions {
            let name = builder::Repartition::topic(app_id, &r.name);
            if let Kind::Sink { topic, .. } = &mut self.nodes[r.sink].kind {
                *topic = name.clone();
            }
            if let Kind::Source { topics, .. } = &mut self.nodes[r.source].kind {
                *topics = vec![name];
            }
        }
    }

    fn repartition_topics(&self) -> Vec<String> {
        match &self.app_id {
            Some(app) => self.repartition_topics_for(app),
            None => Vec::new(),
        }
    }

    fn sub_topology_count(&self) -> usize {
        self.sub_count
    }

    fn sub_topology(&self, topic: &str) -> usize {
        self.sub_topology_of(topic)
    }

    fn repartition_writer(&self, topic: &str) -> Option<usize> {
        let app = self.app_id.as_deref()?;
        let r = self
            .repartitions
            .iter()
            .find(|r| builder::Repartition::topic(app, &r.name) == topic)?;
        self.node_sub.get(r.sink).copied()
    }

    fn store_writer(&self, store: &str) -> usize {
        let by_node = self
            .nodes
            .iter()
            .zip(&self.node_sub)
            .find(|(n, _)| matches!(&n.kind, Kind::Processor { stores, .. } if stores.iter().any(|s| s == store)))
            .map(|(_, sub)| *sub);
        match by_node {
            Some(sub) => sub,
            None => self
                .tables
                .iter()
                .find(|(name, _)| name == store)
                .map_or(0, |(_, topic)| self.sub_topology_of(topic)),
        }
    }

    fn tables(&self) -> Vec<(String, String)> {
        self.tables.clone()
    }

    fn versioned_tables(&self) -> Vec<(String, std::time::Duration)> {
        self.versioned.clone()
    }

    fn global_tables(&self) -> Vec<GlobalTable> {
        self.globals.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serdes::{BytesSerde, StringSerde};

    #[test]
    fn build_names_every_dangling_or_repeated_name() {
        let noop = |_: &mut ProcessorContext<'_, '_, '_, String, String>,
                    _: TypedRecord<String, String>| Ok(());
        let err = TopologyBuilder::new()
            .add_source("in", &["a"], StringSerde, StringSerde)
            .add_source("in", &["a"], StringSerde, StringSerde)
            .add_processor("p", noop, &["nowhere"])
            .add_sink("out", "o", BytesSerde, BytesSerde, &["in"])
            .add_processor("after-sink", noop, &["out"])
            .build()
            .expect_err("invalid");
        let text = err.to_string();
        for part in [
            "node name \"in\" is used twice",
            "topic \"a\" is read by two sources",
            "\"nowhere\" as its parent, which does not exist",
            "names sink \"out\" as its parent",
        ] {
            assert!(text.contains(part), "{part:?} missing from {text}");
        }
    }

    #[test]
    fn build_rejects_an_edge_whose_record_types_differ_naming_both_nodes_and_types() {
        use crate::serdes::I64Serde;
        let count =
            |_: &mut ProcessorContext<'_, '_, '_, String, i64>, _: TypedRecord<String, i64>| Ok(());
        // A source of strings feeding a processor of i64 values: every record would have been
        // dead-lettered at run time.
        let err = TopologyBuilder::new()
            .add_source("clicks", &["clicks"], StringSerde, StringSerde)
            .add_processor("count", count, &["clicks"])
            .build()
            .expect_err("a mismatched edge");
        assert_eq!(
            err.to_string(),
            "invalid topology: node \"count\" takes (alloc::string::String, i64) records but its parent \"clicks\" forwards (alloc::string::String, alloc::string::String)"
        );
        // The same chain with matching types builds; a processor's output type (its context's)
        // is checked against the sink it feeds.
        let pass = |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>,
                    r: TypedRecord<String, i64>| {
            ctx.forward(r);
            Ok(())
        };
        let ok = TopologyBuilder::new()
            .add_source("amounts", &["amounts"], StringSerde, I64Serde)
            .add_processor("pass", pass, &["amounts"])
            .add_sink("out", "out", StringSerde, I64Serde, &["pass"])
            .build();
        assert!(ok.is_ok(), "{ok:?}");
        let err = TopologyBuilder::new()
            .add_source("amounts", &["amounts"], StringSerde, I64Serde)
            .add_processor("pass", pass, &["amounts"])
            .add_sink("out", "out", StringSerde, StringSerde, &["pass"])
            .build()
            .expect_err("the sink takes strings");
        assert!(
            err.to_string().contains("node \"out\" takes (alloc::string::String, alloc::string::String) records but its parent \"pass\" forwards (alloc::string::String, i64)"),
            "{err}"
        );
        let err = TopologyBuilder::new()
            .add_source("amounts", &["amounts"], StringSerde, I64Serde)
            .forwards::<String, i64>("amounts")
            .build()
            .expect_err("a source is not a processor");
        assert!(
            err.to_string().contains("forwards() names \"amounts\""),
            "{err}"
        );
    }

    #[test]
    fn internal_topics_follow_the_retry_config_and_the_stores() {
        let noop = |_: &mut ProcessorContext<'_, '_, '_, String, String>,
                    _: TypedRecord<String, String>| Ok(());
        let store = crate::processor::StoreHandle::new("s", StringSerde, StringSerde);
        let t = TopologyBuilder::new()
            .add_source("in", &["a", "b"], StringSerde, StringSerde)
            .add_processor("p", noop, &["in"])
            .add_state_store(&store, &["p"])
            .build()
            .expect("valid");
        let mut config = Config::default();
        config.app.id = "app".into();
        config.retry.delays_ms = vec![100, 200];
        let specs = t.internal_topics(&config, 6);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "a.retry.1",
                "a.retry.2",
                "a.DLT",
                "b.retry.1",
                "b.retry.2",
                "b.DLT",
                "app-state-changelog",
                "app-s-changelog"
            ]
        );
        assert!(specs.iter().all(|s| s.partitions == 6));
        assert!(specs
            .iter()
            .all(|s| (s.cleanup_policy == "compact") == s.name.ends_with("-changelog")));
    }
}
