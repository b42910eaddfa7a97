//! The contracts in `schemas/`: one Avro file per event type and version
//! (`schemas/<domain>/<event>.v<n>.avsc`, type name `<domain>.<event>.v<n>`), and how their
//! registry subjects are named.

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
    /// The domain directory (`orders`).
    pub domain: String,
    /// The event name (`order-placed`).
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

/// The reference contracts compiled into the binary (so processors need no schemas/ at run time).
const BUILTIN: &[(&str, &str)] = &[
    (
        "orders/order-placed.v1.avsc",
        include_str!("../../schemas/orders/order-placed.v1.avsc"),
    ),
    (
        "orders/order-placed.v2.avsc",
        include_str!("../../schemas/orders/order-placed.v2.avsc"),
    ),
    (
        "orders/order-paid.v1.avsc",
        include_str!("../../schemas/orders/order-paid.v1.avsc"),
    ),
    (
        "orders/order-shipped.v1.avsc",
        include_str!("../../schemas/orders/order-shipped.v1.avsc"),
    ),
    (
        "orders/order-cancelled.v1.avsc",
        include_str!("../../schemas/orders/order-cancelled.v1.avsc"),
    ),
    (
        "orders/order-status-changed.v1.avsc",
        include_str!("../../schemas/orders/order-status-changed.v1.avsc"),
    ),
    (
        "orders/customer-order-updated.v1.avsc",
        include_str!("../../schemas/orders/customer-order-updated.v1.avsc"),
    ),
    (
        "fulfilment/stock-command.v1.avsc",
        include_str!("../../schemas/fulfilment/stock-command.v1.avsc"),
    ),
    (
        "fulfilment/stock-reply.v1.avsc",
        include_str!("../../schemas/fulfilment/stock-reply.v1.avsc"),
    ),
    (
        "fulfilment/payment-command.v1.avsc",
        include_str!("../../schemas/fulfilment/payment-command.v1.avsc"),
    ),
    (
        "fulfilment/payment-reply.v1.avsc",
        include_str!("../../schemas/fulfilment/payment-reply.v1.avsc"),
    ),
    (
        "fulfilment/saga-ended.v1.avsc",
        include_str!("../../schemas/fulfilment/saga-ended.v1.avsc"),
    ),
];

impl Catalog {
    /// The contracts shipped in `schemas/` at build time.
    pub fn builtin() -> Result<Self, CatalogError> {
        let mut c = Self::default();
        for (rel, text) in BUILTIN {
            c.add(Path::new(rel), rel, text)?;
        }
        Ok(c)
    }

    /// Loads every `<domain>/<event>.v<n>.avsc` under `root`.
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

    #[test]
    fn builtin_matches_the_schemas_directory() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
        let on_disk = Catalog::from_dir(&dir).expect("schemas/ loads");
        let built = Catalog::builtin().expect("built-ins load");
        let a: Vec<_> = on_disk.iter().map(|c| &c.type_name).collect();
        let b: Vec<_> = built.iter().map(|c| &c.type_name).collect();
        assert_eq!(a, b, "add new schemas to BUILTIN in src/codec/catalog.rs");
        let v2 = built.get("orders.order-placed.v2").expect("v2");
        assert_eq!(
            v2.previous_type().as_deref(),
            Some("orders.order-placed.v1")
        );
        assert_eq!(
            SubjectStrategy::TopicRecord.subject("orders", v2),
            "orders-orders.v2.OrderPlaced"
        );
    }
}
