//! How a table that flexrun creates is laid out: time partitioning and clustering.
//!
//! [`TableLayout::check`] applies BigQuery's documented rules to a schema before the
//! table is created, so a bad choice fails at launch naming the parameter, not as an
//! API error later. The rules, from Google's pages:
//! - "The partitioning column must be either a scalar DATE, TIMESTAMP, or DATETIME
//!   column. While the mode of the column can be REQUIRED or NULLABLE, it cannot be
//!   REPEATED" and "must be a top-level field"
//!   (<https://cloud.google.com/bigquery/docs/creating-column-partitions>).
//! - "Clustering columns must be top-level, non-repeated columns of one of the
//!   following types: DATE, BOOL, GEOGRAPHY, INT64, NUMERIC, BIGNUMERIC, STRING,
//!   TIMESTAMP, DATETIME" and "You can specify up to four clustering columns"
//!   (<https://cloud.google.com/bigquery/docs/creating-clustered-tables>).
//!
//! The local emulator is made to refuse the same tables (`scripts/bqemulator_launcher.py`).
//!
//! ```
//! use flexrun::bigquery::layout::{Granularity, Partitioning, TableLayout};
//! use flexrun::bigquery::schema::Schema;
//! let s = Schema::from_json(&serde_json::json!([
//!     {"name": "ts", "type": "TIMESTAMP"}, {"name": "user", "type": "STRING"}])).unwrap();
//! let l = TableLayout {
//!     partitioning: Some(Partitioning { granularity: Granularity::Day, field: Some("ts".into()), expiration_days: None }),
//!     clustering: vec!["user".into()],
//!     ..Default::default()
//! };
//! assert!(l.check(&s).is_ok());
//! let bad = TableLayout { clustering: vec!["nope".into()], ..l };
//! assert!(bad.check(&s).unwrap_err().contains("tableClusteringFields"));
//! ```

use super::schema::{Mode, Schema};

/// At most this many clustering columns.
pub const MAX_CLUSTERING_COLUMNS: usize = 4;

/// The time unit of each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// One partition per hour.
    Hour,
    /// One partition per day.
    Day,
    /// One partition per month.
    Month,
    /// One partition per year.
    Year,
}

impl Granularity {
    /// The name BigQuery's `timePartitioning.type` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Granularity::Hour => "HOUR",
            Granularity::Day => "DAY",
            Granularity::Month => "MONTH",
            Granularity::Year => "YEAR",
        }
    }

    /// Parse `HOUR`, `DAY`, `MONTH` or `YEAR`.
    pub fn parse(s: &str) -> Option<Granularity> {
        Some(match s {
            "HOUR" => Granularity::Hour,
            "DAY" => Granularity::Day,
            "MONTH" => Granularity::Month,
            "YEAR" => Granularity::Year,
            _ => return None,
        })
    }
}

/// Time partitioning of a new table.
#[derive(Debug, Clone, PartialEq)]
pub struct Partitioning {
    /// The time unit.
    pub granularity: Granularity,
    /// The column partitioned on; `None` partitions on ingestion time (`_PARTITIONTIME`).
    pub field: Option<String>,
    /// Partitions older than this many days are deleted by BigQuery.
    pub expiration_days: Option<f64>,
}

impl Partitioning {
    /// `timePartitioning.expirationMs`, as BigQuery's REST API writes it (a string).
    pub fn expiration_ms(&self) -> Option<String> {
        self.expiration_days.map(|d| format!("{}", (d * 86_400_000.0).round() as i64))
    }
}

/// Partitioning and clustering of a table flexrun creates (the default: neither).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TableLayout {
    /// Time partitioning, if any.
    pub partitioning: Option<Partitioning>,
    /// Clustering columns in order (empty: not clustered).
    pub clustering: Vec<String>,
    /// CDC: the primary key the table declares (`tableConstraints.primaryKey`; empty: none).
    pub primary_key: Vec<String>,
    /// CDC: the table's `maxStaleness`, as BigQuery's interval text ([`staleness_interval`]).
    pub max_staleness: Option<String>,
}

/// A duration as the interval text BigQuery's `maxStaleness` takes (`Y-M D H:M:S`).
///
/// ```
/// use flexrun::bigquery::layout::staleness_interval;
/// assert_eq!(staleness_interval(std::time::Duration::from_secs(15 * 60)), "0-0 0 0:15:0");
/// assert_eq!(staleness_interval(std::time::Duration::from_secs(90_061)), "0-0 1 1:1:1");
/// ```
pub fn staleness_interval(d: std::time::Duration) -> String {
    let s = d.as_secs();
    format!("0-0 {} {}:{}:{}", s / 86_400, s % 86_400 / 3_600, s % 3_600 / 60, s % 60)
}

impl TableLayout {
    /// Whether the table is laid out as BigQuery's default (no partitions, no clusters;
    /// the CDC key and staleness are not layout).
    pub fn is_default(&self) -> bool {
        self.partitioning.is_none() && self.clustering.is_empty()
    }

    /// Check the layout against the schema the table is created with, by BigQuery's
    /// rules; the error names the parameter and the column.
    pub fn check(&self, schema: &Schema) -> Result<(), String> {
        if let Some(field) = self.partitioning.as_ref().and_then(|p| p.field.as_deref()) {
            let ok = |t: &str, m: Mode| matches!(t, "TIMESTAMP" | "DATE" | "DATETIME") && m != Mode::Repeated;
            check_column(
                schema,
                field,
                "tablePartitionField",
                "a top-level DATE, TIMESTAMP or DATETIME column that is not REPEATED",
                ok,
            )?;
        }
        for k in &self.primary_key {
            check_column(schema, k, "cdcPrimaryKey", "a top-level, non-repeated scalar column", |t, m| {
                m != Mode::Repeated && !matches!(t, "RECORD" | "STRUCT")
            })?;
        }
        if self.clustering.len() > MAX_CLUSTERING_COLUMNS {
            return Err(format!(
                "tableClusteringFields names {} columns: BigQuery takes at most {MAX_CLUSTERING_COLUMNS}",
                self.clustering.len()
            ));
        }
        for (i, c) in self.clustering.iter().enumerate() {
            if self.clustering[..i].iter().any(|d| d.eq_ignore_ascii_case(c)) {
                return Err(format!("tableClusteringFields names column {c} twice"));
            }
            check_column(schema, c, "tableClusteringFields", "a top-level, non-repeated column of type DATE, BOOL, GEOGRAPHY, INT64, NUMERIC, BIGNUMERIC, STRING, TIMESTAMP or DATETIME", |t, m| {
                m != Mode::Repeated
                    && matches!(
                        t,
                        "DATE" | "BOOL" | "BOOLEAN" | "GEOGRAPHY" | "INT64" | "INTEGER" | "NUMERIC" | "BIGNUMERIC"
                            | "STRING" | "TIMESTAMP" | "DATETIME"
                    )
            })?;
        }
        Ok(())
    }
}

fn check_column(
    schema: &Schema,
    name: &str,
    param: &str,
    expected: &str,
    ok: impl Fn(&str, Mode) -> bool,
) -> Result<(), String> {
    let Some(c) = schema.columns.iter().find(|c| c.name.eq_ignore_ascii_case(name)) else {
        let names: Vec<&str> = schema.columns.iter().map(|c| c.name.as_str()).collect();
        return Err(format!("{param}={name}: the table has no such column (its columns: {})", names.join(", ")));
    };
    if !ok(&c.type_name.to_ascii_uppercase(), c.mode) {
        return Err(format!(
            "{param}={name}: column {} is {} {}; expected {expected}",
            c.name,
            c.mode.as_str(),
            c.type_name
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::from_json(&json!([
            {"name": "ts", "type": "TIMESTAMP", "mode": "REQUIRED"},
            {"name": "day", "type": "DATE"},
            {"name": "at", "type": "DATETIME"},
            {"name": "id", "type": "INTEGER"},
            {"name": "n", "type": "FLOAT"},
            {"name": "tags", "type": "STRING", "mode": "REPEATED"},
            {"name": "times", "type": "TIMESTAMP", "mode": "REPEATED"},
            {"name": "loc", "type": "RECORD", "fields": [{"name": "lat", "type": "FLOAT"}]}
        ]))
        .unwrap()
    }

    fn part(field: Option<&str>) -> TableLayout {
        TableLayout {
            partitioning: Some(Partitioning {
                granularity: Granularity::Hour,
                field: field.map(str::to_string),
                expiration_days: Some(1.5),
            }),
            clustering: vec![],
            ..Default::default()
        }
    }

    #[test]
    fn partition_columns_follow_bigquerys_rules() {
        for ok in [None, Some("ts"), Some("DAY"), Some("at")] {
            assert!(part(ok).check(&schema()).is_ok(), "{ok:?}");
        }
        for (bad, why) in [("id", "INTEGER"), ("times", "REPEATED"), ("loc", "RECORD"), ("loc.lat", "no such column")] {
            let e = part(Some(bad)).check(&schema()).unwrap_err();
            assert!(e.starts_with(&format!("tablePartitionField={bad}:")) && e.contains(why), "{e}");
        }
        assert_eq!(part(None).partitioning.unwrap().expiration_ms().as_deref(), Some("129600000"));
    }

    #[test]
    fn clustering_columns_follow_bigquerys_rules() {
        let l =
            |c: &[&str]| TableLayout { clustering: c.iter().map(|s| s.to_string()).collect(), ..Default::default() };
        assert!(l(&["id", "ts", "day", "at"]).check(&schema()).is_ok());
        assert!(l(&["id", "ts", "day", "at", "id"]).check(&schema()).unwrap_err().contains("at most 4"));
        assert!(l(&["id", "ID"]).check(&schema()).unwrap_err().contains("twice"));
        assert!(l(&["n"]).check(&schema()).unwrap_err().contains("FLOAT"));
        assert!(l(&["tags"]).check(&schema()).unwrap_err().contains("REPEATED"));
        assert!(l(&["loc"]).check(&schema()).unwrap_err().contains("RECORD"));
        assert!(TableLayout::default().is_default() && TableLayout::default().check(&schema()).is_ok());
    }

    #[test]
    fn granularities_round_trip() {
        for g in [Granularity::Hour, Granularity::Day, Granularity::Month, Granularity::Year] {
            assert_eq!(Granularity::parse(g.as_str()), Some(g));
        }
        assert_eq!(Granularity::parse("WEEK"), None);
    }
}
