//! What-if sweeps: many configurations of one job, simulated in parallel, compared on
//! cost against p99 latency.
//!
//! The command line builds one [`Candidate`] per combination of `--sweep` values; this
//! module runs them on every core ([`run`]), marks the Pareto front of cost against p99
//! ([`mark_front`]), picks the cheapest configuration within a p99 limit
//! ([`cheapest_within`]), and writes the rows as CSV ([`write_csv`]) or a chart
//! ([`write_svg`]).
//!
//! Each configuration carries its own seed, so a sweep's rows do not depend on how the
//! threads were scheduled: the same sweep gives the same table.
//!
//! ```
//! use flexrun_simulate::sweep::{mark_front, SweepRow};
//! let row = |cost: f64, p99: f64| SweepRow { cost_per_month: cost, p99_ms: p99, ..SweepRow::default() };
//! let mut rows = vec![row(100.0, 900.0), row(80.0, 2000.0), row(120.0, 950.0)];
//! mark_front(&mut rows);
//! // The third costs more and waits longer than the first: it is dominated.
//! assert_eq!(rows.iter().map(|r| r.pareto).collect::<Vec<_>>(), [true, true, false]);
//! ```

use super::{SimConfig, SimSummary};
use rayon::prelude::*;
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One configuration to simulate.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The swept settings, as `(key, value)` in the order the keys were given.
    pub settings: Vec<(String, String)>,
    /// The whole configuration.
    pub config: SimConfig,
}

/// One swept setting of a row.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Setting {
    /// The sweep key (e.g. `worker-machine-type`).
    pub key: String,
    /// Its value in this configuration.
    pub value: String,
}

/// The result of one configuration, after warm-up.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct SweepRow {
    /// The swept settings.
    pub settings: Vec<Setting>,
    /// Dollars per month (730 hours) for the mean billed pool and Streaming Engine.
    pub cost_per_month: f64,
    /// Mean running workers.
    pub workers_mean: f64,
    /// Mean CPU of the running workers (0 to 1).
    pub mean_cpu: f64,
    /// Latency including the wait in Kafka, P50, ms.
    pub p50_ms: f64,
    /// Latency including the wait in Kafka, P99, ms: what the front and the limit use,
    /// since a pool that falls behind shows up here and not in the stage latency.
    pub p99_ms: f64,
    /// Stage latency excluding the input stage (Dataflow's metric), P99, ms.
    pub stage_p99_ms: f64,
    /// The largest backlog after warm-up, MiB.
    pub backlog_peak_mib: f64,
    /// What limited the job: `none`, `partitions`, `max-workers` or `write-quota`.
    pub bottleneck: String,
    /// Google's limits this configuration crosses, each with what to do.
    pub limits: Vec<String>,
    /// On the Pareto front of cost against p99 (no other row is cheaper and faster).
    pub pareto: bool,
}

impl SweepRow {
    fn from_summary(settings: &[(String, String)], s: &SimSummary, hours_per_month: f64) -> SweepRow {
        SweepRow {
            settings: settings.iter().map(|(k, v)| Setting { key: k.clone(), value: v.clone() }).collect(),
            cost_per_month: s.cost_per_hour * hours_per_month,
            workers_mean: s.workers_mean,
            mean_cpu: s.mean_cpu,
            p50_ms: s.end_to_end_ms[0],
            p99_ms: s.end_to_end_ms[2],
            stage_p99_ms: s.latency_ms[2],
            backlog_peak_mib: s.backlog_peak_mib,
            bottleneck: s.bottleneck.short().into(),
            limits: s.limits.iter().map(|l| l.message.clone()).collect(),
            pareto: false,
        }
    }

    /// The settings as `key=value` pairs joined by spaces.
    pub fn label(&self) -> String {
        self.settings.iter().map(|s| format!("{}={}", s.key, s.value)).collect::<Vec<_>>().join(" ")
    }
}

/// Simulate every candidate on all cores, in candidate order, and mark the front.
/// `progress` is called with the number of finished configurations.
pub fn run(candidates: &[Candidate], progress: &(dyn Fn(usize) + Sync)) -> Vec<SweepRow> {
    run_until(candidates, progress, &std::sync::atomic::AtomicBool::new(false)).expect("never stopped")
}

/// [`run`], given up (None) as soon as `stop` is set: every running configuration stops
/// within one simulated step, and none is started after.
pub fn run_until(
    candidates: &[Candidate],
    progress: &(dyn Fn(usize) + Sync),
    stop: &std::sync::atomic::AtomicBool,
) -> Option<Vec<SweepRow>> {
    let hours_per_month = flexrun_estimator::Pricing::us_central1().hours_per_month;
    let finished = AtomicUsize::new(0);
    let rows: Option<Vec<SweepRow>> = candidates
        .par_iter()
        .map(|c| {
            let report = crate::engine::run_until(&c.config, &mut |_| {}, stop)?;
            progress(finished.fetch_add(1, Ordering::Relaxed) + 1);
            Some(SweepRow::from_summary(&c.settings, &report.summary, hours_per_month))
        })
        .collect();
    let mut rows = rows?;
    mark_front(&mut rows);
    Some(rows)
}

/// Mark the rows on the Pareto front of cost against p99: those that no other row
/// beats on both (at most equal on one and strictly better on the other). Of rows
/// with the same cost and p99, all are on the front.
pub fn mark_front(rows: &mut [SweepRow]) {
    let points: Vec<(f64, f64)> = rows.iter().map(|r| (r.cost_per_month, r.p99_ms)).collect();
    for (i, row) in rows.iter_mut().enumerate() {
        let (c, l) = points[i];
        row.pareto = !points.iter().any(|&(oc, ol)| oc <= c && ol <= l && (oc < c || ol < l));
    }
}

/// The cheapest row whose p99 is within `limit_ms`; of equal costs, the lower p99.
pub fn cheapest_within(rows: &[SweepRow], limit_ms: f64) -> Option<usize> {
    rows.iter()
        .enumerate()
        .filter(|(_, r)| r.p99_ms <= limit_ms)
        .min_by(|(_, a), (_, b)| a.cost_per_month.total_cmp(&b.cost_per_month).then(a.p99_ms.total_cmp(&b.p99_ms)))
        .map(|(i, _)| i)
}

/// Write the rows as CSV: one column per swept key, then the results.
pub fn write_csv(out: &mut dyn Write, rows: &[SweepRow]) -> std::io::Result<()> {
    let keys: Vec<&str> = rows.first().map(|r| r.settings.iter().map(|s| s.key.as_str()).collect()).unwrap_or_default();
    let mut head: Vec<&str> = keys.clone();
    head.extend([
        "cost_per_month_usd",
        "workers_mean",
        "mean_cpu",
        "p50_ms",
        "p99_ms",
        "stage_p99_ms",
        "backlog_peak_mib",
        "bottleneck",
        "pareto",
    ]);
    writeln!(out, "{}", head.join(","))?;
    for r in rows {
        let mut cells: Vec<String> = r.settings.iter().map(|s| csv_cell(&s.value)).collect();
        cells.extend([
            format!("{:.2}", r.cost_per_month),
            format!("{:.2}", r.workers_mean),
            format!("{:.4}", r.mean_cpu),
            format!("{:.1}", r.p50_ms),
            format!("{:.1}", r.p99_ms),
            format!("{:.1}", r.stage_p99_ms),
            format!("{:.2}", r.backlog_peak_mib),
            r.bottleneck.clone(),
            r.pareto.to_string(),
        ]);
        writeln!(out, "{}", cells.join(","))?;
    }
    Ok(())
}

fn csv_cell(v: &str) -> String {
    if v.contains([',', '"', '\n']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

/// Draw cost per month against p99 (log scale), with the front joined and highlighted,
/// the p99 limit as a vertical line, and the chosen configuration labelled.
pub fn write_svg(
    path: &Path,
    title: &str,
    rows: &[SweepRow],
    limit_ms: Option<f64>,
    chosen: Option<usize>,
) -> Result<(), String> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    let root = SVGBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let p99 = |r: &SweepRow| r.p99_ms.max(1.0);
    let x_min = rows.iter().map(p99).fold(f64::INFINITY, f64::min).min(limit_ms.unwrap_or(f64::INFINITY));
    let x_max = rows.iter().map(p99).fold(1.0, f64::max).max(limit_ms.unwrap_or(0.0));
    let y_max = rows.iter().map(|r| r.cost_per_month).fold(1.0, f64::max) * 1.1;
    let (x0, x1) = (x_min.max(1.0) / 1.5, x_max * 1.5);
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale(), 0.0..y_max)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("p99 latency incl. Kafka wait (ms, log scale)")
        .y_desc("cost per month (USD)")
        .draw()
        .map_err(|e| err(&e))?;
    let others = rows.iter().filter(|r| !r.pareto).map(|r| Circle::new((p99(r), r.cost_per_month), 4, BLUE.mix(0.5)));
    c.draw_series(others).map_err(|e| err(&e))?.label("configuration").legend(|(x, y)| Circle::new((x, y), 4, BLUE));
    let mut front: Vec<(f64, f64)> = rows.iter().filter(|r| r.pareto).map(|r| (p99(r), r.cost_per_month)).collect();
    front.sort_by(|a, b| a.0.total_cmp(&b.0));
    c.draw_series(LineSeries::new(front.clone(), RED.stroke_width(2)))
        .map_err(|e| err(&e))?
        .label("Pareto front")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], RED));
    c.draw_series(front.iter().map(|&p| Circle::new(p, 6, RED.filled()))).map_err(|e| err(&e))?;
    if let Some(l) = limit_ms {
        c.draw_series(LineSeries::new(vec![(l, 0.0), (l, y_max)], BLACK.mix(0.6)))
            .map_err(|e| err(&e))?
            .label("p99 limit")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK));
    }
    if let Some(r) = chosen.and_then(|i| rows.get(i)) {
        let at = (p99(r), r.cost_per_month);
        c.draw_series([Circle::new(at, 9, GREEN.stroke_width(3))]).map_err(|e| err(&e))?;
        c.draw_series([Text::new(format!("cheapest within the limit: {}", r.label()), at, ("sans-serif", 14))])
            .map_err(|e| err(&e))?;
    }
    c.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cost: f64, p99: f64) -> SweepRow {
        SweepRow { cost_per_month: cost, p99_ms: p99, ..SweepRow::default() }
    }

    #[test]
    fn the_front_keeps_exactly_the_undominated_rows() {
        let mut rows = vec![row(100.0, 900.0), row(80.0, 2000.0), row(120.0, 950.0), row(80.0, 2500.0), row(60.0, 1e6)];
        mark_front(&mut rows);
        let front: Vec<bool> = rows.iter().map(|r| r.pareto).collect();
        assert_eq!(front, [true, true, false, false, true]);
        // Equal rows do not dominate each other.
        let mut same = vec![row(10.0, 10.0), row(10.0, 10.0)];
        mark_front(&mut same);
        assert!(same.iter().all(|r| r.pareto));
    }

    #[test]
    fn the_cheapest_row_within_the_limit_is_chosen() {
        let rows = vec![row(100.0, 900.0), row(80.0, 2000.0), row(80.0, 1500.0), row(60.0, 1e6)];
        assert_eq!(cheapest_within(&rows, 2000.0), Some(2), "of two equal costs, the lower p99");
        assert_eq!(cheapest_within(&rows, 1000.0), Some(0));
        assert_eq!(cheapest_within(&rows, 100.0), None);
    }

    #[test]
    fn csv_has_a_column_per_key_and_quotes_commas() {
        let mut r = row(1.0, 2.0);
        r.settings = vec![Setting { key: "message-size".into(), value: "normal:1024,200".into() }];
        let mut out = Vec::new();
        write_csv(&mut out, &[r]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("message-size,cost_per_month_usd,"), "{}", lines[0]);
        assert!(lines[1].starts_with("\"normal:1024,200\",1.00,"), "{}", lines[1]);
    }
}
