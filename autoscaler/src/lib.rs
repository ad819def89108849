//! Worker-count decisions from metric snapshots (issue 4: Dataflow's rules and DS2).
//!
//! This crate is a pure library: metric snapshots in, decisions out; no clocks,
//! sockets or files. The live runner and the simulator will drive the same code.
//! It holds only the shared vocabulary so far; the policies are not built yet.

use serde::{Deserialize, Serialize};

/// Why the worker count changed or stayed, in Dataflow's words (reference §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rationale {
    /// Scale up: the backlog would take too long to drain.
    HighBacklog,
    /// Scale up: CPU is above the utilization hint.
    HighWorkerUtilization,
    /// Scale down: CPU is well below the hint and the backlog is low.
    LowWorkerUtilization,
    /// No change: recent signals disagree or are too new.
    WaitingForSignalsToStabilize,
    /// No change: a limit other than resources (partitions, min/max).
    HitNonResourceRelatedLimit,
    /// No change: converged.
    LowBacklogAndHighWorkerUtilization,
}

impl Rationale {
    /// The rationale text as Dataflow's autoscaling chart shows it.
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
