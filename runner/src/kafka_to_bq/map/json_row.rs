//! A JSON object → one protobuf row in the table's schema, as Google's JSON path maps
//! it: top-level keys onto columns case-insensitively, nested objects onto RECORDs,
//! arrays onto REPEATED columns, each scalar checked against its column's type. The
//! fast path reads a flat object as borrowed raw values ([`encode_borrowed`]); anything
//! else takes the full [`serde_json::Value`] path ([`encode_object`]). Used by
//! [`super::transform::Mapper`]; pure.

use super::json_flat::Field;
use crate::bigquery::proto::{put_bytes, put_double, put_varint};
use crate::bigquery::schema::field_path;
use crate::bigquery::schema::{Column, ColumnType, Mode, Schema};
use crate::record::{parse_timestamp_micros, RecordError};
use base64::Engine;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(super) fn encode_object(
    schema: &Schema,
    obj: &serde_json::Map<String, Value>,
    prefix: &str,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let mut seen = vec![false; schema.columns.len()];
    for (key, value) in obj {
        let idx = schema.lookup(key).ok_or_else(|| RecordError::UnknownField(field_path(prefix, key)))?;
        seen[idx] |= encode_field(&schema.columns[idx], idx, value, prefix, out)?;
    }
    check_required(schema, &seen, prefix)
}

/// The fast path's top level: the same order and checks as [`encode_object`], for the
/// top-level fields of a message sorted by key ([`super::json_flat::scan`], or serde_json's
/// borrowed map). Plain strings are copied from the message, integers read from their
/// text, and anything else is parsed on its own and takes [`encode_field`].
pub(super) fn encode_borrowed<'a>(
    schema: &Schema,
    fields: impl Iterator<Item = &'a Field<'a>>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    // Which columns were set, on the stack for the usual narrow table.
    let (mut small, mut wide) = ([false; 32], Vec::new());
    let seen: &mut [bool] = match schema.columns.len() {
        n if n <= small.len() => &mut small[..n],
        n => {
            wide.resize(n, false);
            &mut wide
        }
    };
    for f in fields {
        let idx = schema.lookup(f.key).ok_or_else(|| RecordError::UnknownField(field_path("", f.key)))?;
        let col = &schema.columns[idx];
        if col.mode != Mode::Repeated && encode_plain(col, idx, f, out) {
            seen[idx] = true;
            continue;
        }
        let v: Value = serde_json::from_str(f.raw).map_err(|e| RecordError::InvalidJson(e.to_string()))?;
        seen[idx] |= encode_field(col, idx, &v, "", out)?;
    }
    check_required(schema, seen, "")
}

/// Write a plain string into a STRING column, or an integer (as a literal or a plain
/// string, as [`encode_scalar`] reads them) into an INT64 column, without serde_json;
/// false (and nothing written) for everything else, which takes [`encode_field`].
pub(super) fn encode_plain(col: &Column, idx: usize, f: &Field<'_>, out: &mut Vec<u8>) -> bool {
    let tag = idx as u32 + 1;
    match (col.typ, f.plain) {
        (ColumnType::String | ColumnType::StringLike, Some(s)) => put_bytes(tag, s.as_bytes(), out),
        (ColumnType::Int64, Some(s)) => match s.trim().parse::<i64>() {
            Ok(n) => put_varint(tag, n as u64, out),
            Err(_) => return false,
        },
        (ColumnType::Int64, None) => match plain_integer(f.raw) {
            Some(n) => put_varint(tag, n as u64, out),
            None => return false,
        },
        _ => return false,
    }
    true
}

/// serde_json's borrowed top level as [`Field`]s (the tier after the lean parser).
pub(super) fn serde_fields<'a>(obj: &BTreeMap<&'a str, &'a RawValue>) -> Vec<Field<'a>> {
    obj.iter().map(|(k, raw)| Field { key: k, raw: raw.get(), plain: plain_string(raw.get()) }).collect()
}

/// A JSON integer literal that fits an i64, straight from the message (what
/// `serde_json::Number::as_i64` gives for it); anything else returns None and is
/// parsed by serde_json. `-0` is among the rest: serde_json reads it as the float -0.0.
pub(super) fn plain_integer(raw: &str) -> Option<i64> {
    let digits = raw.strip_prefix('-').unwrap_or(raw);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok().filter(|n| *n != 0 || digits.len() == raw.len())
}

/// The contents of a JSON string literal without escapes, straight from the message.
/// The parser has already validated `raw` (no control characters, proper quoting), so
/// a string with no backslash is exactly the text between its quotes; one with escapes
/// returns None and is decoded by serde_json.
fn plain_string(raw: &str) -> Option<&str> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('\\')).then_some(inner)
}

fn check_required(schema: &Schema, seen: &[bool], prefix: &str) -> Result<(), RecordError> {
    for (c, s) in schema.columns.iter().zip(seen) {
        if c.mode == Mode::Required && !s {
            return Err(RecordError::MissingRequired(field_path(prefix, &c.name)));
        }
    }
    Ok(())
}

/// Encode one field (column `idx`); false when the value is null and nothing was written.
fn encode_field(col: &Column, idx: usize, value: &Value, prefix: &str, out: &mut Vec<u8>) -> Result<bool, RecordError> {
    let tag = idx as u32 + 1;
    {
        match (col.mode, value) {
            (_, Value::Null) => return Ok(false),
            (Mode::Repeated, Value::Array(items)) => {
                for item in items {
                    if item.is_null() {
                        return Err(RecordError::WrongType {
                            field: field_path(prefix, &col.name),
                            expected: "array elements that are not null".into(),
                            found: "null".into(),
                        });
                    }
                    encode_scalar(col, item, tag, prefix, out)?;
                }
            }
            (Mode::Repeated, other) => {
                return Err(RecordError::WrongType {
                    field: field_path(prefix, &col.name),
                    expected: format!("an array of {}", col.type_name),
                    found: kind(other).into(),
                })
            }
            (_, v) => encode_scalar(col, v, tag, prefix, out)?,
        }
    }
    Ok(true)
}

fn wrong(col: &Column, prefix: &str, expected: &str, v: &Value) -> RecordError {
    let found = match v {
        Value::String(s) if s.len() <= 40 => format!("the string {s:?}"),
        Value::Number(n) => format!("the number {n}"),
        _ => kind(v).to_string(),
    };
    RecordError::WrongType {
        field: field_path(prefix, &col.name),
        expected: format!("{expected} for {} column", col.type_name),
        found,
    }
}

fn encode_scalar(col: &Column, v: &Value, tag: u32, prefix: &str, out: &mut Vec<u8>) -> Result<(), RecordError> {
    match col.typ {
        ColumnType::String => match v {
            Value::String(s) => put_bytes(tag, s.as_bytes(), out),
            Value::Number(n) => put_bytes(tag, n.to_string().as_bytes(), out),
            Value::Bool(b) => put_bytes(tag, if *b { b"true" } else { b"false" }, out),
            _ => return Err(wrong(col, prefix, "a string", v)),
        },
        ColumnType::StringLike => match v {
            Value::String(s) => put_bytes(tag, s.as_bytes(), out),
            Value::Number(n) => put_bytes(tag, n.to_string().as_bytes(), out),
            Value::Bool(b) => put_bytes(tag, if *b { b"true" } else { b"false" }, out),
            Value::Object(_) | Value::Array(_) if col.type_name == "JSON" => {
                put_bytes(tag, v.to_string().as_bytes(), out)
            }
            _ => return Err(wrong(col, prefix, "a string", v)),
        },
        ColumnType::Int64 => {
            let n = match v {
                Value::Number(n) => n.as_i64(),
                Value::String(s) => s.trim().parse::<i64>().ok(),
                _ => None,
            };
            put_varint(tag, n.ok_or_else(|| wrong(col, prefix, "a 64-bit integer", v))? as u64, out)
        }
        ColumnType::Float64 => {
            let n = match v {
                Value::Number(n) => n.as_f64(),
                Value::String(s) => s.trim().parse::<f64>().ok(),
                _ => None,
            };
            put_double(tag, n.ok_or_else(|| wrong(col, prefix, "a number", v))?, out)
        }
        ColumnType::Bool => {
            let b = match v {
                Value::Bool(b) => Some(*b),
                Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
                Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
                _ => None,
            };
            put_varint(tag, b.ok_or_else(|| wrong(col, prefix, "true or false", v))? as u64, out)
        }
        ColumnType::Bytes => {
            let bytes = match v {
                Value::String(s) => base64::engine::general_purpose::STANDARD.decode(s).ok(),
                _ => None,
            };
            put_bytes(tag, &bytes.ok_or_else(|| wrong(col, prefix, "a base64 string", v))?, out)
        }
        ColumnType::Timestamp => {
            let micros = match v {
                Value::Number(n) => n.as_i64(),
                Value::String(s) => parse_timestamp_micros(s),
                _ => None,
            };
            let m = micros.ok_or_else(|| {
                wrong(col, prefix, "epoch microseconds or a timestamp like 2024-01-31 12:00:00[.ffffff][+00:00]", v)
            })?;
            put_varint(tag, m as u64, out)
        }
        ColumnType::Date => {
            let days = match v {
                Value::String(s) => chrono::NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d")
                    .ok()
                    .map(|d| (d - chrono::NaiveDate::default()).num_days()),
                Value::Number(n) => n.as_i64().filter(|d| i32::try_from(*d).is_ok()),
                _ => None,
            };
            let d = days.ok_or_else(|| wrong(col, prefix, "a date like 2024-01-31", v))?;
            put_varint(tag, d as i32 as i64 as u64, out)
        }
        ColumnType::Record => {
            let Value::Object(obj) = v else {
                return Err(wrong(col, prefix, "an object", v));
            };
            let sub = col.fields.as_ref().expect("RECORD columns carry their fields");
            let mut inner = Vec::with_capacity(64);
            encode_object(sub, obj, &field_path(prefix, &col.name), &mut inner)?;
            put_bytes(tag, &inner, out)
        }
    }
    Ok(())
}
