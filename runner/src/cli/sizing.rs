//! `flexrun calibrate` and `flexrun capacity`: flags, progress, and output.

use super::flags::Format;
use crate::sizing::calibrate::{self, BaselineInfo, Measurement, Shape};
use crate::sizing::capacity::{self, ProbeConfig, TrialDetail};
use crate::usage;
use anyhow::{anyhow, Result};
use clap::Args;
use flexrun_estimator::parse_duration;
use flexrun_estimator::{Boundary, Mode, SearchSpace};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// `flexrun calibrate ...`
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Write the baseline here (YAML, for `estimate --baseline` and `simulate --baseline`).
    #[arg(long, default_value = "flexrun-baseline.yaml")]
    pub output: PathBuf,
    /// Modes to measure.
    #[arg(long, value_delimiter = ',', default_value = "exactly-once,at-least-once", value_parser = |s: &str| s.parse::<Mode>())]
    pub modes: Vec<Mode>,
    /// CPU seconds per measurement.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub duration: Duration,
    /// A JSON Data Generator schema to draw messages from (default: Google's benchmark shape).
    #[arg(long, requires = "table_schema")]
    pub schema_template: Option<PathBuf>,
    /// The BigQuery JSON schema those messages map onto (with --schema-template).
    #[arg(long)]
    pub table_schema: Option<PathBuf>,
    /// Utilization the baseline is sized at (Dataflow's default hint: 0.8).
    #[arg(long, default_value_t = 0.8, value_parser = super::flags::hint_in_range)]
    pub target_cpu: f64,
    /// Output format of the report.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Run `flexrun calibrate`: measure each mode on each shape, write the baseline file, and
/// report.
pub fn calibrate_cmd(a: &CalibrateArgs) -> Result<()> {
    let seconds = a.duration.as_secs_f64();
    if !(0.1..=600.0).contains(&seconds) {
        return Err(usage(format!("--duration {seconds} s: expected 100ms to 10m of CPU time per measurement")));
    }
    if a.modes.is_empty() {
        return Err(usage("--modes: expected exactly-once, at-least-once or both"));
    }
    let (main, small) = calibration_shapes(a)?;
    let (mains, smalls) = measure_shapes(&a.modes, seconds, &main, small.as_ref())?;
    let mut split = BTreeMap::new();
    for (m, s) in mains.iter().zip(&smalls) {
        if let Some(c) = calibrate::split_cost(s, m) {
            split.insert(m.mode.as_str(), c);
        }
    }
    let info = BaselineInfo {
        date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
        machine: calibrate::machine_description(),
        target_cpu: a.target_cpu,
    };
    let file = calibrate::baseline(&mains, &split, &info);
    std::fs::write(&a.output, calibrate::baseline_yaml(&file, a.target_cpu)?)
        .map_err(|e| anyhow!("cannot write {}: {e}", a.output.display()))?;
    let all: Vec<&Measurement> = mains.iter().chain(&smalls).collect();
    print_calibration(a, &info, all, &file, &split)
}

/// The main shape (`--schema-template` on `--table-schema`, or the seed's), and for the
/// seed shape a small one to split per-message from per-byte cost.
fn calibration_shapes(a: &CalibrateArgs) -> Result<(Shape, Option<Shape>)> {
    let (Some(t), Some(s)) = (&a.schema_template, &a.table_schema) else {
        return Ok((Shape::seed(962), Some(Shape::seed(64))));
    };
    let template = std::fs::read_to_string(t).map_err(|e| usage(format!("--schema-template {}: {e}", t.display())))?;
    let schema_text = std::fs::read_to_string(s).map_err(|e| usage(format!("--table-schema {}: {e}", s.display())))?;
    let json: serde_json::Value = serde_json::from_str(&schema_text)
        .map_err(|e| usage(format!("--table-schema {}: not JSON: {e}", s.display())))?;
    let schema = crate::bigquery::schema::Schema::from_json(&json)
        .map_err(|e| usage(format!("--table-schema {}: {e}", s.display())))?;
    let main = Shape::generator(&t.display().to_string(), &template, schema)
        .map_err(|e| usage(format!("--schema-template: {e}")))?;
    Ok((main, None))
}

/// Measure each mode on `main` (and on `small`, when given) for `seconds` of CPU each,
/// behind one progress bar; returns the main and the small measurements.
fn measure_shapes(
    modes: &[Mode],
    seconds: f64,
    main: &Shape,
    small: Option<&Shape>,
) -> Result<(Vec<Measurement>, Vec<Measurement>)> {
    let runs = modes.len() * if small.is_some() { 2 } else { 1 };
    let b = super::ui::progress_bar((runs * 100) as u64, "calibrating {bar:40} {percent}% ({msg})");
    let mut done = 0u64;
    let mut run = |mode: Mode, shape: &Shape| -> Result<Measurement> {
        b.set_message(format!("{} · {:.0} B", mode.as_str(), shape.mean_bytes()));
        let base = done;
        let m = calibrate::measure(mode, shape, seconds, &mut |f| b.set_position(base + (f * 100.0) as u64))?;
        done += 100;
        if m.rejected > 0 {
            return Err(usage(format!(
                "{} rows of {} did not map onto the table schema: check that --table-schema matches --schema-template",
                m.rejected, shape.name
            )));
        }
        Ok(m)
    };
    let mut mains = Vec::new();
    let mut smalls = Vec::new();
    for &mode in modes {
        mains.push(run(mode, main)?);
        if let Some(s) = small {
            smalls.push(run(mode, s)?);
        }
    }
    b.finish_and_clear();
    Ok((mains, smalls))
}

/// `flexrun calibrate`'s report: the measurements, the per-message and per-byte split,
/// and the file written, in `--format`.
fn print_calibration(
    a: &CalibrateArgs,
    info: &BaselineInfo,
    all: Vec<&Measurement>,
    file: &flexrun_estimator::BaselineFile,
    split: &BTreeMap<&'static str, (f64, f64)>,
) -> Result<()> {
    #[derive(Serialize)]
    struct Report<'a> {
        measurements: Vec<&'a Measurement>,
        baseline: &'a flexrun_estimator::BaselineFile,
        output: String,
    }
    let report = || Report { measurements: all.clone(), baseline: file, output: a.output.display().to_string() };
    match a.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report())?),
        Format::Yaml => print!("{}", serde_yaml::to_string(&report())?),
        Format::Table => {
            println!("kafka-to-bq processing path on one core of {}", info.machine);
            println!(
                "{:<14} {:>10} {:>12} {:>14} {:>12} {:>10}",
                "mode", "bytes/msg", "messages", "msg/core-s", "MiB/core-s", "CPU s"
            );
            for m in &all {
                println!(
                    "{:<14} {:>10.0} {:>12} {:>14.0} {:>12.1} {:>10.2}",
                    m.mode.as_str(),
                    m.message_bytes,
                    m.messages,
                    m.messages_per_core_s,
                    m.mib_per_core_s,
                    m.cpu_s
                );
            }
            for (mode, (us, ns)) in split {
                println!("{mode}: {us:.2} vCPU-µs per message + {ns:.3} vCPU-ns per byte");
            }
            println!("wrote {} (sized at {:.0}% CPU; `flexrun estimate --baseline {0}` and `flexrun simulate --baseline {0}` read it)", a.output.display(), a.target_cpu * 100.0);
        }
    }
    Ok(())
}

/// `flexrun capacity ...`
#[derive(Debug, Args)]
pub struct CapacityArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "FLEXRUN_KAFKA")]
    pub bootstrap_server: String,
    /// Topic to load (created with --partitions if missing).
    #[arg(long, default_value = "flexrun-capacity")]
    pub topic: String,
    /// Partitions for a new topic.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(i32).range(1..=10_000))]
    pub partitions: i32,
    /// Message sizes to search, comma-separated (e.g. 100,1KiB,10KiB).
    #[arg(long, value_delimiter = ',', default_value = "100,1KiB,10KiB", value_parser = |s: &str| flexrun_estimator::parse_size(s).map_err(|e| e.to_string()))]
    pub sizes: Vec<f64>,
    /// Lowest offered rate, messages/s.
    #[arg(long, default_value_t = 1000.0, allow_hyphen_values = true, value_parser = super::flags::positive_f64)]
    pub low: f64,
    /// Highest offered rate, messages/s.
    #[arg(long, default_value_t = 200_000.0, allow_hyphen_values = true, value_parser = super::flags::positive_f64)]
    pub high: f64,
    /// Stop when the bracket is within this many messages/s (default: 5% of --high).
    #[arg(long, allow_hyphen_values = true, value_parser = super::flags::positive_f64)]
    pub tolerance: Option<f64>,
    /// Length of each trial.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub trial: Duration,
    /// p99 produce or end-to-end latency above which a rate is congested.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub p99_limit: Duration,
    /// Lag growth over a trial's second half, in seconds of input, that counts as congestion.
    #[arg(long, default_value_t = 0.25, allow_hyphen_values = true, value_parser = super::flags::positive_f64)]
    pub lag_growth_limit: f64,
    /// Let the probe's consumer read at most this many messages/s: a downstream of known
    /// capacity, so that the search can be checked against a boundary known in advance
    /// (the tests do), or a slow sink modelled. Default: as fast as the broker serves.
    #[arg(long, allow_hyphen_values = true, value_parser = super::flags::positive_f64)]
    pub consumer_limit: Option<f64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Draw the boundary (SVG).
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// One size's result.
#[derive(Debug, Clone, Serialize)]
pub struct SizeResult {
    /// Bytes per message.
    pub message_bytes: usize,
    /// Highest sustained messages/s.
    pub messages_per_s: f64,
    /// The same in MB/s (10^6 bytes).
    pub mb_per_s: f64,
    /// The search's outcome.
    pub boundary: Boundary,
    /// Each trial's measurements.
    pub trials: Vec<TrialDetail>,
}

/// Validate `flexrun capacity`'s flags; returns the search space.
pub fn capacity_space(a: &CapacityArgs) -> Result<SearchSpace> {
    if a.sizes.is_empty() {
        return Err(usage("--sizes: expected at least one message size"));
    }
    if let Some(s) = a.sizes.iter().find(|s| **s < 8.0 || **s > 10.0 * 1024.0 * 1024.0) {
        return Err(usage(format!(
            "--sizes: {s} bytes is outside 8 B to 10 MiB (a message carries an 8-byte timestamp)"
        )));
    }
    if a.trial < Duration::from_secs(1) {
        return Err(usage("--trial: expected at least 1s (a trial must see its lag over time)"));
    }
    let space = SearchSpace { low: a.low, high: a.high, tolerance: a.tolerance.unwrap_or(a.high * 0.05) };
    space.validate().map_err(|e| usage(format!("--low/--high/--tolerance: {e}")))?;
    Ok(space)
}

/// Run `flexrun capacity`: make the topic if it is missing, search each size's boundary,
/// and report.
pub async fn capacity_cmd(a: &CapacityArgs) -> Result<()> {
    let space = capacity_space(a)?;
    ensure_topic(a).await?;
    let cfg = ProbeConfig {
        bootstrap: a.bootstrap_server.clone(),
        topic: a.topic.clone(),
        trial: a.trial,
        p99_limit: a.p99_limit,
        lag_growth_limit_s: a.lag_growth_limit,
        achieved_ratio: 0.95,
        consumer_limit: a.consumer_limit,
    };
    let sizes: Vec<usize> = a.sizes.iter().map(|s| *s as usize).collect();
    let per_size = space.max_trials() as u64;
    let b = super::ui::progress_bar(
        per_size * sizes.len() as u64,
        "capacity search {bar:40} {pos}/{len} trials at most ({msg})",
    );
    let results = tokio::task::spawn_blocking(move || -> Result<Vec<SizeResult>> {
        let mut out = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            out.push(search_size(&cfg, space, size, &b)?);
            b.set_position(per_size * (i as u64 + 1));
        }
        b.finish_and_clear();
        Ok(out)
    })
    .await
    .map_err(|e| anyhow!("the search task failed: {e}"))??;
    if let Some(p) = &a.plot {
        plot_boundary(p, &a.bootstrap_server, &results)?;
    }
    match a.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&results)?),
        Format::Yaml => print!("{}", serde_yaml::to_string(&results)?),
        Format::Table => print_capacity(a, &results),
    }
    Ok(())
}

/// Create `--topic` with `--partitions` when the broker does not have it.
async fn ensure_topic(a: &CapacityArgs) -> Result<()> {
    let (bootstrap, topic) = (a.bootstrap_server.clone(), a.topic.clone());
    let existing = tokio::task::spawn_blocking(move || capacity::topic_partitions(&bootstrap, &topic))
        .await
        .map_err(|e| anyhow!("metadata task: {e}"))??;
    if existing.is_none() {
        crate::kafka::create_topic(&a.bootstrap_server, &a.topic, a.partitions)
            .await
            .map_err(|e| anyhow!("cannot create topic {} on {}: {e}", a.topic, a.bootstrap_server))?;
    }
    Ok(())
}

/// One message size's boundary: the search over `space`, a trial per step. A trial that
/// fails to run counts as tripped, and its error ends the command once the search is done.
fn search_size(cfg: &ProbeConfig, space: SearchSpace, size: usize, b: &indicatif::ProgressBar) -> Result<SizeResult> {
    let mut details = Vec::new();
    let mut err = None;
    let boundary = flexrun_estimator::search(space, |rate| {
        b.set_message(format!("{size} B at {rate:.0} msg/s"));
        b.inc(1);
        match capacity::trial(cfg, size, rate) {
            Ok((t, d)) => {
                details.push(d);
                t
            }
            Err(e) => {
                let t =
                    flexrun_estimator::Trial { offered: rate, achieved: 0.0, tripped: Some(format!("error: {e:#}")) };
                err.get_or_insert(e);
                t
            }
        }
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    Ok(SizeResult {
        message_bytes: size,
        messages_per_s: boundary.safe,
        mb_per_s: boundary.safe * size as f64 / 1e6,
        boundary,
        trials: details,
    })
}

/// `flexrun capacity`'s table: each size's boundary and what tripped above it.
fn print_capacity(a: &CapacityArgs, results: &[SizeResult]) {
    println!(
        "capacity boundary of {} (topic {}, {}-s trials, p99 limit {} ms)",
        a.bootstrap_server,
        a.topic,
        a.trial.as_secs_f64(),
        a.p99_limit.as_millis()
    );
    println!("{:>10} {:>12} {:>10} {:>7}  above it (tripped)", "bytes/msg", "messages/s", "MB/s", "trials");
    for r in results {
        let why = if r.boundary.above_range {
            format!("nothing tripped up to --high {:.0}: raise it", a.high)
        } else if r.boundary.below_range {
            format!("below --low {:.0}: {}", a.low, r.boundary.tripped.clone().unwrap_or_default())
        } else {
            format!("{:.0} msg/s: {}", r.boundary.failed.unwrap_or(0.0), r.boundary.tripped.clone().unwrap_or_default())
        };
        println!(
            "{:>10} {:>12.0} {:>10.2} {:>7}  {}",
            r.message_bytes,
            r.messages_per_s,
            r.mb_per_s,
            r.boundary.trials.len(),
            why
        );
    }
}

fn plot_boundary(path: &std::path::Path, broker: &str, results: &[SizeResult]) -> Result<()> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| anyhow!("cannot draw {}: {e}", path.display());
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let x_max = results.iter().map(|r| r.message_bytes as f64).fold(16.0, f64::max) * 2.0;
    let x_min = results.iter().map(|r| r.message_bytes as f64).fold(f64::INFINITY, f64::min).min(x_max) / 2.0;
    let y_max = results.iter().map(|r| r.messages_per_s).fold(1.0, f64::max) * 1.2;
    let mut c = ChartBuilder::on(&root)
        .caption(format!("capacity boundary of {broker}: sustainable messages/s by message size"), ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d((x_min..x_max).log_scale(), 0.0..y_max)
        .map_err(|e| err(&e))?;
    c.configure_mesh().x_desc("bytes per message (log)").y_desc("messages/s").draw().map_err(|e| err(&e))?;
    let pts: Vec<(f64, f64)> = results.iter().map(|r| (r.message_bytes as f64, r.messages_per_s)).collect();
    c.draw_series(LineSeries::new(pts.clone(), &BLUE)).map_err(|e| err(&e))?;
    c.draw_series(results.iter().map(|r| Circle::new((r.message_bytes as f64, r.messages_per_s), 5, BLUE.filled())))
        .map_err(|e| err(&e))?;
    c.draw_series(results.iter().map(|r| {
        Text::new(
            format!("{:.1} MB/s", r.mb_per_s),
            (r.message_bytes as f64, r.messages_per_s * 1.05),
            ("sans-serif", 14),
        )
    }))
    .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
