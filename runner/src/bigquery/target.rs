//! One write target (the table or the dead-letter table) as a shard sees it: a
//! stream, the next row offset in it, and a connection that is reopened on
//! transient failures.
//!
//! A batch goes out as one or more AppendRows requests, each under the documented
//! 10 MB request limit ([`split_requests`]). Request `i` carries the offset of its
//! first row, so a batch interrupted between requests is finished by a replay:
//! ALREADY_EXISTS for the requests that landed, OK for the rest. That holds only if
//! the replay sends the *same* requests: ALREADY_EXISTS says only that the offset is
//! below the stream's end, so a request that straddles the end of what landed would
//! be answered ALREADY_EXISTS and its tail never written. A batch's split is therefore
//! fixed once and logged with it ([`Requests`]); after row errors only the requests
//! that did not land are split again.
//!
//! Transient errors are retried on a new connection without an overall limit, with
//! capped, jittered exponential backoff: a quota episode or an outage stalls the job
//! instead of ending it. Each retry is logged and counted. A stop (drain or move)
//! ends the wait; the batch then stays in the offset log for the next owner.

use crate::bigquery::framed::SharedRows;
use crate::bigquery::rows::Rows;
use crate::bigquery::write::{split_requests, AppendConnection, AppendOutcome, WriteClient, WriteError};
use crate::bigquery::TableRef;
use crate::retry::{wait_unless_stopped, Backoff};
use crate::stats::JobStats;
use prost_types::DescriptorProto;
use std::sync::Arc;
use tokio::sync::watch;

/// What a shard gives a target so that retries can be counted and interrupted.
#[derive(Clone)]
pub struct RetryCtl {
    /// Becomes true on a drain or a move.
    pub stop: watch::Receiver<bool>,
    /// Where retries are counted.
    pub stats: Arc<JobStats>,
}

impl RetryCtl {
    /// Wait before retry `attempt` (1-based), unless a stop comes first.
    async fn wait(&mut self, attempt: u32, stream: &str, e: &WriteError) -> Result<(), WriteError> {
        self.stats.count_retry(&e.label());
        crate::retry::note_retry(crate::retry::Service::BigQuery);
        let delay = Backoff::BIGQUERY.delay(attempt).expect("BigQuery retries have no attempt limit");
        tracing::warn!(stream, attempt, delay_ms = delay.as_millis() as u64, error = %e, "transient BigQuery error; retrying");
        match wait_unless_stopped(delay, &mut self.stop).await {
            true => Ok(()),
            false => Err(WriteError::Interrupted { stream: stream.to_string() }),
        }
    }
}

/// How a whole batch's append went.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchAppend {
    /// Every request landed (or had landed before: `already_existed` of them).
    Done {
        /// Requests answered ALREADY_EXISTS.
        already_existed: u64,
    },
    /// BigQuery refused rows (indices into the batch) in request `request`; that
    /// request wrote nothing, the requests before it did.
    RowErrors {
        /// The request that was refused (requests before it landed).
        request: usize,
        /// Row index into the batch, and BigQuery's message.
        errors: Vec<(usize, String)>,
        /// Requests before it answered ALREADY_EXISTS in this call.
        already_existed: u64,
    },
}

/// How one target's rows of a batch go out: the row count of each AppendRows request,
/// and how many of those requests have landed in this process.
///
/// ```
/// use flexrun::bigquery::{rows::Rows, target::Requests};
/// let rows = Rows::from(vec![vec![0u8; 30_000], vec![1u8; 30_000], vec![2u8; 1_000]]);
/// let mut plan = Requests::split(&rows, 50_000);
/// assert_eq!(plan.sizes(), &[1, 2]);
/// // Request 1 was refused for its first row, which leaves the batch: request 0 stays
/// // as it landed and only the rest is split again. (Split from scratch, the two
/// // remaining rows would fit one request at the batch's offset, which BigQuery would
/// // answer ALREADY_EXISTS, and the second row would never be written.)
/// let rows: Rows = [&rows[0], &rows[2]].into_iter().collect();
/// plan.after_rejection(1, &rows, 50_000);
/// assert_eq!((plan.sizes(), plan.landed()), (&[1, 1][..], 1));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    sizes: Vec<u32>,
    landed: usize,
}

impl Requests {
    /// A new split of `rows` into requests of at most `budget` row bytes.
    pub fn split<'a>(rows: impl IntoIterator<Item = &'a [u8]>, budget: usize) -> Requests {
        let sizes = split_requests(rows, budget).into_iter().map(|r| r.len() as u32).collect();
        Requests { sizes, landed: 0 }
    }

    /// The split a log entry recorded (none recorded: one request, or an entry from
    /// before splits were logged), checked against the rows a replay re-read.
    pub fn logged(sizes: &[u32], rows: usize) -> Result<Option<Requests>, String> {
        if sizes.is_empty() {
            return Ok(None);
        }
        let sum: usize = sizes.iter().map(|n| *n as usize).sum();
        if sum != rows {
            return Err(format!("the logged requests {sizes:?} add up to {sum} rows, the batch has {rows}"));
        }
        Ok(Some(Requests { sizes: sizes.to_vec(), landed: 0 }))
    }

    /// Row count of each request.
    pub fn sizes(&self) -> &[u32] {
        &self.sizes
    }

    /// Requests that landed in this process.
    pub fn landed(&self) -> usize {
        self.landed
    }

    /// Rows the requests cover.
    pub fn rows(&self) -> usize {
        self.sizes.iter().map(|n| *n as usize).sum()
    }

    /// What a log entry keeps: the sizes when there are several requests. One request
    /// is atomic, so any later split of it is safe and nothing needs keeping.
    pub fn to_log(&self) -> Vec<u32> {
        if self.sizes.len() > 1 {
            self.sizes.clone()
        } else {
            Vec::new()
        }
    }

    /// After request `request` was refused and its refused rows removed (`rows` is the
    /// batch now): the requests before it landed and keep their rows and offsets; the
    /// rows from there on are split again.
    pub fn after_rejection(&mut self, request: usize, rows: &Rows, budget: usize) {
        let request = request.min(self.sizes.len());
        let prefix: usize = self.sizes[..request].iter().map(|n| *n as usize).sum();
        self.sizes.truncate(request);
        let rest = Requests::split(rows.iter().skip(prefix), budget);
        self.sizes.extend(rest.sizes);
        self.landed = request;
    }

    /// The stream was replaced: nothing has landed on the new one.
    pub fn restart(&mut self) {
        self.landed = 0;
    }

    fn ranges(&self) -> Vec<std::ops::Range<usize>> {
        let mut start = 0;
        self.sizes
            .iter()
            .map(|n| {
                let r = start..start + *n as usize;
                start = r.end;
                r
            })
            .collect()
    }
}

/// A table's write stream for one shard.
pub struct Target {
    /// The table.
    pub table: TableRef,
    /// The stream name (a COMMITTED stream, or the table's `_default`).
    pub stream: String,
    /// The next row offset (COMMITTED streams only).
    pub next: i64,
    descriptor: DescriptorProto,
    conn: Option<AppendConnection>,
    /// Row bytes per request (see [`crate::bigquery::write::request_row_budget`]).
    request_budget: usize,
}

impl Target {
    /// A target on `stream` starting at row offset `next`.
    pub fn new(
        table: TableRef,
        stream: String,
        next: i64,
        descriptor: DescriptorProto,
        request_budget: usize,
    ) -> Target {
        Target { table, stream, next, descriptor, conn: None, request_budget }
    }

    /// Switch to a new stream (the old one is gone); rows start at offset 0.
    pub fn replace_stream(&mut self, stream: String) {
        self.stream = stream;
        self.next = 0;
        self.conn = None;
    }

    /// A new split of `rows` under this target's request budget.
    pub fn plan(&self, rows: &Rows) -> Requests {
        Requests::split(rows, self.request_budget)
    }

    /// Row bytes per request.
    pub fn request_budget(&self) -> usize {
        self.request_budget
    }

    /// Write rows with another row descriptor from now on (a replay mapped with the
    /// schema its batch was logged with, or the table's schema changed). The connection
    /// is closed and the next append opens one that sends the new descriptor first:
    /// storage.proto says the `writer_schema` "must be specified at the initial request
    /// and currently, it will be ignored if specified in following requests".
    pub fn set_descriptor(&mut self, descriptor: DescriptorProto) {
        if descriptor != self.descriptor {
            self.descriptor = descriptor;
            self.conn = None;
        }
    }

    /// Append a batch's rows starting at `offset` (None: the `_default` stream, no
    /// offsets) as the requests `plan` says, from the first one that has not landed.
    pub async fn append_batch(
        &mut self,
        client: &WriteClient,
        rows: &SharedRows,
        plan: &mut Requests,
        offset: Option<i64>,
        ctl: &mut RetryCtl,
    ) -> Result<BatchAppend, WriteError> {
        if plan.rows() != rows.len() {
            return Err(WriteError::Split { stream: self.stream.clone(), planned: plan.rows(), rows: rows.len() });
        }
        let mut already_existed = 0;
        let requests = plan.ranges();
        let many = requests.len() > 1;
        for (i, r) in requests.into_iter().enumerate().skip(plan.landed) {
            if i > 0 {
                crate::crash_point!("eo::between_requests");
            }
            let at = offset.map(|o| o + r.start as i64);
            match self.append(client, rows, r.clone(), at, ctl).await? {
                AppendOutcome::Appended => {}
                AppendOutcome::AlreadyExists => already_existed += 1,
                AppendOutcome::RowErrors(errs) => {
                    let errors = errs.into_iter().map(|(j, m)| (r.start + j, m)).collect();
                    return Ok(BatchAppend::RowErrors { request: i, errors, already_existed });
                }
            }
            plan.landed = i + 1;
            if many {
                tracing::debug!(stream = %self.stream, request = i, rows = r.len(), "request of a multi-request batch appended");
            }
        }
        Ok(BatchAppend::Done { already_existed })
    }

    /// Append `rows[range]` in one request, at `offset` when given, retrying transient
    /// failures on a new connection. A retried append with an offset is safe: if the
    /// first try landed, the retry gets ALREADY_EXISTS.
    async fn append(
        &mut self,
        client: &WriteClient,
        rows: &SharedRows,
        range: std::ops::Range<usize>,
        offset: Option<i64>,
        ctl: &mut RetryCtl,
    ) -> Result<AppendOutcome, WriteError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            if self.conn.is_none() {
                match client.open(&self.stream, self.descriptor.clone()).await {
                    Ok(c) => self.conn = Some(c),
                    Err(e) if e.is_retryable() => {
                        ctl.wait(attempt, &self.stream, &e).await?;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            let conn = self.conn.as_mut().expect("connection opened above");
            match conn.append_shared(rows, range.clone(), offset).await {
                Ok(o) => return Ok(o),
                Err(e) if e.is_retryable() => {
                    self.conn = None;
                    ctl.wait(attempt, &self.stream, &e).await?;
                }
                Err(e) => {
                    self.conn = None;
                    return Err(e);
                }
            }
        }
    }
}

/// Run `f` until it succeeds or fails for good, retrying transient errors the same
/// way appends are retried (used for CreateWriteStream).
pub async fn with_retries<T, F, Fut>(what: &str, ctl: &mut RetryCtl, mut f: F) -> Result<T, WriteError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, WriteError>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        match f().await {
            Err(e) if e.is_retryable() => ctl.wait(attempt, what, &e).await?,
            r => return r,
        }
    }
}
