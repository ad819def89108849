//! The policy interface, the bounds every policy applies, and policy selection.

use crate::decision::{Decision, Rationale};
use crate::metrics::{Limits, Snapshot};
use serde::{Deserialize, Serialize};

/// A scaling policy: a deterministic function of its inputs and its own state.
pub trait Policy: Send {
    /// Decide the worker count for this window.
    fn decide(&mut self, s: &Snapshot, limits: &Limits) -> Decision;
    /// The policy's name.
    fn name(&self) -> &'static str;
}

/// The pool that carries `busy_workers` workers' worth of work (busy vCPUs ÷ vCPUs
/// per worker) at `utilization`: the smallest whole count whose busy fraction is at
/// most `utilization`, and at least one.
///
/// The one sizing rule: the policies size a pool with it on every change, and
/// `flexrun estimate` sizes with it at the baseline's measured utilization, so an
/// estimate and a simulation's settled pool are the same number.
///
/// ```
/// use flexrun_autoscaler::pool_for;
/// assert_eq!(pool_for(44.1, 0.70), 63);
/// assert_eq!(pool_for(0.2, 0.8), 1);
/// ```
pub fn pool_for(busy_workers: f64, utilization: f64) -> u32 {
    let exact = busy_workers / utilization.max(1e-9);
    // A hair under a whole count is that count: the busy figure came through floats.
    (exact - 1e-9).ceil().clamp(1.0, u32::MAX as f64) as u32
}

/// `--autoscaling-algorithm` (Dataflow's option).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Algorithm {
    /// Scale on throughput (the default with Streaming Engine).
    ThroughputBased,
    /// Keep `numWorkers`.
    None,
}

/// Which policy decides under THROUGHPUT_BASED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyKind {
    /// Dataflow's documented rules.
    Dataflow,
    /// DS2's one-step method.
    Ds2,
}

/// A bad policy or algorithm name.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PolicyError {
    /// Unknown name.
    #[error("unknown {what} {given:?}: expected {expected}")]
    Unknown {
        /// Which setting.
        what: &'static str,
        /// The value given.
        given: String,
        /// The choices.
        expected: &'static str,
    },
    /// Limits that cannot be met.
    #[error("invalid limits: {0}")]
    Limits(String),
}

impl std::str::FromStr for Algorithm {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "THROUGHPUT_BASED" => Ok(Algorithm::ThroughputBased),
            "NONE" => Ok(Algorithm::None),
            _ => Err(PolicyError::Unknown {
                what: "autoscaling algorithm",
                given: s.into(),
                expected: "THROUGHPUT_BASED or NONE",
            }),
        }
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "dataflow" => Ok(PolicyKind::Dataflow),
            "ds2" => Ok(PolicyKind::Ds2),
            _ => Err(PolicyError::Unknown { what: "autoscaling policy", given: s.into(), expected: "dataflow or ds2" }),
        }
    }
}

impl PolicyKind {
    /// The name used in flags.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Dataflow => "dataflow",
            PolicyKind::Ds2 => "ds2",
        }
    }
}

impl Limits {
    /// Check that the limits make sense (min ≤ max, hint in 0.1..=0.9, at least 1 worker).
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.min_workers == 0 {
            return Err(PolicyError::Limits("min workers must be at least 1".into()));
        }
        if self.min_workers > self.max_workers {
            return Err(PolicyError::Limits(format!(
                "min workers ({}) is above max workers ({})",
                self.min_workers, self.max_workers
            )));
        }
        if !(0.1..=0.9).contains(&self.utilization_hint) {
            return Err(PolicyError::Limits(format!(
                "worker utilization hint {} is outside 0.1 to 0.9",
                self.utilization_hint
            )));
        }
        Ok(())
    }
}

/// Keeps the worker count (`--autoscaling-algorithm=NONE`), within min/max.
#[derive(Debug, Default)]
pub struct Fixed;

impl Policy for Fixed {
    fn decide(&mut self, s: &Snapshot, limits: &Limits) -> Decision {
        let cur = s.current();
        let to = cur.clamp(limits.min_workers, limits.max_workers);
        Decision {
            time_s: s.time_s,
            from: cur,
            to,
            rationale: Rationale::HitNonResourceRelatedLimit,
            detail: "autoscaling is off (NONE)".into(),
        }
    }
    fn name(&self) -> &'static str {
        "none"
    }
}

/// Apply partitions and min/max to a wanted count. Returns the bounded count and,
/// when a bound changed it, the rationale and why.
pub fn bound(wanted: u32, limits: &Limits) -> (u32, Option<String>) {
    let upper = limits.max_workers.min(limits.max_parallelism.max(limits.min_workers));
    if wanted > upper {
        let why = if limits.max_parallelism < limits.max_workers {
            format!("{wanted} workers wanted, but {} source partitions cap the useful parallelism (Insufficient Apache Kafka source partitions)", limits.max_parallelism)
        } else {
            format!("{wanted} workers wanted, but max workers is {}", limits.max_workers)
        };
        return (upper, Some(why));
    }
    if wanted < limits.min_workers {
        return (
            limits.min_workers,
            Some(format!("{wanted} workers would do, but min workers is {}", limits.min_workers)),
        );
    }
    (wanted, None)
}

/// Build a decision from a wanted count, applying [`bound`]: a capped change keeps its
/// direction's rationale when it still moves, and says "Hit non-resource related limit"
/// when the bound stops it.
pub fn decide_bounded(s: &Snapshot, limits: &Limits, wanted: u32, rationale: Rationale, detail: String) -> Decision {
    let cur = s.current();
    let (to, capped) = bound(wanted, limits);
    match capped {
        Some(why) if to == cur => Decision {
            time_s: s.time_s,
            from: cur,
            to,
            rationale: Rationale::HitNonResourceRelatedLimit,
            detail: format!("{detail}; {why}"),
        },
        Some(why) => Decision { time_s: s.time_s, from: cur, to, rationale, detail: format!("{detail}; {why}") },
        None => Decision { time_s: s.time_s, from: cur, to, rationale, detail },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_bad_names_are_named() {
        assert_eq!("THROUGHPUT_BASED".parse::<Algorithm>().unwrap(), Algorithm::ThroughputBased);
        assert_eq!("ds2".parse::<PolicyKind>().unwrap(), PolicyKind::Ds2);
        let e = "throughput".parse::<Algorithm>().unwrap_err().to_string();
        assert!(e.contains("THROUGHPUT_BASED or NONE"), "{e}");
        assert!("DS3".parse::<PolicyKind>().is_err());
    }

    #[test]
    fn limits_are_validated() {
        assert!(Limits::default().validate().is_ok());
        assert!(Limits { min_workers: 5, max_workers: 2, ..Default::default() }.validate().is_err());
        assert!(Limits { utilization_hint: 0.95, ..Default::default() }.validate().is_err());
        assert!(Limits { min_workers: 0, ..Default::default() }.validate().is_err());
    }

    #[test]
    fn bounds_prefer_the_partition_reason() {
        let l = Limits { min_workers: 1, max_workers: 100, max_parallelism: 8, utilization_hint: 0.8 };
        let (to, why) = bound(20, &l);
        assert_eq!(to, 8);
        assert!(why.unwrap().contains("8 source partitions"));
        let l = Limits { max_parallelism: u32::MAX, max_workers: 10, ..l };
        assert!(bound(20, &l).1.unwrap().contains("max workers is 10"));
        let l = Limits { min_workers: 3, ..l };
        assert_eq!(bound(1, &l).0, 3);
    }
}
