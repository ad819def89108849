//! Protobuf input (`messageFormat=PROTO` and `PROTO_CONFLUENT_WIRE_FORMAT`): messages
//! decoded with their descriptor by `prost-reflect`, mapped onto BigQuery columns as
//! BigQuery documents the Storage Write API's protobuf types, and tables made from
//! descriptors.
//!
//! - [`decoder`]: [`ProtoDecoder`], a message's descriptor from a compiled descriptor set
//!   (`protoSchemaPath` and `fullMessageName`, as Google's Pub/Sub Proto to BigQuery
//!   template takes them), or from the Schema Registry in Confluent's wire format
//!   (schema id, then message indexes), its `.proto` text compiled by `protox`.
//! - [`row`]: a decoded message → the JSON value the JSON path maps onto the table
//!   (well-known types, enums, repeated and nested messages, maps as repeated key/value
//!   records).
//! - [`fast`]: the wire format straight to the Storage Write row for a job of one
//!   message type, byte for byte what [`row`] and the JSON mapping give.
//! - [`table`]: a message descriptor → a BigQuery schema.
//!
//! `prost-reflect` was chosen because it is the dynamic-message half of `prost`, which
//! flexrun already uses for its Storage Write rows, and `protox` because it compiles
//! `.proto` text in Rust, with no `protoc` to install.

pub mod decoder;
pub mod fast;
pub mod row;
pub mod table;

pub use decoder::ProtoDecoder;

/// Whether a message type is one of Google's wrapper types (`google.protobuf.Int64Value`
/// and the rest), written as the value it wraps.
pub fn is_wrapper(full_name: &str) -> bool {
    matches!(
        full_name,
        "google.protobuf.DoubleValue"
            | "google.protobuf.FloatValue"
            | "google.protobuf.Int64Value"
            | "google.protobuf.UInt64Value"
            | "google.protobuf.Int32Value"
            | "google.protobuf.UInt32Value"
            | "google.protobuf.BoolValue"
            | "google.protobuf.StringValue"
            | "google.protobuf.BytesValue"
    )
}
