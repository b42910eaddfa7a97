//! The errors a simulated call returns, one variant per Kafka protocol error code.
//!
//! The variants are named after Kafka's `Errors` enum so that code written against a real
//! client maps them one to one (`code()` gives the protocol number). The classification
//! methods answer the three questions a caller of a transactional client must ask after a
//! failure: may I retry ([`SimError::is_retriable`]), must I give up this client instance
//! ([`SimError::is_fatal`]), and do I know whether the call took effect
//! ([`SimError::outcome_unknown`]).

use crate::faults::Call;

/// A failed call against the simulated cluster: exists so that callers can handle the same
/// error classes they would meet against a real broker, by the same names and codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// `OFFSET_OUT_OF_RANGE` (1): a fetch position outside `[log start, high watermark]`
    /// with no reset policy, or `delete_records` past the high watermark.
    #[error("offset out of range: {0}")]
    OffsetOutOfRange(String),
    /// `UNKNOWN_TOPIC_OR_PARTITION` (3): the topic or partition does not exist (topics are
    /// never auto-created).
    #[error("unknown topic or partition: {0}")]
    UnknownTopicOrPartition(String),
    /// `NOT_LEADER_OR_FOLLOWER` (6): an injected leadership change; retriable, no effect.
    #[error("not leader or follower: {0}")]
    NotLeaderOrFollower(String),
    /// `REQUEST_TIMED_OUT` (7): the call timed out. Whether it took effect is unknowable to
    /// the caller when the call writes (see [`SimError::outcome_unknown`]).
    #[error("request timed out: {call:?}")]
    RequestTimedOut {
        /// The call that timed out: it decides whether the outcome is unknown.
        call: Call,
    },
    /// `COORDINATOR_LOAD_IN_PROGRESS` (14): retriable, no effect.
    #[error("coordinator load in progress")]
    CoordinatorLoadInProgress,
    /// `NOT_COORDINATOR` (16): retriable, no effect.
    #[error("not coordinator")]
    NotCoordinator,
    /// `ILLEGAL_GENERATION` (22): an offset commit (plain or transactional) named a generation
    /// the group has moved past: the caller is a zombie of an earlier assignment.
    #[error("illegal generation: {0}")]
    IllegalGeneration(String),
    /// `INCONSISTENT_GROUP_PROTOCOL` (23): a member joined with a rebalance protocol the group
    /// does not use.
    #[error("inconsistent group protocol: {0}")]
    InconsistentGroupProtocol(String),
    /// `UNKNOWN_MEMBER_ID` (25): the member is no longer in the group (left, or its session
    /// expired).
    #[error("unknown member id: {0}")]
    UnknownMemberId(String),
    /// `REBALANCE_IN_PROGRESS` (27): retriable.
    #[error("rebalance in progress")]
    RebalanceInProgress,
    /// `TOPIC_ALREADY_EXISTS` (36).
    #[error("topic already exists: {0}")]
    TopicAlreadyExists(String),
    /// `INVALID_PARTITIONS` (37): a topic needs at least one partition.
    #[error("invalid partitions: {0}")]
    InvalidPartitions(String),
    /// `INVALID_REQUEST` (42): a call the client should never make (also used for the
    /// client-side state errors a real client raises as `IllegalStateException`).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// `INVALID_PRODUCER_EPOCH` (47): the coordinator aborted this producer's transaction on
    /// its timeout and bumped the epoch; the instance must `init_transactions` again.
    #[error("invalid producer epoch: {0}")]
    InvalidProducerEpoch(String),
    /// `INVALID_TXN_STATE` (48): a transactional call out of order (send without begin,
    /// commit with no transaction open, …).
    #[error("invalid transaction state: {0}")]
    InvalidTxnState(String),
    /// `KAFKA_STORAGE_ERROR` (56): an injected fetch error for one partition; retriable.
    #[error("kafka storage error: {0}")]
    KafkaStorageError(String),
    /// `FENCED_INSTANCE_ID` (82): another consumer took over this static member's
    /// `group.instance.id`.
    #[error("fenced instance id: {0}")]
    FencedInstanceId(String),
    /// `INVALID_RECORD` (87): e.g. a keyless record sent to a compacted topic.
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// `UNSTABLE_OFFSET_COMMIT` (88): a transaction holding offsets for the partition is
    /// still open; retry after it ends (KIP-447).
    #[error("unstable offset commit: {0}")]
    UnstableOffsetCommit(String),
    /// `PRODUCER_FENCED` (90): a newer instance with the same `transactional.id` exists.
    #[error("producer fenced: {0}")]
    ProducerFenced(String),
    /// `TRANSACTION_ABORTABLE` (120): a send in this transaction failed; only
    /// `abort_transaction` is allowed.
    #[error("transaction abortable: {0}")]
    TransactionAbortable(String),
}

impl SimError {
    /// Kafka's protocol error code: exists so logs and assertions can name the exact code a
    /// real broker would have sent.
    pub fn code(&self) -> i16 {
        match self {
            Self::OffsetOutOfRange(_) => 1,
            Self::UnknownTopicOrPartition(_) => 3,
            Self::NotLeaderOrFollower(_) => 6,
            Self::RequestTimedOut { .. } => 7,
            Self::CoordinatorLoadInProgress => 14,
            Self::NotCoordinator => 16,
            Self::IllegalGeneration(_) => 22,
            Self::InconsistentGroupProtocol(_) => 23,
            Self::UnknownMemberId(_) => 25,
            Self::RebalanceInProgress => 27,
            Self::TopicAlreadyExists(_) => 36,
            Self::InvalidPartitions(_) => 37,
            Self::InvalidRequest(_) => 42,
            Self::InvalidProducerEpoch(_) => 47,
            Self::InvalidTxnState(_) => 48,
            Self::KafkaStorageError(_) => 56,
            Self::FencedInstanceId(_) => 82,
            Self::InvalidRecord(_) => 87,
            Self::UnstableOffsetCommit(_) => 88,
            Self::ProducerFenced(_) => 90,
            Self::TransactionAbortable(_) => 120,
        }
    }

    /// Whether the same call may simply be retried (Kafka's `RetriableException` classes):
    /// exists so a runtime's retry loop can be tested against injected transient faults.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            Self::UnknownTopicOrPartition(_)
                | Self::NotLeaderOrFollower(_)
                | Self::RequestTimedOut { .. }
                | Self::CoordinatorLoadInProgress
                | Self::NotCoordinator
                | Self::RebalanceInProgress
                | Self::KafkaStorageError(_)
                | Self::UnstableOffsetCommit(_)
        )
    }

    /// Whether this client instance is finished: a fenced producer or static member must be
    /// closed (a producer fenced by a transaction timeout may `init_transactions` again).
    /// Exists so a runtime can tell "retry" from "step down" without matching variants.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Self::ProducerFenced(_) | Self::InvalidProducerEpoch(_) | Self::FencedInstanceId(_)
        )
    }

    /// Whether the caller cannot know if the call took effect: a timeout of a call that
    /// writes (send, commit, abort, offsets, …). True whether or not the simulator actually
    /// applied the effect, because a real client cannot tell the two apart; it exists so the
    /// runtime is forced down its "unknown outcome" path (e.g. re-read committed offsets).
    pub fn outcome_unknown(&self) -> bool {
        match self {
            Self::RequestTimedOut { call } => call.has_effect(),
            _ => false,
        }
    }

    /// Whether the open transaction can only be aborted: exists because after a failed send a
    /// real transactional producer refuses to commit (the send may or may not be in the log).
    pub fn requires_abort(&self) -> bool {
        matches!(self, Self::TransactionAbortable(_))
    }
}
