//! Object storage for file sinks and checkpoints: a Cloud Storage bucket (`gs://`) over
//! GCS's JSON API, or a local directory (`file://` or a plain path), behind one
//! [`Store`] with the five calls a committer needs: put, get, list, copy and delete.
//!
//! - [`Location`]: parses and checks an output directory (`gs://bucket/dir/`).
//! - [`gcs`]: the bucket, through `gcloud-storage`, pointed at `STORAGE_EMULATOR_HOST`
//!   (anonymous) when it is set, or at Google with Application Default Credentials.
//! - [`local`]: the disk, where "rename" is `rename(2)`, atomic and O(1), as on HDFS.
//!
//! On a bucket, "rename" is a copy and a delete: Cloud Storage has no rename. That is
//! the difference seed 002 measures, and [`Store::rename`] keeps it.

pub mod gcs;
pub mod local;

use thiserror::Error;

/// A failed storage call.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The location is not `gs://bucket/dir/`, `file:///dir/` or a path.
    #[error("{0}")]
    Location(String),
    /// A Cloud Storage call failed.
    #[error("Cloud Storage {op} {object}: {message}")]
    Gcs {
        /// The call.
        op: &'static str,
        /// `gs://bucket/name`.
        object: String,
        /// What the service said.
        message: String,
        /// HTTP status, when there was one.
        status: Option<u16>,
    },
    /// A local file call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// The call.
        op: &'static str,
        /// The file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

impl StoreError {
    /// The object does not exist (404 or ENOENT).
    pub fn is_not_found(&self) -> bool {
        match self {
            StoreError::Gcs { status, .. } => *status == Some(404),
            StoreError::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            StoreError::Location(_) => false,
        }
    }
}

/// Where files go: a bucket and a prefix, or a local directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// `gs://bucket/prefix/` (the prefix ends with `/` or is empty).
    Gcs {
        /// Bucket name.
        bucket: String,
        /// Object-name prefix.
        prefix: String,
    },
    /// A local directory.
    Local(std::path::PathBuf),
}

impl Location {
    /// Parse an output directory. Like Google's template, it must end with `/`.
    ///
    /// ```
    /// use flexrun::store::Location;
    /// assert_eq!(
    ///     Location::parse("gs://b/out/").unwrap(),
    ///     Location::Gcs { bucket: "b".into(), prefix: "out/".into() }
    /// );
    /// assert!(Location::parse("gs://b/out").is_err());
    /// assert!(Location::parse("s3://b/out/").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<Location, StoreError> {
        if !s.ends_with('/') {
            return Err(StoreError::Location(format!("{s:?} must end with '/' (a directory)")));
        }
        if let Some(rest) = s.strip_prefix("gs://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(StoreError::Location(format!("{s:?} names no bucket: expected gs://BUCKET/dir/")));
            }
            return Ok(Location::Gcs { bucket: bucket.into(), prefix: prefix.into() });
        }
        if let Some(path) = s.strip_prefix("file://") {
            return Ok(Location::Local(path.into()));
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(StoreError::Location(format!(
                "{s:?}: unknown scheme {scheme}://, expected gs://BUCKET/dir/, file:///dir/ or a local path"
            )));
        }
        Ok(Location::Local(s.into()))
    }

    /// The same location with `sub` (ending in `/`) appended.
    pub fn join(&self, sub: &str) -> Location {
        match self {
            Location::Gcs { bucket, prefix } => {
                Location::Gcs { bucket: bucket.clone(), prefix: format!("{prefix}{sub}") }
            }
            Location::Local(p) => Location::Local(p.join(sub)),
        }
    }

    /// How the user would write it.
    pub fn url(&self) -> String {
        match self {
            Location::Gcs { bucket, prefix } => format!("gs://{bucket}/{prefix}"),
            Location::Local(p) => format!("{}/", p.display().to_string().trim_end_matches('/')),
        }
    }
}

/// A bucket or a directory, with names relative to its [`Location`].
#[derive(Clone)]
pub enum Store {
    /// Cloud Storage (or its emulator).
    Gcs(gcs::GcsStore),
    /// The local disk.
    Local(local::LocalStore),
}

impl Store {
    /// Open `loc`, checking that it can be written (the bucket exists, the directory
    /// can be created). `endpoint` overrides `STORAGE_EMULATOR_HOST` for `gs://`.
    pub async fn open(loc: &Location, endpoint: Option<&str>) -> Result<Store, StoreError> {
        match loc {
            Location::Gcs { bucket, prefix } => Ok(Store::Gcs(gcs::GcsStore::open(bucket, prefix, endpoint).await?)),
            Location::Local(dir) => Ok(Store::Local(local::LocalStore::open(dir)?)),
        }
    }

    /// Write `name` with `data`, replacing it if it exists.
    pub async fn put(&self, name: &str, data: Vec<u8>) -> Result<(), StoreError> {
        match self {
            Store::Gcs(s) => s.put(name, data).await,
            Store::Local(s) => s.put(name, data).await,
        }
    }

    /// Read `name`.
    pub async fn get(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        match self {
            Store::Gcs(s) => s.get(name).await,
            Store::Local(s) => s.get(name).await,
        }
    }

    /// Names under `prefix`, sorted.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        match self {
            Store::Gcs(s) => s.list(prefix).await,
            Store::Local(s) => s.list(prefix).await,
        }
    }

    /// Move `from` to `to`, replacing `to`: a copy and a delete on a bucket, one
    /// `rename(2)` on disk. A retry after a crash finds `from` gone and `to` there,
    /// and succeeds.
    pub async fn rename(&self, from: &str, to: &str) -> Result<(), StoreError> {
        match self {
            Store::Gcs(s) => s.rename(from, to).await,
            Store::Local(s) => s.rename(from, to).await,
        }
    }

    /// Remove `name`; a name that is already gone is not an error.
    pub async fn delete(&self, name: &str) -> Result<(), StoreError> {
        match self {
            Store::Gcs(s) => s.delete(name).await,
            Store::Local(s) => s.delete(name).await,
        }
    }

    /// Where names resolve.
    pub fn url(&self, name: &str) -> String {
        match self {
            Store::Gcs(s) => s.url(name),
            Store::Local(s) => s.path(name).display().to_string(),
        }
    }
}
