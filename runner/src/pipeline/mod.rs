//! The kafka-to-bq pipeline: shards that read, map and write, with exactly-once
//! delivery that survives SIGKILL anywhere.
//!
//! # Layout
//! - this module: job set-up ([`run`]): checkpoint identity, schema, dead-letter
//!   table, shards, drain and the summary.
//! - [`shard`]: one shard's loop (recover, collect a batch, process it).
//! - [`sink`]: a write target with reconnect and retry.
//! - [`pool`] and [`worker`]: the live worker pool (shards on workers, moves on a
//!   rescale) and a worker's emulated CPU; the autoscaler loop in [`run`] feeds
//!   `flexrun-autoscaler` a snapshot per interval and applies its decisions.
//!
//! # Shards
//! The topic's partitions are split into shards (`numStorageWriteApiStreams`, or one
//! per partition up to 8): partition `p` belongs to shard `p % shards`. A shard owns
//! one Kafka consumer (manual assignment), one COMMITTED write stream on the table and
//! one on the dead-letter table, and one offset log and commit log
//! ([`crate::progress`]). The shard count is fixed when the job is first run and kept
//! in `job.json`, so a restart maps partitions to the same logs.
//!
//! # Exactly-once protocol (default)
//! For each batch `k` of a shard:
//! 1. Cut the batch: per partition the range `[a_p, b_p)` it read. Map every message
//!    to a row or a dead-letter row (a pure function of the bytes and the schema;
//!    messages are sorted by partition and offset first).
//! 2. **Offset log** (fsync): batch id, ranges, positions after the batch, and for the
//!    table and dead-letter streams the stream name, the starting row offset `X` (`Y`)
//!    and the row count `n` (`m`).
//! 3. Append the `n` rows at offset `X`, then the `m` dead-letter rows at `Y`.
//!    ALREADY_EXISTS means "already written" and counts as success. If BigQuery
//!    rejects rows (row errors: nothing was written), they move to the dead-letter
//!    rows, the batch is logged again with the new split (same id, same `X`/`Y`) and
//!    appended again.
//! 4. **Commit log** (fsync): batch id and positions. With `enableCommitOffsets`, the
//!    positions are also committed to the consumer group (informational).
//!
//! | crash point | state after restart | recovery |
//! |---|---|---|
//! | before 2 | batch unknown | starts from the last commit's positions |
//! | between 2 and 3 | logged, not appended | re-reads exactly the logged ranges, appends at `X`: OK |
//! | during or after 3, before 4 | appended (maybe partly: table but not DLQ) | appends at `X`/`Y`: ALREADY_EXISTS for what landed, OK for the rest |
//! | after 4 | done | continues from the commit's positions |
//!
//! Each row of the table has a named crash point (the `failpoints` feature, see
//! [`crate::crash_point`]) and a test that aborts there and restarts
//! (`runner/tests/crash_points.rs`): `eo::before_offset_log` (before 2),
//! `eo::after_offset_log` (between 2 and 3), `eo::between_requests` and
//! `eo::after_main_append` (during 3), `eo::before_commit_log` (after 3, before 4),
//! `eo::after_commit_log` (after 4), and on the recovery path
//! `eo::replay_before_append` and `eo::after_relog_before_append`.
//!
//! A logged batch is never re-cut: recovery reads exactly its ranges, maps them with
//! the schema the entry names (a copy of every schema is kept under `schemas/`),
//! moves the messages the entry says BigQuery refused to the dead-letter rows, and
//! checks row counts and CRC32C digests against the entry before it appends; if they
//! differ, the job stops and says what differs instead of writing at a wrong offset.
//!
//! A restart reuses the logged streams without asking BigQuery about them first
//! (`WriteStream.commit_time` is set on every COMMITTED stream from its creation, so
//! it says nothing about whether the stream still takes rows). If an append says
//! the stream is gone (NOT_FOUND, or a StorageError STREAM_NOT_FOUND,
//! STREAM_FINALIZED or INVALID_STREAM_STATE), offsets cannot deduplicate against it
//! any more: the shard opens a new stream, and if the batch had been sent before it
//! counts the batch as possibly duplicated (summary and `/metrics`).
//!
//! A batch goes out as one or more requests under the 10 MB request limit; rows too
//! large for any request go to the dead-letter table. Transient errors are retried
//! without an overall limit ([`sink`]). One process per job: [`lock`].
//!
//! # At-least-once (`useStorageWriteApiAtLeastOnce=true` or the experiment)
//! Rows go to the tables' `_default` streams without offsets, then the commit log
//! records the positions. A crash between the append and the commit replays that
//! batch: duplicates, never loss.
//!
//! # Drain
//! SIGINT/SIGTERM (or `--idle-timeout`) stops reading; each shard finishes the batch
//! it holds through step 4 and the job exits 0. A restart with the same job name
//! resumes from the logs.

pub mod lock;
pub mod pool;
pub mod positions;
pub mod shard;
pub mod sink;
pub mod worker;

use crate::bigquery::{proto, rest, write::WriteClient, Endpoints};
use crate::config::{Delivery, KafkaToBqConfig, SinkKind};
use crate::schema::Schema;
use crate::stats::{JobStats, Summary};
use crate::transform::Mapper;
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
    fn new(schema: Schema, max_row_bytes: usize) -> Mapping {
        Mapping {
            fingerprint: schema.fingerprint(),
            descriptor: proto::descriptor(&schema, "Row"),
            mapper: Mapper::new(schema, max_row_bytes),
        }
    }
}

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
    /// Schemas that logged batches were mapped with, by fingerprint (loaded on demand).
    mappings: std::sync::Mutex<HashMap<String, Arc<Mapping>>>,
    /// Where each partition starts when a shard has no position for it.
    start_positions: std::sync::Mutex<BTreeMap<i32, i64>>,
    /// The earliest offset stored per partition when the job started.
    retention_floors: std::sync::Mutex<BTreeMap<i32, i64>>,
    /// Storage Write client (None for the stats sink).
    pub write_client: Option<WriteClient>,
    /// Counters and latencies.
    pub stats: Arc<JobStats>,
    /// Committed position of every partition (for the backlog signal).
    pub positions: std::sync::Mutex<BTreeMap<i32, i64>>,
    /// Wall-clock ms of the last message read or batch finished (idle detection).
    pub last_read_ms: AtomicI64,
    /// Shards processing a batch right now; the job is only idle when this is 0.
    pub busy: AtomicUsize,
    /// The job directory's lock, held for the job's life.
    _lock: lock::JobLock,
}

impl JobCtx {
    /// Messages waiting in Kafka: each partition's high watermark minus its committed
    /// position (before the first commit of this run, its checkpoint position).
    pub fn backlog(&self, high_watermarks: &BTreeMap<i32, i64>) -> i64 {
        let pos = self.positions.lock().expect("positions lock");
        high_watermarks
            .iter()
            .map(|(p, h)| (h - pos.get(p).copied().unwrap_or_else(|| self.start_position(*p))).max(0))
            .sum()
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
        let m = Arc::new(Mapping::new(schema, self.mapping.mapper.max_row_bytes()));
        self.mappings.lock().expect("mappings lock").insert(fp.to_string(), m.clone());
        Ok(m)
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
    job_dir: &Path,
    partitions: &[i32],
    existed: bool,
    stats: &JobStats,
) -> Result<(BTreeMap<i32, i64>, BTreeMap<i32, i64>)> {
    let checkpoint = positions::checkpoint_positions(job_dir)?;
    let known = existed.then(|| positions::read_known(job_dir).unwrap_or_else(|| partitions.iter().copied().collect()));
    let initial = cfg.source.initial_positions(partitions).await?;
    let lows = cfg.source.low_watermarks(partitions).await?;
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
    positions::write_known(job_dir, &partitions.iter().copied().collect::<BTreeSet<i32>>())
        .with_context(|| format!("writing {}", job_dir.display()))?;
    Ok((plan.positions, lows))
}

/// Run a kafka-to-bq job until it is cancelled (or idle for `--idle-timeout`).
pub async fn run(
    cfg: KafkaToBqConfig,
    checkpoint_root: &Path,
    endpoints: Option<Endpoints>,
    cancel_tx: watch::Sender<bool>,
    web: Option<flexrun_web::JobRegistry>,
) -> Result<RunReport> {
    let started = Instant::now();
    let partitions = cfg.source.partitions().await?;
    let job_dir = checkpoint_root.join(&cfg.job_name);
    let job_lock = lock::JobLock::acquire(&job_dir, &cfg.job_name)?;
    let want = JobIdentity {
        template: "kafka-to-bq".into(),
        topic: cfg.source.topic.clone(),
        table: cfg.table.to_string(),
        dlq: cfg.dlq.as_ref().map(|t| t.to_string()),
        delivery: cfg.delivery.as_str().into(),
        shards: cfg.shard_count(partitions.len()),
    };
    let existed = job_dir.join("job.json").exists();
    let identity = check_identity(&job_dir, &want)?;
    let shards = identity.shards;
    let stats = Arc::new(JobStats::default());
    let (start_positions, floors) = start_positions(&cfg, &job_dir, &partitions, existed, &stats).await?;

    let (schema, write_client) = match (&cfg.sink, &endpoints) {
        (SinkKind::Stats { schema_file }, _) => {
            let text =
                std::fs::read_to_string(schema_file).with_context(|| format!("reading schema file {schema_file}"))?;
            let json: serde_json::Value =
                serde_json::from_str(&text).with_context(|| format!("schema file {schema_file} is not JSON"))?;
            (Schema::from_json(&json).with_context(|| format!("schema file {schema_file}"))?, None)
        }
        (SinkKind::BigQuery, Some(ep)) => {
            let client = rest::client(ep).await?;
            let schema = rest::table_schema(&client, ep, &cfg.table).await?;
            if let Some(dlq) = &cfg.dlq {
                rest::ensure_table(&client, ep, dlq, &crate::dlq::schema())
                    .await
                    .with_context(|| format!("preparing the dead-letter table {dlq}"))?;
            }
            (schema, Some(WriteClient::connect(ep).await?))
        }
        (SinkKind::BigQuery, None) => bail!("no BigQuery endpoints"),
    };
    tracing::info!(job = %cfg.job_name, topic = %cfg.source.topic, partitions = partitions.len(), shards, delivery = cfg.delivery.as_str(), table = %cfg.table, "starting kafka-to-bq");
    // A row must fit in one AppendRows request with room to spare; larger ones are
    // dead-lettered as "Row payload too large".
    let max_row = cfg.max_row_bytes.min(crate::bigquery::write::request_row_budget(cfg.append_request_bytes) - 16);
    let mapping = Arc::new(Mapping::new(schema, max_row));
    store_schema(&job_dir, &mapping)?;
    let ctx = Arc::new(JobCtx {
        descriptor: mapping.descriptor.clone(),
        mapping,
        cfg,
        job_dir,
        dlq_descriptor: proto::descriptor(&crate::dlq::write_schema(), "DeadLetter"),
        mappings: std::sync::Mutex::new(HashMap::new()),
        start_positions: std::sync::Mutex::new(start_positions),
        retention_floors: std::sync::Mutex::new(floors),
        write_client,
        stats: stats.clone(),
        positions: std::sync::Mutex::new(BTreeMap::new()),
        last_read_ms: AtomicI64::new(chrono::Utc::now().timestamp_millis()),
        busy: AtomicUsize::new(0),
        _lock: job_lock,
    });

    let shard_list: Vec<(usize, Vec<i32>)> = (0..shards)
        .map(|id| (id, partitions.iter().copied().filter(|p| (*p as usize) % shards == id).collect::<Vec<i32>>()))
        .filter(|(_, parts)| !parts.is_empty())
        .collect();
    if let Some(idle) = ctx.cfg.idle_timeout {
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
    let r = run_pool(&ctx, shard_list, shards, &partitions, started, cancel_tx, web.clone()).await;
    if let Some(w) = &web {
        w.set_status(&ctx.cfg.job_name, if r.is_ok() { "drained" } else { "failed" });
    }
    let (decisions, workers) = r?;
    if ctx.cfg.delivery == Delivery::AtLeastOnce {
        tracing::info!("at-least-once: rows replayed after a crash can appear twice");
    }
    Ok(RunReport { summary: stats.summary(), elapsed: started.elapsed(), shards, decisions, workers })
}

/// Run the shards on the worker pool until a drain, autoscaling every interval.
async fn run_pool(
    ctx: &Arc<JobCtx>,
    shard_list: Vec<(usize, Vec<i32>)>,
    shard_count: usize,
    partitions: &[i32],
    started: Instant,
    cancel_tx: watch::Sender<bool>,
    web: Option<flexrun_web::JobRegistry>,
) -> Result<(Vec<flexrun_autoscaler::Decision>, u32)> {
    use flexrun_autoscaler::{Algorithm, Snapshot};
    let pc = ctx.cfg.pool.clone();
    let mut pool = pool::Pool::new(ctx.clone(), shard_list, shard_count, pc.capacity);
    let limits = pc.limits(pool.max_parallelism());
    let initial = pc.num_workers.clamp(pc.min_workers, pc.max_workers).min(pool.max_parallelism());
    if initial < pc.num_workers {
        tracing::warn!(
            asked = pc.num_workers,
            running = initial,
            shards = pool.max_parallelism(),
            "more workers than shards: each shard runs on one worker at a time"
        );
    }
    pool.resize(initial).await?;
    let mut policy = pc.policy();
    let mut decisions: Vec<flexrun_autoscaler::Decision> = Vec::new();
    let mut cancel = cancel_tx.subscribe();
    let mut next_decision = Instant::now() + pc.interval;
    let mut last_window = Instant::now();
    let mut last_hw: Option<i64> = None;
    let mut publisher = web.map(|w| Publisher::new(w, ctx.cfg.job_name.clone(), ctx.cfg.pool.vcpus_per_worker));
    let mut last_utilization = 0.0;
    let mut partitions = partitions.to_vec();
    let mut next_discovery = Instant::now();
    let result: Result<()> = loop {
        // A signal during start-up was sent before this receiver existed.
        if *cancel.borrow() {
            break Ok(());
        }
        tokio::select! {
            _ = cancel.changed() => break Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        if let Some(e) = pool.reap().await {
            tracing::error!(error = format!("{e:#}"), "a shard failed; draining the others");
            cancel_tx.send_replace(true);
            break Err(e);
        }
        if next_discovery.elapsed() >= PARTITION_DISCOVERY_INTERVAL {
            next_discovery = Instant::now();
            if let Err(e) = discover_partitions(ctx, &mut partitions, &mut pool).await {
                cancel_tx.send_replace(true);
                break Err(e);
            }
        }
        if let Some(p) = publisher.as_mut() {
            p.maybe_publish(
                ctx,
                &partitions,
                started,
                pool.workers(),
                decisions.last().map_or(pool.workers(), |d| d.to),
                last_utilization,
            )
            .await;
        }
        if Instant::now() < next_decision || pc.algorithm == Algorithm::None {
            continue;
        }
        next_decision = Instant::now() + pc.interval;
        let hw = match ctx.cfg.source.high_watermarks(&partitions).await {
            Ok(hw) => hw,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the topic's high watermarks; skipping this autoscaling window");
                continue;
            }
        };
        let window_s = last_window.elapsed().as_secs_f64();
        last_window = Instant::now();
        let total_hw: i64 = hw.values().sum();
        let input_records_per_s = last_hw.map_or(0.0, |l| (total_hw - l).max(0) as f64 / window_s);
        last_hw = Some(total_hw);
        let backlog_records = ctx.backlog(&hw);
        let s = ctx.stats.summary();
        let avg = if s.messages_read > 0 { s.bytes_read as f64 / s.messages_read as f64 } else { 1000.0 };
        let snap = Snapshot {
            time_s: started.elapsed().as_secs_f64(),
            window_s,
            workers: pool.window(),
            input_records_per_s,
            input_bytes_per_s: input_records_per_s * avg,
            backlog_records: backlog_records as u64,
            backlog_bytes: (backlog_records as f64 * avg) as u64,
        };
        last_utilization = snap.utilization();
        let d = policy.decide(&snap, &limits);
        tracing::info!(
            time_s = format!("{:.1}", d.time_s), from = d.from, to = d.to, rationale = d.rationale.as_str(), detail = %d.detail,
            utilization = format!("{:.2}", snap.utilization()), input_per_s = input_records_per_s as u64, backlog = backlog_records,
            "autoscaler decision"
        );
        let changed_rationale = decisions.last().is_none_or(|l| l.rationale != d.rationale);
        if d.is_change() || changed_rationale {
            decisions.push(d.clone());
            if let Some(p) = &publisher {
                p.jobs.push_decision(
                    &ctx.cfg.job_name,
                    flexrun_web::DecisionView {
                        t_s: d.time_s,
                        from: d.from,
                        to: d.to,
                        rationale: d.rationale.as_str().into(),
                        detail: d.detail.clone(),
                    },
                );
            }
        }
        if d.is_change() {
            if let Err(e) = pool.resize(d.to).await {
                cancel_tx.send_replace(true);
                break Err(e);
            }
        }
    };
    let workers = pool.workers();
    let stopped = pool.stop_all().await;
    result.and(stopped)?;
    Ok((decisions, workers))
}

/// How often a running job looks for partitions added to its topic.
pub const PARTITION_DISCOVERY_INTERVAL: Duration = Duration::from_secs(5);

/// Look for new partitions; each starts at its earliest offset on the shard
/// `p % shards`, which is restarted (after its open batch commits) to take it.
async fn discover_partitions(ctx: &Arc<JobCtx>, partitions: &mut Vec<i32>, pool: &mut pool::Pool) -> Result<()> {
    let now = match ctx.cfg.source.partitions().await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the topic's partitions; will try again");
            return Ok(());
        }
    };
    let new: Vec<i32> = now.iter().copied().filter(|p| !partitions.contains(p)).collect();
    if new.is_empty() {
        return Ok(());
    }
    let lows = ctx.cfg.source.low_watermarks(&new).await?;
    ctx.add_partitions(&lows);
    partitions.extend(&new);
    positions::write_known(&ctx.job_dir, &partitions.iter().copied().collect())
        .with_context(|| format!("writing {}", ctx.job_dir.display()))?;
    ctx.stats.note(|r| r.partitions_discovered += new.len() as u64);
    tracing::info!(job = %ctx.cfg.job_name, partitions = ?new, "new partitions found: they start at their earliest offset");
    pool.add_partitions(&new).await
}

/// Publishes a job's state to the web registry about once a second.
struct Publisher {
    jobs: flexrun_web::JobRegistry,
    job: String,
    vcpus_per_worker: f64,
    last: Instant,
    last_read: u64,
    last_bytes: u64,
}

impl Publisher {
    fn new(jobs: flexrun_web::JobRegistry, job: String, vcpus_per_worker: f64) -> Publisher {
        Publisher { jobs, job, vcpus_per_worker, last: Instant::now(), last_read: 0, last_bytes: 0 }
    }

    async fn maybe_publish(
        &mut self,
        ctx: &JobCtx,
        partitions: &[i32],
        started: Instant,
        workers: u32,
        target: u32,
        utilization: f64,
    ) {
        let dt = self.last.elapsed().as_secs_f64();
        if dt < 1.0 {
            return;
        }
        self.last = Instant::now();
        let s = ctx.stats.summary();
        let backlog: i64 = match ctx.cfg.source.high_watermarks(partitions).await {
            Ok(hw) => ctx.backlog(&hw),
            Err(_) => 0,
        };
        let avg = if s.messages_read > 0 { s.bytes_read as f64 / s.messages_read as f64 } else { 0.0 };
        let stages = ctx
            .stats
            .take_window()
            .into_iter()
            .filter(|st| st.count > 0)
            .map(|st| (st.stage, flexrun_web::StageLatency { p50_ms: st.p50_ms, p95_ms: st.p95_ms, p99_ms: st.p99_ms }))
            .collect();
        let p = flexrun_web::MetricsPoint {
            t_s: started.elapsed().as_secs_f64(),
            workers,
            target_workers: target,
            vcpus: workers as f64 * self.vcpus_per_worker,
            throughput_msgs: (s.messages_read - self.last_read) as f64 / dt,
            throughput_bytes: (s.bytes_read - self.last_bytes) as f64 / dt,
            backlog_elements: backlog as u64,
            backlog_bytes: (backlog as f64 * avg) as u64,
            utilization,
            elements_read: s.messages_read,
            rows_written: s.rows_written,
            dead_lettered: s.dead_lettered,
            stages,
            events: s.reliability.events(),
        };
        self.last_read = s.messages_read;
        self.last_bytes = s.bytes_read;
        self.jobs.push_point(&self.job, p);
    }
}
