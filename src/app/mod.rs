//! Topologies that ship with eosflow: the counting topology used by the smoke pipeline, the
//! exactly-once verifier and the benchmarks (the orders application joins it later).

pub mod count;
