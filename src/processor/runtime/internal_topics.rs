//! The internal topics a processor needs, created when it starts (Kafka Streams'
//! `InternalTopicManager`): each input's `.retry.<n>` levels and `.DLT`, each store's compacted
//! changelog and each repartition topic (an input too, with its own levels and DLT), with the
//! inputs' partition count. Inputs, tables' topics, global tables' topics and sink topics are
//! the user's: they must exist.
//!
//! Off with `processor.create_topics = false` (an application without the `CREATE` ACL): the
//! topics must then exist, and the start check names each missing one. Never a reason of its
//! own to refuse a start: the checks that follow it (missing topics, co-partitioning) decide.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::group_member::GroupMember;
use super::options::RuntimeOptions;
use crate::kafka::topics::{self, TopicOutcome, TopicSpec};
use crate::kafka::KafkaClients;
use crate::retry::{dlt, retry_topic};

/// How long dead letters are kept by default (14 days, as `topics/` declares them): time to
/// look into them and redrive them.
pub(crate) const DLT_RETENTION_MS: i64 = 14 * 24 * 3_600_000;

/// How long the start waits for the user's inputs to show in metadata (created a moment ago by
/// a test or a deploy script) before leaving the report to the missing-topics check.
const INPUTS_WAIT: Duration = Duration::from_secs(10);

/// Admin calls' timeout.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Every internal topic of a processor with `partitions` partitions: for each input of
/// `inputs` (repartition topics included) its retry levels (`levels(input)` of them) and its
/// DLT (kept [`DLT_RETENTION_MS`]), each of `changelogs` compacted, each of `repartition`
/// with the delete policy. The one list `eosflow topics plan --topology` and the runtime use.
pub(crate) fn specs<'a>(
    inputs: &[String],
    levels: impl Fn(&str) -> u32,
    changelogs: impl IntoIterator<Item = &'a String>,
    repartition: &[String],
    partitions: i32,
) -> Vec<TopicSpec> {
    let mut out: Vec<TopicSpec> = repartition
        .iter()
        .map(|t| TopicSpec::new(t.clone(), partitions, "delete"))
        .collect();
    for input in inputs {
        for n in 1..=levels(input) {
            out.push(TopicSpec::new(retry_topic(input, n), partitions, "delete"));
        }
        let mut dead = TopicSpec::new(dlt::topic_for(input), partitions, "delete");
        dead.retention_ms = Some(DLT_RETENTION_MS);
        out.push(dead);
    }
    for c in changelogs {
        out.push(TopicSpec::new(c.clone(), partitions, "compact"));
    }
    out
}

/// Creates the missing internal topics of a processor reading `opts.input_topics` (of which
/// `repartition` are its own), with stores changelogged to `changelogs`, at the partition count
/// of the user's inputs. Metadata first: when every internal topic exists (every start but the
/// first) no admin call is made, so a start during a broker outage depends on nothing more than
/// before. Best effort: when the inputs are not all there yet or do not share one count, or a
/// creation fails, nothing stops here — the start checks that follow name the missing topics
/// (with the returned reason creation failed) or the differing counts.
pub(super) fn ensure<'a>(
    clients: &KafkaClients,
    member: &GroupMember,
    opts: &RuntimeOptions,
    changelogs: impl IntoIterator<Item = &'a String>,
    repartition: &[String],
) -> Option<String> {
    let mut users: Vec<String> = opts
        .input_topics
        .iter()
        .filter(|t| !repartition.contains(t))
        .cloned()
        .collect();
    users.extend(opts.tables.iter().map(|(_, t)| t.clone()));
    let deadline = Instant::now() + INPUTS_WAIT;
    let counts = loop {
        match member.partition_counts(&users) {
            Ok(c) if users.iter().all(|t| c.contains_key(t)) => break c,
            Ok(_) | Err(_) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(250))
            }
            // Missing inputs or no metadata: reported by the checks that follow.
            Ok(_) | Err(_) => return None,
        }
    };
    let distinct: BTreeSet<usize> = counts.values().copied().collect();
    let [partitions] = distinct.into_iter().collect::<Vec<_>>()[..] else {
        // Differing counts: the co-partitioning check names each.
        return None;
    };
    let partitions = i32::try_from(partitions).ok()?;
    let wanted = specs(
        &opts.input_topics,
        |t| opts.retry_for(t).levels(),
        changelogs,
        repartition,
        partitions,
    );
    let names: Vec<String> = wanted.iter().map(|s| s.name.clone()).collect();
    let known = member.partition_counts(&names).ok()?;
    let missing: Vec<TopicSpec> = wanted
        .into_iter()
        .filter(|s| !known.contains_key(&s.name))
        .collect();
    if missing.is_empty() {
        return None;
    }
    match topics::apply_blocking(clients, &missing, ADMIN_TIMEOUT) {
        Ok(outcomes) => {
            for (topic, outcome) in outcomes {
                if outcome == TopicOutcome::Created {
                    let spec = missing.iter().find(|s| s.name == topic);
                    tracing::info!(
                        %topic,
                        partitions,
                        cleanup_policy = spec.map_or("delete", |s| s.cleanup_policy.as_str()),
                        "created an internal topic"
                    );
                }
            }
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "creating the internal topics failed");
            Some(format!(
                "creating them ({partitions} partitions, the inputs' count) failed: {e}; create \
                 them with `eosflow topics apply` by an account allowed to, and set \
                 processor.create_topics = false (EOSFLOW_PROCESSOR_CREATE_TOPICS)"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_gets_its_levels_and_dlt_and_every_store_a_compacted_changelog() {
        let inputs = [
            "orders".to_string(),
            "app-by-region-repartition".to_string(),
        ];
        let changelogs = ["app-default-changelog".to_string()];
        let repartition = ["app-by-region-repartition".to_string()];
        let levels = |t: &str| if t == "orders" { 2 } else { 0 };
        let s = specs(&inputs, levels, &changelogs, &repartition, 6);
        let names: Vec<(&str, &str)> = s
            .iter()
            .map(|t| (t.name.as_str(), t.cleanup_policy.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("app-by-region-repartition", "delete"),
                ("orders.retry.1", "delete"),
                ("orders.retry.2", "delete"),
                ("orders.DLT", "delete"),
                ("app-by-region-repartition.DLT", "delete"),
                ("app-default-changelog", "compact"),
            ],
            "the inputs themselves are not internal"
        );
        assert!(s.iter().all(|t| t.partitions == 6));
        assert_eq!(
            s.iter()
                .filter(|t| t.retention_ms == Some(DLT_RETENTION_MS))
                .count(),
            2,
            "dead letters are kept two weeks"
        );
    }
}
