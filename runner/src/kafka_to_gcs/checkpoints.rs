//! kafka-to-gcs's checkpoints: where its state starts from, when checkpoints are taken,
//! and what they cost.
//!
//! - **Start.** The newest good checkpoint gives the state and the positions to replay
//!   from (windows it holds that the commit log has since committed are dropped, and
//!   their re-read records skipped). Without one, the state starts empty and reading
//!   resumes where the last decided window said (the oldest record still open then).
//! - **Every `--checkpoint-interval`**, on a timer task of its own ([`spawn_ticker`]).
//!   The synchronous part holds the windows' lock, so no batch lands and no window
//!   closes or is dropped during it ([`OpenWindows::snapshot`]); any instant is a
//!   consistent cut, since a window stays in state until its files are published and
//!   positions change with the state. The upload runs as its own task while reading
//!   and committing go on. At most one checkpoint is in
//!   flight: one that falls due while another uploads waits for it. A failed upload
//!   is logged and counted and the next interval tries again: nothing is lost, since
//!   the commit log and Kafka still hold everything after the previous checkpoint.
//! - **Drain** takes a last checkpoint of the (then empty) state, so a restart starts
//!   where the drain stopped.

use super::config::KafkaToGcsConfig;
use super::log::Recovered;
use super::open_windows::{Extras, OpenWindows};
use crate::state::checkpoint::{Checkpointer, Taken};
use crate::state::{Backend, StateError, WindowState};
use crate::store::{Location, Store};
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// One completed checkpoint, as reported.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckpointRecord {
    /// Its number.
    pub id: u64,
    /// Seconds from the job's start to its synchronous part.
    pub at_s: f64,
    /// State bytes when taken.
    pub state_bytes: u64,
    /// Records in state.
    pub records: u64,
    /// (window, shard) keys in state.
    pub keys: u64,
    /// Bytes this checkpoint uploaded.
    pub uploaded_bytes: u64,
    /// Bytes of every file it references.
    pub total_bytes: u64,
    /// The synchronous part, seconds (processing paused).
    pub sync_s: f64,
    /// The upload, seconds (processing went on).
    pub upload_s: f64,
}

/// State and checkpoints over the whole run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StateReport {
    /// `--state-backend`.
    pub backend: String,
    /// `--checkpoint-kind`.
    pub kind: String,
    /// Where checkpoints go.
    pub location: String,
    /// Completed checkpoints, oldest first.
    pub checkpoints: Vec<CheckpointRecord>,
    /// Checkpoints whose upload failed.
    pub failed_checkpoints: u64,
    /// The checkpoint the job started from, if any.
    pub restored_from: Option<u64>,
    /// Newer checkpoints passed over at the start, and why.
    pub skipped_checkpoints: Vec<(u64, String)>,
    /// Seconds to fetch, check and rebuild the state at the start.
    pub recovery_s: f64,
    /// The largest state seen, bytes.
    pub peak_state_bytes: u64,
    /// The most state keys (window, shard) seen at once.
    pub peak_state_keys: u64,
    /// The largest resident set seen, bytes.
    pub peak_rss_bytes: u64,
    /// The largest heap in use seen, bytes.
    pub peak_heap_bytes: u64,
    /// CPU seconds (user + system) of the whole process.
    pub cpu_s: f64,
}

/// Where a job starts from.
pub struct RestoredStart {
    /// The state.
    pub state: Box<dyn WindowState>,
    /// Per partition, the next offset to read.
    pub positions: BTreeMap<i32, i64>,
    /// What the checkpoint kept beside the state.
    pub extras: Extras,
}

type Upload = JoinHandle<(Checkpointer, Result<Taken, StateError>)>;

/// The job's checkpoints.
pub struct Checkpoints {
    ck: Option<Checkpointer>,
    in_flight: Option<(Upload, CheckpointRecord)>,
    interval: Duration,
    next: Instant,
    started: Instant,
    dir: PathBuf,
    attempt: String,
    backend: Backend,
    last_done: Option<Instant>,
    last_sample: Instant,
    report: StateReport,
}

impl Checkpoints {
    /// Open the checkpoint location (a bad one is a usage error naming the flag).
    pub async fn open(cfg: &KafkaToGcsConfig, job_dir: &Path) -> Result<Checkpoints> {
        let loc = match &cfg.state.location {
            Some(l) => l.join(&format!("{}/", cfg.job_name)),
            None => Location::Local(job_dir.join("checkpoints")),
        };
        let store = Store::open(&loc, cfg.endpoint.as_deref())
            .await
            .map_err(|e| crate::usage(format!("--checkpoint-location {}: {e}", loc.url())))?;
        let attempt = format!("{}-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S"), std::process::id());
        let s = &cfg.state;
        let ck = Checkpointer::new(store, s.backend, s.kind, cfg.parallelism, &attempt);
        let now = Instant::now();
        Ok(Checkpoints {
            ck: Some(ck),
            in_flight: None,
            interval: s.interval,
            next: now + s.interval,
            started: now,
            dir: job_dir.join("state"),
            attempt,
            backend: s.backend,
            last_done: None,
            last_sample: now - Duration::from_secs(10),
            report: StateReport {
                backend: s.backend.to_string(),
                kind: s.kind.to_string(),
                location: loc.url(),
                ..StateReport::default()
            },
        })
    }

    /// This run's attempt id (also names its staging directory).
    pub fn attempt(&self) -> &str {
        &self.attempt
    }

    /// The state and positions to start from: the newest good checkpoint, or an empty
    /// state at `start` moved on to where the commit log's last window resumes.
    pub async fn restore(&mut self, rec: &Recovered, mut start: BTreeMap<i32, i64>) -> Result<RestoredStart> {
        let ck = self.ck.as_mut().expect("not in flight at the start");
        if let Some(r) = ck.restore(&self.dir).await.context("restoring the latest checkpoint")? {
            for (id, why) in &r.skipped {
                eprintln!("note: checkpoint {id} is corrupt or partial ({why}); restored from an earlier one");
            }
            tracing::info!(
                checkpoint = r.manifest.id,
                records = r.state.stats().records,
                took_ms = r.took.as_millis() as u64,
                "state restored from a checkpoint"
            );
            self.report.restored_from = Some(r.manifest.id);
            self.report.skipped_checkpoints = r.skipped;
            self.report.recovery_s = r.took.as_secs_f64();
            start.extend(r.manifest.positions.iter().map(|(p, o)| (*p, *o)));
            let extras = serde_json::from_value(r.manifest.extra.clone()).unwrap_or_default();
            return Ok(RestoredStart { state: r.state, positions: start, extras });
        }
        if let Some(p) = &rec.last {
            start.extend(
                p.resume.iter().filter(|(k, _)| start.contains_key(k)).map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
            );
        }
        let state = crate::state::open(self.backend, &self.dir.join("db")).context("opening the state backend")?;
        Ok(RestoredStart { state, positions: start, extras: Extras::default() })
    }

    /// Record a finished upload; start the next checkpoint when it is due.
    pub async fn maybe_take(&mut self, ow: &OpenWindows) -> Result<()> {
        self.sample(ow);
        self.collect(false).await?;
        if Instant::now() >= self.next && self.in_flight.is_none() {
            self.next = Instant::now() + self.interval;
            self.take(ow)?;
        }
        Ok(())
    }

    fn sample(&mut self, ow: &OpenWindows) {
        if self.last_sample.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.last_sample = Instant::now();
        let (rss, heap) = crate::stats::process_memory();
        let r = &mut self.report;
        let stats = ow.stats();
        r.peak_state_bytes = r.peak_state_bytes.max(stats.bytes);
        r.peak_state_keys = r.peak_state_keys.max(stats.keys);
        r.peak_rss_bytes = r.peak_rss_bytes.max(rss);
        r.peak_heap_bytes = r.peak_heap_bytes.max(heap);
    }

    /// The synchronous part, then the upload as its own task.
    fn take(&mut self, ow: &OpenWindows) -> Result<()> {
        let t = Instant::now();
        let at_s = self.started.elapsed().as_secs_f64();
        let (snap, manifest) = ow.snapshot(&self.dir.join("snapshot")).context("snapshotting window state")?;
        let sync_s = t.elapsed().as_secs_f64();
        let stats = manifest.stats;
        let rec = CheckpointRecord {
            at_s,
            state_bytes: stats.bytes,
            records: stats.records,
            keys: stats.keys,
            sync_s,
            ..Default::default()
        };
        let mut ck = self.ck.take().expect("one checkpoint in flight at most");
        let task = tokio::spawn(async move {
            let r = ck.upload(snap, manifest).await;
            (ck, r)
        });
        self.in_flight = Some((task, rec));
        Ok(())
    }

    /// Take back the checkpointer from a finished upload (or wait for it).
    async fn collect(&mut self, wait: bool) -> Result<()> {
        let Some((task, _)) = &self.in_flight else { return Ok(()) };
        if !wait && !task.is_finished() {
            return Ok(());
        }
        let (task, mut rec) = self.in_flight.take().expect("checked");
        let (ck, result) = task.await.context("the checkpoint upload panicked")?;
        self.ck = Some(ck);
        match result {
            Ok(t) => {
                rec.id = t.manifest.id;
                rec.uploaded_bytes = t.manifest.uploaded_bytes;
                rec.total_bytes = t.manifest.files.iter().map(|f| f.size).sum();
                rec.upload_s = t.upload.as_secs_f64();
                tracing::info!(
                    checkpoint = rec.id,
                    state_bytes = rec.state_bytes,
                    uploaded_bytes = rec.uploaded_bytes,
                    sync_ms = (rec.sync_s * 1e3) as u64,
                    upload_ms = (rec.upload_s * 1e3) as u64,
                    "checkpoint completed"
                );
                self.last_done = Some(Instant::now());
                self.report.checkpoints.push(rec);
            }
            Err(e) => {
                tracing::warn!(error = %e, "a checkpoint failed; the next interval tries again (nothing is lost: the commit log and Kafka hold what came after the last good one)");
                self.report.failed_checkpoints += 1;
            }
        }
        Ok(())
    }

    /// At drain: wait for an upload in flight, then checkpoint the drained state.
    pub async fn finish(&mut self, ow: &OpenWindows) -> Result<()> {
        self.collect(true).await?;
        self.take(ow)?;
        self.collect(true).await?;
        Ok(())
    }

    /// The latest completed checkpoint and its age.
    pub fn last(&self) -> Option<(&CheckpointRecord, Duration)> {
        Some((self.report.checkpoints.last()?, self.last_done?.elapsed()))
    }

    /// What the run did with state.
    pub fn report(&self) -> StateReport {
        let mut r = self.report.clone();
        let (u, s) = crate::stats::process_cpu_seconds();
        r.cpu_s = u + s;
        r
    }

    /// The report so far (for the dashboard).
    pub fn so_far(&self) -> &StateReport {
        &self.report
    }
}

/// The timer task that takes checkpoints.
pub struct Ticker {
    task: JoinHandle<Result<()>>,
    stop: tokio::sync::watch::Sender<bool>,
}

/// Check every 50 ms whether a checkpoint is due, until stopped (at drain).
pub fn spawn_ticker(ck: std::sync::Arc<tokio::sync::Mutex<Checkpoints>>, ow: std::sync::Arc<OpenWindows>) -> Ticker {
    let (stop, mut rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = rx.changed() => return Ok(()),
            }
            ck.lock().await.maybe_take(&ow).await?;
        }
    });
    Ticker { task, stop }
}

impl Ticker {
    /// The task's error, if it ended with one.
    pub async fn check(&mut self) -> Result<()> {
        if self.task.is_finished() {
            return (&mut self.task).await.context("the checkpoint task panicked")?;
        }
        Ok(())
    }

    /// Stop after the current step.
    pub async fn stop(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.task.await.context("the checkpoint task panicked")?
    }
}
