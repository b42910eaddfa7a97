//! Avro payloads: the schema registered in the schema registry under the topic-record subject
//! the router's own Avro path uses (`<topic>-<record full name>`), the value in the Confluent
//! wire format (magic byte, schema id, Avro binary). schema_registry_converter caches the id
//! per subject and schema, so only an event type's first append asks the registry.

use apache_avro::types::Value;
use apache_avro::Schema;
use schema_registry_converter::async_impl::easy_avro::EasyAvroEncoder;
use schema_registry_converter::async_impl::schema_registry::SrSettings;
use schema_registry_converter::schema_registry_common::{
    SchemaType, SubjectNameStrategy, SuppliedSchema,
};

use super::WriteError;

/// Registers schemas and encodes values for one registry and one topic naming.
#[derive(Clone)]
pub struct AvroRegistry {
    url: String,
    topic_template: String,
    encoder: EasyAvroEncoder,
}

impl std::fmt::Debug for AvroRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroRegistry")
            .field("url", &self.url)
            .field("topic_template", &self.topic_template)
            .finish()
    }
}

/// The topic the router publishes a row of `aggregate_type` to under `template`
/// (`${routedByValue}` replaced, then [`sanitize_topic`]): the schema's subject is named after
/// it.
pub fn routed_topic(template: &str, aggregate_type: &str) -> String {
    sanitize_topic(&template.replace("${routedByValue}", aggregate_type))
}

/// A topic name Kafka accepts, from any text: characters it rejects become `_`, the name is cut
/// at 249 characters, and the names it refuses (empty, `.`, `..`) become `_`. One function for
/// the router (which names the topics of rows with it) and the writer (which registers schemas
/// under the routed topic's subject), so the two never disagree.
///
/// ```
/// use eosflow_outbox_writer::avro::sanitize_topic;
/// assert_eq!(sanitize_topic("orders.Customer Account"), "orders.Customer_Account");
/// assert_eq!(sanitize_topic(".."), "_");
/// ```
pub fn sanitize_topic(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    s.truncate(249);
    if s.is_empty() || s == "." || s == ".." {
        s = "_".into();
    }
    s
}

/// `namespace.name` of a record schema's JSON text.
fn record_name(schema: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(schema).ok()?;
    let name = v.get("name")?.as_str()?;
    match v.get("namespace").and_then(|n| n.as_str()) {
        Some(ns) if !name.contains('.') => Some(format!("{ns}.{name}")),
        _ => Some(name.to_string()),
    }
}

impl AvroRegistry {
    /// A registry at `url` (Apicurio: `…/apis/ccompat/v7`) for rows routed by `topic_template`
    /// (the router's `outbox.topic_template`, `outbox.event.${routedByValue}` by default).
    pub fn new(url: &str, topic_template: &str) -> Self {
        let url = url.trim_end_matches('/').to_string();
        Self {
            encoder: EasyAvroEncoder::new(SrSettings::new(url.clone())),
            url,
            topic_template: topic_template.to_string(),
        }
    }

    /// Resolves `value` against `schema`, registers the schema for the aggregate type's topic
    /// and returns the Confluent wire-format bytes.
    pub async fn encode(
        &self,
        aggregate_type: &str,
        schema: &str,
        value: Value,
    ) -> Result<Vec<u8>, WriteError> {
        let parsed = Schema::parse_str(schema)
            .map_err(|e| WriteError::Payload(format!("the Avro schema does not parse: {e}")))?;
        let value = value
            .resolve(&parsed)
            .map_err(|e| WriteError::Payload(format!("the value does not fit its schema: {e}")))?;
        let topic = routed_topic(&self.topic_template, aggregate_type);
        let supplied =
            SuppliedSchema::new(record_name(schema), SchemaType::Avro, schema.to_string());
        let strategy = SubjectNameStrategy::TopicRecordNameStrategyWithSchema(topic, supplied);
        self.encoder
            .encode_value(value, &strategy)
            .await
            .map_err(|e| WriteError::Registry {
                url: self.url.clone(),
                error: match &e.cause {
                    Some(c) => format!("{}: {c}", e.error),
                    None => e.error.clone(),
                },
                retriable: e.retriable,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subject_topic_is_the_routers() {
        assert_eq!(
            routed_topic("outbox.event.${routedByValue}", "Order"),
            "outbox.event.Order"
        );
        assert_eq!(routed_topic("t-${routedByValue}", "A b/c"), "t-A_b_c");
        let s = r#"{"type":"record","name":"Created","namespace":"things","fields":[]}"#;
        assert_eq!(record_name(s).as_deref(), Some("things.Created"));
    }
}
