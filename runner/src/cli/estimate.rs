//! `flexrun estimate`: workers, Streaming Engine compute units and cost for a
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
    let msg = a.message_size.or(baseline.message_bytes).unwrap_or(1024.0);
    if matches!(a.throughput, est::Rate::BytesPerSecond(_)) && a.message_size.is_some() {
        return Err(usage("--message-size only applies to a throughput in msg/s"));
    }
    let req = est::Request {
        throughput_bytes_s: a.throughput.bytes_per_second(msg),
        mode: a.mode,
        machine_type: a.machine_type.clone(),
        commitment: a.commitment,
    };
    let e = est::estimate(&req, &name, &baseline, &est::Pricing::us_central1()).map_err(|e| usage(e.to_string()))?;
    match a.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&e)?),
        Format::Yaml => print!("{}", serde_yaml::to_string(&e)?),
        Format::Table => {
            println!(
                "{:.1} MiB/s {} on {} (commitment {}): scaling factor {:.4}",
                e.throughput_mib_s,
                req.mode.as_str(),
                req.machine_type,
                req.commitment.as_str(),
                e.scaling_factor
            );
            println!(
                "workers {:.2} → {} billed ({} vCPU, {} GB memory, {} GB disk), SECU {:.2}/h, at {:.0}% CPU",
                e.workers_exact,
                e.workers,
                e.vcpus,
                e.memory_gb,
                e.disk_gb,
                e.secu_per_hour,
                e.mean_cpu * 100.0
            );
            println!(
                "{:<32} {:>12} {:>8} {:>12} {:>10} {:>12}",
                "item", "quantity", "unit", "$/unit-h", "$/hour", "$/month"
            );
            for i in &e.items {
                println!(
                    "{:<32} {:>12.2} {:>8} {:>12.6} {:>10.2} {:>12.2}",
                    i.item, i.quantity, i.unit, i.unit_price, i.per_hour, i.per_month
                );
            }
            println!("{:<32} {:>12} {:>8} {:>12} {:>10.2} {:>12.2}", "total", "", "", "", e.per_hour, e.per_month);
            for n in &e.notes {
                println!("note: {n}");
            }
        }
    }
    Ok(())
}
