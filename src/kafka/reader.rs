//! Reading partitions to their end with `read_committed`: changelog restore, the verifier and
//! the tools all need "everything committed so far", which is subtler than the high watermark.
//!
//! "The end" is the high watermark, not the last stable offset: a transaction that committed a
//! moment ago may still have its markers in flight, and one left open by a dead producer may
//! still commit (it is waited out until `transaction.timeout.ms` aborts it, never skipped).
//! Transaction markers and aborted records occupy offsets but are never delivered, so progress
//! is tracked by the consumer's position.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::{ClientRole, KafkaClients};

/// A reader's client context: reaching a partition's end is how a read finishes, not an error
/// worth a log line.
#[derive(Debug, Default)]
pub struct ReaderContext;

impl ClientContext for ReaderContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) {
            return;
        }
        tracing::warn!(target: "librdkafka", "librdkafka: {error}: {reason}");
    }
}

impl ConsumerContext for ReaderContext {}

/// Why a read did not reach the end.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The broker refused a request.
    #[error("{topic}: {source}")]
    Kafka {
        /// The topic.
        topic: String,
        /// librdkafka's error.
        source: KafkaError,
    },
    /// The end was not reached in time.
    #[error("{topic}[{partition}] at offset {position} did not reach {end} within {seconds}s: an open transaction holds it (it ends by transaction.timeout.ms)")]
    Timeout {
        /// The topic.
        topic: String,
        /// The partition still behind.
        partition: i32,
        /// Where it got to.
        position: i64,
        /// Where it had to get.
        end: i64,
        /// The deadline.
        seconds: u64,
    },
    /// A start offset lies past the partition's end: the topic was deleted and recreated.
    #[error("{topic}[{partition}]: start offset {start} is beyond the end {end} (was the topic recreated?)")]
    BeyondEnd {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The requested start.
        start: i64,
        /// The partition's end.
        end: i64,
    },
    /// The callback refused a record.
    #[error("{0}")]
    Callback(String),
    /// The broker (or the partition's leader) could not be reached up to the deadline: unlike
    /// [`ReadError::Timeout`], waiting longer for the broker to come back may succeed.
    #[error("{topic}[{partition}]: broker unreachable for the last {seconds}s of the read: {last_error}")]
    Unreachable {
        /// The topic.
        topic: String,
        /// The partition being read (or asked for its end) at the deadline.
        partition: i32,
        /// The deadline.
        seconds: u64,
        /// The last error met.
        last_error: String,
    },
}

/// How long a broker error met while reading still counts, at the deadline, as the reason
/// the read did not finish.
const RECENT_ERROR: Duration = Duration::from_secs(10);
/// How often a read kept waiting for the broker says so.
const WAIT_LOG_EVERY: Duration = Duration::from_secs(10);

/// Whether a metadata/offset request may succeed if asked again: a topic created a moment ago
/// has no leader yet, a restarted broker is electing one, a request in flight to a broker
/// librdkafka dropped from its metadata (`DestroyBroker`: a killed broker while leaderships
/// move, issue 33's isr-shrink) must be sent to the new leader, and a leader elected a moment
/// ago answers `OffsetNotAvailable` until its high watermark caught up (an instance of
/// isr-shrink exited on it during a restore) or a stale leader epoch until the metadata is
/// refreshed.
fn retriable(e: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::NotLeaderForPartition
                | C::LeaderNotAvailable
                | C::UnknownTopicOrPartition
                | C::UnknownPartition
                | C::RequestTimedOut
                | C::BrokerNotAvailable
                | C::NetworkException
                | C::OperationTimedOut
                | C::BrokerTransportFailure
                | C::AllBrokersDown
                | C::DestroyBroker
                | C::OffsetNotAvailable
                | C::FencedLeaderEpoch
                | C::UnknownLeaderEpoch
        )
    )
}

/// A partition's watermarks, asked again on retriable errors until `deadline`.
pub fn fetch_watermarks_until<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
    deadline: Instant,
) -> Result<(i64, i64), KafkaError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match consumer.fetch_watermarks(
            topic,
            partition,
            left.clamp(Duration::from_millis(100), Duration::from_secs(10)),
        ) {
            Err(e) if retriable(&e) && Instant::now() < deadline => {
                tracing::debug!(topic, partition, error = %e, "watermarks not available yet; asking again");
                std::thread::sleep(Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

/// A partition's low and high watermarks, asked until `timeout` in short rounds, each with a
/// new client: librdkafka answers UnknownPartition from its metadata cache, as a permanent
/// error it never refreshes, when a restarting broker once listed the topic without all its
/// partitions. Callers that ask right after a broker restart use this, not a long-lived client.
pub fn watermarks(
    clients: &KafkaClients,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Result<(i64, i64), ReadError> {
    let mut client = watermark_client(clients).map_err(|source| ReadError::Kafka {
        topic: topic.to_string(),
        source,
    })?;
    let deadline = Instant::now() + timeout;
    watermarks_with(clients, &mut client, topic, partition, deadline, timeout)
}

/// [`watermarks`] with the caller's client, replaced by a new one after each failed round.
fn watermarks_with(
    clients: &KafkaClients,
    client: &mut BaseConsumer<ReaderContext>,
    topic: &str,
    partition: i32,
    deadline: Instant,
    timeout: Duration,
) -> Result<(i64, i64), ReadError> {
    let kerr = |source: KafkaError| ReadError::Kafka {
        topic: topic.to_string(),
        source,
    };
    loop {
        let round = deadline.min(Instant::now() + RECENT_ERROR);
        match fetch_watermarks_until(client, topic, partition, round) {
            Ok(w) => return Ok(w),
            Err(e) if retriable(&e) && Instant::now() < deadline => {
                tracing::warn!(topic, partition, error = %e, "the partition's end is not known yet (broker away?); asking again with a new client");
                *client = watermark_client(clients).map_err(kerr)?;
            }
            Err(e) if retriable(&e) => {
                return Err(ReadError::Unreachable {
                    topic: topic.to_string(),
                    partition,
                    seconds: timeout.as_secs(),
                    last_error: e.to_string(),
                })
            }
            Err(e) => return Err(kerr(e)),
        }
    }
}

/// Reads `topic`'s `partitions`, each from its start offset (`None` = log start), to the high
/// watermark, calling `on_record` for every committed record. Returns the end offsets reached.
pub fn read_to_end<F>(
    clients: &KafkaClients,
    topic: &str,
    starts: &BTreeMap<i32, Option<i64>>,
    timeout: Duration,
    on_record: F,
) -> Result<BTreeMap<i32, i64>, ReadError>
where
    F: FnMut(&BorrowedMessage<'_>) -> Result<(), String>,
{
    read_until(clients, topic, starts, &BTreeMap::new(), timeout, on_record)
}

/// As [`read_to_end`], but a partition listed in `until` is read only up to that offset (at
/// most its end): `on_record` never sees a record at or past it. A table restores this way up
/// to the group's committed offset of its topic, no further: the records after it are the
/// table's input still to be processed, in order with the stream.
pub fn read_until<F>(
    clients: &KafkaClients,
    topic: &str,
    starts: &BTreeMap<i32, Option<i64>>,
    until: &BTreeMap<i32, i64>,
    timeout: Duration,
    mut on_record: F,
) -> Result<BTreeMap<i32, i64>, ReadError>
where
    F: FnMut(&BorrowedMessage<'_>) -> Result<(), String>,
{
    let bounded = |p: i32, high: i64| until.get(&p).map_or(high, |u| high.min(*u));
    let kerr = |source: KafkaError| ReadError::Kafka {
        topic: topic.to_string(),
        source,
    };
    let deadline = Instant::now() + timeout;
    let mut watermarks = watermark_client(clients).map_err(kerr)?;
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    let mut end: BTreeMap<i32, i64> = BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    for (&p, start) in starts {
        let (low, high) = watermarks_with(clients, &mut watermarks, topic, p, deadline, timeout)?;
        if let Some(s) = start {
            if *s > high {
                return Err(ReadError::BeyondEnd {
                    topic: topic.to_string(),
                    partition: p,
                    start: *s,
                    end: high,
                });
            }
        }
        let from = start.unwrap_or(low).max(low);
        let high = bounded(p, high);
        next.insert(p, from);
        end.insert(p, high);
        if from < high {
            tpl.add_partition_offset(topic, p, Offset::Offset(from))
                .map_err(kerr)?;
        }
    }
    if tpl.count() == 0 {
        return Ok(next);
    }
    // Created once the broker answered the watermark requests: a client that starts while the
    // broker is away may keep the partitions it was assigned in an error state.
    let consumer: BaseConsumer<ReaderContext> = clients
        .config(ClientRole::Reader)
        .create_with_context(ReaderContext)
        .map_err(kerr)?;
    consumer.assign(&tpl).map_err(kerr)?;
    let mut last_refresh = Instant::now();
    // The last broker error the read met, and when the wait for the broker was last logged.
    let mut last_error: Option<(Instant, String)> = None;
    let mut last_log = Instant::now();
    loop {
        let behind: Vec<i32> = next
            .iter()
            .filter(|(p, n)| **n < end.get(p).copied().unwrap_or(0))
            .map(|(p, _)| *p)
            .collect();
        if behind.is_empty() {
            return Ok(next);
        }
        if Instant::now() >= deadline {
            let p = behind[0];
            let recent = last_error
                .as_ref()
                .filter(|(at, _)| at.elapsed() < RECENT_ERROR)
                .map(|(_, e)| e.clone());
            // Not reading because the broker is away, or because a transaction holds the end?
            let away = recent.or_else(|| {
                let probe = watermark_client(clients).ok()?;
                match probe.fetch_watermarks(topic, p, Duration::from_secs(5)) {
                    Err(e) if retriable(&e) => Some(e.to_string()),
                    _ => None,
                }
            });
            if let Some(last_error) = away {
                return Err(ReadError::Unreachable {
                    topic: topic.to_string(),
                    partition: p,
                    seconds: timeout.as_secs(),
                    last_error,
                });
            }
            return Err(ReadError::Timeout {
                topic: topic.to_string(),
                partition: p,
                position: next.get(&p).copied().unwrap_or_default(),
                end: end.get(&p).copied().unwrap_or_default(),
                seconds: timeout.as_secs(),
            });
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                use rdkafka::Message;
                if until.get(&m.partition()).is_some_and(|u| m.offset() >= *u) {
                    let slot = next.entry(m.partition()).or_default();
                    *slot = (*slot).max(m.offset() + 1);
                    continue;
                }
                on_record(&m).map_err(ReadError::Callback)?;
                let slot = next.entry(m.partition()).or_default();
                *slot = (*slot).max(m.offset() + 1);
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {
                if let Ok(pos) = consumer.position() {
                    for e in pos.elements_for_topic(topic) {
                        if let Offset::Offset(o) = e.offset() {
                            let slot = next.entry(e.partition()).or_default();
                            *slot = (*slot).max(o);
                        }
                    }
                }
                if last_refresh.elapsed() > Duration::from_secs(1) {
                    for p in &behind {
                        if let Ok((_, h)) =
                            watermarks.fetch_watermarks(topic, *p, Duration::from_secs(5))
                        {
                            end.insert(*p, bounded(*p, h));
                        }
                    }
                    last_refresh = Instant::now();
                }
            }
            // The broker going away mid-read (a restart) is waited out until the deadline.
            Some(Err(e)) if is_transient(&e) => {
                if last_log.elapsed() >= WAIT_LOG_EVERY {
                    tracing::warn!(error = %e, topic, "broker unavailable while reading; waiting");
                    last_log = Instant::now();
                }
                last_error = Some((Instant::now(), e.to_string()));
                std::thread::sleep(Duration::from_millis(250));
            }
            Some(Err(e)) => return Err(kerr(e)),
        }
    }
}

/// A read_uncommitted client for watermarks: asked by a read_committed one, the broker
/// answers the last stable offset, which stops *before* a transaction whose markers are still
/// being written — and a restore that ended there would miss committed writes.
fn watermark_client(clients: &KafkaClients) -> Result<BaseConsumer<ReaderContext>, KafkaError> {
    clients
        .config(ClientRole::Reader)
        .set("isolation.level", "read_uncommitted")
        .create_with_context(ReaderContext)
}

/// The high watermark of every `(topic, partition)` of `partitions` (Kafka's `ListOffsets` for
/// the latest offset, `read_uncommitted`: one request per leader for all of them), within
/// `timeout`. For deciding, before any consumer is created per partition, which changelogs hold
/// nothing at all beyond a store's checkpoint; a partition left out of the answer or any error
/// leaves the caller on its slow path.
///
/// Not the last stable offset: after a commit whose outcome is unknown, that transaction may
/// still be open, its records beyond the last stable offset and committed later. A store whose
/// checkpoint equals the last stable offset can still miss them (a trial of that, `d95ce96`,
/// failed `broker-pause-one` and `isr-shrink` with `state_mismatches`); one at the high
/// watermark cannot, as the records of a transaction are acknowledged before its commit is
/// asked for.
pub fn end_offsets(
    clients: &KafkaClients,
    partitions: &[(String, i32)],
    timeout: Duration,
) -> Result<BTreeMap<(String, i32), i64>, KafkaError> {
    if partitions.is_empty() {
        return Ok(BTreeMap::new());
    }
    let consumer: BaseConsumer<ReaderContext> = clients
        .config(ClientRole::Reader)
        .set("isolation.level", "read_uncommitted")
        .create_with_context(ReaderContext)?;
    let mut tpl = TopicPartitionList::new();
    for (topic, partition) in partitions {
        // A timestamp of -1 (`Offset::End`) asks for the latest offset.
        tpl.add_partition_offset(topic, *partition, Offset::End)?;
    }
    // Right after the changelogs were created the client's metadata may not know their
    // leaders yet (`NotLeaderForPartition` for the whole request): asked again until `timeout`.
    let deadline = Instant::now() + timeout;
    let answer = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match consumer.offsets_for_times(tpl.clone(), left.max(Duration::from_millis(100))) {
            Err(e) if retriable(&e) && Instant::now() < deadline => {
                tracing::debug!(error = %e, "end offsets not available yet; asking again");
                std::thread::sleep(Duration::from_millis(200));
            }
            r => break r?,
        }
    };
    Ok(answer
        .elements()
        .iter()
        .filter(|e| e.error().is_ok())
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some(((e.topic().to_string(), e.partition()), o)),
            _ => None,
        })
        .collect())
}

/// Errors a restarting or briefly unreachable broker produces, which a read outlives.
fn is_transient(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::BrokerTransportFailure
                | C::AllBrokersDown
                | C::RequestTimedOut
                | C::OperationTimedOut
                | C::NotLeaderForPartition
                | C::LeaderNotAvailable
                | C::UnknownPartition
                | C::DestroyBroker
                | C::OffsetNotAvailable
                | C::FencedLeaderEpoch
                | C::UnknownLeaderEpoch
        )
    )
}

/// Partition count of `topic`.
pub fn partition_count(
    clients: &KafkaClients,
    topic: &str,
    timeout: Duration,
) -> Result<i32, ReadError> {
    let kerr = |source: KafkaError| ReadError::Kafka {
        topic: topic.to_string(),
        source,
    };
    let consumer: BaseConsumer = clients.config(ClientRole::Reader).create().map_err(kerr)?;
    let md = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(kerr)?;
    let n = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .map(|t| t.partitions().len() as i32)
        .unwrap_or(0);
    Ok(n)
}

/// Reads every committed record of `topic` (all partitions, from the start), handing each to
/// `on_record`; its error stops the read. Needs a broker:
///
/// ```no_run
/// use std::time::Duration;
/// use eosflow::kafka::{read_all, KafkaClients};
///
/// # fn f(clients: &KafkaClients) -> Result<(), eosflow::kafka::ReadError> {
/// let mut n = 0;
/// read_all(clients, "orders.DLT", Duration::from_secs(10), |_message| {
///     n += 1;
///     Ok(())
/// })?;
/// println!("{n} dead letters");
/// # Ok(())
/// # }
/// ```
pub fn read_all<F>(
    clients: &KafkaClients,
    topic: &str,
    timeout: Duration,
    on_record: F,
) -> Result<(), ReadError>
where
    F: FnMut(&BorrowedMessage<'_>) -> Result<(), String>,
{
    let n = partition_count(clients, topic, timeout)?;
    let starts: BTreeMap<i32, Option<i64>> = (0..n).map(|p| (p, None)).collect();
    read_to_end(clients, topic, &starts, timeout, on_record)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33, isr-shrink (long run): a restore right after a leader's `kill -9` met
    /// `Meta data fetch error: DestroyBroker` (a request in flight to a broker librdkafka had
    /// dropped from its metadata) and the instance exited. It is asked again now.
    #[test]
    fn a_request_to_a_broker_dropped_from_the_metadata_is_asked_again() {
        let e = KafkaError::MetadataFetch(RDKafkaErrorCode::DestroyBroker);
        assert!(retriable(&e), "{e}");
        assert!(is_transient(&e), "{e}");
        assert!(!retriable(&KafkaError::MetadataFetch(
            RDKafkaErrorCode::TopicAuthorizationFailed
        )));
    }

    /// isr-shrink (short, local run): a restore asked a leader elected a moment before for the
    /// changelog's watermarks and got `Meta data fetch error: OffsetNotAvailable (Broker:
    /// Leader high watermark is not caught up)`; the instance exited. It is asked again now.
    #[test]
    fn a_new_leader_whose_high_watermark_is_not_caught_up_is_asked_again() {
        let e = KafkaError::MetadataFetch(RDKafkaErrorCode::OffsetNotAvailable);
        assert!(retriable(&e), "{e}");
        assert!(is_transient(&e), "{e}");
    }
}
