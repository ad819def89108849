//! flexrun's runner: the `flexrun` binary and the live engines. It executes Google's
//! map-only Dataflow templates for real on one machine, against a real Kafka-compatible
//! broker and BigQuery (Google's endpoints or the local emulator).
//!
//! # Layers
//! A module names only modules of lower layers, never one of its own layer or above;
//! `scripts/check_layers.py` (run by `scripts/test.sh`) reads this list and fails
//! otherwise. Items at the crate root ([`usage`], `crash_point!`) are open to all.
//!
//! 1. `checksum`
//! 2. `stats`, `record`, `retry`, `progress`, `udf`, `malloc`, `gcp_auth`
//! 3. `kafka`, `bigquery`, `control`, `store`
//! 4. `state`
//! 5. `avro`, `local`
//! 6. `scaling`, `proto`
//! 7. `kafka_to_bq`, `kafka_to_gcs`, `microbatch`, `data_generator`
//! 8. `sizing`
//! 9. `cli`
//!
//! # Layout (lower layers first)
//! - [`checksum`]: CRC-32C, the one checksum of rows, log lines and checkpoint files.
//! - [`malloc`]: glibc malloc settings applied at start-up (fewer page faults per batch).
//! - [`gcp_auth`]: Application Default Credentials for flexrun's own Google HTTP calls.
//! - [`stats`]: per-stage latency histograms ([`stats::Stage`]) and job counters.
//! - [`record`]: what a record can fail as ([`record::RecordError`]) and BigQuery's
//!   timestamp text forms, shared by the JSON and Avro mappers.
//! - [`retry`]: the one retry policy ([`retry::Backoff`]) every remote call waits by.
//! - [`kafka`]: one [`kafka::Connection`] (bootstrap + auth → client config) that builds
//!   every consumer, producer and admin client, the source's partitions and offsets, and
//!   one producer context that acknowledges and times deliveries.
//! - [`avro`]: Avro framings, the writer-schema decoder, Avro → BigQuery table and row
//!   mapping, a Schema Registry client, and JSON → Avro for the generator.
//! - [`proto`]: Protobuf input: messages decoded by their descriptor (a descriptor set
//!   file, or the Schema Registry's `.proto` text), mapped onto columns, tables made from
//!   descriptors.
//! - [`bigquery`]: table refs, endpoints, schema, proto, REST, the Storage Write client
//!   and a retrying append target.
//! - [`progress`]: offset and commit logs, asynchronous progress.
//! - [`store`]: object storage: a Cloud Storage bucket over its JSON API (the emulator
//!   or Google) or a local directory, with put, get, list, rename and delete.
//! - [`state`]: keyed window state in a heap or an LSM (RocksDB) backend, with full
//!   and incremental checkpoints to object storage.
//! - [`scaling`]: what autoscaled templates share: a worker's emulated CPU and
//!   `update-options` applied to the autoscaler.
//! - [`control`]: the local control plane: job records and each running job's control
//!   socket (`flexrun dataflow jobs list|describe|drain|cancel|update-options`).
//! - Templates, one component each: [`kafka_to_bq`] (config, transform, dead letters,
//!   shards and the exactly-once protocol, the live worker pool), [`kafka_to_gcs`]
//!   (windowed files, exactly once, with a parallel committer), [`microbatch`]
//!   (rate-to-stats and kafka-to-kafka) and [`data_generator`]
//!   (streaming-data-generator, on the pure `flexrun-generator` language).
//! - [`udf`]: JavaScript UDFs (Google's contract) in an embedded QuickJS engine.
//! - [`sizing`]: `calibrate` (measuring the real commit path) and `capacity`.
//! - [`local`]: set-up helpers for the local stack (topics, tables, sample data).
//! - [`cli`]: clap types and printing, one file per subcommand; `main.rs` only parses,
//!   sets up tracing and the runtime, and maps errors to exit codes.
//!
//! The pure cores live in their own crates: `flexrun-autoscaler` (policies),
//! `flexrun-estimator` (estimates, units, baselines), `flexrun-simulate` (virtual time)
//! and `flexrun-generator` (the JSON Data Generator language).
//!
//! Errors are `thiserror` enums inside modules and `anyhow` from the templates' `run`
//! functions outwards.

pub mod avro;
pub mod bigquery;
pub mod checksum;
pub mod cli;
pub mod control;
pub mod data_generator;
pub mod gcp_auth;
pub mod kafka;
pub mod kafka_to_bq;
pub mod kafka_to_gcs;
pub mod local;
pub mod malloc;
pub mod microbatch;
pub mod progress;
pub mod proto;
pub mod record;
pub mod retry;
pub mod scaling;
pub mod sizing;
pub mod state;
pub mod stats;
pub mod store;
pub mod udf;

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
pub struct UsageError {
    /// What is wrong, for people.
    pub message: String,
    /// The same as JSON (with `--format json`: Dataflow's InvalidTemplateParameters).
    pub json: Option<serde_json::Value>,
}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UsageError {}

/// Wrap a message as a [`UsageError`] in an `anyhow::Error`.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError { message: msg.into(), json: None })
}

/// Bad template parameters as a [`UsageError`]: one line per violation, and with
/// `as_json` the JSON Dataflow's API answers with (`parameterViolations`).
pub fn invalid_parameters(violations: &[flexrun_templates::ParameterViolation], as_json: bool) -> anyhow::Error {
    let message = violations.iter().map(|v| v.description.as_str()).collect::<Vec<_>>().join("\n");
    let json = as_json.then(|| flexrun_templates::invalid_template_parameters(violations));
    anyhow::Error::new(UsageError { message, json })
}
