//! Testing without a broker: [`TopologyTestDriver`] runs a topology (or any processor)
//! in-process through the runtime's own per-record engine — dedup, the retry ladder, dead
//! letters, parked keys, stores — over RocksDB in a temporary directory, with a clock that moves
//! only when the test says. Kafka Streams users know it as `TopologyTestDriver`.

mod driver;
#[cfg(test)]
mod global_join_tests;
#[cfg(test)]
mod join_tests;
mod memory;
mod records;
#[cfg(test)]
mod repartition_tests;
#[cfg(test)]
mod stream_join_tests;
#[cfg(test)]
mod timer_tests;
#[cfg(test)]
mod window_tests;

pub use driver::{DriverError, KeyValues, TopologyTestDriver, START_MS};
pub use records::{OutputRecord, TestRecord};
