//! The kafka-to-bq pipeline: shards that read, map and write, with exactly-once
//! delivery that survives SIGKILL anywhere.
//!
//! # Layout
//! - this module: job set-up ([`run`]): checkpoint identity, schema, dead-letter
//!   table, shards, drain and the summary.
//! - [`shard`]: one shard's loop (recover, collect a batch, process it).
//! - [`sink`]: a write target with reconnect and retry.
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

pub mod shard;
pub mod sink;

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
    /// Becomes true to drain.
    pub cancel: watch::Receiver<bool>,
    /// Wall-clock ms of the last message read or batch finished (idle detection).
    pub last_read_ms: AtomicI64,
    /// Shards processing a batch right now; the job is only idle when this is 0.
    pub busy: AtomicUsize,
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
pub async fn run(cfg: KafkaToBqConfig, checkpoint_root: &Path, endpoints: Option<Endpoints>, cancel_tx: watch::Sender<bool>) -> Result<RunReport> {
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
        cancel: cancel_tx.subscribe(),
        last_read_ms: AtomicI64::new(chrono::Utc::now().timestamp_millis()),
        busy: AtomicUsize::new(0),
    });

    let mut set = tokio::task::JoinSet::new();
    for id in 0..shards {
        let mine: Vec<i32> = partitions.iter().copied().filter(|p| (*p as usize) % shards == id).collect();
        if mine.is_empty() {
            continue;
        }
        let ctx = ctx.clone();
        set.spawn(async move { shard::Shard::open(id, ctx, mine).await?.run().await.with_context(|| format!("shard {id}")) });
    }
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
    let mut first_err = None;
    while let Some(r) = set.join_next().await {
        let r = r.map_err(anyhow::Error::from).and_then(|r| r);
        if let Err(e) = r {
            tracing::error!(error = format!("{e:#}"), "a shard failed; draining the others");
            let _ = cancel_tx.send(true);
            first_err.get_or_insert(e);
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    if ctx.cfg.delivery == Delivery::AtLeastOnce {
        tracing::info!("at-least-once: rows replayed after a crash can appear twice");
    }
    Ok(RunReport { summary: stats.summary(), elapsed: started.elapsed(), shards })
}
