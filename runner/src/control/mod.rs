//! The local control plane: every running job registers under the checkpoint root and
//! listens on a Unix socket in its own directory, so `flexrun dataflow jobs list`,
//! `describe`, `drain`, `cancel` and `update-options` reach it as gcloud reaches a
//! Dataflow job. Nothing listens on the network.
//!
//! # Layout
//! - [`record`]: the job record (`control.json`): id, name, template, parameters, pid,
//!   state; a record whose process is gone reads as failed, with the reason.
//! - [`Control`] (here): what the job shares with its socket: the drain signal, pending
//!   option updates, the live worker counts and the autoscaling history.
//! - [`identity`]: what a job's checkpoint belongs to (`job.json`); a changed run is refused.
//! - [`lock`]: one process per job, by `flock(2)` on the job's directory.
//! - [`serve`] and [`request`]: one JSON line each way per connection.

pub mod identity;
pub mod lock;
pub mod record;

use anyhow::{Context, Result};
use record::{JobRecord, JobState, SOCKET_FILE};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::watch;

/// Exit status of a cancelled job (the same as a second Ctrl-C: stopped at once).
pub const CANCELLED_EXIT: i32 = 130;

/// What `update-options` changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OptionsUpdate {
    /// `--min-num-workers`.
    pub min_workers: Option<u32>,
    /// `--max-num-workers`.
    pub max_workers: Option<u32>,
    /// `--worker-utilization-hint`.
    pub utilization_hint: Option<f64>,
    /// `--unset-worker-utilization-hint` (back to the default, 0.8).
    #[serde(default)]
    pub unset_utilization_hint: bool,
}

/// One autoscaling event, shaped like Dataflow's AutoscalingEvent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutoscalingEvent {
    /// RFC 3339.
    pub time: String,
    /// `TARGET_NUM_WORKERS_CHANGED`, `CURRENT_NUM_WORKERS_CHANGED` or `NO_CHANGE`.
    pub event_type: String,
    /// Workers before.
    pub current_num_workers: u32,
    /// Workers after (or the new target).
    pub target_num_workers: u32,
    /// In Google's words where Google has them.
    pub description: String,
}

/// What a running job reports about itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveStatus {
    /// Workers running now.
    pub current_num_workers: u32,
    /// The autoscaler's latest target.
    pub target_num_workers: u32,
    /// The floor in force.
    pub min_num_workers: u32,
    /// The ceiling in force.
    pub max_num_workers: u32,
    /// The hint in force.
    pub worker_utilization_hint: f64,
    /// Events, oldest first.
    pub autoscaling_events: Vec<AutoscalingEvent>,
}

/// A request on the control socket.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The record and the live status.
    Describe,
    /// Finish in-flight data and exit 0.
    Drain,
    /// Stop now.
    Cancel,
    /// Change worker bounds or the hint in flight.
    UpdateOptions(OptionsUpdate),
}

/// The answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    /// The job's record.
    pub record: Option<JobRecord>,
    /// Its live status.
    pub status: Option<LiveStatus>,
    /// Why the request was refused.
    pub error: Option<String>,
}

/// What a running job shares with its control socket.
pub struct Control {
    cancel_tx: watch::Sender<bool>,
    update: Mutex<Option<OptionsUpdate>>,
    status: Mutex<LiveStatus>,
    record: Mutex<JobRecord>,
    job_dir: Mutex<PathBuf>,
    fixed_workers: std::sync::atomic::AtomicBool,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl Control {
    /// A control for a job about to start (not registered until [`Control::start`]).
    pub fn new(
        cancel_tx: watch::Sender<bool>,
        name: &str,
        template: &str,
        parameters: Vec<(String, String)>,
        region: &str,
    ) -> Arc<Control> {
        let pid = std::process::id();
        let record = JobRecord {
            id: record::new_job_id(chrono::Utc::now(), pid),
            name: name.into(),
            template: template.into(),
            parameters: parameters
                .into_iter()
                .map(|(k, v)| {
                    let v = record::redact(&k, &v);
                    (k, v)
                })
                .collect(),
            region: region.into(),
            pid,
            state: JobState::Running,
            reason: None,
            create_time: now(),
            end_time: None,
            socket: PathBuf::new(),
            summary: None,
        };
        Arc::new(Control {
            cancel_tx,
            update: Mutex::new(None),
            status: Mutex::new(LiveStatus::default()),
            record: Mutex::new(record),
            job_dir: Mutex::new(PathBuf::new()),
            fixed_workers: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Take `job_dir`'s lock (one process per job) and register there: for the
    /// templates that run without the worker pool, which report `workers` fixed
    /// workers and refuse `update-options`.
    pub fn register_fixed(self: &Arc<Self>, job_dir: &Path, workers: u32) -> Result<lock::JobLock> {
        let name = self.record.lock().expect("record").name.clone();
        let held = lock::JobLock::acquire(job_dir, &name)?;
        self.fixed_workers.store(true, std::sync::atomic::Ordering::Relaxed);
        self.publish(workers, workers, workers, workers, 0.0);
        self.start(job_dir)?;
        Ok(held)
    }

    /// Register the job in `job_dir` (its lock is held) and listen on its socket.
    pub fn start(self: &Arc<Self>, job_dir: &Path) -> Result<()> {
        let sock = job_dir.join(SOCKET_FILE);
        let _ = std::fs::remove_file(&sock);
        let listener = tokio::net::UnixListener::bind(&sock).with_context(|| format!("binding {}", sock.display()))?;
        // Only the job's owner may drain, cancel or reconfigure it.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("restricting {}", sock.display()))?;
        }
        *self.job_dir.lock().expect("job dir") = job_dir.to_path_buf();
        self.record.lock().expect("record").socket = sock;
        self.save();
        tokio::spawn(serve(self.clone(), listener));
        let r = self.record.lock().expect("record").clone();
        eprintln!("job {} registered as {} (see `flexrun dataflow jobs list`)", r.name, r.id);
        Ok(())
    }

    fn save(&self) {
        let dir = self.job_dir.lock().expect("job dir").clone();
        if dir.as_os_str().is_empty() {
            return; // never registered: the job did not get as far as its lock
        }
        if let Err(e) = self.record.lock().expect("record").save(&dir) {
            tracing::warn!(error = %e, dir = %dir.display(), "cannot write the job record");
        }
    }

    fn set_state(&self, state: JobState, reason: Option<String>) {
        {
            let mut r = self.record.lock().expect("record");
            r.state = state;
            r.reason = reason;
            if !state.is_active() {
                r.end_time = Some(now());
            }
        }
        self.save();
    }

    /// Keep the end-of-job summary in the record (`describe` shows it afterwards).
    pub fn set_summary(&self, summary: serde_json::Value) {
        self.record.lock().expect("record").summary = Some(summary);
    }

    /// The summary kept by [`Control::set_summary`].
    pub fn summary(&self) -> Option<serde_json::Value> {
        self.record.lock().expect("record").summary.clone()
    }

    /// The job ended: record how, and stop answering.
    pub fn finish(&self, result: &Result<()>) {
        match result {
            Ok(()) => self.set_state(JobState::Drained, None),
            Err(e) => self.set_state(JobState::Failed, Some(format!("{e:#}"))),
        }
        let _ = std::fs::remove_file(self.job_dir.lock().expect("job dir").join(SOCKET_FILE));
    }

    /// The job id.
    pub fn id(&self) -> String {
        self.record.lock().expect("record").id.clone()
    }

    /// An update waiting to be applied, taken.
    pub fn take_update(&self) -> Option<OptionsUpdate> {
        self.update.lock().expect("update").take()
    }

    /// Publish the pool's counts and limits.
    pub fn publish(&self, current: u32, target: u32, min: u32, max: u32, hint: f64) {
        let mut s = self.status.lock().expect("status");
        (
            s.current_num_workers,
            s.target_num_workers,
            s.min_num_workers,
            s.max_num_workers,
            s.worker_utilization_hint,
        ) = (current, target, min, max, hint);
    }

    /// Add an autoscaling event.
    pub fn event(&self, event_type: &str, from: u32, to: u32, description: String) {
        self.status.lock().expect("status").autoscaling_events.push(AutoscalingEvent {
            time: now(),
            event_type: event_type.into(),
            current_num_workers: from,
            target_num_workers: to,
            description,
        });
    }

    fn answer(&self, req: Request) -> (Response, bool) {
        let mut error = None;
        let mut exit = false;
        match req {
            Request::Describe => {}
            Request::Drain => {
                self.set_state(JobState::Draining, None);
                self.cancel_tx.send_replace(true);
            }
            Request::Cancel => {
                self.set_state(JobState::Cancelled, Some("cancelled by `flexrun dataflow jobs cancel`".into()));
                exit = true;
            }
            Request::UpdateOptions(u) => error = self.check_update(u).err(),
        }
        let r = Response {
            record: Some(self.record.lock().expect("record").clone()),
            status: Some(self.status.lock().expect("status").clone()),
            error,
        };
        (r, exit)
    }

    fn check_update(&self, u: OptionsUpdate) -> Result<(), String> {
        let s = self.status.lock().expect("status").clone();
        let (min, max) = (u.min_workers.unwrap_or(s.min_num_workers), u.max_workers.unwrap_or(s.max_num_workers));
        if min > max {
            return Err(format!("--min-num-workers={min} would be above --max-num-workers={max}"));
        }
        if self.fixed_workers.load(std::sync::atomic::Ordering::Relaxed) {
            let t = self.record.lock().expect("record").template.clone();
            return Err(format!("a {t} job runs a fixed number of workers: it has no autoscaling options to update"));
        }
        if !self.record.lock().expect("record").state.is_active() || *self.cancel_tx.borrow() {
            return Err("the job is draining: its options can no longer change".into());
        }
        *self.update.lock().expect("update") = Some(u);
        Ok(())
    }
}

/// Answer requests on the job's socket until the process ends.
pub async fn serve(control: Arc<Control>, listener: tokio::net::UnixListener) {
    while let Ok((stream, _)) = listener.accept().await {
        let control = control.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let (resp, exit) = match read_request(read).await {
                Ok(req) => control.answer(req),
                Err(e) => (Response { record: None, status: None, error: Some(e) }, false),
            };
            let mut out = serde_json::to_vec(&resp).expect("a response serializes");
            out.push(b'\n');
            let _ = write.write_all(&out).await;
            let _ = write.flush().await;
            if exit {
                tracing::warn!("cancelled: stopping at once (the next start resumes from the checkpoint)");
                std::process::exit(CANCELLED_EXIT);
            }
        });
    }
}

/// The longest request line the socket reads; requests are a few hundred bytes.
pub const MAX_REQUEST_BYTES: u64 = 64 * 1024;

/// One request line, read at most [`MAX_REQUEST_BYTES`] into memory.
async fn read_request(read: impl tokio::io::AsyncRead + Unpin) -> std::result::Result<Request, String> {
    use tokio::io::AsyncReadExt;
    let mut line = String::new();
    BufReader::new(read.take(MAX_REQUEST_BYTES + 1))
        .read_line(&mut line)
        .await
        .map_err(|e| format!("bad request: {e}"))?;
    if line.len() as u64 > MAX_REQUEST_BYTES {
        return Err(format!("bad request: longer than {MAX_REQUEST_BYTES} bytes"));
    }
    serde_json::from_str::<Request>(&line).map_err(|e| format!("bad request: {e}"))
}

/// Send one request to the job listening on `socket`.
pub async fn request(socket: &Path, req: &Request) -> Result<Response> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .with_context(|| format!("connecting to the job's control socket {}", socket.display()))?;
    let (read, mut write) = stream.into_split();
    let mut line = serde_json::to_vec(req)?;
    line.push(b'\n');
    write.write_all(&line).await?;
    let mut answer = String::new();
    BufReader::new(read).read_line(&mut answer).await?;
    serde_json::from_str(&answer).with_context(|| format!("the job answered {answer:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_line_past_the_bound_is_refused_without_reading_it_all() {
        let long = vec![b'x'; MAX_REQUEST_BYTES as usize * 4];
        let e = read_request(&long[..]).await.unwrap_err();
        assert!(e.contains("longer than 65536 bytes"), "{e}");
    }

    #[tokio::test]
    async fn a_request_within_the_bound_is_read() {
        let line = serde_json::to_string(&Request::Drain).unwrap() + "\n";
        assert!(matches!(read_request(line.as_bytes()).await, Ok(Request::Drain)));
    }

    #[test]
    fn the_record_keeps_no_literal_secret() {
        let (tx, _rx) = watch::channel(false);
        let params = vec![("kafkaReadPasswordSecretId".to_string(), "hunter2".to_string()), ("a".into(), "b".into())];
        let c = Control::new(tx, "j", "kafka-to-bq", params, "us-central1");
        let r = c.record.lock().unwrap().clone();
        assert_eq!(r.parameters[0].1, record::REDACTED);
        assert_eq!(r.parameters[1].1, "b");
        assert!(!serde_json::to_string(&r).unwrap().contains("hunter2"));
    }
}
