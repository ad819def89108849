//! Storage Write API over gRPC with the crate's generated `BigQueryWriteClient`.
//!
//! `gcp-bigquery-client`'s own `StorageApi` helper always dials Google over TLS and
//! sends no offsets, so flexrun builds the channel itself and speaks the protocol
//! directly: COMMITTED streams with explicit offsets for exactly-once, the `_default`
//! stream without offsets for at-least-once. Errors that BigQuery returns in-band in
//! `AppendRowsResponse.error` (the stream stays usable) become [`AppendOutcome`]s or
//! [`WriteError`]s that say what they mean for the caller.

use super::{Endpoints, TableRef};
use futures::future::BoxFuture;
use gcp_bigquery_client::google::cloud::bigquery::storage::v1::{
    append_rows_request::{ProtoData, Rows},
    append_rows_response::Response,
    big_query_write_client::BigQueryWriteClient,
    write_stream::Type as StreamType,
    AppendRowsRequest, AppendRowsResponse, CreateWriteStreamRequest, GetWriteStreamRequest, ProtoRows, ProtoSchema, WriteStream,
};
use prost_types::DescriptorProto;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, ClientTlsConfig};
use tonic::{Code, Request, Streaming};

/// google.rpc.Code values that come back in-band.
mod rpc_code {
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const NOT_FOUND: i32 = 5;
    pub const ALREADY_EXISTS: i32 = 6;
    pub const FAILED_PRECONDITION: i32 = 9;
    pub const OUT_OF_RANGE: i32 = 11;
}

const MAX_MESSAGE_BYTES: usize = 20 * 1024 * 1024;
/// How long one append may wait for its response before the connection is dropped
/// and the append retried (safe: a retried offset answers ALREADY_EXISTS).
pub const APPEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
const SCOPE: &str = "https://www.googleapis.com/auth/bigquery";

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
    fn from_status(what: &'static str, s: tonic::Status) -> WriteError {
        let retryable = matches!(s.code(), Code::Unavailable | Code::Internal | Code::Aborted | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled | Code::ResourceExhausted);
        WriteError::Status { what, code: format!("{:?}", s.code()), message: s.message().to_string(), retryable }
    }

    /// Whether a retry on a fresh connection may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, WriteError::Status { retryable: true, .. } | WriteError::Connect { .. })
    }
}

type TokenFn = Arc<dyn Fn() -> BoxFuture<'static, Result<String, WriteError>> + Send + Sync>;

/// A Storage Write client: one channel, credentials when talking to Google.
#[derive(Clone)]
pub struct WriteClient {
    client: BigQueryWriteClient<Channel>,
    endpoint: String,
    token: Option<TokenFn>,
}

async fn google_token_fn() -> Result<TokenFn, WriteError> {
    use gcp_bigquery_client::yup_oauth2 as y;
    let cred = |e: &dyn std::fmt::Display| WriteError::Credentials(e.to_string());
    let opts = y::ApplicationDefaultCredentialsFlowOpts::default();
    let auth = match y::ApplicationDefaultCredentialsAuthenticator::builder(opts).await {
        y::authenticator::ApplicationDefaultCredentialsTypes::ServiceAccount(b) => b.build().await.map_err(|e| cred(&e))?,
        y::authenticator::ApplicationDefaultCredentialsTypes::InstanceMetadata(b) => b.build().await.map_err(|e| cred(&e))?,
    };
    let auth = Arc::new(auth);
    Ok(Arc::new(move || {
        let auth = auth.clone();
        Box::pin(async move {
            let t = auth.token(&[SCOPE]).await.map_err(|e| WriteError::Credentials(e.to_string()))?;
            t.token().map(str::to_string).ok_or_else(|| WriteError::Credentials("the token response had no access token".into()))
        }) as BoxFuture<'static, _>
    }))
}

impl WriteClient {
    /// Connect to the Storage Write endpoint in `endpoints`.
    pub async fn connect(endpoints: &Endpoints) -> Result<WriteClient, WriteError> {
        let connect_err = |e: &dyn std::fmt::Display| WriteError::Connect { endpoint: endpoints.grpc.clone(), message: e.to_string() };
        let ep = Channel::from_shared(endpoints.grpc.clone()).map_err(|e| connect_err(&e))?;
        let (ep, token) = if endpoints.emulator {
            (ep, None)
        } else {
            let host = endpoints.grpc.trim_start_matches("https://").split(['/', ':']).next().unwrap_or_default().to_string();
            let tls = ClientTlsConfig::new().domain_name(host).with_enabled_roots();
            (ep.tls_config(tls).map_err(|e| connect_err(&e))?, Some(google_token_fn().await?))
        };
        let channel = ep.connect_timeout(std::time::Duration::from_secs(10)).connect().await.map_err(|e| connect_err(&e))?;
        let client = BigQueryWriteClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES).max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(WriteClient { client, endpoint: endpoints.grpc.clone(), token })
    }

    async fn request<T>(&self, msg: T, routing: &str) -> Result<Request<T>, WriteError> {
        let mut req = Request::new(msg);
        if let Ok(v) = routing.parse() {
            req.metadata_mut().insert("x-goog-request-params", v);
        }
        if let Some(token) = &self.token {
            let t = token().await?;
            let v = format!("Bearer {t}").parse().map_err(|_| WriteError::Credentials("the access token is not a valid header value".into()))?;
            req.metadata_mut().insert("authorization", v);
        }
        Ok(req)
    }

    /// Create a COMMITTED stream on `table` (rows visible as soon as appended).
    pub async fn create_committed_stream(&self, table: &TableRef) -> Result<String, WriteError> {
        let msg = CreateWriteStreamRequest { parent: table.path(), write_stream: Some(WriteStream { r#type: StreamType::Committed as i32, ..Default::default() }) };
        let req = self.request(msg, &format!("parent={}", table.path())).await?;
        let s = self.client.clone().create_write_stream(req).await.map_err(|s| WriteError::from_status("CreateWriteStream", s))?;
        Ok(s.into_inner().name)
    }

    /// Whether the stream still exists and takes rows (not finalized).
    pub async fn stream_usable(&self, stream: &str) -> Result<bool, WriteError> {
        let req = self.request(GetWriteStreamRequest { name: stream.to_string(), ..Default::default() }, &format!("name={stream}")).await?;
        match self.client.clone().get_write_stream(req).await {
            Ok(s) => Ok(s.into_inner().commit_time.is_none()),
            Err(s) if s.code() == Code::NotFound => Ok(false),
            Err(s) => Err(WriteError::from_status("GetWriteStream", s)),
        }
    }

    /// Open an AppendRows connection to `stream` for rows described by `descriptor`.
    pub async fn open(&self, stream: &str, descriptor: DescriptorProto) -> Result<AppendConnection, WriteError> {
        let (tx, rx) = mpsc::channel::<AppendRowsRequest>(4);
        let req = self.request(ReceiverStream::new(rx), &format!("write_stream={stream}")).await?;
        let mut client = self.client.clone();
        // The call only completes once the first request is sent, so send it concurrently.
        let responses = tokio::spawn(async move { client.append_rows(req).await });
        Ok(AppendConnection { tx, pending: Some(responses), responses: None, stream: stream.to_string(), descriptor, sent_schema: false, endpoint: self.endpoint.clone() })
    }
}

/// One open AppendRows call: requests go in, responses come back in order.
pub struct AppendConnection {
    tx: mpsc::Sender<AppendRowsRequest>,
    pending: Option<tokio::task::JoinHandle<Result<tonic::Response<Streaming<AppendRowsResponse>>, tonic::Status>>>,
    responses: Option<Streaming<AppendRowsResponse>>,
    stream: String,
    descriptor: DescriptorProto,
    sent_schema: bool,
    endpoint: String,
}

impl AppendConnection {
    /// The stream this connection writes to.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// Append `rows` (encoded per the descriptor), at `offset` when given.
    pub async fn append(&mut self, rows: Vec<Vec<u8>>, offset: Option<i64>) -> Result<AppendOutcome, WriteError> {
        let writer_schema = (!self.sent_schema).then(|| ProtoSchema { proto_descriptor: Some(self.descriptor.clone()) });
        let req = AppendRowsRequest {
            // BigQuery needs the stream name only on the first request; the emulator on every one.
            write_stream: self.stream.clone(),
            offset,
            rows: Some(Rows::ProtoRows(ProtoData { writer_schema, rows: Some(ProtoRows { serialized_rows: rows }) })),
            ..Default::default()
        };
        let closed = || WriteError::Status { what: "AppendRows", code: "Unavailable".into(), message: "the connection closed".into(), retryable: true };
        self.tx.send(req).await.map_err(|_| closed())?;
        self.sent_schema = true;
        let timed_out = || WriteError::Status {
            what: "AppendRows",
            code: "DeadlineExceeded".into(),
            message: format!("no response within {} s", APPEND_TIMEOUT.as_secs()),
            retryable: true,
        };
        let resp = tokio::time::timeout(APPEND_TIMEOUT, async {
            if let Some(p) = self.pending.take() {
                let r = p.await.map_err(|e| WriteError::Connect { endpoint: self.endpoint.clone(), message: e.to_string() })?;
                self.responses = Some(r.map_err(|s| WriteError::from_status("AppendRows", s))?.into_inner());
            }
            let responses = self.responses.as_mut().ok_or_else(closed)?;
            match responses.message().await {
                Ok(Some(r)) => Ok(r),
                Ok(None) => Err(closed()),
                Err(s) => Err(WriteError::from_status("AppendRows", s)),
            }
        })
        .await
        .map_err(|_| timed_out())??;
        self.outcome(resp, offset)
    }

    fn outcome(&self, resp: AppendRowsResponse, offset: Option<i64>) -> Result<AppendOutcome, WriteError> {
        if !resp.row_errors.is_empty() {
            return Ok(AppendOutcome::RowErrors(resp.row_errors.into_iter().map(|e| (e.index as usize, e.message)).collect()));
        }
        match resp.response {
            Some(Response::AppendResult(_)) | None => Ok(AppendOutcome::Appended),
            Some(Response::Error(st)) => match st.code {
                rpc_code::ALREADY_EXISTS => Ok(AppendOutcome::AlreadyExists),
                rpc_code::OUT_OF_RANGE => Err(WriteError::OutOfRange { stream: self.stream.clone(), offset: offset.unwrap_or(-1), message: st.message }),
                rpc_code::NOT_FOUND | rpc_code::FAILED_PRECONDITION => Err(WriteError::StreamGone { stream: self.stream.clone(), message: st.message }),
                code => Err(WriteError::Status {
                    what: "AppendRows",
                    code: Code::from_i32(code).description().to_string(),
                    message: st.message,
                    retryable: code != rpc_code::INVALID_ARGUMENT,
                }),
            },
        }
    }
}
