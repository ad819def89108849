//! The kafka-to-gcs job: recover, read on the workers, close windows in order and
//! commit each exactly once, checkpoint the window state, and autoscale.
//!
//! The coordinator (this file) owns the window commit log and the autoscaler; the
//! workers ([`super::pool`]) read and render; checkpoints run on their own timer
//! ([`super::checkpoints::spawn_ticker`]), so a long window commit does not delay them. The earliest open window
//! closes when the watermark passes its end (the smallest newest timestamp over
//! partitions that still have data to read, or the wall clock less a second when every
//! partition is caught up), and every open window closes on drain, as Dataflow's drain
//! fires all windows.

use super::checkpoints::{Checkpoints, RestoredStart};
use super::committer::{staging_prefix, CommitTimes, Committer};
use super::config::KafkaToGcsConfig;
use super::log::{Entry, FilePlan, Prepared, Recovered, WindowLog};
use super::open_windows::OpenWindows;
use super::pool::Workers;
use super::scale::Autoscaled;
use super::window::Window;
use crate::control::Control;
use crate::kafka::metadata::{Metadata, PARTITION_DISCOVERY_INTERVAL};
use crate::store::Store;
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub use super::checkpoints::CheckpointRecord;

/// What the job did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct GcsReport {
    /// Records read and placed in a window.
    pub records: u64,
    /// Records skipped on replay because a committed window already holds them.
    pub skipped_published: u64,
    /// Records whose window had closed, placed in the next open one.
    pub late_records: u64,
    /// Messages without a value (tombstones): nothing to write.
    pub null_values: u64,
    /// Records whose timestamp was out of bounds, windowed by the processing time.
    pub timestamps_clamped: u64,
    /// Errors the Kafka consumers reported and waited out (a broker restart).
    pub consumer_errors: u64,
    /// Offsets deleted before they were read (`offsetGapPolicy=SKIP`).
    pub offsets_lost_to_retention: u64,
    /// Partitions found past their log's end (`offsetGapPolicy=SKIP`).
    pub partitions_past_end: u64,
    /// Partitions found while running.
    pub partitions_discovered: u64,
    /// Windows a restored checkpoint held that the commit log had committed since.
    pub dropped_on_restore: u64,
    /// Windows committed.
    pub windows: u64,
    /// Files published.
    pub files: u64,
    /// Whether recovery published a window a crash left decided but unpublished.
    pub rolled_forward: bool,
    /// Staging objects of undecided windows removed at start.
    pub swept: usize,
    /// Seconds spent staging, and publishing (trash + renames), over all windows.
    pub stage_s: f64,
    /// See `stage_s`.
    pub publish_s: f64,
    /// Run time.
    pub elapsed_s: f64,
    /// Workers at the end.
    pub workers: u32,
    /// Autoscaling decisions that changed the worker count.
    pub resizes: Vec<(f64, u32, u32)>,
    /// State and checkpoints.
    pub state: super::checkpoints::StateReport,
}

/// Stage, decide, publish and record window `w`.
async fn commit_window(
    ow: &OpenWindows,
    w: Window,
    committer: &Committer,
    log: &mut WindowLog,
    attempt: &str,
    workers: &Workers,
) -> Result<(CommitTimes, BTreeMap<i32, i64>)> {
    let (close_pos, resume) = ow.close(w);
    let (files, prefixes) = workers.render(w, attempt).await?;
    let plans: Vec<FilePlan> = files.iter().map(|(p, _)| p.clone()).collect();
    let stage = committer.stage(files.into_iter().map(|(p, d)| (p.staged, d)).collect()).await?;
    crate::crash_point!("gcs::before_prepare");
    let trash_prefixes = prefixes.into_iter().collect();
    let prepared = Prepared { window: w, files: plans, close_pos, resume: resume.clone(), trash_prefixes };
    log.append(&Entry::Prepared(prepared.clone())).context("writing the window log")?;
    crate::crash_point!("gcs::after_prepare");
    let mut t = committer.publish(&prepared.trash_prefixes, &prepared.files).await?;
    crate::crash_point!("gcs::before_committed");
    log.append(&Entry::Committed { window: w }).context("writing the window log")?;
    ow.committed(w, prepared.close_pos)?;
    t.stage = stage;
    tracing::info!(window = %w.label(), files = t.files, stage_ms = stage.as_millis() as u64, publish_ms = t.publish.as_millis() as u64, "window committed");
    Ok((t, resume))
}

/// Publish a window a crash left decided, and remove staging objects of undecided ones.
async fn recover(rec: &Recovered, committer: &Committer, log: &mut WindowLog, report: &mut GcsReport) -> Result<()> {
    if let (Some(p), false) = (&rec.last, rec.last_committed) {
        tracing::warn!(window = %p.window.label(), "recovery: the window was decided but not published; publishing it");
        crate::crash_point!("gcs::recovery_publish");
        committer.publish(&p.trash_prefixes, &p.files).await?;
        log.append(&Entry::Committed { window: p.window })?;
        report.rolled_forward = true;
    }
    report.swept = committer.sweep(&BTreeSet::new()).await?;
    if report.swept > 0 {
        tracing::warn!(objects = report.swept, "recovery: removed staging objects of windows never decided");
    }
    Ok(())
}

/// Which partitions have nothing left to read (their position is at the high watermark).
fn caught_up(ow: &OpenWindows, hw: &BTreeMap<i32, i64>) -> BTreeSet<i32> {
    let pos = ow.read_pos();
    hw.iter().filter(|(p, h)| pos.get(p).copied().unwrap_or(0) >= **h).map(|(p, _)| *p).collect()
}

/// What the loop watches between steps.
struct Watch {
    metadata: Metadata,
    partitions: Vec<i32>,
    hw: BTreeMap<i32, i64>,
    caught_up: BTreeSet<i32>,
    last_check: Instant,
    last_progress: Instant,
    last_read: u64,
    last_discovery: Instant,
}

impl Watch {
    /// Refresh the high watermarks twice a second; note when reading last advanced.
    async fn refresh(&mut self, ow: &OpenWindows) {
        let c = ow.counts();
        let read = c.records + c.skipped_published + c.null_values;
        if read != self.last_read {
            (self.last_read, self.last_progress) = (read, Instant::now());
        }
        if self.last_check.elapsed() < Duration::from_millis(500) {
            return;
        }
        self.last_check = Instant::now();
        if let Ok(hw) = self.metadata.high_watermarks(&self.partitions).await {
            self.hw = hw;
        }
        self.caught_up = caught_up(ow, &self.hw);
    }

    fn idle_for(&self, t: Option<Duration>) -> bool {
        t.is_some_and(|t| self.last_progress.elapsed() >= t && self.caught_up.len() == self.partitions.len())
    }
}

/// Where each partition starts: the checkpoint's (or the window log's) position, else
/// its saved start, else its earliest offset for a partition an existing job has never
/// seen (added while it was stopped; counted), else `kafkaReadOffset`. Then
/// `offsetGapPolicy` on any position the broker no longer holds, and all of it saved
/// before the first read, so a restart before the first checkpoint or window resumes
/// here, not at a newly resolved `latest`.
async fn start_positions(
    cfg: &KafkaToGcsConfig,
    metadata: &Metadata,
    job_dir: &Path,
    partitions: &[i32],
    rec: &Recovered,
    checkpoints: &mut Checkpoints,
) -> Result<(RestoredStart, crate::kafka::gaps::Skipped, u64)> {
    let bound = crate::kafka::starts::read_bound(job_dir).with_context(|| format!("reading {}", job_dir.display()))?;
    let topic_id = metadata.topic_id().await.unwrap_or_else(|e| {
        tracing::warn!(job = %cfg.job_name, error = %e, "cannot read the topic's id: a recreated topic would not be told apart");
        None
    });
    let recreated = recreated(cfg, bound.topic_id.as_deref(), topic_id.as_deref())?;
    let saved = if recreated { BTreeMap::new() } else { bound.positions };
    let marks = metadata.watermarks(partitions).await?;
    let mut initial = cfg.source.initial_positions(metadata, partitions, &marks).await?;
    let mut discovered = 0;
    if !saved.is_empty() {
        for p in partitions.iter().filter(|p| !saved.contains_key(p)) {
            // From its first record: what retention deleted before is a gap, judged below.
            initial.insert(*p, 0);
            discovered += 1;
            tracing::info!(job = %cfg.job_name, partition = p, "a partition added since the job last ran starts at its earliest offset");
        }
    }
    let initial = crate::kafka::starts::overlay(initial, &saved);
    let mut restored = checkpoints.restore(rec, initial).await?;
    if recreated {
        // The state's records were read from the old log and are still published; reading
        // goes on in the new log from its start.
        restored.positions = marks.iter().map(|(p, (low, _))| (*p, *low)).collect();
    }
    let found = crate::kafka::gaps::check(&restored.positions, &marks);
    let skipped = crate::kafka::gaps::apply(
        cfg.source.gap_policy,
        &found,
        &mut restored.positions,
        &cfg.job_name,
        &cfg.source.topic,
    )
    .map_err(anyhow::Error::msg)?;
    let mut starts = saved;
    starts.extend(&restored.positions);
    crate::kafka::starts::record_bound(job_dir, &crate::kafka::starts::Saved { topic_id, positions: starts })
        .with_context(|| format!("writing {}", job_dir.display()))?;
    Ok((restored, skipped, discovered))
}

/// Whether the job's saved positions belong to a topic since deleted and created again
/// (another topic id): under `offsetGapPolicy=FAIL` an error naming it, under SKIP true
/// (the new log is read from its earliest offset; what the state holds is still written).
fn recreated(cfg: &KafkaToGcsConfig, saved: Option<&str>, now: Option<&str>) -> Result<bool> {
    let (Some(was), Some(is)) = (saved, now) else { return Ok(false) };
    if was == is {
        return Ok(false);
    }
    let what = format!(
        "job {}: topic {} was deleted and created again since the job last ran (topic id {was} in the checkpoint, {is} now): the job's positions belong to the old log",
        cfg.job_name, cfg.source.topic
    );
    if cfg.source.gap_policy == crate::kafka::gaps::GapPolicy::Fail {
        anyhow::bail!("{what}. offsetGapPolicy=FAIL stops the job here. Set offsetGapPolicy=SKIP to read the new topic from its earliest offset, or start the job under another --job-name");
    }
    tracing::error!(job = %cfg.job_name, topic = %cfg.source.topic, "{what}; offsetGapPolicy=SKIP: reading the new log from its earliest offset");
    Ok(true)
}

/// A started job: its windows, workers, commit log, checkpoints and what watches them.
struct Job {
    job_dir: std::path::PathBuf,
    cfg: Arc<KafkaToGcsConfig>,
    ow: Arc<OpenWindows>,
    workers: Workers,
    scaler: Autoscaled,
    committer: Committer,
    log: WindowLog,
    attempt: String,
    watch: Watch,
    checkpoints: Arc<tokio::sync::Mutex<Checkpoints>>,
    ticker: super::checkpoints::Ticker,
    publisher: Option<super::publish::Publisher>,
    commit_consumer: Option<crate::kafka::source::Consumer>,
    report: GcsReport,
    started: Instant,
    _lock: crate::control::lock::JobLock,
}

/// Take the job's lock, recover its commit log, restore its state and start the
/// workers and the checkpoint timer.
async fn start(
    cfg: KafkaToGcsConfig,
    checkpoint_root: &Path,
    control: &Arc<Control>,
    web: Option<flexrun_web::JobRegistry>,
) -> Result<Job> {
    let started = Instant::now();
    let cfg = Arc::new(cfg);
    let store = Store::open(&cfg.output, cfg.endpoint.as_deref()).await.map_err(|e| crate::usage(e.to_string()))?;
    let job_dir = checkpoint_root.join(&cfg.job_name);
    let mut checkpoints = Checkpoints::open(&cfg, &job_dir).await?;
    let lock = crate::control::lock::JobLock::acquire(&job_dir, &cfg.job_name)?;
    crate::control::identity::check(&job_dir, "kafka-to-gcs", &cfg.identity())?;
    control.start(&job_dir)?;
    let (mut log, rec) =
        WindowLog::open(&job_dir).with_context(|| format!("opening the window log in {}", job_dir.display()))?;
    let committer = Committer { store, parallelism: cfg.parallelism, staging: staging_prefix(&cfg.job_name) };
    let mut report = GcsReport::default();
    recover(&rec, &committer, &mut log, &mut report).await?;
    let metadata = cfg.source.metadata()?;
    let partitions = metadata.partitions().await?;
    let (RestoredStart { state, positions, extras }, skipped, discovered) =
        start_positions(&cfg, &metadata, &job_dir, &partitions, &rec, &mut checkpoints).await?;
    let size_ms = cfg.window.as_millis() as i64;
    let ow = OpenWindows::new(size_ms, cfg.shards, state, positions, extras, rec.published())?;
    let ow = Arc::new(ow.with_timestamp_bounds(cfg.timestamps));
    ow.note_skipped(skipped);
    ow.note_discovered(discovered);
    let n = cfg.pool.initial_workers(partitions.len() as u32);
    let workers = Workers::start(n, cfg.clone(), cfg.capacity, partitions.clone(), ow.clone())?;
    let attempt = checkpoints.attempt().to_string();
    let checkpoints = Arc::new(tokio::sync::Mutex::new(checkpoints));
    Ok(Job {
        scaler: Autoscaled::new(cfg.pool.clone(), partitions.len() as u32),
        ticker: super::checkpoints::spawn_ticker(checkpoints.clone(), ow.clone()),
        publisher: web.map(|w| super::publish::Publisher::new(w, &cfg, started)),
        commit_consumer: if cfg.commit_offsets { Some(cfg.source.consumer()?) } else { None },
        watch: Watch {
            metadata,
            partitions,
            hw: BTreeMap::new(),
            caught_up: BTreeSet::new(),
            last_check: Instant::now() - Duration::from_secs(10),
            last_discovery: Instant::now(),
            last_progress: Instant::now(),
            last_read: 0,
        },
        job_dir,
        cfg,
        ow,
        workers,
        committer,
        log,
        attempt,
        checkpoints,
        report,
        started,
        _lock: lock,
    })
}

impl Job {
    /// Commit every window that is due (all of them when draining), in order.
    async fn commit_due(&mut self, draining: bool) -> Result<()> {
        loop {
            let now = chrono::Utc::now().timestamp_millis();
            let due = if draining { self.ow.first_open() } else { self.ow.due(&self.watch.caught_up, now) };
            let Some(win) = due else { return Ok(()) };
            let (t, resume) =
                commit_window(&self.ow, win, &self.committer, &mut self.log, &self.attempt, &self.workers).await?;
            let r = &mut self.report;
            (r.windows, r.files) = (r.windows + 1, r.files + t.files as u64);
            r.stage_s += t.stage.as_secs_f64();
            r.publish_s += t.publish.as_secs_f64();
            if let Some(c) = &self.commit_consumer {
                crate::kafka::source::commit_positions(c, &self.cfg.source.topic, &resume);
            }
        }
    }

    /// Look for partitions added to the topic (every [`PARTITION_DISCOVERY_INTERVAL`]):
    /// each starts at its earliest offset, saved before any reader reads it.
    async fn discover_partitions(&mut self) -> Result<()> {
        if self.watch.last_discovery.elapsed() < PARTITION_DISCOVERY_INTERVAL {
            return Ok(());
        }
        self.watch.last_discovery = Instant::now();
        let now = match self.watch.metadata.partitions().await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the topic's partitions; will try again");
                return Ok(());
            }
        };
        let new: Vec<i32> = now.into_iter().filter(|p| !self.watch.partitions.contains(p)).collect();
        if new.is_empty() {
            return Ok(());
        }
        let lows = self.watch.metadata.low_watermarks(&new).await?;
        crate::kafka::starts::record(&self.job_dir, &lows)
            .with_context(|| format!("writing {}", self.job_dir.display()))?;
        self.ow.add_partitions(&lows);
        self.watch.partitions.extend(&new);
        self.watch.partitions.sort_unstable();
        tracing::info!(job = %self.cfg.job_name, partitions = ?new, "new partitions found: they start at their earliest offset");
        self.workers.add_partitions(&new).await
    }

    /// Between commits: the checkpoint task's health, new partitions, the autoscaler,
    /// the dashboard.
    async fn tend(&mut self, control: &Control) -> Result<()> {
        self.ticker.check().await?;
        self.discover_partitions().await?;
        let c = self.ow.counts();
        let avg = c.bytes as f64 / c.records.max(1) as f64;
        self.scaler.step(&mut self.workers, &self.watch.hw, &self.ow.read_pos(), avg, control).await?;
        if let Some(p) = &mut self.publisher {
            p.maybe_publish(&self.ow, &self.watch.hw, &self.workers, &self.scaler, &*self.checkpoints.lock().await);
        }
        Ok(())
    }

    /// After the drain: the last checkpoint, and the report.
    async fn finish(self) -> Result<GcsReport> {
        self.ticker.stop().await?;
        let mut checkpoints = self.checkpoints.lock().await;
        checkpoints.finish(&self.ow).await?;
        let mut report = self.report;
        let c = self.ow.counts();
        (report.records, report.skipped_published, report.late_records, report.null_values) =
            (c.records, c.skipped_published, c.late_records, c.null_values);
        report.dropped_on_restore = c.dropped_on_restore;
        (report.timestamps_clamped, report.consumer_errors) = (c.timestamps_clamped, c.consumer_errors);
        (report.offsets_lost_to_retention, report.partitions_past_end, report.partitions_discovered) =
            (c.offsets_lost_to_retention, c.partitions_past_end, c.partitions_discovered);
        report.workers = self.workers.workers();
        report.resizes =
            self.scaler.into_decisions().iter().filter(|d| d.is_change()).map(|d| (d.time_s, d.from, d.to)).collect();
        report.state = checkpoints.report();
        report.elapsed_s = self.started.elapsed().as_secs_f64();
        Ok(report)
    }
}

/// Run a kafka-to-gcs job until drained (cancelled, or idle for `--idle-timeout`).
pub async fn run(
    cfg: KafkaToGcsConfig,
    checkpoint_root: &Path,
    cancel_tx: watch::Sender<bool>,
    control: Arc<Control>,
    web: Option<flexrun_web::JobRegistry>,
) -> Result<GcsReport> {
    let mut job = start(cfg, checkpoint_root, &control, web).await?;
    let mut cancel = cancel_tx.subscribe();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = cancel.changed() => {}
        }
        job.workers.check().await?;
        job.watch.refresh(&job.ow).await;
        let draining = *cancel.borrow() || job.watch.idle_for(job.cfg.idle_timeout);
        if draining {
            job.workers.stop_reading().await?;
        }
        job.commit_due(draining).await?;
        if draining {
            return job.finish().await;
        }
        job.tend(&control).await?;
    }
}
