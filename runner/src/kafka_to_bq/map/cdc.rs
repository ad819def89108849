//! CDC upserts and deletes (flexrun's extension, `cdcPrimaryKey`): each record is a
//! change to the table's row with the same primary key, written through BigQuery's
//! change data capture (<https://cloud.google.com/bigquery/docs/change-data-capture>).
//!
//! Every row carries two pseudo-columns after the table's own fields:
//! - `_CHANGE_TYPE`: `UPSERT` or `DELETE` ("The pseudocolumn _CHANGE_TYPE only accepts
//!   the values UPSERT and DELETE", case-insensitive here), from the header
//!   `cdcChangeTypeHeader` names (a record without it is an UPSERT) or from the STRING
//!   column `cdcChangeTypeField` names; a tombstone (a record with a key and no value)
//!   is a DELETE of the row its JSON key names, as Debezium and Kafka's compaction mean it;
//! - `_CHANGE_SEQUENCE_NUMBER`, in hexadecimal: the value of the INTEGER column
//!   `cdcSequenceField` names (a source database's log position or version, so changes
//!   produced out of order still resolve to the newest), or else the record's Kafka
//!   offset (then a key's changes must all be in one partition, as they are when the
//!   producer keys records by the primary key). Either way a change sent again after a
//!   crash carries the same number and cannot undo a newer one.
//!
//! "You must use the Storage Write API in the default stream": CDC jobs write to the
//! `_default` stream, so rows are not deduplicated by offset. What stays exact after
//! any crash is the final state of each key.

use super::metadata::KafkaMeta;
use crate::avro::wire::AvroDecoder;
use crate::bigquery::proto::put_bytes;
use crate::bigquery::schema::{ColumnType, Mode, Schema};
use crate::record::RecordError;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto};
use std::sync::Arc;

/// The change-type pseudo-column.
pub const CHANGE_TYPE: &str = "_CHANGE_TYPE";
/// The sequence-number pseudo-column.
pub const CHANGE_SEQUENCE_NUMBER: &str = "_CHANGE_SEQUENCE_NUMBER";
/// BigQuery's limit: "Composite primary keys containing up to 16 columns are supported."
pub const MAX_KEY_COLUMNS: usize = 16;

/// The CDC parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdcConfig {
    /// `cdcPrimaryKey`: the table's primary key columns, in order.
    pub primary_key: Vec<String>,
    /// `cdcChangeTypeHeader`: the header whose value is UPSERT or DELETE.
    pub change_type_header: String,
    /// `cdcChangeTypeField`: the STRING column whose value is UPSERT or DELETE (None:
    /// the header).
    pub change_type_field: Option<String>,
    /// `cdcSequenceField`: the INTEGER column whose value orders a key's changes (None:
    /// the Kafka offset).
    pub sequence_field: Option<String>,
    /// `cdcKeySchemaPath`: how an Avro job reads a tombstone's key (None: as JSON).
    pub key_schema: Option<KeySchema>,
    /// `cdcFormat`: a flat row per change, or Debezium's envelope.
    pub format: CdcFormat,
}

/// How a change is written in a record (`cdcFormat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CdcFormat {
    /// The row itself, its change type in a header or column (`cdcChangeTypeHeader`,
    /// `cdcChangeTypeField`), its order in a column or the offset (`cdcSequenceField`).
    #[default]
    Flat,
    /// Debezium's envelope (`before`, `after`, `op`, `source`): see
    /// [`super::debezium`].
    Debezium,
}

/// The Avro schema a tombstone's key is written in (`cdcKeySchemaPath`), read in the
/// job's framing.
#[derive(Debug, Clone)]
pub struct KeySchema {
    /// The file it came from (what two configurations are compared by).
    pub path: String,
    /// The key's decoder.
    pub decoder: Arc<AvroDecoder>,
}

impl PartialEq for KeySchema {
    fn eq(&self, o: &KeySchema) -> bool {
        self.path == o.path
    }
}

impl Eq for KeySchema {}

/// Parse `cdcPrimaryKey` (columns separated by `|`, or commas inside a `^;^` list) and
/// `cdcChangeTypeHeader`; None when CDC is off. (`cdcSequenceField` is added with
/// [`CdcConfig::with_sequence_field`].)
///
/// ```
/// use flexrun::kafka_to_bq::map::cdc::parse;
/// let c = parse(Some("id|region"), None).unwrap().unwrap();
/// assert_eq!((c.primary_key.len(), c.change_type_header.as_str()), (2, "op"));
/// assert!(parse(Some("id|id"), None).unwrap_err().contains("twice"));
/// assert_eq!(parse(None, None), Ok(None));
/// ```
pub fn parse(primary_key: Option<&str>, header: Option<&str>) -> Result<Option<CdcConfig>, String> {
    let Some(pk) = primary_key.filter(|s| !s.is_empty()) else {
        return match header {
            Some(_) => Err("cdcChangeTypeHeader needs cdcPrimaryKey (CDC is on only with a primary key)".into()),
            None => Ok(None),
        };
    };
    let cols: Vec<String> = pk.split(['|', ',']).map(|c| c.trim().to_string()).collect();
    if let Some(c) = cols.iter().find(|c| c.is_empty() || !c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_'))
    {
        return Err(format!("cdcPrimaryKey: {c:?} is not a column name (letters, digits and _)"));
    }
    if cols.len() > MAX_KEY_COLUMNS {
        return Err(format!(
            "cdcPrimaryKey: {} columns; BigQuery's primary keys have at most {MAX_KEY_COLUMNS}",
            cols.len()
        ));
    }
    if let Some((i, c)) = cols.iter().enumerate().find(|(i, c)| cols[..*i].contains(c)) {
        let _ = i;
        return Err(format!("cdcPrimaryKey: column {c} is named twice"));
    }
    let header = header.unwrap_or("op").to_string();
    if header.is_empty() {
        return Err("cdcChangeTypeHeader: empty; expected a header name (default op)".into());
    }
    Ok(Some(CdcConfig {
        primary_key: cols,
        change_type_header: header,
        change_type_field: None,
        sequence_field: None,
        key_schema: None,
        format: CdcFormat::Flat,
    }))
}

impl CdcConfig {
    /// Order each key's changes by this INTEGER column instead of the Kafka offset.
    pub fn with_sequence_field(self, field: Option<&str>) -> CdcConfig {
        CdcConfig { sequence_field: field.filter(|f| !f.is_empty()).map(str::to_string), ..self }
    }

    /// Read an Avro job's tombstone keys with this schema instead of as JSON.
    pub fn with_key_schema(self, key_schema: Option<KeySchema>) -> CdcConfig {
        CdcConfig { key_schema, ..self }
    }

    /// Read changes in this format.
    pub fn with_format(self, format: CdcFormat) -> CdcConfig {
        CdcConfig { format, ..self }
    }

    /// Whether a key's changes are ordered by Kafka offset (no `cdcSequenceField`, and
    /// not Debezium, whose order is the source's log position).
    pub fn orders_by_offset(&self) -> bool {
        self.sequence_field.is_none() && self.format == CdcFormat::Flat
    }

    /// Read the change type from this STRING column instead of a header.
    pub fn with_change_type_field(self, field: Option<&str>) -> CdcConfig {
        CdcConfig { change_type_field: field.filter(|f| !f.is_empty()).map(str::to_string), ..self }
    }
}

/// What one record does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    /// Insert the row, or replace the row with the same key.
    Upsert,
    /// Delete the row with the same key.
    Delete,
}

impl ChangeType {
    /// BigQuery's value of `_CHANGE_TYPE`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Upsert => "UPSERT",
            ChangeType::Delete => "DELETE",
        }
    }
}

/// How a job writes the pseudo-columns, resolved against the table's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdcPlan {
    header: String,
    type_tag: u32,
    seq_tag: u32,
    /// The sequence column's field number and name (None: the Kafka offset).
    seq_from: Option<(u32, String)>,
    /// The change-type column's field number and name (None: the header).
    type_from: Option<(u32, String)>,
    /// How a tombstone's key is read when it is Avro (`cdcKeySchemaPath`).
    key: Option<KeySchema>,
    /// The records' format.
    format: CdcFormat,
    /// The primary key columns' field numbers and names: a change without one of them
    /// names no row.
    key_tags: Vec<(u32, String)>,
}

impl CdcPlan {
    /// How a tombstone's Avro key is decoded (`cdcKeySchemaPath`); None: it is JSON.
    pub fn key_decoder(&self) -> Option<&Arc<AvroDecoder>> {
        self.key.as_ref().map(|k| &k.decoder)
    }

    /// Check the key columns against `schema` (top-level, not REPEATED, not RECORD)
    /// and give the pseudo-columns the field numbers after the table's.
    pub fn resolve(cfg: &CdcConfig, schema: &Schema) -> Result<CdcPlan, String> {
        let mut key_tags = Vec::new();
        for k in &cfg.primary_key {
            let Some(i) = schema.lookup(k) else {
                return Err(format!("cdcPrimaryKey: the table has no column {k}"));
            };
            key_tags.push((i as u32 + 1, k.clone()));
            let c = &schema.columns[i];
            if c.mode == Mode::Repeated || c.typ == ColumnType::Record {
                return Err(format!(
                    "cdcPrimaryKey: column {k} is {} {}; a primary key column is a top-level scalar",
                    c.mode.as_str(),
                    c.type_name
                ));
            }
        }
        let seq_from = match &cfg.sequence_field {
            None => None,
            Some(f) => {
                let i = schema.lookup(f).ok_or_else(|| format!("cdcSequenceField: the table has no column {f}"))?;
                let c = &schema.columns[i];
                if c.mode == Mode::Repeated || c.typ != ColumnType::Int64 {
                    return Err(format!(
                        "cdcSequenceField: column {f} is {} {}; expected an INTEGER (INT64) column",
                        c.mode.as_str(),
                        c.type_name
                    ));
                }
                Some((i as u32 + 1, f.clone()))
            }
        };
        let type_from = match &cfg.change_type_field {
            None => None,
            Some(f) => {
                let i = schema.lookup(f).ok_or_else(|| format!("cdcChangeTypeField: the table has no column {f}"))?;
                let c = &schema.columns[i];
                if c.mode == Mode::Repeated || !matches!(c.typ, ColumnType::String | ColumnType::StringLike) {
                    return Err(format!(
                        "cdcChangeTypeField: column {f} is {} {}; expected a STRING column",
                        c.mode.as_str(),
                        c.type_name
                    ));
                }
                Some((i as u32 + 1, f.clone()))
            }
        };
        let n = schema.columns.len() as u32;
        let key = cfg.key_schema.clone();
        Ok(CdcPlan {
            header: cfg.change_type_header.clone(),
            type_tag: n + 1,
            seq_tag: n + 2,
            seq_from,
            type_from,
            key,
            format: cfg.format,
            key_tags,
        })
    }

    /// Whether records are Debezium envelopes.
    pub fn debezium(&self) -> bool {
        self.format == CdcFormat::Debezium
    }

    /// Append the pseudo-columns with the change type and sequence number given (a
    /// Debezium change's, read from its envelope).
    pub fn encode_with(&self, change: ChangeType, sequence: &str, out: &mut Vec<u8>) -> Result<(), RecordError> {
        self.check_key(out)?;
        put_bytes(self.type_tag, change.as_str().as_bytes(), out);
        put_bytes(self.seq_tag, sequence.as_bytes(), out);
        Ok(())
    }

    /// A change must name its row: every primary key column present and not null
    /// (BigQuery's CDC applies a change to the row with the same primary key; with a
    /// NULL key column the change would name no row, or every row with a NULL there).
    fn check_key(&self, row: &[u8]) -> Result<(), RecordError> {
        match self.key_tags.iter().find(|(tag, _)| top_level(row, *tag).is_none()) {
            Some((_, name)) => Err(RecordError::Cdc(format!(
                "primary key column {name} is null or missing; a change must name its row by every cdcPrimaryKey column"
            ))),
            None => Ok(()),
        }
    }

    /// The rows' descriptor with the two pseudo-columns added.
    pub fn descriptor(&self, mut d: DescriptorProto) -> DescriptorProto {
        for (name, tag) in [(CHANGE_TYPE, self.type_tag), (CHANGE_SEQUENCE_NUMBER, self.seq_tag)] {
            d.field.push(FieldDescriptorProto {
                name: Some(name.to_string()),
                number: Some(tag as i32),
                label: Some(Label::Optional as i32),
                r#type: Some(Type::String as i32),
                ..Default::default()
            });
        }
        d
    }

    /// The change type the record's header names (see [`CdcPlan::change_type_of`] for
    /// the column).
    pub fn change_type(&self, meta: &KafkaMeta<'_>) -> Result<ChangeType, RecordError> {
        let v = meta.headers.iter().rev().find(|(k, _)| *k == self.header).and_then(|(_, v)| *v);
        parse_change(v, &format!("header {}", self.header))
    }

    /// The change type of the row `row` encodes: from its column when
    /// `cdcChangeTypeField` is set, else from the record's header.
    pub fn change_type_of(&self, meta: &KafkaMeta<'_>, row: &[u8]) -> Result<ChangeType, RecordError> {
        match &self.type_from {
            None => self.change_type(meta),
            Some((tag, name)) => match top_level_bytes(row, *tag) {
                Some(v) => parse_change(Some(v), &format!("cdcChangeTypeField {name}")),
                None => Err(RecordError::Cdc(format!("cdcChangeTypeField {name} is null; expected UPSERT or DELETE"))),
            },
        }
    }

    /// Append the pseudo-columns of the record `meta` describes to its row `out` (the
    /// sequence and change-type columns, if any, are read back from the row as encoded).
    pub fn encode(&self, meta: &KafkaMeta<'_>, out: &mut Vec<u8>) -> Result<(), RecordError> {
        let change = self.change_type_of(meta, out)?;
        self.encode_as(change, meta, out)
    }

    /// The `cdcSequenceField` the row `out` lacks, if it does (never when the sequence
    /// is the Kafka offset).
    pub fn missing_sequence(&self, out: &[u8]) -> Option<&str> {
        self.seq_from.as_ref().filter(|(tag, _)| top_level_varint(out, *tag).is_none()).map(|(_, n)| n.as_str())
    }

    /// Append the pseudo-columns with the change type given (a tombstone's DELETE).
    pub fn encode_as(&self, change: ChangeType, meta: &KafkaMeta<'_>, out: &mut Vec<u8>) -> Result<(), RecordError> {
        self.check_key(out)?;
        let seq = match &self.seq_from {
            None => meta.offset,
            Some((tag, name)) => match top_level_varint(out, *tag) {
                Some(v) if (v as i64) >= 0 => v as i64,
                Some(v) => {
                    return Err(RecordError::Cdc(format!(
                        "cdcSequenceField {name} is {}; expected 0 or more",
                        v as i64
                    )))
                }
                None => {
                    return Err(RecordError::Cdc(format!("cdcSequenceField {name} is null; every change needs one")))
                }
            },
        };
        put_bytes(self.type_tag, change.as_str().as_bytes(), out);
        put_bytes(self.seq_tag, sequence_number(seq).as_bytes(), out);
        Ok(())
    }
}

fn parse_change(v: Option<&[u8]>, what: &str) -> Result<ChangeType, RecordError> {
    match v.map(|v| std::str::from_utf8(v).map(str::to_ascii_uppercase)) {
        None => Ok(ChangeType::Upsert),
        Some(Ok(s)) if s == "UPSERT" => Ok(ChangeType::Upsert),
        Some(Ok(s)) if s == "DELETE" => Ok(ChangeType::Delete),
        Some(Ok(s)) => Err(RecordError::Cdc(format!("{what} is {s:?}; expected UPSERT or DELETE"))),
        Some(Err(_)) => Err(RecordError::Cdc(format!("{what} is not UTF-8; expected UPSERT or DELETE"))),
    }
}

/// A top-level field of a protobuf message: its last varint or length-delimited value.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn top_level<'a>(mut b: &'a [u8], tag: u32) -> Option<Value<'a>> {
    use prost::encoding::decode_varint;
    let mut found = None;
    while !b.is_empty() {
        let key = decode_varint(&mut b).ok()?;
        let (t, wire) = ((key >> 3) as u32, key & 7);
        match wire {
            0 => {
                let v = decode_varint(&mut b).ok()?;
                if t == tag {
                    found = Some(Value::Varint(v));
                }
            }
            1 => b = b.get(8..)?,
            2 => {
                let n = decode_varint(&mut b).ok()? as usize;
                let v = b.get(..n)?;
                b = &b[n..];
                if t == tag {
                    found = Some(Value::Bytes(v));
                }
            }
            5 => b = b.get(4..)?,
            _ => return None,
        }
    }
    found
}

/// The last value of varint field `tag` among a message's top-level fields.
fn top_level_varint(b: &[u8], tag: u32) -> Option<u64> {
    match top_level(b, tag)? {
        Value::Varint(v) => Some(v),
        Value::Bytes(_) => None,
    }
}

/// The last value of length-delimited field `tag` among a message's top-level fields.
fn top_level_bytes(b: &[u8], tag: u32) -> Option<&[u8]> {
    match top_level(b, tag)? {
        Value::Bytes(v) => Some(v),
        Value::Varint(_) => None,
    }
}

/// A record key as Kafka Connect's JsonConverter writes it with `schemas.enable=true`,
/// `{"schema": ..., "payload": ...}`, is its payload; any other key is itself.
///
/// ```
/// use flexrun::kafka_to_bq::map::cdc::unwrap_connect_key;
/// let k = br#"{"schema":{"type":"struct","fields":[{"field":"id","type":"int32"}]},"payload":{"id":1}}"#;
/// assert_eq!(&*unwrap_connect_key(k), br#"{"id":1}"#);
/// assert_eq!(&*unwrap_connect_key(br#"{"id":1}"#), br#"{"id":1}"#);
/// ```
pub fn unwrap_connect_key(key: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Envelope<'a> {
        #[allow(dead_code)]
        schema: &'a serde_json::value::RawValue,
        #[serde(borrow)]
        payload: &'a serde_json::value::RawValue,
    }
    match serde_json::from_slice::<Envelope>(key) {
        Ok(e) => std::borrow::Cow::Owned(e.payload.get().as_bytes().to_vec()),
        Err(_) => std::borrow::Cow::Borrowed(key),
    }
}

impl CdcConfig {
    /// Why the job cannot go on after `what` happened to `topic`'s logs (partitions
    /// added, a log found shorter than the checkpoint), when its changes are ordered by
    /// Kafka offset: None with `cdcSequenceField`, whose order is the records' own.
    /// Offsets order one partition's records only. Partitions added move keys to other
    /// partitions (Kafka's default partitioner picks one by the key's hash modulo the
    /// partition count), and a recreated topic restarts its offsets, so a newer change
    /// could lose to an older one without a word.
    pub fn offset_order_broken(&self, topic: &str, what: &str) -> Option<String> {
        self.orders_by_offset().then(|| format!(
            "cdcPrimaryKey without cdcSequenceField orders each key's changes by Kafka offset, which holds within one partition's log only, and {what} on topic {topic}: a key's newer change could now lose to an older one. Set cdcSequenceField to a column that orders each key's changes, then run the job again"
        ))
    }
}

/// `_CHANGE_SEQUENCE_NUMBER` for a Kafka offset: one hexadecimal section.
///
/// ```
/// assert_eq!(flexrun::kafka_to_bq::map::cdc::sequence_number(255), "FF");
/// ```
pub fn sequence_number(offset: i64) -> String {
    format!("{:X}", offset.max(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::from_json(&json!([
            {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
            {"name": "tags", "type": "STRING", "mode": "REPEATED"},
            {"name": "v", "type": "STRING", "mode": "NULLABLE"}
        ]))
        .unwrap()
    }

    fn meta<'a>(headers: Vec<(&'a str, Option<&'a [u8]>)>) -> KafkaMeta<'a> {
        KafkaMeta { topic: "t", partition: 0, offset: 4096, timestamp_ms: None, headers, null_value: false }
    }

    #[test]
    fn the_key_must_name_scalar_columns_of_the_table() {
        let cfg = |pk: &str| parse(Some(pk), None).unwrap().unwrap();
        assert!(CdcPlan::resolve(&cfg("id"), &schema()).is_ok());
        assert!(CdcPlan::resolve(&cfg("nope"), &schema()).unwrap_err().contains("no column nope"));
        assert!(CdcPlan::resolve(&cfg("tags"), &schema()).unwrap_err().contains("top-level scalar"));
        let many: Vec<String> = (0..17).map(|i| format!("c{i}")).collect();
        assert!(parse(Some(&many.join("|")), None).unwrap_err().contains("at most 16"));
        assert!(parse(None, Some("op")).unwrap_err().contains("needs cdcPrimaryKey"));
    }

    #[test]
    fn a_change_type_field_is_read_back_from_the_encoded_row() {
        let cfg = parse(Some("id"), None).unwrap().unwrap().with_change_type_field(Some("v"));
        let plan = CdcPlan::resolve(&cfg, &schema()).unwrap();
        let mut row = Vec::new();
        crate::bigquery::proto::put_varint(1, 7, &mut row);
        put_bytes(3, b"delete", &mut row);
        plan.encode(&meta(vec![("op", Some(b"UPSERT"))]), &mut row).unwrap();
        assert!(row.windows(6).any(|w| w == b"DELETE"), "the column wins over the header: {row:?}");
        let mut bad = Vec::new();
        put_bytes(3, b"MERGE", &mut bad);
        assert!(plan
            .encode(&meta(vec![]), &mut bad)
            .unwrap_err()
            .to_string()
            .contains("cdcChangeTypeField v is \"MERGE\""));
        let e = CdcPlan::resolve(&cfg.with_change_type_field(Some("id")), &schema()).unwrap_err();
        assert!(e.contains("expected a STRING column"), "{e}");
    }

    #[test]
    fn a_sequence_field_is_read_back_from_the_encoded_row() {
        let cfg = parse(Some("id"), None).unwrap().unwrap();
        let plan = CdcPlan::resolve(&cfg.clone().with_sequence_field(Some("id")), &schema()).unwrap();
        let mut row = Vec::new();
        put_bytes(2, b"tag", &mut row);
        crate::bigquery::proto::put_varint(1, 300, &mut row);
        put_bytes(3, b"v", &mut row);
        plan.encode(&meta(vec![]), &mut row).unwrap();
        assert!(row.ends_with(b"12C"), "300 = 0x12C, not the offset 4096: {row:?}");
        let mut null_row = Vec::new();
        put_bytes(3, b"v", &mut null_row);
        assert!(plan.encode(&meta(vec![]), &mut null_row).unwrap_err().to_string().contains("is null"));
        let e = CdcPlan::resolve(&cfg.with_sequence_field(Some("v")), &schema()).unwrap_err();
        assert!(e.contains("expected an INTEGER"), "{e}");
    }

    #[test]
    fn the_header_decides_the_change_and_the_offset_its_number() {
        let plan = CdcPlan::resolve(&parse(Some("id"), None).unwrap().unwrap(), &schema()).unwrap();
        assert_eq!(plan.change_type(&meta(vec![])), Ok(ChangeType::Upsert));
        assert_eq!(plan.change_type(&meta(vec![("op", Some(b"delete"))])), Ok(ChangeType::Delete));
        assert_eq!(
            plan.change_type(&meta(vec![("op", Some(b"DELETE")), ("op", Some(b"upsert"))])),
            Ok(ChangeType::Upsert)
        );
        let e = plan.change_type(&meta(vec![("op", Some(b"MERGE"))])).unwrap_err();
        assert_eq!(e.class(), "cdc");
        assert!(e.to_string().contains("expected UPSERT or DELETE"), "{e}");
        // A row with its key (field 1 = 7).
        let mut out = vec![0x08, 7];
        plan.encode(&meta(vec![("op", Some(b"DELETE"))]), &mut out).unwrap();
        // Field 4 (after the table's 3 columns) = "DELETE", field 5 = "1000" (4096 in hex).
        assert_eq!(out, [&[0x08, 7][..], &[0x22, 6], b"DELETE", &[0x2a, 4], b"1000"].concat());
        // Issue 62, item 3: a change whose key column is null names no row: refused.
        let e = plan.encode(&meta(vec![]), &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("primary key column id is null or missing"), "{e}");
        let d = plan.descriptor(crate::bigquery::proto::descriptor(&schema(), "Row"));
        let names: Vec<_> = d.field.iter().map(|f| (f.name().to_string(), f.number())).collect();
        assert_eq!(&names[3..], &[(CHANGE_TYPE.to_string(), 4), (CHANGE_SEQUENCE_NUMBER.to_string(), 5)]);
    }
}
