//! An AppendRows call whose request bodies flexrun frames itself (issue 29, step 5).
//!
//! A batch's rows are written once, in wire form, into one buffer ([`super::rows`]).
//! A request ([`FramedAppend`]) is two pieces: its head (the gRPC message prefix,
//! stream, offset, writer schema and the length prefixes, a few bytes) and the run of
//! rows it carries, a slice of the batch's buffer shared with the batch
//! ([`SharedRows`]). [`AppendBody`] hands both to HTTP/2 as they are. tonic's codecs
//! take only copies (`EncodeBuf` is a `BytesMut`), so the call goes straight to the
//! channel, and the responses are read with tonic's own [`tonic::codec::Streaming`]
//! and [`ResponseDecoder`]. A property test in `write` checks the bytes against
//! prost's encoding of its `append_request` for the same arguments.
//!
//! ```
//! use flexrun::bigquery::framed::frame;
//! use flexrun::bigquery::rows::Rows;
//! use flexrun::bigquery::write::append_request;
//! use prost::Message;
//! use std::sync::Arc;
//! let rows = Arc::new(Rows::from(vec![b"\x08\x01".to_vec(), b"\x08\x02".to_vec(), b"\x08\x03".to_vec()]));
//! let ours = frame("projects/p/datasets/d/tables/t/streams/s", Some(7), None, &rows, 1..3);
//! let prost = append_request("projects/p/datasets/d/tables/t/streams/s", Some(7), None, rows.to_vecs()[1..3].to_vec());
//! assert_eq!(ours.encoded(), prost.encode_to_vec());
//! ```

use super::rows::Rows;
use bytes::{BufMut, Bytes, BytesMut};
use gcp_bigquery_client::google::cloud::bigquery::storage::v1::{AppendRowsResponse, ProtoSchema};
use http_body::Frame;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, message, WireType};
use prost_types::DescriptorProto;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::sync::mpsc;
use tonic::codec::{DecodeBuf, Decoder};
use tonic::Status;

/// A batch's encoded rows, shared between the batch and the requests that send them.
/// Once every request of an append is answered, HTTP/2 has dropped its slices, and the
/// batch holds its rows alone again (`Arc::try_unwrap`).
pub type SharedRows = Arc<Rows>;

/// The gRPC length-prefixed message header: a compressed flag and a 4-byte length.
const GRPC_HEADER_BYTES: usize = 5;

/// An `AppendRowsRequest` as the body carries it: its head, then its rows' wire bytes
/// (a slice of the batch's buffer).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct FramedAppend {
    /// The gRPC message header and the request up to its rows.
    head: Bytes,
    /// The rows, each framed as `ProtoRows.serialized_rows`.
    rows: Bytes,
    count: usize,
}

impl std::fmt::Debug for FramedAppend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FramedAppend({} rows, {} bytes)", self.count, self.head.len() + self.rows.len())
    }
}

impl FramedAppend {
    /// The two pieces the body sends: the gRPC message header with the request's head,
    /// and the rows' wire bytes.
    pub fn pieces(&self) -> (&Bytes, &Bytes) {
        (&self.head, &self.rows)
    }

    /// The request's protobuf encoding, without the gRPC header (for tests; the body
    /// sends the two pieces as they are).
    pub fn encoded(&self) -> Vec<u8> {
        [&self.head[GRPC_HEADER_BYTES..], &self.rows[..]].concat()
    }
}

/// Holds a batch's rows for the `Bytes` slices HTTP/2 sends.
struct RowsOwner(SharedRows);

impl AsRef<[u8]> for RowsOwner {
    fn as_ref(&self) -> &[u8] {
        self.0.as_wire()
    }
}

/// `AppendRowsRequest` field numbers (storage.proto).
mod field {
    pub const WRITE_STREAM: u32 = 1;
    pub const OFFSET: u32 = 2;
    pub const PROTO_ROWS: u32 = 4;
    /// `ProtoData.writer_schema`.
    pub const WRITER_SCHEMA: u32 = 1;
    /// `ProtoData.rows`.
    pub const ROWS: u32 = 2;
}

/// The request for `rows[range]` on `stream`, at `offset` when given, with the writer
/// schema when `schema` is given: it encodes to the bytes prost gives for
/// `write::append_request` with the same arguments.
pub fn frame(
    stream: &str,
    offset: Option<i64>,
    schema: Option<&DescriptorProto>,
    rows: &SharedRows,
    range: Range<usize>,
) -> FramedAppend {
    let count = range.len();
    let wire = rows.framed_range(range);
    let rows_len = wire.len();
    let schema = schema.map(|d| ProtoSchema { proto_descriptor: Some(d.clone()) });
    let schema_len = schema.as_ref().map_or(0, |s| message::encoded_len(field::WRITER_SCHEMA, s));
    let data_len = schema_len + 1 + encoded_len_varint(rows_len as u64) + rows_len;
    let mut buf = BytesMut::with_capacity(GRPC_HEADER_BYTES + stream.len() + 32 + schema_len + 16);
    buf.put_bytes(0, GRPC_HEADER_BYTES);
    if !stream.is_empty() {
        encode_key(field::WRITE_STREAM, WireType::LengthDelimited, &mut buf);
        encode_varint(stream.len() as u64, &mut buf);
        buf.put_slice(stream.as_bytes());
    }
    if let Some(o) = offset {
        message::encode(field::OFFSET, &o, &mut buf);
    }
    encode_key(field::PROTO_ROWS, WireType::LengthDelimited, &mut buf);
    encode_varint(data_len as u64, &mut buf);
    if let Some(s) = &schema {
        message::encode(field::WRITER_SCHEMA, s, &mut buf);
    }
    encode_key(field::ROWS, WireType::LengthDelimited, &mut buf);
    encode_varint(rows_len as u64, &mut buf);
    let message_len = (buf.len() - GRPC_HEADER_BYTES + rows_len) as u32;
    buf[1..GRPC_HEADER_BYTES].copy_from_slice(&message_len.to_be_bytes());
    let rows = if wire.is_empty() { Bytes::new() } else { Bytes::from_owner(RowsOwner(rows.clone())).slice(wire) };
    FramedAppend { head: buf.freeze(), rows, count }
}

/// What one serialized row costs inside `ProtoRows.serialized_rows`: the field tag,
/// the length varint and the bytes.
pub fn framed_len(row: &[u8]) -> usize {
    1 + encoded_len_varint(row.len() as u64) + row.len()
}

/// The request body of one AppendRows call: each request queued on the channel, as
/// two data frames (its head, then its rows as the batch holds them), until the
/// sending side is dropped.
pub struct AppendBody {
    requests: mpsc::Receiver<FramedAppend>,
    rows: Option<Bytes>,
}

impl AppendBody {
    /// A body that sends what arrives on `requests`.
    pub fn new(requests: mpsc::Receiver<FramedAppend>) -> AppendBody {
        AppendBody { requests, rows: None }
    }
}

impl http_body::Body for AppendBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(rows) = self.rows.take() {
            return Poll::Ready(Some(Ok(Frame::data(rows))));
        }
        match ready!(self.requests.poll_recv(cx)) {
            Some(req) => {
                self.rows = (!req.rows.is_empty()).then_some(req.rows);
                Poll::Ready(Some(Ok(Frame::data(req.head))))
            }
            None => Poll::Ready(None),
        }
    }
}

/// AppendRows responses, decoded by prost.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResponseDecoder;

impl Decoder for ResponseDecoder {
    type Item = AppendRowsResponse;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<AppendRowsResponse>, Status> {
        let r = <AppendRowsResponse as prost::Message>::decode(src)
            .map_err(|e| Status::internal(format!("decoding an AppendRows response: {e}")))?;
        Ok(Some(r))
    }
}
