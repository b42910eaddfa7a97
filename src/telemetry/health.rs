//! Liveness and readiness, shared by the processing loop (which reports) and the HTTP
//! endpoints (which answer the orchestrator).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use super::waits::{Wait, Waits};
use crate::clock::now_ms;

/// What `/healthz` and `/readyz` report.
#[derive(Debug)]
pub struct Health {
    last_beat_ms: AtomicI64,
    ready: AtomicBool,
    restoring: AtomicBool,
    stuck_after: Duration,
    /// What the loop waits for the cluster to give back, if anything (see [`Waits`]).
    waits: Waits,
    /// The processing threads' own (an instance with several): alive and ready only when
    /// every one is.
    parts: Vec<std::sync::Arc<Health>>,
}

impl Health {
    /// The loop counts as stuck when it has not beaten for `stuck_after`.
    pub fn new(stuck_after: Duration) -> Self {
        Self {
            last_beat_ms: AtomicI64::new(now_ms()),
            ready: AtomicBool::new(false),
            restoring: AtomicBool::new(false),
            stuck_after,
            waits: Waits::default(),
            parts: Vec::new(),
        }
    }

    /// An instance's health from its processing threads' (`processor.threads`): alive while
    /// every thread's loop turns, ready when every thread's partitions are restored.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use eosflow::internals::telemetry::Health;
    /// let (a, b) = (Arc::new(Health::new(Duration::from_secs(60))), Arc::new(Health::new(Duration::from_secs(60))));
    /// let instance = Health::of_parts(vec![a.clone(), b.clone()]);
    /// a.set_ready(true);
    /// assert!(!instance.ready(), "thread b is still restoring");
    /// b.set_ready(true);
    /// assert!(instance.ready() && instance.healthy());
    /// ```
    pub fn of_parts(parts: Vec<std::sync::Arc<Health>>) -> Self {
        let mut h = Self::new(Duration::from_secs(100 * 365 * 24 * 3600));
        h.parts = parts;
        h
    }

    /// For a process whose loop does not report: always alive and ready.
    pub fn always_ready() -> Self {
        let h = Self::new(Duration::from_secs(100 * 365 * 24 * 3600));
        h.set_ready(true);
        h
    }

    /// The loop is turning.
    pub fn beat(&self) {
        self.last_beat_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// Every assigned partition is restored and processing (or not, during a rebalance).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
        super::ready(ready);
    }

    /// A restore is running: it has its own deadline, and a liveness probe must not kill a pod
    /// for a long restore.
    pub fn set_restoring(&self, restoring: bool) {
        self.restoring.store(restoring, Ordering::Relaxed);
        super::restoring(restoring);
        self.beat();
    }

    /// The loop's wait handle, for the producer that meets the failures (see [`Waits`]).
    pub fn waits(&self) -> Waits {
        self.waits.clone()
    }

    /// The open waits of this loop, or of every processing thread's (an instance with
    /// several): what `/healthz` prints.
    ///
    /// ```
    /// use std::time::Duration;
    /// use eosflow::internals::telemetry::{Health, WaitingOn};
    /// let h = Health::new(Duration::from_secs(60));
    /// h.waits().start(WaitingOn::InSyncReplicas, "orders-0: Broker: Not enough in-sync replicas");
    /// assert_eq!(h.waiting()[0].on, WaitingOn::InSyncReplicas);
    /// assert!(h.healthy(), "waiting for the cluster is not being stuck");
    /// ```
    pub fn waiting(&self) -> Vec<Wait> {
        let mut all = self.waits.open();
        for p in &self.parts {
            all.extend(p.waiting());
        }
        all
    }

    /// Alive: the loop beat within the deadline (or a restore is running).
    pub fn healthy(&self) -> bool {
        if !self.parts.is_empty() {
            return self.parts.iter().all(|p| p.healthy());
        }
        self.restoring.load(Ordering::Relaxed)
            || now_ms() - self.last_beat_ms.load(Ordering::Relaxed)
                <= self.stuck_after.as_millis() as i64
    }

    /// Ready for traffic: alive and every assigned partition restored.
    pub fn ready(&self) -> bool {
        if !self.parts.is_empty() {
            return self.parts.iter().all(|p| p.ready());
        }
        self.ready.load(Ordering::Relaxed)
            && !self.restoring.load(Ordering::Relaxed)
            && self.healthy()
    }
}
