//! `flexrun dlq replay`: dead-letter rows back through the job's mapping (with its UDF,
//! or a fixed one given as a parameter) into its table, exactly once.
//!
//! 1. **Plan.** Read the dead-letter rows (all, or those a `WHERE` condition selects),
//!    leave out those the [`ledger`] names, and fix the list of record keys in
//!    `plan.json` under the job's checkpoint directory (`<job>/dlq-replay/`), with two
//!    new COMMITTED streams: one on the table, one on the ledger.
//! 2. **Batches**, with the job's protocol ([`crate::progress`]): log the batch's range
//!    of the plan and its row offsets on both streams, append the mapped rows at their
//!    offset, append the ledger rows at theirs, log the commit. After a crash anywhere
//!    the logged batch is sent again at the same offsets, and BigQuery answers
//!    ALREADY_EXISTS for what had landed.
//! 3. Rows that fail again stay in the dead-letter table, not in the ledger, and are
//!    reported; a later replay (after another fix) tries them again.
//!
//! A CDC job's (`cdcPrimaryKey`) rows go to the table's `_default` stream instead, without
//! offsets, as BigQuery requires of CDC writes: each keeps its record's sequence number,
//! so what is exact is each key's final state, as for the job itself ([`main_stream`]).
//!
//! A batch's rows fit one AppendRows request, so a refusal means none of them landed:
//! the refused rows leave the batch (reported as still failing, and recorded in the
//! log entry so that a resumed batch leaves them out too), and the batch is logged
//! again and re-sent.

pub mod ledger;
pub mod record;

use super::map::dlq::Payload;
use super::map::transform::{Input, Mapper};
use super::setup::config::KafkaToBqConfig;
use crate::bigquery::rows::Rows;
use crate::bigquery::target::{BatchAppend, Requests, RetryCtl, Target};
use crate::bigquery::write::{framed_len, request_row_budget, WriteClient};
use crate::bigquery::{proto, rest, Endpoints, TableRef};
use crate::progress::{OffsetEntry, Purge, Recovery, ShardLog, StreamSlot};
use crate::record::RecordError;
use anyhow::{bail, Context, Result};
use ledger::Outcome;
use record::{DeadLetterRow, Recovered};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most dead-letter rows one replay reads (one query page).
pub const MAX_ROWS: usize = 100_000;

/// What to replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// A SQL condition on the dead-letter table's columns (`errorMessage LIKE '%id%'`).
    pub where_sql: Option<String>,
    /// Map and report, write nothing.
    pub dry_run: bool,
    /// Also take the rows that name no job (written by Google's template or an older
    /// flexrun) whose record came from this topic. Rows that name no job are refused
    /// otherwise: nothing says they are this job's.
    pub unnamed_topic: Option<String>,
}

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayReport {
    /// Dead-letter rows the query selected.
    pub selected: usize,
    /// Of those, records the ledger already names (or duplicates of one record).
    pub already_replayed: usize,
    /// A plan left by an interrupted replay was finished instead of starting a new one.
    pub resumed: bool,
    /// Batch logged before a crash and sent again (its requests that had landed
    /// answered ALREADY_EXISTS).
    pub replayed_batch: Option<u64>,
    /// Requests answered ALREADY_EXISTS.
    pub already_existed: u64,
    /// Rows written to the table.
    pub written: u64,
    /// Records the UDF dropped (marked, no row).
    pub dropped: u64,
    /// Records that still fail: key and why (left in the dead-letter table, unmarked).
    pub failing: Vec<(String, String)>,
    /// Rows of other jobs in the same dead-letter table, left alone.
    pub other_jobs: usize,
    /// Rows of the job's other topics, left to their own replays.
    pub other_topics: usize,
    /// Rows that name no job, left alone (`--topic` takes those of one topic).
    pub unnamed: usize,
    /// Batches committed in this run.
    pub batches: u64,
}

/// The fixed list of records one replay handles, and its streams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Plan {
    keys: Vec<String>,
    where_sql: Option<String>,
    main_stream: String,
    ledger_stream: String,
    /// The ledger's `replayedAt` for every row of this plan (fixed, so that a resent
    /// batch encodes the same ledger rows).
    started_ms: i64,
    done: bool,
}

const PLAN_FILE: &str = "plan.json";

/// What one record of a batch became.
enum Fate {
    Row(Vec<u8>),
    Dropped,
    Failed(String),
}

/// Replay the dead letters of `cfg`'s job into its table (see the module notes). A plan
/// an interrupted replay left is finished first; then the rows it did not name (dead
/// letters written since it was made) get a plan of their own, so one replay that exits 0
/// leaves nothing it could replay behind (the lifecycle checker found rows left so).
pub async fn run(cfg: KafkaToBqConfig, root: &Path, ep: Endpoints, opts: ReplayOptions) -> Result<ReplayReport> {
    let first = run_plan(cfg.clone(), root, ep.clone(), opts.clone()).await?;
    if !first.resumed || opts.dry_run {
        return Ok(first);
    }
    let then = run_plan(cfg, root, ep, opts).await?;
    Ok(first.then(then))
}

impl ReplayReport {
    /// This report followed by `next`'s (a finished plan, then a new one): the rows the
    /// new plan selected, and what both did.
    fn then(self, next: ReplayReport) -> ReplayReport {
        ReplayReport {
            selected: next.selected,
            already_replayed: next.already_replayed,
            resumed: true,
            replayed_batch: self.replayed_batch,
            already_existed: self.already_existed + next.already_existed,
            written: self.written + next.written,
            dropped: self.dropped + next.dropped,
            failing: next.failing,
            other_jobs: next.other_jobs,
            other_topics: next.other_topics,
            unnamed: next.unnamed,
            batches: self.batches + next.batches,
        }
    }
}

/// One plan: the unfinished one, else a new one (see [`run`]).
async fn run_plan(cfg: KafkaToBqConfig, root: &Path, ep: Endpoints, opts: ReplayOptions) -> Result<ReplayReport> {
    let dlq = cfg.dlq.clone().ok_or_else(|| {
        crate::usage(format!(
            "job {}: no outputDeadletterTable, so there are no dead letters to replay (give it with --parameters outputDeadletterTable=project:dataset.table)",
            cfg.job_name
        ))
    })?;
    if cfg.dynamic.is_some() {
        return Err(crate::usage("schemaFormat=SCHEMA_REGISTRY routes each record to its own table; dlq replay writes to one table (outputTableSpec) and does not route"));
    }
    let dir = root.join(&cfg.job_name).join("dlq-replay");
    let _lock = crate::control::lock::JobLock::acquire(&dir, &format!("{} (dlq replay)", cfg.job_name))?;
    let client = rest::client(&ep).await?;
    let dest = super::setup::table::prepare(&cfg, Some(&ep), false).await?;
    let table = dest.table.clone();
    let mapping = super::job::job_mapping(&cfg, dest)?;
    let payload = match mapping.mapper.input() {
        Input::Json => Payload::Text,
        Input::Avro(_) | Input::Proto(_) => Payload::Bytes,
    };
    let ledger_table = ledger::table_for(&dlq);
    rest::ensure_table(&client, &ep, &ledger_table, &ledger::schema())
        .await
        .with_context(|| format!("preparing the replay ledger {ledger_table}"))?;
    let mut report = ReplayReport::default();
    let old = load_plan(&dir)?.filter(|p| !p.done);
    let where_sql = match &old {
        Some(p) => {
            if p.where_sql != opts.where_sql {
                eprintln!("note: finishing the replay an earlier run started (WHERE {}); this run's --where applies to the next replay", p.where_sql.as_deref().unwrap_or("TRUE"));
            }
            p.where_sql.clone()
        }
        None => opts.where_sql.clone(),
    };
    let rows = read_dead_letters(&client, &dlq, where_sql.as_deref()).await?;
    let rows = own_rows(rows, &cfg, payload, opts.unnamed_topic.as_deref(), &mut report);
    report.selected = rows.len();
    let done = ledger::replayed_keys(&client, &ledger_table).await?;
    let (items, order) = index(rows, payload, &mut report.failing);
    report.already_replayed = report.selected - report.failing.len() - order.len();
    if opts.dry_run {
        return Ok(dry_run(&mapping.mapper, &items, &order, &done, report));
    }
    let w = WriteClient::connect(&ep).await?;
    let plan = match old {
        Some(p) => {
            if let Some(k) = p.keys.iter().find(|k| !items.contains_key(*k)) {
                bail!("the unfinished replay in {} names dead-letter record {k}, which {dlq} no longer holds (rows were deleted since); remove {} to start over", dir.display(), dir.join(PLAN_FILE).display());
            }
            report.resumed = true;
            p
        }
        None => {
            let keys: Vec<String> = order.iter().filter(|k| !done.contains(*k)).cloned().collect();
            report.already_replayed += order.len() - keys.len();
            let p = Plan {
                keys,
                where_sql,
                main_stream: main_stream(&cfg, &w, &table).await?,
                ledger_stream: w.create_committed_stream(&ledger_table).await?,
                started_ms: chrono::Utc::now().timestamp_millis(),
                done: false,
            };
            start_plan(&dir, &p)?;
            p
        }
    };
    let targets = Targets {
        main: Target::new(table, plan.main_stream.clone(), 0, mapping.descriptor.clone(), budget(&cfg)),
        ledger: Target::new(
            ledger_table,
            plan.ledger_stream.clone(),
            0,
            proto::descriptor(&ledger::schema(), "Replayed"),
            budget(&cfg),
        ),
    };
    let mut b = Batches { cfg: &cfg, mapper: &mapping.mapper, items: &items, plan: &plan, w, targets, report };
    b.run(&dir).await?;
    save_plan(&dir, &Plan { done: true, ..plan.clone() })?;
    Ok(b.report)
}

/// Where the replayed rows go: a COMMITTED stream of the replay's own, appended at
/// offsets (exactly once), or for a CDC job the `_default` stream BigQuery requires ("You
/// must use the Storage Write API in the default stream"). A CDC row carries the record's
/// own sequence number (its Kafka offset, or its `cdcSequenceField`), so a replayed change
/// applies by key as it would have: it loses to a newer change of the key, and sending it
/// again after a crash changes nothing. What is exact for CDC is each key's final state.
async fn main_stream(cfg: &KafkaToBqConfig, w: &WriteClient, table: &TableRef) -> Result<String> {
    match cfg.cdc {
        Some(_) => Ok(table.default_stream()),
        None => Ok(w.create_committed_stream(table).await?),
    }
}

/// Whether rows go to the table at offsets (not for CDC's `_default` stream).
fn at_offsets(cfg: &KafkaToBqConfig) -> bool {
    cfg.cdc.is_none()
}

fn budget(cfg: &KafkaToBqConfig) -> usize {
    request_row_budget(cfg.run.append_request_bytes)
}

/// The rows by key, and the keys in the order read (each record once: at-least-once
/// delivery can dead-letter a record twice). Rows that cannot be read back into a
/// record go straight to `failing`.
fn index(
    rows: Vec<DeadLetterRow>,
    payload: Payload,
    failing: &mut Vec<(String, String)>,
) -> (HashMap<String, Recovered>, Vec<String>) {
    let mut items = HashMap::new();
    let mut order = Vec::new();
    for row in rows {
        match row.recover(payload) {
            Ok(rec) => {
                if let std::collections::hash_map::Entry::Vacant(v) = items.entry(row.key(&rec)) {
                    order.push(v.key().clone());
                    v.insert(rec);
                }
            }
            Err(why) => failing.push((row.key(&Recovered::default()), why.to_string())),
        }
    }
    (items, order)
}

/// What a replay would do, without writing.
fn dry_run(
    mapper: &Mapper,
    items: &HashMap<String, Recovered>,
    order: &[String],
    done: &std::collections::HashSet<String>,
    mut report: ReplayReport,
) -> ReplayReport {
    let mut out = Vec::new();
    for key in order {
        if done.contains(key) {
            report.already_replayed += 1;
            continue;
        }
        match fate(mapper, &items[key], &mut out) {
            Fate::Row(_) => report.written += 1,
            Fate::Dropped => report.dropped += 1,
            Fate::Failed(why) => report.failing.push((key.clone(), why)),
        }
    }
    report
}

/// Map one record as the job does (metadata columns included).
fn fate(mapper: &Mapper, rec: &Recovered, out: &mut Vec<u8>) -> Fate {
    out.clear();
    let meta = mapper.wants_meta().then(|| rec.meta());
    match mapper.map_message(rec.key.as_deref(), &rec.value, meta.as_ref(), out) {
        Ok(()) => Fate::Row(out.clone()),
        Err(RecordError::Dropped) => Fate::Dropped,
        Err(e) => Fate::Failed(e.to_string()),
    }
}

/// BigQuery refused the `--where` condition (HTTP 400): a bad flag, which the CLI
/// reports with exit status 2. Nothing was read or written.
#[derive(Debug, thiserror::Error)]
#[error("--where {condition:?}: BigQuery refused the condition ({reason}); expected a SQL boolean expression over the dead-letter table's columns (timestamp, payloadString, payloadBytes, errorMessage, stacktrace). Nothing was replayed")]
pub struct BadWhere {
    /// The condition as given.
    pub condition: String,
    /// BigQuery's answer.
    pub reason: String,
}

/// The rows this replay may take: the job's own rows of the topic it replays, and rows
/// that name no job only when `unnamed_topic` picks their topic. The others are counted.
fn own_rows(
    rows: Vec<DeadLetterRow>,
    cfg: &KafkaToBqConfig,
    payload: Payload,
    unnamed_topic: Option<&str>,
    report: &mut ReplayReport,
) -> Vec<DeadLetterRow> {
    let job = cfg.parent.as_deref().unwrap_or(&cfg.job_name);
    let topic = &cfg.source.topic;
    rows.into_iter()
        .filter(|row| match row.owner(job, topic) {
            record::Owner::Mine => true,
            record::Owner::OtherJob(_) => {
                report.other_jobs += 1;
                false
            }
            record::Owner::OtherTopic(_) => {
                report.other_topics += 1;
                false
            }
            record::Owner::Unnamed => {
                let picked = unnamed_topic.is_some_and(|t| row.recover(payload).is_ok_and(|r| r.topic == t));
                report.unnamed += usize::from(!picked);
                picked
            }
        })
        .collect()
}

/// Every selected dead-letter row.
async fn read_dead_letters(
    c: &gcp_bigquery_client::Client,
    dlq: &TableRef,
    where_sql: Option<&str>,
) -> Result<Vec<DeadLetterRow>> {
    let mut sql = format!(
        "SELECT payloadString, payloadBytes, errorMessage, attributes FROM `{}.{}.{}`",
        dlq.project, dlq.dataset, dlq.table
    );
    if let Some(w) = where_sql {
        sql.push_str(&format!(" WHERE {w}"));
    }
    let rows = match (rest::query_rows(c, &dlq.project, &sql).await, where_sql) {
        (Ok(rows), _) => rows,
        (Err(e), Some(w)) if e.is_bad_request() => {
            return Err(BadWhere { condition: w.to_string(), reason: e.to_string() }.into())
        }
        (Err(e), w) => {
            let w = w.map(|w| format!(" WHERE {w}")).unwrap_or_default();
            return Err(anyhow::Error::new(e).context(format!("reading the dead-letter table {dlq}{w}")));
        }
    };
    if rows.len() >= MAX_ROWS {
        bail!("the query selects {MAX_ROWS} or more dead-letter rows, more than one replay reads: narrow it with --where (for example on timestamp), and replay in parts");
    }
    rows.into_iter()
        .map(|r| {
            let b64 = r.get(1).cloned().flatten().unwrap_or_default();
            let payload_bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64.as_bytes())
                .with_context(|| format!("payloadBytes of a row of {dlq} is not base64"))?;
            Ok(DeadLetterRow {
                payload_string: r.first().cloned().flatten().unwrap_or_default(),
                payload_bytes,
                error: r.get(2).cloned().flatten(),
                attributes: r.get(3).cloned().flatten().map(|a| record::parse_attributes(&a)).unwrap_or_default(),
            })
        })
        .collect()
}

fn load_plan(dir: &Path) -> Result<Option<Plan>> {
    let path = dir.join(PLAN_FILE);
    match std::fs::read(&path) {
        Ok(b) => Ok(Some(serde_json::from_slice(&b).with_context(|| format!("reading {}", path.display()))?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Write the plan atomically (temporary file, fsync, rename, fsync the directory).
fn save_plan(dir: &Path, p: &Plan) -> Result<()> {
    let path = dir.join(PLAN_FILE);
    let tmp = dir.join(format!("{PLAN_FILE}.tmp"));
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(p).expect("a plan serialises"))?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().with_context(|| format!("writing {}", path.display()))
}

/// A new plan: its logs start empty (the last plan's are done with), then the plan.
fn start_plan(dir: &Path, p: &Plan) -> Result<()> {
    let logs = log_dir(dir);
    if logs.exists() {
        std::fs::remove_dir_all(&logs).with_context(|| format!("removing {}", logs.display()))?;
    }
    save_plan(dir, p)
}

fn log_dir(dir: &Path) -> PathBuf {
    dir.join("log")
}

/// The table's and the ledger's write targets.
struct Targets {
    main: Target,
    ledger: Target,
}

/// The batches of one plan.
struct Batches<'a> {
    cfg: &'a KafkaToBqConfig,
    mapper: &'a Mapper,
    items: &'a HashMap<String, Recovered>,
    plan: &'a Plan,
    w: WriteClient,
    targets: Targets,
    report: ReplayReport,
}

/// One batch: the plan range it covers and what each record in it became.
struct Batch {
    lo: usize,
    hi: usize,
    fates: Vec<Fate>,
}

impl Batch {
    fn rows(&self) -> Rows {
        self.fates.iter().filter_map(|f| if let Fate::Row(r) = f { Some(r) } else { None }).collect()
    }
}

impl Batches<'_> {
    async fn run(&mut self, dir: &Path) -> Result<()> {
        // A lost commit entry costs a replay that BigQuery answers ALREADY_EXISTS.
        let mut log = ShardLog::open_with(&log_dir(dir), Purge::Sync)?.with_commits_synced_on_rotation();
        let (mut next, mut id, mut logged) = match log.recover()? {
            Recovery::Fresh => (0, 1, None),
            Recovery::Clean { commit, last } => {
                let last = last.context("the replay log has a commit without its offset entry")?;
                self.targets.main.next = last.main.as_ref().map_or(0, StreamSlot::end);
                self.targets.ledger.next = last.dlq.as_ref().map_or(0, StreamSlot::end);
                (commit.positions.get(&0).copied().unwrap_or(0) as usize, commit.batch + 1, None)
            }
            Recovery::Replay(e) => {
                self.targets.main.next = e.main.as_ref().map_or(0, |s| s.offset);
                self.targets.ledger.next = e.dlq.as_ref().map_or(0, |s| s.offset);
                self.report.replayed_batch = Some(e.batch);
                (e.ranges.get(&0).map_or(0, |r| r.0 as usize), e.batch, Some(e))
            }
        };
        while next < self.plan.keys.len() {
            let mut batch = match &logged {
                Some(e) => self.map_logged(e)?,
                None => self.cut(next),
            };
            self.send(&mut log, id, &mut batch, logged.take()).await?;
            next = batch.hi;
            id += 1;
        }
        Ok(())
    }

    /// The next batch from plan index `lo`: up to `--batch-rows` records whose rows fit
    /// one AppendRows request.
    fn cut(&self, lo: usize) -> Batch {
        let (mut fates, mut bytes, mut out) = (Vec::new(), 0usize, Vec::new());
        let budget = budget(self.cfg);
        for key in &self.plan.keys[lo..] {
            if fates.len() >= self.cfg.run.batch_rows.max(1) {
                break;
            }
            let f = fate(self.mapper, self.item(key), &mut out);
            if let Fate::Row(r) = &f {
                if bytes + framed_len(r) > budget && !fates.is_empty() {
                    break;
                }
                bytes += framed_len(r);
            }
            fates.push(f);
        }
        Batch { lo, hi: lo + fates.len(), fates }
    }

    /// A batch logged before a crash: the same range, mapped again, with the rows
    /// BigQuery refused then left out again.
    fn map_logged(&self, e: &OffsetEntry) -> Result<Batch> {
        let (lo, hi) =
            e.ranges.get(&0).map(|r| (r.0 as usize, r.1 as usize)).context("the replay log entry has no range")?;
        if hi > self.plan.keys.len() || lo > hi {
            bail!("the replay log names records {lo}..{hi} of a plan of {}", self.plan.keys.len());
        }
        let mut out = Vec::new();
        let mut fates: Vec<Fate> =
            self.plan.keys[lo..hi].iter().map(|k| fate(self.mapper, self.item(k), &mut out)).collect();
        for (_, i, why) in &e.rejected {
            if let Some(f) = fates.get_mut(*i as usize - lo) {
                *f = Fate::Failed(why.clone());
            }
        }
        Ok(Batch { lo, hi, fates })
    }

    fn item(&self, key: &str) -> &Recovered {
        self.items.get(key).expect("every planned key was read (checked when the plan was loaded)")
    }

    /// The ledger rows of `b`, naming the job the user runs (not a topic's pipeline of
    /// it, `<job>.<topic>`): a replay killed while the job read one topic is finished
    /// with the same rows after it became a list (lifecycle checker, seed 2056).
    fn ledger_rows(&self, b: &Batch) -> Rows {
        let p = self.plan;
        let job = self.cfg.parent.as_deref().unwrap_or(&self.cfg.job_name);
        b.fates
            .iter()
            .zip(&p.keys[b.lo..b.hi])
            .filter_map(|(f, k)| {
                let outcome = match f {
                    Fate::Row(_) => Outcome::Written,
                    Fate::Dropped => Outcome::Dropped,
                    Fate::Failed(_) => return None,
                };
                Some(ledger::encode(k, p.started_ms, &self.targets.main.table, job, outcome))
            })
            .collect()
    }

    fn entry(&self, id: u64, b: &Batch, rows: &Rows, ledger: &Rows, rejected: &[(i32, i64, String)]) -> OffsetEntry {
        let slot = |t: &Target, rows: &Rows| StreamSlot {
            stream: t.stream.clone(),
            offset: t.next,
            rows: rows.len() as i64,
            table: t.table.to_string(),
            digest: Some(super::run::batch::rows_digest(rows)),
            digest_kind: crate::progress::DigestKind::RowBytes,
            requests: Vec::new(),
        };
        OffsetEntry {
            batch: id,
            ranges: BTreeMap::from([(0, (b.lo as i64, b.hi as i64))]),
            positions: BTreeMap::from([(0, b.hi as i64)]),
            main: Some(slot(&self.targets.main, rows)),
            dlq: Some(slot(&self.targets.ledger, ledger)),
            rejected: rejected.to_vec(),
            processed_ms: Some(self.plan.started_ms),
            ..Default::default()
        }
    }

    /// Log, append to the table, append to the ledger, commit.
    async fn send(&mut self, log: &mut ShardLog, id: u64, b: &mut Batch, logged: Option<OffsetEntry>) -> Result<()> {
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let mut ctl = RetryCtl { stop, stats: Arc::new(crate::stats::JobStats::default()) };
        let mut rejected = logged.as_ref().map(|e| e.rejected.clone()).unwrap_or_default();
        let mut first = true;
        let rows = loop {
            let (rows, ledger) = (Arc::new(b.rows()), self.ledger_rows(b));
            let entry = self.entry(id, b, &rows, &ledger, &rejected);
            match (&logged, first) {
                (Some(l), true) => same_as_logged(l, &entry)?,
                _ => {
                    log.log_offsets(&entry)?;
                    crate::crash_point!("replay::after_offset_log");
                }
            }
            first = false;
            let mut plan = Requests::split(rows.as_ref(), budget(self.cfg));
            let at = at_offsets(self.cfg).then_some(self.targets.main.next);
            match self.targets.main.append_batch(&self.w, &rows, &mut plan, at, &mut ctl).await? {
                BatchAppend::Done { already_existed } => {
                    self.report.already_existed += already_existed;
                    break rows;
                }
                BatchAppend::RowErrors { errors, .. } => {
                    self.refuse(b, &errors, &mut rejected);
                }
            }
        };
        crate::crash_point!("replay::between_tables");
        let ledger = Arc::new(self.ledger_rows(b));
        let mut plan = Requests::split(ledger.as_ref(), budget(self.cfg));
        let at = Some(self.targets.ledger.next);
        match self.targets.ledger.append_batch(&self.w, &ledger, &mut plan, at, &mut ctl).await? {
            BatchAppend::Done { already_existed } => self.report.already_existed += already_existed,
            BatchAppend::RowErrors { errors, .. } => {
                bail!("BigQuery refused ledger rows of {}: {errors:?}", self.targets.ledger.table)
            }
        }
        crate::crash_point!("replay::before_commit_log");
        log.log_commit(&crate::progress::CommitEntry {
            batch: id,
            positions: BTreeMap::from([(0, b.hi as i64)]),
            ..Default::default()
        })?;
        drop(stop_tx);
        self.targets.main.next += rows.len() as i64;
        self.targets.ledger.next += ledger.len() as i64;
        self.tally(b);
        Ok(())
    }

    /// BigQuery refused rows (indices into the batch's rows): those records fail.
    fn refuse(&self, b: &mut Batch, errors: &[(usize, String)], rejected: &mut Vec<(i32, i64, String)>) {
        let row_at: Vec<usize> =
            b.fates.iter().enumerate().filter(|(_, f)| matches!(f, Fate::Row(_))).map(|(i, _)| i).collect();
        for (r, why) in errors {
            if let Some(&i) = row_at.get(*r) {
                let why = format!("BigQuery rejected the row: {why}");
                rejected.push((0, (b.lo + i) as i64, why.clone()));
                b.fates[i] = Fate::Failed(why);
            }
        }
        tracing::warn!(refused = errors.len(), table = %self.targets.main.table, "BigQuery refused replayed rows; they stay dead letters");
    }

    fn tally(&mut self, b: &Batch) {
        for (f, k) in b.fates.iter().zip(&self.plan.keys[b.lo..b.hi]) {
            match f {
                Fate::Row(_) => self.report.written += 1,
                Fate::Dropped => self.report.dropped += 1,
                Fate::Failed(why) => self.report.failing.push((k.clone(), why.clone())),
            }
        }
        self.report.batches += 1;
    }
}

/// A batch sent again after a crash must carry what was logged: the same rows on both
/// streams at the same offsets. Else the mapping changed since (a new UDF, say), and
/// sending would put other rows at offsets BigQuery already holds.
fn same_as_logged(logged: &OffsetEntry, now: &OffsetEntry) -> Result<()> {
    let differs = |a: &Option<StreamSlot>, b: &Option<StreamSlot>| match (a, b) {
        (Some(a), Some(b)) => {
            (a.stream.as_str(), a.offset, a.rows, a.digest) != (b.stream.as_str(), b.offset, b.rows, b.digest)
        }
        _ => a.is_some() != b.is_some(),
    };
    if differs(&logged.main, &now.main) || differs(&logged.dlq, &now.dlq) {
        bail!(
            "the interrupted replay's batch {} maps to other rows now than when it was logged (the UDF, the schema or the parameters changed since); no row was written. Replay with the parameters it started with, or remove the dlq-replay directory of the job to start over (rows of that batch may then land twice)",
            logged.batch
        );
    }
    Ok(())
}
