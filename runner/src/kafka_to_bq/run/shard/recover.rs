//! A shard's start: its logs opened and recovered, an uncommitted batch re-read from
//! exactly its logged ranges and finished at its logged row offsets, and the write
//! targets moved where the configuration now points. The steady loop that follows is
//! in [`super`].

use super::{Shard, BURST};
use crate::bigquery::target::RetryCtl;
use crate::kafka::shared::SharedConsumer;
use crate::kafka_to_bq::context::JobCtx;
use crate::kafka_to_bq::run::batch::{Cut, RowPool};
use crate::kafka_to_bq::run::records::Records;
use crate::kafka_to_bq::run::writer::{new_stream, open_writer, BqWriter, Writer};
use crate::kafka_to_bq::setup::config::Delivery;
use crate::progress::{AsyncProgress, OffsetEntry, Recovery, ShardLog};
use crate::scaling::WorkerSlot;
use crate::stats::StageSamples;
use anyhow::{bail, Result};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a replay waits for the next message of its logged ranges.
const REPLAY_WAIT: Duration = Duration::from_secs(30);

/// Where a replay starts reading: the first offset of each logged range.
fn replay_start(e: &OffsetEntry) -> BTreeMap<i32, i64> {
    e.ranges.iter().map(|(p, (a, _))| (*p, *a)).collect()
}

impl Shard {
    /// Open the shard's logs, recover, and get its streams ready. `stop` ends a
    /// retry wait (a drain or a move).
    pub async fn open(
        id: usize,
        ctx: Arc<JobCtx>,
        partitions: Vec<i32>,
        (slot, consumer): (Arc<WorkerSlot>, Arc<SharedConsumer>),
        stop: watch::Receiver<bool>,
    ) -> Result<Shard> {
        let dir = ctx.job_dir.join(format!("shard-{id:03}"));
        let mut log = ShardLog::open_with(&dir, ctx.cfg.run.progress.purge)?;
        if ctx.cfg.delivery == Delivery::ExactlyOnce {
            // A lost commit entry costs a replay that BigQuery answers ALREADY_EXISTS.
            log = log.with_commits_synced_on_rotation();
        }
        let recovery = log.recover()?;
        let mut positions: BTreeMap<i32, i64> = partitions.iter().map(|p| (*p, ctx.start_position(*p))).collect();
        let (last, replay, next_batch) = match &recovery {
            Recovery::Fresh => (None, None, 1),
            Recovery::Clean { last, commit } => {
                positions.extend(commit.positions.iter().filter(|(p, _)| partitions.contains(p)));
                (last.clone(), None, commit.batch + 1)
            }
            Recovery::Replay(e) => {
                positions.extend(e.positions.iter().filter(|(p, _)| partitions.contains(p)));
                (Some(e.clone()), Some(e.clone()), e.batch)
            }
        };
        // Offsets retention deleted, or a position past a log's end, were judged once
        // at job start (offsetGapPolicy); a shard resumes where that left them.
        for (p, pos) in positions.iter_mut() {
            *pos = ctx.resume_position(*p, *pos);
        }
        crate::kafka::gaps::simulate_cut_log(&mut positions);
        if ctx.cfg.delivery == Delivery::AtLeastOnce && ctx.write_client.is_some() {
            let n = crate::kafka_to_bq::run::sent::possibly_resent(&dir, &positions);
            match (n, &ctx.cfg.cdc) {
                (0, _) => {}
                // A change applied twice by key, with its sequence number, leaves the same row.
                (n, Some(_)) => tracing::warn!(
                    shard = id,
                    changes = n,
                    "CDC: changes sent after the last commit are read again and applied again by key; each key's final state is unchanged"
                ),
                (n, None) => {
                    tracing::warn!(
                        shard = id,
                        messages = n,
                        "at-least-once: messages sent after the last commit are read again and may be written twice"
                    );
                    ctx.stats.note(|r| r.messages_possibly_duplicated += n);
                }
            }
        }
        let retry = RetryCtl { stop, stats: ctx.stats.clone() };
        // A replay reads its logged ranges first; otherwise reading starts at the positions.
        let reader = match &replay {
            Some(e) => consumer.take(&replay_start(e))?,
            None => consumer.take(&positions)?,
        };
        let writer = open_writer(&ctx, id, last.as_ref(), replay.is_some(), &mut retry.clone()).await?;
        let (log, progress) = if ctx.cfg.run.progress.async_progress && ctx.cfg.delivery == Delivery::AtLeastOnce {
            (None, Some(AsyncProgress::start(log, ctx.cfg.run.progress.interval)))
        } else {
            (Some(log), None)
        };
        let mut shard = Shard {
            id,
            ctx,
            log,
            progress,
            reader,
            positions,
            next_batch,
            writer,
            stages: StageSamples::default(),
            slot,
            retry,
            spare: Records::default(),
            spare_rows: RowPool::default(),
        };
        if let Some(e) = replay {
            shard.replay(e).await?;
            shard.retarget_after_replay().await?;
            shard.reader.assign(&shard.positions)?;
        }
        tracing::info!(shard = id, worker = shard.slot.id, partitions = ?partitions, next_batch = shard.next_batch, "shard ready");
        Ok(shard)
    }

    /// Re-read exactly the logged ranges of an uncommitted batch and finish it at its
    /// logged row offsets.
    async fn replay(&mut self, e: OffsetEntry) -> Result<()> {
        tracing::warn!(shard = self.id, batch = e.batch, ranges = ?e.ranges, "replaying a batch that was logged but not committed");
        let topic = self.ctx.cfg.source.topic.clone();
        for (p, (a, _)) in &e.ranges {
            let floor = self.ctx.retention_floor(*p);
            if *a < floor {
                bail!(
                    "job {} shard {}: the uncommitted batch {} needs {topic}/{p} from offset {a}, but retention deleted everything below {floor}; it cannot be replayed, so exactly-once cannot be kept for it. Move the job's checkpoint aside to start over",
                    self.ctx.cfg.job_name, self.id, e.batch
                );
            }
        }
        let mut pending: BTreeMap<i32, i64> =
            e.ranges.iter().filter(|(_, (a, b))| b > a).map(|(p, (_, b))| (*p, *b)).collect();
        let mut msgs = std::mem::take(&mut self.spare);
        let mut errors_in_a_row = 0;
        let mut last_message = Instant::now();
        while !pending.is_empty() {
            let mut errors = Vec::new();
            let reader = &self.reader;
            let n = reader.take_ready(BURST, |m| {
                if let Some(e) = m.view().error() {
                    return errors.push(e);
                }
                let (p, o) = (m.view().partition(), m.view().offset());
                if let Some(end) = pending.get(&p).copied() {
                    if o < end {
                        msgs.push_held(&topic, m, reader.consumer());
                    }
                    if o + 1 >= end {
                        pending.remove(&p);
                    }
                }
            });
            if n > errors.len() {
                (errors_in_a_row, last_message) = (0, Instant::now());
            }
            for err in errors {
                if matches!(err, KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset)) {
                    bail!(
                        "job {} shard {}: the uncommitted batch {} needs {topic} ranges {:?} that the broker no longer holds; it cannot be replayed, so exactly-once cannot be kept for it. Move the job's checkpoint aside to start over",
                        self.ctx.cfg.job_name, self.id, e.batch, pending
                    );
                }
                // A broker restart mid-replay: librdkafka reconnects and fetches again.
                errors_in_a_row += 1;
                crate::retry::note_retry(crate::retry::Service::Broker);
                let delay = crate::retry::Backoff::BROKER.delay(errors_in_a_row).expect("no attempt limit");
                tracing::warn!(shard = self.id, batch = e.batch, error = %err, "Kafka consumer error during a replay; waiting and reading on");
                tokio::time::sleep(delay).await;
            }
            if n == 0 && !pending.is_empty() {
                if last_message.elapsed() > REPLAY_WAIT {
                    bail!("shard {}: replaying batch {}: Kafka did not return the logged ranges {:?} within {REPLAY_WAIT:?} (deleted by retention?)", self.id, e.batch, pending);
                }
                self.reader.wait(Duration::from_millis(200)).await;
            }
        }
        crate::crash_point!("eo::replay_before_append");
        let cut = Cut { msgs, ranges: e.ranges.clone(), positions: e.positions.clone(), processed_ms: e.processed_ms };
        self.process(e.batch, cut, Some(&e)).await
    }

    /// After a replay finished on the logged streams, move a target whose table is no
    /// longer the configured one (a changed `outputDeadletterTable`) to a new stream
    /// on the configured table.
    async fn retarget_after_replay(&mut self) -> Result<()> {
        let Writer::Bq(bq) = &mut self.writer else { return Ok(()) };
        let BqWriter { client, dlq, .. } = bq.as_mut();
        match (&self.ctx.cfg.dlq, dlq.as_mut()) {
            (Some(want), Some(d)) if d.table != *want => {
                let stream = new_stream(client, want, &mut self.retry).await?;
                tracing::info!(shard = self.id, from = %d.table, to = %want, %stream, "the dead-letter table changed: new batches go to a new stream on it");
                d.table = want.clone();
                d.replace_stream(stream);
            }
            (None, Some(_)) => *dlq = None,
            _ => {}
        }
        Ok(())
    }
}
