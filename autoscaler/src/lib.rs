//! Worker-count decisions from metric snapshots: Dataflow's documented rules and
//! DS2's one-step method.
//!
//! A pure library: a [`Snapshot`] of a window (per worker busy time, records and bytes;
//! job input rate and backlog; the caller's clock) and [`Limits`] go in, a
//! [`Decision`] (target workers and a rationale in Dataflow's words) comes out. No
//! clocks, sockets or files: the live runner and the simulator drive the same code
//! and get the same decisions for the same inputs.
//!
//! Layout:
//! - [`metrics`]: the snapshot and limits, with the derived signals (utilization,
//!   backlog seconds, DS2's true processing rate).
//! - [`decision`]: [`Decision`] and [`Rationale`].
//! - [`policy`]: the [`Policy`] trait, bounds (partitions, min/max), selection.
//! - [`dataflow`] and [`ds2`]: the two policies.
//! - [`spec`]: [`ScalingConfig`], the pool's settings and the one place a policy is built.
//! - [`controller`]: [`Controller`], which decides and records (the live pool and
//!   `simulate` both drive it).

pub mod controller;
pub mod dataflow;
pub mod decision;
pub mod ds2;
pub mod metrics;
pub mod policy;
pub mod spec;

pub use controller::Controller;
pub use dataflow::{DataflowConfig, DataflowPolicy};
pub use decision::{Decision, Rationale};
pub use ds2::{Ds2Config, Ds2Policy};
pub use metrics::{Limits, Snapshot, WorkerMetrics, DEFAULT_UTILIZATION_HINT};
pub use policy::{pool_for, Algorithm, Policy, PolicyError, PolicyKind};
pub use spec::ScalingConfig;
