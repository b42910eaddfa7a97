//! The `slow-handler` scenario's fault: the counting topology, except that the first call on
//! every n-th record (once in the run) sleeps past the transaction timeout, as a handler waiting on
//! a slow dependency does. The coordinator aborts the transaction the call kept open and bumps
//! the producer's epoch; the instance must recover in place and the output stay exact.
//!
//! Switched on only by the verifier, through two environment variables of the instances it
//! starts: [`EVERY_ENV`] and [`SLEEP_ENV`] (outside the `EOSFLOW_` namespace, which the
//! configuration loader owns and checks).

use std::collections::HashSet;
use std::time::Duration;

use eosflow::processor::{Application, Context, ProcessError, Record, Timer};

/// Every n-th record of the workload (by the number in its `r<i>` id) is slow once.
pub const EVERY_ENV: &str = "FAULT_SLOW_HANDLER_EVERY";
/// How long its first call sleeps, in ms.
pub const SLEEP_ENV: &str = "FAULT_SLOW_HANDLER_MS";
/// A directory shared by the run's processes: a record is slow once in the whole run (a marker
/// file per record), not once per process — a restarted instance must not sleep on it again.
pub const MARKS_ENV: &str = "FAULT_SLOW_HANDLER_MARKS";

/// A processor whose first call on every n-th record sleeps.
#[derive(Debug)]
pub struct SlowSometimes<P> {
    inner: P,
    every: u64,
    sleep: Duration,
    slept: HashSet<Vec<u8>>,
    marks: Option<std::path::PathBuf>,
}

/// The fault's settings from the environment: `(every, sleep)` when both variables are set
/// and `every` > 0.
pub fn settings_from_env() -> Option<(u64, Duration)> {
    let read = |name: &str| std::env::var(name).ok()?.parse::<u64>().ok();
    let every = read(EVERY_ENV).filter(|e| *e > 0)?;
    Some((every, Duration::from_millis(read(SLEEP_ENV)?)))
}

impl<P> SlowSometimes<P> {
    /// Wraps `inner`: the first call on every `every`-th record sleeps `sleep`.
    pub fn new(inner: P, every: u64, sleep: Duration) -> Self {
        Self {
            inner,
            every,
            sleep,
            slept: HashSet::new(),
            marks: std::env::var_os(MARKS_ENV).map(std::path::PathBuf::from),
        }
    }

    /// Whether this is the first call on `id` (in the run when marks are shared, else in this
    /// process).
    fn first_call(&mut self, id: &[u8]) -> bool {
        if !self.slept.insert(id.to_vec()) {
            return false;
        }
        let Some(dir) = &self.marks else { return true };
        let name: String = String::from_utf8_lossy(id)
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect();
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(name))
            .is_ok()
    }

    fn is_slow(&self, id: &[u8]) -> bool {
        std::str::from_utf8(id)
            .ok()
            .and_then(|s| s.strip_prefix('r'))
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n > 0 && n % self.every == 0)
    }
}

// Everything but `process` goes to the wrapped application as it is: a wrapper that kept a
// default would silently drop the inner one's timers, stores, tables, repartition topics or
// sub-topologies.
impl<P: Application> Application for SlowSometimes<P> {
    fn process(&mut self, ctx: &mut Context<'_>, record: &Record<'_>) -> Result<(), ProcessError> {
        if let Some(id) = record.header("id") {
            if self.is_slow(id) && self.first_call(id) {
                tracing::info!(id = %String::from_utf8_lossy(id), millis = self.sleep.as_millis() as u64, "fault: slow handler call");
                std::thread::sleep(self.sleep);
            }
        }
        self.inner.process(ctx, record)
    }
    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        self.inner.on_timer(ctx, timer)
    }
    fn close(&mut self) {
        self.inner.close()
    }
    fn message_id(&self, record: &Record<'_>) -> Option<Vec<u8>> {
        self.inner.message_id(record)
    }
    fn ordered(&self) -> bool {
        self.inner.ordered()
    }
    fn store_name(&self) -> &str {
        self.inner.store_name()
    }
    fn event_time(&self, record: &Record<'_>) -> Option<i64> {
        self.inner.event_time(record)
    }
    fn checked_event_time(
        &self,
        record: &Record<'_>,
    ) -> Result<Option<i64>, eosflow::topology::time::BadEventTime> {
        self.inner.checked_event_time(record)
    }
    fn stores(&self) -> Vec<String> {
        self.inner.stores()
    }
    fn tables(&self) -> Vec<(String, String)> {
        self.inner.tables()
    }
    fn versioned_tables(&self) -> Vec<(String, std::time::Duration)> {
        self.inner.versioned_tables()
    }
    fn global_tables(&self) -> Vec<eosflow::topology::GlobalTable> {
        self.inner.global_tables()
    }
    fn input_topics(&self) -> Option<Vec<String>> {
        self.inner.input_topics()
    }
    fn bind_application(&mut self, app_id: &str) {
        self.inner.bind_application(app_id)
    }
    fn repartition_topics(&self) -> Vec<String> {
        self.inner.repartition_topics()
    }
    fn sub_topology_count(&self) -> usize {
        self.inner.sub_topology_count()
    }
    fn sub_topology(&self, topic: &str) -> usize {
        self.inner.sub_topology(topic)
    }
    fn repartition_writer(&self, topic: &str) -> Option<usize> {
        self.inner.repartition_writer(topic)
    }
}
