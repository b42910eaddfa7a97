//! The transaction coordinator: producer ids and epochs, open transactions, their timeouts.
//!
//! Modelled, as Kafka's `TransactionCoordinator` keeps them per `transactional.id`:
//! - `init_transactions` keeps the producer id and bumps the epoch, which fences every older
//!   instance, and aborts the transaction the id had open;
//! - a transaction becomes ongoing at its first partition or offsets (Kafka's
//!   `AddPartitionsToTxn`/`AddOffsetsToTxn`), which also starts its timeout;
//! - a transaction open longer than its timeout is aborted by the coordinator, which bumps
//!   the epoch so the producer's next call fails;
//! - offsets sent to a transaction (KIP-447) are held until it ends.
//!
//! Not modelled: the `__transaction_state` log and coordinator failover, the
//! `PrepareCommit`/`CompleteCommit` two-step (markers are written at once, so a transaction
//! is never observed half-committed), epoch exhaustion (a new producer id at epoch 32767),
//! `CONCURRENT_TRANSACTIONS` retries, and producer-id expiration.

use std::collections::{BTreeMap, BTreeSet};

use crate::{SimError, TopicPartition};

/// Why the coordinator bumped an epoch: decides the error the fenced instance sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bump {
    /// Another instance called `init_transactions` (or a `ProducerFenced` fault).
    NewInstance,
    /// The coordinator aborted a transaction that outlived its timeout.
    Timeout,
}

/// A transaction the coordinator knows is open.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ongoing {
    started_ms: i64,
    partitions: BTreeSet<TopicPartition>,
    offsets: BTreeMap<String, BTreeMap<TopicPartition, i64>>,
}

impl Ongoing {
    pub(crate) fn partitions(&self) -> &BTreeSet<TopicPartition> {
        &self.partitions
    }

    pub(crate) fn offsets(&self) -> &BTreeMap<String, BTreeMap<TopicPartition, i64>> {
        &self.offsets
    }
}

#[derive(Debug, Clone)]
struct TxnMeta {
    producer_id: i64,
    epoch: i16,
    timeout_ms: i64,
    /// Every bump: the epoch it produced and why.
    bumps: Vec<(i16, Bump)>,
    ongoing: Option<Ongoing>,
}

/// All transactional ids of the cluster.
#[derive(Debug, Clone, Default)]
pub(crate) struct TxnCoordinator {
    metas: BTreeMap<String, TxnMeta>,
    next_producer_id: i64,
}

impl TxnCoordinator {
    /// A fresh producer id (idempotent producers get one each; transactional ids keep theirs).
    pub(crate) fn allocate_producer_id(&mut self) -> i64 {
        let id = self.next_producer_id;
        self.next_producer_id += 1;
        id
    }

    /// `InitProducerId`: bumps the epoch of `transactional_id` (creating it at epoch 0) and
    /// returns its producer id, the new epoch and the transaction to abort, if one was open.
    pub(crate) fn init(
        &mut self,
        transactional_id: &str,
        timeout_ms: i64,
    ) -> (i64, i16, Option<Ongoing>) {
        if let Some(meta) = self.metas.get_mut(transactional_id) {
            meta.timeout_ms = timeout_ms;
            meta.epoch = meta.epoch.saturating_add(1);
            meta.bumps.push((meta.epoch, Bump::NewInstance));
            return (meta.producer_id, meta.epoch, meta.ongoing.take());
        }
        let producer_id = self.allocate_producer_id();
        self.metas.insert(
            transactional_id.to_owned(),
            TxnMeta {
                producer_id,
                epoch: 0,
                timeout_ms,
                bumps: Vec::new(),
                ongoing: None,
            },
        );
        (producer_id, 0, None)
    }

    /// Whether an instance holding `epoch` may still act for `transactional_id`.
    pub(crate) fn check(&self, transactional_id: &str, epoch: i16) -> Result<(), SimError> {
        let Some(meta) = self.metas.get(transactional_id) else {
            return Err(SimError::InvalidTxnState(format!(
                "{transactional_id}: not initialized"
            )));
        };
        if meta.epoch == epoch {
            return Ok(());
        }
        let replaced = meta
            .bumps
            .iter()
            .any(|&(e, why)| e > epoch && why == Bump::NewInstance);
        Err(if replaced {
            SimError::ProducerFenced(format!(
                "{transactional_id}: epoch {epoch} fenced by epoch {}",
                meta.epoch
            ))
        } else {
            SimError::InvalidProducerEpoch(format!(
                "{transactional_id}: transaction timed out, epoch {epoch} bumped to {}",
                meta.epoch
            ))
        })
    }

    /// Bumps the epoch of `transactional_id` for `why`; returns its producer id and the
    /// transaction it had open (to abort).
    pub(crate) fn fence(&mut self, transactional_id: &str, why: Bump) -> Option<(i64, Ongoing)> {
        let meta = self.metas.get_mut(transactional_id)?;
        meta.epoch = meta.epoch.saturating_add(1);
        meta.bumps.push((meta.epoch, why));
        let ongoing = meta.ongoing.take().unwrap_or_default();
        Some((meta.producer_id, ongoing))
    }

    fn ongoing_mut(&mut self, transactional_id: &str, now_ms: i64) -> Option<&mut Ongoing> {
        let meta = self.metas.get_mut(transactional_id)?;
        Some(meta.ongoing.get_or_insert_with(|| Ongoing {
            started_ms: now_ms,
            ..Ongoing::default()
        }))
    }

    /// `AddPartitionsToTxn`: the transaction starts (and its timer) at its first partition.
    pub(crate) fn add_partition(
        &mut self,
        transactional_id: &str,
        tp: &TopicPartition,
        now_ms: i64,
    ) {
        if let Some(ongoing) = self.ongoing_mut(transactional_id, now_ms) {
            ongoing.partitions.insert(tp.clone());
        }
    }

    /// `AddOffsetsToTxn` + `TxnOffsetCommit`: offsets held until the transaction ends.
    pub(crate) fn add_offsets(
        &mut self,
        transactional_id: &str,
        group: &str,
        offsets: &[(TopicPartition, i64)],
        now_ms: i64,
    ) {
        if let Some(ongoing) = self.ongoing_mut(transactional_id, now_ms) {
            let held = ongoing.offsets.entry(group.to_owned()).or_default();
            for (tp, offset) in offsets {
                held.insert(tp.clone(), *offset);
            }
        }
    }

    /// `EndTxn`: takes the open transaction (none if nothing was added to it).
    pub(crate) fn take_ongoing(&mut self, transactional_id: &str) -> Option<(i64, Ongoing)> {
        let meta = self.metas.get_mut(transactional_id)?;
        let ongoing = meta.ongoing.take()?;
        Some((meta.producer_id, ongoing))
    }

    /// The transactional ids whose open transaction has outlived its timeout at `now_ms`.
    pub(crate) fn expired(&self, now_ms: i64) -> Vec<String> {
        self.metas
            .iter()
            .filter(|(_, m)| {
                m.ongoing
                    .as_ref()
                    .is_some_and(|o| now_ms - o.started_ms > m.timeout_ms)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }
}
