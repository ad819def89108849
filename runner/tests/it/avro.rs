//! Avro input end to end on the real stack: the generator writes Avro records to the broker
//! (Confluent wire format with id 1, plain binary, or registered in the stack's Schema
//! Registry), kafka-to-bq decodes them, creates the table from the Avro schema under
//! CREATE_IF_NEEDED and writes the rows to bqemulator; bad messages are dead-lettered.

// `at` is quoted in queries: bqemulator runs them on DuckDB, where AT is reserved.
// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use flexrun::bigquery::{rest, TableRef};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use std::path::Path;
use std::time::Duration;

const AVSC: &str = r#"{"type":"record","name":"Order","namespace":"shop.events","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"},
  {"name":"level","type":{"type":"enum","name":"Level","symbols":["LOW","HIGH"]}},
  {"name":"day","type":{"type":"int","logicalType":"date"}},
  {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
  {"name":"note","type":["null","string"],"default":null},
  {"name":"tags","type":{"type":"array","items":"string"}},
  {"name":"attrs","type":{"type":"map","values":"int"}},
  {"name":"addr","type":{"type":"record","name":"Addr","fields":[{"name":"city","type":"string"}]}}
]}"#;

const TEMPLATE: &str = r#"{"id": {{index(0)}}, "name": "{{firstName()}}", "level": "{{random("LOW","HIGH")}}", "day": "2024-01-15", "at": 1700000000123, "price": "12.50", "tags": ["a", "{{alpha(3)}}"], "attrs": {"k": 7}, "addr": {"city": "Oslo"}}"#;

/// Write the schema and the generator template into `dir`.
fn files(dir: &Path) -> (String, String) {
    let avsc = dir.join("order.avsc");
    let tmpl = dir.join("order.json");
    std::fs::write(&avsc, AVSC).unwrap();
    std::fs::write(&tmpl, TEMPLATE).unwrap();
    (avsc.display().to_string(), tmpl.display().to_string())
}

fn generate(s: &Stack, topic: &str, tmpl: &str, avsc: &str, n: u64, extra: &str) {
    let params = format!(
        "qps=5000,messagesLimit={n},schemaLocation={tmpl},sinkType=KAFKA,bootstrapServer={},kafkaTopic={topic},outputType=AVRO,avroSchemaLocation={avsc}{extra}",
        s.kafka
    );
    let o = flexrun(&["--template", "streaming-data-generator", "--parameters", &params]).bounded();
    assert!(o.status.success(), "{}", text(&o));
}

async fn produce_raw(s: &Stack, topic: &str, key: Option<&[u8]>, value: &[u8]) {
    let p: FutureProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", &s.kafka).create().unwrap();
    let mut r = FutureRecord::<[u8], [u8]>::to(topic).payload(value).partition(0);
    if let Some(k) = key {
        r = r.key(k);
    }
    p.send(r, Duration::from_secs(30)).await.unwrap();
    p.flush(Duration::from_secs(30)).unwrap();
}

const REFUND: &str = r#"{"type":"record","name":"Refund","namespace":"shop.events","fields":[{"name":"id","type":"long"},{"name":"amount","type":"double"}]}"#;

/// Produce Refund records with these ids, framed with the registry id `refund_id`.
async fn produce_refunds(s: &Stack, topic: &str, refund_id: u32, ids: std::ops::Range<i64>) {
    let w = flexrun::avro::WriterSchema::parse(REFUND).unwrap();
    for i in ids {
        let v = flexrun::avro::from_json::to_avro(&w, &serde_json::json!({"id": i, "amount": 2.5})).unwrap();
        let mut framed = Vec::new();
        flexrun::avro::wire::confluent_frame(
            refund_id,
            &apache_avro::to_avro_datum(&w.schema, v).unwrap(),
            &mut framed,
        );
        produce_raw(s, topic, None, &framed).await;
    }
}

async fn topic(s: &Stack, name: &str) -> String {
    let t = unique(name);
    flexrun::kafka::create_topic(&s.kafka, &t, 2).await.unwrap();
    t
}

fn table(name: &str) -> TableRef {
    TableRef { project: PROJECT.into(), dataset: "avro".into(), table: name.into() }
}

fn base(s: &Stack, topic: &str, format: &str) -> String {
    format!(
        "readBootstrapServerAndTopic={};{topic},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat={format}",
        s.kafka
    )
}

#[tokio::test]
async fn confluent_wire_format_with_a_schema_file_creates_the_table_and_maps_each_type() {
    let s = stack();
    let dir = tempfile::tempdir().unwrap();
    let (avsc, tmpl) = files(dir.path());
    let t = topic(&s, "avro_file").await;
    generate(&s, &t, &tmpl, &avsc, 500, "");
    // One message with a key, to check persistKafkaKey.
    let w = flexrun::avro::WriterSchema::parse(AVSC).unwrap();
    let doc = serde_json::json!({"id": 500, "name": "K", "level": "LOW", "day": "2024-02-01", "at": 0,
        "price": "-0.05", "tags": [], "attrs": {}, "addr": {"city": "Bergen"}, "note": "keyed"});
    let datum = apache_avro::to_avro_datum(&w.schema, flexrun::avro::from_json::to_avro(&w, &doc).unwrap()).unwrap();
    let mut framed = Vec::new();
    flexrun::avro::wire::confluent_frame(1, &datum, &mut framed);
    produce_raw(&s, &t, Some(b"k-500"), &framed).await;
    let out = table(&t);
    let params = format!(
        "{},confluentAvroSchemaPath={avsc},outputTableSpec={out},persistKafkaKey=true",
        base(&s, &t, "AVRO_CONFLUENT_WIRE_FORMAT")
    );
    let o = run_job("avro-file", &dir.path().join("ck"), &params, "3s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&out).await, (501, 501));
    // The table was created from the Avro schema (plus _key, last).
    let c = rest::client(&s.bq).await.unwrap();
    let schema = rest::table_schema(&c, &s.bq, &out).await.unwrap();
    let cols: Vec<(String, String)> = schema.columns.iter().map(|c| (c.name.clone(), c.type_name.clone())).collect();
    let want = [
        ("id", "INTEGER"),
        ("name", "STRING"),
        ("level", "STRING"),
        ("day", "DATE"),
        ("at", "TIMESTAMP"),
        ("price", "NUMERIC"),
        ("note", "STRING"),
        ("tags", "STRING"),
        ("attrs", "RECORD"),
        ("addr", "RECORD"),
        ("_key", "BYTES"),
    ];
    assert_eq!(cols, want.map(|(a, b)| (a.to_string(), b.to_string())));
    let fq = format!("`{}.{}.{}`", out.project, out.dataset, out.table);
    let rows = s.rows(&format!("SELECT level, CAST(day AS STRING), UNIX_MICROS(`at`), CAST(price AS STRING), note, ARRAY_LENGTH(tags), addr.city, TO_BASE64(_key) FROM {fq} WHERE id IN (0, 500) ORDER BY id")).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    let r0: Vec<_> = rows[0].iter().map(|v| v.clone().unwrap_or_default()).collect();
    assert!(r0[0] == "LOW" || r0[0] == "HIGH", "{r0:?}");
    assert_eq!(&r0[1..3], ["2024-01-15", "1700000000123000"], "{r0:?}");
    // NUMERIC as text: "12.5" on BigQuery, "12.500000000" on bqemulator; compare the number.
    assert_eq!(r0[3].parse::<f64>().unwrap(), 12.5, "{r0:?}");
    assert_eq!(&r0[4..7], ["", "2", "Oslo"], "{r0:?}");
    assert_eq!(rows[0][7], None, "a message without a key leaves _key NULL");
    assert_eq!(rows[1][3].as_deref().unwrap().parse::<f64>().unwrap(), -0.05);
    assert_eq!(rows[1][4].as_deref(), Some("keyed"));
    assert_eq!(rows[1][7].as_deref(), Some("ay01MDA="), "the key's bytes, base64 k-500");
}

#[tokio::test]
async fn binary_encoding_decodes_and_non_avro_messages_are_dead_lettered() {
    let s = stack();
    let dir = tempfile::tempdir().unwrap();
    let (avsc, tmpl) = files(dir.path());
    let t = topic(&s, "avro_bin").await;
    generate(&s, &t, &tmpl, &avsc, 300, ",kafkaAvroEncoding=AVRO_BINARY_ENCODING");
    produce_raw(&s, &t, None, br#"{"id": 1}"#).await;
    produce_raw(&s, &t, None, &[0x02]).await;
    let (out, dlq) = (table(&t), table(&format!("{t}_dlq")));
    let params = format!(
        "{},binaryAvroSchemaPath={avsc},outputTableSpec={out},useBigQueryDLQ=true,outputDeadletterTable={dlq}",
        base(&s, &t, "AVRO_BINARY_ENCODING")
    );
    let o = run_job("avro-bin", &dir.path().join("ck"), &params, "3s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&out).await, (300, 300));
    let fq = format!("`{}.{}.{}`", dlq.project, dlq.dataset, dlq.table);
    let errs = s.rows(&format!("SELECT errorMessage FROM {fq}")).await;
    assert_eq!(errs.len(), 2, "{errs:?}");
    for e in errs {
        let e = e[0].clone().unwrap_or_default();
        assert!(e.starts_with("Error deserializing Avro message"), "{e}");
    }
    // A replay reads each dead letter's payloadBytes back as Beam's KafkaRecordCoder
    // encoding of the record (topic, partition, offset, key, value): the two records
    // are named by their place in the topic and fail again for their own reason, not
    // for unreadable payload bytes.
    let ck = dir.path().join("ck");
    let o = flexrun(&["dlq", "replay", "--job", "avro-bin", "--checkpoint-dir", ck.to_str().unwrap(), "--dry-run"])
        .bounded();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(out.contains("still failing (left in the dead-letter table): 2"), "{out}");
    assert_eq!(out.matches(&format!(":kafka:{t}@")).count(), 2, "named by job, log and place: {out}");
    assert!(!out.contains("KafkaRecordCoder"), "{out}");
}

#[tokio::test]
async fn schema_registry_writes_each_record_type_to_its_own_table_and_unknown_ids_are_dead_lettered() {
    let s = stack();
    let registry = std::env::var("FLEXRUN_SCHEMA_REGISTRY").expect("FLEXRUN_SCHEMA_REGISTRY: run with scripts/test.sh");
    let dir = tempfile::tempdir().unwrap();
    let (avsc, tmpl) = files(dir.path());
    let t = topic(&s, "avro_reg").await;
    generate(&s, &t, &tmpl, &avsc, 400, &format!(",schemaRegistryConnectionUrl={registry}"));
    // A registered id is used, not 1 (other tests register other subjects first).
    let client = flexrun::avro::registry::Registry::new(&registry);
    let id = client.latest(&format!("{t}-value")).await.unwrap().0;
    // A second record type on the same topic (registered under its record name, as
    // producers using RecordNameStrategy do): Google writes it to a table of its own.
    let refund_id = client.register("shop.events.Refund", REFUND).await.unwrap();
    produce_refunds(&s, &t, refund_id, 1000..1025).await;
    produce_raw(&s, &t, None, &[0, 0, 0, 0x27, 0x0f, 2]).await; // id 9999: unknown
    let prefix = unique("raw");
    let dlq = table(&format!("{t}_dlq"));
    let params = format!(
        "{},schemaFormat=SCHEMA_REGISTRY,schemaRegistryConnectionUrl={registry},outputProject={PROJECT},outputDataset=avro,bqTableNamePrefix={prefix},outputDeadletterTable={dlq},useBigQueryDLQ=true",
        base(&s, &t, "AVRO_CONFLUENT_WIRE_FORMAT")
    );
    let ck = dir.path().join("ck");
    let o = run_job("avro-reg", &ck, &params, "3s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(id >= 1 && refund_id != id);
    let orders = table(&format!("{prefix}-shop-events-Order"));
    let refunds = table(&format!("{prefix}-shop-events-Refund"));
    assert_eq!(s.count(&orders).await, (400, 400));
    assert_eq!(s.count(&refunds).await, (25, 25));
    let fq = |t: &TableRef| format!("`{}.{}.{}`", t.project, t.dataset, t.table);
    let errs = s.rows(&format!("SELECT errorMessage FROM {}", fq(&dlq))).await;
    assert_eq!(errs.len(), 1, "{errs:?}");
    let e = errs[0][0].clone().unwrap_or_default();
    assert!(e.contains("id 9999") && e.contains("not found"), "{e}");
    // More of both types, and a restart: each table's stream continues where it was.
    generate(&s, &t, &tmpl, &avsc, 50, &format!(",schemaRegistryConnectionUrl={registry}"));
    produce_refunds(&s, &t, refund_id, 2000..2005).await;
    let o = run_job("avro-reg", &ck, &params, "3s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&orders).await.0, 450);
    assert_eq!(s.count(&refunds).await, (30, 30));
}

#[tokio::test]
async fn avro_parameters_are_checked_before_anything_connects() {
    let s = stack();
    let run = |p: &str| flexrun(&["--template", "kafka-to-bq", "--parameters", p]).bounded();
    let b = base(&s, "t", "AVRO_CONFLUENT_WIRE_FORMAT");
    let o = run(&format!("{b},outputTableSpec=p:d.t"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("confluentAvroSchemaPath is required"), "{}", text(&o));
    let o = run(&format!("{b},schemaFormat=SCHEMA_REGISTRY,schemaRegistryConnectionUrl=http://x:1,outputProject=p"));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("outputDataset is required"), "{}", text(&o));
    let o = run(&format!("{b},schemaFormat=SCHEMA_REGISTRY,schemaRegistryConnectionUrl=http://x:1,outputProject=p,outputDataset=d,schemaRegistryOauthClientId=c"));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("schemaRegistryOauthClientId is not supported by flexrun yet"), "{}", text(&o));
    let o = run(&format!("{},outputTableSpec=p:d.t", base(&s, "t", "AVRO_BINARY_ENCODING")));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("binaryAvroSchemaPath is required"), "{}", text(&o));
}

#[tokio::test]
async fn write_dispositions_apply_when_a_job_first_starts() {
    let s = stack();
    let dir = tempfile::tempdir().unwrap();
    let (avsc, tmpl) = files(dir.path());
    let t = topic(&s, "avro_disp").await;
    generate(&s, &t, &tmpl, &avsc, 100, "");
    let out = table(&t);
    let params = |extra: &str| {
        format!(
            "{},confluentAvroSchemaPath={avsc},outputTableSpec={out}{extra}",
            base(&s, &t, "AVRO_CONFLUENT_WIRE_FORMAT")
        )
    };
    let o = run_job("disp-1", &dir.path().join("ck1"), &params(""), "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&out).await, (100, 100));
    // A new job with WRITE_EMPTY refuses the table that now has rows.
    let o = run_job("disp-2", &dir.path().join("ck2"), &params(",writeDisposition=WRITE_EMPTY"), "2s", &[]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("writeDisposition=WRITE_EMPTY: table") && text(&o).contains("already has 100 rows"),
        "{}",
        text(&o)
    );
    // CREATE_NEVER with a missing table says so.
    let missing = table(&format!("{t}_missing"));
    let p = format!(
        "{},confluentAvroSchemaPath={avsc},outputTableSpec={missing},createDisposition=CREATE_NEVER",
        base(&s, &t, "AVRO_CONFLUENT_WIRE_FORMAT")
    );
    let o = run_job("disp-3", &dir.path().join("ck3"), &p, "2s", &[]);
    assert!(!o.status.success());
    assert!(text(&o).contains("createDisposition=CREATE_NEVER"), "{}", text(&o));
    // A new job with WRITE_TRUNCATE empties the table first: the topic's 100 again, not 200.
    let o = run_job("disp-4", &dir.path().join("ck4"), &params(",writeDisposition=WRITE_TRUNCATE"), "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&out).await, (100, 100));
    // Its restart appends (the disposition applies once): nothing new to read, nothing removed.
    let o = run_job("disp-4", &dir.path().join("ck4"), &params(",writeDisposition=WRITE_TRUNCATE"), "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&out).await, (100, 100));
}

/// Issue 62, item 4, as reproduced: a pattern job with WRITE_TRUNCATE wrote topic A's
/// 100 records, then topic B appeared with 10, and the table ended with B's 10 alone:
/// each topic's pipeline applied the disposition as if the job were new. And WRITE_EMPTY
/// failed every restart of such a job. The disposition now applies once per table, at the
/// job's first start; topics that join later, and restarts, append.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_job_applies_its_write_disposition_once_not_for_each_topic_that_joins() {
    let s = stack();
    let dir = tempfile::tempdir().unwrap();
    let (avsc, tmpl) = files(dir.path());
    let prefix = unique("avro_once");
    for (disp, job) in [("WRITE_TRUNCATE", "once-t"), ("WRITE_EMPTY", "once-e")] {
        let a = format!("{prefix}_{job}_a");
        flexrun::kafka::create_topic(&s.kafka, &a, 1).await.unwrap();
        generate(&s, &a, &tmpl, &avsc, 100, "");
        let out = table(&format!("{prefix}_{job}").replace('-', "_"));
        let params = format!(
            "readBootstrapServerAndTopic={};/{prefix}_{job}_.*/,kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=AVRO_CONFLUENT_WIRE_FORMAT,confluentAvroSchemaPath={avsc},outputTableSpec={out},writeDisposition={disp}",
            s.kafka
        );
        let ck = dir.path().join(job);
        let o = run_job(job, &ck, &params, "3s", &[]);
        assert!(o.status.success(), "{disp}: {}", text(&o));
        assert_eq!(s.count(&out).await.0, 100, "{disp}");
        let b = format!("{prefix}_{job}_b");
        flexrun::kafka::create_topic(&s.kafka, &b, 1).await.unwrap();
        generate(&s, &b, &tmpl, &avsc, 10, "");
        let o = run_job(job, &ck, &params, "3s", &[]);
        assert!(o.status.success(), "{disp}: a restart with a topic that joined: {}", text(&o));
        assert_eq!(s.count(&out).await.0, 110, "{disp}: A's 100 kept, B's 10 added");
    }
}

#[tokio::test]
async fn persist_kafka_key_works_on_the_json_path_too() {
    let s = stack();
    let t = topic(&s, "json_key").await;
    let out = table(&t);
    let c = rest::client(&s.bq).await.unwrap();
    let schema = flexrun::bigquery::schema::Schema::from_json(&serde_json::json!([
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"}, {"name": "_key", "type": "BYTES"}]))
    .unwrap();
    rest::ensure_table(&c, &s.bq, &out, &schema).await.unwrap();
    produce_raw(&s, &t, Some(b"abc"), br#"{"id": 1}"#).await;
    produce_raw(&s, &t, None, br#"{"id": 2}"#).await;
    let dir = tempfile::tempdir().unwrap();
    let params = format!("{},outputTableSpec={out},persistKafkaKey=true", base(&s, &t, "JSON"));
    let o = run_job("json-key", &dir.path().join("ck"), &params, "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let fq = format!("`{}.{}.{}`", out.project, out.dataset, out.table);
    let rows = s.rows(&format!("SELECT id, TO_BASE64(_key) FROM {fq} ORDER BY id")).await;
    assert_eq!(rows, vec![vec![Some("1".into()), Some("YWJj".into())], vec![Some("2".into()), None]]);
    // A table without _key is refused with the fix.
    let plain = table(&format!("{t}_plain"));
    rest::ensure_table(&c, &s.bq, &plain, &flexrun::local::demo_schema()).await.unwrap();
    let params = format!("{},outputTableSpec={plain},persistKafkaKey=true", base(&s, &t, "JSON"));
    let o = run_job("json-key-2", &dir.path().join("ck2"), &params, "2s", &[]);
    assert!(!o.status.success());
    assert!(text(&o).contains("has no _key column"), "{}", text(&o));
}

#[test]
fn the_generator_writes_avro_container_files() {
    let dir = tempfile::tempdir().unwrap();
    let (avsc, tmpl) = files(dir.path());
    let params = format!(
        "qps=10000,messagesLimit=250,schemaLocation={tmpl},sinkType=FILE,outputDirectory={},outputType=AVRO,avroSchemaLocation={avsc}",
        dir.path().display()
    );
    let o = flexrun(&["--template", "streaming-data-generator", "--parameters", &params]).bounded();
    assert!(o.status.success(), "{}", text(&o));
    let f = std::fs::File::open(dir.path().join("output-generated.avro")).unwrap();
    let records: Vec<_> = apache_avro::Reader::new(f).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(records.len(), 250);
    let apache_avro::types::Value::Record(fields) = &records[249] else { panic!("{:?}", records[249]) };
    assert_eq!(fields[0], ("id".to_string(), apache_avro::types::Value::Long(249)));
}

/// A crash after a batch with rows for two per-record tables landed, before its commit:
/// the replay re-sends both at their logged offsets and BigQuery answers ALREADY_EXISTS
/// for each, so neither table gets a duplicate.
#[cfg(feature = "failpoints")]
#[tokio::test]
async fn a_crash_replays_every_per_record_table_at_its_logged_offset() {
    use std::os::unix::process::ExitStatusExt;
    let s = stack();
    let registry = std::env::var("FLEXRUN_SCHEMA_REGISTRY").expect("FLEXRUN_SCHEMA_REGISTRY: run with scripts/test.sh");
    let dir = tempfile::tempdir().unwrap();
    let (avsc, tmpl) = files(dir.path());
    let t = unique("avro_crash");
    flexrun::kafka::create_topic(&s.kafka, &t, 1).await.unwrap();
    let client = flexrun::avro::registry::Registry::new(&registry);
    let refund_id = client.register("shop.events.Refund", REFUND).await.unwrap();
    // 100 orders, 30 refunds, 100 orders, 30 refunds; batches of 100 make batch 2 hold both.
    for round in 0..2 {
        generate(&s, &t, &tmpl, &avsc, 100, &format!(",schemaRegistryConnectionUrl={registry}"));
        produce_refunds(&s, &t, refund_id, round * 100..round * 100 + 30).await;
    }
    let prefix = unique("cp");
    let params = format!(
        "{},schemaFormat=SCHEMA_REGISTRY,schemaRegistryConnectionUrl={registry},outputProject={PROJECT},outputDataset=avro,bqTableNamePrefix={prefix}",
        base(&s, &t, "AVRO_CONFLUENT_WIRE_FORMAT")
    );
    let ck = dir.path().join("ck");
    let extra = ["--batch-rows", "100"];
    let crash = job_cmd("avro-cp", &ck, &params, "2s", &extra)
        .env("FAILPOINTS", "eo::before_commit_log=1*off->return")
        .bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "{}", text(&crash));
    let sum = dir.path().join("summary.json");
    let o = run_job("avro-cp", &ck, &params, "2s", &[&extra[..], &["--summary-json", sum.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let j = crate::common::summary(&sum);
    assert_eq!(j["summary"]["replayed_batches"], 1, "{j}");
    assert_eq!(j["summary"]["appends_already_existed"], 2, "both tables' appends had landed: {j}");
    let orders = table(&format!("{prefix}-shop-events-Order"));
    let refunds = table(&format!("{prefix}-shop-events-Refund"));
    assert_eq!(s.count(&orders).await.0, 200);
    assert_eq!(s.count(&refunds).await, (60, 60));
}

/// Issue 62, item 6: a logged batch routes each record type as it was logged. Refunds
/// had no table under CREATE_NEVER, so the logged batch dead-lettered them; another
/// writer then created their table before the restart. The replay used to route them to
/// it and stop ("would write to 1 per-record tables where 0 were logged"); now it
/// dead-letters them as logged, and only later batches use the new table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_batch_routes_record_types_as_logged_though_a_table_was_made_since() {
    use std::os::unix::process::ExitStatusExt;
    let s = stack();
    let registry = std::env::var("FLEXRUN_SCHEMA_REGISTRY").expect("FLEXRUN_SCHEMA_REGISTRY: run with scripts/test.sh");
    let dir = tempfile::tempdir().unwrap();
    let (avsc, tmpl) = files(dir.path());
    let t = unique("avro_route");
    flexrun::kafka::create_topic(&s.kafka, &t, 1).await.unwrap();
    let client = flexrun::avro::registry::Registry::new(&registry);
    let refund_id = client.register("shop.events.Refund", REFUND).await.unwrap();
    generate(&s, &t, &tmpl, &avsc, 20, &format!(",schemaRegistryConnectionUrl={registry}"));
    produce_refunds(&s, &t, refund_id, 0..30).await;
    let prefix = unique("rt");
    let orders = table(&format!("{prefix}-shop-events-Order"));
    let refunds = table(&format!("{prefix}-shop-events-Refund"));
    let c = rest::client(&s.bq).await.unwrap();
    let order_schema =
        flexrun::avro::table::table_schema(&flexrun::avro::WriterSchema::parse(AVSC).unwrap(), false).unwrap();
    answer("create table", rest::ensure_table(&c, &s.bq, &orders, &order_schema)).await.unwrap();
    let dlq = table(&format!("{t}_dlq"));
    let params = format!(
        "{},schemaFormat=SCHEMA_REGISTRY,schemaRegistryConnectionUrl={registry},outputProject={PROJECT},outputDataset=avro,bqTableNamePrefix={prefix},createDisposition=CREATE_NEVER,outputDeadletterTable={dlq},useBigQueryDLQ=true",
        base(&s, &t, "AVRO_CONFLUENT_WIRE_FORMAT")
    );
    let ck = dir.path().join("ck");
    let crash =
        job_cmd("avro-route", &ck, &params, "2s", &[]).env("FAILPOINTS", "eo::after_offset_log=return").bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "{}", text(&crash));
    let refund_schema =
        flexrun::avro::table::table_schema(&flexrun::avro::WriterSchema::parse(REFUND).unwrap(), false).unwrap();
    answer("create table", rest::ensure_table(&c, &s.bq, &refunds, &refund_schema)).await.unwrap();
    let sum = dir.path().join("summary.json");
    let o = run_job("avro-route", &ck, &params, "2s", &["--summary-json", sum.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(crate::common::summary(&sum)["summary"]["replayed_batches"], 1);
    assert_eq!(s.count(&orders).await.0, 20);
    assert_eq!(s.count(&refunds).await.0, 0, "the logged batch dead-lettered them");
    let dead = s.rows(&format!("SELECT COUNT(*) FROM `{}.{}.{}`", dlq.project, dlq.dataset, dlq.table)).await;
    assert_eq!(dead[0][0].as_deref(), Some("30"));
    produce_refunds(&s, &t, refund_id, 100..105).await;
    let o = run_job("avro-route", &ck, &params, "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&refunds).await, (5, 5), "later batches use the new table");
}

#[tokio::test]
async fn a_created_table_is_partitioned_and_clustered_as_asked() {
    let s = stack();
    let dir = tempfile::tempdir().unwrap();
    let (avsc, tmpl) = files(dir.path());
    let t = topic(&s, "avro_layout").await;
    generate(&s, &t, &tmpl, &avsc, 200, ",kafkaAvroEncoding=AVRO_BINARY_ENCODING");
    let out = table(&t);
    let params = format!(
        "{},binaryAvroSchemaPath={avsc},outputTableSpec={out},tablePartitioning=HOUR,tablePartitionField=at,tablePartitionExpirationDays=30,tableClusteringFields=level|name,kafkaMetadataColumns=topic|offset:kafka_offset|headers",
        base(&s, &t, "AVRO_BINARY_ENCODING")
    );
    let o = run_job("avro-layout", &dir.path().join("ck"), &params, "3s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&out).await, (200, 200));
    let c = rest::client(&s.bq).await.unwrap();
    let got = c.table().get(&out.project, &out.dataset, &out.table, None).await.unwrap();
    let tp = got.time_partitioning.expect("the table is partitioned");
    assert_eq!((tp.r#type.as_str(), tp.field.as_deref()), ("HOUR", Some("at")));
    assert_eq!(tp.expiration_ms.as_deref(), Some("2592000000"), "30 days");
    let cl = got.clustering.and_then(|c| c.fields).expect("the table is clustered");
    assert_eq!(cl, ["level", "name"]);
    // The metadata columns were created after the record's own, and filled.
    let schema = rest::table_schema(&c, &s.bq, &out).await.unwrap();
    let last: Vec<(&str, &str)> =
        schema.columns[schema.columns.len() - 3..].iter().map(|c| (c.name.as_str(), c.type_name.as_str())).collect();
    assert_eq!(last, [("_kafka_topic", "STRING"), ("kafka_offset", "INTEGER"), ("_kafka_headers", "RECORD")]);
    let fq = format!("`{}.{}.{}`", out.project, out.dataset, out.table);
    let n =
        s.rows(&format!("SELECT COUNTIF(kafka_offset IS NULL), MIN(_kafka_topic), MAX(_kafka_topic) FROM {fq}")).await;
    assert_eq!(n, vec![vec![Some("0".into()), Some(t.clone()), Some(t.clone())]]);
}

#[tokio::test]
async fn table_layouts_bigquery_refuses_exit_2_and_the_emulator_refuses_them_too() {
    let s = stack();
    let dir = tempfile::tempdir().unwrap();
    let (avsc, _) = files(dir.path());
    let run = |extra: &str| {
        let p = format!(
            "{},binaryAvroSchemaPath={avsc},outputTableSpec={}{extra}",
            base(&s, "t", "AVRO_BINARY_ENCODING"),
            table("never_made")
        );
        flexrun(&["--template", "kafka-to-bq", "--parameters", &p]).bounded()
    };
    for (extra, want) in [
        (",tablePartitioning=DAY,tablePartitionField=id", "tablePartitionField=id: column id is REQUIRED INTEGER"),
        (",tablePartitioning=DAY,tablePartitionField=nope", "tablePartitionField=nope: the table has no such column"),
        (",tableClusteringFields=tags", "tableClusteringFields=tags: column tags is REPEATED STRING"),
        (",tableClusteringFields=id|name|day|at|level", "at most 4"),
        (",tablePartitionField=at", "need tablePartitioning"),
        (",tablePartitioning=WEEK", "invalid value \"WEEK\" for parameter tablePartitioning"),
        (",tablePartitioning=DAY,tablePartitionExpirationDays=0", "above 0"),
        (",tableClusteringFields=id,createDisposition=CREATE_NEVER", "this job creates none"),
    ] {
        let o = run(extra);
        assert_eq!(o.status.code(), Some(2), "{extra}: {}", text(&o));
        assert!(text(&o).contains(want), "{extra}: wanted {want:?} in {}", text(&o));
    }
    // The emulator refuses such a table as BigQuery does (scripts/bqemulator_launcher.py, 10).
    let c = rest::client(&s.bq).await.unwrap();
    let t = table(&unique("layout_refused"));
    rest::ensure_dataset(&c, &t.project, &t.dataset).await.unwrap();
    let schema: gcp_bigquery_client::model::table_schema::TableSchema =
        serde_json::from_value(serde_json::json!({"fields": [
        {"name": "id", "type": "INTEGER"}, {"name": "f", "type": "FLOAT"}, {"name": "ts", "type": "TIMESTAMP"}]}))
        .unwrap();
    use gcp_bigquery_client::model::{clustering::Clustering, table::Table, time_partitioning::TimePartitioning};
    let bad = [
        Table::new(&t.project, &t.dataset, &t.table, schema.clone())
            .time_partitioning(TimePartitioning::per_day().field("id")),
        Table::new(&t.project, &t.dataset, &t.table, schema.clone())
            .clustering(Clustering { fields: Some(vec!["f".into()]) }),
    ];
    for table in bad {
        let e = c.table().create(table).await.expect_err("BigQuery refuses this layout");
        assert!(e.to_string().contains("not allowed"), "{e}");
    }
    let ok = Table::new(&t.project, &t.dataset, &t.table, schema)
        .time_partitioning(TimePartitioning::per_day().field("ts"))
        .clustering(Clustering { fields: Some(vec!["id".into()]) });
    c.table().create(ok).await.expect("a layout BigQuery takes");
}

#[tokio::test]
async fn a_cdc_table_flexrun_creates_declares_its_key_and_staleness_and_upserts_collapse_by_key() {
    let s = stack();
    let dir = tempfile::tempdir().unwrap();
    let (avsc, _) = files(dir.path());
    // 300 records over 20 ids: every id is upserted many times.
    let tmpl = dir.path().join("few-ids.json");
    std::fs::write(&tmpl, TEMPLATE.replace("{{index(0)}}", "{{integer(0,20)}}")).unwrap();
    let t = topic(&s, "avro_cdc").await;
    generate(&s, &t, tmpl.to_str().unwrap(), &avsc, 300, "");
    let out = table(&t);
    let params = format!(
        "{},confluentAvroSchemaPath={avsc},outputTableSpec={out},cdcPrimaryKey=id,cdcMaxStaleness=15m",
        base(&s, &t, "AVRO_CONFLUENT_WIRE_FORMAT")
    );
    let o = run_job("avro-cdc", &dir.path().join("ck"), &params, "3s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let get = format!("{}/projects/{}/datasets/{}/tables/{}", s.bq.rest, out.project, out.dataset, out.table);
    let body: serde_json::Value = serde_json::from_str(
        &answer("tables.get", async { reqwest::get(&get).await.unwrap().text().await.unwrap() }).await,
    )
    .unwrap();
    assert_eq!(body["tableConstraints"]["primaryKey"]["columns"], serde_json::json!(["id"]), "{body}");
    assert_eq!(body["maxStaleness"], "0-0 0 0:15:0", "{body}");
    let (rows, distinct) = s.count(&out).await;
    assert!(rows > 0 && rows <= 20 && rows == distinct, "one row per id: {rows} rows, {distinct} ids");
}

#[tokio::test]
async fn a_tombstone_with_an_avro_key_deletes_the_row_it_names() {
    let s = stack();
    let dir = tempfile::tempdir().unwrap();
    let value_schema = r#"{"type":"record","name":"Item","fields":[{"name":"id","type":"long"},{"name":"note","type":["null","string"],"default":null}]}"#;
    let key_schema = r#"{"type":"record","name":"Key","fields":[{"name":"id","type":"long"}]}"#;
    let (value_avsc, key_avsc) = (dir.path().join("item.avsc"), dir.path().join("key.avsc"));
    std::fs::write(&value_avsc, value_schema).unwrap();
    std::fs::write(&key_avsc, key_schema).unwrap();
    let frame = |schema: &str, v: serde_json::Value| {
        let w = flexrun::avro::WriterSchema::parse(schema).unwrap();
        let datum = flexrun::avro::from_json::to_avro(&w, &v).unwrap();
        let mut out = Vec::new();
        flexrun::avro::wire::confluent_frame(7, &apache_avro::to_avro_datum(&w.schema, datum).unwrap(), &mut out);
        out
    };
    let t = topic(&s, "avro_tomb").await;
    let p: FutureProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", &s.kafka).create().unwrap();
    for id in 1..=5i64 {
        let (k, v) = (
            frame(key_schema, serde_json::json!({"id": id})),
            frame(value_schema, serde_json::json!({"id": id, "note": "n"})),
        );
        p.send(FutureRecord::<[u8], [u8]>::to(&t).key(&k).payload(&v).partition(0), Duration::from_secs(30))
            .await
            .unwrap();
    }
    // A tombstone: key 3 in the key's Avro schema, and a null value.
    let k = frame(key_schema, serde_json::json!({"id": 3}));
    p.send(FutureRecord::<[u8], [u8]>::to(&t).key(&k).partition(0), Duration::from_secs(30)).await.unwrap();
    p.flush(Duration::from_secs(30)).unwrap();
    let out = table(&t);
    let params = format!(
        "{},confluentAvroSchemaPath={},outputTableSpec={out},cdcPrimaryKey=id,cdcKeySchemaPath={}",
        base(&s, &t, "AVRO_CONFLUENT_WIRE_FORMAT"),
        value_avsc.display(),
        key_avsc.display()
    );
    let o = run_job("avro-tomb", &dir.path().join("ck"), &params, "3s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let ids = s.rows(&format!("SELECT id FROM `{}.{}.{}` ORDER BY id", out.project, out.dataset, out.table)).await;
    let ids: Vec<String> = ids.into_iter().map(|r| r[0].clone().unwrap_or_default()).collect();
    assert_eq!(ids, ["1", "2", "4", "5"], "the Avro key's row is deleted");
}

/// Issue 49 item 6: with per-record tables under CREATE_NEVER, a passing 503 while the
/// job looks up a record type's table (the launcher's `rest_unavailable_next`) is waited
/// out, and that type's records land in its table. Before, the error was remembered as
/// "must exist" for the life of the process and every such record was dead-lettered.
#[tokio::test]
async fn a_passing_503_on_a_record_types_table_is_waited_out_not_remembered() {
    let s = stack();
    let registry = std::env::var("FLEXRUN_SCHEMA_REGISTRY").expect("FLEXRUN_SCHEMA_REGISTRY: run with scripts/test.sh");
    let dir = tempfile::tempdir().unwrap();
    let (avsc, tmpl) = files(dir.path());
    let t = topic(&s, "avro_503").await;
    generate(&s, &t, &tmpl, &avsc, 50, &format!(",schemaRegistryConnectionUrl={registry}"));
    let client = flexrun::avro::registry::Registry::new(&registry);
    let refund_id = client.register("shop.events.Refund", REFUND).await.unwrap();
    produce_refunds(&s, &t, refund_id, 1000..1010).await;
    let prefix = unique("r503");
    let dlq = table(&format!("{t}_dlq"));
    let params = format!(
        "{},schemaFormat=SCHEMA_REGISTRY,schemaRegistryConnectionUrl={registry},outputProject={PROJECT},outputDataset=avro,bqTableNamePrefix={prefix},outputDeadletterTable={dlq},useBigQueryDLQ=true",
        base(&s, &t, "AVRO_CONFLUENT_WIRE_FORMAT")
    );
    let ck = dir.path().join("ck");
    // 1. The tables are created (CREATE_IF_NEEDED, the default).
    let o = run_job("avro-503", &ck, &params, "3s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let refunds = table(&format!("{prefix}-shop-events-Refund"));
    assert_eq!(s.count(&refunds).await, (10, 10));
    // 2. More refunds; the restarted job, now CREATE_NEVER, meets two 503s on their table.
    produce_refunds(&s, &t, refund_id, 1010..1020).await;
    table_faults(&refunds, r#""rest_unavailable_next": 2"#);
    let o = run_job("avro-503", &ck, &format!("{params},createDisposition=CREATE_NEVER"), "3s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fault_stats(&refunds)["injected_rest"], 2, "the 503s were served");
    assert_eq!(s.count(&refunds).await, (20, 20), "every refund in its table");
    let (dead, _) = flexrun::local::count_rows(&s.bq, &dlq, None).await.unwrap_or((0, None));
    assert_eq!(dead, 0, "no refund dead-lettered");
    assert!(text(&o).contains("reading a record type's table failed for now"), "{}", text(&o));
}
