//! `[postgres]` and `[outbox]`: the outbox router's database and how its rows become records.
//!
//! These types live in the core, not in `crates/outbox` next to the router: [`Config`] holds
//! them (one file and one environment configure every command), and the core cannot depend on
//! the outbox crate, which depends on it. The orders application's writer reads the same keys.
//!
//! [`Config`]: super::Config

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::choice::choice_strings;
use super::{ConfigError, Secret};

/// How the outbox router reads the table (`outbox.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxMode {
    /// Logical replication (pgoutput) from a slot: exactly-once, in commit order.
    #[default]
    Cdc,
    /// `FOR UPDATE SKIP LOCKED` polling that marks rows sent: at-least-once.
    Poll,
}

/// What a routed row's payload becomes on Kafka (`outbox.payload_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayloadFormat {
    /// The JSON payload as it is.
    #[default]
    Json,
    /// Rows whose `type` has a contract become registered Avro (through the schema registry).
    Avro,
}

/// Whether a new slot first publishes the rows already in the table (`outbox.snapshot`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxSnapshot {
    /// Publish the rows already in the table once, consistently with the stream (exported
    /// snapshot), when nothing was ever published for the slot.
    #[default]
    Initial,
    /// Stream only what commits after the slot exists.
    Never,
}

/// What an expanded JSON payload's `null` fields become (`outbox.json_payload_null_behavior`,
/// Debezium's `table.json.payload.null.behavior`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JsonPayloadNullBehavior {
    /// Left out of the expanded value (Debezium's default).
    #[default]
    Ignore,
    /// Kept as `null`.
    OptionalBytes,
}

impl JsonPayloadNullBehavior {
    /// The name the configuration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ignore => "ignore",
            Self::OptionalBytes => "optional_bytes",
        }
    }
}

/// Debezium's default `route.topic.regex`: the whole route value, as the group the default
/// `route.topic.replacement` names.
pub(super) const DEFAULT_ROUTE_TOPIC_REGEX: &str = "(?<routedByValue>.*)";

impl OutboxMode {
    /// The name the configuration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cdc => "cdc",
            Self::Poll => "poll",
        }
    }
}

impl PayloadFormat {
    /// The name the configuration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Avro => "avro",
        }
    }
}

impl OutboxSnapshot {
    /// The name the configuration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Initial => "initial",
            Self::Never => "never",
        }
    }
}

choice_strings!(
    OutboxMode,
    PayloadFormat,
    OutboxSnapshot,
    JsonPayloadNullBehavior
);

/// The outbox's database.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PostgresConfig {
    /// libpq-style URL (`postgres://user:password@host:port/db?sslmode=…`); held as a secret
    /// because it carries the password: shown as `***`. Default: the local dev stack's database.
    pub url: Secret,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        Self {
            url: Secret::new("postgres://eosflow:eosflow@127.0.0.1:15432/eosflow"),
        }
    }
}

/// The outbox router (`eosflow outbox`): which table, how rows map to records, how it runs.
/// Column names are flat keys so each has an environment variable.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OutboxConfig {
    /// How the router reads the table.
    pub mode: OutboxMode,
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
    /// Topic name template (Debezium's `route.topic.replacement`): when `route_topic_regex`
    /// matches the whole route value, the topic is this with `${name}` / `$n` replaced by the
    /// regex's groups (`\` escapes); else the route value itself.
    pub topic_template: String,
    /// Regex the route value must match whole for `topic_template` to apply (Debezium's
    /// `route.topic.regex`); default `(?<routedByValue>.*)`.
    pub route_topic_regex: String,
    /// Parse a JSON object payload and publish it as Debezium's expanded value (compact, its
    /// nulls as `json_payload_null_behavior` says) instead of the payload's text (Debezium's
    /// `table.expand.json.payload`).
    pub expand_json_payload: bool,
    /// What the `null` fields of an expanded payload become (Debezium's
    /// `table.json.payload.null.behavior`).
    pub json_payload_null_behavior: JsonPayloadNullBehavior,
    /// Column holding the writer's trace context (a W3C `traceparent`, or Java properties text
    /// with a `traceparent=` line, as Debezium's `tracing.span.context.field`): copied into the
    /// record's `traceparent` (and `tracestate`) headers. Empty = none.
    pub column_tracing_span_context: String,
    /// Partitions of routed topics the router creates when they are missing.
    pub topic_partitions: i32,
    /// Logical replication slot (pgoutput); one active router per slot.
    pub slot: String,
    /// Publication on the outbox table.
    pub publication: String,
    /// Most rows in one Kafka transaction made of whole Postgres transactions (a Postgres
    /// transaction up to `max_rows_per_transaction` rows is never split).
    pub batch_size: usize,
    /// A Postgres transaction with more outbox rows than this is published in several Kafka
    /// transactions of at most this many rows each (and 8 MiB of records), as its rows arrive
    /// (the router's memory stays bounded), the checkpoint recording how far it got,
    /// so that no transaction is too large to commit within `transaction_timeout_ms`: exactly
    /// once still, but a `read_committed` consumer may see its first parts before the rest.
    /// At least `batch_size`.
    pub max_rows_per_transaction: usize,
    /// Longest rows wait before their Kafka transaction commits.
    pub commit_interval_ms: u64,
    /// How often an idle router writes a WAL heartbeat so the slot keeps advancing (0 = never).
    pub heartbeat_interval_ms: u64,
    /// How often the confirmed LSN is reported to Postgres.
    pub status_interval_ms: u64,
    /// Row changes read from the replication stream ahead of publishing (the channel between
    /// the socket reader and the router). It is what bounds memory for wide rows: a full
    /// channel stops reading the socket, and the server waits. 128 rows of 900 KiB hold
    /// 113 MiB (8 192 of them, `pgwire-replication`'s own default, gigabytes); small rows lose
    /// 4–6 % of backlog throughput at 128 against 8 192.
    pub replication_buffer_events: usize,
    /// `transaction.timeout.ms` of the router's transactional producer.
    pub transaction_timeout_ms: u64,
    /// Polling mode: wait between empty polls.
    pub poll_interval_ms: u64,
    /// How often old rows are deleted (0 = never).
    pub prune_interval_secs: u64,
    /// Rows older than this (by `occurred_at`; in poll mode only sent ones) are pruned.
    pub prune_after_secs: u64,
    /// What a row's payload becomes on Kafka.
    pub payload_format: PayloadFormat,
    /// Contracts for `avro`; empty = the `schemas/` compiled into the binary.
    pub schemas_dir: PathBuf,
    /// `<system id>:<timeline>:<LSN>` of a stored checkpoint the operator accepts to discard
    /// because it belongs to another cluster or timeline, or lies ahead of the server's WAL (the
    /// router stops and prints the exact value). Matches that one checkpoint only, so a value
    /// left set never accepts a later mismatch. Empty: never discard.
    pub discard_checkpoint: String,
    /// CDC: whether the rows already in the table are published when nothing was ever published
    /// for the slot.
    pub snapshot: OutboxSnapshot,
    /// The NOT NULL column the initial snapshot reads rows in order of (then by id), so each
    /// aggregate's rows already in the table are published in the order they were written: a
    /// column the writer fills in write order (a sequence, a commit-ordered time). Empty = the
    /// `occurred_at` column; the id column = id order.
    pub snapshot_order_by: String,
    /// Extra columns placed in the record (Debezium's `table.fields.additional.placement`):
    /// `column:header[:name]` a header, `column:envelope[:name]` a field next to `payload` in
    /// a JSON envelope value, `column:partition` the partition number.
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
    /// `outbox.snapshot_order_by` for this table.
    pub snapshot_order_by: String,
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
    ("route.topic.regex", "route_topic_regex"),
    ("table.expand.json.payload", "expand_json_payload"),
    (
        "table.json.payload.null.behavior",
        "json_payload_null_behavior",
    ),
    ("tracing.span.context.field", "column_tracing_span_context"),
];

impl OutboxConfig {
    /// The checks of the router's keys, its Debezium options and every served table.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        fn ident(s: &str) -> bool {
            let mut chars = s.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
                && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && s.len() <= 63
        }
        let effective = self.effective().map_err(|(option, reason)| {
            ConfigError::invalid("outbox.debezium", format!("{option:?}: {reason}"))
        })?;
        let o = &effective;
        /// The checks of one served table (`outbox.table` or an `outbox.tables` entry).
        fn check_table(o: &OutboxConfig) -> Result<(), ConfigError> {
            for p in &o.additional_placement {
                let ok = match p.split(':').collect::<Vec<_>>().as_slice() {
                    [column, "header" | "envelope" | "partition"] => ident(column),
                    [column, "header" | "envelope" | "partition", name] => {
                        ident(column) && !name.is_empty()
                    }
                    _ => false,
                };
                if !ok {
                    return Err(ConfigError::invalid(
                        "outbox.additional_placement",
                        format!(
                            "{p:?}: use `column:header[:name]`, `column:envelope[:name]` or \
                             `column:partition`"
                        ),
                    ));
                }
                let parts: Vec<&str> = p.split(':').collect();
                if parts.get(1) == Some(&"envelope")
                    && parts.get(2).or(parts.first()) == Some(&"payload")
                {
                    return Err(ConfigError::invalid(
                        "outbox.additional_placement",
                        format!(
                            "{p:?}: `payload` is the envelope's own field; give it another name"
                        ),
                    ));
                }
            }
            let table_ok = match o.table.split_once('.') {
                Some((schema, table)) => ident(schema) && ident(table),
                None => ident(&o.table),
            };
            if !table_ok {
                return Err(ConfigError::invalid(
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
                    return Err(ConfigError::invalid(
                        key,
                        format!(
                            "{value:?}: use a lower-case identifier (letters, digits, '_', ≤ 63)"
                        ),
                    ));
                }
            }
            if !o.column_schema_version.is_empty() && !ident(&o.column_schema_version) {
                return Err(ConfigError::invalid(
                    "outbox.column_schema_version",
                    format!(
                        "{:?}: a column name, or empty for none",
                        o.column_schema_version
                    ),
                ));
            }
            if !o.snapshot_order_by.is_empty() && !ident(&o.snapshot_order_by) {
                return Err(ConfigError::invalid(
                    "outbox.snapshot_order_by",
                    format!(
                        "{:?}: a column name, or empty for the occurred_at column",
                        o.snapshot_order_by
                    ),
                ));
            }
            if !o.route_by.is_empty() && !ident(&o.route_by) {
                return Err(ConfigError::invalid(
                    "outbox.route_by",
                    format!(
                        "{:?}: a column name, or empty for the aggregate type",
                        o.route_by
                    ),
                ));
            }
            if o.route_topic_regex == DEFAULT_ROUTE_TOPIC_REGEX
                && !o.topic_template.contains("${routedByValue}")
            {
                return Err(ConfigError::invalid(
                    "outbox.topic_template",
                    format!(
                        "{:?} must contain ${{routedByValue}} (or set outbox.route_topic_regex \
                         and name its groups)",
                        o.topic_template
                    ),
                ));
            }
            if o.route_topic_regex.is_empty() {
                return Err(ConfigError::invalid(
                    "outbox.route_topic_regex",
                    format!("must not be empty (default {DEFAULT_ROUTE_TOPIC_REGEX:?})"),
                ));
            }
            if !o.column_tracing_span_context.is_empty() && !ident(&o.column_tracing_span_context) {
                return Err(ConfigError::invalid(
                    "outbox.column_tracing_span_context",
                    format!(
                        "{:?}: a column name, or empty for none",
                        o.column_tracing_span_context
                    ),
                ));
            }
            Ok(())
        }
        for (i, t) in o.served().iter().enumerate() {
            check_table(t).map_err(|e| match e {
                ConfigError::Invalid { key, reason, .. } if i > 0 => ConfigError::invalid(
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
            return Err(ConfigError::invalid(
                "outbox.tables",
                "a table is listed twice",
            ));
        }
        if !o.tables.is_empty() && o.mode != OutboxMode::Cdc {
            return Err(ConfigError::invalid(
                "outbox.tables",
                "several tables are served in CDC mode only (outbox.mode = \"cdc\")",
            ));
        }
        if !ident(&o.slot) {
            return Err(ConfigError::invalid(
                "outbox.slot",
                format!(
                    "{:?}: use a lower-case identifier (letters, digits, '_', ≤ 63)",
                    o.slot
                ),
            ));
        }
        if !ident(&o.publication) {
            return Err(ConfigError::invalid(
                "outbox.publication",
                format!("{:?}: use a lower-case identifier", o.publication),
            ));
        }
        if !(1..=10_000).contains(&o.topic_partitions) {
            return Err(ConfigError::invalid(
                "outbox.topic_partitions",
                "must be in 1..=10000",
            ));
        }
        if !(1..=100_000).contains(&o.batch_size) {
            return Err(ConfigError::invalid(
                "outbox.batch_size",
                "must be in 1..=100000",
            ));
        }
        if !(o.batch_size..=10_000_000).contains(&o.max_rows_per_transaction) {
            return Err(ConfigError::invalid(
                "outbox.max_rows_per_transaction",
                format!("must be in outbox.batch_size ({})..=10000000", o.batch_size),
            ));
        }
        if !(1..=60_000).contains(&o.commit_interval_ms) {
            return Err(ConfigError::invalid(
                "outbox.commit_interval_ms",
                "must be in 1..=60000",
            ));
        }
        if !(1..=65_536).contains(&o.replication_buffer_events) {
            return Err(ConfigError::invalid(
                "outbox.replication_buffer_events",
                "must be in 1..=65536",
            ));
        }
        if !(100..=60_000).contains(&o.status_interval_ms) {
            return Err(ConfigError::invalid(
                "outbox.status_interval_ms",
                "must be in 100..=60000",
            ));
        }
        if o.heartbeat_interval_ms != 0 && o.heartbeat_interval_ms < 100 {
            return Err(ConfigError::invalid(
                "outbox.heartbeat_interval_ms",
                "must be 0 (off) or ≥ 100",
            ));
        }
        if o.transaction_timeout_ms < 1000 || o.transaction_timeout_ms <= o.commit_interval_ms {
            return Err(ConfigError::invalid(
                "outbox.transaction_timeout_ms",
                "must be ≥ 1000 and larger than outbox.commit_interval_ms",
            ));
        }
        if o.poll_interval_ms == 0 {
            return Err(ConfigError::invalid(
                "outbox.poll_interval_ms",
                "must be ≥ 1",
            ));
        }
        if o.prune_interval_secs != 0 && o.prune_after_secs == 0 {
            return Err(ConfigError::invalid(
                "outbox.prune_after_secs",
                "must be ≥ 1 when pruning is on (0 would delete unsent rows at once)",
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
                return Err(ConfigError::invalid(
                    "outbox.discard_checkpoint",
                    format!(
                        "{:?}: use the `<system id>:<timeline>:<LSN>` the router printed when it \
                         stopped (e.g. 7312345678901234567:1:0/16B3748), or leave it empty",
                        o.discard_checkpoint
                    ),
                ));
            }
        }
        if !o.schemas_dir.as_os_str().is_empty() && !o.schemas_dir.is_dir() {
            return Err(ConfigError::invalid(
                "outbox.schemas_dir",
                "is not a directory (leave it empty for the contracts built into eosflow)",
            ));
        }
        Ok(())
    }

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
                "route.topic.regex" => (&mut c.route_topic_regex, &defaults.route_topic_regex),
                "tracing.span.context.field" => (
                    &mut c.column_tracing_span_context,
                    &defaults.column_tracing_span_context,
                ),
                "table.expand.json.payload" => {
                    let on = match value.trim().to_ascii_lowercase().as_str() {
                        "true" => true,
                        "false" => false,
                        _ => return Err((option.clone(), format!("{value:?}: true or false"))),
                    };
                    if c.expand_json_payload != defaults.expand_json_payload
                        && c.expand_json_payload != on
                    {
                        return Err((
                            option.clone(),
                            format!(
                                "{value:?} contradicts outbox.expand_json_payload, set to {}",
                                c.expand_json_payload
                            ),
                        ));
                    }
                    c.expand_json_payload = on;
                    continue;
                }
                "table.json.payload.null.behavior" => {
                    let b = match value.trim().to_ascii_lowercase().as_str() {
                        "ignore" => JsonPayloadNullBehavior::Ignore,
                        "optional_bytes" => JsonPayloadNullBehavior::OptionalBytes,
                        _ => {
                            return Err((
                                option.clone(),
                                format!("{value:?}: ignore or optional_bytes"),
                            ))
                        }
                    };
                    if c.json_payload_null_behavior != defaults.json_payload_null_behavior
                        && c.json_payload_null_behavior != b
                    {
                        return Err((
                            option.clone(),
                            format!(
                                "{value:?} contradicts outbox.json_payload_null_behavior, set to {}",
                                c.json_payload_null_behavior.as_str()
                            ),
                        ));
                    }
                    c.json_payload_null_behavior = b;
                    continue;
                }
                "tracing.with.context.field.only" => {
                    fixed(
                        "true",
                        "a row without the span context column gets no traceparent header; the \
                         router starts no traces of its own",
                    )?;
                    continue;
                }
                "tracing.operation.name" => {
                    return Err((
                        option.clone(),
                        "not supported: the router creates no span of its own, it passes the \
                         writer's span context on in the traceparent header"
                            .into(),
                    ))
                }
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
                        "not supported (docs/outbox.md, \"Table and mapping\": Debezium options)"
                            .into(),
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
                (&mut c.snapshot_order_by, &t.snapshot_order_by),
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
            mode: OutboxMode::Cdc,
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
            route_topic_regex: DEFAULT_ROUTE_TOPIC_REGEX.into(),
            expand_json_payload: false,
            json_payload_null_behavior: JsonPayloadNullBehavior::Ignore,
            column_tracing_span_context: String::new(),
            topic_partitions: 8,
            slot: "eosflow_outbox".into(),
            publication: "eosflow_outbox".into(),
            batch_size: 1000,
            max_rows_per_transaction: 100_000,
            commit_interval_ms: 100,
            heartbeat_interval_ms: 10_000,
            status_interval_ms: 1000,
            replication_buffer_events: 128,
            transaction_timeout_ms: 10_000,
            poll_interval_ms: 200,
            prune_interval_secs: 3600,
            prune_after_secs: 7 * 24 * 3600,
            payload_format: PayloadFormat::Json,
            schemas_dir: PathBuf::new(),
            discard_checkpoint: String::new(),
            snapshot: OutboxSnapshot::Initial,
            snapshot_order_by: String::new(),
            additional_placement: vec![],
            tables: vec![],
            debezium: BTreeMap::new(),
        }
    }
}
