//! The one typed configuration of an eosflow instance.
//!
//! Sources, later ones winning: built-in defaults → a TOML file (`--config`) → `EOSFLOW_*`
//! environment variables. Every key has an environment name derived from its path:
//! `kafka.bootstrap` ↔ `EOSFLOW_KAFKA_BOOTSTRAP`, `processor.commit_interval_ms` ↔
//! `EOSFLOW_PROCESSOR_COMMIT_INTERVAL_MS`. Unknown keys and bad values are rejected at start
//! with the key's name, so a typo never silently falls back to a default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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

/// Identity of the application and of this instance.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AppConfig {
    /// Names the consumer group, the changelog topics and the `transactional.id` prefix.
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

/// How to reach Kafka.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// `bootstrap.servers`.
    pub bootstrap: String,
    /// Authentication and encryption to the brokers (SASL, TLS), applied to every client role.
    pub security: KafkaSecurityConfig,
    /// Passed to librdkafka as they are: the escape hatch for whatever a cluster needs that
    /// eosflow does not model (prefer `[kafka.security]` for SASL and TLS).
    pub properties: BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            bootstrap: "127.0.0.1:19092".into(),
            security: KafkaSecurityConfig::default(),
            properties: BTreeMap::new(),
        }
    }
}

/// A secret value (password): never shown by `Debug`, `Display` or serialization (which writes
/// `***`), so neither logs, error messages nor `eosflow config` can leak it.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret read from a file or the environment.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that hands it to a client library.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether no secret was given (an empty password is treated as absent).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "\"***\"" })
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if self.0.is_empty() { "" } else { "***" })
    }
}

/// SASL and TLS settings for the brokers; mapped to librdkafka's `security.protocol`, `sasl.*`
/// and `ssl.*` for every client role. Empty strings mean "not set".
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaSecurityConfig {
    /// `plaintext`, `ssl`, `sasl_plaintext` or `sasl_ssl` (librdkafka's `security.protocol`).
    pub protocol: String,
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`; required by the `sasl_*` protocols.
    pub sasl_mechanism: String,
    /// SASL user name; required by the `sasl_*` protocols.
    pub username: String,
    /// SASL password; prefer `password_file` (a mounted Secret) or the environment variable.
    pub password: Secret,
    /// File holding the SASL password (read once at start; one trailing newline is dropped).
    pub password_file: String,
    /// CA bundle (PEM) that verifies the brokers' certificates (`ssl.ca.location`).
    pub ssl_ca_location: String,
    /// Client certificate (PEM) for mutual TLS (`ssl.certificate.location`).
    pub ssl_certificate_location: String,
    /// Client private key (PEM) for mutual TLS (`ssl.key.location`).
    pub ssl_key_location: String,
    /// Password of the client private key (`ssl.key.password`).
    pub ssl_key_password: Secret,
    /// File holding the private key's password (read once at start).
    pub ssl_key_password_file: String,
}

impl Default for KafkaSecurityConfig {
    fn default() -> Self {
        Self {
            protocol: "plaintext".into(),
            sasl_mechanism: String::new(),
            username: String::new(),
            password: Secret::default(),
            password_file: String::new(),
            ssl_ca_location: String::new(),
            ssl_certificate_location: String::new(),
            ssl_key_location: String::new(),
            ssl_key_password: Secret::default(),
            ssl_key_password_file: String::new(),
        }
    }
}

/// The protocols `kafka.security.protocol` accepts.
pub const KAFKA_SECURITY_PROTOCOLS: &[&str] = &["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"];
/// The mechanisms `kafka.security.sasl_mechanism` accepts.
pub const KAFKA_SASL_MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

impl KafkaSecurityConfig {
    /// Whether the protocol authenticates with SASL.
    pub fn uses_sasl(&self) -> bool {
        self.protocol.starts_with("sasl_")
    }

    /// Whether the protocol encrypts with TLS.
    pub fn uses_tls(&self) -> bool {
        self.protocol.ends_with("ssl")
    }

    /// The librdkafka properties these settings stand for (secrets included: for clients only).
    pub fn librdkafka_properties(&self) -> Vec<(&'static str, String)> {
        let mut props = vec![("security.protocol", self.protocol.clone())];
        if self.uses_sasl() {
            props.push(("sasl.mechanisms", self.sasl_mechanism.clone()));
            props.push(("sasl.username", self.username.clone()));
            props.push(("sasl.password", self.password.expose().to_string()));
        }
        if self.uses_tls() {
            for (key, value) in [
                ("ssl.ca.location", &self.ssl_ca_location),
                ("ssl.certificate.location", &self.ssl_certificate_location),
                ("ssl.key.location", &self.ssl_key_location),
            ] {
                if !value.is_empty() {
                    props.push((key, value.clone()));
                }
            }
            if !self.ssl_key_password.is_empty() {
                props.push((
                    "ssl.key.password",
                    self.ssl_key_password.expose().to_string(),
                ));
            }
        }
        props
    }
}

/// librdkafka properties `[kafka.security]` owns: setting them in `[kafka.properties]` too
/// would leave two answers to one question.
const SECURITY_KAFKA_PROPERTIES: &[&str] = &[
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
];

/// The exactly-once loop's knobs (Kafka Streams names where they exist).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ProcessorConfig {
    /// Input topics, co-partitioned (same partition count, keyed by aggregate id).
    pub input_topics: Vec<String>,
    /// Longest a batch stays open before its transaction commits (`commit.interval.ms`).
    pub commit_interval_ms: u64,
    /// Most records in one transaction.
    pub max_batch_records: usize,
    /// Most key + value bytes in one transaction: bounds the memory a batch holds (Kafka
    /// Streams bounds it with `buffered.records.per.partition`; bytes is what memory is).
    pub max_batch_bytes: usize,
    /// `transaction.timeout.ms`: how long a dead instance's open transaction blocks its partitions.
    pub transaction_timeout_ms: u64,
    /// `session.timeout.ms` of the consumer group.
    pub session_timeout_ms: u64,
    /// Deadline for restoring one partition's store from its changelog.
    pub restore_timeout_ms: u64,
    /// `group.instance.id` = the instance id: a restart within the session timeout keeps the
    /// assignment (no rebalance). On in Kubernetes (stable pod names).
    pub static_membership: bool,
    /// Longest a SIGTERM/SIGINT shutdown may take (commit the open batch, leave) before exiting.
    pub shutdown_timeout_ms: u64,
    /// `/healthz` fails when the loop has not turned for this long (restores excepted).
    pub stuck_after_ms: u64,
    /// `exactly_once` (transactions; the default) or `at_least_once` (outputs acknowledged, then
    /// plain offset commits; a crash replays the last batch): the baseline that prices exactly-once.
    pub guarantee: String,
}

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
            static_membership: false,
            shutdown_timeout_ms: 30_000,
            stuck_after_ms: 60_000,
            guarantee: "exactly_once".into(),
        }
    }
}

/// Local state (RocksDB) and the dedup window.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// Root of the per-instance, per-partition stores.
    pub dir: PathBuf,
    /// RocksDB block cache shared by all stores of the instance: the memory budget.
    pub block_cache_bytes: u64,
    /// How long a processed message id is remembered (the worst redelivery age).
    pub dedup_retention_secs: u64,
    /// How often expired dedup entries are purged (tombstoned in the changelog).
    pub dedup_purge_interval_secs: u64,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("/var/lib/eosflow"),
            block_cache_bytes: 64 * 1024 * 1024,
            dedup_retention_secs: 7 * 24 * 3600,
            dedup_purge_interval_secs: 60,
        }
    }
}

/// The retry ladder of every input topic.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Delay before each level: its length is the number of `<topic>.retry.<n>` levels.
    pub delays_ms: Vec<u64>,
    /// ± random jitter on each delay, in percent.
    pub jitter_percent: u64,
    /// Cap on any delay.
    pub max_delay_ms: u64,
    /// `continue` (the key's next record goes on) or `park` (the key waits for a redrive)
    /// when a key's head record is dead-lettered.
    pub on_dead_letter: String,
    /// Delays of one input topic's ladder, overriding `delays_ms` (TOML: `[retry.per_topic]`,
    /// `"payments" = [500, 5000]`): a slow dependency gets a longer ladder than a flaky one.
    pub per_topic: BTreeMap<String, Vec<u64>>,
    /// How often `eosflow_dlt_depth_records` is refreshed (0 = no DLT depth watcher).
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
            on_dead_letter: "continue".into(),
            per_topic: BTreeMap::new(),
            dlt_depth_interval_ms: 15_000,
            max_parked_followers_per_key: crate::retry::parked::DEFAULT_MAX_FOLLOWERS,
        }
    }
}

impl RetryConfig {
    /// The policy of `topic`'s ladder (its `per_topic` delays, else the default ones).
    pub fn policy_for(&self, topic: &str) -> crate::retry::RetryPolicy {
        let mut p = self.policy();
        if let Some(delays) = self.per_topic.get(topic) {
            p.delays = delays
                .iter()
                .map(|d| std::time::Duration::from_millis(*d))
                .collect();
        }
        p
    }

    /// The default policy.
    pub fn policy(&self) -> crate::retry::RetryPolicy {
        crate::retry::RetryPolicy {
            delays: self
                .delays_ms
                .iter()
                .map(|d| std::time::Duration::from_millis(*d))
                .collect(),
            jitter: self.jitter_percent as f64 / 100.0,
            max_delay: std::time::Duration::from_millis(self.max_delay_ms),
            on_dead_letter: if self.on_dead_letter == "park" {
                crate::retry::OnDeadLetter::Park
            } else {
                crate::retry::OnDeadLetter::Continue
            },
            max_parked_followers: self.max_parked_followers_per_key,
        }
    }
}

/// The outbox's database.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PostgresConfig {
    /// libpq-style URL; the password may also come from `EOSFLOW_POSTGRES_URL`.
    pub url: String,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        Self {
            url: "postgres://eosflow:eosflow@127.0.0.1:15432/eosflow".into(),
        }
    }
}

/// The Confluent-compatible schema registry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SchemaRegistryConfig {
    /// Base URL of the Confluent API (Apicurio: `…/apis/ccompat/v7`).
    pub url: String,
    /// CA bundle (PEM) that verifies an `https://` registry signed by a private CA.
    pub ca_file: String,
    /// HTTP basic-auth user (Confluent Cloud: the API key); empty = no authentication.
    pub username: String,
    /// Basic-auth password; prefer `password_file` (a mounted Secret) or the environment.
    pub password: Secret,
    /// File holding the basic-auth password (read once at start).
    pub password_file: String,
}

impl Default for SchemaRegistryConfig {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:18081/apis/ccompat/v7".into(),
            ca_file: String::new(),
            username: String::new(),
            password: Secret::default(),
            password_file: String::new(),
        }
    }
}

/// The Prometheus endpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `host:port` for `/metrics`; empty disables the listener.
    pub listen: String,
}

/// The outbox router (`eosflow outbox`): which table, how rows map to records, how it runs.
/// Column names are flat keys so each has an environment variable.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OutboxConfig {
    /// `cdc` (logical replication, exactly-once) or `poll` (`FOR UPDATE SKIP LOCKED`, at-least-once).
    pub mode: String,
    /// Outbox table (optionally `schema.table`).
    pub table: String,
    /// Event id column (uuid, primary key): the `id` header.
    pub column_id: String,
    /// Event time column: the `occurred_at` header.
    pub column_occurred_at: String,
    /// Optional aggregate type column: the default route when present and not NULL.
    pub column_aggregate_type: String,
    /// Aggregate id column: the record key (per-aggregate order).
    pub column_aggregate_id: String,
    /// Event type column: the `type` header; its prefix before `.` routes when there is no aggregate type.
    pub column_type: String,
    /// JSON payload column: the record value, as is.
    pub column_payload: String,
    /// JSON object column whose keys become Kafka headers.
    pub column_headers: String,
    /// Set by the polling publisher when a row is published; pruning uses it.
    pub column_sent_at: String,
    /// Optional column holding the payload's schema version: the `schema_version` header
    /// (Debezium's `table.field.event.schema.version`); empty = none.
    pub column_schema_version: String,
    /// Column whose value routes the row; empty = aggregate type, else the `type` prefix.
    pub route_by: String,
    /// Topic name template; `${routedByValue}` is replaced by the route value.
    pub topic_template: String,
    /// Partitions of routed topics the router creates when they are missing.
    pub topic_partitions: i32,
    /// Logical replication slot (pgoutput); one active router per slot.
    pub slot: String,
    /// Publication on the outbox table.
    pub publication: String,
    /// Most rows in one Kafka transaction (a Postgres transaction is never split).
    pub batch_size: usize,
    /// Longest rows wait before their Kafka transaction commits.
    pub commit_interval_ms: u64,
    /// How often an idle router writes a WAL heartbeat so the slot keeps advancing (0 = never).
    pub heartbeat_interval_ms: u64,
    /// How often the confirmed LSN is reported to Postgres.
    pub status_interval_ms: u64,
    /// `transaction.timeout.ms` of the router's transactional producer.
    pub transaction_timeout_ms: u64,
    /// Polling mode: wait between empty polls.
    pub poll_interval_ms: u64,
    /// How often old rows are deleted (0 = never).
    pub prune_interval_secs: u64,
    /// Rows older than this (by `occurred_at`; in poll mode only sent ones) are pruned.
    pub prune_after_secs: u64,
    /// `json` (payload as is) or `avro` (rows whose `type` has a contract become registered Avro).
    pub payload_format: String,
    /// Contracts for `avro`; empty = the `schemas/` compiled into the binary.
    pub schemas_dir: String,
    /// `<system id>:<timeline>:<LSN>` of a stored checkpoint the operator accepts to discard
    /// because it belongs to another cluster or timeline, or lies ahead of the server's WAL (the
    /// router stops and prints the exact value). Matches that one checkpoint only, so a value
    /// left set never accepts a later mismatch. Empty: never discard.
    pub discard_checkpoint: String,
    /// CDC: `initial` (default) publishes the rows already in the table when nothing was ever
    /// published for the slot, consistently with the stream (exported snapshot); `never` streams
    /// only what commits after the slot exists.
    pub snapshot: String,
    /// Extra columns copied into Kafka headers, `column:header[:name]` (Debezium's
    /// `table.fields.additional.placement`; only the `header` placement is supported).
    pub additional_placement: Vec<String>,
    /// Further outbox tables served by the same router (`[[outbox.tables]]`), each with its
    /// own column mappings and routing; `outbox.table` is always served too. All go through the
    /// one slot and publication, in commit order. CDC mode only.
    pub tables: Vec<OutboxTableConfig>,
    /// Debezium Outbox Event Router options by their Debezium names (`"table.field.event.id" =
    /// "event_id"`, …), mapped onto the keys above so a connector's configuration carries over;
    /// an option without an equivalent fails at start naming it.
    pub debezium: BTreeMap<String, String>,
}

/// One more outbox table of a router (`[[outbox.tables]]`): its name and the mappings that
/// differ from the `outbox.*` ones (an empty key inherits the `outbox.*` value).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OutboxTableConfig {
    /// The table (optionally `schema.table`).
    pub table: String,
    /// `outbox.column_id` for this table.
    pub column_id: String,
    /// `outbox.column_occurred_at` for this table.
    pub column_occurred_at: String,
    /// `outbox.column_aggregate_type` for this table.
    pub column_aggregate_type: String,
    /// `outbox.column_aggregate_id` for this table.
    pub column_aggregate_id: String,
    /// `outbox.column_type` for this table.
    pub column_type: String,
    /// `outbox.column_payload` for this table.
    pub column_payload: String,
    /// `outbox.column_headers` for this table.
    pub column_headers: String,
    /// `outbox.column_schema_version` for this table.
    pub column_schema_version: String,
    /// `outbox.route_by` for this table.
    pub route_by: String,
    /// `outbox.topic_template` for this table.
    pub topic_template: String,
    /// `outbox.additional_placement` for this table.
    pub additional_placement: Vec<String>,
}

/// Debezium option → the `outbox.*` key it sets (options with a fixed behaviour here are
/// accepted only with the value that matches it, see [`OutboxConfig::effective`]).
pub const DEBEZIUM_OUTBOX_OPTIONS: &[(&str, &str)] = &[
    ("table.field.event.id", "column_id"),
    ("table.field.event.key", "column_aggregate_id"),
    ("table.field.event.type", "column_type"),
    ("table.field.event.payload", "column_payload"),
    ("table.field.event.timestamp", "column_occurred_at"),
    ("route.by.field", "route_by"),
    ("route.topic.replacement", "topic_template"),
    ("table.fields.additional.placement", "additional_placement"),
    ("table.field.event.schema.version", "column_schema_version"),
];

impl OutboxConfig {
    /// This configuration with the `debezium` options applied: what the router runs with.
    /// Err: (the Debezium option, why) for an unknown or unsupported option, or one that
    /// contradicts an `outbox.*` key set to something else.
    pub fn effective(&self) -> Result<OutboxConfig, (String, String)> {
        let mut c = self.clone();
        let defaults = OutboxConfig::default();
        for (option, value) in &self.debezium {
            let fixed = |want: &str, ours: &str| {
                if value == want {
                    Ok(())
                } else {
                    Err((
                        option.clone(),
                        format!("only {want:?} is supported ({ours})"),
                    ))
                }
            };
            let (field, default) = match option.as_str() {
                "table.field.event.id" => (&mut c.column_id, &defaults.column_id),
                "table.field.event.key" => {
                    (&mut c.column_aggregate_id, &defaults.column_aggregate_id)
                }
                "table.field.event.type" => (&mut c.column_type, &defaults.column_type),
                "table.field.event.payload" => (&mut c.column_payload, &defaults.column_payload),
                "table.field.event.timestamp" => {
                    (&mut c.column_occurred_at, &defaults.column_occurred_at)
                }
                "route.by.field" => (&mut c.route_by, &defaults.route_by),
                "table.field.event.schema.version" => (
                    &mut c.column_schema_version,
                    &defaults.column_schema_version,
                ),
                "route.topic.replacement" => (&mut c.topic_template, &defaults.topic_template),
                "table.fields.additional.placement" => {
                    c.additional_placement.extend(
                        value
                            .split(',')
                            .map(|p| p.trim().to_string())
                            .filter(|p| !p.is_empty()),
                    );
                    continue;
                }
                "route.tombstone.on.empty.payload" => {
                    fixed("true", "a NULL payload is always a tombstone")?;
                    continue;
                }
                "table.op.invalid.behavior" => {
                    fixed("warn", "UPDATE/DELETE are ignored and logged at WARN")?;
                    continue;
                }
                _ => {
                    return Err((
                        option.clone(),
                        "not supported (README, \"Outbox router\": Debezium options)".into(),
                    ))
                }
            };
            if field != default && field != value {
                return Err((
                    option.clone(),
                    format!("{value:?} contradicts the outbox key it maps to, set to {field:?}"),
                ));
            }
            *field = value.clone();
        }
        Ok(c)
    }

    /// Every table the router serves, each as a whole configuration: `outbox.table` first,
    /// then `outbox.tables` in order with their keys over the `outbox.*` ones (`tables`
    /// empty in each).
    pub fn served(&self) -> Vec<OutboxConfig> {
        let base = OutboxConfig {
            tables: vec![],
            ..self.clone()
        };
        let mut out = vec![base.clone()];
        for t in &self.tables {
            let mut c = base.clone();
            c.table = t.table.clone();
            for (field, value) in [
                (&mut c.column_id, &t.column_id),
                (&mut c.column_occurred_at, &t.column_occurred_at),
                (&mut c.column_aggregate_type, &t.column_aggregate_type),
                (&mut c.column_aggregate_id, &t.column_aggregate_id),
                (&mut c.column_type, &t.column_type),
                (&mut c.column_payload, &t.column_payload),
                (&mut c.column_headers, &t.column_headers),
                (&mut c.column_schema_version, &t.column_schema_version),
                (&mut c.route_by, &t.route_by),
                (&mut c.topic_template, &t.topic_template),
            ] {
                if !value.is_empty() {
                    *field = value.clone();
                }
            }
            if !t.additional_placement.is_empty() {
                c.additional_placement = t.additional_placement.clone();
            }
            out.push(c);
        }
        out
    }
}

impl Default for OutboxConfig {
    fn default() -> Self {
        Self {
            mode: "cdc".into(),
            table: "outbox".into(),
            column_id: "id".into(),
            column_occurred_at: "occurred_at".into(),
            column_aggregate_type: "aggregate_type".into(),
            column_aggregate_id: "aggregate_id".into(),
            column_type: "type".into(),
            column_payload: "payload".into(),
            column_headers: "headers".into(),
            column_sent_at: "sent_at".into(),
            column_schema_version: String::new(),
            route_by: String::new(),
            topic_template: "outbox.event.${routedByValue}".into(),
            topic_partitions: 8,
            slot: "eosflow_outbox".into(),
            publication: "eosflow_outbox".into(),
            batch_size: 1000,
            commit_interval_ms: 100,
            heartbeat_interval_ms: 10_000,
            status_interval_ms: 1000,
            transaction_timeout_ms: 10_000,
            poll_interval_ms: 200,
            prune_interval_secs: 3600,
            prune_after_secs: 7 * 24 * 3600,
            payload_format: "json".into(),
            schemas_dir: String::new(),
            discard_checkpoint: String::new(),
            snapshot: "initial".into(),
            additional_placement: vec![],
            tables: vec![],
            debezium: BTreeMap::new(),
        }
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
    /// Outbox router.
    pub outbox: OutboxConfig,
}

/// Environment variable for a dotted key: `kafka.bootstrap` → `EOSFLOW_KAFKA_BOOTSTRAP`.
pub fn env_name(key: &str) -> String {
    format!("EOSFLOW_{}", key.replace('.', "_").to_uppercase())
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
        let defaults =
            toml::Value::try_from(Config::default()).map_err(|e| ConfigError::Parse {
                origin: "defaults".into(),
                message: e.to_string(),
            })?;
        let mut merged = defaults.clone();
        if let Some(text) = toml_text {
            let origin = origin.unwrap_or("config file");
            let file: toml::Value = toml::from_str(text).map_err(|e| ConfigError::Parse {
                origin: origin.to_string(),
                message: e.to_string(),
            })?;
            // Type-check the file alone first, so its errors name the file, not the env.
            Config::deserialize(file.clone()).map_err(|e| ConfigError::Parse {
                origin: origin.to_string(),
                message: e.to_string(),
            })?;
            merge(&mut merged, file);
        }
        for (name, raw) in env {
            apply_env(&mut merged, &defaults, name, raw)?;
        }
        let mut config = Config::deserialize(merged).map_err(|e| ConfigError::Parse {
            origin: "environment".into(),
            message: e.to_string(),
        })?;
        config.validate()?;
        config.read_secret_files()?;
        config.validate_kafka_security()?;
        Ok(config)
    }

    /// Reads `*_password_file` keys into their secrets, once, at start.
    fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        let s = &mut self.kafka.security;
        let r = &mut self.schema_registry;
        let pairs: [(&'static str, &'static str, &str, &mut Secret); 3] = [
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
            if path.is_empty() {
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
                path: PathBuf::from(path),
                source,
            })?;
            let value = text.strip_suffix('\n').unwrap_or(&text);
            let value = value.strip_suffix('\r').unwrap_or(value);
            *secret = Secret::new(value);
        }
        Ok(())
    }

    /// Checks `[kafka.security]` once its secret files are read.
    fn validate_kafka_security(&self) -> Result<(), ConfigError> {
        fn bad(key: &'static str, reason: impl Into<String>) -> ConfigError {
            ConfigError::Invalid {
                key,
                env: env_name(key),
                reason: reason.into(),
            }
        }
        let s = &self.kafka.security;
        if !KAFKA_SECURITY_PROTOCOLS.contains(&s.protocol.as_str()) {
            return Err(bad(
                "kafka.security.protocol",
                format!(
                    "{:?}: use one of {}",
                    s.protocol,
                    KAFKA_SECURITY_PROTOCOLS.join(", ")
                ),
            ));
        }
        if s.uses_sasl() {
            if !KAFKA_SASL_MECHANISMS.contains(&s.sasl_mechanism.as_str()) {
                return Err(bad(
                    "kafka.security.sasl_mechanism",
                    format!(
                        "{:?}: protocol {} needs one of {}",
                        s.sasl_mechanism,
                        s.protocol,
                        KAFKA_SASL_MECHANISMS.join(", ")
                    ),
                ));
            }
            if s.username.is_empty() {
                return Err(bad(
                    "kafka.security.username",
                    format!("empty: protocol {} needs a user name", s.protocol),
                ));
            }
            if s.password.is_empty() {
                return Err(bad(
                    "kafka.security.password",
                    format!(
                        "empty: protocol {} needs a password (or kafka.security.password_file, env {})",
                        s.protocol,
                        env_name("kafka.security.password_file")
                    ),
                ));
            }
        } else {
            for (key, set) in [
                (
                    "kafka.security.sasl_mechanism",
                    !s.sasl_mechanism.is_empty(),
                ),
                ("kafka.security.username", !s.username.is_empty()),
                ("kafka.security.password", !s.password.is_empty()),
            ] {
                if set {
                    return Err(bad(
                        key,
                        format!("is set but protocol {} does not use SASL (use sasl_plaintext or sasl_ssl)", s.protocol),
                    ));
                }
            }
        }
        if !s.uses_tls() {
            for (key, set) in [
                (
                    "kafka.security.ssl_ca_location",
                    !s.ssl_ca_location.is_empty(),
                ),
                (
                    "kafka.security.ssl_certificate_location",
                    !s.ssl_certificate_location.is_empty(),
                ),
                (
                    "kafka.security.ssl_key_location",
                    !s.ssl_key_location.is_empty(),
                ),
                (
                    "kafka.security.ssl_key_password",
                    !s.ssl_key_password.is_empty(),
                ),
            ] {
                if set {
                    return Err(bad(
                        key,
                        format!(
                            "is set but protocol {} does not use TLS (use ssl or sasl_ssl)",
                            s.protocol
                        ),
                    ));
                }
            }
        }
        if s.ssl_certificate_location.is_empty() != s.ssl_key_location.is_empty() {
            return Err(bad(
                "kafka.security.ssl_key_location",
                "mutual TLS needs both ssl_certificate_location and ssl_key_location",
            ));
        }
        if s.protocol != "plaintext" {
            for key in self.kafka.properties.keys() {
                if SECURITY_KAFKA_PROPERTIES.contains(&key.as_str()) {
                    return Err(bad(
                        "kafka.properties",
                        format!(
                            "`{key}` is set by [kafka.security]; remove it from [kafka.properties]"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Range checks serde cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        fn bad(key: &'static str, reason: impl Into<String>) -> ConfigError {
            ConfigError::Invalid {
                key,
                env: env_name(key),
                reason: reason.into(),
            }
        }
        if self.app.id.is_empty()
            || !self
                .app
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(bad(
                "app.id",
                format!(
                    "{:?}: use letters, digits, '.', '_' or '-' (it names topics and the group)",
                    self.app.id
                ),
            ));
        }
        if self.kafka.bootstrap.trim().is_empty() {
            return Err(bad("kafka.bootstrap", "empty: give host:port[,host:port]"));
        }
        for server in self.kafka.bootstrap.split(',') {
            let ok = server
                .trim()
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                return Err(bad(
                    "kafka.bootstrap",
                    format!("{server:?} is not host:port"),
                ));
            }
        }
        for key in self.kafka.properties.keys() {
            if RESERVED_KAFKA_PROPERTIES.contains(&key.as_str()) {
                return Err(bad(
                    "kafka.properties",
                    format!("`{key}` is set by eosflow itself (its exactly-once guarantee depends on it); remove it"),
                ));
            }
        }
        let p = &self.processor;
        if !(1..=60_000).contains(&p.commit_interval_ms) {
            return Err(bad(
                "processor.commit_interval_ms",
                format!("{} is outside 1..=60000", p.commit_interval_ms),
            ));
        }
        if !["exactly_once", "at_least_once"].contains(&p.guarantee.as_str()) {
            return Err(bad(
                "processor.guarantee",
                format!("{:?}: use `exactly_once` or `at_least_once`", p.guarantee),
            ));
        }
        if p.max_batch_records == 0 {
            return Err(bad("processor.max_batch_records", "must be at least 1"));
        }
        if p.max_batch_bytes < 1024 * 1024 {
            return Err(bad(
                "processor.max_batch_bytes",
                "must be ≥ 1 MiB (1048576): a batch always takes at least one record",
            ));
        }
        if p.transaction_timeout_ms < 1000 || p.transaction_timeout_ms <= p.commit_interval_ms {
            return Err(bad(
                "processor.transaction_timeout_ms",
                format!(
                    "{} must be ≥ 1000 and larger than processor.commit_interval_ms",
                    p.transaction_timeout_ms
                ),
            ));
        }
        if p.session_timeout_ms < 1000 {
            return Err(bad("processor.session_timeout_ms", "must be ≥ 1000"));
        }
        if self.state.block_cache_bytes < 1024 * 1024 {
            return Err(bad("state.block_cache_bytes", "must be ≥ 1 MiB (1048576)"));
        }
        if self.state.dedup_retention_secs == 0 {
            return Err(bad(
                "state.dedup_retention_secs",
                "must be ≥ 1 (dedup cannot be switched off by a zero window)",
            ));
        }
        if self.retry.delays_ms.len() > 10 {
            return Err(bad("retry.delays_ms", "at most 10 levels"));
        }
        if let Some((topic, _)) = self.retry.per_topic.iter().find(|(_, d)| d.len() > 10) {
            return Err(bad(
                "retry.per_topic",
                format!("{topic:?}: at most 10 levels"),
            ));
        }
        if self.retry.max_parked_followers_per_key == 0 {
            return Err(bad(
                "retry.max_parked_followers_per_key",
                "must be at least 1",
            ));
        }
        if self.retry.jitter_percent > 100 {
            return Err(bad("retry.jitter_percent", "must be 0..=100"));
        }
        if !["continue", "park"].contains(&self.retry.on_dead_letter.as_str()) {
            return Err(bad(
                "retry.on_dead_letter",
                format!("{:?}: use `continue` or `park`", self.retry.on_dead_letter),
            ));
        }
        if !self.metrics.listen.is_empty()
            && self.metrics.listen.parse::<std::net::SocketAddr>().is_err()
        {
            return Err(bad(
                "metrics.listen",
                format!(
                    "{:?} is not ip:port (e.g. 0.0.0.0:9464)",
                    self.metrics.listen
                ),
            ));
        }
        self.validate_schema_registry()?;
        self.validate_outbox()
    }

    fn validate_schema_registry(&self) -> Result<(), ConfigError> {
        let r = &self.schema_registry;
        let bad = |key: &'static str, reason: String| ConfigError::Invalid {
            key,
            env: env_name(key),
            reason,
        };
        if !(r.url.starts_with("http://") || r.url.starts_with("https://")) {
            return Err(bad(
                "schema_registry.url",
                format!("{:?} is not an http:// or https:// URL", r.url),
            ));
        }
        if !r.ca_file.is_empty() && !Path::new(&r.ca_file).is_file() {
            return Err(bad(
                "schema_registry.ca_file",
                format!("{:?} is not a readable file (a PEM CA bundle)", r.ca_file),
            ));
        }
        if r.username.is_empty() && !r.password.is_empty() {
            return Err(bad(
                "schema_registry.username",
                "empty, but a password is set: basic auth needs both".into(),
            ));
        }
        Ok(())
    }

    fn validate_outbox(&self) -> Result<(), ConfigError> {
        fn bad(key: &'static str, reason: impl Into<String>) -> ConfigError {
            ConfigError::Invalid {
                key,
                env: env_name(key),
                reason: reason.into(),
            }
        }
        fn ident(s: &str) -> bool {
            let mut chars = s.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
                && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && s.len() <= 63
        }
        let effective = self
            .outbox
            .effective()
            .map_err(|(option, reason)| bad("outbox.debezium", format!("{option:?}: {reason}")))?;
        let o = &effective;
        /// The checks of one served table (`outbox.table` or an `outbox.tables` entry).
        fn check_table(o: &OutboxConfig) -> Result<(), ConfigError> {
            for p in &o.additional_placement {
                let ok = match p.split(':').collect::<Vec<_>>().as_slice() {
                    [column, "header"] => ident(column),
                    [column, "header", name] => ident(column) && !name.is_empty(),
                    _ => false,
                };
                if !ok {
                    return Err(bad(
                        "outbox.additional_placement",
                        format!(
                            "{p:?}: use `column:header` or `column:header:name` (placements other \
                             than `header` are not supported)"
                        ),
                    ));
                }
            }
            let table_ok = match o.table.split_once('.') {
                Some((schema, table)) => ident(schema) && ident(table),
                None => ident(&o.table),
            };
            if !table_ok {
                return Err(bad(
                    "outbox.table",
                    format!(
                        "{:?}: use a lower-case identifier, optionally schema.table",
                        o.table
                    ),
                ));
            }
            let columns: [(&'static str, &str); 8] = [
                ("outbox.column_id", &o.column_id),
                ("outbox.column_occurred_at", &o.column_occurred_at),
                ("outbox.column_aggregate_type", &o.column_aggregate_type),
                ("outbox.column_aggregate_id", &o.column_aggregate_id),
                ("outbox.column_type", &o.column_type),
                ("outbox.column_payload", &o.column_payload),
                ("outbox.column_headers", &o.column_headers),
                ("outbox.column_sent_at", &o.column_sent_at),
            ];
            for (key, value) in columns {
                if !ident(value) {
                    return Err(bad(
                        key,
                        format!(
                            "{value:?}: use a lower-case identifier (letters, digits, '_', ≤ 63)"
                        ),
                    ));
                }
            }
            if !o.column_schema_version.is_empty() && !ident(&o.column_schema_version) {
                return Err(bad(
                    "outbox.column_schema_version",
                    format!(
                        "{:?}: a column name, or empty for none",
                        o.column_schema_version
                    ),
                ));
            }
            if !o.route_by.is_empty() && !ident(&o.route_by) {
                return Err(bad(
                    "outbox.route_by",
                    format!(
                        "{:?}: a column name, or empty for the aggregate type",
                        o.route_by
                    ),
                ));
            }
            if !o.topic_template.contains("${routedByValue}") {
                return Err(bad(
                    "outbox.topic_template",
                    format!("{:?} must contain ${{routedByValue}}", o.topic_template),
                ));
            }
            Ok(())
        }
        for (i, t) in o.served().iter().enumerate() {
            check_table(t).map_err(|e| match e {
                ConfigError::Invalid { key, reason, .. } if i > 0 => bad(
                    "outbox.tables",
                    format!("entry {i} ({}): {key}: {reason}", t.table),
                ),
                e => e,
            })?;
        }
        let mut names: Vec<_> = o.served().iter().map(|t| t.table.clone()).collect();
        names.sort();
        names.dedup();
        if names.len() != o.tables.len() + 1 {
            return Err(bad("outbox.tables", "a table is listed twice"));
        }
        if !o.tables.is_empty() && o.mode != "cdc" {
            return Err(bad(
                "outbox.tables",
                "several tables are served in CDC mode only (outbox.mode = \"cdc\")",
            ));
        }
        if !ident(&o.slot) {
            return Err(bad(
                "outbox.slot",
                format!(
                    "{:?}: use a lower-case identifier (letters, digits, '_', ≤ 63)",
                    o.slot
                ),
            ));
        }
        if o.mode != "cdc" && o.mode != "poll" {
            return Err(bad(
                "outbox.mode",
                format!("{:?}: use `cdc` or `poll`", o.mode),
            ));
        }
        if !ident(&o.publication) {
            return Err(bad(
                "outbox.publication",
                format!("{:?}: use a lower-case identifier", o.publication),
            ));
        }
        if !(1..=10_000).contains(&o.topic_partitions) {
            return Err(bad("outbox.topic_partitions", "must be in 1..=10000"));
        }
        if !(1..=100_000).contains(&o.batch_size) {
            return Err(bad("outbox.batch_size", "must be in 1..=100000"));
        }
        if !(1..=60_000).contains(&o.commit_interval_ms) {
            return Err(bad("outbox.commit_interval_ms", "must be in 1..=60000"));
        }
        if !(100..=60_000).contains(&o.status_interval_ms) {
            return Err(bad("outbox.status_interval_ms", "must be in 100..=60000"));
        }
        if o.heartbeat_interval_ms != 0 && o.heartbeat_interval_ms < 100 {
            return Err(bad(
                "outbox.heartbeat_interval_ms",
                "must be 0 (off) or ≥ 100",
            ));
        }
        if o.transaction_timeout_ms < 1000 || o.transaction_timeout_ms <= o.commit_interval_ms {
            return Err(bad(
                "outbox.transaction_timeout_ms",
                "must be ≥ 1000 and larger than outbox.commit_interval_ms",
            ));
        }
        if o.poll_interval_ms == 0 {
            return Err(bad("outbox.poll_interval_ms", "must be ≥ 1"));
        }
        if o.prune_interval_secs != 0 && o.prune_after_secs == 0 {
            return Err(bad(
                "outbox.prune_after_secs",
                "must be ≥ 1 when pruning is on (0 would delete unsent rows at once)",
            ));
        }
        if !["json", "avro"].contains(&o.payload_format.as_str()) {
            return Err(bad(
                "outbox.payload_format",
                "must be `json` (payload as is) or `avro` (through the schema registry)",
            ));
        }
        if !o.discard_checkpoint.is_empty() {
            let parts: Vec<&str> = o.discard_checkpoint.split(':').collect();
            let lsn_ok = |l: &str| {
                l.split_once('/').is_some_and(|(hi, lo)| {
                    u32::from_str_radix(hi, 16).is_ok() && u32::from_str_radix(lo, 16).is_ok()
                })
            };
            let ok = match parts.as_slice() {
                [sid, tl, lsn] => {
                    (*sid == "unknown" || sid.parse::<u64>().is_ok())
                        && (*tl == "unknown" || tl.parse::<u32>().is_ok())
                        && lsn_ok(lsn)
                }
                _ => false,
            };
            if !ok {
                return Err(bad(
                    "outbox.discard_checkpoint",
                    format!(
                        "{:?}: use the `<system id>:<timeline>:<LSN>` the router printed when it \
                         stopped (e.g. 7312345678901234567:1:0/16B3748), or leave it empty",
                        o.discard_checkpoint
                    ),
                ));
            }
        }
        if !["initial", "never"].contains(&o.snapshot.as_str()) {
            return Err(bad(
                "outbox.snapshot",
                format!(
                    "{:?}: use `initial` (publish the rows already in the table once) or `never`",
                    o.snapshot
                ),
            ));
        }
        if !o.schemas_dir.is_empty() && !Path::new(&o.schemas_dir).is_dir() {
            return Err(bad(
                "outbox.schemas_dir",
                "is not a directory (leave it empty for the contracts built into eosflow)",
            ));
        }
        Ok(())
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

/// librdkafka properties whose values the exactly-once guarantee depends on.
const RESERVED_KAFKA_PROPERTIES: &[&str] = &[
    "bootstrap.servers",
    "group.id",
    "transactional.id",
    "isolation.level",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.idempotence",
    "partition.assignment.strategy",
];

fn merge(into: &mut toml::Value, from: toml::Value) {
    match (into, from) {
        (toml::Value::Table(a), toml::Value::Table(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(slot) if slot.is_table() && v.is_table() => merge(slot, v),
                    _ => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// Sets the key named by an `EOSFLOW_*` variable, typed like the default of that key.
fn apply_env(
    merged: &mut toml::Value,
    defaults: &toml::Value,
    name: &str,
    raw: &str,
) -> Result<(), ConfigError> {
    if let Some(path) = find_key(defaults, &mut vec![], name) {
        let key = path.join(".");
        let Some(default) = lookup(defaults, &path) else {
            return Ok(());
        };
        let value = typed_env_value(default, raw).map_err(|reason| ConfigError::Parse {
            origin: format!("env {name}"),
            message: format!("`{key}`: {reason}"),
        })?;
        let Some((field, parents)) = path.split_last() else {
            return Ok(());
        };
        let mut table = merged.as_table_mut();
        for p in parents {
            table = table
                .and_then(|t| t.get_mut(p.as_str()))
                .and_then(|v| v.as_table_mut());
        }
        if let Some(t) = table {
            t.insert(field.clone(), value);
        }
        return Ok(());
    }
    // `EOSFLOW_KAFKA_PROPERTY_<NAME>` sets a librdkafka property (`_` → `.`), e.g. secrets.
    if let Some(prop) = name.strip_prefix("EOSFLOW_KAFKA_PROPERTY_") {
        let prop = prop.to_lowercase().replace('_', ".");
        if let Some(t) = merged
            .get_mut("kafka")
            .and_then(|k| k.get_mut("properties"))
            .and_then(|p| p.as_table_mut())
        {
            t.insert(prop, toml::Value::String(raw.to_string()));
        }
        return Ok(());
    }
    if ENV_NOT_CONFIG.iter().any(|p| name.starts_with(p)) {
        return Ok(());
    }
    Err(ConfigError::Parse {
        origin: format!("env {name}"),
        message: format!(
            "no configuration key is named by {name}; known keys: {}",
            known_keys(defaults).join(", ")
        ),
    })
}

/// `EOSFLOW_*` variables that steer tools and tests rather than an instance.
/// Matched as prefixes: `EOSFLOW_STACK_*` belong to dev/stack, `EOSFLOW_TEST_*` to the tests.
const ENV_NOT_CONFIG: &[&str] = &[
    "EOSFLOW_STACK_",
    "EOSFLOW_TEST_",
    "EOSFLOW_CACHE_DIR",
    "EOSFLOW_RUN_DIR",
    "EOSFLOW_CONFIG_FILE",
    "EOSFLOW_APICURIO_VERSION",
];

/// The path of the key whose environment name is `name`: nested sections (`[kafka.security]`)
/// are searched too; an empty table (`kafka.properties`) counts as a key.
fn find_key(node: &toml::Value, path: &mut Vec<String>, name: &str) -> Option<Vec<String>> {
    let table = node.as_table()?;
    for (k, v) in table {
        path.push(k.clone());
        let nested = v.as_table().is_some_and(|t| !t.is_empty());
        if path.len() > 1 && !nested && env_name(&path.join(".")) == name {
            return Some(path.clone());
        }
        if nested {
            if let Some(found) = find_key(v, path, name) {
                return Some(found);
            }
        }
        path.pop();
    }
    None
}

fn lookup<'a>(node: &'a toml::Value, path: &[String]) -> Option<&'a toml::Value> {
    path.iter().try_fold(node, |n, k| n.get(k.as_str()))
}

fn known_keys(defaults: &toml::Value) -> Vec<String> {
    fn walk(node: &toml::Value, prefix: &str, keys: &mut Vec<String>) {
        if let Some(t) = node.as_table() {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if v.as_table().is_some_and(|t| !t.is_empty()) {
                    walk(v, &key, keys);
                } else if !prefix.is_empty() {
                    keys.push(env_name(&key));
                }
            }
        }
    }
    let mut keys = vec![];
    walk(defaults, "", &mut keys);
    keys
}

fn typed_env_value(default: &toml::Value, raw: &str) -> Result<toml::Value, String> {
    Ok(match default {
        toml::Value::String(_) => toml::Value::String(raw.to_string()),
        toml::Value::Integer(_) => toml::Value::Integer(
            raw.trim()
                .parse::<i64>()
                .map_err(|_| format!("{raw:?} is not an integer"))?,
        ),
        toml::Value::Boolean(_) => toml::Value::Boolean(match raw.trim() {
            "true" | "1" => true,
            "false" | "0" => false,
            _ => return Err(format!("{raw:?} is not true/false")),
        }),
        toml::Value::Array(items) => {
            let integers = items.first().is_some_and(toml::Value::is_integer);
            let mut out = Vec::new();
            for s in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                out.push(if integers {
                    toml::Value::Integer(
                        s.parse::<i64>()
                            .map_err(|_| format!("{s:?} in {raw:?} is not an integer"))?,
                    )
                } else {
                    toml::Value::String(s.to_string())
                });
            }
            toml::Value::Array(out)
        }
        toml::Value::Table(_) => {
            return Err("set table entries with their own variables".into());
        }
        other => return Err(format!("unsupported type {}", other.type_str())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn env_overrides_file_and_file_overrides_defaults() {
        let c = Config::from_sources(
            Some("[processor]\ncommit_interval_ms = 250\ninput_topics = [\"a\"]\n"),
            Some("f.toml"),
            &env(&[
                ("EOSFLOW_KAFKA_BOOTSTRAP", "broker:9092"),
                ("EOSFLOW_PROCESSOR_INPUT_TOPICS", "x, y"),
            ]),
        )
        .expect("valid");
        assert_eq!(c.processor.commit_interval_ms, 250);
        assert_eq!(c.kafka.bootstrap, "broker:9092");
        assert_eq!(c.processor.input_topics, vec!["x", "y"]);
        assert_eq!(c.processor.max_batch_records, 10_000);
    }

    #[test]
    fn unknown_key_in_file_is_named() {
        let err = Config::from_sources(
            Some("[processor]\ncommit_intervall_ms = 5\n"),
            Some("f.toml"),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("commit_intervall_ms"), "{err}");
        assert!(err.contains("f.toml"), "{err}");
    }

    #[test]
    fn bad_env_value_names_key_and_variable() {
        let err = Config::from_sources(
            None,
            None,
            &env(&[("EOSFLOW_PROCESSOR_COMMIT_INTERVAL_MS", "fast")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("processor.commit_interval_ms"), "{err}");
        assert!(
            err.contains("EOSFLOW_PROCESSOR_COMMIT_INTERVAL_MS"),
            "{err}"
        );
    }

    #[test]
    fn out_of_range_value_names_key() {
        let err = Config::from_sources(Some("[processor]\ncommit_interval_ms = 0\n"), None, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("`processor.commit_interval_ms`"), "{err}");
        let err = Config::from_sources(None, None, &env(&[("EOSFLOW_KAFKA_BOOTSTRAP", "nohost")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("kafka.bootstrap") && err.contains("nohost"),
            "{err}"
        );
    }

    #[test]
    fn misspelt_env_variable_is_rejected() {
        let err = Config::from_sources(None, None, &env(&[("EOSFLOW_KAFKA_BOOTSTRAPS", "a:1")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("EOSFLOW_KAFKA_BOOTSTRAPS"), "{err}");
        assert!(err.contains("EOSFLOW_KAFKA_BOOTSTRAP,"), "{err}");
    }

    #[test]
    fn per_topic_ladders_override_the_default() {
        let c = Config::from_sources(
            Some("[retry]\ndelays_ms = [100]\n[retry.per_topic]\n\"slow\" = [1000, 2000, 3000]\n"),
            None,
            &[],
        )
        .expect("valid");
        assert_eq!(c.retry.policy_for("slow").levels(), 3);
        assert_eq!(c.retry.policy_for("other").levels(), 1);
    }

    #[test]
    fn integer_lists_from_env() {
        let c = Config::from_sources(None, None, &env(&[("EOSFLOW_RETRY_DELAYS_MS", "5, 50")]))
            .expect("valid");
        assert_eq!(c.retry.delays_ms, vec![5, 50]);
        let err = Config::from_sources(None, None, &env(&[("EOSFLOW_RETRY_DELAYS_MS", "5,soon")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("retry.delays_ms") && err.contains("soon"),
            "{err}"
        );
        let err = Config::from_sources(
            None,
            None,
            &env(&[("EOSFLOW_RETRY_ON_DEAD_LETTER", "drop")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("retry.on_dead_letter"), "{err}");
    }

    #[test]
    fn guarantee_is_exactly_once_by_default_and_validated() {
        let c = Config::from_sources(None, None, &[]).expect("defaults");
        assert_eq!(c.processor.guarantee, "exactly_once");
        let c = Config::from_sources(
            None,
            None,
            &env(&[("EOSFLOW_PROCESSOR_GUARANTEE", "at_least_once")]),
        )
        .expect("at_least_once is valid");
        assert_eq!(c.processor.guarantee, "at_least_once");
        let err = Config::from_sources(
            None,
            None,
            &env(&[("EOSFLOW_PROCESSOR_GUARANTEE", "exactly-once")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("processor.guarantee") && err.contains("at_least_once"),
            "{err}"
        );
    }

    #[test]
    fn outbox_keys_validate_and_come_from_env() {
        let c = Config::from_sources(
            None,
            None,
            &env(&[
                ("EOSFLOW_OUTBOX_MODE", "poll"),
                ("EOSFLOW_OUTBOX_COLUMN_AGGREGATE_ID", "agg"),
            ]),
        )
        .expect("valid");
        assert_eq!(c.outbox.mode, "poll");
        assert_eq!(c.outbox.column_aggregate_id, "agg");
        let err = Config::from_sources(None, None, &env(&[("EOSFLOW_OUTBOX_SLOT", "Bad-Slot")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("outbox.slot") && err.contains("EOSFLOW_OUTBOX_SLOT"),
            "{err}"
        );
        let err = Config::from_sources(Some("[outbox]\ntopic_template = \"x\"\n"), None, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("outbox.topic_template"), "{err}");
    }

    #[test]
    fn outbox_tables_inherit_the_outbox_keys_and_bad_entries_are_named() {
        let c = Config::from_sources(
            Some(
                "[outbox]\ncolumn_id = \"event_id\"\n[[outbox.tables]]\ntable = \"s.events\"\n\
                 column_payload = \"body\"\nroute_by = \"kind\"\n",
            ),
            None,
            &[],
        )
        .expect("valid");
        let served = c.outbox.served();
        assert_eq!(served.len(), 2);
        assert_eq!(
            (served[1].table.as_str(), served[1].column_id.as_str()),
            ("s.events", "event_id")
        );
        assert_eq!(
            (
                served[1].column_payload.as_str(),
                served[1].route_by.as_str()
            ),
            ("body", "kind")
        );
        assert_eq!(served[0].column_payload, "payload");
        assert!(served.iter().all(|t| t.tables.is_empty()));
        let bad = |toml: &str| {
            Config::from_sources(Some(toml), None, &[])
                .unwrap_err()
                .to_string()
        };
        let err = bad("[[outbox.tables]]\ntable = \"s.events\"\ncolumn_id = \"Bad\"\n");
        assert!(
            err.contains("outbox.tables") && err.contains("s.events") && err.contains("column_id"),
            "{err}"
        );
        let err = bad("[[outbox.tables]]\ntable = \"outbox\"\n");
        assert!(err.contains("twice"), "{err}");
        let err = bad("[outbox]\nmode = \"poll\"\n[[outbox.tables]]\ntable = \"b\"\n");
        assert!(err.contains("CDC mode only"), "{err}");
    }

    #[test]
    fn kafka_property_from_env() {
        let c = Config::from_sources(
            None,
            None,
            &env(&[("EOSFLOW_KAFKA_PROPERTY_SASL_PASSWORD", "s3cret")]),
        )
        .expect("valid");
        assert_eq!(
            c.kafka.properties.get("sasl.password").map(String::as_str),
            Some("s3cret")
        );
    }

    fn sasl_env(extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut e = env(&[
            ("EOSFLOW_KAFKA_SECURITY_PROTOCOL", "sasl_plaintext"),
            ("EOSFLOW_KAFKA_SECURITY_SASL_MECHANISM", "SCRAM-SHA-512"),
            ("EOSFLOW_KAFKA_SECURITY_USERNAME", "alice"),
        ]);
        e.extend(env(extra));
        e
    }

    #[test]
    fn security_keys_come_from_env_and_secrets_are_redacted() {
        let c = Config::from_sources(
            None,
            None,
            &sasl_env(&[("EOSFLOW_KAFKA_SECURITY_PASSWORD", "hunter2-unit")]),
        )
        .expect("valid");
        let s = &c.kafka.security;
        assert_eq!(s.protocol, "sasl_plaintext");
        assert_eq!(s.sasl_mechanism, "SCRAM-SHA-512");
        assert_eq!(s.password.expose(), "hunter2-unit");
        assert!(!format!("{c:?}").contains("hunter2-unit"));
        let shown = toml::to_string(&c).expect("serializes");
        assert!(!shown.contains("hunter2-unit"), "{shown}");
        let props = s.librdkafka_properties();
        assert!(props.contains(&("sasl.password", "hunter2-unit".into())));
        assert!(props.contains(&("sasl.mechanisms", "SCRAM-SHA-512".into())));
    }

    #[test]
    fn security_from_file_section() {
        let c = Config::from_sources(
            Some("[kafka.security]\nprotocol = \"sasl_ssl\"\nsasl_mechanism = \"PLAIN\"\nusername = \"u\"\npassword = \"p\"\nssl_ca_location = \"/ca.pem\"\n"),
            Some("f.toml"),
            &[],
        )
        .expect("valid");
        let props = c.kafka.security.librdkafka_properties();
        assert!(props.contains(&("ssl.ca.location", "/ca.pem".into())));
        assert!(props.contains(&("security.protocol", "sasl_ssl".into())));
    }

    #[test]
    fn security_password_file_is_read_and_a_missing_one_is_named() {
        let dir = std::env::temp_dir().join(format!("eosflow-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("password");
        std::fs::write(&file, "from-file-secret\n").expect("write");
        let c = Config::from_sources(
            None,
            None,
            &sasl_env(&[(
                "EOSFLOW_KAFKA_SECURITY_PASSWORD_FILE",
                file.to_str().expect("utf-8 path"),
            )]),
        )
        .expect("valid");
        assert_eq!(c.kafka.security.password.expose(), "from-file-secret");
        let err = Config::from_sources(
            None,
            None,
            &sasl_env(&[("EOSFLOW_KAFKA_SECURITY_PASSWORD_FILE", "/nonexistent/pw")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("kafka.security.password_file")
                && err.contains("EOSFLOW_KAFKA_SECURITY_PASSWORD_FILE")
                && err.contains("/nonexistent/pw"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn security_sasl_needs_mechanism_user_and_password() {
        let err = Config::from_sources(None, None, &sasl_env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("kafka.security.password"), "{err}");
        let err = Config::from_sources(
            None,
            None,
            &env(&[
                ("EOSFLOW_KAFKA_SECURITY_PROTOCOL", "sasl_ssl"),
                ("EOSFLOW_KAFKA_SECURITY_SASL_MECHANISM", "GSSAPI"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("kafka.security.sasl_mechanism") && err.contains("GSSAPI"),
            "{err}"
        );
        let err = Config::from_sources(
            None,
            None,
            &env(&[("EOSFLOW_KAFKA_SECURITY_PROTOCOL", "tls")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("kafka.security.protocol"), "{err}");
        let err = Config::from_sources(
            None,
            None,
            &sasl_env(&[
                ("EOSFLOW_KAFKA_SECURITY_PASSWORD", "x"),
                ("EOSFLOW_KAFKA_PROPERTY_SASL_USERNAME", "bob"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("sasl.username"), "{err}");
    }
}
