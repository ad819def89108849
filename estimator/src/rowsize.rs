//! How many bytes BigQuery bills for a row: the "data size calculation" of Google's
//! BigQuery pricing page (cloud.google.com/bigquery/pricing#data_size_calculation), which
//! both Storage Write ingestion and logical storage are billed by. Per column type:
//! INT64, FLOAT64, DATE, DATETIME, TIME and TIMESTAMP 8 bytes; NUMERIC 16; BIGNUMERIC 32;
//! INTERVAL 16; BOOL 1; STRING 2 + its UTF-8 bytes; BYTES 2 + its bytes; JSON its UTF-8
//! bytes; STRUCT the sum of its fields; GEOGRAPHY 16 + 24 per vertex; a NULL 0.
//!
//! The row comes from a JSON message, so what is known is the message's size, not each
//! value's: [`estimate_row_bytes`] takes the table's columns, spends the message's bytes
//! on JSON syntax and on the fixed-width values' text, and gives what is left to the
//! variable-width columns. The result is labelled "estimated" wherever it is shown.
//!
//! ```
//! use flexrun_estimator::rowsize::{estimate_row_bytes, seed_table};
//! // Seed 001: {"logStreamId":"1234567","message":"<962 characters>"} is 1,000 bytes;
//! // BigQuery bills 8 (INT64) + 2 + 962 (STRING) = 972.
//! let r = estimate_row_bytes(&seed_table(), 1000.0).unwrap();
//! assert!((r - 972.0).abs() <= 2.0, "{r}");
//! ```

use serde::{Deserialize, Serialize};

/// A BigQuery column type, as the data size calculation prices it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BqType {
    /// INT64 / INTEGER.
    Int64,
    /// FLOAT64 / FLOAT.
    Float64,
    /// NUMERIC.
    Numeric,
    /// BIGNUMERIC.
    BigNumeric,
    /// BOOL / BOOLEAN.
    Bool,
    /// STRING.
    String,
    /// BYTES (base64 text in a JSON message).
    Bytes,
    /// JSON.
    Json,
    /// DATE.
    Date,
    /// DATETIME.
    Datetime,
    /// TIME.
    Time,
    /// TIMESTAMP.
    Timestamp,
    /// INTERVAL.
    Interval,
    /// GEOGRAPHY (as WKT text; billed as 16 + 24 per vertex, estimated from the text).
    Geography,
}

impl BqType {
    /// The type of a schema's `type` field (legacy and standard SQL names).
    pub fn parse(s: &str) -> Option<BqType> {
        Some(match s.to_ascii_uppercase().as_str() {
            "INT64" | "INTEGER" => BqType::Int64,
            "FLOAT64" | "FLOAT" => BqType::Float64,
            "NUMERIC" | "DECIMAL" => BqType::Numeric,
            "BIGNUMERIC" | "BIGDECIMAL" => BqType::BigNumeric,
            "BOOL" | "BOOLEAN" => BqType::Bool,
            "STRING" => BqType::String,
            "BYTES" => BqType::Bytes,
            "JSON" => BqType::Json,
            "DATE" => BqType::Date,
            "DATETIME" => BqType::Datetime,
            "TIME" => BqType::Time,
            "TIMESTAMP" => BqType::Timestamp,
            "INTERVAL" => BqType::Interval,
            "GEOGRAPHY" => BqType::Geography,
            _ => return None,
        })
    }

    /// Billed bytes of a fixed-width value; None for the variable-width types.
    pub fn fixed_bytes(self) -> Option<f64> {
        match self {
            BqType::Int64 | BqType::Float64 | BqType::Date | BqType::Datetime | BqType::Time | BqType::Timestamp => {
                Some(8.0)
            }
            BqType::Numeric | BqType::Interval => Some(16.0),
            BqType::BigNumeric => Some(32.0),
            BqType::Bool => Some(1.0),
            BqType::String | BqType::Bytes | BqType::Json | BqType::Geography => None,
        }
    }

    /// The assumed length of a fixed-width value's JSON text, quotes included (a
    /// typical rendering: a ten-digit integer, an RFC 3339 timestamp with microseconds).
    fn text_width(self) -> f64 {
        match self {
            BqType::Int64 => 10.0,
            BqType::Float64 | BqType::Numeric => 12.0,
            BqType::BigNumeric => 24.0,
            BqType::Bool => 5.0,
            BqType::Date => 12.0,
            BqType::Time => 17.0,
            BqType::Datetime => 28.0,
            BqType::Timestamp => 29.0,
            BqType::Interval => 20.0,
            BqType::String | BqType::Bytes | BqType::Json | BqType::Geography => 0.0,
        }
    }
}

/// A leaf column of the table (a STRUCT's fields are flattened into leaves, which is
/// what the data size calculation sums).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Column {
    /// The column's name (its JSON key).
    pub name: String,
    /// Its type.
    pub typ: BqType,
}

/// A table schema that cannot be sized.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RowSizeError {
    /// Not a BigQuery JSON schema.
    #[error("invalid table schema: {0}; expected BigQuery's JSON schema, a list of {{\"name\", \"type\"}} fields")]
    Schema(String),
    /// The message is smaller than its syntax.
    #[error(
        "invalid message size {message_bytes} B: the table's {columns} columns need at least {needed:.0} B of JSON"
    )]
    TooSmall {
        /// The message size.
        message_bytes: f64,
        /// Columns.
        columns: usize,
        /// The least JSON they render to.
        needed: f64,
    },
}

/// Seed 001's table: Google's benchmark schema, `logStreamId` (an integer) and
/// `message` (962 alphanumeric characters).
pub fn seed_table() -> Vec<Column> {
    vec![
        Column { name: "logStreamId".into(), typ: BqType::Int64 },
        Column { name: "message".into(), typ: BqType::String },
    ]
}

/// The leaf columns of a BigQuery JSON schema (`[{"name":..,"type":..,"fields":[..]}]`,
/// or `{"fields": [...]}`).
pub fn parse_schema(json: &str) -> Result<Vec<Column>, RowSizeError> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| RowSizeError::Schema(e.to_string()))?;
    let fields = v.get("fields").unwrap_or(&v);
    let mut out = Vec::new();
    leaves(fields, &mut out)?;
    if out.is_empty() {
        return Err(RowSizeError::Schema("no fields".into()));
    }
    Ok(out)
}

fn leaves(fields: &serde_json::Value, out: &mut Vec<Column>) -> Result<(), RowSizeError> {
    let list = fields.as_array().ok_or_else(|| RowSizeError::Schema("the fields are not a list".into()))?;
    for f in list {
        let name = f
            .get("name")
            .and_then(|n| n.as_str())
            .ok_or_else(|| RowSizeError::Schema("a field without a name".into()))?;
        let typ = f.get("type").and_then(|t| t.as_str()).unwrap_or("");
        if matches!(typ.to_ascii_uppercase().as_str(), "RECORD" | "STRUCT") {
            leaves(f.get("fields").unwrap_or(&serde_json::Value::Null), out)?;
            continue;
        }
        let typ = BqType::parse(typ)
            .ok_or_else(|| RowSizeError::Schema(format!("field {name:?} has unknown type {typ:?}")))?;
        out.push(Column { name: name.into(), typ });
    }
    Ok(())
}

/// The bytes BigQuery bills for the row a JSON message of `message_bytes` becomes in a
/// table of `columns` (every column present, no NULLs; REPEATED fields counted once).
pub fn estimate_row_bytes(columns: &[Column], message_bytes: f64) -> Result<f64, RowSizeError> {
    // {"k1":v1,"k2":v2}: braces, each key in quotes with a colon, commas between.
    let syntax: f64 = 2.0 + columns.iter().map(|c| c.name.len() as f64 + 3.0).sum::<f64>() + columns.len() as f64 - 1.0;
    let variable: Vec<&Column> = columns.iter().filter(|c| c.typ.fixed_bytes().is_none()).collect();
    let fixed_text: f64 = columns.iter().map(|c| c.typ.text_width()).sum();
    // A string-like value's own quotes.
    let quotes = 2.0 * variable.iter().filter(|c| c.typ != BqType::Json).count() as f64;
    let needed = syntax + fixed_text + quotes;
    if message_bytes < needed {
        return Err(RowSizeError::TooSmall { message_bytes, columns: columns.len(), needed });
    }
    let fixed: f64 = columns.iter().filter_map(|c| c.typ.fixed_bytes()).sum();
    let content = message_bytes - needed;
    let var: f64 = variable
        .iter()
        .map(|c| {
            let share = content / variable.len() as f64;
            match c.typ {
                BqType::String => 2.0 + share,
                // base64 text carries 3 bytes in 4 characters.
                BqType::Bytes => 2.0 + share * 0.75,
                // WKT "x y, " is about 20 characters per vertex.
                BqType::Geography => 16.0 + 24.0 * (share / 20.0).max(1.0),
                _ => share,
            }
        })
        .sum();
    Ok(fixed + var)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_row_is_billed_by_column_type_not_by_message_size() {
        let r = estimate_row_bytes(&seed_table(), 1000.0).unwrap();
        // 1000 - 2 - (11+3) - (7+3) - 1 - 10 (the integer's text) - 2 (quotes) = 961 characters.
        assert!((r - (8.0 + 2.0 + 961.0)).abs() < 1e-9, "{r}");
    }

    #[test]
    fn fixed_width_tables_bill_their_types_whatever_the_message() {
        let cols = parse_schema(
            r#"[{"name":"a","type":"INTEGER"},{"name":"t","type":"TIMESTAMP"},{"name":"ok","type":"BOOL"},
            {"name":"r","type":"RECORD","fields":[{"name":"n","type":"NUMERIC"}]}]"#,
        )
        .unwrap();
        assert_eq!(cols.len(), 4, "the RECORD is flattened to its leaf");
        assert_eq!(estimate_row_bytes(&cols, 200.0).unwrap(), 8.0 + 8.0 + 1.0 + 16.0);
        assert_eq!(estimate_row_bytes(&cols, 2000.0).unwrap(), 33.0);
    }

    #[test]
    fn bytes_are_base64_in_the_message_and_raw_in_the_bill() {
        let cols = parse_schema(r#"{"fields":[{"name":"b","type":"BYTES"}]}"#).unwrap();
        // {"b":"<400 base64 chars>"} = 2 + 4 + 2 + 400 = 408 bytes: 300 raw bytes + 2.
        assert!((estimate_row_bytes(&cols, 408.0).unwrap() - 302.0).abs() < 1e-9);
    }

    #[test]
    fn bad_schemas_and_too_small_messages_are_named() {
        assert!(parse_schema("[{\"name\":\"x\",\"type\":\"WIDGET\"}]")
            .unwrap_err()
            .to_string()
            .contains("unknown type \"WIDGET\""));
        assert!(parse_schema("{").unwrap_err().to_string().contains("invalid table schema"));
        assert!(parse_schema("[]").unwrap_err().to_string().contains("no fields"));
        let e = estimate_row_bytes(&seed_table(), 20.0).unwrap_err().to_string();
        assert!(e.contains("invalid message size 20 B") && e.contains("at least 39 B"), "{e}");
    }
}
