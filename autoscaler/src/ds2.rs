//! DS2's one-step policy (Kalavri et al., OSDI 2018), for a map-only job.
//!
//! Observed rates lie when a worker waits on input or output, so DS2 divides records
//! by *useful* (busy) time: the true processing rate. With a per-worker capacity `c`
//! (records per busy second), the worker count that carries the input rate `r` at
//! the utilization hint `h`, and also drains the backlog `B` within the catch-up time
//! `T`, is `ceil((r + B / T) / (c · h))`, reached in one step when rates scale
//! linearly. A map-only pipeline is one fused operator, so the DAG walk of the paper
//! reduces to this single formula.
//!
//! Knobs (paper's `ds2.toml` names in brackets): `warm_up_windows` [warm_up_time]:
//! windows ignored after a change, while new workers start; `activation` [activation_time]:
//! consecutive windows that must agree before acting; `scale_down_deadband`: a smaller
//! count is only taken when it saves more than this fraction (noise immunity).
//!
//! Scaling down is deliberately more careful than scaling up (a wrong scale-down
//! builds backlog; a wrong scale-up only costs money): it needs a low backlog (at most
//! `low_backlog_windows` windows of input waiting) and `scale_down_activation`
//! consecutive windows that want fewer workers, and it takes the largest of their
//! counts. A single window with a noisy input rate (a slow producer, a busy broker)
//! therefore cannot shrink the pool under load.

use crate::decision::{Decision, Rationale};
use crate::metrics::{Limits, Snapshot};
use crate::policy::{decide_bounded, Policy};

/// DS2 settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Ds2Config {
    /// Seconds within which a backlog should be drained.
    pub catch_up_s: f64,
    /// Windows ignored after a change.
    pub warm_up_windows: u32,
    /// Consecutive windows that must want the same direction before acting.
    pub activation: u32,
    /// Fraction of the current count a scale-down must save to be taken.
    pub scale_down_deadband: f64,
    /// Consecutive windows that must want fewer workers before scaling down.
    pub scale_down_activation: u32,
    /// Scale down only when at most this many windows' worth of input is waiting.
    pub low_backlog_windows: f64,
}

impl Default for Ds2Config {
    fn default() -> Self {
        Ds2Config {
            catch_up_s: 60.0,
            warm_up_windows: 1,
            activation: 1,
            scale_down_deadband: 0.15,
            scale_down_activation: 2,
            low_backlog_windows: 1.0,
        }
    }
}

/// The DS2 policy and its state.
#[derive(Debug, Clone, Default)]
pub struct Ds2Policy {
    /// Settings.
    pub config: Ds2Config,
    warm_up_left: u32,
    agree: u32,
    last_direction: i8,
    /// Consecutive windows wanting fewer workers, and the largest count they wanted.
    down_wish: Option<(u32, u32)>,
}

impl Ds2Policy {
    /// A policy with these settings.
    pub fn new(config: Ds2Config) -> Ds2Policy {
        Ds2Policy { config, ..Default::default() }
    }
}

impl Policy for Ds2Policy {
    fn name(&self) -> &'static str {
        "ds2"
    }

    fn decide(&mut self, s: &Snapshot, limits: &Limits) -> Decision {
        let cur = s.current();
        let stay = |rationale, detail: String| Decision { time_s: s.time_s, from: cur, to: cur, rationale, detail };
        if self.warm_up_left > 0 {
            self.warm_up_left -= 1;
            return stay(Rationale::WaitingForSignalsToStabilize, "warming up after the last change".into());
        }
        let hint = limits.utilization_hint;
        let Some(capacity) = s.true_rate_per_worker() else {
            if s.input_records_per_s <= 0.0 && s.backlog_records == 0 {
                // Nothing to do at all: the floor is enough.
                return self.act(decide_bounded(
                    s,
                    limits,
                    limits.min_workers,
                    Rationale::LowWorkerUtilization,
                    "no input and no backlog".into(),
                ));
            }
            return stay(Rationale::WaitingForSignalsToStabilize, "no busy time measured yet".into());
        };
        let demand = s.input_records_per_s + s.backlog_records as f64 / self.config.catch_up_s;
        let wanted = (demand / (capacity * hint)).ceil().max(1.0) as u32;
        let detail = format!(
            "true rate {capacity:.0} rec/s per worker, input {:.0} rec/s, backlog {} rec (drain in {:.0} s), hint {hint}: {wanted} workers",
            s.input_records_per_s, s.backlog_records, self.config.catch_up_s
        );
        let low_backlog =
            s.backlog_records as f64 <= self.config.low_backlog_windows * s.input_records_per_s.max(1.0) * s.window_s;
        if !(wanted < cur && low_backlog) {
            self.down_wish = None;
        }
        if wanted > cur {
            let r = if s.backlog_records as f64 / self.config.catch_up_s > 0.1 * s.input_records_per_s {
                Rationale::HighBacklog
            } else {
                Rationale::HighWorkerUtilization
            };
            return self.act(decide_bounded(s, limits, wanted, r, detail));
        }
        if wanted < cur && (cur - wanted) as f64 > self.config.scale_down_deadband * cur as f64 {
            if !low_backlog {
                return stay(
                    Rationale::WaitingForSignalsToStabilize,
                    format!("{detail}; not scaling down while {} records are waiting", s.backlog_records),
                );
            }
            let (n, most) = self.down_wish.map_or((1, wanted), |(n, m)| (n + 1, m.max(wanted)));
            if n < self.config.scale_down_activation {
                self.down_wish = Some((n, most));
                return stay(
                    Rationale::WaitingForSignalsToStabilize,
                    format!(
                        "{detail}; a smaller pool must be wanted for {} windows in a row",
                        self.config.scale_down_activation
                    ),
                );
            }
            self.down_wish = None;
            if most < cur {
                return self.act(decide_bounded(
                    s,
                    limits,
                    most,
                    Rationale::LowWorkerUtilization,
                    format!("{detail}; {most} over the last {n} windows"),
                ));
            }
        }
        self.agree = 0;
        self.last_direction = 0;
        let d = decide_bounded(s, limits, cur, Rationale::LowBacklogAndHighWorkerUtilization, detail);
        if d.is_change() {
            self.warm_up_left = self.config.warm_up_windows;
        }
        d
    }
}

impl Ds2Policy {
    /// Apply activation (consecutive agreement) and start the warm-up after a change.
    fn act(&mut self, d: Decision) -> Decision {
        let dir = (d.to as i64 - d.from as i64).signum() as i8;
        if dir == 0 {
            self.agree = 0;
            self.last_direction = 0;
            return d;
        }
        self.agree = if dir == self.last_direction { self.agree + 1 } else { 1 };
        self.last_direction = dir;
        if self.agree < self.config.activation {
            return Decision {
                to: d.from,
                rationale: Rationale::WaitingForSignalsToStabilize,
                detail: format!("{} (waiting for {} agreeing windows)", d.detail, self.config.activation),
                ..d
            };
        }
        self.agree = 0;
        self.warm_up_left = self.config.warm_up_windows;
        d
    }
}
