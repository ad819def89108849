//! A decoded message → the JSON object the JSON path maps onto the table
//! ([`crate::kafka_to_bq::map`]), with the values BigQuery's Storage Write API takes for
//! each Protobuf type: integers as INTEGER, `float` and `double` as FLOAT, `bytes` as
//! BYTES, an enum as its value's name (STRING), a nested message as a RECORD, a repeated
//! field as REPEATED, a map as a REPEATED RECORD of `key` and `value` (sorted by key, so
//! a message always maps to the same row), `google.protobuf.Timestamp` as a TIMESTAMP
//! and the wrapper types as their value.
//!
//! A field is NULL when the message does not carry it: one with presence (proto2,
//! `optional`, a message, a oneof member) that is not set, and a proto3 scalar at its zero
//! value, which proto3 does not write. That is how BigQuery reads a proto3 row written
//! through the Storage Write API; `optional` or a wrapper type keeps a zero apart from
//! NULL.

use crate::record::RecordError;
use base64::Engine;
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MapKey, ReflectMessage, Value as PValue};
use serde_json::{Map, Number, Value};

/// The message as a JSON object of its fields.
pub fn to_json(msg: &DynamicMessage) -> Result<Map<String, Value>, RecordError> {
    let mut out = Map::new();
    for (f, v) in msg.fields() {
        if matches!(v, PValue::List(l) if l.is_empty()) || matches!(v, PValue::Map(m) if m.is_empty()) {
            continue;
        }
        out.insert(f.name().to_string(), field(&f, v)?);
    }
    Ok(out)
}

fn field(f: &FieldDescriptor, v: &PValue) -> Result<Value, RecordError> {
    match v {
        PValue::List(items) => {
            items.iter().map(|i| scalar(&f.kind(), i, f.name())).collect::<Result<_, _>>().map(Value::Array)
        }
        PValue::Map(m) => {
            let Kind::Message(entry) = f.kind() else { unreachable!("a map field's kind is its entry message") };
            let value_kind = entry.map_entry_value_field().kind();
            let mut pairs: Vec<(&MapKey, &PValue)> = m.iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(b.0));
            pairs
                .into_iter()
                .map(|(k, v)| {
                    let mut o = Map::new();
                    o.insert("key".into(), key(k));
                    o.insert("value".into(), scalar(&value_kind, v, f.name())?);
                    Ok(Value::Object(o))
                })
                .collect::<Result<_, _>>()
                .map(Value::Array)
        }
        v => scalar(&f.kind(), v, f.name()),
    }
}

fn key(k: &MapKey) -> Value {
    match k {
        MapKey::Bool(b) => Value::Bool(*b),
        MapKey::I32(n) => Value::from(*n),
        MapKey::I64(n) => Value::from(*n),
        MapKey::U32(n) => Value::from(*n),
        MapKey::U64(n) => Value::from(*n),
        MapKey::String(s) => Value::String(s.clone()),
    }
}

fn scalar(kind: &Kind, v: &PValue, name: &str) -> Result<Value, RecordError> {
    Ok(match v {
        PValue::Bool(b) => Value::Bool(*b),
        PValue::I32(n) => Value::from(*n),
        PValue::I64(n) => Value::from(*n),
        PValue::U32(n) => Value::from(*n),
        PValue::U64(n) => Value::from(*n),
        PValue::F32(x) => float(f64::from(*x), name)?,
        PValue::F64(x) => float(*x, name)?,
        PValue::String(s) => Value::String(s.clone()),
        PValue::Bytes(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        PValue::EnumNumber(n) => match kind {
            Kind::Enum(e) => Value::String(e.get_value(*n).map_or_else(|| n.to_string(), |v| v.name().to_string())),
            _ => Value::from(*n),
        },
        PValue::Message(m) => match well_known(m, name)? {
            Some(v) => v,
            None => Value::Object(to_json(m)?),
        },
        PValue::List(_) | PValue::Map(_) => {
            return Err(RecordError::Proto(format!("field {name}: a list or map where a single value belongs")))
        }
    })
}

/// A float as the JSON path reads it: a number, or for NaN and the infinities the
/// strings BigQuery's JSON names them by (`"NaN"`, `"Infinity"`, `"-Infinity"`), which
/// a FLOAT64 column takes ("FLOAT64 ... NaN, +inf, -inf" are values of the type,
/// BigQuery's data types page) and the JSON mapping reads back as the same double.
fn float(x: f64, _name: &str) -> Result<Value, RecordError> {
    Ok(match Number::from_f64(x) {
        Some(n) => Value::Number(n),
        None if x.is_nan() => Value::String("NaN".into()),
        None if x > 0.0 => Value::String("Infinity".into()),
        None => Value::String("-Infinity".into()),
    })
}

/// `google.protobuf.Timestamp` (epoch microseconds) and the wrapper types (their value).
fn well_known(m: &DynamicMessage, name: &str) -> Result<Option<Value>, RecordError> {
    let d = m.descriptor();
    let value = |field: &str| d.get_field_by_name(field).map(|f| (f.kind(), m.get_field(&f).into_owned()));
    match d.full_name() {
        "google.protobuf.Timestamp" => {
            let (seconds, nanos) = (value("seconds"), value("nanos"));
            let (Some((_, PValue::I64(s))), Some((_, PValue::I32(n)))) = (seconds, nanos) else {
                return Err(RecordError::Proto(format!("field {name}: a Timestamp without seconds and nanos")));
            };
            let micros = s.checked_mul(1_000_000).and_then(|us| us.checked_add(i64::from(n) / 1000));
            micros
                .map(|us| Some(Value::from(us)))
                .ok_or_else(|| RecordError::Proto(format!("field {name}: Timestamp {s} s is out of range")))
        }
        name if super::is_wrapper(name) => {
            let (kind, v) = value("value").expect("a wrapper has a value field");
            scalar(&kind, &v, name).map(Some)
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(proto: &str, name: &str, value: serde_json::Value) -> DynamicMessage {
        let pool = crate::proto::decoder::compile(proto).unwrap();
        DynamicMessage::deserialize(pool.get_message_by_name(name).unwrap(), value).unwrap()
    }

    #[test]
    fn maps_are_sorted_records_and_well_known_types_are_their_values() {
        let m = message(
            r#"syntax = "proto3"; import "google/protobuf/timestamp.proto"; import "google/protobuf/wrappers.proto";
            enum E { A = 0; B = 1; }
            message M { map<string, int64> m = 1; google.protobuf.Timestamp t = 2; google.protobuf.StringValue w = 3;
                        E e = 4; optional int32 o = 5; repeated bytes r = 6; float f = 7; }"#,
            "M",
            json!({"m": {"z": 1, "a": 2}, "t": "1970-01-01T00:00:01.000002Z", "w": "x", "e": "B", "r": ["AAE="], "f": 1.5}),
        );
        let j = to_json(&m).unwrap();
        assert_eq!(j["m"], json!([{"key": "a", "value": 2}, {"key": "z", "value": 1}]));
        assert_eq!((j["t"].clone(), j["w"].clone(), j["e"].clone()), (json!(1_000_002), json!("x"), json!("B")));
        assert_eq!((j["r"].clone(), j["f"].clone()), (json!(["AAE="]), json!(1.5)));
        assert!(!j.contains_key("o"), "an optional field that is not set is NULL");
    }

    /// Issue 62, item 9: NaN and the infinities are FLOAT64 values; they were
    /// dead-lettered as "a FLOAT column takes finite numbers here". They go on as the
    /// strings the JSON mapping reads as those doubles (`json_row`'s tests).
    #[test]
    fn nan_and_the_infinities_are_named_as_bigquery_names_them() {
        for v in ["NaN", "Infinity", "-Infinity"] {
            let m =
                message(r#"syntax = "proto3"; message N { double d = 1; float f = 2; }"#, "N", json!({"d": v, "f": v}));
            let j = to_json(&m).unwrap();
            assert_eq!((j["d"].clone(), j["f"].clone()), (json!(v), json!(v)));
        }
    }

    #[test]
    fn a_value_no_column_can_hold_is_named() {
        let e = message(r#"syntax = "proto3"; enum E { A = 0; } message N { E e = 1; }"#, "N", json!({"e": 7}));
        assert_eq!(to_json(&e).unwrap()["e"], json!("7"), "an enum number without a name");
    }
}
