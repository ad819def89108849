//! The Protobuf fast path: a message's wire bytes straight to the Storage Write row,
//! with no `DynamicMessage` and no JSON value (issue 63).
//!
//! The reference path decodes a `DynamicMessage` ([`super::decoder`]), turns it into a
//! JSON object ([`super::row::to_json`]) and maps that onto the table as the JSON path
//! does. A [`Plan`], compiled once per (message type, table), reads the wire format and
//! writes the same row bytes: the fields a `DynamicMessage` would call set (a proto3
//! scalar at its zero value is not; a field with presence is once it is on the wire),
//! in the order the JSON object has them (by field name), each encoded as the JSON path
//! encodes its column's type. Last value wins for a scalar seen twice; packed and
//! unpacked repeated fields are both read.
//!
//! The plan covers what it can prove identical: the integer kinds, `bool`, `float` and
//! `double` (NaN and the infinities as the JSON path reads them back), `string`, `bytes`,
//! enums into STRING, nested messages into RECORDs, `google.protobuf.Timestamp` and the
//! wrapper types, and repeated fields of those. A message type with anything else (a
//! map, a type pairing the JSON path converts, such as an integer into a STRING column)
//! has no plan. A message the plan cannot take (bad bytes, a message field or a oneof
//! seen twice, a REQUIRED column unset, a field with no column, an out-of-range value)
//! returns `None`, and the caller takes the reference path, which gives the exact row or
//! error. A property test compares both paths byte for byte
//! (`kafka_to_bq::map::proto_fast_tests`).

use crate::bigquery::proto::{put_bytes, put_double, put_varint};
use crate::bigquery::schema::{ColumnType, Mode, Schema};
use prost_reflect::{EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor};

/// The largest field number Protobuf allows (2^29 - 1).
const MAX_FIELD_NUMBER: u32 = (1 << 29) - 1;

/// How one field's value is read from the wire.
#[derive(Debug, Clone)]
enum Read {
    /// int32, int64, uint32 (read as varints, truncated as their kind says).
    Varint {
        bits32: bool,
        unsigned: bool,
    },
    /// uint64: above i64::MAX the JSON path refuses it.
    Uint64,
    /// sint32/sint64 (zigzag).
    Zigzag {
        bits32: bool,
    },
    /// fixed32/sfixed32, fixed64/sfixed64.
    Fixed32 {
        signed: bool,
    },
    Fixed64 {
        signed: bool,
    },
    Bool,
    Float,
    Double,
    Str,
    Bytes,
    Enum(EnumDescriptor),
    Message(Box<Plan>),
    Timestamp,
    /// A wrapper type: its `value` field, read as this.
    Wrapper(Box<Read>),
}

/// One field of the message: where it goes and how it is read.
#[derive(Debug, Clone)]
struct FieldPlan {
    number: u32,
    /// The column's tag, or None: the table has no column for it.
    tag: Option<u32>,
    read: Read,
    list: bool,
    /// Whether it is set whenever it is on the wire (else only when not its zero value).
    presence: bool,
    /// The oneof it belongs to, by index among the plan's oneofs.
    oneof: Option<usize>,
}

/// A message type's plan onto a table (or a RECORD column's fields).
#[derive(Debug, Clone)]
pub struct Plan {
    /// Sorted by field name, as the JSON object orders them.
    fields: Vec<FieldPlan>,
    /// Columns that must be set (REQUIRED), by tag.
    required: Vec<u32>,
}

/// A value read from the wire.
#[derive(Debug, Clone, PartialEq)]
enum Val<'a> {
    Int(i64),
    Bool(bool),
    Float(f64),
    Bytes(&'a [u8]),
    /// An enum's number and the name written for it.
    Enum(i32, String),
    /// A nested message's encoded row.
    Row(Vec<u8>),
}

impl Plan {
    /// The plan of `desc` onto `schema`, or None when some field's type has no exact
    /// counterpart in its column.
    pub fn compile(desc: &MessageDescriptor, schema: &Schema) -> Option<Plan> {
        let mut fields: Vec<FieldDescriptor> = desc.fields().collect();
        fields.sort_by(|a, b| a.name().cmp(b.name()));
        let mut tags = std::collections::HashSet::new();
        let oneofs: Vec<String> = desc.oneofs().map(|o| o.full_name().to_string()).collect();
        let mut out = Vec::new();
        for f in fields {
            if f.is_map() {
                return None;
            }
            let oneof = f.containing_oneof().and_then(|o| oneofs.iter().position(|n| n == o.full_name()));
            let Some(idx) = schema.lookup(f.name()) else {
                let read = Read::Bytes; // never read: a field with no column sends the message to the reference path
                out.push(FieldPlan { number: f.number(), tag: None, read, list: f.is_list(), presence: true, oneof });
                continue;
            };
            let col = &schema.columns[idx];
            if !tags.insert(idx) || (col.mode == Mode::Repeated) != f.is_list() {
                return None;
            }
            let read = read_for(&f.kind(), col.typ, col.fields.as_deref())?;
            let presence =
                f.supports_presence() || matches!(read, Read::Message(_) | Read::Timestamp | Read::Wrapper(_));
            out.push(FieldPlan {
                number: f.number(),
                tag: Some(idx as u32 + 1),
                read,
                list: f.is_list(),
                presence,
                oneof,
            });
        }
        let required =
            schema.columns.iter().enumerate().filter(|(_, c)| c.mode == Mode::Required).map(|(i, _)| i as u32 + 1);
        Some(Plan { fields: out, required: required.collect() })
    }

    /// The row of the message in `bytes`, appended to `out`; None (and `out` as it was
    /// up to its length then) when the reference path must decide.
    pub fn transcode(&self, bytes: &[u8], out: &mut Vec<u8>) -> Option<()> {
        let mut slots: Vec<Slot> = vec![Slot::default(); self.fields.len()];
        self.read_into(bytes, &mut slots)?;
        self.write(&slots, out)
    }

    fn position(&self, number: u32) -> Option<usize> {
        self.fields.iter().position(|f| f.number == number)
    }

    fn read_into<'a>(&self, mut bytes: &'a [u8], slots: &mut [Slot<'a>]) -> Option<()> {
        let mut oneof_seen: Vec<Option<u32>> = Vec::new();
        while !bytes.is_empty() {
            let key = varint(&mut bytes)?;
            let (number, wire) = (u32::try_from(key >> 3).ok()?, (key & 7) as u8);
            if number == 0 || number > MAX_FIELD_NUMBER {
                return None; // not a valid field: the reference path names the error
            }
            let Some(i) = self.position(number) else {
                skip(wire, &mut bytes)?;
                continue;
            };
            let f = &self.fields[i];
            f.tag?;
            if let Some(o) = f.oneof {
                oneof_seen.resize(oneof_seen.len().max(o + 1), None);
                if oneof_seen[o].is_some_and(|n| n != number) {
                    return None;
                }
                oneof_seen[o] = Some(number);
            }
            let s = &mut slots[i];
            s.seen = true;
            if f.list && wire == 2 && packable(&f.read) {
                let mut packed = field_bytes(&mut bytes)?;
                while !packed.is_empty() {
                    s.values.push(value(&f.read, scalar_wire(&f.read), &mut packed)?);
                }
                continue;
            }
            let message = matches!(f.read, Read::Message(_) | Read::Timestamp | Read::Wrapper(_));
            if !f.list && message && !s.values.is_empty() {
                return None; // a message seen twice is merged: the reference path does that
            }
            let v = value(&f.read, wire, &mut bytes)?;
            if !f.list {
                s.values.clear();
            }
            s.values.push(v);
        }
        Some(())
    }

    fn write(&self, slots: &[Slot], out: &mut Vec<u8>) -> Option<()> {
        let mut set: Vec<u32> = Vec::new();
        for (f, s) in self.fields.iter().zip(slots) {
            if !s.seen || s.values.is_empty() {
                continue;
            }
            let tag = f.tag?;
            if !f.list && !f.presence && is_zero(&s.values[0]) {
                continue;
            }
            for v in &s.values {
                put(tag, v, out);
            }
            set.push(tag);
        }
        self.required.iter().all(|t| set.contains(t)).then_some(())
    }
}

/// What one field read: its values (one for a scalar, the last seen).
#[derive(Debug, Clone, Default)]
struct Slot<'a> {
    seen: bool,
    values: Vec<Val<'a>>,
}

fn read_for(kind: &Kind, col: ColumnType, sub: Option<&Schema>) -> Option<Read> {
    let int = col == ColumnType::Int64;
    let text = matches!(col, ColumnType::String | ColumnType::StringLike);
    Some(match kind {
        Kind::Int32 if int => Read::Varint { bits32: true, unsigned: false },
        Kind::Int64 if int => Read::Varint { bits32: false, unsigned: false },
        Kind::Uint32 if int => Read::Varint { bits32: true, unsigned: true },
        Kind::Uint64 if int => Read::Uint64,
        Kind::Sint32 if int => Read::Zigzag { bits32: true },
        Kind::Sint64 if int => Read::Zigzag { bits32: false },
        Kind::Fixed32 if int => Read::Fixed32 { signed: false },
        Kind::Sfixed32 if int => Read::Fixed32 { signed: true },
        Kind::Fixed64 if int => Read::Fixed64 { signed: false },
        Kind::Sfixed64 if int => Read::Fixed64 { signed: true },
        Kind::Bool if col == ColumnType::Bool => Read::Bool,
        Kind::Float if col == ColumnType::Float64 => Read::Float,
        Kind::Double if col == ColumnType::Float64 => Read::Double,
        Kind::String if text => Read::Str,
        Kind::Bytes if col == ColumnType::Bytes => Read::Bytes,
        Kind::Enum(e) if text => Read::Enum(e.clone()),
        Kind::Message(m) if m.full_name() == "google.protobuf.Timestamp" => {
            (col == ColumnType::Timestamp).then_some(Read::Timestamp)?
        }
        Kind::Message(m) if super::is_wrapper(m.full_name()) => {
            Read::Wrapper(Box::new(read_for(&m.get_field(1)?.kind(), col, sub)?))
        }
        Kind::Message(m) if col == ColumnType::Record => Read::Message(Box::new(Plan::compile(m, sub?)?)),
        _ => return None,
    })
}

/// Whether a repeated field of this kind may be packed.
fn packable(r: &Read) -> bool {
    !matches!(r, Read::Str | Read::Bytes | Read::Message(_) | Read::Timestamp | Read::Wrapper(_))
}

/// The wire type of one packed element.
fn scalar_wire(r: &Read) -> u8 {
    match r {
        Read::Fixed32 { .. } | Read::Float => 5,
        Read::Fixed64 { .. } | Read::Double => 1,
        _ => 0,
    }
}

/// Read one value of `r` sent with wire type `wire`.
fn value<'a>(r: &Read, wire: u8, bytes: &mut &'a [u8]) -> Option<Val<'a>> {
    let want = match r {
        Read::Str | Read::Bytes | Read::Message(_) | Read::Timestamp | Read::Wrapper(_) => 2,
        other => scalar_wire(other),
    };
    if wire != want {
        return None;
    }
    Some(match r {
        Read::Varint { bits32, unsigned } => {
            let v = varint(bytes)?;
            Val::Int(match (bits32, unsigned) {
                (true, false) => v as i32 as i64,
                (true, true) => v as u32 as i64,
                _ => v as i64,
            })
        }
        Read::Uint64 => Val::Int(i64::try_from(varint(bytes)?).ok()?),
        Read::Zigzag { bits32: true } => {
            let n = varint(bytes)? as u32;
            Val::Int(((n >> 1) as i32 ^ -((n & 1) as i32)) as i64)
        }
        Read::Zigzag { bits32: false } => {
            let n = varint(bytes)?;
            Val::Int((n >> 1) as i64 ^ -((n & 1) as i64))
        }
        Read::Fixed32 { signed } => {
            let n = u32::from_le_bytes(take(bytes, 4)?.try_into().ok()?);
            Val::Int(if *signed { n as i32 as i64 } else { n as i64 })
        }
        Read::Fixed64 { signed } => {
            let n = u64::from_le_bytes(take(bytes, 8)?.try_into().ok()?);
            Val::Int(if *signed { n as i64 } else { i64::try_from(n).ok()? })
        }
        Read::Bool => Val::Bool(varint(bytes)? != 0),
        Read::Float => Val::Float(f64::from(f32::from_le_bytes(take(bytes, 4)?.try_into().ok()?))),
        Read::Double => Val::Float(f64::from_le_bytes(take(bytes, 8)?.try_into().ok()?)),
        Read::Str => Val::Bytes(std::str::from_utf8(field_bytes(bytes)?).ok()?.as_bytes()),
        Read::Bytes => Val::Bytes(field_bytes(bytes)?),
        Read::Enum(e) => {
            let n = varint(bytes)? as i32;
            Val::Enum(n, e.get_value(n).map_or_else(|| n.to_string(), |v| v.name().to_string()))
        }
        Read::Message(plan) => {
            let mut row = Vec::new();
            plan.transcode(field_bytes(bytes)?, &mut row)?;
            Val::Row(row)
        }
        Read::Timestamp => timestamp(field_bytes(bytes)?)?,
        Read::Wrapper(inner) => wrapper(inner, field_bytes(bytes)?)?,
    })
}

/// `google.protobuf.Timestamp` as epoch microseconds.
fn timestamp(mut m: &[u8]) -> Option<Val<'static>> {
    let (mut seconds, mut nanos) = (0i64, 0i32);
    while !m.is_empty() {
        let key = varint(&mut m)?;
        if key >> 3 == 0 || key >> 3 > u64::from(MAX_FIELD_NUMBER) {
            return None;
        }
        match (key >> 3, key & 7) {
            (1, 0) => seconds = varint(&mut m)? as i64,
            (2, 0) => nanos = varint(&mut m)? as i32,
            (_, w) => skip(w as u8, &mut m)?,
        }
    }
    let micros = seconds.checked_mul(1_000_000)?.checked_add(i64::from(nanos) / 1000)?;
    // A row the reference path also writes as a whole: the value, not the message.
    Some(Val::Int(micros))
}

/// A wrapper's `value` (its zero value when absent), read as `inner`.
fn wrapper<'a>(inner: &Read, mut m: &'a [u8]) -> Option<Val<'a>> {
    let mut got = None;
    while !m.is_empty() {
        let key = varint(&mut m)?;
        if key >> 3 == 0 || key >> 3 > u64::from(MAX_FIELD_NUMBER) {
            return None;
        }
        match key >> 3 {
            1 => got = Some(value(inner, (key & 7) as u8, &mut m)?),
            _ => skip((key & 7) as u8, &mut m)?,
        }
    }
    Some(got.unwrap_or(match inner {
        Read::Bool => Val::Bool(false),
        Read::Float | Read::Double => Val::Float(0.0),
        Read::Str | Read::Bytes => Val::Bytes(&[]),
        _ => Val::Int(0),
    }))
}

fn is_zero(v: &Val) -> bool {
    match v {
        Val::Int(n) => *n == 0,
        Val::Bool(b) => !b,
        Val::Float(x) => *x == 0.0,
        Val::Bytes(b) => b.is_empty(),
        Val::Enum(n, _) => *n == 0,
        Val::Row(_) => false,
    }
}

fn put(tag: u32, v: &Val, out: &mut Vec<u8>) {
    match v {
        Val::Int(n) => put_varint(tag, *n as u64, out),
        Val::Bool(b) => put_varint(tag, *b as u64, out),
        // The JSON path names NaN "NaN" and reads it back as Rust's NaN.
        Val::Float(x) if x.is_nan() => put_double(tag, f64::NAN, out),
        Val::Float(x) => put_double(tag, *x, out),
        Val::Bytes(b) => put_bytes(tag, b, out),
        Val::Enum(_, name) => put_bytes(tag, name.as_bytes(), out),
        Val::Row(r) => put_bytes(tag, r, out),
    }
}

fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = bytes.split_first()?;
        *bytes = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if bytes.len() < n {
        return None;
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Some(head)
}

fn field_bytes<'a>(bytes: &mut &'a [u8]) -> Option<&'a [u8]> {
    let n = usize::try_from(varint(bytes)?).ok()?;
    take(bytes, n)
}

/// Skip a field of an unknown number (groups are left to the reference path).
fn skip(wire: u8, bytes: &mut &[u8]) -> Option<()> {
    match wire {
        0 => varint(bytes).map(|_| ()),
        1 => take(bytes, 8).map(|_| ()),
        2 => field_bytes(bytes).map(|_| ()),
        5 => take(bytes, 4).map(|_| ()),
        _ => None,
    }
}
