//! [`ScalingConfig`]: a pool's autoscaling settings (gcloud's `--num-workers`,
//! `--max-workers`, `--autoscaling-algorithm`, ...) and the one place a [`Policy`] is
//! built from them. The live pool, `simulate` and the tests all build here, so they make
//! the same decisions for the same snapshots.

use crate::dataflow::{DataflowConfig, DataflowPolicy};
use crate::ds2::Ds2Policy;
use crate::metrics::{Limits, DEFAULT_UTILIZATION_HINT};
use crate::policy::{Algorithm, Fixed, Policy, PolicyKind};
use std::time::Duration;

/// A worker pool's size bounds and autoscaling settings.
///
/// ```
/// use flexrun_autoscaler::{ScalingConfig, PolicyKind};
/// let cfg = ScalingConfig { policy: PolicyKind::Ds2, ..ScalingConfig::default() };
/// assert_eq!(cfg.build_policy().name(), "ds2");
/// assert_eq!(cfg.limits(4).max_parallelism, 4);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ScalingConfig {
    /// Workers at the start.
    pub num_workers: u32,
    /// Autoscaling floor.
    pub min_workers: u32,
    /// Autoscaling ceiling (the job's useful parallelism caps it too).
    pub max_workers: u32,
    /// Target busy fraction (Dataflow's worker utilization hint).
    pub utilization_hint: f64,
    /// THROUGHPUT_BASED or NONE.
    pub algorithm: Algorithm,
    /// dataflow or ds2.
    pub policy: PolicyKind,
    /// How often the autoscaler decides.
    pub interval: Duration,
    /// Dataflow policy durations are divided by this (laptop-scale runs).
    pub time_scale: f64,
    /// vCPUs of the (recorded) worker machine type, for the vCPU metric.
    pub vcpus_per_worker: f64,
    /// Utilization the Dataflow policy's scale-down aims at, at most (with the hint):
    /// Dataflow documents 75%. `simulate` sets the baseline's measured mean instead
    /// (Google's 70% exactly-once), so its pool settles where `estimate` sizes it.
    pub scale_down_target: f64,
}

impl Default for ScalingConfig {
    fn default() -> Self {
        ScalingConfig {
            num_workers: 1,
            min_workers: 1,
            max_workers: 100,
            utilization_hint: DEFAULT_UTILIZATION_HINT,
            algorithm: Algorithm::ThroughputBased,
            policy: PolicyKind::Dataflow,
            interval: Duration::from_secs(10),
            time_scale: 1.0,
            vcpus_per_worker: 2.0,
            scale_down_target: DataflowConfig::default().scale_down_target,
        }
    }
}

impl ScalingConfig {
    /// The policy these settings select, fresh (with `time_scale` applied).
    pub fn build_policy(&self) -> Box<dyn Policy> {
        match (self.algorithm, self.policy) {
            (Algorithm::None, _) => Box::new(Fixed),
            (Algorithm::ThroughputBased, PolicyKind::Ds2) => Box::new(Ds2Policy::default()),
            (Algorithm::ThroughputBased, PolicyKind::Dataflow) => {
                let config = DataflowConfig {
                    scale_down_target: self.scale_down_target,
                    ..DataflowConfig::time_scaled(self.time_scale)
                };
                Box::new(DataflowPolicy::new(config))
            }
        }
    }

    /// The bounds the policy works within, for a job whose useful parallelism is
    /// `max_parallelism` workers.
    pub fn limits(&self, max_parallelism: u32) -> Limits {
        Limits {
            min_workers: self.min_workers,
            max_workers: self.max_workers,
            max_parallelism,
            utilization_hint: self.utilization_hint,
        }
    }

    /// The worker count to start with: `num_workers` within min/max and the parallelism.
    pub fn initial_workers(&self, max_parallelism: u32) -> u32 {
        self.num_workers.clamp(self.min_workers, self.max_workers).min(max_parallelism.max(1))
    }
}
