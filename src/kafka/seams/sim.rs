//! The in-memory Kafka (`crates/simkafka`) behind [`GroupConsumer`]: what the group member's
//! unit tests run on, with faults injected at any call and time that moves only when a test
//! moves it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use eosflow_simkafka as sim;
use rdkafka::consumer::CommitMode;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders, OwnedMessage, Timestamp};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::Offset;

use super::{ConsumerSupplier, GroupConsumer, GroupEvent, GroupMetadata, GroupSettings, Pair};

/// Creates group consumers of one simulated cluster.
pub(crate) struct SimSupplier {
    pub(crate) cluster: sim::Cluster,
}

impl ConsumerSupplier for SimSupplier {
    fn group_consumer(
        &self,
        settings: &GroupSettings,
    ) -> Result<Box<dyn GroupConsumer>, KafkaError> {
        let consumer = self.cluster.consumer(sim::ConsumerConfig {
            group_id: settings.group.clone(),
            isolation: sim::Isolation::ReadCommitted,
            group_instance_id: settings.instance.clone(),
            protocol: sim::RebalanceProtocol::Eager,
            session_timeout_ms: i64::try_from(settings.session_timeout.as_millis())
                .unwrap_or(i64::MAX),
            auto_offset_reset: sim::AutoOffsetReset::Earliest,
            // One record per poll, as the trait hands them out: nothing fetched is held here
            // across a seek, pause or revocation (librdkafka drops such records itself).
            max_poll_records: 1,
            client_id: settings.client_id.clone().unwrap_or_default(),
        });
        Ok(Box::new(SimGroupConsumer {
            cluster: self.cluster.clone(),
            state: Mutex::new(State {
                consumer,
                events: Vec::new(),
                records: VecDeque::new(),
                errors: VecDeque::new(),
                noted: BTreeMap::new(),
            }),
        }))
    }
}

struct State {
    consumer: sim::Consumer,
    events: Vec<GroupEvent>,
    records: VecDeque<sim::Record>,
    /// Per-partition fetch errors of the last poll not reported yet: one per `poll` call, as
    /// librdkafka hands consumer errors out.
    errors: VecDeque<KafkaError>,
    noted: BTreeMap<Pair, i64>,
}

/// A simulated group consumer behind the trait.
pub(crate) struct SimGroupConsumer {
    cluster: sim::Cluster,
    state: Mutex<State>,
}

impl SimGroupConsumer {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Kafka's error code for a simulated error: the loop decides on codes.
pub(crate) fn code_of(e: &sim::SimError) -> RDKafkaErrorCode {
    use sim::SimError as S;
    use RDKafkaErrorCode as C;
    match e {
        S::OffsetOutOfRange(_) => C::OffsetOutOfRange,
        S::UnknownTopicOrPartition(_) => C::UnknownTopicOrPartition,
        S::NotLeaderOrFollower(_) => C::NotLeaderForPartition,
        S::RequestTimedOut { .. } => C::RequestTimedOut,
        S::CoordinatorLoadInProgress => C::CoordinatorLoadInProgress,
        S::NotCoordinator => C::NotCoordinator,
        S::IllegalGeneration(_) => C::IllegalGeneration,
        S::InconsistentGroupProtocol(_) => C::InconsistentGroupProtocol,
        S::UnknownMemberId(_) => C::UnknownMemberId,
        S::RebalanceInProgress => C::RebalanceInProgress,
        S::TopicAlreadyExists(_) => C::TopicAlreadyExists,
        S::InvalidPartitions(_) => C::InvalidPartitions,
        S::InvalidProducerEpoch(_) => C::InvalidProducerEpoch,
        S::InvalidTxnState(_) => C::InvalidTransactionalState,
        S::KafkaStorageError(_) => C::KafkaStorageError,
        S::FencedInstanceId(_) => C::FencedInstanceId,
        S::InvalidRecord(_) => C::InvalidRecord,
        S::UnstableOffsetCommit(_) => C::UnstableOffsetCommit,
        S::ProducerFenced(_) => C::ProducerFenced,
        _ => C::InvalidRequest,
    }
}

fn kafka_error(e: &sim::SimError) -> KafkaError {
    KafkaError::Global(code_of(e))
}

fn message_of(r: sim::Record) -> OwnedMessage {
    let headers = (!r.headers.is_empty()).then(|| {
        r.headers
            .iter()
            .fold(OwnedHeaders::new(), |hs, (key, value)| {
                hs.insert(Header {
                    key,
                    value: value.as_deref(),
                })
            })
    });
    OwnedMessage::new(
        r.value,
        r.key,
        r.topic,
        Timestamp::CreateTime(r.timestamp_ms),
        r.partition,
        r.offset,
        headers,
    )
}

fn pairs(events: Vec<sim::GroupEvent>) -> impl Iterator<Item = GroupEvent> {
    events.into_iter().map(|e| match e {
        sim::GroupEvent::Assigned(p) => GroupEvent::Assigned(p),
        // A lost partition is revoked too: the loop drops its work either way.
        sim::GroupEvent::Revoked(p) | sim::GroupEvent::Lost(p) => GroupEvent::Revoked(p),
    })
}

impl GroupConsumer for SimGroupConsumer {
    fn topics(&self, _: Duration) -> Result<BTreeMap<String, usize>, KafkaError> {
        Ok(self.cluster.topics())
    }

    fn group_names(&self, _: Duration) -> Result<BTreeSet<String>, KafkaError> {
        self.cluster
            .admin()
            .list_groups()
            .map(|gs| gs.into_iter().collect())
            .map_err(|e| kafka_error(&e))
    }

    fn subscribe(&self, topics: &[&str]) -> Result<(), KafkaError> {
        self.state().consumer.subscribe(topics);
        Ok(())
    }

    fn unsubscribe(&self) {
        self.state().consumer.unsubscribe();
    }

    fn poll(&self, _: Duration) -> Option<Result<OwnedMessage, KafkaError>> {
        let mut state = self.state();
        if let Some(e) = state.errors.pop_front() {
            return Some(Err(e));
        }
        if let Some(r) = state.records.pop_front() {
            return Some(Ok(message_of(r)));
        }
        match state.consumer.poll() {
            Err(e) => Some(Err(kafka_error(&e))),
            Ok(poll) => {
                let rebalanced = !poll.events.is_empty();
                state.events.extend(pairs(poll.events));
                state.records.extend(poll.records);
                state
                    .errors
                    .extend(poll.errors.iter().map(|(_, e)| kafka_error(e)));
                if let Some(e) = state.errors.pop_front() {
                    return Some(Err(e));
                }
                if rebalanced {
                    // The rebalance first, as librdkafka's callbacks run inside the poll
                    // before it returns a record: the loop acts on it, then polls again.
                    return None;
                }
                state.records.pop_front().map(|r| Ok(message_of(r)))
            }
        }
    }

    fn take_events(&self) -> Vec<GroupEvent> {
        std::mem::take(&mut self.state().events)
    }

    fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)> {
        None
    }

    fn pause(&self, parts: &[Pair]) -> Result<Vec<(Pair, KafkaError)>, KafkaError> {
        let mut state = self.state();
        state.records.retain(|r| {
            !parts
                .iter()
                .any(|(t, p)| *t == r.topic && *p == r.partition)
        });
        state.consumer.pause(parts);
        Ok(Vec::new())
    }

    fn resume(&self, parts: &[Pair]) -> Result<Vec<(Pair, KafkaError)>, KafkaError> {
        self.state().consumer.resume(parts);
        Ok(Vec::new())
    }

    fn seek(
        &self,
        to: &[(String, i32, Offset)],
        _: Duration,
    ) -> Result<Vec<(Pair, KafkaError)>, KafkaError> {
        let mut state = self.state();
        let mut wanted = Vec::new();
        for (t, p, o) in to {
            let at = match o {
                Offset::Offset(o) => *o,
                Offset::Beginning => self.cluster.log_start_offset(t, *p).unwrap_or(0),
                Offset::End => self.cluster.last_stable_offset(t, *p).unwrap_or(0),
                other => {
                    return Err(KafkaError::Seek(format!("{other:?} is not simulated")));
                }
            };
            wanted.push((t.clone(), *p, at));
        }
        state.records.retain(|r| {
            !to.iter()
                .any(|(t, p, _)| *t == r.topic && *p == r.partition)
        });
        Ok(state
            .consumer
            .seek(&wanted)
            .into_iter()
            .filter_map(|(pair, r)| r.err().map(|e| (pair, kafka_error(&e))))
            .collect())
    }

    fn committed(
        &self,
        parts: &[Pair],
        _: Duration,
    ) -> Result<Vec<(Pair, Result<Option<i64>, KafkaError>)>, KafkaError> {
        let got = self
            .state()
            .consumer
            .committed(parts, true)
            .map_err(|e| kafka_error(&e))?;
        Ok(got.into_iter().map(|(pair, at)| (pair, Ok(at))).collect())
    }

    fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        self.state().consumer.position(topic, partition)
    }

    fn watermarks(
        &self,
        topic: &str,
        partition: i32,
        _: Duration,
    ) -> Result<(i64, i64), KafkaError> {
        let (low, _) = self
            .state()
            .consumer
            .watermarks(topic, partition)
            .map_err(|e| kafka_error(&e))?;
        // A read_committed consumer's ListOffsets answers the last stable offset.
        let stable =
            self.cluster
                .last_stable_offset(topic, partition)
                .ok_or(KafkaError::Global(
                    RDKafkaErrorCode::UnknownTopicOrPartition,
                ))?;
        Ok((low, stable))
    }

    fn generation(&self) -> Option<(i32, String)> {
        self.state()
            .consumer
            .group_metadata()
            .map(|m| (m.generation_id, m.member_id))
    }

    fn group_metadata(&self) -> Option<GroupMetadata> {
        self.state()
            .consumer
            .group_metadata()
            .map(|m| GroupMetadata::Member {
                group_id: m.group_id,
                generation_id: m.generation_id,
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
            })
    }

    fn commit(&self, offsets: &[(String, i32, i64)], _: CommitMode) -> Result<(), KafkaError> {
        self.state()
            .consumer
            .commit(offsets)
            .map_err(|e| KafkaError::ConsumerCommit(code_of(&e)))
    }

    fn note_committed(&self, next: &[(Pair, i64)]) {
        self.state().noted.extend(next.iter().cloned());
    }

    fn noted_committed(&self) -> Vec<(Pair, i64)> {
        self.state()
            .noted
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}
