//! Dead-letter rows in Google's schema (`SchemaUtils.DEADLETTER_SCHEMA`).
//!
//! A dead-letter row is a pure function of the Kafka record and the error, like a
//! table row, so that a replayed batch writes byte-identical dead-letter rows and
//! the DLQ stream's offsets deduplicate them. `timestamp` is therefore the Kafka
//! record's timestamp (not the wall clock).

use crate::bigquery::proto::{put_bytes, put_varint};
use crate::bigquery::schema::Schema;
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

/// The columns dead-letter rows are written with: the table's columns without
/// `attributes`, which the Kafka paths never fill (Storage Write accepts a writer
/// schema that leaves out nullable and repeated columns; bqemulator cannot take an
/// empty repeated RECORD).
pub fn write_schema() -> Schema {
    let mut cols = schema().columns;
    cols.retain(|c| c.name != "attributes");
    Schema::new(cols)
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
    /// Kafka timestamp in milliseconds, when the record has one.
    pub timestamp_ms: Option<i64>,
    /// The key bytes.
    pub key: Option<&'a [u8]>,
    /// The value bytes.
    pub value: &'a [u8],
}

/// The most bytes of a record's value a dead-letter row carries. The value appears
/// twice (in `payloadString` and `payloadBytes`), and the row must fit in one
/// AppendRows request (under 10 MB, storage.proto), with room for key and message.
pub const MAX_DLQ_PAYLOAD_BYTES: usize = 1024 * 1024;

/// Encode the dead-letter row for `rec` failing with `error` (which names the stage).
/// A value over [`MAX_DLQ_PAYLOAD_BYTES`] is cut to that length and the error says so.
pub fn encode(rec: &RecordRef<'_>, stage: &str, error: &str, out: &mut Vec<u8>) {
    out.clear();
    let (value, key, error) = if rec.value.len() > MAX_DLQ_PAYLOAD_BYTES
        || rec.key.is_some_and(|k| k.len() > MAX_DLQ_PAYLOAD_BYTES)
    {
        let note = format!(
            "{error} (dead-letter payload truncated: the record's value has {} bytes and its key {}; the first {MAX_DLQ_PAYLOAD_BYTES} of each are kept)",
            rec.value.len(),
            rec.key.map_or(0, <[u8]>::len)
        );
        (
            &rec.value[..rec.value.len().min(MAX_DLQ_PAYLOAD_BYTES)],
            rec.key.map(|k| &k[..k.len().min(MAX_DLQ_PAYLOAD_BYTES)]),
            std::borrow::Cow::Owned(note),
        )
    } else {
        (rec.value, rec.key, std::borrow::Cow::Borrowed(error))
    };
    // payloadString: the Kafka record as JSON, as Google's KafkaRecordErrorConverters writes it.
    let payload = json!({
        "topic": rec.topic,
        "partition": rec.partition,
        "offset": rec.offset,
        "timestamp": rec.timestamp_ms,
        "key": key.map(|k| String::from_utf8_lossy(k).into_owned()),
        "value": String::from_utf8_lossy(value),
    })
    .to_string();
    put_varint(1, (rec.timestamp_ms.unwrap_or(0).saturating_mul(1000)) as u64, out);
    put_bytes(2, payload.as_bytes(), out);
    put_bytes(3, value, out);
    // Field numbers follow write_schema(): errorMessage is 4, stacktrace 5.
    put_bytes(4, error.as_bytes(), out);
    let trace = format!("flexrun kafka-to-bq: {stage} failed for {}/{}@{}", rec.topic, rec.partition, rec.offset);
    put_bytes(5, trace.as_bytes(), out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dlq_rows_are_deterministic_and_carry_the_reason() {
        let rec =
            RecordRef { topic: "t", partition: 3, offset: 42, timestamp_ms: Some(5), key: None, value: &[0xff, 0x00] };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        encode(&rec, "transform", "message value is not valid UTF-8", &mut a);
        encode(&rec, "transform", "message value is not valid UTF-8", &mut b);
        assert_eq!(a, b);
        let text = String::from_utf8_lossy(&a);
        assert!(text.contains("not valid UTF-8"));
        assert!(text.contains("\"offset\":42"));
        assert_eq!(schema().columns.len(), 6);
        let w = write_schema();
        assert_eq!(
            w.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["timestamp", "payloadString", "payloadBytes", "errorMessage", "stacktrace"]
        );
    }

    #[test]
    fn a_huge_record_is_truncated_in_its_dead_letter_row_and_the_reason_says_so() {
        let value = vec![b'\\'; 15_000_000];
        let rec = RecordRef { topic: "t", partition: 0, offset: 1, timestamp_ms: None, key: Some(b"k"), value: &value };
        let mut out = Vec::new();
        encode(&rec, "transform", "Row payload too large", &mut out);
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
}
