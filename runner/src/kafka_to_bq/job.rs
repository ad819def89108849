//! Job set-up and teardown: the checkpoint's identity, the table's schema (and a copy
//! of every schema batches were mapped with), the dead-letter table, start positions,
//! the job lock, then the pool until a drain, and the summary.

use super::context::{store_schema, JobCtx, Mapping};
use super::run::autoscale;
use super::setup::config::{Delivery, KafkaToBqConfig, SinkKind};
use super::setup::positions;
use crate::bigquery::{proto, rest, write::WriteClient, Endpoints};
use crate::control::lock;
use crate::kafka::Metadata;
use crate::stats::{JobStats, Summary};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
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

/// The recorded identity, or `want` recorded as it. A different pipeline under the same
/// job name is a usage error (exit 2), as in [`crate::control::identity::check`].
fn check_identity(job_dir: &Path, want: &JobIdentity) -> Result<JobIdentity> {
    let path = job_dir.join(crate::control::identity::FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let have: JobIdentity =
                serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))?;
            // The shard count is the checkpoint's; the dead-letter table may be added or
            // changed (the usual fix after a job stopped on a bad record).
            let same = JobIdentity { shards: have.shards, dlq: have.dlq.clone(), ..want.clone() };
            if have != same {
                return Err(crate::usage(format!(
                    "job {} already has a checkpoint for a different pipeline ({}: topic {}, table {}, {}), but this run is for topic {}, table {}, {}. Use another --job-name, or remove {} to start over",
                    job_dir.file_name().unwrap_or_default().to_string_lossy(),
                    path.display(), have.topic, have.table, have.delivery, want.topic, want.table, want.delivery, job_dir.display()
                )));
            }
            Ok(JobIdentity { dlq: want.dlq.clone(), ..have })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::control::identity::record(job_dir, want)?;
            Ok(want.clone())
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The job's mapping onto its destination: the input format, the Kafka key and
/// metadata columns, the UDF. A row must fit in one AppendRows request with room to
/// spare; larger ones are dead-lettered as "Row payload too large".
pub fn job_mapping(cfg: &KafkaToBqConfig, dest: super::setup::table::Destination) -> Result<Mapping> {
    let max_row =
        cfg.run.max_row_bytes.min(crate::bigquery::write::request_row_budget(cfg.run.append_request_bytes) - 16);
    let mut mapping = Mapping::with_input(dest.schema, max_row, dest.input, cfg.persist_key, &cfg.metadata)
        .with_context(|| format!("table {}", dest.table))?;
    mapping.mapper = mapping.mapper.with_udf(cfg.udf.clone()).for_record(dest.record.clone());
    mapping.with_cdc(cfg.cdc.as_ref()).with_context(|| format!("table {}", dest.table))
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
) -> Result<Starts> {
    let raw = positions::checkpoint_positions(job_dir)?;
    let rebased = positions::read_rebased(job_dir).with_context(|| format!("reading {}", job_dir.display()))?;
    let checkpoint = positions::rebase(&raw, &rebased);
    let known = existed.then(|| positions::read_known(job_dir).unwrap_or_else(|| partitions.iter().copied().collect()));
    let saved = crate::kafka::starts::read(job_dir).with_context(|| format!("reading {}", job_dir.display()))?;
    let marks = metadata.watermarks(partitions).await?;
    let initial =
        crate::kafka::starts::overlay(cfg.source.initial_positions(metadata, partitions, &marks).await?, &saved);
    let lows = marks.iter().map(|(p, (low, _))| (*p, *low)).collect();
    let mut plan = positions::plan(partitions, &checkpoint, known.as_ref(), &initial, &marks);
    check_cdc_order(cfg, &plan)?;
    let skipped = plan.settle(cfg.source.gap_policy, &cfg.job_name, &cfg.source.topic).map_err(anyhow::Error::msg)?;
    positions::report(&plan, skipped, &cfg.job_name, stats);
    positions::record_rebased(job_dir, &raw, &plan, &rebased)
        .with_context(|| format!("writing {}", job_dir.display()))?;
    // Durable before the first read: a restart without a commit resumes here, not at a
    // newly resolved `latest` (which would skip what was produced in between).
    crate::kafka::starts::record(job_dir, &plan.positions).with_context(|| format!("writing {}", job_dir.display()))?;
    positions::write_known(job_dir, &partitions.iter().copied().collect::<BTreeSet<i32>>())
        .with_context(|| format!("writing {}", job_dir.display()))?;
    // Where a shard whose log still holds a moved position resumes: this start's skips
    // past an end, and earlier ones its log has not committed past yet.
    let mut past_end: BTreeMap<i32, (i64, i64)> =
        rebased.iter().filter(|(p, (from, _))| raw.get(p) == Some(from)).map(|(p, r)| (*p, *r)).collect();
    for d in &plan.found {
        if let crate::kafka::gaps::Discontinuity::PastEnd { partition, at, end } = d {
            past_end.insert(*partition, (raw.get(partition).copied().unwrap_or(*at), *end));
        }
    }
    Ok(Starts { positions: plan.positions, floors: lows, past_end })
}

/// CDC ordered by offset cannot start over logs whose offsets no longer order a key's
/// changes: partitions added since the last run, or a log shorter than the checkpoint
/// (a recreated topic). Refused (exit 2) before anything is read.
fn check_cdc_order(cfg: &KafkaToBqConfig, plan: &positions::StartPlan) -> Result<()> {
    let Some(cdc) = &cfg.cdc else { return Ok(()) };
    let past_end = plan.found.iter().any(|d| matches!(d, crate::kafka::gaps::Discontinuity::PastEnd { .. }));
    let what = match (plan.new_partitions.as_slice(), past_end) {
        ([], false) => return Ok(()),
        ([], true) => {
            "a partition's log is shorter than the job's checkpoint (the topic was recreated, or its log cut short)"
                .to_string()
        }
        (new, _) => format!("partitions {new:?} were added since the job last ran"),
    };
    match cdc.offset_order_broken(&cfg.source.topic, &what) {
        Some(why) => Err(crate::usage(why)),
        None => Ok(()),
    }
}

/// Where the job starts ([`start_positions`]).
struct Starts {
    /// Partition → the next offset to read.
    positions: BTreeMap<i32, i64>,
    /// Partition → its earliest stored offset at start.
    floors: BTreeMap<i32, i64>,
    /// Partitions found past their end and moved to it (`offsetGapPolicy=SKIP`): the
    /// logged position and the end.
    past_end: BTreeMap<i32, (i64, i64)>,
}

/// `--stop-when-caught-up`: drain once every partition's committed position has reached
/// `ends` (its end offset when the job started) and no batch is in flight.
fn stop_when_caught_up(ctx: Arc<JobCtx>, ends: BTreeMap<i32, i64>, tx: watch::Sender<bool>) {
    tracing::info!(job = %ctx.cfg.job_name, ?ends, "will drain once these end offsets are committed (--stop-when-caught-up)");
    tokio::spawn(async move {
        while !*tx.borrow() {
            let idle = ctx.busy.load(Ordering::Acquire) == 0;
            if idle && ctx.backlog_by_partition(&ends).values().all(|b| *b == 0) {
                tracing::info!(job = %ctx.cfg.job_name, "caught up with the end offsets read at start: draining");
                tx.send_replace(true);
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// The Storage Write client (None for the stats sink), after making sure the dead-letter
/// table exists.
async fn write_client(cfg: &KafkaToBqConfig, endpoints: Option<&Endpoints>) -> Result<Option<WriteClient>> {
    Ok(match (&cfg.run.sink, endpoints) {
        (SinkKind::Stats { .. }, _) => None,
        (SinkKind::BigQuery, Some(ep)) => {
            if let Some(dlq) = &cfg.dlq {
                let client = rest::client(ep).await?;
                rest::ensure_table(&client, ep, dlq, &crate::kafka_to_bq::map::dlq::schema())
                    .await
                    .with_context(|| format!("preparing the dead-letter table {dlq}"))?;
            }
            Some(WriteClient::connect(ep).await?)
        }
        (SinkKind::BigQuery, None) => bail!("no BigQuery endpoints"),
    })
}

/// `--idle-timeout`: drain once no message has been read and no batch has been busy
/// for `idle`.
fn drain_when_idle(ctx: Arc<JobCtx>, idle: Duration, tx: watch::Sender<bool>) {
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

/// Each shard's partitions (`p % shards`), leaving out shards with none.
fn shard_list(partitions: &[i32], shards: usize) -> Vec<(usize, Vec<i32>)> {
    (0..shards)
        .map(|id| (id, partitions.iter().copied().filter(|p| (*p as usize) % shards == id).collect::<Vec<i32>>()))
        .filter(|(_, parts)| !parts.is_empty())
        .collect()
}

/// Run a kafka-to-bq job until it is cancelled (or idle for `--idle-timeout`, or caught
/// up with `--stop-when-caught-up`).
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
    if cfg.parent.is_none() {
        super::setup::layout::to_one(checkpoint_root, &cfg.job_name, &cfg.source.topic)
            .with_context(|| format!("moving job {}'s checkpoint for topic {}", cfg.job_name, cfg.source.topic))?;
    }
    if let Some(c) = &control {
        c.start(&job_dir)?;
    }
    let existed = job_dir.join("job.json").exists();
    let dest = super::setup::table::prepare(&cfg, endpoints.as_ref(), !existed).await?;
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
    let starts = start_positions(&cfg, &metadata, &job_dir, &partitions, existed, &stats).await?;

    let write_client = write_client(&cfg, endpoints.as_ref()).await?;
    tracing::info!(job = %cfg.job_name, topic = %cfg.source.topic, partitions = partitions.len(), shards, delivery = cfg.delivery.as_str(), table = %cfg.table, "starting kafka-to-bq");
    let mapping = Arc::new(job_mapping(&cfg, dest)?);
    store_schema(&job_dir, &mapping)?;
    let ctx = Arc::new(JobCtx {
        mapping: std::sync::RwLock::new(mapping),
        evolving: tokio::sync::Mutex::new(()),
        cfg,
        job_dir,
        dlq_descriptor: proto::descriptor(&crate::kafka_to_bq::map::dlq::write_schema(), "DeadLetter"),
        mappings: std::sync::Mutex::new(HashMap::new()),
        endpoints: endpoints.clone(),
        routes: std::sync::Mutex::new(HashMap::new()),
        start_positions: std::sync::Mutex::new(starts.positions),
        retention_floors: std::sync::Mutex::new(starts.floors),
        past_end: starts.past_end,
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

    let shard_list = shard_list(&partitions, shards);
    if let Some(idle) = ctx.cfg.run.idle_timeout {
        drain_when_idle(ctx.clone(), idle, cancel_tx.clone());
    }
    if ctx.cfg.run.stop_when_caught_up {
        let ends = ctx.metadata.high_watermarks(&partitions).await?;
        stop_when_caught_up(ctx.clone(), ends, cancel_tx.clone());
    }
    if let Some(w) = &web {
        w.register(&ctx.cfg.job_name, "kafka-to-bq", ctx.cfg.delivery.as_str());
    }
    let r = autoscale::run_pool(&ctx, shard_list, shards, &partitions, started, cancel_tx, web.clone()).await;
    if let Some(w) = &web {
        w.set_status(&ctx.cfg.job_name, if r.is_ok() { "drained" } else { "failed" });
    }
    let (decisions, workers) = r?;
    match (ctx.cfg.delivery, &ctx.cfg.cdc) {
        (Delivery::AtLeastOnce, Some(_)) => tracing::info!(
            "CDC: changes re-sent after a crash are applied again by key with the same sequence number, so each key's final state is exact"
        ),
        (Delivery::AtLeastOnce, None) => tracing::info!("at-least-once: rows replayed after a crash can appear twice"),
        (Delivery::ExactlyOnce, _) => {}
    }
    Ok(RunReport { summary: stats.summary(), elapsed: started.elapsed(), shards, decisions, workers })
}
