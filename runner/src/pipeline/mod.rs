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
//! A logged batch is never re-cut: recovery reads exactly its ranges. If a logged
//! stream is gone (finalized, expired, emulator restarted), offsets cannot
//! deduplicate any more: a committed shard just opens a new stream (nothing at risk);
//! a shard with an uncommitted batch re-appends it on a new stream and says loudly
//! that the batch may now be duplicated.
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

pub mod pool;
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
use std::collections::BTreeMap;
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

/// Shared state of a running job.
pub struct JobCtx {
    /// Configuration.
    pub cfg: KafkaToBqConfig,
    /// `<checkpoint-dir>/<job-name>`.
    pub job_dir: PathBuf,
    /// Message → row.
    pub mapper: Mapper,
    /// Row descriptor of the table.
    pub descriptor: DescriptorProto,
    /// Row descriptor of the dead-letter table.
    pub dlq_descriptor: DescriptorProto,
    /// Start positions for partitions that have no checkpoint.
    pub initial_positions: BTreeMap<i32, i64>,
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
}

impl JobCtx {
    /// Messages waiting in Kafka: each partition's high watermark minus its committed
    /// position (or its start position before the first commit).
    pub fn backlog(&self, high_watermarks: &BTreeMap<i32, i64>) -> i64 {
        let pos = self.positions.lock().expect("positions lock");
        high_watermarks.iter().map(|(p, h)| (h - pos.get(p).copied().unwrap_or(self.initial_positions[p])).max(0)).sum()
    }
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
            let have: JobIdentity = serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))?;
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

/// Run a kafka-to-bq job until it is cancelled (or idle for `--idle-timeout`).
pub async fn run(cfg: KafkaToBqConfig, checkpoint_root: &Path, endpoints: Option<Endpoints>, cancel_tx: watch::Sender<bool>, web: Option<flexrun_web::JobRegistry>) -> Result<RunReport> {
    let started = Instant::now();
    let partitions = cfg.source.partitions().await?;
    let job_dir = checkpoint_root.join(&cfg.job_name);
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
    let initial_positions = cfg.source.initial_positions(&partitions).await?;

    let (schema, write_client) = match (&cfg.sink, &endpoints) {
        (SinkKind::Stats { schema_file }, _) => {
            let text = std::fs::read_to_string(schema_file).with_context(|| format!("reading schema file {schema_file}"))?;
            let json: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("schema file {schema_file} is not JSON"))?;
            (Schema::from_json(&json).with_context(|| format!("schema file {schema_file}"))?, None)
        }
        (SinkKind::BigQuery, Some(ep)) => {
            let client = rest::client(ep).await?;
            let schema = rest::table_schema(&client, ep, &cfg.table).await?;
            if let Some(dlq) = &cfg.dlq {
                rest::ensure_table(&client, ep, dlq, &crate::dlq::schema()).await.with_context(|| format!("preparing the dead-letter table {dlq}"))?;
            }
            (schema, Some(WriteClient::connect(ep).await?))
        }
        (SinkKind::BigQuery, None) => bail!("no BigQuery endpoints"),
    };
    tracing::info!(job = %cfg.job_name, topic = %cfg.source.topic, partitions = partitions.len(), shards, delivery = cfg.delivery.as_str(), table = %cfg.table, "starting kafka-to-bq");
    let descriptor = proto::descriptor(&schema, "Row");
    let dlq_descriptor = proto::descriptor(&crate::dlq::write_schema(), "DeadLetter");
    let stats = Arc::new(JobStats::default());
    let ctx = Arc::new(JobCtx {
        mapper: Mapper::new(schema, cfg.max_row_bytes),
        cfg,
        job_dir,
        descriptor,
        dlq_descriptor,
        initial_positions,
        write_client,
        stats: stats.clone(),
        positions: std::sync::Mutex::new(BTreeMap::new()),
        last_read_ms: AtomicI64::new(chrono::Utc::now().timestamp_millis()),
        busy: AtomicUsize::new(0),
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
                    let _ = tx.send(true);
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
    let r = run_pool(&ctx, shard_list, &partitions, started, cancel_tx, web.clone()).await;
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
    partitions: &[i32],
    started: Instant,
    cancel_tx: watch::Sender<bool>,
    web: Option<flexrun_web::JobRegistry>,
) -> Result<(Vec<flexrun_autoscaler::Decision>, u32)> {
    use flexrun_autoscaler::{Algorithm, Snapshot};
    let pc = ctx.cfg.pool.clone();
    let mut pool = pool::Pool::new(ctx.clone(), shard_list, pc.capacity);
    let limits = pc.limits(pool.max_parallelism());
    let initial = pc.num_workers.clamp(pc.min_workers, pc.max_workers).min(pool.max_parallelism());
    if initial < pc.num_workers {
        tracing::warn!(asked = pc.num_workers, running = initial, shards = pool.max_parallelism(), "more workers than shards: each shard runs on one worker at a time");
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
    let result: Result<()> = loop {
        tokio::select! {
            _ = cancel.changed() => break Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        if let Some(e) = pool.reap().await {
            tracing::error!(error = format!("{e:#}"), "a shard failed; draining the others");
            let _ = cancel_tx.send(true);
            break Err(e);
        }
        if let Some(p) = publisher.as_mut() {
            p.maybe_publish(ctx, partitions, started, pool.workers(), decisions.last().map_or(pool.workers(), |d| d.to), last_utilization).await;
        }
        if Instant::now() < next_decision || pc.algorithm == Algorithm::None {
            continue;
        }
        next_decision = Instant::now() + pc.interval;
        let hw = match ctx.cfg.source.high_watermarks(partitions).await {
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
                p.jobs.push_decision(&ctx.cfg.job_name, flexrun_web::DecisionView { t_s: d.time_s, from: d.from, to: d.to, rationale: d.rationale.as_str().into(), detail: d.detail.clone() });
            }
        }
        if d.is_change() {
            if let Err(e) = pool.resize(d.to).await {
                let _ = cancel_tx.send(true);
                break Err(e);
            }
        }
    };
    let workers = pool.workers();
    let stopped = pool.stop_all().await;
    result.and(stopped)?;
    Ok((decisions, workers))
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

    async fn maybe_publish(&mut self, ctx: &JobCtx, partitions: &[i32], started: Instant, workers: u32, target: u32, utilization: f64) {
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
        };
        self.last_read = s.messages_read;
        self.last_bytes = s.bytes_read;
        self.jobs.push_point(&self.job, p);
    }
}
