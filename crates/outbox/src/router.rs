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

use eosflow::config::OutboxConfig;

/// An outbox row by column name, values in Postgres text format (`None` = NULL).
pub type Row = HashMap<String, Option<String>>;

/// A row mapped to a Kafka record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoutedRecord {
    /// Destination topic.
    pub topic: String,
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
}

/// The configured mapping.
#[derive(Debug, Clone)]
pub struct EventRouter {
    cfg: OutboxConfig,
    /// `additional_placement` parsed: (column, header name).
    extra_headers: Vec<(String, String)>,
    /// The payload column is `bytea`: its text (`\\x` + hex) is published as the bytes.
    binary_payload: bool,
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

pub use eosflow_outbox_writer::avro::sanitize_topic;

impl EventRouter {
    /// A router for the configured columns and template.
    pub fn new(cfg: &OutboxConfig) -> Self {
        let extra_headers = cfg
            .additional_placement
            .iter()
            .filter_map(|p| {
                let mut parts = p.split(':');
                let column = parts.next()?;
                (parts.next()? == "header").then(|| {
                    (
                        column.to_string(),
                        parts.next().unwrap_or(column).to_string(),
                    )
                })
            })
            .collect();
        Self {
            cfg: cfg.clone(),
            extra_headers,
            binary_payload: false,
        }
    }

    /// Says whether the payload column is `bytea` (known from the table's column types).
    pub fn set_binary_payload(&mut self, binary: bool) {
        self.binary_payload = binary;
    }

    /// The record value of a payload column's text.
    fn value(&self, text: &str) -> Vec<u8> {
        if self.binary_payload {
            if let Some(bytes) = bytea_from_text(text) {
                return bytes;
            }
        }
        text.as_bytes().to_vec()
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
        let topic = sanitize_topic(
            &c.topic_template
                .replace("${routedByValue}", &self.route_value(row)),
        );
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
        for (column, name) in &self.extra_headers {
            if let Some(v) = self.get(row, column) {
                headers.push((name.clone(), v.as_bytes().to_vec()));
            }
        }
        if let Some(raw) = self.get(row, &c.column_headers) {
            match serde_json::from_str::<serde_json::Value>(raw) {
                Ok(serde_json::Value::Object(map)) => {
                    for (k, v) in map {
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
        RoutedRecord {
            topic,
            key: self
                .get(row, &c.column_aggregate_id)
                .map(|k| k.as_bytes().to_vec()),
            value: self.get(row, &c.column_payload).map(|p| self.value(p)),
            headers,
            id,
            commit_lsn: None,
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
}
