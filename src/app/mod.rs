//! Topologies that ship with eosflow: the counting topology used by the verifier and the
//! benchmarks, the reference orders application (`orders`) with its demo, and the order
//! lifecycle (`order-lifecycle`, the fault suite's poison target).

pub mod count;
pub mod demo;
pub mod lifecycle;
pub mod orders;
