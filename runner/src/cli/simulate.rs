//! `flexrun simulate`: flags, building a [`SimConfig`], and printing the result.

use super::flags::ScalingFlags;
use crate::usage;
use anyhow::Result;
use clap::Args;
use flexrun_estimator::parse_duration;
use flexrun_estimator::{BaselineFile, Mode, Rate};
use flexrun_simulate::{CpuCost, SimConfig, SimReport, DEFAULT_NOISE};
use flexrun_simulate::{MessageSize, Profile, Workload};
use std::path::PathBuf;
use std::time::Duration;

/// Output format of `flexrun simulate`.
#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum SimFormat {
    /// Human-readable.
    Table,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
    /// CSV: the time series of one run, or one row per configuration of a sweep.
    Csv,
}

/// `flexrun simulate --template kafka-to-bq ...`
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// The template to simulate (kafka-to-bq).
    #[arg(long, default_value = "kafka-to-bq")]
    pub template: String,
    /// Template parameters, as for a run (mode, numStorageWriteApiStreams,
    /// storageWriteApiTriggeringFrequencySec are used; connection settings may be left out).
    #[arg(long)]
    pub parameters: Vec<String>,
    /// Pool and autoscaling flags, as for a run.
    #[command(flatten)]
    pub scaling: ScalingFlags,
    /// Input in messages per second (or give --rate).
    #[arg(long, conflicts_with = "rate", allow_hyphen_values = true, value_parser = super::flags::positive_f64)]
    pub qps: Option<f64>,
    /// Input as a rate with a unit: 1GiB/s, 500MB/s, 1000000msg/s.
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| Rate::parse(s).map_err(|e| e.to_string()))]
    pub rate: Option<Rate>,
    /// Message size (default: the baseline's, 1 KiB): 1KiB, uniform:512..1536,
    /// normal:1024,200 or lognormal:800,0.5.
    #[arg(long, default_value = "1KiB", value_parser = |s: &str| MessageSize::parse(s).map_err(|e| e.to_string()))]
    pub message_size: MessageSize,
    /// Kafka partitions of the topic.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub partitions: u32,
    /// Virtual time to simulate (e.g. 24h, 90m).
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub duration: Duration,
    /// Load profile: constant, steps:0=1,1h=2, ramp:from=..,to=..,start=..,end=.., sine:amplitude=..,period=.., spikes:every=..,length=..,height=..
    #[arg(long, default_value = "constant", conflicts_with = "profile_file", value_parser = |s: &str| Profile::parse(s).map_err(|e| e.to_string()))]
    pub profile: Profile,
    /// The load profile as a YAML file ({kind: steps, steps: [{at: 0s, multiplier: 1}, ...]}),
    /// or recorded traffic as a CSV of timestamp,records_per_s rows (as `flexrun local
    /// topic-rates` writes, or a rate exported from Prometheus): replayed from its first
    /// row and repeated after its span. Without --qps or --rate the CSV's own rates are
    /// simulated; with them, its shape is scaled to that mean.
    #[arg(long)]
    pub profile_file: Option<PathBuf>,
    /// Relative noise of the input rate (0 for a perfectly flat input).
    #[arg(long, default_value_t = DEFAULT_NOISE, allow_hyphen_values = true, value_parser = fraction)]
    pub noise: f64,
    /// Time new workers take to boot and join.
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    pub startup: Duration,
    /// Time excluded from the summary (default: a quarter of --duration, at most 2h).
    #[arg(long, value_parser = parse_duration)]
    pub warm_up: Option<Duration>,
    /// A baseline file (as `flexrun calibrate` writes); default: Google's published figures.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Override the capacity: what one vCPU processes at 100% CPU (e.g. 11MiB/s or 12000msg/s).
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| Rate::parse(s).map_err(|e| e.to_string()))]
    pub vcpu_capacity: Option<Rate>,
    /// The BigQuery dataset's location: a multi-region (US, EU) or a region
    /// (us-central1, ...). Its Storage Write throughput quota is simulated as a token
    /// bucket, and the limits the run crosses are named.
    #[arg(long, default_value = flexrun_estimator::estimate::DEFAULT_DATASET_LOCATION)]
    pub dataset_location: String,
    /// Random seed (input noise and latency samples): the same inputs and seed give the same output.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output format: table, json, yaml or csv.
    #[arg(long, value_enum, default_value_t = SimFormat::Table)]
    pub format: SimFormat,
    /// Vary a setting: KEY=V1,V2,... (repeat for more keys; every combination runs, in
    /// parallel). Keys: worker-machine-type, worker-utilization-hint, autoscaling-policy
    /// (dataflow, ds2, none), num-workers, min-num-workers, max-workers, partitions,
    /// streams, mode (exactly-once, at-least-once), message-size (separate values with
    /// ';' when they hold commas), triggering-frequency, autoscaling-interval.
    #[arg(long, value_name = "KEY=V1,V2,...")]
    pub sweep: Vec<String>,
    /// With --sweep: pick the cheapest configuration whose p99 latency (including the
    /// wait in Kafka) is within this (e.g. 2s, 800ms).
    #[arg(long, requires = "sweep", value_parser = parse_duration)]
    pub p99_limit: Option<Duration>,
    /// Template parameters a sweep sets, over those in --parameters.
    #[arg(skip)]
    pub overrides: Vec<(String, String)>,
    /// Write the time series as CSV.
    #[arg(long)]
    pub series: Option<PathBuf>,
    /// Seconds per series row.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub series_interval: Duration,
    /// Draw workers, CPU and latency over time (SVG); with --sweep, cost against p99
    /// with the Pareto front.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// kafka-to-gcs: the window commit and the window state.
    #[command(flatten)]
    pub gcs: super::gcs_model::GcsModelFlags,
    /// The bill's lines and what they assume (the prices are --region's).
    #[command(flatten)]
    pub bill: super::bill_flags::BillFlags,
}

fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=0.5).contains(&v) => Ok(v),
        _ => Err(format!("invalid value {s:?}: expected a fraction from 0 to 0.5")),
    }
}

/// The template settings the simulation uses, after validating `--parameters`.
struct TemplateSettings {
    mode: Mode,
    streams: f64,
    triggering_s: f64,
    file_commit: Option<flexrun_simulate::FileCommit>,
}

/// kafka-to-gcs: the window and the files per window from its parameters; the CPU cost
/// per record is kafka-to-bq's at-least-once figure (no kafka-to-gcs baseline exists).
fn gcs_settings(a: &SimulateArgs, pairs: Vec<(String, String)>) -> Result<TemplateSettings> {
    let (window, files) = super::gcs_model::window_and_files(pairs, a.scaling.max_workers)?;
    let window_s = window.as_secs_f64();
    Ok(TemplateSettings {
        mode: Mode::AtLeastOnce,
        streams: 1.0,
        triggering_s: 5.0,
        file_commit: Some(flexrun_simulate::FileCommit {
            window_s,
            commit: a.gcs.window_commit(files),
            state: a.gcs.state_model(window_s)?,
        }),
    })
}

fn template_settings(a: &SimulateArgs) -> Result<TemplateSettings> {
    let template = flexrun_templates::find(&a.template).ok_or_else(|| {
        usage(format!("unknown template {:?}: flexrun simulate supports kafka-to-bq and kafka-to-gcs", a.template))
    })?;
    if template.name != "kafka-to-bq" && template.name != "kafka-to-gcs" {
        return Err(usage(format!(
            "flexrun simulate supports kafka-to-bq and kafka-to-gcs, not {} (its cost is the producer's, not a pipeline's)",
            template.name
        )));
    }
    let mut pairs = Vec::new();
    for p in &a.parameters {
        pairs.extend(flexrun_templates::parse_parameter_list(p).map_err(|e| usage(format!("--parameters: {e}")))?);
    }
    for (k, v) in &a.overrides {
        pairs.retain(|(n, _)| n != k);
        pairs.push((k.clone(), v.clone()));
    }
    if template.name == "kafka-to-gcs" {
        return gcs_settings(a, pairs);
    }
    if a.gcs.state_backend.is_some() {
        return Err(usage("--state-backend: only kafka-to-gcs keeps window state (kafka-to-bq is map-only)"));
    }
    // Where to read and write does not change a simulation; fill them in if left out.
    for (k, v) in [
        ("readBootstrapServerAndTopic", "simulated:9092;simulated"),
        ("outputTableSpec", "simulated:simulated.simulated"),
    ] {
        if !pairs.iter().any(|(n, _)| n == k) {
            pairs.push((k.into(), v.into()));
        }
    }
    let p = flexrun_templates::validate(template, &pairs).map_err(|e| usage(e.to_string()))?;
    let delivery = crate::kafka_to_bq::setup::config::Delivery::of(&p, a.scaling.at_least_once_experiment());
    use crate::kafka_to_bq::setup::config::{storage_write_streams, triggering_frequency_s};
    let streams = storage_write_streams(&p).map_err(usage)? as f64;
    // 0 means Beam's dynamic sharding: modelled as one stream per vCPU of the largest pool.
    let streams = if streams > 0.0 { streams } else { a.scaling.max_workers.unwrap_or(100) as f64 * 2.0 };
    let triggering_s = triggering_frequency_s(&p).map_err(usage)?;
    Ok(TemplateSettings { mode: delivery.mode(), streams, triggering_s, file_commit: None })
}

/// The load profile: `--profile`, or `--profile-file` as YAML, or as a CSV of
/// timestamped rates when its name ends in `.csv`.
fn profile(a: &SimulateArgs) -> Result<Profile> {
    let Some(p) = &a.profile_file else {
        return Ok(a.profile.clone());
    };
    let text = std::fs::read_to_string(p).map_err(|e| usage(format!("--profile-file {}: {e}", p.display())))?;
    let name = p.display().to_string();
    if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) {
        let r = flexrun_simulate::traffic::Recorded::parse(&name, &text).map_err(|e| usage(e.to_string()))?;
        return Ok(Profile::Recorded(std::sync::Arc::new(r)));
    }
    Profile::from_yaml(&name, &text).map_err(|e| usage(e.to_string()))
}

/// The baseline for `mode` (`--baseline`, or Google's) and the CPU a message costs (from it,
/// or `--vcpu-capacity`).
fn capacity(a: &SimulateArgs, mode: flexrun_estimator::Mode) -> Result<(flexrun_estimator::Baseline, CpuCost)> {
    let (baseline_name, baseline) = match &a.baseline {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| usage(format!("--baseline {}: {e}", p.display())))?;
            let name = p.display().to_string();
            let b = BaselineFile::parse(&name, &text).map_err(|e| usage(e.to_string()))?;
            (name, b)
        }
        None => (flexrun_estimator::GOOGLE_KAFKA_TO_BQ_NAME.to_string(), flexrun_estimator::google_kafka_to_bq()),
    };
    let b = baseline.for_mode(&baseline_name, mode).map_err(|e| usage(e.to_string()))?.clone();
    let pricing = flexrun_estimator::Pricing::us_central1();
    let base_vcpus = match pricing.machine_types.get(&baseline.machine_type) {
        Some(m) => m.vcpus,
        None => baseline.vcpus_per_worker.ok_or_else(|| {
            usage(format!(
                "baseline {baseline_name}: machine type {:?} is not a known one and the file gives no vcpus_per_worker",
                baseline.machine_type
            ))
        })?,
    };
    let cost = match a.vcpu_capacity {
        Some(Rate::BytesPerSecond(r)) => CpuCost::bytes_per_s(r),
        Some(Rate::MessagesPerSecond(r)) => CpuCost::messages_per_s(r),
        None => CpuCost::from_baseline(&b, base_vcpus),
    };
    Ok((b, cost))
}

/// Messages per second at the profile's 1×: `--qps`, `--rate` at the mean size, or a
/// recorded profile's mean.
fn input_rate(a: &SimulateArgs, profile: &Profile, mean: f64) -> Result<f64> {
    let recorded_mean = match profile {
        Profile::Recorded(r) => Some(r.mean_rate()),
        _ => None,
    };
    match (a.qps, a.rate, recorded_mean) {
        (Some(q), None, _) => Ok(q),
        (None, Some(r), _) => Ok(r.bytes_per_second(mean) / mean),
        (None, None, Some(m)) => Ok(m),
        (None, None, None) => Err(usage(
            "flexrun simulate needs the input: --qps N (messages/s), --rate RATE (e.g. 1GiB/s) or a traffic CSV as --profile-file",
        )),
        (Some(_), Some(_), _) => unreachable!("clap rejects --qps with --rate"),
    }
}

/// Build the configuration from the flags (every problem is a usage error).
pub fn config(a: &SimulateArgs) -> Result<SimConfig> {
    let t = template_settings(a)?;
    let pool = a.scaling.pool().map_err(usage)?;
    let machine_type = a.scaling.worker_machine_type.clone().unwrap_or_else(|| "e2-standard-2".into());
    let (b, cost) = capacity(a, t.mode)?;
    // The pool settles at the baseline's measured utilization, where `estimate` sizes it.
    let pool = flexrun_autoscaler::ScalingConfig { scale_down_target: b.mean_cpu, ..pool };
    let mean = a.message_size.mean();
    let profile = profile(a)?;
    let base_records_per_s = input_rate(a, &profile, mean)?;
    let duration_s = a.duration.as_secs_f64();
    if duration_s < 60.0 {
        return Err(usage(format!("--duration {duration_s} s is too short: expected at least 1m")));
    }
    let warm_up_s = a.warm_up.map_or(SimConfig::default_warm_up_s(duration_s), |d| d.as_secs_f64());
    if warm_up_s >= duration_s {
        return Err(usage(format!("--warm-up ({warm_up_s} s) must be shorter than --duration ({duration_s} s)")));
    }
    super::bill_flags::pricing(a.scaling.region.as_deref().unwrap_or("us-central1"))?;
    let pipeline = a.bill.options(t.file_commit.is_some())?;
    let row_bytes = match (a.bill.row_bytes, a.bill.table()?) {
        (Some(b), _) => Some(b),
        (None, Some(cols)) => Some(
            flexrun_estimator::rowsize::estimate_row_bytes(&cols, mean)
                .map_err(|e| usage(format!("--table-schema: {e}")))?,
        ),
        (None, None) => None,
    };
    // kafka-to-gcs writes files: no Storage Write quota applies.
    let write_quota = match t.file_commit {
        Some(_) => None,
        None => Some(
            flexrun_simulate::WriteQuota::google(&a.dataset_location)
                .map_err(|e| usage(format!("--dataset-location: {e}")))?,
        ),
    };
    let series_interval_s = a.series_interval.as_secs_f64().round();
    if series_interval_s < 1.0 {
        return Err(usage("--series-interval must be at least 1s"));
    }
    Ok(SimConfig {
        workload: Workload {
            base_records_per_s,
            message: a.message_size.clone(),
            partitions: a.partitions,
            duration_s,
            profile,
            noise: a.noise,
        },
        mode: t.mode,
        pool,
        machine_type,
        cost,
        streams: t.streams,
        triggering_s: t.triggering_s,
        startup_s: a.startup.as_secs_f64(),
        warm_up_s,
        secu_per_hour_per_mib_s: b.secu_per_hour / b.input_mib_s(),
        latency: flexrun_simulate::LatencyModel::default(),
        seed: a.seed,
        series_interval_s,
        record_snapshots: false,
        file_commit: t.file_commit,
        pipeline,
        row_bytes,
        write_quota,
    })
}

/// Run `flexrun simulate` without `--sweep` (the CLI's top sends sweeps to
/// [`super::sweep::run`], which builds on this file's [`config`]).
pub fn run(a: &SimulateArgs) -> Result<()> {
    let cfg = config(a)?;
    if let Some(say) = how_long(&cfg) {
        eprintln!("{say}");
    }
    let bar = super::ui::progress_bar(
        cfg.workload.duration_s as u64,
        "simulating {bar:40} {pos}/{len} virtual s ({elapsed}, about {eta} left)",
    );
    let started = std::time::Instant::now();
    let report = flexrun_simulate::run(&cfg, &mut |t| bar.set_position(t as u64));
    bar.finish_and_clear();
    let wall = started.elapsed();
    tracing::info!(virtual_s = cfg.workload.duration_s, wall_ms = wall.as_millis() as u64, "simulation finished");
    if let Some(p) = &a.series {
        flexrun_simulate::report::write_series_csv(p, &report.series)
            .map_err(|e| anyhow::anyhow!("cannot write --series {}: {e}", p.display()))?;
    }
    if let Some(p) = &a.plot {
        let title = format!("kafka-to-bq {} ({})", cfg.mode.as_str(), cfg.pool.policy.as_str());
        flexrun_simulate::report::write_plot_svg(p, &title, &report.series).map_err(|e| anyhow::anyhow!(e))?;
    }
    match a.format {
        SimFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        SimFormat::Yaml => print!("{}", serde_yaml::to_string(&report)?),
        SimFormat::Csv => flexrun_simulate::report::write_series(&mut std::io::stdout().lock(), &report.series)?,
        SimFormat::Table => print_table(&cfg, &report, wall, a.baseline.is_none() && a.vcpu_capacity.is_none()),
    }
    Ok(())
}

/// Before a large run, what to say about how long it may take (at the engine's measured
/// worst-case rate), so a long simulation does not look like a hang; None for a quick one.
pub fn how_long(cfg: &SimConfig) -> Option<String> {
    let w = &cfg.workload;
    let units = flexrun_simulate::work_units(w.duration_s, w.partitions, cfg.pool.max_workers);
    let secs = units / flexrun_simulate::WORK_UNITS_PER_CORE_S;
    (secs >= 5.0).then(|| {
        format!(
            "simulating {:.1} virtual hours over {} partitions and up to {} workers: {units:.2e} units of work, up to about {secs:.0} s on one core (less when the pool keeps up)",
            w.duration_s / 3600.0,
            w.partitions,
            cfg.pool.max_workers
        )
    })
}

/// The summary table; with Google's published column when the capacity is Google's.
fn print_table(cfg: &SimConfig, r: &SimReport, wall: Duration, compare: bool) {
    let s = &r.summary;
    let w = &cfg.workload;
    let compare = compare && cfg.file_commit.is_none();
    println!(
        "{} {} on {} · {:.0} msg/s of {} ({:.1} MiB/s), {} partitions · {} policy, hint {:.2}, workers {}..{} · {:.1} h simulated in {:.2} s",
        if cfg.file_commit.is_some() { "kafka-to-gcs" } else { "kafka-to-bq" },
        if cfg.file_commit.is_some() { "windowed files" } else { cfg.mode.as_str() },
        cfg.machine_type,
        w.base_records_per_s,
        w.message.describe(),
        w.base_records_per_s * w.message.mean() / flexrun_estimator::units::MIB,
        w.partitions,
        cfg.pool.policy.as_str(),
        cfg.pool.utilization_hint,
        cfg.pool.min_workers,
        cfg.pool.max_workers,
        w.duration_s / 3600.0,
        wall.as_secs_f64()
    );
    println!("after {:.1} h of warm-up:", cfg.warm_up_s / 3600.0);
    let published = flexrun_estimator::google_kafka_to_bq();
    let p = published.baselines.iter().find(|b| b.mode == cfg.mode).filter(|_| compare);
    println!("{:<44} {:>14} {:>22}", "result", "simulated", if compare { "Google (1 GiB/s, n=3)" } else { "" });
    let row = |name: &str, sim: String, publ: Option<String>| {
        println!("{:<44} {:>14} {:>22}", name, sim, publ.unwrap_or_else(|| "-".into()))
    };
    row(
        "input throughput per worker (MB/s)",
        format!("{:.1}", s.throughput_per_worker_mb_s),
        p.and_then(|b| b.throughput_per_worker_mb_s).map(|v| format!("{v:.0}")),
    );
    row(
        "mean CPU utilization",
        format!("{:.0}%", s.mean_cpu * 100.0),
        p.map(|b| format!("{:.0}%", b.mean_cpu * 100.0)),
    );
    row("workers (mean running)", format!("{:.1}", s.workers_mean), p.map(|b| format!("{:.0}", b.workers)));
    row("workers (min..max after warm-up)", format!("{}..{}", s.workers_min, s.workers_max), None);
    row(
        "Streaming Engine compute units per hour",
        format!("{:.1}", s.secu_per_hour),
        p.map(|b| format!("{:.0}", b.secu_per_hour)),
    );
    let lat = p.and_then(|b| b.latency_ms);
    for (i, q) in ["P50", "P95", "P99"].iter().enumerate() {
        row(
            &format!("stage latency excl. input {q} (ms)"),
            format!("{:.0}", s.latency_ms[i]),
            lat.map(|l| format!("{:.0}", [l.p50, l.p95, l.p99][i])),
        );
    }
    row("latency incl. Kafka wait P99 (ms)", format!("{:.0}", s.end_to_end_ms[2]), None);
    row("throughput (MiB/s)", format!("{:.1}", s.throughput_mib_s), p.map(|b| format!("{:.0}", b.throughput_mib_s)));
    row("cost per hour (USD, us-central1)", format!("{:.2}", s.cost_per_hour), None);
    if let (Some(fc), Some(wc)) = (&cfg.file_commit, &s.window_commit) {
        println!(
            "window commits: {} windows of {:.0} s, {:.0} files each at {:.0} ms per file and {:.0} in flight: each worker stops reading {:.1} s per window (max {:.1} s), {:.1}% of the time",
            wc.windows,
            fc.window_s,
            fc.commit.files_per_window,
            fc.commit.per_file_s * 1000.0,
            fc.commit.parallelism,
            wc.mean_stall_s,
            wc.max_stall_s,
            wc.stalled_fraction * 100.0
        );
    }
    if let (Some(m), Some(c)) = (cfg.file_commit.and_then(|f| f.state), &s.checkpoints) {
        println!(
            "window state ({:?}, {:?} checkpoints every {:.0} s): peak {:.0} MiB of state, at most {:.0} MiB of memory per worker; {} checkpoints of {:.0} MiB on average (max {:.0} MiB), {:.1} s on average (max {:.1} s), processing paused at most {:.2} s",
            m.backend, m.kind, m.interval_s, c.peak_state_mib, c.peak_memory_mib, c.checkpoints, c.mean_checkpoint_mib,
            c.max_checkpoint_mib, c.mean_duration_s, c.max_duration_s, c.max_sync_s
        );
    }
    println!("bottleneck: {}", s.bottleneck.describe());
    if s.write_quota_throttled_s > 0.0 {
        println!(
            "Storage Write quota: writes held back for {:.0} s after warm-up ({:.0}% of the time)",
            s.write_quota_throttled_s,
            s.write_quota_throttled_s / (cfg.workload.duration_s - cfg.warm_up_s).max(1.0) * 100.0
        );
    }
    for l in &s.limits {
        println!("LIMIT: {} [{}]", l.message, l.source);
    }
    println!(
        "capacity: {:.2} MiB/s per vCPU at 100% CPU; useful parallelism {} workers; {} worker-count changes",
        s.vcpu_capacity_mib_s, s.max_parallelism, s.decisions
    );
    for d in r.decisions.iter().filter(|d| d.is_change()).take(12) {
        println!("  t={:>7.0}s {:>3} → {:<3} {}: {}", d.time_s, d.from, d.to, d.rationale.as_str(), d.detail);
    }
    if s.decisions > 12 {
        println!("  ... {} more (use --format json for all)", s.decisions - 12);
    }
}
