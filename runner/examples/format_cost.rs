//! The transform's CPU cost per message format: the same generated documents mapped to
//! rows as JSON, as Avro (Confluent wire format), as Protobuf (the message alone, as
//! `messageFormat=PROTO` reads it), and as JSON through a JavaScript UDF.
//!
//! No services: the documents are generated in memory (the generator crate), encoded
//! both ways, then each round maps every message with `Mapper::map_message`, the
//! function every kafka-to-bq batch calls. Prints one line per (shape, format, round)
//! as tab-separated `shape format round messages bytes seconds`;
//! `scripts/bench-formats.sh` turns them into a table of medians.
//!
//! ```text
//! cargo run --release --example format_cost -- [MESSAGES] [ROUNDS]
//! ```

use flexrun::avro::table::table_schema;
use flexrun::avro::wire::{confluent_frame, AvroDecoder, Framing};
use flexrun::avro::{from_json::to_avro, WriterSchema};
use flexrun::kafka_to_bq::map::transform::{Input, Mapper};
use flexrun::udf::Udf;
use std::sync::Arc;
use std::time::Instant;

/// Each shape's Protobuf message (`Row`), field for field as its Avro schema.
const PROTOS: [&str; 2] = [
    r#"syntax = "proto3"; message Row { optional int64 id = 1; int64 logStreamId = 2; string message = 3; }"#,
    r#"syntax = "proto3"; enum Level { LOW = 0; HIGH = 1; } message Addr { string city = 1; string street = 2; }
       message Row { optional int64 id = 1; string name = 2; optional Level level = 3; string day = 4; string price = 5;
                     repeated string tags = 6; Addr addr = 7; }"#,
];

/// (name, generator template, Avro schema): a log line as in the seeds, and a typed record.
const SHAPES: [(&str, &str, &str); 2] = [
    (
        "log-1KB",
        r#"{"id": {{index(0)}}, "logStreamId": {{integer(1000001,2000000)}}, "message": "{{alphaNumeric(962)}}"}"#,
        r#"{"type":"record","name":"Log","fields":[{"name":"id","type":"long"},{"name":"logStreamId","type":"long"},{"name":"message","type":"string"}]}"#,
    ),
    (
        "typed-200B",
        r#"{"id": {{index(0)}}, "name": "{{firstName()}} {{lastName()}}", "level": "{{random("LOW","HIGH")}}", "day": "2024-01-15", "price": "{{integer(1,999)}}.{{integer(10,99)}}", "tags": ["{{alpha(5)}}", "{{alpha(8)}}", "{{alpha(3)}}"], "addr": {"city": "{{city()}}", "street": "{{street()}}"}}"#,
        r#"{"type":"record","name":"Order","fields":[
            {"name":"id","type":"long"}, {"name":"name","type":"string"},
            {"name":"level","type":{"type":"enum","name":"Level","symbols":["LOW","HIGH"]}},
            {"name":"day","type":{"type":"int","logicalType":"date"}},
            {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
            {"name":"tags","type":{"type":"array","items":"string"}},
            {"name":"addr","type":{"type":"record","name":"Addr","fields":[{"name":"city","type":"string"},{"name":"street","type":"string"}]}}]}"#,
    ),
];

const UDF: &str = "function transform(s) { var o = JSON.parse(s); o.id = o.id + 0; return JSON.stringify(o); }";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let rounds: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    let dir = tempfile::tempdir().expect("temp dir");
    let js = dir.path().join("udf.js");
    std::fs::write(&js, UDF).expect("write udf");
    let udf = Arc::new(Udf::new(js.to_str().expect("path"), "transform", None).expect("udf loads"));
    for ((shape, template, avsc), proto) in SHAPES.into_iter().zip(PROTOS) {
        let w = WriterSchema::parse(avsc).expect("schema");
        let desc = flexrun::proto::decoder::compile(proto).expect("proto").get_message_by_name("Row").expect("Row");
        let mut protos = Vec::with_capacity(n);
        let table = table_schema(&w, false).expect("table");
        let mut generator = flexrun::data_generator::Generator::new(template, 7).expect("template");
        let mut json = Vec::with_capacity(n);
        let mut avro = Vec::with_capacity(n);
        let mut buf = String::new();
        for _ in 0..n {
            generator.next_into(&mut buf).expect("generate");
            let doc: serde_json::Value = serde_json::from_str(&buf).expect("json");
            let datum = apache_avro::to_avro_datum(&w.schema, to_avro(&w, &doc).expect("fits")).expect("encode");
            let mut framed = Vec::new();
            confluent_frame(1, &datum, &mut framed);
            let mut de = serde_json::Deserializer::from_str(&buf);
            let msg = prost_reflect::DynamicMessage::deserialize(desc.clone(), &mut de).expect("fits the proto");
            protos.push(prost::Message::encode_to_vec(&msg));
            json.push(buf.clone().into_bytes());
            avro.push(framed);
        }
        let decoder = Arc::new(AvroDecoder::with_file(Framing::Confluent, w.clone()));
        let json_mapper = Mapper::with_input(table.clone(), 10_000_000, Input::Json, false).expect("mapper");
        let avro_mapper = Mapper::with_input(table.clone(), 10_000_000, Input::Avro(decoder), false).expect("mapper");
        let udf_mapper = json_mapper.clone().with_udf(Some(udf.clone()));
        let proto_input = Input::Proto(Arc::new(flexrun::proto::ProtoDecoder::with_message(desc)));
        let proto_mapper = Mapper::with_input(table.clone(), 10_000_000, proto_input, false).expect("mapper");
        let ways: [(&str, &Mapper, &Vec<Vec<u8>>); 4] = [
            ("json", &json_mapper, &json),
            ("avro", &avro_mapper, &avro),
            ("proto", &proto_mapper, &protos),
            ("json+udf", &udf_mapper, &json),
        ];
        for round in 0..rounds {
            for (name, mapper, msgs) in ways {
                let bytes: usize = msgs.iter().map(Vec::len).sum();
                let mut row = Vec::with_capacity(2048);
                let t = Instant::now();
                let mut ok = 0usize;
                for m in msgs {
                    ok += mapper.map_message(None, m, None, &mut row).is_ok() as usize;
                }
                let secs = t.elapsed().as_secs_f64();
                assert_eq!(ok, msgs.len(), "{shape}/{name}: every message maps");
                println!("{shape}\t{name}\t{round}\t{}\t{bytes}\t{secs:.6}", msgs.len());
            }
        }
    }
}
