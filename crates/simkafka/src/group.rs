//! The group coordinator: membership, generations, the range assignor and committed offsets.
//!
//! Modelled, as Kafka's classic group protocol behaves:
//! - a member joins by polling after `subscribe`; a join, a leave, an expired session or a
//!   subscription change starts a rebalance;
//! - a rebalance completes when every member has polled (rejoined) since it started: only
//!   then does the generation increase and the assignment change (the join barrier);
//! - eager members give up all their partitions when they rejoin; cooperative members keep
//!   them and give up, after the rebalance, only those that move; a moved partition is handed
//!   to its new owner only once the old owner has polled past its revocation;
//! - the assignor is `range`, topic by topic, members sorted by `group.instance.id` when they
//!   have one, else by member id: topics with equal partition counts are co-partitioned;
//! - static members (`group.instance.id`) are replaced without a rebalance by a new instance
//!   with the same id, which fences the old one, and do not leave on close;
//! - offset commits check member id and generation; transactional offsets stay pending until
//!   their transaction ends (`UnstableOffsetCommit` for `require_stable` fetches).
//!
//! Not modelled: the `__consumer_offsets` log, heartbeats apart from polls (a member that
//! does not poll within its session timeout is removed: there is no separate
//! `max.poll.interval.ms`), the rebalance timeout (a member that does not rejoin is removed
//! when its session expires), the cooperative follow-up rebalance (one generation per
//! rebalance; freed partitions move without another bump), other assignors, the KIP-848
//! protocol, offset retention and metadata.

use std::collections::{BTreeMap, BTreeSet};

use crate::{RebalanceProtocol, SimError, TopicPartition};

/// What a group is doing: exists so `describe_group` can show a rebalance in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No members (offsets may still be stored).
    Empty,
    /// A rebalance started and not every member has rejoined yet.
    PreparingRebalance,
    /// The current generation's assignment is in force.
    Stable,
    /// The group does not exist.
    Dead,
}

/// One member as `describe_group` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// The coordinator-assigned member id.
    pub member_id: String,
    /// The static `group.instance.id`, if any.
    pub group_instance_id: Option<String>,
    /// The consumer's `client.id`.
    pub client_id: String,
    /// The partitions the member owns now.
    pub assignment: Vec<TopicPartition>,
}

/// A group as `describe_group` reports it: exists so checkers can see who owns what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// The group id.
    pub group_id: String,
    /// Its state.
    pub state: GroupState,
    /// Its current generation.
    pub generation_id: i32,
    /// The rebalance protocol of its members, if any joined.
    pub protocol: Option<RebalanceProtocol>,
    /// Its members, by member id.
    pub members: Vec<MemberDescription>,
}

/// A member's standing, as its consumer finds it on its next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    Active,
    /// Replaced by a newer instance with the same `group.instance.id`.
    Fenced,
    /// Removed (left, or its session expired).
    Gone,
}

/// What a member learns at a poll.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sync {
    pub(crate) revoked: Vec<TopicPartition>,
    pub(crate) assigned: Option<Vec<TopicPartition>>,
}

/// A new member's parameters.
pub(crate) struct JoinRequest<'a> {
    pub(crate) instance_id: Option<&'a str>,
    pub(crate) client_id: &'a str,
    pub(crate) subscription: &'a BTreeSet<String>,
    pub(crate) protocol: RebalanceProtocol,
    pub(crate) session_timeout_ms: i64,
    pub(crate) now_ms: i64,
}

#[derive(Debug, Clone)]
struct Member {
    instance_id: Option<String>,
    client_id: String,
    subscription: BTreeSet<String>,
    session_timeout_ms: i64,
    last_seen_ms: i64,
    /// Rejoined since the current rebalance started.
    joined: bool,
    /// The generation this member last synced to.
    generation: i32,
    owned: BTreeSet<TopicPartition>,
    /// A new static instance that must be told everything it owns.
    announce_all: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Empty,
    Preparing,
    Stable,
}

/// One consumer group.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    group_id: String,
    generation: i32,
    phase: Phase,
    protocol: Option<RebalanceProtocol>,
    members: BTreeMap<String, Member>,
    statics: BTreeMap<String, String>,
    fenced: BTreeSet<String>,
    target: BTreeMap<String, BTreeSet<TopicPartition>>,
    /// Partition counts of subscribed topics when the assignment was computed.
    assigned_counts: BTreeMap<String, usize>,
    committed: BTreeMap<TopicPartition, i64>,
    /// Partitions with offsets held by an open transaction: the producer id holding them.
    pending: BTreeMap<TopicPartition, i64>,
    next_member: u64,
}

impl Group {
    pub(crate) fn new(group_id: &str) -> Self {
        Self {
            group_id: group_id.to_owned(),
            generation: 0,
            phase: Phase::Empty,
            protocol: None,
            members: BTreeMap::new(),
            statics: BTreeMap::new(),
            fenced: BTreeSet::new(),
            target: BTreeMap::new(),
            assigned_counts: BTreeMap::new(),
            committed: BTreeMap::new(),
            pending: BTreeMap::new(),
            next_member: 0,
        }
    }

    pub(crate) fn standing(&self, member_id: &str) -> Standing {
        if self.members.contains_key(member_id) {
            Standing::Active
        } else if self.fenced.contains(member_id) {
            Standing::Fenced
        } else {
            Standing::Gone
        }
    }

    pub(crate) fn generation_of(&self, member_id: &str) -> i32 {
        self.members.get(member_id).map_or(-1, |m| m.generation)
    }

    /// `JoinGroup` of a consumer without a member id: returns its new member id.
    pub(crate) fn join(&mut self, req: &JoinRequest<'_>) -> Result<String, SimError> {
        if let Some(protocol) = self.protocol.filter(|_| !self.members.is_empty()) {
            if protocol != req.protocol {
                return Err(SimError::InconsistentGroupProtocol(format!(
                    "group {} uses {protocol:?}, member asked for {:?}",
                    self.group_id, req.protocol
                )));
            }
        }
        self.protocol = Some(req.protocol);
        self.next_member += 1;
        let member_id = format!("{}-{:08}", req.client_id, self.next_member);
        let old = req.instance_id.and_then(|i| self.statics.get(i).cloned());
        if let Some(old_id) = old {
            if let Some(mut member) = self.members.remove(&old_id) {
                // Static member replaced: same identity, no rebalance, the old instance fenced.
                member.last_seen_ms = req.now_ms;
                member.client_id = req.client_id.to_owned();
                member.announce_all = true;
                member.session_timeout_ms = req.session_timeout_ms;
                let resubscribed = member.subscription != *req.subscription;
                member.subscription = req.subscription.clone();
                self.members.insert(member_id.clone(), member);
                if let Some(target) = self.target.remove(&old_id) {
                    self.target.insert(member_id.clone(), target);
                }
                self.fenced.insert(old_id);
                if let Some(instance) = req.instance_id {
                    self.statics.insert(instance.to_owned(), member_id.clone());
                }
                if resubscribed {
                    self.rebalance();
                }
                return Ok(member_id);
            }
        }
        self.members.insert(
            member_id.clone(),
            Member {
                instance_id: req.instance_id.map(str::to_owned),
                client_id: req.client_id.to_owned(),
                subscription: req.subscription.clone(),
                session_timeout_ms: req.session_timeout_ms,
                last_seen_ms: req.now_ms,
                joined: false,
                generation: -1,
                owned: BTreeSet::new(),
                announce_all: false,
            },
        );
        if let Some(instance) = req.instance_id {
            self.statics.insert(instance.to_owned(), member_id.clone());
        }
        self.rebalance();
        Ok(member_id)
    }

    /// `LeaveGroup`, or removal after an expired session.
    pub(crate) fn remove(&mut self, member_id: &str) {
        if let Some(member) = self.members.remove(member_id) {
            if let Some(instance) = member.instance_id {
                if self.statics.get(&instance).map(String::as_str) == Some(member_id) {
                    self.statics.remove(&instance);
                }
            }
            self.target.remove(member_id);
            self.rebalance();
        }
    }

    /// Removes the members whose session has expired at `now_ms`.
    pub(crate) fn expire(&mut self, now_ms: i64) {
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| now_ms - m.last_seen_ms > m.session_timeout_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.remove(&id);
        }
    }

    pub(crate) fn heartbeat(&mut self, member_id: &str, now_ms: i64) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_seen_ms = now_ms;
        }
    }

    /// A member's subscription as of its poll: a change starts a rebalance.
    pub(crate) fn resubscribe(&mut self, member_id: &str, subscription: &BTreeSet<String>) {
        if let Some(m) = self.members.get_mut(member_id) {
            if m.subscription != *subscription {
                m.subscription = subscription.clone();
                self.rebalance();
            }
        }
    }

    /// Starts a rebalance when a subscribed topic's partition count changed (or it appeared).
    pub(crate) fn check_metadata(&mut self, counts: &BTreeMap<String, usize>) {
        if self.phase == Phase::Stable && self.subscribed_counts(counts) != self.assigned_counts {
            self.rebalance();
        }
    }

    fn subscribed_counts(&self, counts: &BTreeMap<String, usize>) -> BTreeMap<String, usize> {
        self.members
            .values()
            .flat_map(|m| m.subscription.iter())
            .filter_map(|t| counts.get(t).map(|&n| (t.clone(), n)))
            .collect()
    }

    fn rebalance(&mut self) {
        if self.members.is_empty() {
            self.phase = Phase::Empty;
            self.generation += 1;
            self.target.clear();
            return;
        }
        self.phase = Phase::Preparing;
        for m in self.members.values_mut() {
            m.joined = false;
        }
    }

    fn complete(&mut self, counts: &BTreeMap<String, usize>) {
        self.generation += 1;
        self.assigned_counts = self.subscribed_counts(counts);
        self.target = range_assign(&self.members, &self.assigned_counts);
        self.phase = Phase::Stable;
    }

    /// The member's poll: rejoins a rebalance in progress, completes it when it is the last
    /// to rejoin, and syncs the member's partitions with the assignment.
    pub(crate) fn sync(&mut self, member_id: &str, counts: &BTreeMap<String, usize>) -> Sync {
        let mut out = Sync::default();
        let eager = self.protocol == Some(RebalanceProtocol::Eager);
        if self.phase == Phase::Preparing {
            let Some(m) = self.members.get_mut(member_id) else {
                return out;
            };
            if !m.joined {
                m.joined = true;
                if eager {
                    out.revoked = std::mem::take(&mut m.owned).into_iter().collect();
                }
            }
            if self.members.values().all(|m| m.joined) {
                self.complete(counts);
            }
        }
        if self.phase != Phase::Stable {
            return out;
        }
        let taken: BTreeSet<TopicPartition> = self
            .members
            .iter()
            .filter(|(id, _)| id.as_str() != member_id)
            .flat_map(|(_, m)| m.owned.iter().cloned())
            .collect();
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let generation = self.generation;
        let Some(m) = self.members.get_mut(member_id) else {
            return out;
        };
        let new_generation = m.generation != generation;
        m.generation = generation;
        let revoke: Vec<TopicPartition> = m.owned.difference(&target).cloned().collect();
        for tp in &revoke {
            m.owned.remove(tp);
        }
        out.revoked.extend(revoke);
        let add: Vec<TopicPartition> = target
            .iter()
            .filter(|tp| !m.owned.contains(*tp) && !taken.contains(*tp))
            .cloned()
            .collect();
        m.owned.extend(add.iter().cloned());
        if m.announce_all {
            m.announce_all = false;
            out.assigned = Some(m.owned.iter().cloned().collect());
        } else if (eager && new_generation) || !add.is_empty() {
            out.assigned = Some(add);
        }
        out
    }

    /// The KIP-447 fencing check of an offset commit by `member_id` at `generation`
    /// (a negative generation: a commit outside group management, allowed only while the
    /// group is empty).
    pub(crate) fn check_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), SimError> {
        if generation < 0 && member_id.is_empty() {
            return if self.members.is_empty() {
                Ok(())
            } else {
                Err(SimError::UnknownMemberId(format!(
                    "group {} has members; commit without a member id",
                    self.group_id
                )))
            };
        }
        if let Some(instance) = instance_id {
            if let Some(current) = self.statics.get(instance) {
                if current != member_id {
                    return Err(SimError::FencedInstanceId(format!(
                        "{instance}: member {member_id} replaced by {current}"
                    )));
                }
            }
        }
        if self.fenced.contains(member_id) {
            return Err(SimError::FencedInstanceId(member_id.to_owned()));
        }
        if !self.members.contains_key(member_id) {
            return Err(SimError::UnknownMemberId(member_id.to_owned()));
        }
        if generation != self.generation {
            return Err(SimError::IllegalGeneration(format!(
                "group {} is at generation {}, member {member_id} at {generation}",
                self.group_id, self.generation
            )));
        }
        Ok(())
    }

    pub(crate) fn commit(&mut self, offsets: &[(TopicPartition, i64)]) {
        for (tp, offset) in offsets {
            self.committed.insert(tp.clone(), *offset);
        }
    }

    pub(crate) fn committed(&self, tp: &TopicPartition) -> Option<i64> {
        self.committed.get(tp).copied()
    }

    pub(crate) fn committed_all(&self) -> &BTreeMap<TopicPartition, i64> {
        &self.committed
    }

    pub(crate) fn is_pending(&self, tp: &TopicPartition) -> bool {
        self.pending.contains_key(tp)
    }

    pub(crate) fn hold_pending(
        &mut self,
        producer_id: i64,
        tps: impl Iterator<Item = TopicPartition>,
    ) {
        for tp in tps {
            self.pending.insert(tp, producer_id);
        }
    }

    /// The end of `producer_id`'s transaction: its held offsets are committed or dropped.
    pub(crate) fn end_pending(
        &mut self,
        producer_id: i64,
        offsets: &BTreeMap<TopicPartition, i64>,
        commit: bool,
    ) {
        self.pending.retain(|_, pid| *pid != producer_id);
        if commit {
            for (tp, offset) in offsets {
                self.committed.insert(tp.clone(), *offset);
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub(crate) fn describe(&self) -> GroupDescription {
        GroupDescription {
            group_id: self.group_id.clone(),
            state: match self.phase {
                Phase::Empty => GroupState::Empty,
                Phase::Preparing => GroupState::PreparingRebalance,
                Phase::Stable => GroupState::Stable,
            },
            generation_id: self.generation,
            protocol: self.protocol.filter(|_| !self.members.is_empty()),
            members: self
                .members
                .iter()
                .map(|(id, m)| MemberDescription {
                    member_id: id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    assignment: m.owned.iter().cloned().collect(),
                })
                .collect(),
        }
    }
}

/// Kafka's `RangeAssignor`: for each topic, its partitions in contiguous ranges over the
/// members subscribed to it, sorted by instance id (static members first) then member id.
fn range_assign(
    members: &BTreeMap<String, Member>,
    counts: &BTreeMap<String, usize>,
) -> BTreeMap<String, BTreeSet<TopicPartition>> {
    let mut out: BTreeMap<String, BTreeSet<TopicPartition>> = members
        .keys()
        .map(|id| (id.clone(), BTreeSet::new()))
        .collect();
    for (topic, &partitions) in counts {
        let mut subscribed: Vec<(&String, &Member)> = members
            .iter()
            .filter(|(_, m)| m.subscription.contains(topic))
            .collect();
        subscribed.sort_by(|(a_id, a), (b_id, b)| {
            let key = |id: &String, m: &Member| {
                (
                    m.instance_id.is_none(),
                    m.instance_id.clone().unwrap_or_else(|| id.clone()),
                )
            };
            key(a_id, a).cmp(&key(b_id, b))
        });
        let k = subscribed.len();
        if k == 0 {
            continue;
        }
        let (per, extra) = (partitions / k, partitions % k);
        for (i, (id, _)) in subscribed.into_iter().enumerate() {
            let start = per * i + i.min(extra);
            let len = per + usize::from(i < extra);
            let owned = out.entry(id.clone()).or_default();
            for p in start..start + len {
                owned.insert((topic.clone(), p as i32));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(instance: Option<&str>, topics: &[&str]) -> Member {
        Member {
            instance_id: instance.map(str::to_owned),
            client_id: String::new(),
            subscription: topics.iter().map(|t| (*t).to_owned()).collect(),
            session_timeout_ms: 1,
            last_seen_ms: 0,
            joined: true,
            generation: 0,
            owned: BTreeSet::new(),
            announce_all: false,
        }
    }

    #[test]
    fn range_gives_the_first_members_one_extra_partition() {
        let members: BTreeMap<String, Member> = [
            ("a".to_owned(), member(None, &["t"])),
            ("b".to_owned(), member(None, &["t"])),
        ]
        .into_iter()
        .collect();
        let counts = [("t".to_owned(), 3)].into_iter().collect();
        let out = range_assign(&members, &counts);
        assert_eq!(out["a"].len(), 2);
        assert_eq!(out["b"].len(), 1);
        assert!(out["b"].contains(&("t".to_owned(), 2)));
    }

    #[test]
    fn range_sorts_static_members_by_instance_id_first() {
        let members: BTreeMap<String, Member> = [
            ("a".to_owned(), member(None, &["t"])),
            ("z".to_owned(), member(Some("i-1"), &["t"])),
        ]
        .into_iter()
        .collect();
        let counts = [("t".to_owned(), 2)].into_iter().collect();
        let out = range_assign(&members, &counts);
        assert!(out["z"].contains(&("t".to_owned(), 0)));
        assert!(out["a"].contains(&("t".to_owned(), 1)));
    }
}
