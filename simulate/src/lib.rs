//! The kafka-to-bq job at cloud scale in virtual time, with the
//! real autoscaler in the loop.
//!
//! # What comes from where
//! From Google's publication (seed 001, `estimator/data/google-kafka-to-bq-e2-standard-2.yaml`):
//! - **the CPU a message costs**: the baseline's two terms, vCPU-µs per message plus
//!   vCPU-ns per byte ([`flexrun_estimator::CpuTerms`]), calibrated to seed 001
//!   (1 GiB/s of 1 KiB messages on 63 or 53 workers) and to a published 130 B run. This
//!   is the only calibration input for workers and CPU; the worker count and CPU the
//!   simulation reports come out of the autoscaler's decisions. A locally measured
//!   baseline (`flexrun calibrate`) or `--vcpu-capacity` replaces it.
//! - **SECU per MiB/s** (58 SECU/h at 1,024 MiB/s exactly-once, 0 at-least-once), scaled
//!   linearly with the simulated throughput, as Google's sizing rule does.
//! - the template's settings: `numStorageWriteApiStreams` (400 in the benchmark, from
//!   `--parameters`), the 5 s triggering frequency, Beam's 2 MiB append threshold.
//!
//! Modelled (named constants, not fitted per run; see [`latency`] and the defaults of
//! [`SimConfig`]): worker start-up time (90 s), input noise (2%, 30 s correlation),
//! one vCPU per partition at most, the per-stage latency constants, and the autoscaling
//! policy's own constants (in `flexrun-autoscaler`).
//!
//! # Layout
//! - [`workload`]: rates, load profiles and message sizes.
//! - [`engine`]: the flow-based event loop.
//! - [`latency`]: the per-stage latency model and its histograms.
//! - [`quota`]: the Storage Write throughput quota as a token bucket.
//! - [`report`]: summary, CSV series and the SVG chart.
//! - [`traffic`]: recorded traffic as a CSV of timestamped rates (replayed as a profile).
//! - [`sweep`]: many configurations in parallel, the Pareto front of cost against p99,
//!   and the cheapest configuration within a p99 limit.
//!
//! The command line (`flexrun simulate`'s flags and output) lives in the runner's
//! `cli::simulate`; this crate depends only on `flexrun-autoscaler` and
//! `flexrun-estimator`, so it builds without Kafka or gRPC.

pub mod engine;
pub mod latency;
pub mod quota;
pub mod report;
pub mod sweep;
pub mod traffic;
pub mod workload;

pub use engine::run;
pub use latency::LatencyModel;
pub use quota::WriteQuota;
pub use report::{Bottleneck, SeriesPoint, SimReport, SimSummary};
pub use workload::{MessageSize, Profile, Workload};

use flexrun_autoscaler::ScalingConfig;
use flexrun_estimator::{Baseline, Mode};

/// Default virtual time for new workers to boot and join.
pub const DEFAULT_STARTUP_S: f64 = 90.0;
/// Default relative noise of the input rate.
pub const DEFAULT_NOISE: f64 = 0.02;
/// Default series interval.
pub const DEFAULT_SERIES_INTERVAL_S: f64 = 60.0;

/// The simulated work a run implies, in units of one partition's or one worker's flow
/// for one virtual second: virtual seconds × (partitions + the largest pool). The engine
/// steps every partition and worker each virtual second; a steady pool with no backlog
/// takes a shortcut and costs less.
pub fn work_units(duration_s: f64, partitions: u32, max_workers: u32) -> f64 {
    duration_s * (partitions as f64 + max_workers as f64)
}

/// Work units one core simulates per wall second when every partition holds a backlog
/// (no shortcut): measured on this project's 2-core machine, 2026-12-06, from a sweep of
/// 18 × 24 h over 100,000 partitions (1.57e11 units in 138 s on 2 cores). A steady run is
/// about 5× faster. Used to say how long a large simulation may take.
pub const WORK_UNITS_PER_CORE_S: f64 = 5.5e8;

/// CPU cost of a message, in vCPU-seconds: a part per message plus a part per byte.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuCost {
    /// vCPU-seconds per byte.
    pub vcpu_s_per_byte: f64,
    /// vCPU-seconds per message, whatever its size.
    pub vcpu_s_per_message: f64,
}

impl CpuCost {
    /// From a baseline measured on machines with `vcpus` vCPUs per worker: its two terms
    /// ([`Baseline::cpu_terms`], the estimator's one CPU model).
    pub fn from_baseline(b: &Baseline, vcpus: f64) -> CpuCost {
        let t = b.cpu_terms(vcpus);
        CpuCost { vcpu_s_per_byte: t.vcpu_ns_per_byte * 1e-9, vcpu_s_per_message: t.vcpu_us_per_message * 1e-6 }
    }

    /// A fixed capacity per vCPU in bytes per second.
    pub fn bytes_per_s(rate: f64) -> CpuCost {
        CpuCost { vcpu_s_per_byte: 1.0 / rate, vcpu_s_per_message: 0.0 }
    }

    /// A fixed capacity per vCPU in messages per second.
    pub fn messages_per_s(rate: f64) -> CpuCost {
        CpuCost { vcpu_s_per_byte: 0.0, vcpu_s_per_message: 1.0 / rate }
    }

    /// vCPU-seconds for a message of `bytes`.
    pub fn vcpu_s_per_message(&self, bytes: f64) -> f64 {
        self.vcpu_s_per_message + self.vcpu_s_per_byte * bytes
    }
}

/// Everything a simulation needs.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The input.
    pub workload: Workload,
    /// Delivery mode.
    pub mode: Mode,
    /// Pool and autoscaling settings, as for a live run.
    pub pool: ScalingConfig,
    /// Worker machine type (for vCPUs and prices).
    pub machine_type: String,
    /// CPU cost of processing.
    pub cost: CpuCost,
    /// Storage Write streams (exactly-once).
    pub streams: f64,
    /// Storage Write triggering frequency, seconds (exactly-once).
    pub triggering_s: f64,
    /// Seconds for new workers to boot.
    pub startup_s: f64,
    /// Seconds excluded from the summary.
    pub warm_up_s: f64,
    /// SECU per hour per MiB/s processed.
    pub secu_per_hour_per_mib_s: f64,
    /// Latency constants.
    pub latency: LatencyModel,
    /// Random seed (input noise, latency samples).
    pub seed: u64,
    /// Seconds per series row.
    pub series_interval_s: f64,
    /// Keep every snapshot the autoscaler saw (tests and replays).
    pub record_snapshots: bool,
    /// Windowed file output (kafka-to-gcs): at each window's end every worker stops
    /// reading while it publishes its share of the window's files.
    pub file_commit: Option<FileCommit>,
    /// The bill's other lines (BigQuery ingestion and storage, Managed Kafka), priced at
    /// the simulated throughput.
    pub pipeline: flexrun_estimator::PipelineOptions,
    /// Billed bytes per BigQuery row; None estimates them from seed 001's table and the
    /// mean message size.
    pub row_bytes: Option<f64>,
    /// The Storage Write throughput quota the job writes under (None: no BigQuery, or
    /// not modelled).
    pub write_quota: Option<WriteQuota>,
}

/// kafka-to-gcs's window commit, as the simulation models it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FileCommit {
    /// The fixed window, seconds.
    pub window_s: f64,
    /// Files, per-file cost and parallelism.
    pub commit: flexrun_estimator::files::WindowCommit,
    /// The window state's backend and checkpoints, when modelled.
    pub state: Option<flexrun_estimator::state::StateModel>,
}

impl SimConfig {
    /// A simulation with Google's published figures as the capacity and SECU rate
    /// (`flexrun_estimator::google_kafka_to_bq`) and this module's defaults for the rest
    /// (5 s triggering, 90 s start-up, a quarter of the run as warm-up, seed 1, a dataset
    /// in the US multi-region): what the web page's sweep runs. `streams` 0 means one per vCPU of the largest pool.
    pub fn google(workload: Workload, mode: Mode, pool: ScalingConfig, machine_type: &str, streams: f64) -> SimConfig {
        let file = flexrun_estimator::google_kafka_to_bq();
        let b = file.for_mode("google", mode).expect("Google's file has both modes").clone();
        let base_vcpus =
            flexrun_estimator::Pricing::us_central1().machine_types.get(&file.machine_type).map_or(2.0, |m| m.vcpus);
        let streams = if streams > 0.0 { streams } else { pool.max_workers as f64 * pool.vcpus_per_worker };
        // The pool settles at the baseline's measured utilization, where `estimate` sizes it.
        let pool = ScalingConfig { scale_down_target: b.mean_cpu, ..pool };
        let duration_s = workload.duration_s;
        SimConfig {
            workload,
            mode,
            pool,
            machine_type: machine_type.into(),
            cost: CpuCost::from_baseline(&b, base_vcpus),
            streams,
            triggering_s: 5.0,
            startup_s: DEFAULT_STARTUP_S,
            warm_up_s: Self::default_warm_up_s(duration_s),
            secu_per_hour_per_mib_s: b.secu_per_hour / b.input_mib_s(),
            latency: LatencyModel::default(),
            seed: 1,
            series_interval_s: DEFAULT_SERIES_INTERVAL_S,
            record_snapshots: false,
            file_commit: None,
            pipeline: flexrun_estimator::PipelineOptions::default(),
            row_bytes: None,
            write_quota: Some(
                WriteQuota::google(flexrun_estimator::estimate::DEFAULT_DATASET_LOCATION).expect("a known location"),
            ),
        }
    }

    /// Whether the job writes exactly-once.
    pub fn exactly_once(&self) -> bool {
        self.mode == Mode::ExactlyOnce
    }

    /// The default warm-up for a duration: a quarter of it, at most 2 h.
    pub fn default_warm_up_s(duration_s: f64) -> f64 {
        (duration_s / 4.0).min(7200.0)
    }
}
