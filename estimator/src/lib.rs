//! The whole pipeline's bill: Dataflow workers and Streaming Engine compute units from
//! benchmark baselines with a two-part CPU model (vCPU time per message plus per byte),
//! and BigQuery's ingestion and storage and Managed Kafka from their price lists.
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
//! - [`estimate`](mod@estimate): workers from the CPU model, sized by the autoscaler's
//!   one rule (`flexrun_autoscaler::pool_for`), and the bill.
//! - [`rowsize`]: the bytes BigQuery bills per row (its data size calculation).
//! - [`pipeline`]: the bill's other lines: BigQuery ingestion and storage, Managed Kafka.
//! - [`limits`]: Google's quotas and limits as data, and which a sized pipeline crosses.
//! - [`files`]: windowed file output (kafka-to-gcs): the publish time of a window.
//! - [`state`]: window state and checkpoints (kafka-to-gcs): state size, memory, and
//!   each checkpoint's bytes and duration per backend and kind.
//! - [`boundary`]: the capacity-boundary search (binary search on the offered rate
//!   against a caller-supplied probe), as `flexrun capacity` runs it.

pub mod baseline;
pub mod boundary;
pub mod estimate;
pub mod files;
pub mod limits;
pub mod pipeline;
pub mod pricing;
pub mod rowsize;
pub mod state;
pub mod units;

pub use baseline::{
    google_kafka_to_bq, Baseline, BaselineError, BaselineFile, CpuTerms, Mode, GOOGLE_KAFKA_TO_BQ_NAME,
};
pub use boundary::{search, Boundary, SearchError, SearchSpace, Trial};
pub use estimate::{bill, estimate, CostItem, Estimate, EstimateError, Request, RuleOfThumb};
pub use pipeline::{KafkaChoice, Line, Partitioning, PipelineOptions, Totals};
pub use pricing::{Commitment, MachineType, Pricing};
pub use units::{parse_duration, parse_duration_or_zero, parse_size, Rate, UnitError};
