//! The workers, sized by the autoscaler. Worker `i` of `N`:
//! - **reads** partitions `i, i + N, …` of the sorted partition list ([`super::reader`]);
//! - **renders** shard `s` of each closing window when `s % N == i`. Beam's sharded
//!   write (`WriteFiles` with a fixed `numShards`, which Google's template sets) keys
//!   each record by a shard number and groups by it, so a shard's file is written by
//!   the worker that owns that key.
//!
//! Window state is the job's one backend, shared by every worker, as Flink's key
//! groups are: a rescale moves partitions and shards between workers, never state.
//! Both kinds of work run on the worker's emulated CPU ([`WorkerSlot`]), so its busy
//! time is what the autoscaler's CPU target reads.

use super::committer::staging_prefix;
use super::config::{KafkaToGcsConfig, OutputFormat};
use super::encode::{encode, Destination, Rec};
use super::log::FilePlan;
use super::open_windows::OpenWindows;
use super::reader::Readers;
use super::window::{avro_file_name, avro_window_prefix, file_name, window_prefix, Window};
use crate::scaling::{Capacity, WorkerSlot};
use anyhow::{Context, Result};
use flexrun_autoscaler::WorkerMetrics;
use std::collections::BTreeSet;
use std::sync::Arc;

/// A window's files with their bytes, and the prefixes an earlier run's files of the
/// same window would have (the trash step's targets).
pub type Rendered = (Vec<(FilePlan, Vec<u8>)>, BTreeSet<String>);

/// The workers and their readers.
pub struct Workers {
    slots: Vec<Arc<WorkerSlot>>,
    capacity: Option<Capacity>,
    readers: Option<Readers>,
    cfg: Arc<KafkaToGcsConfig>,
    partitions: Vec<i32>,
    windows: Arc<OpenWindows>,
}

impl Workers {
    /// `n` workers (at least one) reading `partitions` into `windows`.
    pub fn start(
        n: u32,
        cfg: Arc<KafkaToGcsConfig>,
        capacity: Option<Capacity>,
        partitions: Vec<i32>,
        windows: Arc<OpenWindows>,
    ) -> Result<Workers> {
        let mut w = Workers { slots: Vec::new(), capacity, readers: None, cfg, partitions, windows };
        w.set_slots(n);
        w.readers = Some(Readers::start(&w.cfg, &w.partitions, &w.slots, &w.windows)?);
        Ok(w)
    }

    fn set_slots(&mut self, n: u32) {
        let n = n.max(1) as usize;
        while self.slots.len() < n {
            self.slots.push(Arc::new(WorkerSlot::new(self.slots.len() as u32, self.capacity)));
        }
        self.slots.truncate(n);
    }

    /// Run on `n` workers: the readers stop where they are and new ones start there.
    pub async fn resize(&mut self, n: u32) -> Result<()> {
        if let Some(r) = self.readers.take() {
            r.stop().await?;
        }
        self.set_slots(n);
        self.readers = Some(Readers::start(&self.cfg, &self.partitions, &self.slots, &self.windows)?);
        Ok(())
    }

    /// Read partitions found since the start too (they begin at their first position).
    pub async fn add_partitions(&mut self, new: &[i32]) -> Result<()> {
        self.partitions.extend_from_slice(new);
        self.partitions.sort_unstable();
        self.resize(self.workers()).await
    }

    /// Stop reading (drain).
    pub async fn stop_reading(&mut self) -> Result<()> {
        match self.readers.take() {
            Some(r) => r.stop().await,
            None => Ok(()),
        }
    }

    /// A reader's error, if one failed.
    pub async fn check(&mut self) -> Result<()> {
        match &mut self.readers {
            Some(r) => r.check().await,
            None => Ok(()),
        }
    }

    /// The number of workers.
    pub fn workers(&self) -> u32 {
        self.slots.len() as u32
    }

    /// The workers' counters since the last call.
    pub fn window(&self) -> Vec<WorkerMetrics> {
        self.slots.iter().map(|w| w.take_window()).collect()
    }

    /// Render window `w`: each shard's records in (partition, offset) order (so a
    /// replay renders identical bytes), every shard on its worker, the workers in
    /// parallel.
    pub async fn render(&self, w: Window, attempt: &str) -> Result<Rendered> {
        let mut tasks = Vec::new();
        for shard in self.windows.keys(w) {
            let slot = self.slots[shard as usize % self.slots.len()].clone();
            let (cfg, windows) = (self.cfg.clone(), self.windows.clone());
            tasks.push(tokio::spawn(async move {
                let recs: Vec<Rec> = windows
                    .records(w, shard)?
                    .into_iter()
                    .map(|(partition, offset, value)| Rec { partition, offset, value })
                    .collect();
                if let Some(d) = cfg.format.decoder() {
                    d.prefetch(recs.iter().map(|r| r.value.as_slice())).await;
                }
                let (n, bytes) = (recs.len() as u64, recs.iter().map(|r| r.value.len() as u64).sum());
                let files = slot.work(n, bytes, || encode(&cfg.format, &recs)).await;
                anyhow::Ok((shard, n, files))
            }));
        }
        let mut files = Vec::new();
        let mut prefixes = BTreeSet::new();
        for t in tasks {
            let (shard, n, encoded) = t.await.context("a render worker panicked")??;
            for (dest, data) in encoded.context("an undecodable message stops the job")? {
                let (final_name, prefix) = names(&self.cfg, &w, shard, &dest);
                prefixes.insert(prefix);
                let staged = format!("{}{}/{attempt}/{final_name}", staging_prefix(&self.cfg.job_name), w.label());
                files.push((FilePlan { staged, final_name, records: n }, data));
            }
        }
        Ok((files, prefixes))
    }
}

/// A file's final name and the prefix all shards of its window (and schema) share.
fn names(cfg: &KafkaToGcsConfig, w: &Window, shard: u32, dest: &Destination) -> (String, String) {
    match cfg.format {
        OutputFormat::Json => (file_name(&cfg.prefix, w, shard, cfg.shards, ".json"), window_prefix(&cfg.prefix, w)),
        OutputFormat::Avro(_) => (
            avro_file_name(&cfg.prefix, &dest.schema_name, &dest.md5, w, shard, cfg.shards, ".avro"),
            avro_window_prefix(&cfg.prefix, &dest.schema_name, &dest.md5, w),
        ),
        OutputFormat::Parquet(_) => (
            avro_file_name(&cfg.prefix, &dest.schema_name, &dest.md5, w, shard, cfg.shards, ".parquet"),
            avro_window_prefix(&cfg.prefix, &dest.schema_name, &dest.md5, w),
        ),
    }
}
