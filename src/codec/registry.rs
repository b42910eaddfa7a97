//! The schema registry client: register a contract, fetch it by id, and encode/decode Avro in
//! the Confluent wire format. schema_registry_converter caches by id and subject, so the hot path
//! never asks the registry twice for the same schema.

use apache_avro::types::Value;
use schema_registry_converter::async_impl::easy_avro::{EasyAvroDecoder, EasyAvroEncoder};
use schema_registry_converter::async_impl::schema_registry::{
    get_schema_by_id, post_schema, SrSettings,
};
use schema_registry_converter::error::SRCError;
use schema_registry_converter::schema_registry_common::{
    SchemaType, SubjectNameStrategy, SuppliedSchema,
};

/// Why a registry or codec call failed.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The registry refused, was unreachable, or the bytes were not what the schema says.
    #[error("schema registry at {url}: {error}")]
    Registry {
        /// The registry base URL.
        url: String,
        /// schema_registry_converter's error, with its cause.
        error: String,
        /// Whether trying again may help (a transient failure).
        retriable: bool,
    },
}

/// A connection to one Confluent-compatible registry.
#[derive(Clone)]
pub struct Registry {
    url: String,
    settings: SrSettings,
    encoder: EasyAvroEncoder,
    decoder: EasyAvroDecoder,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("url", &self.url).finish()
    }
}

impl Registry {
    /// Connects (lazily) to the registry at `url` (Apicurio: `…/apis/ccompat/v7`).
    pub fn new(url: &str) -> Self {
        let settings = SrSettings::new(url.trim_end_matches('/').to_string());
        Self {
            url: url.to_string(),
            encoder: EasyAvroEncoder::new(settings.clone()),
            decoder: EasyAvroDecoder::new(settings.clone()),
            settings,
        }
    }

    fn err(&self, e: SRCError) -> CodecError {
        CodecError::Registry {
            url: self.url.clone(),
            error: match &e.cause {
                Some(c) => format!("{}: {c}", e.error),
                None => e.error.clone(),
            },
            retriable: e.retriable,
        }
    }

    /// Registers an Avro schema under `subject` (idempotent: an equal schema keeps its id).
    pub async fn register(&self, subject: &str, schema: &str) -> Result<u32, CodecError> {
        let supplied = SuppliedSchema::new(None, SchemaType::Avro, schema.to_string());
        post_schema(&self.settings, subject.to_string(), supplied)
            .await
            .map(|r| r.id)
            .map_err(|e| self.err(e))
    }

    /// The schema text registered under `id`.
    pub async fn fetch(&self, id: u32) -> Result<String, CodecError> {
        get_schema_by_id(id, &self.settings)
            .await
            .map(|r| r.schema)
            .map_err(|e| self.err(e))
    }

    /// Encodes `value` with `schema` for `topic` (topic-record subject naming: one topic carries
    /// several event types of one aggregate), registering the schema if needed.
    pub async fn encode(
        &self,
        topic: &str,
        schema: &str,
        value: Value,
    ) -> Result<Vec<u8>, CodecError> {
        let supplied =
            SuppliedSchema::new(record_name(schema), SchemaType::Avro, schema.to_string());
        let strategy =
            SubjectNameStrategy::TopicRecordNameStrategyWithSchema(topic.to_string(), supplied);
        self.encoder
            .encode_value(value, &strategy)
            .await
            .map_err(|e| self.err(e))
    }

    /// Decodes Confluent wire-format bytes, fetching the writer schema by id (cached).
    pub async fn decode(&self, bytes: &[u8]) -> Result<Value, CodecError> {
        self.decoder
            .decode(Some(bytes))
            .await
            .map(|r| r.value)
            .map_err(|e| self.err(e))
    }
}

/// The full name (`namespace.name`) of an Avro record schema, for subject naming.
fn record_name(schema: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(schema).ok()?;
    let name = v.get("name")?.as_str()?;
    match v.get("namespace").and_then(|n| n.as_str()) {
        Some(ns) if !name.contains('.') => Some(format!("{ns}.{name}")),
        _ => Some(name.to_string()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_contract_in_schemas_is_valid_avro_with_docs() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
        let mut stack = vec![root];
        let mut checked = 0;
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("schemas dir") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "avsc") {
                    let text = std::fs::read_to_string(&path).expect("read schema");
                    apache_avro::Schema::parse_str(&text)
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
                    for f in json["fields"].as_array().expect("a record") {
                        assert!(
                            f.get("doc").is_some(),
                            "{}: field {} has no doc",
                            path.display(),
                            f["name"]
                        );
                    }
                    checked += 1;
                }
            }
        }
        assert!(checked > 0);
    }

    #[test]
    fn record_name_joins_namespace() {
        let s = r#"{"type":"record","name":"OrderPlaced","namespace":"orders","fields":[]}"#;
        assert_eq!(super::record_name(s).as_deref(), Some("orders.OrderPlaced"));
        assert_eq!(super::record_name("not json"), None);
    }
}
