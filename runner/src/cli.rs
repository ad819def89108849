//! The `flexrun` command line.
//!
//! ```text
//! flexrun --template kafka-to-bq --parameters k=v,k=v [run flags]
//! flexrun run --template kafka-to-bq --parameters ...            (same thing)
//! flexrun dataflow flex-template run JOB --template-file-gcs-location=gs://dataflow-templates-REGION/latest/flex/Kafka_to_BigQuery_Flex --parameters ...
//! flexrun templates list | describe NAME
//! flexrun estimate --throughput 100MiB/s [--baseline FILE]
//! flexrun simulate --qps 1000000 --max-workers 120 [--series F.csv] [--plot F.svg]
//! flexrun calibrate [--output baseline.yaml]
//! flexrun capacity --bootstrap-server HOST:PORT --sizes 100,1KiB,4KiB
//! flexrun web --addr 127.0.0.1:8080
//! flexrun local create-topic | create-table | produce | count      (local stack helpers)
//! ```
//! Bad flags and bad parameters exit with status 2 before anything connects.

use crate::config::SinkKind;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// Runs Google's Dataflow templates for real on this machine.
#[derive(Debug, Parser)]
#[command(name = "flexrun", version, args_conflicts_with_subcommands = true, disable_help_subcommand = true)]
pub struct Cli {
    /// A subcommand; without one, flexrun runs `--template`.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Run flags for the no-subcommand form.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a template (the same as giving --template without a subcommand).
    Run(RunArgs),
    /// gcloud-compatible entry point: `flexrun dataflow flex-template run JOB ...`.
    Dataflow {
        /// Only `flex-template` exists.
        #[command(subcommand)]
        group: DataflowGroup,
    },
    /// List or describe the built-in templates.
    Templates {
        /// What to show.
        #[command(subcommand)]
        action: TemplatesAction,
    },
    /// Workers, Streaming Engine compute units and cost for a throughput, from a baseline.
    Estimate(EstimateArgs),
    /// The same job at cloud scale in virtual time, with the real autoscaler in the loop.
    Simulate(Box<crate::simulate::command::SimulateArgs>),
    /// Measure what one core of this machine carries through kafka-to-bq's processing path; write a baseline.
    Calibrate(crate::sizing::command::CalibrateArgs),
    /// Find where a Kafka setup saturates: binary search on the offered rate per message size.
    Capacity(crate::sizing::command::CapacityArgs),
    /// Serve the cost-estimate page, job pages and /metrics.
    Web {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: String,
    },
    /// Helpers for the local stack (topics, tables, sample data, counts).
    Local {
        /// What to do.
        #[command(subcommand)]
        action: LocalAction,
    },
}

/// `flexrun dataflow ...`
#[derive(Debug, Subcommand)]
pub enum DataflowGroup {
    /// `flexrun dataflow flex-template ...`
    #[command(name = "flex-template")]
    FlexTemplate {
        /// Only `run` exists.
        #[command(subcommand)]
        action: FlexTemplateAction,
    },
}

/// `flexrun dataflow flex-template ...`
#[derive(Debug, Subcommand)]
pub enum FlexTemplateAction {
    /// Run a flex template, as `gcloud dataflow flex-template run` does.
    Run(GcloudRunArgs),
}

/// The arguments of `gcloud dataflow flex-template run`.
#[derive(Debug, Args)]
pub struct GcloudRunArgs {
    /// The job name (checkpoints are kept under it; a restart resumes).
    pub job_name: String,
    /// The template spec path, e.g. gs://dataflow-templates-us-central1/latest/flex/Kafka_to_BigQuery_Flex.
    #[arg(long)]
    pub template_file_gcs_location: String,
    /// Template parameters as gcloud takes them: k=v,k=v (or ^;^k=v;k=v).
    #[arg(long)]
    pub parameters: Vec<String>,
    /// gcloud and flexrun flags shared with `flexrun run`.
    #[command(flatten)]
    pub flags: JobFlags,
}

/// `flexrun run` / no-subcommand arguments.
#[derive(Debug, Args, Default)]
pub struct RunArgs {
    /// The template to run (see `flexrun templates list`).
    #[arg(long)]
    pub template: Option<String>,
    /// Template parameters: k=v,k=v (or ^;^k=v;k=v); may be repeated.
    #[arg(long)]
    pub parameters: Vec<String>,
    /// The job name (default: the template name). A restart with the same name resumes.
    #[arg(long)]
    pub job_name: Option<String>,
    /// Shared flags.
    #[command(flatten)]
    pub flags: JobFlags,
}

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
    /// The worker pool these flags describe (with an emulated capacity for live runs), or why they are inconsistent.
    pub fn pool(
        &self,
        capacity: Option<crate::pipeline::worker::Capacity>,
    ) -> Result<crate::config::PoolConfig, String> {
        let d = crate::config::PoolConfig::default();
        let p = crate::config::PoolConfig {
            num_workers: self.num_workers.unwrap_or(d.num_workers),
            min_workers: self.min_num_workers.unwrap_or(d.min_workers),
            max_workers: self.max_workers.unwrap_or(d.max_workers),
            utilization_hint: self.worker_utilization_hint.unwrap_or(d.utilization_hint),
            algorithm: self
                .autoscaling_algorithm
                .parse()
                .map_err(|e: flexrun_autoscaler::PolicyError| e.to_string())?,
            policy: self.autoscaling_policy.parse().map_err(|e: flexrun_autoscaler::PolicyError| e.to_string())?,
            capacity,
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
    /// Worker pool and autoscaling flags (shared with `flexrun simulate`).
    #[command(flatten)]
    pub scaling: ScalingFlags,
    /// Emulate a worker of this capacity (e.g. 2MB/s or 2000msg/s), so autoscaling shows at laptop scale.
    #[arg(long, value_parser = crate::pipeline::worker::Capacity::parse)]
    pub worker_capacity: Option<crate::pipeline::worker::Capacity>,
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
    /// Largest encoded row; larger ones go to the dead-letter table (Beam's default).
    #[arg(long, default_value_t = crate::transform::DEFAULT_MAX_ROW_BYTES, value_parser = usize_in::<1, 10_000_000>)]
    pub max_row_bytes: usize,
    /// The largest AppendRows request, in bytes (storage.proto: "must be less than 10 MB").
    /// Batches are split into requests under it; rows that cannot fit go to the dead-letter table.
    #[arg(long, default_value_t = crate::bigquery::write::MAX_REQUEST_BYTES, value_parser = usize_in::<100_000, 10_000_000>)]
    pub append_request_bytes: usize,
    /// Append a batch once its messages reach this many bytes (Beam's 2 MiB threshold).
    #[arg(long, default_value_t = 2 * 1024 * 1024, value_parser = usize_in::<1024, 9_000_000>)]
    pub batch_bytes: usize,
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
    pub fn pool(&self) -> Result<crate::config::PoolConfig, String> {
        self.scaling.pool(self.worker_capacity)
    }

    /// Notes on gcloud flags that are recorded but do not change a local run.
    pub fn notes(&self) -> Vec<String> {
        self.scaling.notes()
    }

    /// Whether the at-least-once streaming mode experiment is on.
    pub fn at_least_once_experiment(&self) -> bool {
        self.scaling.at_least_once_experiment()
    }

    /// The progress-recording settings.
    pub fn progress(&self) -> crate::config::ProgressConfig {
        crate::config::ProgressConfig {
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

/// `flexrun estimate ...`
#[derive(Debug, Args)]
pub struct EstimateArgs {
    /// Input throughput: 100MiB/s, 1GB/s, 5000msg/s (with --message-size), ...
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| flexrun_estimator::Rate::parse(s).map_err(|e| e.to_string()))]
    pub throughput: flexrun_estimator::Rate,
    /// Message size for a msg/s throughput (default: the baseline's, 1 KiB for Google's).
    #[arg(long, value_parser = |s: &str| flexrun_estimator::parse_size(s).map_err(|e| e.to_string()))]
    pub message_size: Option<f64>,
    /// exactly-once or at-least-once.
    #[arg(long, default_value = "exactly-once", value_parser = |s: &str| s.parse::<flexrun_estimator::Mode>())]
    pub mode: flexrun_estimator::Mode,
    /// Worker machine type (e2-standard-2/4/8, n1-standard-1/2/4, n2-standard-2/4).
    #[arg(long, default_value = "e2-standard-2")]
    pub machine_type: String,
    /// Committed use discount: none, 1y or 3y.
    #[arg(long, default_value = "none", value_parser = |s: &str| s.parse::<flexrun_estimator::Commitment>())]
    pub commitment: flexrun_estimator::Commitment,
    /// A baseline file (YAML, as `flexrun calibrate` writes); default: Google's published one.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `flexrun templates ...`
#[derive(Debug, Subcommand)]
pub enum TemplatesAction {
    /// One line per template.
    List,
    /// A template's description and parameters.
    Describe {
        /// Template name (or Google's id).
        name: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
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

/// `flexrun local ...`
#[derive(Debug, Subcommand)]
pub enum LocalAction {
    /// Create a topic (idempotent).
    CreateTopic {
        /// host:port
        #[arg(long, env = "FLEXRUN_KAFKA")]
        bootstrap: String,
        /// Topic name.
        #[arg(long)]
        topic: String,
        /// Partition count.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(i32).range(1..=10_000))]
        partitions: i32,
    },
    /// Create a dataset and table (idempotent) with the demo schema or a schema file.
    CreateTable {
        /// project:dataset.table
        #[arg(long)]
        table: String,
        /// BigQuery JSON schema file (default: id INTEGER REQUIRED, logStreamId INTEGER, message STRING).
        #[arg(long)]
        schema_file: Option<String>,
        /// Drop the table first.
        #[arg(long)]
        recreate: bool,
        /// REST emulator host:port.
        #[arg(long)]
        bigquery_endpoint: Option<String>,
        /// gRPC emulator host:port.
        #[arg(long)]
        bigquery_grpc_endpoint: Option<String>,
    },
    /// Produce sample messages in the benchmark's shape (plus an `id`).
    Produce {
        /// host:port
        #[arg(long, env = "FLEXRUN_KAFKA")]
        bootstrap: String,
        /// Topic name.
        #[arg(long)]
        topic: String,
        /// How many messages.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        count: u64,
        /// First id.
        #[arg(long, default_value_t = 0)]
        start_id: u64,
        /// Make every k-th message a bad one (each bad-record class in turn).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        bad_every: Option<u64>,
        /// Characters in the `message` field (the benchmark uses 962).
        #[arg(long, default_value_t = 962, value_parser = usize_in::<0, 5_000_000>)]
        message_chars: usize,
        /// Exactly the benchmark's shape: no `id` field.
        #[arg(long)]
        seed_shape: bool,
    },
    /// Count rows (and distinct ids) in a table.
    Count {
        /// project:dataset.table
        #[arg(long)]
        table: String,
        /// Also count distinct values of this column.
        #[arg(long)]
        distinct: Option<String>,
        /// REST emulator host:port.
        #[arg(long)]
        bigquery_endpoint: Option<String>,
        /// gRPC emulator host:port.
        #[arg(long)]
        bigquery_grpc_endpoint: Option<String>,
    },
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

/// A progress bar of `len` steps on stderr, drawn only when stderr is a terminal (logs
/// and CI output stay clean).
pub fn progress_bar(len: u64, template: &str) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(len);
    b.set_style(indicatif::ProgressStyle::with_template(template).expect("valid progress template"));
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        b.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    b
}

/// A duration as [`parse_duration`] takes it, or zero ("0", "0s").
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    if s.trim_end_matches(|c: char| c.is_ascii_alphabetic()).parse::<f64>() == Ok(0.0) {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

/// Parse `500ms`, `5s`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(Duration::from_secs_f64(v * mult)),
        _ => Err(format!("invalid duration {s:?}: expected a positive number with ms, s, m or h (e.g. 5s)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn gcloud_form_parses() {
        let cli = Cli::try_parse_from([
            "flexrun",
            "dataflow",
            "flex-template",
            "run",
            "my-job",
            "--template-file-gcs-location=gs://dataflow-templates-us-central1/latest/flex/Kafka_to_BigQuery_Flex",
            "--parameters",
            "readBootstrapServerAndTopic=h:1;t,messageFormat=JSON",
            "--enable-streaming-engine",
            "--additional-experiments=streaming_mode_at_least_once",
            "--num-workers=2",
            "--max-workers=10",
            "--worker-machine-type=e2-standard-2",
            "--project=p",
            "--region=us-central1",
        ])
        .unwrap();
        let Some(Command::Dataflow { group: DataflowGroup::FlexTemplate { action: FlexTemplateAction::Run(a) } }) =
            cli.command
        else {
            panic!()
        };
        assert_eq!(a.job_name, "my-job");
        assert!(a.flags.at_least_once_experiment());
        let notes = a.flags.notes().join("\n");
        assert_eq!(a.flags.pool().unwrap().num_workers, 2);
        assert_eq!(a.flags.pool().unwrap().max_workers, 10);
        for f in ["--worker-machine-type", "--project", "--region", "--enable-streaming-engine"] {
            assert!(notes.contains(f), "{f} not reported: {notes}");
        }
    }

    #[test]
    fn top_level_form_parses_and_bad_flags_fail() {
        let cli = Cli::try_parse_from([
            "flexrun",
            "--template",
            "kafka-to-bq",
            "--parameters",
            "a=b",
            "--idle-timeout",
            "500ms",
        ])
        .unwrap();
        assert_eq!(cli.run.template.as_deref(), Some("kafka-to-bq"));
        assert_eq!(cli.run.flags.idle_timeout, Some(Duration::from_millis(500)));
        let e = Cli::try_parse_from(["flexrun", "--template", "x", "--idle-timeout", "soon"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("invalid duration"), "{e}");
        for bad in ["0", "99999", "10000001", "ten"] {
            let e = Cli::try_parse_from(["flexrun", "--template", "x", "--append-request-bytes", bad]).unwrap_err();
            assert_eq!(e.exit_code(), 2, "--append-request-bytes {bad}");
            assert!(e.to_string().contains("append-request-bytes"), "{e}");
        }
        let e = Cli::try_parse_from(["flexrun", "--template", "x", "--batch-rows", "0"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let e = Cli::try_parse_from(["flexrun", "--no-such-flag"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn pool_flags_are_checked() {
        let p = |args: &[&str]| {
            let mut v = vec!["flexrun", "--template", "x"];
            v.extend_from_slice(args);
            Cli::try_parse_from(v)
        };
        assert_eq!(p(&["--worker-utilization-hint", "0.95"]).unwrap_err().exit_code(), 2);
        assert_eq!(p(&["--autoscaling-algorithm", "FAST"]).unwrap_err().exit_code(), 2);
        assert_eq!(p(&["--autoscaling-policy", "ds3"]).unwrap_err().exit_code(), 2);
        assert!(p(&["--worker-capacity", "lots"])
            .unwrap_err()
            .to_string()
            .contains("expected a positive number with a unit"));
        assert_eq!(p(&["--num-workers", "0"]).unwrap_err().exit_code(), 2);
        let cli = p(&["--num-workers", "9", "--max-workers", "4"]).unwrap();
        assert!(cli.run.flags.pool().unwrap_err().contains("outside"));
        let cli =
            p(&["--worker-capacity", "2MB/s", "--autoscaling-policy", "ds2", "--autoscaling-interval", "3s"]).unwrap();
        let pool = cli.run.flags.pool().unwrap();
        assert_eq!(pool.policy, flexrun_autoscaler::PolicyKind::Ds2);
        assert_eq!(pool.interval, Duration::from_secs(3));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn sink_flags_must_agree() {
        let f = JobFlags { sink: SinkArg::Stats, ..Default::default() };
        assert!(f.sink().unwrap_err().contains("--schema-file"));
        let f = JobFlags { schema_file: Some("x".into()), ..Default::default() };
        assert!(f.sink().is_err());
    }
}
