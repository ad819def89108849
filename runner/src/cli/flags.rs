//! Flags the run forms share (`flexrun run`, the no-subcommand form and
//! `flexrun dataflow flex-template run`), the scaling flags `simulate` shares with them,
//! and the value parsers used across subcommands.

use crate::kafka_to_bq::setup::config::{RunFlags, SinkKind};
use crate::progress::ProgressConfig;
use crate::scaling::Capacity;
use crate::state::{Backend, Kind};
use clap::{Args, ValueEnum};
use flexrun_autoscaler::ScalingConfig;
use flexrun_estimator::{parse_duration, parse_duration_or_zero};
use std::path::PathBuf;
use std::time::Duration;

/// Where rows go.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Default)]
pub enum SinkArg {
    /// BigQuery (emulator or Google).
    #[default]
    Bigquery,
    /// Map and encode rows, then only count them (benchmarks; needs --schema-file).
    Stats,
}

/// Worker pool, autoscaling and gcloud job flags: the same for `flexrun run` and
/// `flexrun simulate`, so a simulated job is configured exactly as a real one.
#[derive(Debug, Args, Default, Clone)]
pub struct ScalingFlags {
    /// gcloud: workers at the start (default 1; a worker runs whole shards).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub num_workers: Option<u32>,
    /// gcloud: the autoscaling ceiling (default 100; the shard count caps it too).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_workers: Option<u32>,
    /// The autoscaling floor (Dataflow's min_num_workers service option; default 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub min_num_workers: Option<u32>,
    /// Target worker utilization, 0.1 to 0.9 (Dataflow's worker_utilization_hint; default 0.8).
    #[arg(long, value_parser = hint_in_range)]
    pub worker_utilization_hint: Option<f64>,
    /// THROUGHPUT_BASED (default) or NONE (stay at --num-workers).
    #[arg(long, default_value = "THROUGHPUT_BASED", value_parser = ["THROUGHPUT_BASED", "NONE"])]
    pub autoscaling_algorithm: String,
    /// Which policy decides under THROUGHPUT_BASED: dataflow (Dataflow's rules) or ds2 (one step).
    #[arg(long, default_value = "dataflow", value_parser = ["dataflow", "ds2"])]
    pub autoscaling_policy: String,
    /// How often the autoscaler decides (e.g. 10s).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub autoscaling_interval: Duration,
    /// Divide the Dataflow policy's waits (2 min and so on) by this, for laptop-scale runs.
    #[arg(long, default_value_t = 1.0, value_parser = positive_f64)]
    pub autoscaling_time_scale: f64,
    /// gcloud: worker machine type, e.g. e2-standard-2 (recorded).
    #[arg(long)]
    pub worker_machine_type: Option<String>,
    /// gcloud: project (recorded; BigQuery tables name their own project).
    #[arg(long)]
    pub project: Option<String>,
    /// gcloud: region (recorded).
    #[arg(long)]
    pub region: Option<String>,
    /// gcloud: Streaming Engine (Google's template always turns it on; recorded).
    #[arg(long)]
    pub enable_streaming_engine: bool,
    /// gcloud: experiments, comma-separated; streaming_mode_at_least_once selects at-least-once.
    #[arg(long, value_delimiter = ',')]
    pub additional_experiments: Vec<String>,
}

impl ScalingFlags {
    /// The worker pool these flags describe, or why they are inconsistent.
    pub fn pool(&self) -> Result<ScalingConfig, String> {
        let d = ScalingConfig::default();
        let p = ScalingConfig {
            num_workers: self.num_workers.unwrap_or(d.num_workers),
            min_workers: self.min_num_workers.unwrap_or(d.min_workers),
            max_workers: self.max_workers.unwrap_or(d.max_workers),
            utilization_hint: self.worker_utilization_hint.unwrap_or(d.utilization_hint),
            algorithm: self
                .autoscaling_algorithm
                .parse()
                .map_err(|e: flexrun_autoscaler::PolicyError| e.to_string())?,
            policy: self.autoscaling_policy.parse().map_err(|e: flexrun_autoscaler::PolicyError| e.to_string())?,
            interval: self.autoscaling_interval,
            time_scale: self.autoscaling_time_scale,
            vcpus_per_worker: {
                let m = self.worker_machine_type.as_deref().unwrap_or("e2-standard-2");
                flexrun_estimator::Pricing::us_central1().machine_types.get(m).map(|t| t.vcpus).ok_or_else(|| {
                    format!(
                        "unknown --worker-machine-type {m:?}: expected one of {}",
                        flexrun_estimator::Pricing::us_central1()
                            .machine_types
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?
            },
            scale_down_target: d.scale_down_target,
        };
        if p.min_workers > p.max_workers {
            return Err(format!("--min-num-workers={} is above --max-workers={}", p.min_workers, p.max_workers));
        }
        if p.num_workers > p.max_workers || p.num_workers < p.min_workers {
            return Err(format!(
                "--num-workers={} is outside --min-num-workers={} .. --max-workers={}",
                p.num_workers, p.min_workers, p.max_workers
            ));
        }
        Ok(p)
    }

    /// Notes on gcloud flags that are recorded but do not change a local run.
    pub fn notes(&self) -> Vec<String> {
        let mut n = Vec::new();
        if let Some(m) = &self.worker_machine_type {
            n.push(format!("--worker-machine-type={m}: recorded (its vCPUs count in job_current_num_vcpus); a local run uses this machine's cores"));
        }
        if let Some(p) = &self.project {
            n.push(format!(
                "--project={p}: recorded; BigQuery tables are addressed by the project in their table spec"
            ));
        }
        if let Some(r) = &self.region {
            n.push(format!("--region={r}: recorded; a local run has no region"));
        }
        if self.enable_streaming_engine {
            n.push("--enable-streaming-engine: recorded (Google's kafka-to-bq always enables it); a local run has no Streaming Engine backend".into());
        }
        for e in &self.additional_experiments {
            if e != AT_LEAST_ONCE_EXPERIMENT {
                n.push(format!("--additional-experiments={e}: recorded; not applied by flexrun"));
            }
        }
        n
    }

    /// Whether the at-least-once streaming mode experiment is on.
    pub fn at_least_once_experiment(&self) -> bool {
        self.additional_experiments.iter().any(|e| e == AT_LEAST_ONCE_EXPERIMENT)
    }
}

/// Flags shared by both run forms: gcloud's (recorded and reported) and flexrun's.
#[derive(Debug, Args, Default, Clone)]
pub struct JobFlags {
    /// How bad parameters are reported: text on stderr, or json on stdout in the shape of
    /// Dataflow's InvalidTemplateParameters error (`parameterViolations`).
    #[arg(long, value_enum, default_value_t = ErrorFormat::Text)]
    pub format: ErrorFormat,
    /// Worker pool and autoscaling flags (shared with `flexrun simulate`).
    #[command(flatten)]
    pub scaling: ScalingFlags,
    /// Emulate a worker of this capacity (e.g. 2MB/s or 2000msg/s), so autoscaling shows at laptop scale.
    #[arg(long, value_parser = Capacity::parse)]
    pub worker_capacity: Option<Capacity>,
    /// Where job checkpoints live [env: FLEXRUN_CHECKPOINT_DIR; default ~/.local/state/flexrun/jobs].
    #[arg(long, env = "FLEXRUN_CHECKPOINT_DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// BigQuery REST emulator host:port [env: BIGQUERY_EMULATOR_HOST]. Without it and
    /// --bigquery-grpc-endpoint, Google's endpoints and Application Default Credentials are used.
    #[arg(long)]
    pub bigquery_endpoint: Option<String>,
    /// BigQuery Storage Write emulator host:port [env: BIGQUERY_STORAGE_EMULATOR_HOST].
    #[arg(long)]
    pub bigquery_grpc_endpoint: Option<String>,
    /// Drain and exit after no message arrived for this long (e.g. 5s, 500ms, 2m).
    #[arg(long, value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// kafka-to-bq: drain and exit once every partition has committed up to the end
    /// offsets read at start, as a backfill does; what is produced after the start is
    /// left for the next run. With --idle-timeout too, whichever comes first.
    #[arg(long)]
    pub stop_when_caught_up: bool,
    /// Largest encoded row; larger ones go to the dead-letter table (Beam's default).
    #[arg(long, default_value_t = crate::kafka_to_bq::map::transform::DEFAULT_MAX_ROW_BYTES, value_parser = usize_in::<1, 10_000_000>)]
    pub max_row_bytes: usize,
    /// The largest AppendRows request, in bytes (storage.proto: "must be less than 10 MB").
    /// Batches are split into requests under it; rows that cannot fit go to the dead-letter table.
    #[arg(long, default_value_t = crate::bigquery::write::MAX_REQUEST_BYTES, value_parser = usize_in::<100_000, 10_000_000>)]
    pub append_request_bytes: usize,
    /// Append a batch once its messages reach this many bytes (Beam's 2 MiB threshold).
    #[arg(long, default_value_t = 2 * 1024 * 1024, value_parser = usize_in::<1024, 9_000_000>)]
    pub batch_bytes: usize,
    /// How much data a job may hold at once: prefetched messages and open batches
    /// (1GiB, 512MiB, 800MB; at least 64 MiB). The process's own footprint comes on top.
    #[arg(long, default_value = "1GiB", value_parser = crate::kafka::budget::MemoryBudget::parse)]
    pub memory_budget: crate::kafka::budget::MemoryBudget,
    /// Append a batch once it has this many messages.
    #[arg(long, default_value_t = 10_000, value_parser = usize_in::<1, 1_000_000>)]
    pub batch_rows: usize,
    /// Where rows go.
    #[arg(long, value_enum, default_value_t = SinkArg::Bigquery)]
    pub sink: SinkArg,
    /// BigQuery JSON schema file, for --sink stats.
    #[arg(long)]
    pub schema_file: Option<String>,
    /// Random seed for streaming-data-generator (the same seed gives the same messages).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Persist progress in the background every --progress-checkpoint-interval instead of
    /// after every batch (at-least-once only: a crash replays up to one interval).
    #[arg(long)]
    pub async_progress_tracking: bool,
    /// How often asynchronous progress is persisted.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub progress_checkpoint_interval: Duration,
    /// Delete old progress-log segments on a background thread (true) or inline (false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub async_log_purge: bool,
    /// Serve the job's dashboard, the cost page and /metrics at this address (e.g. 127.0.0.1:8080).
    #[arg(long)]
    pub web: Option<String>,
    /// rate-to-stats and kafka-to-kafka: leave the first stretch after the first record out
    /// of the latency quantiles (start-up is not steady state), e.g. 2s.
    #[arg(long, default_value = "0s", value_parser = parse_duration_or_zero)]
    pub latency_warm_up: Duration,
    /// Also write the end-of-job summary as JSON to this file.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// kafka-to-gcs: requests the window committer keeps in flight (stage, trash,
    /// rename); 1 is the serial baseline of seed 002. 64 was the fastest measured
    /// (scripts/bench-commit.sh, BENCHMARKS.md).
    #[arg(long, default_value_t = 64, value_parser = usize_in::<1, 1024>)]
    pub commit_parallelism: usize,
    /// kafka-to-gcs: the Cloud Storage endpoint (e.g. http://127.0.0.1:9023 for the
    /// emulator); defaults to STORAGE_EMULATOR_HOST, then Google.
    #[arg(long)]
    pub storage_endpoint: Option<String>,
    /// kafka-to-gcs: where open windows live: heap (in memory) or lsm (RocksDB on the
    /// local disk).
    #[arg(long, value_enum, default_value_t = Backend::Heap)]
    pub state_backend: Backend,
    /// kafka-to-gcs: full (the whole state each time) or incremental (only the RocksDB
    /// files written since the last checkpoint; needs --state-backend lsm).
    #[arg(long, value_enum, default_value_t = Kind::Full)]
    pub checkpoint_kind: Kind,
    /// kafka-to-gcs: how often window state is checkpointed (seed 003's Flink job: 3m).
    #[arg(long, default_value = "3m", value_parser = parse_duration)]
    pub checkpoint_interval: Duration,
    /// kafka-to-gcs: where checkpoints go: gs://BUCKET/dir/, file:///dir/ or a path
    /// ending in '/' [default: <checkpoint-dir>/<job>/checkpoints/].
    #[arg(long)]
    pub checkpoint_location: Option<String>,
}

impl JobFlags {
    /// The sink these flags choose, or why they are inconsistent.
    pub fn sink(&self) -> Result<SinkKind, String> {
        match (self.sink, &self.schema_file) {
            (SinkArg::Bigquery, None) => Ok(SinkKind::BigQuery),
            (SinkArg::Bigquery, Some(_)) => {
                Err("--schema-file is only used with --sink stats (with BigQuery the table's own schema is used)"
                    .into())
            }
            (SinkArg::Stats, Some(f)) => Ok(SinkKind::Stats { schema_file: f.clone() }),
            (SinkArg::Stats, None) => Err("--sink stats needs --schema-file (a BigQuery JSON schema)".into()),
        }
    }

    /// The worker pool these flags describe, or why they are inconsistent.
    pub fn pool(&self) -> Result<ScalingConfig, String> {
        self.scaling.pool()
    }

    /// Notes on gcloud flags that are recorded but do not change a local run.
    pub fn notes(&self) -> Vec<String> {
        self.scaling.notes()
    }

    /// kafka-to-bq's run settings from these flags, or why they are inconsistent.
    pub fn run_flags(&self, job_name: &str) -> Result<RunFlags, String> {
        Ok(RunFlags {
            job_name: job_name.to_string(),
            at_least_once_experiment: self.at_least_once_experiment(),
            max_row_bytes: self.max_row_bytes,
            batch_bytes: self.batch_bytes,
            memory_budget: self.memory_budget,
            append_request_bytes: self.append_request_bytes,
            batch_rows: self.batch_rows,
            idle_timeout: self.idle_timeout,
            stop_when_caught_up: self.stop_when_caught_up,
            sink: self.sink()?,
            pool: self.pool()?,
            worker_capacity: self.worker_capacity,
            progress: self.progress(),
        })
    }

    /// Whether the at-least-once streaming mode experiment is on.
    pub fn at_least_once_experiment(&self) -> bool {
        self.scaling.at_least_once_experiment()
    }

    /// The progress-recording settings.
    pub fn progress(&self) -> ProgressConfig {
        ProgressConfig {
            async_progress: self.async_progress_tracking,
            interval: self.progress_checkpoint_interval,
            purge: if self.async_log_purge { crate::progress::Purge::Async } else { crate::progress::Purge::Sync },
        }
    }

    /// The checkpoint root.
    pub fn checkpoint_root(&self) -> PathBuf {
        self.checkpoint_dir.clone().unwrap_or_else(|| {
            let base = std::env::var_os("XDG_STATE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".local/state"));
            base.join("flexrun/jobs")
        })
    }
}

/// Dataflow's experiment for at-least-once streaming mode.
pub const AT_LEAST_ONCE_EXPERIMENT: &str = "streaming_mode_at_least_once";

/// How errors are printed.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Default)]
pub enum ErrorFormat {
    /// Human-readable, on stderr.
    #[default]
    Text,
    /// Dataflow's JSON error shape, on stdout.
    Json,
}

/// Output format.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    /// Human-readable.
    Table,
    /// JSON.
    Json,
    /// YAML (as the template file).
    Yaml,
}

/// Parse a utilization hint in 0.1..=0.9.
pub fn hint_in_range(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.1..=0.9).contains(&v) => Ok(v),
        _ => Err(format!("invalid utilization hint {s:?}: expected a number from 0.1 to 0.9")),
    }
}

/// Parse a positive number.
pub fn positive_f64(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("invalid value {s:?}: expected a positive number")),
    }
}

/// Parse a whole number in `[MIN, MAX]`.
pub fn usize_in<const MIN: usize, const MAX: usize>(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(v) if (MIN..=MAX).contains(&v) => Ok(v),
        _ => Err(format!("invalid value {s:?}: expected a whole number from {MIN} to {MAX}")),
    }
}
