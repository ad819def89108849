//! The estimate: workers from the two-part CPU model, then the whole pipeline's bill.
//!
//! vCPUs busy = messages/s × (vCPU-µs per message + vCPU-ns per byte × message size);
//! workers = vCPUs busy ÷ (vCPUs per worker × the baseline's mean CPU). SECU scale with
//! bytes, as Google's sizing rule scales them. BigQuery's lines bill the rows' bytes by
//! its data size calculation ([`crate::rowsize`]), estimated from the table and the
//! message size unless given.

use crate::baseline::{BaselineError, BaselineFile, CpuTerms, Mode};
use crate::pipeline::{self, Line, PipelineOptions, Totals};
use crate::pricing::{Commitment, Pricing};
use crate::rowsize::{self, Column};
use crate::units::{Rate, MIB};
use serde::{Deserialize, Serialize};

/// What to estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Input throughput, bytes per second.
    pub throughput_bytes_s: f64,
    /// Message size, bytes (messages/s = throughput ÷ this).
    pub message_bytes: f64,
    /// Delivery mode.
    pub mode: Mode,
    /// Worker machine type.
    pub machine_type: String,
    /// Committed use discount.
    pub commitment: Commitment,
    /// The lines to price and what they assume.
    pub pipeline: PipelineOptions,
    /// Billed bytes per BigQuery row when known; None estimates them from `table`.
    pub row_bytes: Option<f64>,
    /// The table's columns; None is seed 001's table (an integer and a string).
    pub table: Option<Vec<Column>>,
    /// The destination dataset's location (`US`, `EU` or a region): which Storage Write
    /// quotas apply ([`crate::limits`]).
    #[serde(default = "default_location")]
    pub dataset_location: String,
}

/// Where a new BigQuery dataset goes when no location is given: the US multi-region.
pub const DEFAULT_DATASET_LOCATION: &str = "US";

fn default_location() -> String {
    DEFAULT_DATASET_LOCATION.into()
}

impl Request {
    /// A request for the whole pipeline with the default assumptions.
    pub fn new(
        throughput_bytes_s: f64,
        message_bytes: f64,
        mode: Mode,
        machine_type: &str,
        commitment: Commitment,
    ) -> Request {
        Request {
            throughput_bytes_s,
            message_bytes,
            mode,
            machine_type: machine_type.into(),
            commitment,
            pipeline: PipelineOptions::default(),
            row_bytes: None,
            table: None,
            dataset_location: default_location(),
        }
    }

    /// The one builder from what a user asks for (`flexrun estimate`, `flexrun export` and
    /// the web page alike): `rate` of messages `message_bytes` in size, or the baseline's
    /// size, or [`DEFAULT_MESSAGE_BYTES`]; the default assumptions otherwise (the caller
    /// sets the pipeline, row and dataset fields it takes).
    pub fn for_rate(
        rate: Rate,
        message_bytes: Option<f64>,
        baseline: &BaselineFile,
        mode: Mode,
        machine_type: &str,
        commitment: Commitment,
    ) -> Request {
        let msg = message_bytes.or(baseline.message_bytes).unwrap_or(DEFAULT_MESSAGE_BYTES);
        Request::new(rate.bytes_per_second(msg), msg, mode, machine_type, commitment)
    }
}

/// The message size an estimate assumes when neither the request nor the baseline gives
/// one, bytes.
pub const DEFAULT_MESSAGE_BYTES: f64 = 1000.0;

/// One line of the bill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostItem {
    /// The part of the pipeline it belongs to.
    pub line: Line,
    /// What is billed.
    pub item: String,
    /// How much of it (for storage, month 1's average).
    pub quantity: f64,
    /// In what unit.
    pub unit: String,
    /// List price per unit (per unit-hour for Dataflow's resources, per GiB ingested,
    /// per GiB-month stored).
    pub unit_price: f64,
    /// Effective dollars per hour in month 1 (free tiers taken off).
    pub per_hour: f64,
    /// Dollars in month 1.
    pub per_month: f64,
    /// Dollars in month 12.
    pub per_month_12: f64,
    /// Dollars a month the free tier takes off, in month 1.
    #[serde(default)]
    pub free_per_month: f64,
}

/// The result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The request.
    pub request: Request,
    /// Throughput in MiB/s.
    pub throughput_mib_s: f64,
    /// Messages per second.
    pub messages_per_s: f64,
    /// The CPU model's two terms.
    pub cpu: CpuTerms,
    /// vCPUs kept busy.
    pub vcpus_busy: f64,
    /// Throughput ÷ the baseline's throughput (informational).
    pub scaling_factor: f64,
    /// The publication's own rule of thumb, beside the model.
    pub rule_of_thumb: RuleOfThumb,
    /// Workers needed, unrounded.
    pub workers_exact: f64,
    /// Workers billed (rounded up, at least 1).
    pub workers: u32,
    /// vCPUs billed.
    pub vcpus: f64,
    /// Memory billed, GB.
    pub memory_gb: f64,
    /// Persistent disk billed, GB.
    pub disk_gb: f64,
    /// Streaming Engine compute units per hour.
    pub secu_per_hour: f64,
    /// The baseline's mean CPU (the utilization the estimate assumes).
    pub mean_cpu: f64,
    /// Billed bytes per BigQuery row.
    pub row_bytes: f64,
    /// Whether `row_bytes` was given or estimated, and from what.
    pub row_bytes_basis: String,
    /// The bill, item by item.
    pub items: Vec<CostItem>,
    /// The bill per line, month 1 and month 12, and which line dominates.
    pub totals: Totals,
    /// Effective dollars per hour in month 1, every priced line.
    pub per_hour: f64,
    /// Dollars in month 1.
    pub per_month: f64,
    /// Dollars in month 12.
    pub per_month_12: f64,
    /// Where the baseline and prices come from, and the assumptions lines are built on.
    pub notes: Vec<String>,
    /// Google's quotas and limits this pipeline crosses, each with what to do.
    pub limits: Vec<crate::limits::Crossed>,
}

/// Inputs that cannot be estimated.
#[derive(Debug, thiserror::Error)]
pub enum EstimateError {
    /// Throughput not above zero.
    #[error("invalid throughput {0}: expected a rate above 0")]
    Throughput(f64),
    /// A throughput so large that the worker count cannot be counted.
    #[error(
        "throughput {0:.3e} B/s needs more workers than can be counted ({1:.3e}); expected a rate a pipeline can carry"
    )]
    TooLarge(f64, f64),
    /// The dataset location is not one BigQuery has.
    #[error("{0}")]
    Location(String),
    /// Message size not above zero.
    #[error("invalid message size {0}: expected a size above 0 bytes")]
    MessageSize(f64),
    /// A machine type not in the pricing file.
    #[error("unknown machine type {given:?}: expected one of {known}")]
    MachineType {
        /// What was given.
        given: String,
        /// The choices.
        known: String,
    },
    /// Row bytes or a table that cannot be sized.
    #[error("{0}")]
    Row(String),
    /// Retention or another pipeline option out of range.
    #[error("{0}")]
    Pipeline(String),
    /// The baseline has no figures for the mode.
    #[error(transparent)]
    Baseline(#[from] BaselineError),
}

fn check(req: &Request) -> Result<(), EstimateError> {
    if !(req.throughput_bytes_s > 0.0 && req.throughput_bytes_s.is_finite()) {
        return Err(EstimateError::Throughput(req.throughput_bytes_s));
    }
    if !(req.message_bytes > 0.0 && req.message_bytes.is_finite()) {
        return Err(EstimateError::MessageSize(req.message_bytes));
    }
    if req.row_bytes.is_some_and(|b| !(b > 0.0 && b.is_finite())) {
        return Err(EstimateError::Row(format!(
            "invalid row bytes {:?}: expected a size above 0",
            req.row_bytes.unwrap()
        )));
    }
    crate::limits::check_location(&req.dataset_location).map_err(EstimateError::Location)?;
    req.pipeline.check().map_err(EstimateError::Pipeline)
}

/// Billed bytes per row and how they were found.
fn row_bytes(req: &Request) -> Result<(f64, String), EstimateError> {
    if let Some(b) = req.row_bytes {
        return Ok((b, format!("{b:.0} B per row, given")));
    }
    let (cols, what) = match &req.table {
        Some(c) => (c.clone(), "the table schema"),
        None => (rowsize::seed_table(), "seed 001's table (an INT64 and a STRING)"),
    };
    let b = rowsize::estimate_row_bytes(&cols, req.message_bytes).map_err(|e| EstimateError::Row(e.to_string()))?;
    Ok((b, format!("{b:.0} B per row, estimated from {what} and {:.0} B JSON messages", req.message_bytes)))
}

/// Estimate workers, SECU and the whole pipeline's cost for `req` from `baseline` and `pricing`.
pub fn estimate(
    req: &Request,
    baseline_name: &str,
    baseline: &BaselineFile,
    pricing: &Pricing,
) -> Result<Estimate, EstimateError> {
    check(req)?;
    let machine = pricing.machine_types.get(&req.machine_type).ok_or_else(|| EstimateError::MachineType {
        given: req.machine_type.clone(),
        known: pricing.machine_types.keys().cloned().collect::<Vec<_>>().join(", "),
    })?;
    // vCPUs per worker of the baseline: its machine type's, or what the file says
    // (a locally measured baseline describes one core), or else the requested machine's.
    let base_vcpus = pricing
        .machine_types
        .get(&baseline.machine_type)
        .map(|m| m.vcpus)
        .or(baseline.vcpus_per_worker)
        .unwrap_or(machine.vcpus);
    let b = baseline.for_mode(baseline_name, req.mode)?;
    let cpu = b.cpu_terms(base_vcpus);
    let msgs = req.throughput_bytes_s / req.message_bytes;
    let vcpus_busy = msgs * cpu.vcpu_s(req.message_bytes);
    let workers_exact = vcpus_busy / (machine.vcpus * b.mean_cpu.max(1e-9));
    if workers_exact.is_nan() || workers_exact > u32::MAX as f64 {
        return Err(EstimateError::TooLarge(req.throughput_bytes_s, workers_exact));
    }
    // The autoscaler's sizing rule at the baseline's measured utilization: the pool a
    // simulation of this load settles at (`simulate` aims its scale-down there too).
    let workers = flexrun_autoscaler::pool_for(vcpus_busy / machine.vcpus, b.mean_cpu);
    let w = workers as f64;
    let factor = req.throughput_bytes_s / (b.input_mib_s() * MIB);
    let secu = b.secu_per_hour * factor;
    let (row, basis) = row_bytes(req)?;
    let mut items =
        if req.pipeline.has(Line::Dataflow) { bill(w, machine, secu, req.commitment, pricing).0 } else { vec![] };
    items.extend(pipeline::items(msgs, row, req.throughput_bytes_s, &req.pipeline, pricing));
    let totals = pipeline::totals(&items);
    let notes = notes(req, baseline, b, base_vcpus, machine.vcpus, workers_exact, &cpu, &basis, pricing);
    let limits = limits_crossed(req, w, machine.vcpus);
    Ok(Estimate {
        request: req.clone(),
        throughput_mib_s: req.throughput_bytes_s / MIB,
        messages_per_s: msgs,
        cpu,
        vcpus_busy,
        scaling_factor: factor,
        rule_of_thumb: RuleOfThumb::of(b, factor),
        workers_exact,
        workers,
        vcpus: w * machine.vcpus,
        memory_gb: w * machine.memory_gb,
        disk_gb: w * pricing.default_disk_gb,
        secu_per_hour: secu,
        mean_cpu: b.mean_cpu,
        row_bytes: row,
        row_bytes_basis: basis,
        per_hour: totals.per_hour,
        per_month: totals.month_1,
        per_month_12: totals.month_12,
        items,
        totals,
        notes,
        limits,
    })
}

/// The publication's rule of thumb, as seed 001's worked example applies it: the
/// baseline's workers and SECU times the scaling factor (throughput ÷ the baseline's),
/// with the factor rounded to two decimals as the example rounds 100 MiB/s ÷ 1 GiB/s
/// (0.098) to 0.1. The model's own figures (`workers_exact`, `secu_per_hour`) use the
/// exact factor and the two-term CPU model; this is shown so a reader can match the page.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RuleOfThumb {
    /// The scaling factor, rounded to two decimals.
    pub factor: f64,
    /// The baseline's workers × the factor.
    pub workers: f64,
    /// The baseline's SECU per hour × the factor.
    pub secu_per_hour: f64,
}

impl RuleOfThumb {
    /// The rule for `factor` (unrounded) against baseline `b`.
    pub fn of(b: &crate::baseline::Baseline, factor: f64) -> RuleOfThumb {
        let factor = (factor * 100.0).round() / 100.0;
        RuleOfThumb { factor, workers: b.workers * factor, secu_per_hour: b.secu_per_hour * factor }
    }
}

/// The limits a pipeline of `workers` workers of `vcpus` vCPUs crosses at `req`'s throughput.
fn limits_crossed(req: &Request, workers: f64, vcpus: f64) -> Vec<crate::limits::Crossed> {
    let sized = crate::limits::Sized::pipeline(req.mode, req.throughput_bytes_s, workers, vcpus, &req.dataset_location);
    crate::limits::crossed(&sized, &crate::limits::Limits::google())
}

#[allow(clippy::too_many_arguments)]
fn notes(
    req: &Request,
    file: &BaselineFile,
    b: &crate::baseline::Baseline,
    base_vcpus: f64,
    vcpus: f64,
    workers_exact: f64,
    cpu: &CpuTerms,
    row_basis: &str,
    pricing: &Pricing,
) -> Vec<String> {
    let mut notes = vec![
        format!(
            "baseline: {} ({}), {} on {}, {:.1} MiB/s with {} workers at {:.0}% CPU",
            file.source,
            file.date,
            req.mode.as_str(),
            file.machine_type,
            b.input_mib_s(),
            b.workers,
            b.mean_cpu * 100.0
        ),
        format!(
            "CPU: {:.2} vCPU-µs per message + {:.3} vCPU-ns per byte ({})",
            cpu.vcpu_us_per_message,
            cpu.vcpu_ns_per_byte,
            if b.vcpu_us_per_message.is_some() {
                "the baseline's two terms"
            } else {
                "the baseline's CPU, all per byte"
            }
        ),
        format!("prices: {} {} ({})", pricing.region, pricing.source, pricing.date),
    ];
    if req.machine_type != file.machine_type {
        notes.push(format!(
            "{} has {} vCPUs against the baseline's {} on {}: assumes throughput per vCPU carries over",
            req.machine_type, vcpus, base_vcpus, file.machine_type
        ));
    }
    let w = (workers_exact - 1e-9).ceil().max(1.0);
    if workers_exact < 1.0 {
        notes.push(format!(
            "a small job: it needs {:.2} of a worker but at least 1 is billed, so fixed costs dominate ({:.0}% of the worker's cost is headroom)",
            workers_exact,
            (1.0 - workers_exact) * 100.0
        ));
    } else if (w - workers_exact) / w > 0.2 {
        notes.push(format!(
            "rounding {workers_exact:.2} workers up to {w} adds {:.0}% to the worker cost",
            (w - workers_exact) / workers_exact * 100.0
        ));
    }
    if req.commitment != Commitment::None {
        notes.push("the commitment discount covers worker vCPU, memory and SECU, not persistent disk".into());
    }
    notes.extend(pipeline_notes(req, row_basis, pricing));
    notes
}

fn pipeline_notes(req: &Request, row_basis: &str, pricing: &Pricing) -> Vec<String> {
    let p = &req.pipeline;
    let mut notes = Vec::new();
    if p.has(Line::BigqueryIngestion) || p.has(Line::BigqueryStorage) {
        notes.push(format!("BigQuery bytes: {row_basis} (BigQuery's data size calculation)"));
        notes.push(format!(
            "BigQuery prices: {} ({}); at-least-once and exactly-once are priced alike",
            pricing.bigquery.source, pricing.bigquery.date
        ));
    }
    if p.has(Line::BigqueryIngestion) {
        notes.push(format!(
            "ingestion: the first {:.0} GiB a month per billing account are free; assumes no other Storage Write use on the account",
            pricing.bigquery.storage_write_free_gib_month
        ));
    }
    if p.has(Line::BigqueryStorage) {
        notes.push(format!(
            "storage: assumes a {} table {}; month 12 shown beside month 1",
            match p.partitioning {
                pipeline::Partitioning::Day => "day-partitioned (each partition long-term after 90 days unmodified)",
                pipeline::Partitioning::None => "unpartitioned (appends keep it all active)",
            },
            match p.bq_retention_days {
                Some(d) => format!("with a {d:.0}-day expiration"),
                None => "kept forever".into(),
            }
        ));
    }
    match (p.lines.contains(&Line::Kafka), p.kafka) {
        (true, pipeline::KafkaChoice::Managed) => notes.push(format!(
            "Kafka: Managed Service for Apache Kafka sized by Google's guide, {:.0} h retention, {:.0} replicas in {:.0} zones; inter-zone transfer at ${}/GiB (assumed: Google's rate between zones of a region), the job reading {} ({}, {})",
            p.kafka_retention_hours,
            pricing.managed_kafka.replicas,
            pricing.managed_kafka.zones,
            pricing.managed_kafka.inter_zone_gib,
            if p.kafka_follower_fetch { "a follower in its zone (--kafka-follower-fetch)" } else { "each partition's leader" },
            pricing.managed_kafka.source,
            pricing.managed_kafka.date
        )),
        (true, pipeline::KafkaChoice::Own) => notes.push("Kafka: your own cluster, not priced (--kafka managed prices Google's)".into()),
        (false, _) => {}
    }
    notes.push("not priced: network egress, BigQuery queries, Cloud Monitoring and logging".into());
    notes
}

/// Dataflow's hourly bill of `workers` workers of `machine` and `secu_per_hour` Streaming
/// Engine compute units: one [`CostItem`] per billed resource, and the total per hour.
/// Workers may be fractional (a time-averaged pool, as the simulator reports).
pub fn bill(
    workers: f64,
    machine: &crate::pricing::MachineType,
    secu_per_hour: f64,
    commitment: Commitment,
    pricing: &Pricing,
) -> (Vec<CostItem>, f64) {
    let p = pricing.streaming_for(commitment);
    let months = pricing.hours_per_month;
    let item = |item: &str, quantity: f64, unit: &str, unit_price: f64| {
        let per_hour = quantity * unit_price;
        CostItem {
            line: Line::Dataflow,
            item: item.into(),
            quantity,
            unit: unit.into(),
            unit_price,
            per_hour,
            per_month: per_hour * months,
            per_month_12: per_hour * months,
            free_per_month: 0.0,
        }
    };
    let items = vec![
        item("worker vCPU", workers * machine.vcpus, "vCPU", p.vcpu_hour),
        item("worker memory", workers * machine.memory_gb, "GB", p.memory_gb_hour),
        item("persistent disk (standard)", workers * pricing.default_disk_gb, "GB", pricing.disk.standard_gb_hour),
        item("Streaming Engine compute units", secu_per_hour, "SECU", p.secu_hour),
    ];
    let per_hour = items.iter().map(|i| i.per_hour).sum();
    (items, per_hour)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::google_kafka_to_bq;

    const MB: f64 = 1e6;

    fn req(bytes_s: f64, mode: Mode, machine: &str, c: Commitment) -> Request {
        Request::new(bytes_s, 1024.0, mode, machine, c)
    }

    fn est_req(r: &Request) -> Estimate {
        estimate(r, "google", &google_kafka_to_bq(), &Pricing::us_central1()).unwrap()
    }

    fn est(bytes_s: f64, mode: Mode, machine: &str, c: Commitment) -> Estimate {
        est_req(&req(bytes_s, mode, machine, c))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    fn dataflow(e: &Estimate) -> f64 {
        e.items.iter().filter(|i| i.line == Line::Dataflow).map(|i| i.per_hour).sum()
    }

    #[test]
    fn the_published_measurement_is_given_again_at_its_own_input() {
        // 1 GiB/s of 1 KiB messages (1,048,576 msg/s): 63 workers and 58 SECU/h
        // exactly-once, 53 and 0 at-least-once, as published.
        let e = est(1024.0 * MIB, Mode::ExactlyOnce, "e2-standard-2", Commitment::None);
        assert!(close(e.messages_per_s, 1_048_576.0), "{}", e.messages_per_s);
        assert!((e.workers_exact - 63.0).abs() < 1e-4 && e.workers == 63, "{}", e.workers_exact);
        assert!(close(e.secu_per_hour, 58.0));
        // $8.69 vCPU + $1.79 memory + $0.10 PD + $5.16 SECU = $15.75/h of Dataflow.
        let cents: Vec<f64> = e.items[..4].iter().map(|i| (i.per_hour * 100.0).round() / 100.0).collect();
        assert_eq!(cents, vec![8.69, 1.79, 0.10, 5.16]);
        assert_eq!((dataflow(&e) * 100.0).round() / 100.0, 15.75);
        let a = est(1024.0 * MIB, Mode::AtLeastOnce, "e2-standard-2", Commitment::None);
        assert_eq!((a.workers, (dataflow(&a) * 100.0).round() / 100.0), (53, 8.91));
        assert!((a.workers_exact - 53.0).abs() < 1e-4 && a.secu_per_hour == 0.0);
        // Google's worked example: 100 MiB/s is 100/1024 of the input (the page rounds the
        // factor to 0.1 and says 6.3 and 5.8), so 6.15 workers and 5.66 SECU/h.
        let tenth = est(100.0 * MIB, Mode::ExactlyOnce, "e2-standard-2", Commitment::None);
        assert!((tenth.workers_exact - 63.0 * 100.0 / 1024.0).abs() < 1e-4 && tenth.workers == 7);
        assert!(close(tenth.secu_per_hour, 58.0 * 100.0 / 1024.0) && close(tenth.scaling_factor, 100.0 / 1024.0));
        // The page's own rule, shown beside the model: 63 x 0.1 and 58 x 0.1.
        let rule = tenth.rule_of_thumb;
        assert!(close(rule.factor, 0.1) && close(rule.workers, 6.3) && close(rule.secu_per_hour, 5.8), "{rule:?}");
        let at = |mib: f64| est(mib * MIB, Mode::ExactlyOnce, "e2-standard-2", Commitment::None).rule_of_thumb;
        assert!(close(at(1024.0).workers, 63.0) && close(at(1024.0).secu_per_hour, 58.0));
        assert!(close(at(300.0).factor, 0.29), "300/1024 = 0.293 at two decimals");
    }

    /// Issue 52: a throughput that would overflow the worker count is refused; one past
    /// every quota is answered with the limits it crosses.
    #[test]
    fn an_overflowing_throughput_is_refused_and_a_huge_one_names_its_limits() {
        let p = Pricing::us_central1();
        let r = req(1e9 * 1024.0 * MIB, Mode::ExactlyOnce, "e2-standard-2", Commitment::None);
        let e = estimate(&r, "g", &google_kafka_to_bq(), &p).unwrap_err();
        assert!(matches!(e, EstimateError::TooLarge(..)) && e.to_string().contains("more workers than can be counted"));
        let mut r = req(20.0 * 1024.0 * MIB, Mode::ExactlyOnce, "e2-standard-2", Commitment::None);
        r.dataset_location = "us-central1".into();
        let e = est_req(&r);
        let names: Vec<&str> = e.limits.iter().map(|l| l.limit.as_str()).collect();
        assert_eq!(names, ["storage-write-throughput", "storage-write-connections", "dataflow-max-workers"], "{e:?}");
        let mut us = req(1024.0 * MIB, Mode::ExactlyOnce, "e2-standard-2", Commitment::None);
        assert!(est_req(&us).limits.is_empty(), "1 GiB/s into US crosses nothing");
        us.dataset_location = "us-central1".into();
        assert_eq!(est_req(&us).limits[0].limit, "storage-write-throughput");
        us.dataset_location = "mars".into();
        assert!(matches!(estimate(&us, "g", &google_kafka_to_bq(), &p), Err(EstimateError::Location(_))));
    }

    #[test]
    fn small_messages_pay_the_per_message_term() {
        let big = est(100.0 * MIB, Mode::AtLeastOnce, "e2-standard-2", Commitment::None);
        let r =
            Request { message_bytes: 100.0, ..req(100.0 * MIB, Mode::AtLeastOnce, "e2-standard-2", Commitment::None) };
        let small = est_req(&r);
        assert!(close(small.messages_per_s, 10.24 * big.messages_per_s));
        // Per byte alone would give the same vCPUs; the per-message term makes 100 B
        // messages cost (44.50 + 3.06) / (44.50 + 31.31) * 10 = 6.3x the CPU of 1 KiB ones.
        let ratio = small.vcpus_busy / big.vcpus_busy;
        let (a, b) = (44.50343, 0.03057976);
        assert!((ratio - 10.24 * (a + 100.0 * b) / (a + 1024.0 * b)).abs() < 1e-3, "{ratio}");
        // The held-out small-message run: 130 B at-least-once, 20.6k rows/s per busy vCPU.
        let r = Request {
            message_bytes: 130.0,
            ..req(130.0 * 401_000.0, Mode::AtLeastOnce, "n2-standard-4", Commitment::None)
        };
        let busy = est_req(&r).vcpus_busy;
        assert!((busy - 24.0 * 0.81).abs() < 1e-3, "calibrated to it: {busy}");
    }

    #[test]
    fn the_whole_pipeline_is_billed_and_bigquery_dominates_at_1_gib_s() {
        let e = est(1024.0 * MIB, Mode::AtLeastOnce, "e2-standard-2", Commitment::None);
        let ing = e.items.iter().find(|i| i.line == Line::BigqueryIngestion).unwrap();
        // 3,600 GiB/h of 1 KiB messages, 995/1024 of it as billed row bytes.
        assert!(close(ing.quantity, 3600.0 * e.row_bytes / 1024.0), "{}", ing.quantity);
        assert!((e.row_bytes - 995.0).abs() < 1.0 && e.row_bytes_basis.contains("estimated"), "{}", e.row_bytes);
        assert!(ing.quantity * ing.unit_price > 85.0 && ing.per_hour > 85.0);
        assert_eq!(e.totals.dominant, Line::BigqueryIngestion);
        assert!(close(e.per_hour, e.items.iter().map(|i| i.per_hour).sum()));
        assert!(e.per_hour > dataflow(&e) * 5.0, "{} vs {}", e.per_hour, dataflow(&e));
        assert!(e.per_month_12 > e.per_month, "storage grows");
        // Both modes ingest at the same price.
        let x = est(1024.0 * MIB, Mode::ExactlyOnce, "e2-standard-2", Commitment::None);
        let ing_x = x.items.iter().find(|i| i.line == Line::BigqueryIngestion).unwrap();
        assert!(close(ing_x.per_month, ing.per_month));
        // Only Dataflow, when asked.
        let mut r = req(1024.0 * MIB, Mode::AtLeastOnce, "e2-standard-2", Commitment::None);
        r.pipeline.lines = vec![Line::Dataflow];
        assert!(close(est_req(&r).per_hour, dataflow(&e)));
        // Given row bytes replace the estimate.
        let r = Request { row_bytes: Some(500.0), ..req(MB, Mode::AtLeastOnce, "e2-standard-2", Commitment::None) };
        let g = est_req(&r);
        assert_eq!(g.row_bytes, 500.0);
        assert!(g.row_bytes_basis.contains("given"));
    }

    #[test]
    fn machine_types_commitments_and_small_jobs() {
        let big = est(100.0 * MB, Mode::ExactlyOnce, "e2-standard-4", Commitment::None);
        // Half the workers of e2-standard-2 at 100 MB/s: 63 x (100 MB / 1 GiB) / 2.
        assert!(close(big.workers_exact, 63.0 * 100.0 * MB / (1024.0 * MIB) / 2.0), "{}", big.workers_exact);
        assert_eq!(big.workers, 3);
        assert!(big.notes.iter().any(|n| n.contains("per vCPU carries over")));
        let on_demand = est(100.0 * MB, Mode::ExactlyOnce, "e2-standard-2", Commitment::None);
        let three = est(100.0 * MB, Mode::ExactlyOnce, "e2-standard-2", Commitment::ThreeYears);
        assert!(close(three.items[0].per_hour, on_demand.items[0].per_hour * 0.0414 / 0.069));
        assert!(close(three.items[2].per_hour, on_demand.items[2].per_hour), "disk is not discounted");
        let tiny = est(MIB, Mode::AtLeastOnce, "e2-standard-2", Commitment::None);
        assert_eq!(tiny.workers, 1);
        assert!(tiny.notes.iter().any(|n| n.contains("fixed costs dominate")), "{:?}", tiny.notes);
    }

    #[test]
    fn bad_inputs_are_named() {
        let p = Pricing::us_central1();
        let req = Request::new(0.0, 1000.0, Mode::ExactlyOnce, "e2-standard-2", Commitment::None);
        assert!(estimate(&req, "g", &google_kafka_to_bq(), &p).unwrap_err().to_string().contains("above 0"));
        let neg = Request { throughput_bytes_s: 1.0, message_bytes: -5.0, ..req.clone() };
        assert!(estimate(&neg, "g", &google_kafka_to_bq(), &p)
            .unwrap_err()
            .to_string()
            .contains("invalid message size -5"));
        let mut ret = Request { throughput_bytes_s: 1.0, ..req.clone() };
        ret.pipeline.bq_retention_days = Some(-3.0);
        assert!(estimate(&ret, "g", &google_kafka_to_bq(), &p).unwrap_err().to_string().contains("retention -3"));
        let req = Request { throughput_bytes_s: 1.0, machine_type: "m9-huge".into(), ..req };
        let e = estimate(&req, "g", &google_kafka_to_bq(), &p).unwrap_err().to_string();
        assert!(e.contains("unknown machine type \"m9-huge\"") && e.contains("e2-standard-2"), "{e}");
        let only_eo = BaselineFile::parse("x.yaml", "source: s\ndate: d\ntemplate: t\nmachine_type: e2-standard-2\nbaselines:\n  - {mode: exactly-once, throughput_mib_s: 10, workers: 1, mean_cpu: 0.5, secu_per_hour: 1}\n").unwrap();
        let req = Request { machine_type: "e2-standard-2".into(), mode: Mode::AtLeastOnce, ..req };
        assert!(estimate(&req, "x.yaml", &only_eo, &p).unwrap_err().to_string().contains("no at-least-once baseline"));
        assert!(BaselineFile::parse("b.yaml", "source: s\ndate: d\ntemplate: t\nmachine_type: m\nbaselines:\n  - {mode: exactly-once, throughput_mib_s: -1, workers: 1, mean_cpu: 0.5, secu_per_hour: 1}\n").is_err());
        assert!(BaselineFile::parse("b.yaml", "not: [a baseline").is_err());
        let local = |extra: &str, top: &str| {
            format!("source: s\ndate: d\ntemplate: t\nmachine_type: local-core\n{top}baselines:\n  - {{mode: exactly-once, throughput_mib_s: 10, workers: 1, mean_cpu: 0.8, secu_per_hour: 0{extra}}}\n")
        };
        assert!(BaselineFile::parse(
            "l.yaml",
            &local(", vcpu_us_per_message: 0.3, vcpu_ns_per_byte: 0.5", "vcpus_per_worker: 1\n")
        )
        .is_ok());
        for (extra, top, needle) in [
            (", vcpu_us_per_message: -1", "", "vcpu_us_per_message must be"),
            (", vcpu_ns_per_byte: .nan", "", "vcpu_ns_per_byte must be"),
            (", vcpu_us_per_message: 0", "", "cannot both be 0"),
            ("", "vcpus_per_worker: 0\n", "vcpus_per_worker must be above 0"),
        ] {
            let e = BaselineFile::parse("l.yaml", &local(extra, top)).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("l.yaml"), "{extra}{top}: {e}");
        }
    }

    #[test]
    fn a_request_for_a_rate_takes_the_message_size_given_else_the_baseline_s_else_the_default() {
        let google = google_kafka_to_bq();
        let msgs = Rate::MessagesPerSecond(100.0);
        let given = Request::for_rate(msgs, Some(500.0), &google, Mode::ExactlyOnce, "e2-standard-2", Commitment::None);
        assert_eq!((given.message_bytes, given.throughput_bytes_s), (500.0, 50_000.0));
        let baseline_s = Request::for_rate(msgs, None, &google, Mode::AtLeastOnce, "e2-standard-4", Commitment::None);
        assert_eq!((baseline_s.message_bytes, baseline_s.throughput_bytes_s), (1024.0, 102_400.0));
        assert_eq!((baseline_s.mode, baseline_s.machine_type.as_str()), (Mode::AtLeastOnce, "e2-standard-4"));
        let bare = BaselineFile { message_bytes: None, ..google };
        let default = Request::for_rate(
            Rate::BytesPerSecond(MIB),
            None,
            &bare,
            Mode::ExactlyOnce,
            "e2-standard-2",
            Commitment::None,
        );
        assert_eq!((default.message_bytes, default.throughput_bytes_s), (DEFAULT_MESSAGE_BYTES, MIB));
    }
}
