//! A local directory as a store: names are relative paths, "rename" is `rename(2)`,
//! and writes go to a temporary name first, then are renamed and synced, so a crash
//! never leaves a partial file under a real name.

use super::StoreError;
use std::path::{Path, PathBuf};

/// A directory.
#[derive(Clone, Debug)]
pub struct LocalStore {
    root: PathBuf,
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io { op, path: path.display().to_string(), source }
}

impl LocalStore {
    /// Create `root` if needed and check it can be written.
    pub fn open(root: &Path) -> Result<LocalStore, StoreError> {
        std::fs::create_dir_all(root)
            .map_err(|e| StoreError::Location(format!("{}: cannot create the directory: {e}", root.display())))?;
        let probe = root.join(".flexrun-write-check");
        std::fs::write(&probe, b"")
            .map_err(|e| StoreError::Location(format!("{}: cannot write there: {e}", root.display())))?;
        let _ = std::fs::remove_file(probe);
        Ok(LocalStore { root: root.to_path_buf() })
    }

    /// The file for `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Write `name` atomically (temporary file, fsync, rename).
    pub async fn put(&self, name: &str, data: Vec<u8>) -> Result<(), StoreError> {
        let path = self.path(name);
        tokio::task::spawn_blocking(move || {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(io("mkdir", dir))?;
            }
            let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
            {
                use std::io::Write;
                let mut f = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
                f.write_all(&data).map_err(io("write", &tmp))?;
                f.sync_all().map_err(io("fsync", &tmp))?;
            }
            std::fs::rename(&tmp, &path).map_err(io("rename", &tmp))
        })
        .await
        .expect("the write task does not panic")
    }

    /// Read `name`.
    pub async fn get(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        let path = self.path(name);
        tokio::fs::read(&path).await.map_err(io("read", &path))
    }

    /// Files under `prefix` (names relative to the root, `/`-separated), sorted.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let root = self.root.clone();
        let prefix = prefix.to_string();
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            walk(&root, &root, &mut out)?;
            out.retain(|n| n.starts_with(&prefix) && !n.ends_with(".flexrun-write-check"));
            out.sort();
            Ok(out)
        })
        .await
        .expect("the list task does not panic")
    }

    /// `rename(2)`, creating the target's directory; a retry that finds `from` gone
    /// and `to` present succeeds.
    pub async fn rename(&self, from: &str, to: &str) -> Result<(), StoreError> {
        let (a, b) = (self.path(from), self.path(to));
        if let Some(dir) = b.parent() {
            tokio::fs::create_dir_all(dir).await.map_err(io("mkdir", dir))?;
        }
        match tokio::fs::rename(&a, &b).await {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && b.exists() => Ok(()),
            r => r.map_err(io("rename", &a)),
        }
    }

    /// Remove `name` (and its directory if that empties it is left to [`LocalStore::list`]'s callers).
    pub async fn delete(&self, name: &str) -> Result<(), StoreError> {
        let path = self.path(name);
        match tokio::fs::remove_file(&path).await {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r.map_err(io("delete", &path)),
        }
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), StoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io("list", dir)(e)),
    };
    for e in entries {
        let e = e.map_err(io("list", dir))?;
        let p = e.path();
        if p.is_dir() {
            walk(root, &p, out)?;
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}
