//! Per-stage latency histograms and record counters for a job.
//!
//! Stages (names as the dashboards and Prometheus metrics will use them):
//! - `read`: Kafka record timestamp → the record is in the runner's hands.
//! - `transform`: parse + map + encode of one record (its batch's mean per record).
//! - `write`: one batch's durable log write plus its appends, until acknowledged.
//! - `end_to_end`: Kafka record timestamp → its batch is acknowledged by BigQuery.
//!
//! Shards record into their own [`StageStats`] and merge into the job's
//! [`JobStats`] once per batch, so the hot path takes no lock.
//!
//! kafka-to-gcs uses the same stages, except `transform`, with `write` a window's
//! commit and `end_to_end` ending when a record's file is published (see
//! `kafka_to_gcs::open_windows`). The data watermark age and system latency of both
//! templates are [`watermark_age_s`] and [`system_lag_s`].

use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// The stages of a kafka-to-bq record's path, in display order.
///
/// ```
/// use flexrun::stats::{Stage, StageStats};
/// let mut s = StageStats::default();
/// s.record(Stage::Transform, 250);
/// assert_eq!(Stage::Transform.as_str(), "transform");
/// assert_eq!(Stage::ALL.len(), 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Kafka record timestamp → the record is in the runner's hands.
    Read,
    /// Parse + map + encode of one record (each record of a batch counts the batch's mean).
    Transform,
    /// One batch's durable log write plus its appends, until acknowledged.
    Write,
    /// Kafka record timestamp → its batch is acknowledged by BigQuery.
    EndToEnd,
}

impl Stage {
    /// Every stage, in display order.
    pub const ALL: [Stage; 4] = [Stage::Read, Stage::Transform, Stage::Write, Stage::EndToEnd];

    /// The name dashboards and Prometheus labels use.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Read => "read",
            Stage::Transform => "transform",
            Stage::Write => "write",
            Stage::EndToEnd => "end_to_end",
        }
    }
}

/// Longest latency a histogram holds: one day, in microseconds.
pub const MAX_LATENCY_US: u64 = 86_400_000_000;

/// The one latency histogram shape: microseconds from 1 µs to one day, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

/// Quantile `q` of a microsecond histogram, in milliseconds (0 when empty).
pub fn quantile_ms(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.value_at_quantile(q) as f64 / 1000.0
    }
}

/// Record `micros` into `h`, clamped into its range.
pub fn record_us(h: &mut Histogram<u64>, micros: u64) {
    let _ = h.record(micros.clamp(1, MAX_LATENCY_US));
}

/// Latencies of the stages, in microseconds, keyed by [`Stage`].
#[derive(Debug, Clone)]
pub struct StageStats {
    hists: [Histogram<u64>; 4],
}

impl Default for StageStats {
    fn default() -> Self {
        StageStats { hists: Stage::ALL.map(|_| histogram()) }
    }
}

impl StageStats {
    /// Record `micros` for `stage`, `count` times.
    pub fn record_n(&mut self, stage: Stage, micros: u64, count: u64) {
        let _ = self.hists[stage as usize].record_n(micros.clamp(1, MAX_LATENCY_US), count);
    }

    /// Record one value.
    pub fn record(&mut self, stage: Stage, micros: u64) {
        self.record_n(stage, micros, 1);
    }

    /// Percentiles of every stage (empty ones included), then clear them.
    pub fn take(&mut self) -> Vec<StageSummary> {
        let out = summarize(self);
        for h in self.hists.iter_mut() {
            h.reset();
        }
        out
    }

    /// Add another shard's latencies and clear them there.
    pub fn drain_into(&mut self, into: &mut StageStats) {
        for (a, b) in into.hists.iter_mut().zip(self.hists.iter_mut()) {
            let _ = a.add(&*b);
            b.reset();
        }
    }
}

/// One batch's stage latencies as values, recorded into the job's histograms in one go
/// by [`JobStats::add_batch`].
///
/// Recording a value here is a push (equal neighbours are counted together); a shard
/// that kept its own histograms had to add all of their ~27,000 buckets into the job's
/// twice per batch, 3.5% of a job's CPU (issue 29, step 6).
///
/// ```
/// use flexrun::stats::{Stage, StageSamples};
/// let mut s = StageSamples::default();
/// s.record(Stage::Read, 2_000);
/// s.record(Stage::Read, 2_000);
/// s.record_n(Stage::Transform, 7, 3);
/// let read = s.take().into_iter().find(|x| x.stage == "read").unwrap();
/// assert_eq!(read.count, 2);
/// assert!(s.is_empty());
/// ```
#[derive(Debug, Default)]
pub struct StageSamples {
    values: Vec<(Stage, u64, u64)>,
}

impl StageSamples {
    /// Record `micros` for `stage`, `count` times.
    pub fn record_n(&mut self, stage: Stage, micros: u64, count: u64) {
        match self.values.last_mut() {
            Some((s, m, n)) if *s == stage && *m == micros => *n += count,
            _ => self.values.push((stage, micros, count)),
        }
    }

    /// Record one value.
    pub fn record(&mut self, stage: Stage, micros: u64) {
        self.record_n(stage, micros, 1);
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Record every value into each of `into`, then clear (the buffer is kept).
    pub fn drain_into(&mut self, into: &mut [&mut StageStats]) {
        for (stage, micros, count) in self.values.drain(..) {
            for s in into.iter_mut() {
                s.record_n(stage, micros, count);
            }
        }
    }

    /// Percentiles of every stage, then clear.
    pub fn take(&mut self) -> Vec<StageSummary> {
        let mut s = StageStats::default();
        self.drain_into(&mut [&mut s]);
        s.take()
    }
}

/// Counters and latencies of a whole job.
#[derive(Debug, Default)]
pub struct JobStats {
    inner: Mutex<Inner>,
    first_read: OnceLock<Instant>,
    /// Where each located exception is also appended as it is found ([`JobStats::journal_to`]).
    journal: OnceLock<std::path::PathBuf>,
}

/// The file in a job's checkpoint directory that every located exception to
/// exactly-once is appended to as it is decided (one JSON object a line, fsynced): a run
/// killed after it found records lost or possibly duplicated still leaves the record,
/// which its summary would not.
pub const EXCEPTIONS_FILE: &str = "exceptions.jsonl";

/// One line of [`EXCEPTIONS_FILE`].
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ExceptionLine {
    /// `lost` or `possibly_duplicated`.
    pub kind: String,
    /// The range.
    #[serde(flatten)]
    pub range: LostRange,
}

#[derive(Debug, Default)]
struct Inner {
    stages: StageStats,
    window: StageStats,
    read: u64,
    written: u64,
    dead_lettered: u64,
    udf_dropped: u64,
    bad_dropped: u64,
    cdc_skipped: u64,
    bytes_read: u64,
    by_class: BTreeMap<String, u64>,
    batches: u64,
    replayed_batches: u64,
    already_existed: u64,
    last_commit: Option<Instant>,
    /// Process CPU seconds (user + system) when the last batch was committed.
    cpu_at_last_commit: f64,
    reliability: Reliability,
}

/// What went wrong on the way and how it was handled: the events that the
/// exactly-once guarantee and docs/guide/guarantees.md's list of remaining cases talk about.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Reliability {
    /// Transient BigQuery errors that were retried, by status code.
    pub retries: BTreeMap<String, u64>,
    /// Write streams found gone (finalized, missing) and replaced by new ones.
    pub streams_replaced: u64,
    /// Replayed batches that had to go to a new stream because their logged stream
    /// was gone: if their first attempt had landed, their rows are now duplicated.
    pub batches_possibly_duplicated: u64,
    /// Kafka offsets deleted by retention before the job read them (lost).
    pub offsets_lost_to_retention: u64,
    /// Partitions found after the job started (they start at their earliest offset).
    pub partitions_discovered: u64,
    /// Partitions found past the end of their log and moved to it
    /// (`offsetGapPolicy=SKIP`; see `kafka::gaps`).
    pub partitions_past_end: u64,
    /// At-least-once: messages a restart re-reads that had been sent after the last
    /// commit, so may be written twice (an upper bound; see `kafka_to_bq::run::sent`).
    pub messages_possibly_duplicated: u64,
    /// Changes the job made to its table's schema (`schemaUpdateOptions`): columns
    /// added and columns relaxed to NULLABLE.
    pub schema_changes: u64,
    /// Schema changes BigQuery refused for good (a 4xx other than 429 from
    /// `tables.patch`): the records that asked for them went to the dead-letter table.
    pub schema_changes_refused: u64,
    /// Topics found deleted and created again since the job last ran, whose new log was
    /// read from its earliest offset (`offsetGapPolicy=SKIP`).
    pub topics_recreated: u64,
    /// Partitions found truncated under the job's position (an unclean leader election,
    /// KIP-320) and read on from where the log diverges (`offsetGapPolicy=SKIP`).
    pub partitions_truncated: u64,
    /// Uncommitted batches that could not be read again as logged, settled by their
    /// streams' row counts (`offsetGapPolicy=SKIP`).
    pub batches_abandoned: u64,
    /// Where records were lost, each range named (at most [`MAX_RANGES`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<LostRange>,
    /// Where records may have been written twice, each range named (at most [`MAX_RANGES`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub possibly_duplicated: Vec<LostRange>,
}

/// The most ranges [`Reliability::lost`] and [`Reliability::possibly_duplicated`] keep.
pub const MAX_RANGES: usize = 1000;

/// A range of one partition's offsets that an exception to exactly-once touched.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct LostRange {
    /// The topic.
    pub topic: String,
    /// The log it was in: the topic's id then (None: the broker gave none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_id: Option<String>,
    /// The partition.
    pub partition: i32,
    /// The first offset.
    pub from: i64,
    /// The offset after the last (None: to the end of a log that is gone).
    pub to: Option<i64>,
    /// Why.
    pub why: String,
    /// For a topic recreated: the topic id found in its place. Logs the topic had in
    /// between, created and deleted while the job was not running, were never seen by
    /// it: their records are lost too, and no job can count them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_by: Option<String>,
}

/// Append `lines` to `path` as JSON lines and fsync.
fn append_lines(path: &std::path::Path, lines: &[ExceptionLine]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    let mut buf = Vec::new();
    for l in lines {
        serde_json::to_writer(&mut buf, l)?;
        buf.push(b'\n');
    }
    f.write_all(&buf)?;
    f.sync_data()
}

/// The exceptions recorded in `dir` (none when it has no [`EXCEPTIONS_FILE`]); a torn
/// last line is left out.
pub fn read_exceptions(dir: &std::path::Path) -> std::io::Result<Vec<ExceptionLine>> {
    match std::fs::read_to_string(dir.join(EXCEPTIONS_FILE)) {
        Ok(text) => Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

impl Reliability {
    /// Name a range of lost records.
    pub fn note_lost(&mut self, r: LostRange) {
        if self.lost.len() < MAX_RANGES {
            self.lost.push(r);
        }
    }

    /// Name a range of records that may have been written twice.
    pub fn note_possibly_duplicated(&mut self, r: LostRange) {
        if self.possibly_duplicated.len() < MAX_RANGES {
            self.possibly_duplicated.push(r);
        }
    }
}

impl Reliability {
    /// Every counter as (name, value), for `/metrics`.
    pub fn events(&self) -> BTreeMap<String, u64> {
        let mut m: BTreeMap<String, u64> = self.retries.iter().map(|(k, v)| (format!("retry_{k}"), *v)).collect();
        m.insert("streams_replaced".into(), self.streams_replaced);
        m.insert("batches_possibly_duplicated".into(), self.batches_possibly_duplicated);
        m.insert("offsets_lost_to_retention".into(), self.offsets_lost_to_retention);
        m.insert("partitions_discovered".into(), self.partitions_discovered);
        m.insert("partitions_past_end".into(), self.partitions_past_end);
        m.insert("messages_possibly_duplicated".into(), self.messages_possibly_duplicated);
        m.insert("schema_changes".into(), self.schema_changes);
        m.insert("schema_changes_refused".into(), self.schema_changes_refused);
        m.insert("topics_recreated".into(), self.topics_recreated);
        m.insert("partitions_truncated".into(), self.partitions_truncated);
        m.insert("batches_abandoned".into(), self.batches_abandoned);
        m
    }
}

/// Counts that a shard adds after one batch.
#[derive(Debug, Default, Clone)]
pub struct BatchCounts {
    /// Messages read.
    pub read: u64,
    /// Value bytes read.
    pub bytes: u64,
    /// Rows appended to the table.
    pub written: u64,
    /// Rows appended to the dead-letter table.
    pub dead_lettered: u64,
    /// Messages the UDF dropped (it returned null, undefined or "").
    pub udf_dropped: u64,
    /// Bad records logged and dropped (`badRecordPolicy=LOG_AND_DROP`, no dead-letter table).
    pub bad_dropped: u64,
    /// CDC tombstones skipped: no `cdcSequenceField` in their key.
    pub cdc_skipped: u64,
    /// Dead-letter rows by error class.
    pub by_class: BTreeMap<&'static str, u64>,
    /// Whether the batch was a recovery replay.
    pub replayed: bool,
    /// Appends answered ALREADY_EXISTS (rows that were already there).
    pub already_existed: u64,
}

/// Percentiles of one stage, in milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StageSummary {
    /// Stage name.
    pub stage: String,
    /// Number of samples.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// What a job did, as printed at the end and written with `--summary-json`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Messages read from Kafka.
    pub messages_read: u64,
    /// Rows appended to the table.
    pub rows_written: u64,
    /// Rows appended to the dead-letter table.
    pub dead_lettered: u64,
    /// Messages the UDF dropped (neither rows nor dead letters, as in Google's template).
    pub udf_dropped: u64,
    /// Bad records logged and dropped for want of a dead-letter table
    /// (`badRecordPolicy=LOG_AND_DROP`).
    pub bad_records_dropped: u64,
    /// CDC records that are no change, skipped: tombstones whose key lacks
    /// `cdcSequenceField` (Debezium writes one after each delete event, which carries the
    /// delete), and with `cdcFormat=DEBEZIUM` every tombstone, heartbeat, schema-change
    /// event, transaction marker and logical decoding message.
    pub cdc_skipped: u64,
    /// Message value bytes read.
    pub bytes_read: u64,
    /// Dead-letter rows by error class.
    pub dead_letter_by_class: BTreeMap<String, u64>,
    /// Batches committed.
    pub batches: u64,
    /// Batches replayed after a restart.
    pub replayed_batches: u64,
    /// Appends answered ALREADY_EXISTS during replays.
    pub appends_already_existed: u64,
    /// Seconds from the first message read to the last batch committed.
    pub active_s: f64,
    /// This process's user CPU seconds (getrusage).
    pub cpu_user_s: f64,
    /// This process's system CPU seconds (getrusage).
    pub cpu_sys_s: f64,
    /// This process's CPU seconds (user + system) up to its last batch commit: the run
    /// without the idle wait before it drains, which a reader that stops at the end of
    /// the topic does not have.
    pub cpu_to_last_commit_s: f64,
    /// The process's peak resident set so far, bytes (getrusage's `ru_maxrss`).
    pub peak_rss_bytes: u64,
    /// Per-stage latency.
    pub stages: Vec<StageSummary>,
    /// Retries, lost streams, retention gaps.
    pub reliability: Reliability,
}

/// User and system CPU seconds of this process so far.
pub fn process_cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// This process's peak resident set so far, bytes (getrusage's `ru_maxrss`, KiB on Linux).
pub fn peak_rss_bytes() -> u64 {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    ru.ru_maxrss.max(0) as u64 * 1024
}

/// This process's memory: resident set size (`/proc/self/statm`) and heap in use
/// (glibc's `mallinfo2`: bytes in allocated chunks, small and mmapped), in bytes.
pub fn process_memory() -> (u64, u64) {
    let page = 4096u64;
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page);
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let mi = unsafe { libc::mallinfo2() };
    (rss, (mi.uordblks + mi.hblkhd) as u64)
}

impl JobStats {
    /// Note that a message was read (the first call starts the active window).
    pub fn mark_read(&self) {
        self.first_read.get_or_init(Instant::now);
    }

    /// Merge one batch's counts and latencies.
    pub fn add_batch(&self, counts: &BatchCounts, stages: &mut StageSamples) {
        let mut g = self.inner.lock().expect("stats lock");
        g.read += counts.read;
        g.bytes_read += counts.bytes;
        g.written += counts.written;
        g.dead_lettered += counts.dead_lettered;
        g.udf_dropped += counts.udf_dropped;
        g.bad_dropped += counts.bad_dropped;
        g.cdc_skipped += counts.cdc_skipped;
        for (k, v) in &counts.by_class {
            *g.by_class.entry(k.to_string()).or_default() += v;
        }
        g.batches += 1;
        g.replayed_batches += counts.replayed as u64;
        g.already_existed += counts.already_existed;
        g.last_commit = Some(Instant::now());
        let (user, sys) = process_cpu_seconds();
        g.cpu_at_last_commit = user + sys;
        let Inner { window, stages: total, .. } = &mut *g;
        stages.drain_into(&mut [window, total]);
    }

    /// Update the reliability counters.
    pub fn note(&self, f: impl FnOnce(&mut Reliability)) {
        let mut g = self.inner.lock().expect("stats lock");
        let (lost, dup) = (g.reliability.lost.len(), g.reliability.possibly_duplicated.len());
        f(&mut g.reliability);
        let Some(path) = self.journal.get() else { return };
        let r = &g.reliability;
        let new: Vec<ExceptionLine> = (r.lost[lost..].iter().map(|x| ("lost", x)))
            .chain(r.possibly_duplicated[dup..].iter().map(|x| ("possibly_duplicated", x)))
            .map(|(kind, range)| ExceptionLine { kind: kind.into(), range: range.clone() })
            .collect();
        if !new.is_empty() {
            if let Err(e) = append_lines(path, &new) {
                tracing::error!(path = %path.display(), error = %e, "could not record exceptions to exactly-once in the checkpoint (they are in the log and the summary)");
            }
        }
    }

    /// Append every located exception from now on to `dir`'s [`EXCEPTIONS_FILE`].
    pub fn journal_to(&self, dir: &std::path::Path) {
        let _ = self.journal.set(dir.join(EXCEPTIONS_FILE));
    }

    /// Count one retried transient error.
    pub fn count_retry(&self, code: &str) {
        self.note(|r| *r.retries.entry(code.to_string()).or_default() += 1);
    }

    /// Stage percentiles since the last call (for dashboards), then reset.
    pub fn take_window(&self) -> Vec<StageSummary> {
        let mut g = self.inner.lock().expect("stats lock");
        let out = summarize(&g.window);
        for h in g.window.hists.iter_mut() {
            h.reset();
        }
        out
    }

    /// A snapshot of everything so far.
    pub fn summary(&self) -> Summary {
        let g = self.inner.lock().expect("stats lock");
        let stages = summarize(&g.stages);
        let active_s = match (self.first_read.get(), g.last_commit) {
            (Some(a), Some(b)) if b > *a => (b - *a).as_secs_f64(),
            _ => 0.0,
        };
        let (cpu_user_s, cpu_sys_s) = process_cpu_seconds();
        Summary {
            active_s,
            cpu_user_s,
            cpu_sys_s,
            cpu_to_last_commit_s: g.cpu_at_last_commit,
            peak_rss_bytes: peak_rss_bytes(),
            messages_read: g.read,
            rows_written: g.written,
            dead_lettered: g.dead_lettered,
            udf_dropped: g.udf_dropped,
            bad_records_dropped: g.bad_dropped,
            cdc_skipped: g.cdc_skipped,
            bytes_read: g.bytes_read,
            dead_letter_by_class: g.by_class.clone(),
            batches: g.batches,
            replayed_batches: g.replayed_batches,
            appends_already_existed: g.already_existed,
            stages,
            reliability: g.reliability.clone(),
        }
    }
}

fn summarize(st: &StageStats) -> Vec<StageSummary> {
    Stage::ALL
        .iter()
        .zip(st.hists.iter())
        .map(|(stage, h)| {
            let q = |p: f64| quantile_ms(h, p);
            StageSummary {
                stage: stage.as_str().to_string(),
                count: h.len(),
                p50_ms: q(0.5),
                p95_ms: q(0.95),
                p99_ms: q(0.99),
                max_ms: if h.is_empty() { 0.0 } else { h.max() as f64 / 1000.0 },
            }
        })
        .collect()
}

impl Reliability {
    /// Add `o`'s counts to these.
    pub fn add(&mut self, o: &Reliability) {
        for (k, v) in &o.retries {
            *self.retries.entry(k.clone()).or_default() += v;
        }
        self.streams_replaced += o.streams_replaced;
        self.batches_possibly_duplicated += o.batches_possibly_duplicated;
        self.offsets_lost_to_retention += o.offsets_lost_to_retention;
        self.partitions_discovered += o.partitions_discovered;
        self.partitions_past_end += o.partitions_past_end;
        self.messages_possibly_duplicated += o.messages_possibly_duplicated;
        self.schema_changes += o.schema_changes;
        self.schema_changes_refused += o.schema_changes_refused;
        self.topics_recreated += o.topics_recreated;
        self.partitions_truncated += o.partitions_truncated;
        self.batches_abandoned += o.batches_abandoned;
        for r in &o.lost {
            self.note_lost(r.clone());
        }
        for r in &o.possibly_duplicated {
            self.note_possibly_duplicated(r.clone());
        }
    }
}

impl Summary {
    /// The summaries of pipelines that ran side by side (a job of several topics) as one:
    /// counts added, active time and CPU the longest/the process's (they share it), and
    /// each stage's percentiles the largest of any pipeline (an upper bound: percentiles
    /// do not add).
    pub fn merged(parts: &[Summary]) -> Option<Summary> {
        let mut out = parts.first()?.clone();
        for p in &parts[1..] {
            out.messages_read += p.messages_read;
            out.rows_written += p.rows_written;
            out.dead_lettered += p.dead_lettered;
            out.udf_dropped += p.udf_dropped;
            out.bad_records_dropped += p.bad_records_dropped;
            out.cdc_skipped += p.cdc_skipped;
            out.bytes_read += p.bytes_read;
            for (k, v) in &p.dead_letter_by_class {
                *out.dead_letter_by_class.entry(k.clone()).or_default() += v;
            }
            out.batches += p.batches;
            out.replayed_batches += p.replayed_batches;
            out.appends_already_existed += p.appends_already_existed;
            out.active_s = out.active_s.max(p.active_s);
            out.cpu_user_s = out.cpu_user_s.max(p.cpu_user_s);
            out.cpu_sys_s = out.cpu_sys_s.max(p.cpu_sys_s);
            out.cpu_to_last_commit_s = out.cpu_to_last_commit_s.max(p.cpu_to_last_commit_s);
            out.peak_rss_bytes = out.peak_rss_bytes.max(p.peak_rss_bytes);
            for (a, b) in out.stages.iter_mut().zip(&p.stages) {
                a.count += b.count;
                (a.p50_ms, a.p95_ms) = (a.p50_ms.max(b.p50_ms), a.p95_ms.max(b.p95_ms));
                (a.p99_ms, a.max_ms) = (a.p99_ms.max(b.p99_ms), a.max_ms.max(b.max_ms));
            }
            out.reliability.add(&p.reliability);
        }
        Some(out)
    }

    /// The human-readable table printed when a job ends.
    pub fn render(&self, elapsed_s: f64) -> String {
        let mut s = String::new();
        let rate = if elapsed_s > 0.0 { self.messages_read as f64 / elapsed_s } else { 0.0 };
        s.push_str(&format!(
            "messages read {}  rows written {}  dead-lettered {}  ({:.1} s, {:.0} msg/s, {:.2} MB/s)\n",
            self.messages_read,
            self.rows_written,
            self.dead_lettered,
            elapsed_s,
            rate,
            if elapsed_s > 0.0 { self.bytes_read as f64 / elapsed_s / 1e6 } else { 0.0 }
        ));
        if self.active_s > 0.0 {
            s.push_str(&format!(
                "active {:.2} s (first read to last commit): {:.0} msg/s, {:.2} MB/s; CPU {:.2} s user + {:.2} s system = {:.2} CPU-s/GB\n",
                self.active_s,
                self.messages_read as f64 / self.active_s,
                self.bytes_read as f64 / self.active_s / 1e6,
                self.cpu_user_s,
                self.cpu_sys_s,
                if self.bytes_read > 0 { (self.cpu_user_s + self.cpu_sys_s) / (self.bytes_read as f64 / 1e9) } else { 0.0 }
            ));
        }
        let reconciles = self.messages_read
            == self.rows_written + self.dead_lettered + self.udf_dropped + self.bad_records_dropped + self.cdc_skipped;
        let mut what = String::from("read = written + dead-lettered");
        let mut dropped = String::new();
        for (n, name) in [
            (self.udf_dropped, "dropped by the UDF"),
            (self.bad_records_dropped, "bad records dropped"),
            (self.cdc_skipped, "CDC records skipped (tombstones, heartbeats, schema changes)"),
        ] {
            if n > 0 {
                what.push_str(&format!(" + {name}"));
                dropped.push_str(&format!(" + {n}"));
            }
        }
        s.push_str(&format!(
            "reconciliation: {what}: {}\n",
            if reconciles {
                "yes".to_string()
            } else {
                format!("NO ({} != {} + {}{dropped})", self.messages_read, self.rows_written, self.dead_lettered)
            }
        ));
        for (k, v) in &self.dead_letter_by_class {
            s.push_str(&format!("  dead-letter {k}: {v}\n"));
        }
        s.push_str(&format!(
            "batches {} (replayed after restart {}, appends already present {}); peak RSS {:.0} MiB\n",
            self.batches,
            self.replayed_batches,
            self.appends_already_existed,
            self.peak_rss_bytes as f64 / (1 << 20) as f64
        ));
        let r = &self.reliability;
        if r != &Reliability::default() {
            let retries: u64 = r.retries.values().sum();
            s.push_str(&format!(
                "reliability: {retries} retried errors {:?}, {} streams replaced, {} batches possibly duplicated, {} messages possibly duplicated, {} offsets lost to retention, {} partitions past their end, {} partitions truncated, {} topics recreated, {} batches abandoned, {} partitions discovered\n",
                r.retries, r.streams_replaced, r.batches_possibly_duplicated, r.messages_possibly_duplicated, r.offsets_lost_to_retention, r.partitions_past_end, r.partitions_truncated, r.topics_recreated, r.batches_abandoned, r.partitions_discovered
            ));
            for l in &r.lost {
                s.push_str(&format!(
                    "  lost: {}/{} offsets {}..{} ({})\n",
                    l.topic,
                    l.partition,
                    l.from,
                    l.to.map_or("end".into(), |t| t.to_string()),
                    l.why
                ));
            }
        }
        s.push_str(&format!(
            "{:<12} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
            "stage", "count", "p50 ms", "p95 ms", "p99 ms", "max ms"
        ));
        for st in &self.stages {
            s.push_str(&format!(
                "{:<12} {:>10} {:>10.2} {:>10.2} {:>10.2} {:>10.2}\n",
                st.stage, st.count, st.p50_ms, st.p95_ms, st.p99_ms, st.max_ms
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_merge_into_percentiles_and_counts() {
        let job = JobStats::default();
        let mut st = StageSamples::default();
        for v in 1..=100u64 {
            st.record(Stage::EndToEnd, v * 1000);
        }
        let counts = BatchCounts {
            read: 10,
            written: 8,
            dead_lettered: 2,
            by_class: BTreeMap::from([("invalid_json", 2)]),
            ..Default::default()
        };
        job.add_batch(&counts, &mut st);
        let s = job.summary();
        assert_eq!((s.messages_read, s.rows_written, s.dead_lettered), (10, 8, 2));
        let e2e = &s.stages[3];
        assert_eq!(e2e.count, 100);
        assert!((e2e.p50_ms - 50.0).abs() < 0.5, "{e2e:?}");
        assert!((e2e.p99_ms - 99.0).abs() < 0.5, "{e2e:?}");
        // The shard's samples were drained.
        assert!(st.is_empty());
        job.add_batch(&BatchCounts::default(), &mut st);
        assert_eq!(job.summary().stages[3].count, 100);
        assert!(s.render(1.0).contains("reconciliation: read = written + dead-lettered: yes"));
        // CPU to the last commit is read at the commit, so it never exceeds the total.
        let later = job.summary();
        assert!(later.cpu_to_last_commit_s > 0.0, "{later:?}");
        assert!(later.cpu_to_last_commit_s <= later.cpu_user_s + later.cpu_sys_s + 1e-6, "{later:?}");
    }
}

/// Dataflow's data watermark age, seconds: how far behind now the oldest partition
/// with messages waiting is. `times` holds each partition's event time (ms) up to which
/// the job has its records (kafka-to-bq: committed; kafka-to-gcs: read into a window),
/// `backlog` its waiting messages. None while a backlogged partition has no time yet.
pub fn watermark_age_s(times: &BTreeMap<i32, i64>, backlog: &BTreeMap<i32, i64>, now_ms: i64) -> Option<f64> {
    let mut age = 0.0f64;
    for (p, n) in backlog {
        if *n > 0 {
            age = age.max((now_ms - *times.get(p)?).max(0) as f64 / 1000.0);
        }
    }
    Some(age)
}

/// Dataflow's system latency (`job/system_lag`: "the longest time an item has been
/// processing or waiting"), seconds: the larger of the data watermark age (the oldest
/// waiting message is at most that old) and the interval's end-to-end p99 (messages
/// that were in processing, from their Kafka timestamp to their commit).
pub fn system_lag_s(watermark_age_s: f64, end_to_end_p99_ms: Option<f64>) -> f64 {
    watermark_age_s.max(end_to_end_p99_ms.unwrap_or(0.0) / 1000.0)
}

#[cfg(test)]
mod watermark_tests {
    use super::*;

    #[test]
    fn the_age_is_the_oldest_backlogged_partitions_and_zero_when_nothing_waits() {
        let times: BTreeMap<i32, i64> = [(0, 10_000), (1, 4_000), (2, 1_000)].into_iter().collect();
        let backlog: BTreeMap<i32, i64> = [(0, 5), (1, 3), (2, 0)].into_iter().collect();
        // Partition 2 is the oldest but has nothing waiting: it does not hold the watermark.
        assert_eq!(watermark_age_s(&times, &backlog, 12_000), Some(8.0));
        let idle: BTreeMap<i32, i64> = [(0, 0), (1, 0)].into_iter().collect();
        assert_eq!(watermark_age_s(&times, &idle, 12_000), Some(0.0));
        let unknown: BTreeMap<i32, i64> = [(7, 1)].into_iter().collect();
        assert_eq!(watermark_age_s(&times, &unknown, 12_000), None, "nothing committed from it yet");
    }

    #[test]
    fn system_lag_counts_items_in_processing_when_nothing_waits() {
        assert_eq!(system_lag_s(0.0, Some(2_500.0)), 2.5, "no backlog, but items took 2.5 s to commit");
        assert_eq!(system_lag_s(8.0, Some(2_500.0)), 8.0, "a waiting item is older");
        assert_eq!(system_lag_s(0.0, None), 0.0);
    }
}
