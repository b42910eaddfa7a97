//! Contracts on the wire: the Confluent-compatible schema registry and Avro in its wire format
//! (magic byte 0, 4-byte schema id, Avro body), through schema_registry_converter; the schema
//! catalog (`schemas/`), envelope headers, the compatibility rule, upcasting, and the decoder
//! that turns bad input into permanent failures.

pub mod avro_serde;
pub mod catalog;
pub mod check;
pub mod compat;
pub mod config;
pub mod decode;
pub mod envelope;
pub mod project;
pub mod registry;
pub mod store_schema;

pub use catalog::{Catalog, Contract, SubjectStrategy};
pub use decode::{BadInput, Decoder, Event, Limits, Payload, Upcasters};
pub use envelope::Envelope;
pub use store_schema::StoreSchema;
