//! Dead-letter rows in Google's schema (`SchemaUtils.DEADLETTER_SCHEMA`).
//!
//! A dead-letter row is a pure function of the Kafka record and the error, like a
//! table row, so that a replayed batch writes byte-identical dead-letter rows and
//! the DLQ stream's offsets deduplicate them. `timestamp` is therefore the Kafka
//! record's timestamp (not the wall clock).

use crate::bigquery::proto::{put_bytes, put_varint};
use crate::schema::Schema;
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

/// Encode the dead-letter row for `rec` failing with `error` (which names the stage).
pub fn encode(rec: &RecordRef<'_>, stage: &str, error: &str, out: &mut Vec<u8>) {
    out.clear();
    // payloadString: the Kafka record as JSON, as Google's KafkaRecordErrorConverters writes it.
    let payload = json!({
        "topic": rec.topic,
        "partition": rec.partition,
        "offset": rec.offset,
        "timestamp": rec.timestamp_ms,
        "key": rec.key.map(|k| String::from_utf8_lossy(k).into_owned()),
        "value": String::from_utf8_lossy(rec.value),
    })
    .to_string();
    put_varint(1, (rec.timestamp_ms.unwrap_or(0).saturating_mul(1000)) as u64, out);
    put_bytes(2, payload.as_bytes(), out);
    put_bytes(3, rec.value, out);
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
        let rec = RecordRef { topic: "t", partition: 3, offset: 42, timestamp_ms: Some(5), key: None, value: &[0xff, 0x00] };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        encode(&rec, "transform", "message value is not valid UTF-8", &mut a);
        encode(&rec, "transform", "message value is not valid UTF-8", &mut b);
        assert_eq!(a, b);
        let text = String::from_utf8_lossy(&a);
        assert!(text.contains("not valid UTF-8"));
        assert!(text.contains("\"offset\":42"));
        assert_eq!(schema().columns.len(), 6);
        let w = write_schema();
        assert_eq!(w.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["timestamp", "payloadString", "payloadBytes", "errorMessage", "stacktrace"]);
    }
}
