//! Topologies that ship with eosflow: the counting topology used by the smoke pipeline, the
//! exactly-once verifier and the benchmarks, and the orders lifecycle (the fault suite's
//! poison target).

pub mod count;
pub mod orders;
