//! Exactly-once projections into Postgres: the consumer loop ([`Projector`]) over the
//! database half ([`eosflow_projection`]). The page below is `docs/projections.md`.
#![doc = include_str!("../../docs/projections.md")]

mod projector;

pub use eosflow_projection::{
    DeadLetter, ProjectionError, ProjectionStore, RowOp, StoreOptions, Value,
};
pub use projector::{
    Projected, Projector, ProjectorError, ProjectorHandle, ProjectorOptions, ProjectorSummary,
};
