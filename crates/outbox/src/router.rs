//! Debezium's Outbox Event Router mapping: one outbox row → one Kafka record.
//!
//! - topic: `topic_template` with `${routedByValue}` replaced by the route value: the
//!   `route_by` column if configured, else the aggregate type column when present and not
//!   NULL, else the `type` column's prefix before the first `.` (`Order.Created` → `Order`);
//!   characters Kafka does not allow in topic names become `_`;
//! - key: the aggregate id (so per-aggregate order is per-partition order);
//! - value: the payload's JSON text as Postgres prints it, or the bytes of a `bytea` payload
//!   column (e.g. Confluent-framed Avro from `eosflow-outbox-writer`); a NULL payload is a
//!   tombstone;
//! - headers: `id`, `type`, `occurred_at`, `aggregate_id`, `aggregate_type` (when not NULL),
//!   `schema_version` (the `column_schema_version` column, when set), the `additional_placement`
//!   columns, then every key of the row's `headers` object
//!   (strings as they are, other JSON values as JSON text).
//!
//! Routing never fails: a row is never stuck in the WAL because of its content.

use std::collections::HashMap;

use eosflow::config::{JsonPayloadNullBehavior, OutboxConfig};

/// An outbox row by column name, values in Postgres text format (`None` = NULL).
pub type Row = HashMap<String, Option<String>>;

/// A row mapped to a Kafka record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoutedRecord {
    /// Destination topic.
    pub topic: String,
    /// The partition (`column:partition` placement); `None`: by key.
    pub partition: Option<i32>,
    /// Aggregate id.
    pub key: Option<Vec<u8>>,
    /// Payload JSON (None: tombstone).
    pub value: Option<Vec<u8>>,
    /// Kafka headers, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The event id (for logs and verification).
    pub id: String,
    /// End LSN of the row's Postgres transaction (CDC; `None` in poll mode): named in the
    /// dead letter of a row that cannot be written, so an operator can find it in the WAL.
    pub commit_lsn: Option<u64>,
    /// Why the row cannot be published where it routes (a partition column value that is no
    /// partition number): it goes to the outbox's dead-letter topic with this reason.
    pub unroutable: Option<String>,
}

/// Where a `table.fields.additional.placement` column goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// A header.
    Header,
    /// A field of the JSON envelope value, next to `payload`.
    Envelope,
    /// The partition number.
    Partition,
}

/// One piece of a parsed `route.topic.replacement`.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    /// Literal text.
    Text(String),
    /// A capture group of the regex, by index.
    Group(usize),
}

/// Debezium's topic routing (Kafka Connect's `RegexRouter` on the route value): when
/// `route.topic.regex` matches the whole value, the topic is `route.topic.replacement` with its
/// group references (`${name}`, `$n`; `\` escapes) replaced, as Java's `Matcher.replaceFirst`
/// does; else the route value itself.
#[derive(Debug, Clone)]
pub struct TopicRoute {
    regex: regex::Regex,
    replacement: Vec<Piece>,
}

/// A configuration the router cannot run with: the key and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct MappingError {
    /// The configuration key.
    pub key: &'static str,
    /// What is wrong with its value.
    pub reason: String,
}

impl TopicRoute {
    /// Compiles `regex` (anchored at both ends, as Java's `matches()`) and parses
    /// `replacement` the way Java's `Matcher.appendReplacement` reads it: a reference to a group
    /// the regex lacks, or a `$` not followed by a group, is an error here, at start (Java
    /// would fail on every row).
    pub fn new(regex: &str, replacement: &str) -> Result<Self, MappingError> {
        let compiled =
            regex::Regex::new(&format!(r"\A(?:{regex})\z")).map_err(|e| MappingError {
                key: "outbox.route_topic_regex",
                reason: format!("{regex:?} is not a regex the router can use: {e}"),
            })?;
        let bad = |reason: String| MappingError {
            key: "outbox.topic_template",
            reason: format!("{replacement:?}: {reason}"),
        };
        // Java's groupCount(): group 0 not counted.
        let groups = compiled.captures_len() - 1;
        let mut pieces = vec![];
        let mut text = String::new();
        let mut chars = replacement.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(escaped) => text.push(escaped),
                    None => return Err(bad("a trailing \\ escapes nothing".into())),
                },
                '$' => {
                    let group = match chars.peek() {
                        Some('{') => {
                            chars.next();
                            let mut name = String::new();
                            loop {
                                match chars.next() {
                                    Some('}') => break,
                                    Some(c) if c.is_ascii_alphanumeric() => name.push(c),
                                    _ => {
                                        return Err(bad(
                                            "a named group reference is ${name}, name of \
                                             letters and digits"
                                                .into(),
                                        ))
                                    }
                                }
                            }
                            compiled
                                .capture_names()
                                .position(|n| n == Some(name.as_str()))
                                .ok_or_else(|| {
                                    bad(format!("the regex {regex:?} has no group named {name:?}"))
                                })?
                        }
                        Some(d) if d.is_ascii_digit() => {
                            let mut n = d.to_digit(10).unwrap_or(0) as usize;
                            chars.next();
                            if n > groups {
                                return Err(bad(format!("the regex {regex:?} has no group {n}")));
                            }
                            // Java takes more digits while the number stays a group.
                            while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                                let longer = n * 10 + d as usize;
                                if longer > groups {
                                    break;
                                }
                                n = longer;
                                chars.next();
                            }
                            n
                        }
                        _ => {
                            return Err(bad(
                                "a $ must start a group reference (${name} or $n); write \\$ for \
                                 a literal $"
                                    .into(),
                            ))
                        }
                    };
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                    }
                    pieces.push(Piece::Group(group));
                }
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Ok(Self {
            regex: compiled,
            replacement: pieces,
        })
    }

    /// The topic for route value `value` (before Kafka's character rules are applied).
    pub fn topic(&self, value: &str) -> String {
        let Some(caps) = self.regex.captures(value) else {
            return value.to_string();
        };
        let mut out = String::new();
        for p in &self.replacement {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Group(g) => out.push_str(caps.get(*g).map_or("", |m| m.as_str())),
            }
        }
        out
    }
}

/// Checks what the router can only check with its own parsers (the topic regex and
/// replacement) for one served table's configuration.
pub fn check(cfg: &OutboxConfig) -> Result<(), MappingError> {
    TopicRoute::new(&cfg.route_topic_regex, &cfg.topic_template).map(|_| ())
}

/// The configured mapping.
#[derive(Debug, Clone)]
pub struct EventRouter {
    cfg: OutboxConfig,
    /// `additional_placement` parsed: (column, placement, name).
    extra: Vec<(String, Placement, String)>,
    /// The payload column is `bytea`: its text (`\\x` + hex) is published as the bytes.
    binary_payload: bool,
    /// Column type OIDs (an envelope field's JSON type follows its column's).
    column_types: HashMap<String, u32>,
    /// `None` when the configuration does not compile (refused at start by [`check`]).
    route: Option<TopicRoute>,
    nulls: NullBehavior,
}

/// Postgres's `bytea` type OID (pgoutput's Relation message names column types by OID).
pub const BYTEA_OID: u32 = 17;

/// The bytes of a `bytea` value in Postgres's hex text format (`\\x0a1b…`); `None` when it is
/// not in that format.
pub fn bytea_from_text(text: &str) -> Option<Vec<u8>> {
    let hex = text.strip_prefix("\\x")?.as_bytes();
    if hex.len() % 2 != 0 {
        return None;
    }
    hex.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect()
}

/// Standard base64 with padding (what Connect's `JsonConverter` writes for bytes).
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A W3C `traceparent` (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`, ids not all
/// zeros, version not `ff`).
fn is_traceparent(s: &str) -> bool {
    let p: Vec<&str> = s.split('-').collect();
    let hex = |x: &str, n: usize| {
        x.len() == n
            && x.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    p.len() >= 4
        && hex(p[0], 2)
        && p[0] != "ff"
        && (p.len() == 4 || p[0] != "00")
        && hex(p[1], 32)
        && p[1].bytes().any(|b| b != b'0')
        && hex(p[2], 16)
        && p[2].bytes().any(|b| b != b'0')
        && hex(p[3], 2)
}

/// The `traceparent` and `tracestate` of a span context column: a bare `traceparent`, or Java
/// properties text (what Debezium's `tracing.span.context.field` holds: `key=value` lines,
/// `#`/`!` comments). An invalid `traceparent` gives nothing.
pub fn trace_context(text: &str) -> Vec<(&'static str, String)> {
    let text = text.trim();
    if is_traceparent(text) {
        return vec![("traceparent", text.to_string())];
    }
    let mut parent = None;
    let mut state = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some(at) = line.find(['=', ':']) else {
            continue;
        };
        let (k, v) = (line[..at].trim(), line[at + 1..].trim());
        match k {
            "traceparent" => parent = Some(v.to_string()),
            "tracestate" => state = Some(v.to_string()),
            _ => {}
        }
    }
    match parent.filter(|p| is_traceparent(p)) {
        None => vec![],
        Some(p) => std::iter::once(("traceparent", p))
            .chain(state.filter(|s| !s.is_empty()).map(|s| ("tracestate", s)))
            .collect(),
    }
}

/// A column's text as the JSON value Debezium's Connect type for it serializes to (envelope
/// fields): integers and floats as numbers, booleans, `timestamptz` as an ISO-8601 UTC string;
/// every other type as a string of Postgres's text.
fn json_field(text: Option<&str>, type_oid: Option<u32>, out: &mut String) {
    let Some(t) = text else {
        out.push_str("null");
        return;
    };
    match type_oid {
        Some(20 | 21 | 23 | 26) if t.parse::<i64>().is_ok() => out.push_str(t),
        Some(700) => match t.parse::<f32>() {
            Ok(f) if f.is_finite() => out.push_str(&crate::expand::java_float(f)),
            _ => crate::expand::write_string(t, out),
        },
        Some(701) => match t.parse::<f64>() {
            Ok(f) if f.is_finite() => out.push_str(&crate::expand::java_double(f)),
            _ => crate::expand::write_string(t, out),
        },
        Some(16) if t == "t" || t == "f" => out.push_str(if t == "t" { "true" } else { "false" }),
        Some(1184) => match chrono::DateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S%.f%#z") {
            Ok(ts) => {
                let utc = ts.with_timezone(&chrono::Utc);
                let mut s = utc.format("%Y-%m-%dT%H:%M:%S%.9f").to_string();
                while s.ends_with('0') {
                    s.pop();
                }
                if s.ends_with('.') {
                    s.pop();
                }
                s.push('Z');
                crate::expand::write_string(&s, out);
            }
            Err(_) => crate::expand::write_string(t, out),
        },
        _ => crate::expand::write_string(t, out),
    }
}

pub use eosflow_outbox_writer::avro::sanitize_topic;

use crate::expand::NullBehavior;

impl EventRouter {
    /// A router for the configured columns and template.
    pub fn new(cfg: &OutboxConfig) -> Self {
        let extra = cfg
            .additional_placement
            .iter()
            .filter_map(|p| {
                let mut parts = p.split(':');
                let column = parts.next()?;
                let placement = match parts.next()? {
                    "header" => Placement::Header,
                    "envelope" => Placement::Envelope,
                    "partition" => Placement::Partition,
                    _ => return None,
                };
                Some((
                    column.to_string(),
                    placement,
                    parts.next().unwrap_or(column).to_string(),
                ))
            })
            .collect();
        Self {
            cfg: cfg.clone(),
            extra,
            binary_payload: false,
            column_types: HashMap::new(),
            route: TopicRoute::new(&cfg.route_topic_regex, &cfg.topic_template).ok(),
            nulls: match cfg.json_payload_null_behavior {
                JsonPayloadNullBehavior::Ignore => NullBehavior::Ignore,
                JsonPayloadNullBehavior::OptionalBytes => NullBehavior::OptionalBytes,
            },
        }
    }

    /// Says whether the payload column is `bytea` (known from the table's column types).
    pub fn set_binary_payload(&mut self, binary: bool) {
        self.binary_payload = binary;
    }

    /// The table's column type OIDs: an envelope field is written as its column's type.
    pub fn set_column_types(&mut self, types: HashMap<String, u32>) {
        self.column_types = types;
    }

    /// The record value of a payload column's text.
    fn value(&self, text: &str) -> Vec<u8> {
        if self.binary_payload {
            if let Some(bytes) = bytea_from_text(text) {
                return bytes;
            }
        }
        if self.cfg.expand_json_payload {
            if let Some(expanded) = crate::expand::expand(text, self.nulls) {
                return expanded.into_bytes();
            }
        }
        text.as_bytes().to_vec()
    }

    /// The envelope value (`{"payload": …, "<alias>": …}`) of a row with envelope fields.
    fn envelope(&self, row: &Row, payload: &str) -> Vec<u8> {
        let mut out = String::from("{\"payload\":");
        let expanded = (self.cfg.expand_json_payload && !self.binary_payload)
            .then(|| crate::expand::expand(payload, self.nulls))
            .flatten();
        match (
            expanded,
            self.binary_payload
                .then(|| bytea_from_text(payload))
                .flatten(),
        ) {
            (Some(json), _) => out.push_str(&json),
            (None, Some(bytes)) => crate::expand::write_string(&base64(&bytes), &mut out),
            (None, None) => crate::expand::write_string(payload, &mut out),
        }
        for (column, placement, name) in &self.extra {
            if *placement == Placement::Envelope {
                out.push(',');
                crate::expand::write_string(name, &mut out);
                out.push(':');
                json_field(
                    self.get(row, column),
                    self.column_types.get(column).copied(),
                    &mut out,
                );
            }
        }
        out.push('}');
        out.into_bytes()
    }

    fn get<'r>(&self, row: &'r Row, column: &str) -> Option<&'r str> {
        row.get(column).and_then(|v| v.as_deref())
    }

    /// The value the topic is routed by.
    pub fn route_value(&self, row: &Row) -> String {
        if !self.cfg.route_by.is_empty() {
            return self
                .get(row, &self.cfg.route_by)
                .unwrap_or("unknown")
                .to_string();
        }
        if let Some(t) = self
            .get(row, &self.cfg.column_aggregate_type)
            .filter(|t| !t.is_empty())
        {
            return t.to_string();
        }
        match self.get(row, &self.cfg.column_type) {
            Some(t) if !t.is_empty() => t.split('.').next().unwrap_or(t).to_string(),
            _ => "unknown".into(),
        }
    }

    /// Maps one row.
    pub fn route(&self, row: &Row) -> RoutedRecord {
        let c = &self.cfg;
        let value = self.route_value(row);
        let topic = sanitize_topic(&match &self.route {
            Some(route) => route.topic(&value),
            None => c.topic_template.replace("${routedByValue}", &value),
        });
        let id = self.get(row, &c.column_id).unwrap_or_default().to_string();
        let mut headers: Vec<(String, Vec<u8>)> = vec![];
        for (name, column) in [
            ("id", &c.column_id),
            ("type", &c.column_type),
            ("occurred_at", &c.column_occurred_at),
            ("aggregate_id", &c.column_aggregate_id),
            ("aggregate_type", &c.column_aggregate_type),
            ("schema_version", &c.column_schema_version),
        ] {
            if let Some(v) = self.get(row, column) {
                headers.push((name.to_string(), v.as_bytes().to_vec()));
            }
        }
        let mut partition = None;
        let mut unroutable = None;
        let mut envelope = false;
        for (column, placement, name) in &self.extra {
            let v = self.get(row, column);
            match placement {
                Placement::Header => {
                    if let Some(v) = v {
                        headers.push((name.clone(), v.as_bytes().to_vec()));
                    }
                }
                Placement::Envelope => envelope = true,
                Placement::Partition => match v.map(|v| (v, v.trim().parse::<i32>())) {
                    None => partition = None,
                    Some((_, Ok(p))) if p >= 0 => partition = Some(p),
                    Some((v, _)) => {
                        unroutable = Some(format!(
                            "partition column {column} holds {v:?}, not a partition number"
                        ))
                    }
                },
            }
        }
        // The writer's span context, passed on (it wins over the same keys in `headers`).
        let mut traced = vec![];
        if !c.column_tracing_span_context.is_empty() {
            if let Some(text) = self.get(row, &c.column_tracing_span_context) {
                for (k, v) in trace_context(text) {
                    traced.push(k);
                    headers.push((k.to_string(), v.into_bytes()));
                }
            }
        }
        if let Some(raw) = self.get(row, &c.column_headers) {
            match serde_json::from_str::<serde_json::Value>(raw) {
                Ok(serde_json::Value::Object(map)) => {
                    for (k, v) in map {
                        if traced.contains(&k.as_str()) {
                            continue;
                        }
                        let bytes = match v {
                            serde_json::Value::String(s) => s.into_bytes(),
                            other => other.to_string().into_bytes(),
                        };
                        headers.push((k, bytes));
                    }
                }
                Ok(serde_json::Value::Null) => {}
                _ => {
                    // Not an object: keep it whole rather than drop it.
                    headers.push(("headers".into(), raw.as_bytes().to_vec()));
                }
            }
        }
        // A NULL or blank payload is a tombstone (Debezium's route.tombstone.on.empty.payload),
        // also with an envelope.
        let payload = self
            .get(row, &c.column_payload)
            .filter(|p| self.binary_payload || !p.trim().is_empty());
        RoutedRecord {
            topic,
            partition,
            key: self
                .get(row, &c.column_aggregate_id)
                .map(|k| k.as_bytes().to_vec()),
            value: payload.map(|p| {
                if envelope {
                    self.envelope(row, p)
                } else {
                    self.value(p)
                }
            }),
            headers,
            id,
            commit_lsn: None,
            unroutable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pairs: &[(&str, Option<&str>)]) -> Row {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect()
    }

    fn header_pairs(rec: &RoutedRecord) -> Vec<(&str, &[u8])> {
        rec.headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .collect()
    }

    #[test]
    fn maps_like_debeziums_event_router() {
        let r = EventRouter::new(&OutboxConfig::default());
        let rec = r.route(&row(&[
            ("id", Some("11111111-1111-1111-1111-111111111111")),
            ("occurred_at", Some("2026-12-02 10:00:00+00")),
            ("aggregate_type", None),
            ("aggregate_id", Some("order-1")),
            ("type", Some("Order.Created")),
            ("payload", Some(r#"{"total": 42}"#)),
            ("headers", Some(r#"{"n": 3, "tenant": "t1"}"#)),
        ]));
        assert_eq!(rec.topic, "outbox.event.Order");
        assert_eq!(rec.key.as_deref(), Some(&b"order-1"[..]));
        assert_eq!(rec.value.as_deref(), Some(&br#"{"total": 42}"#[..]));
        let h = header_pairs(&rec);
        assert_eq!(
            h,
            vec![
                ("id", &b"11111111-1111-1111-1111-111111111111"[..]),
                ("type", b"Order.Created"),
                ("occurred_at", b"2026-12-02 10:00:00+00"),
                ("aggregate_id", b"order-1"),
                ("n", b"3"),
                ("tenant", b"t1"),
            ]
        );
    }

    #[test]
    fn a_bytea_payload_is_published_as_its_bytes() {
        assert_eq!(bytea_from_text("\\x00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(bytea_from_text("\\x0"), None);
        assert_eq!(bytea_from_text("{}"), None);
        let mut r = EventRouter::new(&OutboxConfig::default());
        let row = row(&[("id", Some("x")), ("payload", Some("\\x0001"))]);
        assert_eq!(r.route(&row).value.as_deref(), Some(&b"\\x0001"[..]));
        r.set_binary_payload(true);
        assert_eq!(r.route(&row).value.as_deref(), Some(&[0u8, 1][..]));
    }

    #[test]
    fn aggregate_type_column_and_route_by_win_and_topics_are_sanitized() {
        let r = EventRouter::new(&OutboxConfig::default());
        let base = [
            ("id", Some("x")),
            ("aggregate_type", Some("Customer Account")),
            ("type", Some("Order.Created")),
            ("payload", None),
        ];
        let rec = r.route(&row(&base));
        assert_eq!(rec.topic, "outbox.event.Customer_Account");
        assert_eq!(rec.value, None, "NULL payload is a tombstone");
        let r = EventRouter::new(&OutboxConfig {
            route_by: "type".into(),
            topic_template: "events-${routedByValue}".into(),
            ..OutboxConfig::default()
        });
        assert_eq!(r.route(&row(&base)).topic, "events-Order.Created");
        let r = EventRouter::new(&OutboxConfig::default());
        assert_eq!(
            r.route(&row(&[("id", Some("x"))])).topic,
            "outbox.event.unknown"
        );
    }

    #[test]
    fn debezium_options_map_onto_ours_and_extra_columns_become_headers() {
        let mut cfg = OutboxConfig::default();
        for (k, v) in [
            ("table.field.event.id", "event_id"),
            ("route.by.field", "kind"),
            (
                "table.fields.additional.placement",
                "tenant:header:tenant_id, region:header",
            ),
        ] {
            cfg.debezium.insert(k.into(), v.into());
        }
        let eff = cfg.effective().expect("maps");
        assert_eq!(
            (eff.column_id.as_str(), eff.route_by.as_str()),
            ("event_id", "kind")
        );
        let rec = EventRouter::new(&eff).route(&row(&[
            ("event_id", Some("e-1")),
            ("kind", Some("Shipment")),
            ("aggregate_type", Some("Order")),
            ("tenant", Some("t-9")),
            ("region", None),
        ]));
        assert_eq!(rec.topic, "outbox.event.Shipment");
        let h = header_pairs(&rec);
        assert_eq!(
            h,
            vec![
                ("id", &b"e-1"[..]),
                ("aggregate_type", b"Order"),
                ("tenant_id", b"t-9")
            ]
        );
        cfg.column_id = "uuid".into();
        let (option, why) = cfg.effective().expect_err("contradiction");
        assert_eq!(option, "table.field.event.id");
        assert!(why.contains("\"uuid\""), "{why}");
        let mut cfg = OutboxConfig::default();
        cfg.debezium
            .insert("route.tombstone.on.empty.payload".into(), "false".into());
        assert!(cfg.effective().is_err());
    }

    #[test]
    fn topic_routing_follows_connects_regex_router_and_javas_replacement_rules() {
        let r = TopicRoute::new("(?<routedByValue>.*)", "outbox.event.${routedByValue}")
            .expect("default");
        assert_eq!(r.topic("Order"), "outbox.event.Order");
        let r =
            TopicRoute::new(r"(?<agg>[a-z]+)\.(v[0-9]+)", r"events.${agg}-$2\$x").expect("groups");
        assert_eq!(r.topic("order.v3"), "events.order-v3$x");
        // Not matched whole: the route value itself.
        assert_eq!(r.topic("Order.v3"), "Order.v3");
        assert_eq!(r.topic("order.v3.extra"), "order.v3.extra");
        // `$12` with two groups is group 1 then `2`, as in Java.
        let r = TopicRoute::new("(a)(b)", "$12").expect("digits");
        assert_eq!(r.topic("ab"), "a2");
        for (regex, replacement, key) in [
            ("(unclosed", "x", "outbox.route_topic_regex"),
            ("(a)", "$2", "outbox.topic_template"),
            ("(a)", "${nope}", "outbox.topic_template"),
            ("(a)", "cost $", "outbox.topic_template"),
            ("(a)", "x\\", "outbox.topic_template"),
        ] {
            let e = TopicRoute::new(regex, replacement).expect_err(replacement);
            assert_eq!(e.key, key, "{e}");
        }
    }

    #[test]
    fn the_span_context_column_becomes_traceparent_and_tracestate_headers() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(trace_context(tp), vec![("traceparent", tp.to_string())]);
        let props = format!("#Thu Dec 04\ntraceparent={tp}\ntracestate=a=1\n");
        assert_eq!(
            trace_context(&props),
            vec![
                ("traceparent", tp.to_string()),
                ("tracestate", "a=1".into())
            ]
        );
        assert!(trace_context("traceparent=00-0000-zz-01").is_empty());
        assert!(
            trace_context("00-00000000000000000000000000000000-b7ad6b7169203331-01").is_empty()
        );
        let cfg = OutboxConfig {
            column_tracing_span_context: "ctx".into(),
            ..OutboxConfig::default()
        };
        let rec = EventRouter::new(&cfg).route(&row(&[
            ("id", Some("x")),
            ("ctx", Some(tp)),
            ("headers", Some(r#"{"traceparent": "old", "k": "v"}"#)),
        ]));
        let h = header_pairs(&rec);
        assert_eq!(
            h,
            vec![
                ("id", &b"x"[..]),
                ("traceparent", tp.as_bytes()),
                ("k", b"v")
            ]
        );
    }

    #[test]
    fn envelope_fields_are_typed_by_their_columns_and_partition_comes_from_its_column() {
        let cfg = OutboxConfig {
            additional_placement: vec![
                "n:envelope".into(),
                "f:envelope:ratio".into(),
                "ok:envelope".into(),
                "at:envelope".into(),
                "t:envelope".into(),
                "p:partition".into(),
            ],
            expand_json_payload: true,
            ..OutboxConfig::default()
        };
        let mut r = EventRouter::new(&cfg);
        r.set_column_types(HashMap::from([
            ("n".to_string(), 23),
            ("f".to_string(), 701),
            ("ok".to_string(), 16),
            ("at".to_string(), 1184),
            ("t".to_string(), 25),
            ("p".to_string(), 23),
        ]));
        let rec = r.route(&row(&[
            ("id", Some("x")),
            ("payload", Some(r#"{"a": 1, "z": null}"#)),
            ("n", Some("-5")),
            ("f", Some("100")),
            ("ok", Some("t")),
            ("at", Some("2026-12-02 11:00:00.25+01")),
            ("t", None),
            ("p", Some("2")),
        ]));
        assert_eq!(
            String::from_utf8_lossy(rec.value.as_deref().unwrap_or_default()),
            r#"{"payload":{"a":1},"n":-5,"ratio":100.0,"ok":true,"at":"2026-12-02T10:00:00.25Z","t":null}"#
        );
        assert_eq!((rec.partition, rec.unroutable.as_deref()), (Some(2), None));
        let bad = r.route(&row(&[("id", Some("x")), ("p", Some("-1"))]));
        assert!(bad.unroutable.is_some_and(|w| w.contains("\"-1\"")));
        // A NULL or blank payload is a tombstone, envelope or not.
        assert_eq!(r.route(&row(&[("id", Some("x"))])).value, None);
        assert_eq!(base64(b"hello"), "aGVsbG8=");
    }
}
