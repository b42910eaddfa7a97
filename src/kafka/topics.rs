//! Declared topics (`topics/*.toml`) and `eosflow topics apply`: create what is missing,
//! report drift in what exists, never change a partition count behind the operator's back.

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
    /// Creating one topic failed.
    #[error("creating topic {topic}: {code:?}")]
    Create {
        /// The topic.
        topic: String,
        /// The broker's error code.
        code: RDKafkaErrorCode,
    },
}

/// One declared topic.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TopicSpec {
    /// Topic name; `${app}` is replaced by the application id.
    pub name: String,
    /// Partition count: input, retry and changelog topics of one pipeline share it.
    pub partitions: i32,
    /// Replication factor in production; capped to the broker count on smaller clusters.
    #[serde(default = "default_replication")]
    pub replication: i32,
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

fn default_replication() -> i32 {
    3
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
    /// A topic with `partitions` and `cleanup_policy`, replication 3 (capped on small clusters)
    /// and the broker's default retention: what tools and tests create on the fly.
    pub fn new(name: impl Into<String>, partitions: i32, cleanup_policy: &str) -> Self {
        Self {
            name: name.into(),
            partitions,
            replication: default_replication(),
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
        if t.replication < 1 {
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
    let brokers = metadata.brokers().len().max(1) as i32;
    let existing: BTreeMap<String, i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| (t.name().to_string(), t.partitions().len() as i32))
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
            let mut t = NewTopic::new(
                &s.name,
                s.partitions,
                TopicReplication::Fixed(s.replication.min(brokers)),
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
            let actual_partitions = existing.get(&spec.name).copied().unwrap_or_default();
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
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| TopicsError::Read {
            path: "tokio runtime".into(),
            source,
        })?
        .block_on(apply(clients, specs, timeout))
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
}
