//! Turning a record into a typed event for a processor, with every kind of bad input made a
//! *permanent* failure with a specific reason (so it goes to the DLT at once instead of climbing
//! the retry ladder), and older versions upcast to what the handler is written for.
//!
//! Reasons start with a stable code (`unknown-magic-byte: …`) that DLT tooling and alerts can
//! match on; the rest is for people and never contains payload bytes.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema::{NamesRef, ResolvedSchema};
use apache_avro::types::Value;
use apache_avro::Schema;

use super::catalog::Catalog;
use super::envelope::{Envelope, EnvelopeError};
use super::project::{LongFieldPlan, WalkError};
use super::registry::{CodecError, Registry};
use crate::fast_hash::FastMap;
use crate::record::{ProcessError, Record};

/// Why a record is bad input: never worth retrying.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadInput {
    /// The topic is keyed by aggregate id and the record has no key.
    #[error("null-key: the record has no key, but this topic is keyed by aggregate id")]
    NullKey,
    /// An envelope header is not UTF-8.
    #[error("bad-header: {0}")]
    Header(#[from] EnvelopeError),
    /// The value is larger than the configured limit.
    #[error("oversize: the value is {len} bytes, the limit is {limit}")]
    Oversize {
        /// Value length.
        len: usize,
        /// The configured limit.
        limit: usize,
    },
    /// A tombstone where an event was expected.
    #[error("missing-value: a tombstone (null value) where an event was expected")]
    MissingValue,
    /// The first byte is neither the Confluent magic byte nor (when allowed) JSON.
    #[error("unknown-magic-byte: 0x{0:02x} (expected 0x00, the Confluent wire format)")]
    MagicByte(u8),
    /// Fewer than the 5 header bytes of the wire format.
    #[error("truncated-header: {0} bytes, shorter than the 5-byte wire format header")]
    ShortHeader(usize),
    /// The registry does not know the schema id.
    #[error("unknown-schema-id: schema id {id} is not in the registry ({detail})")]
    UnknownSchemaId {
        /// The id from the wire format header.
        id: u32,
        /// What the registry said.
        detail: String,
    },
    /// The registry's schema for the id is not valid Avro.
    #[error("bad-writer-schema: schema id {id} is not valid Avro: {error}")]
    BadWriterSchema {
        /// The schema id.
        id: u32,
        /// apache-avro's error.
        error: String,
    },
    /// The writer's record type is not one this consumer knows.
    #[error("unknown-type: {full_name} (schema id {id}) is not a contract this consumer knows")]
    UnknownType {
        /// Avro full name of the writer's record.
        full_name: String,
        /// The schema id.
        id: u32,
    },
    /// The `type` header disagrees with the schema.
    #[error("type-mismatch: the `type` header says {header}, the schema says {schema}")]
    TypeMismatch {
        /// The header value.
        header: String,
        /// The type the schema id maps to.
        schema: String,
    },
    /// The body ends before the record does.
    #[error("truncated-avro: the body ends inside the record (schema id {id}): {error}")]
    TruncatedAvro {
        /// The schema id.
        id: u32,
        /// apache-avro's error.
        error: String,
    },
    /// The body does not decode with the writer's schema.
    #[error("corrupt-avro: does not decode with schema id {id}: {error}")]
    CorruptAvro {
        /// The schema id.
        id: u32,
        /// apache-avro's error (or trailing bytes).
        error: String,
    },
    /// A JSON payload that does not parse.
    #[error("bad-json: {0}")]
    Json(String),
    /// A JSON payload without a `type` header: nothing says what it is.
    #[error("untyped-json: a JSON payload needs a `type` header")]
    UntypedJson,
    /// An upcaster refused the value.
    #[error("upcast-failed: {from} → {to}: {error}")]
    Upcast {
        /// Source type.
        from: String,
        /// Target type.
        to: String,
        /// Why.
        error: String,
    },
}

/// A decoding failure: bad input (permanent) or the registry being unavailable (transient).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Retrying cannot help.
    #[error(transparent)]
    Bad(#[from] BadInput),
    /// The schema could not be fetched now; retrying later may help.
    #[error("schema registry unavailable: {0}")]
    Unavailable(String),
}

impl From<DecodeError> for ProcessError {
    fn from(e: DecodeError) -> Self {
        match e {
            DecodeError::Bad(b) => ProcessError::Permanent(b.to_string()),
            e @ DecodeError::Unavailable(_) => ProcessError::Transient(e.to_string()),
        }
    }
}

impl From<BadInput> for ProcessError {
    fn from(e: BadInput) -> Self {
        ProcessError::Permanent(e.to_string())
    }
}

/// Why a schema could not be had by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceError {
    /// The id does not exist (permanent).
    NotFound(String),
    /// The source is unreachable or failed (transient).
    Unavailable(String),
}

/// Where writer schemas come from by id: the registry, or a fixed set (tests, fuzzing).
pub trait SchemaSource: Send {
    /// The schema text registered under `id`.
    fn schema(&mut self, id: u32) -> Result<String, SourceError>;
}

/// A fixed id → schema map: decoding without a registry.
#[derive(Debug, Clone, Default)]
pub struct FixedSource(pub HashMap<u32, String>);

impl SchemaSource for FixedSource {
    fn schema(&mut self, id: u32) -> Result<String, SourceError> {
        self.0
            .get(&id)
            .cloned()
            .ok_or_else(|| SourceError::NotFound(format!("no schema {id} in the fixed set")))
    }
}

/// The registry as a blocking source for the (synchronous) processor thread; only cache misses
/// get here.
pub struct RegistrySource {
    registry: Registry,
    rt: tokio::runtime::Runtime,
}

impl RegistrySource {
    /// A source fetching from `registry` on its own single-threaded runtime.
    pub fn new(registry: Registry) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Self { registry, rt })
    }
}

impl SchemaSource for RegistrySource {
    fn schema(&mut self, id: u32) -> Result<String, SourceError> {
        let fetch = self.registry.fetch(id);
        match self.rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(10), fetch).await
        }) {
            Err(_) => Err(SourceError::Unavailable("timed out after 10 s".into())),
            Ok(Ok(s)) => Ok(s),
            Ok(Err(CodecError::Registry {
                error, retriable, ..
            })) => {
                // 404 / Confluent error 40403 is "schema not found": the id will not appear later.
                if !retriable && (error.contains("404") || error.contains("40403")) {
                    Err(SourceError::NotFound(error))
                } else {
                    Err(SourceError::Unavailable(error))
                }
            }
        }
    }
}

/// A function converting an event's value from one version to the next.
pub type UpcastFn = fn(Value) -> Result<Value, String>;

/// Upcasters by source type: `things.thing-created.v1` → (`things.thing-created.v2`, f). Each
/// application registers its own.
///
/// ```
/// use apache_avro::types::Value;
/// use eosflow::contracts::Upcasters;
///
/// fn add_tag(v: Value) -> Result<Value, String> {
///     match v {
///         Value::Record(mut fields) => {
///             fields.push(("tag".into(), Value::Union(0, Box::new(Value::Null))));
///             Ok(Value::Record(fields))
///         }
///         other => Err(format!("expected a record, got {other:?}")),
///     }
/// }
/// let mut upcasters = Upcasters::new();
/// upcasters.register("things.thing-created.v1", "things.thing-created.v2", add_tag);
/// assert!(upcasters.has("things.thing-created.v1") && !upcasters.has("things.thing-created.v2"));
/// let (t, v) = upcasters
///     .apply("things.thing-created.v1", Value::Record(vec![]))
///     .expect("upcasts");
/// assert_eq!(t, "things.thing-created.v2");
/// assert_eq!(v, Value::Record(vec![("tag".into(), Value::Union(0, Box::new(Value::Null)))]));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Upcasters {
    by_source: HashMap<String, (String, UpcastFn)>,
}

impl Upcasters {
    /// Registers `from` → `to`; chains (v1 → v2 → v3) are followed.
    pub fn register(&mut self, from: &str, to: &str, f: UpcastFn) -> &mut Self {
        self.by_source.insert(from.to_string(), (to.to_string(), f));
        self
    }

    /// No upcasters: every type is handed over as written.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a chain starts at `type_name` (an upcaster is registered from it).
    pub fn has(&self, type_name: &str) -> bool {
        self.by_source.contains_key(type_name)
    }

    /// Applies the chain starting at `type_name`; returns the final type and value.
    pub fn apply(&self, type_name: &str, mut value: Value) -> Result<(String, Value), BadInput> {
        let mut t = type_name.to_string();
        let mut hops = 0;
        while let Some((to, f)) = self.by_source.get(&t) {
            value = f(value).map_err(|error| BadInput::Upcast {
                from: t.clone(),
                to: to.clone(),
                error,
            })?;
            t = to.clone();
            hops += 1;
            if hops > 64 {
                break; // a cycle in the registrations; stop rather than spin
            }
        }
        Ok((t, value))
    }
}

/// The payload of a decoded event.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// An Avro record, resolved against this consumer's contract (unknown fields dropped).
    Avro(Value),
    /// A JSON document (outbox events without a schema).
    Json(serde_json::Value),
}

/// A decoded, validated event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Type name after upcasting (`things.thing-created.v2`).
    pub type_name: String,
    /// The type as written, when an upcaster changed it.
    pub upcast_from: Option<String>,
    /// The writer's schema id (Avro only).
    pub schema_id: Option<u32>,
    /// The envelope headers.
    pub envelope: Envelope,
    /// The value.
    pub payload: Payload,
}

/// What the decoder accepts.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest value accepted, in bytes.
    pub max_value_bytes: usize,
    /// Whether a record without a key is bad input (topics keyed by aggregate id).
    pub require_key: bool,
    /// Whether a value starting with `{` is taken as JSON (outbox events without a schema).
    pub allow_json: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_value_bytes: 1024 * 1024,
            require_key: true,
            allow_json: true,
        }
    }
}

/// One cached writer schema, with its datum reader built once: building a reader resolves
/// every named type of both schemas, which cost more than decoding a small record.
struct Writer {
    datum: GenericDatumReader<'static>,
    type_name: String,
    /// The writer schema and its named types, for [`Decoder::decode_long_field`].
    schema: &'static Schema,
    names: NamesRef<'static>,
    /// [`Decoder::decode_long_field`]'s compiled walks by field name (`None`: the schema has no
    /// such field and records are decoded in full). A processor reads one or two fields, so a
    /// list beats a map.
    plans: Vec<(Box<str>, Option<LongFieldPlan<'static>>)>,
}

impl Writer {
    /// The whole record in `body`, which must be consumed exactly.
    fn read(&self, id: u32, mut body: &[u8]) -> Result<Value, BadInput> {
        let value = self.datum.read_value(&mut body).map_err(|e| {
            let error = e.to_string();
            if error.contains("fill whole buffer") || error.contains("UnexpectedEof") {
                BadInput::TruncatedAvro { id, error }
            } else {
                BadInput::CorruptAvro { id, error }
            }
        })?;
        if !body.is_empty() {
            return Err(BadInput::CorruptAvro {
                id,
                error: format!("{} bytes left after the record", body.len()),
            });
        }
        Ok(value)
    }
}

/// Most fields a writer keeps a compiled walk for.
const MAX_PLANS: usize = 16;

/// The datum reader for `writer` read as `reader`, without resolution when both are the same
/// schema (resolving an identical schema copies the value once more and changes nothing).
///
/// The two schemas are leaked: a reader borrows them, writer ids are immutable in a registry
/// and the decoder caches each id for its whole life, so each is kept for good anyway and the
/// memory is bounded by the schema ids a process ever meets.
fn datum_reader(
    id: u32,
    writer: &'static Schema,
    reader: Schema,
) -> Result<GenericDatumReader<'static>, BadInput> {
    let same = writer.canonical_form() == reader.canonical_form();
    let built = if same {
        GenericDatumReader::builder(writer).build()
    } else {
        let reader: &'static Schema = Box::leak(Box::new(reader));
        GenericDatumReader::builder(writer)
            .reader_schema(reader)
            .build()
    };
    built.map_err(|e| BadInput::CorruptAvro {
        id,
        error: e.to_string(),
    })
}

/// Decodes records for a processor. Writer schemas are cached by id for the decoder's life (ids
/// are immutable in a registry), so the hot path asks the registry once per id.
pub struct Decoder {
    source: Box<dyn SchemaSource>,
    catalog: Catalog,
    upcasters: Upcasters,
    limits: Limits,
    cache: FastMap<u32, Writer>,
    fetches: u64,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("contracts", &self.catalog.len())
            .field("cached_ids", &self.cache.len())
            .field("limits", &self.limits)
            .finish()
    }
}

impl Decoder {
    /// A decoder reading schemas from `source` and knowing the contracts of `catalog`.
    pub fn new(source: impl SchemaSource + 'static, catalog: Catalog) -> Self {
        Self {
            source: Box::new(source),
            catalog,
            upcasters: Upcasters::default(),
            limits: Limits::default(),
            cache: FastMap::default(),
            fetches: 0,
        }
    }

    /// Sets the upcasters applied after decoding.
    pub fn with_upcasters(mut self, upcasters: Upcasters) -> Self {
        self.upcasters = upcasters;
        self
    }

    /// Sets size and key limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// How many times a schema was fetched from the source (cache misses).
    pub fn fetches(&self) -> u64 {
        self.fetches
    }

    /// Decodes and validates a record into an event; bad input is `ProcessError::Permanent`.
    pub fn decode(&mut self, r: &Record<'_>) -> Result<Event, ProcessError> {
        self.decode_record(r).map_err(ProcessError::from)
    }

    /// As `decode`, with the typed error.
    pub fn decode_record(&mut self, r: &Record<'_>) -> Result<Event, DecodeError> {
        if self.limits.require_key && r.key.is_none() {
            return Err(BadInput::NullKey.into());
        }
        let envelope = Envelope::parse(r.headers).map_err(BadInput::from)?;
        let value = r.value.ok_or(BadInput::MissingValue)?;
        if value.len() > self.limits.max_value_bytes {
            return Err(BadInput::Oversize {
                len: value.len(),
                limit: self.limits.max_value_bytes,
            }
            .into());
        }
        if self.limits.allow_json && value.first() == Some(&b'{') {
            let json: serde_json::Value =
                serde_json::from_slice(value).map_err(|e| BadInput::Json(e.to_string()))?;
            let type_name = envelope.type_name.clone().ok_or(BadInput::UntypedJson)?;
            return Ok(Event {
                type_name,
                upcast_from: None,
                schema_id: None,
                envelope,
                payload: Payload::Json(json),
            });
        }
        let (id, written_type, value) = self.decode_avro(value)?;
        if let Some(h) = &envelope.type_name {
            if *h != written_type {
                return Err(BadInput::TypeMismatch {
                    header: h.clone(),
                    schema: written_type,
                }
                .into());
            }
        }
        let (type_name, value) = self.upcasters.apply(&written_type, value)?;
        Ok(Event {
            upcast_from: (type_name != written_type).then_some(written_type),
            type_name,
            schema_id: Some(id),
            envelope,
            payload: Payload::Avro(value),
        })
    }

    /// Decodes Confluent wire-format bytes: (schema id, contract type name, value).
    pub fn decode_avro(&mut self, bytes: &[u8]) -> Result<(u32, String, Value), DecodeError> {
        let (id, body) = wire_header(bytes)?;
        let writer = self.writer(id)?;
        let value = writer.read(id, body)?;
        Ok((id, writer.type_name.clone(), value))
    }

    /// The top-level `long` field `field` of Confluent wire-format bytes: (schema id, contract
    /// type name, value), without building the record ([`super::project`]); the body is
    /// checked as thoroughly as [`Decoder::decode_avro`] checks it. A writer schema without
    /// such a field is decoded in full and read as its contract (which may give a default).
    ///
    /// The walk is compiled once per schema id and field ([`LongFieldPlan`]), and the type name
    /// is lent, not copied: nothing is allocated per record.
    pub fn decode_long_field(
        &mut self,
        bytes: &[u8],
        field: &str,
    ) -> Result<(u32, &str, Option<i64>), DecodeError> {
        let (id, body) = wire_header(bytes)?;
        let writer = self.writer(id)?;
        let at = match writer.plans.iter().position(|(f, _)| **f == *field) {
            Some(at) => at,
            None => {
                let plan = LongFieldPlan::compile(writer.schema, &writer.names, field);
                if writer.plans.len() >= MAX_PLANS {
                    // A caller naming ever new fields cannot grow the cache without bound.
                    writer.plans.remove(0);
                }
                writer.plans.push((field.into(), plan));
                writer.plans.len() - 1
            }
        };
        let writer: &Writer = writer;
        let v = match &writer.plans[at].1 {
            Some(plan) => match plan.run(&writer.names, body) {
                Ok(v) => Some(v),
                Err(WalkError::Truncated) => {
                    return Err(BadInput::TruncatedAvro {
                        id,
                        error: "the bytes end inside a value".into(),
                    }
                    .into())
                }
                Err(WalkError::Corrupt(error)) => {
                    return Err(BadInput::CorruptAvro { id, error }.into())
                }
            },
            None => match writer.read(id, body)? {
                Value::Record(fields) => fields.iter().find_map(|(n, v)| match v {
                    Value::Long(l) if n == field => Some(*l),
                    Value::Int(i) if n == field => Some(i64::from(*i)),
                    _ => None,
                }),
                _ => None,
            },
        };
        Ok((id, &writer.type_name, v))
    }

    /// The cached writer schema `id`, fetched on first use.
    fn writer(&mut self, id: u32) -> Result<&mut Writer, DecodeError> {
        match self.cache.entry(id) {
            Entry::Occupied(w) => Ok(w.into_mut()),
            Entry::Vacant(slot) => {
                self.fetches += 1;
                let w = load_writer(&mut *self.source, &self.catalog, id)?;
                Ok(slot.insert(w))
            }
        }
    }
}

/// Fetches, parses and prepares writer schema `id` read as its contract in `catalog`.
fn load_writer(
    source: &mut dyn SchemaSource,
    catalog: &Catalog,
    id: u32,
) -> Result<Writer, DecodeError> {
    let text = source.schema(id).map_err(|e| match e {
        SourceError::NotFound(detail) => DecodeError::Bad(BadInput::UnknownSchemaId { id, detail }),
        SourceError::Unavailable(m) => DecodeError::Unavailable(m),
    })?;
    let schema = Schema::parse_str(&text).map_err(|e| BadInput::BadWriterSchema {
        id,
        error: e.to_string(),
    })?;
    let full_name = super::registry::record_name(&text).unwrap_or_default();
    let contract = catalog
        .by_full_name(&full_name)
        .ok_or_else(|| BadInput::UnknownType {
            full_name: full_name.clone(),
            id,
        })?;
    let reader = Schema::parse_str(&contract.text).map_err(|e| BadInput::BadWriterSchema {
        id,
        error: format!("the consumer's own contract {}: {e}", contract.type_name),
    })?;
    let schema: &'static Schema = Box::leak(Box::new(schema));
    let names = ResolvedSchema::try_from(schema)
        .map_err(|e| BadInput::BadWriterSchema {
            id,
            error: e.to_string(),
        })?
        .get_names()
        .clone();
    Ok(Writer {
        datum: datum_reader(id, schema, reader)?,
        type_name: contract.type_name.clone(),
        schema,
        names,
        plans: Vec::new(),
    })
}

/// The schema id and the Avro body of Confluent wire-format bytes.
pub(crate) fn wire_header(bytes: &[u8]) -> Result<(u32, &[u8]), BadInput> {
    match bytes.first() {
        None => return Err(BadInput::ShortHeader(0)),
        Some(0) => {}
        Some(&b) => return Err(BadInput::MagicByte(b)),
    }
    let Some(id_bytes) = bytes.get(1..5) else {
        return Err(BadInput::ShortHeader(bytes.len()));
    };
    let id = u32::from_be_bytes([id_bytes[0], id_bytes[1], id_bytes[2], id_bytes[3]]);
    Ok((id, &bytes[5..]))
}

/// Encodes `value` in the Confluent wire format with `schema` under `id`, without a registry
/// (fuzzing, tests, and producers that registered at start).
pub fn encode_wire(id: u32, schema: &Schema, value: Value) -> Result<Vec<u8>, apache_avro::Error> {
    let mut out = vec![0u8];
    out.extend_from_slice(&id.to_be_bytes());
    #[allow(deprecated)] // the replacement writer API is not simpler for one datum
    out.extend(apache_avro::to_avro_datum(schema, value)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A domain-free test contract.
    const CREATED_V1: &str = r#"{"type":"record","name":"Created","namespace":"things.v1","fields":[
        {"name":"id","type":"string"},
        {"name":"owner_id","type":"string"},
        {"name":"created_at","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"currency","type":"string"},
        {"name":"total_minor","type":"long"},
        {"name":"lines","type":{"type":"array","items":{"type":"record","name":"Line","fields":[
            {"name":"code","type":"string"},
            {"name":"quantity","type":"int"},
            {"name":"unit_minor","type":"long"}]}}}]}"#;
    /// v2 of [`CREATED_V1`]: the same record in `things.v2`, plus an optional `tag`.
    fn created_v2() -> String {
        let fields = CREATED_V1
            .strip_suffix("]}")
            .expect("the field list ends the record");
        format!(
            r#"{},{{"name":"tag","type":["null","string"],"default":null}}]}}"#,
            fields.replace("things.v1", "things.v2")
        )
    }
    pub(crate) const REMOVED_V1: &str = r#"{"type":"record","name":"Removed","namespace":"things.v1","fields":[
        {"name":"id","type":"string"},
        {"name":"removed_at","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"reason","type":{"type":"enum","name":"Reason","symbols":["REQUESTED","EXPIRED","OUT_OF_STOCK","OTHER"]}},
        {"name":"note","type":["null","string"],"default":null}]}"#;
    pub(crate) const MOVED_V1: &str = r#"{"type":"record","name":"Moved","namespace":"things.v1","fields":[
        {"name":"id","type":"string"},
        {"name":"moved_at","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"from_state","type":{"type":"enum","name":"State","symbols":["NEW","ACTIVE","DONE","GONE"]}},
        {"name":"to_state","type":"State"}]}"#;

    /// The test contracts.
    pub(crate) fn catalog() -> Catalog {
        let v2 = created_v2();
        Catalog::from_texts([
            ("things/thing-created.v1.avsc", CREATED_V1),
            ("things/thing-created.v2.avsc", v2.as_str()),
            ("things/thing-removed.v1.avsc", REMOVED_V1),
            ("things/thing-moved.v1.avsc", MOVED_V1),
        ])
        .expect("test contracts")
    }

    /// `things.thing-created.v1` → v2: v2 adds `tag`, unknown for v1 records.
    fn created_v1_to_v2(v: Value) -> Result<Value, String> {
        match v {
            Value::Record(mut fields) => {
                fields.push(("tag".into(), Value::Union(0, Box::new(Value::Null))));
                Ok(Value::Record(fields))
            }
            other => Err(format!("expected a record, got {other:?}")),
        }
    }

    pub(crate) fn created_v1() -> Value {
        Value::Record(vec![
            ("id".into(), Value::String("t-1".into())),
            ("owner_id".into(), Value::String("c-1".into())),
            (
                "created_at".into(),
                Value::TimestampMillis(1_700_000_000_000),
            ),
            ("currency".into(), Value::String("EUR".into())),
            ("total_minor".into(), Value::Long(1250)),
            (
                "lines".into(),
                Value::Array(vec![Value::Record(vec![
                    ("code".into(), Value::String("code-1".into())),
                    ("quantity".into(), Value::Int(2)),
                    ("unit_minor".into(), Value::Long(625)),
                ])]),
            ),
        ])
    }

    fn decoder() -> (Decoder, Vec<u8>) {
        let schema = Schema::parse_str(CREATED_V1).expect("schema");
        let bytes = encode_wire(7, &schema, created_v1()).expect("encode");
        let src = FixedSource(HashMap::from([(7, CREATED_V1.to_string())]));
        let mut up = Upcasters::new();
        up.register(
            "things.thing-created.v1",
            "things.thing-created.v2",
            created_v1_to_v2,
        );
        (Decoder::new(src, catalog()).with_upcasters(up), bytes)
    }

    fn record<'a>(value: &'a [u8], headers: &'a [(String, Vec<u8>)]) -> Record<'a> {
        Record {
            topic: "things",
            partition: 0,
            offset: 0,
            timestamp: None,
            key: Some(b"t-1"),
            value: Some(value),
            headers,
        }
    }

    #[test]
    fn decodes_upcasts_and_caches_by_id() {
        let (mut d, bytes) = decoder();
        for _ in 0..100 {
            let e = d.decode(&record(&bytes, &[])).expect("decodes");
            assert_eq!(e.type_name, "things.thing-created.v2");
            assert_eq!(e.upcast_from.as_deref(), Some("things.thing-created.v1"));
            let v2 = Schema::parse_str(&created_v2()).expect("v2");
            let Payload::Avro(v) = e.payload else {
                panic!("avro")
            };
            assert!(v.validate(&v2), "upcast value is a valid v2 record");
        }
        assert_eq!(d.fetches(), 1, "the schema is fetched once per id");
    }

    #[test]
    fn every_bad_input_class_is_permanent_with_its_reason() {
        let (mut d, good) = decoder();
        let perm = |d: &mut Decoder, r: Record<'_>| match d.decode(&r) {
            Err(ProcessError::Permanent(m)) => m,
            other => panic!("expected permanent, got {other:?}"),
        };
        let mut r = record(&good, &[]);
        r.key = None;
        assert!(perm(&mut d, r).starts_with("null-key:"));
        let bad_utf8 = [("id".to_string(), vec![0xff, 0xfe])];
        assert!(perm(&mut d, record(&good, &bad_utf8)).starts_with("bad-header: header `id`"));
        assert!(
            perm(&mut d, record(b"\x01\0\0\0\x07", &[])).starts_with("unknown-magic-byte: 0x01")
        );
        assert!(perm(&mut d, record(b"\0\0\0\0\x63\x02", &[]))
            .starts_with("unknown-schema-id: schema id 99"));
        assert!(perm(&mut d, record(&good[..good.len() - 3], &[])).starts_with("truncated-avro:"));
        assert!(perm(&mut d, record(b"\0\0", &[])).starts_with("truncated-header:"));
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(perm(&mut d, record(&trailing, &[])).starts_with("corrupt-avro:"));
        let big = vec![0u8; 2 * 1024 * 1024];
        assert!(perm(&mut d, record(&big, &[])).starts_with("oversize: the value is 2097152 bytes"));
        assert!(perm(&mut d, record(b"{not json", &[])).starts_with("bad-json:"));
        let t = [("type".to_string(), b"things.thing-removed.v1".to_vec())];
        assert!(perm(&mut d, record(&good, &t)).starts_with("type-mismatch:"));
        let json = d
            .decode(&record(
                br#"{"a":1}"#,
                &[("type".to_string(), b"x.y.v1".to_vec())],
            ))
            .expect("json");
        assert_eq!(json.payload, Payload::Json(serde_json::json!({"a": 1})));
    }

    #[test]
    fn an_unknown_writer_type_is_permanent() {
        let other = r#"{"type":"record","name":"Stranger","namespace":"x","fields":[{"name":"a","type":"int"}]}"#;
        let src = FixedSource(HashMap::from([(1, other.to_string())]));
        let mut d = Decoder::new(src, catalog());
        let bytes = encode_wire(
            1,
            &Schema::parse_str(other).expect("s"),
            Value::Record(vec![("a".into(), Value::Int(1))]),
        )
        .expect("e");
        match d.decode(&record(&bytes, &[])) {
            Err(ProcessError::Permanent(m)) => {
                assert!(m.starts_with("unknown-type: x.Stranger"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }
}

/// Randomized robustness of the wire-format decoder (the `cargo test` stand-in for
/// `fuzz/fuzz_targets/wire_decoder.rs` where cargo-fuzz cannot run): mutated valid encodings
/// and random bytes must decode or fail as bad input, never panic, hang or allocate wildly.
#[cfg(test)]
mod randomized {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A decoder for ids 1..=3 (the test contracts created v1 / removed / moved), and valid
    /// encodings of each to mutate.
    pub(crate) fn fixture() -> (Decoder, Vec<Vec<u8>>) {
        use super::tests::{catalog, created_v1, MOVED_V1, REMOVED_V1};
        let cat = catalog();
        let mut ids = HashMap::new();
        let mut seeds = Vec::new();
        let created = cat
            .get("things.thing-created.v1")
            .expect("contract")
            .text
            .clone();
        let str_ = |v: &str| Value::String(v.into());
        let values = [
            (1, created.as_str(), created_v1()),
            (
                2,
                REMOVED_V1,
                Value::Record(vec![
                    ("id".into(), str_("t-1")),
                    ("removed_at".into(), Value::TimestampMillis(1)),
                    ("reason".into(), Value::Enum(2, "OUT_OF_STOCK".into())),
                    ("note".into(), Value::Union(1, Box::new(str_("late")))),
                ]),
            ),
            (
                3,
                MOVED_V1,
                Value::Record(vec![
                    ("id".into(), str_("t-1")),
                    ("moved_at".into(), Value::TimestampMillis(2)),
                    ("from_state".into(), Value::Enum(0, "NEW".into())),
                    ("to_state".into(), Value::Enum(1, "ACTIVE".into())),
                ]),
            ),
        ];
        for (id, text, v) in values {
            let schema = Schema::parse_str(text).expect("schema");
            seeds.push(encode_wire(id, &schema, v).expect("encode"));
            ids.insert(id, text.to_string());
        }
        (Decoder::new(FixedSource(ids), cat), seeds)
    }

    #[test]
    fn mutated_and_random_wire_bytes_never_panic() {
        let (mut d, seeds) = fixture();
        for s in &seeds {
            d.decode_avro(s).expect("seeds decode");
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed_e05f);
        let iterations = 200_000;
        let (mut ok, mut bad) = (0u64, 0u64);
        let started = std::time::Instant::now();
        for i in 0..iterations {
            let mut b = seeds[i % seeds.len()].clone();
            match rng.gen_range(0..6) {
                0 => {
                    for _ in 0..rng.gen_range(1..4) {
                        let at = rng.gen_range(0..b.len());
                        b[at] ^= 1 << rng.gen_range(0..8);
                    }
                }
                1 => b.truncate(rng.gen_range(0..b.len())),
                2 => {
                    let at = rng.gen_range(5..=b.len());
                    let junk: Vec<u8> = (0..rng.gen_range(1..16)).map(|_| rng.gen()).collect();
                    b.splice(at..at, junk);
                }
                3 => {
                    // a varint-heavy byte (large lengths / counts) somewhere in the body
                    let at = rng.gen_range(5..b.len());
                    b[at] = [0x7f, 0xff, 0x80, 0x01, 0x81][rng.gen_range(0..5)];
                }
                4 => {
                    b = (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect();
                    if rng.gen_bool(0.7) && b.len() >= 5 {
                        b[0] = 0;
                        b[1..5].copy_from_slice(&rng.gen_range(0u32..5).to_be_bytes());
                    }
                }
                _ => {
                    let at = rng.gen_range(5..b.len());
                    b[at] = rng.gen();
                }
            }
            let full = d.decode_avro(&b);
            // The one-field walk agrees with the full decode on what is bad input, and on
            // the value when both read it.
            let walked = d.decode_long_field(&b, "total_minor");
            match (&full, &walked) {
                (Ok((_, _, Value::Record(fields))), Ok((_, _, total))) => {
                    let expected = fields.iter().find_map(|(n, v)| match v {
                        Value::Long(l) if n == "total_minor" => Some(*l),
                        _ => None,
                    });
                    assert_eq!(*total, expected, "{b:?}");
                }
                (Ok(_), Ok(_)) | (Err(DecodeError::Bad(_)), Err(DecodeError::Bad(_))) => {}
                (f, w) => panic!("full decode {f:?} but one-field walk {w:?} for {b:?}"),
            }
            match full {
                Ok(_) => ok += 1,
                Err(DecodeError::Bad(_)) => bad += 1,
                Err(e @ DecodeError::Unavailable(_)) => panic!("{e} from a fixed source"),
            }
        }
        eprintln!(
            "{iterations} randomized decodes in {:?}: {ok} decoded, {bad} bad input",
            started.elapsed()
        );
        assert_eq!(ok + bad, iterations as u64);
        assert!(bad > iterations as u64 / 2);
    }
}
