//! Serdes: how typed keys and values become the bytes of topics and stores, and back.
//!
//! A [`Serde<T>`] is what Kafka Streams calls a `Serde`: one object that serializes and
//! deserializes `T`. Sources, sinks and stores of a [`crate::topology::Topology`] each carry
//! one for their keys and one for their values. eosflow ships [`BytesSerde`], [`StringSerde`],
//! [`I64Serde`] and [`JsonSerde`]; the Avro serde through the schema registry is
//! [`AvroSerde`] (its schemas come from a [`Registry`] or a [`FixedSource`]); a store's Avro
//! values evolve with a [`StoreSchema`] ([`AvroSerde::for_store`], docs/state-evolution.md). A
//! user-defined serde implements the trait.
//!
//! Stores order their keys by the serialized bytes: a serde whose bytes sort like its values
//! ([`StringSerde`], [`BytesSerde`], [`I64Serde`] for non-negative numbers) makes `range` and
//! `prefix` scans follow the natural order.
//!
//! ```
//! use eosflow::serdes::{JsonSerde, Serde, StringSerde};
//!
//! let key = StringSerde.serialize(&"key-1".to_string()).unwrap();
//! assert_eq!(key, b"key-1");
//! let json = JsonSerde::<Vec<u32>>::new();
//! let bytes = json.serialize(&vec![1, 2]).unwrap();
//! assert_eq!(json.deserialize(&bytes).unwrap(), vec![1, 2]);
//! ```

use std::marker::PhantomData;
use std::sync::Arc;

pub use crate::codec::avro_serde::{AvroSerde, StoreValueError};
pub use crate::codec::decode::{FixedSource, RegistrySource, SchemaSource, SourceError};
pub use crate::codec::registry::{CodecError, Registry};
pub use crate::codec::store_schema::{StoreSchema, StoreSchemaError};

/// Why bytes could not become a value or a value bytes: names what was expected. Almost
/// always for good ([`SerdeError::new`]: the bytes or the schema are wrong, and reading them
/// again fails the same way); [`SerdeError::transient`] when what the serde needed was out of
/// reach for a while (a schema registry that could not be asked), so a store read that fails
/// with it retries the record instead of dead-lettering it.
///
/// ```
/// use eosflow::serdes::SerdeError;
///
/// assert!(!SerdeError::new("not JSON").is_transient());
/// let down = SerdeError::transient("registry unreachable");
/// assert!(down.is_transient());
/// assert_eq!(down.to_string(), "serde: registry unreachable");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("serde: {0}")]
pub struct SerdeError(
    /// What went wrong.
    pub String,
    /// Whether trying again later may succeed.
    bool,
);

impl SerdeError {
    /// A serde failure with `message` that trying again cannot fix.
    pub fn new(message: impl std::fmt::Display) -> Self {
        Self(message.to_string(), false)
    }

    /// A serde failure with `message` that trying again later may fix: something the serde
    /// asks (a schema registry) could not be reached.
    pub fn transient(message: impl std::fmt::Display) -> Self {
        Self(message.to_string(), true)
    }

    /// Whether trying again later may succeed (see [`SerdeError::transient`]).
    pub fn is_transient(&self) -> bool {
        self.1
    }
}

/// Converts `T` to and from bytes. Implement it for a format eosflow does not ship; it must be
/// `Send + Sync` because one serde serves every partition of a topology.
pub trait Serde<T>: Send + Sync {
    /// The bytes of `value`.
    fn serialize(&self, value: &T) -> Result<Vec<u8>, SerdeError>;
    /// The value of `bytes`.
    fn deserialize(&self, bytes: &[u8]) -> Result<T, SerdeError>;
}

/// Raw bytes, unchanged: for keys and values the processor parses itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct BytesSerde;

impl Serde<Vec<u8>> for BytesSerde {
    fn serialize(&self, value: &Vec<u8>) -> Result<Vec<u8>, SerdeError> {
        Ok(value.clone())
    }
    fn deserialize(&self, bytes: &[u8]) -> Result<Vec<u8>, SerdeError> {
        Ok(bytes.to_vec())
    }
}

/// UTF-8 text; bytes that are not UTF-8 fail to deserialize.
#[derive(Debug, Clone, Copy, Default)]
pub struct StringSerde;

impl Serde<String> for StringSerde {
    fn serialize(&self, value: &String) -> Result<Vec<u8>, SerdeError> {
        Ok(value.as_bytes().to_vec())
    }
    fn deserialize(&self, bytes: &[u8]) -> Result<String, SerdeError> {
        String::from_utf8(bytes.to_vec()).map_err(|e| SerdeError::new(format!("not UTF-8: {e}")))
    }
}

/// A 64-bit integer as 8 big-endian bytes (Kafka's `LongSerializer`): non-negative numbers
/// sort in numeric order, so store scans over them are numeric ranges.
#[derive(Debug, Clone, Copy, Default)]
pub struct I64Serde;

impl Serde<i64> for I64Serde {
    fn serialize(&self, value: &i64) -> Result<Vec<u8>, SerdeError> {
        Ok(value.to_be_bytes().to_vec())
    }
    fn deserialize(&self, bytes: &[u8]) -> Result<i64, SerdeError> {
        let b: [u8; 8] = bytes
            .try_into()
            .map_err(|_| SerdeError::new(format!("a long is 8 bytes, got {}", bytes.len())))?;
        Ok(i64::from_be_bytes(b))
    }
}

/// Any `serde` type as JSON text.
pub struct JsonSerde<T>(PhantomData<fn() -> T>);

impl<T> JsonSerde<T> {
    /// The JSON serde of `T`.
    pub fn new() -> Self {
        Self(PhantomData)
    }
}

impl<T> Default for JsonSerde<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for JsonSerde<T> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for JsonSerde<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JsonSerde<{}>", std::any::type_name::<T>())
    }
}

impl<T: serde::Serialize + serde::de::DeserializeOwned> Serde<T> for JsonSerde<T> {
    fn serialize(&self, value: &T) -> Result<Vec<u8>, SerdeError> {
        serde_json::to_vec(value).map_err(SerdeError::new)
    }
    fn deserialize(&self, bytes: &[u8]) -> Result<T, SerdeError> {
        serde_json::from_slice(bytes).map_err(|e| {
            SerdeError::new(format!("not JSON of {}: {e}", std::any::type_name::<T>()))
        })
    }
}

/// Keeps a shared serde usable where an owned one is asked for.
impl<T, S: Serde<T> + ?Sized> Serde<T> for Arc<S> {
    fn serialize(&self, value: &T) -> Result<Vec<u8>, SerdeError> {
        (**self).serialize(value)
    }
    fn deserialize(&self, bytes: &[u8]) -> Result<T, SerdeError> {
        (**self).deserialize(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_serde_round_trips_and_rejects_what_it_cannot_read() {
        assert_eq!(BytesSerde.deserialize(b"\x00\xff").unwrap(), vec![0, 255]);
        assert!(StringSerde.deserialize(b"\xff").is_err());
        let b = I64Serde.serialize(&258).unwrap();
        assert_eq!(b, vec![0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(I64Serde.deserialize(&b).unwrap(), 258);
        assert!(I64Serde.deserialize(b"short").is_err());
        assert!(I64Serde.serialize(&2).unwrap() < I64Serde.serialize(&10).unwrap());
        let j = JsonSerde::<(String, u8)>::new();
        assert_eq!(j.deserialize(b"[\"a\",1]").unwrap(), ("a".to_string(), 1));
        assert!(j.deserialize(b"{").unwrap_err().0.contains("not JSON"));
    }
}
