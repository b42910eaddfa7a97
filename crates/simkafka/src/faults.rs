//! Fault injection: every client call passes one checkpoint that may fail it.
//!
//! A checkpoint names the [`Call`], the client and the partitions the call touches. Faults
//! come from two sources, tried in this order after a paused broker:
//! 1. scripted faults ([`Faults::once`], [`Faults::nth`], optionally for one client), which
//!    fire at an exact call, and
//! 2. random faults ([`Faults::random`]), drawn from the cluster's seeded SplitMix64 among the
//!    allowed kinds that make sense for the call (see [`FaultKind`]).
//!
//! Every injected fault is appended to the trace ([`crate::Cluster::trace`]) with the virtual
//! time, so a failing seed can be explained. Nothing else draws from the generator: the same
//! seed and the same sequence of calls give the same faults.
//!
//! Not modelled: network partitions between particular clients and brokers (a fault applies
//! to one call, or to every call while the broker is paused), slow calls (a call either
//! returns at once or fails), and reordering.

use std::collections::VecDeque;

use crate::rng::SplitMix64;
use crate::{SimError, TopicPartition};

/// The client calls that pass a checkpoint: exists so faults can be aimed at one kind of call
/// (and so a timeout knows whether its outcome is unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Call {
    /// `Producer::send`.
    Send,
    /// `Producer::flush`.
    Flush,
    /// `Producer::init_transactions`.
    InitTransactions,
    /// `Producer::begin_transaction`.
    BeginTransaction,
    /// `Producer::send_offsets_to_transaction`.
    SendOffsets,
    /// `Producer::commit_transaction`.
    CommitTransaction,
    /// `Producer::abort_transaction`.
    AbortTransaction,
    /// `Consumer::poll` (join, heartbeat and fetch).
    Poll,
    /// `Consumer::seek`.
    Seek,
    /// `Consumer::committed`.
    Committed,
    /// `Consumer::commit`.
    Commit,
    /// `Admin::metadata`.
    Metadata,
    /// `Admin::create_topics`.
    CreateTopics,
    /// `Admin::delete_records`.
    DeleteRecords,
    /// `Admin::list_offsets` and `Consumer::watermarks`.
    ListOffsets,
    /// `Admin::describe_group`.
    DescribeGroup,
    /// `Admin::list_groups`.
    ListGroups,
}

impl Call {
    /// Whether the call changes the cluster, so that a timeout leaves its outcome unknown.
    pub fn has_effect(self) -> bool {
        matches!(
            self,
            Call::Send
                | Call::InitTransactions
                | Call::SendOffsets
                | Call::CommitTransaction
                | Call::AbortTransaction
                | Call::Commit
                | Call::CreateTopics
                | Call::DeleteRecords
        )
    }

    fn uses_coordinator(self) -> bool {
        matches!(
            self,
            Call::InitTransactions
                | Call::SendOffsets
                | Call::CommitTransaction
                | Call::AbortTransaction
                | Call::Poll
                | Call::Committed
                | Call::Commit
                | Call::DescribeGroup
        )
    }
}

/// What an injected fault does to the call it hits: the failure modes an exactly-once
/// runtime must survive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The call fails with `RequestTimedOut` and has no effect.
    Timeout,
    /// The call takes effect but fails with `RequestTimedOut` (a send is in the log, a commit
    /// is committed). On calls without effect it is a plain [`Fault::Timeout`].
    TimeoutAfterEffect,
    /// The call fails with `NotCoordinator`, no effect.
    NotCoordinator,
    /// The call fails with `CoordinatorLoadInProgress`, no effect.
    CoordinatorLoadInProgress,
    /// `NotLeaderOrFollower` for one partition (`None`: one of the call's partitions): a send
    /// fails, a poll skips the partition and reports it in [`crate::Poll::errors`], no effect.
    NotLeader(Option<TopicPartition>),
    /// The transaction coordinator bumps the producer's epoch as if another instance had
    /// called `init_transactions` (its open transaction is aborted); the call fails with
    /// `ProducerFenced`.
    ProducerFenced,
    /// One partition's seek fails (`None`: one of the seek's partitions); its position does
    /// not change.
    SeekFailed(Option<TopicPartition>),
    /// A poll skips one partition (`None`: one of the assigned partitions) and reports
    /// `KafkaStorageError` for it in [`crate::Poll::errors`]; its position does not move, so
    /// no record is lost.
    FetchError(Option<TopicPartition>),
    /// Every call fails with `RequestTimedOut` until virtual time has advanced `ms` (the
    /// coordinators' timers keep running: a long pause aborts open transactions).
    BrokerPause {
        /// How long the broker stays unreachable, in virtual milliseconds.
        ms: i64,
    },
    /// The consumer's member is removed from its group as if its session had timed out; the
    /// call then proceeds (a poll reports the partitions lost and rejoins, a commit fails
    /// with `UnknownMemberId`).
    SessionExpired,
}

impl Fault {
    /// The kind of this fault (its variant without data).
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::Timeout => FaultKind::Timeout,
            Fault::TimeoutAfterEffect => FaultKind::TimeoutAfterEffect,
            Fault::NotCoordinator => FaultKind::NotCoordinator,
            Fault::CoordinatorLoadInProgress => FaultKind::CoordinatorLoadInProgress,
            Fault::NotLeader(_) => FaultKind::NotLeader,
            Fault::ProducerFenced => FaultKind::ProducerFenced,
            Fault::SeekFailed(_) => FaultKind::SeekFailed,
            Fault::FetchError(_) => FaultKind::FetchError,
            Fault::BrokerPause { .. } => FaultKind::BrokerPause,
            Fault::SessionExpired => FaultKind::SessionExpired,
        }
    }

    /// The error a call reports for this fault when the call gives it no special meaning.
    pub(crate) fn error(&self, call: Call) -> SimError {
        let tp = |p: &Option<TopicPartition>| match p {
            Some((t, p)) => format!("{t}-{p}"),
            None => String::from("injected"),
        };
        match self {
            Fault::Timeout | Fault::TimeoutAfterEffect | Fault::BrokerPause { .. } => {
                SimError::RequestTimedOut { call }
            }
            Fault::NotCoordinator => SimError::NotCoordinator,
            Fault::CoordinatorLoadInProgress => SimError::CoordinatorLoadInProgress,
            Fault::NotLeader(p) => SimError::NotLeaderOrFollower(tp(p)),
            Fault::ProducerFenced => SimError::ProducerFenced(String::from("injected")),
            Fault::SeekFailed(_) => SimError::RequestTimedOut { call },
            Fault::FetchError(p) => SimError::KafkaStorageError(tp(p)),
            Fault::SessionExpired => SimError::UnknownMemberId(String::from("session expired")),
        }
    }

    fn partition(&self) -> Option<&TopicPartition> {
        match self {
            Fault::NotLeader(p) | Fault::SeekFailed(p) | Fault::FetchError(p) => p.as_ref(),
            _ => None,
        }
    }

    /// Fills in the partition a partition-scoped fault hits when it names none.
    fn resolve(self, partitions: &[TopicPartition], pick: impl FnOnce(usize) -> usize) -> Self {
        let choose = |p: Option<TopicPartition>| {
            p.or_else(|| partitions.get(pick(partitions.len())).cloned())
        };
        match self {
            Fault::NotLeader(p) => Fault::NotLeader(choose(p)),
            Fault::SeekFailed(p) => Fault::SeekFailed(choose(p)),
            Fault::FetchError(p) => Fault::FetchError(choose(p)),
            other => other,
        }
    }
}

/// The kinds of [`Fault`], for random injection: exists so a test can allow a set of kinds
/// without choosing their data. A random fault is drawn only among the allowed kinds that
/// apply to the call: timeouts and pauses to every call, `TimeoutAfterEffect` to calls with
/// an effect, coordinator errors to coordinator calls, `NotLeader` to calls with partitions
/// (send, poll, list offsets, delete records), `ProducerFenced` to a transactional
/// producer's calls, `SeekFailed` to seeks, `FetchError` to polls, `SessionExpired` to polls
/// and commits of a group member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// See [`Fault::Timeout`].
    Timeout,
    /// See [`Fault::TimeoutAfterEffect`].
    TimeoutAfterEffect,
    /// See [`Fault::NotCoordinator`].
    NotCoordinator,
    /// See [`Fault::CoordinatorLoadInProgress`].
    CoordinatorLoadInProgress,
    /// See [`Fault::NotLeader`].
    NotLeader,
    /// See [`Fault::ProducerFenced`].
    ProducerFenced,
    /// See [`Fault::SeekFailed`].
    SeekFailed,
    /// See [`Fault::FetchError`].
    FetchError,
    /// See [`Fault::BrokerPause`] (random pauses last 1 ms to `max_random_pause_ms`).
    BrokerPause,
    /// See [`Fault::SessionExpired`].
    SessionExpired,
}

impl FaultKind {
    /// Every kind, for `random(rate, FaultKind::ALL)`.
    pub const ALL: &'static [FaultKind] = &[
        FaultKind::Timeout,
        FaultKind::TimeoutAfterEffect,
        FaultKind::NotCoordinator,
        FaultKind::CoordinatorLoadInProgress,
        FaultKind::NotLeader,
        FaultKind::ProducerFenced,
        FaultKind::SeekFailed,
        FaultKind::FetchError,
        FaultKind::BrokerPause,
        FaultKind::SessionExpired,
    ];

    fn applies(self, point: &Checkpoint<'_>) -> bool {
        let call = point.call;
        match self {
            FaultKind::Timeout | FaultKind::BrokerPause => true,
            FaultKind::TimeoutAfterEffect => call.has_effect(),
            FaultKind::NotCoordinator | FaultKind::CoordinatorLoadInProgress => {
                call.uses_coordinator()
            }
            FaultKind::NotLeader => {
                !point.partitions.is_empty()
                    && matches!(
                        call,
                        Call::Send | Call::Poll | Call::ListOffsets | Call::DeleteRecords
                    )
            }
            FaultKind::ProducerFenced => {
                point.client_kind == ClientKind::TransactionalProducer
                    && matches!(
                        call,
                        Call::Send
                            | Call::BeginTransaction
                            | Call::SendOffsets
                            | Call::CommitTransaction
                            | Call::AbortTransaction
                    )
            }
            FaultKind::SeekFailed => call == Call::Seek && !point.partitions.is_empty(),
            FaultKind::FetchError => call == Call::Poll && !point.partitions.is_empty(),
            FaultKind::SessionExpired => {
                point.client_kind == ClientKind::GroupMember
                    && matches!(call, Call::Poll | Call::Commit)
            }
        }
    }
}

/// Why a fault is in the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultCause {
    /// A scripted fault (`once`/`nth`).
    Scripted,
    /// Drawn by `random` from the seeded generator.
    Random,
    /// The call arrived while a `BrokerPause` was in force.
    BrokerPaused,
}

/// One injected fault, as the trace records it: exists so a failing seed can be explained
/// call by call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// Virtual time of the call, in milliseconds.
    pub at_ms: i64,
    /// The client's name (its `client_id`, `transactional_id` or a generated name).
    pub client: String,
    /// The call that was hit.
    pub call: Call,
    /// The fault, with the partition it hit filled in.
    pub fault: Fault,
    /// Where the fault came from.
    pub cause: FaultCause,
}

/// What kind of client makes a call, to decide which random faults apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientKind {
    Producer,
    TransactionalProducer,
    /// A consumer that is (or was) a member of a group.
    GroupMember,
    Consumer,
    Admin,
}

/// One call at its checkpoint.
pub(crate) struct Checkpoint<'a> {
    pub(crate) client: &'a str,
    pub(crate) client_kind: ClientKind,
    pub(crate) call: Call,
    pub(crate) partitions: &'a [TopicPartition],
}

#[derive(Debug, Clone)]
struct Scripted {
    call: Call,
    client: Option<String>,
    /// Matching calls still to let pass before firing.
    skip: u64,
    fault: Fault,
}

/// The injection plan and its trace, kept in the cluster state.
#[derive(Debug, Clone)]
pub(crate) struct FaultPlan {
    rng: SplitMix64,
    scripted: VecDeque<Scripted>,
    rate: f64,
    allowed: Vec<FaultKind>,
    max_random_pause_ms: i64,
    paused_until: i64,
    trace: Vec<TraceEvent>,
}

impl FaultPlan {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            rng: SplitMix64::new(seed),
            scripted: VecDeque::new(),
            rate: 0.0,
            allowed: Vec::new(),
            max_random_pause_ms: 5_000,
            paused_until: i64::MIN,
            trace: Vec::new(),
        }
    }

    pub(crate) fn trace(&self) -> &[TraceEvent] {
        &self.trace
    }

    /// Decides the fault for one call. Faults without a call-specific meaning (timeouts,
    /// coordinator errors, pauses) are returned as the error; the others are returned for the
    /// call to apply.
    pub(crate) fn checkpoint(
        &mut self,
        now_ms: i64,
        point: &Checkpoint<'_>,
    ) -> Result<Option<Fault>, SimError> {
        let (fault, cause) = if now_ms < self.paused_until {
            (Fault::Timeout, FaultCause::BrokerPaused)
        } else if let Some(fault) = self.take_scripted(point) {
            (fault, FaultCause::Scripted)
        } else if let Some(fault) = self.draw_random(point) {
            (fault, FaultCause::Random)
        } else {
            return Ok(None);
        };
        self.trace.push(TraceEvent {
            at_ms: now_ms,
            client: point.client.to_owned(),
            call: point.call,
            fault: fault.clone(),
            cause,
        });
        match fault {
            Fault::BrokerPause { ms } => {
                self.paused_until = now_ms.saturating_add(ms.max(0));
                Err(fault.error(point.call))
            }
            Fault::TimeoutAfterEffect if !point.call.has_effect() => Err(fault.error(point.call)),
            Fault::Timeout | Fault::NotCoordinator | Fault::CoordinatorLoadInProgress => {
                Err(fault.error(point.call))
            }
            other => Ok(Some(other)),
        }
    }

    fn take_scripted(&mut self, point: &Checkpoint<'_>) -> Option<Fault> {
        let mut fire = None;
        for (i, s) in self.scripted.iter_mut().enumerate() {
            let matches = s.call == point.call
                && s.client.as_deref().is_none_or(|c| c == point.client)
                && s.fault
                    .partition()
                    .is_none_or(|tp| point.partitions.contains(tp));
            if !matches {
                continue;
            }
            if s.skip == 0 {
                if fire.is_none() {
                    fire = Some(i);
                }
            } else {
                s.skip -= 1;
            }
        }
        let scripted = self.scripted.remove(fire?)?;
        Some(scripted.fault.resolve(point.partitions, |_| 0))
    }

    fn draw_random(&mut self, point: &Checkpoint<'_>) -> Option<Fault> {
        if self.rate <= 0.0 || self.allowed.is_empty() {
            return None;
        }
        if self.rng.next_f64() >= self.rate {
            return None;
        }
        let kinds: Vec<FaultKind> = self
            .allowed
            .iter()
            .copied()
            .filter(|k| k.applies(point))
            .collect();
        if kinds.is_empty() {
            return None;
        }
        let fault = match kinds[self.rng.below(kinds.len())] {
            FaultKind::Timeout => Fault::Timeout,
            FaultKind::TimeoutAfterEffect => Fault::TimeoutAfterEffect,
            FaultKind::NotCoordinator => Fault::NotCoordinator,
            FaultKind::CoordinatorLoadInProgress => Fault::CoordinatorLoadInProgress,
            FaultKind::NotLeader => Fault::NotLeader(None),
            FaultKind::ProducerFenced => Fault::ProducerFenced,
            FaultKind::SeekFailed => Fault::SeekFailed(None),
            FaultKind::FetchError => Fault::FetchError(None),
            FaultKind::BrokerPause => Fault::BrokerPause {
                ms: 1 + self.rng.below(self.max_random_pause_ms.max(1) as usize) as i64,
            },
            FaultKind::SessionExpired => Fault::SessionExpired,
        };
        let rng = &mut self.rng;
        Some(fault.resolve(point.partitions, |n| rng.below(n)))
    }
}

/// The fault-injection controls of one cluster (`cluster.faults()`): exists so tests and the
/// simulator can script exact failures or turn on seeded random ones.
#[derive(Debug, Clone)]
pub struct Faults {
    pub(crate) cluster: crate::Cluster,
}

impl Faults {
    /// Fails the next `call` (by any client) with `fault`.
    pub fn once(&self, call: Call, fault: Fault) -> &Self {
        self.push(call, None, 1, fault)
    }

    /// Fails the `n`-th matching `call` from now (1 is the next one) with `fault`.
    pub fn nth(&self, call: Call, n: u64, fault: Fault) -> &Self {
        self.push(call, None, n, fault)
    }

    /// Fails the next `call` made by the client named `client` with `fault`.
    pub fn once_for(&self, client: &str, call: Call, fault: Fault) -> &Self {
        self.push(call, Some(client), 1, fault)
    }

    /// Fails the `n`-th matching `call` by `client` from now with `fault`.
    pub fn nth_for(&self, client: &str, call: Call, n: u64, fault: Fault) -> &Self {
        self.push(call, Some(client), n, fault)
    }

    /// Injects a random fault into each call with probability `rate_per_call`, drawn among
    /// `allowed` kinds that apply to the call (rate 0 turns random faults off).
    pub fn random(&self, rate_per_call: f64, allowed: &[FaultKind]) -> &Self {
        let mut state = self.cluster.lock();
        state.faults.rate = rate_per_call;
        state.faults.allowed = allowed.to_vec();
        drop(state);
        self
    }

    /// The longest random `BrokerPause`, in virtual milliseconds (default 5 000).
    pub fn max_random_pause_ms(&self, ms: i64) -> &Self {
        self.cluster.lock().faults.max_random_pause_ms = ms.max(1);
        self
    }

    /// Drops every scripted fault not yet fired and turns random faults off.
    pub fn clear(&self) -> &Self {
        let mut state = self.cluster.lock();
        state.faults.scripted.clear();
        state.faults.rate = 0.0;
        drop(state);
        self
    }

    /// How many scripted faults have not fired yet.
    pub fn pending(&self) -> usize {
        self.cluster.lock().faults.scripted.len()
    }

    fn push(&self, call: Call, client: Option<&str>, n: u64, fault: Fault) -> &Self {
        self.cluster.lock().faults.scripted.push_back(Scripted {
            call,
            client: client.map(str::to_owned),
            skip: n.saturating_sub(1),
            fault,
        });
        self
    }
}
