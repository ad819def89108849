//! flexrun's runner: executes Google's map-only Dataflow templates for real on one
//! machine, against a real Kafka-compatible broker and BigQuery (Google's endpoints or
//! the local emulator).
//!
//! # Layout
//! - [`cli`]: the `flexrun` command line (clap), including the gcloud-compatible
//!   `flexrun dataflow flex-template run ...` form; [`local`]: helpers that set up
//!   topics, tables and sample data on the local stack.
//! - [`config`]: a job's settings from validated template parameters
//!   (`flexrun-templates` does the parameter parsing and validation).
//! - Source: [`kafka`] (rdkafka: settings, partitions, positions, consumers).
//! - Transform: [`schema`] (the table's schema) and [`transform`] (JSON message →
//!   protobuf row, or the reason it cannot be); [`dlq`] builds dead-letter rows.
//! - Sink: [`bigquery`] (REST via gcp-bigquery-client, Storage Write over gRPC).
//! - [`generator`]: the streaming-data-generator template (JSON Data Generator
//!   schemas at a steady rate into Kafka).
//! - [`simulate`]: `flexrun simulate`, the same job at cloud scale in virtual time
//!   with the real autoscaler in the loop.
//! - [`sizing`]: `flexrun calibrate` (a baseline measured on this machine) and
//!   `flexrun capacity` (the broker's saturation boundary).
//! - [`microbatch`]: the `rate-to-stats` and `kafka-to-kafka` templates, Spark-style
//!   micro-batches on the same offset/commit logs, for the progress-tracking benchmarks.
//! - Execution: [`pipeline`] (shards, batches, the exactly-once protocol, drain) on
//!   top of [`progress`] (the offset log and commit log) and [`stats`] (per-stage
//!   latency histograms and counters).
//!
//! Errors are `thiserror` enums inside modules and `anyhow` from [`pipeline::run`]
//! outwards.

pub mod bigquery;
pub mod cli;
pub mod config;
pub mod dlq;
pub mod generator;
pub mod kafka;
pub mod local;
pub mod microbatch;
pub mod pipeline;
pub mod progress;
pub mod schema;
pub mod simulate;
pub mod sizing;
pub mod stats;
pub mod transform;

/// A named crash point of the exactly-once protocol. Built with the `failpoints`
/// feature and run with `FAILPOINTS=<name>=return` (or `N*off->return` to pass it N
/// times first), the process kills itself with SIGKILL there; otherwise it is nothing.
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        {
            if ::fail::eval($name, |_| ()).is_some() {
                eprintln!("crash point {} reached: SIGKILL", $name);
                // SAFETY: kill(2) on our own pid.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            }
        }
    };
}

/// A problem with the user's input (flags, parameters, files): the binary prints it and
/// exits with status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Wrap a message as a [`UsageError`] in an `anyhow::Error`.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}
