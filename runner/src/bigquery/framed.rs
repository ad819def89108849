//! An `AppendRowsRequest` framed straight from a batch's rows (issue 29, step 5).
//!
//! The generated request holds its rows as `Vec<Vec<u8>>`, so sending a slice of a
//! batch meant cloning every row (an allocation and a copy each) on every attempt,
//! before prost copied them again into tonic's buffer. Now a [`FramedAppend`] holds
//! the request's head (stream, offset, writer schema and the length prefixes, a few
//! bytes) and shares the batch's rows ([`SharedRows`]); [`FramedCodec`] sizes tonic's
//! buffer once and writes the head and each row's tag, length and bytes into it. A
//! row is copied once on its way out, into the buffer tonic hands to HTTP/2. A
//! property test in `write` checks the bytes against prost's encoding of its
//! `append_request` for the same arguments.
//!
//! ```
//! use flexrun::bigquery::framed::frame;
//! use flexrun::bigquery::write::append_request;
//! use prost::Message;
//! use std::sync::Arc;
//! let rows = Arc::new(vec![b"\x08\x01".to_vec(), b"\x08\x02".to_vec(), b"\x08\x03".to_vec()]);
//! let ours = frame("projects/p/datasets/d/tables/t/streams/s", Some(7), None, &rows, 1..3);
//! let prost = append_request("projects/p/datasets/d/tables/t/streams/s", Some(7), None, rows[1..3].to_vec());
//! assert_eq!(ours.encode_to_vec(), prost.encode_to_vec());
//! ```

use bytes::{BufMut, Bytes, BytesMut};
use gcp_bigquery_client::google::cloud::bigquery::storage::v1::{AppendRowsResponse, ProtoSchema};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, message, WireType};
use prost_types::DescriptorProto;
use std::ops::Range;
use std::sync::Arc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// A batch's encoded rows, shared between the batch and the requests that send them.
/// Once every request of an append is answered, tonic has dropped them, and the batch
/// holds its rows alone again (`Arc::try_unwrap`).
pub type SharedRows = Arc<Vec<Vec<u8>>>;

/// An `AppendRowsRequest`: its head encoded, its rows `rows[range]` of a batch.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct FramedAppend {
    head: Bytes,
    rows: SharedRows,
    range: Range<usize>,
    len: usize,
}

impl std::fmt::Debug for FramedAppend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FramedAppend({} rows, {} bytes)", self.range.len(), self.len)
    }
}

impl prost::Message for FramedAppend {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.head);
        for r in &self.rows[self.range.clone()] {
            encode_key(field::SERIALIZED_ROWS, WireType::LengthDelimited, buf);
            encode_varint(r.len() as u64, buf);
            buf.put_slice(r);
        }
    }

    /// Never decoded: a request only goes out.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.len
    }

    fn clear(&mut self) {
        *self = FramedAppend::default();
    }
}

/// The AppendRows codec: [`FramedAppend`] out, written into tonic's buffer sized once
/// for it (prost's encoder grows it as it writes, copying it again at each doubling);
/// `AppendRowsResponse` in, decoded by prost.
#[derive(Debug, Clone, Copy, Default)]
pub struct FramedCodec;

/// [`FramedCodec`]'s encoder.
#[derive(Debug, Clone, Copy, Default)]
pub struct FramedEncoder;

impl Encoder for FramedEncoder {
    type Item = FramedAppend;
    type Error = Status;

    fn encode(&mut self, item: FramedAppend, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(item.len);
        prost::Message::encode_raw(&item, dst);
        Ok(())
    }
}

impl Codec for FramedCodec {
    type Encode = FramedAppend;
    type Decode = AppendRowsResponse;
    type Encoder = FramedEncoder;
    type Decoder = ResponseDecoder;

    fn encoder(&mut self) -> FramedEncoder {
        FramedEncoder
    }

    fn decoder(&mut self) -> ResponseDecoder {
        ResponseDecoder
    }
}

/// [`FramedCodec`]'s decoder: prost's, for `AppendRowsResponse`.
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

/// `AppendRowsRequest` field numbers (storage.proto).
mod field {
    pub const WRITE_STREAM: u32 = 1;
    pub const OFFSET: u32 = 2;
    pub const PROTO_ROWS: u32 = 4;
    /// `ProtoData.writer_schema`.
    pub const WRITER_SCHEMA: u32 = 1;
    /// `ProtoData.rows`.
    pub const ROWS: u32 = 2;
    /// `ProtoRows.serialized_rows`.
    pub const SERIALIZED_ROWS: u32 = 1;
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
    let rows_len: usize = rows[range.clone()].iter().map(|r| framed_len(r)).sum();
    let schema = schema.map(|d| ProtoSchema { proto_descriptor: Some(d.clone()) });
    let schema_len = schema.as_ref().map_or(0, |s| message::encoded_len(field::WRITER_SCHEMA, s));
    let data_len = schema_len + 1 + encoded_len_varint(rows_len as u64) + rows_len;
    let mut buf = BytesMut::with_capacity(stream.len() + 32 + schema_len + 16);
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
    let len = buf.len() + rows_len;
    FramedAppend { head: buf.freeze(), rows: rows.clone(), range, len }
}

/// What one serialized row costs inside `ProtoRows.serialized_rows`: the field tag,
/// the length varint and the bytes.
pub fn framed_len(row: &[u8]) -> usize {
    1 + encoded_len_varint(row.len() as u64) + row.len()
}
