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
//! Every entry is one JSON line, fsynced before the call returns. Each log is a
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

/// How old log segments are deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Purge {
    /// On the appending thread, right after the new segment's first entry.
    Sync,
    /// On a background thread (Spark's asynchronous log purge).
    #[default]
    Async,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ProgressError + '_ {
    move |source| ProgressError::Io { path: path.to_path_buf(), source }
}

/// Read JSON lines; a torn final line (a crash mid-write, before fsync returned) is
/// ignored when `last_segment`.
fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path, last_segment: bool) -> Result<Vec<T>, ProgressError> {
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
            Err(_) if last_segment && i + 1 == lines.len() => break,
            Err(source) => return Err(ProgressError::Corrupt { path: path.to_path_buf(), line: i + 1, source }),
        }
    }
    Ok(out)
}

/// One log (offsets or commits) as a sequence of segment files.
#[derive(Debug)]
struct SegmentedLog {
    dir: PathBuf,
    name: &'static str,
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
            if let Some(seq) = f.strip_prefix(name).and_then(|r| r.strip_prefix('.')).and_then(|r| r.parse::<u64>().ok()) {
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
                let n = read_lines::<serde_json::Value>(&p, true)?.len() as u64;
                let f = OpenOptions::new().append(true).open(&p).map_err(io(&p))?;
                Some((p, f, n))
            }
            None => None,
        };
        Ok(SegmentedLog { dir: dir.to_path_buf(), name, current, old: segs })
    }

    fn read_all<T: for<'de> Deserialize<'de>>(&self) -> Result<Vec<T>, ProgressError> {
        let segs = Self::segments(&self.dir, self.name)?;
        let mut out = Vec::new();
        for (i, p) in segs.iter().enumerate() {
            out.extend(read_lines(p, i + 1 == segs.len())?);
        }
        Ok(out)
    }

    /// Append one entry (fsync). Returns the segments that became purgeable.
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
        let mut line = serde_json::to_vec(e).expect("log entries serialize");
        line.push(b'\n');
        f.write_all(&line).map_err(io(path))?;
        f.sync_data().map_err(io(path))?;
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
        Ok(ShardLog { dir: dir.to_path_buf(), offsets: SegmentedLog::open(dir, "offsets.log")?, commits: SegmentedLog::open(dir, "commits.log")?, purge, purger })
    }

    /// Where the shard stands, from both logs.
    pub fn recover(&self) -> Result<Recovery, ProgressError> {
        let offsets: Vec<OffsetEntry> = self.offsets.read_all()?;
        let commits: Vec<CommitEntry> = self.commits.read_all()?;
        match (offsets.last(), commits.last()) {
            (None, None) => Ok(Recovery::Fresh),
            (None, Some(c)) => Ok(Recovery::Clean { last: None, commit: c.clone() }),
            (Some(o), None) => Ok(Recovery::Replay(o.clone())),
            (Some(o), Some(c)) if c.batch == o.batch => Ok(Recovery::Clean { last: Some(o.clone()), commit: c.clone() }),
            (Some(o), Some(c)) if c.batch < o.batch => Ok(Recovery::Replay(o.clone())),
            (Some(o), Some(c)) if o.main.is_none() && o.dlq.is_none() => {
                // Offset entries without stream slots (the stats sink) may trail commits.
                Ok(Recovery::Clean { last: None, commit: c.clone() })
            }
            (Some(o), Some(c)) => Err(ProgressError::Inconsistent(self.dir.clone(), c.batch, o.batch)),
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
        let p = SegmentedLog::segments(d.path(), "offsets.log").unwrap().pop().unwrap();
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"batch\":2,\"ran").unwrap();
        let log = ShardLog::open(d.path()).unwrap();
        assert_eq!(log.recover().unwrap(), Recovery::Replay(entry(1)));
        fs::write(&p, "garbage\n{\"also\":1}\n").unwrap();
        let e = ShardLog::open(d.path()).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
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
            assert!(matches!(log.recover().unwrap(), Recovery::Clean { last: Some(o), commit } if o.batch == last && commit.batch == last));
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

/// Asynchronous progress tracking (at-least-once only): the shard hands over its
/// latest positions and a background thread persists them every interval, off the
/// batch's critical path. After a crash the shard replays what it processed since the
/// last persisted entry: at most one interval of data, duplicated, never lost.
pub struct AsyncProgress {
    shared: std::sync::Arc<(std::sync::Mutex<(Option<CommitEntry>, bool)>, std::sync::Condvar)>,
    handle: Option<std::thread::JoinHandle<Result<(), ProgressError>>>,
}

impl AsyncProgress {
    /// Start persisting into `log` every `interval`.
    pub fn start(mut log: ShardLog, interval: std::time::Duration) -> AsyncProgress {
        let shared = std::sync::Arc::new((std::sync::Mutex::new((None::<CommitEntry>, false)), std::sync::Condvar::new()));
        let s = shared.clone();
        let handle = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || {
                let (lock, cv) = &*s;
                let mut written: Option<u64> = None;
                loop {
                    let (entry, stop) = {
                        let g = lock.lock().expect("progress lock");
                        let (g, _) = cv.wait_timeout_while(g, interval, |(_, stop)| !*stop).expect("progress lock");
                        (g.0.clone(), g.1)
                    };
                    if let Some(e) = entry {
                        if written != Some(e.batch) {
                            log.log_commit(&e)?;
                            written = Some(e.batch);
                        }
                    }
                    if stop {
                        return Ok(());
                    }
                }
            })
            .expect("spawn the progress thread");
        AsyncProgress { shared, handle: Some(handle) }
    }

    /// The shard's latest completed batch (persisted at the next tick).
    pub fn update(&self, e: CommitEntry) {
        self.shared.0.lock().expect("progress lock").0 = Some(e);
    }

    /// Persist the latest entry now and stop (a drain).
    pub fn finish(mut self) -> Result<(), ProgressError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), ProgressError> {
        self.shared.0.lock().expect("progress lock").1 = true;
        self.shared.1.notify_all();
        match self.handle.take() {
            Some(h) => h.join().expect("progress thread"),
            None => Ok(()),
        }
    }
}

impl Drop for AsyncProgress {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

#[cfg(test)]
mod async_tests {
    use super::*;

    #[test]
    fn async_progress_persists_the_latest_entry_each_interval_and_on_finish() {
        let d = tempfile::tempdir().unwrap();
        let p = AsyncProgress::start(ShardLog::open(d.path()).unwrap(), std::time::Duration::from_millis(100));
        for b in 1..=50u64 {
            p.update(CommitEntry { batch: b, positions: BTreeMap::from([(0, b as i64 * 10)]) });
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mid = ShardLog::open(d.path()).unwrap().recover().unwrap();
        assert!(matches!(mid, Recovery::Clean { ref commit, .. } if commit.batch == 50), "{mid:?}");
        p.update(CommitEntry { batch: 51, positions: BTreeMap::from([(0, 510)]) });
        p.finish().unwrap();
        let end = ShardLog::open(d.path()).unwrap().recover().unwrap();
        assert!(matches!(end, Recovery::Clean { ref commit, .. } if commit.batch == 51), "{end:?}");
        // Entries are written once per interval, not once per batch.
        let lines: usize = SegmentedLog::segments(d.path(), "commits.log").unwrap().iter().map(|s| fs::read_to_string(s).unwrap().lines().count()).sum();
        assert!(lines <= 4, "{lines} commit entries for 51 batches");
    }
}
