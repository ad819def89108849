//! [`Controller`]: decide and record. The live pool and `simulate` both feed it one
//! [`Snapshot`] per interval and apply the [`Decision`] it returns; it keeps every
//! decision that changed the count or the rationale, for the job's report.

use crate::decision::Decision;
use crate::metrics::{Limits, Snapshot};
use crate::policy::Policy;
use crate::spec::ScalingConfig;

/// A policy, its limits, and the decisions worth reporting.
///
/// ```
/// use flexrun_autoscaler::{Controller, ScalingConfig, Snapshot, WorkerMetrics};
/// let mut c = Controller::new(&ScalingConfig::default(), 8);
/// let snap = Snapshot {
///     time_s: 0.0,
///     window_s: 10.0,
///     workers: vec![WorkerMetrics { busy_s: 10.0, records: 1000, bytes: 1_000_000 }],
///     input_records_per_s: 200.0,
///     input_bytes_per_s: 200_000.0,
///     backlog_records: 0,
///     backlog_bytes: 0,
/// };
/// let d = c.decide(&snap);
/// assert!(d.to >= 1 && d.to <= 8);
/// assert_eq!(c.decisions().len(), 1);
/// ```
pub struct Controller {
    policy: Box<dyn Policy>,
    limits: Limits,
    decisions: Vec<Decision>,
}

impl Controller {
    /// A fresh controller for `cfg`, on a job whose useful parallelism is `max_parallelism`.
    pub fn new(cfg: &ScalingConfig, max_parallelism: u32) -> Controller {
        Controller { policy: cfg.build_policy(), limits: cfg.limits(max_parallelism), decisions: Vec::new() }
    }

    /// Decide on `snap`; the decision is recorded when it changes the count or the
    /// rationale since the last recorded one.
    pub fn decide(&mut self, snap: &Snapshot) -> Decision {
        let d = self.policy.decide(snap, &self.limits);
        let new_rationale = self.decisions.last().is_none_or(|l| l.rationale != d.rationale);
        if d.is_change() || new_rationale {
            self.decisions.push(d.clone());
        }
        d
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The useful parallelism grew or shrank (e.g. partitions were discovered).
    pub fn set_max_parallelism(&mut self, max_parallelism: u32) {
        self.limits.max_parallelism = max_parallelism;
    }

    /// New worker bounds and utilization hint, as `gcloud dataflow jobs update-options`
    /// sets them on a running job; the next decision uses them. The useful parallelism
    /// stays. Fails, changing nothing, when the new limits are inconsistent.
    pub fn set_limits(&mut self, min_workers: u32, max_workers: u32, utilization_hint: f64) -> Result<(), String> {
        let next = Limits { min_workers, max_workers, utilization_hint, ..self.limits };
        if min_workers > max_workers {
            return Err(format!("the minimum ({min_workers}) is above the maximum ({max_workers})"));
        }
        next.validate().map_err(|e| e.to_string())?;
        self.limits = next;
        Ok(())
    }

    /// The recorded decisions, oldest first.
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// The recorded decisions, consuming the controller.
    pub fn into_decisions(self) -> Vec<Decision> {
        self.decisions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_change_in_flight_or_are_refused_whole() {
        let mut c = Controller::new(&ScalingConfig { max_workers: 4, ..Default::default() }, 8);
        c.set_limits(2, 6, 0.6).unwrap();
        let l = *c.limits();
        assert_eq!((l.min_workers, l.max_workers, l.utilization_hint, l.max_parallelism), (2, 6, 0.6, 8));
        assert!(c.set_limits(7, 6, 0.6).unwrap_err().contains("above the maximum"));
        assert!(c.set_limits(1, 6, 0.95).is_err());
        assert_eq!(*c.limits(), l, "a refused change changes nothing");
    }
}
