//! What a loop is waiting for the cluster to give back: a partition leader, enough in-sync
//! replicas, the transaction coordinator or the group coordinator.
//!
//! A loop that cannot commit does not exit: it aborts, retries and waits (issue-level rule: no
//! fault may make an instance exit while it could recover). An operator then needs to know
//! *what* it waits for, without reading librdkafka's lines. The producer's retry loops
//! ([`crate::sink::TxnSink`]) and the processor's failed batches start a wait with the cause
//! they saw; the next commit that lands ends it. `/healthz` prints the open waits and
//! `/metrics` exports them:
//!
//! - `eosflow_waiting{on}`: loops waiting on `on` right now (0 when none);
//! - `eosflow_waits_total{on}`: waits started;
//! - `eosflow_wait_seconds{on}`: how long each ended wait lasted.
//!
//! A loop may wait on several things at once (a partition without a leader, and the
//! transaction coordinator still finishing the aborted transaction): each is its own wait.
//!
//! ```
//! use eosflow::internals::telemetry::{Waits, WaitingOn};
//! let waits = Waits::default();
//! waits.start(WaitingOn::PartitionLeader, "orders-2: Local: Message timed out");
//! waits.start(WaitingOn::TxnCoordinator, "init_transactions: Concurrent transactions");
//! assert_eq!(waits.open().len(), 2);
//! waits.clear_if(WaitingOn::TxnCoordinator); // a new producer initialised
//! assert_eq!(waits.open()[0].on.label(), "partition-leader");
//! waits.clear(); // a commit landed
//! assert!(waits.open().is_empty());
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rdkafka::types::RDKafkaErrorCode;

use crate::clock::now_ms;

/// What the cluster must give back before the loop's commits can land again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WaitingOn {
    /// A partition the batch writes has no leader (it moved, or its only in-sync replica is
    /// down and an unclean election is disabled), or deliveries to it timed out.
    PartitionLeader,
    /// A partition has a leader but fewer in-sync replicas than `min.insync.replicas`: the
    /// broker refuses `acks=all` writes until a follower catches up.
    InSyncReplicas,
    /// The transaction coordinator (of the `transactional.id`) is away, moving or loading:
    /// `init_transactions`, commit or abort cannot complete.
    TxnCoordinator,
    /// The group coordinator is away or the group is rebalancing: the input offsets cannot
    /// be added to the transaction.
    GroupCoordinator,
}

impl WaitingOn {
    /// Every cause, in the order `/healthz` and the docs list them.
    pub const ALL: [WaitingOn; 4] = [
        WaitingOn::PartitionLeader,
        WaitingOn::InSyncReplicas,
        WaitingOn::TxnCoordinator,
        WaitingOn::GroupCoordinator,
    ];

    /// The `on` label of the metrics and the word `/healthz` prints.
    pub fn label(self) -> &'static str {
        match self {
            WaitingOn::PartitionLeader => "partition-leader",
            WaitingOn::InSyncReplicas => "in-sync-replicas",
            WaitingOn::TxnCoordinator => "txn-coordinator",
            WaitingOn::GroupCoordinator => "group-coordinator",
        }
    }

    /// The wait a Kafka error code means, if it means one (a record's own error, or a fencing,
    /// is no wait: it is handled where it is met). A bare timeout names nothing: what timed
    /// out is told by where it happened, or by the cluster's metadata.
    ///
    /// ```
    /// use eosflow::internals::telemetry::WaitingOn;
    /// use rdkafka::types::RDKafkaErrorCode;
    /// assert_eq!(WaitingOn::of_code(RDKafkaErrorCode::NotEnoughReplicas), Some(WaitingOn::InSyncReplicas));
    /// assert_eq!(WaitingOn::of_code(RDKafkaErrorCode::MessageSizeTooLarge), None);
    /// ```
    pub fn of_code(code: RDKafkaErrorCode) -> Option<WaitingOn> {
        use RDKafkaErrorCode as C;
        Some(match code {
            C::NotLeaderForPartition
            | C::LeaderNotAvailable
            | C::FencedLeaderEpoch
            | C::UnknownLeaderEpoch
            | C::MessageTimedOut
            | C::PreferredLeaderNotAvailable
            | C::ReplicaNotAvailable
            | C::BrokerNotAvailable
            | C::AllBrokersDown
            | C::BrokerTransportFailure
            | C::DestroyBroker => WaitingOn::PartitionLeader,
            C::NotEnoughReplicas | C::NotEnoughReplicasAfterAppend => WaitingOn::InSyncReplicas,
            C::CoordinatorNotAvailable
            | C::NotCoordinator
            | C::CoordinatorLoadInProgress
            | C::ConcurrentTransactions
            | C::TransactionCoordinatorFenced => WaitingOn::TxnCoordinator,
            C::RebalanceInProgress
            | C::IllegalGeneration
            | C::UnknownMemberId
            | C::UnstableOffsetCommit => WaitingOn::GroupCoordinator,
            _ => return None,
        })
    }

    /// The wait a failed call to a coordinator means (`send_offsets_to_transaction`, a
    /// commit): a group error names the group coordinator, an error librdkafka reports "on
    /// broker TxnCoordinator" (a transport failure, a timeout) the transaction coordinator,
    /// anything else `default`, the coordinator the call talks to. A transport failure here is
    /// never a partition's leader.
    ///
    /// ```
    /// use eosflow::internals::telemetry::WaitingOn;
    /// use rdkafka::types::RDKafkaErrorCode as C;
    /// let text = "Failed to add offsets to transaction on broker TxnCoordinator: Local: Broker transport failure";
    /// assert_eq!(WaitingOn::of_coordinator_call(C::BrokerTransportFailure, text, WaitingOn::GroupCoordinator), WaitingOn::TxnCoordinator);
    /// assert_eq!(WaitingOn::of_coordinator_call(C::RebalanceInProgress, "", WaitingOn::TxnCoordinator), WaitingOn::GroupCoordinator);
    /// ```
    pub fn of_coordinator_call(
        code: RDKafkaErrorCode,
        text: &str,
        default: WaitingOn,
    ) -> WaitingOn {
        match WaitingOn::of_code(code) {
            Some(WaitingOn::GroupCoordinator) => WaitingOn::GroupCoordinator,
            _ if text.contains("TxnCoordinator") => WaitingOn::TxnCoordinator,
            Some(WaitingOn::TxnCoordinator) => WaitingOn::TxnCoordinator,
            _ => default,
        }
    }

    /// The wait a blocking producer call that missed its deadline means (`call`: librdkafka's
    /// name, as in [`crate::sink::bounded::Elapsed::call`]).
    pub fn of_stuck_call(call: &str) -> WaitingOn {
        if call == "send_offsets_to_transaction" {
            WaitingOn::GroupCoordinator
        } else {
            WaitingOn::TxnCoordinator
        }
    }
}

/// One open wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// What is waited for.
    pub on: WaitingOn,
    /// When the wait began (ms since the epoch): the first failure of this cause.
    pub since_ms: i64,
    /// What the last failure said (the partition and librdkafka's error, say).
    pub detail: String,
}

impl Wait {
    /// How long it has lasted, in seconds.
    pub fn seconds(&self) -> f64 {
        (now_ms() - self.since_ms).max(0) as f64 / 1000.0
    }
}

/// One loop's waits (a processing thread's, a router's): shared by the producer that meets the
/// failures, the loop that commits, and the endpoints that report. Cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct Waits(Arc<Mutex<BTreeMap<WaitingOn, Wait>>>);

impl Waits {
    /// The loop now waits on `on` (`detail`: what failed). A wait already open on `on` keeps
    /// its start and takes the new detail.
    pub fn start(&self, on: WaitingOn, detail: impl Into<String>) {
        let detail = detail.into();
        let mut open = self.lock();
        if let Some(w) = open.get_mut(&on) {
            w.detail = detail;
            return;
        }
        tracing::warn!(on = on.label(), %detail, "waiting for the cluster: commits cannot land until it is back (the loop retries by itself)");
        super::wait_started(on.label());
        open.insert(
            on,
            Wait {
                on,
                since_ms: now_ms(),
                detail,
            },
        );
    }

    /// A commit landed: whatever was waited for is back.
    pub fn clear(&self) {
        for w in std::mem::take(&mut *self.lock()).values() {
            end(w);
        }
    }

    /// Ends the wait on `on` only (a new producer initialised: the transaction coordinator is
    /// back, a partition may still have no leader).
    pub fn clear_if(&self, on: WaitingOn) {
        if let Some(w) = self.lock().remove(&on) {
            end(&w);
        }
    }

    /// The open waits, in [`WaitingOn::ALL`]'s order.
    pub fn open(&self) -> Vec<Wait> {
        self.lock().values().cloned().collect()
    }

    /// Whether a wait on `on` is open.
    pub fn is_waiting_on(&self, on: WaitingOn) -> bool {
        self.lock().contains_key(&on)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<WaitingOn, Wait>> {
        // A panic while holding this lock leaves a plain value behind: keep using it.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Closes `w`'s accounting: the gauge goes down, its duration is observed and logged.
fn end(w: &Wait) {
    let seconds = w.seconds();
    super::wait_ended(w.on.label(), seconds);
    tracing::info!(
        on = w.on.label(),
        seconds,
        "no longer waiting for the cluster"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_on_the_same_cause_keeps_its_start_and_causes_are_ended_apart() {
        let w = Waits::default();
        w.start(WaitingOn::PartitionLeader, "orders-1: timed out");
        let first = w.open()[0].clone();
        w.start(WaitingOn::PartitionLeader, "orders-1: not leader");
        let again = w.open()[0].clone();
        assert_eq!(again.since_ms, first.since_ms);
        assert_eq!(again.detail, "orders-1: not leader");
        w.start(
            WaitingOn::TxnCoordinator,
            "commit: coordinator not available",
        );
        assert!(w.is_waiting_on(WaitingOn::PartitionLeader));
        assert!(w.is_waiting_on(WaitingOn::TxnCoordinator));
        w.clear_if(WaitingOn::PartitionLeader);
        assert_eq!(w.open().len(), 1, "clear_if leaves another cause open");
        w.clear_if(WaitingOn::TxnCoordinator);
        assert!(w.open().is_empty());
    }

    #[test]
    fn errors_that_are_waits_are_told_from_a_records_own() {
        use RDKafkaErrorCode as C;
        assert_eq!(
            WaitingOn::of_code(C::MessageTimedOut),
            Some(WaitingOn::PartitionLeader)
        );
        assert_eq!(
            WaitingOn::of_code(C::CoordinatorNotAvailable),
            Some(WaitingOn::TxnCoordinator)
        );
        assert_eq!(
            WaitingOn::of_code(C::RebalanceInProgress),
            Some(WaitingOn::GroupCoordinator)
        );
        assert_eq!(WaitingOn::of_code(C::InvalidProducerEpoch), None);
        assert_eq!(
            WaitingOn::of_code(C::OperationTimedOut),
            None,
            "a bare timeout names nothing"
        );
        assert_eq!(
            WaitingOn::of_stuck_call("send_offsets_to_transaction"),
            WaitingOn::GroupCoordinator
        );
        assert_eq!(
            WaitingOn::of_stuck_call("commit_transaction"),
            WaitingOn::TxnCoordinator
        );
    }
}
