//! `flexrun estimate`: workers, Streaming Engine compute units and the whole pipeline's
//! bill (Dataflow, BigQuery ingestion and storage, optionally Managed Kafka) for a
//! throughput, from a baseline.

use super::flags::Format;
use crate::usage;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

/// `flexrun estimate ...`
#[derive(Debug, Args)]
pub struct EstimateArgs {
    /// Input throughput: 100MiB/s, 1GB/s, 5000msg/s (with --message-size), ...
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| flexrun_estimator::Rate::parse(s).map_err(|e| e.to_string()))]
    pub throughput: flexrun_estimator::Rate,
    /// Message size (default: the baseline's, 1,000 B for Google's). With a byte rate it
    /// sets the messages per second; with msg/s, the bytes.
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| flexrun_estimator::parse_size(s).map_err(|e| e.to_string()))]
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
    /// The template: kafka-to-bq, or kafka-to-gcs (its windows, files and state too; its
    /// per-record cost is kafka-to-bq's at-least-once figure, as no kafka-to-gcs
    /// baseline is published).
    #[arg(long, default_value = "kafka-to-bq")]
    pub template: String,
    /// kafka-to-gcs: template parameters (windowDuration, numShards) as for a run.
    #[arg(long)]
    pub parameters: Vec<String>,
    /// kafka-to-gcs: the window commit and the window state.
    #[command(flatten)]
    pub gcs: super::gcs_model::GcsModelFlags,
    /// Region whose prices to use (us-central1's ship).
    #[arg(long, default_value = "us-central1")]
    pub region: String,
    /// The BigQuery dataset's location: a multi-region (US, EU) or a region
    /// (us-central1, ...). It picks the Storage Write quotas the estimate checks.
    #[arg(long, default_value = flexrun_estimator::estimate::DEFAULT_DATASET_LOCATION)]
    pub dataset_location: String,
    /// The bill's lines and what they assume.
    #[command(flatten)]
    pub bill: super::bill_flags::BillFlags,
}

/// kafka-to-gcs's windows at the estimated worker count.
#[derive(Debug, serde::Serialize)]
pub struct GcsSizing {
    /// The window, seconds.
    pub window_s: f64,
    /// Files per window.
    pub files_per_window: f64,
    /// Seconds each worker spends publishing its share of a window's files.
    pub publish_s_per_window: f64,
    /// The state model, when `--state-backend` was given.
    pub state: Option<flexrun_estimator::state::StateModel>,
    /// A whole window's records, bytes (the most state holds).
    pub peak_state_bytes: f64,
    /// Memory one worker needs for its share, bytes.
    pub memory_per_worker_bytes: f64,
    /// One worker's memory (the machine type's), bytes.
    pub worker_memory_bytes: f64,
    /// The largest checkpoint (taken just before a window closes).
    pub checkpoint: Option<flexrun_estimator::state::CheckpointCost>,
}

fn gcs_sizing(a: &EstimateArgs, throughput_bytes_s: f64, workers: f64) -> Result<GcsSizing> {
    let mut pairs = Vec::new();
    for p in &a.parameters {
        pairs.extend(flexrun_templates::parse_parameter_list(p).map_err(|e| usage(format!("--parameters: {e}")))?);
    }
    let (window, files) = super::gcs_model::window_and_files(pairs, None)?;
    let window_s = window.as_secs_f64();
    let state = a.gcs.state_model(window_s)?;
    let peak = throughput_bytes_s * window_s;
    let memory_gb =
        flexrun_estimator::Pricing::us_central1().machine_types.get(&a.machine_type).map_or(0.0, |m| m.memory_gb);
    Ok(GcsSizing {
        window_s,
        files_per_window: files,
        publish_s_per_window: a.gcs.window_commit(files).stall_s(workers),
        peak_state_bytes: peak,
        memory_per_worker_bytes: state.map_or(0.0, |m| m.memory_bytes(peak, workers)),
        worker_memory_bytes: memory_gb * 1e9,
        // The largest checkpoint: taken as a window is about to close, holding all of it.
        checkpoint: state.map(|m| m.checkpoint(peak, throughput_bytes_s * m.interval_s.min(window_s), workers)),
        state,
    })
}

fn print_gcs(g: &GcsSizing, workers: u32) {
    let gib = |b: f64| b / 1073741824.0;
    println!(
        "kafka-to-gcs: windows of {:.0} s, {:.0} files each; each of {workers} workers publishes its share in {:.2} s per window",
        g.window_s, g.files_per_window, g.publish_s_per_window
    );
    let Some(m) = &g.state else {
        println!(
            "  window state: up to {:.1} GiB per window (add --state-backend heap|lsm for its memory and checkpoints)",
            gib(g.peak_state_bytes)
        );
        return;
    };
    let fits = g.memory_per_worker_bytes <= 0.7 * g.worker_memory_bytes;
    println!(
        "  window state ({:?}): up to {:.1} GiB per window, {:.2} GiB of memory per worker against {:.1} GB per worker: {}",
        m.backend,
        gib(g.peak_state_bytes),
        gib(g.memory_per_worker_bytes),
        g.worker_memory_bytes / 1e9,
        if fits { "fits" } else { "does NOT fit (over 70% of a worker's memory): use --state-backend lsm, more workers or a larger machine" }
    );
    if m.backend == flexrun_estimator::state::StateBackend::Lsm {
        let disk = g.peak_state_bytes / workers.max(1) as f64 * m.costs.lsm_compression;
        println!("  lsm files: up to {:.1} GiB of local disk per worker", gib(disk));
    }
    if let Some(c) = &g.checkpoint {
        println!(
            "  checkpoints ({:?}, every {:.0} s): the largest writes {:.1} GiB in {:.1} s ({:.2} s of it synchronous)",
            m.kind,
            m.interval_s,
            gib(c.bytes),
            c.duration_s(),
            c.sync_s
        );
    }
}

/// Load `--baseline` (or Google's published one) with the estimator's one loader.
pub fn load_baseline(path: Option<&std::path::Path>) -> Result<(String, flexrun_estimator::BaselineFile)> {
    flexrun_estimator::BaselineFile::load(path).map_err(|e| match path {
        Some(p) => usage(format!("--baseline {}: {e}", p.display())),
        None => usage(e.to_string()),
    })
}

/// Print the estimate `a` asks for.
pub fn run(a: EstimateArgs) -> Result<()> {
    use flexrun_estimator as est;
    let (name, baseline) = load_baseline(a.baseline.as_deref())?;
    let gcs = match a.template.as_str() {
        "kafka-to-bq" | "Kafka_to_BigQuery_Flex" => None,
        "kafka-to-gcs" | "Kafka_to_Gcs_Flex" => Some(()),
        other => return Err(usage(format!("--template {other:?}: estimate knows kafka-to-bq and kafka-to-gcs"))),
    };
    if gcs.is_none() && (!a.parameters.is_empty() || a.gcs.state_backend.is_some()) {
        return Err(usage("--parameters and --state-backend: only for --template kafka-to-gcs"));
    }
    let pricing = super::bill_flags::pricing(&a.region)?;
    let mut req =
        est::Request::for_rate(a.throughput, a.message_size, &baseline, a.mode, &a.machine_type, a.commitment);
    req.pipeline = a.bill.options(gcs.is_some())?;
    req.row_bytes = a.bill.row_bytes;
    req.table = a.bill.table()?;
    req.dataset_location = a.dataset_location.clone();
    if gcs.is_some() {
        req.mode = est::Mode::AtLeastOnce;
    }
    let e = est::estimate(&req, &name, &baseline, &pricing).map_err(|e| usage(format!("{}{e}", flag_of(&e))))?;
    let gcs = match gcs {
        Some(()) => Some(gcs_sizing(&a, req.throughput_bytes_s, e.workers as f64)?),
        None => None,
    };
    let both = serde_json::json!({ "estimate": &e, "kafka_to_gcs": &gcs });
    match a.format {
        Format::Json if gcs.is_some() => println!("{}", serde_json::to_string_pretty(&both)?),
        Format::Yaml if gcs.is_some() => print!("{}", serde_yaml::to_string(&both)?),
        Format::Json => println!("{}", serde_json::to_string_pretty(&e)?),
        Format::Yaml => print!("{}", serde_yaml::to_string(&e)?),
        Format::Table => {
            print_table(&e);
            if let Some(g) = &gcs {
                print_gcs(g, e.workers);
            }
        }
    }
    Ok(())
}

/// The flag an estimate error is about, as a prefix for its message.
fn flag_of(e: &flexrun_estimator::EstimateError) -> &'static str {
    use flexrun_estimator::EstimateError as E;
    match e {
        E::Throughput(_) | E::TooLarge(..) => "--throughput: ",
        E::MessageSize(_) => "--message-size: ",
        E::MachineType { .. } => "--machine-type: ",
        E::Location(_) => "--dataset-location: ",
        _ => "",
    }
}

/// The estimate as text: the sizing, then the bill item by item with month 1 and month
/// 12, the totals per line, and the notes.
fn print_table(e: &flexrun_estimator::Estimate) {
    let r = &e.request;
    println!(
        "{:.1} MiB/s = {:.0} msg/s of {:.0} B, {} on {} (commitment {})",
        e.throughput_mib_s,
        e.messages_per_s,
        r.message_bytes,
        r.mode.as_str(),
        r.machine_type,
        r.commitment.as_str()
    );
    println!(
        "workers {:.2} → {} billed ({} vCPU, {} GB memory, {} GB disk), SECU {:.2}/h, at {:.0}% CPU ({:.2} vCPUs busy)",
        e.workers_exact,
        e.workers,
        e.vcpus,
        e.memory_gb,
        e.disk_gb,
        e.secu_per_hour,
        e.mean_cpu * 100.0,
        e.vcpus_busy
    );
    let g = &e.rule_of_thumb;
    println!(
        "the publication's rule of thumb: factor {:.2} ({:.1} MiB/s ÷ the baseline's, {:.4} unrounded) → {:.1} workers, {:.1} SECU/h; the figures above use the exact factor and the two-term CPU model",
        g.factor, e.throughput_mib_s, e.scaling_factor, g.workers, g.secu_per_hour
    );
    println!(
        "{:<20} {:<34} {:>12} {:>9} {:>10} {:>10} {:>12} {:>12}",
        "line", "item", "quantity", "unit", "$/unit", "$/hour", "$ month 1", "$ month 12"
    );
    for i in &e.items {
        println!(
            "{:<20} {:<34} {:>12.2} {:>9} {:>10.6} {:>10.2} {:>12.2} {:>12.2}",
            i.line.as_str(),
            i.item,
            i.quantity,
            i.unit,
            i.unit_price,
            i.per_hour,
            i.per_month,
            i.per_month_12
        );
    }
    for l in &e.totals.lines {
        println!(
            "{:<20} {:<34} {:>12} {:>9} {:>10} {:>10.2} {:>12.2} {:>12.2}",
            l.line.as_str(),
            "(line total)",
            "",
            "",
            "",
            l.per_hour,
            l.month_1,
            l.month_12
        );
    }
    println!(
        "{:<20} {:<34} {:>12} {:>9} {:>10} {:>10.2} {:>12.2} {:>12.2}",
        "total", "", "", "", "", e.per_hour, e.per_month, e.per_month_12
    );
    println!("{}", e.totals.summary);
    for l in &e.limits {
        println!("LIMIT: {} [{}]", l.message, l.source);
    }
    for n in &e.notes {
        println!("note: {n}");
    }
}
