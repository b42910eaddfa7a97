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

/// The walk to one `long` field of one writer schema, compiled once: the writer schema turned
/// into a flat list of skips (`Op`), so a record is walked without matching on schema kinds,
/// following named-type references or recursing per record field. It reads and checks exactly
/// what [`long_field`] reads and checks, in the same order, with the same errors; a recursive
/// type, an unknown name, nesting deeper than the walk allows and a schema whose plan would be
/// huge (a named type used many times over) are left to the interpreter at that point.
#[derive(Debug)]
pub struct LongFieldPlan<'s> {
    before: Box<[Op<'s>]>,
    /// The field is an `int` (promoted), not a `long`.
    int: bool,
    after: Box<[Op<'s>]>,
}

/// One step of a [`LongFieldPlan`]. A record has no bytes of its own, so its fields' steps are
/// inlined; a `null` has none and is left out.
#[derive(Debug)]
enum Op<'s> {
    Boolean,
    /// A varint that must fit 32 bits.
    Int,
    Long,
    /// A fixed number of bytes (`float`, `double`, `fixed`, `duration`, fixed decimals).
    Skip(usize),
    Bytes,
    String,
    /// An enum index below the symbol count.
    Enum(usize),
    /// A union index, then that branch's steps.
    Union(Box<[Box<[Op<'s>]>]>),
    /// Array blocks of items.
    Array(Box<[Op<'s>]>),
    /// Map blocks of string keys and values.
    Map(Box<[Op<'s>]>),
    /// The interpreter's walk from this point, at this depth.
    Walk {
        schema: &'s Schema,
        ns: Option<&'s str>,
        depth: usize,
    },
}

/// Most steps one plan holds: a schema using a named type many times over (each use inlined)
/// could otherwise compile into a plan exponentially larger than its text.
const MAX_OPS: usize = 4096;

/// The plan outgrew [`MAX_OPS`].
struct TooBig;

struct Compiler<'n, 's> {
    names: &'n NamesRef<'s>,
    /// Full names of the records being compiled: a reference to one of them is recursion.
    open: Vec<String>,
    ops: usize,
}

impl<'s> Compiler<'_, 's> {
    /// Appends the steps skipping a `schema` value at `depth`, mirroring [`Walker::skip`].
    fn compile(
        &mut self,
        schema: &'s Schema,
        ns: Option<&'s str>,
        depth: usize,
        out: &mut Vec<Op<'s>>,
    ) -> Result<(), TooBig> {
        self.ops += 1;
        if self.ops > MAX_OPS {
            return Err(TooBig);
        }
        if depth > MAX_DEPTH {
            // The interpreter fails here with its own message, if a value gets this deep.
            out.push(Op::Walk { schema, ns, depth });
            return Ok(());
        }
        match schema {
            Schema::Null => {}
            Schema::Boolean => out.push(Op::Boolean),
            Schema::Int | Schema::Date | Schema::TimeMillis => out.push(Op::Int),
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => out.push(Op::Long),
            Schema::Float => out.push(Op::Skip(4)),
            Schema::Double => out.push(Op::Skip(8)),
            Schema::Bytes | Schema::BigDecimal | Schema::Uuid(UuidSchema::Bytes) => {
                out.push(Op::Bytes)
            }
            Schema::String | Schema::Uuid(UuidSchema::String) => out.push(Op::String),
            Schema::Decimal(d) => match &d.inner {
                InnerDecimalSchema::Bytes => out.push(Op::Bytes),
                InnerDecimalSchema::Fixed(f) => out.push(Op::Skip(f.size)),
            },
            Schema::Uuid(UuidSchema::Fixed(f)) | Schema::Fixed(f) | Schema::Duration(f) => {
                out.push(Op::Skip(f.size))
            }
            Schema::Enum(e) => out.push(Op::Enum(e.symbols.len())),
            Schema::Union(u) => {
                let mut branches = Vec::with_capacity(u.variants().len());
                for v in u.variants() {
                    let mut b = Vec::new();
                    self.compile(v, ns, depth + 1, &mut b)?;
                    branches.push(b.into_boxed_slice());
                }
                out.push(Op::Union(branches.into_boxed_slice()));
            }
            Schema::Array(a) => {
                let mut item = Vec::new();
                self.compile(&a.items, ns, depth + 1, &mut item)?;
                out.push(Op::Array(item.into_boxed_slice()));
            }
            Schema::Map(m) => {
                let mut value = Vec::new();
                self.compile(&m.types, ns, depth + 1, &mut value)?;
                out.push(Op::Map(value.into_boxed_slice()));
            }
            Schema::Record(r) => {
                let full = r.name.fully_qualified_name(ns).to_string();
                let ns = r.name.namespace().or(ns);
                self.open.push(full);
                let fields = r
                    .fields
                    .iter()
                    .try_for_each(|f| self.compile(&f.schema, ns, depth + 1, out));
                self.open.pop();
                fields?;
            }
            Schema::Ref { name } => {
                let full = name.fully_qualified_name(ns);
                let target = self.names.get(full.as_ref()).copied();
                let text = full.to_string();
                match target {
                    Some(target) if !self.open.contains(&text) => {
                        self.compile(target, ns, depth + 1, out)?
                    }
                    // Recursion, or a name the interpreter will report as unknown.
                    _ => out.push(Op::Walk { schema, ns, depth }),
                }
            }
        }
        Ok(())
    }
}

impl<'s> LongFieldPlan<'s> {
    /// The plan reading the top-level `long` (or `int`) field `field` of records written with
    /// `schema`; `None` where [`long_field`] gives `Ok(None)` (not a record, no such field, or
    /// a field of another type).
    pub fn compile(schema: &'s Schema, names: &NamesRef<'s>, field: &str) -> Option<Self> {
        let Schema::Record(record) = schema else {
            return None;
        };
        let position = record.fields.iter().position(|f| f.name == field)?;
        let int = match record.fields[position].schema {
            Schema::Int => true,
            Schema::Long => false,
            _ => return None,
        };
        let ns = record.name.namespace();
        let mut c = Compiler {
            names,
            open: vec![record.name.fully_qualified_name(None).to_string()],
            ops: 0,
        };
        let mut before = Vec::new();
        let mut after = Vec::new();
        for (i, f) in record.fields.iter().enumerate() {
            if i == position {
                continue;
            }
            let out = if i < position {
                &mut before
            } else {
                &mut after
            };
            let start = out.len();
            if c.compile(&f.schema, ns, 1, out).is_err() {
                // Too big to plan: this field (and the rest, the budget being spent) is walked
                // by the interpreter.
                out.truncate(start);
                out.push(Op::Walk {
                    schema: &f.schema,
                    ns,
                    depth: 1,
                });
            }
        }
        Some(Self {
            before: before.into_boxed_slice(),
            int,
            after: after.into_boxed_slice(),
        })
    }

    /// The field's value in the record `body`, which must be consumed exactly: what
    /// [`long_field`] gives for the schema the plan was compiled from, with the same `names`.
    pub fn run(&self, names: &NamesRef<'s>, body: &[u8]) -> Result<i64, WalkError> {
        let mut w = Walker { names, buf: body };
        w.run(&self.before)?;
        let value = if self.int { w.int()? } else { w.long()? };
        w.run(&self.after)?;
        if !w.buf.is_empty() {
            return Err(WalkError::Corrupt(format!(
                "{} bytes left after the record",
                w.buf.len()
            )));
        }
        Ok(value)
    }
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
    #[inline]
    fn long(&mut self) -> Result<i64, WalkError> {
        // Most varints of an event (lengths, counts, small numbers) are one byte.
        if let Some(&b) = self.buf.first() {
            if b & 0x80 == 0 {
                self.buf = &self.buf[1..];
                let value = u64::from(b);
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        let mut value: u64 = 0;
        for (i, &b) in self.buf.iter().take(10).enumerate() {
            // Bits past the 64th are dropped, as apache-avro and Java's decoder drop them.
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.buf = &self.buf[i + 1..];
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        if self.buf.len() < 10 {
            Err(WalkError::Truncated)
        } else {
            Err(WalkError::Corrupt("varint longer than 10 bytes".into()))
        }
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

    /// Runs compiled steps ([`LongFieldPlan`]).
    fn run(&mut self, ops: &[Op<'s>]) -> Result<(), WalkError> {
        for op in ops {
            match op {
                Op::Boolean => match self.take(1)? {
                    [0 | 1] => {}
                    [b, ..] => return Err(WalkError::Corrupt(format!("boolean byte {b}"))),
                    [] => return Err(WalkError::Truncated),
                },
                Op::Int => {
                    self.int()?;
                }
                Op::Long => {
                    self.long()?;
                }
                Op::Skip(n) => {
                    self.take(*n)?;
                }
                Op::Bytes => {
                    self.bytes()?;
                }
                Op::String => self.string()?,
                Op::Enum(n) => {
                    self.index(*n, "enum")?;
                }
                Op::Union(branches) => {
                    let branch = self.index(branches.len(), "union")?;
                    self.run(&branches[branch])?;
                }
                Op::Array(item) => self.blocks(|w| w.run(item))?,
                Op::Map(value) => self.blocks(|w| {
                    w.string()?;
                    w.run(value)
                })?,
                Op::Walk { schema, ns, depth } => self.skip(schema, *ns, *depth)?,
            }
        }
        Ok(())
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

    /// The plan gives exactly what the interpreter gives (values, errors and their messages,
    /// fallbacks) for `bytes`, every truncation of them and many one-byte mutations.
    fn plan_agrees(schema: &Schema, field: &str, bytes: &[u8]) {
        let names = ResolvedSchema::try_from(schema).expect("names");
        let n = names.get_names();
        let plan = LongFieldPlan::compile(schema, n, field);
        let check = |b: &[u8]| {
            let planned = plan.as_ref().map(|p| p.run(n, b).map(Some));
            let walked = long_field(schema, n, field, b);
            assert_eq!(planned.unwrap_or(Ok(None)), walked, "{b:?}");
        };
        check(bytes);
        for cut in 0..bytes.len() {
            check(&bytes[..cut]);
        }
        let mut trailing = bytes.to_vec();
        trailing.push(0);
        check(&trailing);
        let mut rng: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..5_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut m = bytes.to_vec();
            if m.is_empty() {
                break;
            }
            let at = (rng % m.len() as u64) as usize;
            m[at] = (rng >> 32) as u8;
            check(&m);
        }
    }

    #[test]
    fn the_plan_agrees_with_the_interpreter() {
        let (schema, bytes) = encoded(1250);
        for field in ["total", "nope", "s", "b"] {
            plan_agrees(&schema, field, &bytes);
        }
        let names = ResolvedSchema::try_from(&schema).expect("names");
        let plan = LongFieldPlan::compile(&schema, names.get_names(), "total").expect("plan");
        assert_eq!(plan.run(names.get_names(), &bytes), Ok(1250));
        assert!(
            !format!("{plan:?}").contains("Walk"),
            "a schema without recursion is planned all through: {plan:?}"
        );
    }

    #[test]
    fn the_plan_follows_nested_records_unions_enums_and_fixed() {
        let schema = Schema::parse_str(
            r#"{"type":"record","name":"R","namespace":"a","fields":[
            {"name":"n","type":{"type":"record","name":"N","namespace":"b","fields":[
                {"name":"e","type":{"type":"enum","name":"E","symbols":["X","Y","Z"]}},
                {"name":"f","type":{"type":"fixed","name":"F","size":2}},
                {"name":"inner","type":{"type":"record","name":"I","fields":[
                    {"name":"d","type":"float"},
                    {"name":"again","type":["null","E","F"]}]}}]}},
            {"name":"u","type":["null","b.N","string","bytes","int"]},
            {"name":"q","type":"int"},
            {"name":"tail","type":{"type":"map","values":"b.I"}}]}"#,
        )
        .expect("schema");
        let inner = |again: Value| {
            Value::Record(vec![
                ("d".into(), Value::Float(0.5)),
                ("again".into(), again),
            ])
        };
        let n = |e: u32, again: Value| {
            Value::Record(vec![
                (
                    "e".into(),
                    Value::Enum(e, ["X", "Y", "Z"][e as usize].into()),
                ),
                ("f".into(), Value::Fixed(2, vec![7, 8])),
                ("inner".into(), inner(again)),
            ])
        };
        for (u, q) in [
            (Value::Union(0, Box::new(Value::Null)), 0),
            (
                Value::Union(
                    1,
                    Box::new(n(1, Value::Union(2, Box::new(Value::Fixed(2, vec![1, 2]))))),
                ),
                -7,
            ),
            (
                Value::Union(2, Box::new(Value::String("ü".into()))),
                i64::from(i32::MAX),
            ),
            (
                Value::Union(3, Box::new(Value::Bytes(vec![0xff]))),
                i64::from(i32::MIN),
            ),
            (Value::Union(4, Box::new(Value::Int(3))), 1),
        ] {
            let v = Value::Record(vec![
                (
                    "n".into(),
                    n(2, Value::Union(1, Box::new(Value::Enum(0, "X".into())))),
                ),
                ("u".into(), u),
                ("q".into(), Value::Int(q as i32)),
                (
                    "tail".into(),
                    Value::Map(
                        [(
                            "k".to_string(),
                            inner(Value::Union(0, Box::new(Value::Null))),
                        )]
                        .into(),
                    ),
                ),
            ]);
            #[allow(deprecated)]
            let bytes = apache_avro::to_avro_datum(&schema, v).expect("encode");
            let names = ResolvedSchema::try_from(&schema).expect("names");
            let plan = LongFieldPlan::compile(&schema, names.get_names(), "q").expect("plan");
            assert_eq!(plan.run(names.get_names(), &bytes), Ok(q));
            plan_agrees(&schema, "q", &bytes);
        }
    }

    #[test]
    fn the_plan_reads_blocks_with_negative_counts() {
        let schema = Schema::parse_str(
            r#"{"type":"record","name":"B","fields":[
            {"name":"a","type":{"type":"array","items":"long"}},
            {"name":"m","type":{"type":"map","values":"int"}},
            {"name":"t","type":"long"}]}"#,
        )
        .expect("schema");
        // a: one block of -2 items (2 bytes) [1, 2], then a block of 1 item [3], then the end;
        // m: one block of -1 entries (3 bytes) {"k": 5}, then the end; t: 42.
        let bytes = [3, 4, 2, 4, 2, 6, 0, 1, 6, 2, b'k', 10, 0, 84];
        #[allow(deprecated)]
        let full = apache_avro::from_avro_datum(&schema, &mut &bytes[..], None).expect("decodes");
        assert!(matches!(&full, Value::Record(f) if f[2].1 == Value::Long(42)));
        let names = ResolvedSchema::try_from(&schema).expect("names");
        let plan = LongFieldPlan::compile(&schema, names.get_names(), "t").expect("plan");
        assert_eq!(plan.run(names.get_names(), &bytes), Ok(42));
        plan_agrees(&schema, "t", &bytes);
    }

    #[test]
    fn a_recursive_schema_is_walked_where_it_recurses() {
        let schema = Schema::parse_str(
            r#"{"type":"record","name":"Node","namespace":"r","fields":[
            {"name":"next","type":["null","Node"]},
            {"name":"kids","type":{"type":"array","items":"r.Node"}},
            {"name":"v","type":"long"}]}"#,
        )
        .expect("schema");
        let node = |next: Value, kids: Vec<Value>, v: i64| {
            Value::Record(vec![
                ("next".into(), next),
                ("kids".into(), Value::Array(kids)),
                ("v".into(), Value::Long(v)),
            ])
        };
        let null = || Value::Union(0, Box::new(Value::Null));
        let leaf = node(null(), vec![], 1);
        let mid = node(
            Value::Union(1, Box::new(leaf.clone())),
            vec![leaf.clone(), leaf],
            2,
        );
        let top = node(Value::Union(1, Box::new(mid.clone())), vec![mid], 99);
        #[allow(deprecated)]
        let bytes = apache_avro::to_avro_datum(&schema, top).expect("encode");
        let names = ResolvedSchema::try_from(&schema).expect("names");
        let plan = LongFieldPlan::compile(&schema, names.get_names(), "v").expect("plan");
        assert!(format!("{plan:?}").contains("Walk"), "{plan:?}");
        assert_eq!(plan.run(names.get_names(), &bytes), Ok(99));
        plan_agrees(&schema, "v", &bytes);
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
