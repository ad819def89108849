//! What a Kafka record can fail as on its way to a row, and the timestamp text forms
//! BigQuery accepts: shared by the JSON mapper (`kafka_to_bq::map::transform`), the Avro
//! decoders (`avro`) and the generator's JSON → Avro path, so it sits below them all.
//!
//! ```
//! use flexrun::record::{parse_timestamp_micros, RecordError};
//! assert_eq!(parse_timestamp_micros("1970-01-01T00:00:01.5Z"), Some(1_500_000));
//! assert_eq!(RecordError::MissingRequired("id".into()).class(), "missing_required");
//! ```

/// Why a message did not become a row. Each becomes a dead-letter row's `errorMessage`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecordError {
    /// The value is not UTF-8.
    #[error("message value is not valid UTF-8 (invalid byte at offset {0})")]
    NotUtf8(usize),
    /// The value is not JSON.
    #[error("Failed to serialize json to table row: {0}")]
    InvalidJson(String),
    /// Valid JSON, but not an object.
    #[error("message is JSON {0}, expected a JSON object")]
    NotAnObject(&'static str),
    /// A key with no column.
    #[error("TableRow contained unexpected field with name {0}")]
    UnknownField(String),
    /// A value of the wrong JSON type for its column.
    #[error("field {field}: expected {expected}, found {found}")]
    WrongType {
        /// Column path (`a.b` for nested).
        field: String,
        /// What the column takes.
        expected: String,
        /// What the message had.
        found: String,
    },
    /// A REQUIRED column absent or null.
    #[error("missing required field {0}")]
    MissingRequired(String),
    /// The encoded row is larger than a Storage Write request may be.
    #[error("Row payload too large: {bytes} bytes, the limit is {limit}")]
    Oversize {
        /// Encoded size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The JavaScript UDF threw, or returned something that is not a string.
    #[error("{0}")]
    Udf(String),
    /// The UDF returned null, undefined or "": the message is dropped (not an error;
    /// neither a row nor a dead letter).
    #[error("dropped by the UDF")]
    Dropped,
    /// A Debezium record that is no change (a tombstone, heartbeat, schema change,
    /// transaction marker or message; `cdcFormat=DEBEZIUM`): skipped and counted.
    #[error("a Debezium {0}: skipped")]
    DebeziumSkipped(&'static str),
    /// With per-record tables: a record of another type, which goes to its own table.
    #[error("record {0} goes to its own table")]
    OtherRecord(String),
    /// An Avro message that cannot be decoded (framing, schema lookup or datum).
    #[error("{0}")]
    Avro(String),
    /// A Protobuf message that cannot be decoded or mapped (framing, schema lookup,
    /// message bytes, a value its column cannot hold).
    #[error("{0}")]
    Proto(String),
    /// BigQuery refused the row (row_errors in an AppendRows response).
    #[error("BigQuery rejected the row: {0}")]
    Rejected(String),
    /// A CDC record whose change type cannot be read.
    #[error("CDC: {0}")]
    Cdc(String),
}

impl RecordError {
    /// A short class name, for counters and tests.
    pub fn class(&self) -> &'static str {
        match self {
            RecordError::NotUtf8(_) => "not_utf8",
            RecordError::InvalidJson(_) => "invalid_json",
            RecordError::NotAnObject(_) => "not_an_object",
            RecordError::UnknownField(_) => "unknown_field",
            RecordError::WrongType { .. } => "wrong_type",
            RecordError::MissingRequired(_) => "missing_required",
            RecordError::Oversize { .. } => "oversize",
            RecordError::Rejected(_) => "rejected",
            RecordError::Avro(_) => "avro",
            RecordError::Proto(_) => "proto",
            RecordError::Udf(_) => "udf",
            RecordError::OtherRecord(_) => "other_record",
            RecordError::Dropped => "udf_dropped",
            RecordError::DebeziumSkipped(_) => "debezium_skipped",
            RecordError::Cdc(_) => "cdc",
        }
    }
}

/// Parse BigQuery's accepted timestamp text forms into epoch microseconds:
/// RFC 3339 (`2024-01-31T12:00:00.5Z`) and `2024-01-31 12:00:00[.ffffff][ UTC|Z|±hh:mm]`.
pub fn parse_timestamp_micros(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_micros());
    }
    let body = s.strip_suffix(" UTC").or_else(|| s.strip_suffix('Z')).unwrap_or(s);
    for fmt in ["%Y-%m-%d %H:%M:%S%.f%:z", "%Y-%m-%dT%H:%M:%S%.f%:z"] {
        if let Ok(t) = chrono::DateTime::parse_from_str(body, fmt) {
            return Some(t.timestamp_micros());
        }
    }
    for fmt in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(body, fmt) {
            return Some(t.and_utc().timestamp_micros());
        }
        if fmt == "%Y-%m-%d" {
            if let Ok(d) = chrono::NaiveDate::parse_from_str(body, fmt) {
                return Some(d.and_hms_opt(0, 0, 0)?.and_utc().timestamp_micros());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse_in_bigquery_forms() {
        assert_eq!(parse_timestamp_micros("1970-01-01 00:00:01"), Some(1_000_000));
        assert_eq!(parse_timestamp_micros("1970-01-01T00:00:01.5Z"), Some(1_500_000));
        assert_eq!(parse_timestamp_micros("1970-01-01 00:00:01.000002 UTC"), Some(1_000_002));
        assert_eq!(parse_timestamp_micros("1970-01-01 01:00:00+01:00"), Some(0));
        assert_eq!(parse_timestamp_micros("1970-01-02"), Some(86_400_000_000));
        assert_eq!(parse_timestamp_micros("nope"), None);
    }
}
