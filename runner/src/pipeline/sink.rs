//! One write target (the table or the dead-letter table) as a shard sees it: a
//! stream, the next row offset in it, and a connection that is reopened on
//! transient failures.

use crate::bigquery::write::{AppendConnection, AppendOutcome, WriteClient, WriteError};
use crate::bigquery::TableRef;
use prost_types::DescriptorProto;
use std::time::Duration;

/// Attempts for one append before the shard gives up on a transient error.
pub const APPEND_ATTEMPTS: u32 = 8;

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
}

impl Target {
    /// A target on `stream` starting at row offset `next`.
    pub fn new(table: TableRef, stream: String, next: i64, descriptor: DescriptorProto) -> Target {
        Target { table, stream, next, descriptor, conn: None }
    }

    /// Switch to a new stream (the old one is gone); rows start at offset 0.
    pub fn replace_stream(&mut self, stream: String) {
        self.stream = stream;
        self.next = 0;
        self.conn = None;
    }

    /// Append rows, at `offset` when given, retrying transient failures on a new
    /// connection with backoff (1 s doubling to 10 s at most, as Beam does). A retried
    /// append with an offset is safe: if the first try landed, the retry gets
    /// ALREADY_EXISTS.
    pub async fn append(&mut self, client: &WriteClient, rows: &[Vec<u8>], offset: Option<i64>) -> Result<AppendOutcome, WriteError> {
        let mut backoff = Duration::from_millis(250);
        let mut attempt = 0;
        loop {
            attempt += 1;
            if self.conn.is_none() {
                match client.open(&self.stream, self.descriptor.clone()).await {
                    Ok(c) => self.conn = Some(c),
                    Err(e) if e.is_retryable() && attempt < APPEND_ATTEMPTS => {
                        tracing::warn!(stream = %self.stream, attempt, error = %e, "opening AppendRows failed; retrying");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            let conn = self.conn.as_mut().expect("connection opened above");
            match conn.append(rows.to_vec(), offset).await {
                Ok(o) => return Ok(o),
                Err(e) if e.is_retryable() && attempt < APPEND_ATTEMPTS => {
                    tracing::warn!(stream = %self.stream, attempt, error = %e, "append failed; retrying on a new connection");
                    self.conn = None;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
                Err(e) => {
                    self.conn = None;
                    return Err(e);
                }
            }
        }
    }
}
