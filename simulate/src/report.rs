//! What a simulation produces: the summary in the shape of Google's benchmark
//! table, the time series (CSV), and a chart of workers, CPU and latency (SVG).

use flexrun_autoscaler::{Decision, Snapshot};
use flexrun_estimator::CostItem;
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// What limited the job, if anything.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Bottleneck {
    /// The job kept up with its input.
    #[default]
    None,
    /// Too few Kafka partitions: each is read and mapped by one vCPU at a time.
    Partitions {
        /// Partitions of the topic.
        partitions: u32,
        /// The most they carry, MiB/s.
        max_mib_s: f64,
        /// How fast the backlog grew after warm-up, MiB/s.
        backlog_growth_mib_s: f64,
    },
    /// The Storage Write API's throughput quota for the dataset's location.
    WriteQuota {
        /// The dataset's location.
        location: String,
        /// The quota, MiB/s.
        quota_mib_s: f64,
        /// How fast the backlog grew after warm-up, MiB/s.
        backlog_growth_mib_s: f64,
    },
    /// The worker ceiling.
    MaxWorkers {
        /// --max-workers.
        max_workers: u32,
        /// The most they carry, MiB/s.
        max_mib_s: f64,
        /// How fast the backlog grew after warm-up, MiB/s.
        backlog_growth_mib_s: f64,
    },
}

impl Bottleneck {
    /// A short name: `none`, `partitions`, `max-workers` or `write-quota`.
    pub fn short(&self) -> &'static str {
        match self {
            Bottleneck::None => "none",
            Bottleneck::Partitions { .. } => "partitions",
            Bottleneck::MaxWorkers { .. } => "max-workers",
            Bottleneck::WriteQuota { .. } => "write-quota",
        }
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        match self {
            Bottleneck::None => "none: the job kept up with its input".into(),
            Bottleneck::Partitions { partitions, max_mib_s, backlog_growth_mib_s } => format!(
                "Insufficient Apache Kafka source partitions: {partitions} partitions carry at most {max_mib_s:.1} MiB/s (one vCPU each), so the backlog grows by {backlog_growth_mib_s:.1} MiB/s; add partitions (at least the workers' total vCPUs)"
            ),
            Bottleneck::WriteQuota { location, quota_mib_s, backlog_growth_mib_s } => format!(
                "Storage Write API throughput quota: {quota_mib_s:.0} MiB/s in {location} once its burst is spent, so the backlog grows by {backlog_growth_mib_s:.1} MiB/s; write to a US or EU multi-region dataset, or ask for a quota increase"
            ),
            Bottleneck::MaxWorkers { max_workers, max_mib_s, backlog_growth_mib_s } => {
                format!("max workers: {max_workers} workers carry at most {max_mib_s:.1} MiB/s, so the backlog grows by {backlog_growth_mib_s:.1} MiB/s; raise --max-workers")
            }
        }
    }
}

/// The summary after warm-up (time averages; latency percentiles weighted by records).
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct SimSummary {
    /// Mean input, MiB/s.
    pub input_mib_s: f64,
    /// Mean processed, MiB/s.
    pub throughput_mib_s: f64,
    /// Mean processed, records/s.
    pub throughput_records_per_s: f64,
    /// Processed MB/s per running worker (the seed's "input throughput per worker").
    pub throughput_per_worker_mb_s: f64,
    /// Mean CPU of the running workers (0 to 1).
    pub mean_cpu: f64,
    /// Mean running workers.
    pub workers_mean: f64,
    /// Mean billed workers (running plus booting).
    pub workers_billed_mean: f64,
    /// Fewest running workers after warm-up.
    pub workers_min: u32,
    /// Most running workers after warm-up.
    pub workers_max: u32,
    /// Running workers at the end.
    pub workers_final: u32,
    /// Streaming Engine compute units per hour.
    pub secu_per_hour: f64,
    /// Stage latency excluding the input stage (Dataflow's metric), P50/P95/P99 ms.
    pub latency_ms: [f64; 3],
    /// Latency including the wait in Kafka, P50/P95/P99 ms.
    pub end_to_end_ms: [f64; 3],
    /// The whole pipeline's bill (the estimator's prices): Dataflow for the mean billed
    /// pool, BigQuery and Kafka for the simulated throughput.
    pub cost_items: Vec<CostItem>,
    /// Effective dollars per hour in month 1, every line.
    pub cost_per_hour: f64,
    /// The bill per line, month 1 and month 12.
    pub cost_totals: flexrun_estimator::Totals,
    /// Backlog left at the end, MiB.
    pub backlog_final_mib: f64,
    /// The largest backlog after warm-up, MiB.
    pub backlog_peak_mib: f64,
    /// Window commits (kafka-to-gcs), when the job writes windowed files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_commit: Option<WindowCommitSummary>,
    /// Window state and checkpoints (kafka-to-gcs, when modelled).
    pub checkpoints: Option<CheckpointSummary>,
    /// What limited the job.
    pub bottleneck: Bottleneck,
    /// Seconds after warm-up in which the Storage Write quota held writes back.
    pub write_quota_throttled_s: f64,
    /// Google's limits the simulated pipeline crosses (at its mean input and its largest
    /// pool after warm-up), each with what to do.
    pub limits: Vec<flexrun_estimator::limits::Crossed>,
    /// Worker-count changes over the whole run.
    pub decisions: usize,
    /// The capacity used: MiB/s per vCPU at 100% CPU.
    pub vcpu_capacity_mib_s: f64,
    /// The most workers that can do useful work (partitions ÷ vCPUs per worker).
    pub max_parallelism: u32,
}

/// What publishing each window's files cost the job (kafka-to-gcs).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct WindowCommitSummary {
    /// Windows that ended after warm-up.
    pub windows: u64,
    /// Mean seconds each worker stopped reading per window.
    pub mean_stall_s: f64,
    /// The longest stall.
    pub max_stall_s: f64,
    /// The fraction of the time workers spent publishing rather than reading.
    pub stalled_fraction: f64,
}

/// Window state and checkpoints over the run (after warm-up).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct CheckpointSummary {
    /// Checkpoints taken.
    pub checkpoints: u64,
    /// The largest state, MiB.
    pub peak_state_mib: f64,
    /// The most memory one worker's share of the state took, MiB.
    pub peak_memory_mib: f64,
    /// Mean checkpoint size, MiB.
    pub mean_checkpoint_mib: f64,
    /// The largest checkpoint, MiB.
    pub max_checkpoint_mib: f64,
    /// Mean checkpoint duration, seconds.
    pub mean_duration_s: f64,
    /// The longest checkpoint, seconds.
    pub max_duration_s: f64,
    /// The longest synchronous part (processing paused), seconds.
    pub max_sync_s: f64,
}

/// One row of the time series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesPoint {
    /// End of the interval, virtual seconds.
    pub time_s: f64,
    /// Input, records/s.
    pub input_records_per_s: f64,
    /// Input, MiB/s.
    pub input_mib_s: f64,
    /// Processed, MiB/s.
    pub throughput_mib_s: f64,
    /// Mean running workers.
    pub workers: f64,
    /// Mean billed workers.
    pub workers_billed: f64,
    /// Mean CPU of running workers.
    pub cpu: f64,
    /// Backlog at the end of the interval, MiB.
    pub backlog_mib: f64,
    /// Time a record now waits in Kafka, seconds.
    pub kafka_wait_s: f64,
    /// Stage latency P50 over the interval, ms.
    pub latency_p50_ms: f64,
    /// Stage latency P99 over the interval, ms.
    pub latency_p99_ms: f64,
    /// Streaming Engine compute units per hour.
    pub secu_per_hour: f64,
}

/// Everything a simulation produced.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SimReport {
    /// The summary after warm-up.
    pub summary: SimSummary,
    /// Worker-count changes and changes of rationale, as the live job logs them.
    pub decisions: Vec<Decision>,
    /// The time series.
    #[serde(skip)]
    pub series: Vec<SeriesPoint>,
    /// Every snapshot the autoscaler saw and what it decided (when asked for).
    #[serde(skip)]
    pub snapshots: Vec<(Snapshot, Decision)>,
}

/// Write the series as CSV.
pub fn write_series_csv(path: &Path, series: &[SeriesPoint]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    write_series(&mut f, series)?;
    f.flush()
}

/// Write the series as CSV to `f`.
pub fn write_series(f: &mut dyn Write, series: &[SeriesPoint]) -> std::io::Result<()> {
    writeln!(f, "time_s,input_records_per_s,input_mib_s,throughput_mib_s,workers,workers_billed,cpu,backlog_mib,kafka_wait_s,latency_p50_ms,latency_p99_ms,secu_per_hour")?;
    for p in series {
        writeln!(
            f,
            "{:.0},{:.1},{:.3},{:.3},{:.3},{:.3},{:.4},{:.3},{:.3},{:.1},{:.1},{:.3}",
            p.time_s,
            p.input_records_per_s,
            p.input_mib_s,
            p.throughput_mib_s,
            p.workers,
            p.workers_billed,
            p.cpu,
            p.backlog_mib,
            p.kafka_wait_s,
            p.latency_p50_ms,
            p.latency_p99_ms,
            p.secu_per_hour
        )?;
    }
    Ok(())
}

/// Draw workers, CPU and latency over time as an SVG chart.
pub fn write_plot_svg(path: &Path, title: &str, series: &[SeriesPoint]) -> Result<(), String> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    let root = SVGBackend::new(path, (1100, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, rest) = root.split_vertically(260);
    let (mid, bottom) = rest.split_vertically(250);
    let hours: Vec<f64> = series.iter().map(|p| p.time_s / 3600.0).collect();
    let t_max = hours.last().copied().unwrap_or(1.0).max(1e-3);
    type Line<'a> = (&'a str, RGBAColor, &'a dyn Fn(&SeriesPoint) -> f64);
    let panel = |area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
                 caption: &str,
                 y_desc: &str,
                 y_max: f64,
                 lines: &[Line]|
     -> Result<(), String> {
        let mut c = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 18))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..t_max, 0.0..y_max)
            .map_err(|e| err(&e))?;
        c.configure_mesh().x_desc("hours").y_desc(y_desc).draw().map_err(|e| err(&e))?;
        for (label, color, f) in lines {
            let color = *color;
            c.draw_series(LineSeries::new(hours.iter().zip(series).map(|(h, p)| (*h, f(p))), color))
                .map_err(|e| err(&e))?
                .label(*label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        }
        c.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(|e| err(&e))
    };
    let y_workers = series.iter().map(|p| p.workers_billed.max(p.workers)).fold(1.0, f64::max) * 1.1;
    panel(
        &top,
        &format!("{title}: workers"),
        "workers",
        y_workers,
        &[("running", BLUE.to_rgba(), &|p| p.workers), ("billed", RED.mix(0.6), &|p| p.workers_billed)],
    )?;
    panel(
        &mid,
        "CPU utilization and backlog wait",
        "CPU %",
        100.0,
        &[
            ("CPU %", GREEN.to_rgba(), &|p| p.cpu * 100.0),
            ("Kafka wait s (cut at 100)", MAGENTA.to_rgba(), &|p| p.kafka_wait_s.min(100.0)),
        ],
    )?;
    let y_lat = series.iter().map(|p| p.latency_p99_ms / 1000.0).fold(1.0, f64::max) * 1.1;
    panel(
        &bottom,
        "stage latency (excluding the input stage)",
        "seconds",
        y_lat,
        &[
            ("P50", BLUE.to_rgba(), &|p| p.latency_p50_ms / 1000.0),
            ("P99", RED.to_rgba(), &|p| p.latency_p99_ms / 1000.0),
        ],
    )?;
    root.present().map_err(|e| err(&e))
}
