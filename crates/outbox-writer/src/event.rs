//! What a service hands the writer: a typed event ([`OutboxEvent`]) with its [`Payload`], and
//! the [`Context`] of the request that caused it (correlation, causation, trace, tenant).

use std::collections::BTreeMap;

/// A domain event a service appends to its outbox. The router publishes it to the topic of its
/// aggregate type (`outbox.event.<aggregate type>` by default), keyed by its aggregate id, so one
/// aggregate's events keep their order.
pub trait OutboxEvent {
    /// The aggregate's type (`Order`): routes the row to its topic.
    fn aggregate_type(&self) -> &str;
    /// The aggregate's id: the record key.
    fn aggregate_id(&self) -> &str;
    /// The event type (`orders.order-placed.v2`): the `type` header, and the contract a
    /// consumer decodes the payload with.
    fn event_type(&self) -> &str;
    /// The payload, as JSON or as an Avro value with its schema.
    fn payload(&self) -> Payload;
    /// When the fact happened; `None` (the default): now.
    fn occurred_at(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        None
    }
}

/// An event's payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// Stored as JSON (a `jsonb` payload column; the text of it in a `bytea` one).
    Json(serde_json::Value),
    /// Encoded with `schema` (Avro schema JSON text), registered in the schema registry and
    /// stored in the Confluent wire format (needs a `bytea` payload column and
    /// [`crate::OutboxWriter::with_registry`]).
    Avro {
        /// The Avro schema, as JSON text.
        schema: String,
        /// The value, resolved against `schema` before it is encoded.
        value: apache_avro::types::Value,
    },
    /// No payload: the router publishes a tombstone for the aggregate's key.
    Tombstone,
}

/// The envelope fields the caller's request carries into every event it causes: they become
/// the `correlation_id`, `causation_id`, `traceparent` and `tenant` headers of the record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    /// The id of the first message of the conversation.
    pub correlation_id: Option<String>,
    /// The id of the message (or request) that caused this event.
    pub causation_id: Option<String>,
    /// W3C trace context of the request.
    pub traceparent: Option<String>,
    /// The tenant the data belongs to.
    pub tenant: Option<String>,
    /// Further headers, written after the envelope's.
    pub headers: BTreeMap<String, String>,
}

impl Context {
    /// The context of a request that caused events: `causation_id` = the request's id, and
    /// `correlation_id` the same unless [`Context::correlated`] says otherwise.
    pub fn caused_by(request_id: impl Into<String>) -> Self {
        let id = request_id.into();
        Self {
            correlation_id: Some(id.clone()),
            causation_id: Some(id),
            ..Self::default()
        }
    }

    /// Sets the correlation id (the conversation this request belongs to).
    pub fn correlated(mut self, correlation_id: impl Into<String>) -> Self {
        self.correlation_id = Some(correlation_id.into());
        self
    }

    /// Sets the W3C trace context.
    pub fn traced(mut self, traceparent: impl Into<String>) -> Self {
        self.traceparent = Some(traceparent.into());
        self
    }

    /// Sets the tenant.
    pub fn for_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Adds a header of the service's own.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// The `headers` column's JSON object: the envelope fields present, then the others (an
    /// envelope field wins over a same-named extra header).
    pub fn headers_json(&self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        for (k, v) in &self.headers {
            map.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
        for (k, v) in [
            ("correlation_id", &self.correlation_id),
            ("causation_id", &self.causation_id),
            ("traceparent", &self.traceparent),
            ("tenant", &self.tenant),
        ] {
            if let Some(v) = v {
                map.insert(k.to_string(), serde_json::Value::String(v.clone()));
            }
        }
        serde_json::Value::Object(map)
    }
}
