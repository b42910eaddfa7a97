//! The internal topics a processor needs, created when it starts (Kafka Streams'
//! `InternalTopicManager`): each input's `.retry.<n>` levels and `.DLT`, each store's compacted
//! changelog and each repartition topic (an input too, with its own levels and DLT), with the
//! inputs' partition count. Inputs, tables' topics, global tables' topics and sink topics are
//! the user's: they must exist.
//!
//! Off with `processor.create_topics = false` (an application without the `CREATE` ACL): the
//! topics must then exist, and the start check names each missing one. Never a reason of its
//! own to refuse a start: the checks that follow it (missing topics, co-partitioning) decide.
//!
//! The start also looks for this application's changelogs that no store of the topology owns
//! any more — a store renamed or removed — and names each in a WARN with the command that
//! deletes it ([`warn_orphaned_changelogs`], the rule in [`orphaned_changelogs`]): a renamed
//! store starts empty, and without the WARN nothing would say so.

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

/// How long the orphaned-changelog check waits for the group list.
const ORPHAN_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// A topic shaped like a changelog of this application that no store of its topology owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OrphanedChangelog {
    /// The topic, `<app.id>-<store>-changelog`.
    pub(crate) topic: String,
    /// The store it was the changelog of, read as this application's.
    pub(crate) store: String,
    /// Other application ids the name fits as well (`<other>-<its store>-changelog`, the
    /// other id a prefix of `<app.id>-<store>` ending before a `-`), none of which has a
    /// consumer group on the broker: to rule out before deleting the topic.
    pub(crate) may_belong_to: Vec<String>,
}

/// This application's orphaned changelogs among the broker's `topics`: those named
/// `<app_id>-<store>-changelog` (exactly `app_id`, a `-`, a non-empty store name, then
/// `-changelog`) that are not in `used` (the topology's changelogs and every other topic the
/// instance reads).
///
/// **Other applications' ids.** Application ids may contain `-`, so one name fits several
/// applications: `orders-v2-counts-changelog` is application `orders`' store `v2-counts` or
/// application `orders-v2`'s store `counts`, whichever of the two is running. The name is split
/// before each `-` of `<app_id>-<store>`; an application id is its consumer group, so when a
/// split other than `app_id` names a group in `groups` the topic is taken to be that
/// application's and is not reported (a group whose offsets expired is no longer seen: such a
/// topic is reported, with the other ids it fits in [`OrphanedChangelog::may_belong_to`]).
/// Nothing here deletes anything: a wrong guess costs a WARN, never a topic.
pub(crate) fn orphaned_changelogs<'a>(
    app_id: &str,
    topics: impl IntoIterator<Item = &'a str>,
    used: &BTreeSet<&str>,
    groups: &BTreeSet<String>,
) -> Vec<OrphanedChangelog> {
    let mut out: Vec<OrphanedChangelog> = topics
        .into_iter()
        .filter(|t| !used.contains(t))
        .filter_map(|topic| {
            let store = topic
                .strip_prefix(app_id)?
                .strip_prefix('-')?
                .strip_suffix("-changelog")?;
            if store.is_empty() {
                return None;
            }
            let name = &topic[..topic.len() - "-changelog".len()];
            let others: Vec<String> = name
                .match_indices('-')
                .map(|(i, _)| &name[..i])
                .filter(|other| *other != app_id)
                .map(str::to_string)
                .collect();
            if others.iter().any(|o| groups.contains(o)) {
                tracing::debug!(
                    %topic,
                    "a changelog-shaped topic fits another application with a consumer group: \
                     not reported as orphaned"
                );
                return None;
            }
            Some(OrphanedChangelog {
                topic: topic.to_string(),
                store: store.to_string(),
                may_belong_to: others,
            })
        })
        .collect();
    out.sort_by(|a, b| a.topic.cmp(&b.topic));
    out
}

/// The command that deletes `topic` on `bootstrap` (the CLI has no delete of its own: deleting
/// state is a person's decision, made with Kafka's own tool).
pub(crate) fn delete_command(bootstrap: &str, topic: &str) -> String {
    format!("kafka-topics.sh --bootstrap-server {bootstrap} --delete --topic {topic}")
}

/// Names every orphaned changelog of application `app_id` among the broker's `topics` (the
/// list the start's missing-topics check fetched) in a WARN (see [`orphaned_changelogs`];
/// `used`: every topic this instance reads or writes as internal) and returns how many there
/// are, for `eosflow_orphaned_changelogs`. A renamed store starts empty next to its old
/// changelog; this is the one place that says so. Never refuses a start: a failing group list
/// only weakens the check (no other application is recognised).
pub(super) fn warn_orphaned_changelogs(
    member: &GroupMember,
    topics: &[String],
    bootstrap: &str,
    app_id: &str,
    used: &[String],
) -> usize {
    let prefix = format!("{app_id}-");
    if !topics
        .iter()
        .any(|t| t.starts_with(&prefix) && t.ends_with("-changelog") && !used.contains(t))
    {
        return 0;
    }
    let groups = member
        .group_names(ORPHAN_CHECK_TIMEOUT)
        .unwrap_or_else(|e| {
            tracing::warn!(
                error = %e,
                "listing the consumer groups failed: changelog-shaped topics of other \
                 applications whose id starts with this one's cannot be told apart"
            );
            BTreeSet::new()
        });
    let used: BTreeSet<&str> = used.iter().map(String::as_str).collect();
    let orphans = orphaned_changelogs(app_id, topics.iter().map(String::as_str), &used, &groups);
    for o in &orphans {
        let delete = delete_command(bootstrap, &o.topic);
        if o.may_belong_to.is_empty() {
            tracing::warn!(
                topic = %o.topic,
                store = %o.store,
                delete = %delete,
                "orphaned changelog: this topology has no store {:?} (renamed or removed?); a \
                 renamed store starts EMPTY, it does not take over the old one's state. Once \
                 its state is not needed, delete it: {delete}",
                o.store
            );
        } else {
            tracing::warn!(
                topic = %o.topic,
                store = %o.store,
                may_belong_to = ?o.may_belong_to,
                delete = %delete,
                "orphaned changelog: this topology has no store {:?} (renamed or removed?); a \
                 renamed store starts EMPTY, it does not take over the old one's state. The name \
                 also fits the application(s) {:?} (no consumer group of theirs was found): make \
                 sure it is not theirs, then, once its state is not needed, delete it: {delete}",
                o.store,
                o.may_belong_to
            );
        }
    }
    orphans.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orphans(
        app: &str,
        topics: &[&str],
        used: &[&str],
        groups: &[&str],
    ) -> Vec<(String, Vec<String>)> {
        let used: BTreeSet<&str> = used.iter().copied().collect();
        let groups: BTreeSet<String> = groups.iter().map(|g| g.to_string()).collect();
        orphaned_changelogs(app, topics.iter().copied(), &used, &groups)
            .into_iter()
            .map(|o| (o.topic, o.may_belong_to))
            .collect()
    }

    #[test]
    fn a_changelog_of_this_app_that_no_store_owns_is_orphaned() {
        let topics = [
            "shop-a-changelog",
            "shop-b-changelog",
            "shop-state-changelog",
            "shop.input",
            "shop.input.DLT",
            "shopx-a-changelog",
            "other-a-changelog",
            "shop--changelog",
            "shop-changelog",
            "shop-by-region-repartition",
        ];
        let used = ["shop-b-changelog", "shop-state-changelog", "shop.input"];
        assert_eq!(
            orphans("shop", &topics, &used, &["shop"]),
            [("shop-a-changelog".to_string(), vec![])],
            "the prefix is the app id and a dash, the store part is not empty, and the stores' \
             own changelogs are not orphans"
        );
        let found = orphaned_changelogs(
            "shop",
            ["shop-a-changelog"],
            &BTreeSet::new(),
            &BTreeSet::new(),
        );
        assert_eq!(found[0].store, "a");
    }

    #[test]
    fn a_name_that_fits_another_application_with_a_group_is_not_reported() {
        // App `orders` vs app `orders-v2`: `orders-v2-counts-changelog` is `orders`' store
        // `v2-counts` or `orders-v2`'s store `counts`.
        let topics = ["orders-v2-counts-changelog", "orders-gone-changelog"];
        assert_eq!(
            orphans("orders", &topics, &[], &["orders", "orders-v2"]),
            [("orders-gone-changelog".to_string(), vec![])],
            "orders-v2 has a group: its changelog is its own"
        );
        assert_eq!(
            orphans("orders", &topics, &[], &["orders"]),
            [
                ("orders-gone-changelog".to_string(), vec![]),
                (
                    "orders-v2-counts-changelog".to_string(),
                    vec!["orders-v2".to_string()]
                ),
            ],
            "without a group of orders-v2 it is reported, naming the other id it fits"
        );
        // The other way round: app `orders-v2` sees `orders`' store `v2-counts`.
        assert_eq!(
            orphans("orders-v2", &topics, &[], &["orders", "orders-v2"]),
            [],
            "orders has a group: `orders-v2-counts-changelog` may be its store v2-counts"
        );
        assert_eq!(
            orphans("orders-v2", &topics, &[], &[]),
            [(
                "orders-v2-counts-changelog".to_string(),
                vec!["orders".to_string()]
            )],
        );
    }

    #[test]
    fn the_delete_command_names_the_bootstrap_and_the_topic() {
        assert_eq!(
            delete_command("k1:9092,k2:9092", "shop-a-changelog"),
            "kafka-topics.sh --bootstrap-server k1:9092,k2:9092 --delete --topic shop-a-changelog"
        );
    }

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
