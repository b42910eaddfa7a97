//! `eosflow state dump`: a topology's committed per-key state, rebuilt from its changelog with
//! `read_committed` — what an operator (or the verifier, as a separate process) reads to check
//! the final state without trusting the processor's own counters.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rdkafka::Message;

use crate::count::CountState;
use eosflow::internals::kafka::reader::{read_all, ReadError};
use eosflow::internals::state::Column;
use eosflow::kafka::KafkaClients;

/// How state values are rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFormat {
    /// The counting topology's 16-byte count and sum.
    Count,
    /// JSON state (the orders topology).
    Json,
    /// Hex bytes, for any other store.
    Hex,
}

impl std::str::FromStr for StateFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "count" => Ok(Self::Count),
            "json" => Ok(Self::Json),
            "hex" => Ok(Self::Hex),
            other => Err(format!(
                "unknown state format {other:?}: expected count, json or hex"
            )),
        }
    }
}

fn render(format: StateFormat, value: &[u8]) -> serde_json::Value {
    match format {
        StateFormat::Count => match CountState::decode(value) {
            Some(s) => serde_json::json!({"count": s.count, "sum": s.sum}),
            None => serde_json::json!({"undecodable": hex(value)}),
        },
        StateFormat::Json => serde_json::from_slice(value)
            .unwrap_or_else(|_| serde_json::json!({"undecodable": hex(value)})),
        StateFormat::Hex => serde_json::Value::String(hex(value)),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The committed state of every key (last write wins, a tombstone deletes), optionally one key.
pub fn dump(
    clients: &KafkaClients,
    changelog: &str,
    format: StateFormat,
    only_key: Option<&str>,
    timeout: Duration,
) -> Result<BTreeMap<String, serde_json::Value>, ReadError> {
    let mut state = BTreeMap::new();
    read_all(clients, changelog, timeout, |m| {
        let Some((Column::State, key)) = m.key().and_then(Column::parse_changelog_key) else {
            return Ok(());
        };
        let key = String::from_utf8_lossy(key).to_string();
        if only_key.is_some_and(|k| k != key) {
            return Ok(());
        }
        match m.payload() {
            Some(v) => {
                state.insert(key, render(format, v));
            }
            None => {
                state.remove(&key);
            }
        }
        Ok(())
    })?;
    Ok(state)
}

/// One output line per key: `{"key": …, "value": …}`.
pub fn lines(state: &BTreeMap<String, serde_json::Value>) -> impl Iterator<Item = String> + '_ {
    state
        .iter()
        .map(|(k, v)| serde_json::json!({"key": k, "value": v}).to_string())
}

/// Runs `eosflow state dump` as a separate process and parses what it prints: the verifier's
/// view of the final state is the one an operator gets.
pub fn dump_via_cli(
    exe: &Path,
    bootstrap: &str,
    changelog: &str,
    format: &str,
) -> Result<BTreeMap<String, serde_json::Value>, String> {
    let out = Command::new(exe)
        .args([
            "state",
            "dump",
            "--changelog",
            changelog,
            "--format",
            format,
        ])
        .env("EOSFLOW_KAFKA_BOOTSTRAP", bootstrap)
        .env("RUST_LOG", "warn")
        .output()
        .map_err(|e| format!("running {} state dump: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`eosflow state dump --changelog {changelog}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut state = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("state dump printed a line that is not JSON ({e}): {line}"))?;
        let key = v["key"]
            .as_str()
            .ok_or_else(|| format!("state dump line without a key: {line}"))?
            .to_string();
        state.insert(key, v["value"].clone());
    }
    Ok(state)
}
