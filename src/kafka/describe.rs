//! Describing a consumer group of either rebalance protocol: its state, and each member's
//! client id, static instance id and assignment.
//!
//! **Why this exists.** rust-rdkafka's `fetch_group_list` is librdkafka's
//! `rd_kafka_list_groups`, a DescribeGroups request: it knows only the classic protocol. For a
//! group of the KIP-848 consumer protocol (`group.protocol=consumer`) it answers without error
//! but with `state=Dead`, no protocol type and no members, so the standby placement
//! ([`crate::processor::standby`]) would never be computed. librdkafka's admin call
//! `rd_kafka_DescribeConsumerGroups` sends ConsumerGroupDescribe first and falls back to
//! DescribeGroups when the broker says the group is not a consumer-protocol group, and it
//! decodes the classic members' assignments itself; rust-rdkafka 0.39 does not wrap it. This
//! module does, behind a safe function that copies everything into owned values before the
//! librdkafka result is freed.
//!
//! **States.** librdkafka names only the classic states (`Unknown`, `PreparingRebalance`,
//! `CompletingRebalance`, `Stable`, `Dead`, `Empty`); a consumer-protocol group's `Assigning`
//! and `Reconciling` reach us as `Unknown`. `Stable` means the same for both: every member holds
//! the assignment the group settled on.
//!
//! This is the one module of the workspace allowed `unsafe` code (the workspace denies it
//! everywhere else, and `tests/describe.rs` checks that no other file allows it): every
//! `unsafe` block says why it is sound.
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr::NonNull;
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::reader::ReaderContext;
use super::{ClientRole, KafkaClients};

/// Which rebalance protocol a group runs (`ConsumerGroupDescription.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupKind {
    /// The classic protocol (JoinGroup/SyncGroup; `group.protocol=classic`).
    Classic,
    /// The KIP-848 consumer protocol (`group.protocol=consumer`, broker-side assignors).
    Consumer,
    /// Not said: the broker answered DescribeGroups for a group it does not know as either.
    Unknown,
}

/// One member of a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// The member's `client.id` (eosflow's group consumers use `eosflow-<instance id>` when
    /// standbys are on: how instances recognise each other).
    pub client_id: String,
    /// Its `group.instance.id` (static membership), if it has one.
    pub instance_id: Option<String>,
    /// The (topic, partition) pairs it holds now, in the order the broker listed them.
    pub assignment: Vec<(String, i32)>,
}

impl MemberDescription {
    /// The partitions of `topic` this member holds, ascending.
    ///
    /// ```
    /// use eosflow::internals::kafka::describe::MemberDescription;
    /// let m = MemberDescription {
    ///     client_id: "eosflow-a".into(),
    ///     instance_id: None,
    ///     assignment: vec![("in".into(), 2), ("in.retry.1".into(), 0), ("in".into(), 0)],
    /// };
    /// assert_eq!(m.partitions_of("in"), vec![0, 2]);
    /// assert!(m.partitions_of("other").is_empty());
    /// ```
    pub fn partitions_of(&self, topic: &str) -> Vec<i32> {
        let mut out: Vec<i32> = self
            .assignment
            .iter()
            .filter(|(t, _)| t == topic)
            .map(|(_, p)| *p)
            .collect();
        out.sort_unstable();
        out
    }
}

/// What the group coordinator said about a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// librdkafka's name of the group state: `Stable`, `PreparingRebalance`,
    /// `CompletingRebalance`, `Empty`, `Dead`, or `Unknown` (a consumer-protocol group that is
    /// `Assigning` or `Reconciling` is reported as `Unknown`).
    pub state: String,
    /// The group's rebalance protocol.
    pub kind: GroupKind,
    /// Its members, in the order the broker listed them.
    pub members: Vec<MemberDescription>,
}

impl GroupDescription {
    /// Whether every member holds the assignment the group settled on (state `Stable`), the
    /// only state in which the members' assignments say who owns what.
    pub fn is_stable(&self) -> bool {
        self.state == "Stable"
    }

    /// Each member's client id with its partitions of `topic`, if the group is stable (`None`
    /// while it rebalances, is empty or unknown): what the standby placement
    /// ([`crate::processor::standby::placement`]) is computed from.
    ///
    /// ```
    /// use eosflow::internals::kafka::describe::{GroupDescription, GroupKind, MemberDescription};
    /// let member = |client: &str, parts: &[i32]| MemberDescription {
    ///     client_id: client.into(),
    ///     instance_id: None,
    ///     assignment: parts.iter().map(|p| ("in".to_string(), *p)).collect(),
    /// };
    /// let mut group = GroupDescription {
    ///     state: "Stable".into(),
    ///     kind: GroupKind::Consumer,
    ///     members: vec![member("eosflow-b", &[3, 2]), member("eosflow-a", &[0, 1])],
    /// };
    /// assert_eq!(
    ///     group.owners("in"),
    ///     Some(vec![("eosflow-b".into(), vec![2, 3]), ("eosflow-a".into(), vec![0, 1])])
    /// );
    /// group.state = "PreparingRebalance".into();
    /// assert_eq!(group.owners("in"), None);
    /// ```
    pub fn owners(&self, topic: &str) -> Option<Vec<(String, Vec<i32>)>> {
        if !self.is_stable() {
            return None;
        }
        Some(
            self.members
                .iter()
                .map(|m| (m.client_id.clone(), m.partitions_of(topic)))
                .collect(),
        )
    }
}

/// Why a group could not be described.
#[derive(Debug, thiserror::Error)]
pub enum DescribeError {
    /// The client that asks could not be created (a bad setting in `kafka.properties`).
    #[error("creating the client that describes groups: {0}")]
    Client(#[from] KafkaError),
    /// A group id Kafka cannot carry.
    #[error("group id {0:?} contains a NUL byte")]
    InvalidGroup(String),
    /// librdkafka could not prepare the request (it refused an option).
    #[error("describing group {group}: {message}")]
    Setup {
        /// The group.
        group: String,
        /// librdkafka's message.
        message: String,
    },
    /// No answer within the deadline.
    #[error("describing group {group}: no answer within {millis} ms")]
    Timeout {
        /// The group.
        group: String,
        /// The deadline.
        millis: u128,
    },
    /// The request failed (no coordinator, the broker unreachable, not authorised), for the
    /// whole request or for this group.
    #[error("describing group {group}: {code:?}: {message}")]
    Failed {
        /// The group.
        group: String,
        /// librdkafka's error code (`GroupIdNotFound`, `GroupAuthorizationFailed`, ...).
        code: RDKafkaErrorCode,
        /// librdkafka's or the broker's message.
        message: String,
    },
    /// librdkafka answered with something other than the description asked for.
    #[error("describing group {group}: {message}")]
    Unexpected {
        /// The group.
        group: String,
        /// What was wrong.
        message: String,
    },
}

/// Describes `group` with a new client of the [`ClientRole::Reader`] configuration (so the
/// connection and security settings are the application's), waiting at most `timeout` for the
/// answer. A caller that describes repeatedly should keep a client and use
/// [`describe_group_with`]: creating a client costs threads and connections.
///
/// ```no_run
/// use std::time::Duration;
/// use eosflow::config::KafkaConfig;
/// use eosflow::internals::kafka::describe::{describe_group, GroupKind};
/// use eosflow::kafka::KafkaClients;
///
/// let clients = KafkaClients::new(KafkaConfig {
///     bootstrap: "127.0.0.1:19092".into(),
///     ..Default::default()
/// });
/// let group = describe_group(&clients, "orders", Duration::from_secs(5))?;
/// if group.is_stable() && group.kind == GroupKind::Consumer {
///     for m in &group.members {
///         println!("{} holds {:?}", m.client_id, m.partitions_of("orders.in"));
///     }
/// }
/// # Ok::<(), eosflow::internals::kafka::describe::DescribeError>(())
/// ```
pub fn describe_group(
    clients: &KafkaClients,
    group: &str,
    timeout: Duration,
) -> Result<GroupDescription, DescribeError> {
    let consumer: BaseConsumer<ReaderContext> = clients
        .config(ClientRole::Reader)
        .create_with_context(ReaderContext)?;
    describe_group_with(consumer.client(), group, timeout)
}

/// Describes `group` with an existing client (any kind: a consumer's, a producer's or an admin
/// client's `client()`), waiting at most `timeout`. The answer comes on a private queue, so
/// whatever else polls `client` is not disturbed.
///
/// ```no_run
/// use std::time::Duration;
/// use eosflow::config::KafkaConfig;
/// use eosflow::internals::kafka::describe::describe_group_with;
/// use eosflow::internals::kafka::reader::ReaderContext;
/// use eosflow::kafka::{ClientRole, KafkaClients};
/// use rdkafka::consumer::{BaseConsumer, Consumer};
///
/// let clients = KafkaClients::new(KafkaConfig::default());
/// let consumer: BaseConsumer<ReaderContext> =
///     clients.config(ClientRole::Reader).create_with_context(ReaderContext)?;
/// loop {
///     let group = describe_group_with(consumer.client(), "orders", Duration::from_secs(5))?;
///     println!("{} with {} members", group.state, group.members.len());
///     std::thread::sleep(Duration::from_secs(2));
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn describe_group_with<C: ClientContext>(
    client: &Client<C>,
    group: &str,
    timeout: Duration,
) -> Result<GroupDescription, DescribeError> {
    let c_group = CString::new(group).map_err(|_| DescribeError::InvalidGroup(group.into()))?;
    let millis: c_int = timeout.as_millis().try_into().unwrap_or(c_int::MAX);
    let rk = client.native_ptr();

    let options = AdminOptions::new(rk, group)?;
    options.set_request_timeout(millis, group)?;
    let queue = Queue::new(rk, group)?;
    let mut groups: [*const c_char; 1] = [c_group.as_ptr()];
    // SAFETY: `rk` is the live handle `client` owns (borrowed for this whole call); `groups`
    // holds one pointer to `c_group`, a NUL-terminated string that outlives the call (librdkafka
    // copies the names before it returns); `options` and `queue` are live objects created on
    // `rk` above and destroyed only when this function returns (librdkafka copies the options
    // and holds its own reference to the queue).
    unsafe {
        rd::rd_kafka_DescribeConsumerGroups(
            rk,
            groups.as_mut_ptr(),
            groups.len(),
            options.0.as_ptr(),
            queue.0.as_ptr(),
        );
    }
    // SAFETY: `queue` is live (see above); the returned event, if any, is owned by us and
    // destroyed by `Event`'s drop.
    let event = unsafe { rd::rd_kafka_queue_poll(queue.0.as_ptr(), millis) };
    let Some(event) = NonNull::new(event).map(Event) else {
        return Err(DescribeError::Timeout {
            group: group.into(),
            millis: timeout.as_millis(),
        });
    };
    event.read(group)
}

/// `rd_kafka_AdminOptions_t` for DescribeConsumerGroups, destroyed when dropped.
struct AdminOptions(NonNull<rd::rd_kafka_AdminOptions_t>);

impl AdminOptions {
    fn new(rk: *mut rd::rd_kafka_t, group: &str) -> Result<Self, DescribeError> {
        // SAFETY: `rk` is a live client handle (the caller borrows its owner); the returned
        // options are owned by us.
        let ptr = unsafe {
            rd::rd_kafka_AdminOptions_new(
                rk,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS,
            )
        };
        NonNull::new(ptr)
            .map(Self)
            .ok_or_else(|| DescribeError::Setup {
                group: group.into(),
                message: "librdkafka returned no admin options".into(),
            })
    }

    fn set_request_timeout(&self, millis: c_int, group: &str) -> Result<(), DescribeError> {
        let mut errstr = [0 as c_char; 512];
        // SAFETY: the options are live; `errstr` is a writable buffer of the length passed,
        // which librdkafka NUL-terminates.
        let err = unsafe {
            rd::rd_kafka_AdminOptions_set_request_timeout(
                self.0.as_ptr(),
                millis,
                errstr.as_mut_ptr(),
                errstr.len(),
            )
        };
        if err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Ok(());
        }
        // SAFETY: librdkafka wrote a NUL-terminated message into `errstr` (zeroed before, so it
        // is terminated in every case).
        let message = unsafe { owned(errstr.as_ptr()) }.unwrap_or_default();
        Err(DescribeError::Setup {
            group: group.into(),
            message,
        })
    }
}

impl Drop for AdminOptions {
    fn drop(&mut self) {
        // SAFETY: created by `rd_kafka_AdminOptions_new`, destroyed once, here.
        unsafe { rd::rd_kafka_AdminOptions_destroy(self.0.as_ptr()) }
    }
}

/// A private `rd_kafka_queue_t` the answer is delivered on, destroyed when dropped.
struct Queue(NonNull<rd::rd_kafka_queue_t>);

impl Queue {
    fn new(rk: *mut rd::rd_kafka_t, group: &str) -> Result<Self, DescribeError> {
        // SAFETY: `rk` is a live client handle; the returned queue is owned by us.
        let ptr = unsafe { rd::rd_kafka_queue_new(rk) };
        NonNull::new(ptr)
            .map(Self)
            .ok_or_else(|| DescribeError::Setup {
                group: group.into(),
                message: "librdkafka returned no queue".into(),
            })
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: created by `rd_kafka_queue_new`, destroyed once, here. An answer still in
        // flight (the poll timed out) holds its own reference and is discarded by librdkafka.
        unsafe { rd::rd_kafka_queue_destroy(self.0.as_ptr()) }
    }
}

/// A polled `rd_kafka_event_t`, destroyed when dropped (with every description it holds).
struct Event(NonNull<rd::rd_kafka_event_t>);

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: returned by `rd_kafka_queue_poll` and owned by us, destroyed once, here.
        unsafe { rd::rd_kafka_event_destroy(self.0.as_ptr()) }
    }
}

impl Event {
    /// Copies the description of `group` out of the event.
    fn read(&self, group: &str) -> Result<GroupDescription, DescribeError> {
        let ev = self.0.as_ptr();
        let unexpected = |message: String| DescribeError::Unexpected {
            group: group.into(),
            message,
        };
        // SAFETY: `ev` is a live event (owned by `self`).
        let kind = unsafe { rd::rd_kafka_event_type(ev) };
        if kind != rd::RD_KAFKA_EVENT_DESCRIBECONSUMERGROUPS_RESULT {
            return Err(unexpected(format!(
                "event of type {kind} on the private queue"
            )));
        }
        // SAFETY: `ev` is live; the error string is owned by the event and copied at once.
        let err = unsafe { rd::rd_kafka_event_error(ev) };
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            // SAFETY: as above; NULL is handled by `owned`.
            let message = unsafe { owned(rd::rd_kafka_event_error_string(ev)) };
            return Err(DescribeError::Failed {
                group: group.into(),
                code: RDKafkaErrorCode::from(err),
                message: message.unwrap_or_default(),
            });
        }
        // SAFETY: the event is a DescribeConsumerGroups result (checked above), so this returns
        // the event itself viewed as its result, valid while the event lives.
        let result = unsafe { rd::rd_kafka_event_DescribeConsumerGroups_result(ev) };
        if result.is_null() {
            return Err(unexpected(
                "the event holds no DescribeConsumerGroups result".into(),
            ));
        }
        let mut count: usize = 0;
        // SAFETY: `result` is a live DescribeConsumerGroups result (the assertion inside holds:
        // its type was checked); the array of `count` descriptions is owned by the event.
        let array =
            unsafe { rd::rd_kafka_DescribeConsumerGroups_result_groups(result, &mut count) };
        let descriptions: &[*const rd::rd_kafka_ConsumerGroupDescription_t] =
            if array.is_null() || count == 0 {
                &[]
            } else {
                // SAFETY: librdkafka returned `count` consecutive, initialised pointers at
                // `array`, alive as long as the event (which outlives this borrow).
                unsafe { std::slice::from_raw_parts(array, count) }
            };
        for &desc in descriptions {
            if desc.is_null() {
                continue;
            }
            // SAFETY: `desc` is a live description owned by the event.
            let id = unsafe { owned(rd::rd_kafka_ConsumerGroupDescription_group_id(desc)) };
            if id.as_deref() != Some(group) {
                continue;
            }
            // SAFETY: `desc` is live.
            return unsafe { describe(desc, group) };
        }
        Err(unexpected(format!(
            "the answer does not describe the group ({count} descriptions)"
        )))
    }
}

/// Copies one group description into owned values.
///
/// # Safety
/// `desc` must be a live `rd_kafka_ConsumerGroupDescription_t` (owned by an event that is not
/// destroyed before this returns).
unsafe fn describe(
    desc: *const rd::rd_kafka_ConsumerGroupDescription_t,
    group: &str,
) -> Result<GroupDescription, DescribeError> {
    // SAFETY: `desc` is live (the caller's contract); the error it returns (or NULL) is owned
    // by it.
    let error = unsafe { rd::rd_kafka_ConsumerGroupDescription_error(desc) };
    if !error.is_null() {
        // SAFETY: `error` is a live error owned by `desc`.
        let (code, message) = unsafe {
            (
                rd::rd_kafka_error_code(error),
                owned(rd::rd_kafka_error_string(error)),
            )
        };
        if code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(DescribeError::Failed {
                group: group.into(),
                code: RDKafkaErrorCode::from(code),
                message: message.unwrap_or_default(),
            });
        }
    }
    // SAFETY: `desc` is live; the state name is a static string (NULL for an unknown code).
    let state = unsafe {
        owned(rd::rd_kafka_consumer_group_state_name(
            rd::rd_kafka_ConsumerGroupDescription_state(desc),
        ))
    }
    .unwrap_or_else(|| "Unknown".into());
    // SAFETY: `desc` is live.
    let kind = match unsafe { rd::rd_kafka_ConsumerGroupDescription_type(desc) } {
        rd::rd_kafka_consumer_group_type_t::RD_KAFKA_CONSUMER_GROUP_TYPE_CLASSIC => {
            GroupKind::Classic
        }
        rd::rd_kafka_consumer_group_type_t::RD_KAFKA_CONSUMER_GROUP_TYPE_CONSUMER => {
            GroupKind::Consumer
        }
        _ => GroupKind::Unknown,
    };
    // SAFETY: `desc` is live.
    let count = unsafe { rd::rd_kafka_ConsumerGroupDescription_member_count(desc) };
    let mut members = Vec::with_capacity(count);
    for i in 0..count {
        // SAFETY: `desc` is live and `i` is below its member count.
        let member = unsafe { rd::rd_kafka_ConsumerGroupDescription_member(desc, i) };
        if member.is_null() {
            continue;
        }
        // SAFETY: `member` is live (owned by `desc`); its strings may be NULL (`owned`).
        let (client_id, instance_id, assignment) = unsafe {
            (
                owned(rd::rd_kafka_MemberDescription_client_id(member)),
                owned(rd::rd_kafka_MemberDescription_group_instance_id(member)),
                rd::rd_kafka_MemberDescription_assignment(member),
            )
        };
        let assignment = if assignment.is_null() {
            Vec::new()
        } else {
            // SAFETY: `assignment` is live (owned by `member`); the list may be NULL.
            unsafe { partitions(rd::rd_kafka_MemberAssignment_partitions(assignment)) }
        };
        members.push(MemberDescription {
            client_id: client_id.unwrap_or_default(),
            instance_id: instance_id.filter(|i| !i.is_empty()),
            assignment,
        });
    }
    Ok(GroupDescription {
        state,
        kind,
        members,
    })
}

/// Copies a topic-partition list (NULL: empty).
///
/// # Safety
/// `list` must be NULL or a live list whose `elems` hold `cnt` initialised entries.
unsafe fn partitions(list: *const rd::rd_kafka_topic_partition_list_t) -> Vec<(String, i32)> {
    if list.is_null() {
        return Vec::new();
    }
    // SAFETY: `list` is live (the caller's contract).
    let (elems, cnt) = unsafe { ((*list).elems, (*list).cnt) };
    let Ok(cnt) = usize::try_from(cnt) else {
        return Vec::new();
    };
    if elems.is_null() || cnt == 0 {
        return Vec::new();
    }
    // SAFETY: `elems` points at `cnt` initialised entries owned by the list.
    let elems = unsafe { std::slice::from_raw_parts(elems, cnt) };
    elems
        .iter()
        // SAFETY: each entry's topic is NULL or a NUL-terminated string owned by the list.
        .map(|e| (unsafe { owned(e.topic) }.unwrap_or_default(), e.partition))
        .collect()
}

/// Copies a C string (NULL: `None`), replacing invalid UTF-8.
///
/// # Safety
/// `s` must be NULL or point at a NUL-terminated string that stays alive during the call.
unsafe fn owned(s: *const c_char) -> Option<String> {
    if s.is_null() {
        return None;
    }
    // SAFETY: `s` is a live NUL-terminated string (the caller's contract).
    Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

/// The generation id and member id of `consumer`'s group membership now (librdkafka's
/// `rd_kafka_consumer_group_metadata`: what a transaction's offsets would be committed with).
///
/// **Why.** After a commit whose outcome is unknown, the group's committed offsets tell
/// whether it landed only while this member still owns the partitions: if the generation or
/// member id moved, another owner may have committed past them, and the loop restores its
/// tasks from their changelogs instead of trusting the offsets. rust-rdkafka's
/// `ConsumerGroupMetadata` is opaque, hence this reader.
pub fn member_generation<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
) -> Option<(i32, String)> {
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live handle `consumer` owns (borrowed for this call); the returned
    // metadata is a copy we own, destroyed below.
    let md = NonNull::new(unsafe { rd::rd_kafka_consumer_group_metadata(rk) })?;
    // SAFETY: `md` is live until destroyed below; the member id it returns is a NUL-terminated
    // string inside `md`, copied into an owned `String` before `md` is destroyed.
    let found = unsafe {
        let generation = rd::rd_kafka_consumer_group_metadata_generation_id(md.as_ptr());
        let member = rd::rd_kafka_consumer_group_metadata_member_id(md.as_ptr());
        let member = if member.is_null() {
            String::new()
        } else {
            CStr::from_ptr(member).to_string_lossy().into_owned()
        };
        (generation, member)
    };
    // SAFETY: `md` was returned by `rd_kafka_consumer_group_metadata` and is destroyed once.
    unsafe { rd::rd_kafka_consumer_group_metadata_destroy(md.as_ptr()) };
    Some(found)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::config::KafkaConfig;

    fn nowhere() -> KafkaClients {
        KafkaClients::new(KafkaConfig {
            // Nothing listens on port 1: every request times out.
            bootstrap: "127.0.0.1:1".into(),
            ..Default::default()
        })
    }

    #[test]
    fn an_unreachable_broker_fails_within_the_timeout_and_frees_what_it_made() {
        let started = Instant::now();
        let err = describe_group(&nowhere(), "g", Duration::from_millis(800))
            .expect_err("no broker answers");
        println!("{err} after {:?}", started.elapsed());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(
            matches!(
                err,
                DescribeError::Timeout { .. }
                    | DescribeError::Failed {
                        code: RDKafkaErrorCode::OperationTimedOut
                            | RDKafkaErrorCode::RequestTimedOut,
                        ..
                    }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("describing group g"), "{err}");
    }

    #[test]
    fn one_client_describes_again_and_again() {
        // Every call makes and frees its options, queue and event on the same handle.
        let consumer: BaseConsumer<ReaderContext> = nowhere()
            .config(ClientRole::Reader)
            .create_with_context(ReaderContext)
            .expect("client");
        for _ in 0..3 {
            assert!(
                describe_group_with(consumer.client(), "g", Duration::from_millis(200)).is_err()
            );
        }
    }

    #[test]
    fn a_group_id_with_a_nul_byte_is_refused_before_anything_is_sent() {
        let err = describe_group(&nowhere(), "a\0b", Duration::from_secs(1)).expect_err("NUL");
        assert!(
            matches!(err, DescribeError::InvalidGroup(ref g) if g == "a\0b"),
            "{err:?}"
        );
    }

    #[test]
    fn owners_are_read_only_from_a_stable_group() {
        let member = MemberDescription {
            client_id: "eosflow-a".into(),
            instance_id: Some("a".into()),
            assignment: vec![("in".into(), 1), ("in".into(), 0), ("other".into(), 0)],
        };
        let mut group = GroupDescription {
            state: "Stable".into(),
            kind: GroupKind::Classic,
            members: vec![member],
        };
        assert!(group.is_stable());
        assert_eq!(
            group.owners("in"),
            Some(vec![("eosflow-a".to_string(), vec![0, 1])])
        );
        for state in [
            "Unknown",
            "PreparingRebalance",
            "CompletingRebalance",
            "Empty",
            "Dead",
        ] {
            group.state = state.into();
            assert_eq!(group.owners("in"), None, "{state}");
        }
    }
}
