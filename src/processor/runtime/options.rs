//! What a processing loop needs from the [`Config`], read once at start.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::RuntimeError;
use crate::config::Config;
use crate::retry::RetryPolicy;

/// Everything the loop needs, derived from [`Config`].
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Consumer group and topic prefix.
    pub app_id: String,
    /// Stable instance id: suffix of `transactional.id`.
    pub instance_id: String,
    /// Inputs (co-partitioned).
    pub input_topics: Vec<String>,
    /// Longest a batch stays open.
    pub commit_interval: Duration,
    /// Most records per transaction.
    pub max_batch_records: usize,
    /// Most key + value bytes per transaction (the batch's memory bound).
    pub max_batch_bytes: usize,
    /// `transaction.timeout.ms`.
    pub transaction_timeout: Duration,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// Deadline for one partition's restore while the broker answers (an unreachable broker
    /// is waited for, see [`crate::state::changelog::BROKER_WAIT_MAX`]).
    pub restore_timeout: Duration,
    /// How many partitions are opened and restored at once (`processor.restore_threads`).
    pub restore_threads: usize,
    /// Join with `group.instance.id` = instance id.
    pub static_membership: bool,
    /// Create the missing internal topics at start (`processor.create_topics`).
    pub create_topics: bool,
    /// Root of this instance's stores.
    pub state_dir: PathBuf,
    /// RocksDB block cache for all stores.
    pub memory_bytes: u64,
    /// This processing thread's share of the record cache (`state.cache_bytes` divided by
    /// `processor.threads`; 0: none).
    pub cache_bytes: u64,
    /// Dedup window.
    pub dedup_retention: Duration,
    /// How often expired dedup ids are purged.
    pub dedup_purge_interval: Duration,
    /// The retry ladder of each input topic.
    pub retry: BTreeMap<String, RetryPolicy>,
    /// How often the DLT depth gauges refresh (zero: not watched).
    pub dlt_depth_interval: Duration,
    /// False (`processor.guarantee = "at_least_once"`): no transactions, plain offset commits.
    pub exactly_once: bool,
    /// The processor's tables, `(store name, topic)` ([`crate::processor::Application::tables`]).
    pub tables: Vec<(String, String)>,
    /// The versioned ones among them, `(store name, history)`
    /// ([`crate::processor::Application::versioned_tables`]).
    pub versioned_tables: Vec<(String, Duration)>,
    /// This loop's index among the instance's processing threads (`processor.threads`): 0
    /// keeps the ids a one-thread instance has always had.
    pub thread: usize,
    /// `processor.group_protocol`.
    pub group_protocol: crate::config::GroupProtocol,
    /// `processor.max_task_idle_ms` (-1: no timestamp alignment).
    pub max_task_idle_ms: i64,
    /// `processor.repartition_purge_interval_ms` (zero: never purge).
    pub repartition_purge_interval: Duration,
}

impl RuntimeOptions {
    /// Table `name`'s history if it is versioned.
    pub(crate) fn table_history(&self, name: &str) -> Option<Duration> {
        self.versioned_tables
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, h)| *h)
    }
}

impl RuntimeOptions {
    /// Reads the options from a validated config.
    pub fn from_config(config: &Config) -> Result<Self, RuntimeError> {
        if config.processor.input_topics.is_empty() {
            return Err(RuntimeError::Config(
                "`processor.input_topics` (EOSFLOW_PROCESSOR_INPUT_TOPICS) is empty: name at least one input topic".into(),
            ));
        }
        let instance_id = config.instance_id().map_err(RuntimeError::Config)?;
        Ok(Self {
            app_id: config.app.id.clone(),
            state_dir: config.state.dir.join(&config.app.id).join(&instance_id),
            instance_id,
            input_topics: config.processor.input_topics.clone(),
            commit_interval: Duration::from_millis(config.processor.commit_interval_ms),
            max_batch_records: config.processor.max_batch_records,
            max_batch_bytes: config.processor.max_batch_bytes,
            transaction_timeout: Duration::from_millis(config.processor.transaction_timeout_ms),
            session_timeout: Duration::from_millis(config.processor.session_timeout_ms),
            restore_timeout: Duration::from_millis(config.processor.restore_timeout_ms),
            restore_threads: config.processor.restore_threads,
            static_membership: config.processor.static_membership,
            create_topics: config.processor.create_topics,
            memory_bytes: config.state.memory_bytes,
            cache_bytes: config.state.cache_bytes / u64::from(config.processor.threads.max(1)),
            dedup_retention: Duration::from_secs(config.state.dedup_retention_secs),
            dedup_purge_interval: Duration::from_secs(config.state.dedup_purge_interval_secs),
            retry: config
                .processor
                .input_topics
                .iter()
                .map(|t| (t.clone(), config.retry.policy_for(t)))
                .collect(),
            dlt_depth_interval: Duration::from_millis(config.retry.dlt_depth_interval_ms),
            exactly_once: config.processor.guarantee == crate::config::Guarantee::ExactlyOnce,
            tables: Vec::new(),
            versioned_tables: Vec::new(),
            thread: 0,
            group_protocol: config.processor.group_protocol,
            max_task_idle_ms: config.processor.max_task_idle_ms,
            repartition_purge_interval: Duration::from_millis(
                config.processor.repartition_purge_interval_ms,
            ),
        })
    }

    /// The ladder of input topic `base` (the default policy for a topic not configured).
    pub fn retry_for(&self, base: &str) -> &RetryPolicy {
        static DEFAULT: std::sync::OnceLock<RetryPolicy> = std::sync::OnceLock::new();
        self.retry
            .get(base)
            .unwrap_or_else(|| DEFAULT.get_or_init(RetryPolicy::default))
    }

    /// `transactional.id` of this loop: `<app>-<instance>` for the first processing thread
    /// (the id of a one-thread instance), `<app>-<instance>-t<i>` for thread `i` (KIP-447: one
    /// producer per thread, each fenced by its own id).
    ///
    /// ```
    /// use eosflow::config::Config;
    /// use eosflow::internals::processor::RuntimeOptions;
    /// let mut config = Config::default();
    /// config.app.id = "orders".into();
    /// config.app.instance_id = "pod-0".into();
    /// config.processor.input_topics = vec!["in".into()];
    /// let mut opts = RuntimeOptions::from_config(&config).unwrap();
    /// assert_eq!(opts.transactional_id(), "orders-pod-0");
    /// opts.thread = 2;
    /// assert_eq!(opts.transactional_id(), "orders-pod-0-t2");
    /// assert_eq!(opts.member_instance_id(), "pod-0-t2");
    /// ```
    pub fn transactional_id(&self) -> String {
        format!("{}-{}", self.app_id, self.member_instance_id())
    }

    /// This loop's `group.instance.id` under static membership: the instance id, suffixed
    /// `-t<i>` for processing thread `i` > 0 (every thread is its own group member).
    pub fn member_instance_id(&self) -> String {
        if self.thread == 0 {
            self.instance_id.clone()
        } else {
            format!("{}-t{}", self.instance_id, self.thread)
        }
    }
}
