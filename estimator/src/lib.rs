//! Workers, Streaming Engine compute units and dollars, extrapolated linearly from
//! benchmark baselines (Google's published sizing rule: scale the baseline's workers
//! and SECU by the ratio of throughputs).
//!
//! A pure library: baselines, prices and a request in, an itemised estimate out. No
//! clocks, sockets or files; the data files ship inside (`data/`), and callers may
//! parse their own.
//!
//! Layout:
//! - [`units`]: rates, sizes and durations with units (`100MiB/s`, `5000msg/s`,
//!   `1KiB`, `90s`).
//! - [`baseline`]: baseline files (Google's kafka-to-bq figures ship built in).
//! - [`pricing`]: prices and machine types (us-central1 ships built in).
//! - [`estimate`](mod@estimate): the extrapolation and the bill.
//! - [`files`]: windowed file output (kafka-to-gcs): the publish time of a window.
//! - [`state`]: window state and checkpoints (kafka-to-gcs): state size, memory, and
//!   each checkpoint's bytes and duration per backend and kind.
//! - [`boundary`]: the capacity-boundary search (binary search on the offered rate
//!   against a caller-supplied probe), as `flexrun capacity` runs it.

pub mod baseline;
pub mod boundary;
pub mod estimate;
pub mod files;
pub mod pricing;
pub mod state;
pub mod units;

pub use baseline::{google_kafka_to_bq, Baseline, BaselineError, BaselineFile, Mode, GOOGLE_KAFKA_TO_BQ_NAME};
pub use boundary::{search, Boundary, SearchError, SearchSpace, Trial};
pub use estimate::{bill, estimate, CostItem, Estimate, EstimateError, Request};
pub use pricing::{Commitment, MachineType, Pricing};
pub use units::{parse_duration, parse_duration_or_zero, parse_size, Rate, UnitError};
