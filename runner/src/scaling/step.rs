//! The one autoscaling step both templates' worker pools take: every
//! `--autoscaling-interval` the window that ended becomes a [`Snapshot`] (per-worker
//! busy time, the topic's input rate from its high watermarks, the unread backlog), the
//! [`Controller`] decides, and the decision is logged and announced on the control
//! plane. Resizing is the caller's, since kafka-to-bq's pool runs shards and
//! kafka-to-gcs's renders files; everything up to it is here, once.

use crate::control::Control;
use flexrun_autoscaler::{Algorithm, Controller, Decision, Limits, ScalingConfig, Snapshot, WorkerMetrics};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A job's autoscaler: its controller and the bookkeeping of the current window.
pub struct Autoscaler {
    controller: Controller,
    interval: Duration,
    algorithm: Algorithm,
    started: Instant,
    next: Instant,
    last_window: Instant,
    last_hw: Option<i64>,
}

/// What one decision saw and said.
pub struct Step {
    /// The decision (also recorded in the controller).
    pub decision: Decision,
    /// Whether the controller recorded it as a new entry of its log.
    pub recorded: bool,
    /// The window's mean worker utilization.
    pub utilization: f64,
}

impl Autoscaler {
    /// An autoscaler for a job of `parallelism` partitions or shards (the most workers
    /// that can each have one), whose clock starts at `started`.
    pub fn new(cfg: &ScalingConfig, parallelism: u32, started: Instant) -> Autoscaler {
        let now = Instant::now();
        Autoscaler {
            controller: Controller::new(cfg, parallelism),
            interval: cfg.interval,
            algorithm: cfg.algorithm,
            started,
            next: now + cfg.interval,
            last_window: now,
            last_hw: None,
        }
    }

    /// Apply a waiting `update-options` (the next decision is then due at once) and
    /// publish the pool's state on the control plane.
    pub fn sync_control(&mut self, control: &Control, workers: u32) {
        if let Some(u) = control.take_update() {
            super::apply_update(control, &mut self.controller, &u, workers);
            self.next = Instant::now();
        }
        let l = *self.controller.limits();
        control.publish(workers, self.target(workers), l.min_workers, l.max_workers, l.utilization_hint);
    }

    /// Whether a decision is due now; if so the next one is scheduled an interval on.
    /// Never with `--autoscaling-algorithm NONE`.
    pub fn take_due(&mut self) -> bool {
        if self.algorithm == Algorithm::None || Instant::now() < self.next {
            return false;
        }
        self.next = Instant::now() + self.interval;
        true
    }

    /// Decide on the window that ends now, from the topic's high watermarks `hw`, the
    /// records still unread `backlog`, their mean size `avg_bytes` and each worker's
    /// window. A window of zero length (two decisions in one instant, as when workers
    /// join on a decision step) counts as 1 ms instead of dividing by zero.
    pub fn decide(
        &mut self,
        hw: &BTreeMap<i32, i64>,
        backlog: i64,
        avg_bytes: f64,
        workers: Vec<WorkerMetrics>,
    ) -> Step {
        let window_s = self.last_window.elapsed().as_secs_f64().max(1e-3);
        self.last_window = Instant::now();
        let total: i64 = hw.values().sum();
        let input = self.last_hw.map_or(0.0, |l| (total - l).max(0) as f64 / window_s);
        self.last_hw = Some(total);
        let backlog = backlog.max(0);
        let snap = Snapshot {
            time_s: self.started.elapsed().as_secs_f64(),
            window_s,
            workers,
            input_records_per_s: input,
            input_bytes_per_s: input * avg_bytes,
            backlog_records: backlog as u64,
            backlog_bytes: (backlog as f64 * avg_bytes) as u64,
        };
        let before = self.controller.decisions().len();
        let decision = self.controller.decide(&snap);
        tracing::info!(
            time_s = format!("{:.1}", decision.time_s), from = decision.from, to = decision.to,
            rationale = decision.rationale.as_str(), detail = %decision.detail,
            utilization = format!("{:.2}", snap.utilization()), input_per_s = input as u64, backlog,
            "autoscaler decision"
        );
        Step { recorded: self.controller.decisions().len() > before, utilization: snap.utilization(), decision }
    }

    /// The useful parallelism changed (partitions found, or a topic joined the job).
    pub fn set_parallelism(&mut self, parallelism: u32) {
        self.controller.set_max_parallelism(parallelism);
    }

    /// The latest decision's target, or `workers` before any.
    pub fn target(&self, workers: u32) -> u32 {
        self.controller.decisions().last().map_or(workers, |d| d.to)
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        *self.controller.limits()
    }

    /// The recorded decisions.
    pub fn into_decisions(self) -> Vec<Decision> {
        self.controller.into_decisions()
    }
}

/// Announce a changing decision on the control plane (Dataflow's job log), before the
/// resize.
pub fn announce_decision(control: Option<&Control>, d: &Decision) {
    if let Some(c) = control {
        c.event(d.event_type(), d.from, d.to, d.job_log_text());
    }
}

/// Announce the pool's new size after a resize.
pub fn announce_resized(control: Option<&Control>, d: &Decision, workers: u32) {
    if let Some(c) = control {
        c.event(
            "CURRENT_NUM_WORKERS_CHANGED",
            d.from,
            workers,
            format!("Autoscaling: Resizing worker pool from {} to {}.", d.from, workers),
        );
    }
}

/// A decision as the dashboard lists it.
pub fn decision_view(d: &Decision) -> flexrun_web::DecisionView {
    flexrun_web::DecisionView {
        t_s: d.time_s,
        from: d.from,
        to: d.to,
        rationale: d.rationale.as_str().into(),
        detail: d.detail.clone(),
        description: d.job_log_text(),
    }
}
