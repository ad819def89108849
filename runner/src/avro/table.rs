//! The BigQuery table an Avro schema becomes, and the table name Google gives it.
//!
//! Google's template builds the table schema as Beam does (`AvroUtils.toBeamSchema`
//! then `BigQueryUtils.toTableSchema`). For the common types the result here is the
//! same: int/long → INTEGER, float/double → FLOAT, boolean → BOOLEAN, string, uuid and
//! enum → STRING, bytes → BYTES, record → RECORD, array → REPEATED, `["null", T]` →
//! NULLABLE T, and a non-null type → REQUIRED. Where Beam's mapping loses the logical
//! type or fails at run time (Beam makes `date` a TIMESTAMP whose values then fail,
//! reads `timestamp-millis` as micros, turns `timestamp-micros` and `time-*` into
//! INTEGER, and cannot write maps, fixed or decimal-in-fixed), flexrun maps to the
//! BigQuery type the logical type names, as docs/parity.md's Avro table states:
//! date → DATE, time-* → TIME, timestamp-* → TIMESTAMP, local-timestamp-* → DATETIME,
//! decimal → NUMERIC (BIGNUMERIC when precision or scale exceed NUMERIC's 38/9),
//! fixed → BYTES, and map<V> → REPEATED RECORD {key STRING REQUIRED, value V}.
//!
//! ```
//! use flexrun::avro::{table::table_schema, WriterSchema};
//! let w = WriterSchema::parse(r#"{"type":"record","name":"R","fields":[
//!     {"name":"id","type":"long"},
//!     {"name":"note","type":["null","string"]}]}"#).unwrap();
//! let s = table_schema(&w, true).unwrap();
//! let cols: Vec<_> = s.columns.iter().map(|c| (c.name.as_str(), c.type_name.as_str())).collect();
//! assert_eq!(cols, [("id", "INTEGER"), ("note", "STRING"), ("_key", "BYTES")]);
//! ```

use super::{AvroSchemaError, WriterSchema};
use crate::bigquery::schema::Schema as BqSchema;
use apache_avro::schema::Schema;
use serde_json::{json, Value};

/// The column Google's template writes the Kafka key to (`BigQueryConstants.KAFKA_KEY_FIELD`).
pub const KAFKA_KEY_FIELD: &str = "_key";

/// NUMERIC holds precision 38 with scale 9; anything wider is a BIGNUMERIC.
fn decimal_type(precision: usize, scale: usize) -> &'static str {
    if precision <= 38 && scale <= 9 && precision - scale <= 29 {
        "NUMERIC"
    } else {
        "BIGNUMERIC"
    }
}

/// The BigQuery table schema for records of `w` (plus `_key BYTES` last when `with_key`,
/// as `BigQueryAvroUtils.convertAvroSchemaToTableSchema` adds it).
pub fn table_schema(w: &WriterSchema, with_key: bool) -> Result<BqSchema, AvroSchemaError> {
    let Schema::Record(r) = &w.schema else {
        return Err(AvroSchemaError("the Avro schema must be a record (each message becomes one row)".into()));
    };
    let mut fields = Vec::with_capacity(r.fields.len() + 1);
    for f in &r.fields {
        fields.push(field(w, &f.name, &f.schema, 0)?);
    }
    if with_key {
        fields.push(json!({"name": KAFKA_KEY_FIELD, "type": "BYTES", "mode": "NULLABLE"}));
    }
    BqSchema::from_json(&Value::Array(fields)).map_err(|e| AvroSchemaError(e.to_string()))
}

/// The columns of `w`'s table (dotted paths, with their type) that take the BigQuery
/// type of an Avro logical type Google's template maps otherwise (see the module
/// docs): DATE, TIME, TIMESTAMP and DATETIME. A table flexrun created has these where
/// Google's template would write TIMESTAMP or INTEGER values, so `flexrun export`
/// names them.
///
/// ```
/// use flexrun::avro::{table::google_mapping_differences, WriterSchema};
/// let w = WriterSchema::parse(r#"{"type":"record","name":"R","fields":[
///     {"name":"id","type":"long"},
///     {"name":"day","type":{"type":"int","logicalType":"date"}},
///     {"name":"at","type":{"type":"record","name":"A","fields":[
///         {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}}]}"#).unwrap();
/// assert_eq!(google_mapping_differences(&w).unwrap(), ["day (DATE)", "at.ts (TIMESTAMP)"]);
/// ```
pub fn google_mapping_differences(w: &WriterSchema) -> Result<Vec<String>, AvroSchemaError> {
    fn walk(s: &BqSchema, prefix: &str, out: &mut Vec<String>) {
        for c in &s.columns {
            let path = format!("{prefix}{}", c.name);
            match (&c.fields, c.type_name.as_str()) {
                (Some(f), _) => walk(f, &format!("{path}."), out),
                (None, t @ ("DATE" | "TIME" | "TIMESTAMP" | "DATETIME")) => out.push(format!("{path} ({t})")),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(&table_schema(w, false)?, "", &mut out);
    Ok(out)
}

/// One column for a field of schema `s`.
fn field(w: &WriterSchema, name: &str, s: &Schema, depth: usize) -> Result<Value, AvroSchemaError> {
    if depth > 15 {
        return Err(AvroSchemaError(format!(
            "field {name}: records nest more than 15 levels deep, BigQuery's limit (a recursive schema?)"
        )));
    }
    let s = w.resolve(s);
    let (inner, mode) = match s {
        Schema::Union(u) => {
            let non_null: Vec<&Schema> = u.variants().iter().filter(|v| !matches!(v, Schema::Null)).collect();
            match non_null.as_slice() {
                [one] => (*one, "NULLABLE"),
                _ => return Err(AvroSchemaError(format!(
                    "field {name}: a union of {} non-null types has no BigQuery column type (only [\"null\", T] maps, to a NULLABLE T)",
                    non_null.len()
                ))),
            }
        }
        other => (other, "REQUIRED"),
    };
    let inner = w.resolve(inner);
    match inner {
        // A nullable array is still REPEATED: BigQuery has no null arrays (null → empty).
        Schema::Array(a) => element(w, name, &a.items, depth),
        Schema::Map(m) => {
            let value = field(w, "value", &m.types, depth + 1)?;
            Ok(json!({"name": name, "type": "RECORD", "mode": "REPEATED", "fields": [
                {"name": "key", "type": "STRING", "mode": "REQUIRED"}, value]}))
        }
        other => {
            let mut col = scalar(w, name, other, depth)?;
            col["mode"] = json!(mode);
            Ok(col)
        }
    }
}

/// A REPEATED column for array items of schema `items`.
fn element(w: &WriterSchema, name: &str, items: &Schema, depth: usize) -> Result<Value, AvroSchemaError> {
    match w.resolve(items) {
        Schema::Array(_) | Schema::Map(_) => Err(AvroSchemaError(format!(
            "field {name}: an array of arrays or maps has no BigQuery column type (wrap the inner one in a record)"
        ))),
        Schema::Union(u) if u.is_nullable() => Err(AvroSchemaError(format!(
            "field {name}: an array of nullable items has no BigQuery column type (BigQuery arrays cannot hold NULL)"
        ))),
        other => {
            let mut col = scalar(w, name, other, depth)?;
            col["mode"] = json!("REPEATED");
            Ok(col)
        }
    }
}

/// The column type of a non-union, non-array, non-map schema.
fn scalar(w: &WriterSchema, name: &str, s: &Schema, depth: usize) -> Result<Value, AvroSchemaError> {
    let typ = match s {
        Schema::Boolean => "BOOLEAN",
        Schema::Int | Schema::Long => "INTEGER",
        Schema::Float | Schema::Double => "FLOAT",
        Schema::String | Schema::Uuid | Schema::Enum(_) => "STRING",
        Schema::Bytes | Schema::Fixed(_) => "BYTES",
        Schema::Decimal(d) => decimal_type(d.precision, d.scale),
        Schema::BigDecimal => "BIGNUMERIC",
        Schema::Date => "DATE",
        Schema::TimeMillis | Schema::TimeMicros => "TIME",
        Schema::TimestampMillis | Schema::TimestampMicros | Schema::TimestampNanos => "TIMESTAMP",
        Schema::LocalTimestampMillis | Schema::LocalTimestampMicros | Schema::LocalTimestampNanos => "DATETIME",
        Schema::Record(r) => {
            let mut fields = Vec::with_capacity(r.fields.len());
            for f in &r.fields {
                fields.push(field(w, &f.name, &f.schema, depth + 1)?);
            }
            return Ok(json!({"name": name, "type": "RECORD", "fields": fields}));
        }
        Schema::Null => {
            return Err(AvroSchemaError(format!("field {name}: a field that is always null has no column type")))
        }
        Schema::Duration => {
            return Err(AvroSchemaError(format!("field {name}: the duration logical type has no BigQuery column type")))
        }
        other => return Err(AvroSchemaError(format!("field {name}: Avro type {other:?} has no BigQuery column type"))),
    };
    Ok(json!({"name": name, "type": typ}))
}

/// Google's `BigQueryAvroUtils.sanitizeString`: each run of characters other than word
/// characters, `-` and space becomes one `-`.
pub fn sanitize(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut in_run = false;
    for c in value.chars() {
        if c.is_alphanumeric() || c == '_' || c == '-' || c == ' ' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    out
}

/// The table Google's `BigQueryDynamicDestination.getTable` picks for a record named
/// `namespace.name`: `[prefix-][namespace-]name`, each part sanitised except the prefix.
pub fn dynamic_table_name(prefix: &str, namespace: Option<&str>, name: &str) -> String {
    let ns = sanitize(namespace.unwrap_or(""));
    let full = if ns.trim().is_empty() { sanitize(name) } else { format!("{ns}-{}", sanitize(name)) };
    if prefix.trim().is_empty() {
        full
    } else {
        format!("{prefix}-{full}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(schema: &str, key: bool) -> Value {
        table_schema(&WriterSchema::parse(schema).unwrap(), key).unwrap().to_json()
    }

    #[test]
    fn every_rule_of_the_mapping() {
        let s = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
            {"name":"b","type":"boolean"}, {"name":"i","type":"int"}, {"name":"l","type":"long"},
            {"name":"f","type":"float"}, {"name":"d","type":"double"}, {"name":"s","type":"string"},
            {"name":"by","type":"bytes"}, {"name":"fx","type":{"type":"fixed","name":"F4","size":4}},
            {"name":"e","type":{"type":"enum","name":"Level","symbols":["LOW","HIGH"]}},
            {"name":"u","type":{"type":"string","logicalType":"uuid"}},
            {"name":"day","type":{"type":"int","logicalType":"date"}},
            {"name":"tm","type":{"type":"int","logicalType":"time-millis"}},
            {"name":"tu","type":{"type":"long","logicalType":"time-micros"}},
            {"name":"tsm","type":{"type":"long","logicalType":"timestamp-millis"}},
            {"name":"tsu","type":{"type":"long","logicalType":"timestamp-micros"}},
            {"name":"lts","type":{"type":"long","logicalType":"local-timestamp-micros"}},
            {"name":"n","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
            {"name":"bn","type":{"type":"bytes","logicalType":"decimal","precision":50,"scale":20}},
            {"name":"opt","type":["null","long"]}, {"name":"opt2","type":["string","null"]},
            {"name":"tags","type":{"type":"array","items":"string"}},
            {"name":"maybe_tags","type":["null",{"type":"array","items":"long"}]},
            {"name":"attrs","type":{"type":"map","values":"double"}},
            {"name":"addr","type":{"type":"record","name":"Addr","fields":[{"name":"city","type":"string"}]}},
            {"name":"prev","type":["null","Addr"]}
        ]}"#;
        let got = cols(s, false);
        let want = json!([
            {"name":"b","type":"BOOLEAN","mode":"REQUIRED"}, {"name":"i","type":"INTEGER","mode":"REQUIRED"},
            {"name":"l","type":"INTEGER","mode":"REQUIRED"}, {"name":"f","type":"FLOAT","mode":"REQUIRED"},
            {"name":"d","type":"FLOAT","mode":"REQUIRED"}, {"name":"s","type":"STRING","mode":"REQUIRED"},
            {"name":"by","type":"BYTES","mode":"REQUIRED"}, {"name":"fx","type":"BYTES","mode":"REQUIRED"},
            {"name":"e","type":"STRING","mode":"REQUIRED"}, {"name":"u","type":"STRING","mode":"REQUIRED"},
            {"name":"day","type":"DATE","mode":"REQUIRED"}, {"name":"tm","type":"TIME","mode":"REQUIRED"},
            {"name":"tu","type":"TIME","mode":"REQUIRED"}, {"name":"tsm","type":"TIMESTAMP","mode":"REQUIRED"},
            {"name":"tsu","type":"TIMESTAMP","mode":"REQUIRED"}, {"name":"lts","type":"DATETIME","mode":"REQUIRED"},
            {"name":"n","type":"NUMERIC","mode":"REQUIRED"}, {"name":"bn","type":"BIGNUMERIC","mode":"REQUIRED"},
            {"name":"opt","type":"INTEGER","mode":"NULLABLE"}, {"name":"opt2","type":"STRING","mode":"NULLABLE"},
            {"name":"tags","type":"STRING","mode":"REPEATED"}, {"name":"maybe_tags","type":"INTEGER","mode":"REPEATED"},
            {"name":"attrs","type":"RECORD","mode":"REPEATED","fields":[
                {"name":"key","type":"STRING","mode":"REQUIRED"}, {"name":"value","type":"FLOAT","mode":"REQUIRED"}]},
            {"name":"addr","type":"RECORD","mode":"REQUIRED","fields":[{"name":"city","type":"STRING","mode":"REQUIRED"}]},
            {"name":"prev","type":"RECORD","mode":"NULLABLE","fields":[{"name":"city","type":"STRING","mode":"REQUIRED"}]}
        ]);
        assert_eq!(got, want);
    }

    #[test]
    fn the_key_column_comes_last_and_unmappable_schemas_say_why() {
        let got = cols(r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}"#, true);
        assert_eq!(got[1], json!({"name":"_key","type":"BYTES","mode":"NULLABLE"}));
        let err = |s: &str| table_schema(&WriterSchema::parse(s).unwrap(), false).unwrap_err().0;
        assert!(err(r#""string""#).contains("must be a record"));
        assert!(err(r#"{"type":"record","name":"R","fields":[{"name":"x","type":["int","string"]}]}"#)
            .contains("union of 2 non-null types"));
        assert!(err(
            r#"{"type":"record","name":"R","fields":[{"name":"x","type":{"type":"array","items":["null","int"]}}]}"#
        )
        .contains("cannot hold NULL"));
    }

    #[test]
    fn dynamic_names_follow_googles_sanitiser() {
        assert_eq!(
            dynamic_table_name("raw", Some("org.example.avro"), "AvroProductKafkaRecord"),
            "raw-org-example-avro-AvroProductKafkaRecord"
        );
        assert_eq!(dynamic_table_name("", Some("a.b"), "C"), "a-b-C");
        assert_eq!(dynamic_table_name("", None, "C"), "C");
        assert_eq!(sanitize("a..b$c d-e_f"), "a-b-c d-e_f");
    }
}
