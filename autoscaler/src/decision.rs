//! What the autoscaler answers: a worker count and why, in Dataflow's words.

use serde::{Deserialize, Serialize};

/// Why the worker count changed or stayed (Dataflow's autoscaling rationale, reference §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rationale {
    /// Scale up: the backlog would take too long to drain.
    HighBacklog,
    /// Scale up: utilization is above the hint.
    HighWorkerUtilization,
    /// Scale down: utilization is well below the hint and the backlog is low.
    LowWorkerUtilization,
    /// No change: too soon after the last change, or the signals disagree.
    WaitingForSignalsToStabilize,
    /// No change (or a capped change): partitions or min/max workers limit the count.
    HitNonResourceRelatedLimit,
    /// No change: converged.
    LowBacklogAndHighWorkerUtilization,
}

impl Rationale {
    /// The text Dataflow's autoscaling chart shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Rationale::HighBacklog => "High backlog",
            Rationale::HighWorkerUtilization => "High worker utilization",
            Rationale::LowWorkerUtilization => "Low worker utilization",
            Rationale::WaitingForSignalsToStabilize => "Waiting for the signals to stabilize",
            Rationale::HitNonResourceRelatedLimit => "Hit non-resource related limit",
            Rationale::LowBacklogAndHighWorkerUtilization => "Low backlog and high worker utilization",
        }
    }
}

impl std::fmt::Display for Rationale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One autoscaling decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The snapshot's time.
    pub time_s: f64,
    /// Workers before.
    pub from: u32,
    /// Workers wanted (equal to `from` for no change).
    pub to: u32,
    /// Why.
    pub rationale: Rationale,
    /// The numbers behind it, for logs and dashboards.
    pub detail: String,
}

impl Decision {
    /// Whether the count changes.
    pub fn is_change(&self) -> bool {
        self.to != self.from
    }

    /// Dataflow's AutoscalingEvent type for this decision: `TARGET_NUM_WORKERS_CHANGED`
    /// or `NO_CHANGE`.
    pub fn event_type(&self) -> &'static str {
        if self.is_change() {
            "TARGET_NUM_WORKERS_CHANGED"
        } else {
            "NO_CHANGE"
        }
    }

    /// The decision as Dataflow's job log words it. The high-backlog sentence is Google's
    /// ("Autoscaling: Raised the number of workers to N so that the pipeline can catch up
    /// with its backlog and keep up with its input rate."); the others take the same form
    /// with the rationale Dataflow's autoscaling chart shows.
    pub fn job_log_text(&self) -> String {
        match (self.rationale, self.to.cmp(&self.from)) {
            (Rationale::HighBacklog, std::cmp::Ordering::Greater) => format!(
                "Autoscaling: Raised the number of workers to {} so that the pipeline can catch up with its backlog and keep up with its input rate.",
                self.to
            ),
            (r, std::cmp::Ordering::Greater) => format!("Autoscaling: Raised the number of workers to {} ({}).", self.to, r.as_str()),
            (r, std::cmp::Ordering::Less) => format!("Autoscaling: Reduced the number of workers to {} ({}).", self.to, r.as_str()),
            (r, std::cmp::Ordering::Equal) => format!("Autoscaling: no change at {} workers ({}).", self.to, r.as_str()),
        }
    }
}
