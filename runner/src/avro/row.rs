//! One decoded Avro record → protobuf row bytes for a BigQuery table schema.
//!
//! Fields are matched to columns by name (case-insensitively, as on the JSON path),
//! so a record can be written to a table created from an older or newer version of
//! its schema. Values are converted by the column they land in: a `timestamp-millis`
//! goes to a TIMESTAMP column as microseconds (Google's template multiplies by nothing
//! and lands in 1970; see [`super::table`]), or to an INTEGER column (a table Google's
//! template created) as the raw number. Map entries are written sorted by key, so a
//! record always maps to the same bytes: exactly-once replays depend on it.
//!
//! ```
//! use apache_avro::types::Value;
//! use flexrun::avro::{row::encode_record, table::table_schema, WriterSchema};
//! let w = WriterSchema::parse(r#"{"type":"record","name":"R","fields":[{"name":"id","type":"long"}]}"#).unwrap();
//! let table = table_schema(&w, false).unwrap();
//! let mut out = Vec::new();
//! encode_record(&w, &table, &Value::Record(vec![("id".into(), Value::Long(5))]), &mut out).unwrap();
//! assert_eq!(out, [0x08, 0x05]); // field 1, varint 5
//! ```

use super::WriterSchema;
use crate::bigquery::proto::{put_bytes, put_double, put_varint};
use crate::bigquery::schema::{field_path, Column, ColumnType, Mode, Schema as BqSchema};
use crate::record::RecordError;
use apache_avro::schema::Schema;
use apache_avro::types::Value;

/// Encode a top-level record `v` (of writer schema `w`) as a row of `table`.
pub fn encode_record(w: &WriterSchema, table: &BqSchema, v: &Value, out: &mut Vec<u8>) -> Result<(), RecordError> {
    let Schema::Record(rs) = &w.schema else {
        return Err(RecordError::Avro("the writer schema is not a record".into()));
    };
    let Value::Record(fields) = v else {
        return Err(RecordError::Avro("the decoded value is not a record".into()));
    };
    encode_fields(w, table, &rs.fields, fields, "", out)
}

/// Encode the record in field `name` of the top-level record `v` (an envelope, such
/// as Debezium's `after`) as a row of `table`. Ok(None) when the field is absent;
/// Ok(Some(false)) when it is null.
pub fn encode_field_record(
    w: &WriterSchema,
    table: &BqSchema,
    v: &Value,
    name: &str,
    out: &mut Vec<u8>,
) -> Result<Option<bool>, RecordError> {
    let (Schema::Record(rs), Value::Record(fields)) = (&w.schema, v) else {
        return Err(RecordError::Avro("the writer schema is not a record".into()));
    };
    let Some((f, (_, fv))) = rs.fields.iter().zip(fields).find(|(f, _)| f.name == name) else {
        return Ok(None);
    };
    match unwrap_union(w, &f.schema, fv) {
        (_, Value::Null) => Ok(Some(false)),
        (Schema::Record(inner), Value::Record(values)) => {
            encode_fields(w, table, &inner.fields, values, "", out).map(|()| Some(true))
        }
        _ => Err(RecordError::Avro(format!("field {name} is not a record"))),
    }
}

/// A top-level record's fields other than `skip`, as JSON (an envelope's small fields;
/// the row itself is encoded by [`encode_field_record`]).
pub fn fields_as_json(v: &Value, skip: &[&str]) -> Result<serde_json::Map<String, serde_json::Value>, RecordError> {
    let Value::Record(fields) = v else {
        return Err(RecordError::Avro("the decoded value is not a record".into()));
    };
    let mut out = serde_json::Map::new();
    for (k, fv) in fields.iter().filter(|(k, _)| !skip.contains(&k.as_str())) {
        let j = serde_json::Value::try_from(fv.clone()).map_err(|e| RecordError::Avro(format!("field {k}: {e}")))?;
        out.insert(k.clone(), j);
    }
    Ok(out)
}

fn encode_fields(
    w: &WriterSchema,
    table: &BqSchema,
    schema_fields: &[apache_avro::schema::RecordField],
    values: &[(String, Value)],
    prefix: &str,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let mut seen = vec![false; table.columns.len()];
    for (f, (name, v)) in schema_fields.iter().zip(values) {
        let idx = table.lookup(name).ok_or_else(|| RecordError::UnknownField(field_path(prefix, name)))?;
        let col = &table.columns[idx];
        let field = field_path(prefix, name);
        seen[idx] |= encode_field(w, col, idx as u32 + 1, &f.schema, v, &field, out)?;
    }
    for (c, s) in table.columns.iter().zip(&seen) {
        if c.mode == Mode::Required && !s {
            return Err(RecordError::MissingRequired(field_path(prefix, &c.name)));
        }
    }
    Ok(())
}

/// Strip a union: the branch's schema and value.
fn unwrap_union<'a>(w: &'a WriterSchema, s: &'a Schema, v: &'a Value) -> (&'a Schema, &'a Value) {
    match (w.resolve(s), v) {
        (Schema::Union(u), Value::Union(i, inner)) => {
            let branch = u.variants().get(*i as usize).unwrap_or(s);
            (w.resolve(branch), inner)
        }
        (s, v) => (s, v),
    }
}

/// Encode one field; false when it is null and nothing was written.
fn encode_field(
    w: &WriterSchema,
    col: &Column,
    tag: u32,
    s: &Schema,
    v: &Value,
    field: &str,
    out: &mut Vec<u8>,
) -> Result<bool, RecordError> {
    let (s, v) = unwrap_union(w, s, v);
    match (v, col.mode) {
        (Value::Null, _) => Ok(false),
        (Value::Array(items), Mode::Repeated) => {
            let Schema::Array(a) = s else {
                return Err(RecordError::Avro(format!("{field}: array without an array schema")));
            };
            for item in items {
                let (is, iv) = unwrap_union(w, &a.items, item);
                if matches!(iv, Value::Null) {
                    return Err(wrong(col, field, "array items that are not null", "null"));
                }
                encode_scalar(w, col, tag, is, iv, field, out)?;
            }
            Ok(true)
        }
        (Value::Map(m), Mode::Repeated) => {
            let Schema::Map(ms) = s else {
                return Err(RecordError::Avro(format!("{field}: map without a map schema")));
            };
            encode_map(w, col, tag, &ms.types, m, field, out)?;
            Ok(true)
        }
        (_, Mode::Repeated) => Err(wrong(col, field, &format!("an array of {}", col.type_name), kind(v))),
        (Value::Array(_) | Value::Map(_), _) => Err(wrong(col, field, "a single value", kind(v))),
        _ => encode_scalar(w, col, tag, s, v, field, out).map(|()| true),
    }
}

/// A map as repeated `{key, value}` records, sorted by key.
fn encode_map(
    w: &WriterSchema,
    col: &Column,
    tag: u32,
    value_schema: &Schema,
    m: &std::collections::HashMap<String, Value>,
    field: &str,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let sub = col.fields.as_ref().filter(|_| col.typ == ColumnType::Record);
    let (Some(sub), Some(k), Some(vi)) = (sub, sub.and_then(|s| s.lookup("key")), sub.and_then(|s| s.lookup("value")))
    else {
        return Err(wrong(col, field, "a RECORD column with key and value fields", "a map"));
    };
    let mut entries: Vec<_> = m.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    let mut inner = Vec::with_capacity(64);
    for (key, value) in entries {
        inner.clear();
        put_bytes(k as u32 + 1, key.as_bytes(), &mut inner);
        let vf = field_path(field, "value");
        encode_field(w, &sub.columns[vi], vi as u32 + 1, value_schema, value, &vf, &mut inner)?;
        put_bytes(tag, &inner, out);
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Boolean(_) => "a boolean",
        Value::Int(_) | Value::Long(_) => "an integer",
        Value::Float(_) | Value::Double(_) => "a floating-point number",
        Value::Bytes(_) | Value::Fixed(..) => "bytes",
        Value::String(_) => "a string",
        Value::Enum(..) => "an enum symbol",
        Value::Array(_) => "an array",
        Value::Map(_) => "a map",
        Value::Record(_) => "a record",
        Value::Date(_) => "a date",
        Value::Decimal(_) | Value::BigDecimal(_) => "a decimal",
        Value::TimeMillis(_) | Value::TimeMicros(_) => "a time of day",
        Value::Duration(_) => "a duration",
        Value::Uuid(_) => "a uuid",
        Value::Union(..) => "a union",
        _ => "a timestamp",
    }
}

fn wrong(col: &Column, field: &str, expected: &str, found: &str) -> RecordError {
    RecordError::WrongType {
        field: field.to_string(),
        expected: format!("{expected} for {} column", col.type_name),
        found: found.to_string(),
    }
}

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// Microseconds since the epoch of a timestamp-like value.
fn epoch_micros(v: &Value) -> Option<i64> {
    match v {
        Value::TimestampMillis(ms) | Value::LocalTimestampMillis(ms) => ms.checked_mul(1000),
        Value::TimestampMicros(us) | Value::LocalTimestampMicros(us) => Some(*us),
        Value::TimestampNanos(ns) | Value::LocalTimestampNanos(ns) => Some(ns.div_euclid(1000)),
        Value::Date(d) => (*d as i64).checked_mul(MICROS_PER_DAY),
        _ => None,
    }
}

/// The raw number a logical type is stored as (for INTEGER columns).
fn raw_integer(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) | Value::Date(i) | Value::TimeMillis(i) => Some(*i as i64),
        Value::Long(l)
        | Value::TimeMicros(l)
        | Value::TimestampMillis(l)
        | Value::TimestampMicros(l)
        | Value::TimestampNanos(l)
        | Value::LocalTimestampMillis(l)
        | Value::LocalTimestampMicros(l)
        | Value::LocalTimestampNanos(l) => Some(*l),
        _ => None,
    }
}

/// The text of a value for STRING and string-like columns (NUMERIC, TIME, DATETIME...).
fn text(s: &Schema, v: &Value) -> Option<String> {
    Some(match v {
        Value::String(x) => x.clone(),
        Value::Enum(_, sym) => sym.clone(),
        Value::Uuid(u) => u.to_string(),
        Value::Boolean(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Long(l) => l.to_string(),
        Value::Float(f) => (*f as f64).to_string(),
        Value::Double(d) => d.to_string(),
        Value::Decimal(d) => {
            let Schema::Decimal(ds) = s else { return None };
            let bytes: Vec<u8> = d.try_into().ok()?;
            decimal_text(&bytes, ds.scale)?
        }
        Value::BigDecimal(b) => b.to_string(),
        Value::TimeMillis(ms) => time_text(*ms as i64 * 1000)?,
        Value::TimeMicros(us) => time_text(*us)?,
        Value::Date(d) => (chrono::NaiveDate::default() + chrono::Duration::days(*d as i64)).to_string(),
        v => {
            let us = epoch_micros(v)?;
            let t = chrono::DateTime::from_timestamp_micros(us)?.naive_utc();
            t.format("%Y-%m-%d %H:%M:%S%.6f").to_string()
        }
    })
}

/// `HH:MM:SS.ffffff` for microseconds after midnight.
fn time_text(us: i64) -> Option<String> {
    let t = chrono::NaiveTime::from_num_seconds_from_midnight_opt(
        u32::try_from(us.div_euclid(1_000_000)).ok()?,
        u32::try_from(us.rem_euclid(1_000_000) * 1000).ok()?,
    )?;
    Some(t.format("%H:%M:%S%.6f").to_string())
}

/// A decimal's text from its two's-complement big-endian unscaled bytes and its scale.
pub fn decimal_text(bytes: &[u8], scale: usize) -> Option<String> {
    let n = num_bigint::BigInt::from_signed_bytes_be(bytes);
    let digits = n.magnitude().to_string();
    let sign = if n.sign() == num_bigint::Sign::Minus { "-" } else { "" };
    if scale == 0 {
        return Some(format!("{sign}{digits}"));
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    Some(format!("{sign}{int}.{frac}"))
}

fn encode_scalar(
    w: &WriterSchema,
    col: &Column,
    tag: u32,
    s: &Schema,
    v: &Value,
    field: &str,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let bad = || wrong(col, field, "a value it can hold", kind(v));
    match col.typ {
        ColumnType::String | ColumnType::StringLike => {
            let t = text(s, v).filter(|_| !matches!(v, Value::Record(_))).ok_or_else(bad)?;
            put_bytes(tag, t.as_bytes(), out)
        }
        ColumnType::Int64 => put_varint(tag, raw_integer(v).ok_or_else(bad)? as u64, out),
        ColumnType::Float64 => {
            let f = match v {
                // Google's template widens a float exactly this way: 0.1f → 0.10000000149011612.
                Value::Float(f) => *f as f64,
                Value::Double(d) => *d,
                Value::Int(i) => *i as f64,
                Value::Long(l) => *l as f64,
                _ => return Err(bad()),
            };
            put_double(tag, f, out)
        }
        ColumnType::Bool => match v {
            Value::Boolean(b) => put_varint(tag, *b as u64, out),
            _ => return Err(bad()),
        },
        ColumnType::Bytes => match v {
            Value::Bytes(b) | Value::Fixed(_, b) => put_bytes(tag, b, out),
            Value::String(x) => put_bytes(tag, x.as_bytes(), out),
            _ => return Err(bad()),
        },
        ColumnType::Timestamp => put_varint(tag, epoch_micros(v).ok_or_else(bad)? as u64, out),
        ColumnType::Date => {
            let days = match v {
                Value::Date(d) => *d as i64,
                v => epoch_micros(v).ok_or_else(bad)?.div_euclid(MICROS_PER_DAY),
            };
            put_varint(tag, days as i32 as i64 as u64, out)
        }
        ColumnType::Record => {
            let (Value::Record(fields), Schema::Record(rs)) = (v, s) else { return Err(bad()) };
            let sub = col.fields.as_ref().expect("RECORD columns carry their fields");
            let mut inner = Vec::with_capacity(64);
            encode_fields(w, sub, &rs.fields, fields, field, &mut inner)?;
            put_bytes(tag, &inner, out)
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::avro::table::table_schema;
    use crate::bigquery::schema::Schema as Bq;
    use serde_json::json;

    const SCHEMA: &str = r#"{"type":"record","name":"R","fields":[
        {"name":"id","type":"long"},
        {"name":"ratio","type":"float"},
        {"name":"level","type":{"type":"enum","name":"L","symbols":["LOW","HIGH"]}},
        {"name":"day","type":{"type":"int","logicalType":"date"}},
        {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"tod","type":{"type":"long","logicalType":"time-micros"}},
        {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
        {"name":"uid","type":{"type":"string","logicalType":"uuid"}},
        {"name":"note","type":["null","string"]},
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"attrs","type":{"type":"map","values":"long"}},
        {"name":"addr","type":{"type":"record","name":"A","fields":[{"name":"city","type":"string"}]}}
    ]}"#;

    fn sample() -> Value {
        Value::Record(vec![
            ("id".into(), Value::Long(7)),
            ("ratio".into(), Value::Float(0.1)),
            ("level".into(), Value::Enum(1, "HIGH".into())),
            ("day".into(), Value::Date(19_000)),
            ("at".into(), Value::TimestampMillis(1_700_000_000_123)),
            ("tod".into(), Value::TimeMicros(3_661_000_001)),
            ("price".into(), Value::Decimal(apache_avro::Decimal::from(vec![0xfc, 0x18]))), // -1000 → -10.00
            ("uid".into(), Value::Uuid(apache_avro::Uuid::nil())),
            ("note".into(), Value::Union(0, Box::new(Value::Null))),
            ("tags".into(), Value::Array(vec![Value::String("a".into()), Value::String("b".into())])),
            ("attrs".into(), Value::Map([("z".to_string(), Value::Long(1)), ("a".to_string(), Value::Long(2))].into())),
            ("addr".into(), Value::Record(vec![("city".into(), Value::String("Oslo".into()))])),
        ])
    }

    /// Decode a row back into (field number, value) pairs for checking.
    fn fields(mut b: &[u8]) -> Vec<(u32, String)> {
        use prost::encoding::{decode_key, decode_varint, WireType};
        let mut out = Vec::new();
        while !b.is_empty() {
            let (tag, wt) = decode_key(&mut b).unwrap();
            let v = match wt {
                WireType::Varint => (decode_varint(&mut b).unwrap() as i64).to_string(),
                WireType::SixtyFourBit => {
                    let (x, rest) = b.split_at(8);
                    b = rest;
                    f64::from_le_bytes(x.try_into().unwrap()).to_string()
                }
                WireType::LengthDelimited => {
                    let n = decode_varint(&mut b).unwrap() as usize;
                    let (x, rest) = b.split_at(n);
                    b = rest;
                    String::from_utf8_lossy(x).into_owned()
                }
                _ => unreachable!(),
            };
            out.push((tag, v));
        }
        out
    }

    #[test]
    fn each_type_lands_in_its_column_as_bigquery_stores_it() {
        let w = WriterSchema::parse(SCHEMA).unwrap();
        let table = table_schema(&w, false).unwrap();
        let mut out = Vec::new();
        encode_record(&w, &table, &sample(), &mut out).unwrap();
        let got = fields(&out);
        let want: Vec<(u32, String)> = vec![
            (1, "7".into()),
            (2, "0.10000000149011612".into()),
            (3, "HIGH".into()),
            (4, "19000".into()),
            (5, "1700000000123000".into()),
            (6, "01:01:01.000001".into()),
            (7, "-10.00".into()),
            (8, "00000000-0000-0000-0000-000000000000".into()),
            (10, "a".into()),
            (10, "b".into()),
            (11, "\n\u{1}a\u{10}\u{2}".into()),
            (11, "\n\u{1}z\u{10}\u{1}".into()),
            (12, "\n\u{4}Oslo".into()),
        ];
        assert_eq!(got, want);
        // The same record always gives the same bytes (maps are sorted by key).
        let mut again = Vec::new();
        encode_record(&w, &table, &sample(), &mut again).unwrap();
        assert_eq!(out, again);
    }

    #[test]
    fn a_table_created_by_googles_template_takes_raw_numbers() {
        // Google's template creates INTEGER columns for timestamp-micros and time-micros.
        let w = WriterSchema::parse(
            r#"{"type":"record","name":"R","fields":[{"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}}]}"#,
        )
        .unwrap();
        let table = Bq::from_json(&json!([{"name":"AT","type":"INTEGER"}])).unwrap();
        let mut out = Vec::new();
        encode_record(&w, &table, &Value::Record(vec![("at".into(), Value::TimestampMicros(42))]), &mut out).unwrap();
        assert_eq!(fields(&out), [(1, "42".to_string())]);
    }

    #[test]
    fn mismatches_name_the_field_and_the_column() {
        let w = WriterSchema::parse(SCHEMA).unwrap();
        let narrow = Bq::from_json(&json!([{"name":"id","type":"INTEGER"}])).unwrap();
        let e = encode_record(&w, &narrow, &sample(), &mut Vec::new()).unwrap_err();
        assert_eq!(e, RecordError::UnknownField("ratio".into()));
        let wrong_type = Bq::from_json(&json!([{"name":"id","type":"BOOLEAN"}])).unwrap();
        let w1 = WriterSchema::parse(r#"{"type":"record","name":"R","fields":[{"name":"id","type":"long"}]}"#).unwrap();
        let e = encode_record(&w1, &wrong_type, &Value::Record(vec![("id".into(), Value::Long(1))]), &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("field id") && e.contains("BOOLEAN"), "{e}");
        let required =
            Bq::from_json(&json!([{"name":"id","type":"INTEGER"},{"name":"x","type":"STRING","mode":"REQUIRED"}]))
                .unwrap();
        let e = encode_record(&w1, &required, &Value::Record(vec![("id".into(), Value::Long(1))]), &mut Vec::new());
        assert_eq!(e.unwrap_err(), RecordError::MissingRequired("x".into()));
    }

    #[test]
    fn decimals_keep_their_scale_and_sign() {
        assert_eq!(decimal_text(&[0x30, 0x39], 2).unwrap(), "123.45");
        assert_eq!(decimal_text(&[0x05], 3).unwrap(), "0.005");
        assert_eq!(decimal_text(&[0xff], 0).unwrap(), "-1");
        assert_eq!(decimal_text(&[0xfb], 2).unwrap(), "-0.05");
    }
}
