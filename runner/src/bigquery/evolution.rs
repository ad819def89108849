//! Schema evolution (`schemaUpdateOptions`, flexrun's extension): the two changes
//! BigQuery allows on an existing table, and which of them a message asks for.
//!
//! BigQuery (<https://cloud.google.com/bigquery/docs/managing-table-schemas>): "If you add
//! new columns to an existing table schema, the columns must be NULLABLE or REPEATED. You
//! cannot add a REQUIRED column to an existing table schema", and a column's mode may be
//! relaxed from REQUIRED to NULLABLE. "New columns and nested fields are always added at
//! the end of the table or field." The names follow BigQuery's load-job options
//! (`ALLOW_FIELD_ADDITION`, `ALLOW_FIELD_RELAXATION`). Pure: the job applies the changes
//! through `tables.patch`.
//!
//! ```
//! use flexrun::bigquery::evolution::{Change, SchemaUpdates, from_json_value, apply};
//! use flexrun::bigquery::schema::Schema;
//! let s = Schema::from_json(&serde_json::json!([{"name": "id", "type": "INTEGER", "mode": "REQUIRED"}])).unwrap();
//! let u = SchemaUpdates::parse("ALLOW_FIELD_ADDITION").unwrap();
//! let c = from_json_value("note", &serde_json::json!("hi")).unwrap();
//! assert!(u.allows(&c));
//! let wider = apply(&s, &[c]);
//! assert_eq!(wider.columns[1].name, "note");
//! ```

use super::schema::{Column, ColumnType, Mode, Schema};
use serde_json::Value;

/// Which changes a job may make to its table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchemaUpdates {
    /// `ALLOW_FIELD_ADDITION`: a field the table lacks becomes a NULLABLE column.
    pub add: bool,
    /// `ALLOW_FIELD_RELAXATION`: a REQUIRED column a record leaves empty becomes NULLABLE.
    pub relax: bool,
}

impl SchemaUpdates {
    /// Parse the option list, separated by `|` or commas; an empty list allows nothing.
    pub fn parse(s: &str) -> Result<SchemaUpdates, String> {
        let mut u = SchemaUpdates::default();
        for opt in s.split(['|', ',']).map(str::trim).filter(|o| !o.is_empty()) {
            match opt.to_ascii_uppercase().as_str() {
                "ALLOW_FIELD_ADDITION" => u.add = true,
                "ALLOW_FIELD_RELAXATION" => u.relax = true,
                _ => {
                    return Err(format!(
                        "schemaUpdateOptions: unknown option {opt:?}; expected ALLOW_FIELD_ADDITION and/or ALLOW_FIELD_RELAXATION, separated by |"
                    ))
                }
            }
        }
        Ok(u)
    }

    /// Whether any change is allowed.
    pub fn any(&self) -> bool {
        self.add || self.relax
    }

    /// Whether `c` is allowed.
    pub fn allows(&self, c: &Change) -> bool {
        match c {
            Change::Add(_) => self.add,
            Change::Relax(_) => self.relax,
        }
    }
}

/// One change to a table's schema.
#[derive(Debug, Clone)]
pub enum Change {
    /// A new column at the end (NULLABLE or REPEATED).
    Add(Column),
    /// A REQUIRED column made NULLABLE.
    Relax(String),
}

impl Change {
    /// The column it is about.
    pub fn column(&self) -> &str {
        match self {
            Change::Add(c) => &c.name,
            Change::Relax(n) => n,
        }
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Add(c) => write!(f, "add {} {} {}", c.name, c.mode.as_str(), c.type_name),
            Change::Relax(n) => write!(f, "relax {n} to NULLABLE"),
        }
    }
}

fn column(name: &str, type_name: &str, typ: ColumnType, mode: Mode) -> Column {
    Column { name: name.to_string(), type_name: type_name.to_string(), typ, mode, fields: None }
}

/// Prefixes BigQuery reserves: "Column names cannot use any of the following prefixes:
/// `_TABLE_`, `_FILE_`, `_PARTITION`, `_ROW_TIMESTAMP`, `__ROOT__`, `_COLON_`"
/// (<https://cloud.google.com/bigquery/docs/schemas#column_names>; case-insensitive).
const RESERVED_PREFIXES: [&str; 6] = ["_TABLE_", "_FILE_", "_PARTITION", "_ROW_TIMESTAMP", "__ROOT__", "_COLON_"];

/// Whether BigQuery takes `name` as a new column, or why not. BigQuery: "A column name
/// can contain letters (a-z, A-Z), numbers (0-9), or underscores (_), and it must start
/// with a letter or underscore", "Column names have a maximum length of 300
/// characters", and the reserved prefixes above. (Flexible column names are not used:
/// over the Storage Write API's gRPC they need "special handling".) A field that fails
/// this is never sent to `tables.patch`, which would answer 400 for every batch; its
/// record goes to the dead-letter table.
///
/// ```
/// use flexrun::bigquery::evolution::check_column_name;
/// assert!(check_column_name("note_2").is_ok());
/// for bad in ["", "2x", "a-b", "_PARTITIONTIME", "_table_x", &"a".repeat(301)] {
///     assert!(check_column_name(bad).is_err(), "{bad}");
/// }
/// ```
pub fn check_column_name(name: &str) -> Result<(), String> {
    let starts_well = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
    let why = if name.is_empty() {
        "it is empty".to_string()
    } else if name.len() > 300 {
        format!("it is {} characters long, over BigQuery's 300", name.len())
    } else if !starts_well || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        "BigQuery column names hold letters, digits and underscores and start with a letter or underscore".to_string()
    } else if let Some(p) = RESERVED_PREFIXES.iter().find(|p| name.to_ascii_uppercase().starts_with(*p)) {
        format!("BigQuery reserves the prefix {p}")
    } else {
        return Ok(());
    };
    Err(format!("schemaUpdateOptions cannot add a column for field {:?}: {why}", truncate(name)))
}

fn truncate(name: &str) -> String {
    name.chars().take(64).collect()
}

/// The column a new JSON field becomes, from its value: a string STRING, an integer
/// INTEGER, another number FLOAT, a boolean BOOLEAN, an array of one of those REPEATED.
/// Null, an object, an empty or mixed array say too little (or too much) to pick a
/// column: the reason is returned, and the record goes to the dead-letter table.
pub fn from_json_value(name: &str, v: &Value) -> Result<Change, String> {
    check_column_name(name)?;
    let scalar = |v: &Value| -> Option<(&'static str, ColumnType)> {
        match v {
            Value::String(_) => Some(("STRING", ColumnType::String)),
            Value::Number(n) if n.is_i64() => Some(("INTEGER", ColumnType::Int64)),
            Value::Number(_) => Some(("FLOAT", ColumnType::Float64)),
            Value::Bool(_) => Some(("BOOLEAN", ColumnType::Bool)),
            _ => None,
        }
    };
    if let Some((t, typ)) = scalar(v) {
        return Ok(Change::Add(column(name, t, typ, Mode::Nullable)));
    }
    let why = match v {
        Value::Null => "its value is null, which names no type".to_string(),
        Value::Object(_) => "it holds an object: add the RECORD column to the table yourself".to_string(),
        Value::Array(items) => {
            let kinds: Vec<_> = items.iter().map(scalar).collect();
            match kinds.first() {
                Some(Some(k)) if kinds.iter().all(|x| x.map(|x| x.0) == Some(k.0)) => {
                    return Ok(Change::Add(column(name, k.0, k.1, Mode::Repeated)));
                }
                _ => "it holds an empty array, or one of objects or of mixed types".to_string(),
            }
        }
        _ => unreachable!("scalars are handled above"),
    };
    Err(format!("schemaUpdateOptions cannot add a column for field {name}: {why}"))
}

/// The changes that make `table` take rows shaped as `wanted` (a schema a writer
/// describes, such as an Avro record's): its columns `table` lacks (added as NULLABLE,
/// or REPEATED), and `table`'s REQUIRED columns that `wanted` has as optional or not at all.
pub fn from_schema(table: &Schema, wanted: &Schema) -> Vec<Change> {
    let mut out = Vec::new();
    for c in &wanted.columns {
        if table.lookup(&c.name).is_none() {
            let mode = if c.mode == Mode::Repeated { Mode::Repeated } else { Mode::Nullable };
            out.push(Change::Add(Column { mode, ..c.clone() }));
        }
    }
    for c in table.columns.iter().filter(|c| c.mode == Mode::Required) {
        if wanted.lookup(&c.name).is_none_or(|i| wanted.columns[i].mode != Mode::Required) {
            out.push(Change::Relax(c.name.clone()));
        }
    }
    out
}

/// `schema` with `changes` made: new columns at the end (a column already there, under
/// any case, is left as it is), relaxed columns NULLABLE.
pub fn apply(schema: &Schema, changes: &[Change]) -> Schema {
    let mut columns = schema.columns.clone();
    for c in changes {
        match c {
            Change::Add(col) => {
                if !columns.iter().any(|x| x.name.eq_ignore_ascii_case(&col.name)) {
                    columns.push(col.clone());
                }
            }
            Change::Relax(name) => {
                if let Some(x) = columns.iter_mut().find(|x| x.name.eq_ignore_ascii_case(name)) {
                    if x.mode == Mode::Required {
                        x.mode = Mode::Nullable;
                    }
                }
            }
        }
    }
    Schema::new(columns)
}

/// The changes of `changes` that `schema` does not have yet, each column once (the
/// first change named for a column wins).
pub fn pending(schema: &Schema, changes: Vec<Change>) -> Vec<Change> {
    let mut out: Vec<Change> = Vec::new();
    for c in changes {
        let done = match &c {
            Change::Add(col) => schema.lookup(&col.name).is_some(),
            Change::Relax(n) => schema.lookup(n).is_none_or(|i| schema.columns[i].mode != Mode::Required),
        };
        if !done && !out.iter().any(|o| o.column().eq_ignore_ascii_case(c.column())) {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(v: Value) -> Schema {
        Schema::from_json(&v).unwrap()
    }

    #[test]
    fn options_parse_and_bad_ones_name_the_parameter() {
        assert_eq!(SchemaUpdates::parse("").unwrap(), SchemaUpdates::default());
        let both = SchemaUpdates::parse("ALLOW_FIELD_ADDITION|allow_field_relaxation").unwrap();
        assert!(both.add && both.relax);
        let e = SchemaUpdates::parse("ALLOW_FIELD_ADDITION,DROP_COLUMNS").unwrap_err();
        assert!(e.contains("schemaUpdateOptions") && e.contains("DROP_COLUMNS"), "{e}");
    }

    #[test]
    fn json_values_pick_a_nullable_or_repeated_column_or_say_why_not() {
        let t = |v: Value| match from_json_value("f", &v) {
            Ok(Change::Add(c)) => format!("{} {}", c.mode.as_str(), c.type_name),
            Ok(other) => panic!("{other}"),
            Err(e) => e,
        };
        assert_eq!(t(json!("x")), "NULLABLE STRING");
        assert_eq!(t(json!(-3)), "NULLABLE INTEGER");
        assert_eq!(t(json!(1.5)), "NULLABLE FLOAT");
        assert_eq!(t(json!(true)), "NULLABLE BOOLEAN");
        assert_eq!(t(json!([1, 2])), "REPEATED INTEGER");
        for bad in [json!(null), json!({"a": 1}), json!([]), json!([1, "x"])] {
            assert!(t(bad.clone()).contains("cannot add a column for field f"), "{bad}");
        }
    }

    #[test]
    fn a_writer_schema_adds_its_new_columns_and_relaxes_what_it_leaves_optional() {
        let table = schema(json!([
            {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
            {"name": "name", "type": "STRING", "mode": "REQUIRED"}
        ]));
        let wanted = schema(json!([
            {"name": "ID", "type": "INTEGER", "mode": "REQUIRED"},
            {"name": "name", "type": "STRING"},
            {"name": "tags", "type": "STRING", "mode": "REPEATED"},
            {"name": "score", "type": "FLOAT", "mode": "REQUIRED"}
        ]));
        let got: Vec<String> = from_schema(&table, &wanted).iter().map(ToString::to_string).collect();
        assert_eq!(got, ["add tags REPEATED STRING", "add score NULLABLE FLOAT", "relax name to NULLABLE"]);
        let wider = apply(&table, &from_schema(&table, &wanted));
        let modes: Vec<_> = wider.columns.iter().map(|c| (c.name.as_str(), c.mode)).collect();
        assert_eq!(
            modes,
            [("id", Mode::Required), ("name", Mode::Nullable), ("tags", Mode::Repeated), ("score", Mode::Nullable)]
        );
        assert!(from_schema(&wider, &wanted).is_empty(), "applied changes are not asked for again");
    }

    #[test]
    fn pending_drops_what_the_table_has_and_names_each_column_once() {
        let table =
            schema(json!([{"name": "id", "type": "INTEGER"}, {"name": "r", "type": "STRING", "mode": "REQUIRED"}]));
        let changes = vec![
            from_json_value("ID", &json!(1)).unwrap(),
            from_json_value("note", &json!("a")).unwrap(),
            from_json_value("Note", &json!(2)).unwrap(),
            Change::Relax("id".into()),
            Change::Relax("r".into()),
        ];
        let got: Vec<String> = pending(&table, changes).iter().map(ToString::to_string).collect();
        assert_eq!(got, ["add note NULLABLE STRING", "relax r to NULLABLE"]);
    }
}
