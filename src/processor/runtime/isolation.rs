//! Isolation of the records that make a batch fail, so that reading the batch again does not
//! fail the same way: a record whose output cannot be written (over the size limit, unknown
//! topic, its dead letter too large) is dead-lettered as `unwritable` the next time it comes; a
//! record error no send names halves the batch until the record is alone; a handler call that
//! outlived half the transaction timeout runs again in a transaction of its own. Nothing blocks
//! a partition.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::message::OwnedMessage;
use rdkafka::producer::DeliveryFuture;
use rdkafka::Message;

use crate::processor::engine::Isolated;
use crate::retry::dlt::DltClass;
use crate::sink::{is_record_error, SinkError};
use crate::telemetry::{self, WaitingOn};

/// Whether `e` is an error of one record (too large, unknown topic …), not of the transaction.
fn record_error_in(e: &SinkError) -> bool {
    let code = match e {
        SinkError::Unwritable { .. } => return true,
        SinkError::Abortable(k) | SinkError::Fatal(k) | SinkError::CommitUnknown(k) => {
            k.rdkafka_error_code()
        }
        SinkError::Fenced { .. }
        | SinkError::NoGroupMetadata
        | SinkError::StateRead(_)
        | SinkError::Stuck(_) => None,
    };
    code.is_some_and(is_record_error)
}

/// Records isolated from failed batches, by (topic, partition, offset).
type IsolatedRecords = HashMap<(String, i32, i64), Isolated>;

/// The records isolated from failed batches, and the batch bounds that find them.
#[derive(Debug, Default)]
pub(super) struct Isolation {
    /// Records isolated from a failed batch, by (topic, partition, offset): the next time they
    /// come they are dead-lettered without running the handler (see [`Isolated`]).
    isolated: IsolatedRecords,
    /// A record to run in a transaction of its own (suspected of failing its batch).
    alone: Option<(String, i32, i64)>,
    /// While a record error that no send names is being narrowed down: the most records the
    /// next batch may take (halved on each such failure, doubled on each commit).
    batch_cap: Option<usize>,
    /// After a batch was closed early (half the transaction timeout used): the most records the
    /// next batch may take — what fitted — grown by a quarter on each batch that fits.
    time_cap: Option<usize>,
    /// Set by `attempt` for an isolated record: `fail` dead-letters it with this class and
    /// starts at this reduction stage (0 whole, 1 truncated, 2 pointer only).
    forced_dead_letter: Option<(DltClass, u8)>,
    max_batch_records: usize,
    transaction_timeout: Duration,
}

impl Isolation {
    /// No record isolated yet, batches of up to `max_batch_records`.
    pub(super) fn new(max_batch_records: usize, transaction_timeout: Duration) -> Self {
        Self {
            max_batch_records,
            transaction_timeout,
            ..Self::default()
        }
    }

    /// The most records the next batch may take.
    pub(super) fn max_records(&self) -> usize {
        [self.batch_cap, self.time_cap]
            .into_iter()
            .flatten()
            .fold(self.max_batch_records, usize::min)
            .max(1)
    }

    /// The record to run in a transaction of its own, if any.
    pub(super) fn alone(&self) -> Option<&(String, i32, i64)> {
        self.alone.as_ref()
    }

    /// Whether `m` is the record to run alone.
    pub(super) fn is_alone(&self, m: &OwnedMessage) -> bool {
        self.alone
            .as_ref()
            .is_some_and(|a| a.0 == m.topic() && a.1 == m.partition() && a.2 == m.offset())
    }

    /// What the engine reads and sets while it runs a record: the isolated records, and the
    /// dead-letter class forced on the one it handles.
    pub(super) fn engine_parts(&mut self) -> (&IsolatedRecords, &mut Option<(DltClass, u8)>) {
        (&self.isolated, &mut self.forced_dead_letter)
    }

    /// The batch ended (either way): no record's dead letter is forced any more.
    pub(super) fn batch_ended(&mut self) {
        self.forced_dead_letter = None;
    }

    /// After a commit of `next_offsets` in which `handled` records were handled, `closed_early`
    /// when half the transaction timeout was not enough for the batch: records now behind the
    /// committed offsets are forgotten, and the batch bounds grow back.
    pub(super) fn committed(
        &mut self,
        next_offsets: &[(String, i32, i64)],
        handled: usize,
        closed_early: bool,
    ) {
        if !self.isolated.is_empty() || self.alone.is_some() {
            let behind = |k: &(String, i32, i64)| {
                next_offsets
                    .iter()
                    .any(|(t, p, o)| *t == k.0 && *p == k.1 && k.2 < *o)
            };
            self.isolated.retain(|k, _| !behind(k));
            if self.alone.as_ref().is_some_and(behind) {
                self.alone = None;
            }
        }
        if let Some(cap) = self.batch_cap {
            self.batch_cap = Some(cap * 2).filter(|c| *c < self.max_batch_records);
        }
        if closed_early {
            // Half the timeout was not enough for the batch: poll fewer records next time.
            self.time_cap = Some(handled.max(1));
        } else if let Some(cap) = self.time_cap {
            self.time_cap = Some(cap + cap / 4 + 1).filter(|c| *c < self.max_batch_records);
        }
    }

    /// Finds the record that made a batch fail, so that reading the batch again does not fail
    /// the same way: a send that failed on one record (over the size limit, unknown topic), a
    /// delivery report naming one, or a handler call that outlived the transaction timeout.
    /// Blamed records are dead-lettered the next time they are read ([`Isolated`]).
    /// Returns what a failed delivery says the loop waits for (a partition without a leader,
    /// too few in-sync replicas), if one says so: no record is to blame for that.
    pub(super) fn blame(
        &mut self,
        batch: &[OwnedMessage],
        error: &SinkError,
        culprit: Option<usize>,
        deliveries: Vec<(DeliveryFuture, usize)>,
        slow: Option<(usize, Duration)>,
    ) -> Option<(WaitingOn, String)> {
        let mut blamed: Vec<(usize, String, bool)> = Vec::new();
        let mut waited = None;
        if let (Some(i), SinkError::Unwritable { topic, source }) = (culprit, error) {
            blamed.push((
                i,
                format!("output to {topic}: {source}"),
                topic.ends_with(".DLT"),
            ));
        }
        for (f, i) in deliveries {
            use futures::FutureExt;
            let Some(Ok(Err((e, m)))) = f.now_or_never() else {
                continue;
            };
            if e.rdkafka_error_code().is_some_and(is_record_error) {
                let bytes = m.payload().map_or(0, <[u8]>::len) + m.key().map_or(0, <[u8]>::len);
                blamed.push((
                    i,
                    format!("output to {} ({bytes} bytes): {e}", m.topic()),
                    m.topic().ends_with(".DLT"),
                ));
            } else if waited.is_none() {
                // Not the record's fault: the partition's leader or replicas are away.
                waited = e
                    .rdkafka_error_code()
                    .and_then(WaitingOn::of_code)
                    .map(|on| (on, format!("{}-{}: {e}", m.topic(), m.partition())));
            }
        }
        self.isolate(batch, error, blamed, slow);
        waited
    }

    /// Isolates the records `blamed` names (index, reason, whether its dead letter was what
    /// failed); with none, looks for the record by halving the batch or by its slow call.
    fn isolate(
        &mut self,
        batch: &[OwnedMessage],
        error: &SinkError,
        blamed: Vec<(usize, String, bool)>,
        slow: Option<(usize, Duration)>,
    ) {
        let mut found = false;
        for (i, reason, dead_letter_failed) in blamed {
            let Some(m) = batch.get(i) else { continue };
            found = true;
            let key = (m.topic().to_string(), m.partition(), m.offset());
            let entry = self.isolated.entry(key).or_insert_with(|| Isolated {
                class: DltClass::Unwritable,
                reason: reason.clone(),
                stage: 0,
            });
            if dead_letter_failed {
                // Its dead letter could not be written as it was: cut it down further.
                entry.stage = (entry.stage + 1).min(2);
            }
            tracing::error!(
                topic = m.topic(),
                partition = m.partition(),
                offset = m.offset(),
                reason = %reason,
                stage = entry.stage,
                "record isolated from its batch: it will be dead-lettered (class unwritable) so the partition moves on"
            );
            telemetry::record_isolated(m.topic(), DltClass::Unwritable.as_str());
        }
        if found {
            return;
        }
        // A record error no send of a record names (a state value too large for its changelog
        // record, say): halve the batch until the record is alone, then isolate it.
        if record_error_in(error) {
            if batch.len() == 1 {
                let m = &batch[0];
                let reason = format!("a record of its transaction could not be written: {error}");
                tracing::error!(topic = m.topic(), partition = m.partition(), offset = m.offset(), %reason, "record isolated by halving its batch: it will be dead-lettered (class unwritable)");
                telemetry::record_isolated(m.topic(), DltClass::Unwritable.as_str());
                self.isolated.insert(
                    (m.topic().to_string(), m.partition(), m.offset()),
                    Isolated {
                        class: DltClass::Unwritable,
                        reason,
                        stage: 0,
                    },
                );
                self.batch_cap = None;
            } else {
                let cap = (batch.len() / 2).max(1);
                tracing::warn!(error = %error, cap, "a record of the batch cannot be written and no send names it: halving the batch to find it");
                self.batch_cap = Some(cap);
            }
            return;
        }
        // No send named a record. A handler call that outlived half the transaction timeout is
        // the suspect (the coordinator aborts a transaction older than its timeout): it runs
        // again in a transaction of its own. Such a transaction only begins at its first send,
        // after the handler returned, so the slow call can no longer outlive it.
        if let Some((i, took)) = slow {
            let Some(m) = batch.get(i) else { return };
            tracing::warn!(
                topic = m.topic(),
                partition = m.partition(),
                offset = m.offset(),
                millis = took.as_millis() as u64,
                timeout_ms = self.transaction_timeout.as_millis() as u64,
                "a handler call outlived half the transaction timeout in a batch that failed: running that record in a transaction of its own"
            );
            telemetry::slow_handler_call(m.topic());
            self.alone = Some((m.topic().to_string(), m.partition(), m.offset()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::KafkaError;

    #[test]
    fn only_errors_of_one_record_count_as_record_errors() {
        use rdkafka::types::RDKafkaErrorCode as C;
        let abortable = |c| SinkError::Abortable(KafkaError::MessageProduction(c));
        assert!(record_error_in(&abortable(C::MessageSizeTooLarge)));
        assert!(record_error_in(&abortable(C::UnknownTopicOrPartition)));
        assert!(!record_error_in(&abortable(C::RequestTimedOut)));
        assert!(!record_error_in(&SinkError::NoGroupMetadata));
    }

    #[test]
    fn a_batch_closed_early_caps_the_next_ones_until_they_fit_again() {
        let mut iso = Isolation::new(1000, Duration::from_secs(10));
        assert_eq!(iso.max_records(), 1000);
        iso.committed(&[], 40, true);
        assert_eq!(iso.max_records(), 40, "what fitted");
        iso.committed(&[], 40, false);
        assert_eq!(iso.max_records(), 51, "grown by a quarter");
        for _ in 0..40 {
            iso.committed(&[], 100, false);
        }
        assert_eq!(iso.max_records(), 1000, "back to the configured bound");
    }
}
