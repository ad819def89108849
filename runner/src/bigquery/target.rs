//! One write target (the table or the dead-letter table) as a shard sees it: a
//! stream, the next row offset in it, and a connection that is reopened on
//! transient failures.
//!
//! A batch goes out as one or more AppendRows requests, each under the documented
//! 10 MB request limit ([`split_requests`]). Request `i` carries the offset of its
//! first row, so a batch interrupted between requests is finished by a replay:
//! ALREADY_EXISTS for the requests that landed, OK for the rest.
//!
//! Transient errors are retried on a new connection without an overall limit, with
//! capped, jittered exponential backoff: a quota episode or an outage stalls the job
//! instead of ending it. Each retry is logged and counted. A stop (drain or move)
//! ends the wait; the batch then stays in the offset log for the next owner.

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
    /// BigQuery refused rows (indices into the batch) in one request; that request
    /// wrote nothing, earlier requests did.
    RowErrors(Vec<(usize, String)>),
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

    /// Write rows with another row descriptor from now on (a replay mapped with the
    /// schema its batch was logged with).
    pub fn set_descriptor(&mut self, descriptor: DescriptorProto) {
        if descriptor != self.descriptor {
            self.descriptor = descriptor;
            self.conn = None;
        }
    }

    /// Append a batch's rows starting at `offset` (None: the `_default` stream, no
    /// offsets), as consecutive requests under the request limit.
    pub async fn append_batch(
        &mut self,
        client: &WriteClient,
        rows: &[Vec<u8>],
        offset: Option<i64>,
        ctl: &mut RetryCtl,
    ) -> Result<BatchAppend, WriteError> {
        let mut already_existed = 0;
        let requests = split_requests(rows, self.request_budget);
        let many = requests.len() > 1;
        for (i, r) in requests.into_iter().enumerate() {
            if i > 0 {
                crate::crash_point!("eo::between_requests");
            }
            let at = offset.map(|o| o + r.start as i64);
            match self.append(client, &rows[r.clone()], at, ctl).await? {
                AppendOutcome::Appended => {}
                AppendOutcome::AlreadyExists => already_existed += 1,
                AppendOutcome::RowErrors(errs) => {
                    return Ok(BatchAppend::RowErrors(errs.into_iter().map(|(j, m)| (r.start + j, m)).collect()))
                }
            }
            if many {
                tracing::debug!(stream = %self.stream, request = i, rows = r.len(), "request of a multi-request batch appended");
            }
        }
        Ok(BatchAppend::Done { already_existed })
    }

    /// Append rows in one request, at `offset` when given, retrying transient
    /// failures on a new connection. A retried append with an offset is safe: if the
    /// first try landed, the retry gets ALREADY_EXISTS.
    async fn append(
        &mut self,
        client: &WriteClient,
        rows: &[Vec<u8>],
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
            match conn.append(rows.to_vec(), offset).await {
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
