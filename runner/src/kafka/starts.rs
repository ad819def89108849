//! Durable start positions: where each partition began reading before anything of it
//! was committed.
//!
//! A start position that is resolved but never saved is resolved again on the next
//! start. With `kafkaReadOffset=latest` that silently skips whatever was produced in
//! between: a job that read nothing, a shard idle until a crash, a job killed before
//! its first batch, or a partition discovered mid-run whose shard died before it
//! committed. So every resolved position (from latest, earliest, a timestamp or the
//! consumer group) is written here and fsynced, file and directory, before the first
//! read, and a restart of the same job resumes from it where it has no checkpoint.
//!
//! Both templates use it: a checkpoint or commit log, when there is one, still wins.
//!
//! The file also names the log the positions were resolved in: the topic's id
//! ([`crate::kafka::lineage`]). A saved position of another topic id belongs to a topic
//! since deleted, and is not used ([`read_bound`]).
//!
//! ```
//! use flexrun::kafka::starts;
//! use std::collections::BTreeMap;
//! let d = tempfile::tempdir().unwrap();
//! starts::record(d.path(), &BTreeMap::from([(0, 7)])).unwrap();
//! starts::record(d.path(), &BTreeMap::from([(1, 3)])).unwrap();
//! assert_eq!(starts::read(d.path()).unwrap(), BTreeMap::from([(0, 7), (1, 3)]));
//! ```

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::Path;

const FILE: &str = "starts.json";

/// The saved start positions and the topic id they were resolved in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// The topic id (None: saved before ids were kept, or a broker without them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_id: Option<String>,
    /// Partition → the offset it started at.
    pub positions: BTreeMap<i32, i64>,
}

/// The saved start positions with their topic id (empty before the first start). A
/// file that does not parse is an error naming it, never "no positions": reading it as
/// empty would re-resolve `latest` and lose records. The plain partition → offset map
/// of older versions still reads (with no topic id).
pub fn read_bound(job_dir: &Path) -> io::Result<Saved> {
    let path = job_dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Saved::default()),
        Err(e) => return Err(e),
    };
    let bad = |e: serde_json::Error| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{} is not a partition → offset map: {e}", path.display()))
    };
    // Through a Value: serde's untagged enums cannot read integer map keys.
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(bad)?;
    if v.get("positions").is_some() {
        serde_json::from_value(v).map_err(bad)
    } else {
        Ok(Saved { topic_id: None, positions: serde_json::from_value(v).map_err(bad)? })
    }
}

/// The saved start positions, whatever log they were resolved in.
pub fn read(job_dir: &Path) -> io::Result<BTreeMap<i32, i64>> {
    read_bound(job_dir).map(|s| s.positions)
}

/// Merge `positions` into the saved ones (a partition given here replaces its saved
/// position) and make the result durable: temporary file, fsync, rename, and an
/// fsync of the directory so the rename itself survives a power cut. The topic id
/// saved before stays.
pub fn record(job_dir: &Path, positions: &BTreeMap<i32, i64>) -> io::Result<()> {
    let mut saved = read_bound(job_dir)?;
    saved.positions.extend(positions);
    write_durably(job_dir, FILE, &serde_json::to_vec(&saved)?)
}

/// Replace the saved positions with `saved` (a start that judged the old ones: their
/// topic was recreated, or they are bound for the first time).
pub fn record_bound(job_dir: &Path, saved: &Saved) -> io::Result<()> {
    write_durably(job_dir, FILE, &serde_json::to_vec(saved)?)
}

/// Write `bytes` to `dir/name` so that a crash leaves the old file or the new one:
/// temporary file, fsync, rename, and an fsync of the directory.
pub fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{name}.tmp"));
    std::fs::write(&tmp, bytes)?;
    File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

/// `initial` with every saved position laid over it: where a partition without a
/// checkpoint starts.
pub fn overlay(mut initial: BTreeMap<i32, i64>, saved: &BTreeMap<i32, i64>) -> BTreeMap<i32, i64> {
    initial.extend(saved);
    initial
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_start_beats_a_freshly_resolved_latest() {
        let latest_now = BTreeMap::from([(0, 100), (1, 40)]);
        let saved = BTreeMap::from([(0, 0)]);
        assert_eq!(overlay(latest_now, &saved), BTreeMap::from([(0, 0), (1, 40)]));
    }

    #[test]
    fn a_torn_file_is_an_error_not_an_empty_map() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(FILE), b"{\"0\": 1").unwrap();
        let e = read(d.path()).unwrap_err();
        assert!(e.to_string().contains("starts.json"), "{e}");
    }

    #[test]
    fn the_topic_id_is_kept_and_the_older_plain_map_still_reads() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(FILE), br#"{"0": 4}"#).unwrap();
        assert_eq!(read_bound(d.path()).unwrap(), Saved { topic_id: None, positions: BTreeMap::from([(0, 4)]) });
        let bound = Saved { topic_id: Some("abc".into()), positions: BTreeMap::from([(0, 9)]) };
        record_bound(d.path(), &bound).unwrap();
        record(d.path(), &BTreeMap::from([(1, 2)])).unwrap();
        let got = read_bound(d.path()).unwrap();
        assert_eq!(got.topic_id.as_deref(), Some("abc"));
        assert_eq!(got.positions, BTreeMap::from([(0, 9), (1, 2)]));
    }

    #[test]
    fn record_replaces_only_the_partitions_it_is_given() {
        let d = tempfile::tempdir().unwrap();
        record(d.path(), &BTreeMap::from([(0, 5), (1, 6)])).unwrap();
        record(d.path(), &BTreeMap::from([(1, 9)])).unwrap();
        assert_eq!(read(d.path()).unwrap(), BTreeMap::from([(0, 5), (1, 9)]));
    }
}
