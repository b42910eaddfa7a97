//! The wall clock, read in one place (public so an application reads the same clock as the
//! runtime, e.g. for a deadline it stores): milliseconds since the Unix epoch, the unit of Kafka
//! timestamps, retry due times, store checkpoints and health beats.
//!
//! Event time and stream time are not read here: they come from records (see
//! [`crate::topology::TopologyBuilder::timestamp_extractor`]).

/// Now, in milliseconds since the Unix epoch (0 for a clock set before 1970).
///
/// ```
/// let a = eosflow::clock::now_ms();
/// assert!(a > 1_600_000_000_000, "after September 2020");
/// assert!(eosflow::clock::now_ms() >= a);
/// ```
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}
