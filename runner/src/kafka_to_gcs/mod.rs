//! kafka-to-gcs (Google's `Kafka_to_Gcs_Flex`): a topic into fixed windows of files in
//! Cloud Storage or on disk, exactly once across crashes, committed in parallel.
//!
//! # Layout
//! - [`config`]: the job's settings from Google's parameters.
//! - [`window`]: fixed windows, Google's file names, record-to-window assignment and
//!   the replay rule (pure).
//! - [`encode`]: a file's bytes: JSON lines, or Avro container files or Parquet files
//!   ([`parquet`]) per writer schema.
//! - [`log`]: the window commit log (`prepared`, `committed`).
//! - [`committer`]: stage, publish (trash + rename) and sweep, N requests at a time.
//! - [`open_windows`]: the open windows over the state backend ([`crate::state`]), with
//!   the positions that must change with it.
//! - [`reader`] and [`pool`]: the workers, each reading its partitions into state
//!   and rendering its shards of a closing window; [`scale`] sizes them with the
//!   autoscaler.
//! - [`checkpoints`]: where state starts from, checkpoints every interval, and what
//!   they cost.
//! - [`job`]: recovery, the coordinator's loop, and closing windows; [`publish`]
//!   sends the dashboard its points.
//!
//! # Positions and timestamps
//! - A position the broker no longer holds (retention, a recreated topic, a log cut
//!   short), at start or while running, is judged by `offsetGapPolicy`
//!   ([`crate::kafka::gaps`]); partitions added to the topic are found every few
//!   seconds and start at their earliest offset, saved first ([`crate::kafka::starts`]).
//! - A record stamped before the epoch or more than `maxTimestampSkew` ahead is
//!   windowed by the processing time (`timestampPolicy=CLAMP`, counted) or stops the job
//!   (`FAIL`): [`window::TimestampBounds`].
//! - A restart that changes the topic, window, format or output is refused with exit
//!   status 2 ([`crate::control::identity`]).
//!
//! # The commit protocol, and every crash point
//! For each window, in window order:
//! 1. Stage each shard file under `_temporary/<job>/<window>/<attempt>/<final name>`.
//!    Crash point `gcs::before_prepare`: nothing is decided; recovery removes the
//!    staging objects and the records are read again (they are after the resume
//!    positions of the last decided window).
//! 2. Append `prepared` (files, `close_pos`, resume positions) to the log, fsynced:
//!    the window is decided. Crash point `gcs::after_prepare`: recovery publishes it
//!    from the staged files (roll forward), then resumes after it.
//! 3. Publish: delete other files of the same window an earlier run left (the seed's
//!    trash step), then rename every staged file to its final name, copy + delete on
//!    a bucket. Crash points `gcs::mid_publish_before` (after the trash, before any
//!    rename) and `gcs::mid_publish` (half the files renamed): recovery publishes
//!    again; a rename whose source is gone and whose target exists is done.
//! 4. Append `committed`. Crash point `gcs::before_committed`: recovery publishes
//!    again, which finds every file in place.
//!
//! Recovery itself has crash point `gcs::recovery_publish`. A file's content is fixed
//! when it is staged, so a final name only ever holds that content: each record is in
//! exactly one final file, once.

pub mod checkpoints;
pub mod committer;
pub mod config;
pub mod encode;
pub mod job;
pub mod log;
pub mod open_windows;
#[cfg(feature = "parquet")]
pub mod parquet;
/// Without the `parquet` cargo feature (on by default; `scripts/demo.sh` leaves it out):
/// `outputFileFormat=PARQUET` is refused at launch ([`config`]), so nothing is written.
#[cfg(not(feature = "parquet"))]
pub mod parquet {
    use apache_avro::schema::Schema;
    use apache_avro::types::Value;

    /// Why Parquet is refused, and how to build a flexrun that writes it.
    pub const NOT_BUILT: &str = "this flexrun was built without Parquet (scripts/demo.sh leaves it out); build it with `cargo build --release`, whose default features include `parquet`";

    /// Refuses: this build has no Parquet writer.
    pub fn available() -> Result<(), String> {
        Err(NOT_BUILT.into())
    }

    /// Refuses every schema: this build has no Parquet writer.
    pub fn columns(_: &Schema) -> Result<(), String> {
        Err(NOT_BUILT.into())
    }

    /// Refuses: this build has no Parquet writer (never reached: launch refuses first).
    pub fn write(_: &Schema, _: &[Value]) -> Result<Vec<u8>, String> {
        Err(NOT_BUILT.into())
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn parquet_is_refused_with_how_to_build_it_in() {
            let e = super::available().unwrap_err();
            assert!(e.contains("built without Parquet") && e.contains("`cargo build --release`"), "{e}");
        }
    }
}
pub mod pool;
pub mod publish;
pub mod reader;
pub mod scale;
pub mod window;
