//! A shard's start: its logs opened and recovered, an uncommitted batch re-read from
//! exactly its logged ranges and finished at its logged row offsets, and the write
//! targets moved where the configuration now points. The steady loop that follows is
//! in [`super`].

use super::{Shard, BURST};
use crate::bigquery::target::with_retries;
use crate::bigquery::target::RetryCtl;
use crate::kafka::shared::SharedConsumer;
use crate::kafka_to_bq::context::JobCtx;
use crate::kafka_to_bq::run::batch::{Cut, RowPool};
use crate::kafka_to_bq::run::records::Records;
use crate::kafka_to_bq::run::writer::{new_stream, open_writer, BqWriter, Writer};
use crate::kafka_to_bq::setup::config::Delivery;
use crate::kafka_to_bq::setup::positions::Unreplayable;
use crate::progress::journal::ShardJournal;
use crate::progress::{CommitEntry, LogMark, OffsetEntry, Recovery};
use crate::scaling::WorkerSlot;
use crate::stats::LostRange;
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

/// Where a shard's logs leave it.
struct Resumed {
    positions: BTreeMap<i32, i64>,
    log_mark: LogMark,
    /// The last offset entry (streams and row offsets to go on from).
    last: Option<OffsetEntry>,
    /// The batch to replay first.
    replay: Option<OffsetEntry>,
    next_batch: u64,
}

/// Each of `partitions`' positions from the shard's recovered logs, or where the job
/// start put it. Positions of a log given up on (a recreated topic) are not used: those
/// partitions start in the new log. A position the job start judged (offsetGapPolicy:
/// retention, past an end, truncated) resumes where that left it, with no epoch yet.
fn resume(ctx: &JobCtx, partitions: &[i32], recovery: &Recovery) -> Resumed {
    let mut positions: BTreeMap<i32, i64> = partitions.iter().map(|p| (*p, ctx.start_position(*p))).collect();
    let mut epochs = BTreeMap::new();
    let mut take = |m: &BTreeMap<i32, i64>, log: &LogMark| {
        positions.extend(m.iter().filter(|(p, _)| partitions.contains(p)));
        epochs.extend(log.epochs.iter().filter(|(p, _)| partitions.contains(p)));
    };
    let (last, replay, next_batch, newest) = match recovery {
        Recovery::Fresh => (None, None, 1, 0),
        Recovery::Clean { last, commit } => {
            if !ctx.log.is_gone(&commit.log) {
                take(&commit.positions, &commit.log);
            }
            (last.clone(), None, commit.batch + 1, commit.batch)
        }
        Recovery::Replay(e) => {
            take(&e.positions, &e.log);
            (Some(e.clone()), Some(e.clone()), e.batch, e.batch)
        }
    };
    for (p, pos) in positions.iter_mut() {
        let moved = ctx.resume_position(*p, *pos, newest);
        if moved != *pos {
            epochs.remove(p);
            *pos = moved;
        }
    }
    let log_mark = LogMark { topic_id: ctx.log.topic_id.clone(), epochs };
    Resumed { positions, log_mark, last, replay, next_batch }
}

/// What became of an uncommitted batch's rows, from its streams' row counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Landed {
    /// Every stream holds the batch's rows.
    All,
    /// No stream holds any of them.
    None,
    /// Some do (or a stream could not say): the rows may be in the table once.
    Part,
}

/// Finalize each stream the batch logged rows for and compare its row count with the
/// batch's slot: at or past the slot's end, the rows landed; at its start, none did.
async fn landed(ctx: &JobCtx, e: &OffsetEntry, retry: &mut RetryCtl) -> Result<Landed> {
    let Some(client) = &ctx.write_client else { return Ok(Landed::All) };
    let slots = e.main.iter().chain(e.dlq.iter()).chain(e.side.iter()).filter(|s| s.rows > 0);
    let (mut all, mut none) = (true, true);
    for slot in slots {
        let stream = slot.stream.clone();
        match with_retries("FinalizeWriteStream", retry, || client.finalize_stream(&stream)).await {
            Ok(count) => {
                all &= count >= slot.end();
                none &= count <= slot.offset;
            }
            Err(err) => {
                tracing::warn!(stream = %slot.stream, error = %err, "cannot finalize a logged stream to learn whether its rows landed: counted as possibly duplicated");
                (all, none) = (false, false);
            }
        }
    }
    Ok(match (all, none) {
        (true, _) => Landed::All,
        (false, true) => Landed::None,
        _ => Landed::Part,
    })
}

/// Settle an uncommitted batch that cannot be read again as it was logged
/// (`offsetGapPolicy=SKIP`; under FAIL the job stopped at start): its streams are
/// finalized, and their row counts say whether its rows landed. All: the batch is done.
/// None: each partition goes on from what the log still holds of its range, and the
/// rest is counted as lost. Part: the same, with the range counted as possibly
/// duplicated. A commit entry records the outcome (fsynced), and the shard goes on
/// with new streams.
async fn settle_unreplayable(
    ctx: &JobCtx,
    shard: usize,
    e: &OffsetEntry,
    u: &Unreplayable,
    journal: &ShardJournal,
    retry: &mut RetryCtl,
) -> Result<CommitEntry> {
    let outcome = landed(ctx, e, retry).await?;
    let topic = &ctx.cfg.source.topic;
    let mut commit = CommitEntry { batch: e.batch, positions: e.positions.clone(), log: e.log.clone() };
    let topic_id = e.log.topic_id.clone().or_else(|| ctx.log.legacy.clone());
    let range = |p: i32, from: i64, to: i64, why: &str| LostRange {
        topic: topic.clone(),
        topic_id: topic_id.clone(),
        partition: p,
        from,
        to: Some(to),
        why: why.into(),
        replaced_by: None,
    };
    ctx.stats.note(|r| {
        r.batches_abandoned += 1;
        r.batches_possibly_duplicated += u64::from(outcome == Landed::Part);
        for (p, (a, b)) in e.ranges.iter().filter(|_| outcome != Landed::All) {
            let (keep_from, keep_to) = u.readable(*p, *a, *b);
            for (from, to) in [(*a, keep_from.min(*b)), (keep_to.max(*a), *b)] {
                if from < to {
                    let why = if outcome == Landed::Part {
                        "possibly lost: an abandoned batch, partly landed"
                    } else {
                        "an abandoned batch that had not landed"
                    };
                    r.note_lost(range(*p, from, to, why));
                }
            }
            if outcome == Landed::Part && keep_from < keep_to {
                r.note_possibly_duplicated(range(
                    *p,
                    keep_from,
                    keep_to,
                    "an abandoned batch, partly landed, read again",
                ));
            }
        }
    });
    if outcome != Landed::All {
        for (p, (a, b)) in &e.ranges {
            commit.positions.insert(*p, u.resume(*p, *a, *b));
            commit.log.epochs.remove(p);
        }
    }
    journal.log_commit_synced(&commit).await?;
    tracing::error!(job = %ctx.cfg.job_name, shard, batch = e.batch, why = %u.why, landed = ?outcome, positions = ?commit.positions, "an uncommitted batch cannot be read again as logged; offsetGapPolicy=SKIP settled it by its streams' row counts");
    Ok(commit)
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
        let journal = ctx.journal.shard(id);
        let mut retry = RetryCtl { stop, stats: ctx.stats.clone() };
        let recovery = match journal.recovery()? {
            Recovery::Replay(e) if ctx.unreplayable(id, e.batch).is_some() => {
                let u = ctx.unreplayable(id, e.batch).expect("checked above").clone();
                let commit = settle_unreplayable(&ctx, id, &e, &u, &journal, &mut retry).await?;
                Recovery::Clean { last: None, commit }
            }
            r => r,
        };
        let Resumed { mut positions, log_mark, last, replay, next_batch } = resume(&ctx, &partitions, &recovery);
        crate::kafka::gaps::simulate_cut_log(&mut positions);
        if ctx.cfg.delivery == Delivery::AtLeastOnce && ctx.write_client.is_some() {
            let n = crate::kafka_to_bq::run::sent::possibly_resent(journal.sent().as_ref(), &positions);
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
        // A replay reads its logged ranges first; otherwise reading starts at the positions.
        // Every partition of the shard gets its own queue now, a replay's or not: one
        // assigned later without one would have its messages go to the worker's main
        // queue, which no shard reads (found by the lifecycle checker: a replay of a batch
        // that read only some of the shard's partitions lost the others' records).
        let reader = match &replay {
            Some(e) => consumer.take_some(&partitions, &replay_start(e))?,
            None => consumer.take(&positions)?,
        };
        let writer = open_writer(&ctx, id, last.as_ref(), replay.is_some(), &mut retry).await?;
        let mut shard = Shard {
            id,
            ctx,
            journal,
            reader,
            positions,
            log_mark,
            next_batch,
            writer,
            stages: StageSamples::default(),
            slot,
            retry,
            spare: Records::default(),
            spare_rows: RowPool::default(),
            mismatch: None,
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
        let cut = Cut {
            msgs,
            ranges: e.ranges.clone(),
            positions: e.positions.clone(),
            log: e.log.clone(),
            processed_ms: e.processed_ms,
        };
        let err = match self.process(e.batch, cut, Some(&e)).await {
            Ok(()) => return Ok(()),
            Err(err) => err,
        };
        let Some(why) = self.mismatch.take() else { return Err(err) };
        self.settle_mismatch(&e, why).await.map_err(|e2| e2.context(format!("{err:#}")))
    }

    /// A logged batch that re-read differently from its log (records compacted away
    /// since, say): under `offsetGapPolicy=SKIP` it is settled by its streams' row counts
    /// as an unreadable batch is, and the shard goes on with new streams from what the
    /// log holds now; under FAIL the job stops saying so (issue 62, item 11).
    async fn settle_mismatch(&mut self, e: &OffsetEntry, why: String) -> Result<()> {
        let ctx = self.ctx.clone();
        let u =
            Unreplayable { batch: e.batch, why, log_gone: false, floors: BTreeMap::new(), diverged: BTreeMap::new() };
        if ctx.cfg.source.gap_policy == crate::kafka::gaps::GapPolicy::Fail {
            bail!(u.refusal(&ctx.cfg.job_name, &ctx.cfg.source.topic, self.id));
        }
        let commit = settle_unreplayable(&ctx, self.id, e, &u, &self.journal, &mut self.retry).await?;
        self.writer = open_writer(&ctx, self.id, None, false, &mut self.retry).await?;
        for (p, pos) in &commit.positions {
            if let Some(at) = self.positions.get_mut(p) {
                *at = *pos;
            }
        }
        self.log_mark = commit.log.clone();
        self.next_batch = e.batch + 1;
        Ok(())
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
