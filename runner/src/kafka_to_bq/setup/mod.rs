//! Stage 2, the set-up: what a job reads, where it writes and where it starts, decided
//! once from the parameters, the broker and BigQuery before any record is read.
//!
//! - [`config`]: the job's settings from template parameters and run flags;
//!   [`format`]: `messageFormat`, the schema source, dynamic tables, dispositions.
//! - [`topics`]: the topics a job reads (one, a list, a pattern) and each one's table.
//! - [`table`]: the destination table's schema at start (read, or created from the
//!   Avro schema).
//! - [`positions`]: where each partition starts; [`layout`]: where each topic's
//!   checkpoint lives and where a topic that joins a running job starts.

pub mod config;
pub mod format;
pub mod layout;
pub mod positions;
pub mod table;
pub mod topics;
