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
pub mod pipeline;
pub mod progress;
pub mod schema;
pub mod stats;
pub mod transform;
