//! `flexrun calibrate`: how much one core of this machine carries through kafka-to-bq's
//! processing path, written as a baseline file that `flexrun estimate` and
//! `flexrun simulate` read.
//!
//! The path measured is the runner's own, batch by batch as a shard runs it, through the
//! same functions: map every message onto the table's schema as a protobuf row, timed
//! per batch, each row's CRC taken as it is written
//! ([`crate::kafka_to_bq::run::batch::map_values`]), digest the rows from those CRCs
//! ([`crate::kafka_to_bq::run::batch::crcs_digest`]), split them into requests under the
//! 10 MB limit and build each `AppendRowsRequest`
//! ([`crate::bigquery::write::split_requests`], [`crate::bigquery::framed::frame`]),
//! whose rows are a slice of the batch's buffer as the writer sends them, and, for
//! exactly-once, write the batch's offset-log and commit-log
//! entries ([`crate::progress::ShardLog`], purged inline so their CPU counts). Only the
//! Kafka read and the network send are left out.
//! Only this thread's CPU time is counted, so the figure is per core at 100% CPU,
//! whatever else the machine is doing (noise still slows the core itself).
//!
//! With the seed's shape it measures two message sizes and splits the cost into a part
//! per message and a part per byte, which lets `simulate` price other sizes.

use crate::bigquery::framed::frame;
use crate::bigquery::schema::Schema;
use crate::bigquery::write::{request_row_budget, split_requests, MAX_REQUEST_BYTES};
use crate::kafka_to_bq::map::transform::Mapper;
use crate::kafka_to_bq::run::batch::{crcs_digest, map_values, RowPool};
use crate::progress::{CommitEntry, DigestKind, OffsetEntry, Purge, ShardLog, StreamSlot};
use crate::stats::{BatchCounts, JobStats, StageSamples};
use anyhow::{Context, Result};
use flexrun_estimator::units::MIB;
use flexrun_estimator::{Baseline, BaselineFile, Mode};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// Rows per batch (the runner's `--batch-rows` default).
pub const BATCH_ROWS: usize = 10_000;
/// Bytes per batch (the runner's `--batch-bytes` default, Beam's 2 MiB).
pub const BATCH_BYTES: usize = 2 * 1024 * 1024;
/// Distinct messages generated per measurement (cycled).
pub const DISTINCT_MESSAGES: usize = 20_000;

/// Messages to measure and the schema they map onto.
pub struct Shape {
    /// What it is, for the report.
    pub name: String,
    /// The table schema.
    pub schema: Schema,
    /// Sample messages.
    pub messages: Vec<Vec<u8>>,
}

impl Shape {
    /// Google's benchmark shape: `{"logStreamId": int, "message": N alphanumerics}`.
    pub fn seed(message_chars: usize) -> Shape {
        let schema = Schema::from_json(&serde_json::json!([
            {"name": "logStreamId", "type": "INTEGER", "mode": "NULLABLE"},
            {"name": "message", "type": "STRING", "mode": "NULLABLE"}
        ]))
        .expect("seed schema");
        let messages =
            (0..DISTINCT_MESSAGES as u64).map(|i| crate::local::seed_shape_message(i, 7, message_chars)).collect();
        Shape { name: format!("seed shape ({message_chars} characters of text)"), schema, messages }
    }

    /// Messages from a JSON Data Generator schema, mapped onto a BigQuery JSON schema.
    pub fn generator(name: &str, template: &str, schema: Schema) -> Result<Shape> {
        let mut g = crate::data_generator::Generator::new(template, 7).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let messages = (0..DISTINCT_MESSAGES)
            .map(|_| g.next_string().map(String::into_bytes))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        Ok(Shape { name: name.to_string(), schema, messages })
    }

    /// Mean message size, bytes.
    pub fn mean_bytes(&self) -> f64 {
        self.messages.iter().map(|m| m.len() as f64).sum::<f64>() / self.messages.len().max(1) as f64
    }
}

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    /// Delivery mode.
    pub mode: Mode,
    /// Which shape.
    pub shape: String,
    /// Mean message size, bytes.
    pub message_bytes: f64,
    /// Messages processed.
    pub messages: u64,
    /// Rows the mapping refused (should be 0 for a matching schema).
    pub rejected: u64,
    /// This thread's CPU seconds.
    pub cpu_s: f64,
    /// Wall seconds (includes fsync waits in exactly-once).
    pub wall_s: f64,
    /// Messages per CPU-second of one core.
    pub messages_per_core_s: f64,
    /// MiB per CPU-second of one core.
    pub mib_per_core_s: f64,
}

fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes into the struct we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Run the processing path for `mode` over `shape` for about `seconds` of CPU time.
/// `progress` gets the fraction done.
pub fn measure(mode: Mode, shape: &Shape, seconds: f64, progress: &mut dyn FnMut(f64)) -> Result<Measurement> {
    let mapper = Mapper::new(shape.schema.clone(), crate::kafka_to_bq::map::transform::DEFAULT_MAX_ROW_BYTES);
    let descriptor = crate::bigquery::proto::descriptor(&shape.schema, "Row");
    let dir = tempfile::tempdir().context("creating a scratch directory for the progress logs")?;
    let mut log = match mode {
        Mode::ExactlyOnce => Some(ShardLog::open_with(dir.path(), Purge::Sync)?.with_commits_synced_on_rotation()),
        Mode::AtLeastOnce => None,
    };
    let (cpu0, wall0) = (thread_cpu_s(), Instant::now());
    let (mut messages, mut rejected, mut bytes, mut batch_id, mut next) = (0u64, 0u64, 0u64, 0u64, 0usize);
    let mut offset = 0i64;
    let budget = request_row_budget(MAX_REQUEST_BYTES);
    let mut stages = StageSamples::default();
    let stats = JobStats::default();
    let mut pool = RowPool::default();
    while thread_cpu_s() - cpu0 < seconds {
        // Cut a batch as a shard does: until it has BATCH_ROWS messages or BATCH_BYTES.
        let first = messages;
        let (mut batch, mut batch_bytes) = (Vec::with_capacity(BATCH_ROWS), 0usize);
        while batch.len() < BATCH_ROWS && batch_bytes < BATCH_BYTES {
            let m = shape.messages[next % shape.messages.len()].as_slice();
            next += 1;
            batch.push(m);
            batch_bytes += m.len();
        }
        messages += batch.len() as u64;
        bytes += batch_bytes as u64;
        // The shard's own transform, digest, log entries, request splitting and requests.
        let exactly = matches!(mode, Mode::ExactlyOnce);
        let values = batch.into_iter().map(|v| (None, v, None));
        let mapped = map_values(&mapper, values, &mut stages, &mut pool, exactly);
        rejected += mapped.failed.len() as u64;
        let n = mapped.rows.len() as i64;
        let slot = StreamSlot {
            stream: "projects/p/datasets/d/tables/t/streams/calibrate".into(),
            offset,
            rows: n,
            digest: log.is_some().then(|| crcs_digest(&mapped.rows, &mapped.row_crcs)),
            digest_kind: DigestKind::RowCrcs,
            ..Default::default()
        };
        let rows = Arc::new(mapped.rows);
        if let Some(log) = log.as_mut() {
            let ranges = BTreeMap::from([(0, (first as i64, messages as i64))]);
            let positions = BTreeMap::from([(0, messages as i64)]);
            log.log_offsets(&OffsetEntry {
                batch: batch_id,
                ranges,
                positions,
                main: Some(slot.clone()),
                ..Default::default()
            })?;
        }
        for (k, range) in split_requests(rows.as_ref(), budget).into_iter().enumerate() {
            let at = exactly.then_some(offset + range.start as i64);
            let schema = (batch_id == 0 && k == 0).then_some(&descriptor);
            // Framed as the writer frames it; HTTP/2 sends its pieces as they are.
            std::hint::black_box(frame(&slot.stream, at, schema, &rows, range));
        }
        let rows = Arc::try_unwrap(rows).expect("every request was dropped");
        if let Some(log) = log.as_mut() {
            log.log_commit(&CommitEntry {
                batch: batch_id,
                positions: BTreeMap::from([(0, messages as i64)]),
                ..Default::default()
            })?;
        }
        // The job's per-batch bookkeeping: counters, CPU and the stage latencies.
        let counts = BatchCounts {
            read: (messages - first),
            bytes: batch_bytes as u64,
            written: n as u64,
            ..Default::default()
        };
        stats.add_batch(&counts, &mut stages);
        pool.give(rows);
        offset += n;
        batch_id += 1;
        progress(((thread_cpu_s() - cpu0) / seconds).min(1.0));
    }
    let cpu_s = thread_cpu_s() - cpu0;
    Ok(Measurement {
        mode,
        shape: shape.name.clone(),
        message_bytes: bytes as f64 / messages.max(1) as f64,
        messages,
        rejected,
        cpu_s,
        wall_s: wall0.elapsed().as_secs_f64(),
        messages_per_core_s: messages as f64 / cpu_s,
        mib_per_core_s: bytes as f64 / MIB / cpu_s,
    })
}

/// Split two measurements at different sizes into vCPU-µs per message and vCPU-ns per
/// byte (a straight line through the two costs per message). None when the line makes
/// no sense (a negative part: noise larger than the difference).
pub fn split_cost(a: &Measurement, b: &Measurement) -> Option<(f64, f64)> {
    let cost = |m: &Measurement| 1.0 / m.messages_per_core_s;
    let (ca, cb) = (cost(a), cost(b));
    let db = b.message_bytes - a.message_bytes;
    if db.abs() < 1.0 {
        return None;
    }
    let per_byte = (cb - ca) / db;
    let per_message = ca - per_byte * a.message_bytes;
    (per_byte > 0.0 && per_message > 0.0).then_some((per_message * 1e6, per_byte * 1e9))
}

/// What goes into the baseline file besides the measurements.
pub struct BaselineInfo {
    /// When.
    pub date: String,
    /// This machine, in words.
    pub machine: String,
    /// Utilization the baseline is sized at (Dataflow's default hint is 0.8).
    pub target_cpu: f64,
}

/// The baseline file for measurements of the main shape (one per mode), with the
/// per-message/per-byte split per mode when there is one.
pub fn baseline(main: &[Measurement], split: &BTreeMap<&'static str, (f64, f64)>, info: &BaselineInfo) -> BaselineFile {
    let google = flexrun_estimator::google_kafka_to_bq();
    let baselines = main
        .iter()
        .map(|m| {
            // SECU is Streaming Engine's, not measurable here: Google's published SECU per
            // MiB/s for the mode, scaled to this throughput.
            let secu_rate =
                google.baselines.iter().find(|b| b.mode == m.mode).map_or(0.0, |b| b.secu_per_hour / b.input_mib_s());
            let throughput = m.mib_per_core_s * info.target_cpu;
            let s = split.get(m.mode.as_str());
            Baseline {
                mode: m.mode,
                throughput_mib_s: throughput,
                input_mib_s: None,
                workers: 1.0,
                mean_cpu: info.target_cpu,
                secu_per_hour: secu_rate * throughput,
                throughput_per_worker_mb_s: Some(throughput * MIB / 1e6),
                latency_ms: None,
                vcpu_us_per_message: s.map(|s| s.0),
                vcpu_ns_per_byte: s.map(|s| s.1),
            }
        })
        .collect();
    BaselineFile {
        source: "flexrun calibrate (this machine; SECU from Google's published rate)".into(),
        date: info.date.clone(),
        template: "kafka-to-bq".into(),
        machine_type: "local-core".into(),
        message_bytes: main.first().map(|m| m.message_bytes),
        machine: Some(info.machine.clone()),
        vcpus_per_worker: Some(1.0),
        baselines,
    }
}

/// The file text: a header that says what the figures mean, then the YAML.
pub fn baseline_yaml(b: &BaselineFile, target_cpu: f64) -> Result<String> {
    Ok(format!(
        "# Measured by `flexrun calibrate`: kafka-to-bq's processing path on one core of this machine\n\
         # (parse, map, encode rows, serialize the AppendRowsRequest; exactly-once adds the offset and\n\
         # commit logs). A \"worker\" here is one core, sized at {:.0}% CPU. Not Google's hardware: no\n\
         # Streaming Engine, no network. Read by `flexrun estimate --baseline` and `flexrun simulate --baseline`.\n{}",
        target_cpu * 100.0,
        serde_yaml::to_string(b)?
    ))
}

/// A short description of this machine (CPU model and cores).
pub fn machine_description() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    format!("{model}, {cores} cores available")
}
