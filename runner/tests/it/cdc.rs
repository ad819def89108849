//! CDC end to end: the emulator applies changes by primary key as BigQuery's CDC page
//! describes (launcher patch 11), and a CDC job whose records arrive out of sequence
//! order, killed ten times, ends with each key's exact final state.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use flexrun::bigquery::proto::{descriptor, put_bytes, put_varint};
use flexrun::bigquery::schema::Schema;
use flexrun::bigquery::write::{AppendOutcome, WriteClient};
use flexrun::bigquery::TableRef;
use flexrun::kafka_to_bq::map::cdc::{parse, CdcPlan};
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::collections::BTreeMap;

pub(crate) fn schema() -> Schema {
    Schema::from_json(&json!([
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "version", "type": "INTEGER", "mode": "NULLABLE"},
        {"name": "note", "type": "STRING", "mode": "NULLABLE"}
    ]))
    .unwrap()
}

/// Create `t` with tables.insert, with `id` as its primary key when `pk`.
async fn create(s: &Stack, t: &TableRef, pk: bool) -> serde_json::Value {
    create_table(s, t, &schema(), pk).await
}

/// Create `t` with `schema` and `id` as its primary key.
pub(crate) async fn create_with(s: &Stack, t: &TableRef, schema: &Schema) -> serde_json::Value {
    create_table(s, t, schema, true).await
}

async fn create_table(s: &Stack, t: &TableRef, schema: &Schema, pk: bool) -> serde_json::Value {
    let mut body = json!({
        "tableReference": {"projectId": t.project, "datasetId": t.dataset, "tableId": t.table},
        "schema": {"fields": schema.to_json()},
    });
    if pk {
        body["tableConstraints"] = json!({"primaryKey": {"columns": ["id"]}});
        body["maxStaleness"] = json!("0-0 0 0:15:0");
    }
    let url = format!("{}/projects/{}/datasets/{}/tables", s.bq.rest, t.project, t.dataset);
    let c = flexrun::bigquery::rest::client(&s.bq).await.unwrap();
    answer("create dataset", flexrun::bigquery::rest::ensure_dataset(&c, &t.project, &t.dataset)).await.unwrap();
    let post = reqwest::Client::new().post(&url).header("content-type", "application/json").body(body.to_string());
    let r = answer("tables.insert", post.send()).await.unwrap();
    assert!(r.status().is_success(), "tables.insert: {}", r.text().await.unwrap_or_default());
    let get = format!("{url}/{}", t.table);
    let text = answer("tables.get", async { reqwest::get(&get).await.unwrap().text().await.unwrap() }).await;
    serde_json::from_str(&text).unwrap()
}

fn row(plan_tags: (u32, u32), id: i64, version: i64, change: &str, seq: &str) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(1, id as u64, &mut out);
    put_varint(2, version as u64, &mut out);
    put_bytes(plan_tags.0, change.as_bytes(), &mut out);
    put_bytes(plan_tags.1, seq.as_bytes(), &mut out);
    out
}

/// Create `t` (id, version, note) with `id` as its primary key, for other modules' CDC tests.
pub(crate) async fn create_keyed(s: &Stack, t: &TableRef) -> serde_json::Value {
    create(s, t, true).await
}

/// `id → version` of every row of `t`, for other modules' CDC tests.
pub(crate) async fn state_of(s: &Stack, t: &TableRef) -> BTreeMap<i64, i64> {
    state(s, t).await
}

/// `id → version` of every row of `t`.
pub(crate) async fn state(s: &Stack, t: &TableRef) -> BTreeMap<i64, i64> {
    let rows = s.rows(&format!("SELECT id, version FROM `{}.{}.{}`", t.project, t.dataset, t.table)).await;
    let mut out = BTreeMap::new();
    for r in rows {
        let id: i64 = r[0].as_deref().unwrap().parse().unwrap();
        let v: i64 = r[1].as_deref().unwrap().parse().unwrap();
        assert!(out.insert(id, v).is_none(), "key {id} is in {t} twice");
    }
    out
}

#[tokio::test]
async fn the_emulator_applies_changes_by_key_and_refuses_what_bigquery_refuses() {
    let s = stack();
    let name = unique("cdc_emu");
    let t = TableRef { project: PROJECT.into(), dataset: "cdc".into(), table: name.clone() };
    let got = create(&s, &t, true).await;
    assert_eq!(got["tableConstraints"]["primaryKey"]["columns"], json!(["id"]), "{got}");
    let plan = CdcPlan::resolve(&parse(Some("id"), None).unwrap().unwrap(), &schema()).unwrap();
    let d = plan.descriptor(descriptor(&schema(), "Row"));
    let tags = (4, 5);
    let w = WriteClient::connect(&s.bq).await.unwrap();
    let default = format!("{}/streams/_default", t.path());
    let mut c = w.open(&default, d.clone()).await.unwrap();
    let send = |rows: Vec<Vec<u8>>| rows;
    for batch in [
        send(vec![row(tags, 1, 10, "UPSERT", "5"), row(tags, 2, 20, "UPSERT", "1"), row(tags, 3, 30, "UPSERT", "1")]),
        // Stale: a lower number than key 1's last change loses, arriving late.
        send(vec![row(tags, 1, 9, "UPSERT", "3")]),
        // Key 2 deleted; then a stale upsert of it loses to the delete.
        send(vec![row(tags, 2, 21, "DELETE", "2"), row(tags, 2, 19, "UPSERT", "1")]),
        // Within one request the highest number wins whatever the order; sections compare in order.
        send(vec![row(tags, 3, 33, "UPSERT", "1/2"), row(tags, 3, 31, "UPSERT", "1/1")]),
        // A change sent again (same number) is the same change.
        send(vec![row(tags, 1, 10, "UPSERT", "5")]),
    ] {
        assert_eq!(answer("append", c.append(&batch, None)).await.unwrap(), AppendOutcome::Appended);
    }
    assert_eq!(state(&s, &t).await, BTreeMap::from([(1, 10), (3, 33)]));

    // "_CHANGE_TYPE only accepts the values UPSERT and DELETE".
    let mut c = w.open(&default, d.clone()).await.unwrap();
    let e = answer("append", c.append(&[row(tags, 4, 1, "MERGE", "9")], None)).await.unwrap_err().to_string();
    assert!(e.contains("only UPSERT and DELETE"), "{e}");
    // "You must use the Storage Write API in the default stream".
    let committed = w.create_committed_stream(&t).await.unwrap();
    let mut c = w.open(&committed, d.clone()).await.unwrap();
    let e = answer("append", c.append(&[row(tags, 4, 1, "UPSERT", "9")], Some(0))).await.unwrap_err().to_string();
    assert!(e.contains("default stream"), "{e}");
    // "You must declare primary keys for the destination table".
    let bare = TableRef { table: format!("{name}_nopk"), ..t.clone() };
    create(&s, &bare, false).await;
    let mut c = w.open(&format!("{}/streams/_default", bare.path()), d).await.unwrap();
    let e = answer("append", c.append(&[row(tags, 4, 1, "UPSERT", "9")], None)).await.unwrap_err().to_string();
    assert!(e.contains("primary key"), "{e}");
    assert_eq!(state(&s, &t).await, BTreeMap::from([(1, 10), (3, 33)]), "refused requests wrote nothing");
    assert!(state(&s, &bare).await.is_empty());
}

/// Produce `n` seeded changes over `keys` keys, each key's changes spread over both
/// partitions (`(key + version) % 2`) with its op header, and return the final state they define. Each change's `version` is
/// its place in the source's order, but for about half the keys the last two changes
/// are produced swapped, so records arrive out of sequence order: for each key the
/// change with the highest version wins, if it is an UPSERT.
async fn produce_changes(s: &Stack, topic: &str, n: u64, keys: i64, seed: u64) -> BTreeMap<i64, i64> {
    use rdkafka::message::OwnedHeaders;
    use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
    let p: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &s.kafka)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut changes: Vec<(i64, i64, &str)> = (0..n as i64)
        .map(|version| (rng.random_range(0..keys), version, if rng.random_bool(0.25) { "DELETE" } else { "UPSERT" }))
        .collect();
    // For about half the keys, the last two changes are produced in the wrong order:
    // the older one arrives last, and only its sequence number says it lost.
    let mut at: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, (id, _, _)) in changes.iter().enumerate() {
        at.entry(*id).or_default().push(i);
    }
    let mut swapped = 0;
    for idx in at.values() {
        if idx.len() >= 2 && rng.random_bool(0.5) {
            changes.swap(idx[idx.len() - 2], idx[idx.len() - 1]);
            swapped += 1;
        }
    }
    assert!(swapped > 20, "the seed swapped only {swapped} keys' last changes");
    let mut last: BTreeMap<i64, (i64, &str)> = BTreeMap::new();
    let mut inflight = Vec::new();
    for (id, version, op) in changes {
        if last.get(&id).is_none_or(|(v, _)| *v < version) {
            last.insert(id, (version, op));
        }
        let value = json!({"id": id, "version": version, "note": format!("v{version}")}).to_string();
        let key = id.to_string();
        let headers = OwnedHeaders::new().insert(rdkafka::message::Header { key: "op", value: Some(op) });
        // A key's changes alternate between the two partitions, so only the sequence
        // field orders them: offsets of different partitions are never comparable.
        let r =
            FutureRecord::to(topic).key(&key).payload(&value).partition(((id + version) % 2) as i32).headers(headers);
        inflight.push(p.send_result(r).map_err(|(e, _)| e).unwrap());
    }
    for f in inflight {
        f.await.unwrap().map_err(|(e, _)| e).unwrap();
    }
    p.flush(CALL_LIMIT).unwrap();
    last.into_iter().filter(|(_, (_, op))| *op == "UPSERT").map(|(k, (v, _))| (k, v)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cdc_job_killed_ten_times_ends_in_each_keys_exact_final_state() {
    let s = stack();
    let seed = test_seed("cdc kills");
    let topic = unique("cdc_kill");
    flexrun::kafka::create_topic(&s.kafka, &topic, 2).await.unwrap();
    let t = TableRef { project: PROJECT.into(), dataset: "cdc".into(), table: topic.clone() };
    create(&s, &t, true).await;
    let want = produce_changes(&s, &topic, 2_000, 150, seed).await;
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let params = format!(
        "readBootstrapServerAndTopic={};{topic},messageFormat=JSON,outputTableSpec={t},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,cdcPrimaryKey=id,cdcSequenceField=version",
        s.kafka
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0xCDC);
    for kill in 0..10 {
        // Each run commits a few batches, then dies after the appends of the next one
        // and before its commit: the restart sends that batch again.
        let skip = rng.random_range(0..3);
        let o = job_cmd("cdc-kill", &ck, &params, "20s", &["--batch-rows", "40"])
            .env("FAILPOINTS", format!("eo::before_commit_log={skip}*off->return"))
            .bounded();
        assert!(
            !o.status.success() && text(&o).contains("crash point eo::before_commit_log reached"),
            "kill {kill}: {}",
            text(&o)
        );
    }
    let o = run_job("cdc-kill", &ck, &params, "20s", &["--batch-rows", "40"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(state(&s, &t).await, want, "each key's final state, after 10 SIGKILLs");
    // The restart says what a re-sent change means under CDC, not the generic line.
    assert!(
        text(&o).contains("CDC: changes sent after the last commit are read again")
            && !text(&o).contains("may be written twice"),
        "{}",
        text(&o)
    );
    // The recovery path ran: batches appended before a kill were sent again, so the
    // emulator received more changes than were produced, and the stale ones lost.
    let stats = fault_stats(&t);
    let applied = stats["cdc_changes"].as_u64().unwrap_or(0);
    assert!(applied > 2_000, "changes received {applied}: the killed batches were not sent again? {stats}");
}

/// A one-partition topic and a CDC table (id, version, op) keyed by `id`, named `name`.
async fn op_table(s: &Stack, name: &str) -> (String, TableRef) {
    let topic = unique(name);
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    let t = TableRef { project: PROJECT.into(), dataset: "cdc".into(), table: topic.clone() };
    let with_op = Schema::from_json(&json!([
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "version", "type": "INTEGER", "mode": "NULLABLE"},
        {"name": "op", "type": "STRING", "mode": "NULLABLE"}
    ]))
    .unwrap();
    create_with(s, &t, &with_op).await;
    (topic, t)
}

/// Produce (key, value) records in order to partition 0; a None value is a tombstone.
async fn produce_keyed<K: AsRef<str>>(s: &Stack, topic: &str, records: &[(K, Option<String>)]) {
    use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
    let p: FutureProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", &s.kafka).create().unwrap();
    for (k, v) in records {
        let mut r = FutureRecord::<str, str>::to(topic).key(k.as_ref()).partition(0);
        if let Some(v) = v {
            r = r.payload(v);
        }
        p.send(r, CALL_LIMIT).await.map_err(|(e, _)| e).unwrap();
    }
    p.flush(CALL_LIMIT).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_change_type_comes_from_a_column_or_a_tombstone_deletes_by_key() {
    let s = stack();
    let (topic, t) = op_table(&s, "cdc_field").await;
    let records: Vec<(&str, Option<String>)> = vec![
        ("1", Some(json!({"id": 1, "version": 1, "op": "UPSERT"}).to_string())),
        ("2", Some(json!({"id": 2, "version": 1, "op": "upsert"}).to_string())),
        ("3", Some(json!({"id": 3, "version": 1}).to_string())),
        ("4", Some(json!({"id": 4, "version": 1, "op": "UPSERT"}).to_string())),
        ("2", Some(json!({"id": 2, "version": 2, "op": "DELETE"}).to_string())),
        // A tombstone: the key names the row, and there is no value.
        (r#"{"id": 4}"#, None),
        // An empty value is not a tombstone (Kafka's tombstone is a null value): a bad
        // record, and row 1 stays.
        (r#"{"id": 1}"#, Some(String::new())),
        ("5", Some(json!({"id": 5, "version": 1, "op": "MERGE"}).to_string())),
    ];
    produce_keyed(&s, &topic, &records).await;
    let dlq = TableRef { table: format!("{topic}_dlq"), ..t.clone() };
    let params = format!(
        "readBootstrapServerAndTopic={};{topic},messageFormat=JSON,outputTableSpec={t},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,cdcPrimaryKey=id,cdcChangeTypeField=op,useBigQueryDLQ=true,outputDeadletterTable={dlq}",
        s.kafka
    );
    let dir = tempfile::tempdir().unwrap();
    let o = run_job("cdc-field", &dir.path().join("ck"), &params, "20s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    // 1 and 2 upserted (the value's case does not matter), 2 deleted by its column;
    // 3's null op is refused (the column is where the change type is, and it says
    // nothing); 4 deleted by its tombstone; the empty value refused; 5's MERGE refused.
    assert_eq!(state(&s, &t).await, BTreeMap::from([(1, 1)]));
    let dead = s
        .rows(&format!(
            "SELECT errorMessage FROM `{}.{}.{}` ORDER BY errorMessage",
            dlq.project, dlq.dataset, dlq.table
        ))
        .await;
    let msgs: Vec<String> = dead.into_iter().map(|r| r[0].clone().unwrap_or_default()).collect();
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    assert!(msgs.iter().any(|m| m.contains("Failed to serialize json")), "the empty value: {msgs:?}");
    assert!(msgs.iter().any(|m| m.contains("cdcChangeTypeField op is null")), "{msgs:?}");
    assert!(msgs.iter().any(|m| m.contains("cdcChangeTypeField op is \"MERGE\"")), "{msgs:?}");
}

/// `dlq replay` of a CDC job: the dead letters go back as changes through the `_default`
/// stream with their own sequence numbers, so a fixed change that is older than one
/// applied since loses, a fixed change that is the key's latest lands, and a second
/// replay changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cdc_jobs_dead_letters_replay_as_changes_and_a_stale_one_loses_to_a_newer_change() {
    let s = stack();
    let topic = unique("cdc_replay");
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    let t = TableRef { project: PROJECT.into(), dataset: "cdc".into(), table: topic.clone() };
    create(&s, &t, true).await;
    let dlq = TableRef { table: format!("{topic}_dlq"), ..t.clone() };
    // Offsets 0 and 2 are dead letters (a version that is not a number); offset 1 is a
    // newer change of key 1.
    let values: Vec<Vec<u8>> =
        [r#"{"id": 1, "version": "x"}"#, r#"{"id": 1, "version": 2}"#, r#"{"id": 2, "version": "y"}"#]
            .iter()
            .map(|v| v.as_bytes().to_vec())
            .collect();
    produce_values(&s, &topic, &values).await;
    let params = format!(
        "readBootstrapServerAndTopic={};{topic},messageFormat=JSON,outputTableSpec={t},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,cdcPrimaryKey=id,useBigQueryDLQ=true,outputDeadletterTable={dlq}",
        s.kafka
    );
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let job = unique("cdcr");
    let o = run_job(&job, &ck, &params, "3s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(state(&s, &t).await, BTreeMap::from([(1, 2)]));
    let js = dir.path().join("fix.js");
    std::fs::write(
        &js,
        "function fix(s) { var o = JSON.parse(s); if (typeof o.version === 'string') o.version = o.id * 10; return JSON.stringify(o); }",
    )
    .unwrap();
    let p = format!("javascriptTextTransformGcsPath={},javascriptTextTransformFunctionName=fix", js.display());
    let replay =
        || flexrun(&["dlq", "replay", "--job", &job, "--checkpoint-dir", ck.to_str().unwrap(), "--parameters", &p]);
    let o = replay().bounded();
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("replayed into the table: 2"), "{}", text(&o));
    // Key 1's fixed change (offset 0) is older than the change applied since (offset 1):
    // it loses. Key 2's is its latest: it lands.
    assert_eq!(state(&s, &t).await, BTreeMap::from([(1, 2), (2, 20)]));
    let o = replay().bounded();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(out.contains("already replayed (skipped): 2") && out.contains("replayed into the table: 0"), "{out}");
    assert_eq!(state(&s, &t).await, BTreeMap::from([(1, 2), (2, 20)]));
}

/// Issue 62, item 3 (issue 49 item 9 had them skipped and only counted): with
/// `cdcSequenceField`, a flat row's tombstone whose key holds only the primary key cannot
/// be ordered against the key's other changes. Skipped, a delete that only a tombstone
/// carries (Debezium's flattening under `delete.tombstone.handling.mode=tombstone`) was
/// lost with exit 0; now it goes to the dead-letter table with the reason, as does the
/// tombstone after a delete event. A tombstone whose key carries the sequence deletes,
/// and so does one whose key Kafka Connect's JsonConverter wrapped in `{"schema",
/// "payload"}`. A change whose primary key is null is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_without_the_sequence_in_its_key_is_dead_lettered_with_the_reason() {
    let s = stack();
    let (topic, t) = op_table(&s, "cdc_tomb").await;
    let wrapped = json!({"schema": {"type": "struct", "fields": [{"field": "id", "type": "int64"}, {"field": "version", "type": "int64"}]}, "payload": {"id": 3, "version": 2}});
    let records: Vec<(String, Option<String>)> = vec![
        ("1".into(), Some(json!({"id": 1, "version": 5, "op": "UPSERT"}).to_string())),
        ("2".into(), Some(json!({"id": 2, "version": 3, "op": "UPSERT"}).to_string())),
        ("3".into(), Some(json!({"id": 3, "version": 1, "op": "UPSERT"}).to_string())),
        ("4".into(), Some(json!({"id": 4, "version": 1, "op": "UPSERT"}).to_string())),
        // Debezium's pair: the delete event, then a tombstone keyed by the primary key.
        ("2".into(), Some(json!({"id": 2, "version": 4, "op": "DELETE"}).to_string())),
        (json!({"id": 2}).to_string(), None),
        // A delete that only a tombstone carries: it cannot be ordered.
        (json!({"id": 4}).to_string(), None),
        // A tombstone that carries the sequence deletes on its own, wrapped or not.
        (json!({"id": 1, "version": 6}).to_string(), None),
        (wrapped.to_string(), None),
        // No primary key: names no row.
        ("5".into(), Some(json!({"id": null, "version": 1, "op": "UPSERT"}).to_string())),
    ];
    produce_keyed(&s, &topic, &records).await;
    let dlq = TableRef { table: format!("{topic}_dlq"), ..t.clone() };
    let params = format!(
        "readBootstrapServerAndTopic={};{topic},messageFormat=JSON,outputTableSpec={t},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,cdcPrimaryKey=id,cdcChangeTypeField=op,cdcSequenceField=version,useBigQueryDLQ=true,outputDeadletterTable={dlq}",
        s.kafka
    );
    let dir = tempfile::tempdir().unwrap();
    let sum = dir.path().join("summary.json");
    let o = run_job("cdc-tomb", &dir.path().join("ck"), &params, "20s", &["--summary-json", sum.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        state(&s, &t).await,
        BTreeMap::from([(4, 1)]),
        "2 deleted by its event, 1 and 3 by their tombstones; 4's tombstone could not be ordered"
    );
    let j = summary(&sum);
    assert_eq!(j["summary"]["cdc_skipped"], 0, "{j}");
    assert_eq!(j["summary"]["dead_lettered"], 3, "two unordered tombstones and the null key: {j}");
    let why = s
        .rows(&format!(
            "SELECT errorMessage FROM `{}.{}.{}` ORDER BY errorMessage",
            dlq.project, dlq.dataset, dlq.table
        ))
        .await;
    let why: Vec<String> = why.into_iter().map(|r| r[0].clone().unwrap_or_default()).collect();
    assert_eq!(
        why.iter().filter(|w| w.contains("which the key does not carry, so the DELETE cannot be ordered")).count(),
        2,
        "{why:?}"
    );
    // The table's id is REQUIRED, so the mapping already names it; a NULLABLE key column
    // is refused by the CDC check (`map::cdc`'s unit tests).
    assert!(why.iter().any(|w| w.contains("missing required field id")), "{why:?}");
}

/// Issue 49 item 3: a CDC job ordered by Kafka offset whose topic gains a partition
/// while it is down is refused at the restart (exit 2), naming cdcSequenceField,
/// before anything is read: keys may have moved between partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdc_by_offset_is_refused_after_partitions_are_added() {
    use rdkafka::admin::{AdminOptions, NewPartitions};
    let s = stack();
    let topic = unique("cdc_parts");
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    let t = TableRef { project: PROJECT.into(), dataset: "cdc".into(), table: topic.clone() };
    create(&s, &t, true).await;
    produce_values(&s, &topic, &[br#"{"id": 1, "version": 1}"#.to_vec()]).await;
    let params = format!(
        "readBootstrapServerAndTopic={};{topic},messageFormat=JSON,outputTableSpec={t},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,cdcPrimaryKey=id",
        s.kafka
    );
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let o = run_job("cdc-parts", &ck, &params, "20s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        flexrun::kafka::Connection::plaintext(&s.kafka).client("an admin client", &[]).unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(std::time::Duration::from_secs(30)));
    let r =
        answer("create partitions", admin.create_partitions(&[NewPartitions::new(&topic, 2)], &opts)).await.unwrap();
    r[0].as_ref().map_err(|e| format!("{e:?}")).expect("CreatePartitions");
    let o = run_job("cdc-parts", &ck, &params, "20s", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("partitions [1] were added") && text(&o).contains("Set cdcSequenceField"),
        "{}",
        text(&o)
    );
    let with_seq = format!("{params},cdcSequenceField=version");
    let o = run_job("cdc-parts", &ck, &with_seq, "20s", &[]);
    assert!(o.status.success(), "with a sequence field the job goes on: {}", text(&o));
}
