//! The parallel committer: stage a window's files, publish them, clean up.
//!
//! Seed 002's finding: Spark's driver ran commitJob's "rename" loops one file at a
//! time, and on an object store a rename is a copy plus a delete, so the commit took
//! 29 times as long as on HDFS. Here every step runs `parallelism` requests at once
//! (`--commit-parallelism`; 1 is the serial baseline):
//! 1. [`Committer::stage`]: upload each file under `_temporary/<job>/<window>/<attempt>/`.
//! 2. [`Committer::publish`]: remove files of the same window that an earlier run left
//!    under other names (the seed's trash step), then rename each staged file to its
//!    final name (copy + delete on a bucket, `rename(2)` on disk).
//! 3. [`Committer::sweep`]: at start, remove this job's staging objects no decided window names.

use super::log::FilePlan;
use crate::store::{Store, StoreError};
use futures::{stream, StreamExt, TryStreamExt};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The directory staging objects live under, relative to the output directory.
pub const STAGING: &str = "_temporary/";

/// Where job `job` stages its files: `_temporary/<job>/`. Every sweep stays inside it,
/// so two jobs sharing an output directory never delete each other's staged files.
///
/// ```
/// assert_eq!(flexrun::kafka_to_gcs::committer::staging_prefix("j1"), "_temporary/j1/");
/// ```
pub fn staging_prefix(job: &str) -> String {
    format!("{STAGING}{job}/")
}

/// Stages, publishes and sweeps with `parallelism` requests in flight.
#[derive(Clone)]
pub struct Committer {
    /// The output directory.
    pub store: Store,
    /// Requests in flight.
    pub parallelism: usize,
    /// This job's staging prefix ([`staging_prefix`]): what [`Committer::sweep`] clears.
    pub staging: String,
}

/// How long each phase of one window's commit took.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct CommitTimes {
    /// Uploading the staged files.
    pub stage: Duration,
    /// Trash + renames.
    pub publish: Duration,
    /// Files published.
    pub files: usize,
    /// Earlier files of the window removed.
    pub trashed: usize,
}

impl Committer {
    /// Upload `files` (staged name, bytes).
    pub async fn stage(&self, files: Vec<(String, Vec<u8>)>) -> Result<Duration, StoreError> {
        let t = Instant::now();
        stream::iter(files.into_iter().map(|(name, data)| {
            let store = self.store.clone();
            async move { store.put(&name, data).await }
        }))
        .buffer_unordered(self.parallelism.max(1))
        .try_collect::<()>()
        .await?;
        Ok(t.elapsed())
    }

    /// Publish `files`, first removing any other file under the window's `prefixes`.
    pub async fn publish(&self, prefixes: &[String], files: &[FilePlan]) -> Result<CommitTimes, StoreError> {
        let t = Instant::now();
        let finals: BTreeSet<&str> = files.iter().map(|f| f.final_name.as_str()).collect();
        let mut stale = Vec::new();
        for prefix in prefixes {
            stale.extend(self.store.list(prefix).await?.into_iter().filter(|n| !finals.contains(n.as_str())));
        }
        self.each(stale.clone(), |store, name| async move { store.delete(&name).await }).await?;
        crate::crash_point!("gcs::mid_publish_before");
        let pairs: Vec<(String, String)> = files.iter().map(|f| (f.staged.clone(), f.final_name.clone())).collect();
        let half = pairs.len() / 2;
        let (first, second) = pairs.split_at(half);
        self.each(first.to_vec(), |store, (a, b)| async move { store.rename(&a, &b).await }).await?;
        crate::crash_point!("gcs::mid_publish");
        self.each(second.to_vec(), |store, (a, b)| async move { store.rename(&a, &b).await }).await?;
        Ok(CommitTimes { stage: Duration::ZERO, publish: t.elapsed(), files: files.len(), trashed: stale.len() })
    }

    /// Remove every object under this job's staging prefix that is not in `keep`.
    pub async fn sweep(&self, keep: &BTreeSet<String>) -> Result<usize, StoreError> {
        let orphans: Vec<String> =
            self.store.list(&self.staging).await?.into_iter().filter(|n| !keep.contains(n)).collect();
        let n = orphans.len();
        self.each(orphans, |store, name| async move { store.delete(&name).await }).await?;
        Ok(n)
    }

    async fn each<T, F, Fut>(&self, items: Vec<T>, f: F) -> Result<(), StoreError>
    where
        F: Fn(Store, T) -> Fut,
        Fut: std::future::Future<Output = Result<(), StoreError>>,
    {
        stream::iter(items.into_iter().map(|i| f(self.store.clone(), i)))
            .buffer_unordered(self.parallelism.max(1))
            .try_collect::<()>()
            .await
    }
}
