//! A checkpoint's manifest (`chk-<id>/MANIFEST.json`), written after every file it
//! names, so a checkpoint without one never completed. It names each file with its
//! size and CRC-32C, and carries a CRC-32C of its own text, so a torn or altered
//! manifest and a corrupt file are both detected on restore.
//!
//! ```
//! use flexrun::state::manifest::Manifest;
//! let m = Manifest { id: 3, ..Manifest::default() };
//! let text = m.to_bytes();
//! assert_eq!(Manifest::from_bytes(&text).unwrap().id, 3);
//! let mut bad = text.clone();
//! let at = bad.len() / 2;
//! bad[at] ^= 1;
//! assert!(Manifest::from_bytes(&bad).is_err());
//! ```

use super::{Backend, Kind, StateError, StateStats};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// Its name in the local state directory (or the part's name).
    pub name: String,
    /// Its object name under the checkpoint location.
    pub object: String,
    /// Bytes.
    pub size: u64,
    /// CRC-32C of its bytes.
    pub crc32c: u32,
    /// Shared with other checkpoints (an incremental checkpoint's SST file).
    pub shared: bool,
}

/// What a completed checkpoint holds.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Manifest {
    /// Checkpoint number, increasing.
    pub id: u64,
    /// Which backend wrote it.
    pub backend: Backend,
    /// Full or incremental.
    pub kind: Kind,
    /// When the synchronous part ran (ms since the epoch).
    pub created_ms: i64,
    /// The windows' length, ms (an lsm key holds its window's start only).
    #[serde(default)]
    pub window_ms: i64,
    /// Per partition, the next offset to read: the state holds every record before it
    /// (that no committed window holds) and none after it.
    pub positions: BTreeMap<i32, i64>,
    /// What the template keeps beside its state, taken at the same moment.
    pub extra: serde_json::Value,
    /// Every file the state needs.
    pub files: Vec<FileRef>,
    /// The state's size when it was taken.
    pub stats: ManifestStats,
    /// Bytes this checkpoint uploaded (for incremental, the new files only).
    pub uploaded_bytes: u64,
}

/// [`StateStats`] as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ManifestStats {
    /// Records.
    pub records: u64,
    /// (window, key) pairs.
    pub keys: u64,
    /// Bytes.
    pub bytes: u64,
}

impl From<StateStats> for ManifestStats {
    fn from(s: StateStats) -> Self {
        ManifestStats { records: s.records, keys: s.keys, bytes: s.bytes }
    }
}

#[derive(Serialize, Deserialize)]
struct Sealed {
    manifest: Manifest,
    crc32c: u32,
}

impl Manifest {
    /// The manifest's object name for checkpoint `id`.
    pub fn object(id: u64) -> String {
        format!("chk-{id:010}/MANIFEST.json")
    }

    /// The checkpoint id of a manifest's object name.
    pub fn id_of(object: &str) -> Option<u64> {
        object.strip_prefix("chk-")?.strip_suffix("/MANIFEST.json")?.parse().ok()
    }

    /// The text, sealed with its checksum.
    pub fn to_bytes(&self) -> Vec<u8> {
        let body = serde_json::to_vec(self).expect("manifests serialize");
        let sealed = Sealed { manifest: self.clone(), crc32c: crate::checksum::crc32c(&body) };
        serde_json::to_vec_pretty(&sealed).expect("manifests serialize")
    }

    /// Parse and check a manifest.
    pub fn from_bytes(b: &[u8]) -> Result<Manifest, StateError> {
        let s: Sealed = serde_json::from_slice(b)
            .map_err(|e| StateError::Corrupt(format!("the manifest is not valid JSON: {e}")))?;
        let body = serde_json::to_vec(&s.manifest).expect("manifests serialize");
        if crate::checksum::crc32c(&body) != s.crc32c {
            return Err(StateError::Corrupt("the manifest's checksum does not match its content".into()));
        }
        Ok(s.manifest)
    }

    /// The object names this checkpoint needs.
    pub fn objects(&self) -> BTreeSet<String> {
        self.files.iter().map(|f| f.object.clone()).collect()
    }
}
