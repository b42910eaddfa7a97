//! The one typed configuration of an eosflow instance: [`Config`], how it is loaded, and the
//! validation entry point.
//!
//! Sources, later ones winning: built-in defaults → a TOML file (`--config`) → `EOSFLOW_*`
//! environment variables (`sources.rs`). Every key has an environment name derived from its path:
//! `kafka.bootstrap` ↔ `EOSFLOW_KAFKA_BOOTSTRAP`, `processor.commit_interval_ms` ↔
//! `EOSFLOW_PROCESSOR_COMMIT_INTERVAL_MS`. Unknown keys and bad values are rejected at start
//! with the key's name (and, for a choice, the accepted values), so a typo never silently falls
//! back to a default.
//!
//! Each section is declared, documented and validated next to the module that owns it
//! (`kafka::config`, `processor::config`, `state::config`, `retry::config`, `codec::config`,
//! `telemetry::config`; the outbox's in `config/outbox.rs`) and re-exported here, so
//! `eosflow::config::KafkaConfig` and friends stay where users import them from. The
//! configuration reference (`docs/reference/configuration.md`) is generated from these doc
//! comments (`make config-reference`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub(crate) mod choice;
mod outbox;
mod secret;
mod sources;
#[cfg(test)]
mod tests;

pub use crate::codec::config::SchemaRegistryConfig;
pub use crate::kafka::config::{KafkaConfig, KafkaSecurityConfig, SaslMechanism, SecurityProtocol};
pub use crate::processor::config::{GroupProtocol, Guarantee, ProcessorConfig};
pub use crate::query::{Partitioner, QueriesConfig};
pub use crate::retry::config::RetryConfig;
pub use crate::retry::OnDeadLetter;
pub use crate::state::config::StateConfig;
pub use crate::telemetry::config::MetricsConfig;
pub use outbox::{
    JsonPayloadNullBehavior, OutboxConfig, OutboxMode, OutboxSnapshot, OutboxTableConfig,
    PayloadFormat, PostgresConfig, DEBEZIUM_OUTBOX_OPTIONS,
};
pub use secret::Secret;

/// Why a configuration could not be loaded: always names the key and the source.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file named by `--config`.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file or an environment variable did not parse, or a key is unknown.
    #[error("invalid configuration ({origin}): {message}")]
    Parse {
        /// The file or variable the value came from.
        origin: String,
        /// What is wrong, naming the key.
        message: String,
    },
    /// A secret file named by the configuration could not be read (the path is shown, never
    /// the contents).
    #[error("cannot read `{key}` (env {env}) file {path}: {source}")]
    SecretFile {
        /// The dotted key, e.g. `kafka.security.password_file`.
        key: &'static str,
        /// The environment variable that sets it.
        env: String,
        /// The file it names.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A value parsed but is outside what the runtime accepts.
    #[error("invalid value for `{key}` (env {env}): {reason}")]
    Invalid {
        /// The dotted key, e.g. `processor.commit_interval_ms`.
        key: &'static str,
        /// The environment variable that sets it.
        env: String,
        /// What is accepted instead.
        reason: String,
    },
}

impl ConfigError {
    /// A value that parsed but is not accepted: names the key and its environment variable.
    pub(crate) fn invalid(key: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            key,
            env: env_name(key),
            reason: reason.into(),
        }
    }
}

/// Identity of the application and of this instance.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AppConfig {
    /// Names the consumer group (letters, digits, `.`, `_`, `-`), the changelog topics and the `transactional.id` prefix.
    pub id: String,
    /// Stable per instance (the pod name): suffix of `transactional.id`, and the state sub-directory.
    /// Empty means `$POD_NAME`, then `$HOSTNAME`; with neither, a processor refuses to start
    /// (two processes sharing one id would fence each other's transactions).
    pub instance_id: String,
}

impl Default for AppConfig {
    fn default() -> Self {
        Self {
            id: "eosflow".into(),
            instance_id: String::new(),
        }
    }
}

impl AppConfig {
    /// `app.id` can name topics, the consumer group and transactional ids.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.id.is_empty()
            || !self
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(ConfigError::invalid(
                "app.id",
                format!(
                    "{:?}: use letters, digits, '.', '_' or '-' (it names topics and the group)",
                    self.id
                ),
            ));
        }
        Ok(())
    }
}

/// Everything an instance needs, validated as a whole at start.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Identity.
    pub app: AppConfig,
    /// Broker connection.
    pub kafka: KafkaConfig,
    /// Exactly-once loop.
    pub processor: ProcessorConfig,
    /// RocksDB and dedup.
    pub state: StateConfig,
    /// Retry ladder and dead letters.
    pub retry: RetryConfig,
    /// Outbox database.
    pub postgres: PostgresConfig,
    /// Schema registry.
    pub schema_registry: SchemaRegistryConfig,
    /// Metrics endpoint.
    pub metrics: MetricsConfig,
    /// Interactive query listener.
    pub queries: QueriesConfig,
    /// Outbox router.
    pub outbox: OutboxConfig,
}

/// Environment variable for a dotted key: `kafka.bootstrap` → `EOSFLOW_KAFKA_BOOTSTRAP`.
///
/// ```
/// assert_eq!(eosflow::config::env_name("kafka.bootstrap"), "EOSFLOW_KAFKA_BOOTSTRAP");
/// ```
pub fn env_name(key: &str) -> String {
    format!("EOSFLOW_{}", key.replace('.', "_").to_uppercase())
}

/// Keys that were renamed: a config still setting the old one fails at start saying so.
const RENAMED: [(&str, &str, &str); 1] = [(
    "state.block_cache_bytes",
    "state.memory_bytes",
    "it now bounds the memtables too, not only the block cache",
)];

fn renamed(origin: &str, (old, new, why): &(&str, &str, &str)) -> ConfigError {
    ConfigError::Parse {
        origin: origin.to_string(),
        message: format!(
            "`{old}` was renamed: set `{new}` (env {}) instead; {why}",
            env_name(new)
        ),
    }
}

impl Config {
    /// Loads defaults, then `file` (if any), then the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let vars: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| k.starts_with("EOSFLOW_"))
            .collect();
        let text = match file {
            Some(path) => {
                Some(
                    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                        path: path.to_path_buf(),
                        source,
                    })?,
                )
            }
            None => None,
        };
        let origin = file.map(|p| p.display().to_string());
        Self::from_sources(text.as_deref(), origin.as_deref(), &vars)
    }

    /// The pure part of [`Config::load`], so tests need not touch the process environment.
    pub fn from_sources(
        toml_text: Option<&str>,
        origin: Option<&str>,
        env: &[(String, String)],
    ) -> Result<Self, ConfigError> {
        let defaults = Self::defaults_tree()?;
        let mut merged = defaults.clone();
        for (name, _) in env {
            if let Some(r) = RENAMED.iter().find(|(old, _, _)| env_name(old) == *name) {
                return Err(renamed(&format!("env {name}"), r));
            }
        }
        if let Some(text) = toml_text {
            let origin = origin.unwrap_or("config file");
            let file: toml::Value = toml::from_str(text).map_err(|e| ConfigError::Parse {
                origin: origin.to_string(),
                message: e.to_string(),
            })?;
            for r in &RENAMED {
                if r.0.split('.').try_fold(&file, |n, k| n.get(k)).is_some() {
                    return Err(renamed(origin, r));
                }
            }
            // Type-check the file alone first, so its errors name the file, not the env.
            if let Err(e) = Config::deserialize(file.clone()) {
                let settings: Vec<_> = sources::leaves(&file)
                    .into_iter()
                    .map(|(path, value)| (origin.to_string(), path, value))
                    .collect();
                return Err(sources::parse_error(
                    &defaults,
                    &settings,
                    (origin.to_string(), e),
                ));
            }
            sources::merge(&mut merged, file);
        }
        let base = merged.clone();
        let mut settings = vec![];
        for (name, raw) in env {
            if let Some(path) = sources::apply_env(&mut merged, &defaults, name, raw)? {
                let value = path
                    .iter()
                    .try_fold(&merged, |n, k| n.get(k.as_str()))
                    .cloned();
                if let Some(value) = value {
                    settings.push((format!("env {name}"), path, value));
                }
            }
        }
        let mut config = Config::deserialize(merged)
            .map_err(|e| sources::parse_error(&base, &settings, ("environment".into(), e)))?;
        config.validate()?;
        config.read_secret_files()?;
        config.kafka.security.validate(&config.kafka.properties)?;
        config.queries.validate_auth()?;
        Ok(config)
    }

    /// The defaults as a TOML tree: what the file and the environment are layered over, and
    /// what types each environment variable. Secrets serialize as `***`, so their defaults
    /// (`postgres.url`) are put back as they are.
    fn defaults_tree() -> Result<toml::Value, ConfigError> {
        let config = Config::default();
        let mut tree = toml::Value::try_from(&config).map_err(|e| ConfigError::Parse {
            origin: "defaults".into(),
            message: e.to_string(),
        })?;
        for (key, secret) in config.secrets() {
            let path: Vec<&str> = key.split('.').collect();
            let Some((field, parents)) = path.split_last() else {
                continue;
            };
            let table = parents
                .iter()
                .try_fold(&mut tree, |n, k| n.get_mut(*k))
                .and_then(toml::Value::as_table_mut);
            if let Some(t) = table {
                t.insert(
                    field.to_string(),
                    toml::Value::String(secret.expose().to_string()),
                );
            }
        }
        Ok(tree)
    }

    /// Every secret of the configuration with its key: what is never shown.
    pub fn secrets(&self) -> [(&'static str, &Secret); 5] {
        [
            ("kafka.security.password", &self.kafka.security.password),
            (
                "kafka.security.ssl_key_password",
                &self.kafka.security.ssl_key_password,
            ),
            ("schema_registry.password", &self.schema_registry.password),
            ("postgres.url", &self.postgres.url),
            ("queries.token", &self.queries.token),
        ]
    }

    /// Reads `*_password_file` keys into their secrets, once, at start.
    fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        let s = &mut self.kafka.security;
        let r = &mut self.schema_registry;
        let q = &mut self.queries;
        let pairs: [(&'static str, &'static str, &Path, &mut Secret); 4] = [
            (
                "queries.token_file",
                "queries.token",
                &q.token_file,
                &mut q.token,
            ),
            (
                "schema_registry.password_file",
                "schema_registry.password",
                &r.password_file,
                &mut r.password,
            ),
            (
                "kafka.security.password_file",
                "kafka.security.password",
                &s.password_file,
                &mut s.password,
            ),
            (
                "kafka.security.ssl_key_password_file",
                "kafka.security.ssl_key_password",
                &s.ssl_key_password_file,
                &mut s.ssl_key_password,
            ),
        ];
        for (key, inline_key, path, secret) in pairs {
            if path.as_os_str().is_empty() {
                continue;
            }
            if !secret.is_empty() {
                return Err(ConfigError::Invalid {
                    key,
                    env: env_name(key),
                    reason: format!("set either `{inline_key}` or `{key}`, not both"),
                });
            }
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::SecretFile {
                key,
                env: env_name(key),
                path: path.to_path_buf(),
                source,
            })?;
            let value = text.strip_suffix('\n').unwrap_or(&text);
            let value = value.strip_suffix('\r').unwrap_or(value);
            *secret = Secret::new(value);
        }
        Ok(())
    }

    /// Range checks serde cannot express, section by section (`[kafka.security]` is checked
    /// once its secret files are read).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.app.validate()?;
        self.kafka.validate()?;
        self.processor.validate()?;
        self.state.validate()?;
        self.retry.validate()?;
        self.metrics.validate()?;
        self.queries.validate()?;
        self.schema_registry.validate()?;
        self.outbox.validate()
    }

    /// This instance's id: the configured one, else the pod name or host name.
    pub fn instance_id(&self) -> Result<String, String> {
        if !self.app.instance_id.is_empty() {
            return Ok(self.app.instance_id.clone());
        }
        for var in ["POD_NAME", "HOSTNAME"] {
            if let Ok(v) = std::env::var(var) {
                if !v.is_empty() {
                    return Ok(v);
                }
            }
        }
        Err("`app.instance_id` (EOSFLOW_APP_INSTANCE_ID) is empty and neither POD_NAME nor HOSTNAME is set: give every processor process its own stable id (two processes with one id fence each other's transactions)".into())
    }
}
