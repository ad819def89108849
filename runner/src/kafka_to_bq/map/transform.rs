//! The map step: one Kafka message value → one encoded BigQuery row, or the reason it cannot be.
//!
//! Follows Google's JSON path: the value is read as UTF-8, parsed as a JSON object,
//! and its top-level keys are matched case-insensitively onto the table's columns
//! (nested objects onto RECORDs, arrays onto REPEATED columns). A key with no column
//! is an error, as in the template (it does not set `ignoreUnknownValues`).
//!
//! The mapping is a pure function of the message bytes and the schema. Exactly-once
//! depends on that: a replayed batch must map to the very same rows.

use super::json_row::{encode_borrowed, encode_object, kind, serde_fields};
use super::json_shaped::Shapes;
use super::metadata::{KafkaMeta, MetaPlan};
use crate::avro::fast::Plan;
use crate::avro::table::KAFKA_KEY_FIELD;
use crate::avro::wire::AvroDecoder;
use crate::avro::WriterSchema;
use crate::bigquery::proto::put_bytes;
use crate::bigquery::schema::Schema;
pub use crate::record::{parse_timestamp_micros, RecordError};
use crate::udf::{Udf, UdfOutcome};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Beam's `storageWriteApiMaxRequestSize` default; a larger row can never be appended.
pub const DEFAULT_MAX_ROW_BYTES: usize = 10_000_000;

/// How message values are read (`messageFormat`).
#[derive(Debug, Clone)]
pub enum Input {
    /// A JSON object per message (Google's JSON path).
    Json,
    /// An Avro record per message, in one of Google's two framings.
    Avro(Arc<AvroDecoder>),
    /// A Protobuf message per message ([`crate::proto`]).
    Proto(Arc<crate::proto::ProtoDecoder>),
}

/// Maps message values onto one table schema.
#[derive(Debug, Clone)]
pub struct Mapper {
    schema: Schema,
    max_row_bytes: usize,
    input: Input,
    /// The `_key` column's field number, when the Kafka key is persisted.
    key_tag: Option<u32>,
    /// The JavaScript UDF applied before mapping (JSON path).
    udf: Option<Arc<Udf>>,
    /// With per-record tables: the record full name this table holds (others are routed).
    record: Option<String>,
    /// Avro fast-path plans by writer schema (its address: schemas live as long as the decoder).
    plans: Arc<RwLock<HashMap<usize, Option<Arc<Plan>>>>>,
    /// The Kafka metadata columns (`kafkaMetadataColumns`), if any.
    meta: Option<Arc<MetaPlan>>,
    /// CDC's pseudo-columns (`cdcPrimaryKey`), if any.
    cdc: Option<Arc<super::cdc::CdcPlan>>,
    /// The JSON layout learned from the messages (the shaped path), shared by clones.
    shapes: Arc<Shapes>,
    /// The Protobuf fast path's plan, for a job of one message type whose fields all
    /// have exact columns ([`crate::proto::fast`]).
    proto_plan: Option<Arc<crate::proto::fast::Plan>>,
}

impl Mapper {
    /// The largest encoded row it accepts.
    pub fn max_row_bytes(&self) -> usize {
        self.max_row_bytes
    }

    /// A JSON mapper for `schema` that refuses rows whose encoding exceeds `max_row_bytes`.
    pub fn new(schema: Schema, max_row_bytes: usize) -> Mapper {
        Mapper {
            schema,
            max_row_bytes,
            input: Input::Json,
            key_tag: None,
            udf: None,
            record: None,
            plans: Arc::default(),
            meta: None,
            cdc: None,
            shapes: Arc::default(),
            proto_plan: None,
        }
    }

    /// A mapper for `input`; with `persist_key`, the Kafka key goes to the `_key` column
    /// (which must exist: [`Mapper::with_input`] returns None otherwise).
    pub fn with_input(schema: Schema, max_row_bytes: usize, input: Input, persist_key: bool) -> Option<Mapper> {
        let key_tag = match persist_key {
            true => Some(schema.lookup(KAFKA_KEY_FIELD)? as u32 + 1),
            false => None,
        };
        let proto_plan = match &input {
            Input::Proto(d) => d.message().and_then(|m| crate::proto::fast::Plan::compile(m, &schema)).map(Arc::new),
            _ => None,
        };
        Some(Mapper {
            proto_plan,
            schema,
            max_row_bytes,
            input,
            key_tag,
            udf: None,
            record: None,
            plans: Arc::default(),
            meta: None,
            cdc: None,
            shapes: Arc::default(),
        })
    }

    /// Write the Kafka metadata columns of `plan` after each row's own fields.
    pub fn with_meta(self, meta: Option<Arc<MetaPlan>>) -> Mapper {
        Mapper { meta, ..self }
    }

    /// Whether rows carry Kafka metadata columns (then [`Mapper::map_message`] needs the
    /// record's [`KafkaMeta`]).
    pub fn wants_meta(&self) -> bool {
        self.meta.is_some() || self.cdc.is_some()
    }

    /// Write CDC's `_CHANGE_TYPE` and `_CHANGE_SEQUENCE_NUMBER` after each row.
    pub fn with_cdc(self, cdc: Option<Arc<super::cdc::CdcPlan>>) -> Mapper {
        Mapper { cdc, ..self }
    }

    /// The CDC plan, if any.
    pub fn cdc(&self) -> Option<&Arc<super::cdc::CdcPlan>> {
        self.cdc.as_ref()
    }

    /// Apply `udf` to every JSON message before it is mapped.
    pub fn with_udf(self, udf: Option<Arc<Udf>>) -> Mapper {
        Mapper { udf, ..self }
    }

    /// Map only records named `record` (per-record tables); others are
    /// [`RecordError::OtherRecord`].
    pub fn for_record(self, record: Option<String>) -> Mapper {
        Mapper { record, ..self }
    }

    /// The record full name this mapper takes, with per-record tables.
    pub fn record(&self) -> Option<&str> {
        self.record.as_deref()
    }

    /// The UDF, if any.
    pub fn udf(&self) -> Option<&Arc<Udf>> {
        self.udf.as_ref()
    }

    /// How values are read.
    pub fn input(&self) -> &Input {
        &self.input
    }

    /// Fetch what mapping these values needs first (Schema Registry schemas by id).
    pub async fn prefetch<'a>(&self, values: impl Iterator<Item = &'a [u8]>) {
        match &self.input {
            Input::Avro(d) => d.prefetch(values).await,
            Input::Proto(d) => d.prefetch(values).await,
            Input::Json => {}
        }
    }

    /// The fast-path plan for records of `w` into this table, compiled on first use.
    fn plan(&self, w: &Arc<WriterSchema>) -> Option<Arc<Plan>> {
        let key = Arc::as_ptr(w) as usize;
        if let Some(p) = self.plans.read().expect("plans lock").get(&key) {
            return p.clone();
        }
        let p = Plan::compile(w, &self.schema).map(Arc::new);
        self.plans.write().expect("plans lock").insert(key, p.clone());
        p
    }

    /// Whether the Kafka key goes to `_key`.
    pub fn persists_key(&self) -> bool {
        self.key_tag.is_some()
    }

    /// Map one Kafka message (key and value) into `out` as protobuf row bytes, in the
    /// job's input format, with the key in `_key` when it is persisted (a message
    /// without a key leaves `_key` NULL, as Google's template does), and the record's
    /// metadata in its columns when [`Mapper::wants_meta`].
    pub fn map_message(
        &self,
        key: Option<&[u8]>,
        value: &[u8],
        meta: Option<&KafkaMeta>,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        if let Some(cdc) = self.cdc.as_ref().filter(|c| c.debezium()) {
            return self.map_debezium(cdc, key, value, meta, out);
        }
        // A tombstone is a record whose value is null; an empty value is a bad record.
        if let (Some(cdc), Some(m)) = (&self.cdc, meta.filter(|m| m.null_value)) {
            return self.map_tombstone(cdc, key, m, out);
        }
        match (&self.input, &self.udf) {
            (Input::Json, None) => self.map_into(value, out)?,
            (Input::Json, Some(udf)) => {
                let text = utf8(value)?;
                match udf.call(text) {
                    UdfOutcome::Output(json) => self.map_into(json.as_bytes(), out)?,
                    UdfOutcome::Dropped => return Err(RecordError::Dropped),
                    UdfOutcome::Failed(e) => return Err(RecordError::Udf(e)),
                }
            }
            (Input::Avro(d), _) => {
                out.clear();
                let (w, datum) = d.split(value)?;
                if let Some(want) = &self.record {
                    let got = w.full_name().unwrap_or_default();
                    if &got != want {
                        return Err(RecordError::OtherRecord(got));
                    }
                }
                let fast = self.plan(&w).and_then(|p| p.transcode(datum, out));
                if fast.is_none() {
                    out.clear();
                    let (w, v) = d.decode(value)?;
                    crate::avro::row::encode_record(&w, &self.schema, &v, out)?;
                }
            }
            (Input::Proto(d), _) => {
                out.clear();
                let fast = self.proto_plan.as_ref().and_then(|p| p.transcode(value, out));
                if fast.is_none() {
                    out.clear();
                    let obj = crate::proto::row::to_json(&d.decode(value)?)?;
                    encode_object(&self.schema, &obj, "", out)?;
                }
            }
        }
        if let (Some(tag), Some(k)) = (self.key_tag, key) {
            put_bytes(tag, k, out);
        }
        if let (Some(plan), Some(m)) = (&self.meta, meta) {
            plan.encode(m, key, out)?;
        }
        if let (Some(plan), Some(m)) = (&self.cdc, meta) {
            plan.encode(m, out)?;
        }
        self.check_size(out)
    }

    /// A Debezium record (`cdcFormat=DEBEZIUM`): the change its envelope describes, with
    /// the key and metadata columns as for any record, or the reason it is skipped.
    fn map_debezium(
        &self,
        cdc: &super::cdc::CdcPlan,
        key: Option<&[u8]>,
        value: &[u8],
        meta: Option<&KafkaMeta>,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        use super::debezium::{classify, unwrap_payload, Event, Skipped};
        let offset = meta.map_or(0, |m| m.offset);
        if meta.is_some_and(|m| m.null_value) {
            return Err(RecordError::DebeziumSkipped(Skipped::Tombstone.as_str()));
        }
        out.clear();
        let (change, sequence) = match &self.input {
            Input::Json => {
                let v: Value =
                    serde_json::from_str(utf8(value)?).map_err(|e| RecordError::InvalidJson(e.to_string()))?;
                let Some(event) = unwrap_payload(&v)? else {
                    return Err(RecordError::DebeziumSkipped(Skipped::Tombstone.as_str()));
                };
                self.debezium_object(event, offset, out)?
            }
            Input::Proto(d) => self.debezium_object(&crate::proto::row::to_json(&d.decode(value)?)?, offset, out)?,
            Input::Avro(d) => {
                let (w, v) = d.decode(value)?;
                let event = crate::avro::row::fields_as_json(&v, &["before", "after"])?;
                let (change, part, sequence) = match classify(&event, offset)? {
                    Event::Skip(s) => return Err(RecordError::DebeziumSkipped(s.as_str())),
                    Event::Change { change, part, sequence } => (change, part, sequence),
                };
                match crate::avro::row::encode_field_record(&w, &self.schema, &v, part.name(), out)? {
                    Some(true) => {}
                    Some(false) => return Err(part.missing("null")),
                    None => return Err(part.missing("absent")),
                }
                (change, sequence)
            }
        };
        if let (Some(tag), Some(k)) = (self.key_tag, key) {
            put_bytes(tag, k, out);
        }
        if let (Some(plan), Some(m)) = (&self.meta, meta) {
            plan.encode(m, key, out)?;
        }
        cdc.encode_with(change, &sequence, out)?;
        self.check_size(out)
    }

    /// A Debezium event read as a JSON object (JSON, or a Protobuf message): its row into
    /// `out`, and its change type and sequence number.
    fn debezium_object(
        &self,
        event: &serde_json::Map<String, Value>,
        offset: i64,
        out: &mut Vec<u8>,
    ) -> Result<(super::cdc::ChangeType, String), RecordError> {
        use super::debezium::{classify, Event};
        match classify(event, offset)? {
            Event::Skip(s) => Err(RecordError::DebeziumSkipped(s.as_str())),
            Event::Change { change, part, sequence } => {
                encode_object(&self.schema, part.of(event)?, "", out)?;
                Ok((change, sequence))
            }
        }
    }

    /// A CDC tombstone (a key, a null value): a DELETE of the row its key names. The key
    /// is Avro when the job has `cdcKeySchemaPath`, else JSON (on the Avro paths too: a
    /// JSON or string-converter key). Its fields are mapped as the row; the table's other
    /// REQUIRED columns cannot be filled and send it to the dead letters with the reason.
    fn map_tombstone(
        &self,
        cdc: &super::cdc::CdcPlan,
        key: Option<&[u8]>,
        meta: &KafkaMeta,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        let key = key.ok_or_else(|| RecordError::Cdc("a record with neither key nor value names no row".into()))?;
        let mapped = match cdc.key_decoder() {
            Some(d) => d.decode(key).and_then(|(w, v)| {
                out.clear();
                crate::avro::row::encode_record(&w, &self.schema, &v, out)
            }),
            None => self.map_into(&super::cdc::unwrap_connect_key(key), out),
        };
        mapped.map_err(|e| {
            let how = if cdc.key_decoder().is_some() { "read with cdcKeySchemaPath" } else { "read as JSON" };
            RecordError::Cdc(format!(
                "a tombstone deletes the row its key names, and its key ({how}) does not map: {e}"
            ))
        })?;
        if let Some(name) = cdc.missing_sequence(out) {
            // A flat row's tombstone is its DELETE (Debezium's flattening writes deletes
            // as tombstones alone under delete.tombstone.handling.mode=tombstone): one
            // that cannot be ordered against the key's other changes is not dropped.
            return Err(RecordError::Cdc(format!(
                "a tombstone deletes the row its key names, but this job orders each key's changes by cdcSequenceField {name}, which the key does not carry, so the DELETE cannot be ordered and is not applied. Put {name} in the record key, or write deletes as records that carry it (Debezium: cdcFormat=DEBEZIUM with the unflattened envelope)"
            )));
        }
        cdc.encode_as(super::cdc::ChangeType::Delete, meta, out)?;
        self.check_size(out)
    }

    /// The JSON object a JSON or Protobuf message is mapped from (after the UDF, if any);
    /// None for Avro, or when the message is not an object. For schema evolution, off the hot path.
    pub fn json_object(&self, value: &[u8]) -> Option<serde_json::Map<String, Value>> {
        let text = match (&self.input, &self.udf) {
            (Input::Json, None) => std::str::from_utf8(value).ok()?.to_string(),
            (Input::Json, Some(udf)) => match udf.call(std::str::from_utf8(value).ok()?) {
                UdfOutcome::Output(json) => json,
                _ => return None,
            },
            (Input::Proto(d), _) => return crate::proto::row::to_json(&d.decode(value).ok()?).ok(),
            (Input::Avro(_), _) => return None,
        };
        match serde_json::from_str(&text).ok()? {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The schema rows are mapped onto.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Map one message value into `out` (cleared first) as protobuf row bytes.
    ///
    /// A message with the layout learned from earlier ones takes the shaped path
    /// ([`super::json_shaped`]). Otherwise the usual message takes a fast path: its top level is parsed into borrowed
    /// `(key, raw value)` pairs and string values are copied straight from the message
    /// into the row, with no `serde_json::Value` in between. Anything else (a key with
    /// escapes, a value that is not a plain string, a message that is not an object)
    /// goes through [`Mapper::map_via_value`]. Both give the same bytes and the same
    /// errors: the pairs are kept in the same order as `serde_json::Map` (sorted by
    /// key, the last of duplicate keys winning), and a property test compares the two.
    pub fn map_into(&self, value: &[u8], out: &mut Vec<u8>) -> Result<(), RecordError> {
        out.clear();
        // The shaped path and the lean parser check UTF-8 as they read (each accepts
        // only valid UTF-8); the serde_json tiers after them check it first.
        if let Some(shape) = self.shapes.get() {
            if shape.map(&self.schema, value, out).is_some() {
                return self.check_size(out);
            }
            out.clear();
        }
        if let Some(fields) = super::json_flat::scan(value) {
            encode_borrowed(&self.schema, fields.iter(), out)?;
            self.shapes.offer(&self.schema, value, &fields);
        } else {
            let text = utf8(value)?;
            match serde_json::from_str::<BTreeMap<&str, &RawValue>>(text) {
                Ok(obj) => encode_borrowed(&self.schema, serde_fields(&obj).iter(), out)?,
                Err(_) => return self.map_via_value(text, out),
            }
        }
        self.check_size(out)
    }

    /// The reference path: parse into a `serde_json::Value`, then encode.
    pub fn map_via_value(&self, text: &str, out: &mut Vec<u8>) -> Result<(), RecordError> {
        out.clear();
        let v: Value = serde_json::from_str(text).map_err(|e| RecordError::InvalidJson(e.to_string()))?;
        let Value::Object(obj) = v else {
            return Err(RecordError::NotAnObject(kind(&v)));
        };
        encode_object(&self.schema, &obj, "", out)?;
        self.check_size(out)
    }

    fn check_size(&self, out: &[u8]) -> Result<(), RecordError> {
        if out.len() > self.max_row_bytes {
            return Err(RecordError::Oversize { bytes: out.len(), limit: self.max_row_bytes });
        }
        Ok(())
    }

    /// Map one message value to new row bytes.
    pub fn map(&self, value: &[u8]) -> Result<Vec<u8>, RecordError> {
        let mut out = Vec::with_capacity(value.len() + 16);
        self.map_into(value, &mut out)?;
        Ok(out)
    }
}

/// Validate a message as UTF-8 with SIMD; std's check only names the error's position.
fn utf8(value: &[u8]) -> Result<&str, RecordError> {
    match simdutf8::basic::from_utf8(value) {
        Ok(text) => Ok(text),
        Err(_) => Err(RecordError::NotUtf8(std::str::from_utf8(value).err().map_or(0, |e| e.valid_up_to()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka_to_bq::map::json_row::plain_integer;
    use serde_json::json;

    fn mapper() -> Mapper {
        let s = Schema::from_json(&json!([
            {"name": "logStreamId", "type": "INTEGER", "mode": "REQUIRED"},
            {"name": "message", "type": "STRING"},
            {"name": "score", "type": "FLOAT"},
            {"name": "ok", "type": "BOOLEAN"},
            {"name": "ts", "type": "TIMESTAMP"},
            {"name": "day", "type": "DATE"},
            {"name": "tags", "type": "STRING", "mode": "REPEATED"},
            {"name": "raw", "type": "BYTES"},
            {"name": "loc", "type": "RECORD", "fields": [{"name": "lat", "type": "FLOAT", "mode": "REQUIRED"}]}
        ]))
        .unwrap();
        Mapper::new(s, 1000)
    }

    fn err(v: &[u8]) -> RecordError {
        mapper().map(v).unwrap_err()
    }

    #[test]
    fn good_rows_encode_and_keys_match_case_insensitively() {
        let m = mapper();
        let a = m.map(br#"{"LOGSTREAMID": 7, "Message": "hi", "tags": ["a","b"], "loc": {"LAT": 1.5}, "ts": "2024-01-31 12:00:00.25 UTC", "day": "1970-01-03", "raw": "AAE=", "ok": "TRUE", "score": "2.5"}"#).unwrap();
        assert!(!a.is_empty());
        // The same message maps to the same bytes (exactly-once relies on it).
        assert_eq!(a, m.map(br#"{"LOGSTREAMID": 7, "Message": "hi", "tags": ["a","b"], "loc": {"LAT": 1.5}, "ts": "2024-01-31 12:00:00.25 UTC", "day": "1970-01-03", "raw": "AAE=", "ok": "TRUE", "score": "2.5"}"#).unwrap());
        // Integers as strings and nulls for nullable columns are accepted, as in Beam.
        assert!(m.map(br#"{"logStreamId": "12", "message": null}"#).is_ok());
    }

    /// NaN and the infinities as BigQuery's JSON names them reach a FLOAT column as those
    /// doubles (the Protobuf path hands them over so: issue 62, item 9).
    #[test]
    fn a_float_column_takes_nan_and_the_infinities_by_name() {
        let m = mapper();
        let finite = m.map(br#"{"logStreamId": 1, "score": 0.5}"#).unwrap();
        let at = finite.len() - 8;
        assert_eq!(f64::from_le_bytes(finite[at..].try_into().unwrap()), 0.5);
        for (name, want) in [("NaN", f64::NAN), ("Infinity", f64::INFINITY), ("-Infinity", f64::NEG_INFINITY)] {
            let row = m.map(format!(r#"{{"logStreamId": 1, "score": "{name}"}}"#).as_bytes()).unwrap();
            let got = f64::from_le_bytes(row[row.len() - 8..].try_into().unwrap());
            assert!(got == want || (got.is_nan() && want.is_nan()), "{name}: {got}");
        }
    }

    #[test]
    fn every_failure_class_is_named() {
        assert_eq!(err(&[0x7b, 0xff, 0x7d]).class(), "not_utf8");
        assert_eq!(err(b"{not json").class(), "invalid_json");
        assert_eq!(err(b"[1,2]"), RecordError::NotAnObject("an array"));
        assert_eq!(err(br#"{"logStreamId": 1, "colour": "red"}"#), RecordError::UnknownField("colour".into()));
        let e = err(br#"{"logStreamId": "abc"}"#);
        assert_eq!(e.class(), "wrong_type");
        assert!(e.to_string().starts_with("field logStreamId: expected a 64-bit integer"), "{e}");
        assert_eq!(err(br#"{"message": "x"}"#), RecordError::MissingRequired("logStreamId".into()));
        assert_eq!(err(br#"{"logStreamId": null}"#), RecordError::MissingRequired("logStreamId".into()));
        assert_eq!(err(br#"{"logStreamId": 1, "loc": {}}"#), RecordError::MissingRequired("loc.lat".into()));
        assert_eq!(
            err(br#"{"logStreamId": 1, "loc": {"lat": 1, "lon": 2}}"#),
            RecordError::UnknownField("loc.lon".into())
        );
        assert_eq!(err(br#"{"logStreamId": 1, "tags": "a"}"#).class(), "wrong_type");
        assert_eq!(err(br#"{"logStreamId": 1, "tags": ["a", null]}"#).class(), "wrong_type");
        assert_eq!(err(br#"{"logStreamId": 1, "ts": "yesterday"}"#).class(), "wrong_type");
        assert_eq!(err(br#"{"logStreamId": 1, "day": "31/01/2024"}"#).class(), "wrong_type");
        assert_eq!(err(br#"{"logStreamId": 1, "raw": "!!"}"#).class(), "wrong_type");
        assert_eq!(err(br#"{"logStreamId": 1.5}"#).class(), "wrong_type");
        assert_eq!(err(br#"{"logStreamId": 1, "message": {"a": 1}}"#).class(), "wrong_type");
        let big = format!(r#"{{"logStreamId": 1, "message": "{}"}}"#, "x".repeat(2000));
        assert!(matches!(err(big.as_bytes()), RecordError::Oversize { limit: 1000, .. }));
    }

    #[test]
    fn integers_take_the_fast_path_only_where_serde_json_reads_an_i64() {
        for (raw, want) in [("0", Some(0)), ("-12", Some(-12)), ("9223372036854775807", Some(i64::MAX))] {
            assert_eq!(plain_integer(raw), want, "{raw}");
        }
        assert_eq!(plain_integer("-9223372036854775808"), Some(i64::MIN));
        for raw in ["-0", "9223372036854775808", "1.0", "1e3", "-", "", "\"7\""] {
            assert_eq!(plain_integer(raw), None, "{raw}");
        }
        // Both paths agree, -0 included (a wrong type on both).
        let m = mapper();
        for v in
            [&br#"{"logStreamId": -0}"#[..], br#"{"logStreamId": 12}"#, br#"{"logStreamId": 18446744073709551615}"#]
        {
            let text = std::str::from_utf8(v).unwrap();
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let fast = m.map_into(v, &mut a).map_err(|e| e.to_string());
            let slow = m.map_via_value(text, &mut b).map_err(|e| e.to_string());
            assert_eq!(fast, slow, "{text}");
            assert_eq!(a, b, "{text}");
        }
    }

    use proptest::strategy::Strategy;

    #[test]
    fn escaped_strings_and_keys_take_the_reference_path_and_decode() {
        let s = Schema::from_json(&json!([{"name": "a", "type": "STRING"}, {"name": "b", "type": "STRING"}])).unwrap();
        let m = Mapper::new(s, 10_000);
        for text in
            [r#"{"a": "x\"y"}"#, r#"{"a": "caf\u00e9", "b": "plain"}"#, r#"{"\u0062": "k"}"#, r#"{"a": "p", "a": "q"}"#]
        {
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            m.map_into(text.as_bytes(), &mut fast).unwrap();
            m.map_via_value(text, &mut slow).unwrap();
            assert_eq!(fast, slow, "{text}");
        }
        let row = m.map(br#"{"a": "x\"y"}"#).unwrap();
        assert_eq!(&row[2..], b"x\"y", "the escape is decoded");
    }

    #[test]
    fn the_seed_with_its_number_quoted_as_googles_generator_writes_it_maps_to_the_same_row() {
        let schema = Schema::from_json(&json!([
            {"name": "logStreamId", "type": "INTEGER"}, {"name": "message", "type": "STRING"}
        ]))
        .unwrap();
        let m = Mapper::new(schema, 10_000);
        for id in 0..50 {
            let quoted = crate::local::seed_quoted_message(id, 7, 40);
            assert!(quoted.starts_with(br#"{"logStreamId":""#), "{}", String::from_utf8_lossy(&quoted));
            assert_eq!(m.map(&quoted).unwrap(), m.map(&crate::local::seed_shape_message(id, 7, 40)).unwrap());
        }
    }

    /// Columns `a`, `b` and `c`: each a (type index into `types`, REQUIRED?) pair.
    fn abc_schema(cols: &[(usize, usize)], types: &[&str]) -> Schema {
        let modes = ["NULLABLE", "REQUIRED"];
        let fields: Vec<serde_json::Value> = cols
            .iter()
            .zip(["a", "b", "c"])
            .map(|((t, m), name)| serde_json::json!({"name": name, "type": types[*t], "mode": modes[*m]}))
            .collect();
        Schema::from_json(&serde_json::Value::Array(fields)).expect("three distinct columns")
    }

    #[test]
    fn the_seeds_layout_is_learned_and_later_messages_take_the_shaped_path() {
        let schema = Schema::from_json(&json!([
            {"name": "logStreamId", "type": "INTEGER"}, {"name": "message", "type": "STRING"}
        ]))
        .unwrap();
        for make in [crate::local::seed_shape_message, crate::local::seed_quoted_message] {
            let m = Mapper::new(schema.clone(), 10_000);
            let first = m.map(&make(0, 7, 40)).unwrap();
            let shape = m.shapes.get().expect("the first message's layout is learned");
            for id in 1..50 {
                let msg = make(id, 7, 40);
                let (mut shaped, mut lean) = (Vec::new(), Vec::new());
                assert!(shape.map(m.schema(), &msg, &mut shaped).is_some());
                Mapper::new(schema.clone(), 10_000).map_into(&msg, &mut lean).unwrap();
                assert_eq!(shaped, lean);
                assert_eq!(m.map(&msg).unwrap(), lean);
            }
            assert_eq!(m.map(&make(0, 7, 40)).unwrap(), first);
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = mapper().map(&bytes);
        }

        /// Arbitrary bytes against arbitrary schemas (every type and mode, nested
        /// records): a row, or a bad record with a non-empty reason and a class.
        #[test]
        fn arbitrary_bytes_against_arbitrary_schemas_map_or_give_a_reason(
            cols in proptest::collection::vec((0usize..10, 0usize..3, "[a-z]{1,6}"), 1..6),
            value in proptest::prop_oneof![
                proptest::collection::vec(proptest::num::u8::ANY, 0..120),
                r#"\{("[a-z]{1,6}": ("[a-z]*"|-?[0-9]{1,22}|true|null|\[[0-9, ]*\]|\{"[a-z]{1,3}": [0-9]\}|"2024-0[1-9]-1[0-9]( 10:00:00)?"|[0-9]\.[0-9]e[0-9]{1,3}), ){0,6}"x": 1\}"#.prop_map(String::into_bytes),
            ],
        ) {
            let types = ["STRING", "BYTES", "INTEGER", "FLOAT", "BOOLEAN", "TIMESTAMP", "DATE", "NUMERIC", "JSON", "RECORD"];
            let modes = ["NULLABLE", "REQUIRED", "REPEATED"];
            let fields: Vec<serde_json::Value> = cols
                .iter()
                .map(|(t, m, name)| {
                    let mut f = serde_json::json!({"name": name, "type": types[*t], "mode": modes[*m]});
                    if types[*t] == "RECORD" {
                        f["fields"] = serde_json::json!([{"name": "a", "type": "INTEGER"}, {"name": "b", "type": "STRING", "mode": "REPEATED"}]);
                    }
                    f
                })
                .collect();
            let Ok(schema) = Schema::from_json(&serde_json::Value::Array(fields)) else { return Ok(()) };
            match Mapper::new(schema, 10_000).map(&value) {
                Ok(row) => proptest::prop_assert!(row.len() <= 10_000),
                Err(e) => {
                    proptest::prop_assert!(!e.to_string().is_empty());
                    proptest::prop_assert!(!e.class().is_empty());
                }
            }
        }

        /// The fast path and the reference path agree byte for byte and error for error,
        /// including escaped keys and strings, duplicate and differently cased keys,
        /// nulls, numbers in string columns, nested records and non-objects.
        #[test]
        fn the_borrowed_fast_path_matches_the_value_path(
            cols in proptest::collection::vec((0usize..10, 0usize..3), 3),
            body in proptest::collection::vec(
                (
                    "[a-cA-C]|\\\\u0062",
                    r#""[a-z ]{0,8}"|"[a-z]\\"[a-z]"|"caf\\u00e9"|-?[0-9]{1,19}|[0-9]\.[0-9]|true|null|\[("x"|[0-9]|null)?\]|\{"a": [0-9]\}|"2024-01-1[0-9]"|"QUJD""#,
                ),
                0..7,
            ),
            top in proptest::prop_oneof![proptest::strategy::Just(true), proptest::strategy::Just(false)],
        ) {
            let types = ["STRING", "BYTES", "INTEGER", "FLOAT", "BOOLEAN", "TIMESTAMP", "DATE", "NUMERIC", "JSON", "RECORD"];
            let modes = ["NULLABLE", "REQUIRED", "REPEATED"];
            let fields: Vec<serde_json::Value> = cols
                .iter()
                .zip(["a", "b", "c"])
                .map(|((t, m), name)| {
                    let mut f = serde_json::json!({"name": name, "type": types[*t], "mode": modes[*m]});
                    if types[*t] == "RECORD" {
                        f["fields"] = serde_json::json!([{"name": "a", "type": "INTEGER"}]);
                    }
                    f
                })
                .collect();
            let schema = Schema::from_json(&serde_json::Value::Array(fields)).expect("three distinct columns");
            let pairs: Vec<String> = body.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
            let text = if top { format!("{{{}}}", pairs.join(", ")) } else { format!("[{}]", pairs.len()) };
            let m = Mapper::new(schema, 10_000);
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            let a = m.map_into(text.as_bytes(), &mut fast).map(|()| fast);
            let b = m.map_via_value(&text, &mut slow).map(|()| slow);
            proptest::prop_assert_eq!(a, b, "{}", text);
        }

        #[test]
        fn never_panics_on_arbitrary_json_objects(s in r#"\{("[a-zA-Z]{1,8}": ("[a-z]*"|-?[0-9]{1,20}|true|null|\[\]|\{\}|[0-9]\.[0-9]), ){0,5}"logStreamId": [0-9]{1,5}\}"#) {
            let _ = mapper().map(s.as_bytes());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]
        /// The lean parser ([`super::super::json_flat`]) against serde_json's borrowed
        /// map and the value path, on the syntax it must accept or leave alone:
        /// whitespace JSON does and does not allow, control characters in strings,
        /// leading zeros, `-0`, integers past i64, quoted integers with spaces, floats,
        /// duplicate keys, trailing commas and trailing text. Same rows, same errors.
        #[test]
        fn the_lean_parser_matches_serde_json_byte_for_byte(
            cols in proptest::collection::vec((0usize..5, 0usize..2), 3),
            body in proptest::collection::vec(
                (
                    "[a-cA-C]|a\\u0062|é",
                    r#""[a-z ]{0,6}"|"x\\ty"|"x	y"|"x\x01y"|"x\\u0001y"|" -?[0-9]{1,3} "|"1e3"|-?0[0-9]?|-?[1-9][0-9]{0,19}|-|[0-9]\.[0-9]|[0-9]e[0-9]|true|false|null|nul|\[\]|\{\}"#,
                    proptest::prop_oneof![8 => "[ \t\n\r]{0,2}", 1 => "\x0b|\x0c"],
                ),
                0..6,
            ),
            tail in proptest::prop_oneof![6 => proptest::strategy::Just(String::new()), 1 => r"[,x}]|[ \n]{1,2}".prop_map(String::from)],
        ) {
            let schema = abc_schema(&cols, &["STRING", "INTEGER", "FLOAT", "BOOLEAN", "JSON"]);
            let pairs: Vec<String> = body.iter().map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}")).collect();
            let text = format!("{{{}}}{tail}", pairs.join(","));
            let m = Mapper::new(schema, 10_000);
            let (mut lean, mut serde_tier, mut slow) = (Vec::new(), Vec::new(), Vec::new());
            let a = m.map_into(text.as_bytes(), &mut lean).map(|()| lean);
            let b = match serde_json::from_str::<BTreeMap<&str, &RawValue>>(&text) {
                Ok(obj) => encode_borrowed(m.schema(), serde_fields(&obj).iter(), &mut serde_tier).map(|()| serde_tier),
                Err(_) => m.map_via_value(&text, &mut serde_tier).map(|()| serde_tier),
            };
            let c = m.map_via_value(&text, &mut slow).map(|()| slow);
            proptest::prop_assert_eq!(&a, &b, "{}", text);
            proptest::prop_assert_eq!(&a, &c, "{}", text);
        }

        /// Bytes that are not ASCII, valid UTF-8 or not, inside the seed's string, its
        /// key and anywhere in the message, after a mapper has learned the seed's layout
        /// (the number plain or quoted): the shaped path and the lean parser, which check
        /// UTF-8 as they read, give the same row or the same error (`not_utf8` at the
        /// same position) as checking it first and taking the value path.
        #[test]
        fn the_paths_that_check_utf8_as_they_read_match_checking_it_first(
            quoted in proptest::bool::ANY,
            id in 0u64..100_000,
            body in proptest::collection::vec(
                proptest::prop_oneof![
                    4 => "[a-z ]{0,40}".prop_map(String::into_bytes),
                    1 => proptest::strategy::Just("é".as_bytes().to_vec()),
                    1 => proptest::strategy::Just("日本".as_bytes().to_vec()),
                    1 => proptest::strategy::Just("😀".as_bytes().to_vec()),
                    1 => proptest::collection::vec(proptest::num::u8::ANY, 1..3),
                    1 => proptest::strategy::Just(vec![0xed, 0xa0, 0x80]),
                    1 => proptest::strategy::Just(br#"\n"#.to_vec()),
                ],
                0..8,
            ),
            key in proptest::prop_oneof![4 => proptest::strategy::Just("message"), 1 => proptest::strategy::Just("méssage")],
            stray in proptest::option::of((proptest::num::usize::ANY, 0x80u8..=0xff)),
        ) {
            let schema = Schema::from_json(&json!([
                {"name": "logStreamId", "type": "INTEGER"}, {"name": "message", "type": "STRING"}
            ]))
            .unwrap();
            let m = Mapper::new(schema, 10_000);
            let make = if quoted { crate::local::seed_quoted_message } else { crate::local::seed_shape_message };
            m.map(&make(0, 7, 40)).unwrap();
            proptest::prop_assert!(m.shapes.get().is_some(), "the layout is learned");
            let id = if quoted { format!("\"{id}\"") } else { id.to_string() };
            let mut msg = format!(r#"{{"logStreamId":{id},"{key}":""#).into_bytes();
            msg.extend(body.concat());
            msg.extend_from_slice(b"\"}");
            if let Some((at, byte)) = stray {
                msg.insert(at % (msg.len() + 1), byte);
            }
            let mut got = Vec::new();
            let a = m.map_into(&msg, &mut got).map(|()| got);
            let mut want = Vec::new();
            let b = utf8(&msg).and_then(|text| m.map_via_value(text, &mut want)).map(|()| want);
            proptest::prop_assert_eq!(a, b, "{}", String::from_utf8_lossy(&msg));
        }

        /// The shaped path ([`super::super::json_shaped`]) against the value path: a
        /// mapper maps a first message (and may learn its layout), then a second with the
        /// same keys and spacing and other values, or another layout. Same rows, same
        /// errors, whichever path the second took.
        #[test]
        fn the_shaped_path_matches_serde_json_byte_for_byte(
            cols in proptest::collection::vec(
                (proptest::prop_oneof![4 => 0usize..2, 1 => proptest::strategy::Just(2usize)], proptest::prop_oneof![4 => proptest::strategy::Just(0usize), 1 => proptest::strategy::Just(1usize)]),
                3,
            ),
            keys in proptest::collection::vec(
                ("[a-cA-C]|a\\\\u0062", proptest::prop_oneof![8 => "", 2 => "[ \t\n]{1,2}"]),
                1..5,
            ),
            values in proptest::collection::vec(
                (
                    proptest::prop_oneof![6 => r#""[a-z ]{0,6}"|-?[1-9][0-9]{0,19}|" -?[0-9]{1,3} ""#, 1 => r#""x\\ty"|"x\x01y"|-?0[0-9]?|[0-9]\.[0-9]|true|null"#],
                    proptest::prop_oneof![6 => r#""[a-z ]{0,6}"|-?[1-9][0-9]{0,19}|" -?[0-9]{1,3} ""#, 1 => r#""x\\ty"|"x\x01y"|-?0[0-9]?|[0-9]\.[0-9]|true|null"#],
                ),
                5,
            ),
            plain_first in proptest::prop_oneof![proptest::strategy::Just(true), proptest::strategy::Just(false)],
            tail in proptest::prop_oneof![6 => proptest::strategy::Just(String::new()), 1 => r"[ ]|,".prop_map(String::from)],
        ) {
            let schema = abc_schema(&cols, &["STRING", "INTEGER", "FLOAT"]);
            let text = |second: bool| {
                let pairs: Vec<String> = keys
                    .iter()
                    .zip(&values)
                    .map(|((k, w), (v1, v2))| {
                        // The first message's values are plain more often, so layouts are learned.
                        let v = match (second, plain_first) {
                            (true, _) => v2.clone(),
                            (false, true) if v1.starts_with('"') && !v1.contains('\\') => v1.clone(),
                            (false, true) => "7".to_string(),
                            (false, false) => v1.clone(),
                        };
                        format!("{w}\"{k}\"{w}:{w}{v}")
                    })
                    .collect();
                format!("{{{}}}{}", pairs.join(","), if second { tail.as_str() } else { "" })
            };
            let m = Mapper::new(schema, 10_000);
            let _ = m.map(text(false).as_bytes());
            let second = text(true);
            let (mut got, mut want) = (Vec::new(), Vec::new());
            let a = m.map_into(second.as_bytes(), &mut got).map(|()| got);
            let b = m.map_via_value(&second, &mut want).map(|()| want);
            proptest::prop_assert_eq!(a, b, "{} after {}", second, text(false));
        }
    }
}
