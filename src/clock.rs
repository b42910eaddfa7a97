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

/// The clock an owner of the loop reads (the clock seam, issue 50): the system's in
/// production, a [`ManualClock`] under simulation, where time moves only when the simulator
/// (or a wait) moves it, so a test of a backoff or a timeout takes no real time and gives the
/// same answer every run.
pub trait Clock: Send + Sync {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Now, on the monotonic clock deadlines and backoffs are measured on.
    fn instant(&self) -> std::time::Instant;
    /// Waits `d` (a manual clock just moves on by `d`).
    fn sleep(&self, d: std::time::Duration);
}

/// The system's clocks: [`now_ms`], [`std::time::Instant::now`] and a thread sleep.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        now_ms()
    }
    fn instant(&self) -> std::time::Instant {
        std::time::Instant::now()
    }
    fn sleep(&self, d: std::time::Duration) {
        std::thread::sleep(d);
    }
}

/// A clock that moves only when told to (or when something sleeps on it): virtual time for
/// deterministic tests and the simulator. Clones share one time.
///
/// ```
/// use std::time::Duration;
/// use eosflow::clock::{Clock, ManualClock};
///
/// let clock = ManualClock::new(1_700_000_000_000);
/// let start = clock.instant();
/// clock.sleep(Duration::from_secs(5)); // returns at once
/// assert_eq!(clock.instant() - start, Duration::from_secs(5));
/// assert_eq!(clock.now_ms(), 1_700_000_005_000);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    origin: std::time::Instant,
    origin_ms: i64,
    /// Nanoseconds since the origin.
    elapsed: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl ManualClock {
    /// A clock reading `start_ms` (milliseconds since the Unix epoch) until moved.
    pub fn new(start_ms: i64) -> Self {
        Self {
            origin: std::time::Instant::now(),
            origin_ms: start_ms,
            elapsed: Default::default(),
        }
    }

    /// Moves time on by `d`.
    pub fn advance(&self, d: std::time::Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.elapsed
            .fetch_add(nanos, std::sync::atomic::Ordering::SeqCst);
    }

    fn elapsed(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.elapsed.load(std::sync::atomic::Ordering::SeqCst))
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.origin_ms
            .saturating_add(i64::try_from(self.elapsed().as_millis()).unwrap_or(i64::MAX))
    }
    fn instant(&self) -> std::time::Instant {
        self.origin + self.elapsed()
    }
    fn sleep(&self, d: std::time::Duration) {
        self.advance(d);
    }
}
