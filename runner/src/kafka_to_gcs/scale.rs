//! Autoscaling a kafka-to-gcs job: every `--autoscaling-interval` the workers' busy
//! time (reading into state and rendering files), the topic's input rate (from its
//! high watermarks) and the unread backlog go to the shared
//! [`crate::scaling::Autoscaler`] kafka-to-bq uses too, and its decision resizes the
//! [`Workers`]. `update-options` reaches it as it reaches kafka-to-bq.

use super::pool::Workers;
use crate::control::Control;
use crate::scaling::step::{announce_decision, announce_resized, Autoscaler};
use flexrun_autoscaler::{Decision, ScalingConfig};
use std::collections::BTreeMap;
use std::time::Instant;

/// The autoscaler that sizes the workers.
pub struct Autoscaled(Autoscaler);

impl Autoscaled {
    /// An autoscaler for a job of `parallelism` partitions (the most workers that can
    /// have one to read).
    pub fn new(cfg: ScalingConfig, parallelism: u32) -> Autoscaled {
        Autoscaled(Autoscaler::new(&cfg, parallelism, Instant::now()))
    }

    /// Apply a waiting `update-options`, publish the pool's state, and when the interval
    /// is up, decide on the window that ended and resize.
    ///
    /// `hw` are the topic's latest high watermarks, `read` the next offset to read per
    /// partition, and `avg_bytes` the mean message size so far.
    pub async fn step(
        &mut self,
        pool: &mut Workers,
        hw: &BTreeMap<i32, i64>,
        read: &BTreeMap<i32, i64>,
        avg_bytes: f64,
        control: &Control,
    ) -> anyhow::Result<()> {
        self.0.sync_control(control, pool.workers());
        if hw.is_empty() || !self.0.take_due() {
            return Ok(());
        }
        let backlog: i64 = hw.iter().map(|(p, h)| (h - read.get(p).copied().unwrap_or(0)).max(0)).sum();
        let d = self.0.decide(hw, backlog, avg_bytes, pool.window()).decision;
        if d.is_change() {
            announce_decision(Some(control), &d);
            pool.resize(d.to).await?;
            announce_resized(Some(control), &d, pool.workers());
        }
        Ok(())
    }

    /// The latest decision's target, or `workers` before any.
    pub fn target(&self, workers: u32) -> u32 {
        self.0.target(workers)
    }

    /// The limits in force.
    pub fn limits(&self) -> flexrun_autoscaler::Limits {
        self.0.limits()
    }

    /// The recorded decisions.
    pub fn into_decisions(self) -> Vec<Decision> {
        self.0.into_decisions()
    }
}
