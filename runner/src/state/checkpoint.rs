//! Taking, retaining and restoring checkpoints, in object storage or a directory.
//!
//! # Layout under the checkpoint location
//! - `chk-<id>/MANIFEST.json`: written last; a checkpoint without one never completed.
//! - `chk-<id>/<file>`: the checkpoint's own files (a full checkpoint's record stream
//!   parts or RocksDB files; an incremental one's small RocksDB metadata files).
//! - `shared/<lineage>-<sst>`: an incremental checkpoint's SST files, uploaded once and
//!   referenced by every later manifest that still needs them. `lineage` is unique per
//!   process start, so a job restored from an older checkpoint never overwrites a file
//!   a newer one named.
//!
//! # Taking one
//! 1. Synchronous, with writes paused: the backend's [`WindowState::snapshot`] (heap:
//!    copy the maps' structure, sharing every record's bytes; lsm: flush memtables and
//!    hard-link the live files), and the caller's positions and extras.
//! 2. Off the hot path ([`Checkpointer::upload`]): encode and upload the files
//!    (`parallelism` at a time), then the manifest, then remove what no retained
//!    checkpoint needs. Crash points `state::mid_upload` (half the files up) and
//!    `state::before_manifest`: a restart ignores the incomplete checkpoint and the
//!    next cleanup removes its files.
//!
//! # Restoring
//! [`Checkpointer::restore`] takes the newest manifest, checks it and every file's size
//! and CRC-32C, and rebuilds the state. A corrupt or partial checkpoint is reported
//! (and its manifest removed) and the previous one is tried. Crash point
//! `state::mid_restore` (files fetched, state not yet open): the next start restores
//! again from the same checkpoint.

#[cfg(feature = "lsm")]
use super::lsm::LsmState;
use super::manifest::{FileRef, Manifest};
use super::{format, Backend, Kind, Snapshot, StateError, WindowState};
#[cfg(feature = "lsm")]
use super::{heap::HeapState, Record, Slot};
use crate::store::Store;
use futures::{stream, StreamExt, TryStreamExt};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
#[cfg(feature = "lsm")]
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Completed checkpoints kept (Flink's `state.checkpoints.num-retained` default is 1;
/// two leave one to fall back to when the newest is found corrupt).
pub const RETAINED: usize = 2;

/// What a restore found.
pub struct Restored {
    /// The state, rebuilt.
    pub state: Box<dyn WindowState>,
    /// The checkpoint it came from.
    pub manifest: Manifest,
    /// Newer checkpoints passed over, and why.
    pub skipped: Vec<(u64, String)>,
    /// Fetching, checking and rebuilding took this long.
    pub took: Duration,
}

/// A checkpoint taken: its manifest and how long the upload took.
#[derive(Debug, Clone)]
pub struct Taken {
    /// What it holds.
    pub manifest: Manifest,
    /// Encoding, uploading, the manifest and the cleanup.
    pub upload: Duration,
}

/// Writes and reads one job's checkpoints.
pub struct Checkpointer {
    store: Store,
    backend: Backend,
    kind: Kind,
    parallelism: usize,
    lineage: String,
    next_id: u64,
    /// Shared files known to be uploaded: local name → reference.
    known: BTreeMap<String, FileRef>,
}

fn corrupt(id: u64, why: impl std::fmt::Display) -> StateError {
    StateError::Corrupt(format!("checkpoint {id}: {why}"))
}

impl Checkpointer {
    /// Checkpoints of `backend` and `kind` in `store`; `lineage` names this run's
    /// shared files.
    pub fn new(store: Store, backend: Backend, kind: Kind, parallelism: usize, lineage: &str) -> Checkpointer {
        Checkpointer {
            store,
            backend,
            kind,
            parallelism: parallelism.max(1),
            lineage: lineage.into(),
            next_id: 1,
            known: BTreeMap::new(),
        }
    }

    /// The ids of checkpoints with a manifest, newest first, and the highest id seen
    /// at all (an incomplete checkpoint's included).
    async fn ids(&self) -> Result<(Vec<u64>, u64), StateError> {
        let names = self.store.list("chk-").await?;
        let mut complete: Vec<u64> = names.iter().filter_map(|n| Manifest::id_of(n)).collect();
        let highest = names
            .iter()
            .filter_map(|n| n.strip_prefix("chk-")?.split('/').next()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        complete.sort_unstable_by(|a, b| b.cmp(a));
        Ok((complete, highest))
    }

    /// Restore the newest good checkpoint into a new state (lsm files go to
    /// `local_dir`), or `None` when there is none.
    pub async fn restore(&mut self, local_dir: &Path) -> Result<Option<Restored>, StateError> {
        let t = Instant::now();
        let (ids, highest) = self.ids().await?;
        self.next_id = highest + 1;
        let mut skipped = Vec::new();
        for id in ids {
            match self.fetch(id).await {
                Ok((manifest, files)) => {
                    crate::crash_point!("state::mid_restore");
                    let state = self.rebuild(&manifest, files, local_dir).await?;
                    self.known =
                        manifest.files.iter().filter(|f| f.shared).map(|f| (f.name.clone(), f.clone())).collect();
                    return Ok(Some(Restored { state, manifest, skipped, took: t.elapsed() }));
                }
                Err(StateError::Corrupt(why)) => {
                    tracing::warn!(checkpoint = id, reason = %why, "checkpoint is corrupt or partial: falling back to the previous one");
                    self.store.delete(&Manifest::object(id)).await?;
                    skipped.push((id, why));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// The manifest of checkpoint `id` and its files' bytes, all checked.
    async fn fetch(&self, id: u64) -> Result<(Manifest, Vec<(FileRef, Vec<u8>)>), StateError> {
        let m = Manifest::from_bytes(&self.store.get(&Manifest::object(id)).await?).map_err(|e| corrupt(id, e))?;
        let files: Vec<(FileRef, Vec<u8>)> = stream::iter(m.files.clone().into_iter().map(|f| {
            let store = self.store.clone();
            async move {
                match store.get(&f.object).await {
                    Ok(b) => Ok((f, b)),
                    Err(e) if e.is_not_found() => Err(corrupt(id, format!("{} is missing", f.object))),
                    Err(e) => Err(e.into()),
                }
            }
        }))
        .buffered(self.parallelism)
        .try_collect()
        .await?;
        for (f, b) in &files {
            if b.len() as u64 != f.size || crate::checksum::crc32c(b) != f.crc32c {
                return Err(corrupt(id, format!("{} does not match its size and checksum", f.object)));
            }
        }
        Ok((m, files))
    }

    /// Build the state from checked files, in this run's backend (a checkpoint of the
    /// other backend is read record by record).
    async fn rebuild(
        &self,
        m: &Manifest,
        files: Vec<(FileRef, Vec<u8>)>,
        local_dir: &Path,
    ) -> Result<Box<dyn WindowState>, StateError> {
        let dir = local_dir.to_path_buf();
        let backend = self.backend;
        let (from, size_ms) = (m.backend, m.window_ms);
        tokio::task::spawn_blocking(move || -> Result<Box<dyn WindowState>, StateError> {
            match from {
                #[cfg(not(feature = "lsm"))]
                Backend::Lsm => {
                    let _ = size_ms;
                    Err(StateError::NotBuilt(super::check_built(from).unwrap_err()))
                }
                #[cfg(feature = "lsm")]
                Backend::Lsm => {
                    let restored = write_files(&dir, &files)?;
                    let lsm = LsmState::open_restored(&restored, size_ms)?;
                    match backend {
                        Backend::Lsm => Ok(Box::new(lsm)),
                        Backend::Heap => copy_into(&lsm, Box::new(HeapState::default())),
                    }
                }
                Backend::Heap => {
                    let target = super::open(backend, &dir.join("db"))?;
                    for (_, b) in &files {
                        target.put(&format::read(b)?)?;
                    }
                    Ok(target)
                }
            }
        })
        .await
        .expect("restore does not panic")
    }

    /// Upload a snapshot as checkpoint `next`, write its manifest, and clean up.
    /// `manifest` carries the positions, extras and stats taken with the snapshot.
    pub async fn upload(&mut self, snapshot: Snapshot, mut manifest: Manifest) -> Result<Taken, StateError> {
        let t = Instant::now();
        manifest.id = self.next_id;
        self.next_id += 1;
        manifest.backend = self.backend;
        manifest.kind = self.kind;
        let id = manifest.id;
        let (files, to_send) = self.plan(id, snapshot).await?;
        manifest.uploaded_bytes = to_send.iter().map(|(_, b)| b.len() as u64).sum();
        self.send(to_send).await?;
        crate::crash_point!("state::before_manifest");
        manifest.files = files;
        self.store.put(&Manifest::object(id), manifest.to_bytes()).await?;
        self.known = manifest.files.iter().filter(|f| f.shared).map(|f| (f.name.clone(), f.clone())).collect();
        self.cleanup().await?;
        Ok(Taken { manifest, upload: t.elapsed() })
    }

    /// The checkpoint's file references, and the objects still to upload.
    async fn plan(&self, id: u64, snapshot: Snapshot) -> Result<(Vec<FileRef>, Vec<(String, Vec<u8>)>), StateError> {
        let (kind, lineage, known) = (self.kind, self.lineage.clone(), self.known.clone());
        tokio::task::spawn_blocking(move || {
            let mut refs = Vec::new();
            let mut send = Vec::new();
            let named: Vec<(String, Vec<u8>)> = match snapshot {
                Snapshot::Records(r) => {
                    format::write(&r).into_iter().enumerate().map(|(i, b)| (format!("state-{i:05}.bin"), b)).collect()
                }
                Snapshot::Files(dir) => read_files(&dir)?,
            };
            for (name, bytes) in named {
                let shared = kind == Kind::Incremental && name.ends_with(".sst");
                if let Some(k) = known.get(&name).filter(|k| shared && k.size == bytes.len() as u64) {
                    refs.push(k.clone());
                    continue;
                }
                let object = if shared { format!("shared/{lineage}-{name}") } else { format!("chk-{id:010}/{name}") };
                let crc = crate::checksum::crc32c(&bytes);
                refs.push(FileRef { name, object: object.clone(), size: bytes.len() as u64, crc32c: crc, shared });
                send.push((object, bytes));
            }
            Ok((refs, send))
        })
        .await
        .expect("planning does not panic")
    }

    async fn send(&self, objects: Vec<(String, Vec<u8>)>) -> Result<(), StateError> {
        let half = objects.len() / 2;
        let mut objects = objects;
        let second = objects.split_off(half);
        for (i, batch) in [objects, second].into_iter().enumerate() {
            if i == 1 {
                crate::crash_point!("state::mid_upload");
            }
            stream::iter(batch.into_iter().map(|(name, b)| {
                let store = self.store.clone();
                async move { store.put(&name, b).await }
            }))
            .buffer_unordered(self.parallelism)
            .try_collect::<()>()
            .await?;
        }
        Ok(())
    }

    /// Remove checkpoints older than the [`RETAINED`] newest complete ones (incomplete
    /// ones included), and shared files no retained manifest names.
    async fn cleanup(&self) -> Result<(), StateError> {
        let (ids, _) = self.ids().await?;
        let keep: Vec<u64> = ids.iter().copied().take(RETAINED).collect();
        let mut needed = BTreeSet::new();
        for id in &keep {
            let m = Manifest::from_bytes(&self.store.get(&Manifest::object(*id)).await?)?;
            needed.extend(m.objects());
        }
        let oldest_kept = keep.last().copied().unwrap_or(0);
        let all = self.store.list("").await?;
        let doomed: Vec<String> = all
            .into_iter()
            .filter(|n| match n.strip_prefix("chk-").and_then(|r| r.split('/').next()?.parse::<u64>().ok()) {
                Some(id) => id < oldest_kept,
                None => n.starts_with("shared/") && !needed.contains(n),
            })
            .collect();
        stream::iter(doomed.into_iter().map(|n| {
            let store = self.store.clone();
            async move { store.delete(&n).await }
        }))
        .buffer_unordered(self.parallelism)
        .try_collect::<()>()
        .await?;
        Ok(())
    }
}

/// Every file of a RocksDB checkpoint directory, and the directory removed.
fn read_files(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, StateError> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(StateError::io("list", dir))? {
        let e = e.map_err(StateError::io("list", dir))?;
        let p = e.path();
        let bytes = std::fs::read(&p).map_err(StateError::io("read", &p))?;
        out.push((e.file_name().to_string_lossy().into_owned(), bytes));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    std::fs::remove_dir_all(dir).map_err(StateError::io("remove", dir))?;
    Ok(out)
}

/// Write a RocksDB checkpoint's files into a fresh `dir/db`.
#[cfg(feature = "lsm")]
fn write_files(dir: &Path, files: &[(FileRef, Vec<u8>)]) -> Result<PathBuf, StateError> {
    let db = dir.join("db");
    if db.exists() {
        std::fs::remove_dir_all(&db).map_err(StateError::io("remove", &db))?;
    }
    std::fs::create_dir_all(&db).map_err(StateError::io("mkdir", &db))?;
    for (f, b) in files {
        let p = db.join(&f.name);
        std::fs::write(&p, b).map_err(StateError::io("write", &p))?;
    }
    Ok(db)
}

/// Every record of `from`, put into `to`.
#[cfg(feature = "lsm")]
fn copy_into(from: &dyn WindowState, to: Box<dyn WindowState>) -> Result<Box<dyn WindowState>, StateError> {
    for w in from.windows() {
        for key in from.keys(w) {
            let mut batch: Vec<Record> = Vec::new();
            from.scan(w, key, &mut |partition, offset, v| {
                batch.push((Slot { window: w, key, partition, offset }, bytes::Bytes::copy_from_slice(v)));
            })?;
            to.put(&batch)?;
        }
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::heap::HeapState;
    use crate::state::tests::sample;
    #[cfg(feature = "lsm")]
    use crate::state::Window;
    use crate::store::{local::LocalStore, Store};

    fn store(d: &Path) -> Store {
        Store::Local(LocalStore::open(&d.join("ck")).unwrap())
    }

    async fn take(c: &mut Checkpointer, s: &dyn WindowState, scratch: &Path) -> Taken {
        let snap = s.snapshot(scratch).unwrap();
        let m = Manifest {
            positions: [(0, 7)].into_iter().collect(),
            stats: s.stats().into(),
            window_ms: 1000,
            ..Manifest::default()
        };
        c.upload(snap, m).await.unwrap()
    }

    #[tokio::test]
    async fn heap_full_checkpoints_restore_and_old_ones_are_removed() {
        let d = tempfile::tempdir().unwrap();
        let s = HeapState::default();
        s.put(&sample()).unwrap();
        let mut c = Checkpointer::new(store(d.path()), Backend::Heap, Kind::Full, 4, "a");
        for _ in 0..3 {
            take(&mut c, &s, d.path()).await;
        }
        let names = store(d.path()).list("").await.unwrap();
        assert!(names.iter().all(|n| !n.starts_with("chk-0000000001/")), "checkpoint 1 is past retention: {names:?}");
        let mut c2 = Checkpointer::new(store(d.path()), Backend::Heap, Kind::Full, 4, "b");
        let r = c2.restore(&d.path().join("local")).await.unwrap().expect("a checkpoint");
        assert_eq!(r.manifest.id, 3);
        assert_eq!(r.manifest.positions[&0], 7);
        assert_eq!(r.state.stats().records, 30);
        assert_eq!(c2.next_id, 4);
    }

    #[cfg(feature = "lsm")]
    #[tokio::test]
    async fn incremental_checkpoints_upload_only_new_files_and_share_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let s = LsmState::open_empty(&d.path().join("db")).unwrap();
        let recs = sample();
        s.put(&recs[..15]).unwrap();
        let mut c = Checkpointer::new(store(d.path()), Backend::Lsm, Kind::Incremental, 4, "a");
        let first = take(&mut c, &s, d.path()).await;
        s.put(&recs[15..]).unwrap();
        let second = take(&mut c, &s, d.path()).await;
        let shared1: BTreeSet<_> = first.manifest.files.iter().filter(|f| f.shared).map(|f| &f.object).collect();
        let shared2: BTreeSet<_> = second.manifest.files.iter().filter(|f| f.shared).map(|f| &f.object).collect();
        assert!(!shared1.is_empty() && shared1.is_subset(&shared2), "the first SSTs are referenced again");
        assert!(second.manifest.uploaded_bytes < second.manifest.files.iter().map(|f| f.size).sum::<u64>());
        // Closing a window and checkpointing twice more retires the shared files
        // nobody names any more.
        s.drop_window(Window { start_ms: 0, end_ms: 1000 }).unwrap();
        take(&mut c, &s, d.path()).await;
        take(&mut c, &s, d.path()).await;
        let left = store(d.path()).list("shared/").await.unwrap();
        assert!(left.len() < shared2.len(), "{left:?}");
        let mut c2 = Checkpointer::new(store(d.path()), Backend::Lsm, Kind::Incremental, 4, "b");
        let r = c2.restore(&d.path().join("local")).await.unwrap().unwrap();
        assert_eq!(r.state.stats().records, 10);
    }

    #[cfg(feature = "lsm")]
    #[tokio::test]
    async fn a_corrupt_checkpoint_is_reported_and_the_previous_one_restored() {
        let d = tempfile::tempdir().unwrap();
        let s = LsmState::open_empty(&d.path().join("db")).unwrap();
        s.put(&sample()).unwrap();
        let mut c = Checkpointer::new(store(d.path()), Backend::Lsm, Kind::Full, 4, "a");
        take(&mut c, &s, d.path()).await;
        let newest = take(&mut c, &s, d.path()).await;
        let biggest = newest.manifest.files.iter().max_by_key(|f| f.size).unwrap();
        let victim = d.path().join("ck").join(&biggest.object);
        let mut b = std::fs::read(&victim).unwrap();
        b[0] ^= 0xff;
        std::fs::write(&victim, b).unwrap();
        let mut c2 = Checkpointer::new(store(d.path()), Backend::Heap, Kind::Full, 4, "b");
        let r = c2.restore(&d.path().join("local")).await.unwrap().unwrap();
        assert_eq!(r.manifest.id, 1, "fell back");
        assert_eq!(r.skipped.len(), 1);
        assert!(r.skipped[0].1.contains("checksum"), "{:?}", r.skipped);
        assert_eq!(r.state.backend(), Backend::Heap, "an lsm checkpoint restores into heap record by record");
        assert_eq!(r.state.stats().records, 30);
        // A partial checkpoint (files, no manifest) is not a checkpoint.
        store(d.path()).put("chk-0000000009/000001.sst", b"x".to_vec()).await.unwrap();
        let mut c3 = Checkpointer::new(store(d.path()), Backend::Lsm, Kind::Full, 4, "c");
        assert_eq!(c3.restore(&d.path().join("l3")).await.unwrap().unwrap().manifest.id, 1);
        assert_eq!(c3.next_id, 10, "ids are never reused");
    }
}
