//! Sizing on this machine: `flexrun calibrate` (how much one core carries through
//! kafka-to-bq's processing path, written as a baseline) and `flexrun capacity` (where
//! the Kafka setup saturates, found by a binary search on the offered rate).
//!
//! Layout:
//! - [`calibrate`]: the measurement and the baseline file it writes.
//! - [`capacity`]: one probe trial against a real broker, judged by congestion indicators.
//!   The search that chooses the rates is pure and lives in `flexrun-estimator`
//!   (`boundary::search`).
//!
//! Both commands' flags, progress bars, tables and charts are in `cli::sizing`.

pub mod calibrate;
pub mod capacity;
