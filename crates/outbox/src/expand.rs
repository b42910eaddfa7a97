//! JSON the way Debezium's Outbox Event Router writes it: `table.expand.json.payload` (a JSON
//! payload turned into a structured value, `table.json.payload.null.behavior` deciding what
//! becomes of its nulls) and the `envelope` placement (`{"payload": …, "<alias>": …}`), as
//! Kafka Connect's `JsonConverter` (`schemas.enable=false`) serializes them.
//!
//! Debezium parses the payload with Jackson, infers a Connect schema from it
//! (`JsonSchemaData.toConnectSchema`) and fills a `Struct` by that schema. What follows from it,
//! and is reproduced here:
//! - only a payload starting with `{` is expanded; an array at the top, a scalar, or anything
//!   the schema cannot hold (a mixed-type array, an integer beyond 64 bits, a field whose type
//!   differs between the objects of an array) stays the payload text as it was (Debezium logs
//!   "JSON expansion failed" and keeps the string);
//! - `ignore` (the default): a field whose value is `null` has no schema, so it is left out;
//!   `optional_bytes`: it is kept as `null`; a field holding an empty array is left out either way;
//! - the objects of an array share one schema, the union of their fields (first seen first):
//!   a field an element lacks is written as `null`;
//! - field order is the payload's (Postgres's `jsonb` text: keys by length, then bytes);
//!   integers that fit 32 bits and 64 bits are written as they are, other numbers as Java's
//!   `Double.toString` prints them (`100.0`, `1.0E20`, `1.0E-4`); no spaces.

use std::fmt::Write as _;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// `table.json.payload.null.behavior`: what becomes of a `null` field of an expanded payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NullBehavior {
    /// Left out (Debezium's default).
    #[default]
    Ignore,
    /// Kept as `null` (Debezium's `optional_bytes`: the field gets an optional bytes schema).
    OptionalBytes,
}

/// A JSON document with its object fields in document order.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number without fraction or exponent that fits in 64 bits.
    Int(i64),
    /// An integer beyond 64 bits (no Connect type holds it).
    BigInt,
    /// A number with a fraction or an exponent.
    Float(f64),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<Json>),
    /// An object, fields in document order.
    Object(Vec<(String, Json)>),
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Json;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_unit<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
                Ok(Json::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Json, E> {
                Ok(Json::Int(n))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Json, E> {
                Ok(i64::try_from(n).map_or(Json::BigInt, Json::Int))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Json, E> {
                Ok(Json::Float(n))
            }
            fn visit_str<E>(self, s: &str) -> Result<Json, E> {
                Ok(Json::Str(s.to_string()))
            }
            fn visit_string<E>(self, s: String) -> Result<Json, E> {
                Ok(Json::Str(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Json, A::Error> {
                let mut v = vec![];
                while let Some(e) = a.next_element()? {
                    v.push(e);
                }
                Ok(Json::Array(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Json, A::Error> {
                let mut v: Vec<(String, Json)> = vec![];
                while let Some((k, e)) = a.next_entry::<String, Json>()? {
                    // Jackson's readTree keeps the last of duplicate keys, in the first's place.
                    match v.iter_mut().find(|(n, _)| *n == k) {
                        Some(slot) => slot.1 = e,
                        None => v.push((k, e)),
                    }
                }
                Ok(Json::Object(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// The Connect schema Debezium infers for a JSON node (`JsonSchemaData.toConnectSchema`).
#[derive(Debug, Clone, PartialEq)]
enum Schema {
    Str,
    Bool,
    I32,
    I64,
    F64,
    /// A `null` under `optional_bytes`.
    Bytes,
    Array(Box<Schema>),
    Struct(Vec<(String, Schema)>),
}

/// The expansion cannot be done (Debezium keeps the payload string).
#[derive(Debug)]
struct Unexpandable;

fn schema_of(node: &Json, nulls: NullBehavior) -> Result<Option<Schema>, Unexpandable> {
    Ok(match node {
        Json::Str(_) => Some(Schema::Str),
        Json::Bool(_) => Some(Schema::Bool),
        Json::Int(n) if i32::try_from(*n).is_ok() => Some(Schema::I32),
        Json::Int(_) => Some(Schema::I64),
        Json::BigInt | Json::Float(_) => Some(Schema::F64),
        Json::Array(a) if a.is_empty() => None,
        Json::Array(a) => Some(Schema::Array(Box::new(array_schema(a, nulls)?))),
        Json::Object(fields) => {
            let mut out: Vec<(String, Schema)> = vec![];
            for (k, v) in fields {
                if let Some(s) = schema_of(v, nulls)? {
                    if !out.iter().any(|(n, _)| n == k) {
                        out.push((k.clone(), s));
                    }
                }
            }
            Some(Schema::Struct(out))
        }
        Json::Null => (nulls == NullBehavior::OptionalBytes).then_some(Schema::Bytes),
    })
}

/// `toConnectSchemaWithCycles`: the element schema of a non-empty array.
fn array_schema(a: &[Json], nulls: NullBehavior) -> Result<Schema, Unexpandable> {
    // The first non-null element; every other non-null one must be of its kind (and numbers of
    // its number schema).
    let kind = |j: &Json| std::mem::discriminant(&normalize(j));
    let sample = a.iter().find(|j| **j != Json::Null).unwrap_or(&Json::Null);
    let sample_schema = schema_of(sample, nulls)?;
    for e in a.iter().filter(|j| **j != Json::Null) {
        if kind(e) != kind(sample) {
            return Err(Unexpandable);
        }
        if matches!(sample, Json::Int(_) | Json::BigInt | Json::Float(_))
            && schema_of(e, nulls)? != sample_schema
        {
            return Err(Unexpandable);
        }
    }
    if let Json::Object(_) = sample {
        let mut merged: Option<Vec<(String, Schema)>> = None;
        let mut seen: Vec<Vec<(String, Schema)>> = vec![];
        for e in a {
            if let Some(Schema::Struct(f)) = schema_of(e, nulls)? {
                // A set of element schemas: an identical one adds nothing.
                if !seen.contains(&f) {
                    seen.push(f);
                }
            }
        }
        for f in seen {
            merged = Some(match merged {
                None => f,
                Some(mut left) => {
                    for (k, s) in f {
                        match left.iter_mut().find(|(n, _)| *n == k) {
                            None => left.push((k, s)),
                            Some(old) if old.1 == Schema::Bytes && s != Schema::Bytes => old.1 = s,
                            Some(_) => {}
                        }
                    }
                    left
                }
            });
        }
        return Ok(Schema::Struct(merged.unwrap_or_default()));
    }
    sample_schema.ok_or(Unexpandable)
}

/// Numbers are one node type for the homogeneity check.
fn normalize(j: &Json) -> Json {
    match j {
        Json::Int(_) | Json::BigInt | Json::Float(_) => Json::Int(0),
        Json::Str(_) => Json::Str(String::new()),
        Json::Bool(_) => Json::Bool(false),
        Json::Array(_) => Json::Array(vec![]),
        Json::Object(_) => Json::Object(vec![]),
        Json::Null => Json::Null,
    }
}

/// Writes `node` as the Struct filled by `schema` would be serialized (a value of another type
/// than its schema fails, as Connect's `Struct.put` does).
fn write_by_schema(node: &Json, schema: &Schema, out: &mut String) -> Result<(), Unexpandable> {
    match (schema, node) {
        (_, Json::Null) => out.push_str("null"),
        (Schema::Str, Json::Str(s)) => write_string(s, out),
        (Schema::Bool, Json::Bool(b)) => out.push_str(if *b { "true" } else { "false" }),
        (Schema::I32, Json::Int(n)) if i32::try_from(*n).is_ok() => {
            let _ = write!(out, "{n}");
        }
        (Schema::I64, Json::Int(n)) if i32::try_from(*n).is_err() => {
            let _ = write!(out, "{n}");
        }
        (Schema::F64, Json::Float(f)) => out.push_str(&java_double(*f)),
        (Schema::Array(elem), Json::Array(a)) => {
            out.push('[');
            for (i, e) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_by_schema(e, elem, out)?;
            }
            out.push(']');
        }
        (Schema::Struct(fields), Json::Object(values)) => {
            out.push('{');
            for (i, (k, s)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                match values.iter().find(|(n, _)| n == k) {
                    Some((_, v)) => write_by_schema(v, s, out)?,
                    None => out.push_str("null"),
                }
            }
            out.push('}');
        }
        _ => return Err(Unexpandable),
    }
    Ok(())
}

/// The expanded payload's JSON text, or `None` when Debezium would keep the payload as its
/// string (not an object, or not expandable).
pub fn expand(payload: &str, nulls: NullBehavior) -> Option<String> {
    if !payload.starts_with('{') || has_big_integer(payload) {
        return None;
    }
    let node: Json = serde_json::from_str(payload).ok()?;
    let schema = schema_of(&node, nulls).ok()??;
    let mut out = String::with_capacity(payload.len());
    write_by_schema(&node, &schema, &mut out).ok()?;
    Some(out)
}

/// Whether the JSON text holds an integer literal beyond 64 bits (Jackson reads it as a
/// `BigInteger`, which no Connect type holds; serde_json would read it as a float).
fn has_big_integer(text: &str) -> bool {
    let b = text.as_bytes();
    let (mut i, mut in_string) = (0, false);
    while i < b.len() {
        let c = b[i];
        if in_string {
            match c {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if c == b'-' || c.is_ascii_digit() {
            let start = i;
            i += 1;
            while i < b.len() && (b[i].is_ascii_digit() || b"+-.eE".contains(&b[i])) {
                i += 1;
            }
            let token = &text[start..i];
            if !token.contains(['.', 'e', 'E']) && token.parse::<i64>().is_err() {
                return true;
            }
            continue;
        }
        i += 1;
    }
    false
}

/// A JSON string literal of `s`, escaped as Jackson does (`\"`, `\\`, the short escapes of
/// `\b \t \n \f \r`, other control characters as upper-case `\u00XX`).
pub fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `f` as Java's `Double.toString` prints it (shortest digits): plain with at least one
/// fractional digit for 10⁻³ ≤ |f| < 10⁷ (`100.0`, `0.001`), else `d.dddE±n` (`1.0E7`,
/// `1.0E-4`).
pub fn java_double(f: f64) -> String {
    java_number(
        f == 0.0,
        f.is_sign_negative(),
        f.abs(),
        format!("{f}"),
        format!("{f:e}"),
    )
}

/// `f` as Java's `Float.toString` prints it (the same rules, a float's shortest digits).
pub fn java_float(f: f32) -> String {
    java_number(
        f == 0.0,
        f.is_sign_negative(),
        f64::from(f.abs()),
        format!("{f}"),
        format!("{f:e}"),
    )
}

/// Java's floating-point text from Rust's shortest plain (`plain`) and scientific (`sci`) ones.
fn java_number(zero: bool, negative: bool, abs: f64, plain: String, sci: String) -> String {
    if zero {
        return if negative { "-0.0" } else { "0.0" }.into();
    }
    if (1e-3..1e7).contains(&abs) {
        if plain.contains('.') {
            plain
        } else {
            plain + ".0"
        }
    } else {
        let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
        let mantissa = if mantissa.contains('.') {
            mantissa.to_string()
        } else {
            format!("{mantissa}.0")
        };
        format!("{mantissa}E{exp}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(s: &str) -> Option<String> {
        expand(s, NullBehavior::Ignore)
    }

    #[test]
    fn an_object_is_expanded_compactly_in_document_order_and_nulls_follow_the_behavior() {
        let p = r#"{"b": 1, "aa": null, "ccc": {"x": null, "y": "s"}, "dd": []}"#;
        assert_eq!(ex(p).as_deref(), Some(r#"{"b":1,"ccc":{"y":"s"}}"#));
        assert_eq!(
            expand(p, NullBehavior::OptionalBytes).as_deref(),
            Some(r#"{"b":1,"aa":null,"ccc":{"x":null,"y":"s"}}"#)
        );
    }

    #[test]
    fn numbers_are_written_as_connect_and_jackson_write_them() {
        assert_eq!(
            ex(r#"{"i": 7, "l": 5000000000, "f": 100.0, "e": 1e20, "s": 0.0001, "m": 1234567.5}"#)
                .as_deref(),
            Some(r#"{"i":7,"l":5000000000,"f":100.0,"e":1.0E20,"s":1.0E-4,"m":1234567.5}"#)
        );
        // No Connect type holds an integer beyond 64 bits: the payload stays a string.
        assert_eq!(ex(r#"{"big": 18446744073709551616}"#), None);
    }

    #[test]
    fn arrays_follow_the_inferred_schema_or_stay_unexpanded() {
        // Objects of an array share the union of their fields; missing ones are null.
        assert_eq!(
            ex(r#"{"a": [{"x": 1}, {"y": "z"}]}"#).as_deref(),
            Some(r#"{"a":[{"x":1,"y":null},{"x":null,"y":"z"}]}"#)
        );
        assert_eq!(
            ex(r#"{"a": [1, null, 2]}"#).as_deref(),
            Some(r#"{"a":[1,null,2]}"#)
        );
        // Mixed kinds, or ints and longs, cannot be one array schema.
        assert_eq!(ex(r#"{"a": [1, "x"]}"#), None);
        assert_eq!(ex(r#"{"a": [1, 5000000000]}"#), None);
        // A field of another type in a later element does not fit the first one's schema.
        assert_eq!(ex(r#"{"a": [{"x": 1}, {"x": "s"}]}"#), None);
        // Not an object at the top: kept as it is.
        assert_eq!(ex(r#"[1, 2]"#), None);
        assert_eq!(ex(r#""text""#), None);
    }

    #[test]
    fn strings_are_escaped_as_jackson_does() {
        assert_eq!(
            ex("{\"s\": \"a\\\"b\\\\c\\n\\u0001é/\"}").as_deref(),
            Some("{\"s\":\"a\\\"b\\\\c\\n\\u0001é/\"}")
        );
    }
}
