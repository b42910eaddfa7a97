//! The Avro serde: any `serde` type as Avro in the Confluent wire format (magic byte, schema
//! id, body), written with one registered schema and read with whichever schema id the bytes
//! name, fetched from the registry (or a fixed set) once and cached.
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

use apache_avro::Schema;

use super::decode::{wire_header, RegistrySource, SchemaSource, SourceError};
use super::registry::{CodecError, Registry};
use crate::serdes::{Serde, SerdeError};

/// Avro through a schema registry, for topology sources, sinks and stores.
pub struct AvroSerde<T> {
    id: u32,
    schema: Schema,
    source: Mutex<Box<dyn SchemaSource>>,
    readers: Mutex<HashMap<u32, Arc<Schema>>>,
    _t: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for AvroSerde<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroSerde").field("id", &self.id).finish()
    }
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
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| failed(format!("runtime: {e}")))?;
        let id = rt.block_on(registry.register(subject, schema))?;
        let source =
            RegistrySource::new(registry.clone()).map_err(|e| failed(format!("runtime: {e}")))?;
        Self::new(id, schema, source).map_err(|e| failed(e.to_string()))
    }

    /// The schema id outputs are written with.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The writer schema of `id`: this serde's own, a cached one, or one fetched now.
    fn writer(&self, id: u32) -> Result<Arc<Schema>, SerdeError> {
        if let Some(s) = self.readers.lock().ok().and_then(|r| r.get(&id).cloned()) {
            return Ok(s);
        }
        let text = {
            let mut source = self
                .source
                .lock()
                .map_err(|_| SerdeError::new("schema source poisoned"))?;
            source.schema(id).map_err(|e| match e {
                SourceError::NotFound(m) => SerdeError::new(format!("schema {id} not found: {m}")),
                SourceError::Unavailable(m) => {
                    SerdeError::new(format!("schema {id} unavailable: {m}"))
                }
            })?
        };
        let schema = Arc::new(
            Schema::parse_str(&text).map_err(|e| SerdeError::new(format!("schema {id}: {e}")))?,
        );
        if let Ok(mut r) = self.readers.lock() {
            r.insert(id, schema.clone());
        }
        Ok(schema)
    }
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
        let (id, mut body) = wire_header(bytes).map_err(SerdeError::new)?;
        let writer = self.writer(id)?;
        // The datum reader that replaces it borrows its schemas for 'static; cached writer
        // schemas here are shared (Arc), so the one-datum function stays.
        #[allow(deprecated)]
        let value = apache_avro::from_avro_datum(&writer, &mut body, Some(&self.schema))
            .map_err(|e| SerdeError::new(format!("Avro of schema {id}: {e}")))?;
        apache_avro::from_value::<T>(&value).map_err(|e| {
            SerdeError::new(format!(
                "schema {id} does not fit {}: {e}",
                std::any::type_name::<T>()
            ))
        })
    }
}
