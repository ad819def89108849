//! Job set-up and teardown: the checkpoint's identity, the table's schema (and a copy
//! of every schema batches were mapped with), the dead-letter table, start positions,
//! the job lock, then the pool until a drain, and the summary.

use super::config::{Delivery, KafkaToBqConfig, SinkKind};
use super::{autoscale, positions};
use crate::bigquery::schema::Schema;
use crate::bigquery::{proto, rest, write::WriteClient, Endpoints, TableRef};
use crate::control::lock;
use crate::kafka::Metadata;
use crate::kafka_to_bq::transform::{Input, Mapper};
use crate::stats::{watermark_age_s, JobStats, Summary};
use anyhow::{bail, Context, Result};
use prost_types::DescriptorProto;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// What a job's checkpoint belongs to; a restart with other values is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobIdentity {
    /// Template name.
    pub template: String,
    /// Topic.
    pub topic: String,
    /// Destination table.
    pub table: String,
    /// Dead-letter table.
    pub dlq: Option<String>,
    /// Delivery mode.
    pub delivery: String,
    /// Shard count.
    pub shards: usize,
}

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

    /// Build the mapper for `input` (keeping the Kafka key in `_key` if `persist_key`).
    pub fn with_input(schema: Schema, max_row_bytes: usize, input: Input, persist_key: bool) -> Result<Mapping> {
        let fingerprint = schema.fingerprint();
        let descriptor = proto::descriptor(&schema, "Row");
        let mapper = Mapper::with_input(schema, max_row_bytes, input, persist_key)
            .context("persistKafkaKey=true needs a _key column in the table")?;
        Ok(Mapping { fingerprint, descriptor, mapper })
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
    /// The table's current schema.
    pub mapping: Arc<Mapping>,
    /// Row descriptor of the table (the current schema).
    pub descriptor: DescriptorProto,
    /// Row descriptor of the dead-letter table.
    pub dlq_descriptor: DescriptorProto,
    /// BigQuery REST endpoints (None for the stats sink).
    pub endpoints: Option<Endpoints>,
    /// Per-record tables met while running, by record full name.
    routes: std::sync::Mutex<HashMap<String, RouteResult>>,
    /// Schemas that logged batches were mapped with, by fingerprint (loaded on demand).
    mappings: std::sync::Mutex<HashMap<String, Arc<Mapping>>>,
    /// Where each partition starts when a shard has no position for it.
    start_positions: std::sync::Mutex<BTreeMap<i32, i64>>,
    /// The earliest offset stored per partition when the job started.
    retention_floors: std::sync::Mutex<BTreeMap<i32, i64>>,
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
    _lock: lock::JobLock,
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

    /// The earliest offset of `p` still stored when the job started (or was found).
    pub fn retention_floor(&self, p: i32) -> i64 {
        self.retention_floors.lock().expect("floors lock").get(&p).copied().unwrap_or(0)
    }

    /// The mapping for a logged schema fingerprint (None: the current schema).
    pub fn mapping(&self, fingerprint: Option<&str>) -> Result<Arc<Mapping>> {
        let fp = match fingerprint {
            None => return Ok(self.mapping.clone()),
            Some(fp) if fp == self.mapping.fingerprint => return Ok(self.mapping.clone()),
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
        tracing::warn!(job = %self.cfg.job_name, logged = fp, current = %self.mapping.fingerprint, "the table's schema changed since this batch was logged: replaying it with the logged schema");
        let cur = &self.mapping.mapper;
        let mut m = Mapping::with_input(schema, cur.max_row_bytes(), cur.input().clone(), cur.persists_key())?;
        m.mapper = m.mapper.with_udf(cur.udf().cloned()).for_record(cur.record().map(str::to_string));
        let m = Arc::new(m);
        self.mappings.lock().expect("mappings lock").insert(fp.to_string(), m.clone());
        Ok(m)
    }

    /// The route of records named `record`, once [`JobCtx::prepare_routes`] has seen one.
    pub fn route(&self, record: &str) -> Option<RouteResult> {
        self.routes.lock().expect("routes lock").get(record).cloned()
    }

    /// With per-record tables: make sure every record type in `values` has its table
    /// (created from its writer schema if needed) before the batch is mapped.
    pub async fn prepare_routes<'a>(&self, values: impl Iterator<Item = &'a [u8]>) -> Result<()> {
        let mapper = &self.mapping.mapper;
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
            let r =
                super::table::side_table(&self.cfg, self.endpoints.as_ref(), &w).await?.and_then(|(table, schema)| {
                    let m = Mapping::with_input(
                        schema,
                        mapper.max_row_bytes(),
                        mapper.input().clone(),
                        mapper.persists_key(),
                    )
                    .map_err(|e| format!("{e:#}"))?;
                    let mapping = Mapping { mapper: m.mapper.for_record(Some(name.clone())), ..m };
                    Ok(Arc::new(Route { table, mapping: Arc::new(mapping) }))
                });
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
fn store_schema(job_dir: &Path, m: &Mapping) -> Result<()> {
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

/// A finished run.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Counters and latencies.
    pub summary: Summary,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Shards used.
    pub shards: usize,
    /// Autoscaling decisions that changed the count or the rationale.
    pub decisions: Vec<flexrun_autoscaler::Decision>,
    /// Workers at the end.
    pub workers: u32,
}

fn check_identity(job_dir: &Path, want: &JobIdentity) -> Result<JobIdentity> {
    let path = job_dir.join("job.json");
    match std::fs::read(&path) {
        Ok(bytes) => {
            let have: JobIdentity =
                serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))?;
            // The shard count is the checkpoint's; the dead-letter table may be added or
            // changed (the usual fix after a job stopped on a bad record).
            let same = JobIdentity { shards: have.shards, dlq: have.dlq.clone(), ..want.clone() };
            if have != same {
                bail!(
                    "job {} already has a checkpoint for a different pipeline ({}: topic {}, table {}, {}), but this run is for topic {}, table {}, {}. Use another --job-name, or remove {} to start over",
                    job_dir.file_name().unwrap_or_default().to_string_lossy(),
                    path.display(), have.topic, have.table, have.delivery, want.topic, want.table, want.delivery, job_dir.display()
                );
            }
            Ok(JobIdentity { dlq: want.dlq.clone(), ..have })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(job_dir).with_context(|| format!("creating {}", job_dir.display()))?;
            let tmp = job_dir.join("job.json.tmp");
            std::fs::write(&tmp, serde_json::to_vec_pretty(want)?)?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            Ok(want.clone())
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Plan where every partition starts (see [`positions`]), report retention gaps and
/// new partitions, and remember the partitions the job now knows.
async fn start_positions(
    cfg: &KafkaToBqConfig,
    metadata: &Metadata,
    job_dir: &Path,
    partitions: &[i32],
    existed: bool,
    stats: &JobStats,
) -> Result<(BTreeMap<i32, i64>, BTreeMap<i32, i64>)> {
    let checkpoint = positions::checkpoint_positions(job_dir)?;
    let known = existed.then(|| positions::read_known(job_dir).unwrap_or_else(|| partitions.iter().copied().collect()));
    let saved = crate::kafka::starts::read(job_dir).with_context(|| format!("reading {}", job_dir.display()))?;
    let initial = crate::kafka::starts::overlay(cfg.source.initial_positions(partitions).await?, &saved);
    let lows = metadata.low_watermarks(partitions).await?;
    let plan = positions::plan(partitions, &checkpoint, known.as_ref(), &initial, &lows);
    for g in &plan.gaps {
        tracing::error!(job = %cfg.job_name, topic = %cfg.source.topic, partition = g.partition, from = g.from, to = g.to, lost = g.lost(),
            "retention deleted records this job had not read: they are lost; continuing at the earliest stored offset");
    }
    let lost: i64 = plan.gaps.iter().map(positions::Gap::lost).sum();
    stats.note(|r| r.offsets_lost_to_retention += lost as u64);
    if !plan.new_partitions.is_empty() {
        tracing::info!(job = %cfg.job_name, partitions = ?plan.new_partitions, "partitions added since the job last ran start at their earliest offset");
        stats.note(|r| r.partitions_discovered += plan.new_partitions.len() as u64);
    }
    // Durable before the first read: a restart without a commit resumes here, not at a
    // newly resolved `latest` (which would skip what was produced in between).
    crate::kafka::starts::record(job_dir, &plan.positions).with_context(|| format!("writing {}", job_dir.display()))?;
    positions::write_known(job_dir, &partitions.iter().copied().collect::<BTreeSet<i32>>())
        .with_context(|| format!("writing {}", job_dir.display()))?;
    Ok((plan.positions, lows))
}

/// Run a kafka-to-bq job until it is cancelled (or idle for `--idle-timeout`).
pub async fn run(
    mut cfg: KafkaToBqConfig,
    checkpoint_root: &Path,
    endpoints: Option<Endpoints>,
    cancel_tx: watch::Sender<bool>,
    web: Option<flexrun_web::JobRegistry>,
    control: Option<Arc<crate::control::Control>>,
) -> Result<RunReport> {
    let started = Instant::now();
    let metadata = cfg.source.metadata()?;
    let partitions = metadata.partitions().await?;
    let job_dir = checkpoint_root.join(&cfg.job_name);
    let job_lock = lock::JobLock::acquire(&job_dir, &cfg.job_name)?;
    if let Some(c) = &control {
        c.start(&job_dir)?;
    }
    let existed = job_dir.join("job.json").exists();
    let dest = super::table::prepare(&cfg, endpoints.as_ref(), !existed).await?;
    cfg.table = dest.table.clone();
    let want = JobIdentity {
        template: "kafka-to-bq".into(),
        topic: cfg.source.topic.clone(),
        table: cfg.table.to_string(),
        dlq: cfg.dlq.as_ref().map(|t| t.to_string()),
        delivery: cfg.delivery.as_str().into(),
        shards: cfg.shard_count(partitions.len()),
    };
    let identity = check_identity(&job_dir, &want)?;
    let shards = identity.shards;
    let stats = Arc::new(JobStats::default());
    let (start_positions, floors) = start_positions(&cfg, &metadata, &job_dir, &partitions, existed, &stats).await?;

    let write_client = match (&cfg.run.sink, &endpoints) {
        (SinkKind::Stats { .. }, _) => None,
        (SinkKind::BigQuery, Some(ep)) => {
            if let Some(dlq) = &cfg.dlq {
                let client = rest::client(ep).await?;
                rest::ensure_table(&client, ep, dlq, &crate::kafka_to_bq::dlq::schema())
                    .await
                    .with_context(|| format!("preparing the dead-letter table {dlq}"))?;
            }
            Some(WriteClient::connect(ep).await?)
        }
        (SinkKind::BigQuery, None) => bail!("no BigQuery endpoints"),
    };
    tracing::info!(job = %cfg.job_name, topic = %cfg.source.topic, partitions = partitions.len(), shards, delivery = cfg.delivery.as_str(), table = %cfg.table, "starting kafka-to-bq");
    // A row must fit in one AppendRows request with room to spare; larger ones are
    // dead-lettered as "Row payload too large".
    let max_row =
        cfg.run.max_row_bytes.min(crate::bigquery::write::request_row_budget(cfg.run.append_request_bytes) - 16);
    let mut mapping = Mapping::with_input(dest.schema, max_row, dest.input, cfg.persist_key)?;
    mapping.mapper = mapping.mapper.with_udf(cfg.udf.clone()).for_record(dest.record.clone());
    let mapping = Arc::new(mapping);
    store_schema(&job_dir, &mapping)?;
    let ctx = Arc::new(JobCtx {
        descriptor: mapping.descriptor.clone(),
        mapping,
        cfg,
        job_dir,
        dlq_descriptor: proto::descriptor(&crate::kafka_to_bq::dlq::write_schema(), "DeadLetter"),
        mappings: std::sync::Mutex::new(HashMap::new()),
        endpoints: endpoints.clone(),
        routes: std::sync::Mutex::new(HashMap::new()),
        start_positions: std::sync::Mutex::new(start_positions),
        retention_floors: std::sync::Mutex::new(floors),
        write_client,
        metadata,
        stats: stats.clone(),
        positions: std::sync::Mutex::new(BTreeMap::new()),
        event_times: std::sync::Mutex::new(BTreeMap::new()),
        last_read_ms: AtomicI64::new(chrono::Utc::now().timestamp_millis()),
        busy: AtomicUsize::new(0),
        control,
        _lock: job_lock,
    });

    let shard_list: Vec<(usize, Vec<i32>)> = (0..shards)
        .map(|id| (id, partitions.iter().copied().filter(|p| (*p as usize) % shards == id).collect::<Vec<i32>>()))
        .filter(|(_, parts)| !parts.is_empty())
        .collect();
    if let Some(idle) = ctx.cfg.run.idle_timeout {
        let (ctx, tx) = (ctx.clone(), cancel_tx.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let now = chrono::Utc::now().timestamp_millis();
                if ctx.busy.load(Ordering::Acquire) > 0 {
                    ctx.last_read_ms.store(now, Ordering::Relaxed);
                    continue;
                }
                let quiet = now - ctx.last_read_ms.load(Ordering::Relaxed);
                if quiet >= idle.as_millis() as i64 {
                    tracing::info!(idle_ms = quiet, "no new messages: draining");
                    tx.send_replace(true);
                    return;
                }
                if *tx.borrow() {
                    return;
                }
            }
        });
    }
    if let Some(w) = &web {
        w.register(&ctx.cfg.job_name, "kafka-to-bq", ctx.cfg.delivery.as_str());
    }
    let r = autoscale::run_pool(&ctx, shard_list, shards, &partitions, started, cancel_tx, web.clone()).await;
    if let Some(w) = &web {
        w.set_status(&ctx.cfg.job_name, if r.is_ok() { "drained" } else { "failed" });
    }
    let (decisions, workers) = r?;
    if ctx.cfg.delivery == Delivery::AtLeastOnce {
        tracing::info!("at-least-once: rows replayed after a crash can appear twice");
    }
    Ok(RunReport { summary: stats.summary(), elapsed: started.elapsed(), shards, decisions, workers })
}
