//! Reading one field of an Avro record without building the record.
//!
//! A processor that needs one number of an event (the counting topology's `total_minor`) would
//! otherwise decode the whole record into an `apache_avro::types::Value` tree: a `String` per
//! field name and string value, a `Vec` per record and array, all freed a moment later, for
//! every record. Here the body is walked against the writer schema instead: every byte is
//! still read and checked (string UTF-8, union and enum indexes, lengths, no bytes left over),
//! so a malformed record fails as it would in a full decode, but nothing is allocated and only
//! the named field's value is kept. It is the Rust counterpart of a Java consumer reusing one
//! `GenericRecord` and its buffers.

use apache_avro::schema::{InnerDecimalSchema, Name, NamesRef, UuidSchema};
use apache_avro::Schema;

/// Deepest nesting walked: a recursive schema could otherwise let a crafted value recurse once
/// per byte and exhaust the stack.
const MAX_DEPTH: usize = 128;

/// Why a body could not be walked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkError {
    /// The bytes end inside a value.
    Truncated,
    /// The bytes are not a value of the schema.
    Corrupt(String),
}

/// The top-level `long` (or `int`, promoted) field `field` of a record body written with
/// `schema`; `Ok(None)` when the schema is not a record with such a field of that type (the
/// caller falls back to a full decode). The whole body is walked and must be consumed exactly.
pub fn long_field(
    schema: &Schema,
    names: &NamesRef<'_>,
    field: &str,
    body: &[u8],
) -> Result<Option<i64>, WalkError> {
    let Schema::Record(record) = schema else {
        return Ok(None);
    };
    let Some(position) = record.fields.iter().position(|f| f.name == field) else {
        return Ok(None);
    };
    if !matches!(record.fields[position].schema, Schema::Long | Schema::Int) {
        return Ok(None);
    }
    let ns = record.name.namespace();
    let mut w = Walker { names, buf: body };
    let mut found = None;
    for (i, f) in record.fields.iter().enumerate() {
        if i == position {
            found = Some(match f.schema {
                Schema::Int => w.int()?,
                _ => w.long()?,
            });
        } else {
            w.skip(&f.schema, ns, 1)?;
        }
    }
    if !w.buf.is_empty() {
        return Err(WalkError::Corrupt(format!(
            "{} bytes left after the record",
            w.buf.len()
        )));
    }
    Ok(found)
}

struct Walker<'b, 'n, 's> {
    names: &'n NamesRef<'s>,
    buf: &'b [u8],
}

impl<'s> Walker<'_, '_, 's> {
    fn take(&mut self, n: usize) -> Result<&[u8], WalkError> {
        if self.buf.len() < n {
            return Err(WalkError::Truncated);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// A zig-zag varint that must fit 32 bits (Avro `int`, `date`, `time-millis`).
    fn int(&mut self) -> Result<i64, WalkError> {
        let v = self.long()?;
        i32::try_from(v)
            .map(i64::from)
            .map_err(|_| WalkError::Corrupt(format!("int {v} does not fit 32 bits")))
    }

    /// A zig-zag varint (Avro `int` and `long`).
    fn long(&mut self) -> Result<i64, WalkError> {
        let mut value: u64 = 0;
        for shift in (0..70).step_by(7) {
            let [b] = *self.take(1)? else {
                return Err(WalkError::Truncated);
            };
            // Bits past the 64th are dropped, as apache-avro and Java's decoder drop them.
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err(WalkError::Corrupt("varint longer than 10 bytes".into()))
    }

    fn len(&mut self) -> Result<usize, WalkError> {
        let n = self.long()?;
        usize::try_from(n).map_err(|_| WalkError::Corrupt(format!("negative length {n}")))
    }

    fn bytes(&mut self) -> Result<&[u8], WalkError> {
        let n = self.len()?;
        self.take(n)
    }

    fn string(&mut self) -> Result<(), WalkError> {
        let b = self.bytes()?;
        std::str::from_utf8(b)
            .map(|_| ())
            .map_err(|e| WalkError::Corrupt(format!("string is not UTF-8: {e}")))
    }

    fn index(&mut self, count: usize, what: &str) -> Result<usize, WalkError> {
        let i = self.long()?;
        usize::try_from(i)
            .ok()
            .filter(|i| *i < count)
            .ok_or_else(|| WalkError::Corrupt(format!("{what} index {i} out of 0..{count}")))
    }

    /// Array and map blocks: counts until a zero; a negative count is followed by the block's
    /// byte size (the items are walked all the same).
    fn blocks(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<(), WalkError>,
    ) -> Result<(), WalkError> {
        loop {
            let count = self.long()?;
            if count == 0 {
                return Ok(());
            }
            if count < 0 {
                self.len()?;
            }
            for _ in 0..count.unsigned_abs() {
                item(self)?;
            }
        }
    }

    fn skip(&mut self, schema: &Schema, ns: Option<&str>, depth: usize) -> Result<(), WalkError> {
        if depth > MAX_DEPTH {
            return Err(WalkError::Corrupt(format!(
                "values nested deeper than {MAX_DEPTH}"
            )));
        }
        match schema {
            Schema::Null => Ok(()),
            Schema::Boolean => match self.take(1)? {
                [0 | 1] => Ok(()),
                [b, ..] => Err(WalkError::Corrupt(format!("boolean byte {b}"))),
                [] => Err(WalkError::Truncated),
            },
            Schema::Int | Schema::Date | Schema::TimeMillis => self.int().map(|_| ()),
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => self.long().map(|_| ()),
            Schema::Float => self.take(4).map(|_| ()),
            Schema::Double => self.take(8).map(|_| ()),
            Schema::Bytes | Schema::BigDecimal | Schema::Uuid(UuidSchema::Bytes) => {
                self.bytes().map(|_| ())
            }
            Schema::String | Schema::Uuid(UuidSchema::String) => self.string(),
            Schema::Decimal(d) => match &d.inner {
                InnerDecimalSchema::Bytes => self.bytes().map(|_| ()),
                InnerDecimalSchema::Fixed(f) => self.take(f.size).map(|_| ()),
            },
            Schema::Uuid(UuidSchema::Fixed(f)) | Schema::Fixed(f) | Schema::Duration(f) => {
                self.take(f.size).map(|_| ())
            }
            Schema::Enum(e) => self.index(e.symbols.len(), "enum").map(|_| ()),
            Schema::Union(u) => {
                let branch = self.index(u.variants().len(), "union")?;
                self.skip(&u.variants()[branch], ns, depth + 1)
            }
            Schema::Array(a) => self.blocks(|w| w.skip(&a.items, ns, depth + 1)),
            Schema::Map(m) => self.blocks(|w| {
                w.string()?;
                w.skip(&m.types, ns, depth + 1)
            }),
            Schema::Record(r) => {
                let ns = r.name.namespace().or(ns);
                for f in &r.fields {
                    self.skip(&f.schema, ns, depth + 1)?;
                }
                Ok(())
            }
            Schema::Ref { name } => {
                let target = self.lookup(name, ns)?;
                self.skip(target, ns, depth + 1)
            }
        }
    }

    fn lookup(&self, name: &Name, ns: Option<&str>) -> Result<&'s Schema, WalkError> {
        let full = name.fully_qualified_name(ns);
        self.names
            .get(full.as_ref())
            .copied()
            .ok_or_else(|| WalkError::Corrupt(format!("schema names unknown type {name}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::schema::ResolvedSchema;
    use apache_avro::types::Value;

    const SCHEMA: &str = r#"{"type":"record","name":"T","namespace":"n","fields":[
        {"name":"s","type":"string"},
        {"name":"u","type":["null",{"type":"record","name":"In","fields":[{"name":"x","type":"double"}]}]},
        {"name":"again","type":["null","In"]},
        {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}},
        {"name":"m","type":{"type":"map","values":{"type":"array","items":"long"}}},
        {"name":"f","type":{"type":"fixed","name":"F","size":3}},
        {"name":"total","type":"long"},
        {"name":"b","type":"boolean"}]}"#;

    fn value(total: i64) -> Value {
        Value::Record(vec![
            ("s".into(), Value::String("héllo".into())),
            (
                "u".into(),
                Value::Union(
                    1,
                    Box::new(Value::Record(vec![("x".into(), Value::Double(1.5))])),
                ),
            ),
            (
                "again".into(),
                Value::Union(
                    1,
                    Box::new(Value::Record(vec![("x".into(), Value::Double(2.5))])),
                ),
            ),
            ("e".into(), Value::Enum(1, "B".into())),
            (
                "m".into(),
                Value::Map(
                    [(
                        "k".to_string(),
                        Value::Array(vec![Value::Long(-3), Value::Long(1 << 40)]),
                    )]
                    .into(),
                ),
            ),
            ("f".into(), Value::Fixed(3, vec![1, 2, 3])),
            ("total".into(), Value::Long(total)),
            ("b".into(), Value::Boolean(true)),
        ])
    }

    fn encoded(total: i64) -> (Schema, Vec<u8>) {
        let schema = Schema::parse_str(SCHEMA).expect("schema");
        #[allow(deprecated)]
        let bytes = apache_avro::to_avro_datum(&schema, value(total)).expect("encode");
        (schema, bytes)
    }

    #[test]
    fn reads_the_field_behind_every_kind_of_value() {
        for total in [0, -1, 1250, i64::MAX, i64::MIN] {
            let (schema, bytes) = encoded(total);
            let names = ResolvedSchema::try_from(&schema).expect("names");
            assert_eq!(
                long_field(&schema, names.get_names(), "total", &bytes),
                Ok(Some(total))
            );
        }
    }

    #[test]
    fn a_missing_field_or_another_type_falls_back() {
        let (schema, bytes) = encoded(1);
        let names = ResolvedSchema::try_from(&schema).expect("names");
        assert_eq!(
            long_field(&schema, names.get_names(), "nope", &bytes),
            Ok(None)
        );
        assert_eq!(
            long_field(&schema, names.get_names(), "s", &bytes),
            Ok(None)
        );
    }

    #[test]
    fn bad_bytes_fail_like_a_full_decode() {
        let (schema, bytes) = encoded(7);
        let names = ResolvedSchema::try_from(&schema).expect("names");
        let n = names.get_names();
        for cut in 0..bytes.len() {
            assert!(
                long_field(&schema, n, "total", &bytes[..cut]).is_err(),
                "truncated at {cut}"
            );
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(matches!(
            long_field(&schema, n, "total", &trailing),
            Err(WalkError::Corrupt(_))
        ));
        // The string's first byte made invalid UTF-8 (0xff).
        let mut bad = bytes.clone();
        bad[1] = 0xff;
        assert!(matches!(
            long_field(&schema, n, "total", &bad),
            Err(WalkError::Corrupt(m)) if m.contains("UTF-8")
        ));
        // Agreement with apache-avro on arbitrary mutations: whatever it accepts, the walk
        // accepts with the same total; whatever the walk accepts, apache-avro decodes.
        let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut m = bytes.clone();
            let at = (rng % m.len() as u64) as usize;
            m[at] = (rng >> 32) as u8;
            let walked = long_field(&schema, n, "total", &m);
            #[allow(deprecated)]
            let full = apache_avro::from_avro_datum(&schema, &mut &m[..], None);
            if let Ok(Value::Record(fields)) = &full {
                let total = fields.iter().find_map(|(k, v)| match (k.as_str(), v) {
                    ("total", Value::Long(t)) => Some(*t),
                    _ => None,
                });
                // apache-avro ignores bytes left after the datum here; the walk does not.
                if walked.is_ok() {
                    assert_eq!(walked, Ok(total), "mutation at {at}");
                }
            } else {
                assert!(
                    walked.is_err(),
                    "the walk accepted what apache-avro refused: at {at}"
                );
            }
        }
    }
}
