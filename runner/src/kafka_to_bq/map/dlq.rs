//! Dead-letter rows in Google's schema (`SchemaUtils.DEADLETTER_SCHEMA`).
//!
//! A dead-letter row is a pure function of the Kafka record, the error and the batch's
//! processing time (kept in the offset log), like a table row, so that a replayed batch
//! writes byte-identical dead-letter rows and the DLQ stream's offsets deduplicate them.

use crate::bigquery::proto::{put_bytes, put_varint};
use crate::bigquery::schema::Schema;
use base64::Engine;
use serde_json::json;

/// The dead-letter table's columns: timestamp, payloadString, payloadBytes,
/// attributes (never filled on the Kafka paths), errorMessage, stacktrace.
pub fn schema() -> Schema {
    Schema::from_json(&json!([
        {"name": "timestamp", "type": "TIMESTAMP", "mode": "REQUIRED"},
        {"name": "payloadString", "type": "STRING", "mode": "REQUIRED"},
        {"name": "payloadBytes", "type": "BYTES", "mode": "REQUIRED"},
        {"name": "attributes", "type": "RECORD", "mode": "REPEATED", "fields": [
            {"name": "key", "type": "STRING", "mode": "NULLABLE"},
            {"name": "value", "type": "STRING", "mode": "NULLABLE"}
        ]},
        {"name": "errorMessage", "type": "STRING", "mode": "NULLABLE"},
        {"name": "stacktrace", "type": "STRING", "mode": "NULLABLE"}
    ]))
    .expect("the dead-letter schema is valid")
}

/// The columns dead-letter rows are written with: all of Google's. Google's Kafka
/// paths leave `attributes` empty; flexrun fills it with where the record came from
/// ([`Origin`]), so that one dead-letter table can serve several jobs and topics and a
/// replay takes only its own job's rows.
pub fn write_schema() -> Schema {
    schema()
}

/// The `attributes` keys every dead-letter row carries.
pub mod attr {
    /// The job that read the record (`--job-name`; for a job of several topics, the job's
    /// own name, not the topic pipeline's).
    pub const JOB: &str = "job";
    /// The topic.
    pub const TOPIC: &str = "topic";
    /// The topic's id (KIP-516), when the broker gives one.
    pub const TOPIC_ID: &str = "topic_id";
    /// The partition.
    pub const PARTITION: &str = "partition";
    /// The offset.
    pub const OFFSET: &str = "offset";
    /// The leader epoch the record was written in (KIP-320), when known.
    pub const LEADER_EPOCH: &str = "leader_epoch";
}

/// Where a dead-lettered record came from beyond its coordinates: the job, the log's
/// topic id and the record's leader epoch.
#[derive(Debug, Clone, Copy, Default)]
pub struct Origin<'a> {
    /// The job's name.
    pub job: &'a str,
    /// The topic's id.
    pub topic_id: Option<&'a str>,
    /// The record's leader epoch (-1: unknown).
    pub leader_epoch: i32,
}

/// How the record was read, which decides how Google renders it: the JSON path reads
/// `KafkaRecord<String, String>`, the Avro paths `KafkaRecord<byte[], byte[]>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// Key and value as UTF-8 text (invalid bytes become U+FFFD).
    Text,
    /// Key and value as bytes (base64 in JSON).
    Bytes,
}

/// Kafka's timestamp type, as Beam's `KafkaTimestampType` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// No timestamp (the timestamp is -1).
    None,
    /// Set by the producer.
    CreateTime,
    /// Set by the broker.
    LogAppendTime,
}

impl TimestampType {
    fn name(self) -> &'static str {
        match self {
            TimestampType::None => "NO_TIMESTAMP_TYPE",
            TimestampType::CreateTime => "CREATE_TIME",
            TimestampType::LogAppendTime => "LOG_APPEND_TIME",
        }
    }

    /// The enum's ordinal in Beam (`NO_TIMESTAMP_TYPE, CREATE_TIME, LOG_APPEND_TIME`).
    fn ordinal(self) -> u64 {
        match self {
            TimestampType::None => 0,
            TimestampType::CreateTime => 1,
            TimestampType::LogAppendTime => 2,
        }
    }
}

/// Where a failed record came from.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// Topic name.
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Kafka timestamp in milliseconds (-1 when there is none).
    pub timestamp_ms: i64,
    /// Its type.
    pub timestamp_type: TimestampType,
    /// The key bytes.
    pub key: Option<&'a [u8]>,
    /// The value bytes.
    pub value: &'a [u8],
    /// Header names and values.
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
    /// When the batch was first processed (ms; kept in the offset log so a replay writes
    /// the same row), or None for batches logged before flexrun kept it.
    pub processed_ms: Option<i64>,
    /// How the record was read.
    pub payload: Payload,
    /// The job and log it came from (the `attributes` column).
    pub origin: Origin<'a>,
}

/// The most bytes of a record's value a dead-letter row carries. The value appears
/// twice (in `payloadString` and `payloadBytes`), and the row must fit in one
/// AppendRows request (under 10 MB, storage.proto), with room for key and message.
pub const MAX_DLQ_PAYLOAD_BYTES: usize = 1024 * 1024;
/// The most bytes of headers (names and values) a dead-letter row carries; headers
/// past it are left out, in order, and the error says how many. Header values appear
/// twice too (base64 in `payloadString`, raw in `payloadBytes` on the Avro paths).
pub const MAX_DLQ_HEADER_BYTES: usize = 256 * 1024;
/// The most bytes of the error message a dead-letter row carries.
pub const MAX_DLQ_ERROR_BYTES: usize = 64 * 1024;

/// The headers that fit in [`MAX_DLQ_HEADER_BYTES`], in order.
fn kept_headers<'a>(headers: &'a [(&'a str, Option<&'a [u8]>)]) -> &'a [(&'a str, Option<&'a [u8]>)] {
    let mut bytes = 0;
    let n = headers
        .iter()
        .take_while(|(k, v)| {
            bytes += k.len() + v.map_or(0, <[u8]>::len);
            bytes <= MAX_DLQ_HEADER_BYTES
        })
        .count();
    &headers[..n]
}

/// `s` cut to at most `max` bytes on a character boundary.
fn cut_str(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Jackson's string escaping: `"`, `\\` and control characters; nothing else.
fn jackson_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn field_text(rec: &RecordRef<'_>, bytes: Option<&[u8]>, out: &mut String) {
    match (bytes, rec.payload) {
        (None, _) => out.push_str("null"),
        (Some(b), Payload::Text) => jackson_string(&String::from_utf8_lossy(b), out),
        (Some(b), Payload::Bytes) => jackson_string(&base64::engine::general_purpose::STANDARD.encode(b), out),
    }
}

/// `payloadString`: the Kafka record as Google's `KafkaRecordPayloadExtractor` renders
/// it, `ObjectMapper().writer().withDefaultPrettyPrinter()` over Beam's `KafkaRecord`
/// (properties in declaration order, two-space indent, `" : "`, `[ ]` when empty).
/// Jackson cannot serialise Kafka's header objects, so Google falls back to
/// `KafkaRecord@<hash>` for a record with headers; flexrun renders them instead, as
/// `{"key", "value"}` objects (value in base64).
pub fn payload_string(rec: &RecordRef<'_>) -> String {
    let mut s = String::with_capacity(rec.value.len() + 200);
    s.push_str("{\n  \"topic\" : ");
    jackson_string(rec.topic, &mut s);
    s.push_str(&format!(",\n  \"partition\" : {},\n  \"offset\" : {},\n  \"headers\" : ", rec.partition, rec.offset));
    if rec.headers.is_empty() {
        s.push_str("[ ]");
    } else {
        s.push_str("[ ");
        for (i, (k, v)) in rec.headers.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            s.push_str("{\n    \"key\" : ");
            jackson_string(k, &mut s);
            s.push_str(",\n    \"value\" : ");
            match v {
                Some(v) => jackson_string(&base64::engine::general_purpose::STANDARD.encode(v), &mut s),
                None => s.push_str("null"),
            }
            s.push_str("\n  }");
        }
        s.push_str(" ]");
    }
    s.push_str(",\n  \"kv\" : {\n    \"key\" : ");
    field_text(rec, rec.key, &mut s);
    s.push_str(",\n    \"value\" : ");
    field_text(rec, Some(rec.value), &mut s);
    s.push_str(&format!(
        "\n  }},\n  \"timestamp\" : {},\n  \"timestampType\" : \"{}\"\n}}",
        rec.timestamp_ms,
        rec.timestamp_type.name()
    ));
    s
}

fn varint(v: u64, out: &mut Vec<u8>) {
    prost::encoding::encode_varint(v, out);
}

fn nested_bytes(b: &[u8], out: &mut Vec<u8>) {
    varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

fn nullable_bytes(b: Option<&[u8]>, out: &mut Vec<u8>) {
    match b {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            nested_bytes(b, out);
        }
    }
}

/// `payloadBytes` on the Avro paths: Beam's `KafkaRecordCoder` encoding of the whole
/// record (topic, partition, offset, timestamp, timestamp type, headers, key, value),
/// which Beam's `BadRecord` keeps as `encodedRecord`. Derived from Beam's coder
/// sources (VarInt/VarLong, a 4-byte header count, nullable length-prefixed bytes);
/// not compared with bytes from a real job.
pub fn kafka_record_coder_bytes(rec: &RecordRef<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(rec.value.len() + rec.topic.len() + 64);
    nested_bytes(rec.topic.as_bytes(), &mut out);
    varint(rec.partition as u32 as u64, &mut out);
    varint(rec.offset as u64, &mut out);
    varint(rec.timestamp_ms as u64, &mut out);
    varint(rec.timestamp_type.ordinal(), &mut out);
    out.extend_from_slice(&(rec.headers.len() as u32).to_be_bytes());
    for (k, v) in rec.headers {
        nested_bytes(k.as_bytes(), &mut out);
        nested_bytes(v.unwrap_or_default(), &mut out);
    }
    nullable_bytes(rec.key, &mut out);
    nullable_bytes(Some(rec.value), &mut out);
    out
}

/// Encode the dead-letter row for `rec` failing with `error` (which names the stage).
/// A value or key over [`MAX_DLQ_PAYLOAD_BYTES`] is cut to that length, headers past
/// [`MAX_DLQ_HEADER_BYTES`] are left out and the error is cut to
/// [`MAX_DLQ_ERROR_BYTES`]; the error says what was cut. The row then fits one
/// AppendRows request however large the record was.
///
/// The columns as Google fills them:
/// - `timestamp`: processing time (Beam's default timestamp policy for KafkaIO), here
///   the time the batch was first processed, kept in the offset log for replays;
/// - `payloadString`: [`payload_string`];
/// - `payloadBytes`: the value's bytes on the JSON path (re-encoded from its UTF-8
///   text, as Google's `StringDeserializer` leaves it), [`kafka_record_coder_bytes`]
///   on the Avro paths;
/// - `errorMessage`: the error; `stacktrace`: where flexrun failed (there is no Java
///   stack to print).
pub fn encode(rec: &RecordRef<'_>, stage: &str, error: &str, out: &mut Vec<u8>) {
    out.clear();
    let mut notes = Vec::new();
    if rec.value.len() > MAX_DLQ_PAYLOAD_BYTES || rec.key.is_some_and(|k| k.len() > MAX_DLQ_PAYLOAD_BYTES) {
        notes.push(format!(
            "dead-letter payload truncated: the record's value has {} bytes and its key {}; the first {MAX_DLQ_PAYLOAD_BYTES} of each are kept",
            rec.value.len(),
            rec.key.map_or(0, <[u8]>::len)
        ));
    }
    let headers = kept_headers(rec.headers);
    if headers.len() < rec.headers.len() {
        let left: usize = rec.headers[headers.len()..].iter().map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len)).sum();
        notes.push(format!(
            "{} of its {} headers ({left} bytes) left out: a dead-letter row keeps {MAX_DLQ_HEADER_BYTES} bytes of headers",
            rec.headers.len() - headers.len(),
            rec.headers.len()
        ));
    }
    let error = cut_str(error, MAX_DLQ_ERROR_BYTES);
    let error = match notes.is_empty() {
        true => std::borrow::Cow::Borrowed(error),
        false => std::borrow::Cow::Owned(format!("{error} ({})", notes.join("; "))),
    };
    let cut = RecordRef {
        value: &rec.value[..rec.value.len().min(MAX_DLQ_PAYLOAD_BYTES)],
        key: rec.key.map(|k| &k[..k.len().min(MAX_DLQ_PAYLOAD_BYTES)]),
        headers,
        ..*rec
    };
    let when_ms = rec.processed_ms.unwrap_or(rec.timestamp_ms.max(0));
    put_varint(1, when_ms.saturating_mul(1000) as u64, out);
    put_bytes(2, payload_string(&cut).as_bytes(), out);
    match rec.payload {
        Payload::Text => put_bytes(3, String::from_utf8_lossy(cut.value).as_bytes(), out),
        Payload::Bytes => put_bytes(3, &kafka_record_coder_bytes(&cut), out),
    }
    // Field numbers follow write_schema(): attributes is 4, errorMessage 5, stacktrace 6.
    put_attributes(rec, out);
    put_bytes(5, error.as_bytes(), out);
    let trace = format!("flexrun kafka-to-bq: {stage} failed for {}/{}@{}", rec.topic, rec.partition, rec.offset);
    put_bytes(6, trace.as_bytes(), out);
}

/// The `attributes` column: one `{key, value}` entry per [`attr`] key that has a value.
fn put_attributes(rec: &RecordRef<'_>, out: &mut Vec<u8>) {
    let o = &rec.origin;
    let (partition, offset, epoch) = (rec.partition.to_string(), rec.offset.to_string(), o.leader_epoch.to_string());
    let pairs = [
        (attr::JOB, Some(o.job).filter(|j| !j.is_empty())),
        (attr::TOPIC, Some(rec.topic)),
        (attr::TOPIC_ID, o.topic_id),
        (attr::PARTITION, Some(partition.as_str())),
        (attr::OFFSET, Some(offset.as_str())),
        (attr::LEADER_EPOCH, (o.leader_epoch >= 0).then_some(epoch.as_str())),
    ];
    let mut entry = Vec::with_capacity(64);
    for (k, v) in pairs {
        let Some(v) = v else { continue };
        entry.clear();
        put_bytes(1, k.as_bytes(), &mut entry);
        put_bytes(2, v.as_bytes(), &mut entry);
        put_bytes(4, &entry, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec<'a>(value: &'a [u8], key: Option<&'a [u8]>, payload: Payload) -> RecordRef<'a> {
        RecordRef {
            topic: "orders",
            partition: 3,
            offset: 42,
            timestamp_ms: 1714566896123,
            timestamp_type: TimestampType::CreateTime,
            key,
            value,
            headers: &[],
            processed_ms: Some(1714566900000),
            payload,
            origin: Origin { job: "orders-job", topic_id: Some("Qmx1ZWJpcmQAAAAAAAAAAA"), leader_epoch: 4 },
        }
    }

    /// Decode a dead-letter row into its five columns (`attributes`, field 4, left out).
    fn columns(mut b: &[u8]) -> Vec<Vec<u8>> {
        use prost::encoding::{decode_key, decode_varint, WireType};
        let mut out = Vec::new();
        while !b.is_empty() {
            let (tag, wt) = decode_key(&mut b).unwrap();
            match wt {
                WireType::Varint => out.push(decode_varint(&mut b).unwrap().to_string().into_bytes()),
                _ => {
                    let n = decode_varint(&mut b).unwrap() as usize;
                    if tag != 4 {
                        out.push(b[..n].to_vec());
                    }
                    b = &b[n..];
                }
            }
        }
        out
    }

    /// The `attributes` entries of a row, as (key, value).
    fn attributes(mut b: &[u8]) -> Vec<(String, String)> {
        use prost::encoding::{decode_key, decode_varint, WireType};
        let mut out = Vec::new();
        while !b.is_empty() {
            let (tag, wt) = decode_key(&mut b).unwrap();
            if wt == WireType::Varint {
                decode_varint(&mut b).unwrap();
                continue;
            }
            let n = decode_varint(&mut b).unwrap() as usize;
            if tag == 4 {
                let mut e = &b[..n];
                let mut kv = Vec::new();
                while !e.is_empty() {
                    decode_key(&mut e).unwrap();
                    let m = decode_varint(&mut e).unwrap() as usize;
                    kv.push(String::from_utf8(e[..m].to_vec()).unwrap());
                    e = &e[m..];
                }
                out.push((kv[0].clone(), kv[1].clone()));
            }
            b = &b[n..];
        }
        out
    }

    #[test]
    fn a_json_dead_letter_row_matches_googles_shape_field_by_field() {
        let r = rec(b"{not json", None, Payload::Text);
        let mut row = Vec::new();
        encode(&r, "transform", "Failed to serialize json to table row: {not json", &mut row);
        let c = columns(&row);
        assert_eq!(c.len(), 5);
        // timestamp: processing time, in microseconds.
        assert_eq!(c[0], b"1714566900000000");
        // payloadString: Jackson's default pretty printer over Beam's KafkaRecord.
        let want = "{\n  \"topic\" : \"orders\",\n  \"partition\" : 3,\n  \"offset\" : 42,\n  \"headers\" : [ ],\n  \"kv\" : {\n    \"key\" : null,\n    \"value\" : \"{not json\"\n  },\n  \"timestamp\" : 1714566896123,\n  \"timestampType\" : \"CREATE_TIME\"\n}";
        assert_eq!(String::from_utf8(c[1].clone()).unwrap(), want);
        // payloadBytes: the value's bytes; errorMessage; stacktrace.
        assert_eq!(c[2], b"{not json");
        assert_eq!(c[3], b"Failed to serialize json to table row: {not json");
        assert_eq!(c[4], b"flexrun kafka-to-bq: transform failed for orders/3@42");
        // The same record always gives the same row (replays).
        let mut again = Vec::new();
        encode(&r, "transform", "Failed to serialize json to table row: {not json", &mut again);
        assert_eq!(row, again);
    }

    #[test]
    fn strings_are_escaped_as_jackson_does_and_bytes_become_base64_on_the_avro_paths() {
        let r = rec(b"a\"b\\c\n\x01\xff", Some(b"k"), Payload::Text);
        let s = payload_string(&r);
        assert!(s.contains("\"key\" : \"k\""), "{s}");
        assert!(s.contains("\"value\" : \"a\\\"b\\\\c\\n\\u0001\u{fffd}\""), "{s}");
        let avro = rec(&[0, 0, 0, 0, 1, 2], Some(b"k"), Payload::Bytes);
        let s = payload_string(&avro);
        assert!(s.contains("\"key\" : \"aw==\"") && s.contains("\"value\" : \"AAAAAAEC\""), "{s}");
        let h = [("trace", Some(&b"x"[..]))];
        let with_headers = RecordRef { headers: &h, ..avro };
        assert!(payload_string(&with_headers)
            .contains("\"headers\" : [ {\n    \"key\" : \"trace\",\n    \"value\" : \"eA==\"\n  } ]"));
    }

    #[test]
    fn avro_payload_bytes_are_the_kafka_record_coder_encoding() {
        let r = RecordRef { timestamp_ms: 5, ..rec(&[7, 8], Some(b"k"), Payload::Bytes) };
        let want: Vec<u8> = [
            &[6][..],
            b"orders", // topic
            &[3],
            &[42],
            &[5],
            &[1],          // partition, offset, timestamp, CREATE_TIME
            &[0, 0, 0, 0], // no headers
            &[1, 1],
            b"k",          // key present
            &[1, 2, 7, 8], // value present
        ]
        .concat();
        assert_eq!(kafka_record_coder_bytes(&r), want);
        let mut row = Vec::new();
        encode(&r, "transform", "bad", &mut row);
        assert_eq!(columns(&row)[2], want);
    }

    #[test]
    fn the_schema_has_googles_columns() {
        assert_eq!(
            write_schema().columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["timestamp", "payloadString", "payloadBytes", "attributes", "errorMessage", "stacktrace"]
        );
    }

    /// Issue 62, item 2: every dead-letter row names its job and log, so that a replay
    /// takes only its own job's rows from a table several jobs share.
    #[test]
    fn a_dead_letter_row_names_its_job_topic_log_and_coordinates_in_attributes() {
        let mut row = Vec::new();
        encode(&rec(b"x", None, Payload::Text), "transform", "bad", &mut row);
        let want = [
            ("job", "orders-job"),
            ("topic", "orders"),
            ("topic_id", "Qmx1ZWJpcmQAAAAAAAAAAA"),
            ("partition", "3"),
            ("offset", "42"),
            ("leader_epoch", "4"),
        ];
        assert_eq!(attributes(&row), want.map(|(k, v)| (k.to_string(), v.to_string())));
        let anon = RecordRef {
            origin: Origin { job: "", topic_id: None, leader_epoch: -1 },
            ..rec(b"x", None, Payload::Text)
        };
        encode(&anon, "transform", "bad", &mut row);
        let keys: Vec<String> = attributes(&row).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["topic", "partition", "offset"], "what is unknown is left out");
    }

    #[test]
    fn a_huge_record_is_truncated_in_its_dead_letter_row_and_the_reason_says_so() {
        let value = vec![b'\\'; 15_000_000];
        let r = rec(&value, Some(b"k"), Payload::Text);
        let mut out = Vec::new();
        encode(&r, "transform", "Row payload too large", &mut out);
        // JSON escaping doubles the backslashes in payloadString: still far under 10 MB.
        assert!(out.len() < 4 * MAX_DLQ_PAYLOAD_BYTES, "{} bytes", out.len());
        assert!(out.len() < crate::bigquery::write::MAX_REQUEST_ROW_BYTES);
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.contains(
                "Row payload too large (dead-letter payload truncated: the record's value has 15000000 bytes"
            ),
            "reason kept and truncation stated"
        );
    }

    /// Issue 27, item 6: headers were not bounded, so a record with a few megabytes of
    /// headers made a dead-letter row over the 10 MB request limit, which BigQuery
    /// refuses. Every part of the row is bounded now, whatever the record.
    #[test]
    fn a_dead_letter_row_fits_one_request_whatever_the_headers_and_error() {
        let big = vec![b'h'; 3 * 1024 * 1024];
        let headers: Vec<(&str, Option<&[u8]>)> = (0..4).map(|_| ("trace", Some(big.as_slice()))).collect();
        let value = vec![b'v'; 5 * 1024 * 1024];
        let huge_error = "é".repeat(1024 * 1024);
        for payload in [Payload::Text, Payload::Bytes] {
            let r = RecordRef { headers: &headers, ..rec(&value, Some(&value), payload) };
            let mut out = Vec::new();
            encode(&r, "write", &huge_error, &mut out);
            assert!(out.len() < crate::bigquery::write::MAX_REQUEST_ROW_BYTES, "{} bytes", out.len());
            let cols = columns(&out);
            let msg = String::from_utf8(cols[3].clone()).expect("the error is cut on a character boundary");
            assert!(msg.contains("4 of its 4 headers (12582932 bytes) left out"), "{}", &msg[msg.len() - 300..]);
            assert!(msg.contains("dead-letter payload truncated"));
        }
        let few: Vec<(&str, Option<&[u8]>)> = vec![("a", Some(b"1")), ("b", None)];
        let r = RecordRef { headers: &few, ..rec(b"{}", None, Payload::Text) };
        let mut out = Vec::new();
        encode(&r, "write", "bad", &mut out);
        assert_eq!(columns(&out)[3], b"bad", "small headers are kept whole and not noted");
    }
}
