//! The durable progress record of one shard: an offset log and a commit log.
//!
//! Spark Structured Streaming's scheme, kept per shard in the job's checkpoint
//! directory (`<checkpoint>/<job>/shard-NNN/`):
//!
//! - `offsets.log`: written **before** a batch is appended (write-ahead). Each entry
//!   is self-contained: the batch id, the Kafka range `[from, to)` of every partition
//!   the batch read, the next position of every partition the shard has seen, and for
//!   the table and dead-letter streams the stream name, the row offset the batch
//!   starts at and its row count.
//! - `commits.log`: written **after** the batch's appends were acknowledged (or
//!   answered ALREADY_EXISTS): the batch id and the positions after it.
//!
//! Every entry is one line, `<crc32c as 8 hex digits> <JSON>`, fsynced before the call
//! returns. The checksum tells a torn or damaged line from a good one: on open, a torn
//! tail of the newest segment (a crash mid-write, before fsync returned) is cut off,
//! so the next entry starts on a clean line; a bad line anywhere else is reported.
//! Lines written before checksums existed (plain JSON) are still read. Each log is a
//! sequence of segment files (`offsets.log.00000000000000000001`, ...; the suffix is
//! the first batch id in the segment). After [`PURGE_AFTER_ENTRIES`] entries the next
//! append starts a new segment; once that segment holds an entry, the older segments
//! are deleted. Entries are self-contained, so the newest one alone is enough to
//! recover, and the logs stay bounded however long the job runs. The deletion (the
//! *log purge*) runs inline, or with [`Purge::Async`] on a background thread, off the
//! batch's critical path, as Spark's asynchronous log purge does.
//!
//! [`ShardLog::recover`] reads both logs and says where the shard stands: either
//! everything logged is committed, or exactly one batch (the last) was logged and
//! not committed and must be replayed with the same ranges and row offsets.

pub mod async_progress;
pub mod journal;
pub mod line;

pub use async_progress::AsyncProgress;

use line::{encode_line, read_lines, read_segment};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Entries kept before a log is purged down to its last entry.
pub const PURGE_AFTER_ENTRIES: u64 = 256;

/// Where a batch's rows go in one write stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSlot {
    /// The write stream's full name.
    pub stream: String,
    /// The row offset in that stream at which the batch's rows start.
    pub offset: i64,
    /// How many rows the batch appends there.
    pub rows: i64,
    /// The table the stream belongs to (`project.dataset.table`); empty in entries
    /// written before it was recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub table: String,
    /// A CRC32C over the batch's rows in order, taken as [`StreamSlot::digest_kind`]
    /// says: a replay re-sends these rows only if it maps to the same digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<u32>,
    /// How `digest` was taken (absent in entries written before issue 29: row bytes).
    #[serde(default, skip_serializing_if = "DigestKind::is_row_bytes")]
    pub digest_kind: DigestKind,
    /// Row count of each AppendRows request, when the batch goes out as several: a
    /// replay sends the same requests, so each one that landed answers ALREADY_EXISTS
    /// for exactly its own rows. Empty: one request (or an entry from before splits
    /// were logged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<u32>,
}

/// How a [`StreamSlot`]'s digest is taken. Entries keep the kind they were logged with,
/// so a batch logged by an older binary is replayed, verified and re-logged with its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DigestKind {
    /// Over every row's length (u64, little-endian) and bytes: a second pass over the
    /// rows (entries written before issue 29).
    #[default]
    RowBytes,
    /// Over every row's length (u64, little-endian) and CRC32C (u32, little-endian),
    /// each row's CRC taken as the row is written, while it is in cache (issue 29,
    /// step 5).
    RowCrcs,
}

impl DigestKind {
    fn is_row_bytes(&self) -> bool {
        *self == DigestKind::RowBytes
    }
}

impl StreamSlot {
    /// The offset the next batch starts at.
    pub fn end(&self) -> i64 {
        self.offset + self.rows
    }
}

/// One offset-log entry: what a batch will process and where its rows go.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OffsetEntry {
    /// Batch id, increasing by one per batch.
    pub batch: u64,
    /// Kafka ranges read: partition → `[from, to)`.
    pub ranges: BTreeMap<i32, (i64, i64)>,
    /// Next Kafka offset of every partition the shard has seen, after this batch.
    pub positions: BTreeMap<i32, i64>,
    /// The table stream slot (absent in at-least-once mode).
    pub main: Option<StreamSlot>,
    /// The dead-letter stream slot, when a dead-letter table is configured.
    pub dlq: Option<StreamSlot>,
    /// Fingerprint of the table schema the rows were mapped with (its copy is kept
    /// in the job directory), so a replay maps with the same schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Messages whose rows BigQuery refused (partition, offset, reason): a replay
    /// moves the same messages to the dead-letter rows before it appends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<(i32, i64, String)>,
    /// Per-record tables other than the first (schemaFormat=SCHEMA_REGISTRY): one slot per
    /// table the shard writes to, in table order, every batch (0 rows when it has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub side: Vec<StreamSlot>,
    /// When the batch was first processed (ms since the epoch): dead-letter rows carry
    /// it as their `timestamp`, so a replay writes the same rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processed_ms: Option<i64>,
    /// The log the ranges and positions were read from: its topic id and the leader
    /// epochs ([`LogMark`]). Absent in entries written before positions were bound.
    #[serde(default, skip_serializing_if = "LogMark::is_empty")]
    pub log: LogMark,
    /// Per-record tables (`schemaFormat=SCHEMA_REGISTRY`): how each record type other
    /// than the first was routed, so a replay routes it the same way even if a table was
    /// created or changed since.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub routes: BTreeMap<String, LoggedRoute>,
}

/// How a batch routed one record type: to a table, mapped with a schema (its copy is
/// kept in the job directory), or to the dead letters, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoggedRoute {
    /// Written to `table` with the schema whose fingerprint is `schema`.
    Table {
        /// `project.dataset.table`.
        table: String,
        /// The schema's fingerprint.
        schema: String,
    },
    /// Dead-lettered.
    Refused(String),
}

/// Which log a set of positions belongs to ([`crate::kafka::lineage`]): the topic's id
/// and, per partition, the leader epoch of the last record read before its position.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMark {
    /// The topic id (KIP-516, base64), when the broker gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_id: Option<String>,
    /// Partition → the leader epoch of the record just before its position (KIP-320);
    /// partitions not read yet have none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub epochs: BTreeMap<i32, i32>,
}

impl LogMark {
    /// Nothing known (an entry from before positions were bound).
    pub fn is_empty(&self) -> bool {
        self.topic_id.is_none() && self.epochs.is_empty()
    }
}

/// One commit-log entry: the batch is done.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CommitEntry {
    /// The batch id that is complete.
    pub batch: u64,
    /// Next Kafka offset of every partition after this batch.
    pub positions: BTreeMap<i32, i64>,
    /// The log the positions belong to (absent in entries written before it was kept).
    #[serde(default, skip_serializing_if = "LogMark::is_empty")]
    pub log: LogMark,
}

/// Where a shard stands after a restart.
#[derive(Debug, Clone, PartialEq)]
pub enum Recovery {
    /// Nothing was ever logged.
    Fresh,
    /// Every logged batch is committed.
    Clean {
        /// The last offset entry (streams and row offsets to continue from), if any.
        last: Option<OffsetEntry>,
        /// The last commit.
        commit: CommitEntry,
    },
    /// The last logged batch has no commit: replay it exactly.
    Replay(OffsetEntry),
}

/// A log that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ProgressError {
    /// File system trouble.
    #[error("checkpoint {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line that is not an entry (other than a torn last line).
    #[error("checkpoint {path} line {line}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The commit log is ahead of the offset log, which the protocol never produces.
    #[error("checkpoint {0}: commit log names batch {1} but the offset log ends at batch {2}")]
    Inconsistent(PathBuf, u64, u64),
}

/// How old log segments are deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Purge {
    /// On the appending thread, right after the new segment's first entry.
    Sync,
    /// On a background thread (Spark's asynchronous log purge).
    #[default]
    Async,
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ProgressError + '_ {
    move |source| ProgressError::Io { path: path.to_path_buf(), source }
}

/// When a log's appends are fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Every entry, before the append returns.
    EveryEntry,
    /// Only a new segment's first entry (so a purge never empties the log); the other
    /// entries reach the disk when the OS writes them back. For a commit log whose lost
    /// entries cost only a replay that the sink answers as already done (issue 29, step 7).
    Rotation,
}

/// One log (offsets or commits) as a sequence of segment files.
#[derive(Debug)]
struct SegmentedLog {
    dir: PathBuf,
    name: &'static str,
    durability: Durability,
    /// Current segment: its path, file and entry count.
    current: Option<(PathBuf, File, u64)>,
    /// Segments older than the current one, still on disk.
    old: Vec<PathBuf>,
}

impl SegmentedLog {
    fn segments(dir: &Path, name: &str) -> Result<Vec<PathBuf>, ProgressError> {
        let mut v: Vec<(u64, PathBuf)> = Vec::new();
        for e in fs::read_dir(dir).map_err(io(dir))? {
            let e = e.map_err(io(dir))?;
            let f = e.file_name().to_string_lossy().into_owned();
            if let Some(seq) =
                f.strip_prefix(name).and_then(|r| r.strip_prefix('.')).and_then(|r| r.parse::<u64>().ok())
            {
                v.push((seq, e.path()));
            }
        }
        v.sort();
        Ok(v.into_iter().map(|(_, p)| p).collect())
    }

    fn open(dir: &Path, name: &'static str) -> Result<SegmentedLog, ProgressError> {
        let mut segs = Self::segments(dir, name)?;
        let current = match segs.pop() {
            Some(p) => {
                let (entries, good) = read_segment::<serde_json::Value>(&p, true)?;
                let f = OpenOptions::new().append(true).open(&p).map_err(io(&p))?;
                // Cut a torn tail off, so the next entry does not glue onto it.
                if f.metadata().map_err(io(&p))?.len() > good {
                    tracing::warn!(path = %p.display(), keep_bytes = good, "cutting a torn entry off the end of the log (a crash during its write)");
                    f.set_len(good).map_err(io(&p))?;
                    f.sync_all().map_err(io(&p))?;
                }
                Some((p, f, entries.len() as u64))
            }
            None => None,
        };
        Ok(SegmentedLog { dir: dir.to_path_buf(), name, durability: Durability::EveryEntry, current, old: segs })
    }

    fn read_all<T: for<'de> Deserialize<'de>>(&self) -> Result<Vec<T>, ProgressError> {
        Self::read_dir_log(&self.dir, self.name)
    }

    /// Every entry of the log `name` in `dir`, read without opening it for writing
    /// (a torn last entry is skipped, not cut off).
    fn read_dir_log<T: for<'de> Deserialize<'de>>(dir: &Path, name: &str) -> Result<Vec<T>, ProgressError> {
        let segs = Self::segments(dir, name)?;
        let mut out = Vec::new();
        for (i, p) in segs.iter().enumerate() {
            out.extend(read_lines(p, i + 1 == segs.len())?);
        }
        Ok(out)
    }

    /// Append one entry (fsynced as [`Durability`] says). Returns the segments that
    /// became purgeable.
    fn append<T: Serialize>(&mut self, batch: u64, e: &T) -> Result<Vec<PathBuf>, ProgressError> {
        let rotate = self.current.as_ref().is_none_or(|(_, _, n)| *n >= PURGE_AFTER_ENTRIES);
        if rotate {
            let p = self.dir.join(format!("{}.{:020}", self.name, batch));
            let f = OpenOptions::new().create(true).append(true).open(&p).map_err(io(&p))?;
            if let Some((old, _, _)) = self.current.take() {
                self.old.push(old);
            }
            self.current = Some((p, f, 0));
        }
        let (path, f, n) = self.current.as_mut().expect("a segment is open");
        let line = encode_line(e);
        f.write_all(&line).map_err(io(path))?;
        if rotate || self.durability == Durability::EveryEntry {
            f.sync_data().map_err(io(path))?;
        }
        *n += 1;
        if rotate {
            // The new segment is durable (and named in the directory) before old ones go.
            File::open(&self.dir).and_then(|d| d.sync_all()).map_err(io(&self.dir))?;
            return Ok(std::mem::take(&mut self.old));
        }
        Ok(Vec::new())
    }
}

/// Delete purged segments, then make the deletion durable.
fn delete_segments(dir: &Path, paths: &[PathBuf]) {
    for p in paths {
        if let Err(e) = fs::remove_file(p) {
            tracing::warn!(path = %p.display(), error = %e, "could not purge an old log segment");
        }
    }
    let _ = File::open(dir).and_then(|d| d.sync_all());
}

/// The offset log and commit log of one shard.
#[derive(Debug)]
pub struct ShardLog {
    dir: PathBuf,
    offsets: SegmentedLog,
    commits: SegmentedLog,
    purge: Purge,
    purger: Option<std::sync::mpsc::Sender<Vec<PathBuf>>>,
}

impl ShardLog {
    /// Open (creating if needed) the logs in `dir`, purging old segments inline.
    pub fn open(dir: &Path) -> Result<ShardLog, ProgressError> {
        Self::open_with(dir, Purge::Sync)
    }

    /// Open the logs with the given purge mode.
    pub fn open_with(dir: &Path, purge: Purge) -> Result<ShardLog, ProgressError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        let purger = (purge == Purge::Async).then(|| {
            let (tx, rx) = std::sync::mpsc::channel::<Vec<PathBuf>>();
            let d = dir.to_path_buf();
            std::thread::Builder::new()
                .name("log-purge".into())
                .spawn(move || {
                    for batch in rx {
                        delete_segments(&d, &batch);
                    }
                })
                .expect("spawn the log purge thread");
            tx
        });
        Ok(ShardLog {
            dir: dir.to_path_buf(),
            offsets: SegmentedLog::open(dir, "offsets.log")?,
            commits: SegmentedLog::open(dir, "commits.log")?,
            purge,
            purger,
        })
    }

    /// Fsync the commit log only when it starts a segment ([`Durability::Rotation`]).
    ///
    /// For a sink that answers a replayed batch as already written (kafka-to-bq's
    /// COMMITTED streams with offsets, ALREADY_EXISTS): a commit entry lost with the page
    /// cache leaves its batch the last logged and uncommitted, so the next start replays
    /// it; and when a later batch's offset entry was fsynced after it, that later batch is
    /// the one replayed, from its own logged positions and stream offsets (see
    /// [`Recovery`]). `runner/tests/it/crash_points.rs` tests both.
    pub fn with_commits_synced_on_rotation(mut self) -> ShardLog {
        self.commits.durability = Durability::Rotation;
        self
    }

    /// Where the shard stands, from both logs.
    pub fn recover(&self) -> Result<Recovery, ProgressError> {
        Self::judge(&self.dir, self.offsets.read_all()?, self.commits.read_all()?)
    }

    /// Where the shard in `dir` stands, read only: unlike [`ShardLog::open`] it never
    /// cuts a torn tail, so it is safe beside a writer that is mid-append.
    pub fn peek(dir: &Path) -> Result<Recovery, ProgressError> {
        let offsets = SegmentedLog::read_dir_log(dir, "offsets.log")?;
        let commits = SegmentedLog::read_dir_log(dir, "commits.log")?;
        Self::judge(dir, offsets, commits)
    }

    fn judge(dir: &Path, offsets: Vec<OffsetEntry>, commits: Vec<CommitEntry>) -> Result<Recovery, ProgressError> {
        Self::judge_latest(dir, offsets.last(), commits.last())
    }

    /// Every entry of both logs in `dir`, read only.
    pub fn read_both(dir: &Path) -> Result<(Vec<OffsetEntry>, Vec<CommitEntry>), ProgressError> {
        Ok((SegmentedLog::read_dir_log(dir, "offsets.log")?, SegmentedLog::read_dir_log(dir, "commits.log")?))
    }

    /// Where a shard stands from its newest offset entry and newest commit.
    pub fn judge_latest(
        dir: &Path,
        offsets: Option<&OffsetEntry>,
        commits: Option<&CommitEntry>,
    ) -> Result<Recovery, ProgressError> {
        match (offsets, commits) {
            (None, None) => Ok(Recovery::Fresh),
            (None, Some(c)) => Ok(Recovery::Clean { last: None, commit: c.clone() }),
            (Some(o), None) => Ok(Recovery::Replay(o.clone())),
            (Some(o), Some(c)) if c.batch == o.batch => {
                Ok(Recovery::Clean { last: Some(o.clone()), commit: c.clone() })
            }
            (Some(o), Some(c)) if c.batch < o.batch => Ok(Recovery::Replay(o.clone())),
            (Some(o), Some(c)) if o.main.is_none() && o.dlq.is_none() => {
                // Offset entries without stream slots (the stats sink) may trail commits.
                Ok(Recovery::Clean { last: None, commit: c.clone() })
            }
            (Some(o), Some(c)) => Err(ProgressError::Inconsistent(dir.to_path_buf(), c.batch, o.batch)),
        }
    }

    fn purge(&self, old: Vec<PathBuf>) {
        if old.is_empty() {
            return;
        }
        match (&self.purge, &self.purger) {
            (Purge::Async, Some(tx)) => {
                if let Err(e) = tx.send(old) {
                    delete_segments(&self.dir, &e.0);
                }
            }
            _ => delete_segments(&self.dir, &old),
        }
    }

    /// Append an offset-log entry and fsync it (the write-ahead step).
    pub fn log_offsets(&mut self, e: &OffsetEntry) -> Result<(), ProgressError> {
        let old = self.offsets.append(e.batch, e)?;
        self.purge(old);
        Ok(())
    }

    /// Append a commit-log entry and fsync it.
    pub fn log_commit(&mut self, e: &CommitEntry) -> Result<(), ProgressError> {
        let old = self.commits.append(e.batch, e)?;
        self.purge(old);
        Ok(())
    }

    /// Make every commit-log entry durable now, whatever [`Durability`] the log has (a
    /// commit that settles something no replay could redo).
    pub fn sync_commits(&self) -> Result<(), ProgressError> {
        match &self.commits.current {
            Some((path, f, _)) => f.sync_data().map_err(io(path)),
            None => Ok(()),
        }
    }
}

/// How progress is recorded (Spark's asynchronous progress tracking and log purge).
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressConfig {
    /// Persist progress in the background every `interval` (at-least-once only).
    pub async_progress: bool,
    /// How often asynchronous progress is persisted.
    pub interval: std::time::Duration,
    /// How old log segments are deleted.
    pub purge: Purge,
}

impl Default for ProgressConfig {
    fn default() -> Self {
        ProgressConfig { async_progress: false, interval: std::time::Duration::from_secs(1), purge: Purge::Async }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(batch: u64) -> OffsetEntry {
        OffsetEntry {
            batch,
            ranges: BTreeMap::from([(0, (batch as i64 * 10, batch as i64 * 10 + 10))]),
            positions: BTreeMap::from([(0, batch as i64 * 10 + 10), (1, 5)]),
            main: Some(StreamSlot {
                stream: "s".into(),
                offset: batch as i64 * 9,
                rows: 9,
                table: "p.d.t".into(),
                digest: Some(batch as u32),
                digest_kind: DigestKind::RowCrcs,
                requests: vec![4, 5],
            }),
            ..Default::default()
        }
    }

    fn commit(batch: u64) -> CommitEntry {
        CommitEntry { batch, positions: entry(batch).positions, ..Default::default() }
    }

    #[test]
    fn recovery_distinguishes_every_crash_point() {
        let d = tempfile::tempdir().unwrap();
        let mut log = ShardLog::open(d.path()).unwrap();
        assert_eq!(log.recover().unwrap(), Recovery::Fresh);
        log.log_offsets(&entry(1)).unwrap();
        assert_eq!(log.recover().unwrap(), Recovery::Replay(entry(1)));
        log.log_commit(&commit(1)).unwrap();
        assert!(matches!(log.recover().unwrap(), Recovery::Clean { commit, .. } if commit.batch == 1));
        log.log_offsets(&entry(2)).unwrap();
        drop(log);
        // A restart sees the same thing.
        let log = ShardLog::open(d.path()).unwrap();
        assert_eq!(log.recover().unwrap(), Recovery::Replay(entry(2)));
    }

    #[test]
    fn commits_synced_on_rotation_read_back_as_every_entry_does_across_segments() {
        let d = tempfile::tempdir().unwrap();
        let mut log = ShardLog::open(d.path()).unwrap().with_commits_synced_on_rotation();
        let n = PURGE_AFTER_ENTRIES + 3;
        for b in 1..=n {
            log.log_offsets(&entry(b)).unwrap();
            log.log_commit(&commit(b)).unwrap();
        }
        drop(log);
        let log = ShardLog::open(d.path()).unwrap();
        assert!(matches!(log.recover().unwrap(), Recovery::Clean { commit, .. } if commit.batch == n));
    }

    #[test]
    fn a_torn_last_line_is_cut_off_and_the_next_entry_starts_clean() {
        let d = tempfile::tempdir().unwrap();
        let mut log = ShardLog::open(d.path()).unwrap();
        log.log_offsets(&entry(1)).unwrap();
        drop(log);
        let p = SegmentedLog::segments(d.path(), "offsets.log").unwrap().pop().unwrap();
        let good_len = fs::metadata(&p).unwrap().len();
        // A crash in the middle of writing batch 2's entry.
        let torn = encode_line(&entry(2));
        OpenOptions::new().append(true).open(&p).unwrap().write_all(&torn[..torn.len() / 2]).unwrap();
        let torn_len = fs::metadata(&p).unwrap().len();
        // A reader beside a live writer sees the same recovery but leaves the bytes alone.
        assert_eq!(ShardLog::peek(d.path()).unwrap(), Recovery::Replay(entry(1)));
        assert_eq!(fs::metadata(&p).unwrap().len(), torn_len, "peek never cuts");
        let mut log = ShardLog::open(d.path()).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().len(), good_len, "the torn tail is cut on open");
        assert_eq!(log.recover().unwrap(), Recovery::Replay(entry(1)));
        log.log_commit(&commit(1)).unwrap();
        log.log_offsets(&entry(2)).unwrap();
        drop(log);
        let log = ShardLog::open(d.path()).unwrap();
        assert_eq!(log.recover().unwrap(), Recovery::Replay(entry(2)), "the entry after the cut reads back");
    }

    #[test]
    fn a_damaged_line_fails_its_checksum_and_corruption_before_the_end_is_reported() {
        let d = tempfile::tempdir().unwrap();
        let mut log = ShardLog::open(d.path()).unwrap();
        log.log_offsets(&entry(1)).unwrap();
        log.log_offsets(&entry(2)).unwrap();
        drop(log);
        let p = SegmentedLog::segments(d.path(), "offsets.log").unwrap().pop().unwrap();
        let text = fs::read_to_string(&p).unwrap();
        // Flip one digit inside the first entry's JSON: still JSON, but the checksum fails.
        let damaged = text.replacen("\"batch\":1", "\"batch\":7", 1);
        fs::write(&p, damaged).unwrap();
        let e = ShardLog::open(d.path()).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("checksum"), "{e}");
        fs::write(&p, "garbage\n{\"also\":1}\n").unwrap();
        let e = ShardLog::open(d.path()).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn a_slot_says_how_its_digest_was_taken_and_older_slots_read_as_row_bytes() {
        let old = r#"{"stream":"s","offset":0,"rows":2,"digest":7}"#;
        let slot: StreamSlot = serde_json::from_str(old).unwrap();
        assert_eq!((slot.digest, slot.digest_kind), (Some(7), DigestKind::RowBytes));
        assert_eq!(serde_json::to_string(&slot).unwrap(), old, "an older slot is written back as it was");
        let new = StreamSlot { digest_kind: DigestKind::RowCrcs, ..slot };
        let line = serde_json::to_string(&new).unwrap();
        assert!(line.contains(r#""digest_kind":"row_crcs""#), "{line}");
        assert_eq!(serde_json::from_str::<StreamSlot>(&line).unwrap(), new);
        // A kind this binary does not know (a newer binary's log) is refused, and says
        // which kinds it knows, rather than verified the wrong way.
        let e = serde_json::from_str::<StreamSlot>(&line.replace("row_crcs", "xxh3")).unwrap_err().to_string();
        assert!(e.contains("unknown variant `xxh3`") && e.contains("row_bytes") && e.contains("row_crcs"), "{e}");
    }

    #[test]
    fn entries_from_before_checksums_still_read() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path()).unwrap();
        let legacy = r#"{"batch":3,"ranges":{"0":[0,5]},"positions":{"0":5},"main":{"stream":"s","offset":0,"rows":5},"dlq":null}"#;
        fs::write(d.path().join(format!("offsets.log.{:020}", 1)), format!("{legacy}\n")).unwrap();
        let log = ShardLog::open(d.path()).unwrap();
        let Recovery::Replay(e) = log.recover().unwrap() else { panic!("expected a replay") };
        assert_eq!((e.batch, e.main.unwrap().rows), (3, 5));
    }

    proptest::proptest! {
        /// Whatever bytes a segment holds, reading it never panics: it yields entries or
        /// an error that names the line.
        #[test]
        fn arbitrary_segment_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600), last in proptest::prelude::any::<bool>()) {
            let d = tempfile::tempdir().unwrap();
            let p = d.path().join("offsets.log.00000000000000000001");
            fs::write(&p, &bytes).unwrap();
            match read_segment::<OffsetEntry>(&p, last) {
                Ok((_, good)) => proptest::prop_assert!(good as usize <= bytes.len()),
                Err(e) => proptest::prop_assert!(e.to_string().contains("line")),
            }
        }

        /// A good log with any prefix of a further entry appended recovers the good entries.
        #[test]
        fn any_torn_prefix_recovers_the_entries_before_it(n in 1u64..5, cut in 0usize..400) {
            let d = tempfile::tempdir().unwrap();
            let mut log = ShardLog::open(d.path()).unwrap();
            for b in 1..=n { log.log_offsets(&entry(b)).unwrap(); }
            drop(log);
            let p = SegmentedLog::segments(d.path(), "offsets.log").unwrap().pop().unwrap();
            let torn = encode_line(&entry(n + 1));
            let cut = cut.min(torn.len() - 1);
            OpenOptions::new().append(true).open(&p).unwrap().write_all(&torn[..cut]).unwrap();
            let log = ShardLog::open(d.path()).unwrap();
            proptest::prop_assert_eq!(log.recover().unwrap(), Recovery::Replay(entry(n)));
        }
    }

    fn log_bytes(dir: &Path) -> u64 {
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum()
    }

    #[test]
    fn purge_keeps_logs_bounded_and_recovery_intact() {
        for purge in [Purge::Sync, Purge::Async] {
            let d = tempfile::tempdir().unwrap();
            let mut log = ShardLog::open_with(d.path(), purge).unwrap();
            let mut max_files = 0;
            let mut max_bytes = 0;
            for b in 1..=(PURGE_AFTER_ENTRIES * 20 + 7) {
                log.log_offsets(&entry(b)).unwrap();
                log.log_commit(&commit(b)).unwrap();
                if b % 100 == 0 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    max_files = max_files.max(fs::read_dir(d.path()).unwrap().count());
                    max_bytes = max_bytes.max(log_bytes(d.path()));
                }
            }
            // Two logs, each at most its current segment plus one awaiting purge:
            // 4 files of at most 256 entries of about 200 bytes, against 5,127 batches written.
            assert!(max_files <= 4, "{purge:?}: {max_files} files");
            assert!(max_bytes <= 4 * PURGE_AFTER_ENTRIES * 300, "{purge:?}: {max_bytes} bytes");
            let last = PURGE_AFTER_ENTRIES * 20 + 7;
            assert!(
                matches!(log.recover().unwrap(), Recovery::Clean { last: Some(o), commit } if o.batch == last && commit.batch == last)
            );
            drop(log);
            let reopened = ShardLog::open_with(d.path(), purge).unwrap();
            assert!(matches!(reopened.recover().unwrap(), Recovery::Clean { commit, .. } if commit.batch == last));
        }
    }

    #[test]
    fn a_commit_ahead_of_the_offsets_is_inconsistent() {
        let d = tempfile::tempdir().unwrap();
        let mut log = ShardLog::open(d.path()).unwrap();
        log.log_offsets(&entry(1)).unwrap();
        log.log_commit(&commit(2)).unwrap();
        assert!(matches!(log.recover(), Err(ProgressError::Inconsistent(..))));
    }
}
