//! Protobuf end to end (`messageFormat=PROTO` and `PROTO_CONFLUENT_WIRE_FORMAT`, and the
//! generator's `outputType=PROTO`):
//! messages of every kind of field into a table made from their descriptor, and
//! Confluent's wire format through the registry (schema id, message indexes) into an
//! existing table; bad records go to the dead-letter table with the reason.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use flexrun::bigquery::TableRef;
use prost_reflect::{DynamicMessage, MessageDescriptor};

const SHOP: &str = r#"syntax = "proto3"; package shop;
import "google/protobuf/timestamp.proto"; import "google/protobuf/wrappers.proto";
enum Level { LOW = 0; HIGH = 1; }
message Line { string sku = 1; int64 qty = 2; }
message Order {
  int64 id = 1; uint32 units = 2; double price = 3; bool paid = 4; string note = 5; bytes raw = 6;
  Level level = 7; Line first = 8; repeated string tags = 9; map<string, int64> counts = 10;
  google.protobuf.Timestamp placed = 11; google.protobuf.Int64Value maybe = 12; repeated Line lines = 13;
}
message Refund { int64 id = 1; string note = 5; }"#;

/// A message of `desc` from its proto3 JSON form.
fn message(desc: &MessageDescriptor, json: serde_json::Value) -> Vec<u8> {
    let msg = DynamicMessage::deserialize(desc.clone(), json).expect("fits the message");
    prost::Message::encode_to_vec(&msg)
}

fn pool() -> prost_reflect::DescriptorPool {
    flexrun::proto::decoder::compile(SHOP).expect("compiles")
}

fn order(i: i64) -> serde_json::Value {
    serde_json::json!({
        "id": i, "units": 3, "price": 2.5, "paid": true, "note": format!("n{i}"), "raw": "AAEC",
        "level": "HIGH", "first": {"sku": "a", "qty": 1}, "tags": ["x", "y"], "counts": {"b": 2, "a": 1},
        "placed": "2024-01-31T12:00:00.250Z", "maybe": i * 10, "lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_messages_of_every_kind_land_in_a_table_made_from_their_descriptor() {
    let s = stack();
    let topic = unique("proto_file");
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pb = dir.path().join("shop.pb");
    std::fs::write(&pb, pool().encode_to_vec()).unwrap();
    let desc = pool().get_message_by_name("shop.Order").unwrap();
    let mut values: Vec<Vec<u8>> = (1..=20).map(|i| message(&desc, order(i))).collect();
    // A proto3 message with nothing set: proto3 writes no zero values, so all is NULL.
    values.push(message(&desc, serde_json::json!({})));
    let mut truncated = message(&desc, order(99));
    truncated.truncate(truncated.len() - 3);
    values.push(truncated);
    produce_values(&s, &topic, &values).await;
    let t = TableRef { project: PROJECT.into(), dataset: "proto".into(), table: topic.clone() };
    let dlq = TableRef { table: format!("{topic}_dlq"), ..t.clone() };
    let params = format!(
        "readBootstrapServerAndTopic={};{topic},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=PROTO,protoSchemaPath={},fullMessageName=shop.Order,outputTableSpec={t},outputDeadletterTable={dlq}",
        s.kafka,
        pb.display()
    );
    let o = run_job("proto-file", &dir.path().join("ck"), &params, "20s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&t).await.0, 21);
    let fq = format!("`{}.{}.{}`", t.project, t.dataset, t.table);
    let row = s
        .rows(&format!(
            "SELECT units, price, paid, note, TO_BASE64(raw), level, first.sku, ARRAY_LENGTH(tags), UNIX_MICROS(placed), maybe, ARRAY_LENGTH(lines) FROM {fq} WHERE id = 7"
        ))
        .await;
    let got: Vec<String> = row[0].iter().map(|v| v.clone().unwrap_or_else(|| "NULL".into())).collect();
    assert_eq!(
        got,
        ["3", "2.5", "true", "n7", "AAEC", "HIGH", "a", "2", "1706702400250000", "70", "2"],
        "every kind of field, in its column"
    );
    let counts =
        s.rows(&format!("SELECT c.key, c.value FROM {fq}, UNNEST(counts) AS c WHERE id = 7 ORDER BY c.key")).await;
    assert_eq!(
        counts,
        [[Some("a".into()), Some("1".into())], [Some("b".into()), Some("2".into())]],
        "a map as key/value records"
    );
    let empty = s.rows(&format!("SELECT units, paid, note, level, maybe, placed FROM {fq} WHERE id IS NULL")).await;
    assert_eq!(
        empty[0].iter().map(|v| v.clone().unwrap_or_else(|| "NULL".into())).collect::<Vec<_>>(),
        ["NULL", "NULL", "NULL", "NULL", "NULL", "NULL"],
        "a message that carries no field: every column NULL, as BigQuery reads a proto3 row"
    );
    let why = s.rows(&format!("SELECT errorMessage FROM `{}.{}.{}`", dlq.project, dlq.dataset, dlq.table)).await;
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(why[0][0].as_deref().unwrap_or("").contains("not a valid shop.Order message"), "{why:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_in_confluents_wire_format_takes_schemas_and_message_indexes_from_the_registry() {
    let s = stack();
    let registry = std::env::var("FLEXRUN_SCHEMA_REGISTRY").expect("FLEXRUN_SCHEMA_REGISTRY: run with scripts/test.sh");
    let topic = unique("proto_reg");
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    let client = flexrun::avro::registry::Registry::new(&registry);
    let id = client.register_typed(&format!("{topic}-value"), SHOP, "PROTOBUF").await.unwrap();
    let pool = pool();
    let (order_d, refund_d) =
        (pool.get_message_by_name("shop.Order").unwrap(), pool.get_message_by_name("shop.Refund").unwrap());
    let framed = |id: u32, indexes: &[i64], body: Vec<u8>| {
        let mut out = Vec::new();
        flexrun::proto::decoder::frame(id, indexes, &body, &mut out);
        out
    };
    let mut values: Vec<Vec<u8>> = Vec::new();
    for i in 1..=10 {
        values.push(framed(id, &[1], message(&order_d, serde_json::json!({"id": i, "note": "order"}))));
        values.push(framed(id, &[2], message(&refund_d, serde_json::json!({"id": 100 + i, "note": "refund"}))));
    }
    values.push(framed(id, &[9], message(&refund_d, serde_json::json!({"id": 1}))));
    values.push(framed(999_999, &[0], message(&refund_d, serde_json::json!({"id": 2}))));
    values.push(b"\x01not framed".to_vec());
    produce_values(&s, &topic, &values).await;
    // One existing table that both message types fit.
    let t = TableRef { project: PROJECT.into(), dataset: "proto".into(), table: topic.clone() };
    let schema = flexrun::bigquery::schema::Schema::from_json(&serde_json::json!([
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"}, {"name": "note", "type": "STRING", "mode": "NULLABLE"}
    ]))
    .unwrap();
    let c = flexrun::bigquery::rest::client(&s.bq).await.unwrap();
    answer("create table", flexrun::bigquery::rest::ensure_table(&c, &s.bq, &t, &schema)).await.unwrap();
    let dlq = TableRef { table: format!("{topic}_dlq"), ..t.clone() };
    let params = format!(
        "readBootstrapServerAndTopic={};{topic},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=PROTO_CONFLUENT_WIRE_FORMAT,schemaRegistryConnectionUrl={registry},outputTableSpec={t},outputDeadletterTable={dlq}",
        s.kafka
    );
    let dir = tempfile::tempdir().unwrap();
    let o = run_job("proto-reg", &dir.path().join("ck"), &params, "20s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let fq = format!("`{}.{}.{}`", t.project, t.dataset, t.table);
    let by_note = s.rows(&format!("SELECT note, COUNT(*) FROM {fq} GROUP BY note ORDER BY note")).await;
    assert_eq!(by_note, [[Some("order".into()), Some("10".into())], [Some("refund".into()), Some("10".into())]]);
    let why = s
        .rows(&format!(
            "SELECT errorMessage FROM `{}.{}.{}` ORDER BY errorMessage",
            dlq.project, dlq.dataset, dlq.table
        ))
        .await;
    let why: Vec<String> = why.into_iter().map(|r| r[0].clone().unwrap_or_default()).collect();
    assert_eq!(why.len(), 3, "{why:?}");
    assert!(why.iter().any(|w| w.contains("magic byte 1")), "{why:?}");
    assert!(why.iter().any(|w| w.contains("[9]") && w.contains("name no message")), "{why:?}");
    assert!(why.iter().any(|w| w.contains("schema id 999999")), "{why:?}");
}

#[test]
fn protobuf_parameters_that_cannot_work_exit_2_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let pb = dir.path().join("shop.pb");
    std::fs::write(&pb, pool().encode_to_vec()).unwrap();
    let base = "readBootstrapServerAndTopic=localhost:1;t,kafkaReadAuthenticationMode=NONE,outputTableSpec=p:d.t";
    for (extra, says) in [
        (",messageFormat=PROTO".to_string(), "needs protoSchemaPath"),
        (
            format!(",messageFormat=PROTO,protoSchemaPath={},fullMessageName=shop.Nope", pb.display()),
            "no message shop.Nope",
        ),
        (
            ",messageFormat=PROTO,protoSchemaPath=/nonexistent.pb,fullMessageName=shop.Order".to_string(),
            "cannot read the descriptor set",
        ),
        (",messageFormat=PROTO_CONFLUENT_WIRE_FORMAT".to_string(), "schemaRegistryConnectionUrl is required"),
    ] {
        let o = run_job("proto-bad", &dir.path().join("ck"), &format!("{base}{extra}"), "20s", &[]);
        assert_eq!(o.status.code(), Some(2), "{extra}: {}", text(&o));
        assert!(text(&o).contains(says), "{extra}: {}", text(&o));
    }
    let o = flexrun(&[
        "export",
        "--template",
        "kafka-to-bq",
        "--parameters",
        &format!("{base},messageFormat=PROTO,protoSchemaPath={},fullMessageName=shop.Order", pb.display()),
    ])
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("reads JSON and Avro only"), "{}", text(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generator_writes_protobuf_that_a_job_reads_with_a_proto_file() {
    let s = stack();
    let topic = unique("proto_gen");
    flexrun::kafka::create_topic(&s.kafka, &topic, 2).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let proto = dir.path().join("order.proto");
    std::fs::write(
        &proto,
        r#"syntax = "proto3"; package gen; message Order { optional int64 id = 1; string name = 2; int64 qty = 3; }"#,
    )
    .unwrap();
    let template = dir.path().join("order.json");
    std::fs::write(&template, r#"{"id": {{index(0)}}, "name": "{{firstName()}}", "qty": {{integer(1,9)}}}"#).unwrap();
    let gen = format!(
        "qps=100000,schemaLocation={},sinkType=KAFKA,bootstrapServer={},kafkaTopic={topic},outputType=PROTO,protoSchemaPath={},fullMessageName=gen.Order,messagesLimit=500",
        template.display(),
        s.kafka,
        proto.display()
    );
    let o = flexrun(&["--template", "streaming-data-generator", "--seed", "5", "--parameters", &gen]).bounded();
    assert!(o.status.success(), "{}", text(&o));
    let t = TableRef { project: PROJECT.into(), dataset: "proto".into(), table: topic.clone() };
    let params = format!(
        "readBootstrapServerAndTopic={};{topic},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=PROTO,protoSchemaPath={},fullMessageName=gen.Order,outputTableSpec={t}",
        s.kafka,
        proto.display()
    );
    let o = run_job("proto-gen", &dir.path().join("ck"), &params, "20s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let fq = format!("`{}.{}.{}`", t.project, t.dataset, t.table);
    let r = s.rows(&format!("SELECT COUNT(*), COUNT(DISTINCT id), MIN(id), MAX(id), MIN(qty) FROM {fq}")).await;
    let got: Vec<String> = r[0].iter().map(|v| v.clone().unwrap_or_default()).collect();
    assert_eq!(got, ["500", "500", "0", "499", "1"], "every generated message once; id 0 kept (optional)");
    let bad = format!("{gen},sinkType=STDOUT").replace("sinkType=KAFKA,", "");
    let o = flexrun(&["--template", "streaming-data-generator", "--parameters", &bad]).bounded();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("writes to Kafka only"), "{}", text(&o));
}

/// Issue 62, items 5 and 9: a schema that imports another through the registry's
/// references compiles (they were not resolved); a registry that answers 503 for a
/// moment is waited out, not remembered (one 503 dead-lettered every later record of
/// that schema id); and doubles that are NaN or infinite reach the FLOAT column (74 of
/// 2,000 records of an independent run were dead-lettered as "finite numbers only").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_references_resolve_a_passing_503_is_waited_out_and_nan_lands() {
    let s = stack();
    let registry = std::env::var("FLEXRUN_SCHEMA_REGISTRY").expect("FLEXRUN_SCHEMA_REGISTRY: run with scripts/test.sh");
    let topic = unique("proto_refs");
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    let common = r#"syntax = "proto3"; package shop; message Money { double amount = 1; string currency = 2; }"#;
    let order = r#"syntax = "proto3"; package shop; import "shop/common.proto"; message Paid { int64 id = 1; Money price = 2; double rate = 3; }"#;
    let http = reqwest::Client::new();
    let post = |subject: String, body: serde_json::Value| {
        let (http, url) = (http.clone(), format!("{registry}/subjects/{subject}/versions"));
        async move {
            let r =
                http.post(url).header("Content-Type", "application/vnd.schemaregistry.v1+json").body(body.to_string());
            let v: serde_json::Value = serde_json::from_str(&r.send().await.unwrap().text().await.unwrap()).unwrap();
            v["id"].as_u64().unwrap_or_else(|| panic!("register: {v}")) as u32
        }
    };
    post(format!("{topic}-common"), serde_json::json!({"schema": common, "schemaType": "PROTOBUF"})).await;
    let refs = serde_json::json!([{"name": "shop/common.proto", "subject": format!("{topic}-common"), "version": 1}]);
    let id = post(
        format!("{topic}-value"),
        serde_json::json!({"schema": order, "schemaType": "PROTOBUF", "references": refs}),
    )
    .await;
    // The job's pool, compiled the way a producer would: both files.
    let mut files = std::collections::HashMap::new();
    files.insert("shop/common.proto".to_string(), common.to_string());
    let pool = flexrun::proto::decoder::compile_with(order, files).expect("compiles with its import");
    let paid = pool.get_message_by_name("shop.Paid").unwrap();
    let mut values = Vec::new();
    for (i, rate) in [(1, 0.5), (2, f64::NAN), (3, f64::INFINITY), (4, f64::NEG_INFINITY)] {
        let mut m = DynamicMessage::new(paid.clone());
        m.set_field_by_name("id", prost_reflect::Value::I64(i));
        m.set_field_by_name("rate", prost_reflect::Value::F64(rate));
        let mut framed = Vec::new();
        flexrun::proto::decoder::frame(id, &[0], &prost::Message::encode_to_vec(&m), &mut framed);
        values.push(framed);
    }
    produce_values(&s, &topic, &values).await;
    let t = TableRef { project: PROJECT.into(), dataset: "proto".into(), table: topic.clone() };
    let schema = flexrun::bigquery::schema::Schema::from_json(&serde_json::json!([
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"}, {"name": "rate", "type": "FLOAT", "mode": "NULLABLE"}
    ]))
    .unwrap();
    let c = flexrun::bigquery::rest::client(&s.bq).await.unwrap();
    answer("create table", flexrun::bigquery::rest::ensure_table(&c, &s.bq, &t, &schema)).await.unwrap();
    // The registry answers this schema id 503 twice before it answers it.
    let fault = serde_json::json!({"id": id, "status": 503, "count": 2});
    http.post(format!("{registry}/faults")).body(fault.to_string()).send().await.unwrap();
    let dlq = TableRef { table: format!("{topic}_dlq"), ..t.clone() };
    let params = format!(
        "readBootstrapServerAndTopic={};{topic},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=PROTO_CONFLUENT_WIRE_FORMAT,schemaRegistryConnectionUrl={registry},outputTableSpec={t},outputDeadletterTable={dlq}",
        s.kafka
    );
    let dir = tempfile::tempdir().unwrap();
    let sum = dir.path().join("summary.json");
    let o = run_job("proto-refs", &dir.path().join("ck"), &params, "20s", &["--summary-json", sum.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let j = summary(&sum);
    assert_eq!(j["summary"]["dead_lettered"], 0, "{j}");
    assert!(text(&o).contains("Schema Registry"), "the outage was waited out and logged: {}", text(&o));
    let fq = format!("`{}.{}.{}`", t.project, t.dataset, t.table);
    let rows = s.rows(&format!("SELECT id, CAST(rate AS STRING) FROM {fq} ORDER BY id")).await;
    let rates: Vec<String> = rows.into_iter().map(|r| r[1].clone().unwrap_or_default().to_lowercase()).collect();
    assert_eq!(rates.len(), 4, "{rates:?}");
    assert!(
        rates[0].starts_with("0.5") && rates[1] == "nan" && rates[2].contains("inf") && rates[3].starts_with("-inf"),
        "{rates:?}"
    );
}
