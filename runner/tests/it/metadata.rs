//! Kafka metadata as columns (`kafkaMetadataColumns`) end to end: records produced to
//! the broker with keys, headers and timestamps land in bqemulator with their topic,
//! partition, offset, timestamp, headers and key beside their fields, and a key that a
//! STRING column cannot hold is dead-lettered with the reason.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use flexrun::bigquery::{rest, schema::Schema, TableRef};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::time::Duration;

/// Produce `value` with `key`, headers and a timestamp; returns (partition, offset).
async fn produce(
    s: &Stack,
    topic: &str,
    key: &[u8],
    value: &str,
    headers: &[(&str, Option<&[u8]>)],
    ts: i64,
) -> (i32, i64) {
    let p: FutureProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", &s.kafka).create().unwrap();
    let mut h = OwnedHeaders::new();
    for (k, v) in headers {
        h = h.insert(Header { key: k, value: *v });
    }
    let r = FutureRecord::to(topic).payload(value).key(key).headers(h).timestamp(ts);
    let d = p.send(r, Duration::from_secs(30)).await.map_err(|(e, _)| e).unwrap();
    (d.partition, d.offset)
}

#[tokio::test]
async fn metadata_columns_carry_each_records_topic_partition_offset_timestamp_headers_and_key() {
    let s = stack();
    let topic = unique("meta");
    flexrun::kafka::create_topic(&s.kafka, &topic, 2).await.unwrap();
    let out = TableRef { project: PROJECT.into(), dataset: "meta".into(), table: topic.clone() };
    let dlq = TableRef { table: format!("{topic}_dlq"), ..out.clone() };
    let schema = Schema::from_json(&serde_json::json!([
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "_kafka_topic", "type": "STRING"},
        {"name": "part", "type": "INTEGER"},
        {"name": "_kafka_offset", "type": "INTEGER"},
        {"name": "_kafka_timestamp", "type": "TIMESTAMP"},
        {"name": "hdrs", "type": "RECORD", "mode": "REPEATED", "fields": [
            {"name": "key", "type": "STRING"}, {"name": "value", "type": "BYTES"}]},
        {"name": "k", "type": "STRING"}
    ]))
    .unwrap();
    let c = rest::client(&s.bq).await.unwrap();
    rest::ensure_table(&c, &s.bq, &out, &schema).await.unwrap();
    let a = produce(
        &s,
        &topic,
        b"key-1",
        r#"{"id": 1}"#,
        &[("trace", Some(b"t-1")), ("bin", Some(b"\xff\x01"))],
        1_700_000_000_001,
    )
    .await;
    let b = produce(&s, &topic, b"key-2", r#"{"id": 2}"#, &[], 1_700_000_000_002).await;
    // A key that is not UTF-8 cannot go to a STRING column: a dead letter, named.
    produce(&s, &topic, b"\xc3(", r#"{"id": 3}"#, &[], 1_700_000_000_003).await;
    let dir = tempfile::tempdir().unwrap();
    let params = format!(
        "readBootstrapServerAndTopic={};{topic},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=JSON,outputTableSpec={out},outputDeadletterTable={dlq},kafkaMetadataColumns=topic|partition:part|offset|timestamp|headers:hdrs|key:k",
        s.kafka
    );
    let o = run_job("meta", &dir.path().join("ck"), &params, "3s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let fq = format!("`{}.{}.{}`", out.project, out.dataset, out.table);
    let rows = s
        .rows(&format!(
            "SELECT id, _kafka_topic, part, _kafka_offset, UNIX_MILLIS(_kafka_timestamp), ARRAY_LENGTH(hdrs), k FROM {fq} ORDER BY id"
        ))
        .await;
    let want = |id: i64, (p, off): (i32, i64), ts: i64, n: i64, k: &str| {
        [id.to_string(), topic.clone(), p.to_string(), off.to_string(), ts.to_string(), n.to_string(), k.to_string()]
            .map(Some)
            .to_vec()
    };
    assert_eq!(rows, vec![want(1, a, 1_700_000_000_001, 2, "key-1"), want(2, b, 1_700_000_000_002, 0, "key-2")]);
    let hdrs = s
        .rows(&format!("SELECT h.key, TO_BASE64(h.value) FROM {fq}, UNNEST(hdrs) AS h WHERE id = 1 ORDER BY h.key"))
        .await;
    assert_eq!(
        hdrs,
        vec![vec![Some("bin".into()), Some("/wE=".into())], vec![Some("trace".into()), Some("dC0x".into())]]
    );
    let fq = format!("`{}.{}.{}`", dlq.project, dlq.dataset, dlq.table);
    let errs = s.rows(&format!("SELECT errorMessage FROM {fq}")).await;
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0][0].as_deref().unwrap_or_default().contains("field the key: expected UTF-8 text"), "{errs:?}");
}

#[tokio::test]
async fn a_table_without_the_metadata_columns_is_refused_naming_the_column() {
    let s = stack();
    let f = s.fixture("meta_missing", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let o = run_job("meta-missing", &dir.path().join("ck"), &f.params(&s, "kafkaMetadataColumns=offset"), "2s", &[]);
    assert!(!o.status.success());
    assert!(text(&o).contains("the table has no column _kafka_offset"), "{}", text(&o));
    let bad =
        flexrun(&["--template", "kafka-to-bq", "--parameters", &f.params(&s, "kafkaMetadataColumns=offset|colour")])
            .bounded();
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(text(&bad).contains("kafkaMetadataColumns"), "{}", text(&bad));
}
