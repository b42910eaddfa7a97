//! One outbox row: what the writer inserts, built from an event and its context, and the single
//! parameterised `INSERT` both drivers run (every parameter text, except a `bytea` payload, cast
//! in SQL, so neither driver needs its type features).

use chrono::{DateTime, SecondsFormat, Utc};

use super::avro::AvroRegistry;
use super::event::{Context, OutboxEvent, Payload};
use super::WriteError;

/// The outbox table's column names: the router's `outbox.column_*` keys (Debezium's
/// `table.field.event.*`). The defaults are the router's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Columns {
    /// Event id (uuid): the `id` header.
    pub id: String,
    /// Event time: the `occurred_at` header.
    pub occurred_at: String,
    /// Aggregate type: routes the row to its topic.
    pub aggregate_type: String,
    /// Aggregate id: the record key.
    pub aggregate_id: String,
    /// Event type: the `type` header.
    pub event_type: String,
    /// Payload: `jsonb`, or `bytea` when [`Columns::payload_bytea`].
    pub payload: String,
    /// JSON object whose keys become headers (the context's envelope fields).
    pub headers: String,
    /// The payload column is `bytea` (needed for Avro; JSON is stored as its UTF-8 text).
    pub payload_bytea: bool,
}

impl Default for Columns {
    fn default() -> Self {
        Self {
            id: "id".into(),
            occurred_at: "occurred_at".into(),
            aggregate_type: "aggregate_type".into(),
            aggregate_id: "aggregate_id".into(),
            event_type: "type".into(),
            payload: "payload".into(),
            headers: "headers".into(),
            payload_bytea: false,
        }
    }
}

/// A payload as stored in the payload column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredPayload {
    /// JSON text for a `jsonb` column.
    Json(String),
    /// Bytes for a `bytea` column (Confluent-framed Avro, or JSON text).
    Bytes(Vec<u8>),
}

/// The values of one outbox row, ready to insert.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    /// A fresh event id: the `id` header consumers deduplicate by.
    pub id: uuid::Uuid,
    /// When it happened (RFC 3339 in the row).
    pub occurred_at: DateTime<Utc>,
    /// The aggregate type.
    pub aggregate_type: String,
    /// The aggregate id.
    pub aggregate_id: String,
    /// The event type.
    pub event_type: String,
    /// The payload (`None`: tombstone).
    pub payload: Option<StoredPayload>,
    /// The `headers` object: the context's envelope fields and extra headers.
    pub headers: serde_json::Value,
}

impl OutboxRow {
    /// `$1`‥`$6` of [`OutboxWriter::insert_sql`] as text (id, occurred_at in RFC 3339,
    /// aggregate type and id, type, headers JSON); `$7` is [`OutboxRow::payload`]. With these a
    /// service on another driver runs the same `INSERT`.
    pub fn text_params(&self) -> [String; 6] {
        [
            self.id.to_string(),
            self.occurred_at
                .to_rfc3339_opts(SecondsFormat::Micros, true),
            self.aggregate_type.clone(),
            self.aggregate_id.clone(),
            self.event_type.clone(),
            self.headers.to_string(),
        ]
    }
}

/// Appends events to one outbox table.
#[derive(Debug, Clone)]
pub struct OutboxWriter {
    columns: Columns,
    insert: String,
    avro: Option<AvroRegistry>,
}

/// `"name"`, embedded quotes doubled.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl OutboxWriter {
    /// A writer for `table` (`schema.table` or `table`) with the router's default columns.
    pub fn new(table: &str) -> Self {
        Self::with_columns(table, Columns::default())
    }

    /// A writer for `table` with these column names.
    pub fn with_columns(table: &str, columns: Columns) -> Self {
        let table = match table.split_once('.') {
            Some((s, t)) => format!("{}.{}", quote_ident(s), quote_ident(t)),
            None => quote_ident(table),
        };
        let c = &columns;
        let cols = [
            &c.id,
            &c.occurred_at,
            &c.aggregate_type,
            &c.aggregate_id,
            &c.event_type,
            &c.headers,
            &c.payload,
        ]
        .map(|n| quote_ident(n))
        .join(", ");
        let payload = if c.payload_bytea {
            "$7::bytea"
        } else {
            "$7::text::jsonb"
        };
        let insert = format!(
            "insert into {table} ({cols}) values ($1::text::uuid, $2::text::timestamptz, \
             $3::text, $4::text, $5::text, $6::text::jsonb, {payload})"
        );
        Self {
            columns,
            insert,
            avro: None,
        }
    }

    /// Encodes [`Payload::Avro`] through `registry` (the payload column must be `bytea`).
    pub fn with_registry(mut self, registry: AvroRegistry) -> Self {
        self.avro = Some(registry);
        self
    }

    /// The `INSERT` both drivers run: `$1`‥`$6` text (id, occurred_at, aggregate type and id,
    /// type, headers), `$7` the payload (text, or bytes for a `bytea` column).
    pub fn insert_sql(&self) -> &str {
        &self.insert
    }

    /// Whether the payload column is `bytea`.
    pub fn payload_is_bytea(&self) -> bool {
        self.columns.payload_bytea
    }

    /// Builds the row of `event` in `ctx`: a fresh id, the envelope headers, the payload
    /// encoded (Avro registers its schema first, hence async).
    pub async fn row<E: OutboxEvent + ?Sized>(
        &self,
        event: &E,
        ctx: &Context,
    ) -> Result<OutboxRow, WriteError> {
        let bytea = self.columns.payload_bytea;
        let payload = match event.payload() {
            Payload::Tombstone => None,
            Payload::Json(v) if bytea => Some(StoredPayload::Bytes(v.to_string().into_bytes())),
            Payload::Json(v) => Some(StoredPayload::Json(v.to_string())),
            Payload::Avro { .. } if !bytea => {
                return Err(WriteError::Payload(format!(
                    "an Avro payload of {} needs a bytea payload column (Columns::payload_bytea)",
                    event.event_type()
                )))
            }
            Payload::Avro { schema, value } => {
                let Some(registry) = &self.avro else {
                    return Err(WriteError::Payload(format!(
                        "an Avro payload of {} needs a schema registry (OutboxWriter::with_registry)",
                        event.event_type()
                    )));
                };
                Some(StoredPayload::Bytes(
                    registry
                        .encode(event.aggregate_type(), &schema, value)
                        .await?,
                ))
            }
        };
        Ok(OutboxRow {
            id: uuid::Uuid::new_v4(),
            occurred_at: event.occurred_at().unwrap_or_else(Utc::now),
            aggregate_type: event.aggregate_type().to_string(),
            aggregate_id: event.aggregate_id().to_string(),
            event_type: event.event_type().to_string(),
            payload,
            headers: ctx.headers_json(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Ev(Payload);
    impl OutboxEvent for Ev {
        fn aggregate_type(&self) -> &str {
            "Order"
        }
        fn aggregate_id(&self) -> &str {
            "o-1"
        }
        fn event_type(&self) -> &str {
            "orders.x.v1"
        }
        fn payload(&self) -> Payload {
            self.0.clone()
        }
    }

    fn block<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn the_insert_names_the_configured_columns_and_casts_every_text_parameter() {
        let w = OutboxWriter::with_columns(
            "app.outbox",
            Columns {
                id: "event_id".into(),
                payload_bytea: true,
                ..Columns::default()
            },
        );
        assert_eq!(
            w.insert_sql(),
            "insert into \"app\".\"outbox\" (\"event_id\", \"occurred_at\", \"aggregate_type\", \
             \"aggregate_id\", \"type\", \"headers\", \"payload\") values ($1::text::uuid, \
             $2::text::timestamptz, $3::text, $4::text, $5::text, $6::text::jsonb, $7::bytea)"
        );
    }

    #[test]
    fn payloads_are_stored_as_the_column_takes_them_and_avro_needs_bytea_and_a_registry() {
        let json = Payload::Json(serde_json::json!({"a": 1}));
        let w = OutboxWriter::new("outbox");
        let row = block(w.row(&Ev(json.clone()), &Context::default())).expect("row");
        assert_eq!(row.payload, Some(StoredPayload::Json(r#"{"a":1}"#.into())));
        assert_eq!(row.headers, serde_json::json!({}));
        let bytea = OutboxWriter::with_columns(
            "outbox",
            Columns {
                payload_bytea: true,
                ..Columns::default()
            },
        );
        let row = block(bytea.row(&Ev(json), &Context::default())).expect("row");
        assert_eq!(
            row.payload,
            Some(StoredPayload::Bytes(br#"{"a":1}"#.to_vec()))
        );
        let avro = Payload::Avro {
            schema: r#""long""#.into(),
            value: apache_avro::types::Value::Long(1),
        };
        let e = block(w.row(&Ev(avro.clone()), &Context::default())).expect_err("jsonb");
        assert!(e.to_string().contains("bytea"), "{e}");
        let e = block(bytea.row(&Ev(avro), &Context::default())).expect_err("no registry");
        assert!(e.to_string().contains("registry"), "{e}");
        let row = block(w.row(&Ev(Payload::Tombstone), &Context::default())).expect("row");
        assert_eq!(row.payload, None);
    }

    #[test]
    fn the_context_fills_the_envelope_headers_and_envelope_fields_win() {
        let ctx = Context::caused_by("req-1")
            .correlated("conv-1")
            .traced("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .for_tenant("acme")
            .header("tenant", "ignored")
            .header("source", "api");
        assert_eq!(
            ctx.headers_json(),
            serde_json::json!({
                "causation_id": "req-1",
                "correlation_id": "conv-1",
                "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "tenant": "acme",
                "source": "api",
            })
        );
    }
}
