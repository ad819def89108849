//! Schema evolution (`schemaUpdateOptions`) end to end: a field added to the messages
//! mid-run becomes a column and its values land exactly once, across a kill right after
//! the table was changed and a kill after an append mapped with the new schema; a
//! REQUIRED column the messages leave empty is relaxed; a column that reaches the write
//! stream late is waited for; and the emulator refuses the schema changes BigQuery refuses.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use flexrun::bigquery::schema::{Mode, Schema};
use flexrun::bigquery::{rest, TableRef};
use std::os::unix::process::ExitStatusExt;

/// A topic of one partition and a table `id INTEGER REQUIRED, name STRING REQUIRED`.
async fn fixture(s: &Stack, name: &str) -> (String, TableRef) {
    let topic = unique(name);
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    let table = TableRef { project: PROJECT.into(), dataset: "evolve".into(), table: topic.clone() };
    let schema = Schema::from_json(&serde_json::json!([
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "name", "type": "STRING", "mode": "REQUIRED"}
    ]))
    .unwrap();
    let c = rest::client(&s.bq).await.unwrap();
    answer("create table", rest::ensure_table(&c, &s.bq, &table, &schema)).await.unwrap();
    (topic, table)
}

fn params(s: &Stack, topic: &str, table: &TableRef, extra: &str) -> String {
    format!(
        "readBootstrapServerAndTopic={};{topic},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=JSON,outputTableSpec={table}{extra}",
        s.kafka
    )
}

async fn schema_of(s: &Stack, t: &TableRef) -> Schema {
    let c = rest::client(&s.bq).await.unwrap();
    answer("tables.get", rest::table_schema(&c, &s.bq, t)).await.unwrap()
}

async fn scalar(s: &Stack, sql: &str) -> i64 {
    s.rows(sql).await[0][0].as_deref().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_added_mid_run_becomes_a_column_and_lands_exactly_once_across_kills() {
    let s = stack();
    let (topic, table) = fixture(&s, "evo_add").await;
    let dlq = TableRef { table: format!("{}_dlq", table.table), ..table.clone() };
    // 200 records as the table is, 200 with a new field, 50 without a REQUIRED field, and
    // two whose new field names no type (null, an object): those are dead letters.
    let mut values: Vec<Vec<u8>> = (0..200).map(|i| format!(r#"{{"id": {i}, "name": "n{i}"}}"#).into()).collect();
    values.extend((200..400).map(|i| format!(r#"{{"id": {i}, "name": "n{i}", "note": "x{i}"}}"#).into_bytes()));
    values.extend((400..450).map(|i| format!(r#"{{"id": {i}}}"#).into_bytes()));
    values.push(br#"{"id": 450, "name": "n", "extra": null}"#.to_vec());
    values.push(br#"{"id": 451, "name": "n", "nested": {"a": 1}}"#.to_vec());
    produce_values(&s, &topic, &values).await;
    let p = params(
        &s,
        &topic,
        &table,
        &format!(",outputDeadletterTable={dlq},schemaUpdateOptions=ALLOW_FIELD_ADDITION|ALLOW_FIELD_RELAXATION"),
    );
    let ck = tempfile::tempdir().unwrap();
    let extra = ["--batch-rows", "100"];

    // 1. Killed right after tables.patch added the column, before the batch was logged.
    let crash =
        job_cmd("evo_add", ck.path(), &p, "2s", &extra).env("FAILPOINTS", "evolve::after_patch=return").bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "{}", text(&crash));
    let widened = schema_of(&s, &table).await;
    let note = widened.lookup("note").map(|i| &widened.columns[i]);
    assert_eq!(note.map(|c| (c.type_name.as_str(), c.mode)), Some(("STRING", Mode::Nullable)), "{widened:?}");
    assert!(s.count(&table).await.0 < 400, "the run died before the new field's rows were written");

    // 2. Killed after appending a batch mapped with the new schema, before its commit.
    let crash =
        job_cmd("evo_add", ck.path(), &p, "2s", &extra).env("FAILPOINTS", "eo::after_main_append=return").bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "{}", text(&crash));

    // 3. Replays that batch with its logged schema, then relaxes `name` for the last records.
    let sum = ck.path().join("summary.json");
    let o = run_job("evo_add", ck.path(), &p, "2s", &[&extra[..], &["--summary-json", sum.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let j = summary(&sum);
    assert_eq!(j["summary"]["replayed_batches"], 1, "{j}");
    assert!(j["summary"]["appends_already_existed"].as_u64() >= Some(1), "{j}");
    assert_eq!(j["summary"]["reliability"]["schema_changes"], 1, "only the relaxation is left for this run: {j}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("relax name to NULLABLE"), "{err}");
    assert!(err.contains("field=extra") && err.contains("field=nested"), "{err}");

    let fq = format!("`{}.{}.{}`", table.project, table.dataset, table.table);
    assert_eq!(s.count(&table).await, (450, 450), "every good record once");
    let notes = scalar(&s, &format!("SELECT COUNT(*) FROM {fq} WHERE note = CONCAT('x', CAST(id AS STRING))")).await;
    assert_eq!(notes, 200, "each new field's value landed in its column");
    assert_eq!(scalar(&s, &format!("SELECT COUNT(*) FROM {fq} WHERE note IS NOT NULL")).await, 200);
    assert_eq!(scalar(&s, &format!("SELECT COUNT(*) FROM {fq} WHERE name IS NULL")).await, 50);
    let relaxed = schema_of(&s, &table).await;
    assert_eq!(relaxed.columns[relaxed.lookup("name").unwrap()].mode, Mode::Nullable);
    assert_eq!(relaxed.columns[relaxed.lookup("id").unwrap()].mode, Mode::Required, "only what was asked for");
    let dl = s
        .rows(&format!(
            "SELECT errorMessage FROM `{}.{}.{}` ORDER BY errorMessage",
            dlq.project, dlq.dataset, dlq.table
        ))
        .await;
    let dl: Vec<String> = dl.into_iter().map(|r| r[0].clone().unwrap_or_default()).collect();
    assert_eq!(dl.len(), 2, "{dl:?}");
    assert!(dl[0].contains("extra") && dl[1].contains("nested"), "{dl:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_option_a_new_field_is_a_dead_letter_and_the_table_is_left_alone() {
    let s = stack();
    let (topic, table) = fixture(&s, "evo_off").await;
    let dlq = TableRef { table: format!("{}_dlq", table.table), ..table.clone() };
    let values: Vec<Vec<u8>> =
        (0..20).map(|i| format!(r#"{{"id": {i}, "name": "n", "note": "x"}}"#).into_bytes()).collect();
    produce_values(&s, &topic, &values).await;
    let ck = tempfile::tempdir().unwrap();
    let o =
        run_job("evo_off", ck.path(), &params(&s, &topic, &table, &format!(",outputDeadletterTable={dlq}")), "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&table).await.0, 0);
    assert_eq!(schema_of(&s, &table).await.columns.len(), 2);
    let dl = format!(
        "SELECT COUNT(*) FROM `{}.{}.{}` WHERE errorMessage LIKE '%unexpected field with name note%'",
        dlq.project, dlq.dataset, dlq.table
    );
    assert_eq!(scalar(&s, &dl).await, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_column_that_reaches_the_write_stream_late_is_retried_until_it_has() {
    let s = stack();
    let (topic, table) = fixture(&s, "evo_lag").await;
    let mut values: Vec<Vec<u8>> = (0..50).map(|i| format!(r#"{{"id": {i}, "name": "n"}}"#).into_bytes()).collect();
    values.extend((50..100).map(|i| format!(r#"{{"id": {i}, "name": "n", "score": {i}.5}}"#).into_bytes()));
    produce_values(&s, &topic, &values).await;
    // BigQuery: new columns reach writers "after some time (in order of minutes)".
    table_faults(&table, r#""schema_lag_s": 3"#);
    let ck = tempfile::tempdir().unwrap();
    let sum = ck.path().join("summary.json");
    let p = params(&s, &topic, &table, ",schemaUpdateOptions=ALLOW_FIELD_ADDITION");
    let o = run_job("evo_lag", ck.path(), &p, "2s", &["--batch-rows", "50", "--summary-json", sum.to_str().unwrap()]);
    reset_faults(&table);
    assert!(o.status.success(), "{}", text(&o));
    let j = summary(&sum);
    let retries = j["summary"]["reliability"]["retries"].as_object().unwrap();
    assert!(!retries.is_empty(), "the emulator refused the new field while the change lagged: {j}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Input schema has more fields than BigQuery schema"),
        "{}",
        text(&o)
    );
    assert_eq!(s.count(&table).await, (100, 100));
    let fq = format!("`{}.{}.{}`", table.project, table.dataset, table.table);
    assert_eq!(scalar(&s, &format!("SELECT COUNT(*) FROM {fq} WHERE score = id + 0.5")).await, 50);
    let w = schema_of(&s, &table).await;
    assert_eq!(w.columns[w.lookup("score").unwrap()].type_name, "FLOAT");
}

/// tables.patch as a user would send it, straight to the emulator.
async fn patch(s: &Stack, t: &TableRef, fields: serde_json::Value) -> reqwest::StatusCode {
    let url = format!("{}/projects/{}/datasets/{}/tables/{}", s.bq.rest, t.project, t.dataset, t.table);
    let body = serde_json::json!({"schema": {"fields": fields}});
    answer("tables.patch", reqwest::Client::new().patch(url).json(&body).send()).await.unwrap().status()
}

#[tokio::test]
async fn the_emulator_refuses_the_schema_changes_bigquery_refuses() {
    let s = stack();
    let (_, table) = fixture(&s, "evo_rules").await;
    let id = serde_json::json!({"name": "id", "type": "INTEGER", "mode": "REQUIRED"});
    let name = serde_json::json!({"name": "name", "type": "STRING", "mode": "REQUIRED"});
    let refused = [
        ("a column dropped", serde_json::json!([id])),
        ("a type changed", serde_json::json!([id, {"name": "name", "type": "INTEGER", "mode": "REQUIRED"}])),
        ("a REQUIRED column added", serde_json::json!([id, name, {"name": "x", "type": "STRING", "mode": "REQUIRED"}])),
    ];
    for (what, fields) in refused {
        assert_eq!(patch(&s, &table, fields).await, 400, "{what}");
    }
    // Names BigQuery refuses for a new column (docs/schemas#column_names).
    for bad in ["", "_PARTITIONTIME", "_table_x", "a-b", "2x", &"c".repeat(301)] {
        let fields = serde_json::json!([id, name, {"name": bad, "type": "STRING", "mode": "NULLABLE"}]);
        assert_eq!(patch(&s, &table, fields).await, 400, "column name {bad:?}");
    }
    assert_eq!(schema_of(&s, &table).await.columns.len(), 2, "nothing changed");
    let allowed = serde_json::json!([id, {"name": "name", "type": "STRING", "mode": "NULLABLE"}, {"name": "x", "type": "STRING"}]);
    assert_eq!(patch(&s, &table, allowed).await, 200, "a relaxation and a NULLABLE column");
    let tighten = serde_json::json!([id, name, {"name": "x", "type": "STRING"}]);
    assert_eq!(patch(&s, &table, tighten).await, 400, "NULLABLE back to REQUIRED");
    let w = schema_of(&s, &table).await;
    assert_eq!(
        w.columns.iter().map(|c| (c.name.as_str(), c.mode)).collect::<Vec<_>>(),
        [("id", Mode::Required), ("name", Mode::Nullable), ("x", Mode::Nullable)]
    );
}

const ITEM_V1: &str = r#"{"type":"record","name":"Item","namespace":"evo","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"}]}"#;
const ITEM_V2: &str = r#"{"type":"record","name":"Item","namespace":"evo","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"},{"name":"note","type":["null","string"],"default":null},{"name":"qty","type":"long","default":0},{"name":"dims","type":["null",{"type":"record","name":"Dims","fields":[{"name":"w","type":"long"},{"name":"tags","type":{"type":"array","items":"string"}}]}],"default":null}]}"#;

const REFUND_V1: &str = r#"{"type":"record","name":"Refund","namespace":"evo","fields":[{"name":"id","type":"long"},{"name":"amount","type":"double"}]}"#;
const REFUND_V2: &str = r#"{"type":"record","name":"Refund","namespace":"evo","fields":[{"name":"id","type":"long"},{"name":"amount","type":"double"},{"name":"reason","type":["null","string"],"default":null}]}"#;

/// Produce records of `schema` (registry id `id`) with these ids, in the Confluent framing.
async fn produce_items(s: &Stack, topic: &str, schema: &str, id: u32, ids: std::ops::Range<i64>) {
    let w = flexrun::avro::WriterSchema::parse(schema).unwrap();
    let values: Vec<Vec<u8>> = ids
        .map(|i| {
            let j = serde_json::json!({"id": i, "name": format!("n{i}"), "note": format!("x{i}"), "qty": i, "dims": {"w": i * 2, "tags": ["a", "b"]}, "amount": 1.5, "reason": format!("r{i}")});
            let v = flexrun::avro::from_json::to_avro(&w, &j).unwrap();
            let mut framed = Vec::new();
            flexrun::avro::wire::confluent_frame(id, &apache_avro::to_avro_datum(&w.schema, v).unwrap(), &mut framed);
            framed
        })
        .collect();
    produce_values(s, topic, &values).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_schema_version_in_the_registry_adds_its_fields_as_columns_across_a_kill() {
    let s = stack();
    let registry = std::env::var("FLEXRUN_SCHEMA_REGISTRY").expect("FLEXRUN_SCHEMA_REGISTRY: run with scripts/test.sh");
    let topic = unique("evo_avro");
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    let client = flexrun::avro::registry::Registry::new(&registry);
    let subject = format!("{topic}-value");
    let v1 = client.register(&subject, ITEM_V1).await.unwrap();
    produce_items(&s, &topic, ITEM_V1, v1, 0..50).await;
    // Another record type on the topic, with a table of its own (per-record tables).
    let refund_subject = format!("{topic}-refund");
    let r1 = client.register(&refund_subject, REFUND_V1).await.unwrap();
    produce_items(&s, &topic, REFUND_V1, r1, 0..20).await;
    let prefix = unique("evo");
    let p = format!(
        "readBootstrapServerAndTopic={};{topic},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=AVRO_CONFLUENT_WIRE_FORMAT,schemaFormat=SCHEMA_REGISTRY,schemaRegistryConnectionUrl={registry},outputProject={PROJECT},outputDataset=evolve,bqTableNamePrefix={prefix},schemaUpdateOptions=ALLOW_FIELD_ADDITION",
        s.kafka
    );
    let ck = tempfile::tempdir().unwrap();
    let o = run_job("evo_avro", ck.path(), &p, "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let table = TableRef { project: PROJECT.into(), dataset: "evolve".into(), table: format!("{prefix}-evo-Item") };
    assert_eq!(schema_of(&s, &table).await.columns.len(), 2, "created from version 1");
    // Version 2 adds an optional field, a long with a default and an optional record: each
    // becomes a NULLABLE column (the record a RECORD with its own REQUIRED and REPEATED fields).
    let v2 = client.register(&subject, ITEM_V2).await.unwrap();
    produce_items(&s, &topic, ITEM_V2, v2, 50..100).await;
    let r2 = client.register(&refund_subject, REFUND_V2).await.unwrap();
    produce_items(&s, &topic, REFUND_V2, r2, 20..40).await;
    let crash = job_cmd("evo_avro", ck.path(), &p, "2s", &[]).env("FAILPOINTS", "evolve::after_patch=return").bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "{}", text(&crash));
    let o = run_job("evo_avro", ck.path(), &p, "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let w = schema_of(&s, &table).await;
    let cols: Vec<_> = w.columns.iter().map(|c| (c.name.as_str(), c.type_name.as_str(), c.mode)).collect();
    assert_eq!(
        cols[2..],
        [("note", "STRING", Mode::Nullable), ("qty", "INTEGER", Mode::Nullable), ("dims", "RECORD", Mode::Nullable)],
        "{cols:?}"
    );
    assert_eq!(s.count(&table).await, (100, 100));
    let fq = format!("`{}.{}.{}`", table.project, table.dataset, table.table);
    let landed = format!(
        "SELECT COUNT(*) FROM {fq} WHERE note = CONCAT('x', CAST(id AS STRING)) AND qty = id AND dims.w = 2 * id AND ARRAY_LENGTH(dims.tags) = 2"
    );
    assert_eq!(scalar(&s, &landed).await, 50, "the new fields' values landed, the record's too");
    // The other record type's table evolved with its own new version.
    let refunds = TableRef { table: format!("{prefix}-evo-Refund"), ..table.clone() };
    let w = schema_of(&s, &refunds).await;
    assert_eq!(w.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["id", "amount", "reason"]);
    assert_eq!(s.count(&refunds).await, (40, 40));
    let fr = format!("`{}.{}.{}`", refunds.project, refunds.dataset, refunds.table);
    let reasons = format!("SELECT COUNT(*) FROM {fr} WHERE reason = CONCAT('r', CAST(id AS STRING))");
    assert_eq!(scalar(&s, &reasons).await, 20);
}

/// Issue 49 item 5: under ALLOW_FIELD_ADDITION, a message whose new top-level key
/// BigQuery refuses as a column name (empty, reserved prefix, over 300 characters,
/// not letters, digits and underscores) goes to the dead-letter table with the reason,
/// the job goes on, and a good new field still becomes a column. Before, the job asked
/// tables.patch, got 400, and stopped; each restart asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_bigquery_refuses_as_a_column_name_is_a_dead_letter_not_a_wedge() {
    let s = stack();
    let (topic, table) = fixture(&s, "evo_names").await;
    let dlq = TableRef { table: format!("{}_dlq", table.table), ..table.clone() };
    let long = "c".repeat(301);
    let mut values: Vec<Vec<u8>> = (0..20).map(|i| format!(r#"{{"id": {i}, "name": "n{i}"}}"#).into()).collect();
    for (i, key) in ["", "_PARTITION_x", "_TABLE_y", long.as_str(), "a-b"].iter().enumerate() {
        values.push(format!(r#"{{"id": {}, "name": "n", "{key}": "v"}}"#, 100 + i).into_bytes());
    }
    values.extend((20..30).map(|i| format!(r#"{{"id": {i}, "name": "n{i}", "good_new": "g"}}"#).into_bytes()));
    produce_values(&s, &topic, &values).await;
    let p =
        params(&s, &topic, &table, &format!(",outputDeadletterTable={dlq},schemaUpdateOptions=ALLOW_FIELD_ADDITION"));
    let ck = tempfile::tempdir().unwrap();
    let o = run_job("evo_names", ck.path(), &p, "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&table).await, (30, 30), "every good record, with the good new field");
    assert!(schema_of(&s, &table).await.lookup("good_new").is_some());
    let fq = format!("`{}.{}.{}`", dlq.project, dlq.dataset, dlq.table);
    assert_eq!(scalar(&s, &format!("SELECT COUNT(*) FROM {fq}")).await, 5, "each refused name is a dead letter");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("BigQuery reserves the prefix _PARTITION") && err.contains("over BigQuery's 300"), "{err}");
}

/// Issue 49 item 5: a 503 from BigQuery while the job changes its table (tables.get and
/// tables.patch answer `backendError` three times) is retried with backoff; the column is
/// added and every row lands, where before the job stopped at the first 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passing_503_while_changing_the_table_is_retried() {
    let s = stack();
    let (topic, table) = fixture(&s, "evo_503").await;
    let first: Vec<Vec<u8>> = (0..20).map(|i| format!(r#"{{"id": {i}, "name": "n{i}"}}"#).into()).collect();
    produce_values(&s, &topic, &first).await;
    let p = params(&s, &topic, &table, ",schemaUpdateOptions=ALLOW_FIELD_ADDITION");
    let ck = tempfile::tempdir().unwrap();
    let mut child = spawn_job("evo_503", ck.path(), &p, &[]);
    wait_for_rows(&s, &table, 20, &mut child).await;
    table_faults(&table, r#""rest_unavailable_next": 3"#);
    let more: Vec<Vec<u8>> =
        (20..40).map(|i| format!(r#"{{"id": {i}, "name": "n{i}", "late": "l{i}"}}"#).into()).collect();
    produce_values(&s, &topic, &more).await;
    wait_for_rows(&s, &table, 40, &mut child).await;
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_with_timeout(child, RUN_LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fault_stats(&table)["injected_rest"], 3, "the 503s were served");
    assert_eq!(s.count(&table).await, (40, 40));
    assert!(schema_of(&s, &table).await.lookup("late").is_some());
    assert!(text(&o).contains("changing the table failed for now"), "{}", text(&o));
}

/// Issue 62, item 10: BigQuery answers table updates past 5 in 10 s with 403
/// `rateLimitExceeded`, which was read as a permanent refusal: the records that asked for
/// the column went to the dead-letter table. Two such answers are now waited out and the
/// column is added; nothing is dead-lettered. (The emulator enforces the rate too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_403_rate_limit_while_changing_the_table_is_waited_out_not_dead_lettered() {
    let s = stack();
    let (topic, table) = fixture(&s, "evo_403").await;
    let dlq = TableRef { table: format!("{}_dlq", table.table), ..table.clone() };
    let values: Vec<Vec<u8>> =
        (0..20).map(|i| format!(r#"{{"id": {i}, "name": "n{i}", "late": "l{i}"}}"#).into_bytes()).collect();
    produce_values(&s, &topic, &values).await;
    table_faults(&table, r#""patch_rate_limited_next": 2"#);
    let p =
        params(&s, &topic, &table, &format!(",outputDeadletterTable={dlq},schemaUpdateOptions=ALLOW_FIELD_ADDITION"));
    let ck = tempfile::tempdir().unwrap();
    let o = run_job("evo_403", ck.path(), &p, "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fault_stats(&table)["rate_limited_patches"], 2, "the 403s were served");
    assert_eq!(s.count(&table).await, (20, 20));
    assert!(schema_of(&s, &table).await.lookup("late").is_some());
    let fq = format!("`{}.{}.{}`", dlq.project, dlq.dataset, dlq.table);
    let dead = s.rows(&format!("SELECT COUNT(*) FROM {fq}")).await;
    assert!(dead.is_empty() || dead[0][0].as_deref() == Some("0"), "nothing dead-lettered: {dead:?}");
}

/// Issue 49: a batch logged under one schema and replayed after the table changed is
/// replayed with the schema it was logged with. Its records carry a field the table
/// lacked, so the log says they are dead letters; the table then gains that column
/// (another writer's change, while the job is down). The replay still dead-letters them,
/// exactly as logged (mapping with the new schema would make them rows and differ from
/// the log), and the batches after it write the new column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_logged_under_an_older_schema_replays_with_it_after_the_table_changed() {
    let s = stack();
    let (topic, table) = fixture(&s, "evo_old").await;
    let dlq = TableRef { table: format!("{}_dlq", table.table), ..table.clone() };
    let values: Vec<Vec<u8>> =
        (0..100).map(|i| format!(r#"{{"id": {i}, "name": "n{i}", "note": "x{i}"}}"#).into_bytes()).collect();
    produce_values(&s, &topic, &values).await;
    let p = params(&s, &topic, &table, &format!(",outputDeadletterTable={dlq}"));
    let ck = tempfile::tempdir().unwrap();
    let extra = ["--batch-rows", "50"];
    let crash =
        job_cmd("evo_old", ck.path(), &p, "2s", &extra).env("FAILPOINTS", "eo::after_offset_log=return").bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "{}", text(&crash));
    assert_eq!(s.count(&table).await.0, 0, "killed before the first append");
    let id = serde_json::json!({"name": "id", "type": "INTEGER", "mode": "REQUIRED"});
    let name = serde_json::json!({"name": "name", "type": "STRING", "mode": "REQUIRED"});
    let note = serde_json::json!({"name": "note", "type": "STRING", "mode": "NULLABLE"});
    assert_eq!(patch(&s, &table, serde_json::json!([id, name, note])).await, 200);

    let sum = ck.path().join("summary.json");
    let o = run_job("evo_old", ck.path(), &p, "2s", &[&extra[..], &["--summary-json", sum.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&sum)["summary"]["replayed_batches"], 1, "{}", text(&o));
    let fq = |t: &TableRef| format!("`{}.{}.{}`", t.project, t.dataset, t.table);
    assert_eq!(scalar(&s, &format!("SELECT COUNT(*) FROM {}", fq(&dlq))).await, 50, "the logged batch, as logged");
    assert_eq!(s.count(&table).await, (50, 50), "the next batch, with the new column");
    let noted =
        scalar(&s, &format!("SELECT COUNT(*) FROM {} WHERE note = CONCAT('x', CAST(id AS STRING))", fq(&table))).await;
    assert_eq!(noted, 50);
    let first = scalar(&s, &format!("SELECT MIN(id) FROM {}", fq(&table))).await;
    let distinct = scalar(&s, &format!("SELECT COUNT(DISTINCT id) FROM {}", fq(&table))).await;
    assert_eq!((first, distinct), (50, 50), "ids 50..99, each once; 0..49 are the dead letters");
}
