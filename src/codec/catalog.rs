//! The contracts in `schemas/`: one Avro file per event type and version
//! (`schemas/<domain>/<event>.v<n>.avsc`, type name `<domain>.<event>.v<n>`), and how their
//! registry subjects are named. The core knows no domain: an application registers its own
//! contracts ([`Catalog::from_texts`]) or loads a directory ([`Catalog::from_dir`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why the schema directory could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// A file or directory could not be read.
    #[error("reading {path}: {error}")]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// A file name does not follow `<event>.v<n>.avsc` under a domain directory.
    #[error("{path}: {reason}")]
    Layout {
        /// The offending path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A file is not a valid Avro schema.
    #[error("{path}: not valid Avro: {error}")]
    Avro {
        /// The offending file.
        path: PathBuf,
        /// apache-avro's parse error.
        error: String,
    },
}

/// One contract: an event type at one version.
#[derive(Debug, Clone)]
pub struct Contract {
    /// `<domain>.<event>.v<n>`, the value of the `type` header.
    pub type_name: String,
    /// The domain directory (`billing`).
    pub domain: String,
    /// The event name (`invoice-sent`).
    pub event: String,
    /// The version number `n`.
    pub version: u32,
    /// The Avro full name (`namespace.name`) of the top-level record.
    pub full_name: String,
    /// The schema text as stored.
    pub text: String,
    /// Where it was read from (relative to the catalog root for built-ins).
    pub path: PathBuf,
}

impl Contract {
    /// The type name of the previous version, if any.
    pub fn previous_type(&self) -> Option<String> {
        (self.version > 1).then(|| format!("{}.{}.v{}", self.domain, self.event, self.version - 1))
    }
}

/// All contracts of a schema directory, by type name.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    contracts: BTreeMap<String, Contract>,
}

impl Catalog {
    /// An empty catalog: add an application's contracts with [`Catalog::register`] or
    /// [`Catalog::from_texts`], or load a directory with [`Catalog::from_dir`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The contracts an application compiles in (`include_str!` of its `.avsc` files), so its
    /// processors need no schema directory at run time: pairs of the path relative to the schema
    /// root (`<domain>/<event>.v<n>.avsc`, which names the type) and the schema text.
    ///
    /// ```
    /// use eosflow::contracts::Catalog;
    ///
    /// let v1 = r#"{"type":"record","name":"Created","namespace":"things.v1",
    ///              "fields":[{"name":"id","type":"string"}]}"#;
    /// let catalog = Catalog::from_texts([("things/thing-created.v1.avsc", v1)])?;
    /// let c = catalog.get("things.thing-created.v1").expect("registered");
    /// assert_eq!(c.full_name, "things.v1.Created");
    /// assert!(catalog.get("things.thing-created.v2").is_none());
    /// # Ok::<(), eosflow::contracts::CatalogError>(())
    /// ```
    pub fn from_texts<'t>(
        contracts: impl IntoIterator<Item = (&'t str, &'t str)>,
    ) -> Result<Self, CatalogError> {
        let mut c = Self::new();
        for (rel, text) in contracts {
            c.register(rel, text)?;
        }
        Ok(c)
    }

    /// Adds one contract: `rel` is its path under the schema root
    /// (`<domain>/<event>.v<n>.avsc`), `text` the Avro schema. A contract of the same type name
    /// is replaced.
    pub fn register(&mut self, rel: &str, text: &str) -> Result<&mut Self, CatalogError> {
        self.add(Path::new(rel), rel, text)?;
        Ok(self)
    }

    /// Loads every `<domain>/<event>.v<n>.avsc` under `root`, except `root/stores/` (store
    /// value schemas, [`super::store_schema`]).
    pub fn from_dir(root: &Path) -> Result<Self, CatalogError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| CatalogError::Io { path, error }
        };
        let mut c = Self::default();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
                let path = entry.map_err(io(&dir))?.path();
                if path.is_dir() {
                    // Store value schemas are no topic's contracts (`schemas check` reads them
                    // on their own, docs/state-evolution.md).
                    if dir == root
                        && path
                            .file_name()
                            .is_some_and(|n| n == super::store_schema::STORES_DIR)
                    {
                        continue;
                    }
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "avsc") {
                    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
                    let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
                    let rel_s = rel.to_string_lossy().replace('\\', "/");
                    c.add(&path, &rel_s, &text)?;
                }
            }
        }
        Ok(c)
    }

    /// As [`Catalog::register`], remembering `path` as where the text was read from.
    pub(crate) fn add_at(
        &mut self,
        path: &Path,
        rel: &str,
        text: &str,
    ) -> Result<(), CatalogError> {
        self.add(path, rel, text)
    }

    fn add(&mut self, path: &Path, rel: &str, text: &str) -> Result<(), CatalogError> {
        let layout = |reason: &str| CatalogError::Layout {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        };
        let (domain, file) = rel
            .rsplit_once('/')
            .ok_or_else(|| layout("expected <domain>/<event>.v<n>.avsc"))?;
        let domain = domain.rsplit('/').next().unwrap_or(domain);
        let stem = file
            .strip_suffix(".avsc")
            .ok_or_else(|| layout("not an .avsc file"))?;
        let (event, version) = stem
            .rsplit_once(".v")
            .ok_or_else(|| layout("file name lacks .v<n>"))?;
        let version: u32 = version
            .parse()
            .map_err(|_| layout("version after .v is not a number"))?;
        apache_avro::Schema::parse_str(text).map_err(|e| CatalogError::Avro {
            path: path.to_path_buf(),
            error: e.to_string(),
        })?;
        let full_name = super::registry::record_name(text)
            .ok_or_else(|| layout("top level is not a named record"))?;
        let type_name = format!("{domain}.{event}.v{version}");
        self.contracts.insert(
            type_name.clone(),
            Contract {
                type_name,
                domain: domain.to_string(),
                event: event.to_string(),
                version,
                full_name,
                text: text.to_string(),
                path: path.to_path_buf(),
            },
        );
        Ok(())
    }

    /// The contract named `type_name`.
    pub fn get(&self, type_name: &str) -> Option<&Contract> {
        self.contracts.get(type_name)
    }

    /// The contract whose top-level record has Avro full name `full_name`.
    pub fn by_full_name(&self, full_name: &str) -> Option<&Contract> {
        self.contracts.values().find(|c| c.full_name == full_name)
    }

    /// Every contract, ordered by type name.
    pub fn iter(&self) -> impl Iterator<Item = &Contract> {
        self.contracts.values()
    }

    /// How many contracts there are.
    pub fn len(&self) -> usize {
        self.contracts.len()
    }

    /// Whether the catalog is empty.
    pub fn is_empty(&self) -> bool {
        self.contracts.is_empty()
    }
}

/// How a registry subject is named for a record on a topic (Confluent's strategies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SubjectStrategy {
    /// `<topic>-<record full name>`: one topic carries several event types of one aggregate.
    #[default]
    TopicRecord,
    /// `<topic>-value`: one type per topic.
    Topic,
    /// `<record full name>`: the type is shared across topics.
    Record,
}

impl std::str::FromStr for SubjectStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "topic-record" => Ok(Self::TopicRecord),
            "topic" => Ok(Self::Topic),
            "record" => Ok(Self::Record),
            other => Err(format!(
                "unknown subject strategy {other:?} (topic-record, topic, record)"
            )),
        }
    }
}

impl SubjectStrategy {
    /// The subject for `contract` on `topic`.
    pub fn subject(self, topic: &str, contract: &Contract) -> String {
        match self {
            Self::TopicRecord => format!("{topic}-{}", contract.full_name),
            Self::Topic => format!("{topic}-value"),
            Self::Record => contract.full_name.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = r#"{"type":"record","name":"Created","namespace":"things.v1",
        "fields":[{"name":"id","type":"string"}]}"#;
    const V2: &str = r#"{"type":"record","name":"Created","namespace":"things.v2",
        "fields":[{"name":"id","type":"string"},
                  {"name":"tag","type":["null","string"],"default":null}]}"#;

    #[test]
    fn registered_contracts_are_named_by_their_path_and_know_their_previous_version() {
        let c = Catalog::from_texts([
            ("things/thing-created.v1.avsc", V1),
            ("things/thing-created.v2.avsc", V2),
        ])
        .expect("valid contracts");
        assert_eq!(c.len(), 2);
        let v2 = c.get("things.thing-created.v2").expect("v2");
        assert_eq!(
            v2.previous_type().as_deref(),
            Some("things.thing-created.v1")
        );
        assert_eq!(
            c.by_full_name("things.v1.Created").map(|c| c.version),
            Some(1)
        );
        assert_eq!(
            SubjectStrategy::TopicRecord.subject("things", v2),
            "things-things.v2.Created"
        );
    }

    #[test]
    fn a_misnamed_file_or_invalid_schema_is_refused_naming_it() {
        let e = Catalog::new()
            .register("thing-created.avsc", V1)
            .map(|_| ())
            .expect_err("no domain, no version");
        assert!(
            e.to_string()
                .contains("expected <domain>/<event>.v<n>.avsc"),
            "{e}"
        );
        let e = Catalog::new()
            .register("things/thing-created.v1.avsc", "{not avro")
            .map(|_| ())
            .expect_err("not Avro");
        assert!(
            e.to_string()
                .starts_with("things/thing-created.v1.avsc: not valid Avro"),
            "{e}"
        );
    }
}
