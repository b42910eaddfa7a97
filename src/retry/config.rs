//! `[retry]`: the retry ladder of every input topic, what a dead-lettered head does to its key,
//! and the DLT watcher's interval; turned into a [`RetryPolicy`] per topic.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{OnDeadLetter, RetryPolicy};
use crate::config::ConfigError;

/// The retry ladder of every input topic.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Delay before each level: its length (at most 10) is the number of `<topic>.retry.<n>`
    /// levels.
    pub delays_ms: Vec<u64>,
    /// ± random jitter on each delay, in percent (0..=100).
    pub jitter_percent: u64,
    /// Cap on any delay.
    pub max_delay_ms: u64,
    /// What happens to a key's later records when its head record is dead-lettered.
    pub on_dead_letter: OnDeadLetter,
    /// Delays of one input topic's ladder, overriding `delays_ms` (TOML: `[retry.per_topic]`,
    /// `"payments" = [500, 5000]`): a slow dependency gets a longer ladder than a flaky one.
    pub per_topic: BTreeMap<String, Vec<u64>>,
    /// How often `eosflow_dlt_depth_records` and `eosflow_dlt_oldest_age_seconds` are refreshed
    /// (0 = no DLT watcher).
    pub dlt_depth_interval_ms: u64,
    /// Most records waiting behind one parked key; beyond it a record of the key is
    /// dead-lettered with class `parked-overflow` (ERROR log, `eosflow_parked_overflow_total`).
    pub max_parked_followers_per_key: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            delays_ms: vec![1_000, 10_000, 60_000],
            jitter_percent: 20,
            max_delay_ms: 3_600_000,
            on_dead_letter: OnDeadLetter::Continue,
            per_topic: BTreeMap::new(),
            dlt_depth_interval_ms: 15_000,
            max_parked_followers_per_key: super::parked::DEFAULT_MAX_FOLLOWERS,
        }
    }
}

impl RetryConfig {
    /// The policy of `topic`'s ladder (its `per_topic` delays, else the default ones).
    pub fn policy_for(&self, topic: &str) -> RetryPolicy {
        let mut p = self.policy();
        if let Some(delays) = self.per_topic.get(topic) {
            p.delays = delays.iter().map(|d| Duration::from_millis(*d)).collect();
        }
        p
    }

    /// The default policy.
    pub fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            delays: self
                .delays_ms
                .iter()
                .map(|d| Duration::from_millis(*d))
                .collect(),
            jitter: self.jitter_percent as f64 / 100.0,
            max_delay: Duration::from_millis(self.max_delay_ms),
            on_dead_letter: self.on_dead_letter,
            max_parked_followers: self.max_parked_followers_per_key,
        }
    }

    /// Range checks serde cannot express.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.delays_ms.len() > 10 {
            return Err(ConfigError::invalid("retry.delays_ms", "at most 10 levels"));
        }
        if let Some((topic, _)) = self.per_topic.iter().find(|(_, d)| d.len() > 10) {
            return Err(ConfigError::invalid(
                "retry.per_topic",
                format!("{topic:?}: at most 10 levels"),
            ));
        }
        if self.max_parked_followers_per_key == 0 {
            return Err(ConfigError::invalid(
                "retry.max_parked_followers_per_key",
                "must be at least 1",
            ));
        }
        if self.jitter_percent > 100 {
            return Err(ConfigError::invalid(
                "retry.jitter_percent",
                "must be 0..=100",
            ));
        }
        Ok(())
    }
}
