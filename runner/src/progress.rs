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
//! Every entry is one JSON line, fsynced before the call returns. Because entries
//! are self-contained, the logs are purged by rewriting them with only their last
//! entry (write to a temporary file, fsync, rename, fsync the directory), so they
//! stay bounded however long the job runs.
//!
//! [`ShardLog::recover`] reads both logs and says where the shard stands: either
//! everything logged is committed, or exactly one batch (the last) was logged and
//! not committed and must be replayed with the same ranges and row offsets.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// Entries kept before a log is purged down to its last entry.
pub const PURGE_AFTER_ENTRIES: u64 = 256;

/// Where a batch's rows go in one write stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSlot {
    /// The write stream's full name.
    pub stream: String,
    /// The row offset in that stream at which the batch's rows start.
    pub offset: i64,
    /// How many rows the batch appends there.
    pub rows: i64,
}

impl StreamSlot {
    /// The offset the next batch starts at.
    pub fn end(&self) -> i64 {
        self.offset + self.rows
    }
}

/// One offset-log entry: what a batch will process and where its rows go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

/// One commit-log entry: the batch is done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommitEntry {
    /// The batch id that is complete.
    pub batch: u64,
    /// Next Kafka offset of every partition after this batch.
    pub positions: BTreeMap<i32, i64>,
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
    #[error("checkpoint {path} line {line}: {source}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The cause.
        source: serde_json::Error,
    },
    /// The commit log is ahead of the offset log, which the protocol never produces.
    #[error("checkpoint {0}: commit log names batch {1} but the offset log ends at batch {2}")]
    Inconsistent(PathBuf, u64, u64),
}

/// The offset log and commit log of one shard.
#[derive(Debug)]
pub struct ShardLog {
    dir: PathBuf,
    offsets: File,
    commits: File,
    offset_entries: u64,
    commit_entries: u64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ProgressError + '_ {
    move |source| ProgressError::Io { path: path.to_path_buf(), source }
}

fn open_append(path: &Path) -> Result<File, ProgressError> {
    OpenOptions::new().create(true).append(true).open(path).map_err(io(path))
}

/// Read JSON lines; a torn final line (a crash mid-write, before fsync returned) is ignored.
fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, ProgressError> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(path)(e)),
    };
    let lines: Vec<String> = BufReader::new(f).lines().collect::<Result<_, _>>().map_err(io(path))?;
    let mut out = Vec::with_capacity(lines.len());
    for (i, l) in lines.iter().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(l) {
            Ok(v) => out.push(v),
            Err(_) if i + 1 == lines.len() => break,
            Err(source) => return Err(ProgressError::Corrupt { path: path.to_path_buf(), line: i + 1, source }),
        }
    }
    Ok(out)
}

impl ShardLog {
    /// Open (creating if needed) the logs in `dir`.
    pub fn open(dir: &Path) -> Result<ShardLog, ProgressError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        let op = dir.join("offsets.log");
        let cp = dir.join("commits.log");
        let offset_entries = read_lines::<OffsetEntry>(&op)?.len() as u64;
        let commit_entries = read_lines::<CommitEntry>(&cp)?.len() as u64;
        Ok(ShardLog { dir: dir.to_path_buf(), offsets: open_append(&op)?, commits: open_append(&cp)?, offset_entries, commit_entries })
    }

    /// Where the shard stands, from both logs.
    pub fn recover(&self) -> Result<Recovery, ProgressError> {
        let offsets: Vec<OffsetEntry> = read_lines(&self.dir.join("offsets.log"))?;
        let commits: Vec<CommitEntry> = read_lines(&self.dir.join("commits.log"))?;
        match (offsets.last(), commits.last()) {
            (None, None) => Ok(Recovery::Fresh),
            (None, Some(c)) => Ok(Recovery::Clean { last: None, commit: c.clone() }),
            (Some(o), None) => Ok(Recovery::Replay(o.clone())),
            (Some(o), Some(c)) if c.batch == o.batch => Ok(Recovery::Clean { last: Some(o.clone()), commit: c.clone() }),
            (Some(o), Some(c)) if c.batch < o.batch => Ok(Recovery::Replay(o.clone())),
            (Some(o), Some(c)) => Err(ProgressError::Inconsistent(self.dir.clone(), c.batch, o.batch)),
        }
    }

    /// Append an offset-log entry and fsync it (the write-ahead step).
    pub fn log_offsets(&mut self, e: &OffsetEntry) -> Result<(), ProgressError> {
        Self::append(&self.dir.join("offsets.log"), &mut self.offsets, e)?;
        self.offset_entries += 1;
        if self.offset_entries > PURGE_AFTER_ENTRIES {
            self.offsets = Self::purge(&self.dir.join("offsets.log"), e)?;
            self.offset_entries = 1;
        }
        Ok(())
    }

    /// Append a commit-log entry and fsync it.
    pub fn log_commit(&mut self, e: &CommitEntry) -> Result<(), ProgressError> {
        Self::append(&self.dir.join("commits.log"), &mut self.commits, e)?;
        self.commit_entries += 1;
        if self.commit_entries > PURGE_AFTER_ENTRIES {
            self.commits = Self::purge(&self.dir.join("commits.log"), e)?;
            self.commit_entries = 1;
        }
        Ok(())
    }

    fn append<T: Serialize>(path: &Path, f: &mut File, e: &T) -> Result<(), ProgressError> {
        let mut line = serde_json::to_vec(e).expect("log entries serialize");
        line.push(b'\n');
        f.write_all(&line).map_err(io(path))?;
        f.sync_data().map_err(io(path))
    }

    /// Replace the log with just `last`, atomically, and reopen it for appending.
    fn purge<T: Serialize>(path: &Path, last: &T) -> Result<File, ProgressError> {
        let tmp = path.with_extension("log.tmp");
        {
            let mut f = File::create(&tmp).map_err(io(&tmp))?;
            let mut line = serde_json::to_vec(last).expect("log entries serialize");
            line.push(b'\n');
            f.write_all(&line).map_err(io(&tmp))?;
            f.sync_all().map_err(io(&tmp))?;
        }
        fs::rename(&tmp, path).map_err(io(path))?;
        if let Some(parent) = path.parent() {
            File::open(parent).and_then(|d| d.sync_all()).map_err(io(parent))?;
        }
        open_append(path)
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
            main: Some(StreamSlot { stream: "s".into(), offset: batch as i64 * 9, rows: 9 }),
            dlq: None,
        }
    }

    fn commit(batch: u64) -> CommitEntry {
        CommitEntry { batch, positions: entry(batch).positions }
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
    fn a_torn_last_line_is_ignored_but_corruption_elsewhere_is_reported() {
        let d = tempfile::tempdir().unwrap();
        let mut log = ShardLog::open(d.path()).unwrap();
        log.log_offsets(&entry(1)).unwrap();
        drop(log);
        let p = d.path().join("offsets.log");
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"batch\":2,\"ran").unwrap();
        let log = ShardLog::open(d.path()).unwrap();
        assert_eq!(log.recover().unwrap(), Recovery::Replay(entry(1)));
        fs::write(&p, "garbage\n{\"also\":1}\n").unwrap();
        let e = ShardLog::open(d.path()).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn purge_keeps_logs_bounded_and_recovery_intact() {
        let d = tempfile::tempdir().unwrap();
        let mut log = ShardLog::open(d.path()).unwrap();
        for b in 1..=(PURGE_AFTER_ENTRIES * 3 + 7) {
            log.log_offsets(&entry(b)).unwrap();
            log.log_commit(&commit(b)).unwrap();
        }
        let lines = fs::read_to_string(d.path().join("offsets.log")).unwrap().lines().count() as u64;
        assert!(lines <= PURGE_AFTER_ENTRIES, "{lines} lines");
        let last = PURGE_AFTER_ENTRIES * 3 + 7;
        assert!(matches!(log.recover().unwrap(), Recovery::Clean { last: Some(o), commit } if o.batch == last && commit.batch == last));
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
