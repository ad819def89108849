//! A worker's reader: one consumer for the partitions the worker owns (partition `p`
//! of the sorted list on worker `i % N`), placing batches of messages into the open
//! windows. Placing a batch (assigning windows and shards, writing the state backend)
//! runs on the worker's emulated CPU, so it counts as the worker's busy time.
//!
//! A reader stops when told to, after placing what it holds; the positions it reached
//! are in [`OpenWindows`], so a rescale starts the next readers exactly there.

use super::windows::{Msg, OpenWindows};
use crate::kafka::SourceSettings;
use crate::scaling::WorkerSlot;
use anyhow::{Context, Result};
use bytes::Bytes;
use rdkafka::consumer::StreamConsumer;
use rdkafka::Message;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Messages a reader places at once, at most: small enough that state (and, with an
/// emulated capacity, the worker's busy time) grows smoothly rather than in lumps.
const BATCH: usize = 200;
/// How long a reader holds a partial batch.
const LINGER: Duration = Duration::from_millis(20);

/// The running readers.
pub struct Readers {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<Result<()>>>,
}

impl Readers {
    /// Start one reader per worker slot over `partitions`, each from its position in
    /// `windows`.
    pub fn start(
        source: &SourceSettings,
        partitions: &[i32],
        slots: &[Arc<WorkerSlot>],
        windows: &Arc<OpenWindows>,
    ) -> Result<Readers> {
        let (stop, _) = watch::channel(false);
        let pos = windows.read_pos();
        let mut tasks = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            let mine: BTreeMap<i32, i64> = partitions
                .iter()
                .enumerate()
                .filter(|(j, _)| j % slots.len() == i)
                .filter_map(|(_, p)| pos.get(p).map(|o| (*p, *o)))
                .collect();
            if mine.is_empty() {
                continue;
            }
            let consumer: StreamConsumer = source.consumer()?;
            crate::kafka::source::assign(&consumer, &source.topic, &mine)?;
            let (slot, windows, stop) = (slot.clone(), windows.clone(), stop.subscribe());
            tasks.push(tokio::spawn(read(consumer, slot, windows, stop)));
        }
        Ok(Readers { stop, tasks })
    }

    /// A reader that failed, if one has (the job stops with its error).
    pub async fn check(&mut self) -> Result<()> {
        for t in &mut self.tasks {
            if t.is_finished() {
                return t.await.context("a reader panicked")?;
            }
        }
        Ok(())
    }

    /// Stop every reader after it places what it holds.
    pub async fn stop(self) -> Result<()> {
        let _ = self.stop.send(true);
        for t in self.tasks {
            t.await.context("a reader panicked")??;
        }
        Ok(())
    }
}

async fn read(
    consumer: StreamConsumer,
    slot: Arc<WorkerSlot>,
    windows: Arc<OpenWindows>,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let mut batch: Vec<Msg> = Vec::with_capacity(BATCH);
    loop {
        let deadline = tokio::time::Instant::now() + LINGER;
        let stopping = loop {
            tokio::select! {
                m = consumer.recv() => {
                    let m = m.context("reading from Kafka")?;
                    let ts_ms = m.timestamp().to_millis().unwrap_or_else(|| chrono::Utc::now().timestamp_millis());
                    batch.push(Msg { partition: m.partition(), offset: m.offset(), ts_ms, value: m.payload().map(Bytes::copy_from_slice) });
                    if batch.len() >= BATCH { break false; }
                }
                _ = tokio::time::sleep_until(deadline) => break false,
                _ = stop.changed() => break true,
            }
        };
        if !batch.is_empty() {
            let bytes = batch.iter().map(|m| m.value.as_ref().map_or(0, |v| v.len() as u64)).sum();
            let n = batch.len() as u64;
            slot.work(n, bytes, || windows.add(&batch)).await.context("writing window state")?;
            batch.clear();
        }
        if stopping || *stop.borrow() {
            return Ok(());
        }
    }
}
