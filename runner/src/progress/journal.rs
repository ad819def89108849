//! One write-ahead progress log for every shard of a pipeline, with group commit.
//!
//! A shard used to keep two logs of its own (offsets and commits, two open files) and a
//! log-purge thread, and paid an fsync for every batch. With 400 shards that was 400
//! threads, 800 open files, and 400 times the fsyncs at a given rate (issue 63). Now a
//! pipeline (`<job>/` or `<job>.<topic>/`) has one journal, `progress/`, and one writer
//! thread:
//!
//! - every line names its shard: `{"shard": 3, "offsets": {..}}`, `{"shard": 3,
//!   "commit": {..}}`, or (at-least-once) `{"shard": 3, "sent": {..}}`, in the checksummed
//!   line format of [`super::line`];
//! - shards hand their lines to the writer ([`ShardJournal`]) and wait for what they
//!   need: an offset entry until it is fsynced (the write-ahead step), a commit until it
//!   is written (fsynced too under [`Durability::EveryEntry`]). The writer takes every line
//!   waiting, writes them with one `write` and, if any asks for it, one `fsync`: the
//!   entries of many shards' batches are made durable together (group commit);
//! - recovery reads the journal once ([`Journal::open`]) and gives each shard its own
//!   [`Recovery`], as its own logs did;
//! - the journal is a sequence of segments (`progress.log.NNNNNNNNNN`). Past
//!   [`SEGMENT_BYTES`] the writer starts a new segment with each shard's latest lines
//!   (a snapshot: every entry is self-contained), fsyncs it and its directory, and only
//!   then deletes the older segments. Purging is the writer's own work: no thread of its
//!   own, and the journal stays bounded however long the job runs.
//!
//! A pipeline whose shards kept logs of their own (an older flexrun) is moved into a
//! journal when it is first opened: each shard's latest entries are written to a new
//! segment under a temporary name, fsynced and renamed in place, and only then are the
//! old shard directories removed.

use super::line::{encode_line, read_segment};
use super::{io, CommitEntry, Durability, OffsetEntry, ProgressError, Recovery, ShardLog};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

/// A segment is replaced by a new one (with each shard's latest lines) past this size.
pub const SEGMENT_BYTES: u64 = 32 * 1024 * 1024;

/// The journal's directory in a pipeline's checkpoint directory.
pub const DIR: &str = "progress";

const SEGMENT_PREFIX: &str = "progress.log.";

/// One journal line: its shard and one of the three (fields rather than a tagged enum:
/// serde's buffering of tagged and flattened values cannot read integer map keys).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JournalLine {
    /// The shard it belongs to.
    pub shard: u32,
    /// An offset-log entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offsets: Option<Box<OffsetEntry>>,
    /// A commit entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<CommitEntry>,
    /// An at-least-once sent marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<BTreeMap<i32, i64>>,
}

impl JournalLine {
    fn new(shard: u32, body: Body) -> JournalLine {
        let mut l = JournalLine { shard, ..Default::default() };
        match body {
            Body::Offsets(e) => l.offsets = Some(e),
            Body::Commit(c) => l.commit = Some(c),
            Body::Sent(s) => l.sent = Some(s),
        }
        l
    }

    fn body(self) -> Option<Body> {
        match (self.offsets, self.commit, self.sent) {
            (Some(e), None, None) => Some(Body::Offsets(e)),
            (None, Some(c), None) => Some(Body::Commit(c)),
            (None, None, Some(s)) => Some(Body::Sent(s)),
            _ => None,
        }
    }
}

/// What a journal line records.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// An offset-log entry (written ahead of the batch's appends).
    Offsets(Box<OffsetEntry>),
    /// A commit-log entry (the batch is done).
    Commit(CommitEntry),
    /// At-least-once: the positions after the batch about to be appended, so a restart
    /// can say how many messages it may write twice (`kafka_to_bq::run::sent`).
    Sent(BTreeMap<i32, i64>),
}

/// Each shard's latest lines, which are all recovery needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Latest {
    /// The newest offset entry.
    pub offsets: Option<OffsetEntry>,
    /// The newest commit entry.
    pub commit: Option<CommitEntry>,
    /// The newest sent marker.
    pub sent: Option<BTreeMap<i32, i64>>,
}

impl Latest {
    fn take(&mut self, body: Body) {
        match body {
            Body::Offsets(e) => self.offsets = Some(*e),
            Body::Commit(c) => self.commit = Some(c),
            Body::Sent(s) => self.sent = Some(s),
        }
    }

    /// Where the shard stands (see [`Recovery`]).
    pub fn recovery(&self, dir: &Path) -> Result<Recovery, ProgressError> {
        ShardLog::judge_latest(dir, self.offsets.as_ref(), self.commit.as_ref())
    }

    fn lines(&self, shard: u32) -> Vec<JournalLine> {
        let body = [
            self.offsets.clone().map(|e| Body::Offsets(Box::new(e))),
            self.commit.clone().map(Body::Commit),
            self.sent.clone().map(Body::Sent),
        ];
        body.into_iter().flatten().map(|body| JournalLine::new(shard, body)).collect()
    }
}

/// The journal's segments, oldest first.
fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, ProgressError> {
    let mut v = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else { return Ok(v) };
    for e in entries {
        let e = e.map_err(io(dir))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(n) = name.strip_prefix(SEGMENT_PREFIX).and_then(|n| n.parse::<u64>().ok()) {
            v.push((n, e.path()));
        }
    }
    v.sort();
    Ok(v)
}

fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{SEGMENT_PREFIX}{n:010}"))
}

/// Every shard's latest lines in the journal under `pipeline` (its `progress/`), read
/// only: a torn last line is skipped, not cut, so this is safe beside a running writer.
/// Shards that kept logs of their own (an older flexrun) are read from those.
pub fn peek(pipeline: &Path) -> Result<BTreeMap<u32, Latest>, ProgressError> {
    let dir = pipeline.join(DIR);
    let segs = segments(&dir)?;
    if segs.is_empty() {
        return legacy(pipeline);
    }
    let mut out: BTreeMap<u32, Latest> = BTreeMap::new();
    for (i, (_, p)) in segs.iter().enumerate() {
        let (lines, _) = read_segment::<JournalLine>(p, i + 1 == segs.len())?;
        for l in lines {
            let shard = l.shard;
            if let Some(body) = l.body() {
                out.entry(shard).or_default().take(body);
            }
        }
    }
    Ok(out)
}

/// The latest entries of shards that kept logs of their own (`shard-NNN/`).
fn legacy(pipeline: &Path) -> Result<BTreeMap<u32, Latest>, ProgressError> {
    let mut out = BTreeMap::new();
    let Ok(entries) = fs::read_dir(pipeline) else { return Ok(out) };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(shard) = name.strip_prefix("shard-").and_then(|n| n.parse::<u32>().ok()) else { continue };
        let (offsets, commits) = ShardLog::read_both(&e.path())?;
        let sent = legacy_sent(&e.path());
        out.insert(shard, Latest { offsets: offsets.last().cloned(), commit: commits.last().cloned(), sent });
    }
    Ok(out)
}

/// An older at-least-once shard's marker (`sent.json`), if it left one.
fn legacy_sent(shard_dir: &Path) -> Option<BTreeMap<i32, i64>> {
    serde_json::from_slice(&fs::read(shard_dir.join("sent.json")).ok()?).ok()
}

/// A request to the writer.
struct Request {
    lines: Vec<u8>,
    shard: u32,
    body: Body,
    sync: bool,
    done: tokio::sync::oneshot::Sender<Result<(), String>>,
}

/// How shards' commit lines reach the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitMode {
    /// Each one is written before the shard goes on, and fsynced as the durability says.
    Each(Durability),
    /// Asynchronous progress tracking (at-least-once only), as Spark's: a shard hands
    /// over its latest commit and goes on; the writer persists the latest of every shard
    /// each interval, off the batch's path. A crash replays at most about one interval.
    Every(std::time::Duration),
}

/// Each shard's latest commit not yet written ([`CommitMode::Every`]).
type Pending = Arc<Mutex<BTreeMap<u32, CommitEntry>>>;

/// The journal of one pipeline: its writer thread and every shard's latest lines.
pub struct Journal {
    dir: PathBuf,
    tx: Mutex<Option<mpsc::Sender<Request>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Each shard's latest lines as written (a shard moved to another worker recovers
    /// from here, where its last owner left it).
    latest: Arc<Mutex<BTreeMap<u32, Latest>>>,
    pending: Pending,
    mode: CommitMode,
}

/// A shard's handle on its pipeline's journal (cheap to clone).
#[derive(Clone)]
pub struct ShardJournal {
    journal: Arc<Journal>,
    shard: u32,
}

impl Journal {
    /// Open (creating, or moving an older pipeline's shard logs into it) the journal of
    /// the pipeline in `pipeline`, cut a torn tail off its newest segment, and start its
    /// writer. `mode` says how commit lines are written.
    pub fn open(pipeline: &Path, mode: CommitMode) -> Result<Arc<Journal>, ProgressError> {
        let dir = pipeline.join(DIR);
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        if segments(&dir)?.is_empty() {
            migrate(pipeline, &dir)?;
        }
        let recovered = peek(pipeline)?;
        let segs = segments(&dir)?;
        let (n, path) = segs.last().cloned().unwrap_or((1, segment_path(&dir, 1)));
        let file = OpenOptions::new().create(true).append(true).open(&path).map_err(io(&path))?;
        let (_, good) = read_segment::<JournalLine>(&path, true)?;
        if file.metadata().map_err(io(&path))?.len() > good {
            tracing::warn!(path = %path.display(), keep_bytes = good, "cutting a torn line off the end of the progress journal (a crash during its write)");
            file.set_len(good).map_err(io(&path))?;
            file.sync_all().map_err(io(&path))?;
        }
        File::open(&dir).and_then(|d| d.sync_all()).map_err(io(&dir))?;
        let old: Vec<PathBuf> = segs.iter().filter(|(m, _)| *m != n).map(|(_, p)| p.clone()).collect();
        let (latest, pending) = (Arc::new(Mutex::new(recovered)), Pending::default());
        let w = Writer { dir: dir.clone(), file, path, n, bytes: good, latest: latest.clone(), old };
        let (tx, rx) = mpsc::channel::<Request>();
        let every = match mode {
            CommitMode::Every(d) => Some((d, pending.clone())),
            CommitMode::Each(_) => None,
        };
        let writer = std::thread::Builder::new()
            .name("progress-journal".into())
            .spawn(move || w.run(rx, every))
            .map_err(io(&dir))?;
        let (tx, writer) = (Mutex::new(Some(tx)), Mutex::new(Some(writer)));
        Ok(Arc::new(Journal { dir, tx, writer, latest, pending, mode }))
    }

    /// A shard's handle.
    pub fn shard(self: &Arc<Self>, shard: usize) -> ShardJournal {
        ShardJournal { journal: self.clone(), shard: shard as u32 }
    }

    /// Where shard `shard` stands: what its last owner left (in this run or before).
    pub fn recovery(&self, shard: usize) -> Result<Recovery, ProgressError> {
        let mut l = self.latest.lock().expect("journal state").get(&(shard as u32)).cloned().unwrap_or_default();
        if let Some(c) = self.pending.lock().expect("journal pending").get(&(shard as u32)) {
            l.commit = Some(c.clone());
        }
        l.recovery(&self.dir)
    }

    /// The at-least-once marker shard `shard` left.
    pub fn sent(&self, shard: usize) -> Option<BTreeMap<i32, i64>> {
        self.latest.lock().expect("journal state").get(&(shard as u32)).and_then(|l| l.sent.clone())
    }

    async fn submit(&self, shard: u32, body: Body, sync: bool) -> Result<(), ProgressError> {
        let line = encode_line(&JournalLine::new(shard, body.clone()));
        let (done, wait) = tokio::sync::oneshot::channel();
        let req = Request { lines: line, shard, body, sync, done };
        let sent = self.tx.lock().expect("journal sender").as_ref().map(|tx| tx.send(req).is_ok());
        let failed = |why: String| ProgressError::Io { path: self.dir.clone(), source: std::io::Error::other(why) };
        if sent != Some(true) {
            return Err(failed("the progress journal's writer has stopped".into()));
        }
        wait.await.map_err(|_| failed("the progress journal's writer stopped".into()))?.map_err(failed)
    }

    /// Stop the writer after the lines already handed over (their waiters are answered).
    pub fn close(&self) {
        self.tx.lock().expect("journal sender").take();
        if let Some(h) = self.writer.lock().expect("journal writer").take() {
            let _ = h.join();
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.close();
    }
}

impl ShardJournal {
    /// Append an offset-log entry and wait until it is fsynced (the write-ahead step).
    pub async fn log_offsets(&self, e: &OffsetEntry) -> Result<(), ProgressError> {
        self.journal.submit(self.shard, Body::Offsets(Box::new(e.clone())), true).await
    }

    /// Append a commit entry and wait until it is written (and fsynced, unless commits
    /// are fsynced only with other lines: [`Durability::Rotation`]).
    /// Under [`CommitMode::Every`] it is only handed over, to be written at the next tick.
    pub async fn log_commit(&self, e: &CommitEntry) -> Result<(), ProgressError> {
        let sync = match self.journal.mode {
            CommitMode::Every(_) => {
                self.journal.pending.lock().expect("journal pending").insert(self.shard, e.clone());
                return Ok(());
            }
            CommitMode::Each(d) => d == Durability::EveryEntry,
        };
        self.journal.submit(self.shard, Body::Commit(e.clone()), sync).await
    }

    /// Append a commit entry and wait until it is fsynced, whatever the journal's
    /// durability (a commit that settles something no replay could redo).
    pub async fn log_commit_synced(&self, e: &CommitEntry) -> Result<(), ProgressError> {
        self.journal.submit(self.shard, Body::Commit(e.clone()), true).await
    }

    /// Record the at-least-once marker (written, not fsynced).
    pub async fn log_sent(&self, positions: &BTreeMap<i32, i64>) -> Result<(), ProgressError> {
        self.journal.submit(self.shard, Body::Sent(positions.clone()), false).await
    }

    /// Where this shard stands.
    pub fn recovery(&self) -> Result<Recovery, ProgressError> {
        self.journal.recovery(self.shard as usize)
    }

    /// The at-least-once marker it left.
    pub fn sent(&self) -> Option<BTreeMap<i32, i64>> {
        self.journal.sent(self.shard as usize)
    }
}

/// The writer thread's state.
struct Writer {
    dir: PathBuf,
    file: File,
    path: PathBuf,
    n: u64,
    bytes: u64,
    latest: Arc<Mutex<BTreeMap<u32, Latest>>>,
    /// Segments older than the current one still on disk.
    old: Vec<PathBuf>,
}

impl Writer {
    /// Take every request waiting, write them at once, fsync once if any asks, answer.
    /// With `every`, also write the shards' pending commits each interval, and at the end.
    fn run(mut self, rx: mpsc::Receiver<Request>, every: Option<(std::time::Duration, Pending)>) {
        // Closing: whatever was written without an fsync (commit lines) is made durable.
        let _sync_at_close = SyncOnDrop(self.file.try_clone().ok());
        let tick = every.as_ref().map_or(std::time::Duration::from_secs(3600), |(d, _)| *d);
        let mut next = std::time::Instant::now() + tick;
        loop {
            let first = match rx.recv_timeout(next.saturating_duration_since(std::time::Instant::now())) {
                Ok(r) => Some(r),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            let mut batch: Vec<Request> = first.into_iter().chain(rx.try_iter()).collect();
            if std::time::Instant::now() >= next {
                next = std::time::Instant::now() + tick;
                self.flush_pending(every.as_ref().map(|(_, p)| p));
            }
            let result = self.write(&mut batch).map_err(|e| e.to_string());
            if let Err(e) = &result {
                tracing::error!(path = %self.path.display(), error = %e, "the progress journal could not be written");
            }
            for r in batch {
                let _ = r.done.send(result.clone());
            }
        }
        self.flush_pending(every.as_ref().map(|(_, p)| p));
    }

    /// Write (and fsync) every shard's pending commit ([`CommitMode::Every`]).
    fn flush_pending(&mut self, pending: Option<&Pending>) {
        let Some(p) = pending else { return };
        let taken = std::mem::take(&mut *p.lock().expect("journal pending"));
        if taken.is_empty() {
            return;
        }
        let lines: Vec<(u32, Body)> = taken.into_iter().map(|(s, c)| (s, Body::Commit(c))).collect();
        let buf = lines.iter().flat_map(|(s, b)| encode_line(&JournalLine::new(*s, b.clone()))).collect();
        if let Err(e) = self.write_lines(lines, buf, true) {
            tracing::error!(path = %self.path.display(), error = %e, "the progress journal could not be written");
        }
    }

    fn write(&mut self, batch: &mut [Request]) -> Result<(), ProgressError> {
        if batch.is_empty() {
            return Ok(());
        }
        let sync = batch.iter().any(|r| r.sync);
        let buf = batch.iter().flat_map(|r| r.lines.iter().copied()).collect();
        let lines = batch.iter_mut().map(|r| (r.shard, std::mem::replace(&mut r.body, Body::Sent(BTreeMap::new()))));
        self.write_lines(lines.collect(), buf, sync)
    }

    /// Write `buf` (the encoded `lines`), note each shard's latest, fsync if `sync`.
    fn write_lines(&mut self, lines: Vec<(u32, Body)>, buf: Vec<u8>, sync: bool) -> Result<(), ProgressError> {
        self.file.write_all(&buf).map_err(io(&self.path))?;
        // Recorded once written: a shard's next owner recovers from what its last one wrote.
        let mut latest = self.latest.lock().expect("journal state");
        for (shard, body) in lines {
            latest.entry(shard).or_default().take(body);
        }
        drop(latest);
        self.bytes += buf.len() as u64;
        if sync {
            self.file.sync_data().map_err(io(&self.path))?;
        }
        if self.bytes > SEGMENT_BYTES {
            self.rotate()?;
        }
        Ok(())
    }

    /// Start a new segment with every shard's latest lines, make it durable, then delete
    /// the older segments.
    fn rotate(&mut self) -> Result<(), ProgressError> {
        let n = self.n + 1;
        let path = segment_path(&self.dir, n);
        let snapshot = snapshot_bytes(&self.latest.lock().expect("journal state"));
        let mut file = OpenOptions::new().create(true).append(true).open(&path).map_err(io(&path))?;
        file.write_all(&snapshot).map_err(io(&path))?;
        file.sync_data().map_err(io(&path))?;
        File::open(&self.dir).and_then(|d| d.sync_all()).map_err(io(&self.dir))?;
        self.old.push(std::mem::replace(&mut self.path, path));
        (self.file, self.n, self.bytes) = (file, n, snapshot.len() as u64);
        for p in self.old.drain(..) {
            if let Err(e) = fs::remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %e, "could not delete an old progress journal segment");
            }
        }
        let _ = File::open(&self.dir).and_then(|d| d.sync_all());
        Ok(())
    }
}

/// Fsyncs its file when dropped (the writer's last act).
struct SyncOnDrop(Option<File>);

impl Drop for SyncOnDrop {
    fn drop(&mut self) {
        if let Some(f) = &self.0 {
            let _ = f.sync_data();
        }
    }
}

fn snapshot_bytes(latest: &BTreeMap<u32, Latest>) -> Vec<u8> {
    latest.iter().flat_map(|(s, l)| l.lines(*s)).flat_map(|l| encode_line(&l)).collect()
}

/// Move an older pipeline's shard logs into a new journal: their latest lines into a
/// first segment, written under a temporary name, fsynced and renamed in place; then the
/// shard directories go.
fn migrate(pipeline: &Path, dir: &Path) -> Result<(), ProgressError> {
    let old = legacy(pipeline)?;
    if old.is_empty() {
        return Ok(());
    }
    let tmp = dir.join("migrating.tmp");
    fs::write(&tmp, snapshot_bytes(&old)).map_err(io(&tmp))?;
    File::open(&tmp).and_then(|f| f.sync_all()).map_err(io(&tmp))?;
    let first = segment_path(dir, 1);
    fs::rename(&tmp, &first).map_err(io(&first))?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))?;
    for shard in old.keys() {
        let d = pipeline.join(format!("shard-{shard:03}"));
        if let Err(e) = fs::remove_dir_all(&d) {
            tracing::warn!(path = %d.display(), error = %e, "could not remove a shard log moved into the progress journal");
        }
    }
    tracing::info!(pipeline = %pipeline.display(), shards = old.len(), "moved the shards' own progress logs into one journal");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(batch: u64, p: i32) -> OffsetEntry {
        OffsetEntry {
            batch,
            ranges: BTreeMap::from([(p, (batch as i64 * 10, batch as i64 * 10 + 10))]),
            positions: BTreeMap::from([(p, batch as i64 * 10 + 10)]),
            ..Default::default()
        }
    }

    fn commit(batch: u64, p: i32) -> CommitEntry {
        CommitEntry { batch, positions: entry(batch, p).positions, ..Default::default() }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
    }

    #[test]
    fn each_shard_recovers_exactly_its_own_entries() {
        let d = tempfile::tempdir().unwrap();
        rt().block_on(async {
            let j = Journal::open(d.path(), CommitMode::Each(Durability::Rotation)).unwrap();
            let (a, b) = (j.shard(0), j.shard(7));
            a.log_offsets(&entry(1, 0)).await.unwrap();
            a.log_commit(&commit(1, 0)).await.unwrap();
            b.log_offsets(&entry(1, 7)).await.unwrap();
            b.log_commit(&commit(1, 7)).await.unwrap();
            b.log_offsets(&entry(2, 7)).await.unwrap();
            j.close();
        });
        let j = Journal::open(d.path(), CommitMode::Each(Durability::Rotation)).unwrap();
        assert!(matches!(j.recovery(0).unwrap(), Recovery::Clean { commit, .. } if commit.batch == 1));
        assert_eq!(j.recovery(7).unwrap(), Recovery::Replay(entry(2, 7)));
        assert_eq!(j.recovery(3).unwrap(), Recovery::Fresh);
    }

    /// Asynchronous commits: only each shard's latest is written per tick, a moved shard
    /// recovers from the one not yet written, and closing writes what is pending.
    #[test]
    fn async_commits_write_the_latest_per_interval_and_at_close() {
        let d = tempfile::tempdir().unwrap();
        let hour = std::time::Duration::from_secs(3600);
        rt().block_on(async {
            let j = Journal::open(d.path(), CommitMode::Every(hour)).unwrap();
            let a = j.shard(0);
            for b in 1..=5 {
                a.log_commit(&commit(b, 0)).await.unwrap();
            }
            assert!(matches!(j.recovery(0).unwrap(), Recovery::Clean { commit, .. } if commit.batch == 5));
            assert_eq!(
                peek(d.path()).unwrap().get(&0).and_then(|l| l.commit.clone()),
                None,
                "not written before a tick"
            );
            j.close();
        });
        let commits = fs::read_to_string(segment_path(&d.path().join(DIR), 1)).unwrap().matches("\"commit\"").count();
        assert_eq!(commits, 1, "one line for five batches");
        let j = Journal::open(d.path(), CommitMode::Each(Durability::Rotation)).unwrap();
        assert!(matches!(j.recovery(0).unwrap(), Recovery::Clean { commit, .. } if commit.batch == 5));
    }

    /// Many shards logging at once share fsyncs: each waits for its own line to be
    /// durable, and every line is there after a reopen.
    #[test]
    fn concurrent_shards_are_group_committed_and_all_recover() {
        let d = tempfile::tempdir().unwrap();
        rt().block_on(async {
            let j = Journal::open(d.path(), CommitMode::Each(Durability::Rotation)).unwrap();
            let mut tasks = Vec::new();
            for s in 0..64 {
                let sj = j.shard(s);
                tasks.push(tokio::spawn(async move {
                    for b in 1..=20 {
                        sj.log_offsets(&entry(b, s as i32)).await.unwrap();
                        sj.log_commit(&commit(b, s as i32)).await.unwrap();
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            j.close();
        });
        let latest = peek(d.path()).unwrap();
        assert_eq!(latest.len(), 64);
        for (s, l) in latest {
            assert!(
                matches!(l.recovery(d.path()).unwrap(), Recovery::Clean { commit, .. } if commit.batch == 20),
                "shard {s}"
            );
        }
    }

    /// A torn last line (a crash mid-write) is cut on open; the line before it stands.
    #[test]
    fn a_torn_tail_is_cut_and_the_next_line_starts_clean() {
        let d = tempfile::tempdir().unwrap();
        rt().block_on(async {
            let j = Journal::open(d.path(), CommitMode::Each(Durability::Rotation)).unwrap();
            j.shard(0).log_offsets(&entry(1, 0)).await.unwrap();
            j.close();
        });
        let seg = segments(&d.path().join(DIR)).unwrap().pop().unwrap().1;
        let torn = encode_line(&JournalLine::new(0, Body::Offsets(Box::new(entry(2, 0)))));
        OpenOptions::new().append(true).open(&seg).unwrap().write_all(&torn[..torn.len() / 2]).unwrap();
        assert_eq!(peek(d.path()).unwrap()[&0].offsets, Some(entry(1, 0)), "peek skips the torn line");
        rt().block_on(async {
            let j = Journal::open(d.path(), CommitMode::Each(Durability::Rotation)).unwrap();
            assert_eq!(j.recovery(0).unwrap(), Recovery::Replay(entry(1, 0)));
            j.shard(0).log_commit(&commit(1, 0)).await.unwrap();
            j.close();
        });
        let j = Journal::open(d.path(), CommitMode::Each(Durability::Rotation)).unwrap();
        assert!(matches!(j.recovery(0).unwrap(), Recovery::Clean { commit, .. } if commit.batch == 1));
    }

    /// Past a segment's size the journal starts a new one with each shard's latest lines
    /// and deletes the old: bounded, and recovery intact.
    #[test]
    fn rotation_keeps_the_journal_bounded_and_recovery_intact() {
        let d = tempfile::tempdir().unwrap();
        let big = |b: u64, p: i32| OffsetEntry { rejected: vec![(p, 0, "x".repeat(200_000))], ..entry(b, p) };
        rt().block_on(async {
            let j = Journal::open(d.path(), CommitMode::Each(Durability::Rotation)).unwrap();
            for b in 1..=400u64 {
                let s = j.shard((b % 3) as usize);
                s.log_offsets(&big(b, (b % 3) as i32)).await.unwrap();
                s.log_commit(&commit(b, (b % 3) as i32)).await.unwrap();
            }
            j.close();
        });
        let segs = segments(&d.path().join(DIR)).unwrap();
        assert!(segs.len() <= 2, "{} segments", segs.len());
        let bytes: u64 = segs.iter().map(|(_, p)| fs::metadata(p).unwrap().len()).sum();
        assert!(bytes < 2 * SEGMENT_BYTES, "{bytes} bytes");
        let latest = peek(d.path()).unwrap();
        for (s, want) in [(0u32, 399u64), (1, 400), (2, 398)] {
            assert!(
                matches!(latest[&s].recovery(d.path()).unwrap(), Recovery::Clean { ref commit, .. } if commit.batch == want),
                "shard {s}"
            );
        }
    }

    /// An older pipeline's shard logs move into the journal once, and go.
    #[test]
    fn an_older_pipelines_shard_logs_move_into_the_journal() {
        let d = tempfile::tempdir().unwrap();
        let mut old = ShardLog::open(&d.path().join("shard-002")).unwrap();
        old.log_offsets(&entry(1, 2)).unwrap();
        old.log_commit(&commit(1, 2)).unwrap();
        old.log_offsets(&entry(2, 2)).unwrap();
        drop(old);
        fs::write(d.path().join("shard-002/sent.json"), br#"{"2": 30}"#).unwrap();
        let j = Journal::open(d.path(), CommitMode::Each(Durability::Rotation)).unwrap();
        assert_eq!(j.recovery(2).unwrap(), Recovery::Replay(entry(2, 2)));
        assert_eq!(j.sent(2), Some(BTreeMap::from([(2, 30)])));
        assert!(!d.path().join("shard-002").exists(), "moved, then removed");
    }
}
