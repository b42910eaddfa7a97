//! Declared topics (`topics/*.toml`) and `eosflow topics plan|apply`: create what is missing,
//! report drift in what exists, never change a partition count behind the operator's back, and
//! check what a processor relies on — one partition count across each co-partitioned group,
//! compaction on changelogs ([`plan`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;
use serde::Deserialize;

use super::{ClientRole, KafkaClients};

/// Why topics could not be declared or applied.
#[derive(Debug, thiserror::Error)]
pub enum TopicsError {
    /// A declaration file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A declaration is malformed.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, naming the topic and field.
        message: String,
    },
    /// The broker refused or did not answer.
    #[error("kafka admin: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// The cluster has fewer brokers up than the replication factor asked for: eosflow never
    /// creates a topic with fewer replicas than asked (it would stay under-replicated for good).
    #[error(
        "creating topic {topic}: {asked} needs more brokers than the {up} the cluster has up \
         (broker: {code:?}); nothing was created with fewer replicas: bring the missing brokers \
         back and apply again"
    )]
    TooFewBrokers {
        /// The topic.
        topic: String,
        /// The factor asked for: `replication factor N (declared)` or the cluster's default.
        asked: String,
        /// Brokers in the cluster's metadata when the topic was asked for.
        up: usize,
        /// The broker's error code.
        code: RDKafkaErrorCode,
    },
    /// Creating one topic failed.
    #[error("creating topic {topic}: {code:?}")]
    Create {
        /// The topic.
        topic: String,
        /// The broker's error code.
        code: RDKafkaErrorCode,
    },
}

/// The names of the retry ladder's topics (`<topic>.retry.<n>`, `<topic>.DLT`): an application
/// declares them beside its own topics and reads its dead letters by them.
///
/// ```
/// use eosflow::kafka::topics::{dlt_topic, ladder_topics, retry_topic};
///
/// assert_eq!(retry_topic("orders", 2), "orders.retry.2");
/// assert_eq!(dlt_topic("orders.retry.2"), "orders.DLT", "a retry level's DLT is its input's");
/// assert_eq!(
///     ladder_topics(&["orders".to_string()], 1),
///     ["orders", "orders.retry.1", "orders.DLT"]
/// );
/// ```
pub use crate::retry::dlt::topic_for as dlt_topic;
/// See [`dlt_topic`].
pub use crate::retry::{ladder_topics, retry_topic};

/// One declared topic.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TopicSpec {
    /// Topic name; `${app}` is replaced by the application id.
    pub name: String,
    /// Partition count: input, retry and changelog topics of one pipeline share it.
    pub partitions: i32,
    /// Replication factor. Omitted (`None`): the cluster's `default.replication.factor`, which
    /// the broker applies (CreateTopics with −1). Declared: exactly this many replicas. Never
    /// capped to the brokers that are up: a cluster with too few refuses the topic, and
    /// [`apply`] says so ([`TopicsError::TooFewBrokers`]).
    #[serde(default)]
    pub replication: Option<i32>,
    /// `delete` or `compact` (changelogs, offsets).
    #[serde(default = "default_cleanup")]
    pub cleanup_policy: String,
    /// `retention.ms`; -1 keeps forever.
    #[serde(default)]
    pub retention_ms: Option<i64>,
    /// Other topic configs, as the broker names them.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

fn default_cleanup() -> String {
    "delete".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicFile {
    #[serde(default)]
    topic: Vec<TopicSpec>,
}

impl TopicSpec {
    /// A topic with `partitions` and `cleanup_policy`, the cluster's default replication factor
    /// and retention: what tools and tests create on the fly.
    pub fn new(name: impl Into<String>, partitions: i32, cleanup_policy: &str) -> Self {
        Self {
            name: name.into(),
            partitions,
            replication: None,
            cleanup_policy: cleanup_policy.into(),
            retention_ms: None,
            config: BTreeMap::new(),
        }
    }

    /// Broker configs this declaration sets.
    pub fn configs(&self) -> BTreeMap<String, String> {
        let mut c = self.config.clone();
        c.insert("cleanup.policy".into(), self.cleanup_policy.clone());
        if let Some(r) = self.retention_ms {
            c.insert("retention.ms".into(), r.to_string());
        }
        c
    }
}

/// Reads every `*.toml` in `dir`, sorted by file name, substituting `${app}`.
pub fn load_dir(dir: &Path, app_id: &str) -> Result<Vec<TopicSpec>, TopicsError> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|source| TopicsError::Read {
            path: dir.display().to_string(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut specs = Vec::new();
    for path in files {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|source| TopicsError::Read {
            path: shown.clone(),
            source,
        })?;
        specs.extend(parse(&text, &shown, app_id)?);
    }
    let mut seen = std::collections::BTreeSet::new();
    for s in &specs {
        if !seen.insert(s.name.clone()) {
            return Err(TopicsError::Invalid {
                path: dir.display().to_string(),
                message: format!("topic {} is declared twice", s.name),
            });
        }
    }
    Ok(specs)
}

/// Parses one declaration file.
pub fn parse(text: &str, path: &str, app_id: &str) -> Result<Vec<TopicSpec>, TopicsError> {
    let file: TopicFile = toml::from_str(text).map_err(|e| TopicsError::Invalid {
        path: path.into(),
        message: e.to_string(),
    })?;
    let mut out = Vec::new();
    for mut t in file.topic {
        t.name = t.name.replace("${app}", app_id);
        let invalid = |message: String| TopicsError::Invalid {
            path: path.into(),
            message,
        };
        if t.name.is_empty()
            || t.name.len() > 249
            || !t
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(invalid(format!(
                "topic name {:?}: use 1-249 of [a-zA-Z0-9._-]",
                t.name
            )));
        }
        if t.partitions < 1 {
            return Err(invalid(format!("topic {}: partitions must be ≥ 1", t.name)));
        }
        if t.replication.is_some_and(|r| r < 1) {
            return Err(invalid(format!(
                "topic {}: replication must be ≥ 1",
                t.name
            )));
        }
        if !["delete", "compact", "compact,delete", "delete,compact"]
            .contains(&t.cleanup_policy.as_str())
        {
            return Err(invalid(format!(
                "topic {}: cleanup_policy {:?} is not delete, compact or compact,delete",
                t.name, t.cleanup_policy
            )));
        }
        out.push(t);
    }
    Ok(out)
}

/// What `apply` found for one topic.
#[derive(Debug, Clone, PartialEq)]
pub enum TopicOutcome {
    /// It did not exist and was created.
    Created,
    /// It exists as declared.
    Unchanged,
    /// It exists but differs; nothing was changed.
    Drift(Vec<String>),
}

/// Creates missing topics and compares existing ones with their declaration.
pub async fn apply(
    clients: &KafkaClients,
    specs: &[TopicSpec],
    timeout: Duration,
) -> Result<Vec<(String, TopicOutcome)>, TopicsError> {
    let admin: AdminClient<DefaultClientContext> = clients.config(ClientRole::Admin).create()?;
    let metadata = admin.inner().fetch_metadata(None, timeout)?;
    let brokers = metadata.brokers().len();
    // Topic → (partitions, the fewest replicas of any of its partitions).
    let existing: BTreeMap<String, (i32, usize)> = metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| {
            let fewest = t.partitions().iter().map(|p| p.replicas().len()).min();
            (
                t.name().to_string(),
                (t.partitions().len() as i32, fewest.unwrap_or(0)),
            )
        })
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(timeout));
    let mut outcomes = Vec::new();

    let missing: Vec<&TopicSpec> = specs
        .iter()
        .filter(|s| !existing.contains_key(&s.name))
        .collect();
    let configs: Vec<Vec<(String, String)>> = missing
        .iter()
        .map(|s| s.configs().into_iter().collect())
        .collect();
    let new_topics: Vec<NewTopic<'_>> = missing
        .iter()
        .zip(&configs)
        .map(|(s, cfg)| {
            // −1: the broker applies its default.replication.factor (KIP-464). No cap: a
            // topic created with fewer replicas than asked stays under-replicated for good.
            let mut t = NewTopic::new(
                &s.name,
                s.partitions,
                TopicReplication::Fixed(s.replication.unwrap_or(-1)),
            );
            for (k, v) in cfg {
                t = t.set(k, v);
            }
            t
        })
        .collect();
    if !new_topics.is_empty() {
        for result in admin.create_topics(&new_topics, &opts).await? {
            match result {
                Ok(name) => outcomes.push((name, TopicOutcome::Created)),
                // Another instance created it between our metadata read and now.
                Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => {
                    outcomes.push((name, TopicOutcome::Unchanged))
                }
                Err((topic, code @ RDKafkaErrorCode::InvalidReplicationFactor)) => {
                    let asked = match missing.iter().find(|s| s.name == topic) {
                        Some(TopicSpec {
                            replication: Some(r),
                            ..
                        }) => format!("replication factor {r} (declared)"),
                        _ => "the cluster's default.replication.factor".to_string(),
                    };
                    return Err(TopicsError::TooFewBrokers {
                        topic,
                        asked,
                        up: brokers,
                        code,
                    });
                }
                Err((topic, code)) => return Err(TopicsError::Create { topic, code }),
            }
        }
    }

    let present: Vec<&TopicSpec> = specs
        .iter()
        .filter(|s| existing.contains_key(&s.name))
        .collect();
    if !present.is_empty() {
        let resources: Vec<ResourceSpecifier<'_>> = present
            .iter()
            .map(|s| ResourceSpecifier::Topic(&s.name))
            .collect();
        let described = admin.describe_configs(&resources, &opts).await?;
        for (spec, desc) in present.iter().zip(described) {
            let mut drift = Vec::new();
            let (actual_partitions, replicas) =
                existing.get(&spec.name).copied().unwrap_or_default();
            if let Some(r) = spec.replication.filter(|r| replicas < *r as usize) {
                drift.push(format!(
                    "replication: declared {r} but a partition has {replicas} replicas (not changed: \
                     add replicas with a partition reassignment)"
                ));
            }
            if actual_partitions != spec.partitions {
                drift.push(format!(
                    "partitions: declared {} but the topic has {} (not changed: repartitioning moves keys; do it deliberately)",
                    spec.partitions, actual_partitions
                ));
            }
            match desc {
                Ok(resource) => {
                    for (k, want) in spec.configs() {
                        let have = resource.get(&k).and_then(|e| e.value.clone());
                        if have.as_deref() != Some(want.as_str()) {
                            drift.push(format!(
                                "{k}: declared {want} but the topic has {}",
                                have.unwrap_or_else(|| "(unset)".into())
                            ));
                        }
                    }
                }
                Err(code) => drift.push(format!("configs could not be described: {code:?}")),
            }
            let outcome = if drift.is_empty() {
                TopicOutcome::Unchanged
            } else {
                TopicOutcome::Drift(drift)
            };
            outcomes.push((spec.name.clone(), outcome));
        }
    }
    Ok(outcomes)
}

/// [`apply`] from synchronous code (tools, the verifier, tests), on a private runtime.
pub fn apply_blocking(
    clients: &KafkaClients,
    specs: &[TopicSpec],
    timeout: Duration,
) -> Result<Vec<(String, TopicOutcome)>, TopicsError> {
    blocking(apply(clients, specs, timeout))
}

/// Topics that must share one partition count: partition `i` of each belongs to the same
/// task (a processor's inputs, their retry levels and DLTs, its changelog).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoPartitioned {
    /// What the group is, for messages (`count`, `orders`, …).
    pub name: String,
    /// Its topics.
    pub topics: Vec<String>,
}

/// Every topic a processor run with `config` needs, declared with `partitions` partitions:
/// each input with its `.retry.<n>` levels and `.DLT`, and the changelog of store `store`
/// (`<app.id>-<store>-changelog`, compacted) — and the group they form.
pub fn processor_topics(
    config: &crate::Config,
    store: &str,
    partitions: i32,
) -> (Vec<TopicSpec>, CoPartitioned) {
    let mut names: Vec<String> = config
        .processor
        .input_topics
        .iter()
        .flat_map(|t| {
            crate::retry::ladder_topics(
                std::slice::from_ref(t),
                config.retry.policy_for(t).levels(),
            )
        })
        .collect();
    let mut specs: Vec<TopicSpec> = names
        .iter()
        .map(|t| TopicSpec::new(t.clone(), partitions, "delete"))
        .collect();
    let changelog = format!("{}-{store}-changelog", config.app.id);
    specs.push(TopicSpec::new(changelog.clone(), partitions, "compact"));
    names.push(changelog);
    let group = CoPartitioned {
        name: config.app.id.clone(),
        topics: names,
    };
    (specs, group)
}

/// What the broker has for one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerTopic {
    /// Its partition count.
    pub partitions: i32,
    /// Its `cleanup.policy`, when it could be described.
    pub cleanup_policy: Option<String>,
    /// Its `min.insync.replicas`, when it could be described: fewer in-sync replicas than
    /// this and the broker refuses `acks=all` writes.
    pub min_insync_replicas: Option<usize>,
}

/// One thing [`plan`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanItem {
    /// The topic does not exist; `apply` creates it.
    Create {
        /// The topic.
        topic: String,
        /// Its declared partition count.
        partitions: i32,
    },
    /// The topic exists with another partition count than declared (never changed by `apply`).
    PartitionDrift {
        /// The topic.
        topic: String,
        /// Declared.
        declared: i32,
        /// On the broker.
        actual: i32,
    },
    /// A changelog (`…-changelog`, or declared `compact`) is not compacted: a restore would
    /// replay every update ever written, or lose keys to retention.
    NotCompacted {
        /// The topic.
        topic: String,
        /// Its cleanup policy (on the broker, or declared when it does not exist yet).
        cleanup_policy: String,
    },
    /// Topics of one co-partitioned group have different partition counts (on the broker, or
    /// declared for those still to be created): records of one key would meet different tasks.
    Mismatch {
        /// The group.
        group: String,
        /// Every topic of the group with its count.
        counts: Vec<(String, i32)>,
    },
}

impl PlanItem {
    /// Whether `apply` resolves it (creating a topic) rather than a person.
    pub fn is_fixed_by_apply(&self) -> bool {
        matches!(self, Self::Create { .. })
    }
}

impl std::fmt::Display for PlanItem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Create { topic, partitions } => {
                write!(f, "create    {topic} ({partitions} partitions)")
            }
            Self::PartitionDrift {
                topic,
                declared,
                actual,
            } => write!(
                f,
                "DRIFT     {topic}: declared {declared} partitions but the topic has {actual} (not changed: repartitioning moves keys)"
            ),
            Self::NotCompacted {
                topic,
                cleanup_policy,
            } => write!(
                f,
                "NOT COMPACTED {topic}: cleanup.policy={cleanup_policy}, a changelog needs compact"
            ),
            Self::Mismatch { group, counts } => {
                let listed: Vec<String> = counts.iter().map(|(t, n)| format!("{t}={n}")).collect();
                write!(
                    f,
                    "MISMATCH  co-partitioned group {group}: partition counts differ: {}",
                    listed.join(", ")
                )
            }
        }
    }
}

/// Compares declarations and co-partitioned groups with what the broker has. Pure: the broker's
/// side comes from [`describe`]. Topics of a group that are neither declared nor on the broker
/// are reported by `Create` only when declared; a group is checked over the topics whose count
/// is known.
///
/// ```
/// use std::collections::BTreeMap;
/// use eosflow::kafka::topics::{plan, BrokerTopic, CoPartitioned, PlanItem, TopicSpec};
///
/// let specs = [TopicSpec::new("in", 4, "delete"), TopicSpec::new("app-state-changelog", 4, "compact")];
/// let group = CoPartitioned { name: "app".into(), topics: vec!["in".into(), "app-state-changelog".into()] };
/// let broker = BTreeMap::from([("in".to_string(), BrokerTopic { partitions: 8, cleanup_policy: Some("delete".into()), min_insync_replicas: None })]);
/// let items = plan(&specs, &[group], &broker);
/// assert!(items.contains(&PlanItem::Create { topic: "app-state-changelog".into(), partitions: 4 }));
/// assert!(items.iter().any(|i| matches!(i, PlanItem::Mismatch { counts, .. }
///     if counts == &[("in".to_string(), 8), ("app-state-changelog".to_string(), 4)])));
/// ```
pub fn plan(
    specs: &[TopicSpec],
    groups: &[CoPartitioned],
    broker: &BTreeMap<String, BrokerTopic>,
) -> Vec<PlanItem> {
    let mut items = Vec::new();
    let declared: BTreeMap<&str, &TopicSpec> = specs.iter().map(|s| (s.name.as_str(), s)).collect();
    for s in specs {
        match broker.get(&s.name) {
            None => items.push(PlanItem::Create {
                topic: s.name.clone(),
                partitions: s.partitions,
            }),
            Some(b) if b.partitions != s.partitions => items.push(PlanItem::PartitionDrift {
                topic: s.name.clone(),
                declared: s.partitions,
                actual: b.partitions,
            }),
            Some(_) => {}
        }
    }
    // Changelogs: `…-changelog` by name, or declared compacted.
    let mut changelogs: Vec<&str> = specs
        .iter()
        .map(|s| s.name.as_str())
        .chain(
            groups
                .iter()
                .flat_map(|g| g.topics.iter().map(String::as_str)),
        )
        .filter(|t| {
            t.ends_with("-changelog")
                || declared
                    .get(t)
                    .is_some_and(|s| s.cleanup_policy.contains("compact"))
        })
        .collect();
    changelogs.sort_unstable();
    changelogs.dedup();
    for topic in changelogs {
        let policy = match (broker.get(topic), declared.get(topic)) {
            (Some(b), _) => b.cleanup_policy.clone(),
            (None, Some(s)) => Some(s.cleanup_policy.clone()),
            (None, None) => None,
        };
        if let Some(p) = policy.filter(|p| !p.contains("compact")) {
            items.push(PlanItem::NotCompacted {
                topic: topic.to_string(),
                cleanup_policy: p,
            });
        }
    }
    for g in groups {
        let counts: Vec<(String, i32)> = g
            .topics
            .iter()
            .filter_map(|t| {
                let n = broker
                    .get(t)
                    .map(|b| b.partitions)
                    .or_else(|| declared.get(t.as_str()).map(|s| s.partitions))?;
                Some((t.clone(), n))
            })
            .collect();
        if counts.windows(2).any(|w| w[0].1 != w[1].1) {
            items.push(PlanItem::Mismatch {
                group: g.name.clone(),
                counts,
            });
        }
    }
    items
}

/// The partition count, cleanup policy and `min.insync.replicas` of each of `topics` that
/// exists on the broker.
pub async fn describe(
    clients: &KafkaClients,
    topics: &[String],
    timeout: Duration,
) -> Result<BTreeMap<String, BrokerTopic>, TopicsError> {
    let admin: AdminClient<DefaultClientContext> = clients.config(ClientRole::Admin).create()?;
    let metadata = admin.inner().fetch_metadata(None, timeout)?;
    let mut found: BTreeMap<String, BrokerTopic> = metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none() && topics.iter().any(|n| n == t.name()))
        .map(|t| {
            let b = BrokerTopic {
                partitions: t.partitions().len() as i32,
                cleanup_policy: None,
                min_insync_replicas: None,
            };
            (t.name().to_string(), b)
        })
        .collect();
    let names: Vec<String> = found.keys().cloned().collect();
    let resources: Vec<ResourceSpecifier<'_>> =
        names.iter().map(|n| ResourceSpecifier::Topic(n)).collect();
    if !resources.is_empty() {
        let opts = AdminOptions::new().operation_timeout(Some(timeout));
        for (name, desc) in names
            .iter()
            .zip(admin.describe_configs(&resources, &opts).await?)
        {
            if let (Ok(resource), Some(b)) = (desc, found.get_mut(name)) {
                b.cleanup_policy = resource.get("cleanup.policy").and_then(|e| e.value.clone());
                b.min_insync_replicas = resource
                    .get("min.insync.replicas")
                    .and_then(|e| e.value.as_deref()?.parse().ok());
            }
        }
    }
    Ok(found)
}

/// [`describe`] from synchronous code (not from inside a tokio runtime).
pub fn describe_blocking(
    clients: &KafkaClients,
    topics: &[String],
    timeout: Duration,
) -> Result<BTreeMap<String, BrokerTopic>, TopicsError> {
    blocking(describe(clients, topics, timeout))
}

/// [`describe`] then [`plan`], from synchronous code: what `eosflow topics plan` prints and
/// what a process checks before it starts.
pub fn plan_blocking(
    clients: &KafkaClients,
    specs: &[TopicSpec],
    groups: &[CoPartitioned],
    timeout: Duration,
) -> Result<Vec<PlanItem>, TopicsError> {
    let mut names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    names.extend(groups.iter().flat_map(|g| g.topics.iter().cloned()));
    let broker = blocking(describe(clients, &names, timeout))?;
    Ok(plan(specs, groups, &broker))
}

/// Runs `f` on a private current-thread runtime (tools and tests call from synchronous code).
fn blocking<T>(
    f: impl std::future::Future<Output = Result<T, TopicsError>>,
) -> Result<T, TopicsError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| TopicsError::Read {
            path: "tokio runtime".into(),
            source,
        })?
        .block_on(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_substitutes_app() {
        let t = parse(
            "[[topic]]\nname = \"${app}-count-changelog\"\npartitions = 8\ncleanup_policy = \"compact\"\n",
            "x.toml",
            "shop",
        )
        .expect("valid");
        assert_eq!(t[0].name, "shop-count-changelog");
        assert_eq!(
            t[0].configs().get("cleanup.policy").map(String::as_str),
            Some("compact")
        );
    }

    #[test]
    fn an_undeclared_replication_factor_is_the_clusters_default_and_a_declared_one_is_kept() {
        let t = parse(
            "[[topic]]\nname = \"a\"\npartitions = 1\n[[topic]]\nname = \"b\"\npartitions = 1\nreplication = 5\n",
            "x.toml",
            "app",
        )
        .expect("valid");
        assert_eq!(t[0].replication, None);
        assert_eq!(t[1].replication, Some(5));
        assert_eq!(TopicSpec::new("c", 1, "delete").replication, None);
        let e = parse(
            "[[topic]]\nname = \"a\"\npartitions = 1\nreplication = 0\n",
            "x.toml",
            "app",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("replication"), "{e}");
    }

    #[test]
    fn bad_declarations_name_topic_and_field() {
        let e = parse("[[topic]]\nname = \"a\"\npartitions = 0\n", "x.toml", "app")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("x.toml") && e.contains("topic a") && e.contains("partitions"),
            "{e}"
        );
        let e = parse(
            "[[topic]]\nname = \"a\"\npartitions = 1\ncleanup_policy = \"forever\"\n",
            "x.toml",
            "app",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cleanup_policy"), "{e}");
        let e = parse(
            "[[topic]]\nname = \"a b\"\npartitions = 1\n",
            "x.toml",
            "app",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("topic name"), "{e}");
    }

    #[test]
    fn repo_declarations_are_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("topics");
        let specs = load_dir(&dir, "eosflow").expect("topics/ parses");
        assert!(!specs.is_empty());
    }

    fn on_broker(topics: &[(&str, i32, &str)]) -> BTreeMap<String, BrokerTopic> {
        topics
            .iter()
            .map(|(t, n, p)| {
                let b = BrokerTopic {
                    partitions: *n,
                    cleanup_policy: Some(p.to_string()),
                    min_insync_replicas: None,
                };
                (t.to_string(), b)
            })
            .collect()
    }

    #[test]
    fn plan_is_empty_when_the_broker_matches() {
        let specs = [
            TopicSpec::new("in", 4, "delete"),
            TopicSpec::new("a-s-changelog", 4, "compact"),
        ];
        let group = CoPartitioned {
            name: "a".into(),
            topics: vec!["in".into(), "a-s-changelog".into()],
        };
        let broker = on_broker(&[("in", 4, "delete"), ("a-s-changelog", 4, "compact")]);
        assert_eq!(plan(&specs, &[group], &broker), vec![]);
    }

    #[test]
    fn plan_names_every_topic_of_a_mismatched_group_and_uncompacted_changelogs() {
        let group = CoPartitioned {
            name: "a".into(),
            topics: vec!["in".into(), "in.DLT".into(), "a-s-changelog".into()],
        };
        let broker = on_broker(&[("in", 8, "delete"), ("a-s-changelog", 4, "delete")]);
        let specs = [TopicSpec::new("in.DLT", 4, "delete")];
        let items = plan(&specs, &[group], &broker);
        assert!(items.contains(&PlanItem::Create {
            topic: "in.DLT".into(),
            partitions: 4
        }));
        assert!(items.contains(&PlanItem::NotCompacted {
            topic: "a-s-changelog".into(),
            cleanup_policy: "delete".into()
        }));
        let shown: Vec<String> = items.iter().map(ToString::to_string).collect();
        assert!(
            shown.iter().any(|l| l.contains("in=8")
                && l.contains("in.DLT=4")
                && l.contains("a-s-changelog=4")),
            "{shown:?}"
        );
    }

    #[test]
    fn processor_topics_follow_the_retry_ladder() {
        let mut c = crate::Config::default();
        c.app.id = "shop".into();
        c.processor.input_topics = vec!["in".into()];
        c.retry.delays_ms = vec![10, 20];
        let (specs, group) = processor_topics(&c, "state", 3);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "in",
                "in.retry.1",
                "in.retry.2",
                "in.DLT",
                "shop-state-changelog"
            ]
        );
        assert_eq!(group.topics.len(), 5);
        assert!(specs.iter().all(|s| s.partitions == 3));
    }
}
