//! The job record: what `flexrun dataflow jobs list` shows, kept as `control.json` in the
//! job's directory and rewritten (atomically) whenever the job's state changes.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The record's file name inside a job directory.
pub const RECORD_FILE: &str = "control.json";
/// The control socket's file name inside a job directory.
pub const SOCKET_FILE: &str = "control.sock";

/// A job's state, in Dataflow's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    /// Reading and writing.
    #[serde(rename = "JOB_STATE_RUNNING")]
    Running,
    /// Finishing in-flight data after a drain.
    #[serde(rename = "JOB_STATE_DRAINING")]
    Draining,
    /// Finished after a drain, an idle timeout or the end of its input.
    #[serde(rename = "JOB_STATE_DRAINED")]
    Drained,
    /// Stopped at once; the next start resumes from the checkpoint.
    #[serde(rename = "JOB_STATE_CANCELLED")]
    Cancelled,
    /// Ended with an error, or its process is gone without saying so.
    #[serde(rename = "JOB_STATE_FAILED")]
    Failed,
}

impl JobState {
    /// Dataflow's name, e.g. `JOB_STATE_RUNNING`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "JOB_STATE_RUNNING",
            JobState::Draining => "JOB_STATE_DRAINING",
            JobState::Drained => "JOB_STATE_DRAINED",
            JobState::Cancelled => "JOB_STATE_CANCELLED",
            JobState::Failed => "JOB_STATE_FAILED",
        }
    }

    /// gcloud's short form for the list's STATE column (`Running`, `Drained`, ...).
    pub fn short(self) -> &'static str {
        match self {
            JobState::Running => "Running",
            JobState::Draining => "Draining",
            JobState::Drained => "Drained",
            JobState::Cancelled => "Cancelled",
            JobState::Failed => "Failed",
        }
    }

    /// Still running (a drain or cancel can reach it).
    pub fn is_active(self) -> bool {
        matches!(self, JobState::Running | JobState::Draining)
    }
}

/// One job, as the control plane keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Dataflow-shaped id: `YYYY-MM-DD_HH_MM_SS-<digits>`.
    pub id: String,
    /// The job name (`--job-name`).
    pub name: String,
    /// The template.
    pub template: String,
    /// The template parameters as given.
    pub parameters: Vec<(String, String)>,
    /// The region it was launched for (recorded).
    pub region: String,
    /// The process running it.
    pub pid: u32,
    /// The state.
    pub state: JobState,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// RFC 3339.
    pub create_time: String,
    /// RFC 3339, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// The control socket.
    pub socket: PathBuf,
    /// The end-of-job summary (what `--summary-json` writes), once the job finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<serde_json::Value>,
}

/// A new job id in Dataflow's shape, from the time and the pid.
pub fn new_job_id(now: chrono::DateTime<chrono::Utc>, pid: u32) -> String {
    format!("{}-{}{:06}", now.format("%Y-%m-%d_%H_%M_%S"), now.timestamp_subsec_micros() % 1000, pid % 1_000_000)
}

fn pid_alive(pid: u32) -> bool {
    // Signal 0 checks that the process exists and may be signalled.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// What a redacted parameter value reads as.
pub const REDACTED: &str = "[redacted]";

/// A parameter as the record keeps it: a credential given literally (a name with
/// `Secret` or `Password` in it, and a value that is not `env:VAR`, `file:PATH` or a
/// Secret Manager resource name) becomes [`REDACTED`], so neither `control.json`,
/// `jobs describe` nor `export` shows it. References are kept: they name, not reveal.
///
/// ```
/// use flexrun::control::record::redact;
/// assert_eq!(redact("kafkaReadPasswordSecretId", "hunter2"), "[redacted]");
/// assert_eq!(redact("kafkaReadPasswordSecretId", "env:PW"), "env:PW");
/// assert_eq!(redact("outputTableSpec", "p:d.t"), "p:d.t");
/// ```
pub fn redact(name: &str, value: &str) -> String {
    let n = name.to_ascii_lowercase();
    let credential = n.contains("secret") || n.contains("password");
    let reference = value.starts_with("env:")
        || value.starts_with("file:")
        || (value.starts_with("projects/") && value.contains("/secrets/"));
    if credential && !reference && !value.is_empty() {
        REDACTED.to_string()
    } else {
        value.to_string()
    }
}

impl JobRecord {
    /// Write the record into `job_dir` (through a temporary file, so readers never see
    /// half of it), readable by its owner only (0600).
    pub fn save(&self, job_dir: &Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let tmp = job_dir.join(format!("{RECORD_FILE}.tmp"));
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(self).expect("a record serializes"))?;
        drop(f);
        std::fs::rename(tmp, job_dir.join(RECORD_FILE))
    }

    /// Read the record in `job_dir`. An active record whose process is gone is
    /// reported as failed, with the reason.
    pub fn load(job_dir: &Path) -> Option<JobRecord> {
        let mut r: JobRecord = serde_json::from_slice(&std::fs::read(job_dir.join(RECORD_FILE)).ok()?).ok()?;
        if r.state.is_active() && !pid_alive(r.pid) {
            r.reason = Some(format!("process {} ended without recording how (killed or crashed)", r.pid));
            r.state = JobState::Failed;
        }
        Some(r)
    }
}

/// Every job record under the checkpoint root, oldest first.
pub fn list(root: &Path) -> Vec<JobRecord> {
    let mut out: Vec<JobRecord> =
        std::fs::read_dir(root).into_iter().flatten().flatten().filter_map(|e| JobRecord::load(&e.path())).collect();
    out.sort_by(|a, b| a.create_time.cmp(&b.create_time).then(a.id.cmp(&b.id)));
    out
}

/// The job named by id or by name (the latest with that name).
pub fn find(root: &Path, id_or_name: &str) -> Option<JobRecord> {
    list(root).into_iter().rev().find(|r| r.id == id_or_name || r.name == id_or_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pid: u32, state: JobState) -> JobRecord {
        JobRecord {
            summary: None,
            id: new_job_id(chrono::Utc::now(), pid),
            name: "j".into(),
            template: "kafka-to-bq".into(),
            parameters: vec![],
            region: "us-central1".into(),
            pid,
            state,
            reason: None,
            create_time: chrono::Utc::now().to_rfc3339(),
            end_time: None,
            socket: "s".into(),
        }
    }

    #[test]
    fn the_record_is_its_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        record(std::process::id(), JobState::Running).save(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(RECORD_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn literal_credentials_are_redacted_and_references_kept() {
        assert_eq!(redact("schemaRegistryOauthClientSecretId", "s3cret"), REDACTED);
        assert_eq!(redact("keystorePassword", "pw"), REDACTED);
        assert_eq!(
            redact("kafkaReadUsernameSecretId", "projects/p/secrets/u/versions/1"),
            "projects/p/secrets/u/versions/1"
        );
        assert_eq!(redact("kafkaReadPasswordSecretId", "file:/run/pw"), "file:/run/pw");
        assert_eq!(redact("readBootstrapServerAndTopic", "h:9092;t"), "h:9092;t");
    }

    #[test]
    fn ids_have_dataflows_shape() {
        let t = chrono::DateTime::parse_from_rfc3339("2026-12-01T05:04:03.123456Z").unwrap().to_utc();
        assert_eq!(new_job_id(t, 4242), "2026-12-01_05_04_03-456004242");
    }

    #[test]
    fn a_running_record_of_a_dead_process_reads_as_failed_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live");
        let gone = dir.path().join("gone");
        std::fs::create_dir_all(&live).unwrap();
        std::fs::create_dir_all(&gone).unwrap();
        record(std::process::id(), JobState::Running).save(&live).unwrap();
        // Pid 0x3FFFFFFF is above any pid_max, so no process has it.
        record(0x3FFF_FFFF, JobState::Running).save(&gone).unwrap();
        assert_eq!(JobRecord::load(&live).unwrap().state, JobState::Running);
        let r = JobRecord::load(&gone).unwrap();
        assert_eq!(r.state, JobState::Failed);
        assert!(r.reason.unwrap().contains("ended without recording how"));
        assert_eq!(list(dir.path()).len(), 2);
        assert!(find(dir.path(), "j").is_some() && find(dir.path(), "nope").is_none());
    }
}
