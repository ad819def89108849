//! An `AppendRowsRequest` framed straight from a batch's rows (issue 29, step 5).
//!
//! The generated request holds its rows as `Vec<Vec<u8>>`, so sending a slice of a
//! batch meant cloning every row (an allocation and a copy each) on every attempt,
//! before prost copied them again into tonic's buffer. [`frame`] writes the request's
//! protobuf encoding from the borrowed rows into one buffer instead, and
//! [`FramedAppend`] is a `prost::Message` whose encoding is those bytes, which tonic
//! sends as they are. A property test in `write` checks the bytes against prost's
//! encoding of its `append_request` for the same arguments.
//!
//! ```
//! use flexrun::bigquery::framed::frame;
//! use flexrun::bigquery::write::append_request;
//! use prost::Message;
//! let rows = vec![b"\x08\x01".to_vec(), b"\x08\x02".to_vec()];
//! let ours = frame("projects/p/datasets/d/tables/t/streams/s", Some(7), None, &rows);
//! let prost = append_request("projects/p/datasets/d/tables/t/streams/s", Some(7), None, rows).encode_to_vec();
//! assert_eq!(ours.bytes(), &prost[..]);
//! ```

use bytes::{BufMut, Bytes, BytesMut};
use gcp_bigquery_client::google::cloud::bigquery::storage::v1::ProtoSchema;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, message, WireType};
use prost_types::DescriptorProto;

/// An encoded `AppendRowsRequest`, sent as it is.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct FramedAppend(Bytes);

impl FramedAppend {
    /// The request's protobuf encoding.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for FramedAppend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FramedAppend({} bytes)", self.0.len())
    }
}

impl prost::Message for FramedAppend {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.0);
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
        self.0.len()
    }

    fn clear(&mut self) {
        self.0 = Bytes::new();
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

/// The request for `rows` on `stream`, at `offset` when given, with the writer schema
/// when `schema` is given: the bytes prost gives for `write::append_request` with the
/// same arguments.
pub fn frame(stream: &str, offset: Option<i64>, schema: Option<&DescriptorProto>, rows: &[Vec<u8>]) -> FramedAppend {
    let rows_len: usize = rows.iter().map(|r| framed_len(r)).sum();
    let schema = schema.map(|d| ProtoSchema { proto_descriptor: Some(d.clone()) });
    let schema_len = schema.as_ref().map_or(0, |s| message::encoded_len(field::WRITER_SCHEMA, s));
    let data_len = schema_len + 1 + encoded_len_varint(rows_len as u64) + rows_len;
    let mut buf = BytesMut::with_capacity(stream.len() + 32 + 1 + encoded_len_varint(data_len as u64) + data_len);
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
    for r in rows {
        encode_key(field::SERIALIZED_ROWS, WireType::LengthDelimited, &mut buf);
        encode_varint(r.len() as u64, &mut buf);
        buf.put_slice(r);
    }
    FramedAppend(buf.freeze())
}

/// What one serialized row costs inside `ProtoRows.serialized_rows`: the field tag,
/// the length varint and the bytes.
pub fn framed_len(row: &[u8]) -> usize {
    1 + encoded_len_varint(row.len() as u64) + row.len()
}
