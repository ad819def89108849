//! Parquet files of decoded Avro records (`outputFileFormat=PARQUET`), one per writer
//! schema and shard, as Google's older Kafka_to_GCS template wrote them with Beam's
//! ParquetIO: the Parquet schema comes from the Avro schema, Snappy pages, one row
//! group per file.
//!
//! Flat records only: each field a primitive, an enum, a date, time or timestamp, or a
//! union of one of those with null (an optional column). A schema with a nested record,
//! an array, a map, a fixed or a decimal is refused, naming the field.
//!
//! ```
//! use flexrun::kafka_to_gcs::parquet::columns;
//! let s = apache_avro::Schema::parse_str(
//!     r#"{"type":"record","name":"U","fields":[{"name":"id","type":"long"},{"name":"n","type":["null","string"]}]}"#,
//! ).unwrap();
//! let cols = columns(&s).unwrap();
//! assert_eq!(flexrun::kafka_to_gcs::parquet::message_type("U", &cols),
//!     "message U { REQUIRED INT64 id; OPTIONAL BINARY n (UTF8); }");
//! ```

use apache_avro::schema::Schema;
use apache_avro::types::Value;
use parquet::basic::Compression;
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, FloatType, Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use std::sync::Arc;

/// A column's physical type and annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// BOOLEAN.
    Bool,
    /// INT32, with an optional annotation (DATE, TIME_MILLIS).
    Int32(Option<&'static str>),
    /// INT64, with an optional annotation (TIMESTAMP_MILLIS, ...).
    Int64(Option<&'static str>),
    /// FLOAT.
    Float,
    /// DOUBLE.
    Double,
    /// BINARY, with an optional annotation (UTF8, ENUM).
    Binary(Option<&'static str>),
}

/// One column: an Avro field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The field's name.
    pub name: String,
    /// Its type.
    pub kind: Kind,
    /// A union with null.
    pub optional: bool,
}

fn kind(s: &Schema) -> Option<Kind> {
    Some(match s {
        Schema::Boolean => Kind::Bool,
        Schema::Int => Kind::Int32(None),
        Schema::Date => Kind::Int32(Some("DATE")),
        Schema::TimeMillis => Kind::Int32(Some("TIME_MILLIS")),
        Schema::Long => Kind::Int64(None),
        Schema::TimeMicros => Kind::Int64(Some("TIME_MICROS")),
        Schema::TimestampMillis | Schema::LocalTimestampMillis => Kind::Int64(Some("TIMESTAMP_MILLIS")),
        Schema::TimestampMicros | Schema::LocalTimestampMicros => Kind::Int64(Some("TIMESTAMP_MICROS")),
        Schema::Float => Kind::Float,
        Schema::Double => Kind::Double,
        Schema::String | Schema::Uuid => Kind::Binary(Some("UTF8")),
        Schema::Enum(_) => Kind::Binary(Some("ENUM")),
        Schema::Bytes => Kind::Binary(None),
        _ => return None,
    })
}

/// This build writes Parquet (the `parquet` cargo feature; a build without it refuses
/// `outputFileFormat=PARQUET` at launch).
pub fn available() -> Result<(), String> {
    Ok(())
}

/// The columns of a flat record schema, or which field cannot be one.
pub fn columns(schema: &Schema) -> Result<Vec<Column>, String> {
    let Schema::Record(r) = schema else { return Err("the schema is not a record".into()) };
    r.fields
        .iter()
        .map(|f| {
            let (inner, optional) = match &f.schema {
                Schema::Union(u) if u.variants().len() == 2 && u.variants().contains(&Schema::Null) => {
                    (u.variants().iter().find(|v| **v != Schema::Null).expect("two variants"), true)
                }
                other => (other, false),
            };
            let kind = kind(inner).ok_or_else(|| {
                format!(
                    "field {:?} of record {}: an Avro {:?} has no flat Parquet column (flexrun writes records of primitives, enums, dates and timestamps, each optionally nullable)",
                    f.name,
                    r.name.name,
                    apache_avro::schema::SchemaKind::from(inner)
                )
            })?;
            Ok(Column { name: f.name.clone(), kind, optional })
        })
        .collect()
}

/// The Parquet message type of `cols`, named `name`.
pub fn message_type(name: &str, cols: &[Column]) -> String {
    let fields: Vec<String> = cols
        .iter()
        .map(|c| {
            let (physical, note) = match c.kind {
                Kind::Bool => ("BOOLEAN", None),
                Kind::Int32(n) => ("INT32", n),
                Kind::Int64(n) => ("INT64", n),
                Kind::Float => ("FLOAT", None),
                Kind::Double => ("DOUBLE", None),
                Kind::Binary(n) => ("BINARY", n),
            };
            let rep = if c.optional { "OPTIONAL" } else { "REQUIRED" };
            match note {
                Some(n) => format!("{rep} {physical} {} ({n});", c.name),
                None => format!("{rep} {physical} {};", c.name),
            }
        })
        .collect();
    format!("message {name} {{ {} }}", fields.join(" "))
}

/// A field's value with its union unwrapped; `None` for null.
fn field(v: &Value) -> Option<&Value> {
    match v {
        Value::Null => None,
        Value::Union(_, inner) => field(inner),
        other => Some(other),
    }
}

/// One column's values and definition levels.
struct Values<T> {
    values: Vec<T>,
    defs: Vec<i16>,
}

fn gather<T>(
    rows: &[&[(String, Value)]],
    i: usize,
    c: &Column,
    pick: impl Fn(&Value) -> Option<T>,
) -> Result<Values<T>, String> {
    let mut out = Values { values: Vec::with_capacity(rows.len()), defs: Vec::with_capacity(rows.len()) };
    for r in rows {
        match r.get(i).and_then(|(_, v)| field(v)) {
            Some(v) => {
                out.values.push(
                    pick(v).ok_or_else(|| format!("field {:?}: a value {v:?} that is not a {:?}", c.name, c.kind))?,
                );
                out.defs.push(1);
            }
            None if c.optional => out.defs.push(0),
            None => return Err(format!("field {:?} is required but a record has no value", c.name)),
        }
    }
    Ok(out)
}

fn binary(v: &Value) -> Option<ByteArray> {
    Some(ByteArray::from(match v {
        Value::String(s) => s.clone().into_bytes(),
        Value::Enum(_, s) => s.clone().into_bytes(),
        Value::Uuid(u) => u.to_string().into_bytes(),
        Value::Bytes(b) => b.clone(),
        _ => return None,
    }))
}

/// The bytes of one Parquet file holding `values` (records of `schema`).
pub fn write(schema: &Schema, values: &[Value]) -> Result<Vec<u8>, String> {
    let cols = columns(schema)?;
    let name = match schema {
        Schema::Record(r) => r.name.name.clone(),
        _ => "record".into(),
    };
    let pq = |e: parquet::errors::ParquetError| format!("writing Parquet: {e}");
    let ty = Arc::new(parquet::schema::parser::parse_message_type(&message_type(&name, &cols)).map_err(pq)?);
    let props = Arc::new(WriterProperties::builder().set_compression(Compression::SNAPPY).build());
    let rows: Vec<&[(String, Value)]> = values
        .iter()
        .map(|v| match v {
            Value::Record(f) => Ok(f.as_slice()),
            other => Err(format!("a value that is not a record: {other:?}")),
        })
        .collect::<Result<_, _>>()?;
    let mut w = SerializedFileWriter::new(Vec::new(), ty, props).map_err(pq)?;
    let mut rg = w.next_row_group().map_err(pq)?;
    for (i, c) in cols.iter().enumerate() {
        let mut col = rg.next_column().map_err(pq)?.ok_or("fewer Parquet columns than fields")?;
        let defs = |v: &Vec<i16>| if c.optional { Some(v.clone()) } else { None };
        match c.kind {
            Kind::Bool => {
                let v = gather(&rows, i, c, |v| if let Value::Boolean(b) = v { Some(*b) } else { None })?;
                col.typed::<BoolType>().write_batch(&v.values, defs(&v.defs).as_deref(), None).map_err(pq)?;
            }
            Kind::Int32(_) => {
                let v = gather(&rows, i, c, |v| match v {
                    Value::Int(x) | Value::Date(x) | Value::TimeMillis(x) => Some(*x),
                    _ => None,
                })?;
                col.typed::<Int32Type>().write_batch(&v.values, defs(&v.defs).as_deref(), None).map_err(pq)?;
            }
            Kind::Int64(_) => {
                let v = gather(&rows, i, c, |v| match v {
                    Value::Long(x)
                    | Value::TimeMicros(x)
                    | Value::TimestampMillis(x)
                    | Value::TimestampMicros(x)
                    | Value::LocalTimestampMillis(x)
                    | Value::LocalTimestampMicros(x) => Some(*x),
                    _ => None,
                })?;
                col.typed::<Int64Type>().write_batch(&v.values, defs(&v.defs).as_deref(), None).map_err(pq)?;
            }
            Kind::Float => {
                let v = gather(&rows, i, c, |v| if let Value::Float(x) = v { Some(*x) } else { None })?;
                col.typed::<FloatType>().write_batch(&v.values, defs(&v.defs).as_deref(), None).map_err(pq)?;
            }
            Kind::Double => {
                let v = gather(&rows, i, c, |v| if let Value::Double(x) = v { Some(*x) } else { None })?;
                col.typed::<DoubleType>().write_batch(&v.values, defs(&v.defs).as_deref(), None).map_err(pq)?;
            }
            Kind::Binary(_) => {
                let v = gather(&rows, i, c, binary)?;
                col.typed::<ByteArrayType>().write_batch(&v.values, defs(&v.defs).as_deref(), None).map_err(pq)?;
            }
        }
        col.close().map_err(pq)?;
    }
    rg.close().map_err(pq)?;
    w.into_inner().map_err(pq)
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    const SCHEMA: &str = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},{"name":"ok","type":"boolean"},{"name":"qty","type":"int"},
        {"name":"price","type":"double"},{"name":"w","type":"float"},{"name":"who","type":["null","string"]},
        {"name":"raw","type":"bytes"},{"name":"state","type":{"type":"enum","name":"S","symbols":["NEW","PAID"]}},
        {"name":"day","type":{"type":"int","logicalType":"date"}},
        {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}}]}"#;

    #[test]
    fn records_round_trip_through_a_parquet_file() {
        let s = Schema::parse_str(SCHEMA).unwrap();
        let rec = |i: i64| {
            let who = if i % 2 == 0 {
                Value::Union(1, Box::new(Value::String(format!("u{i}"))))
            } else {
                Value::Union(0, Box::new(Value::Null))
            };
            Value::Record(vec![
                ("id".into(), Value::Long(i)),
                ("ok".into(), Value::Boolean(i % 3 == 0)),
                ("qty".into(), Value::Int(i as i32 * 2)),
                ("price".into(), Value::Double(i as f64 / 4.0)),
                ("w".into(), Value::Float(1.5)),
                ("who".into(), who),
                ("raw".into(), Value::Bytes(vec![i as u8])),
                ("state".into(), Value::Enum(1, "PAID".into())),
                ("day".into(), Value::Date(19_000)),
                ("at".into(), Value::TimestampMicros(1_700_000_000_000_000 + i)),
            ])
        };
        let bytes = write(&s, &(0..10).map(rec).collect::<Vec<_>>()).unwrap();
        let r = SerializedFileReader::new(bytes::Bytes::from(bytes)).unwrap();
        assert_eq!(r.metadata().file_metadata().num_rows(), 10);
        let rows: Vec<_> = r.get_row_iter(None).unwrap().map(|r| r.unwrap()).collect();
        use parquet::record::RowAccessor;
        assert_eq!(rows[3].get_long(0).unwrap(), 3);
        assert_eq!(rows[4].get_string(5).unwrap(), "u4");
        assert!(rows[3].get_string(5).is_err(), "null for an odd id");
        assert_eq!(rows[9].get_double(3).unwrap(), 2.25);
    }

    #[test]
    fn nested_and_repeated_fields_are_refused_by_name() {
        for (t, what) in [(r#"{"type":"array","items":"int"}"#, "Array"), (r#"{"type":"map","values":"int"}"#, "Map")] {
            let s =
                Schema::parse_str(&format!(r#"{{"type":"record","name":"R","fields":[{{"name":"xs","type":{t}}}]}}"#))
                    .unwrap();
            let e = columns(&s).unwrap_err();
            assert!(e.contains("\"xs\"") && e.contains(what), "{e}");
        }
        assert!(columns(&Schema::Long).is_err());
    }
}
