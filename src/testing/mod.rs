//! Testing without a broker: [`TopologyTestDriver`] runs a topology (or any processor)
//! in-process through the runtime's own per-record engine — dedup, the retry ladder, dead
//! letters, parked keys, stores — over RocksDB in a temporary directory, with a clock that moves
//! only when the test says. Kafka Streams users know it as `TopologyTestDriver`.

mod crashes;
mod driver;
mod memory;
mod records;
mod topics;
#[cfg(test)]
mod topics_tests;

pub use crate::retry::dlt::DltClass;
pub use crashes::{CrashPoint, CrashStep, CrashSummary, CrashTest, CrashTestError, Divergence};
pub use driver::{DriverError, KeyValues, TopologyTestDriver, START_MS};
pub use records::{OutputRecord, TestRecord};
pub use topics::{
    DeadLetter, KeyValue, KeyValueStoreView, TestInputTopic, TestOutput, TestOutputTopic,
    WindowStoreView,
};

/// Fails unless `page` (a docs page, `page_path` in messages) has at least `at_least` Rust
/// blocks and each is in `source` (`source_path`) word for word: a page whose examples are
/// excerpts of tests cannot drift from the code. Shared by the DSL's and the driver's pages.
#[cfg(test)]
pub(crate) fn assert_rust_blocks_are_in(
    page_path: &str,
    page: &str,
    source_path: &str,
    source: &str,
    at_least: usize,
) {
    let blocks: Vec<&str> = page
        .split("```rust\n")
        .skip(1)
        .filter_map(|b| b.split("\n```").next())
        .collect();
    assert!(
        blocks.len() >= at_least,
        "{page_path} has {} Rust blocks",
        blocks.len()
    );
    for block in blocks {
        assert!(
            source.contains(block),
            "a Rust block of {page_path} is not in {source_path}:\n{block}"
        );
    }
}
