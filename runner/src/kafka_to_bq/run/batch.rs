//! A batch from cut to mapped rows: the messages a shard read ([`Cut`]), their rows
//! and dead-letter rows ([`Mapped`], by [`map_batch`]), the rows BigQuery refused moved
//! to the dead letters (recorded in the log entry so a replay does the same), and the
//! check that a replay re-sends exactly what was logged ([`verify_replay`]).

use super::records::{Record, Records};
use crate::bigquery::evolution::SchemaUpdates;
use crate::bigquery::rows::Rows;
use crate::bigquery::TableRef;
use crate::checksum::{crc32c, Crc32c};
use crate::kafka_to_bq::context::{JobCtx, Mapping, RouteResult};
use crate::kafka_to_bq::map::dlq::{self, Origin, Payload, RecordRef, TimestampType};
use crate::kafka_to_bq::map::metadata::KafkaMeta;
use crate::kafka_to_bq::map::transform::{Mapper, RecordError};
use crate::progress::{DigestKind, LogMark, LoggedRoute, OffsetEntry};
use crate::stats::{BatchCounts, Stage, StageSamples};
use anyhow::{bail, Result};
use rdkafka::message::{Headers, Message};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// A batch mapped to rows: table rows (with the message each came from), dead-letter rows.
pub(super) struct Mapped {
    pub(super) rows: Rows,
    pub(super) row_src: Vec<usize>,
    /// Each row's CRC32C, taken as it was written (when [`MapOptions::row_crcs`]),
    /// for the log entry's digest ([`digest`]); else empty.
    pub(super) row_crcs: Vec<u32>,
    pub(super) dlq_rows: Rows,
    /// Messages the UDF dropped.
    pub(super) dropped: u64,
    /// CDC tombstones skipped (no sequence in their key).
    pub(super) skipped: u64,
    /// Rows of other per-record tables, by table (in table order).
    pub(super) side: BTreeMap<String, SideRows>,
    /// Messages that ask for a schema change `schemaUpdateOptions` allows, with their
    /// error. When there are any, nothing else was kept: the job changes the table's
    /// schema ([`super::evolve`]) and maps the batch again.
    pub(super) evolve: Vec<(usize, RecordError)>,
    /// How each other record type met in the batch was routed (logged with it).
    pub(super) routes: BTreeMap<String, LoggedRoute>,
}

/// The routes a batch maps its other record types with (per-record tables).
pub(super) type Routes = HashMap<String, RouteResult>;

/// Rows for another per-record table.
pub(super) struct SideRows {
    pub(super) table: TableRef,
    pub(super) descriptor: prost_types::DescriptorProto,
    pub(super) rows: Rows,
    pub(super) row_src: Vec<usize>,
}

impl Mapped {
    /// Rows for every table.
    pub(super) fn rows_written(&self) -> u64 {
        (self.rows.len() + self.side.values().map(|s| s.rows.len()).sum::<usize>()) as u64
    }
}

/// A batch as it was cut: its messages, ranges and the positions after it.
pub(super) struct Cut {
    pub(super) msgs: Records,
    pub(super) ranges: BTreeMap<i32, (i64, i64)>,
    pub(super) positions: BTreeMap<i32, i64>,
    /// The log the batch was read from, with each partition's epoch after it.
    pub(super) log: LogMark,
    /// When the batch was first processed (dead-letter rows' `timestamp`); a replay
    /// takes it from the log (None for entries written before it was logged).
    pub(super) processed_ms: Option<i64>,
}

/// CRC32C over rows, each prefixed by its length ([`DigestKind::RowBytes`]): what a log
/// entry recorded before issue 29 so that a replay can prove it re-sends the same rows.
pub fn rows_digest(rows: &Rows) -> u32 {
    let mut c = Crc32c::new();
    for r in rows {
        c.update(&(r.len() as u64).to_le_bytes());
        c.update(r);
    }
    c.finish()
}

/// CRC32C over each row's length and CRC32C ([`DigestKind::RowCrcs`]), from the CRCs
/// taken as the rows were written: no second pass over the rows' bytes.
///
/// ```
/// use flexrun::bigquery::rows::Rows;
/// use flexrun::kafka_to_bq::run::batch::crcs_digest;
/// let rows = Rows::from(vec![b"ab".to_vec(), b"c".to_vec()]);
/// let crcs: Vec<u32> = rows.iter().map(flexrun::checksum::crc32c).collect();
/// let first = Rows::from(vec![b"ab".to_vec()]);
/// assert_ne!(crcs_digest(&rows, &crcs), crcs_digest(&first, &crcs[..1]));
/// ```
pub fn crcs_digest(rows: &Rows, crcs: &[u32]) -> u32 {
    assert_eq!(rows.len(), crcs.len(), "one CRC per row");
    let mut c = Crc32c::new();
    let mut pair = [0u8; 12];
    for (r, crc) in rows.iter().zip(crcs) {
        pair[..8].copy_from_slice(&(r.len() as u64).to_le_bytes());
        pair[8..].copy_from_slice(&crc.to_le_bytes());
        c.update(&pair);
    }
    c.finish()
}

/// The digest of `rows` taken as `kind` says, from `crcs` when there is one per row
/// (else each row's CRC is taken here).
pub fn digest(kind: DigestKind, rows: &Rows, crcs: &[u32]) -> u32 {
    match kind {
        DigestKind::RowBytes => rows_digest(rows),
        DigestKind::RowCrcs if crcs.len() == rows.len() => crcs_digest(rows, crcs),
        DigestKind::RowCrcs => crcs_digest(rows, &rows.iter().map(crc32c).collect::<Vec<_>>()),
    }
}

/// A replayed batch must re-send exactly what its log entry says: the same row
/// counts and digests on both streams. Anything else would put rows at offsets that
/// do not match what is there, so the job stops and says what differs.
pub(super) fn verify_replay(job: &str, shard: usize, logged: &OffsetEntry, now: &OffsetEntry) -> Result<()> {
    if logged.side.len() != now.side.len() {
        bail!(
            "job {job} shard {shard}: replaying batch {} would write to {} per-record tables where {} were logged; no row was written",
            logged.batch, now.side.len(), logged.side.len()
        );
    }
    let side = logged.side.iter().zip(&now.side).map(|(a, b)| ("per-record table", Some(a).cloned(), Some(b).cloned()));
    let pairs =
        [("table", logged.main.clone(), now.main.clone()), ("dead-letter table", logged.dlq.clone(), now.dlq.clone())];
    for (what, a, b) in pairs.into_iter().chain(side) {
        let (Some(a), Some(b)) = (a, b) else { continue };
        let digest_differs = a.digest.is_some() && a.digest != b.digest;
        if a.rows != b.rows || digest_differs {
            bail!(
                "job {job} shard {shard}: replaying batch {} would not re-send what was logged for the {what}: logged {} rows (digest {:?}) at offset {} of {}, re-read {} rows (digest {:?}). The topic's data (compaction, say) or the mapping changed since the crash; no row was written",
                logged.batch, a.rows, a.digest, a.offset, a.stream, b.rows, b.digest
            );
        }
    }
    Ok(())
}

/// Move the rows BigQuery refused (by row index) to the dead-letter rows and record
/// them in the entry, so a replay does the same. `side` names the per-record table the
/// rows were for (None: the main table).
pub(super) fn reject_rows(
    ctx: &JobCtx,
    cut: &Cut,
    mapped: &mut Mapped,
    side: Option<&str>,
    errs: &[(usize, String)],
    entry: &mut OffsetEntry,
    counts: &mut BatchCounts,
) -> Result<()> {
    let mut no_crcs = Vec::new();
    let (rows, row_src, crcs) = match side.and_then(|t| mapped.side.get_mut(t)) {
        Some(s) => (&mut s.rows, &mut s.row_src, &mut no_crcs),
        None => (&mut mapped.rows, &mut mapped.row_src, &mut mapped.row_crcs),
    };
    if let Some((i, _)) = errs.iter().find(|(i, _)| *i >= rows.len()) {
        bail!("BigQuery reported an error for row {i} of a {}-row append", rows.len());
    }
    let rejected: BTreeMap<usize, String> = errs.iter().cloned().collect();
    let split = split_rejected(std::mem::take(rows), std::mem::take(row_src), std::mem::take(crcs), &rejected);
    let SplitRows { kept, kept_src, kept_crcs, refused } = split;
    (*rows, *row_src, *crcs) = (kept, kept_src, kept_crcs);
    for (msg_idx, why) in refused {
        let m = cut.msgs.at(msg_idx);
        entry.rejected.push((m.partition(), m.offset(), why.clone()));
        push_rejected_dlq_row(ctx, cut.processed_ms, m, &why, mapped, counts);
    }
    Ok(())
}

pub(super) fn push_rejected_dlq_row(
    ctx: &JobCtx,
    processed_ms: Option<i64>,
    m: Record<'_>,
    why: &str,
    mapped: &mut Mapped,
    counts: &mut BatchCounts,
) {
    mapped.dlq_rows.push(&dead_letter(ctx, processed_ms, m, "write", &format!("BigQuery rejected the row: {why}")));
    *counts.by_class.entry("rejected").or_default() += 1;
}

/// In a replay, move the messages the log says BigQuery refused to the dead-letter
/// rows, in the logged order, as the first attempt did.
pub(super) fn apply_rejections(
    ctx: &JobCtx,
    cut: &Cut,
    mapped: &mut Mapped,
    rejected: &[(i32, i64, String)],
    counts: &mut BatchCounts,
) {
    let at = |src: &[usize], p: i32, o: i64| {
        src.iter().position(|i| (cut.msgs.at(*i).partition(), cut.msgs.at(*i).offset()) == (p, o))
    };
    for (p, o, why) in rejected {
        let src = if let Some(k) = at(&mapped.row_src, *p, *o) {
            mapped.rows.remove(k);
            if k < mapped.row_crcs.len() {
                mapped.row_crcs.remove(k);
            }
            mapped.row_src.remove(k)
        } else if let Some((s, k)) = mapped.side.values_mut().find_map(|s| at(&s.row_src, *p, *o).map(|k| (s, k))) {
            s.rows.remove(k);
            s.row_src.remove(k)
        } else {
            continue;
        };
        push_rejected_dlq_row(ctx, cut.processed_ms, cut.msgs.at(src), why, mapped, counts);
    }
}

/// Message values mapped to rows: the rows, the index of the value each came from, and
/// the values that could not be mapped, with why.
#[derive(Debug, Default)]
pub struct MappedValues {
    /// Encoded rows.
    pub rows: Rows,
    /// For each row, the index of its value.
    pub row_src: Vec<usize>,
    /// Each row's CRC32C, taken as it was written (when asked for), else empty.
    pub row_crcs: Vec<u32>,
    /// Values that did not map: index and reason.
    pub failed: Vec<(usize, RecordError)>,
    /// Values the UDF dropped.
    pub dropped: u64,
    /// Debezium records skipped ([`RecordError::DebeziumSkipped`]).
    pub skipped: u64,
}

/// Map messages (key, value) to rows with `mapper`, taking each row's CRC32C as it is
/// written when `crcs` (for an exactly-once log entry's [`digest`]). This is the
/// transform of every batch a shard processes, and what `flexrun calibrate` measures.
///
/// The batch is timed as a whole: each message is recorded in `stages` at the batch's
/// mean, rounded up to 1 µs, so the hot path reads the clock twice per batch rather than
/// twice per message.
pub fn map_values<'a>(
    mapper: &Mapper,
    messages: impl Iterator<Item = (Option<&'a [u8]>, &'a [u8], Option<KafkaMeta<'a>>)>,
    stages: &mut StageSamples,
    pool: &mut RowPool,
    crcs: bool,
) -> MappedValues {
    let t = Instant::now();
    let mut out = MappedValues { rows: pool.take(), ..Default::default() };
    let mut n = 0u64;
    let mut row = std::mem::take(&mut pool.row);
    for (i, (key, value, meta)) in messages.enumerate() {
        n += 1;
        row.clear();
        match mapper.map_message(key, value, meta.as_ref(), &mut row) {
            Ok(()) => {
                if crcs {
                    out.row_crcs.push(crc32c(&row));
                }
                out.rows.push(&row);
                out.row_src.push(i);
            }
            Err(RecordError::Dropped) => out.dropped += 1,
            Err(RecordError::DebeziumSkipped(_)) => out.skipped += 1,
            Err(e) => out.failed.push((i, e)),
        }
    }
    pool.keep_row(row);
    if n > 0 {
        let mean_us = (t.elapsed().as_nanos() as u64).div_ceil(1000 * n);
        stages.record_n(Stage::Transform, mean_us, n);
    }
    out
}

/// Buffers kept from one batch for the next, so that mapping costs no allocation once
/// the shard has run a batch (issue 29): the batch's [`Rows`], and the one row each
/// message is mapped into before it is copied there (small, so it stays in cache). A
/// buffer larger than [`RowPool::MAX_ROWS_CAPACITY`] or [`RowPool::MAX_ROW_CAPACITY`]
/// is freed rather than kept.
#[derive(Default)]
pub struct RowPool {
    rows: Option<Rows>,
    row: Vec<u8>,
}

impl RowPool {
    /// The largest row buffer kept.
    pub const MAX_ROW_CAPACITY: usize = 64 * 1024;
    /// The largest batch buffer kept.
    pub const MAX_ROWS_CAPACITY: usize = 64 * 1024 * 1024;

    /// Empty rows: the kept ones, or new.
    pub fn take(&mut self) -> Rows {
        let mut rows = self.rows.take().unwrap_or_default();
        rows.clear();
        rows
    }

    /// Keep a finished batch's rows for a later [`RowPool::take`], unless they are too large.
    pub fn give(&mut self, rows: Rows) {
        if rows.capacity() <= Self::MAX_ROWS_CAPACITY {
            self.rows = Some(rows);
        }
    }

    fn keep_row(&mut self, row: Vec<u8>) {
        if row.capacity() <= Self::MAX_ROW_CAPACITY {
            self.row = row;
        }
    }
}

/// How map_batch maps: what it does with a record that cannot be written, and whether
/// it takes each row's CRC.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct MapOptions {
    /// Keep a bad record as a dead-letter row (a dead-letter table, or
    /// `badRecordPolicy=LOG_AND_DROP`: its row is built, logged and never sent); else
    /// stop the job.
    pub(super) keep: bool,
    /// The schema changes a record may ask for first (none in a replay, which must map
    /// as it was logged).
    pub(super) evolve: SchemaUpdates,
    /// Take each table row's CRC as it is written ([`Mapped::row_crcs`]): an
    /// exactly-once log entry's digest is built from them.
    pub(super) row_crcs: bool,
}

/// Whether `e` asks for a schema change `u` allows: a top-level field the table lacks, or
/// a REQUIRED top-level column the record leaves empty.
pub(super) fn asks_for_change(e: &RecordError, u: SchemaUpdates) -> bool {
    match e {
        RecordError::UnknownField(f) => u.add && !f.contains('.'),
        RecordError::MissingRequired(f) => u.relax && !f.contains('.'),
        _ => false,
    }
}

/// Map every message of a batch (sorted by partition and offset) to a table row or a
/// dead-letter row. Without a dead-letter table, a bad record stops the job unless
/// `bad.keep`. A record that asks for a schema change `bad.evolve` allows stops the
/// mapping instead ([`Mapped::evolve`]).
pub(super) fn map_batch(
    ctx: &JobCtx,
    (mapping, routes): (&Mapping, &Routes),
    cut: &Cut,
    bad: MapOptions,
    stages: &mut StageSamples,
    counts: &mut BatchCounts,
    pool: &mut RowPool,
) -> Result<Mapped> {
    let keep_bad = bad.keep;
    let with_meta = mapping.mapper.wants_meta();
    let values = cut.msgs.iter().map(|m| (m.key(), m.payload().unwrap_or_default(), with_meta.then(|| kafka_meta(m))));
    let MappedValues { rows, row_src, row_crcs, mut failed, dropped, skipped } =
        map_values(&mapping.mapper, values, stages, pool, bad.row_crcs);
    if bad.evolve.any() && failed.iter().any(|(_, e)| asks_for_change(e, bad.evolve)) {
        pool.give(rows);
        failed.retain(|(_, e)| asks_for_change(e, bad.evolve));
        let (rows, row_src, row_crcs, dlq_rows, side, routes) = Default::default();
        return Ok(Mapped { rows, row_src, row_crcs, dlq_rows, dropped: 0, skipped: 0, side, evolve: failed, routes });
    }
    let mut side: BTreeMap<String, SideRows> = BTreeMap::new();
    let (mut dead, mut side_asks, mut used) = (Vec::new(), Vec::new(), BTreeMap::new());
    for (i, e) in failed {
        let e = match e {
            RecordError::OtherRecord(name) => {
                match route_message(routes.get(&name), &name, cut.msgs.at(i), i, &mut side, &mut used) {
                    Ok(()) => continue,
                    Err(e) if asks_for_change(&e, bad.evolve) => {
                        side_asks.push((i, e));
                        continue;
                    }
                    Err(e) => e,
                }
            }
            e => e,
        };
        dead.push((i, e));
    }
    if !side_asks.is_empty() {
        // Another record type's table is to change first (per-record tables).
        pool.give(rows);
        let (rows, row_src, row_crcs, dlq_rows, side, routes) = Default::default();
        return Ok(Mapped {
            rows,
            row_src,
            row_crcs,
            dlq_rows,
            dropped: 0,
            skipped: 0,
            side,
            evolve: side_asks,
            routes,
        });
    }
    let dlq_rows = dead_letters(ctx, cut, dead, keep_bad, counts)?;
    Ok(Mapped { rows, row_src, row_crcs, dlq_rows, dropped, skipped, side, evolve: Vec::new(), routes: used })
}

/// The dead-letter rows of records that cannot be written; without a dead-letter table
/// (and not `keep_bad`), the first one stops the job.
fn dead_letters(
    ctx: &JobCtx,
    cut: &Cut,
    dead: Vec<(usize, RecordError)>,
    keep_bad: bool,
    counts: &mut BatchCounts,
) -> Result<Rows> {
    let topic = ctx.cfg.source.topic.as_str();
    let mut dlq_rows = Rows::new();
    for (i, e) in dead {
        let m = cut.msgs.at(i);
        if !keep_bad {
            bail!("record {topic}/{}@{} cannot be written: {e}. No dead-letter table is configured (set outputDeadletterTable to keep bad records), so the job stops here; this batch was not committed and nothing was lost", m.partition(), m.offset());
        }
        dlq_rows.push(&dead_letter(ctx, cut.processed_ms, m, "transform", &e.to_string()));
        *counts.by_class.entry(e.class()).or_default() += 1;
    }
    Ok(dlq_rows)
}

/// A record's topic, partition, offset, timestamp and headers, for metadata columns.
fn kafka_meta(m: Record<'_>) -> KafkaMeta<'_> {
    KafkaMeta {
        topic: m.topic(),
        partition: m.partition(),
        offset: m.offset(),
        timestamp_ms: m.timestamp().to_millis(),
        headers: m.headers().map(|h| h.iter().map(|h| (h.key, h.value)).collect()).unwrap_or_default(),
        null_value: m.payload().is_none(),
    }
}

/// Map message `i` (a record of type `name`) with its per-record table's `route`, and
/// note how the type was routed in `used`.
fn route_message(
    route: Option<&RouteResult>,
    name: &str,
    m: Record<'_>,
    i: usize,
    side: &mut BTreeMap<String, SideRows>,
    used: &mut BTreeMap<String, LoggedRoute>,
) -> Result<(), RecordError> {
    let route = match route {
        Some(Ok(r)) => r,
        Some(Err(why)) => {
            used.insert(name.to_string(), LoggedRoute::Refused(why.clone()));
            return Err(RecordError::Avro(format!("record {name}: {why}")));
        }
        None => return Err(RecordError::Avro(format!("record {name}: no table was prepared for it"))),
    };
    let logged = LoggedRoute::Table { table: route.table.to_string(), schema: route.mapping.fingerprint.clone() };
    used.insert(name.to_string(), logged);
    let mut row = Vec::new();
    let meta = route.mapping.mapper.wants_meta().then(|| kafka_meta(m));
    route.mapping.mapper.map_message(m.key(), m.payload().unwrap_or_default(), meta.as_ref(), &mut row)?;
    let s = side.entry(route.table.to_string()).or_insert_with(|| SideRows {
        table: route.table.clone(),
        descriptor: route.mapping.descriptor.clone(),
        rows: Rows::new(),
        row_src: Vec::new(),
    });
    s.rows.push(&row);
    s.row_src.push(i);
    Ok(())
}

/// A batch's rows split after BigQuery refused some.
#[derive(Debug, Default)]
pub(super) struct SplitRows {
    /// The rows to append again.
    pub(super) kept: Rows,
    /// The message each kept row came from.
    pub(super) kept_src: Vec<usize>,
    /// The kept rows' CRCs (empty when none were taken).
    pub(super) kept_crcs: Vec<u32>,
    /// The refused rows' messages, with the reason.
    pub(super) refused: Vec<(usize, String)>,
}

/// Split a batch after BigQuery refused some rows (by row index): the rows to append
/// again with the messages they came from (and their CRCs, when `crcs` has one per
/// row), and the refused rows' messages with the reason.
pub(super) fn split_rejected(
    rows: Rows,
    row_src: Vec<usize>,
    crcs: Vec<u32>,
    rejected: &BTreeMap<usize, String>,
) -> SplitRows {
    let with_crcs = crcs.len() == rows.len();
    let mut out = SplitRows { kept_src: Vec::with_capacity(rows.len()), ..Default::default() };
    for (i, (row, src)) in rows.iter().zip(row_src).enumerate() {
        match rejected.get(&i) {
            Some(why) => out.refused.push((src, why.clone())),
            None => {
                out.kept.push(row);
                out.kept_src.push(src);
                if with_crcs {
                    out.kept_crcs.push(crcs[i]);
                }
            }
        }
    }
    out
}

/// Encode the dead-letter row of message `m` of `cut` failing at `stage` with `error`.
/// Without a dead-letter table (`badRecordPolicy=LOG_AND_DROP`) the row is only
/// logged here; the batch's commit counts it as dropped.
pub(super) fn dead_letter(ctx: &JobCtx, cut_ms: Option<i64>, m: Record<'_>, stage: &str, error: &str) -> Vec<u8> {
    if ctx.cfg.dlq.is_none() {
        tracing::error!(topic = %ctx.cfg.source.topic, partition = m.partition(), offset = m.offset(), stage, error,
            "bad record dropped (badRecordPolicy=LOG_AND_DROP, no dead-letter table)");
    }
    use rdkafka::message::{Headers, Timestamp};
    let headers: Vec<(&str, Option<&[u8]>)> =
        m.headers().map(|h| h.iter().map(|x| (x.key, x.value)).collect()).unwrap_or_default();
    let (timestamp_ms, timestamp_type) = match m.timestamp() {
        Timestamp::NotAvailable => (-1, TimestampType::None),
        Timestamp::CreateTime(t) => (t, TimestampType::CreateTime),
        Timestamp::LogAppendTime(t) => (t, TimestampType::LogAppendTime),
    };
    let rec = RecordRef {
        topic: &ctx.cfg.source.topic,
        partition: m.partition(),
        offset: m.offset(),
        timestamp_ms,
        timestamp_type,
        key: m.key(),
        value: m.payload().unwrap_or_default(),
        headers: &headers,
        processed_ms: cut_ms,
        payload: if ctx.cfg.format.is_binary() { Payload::Bytes } else { Payload::Text },
        origin: Origin {
            job: ctx.cfg.parent.as_deref().unwrap_or(&ctx.cfg.job_name),
            topic_id: ctx.log.topic_id.as_deref(),
            leader_epoch: m.leader_epoch(),
        },
    };
    let mut out = Vec::new();
    dlq::encode(&rec, stage, error, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::StreamSlot;

    #[test]
    fn rows_bigquery_refuses_leave_the_batch_with_their_source_message() {
        // bqemulator never returns per-row errors by itself, so this split is tested here.
        let rows = Rows::from(vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]);
        let src = vec![0, 2, 3, 5];
        let rejected = BTreeMap::from([(1, "bad field".to_string()), (3, "too big".to_string())]);
        let crcs = vec![10, 11, 12, 13];
        let SplitRows { kept, kept_src, kept_crcs, refused } =
            split_rejected(rows.clone(), src.clone(), crcs, &rejected);
        assert_eq!(kept.to_vecs(), vec![b"a".to_vec(), b"c".to_vec()]);
        assert_eq!(kept_src, vec![0, 3]);
        assert_eq!(kept_crcs, vec![10, 12], "each kept row keeps its own CRC");
        assert_eq!(refused, vec![(2, "bad field".to_string()), (5, "too big".to_string())]);
        let split = split_rejected(rows, src, Vec::new(), &rejected);
        assert!(split.kept_crcs.is_empty() && split.kept.len() == 2, "rows without CRCs stay without");
        let split = split_rejected(Rows::from(vec![b"x".to_vec()]), vec![7], vec![1], &BTreeMap::new());
        assert_eq!((split.kept.len(), split.refused.len()), (1, 0));
    }

    #[test]
    fn a_replay_that_would_not_resend_the_logged_rows_stops_and_says_what_differs() {
        let rows = vec![b"a".to_vec(), b"b".to_vec()];
        let slot = |rows: &[Vec<u8>]| {
            Some(StreamSlot {
                stream: "s".into(),
                offset: 40,
                rows: rows.len() as i64,
                table: "p:d.t".into(),
                digest: Some(rows_digest(&rows.iter().collect())),
                digest_kind: DigestKind::RowBytes,
                requests: Vec::new(),
            })
        };
        let logged = OffsetEntry { batch: 7, main: slot(&rows), ..Default::default() };
        assert!(verify_replay("j", 2, &logged, &logged.clone()).is_ok());
        let changed = OffsetEntry { main: slot(&[b"a".to_vec(), b"c".to_vec()]), ..logged.clone() };
        let e = verify_replay("j", 2, &logged, &changed).unwrap_err().to_string();
        assert!(
            e.contains("job j shard 2: replaying batch 7")
                && e.contains("logged 2 rows")
                && e.contains("no row was written"),
            "{e}"
        );
        let fewer = OffsetEntry { main: slot(&rows[..1]), ..logged.clone() };
        assert!(verify_replay("j", 2, &logged, &fewer).unwrap_err().to_string().contains("re-read 1 rows"));
        // Entries from before digests were logged are checked on the row count only.
        let legacy =
            OffsetEntry { main: Some(StreamSlot { digest: None, ..logged.main.clone().unwrap() }), ..logged.clone() };
        assert!(verify_replay("j", 2, &legacy, &changed).is_ok());
    }

    #[test]
    fn a_batch_is_timed_once_and_every_message_counts_in_the_transform_stage() {
        let schema = crate::bigquery::schema::Schema::from_json(&serde_json::json!([
            {"name": "logStreamId", "type": "INTEGER", "mode": "NULLABLE"}
        ]))
        .unwrap();
        let mapper = Mapper::new(schema, crate::kafka_to_bq::map::transform::DEFAULT_MAX_ROW_BYTES);
        let values: [&[u8]; 3] = [br#"{"logStreamId": 1}"#, b"not json", br#"{"logStreamId": 3}"#];
        let mut stages = StageSamples::default();
        let out =
            map_values(&mapper, values.iter().map(|v| (None, *v, None)), &mut stages, &mut RowPool::default(), true);
        assert_eq!((out.rows.len(), out.row_src, out.failed.len()), (2, vec![0, 2], 1));
        assert_eq!(out.row_crcs, out.rows.iter().map(crc32c).collect::<Vec<_>>());
        let transform = stages.take().into_iter().find(|s| s.stage == "transform").unwrap();
        assert_eq!(transform.count, 3, "failed messages are timed too");
        assert!(transform.p50_ms > 0.0, "the mean is rounded up to at least 1 us: {transform:?}");
        map_values(&mapper, std::iter::empty(), &mut stages, &mut RowPool::default(), false);
        assert_eq!(stages.take().into_iter().find(|s| s.stage == "transform").unwrap().count, 0);
    }

    #[test]
    fn the_digest_tells_row_order_and_boundaries_apart() {
        let r = |v: &[&[u8]]| v.iter().collect::<Rows>();
        let a = rows_digest(&r(&[b"ab", b"c"]));
        assert_eq!(a, rows_digest(&r(&[b"ab", b"c"])));
        assert_ne!(a, rows_digest(&r(&[b"a", b"bc"])));
        assert_ne!(a, rows_digest(&r(&[b"c", b"ab"])));
        assert_ne!(rows_digest(&r(&[])), rows_digest(&r(&[b""])));
        let by_crcs = |rows: &[&[u8]]| digest(DigestKind::RowCrcs, &r(rows), &[]);
        let b = by_crcs(&[b"ab", b"c"]);
        assert_ne!(b, by_crcs(&[b"a", b"bc"]));
        assert_ne!(b, by_crcs(&[b"c", b"ab"]));
        assert_ne!(by_crcs(&[]), by_crcs(&[b""]));
        assert_ne!(b, by_crcs(&[b"ab", b"d"]), "a changed byte changes it");
    }

    #[test]
    fn a_digest_from_crcs_taken_while_mapping_equals_one_taken_after_and_old_kinds_still_verify() {
        let rows: Rows = (0..50u8).map(|i| vec![i; i as usize * 7]).collect();
        let crcs: Vec<u32> = rows.iter().map(crc32c).collect();
        assert_eq!(digest(DigestKind::RowCrcs, &rows, &crcs), digest(DigestKind::RowCrcs, &rows, &[]));
        assert_eq!(digest(DigestKind::RowBytes, &rows, &crcs), rows_digest(&rows), "an older entry's kind");
        assert_ne!(digest(DigestKind::RowBytes, &rows, &crcs), digest(DigestKind::RowCrcs, &rows, &crcs));
    }
}
