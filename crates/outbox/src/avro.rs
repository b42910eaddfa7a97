//! Avro payloads for routed rows (`outbox.payload_format = "avro"`).
//!
//! A row whose `type` names a contract in `schemas/` (e.g. `orders.order-placed.v1`) is
//! published as Avro in the Confluent wire format, its schema registered under the
//! topic-record subject (`<topic>-<record full name>`), so consumers read one format whoever
//! wrote the row. The row's JSON payload is read with Avro's JSON mapping (objects → records,
//! numbers → int/long/float/double, strings → string/enum, `null` → a union's null branch).
//!
//! A row of a type without a contract keeps its JSON payload (counted). A payload that does not
//! fit its contract is never stuck in the WAL and never dropped: it goes, as the JSON it was, to
//! `<topic>.DLT` in the same Kafka transaction, with the reason in `eosflow.dlt.*` headers.
//! A registry that cannot be reached is a transient error: nothing is confirmed to Postgres, and
//! the router retries the same rows after reconnecting.

use std::collections::HashMap;
use std::sync::OnceLock;

use apache_avro::types::Value;
use apache_avro::Schema;

use eosflow::config::Config;
use eosflow::internals::codec::registry::Registry;
use eosflow::internals::codec::Catalog;
use eosflow::internals::retry::dlt;
use eosflow::internals::retry::headers::bound_message;

use super::router::RoutedRecord;
use super::telemetry;
use super::OutboxError;

/// The contracts `payload_format = "avro"` encodes with when `outbox.schemas_dir` is empty: the
/// ones compiled into the binary by the application it links (the `eosflow` binary registers
/// the orders application's at start). The router itself knows no domain.
static BUILTIN: OnceLock<Catalog> = OnceLock::new();

/// Registers the contracts compiled into this binary, used when `outbox.schemas_dir` is empty;
/// call once at start, before the router runs. `false` if some were registered already (the
/// first registration stays).
pub fn set_builtin_contracts(catalog: Catalog) -> bool {
    BUILTIN.set(catalog).is_ok()
}

/// Turns JSON payloads of known types into registered Avro, once per routed batch.
pub struct PayloadEncoder {
    catalog: Catalog,
    registry: Registry,
    parsed: HashMap<String, Schema>,
}

impl std::fmt::Debug for PayloadEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayloadEncoder")
            .field("contracts", &self.catalog.len())
            .field("registry", &self.registry)
            .finish()
    }
}

/// What became of one row's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Encoded with the contract named by its `type`.
    Avro,
    /// No contract for its type (or a tombstone): the JSON as is.
    Json,
    /// Already Confluent-framed Avro (written by `eosflow-outbox-writer`): as is.
    Prebuilt,
    /// The payload does not fit its contract: sent to the DLT with this reason.
    DeadLettered(String),
}

impl PayloadEncoder {
    /// The encoder the configuration asks for: `None` for `payload_format = "json"`.
    pub fn from_config(config: &Config) -> Result<Option<Self>, OutboxError> {
        let o = &config.outbox;
        if o.payload_format != eosflow::config::PayloadFormat::Avro {
            return Ok(None);
        }
        let catalog = if o.schemas_dir.as_os_str().is_empty() {
            BUILTIN.get().cloned().ok_or_else(|| {
                OutboxError::Config(
                    "outbox.payload_format = \"avro\" needs outbox.schemas_dir: this binary has no contracts built in".into(),
                )
            })?
        } else {
            Catalog::from_dir(&o.schemas_dir)
                .map_err(|e| OutboxError::Config(format!("outbox.schemas_dir: {e}")))?
        };
        let registry = Registry::from_config(&config.schema_registry)
            .map_err(|e| OutboxError::Config(e.to_string()))?;
        Ok(Some(Self::new(catalog, registry)))
    }

    /// An encoder for `catalog`'s contracts through `registry`.
    pub fn new(catalog: Catalog, registry: Registry) -> Self {
        Self {
            catalog,
            registry,
            parsed: HashMap::new(),
        }
    }

    fn schema(&mut self, type_name: &str) -> Option<Result<(Schema, String), String>> {
        let contract = self.catalog.get(type_name)?;
        let text = contract.text.clone();
        if let Some(s) = self.parsed.get(type_name) {
            return Some(Ok((s.clone(), text)));
        }
        Some(match Schema::parse_str(&text) {
            Ok(s) => {
                self.parsed.insert(type_name.to_string(), s.clone());
                Ok((s, text))
            }
            Err(e) => Err(format!("contract {type_name} does not parse: {e}")),
        })
    }

    /// Encodes every record of `records` in place (see the module docs); a registry failure is
    /// returned and leaves the batch to be retried.
    pub async fn encode_all(&mut self, records: &mut [RoutedRecord]) -> Result<(), OutboxError> {
        for r in records.iter_mut() {
            let outcome = self.encode(r).await?;
            telemetry::payload(&outcome);
            if let Outcome::DeadLettered(reason) = outcome {
                tracing::warn!(
                    id = %r.id,
                    topic = %r.topic,
                    %reason,
                    "outbox payload does not fit its contract; sent to the DLT"
                );
                dead_letter(r, &reason);
            }
        }
        Ok(())
    }

    /// Encodes one record in place, or says why it cannot be.
    pub async fn encode(&mut self, r: &mut RoutedRecord) -> Result<Outcome, OutboxError> {
        let Some(type_name) = header(r, "type") else {
            return Ok(Outcome::Json);
        };
        let Some(json) = r.value.as_deref() else {
            return Ok(Outcome::Json);
        };
        // Already in the Confluent wire format (a `bytea` payload the writer library encoded
        // and registered): published as is. JSON text never starts with a zero byte.
        if json.first() == Some(&0) {
            return Ok(Outcome::Prebuilt);
        }
        let (schema, text) = match self.schema(&type_name) {
            None => return Ok(Outcome::Json),
            Some(Err(e)) => return Err(OutboxError::Config(e)),
            Some(Ok(s)) => s,
        };
        let value = match to_avro(json, &schema) {
            Ok(v) => v,
            Err(e) => {
                return Ok(Outcome::DeadLettered(format!(
                    "payload of outbox row {} does not fit {type_name}: {e} \
                     (fix the writer, or publish the row under a type without a contract)",
                    r.id
                )))
            }
        };
        let bytes = self
            .registry
            .encode(&r.topic, &text, value)
            .await
            .map_err(|e| OutboxError::Other(format!("encoding row {} as Avro: {e}", r.id)))?;
        r.value = Some(bytes);
        r.headers.push((
            "content-type".into(),
            b"application/vnd.apache.avro".to_vec(),
        ));
        Ok(Outcome::Avro)
    }
}

fn header(r: &RoutedRecord, name: &str) -> Option<String> {
    r.headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
}

/// Reads `json` (a payload as Postgres prints it) as a value of `schema`.
pub fn to_avro(json: &[u8], schema: &Schema) -> Result<Value, String> {
    let parsed: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("not JSON: {e}"))?;
    from_json(parsed).resolve(schema).map_err(|e| e.to_string())
}

/// Avro's JSON mapping before schema resolution: objects become maps (resolved to records),
/// integral numbers longs (resolved down to ints where the schema says so).
fn from_json(v: serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::Null,
        J::Bool(b) => Value::Boolean(b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Value::Long(i),
            None => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::String(s),
        J::Array(a) => Value::Array(a.into_iter().map(from_json).collect()),
        J::Object(o) => Value::Map(o.into_iter().map(|(k, v)| (k, from_json(v))).collect()),
    }
}

/// Redirects `r` to its topic's DLT, payload untouched, with the reason in the headers.
fn dead_letter(r: &mut RoutedRecord, reason: &str) {
    let dlt_topic = dlt::topic_for(&r.topic);
    let original = std::mem::replace(&mut r.topic, dlt_topic);
    let now = eosflow::internals::clock::now_ms().to_string();
    for (k, v) in [
        ("original.topic", original),
        ("error.class", "permanent".to_string()),
        ("error.message", bound_message(reason)),
        ("attempts", "1".to_string()),
        ("first.failure.at", now.clone()),
        ("last.failure.at", now),
        ("source", "outbox".to_string()),
    ] {
        r.headers
            .push((format!("{}{k}", dlt::PREFIX), v.into_bytes()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed() -> Schema {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas");
        let c = Catalog::from_dir(&dir).expect("the repository's schemas/");
        Schema::parse_str(&c.get("orders.order-placed.v1").expect("v1").text).expect("parses")
    }

    #[test]
    fn a_json_payload_reads_as_its_contract() {
        let json = br#"{"order_id":"o-1","customer_id":"c-1","placed_at":1764672000000,
            "currency":"EUR","total_minor":1250,
            "lines":[{"sku":"A","quantity":2,"unit_price_minor":625}]}"#;
        let v = to_avro(json, &placed()).expect("fits");
        let Value::Record(fields) = v else {
            panic!("record expected")
        };
        assert_eq!(fields[0], ("order_id".into(), Value::String("o-1".into())));
        assert_eq!(fields[2].1, Value::TimestampMillis(1_764_672_000_000));
    }

    #[test]
    fn a_payload_missing_a_field_or_of_a_wrong_type_is_refused_with_the_field() {
        let missing = br#"{"order_id":"o-1"}"#;
        let e = to_avro(missing, &placed()).expect_err("missing fields");
        assert!(e.contains("customer_id") || e.contains("field"), "{e}");
        let wrong = br#"{"order_id":"o-1","customer_id":"c","placed_at":"yesterday",
            "currency":"EUR","total_minor":1,"lines":[]}"#;
        assert!(to_avro(wrong, &placed()).is_err());
        assert!(to_avro(b"{not json", &placed())
            .expect_err("bad json")
            .starts_with("not JSON"));
    }

    #[test]
    fn a_dead_lettered_row_keeps_its_payload_and_names_where_it_was_going() {
        let mut r = RoutedRecord {
            topic: "outbox.event.orders".into(),
            key: Some(b"o-1".to_vec()),
            value: Some(b"{}".to_vec()),
            headers: vec![("id".into(), b"x".to_vec())],
            id: "x".into(),
            commit_lsn: None,
            ..RoutedRecord::default()
        };
        dead_letter(&mut r, "bad");
        assert_eq!(r.topic, "outbox.event.orders.DLT");
        assert_eq!(r.value.as_deref(), Some(&b"{}"[..]));
        let h: HashMap<_, _> = r.headers.iter().cloned().collect();
        assert_eq!(
            h.get("eosflow.dlt.original.topic").map(Vec::as_slice),
            Some(&b"outbox.event.orders"[..])
        );
        assert_eq!(
            h.get("eosflow.dlt.error.message").map(Vec::as_slice),
            Some(&b"bad"[..])
        );
    }
}
