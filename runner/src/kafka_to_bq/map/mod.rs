//! Stage 1, the mapping: one Kafka record → one protobuf row in the table's schema, or
//! the dead-letter row that says why not. Pure functions of the record's bytes and the
//! schema, so a replayed batch maps to the very same rows.
//!
//! - [`transform`]: the entry ([`transform::Mapper`]), JSON or Avro (through
//!   [`crate::avro`]), the UDF, the Kafka key, tombstones.
//! - The JSON ladder, fastest first, each giving the same bytes as the next:
//!   [`json_shaped`] (the layout learned from earlier messages), [`json_flat`] (the lean
//!   parser of a flat object, its strings measured by [`ascii_run`]), [`json_row`]
//!   (borrowed pairs, then a `serde_json::Value`).
//! - [`metadata`]: the Kafka metadata columns; [`cdc`]: CDC's change type and sequence
//!   number; [`debezium`]: Debezium's envelopes as changes; [`dlq`]: dead-letter rows
//!   in Google's schema.

pub mod ascii_run;
pub mod cdc;
pub mod debezium;
pub mod dlq;
pub mod json_flat;
pub mod json_row;
pub mod json_shaped;
pub mod metadata;
#[cfg(test)]
mod proto_fast_tests;
pub mod transform;
