//! `[processor]`: the exactly-once loop's knobs (Kafka Streams names where they exist) and
//! their range checks.

use serde::{Deserialize, Serialize};

use crate::config::choice::choice_strings;
use crate::config::ConfigError;

/// What a committed batch promises about its input records' effects (`processor.guarantee`).
///
/// ```
/// use eosflow::config::Guarantee;
/// assert_eq!("at_least_once".parse::<Guarantee>(), Ok(Guarantee::AtLeastOnce));
/// let err = "exactly-once".parse::<Guarantee>().unwrap_err();
/// assert!(err.contains("`exactly_once`") && err.contains("`at_least_once`"), "{err}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Guarantee {
    /// Kafka transactions: outputs, state and input offsets commit together, or not at all.
    #[default]
    ExactlyOnce,
    /// Outputs acknowledged, then plain offset commits; a crash replays the last batch. The
    /// baseline that prices exactly-once.
    AtLeastOnce,
}

impl Guarantee {
    /// The name the configuration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ExactlyOnce => "exactly_once",
            Self::AtLeastOnce => "at_least_once",
        }
    }
}

choice_strings!(Guarantee);

/// Which consumer group protocol the processing threads join with (`processor.group_protocol`).
///
/// ```
/// use eosflow::config::GroupProtocol;
/// assert_eq!("consumer".parse::<GroupProtocol>(), Ok(GroupProtocol::Consumer));
/// assert!("eager".parse::<GroupProtocol>().unwrap_err().contains("`classic`"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupProtocol {
    /// The classic protocol with the client-side `range` assignor: every rebalance stops the
    /// whole group (eager), and works on every broker.
    #[default]
    Classic,
    /// KIP-848 (Kafka ≥ 4.0): the broker computes the assignment with its `range` assignor
    /// (which keeps partition `p` of every input, retry level and table on one member) and a
    /// member joining or leaving moves only the partitions that change owner; the others keep
    /// processing. The session timeout is the broker's (`group.consumer.session.timeout.ms`,
    /// 45 s by default), not `processor.session_timeout_ms`. On a broker that refuses the
    /// protocol the instance falls back to `classic` (logged).
    Consumer,
}

impl GroupProtocol {
    /// The name the configuration (and librdkafka's `group.protocol`) uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Classic => "classic",
            Self::Consumer => "consumer",
        }
    }
}

choice_strings!(GroupProtocol);

/// The exactly-once loop's knobs (Kafka Streams names where they exist).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ProcessorConfig {
    /// Input topics, co-partitioned (same partition count, keyed by aggregate id).
    pub input_topics: Vec<String>,
    /// Longest a batch stays open before its transaction commits (`commit.interval.ms`), 1..=60000.
    pub commit_interval_ms: u64,
    /// Most records in one transaction.
    pub max_batch_records: usize,
    /// Most key + value bytes in one transaction (≥ 1 MiB): bounds the memory a batch holds
    /// (Kafka Streams bounds it with `buffered.records.per.partition`; bytes is what memory is).
    pub max_batch_bytes: usize,
    /// `transaction.timeout.ms`: how long a dead instance's open transaction blocks its partitions.
    pub transaction_timeout_ms: u64,
    /// `session.timeout.ms` of the consumer group.
    pub session_timeout_ms: u64,
    /// Deadline for restoring one partition's store from its changelog.
    pub restore_timeout_ms: u64,
    /// How many newly assigned partitions have their stores opened and restored at once
    /// (Kafka Streams restores all of a thread's tasks together), 1..=64: most of a restore is
    /// waiting on the broker, so an assignment of many partitions is ready in the time of the
    /// largest tail, not the sum.
    pub restore_threads: usize,
    /// `group.instance.id` = the instance id: a restart within the session timeout keeps the
    /// assignment (no rebalance). On in Kubernetes (stable pod names).
    pub static_membership: bool,
    /// Longest a SIGTERM/SIGINT shutdown may take (commit the open batch, leave) before exiting.
    pub shutdown_timeout_ms: u64,
    /// `/healthz` fails when the loop has not turned for this long (restores excepted).
    pub stuck_after_ms: u64,
    /// Exactly-once (transactions; the default) or at-least-once (the baseline that prices it).
    pub guarantee: Guarantee,
    /// Warm copies of each partition's stores kept by other instances (Kafka Streams'
    /// `num.standby.replicas`), 0..=8: they tail the changelogs into their local stores, so the
    /// instance that takes a partition over restores only the last few records instead of the
    /// whole changelog. Placement follows the group's membership (the next members after the
    /// owner, by client id); with fewer other members than this, each keeps what it can.
    pub standby_replicas: u32,
    /// Processing threads of this instance (Kafka Streams' `num.stream.threads`), 1..=64. Each
    /// is a member of the consumer group with its own transactional producer and commit loop,
    /// so the instance's partitions spread over them and a slow batch on one does not hold the
    /// others. More threads than cores only adds transactions; more than the instance's share
    /// of partitions leaves threads idle. Needs one processor per thread
    /// ([`crate::runner::run_threads`]).
    pub threads: u32,
    /// The consumer group protocol: `classic` (eager rebalances, the default) or `consumer`
    /// (KIP-848 incremental rebalances with the broker's co-partitioning `range` assignor;
    /// falls back to `classic` on a broker without it).
    pub group_protocol: GroupProtocol,
    /// Kafka Streams' `max.task.idle.ms`: how long a task reading several topics (two join
    /// sides, a stream and its table) waits for a partition that has nothing buffered before it
    /// handles the others' records past it. `0` (the default, as in Kafka Streams) waits only
    /// while that partition has records on the broker not yet fetched; `n > 0` also waits up to
    /// `n` ms for one that is read to its end (a producer that lags); `-1` never waits (no
    /// timestamp alignment: each partition in arrival order).
    pub max_task_idle_ms: i64,
    /// How often the records of repartition topics that every reader has committed past are
    /// deleted (`DeleteRecords`; Kafka Streams' `repartition.purge.interval.ms`), so the
    /// topics do not grow with their retention. `0` never deletes.
    pub repartition_purge_interval_ms: u64,
    /// Creates the internal topics the processor needs when it starts, where they are missing
    /// (Kafka Streams does the same): each input's `.retry.<n>` levels and `.DLT`, each store's
    /// compacted changelog, each repartition topic, with the inputs' partition count and the
    /// cluster's replication factor. Inputs and outputs stay the user's. `false` where the
    /// application may not create topics: they must then exist (`eosflow topics apply`), and
    /// the start names each missing one.
    pub create_topics: bool,
    /// Where this instance answers interactive queries, `host:port` as other instances and
    /// clients reach it (Kafka Streams' `application.server`): the query listener's address
    /// from outside (`queries.listen`'s port, the pod's IP or DNS name; with TLS, a name its
    /// certificate covers). Advertised on the
    /// compacted `<app.id>-endpoints` topic, so a query for a key another instance owns is
    /// proxied there. Empty (the default): keys owned elsewhere answer 503 (this instance
    /// cannot find their owner).
    pub application_server: String,
}

/// The most processing threads `processor.threads` accepts.
pub const MAX_THREADS: u32 = 64;

/// The most standby replicas `processor.standby_replicas` accepts: every copy tails every
/// changelog partition it keeps, so more than a few only costs reads.
pub const MAX_STANDBY_REPLICAS: u32 = 8;

impl Default for ProcessorConfig {
    fn default() -> Self {
        Self {
            input_topics: vec![],
            commit_interval_ms: 100,
            max_batch_records: 10_000,
            max_batch_bytes: 32 * 1024 * 1024,
            transaction_timeout_ms: 10_000,
            session_timeout_ms: 10_000,
            restore_timeout_ms: 120_000,
            restore_threads: 8,
            static_membership: false,
            shutdown_timeout_ms: 30_000,
            stuck_after_ms: 60_000,
            guarantee: Guarantee::ExactlyOnce,
            standby_replicas: 0,
            threads: 1,
            group_protocol: GroupProtocol::Classic,
            max_task_idle_ms: 0,
            repartition_purge_interval_ms: 30_000,
            create_topics: true,
            application_server: String::new(),
        }
    }
}

impl ProcessorConfig {
    /// Range checks serde cannot express.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=60_000).contains(&self.commit_interval_ms) {
            return Err(ConfigError::invalid(
                "processor.commit_interval_ms",
                format!("{} is outside 1..=60000", self.commit_interval_ms),
            ));
        }
        if !(1..=64).contains(&self.restore_threads) {
            return Err(ConfigError::invalid(
                "processor.restore_threads",
                format!("{} is outside 1..=64", self.restore_threads),
            ));
        }
        if self.max_batch_records == 0 {
            return Err(ConfigError::invalid(
                "processor.max_batch_records",
                "must be at least 1",
            ));
        }
        if self.max_batch_bytes < 1024 * 1024 {
            return Err(ConfigError::invalid(
                "processor.max_batch_bytes",
                "must be ≥ 1 MiB (1048576): a batch always takes at least one record",
            ));
        }
        if self.transaction_timeout_ms < 1000
            || self.transaction_timeout_ms <= self.commit_interval_ms
        {
            return Err(ConfigError::invalid(
                "processor.transaction_timeout_ms",
                format!(
                    "{} must be ≥ 1000 and larger than processor.commit_interval_ms",
                    self.transaction_timeout_ms
                ),
            ));
        }
        if self.standby_replicas > MAX_STANDBY_REPLICAS {
            return Err(ConfigError::invalid(
                "processor.standby_replicas",
                format!(
                    "{} is outside 0..={MAX_STANDBY_REPLICAS}",
                    self.standby_replicas
                ),
            ));
        }
        if !(1..=MAX_THREADS).contains(&self.threads) {
            return Err(ConfigError::invalid(
                "processor.threads",
                format!("{} is outside 1..={MAX_THREADS}", self.threads),
            ));
        }
        if self.max_task_idle_ms < -1 {
            return Err(ConfigError::invalid(
                "processor.max_task_idle_ms",
                format!(
                    "{} is below -1 (-1: never wait, 0: wait for fetchable records, n: also n ms for a partition read to its end)",
                    self.max_task_idle_ms
                ),
            ));
        }
        if !self.application_server.is_empty() {
            let ok = self
                .application_server
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !ok {
                return Err(ConfigError::invalid(
                    "processor.application_server",
                    format!(
                        "{:?} is not host:port (the address other instances reach this one's query listener at, e.g. \"orders-0.orders:9465\")",
                        self.application_server
                    ),
                ));
            }
        }
        if self.session_timeout_ms < 1000 {
            return Err(ConfigError::invalid(
                "processor.session_timeout_ms",
                "must be ≥ 1000",
            ));
        }
        Ok(())
    }
}
