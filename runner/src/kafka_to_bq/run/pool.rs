//! The live worker pool: shards assigned to workers, moved when the count changes.
//!
//! Shard `k` (in the order of the job's shard list) runs on worker `k % workers`. In a
//! job of several topics the workers are the job's ([`Workers::Shared`]): the topic's
//! shards follow those of the topics that joined before it, so shard `k` runs on worker
//! `(offset + k) % workers`, and a worker's CPU is shared by every topic's shards on it.
//! A move follows the rule for exactly-once across a rescale: the old owner is told
//! to stop, finishes its open batch through the commit log and exits; only then does
//! the new owner open the shard, which starts with recovery from the shard's logs.

use super::shard::{is_interrupted, Shard};
use crate::kafka::shared::SharedConsumer;
use crate::kafka_to_bq::context::JobCtx;
use crate::scaling::{Capacity, SharedWorkers, WorkerSlot};
use anyhow::{Context, Result};
use flexrun_autoscaler::WorkerMetrics;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

struct Running {
    worker: u32,
    stop: watch::Sender<bool>,
    handle: JoinHandle<Result<()>>,
}

/// Whose workers a pool's shards run on.
pub enum Workers {
    /// The pool's own (a job of one topic), each with this emulated capacity.
    Own(Option<Capacity>),
    /// The job's, shared with its other topics; this topic's shards come after
    /// `offset` shards of theirs.
    Shared {
        /// The job's workers.
        pool: Arc<SharedWorkers>,
        /// The job's shards before this topic's first.
        offset: usize,
    },
}

impl Workers {
    fn slot(&self, id: u32) -> Arc<WorkerSlot> {
        match self {
            Workers::Own(capacity) => Arc::new(WorkerSlot::new(id, *capacity)),
            Workers::Shared { pool, .. } => pool.slot(id),
        }
    }

    fn offset(&self) -> usize {
        match self {
            Workers::Own(_) => 0,
            Workers::Shared { offset, .. } => *offset,
        }
    }
}

/// Workers and the shards they run.
pub struct Pool {
    ctx: Arc<JobCtx>,
    shards: Vec<(usize, Vec<i32>)>,
    /// Each worker, and the one consumer its shards read through.
    workers: Vec<(Arc<WorkerSlot>, Arc<SharedConsumer>)>,
    running: BTreeMap<usize, Running>,
    source: Workers,
    /// The job's shard count (fixed in its checkpoint).
    shard_count: usize,
}

impl Pool {
    /// A pool for these shards (id and partitions) out of `shard_count`; nothing
    /// runs until [`Pool::resize`].
    pub fn new(ctx: Arc<JobCtx>, shards: Vec<(usize, Vec<i32>)>, shard_count: usize, source: Workers) -> Pool {
        Pool { ctx, shards, workers: Vec::new(), running: BTreeMap::new(), source, shard_count }
    }

    /// The worker of the shard at position `pos` among `n` workers.
    fn worker_of(&self, pos: usize, n: usize) -> usize {
        (self.source.offset() + pos) % n
    }

    /// The number of workers.
    pub fn workers(&self) -> u32 {
        self.workers.len() as u32
    }

    /// The most workers that can have a shard.
    pub fn max_parallelism(&self) -> u32 {
        self.shards.len() as u32
    }

    fn spawn(&mut self, pos: usize) {
        let n = self.workers.len();
        let (id, parts) = self.shards[pos].clone();
        let (slot, consumer) = self.workers[self.worker_of(pos, n)].clone();
        let (stop, stop_rx) = watch::channel(false);
        let ctx = self.ctx.clone();
        let worker = slot.id;
        let handle = tokio::spawn(async move {
            let shard = match Shard::open(id, ctx, parts, (slot, consumer), stop_rx).await {
                // A drain or a move while the replay of a logged batch waited out a
                // BigQuery outage: the batch stays logged, and the next owner replays it.
                Err(e) if is_interrupted(&e) => {
                    tracing::warn!(shard = id, error = %e, "stopped while replaying a logged batch during a BigQuery outage: it stays logged, and the next owner replays it");
                    return Ok(());
                }
                r => r?,
            };
            shard.run().await.with_context(|| format!("shard {id}"))
        });
        self.running.insert(id, Running { worker, stop, handle });
    }

    /// Run with `n` workers: start shards that are not running, and move those whose
    /// worker changes (stop, wait for their commit, reopen on the new worker).
    pub async fn resize(&mut self, n: u32) -> Result<()> {
        let n = n.max(1) as usize;
        while self.workers.len() < n {
            let id = self.workers.len() as u32;
            let consumer = SharedConsumer::new(&self.ctx.cfg.source, id, &self.ctx.shares.consumer_settings())?;
            self.workers.push((self.source.slot(id), consumer));
        }
        self.workers.truncate(n);
        let moving: Vec<usize> = (0..self.shards.len())
            .filter(|pos| {
                self.running.get(&self.shards[*pos].0).is_some_and(|r| r.worker as usize != self.worker_of(*pos, n))
            })
            .collect();
        let mut stopped = Vec::new();
        for pos in &moving {
            if let Some(r) = self.running.remove(&self.shards[*pos].0) {
                r.stop.send_replace(true);
                stopped.push(r.handle);
            }
        }
        for h in stopped {
            h.await.context("shard task")??;
        }
        for pos in 0..self.shards.len() {
            if !self.running.contains_key(&self.shards[pos].0) {
                self.spawn(pos);
            }
        }
        Ok(())
    }

    /// Give new partitions to their shards (`p % shard count`) and restart those
    /// shards so they read them: each finishes its open batch first.
    pub async fn add_partitions(&mut self, new: &[i32]) -> Result<()> {
        let n = self.shard_count;
        let mut touched = Vec::new();
        for p in new {
            let id = (*p as usize) % n;
            match self.shards.iter().position(|(s, _)| *s == id) {
                Some(pos) => self.shards[pos].1.push(*p),
                None => self.shards.push((id, vec![*p])),
            }
            touched.push(id);
        }
        touched.sort_unstable();
        touched.dedup();
        for id in touched {
            if let Some(r) = self.running.remove(&id) {
                r.stop.send_replace(true);
                r.handle.await.context("shard task")??;
            }
            let pos = self.shards.iter().position(|(s, _)| *s == id).expect("added above");
            if !self.workers.is_empty() {
                self.spawn(pos);
            }
        }
        Ok(())
    }

    /// The workers' counters for the window that just ended.
    pub fn window(&self) -> Vec<WorkerMetrics> {
        self.workers.iter().map(|(w, _)| w.take_window()).collect()
    }

    /// The first failure of a shard that has ended on its own, if any.
    pub async fn reap(&mut self) -> Option<anyhow::Error> {
        let done: Vec<usize> = self.running.iter().filter(|(_, r)| r.handle.is_finished()).map(|(id, _)| *id).collect();
        for id in done {
            let r = self.running.remove(&id).expect("listed above");
            match r.handle.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Some(e),
                Err(e) => return Some(anyhow::Error::from(e).context(format!("shard {id} panicked"))),
            }
        }
        None
    }

    /// Stop every shard (each finishes its open batch) and return the first failure.
    pub async fn stop_all(&mut self) -> Result<()> {
        for r in self.running.values() {
            r.stop.send_replace(true);
        }
        let mut first = None;
        for (_, r) in std::mem::take(&mut self.running) {
            match r.handle.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first.get_or_insert(e);
                }
                Err(e) => {
                    first.get_or_insert(anyhow::Error::from(e));
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}
