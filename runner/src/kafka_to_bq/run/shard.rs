//! One shard: a set of partitions, its consumer, its write streams and its logs.
//!
//! [`Shard::open`] (in `shard/recover.rs`) recovers from the logs (replaying a logged batch); [`Shard::run`]
//! collects batches and hands each to [`Shard::process`], which maps it
//! ([`super::batch`]), verifies a replay against its log entry, and runs the commit
//! protocol (log → append → commit, described in the module above) on the shard's
//! [`super::writer`]. The log and append steps, with their in-place recoveries, are in
//! `shard/append.rs`.

mod append;
mod recover;

use super::batch::{apply_rejections, map_batch, Cut, MapOptions, Mapped, RowPool};
use super::records::Records;
use super::writer::Writer;
use crate::bigquery::target::RetryCtl;
use crate::bigquery::write::WriteError;
use crate::kafka::shared::{Held, Partitions};
use crate::kafka_to_bq::context::JobCtx;
use crate::kafka_to_bq::setup::config::{BadRecordPolicy, Delivery};
use crate::progress::journal::ShardJournal;
use crate::progress::{CommitEntry, LogMark, OffsetEntry};
use crate::scaling::WorkerSlot;
use crate::stats::{BatchCounts, Stage, StageSamples};
use anyhow::{anyhow, Context, Result};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long an open batch waits for one more message before it is flushed.
const IDLE_FLUSH: Duration = Duration::from_millis(20);

/// Most messages taken from librdkafka's queue at once (see [`Shard::collect`]).
const BURST: usize = 256;

/// The batch [`Shard::collect`] is filling, and when it must be cut.
struct OpenBatch {
    msgs: Records,
    bytes: usize,
    deadline: Option<tokio::time::Instant>,
    max_rows: usize,
    max_bytes: usize,
    frequency: Duration,
}

impl OpenBatch {
    /// An empty batch that fills `msgs` (emptied, its capacity kept from the last batch).
    fn new(ctx: &JobCtx, msgs: Records) -> OpenBatch {
        let run = &ctx.cfg.run;
        OpenBatch {
            msgs,
            bytes: 0,
            deadline: None,
            max_rows: run.batch_rows,
            max_bytes: ctx.shares.batch_bytes,
            frequency: ctx.cfg.triggering_frequency,
        }
    }

    /// Keep message `m` of `reader`, read at `now_ms`, timing its read stage. True when
    /// the batch is full.
    fn take(&mut self, ctx: &JobCtx, stages: &mut StageSamples, m: Held, reader: &Partitions, now_ms: i64) -> bool {
        let f = m.view();
        if let Some(ts) = f.timestamp().to_millis() {
            stages.record(Stage::Read, ((now_ms - ts).max(0) as u64) * 1000);
        }
        self.bytes += f.payload().map_or(0, <[u8]>::len);
        self.msgs.push_held(&ctx.cfg.source.topic, m, reader.consumer());
        if self.deadline.is_none() {
            ctx.stats.mark_read();
            self.deadline = Some(tokio::time::Instant::now() + self.frequency);
        }
        self.full()
    }

    fn full(&self) -> bool {
        self.msgs.len() >= self.max_rows || self.bytes >= self.max_bytes
    }

    /// How many messages to take in the next burst: at most [`BURST`], and no more than
    /// the rows left, nor (at this batch's mean message size) the bytes left, so a
    /// batch ends as near its limits as when messages were taken one at a time.
    fn room(&self) -> usize {
        let rows = self.max_rows.saturating_sub(self.msgs.len());
        let bytes = match self.msgs.len() {
            0 => BURST,
            n => self.max_bytes.saturating_sub(self.bytes) / (self.bytes / n).max(1) + 1,
        };
        rows.min(bytes).clamp(1, BURST)
    }

    /// How long to wait for the next message: long while empty, briefly once open.
    fn wait(&self) -> Duration {
        match self.deadline {
            None => Duration::from_millis(200),
            Some(d) => IDLE_FLUSH.min(d.saturating_duration_since(tokio::time::Instant::now())),
        }
    }

    /// Whether the triggering frequency has passed since the first message.
    fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| tokio::time::Instant::now() >= d)
    }

    /// The next offset of every partition: `positions` after the messages held.
    fn next_positions(&self, positions: &BTreeMap<i32, i64>) -> BTreeMap<i32, i64> {
        let mut at = positions.clone();
        for m in self.msgs.iter() {
            let pos = at.entry(m.partition()).or_insert(0);
            *pos = (*pos).max(m.offset() + 1);
        }
        at
    }

    /// Cut the batch: its ranges, and the positions after it (from `positions`) in the
    /// log `before` names, with each partition's epoch moved to its last record's.
    fn cut(self, positions: &BTreeMap<i32, i64>, before: &LogMark) -> Cut {
        let mut ranges = BTreeMap::new();
        let positions = self.next_positions(positions);
        let mut log = before.clone();
        for m in self.msgs.iter() {
            let r = ranges.entry(m.partition()).or_insert((m.offset(), m.offset() + 1));
            r.0 = r.0.min(m.offset());
            if m.offset() + 1 >= r.1 && m.leader_epoch() >= 0 {
                log.epochs.insert(m.partition(), m.leader_epoch());
            }
            r.1 = r.1.max(m.offset() + 1);
        }
        Cut { msgs: self.msgs, ranges, positions, log, processed_ms: Some(now_ms()) }
    }
}

/// The newest event time of each partition among `msgs`, which are sorted by
/// partition: one map entry per partition, not per message.
fn newest_event_times(msgs: &Records) -> Vec<(i32, i64)> {
    let mut out: Vec<(i32, i64)> = Vec::new();
    for m in msgs.iter() {
        let Some(ts) = m.timestamp().to_millis() else { continue };
        match out.last_mut() {
            Some((p, t)) if *p == m.partition() => *t = (*t).max(ts),
            _ => out.push((m.partition(), ts)),
        }
    }
    out
}

/// Milliseconds since the epoch (the system clock: chrono's `Utc::now` builds a calendar
/// date each call, which showed in the hot path's profile).
fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A shard's running state.
pub struct Shard {
    id: usize,
    ctx: Arc<JobCtx>,
    /// Its lines in the pipeline's progress journal.
    journal: ShardJournal,
    /// The shard's partitions on its worker's consumer.
    reader: Partitions,
    positions: BTreeMap<i32, i64>,
    /// The log the positions belong to (topic id, each partition's epoch).
    log_mark: LogMark,
    next_batch: u64,
    writer: Writer,
    stages: StageSamples,
    slot: Arc<WorkerSlot>,
    retry: RetryCtl,
    /// The last batch's record buffer, emptied, for the next batch.
    spare: Records,
    /// The last batch's row buffers, for the next batch's rows.
    spare_rows: RowPool,
    /// Set when a replayed batch did not re-read as it was logged (what differs).
    mismatch: Option<String>,
}

impl Shard {
    /// Read, batch and write until the stop signal (a drain, or a move to another
    /// worker), then finish the open batch through its commit. A batch interrupted
    /// while waiting out a BigQuery outage stays in the offset log for the next owner.
    pub async fn run(mut self) -> Result<()> {
        let mut cancel = self.retry.stop.clone();
        loop {
            let cut = self.collect(&mut cancel).await?;
            let draining = *cancel.borrow();
            if !cut.msgs.is_empty() {
                let batch = self.next_batch;
                match self.process(batch, cut, None).await {
                    Err(e) if is_interrupted(&e) => {
                        tracing::warn!(shard = self.id, batch, "stopped while BigQuery was failing: the batch is logged and will be replayed by the next run");
                        return Ok(());
                    }
                    r => r?,
                }
            }
            if draining {
                tracing::info!(shard = self.id, worker = self.slot.id, "drained");
                return Ok(());
            }
        }
    }

    /// Gather one batch: until it is full, the triggering frequency has passed since
    /// its first message, the source has nothing more for a moment, or a drain starts.
    ///
    /// Messages librdkafka already holds are taken in bursts of up to [`BURST`] with one
    /// clock read and no timer; only when none is ready does the shard wait, with a
    /// timeout, for the next one.
    async fn collect(&mut self, cancel: &mut watch::Receiver<bool>) -> Result<Cut> {
        let ctx = self.ctx.clone();
        let mut open = OpenBatch::new(&ctx, std::mem::take(&mut self.spare));
        loop {
            if *cancel.borrow() {
                break;
            }
            let now = now_ms();
            let (mut full, mut errors) = (false, Vec::new());
            let (stages, reader) = (&mut self.stages, &self.reader);
            let n = reader.take_ready(open.room(), |m| match m.view().error() {
                Some(e) => errors.push(e),
                None => full = open.take(&ctx, stages, m, reader, now),
            });
            for e in errors {
                let moved = self.consumer_error(e, &open).await?;
                self.positions.extend(moved);
            }
            if n > 0 && !open.msgs.is_empty() {
                ctx.last_read_ms.store(now, Ordering::Relaxed);
            }
            if full || open.full() || open.expired() {
                break;
            }
            if n > 0 {
                continue;
            }
            tokio::select! {
                biased;
                _ = cancel.changed() => break,
                woke = self.reader.wait(open.wait()) => {
                    if !woke && !open.msgs.is_empty() {
                        break;
                    }
                }
            }
            if open.expired() {
                break;
            }
        }
        Ok(open.cut(&self.positions, &self.log_mark))
    }

    /// A consumer error while collecting. AUTO_OFFSET_RESET means a partition's next
    /// offset is no longer stored (the consumers run with `auto.offset.reset=error`):
    /// `offsetGapPolicy` decides ([`crate::kafka::gaps`]). Anything else librdkafka
    /// retries by itself. Returns the partitions moved (`offsetGapPolicy=SKIP`) and where
    /// to: the shard's positions take them, so the next commit makes the skip durable.
    async fn consumer_error(&self, e: KafkaError, open: &OpenBatch) -> Result<BTreeMap<i32, i64>> {
        if !matches!(e, KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset)) {
            tracing::warn!(shard = self.id, error = %e, "Kafka consumer error (librdkafka retries)");
            crate::retry::note_retry(crate::retry::Service::Broker);
            return Ok(BTreeMap::new());
        }
        let ctx = &self.ctx;
        let (job, topic) = (&ctx.cfg.job_name, &ctx.cfg.source.topic);
        let mut at = open.next_positions(&self.positions);
        let parts: Vec<i32> = at.keys().copied().collect();
        let marks = ctx.metadata.watermarks(&parts).await.context("reading watermarks after an offset reset")?;
        let found = crate::kafka::gaps::check(&at, &marks);
        tracing::warn!(shard = self.id, positions = ?at, ?marks, found = found.len(), "a partition's position is no longer stored (AUTO_OFFSET_RESET)");
        let skipped = crate::kafka::gaps::apply(ctx.cfg.source.gap_policy, &found, &mut at, job, topic)
            .map_err(|e| anyhow!("shard {}: {e}", self.id))?;
        let topic_id = ctx.log.topic_id.as_deref();
        crate::kafka_to_bq::setup::positions::note_skipped(&ctx.stats, skipped, (topic, topic_id), &found);
        self.reader.assign(&at).context("assigning the shard's partitions again")?;
        Ok(found.iter().map(|d| (d.partition(), d.resume())).collect())
    }

    /// Map, log, append and commit one batch (the protocol in the module docs).
    /// `replay` is the logged entry when this batch is being recovered.
    async fn process(&mut self, batch: u64, cut: Cut, replay: Option<&OffsetEntry>) -> Result<()> {
        self.ctx.busy.fetch_add(1, Ordering::AcqRel);
        let r = self.process_inner(batch, cut, replay).await;
        self.ctx.last_read_ms.store(now_ms(), Ordering::Relaxed);
        self.ctx.busy.fetch_sub(1, Ordering::AcqRel);
        r
    }

    async fn process_inner(&mut self, batch: u64, mut cut: Cut, replay: Option<&OffsetEntry>) -> Result<()> {
        let ctx = self.ctx.clone();
        // Replays must map to the same rows in the same order.
        cut.msgs.sort_by_position();
        let mut counts = BatchCounts { read: cut.msgs.len() as u64, replayed: replay.is_some(), ..Default::default() };
        counts.bytes = cut.msgs.iter().map(|m| m.payload().map_or(0, <[u8]>::len) as u64).sum();
        let mut mapping = ctx.mapping(replay.and_then(|e| e.schema.as_deref()))?;
        let keep = ctx.cfg.bad_records == BadRecordPolicy::LogAndDrop
            || match &self.writer {
                Writer::Bq(bq) => bq.dlq.is_some(),
                Writer::Stats => ctx.cfg.dlq.is_some(),
            };
        // A replay maps as it was logged; a new batch may change the table's schema first.
        let evolve = if replay.is_none() { ctx.cfg.schema_updates } else { Default::default() };
        let row_crcs = ctx.cfg.delivery == Delivery::ExactlyOnce && matches!(self.writer, Writer::Bq(_));
        let mut bad = MapOptions { keep, evolve, row_crcs };
        mapping.mapper.prefetch(cut.msgs.iter().map(|m| m.payload().unwrap_or_default())).await;
        // A replay routes as it was logged (a table made or changed since changes nothing).
        let logged_routes =
            replay.filter(|e| !e.routes.is_empty()).map(|e| ctx.logged_routes(&e.routes)).transpose()?;
        if logged_routes.is_none() {
            ctx.prepare_routes(cut.msgs.iter().map(|m| m.payload().unwrap_or_default())).await?;
        }
        let mut mapped = loop {
            let routes = logged_routes.clone().unwrap_or_else(|| ctx.routes_now());
            let (slot, stages) = (self.slot.clone(), &mut self.stages);
            let mapped = slot
                .work(counts.read, counts.bytes, || {
                    map_batch(&ctx, (&mapping, &routes), &cut, bad, stages, &mut counts, &mut self.spare_rows)
                })
                .await?;
            if mapped.evolve.is_empty() {
                break mapped;
            }
            let (now, changed) = super::evolve::evolve(&ctx, &cut, &mapped.evolve).await?;
            mapping = now;
            if !changed {
                // Nothing more can be changed: what still does not map is a dead letter.
                bad.evolve = Default::default();
            }
        };
        let rejected = replay.map(|e| e.rejected.clone()).unwrap_or_default();
        apply_rejections(&ctx, &cut, &mut mapped, &rejected, &mut counts);
        let t_write = Instant::now();
        if matches!(self.writer, Writer::Stats) {
            // Keep the write-ahead log as exactly-once would, so the stats sink
            // measures the runner's full cost.
            if ctx.cfg.delivery == Delivery::ExactlyOnce && replay.is_none() {
                let entry = OffsetEntry {
                    batch,
                    ranges: cut.ranges.clone(),
                    positions: cut.positions.clone(),
                    log: cut.log.clone(),
                    ..Default::default()
                };
                self.journal.log_offsets(&entry).await?;
            }
        } else {
            let mut entry = OffsetEntry {
                batch,
                ranges: cut.ranges.clone(),
                positions: cut.positions.clone(),
                schema: Some(mapping.fingerprint.clone()),
                rejected,
                processed_ms: cut.processed_ms,
                log: cut.log.clone(),
                routes: mapped.routes.clone(),
                ..Default::default()
            };
            if ctx.cfg.delivery == Delivery::AtLeastOnce {
                self.journal.log_sent(&cut.positions).await?;
            }
            self.write_bq(&mut entry, &cut, &mut mapped, &mapping, replay, &mut counts).await?;
        }
        crate::crash_point!("eo::before_commit_log");
        self.commit(batch, cut, mapped, counts, t_write).await?;
        crate::crash_point!("eo::after_commit_log");
        Ok(())
    }

    /// Step 4: the commit log, the Kafka group commit, counters and latencies.
    async fn commit(
        &mut self,
        batch: u64,
        cut: Cut,
        mapped: Mapped,
        mut counts: BatchCounts,
        t_write: Instant,
    ) -> Result<()> {
        let ctx = self.ctx.clone();
        let entry = CommitEntry { batch, positions: cut.positions.clone(), log: cut.log.clone() };
        self.journal.log_commit(&entry).await?;
        let acked = now_ms();
        self.stages.record(Stage::Write, t_write.elapsed().as_micros() as u64);
        for m in cut.msgs.iter() {
            if let Some(ts) = m.timestamp().to_millis() {
                self.stages.record(Stage::EndToEnd, ((acked - ts).max(0) as u64) * 1000);
            }
        }
        if ctx.cfg.commit_offsets {
            self.reader.commit(&cut.positions);
        }
        counts.written = mapped.rows_written();
        match ctx.cfg.dlq {
            Some(_) => counts.dead_lettered = mapped.dlq_rows.len() as u64,
            None => {
                // badRecordPolicy=LOG_AND_DROP: the rows were logged, never sent.
                counts.bad_dropped = mapped.dlq_rows.len() as u64;
                counts.by_class.clear();
            }
        }
        counts.udf_dropped = mapped.dropped;
        counts.cdc_skipped = mapped.skipped;
        ctx.stats.add_batch(&counts, &mut self.stages);
        ctx.positions.lock().expect("positions lock").extend(cut.positions.iter().map(|(p, o)| (*p, *o)));
        let newest = newest_event_times(&cut.msgs);
        let mut times = ctx.event_times.lock().expect("event times lock");
        for (p, ts) in newest {
            let t = times.entry(p).or_insert(ts);
            *t = (*t).max(ts);
        }
        drop(times);
        // Merged, not replaced: a replayed batch's logged positions lack the partitions
        // added to the topic since it was logged (found by the lifecycle checker: they
        // were then left out of the assignment and never read).
        self.positions.extend(cut.positions);
        self.log_mark.epochs.extend(cut.log.epochs);
        self.log_mark.topic_id = cut.log.topic_id.or(self.log_mark.topic_id.take());
        self.spare = cut.msgs;
        self.spare.clear();
        self.spare_rows.give(mapped.rows);
        self.next_batch = batch + 1;
        Ok(())
    }
}

/// What to say when BigQuery refused a row and there is no dead-letter table: the
/// record it came from, or (if BigQuery named a row the request did not have) that.
fn refused_without_dlq(
    ctx: &JobCtx,
    cut: &Cut,
    mapped: &Mapped,
    side: Option<&str>,
    errs: &[(usize, String)],
) -> String {
    let Some((i, msg)) = errs.first() else { return "BigQuery refused rows without naming any".into() };
    let src = match side.and_then(|t| mapped.side.get(t)) {
        Some(s) => s.row_src.get(*i),
        None => mapped.row_src.get(*i),
    };
    match src.and_then(|s| cut.msgs.get(*s)) {
        Some(m) => format!("BigQuery rejected record {}/{}@{}: {msg}. No dead-letter table is configured, so the job stops; this batch was not committed", ctx.cfg.source.topic, m.partition(), m.offset()),
        None => format!("BigQuery reported an error for row {i} of a {}-row append: {msg}. No dead-letter table is configured, so the job stops; this batch was not committed", mapped.rows.len()),
    }
}

/// Whether `e` is a stop (a drain or a move) that came while an append waited to retry.
pub(super) fn is_interrupted(e: &anyhow::Error) -> bool {
    e.chain().any(|c| matches!(c.downcast_ref::<WriteError>(), Some(WriteError::Interrupted { .. })))
}
