//! A worker's reader: one consumer for the partitions the worker owns (partition `p`
//! of the sorted list on worker `i % N`), placing batches of messages into the open
//! windows. Placing a batch (assigning windows and shards, writing the state backend)
//! runs on the worker's emulated CPU, so it counts as the worker's busy time.
//!
//! Consumer errors (a broker restart, a network blip) are logged, counted
//! (`consumer_errors`) and waited out with [`Backoff::BROKER`]: librdkafka reconnects
//! and fetches again from the same position. A message without a timestamp is windowed
//! by the processing time; one out of bounds as the job's `timestampPolicy` says
//! ([`super::window::TimestampBounds`]).
//!
//! A reader stops when told to, after placing what it holds; the positions it reached
//! are in [`OpenWindows`], so a rescale starts the next readers exactly there.

use super::config::KafkaToGcsConfig;
use super::open_windows::{Msg, OpenWindows};
use crate::kafka::source::Consumer;
use crate::retry::{wait_unless_stopped, Backoff};
use crate::scaling::WorkerSlot;
use anyhow::{Context, Result};
use bytes::Bytes;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
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
        cfg: &Arc<KafkaToGcsConfig>,
        partitions: &[i32],
        slots: &[Arc<WorkerSlot>],
        windows: &Arc<OpenWindows>,
    ) -> Result<Readers> {
        let (stop, _) = watch::channel(false);
        let pos = windows.read_pos();
        let mut tasks = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            let mut mine: BTreeMap<i32, i64> = partitions
                .iter()
                .enumerate()
                .filter(|(j, _)| j % slots.len() == i)
                .filter_map(|(_, p)| pos.get(p).map(|o| (*p, *o)))
                .collect();
            if mine.is_empty() {
                continue;
            }
            crate::kafka::gaps::simulate_cut_log(&mut mine);
            let consumer: Consumer = cfg.source.consumer()?;
            crate::kafka::source::assign(&consumer, &cfg.source.topic, &mine)?;
            let (slot, windows, stop) = (slot.clone(), windows.clone(), stop.subscribe());
            let reader = Reader { consumer, cfg: cfg.clone(), at: mine };
            tasks.push(tokio::spawn(read(reader, slot, windows, stop)));
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

/// One reader's consumer and what it reads.
struct Reader {
    consumer: Consumer,
    cfg: Arc<KafkaToGcsConfig>,
    /// Per partition, the next offset the consumer fetches.
    at: BTreeMap<i32, i64>,
}

impl Reader {
    /// AUTO_OFFSET_RESET: a partition's next offset is no longer stored (the consumers
    /// run with `auto.offset.reset=error`). `offsetGapPolicy` decides
    /// ([`crate::kafka::gaps`]): stop naming it, or go on at the nearest stored offset.
    async fn out_of_range(&mut self, windows: &OpenWindows) -> Result<()> {
        let (job, topic) = (&self.cfg.job_name, &self.cfg.source.topic);
        let parts: Vec<i32> = self.at.keys().copied().collect();
        let marks =
            self.cfg.source.metadata()?.watermarks(&parts).await.context("reading watermarks after an offset reset")?;
        let found = crate::kafka::gaps::check(&self.at, &marks);
        tracing::warn!(positions = ?self.at, ?marks, found = found.len(), "a partition's position is no longer stored (AUTO_OFFSET_RESET)");
        let skipped = crate::kafka::gaps::apply(self.cfg.source.gap_policy, &found, &mut self.at, job, topic)
            .map_err(anyhow::Error::msg)?;
        windows.note_skipped(skipped);
        windows.move_positions(&found.iter().map(|d| (d.partition(), d.resume())).collect());
        crate::kafka::source::assign(&self.consumer, topic, &self.at)
            .context("assigning the reader's partitions again")?;
        Ok(())
    }
}

async fn read(
    mut reader: Reader,
    slot: Arc<WorkerSlot>,
    windows: Arc<OpenWindows>,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let mut batch: Vec<Msg> = Vec::with_capacity(BATCH);
    let mut errors_in_a_row = 0u32;
    loop {
        let deadline = tokio::time::Instant::now() + LINGER;
        let stopping = loop {
            tokio::select! {
                m = reader.consumer.recv() => match m {
                    Ok(m) => {
                        errors_in_a_row = 0;
                        reader.at.insert(m.partition(), m.offset() + 1);
                        let ts_ms = m.timestamp().to_millis().unwrap_or_else(|| chrono::Utc::now().timestamp_millis());
                        batch.push(Msg { partition: m.partition(), offset: m.offset(), ts_ms, value: m.payload().map(Bytes::copy_from_slice) });
                        if batch.len() >= BATCH { break false; }
                    }
                    // A broker restart or a network blip: librdkafka reconnects and
                    // fetches again from where it was, so the reader waits and goes on.
                    Err(KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset)) => {
                        reader.out_of_range(&windows).await?;
                    }
                    Err(e) => {
                        errors_in_a_row += 1;
                        windows.note_consumer_error();
                        crate::retry::note_retry(crate::retry::Service::Broker);
                        let delay = Backoff::BROKER.delay(errors_in_a_row).expect("the broker's errors have no attempt limit");
                        tracing::warn!(worker = slot.id, error = %e, errors_in_a_row, delay_ms = delay.as_millis() as u64, "Kafka consumer error; librdkafka reconnects, the reader waits and goes on");
                        if !wait_unless_stopped(delay, &mut stop).await { break true; }
                        if batch.len() >= BATCH || tokio::time::Instant::now() >= deadline { break false; }
                    }
                },
                _ = tokio::time::sleep_until(deadline) => break false,
                _ = stop.changed() => break true,
            }
        };
        if !batch.is_empty() {
            let bytes = batch.iter().map(|m| m.value.as_ref().map_or(0, |v| v.len() as u64)).sum();
            let n = batch.len() as u64;
            slot.work(n, bytes, || windows.add(&batch)).await.context("placing records in windows")?;
            batch.clear();
        }
        if stopping || *stop.borrow() {
            return Ok(());
        }
    }
}
