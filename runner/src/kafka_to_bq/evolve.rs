//! Schema evolution while the job runs (`schemaUpdateOptions`): the table is changed as
//! a batch's records ask, and the batch is mapped again.
//!
//! When [`super::batch::map_batch`] meets a record with a top-level field the table lacks
//! (ALLOW_FIELD_ADDITION) or a REQUIRED column it leaves empty (ALLOW_FIELD_RELAXATION),
//! the shard calls [`evolve`] before anything of the batch is logged or sent:
//! 1. the changes are read from the batch's records: a JSON field's column from its value
//!    ([`crate::bigquery::evolution::from_json_value`]), an Avro record's from its writer
//!    schema ([`crate::bigquery::evolution::from_schema`]);
//! 2. `tables.patch` makes those the table still lacks (another shard, or another job,
//!    may have made them: [`rest::evolve_table`]);
//! 3. a copy of the new schema is kept beside the logs, then every shard maps with it.
//!
//! Exactly-once is kept the way any schema change keeps it: a batch is logged with the
//! fingerprint of the schema it was mapped with, so its replay maps it the same way. A
//! crash between the patch and the log costs nothing: the restarted job reads the table's
//! new schema. The new columns reach the write streams as BigQuery propagates them; until
//! then an append is refused with SCHEMA_MISMATCH_EXTRA_FIELDS and retried
//! ([`crate::bigquery::write`]).

use super::batch::Cut;
use super::context::{store_schema, JobCtx, Mapping};
use super::transform::{Input, RecordError};
use crate::bigquery::evolution::{apply, from_json_value, from_schema, pending, Change, SchemaUpdates};
use crate::bigquery::rest;
use anyhow::{Context, Result};
use std::sync::Arc;

/// Change the table's schema as the records `asking` (index into the batch, and why each
/// did not map) ask, as far as the job's `schemaUpdateOptions` allow, and return the
/// mapping to map the batch with. Returns the current mapping unchanged when nothing new
/// can be changed (another shard did it already, or no column can be inferred).
pub(super) async fn evolve(ctx: &JobCtx, cut: &Cut, asking: &[(usize, RecordError)]) -> Result<Arc<Mapping>> {
    let _one_at_a_time = ctx.evolving.lock().await;
    let current = ctx.current();
    let allowed = ctx.cfg.schema_updates;
    let mut changes = Vec::new();
    for (i, e) in asking {
        let m = cut.msgs.at(*i);
        changes.extend(asked(&current, m.payload().unwrap_or_default(), e, allowed, ctx.cfg.persist_key));
    }
    let todo = pending(current.mapper.schema(), changes);
    if todo.is_empty() {
        return Ok(current);
    }
    let schema = match (&ctx.endpoints, &ctx.write_client) {
        (Some(ep), Some(_)) => {
            let client = rest::client(ep).await?;
            rest::evolve_table(&client, ep, &ctx.cfg.table, &todo)
                .await
                .with_context(|| format!("schemaUpdateOptions: changing table {}", ctx.cfg.table))?
        }
        _ => apply(current.mapper.schema(), &todo),
    };
    crate::crash_point!("evolve::after_patch");
    let m = Arc::new(ctx.mapping_like(&current, schema)?);
    store_schema(&ctx.job_dir, &m)?;
    let names: Vec<String> = todo.iter().map(ToString::to_string).collect();
    tracing::warn!(job = %ctx.cfg.job_name, table = %ctx.cfg.table, changes = ?names, from = %current.fingerprint, to = %m.fingerprint, "schemaUpdateOptions: the table's schema was changed for new records");
    ctx.stats.note(|r| r.schema_changes += todo.len() as u64);
    ctx.adopt(m.clone());
    Ok(m)
}

/// The changes one record asks for: every field it has that the table lacks, and the
/// REQUIRED column its error names. A field no column can be made for is logged (its
/// record goes to the dead-letter table when the batch is mapped again).
fn asked(current: &Mapping, value: &[u8], e: &RecordError, allowed: SchemaUpdates, key: bool) -> Vec<Change> {
    let schema = current.mapper.schema();
    let mut out = Vec::new();
    if let (RecordError::MissingRequired(col), true) = (e, allowed.relax) {
        out.push(Change::Relax(col.clone()));
    }
    if !allowed.add {
        return out;
    }
    match current.mapper.input() {
        Input::Json => {
            for (k, v) in current.mapper.json_object(value).into_iter().flatten() {
                if schema.lookup(&k).is_some() {
                    continue;
                }
                match from_json_value(&k, &v) {
                    Ok(c) => out.push(c),
                    Err(why) => {
                        tracing::warn!(field = %k, reason = %why, "a new field adds no column; its records go to the dead-letter table")
                    }
                }
            }
        }
        Input::Avro(d) => match d.split(value).map(|(w, _)| crate::avro::table::table_schema(&w, key)) {
            Ok(Ok(wanted)) => {
                out.extend(from_schema(schema, &wanted).into_iter().filter(|c| matches!(c, Change::Add(_))))
            }
            Ok(Err(why)) => tracing::warn!(reason = %why, "a writer schema adds no column"),
            Err(_) => {}
        },
    }
    out
}
