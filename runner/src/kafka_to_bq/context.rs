//! What a running kafka-to-bq job shares between its parts: [`JobCtx`] (configuration,
//! clients, positions, counters) and the [`Mapping`]s and [`Route`]s batches are mapped
//! with. It sits below everything that runs the job (`job`, `autoscale`, `pool`,
//! `shard`, `batch`, `writer`, `publish`), which all read it and none of which it names.

use super::setup::config::KafkaToBqConfig;
use crate::bigquery::schema::Schema;
use crate::bigquery::{proto, write::WriteClient, Endpoints, TableRef};
use crate::control::lock;
use crate::kafka::Metadata;
use crate::kafka_to_bq::map::metadata::{MetaColumn, MetaPlan};
use crate::kafka_to_bq::map::transform::{Input, Mapper};
use crate::stats::{watermark_age_s, JobStats};
use anyhow::{Context, Result};
use prost_types::DescriptorProto;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicUsize};
use std::sync::Arc;

/// A schema ready to map with: the mapper, its row descriptor and its fingerprint.
pub struct Mapping {
    /// [`Schema::fingerprint`].
    pub fingerprint: String,
    /// Message → row.
    pub mapper: Mapper,
    /// The rows' protobuf descriptor.
    pub descriptor: DescriptorProto,
}

impl Mapping {
    /// Build the JSON mapper and descriptor for `schema`.
    pub fn new(schema: Schema, max_row_bytes: usize) -> Mapping {
        Mapping {
            fingerprint: schema.fingerprint(),
            descriptor: proto::descriptor(&schema, "Row"),
            mapper: Mapper::new(schema, max_row_bytes),
        }
    }

    /// Build the mapper for `input` (keeping the Kafka key in `_key` if `persist_key`,
    /// and the record's metadata in the `meta` columns).
    pub fn with_input(
        schema: Schema,
        max_row_bytes: usize,
        input: Input,
        persist_key: bool,
        meta: &[MetaColumn],
    ) -> Result<Mapping> {
        let fingerprint = schema.fingerprint();
        let descriptor = proto::descriptor(&schema, "Row");
        let plan = match meta.is_empty() {
            true => None,
            false => Some(MetaPlan::resolve(meta, &schema).map_err(anyhow::Error::msg)?),
        };
        let mapper = Mapper::with_input(schema, max_row_bytes, input, persist_key)
            .context("persistKafkaKey=true needs a _key column in the table")?
            .with_meta(plan);
        Ok(Mapping { fingerprint, descriptor, mapper })
    }

    /// Rows that are CDC changes (`cdcPrimaryKey`): the key checked against the schema,
    /// the pseudo-columns added to the descriptor and written after each row.
    pub fn with_cdc(mut self, cdc: Option<&super::map::cdc::CdcConfig>) -> Result<Mapping> {
        if let Some(c) = cdc {
            let plan = super::map::cdc::CdcPlan::resolve(c, self.mapper.schema()).map_err(anyhow::Error::msg)?;
            self.descriptor = plan.descriptor(self.descriptor);
            self.mapper = self.mapper.with_cdc(Some(Arc::new(plan)));
        }
        Ok(self)
    }
}

/// Another record type's table (per-record tables) and how its records are mapped.
pub struct Route {
    /// The table.
    pub table: TableRef,
    /// Its mapping (only records of that type).
    pub mapping: Arc<Mapping>,
}

/// A route, or why that record type cannot be written (its records are dead-lettered).
pub type RouteResult = std::result::Result<Arc<Route>, String>;

/// Shared state of a running job.
pub struct JobCtx {
    /// Configuration.
    pub cfg: KafkaToBqConfig,
    /// `<checkpoint-dir>/<job-name>`.
    pub job_dir: PathBuf,
    /// The table's current schema ([`JobCtx::current`]); schema evolution replaces it.
    pub(super) mapping: std::sync::RwLock<Arc<Mapping>>,
    /// Held while the table's schema is being changed ([`super::run::evolve`]).
    pub(super) evolving: tokio::sync::Mutex<()>,
    /// Row descriptor of the dead-letter table.
    pub dlq_descriptor: DescriptorProto,
    /// BigQuery REST endpoints (None for the stats sink).
    pub endpoints: Option<Endpoints>,
    /// Per-record tables met while running, by record full name.
    pub(super) routes: std::sync::Mutex<HashMap<String, RouteResult>>,
    /// Schemas that logged batches were mapped with, by fingerprint (loaded on demand).
    pub(super) mappings: std::sync::Mutex<HashMap<String, Arc<Mapping>>>,
    /// Where each partition starts when a shard has no position for it.
    pub(super) start_positions: std::sync::Mutex<BTreeMap<i32, i64>>,
    /// The earliest offset stored per partition when the job started.
    pub(super) retention_floors: std::sync::Mutex<BTreeMap<i32, i64>>,
    /// Positions `offsetGapPolicy=SKIP` moved at start (past an end, truncated,
    /// deleted), each in force until its shard logs another batch.
    pub(super) moves: crate::kafka_to_bq::setup::positions::Moves,
    /// The log the job reads (topic id) and the logs its checkpoint may name that it
    /// gave up on.
    pub log: crate::kafka_to_bq::setup::positions::LogState,
    /// Shards whose uncommitted batch cannot be read again as logged (settled by its
    /// streams' row counts under `offsetGapPolicy=SKIP`).
    pub(super) unreplayable: BTreeMap<usize, crate::kafka_to_bq::setup::positions::Unreplayable>,
    /// What the memory budget gives this pipeline: prefetch per partition, batch size.
    pub shares: crate::kafka::budget::Shares,
    /// The pipeline's progress journal, every shard's offset and commit entries.
    pub(crate) journal: std::sync::Arc<crate::progress::journal::Journal>,
    /// Storage Write client (None for the stats sink).
    pub write_client: Option<WriteClient>,
    /// The job's one metadata client (partitions and watermarks).
    pub metadata: Metadata,
    /// Counters and latencies.
    pub stats: Arc<JobStats>,
    /// Committed position of every partition (for the backlog signal).
    pub positions: std::sync::Mutex<BTreeMap<i32, i64>>,
    /// Event time (Kafka timestamp, ms) of the last committed message of every partition
    /// (for the data watermark age).
    pub event_times: std::sync::Mutex<BTreeMap<i32, i64>>,
    /// Wall-clock ms of the last message read or batch finished (idle detection).
    pub last_read_ms: AtomicI64,
    /// Shards processing a batch right now; the job is only idle when this is 0.
    pub busy: AtomicUsize,
    /// The job directory's lock, held for the job's life.
    /// The control plane's handle, when the job is registered.
    pub control: Option<Arc<crate::control::Control>>,
    pub(super) _lock: lock::JobLock,
}

impl JobCtx {
    /// Messages waiting in Kafka: each partition's high watermark minus its committed
    /// position (before the first commit of this run, its checkpoint position).
    pub fn backlog(&self, high_watermarks: &BTreeMap<i32, i64>) -> i64 {
        self.backlog_by_partition(high_watermarks).values().sum()
    }

    /// Messages waiting in each partition: its high watermark less the job's position.
    pub fn backlog_by_partition(&self, high_watermarks: &BTreeMap<i32, i64>) -> BTreeMap<i32, i64> {
        let pos = self.positions.lock().expect("positions lock");
        high_watermarks
            .iter()
            .map(|(p, h)| (*p, (h - pos.get(p).copied().unwrap_or_else(|| self.start_position(*p))).max(0)))
            .collect()
    }

    /// Dataflow's data watermark age, approximated for a Kafka source: over the
    /// partitions that still have a backlog, the longest time since the event time of
    /// the last message committed from it (the oldest waiting message is at most that
    /// old). 0 when nothing waits; `None` while a backlogged partition has no committed
    /// message yet.
    pub fn data_watermark_age_s(&self, backlog: &BTreeMap<i32, i64>, now_ms: i64) -> Option<f64> {
        watermark_age_s(&self.event_times.lock().expect("event times lock"), backlog, now_ms)
    }

    /// Where partition `p` starts when its shard has no position for it.
    pub fn start_position(&self, p: i32) -> i64 {
        self.start_positions.lock().expect("start positions lock").get(&p).copied().unwrap_or(0)
    }

    /// Where a shard whose newest logged batch `batch` leaves partition `p` at `pos`
    /// resumes: where `offsetGapPolicy=SKIP` moved it at job start (counted then), else
    /// at `pos`, or at the earliest stored offset if retention deleted it.
    pub fn resume_position(&self, p: i32, pos: i64, batch: u64) -> i64 {
        self.moves.resume(p, pos, batch).max(self.retention_floor(p))
    }

    /// Why shard `shard`'s uncommitted batch `batch` cannot be read again as logged, if so.
    pub(crate) fn unreplayable(
        &self,
        shard: usize,
        batch: u64,
    ) -> Option<&crate::kafka_to_bq::setup::positions::Unreplayable> {
        self.unreplayable.get(&shard).filter(|u| u.batch == batch)
    }

    /// The earliest offset of `p` still stored when the job started (or was found).
    pub fn retention_floor(&self, p: i32) -> i64 {
        self.retention_floors.lock().expect("floors lock").get(&p).copied().unwrap_or(0)
    }

    /// The mapping of the table's current schema.
    pub fn current(&self) -> Arc<Mapping> {
        self.mapping.read().expect("mapping lock").clone()
    }

    /// Map with `m` from now on (the table's schema changed).
    pub(super) fn adopt(&self, m: Arc<Mapping>) {
        self.mappings.lock().expect("mappings lock").insert(m.fingerprint.clone(), m.clone());
        *self.mapping.write().expect("mapping lock") = m;
    }

    /// The mapping for a logged schema fingerprint (None: the current schema).
    pub fn mapping(&self, fingerprint: Option<&str>) -> Result<Arc<Mapping>> {
        let current = self.current();
        let fp = match fingerprint {
            None => return Ok(current),
            Some(fp) if fp == current.fingerprint => return Ok(current),
            Some(fp) => fp,
        };
        if let Some(m) = self.mappings.lock().expect("mappings lock").get(fp) {
            return Ok(m.clone());
        }
        let path = schema_path(&self.job_dir, fp);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "job {}: a logged batch was mapped with schema {fp}, but its copy {} cannot be read",
                self.cfg.job_name,
                path.display()
            )
        })?;
        let json: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        let schema = Schema::from_json(&json).with_context(|| format!("schema copy {}", path.display()))?;
        tracing::warn!(job = %self.cfg.job_name, logged = fp, current = %current.fingerprint, "the table's schema changed since this batch was logged: replaying it with the logged schema");
        let m = Arc::new(self.mapping_like(&current, schema)?);
        self.mappings.lock().expect("mappings lock").insert(fp.to_string(), m.clone());
        Ok(m)
    }

    /// A mapping onto `schema` with everything else as `like` maps (input, key,
    /// metadata, UDF, record type, CDC).
    pub(super) fn mapping_like(&self, like: &Mapping, schema: Schema) -> Result<Mapping> {
        let cur = &like.mapper;
        let mut m = Mapping::with_input(
            schema,
            cur.max_row_bytes(),
            cur.input().clone(),
            cur.persists_key(),
            &self.cfg.metadata,
        )?;
        m.mapper = m.mapper.with_udf(cur.udf().cloned()).for_record(cur.record().map(str::to_string));
        m.with_cdc(self.cfg.cdc.as_ref())
    }

    /// Route records named `record` with `route` from now on (its table's schema changed).
    pub(super) fn set_route(&self, record: &str, route: Arc<Route>) {
        self.routes.lock().expect("routes lock").insert(record.to_string(), Ok(route));
    }

    /// The route of records named `record`, once [`JobCtx::prepare_routes`] has seen one.
    pub fn route(&self, record: &str) -> Option<RouteResult> {
        self.routes.lock().expect("routes lock").get(record).cloned()
    }

    /// The routes a new batch maps with: every record type met so far.
    pub(crate) fn routes_now(&self) -> HashMap<String, RouteResult> {
        self.routes.lock().expect("routes lock").clone()
    }

    /// The routes a logged batch was mapped with: each record type to its logged table
    /// and schema (the live route when it is still the same, else the schema's copy), or
    /// to the dead letters with the logged reason.
    pub(crate) fn logged_routes(
        &self,
        logged: &BTreeMap<String, crate::progress::LoggedRoute>,
    ) -> Result<HashMap<String, RouteResult>> {
        use crate::progress::LoggedRoute;
        let live = self.routes_now();
        let mut out = HashMap::new();
        for (name, how) in logged {
            let route = match how {
                LoggedRoute::Refused(why) => Err(why.clone()),
                LoggedRoute::Table { table, schema } => match live.get(name) {
                    Some(Ok(r)) if r.table.to_string() == *table && r.mapping.fingerprint == *schema => Ok(r.clone()),
                    _ => Ok(Arc::new(self.logged_route(name, table, schema)?)),
                },
            };
            out.insert(name.clone(), route);
        }
        Ok(out)
    }

    /// Record type `name`'s route to `table` with the schema copy `fingerprint`.
    fn logged_route(&self, name: &str, table: &str, fingerprint: &str) -> Result<Route> {
        let path = schema_path(&self.job_dir, fingerprint);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!("job {}: a logged batch routed {name} to {table} with schema {fingerprint}, but its copy {} cannot be read", self.cfg.job_name, path.display())
        })?;
        let schema =
            Schema::from_json(&serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?)
                .with_context(|| format!("schema copy {}", path.display()))?;
        let table = TableRef::parse(table).map_err(|e| anyhow::anyhow!("a logged route names table {table:?}: {e}"))?;
        let mapping = self.record_mapping(&self.current().mapper, name, schema).map_err(anyhow::Error::msg)?;
        Ok(Route { table, mapping: Arc::new(mapping) })
    }

    /// A mapping for records named `name` onto `schema`, with everything else as `like`.
    fn record_mapping(
        &self,
        like: &crate::kafka_to_bq::map::transform::Mapper,
        name: &str,
        schema: Schema,
    ) -> std::result::Result<Mapping, String> {
        let m = Mapping::with_input(
            schema,
            like.max_row_bytes(),
            like.input().clone(),
            like.persists_key(),
            &self.cfg.metadata,
        )
        .map_err(|e| format!("{e:#}"))?;
        Mapping { mapper: m.mapper.for_record(Some(name.to_string())), ..m }
            .with_cdc(self.cfg.cdc.as_ref())
            .map_err(|e| format!("{e:#}"))
    }

    /// With per-record tables: make sure every record type in `values` has its table
    /// (created from its writer schema if needed) before the batch is mapped.
    pub async fn prepare_routes<'a>(&self, values: impl Iterator<Item = &'a [u8]>) -> Result<()> {
        let current = self.current();
        let mapper = &current.mapper;
        let (Some(primary), Input::Avro(d)) = (mapper.record(), mapper.input()) else { return Ok(()) };
        let mut new: Vec<(String, Arc<crate::avro::WriterSchema>)> = Vec::new();
        for v in values {
            let Ok((w, _)) = d.split(v) else { continue };
            let Some(name) = w.full_name() else { continue };
            if name != primary && self.route(&name).is_none() && !new.iter().any(|(n, _)| n == &name) {
                new.push((name, w));
            }
        }
        for (name, w) in new {
            let r = super::setup::table::side_table(&self.cfg, self.endpoints.as_ref(), &w).await?.and_then(
                |(table, schema)| {
                    let mapping = self.record_mapping(mapper, &name, schema)?;
                    Ok(Arc::new(Route { table, mapping: Arc::new(mapping) }))
                },
            );
            if let Ok(route) = &r {
                store_schema(&self.job_dir, &route.mapping)?;
            }
            if let Err(e) = &r {
                tracing::error!(record = %name, error = %e, "records of this type cannot be written: they go to the dead-letter table");
            }
            self.routes.lock().expect("routes lock").insert(name, r);
        }
        Ok(())
    }

    /// Add partitions found while running: they start at `lows` (their earliest offsets).
    pub fn add_partitions(&self, lows: &BTreeMap<i32, i64>) {
        self.start_positions.lock().expect("start positions lock").extend(lows);
        self.retention_floors.lock().expect("floors lock").extend(lows);
    }
}

fn schema_path(job_dir: &Path, fingerprint: &str) -> PathBuf {
    job_dir.join("schemas").join(format!("{fingerprint}.json"))
}

/// Keep a copy of the schema batches are mapped with, so a replay after a schema
/// change maps them the same way.
pub(super) fn store_schema(job_dir: &Path, m: &Mapping) -> Result<()> {
    let path = schema_path(job_dir, &m.fingerprint);
    if path.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(path.parent().expect("schemas dir"))?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&m.mapper.schema().to_json())?)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
}
