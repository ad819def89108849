//! Steps 2 and 3 of a batch on BigQuery: log where its rows go, append them, and recover in
//! place from the two things that can happen to a batch mid-way:
//!
//! - BigQuery refuses rows: they join the dead-letter rows, the entry is logged again,
//!   and only the requests that did not land are split anew ([`Round::rows_refused`]);
//! - a write stream is gone: the target moves to a new stream from offset 0, counted
//!   as a possible duplicate if the batch had been sent before ([`Round::stream_gone`]).
//!
//! Both recoveries keep the batch's offsets, which is why they live beside the loop.

use super::{refused_without_dlq, Shard};
use crate::bigquery::rows::Rows;
use crate::bigquery::target::RetryCtl;
use crate::kafka_to_bq::context::{JobCtx, Mapping};
use crate::kafka_to_bq::run::batch::{reject_rows, verify_replay, Cut, Mapped};
use crate::kafka_to_bq::run::writer::{
    append_both, digest_kind, new_stream, open_side_targets, side_slots, slot_of, BqWriter, Offsets, Plans,
    SideOffsets, Step, Targets, Which, Writer,
};
use crate::kafka_to_bq::setup::config::{BadRecordPolicy, Delivery};
use crate::progress::journal::ShardJournal;
use crate::progress::{DigestKind, OffsetEntry};
use crate::stats::BatchCounts;
use anyhow::{bail, Result};

/// Where a batch's rows start on each target in this round: `x` on the table, `zs` on
/// the per-record tables, `y` on the dead-letter table.
struct Starts {
    x: i64,
    zs: SideOffsets,
    y: Option<i64>,
}

impl Starts {
    /// The targets' next offsets (in a replay the targets were opened at the logged ones).
    fn of(bq: &BqWriter) -> Starts {
        Starts {
            x: bq.main.next,
            zs: bq.side.iter().map(|(t, target)| (t.clone(), target.next)).collect(),
            y: bq.dlq.as_ref().map(|d| d.next),
        }
    }

    /// `which` goes on on a new stream, from its first offset.
    fn restart(&mut self, which: Which) {
        match which {
            Which::Main => self.x = 0,
            Which::Side(t) => {
                self.zs.insert(t, 0);
            }
            Which::Dlq => self.y = Some(0),
        }
    }

    /// The offsets an append sends: none at least once.
    fn offsets(&self, exactly: bool) -> Offsets<'_> {
        Offsets { x: exactly.then_some(self.x), zs: exactly.then_some(&self.zs), y: self.y.filter(|_| exactly) }
    }

    /// Every target's next offset once the batch's rows are in.
    fn advance(&self, bq: &mut BqWriter, mapped: &Mapped) {
        bq.main.next = self.x + mapped.rows.len() as i64;
        for (t, target) in bq.side.iter_mut() {
            let n = mapped.side.get(t).map_or(0, |s| s.rows.len()) as i64;
            target.next = self.zs.get(t).copied().unwrap_or(target.next) + n;
        }
        if let Some(d) = bq.dlq.as_mut() {
            d.next = self.y.unwrap_or(d.next) + mapped.dlq_rows.len() as i64;
        }
    }
}

/// One batch's rounds of appends: what stays fixed across them and what they change.
struct Round<'a> {
    ctx: &'a JobCtx,
    shard: usize,
    kind: Option<DigestKind>,
    plans: Plans,
    starts: Starts,
    /// Whether the batch was sent before (in an earlier round or process).
    attempted: bool,
    /// The batch's Kafka ranges (named when it may land twice).
    ranges: &'a std::collections::BTreeMap<i32, (i64, i64)>,
}

impl Shard {
    /// Steps 2 and 3 of the protocol on BigQuery: log the batch (when its entry is new),
    /// then append its rows, per-record rows and dead-letter rows until every request
    /// has landed; on refused rows or a lost stream, log again and append again.
    pub(super) async fn write_bq(
        &mut self,
        entry: &mut OffsetEntry,
        cut: &Cut,
        mapped: &mut Mapped,
        mapping: &Mapping,
        replay: Option<&OffsetEntry>,
        counts: &mut BatchCounts,
    ) -> Result<()> {
        let ctx = self.ctx.clone();
        let exactly = ctx.cfg.delivery == Delivery::ExactlyOnce;
        let Writer::Bq(bq) = &mut self.writer else { unreachable!("write_bq is only called with a BigQuery writer") };
        bq.main.set_descriptor(mapping.descriptor.clone());
        let bytes = ctx.cfg.run.append_request_bytes;
        open_side_targets(&bq.client, &mut bq.side, mapped, exactly, bytes, &mut self.retry).await?;
        let plans = match Plans::new((&bq.main, &bq.side, bq.dlq.as_ref()), mapped, replay) {
            Ok(p) => p,
            Err(e) => {
                self.mismatch = Some(e.to_string());
                bail!("job {} shard {} batch {}: {e}; no row was written", ctx.cfg.job_name, self.id, entry.batch)
            }
        };
        let starts = Starts::of(bq);
        let kind = digest_kind(exactly, replay);
        let ranges = &cut.ranges;
        let mut round = Round { ctx: &ctx, shard: self.id, kind, plans, starts, attempted: replay.is_some(), ranges };
        let mut first = true;
        loop {
            round.fill(entry, bq, mapped);
            if let (Some(logged), true) = (replay, first) {
                if let Err(e) = verify_replay(&ctx.cfg.job_name, self.id, logged, entry) {
                    self.mismatch = Some(format!("{e:#}"));
                    return Err(e);
                }
            }
            if exactly && replay.is_none_or(|r| r != &*entry) {
                log_entry(&self.journal, entry, !first).await?;
            }
            first = false;
            let targets = Targets { main: &mut bq.main, side: &mut bq.side, dlq: bq.dlq.as_mut() };
            let at = round.starts.offsets(exactly);
            let step = append_both(&bq.client, targets, mapped, &mut round.plans, at, &mut self.retry).await;
            let step = step.map_err(|e| {
                anyhow::Error::new(e)
                    .context(format!("shard {} batch {}: appending to {}", self.id, entry.batch, bq.main.table))
            })?;
            match step {
                Step::Done { already_existed } => {
                    counts.already_existed += already_existed;
                    break;
                }
                Step::RowErrors { which, request, errors, already_existed } => {
                    counts.already_existed += already_existed;
                    round.rows_refused(bq, (cut, mapped, entry, counts), which, request, &errors)?;
                }
                Step::StreamGone { which, stream, message } => {
                    round.stream_gone(bq, &mut self.retry, entry.batch, which, (&stream, &message)).await?;
                }
            }
            round.attempted = true;
        }
        round.starts.advance(bq, mapped);
        Ok(())
    }
}

/// Log the entry before its rows are sent (exactly-once); `relog` after a recovery
/// changed where the rows go.
async fn log_entry(journal: &ShardJournal, entry: &OffsetEntry, relog: bool) -> Result<()> {
    crate::crash_point!("eo::before_offset_log");
    journal.log_offsets(entry).await?;
    crate::crash_point!("eo::after_offset_log");
    if relog {
        crate::crash_point!("eo::after_relog_before_append");
    }
    Ok(())
}

impl Round<'_> {
    /// The entry's slots: where each target's rows go, split as the plans say.
    fn fill(&self, entry: &mut OffsetEntry, bq: &BqWriter, mapped: &Mapped) {
        let (s, kind) = (&self.starts, self.kind);
        entry.main = Some(slot_of(&bq.main, s.x, (&mapped.rows, &mapped.row_crcs), &self.plans.main, kind));
        entry.side = side_slots(&bq.side, &s.zs, mapped, &self.plans, kind);
        let dlq_rows = (&mapped.dlq_rows, &[][..]);
        entry.dlq = bq.dlq.as_ref().map(|d| slot_of(d, s.y.unwrap_or(0), dlq_rows, &self.plans.dlq, kind));
    }

    /// BigQuery refused rows of `which` in `request`: move them to the dead-letter rows
    /// (or stop, with no dead-letter table under badRecordPolicy=FAIL) and split anew
    /// what did not land.
    fn rows_refused(
        &mut self,
        bq: &BqWriter,
        (cut, mapped, entry, counts): (&Cut, &mut Mapped, &mut OffsetEntry, &mut BatchCounts),
        which: Which,
        request: usize,
        errs: &[(usize, String)],
    ) -> Result<()> {
        let ctx = self.ctx;
        let table = match &which {
            Which::Side(t) => Some(t.clone()),
            _ => None,
        };
        if bq.dlq.is_none() && ctx.cfg.bad_records == BadRecordPolicy::Fail {
            bail!("{}", refused_without_dlq(ctx, cut, mapped, table.as_deref(), errs));
        }
        reject_rows(ctx, cut, mapped, table.as_deref(), errs, entry, counts)?;
        let (rows, budget) = match &table {
            Some(t) => (
                mapped.side.get(t).map_or(Rows::empty(), |s| &s.rows),
                bq.side.get(t).map_or(bq.main.request_budget(), |t| t.request_budget()),
            ),
            None => (&mapped.rows, bq.main.request_budget()),
        };
        self.plans.of(&which).after_rejection(request, rows, budget);
        // The refused rows joined the dead-letter rows, none of which were sent yet
        // (they go last): split them anew.
        self.plans.dlq = bq.dlq.as_ref().map(|d| d.plan(&mapped.dlq_rows)).unwrap_or_default();
        let to = if bq.dlq.is_some() { "the dead-letter table" } else { "the log (badRecordPolicy=LOG_AND_DROP)" };
        tracing::warn!(shard = self.shard, batch = entry.batch, rejected = errs.len(), to, "BigQuery rejected rows");
        Ok(())
    }

    /// `which`'s write stream is gone: go on on a new one from offset 0.
    async fn stream_gone(
        &mut self,
        bq: &mut BqWriter,
        retry: &mut RetryCtl,
        batch: u64,
        which: Which,
        (stream, message): (&str, &str),
    ) -> Result<()> {
        let target = match &which {
            Which::Main => &mut bq.main,
            Which::Side(t) => bq.side.get_mut(t).expect("an append to it failed, so there is a target"),
            Which::Dlq => bq.dlq.as_mut().expect("a dead-letter append failed, so there is a target"),
        };
        let new = new_stream(&bq.client, &target.table, retry).await?;
        self.ctx.stats.note(|r| r.streams_replaced += 1);
        // Sent before: in an earlier round or process, or requests of this round that
        // landed on the old stream before it went.
        let shard = self.shard;
        if self.attempted || self.plans.of(&which).landed() > 0 {
            let (topic, topic_id) = (&self.ctx.cfg.source.topic, &self.ctx.log.topic_id);
            self.ctx.stats.note(|r| {
                r.batches_possibly_duplicated += 1;
                for (p, (a, b)) in self.ranges {
                    r.note_possibly_duplicated(crate::stats::LostRange {
                        topic: topic.clone(),
                        topic_id: topic_id.clone(),
                        partition: *p,
                        from: *a,
                        to: Some(*b),
                        why: "a batch sent again to a new stream after its stream was gone".into(),
                        replaced_by: None,
                    });
                }
            });
            tracing::error!(shard, batch, old = %stream, new = %new, %message,
                "write stream is gone: this batch had been sent before, so if that attempt landed its rows are now duplicated (exactly-once cannot be kept across a lost stream)");
        } else {
            tracing::warn!(shard, batch, old = %stream, new = %new, %message, "write stream is gone: continuing on a new stream; no request of this batch had been sent to it, so nothing is duplicated");
        }
        target.replace_stream(new);
        self.plans.of(&which).restart();
        self.starts.restart(which);
        Ok(())
    }
}
