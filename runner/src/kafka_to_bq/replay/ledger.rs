//! The replay ledger: a table beside the dead-letter table, `<dead-letter table>_replayed`,
//! with one row per dead-letter record that a replay handled. A later replay reads it
//! and skips those records, so a second replay lands nothing twice.
//!
//! The dead-letter table itself is left as Google's schema has it: marking its rows
//! would need a column it lacks, or DML on a table the job appends to.

use crate::bigquery::proto::{put_bytes, put_varint};
use crate::bigquery::rest::{self, RestError};
use crate::bigquery::schema::Schema;
use crate::bigquery::TableRef;
use serde_json::json;
use std::collections::HashSet;

/// What became of a replayed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its row is in the table.
    Written,
    /// The UDF dropped it (it returned null, undefined or "").
    Dropped,
}

impl Outcome {
    /// The `outcome` column's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Written => "WRITTEN",
            Outcome::Dropped => "DROPPED_BY_UDF",
        }
    }
}

/// The ledger of dead-letter table `dlq`.
pub fn table_for(dlq: &TableRef) -> TableRef {
    TableRef { table: format!("{}_replayed", dlq.table), ..dlq.clone() }
}

/// The ledger's columns: the record's key, when and by which job it was replayed,
/// into which table, and its outcome.
pub fn schema() -> Schema {
    Schema::from_json(&json!([
        {"name": "rowKey", "type": "STRING", "mode": "REQUIRED"},
        {"name": "replayedAt", "type": "TIMESTAMP", "mode": "REQUIRED"},
        {"name": "targetTable", "type": "STRING", "mode": "NULLABLE"},
        {"name": "replayJob", "type": "STRING", "mode": "NULLABLE"},
        {"name": "outcome", "type": "STRING", "mode": "NULLABLE"}
    ]))
    .expect("the ledger schema is valid")
}

/// One ledger row, protobuf-encoded in [`schema`]'s column order.
pub fn encode(key: &str, at_ms: i64, target: &TableRef, job: &str, outcome: Outcome) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 96);
    put_bytes(1, key.as_bytes(), &mut out);
    put_varint(2, at_ms.saturating_mul(1000) as u64, &mut out);
    put_bytes(3, target.to_string().as_bytes(), &mut out);
    put_bytes(4, job.as_bytes(), &mut out);
    put_bytes(5, outcome.as_str().as_bytes(), &mut out);
    out
}

/// The keys the ledger holds.
pub async fn replayed_keys(c: &gcp_bigquery_client::Client, ledger: &TableRef) -> Result<HashSet<String>, RestError> {
    let sql = format!("SELECT rowKey FROM `{}.{}.{}`", ledger.project, ledger.dataset, ledger.table);
    let rows = rest::query_rows(c, &ledger.project, &sql).await?;
    Ok(rows.into_iter().filter_map(|r| r.into_iter().next().flatten()).collect())
}
