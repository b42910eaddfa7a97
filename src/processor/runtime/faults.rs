//! Test-only faults (hidden), each armed per application and fired once:
//! - the next transaction that commits *without input offsets* (due wall-clock timers on an
//!   idle partition, parked followers draining) is reported as
//!   [`crate::sink::SinkError::CommitUnknown`] right after it landed — what a lost `EndTxn`
//!   answer looks like — so a test can prove such a batch is neither lost nor repeated;
//! - the next commit *with* input offsets is reported unknown as if the group membership had
//!   changed meanwhile (a rebalance between `send_offsets` and the check): the group's offsets
//!   then no longer tell the outcome and every task is restored;
//! - the next batch with input offsets is aborted right before its commit, as any abortable
//!   transaction error would abort it (its records are then read again from a seek back);
//! - the next `n` seeks fail for every partition they name, without moving the consumer, as
//!   `rd_kafka_seek_partitions` reports a partition's failure in its answer — so a test can
//!   prove a failed seek back leaves no record behind. This one lives at the consumer seam
//!   (`FaultySupplier` wraps the loop's consumers), not in the group member's code.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::Offset;

use crate::kafka::seams::{ConsumerSupplier, GroupConsumer, GroupSettings, Pair};

/// One fault: the applications it is armed for.
struct Switch(Mutex<BTreeSet<String>>);

impl Switch {
    const fn new() -> Self {
        Self(Mutex::new(BTreeSet::new()))
    }

    fn arm(&self, app_id: &str) {
        if let Ok(mut s) = self.0.lock() {
            s.insert(app_id.to_string());
        }
    }

    fn armed(&self, app_id: &str) -> bool {
        self.0.lock().is_ok_and(|s| s.contains(app_id))
    }

    fn take(&self, app_id: &str) -> bool {
        self.0.lock().is_ok_and(|mut s| s.remove(app_id))
    }
}

/// One fault fired a number of times: the applications it is armed for, with the count left.
struct Counter(Mutex<BTreeMap<String, u32>>);

impl Counter {
    const fn new() -> Self {
        Self(Mutex::new(BTreeMap::new()))
    }

    fn arm(&self, app_id: &str, times: u32) {
        if let Ok(mut s) = self.0.lock() {
            s.insert(app_id.to_string(), times);
        }
    }

    fn left(&self, app_id: &str) -> u32 {
        self.0
            .lock()
            .map_or(0, |s| s.get(app_id).copied().unwrap_or(0))
    }

    fn take(&self, app_id: &str) -> bool {
        let Ok(mut s) = self.0.lock() else {
            return false;
        };
        let Some(n) = s.get_mut(app_id) else {
            return false;
        };
        let fires = *n > 0;
        *n = n.saturating_sub(1);
        if *n == 0 {
            s.remove(app_id);
        }
        fires
    }
}

static OFFSETLESS_COMMIT_UNKNOWN: Switch = Switch::new();
static MEMBERSHIP_CHANGED_UNKNOWN: Switch = Switch::new();
static ABORT_NEXT_BATCH: Switch = Switch::new();
static SEEK_FAILURES: Counter = Counter::new();

/// Arms the offset-less fault for application `app_id` (once).
pub fn report_next_offsetless_commit_unknown(app_id: &str) {
    OFFSETLESS_COMMIT_UNKNOWN.arm(app_id);
}

/// Whether the offset-less fault is still armed for `app_id` (not yet fired).
pub fn offsetless_commit_unknown_armed(app_id: &str) -> bool {
    OFFSETLESS_COMMIT_UNKNOWN.armed(app_id)
}

/// Fires the offset-less fault for `app_id` if armed.
pub(crate) fn take_offsetless_commit_unknown(app_id: &str) -> bool {
    OFFSETLESS_COMMIT_UNKNOWN.take(app_id)
}

/// Arms the membership-change fault for application `app_id` (once): its next commit with
/// input offsets lands, is reported unknown, and the check that follows sees another group
/// generation than the one the offsets were sent under.
pub fn report_next_commit_unknown_after_membership_change(app_id: &str) {
    MEMBERSHIP_CHANGED_UNKNOWN.arm(app_id);
}

/// Whether the membership-change fault is still armed for `app_id` (not yet fired).
pub fn membership_change_armed(app_id: &str) -> bool {
    MEMBERSHIP_CHANGED_UNKNOWN.armed(app_id)
}

/// Fires the membership-change fault for `app_id` if armed.
pub(crate) fn take_membership_change(app_id: &str) -> bool {
    MEMBERSHIP_CHANGED_UNKNOWN.take(app_id)
}

/// Arms the abort fault for application `app_id` (once): its next batch with input offsets is
/// aborted right before its commit, and its records are read again from a seek back.
pub fn abort_next_batch(app_id: &str) {
    ABORT_NEXT_BATCH.arm(app_id);
}

/// Whether the abort fault is still armed for `app_id` (not yet fired).
pub fn abort_next_batch_armed(app_id: &str) -> bool {
    ABORT_NEXT_BATCH.armed(app_id)
}

/// Fires the abort fault for `app_id` if armed.
pub(crate) fn take_abort_next_batch(app_id: &str) -> bool {
    ABORT_NEXT_BATCH.take(app_id)
}

/// Arms the seek fault for application `app_id`: its next `times` seeks fail for every
/// partition they name, and the consumer stays where it was.
pub fn fail_next_seeks(app_id: &str, times: u32) {
    SEEK_FAILURES.arm(app_id, times);
}

/// How many seeks of `app_id` are still to fail.
pub fn seek_failures_left(app_id: &str) -> u32 {
    SEEK_FAILURES.left(app_id)
}

/// Fires the seek fault for `app_id` if armed (one seek fails).
fn take_seek_failure(app_id: &str) -> bool {
    SEEK_FAILURES.take(app_id)
}

/// The loop's consumers with the consumer-side faults above armed per application: the
/// faults live at the seam, not in the group member's code (issue 50).
pub(crate) struct FaultySupplier {
    /// What creates the real consumers.
    pub(crate) inner: Arc<dyn ConsumerSupplier>,
    /// The application the faults are armed for.
    pub(crate) app_id: String,
}

impl ConsumerSupplier for FaultySupplier {
    fn group_consumer(
        &self,
        settings: &GroupSettings,
    ) -> Result<Box<dyn GroupConsumer>, KafkaError> {
        Ok(Box::new(FaultyConsumer {
            inner: self.inner.group_consumer(settings)?,
            app_id: self.app_id.clone(),
        }))
    }
}

/// A consumer whose seeks fail while [`fail_next_seeks`] is armed; every other call is the
/// real consumer's.
struct FaultyConsumer {
    inner: Box<dyn GroupConsumer>,
    app_id: String,
}

impl GroupConsumer for FaultyConsumer {
    fn topics(&self, timeout: Duration) -> Result<BTreeMap<String, usize>, KafkaError> {
        self.inner.topics(timeout)
    }
    fn group_names(&self, timeout: Duration) -> Result<BTreeSet<String>, KafkaError> {
        self.inner.group_names(timeout)
    }
    fn subscribe(&self, topics: &[&str]) -> Result<(), KafkaError> {
        self.inner.subscribe(topics)
    }
    fn unsubscribe(&self) {
        self.inner.unsubscribe()
    }
    fn poll(
        &self,
        timeout: Duration,
    ) -> Option<Result<rdkafka::message::OwnedMessage, KafkaError>> {
        self.inner.poll(timeout)
    }
    fn take_events(&self) -> Vec<crate::kafka::seams::GroupEvent> {
        self.inner.take_events()
    }
    fn fatal_error(&self) -> Option<(rdkafka::types::RDKafkaErrorCode, String)> {
        self.inner.fatal_error()
    }
    fn pause(&self, parts: &[Pair]) -> Result<Vec<(Pair, KafkaError)>, KafkaError> {
        self.inner.pause(parts)
    }
    fn resume(&self, parts: &[Pair]) -> Result<Vec<(Pair, KafkaError)>, KafkaError> {
        self.inner.resume(parts)
    }
    fn seek(
        &self,
        to: &[(String, i32, Offset)],
        timeout: Duration,
    ) -> Result<Vec<(Pair, KafkaError)>, KafkaError> {
        if take_seek_failure(&self.app_id) {
            // Every partition named fails, and none moves.
            return Ok(to
                .iter()
                .map(|(t, p, _)| {
                    (
                        (t.clone(), *p),
                        KafkaError::Seek("test fault: seek failed".into()),
                    )
                })
                .collect());
        }
        self.inner.seek(to, timeout)
    }
    fn committed(
        &self,
        parts: &[Pair],
        timeout: Duration,
    ) -> Result<Vec<(Pair, Result<Option<i64>, KafkaError>)>, KafkaError> {
        self.inner.committed(parts, timeout)
    }
    fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        self.inner.position(topic, partition)
    }
    fn watermarks(
        &self,
        topic: &str,
        partition: i32,
        timeout: Duration,
    ) -> Result<(i64, i64), KafkaError> {
        self.inner.watermarks(topic, partition, timeout)
    }
    fn generation(&self) -> Option<(i32, String)> {
        self.inner.generation()
    }
    fn group_metadata(&self) -> Option<crate::kafka::seams::GroupMetadata> {
        self.inner.group_metadata()
    }
    fn commit(
        &self,
        offsets: &[(String, i32, i64)],
        mode: rdkafka::consumer::CommitMode,
    ) -> Result<(), KafkaError> {
        self.inner.commit(offsets, mode)
    }
    fn note_committed(&self, next: &[(Pair, i64)]) {
        self.inner.note_committed(next)
    }
    fn noted_committed(&self) -> Vec<(Pair, i64)> {
        self.inner.noted_committed()
    }
}
