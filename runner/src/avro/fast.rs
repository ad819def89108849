//! The Avro fast path: Avro binary straight to protobuf row bytes, with no `Value`.
//!
//! `apache-avro` decodes a datum into a `types::Value` tree (a `String` per field name
//! and per string value) that [`super::row`] then encodes: correct, but several times
//! the CPU of the JSON path per byte. For the common schemas a [`Plan`] compiled once
//! per (writer schema, table) pair reads the datum and writes each field as it goes.
//!
//! The fast path only covers what it can prove identical: primitives, enums, strings,
//! bytes, bytes-backed decimals, date and timestamp-millis/micros onto their BigQuery types, `["null", T]`
//! unions, arrays of those, and records. A schema with anything else has no plan. A
//! message the plan cannot take (bad bytes, a null in a REQUIRED column, invalid UTF-8)
//! returns `None`, and the caller maps it with [`super::row`], which gives the exact
//! error. A property test compares both paths byte for byte.

use super::WriterSchema;
use crate::bigquery::proto::{put_bytes, put_double, put_varint};
use crate::bigquery::schema::{ColumnType, Mode, Schema as BqSchema};
use apache_avro::schema::Schema;

/// How one value is read and written.
#[derive(Debug, Clone)]
enum Op {
    Bool,
    /// int or long (both zigzag varints) into INT64.
    Int,
    Float,
    Double,
    /// string into STRING or a string-like column.
    Str,
    Bytes,
    /// An enum's symbol into STRING.
    Enum(Vec<String>),
    /// date (days) into DATE.
    Date,
    /// timestamp-millis (×1000) or -micros into TIMESTAMP.
    Timestamp {
        millis: bool,
    },
    /// A bytes-backed decimal into NUMERIC/BIGNUMERIC (as text, at the schema's scale).
    Decimal {
        scale: usize,
    },
    /// A nested record.
    Record(Box<Plan>),
    /// `["null", T]` (or `[T, "null"]`): the branch index that is null, and T.
    Nullable {
        null_branch: u64,
        inner: Box<Op>,
    },
    /// An array of non-null items into a REPEATED column.
    Array(Box<Op>),
}

/// A record's fields in writer order: the proto tag each goes to, and how.
#[derive(Debug, Clone)]
pub struct Plan {
    fields: Vec<(u32, Op)>,
}

fn scalar_op(w: &WriterSchema, s: &Schema, col: ColumnType, sub: Option<&BqSchema>) -> Option<Op> {
    Some(match (w.resolve(s), col) {
        (Schema::Boolean, ColumnType::Bool) => Op::Bool,
        (Schema::Int | Schema::Long, ColumnType::Int64) => Op::Int,
        (Schema::Float, ColumnType::Float64) => Op::Float,
        (Schema::Double, ColumnType::Float64) => Op::Double,
        (Schema::String, ColumnType::String | ColumnType::StringLike) => Op::Str,
        (Schema::Bytes, ColumnType::Bytes) => Op::Bytes,
        (Schema::Enum(e), ColumnType::String) => Op::Enum(e.symbols.clone()),
        (Schema::Date, ColumnType::Date) => Op::Date,
        (Schema::TimestampMillis, ColumnType::Timestamp) => Op::Timestamp { millis: true },
        (Schema::TimestampMicros, ColumnType::Timestamp) => Op::Timestamp { millis: false },
        (Schema::Decimal(d), ColumnType::StringLike) if matches!(*d.inner, Schema::Bytes) => {
            Op::Decimal { scale: d.scale }
        }
        (Schema::Record(r), ColumnType::Record) => Op::Record(Box::new(plan_fields(w, &r.fields, sub?)?)),
        _ => return None,
    })
}

fn field_op(w: &WriterSchema, s: &Schema, col: &crate::bigquery::schema::Column) -> Option<Op> {
    let sub = col.fields.as_deref();
    match (w.resolve(s), col.mode) {
        (Schema::Array(a), Mode::Repeated) => Some(Op::Array(Box::new(scalar_op(w, &a.items, col.typ, sub)?))),
        (_, Mode::Repeated) => None,
        (Schema::Union(u), Mode::Nullable) => match u.variants() {
            [Schema::Null, t] => Some(Op::Nullable { null_branch: 0, inner: Box::new(scalar_op(w, t, col.typ, sub)?) }),
            [t, Schema::Null] => Some(Op::Nullable { null_branch: 1, inner: Box::new(scalar_op(w, t, col.typ, sub)?) }),
            _ => None,
        },
        (Schema::Union(_), _) => None,
        (other, _) => scalar_op(w, other, col.typ, sub),
    }
}

fn plan_fields(w: &WriterSchema, fields: &[apache_avro::schema::RecordField], table: &BqSchema) -> Option<Plan> {
    let mut out = Vec::with_capacity(fields.len());
    let mut covered = vec![false; table.columns.len()];
    for f in fields {
        let idx = table.lookup(&f.name)?;
        if std::mem::replace(&mut covered[idx], true) {
            return None;
        }
        out.push((idx as u32 + 1, field_op(w, &f.schema, &table.columns[idx])?));
    }
    // A REQUIRED column no field fills is an error: leave it to the Value path.
    let uncovered_required = table.columns.iter().zip(&covered).any(|(c, cov)| c.mode == Mode::Required && !cov);
    (!uncovered_required).then_some(Plan { fields: out })
}

impl Plan {
    /// The plan for records of `w` into `table`, if the fast path covers them.
    pub fn compile(w: &WriterSchema, table: &BqSchema) -> Option<Plan> {
        match &w.schema {
            Schema::Record(r) => plan_fields(w, &r.fields, table),
            _ => None,
        }
    }

    /// Transcode one datum into `out` (appended). None: use the Value path.
    pub fn transcode(&self, datum: &[u8], out: &mut Vec<u8>) -> Option<()> {
        let mut r = Reader { b: datum };
        self.record(&mut r, out)?;
        r.b.is_empty().then_some(())
    }

    fn record(&self, r: &mut Reader<'_>, out: &mut Vec<u8>) -> Option<()> {
        for (tag, op) in &self.fields {
            write(op, *tag, r, out)?;
        }
        Some(())
    }
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn long(&mut self) -> Option<i64> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let (&byte, rest) = self.b.split_first()?;
            self.b = rest;
            v |= ((byte & 0x7f) as u64) << (7 * i);
            if byte & 0x80 == 0 {
                return Some(((v >> 1) as i64) ^ -((v & 1) as i64));
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (x, rest) = self.b.split_at(n);
        self.b = rest;
        Some(x)
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.long()?).ok()?;
        self.take(n)
    }
}

/// Read one value with `op` and write it as field `tag`; a null writes nothing.
fn write(op: &Op, tag: u32, r: &mut Reader<'_>, out: &mut Vec<u8>) -> Option<()> {
    match op {
        Op::Bool => match r.take(1)? {
            [0] => put_varint(tag, 0, out),
            [1] => put_varint(tag, 1, out),
            _ => return None,
        },
        Op::Int => put_varint(tag, r.long()? as u64, out),
        Op::Float => put_double(tag, f32::from_le_bytes(r.take(4)?.try_into().ok()?) as f64, out),
        Op::Double => put_double(tag, f64::from_le_bytes(r.take(8)?.try_into().ok()?), out),
        Op::Str => put_bytes(tag, std::str::from_utf8(r.bytes()?).ok()?.as_bytes(), out),
        Op::Bytes => put_bytes(tag, r.bytes()?, out),
        Op::Enum(symbols) => put_bytes(tag, symbols.get(usize::try_from(r.long()?).ok()?)?.as_bytes(), out),
        Op::Date => put_varint(tag, i32::try_from(r.long()?).ok()? as i64 as u64, out),
        Op::Timestamp { millis } => {
            let v = r.long()?;
            put_varint(tag, if *millis { v.checked_mul(1000)? } else { v } as u64, out)
        }
        Op::Decimal { scale } => put_bytes(tag, super::row::decimal_text(r.bytes()?, *scale)?.as_bytes(), out),
        Op::Record(plan) => {
            let mut inner = Vec::with_capacity(64);
            plan.record(r, &mut inner)?;
            put_bytes(tag, &inner, out)
        }
        Op::Nullable { null_branch, inner } => {
            let branch = r.long()?;
            if branch as u64 == *null_branch {
                return Some(());
            }
            if !(0..=1).contains(&branch) {
                return None;
            }
            write(inner, tag, r, out)?;
        }
        Op::Array(item) => loop {
            let mut n = r.long()?;
            if n == 0 {
                break;
            }
            if n < 0 {
                n = n.checked_neg()?;
                r.long()?; // the block's size in bytes
            }
            for _ in 0..n {
                write(item, tag, r, out)?;
            }
        },
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::avro::row::encode_record;
    use crate::avro::table::table_schema;
    use apache_avro::types::Value;
    use proptest::prelude::*;

    const SCHEMA: &str = r#"{"type":"record","name":"R","fields":[
        {"name":"id","type":"long"}, {"name":"n","type":"int"}, {"name":"b","type":"boolean"},
        {"name":"f","type":"float"}, {"name":"d","type":"double"}, {"name":"s","type":"string"},
        {"name":"by","type":"bytes"},
        {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B","C"]}},
        {"name":"day","type":{"type":"int","logicalType":"date"}},
        {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":20,"scale":3}},
        {"name":"opt","type":["null","string"]}, {"name":"opt2","type":["long","null"]},
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"r","type":{"type":"record","name":"In","fields":[{"name":"x","type":"long"},{"name":"y","type":["null","double"]}]}}
    ]}"#;

    fn record() -> impl Strategy<Value = Value> {
        (
            (any::<i64>(), any::<i32>(), any::<bool>(), any::<f32>(), any::<f64>(), ".{0,20}"),
            (
                proptest::collection::vec(any::<u8>(), 0..20),
                0u32..3,
                -100_000i32..100_000,
                -1_000_000_000_000i64..1_000_000_000_000,
            ),
            (
                proptest::option::of(".{0,10}"),
                proptest::option::of(any::<i64>()),
                proptest::collection::vec(".{0,5}", 0..4),
            ),
            (any::<i64>(), proptest::option::of(any::<f64>()), any::<i64>()),
        )
            .prop_map(|((id, n, b, f, d, s), (by, e, day, ts), (opt, opt2, tags), (x, y, price))| {
                let u = |i, v| Value::Union(i, Box::new(v));
                Value::Record(vec![
                    ("id".into(), Value::Long(id)),
                    ("n".into(), Value::Int(n)),
                    ("b".into(), Value::Boolean(b)),
                    ("f".into(), Value::Float(f)),
                    ("d".into(), Value::Double(d)),
                    ("s".into(), Value::String(s)),
                    ("by".into(), Value::Bytes(by)),
                    ("e".into(), Value::Enum(e, ["A", "B", "C"][e as usize].into())),
                    ("day".into(), Value::Date(day)),
                    ("ts".into(), Value::TimestampMillis(ts)),
                    (
                        "price".into(),
                        Value::Decimal(apache_avro::Decimal::from(
                            num_bigint::BigInt::from(price).to_signed_bytes_be(),
                        )),
                    ),
                    ("opt".into(), opt.map_or(u(0, Value::Null), |v| u(1, Value::String(v)))),
                    ("opt2".into(), opt2.map_or(u(1, Value::Null), |v| u(0, Value::Long(v)))),
                    ("tags".into(), Value::Array(tags.into_iter().map(Value::String).collect())),
                    (
                        "r".into(),
                        Value::Record(vec![
                            ("x".into(), Value::Long(x)),
                            ("y".into(), y.map_or(u(0, Value::Null), |v| u(1, Value::Double(v)))),
                        ]),
                    ),
                ])
            })
    }

    proptest! {
        #[test]
        fn the_fast_path_writes_the_same_bytes_as_the_value_path(v in record()) {
            let w = WriterSchema::parse(SCHEMA).unwrap();
            let table = table_schema(&w, false).unwrap();
            let plan = Plan::compile(&w, &table).expect("this schema has a plan");
            let datum = apache_avro::to_avro_datum(&w.schema, v).unwrap();
            let decoded = apache_avro::from_avro_datum(&w.schema, &mut &datum[..], None).unwrap();
            let mut slow = Vec::new();
            encode_record(&w, &table, &decoded, &mut slow).unwrap();
            let mut fast = Vec::new();
            plan.transcode(&datum, &mut fast).expect("fast path takes it");
            prop_assert_eq!(fast, slow);
        }
    }

    #[test]
    fn schemas_and_messages_outside_the_fast_path_are_left_to_the_value_path() {
        let w = WriterSchema::parse(
            r#"{"type":"record","name":"R","fields":[{"name":"m","type":{"type":"map","values":"long"}}]}"#,
        )
        .unwrap();
        assert!(Plan::compile(&w, &table_schema(&w, false).unwrap()).is_none(), "maps have no plan");
        let w = WriterSchema::parse(r#"{"type":"record","name":"R","fields":[{"name":"s","type":"string"}]}"#).unwrap();
        let plan = Plan::compile(&w, &table_schema(&w, false).unwrap()).unwrap();
        assert!(plan.transcode(&[2, 0xff], &mut Vec::new()).is_none(), "invalid UTF-8");
        assert!(plan.transcode(&[4, b'a'], &mut Vec::new()).is_none(), "truncated");
        assert!(plan.transcode(&[2, b'a', 0], &mut Vec::new()).is_none(), "bytes left over");
        let required = BqSchema::from_json(
            &serde_json::json!([{"name":"s","type":"STRING"},{"name":"z","type":"STRING","mode":"REQUIRED"}]),
        )
        .unwrap();
        assert!(Plan::compile(&w, &required).is_none(), "a REQUIRED column no field fills");
    }
}
