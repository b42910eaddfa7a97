//! Column values and their mapping to Postgres parameters.

use std::error::Error as StdError;
use std::fmt;

use tokio_postgres::types::private::BytesMut;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

/// A value bound to a column or a `$n` parameter.
///
/// Exists so a projection function can produce row operations without knowing Postgres' wire
/// types: the value is converted to whatever type the statement's parameter has (an `Int` binds
/// to `smallint`, `integer`, `bigint`, `real` or `double precision` columns alike, checked for
/// range). A value that cannot become the parameter's type fails that record with SQLSTATE
/// `42804` (datatype_mismatch), which dead-letters it instead of stalling the partition.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL `NULL`, whatever the column type.
    Null,
    /// `boolean`.
    Bool(bool),
    /// `smallint`, `integer`, `bigint` (range-checked), `numeric`, `real`/`double precision`,
    /// or `text`.
    Int(i64),
    /// `real`, `double precision` or `numeric` (its shortest decimal form).
    Float(f64),
    /// `text`, `varchar`, `char`, `name`; `json`/`jsonb` holding JSON text, `numeric` holding a
    /// decimal (`-12.50`, exact), `uuid` holding its hex form.
    Text(String),
    /// `bytea`.
    Bytes(Vec<u8>),
    /// `json` or `jsonb`.
    Json(serde_json::Value),
    /// Milliseconds since the Unix epoch: `timestamptz`, `timestamp`, or `bigint`.
    TimestampMillis(i64),
}

/// Why a [`Value`] could not be bound to a parameter of a given Postgres type.
///
/// Public so the store can recognise it inside a driver error and classify the record as
/// permanently failing (SQLSTATE `42804`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueTypeError {
    /// The value's variant.
    pub value: &'static str,
    /// The parameter's Postgres type.
    pub pg_type: String,
}

impl fmt::Display for ValueTypeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a {} value cannot be bound to a parameter of type {}",
            self.value, self.pg_type
        )
    }
}

impl StdError for ValueTypeError {}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "Null",
            Value::Bool(_) => "Bool",
            Value::Int(_) => "Int",
            Value::Float(_) => "Float",
            Value::Text(_) => "Text",
            Value::Bytes(_) => "Bytes",
            Value::Json(_) => "Json",
            Value::TimestampMillis(_) => "TimestampMillis",
        }
    }

    fn mismatch(&self, ty: &Type) -> Box<dyn StdError + Sync + Send> {
        Box::new(ValueTypeError {
            value: self.kind(),
            pg_type: ty.name().to_string(),
        })
    }
}

/// Microseconds between 1970-01-01 and 2000-01-01 (Postgres' timestamp epoch).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Bool(b) if *ty == Type::BOOL => b.to_sql(ty, out),
            Value::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)
                    .map_err(|_| self.mismatch(ty))?
                    .to_sql(ty, out),
                Type::INT2 => i16::try_from(*i)
                    .map_err(|_| self.mismatch(ty))?
                    .to_sql(ty, out),
                Type::FLOAT8 => (*i as f64).to_sql(ty, out),
                Type::FLOAT4 => (*i as f32).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => i.to_string().to_sql(ty, out),
                Type::NUMERIC => numeric(&i.to_string(), out).ok_or_else(|| self.mismatch(ty)),
                _ => Err(self.mismatch(ty)),
            },
            Value::Float(f) => match *ty {
                Type::FLOAT8 => f.to_sql(ty, out),
                Type::FLOAT4 => (*f as f32).to_sql(ty, out),
                // Display never uses an exponent: the shortest decimal that reads back as `f`.
                Type::NUMERIC if f.is_finite() => {
                    numeric(&f.to_string(), out).ok_or_else(|| self.mismatch(ty))
                }
                _ => Err(self.mismatch(ty)),
            },
            Value::Text(s) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    s.as_str().to_sql(&Type::TEXT, out)
                }
                Type::JSON | Type::JSONB => {
                    let v: serde_json::Value =
                        serde_json::from_str(s).map_err(|_| self.mismatch(ty))?;
                    v.to_sql(ty, out)
                }
                Type::NUMERIC => numeric(s, out).ok_or_else(|| self.mismatch(ty)),
                Type::UUID => {
                    let b = uuid_bytes(s).ok_or_else(|| self.mismatch(ty))?;
                    out.extend_from_slice(&b);
                    Ok(IsNull::No)
                }
                _ => Err(self.mismatch(ty)),
            },
            Value::Bytes(b) if *ty == Type::BYTEA => b.as_slice().to_sql(ty, out),
            Value::Json(v) if *ty == Type::JSON || *ty == Type::JSONB => v.to_sql(ty, out),
            Value::TimestampMillis(ms) => match *ty {
                Type::TIMESTAMPTZ | Type::TIMESTAMP => {
                    let micros = ms
                        .checked_mul(1000)
                        .and_then(|us| us.checked_sub(PG_EPOCH_MICROS))
                        .ok_or_else(|| self.mismatch(ty))?;
                    out.extend_from_slice(&micros.to_be_bytes());
                    Ok(IsNull::No)
                }
                Type::INT8 => ms.to_sql(ty, out),
                _ => Err(self.mismatch(ty)),
            },
            _ => Err(self.mismatch(ty)),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// Writes a decimal string (`-123.4500`) in `numeric`'s binary format: base-10000 digit
/// groups, the weight of the first group, the sign and the display scale. `None` when the
/// string is not a plain decimal.
fn numeric(s: &str, out: &mut BytesMut) -> Option<IsNull> {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let dscale = u16::try_from(frac.len()).ok()?;
    let int_pad = (4 - int.len() % 4) % 4;
    let frac_pad = (4 - frac.len() % 4) % 4;
    let padded: Vec<u8> = std::iter::repeat_n(b'0', int_pad)
        .chain(int.bytes())
        .chain(frac.bytes())
        .chain(std::iter::repeat_n(b'0', frac_pad))
        .collect();
    let mut groups: Vec<i16> = padded
        .chunks(4)
        .map(|c| c.iter().fold(0i16, |acc, d| acc * 10 + i16::from(d - b'0')))
        .collect();
    let mut weight = i16::try_from((int_pad + int.len()) / 4).ok()? - 1;
    let lead = groups.iter().take_while(|g| **g == 0).count();
    groups.drain(..lead);
    weight -= i16::try_from(lead).ok()?;
    while groups.last() == Some(&0) {
        groups.pop();
    }
    let sign: u16 = if negative && !groups.is_empty() {
        0x4000
    } else {
        0
    };
    if groups.is_empty() {
        weight = 0;
    }
    out.extend_from_slice(&i16::try_from(groups.len()).ok()?.to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&dscale.to_be_bytes());
    for g in groups {
        out.extend_from_slice(&g.to_be_bytes());
    }
    Some(IsNull::No)
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (dashes optional) as its 16 bytes.
fn uuid_bytes(s: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = s.bytes().filter(|b| *b != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (o, pair) in out.iter_mut().zip(hex.chunks(2)) {
        *o = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Value::Int(i64::from(v))
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v)
    }
}

impl From<serde_json::Value> for Value {
    fn from(v: serde_json::Value) -> Self {
        Value::Json(v)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}
