//! Autoscaling a kafka-to-gcs job: every `--autoscaling-interval` the workers' busy
//! time (reading into state and rendering files), the topic's input rate (from its
//! high watermarks) and the unread backlog go to the same [`Controller`] kafka-to-bq
//! uses, and its decision resizes the [`Workers`]. `update-options` reaches it as it
//! reaches kafka-to-bq ([`crate::scaling::apply_update`]).

use super::pool::Workers;
use crate::control::Control;
use flexrun_autoscaler::{Algorithm, Controller, Decision, ScalingConfig, Snapshot};
use std::collections::BTreeMap;
use std::time::Instant;

/// The controller that sizes the workers.
pub struct Autoscaled {
    controller: Controller,
    cfg: ScalingConfig,
    started: Instant,
    next: Instant,
    last_window: Instant,
    last_hw: Option<i64>,
}

impl Autoscaled {
    /// A controller for a job of `parallelism` partitions (the most workers that can
    /// have one to read).
    pub fn new(cfg: ScalingConfig, parallelism: u32) -> Autoscaled {
        let now = Instant::now();
        Autoscaled {
            controller: Controller::new(&cfg, parallelism),
            started: now,
            next: now + cfg.interval,
            last_window: now,
            last_hw: None,
            cfg,
        }
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
        if let Some(u) = control.take_update() {
            crate::scaling::apply_update(control, &mut self.controller, &u, pool.workers());
            self.next = Instant::now();
        }
        let l = *self.controller.limits();
        control.publish(pool.workers(), self.target(pool.workers()), l.min_workers, l.max_workers, l.utilization_hint);
        if Instant::now() < self.next || self.cfg.algorithm == Algorithm::None || hw.is_empty() {
            return Ok(());
        }
        self.next = Instant::now() + self.cfg.interval;
        let snap = self.snapshot(pool, hw, read, avg_bytes);
        let d = self.controller.decide(&snap);
        tracing::info!(
            from = d.from, to = d.to, rationale = d.rationale.as_str(), detail = %d.detail,
            utilization = format!("{:.2}", snap.utilization()), backlog = snap.backlog_records,
            "autoscaler decision"
        );
        if d.is_change() {
            control.event(d.event_type(), d.from, d.to, d.job_log_text());
            pool.resize(d.to).await?;
            control.event(
                "CURRENT_NUM_WORKERS_CHANGED",
                d.from,
                pool.workers(),
                format!("Autoscaling: Resizing worker pool from {} to {}.", d.from, pool.workers()),
            );
        }
        Ok(())
    }

    /// The latest decision's target, or `workers` before any.
    pub fn target(&self, workers: u32) -> u32 {
        self.controller.decisions().last().map_or(workers, |d| d.to)
    }

    /// The limits in force.
    pub fn limits(&self) -> flexrun_autoscaler::Limits {
        *self.controller.limits()
    }

    fn snapshot(
        &mut self,
        pool: &Workers,
        hw: &BTreeMap<i32, i64>,
        read: &BTreeMap<i32, i64>,
        avg_bytes: f64,
    ) -> Snapshot {
        let window_s = self.last_window.elapsed().as_secs_f64();
        self.last_window = Instant::now();
        let total: i64 = hw.values().sum();
        let input = self.last_hw.map_or(0.0, |l| (total - l).max(0) as f64 / window_s.max(1e-3));
        self.last_hw = Some(total);
        let backlog: i64 = hw.iter().map(|(p, h)| (h - read.get(p).copied().unwrap_or(0)).max(0)).sum();
        Snapshot {
            time_s: self.started.elapsed().as_secs_f64(),
            window_s,
            workers: pool.window(),
            input_records_per_s: input,
            input_bytes_per_s: input * avg_bytes,
            backlog_records: backlog as u64,
            backlog_bytes: (backlog as f64 * avg_bytes) as u64,
        }
    }

    /// The recorded decisions.
    pub fn into_decisions(self) -> Vec<Decision> {
        self.controller.into_decisions()
    }
}
