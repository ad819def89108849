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

/// Plan where every partition starts (see [`positions`]): the log the checkpoint was
/// read in (another topic id: the topic was recreated), each position checked against
/// the log with its leader epoch, retention gaps and new partitions; apply
/// `offsetGapPolicy`, report, and make the decisions durable before the first read.
async fn start_positions(
    cfg: &KafkaToBqConfig,
    metadata: &Metadata,
    job_dir: &Path,
    partitions: &[i32],
    existed: bool,
    stats: &JobStats,
) -> Result<Starts> {
    let reading = |e: std::io::Error| anyhow::Error::new(e).context(format!("reading {}", job_dir.display()));
    let writing = |e: std::io::Error| anyhow::Error::new(e).context(format!("writing {}", job_dir.display()));
    let topic_id = current_topic_id(cfg, metadata).await;
    let points = positions::read_checkpoint(job_dir)?;
    let moves = positions::read_moves(job_dir).map_err(reading)?;
    let mut gone = moves.superseded.clone();
    let saved = crate::kafka::starts::read_bound(job_dir).map_err(reading)?;
    let stale = positions::stale_topic_ids(&points, saved.topic_id.as_deref(), &moves.superseded, topic_id.as_deref());
    let recreated = !stale.is_empty();
    if recreated {
        let old_log = OldLog { points: &points, saved: &saved, partitions };
        recreated_topic(cfg, &stale, topic_id.as_deref(), old_log, stats)?;
        gone.extend(stale);
    }
    let ck = positions::checkpoint(&points, saved.topic_id.as_deref(), &gone, &moves);
    let known = match (recreated, existed) {
        (true, _) => Some(BTreeSet::new()),
        (false, true) => Some(
            positions::read_known(job_dir).map_err(reading)?.unwrap_or_else(|| partitions.iter().copied().collect()),
        ),
        (false, false) => None,
    };
    let marks = metadata.watermarks(partitions).await?;
    let saved_positions = if recreated { BTreeMap::new() } else { saved.positions };
    let initial = crate::kafka::starts::overlay(
        cfg.source.initial_positions(metadata, partitions, &marks).await?,
        &saved_positions,
    );
    let mut plan = positions::plan(partitions, &ck.positions, known.as_ref(), &initial, &marks);
    let diverged = crate::kafka::lineage::divergences(
        &cfg.source.conn,
        &cfg.source.topic,
        cfg.source.isolation.as_str(),
        &ck.validate,
    )
    .await?;
    plan.add_truncations(&diverged, &marks);
    check_cdc_order(cfg, &plan, recreated)?;
    let unreplayable = positions::unreplayable(&ck, &diverged, &marks);
    let skipped = plan.settle(cfg.source.gap_policy, &cfg.job_name, &cfg.source.topic).map_err(anyhow::Error::msg)?;
    if let (crate::kafka::gaps::GapPolicy::Fail, Some((shard, u))) = (cfg.source.gap_policy, unreplayable.iter().next())
    {
        bail!(u.refusal(&cfg.job_name, &cfg.source.topic, *shard));
    }
    positions::report(&plan, skipped, &cfg.job_name, (&cfg.source.topic, topic_id.as_deref()), stats);
    let moves = positions::record_moves(job_dir, &moves, &gone, &ck, &plan).map_err(writing)?;
    // Durable before the first read: a restart without a commit resumes here, not at a
    // newly resolved `latest` (which would skip what was produced in between).
    let mut starts = saved_positions;
    starts.extend(&plan.positions);
    crate::kafka::starts::record_bound(
        job_dir,
        &crate::kafka::starts::Saved { topic_id: topic_id.clone(), positions: starts },
    )
    .map_err(writing)?;
    positions::write_known(job_dir, &partitions.iter().copied().collect::<BTreeSet<i32>>()).map_err(writing)?;
    let floors = marks.iter().map(|(p, (low, _))| (*p, *low)).collect();
    let log = positions::LogState { topic_id, gone: moves.superseded.clone(), legacy: saved.topic_id };
    Ok(Starts { positions: plan.positions, floors, moves, log, unreplayable })
}

/// The pipeline's progress journal ([`crate::progress::journal`]). Exactly-once does
/// not fsync a commit line on its own: a lost one costs a replay that BigQuery answers
/// ALREADY_EXISTS, and the next offset entry's fsync takes it along. At-least-once
/// fsyncs each commit, except with asynchronous progress tracking, which is at-least-once
/// by its nature.
fn open_journal(cfg: &KafkaToBqConfig, job_dir: &Path) -> Result<Arc<crate::progress::journal::Journal>> {
    use crate::progress::{journal::CommitMode, Durability};
    let p = &cfg.run.progress;
    let mode = match (cfg.delivery, p.async_progress) {
        (Delivery::ExactlyOnce, _) => CommitMode::Each(Durability::Rotation),
        (Delivery::AtLeastOnce, true) => CommitMode::Every(p.interval),
        (Delivery::AtLeastOnce, false) => CommitMode::Each(Durability::EveryEntry),
    };
    Ok(crate::progress::journal::Journal::open(job_dir, mode)?)
}

/// A job's first start: where `kafkaReadOffset` (or the consumer group) puts each
/// partition, made durable before anything else can fail (the table's checks, the
/// identity). A start that fails on the way, and is run again after the fix, reads from
/// here rather than from a `latest` resolved again later, which would skip what was
/// produced in between (issue 62, item 7). Kept when already saved.
async fn record_first_starts(
    cfg: &KafkaToBqConfig,
    metadata: &Metadata,
    job_dir: &Path,
    partitions: &[i32],
) -> Result<()> {
    let saved = crate::kafka::starts::read_bound(job_dir).with_context(|| format!("reading {}", job_dir.display()))?;
    if !saved.positions.is_empty() || !positions::read_checkpoint(job_dir)?.is_empty() {
        return Ok(());
    }
    let topic_id = current_topic_id(cfg, metadata).await;
    let marks = metadata.watermarks(partitions).await?;
    let positions = cfg.source.initial_positions(metadata, partitions, &marks).await?;
    tracing::info!(job = %cfg.job_name, topic = %cfg.source.topic, ?positions, "first start: start positions saved before the set-up");
    crate::kafka::starts::record_bound(job_dir, &crate::kafka::starts::Saved { topic_id, positions })
        .with_context(|| format!("writing {}", job_dir.display()))
}

/// The topic's id now, or None (with a warning) when the broker cannot say: then the
/// checkpoint is not judged by it.
async fn current_topic_id(cfg: &KafkaToBqConfig, metadata: &Metadata) -> Option<String> {
    match metadata.topic_id().await {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!(job = %cfg.job_name, topic = %cfg.source.topic, error = %e, "cannot read the topic's id: a topic deleted and created again would not be told apart");
            None
        }
    }
}

/// The checkpoint was read in a log whose topic id is not the topic's now: the topic was
/// deleted and created again. `offsetGapPolicy=FAIL` stops naming it; `SKIP` counts it,
/// logs where each partition stood in the old log (what it held after that is gone
/// unread), and the caller starts the new log at its earliest offset.
fn recreated_topic(
    cfg: &KafkaToBqConfig,
    old: &BTreeSet<String>,
    now: Option<&str>,
    old_log: OldLog<'_>,
    stats: &JobStats,
) -> Result<()> {
    let (job, topic) = (&cfg.job_name, &cfg.source.topic);
    let old_ids = old.iter().cloned().collect::<Vec<_>>().join(", ");
    let what = format!(
        "job {job}: topic {topic} was deleted and created again since the job last ran (topic id {old_ids} in the checkpoint, {} now): the job's positions belong to the old log, whose records after them are gone",
        now.unwrap_or("?")
    );
    if cfg.source.gap_policy == crate::kafka::gaps::GapPolicy::Fail {
        bail!("{what}. offsetGapPolicy=FAIL stops the job here; nothing was read from the new log. Set offsetGapPolicy=SKIP to read the new topic from its earliest offset (counted), or start the job under another --job-name");
    }
    let at = old_log.positions();
    tracing::error!(job, topic, old = %old_ids, new = now.unwrap_or("?"), positions = ?at, "{what}; offsetGapPolicy=SKIP: reading the new log from its earliest offset");
    stats.note(|r| {
        r.topics_recreated += 1;
        for (p, (pos, id)) in &at {
            let topic_id = id.clone().or_else(|| (old.len() == 1).then(|| old.iter().next().cloned()).flatten());
            let why = "topic recreated".to_string();
            r.note_lost(crate::stats::LostRange {
                topic: topic.clone(),
                topic_id,
                partition: *p,
                from: *pos,
                to: None,
                why,
                replaced_by: now.map(str::to_string),
            });
        }
    });
    Ok(())
}

/// Where the job stood in a log it gives up on.
struct OldLog<'a> {
    points: &'a [positions::ShardPoint],
    saved: &'a crate::kafka::starts::Saved,
    partitions: &'a [i32],
}

impl OldLog<'_> {
    /// Each partition's position there, with the topic id it was read in: the shard
    /// logs', else the saved start's, else 0 (a partition the job never started on).
    fn positions(&self) -> BTreeMap<i32, (i64, Option<String>)> {
        let mut at: BTreeMap<i32, (i64, Option<String>)> = self.partitions.iter().map(|p| (*p, (0, None))).collect();
        at.extend(self.saved.positions.iter().map(|(p, o)| (*p, (*o, self.saved.topic_id.clone()))));
        for pt in self.points {
            let id = pt.log.topic_id.clone().or_else(|| self.saved.topic_id.clone());
            at.extend(pt.positions.iter().map(|(p, o)| (*p, (*o, id.clone()))));
        }
        at
    }
}

/// CDC ordered by offset cannot start over logs whose offsets no longer order a key's
/// changes: partitions added since the last run, a log shorter than the checkpoint or
/// truncated under it, or a recreated topic. Refused (exit 2) before anything is read.
fn check_cdc_order(cfg: &KafkaToBqConfig, plan: &positions::StartPlan, recreated: bool) -> Result<()> {
    let Some(cdc) = &cfg.cdc else { return Ok(()) };
    use crate::kafka::gaps::Discontinuity;
    let cut = plan.found.iter().any(|d| matches!(d, Discontinuity::PastEnd { .. } | Discontinuity::Truncated { .. }));
    let what = match (plan.new_partitions.as_slice(), cut, recreated) {
        (_, _, true) => "the topic was deleted and created again".to_string(),
        ([], false, false) => return Ok(()),
        ([], true, false) => {
            "a partition's log is shorter than the job's checkpoint or was truncated under it (the topic was recreated, or an unclean leader election)"
                .to_string()
        }
        (new, _, false) => format!("partitions {new:?} were added since the job last ran"),
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
    /// Positions `offsetGapPolicy=SKIP` moved, in force until their shards log past them.
    moves: positions::Moves,
    /// The log the job reads.
    log: positions::LogState,
    /// Shards whose uncommitted batch cannot be re-read (`offsetGapPolicy=SKIP` settles
    /// each by its streams' row counts).
    unreplayable: BTreeMap<usize, positions::Unreplayable>,
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
    if !existed {
        record_first_starts(&cfg, &metadata, &job_dir, &partitions).await?;
    }
    let journal = open_journal(&cfg, &job_dir)?;
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
    stats.journal_to(&job_dir);
    let starts = start_positions(&cfg, &metadata, &job_dir, &partitions, existed, &stats).await?;

    let write_client = write_client(&cfg, endpoints.as_ref()).await?;
    tracing::info!(job = %cfg.job_name, topic = %cfg.source.topic, partitions = partitions.len(), shards, delivery = cfg.delivery.as_str(), table = %cfg.table, "starting kafka-to-bq");
    let mapping = Arc::new(job_mapping(&cfg, dest)?);
    store_schema(&job_dir, &mapping)?;
    let shares = cfg.run.memory_budget.shares(partitions.len(), shards, cfg.run.batch_bytes);
    tracing::info!(job = %cfg.job_name, budget_bytes = cfg.run.memory_budget.0, prefetch_per_partition = shares.prefetch_per_partition, batch_bytes = shares.batch_bytes, "memory budget");
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
        moves: starts.moves,
        log: starts.log,
        unreplayable: starts.unreplayable,
        shares,
        journal,
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
