//! The kafka-to-bq pipeline: shards that read, map and write, with exactly-once
//! delivery that survives SIGKILL anywhere.
//!
//! # Layout, by stage
//! The folders are the pipeline's stages, lowest first; a module names only its own
//! stage or a lower one (`scripts/check_layers.py` reads the numbers below).
//!
//! 1. [`map`]: a record → a row or a dead-letter row (JSON ladder, Avro, metadata
//!    columns, CDC, dead-letter rows). Pure.
//! 2. [`setup`]: the job's settings, topics, destination table and start positions.
//! 3. [`context`]: what every shard of a job shares ([`context::JobCtx`]) and each
//!    table's mapping ([`context::Mapping`]).
//! 4. [`run`]: shards (recovery, then the steady loop), batches, writers, schema
//!    evolution, the worker pool, autoscaling and the dashboard's points.
//! 5. [`job`]: one topic's job from set-up to summary; [`fan_out`]: a job of several
//!    topics, one pipeline per topic, all on the job's one pool ([`job_pool`]: its
//!    autoscaler and page); [`replay`]: `flexrun dlq replay`, dead letters
//!    back through the mapping into the table exactly once.

//! # Per-record tables
//! With `schemaFormat=SCHEMA_REGISTRY` records of different types go to different tables
//! ([`table`]). The first is the shard's main table; each other table a shard meets gets
//! its own COMMITTED stream, and every offset-log entry carries a slot (stream, offset,
//! rows, digest) for each of them in table order (`OffsetEntry::side`), so steps 2–4 below
//! and their recovery apply to every table alike.
//!
//! # Shards
//! The topic's partitions are split into shards (`numStorageWriteApiStreams`, or one
//! per partition up to 8): partition `p` belongs to shard `p % shards`. A shard owns
//! one Kafka consumer (manual assignment), one COMMITTED write stream on the table and
//! one on the dead-letter table, and one offset log and commit log
//! ([`crate::progress`]). The shard count is fixed when the job is first run and kept
//! in `job.json`, so a restart maps partitions to the same logs.
//!
//! # Exactly-once protocol (default)
//! For each batch `k` of a shard:
//! 1. Cut the batch: per partition the range `[a_p, b_p)` it read. Map every message
//!    to a row or a dead-letter row (a pure function of the bytes and the schema;
//!    messages are sorted by partition and offset first).
//! 2. **Offset log** (fsync): batch id, ranges, positions after the batch, and for the
//!    table and dead-letter streams the stream name, the starting row offset `X` (`Y`)
//!    and the row count `n` (`m`).
//! 3. Append the `n` rows at offset `X`, then the `m` dead-letter rows at `Y`.
//!    ALREADY_EXISTS means "already written" and counts as success. If BigQuery
//!    rejects rows (row errors: nothing was written), they move to the dead-letter
//!    rows, the batch is logged again with the new split (same id, same `X`/`Y`) and
//!    appended again.
//! 4. **Commit log**: batch id and positions. Exactly-once does not fsync it (only a new
//!    segment's first entry): an entry lost with the page cache leaves its batch, or a
//!    later logged one, to be replayed, which BigQuery answers ALREADY_EXISTS
//!    ([`crate::progress::ShardLog::with_commits_synced_on_rotation`]; tested in
//!    `crash_points.rs`). With `enableCommitOffsets`, the positions are also committed to
//!    the consumer group (informational).
//!
//! | crash point | state after restart | recovery |
//! |---|---|---|
//! | before 2 | batch unknown | starts from the last commit's positions |
//! | between 2 and 3 | logged, not appended | re-reads exactly the logged ranges, appends at `X`: OK |
//! | during or after 3, before 4 | appended (maybe partly: table but not DLQ) | appends at `X`/`Y`: ALREADY_EXISTS for what landed, OK for the rest |
//! | after 4 | done | continues from the commit's positions |
//!
//! Each row of the table has a named crash point (the `failpoints` feature, see
//! [`crate::crash_point`]) and a test that aborts there and restarts
//! (`runner/tests/it/crash_points.rs`): `eo::before_offset_log` (before 2),
//! `eo::after_offset_log` (between 2 and 3), `eo::between_requests` and
//! `eo::after_main_append` (during 3), `eo::before_commit_log` (after 3, before 4),
//! `eo::after_commit_log` (after 4), and on the recovery path
//! `eo::replay_before_append` and `eo::after_relog_before_append`.
//!
//! A logged batch is never re-cut: recovery reads exactly its ranges, maps them with
//! the schema the entry names (a copy of every schema is kept under `schemas/`),
//! moves the messages the entry says BigQuery refused to the dead-letter rows, and
//! checks row counts and CRC32C digests against the entry before it appends; if they
//! differ, the job stops and says what differs instead of writing at a wrong offset.
//!
//! A restart reuses the logged streams without asking BigQuery about them first
//! (`WriteStream.commit_time` is set on every COMMITTED stream from its creation, so
//! it says nothing about whether the stream still takes rows). If an append says
//! the stream is gone (NOT_FOUND, or a StorageError STREAM_NOT_FOUND,
//! STREAM_FINALIZED or INVALID_STREAM_STATE), offsets cannot deduplicate against it
//! any more: the shard opens a new stream, and if the batch had been sent before it
//! counts the batch as possibly duplicated (summary and `/metrics`).
//!
//! A batch goes out as one or more requests under the 10 MB request limit; rows too
//! large for any request go to the dead-letter table. Transient errors are retried
//! without an overall limit ([`crate::bigquery::target`]). One process per job: [`crate::control::lock`].
//!
//! # At-least-once (`useStorageWriteApiAtLeastOnce=true` or the experiment)
//! Rows go to the tables' `_default` streams without offsets, then the commit log
//! records the positions. A crash between the append and the commit replays that
//! batch: duplicates, never loss.
//!
//! # Drain
//! SIGINT/SIGTERM (or `--idle-timeout`) stops reading; each shard finishes the batch
//! it holds through step 4 and the job exits 0. A restart with the same job name
//! resumes from the logs.

pub mod context;
pub mod fan_out;
pub mod job;
pub mod job_pool;
pub mod map;
pub mod replay;
pub mod run;
pub mod setup;
