//! The destination at start: how values are read, which table rows go to, and its schema.
//!
//! - JSON: the table must exist (Google's JSON path uses CREATE_NEVER).
//! - Avro: the writer schema comes from the schema file, or for `SCHEMA_REGISTRY` from
//!   the latest version of the subject `<topic>-value`, which also names the table
//!   ([`crate::avro::table::dynamic_table_name`]). A missing table is created from the
//!   Avro schema under CREATE_IF_NEEDED (plus `_key` with `persistKafkaKey`), as
//!   `BigQueryIO.Write.withSchema(...)` does in Google's template; an existing table is
//!   used as it is, and records map onto its columns by name.
//! - With per-record tables, another record type met while running gets its own table
//!   ([`side_table`]), created from that writer schema under CREATE_IF_NEEDED.
//! - A table created here is partitioned and clustered as `tablePartitioning` and
//!   `tableClusteringFields` say ([`crate::bigquery::layout`]).
//! - `writeDisposition` applies once, when the job starts for the first time:
//!   WRITE_EMPTY refuses a table with rows, WRITE_TRUNCATE empties it (drops and
//!   re-creates it with the same schema). A restart of the same job appends, and so do
//!   topics that join a job of several later; that job applies it to each of its
//!   tables once, before its first pipelines start ([`apply_write_disposition_once`]).

use super::config::{KafkaToBqConfig, SinkKind};
use super::format::{DynamicTables, InputFormat, WriteDisposition};
use crate::avro::registry::Registry;
use crate::avro::table::{dynamic_table_name, table_schema, KAFKA_KEY_FIELD};
use crate::avro::wire::{AvroDecoder, Framing};
use crate::avro::WriterSchema;
use crate::bigquery::rest;
use crate::bigquery::schema::Schema;
use crate::bigquery::{Endpoints, TableRef};
use crate::kafka_to_bq::map::transform::Input;
use anyhow::{bail, Context, Result};
use std::sync::Arc;

/// What the job maps with.
pub struct Destination {
    /// The table rows go to.
    pub table: TableRef,
    /// Its schema.
    pub schema: Schema,
    /// How values are read.
    pub input: Input,
    /// With per-record tables: the record full name this table holds.
    pub record: Option<String>,
}

/// The per-record table Google's `BigQueryDynamicDestination` picks for records of `w`.
pub fn dynamic_table(d: &DynamicTables, w: &WriterSchema) -> Option<TableRef> {
    let (ns, name) = w.record_full_name()?;
    Some(TableRef {
        project: d.project.clone(),
        dataset: d.dataset.clone(),
        table: dynamic_table_name(&d.prefix, ns.as_deref(), &name),
    })
}

/// The table and schema for another record type met while running (per-record tables).
/// The outer error is transient (retry the batch); the inner one is for good: the
/// records of that type are dead-lettered with it.
pub async fn side_table(
    cfg: &KafkaToBqConfig,
    ep: Option<&Endpoints>,
    w: &WriterSchema,
) -> Result<Result<(TableRef, Schema), String>> {
    let d = cfg.dynamic.as_ref().context("dynamic tables configured")?;
    let Some(table) = dynamic_table(d, w) else {
        return Ok(Err("the writer schema is not a record: each message must become one row".into()));
    };
    let want = match new_table_schema(cfg, w) {
        Ok(s) => s,
        Err(e) => return Ok(Err(format!("table {table} cannot be made from the writer schema: {e:#}"))),
    };
    let Some(ep) = ep else { return Ok(Ok((table, want))) };
    let client = rest::client(ep).await?;
    let schema = match lookup(&client, ep, &table).await {
        Ok(s) => s,
        Err(e) if e.is_not_found() && cfg.dispositions.create_if_needed => {
            if let Err(why) = cfg.dispositions.layout.check(&want) {
                return Ok(Err(format!("table {table} cannot be created as asked: {why}")));
            }
            tracing::info!(table = %table, "a new record type: creating its table from the Avro schema (CREATE_IF_NEEDED)");
            rest::ensure_table_laid_out(&client, ep, &table, &want, &cfg.dispositions.layout).await?
        }
        Err(e) => return Ok(Err(format!("createDisposition=CREATE_NEVER: table {table} must exist ({e})"))),
    };
    if cfg.persist_key && schema.lookup(KAFKA_KEY_FIELD).is_none() {
        return Ok(Err(format!("persistKafkaKey=true, but table {table} has no {KAFKA_KEY_FIELD} column")));
    }
    Ok(Ok((table, schema)))
}

/// A table's schema, a transient failure (429, 5xx, the network) waited out with
/// [`crate::retry::Backoff::BIGQUERY`]: only BigQuery's answer for good (the table does
/// not exist, or cannot be read) decides a record type's route, which lasts the life of
/// the process. A passing 503 must not turn into "must exist" and dead letters.
async fn lookup(c: &gcp_bigquery_client::Client, ep: &Endpoints, table: &TableRef) -> Result<Schema, rest::RestError> {
    for attempt in 1.. {
        match rest::table_schema(c, ep, table).await {
            Err(e) if e.is_transient() => {
                crate::retry::note_retry(crate::retry::Service::BigQuery);
                let wait = crate::retry::Backoff::BIGQUERY.delay(attempt).expect("no attempt limit");
                tracing::warn!(table = %table, error = %e, attempt, ?wait, "reading a record type's table failed for now; trying again");
                tokio::time::sleep(wait).await;
            }
            r => return r,
        }
    }
    unreachable!("the loop returns")
}

/// The schema of a table created for records of `w`: the Avro schema's columns, then
/// `_key` with `persistKafkaKey`, then the `kafkaMetadataColumns`. Debezium's records
/// are envelopes: the table is made from their `after` record.
fn new_table_schema(cfg: &KafkaToBqConfig, w: &WriterSchema) -> Result<Schema> {
    let row = match cfg.cdc.as_ref().map(|c| c.format) {
        Some(crate::kafka_to_bq::map::cdc::CdcFormat::Debezium) => w.field_record("after").with_context(|| {
            "cdcFormat=DEBEZIUM: the writer schema has no after record (Debezium's Envelope has before, after, source and op)"
        })?,
        _ => w.clone(),
    };
    let s = table_schema(&row, cfg.persist_key)?;
    crate::kafka_to_bq::map::metadata::with_columns(&s, &cfg.metadata).map_err(anyhow::Error::msg)
}

/// The input and, for Avro, the writer schema the table would be created from.
async fn input(cfg: &KafkaToBqConfig) -> Result<(Input, Option<WriterSchema>, TableRef, Option<String>)> {
    let file = |path: &str, name: &str| -> Result<WriterSchema> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("{name}={path}: cannot read the schema file"))?;
        WriterSchema::parse(&text).with_context(|| format!("{name}={path}"))
    };
    Ok(match &cfg.format {
        InputFormat::Json => (Input::Json, None, cfg.table.clone(), None),
        InputFormat::AvroBinary { schema_path } => {
            let w = file(schema_path, "binaryAvroSchemaPath")?;
            (
                Input::Avro(Arc::new(AvroDecoder::with_file(Framing::Binary, w.clone()))),
                Some(w),
                cfg.table.clone(),
                None,
            )
        }
        InputFormat::AvroConfluentFile { schema_path } => {
            let w = file(schema_path, "confluentAvroSchemaPath")?;
            (
                Input::Avro(Arc::new(AvroDecoder::with_file(Framing::Confluent, w.clone()))),
                Some(w),
                cfg.table.clone(),
                None,
            )
        }
        InputFormat::Proto { schema_path, message } => {
            let d = crate::proto::ProtoDecoder::from_file(schema_path, message)
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("protoSchemaPath={schema_path}"))?;
            (Input::Proto(Arc::new(d)), None, cfg.table.clone(), None)
        }
        InputFormat::ProtoRegistry { url } => (
            Input::Proto(Arc::new(crate::proto::ProtoDecoder::with_registry(Registry::new(url)))),
            None,
            cfg.table.clone(),
            None,
        ),
        InputFormat::AvroRegistry { url } => {
            let registry = Registry::new(url);
            let subject = format!("{}-value", cfg.source.topic);
            let (id, text) = registry.latest(&subject).await.with_context(|| {
                format!(
                    "schemaFormat=SCHEMA_REGISTRY: the latest schema of subject {subject} names the destination table"
                )
            })?;
            let w = WriterSchema::parse(&text).with_context(|| format!("registry schema id {id} ({subject})"))?;
            let d = cfg.dynamic.as_ref().context("dynamic tables configured")?;
            let (Some(table), Some(record)) = (dynamic_table(d, &w), w.full_name()) else {
                bail!("registry schema id {id} ({subject}) is not a record: each message must become one row")
            };
            (Input::Avro(Arc::new(AvroDecoder::with_registry(registry))), Some(w), table, Some(record))
        }
    })
}

/// Resolve the destination: read (or create, or empty) the table as the parameters say.
pub async fn prepare(cfg: &KafkaToBqConfig, ep: Option<&Endpoints>, new_job: bool) -> Result<Destination> {
    let (input, writer, table, record) = input(cfg).await?;
    let blueprint = Blueprint::of(writer.as_ref(), &input);
    let schema = match (&cfg.run.sink, ep) {
        (SinkKind::Stats { schema_file }, _) => stats_schema(cfg, schema_file, blueprint.as_ref())?,
        (SinkKind::BigQuery, Some(ep)) => bigquery_schema(cfg, ep, &table, blueprint.as_ref(), new_job).await?,
        (SinkKind::BigQuery, None) => bail!("no BigQuery endpoints"),
    };
    if cfg.persist_key && schema.lookup(KAFKA_KEY_FIELD).is_none() {
        bail!("persistKafkaKey=true, but table {table} has no {KAFKA_KEY_FIELD} column: add one (ALTER TABLE ... ADD COLUMN {KAFKA_KEY_FIELD} BYTES), or let CREATE_IF_NEEDED create the table on an Avro path");
    }
    Ok(Destination { table, schema, input, record })
}

/// What a missing table would be made from: an Avro writer schema or a Protobuf
/// message descriptor.
enum Blueprint<'a> {
    Avro(&'a WriterSchema),
    Proto(&'a prost_reflect::MessageDescriptor),
}

impl Blueprint<'_> {
    fn of<'a>(writer: Option<&'a WriterSchema>, input: &'a Input) -> Option<Blueprint<'a>> {
        match (writer, input) {
            (Some(w), _) => Some(Blueprint::Avro(w)),
            (None, Input::Proto(d)) => d.message().map(Blueprint::Proto),
            _ => None,
        }
    }

    /// The table's schema: the message's columns, then `_key` and the metadata columns.
    fn schema(&self, cfg: &KafkaToBqConfig) -> Result<Schema> {
        match self {
            Blueprint::Avro(w) => new_table_schema(cfg, w),
            Blueprint::Proto(m) => {
                let s = crate::proto::table::table_schema(m).map_err(anyhow::Error::msg)?;
                let mut cols = s.to_json();
                if cfg.persist_key {
                    let key = serde_json::json!({"name": KAFKA_KEY_FIELD, "type": "BYTES", "mode": "NULLABLE"});
                    cols.as_array_mut().expect("columns").push(key);
                }
                let s = Schema::from_json(&cols)?;
                crate::kafka_to_bq::map::metadata::with_columns(&s, &cfg.metadata).map_err(anyhow::Error::msg)
            }
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Blueprint::Avro(_) => "the Avro schema",
            Blueprint::Proto(_) => "the Protobuf descriptor",
        }
    }
}

fn stats_schema(cfg: &KafkaToBqConfig, schema_file: &str, blueprint: Option<&Blueprint>) -> Result<Schema> {
    if schema_file.is_empty() {
        if let Some(Blueprint::Avro(w)) = blueprint {
            return Ok(table_schema(w, cfg.persist_key)?);
        }
        if let Some(bp) = blueprint {
            return bp.schema(cfg);
        }
    }
    let text = std::fs::read_to_string(schema_file).with_context(|| format!("reading schema file {schema_file}"))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("schema file {schema_file} is not JSON"))?;
    Schema::from_json(&json).with_context(|| format!("schema file {schema_file}"))
}

async fn bigquery_schema(
    cfg: &KafkaToBqConfig,
    ep: &Endpoints,
    table: &TableRef,
    blueprint: Option<&Blueprint<'_>>,
    new_job: bool,
) -> Result<Schema> {
    let client = rest::client(ep).await?;
    let schema = match (rest::table_schema(&client, ep, table).await, blueprint) {
        (Ok(s), _) => s,
        (Err(_), Some(bp)) if cfg.dispositions.create_if_needed => {
            let want = bp.schema(cfg).with_context(|| format!("creating {table} from {}", bp.what()))?;
            cfg.dispositions.layout.check(&want).map_err(|why| anyhow::anyhow!("creating {table}: {why}"))?;
            tracing::info!(table = %table, partitioned = cfg.dispositions.layout.partitioning.is_some(),
                clustered = !cfg.dispositions.layout.clustering.is_empty(),
                from = bp.what(), "table missing: creating it (CREATE_IF_NEEDED)");
            rest::ensure_table_laid_out(&client, ep, table, &want, &cfg.dispositions.layout).await?
        }
        (Err(e), Some(_)) => {
            return Err(anyhow::Error::new(e).context(format!("createDisposition=CREATE_NEVER: table {table} must exist")))
        }
        (Err(e), None) if matches!(cfg.format, InputFormat::ProtoRegistry { .. }) => {
            return Err(anyhow::Error::new(e).context(format!(
                "messageFormat=PROTO_CONFLUENT_WIRE_FORMAT writes to an existing table (no descriptor is known before the first message): create {table} first"
            )))
        }
        (Err(e), None) => {
            return Err(anyhow::Error::new(e).context(format!(
                "messageFormat=JSON writes to an existing table (Google's JSON path uses CREATE_NEVER): create {table} first"
            )))
        }
    };
    if new_job {
        apply_write_disposition(cfg, ep, &client, table, &schema).await?;
    }
    Ok(schema)
}

/// `writeDisposition` on `table` at a job's first start, for a job of several topics:
/// once per table, before any of its topics' pipelines starts (they then start with
/// WRITE_APPEND), so that a table several topics share is emptied once, not by each
/// pipeline and not when a topic joins later (issue 62, item 4). A table that does not
/// exist yet has nothing to empty.
pub async fn apply_write_disposition_once(cfg: &KafkaToBqConfig, ep: &Endpoints, table: &TableRef) -> Result<()> {
    if cfg.dispositions.write == WriteDisposition::Append {
        return Ok(());
    }
    let client = rest::client(ep).await?;
    match rest::table_schema(&client, ep, table).await {
        Ok(schema) => apply_write_disposition(cfg, ep, &client, table, &schema).await,
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("reading table {table} for writeDisposition"))),
    }
}

async fn apply_write_disposition(
    cfg: &KafkaToBqConfig,
    ep: &Endpoints,
    client: &gcp_bigquery_client::Client,
    table: &TableRef,
    schema: &Schema,
) -> Result<()> {
    match cfg.dispositions.write {
        WriteDisposition::Append => Ok(()),
        WriteDisposition::Empty => {
            let (rows, _) = crate::bigquery::rest::count_rows(ep, table, None).await?;
            if rows > 0 {
                bail!("writeDisposition=WRITE_EMPTY: table {table} already has {rows} rows; empty it, or use WRITE_APPEND or WRITE_TRUNCATE");
            }
            Ok(())
        }
        WriteDisposition::Truncate => {
            tracing::warn!(table = %table, "writeDisposition=WRITE_TRUNCATE: emptying the table before the first batch");
            rest::drop_table(client, table).await;
            rest::ensure_table_laid_out(client, ep, table, schema, &cfg.dispositions.layout).await?;
            Ok(())
        }
    }
}
