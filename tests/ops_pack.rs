//! The operations pack (`ops/`, `k8s/prometheusrule.yaml`) against the code: every metric the
//! code emits is described in its crate's table, and every metric name the Grafana dashboard
//! and the alert rules query is one of them — so renaming a metric fails here instead of
//! leaving a panel blank or an alert silently watching nothing. No broker needed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use eosflow::internals::telemetry::catalog::{MetricDef, MetricKind, FRAMEWORK};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

/// The metric tables, keyed by the file that emits their metrics.
fn tables() -> Vec<(&'static str, &'static [MetricDef])> {
    vec![
        ("src/telemetry/mod.rs", FRAMEWORK),
        (
            "crates/outbox/src/telemetry.rs",
            eosflow_outbox::telemetry::METRICS,
        ),
        (
            "crates/orders/src/telemetry.rs",
            eosflow_orders::telemetry::METRICS,
        ),
    ]
}

fn all_metrics() -> BTreeMap<&'static str, MetricKind> {
    let mut all = BTreeMap::new();
    for (_, table) in tables() {
        for m in table {
            assert!(
                all.insert(m.name, m.kind).is_none(),
                "{} is listed twice",
                m.name
            );
        }
    }
    all
}

/// `(macro kind, name)` of every `metrics::counter!("…")`-style call in `source`.
fn emitted(source: &str) -> Vec<(MetricKind, String)> {
    let mut out = Vec::new();
    for (mac, kind) in [
        ("counter!(", MetricKind::Counter),
        ("gauge!(", MetricKind::Gauge),
        ("histogram!(", MetricKind::Histogram),
    ] {
        for (at, _) in source.match_indices(mac) {
            if source[..at].ends_with("describe_") {
                continue;
            }
            let rest = source[at + mac.len()..].trim_start();
            if let Some(quoted) = rest.strip_prefix('"') {
                let name = quoted.split('"').next().unwrap_or_default();
                out.push((kind, name.to_string()));
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_emitted_metric_is_in_its_crates_table_and_back() {
    for (file, table) in tables() {
        let found = emitted(&read(file));
        for (kind, name) in &found {
            let def = table.iter().find(|m| m.name == name);
            let def = def.unwrap_or_else(|| panic!("{file} emits {name}, which its table lacks"));
            assert_eq!(
                def.kind, *kind,
                "{name}: emitted as {kind:?}, listed as {:?}",
                def.kind
            );
        }
        for m in table {
            assert!(
                found.iter().any(|(_, n)| n == m.name),
                "{} is listed but {file} never emits it",
                m.name
            );
            assert!(!m.help.is_empty(), "{} has no HELP text", m.name);
        }
    }
    let prefix_of = |name: &str| name.split('_').next().unwrap_or_default().to_string();
    for m in eosflow_orders::telemetry::METRICS {
        assert_eq!(
            prefix_of(m.name),
            "orders",
            "{}: the app's metrics use orders_",
            m.name
        );
    }
    for m in FRAMEWORK.iter().chain(eosflow_outbox::telemetry::METRICS) {
        assert_eq!(
            prefix_of(m.name),
            "eosflow",
            "{}: framework metrics use eosflow_",
            m.name
        );
    }
    // One place per crate: no metric macro anywhere else.
    let mut files = Vec::new();
    for dir in ["src", "crates", "benches"] {
        rust_files(&root().join(dir), &mut files);
    }
    let homes: Vec<PathBuf> = tables().iter().map(|(f, _)| root().join(f)).collect();
    for f in files.iter().filter(|f| !homes.contains(f)) {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        assert!(
            emitted(&text).is_empty(),
            "{} emits metrics outside its crate's telemetry module",
            f.display()
        );
    }
}

/// Metric names (`eosflow_…`, `orders_…`) referenced by a PromQL expression.
fn names_in(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut word = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if (word.starts_with("eosflow_") || word.starts_with("orders_")) && c != '=' && c != '!' {
            names.push(std::mem::take(&mut word));
        }
        word.clear();
    }
    names
}

fn check_names(source: &str, exprs: &[String], known: &BTreeMap<&'static str, MetricKind>) {
    assert!(!exprs.is_empty(), "{source}: no PromQL found");
    for expr in exprs {
        for name in names_in(expr) {
            let ok = match known.get(name.as_str()) {
                Some(_) => true,
                None => ["_bucket", "_sum", "_count"].iter().any(|s| {
                    name.strip_suffix(s)
                        .and_then(|base| known.get(base))
                        .is_some_and(|k| *k == MetricKind::Histogram)
                }),
            };
            assert!(
                ok,
                "{source}: `{name}` in `{expr}` is not a metric the code exports"
            );
        }
    }
}

fn collect_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr" | "query", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

#[test]
fn the_dashboard_queries_only_exported_metrics() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("ops/grafana/eosflow.json")).expect("dashboard JSON");
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    check_names("ops/grafana/eosflow.json", &exprs, &all_metrics());
}

/// The `expr:` values of a rules file (plain or `|` block scalars).
fn rule_exprs(yaml: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = yaml.lines().peekable();
    while let Some(line) = lines.next() {
        let Some((indent, value)) = line.split_once("expr:") else {
            continue;
        };
        let value = value.trim();
        if value != "|" && value != ">" {
            out.push(value.to_string());
            continue;
        }
        let mut block = String::new();
        while let Some(next) = lines.peek() {
            let deeper = next.len() - next.trim_start().len() > indent.len();
            if !deeper && !next.trim().is_empty() {
                break;
            }
            block.push_str(next.trim());
            block.push(' ');
            lines.next();
        }
        out.push(block);
    }
    out
}

#[test]
fn the_alert_rules_query_only_exported_metrics() {
    check_names(
        "ops/prometheus/rules.yml",
        &rule_exprs(&read("ops/prometheus/rules.yml")),
        &all_metrics(),
    );
}

#[test]
fn the_prometheusrule_carries_the_same_rules() {
    let rules = read("ops/prometheus/rules.yml");
    let body: Vec<&str> = rules
        .lines()
        .skip_while(|l| !l.starts_with("groups:"))
        .collect();
    let manifest = read("k8s/prometheusrule.yaml");
    let spec: Vec<String> = manifest
        .lines()
        .skip_while(|l| *l != "spec:")
        .skip(1)
        .map(|l| l.strip_prefix("  ").unwrap_or(l).to_string())
        .collect();
    assert_eq!(
        spec, body,
        "k8s/prometheusrule.yaml's spec must be ops/prometheus/rules.yml's groups, indented by two"
    );
}
