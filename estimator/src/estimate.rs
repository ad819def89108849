//! The estimate: scale a baseline linearly to the asked throughput, then price it.

use crate::baseline::{BaselineError, BaselineFile, Mode};
use crate::pricing::{Commitment, Pricing};
use crate::units::MIB;
use serde::{Deserialize, Serialize};

/// What to estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Input throughput, bytes per second.
    pub throughput_bytes_s: f64,
    /// Delivery mode.
    pub mode: Mode,
    /// Worker machine type.
    pub machine_type: String,
    /// Committed use discount.
    pub commitment: Commitment,
}

/// One line of the bill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostItem {
    /// What is billed.
    pub item: String,
    /// How much of it.
    pub quantity: f64,
    /// In what unit.
    pub unit: String,
    /// Price per unit-hour.
    pub unit_price: f64,
    /// Dollars per hour.
    pub per_hour: f64,
    /// Dollars per month.
    pub per_month: f64,
}

/// The result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The request.
    pub request: Request,
    /// Throughput in MiB/s.
    pub throughput_mib_s: f64,
    /// Throughput ÷ the baseline's throughput.
    pub scaling_factor: f64,
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
    /// The bill, item by item.
    pub items: Vec<CostItem>,
    /// Dollars per hour.
    pub per_hour: f64,
    /// Dollars per month.
    pub per_month: f64,
    /// Where the baseline and prices come from, and caveats.
    pub notes: Vec<String>,
}

/// Inputs that cannot be estimated.
#[derive(Debug, thiserror::Error)]
pub enum EstimateError {
    /// Throughput not above zero.
    #[error("invalid throughput {0}: expected a rate above 0")]
    Throughput(f64),
    /// A machine type not in the pricing file.
    #[error("unknown machine type {given:?}: expected one of {known}")]
    MachineType {
        /// What was given.
        given: String,
        /// The choices.
        known: String,
    },
    /// The baseline has no figures for the mode.
    #[error(transparent)]
    Baseline(#[from] BaselineError),
}

/// Estimate workers, SECU and cost for `req` from `baseline` and `pricing`.
pub fn estimate(
    req: &Request,
    baseline_name: &str,
    baseline: &BaselineFile,
    pricing: &Pricing,
) -> Result<Estimate, EstimateError> {
    if !(req.throughput_bytes_s > 0.0 && req.throughput_bytes_s.is_finite()) {
        return Err(EstimateError::Throughput(req.throughput_bytes_s));
    }
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
    let mib_s = req.throughput_bytes_s / MIB;
    let factor = mib_s / b.throughput_mib_s;
    // Throughput per vCPU is assumed to carry over between machine types.
    let workers_exact = b.workers * factor * base_vcpus / machine.vcpus;
    let workers = (workers_exact - 1e-9).ceil().max(1.0) as u32;
    let w = workers as f64;
    let secu = b.secu_per_hour * factor;
    let (items, per_hour) = bill(w, machine, secu, req.commitment, pricing);
    let months = pricing.hours_per_month;
    let mut notes = vec![
        format!(
            "baseline: {} ({}), {} on {}, {:.0} MiB/s with {} workers at {:.0}% CPU",
            baseline.source,
            baseline.date,
            req.mode.as_str(),
            baseline.machine_type,
            b.throughput_mib_s,
            b.workers,
            b.mean_cpu * 100.0
        ),
        format!("prices: {} {} ({})", pricing.region, pricing.source, pricing.date),
    ];
    if req.machine_type != baseline.machine_type {
        notes.push(format!(
            "{} has {} vCPUs against the baseline's {} on {}: assumes throughput per vCPU carries over",
            req.machine_type, machine.vcpus, base_vcpus, baseline.machine_type
        ));
    }
    if workers_exact < 1.0 {
        notes.push(format!(
            "a small job: it needs {:.2} of a worker but at least 1 is billed, so fixed costs dominate ({:.0}% of the worker's cost is headroom)",
            workers_exact,
            (1.0 - workers_exact) * 100.0
        ));
    } else if (w - workers_exact) / w > 0.2 {
        notes.push(format!(
            "rounding {workers_exact:.2} workers up to {workers} adds {:.0}% to the worker cost",
            (w - workers_exact) / workers_exact * 100.0
        ));
    }
    if req.commitment != Commitment::None {
        notes.push("the commitment discount covers worker vCPU, memory and SECU, not persistent disk".into());
    }
    Ok(Estimate {
        request: req.clone(),
        throughput_mib_s: mib_s,
        scaling_factor: factor,
        workers_exact,
        workers,
        vcpus: w * machine.vcpus,
        memory_gb: w * machine.memory_gb,
        disk_gb: w * pricing.default_disk_gb,
        secu_per_hour: secu,
        mean_cpu: b.mean_cpu,
        items,
        per_hour,
        per_month: per_hour * months,
        notes,
    })
}

/// The hourly bill of `workers` workers of `machine` and `secu_per_hour` Streaming Engine
/// compute units: one [`CostItem`] per billed resource, and the total per hour. Workers may
/// be fractional (a time-averaged pool, as the simulator reports).
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
        CostItem { item: item.into(), quantity, unit: unit.into(), unit_price, per_hour, per_month: per_hour * months }
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

    fn est(mib_s: f64, mode: Mode, machine: &str, c: Commitment) -> Estimate {
        let req = Request { throughput_bytes_s: mib_s * MIB, mode, machine_type: machine.into(), commitment: c };
        estimate(&req, "google", &google_kafka_to_bq(), &Pricing::us_central1()).unwrap()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn the_published_sizing_rule_reproduces() {
        // 100 MiB/s exactly-once: 63 x 0.1 = 6.3 workers and 58 x 0.1 = 5.8 SECU/h.
        let e = est(100.0, Mode::ExactlyOnce, "e2-standard-2", Commitment::None);
        assert!(close(e.scaling_factor, 0.1));
        assert!(close(e.workers_exact, 6.3));
        assert_eq!(e.workers, 7);
        assert!(close(e.secu_per_hour, 5.8));
    }

    #[test]
    fn the_worked_dollar_example_reproduces() {
        // 63 workers + 58 SECU: $8.69 vCPU + $1.79 memory + $0.10 PD + $5.16 SECU = $15.75/h.
        let e = est(1000.0, Mode::ExactlyOnce, "e2-standard-2", Commitment::None);
        assert_eq!(e.workers, 63);
        let cents: Vec<f64> = e.items.iter().map(|i| (i.per_hour * 100.0).round() / 100.0).collect();
        assert_eq!(cents, vec![8.69, 1.79, 0.10, 5.16]);
        assert_eq!((e.per_hour * 100.0).round() / 100.0, 15.75);
        assert!(close(e.per_month, e.per_hour * 730.0));
        // At-least-once: 53 workers, 0 SECU: $8.91/h.
        let a = est(1000.0, Mode::AtLeastOnce, "e2-standard-2", Commitment::None);
        assert_eq!((a.workers, (a.per_hour * 100.0).round() / 100.0), (53, 8.91));
        assert_eq!(a.secu_per_hour, 0.0);
    }

    #[test]
    fn machine_types_commitments_and_small_jobs() {
        let big = est(100.0, Mode::ExactlyOnce, "e2-standard-4", Commitment::None);
        assert!(close(big.workers_exact, 3.15));
        assert_eq!(big.workers, 4);
        assert!(big.notes.iter().any(|n| n.contains("per vCPU carries over")));
        let on_demand = est(100.0, Mode::ExactlyOnce, "e2-standard-2", Commitment::None);
        let three = est(100.0, Mode::ExactlyOnce, "e2-standard-2", Commitment::ThreeYears);
        assert!(close(three.items[0].per_hour, on_demand.items[0].per_hour * 0.0414 / 0.069));
        assert!(close(three.items[2].per_hour, on_demand.items[2].per_hour), "disk is not discounted");
        let tiny = est(1.0, Mode::AtLeastOnce, "e2-standard-2", Commitment::None);
        assert_eq!(tiny.workers, 1);
        assert!(tiny.notes.iter().any(|n| n.contains("fixed costs dominate")), "{:?}", tiny.notes);
    }

    #[test]
    fn bad_inputs_are_named() {
        let p = Pricing::us_central1();
        let req = Request {
            throughput_bytes_s: 0.0,
            mode: Mode::ExactlyOnce,
            machine_type: "e2-standard-2".into(),
            commitment: Commitment::None,
        };
        assert!(estimate(&req, "g", &google_kafka_to_bq(), &p).unwrap_err().to_string().contains("above 0"));
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
}
