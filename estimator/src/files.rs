//! Windowed file output (kafka-to-gcs): how long publishing one window's files takes.
//!
//! A window's files are published by renaming each staged file to its final name; on
//! an object store a rename is a copy and a delete, so the cost is per file, and a
//! committer with `parallelism` requests in flight divides it (seed 002). With the
//! files spread over `workers`, each worker publishes its share.
//!
//! ```
//! use flexrun_estimator::files::WindowCommit;
//! let c = WindowCommit { files_per_window: 5000.0, per_file_s: 0.043, parallelism: 1.0 };
//! assert!((c.stall_s(1.0) - 215.0).abs() < 1e-9);
//! let p = WindowCommit { parallelism: 64.0, ..c };
//! assert!((p.stall_s(1.0) - 0.043 * 79.0).abs() < 1e-9, "ceil(5000 / 64) rounds");
//! assert!(p.stall_s(10.0) < p.stall_s(1.0), "more workers, fewer files each");
//! ```

use serde::Serialize;

/// The publish step of one window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WindowCommit {
    /// Files per window (numShards, or the runner's choice).
    pub files_per_window: f64,
    /// Seconds to publish one file serially (copy + delete on a bucket); measured by
    /// `scripts/bench-commit.sh`.
    pub per_file_s: f64,
    /// Requests in flight (`--commit-parallelism`).
    pub parallelism: f64,
}

impl WindowCommit {
    /// Seconds each of `workers` spends publishing at a window's end: its share of the
    /// files in rounds of `parallelism`.
    pub fn stall_s(&self, workers: f64) -> f64 {
        let share = (self.files_per_window / workers.max(1.0)).ceil();
        (share / self.parallelism.max(1.0)).ceil() * self.per_file_s
    }
}
