//! Stage 4, the running job: shards on a pool of workers, each reading, mapping and
//! writing batches by the exactly-once protocol (see [`crate::kafka_to_bq`]).
//!
//! - [`shard`]: one shard's steady loop, and first its recovery from its logs
//!   (`shard/recover.rs`: a logged batch replayed exactly, streams reopened).
//! - [`records`]: a batch's Kafka records; [`batch`]: a batch from cut to mapped rows;
//!   [`writer`]: the shard's write targets and appends; [`sent`]: what an at-least-once
//!   shard sent and has not committed.
//! - [`evolve`]: the table's schema changed for new records (`schemaUpdateOptions`).
//! - [`pool`]: the live worker pool (shards on workers, moved on a rescale);
//!   [`autoscale`]: the autoscaler fed once per interval, new partitions found;
//!   [`publish`]: the dashboard's points.

pub mod autoscale;
pub mod batch;
pub mod evolve;
pub mod pool;
pub mod publish;
pub mod records;
pub mod sent;
pub mod shard;
pub mod writer;
