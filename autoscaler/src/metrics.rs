//! What the autoscaler sees: one metrics snapshot per decision window.

use serde::{Deserialize, Serialize};

/// One worker over the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerMetrics {
    /// Seconds of useful (busy) time in the window: processing, not waiting on input
    /// or output (DS2's "useful time"; CPU time for Dataflow).
    pub busy_s: f64,
    /// Records processed in the window.
    pub records: u64,
    /// Bytes processed in the window.
    pub bytes: u64,
}

/// A job over one window, as the runner or the simulator measured it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The caller's clock at the end of the window, in seconds (virtual or real).
    pub time_s: f64,
    /// Length of the window the counters cover, in seconds.
    pub window_s: f64,
    /// One entry per running worker.
    pub workers: Vec<WorkerMetrics>,
    /// Records arriving at the source per second over the window.
    pub input_records_per_s: f64,
    /// Bytes arriving at the source per second over the window.
    pub input_bytes_per_s: f64,
    /// Records waiting at the source at the end of the window.
    pub backlog_records: u64,
    /// Bytes waiting at the source at the end of the window.
    pub backlog_bytes: u64,
}

/// The bounds a decision must respect.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Fewest workers.
    pub min_workers: u32,
    /// Most workers.
    pub max_workers: u32,
    /// The most workers that can do useful work (for a Kafka source: the partitions).
    pub max_parallelism: u32,
    /// Target CPU (busy) fraction, Dataflow's worker utilization hint, 0.1 to 0.9.
    pub utilization_hint: f64,
}

/// Dataflow's default worker utilization hint.
pub const DEFAULT_UTILIZATION_HINT: f64 = 0.8;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            min_workers: 1,
            max_workers: 100,
            max_parallelism: u32::MAX,
            utilization_hint: DEFAULT_UTILIZATION_HINT,
        }
    }
}

impl Snapshot {
    /// Running workers.
    pub fn current(&self) -> u32 {
        self.workers.len() as u32
    }

    /// Mean busy fraction of the workers (0 to 1).
    pub fn utilization(&self) -> f64 {
        if self.workers.is_empty() || self.window_s <= 0.0 {
            return 0.0;
        }
        let sum: f64 = self.workers.iter().map(|w| (w.busy_s / self.window_s).clamp(0.0, 1.0)).sum();
        sum / self.workers.len() as f64
    }

    /// Records processed per second by the whole job (the observed rate).
    pub fn throughput_records_per_s(&self) -> f64 {
        if self.window_s <= 0.0 {
            return 0.0;
        }
        self.workers.iter().map(|w| w.records as f64).sum::<f64>() / self.window_s
    }

    /// Bytes processed per second by the whole job.
    pub fn throughput_bytes_per_s(&self) -> f64 {
        if self.window_s <= 0.0 {
            return 0.0;
        }
        self.workers.iter().map(|w| w.bytes as f64).sum::<f64>() / self.window_s
    }

    /// DS2's true processing rate of one worker: records per second of busy time,
    /// averaged over the workers that did work. None when nobody was busy.
    pub fn true_rate_per_worker(&self) -> Option<f64> {
        let busy: f64 = self.workers.iter().map(|w| w.busy_s).sum();
        let records: f64 = self.workers.iter().map(|w| w.records as f64).sum();
        (busy > 0.0 && records > 0.0).then(|| records / busy)
    }

    /// Dataflow's backlog signal: seconds to drain the backlog at the current
    /// throughput (infinite when there is backlog and no throughput).
    pub fn backlog_seconds(&self) -> f64 {
        if self.backlog_records == 0 {
            return 0.0;
        }
        let t = self.throughput_records_per_s();
        if t <= 0.0 {
            f64::INFINITY
        } else {
            self.backlog_records as f64 / t
        }
    }
}
