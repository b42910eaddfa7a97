//! Where records leave eosflow: the transactional producer that commits outputs, changelog
//! records, dead letters and input offsets as one unit.

pub mod bounded;
pub mod transactional;

pub use transactional::{is_record_error, SinkError, TxnSink, COMMIT_RETRY_FOR};
