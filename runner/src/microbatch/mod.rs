//! The micro-batch engine behind `rate-to-stats` and `kafka-to-kafka`: Spark Structured
//! Streaming's loop, on flexrun's progress store.
//!
//! Per batch: take what the source has (up to `max_batch` records), write the batch's
//! offset-log entry, hand the records to the sink (which returns once they are durable
//! there), then write the commit-log entry. That is the synchronous mode: two fsyncs on
//! every batch's critical path. With `--async-progress-tracking` the batch loop only
//! hands its positions to a background thread that persists them every
//! `--progress-checkpoint-interval` (at-least-once: a crash replays at most about one
//! interval). `--async-log-purge` moves the deletion of old log segments off the loop.
//!
//! Latency is measured per record, from its creation time (the rate source's stamp or
//! the Kafka message timestamp) to the moment the sink has it, into an HDR histogram.
//!
//! Layout: this file (the loop, recovery, the report); [`rate`] (the constant-rate
//! source and the stats sink); [`kafka`] (the Kafka source and sink).

pub mod kafka;
pub mod rate;

use crate::progress::ProgressConfig;
use crate::progress::{AsyncProgress, CommitEntry, OffsetEntry, Recovery, ShardLog};
use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One record: when it was created and when the job read it (µs since the Unix epoch),
/// and its bytes.
#[derive(Debug, Clone)]
pub struct Record {
    /// Creation time, µs since the Unix epoch.
    pub created_us: u64,
    /// When the job's source handed it over, µs since the Unix epoch.
    pub read_us: u64,
    /// Payload.
    pub payload: Vec<u8>,
}

/// What a source returned for one batch.
#[derive(Debug, Default)]
pub struct Batch {
    /// The records.
    pub records: Vec<Record>,
    /// Per partition, the `[from, to)` offsets read.
    pub ranges: BTreeMap<i32, (i64, i64)>,
}

/// Where records come from.
pub trait Source {
    /// Start reading at these positions (partition → next offset); partitions not named
    /// start where the source starts by default.
    fn seek(&mut self, positions: &BTreeMap<i32, i64>) -> Result<()>;
    /// The next batch, waiting at most `wait` for the first record. None when the
    /// source is exhausted (a limit reached).
    fn next_batch(&mut self, max: usize, wait: Duration) -> Result<Option<Batch>>;
}

/// Latency histograms a sink fills, µs.
pub struct Latencies {
    /// Creation → delivered (end to end).
    pub end_to_end_us: Histogram<u64>,
    /// Read by the job → delivered (the job's own share: batching, progress, mapping, writing).
    pub in_job_us: Histogram<u64>,
}

impl Latencies {
    fn new() -> Latencies {
        let h = crate::stats::histogram;
        Latencies { end_to_end_us: h(), in_job_us: h() }
    }

    /// Record one record delivered at `now_us`.
    pub fn record(&mut self, r: &Record, now_us: u64) {
        self.end_to_end_us.saturating_record(now_us.saturating_sub(r.created_us).max(1));
        self.in_job_us.saturating_record(now_us.saturating_sub(r.read_us).max(1));
    }
}

/// Where records go.
pub trait Sink {
    /// Deliver a batch; return when it is durable at the destination, having recorded
    /// each record's latencies.
    fn write(&mut self, batch: &Batch, latency: &mut Latencies) -> Result<()>;
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct MicroBatchConfig {
    /// The job's checkpoint directory (offset and commit logs).
    pub checkpoint_dir: PathBuf,
    /// Synchronous or asynchronous progress, and purge.
    pub progress: ProgressConfig,
    /// Most records per batch.
    pub max_batch: usize,
    /// Stop after no record arrived for this long.
    pub idle_timeout: Option<Duration>,
    /// Leave the batches of this first stretch after the first record out of the latency
    /// histograms (connections, metadata and the producer's start-up are not steady state).
    pub latency_warm_up: Duration,
}

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct MicroBatchReport {
    /// Records delivered.
    pub records: u64,
    /// Batches.
    pub batches: u64,
    /// Wall seconds.
    pub elapsed_s: f64,
    /// Where the run started: replaying an uncommitted batch, resuming, or fresh.
    pub start: String,
    /// End-to-end latency (creation → sink) P50, P99, P99.9 and max, ms.
    pub latency_ms: [f64; 4],
    /// In-job latency (read by the source → sink) P50, P99, P99.9 and max, ms.
    pub in_job_latency_ms: [f64; 4],
    /// Seconds after the first record whose batches the latency leaves out.
    pub latency_warm_up_s: f64,
    /// Progress mode: "sync" or "async".
    pub progress: String,
    /// Log purge: "sync" or "async".
    pub purge: String,
    /// Offset-log and commit-log segment files left at the end.
    pub log_segments: usize,
}

pub use crate::kafka::acks::now_us;

/// Run `source` into `sink` until the source ends, the idle timeout passes, or `stop`.
pub fn run(
    source: &mut dyn Source,
    sink: &mut dyn Sink,
    cfg: &MicroBatchConfig,
    stop: &AtomicBool,
) -> Result<MicroBatchReport> {
    let (log, resume) = recover(cfg)?;
    tracing::info!(dir = %cfg.checkpoint_dir.display(), start = %resume.start, "micro-batch job starting");
    source.seek(&resume.positions)?;
    let mut progress = Progress::start(log, &cfg.progress);
    let started = Instant::now();
    let done = batch_loop(source, sink, cfg, stop, &mut progress, &resume)?;
    progress.finish()?;
    Ok(report(cfg, done, started, resume.start))
}

/// Where a run starts, from the checkpoint's logs.
struct Resume {
    /// Partition → next offset to read.
    positions: BTreeMap<i32, i64>,
    /// In words, for the report: fresh, resuming, or replaying.
    start: String,
    /// The first batch's id.
    batch_id: u64,
}

/// Open the checkpoint's logs and find where to start: after the last committed batch,
/// or at an uncommitted batch's first offsets to replay it.
fn recover(cfg: &MicroBatchConfig) -> Result<(ShardLog, Resume)> {
    std::fs::create_dir_all(&cfg.checkpoint_dir)
        .with_context(|| format!("creating {}", cfg.checkpoint_dir.display()))?;
    let log = ShardLog::open_with(&cfg.checkpoint_dir, cfg.progress.purge)?;
    let (positions, start, batch_id) = match log.recover()? {
        Recovery::Fresh => (BTreeMap::new(), "fresh".to_string(), 0),
        Recovery::Clean { commit, .. } => {
            (commit.positions.clone(), format!("resumed after batch {}", commit.batch), commit.batch + 1)
        }
        Recovery::Replay(o) => {
            let mut p = o.positions.clone();
            for (part, (from, _)) in &o.ranges {
                p.insert(*part, *from);
            }
            (p, format!("replaying uncommitted batch {}", o.batch), o.batch)
        }
    };
    Ok((log, Resume { positions, start, batch_id }))
}

/// How the loop persists its progress.
enum Progress {
    /// Each batch's offset and commit entries on the critical path.
    Sync(Box<ShardLog>),
    /// Commits handed to a background thread that persists them every interval.
    Async(AsyncProgress),
}

impl Progress {
    fn start(log: ShardLog, cfg: &ProgressConfig) -> Progress {
        if cfg.async_progress {
            Progress::Async(AsyncProgress::start(log, cfg.interval))
        } else {
            Progress::Sync(Box::new(log))
        }
    }

    /// Before the sink: the batch's offset entry (synchronous mode only).
    fn log_offsets(&mut self, batch_id: u64, batch: &Batch, positions: &BTreeMap<i32, i64>) -> Result<()> {
        if let Progress::Sync(log) = self {
            log.log_offsets(&OffsetEntry {
                batch: batch_id,
                ranges: batch.ranges.clone(),
                positions: positions.clone(),
                ..Default::default()
            })?;
        }
        Ok(())
    }

    /// After the sink: the batch's commit.
    fn commit(&mut self, commit: CommitEntry) -> Result<()> {
        match self {
            Progress::Sync(log) => log.log_commit(&commit)?,
            Progress::Async(a) => a.update(commit),
        }
        Ok(())
    }

    /// Persist what is pending and close the logs.
    fn finish(self) -> Result<()> {
        match self {
            Progress::Sync(log) => drop(log),
            Progress::Async(a) => a.finish()?,
        }
        Ok(())
    }
}

/// What the loop delivered.
struct Done {
    records: u64,
    batches: u64,
    latency: Latencies,
}

/// Spark's loop: per batch, the offset entry, the sink, the commit; until the source
/// ends, the idle timeout passes, or `stop`.
fn batch_loop(
    source: &mut dyn Source,
    sink: &mut dyn Sink,
    cfg: &MicroBatchConfig,
    stop: &AtomicBool,
    progress: &mut Progress,
    resume: &Resume,
) -> Result<Done> {
    let mut positions = resume.positions.clone();
    let mut batch_id = resume.batch_id;
    let mut done = Done { records: 0, batches: 0, latency: Latencies::new() };
    let mut last_data = Instant::now();
    let mut first_data: Option<Instant> = None;
    let mut warm_up = Latencies::new();
    while !stop.load(Ordering::Relaxed) {
        let Some(batch) = source.next_batch(cfg.max_batch, Duration::from_millis(100))? else { break };
        if batch.records.is_empty() {
            if cfg.idle_timeout.is_some_and(|t| last_data.elapsed() >= t) {
                break;
            }
            continue;
        }
        last_data = Instant::now();
        for (p, (_, to)) in &batch.ranges {
            positions.insert(*p, *to);
        }
        progress.log_offsets(batch_id, &batch, &positions)?;
        let warming = first_data.get_or_insert_with(Instant::now).elapsed() < cfg.latency_warm_up;
        sink.write(&batch, if warming { &mut warm_up } else { &mut done.latency })?;
        progress.commit(CommitEntry { batch: batch_id, positions: positions.clone(), ..Default::default() })?;
        done.records += batch.records.len() as u64;
        done.batches += 1;
        batch_id += 1;
    }
    Ok(done)
}

/// P50, P99, P99.9 and max of `h`, ms (zeros when it is empty).
fn quantiles_ms(h: &Histogram<u64>) -> [f64; 4] {
    if h.is_empty() {
        return [0.0; 4];
    }
    [0.5, 0.99, 0.999]
        .map(|p| crate::stats::quantile_ms(h, p))
        .into_iter()
        .chain([h.max() as f64 / 1000.0])
        .collect::<Vec<_>>()
        .try_into()
        .expect("4 values")
}

/// The run's report, with the log segments left in the checkpoint directory.
fn report(cfg: &MicroBatchConfig, done: Done, started: Instant, start: String) -> MicroBatchReport {
    let segments = std::fs::read_dir(&cfg.checkpoint_dir)
        .map(|d| d.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().contains(".log")).count())
        .unwrap_or(0);
    MicroBatchReport {
        records: done.records,
        batches: done.batches,
        elapsed_s: started.elapsed().as_secs_f64(),
        start,
        latency_ms: quantiles_ms(&done.latency.end_to_end_us),
        in_job_latency_ms: quantiles_ms(&done.latency.in_job_us),
        latency_warm_up_s: cfg.latency_warm_up.as_secs_f64(),
        progress: if cfg.progress.async_progress { "async".into() } else { "sync".into() },
        purge: match cfg.progress.purge {
            crate::progress::Purge::Async => "async".into(),
            crate::progress::Purge::Sync => "sync".into(),
        },
        log_segments: segments,
    }
}

impl MicroBatchReport {
    /// The end-of-job lines.
    pub fn render(&self) -> String {
        format!(
            "{} records in {} batches over {:.1} s ({:.0} records/s); start: {}\nprogress {} · purge {} · {} log segments on disk\nend-to-end latency ms: p50 {:.2} · p99 {:.2} · p99.9 {:.2} · max {:.2}\nin-job latency ms (read → sink): p50 {:.2} · p99 {:.2}\n",
            self.records,
            self.batches,
            self.elapsed_s,
            self.records as f64 / self.elapsed_s.max(1e-9),
            self.start,
            self.progress,
            self.purge,
            self.log_segments,
            self.latency_ms[0],
            self.latency_ms[1],
            self.latency_ms[2],
            self.latency_ms[3],
            self.in_job_latency_ms[0],
            self.in_job_latency_ms[1]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offsets 0..n in partition 0, `per` per batch.
    struct Counter {
        next: i64,
        end: i64,
    }

    impl Source for Counter {
        fn seek(&mut self, positions: &BTreeMap<i32, i64>) -> Result<()> {
            self.next = positions.get(&0).copied().unwrap_or(0);
            Ok(())
        }
        fn next_batch(&mut self, max: usize, _: Duration) -> Result<Option<Batch>> {
            if self.next >= self.end {
                return Ok(None);
            }
            let to = (self.next + max as i64).min(self.end);
            let records = (self.next..to)
                .map(|i| Record { created_us: now_us(), read_us: now_us(), payload: i.to_le_bytes().to_vec() })
                .collect();
            let b = Batch { records, ranges: BTreeMap::from([(0, (self.next, to))]) };
            self.next = to;
            Ok(Some(b))
        }
    }

    /// Collects offsets; fails on the `fail_at`-th batch.
    struct Collect {
        seen: Vec<i64>,
        batches: u32,
        fail_at: Option<u32>,
    }

    impl Sink for Collect {
        fn write(&mut self, batch: &Batch, latency: &mut Latencies) -> Result<()> {
            self.batches += 1;
            if Some(self.batches) == self.fail_at {
                anyhow::bail!("injected failure");
            }
            let now = now_us();
            for r in &batch.records {
                latency.record(r, now);
                self.seen.push(i64::from_le_bytes(r.payload[..8].try_into().unwrap()));
            }
            Ok(())
        }
    }

    fn cfg(dir: &std::path::Path) -> MicroBatchConfig {
        MicroBatchConfig {
            checkpoint_dir: dir.to_path_buf(),
            progress: ProgressConfig { async_progress: false, ..Default::default() },
            max_batch: 10,
            idle_timeout: None,
            latency_warm_up: Duration::ZERO,
        }
    }

    #[test]
    fn a_failed_batch_is_replayed_from_its_offset_entry_and_nothing_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let stop = AtomicBool::new(false);
        let mut sink = Collect { seen: vec![], batches: 0, fail_at: Some(4) };
        assert!(run(&mut Counter { next: 0, end: 100 }, &mut sink, &cfg(dir.path()), &stop).is_err());
        assert_eq!(sink.seen, (0..30).collect::<Vec<_>>(), "three batches delivered before the failure");
        // The fourth batch's offset entry was written, its commit was not: the restart replays it.
        let mut again = Collect { seen: vec![], batches: 0, fail_at: None };
        let r = run(&mut Counter { next: 0, end: 100 }, &mut again, &cfg(dir.path()), &stop).unwrap();
        assert_eq!(r.start, "replaying uncommitted batch 3");
        assert_eq!(again.seen, (30..100).collect::<Vec<_>>());
        assert_eq!((r.records, r.batches), (70, 7));
        // A third run has nothing left and says where it resumed.
        let mut done = Collect { seen: vec![], batches: 0, fail_at: None };
        let r = run(&mut Counter { next: 0, end: 100 }, &mut done, &cfg(dir.path()), &stop).unwrap();
        assert!(done.seen.is_empty() && r.start == "resumed after batch 9", "{}", r.start);
    }

    #[test]
    fn warm_up_batches_are_delivered_but_left_out_of_the_latency() {
        let dir = tempfile::tempdir().unwrap();
        let stop = AtomicBool::new(false);
        let mut sink = Collect { seen: vec![], batches: 0, fail_at: None };
        let c = MicroBatchConfig { latency_warm_up: Duration::from_secs(3600), ..cfg(dir.path()) };
        let r = run(&mut Counter { next: 0, end: 50 }, &mut sink, &c, &stop).unwrap();
        assert_eq!((r.records, sink.seen.len()), (50, 50));
        assert_eq!(r.latency_ms, [0.0; 4], "all in the warm-up");
        let dir = tempfile::tempdir().unwrap();
        let r = run(
            &mut Counter { next: 0, end: 50 },
            &mut Collect { seen: vec![], batches: 0, fail_at: None },
            &cfg(dir.path()),
            &stop,
        )
        .unwrap();
        assert!(r.latency_ms[3] > 0.0, "without a warm-up every batch counts");
    }
}
