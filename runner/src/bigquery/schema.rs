//! The destination table's schema, as the transform needs it.
//!
//! Built from BigQuery's JSON schema form (the REST `tables.get` answer or a
//! schema file: `[{"name":..,"type":..,"mode":..,"fields":[..]}]`).

use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;

/// A BigQuery column type, with the aliases folded together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// STRING
    String,
    /// BYTES (base64 in JSON)
    Bytes,
    /// INTEGER / INT64
    Int64,
    /// FLOAT / FLOAT64
    Float64,
    /// BOOLEAN / BOOL
    Bool,
    /// TIMESTAMP (sent as int64 microseconds since the epoch)
    Timestamp,
    /// DATE (sent as int32 days since the epoch)
    Date,
    /// NUMERIC, BIGNUMERIC, DATETIME, TIME, GEOGRAPHY, JSON, INTERVAL: sent as strings.
    StringLike,
    /// RECORD / STRUCT
    Record,
}

/// NULLABLE, REQUIRED or REPEATED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// May be absent or null.
    Nullable,
    /// Must be present and not null.
    Required,
    /// A JSON array of values.
    Repeated,
}

/// One column.
#[derive(Debug, Clone)]
pub struct Column {
    /// The column's name as the table declares it.
    pub name: String,
    /// The BigQuery type name as declared (for messages).
    pub type_name: String,
    /// The folded type.
    pub typ: ColumnType,
    /// Its mode.
    pub mode: Mode,
    /// The nested schema of a RECORD.
    pub fields: Option<Arc<Schema>>,
}

/// A table schema with the lookups the transform needs.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    /// Columns in declaration order; column i is proto field i+1.
    pub columns: Vec<Column>,
    exact: HashMap<String, usize>,
    lower: HashMap<String, usize>,
}

/// A schema that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The JSON is not a BigQuery schema.
    #[error("not a BigQuery schema (expected [{{\"name\":..,\"type\":..,\"mode\":..}}] or {{\"fields\":[..]}}): {0}")]
    Json(#[from] serde_json::Error),
    /// A type this tool does not know.
    #[error("column {column}: unsupported type {typ:?}")]
    UnknownType {
        /// The column.
        column: String,
        /// The declared type.
        typ: String,
    },
    /// A mode other than NULLABLE, REQUIRED, REPEATED.
    #[error("column {column}: unknown mode {mode:?} (expected NULLABLE, REQUIRED or REPEATED)")]
    UnknownMode {
        /// The column.
        column: String,
        /// The declared mode.
        mode: String,
    },
    /// A RECORD without fields.
    #[error("column {0}: a RECORD needs fields")]
    EmptyRecord(String),
    /// No columns at all.
    #[error("the schema has no columns")]
    Empty,
}

#[derive(Deserialize)]
struct FieldSpec {
    name: String,
    #[serde(rename = "type")]
    typ: String,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    fields: Option<Vec<FieldSpec>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SchemaSpec {
    List(Vec<FieldSpec>),
    Object { fields: Vec<FieldSpec> },
}

impl Mode {
    /// BigQuery's name for the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Nullable => "NULLABLE",
            Mode::Required => "REQUIRED",
            Mode::Repeated => "REPEATED",
        }
    }
}

impl Schema {
    /// BigQuery's JSON form (`[{"name", "type", "mode", "fields"?}, ...]`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Array(
            self.columns
                .iter()
                .map(|c| {
                    let mut v = serde_json::json!({"name": c.name, "type": c.type_name, "mode": c.mode.as_str()});
                    if let Some(sub) = &c.fields {
                        v["fields"] = sub.to_json();
                    }
                    v
                })
                .collect(),
        )
    }

    /// A short fingerprint of the schema (CRC32C of its JSON form, 8 hex digits).
    pub fn fingerprint(&self) -> String {
        format!("{:08x}", crate::checksum::crc32c(self.to_json().to_string().as_bytes()))
    }

    /// Parse BigQuery's JSON schema form: a list of fields or `{"fields": [...]}`.
    pub fn from_json(json: &serde_json::Value) -> Result<Schema, SchemaError> {
        let spec: SchemaSpec = serde_json::from_value(json.clone())?;
        let fields = match spec {
            SchemaSpec::List(f) | SchemaSpec::Object { fields: f } => f,
        };
        let s = Self::from_specs(&fields)?;
        if s.columns.is_empty() {
            return Err(SchemaError::Empty);
        }
        Ok(s)
    }

    fn from_specs(fields: &[FieldSpec]) -> Result<Schema, SchemaError> {
        let mut columns = Vec::with_capacity(fields.len());
        for f in fields {
            let typ = match f.typ.to_ascii_uppercase().as_str() {
                "STRING" => ColumnType::String,
                "BYTES" => ColumnType::Bytes,
                "INTEGER" | "INT64" => ColumnType::Int64,
                "FLOAT" | "FLOAT64" => ColumnType::Float64,
                "BOOLEAN" | "BOOL" => ColumnType::Bool,
                "TIMESTAMP" => ColumnType::Timestamp,
                "DATE" => ColumnType::Date,
                "NUMERIC" | "BIGNUMERIC" | "DATETIME" | "TIME" | "GEOGRAPHY" | "JSON" | "INTERVAL" => {
                    ColumnType::StringLike
                }
                "RECORD" | "STRUCT" => ColumnType::Record,
                _ => return Err(SchemaError::UnknownType { column: f.name.clone(), typ: f.typ.clone() }),
            };
            let mode = match f.mode.as_deref().map(str::to_ascii_uppercase).as_deref() {
                None | Some("NULLABLE") | Some("") => Mode::Nullable,
                Some("REQUIRED") => Mode::Required,
                Some("REPEATED") => Mode::Repeated,
                Some(_) => {
                    return Err(SchemaError::UnknownMode {
                        column: f.name.clone(),
                        mode: f.mode.clone().unwrap_or_default(),
                    })
                }
            };
            let nested = if typ == ColumnType::Record {
                let sub = f
                    .fields
                    .as_deref()
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| SchemaError::EmptyRecord(f.name.clone()))?;
                Some(Arc::new(Self::from_specs(sub)?))
            } else {
                None
            };
            columns.push(Column {
                name: f.name.clone(),
                type_name: f.typ.to_ascii_uppercase(),
                typ,
                mode,
                fields: nested,
            });
        }
        Ok(Schema::new(columns))
    }

    /// A schema from columns.
    pub fn new(columns: Vec<Column>) -> Schema {
        let exact = columns.iter().enumerate().map(|(i, c)| (c.name.clone(), i)).collect();
        let lower = columns.iter().enumerate().map(|(i, c)| (c.name.to_lowercase(), i)).collect();
        Schema { columns, exact, lower }
    }

    /// The column for a JSON key, matched case-insensitively as Google's template does.
    ///
    /// A table of up to [`SCAN_COLUMNS`] columns is scanned for an exact match, which is
    /// cheaper than hashing the key; wider tables use the map.
    pub fn lookup(&self, key: &str) -> Option<usize> {
        let exact = if self.columns.len() <= SCAN_COLUMNS {
            self.columns.iter().position(|c| c.name == key)
        } else {
            self.exact.get(key).copied()
        };
        exact.or_else(|| self.lower.get(&key.to_lowercase()).copied())
    }
}

/// Widest table whose exact key match is a linear scan (see [`Schema::lookup`]).
pub const SCAN_COLUMNS: usize = 8;

/// The dotted path of field `name` inside `prefix` (`""` at the top level), as row
/// errors name nested fields (`payload.items.sku`).
pub fn field_path(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_both_forms_and_folds_aliases() {
        let s = Schema::from_json(&json!([
            {"name": "Id", "type": "INT64", "mode": "REQUIRED"},
            {"name": "tags", "type": "STRING", "mode": "REPEATED"},
            {"name": "r", "type": "STRUCT", "fields": [{"name": "x", "type": "FLOAT"}]}
        ]))
        .unwrap();
        assert_eq!(s.columns[0].typ, ColumnType::Int64);
        assert_eq!(s.columns[0].mode, Mode::Required);
        assert_eq!(s.columns[1].mode, Mode::Repeated);
        assert_eq!(s.columns[2].fields.as_ref().unwrap().columns[0].typ, ColumnType::Float64);
        assert_eq!(s.lookup("id"), Some(0));
        assert_eq!(s.lookup("ID"), Some(0));
        assert_eq!(s.lookup("nope"), None);
        let o = Schema::from_json(&json!({"fields": [{"name": "a", "type": "BOOL"}]})).unwrap();
        assert_eq!(o.columns[0].typ, ColumnType::Bool);
    }

    #[test]
    fn bad_schemas_are_named() {
        let e = Schema::from_json(&json!([{"name": "a", "type": "WIDGET"}])).unwrap_err().to_string();
        assert!(e.contains("column a: unsupported type \"WIDGET\""), "{e}");
        let e =
            Schema::from_json(&json!([{"name": "a", "type": "STRING", "mode": "SOMETIMES"}])).unwrap_err().to_string();
        assert!(e.contains("unknown mode"), "{e}");
        let e = Schema::from_json(&json!([{"name": "r", "type": "RECORD"}])).unwrap_err().to_string();
        assert!(e.contains("RECORD needs fields"), "{e}");
        assert!(Schema::from_json(&json!([])).is_err());
        assert!(Schema::from_json(&json!("x")).is_err());
    }
}
