//! Where configuration values come from and how they are layered: built-in defaults → a TOML
//! file → `EOSFLOW_*` environment variables, each variable typed like the default of the key it
//! names, and a failing value traced back to the key and source that set it.

use serde::Deserialize;

use super::{env_name, Config, ConfigError};

pub(super) fn merge(into: &mut toml::Value, from: toml::Value) {
    match (into, from) {
        (toml::Value::Table(a), toml::Value::Table(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(slot) if slot.is_table() && v.is_table() => merge(slot, v),
                    _ => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// Sets the key named by an `EOSFLOW_*` variable, typed like the default of that key; returns
/// the key's path (`None` for a `kafka.properties` entry or a variable that is not config).
pub(super) fn apply_env(
    merged: &mut toml::Value,
    defaults: &toml::Value,
    name: &str,
    raw: &str,
) -> Result<Option<Vec<String>>, ConfigError> {
    if let Some(path) = find_key(defaults, &mut vec![], name) {
        let key = path.join(".");
        let Some(default) = lookup(defaults, &path) else {
            return Ok(None);
        };
        let value = typed_env_value(default, raw).map_err(|reason| ConfigError::Parse {
            origin: format!("env {name}"),
            message: format!("`{key}`: {reason}"),
        })?;
        let Some((field, parents)) = path.split_last() else {
            return Ok(None);
        };
        let mut table = merged.as_table_mut();
        for p in parents {
            table = table
                .and_then(|t| t.get_mut(p.as_str()))
                .and_then(|v| v.as_table_mut());
        }
        if let Some(t) = table {
            t.insert(field.clone(), value);
        }
        return Ok(Some(path));
    }
    // `EOSFLOW_KAFKA_PROPERTY_<NAME>` sets a librdkafka property (`_` → `.`), e.g. secrets.
    if let Some(prop) = name.strip_prefix("EOSFLOW_KAFKA_PROPERTY_") {
        let prop = prop.to_lowercase().replace('_', ".");
        if let Some(t) = merged
            .get_mut("kafka")
            .and_then(|k| k.get_mut("properties"))
            .and_then(|p| p.as_table_mut())
        {
            t.insert(prop, toml::Value::String(raw.to_string()));
        }
        return Ok(None);
    }
    if ENV_NOT_CONFIG.iter().any(|p| name.starts_with(p)) {
        return Ok(None);
    }
    Err(ConfigError::Parse {
        origin: format!("env {name}"),
        message: format!(
            "no configuration key is named by {name}; known keys: {}",
            known_keys(defaults).join(", ")
        ),
    })
}

/// `EOSFLOW_*` variables that steer tools and tests rather than an instance.
/// Matched as prefixes: `EOSFLOW_STACK_*` belong to dev/stack, `EOSFLOW_TEST_*` to the tests.
const ENV_NOT_CONFIG: &[&str] = &[
    "EOSFLOW_STACK_",
    "EOSFLOW_TEST_",
    "EOSFLOW_CACHE_DIR",
    "EOSFLOW_RUN_DIR",
    "EOSFLOW_CONFIG_FILE",
    "EOSFLOW_APICURIO_VERSION",
];

/// The path of the key whose environment name is `name`: nested sections (`[kafka.security]`)
/// are searched too; an empty table (`kafka.properties`) counts as a key.
fn find_key(node: &toml::Value, path: &mut Vec<String>, name: &str) -> Option<Vec<String>> {
    let table = node.as_table()?;
    for (k, v) in table {
        path.push(k.clone());
        let nested = v.as_table().is_some_and(|t| !t.is_empty());
        if path.len() > 1 && !nested && env_name(&path.join(".")) == name {
            return Some(path.clone());
        }
        if nested {
            if let Some(found) = find_key(v, path, name) {
                return Some(found);
            }
        }
        path.pop();
    }
    None
}

fn lookup<'a>(node: &'a toml::Value, path: &[String]) -> Option<&'a toml::Value> {
    path.iter().try_fold(node, |n, k| n.get(k.as_str()))
}

pub(super) fn known_keys(defaults: &toml::Value) -> Vec<String> {
    fn walk(node: &toml::Value, prefix: &str, keys: &mut Vec<String>) {
        if let Some(t) = node.as_table() {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if v.as_table().is_some_and(|t| !t.is_empty()) {
                    walk(v, &key, keys);
                } else if !prefix.is_empty() {
                    keys.push(env_name(&key));
                }
            }
        }
    }
    let mut keys = vec![];
    walk(defaults, "", &mut keys);
    keys
}

fn typed_env_value(default: &toml::Value, raw: &str) -> Result<toml::Value, String> {
    Ok(match default {
        toml::Value::String(_) => toml::Value::String(raw.to_string()),
        toml::Value::Integer(_) => toml::Value::Integer(
            raw.trim()
                .parse::<i64>()
                .map_err(|_| format!("{raw:?} is not an integer"))?,
        ),
        toml::Value::Boolean(_) => toml::Value::Boolean(match raw.trim() {
            "true" | "1" => true,
            "false" | "0" => false,
            _ => return Err(format!("{raw:?} is not true/false")),
        }),
        toml::Value::Array(items) => {
            let integers = items.first().is_some_and(toml::Value::is_integer);
            let mut out = Vec::new();
            for s in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                out.push(if integers {
                    toml::Value::Integer(
                        s.parse::<i64>()
                            .map_err(|_| format!("{s:?} in {raw:?} is not an integer"))?,
                    )
                } else {
                    toml::Value::String(s.to_string())
                });
            }
            toml::Value::Array(out)
        }
        toml::Value::Table(_) => {
            return Err("set table entries with their own variables".into());
        }
        other => return Err(format!("unsupported type {}", other.type_str())),
    })
}

/// Every leaf of a parsed TOML layer with its path (a non-empty table is descended into; an
/// array, even of tables, is one leaf).
pub(super) fn leaves(node: &toml::Value) -> Vec<(Vec<String>, toml::Value)> {
    fn walk(node: &toml::Value, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, toml::Value)>) {
        match node.as_table() {
            Some(t) if !t.is_empty() || path.is_empty() => {
                for (k, v) in t {
                    path.push(k.clone());
                    walk(v, path, out);
                    path.pop();
                }
            }
            _ => out.push((path.clone(), node.clone())),
        }
    }
    let mut out = vec![];
    walk(node, &mut vec![], &mut out);
    out
}

/// A value set over the configuration by one source: (the source, the key's path, the value).
pub(super) type Setting = (String, Vec<String>, toml::Value);

/// Why the configuration does not deserialize, traced to the first of `settings` that alone,
/// set over `base`, fails: names the source, the key and serde's message (the value and the
/// accepted ones; serde itself does not say where the value is). `whole` is the error of the
/// full configuration, used when no single setting fails alone.
pub(super) fn parse_error(
    base: &toml::Value,
    settings: &[Setting],
    whole: (String, impl std::fmt::Display),
) -> ConfigError {
    let failing = settings.iter().find_map(|(origin, path, value)| {
        let mut layer = value.clone();
        for k in path.iter().rev() {
            let mut t = toml::Table::new();
            t.insert(k.clone(), layer);
            layer = toml::Value::Table(t);
        }
        let mut trial = base.clone();
        merge(&mut trial, layer);
        Config::deserialize(trial).err().map(|e| {
            // toml's own "in `key`" line is left out: the key leads the message.
            let text = e.to_string();
            let serde_message: Vec<&str> = text
                .lines()
                .filter(|l| !l.starts_with("in `") && !l.trim().is_empty())
                .collect();
            ConfigError::Parse {
                origin: origin.clone(),
                message: format!("`{}`: {}", path.join("."), serde_message.join(" ")),
            }
        })
    });
    failing.unwrap_or_else(|| ConfigError::Parse {
        origin: whole.0,
        message: whole.1.to_string(),
    })
}
