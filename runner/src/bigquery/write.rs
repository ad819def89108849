//! Storage Write API over gRPC with the crate's generated `BigQueryWriteClient`.
//!
//! `gcp-bigquery-client`'s own `StorageApi` helper always dials Google over TLS and
//! sends no offsets, so flexrun builds the channel itself and speaks the protocol
//! directly: COMMITTED streams with explicit offsets for exactly-once, the `_default`
//! stream without offsets for at-least-once. What BigQuery's answers mean (retryable,
//! a stream gone, an offset already written) is decided in [`super::errors`].

use super::errors::in_band;
pub use super::errors::{AppendOutcome, WriteError};
pub use super::framed::framed_len;
use super::framed::{frame, AppendBody, FramedAppend, ResponseDecoder, SharedRows};
use super::{Endpoints, TableRef};
use futures::future::BoxFuture;
use gcp_bigquery_client::google::cloud::bigquery::storage::v1::{
    append_rows_request::{ProtoData, Rows as RequestRows},
    append_rows_response::Response,
    big_query_write_client::BigQueryWriteClient,
    write_stream::Type as StreamType,
    AppendRowsRequest, AppendRowsResponse, CreateWriteStreamRequest, FinalizeWriteStreamRequest, GetWriteStreamRequest,
    ProtoRows, ProtoSchema, WriteStream,
};
use prost_types::DescriptorProto;
use std::sync::Arc;
use tokio::sync::mpsc;
use tonic::codegen::http;
use tonic::codegen::Service;
use tonic::transport::{Channel, ClientTlsConfig};
use tonic::{Code, Request, Streaming};

/// The documented request limit. storage.proto, `AppendRowsRequest`: "The size of a
/// single AppendRowsRequest must be less than 10 MB in size. Requests larger than
/// this return an error, typically `INVALID_ARGUMENT`." Read as 10,000,000 bytes (the
/// smaller reading of "MB"); [`REQUEST_OVERHEAD_BYTES`] is kept free for the stream
/// name, the writer schema and framing.
pub const MAX_REQUEST_BYTES: usize = 10_000_000;
/// Room kept in every request for everything but the rows.
pub const REQUEST_OVERHEAD_BYTES: usize = 64 * 1024;
/// The most row bytes (with their per-row framing) one AppendRows request carries.
pub const MAX_REQUEST_ROW_BYTES: usize = MAX_REQUEST_BYTES - REQUEST_OVERHEAD_BYTES;

/// The row budget of a request of at most `request_bytes` bytes.
pub fn request_row_budget(request_bytes: usize) -> usize {
    request_bytes.saturating_sub(REQUEST_OVERHEAD_BYTES.min(request_bytes / 2))
}

/// Split rows into consecutive requests of at most `budget` framed bytes each. The
/// split is greedy from the front, so a prefix of the rows always splits the same
/// way (a batch re-appended after rows were removed from its tail keeps the offsets
/// of its earlier requests). A single row over the budget gets a request of its own
/// (the caller keeps such rows out; see [`MAX_REQUEST_ROW_BYTES`]).
///
/// ```
/// use flexrun::bigquery::{rows::Rows, write::split_requests};
/// let rows = Rows::from(vec![vec![0u8; 40], vec![0u8; 40], vec![0u8; 40]]);
/// assert_eq!(split_requests(&rows, 100), vec![0..2, 2..3]);
/// ```
pub fn split_requests<'a>(rows: impl IntoIterator<Item = &'a [u8]>, budget: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes, mut n) = (0, 0, 0);
    for (i, r) in rows.into_iter().enumerate() {
        let len = framed_len(r);
        if i > start && bytes + len > budget {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += len;
        n = i + 1;
    }
    if start < n {
        out.push(start..n);
    }
    out
}

/// gRPC message cap on the channel: above the documented request limit, so that
/// BigQuery (not the transport) answers an oversize request.
const MAX_MESSAGE_BYTES: usize = 20 * 1024 * 1024;
/// How long one append may wait for its response before the connection is dropped
/// and the append retried (safe: a retried offset answers ALREADY_EXISTS).
pub const APPEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
const SCOPE: &str = "https://www.googleapis.com/auth/bigquery";
/// HTTP/2 keep-alive ping interval and timeout (see [`WriteClient::connect`]).
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(60);

type TokenFn = Arc<dyn Fn() -> BoxFuture<'static, Result<String, WriteError>> + Send + Sync>;

/// A Storage Write client: one channel, credentials when talking to Google.
#[derive(Clone)]
pub struct WriteClient {
    client: BigQueryWriteClient<Channel>,
    /// The same channel for AppendRows, whose request bodies flexrun frames itself.
    channel: Channel,
    endpoint: String,
    token: Option<TokenFn>,
}

async fn google_token_fn() -> Result<TokenFn, WriteError> {
    use gcp_bigquery_client::yup_oauth2 as y;
    let cred = |e: &dyn std::fmt::Display| WriteError::Credentials(e.to_string());
    let opts = y::ApplicationDefaultCredentialsFlowOpts::default();
    let auth = match y::ApplicationDefaultCredentialsAuthenticator::builder(opts).await {
        y::authenticator::ApplicationDefaultCredentialsTypes::ServiceAccount(b) => {
            b.build().await.map_err(|e| cred(&e))?
        }
        y::authenticator::ApplicationDefaultCredentialsTypes::InstanceMetadata(b) => {
            b.build().await.map_err(|e| cred(&e))?
        }
    };
    let auth = Arc::new(auth);
    Ok(Arc::new(move || {
        let auth = auth.clone();
        Box::pin(async move {
            let t = auth.token(&[SCOPE]).await.map_err(|e| WriteError::Credentials(e.to_string()))?;
            t.token()
                .map(str::to_string)
                .ok_or_else(|| WriteError::Credentials("the token response had no access token".into()))
        }) as BoxFuture<'static, _>
    }))
}

impl WriteClient {
    /// Connect to the Storage Write endpoint in `endpoints`.
    pub async fn connect(endpoints: &Endpoints) -> Result<WriteClient, WriteError> {
        let connect_err = |e: &dyn std::fmt::Display| WriteError::Connect {
            endpoint: endpoints.grpc.clone(),
            message: e.to_string(),
        };
        let ep = Channel::from_shared(endpoints.grpc.clone()).map_err(|e| connect_err(&e))?;
        let (ep, token) = if endpoints.emulator {
            (ep, None)
        } else {
            let host =
                endpoints.grpc.trim_start_matches("https://").split(['/', ':']).next().unwrap_or_default().to_string();
            let tls = ClientTlsConfig::new().domain_name(host).with_enabled_roots();
            (ep.tls_config(tls).map_err(|e| connect_err(&e))?, Some(google_token_fn().await?))
        };
        // HTTP/2 keep-alive as Google's Storage Write samples set it on their channel
        // (`BigQueryWriteSettings.defaultGrpcTransportProviderBuilder()
        // .setKeepAliveTime(1 min).setKeepAliveTimeout(1 min).setKeepAliveWithoutCalls(true)`):
        // a connection a proxy or load balancer dropped while idle is found by a ping,
        // not by the next append's timeout.
        let channel = ep
            .connect_timeout(std::time::Duration::from_secs(10))
            .http2_keep_alive_interval(KEEP_ALIVE)
            .keep_alive_timeout(KEEP_ALIVE)
            .keep_alive_while_idle(true)
            .connect()
            .await
            .map_err(|e| connect_err(&e))?;
        let client = BigQueryWriteClient::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(WriteClient { client, channel, endpoint: endpoints.grpc.clone(), token })
    }

    async fn request<T>(&self, msg: T, routing: &str) -> Result<Request<T>, WriteError> {
        let mut req = Request::new(msg);
        if let Ok(v) = routing.parse() {
            req.metadata_mut().insert("x-goog-request-params", v);
        }
        if let Some(token) = &self.token {
            let t = token().await?;
            let v = format!("Bearer {t}")
                .parse()
                .map_err(|_| WriteError::Credentials("the access token is not a valid header value".into()))?;
            req.metadata_mut().insert("authorization", v);
        }
        Ok(req)
    }

    /// Create a COMMITTED stream on `table` (rows visible as soon as appended).
    pub async fn create_committed_stream(&self, table: &TableRef) -> Result<String, WriteError> {
        let msg = CreateWriteStreamRequest {
            parent: table.path(),
            write_stream: Some(WriteStream { r#type: StreamType::Committed as i32, ..Default::default() }),
        };
        let req = self.request(msg, &format!("parent={}", table.path())).await?;
        let s = self
            .client
            .clone()
            .create_write_stream(req)
            .await
            .map_err(|s| WriteError::from_status("CreateWriteStream", s, None))?;
        Ok(s.into_inner().name)
    }

    /// The stream's metadata (GetWriteStream). The pipeline never asks this to decide
    /// whether a stream is usable (see `kafka_to_bq::run::writer::open_target`); it is here for
    /// diagnostics and for tests of the emulator's fidelity.
    pub async fn get_stream(&self, stream: &str) -> Result<WriteStream, WriteError> {
        let req = self
            .request(
                GetWriteStreamRequest { name: stream.to_string(), ..Default::default() },
                &format!("name={stream}"),
            )
            .await?;
        let r = self
            .client
            .clone()
            .get_write_stream(req)
            .await
            .map_err(|s| WriteError::from_status("GetWriteStream", s, Some(stream)))?;
        Ok(r.into_inner())
    }

    /// Finalize `stream` (no row can be appended after) and return how many rows it
    /// holds: storage.proto, `FinalizeWriteStreamResponse.row_count`, "Number of rows in
    /// the finalized stream". A logged batch that can no longer be re-read is settled by
    /// it: its rows landed if the stream holds them (`kafka_to_bq::run::shard`).
    pub async fn finalize_stream(&self, stream: &str) -> Result<i64, WriteError> {
        let req =
            self.request(FinalizeWriteStreamRequest { name: stream.to_string() }, &format!("name={stream}")).await?;
        let r = self
            .client
            .clone()
            .finalize_write_stream(req)
            .await
            .map_err(|s| WriteError::from_status("FinalizeWriteStream", s, Some(stream)))?;
        Ok(r.into_inner().row_count)
    }

    /// Open an AppendRows connection to `stream` for rows described by `descriptor`.
    ///
    /// This is the generated client's `append_rows`, with a body flexrun frames
    /// ([`AppendBody`]): the call is made on the channel as tonic's `Grpc::streaming`
    /// makes it (`POST` to the method's path, `content-type: application/grpc`,
    /// `te: trailers`, the metadata as headers), and the responses are read as
    /// `Grpc::create_response` reads them ([`response_stream`]).
    pub async fn open(&self, stream: &str, descriptor: DescriptorProto) -> Result<AppendConnection, WriteError> {
        let (tx, rx) = mpsc::channel::<FramedAppend>(4);
        let (metadata, _, ()) = self.request((), &format!("write_stream={stream}")).await?.into_parts();
        let mut req = http::Request::new(tonic::body::Body::new(AppendBody::new(rx)));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = http::Uri::from_static(APPEND_ROWS_PATH);
        *req.version_mut() = http::Version::HTTP_2;
        *req.headers_mut() = metadata.into_headers();
        req.headers_mut().insert(http::header::TE, http::HeaderValue::from_static("trailers"));
        req.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
        let mut channel = self.channel.clone();
        // The call only completes once the first request is sent, so send it concurrently.
        let responses = tokio::spawn(async move {
            std::future::poll_fn(|cx| channel.poll_ready(cx))
                .await
                .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {e}")))?;
            let resp = channel.call(req).await.map_err(|e| tonic::Status::from_error(Box::new(e)))?;
            response_stream(resp)
        });
        Ok(AppendConnection {
            tx,
            pending: Some(responses),
            responses: None,
            stream: stream.to_string(),
            descriptor,
            sent_schema: false,
            endpoint: self.endpoint.clone(),
        })
    }
}

/// AppendRows' path on the channel.
const APPEND_ROWS_PATH: &str = "/google.cloud.bigquery.storage.v1.BigQueryWrite/AppendRows";

/// The responses of an AppendRows call, read as tonic's client reads them
/// (`Grpc::create_response`): a `grpc-status` already in the headers is a
/// trailers-only response, an error unless OK; else the messages follow, and the
/// status comes in the trailers (or from the HTTP status when they are missing).
fn response_stream(resp: http::Response<tonic::body::Body>) -> Result<Streaming<AppendRowsResponse>, tonic::Status> {
    if let Some(status) = tonic::Status::from_header_map(resp.headers()) {
        if status.code() != Code::Ok {
            return Err(status);
        }
        return Ok(Streaming::new_empty(ResponseDecoder, resp.into_body()));
    }
    let code = resp.status();
    Ok(Streaming::new_response(ResponseDecoder, resp.into_body(), code, None, Some(MAX_MESSAGE_BYTES)))
}

/// The AppendRows request for `rows` on `stream`, at `offset` when given, carrying
/// the writer schema when `schema` is given (the first request of a connection). The
/// writer sends [`super::framed::frame`]'s bytes instead, which a test checks against
/// prost's encoding of this.
pub fn append_request(
    stream: &str,
    offset: Option<i64>,
    schema: Option<&DescriptorProto>,
    rows: Vec<Vec<u8>>,
) -> AppendRowsRequest {
    let writer_schema = schema.map(|d| ProtoSchema { proto_descriptor: Some(d.clone()) });
    AppendRowsRequest {
        // BigQuery needs the stream name only on the first request; the emulator on every one.
        write_stream: stream.to_string(),
        offset,
        rows: Some(RequestRows::ProtoRows(ProtoData {
            writer_schema,
            rows: Some(ProtoRows { serialized_rows: rows }),
        })),
        ..Default::default()
    }
}

/// One open AppendRows call: requests go in, responses come back in order.
pub struct AppendConnection {
    tx: mpsc::Sender<FramedAppend>,
    pending: Option<tokio::task::JoinHandle<Result<Streaming<AppendRowsResponse>, tonic::Status>>>,
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

    /// Append `rows` (encoded per the descriptor), at `offset` when given, from a copy
    /// of them (for one-off appends; a batch's go through [`AppendConnection::append_shared`]).
    pub async fn append(&mut self, rows: &[Vec<u8>], offset: Option<i64>) -> Result<AppendOutcome, WriteError> {
        self.append_shared(&Arc::new(rows.iter().collect()), 0..rows.len(), offset).await
    }

    /// Append `rows[range]` (encoded per the descriptor), at `offset` when given. The
    /// request carries a slice of the batch's buffer ([`super::framed`]): no row is
    /// copied on its way out.
    pub async fn append_shared(
        &mut self,
        rows: &SharedRows,
        range: std::ops::Range<usize>,
        offset: Option<i64>,
    ) -> Result<AppendOutcome, WriteError> {
        let schema = (!self.sent_schema).then_some(&self.descriptor);
        let req = frame(&self.stream, offset, schema, rows, range);
        let closed = || WriteError::Status {
            what: "AppendRows",
            code: "Unavailable".into(),
            message: "the connection closed".into(),
            retryable: true,
        };
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
                let r = p
                    .await
                    .map_err(|e| WriteError::Connect { endpoint: self.endpoint.clone(), message: e.to_string() })?;
                self.responses = Some(r.map_err(|s| WriteError::from_status("AppendRows", s, Some(&self.stream)))?);
            }
            let responses = self.responses.as_mut().ok_or_else(closed)?;
            match responses.message().await {
                Ok(Some(r)) => Ok(r),
                Ok(None) => Err(closed()),
                Err(s) => Err(WriteError::from_status("AppendRows", s, Some(&self.stream))),
            }
        })
        .await
        .map_err(|_| timed_out())??;
        self.outcome(resp, offset)
    }

    fn outcome(&self, resp: AppendRowsResponse, offset: Option<i64>) -> Result<AppendOutcome, WriteError> {
        if !resp.row_errors.is_empty() {
            return Ok(AppendOutcome::RowErrors(
                resp.row_errors.into_iter().map(|e| (e.index as usize, e.message)).collect(),
            ));
        }
        match resp.response {
            Some(Response::AppendResult(_)) | None => Ok(AppendOutcome::Appended),
            Some(Response::Error(st)) => in_band(&self.stream, st, offset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bigquery::rows::Rows;
    use prost::Message;

    #[test]
    fn requests_split_greedily_from_the_front_and_a_prefix_splits_the_same() {
        let vecs: Vec<Vec<u8>> = (0..50).map(|i| vec![0u8; 10 + (i * 37) % 90]).collect();
        let rows = Rows::from(vecs.clone());
        let all = split_requests(&rows, 400);
        assert!(all.iter().all(|r| rows.framed(r.clone()).len() <= 400));
        assert_eq!(all.first().unwrap().start, 0);
        assert_eq!(all.last().unwrap().end, 50);
        let prefix = split_requests(&Rows::from(vecs[..30].to_vec()), 400);
        assert_eq!(prefix[..prefix.len() - 1], all[..prefix.len() - 1]);
        assert_eq!(split_requests(&Rows::from(vec![vec![0u8; 1000]]), 400), vec![0..1]);
        assert!(split_requests(&Rows::new(), 400).is_empty());
        assert_eq!(framed_len(&[0u8; 127]), 129);
        assert_eq!(framed_len(&[0u8; 128]), 131);
    }

    proptest::proptest! {
        /// Byte for byte what prost encodes, for any rows (including empty ones and
        /// none), offsets (none, zero, negative, large), streams and schemas.
        #[test]
        fn the_framed_request_is_what_prost_encodes(
            rows in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..300), 0..12),
            offset in proptest::option::of(proptest::prop_oneof![proptest::strategy::Just(0i64), proptest::num::i64::ANY]),
            stream in "|projects/p/datasets/d/tables/t/streams/[a-z_]{1,20}",
            with_schema in proptest::bool::ANY,
            from in 0usize..4,
        ) {
            let d = crate::bigquery::proto::descriptor(
                &crate::bigquery::schema::Schema::from_json(&serde_json::json!([{"name": "a", "type": "STRING"}])).unwrap(),
                "Row",
            );
            let schema = with_schema.then_some(&d);
            let lo = from.min(rows.len());
            let shared = Arc::new(Rows::from(rows.clone()));
            let ours = frame(&stream, offset, schema, &shared, lo..rows.len());
            let theirs = append_request(&stream, offset, schema, rows[lo..].to_vec()).encode_to_vec();
            proptest::prop_assert_eq!(ours.encoded(), theirs);
        }
    }
}
