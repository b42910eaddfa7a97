//! `eosflow schemas check`: every contract against its previous version in the repo (the
//! `v<n-1>` file), against its own last committed text (`git show HEAD:<file>`), and against the
//! registry's latest version of its subject, under the subject's rule. Failures name the field
//! and the reason.
//!
//! Store value schemas (`<dir>/stores/<store>.v<n>.avsc`, docs/state-evolution.md) are checked
//! BACKWARD (FULL when `compatibility.toml` says so for `stores.<store>`): the new version must
//! read everything the store holds, so each version is compared with its previous file and its
//! committed text, and the newest version of each store with *every* version registered under
//! the store's changelog subject `<app.id>-<store>-changelog-value` (the values the store may
//! hold were written with any of them, not only the latest).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::catalog::{Catalog, CatalogError, Contract, SubjectStrategy};
use super::compat::{self, Rule};
use super::registry::{CodecError, Registry, RegistryVerdict};

/// Why the check could not run (as opposed to finding incompatibilities).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The schema directory is unreadable or malformed.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// `compatibility.toml` is unreadable or malformed.
    #[error("{path}: {reason}")]
    Rules {
        /// The rules file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The registry failed (not: said incompatible).
    #[error(transparent)]
    Registry(#[from] CodecError),
    /// A schema text is not JSON.
    #[error("{0}: {1}")]
    Compat(String, compat::CompatError),
}

/// Rules per subject family (`<domain>.<event>`), from `<dir>/compatibility.toml`:
/// `default = "BACKWARD"` and a `[types]` table of overrides.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    default: Rule,
    by_family: BTreeMap<String, Rule>,
}

impl Rules {
    /// Reads `<dir>/compatibility.toml` if present (else BACKWARD everywhere).
    pub fn load(dir: &Path) -> Result<Self, CheckError> {
        let path = dir.join("compatibility.toml");
        let err = |reason: String| CheckError::Rules {
            path: path.clone(),
            reason,
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(err(e.to_string())),
        };
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            default: Option<String>,
            #[serde(default)]
            types: BTreeMap<String, String>,
        }
        let f: File = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        let mut rules = Self::default();
        if let Some(d) = f.default {
            rules.default = d.parse().map_err(err)?;
        }
        for (family, r) in f.types {
            rules
                .by_family
                .insert(family, r.parse().map_err(|e: String| err(e))?);
        }
        Ok(rules)
    }

    /// The rule for `contract`.
    pub fn rule(&self, c: &Contract) -> Rule {
        self.by_family
            .get(&format!("{}.{}", c.domain, c.event))
            .copied()
            .unwrap_or(self.default)
    }
}

/// What to compare against.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// The schema directory.
    pub dir: PathBuf,
    /// Compare against `git show HEAD:<file>` when the file changed.
    pub git: bool,
    /// Compare against this registry's latest version of each subject.
    pub registry: Option<Registry>,
    /// Subject naming.
    pub strategy: SubjectStrategy,
    /// Topic of a contract's subject; `${domain}` is replaced by its domain.
    pub topic_template: String,
    /// The application whose stores' changelog subjects hold what its stores may contain
    /// (`<app.id>-<store>-changelog-value`); `None` skips the registry for store schemas.
    pub app_id: Option<String>,
}

/// The topic of `c` under `template` (`${domain}` → `billing`).
pub fn topic_for(template: &str, c: &Contract) -> String {
    template.replace("${domain}", &c.domain)
}

/// One registered contract.
#[derive(Debug, Clone)]
pub struct Registered {
    /// Its type name.
    pub type_name: String,
    /// The subject it is under.
    pub subject: String,
    /// Its schema id.
    pub id: u32,
    /// The rule set on the subject.
    pub rule: Rule,
}

/// Registers every contract of `opts.dir` and sets each subject's rule from
/// `compatibility.toml`, so the registry enforces what `schemas check` checks (the CLI's
/// `schemas register`; services call `Registry::register_catalog` at start).
pub async fn register(
    opts: &CheckOptions,
    registry: &Registry,
) -> Result<Vec<Registered>, CheckError> {
    let catalog = Catalog::from_dir(&opts.dir)?;
    let rules = Rules::load(&opts.dir)?;
    let mut out = Vec::new();
    for c in catalog.iter() {
        let subject = opts
            .strategy
            .subject(&topic_for(&opts.topic_template, c), c);
        let id = registry.register(&subject, &c.text).await?;
        let rule = rules.rule(c);
        registry
            .set_compatibility(&subject, &rule.to_string())
            .await?;
        out.push(Registered {
            type_name: c.type_name.clone(),
            subject,
            id,
            rule,
        });
    }
    Ok(out)
}

/// One comparison and its outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The contract checked.
    pub type_name: String,
    /// What it was compared against.
    pub against: String,
    /// The rule applied.
    pub rule: Rule,
    /// Empty when compatible; else `path: reason` lines.
    pub problems: Vec<String>,
    /// Set when the comparison was skipped, with why.
    pub skipped: Option<String>,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = if self.skipped.is_some() {
            "skip"
        } else if self.problems.is_empty() {
            "ok"
        } else {
            "FAIL"
        };
        write!(
            f,
            "{status:<5}{} vs {} [{}]",
            self.type_name, self.against, self.rule
        )?;
        if let Some(s) = &self.skipped {
            write!(f, ": {s}")?;
        }
        for p in &self.problems {
            write!(f, "\n       {p}")?;
        }
        Ok(())
    }
}

/// Runs every comparison; the caller fails when any outcome has problems.
pub async fn check(opts: &CheckOptions) -> Result<Vec<Outcome>, CheckError> {
    let catalog = Catalog::from_dir(&opts.dir)?;
    let rules = Rules::load(&opts.dir)?;
    let mut out = Vec::new();
    for c in catalog.iter() {
        let rule = rules.rule(c);
        let compare = |against: String, old: &str| -> Result<Outcome, CheckError> {
            let problems = compat::check(rule, &c.text, old)
                .map_err(|e| CheckError::Compat(c.type_name.clone(), e))?
                .into_iter()
                .map(|i| i.to_string())
                .collect();
            Ok(Outcome {
                type_name: c.type_name.clone(),
                against,
                rule,
                problems,
                skipped: None,
            })
        };
        if let Some(prev) = c.previous_type().and_then(|p| catalog.get(&p)) {
            out.push(compare(
                format!("{} ({})", prev.type_name, prev.path.display()),
                &prev.text,
            )?);
        }
        if opts.git {
            if let Some(committed) = git_head_text(&c.path) {
                if committed != c.text {
                    out.push(compare(
                        format!("git HEAD:{}", c.path.display()),
                        &committed,
                    )?);
                }
            }
        }
        if let Some(registry) = &opts.registry {
            let subject = opts
                .strategy
                .subject(&topic_for(&opts.topic_template, c), c);
            let against = format!("registry subject {subject} (latest)");
            match registry.check_compatibility(&subject, &c.text).await? {
                RegistryVerdict::NoSubject => out.push(Outcome {
                    type_name: c.type_name.clone(),
                    against,
                    rule,
                    problems: vec![],
                    skipped: Some("subject not registered yet".into()),
                }),
                RegistryVerdict::Compatible => out.push(Outcome {
                    type_name: c.type_name.clone(),
                    against,
                    rule,
                    problems: vec![],
                    skipped: None,
                }),
                RegistryVerdict::Incompatible(messages) => {
                    // The registry says no; name the fields with our own rule against its text.
                    let mut problems: Vec<String> = match registry.latest(&subject).await? {
                        Some(latest) => compat::check(rule, &c.text, &latest)
                            .map_err(|e| CheckError::Compat(c.type_name.clone(), e))?
                            .into_iter()
                            .map(|i| i.to_string())
                            .collect(),
                        None => vec![],
                    };
                    problems.extend(messages.into_iter().map(|m| format!("registry: {m}")));
                    if problems.is_empty() {
                        problems.push("registry: incompatible (no details given)".into());
                    }
                    out.push(Outcome {
                        type_name: c.type_name.clone(),
                        against,
                        rule,
                        problems,
                        skipped: None,
                    });
                }
            }
        }
    }
    out.extend(check_stores(opts, &rules).await?);
    Ok(out)
}

/// The store value schemas of `dir`: every `<dir>/stores/<store>.v<n>.avsc`, as contracts of
/// the domain `stores` (type name `stores.<store>.v<n>`); empty without the directory.
///
/// ```
/// use eosflow::internals::codec::check::store_schemas;
///
/// let dir = std::env::temp_dir().join(format!("store-schemas-doc-{}", std::process::id()));
/// std::fs::create_dir_all(dir.join("stores"))?;
/// let v1 = r#"{"type":"record","name":"Count","fields":[{"name":"count","type":"long"}]}"#;
/// std::fs::write(dir.join("stores/counts.v1.avsc"), v1)?;
/// let stores = store_schemas(&dir)?;
/// let c = stores.get("stores.counts.v1").expect("loaded");
/// assert_eq!((c.event.as_str(), c.version), ("counts", 1));
/// // Not a topic contract: the catalog of the same directory leaves it out.
/// assert!(eosflow::internals::codec::Catalog::from_dir(&dir)?.is_empty());
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn store_schemas(dir: &Path) -> Result<Catalog, CheckError> {
    let stores = dir.join(super::store_schema::STORES_DIR);
    let mut catalog = Catalog::new();
    let entries = match std::fs::read_dir(&stores) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(catalog),
        Err(error) => {
            return Err(CatalogError::Io {
                path: stores,
                error,
            }
            .into())
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|error| CatalogError::Io {
                path: stores.clone(),
                error,
            })?
            .path();
        if path.extension().is_some_and(|e| e == "avsc") {
            files.push(path);
        }
    }
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|error| CatalogError::Io {
            path: path.clone(),
            error,
        })?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        catalog.add_at(
            &path,
            &format!("{}/{name}", super::store_schema::STORES_DIR),
            &text,
        )?;
    }
    Ok(catalog)
}

/// Every store value schema of `opts.dir` against its previous version, its committed text and
/// (with a registry and an application id) every version its changelog subject holds.
async fn check_stores(opts: &CheckOptions, rules: &Rules) -> Result<Vec<Outcome>, CheckError> {
    let stores = store_schemas(&opts.dir)?;
    let mut out = Vec::new();
    for c in stores.iter() {
        // A store's new code reads its old values: at least BACKWARD, whatever the default.
        let rule = match rules.rule(c) {
            Rule::Full => Rule::Full,
            _ => Rule::Backward,
        };
        let compare = |against: String, old: &str| -> Result<Outcome, CheckError> {
            let problems = compat::check(rule, &c.text, old)
                .map_err(|e| CheckError::Compat(c.type_name.clone(), e))?
                .into_iter()
                .map(|i| format!("store {}: {i}", c.event))
                .collect();
            Ok(Outcome {
                type_name: c.type_name.clone(),
                against,
                rule,
                problems,
                skipped: None,
            })
        };
        if let Some(prev) = c.previous_type().and_then(|p| stores.get(&p)) {
            out.push(compare(
                format!("{} ({})", prev.type_name, prev.path.display()),
                &prev.text,
            )?);
        }
        if opts.git {
            if let Some(committed) = git_head_text(&c.path) {
                if committed != c.text {
                    out.push(compare(
                        format!("git HEAD:{}", c.path.display()),
                        &committed,
                    )?);
                }
            }
        }
        let newest = stores
            .get(&format!("{}.{}.v{}", c.domain, c.event, c.version + 1))
            .is_none();
        let (Some(registry), true) = (&opts.registry, newest) else {
            continue;
        };
        let Some(app_id) = &opts.app_id else {
            out.push(Outcome {
                type_name: c.type_name.clone(),
                against: "the store's changelog subject".into(),
                rule,
                problems: vec![],
                skipped: Some("no application id to name the subject (--app-id)".into()),
            });
            continue;
        };
        let subject = super::store_schema::StoreSchema::subject(app_id, &c.event);
        match registry.versions(&subject).await? {
            None => out.push(Outcome {
                type_name: c.type_name.clone(),
                against: format!("registry subject {subject}"),
                rule,
                problems: vec![],
                skipped: Some("subject not registered yet (the store was never written)".into()),
            }),
            Some(held) => {
                for v in held {
                    out.push(compare(
                        format!(
                            "registry subject {subject} version {} (schema id {})",
                            v.version, v.id
                        ),
                        &v.schema,
                    )?);
                }
            }
        }
    }
    Ok(out)
}

/// The file's text at `HEAD`, if it is in a git work tree and committed.
fn git_head_text(path: &Path) -> Option<String> {
    let dir = path.parent()?;
    let name = path.file_name()?.to_str()?;
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["show", &format!("HEAD:./{name}")])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).ok())
        .flatten()
}
