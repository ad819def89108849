//! flexrun's integration tests, one binary with a module per area: they run the real
//! `flexrun` binary against the local stack that `scripts/test.sh` starts (Apache Kafka,
//! bqemulator, gcp-storage-emulator and the project's Schema Registry). One binary
//! instead of one per file links RocksDB and the library once.
//!
//! Every test owns its topic, table, bucket prefix and checkpoint directory, and the
//! emulator faults it injects are scoped to its own table or prefix, so the tests run
//! in parallel (`.config/nextest.toml` names the few that must run alone, and why).
//! Modules that need the stack carry `#![cfg(feature = "integration")]`; without the
//! feature only the pure ones (in `sizing`) run.

#[cfg(feature = "integration")]
mod common;

mod autoscaling;
mod avro;
mod broker;
mod cdc;
mod chaos;
mod checker;
mod crash_points;
mod debezium;
mod dlq_replay;
mod emulator;
mod faults;
mod generator_kafka;
mod google_auth;
mod joining;
mod kafka_to_bq;
mod kafka_to_gcs;
mod lifecycle;
mod metadata;
mod microbatch;
mod progress;
mod protobuf;
mod schema_evolution;
mod secrets;
mod shared_consumer;
mod sizing;
mod state;
mod store;
mod topics;
mod traffic;
mod udf;
mod web_live;
