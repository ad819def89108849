//! The Protobuf fast path ([`crate::proto::fast`]) against the reference path
//! ([`crate::proto::row::to_json`], then the JSON mapping): byte for byte on random
//! messages of a type with every kind the plan covers (each integer kind at its limits,
//! zero values with and without presence, NaN and the infinities, unknown enum numbers,
//! nested and repeated messages, packed and unpacked lists, Timestamp and wrappers, a
//! oneof), and on two messages sent as one (which Protobuf merges).

use super::json_row::encode_object;
use crate::bigquery::schema::Schema;
use crate::proto::fast::Plan;
use proptest::prelude::*;
use prost::Message as _;
use prost_reflect::{DynamicMessage, MessageDescriptor, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PROTO: &str = r#"
syntax = "proto3";
package t;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
enum Color { RED = 0; GREEN = 1; BLUE = 2; }
message Inner { string s = 1; int64 n = 2; repeated double d = 3; optional bool ob = 4; }
message All {
  int32 i32 = 1; int64 i64 = 2; uint32 u32 = 3; uint64 u64 = 4; sint32 s32 = 5; sint64 s64 = 6;
  fixed32 f32 = 7; fixed64 f64 = 8; sfixed32 sf32 = 9; sfixed64 sf64 = 10;
  bool b = 11; float fl = 12; double db = 13; string st = 14; bytes by = 15; Color c = 16;
  optional int32 oi = 17; optional string os = 18; optional double od = 19; optional Color oc = 34;
  Inner inner = 20; repeated Inner inners = 21;
  repeated int64 ri = 22; repeated sint32 rs = 23 [packed = false]; repeated float rf = 24;
  repeated string rstr = 25; repeated Color rc = 26;
  google.protobuf.Timestamp ts = 27; repeated google.protobuf.Timestamp rts = 28;
  google.protobuf.Int64Value wi = 29; google.protobuf.StringValue ws = 30; google.protobuf.DoubleValue wd = 31;
  oneof choice { string ca = 32; int64 cb = 33; }
}
"#;

fn desc() -> MessageDescriptor {
    crate::proto::decoder::compile(PROTO).unwrap().get_message_by_name("t.All").unwrap()
}

fn reference(desc: &MessageDescriptor, schema: &Schema, bytes: &[u8]) -> Option<Vec<u8>> {
    let m = DynamicMessage::decode(desc.clone(), bytes).ok()?;
    let obj = crate::proto::row::to_json(&m).ok()?;
    let mut out = Vec::new();
    encode_object(schema, &obj, "", &mut out).ok()?;
    Some(out)
}

fn fast(plan: &Plan, bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    plan.transcode(bytes, &mut out)?;
    Some(out)
}

fn int(rng: &mut StdRng) -> i64 {
    [0, 1, -1, 127, 128, -129, i32::MIN as i64, i32::MAX as i64, i64::MIN, i64::MAX, rng.random()]
        [rng.random_range(0..11)]
}

fn float(rng: &mut StdRng) -> f64 {
    [0.0, -0.0, 1.5, -2.25, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300, rng.random()][rng.random_range(0..9)]
}

fn text(rng: &mut StdRng) -> String {
    ["", "a", "héllo", "x\u{1F600}y", "with \"quotes\" and \\"][rng.random_range(0..5)].to_string()
}

fn inner(d: &MessageDescriptor, rng: &mut StdRng) -> DynamicMessage {
    let m = d.parent_pool().get_message_by_name("t.Inner").unwrap();
    let mut v = DynamicMessage::new(m);
    if rng.random_bool(0.6) {
        v.set_field_by_name("s", Value::String(text(rng)));
    }
    if rng.random_bool(0.6) {
        v.set_field_by_name("n", Value::I64(int(rng)));
    }
    if rng.random_bool(0.5) {
        v.set_field_by_name("d", Value::List((0..rng.random_range(0..3)).map(|_| Value::F64(float(rng))).collect()));
    }
    if rng.random_bool(0.5) {
        v.set_field_by_name("ob", Value::Bool(rng.random()));
    }
    v
}

fn well_known(d: &MessageDescriptor, name: &str, field: &str, value: Value) -> DynamicMessage {
    let mut m = DynamicMessage::new(d.parent_pool().get_message_by_name(name).unwrap());
    m.set_field_by_name(field, value);
    m
}

fn timestamp(d: &MessageDescriptor, rng: &mut StdRng) -> Value {
    let mut m = well_known(d, "google.protobuf.Timestamp", "seconds", Value::I64(rng.random_range(-1 << 40..1 << 40)));
    m.set_field_by_name("nanos", Value::I32(rng.random_range(0..1_000_000_000)));
    Value::Message(m)
}

/// A random message: each field set (or not) with values at the edges.
fn message(d: &MessageDescriptor, rng: &mut StdRng) -> DynamicMessage {
    let mut m = DynamicMessage::new(d.clone());
    let mut set = |name: &str, v: Value| m.set_field_by_name(name, v);
    let p = 0.6;
    let (i, f) = (int(rng), float(rng));
    let scalars: Vec<(&str, Value)> = vec![
        ("i32", Value::I32(i as i32)),
        ("i64", Value::I64(int(rng))),
        ("u32", Value::U32(i as u32)),
        ("u64", Value::U64(if rng.random_bool(0.1) { u64::MAX } else { int(rng).unsigned_abs() >> 1 })),
        ("s32", Value::I32(int(rng) as i32)),
        ("s64", Value::I64(int(rng))),
        ("f32", Value::U32(int(rng) as u32)),
        ("f64", Value::U64(int(rng).unsigned_abs() >> 1)),
        ("sf32", Value::I32(int(rng) as i32)),
        ("sf64", Value::I64(int(rng))),
        ("b", Value::Bool(rng.random())),
        ("fl", Value::F32(f as f32)),
        ("db", Value::F64(float(rng))),
        ("st", Value::String(text(rng))),
        ("by", Value::Bytes(vec![0u8, 255, 7][..rng.random_range(0..4)].to_vec().into())),
        ("c", Value::EnumNumber([0, 1, 2, 7][rng.random_range(0..4)])),
        ("oi", Value::I32(if rng.random_bool(0.5) { 0 } else { i as i32 })),
        ("os", Value::String(text(rng))),
        ("od", Value::F64(float(rng))),
        ("oc", Value::EnumNumber(rng.random_range(0..2))),
    ];
    for (name, v) in scalars {
        if rng.random_bool(p) {
            set(name, v);
        }
    }
    if rng.random_bool(p) {
        set("inner", Value::Message(inner(d, rng)));
    }
    let n = rng.random_range(0..3);
    set("inners", Value::List((0..n).map(|_| Value::Message(inner(d, rng))).collect()));
    set("ri", Value::List((0..rng.random_range(0..4)).map(|_| Value::I64(int(rng))).collect()));
    set("rs", Value::List((0..rng.random_range(0..4)).map(|_| Value::I32(int(rng) as i32)).collect()));
    set("rf", Value::List((0..rng.random_range(0..3)).map(|_| Value::F32(float(rng) as f32)).collect()));
    set("rstr", Value::List((0..rng.random_range(0..3)).map(|_| Value::String(text(rng))).collect()));
    set("rc", Value::List((0..rng.random_range(0..3)).map(|_| Value::EnumNumber(rng.random_range(0..4))).collect()));
    if rng.random_bool(p) {
        set("ts", timestamp(d, rng));
    }
    set("rts", Value::List((0..rng.random_range(0..3)).map(|_| timestamp(d, rng)).collect()));
    if rng.random_bool(p) {
        set("wi", Value::Message(well_known(d, "google.protobuf.Int64Value", "value", Value::I64(int(rng)))));
    }
    if rng.random_bool(p) {
        set("ws", Value::Message(well_known(d, "google.protobuf.StringValue", "value", Value::String(text(rng)))));
    }
    if rng.random_bool(p) {
        set("wd", Value::Message(well_known(d, "google.protobuf.DoubleValue", "value", Value::F64(float(rng)))));
    }
    match rng.random_range(0..3) {
        0 => set("ca", Value::String(text(rng))),
        1 => set("cb", Value::I64(int(rng))),
        _ => {}
    }
    m
}

#[test]
fn the_test_type_has_a_plan_and_a_known_row_matches() {
    let d = desc();
    let schema = crate::proto::table::table_schema(&d).unwrap();
    let plan = Plan::compile(&d, &schema).expect("every kind of the test type is covered");
    let mut rng = StdRng::seed_from_u64(1);
    let bytes = message(&d, &mut rng).encode_to_vec();
    let row = fast(&plan, &bytes).expect("the fast path maps it");
    assert_eq!(Some(row), reference(&d, &schema, &bytes));
    // A map has no plan: the reference path maps it.
    let pool = crate::proto::decoder::compile(r#"syntax = "proto3"; message M { map<string, int64> m = 1; }"#).unwrap();
    let m = pool.get_message_by_name("M").unwrap();
    assert!(Plan::compile(&m, &crate::proto::table::table_schema(&m).unwrap()).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn the_fast_path_gives_the_reference_paths_row_or_leaves_it_to_it(seed in any::<u64>(), merge in any::<bool>()) {
        let d = desc();
        let schema = crate::proto::table::table_schema(&d).unwrap();
        let plan = Plan::compile(&d, &schema).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut bytes = message(&d, &mut rng).encode_to_vec();
        if merge {
            // Two messages sent as one: Protobuf merges them (the last scalar wins,
            // lists concatenate, messages merge).
            bytes.extend(message(&d, &mut rng).encode_to_vec());
        }
        if rng.random_bool(0.5) {
            // Zero values written explicitly (proto3 writers may): i32 = 0, fl = 0.0,
            // st = "", c = RED, b = false, db = -0.0; a zero without presence is unset.
            let zeros: [&[u8]; 6] = [&[0x08, 0], &[0x65, 0, 0, 0, 0], &[0x72, 0], &[0x80, 0x01, 0], &[0x58, 0], &[0x69, 0, 0, 0, 0, 0, 0, 0, 0x80]];
            for z in zeros.iter().filter(|_| rng.random_bool(0.5)) {
                bytes.extend_from_slice(z);
            }
        }
        let (got, want) = (fast(&plan, &bytes), reference(&d, &schema, &bytes));
        if let Some(row) = &got {
            prop_assert_eq!(Some(row), want.as_ref());
        } else if !merge {
            // One message: the plan leaves only what the reference path refuses.
            prop_assert!(want.is_none(), "the fast path declined a row the reference path maps");
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_never_make_a_row_the_reference_path_refuses(
        bytes in proptest::collection::vec(any::<u8>(), 0..64)
    ) {
        let d = desc();
        let schema = crate::proto::table::table_schema(&d).unwrap();
        let plan = Plan::compile(&d, &schema).unwrap();
        if let Some(row) = fast(&plan, &bytes) {
            prop_assert_eq!(Some(row), reference(&d, &schema, &bytes));
        }
    }
}
