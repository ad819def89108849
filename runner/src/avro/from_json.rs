//! A JSON document → an Avro value of a given schema (the generator's `outputType=AVRO`).
//!
//! Google's streaming-data-generator renders its JSON template, then converts the JSON
//! to a record of `avroSchemaLocation`. The same here: object keys become fields (a
//! missing field takes its default, or null when nullable), strings become enums by
//! symbol, `"2024-01-31"` becomes a date, numbers or timestamp strings become
//! timestamps, numbers or numeric strings become decimals at the schema's scale.
//!
//! ```
//! use flexrun::avro::{from_json::to_avro, WriterSchema};
//! let w = WriterSchema::parse(r#"{"type":"record","name":"R","fields":[{"name":"n","type":"int"}]}"#).unwrap();
//! let v = to_avro(&w, &serde_json::json!({"n": 3})).unwrap();
//! assert_eq!(v, apache_avro::types::Value::Record(vec![("n".into(), apache_avro::types::Value::Int(3))]));
//! ```

use super::WriterSchema;
use crate::record::parse_timestamp_micros;
use apache_avro::schema::Schema;
use apache_avro::types::Value;
use serde_json::Value as Json;

/// Convert `doc` into a value of `w`'s schema; errors name the field.
pub fn to_avro(w: &WriterSchema, doc: &Json) -> Result<Value, String> {
    convert(w, &w.schema, doc, "")
}

fn at(path: &str) -> String {
    if path.is_empty() {
        "the document".into()
    } else {
        format!("field {path}")
    }
}

fn convert(w: &WriterSchema, s: &Schema, v: &Json, path: &str) -> Result<Value, String> {
    let s = w.resolve(s);
    let bad = |want: &str| format!("{}: expected {want}, found {v}", at(path));
    Ok(match (s, v) {
        (Schema::Union(u), _) => return union(w, u, v, path),
        (Schema::Null, Json::Null) => Value::Null,
        (Schema::Boolean, Json::Bool(b)) => Value::Boolean(*b),
        (Schema::Int, Json::Number(n)) => {
            Value::Int(n.as_i64().and_then(|i| i32::try_from(i).ok()).ok_or_else(|| bad("a 32-bit integer"))?)
        }
        (Schema::Long, Json::Number(n)) => Value::Long(n.as_i64().ok_or_else(|| bad("a 64-bit integer"))?),
        (Schema::Float, Json::Number(n)) => Value::Float(n.as_f64().ok_or_else(|| bad("a number"))? as f32),
        (Schema::Double, Json::Number(n)) => Value::Double(n.as_f64().ok_or_else(|| bad("a number"))?),
        (Schema::String, Json::String(x)) => Value::String(x.clone()),
        (Schema::String, Json::Number(_) | Json::Bool(_)) => Value::String(v.to_string()),
        (Schema::Bytes, Json::String(x)) => Value::Bytes(x.as_bytes().to_vec()),
        (Schema::Uuid, Json::String(x)) => {
            Value::Uuid(apache_avro::Uuid::parse_str(x).map_err(|_| bad("a UUID string"))?)
        }
        (Schema::Fixed(f), Json::String(x)) if x.len() == f.size => Value::Fixed(f.size, x.as_bytes().to_vec()),
        (Schema::Enum(e), Json::String(x)) => {
            let i = e.symbols.iter().position(|s| s == x).ok_or_else(|| bad(&format!("one of {:?}", e.symbols)))?;
            Value::Enum(i as u32, x.clone())
        }
        (Schema::Array(a), Json::Array(items)) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, x)| convert(w, &a.items, x, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        (Schema::Map(m), Json::Object(o)) => Value::Map(
            o.iter()
                .map(|(k, x)| Ok((k.clone(), convert(w, &m.types, x, &format!("{path}.{k}"))?)))
                .collect::<Result<_, String>>()?,
        ),
        (Schema::Record(r), Json::Object(o)) => record(w, r, o, path)?,
        (Schema::Date, Json::String(x)) => {
            let d = chrono::NaiveDate::parse_from_str(x, "%Y-%m-%d").map_err(|_| bad("a date like 2024-01-31"))?;
            Value::Date((d - chrono::NaiveDate::default()).num_days() as i32)
        }
        (Schema::Date, Json::Number(n)) => Value::Date(n.as_i64().ok_or_else(|| bad("days since 1970"))? as i32),
        (Schema::TimeMillis, Json::Number(n)) => {
            Value::TimeMillis(n.as_i64().ok_or_else(|| bad("milliseconds"))? as i32)
        }
        (Schema::TimeMicros, Json::Number(n)) => Value::TimeMicros(n.as_i64().ok_or_else(|| bad("microseconds"))?),
        (
            Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros,
            _,
        ) => timestamp(s, v).ok_or_else(|| bad("a timestamp"))?,
        (Schema::Decimal(d), Json::Number(_) | Json::String(_)) => {
            let text = match v {
                Json::String(x) => x.clone(),
                other => other.to_string(),
            };
            let unscaled =
                unscaled(&text, d.scale).ok_or_else(|| bad(&format!("a decimal with at most {} decimals", d.scale)))?;
            Value::Decimal(apache_avro::Decimal::from(unscaled.to_signed_bytes_be()))
        }
        _ => return Err(bad(&format!("a value of Avro type {:?}", apache_avro::schema::SchemaKind::from(s)))),
    })
}

/// The first branch of union `u` that `v` converts to (null only for JSON null).
fn union(w: &WriterSchema, u: &apache_avro::schema::UnionSchema, v: &Json, path: &str) -> Result<Value, String> {
    let mut last = None;
    for (i, branch) in u.variants().iter().enumerate() {
        match (branch, v) {
            (Schema::Null, Json::Null) => return Ok(Value::Union(i as u32, Box::new(Value::Null))),
            (Schema::Null, _) => continue,
            _ => match convert(w, branch, v, path) {
                Ok(x) => return Ok(Value::Union(i as u32, Box::new(x))),
                Err(e) => last = Some(e),
            },
        }
    }
    Err(last.unwrap_or_else(|| format!("{}: expected a value of the union, found {v}", at(path))))
}

/// Record `r`'s fields from object `o`: a missing field takes its default, or null if
/// it is nullable.
fn record(
    w: &WriterSchema,
    r: &apache_avro::schema::RecordSchema,
    o: &serde_json::Map<String, Json>,
    path: &str,
) -> Result<Value, String> {
    let mut fields = Vec::with_capacity(r.fields.len());
    for f in &r.fields {
        let p = if path.is_empty() { f.name.clone() } else { format!("{path}.{}", f.name) };
        let x = match (o.get(&f.name), &f.default) {
            (Some(x), _) => convert(w, &f.schema, x, &p)?,
            (None, Some(d)) => convert(w, &f.schema, d, &p)?,
            (None, None) => convert(w, &f.schema, &Json::Null, &p)
                .map_err(|_| format!("{}: missing, and it has no default and is not nullable", at(&p)))?,
        };
        fields.push((f.name.clone(), x));
    }
    Ok(Value::Record(fields))
}

/// A timestamp of logical type `s` from an RFC 3339 string or a number in the type's
/// own unit.
fn timestamp(s: &Schema, v: &Json) -> Option<Value> {
    let millis = matches!(s, Schema::TimestampMillis | Schema::LocalTimestampMillis);
    let micros = match v {
        Json::String(x) => parse_timestamp_micros(x),
        Json::Number(n) => n.as_i64().map(|n| if millis { n * 1000 } else { n }),
        _ => None,
    }?;
    Some(match s {
        Schema::TimestampMillis => Value::TimestampMillis(micros.div_euclid(1000)),
        Schema::TimestampMicros => Value::TimestampMicros(micros),
        Schema::LocalTimestampMillis => Value::LocalTimestampMillis(micros.div_euclid(1000)),
        _ => Value::LocalTimestampMicros(micros),
    })
}

/// `"12.3"` at scale 2 → 1230; None when it has more decimals than the scale.
fn unscaled(text: &str, scale: usize) -> Option<num_bigint::BigInt> {
    let t = text.trim();
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    if frac.len() > scale || !frac.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    format!("{int}{frac:0<scale$}").parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_become_records_with_defaults_nulls_and_logical_types() {
        let w = WriterSchema::parse(
            r#"{"type":"record","name":"R","fields":[
            {"name":"id","type":"long"},
            {"name":"level","type":{"type":"enum","name":"L","symbols":["LOW","HIGH"]}},
            {"name":"note","type":["null","string"]},
            {"name":"n","type":"int","default":4},
            {"name":"day","type":{"type":"int","logicalType":"date"}},
            {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
            {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}}]}"#,
        )
        .unwrap();
        let v = to_avro(
            &w,
            &json!({"id": 1, "level": "HIGH", "day": "1970-01-11", "at": "1970-01-01 00:00:01.5", "price": "-1.5"}),
        )
        .unwrap();
        let Value::Record(f) = v else { panic!() };
        assert_eq!(f[1].1, Value::Enum(1, "HIGH".into()));
        assert_eq!(f[2].1, Value::Union(0, Box::new(Value::Null)));
        assert_eq!(f[3].1, Value::Int(4));
        assert_eq!(f[4].1, Value::Date(10));
        assert_eq!(f[5].1, Value::TimestampMillis(1500));
        assert_eq!(f[6].1, Value::Decimal(apache_avro::Decimal::from(vec![0xff, 0x6a])));
        let e = to_avro(&w, &json!({"id": 1, "level": "MID", "day": 1, "at": 0, "price": 1})).unwrap_err();
        assert!(e.contains("field level") && e.contains("HIGH"), "{e}");
        let e = to_avro(&w, &json!({"level": "LOW"})).unwrap_err();
        assert!(e.contains("field id: missing"), "{e}");
    }
}
