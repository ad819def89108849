//! Keyed window state, in a heap or an LSM backend, with full and incremental
//! checkpoints to object storage (seed 003: Flink's HashMapStateBackend with full
//! checkpoints against RocksDB with incremental ones).
//!
//! # Layout
//! - This file: what every backend holds and answers ([`WindowState`]): records
//!   addressed by a [`Slot`] (window, key, partition, offset), scanned per (window,
//!   key) in (partition, offset) order, dropped a window at a time.
//! - [`heap`]: in-memory maps; a record is the message's bytes, shared, never
//!   serialized on access.
//! - [`lsm`]: RocksDB, one column family per open window (closing a window drops its
//!   files), records as big-endian keys and the message bytes as values.
//! - [`format`]: the canonical record stream a full heap checkpoint is written in.
//! - [`manifest`]: what a checkpoint holds, with a checksum per file and for itself.
//! - [`checkpoint`]: taking (a synchronous part, then an upload off the hot path),
//!   retaining and restoring checkpoints, falling back past a corrupt one.
//!
//! # Which backend
//! `heap` keeps every open window's records in memory: memory grows with rate ×
//! window, and a checkpoint writes all of it. `lsm` keeps them in RocksDB on the
//! local disk (memory is its memtables and block cache); with incremental
//! checkpoints each checkpoint uploads only the SST files flushed since the last one.

pub mod checkpoint;
pub mod format;
pub mod heap;
#[cfg(feature = "lsm")]
pub mod lsm;
pub mod manifest;

use std::fmt;
use std::path::{Path, PathBuf};

/// A fixed window `[start, end)`, in milliseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct Window {
    /// Inclusive start.
    pub start_ms: i64,
    /// Exclusive end.
    pub end_ms: i64,
}

impl Window {
    /// The window of length `size_ms` (aligned to the epoch, as Beam's FixedWindows)
    /// that holds `ts_ms`.
    ///
    /// ```
    /// use flexrun::state::Window;
    /// assert_eq!(Window::of(1_999, 1_000), Window { start_ms: 1_000, end_ms: 2_000 });
    /// ```
    ///
    /// At the ends of time the window saturates: its start is at least `i64::MIN` and
    /// its end at most `i64::MAX`, so every timestamp has a window and distinct windows
    /// have distinct labels (an overflow once gave far-future windows one label).
    pub fn of(ts_ms: i64, size_ms: i64) -> Window {
        let size = size_ms.max(1);
        let start = ts_ms.div_euclid(size).saturating_mul(size);
        let end = start.saturating_add(size);
        // The last window is cut short at i64::MAX; one that would hold i64::MAX itself
        // ends there too (an empty window is never made).
        let start = if start == end { end - size.min(end.saturating_sub(i64::MIN)) } else { start };
        Window { start_ms: start, end_ms: end }
    }

    /// Beam's window string: `<start>-<end>`, each an ISO-8601 UTC instant with
    /// milliseconds (Joda's `Instant.toString()`).
    pub fn label(&self) -> String {
        format!("{}-{}", iso(self.start_ms), iso(self.end_ms))
    }
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// Where a record sits in state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot {
    /// Its window.
    pub window: Window,
    /// Its key within the window (for kafka-to-gcs, the file shard).
    pub key: u32,
    /// Its Kafka partition.
    pub partition: i32,
    /// Its Kafka offset.
    pub offset: i64,
}

/// A record: its slot and the message bytes.
pub type Record = (Slot, bytes::Bytes);

/// `--state-backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// In-memory maps (Flink's HashMapStateBackend).
    #[default]
    Heap,
    /// RocksDB on the local disk (Flink's EmbeddedRocksDBStateBackend).
    Lsm,
}

/// `--checkpoint-kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The whole state every time.
    #[default]
    Full,
    /// Only what changed since the last completed checkpoint (`lsm` only).
    Incremental,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Heap => "heap",
            Backend::Lsm => "lsm",
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Full => "full",
            Kind::Incremental => "incremental",
        })
    }
}

/// Whether this build has `backend`: RocksDB (`lsm`) is compiled in only with the
/// `lsm` cargo feature, which the test suite turns on and the demo's build leaves out
/// (RocksDB's C++ was most of a fresh build's time).
///
/// ```
/// use flexrun::state::{check_built, Backend};
/// assert!(check_built(Backend::Heap).is_ok());
/// assert_eq!(check_built(Backend::Lsm).is_ok(), cfg!(feature = "lsm"));
/// ```
pub fn check_built(backend: Backend) -> Result<(), String> {
    match backend {
        Backend::Lsm if !cfg!(feature = "lsm") => Err("--state-backend lsm: this flexrun was built without RocksDB; build it with `cargo build --release --features lsm` (scripts/test.sh does)".into()),
        _ => Ok(()),
    }
}

/// Check a backend and checkpoint kind together.
///
/// ```
/// use flexrun::state::{check_kind, Backend, Kind};
/// assert!(check_kind(Backend::Lsm, Kind::Incremental).is_ok());
/// assert!(check_kind(Backend::Heap, Kind::Incremental).unwrap_err().contains("--state-backend lsm"));
/// ```
pub fn check_kind(backend: Backend, kind: Kind) -> Result<(), String> {
    match (backend, kind) {
        (Backend::Heap, Kind::Incremental) => Err(
            "--checkpoint-kind incremental needs --state-backend lsm: a heap backend has no immutable files to share between checkpoints, so its checkpoints are full".into(),
        ),
        _ => Ok(()),
    }
}

/// How big the state is.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct StateStats {
    /// Records held.
    pub records: u64,
    /// Distinct (window, key) pairs.
    pub keys: u64,
    /// Bytes held: record bytes for heap; SST files plus memtables for lsm.
    pub bytes: u64,
    /// Bytes the backend holds in memory (heap: the records; lsm: memtables and
    /// block cache).
    pub memory_bytes: u64,
}

/// A failed state call.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// RocksDB said no.
    #[error("RocksDB {op}: {message}")]
    Lsm {
        /// The call.
        op: &'static str,
        /// What RocksDB said.
        message: String,
    },
    /// A local file call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// The call.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A checkpoint file is not what its manifest says.
    #[error("{0}")]
    Corrupt(String),
    /// The backend is not compiled into this build ([`check_built`]).
    #[error("{0}")]
    NotBuilt(String),
    /// The checkpoint location failed.
    #[error("checkpoint storage: {0}")]
    Store(#[from] crate::store::StoreError),
}

impl StateError {
    /// An I/O error on `path`.
    pub fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StateError + 'a {
        move |source| StateError::Io { op, path: path.to_path_buf(), source }
    }
}

/// What the synchronous part of a checkpoint hands to the upload.
pub enum Snapshot {
    /// Every record, sharing the backend's bytes (heap).
    Records(Vec<Record>),
    /// A RocksDB checkpoint directory of hard-linked files (lsm).
    Files(PathBuf),
}

/// Keyed window state.
pub trait WindowState: Send + Sync {
    /// Which backend this is.
    fn backend(&self) -> Backend;
    /// Add records, all or none.
    fn put(&self, records: &[Record]) -> Result<(), StateError>;
    /// Call `f` with each record of `(window, key)`, in (partition, offset) order.
    fn scan(&self, window: Window, key: u32, f: &mut dyn FnMut(i32, i64, &[u8])) -> Result<(), StateError>;
    /// The keys `window` holds, in order.
    fn keys(&self, window: Window) -> Vec<u32>;
    /// The windows held, in order.
    fn windows(&self) -> Vec<Window>;
    /// Remove `window` and its records.
    fn drop_window(&self, window: Window) -> Result<(), StateError>;
    /// Sizes.
    fn stats(&self) -> StateStats;
    /// The synchronous part of a checkpoint: a consistent copy (heap: the records,
    /// sharing their bytes; lsm: a flush and hard links under `scratch`). Writes must
    /// not run while it does.
    fn snapshot(&self, scratch: &Path) -> Result<Snapshot, StateError>;
}

/// Open an empty backend; `dir` is where `lsm` keeps its files (wiped first).
pub fn open(backend: Backend, dir: &Path) -> Result<Box<dyn WindowState>, StateError> {
    Ok(match backend {
        Backend::Heap => Box::new(heap::HeapState::default()),
        #[cfg(feature = "lsm")]
        Backend::Lsm => Box::new(lsm::LsmState::open_empty(dir)?),
        #[cfg(not(feature = "lsm"))]
        Backend::Lsm => {
            let _ = dir;
            return Err(StateError::NotBuilt(check_built(backend).unwrap_err()));
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Records of two windows and three keys, out of key order, as a batch.
    pub fn sample() -> Vec<Record> {
        let w0 = Window { start_ms: 0, end_ms: 1000 };
        let w1 = Window { start_ms: 1000, end_ms: 2000 };
        let mut v = Vec::new();
        for i in 0..30i64 {
            let window = if i % 3 == 0 { w1 } else { w0 };
            let slot = Slot { window, key: (i % 4) as u32, partition: (i % 2) as i32, offset: i };
            v.push((slot, bytes::Bytes::from(format!("{{\"id\":{i}}}"))));
        }
        v
    }

    /// Every backend answers the same for the same records.
    pub fn behaves(s: &dyn WindowState) {
        let recs = sample();
        s.put(&recs[..10]).unwrap();
        s.put(&recs[10..]).unwrap();
        let w0 = Window { start_ms: 0, end_ms: 1000 };
        assert_eq!(s.windows().len(), 2);
        assert_eq!(s.keys(w0), vec![0, 1, 2, 3]);
        let mut seen = Vec::new();
        s.scan(w0, 1, &mut |p, o, v| seen.push((p, o, String::from_utf8(v.to_vec()).unwrap()))).unwrap();
        let mut want: Vec<_> = recs
            .iter()
            .filter(|(sl, _)| sl.window == w0 && sl.key == 1)
            .map(|(sl, v)| (sl.partition, sl.offset, String::from_utf8(v.to_vec()).unwrap()))
            .collect();
        want.sort();
        assert_eq!(seen, want, "(partition, offset) order");
        let st = s.stats();
        assert_eq!(st.records, 30);
        assert_eq!(st.keys, 8, "(w0 or w1) x 4 keys");
        assert!(st.bytes > 0);
        s.drop_window(w0).unwrap();
        assert_eq!(s.windows(), vec![Window { start_ms: 1000, end_ms: 2000 }]);
        assert_eq!(s.stats().records, 10);
        assert!(s.keys(w0).is_empty());
    }
}
