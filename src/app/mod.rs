//! Topologies that ship with eosflow: the counting topology used by the verifier and the
//! benchmarks, and the reference orders application (`orders`) with its demo.

pub mod count;
pub mod demo;
pub mod orders;
