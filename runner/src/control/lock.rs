//! One process per job: an exclusive lock on the job's checkpoint directory.
//!
//! Two processes with the same `--job-name` would both append at the offsets their
//! logs name, each taking the other's ALREADY_EXISTS for success, and rows beyond
//! the shorter run would be lost. The lock is `flock(2)` on `<job>/LOCK`, which the
//! kernel releases when the holder exits in any way, SIGKILL included, so a crashed
//! job never leaves a stale lock behind. The file holds the holder's pid, for the
//! message the second process prints.

use crate::usage;
use anyhow::{Context, Result};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Held for as long as the job runs; dropping it releases the lock.
#[derive(Debug)]
pub struct JobLock {
    _file: File,
    /// The lock file.
    pub path: PathBuf,
}

impl JobLock {
    /// Take the lock on `job_dir` (created if needed), or fail with a usage error
    /// (exit status 2) that names the process holding it.
    pub fn acquire(job_dir: &Path, job: &str) -> Result<JobLock> {
        std::fs::create_dir_all(job_dir).with_context(|| format!("creating {}", job_dir.display()))?;
        // The job's directory holds its record and control socket: its owner's alone.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(job_dir, std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("restricting {}", job_dir.display()))?;
        }
        let path = job_dir.join("LOCK");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                let holder = holder.trim();
                return Err(usage(format!(
                    "job {job} is already running: process {} holds {}. Two processes on one job would each take the other's rows for their own and lose some; stop it first, or use another --job-name",
                    if holder.is_empty() { "(unknown pid)" } else { holder },
                    path.display()
                )));
            }
            Err(TryLockError::Error(e)) => return Err(e).with_context(|| format!("locking {}", path.display())),
        }
        file.set_len(0)?;
        writeln!(file, "{}", std::process::id())?;
        file.sync_all()?;
        Ok(JobLock { _file: file, path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_until_it_lets_go() {
        let d = tempfile::tempdir().unwrap();
        let a = JobLock::acquire(d.path(), "j").unwrap();
        let e = JobLock::acquire(d.path(), "j").unwrap_err();
        assert!(e.downcast_ref::<crate::UsageError>().is_some(), "a usage error (exit 2)");
        assert!(e.to_string().contains(&format!("process {} holds", std::process::id())), "{e}");
        drop(a);
        JobLock::acquire(d.path(), "j").expect("free again once the holder is gone");
    }
}
