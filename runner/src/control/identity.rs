//! What a job's checkpoint belongs to (`<job>/job.json`): written once, atomically and
//! fsynced, by the job's first run; every later run under the same `--job-name` is
//! compared with it field by field, and a difference that would make the checkpoint
//! lie (another topic, table, window or output) is refused with exit status 2 before
//! anything is read, naming each field that changed. Both templates use this.
//!
//! ```
//! use flexrun::control::identity::{check, Field};
//! let d = tempfile::tempdir().unwrap();
//! let first = vec![Field::new("topic", "orders"), Field::new("windowDuration", "5m")];
//! check(d.path(), "kafka-to-gcs", &first).unwrap();
//! let changed = vec![Field::new("topic", "orders"), Field::new("windowDuration", "1m")];
//! let e = check(d.path(), "kafka-to-gcs", &changed).unwrap_err().to_string();
//! assert!(e.contains("windowDuration was 5m, is now 1m"), "{e}");
//! ```

use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// One value a checkpoint depends on, named as the user gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The parameter's name.
    pub name: &'static str,
    /// Its value, as text.
    pub value: String,
}

impl Field {
    /// A field.
    pub fn new(name: &'static str, value: impl Into<String>) -> Field {
        Field { name, value: value.into() }
    }
}

/// The file.
pub const FILE: &str = "job.json";

/// The identity recorded in `job_dir`, if any (a JSON object of strings).
pub fn recorded(job_dir: &Path) -> Result<Option<BTreeMap<String, serde_json::Value>>> {
    let path = job_dir.join(FILE);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Write `value` as the job's identity (temporary file, fsync, rename).
pub fn record(job_dir: &Path, value: &impl serde::Serialize) -> Result<()> {
    std::fs::create_dir_all(job_dir).with_context(|| format!("creating {}", job_dir.display()))?;
    let (tmp, path) = (job_dir.join("job.json.tmp"), job_dir.join(FILE));
    std::fs::write(&tmp, serde_json::to_vec_pretty(value)?).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Compare `fields` with the recorded identity (fields it lacks were not recorded by
/// an older run, and are taken as they are now), or record them on a first run. A
/// difference is a usage error (exit 2) naming every changed field.
pub fn check(job_dir: &Path, template: &str, fields: &[Field]) -> Result<()> {
    let Some(have) = recorded(job_dir)? else {
        let mut v: BTreeMap<&str, &str> = fields.iter().map(|f| (f.name, f.value.as_str())).collect();
        v.insert("template", template);
        return record(job_dir, &v);
    };
    let mut want = fields.to_vec();
    want.push(Field::new("template", template));
    let changed: Vec<String> = want
        .iter()
        .filter_map(|f| match have.get(f.name).and_then(|v| v.as_str()) {
            Some(was) if was != f.value => Some(format!("{} was {was}, is now {}", f.name, f.value)),
            _ => None,
        })
        .collect();
    if changed.is_empty() {
        return Ok(());
    }
    let job = job_dir.file_name().unwrap_or_default().to_string_lossy();
    Err(crate::usage(format!(
        "job {job} already has a checkpoint for a different pipeline ({}): {}. Its checkpoint would duplicate or lose records under the new values. Use another --job-name, or remove {} to start over",
        job_dir.join(FILE).display(),
        changed.join("; "),
        job_dir.display()
    )))
}
