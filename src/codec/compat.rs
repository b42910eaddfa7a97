//! Avro schema compatibility, implemented here so a failure names the exact field and reason
//! (the registry only answers yes/no). BACKWARD: the new schema (reader) reads data written with
//! the old one (writer); FORWARD the other way round; FULL both.

use std::collections::{HashMap, HashSet};

use serde_json::Value as Json;

/// The compatibility rule of a subject (Confluent's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rule {
    /// New readers read old data (the registry's default; consumers upgrade first).
    #[default]
    Backward,
    /// Old readers read new data (producers upgrade first).
    Forward,
    /// Both directions.
    Full,
    /// No check.
    None,
}

impl std::str::FromStr for Rule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "BACKWARD" => Ok(Self::Backward),
            "FORWARD" => Ok(Self::Forward),
            "FULL" => Ok(Self::Full),
            "NONE" => Ok(Self::None),
            other => Err(format!(
                "unknown compatibility rule {other:?} (BACKWARD, FORWARD, FULL, NONE)"
            )),
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Backward => "BACKWARD",
            Self::Forward => "FORWARD",
            Self::Full => "FULL",
            Self::None => "NONE",
        })
    }
}

/// One reason a reader cannot read a writer's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incompatibility {
    /// Where: `Record.field.nested` (`[]` for array items, `{}` for map values).
    pub path: String,
    /// Why, in words.
    pub reason: String,
}

impl std::fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

/// Why schema texts could not be compared at all.
#[derive(Debug, thiserror::Error)]
#[error("not a JSON schema: {0}")]
pub struct CompatError(String);

/// Checks `new` against `old` under `rule`; empty means compatible.
pub fn check(rule: Rule, new: &str, old: &str) -> Result<Vec<Incompatibility>, CompatError> {
    let new_j: Json = serde_json::from_str(new).map_err(|e| CompatError(e.to_string()))?;
    let old_j: Json = serde_json::from_str(old).map_err(|e| CompatError(e.to_string()))?;
    let mut out = Vec::new();
    if matches!(rule, Rule::Backward | Rule::Full) {
        out.extend(can_read(&new_j, &old_j));
    }
    if matches!(rule, Rule::Forward | Rule::Full) {
        out.extend(can_read(&old_j, &new_j).into_iter().map(|mut i| {
            i.reason = format!("old readers cannot read new data: {}", i.reason);
            i
        }));
    }
    Ok(out)
}

/// Every reason `reader` cannot read data written with `writer` (Avro schema resolution).
pub fn can_read(reader: &Json, writer: &Json) -> Vec<Incompatibility> {
    let mut c = Checker {
        reader_names: names(reader),
        writer_names: names(writer),
        seen: HashSet::new(),
        out: Vec::new(),
    };
    let path = short(reader).unwrap_or_else(|| "<root>".into());
    c.compare(reader, writer, &path);
    c.out
}

struct Checker {
    reader_names: HashMap<String, Json>,
    writer_names: HashMap<String, Json>,
    seen: HashSet<(String, String)>,
    out: Vec<Incompatibility>,
}

const PRIMITIVES: &[&str] = &[
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

/// Named types (record, enum, fixed) by full and short name.
fn names(schema: &Json) -> HashMap<String, Json> {
    fn walk(v: &Json, ns: &str, out: &mut HashMap<String, Json>) {
        match v {
            Json::Array(branches) => branches.iter().for_each(|b| walk(b, ns, out)),
            Json::Object(o) => {
                let kind = o.get("type").and_then(Json::as_str).unwrap_or("");
                let mut ns = ns.to_string();
                if matches!(kind, "record" | "enum" | "fixed" | "error") {
                    if let Some(name) = o.get("name").and_then(Json::as_str) {
                        let full = if name.contains('.') {
                            name.to_string()
                        } else if let Some(n) = o.get("namespace").and_then(Json::as_str) {
                            format!("{n}.{name}")
                        } else if ns.is_empty() {
                            name.to_string()
                        } else {
                            format!("{ns}.{name}")
                        };
                        ns = full
                            .rsplit_once('.')
                            .map(|(n, _)| n.to_string())
                            .unwrap_or_default();
                        let short = full.rsplit('.').next().unwrap_or(&full).to_string();
                        out.insert(full, v.clone());
                        out.entry(short).or_insert_with(|| v.clone());
                    }
                }
                if let Some(fields) = o.get("fields").and_then(Json::as_array) {
                    for f in fields {
                        if let Some(t) = f.get("type") {
                            walk(t, &ns, out);
                        }
                    }
                }
                for k in ["items", "values"] {
                    if let Some(t) = o.get(k) {
                        walk(t, &ns, out);
                    }
                }
                if let Some(t @ (Json::Object(_) | Json::Array(_))) = o.get("type") {
                    walk(t, &ns, out);
                }
            }
            _ => {}
        }
    }
    let mut out = HashMap::new();
    walk(schema, "", &mut out);
    out
}

/// The unqualified name of a named type.
fn short(v: &Json) -> Option<String> {
    let n = v.get("name")?.as_str()?;
    Some(n.rsplit('.').next().unwrap_or(n).to_string())
}

/// The schema's kind: a primitive, `record`, `enum`, `array`, `map`, `fixed` or `union`.
fn kind(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        Json::Array(_) => "union".into(),
        Json::Object(o) => match o.get("type") {
            Some(Json::String(s)) if s == "error" => "record".into(),
            Some(Json::String(s)) => s.clone(),
            Some(inner) => kind(inner),
            None => "?".into(),
        },
        _ => "?".into(),
    }
}

/// A readable name of the schema for messages.
fn describe(v: &Json) -> String {
    match kind(v).as_str() {
        "record" | "enum" | "fixed" => format!("{} {}", kind(v), short(v).unwrap_or_default()),
        "array" => format!(
            "array<{}>",
            v.get("items").map(describe).unwrap_or_default()
        ),
        "map" => format!("map<{}>", v.get("values").map(describe).unwrap_or_default()),
        "union" => {
            let parts: Vec<String> = v
                .as_array()
                .map(|a| a.iter().map(describe).collect())
                .unwrap_or_default();
            format!("[{}]", parts.join(", "))
        }
        k => k.to_string(),
    }
}

/// Whether a writer primitive can be read as a reader primitive (Avro's promotions).
fn promotes(writer: &str, reader: &str) -> bool {
    writer == reader
        || matches!(
            (writer, reader),
            ("int", "long" | "float" | "double")
                | ("long", "float" | "double")
                | ("float", "double")
                | ("string", "bytes")
                | ("bytes", "string")
        )
}

impl Checker {
    fn resolve<'a>(names: &'a HashMap<String, Json>, v: &'a Json) -> &'a Json {
        match v {
            Json::String(s) if !PRIMITIVES.contains(&s.as_str()) => names
                .get(s)
                .or_else(|| names.get(s.rsplit('.').next().unwrap_or(s)))
                .unwrap_or(v),
            Json::Object(o) => match o.get("type") {
                // `{"type": "string", "logicalType": ...}` or `{"type": {...}}`
                Some(inner @ Json::String(s))
                    if !matches!(
                        s.as_str(),
                        "record" | "enum" | "fixed" | "array" | "map" | "error"
                    ) =>
                {
                    Self::resolve(names, inner)
                }
                Some(inner @ (Json::Object(_) | Json::Array(_))) => Self::resolve(names, inner),
                _ => v,
            },
            _ => v,
        }
    }

    fn fail(&mut self, path: &str, reason: String) {
        self.out.push(Incompatibility {
            path: path.to_string(),
            reason,
        });
    }

    /// Whether `reader` reads `writer` with no reasons (used to pick a union branch).
    fn quietly(&mut self, reader: &Json, writer: &Json, path: &str) -> bool {
        let before = self.out.len();
        let seen = self.seen.clone();
        self.compare(reader, writer, path);
        let ok = self.out.len() == before;
        self.out.truncate(before);
        self.seen = seen;
        ok
    }

    fn compare(&mut self, reader: &Json, writer: &Json, path: &str) {
        let reader = Self::resolve(&self.reader_names, reader).clone();
        let writer = Self::resolve(&self.writer_names, writer).clone();
        let (rk, wk) = (kind(&reader), kind(&writer));
        if wk == "union" {
            for (i, branch) in writer.as_array().into_iter().flatten().enumerate() {
                let readable = if rk == "union" {
                    reader
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|r| self.quietly(r, branch, path))
                } else {
                    self.quietly(&reader, branch, path)
                };
                if !readable {
                    let reason = format!(
                        "the writer's union branch {i} ({}) cannot be read as {}",
                        describe(branch),
                        describe(&reader)
                    );
                    self.fail(path, reason);
                }
            }
            return;
        }
        if rk == "union" {
            let branches: Vec<Json> = reader.as_array().cloned().unwrap_or_default();
            if !branches.iter().any(|r| self.quietly(r, &writer, path)) {
                let reason = format!(
                    "type changed from {} to {}, which has no branch for it",
                    describe(&writer),
                    describe(&reader)
                );
                self.fail(path, reason);
            }
            return;
        }
        match (rk.as_str(), wk.as_str()) {
            ("record", "record") => self.records(&reader, &writer, path),
            ("enum", "enum") => {
                if short(&reader) != short(&writer) {
                    return self.renamed(path, &reader, &writer);
                }
                let rs: Vec<&str> = symbols(&reader);
                let has_default = reader.get("default").is_some();
                for s in symbols(&writer) {
                    if !rs.contains(&s) && !has_default {
                        self.fail(
                            path,
                            format!(
                                "enum symbol {s} was removed (and the enum has no default), so old data holding it cannot be read"
                            ),
                        );
                    }
                }
            }
            ("array", "array") => {
                let (r, w) = (reader["items"].clone(), writer["items"].clone());
                self.compare(&r, &w, &format!("{path}[]"));
            }
            ("map", "map") => {
                let (r, w) = (reader["values"].clone(), writer["values"].clone());
                self.compare(&r, &w, &format!("{path}{{}}"));
            }
            ("fixed", "fixed") => {
                if short(&reader) != short(&writer) {
                    return self.renamed(path, &reader, &writer);
                }
                if reader.get("size") != writer.get("size") {
                    self.fail(
                        path,
                        format!(
                            "fixed size changed from {} to {}",
                            writer.get("size").unwrap_or(&Json::Null),
                            reader.get("size").unwrap_or(&Json::Null)
                        ),
                    );
                }
            }
            (r, w) if PRIMITIVES.contains(&r) && PRIMITIVES.contains(&w) => {
                if !promotes(w, r) {
                    self.fail(
                        path,
                        format!("type changed from {w} to {r} (not an Avro promotion)"),
                    );
                }
            }
            _ => {
                let reason = format!(
                    "type changed from {} to {}",
                    describe(&writer),
                    describe(&reader)
                );
                self.fail(path, reason);
            }
        }
    }

    fn renamed(&mut self, path: &str, reader: &Json, writer: &Json) {
        self.fail(
            path,
            format!(
                "named type changed from {} to {}",
                short(writer).unwrap_or_default(),
                short(reader).unwrap_or_default()
            ),
        );
    }

    fn records(&mut self, reader: &Json, writer: &Json, path: &str) {
        if short(reader) != short(writer) {
            return self.renamed(path, reader, writer);
        }
        // A pair of named records is compared once: this ends recursive types, and a type used in
        // several fields reports its problems at the first of them.
        let key = (
            short(reader).unwrap_or_default(),
            short(writer).unwrap_or_default(),
        );
        if !self.seen.insert(key) {
            return;
        }
        let empty = Vec::new();
        let wfields = writer["fields"].as_array().unwrap_or(&empty).clone();
        for rf in reader["fields"].as_array().unwrap_or(&empty) {
            let name = rf["name"].as_str().unwrap_or("?");
            let aliases: Vec<&str> = rf
                .get("aliases")
                .and_then(Json::as_array)
                .map(|a| a.iter().filter_map(Json::as_str).collect())
                .unwrap_or_default();
            let fpath = format!("{path}.{name}");
            let wf = wfields.iter().find(|wf| {
                let n = wf["name"].as_str().unwrap_or("");
                n == name || aliases.contains(&n)
            });
            match wf {
                Some(wf) => self.compare(&rf["type"], &wf["type"], &fpath),
                None if rf.get("default").is_some() => {}
                None => self.fail(
                    &fpath,
                    format!(
                        "field `{name}` ({}) was added without a default, so data written before it cannot be read",
                        describe(&rf["type"])
                    ),
                ),
            }
        }
    }
}

fn symbols(v: &Json) -> Vec<&str> {
    v.get("symbols")
        .and_then(Json::as_array)
        .map(|a| a.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(fields: &str) -> String {
        format!(r#"{{"type":"record","name":"R","namespace":"t.v1","fields":[{fields}]}}"#)
    }

    fn reasons(rule: Rule, new: &str, old: &str) -> Vec<String> {
        check(rule, new, old)
            .expect("json")
            .into_iter()
            .map(|i| i.to_string())
            .collect()
    }

    const A: &str = r#"{"name":"a","type":"string"}"#;

    #[test]
    fn backward_allows_removing_a_field_and_adding_one_with_a_default() {
        let old = rec(&format!(r#"{A},{{"name":"b","type":"int"}}"#));
        let new = rec(&format!(
            r#"{A},{{"name":"c","type":["null","string"],"default":null}}"#
        ));
        assert!(reasons(Rule::Backward, &new, &old).is_empty());
    }

    #[test]
    fn backward_rejects_an_added_field_without_default_naming_it() {
        let old = rec(A);
        let new = rec(&format!(r#"{A},{{"name":"c","type":"long"}}"#));
        let r = reasons(Rule::Backward, &new, &old);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(
            r[0].starts_with("R.c: field `c` (long) was added without a default"),
            "{r:?}"
        );
    }

    #[test]
    fn forward_and_full_reject_removing_a_field_without_default() {
        let old = rec(&format!(r#"{A},{{"name":"b","type":"int"}}"#));
        let new = rec(A);
        assert!(reasons(Rule::Backward, &new, &old).is_empty());
        let r = reasons(Rule::Full, &new, &old);
        assert!(
            r.len() == 1 && r[0].starts_with("R.b: old readers cannot read new data: field `b`"),
            "{r:?}"
        );
    }

    #[test]
    fn type_changes_fail_unless_promoted() {
        let old = rec(r#"{"name":"n","type":"int"}"#);
        for ok in ["long", "float", "double"] {
            let new = rec(&format!(r#"{{"name":"n","type":"{ok}"}}"#));
            assert!(reasons(Rule::Backward, &new, &old).is_empty(), "{ok}");
        }
        let new = rec(r#"{"name":"n","type":"string"}"#);
        assert_eq!(
            reasons(Rule::Backward, &new, &old),
            vec!["R.n: type changed from int to string (not an Avro promotion)"]
        );
        let s = rec(r#"{"name":"n","type":"string"}"#);
        let b = rec(r#"{"name":"n","type":"bytes"}"#);
        assert!(reasons(Rule::Full, &s, &b).is_empty());
        let l = rec(r#"{"name":"n","type":"long"}"#);
        assert_eq!(
            reasons(Rule::Backward, &old, &l).len(),
            1,
            "long → int narrows"
        );
    }

    #[test]
    fn enum_symbol_removal_fails_and_nested_paths_are_named() {
        let e = |syms: &str| {
            rec(&format!(
                r#"{{"name":"lines","type":{{"type":"array","items":{{"type":"record","name":"L","fields":[{{"name":"s","type":{{"type":"enum","name":"S","symbols":[{syms}]}}}}]}}}}}}"#
            ))
        };
        let old = e(r#""A","B""#);
        let new = e(r#""A""#);
        let r = reasons(Rule::Backward, &new, &old);
        assert!(
            r.len() == 1 && r[0].starts_with("R.lines[].s: enum symbol B was removed"),
            "{r:?}"
        );
        assert!(
            reasons(Rule::Backward, &old, &new).is_empty(),
            "adding a symbol is fine"
        );
    }

    #[test]
    fn unions_and_named_references() {
        let old = rec(r#"{"name":"n","type":["null","string"],"default":null}"#);
        let new = rec(r#"{"name":"n","type":"string"}"#);
        let r = reasons(Rule::Backward, &new, &old);
        assert!(
            r.len() == 1 && r[0].contains("union branch 0 (null)"),
            "{r:?}"
        );
        assert!(reasons(Rule::Backward, &old, &new).is_empty());
        // a named type referenced by name in the second field
        let refd = r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"enum","name":"E","symbols":["X","Y"]}},{"name":"b","type":"E"}]}"#;
        let fewer = r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"enum","name":"E","symbols":["X"]}},{"name":"b","type":"E"}]}"#;
        assert_eq!(reasons(Rule::Backward, fewer, refd).len(), 2);
    }

    #[test]
    fn recursive_types_terminate() {
        let list = |extra: &str| {
            format!(
                r#"{{"type":"record","name":"Node","fields":[{{"name":"v","type":"int"}}{extra},{{"name":"next","type":["null","Node"],"default":null}}]}}"#
            )
        };
        assert!(reasons(Rule::Full, &list(""), &list("")).is_empty());
        let r = reasons(
            Rule::Backward,
            &list(r#",{"name":"w","type":"int"}"#),
            &list(""),
        );
        assert_eq!(r.len(), 1, "{r:?}");
    }
}
