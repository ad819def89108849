//! The kafka-to-gcs job: recover, read, window, and commit each window exactly once.
//!
//! One consumer reads every partition. Records wait in their window ([`Windows`]);
//! the earliest open window closes when the watermark passes its end (the smallest
//! newest-timestamp over partitions that still have data to read, or the wall clock
//! less a second when every partition is caught up), and every open window closes on
//! drain, as Dataflow's drain fires all windows.

use super::committer::{CommitTimes, Committer, STAGING};
use super::config::{KafkaToGcsConfig, OutputFormat};
use super::encode::{encode, Rec};
use super::log::{Entry, FilePlan, Prepared, Recovered, WindowLog};
use super::window::{
    assign, avro_file_name, avro_window_prefix, file_name, shard_of, window_prefix, Published, Window,
};
use crate::control::Control;
use crate::kafka::source::assign as assign_partitions;
use crate::store::Store;
use anyhow::{Context, Result};
use rdkafka::consumer::StreamConsumer;
use rdkafka::Message;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

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
}

/// Open windows and the positions the commit protocol needs.
struct Windows {
    size_ms: i64,
    open: BTreeMap<Window, Vec<Rec>>,
    published: Published,
    read_pos: BTreeMap<i32, i64>,
    newest_ts: BTreeMap<i32, i64>,
}

impl Windows {
    /// Place one record; false if a committed window already holds it.
    fn add(&mut self, rec: Rec, ts_ms: i64, report: &mut GcsReport) {
        self.read_pos.insert(rec.partition, rec.offset + 1);
        let e = self.newest_ts.entry(rec.partition).or_insert(ts_ms);
        *e = (*e).max(ts_ms);
        let raw = Window::of(ts_ms, self.size_ms);
        if self.published.holds(rec.partition, rec.offset, &raw) {
            report.skipped_published += 1;
            return;
        }
        let w = assign(raw, self.published.last.as_ref(), self.size_ms);
        report.late_records += u64::from(w != raw);
        report.records += 1;
        self.open.entry(w).or_default().push(rec);
    }

    /// Where a restart must read from, with `closing` removed: the oldest record still
    /// in another open window, else the next offset not read.
    fn resume(&self) -> BTreeMap<i32, i64> {
        let mut r = self.read_pos.clone();
        for recs in self.open.values() {
            for rec in recs {
                let e = r.entry(rec.partition).or_insert(rec.offset);
                *e = (*e).min(rec.offset);
            }
        }
        r
    }

    /// The earliest open window, if the watermark has passed its end.
    fn due(&self, caught_up: &BTreeSet<i32>, now_ms: i64) -> Option<Window> {
        let w = *self.open.keys().next()?;
        let behind: Vec<i64> = self
            .read_pos
            .keys()
            .filter(|p| !caught_up.contains(p))
            .map(|p| self.newest_ts.get(p).copied().unwrap_or(i64::MIN))
            .collect();
        let watermark = behind.into_iter().min().unwrap_or(now_ms - 1000);
        (watermark >= w.end_ms).then_some(w)
    }
}

/// A window's files with their bytes, and the trash prefixes (see [`render`]).
type Rendered = (Vec<(FilePlan, Vec<u8>)>, BTreeSet<String>);

/// The files of one window: records spread over `shards` by partition and offset,
/// each file in (partition, offset) order; with Avro, one file per writer schema too.
/// Also the name prefixes an earlier run's files of this window would have.
fn render(cfg: &KafkaToGcsConfig, w: &Window, mut recs: Vec<Rec>, attempt: &str) -> Result<Rendered> {
    recs.sort_by_key(|r| (r.partition, r.offset));
    let mut by_shard: BTreeMap<u32, Vec<Rec>> = BTreeMap::new();
    for r in recs {
        by_shard.entry(shard_of(r.partition, r.offset, cfg.shards)).or_default().push(r);
    }
    let mut files = Vec::new();
    let mut prefixes = BTreeSet::new();
    for (shard, recs) in by_shard {
        let n = recs.len() as u64;
        for (dest, data) in encode(&cfg.format, &recs).context("an undecodable message stops the job")? {
            let final_name = match cfg.format {
                OutputFormat::Json => {
                    prefixes.insert(window_prefix(&cfg.prefix, w));
                    file_name(&cfg.prefix, w, shard, cfg.shards, ".json")
                }
                OutputFormat::Avro(_) => {
                    prefixes.insert(avro_window_prefix(&cfg.prefix, &dest.schema_name, &dest.md5, w));
                    avro_file_name(&cfg.prefix, &dest.schema_name, &dest.md5, w, shard, cfg.shards)
                }
            };
            let staged = format!("{STAGING}{}/{attempt}/{final_name}", w.label());
            files.push((FilePlan { staged, final_name, records: n }, data));
        }
    }
    Ok((files, prefixes))
}

/// Stage, decide, publish and record window `w`.
async fn commit_window(
    cfg: &KafkaToGcsConfig,
    ws: &mut Windows,
    w: Window,
    committer: &Committer,
    log: &mut WindowLog,
    attempt: &str,
) -> Result<CommitTimes> {
    let recs = ws.open.remove(&w).unwrap_or_default();
    if let OutputFormat::Avro(d) = &cfg.format {
        d.prefetch(recs.iter().map(|r| r.value.as_slice())).await;
    }
    let (files, prefixes) = render(cfg, &w, recs, attempt)?;
    let plans: Vec<FilePlan> = files.iter().map(|(p, _)| p.clone()).collect();
    let stage = committer.stage(files.into_iter().map(|(p, d)| (p.staged, d)).collect()).await?;
    crate::crash_point!("gcs::before_prepare");
    let prepared = Prepared {
        window: w,
        files: plans,
        close_pos: ws.read_pos.clone(),
        resume: ws.resume(),
        trash_prefixes: prefixes.into_iter().collect(),
    };
    log.append(&Entry::Prepared(prepared.clone())).context("writing the window log")?;
    crate::crash_point!("gcs::after_prepare");
    let mut t = committer.publish(&prepared.trash_prefixes, &prepared.files).await?;
    crate::crash_point!("gcs::before_committed");
    log.append(&Entry::Committed { window: w }).context("writing the window log")?;
    ws.published = Published { last: Some(w), close_pos: prepared.close_pos };
    t.stage = stage;
    tracing::info!(window = %w.label(), files = t.files, stage_ms = stage.as_millis() as u64, publish_ms = t.publish.as_millis() as u64, "window committed");
    Ok(t)
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

/// Run a kafka-to-gcs job until drained (cancelled, or idle for `--idle-timeout`).
pub async fn run(
    cfg: KafkaToGcsConfig,
    checkpoint_root: &Path,
    cancel_tx: watch::Sender<bool>,
    control: Arc<Control>,
) -> Result<GcsReport> {
    let started = Instant::now();
    let store = Store::open(&cfg.output, cfg.endpoint.as_deref()).await.map_err(|e| crate::usage(e.to_string()))?;
    let job_dir = checkpoint_root.join(&cfg.job_name);
    let _lock = control.register_fixed(&job_dir, 1)?;
    let (mut log, rec) =
        WindowLog::open(&job_dir).with_context(|| format!("opening the window log in {}", job_dir.display()))?;
    let committer = Committer { store, parallelism: cfg.parallelism };
    let mut report = GcsReport::default();
    recover(&rec, &committer, &mut log, &mut report).await?;
    let metadata = cfg.source.metadata()?;
    let partitions = metadata.partitions().await?;
    let mut start = cfg.source.initial_positions(&partitions).await?;
    if let Some(p) = &rec.last {
        start.extend(p.resume.iter().filter(|(k, _)| partitions.contains(k)));
    }
    let consumer: StreamConsumer = cfg.source.consumer()?;
    assign_partitions(&consumer, &cfg.source.topic, &start)?;
    let mut ws = Windows {
        size_ms: cfg.window.as_millis() as i64,
        open: BTreeMap::new(),
        published: rec.published(),
        read_pos: start.clone(),
        newest_ts: BTreeMap::new(),
    };
    let attempt = format!("{}-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S"), std::process::id());
    let mut cancel = cancel_tx.subscribe();
    let mut last_read = Instant::now();
    let mut caught_up = BTreeSet::new();
    let mut last_check = Instant::now() - Duration::from_secs(10);
    loop {
        tokio::select! {
            m = consumer.recv() => {
                let m = m.context("reading from Kafka")?;
                last_read = Instant::now();
                let ts = m.timestamp().to_millis().unwrap_or_else(|| chrono::Utc::now().timestamp_millis());
                match m.payload() {
                    Some(v) => ws.add(Rec { partition: m.partition(), offset: m.offset(), value: v.to_vec() }, ts, &mut report),
                    None => { report.null_values += 1; ws.read_pos.insert(m.partition(), m.offset() + 1); }
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = cancel.changed() => {}
        }
        if last_check.elapsed() >= Duration::from_millis(500) {
            last_check = Instant::now();
            let hw = metadata.high_watermarks(&partitions).await.unwrap_or_default();
            caught_up = partitions
                .iter()
                .copied()
                .filter(|p| ws.read_pos.get(p).copied().unwrap_or(0) >= hw.get(p).copied().unwrap_or(i64::MAX))
                .collect();
        }
        let draining = *cancel.borrow()
            || cfg.idle_timeout.is_some_and(|t| last_read.elapsed() >= t && caught_up.len() == partitions.len());
        while let Some(w) = if draining {
            ws.open.keys().next().copied()
        } else {
            ws.due(&caught_up, chrono::Utc::now().timestamp_millis())
        } {
            let t = commit_window(&cfg, &mut ws, w, &committer, &mut log, &attempt).await?;
            (report.windows, report.files) = (report.windows + 1, report.files + t.files as u64);
            report.stage_s += t.stage.as_secs_f64();
            report.publish_s += t.publish.as_secs_f64();
            if cfg.commit_offsets {
                crate::kafka::source::commit_positions(&consumer, &cfg.source.topic, &ws.resume());
            }
        }
        if draining {
            break;
        }
    }
    report.elapsed_s = started.elapsed().as_secs_f64();
    Ok(report)
}
