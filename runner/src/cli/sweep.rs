//! `flexrun simulate --sweep KEY=V1,V2,...`: what-if sweeps over the run flags.
//!
//! Each `--sweep` names one setting and its values; the sweep simulates every
//! combination (the cartesian product, in the order the keys were given) with the other
//! flags as given, on all cores, and prints one row per configuration with the Pareto
//! front of cost against p99 marked. `--p99-limit` picks the cheapest configuration
//! within it. The pure part (running, the front, the choice, CSV and the chart) is in
//! `flexrun_simulate::sweep`; this file turns keys and values into flags.

use super::flags::hint_in_range;
use super::simulate::{config, SimFormat, SimulateArgs};
use crate::usage;
use anyhow::Result;
use flexrun_estimator::parse_duration;
use flexrun_simulate::sweep::{self, Candidate, SweepRow};
use flexrun_simulate::MessageSize;

/// Most configurations one sweep may have.
pub const MAX_CONFIGURATIONS: usize = 10_000;

/// A setting a sweep can vary. Each is a `flexrun simulate` flag or template parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepKey {
    /// `--worker-machine-type`.
    MachineType,
    /// `--worker-utilization-hint`.
    UtilizationHint,
    /// `--autoscaling-policy` (`dataflow`, `ds2`), or `none` for `--autoscaling-algorithm NONE`.
    Policy,
    /// `--num-workers`.
    NumWorkers,
    /// `--min-num-workers`.
    MinWorkers,
    /// `--max-workers`.
    MaxWorkers,
    /// `--partitions`.
    Partitions,
    /// `numStorageWriteApiStreams`.
    Streams,
    /// `exactly-once` or `at-least-once` (`useStorageWriteApiAtLeastOnce`).
    Mode,
    /// `--message-size`.
    MessageSize,
    /// `storageWriteApiTriggeringFrequencySec`.
    TriggeringFrequency,
    /// `--autoscaling-interval`.
    Interval,
}

/// Every key with the names it answers to (the first is the one rows show).
const KEYS: &[(SweepKey, &[&str])] = &[
    (SweepKey::MachineType, &["worker-machine-type", "machine-type"]),
    (SweepKey::UtilizationHint, &["worker-utilization-hint", "utilization-hint", "hint"]),
    (SweepKey::Policy, &["autoscaling-policy", "policy"]),
    (SweepKey::NumWorkers, &["num-workers"]),
    (SweepKey::MinWorkers, &["min-num-workers", "min-workers"]),
    (SweepKey::MaxWorkers, &["max-workers", "max-num-workers"]),
    (SweepKey::Partitions, &["partitions"]),
    (SweepKey::Streams, &["streams", "numStorageWriteApiStreams"]),
    (SweepKey::Mode, &["mode"]),
    (SweepKey::MessageSize, &["message-size"]),
    (SweepKey::TriggeringFrequency, &["triggering-frequency", "storageWriteApiTriggeringFrequencySec"]),
    (SweepKey::Interval, &["autoscaling-interval"]),
];

impl SweepKey {
    /// The key named `s` (flag names with or without `--`).
    pub fn parse(s: &str) -> Result<SweepKey, String> {
        let s = s.trim().trim_start_matches("--");
        KEYS.iter().find(|(_, names)| names.contains(&s)).map(|(k, _)| *k).ok_or_else(|| {
            let known: Vec<&str> = KEYS.iter().map(|(_, n)| n[0]).collect();
            format!("--sweep: unknown key {s:?}: expected one of {}", known.join(", "))
        })
    }

    /// The name rows show.
    pub fn name(self) -> &'static str {
        KEYS.iter().find(|(k, _)| *k == self).map(|(_, n)| n[0]).expect("every key is listed")
    }

    /// Set this key to `v` in `a`, or say why `v` is not a value of it.
    pub fn apply(self, a: &mut SimulateArgs, v: &str) -> Result<(), String> {
        let bad = |e: String| format!("--sweep {}={v}: {e}", self.name());
        let workers = |v: &str| match v.parse::<u32>() {
            Ok(n) if (1..=1000).contains(&n) => Ok(n),
            _ => Err(bad("expected a whole number of workers from 1 to 1000".into())),
        };
        let s = &mut a.scaling;
        match self {
            SweepKey::MachineType => s.worker_machine_type = Some(v.into()),
            SweepKey::UtilizationHint => s.worker_utilization_hint = Some(hint_in_range(v).map_err(bad)?),
            SweepKey::Policy => match v {
                "dataflow" | "ds2" => {
                    (s.autoscaling_algorithm, s.autoscaling_policy) = ("THROUGHPUT_BASED".into(), v.into())
                }
                "none" | "NONE" => s.autoscaling_algorithm = "NONE".into(),
                _ => return Err(bad("expected dataflow, ds2 or none".into())),
            },
            SweepKey::NumWorkers => s.num_workers = Some(workers(v)?),
            SweepKey::MinWorkers => s.min_num_workers = Some(workers(v)?),
            SweepKey::MaxWorkers => s.max_workers = Some(workers(v)?),
            SweepKey::Partitions => {
                a.partitions = match v.parse::<u32>() {
                    Ok(n) if (1..=1_000_000).contains(&n) => n,
                    _ => return Err(bad("expected a whole number of partitions from 1 to 1000000".into())),
                }
            }
            SweepKey::Streams => a.overrides.push(("numStorageWriteApiStreams".into(), v.into())),
            SweepKey::Mode => {
                let alo = match v {
                    "exactly-once" => "false",
                    "at-least-once" => "true",
                    _ => return Err(bad("expected exactly-once or at-least-once".into())),
                };
                a.overrides.push(("useStorageWriteApiAtLeastOnce".into(), alo.into()));
            }
            SweepKey::MessageSize => a.message_size = MessageSize::parse(v).map_err(|e| bad(e.to_string()))?,
            SweepKey::TriggeringFrequency => {
                a.overrides.push(("storageWriteApiTriggeringFrequencySec".into(), v.into()))
            }
            SweepKey::Interval => a.scaling.autoscaling_interval = parse_duration(v).map_err(bad)?,
        }
        Ok(())
    }
}

/// One `--sweep`: a key and its values.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// What varies.
    pub key: SweepKey,
    /// Its values, as given.
    pub values: Vec<String>,
}

impl Axis {
    /// Parse `KEY=V1,V2,...`. Values of `message-size` may contain commas
    /// (`normal:1024,200`): separate them with `;` instead.
    pub fn parse(s: &str) -> Result<Axis, String> {
        let (k, vs) = s.split_once('=').ok_or_else(|| format!("--sweep {s:?}: expected KEY=V1,V2,..."))?;
        let key = SweepKey::parse(k)?;
        let sep = if key == SweepKey::MessageSize && vs.contains(';') { ';' } else { ',' };
        let values: Vec<String> = vs.split(sep).map(|v| v.trim().to_string()).collect();
        if values.iter().any(String::is_empty) {
            return Err(format!("--sweep {s:?}: a value is empty; expected KEY=V1,V2,..."));
        }
        Ok(Axis { key, values })
    }
}

/// Every combination of the axes as `(key, value)` lists, the last axis varying fastest.
pub fn combinations(axes: &[Axis]) -> Vec<Vec<(SweepKey, String)>> {
    axes.iter().fold(vec![Vec::new()], |acc, axis| {
        acc.iter()
            .flat_map(|prefix| {
                axis.values.iter().map(move |v| {
                    let mut c = prefix.clone();
                    c.push((axis.key, v.clone()));
                    c
                })
            })
            .collect()
    })
}

/// The candidates of a sweep: each combination applied to the flags and checked as a
/// single run's flags would be (any bad one is a usage error naming it).
pub fn candidates(a: &SimulateArgs) -> Result<Vec<Candidate>> {
    let axes: Vec<Axis> = a.sweep.iter().map(|s| Axis::parse(s)).collect::<Result<_, _>>().map_err(usage)?;
    for (i, x) in axes.iter().enumerate() {
        if axes[..i].iter().any(|y| y.key == x.key) {
            return Err(usage(format!("--sweep {} is given twice: give its values in one --sweep", x.key.name())));
        }
    }
    let total = axes.iter().map(|x| x.values.len()).product::<usize>();
    if total > MAX_CONFIGURATIONS {
        return Err(usage(format!("--sweep: {total} configurations; at most {MAX_CONFIGURATIONS} are allowed")));
    }
    combinations(&axes)
        .into_iter()
        .map(|combo| {
            let mut args = a.clone();
            for (k, v) in &combo {
                k.apply(&mut args, v).map_err(usage)?;
            }
            let settings: Vec<(String, String)> =
                combo.iter().map(|(k, v)| (k.name().to_string(), v.clone())).collect();
            let label = settings.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
            let config = config(&args).map_err(|e| usage(format!("configuration {label}: {e}")))?;
            Ok(Candidate { settings, config })
        })
        .collect()
}

/// Run `flexrun simulate --sweep ...`.
pub fn run(a: &SimulateArgs) -> Result<()> {
    let cands = candidates(a)?;
    let bar = super::ui::progress_bar(cands.len() as u64, "sweeping {bar:40} {pos}/{len} configurations ({elapsed})");
    let started = std::time::Instant::now();
    let rows = sweep::run(&cands, &|done| bar.set_position(done as u64));
    bar.finish_and_clear();
    let wall = started.elapsed();
    tracing::info!(configurations = rows.len(), wall_ms = wall.as_millis() as u64, "sweep finished");
    let limit_ms = a.p99_limit.map(|d| d.as_secs_f64() * 1000.0);
    let chosen = limit_ms.and_then(|l| sweep::cheapest_within(&rows, l));
    if let Some(p) = &a.plot {
        let title = format!("cost against p99: {} configurations", rows.len());
        sweep::write_svg(p, &title, &rows, limit_ms, chosen).map_err(|e| anyhow::anyhow!(e))?;
    }
    match a.format {
        SimFormat::Json => {
            let out = serde_json::json!({ "configurations": rows, "p99_limit_ms": limit_ms, "chosen": chosen });
            println!("{}", serde_json::to_string_pretty(&out)?)
        }
        SimFormat::Yaml => print!("{}", serde_yaml::to_string(&rows)?),
        SimFormat::Csv => sweep::write_csv(&mut std::io::stdout().lock(), &rows)?,
        SimFormat::Table => print_table(&cands, &rows, limit_ms, chosen, wall),
    }
    Ok(())
}

fn print_table(
    cands: &[Candidate],
    rows: &[SweepRow],
    limit_ms: Option<f64>,
    chosen: Option<usize>,
    wall: std::time::Duration,
) {
    let hours = cands.first().map_or(0.0, |c| c.config.workload.duration_s / 3600.0);
    println!(
        "{} configurations × {hours:.1} h simulated in {:.2} s (* = on the Pareto front of cost against p99)",
        rows.len(),
        wall.as_secs_f64()
    );
    let keys: Vec<&str> = rows.first().map(|r| r.settings.iter().map(|s| s.key.as_str()).collect()).unwrap_or_default();
    let widths: Vec<usize> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| rows.iter().map(|r| r.settings[i].value.len()).max().unwrap_or(0).max(k.len()))
        .collect();
    let mut head: String = keys.iter().zip(&widths).map(|(k, w)| format!("{k:<w$} ")).collect();
    head.push_str(&format!(
        "{:>11} {:>8} {:>5} {:>9} {:>9} {:>11} {:<11}",
        "USD/month", "workers", "CPU", "p50 ms", "p99 ms", "backlog MiB", "bottleneck"
    ));
    println!("  {head}");
    for (i, r) in rows.iter().enumerate() {
        let mark = match (chosen == Some(i), r.pareto) {
            (true, _) => "→",
            (false, true) => "*",
            _ => " ",
        };
        let mut line: String = r.settings.iter().zip(&widths).map(|(s, w)| format!("{:<w$} ", s.value)).collect();
        line.push_str(&format!(
            "{:>11.0} {:>8.1} {:>4.0}% {:>9.0} {:>9.0} {:>11.1} {:<11}",
            r.cost_per_month,
            r.workers_mean,
            r.mean_cpu * 100.0,
            r.p50_ms,
            r.p99_ms,
            r.backlog_peak_mib,
            r.bottleneck
        ));
        println!("{mark} {line}");
    }
    match (limit_ms, chosen) {
        (Some(l), Some(i)) => {
            println!("→ cheapest with p99 ≤ {l:.0} ms: {} at {:.0} USD/month", rows[i].label(), rows[i].cost_per_month)
        }
        (Some(l), None) => {
            let fastest = rows.iter().min_by(|a, b| a.p99_ms.total_cmp(&b.p99_ms));
            println!(
                "no configuration has p99 ≤ {l:.0} ms; the fastest is {} at {:.0} ms",
                fastest.map(SweepRow::label).unwrap_or_default(),
                fastest.map_or(0.0, |r| r.p99_ms)
            )
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_parse_and_combine_in_order() {
        let a = Axis::parse("machine-type=e2-standard-2,n2-standard-4").unwrap();
        assert_eq!(a.key, SweepKey::MachineType);
        let b = Axis::parse("--hint=0.6,0.8").unwrap();
        let c = Axis::parse("message-size=normal:1024,200;1KiB").unwrap();
        assert_eq!(c.values, ["normal:1024,200", "1KiB"]);
        let combos = combinations(&[a, b]);
        assert_eq!(combos.len(), 4);
        assert_eq!(
            combos[1],
            vec![(SweepKey::MachineType, "e2-standard-2".into()), (SweepKey::UtilizationHint, "0.8".into())]
        );
        for bad in ["machine-type", "colour=red", "hint=0.6,,0.8"] {
            assert!(Axis::parse(bad).is_err(), "{bad}");
        }
    }
}
