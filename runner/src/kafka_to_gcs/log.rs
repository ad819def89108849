//! The window commit log (`<job>/windows.log`): one checksummed line per step
//! ([`crate::progress::line`], the shards' log format), fsynced.
//!
//! - `prepared`: a window's files are staged and complete; the entry names each staged
//!   file and its final name, the window's `close_pos` and where a restart resumes.
//!   From here the window is decided: recovery publishes it (rolls forward).
//! - `committed`: its files are published and the staging objects removed.
//!
//! A torn last line (a crash mid-write, which can stop inside a multibyte character or
//! leave a prefix that is itself valid JSON) fails its checksum and is cut off on open:
//! the step it began did not happen, and recovery redoes it. A damaged line before the
//! end is an error that names the line; nothing is read as "nothing published". Lines
//! from before checksums (plain JSON) still read.

use super::window::{Published, Window};
use crate::progress::line::{encode_line, read_segment};
use crate::progress::{io, ProgressError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A staged file and where it is published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FilePlan {
    /// Under `_temporary/`.
    pub staged: String,
    /// The final name.
    pub final_name: String,
    /// Records in it.
    pub records: u64,
}

/// One window, staged and decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    /// The window.
    pub window: Window,
    /// Its files.
    pub files: Vec<FilePlan>,
    /// Per partition, the next offset not read when the window closed.
    pub close_pos: BTreeMap<i32, i64>,
    /// Per partition, where a restart reads from (the oldest record still in an open
    /// window, else `close_pos`).
    pub resume: BTreeMap<i32, i64>,
    /// Name prefixes of this window's files under which any other file is an earlier
    /// run's, removed before publishing (the trash step).
    #[serde(default)]
    pub trash_prefixes: Vec<String>,
}

/// One line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Entry {
    /// Staged and decided.
    Prepared(Prepared),
    /// Published.
    Committed {
        /// The window.
        window: Window,
    },
}

/// What recovery finds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recovered {
    /// The latest prepared window, if any.
    pub last: Option<Prepared>,
    /// Whether it was also committed.
    pub last_committed: bool,
    /// Windows committed so far.
    pub committed: u64,
}

impl Recovered {
    /// What is published (or will be, by the roll-forward).
    pub fn published(&self) -> Published {
        match &self.last {
            Some(p) => Published { last: Some(p.window), close_pos: p.close_pos.clone() },
            None => Published::default(),
        }
    }
}

/// The log file, open for appending.
pub struct WindowLog {
    path: PathBuf,
    file: std::fs::File,
}

impl WindowLog {
    /// Open (creating) `<dir>/windows.log` and read what it holds.
    pub fn open(dir: &Path) -> Result<(WindowLog, Recovered), ProgressError> {
        let path = dir.join("windows.log");
        let (entries, good) = read_segment::<Entry>(&path, true)?;
        let mut rec = Recovered::default();
        for e in entries {
            match e {
                Entry::Prepared(p) => {
                    rec.last = Some(p);
                    rec.last_committed = false;
                }
                Entry::Committed { window } => {
                    rec.committed += 1;
                    rec.last_committed = rec.last.as_ref().map(|p| p.window) == Some(window);
                }
            }
        }
        let file = std::fs::OpenOptions::new().create(true).append(true).read(true).open(&path).map_err(io(&path))?;
        if good < file.metadata().map_err(io(&path))?.len() {
            tracing::warn!(path = %path.display(), "the window log ends in a torn line: cut off");
            file.set_len(good).map_err(io(&path))?;
        }
        Ok((WindowLog { path, file }, rec))
    }

    /// Append `e` and fsync.
    pub fn append(&mut self, e: &Entry) -> std::io::Result<()> {
        self.file.write_all(&encode_line(e))?;
        self.file.sync_data()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(start: i64) -> Prepared {
        Prepared {
            window: Window { start_ms: start, end_ms: start + 10 },
            files: vec![],
            close_pos: [(0, start)].into_iter().collect(),
            resume: Default::default(),
            trash_prefixes: vec![],
        }
    }

    #[test]
    fn recovery_sees_the_last_decision_and_ignores_a_torn_line() {
        let d = tempfile::tempdir().unwrap();
        let (mut log, rec) = WindowLog::open(d.path()).unwrap();
        assert_eq!(rec, Recovered::default());
        log.append(&Entry::Prepared(prepared(0))).unwrap();
        log.append(&Entry::Committed { window: prepared(0).window }).unwrap();
        log.append(&Entry::Prepared(prepared(10))).unwrap();
        drop(log);
        let (_, rec) = WindowLog::open(d.path()).unwrap();
        assert_eq!(rec.last.as_ref().unwrap().window.start_ms, 10);
        assert!(!rec.last_committed, "window 10 was prepared, not committed: roll it forward");
        assert_eq!(rec.committed, 1);
        assert_eq!(rec.published().close_pos[&0], 10);
        // A torn line is cut off, and the next append starts clean.
        std::fs::OpenOptions::new()
            .append(true)
            .open(d.path().join("windows.log"))
            .unwrap()
            .write_all(b"{\"committed\":{\"win")
            .unwrap();
        let (mut log, rec) = WindowLog::open(d.path()).unwrap();
        assert!(!rec.last_committed);
        log.append(&Entry::Committed { window: prepared(10).window }).unwrap();
        let (_, rec) = WindowLog::open(d.path()).unwrap();
        assert!(rec.last_committed && rec.committed == 2);
    }

    /// Every prefix of a log, cut anywhere (inside a multibyte character too), reads as
    /// the entries whole before the cut: never as an empty log unless nothing was whole.
    #[test]
    fn a_log_cut_anywhere_reads_as_its_whole_entries() {
        let d = tempfile::tempdir().unwrap();
        let (mut log, _) = WindowLog::open(d.path()).unwrap();
        let mut p = prepared(0);
        p.files.push(FilePlan { staged: "_temporary/ü€".into(), final_name: "out-日本".into(), records: 3 });
        log.append(&Entry::Prepared(p.clone())).unwrap();
        log.append(&Entry::Committed { window: p.window }).unwrap();
        drop(log);
        let full = std::fs::read(d.path().join("windows.log")).unwrap();
        let first_end = full.iter().position(|b| *b == b'\n').unwrap() + 1;
        for cut in 0..full.len() {
            let c = tempfile::tempdir().unwrap();
            std::fs::write(c.path().join("windows.log"), &full[..cut]).unwrap();
            let (_, rec) = WindowLog::open(c.path()).unwrap();
            assert_eq!(rec.last.is_some(), cut >= first_end, "cut at {cut}");
            assert!(!rec.last_committed, "cut at {cut}: the commit line is not whole");
            assert_eq!(rec.last.map(|l| l.files), (cut >= first_end).then(|| p.files.clone()));
        }
    }

    #[test]
    fn a_damaged_line_before_the_end_is_an_error_and_plain_json_lines_still_read() {
        let d = tempfile::tempdir().unwrap();
        let plain = serde_json::to_string(&Entry::Prepared(prepared(0))).unwrap();
        std::fs::write(d.path().join("windows.log"), format!("{plain}\n")).unwrap();
        let (mut log, rec) = WindowLog::open(d.path()).unwrap();
        assert_eq!(rec.last.unwrap().window.start_ms, 0, "a line from before checksums");
        log.append(&Entry::Committed { window: prepared(0).window }).unwrap();
        drop(log);
        let path = d.path().join("windows.log");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[3] ^= 0x20;
        std::fs::write(&path, &bytes).unwrap();
        let e = WindowLog::open(d.path()).err().expect("a damaged first line is an error");
        assert!(e.to_string().contains("line 1"), "{e}");
    }
}
