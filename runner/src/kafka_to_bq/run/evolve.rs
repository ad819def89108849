//! Schema evolution while the job runs (`schemaUpdateOptions`): the table is changed as
//! a batch's records ask, and the batch is mapped again. With per-record tables
//! (`schemaFormat=SCHEMA_REGISTRY`) each record type's table evolves with its writer schema.
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
use crate::bigquery::evolution::{apply, from_json_value, from_schema, pending, Change, SchemaUpdates};
use crate::bigquery::rest;
use crate::bigquery::schema::Schema;
use crate::bigquery::TableRef;
use crate::kafka_to_bq::context::{store_schema, JobCtx, Mapping, Route};
use crate::kafka_to_bq::map::transform::{Input, RecordError};
use anyhow::Result;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Change the tables' schemas as the records `asking` (index into the batch, and why
/// each did not map) ask, as far as the job's `schemaUpdateOptions` allow: the job's
/// table, and with per-record tables the table of each other record type that asks.
/// Returns the mapping to map the batch with, and whether anything changed (nothing does
/// when another shard made the changes already, or no column can be inferred).
pub(super) async fn evolve(ctx: &JobCtx, cut: &Cut, asking: &[(usize, RecordError)]) -> Result<(Arc<Mapping>, bool)> {
    let _one_at_a_time = ctx.evolving.lock().await;
    let current = ctx.current();
    let (mut main, mut side) = (Vec::new(), BTreeMap::<String, Vec<(usize, &RecordError)>>::new());
    for (i, e) in asking {
        let value = cut.msgs.at(*i).payload().unwrap_or_default();
        match other_record(&current, value) {
            Some(name) => side.entry(name).or_default().push((*i, e)),
            None => main.push((*i, e)),
        }
    }
    let mut changed = false;
    for (name, items) in side {
        changed |= evolve_route(ctx, cut, &name, &items).await?;
    }
    if main.is_empty() {
        return Ok((current, changed));
    }
    let mut changes = Vec::new();
    for (i, e) in main {
        let value = cut.msgs.at(i).payload().unwrap_or_default();
        changes.extend(asked(&current, value, e, ctx.cfg.schema_updates, ctx.cfg.persist_key));
    }
    let todo = pending(current.mapper.schema(), changes);
    if todo.is_empty() {
        return Ok((current, changed));
    }
    let Some(schema) = change_table(ctx, &ctx.cfg.table, current.mapper.schema(), &todo).await? else {
        return Ok((current, changed));
    };
    crate::crash_point!("evolve::after_patch");
    let m = Arc::new(ctx.mapping_like(&current, schema)?);
    store_schema(&ctx.job_dir, &m)?;
    let names: Vec<String> = todo.iter().map(ToString::to_string).collect();
    tracing::warn!(job = %ctx.cfg.job_name, table = %ctx.cfg.table, changes = ?names, from = %current.fingerprint, to = %m.fingerprint, "schemaUpdateOptions: the table's schema was changed for new records");
    ctx.stats.note(|r| r.schema_changes += todo.len() as u64);
    ctx.adopt(m.clone());
    Ok((m, true))
}

/// With per-record tables: the record type of `value` when it is not the job's first.
fn other_record(current: &Mapping, value: &[u8]) -> Option<String> {
    let (Input::Avro(d), Some(primary)) = (current.mapper.input(), current.mapper.record()) else { return None };
    let name = d.split(value).ok()?.0.full_name()?;
    (name != primary).then_some(name)
}

/// `changes` made to `table` (tables.patch), or to `schema` alone for the stats sink.
/// A transient failure (429, 5xx, the network) is retried with
/// [`crate::retry::Backoff::BIGQUERY`] until it passes, as a streaming job waits out an
/// outage. None: BigQuery refused the change for good (another 4xx); the job goes on
/// and the records that asked for it go to the dead-letter table.
async fn change_table(ctx: &JobCtx, table: &TableRef, schema: &Schema, changes: &[Change]) -> Result<Option<Schema>> {
    let (Some(ep), Some(_)) = (&ctx.endpoints, &ctx.write_client) else { return Ok(Some(apply(schema, changes))) };
    for attempt in 1.. {
        let r = async { rest::evolve_table(&rest::client(ep).await?, ep, table, changes).await }.await;
        match r {
            Ok(s) => return Ok(Some(s)),
            Err(e) if e.is_transient() => {
                crate::retry::note_retry(crate::retry::Service::BigQuery);
                let wait = crate::retry::Backoff::BIGQUERY.delay(attempt).expect("no attempt limit");
                tracing::warn!(job = %ctx.cfg.job_name, table = %table, error = %e, attempt, ?wait, "schemaUpdateOptions: changing the table failed for now; trying again");
                tokio::time::sleep(wait).await;
            }
            Err(e) => {
                tracing::error!(job = %ctx.cfg.job_name, table = %table, error = %e, "schemaUpdateOptions: BigQuery refused the change; the records that asked for it go to the dead-letter table");
                ctx.stats.note(|r| r.schema_changes_refused += 1);
                return Ok(None);
            }
        }
    }
    unreachable!("the loop returns")
}

/// Change the table of record type `name` (per-record tables) as the records `items` ask,
/// and route that type with the new schema from now on. Whether anything changed.
async fn evolve_route(ctx: &JobCtx, cut: &Cut, name: &str, items: &[(usize, &RecordError)]) -> Result<bool> {
    let Some(Ok(route)) = ctx.route(name) else { return Ok(false) };
    let mut changes = Vec::new();
    for (i, e) in items {
        let value = cut.msgs.at(*i).payload().unwrap_or_default();
        changes.extend(asked(&route.mapping, value, e, ctx.cfg.schema_updates, ctx.cfg.persist_key));
    }
    let todo = pending(route.mapping.mapper.schema(), changes);
    if todo.is_empty() {
        return Ok(false);
    }
    let Some(schema) = change_table(ctx, &route.table, route.mapping.mapper.schema(), &todo).await? else {
        return Ok(false);
    };
    let m = ctx.mapping_like(&route.mapping, schema)?;
    let names: Vec<String> = todo.iter().map(ToString::to_string).collect();
    tracing::warn!(job = %ctx.cfg.job_name, table = %route.table, record = name, changes = ?names, "schemaUpdateOptions: a per-record table's schema was changed for new records");
    ctx.stats.note(|r| r.schema_changes += todo.len() as u64);
    store_schema(&ctx.job_dir, &m)?;
    ctx.set_route(name, Arc::new(Route { table: route.table.clone(), mapping: Arc::new(m) }));
    Ok(true)
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
        Input::Json | Input::Proto(_) => {
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
            Ok(Ok(wanted)) => out.extend(from_schema(schema, &wanted).into_iter().filter(|c| {
                match c {
                    Change::Add(col) => crate::bigquery::evolution::check_column_name(&col.name)
                        .map_err(|why| tracing::warn!(reason = %why, "a writer schema's field adds no column"))
                        .is_ok(),
                    Change::Relax(_) => false,
                }
            })),
            Ok(Err(why)) => tracing::warn!(reason = %why, "a writer schema adds no column"),
            Err(_) => {}
        },
    }
    out
}
