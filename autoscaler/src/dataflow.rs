//! Dataflow's documented streaming autoscaling rules (reference §3.3).
//!
//! Signals: worker utilization (CPU; here busy fraction) against the worker
//! utilization hint, and the backlog in seconds (backlog ÷ current throughput).
//! - Scale up for **High backlog** when the backlog estimate stays above
//!   `backlog_scale_up_s` for `backlog_sustain_s` ("a backlog lasting less than a few
//!   minutes does not trigger scale-up"), to the count that carries the input and
//!   drains the backlog within `backlog_scale_up_s`.
//! - Scale up for **High worker utilization** when utilization exceeds the hint.
//! - Scale down for **Low worker utilization** only after the backlog estimate has
//!   stayed under `scale_down_backlog_s` (10 s) and utilization under the target for
//!   `scale_down_sustain_s` (2 min), aiming at `min(hint, 0.75)` utilization for the
//!   *highest* utilization seen in that period (one quiet window among busy ones is
//!   not a reason to shrink); too small a reduction is skipped.
//! - After any change, **Waiting for the signals to stabilize** for `stabilize_s`.
//! - One decision moves at most `max_step_factor` × the current count: utilization
//!   saturates at 100%, so an observed-rate policy cannot see how far short it is
//!   (the reason Dhalion-style policies take several steps where DS2 takes one).
//!
//! Google does not publish every constant; the defaults are the documented ones where
//! there are some, and every one is a named, configurable setting.

use crate::decision::{Decision, Rationale};
use crate::metrics::{Limits, Snapshot};
use crate::policy::{decide_bounded, pool_for, Policy};

/// Dataflow policy settings.
#[derive(Debug, Clone, PartialEq)]
pub struct DataflowConfig {
    /// No change for this long after a change.
    pub stabilize_s: f64,
    /// Backlog (seconds to drain) above which the backlog is high.
    pub backlog_scale_up_s: f64,
    /// How long the backlog must stay high before scaling up.
    pub backlog_sustain_s: f64,
    /// Backlog below which scale-down is allowed (documented: 10 s).
    pub scale_down_backlog_s: f64,
    /// How long the backlog must stay low before scaling down (documented: 2 min).
    pub scale_down_sustain_s: f64,
    /// Utilization a scale-down aims at, at most (documented: 75%).
    pub scale_down_target: f64,
    /// Utilization above hint + this is high.
    pub utilization_tolerance: f64,
    /// Largest growth factor per decision.
    pub max_step_factor: f64,
}

impl Default for DataflowConfig {
    fn default() -> Self {
        DataflowConfig {
            stabilize_s: 120.0,
            backlog_scale_up_s: 60.0,
            backlog_sustain_s: 120.0,
            scale_down_backlog_s: 10.0,
            scale_down_sustain_s: 120.0,
            scale_down_target: 0.75,
            utilization_tolerance: 0.05,
            max_step_factor: 2.0,
        }
    }
}

impl DataflowConfig {
    /// Every duration divided by `k`, for laptop-scale demos and tests: the waits
    /// (stabilize, sustain) and the backlog thresholds, which are durations too (seconds
    /// of drain time). Utilization targets and the growth factor stay as they are.
    pub fn time_scaled(k: f64) -> DataflowConfig {
        let d = DataflowConfig::default();
        DataflowConfig {
            stabilize_s: d.stabilize_s / k,
            backlog_scale_up_s: d.backlog_scale_up_s / k,
            backlog_sustain_s: d.backlog_sustain_s / k,
            scale_down_backlog_s: d.scale_down_backlog_s / k,
            scale_down_sustain_s: d.scale_down_sustain_s / k,
            ..d
        }
    }
}

/// The Dataflow policy and its state.
#[derive(Debug, Clone, Default)]
pub struct DataflowPolicy {
    /// Settings.
    pub config: DataflowConfig,
    last_change_s: Option<f64>,
    backlog_high_since: Option<f64>,
    backlog_low_since: Option<f64>,
    /// Since when utilization has stayed under the scale-down target.
    util_low_since: Option<f64>,
    /// Recent (time, utilization), covering the scale-down sustain period.
    recent: std::collections::VecDeque<(f64, f64)>,
}

impl DataflowPolicy {
    /// A policy with these settings.
    pub fn new(config: DataflowConfig) -> DataflowPolicy {
        DataflowPolicy { config, ..Default::default() }
    }
}

impl Policy for DataflowPolicy {
    fn name(&self) -> &'static str {
        "dataflow"
    }

    fn decide(&mut self, s: &Snapshot, limits: &Limits) -> Decision {
        let c = &self.config;
        let (t, cur, u, hint) = (s.time_s, s.current(), s.utilization(), limits.utilization_hint);
        let backlog_s = s.backlog_seconds();
        if backlog_s > c.backlog_scale_up_s {
            self.backlog_high_since.get_or_insert(t);
        } else {
            self.backlog_high_since = None;
        }
        if backlog_s < c.scale_down_backlog_s {
            self.backlog_low_since.get_or_insert(t);
        } else {
            self.backlog_low_since = None;
        }
        let target = hint.min(c.scale_down_target);
        self.util_low_since = if u < target { Some(self.util_low_since.unwrap_or(t)) } else { None };
        self.recent.push_back((t, u));
        while self.recent.front().is_some_and(|(at, _)| t - at > c.scale_down_sustain_s) {
            self.recent.pop_front();
        }
        let detail = format!(
            "utilization {:.0}% (hint {:.0}%), backlog {}",
            u * 100.0,
            hint * 100.0,
            if backlog_s.is_finite() { format!("{backlog_s:.1} s") } else { "growing with no throughput".into() }
        );
        let stay = |rationale, detail: String| Decision { time_s: t, from: cur, to: cur, rationale, detail };
        if self.last_change_s.is_some_and(|l| t - l < c.stabilize_s) {
            return stay(Rationale::WaitingForSignalsToStabilize, detail);
        }
        let step_cap = ((cur as f64) * c.max_step_factor).ceil().max(cur as f64 + 1.0) as u32;
        let d = if self.backlog_high_since.is_some_and(|since| t - since >= c.backlog_sustain_s) {
            // Capacity per worker inferred from throughput and utilization.
            let per_worker = s.throughput_records_per_s() / (cur.max(1) as f64 * u.max(0.05));
            let demand = s.input_records_per_s + s.backlog_records as f64 / c.backlog_scale_up_s;
            let wanted = pool_for(demand / per_worker, hint).max(cur + 1).min(step_cap);
            decide_bounded(s, limits, wanted, Rationale::HighBacklog, detail)
        } else if u > hint + c.utilization_tolerance {
            let wanted = pool_for(cur as f64 * u, hint).max(cur + 1).min(step_cap);
            decide_bounded(s, limits, wanted, Rationale::HighWorkerUtilization, detail)
        } else if self.util_low_since.is_some_and(|since| t - since >= c.scale_down_sustain_s)
            && self.backlog_low_since.is_some_and(|since| t - since >= c.scale_down_sustain_s)
        {
            let peak = self.recent.iter().map(|(_, u)| *u).fold(u, f64::max);
            let wanted = pool_for(cur as f64 * peak, target);
            if wanted < cur {
                decide_bounded(s, limits, wanted, Rationale::LowWorkerUtilization, detail)
            } else {
                stay(
                    Rationale::LowBacklogAndHighWorkerUtilization,
                    format!("{detail}; a smaller pool would exceed {:.0}%", target * 100.0),
                )
            }
        } else if u < target && backlog_s < c.scale_down_backlog_s {
            stay(
                Rationale::WaitingForSignalsToStabilize,
                format!("{detail}; low backlog and utilization not yet sustained for {:.0} s", c.scale_down_sustain_s),
            )
        } else {
            decide_bounded(s, limits, cur, Rationale::LowBacklogAndHighWorkerUtilization, detail)
        };
        // The backlog timers describe the source, not the pool: they carry across changes.
        if d.is_change() {
            self.last_change_s = Some(t);
            // Utilization on a pool of another size says nothing about this one.
            self.util_low_since = None;
            self.recent.clear();
        }
        d
    }
}
