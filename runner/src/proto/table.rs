//! A message descriptor → a BigQuery table schema, by BigQuery's mapping of Protobuf
//! types for the Storage Write API (see [`super::row`] for the values): integer types
//! INTEGER, `float`/`double` FLOAT, `bool` BOOLEAN, `string` and enums STRING, `bytes`
//! BYTES, messages RECORD, `google.protobuf.Timestamp` TIMESTAMP, the wrapper types their
//! value's type, maps REPEATED RECORD {key, value}. Repeated fields are REPEATED, proto2
//! `required` fields REQUIRED, the rest NULLABLE.

use crate::bigquery::schema::Schema;
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{json, Value};

/// BigQuery's limit on RECORD nesting.
const MAX_DEPTH: usize = 15;

/// The table a message type's rows fit.
pub fn table_schema(desc: &MessageDescriptor) -> Result<Schema, String> {
    let fields = fields(desc, 1)?;
    Schema::from_json(&Value::Array(fields)).map_err(|e| format!("{}: {e}", desc.full_name()))
}

fn fields(desc: &MessageDescriptor, depth: usize) -> Result<Vec<Value>, String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "{} nests records deeper than BigQuery's {MAX_DEPTH} levels (a recursive message?)",
            desc.full_name()
        ));
    }
    desc.fields().map(|f| column(&f, depth)).collect()
}

fn column(f: &FieldDescriptor, depth: usize) -> Result<Value, String> {
    let mode = if f.is_list() || f.is_map() {
        "REPEATED"
    } else if f.is_required() {
        "REQUIRED"
    } else {
        "NULLABLE"
    };
    let (typ, sub) = match f.kind() {
        Kind::Message(m) if f.is_map() => {
            let kv = vec![column(&m.map_entry_key_field(), depth + 1)?, column(&m.map_entry_value_field(), depth + 1)?];
            ("RECORD", Some(kv))
        }
        kind => type_of(&kind, depth)?,
    };
    let mut c = json!({"name": f.name(), "type": typ, "mode": mode});
    if let Some(sub) = sub {
        c["fields"] = Value::Array(sub);
    }
    Ok(c)
}

fn type_of(kind: &Kind, depth: usize) -> Result<(&'static str, Option<Vec<Value>>), String> {
    Ok(match kind {
        Kind::Double | Kind::Float => ("FLOAT", None),
        Kind::Int32 | Kind::Int64 | Kind::Sint32 | Kind::Sint64 | Kind::Sfixed32 | Kind::Sfixed64 => ("INTEGER", None),
        Kind::Uint32 | Kind::Fixed32 | Kind::Uint64 | Kind::Fixed64 => ("INTEGER", None),
        Kind::Bool => ("BOOLEAN", None),
        Kind::String | Kind::Enum(_) => ("STRING", None),
        Kind::Bytes => ("BYTES", None),
        Kind::Message(m) => match m.full_name() {
            "google.protobuf.Timestamp" => ("TIMESTAMP", None),
            name if super::is_wrapper(name) => {
                let value = m.get_field_by_name("value").ok_or("a wrapper has a value field")?;
                type_of(&value.kind(), depth)?
            }
            _ => ("RECORD", Some(fields(m, depth + 1)?)),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_field_becomes_its_column() {
        let pool = crate::proto::decoder::compile(
            r#"syntax = "proto3"; package t;
            import "google/protobuf/timestamp.proto"; import "google/protobuf/wrappers.proto";
            enum Color { RED = 0; BLUE = 1; }
            message Inner { string s = 1; }
            message All {
              int64 i = 1; uint32 u = 2; double d = 3; bool b = 4; string s = 5; bytes raw = 6;
              Color c = 7; Inner inner = 8; repeated string tags = 9; map<string, int64> counts = 10;
              google.protobuf.Timestamp at = 11; google.protobuf.Int64Value maybe = 12; repeated Inner many = 13;
            }"#,
        )
        .unwrap();
        let s = table_schema(&pool.get_message_by_name("t.All").unwrap()).unwrap();
        let got: Vec<(String, String, String)> = s
            .to_json()
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().into(),
                    c["type"].as_str().unwrap().into(),
                    c["mode"].as_str().unwrap().into(),
                )
            })
            .collect();
        let want = [
            ("i", "INTEGER", "NULLABLE"),
            ("u", "INTEGER", "NULLABLE"),
            ("d", "FLOAT", "NULLABLE"),
            ("b", "BOOLEAN", "NULLABLE"),
            ("s", "STRING", "NULLABLE"),
            ("raw", "BYTES", "NULLABLE"),
            ("c", "STRING", "NULLABLE"),
            ("inner", "RECORD", "NULLABLE"),
            ("tags", "STRING", "REPEATED"),
            ("counts", "RECORD", "REPEATED"),
            ("at", "TIMESTAMP", "NULLABLE"),
            ("maybe", "INTEGER", "NULLABLE"),
            ("many", "RECORD", "REPEATED"),
        ];
        assert_eq!(got, want.map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())));
        let counts = &s.to_json()[9]["fields"];
        assert_eq!(counts[0]["name"], "key");
        assert_eq!(counts[1]["type"], "INTEGER");
        let rec = crate::proto::decoder::compile(r#"syntax = "proto3"; message R { R next = 1; }"#).unwrap();
        assert!(table_schema(&rec.get_message_by_name("R").unwrap()).unwrap_err().contains("15 levels"));
    }
}
