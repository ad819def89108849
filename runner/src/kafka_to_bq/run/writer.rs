//! A shard's write side: the table's and dead-letter table's [`Target`]s, opened where
//! the logs leave them, and one round of appends to both ([`append_both`]).

use super::batch::{digest, Mapped};
use crate::bigquery::framed::SharedRows;
use crate::bigquery::rows::Rows;
use crate::bigquery::target::{with_retries, BatchAppend, Requests, RetryCtl, Target};
use crate::bigquery::write::{WriteClient, WriteError};
use crate::bigquery::TableRef;
use crate::kafka_to_bq::context::JobCtx;
use crate::kafka_to_bq::setup::config::Delivery;
use crate::progress::{DigestKind, OffsetEntry, StreamSlot};
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The write side of a shard.
pub(super) enum Writer {
    /// Rows are mapped and encoded, then only counted.
    Stats,
    /// BigQuery (boxed: a target holds buffers and descriptors).
    Bq(Box<BqWriter>),
}

/// The BigQuery side of a shard: the client and the table's and dead-letter table's targets.
pub(super) struct BqWriter {
    pub(super) client: WriteClient,
    pub(super) main: Target,
    pub(super) dlq: Option<Target>,
    /// Targets on other per-record tables, by table (schemaFormat=SCHEMA_REGISTRY).
    pub(super) side: BTreeMap<String, Target>,
}

/// Which of a shard's targets an outcome is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Which {
    Main,
    Side(String),
    Dlq,
}

/// Where `rows` go on `t`, from `offset`, in `plan`'s requests, with their digest taken
/// as `kind` says (from `crcs` when there is one per row; no digest without a kind).
pub(super) fn slot_of(
    t: &Target,
    offset: i64,
    (rows, crcs): (&Rows, &[u32]),
    plan: &Requests,
    kind: Option<DigestKind>,
) -> StreamSlot {
    StreamSlot {
        stream: t.stream.clone(),
        offset,
        rows: rows.len() as i64,
        table: t.table.to_string(),
        digest: kind.map(|k| digest(k, rows, crcs)),
        digest_kind: kind.unwrap_or_default(),
        requests: plan.to_log(),
    }
}

/// The digest kind of a batch's entry: none at least once (nothing is logged), the
/// logged entry's own in a replay, else [`DigestKind::RowCrcs`].
pub(super) fn digest_kind(exactly: bool, replay: Option<&OffsetEntry>) -> Option<DigestKind> {
    let logged = replay.and_then(|e| e.main.as_ref().or(e.dlq.as_ref())).map(|s| s.digest_kind);
    exactly.then(|| logged.unwrap_or_else(new_entry_kind))
}

/// The kind new entries are logged with. Built with `--features failpoints`, the
/// failpoint `eo::log_row_bytes_digest` makes it the kind binaries before issue 29
/// logged, so a crash test can stand for an older binary's crash.
fn new_entry_kind() -> DigestKind {
    #[cfg(feature = "failpoints")]
    if fail::eval("eo::log_row_bytes_digest", |_| ()).is_some() {
        return DigestKind::RowBytes;
    }
    DigestKind::RowCrcs
}

/// The request split of every target's rows in one batch ([`Requests`]): fixed when
/// the batch is first logged (or taken from the log in a replay), and changed only for
/// the requests that did not land after BigQuery refused rows.
#[derive(Debug, Default)]
pub(super) struct Plans {
    pub(super) main: Requests,
    pub(super) side: BTreeMap<String, Requests>,
    pub(super) dlq: Requests,
}

impl Plans {
    /// Each target's split: the logged one in a replay, else a new one under the target's budget.
    pub(super) fn new(
        (main, side, dlq): (&Target, &BTreeMap<String, Target>, Option<&Target>),
        mapped: &Mapped,
        replay: Option<&OffsetEntry>,
    ) -> Result<Plans, String> {
        let pick = |target: &Target, rows: &Rows, logged: Option<&StreamSlot>| {
            let logged = match logged {
                Some(s) => Requests::logged(&s.requests, rows.len())
                    .map_err(|e| format!("{} (stream {}, offset {})", e, s.stream, s.offset))?,
                None => None,
            };
            Ok::<_, String>(logged.unwrap_or_else(|| target.plan(rows)))
        };
        let main = pick(main, &mapped.rows, replay.and_then(|e| e.main.as_ref()))?;
        let mut sides = BTreeMap::new();
        for (table, target) in side {
            let rows = mapped.side.get(table).map_or(Rows::empty(), |s| &s.rows);
            let logged = replay.and_then(|e| e.side.iter().find(|s| s.stream == target.stream));
            sides.insert(table.clone(), pick(target, rows, logged)?);
        }
        let dlq = match dlq {
            Some(d) => pick(d, &mapped.dlq_rows, replay.and_then(|e| e.dlq.as_ref()))?,
            None => Requests::default(),
        };
        Ok(Plans { main, side: sides, dlq })
    }

    /// The split of `which`'s rows.
    pub(super) fn of(&mut self, which: &Which) -> &mut Requests {
        match which {
            Which::Main => &mut self.main,
            Which::Side(t) => self.side.entry(t.clone()).or_default(),
            Which::Dlq => &mut self.dlq,
        }
    }
}

/// What one round of appends came to.
pub(super) enum Step {
    Done {
        already_existed: u64,
    },
    /// Rows of the main table or of a per-record table were refused, in one request.
    RowErrors {
        /// Whose rows.
        which: Which,
        /// The refused request (the ones before it landed).
        request: usize,
        /// Row index in the batch, and BigQuery's message.
        errors: Vec<(usize, String)>,
        /// Requests of this round that answered ALREADY_EXISTS before the refusal.
        already_existed: u64,
    },
    StreamGone {
        which: Which,
        stream: String,
        message: String,
    },
}

/// Where each per-record table's rows start in this round (its target's offset).
pub(super) type SideOffsets = BTreeMap<String, i64>;

/// A shard's targets, borrowed for one round of appends.
pub(super) struct Targets<'a> {
    pub(super) main: &'a mut Target,
    pub(super) side: &'a mut BTreeMap<String, Target>,
    pub(super) dlq: Option<&'a mut Target>,
}

/// Where one round's rows start: `x` on the table, `zs` on the per-record tables, `y`
/// on the dead-letter table (exactly-once); None appends without offsets.
#[derive(Clone, Copy)]
pub(super) struct Offsets<'a> {
    pub(super) x: Option<i64>,
    pub(super) zs: Option<&'a SideOffsets>,
    pub(super) y: Option<i64>,
}

/// Append the table rows, the per-record tables' rows, then the dead-letter rows, each
/// as its [`Plans`] split says, from the first request that has not landed.
pub(super) async fn append_both(
    client: &WriteClient,
    t: Targets<'_>,
    mapped: &mut Mapped,
    plans: &mut Plans,
    at: Offsets<'_>,
    retry: &mut RetryCtl,
) -> Result<Step, WriteError> {
    let Offsets { x, zs, y } = at;
    let gone = |which, e: WriteError| match e {
        WriteError::StreamGone { stream, message } if x.is_some() => Ok(Step::StreamGone { which, stream, message }),
        e => Err(e),
    };
    let Targets { main, side, dlq } = t;
    let mut already_existed = 0;
    if !mapped.rows.is_empty() {
        match send(main, client, &mut mapped.rows, &mut plans.main, x, retry).await {
            Ok(BatchAppend::Done { already_existed: n }) => already_existed += n,
            Ok(BatchAppend::RowErrors { request, errors, already_existed: n }) => {
                return Ok(Step::RowErrors {
                    which: Which::Main,
                    request,
                    errors,
                    already_existed: already_existed + n,
                })
            }
            Err(e) => return gone(Which::Main, e),
        }
    }
    for (table, rows) in mapped.side.iter_mut().filter(|(_, s)| !s.rows.is_empty()) {
        let target = side.get_mut(table).expect("a target is opened for every per-record table with rows");
        let z = zs.map(|zs| zs.get(table).copied().unwrap_or(target.next));
        let plan = plans.of(&Which::Side(table.clone()));
        match send(target, client, &mut rows.rows, plan, z, retry).await {
            Ok(BatchAppend::Done { already_existed: n }) => already_existed += n,
            Ok(BatchAppend::RowErrors { request, errors, already_existed: n }) => {
                let which = Which::Side(table.clone());
                return Ok(Step::RowErrors { which, request, errors, already_existed: already_existed + n });
            }
            Err(e) => return gone(Which::Side(table.clone()), e),
        }
    }
    crate::crash_point!("eo::after_main_append");
    if let (Some(d), false) = (dlq, mapped.dlq_rows.is_empty()) {
        match send(d, client, &mut mapped.dlq_rows, &mut plans.dlq, y, retry).await {
            Ok(BatchAppend::Done { already_existed: n }) => already_existed += n,
            Ok(BatchAppend::RowErrors { errors: errs, .. }) => {
                return Err(WriteError::Status {
                    what: "AppendRows",
                    code: "InvalidArgument".into(),
                    message: format!("the dead-letter table {} rejected rows: {errs:?}", d.table),
                    retryable: false,
                })
            }
            Err(e) => return gone(Which::Dlq, e),
        }
    }
    Ok(Step::Done { already_existed })
}

/// Append `rows` to `target` as `plan` says, the requests sharing the rows
/// ([`SharedRows`]) rather than copying them. The rows come back to the batch after:
/// every request was answered, so HTTP/2 has dropped them, unless a connection was
/// given up with a request still queued (then they are copied back).
async fn send(
    target: &mut Target,
    client: &WriteClient,
    rows: &mut Rows,
    plan: &mut Requests,
    at: Option<i64>,
    retry: &mut RetryCtl,
) -> Result<BatchAppend, WriteError> {
    let shared: SharedRows = Arc::new(std::mem::take(rows));
    let r = target.append_batch(client, &shared, plan, at, retry).await;
    *rows = Arc::try_unwrap(shared).unwrap_or_else(|still_queued| still_queued.as_ref().clone());
    r
}

/// Open a target on every per-record table this batch has rows for and the shard has
/// not written to yet (a new COMMITTED stream), and give each its table's descriptor.
pub(super) async fn open_side_targets(
    client: &WriteClient,
    side: &mut BTreeMap<String, Target>,
    mapped: &Mapped,
    exactly: bool,
    request_bytes: usize,
    retry: &mut RetryCtl,
) -> Result<()> {
    let budget = crate::bigquery::write::request_row_budget(request_bytes);
    for (key, rows) in &mapped.side {
        if !side.contains_key(key) {
            let how = Opening { replaying: false, exactly, budget };
            let t = open_target(client, &rows.table, None, how, rows.descriptor.clone(), retry).await?;
            side.insert(key.clone(), t);
        }
        side.get_mut(key).expect("opened above").set_descriptor(rows.descriptor.clone());
    }
    Ok(())
}

/// One slot per per-record table target (in table order), with this batch's rows for
/// it (none if it has none): every entry names every side stream, as `main` does.
pub(super) fn side_slots(
    side: &BTreeMap<String, Target>,
    zs: &SideOffsets,
    mapped: &Mapped,
    plans: &Plans,
    kind: Option<DigestKind>,
) -> Vec<StreamSlot> {
    side.iter()
        .map(|(t, target)| {
            let rows = mapped.side.get(t).map_or(Rows::empty(), |s| &s.rows);
            let plan = plans.side.get(t).cloned().unwrap_or_default();
            slot_of(target, zs.get(t).copied().unwrap_or(target.next), (rows, &[]), &plan, kind)
        })
        .collect()
}

/// The shard's writer: for BigQuery, the table and dead-letter targets as the logs
/// leave them.
pub(super) async fn open_writer(
    ctx: &JobCtx,
    shard: usize,
    last: Option<&OffsetEntry>,
    replaying: bool,
    retry: &mut RetryCtl,
) -> Result<Writer> {
    let Some(client) = &ctx.write_client else { return Ok(Writer::Stats) };
    let exactly = ctx.cfg.delivery == Delivery::ExactlyOnce;
    let budget = crate::bigquery::write::request_row_budget(ctx.cfg.run.append_request_bytes);
    let how = Opening { replaying, exactly, budget };
    let main = open_target(
        client,
        &ctx.cfg.table,
        last.and_then(|e| e.main.as_ref()),
        how,
        ctx.current().descriptor.clone(),
        retry,
    )
    .await?;
    // A replay finishes on the logged dead-letter stream even if the setting changed
    // since; the shard moves to the configured table afterwards.
    let dlq_table = match (last.and_then(|e| e.dlq.as_ref()), replaying) {
        (Some(s), true) => TableRef::from_stream(&s.stream).or_else(|| ctx.cfg.dlq.clone()),
        _ => ctx.cfg.dlq.clone(),
    };
    let dlq = match dlq_table {
        Some(t) => Some(
            open_target(client, &t, last.and_then(|e| e.dlq.as_ref()), how, ctx.dlq_descriptor.clone(), retry).await?,
        ),
        None => None,
    };
    // Per-record tables this shard wrote to: their logged streams, at the logged offsets.
    let mut side = BTreeMap::new();
    for slot in last.map(|e| e.side.as_slice()).unwrap_or_default() {
        let Some(t) = TableRef::from_stream(&slot.stream) else { continue };
        let target = open_target(client, &t, Some(slot), how, prost_types::DescriptorProto::default(), retry).await?;
        side.insert(t.to_string(), target);
    }
    tracing::debug!(shard, main = %main.stream, dlq = ?dlq.as_ref().map(|d| d.stream.clone()), side = side.len(), "write targets ready");
    Ok(Writer::Bq(Box::new(BqWriter { client: client.clone(), main, dlq, side })))
}

/// How a shard opens its targets.
#[derive(Clone, Copy)]
pub(super) struct Opening {
    /// Recovering a logged batch: start at its logged offset, not after it.
    pub(super) replaying: bool,
    /// COMMITTED streams with offsets (else the `_default` stream).
    pub(super) exactly: bool,
    /// Bytes of rows per AppendRows request.
    pub(super) budget: usize,
}

/// The stream a shard writes to on `table`: the logged one if it belongs to that
/// table, else a new one. Whether a stream still takes rows is not asked up front
/// (`WriteStream.commit_time` says nothing about that: storage.proto, "If a stream
/// is of `COMMITTED` type, then it will have a commit_time same as `create_time`"):
/// the first append's own error says so, and the shard then moves to a new stream.
pub(super) async fn open_target(
    client: &WriteClient,
    table: &TableRef,
    logged: Option<&StreamSlot>,
    how: Opening,
    descriptor: prost_types::DescriptorProto,
    retry: &mut RetryCtl,
) -> Result<Target> {
    let Opening { replaying, exactly, budget } = how;
    if !exactly {
        return Ok(Target::new(table.clone(), table.default_stream(), 0, descriptor, budget));
    }
    if let Some(slot) = logged.filter(|s| TableRef::from_stream(&s.stream).as_ref() == Some(table)) {
        let next = if replaying { slot.offset } else { slot.end() };
        return Ok(Target::new(table.clone(), slot.stream.clone(), next, descriptor, budget));
    }
    let stream = new_stream(client, table, retry).await?;
    Ok(Target::new(table.clone(), stream, 0, descriptor, budget))
}

pub(super) async fn new_stream(client: &WriteClient, table: &TableRef, retry: &mut RetryCtl) -> Result<String> {
    with_retries("CreateWriteStream", retry, || client.create_committed_stream(table))
        .await
        .with_context(|| format!("creating a COMMITTED write stream on {table}"))
}
