//! What Storage Write's answers mean for the caller: call-level statuses and the
//! in-band `AppendRowsResponse.error` classified into [`AppendOutcome`]s and
//! [`WriteError`]s (retryable or not, a stream gone, an offset out of range).
//!
//! The rules are the API's own, each cited where it is applied: storage.proto's
//! comments on `AppendRowsResponse.error` and `StorageError`, and the retryable codes
//! Google's Storage Write samples list. The client that meets these answers is
//! [`super::write`].

use gcp_bigquery_client::google::cloud::bigquery::storage::v1::{storage_error::StorageErrorCode, StorageError};
use gcp_bigquery_client::google::rpc::Status as RpcStatus;
use tonic::Code;

/// google.rpc.Code values that come back in-band.
mod rpc_code {
    pub const NOT_FOUND: i32 = 5;
    pub const ALREADY_EXISTS: i32 = 6;
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    #[cfg(test)]
    pub const FAILED_PRECONDITION: i32 = 9;
    pub const ABORTED: i32 = 10;
    pub const OUT_OF_RANGE: i32 = 11;
    pub const INTERNAL: i32 = 13;
    pub const UNAVAILABLE: i32 = 14;
}

/// The type URL of `StorageError` in a `google.rpc.Status`'s details.
const STORAGE_ERROR_TYPE: &str = "type.googleapis.com/google.cloud.bigquery.storage.v1.StorageError";

/// What happened to one append.
#[derive(Debug, Clone, PartialEq)]
pub enum AppendOutcome {
    /// The rows are in the table.
    Appended,
    /// The offset was already written: in a replay this means "already done".
    AlreadyExists,
    /// BigQuery refused some rows (by index, with its message); nothing was written.
    RowErrors(Vec<(usize, String)>),
}

/// Storage Write failures.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The endpoint could not be reached.
    #[error("cannot connect to BigQuery Storage Write at {endpoint}: {message}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// Why.
        message: String,
    },
    /// No credentials for Google.
    #[error("no Google credentials for BigQuery Storage Write (Application Default Credentials): {0}")]
    Credentials(String),
    /// The stream no longer exists or no longer takes rows (finalized, expired, or the
    /// emulator restarted). Offsets can no longer deduplicate against it.
    #[error("write stream {stream} is gone or closed ({message}); offsets can no longer deduplicate against it")]
    StreamGone {
        /// Stream name.
        stream: String,
        /// BigQuery's message.
        message: String,
    },
    /// The offset is past the stream's end: the checkpoint and the stream disagree.
    #[error("write stream {stream}: offset {offset} is beyond the end of the stream ({message}); the checkpoint and the stream disagree")]
    OutOfRange {
        /// Stream name.
        stream: String,
        /// The offset sent.
        offset: i64,
        /// BigQuery's message.
        message: String,
    },
    /// The caller asked to stop (a drain or a move) while the append was waiting to
    /// retry; the batch stays in the offset log and is replayed by the next owner.
    #[error("stopped while waiting to retry an append to {stream}")]
    Interrupted {
        /// Stream name.
        stream: String,
    },
    /// A batch's request split does not cover its rows (a bug): nothing was sent.
    #[error(
        "write stream {stream}: the batch's requests cover {planned} rows but the batch has {rows}; nothing was sent"
    )]
    Split {
        /// Stream name.
        stream: String,
        /// Rows the requests cover.
        planned: usize,
        /// Rows in the batch.
        rows: usize,
    },
    /// Any other error status (from the call or in-band).
    #[error("BigQuery Storage Write {what} failed: {code}: {message}")]
    Status {
        /// Which call.
        what: &'static str,
        /// The status code name.
        code: String,
        /// Its message.
        message: String,
        /// Whether a retry on a new connection may succeed.
        retryable: bool,
    },
}

impl WriteError {
    /// Classify a call-level status. Retryable, as Google's Storage Write samples list
    /// them: "immediately retried: ABORTED, UNAVAILABLE, CANCELLED, INTERNAL,
    /// DEADLINE_EXCEEDED", and RESOURCE_EXHAUSTED (quota) with backoff. UNKNOWN is not
    /// retried (it means a server bug, and retrying it forever would hide it) unless it
    /// is the transport failing mid-stream ([`transport_reset`]). NOT_FOUND
    /// on an AppendRows or GetWriteStream call names a missing stream.
    pub(super) fn from_status(what: &'static str, s: tonic::Status, stream: Option<&str>) -> WriteError {
        if let Some(gone) =
            stream.and_then(|st| stream_gone(st, s.code() as i32, s.message(), &status_details(s.details())))
        {
            return gone;
        }
        let retryable = matches!(
            s.code(),
            Code::Unavailable
                | Code::Internal
                | Code::Aborted
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::ResourceExhausted
        ) || transport_reset(&s)
            || schema_lagging(&status_details(s.details()));
        WriteError::Status { what, code: format!("{:?}", s.code()), message: s.message().to_string(), retryable }
    }

    /// Whether a retry on a fresh connection may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, WriteError::Status { retryable: true, .. } | WriteError::Connect { .. })
    }

    /// A short label for metrics and logs (the status code, or the kind).
    pub fn label(&self) -> String {
        match self {
            WriteError::Status { code, .. } => code.clone(),
            WriteError::Connect { .. } => "Connect".into(),
            other => format!("{other:?}").split([' ', '{', '(']).next().unwrap_or_default().to_string(),
        }
    }
}

/// Whether an UNKNOWN status is the connection failing under the stream rather than
/// the server answering: tonic reports an HTTP/2 reset, a GOAWAY or a dropped socket
/// met mid-stream as UNKNOWN with the transport's error as its cause. Such an append
/// may or may not have landed; a retry with its offset on a new connection is safe
/// (ALREADY_EXISTS if it had).
fn transport_reset(s: &tonic::Status) -> bool {
    const SIGNS: [&str; 7] = [
        "h2 protocol error",
        "goaway",
        "stream reset",
        "connection reset",
        "broken pipe",
        "error reading a body from connection",
        "connection closed",
    ];
    if s.code() != Code::Unknown {
        return false;
    }
    let mut text = s.message().to_lowercase();
    let mut cause = std::error::Error::source(s);
    while let Some(c) = cause {
        text.push(' ');
        text.push_str(&c.to_string().to_lowercase());
        cause = c.source();
    }
    SIGNS.iter().any(|sign| text.contains(sign))
}

/// Whether BigQuery refused the writer's schema for a field the table lacks
/// (SCHEMA_MISMATCH_EXTRA_FIELDS). flexrun writes only the columns it read from the table,
/// so this means a column it added (schema evolution) has not reached the stream yet:
/// "if the BigQuery table schema is updated, users will be able to ingest data on the new
/// schema after some time (in order of minutes)" (Google's JsonStreamWriter). The append
/// is retried on a new connection with backoff until it has.
fn schema_lagging(errors: &[StorageError]) -> bool {
    errors.iter().any(|e| e.code == StorageErrorCode::SchemaMismatchExtraFields as i32)
}

/// The `StorageError`s in a status's details (a serialized `google.rpc.Status`).
fn status_details(details: &[u8]) -> Vec<StorageError> {
    use prost::Message;
    if details.is_empty() {
        return Vec::new();
    }
    gcp_bigquery_client::google::rpc::Status::decode(details).map(|st| storage_errors(&st.details)).unwrap_or_default()
}

fn storage_errors(details: &[prost_types::Any]) -> Vec<StorageError> {
    use prost::Message;
    details
        .iter()
        .filter(|a| a.type_url == STORAGE_ERROR_TYPE)
        .filter_map(|a| StorageError::decode(a.value.as_slice()).ok())
        .collect()
}

/// Whether an error says the stream itself is gone or closed, from what the API
/// documents: a `StorageError` of STREAM_NOT_FOUND, STREAM_FINALIZED or
/// INVALID_STREAM_STATE ("... not finalized or is garbaged"), or NOT_FOUND. A
/// TABLE_NOT_FOUND is not a lost stream (the table is gone; nothing can be written).
fn stream_gone(stream: &str, code: i32, message: &str, errors: &[StorageError]) -> Option<WriteError> {
    let gone_codes =
        [StorageErrorCode::StreamNotFound, StorageErrorCode::StreamFinalized, StorageErrorCode::InvalidStreamState];
    let by_detail = errors.iter().any(|e| gone_codes.iter().any(|c| *c as i32 == e.code));
    let table_missing = errors.iter().any(|e| e.code == StorageErrorCode::TableNotFound as i32);
    let by_code = code == rpc_code::NOT_FOUND && !table_missing && !message.contains("Table");
    (by_detail || by_code).then(|| WriteError::StreamGone { stream: stream.to_string(), message: message.to_string() })
}

/// Classify an in-band error (`AppendRowsResponse.error`) of an append to `stream` at
/// `offset`. The stream stays usable after such an error.
pub(super) fn in_band(stream: &str, st: RpcStatus, offset: Option<i64>) -> Result<AppendOutcome, WriteError> {
    let errors = storage_errors(&st.details);
    if let Some(gone) = stream_gone(stream, st.code, &st.message, &errors) {
        return Err(gone);
    }
    match st.code {
        rpc_code::ALREADY_EXISTS => Ok(AppendOutcome::AlreadyExists),
        rpc_code::OUT_OF_RANGE => Err(WriteError::OutOfRange {
            stream: stream.to_string(),
            offset: offset.unwrap_or(-1),
            message: st.message,
        }),
        code => Err(WriteError::Status {
            what: "AppendRows",
            code: Code::from_i32(code).description().to_string(),
            message: st.message,
            // storage.proto on AppendRowsResponse.error: "ABORTED: ... can be
            // retried if previous failure is addressed"; "INTERNAL: Indicates
            // server side error(s) that can be retried."
            retryable: matches!(
                code,
                rpc_code::ABORTED | rpc_code::INTERNAL | rpc_code::UNAVAILABLE | rpc_code::RESOURCE_EXHAUSTED
            ) || schema_lagging(&errors),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(e: StorageError) -> prost_types::Any {
        use prost::Message;
        prost_types::Any { type_url: STORAGE_ERROR_TYPE.into(), value: e.encode_to_vec() }
    }
    #[test]
    fn a_mid_stream_reset_is_retried_and_a_server_unknown_is_not() {
        let reset = tonic::Status::unknown("h2 protocol error: error reading a body from connection");
        assert!(WriteError::from_status("AppendRows", reset, None).is_retryable());
        let goaway = tonic::Status::unknown("transport error: connection error: received GOAWAY");
        assert!(WriteError::from_status("AppendRows", goaway, None).is_retryable());
        let bug = tonic::Status::unknown("unexpected server state");
        assert!(
            !WriteError::from_status("AppendRows", bug, None).is_retryable(),
            "a server bug is not hidden by retries"
        );
        let denied = tonic::Status::permission_denied("connection reset by the policy");
        assert!(!WriteError::from_status("AppendRows", denied, None).is_retryable(), "only UNKNOWN is read this way");
    }

    #[test]
    fn a_stream_is_gone_only_when_an_error_says_so() {
        let finalized = any(StorageError {
            code: StorageErrorCode::StreamFinalized as i32,
            entity: "s".into(),
            error_message: "finalized".into(),
        });
        assert!(stream_gone("s", rpc_code::FAILED_PRECONDITION, "x", &storage_errors(&[finalized])).is_some());
        assert!(stream_gone("s", rpc_code::NOT_FOUND, "Stream not found: s", &[]).is_some());
        let table = StorageError {
            code: StorageErrorCode::TableNotFound as i32,
            entity: "t".into(),
            error_message: String::new(),
        };
        assert!(stream_gone("s", rpc_code::NOT_FOUND, "x", &[table]).is_none(), "a missing table is not a lost stream");
        assert!(stream_gone("s", rpc_code::FAILED_PRECONDITION, "other precondition", &[]).is_none());
        assert!(stream_gone("s", rpc_code::ALREADY_EXISTS, "x", &[]).is_none());
    }
}
