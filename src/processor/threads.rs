//! Processing threads (`processor.threads`, Kafka Streams' `num.stream.threads`): one
//! instance runs N exactly-once loops.
//!
//! Each thread is a whole [`Runtime`]: its own group consumer (a member of the group, so the
//! group's assignor spreads the partition indexes over the threads like over instances), its
//! own transactional producer (`transactional.id` `<app>-<instance>-t<i>`, KIP-447) and its own
//! commit loop. A slow or failing batch on one thread holds only that thread's partitions.
//! What an instance has once is shared: the state directory and RocksDB block cache, the
//! global tables (bootstrapped once, read by every thread), the standby tailer (placement
//! counts the instance once: its threads share one `client.id`), the DLT depth gauges and the
//! health endpoints (alive and ready only when every thread is).
//!
//! **Hand-over inside the instance.** A partition that moves from one thread to another keeps
//! its local stores: both open `<state dir>/<changelog>-<p>`. One RocksDB store cannot be open
//! twice, and the thread losing the partition closes it right after the poll that revoked it,
//! which may be a moment after the gaining thread was assigned it: `Leases` makes the
//! gaining thread wait for that close.
//!
//! If one thread stops with an error, the instance's shutdown flag is set so the others stop
//! (their open batches commit) and the instance reports the error: an instance half running would hold its partitions without
//! processing some of them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::runtime::{RunSummary, Runtime, RuntimeError};
use super::Application;
use crate::config::Config;
use crate::telemetry::Health;

/// Which processing thread of this instance has each partition's stores open.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    held: Mutex<BTreeMap<i32, usize>>,
    freed: Condvar,
}

impl Leases {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<i32, usize>> {
        // The map is consistent after any panic (inserts and removes only).
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes partition `p` for `thread`, waiting up to `timeout` for another thread that
    /// still has its stores open.
    pub(crate) fn acquire(
        &self,
        p: i32,
        thread: usize,
        timeout: Duration,
    ) -> Result<(), RuntimeError> {
        let deadline = Instant::now() + timeout;
        let mut held = self.lock();
        loop {
            match held.get(&p) {
                None => {
                    held.insert(p, thread);
                    return Ok(());
                }
                Some(t) if *t == thread => return Ok(()),
                Some(other) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(RuntimeError::Config(format!(
                            "partition {p} was assigned to processing thread {thread}, but thread {other} of this instance has not closed its stores within {} ms (processor.restore_timeout_ms)",
                            timeout.as_millis()
                        )));
                    }
                    held = self
                        .freed
                        .wait_timeout(held, left)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
            }
        }
    }

    /// `thread` closed `partitions`' stores.
    pub(crate) fn release(&self, partitions: &[i32], thread: usize) {
        let mut held = self.lock();
        for p in partitions {
            if held.get(p) == Some(&thread) {
                held.remove(p);
            }
        }
        drop(held);
        self.freed.notify_all();
    }
}

/// An instance's processing threads, built and ready to run.
pub struct ProcessorThreads<P: Application> {
    runtimes: Vec<Runtime<P>>,
    health: Arc<Health>,
    /// The instance's queryable state, shared by the threads' task managers.
    local: Arc<crate::query::LocalStores>,
}

impl<P: Application + 'static> ProcessorThreads<P> {
    /// Connects `config.processor.threads` loops, each with the processor `make` builds for it
    /// (processors keep per-call state, so threads do not share one).
    ///
    /// ```no_run
    /// use eosflow::internals::processor::ProcessorThreads;
    /// # use eosflow::processor::{Context, ProcessError, Processor, Record};
    /// # struct Echo;
    /// # impl Processor for Echo {
    /// #     fn process(&mut self, _: &mut Context<'_>, _: &Record<'_>) -> Result<(), ProcessError> { Ok(()) }
    /// # }
    /// let config = eosflow::config::Config::load(None)?;
    /// let threads = ProcessorThreads::new(&config, |_thread| Ok::<_, std::convert::Infallible>(Echo))?;
    /// let summary = threads.run(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new<F, E>(config: &Config, mut make: F) -> Result<Self, RuntimeError>
    where
        F: FnMut(usize) -> Result<P, E>,
        E: std::fmt::Display,
    {
        let n = config.processor.threads.max(1) as usize;
        let leases = (n > 1).then(|| Arc::new(Leases::default()));
        let local = crate::query::LocalStores::new();
        let stuck_after = Duration::from_millis(config.processor.stuck_after_ms);
        let mut runtimes: Vec<Runtime<P>> = Vec::with_capacity(n);
        let mut parts = Vec::with_capacity(n);
        for i in 0..n {
            let processor = make(i).map_err(|e| {
                RuntimeError::Config(format!("building the processor of thread {i}: {e}"))
            })?;
            let mut rt = Runtime::new_member(config, processor, i)?;
            if let Some(first) = runtimes.first() {
                rt.set_cache(first.cache().clone());
            }
            rt.set_leases(leases.clone());
            rt.set_local_stores(local.clone());
            let health = Arc::new(Health::new(stuck_after));
            parts.push(health.clone());
            runtimes.push(rt.with_health(health));
        }
        let health = if n == 1 {
            parts.remove(0)
        } else {
            Arc::new(Health::of_parts(parts))
        };
        if n > 1 {
            tracing::info!(threads = n, "processing threads");
        }
        Ok(Self {
            runtimes,
            health,
            local,
        })
    }

    /// The instance's queryable state: every thread's open tasks (see [`crate::query`]).
    pub(crate) fn local_stores(&self) -> Arc<crate::query::LocalStores> {
        self.local.clone()
    }

    /// What `/healthz` and `/readyz` answer: every thread alive, every thread ready.
    pub fn health(&self) -> Arc<Health> {
        self.health.clone()
    }

    /// Runs every thread until `shutdown` is set or one of them fails (then the others are
    /// stopped and that error is returned); the counters are summed over the threads.
    pub fn run(self, shutdown: Arc<AtomicBool>) -> Result<RunSummary, RuntimeError> {
        let Self { mut runtimes, .. } = self;
        if runtimes.len() == 1 {
            return match runtimes.pop() {
                Some(rt) => rt.run(shutdown),
                None => Ok(RunSummary::default()),
            };
        }
        let services = runtimes[0].start_services()?;
        for rt in &mut runtimes {
            rt.join_services(&services)?;
        }
        let mut workers = Vec::with_capacity(runtimes.len());
        for (i, rt) in runtimes.into_iter().enumerate() {
            let flag = shutdown.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("eos-loop-{i}"))
                .spawn(move || {
                    let result = rt.run_member(&flag);
                    if result.is_err() {
                        // The others commit their open batches and leave: the instance stops.
                        flag.store(true, Ordering::Relaxed);
                    }
                    result
                });
            match spawned {
                Ok(w) => workers.push(w),
                Err(e) => {
                    shutdown.store(true, Ordering::Relaxed);
                    tracing::error!(error = %e, thread = i, "spawning a processing thread");
                }
            }
        }
        let mut summary = RunSummary::default();
        let mut first_error = None;
        for (i, w) in workers.into_iter().enumerate() {
            match w.join() {
                Ok(Ok(s)) => summary.absorb(s),
                Ok(Err(e)) => {
                    tracing::error!(thread = i, error = %e, "processing thread stopped");
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert(RuntimeError::Config(format!(
                        "processing thread {i} panicked"
                    )));
                }
            }
        }
        drop(services);
        match first_error {
            Some(e) => Err(e),
            None => Ok(summary),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_moving_between_threads_waits_for_the_old_owner_to_close_it() {
        let leases = Arc::new(Leases::default());
        leases
            .acquire(3, 0, Duration::from_secs(1))
            .expect("free partition");
        let l = leases.clone();
        let waiter = std::thread::spawn(move || {
            l.acquire(3, 1, Duration::from_secs(10))
                .map(|_| Instant::now())
        });
        std::thread::sleep(Duration::from_millis(100));
        // The old owner closes it: only from now on may the new one have it. (Compared by
        // instants, not by how long the waiter waited: a CI run measured 89 ms of a 100 ms
        // sleep from a thread that started late.)
        let released = Instant::now();
        leases.release(&[3], 0);
        let acquired = waiter
            .join()
            .expect("join")
            .expect("acquired after release");
        assert!(
            acquired >= released,
            "acquired before the old owner released it"
        );
        // Thread 0 releasing again (a late close) does not free thread 1's partition.
        leases.release(&[3], 0);
        let err = leases
            .acquire(3, 2, Duration::from_millis(50))
            .expect_err("still held by thread 1");
        assert!(err.to_string().contains("thread 1"), "{err}");
    }
}
