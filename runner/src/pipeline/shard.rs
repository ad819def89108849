//! One shard: a set of partitions, its consumer, its write streams and its logs.

use super::sink::Target;
use super::worker::WorkerSlot;
use super::JobCtx;
use crate::bigquery::write::{AppendOutcome, WriteClient};
use crate::config::Delivery;
use crate::dlq::{self, RecordRef};
use crate::kafka;
use crate::progress::{AsyncProgress, CommitEntry, OffsetEntry, Recovery, ShardLog, StreamSlot};
use crate::stats::{BatchCounts, StageStats};
use anyhow::{anyhow, bail, Context, Result};
use rdkafka::consumer::StreamConsumer;
use rdkafka::message::{Message, OwnedMessage};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an open batch waits for one more message before it is flushed.
const IDLE_FLUSH: Duration = Duration::from_millis(20);

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The write side of a shard.
enum Writer {
    /// Rows are mapped and encoded, then only counted.
    Stats,
    /// BigQuery.
    Bq { client: WriteClient, main: Target, dlq: Option<Target> },
}

/// A shard's running state.
pub struct Shard {
    id: usize,
    ctx: Arc<JobCtx>,
    /// The logs (None when asynchronous progress tracking owns them).
    log: Option<ShardLog>,
    /// Asynchronous progress tracking, when on.
    progress: Option<AsyncProgress>,
    consumer: StreamConsumer,
    positions: BTreeMap<i32, i64>,
    next_batch: u64,
    writer: Writer,
    stages: StageStats,
    slot: Arc<WorkerSlot>,
}

/// A batch mapped to rows: table rows (with the message each came from), dead-letter rows.
struct Mapped {
    rows: Vec<Vec<u8>>,
    row_src: Vec<usize>,
    dlq_rows: Vec<Vec<u8>>,
}

/// A batch as it was cut: its messages, ranges and the positions after it.
struct Cut {
    msgs: Vec<OwnedMessage>,
    ranges: BTreeMap<i32, (i64, i64)>,
    positions: BTreeMap<i32, i64>,
}

impl Shard {
    /// Open the shard's logs, recover, and get its streams ready.
    pub async fn open(id: usize, ctx: Arc<JobCtx>, partitions: Vec<i32>, slot: Arc<WorkerSlot>) -> Result<Shard> {
        let dir = ctx.job_dir.join(format!("shard-{id:03}"));
        let log = ShardLog::open_with(&dir, ctx.cfg.progress.purge)?;
        let recovery = log.recover()?;
        let mut positions: BTreeMap<i32, i64> = partitions.iter().map(|p| (*p, ctx.initial_positions[p])).collect();
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
        let consumer = ctx.cfg.source.consumer()?;
        let writer = match &ctx.write_client {
            None => Writer::Stats,
            Some(client) => {
                let exactly = ctx.cfg.delivery == Delivery::ExactlyOnce;
                let main = open_target(client, &ctx.cfg.table, last.as_ref().and_then(|e| e.main.clone()), replay.is_some(), exactly, ctx.descriptor.clone(), id).await?;
                let dlq = match &ctx.cfg.dlq {
                    Some(t) => Some(open_target(client, t, last.as_ref().and_then(|e| e.dlq.clone()), replay.is_some(), exactly, ctx.dlq_descriptor.clone(), id).await?),
                    None => None,
                };
                Writer::Bq { client: client.clone(), main, dlq }
            }
        };
        let (log, progress) = if ctx.cfg.progress.async_progress && ctx.cfg.delivery == Delivery::AtLeastOnce {
            (None, Some(AsyncProgress::start(log, ctx.cfg.progress.interval)))
        } else {
            (Some(log), None)
        };
        let mut shard = Shard { id, ctx, log, progress, consumer, positions, next_batch, writer, stages: StageStats::default(), slot };
        if let Some(e) = replay {
            shard.replay(e).await?;
        }
        kafka::assign(&shard.consumer, &shard.ctx.cfg.source.topic, &shard.positions)?;
        tracing::info!(shard = id, worker = shard.slot.id, partitions = ?partitions, next_batch = shard.next_batch, "shard ready");
        Ok(shard)
    }

    /// Re-read exactly the logged ranges of an uncommitted batch and finish it at its
    /// logged row offsets.
    async fn replay(&mut self, e: OffsetEntry) -> Result<()> {
        tracing::warn!(shard = self.id, batch = e.batch, ranges = ?e.ranges, "replaying a batch that was logged but not committed");
        let topic = self.ctx.cfg.source.topic.clone();
        let from: BTreeMap<i32, i64> = e.ranges.iter().map(|(p, (a, _))| (*p, *a)).collect();
        kafka::assign(&self.consumer, &topic, &from)?;
        let mut pending: BTreeMap<i32, i64> = e.ranges.iter().filter(|(_, (a, b))| b > a).map(|(p, (_, b))| (*p, *b)).collect();
        let mut msgs = Vec::new();
        while !pending.is_empty() {
            let m = tokio::time::timeout(Duration::from_secs(30), self.consumer.recv())
                .await
                .map_err(|_| anyhow!("shard {}: replaying batch {}: Kafka did not return the logged ranges {:?} within 30 s (deleted by retention?)", self.id, e.batch, pending))?
                .context("reading Kafka during replay")?;
            let (p, o) = (m.partition(), m.offset());
            if let Some(end) = pending.get(&p).copied() {
                if o < end {
                    msgs.push(m.detach());
                }
                if o + 1 >= end {
                    pending.remove(&p);
                }
            }
        }
        let cut = Cut { msgs, ranges: e.ranges.clone(), positions: e.positions.clone() };
        self.process(e.batch, cut, Some(&e)).await?;
        Ok(())
    }

    /// Read, batch and write until `stop` becomes true (a drain, or a move to another
    /// worker), then finish the open batch through its commit.
    pub async fn run(mut self, mut stop: tokio::sync::watch::Receiver<bool>) -> Result<()> {
        let cancel = &mut stop;
        loop {
            let cut = self.collect(cancel).await?;
            let draining = *cancel.borrow();
            if !cut.msgs.is_empty() {
                let batch = self.next_batch;
                self.process(batch, cut, None).await?;
            }
            if draining {
                if let Some(p) = self.progress.take() {
                    p.finish()?;
                }
                tracing::info!(shard = self.id, worker = self.slot.id, "drained");
                return Ok(());
            }
        }
    }

    /// Gather one batch: until it is full, the triggering frequency has passed since
    /// its first message, the source has nothing more for a moment, or a drain starts.
    async fn collect(&mut self, cancel: &mut tokio::sync::watch::Receiver<bool>) -> Result<Cut> {
        let cfg = &self.ctx.cfg;
        let mut msgs: Vec<OwnedMessage> = Vec::new();
        let mut bytes = 0usize;
        let mut deadline: Option<tokio::time::Instant> = None;
        loop {
            if *cancel.borrow() {
                break;
            }
            let wait = match deadline {
                None => Duration::from_millis(200),
                Some(d) => IDLE_FLUSH.min(d.saturating_duration_since(tokio::time::Instant::now())),
            };
            tokio::select! {
                biased;
                _ = cancel.changed() => break,
                r = tokio::time::timeout(wait, self.consumer.recv()) => match r {
                    Ok(Ok(m)) => {
                        let now = now_ms();
                        if let Some(ts) = m.timestamp().to_millis() {
                            self.stages.record(0, ((now - ts).max(0) as u64) * 1000);
                        }
                        bytes += m.payload_len();
                        self.ctx.stats.mark_read();
                        msgs.push(m.detach());
                        self.ctx.last_read_ms.store(now, Ordering::Relaxed);
                        deadline.get_or_insert_with(|| tokio::time::Instant::now() + cfg.triggering_frequency);
                        if msgs.len() >= cfg.batch_rows || bytes >= cfg.batch_bytes {
                            break;
                        }
                    }
                    Ok(Err(e)) => tracing::warn!(shard = self.id, error = %e, "Kafka consumer error (librdkafka retries)"),
                    Err(_) if !msgs.is_empty() => break,
                    Err(_) => {}
                }
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                break;
            }
        }
        let mut ranges = BTreeMap::new();
        let mut positions = self.positions.clone();
        for m in &msgs {
            let r = ranges.entry(m.partition()).or_insert((m.offset(), m.offset() + 1));
            r.0 = r.0.min(m.offset());
            r.1 = r.1.max(m.offset() + 1);
            let pos = positions.entry(m.partition()).or_insert(0);
            *pos = (*pos).max(m.offset() + 1);
        }
        Ok(Cut { msgs, ranges, positions })
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
        let cfg = &ctx.cfg;
        let topic = cfg.source.topic.as_str();
        // Replays must map to the same rows in the same order.
        cut.msgs.sort_by_key(|m| (m.partition(), m.offset()));
        let mut counts = BatchCounts { read: cut.msgs.len() as u64, replayed: replay.is_some(), ..Default::default() };
        counts.bytes = cut.msgs.iter().map(|m| m.payload().map_or(0, <[u8]>::len) as u64).sum();
        let slot = self.slot.clone();
        let stages = &mut self.stages;
        let Mapped { mut rows, mut row_src, mut dlq_rows } = slot.work(counts.read, counts.bytes, || map_batch(&ctx, &cut, stages, &mut counts)).await?;
        let t_write = Instant::now();
        match &mut self.writer {
            Writer::Stats => {
                // Keep the write-ahead log as exactly-once would, so the stats sink
                // measures the runner's full cost.
                if cfg.delivery == Delivery::ExactlyOnce && replay.is_none() {
                    self.log.as_mut().expect(OWNS_LOGS).log_offsets(&OffsetEntry { batch, ranges: cut.ranges.clone(), positions: cut.positions.clone(), main: None, dlq: None })?;
                }
            }
            Writer::Bq { client, main, dlq } => {
                let exactly = cfg.delivery == Delivery::ExactlyOnce;
                // In a replay the targets were opened at the logged offsets (or at 0 on a
                // new stream, in which case the batch is logged again with the new slot).
                let mut x = main.next;
                let y = dlq.as_ref().map(|d| d.next);
                let same_streams = |e: &OffsetEntry| {
                    e.main.as_ref().map(|s| &s.stream) == Some(&main.stream) && e.dlq.as_ref().map(|s| &s.stream) == dlq.as_ref().map(|d| &d.stream)
                };
                let mut must_log = !replay.is_some_and(same_streams);
                loop {
                    if exactly && std::mem::take(&mut must_log) {
                        let entry = OffsetEntry {
                            batch,
                            ranges: cut.ranges.clone(),
                            positions: cut.positions.clone(),
                            main: Some(StreamSlot { stream: main.stream.clone(), offset: x, rows: rows.len() as i64 }),
                            dlq: dlq.as_ref().map(|d| StreamSlot { stream: d.stream.clone(), offset: y.unwrap_or(0), rows: dlq_rows.len() as i64 }),
                        };
                        self.log.as_mut().expect(OWNS_LOGS).log_offsets(&entry)?;
                    }
                    if rows.is_empty() {
                        break;
                    }
                    let offset = exactly.then_some(x);
                    match main.append(client, &rows, offset).await {
                        Ok(AppendOutcome::Appended) => break,
                        Ok(AppendOutcome::AlreadyExists) => {
                            counts.already_existed += 1;
                            break;
                        }
                        Ok(AppendOutcome::RowErrors(errs)) => {
                            if let Some((i, _)) = errs.iter().find(|(i, _)| *i >= rows.len()) {
                                bail!("BigQuery reported an error for row {i} of a {}-row append to {}", rows.len(), main.table);
                            }
                            if cfg.dlq.is_none() {
                                let (i, msg) = &errs[0];
                                let m = &cut.msgs[row_src[*i]];
                                bail!("BigQuery rejected record {topic}/{}@{}: {msg}. No dead-letter table is configured, so the job stops; this batch was not committed", m.partition(), m.offset());
                            }
                            let rejected: BTreeMap<usize, String> = errs.into_iter().collect();
                            let (kept, kept_src, refused) = split_rejected(rows, row_src, &rejected);
                            for (msg_idx, why) in refused {
                                let m = &cut.msgs[msg_idx];
                                let mut out = Vec::new();
                                dlq::encode(&record_ref(topic, m), "write", &format!("BigQuery rejected the row: {why}"), &mut out);
                                dlq_rows.push(out);
                                *counts.by_class.entry("rejected").or_default() += 1;
                            }
                            tracing::warn!(shard = self.id, batch, rejected = rejected.len(), "BigQuery rejected rows; they go to the dead-letter table");
                            rows = kept;
                            row_src = kept_src;
                            must_log = true;
                        }
                        Err(crate::bigquery::write::WriteError::StreamGone { stream, message }) if exactly => {
                            let new = client.create_committed_stream(&main.table).await?;
                            tracing::error!(shard = self.id, batch, old = %stream, new = %new, %message,
                                "write stream is gone: continuing on a new stream. If an earlier attempt of this batch landed on the old stream, its rows are now duplicated (exactly-once cannot be kept across a lost stream)");
                            main.replace_stream(new);
                            x = 0;
                            must_log = true;
                        }
                        Err(e) => return Err(e).with_context(|| format!("shard {} batch {batch}: appending {} rows to {}", self.id, rows.len(), main.table)),
                    }
                }
                main.next = x + rows.len() as i64;
                if let (Some(d), false) = (dlq.as_mut(), dlq_rows.is_empty()) {
                    let at = y.unwrap_or(d.next);
                    match d.append(client, &dlq_rows, exactly.then_some(at)).await {
                        Ok(AppendOutcome::Appended) => {}
                        Ok(AppendOutcome::AlreadyExists) => counts.already_existed += 1,
                        Ok(AppendOutcome::RowErrors(errs)) => bail!("the dead-letter table {} rejected rows: {:?}", d.table, errs),
                        Err(e) => return Err(e).with_context(|| format!("shard {} batch {batch}: appending {} dead-letter rows to {}", self.id, dlq_rows.len(), d.table)),
                    }
                    d.next = at + dlq_rows.len() as i64;
                } else if let Some(d) = dlq.as_mut() {
                    d.next = y.unwrap_or(d.next);
                }
            }
        }
        let entry = CommitEntry { batch, positions: cut.positions.clone() };
        match &self.progress {
            Some(p) => p.update(entry),
            None => self.log.as_mut().expect(OWNS_LOGS).log_commit(&entry)?,
        }
        let acked = now_ms();
        let write_us = t_write.elapsed().as_micros() as u64;
        self.stages.record(2, write_us);
        for m in &cut.msgs {
            if let Some(ts) = m.timestamp().to_millis() {
                self.stages.record(3, ((acked - ts).max(0) as u64) * 1000);
            }
        }
        if cfg.commit_offsets {
            kafka::commit_positions(&self.consumer, topic, &cut.positions);
        }
        counts.written = rows.len() as u64;
        counts.dead_lettered = dlq_rows.len() as u64;
        ctx.stats.add_batch(&counts, &mut self.stages);
        ctx.positions.lock().expect("positions lock").extend(cut.positions.iter().map(|(p, o)| (*p, *o)));
        self.positions = cut.positions;
        self.next_batch = batch + 1;
        Ok(())
    }
}

/// Map every message of a batch (sorted by partition and offset) to a table row or a
/// dead-letter row. Without a dead-letter table, a bad record stops the job.
fn map_batch(ctx: &JobCtx, cut: &Cut, stages: &mut StageStats, counts: &mut BatchCounts) -> Result<Mapped> {
    let topic = ctx.cfg.source.topic.as_str();
    let mut rows: Vec<Vec<u8>> = Vec::with_capacity(cut.msgs.len());
    let mut row_src: Vec<usize> = Vec::with_capacity(cut.msgs.len());
    let mut dlq_rows: Vec<Vec<u8>> = Vec::new();
    for (i, m) in cut.msgs.iter().enumerate() {
        let value = m.payload().unwrap_or_default();
        let t = Instant::now();
        let mut row = Vec::with_capacity(value.len() + 16);
        let r = ctx.mapper.map_into(value, &mut row);
        stages.record(1, t.elapsed().as_micros() as u64);
        match r {
            Ok(()) => {
                rows.push(row);
                row_src.push(i);
            }
            Err(e) => {
                if ctx.cfg.dlq.is_none() {
                    bail!("record {topic}/{}@{} cannot be written: {e}. No dead-letter table is configured (set outputDeadletterTable to keep bad records), so the job stops here; this batch was not committed and nothing was lost", m.partition(), m.offset());
                }
                let mut out = Vec::new();
                dlq::encode(&record_ref(topic, m), "transform", &e.to_string(), &mut out);
                dlq_rows.push(out);
                *counts.by_class.entry(e.class()).or_default() += 1;
            }
        }
    }
    Ok(Mapped { rows, row_src, dlq_rows })
}

/// Split a batch after BigQuery refused some rows (by row index): the rows to append
/// again with the messages they came from, and the refused rows' messages with the reason.
fn split_rejected(rows: Vec<Vec<u8>>, row_src: Vec<usize>, rejected: &BTreeMap<usize, String>) -> (Vec<Vec<u8>>, Vec<usize>, Vec<(usize, String)>) {
    let mut kept = Vec::with_capacity(rows.len());
    let mut kept_src = Vec::with_capacity(rows.len());
    let mut refused = Vec::new();
    for (i, (row, src)) in rows.into_iter().zip(row_src).enumerate() {
        match rejected.get(&i) {
            Some(why) => refused.push((src, why.clone())),
            None => {
                kept.push(row);
                kept_src.push(src);
            }
        }
    }
    (kept, kept_src, refused)
}

/// A shard writes its logs itself except under asynchronous progress tracking, which
/// only applies to at-least-once, where the shard writes no offset entries.
const OWNS_LOGS: &str = "the shard owns its logs unless asynchronous progress tracking (at-least-once) does";

fn record_ref<'a>(topic: &'a str, m: &'a OwnedMessage) -> RecordRef<'a> {
    RecordRef { topic, partition: m.partition(), offset: m.offset(), timestamp_ms: m.timestamp().to_millis(), key: m.key(), value: m.payload().unwrap_or_default() }
}

/// The stream a shard writes to: the logged one if it is still usable, else a new one.
async fn open_target(
    client: &WriteClient,
    table: &crate::bigquery::TableRef,
    logged: Option<StreamSlot>,
    replaying: bool,
    exactly: bool,
    descriptor: prost_types::DescriptorProto,
    shard: usize,
) -> Result<Target> {
    if !exactly {
        return Ok(Target::new(table.clone(), table.default_stream(), 0, descriptor));
    }
    if let Some(slot) = logged {
        if client.stream_usable(&slot.stream).await? {
            let next = if replaying { slot.offset } else { slot.end() };
            return Ok(Target::new(table.clone(), slot.stream, next, descriptor));
        }
        if replaying {
            tracing::error!(shard, stream = %slot.stream, table = %table,
                "the logged write stream is gone (finalized, expired, or the emulator restarted): the uncommitted batch is re-appended to a new stream, so if it had landed before the crash its rows are now duplicated");
        } else {
            tracing::warn!(shard, stream = %slot.stream, table = %table, "the logged write stream is gone; every logged batch was committed, so a new stream loses nothing");
        }
    }
    let stream = client.create_committed_stream(table).await.with_context(|| format!("creating a COMMITTED write stream on {table}"))?;
    Ok(Target::new(table.clone(), stream, 0, descriptor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_bigquery_refuses_leave_the_batch_with_their_source_message() {
        // bqemulator never returns per-row errors, so this split is tested here.
        let rows = vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()];
        let src = vec![0, 2, 3, 5];
        let rejected = BTreeMap::from([(1, "bad field".to_string()), (3, "too big".to_string())]);
        let (kept, kept_src, refused) = split_rejected(rows, src, &rejected);
        assert_eq!(kept, vec![b"a".to_vec(), b"c".to_vec()]);
        assert_eq!(kept_src, vec![0, 3]);
        assert_eq!(refused, vec![(2, "bad field".to_string()), (5, "too big".to_string())]);
        let (kept, _, refused) = split_rejected(vec![b"x".to_vec()], vec![7], &BTreeMap::new());
        assert_eq!((kept.len(), refused.len()), (1, 0));
    }
}
