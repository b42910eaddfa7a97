//! `[state]`: where the RocksDB stores live, their memory budget, and the dedup window.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

/// Local state (RocksDB) and the dedup window.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// Root of the per-instance, per-partition stores.
    pub dir: PathBuf,
    /// RocksDB memory shared by all stores of the instance (≥ 1 MiB): one block cache, with
    /// every store's memtables charged to it (memtables beyond half of it are flushed). Each
    /// open store also costs about 1 MiB outside it (see docs/operations.md).
    pub memory_bytes: u64,
    /// The record cache in front of every store's key-value reads, shared by all stores of
    /// the instance (divided between its processing threads): recently read committed values
    /// answered from memory instead of RocksDB. 0 switches it off. Never changes what is
    /// committed or emitted (see docs/operations.md).
    pub cache_bytes: u64,
    /// How long a processed message id is remembered (the worst redelivery age).
    pub dedup_retention_secs: u64,
    /// How often expired dedup entries are purged (tombstoned in the changelog).
    pub dedup_purge_interval_secs: u64,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("/var/lib/eosflow"),
            memory_bytes: 128 * 1024 * 1024,
            cache_bytes: 10 * 1024 * 1024,
            dedup_retention_secs: 7 * 24 * 3600,
            dedup_purge_interval_secs: 60,
        }
    }
}

impl StateConfig {
    /// Range checks serde cannot express.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.memory_bytes < 1024 * 1024 {
            return Err(ConfigError::invalid(
                "state.memory_bytes",
                "must be ≥ 1 MiB (1048576)",
            ));
        }
        if self.dedup_retention_secs == 0 {
            return Err(ConfigError::invalid(
                "state.dedup_retention_secs",
                "must be ≥ 1 (dedup cannot be switched off by a zero window)",
            ));
        }
        Ok(())
    }
}
