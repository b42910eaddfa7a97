//! Contracts on the wire: the Confluent-compatible schema registry and Avro in its wire format
//! (magic byte 0, 4-byte schema id, Avro body), through schema_registry_converter.

pub mod registry;
