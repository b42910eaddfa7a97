//! Contracts on the wire: the schema catalog an application registers its event types in, the
//! compatibility rule its schemas are checked with, the upcasters that bring older versions up
//! to date, and the [`Decoder`] that turns a record into a typed [`Event`] — with every kind of
//! bad input a permanent failure naming its reason, so it goes to the dead-letter topic at once.
//!
//! The schema registry and the schema sources a decoder reads writer schemas from are in
//! [`crate::serdes`] ([`crate::serdes::Registry`], [`crate::serdes::RegistrySource`],
//! [`crate::serdes::FixedSource`]).
//!
//! ```
//! use eosflow::contracts::{check, Catalog, Rule};
//!
//! let v1 = r#"{"type":"record","name":"ThingCreated","namespace":"things",
//!              "fields":[{"name":"id","type":"string"}]}"#;
//! let v2 = r#"{"type":"record","name":"ThingCreated","namespace":"things",
//!              "fields":[{"name":"id","type":"string"},
//!                        {"name":"tag","type":["null","string"],"default":null}]}"#;
//! let catalog = Catalog::from_texts([
//!     ("things/thing-created.v1.avsc", v1),
//!     ("things/thing-created.v2.avsc", v2),
//! ])?;
//! assert_eq!(catalog.len(), 2);
//! assert!(check(Rule::Backward, v2, v1)?.is_empty(), "a new optional field is backward compatible");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// The contracts an application knows (its event types and versions) and why loading them
/// failed: a decoder accepts only the types in its catalog.
pub use crate::codec::catalog::{Catalog, CatalogError, Contract, SubjectStrategy};
/// Schema compatibility (Confluent's rules), checked field by field so a failure names the
/// field and the reason: what a test of an application's schemas asserts.
pub use crate::codec::compat::{check, CompatError, Incompatibility, Rule};
/// Decoding a record into a typed event, and what the decoder accepts and why it refuses.
pub use crate::codec::decode::{
    BadInput, DecodeError, Decoder, Event, Limits, Payload, UpcastFn, Upcasters,
};
