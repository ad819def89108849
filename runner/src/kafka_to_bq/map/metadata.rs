//! Kafka metadata as columns (`kafkaMetadataColumns`, flexrun's extension): the
//! record's topic, partition, offset, timestamp, headers and key, each optional, each
//! under a column name of the user's choice.
//!
//! A pure step after the value's own mapping: [`MetaPlan::encode`] appends the chosen
//! fields to the row's protobuf bytes. Every field is fixed by the record's position
//! in the log, so a replayed batch maps to the very same rows (exactly-once relies on
//! that, as for the value).
//!
//! How each column is written depends on the column's type in the table:
//! - `topic`: STRING; `partition` and `offset`: INTEGER; `timestamp`: TIMESTAMP (the
//!   record's CreateTime or LogAppendTime, NULL when the record has none);
//! - `headers`: a REPEATED RECORD `{key STRING, value BYTES}` (lossless), or a STRING
//!   or JSON column holding `[{"key": .., "value": ..}]` with the values as text;
//! - `key`: BYTES (as is) or STRING (UTF-8 text).
//!
//! A header value or key that a STRING or JSON column cannot hold (not UTF-8) is a bad
//! record, dead-lettered with the reason like any other.
//!
//! ```
//! use flexrun::kafka_to_bq::map::metadata::{parse_columns, MetaField};
//! let cols = parse_columns("topic|offset:kafka_offset").unwrap();
//! assert_eq!(cols[0].field, MetaField::Topic);
//! assert_eq!(cols[0].column, "_kafka_topic");
//! assert_eq!(cols[1].column, "kafka_offset");
//! assert!(parse_columns("topic|colour").unwrap_err().contains("colour"));
//! ```

use crate::bigquery::proto::{put_bytes, put_varint};
use crate::bigquery::schema::{Column, ColumnType, Mode, Schema};
use crate::record::RecordError;
use std::sync::Arc;

/// One piece of a Kafka record's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaField {
    /// The topic.
    Topic,
    /// The partition.
    Partition,
    /// The offset in the partition.
    Offset,
    /// The record's timestamp.
    Timestamp,
    /// The record's headers.
    Headers,
    /// The record's key.
    Key,
}

impl MetaField {
    const ALL: [MetaField; 6] = [
        MetaField::Topic,
        MetaField::Partition,
        MetaField::Offset,
        MetaField::Timestamp,
        MetaField::Headers,
        MetaField::Key,
    ];

    /// The name used in `kafkaMetadataColumns`.
    pub fn name(self) -> &'static str {
        match self {
            MetaField::Topic => "topic",
            MetaField::Partition => "partition",
            MetaField::Offset => "offset",
            MetaField::Timestamp => "timestamp",
            MetaField::Headers => "headers",
            MetaField::Key => "key",
        }
    }

    /// The column a table flexrun creates gets for it, in BigQuery's JSON schema form.
    fn default_column(self, name: &str) -> serde_json::Value {
        let typ = match self {
            MetaField::Topic => "STRING",
            MetaField::Partition | MetaField::Offset => "INTEGER",
            MetaField::Timestamp => "TIMESTAMP",
            MetaField::Key => "BYTES",
            MetaField::Headers => {
                return serde_json::json!({"name": name, "type": "RECORD", "mode": "REPEATED", "fields": [
                    {"name": "key", "type": "STRING", "mode": "NULLABLE"},
                    {"name": "value", "type": "BYTES", "mode": "NULLABLE"}]})
            }
        };
        serde_json::json!({"name": name, "type": typ, "mode": "NULLABLE"})
    }
}

/// A metadata field and the column it goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaColumn {
    /// What is written.
    pub field: MetaField,
    /// The column's name.
    pub column: String,
}

/// Parse `kafkaMetadataColumns`: fields separated by `|` (or commas), each `field` or
/// `field:column`; the default column name is `_kafka_<field>`.
pub fn parse_columns(s: &str) -> Result<Vec<MetaColumn>, String> {
    let mut out: Vec<MetaColumn> = Vec::new();
    for entry in s.split(['|', ',']).map(str::trim).filter(|e| !e.is_empty()) {
        let (name, column) = match entry.split_once(':') {
            Some((n, c)) => (n.trim(), c.trim().to_string()),
            None => (entry, format!("_kafka_{entry}")),
        };
        let Some(field) = MetaField::ALL.into_iter().find(|f| f.name() == name) else {
            return Err(format!(
                "kafkaMetadataColumns: unknown field {name:?}; expected topic, partition, offset, timestamp, headers or key, each optionally as field:column"
            ));
        };
        let valid = column.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && column.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("kafkaMetadataColumns: {column:?} is not a column name (letters, digits and _)"));
        }
        if out.iter().any(|o| o.field == field || o.column.eq_ignore_ascii_case(&column)) {
            return Err(format!("kafkaMetadataColumns: {name} or column {column} is named twice"));
        }
        out.push(MetaColumn { field, column });
    }
    Ok(out)
}

/// `schema` with the metadata columns appended (a table flexrun creates).
pub fn with_columns(schema: &Schema, cols: &[MetaColumn]) -> Result<Schema, String> {
    let mut json = schema.to_json();
    let list = json.as_array_mut().expect("a schema is a list of columns");
    for c in cols {
        if schema.lookup(&c.column).is_some() {
            return Err(format!("kafkaMetadataColumns: column {} is already a field of the records", c.column));
        }
        list.push(c.field.default_column(&c.column));
    }
    Schema::from_json(&json).map_err(|e| e.to_string())
}

/// What a Kafka record carries besides its key and value.
#[derive(Debug, Clone, Default)]
pub struct KafkaMeta<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The partition.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
    /// Milliseconds since the epoch, if the record has a timestamp.
    pub timestamp_ms: Option<i64>,
    /// Headers in order: name and value (None: a null value).
    pub headers: Vec<(&'a str, Option<&'a [u8]>)>,
    /// Whether the record's value is null (a tombstone), not merely empty.
    pub null_value: bool,
}

/// How one column is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Text,
    Int,
    Micros,
    Bytes,
    /// REPEATED RECORD with these field numbers for key and value.
    HeaderRecords(u32, u32),
    /// STRING or JSON: the headers as a JSON array.
    HeaderJson,
}

/// The metadata columns resolved against the table: field, protobuf field number, encoding.
#[derive(Debug, Clone, PartialEq)]
pub struct MetaPlan {
    cols: Vec<(MetaField, u32, Encoding)>,
}

impl MetaPlan {
    /// Resolve `cols` against the table's schema; the error names the column and what
    /// it needs to be.
    pub fn resolve(cols: &[MetaColumn], schema: &Schema) -> Result<Arc<MetaPlan>, String> {
        let mut out = Vec::with_capacity(cols.len());
        for c in cols {
            let idx = schema.lookup(&c.column).ok_or_else(|| {
                format!("kafkaMetadataColumns: the table has no column {} for the record's {}; add it (a table flexrun creates gets it)", c.column, c.field.name())
            })?;
            let col = &schema.columns[idx];
            let enc = encoding(c.field, col).ok_or_else(|| {
                format!(
                    "kafkaMetadataColumns: column {} ({} {}) cannot hold the record's {}; expected {}",
                    col.name,
                    col.mode.as_str(),
                    col.type_name,
                    c.field.name(),
                    expected(c.field)
                )
            })?;
            out.push((c.field, idx as u32 + 1, enc));
        }
        Ok(Arc::new(MetaPlan { cols: out }))
    }

    /// Append the record's metadata to the row `out`.
    pub fn encode(&self, m: &KafkaMeta, key: Option<&[u8]>, out: &mut Vec<u8>) -> Result<(), RecordError> {
        for &(field, tag, enc) in &self.cols {
            match (field, enc) {
                (MetaField::Topic, _) => put_bytes(tag, m.topic.as_bytes(), out),
                (MetaField::Partition, _) => put_varint(tag, m.partition as i64 as u64, out),
                (MetaField::Offset, _) => put_varint(tag, m.offset as u64, out),
                (MetaField::Timestamp, _) => {
                    if let Some(ms) = m.timestamp_ms {
                        put_varint(tag, ms.saturating_mul(1000) as u64, out);
                    }
                }
                (MetaField::Key, Encoding::Text) => {
                    if let Some(k) = key {
                        put_bytes(tag, text("the key", k)?.as_bytes(), out);
                    }
                }
                (MetaField::Key, _) => {
                    if let Some(k) = key {
                        put_bytes(tag, k, out);
                    }
                }
                (MetaField::Headers, Encoding::HeaderRecords(kt, vt)) => {
                    let mut rec = Vec::new();
                    for (name, value) in &m.headers {
                        rec.clear();
                        put_bytes(kt, name.as_bytes(), &mut rec);
                        if let Some(v) = value {
                            put_bytes(vt, v, &mut rec);
                        }
                        put_bytes(tag, &rec, out);
                    }
                }
                (MetaField::Headers, _) => put_bytes(tag, headers_json(&m.headers)?.as_bytes(), out),
            }
        }
        Ok(())
    }
}

fn expected(f: MetaField) -> &'static str {
    match f {
        MetaField::Topic => "a NULLABLE STRING",
        MetaField::Partition | MetaField::Offset => "a NULLABLE INTEGER",
        MetaField::Timestamp => "a NULLABLE TIMESTAMP",
        MetaField::Key => "a NULLABLE BYTES or STRING",
        MetaField::Headers => "a REPEATED RECORD {key STRING, value BYTES}, or a NULLABLE STRING or JSON",
    }
}

fn encoding(f: MetaField, c: &Column) -> Option<Encoding> {
    let json = c.type_name.eq_ignore_ascii_case("JSON");
    Some(match (f, c.typ, c.mode) {
        (MetaField::Headers, ColumnType::Record, Mode::Repeated) => {
            let sub = c.fields.as_ref()?;
            let (k, v) = (sub.lookup("key")?, sub.lookup("value")?);
            let ok = sub.columns[k].typ == ColumnType::String && sub.columns[v].typ == ColumnType::Bytes;
            if !ok || sub.columns.iter().any(|c| c.mode == Mode::Required) {
                return None;
            }
            Encoding::HeaderRecords(k as u32 + 1, v as u32 + 1)
        }
        (_, _, Mode::Repeated | Mode::Required) => return None,
        (MetaField::Headers, ColumnType::String, _) => Encoding::HeaderJson,
        (MetaField::Headers, ColumnType::StringLike, _) if json => Encoding::HeaderJson,
        (MetaField::Topic, ColumnType::String, _) => Encoding::Text,
        (MetaField::Partition | MetaField::Offset, ColumnType::Int64, _) => Encoding::Int,
        (MetaField::Timestamp, ColumnType::Timestamp, _) => Encoding::Micros,
        (MetaField::Key, ColumnType::Bytes, _) => Encoding::Bytes,
        (MetaField::Key, ColumnType::String, _) => Encoding::Text,
        _ => return None,
    })
}

fn text<'a>(what: &str, v: &'a [u8]) -> Result<&'a str, RecordError> {
    std::str::from_utf8(v).map_err(|e| RecordError::WrongType {
        field: what.to_string(),
        expected: "UTF-8 text for a STRING or JSON metadata column (a BYTES key column, or a REPEATED RECORD headers column, keeps any bytes)".into(),
        found: format!("a byte that is not UTF-8 at offset {}", e.valid_up_to()),
    })
}

fn headers_json(headers: &[(&str, Option<&[u8]>)]) -> Result<String, RecordError> {
    let mut list = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let value = match value {
            Some(v) => serde_json::Value::String(text(&format!("header {name}"), v)?.to_string()),
            None => serde_json::Value::Null,
        };
        list.push(serde_json::json!({"key": name, "value": value}));
    }
    Ok(serde_json::Value::Array(list).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::encoding::{decode_key, decode_varint, WireType};
    use serde_json::json;

    /// (tag, varint or bytes) pairs of one protobuf message.
    fn fields(mut b: &[u8]) -> Vec<(u32, Result<u64, Vec<u8>>)> {
        let mut out = Vec::new();
        while !b.is_empty() {
            let (tag, wt) = decode_key(&mut b).unwrap();
            let v = decode_varint(&mut b).unwrap();
            match wt {
                WireType::Varint => out.push((tag, Ok(v))),
                WireType::LengthDelimited => {
                    out.push((tag, Err(b[..v as usize].to_vec())));
                    b = &b[v as usize..];
                }
                other => panic!("{other:?}"),
            }
        }
        out
    }

    fn meta<'a>(headers: Vec<(&'a str, Option<&'a [u8]>)>) -> KafkaMeta<'a> {
        KafkaMeta {
            topic: "orders",
            partition: 3,
            offset: 42,
            timestamp_ms: Some(1_700_000_000_123),
            headers,
            null_value: false,
        }
    }

    #[test]
    fn a_created_table_gets_every_field_and_each_encodes_by_its_column() {
        let cols = parse_columns("topic|partition|offset|timestamp|headers|key").unwrap();
        let base = Schema::from_json(&json!([{"name": "id", "type": "INTEGER"}])).unwrap();
        let schema = with_columns(&base, &cols).unwrap();
        assert_eq!(schema.columns.len(), 7);
        let plan = MetaPlan::resolve(&cols, &schema).unwrap();
        let mut out = Vec::new();
        plan.encode(&meta(vec![("h1", Some(b"\xff\x00")), ("h2", None)]), Some(b"k\xfe"), &mut out).unwrap();
        let f = fields(&out);
        assert_eq!(f[0], (2, Err(b"orders".to_vec())));
        assert_eq!(f[1], (3, Ok(3)));
        assert_eq!(f[2], (4, Ok(42)));
        assert_eq!(f[3], (5, Ok(1_700_000_000_123_000)), "micros");
        // Two header records: {1: name, 2: value} and {1: name} (null value).
        assert_eq!(f[4].0, 6);
        assert_eq!(fields(f[4].1.as_ref().unwrap_err()), [(1, Err(b"h1".to_vec())), (2, Err(b"\xff\x00".to_vec()))]);
        assert_eq!(fields(f[5].1.as_ref().unwrap_err()), [(1, Err(b"h2".to_vec()))]);
        assert_eq!(f[6], (7, Err(b"k\xfe".to_vec())), "a BYTES key keeps any bytes");
        assert!(with_columns(&schema, &cols).unwrap_err().contains("already a field"));
    }

    #[test]
    fn string_and_json_columns_take_text_and_refuse_other_bytes() {
        let s = Schema::from_json(&json!([
            {"name": "h", "type": "JSON"}, {"name": "k", "type": "STRING"}, {"name": "t", "type": "TIMESTAMP"}]))
        .unwrap();
        let plan = MetaPlan::resolve(&parse_columns("headers:h|key:k|timestamp:t").unwrap(), &s).unwrap();
        let mut out = Vec::new();
        let m = KafkaMeta { timestamp_ms: None, ..meta(vec![("a", Some(b"x")), ("b", None)]) };
        plan.encode(&m, Some(b"id-1"), &mut out).unwrap();
        let f = fields(&out);
        assert_eq!(f[0], (1, Err(br#"[{"key":"a","value":"x"},{"key":"b","value":null}]"#.to_vec())));
        assert_eq!(f[1], (2, Err(b"id-1".to_vec())));
        assert_eq!(f.len(), 2, "no timestamp: the column stays NULL");
        let e = plan.encode(&meta(vec![("a", Some(b"\xff"))]), None, &mut out).unwrap_err();
        assert!(e.to_string().contains("header a") && e.to_string().contains("not UTF-8"), "{e}");
        assert!(plan.encode(&meta(vec![]), Some(b"\xc3"), &mut out).unwrap_err().to_string().contains("the key"));
    }

    #[test]
    fn columns_that_cannot_hold_a_field_are_named() {
        let s = Schema::from_json(&json!([
            {"name": "_kafka_topic", "type": "INTEGER"}, {"name": "o", "type": "INTEGER", "mode": "REQUIRED"},
            {"name": "h", "type": "RECORD", "mode": "REPEATED", "fields": [{"name": "key", "type": "STRING"}]}]))
        .unwrap();
        let e = MetaPlan::resolve(&parse_columns("topic").unwrap(), &s).unwrap_err();
        assert!(e.contains("column _kafka_topic") && e.contains("a NULLABLE STRING"), "{e}");
        let e = MetaPlan::resolve(&parse_columns("offset:o").unwrap(), &s).unwrap_err();
        assert!(e.contains("REQUIRED INTEGER"), "REQUIRED is refused: {e}");
        assert!(MetaPlan::resolve(&parse_columns("headers:h").unwrap(), &s).is_err(), "no value field");
        assert!(MetaPlan::resolve(&parse_columns("key").unwrap(), &s).unwrap_err().contains("no column _kafka_key"));
    }

    #[test]
    fn the_list_is_checked() {
        assert!(parse_columns("").unwrap().is_empty());
        assert!(parse_columns("topic|topic:t2").unwrap_err().contains("twice"));
        assert!(parse_columns("topic:a|offset:A").unwrap_err().contains("twice"));
        assert!(parse_columns("topic:9x").unwrap_err().contains("not a column name"));
        assert_eq!(
            parse_columns(" key , headers:h ").unwrap()[1],
            MetaColumn { field: MetaField::Headers, column: "h".into() }
        );
    }
}
