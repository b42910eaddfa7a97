//! The Avro serde: any `serde` type as Avro in the Confluent wire format (magic byte, schema
//! id, body), written with one registered schema and read with whichever schema id the bytes
//! name, fetched from the registry (or a fixed set) once and cached.
//!
//! A store's values use it too ([`AvroSerde::for_store`], docs/state-evolution.md): the value
//! schema is registered under the store's changelog subject, and values written with an older
//! schema are read by Avro resolution or through the application's upcasters
//! ([`super::store_schema::StoreSchema`]).
//!
//! ```
//! use std::collections::HashMap;
//! use eosflow::internals::codec::avro_serde::AvroSerde;
//! use eosflow::internals::codec::decode::FixedSource;
//! use eosflow::serdes::Serde;
//!
//! #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq, Clone)]
//! struct Total { key: String, total: i64 }
//!
//! let schema = r#"{"type":"record","name":"Total","fields":[
//!     {"name":"key","type":"string"},{"name":"total","type":"long"}]}"#;
//! let source = FixedSource(HashMap::from([(7, schema.to_string())]));
//! let serde = AvroSerde::<Total>::new(7, schema, source)?;
//! let t = Total { key: "a".into(), total: 12 };
//! let bytes = serde.serialize(&t)?;
//! assert_eq!(&bytes[..5], &[0, 0, 0, 0, 7]);
//! assert_eq!(serde.deserialize(&bytes)?, t);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use apache_avro::types::Value;
use apache_avro::Schema;

use super::decode::{wire_header, RegistrySource, SchemaSource, SourceError};
use super::registry::{CodecError, Registry};
use super::store_schema::StoreSchema;
use crate::serdes::{Serde, SerdeError};

/// Avro through a schema registry, for topology sources, sinks and stores.
pub struct AvroSerde<T> {
    id: u32,
    schema: Schema,
    source: Mutex<Box<dyn SchemaSource>>,
    readers: Mutex<HashMap<u32, Arc<Read>>>,
    /// Set for a store's values: names the store in errors, knows its versions and upcasters.
    store: Option<Arc<StoreValues>>,
    _t: PhantomData<fn() -> T>,
}

/// How the values of one writer schema id are read.
enum Read {
    /// Avro resolution from the writer's schema into this serde's own.
    Resolve {
        writer: Arc<Schema>,
        /// The writer's store version, when it is one the store schema knows.
        version: Option<u32>,
    },
    /// Decoded as store version `version` (its own schema), then upcast to the current one.
    Upcast {
        writer: Arc<Schema>,
        own: Arc<Schema>,
        version: u32,
    },
}

/// A store serde's knowledge of its store.
struct StoreValues {
    schema: StoreSchema,
    /// Each known version's parsed schema, its JSON (for recognising a writer) and its Parsing
    /// Canonical Form (the fallback when the registry reformats the text).
    versions: Vec<(u32, Arc<Schema>, serde_json::Value, String)>,
    /// The changelog subject, when registered through a registry (for messages).
    subject: Option<String>,
}

/// Why a store's value could not be read: what becomes the record's dead-letter reason. Each
/// message starts with a stable code, names the store and the schema id, and says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreValueError {
    /// The bytes are not the wire format (a value written by another serde).
    #[error("store-value-not-avro: store {store}: the value is not Avro in the wire format ({error}); was the store written with another value serde? Reset the store or keep its old serde")]
    NotWireFormat {
        /// The store.
        store: String,
        /// What is wrong with the header.
        error: String,
    },
    /// The registry does not know the id.
    #[error("store-unknown-schema-id: store {store}: the value was written with schema id {id}, which the registry does not know ({detail}); re-register that schema under {subject} (it was deleted) or reset the store")]
    UnknownSchemaId {
        /// The store.
        store: String,
        /// The schema id.
        id: u32,
        /// The store's subject.
        subject: String,
        /// The registry's answer.
        detail: String,
    },
    /// The registry could not be asked (unreachable, timing out, answering 5xx): transient,
    /// the record is retried through its retry ladder.
    #[error("store-schema-unavailable: store {store}: schema id {id} could not be fetched ({detail}); the registry is unreachable: the record is retried, and dead-lettered only once its retry levels are used up (then redrive it once the registry is back)")]
    Unavailable {
        /// The store.
        store: String,
        /// The schema id.
        id: u32,
        /// Why.
        detail: String,
    },
    /// Resolution failed: the current schema cannot read the writer's.
    #[error("store-value-incompatible: store {store}: a value written with schema id {id} ({writer}) cannot be read as the store's current value schema {current}: {error}; make {current} backward compatible with it (`eosflow schemas check` names the field) or register an upcaster from {writer}")]
    Incompatible {
        /// The store.
        store: String,
        /// The schema id.
        id: u32,
        /// The writer's version type name, or its Avro name when the application does not know it.
        writer: String,
        /// The current version's type name.
        current: String,
        /// apache-avro's error.
        error: String,
    },
    /// An upcaster failed, or the chain did not reach the current version.
    #[error("store-upcast-failed: store {store}: the value of schema id {id} ({from}) could not be upcast to {current}: {error}; fix the upcaster chain from {from}")]
    Upcast {
        /// The store.
        store: String,
        /// The schema id.
        id: u32,
        /// The writer's version type name.
        from: String,
        /// The current version's type name.
        current: String,
        /// Why.
        error: String,
    },
}

impl StoreValueError {
    /// Whether reading the value again later may succeed: only when the registry could not be
    /// asked ([`StoreValueError::Unavailable`]: down, timing out, answering 5xx). Every other
    /// reason is in the bytes or the schemas and fails the same way each time.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }
}

impl From<StoreValueError> for SerdeError {
    /// Transient when the registry was out of reach, so a store read retries the record.
    fn from(e: StoreValueError) -> Self {
        if e.is_transient() {
            SerdeError::transient(e)
        } else {
            SerdeError::new(e)
        }
    }
}

impl<T> std::fmt::Debug for AvroSerde<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroSerde")
            .field("id", &self.id)
            .field("store", &self.store.as_ref().map(|s| s.schema.store()))
            .finish()
    }
}

/// A current-thread runtime for the blocking constructors (called while building a topology).
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

impl<T> AvroSerde<T> {
    /// Writes with `schema` under `id`; reads any id `source` knows.
    pub fn new(
        id: u32,
        schema: &str,
        source: impl SchemaSource + 'static,
    ) -> Result<Self, SerdeError> {
        let schema =
            Schema::parse_str(schema).map_err(|e| SerdeError::new(format!("schema {id}: {e}")))?;
        Ok(Self {
            id,
            schema,
            source: Mutex::new(Box::new(source)),
            readers: Mutex::new(HashMap::new()),
            store: None,
            _t: PhantomData,
        })
    }

    /// Registers `schema` under `subject` (blocking: call it while building the topology) and
    /// reads through `registry`.
    pub fn registered(registry: Registry, subject: &str, schema: &str) -> Result<Self, CodecError> {
        let failed = |error: String| CodecError::Registry {
            url: format!("{registry:?}"),
            error,
            retriable: true,
        };
        let rt = runtime().map_err(|e| failed(format!("runtime: {e}")))?;
        let id = rt.block_on(registry.register(subject, schema))?;
        let source =
            RegistrySource::new(registry.clone()).map_err(|e| failed(format!("runtime: {e}")))?;
        Self::new(id, schema, source).map_err(|e| failed(e.to_string()))
    }

    /// The value serde of a store whose values evolve (docs/state-evolution.md): registers
    /// `schema`'s current version under the store's changelog subject
    /// `<app_id>-<store>-changelog-value` (blocking: call it while building the topology),
    /// writes every value with that id, and reads a value of any id the registry knows —
    /// through the application's upcasters when the id is an older version with an upcaster
    /// chain, else by Avro resolution. Every schema registered under the subject (what the
    /// store may hold) is fetched now, so reading the store needs no registry call later; a
    /// version the current schema cannot read is named in a WARN here, and each of its values
    /// fails to read with a [`StoreValueError`] (the record's dead-letter reason).
    ///
    /// Why not opaque bytes (Kafka Streams) or a failing restore (Flink): the schema id in each
    /// value lets the state outlive the code that wrote it, and `eosflow schemas check`
    /// refuses a version that could not read what the store holds before it is deployed.
    ///
    /// ```no_run
    /// use eosflow::processor::StoreHandle;
    /// use eosflow::serdes::{AvroSerde, Registry, StoreSchema, StringSerde};
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Count { count: i64 }
    ///
    /// let v1 = r#"{"type":"record","name":"Count","fields":[{"name":"count","type":"long"}]}"#;
    /// let registry = Registry::new("http://127.0.0.1:18081/apis/ccompat/v7");
    /// let values = AvroSerde::<Count>::for_store(&registry, "shop", StoreSchema::new("counts", 1, v1)?)?;
    /// let counts = StoreHandle::new("counts", StringSerde, values);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_store(
        registry: &Registry,
        app_id: &str,
        schema: StoreSchema,
    ) -> Result<Self, CodecError> {
        let failed = |error: String| CodecError::Registry {
            url: format!("{registry:?}"),
            error,
            retriable: true,
        };
        let subject = StoreSchema::subject(app_id, schema.store());
        let rt = runtime().map_err(|e| failed(format!("runtime: {e}")))?;
        let id = rt.block_on(registry.register(&subject, schema.current_text()))?;
        let held = rt
            .block_on(registry.versions(&subject))?
            .unwrap_or_default();
        let source =
            RegistrySource::new(registry.clone()).map_err(|e| failed(format!("runtime: {e}")))?;
        let serde = Self::store_serde(id, schema, source, Some(subject.clone()))
            .map_err(|e| failed(e.to_string()))?;
        for v in held {
            serde.warm(v.id, &v.schema, &format!("{subject} version {}", v.version));
        }
        Ok(serde)
    }

    /// As [`Self::for_store`] without a registry: writes with schema id `id` and reads the ids
    /// `source` knows (a [`super::decode::FixedSource`] in tests and the test driver).
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use eosflow::serdes::{AvroSerde, FixedSource, Serde, StoreSchema};
    ///
    /// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    /// struct Count { count: i64, last_seen: i64 }
    ///
    /// let v1 = r#"{"type":"record","name":"Count","fields":[{"name":"count","type":"long"}]}"#;
    /// let v2 = r#"{"type":"record","name":"Count","fields":[{"name":"count","type":"long"},
    ///     {"name":"last_seen","type":"long","default":-1}]}"#;
    /// let source = FixedSource(HashMap::from([(1, v1.to_string()), (2, v2.to_string())]));
    /// let values = AvroSerde::<Count>::for_store_with(2, StoreSchema::new("counts", 2, v2)?, source)?;
    /// // A value the previous deploy wrote with schema id 1: magic byte, id, body (count = 3).
    /// let old = [0, 0, 0, 0, 1, 6];
    /// assert_eq!(values.deserialize(&old)?, Count { count: 3, last_seen: -1 });
    /// // An id nobody registered: an error naming the store and the id.
    /// let e = values.deserialize(&[0, 0, 0, 0, 9, 6]).unwrap_err();
    /// assert!(e.to_string().contains("store-unknown-schema-id: store counts: the value was written with schema id 9"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_store_with(
        id: u32,
        schema: StoreSchema,
        source: impl SchemaSource + 'static,
    ) -> Result<Self, SerdeError> {
        Self::store_serde(id, schema, source, None)
    }

    fn store_serde(
        id: u32,
        schema: StoreSchema,
        source: impl SchemaSource + 'static,
        subject: Option<String>,
    ) -> Result<Self, SerdeError> {
        let mut serde = Self::new(id, schema.current_text(), source)?;
        let mut versions = Vec::new();
        for (v, text) in schema.versions() {
            let parsed = Schema::parse_str(text)
                .map_err(|e| SerdeError::new(format!("store {} v{v}: {e}", schema.store())))?;
            let json: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| SerdeError::new(format!("store {} v{v}: {e}", schema.store())))?;
            let pcf = parsed.canonical_form();
            versions.push((v, Arc::new(parsed), json, pcf));
        }
        serde.store = Some(Arc::new(StoreValues {
            schema,
            versions,
            subject,
        }));
        Ok(serde)
    }

    /// Caches how values of `id` (schema `text`) are read, warning when they cannot be.
    fn warm(&self, id: u32, text: &str, what: &str) {
        let Some(store) = &self.store else { return };
        match self.plan(id, text) {
            Ok(read) => {
                if let Read::Resolve { version, .. } = &read {
                    let problems = super::compat::check(
                        super::compat::Rule::Backward,
                        store.schema.current_text(),
                        text,
                    )
                    .unwrap_or_default();
                    if id != self.id && !problems.is_empty() {
                        let writer =
                            version
                                .map(|v| store.schema.type_name(v))
                                .unwrap_or_else(|| {
                                    super::registry::record_name(text).unwrap_or_default()
                                });
                        let problems: Vec<String> =
                            problems.iter().map(ToString::to_string).collect();
                        tracing::warn!(
                            store = store.schema.store(),
                            schema_id = id,
                            "store {}: values written with schema id {id} ({what}, {writer}) cannot be read by the current value schema {}: {}; each is dead-lettered when read. Make the new schema backward compatible or register an upcaster from {writer} (`eosflow schemas check` names the fields)",
                            store.schema.store(),
                            store.schema.type_name(store.schema.current_version()),
                            problems.join("; ")
                        );
                    }
                }
                if let Ok(mut r) = self.readers.lock() {
                    r.insert(id, Arc::new(read));
                }
            }
            Err(e) => tracing::warn!("{e} ({what})"),
        }
    }

    /// The schema id outputs are written with.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The store's name, for a store serde.
    fn store_name(&self) -> String {
        self.store
            .as_ref()
            .map(|s| s.schema.store().to_string())
            .unwrap_or_default()
    }

    /// How values of writer schema `id`, whose text is `text`, are read.
    fn plan(&self, id: u32, text: &str) -> Result<Read, SerdeError> {
        let writer = Arc::new(Schema::parse_str(text).map_err(|e| match &self.store {
            Some(s) => SerdeError::from(StoreValueError::Incompatible {
                store: s.schema.store().to_string(),
                id,
                writer: "an invalid schema".into(),
                current: s.schema.type_name(s.schema.current_version()),
                error: e.to_string(),
            }),
            None => SerdeError::new(format!("schema {id}: {e}")),
        })?);
        let Some(store) = &self.store else {
            return Ok(Read::Resolve {
                writer,
                version: None,
            });
        };
        // The writer's version: the same JSON as a known version's text, else the same
        // Parsing Canonical Form (the newest such version).
        let json: Option<serde_json::Value> = serde_json::from_str(text).ok();
        let pcf = writer.canonical_form();
        let version = store
            .versions
            .iter()
            .rev()
            .find(|(_, _, j, _)| Some(j) == json.as_ref())
            .or_else(|| store.versions.iter().rev().find(|(_, _, _, p)| *p == pcf));
        let current = store.schema.current_version();
        Ok(match version {
            Some((v, own, _, _)) if *v != current && upcasts(&store.schema, *v) => Read::Upcast {
                writer,
                own: own.clone(),
                version: *v,
            },
            other => Read::Resolve {
                writer,
                version: other.map(|(v, ..)| *v),
            },
        })
    }

    /// How values of writer schema `id` are read: cached, or planned from the fetched schema.
    fn read_plan(&self, id: u32) -> Result<Arc<Read>, SerdeError> {
        if let Some(s) = self.readers.lock().ok().and_then(|r| r.get(&id).cloned()) {
            return Ok(s);
        }
        let text = {
            let mut source = self
                .source
                .lock()
                .map_err(|_| SerdeError::new("schema source poisoned"))?;
            source.schema(id).map_err(|e| match (&self.store, e) {
                (Some(s), SourceError::NotFound(detail)) => StoreValueError::UnknownSchemaId {
                    store: s.schema.store().to_string(),
                    id,
                    subject: s
                        .subject
                        .clone()
                        .unwrap_or_else(|| "the store's changelog subject".into()),
                    detail,
                }
                .into(),
                (Some(s), SourceError::Unavailable(detail)) => StoreValueError::Unavailable {
                    store: s.schema.store().to_string(),
                    id,
                    detail,
                }
                .into(),
                (None, SourceError::NotFound(m)) => {
                    SerdeError::new(format!("schema {id} not found: {m}"))
                }
                (None, SourceError::Unavailable(m)) => {
                    SerdeError::transient(format!("schema {id} unavailable: {m}"))
                }
            })?
        };
        let read = Arc::new(self.plan(id, &text)?);
        if let Ok(mut r) = self.readers.lock() {
            r.insert(id, read.clone());
        }
        Ok(read)
    }

    /// The value of `body`, written with schema `id`, in this serde's schema.
    fn read_value(&self, id: u32, mut body: &[u8]) -> Result<Value, SerdeError> {
        let plan = self.read_plan(id)?;
        let store = self.store.as_deref();
        let type_of = |v: Option<u32>, writer: &Schema| match (store, v) {
            (Some(s), Some(v)) => s.schema.type_name(v),
            _ => writer
                .name()
                .map(|n| n.fullname(None))
                .unwrap_or_else(|| "an unnamed schema".into()),
        };
        let incompatible = |version: Option<u32>, writer: &Schema, error: String| match store {
            Some(s) => SerdeError::from(StoreValueError::Incompatible {
                store: s.schema.store().to_string(),
                id,
                writer: type_of(version, writer),
                current: s.schema.type_name(s.schema.current_version()),
                error,
            }),
            None => SerdeError::new(format!("Avro of schema {id}: {error}")),
        };
        match &*plan {
            Read::Resolve { writer, version } => {
                // The datum reader that replaces it borrows its schemas for 'static; cached
                // writer schemas here are shared (Arc), so the one-datum function stays.
                #[allow(deprecated)]
                apache_avro::from_avro_datum(writer, &mut body, Some(&self.schema))
                    .map_err(|e| incompatible(*version, writer, e.to_string()))
            }
            Read::Upcast {
                writer,
                own,
                version,
            } => {
                let Some(s) = store else {
                    return Err(SerdeError::new("an upcast plan without a store"));
                };
                let from = s.schema.type_name(*version);
                let current = s.schema.type_name(s.schema.current_version());
                #[allow(deprecated)]
                let value = apache_avro::from_avro_datum(writer, &mut body, Some(own))
                    .map_err(|e| incompatible(Some(*version), writer, e.to_string()))?;
                let upcast = |error: String| StoreValueError::Upcast {
                    store: s.schema.store().to_string(),
                    id,
                    from: from.clone(),
                    current: current.clone(),
                    error,
                };
                let (reached, value) = s
                    .schema
                    .upcasters()
                    .apply(&from, value)
                    .map_err(|e| upcast(e.to_string()))?;
                if reached != current {
                    return Err(upcast(format!(
                        "the upcasters lead to {reached}, not to the current version"
                    ))
                    .into());
                }
                value
                    .resolve(&self.schema)
                    .map_err(|e| upcast(format!("the upcast value is not a {current}: {e}")).into())
            }
        }
    }
}

/// Whether `schema`'s upcasters have a chain starting at version `v`.
fn upcasts(schema: &StoreSchema, v: u32) -> bool {
    schema.upcasters().has(&schema.type_name(v))
}

impl<T> Serde<T> for AvroSerde<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    fn serialize(&self, value: &T) -> Result<Vec<u8>, SerdeError> {
        let v = apache_avro::to_value(value)
            .and_then(|v| v.resolve(&self.schema))
            .map_err(|e| SerdeError::new(format!("not Avro of schema {}: {e}", self.id)))?;
        super::decode::encode_wire(self.id, &self.schema, v)
            .map_err(|e| SerdeError::new(format!("encoding with schema {}: {e}", self.id)))
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<T, SerdeError> {
        let (id, body) = wire_header(bytes).map_err(|e| match &self.store {
            Some(_) => SerdeError::from(StoreValueError::NotWireFormat {
                store: self.store_name(),
                error: e.to_string(),
            }),
            None => SerdeError::new(e),
        })?;
        let value = self.read_value(id, body)?;
        apache_avro::from_value::<T>(&value).map_err(|e| {
            SerdeError::new(format!(
                "schema {id} does not fit {}: {e}",
                std::any::type_name::<T>()
            ))
        })
    }
}
