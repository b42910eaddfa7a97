//! The admin client: topics, `delete_records`, offsets, groups and the log cleaner.
//!
//! Modelled: per-topic results of `create_topics`, per-partition results of
//! `delete_records` (the log start never passes the high watermark), `list_offsets`,
//! `describe_group`/`list_groups`, and compaction of compacted topics on demand.
//!
//! Compaction ([`Admin::compact`]) stands for the log cleaner having run: among the stable
//! data of each partition (below its LSO) it keeps only the latest record per key; aborted
//! transactional data is removed; tombstones (value `None`) are kept, because their removal
//! after `delete.retention.ms` is not modelled; markers are kept, so offsets never move. It is
//! not a client call and passes no fault checkpoint.
//!
//! Not modelled: topic deletion, partition increases, configs other than `compacted`, ACLs.

use std::collections::BTreeMap;

use crate::faults::ClientKind;
use crate::group::{GroupDescription, GroupState};
use crate::{Call, Cluster, Fault, SimError, TopicConfig, TopicPartition};

/// One result per partition, for calls that can fail for some partitions only.
pub type PartitionResults<T> = Vec<(TopicPartition, Result<T, SimError>)>;

/// One result per topic, for `create_topics`.
pub type TopicResults = Vec<(String, Result<(), SimError>)>;

/// A partition's offsets as `list_offsets` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// The log start offset (earliest).
    pub log_start: i64,
    /// The high watermark (latest for `read_uncommitted`).
    pub high_watermark: i64,
    /// The last stable offset (latest for `read_committed`).
    pub last_stable: i64,
}

/// One topic to create with [`Admin::create_topics`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    /// Its name.
    pub name: String,
    /// Its partition count (at least 1).
    pub partitions: usize,
    /// Its settings.
    pub config: TopicConfig,
}

/// An admin client: exists so tooling paths (trimming repartition topics, inspecting groups)
/// run against the simulator with faults like any other client.
#[derive(Debug)]
pub struct Admin {
    cluster: Cluster,
    client: String,
}

impl Admin {
    pub(crate) fn new(cluster: Cluster) -> Self {
        let client = cluster.lock().client_name("", "admin");
        Self { cluster, client }
    }

    fn checkpoint(
        &self,
        call: Call,
        partitions: &[TopicPartition],
    ) -> Result<Option<Fault>, SimError> {
        self.cluster
            .lock()
            .checkpoint(&self.client, ClientKind::Admin, call, partitions)
    }

    /// Creates topics; one result per topic (`TopicAlreadyExists`, `InvalidPartitions`).
    pub fn create_topics(&self, topics: &[NewTopic]) -> Result<TopicResults, SimError> {
        let mut state = self.cluster.lock();
        let after_effect =
            match state.checkpoint(&self.client, ClientKind::Admin, Call::CreateTopics, &[])? {
                None => false,
                Some(Fault::TimeoutAfterEffect) => true,
                Some(other) => return Err(other.error(Call::CreateTopics)),
            };
        let results = topics
            .iter()
            .map(|t| {
                let result = state.create_topic(&t.name, t.partitions, t.config);
                (t.name.clone(), result)
            })
            .collect();
        if after_effect {
            return Err(SimError::RequestTimedOut {
                call: Call::CreateTopics,
            });
        }
        Ok(results)
    }

    /// Every topic and its partition count (a `Metadata` call).
    pub fn metadata(&self) -> Result<BTreeMap<String, usize>, SimError> {
        if let Some(fault) = self.checkpoint(Call::Metadata, &[])? {
            return Err(fault.error(Call::Metadata));
        }
        Ok(self.cluster.lock().partition_counts())
    }

    /// Deletes the records before each offset (`-1`: the high watermark): moves the log start
    /// offset; one result per partition, the new log start or the error (`OffsetOutOfRange`
    /// past the high watermark, `UnknownTopicOrPartition`, an injected `NotLeaderOrFollower`).
    pub fn delete_records(
        &self,
        offsets: &[(String, i32, i64)],
    ) -> Result<PartitionResults<i64>, SimError> {
        let tps: Vec<TopicPartition> = offsets.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
        let mut state = self.cluster.lock();
        let (after_effect, failed) =
            match state.checkpoint(&self.client, ClientKind::Admin, Call::DeleteRecords, &tps)? {
                None => (false, None),
                Some(Fault::TimeoutAfterEffect) => (true, None),
                Some(fault @ Fault::NotLeader(Some(_))) => {
                    let error = fault.error(Call::DeleteRecords);
                    match fault {
                        Fault::NotLeader(tp) => (false, tp.map(|tp| (tp, error))),
                        _ => (false, None),
                    }
                }
                Some(other) => return Err(other.error(Call::DeleteRecords)),
            };
        let results = offsets
            .iter()
            .map(|(topic, partition, before)| {
                let tp = (topic.clone(), *partition);
                let result = match failed.as_ref().filter(|(f, _)| *f == tp) {
                    Some((_, e)) => Err(e.clone()),
                    None => state
                        .log_mut(topic, *partition)
                        .and_then(|log| log.delete_before(*before)),
                };
                (tp, result)
            })
            .collect();
        if after_effect {
            return Err(SimError::RequestTimedOut {
                call: Call::DeleteRecords,
            });
        }
        Ok(results)
    }

    /// The log start, high watermark and LSO of each partition.
    pub fn list_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, PartitionOffsets)>, SimError> {
        if let Some(fault) = self.checkpoint(Call::ListOffsets, partitions)? {
            return Err(fault.error(Call::ListOffsets));
        }
        let state = self.cluster.lock();
        partitions
            .iter()
            .map(|tp| {
                let log = state.log(&tp.0, tp.1)?;
                Ok((
                    tp.clone(),
                    PartitionOffsets {
                        log_start: log.log_start(),
                        high_watermark: log.high_watermark(),
                        last_stable: log.last_stable(),
                    },
                ))
            })
            .collect()
    }

    /// The group's state, generation and members with their partitions (`Dead` if the group
    /// does not exist).
    pub fn describe_group(&self, group: &str) -> Result<GroupDescription, SimError> {
        if let Some(fault) = self.checkpoint(Call::DescribeGroup, &[])? {
            return Err(fault.error(Call::DescribeGroup));
        }
        let state = self.cluster.lock();
        Ok(match state.groups.get(group) {
            Some(g) => g.describe(),
            None => GroupDescription {
                group_id: group.to_owned(),
                state: GroupState::Dead,
                generation_id: -1,
                protocol: None,
                members: Vec::new(),
            },
        })
    }

    /// Every group the coordinator knows (with members or stored offsets), by id.
    pub fn list_groups(&self) -> Result<Vec<String>, SimError> {
        if let Some(fault) = self.checkpoint(Call::ListGroups, &[])? {
            return Err(fault.error(Call::ListGroups));
        }
        let state = self.cluster.lock();
        Ok(state
            .groups
            .iter()
            .filter(|(_, g)| !g.is_empty() || !g.committed_all().is_empty())
            .map(|(id, _)| id.clone())
            .collect())
    }

    /// Runs the log cleaner on a compacted topic (see the module docs); returns how many
    /// records it removed. `InvalidRequest` for a topic that is not compacted.
    pub fn compact(&self, topic: &str) -> Result<usize, SimError> {
        let mut state = self.cluster.lock();
        let t = state
            .topics
            .get_mut(topic)
            .ok_or_else(|| SimError::UnknownTopicOrPartition(topic.to_owned()))?;
        if !t.config().compacted {
            return Err(SimError::InvalidRequest(format!(
                "{topic}: not a compacted topic"
            )));
        }
        Ok(t.logs_mut().iter_mut().map(|log| log.compact()).sum())
    }
}
