//! Debezium change streams as CDC (`cdcFormat=DEBEZIUM`), end to end on the broker and
//! the emulator: events shaped as Debezium's documentation shows them (PostgreSQL and
//! MySQL connectors), JSON with and without the schema/payload wrapper and Avro through
//! the registry, killed ten times, compared with a model of each key's final state.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::cdc::{create_with, schema, state};
use crate::common::*;
use flexrun::bigquery::TableRef;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A PostgreSQL connector's `source` block for a change at `lsn`, in a transaction
/// whose previous commit was at `commit` (Debezium's `sequence` is that pair).
fn pg_source(commit: u64, lsn: u64) -> Value {
    json!({"version": "2.7.0.Final", "connector": "postgresql", "name": "PostgreSQL_server",
        "ts_ms": 1_559_033_904_863_u64 + lsn, "snapshot": "false", "db": "postgres",
        "sequence": format!("[\"{commit}\",\"{lsn}\"]"), "schema": "public", "table": "customers",
        "txId": 555 + lsn, "lsn": lsn, "xmin": null})
}

/// One Debezium event: `op` c, u or d for key `id` at `version` (the row's column and
/// the source's LSN order alike), wrapped in `{"schema", "payload"}` when `wrapped`.
fn pg_event(op: &str, id: i64, version: i64, wrapped: bool) -> String {
    let row = json!({"id": id, "version": version, "note": format!("v{version}")});
    let (before, after) = match op {
        "d" => (json!({"id": id}), Value::Null),
        "c" => (Value::Null, row),
        _ => (json!({"id": id, "version": null, "note": null}), row),
    };
    let lsn = 1_000 + 100 * version as u64;
    let payload = json!({"before": before, "after": after, "source": pg_source(lsn - 50, lsn), "op": op,
        "ts_ms": 1_559_033_904_863_u64});
    if wrapped {
        json!({"schema": {"type": "struct", "name": "PostgreSQL_server.inventory.customers.Envelope", "optional": false},
            "payload": payload})
        .to_string()
    } else {
        payload.to_string()
    }
}

/// A change stream of `n` changes to `keys` keys, produced to two partitions so that a
/// key's changes alternate between them: only the source's LSN orders them. For about
/// half the keys the last two changes arrive in the wrong order. Each delete is followed
/// by its tombstone, and heartbeats sit between the changes. Returns each key's final
/// version (keys whose last change is a delete are absent) and the records produced.
async fn produce_stream(s: &Stack, topic: &str, n: i64, keys: i64, seed: u64) -> (BTreeMap<i64, i64>, usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut changes: Vec<(i64, i64, bool)> =
        (0..n).map(|version| (rng.random_range(0..keys), version, rng.random_bool(0.25))).collect();
    let mut at: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, (id, _, _)) in changes.iter().enumerate() {
        at.entry(*id).or_default().push(i);
    }
    for idx in at.values() {
        if idx.len() >= 2 && rng.random_bool(0.5) {
            changes.swap(idx[idx.len() - 2], idx[idx.len() - 1]);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut last: BTreeMap<i64, (i64, bool)> = BTreeMap::new();
    let mut records: Vec<(i32, String, Option<String>)> = Vec::new();
    for (id, version, delete) in changes {
        if last.get(&id).is_none_or(|(v, _)| *v < version) {
            last.insert(id, (version, delete));
        }
        let p = ((id + version) % 2) as i32;
        let op = if delete {
            "d"
        } else if seen.insert(id) {
            "c"
        } else {
            "u"
        };
        let key = json!({"id": id}).to_string();
        records.push((p, key.clone(), Some(pg_event(op, id, version, version % 2 == 0))));
        if delete {
            records.push((p, key, None));
        }
        if version % 97 == 0 {
            records.push((
                p,
                json!({"serverName": "PostgreSQL_server"}).to_string(),
                Some(json!({"ts_ms": version}).to_string()),
            ));
        }
    }
    produce_to(s, topic, &records).await;
    let want = last.into_iter().filter(|(_, (_, d))| !d).map(|(k, (v, _))| (k, v)).collect();
    (want, records.len())
}

/// Produce (partition, key, value) records in order; a None value is a tombstone.
async fn produce_to(s: &Stack, topic: &str, records: &[(i32, String, Option<String>)]) {
    use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
    let p: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &s.kafka)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let mut inflight = Vec::new();
    for (part, k, v) in records {
        let mut r = FutureRecord::<str, str>::to(topic).key(k).partition(*part);
        if let Some(v) = v {
            r = r.payload(v);
        }
        inflight.push(p.send_result(r).map_err(|(e, _)| e).unwrap());
    }
    for f in inflight {
        f.await.unwrap().map_err(|(e, _)| e).unwrap();
    }
    p.flush(CALL_LIMIT).unwrap();
}

/// A two-partition topic and its CDC table (id, version, note) keyed by `id`.
async fn topic_and_table(s: &Stack, name: &str, partitions: i32) -> (String, TableRef) {
    let topic = unique(name);
    flexrun::kafka::create_topic(&s.kafka, &topic, partitions).await.unwrap();
    let t = TableRef { project: PROJECT.into(), dataset: "cdc".into(), table: topic.clone() };
    create_with(s, &t, &schema()).await;
    (topic, t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debezium_stream_killed_ten_times_ends_in_each_keys_exact_final_state() {
    let s = stack();
    let seed = test_seed("debezium kills");
    let (topic, t) = topic_and_table(&s, "dbz_kill", 2).await;
    let (want, produced) = produce_stream(&s, &topic, 1_500, 120, seed).await;
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let params = format!(
        "readBootstrapServerAndTopic={};{topic},messageFormat=JSON,outputTableSpec={t},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,cdcPrimaryKey=id,cdcFormat=DEBEZIUM",
        s.kafka
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0xDB2);
    for kill in 0..10 {
        let skip = rng.random_range(0..3);
        let o = job_cmd("dbz-kill", &ck, &params, "20s", &["--batch-rows", "40"])
            .env("FAILPOINTS", format!("eo::before_commit_log={skip}*off->return"))
            .bounded();
        assert!(
            !o.status.success() && text(&o).contains("crash point eo::before_commit_log reached"),
            "kill {kill}: {}",
            text(&o)
        );
    }
    let sum = dir.path().join("summary.json");
    let o = run_job("dbz-kill", &ck, &params, "20s", &["--batch-rows", "40", "--summary-json", sum.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(state(&s, &t).await, want, "each key's final state, after 10 SIGKILLs");
    let applied = fault_stats(&t)["cdc_changes"].as_u64().unwrap_or(0);
    assert!(applied > 1_500, "changes received {applied}: the killed batches were not sent again?");
    assert_eq!(summary(&sum)["summary"]["dead_lettered"], 0, "{}", text(&o));
    assert!(produced > 1_500 + 300, "tombstones and heartbeats were produced too: {produced}");
}

/// Debezium's MySQL connector's events as its documentation shows them, with the
/// records that are no change around them.
fn mysql_event(op: &str, id: i64, version: i64, pos: u64) -> String {
    let row = json!({"id": id, "version": version, "note": "m"});
    let (before, after) = if op == "d" { (row, Value::Null) } else { (Value::Null, row) };
    json!({"before": before, "after": after, "op": op, "ts_ms": 1_465_491_411_815_u64,
        "source": {"version": "2.7.0.Final", "connector": "mysql", "name": "mysql-server-1", "ts_ms": 0,
            "snapshot": "false", "db": "inventory", "table": "customers", "server_id": 0, "gtid": null,
            "file": "mysql-bin.000003", "pos": pos, "row": 0, "thread": null, "query": null}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_that_are_no_change_are_skipped_and_counted_and_a_truncate_is_a_dead_letter() {
    let s = stack();
    let (topic, t) = topic_and_table(&s, "dbz_kinds", 1).await;
    let k = |id: i64| json!({"id": id}).to_string();
    let records: Vec<(i32, String, Option<String>)> = vec![
        (0, k(1), Some(mysql_event("c", 1, 1, 154))),
        (0, k(2), Some(mysql_event("c", 2, 1, 300))),
        (0, k(1), Some(mysql_event("u", 1, 2, 480))),
        (0, k(2), Some(mysql_event("d", 2, 1, 570))),
        (0, k(2), None),
        (0, json!({"serverName": "mysql-server-1"}).to_string(), Some(json!({"ts_ms": 1}).to_string())),
        (0, json!({"databaseName": "inventory"}).to_string(), Some(json!({"source": {"connector": "mysql", "file": "mysql-bin.000003", "pos": 600, "row": 0}, "databaseName": "inventory", "schemaName": null, "ddl": "ALTER TABLE customers ADD middle_name varchar(255) AFTER first_name", "tableChanges": []}).to_string())),
        (0, json!({"id": "571:53195829"}).to_string(), Some(json!({"status": "BEGIN", "id": "571:53195829", "ts_ms": 1, "event_count": null, "data_collections": null}).to_string())),
        (0, String::new(), Some(json!({"op": "t", "source": {"connector": "mysql", "file": "mysql-bin.000003", "pos": 700, "row": 0}}).to_string())),
        (0, k(3), Some(r#"{"id": 3, "version": 1}"#.to_string())),
        // An older change that arrives last: its binlog position says it lost.
        (0, k(1), Some(mysql_event("u", 1, 0, 200))),
    ];
    produce_to(&s, &topic, &records).await;
    let dlq = TableRef { table: format!("{topic}_dlq"), ..t.clone() };
    let params = format!(
        "readBootstrapServerAndTopic={};{topic},messageFormat=JSON,outputTableSpec={t},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,cdcPrimaryKey=id,cdcFormat=DEBEZIUM,useBigQueryDLQ=true,outputDeadletterTable={dlq}",
        s.kafka
    );
    let dir = tempfile::tempdir().unwrap();
    let sum = dir.path().join("summary.json");
    let o = run_job("dbz-kinds", &dir.path().join("ck"), &params, "20s", &["--summary-json", sum.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(state(&s, &t).await, BTreeMap::from([(1, 2)]), "2 deleted; 1's older change lost");
    let j = summary(&sum);
    assert_eq!(j["summary"]["cdc_skipped"], 4, "tombstone, heartbeat, schema change, transaction: {j}");
    assert_eq!(j["summary"]["dead_lettered"], 2, "the truncate and the flat row: {j}");
    let why = s.rows(&format!("SELECT errorMessage FROM `{}.{}.{}`", dlq.project, dlq.dataset, dlq.table)).await;
    let why: Vec<String> = why.into_iter().map(|r| r[0].clone().unwrap_or_default()).collect();
    assert!(why.iter().any(|w| w.contains("truncate")), "{why:?}");
    assert!(why.iter().any(|w| w.contains("no op field")), "{why:?}");
}

const ENVELOPE: &str = r#"{"type":"record","name":"Envelope","namespace":"dbserver1.inventory.customers","fields":[
 {"name":"before","type":["null",{"type":"record","name":"Value","fields":[{"name":"id","type":"long"},{"name":"version","type":["null","long"],"default":null},{"name":"note","type":["null","string"],"default":null}]}],"default":null},
 {"name":"after","type":["null","Value"],"default":null},
 {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[{"name":"version","type":"string"},{"name":"connector","type":"string"},{"name":"name","type":"string"},{"name":"ts_ms","type":"long"},{"name":"snapshot","type":["string","null"],"default":"false"},{"name":"db","type":"string"},{"name":"sequence","type":["null","string"],"default":null},{"name":"schema","type":"string"},{"name":"table","type":"string"},{"name":"txId","type":["null","long"],"default":null},{"name":"lsn","type":["null","long"],"default":null},{"name":"xmin","type":["null","long"],"default":null}]}},
 {"name":"op","type":"string"},
 {"name":"ts_ms","type":["null","long"],"default":null}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_avro_through_the_registry_creates_its_table_from_after_and_applies_changes() {
    let s = stack();
    let registry = std::env::var("FLEXRUN_SCHEMA_REGISTRY").expect("FLEXRUN_SCHEMA_REGISTRY: run with scripts/test.sh");
    let topic = unique("dbz_avro");
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    let id =
        flexrun::avro::registry::Registry::new(&registry).register(&format!("{topic}-value"), ENVELOPE).await.unwrap();
    let w = flexrun::avro::WriterSchema::parse(ENVELOPE).unwrap();
    let frame = |event: &str| -> Vec<u8> {
        let j: Value = serde_json::from_str(event).unwrap();
        let v = flexrun::avro::from_json::to_avro(&w, &j).unwrap();
        let mut out = Vec::new();
        flexrun::avro::wire::confluent_frame(id, &apache_avro::to_avro_datum(&w.schema, v).unwrap(), &mut out);
        out
    };
    let full_before = |op: &str, id: i64, v: i64| {
        let mut e: Value = serde_json::from_str(&pg_event(op, id, v, false)).unwrap();
        if op == "d" {
            e["before"] = json!({"id": id, "version": null, "note": null});
        }
        e.to_string()
    };
    let values: Vec<Vec<u8>> = [("c", 1, 1), ("c", 2, 2), ("u", 1, 3), ("c", 3, 4), ("d", 2, 5), ("u", 3, 0)]
        .iter()
        .map(|(op, id, v)| frame(&full_before(op, *id, *v)))
        .collect();
    produce_values(&s, &topic, &values).await;
    // The registry's path writes per-record tables: the envelope's record names the table.
    let prefix = unique("dbz");
    let name = flexrun::avro::table::dynamic_table_name(&prefix, Some("dbserver1.inventory.customers"), "Envelope");
    let t = TableRef { project: PROJECT.into(), dataset: "cdc".into(), table: name };
    let params = format!(
        "readBootstrapServerAndTopic={};{topic},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=AVRO_CONFLUENT_WIRE_FORMAT,schemaFormat=SCHEMA_REGISTRY,schemaRegistryConnectionUrl={registry},outputProject={PROJECT},outputDataset=cdc,bqTableNamePrefix={prefix},createDisposition=CREATE_IF_NEEDED,cdcPrimaryKey=id,cdcFormat=DEBEZIUM",
        s.kafka
    );
    let dir = tempfile::tempdir().unwrap();
    let o = run_job("dbz-avro", &dir.path().join("ck"), &params, "20s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(state(&s, &t).await, BTreeMap::from([(1, 3), (3, 4)]), "2 deleted; 3's older update (LSN) lost");
}

#[test]
fn debezium_parameters_that_cannot_apply_exit_2_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let base = "readBootstrapServerAndTopic=localhost:1;t,messageFormat=JSON,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE,cdcPrimaryKey=id";
    for (extra, names) in [
        (",cdcFormat=XML", "cdcFormat"),
        (",cdcFormat=DEBEZIUM,cdcSequenceField=version", "cdcSequenceField cannot go with cdcFormat=DEBEZIUM"),
        (",cdcFormat=DEBEZIUM,cdcChangeTypeHeader=op", "cdcChangeTypeHeader cannot go with cdcFormat=DEBEZIUM"),
    ] {
        let o = run_job("dbz-bad", &dir.path().join("ck"), &format!("{base}{extra}"), "20s", &[]);
        assert_eq!(o.status.code(), Some(2), "{extra}: {}", text(&o));
        assert!(text(&o).contains(names), "{extra}: {}", text(&o));
    }
    let no_key = "readBootstrapServerAndTopic=localhost:1;t,messageFormat=JSON,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE,cdcFormat=DEBEZIUM";
    let o = run_job("dbz-bad", &dir.path().join("ck"), no_key, "20s", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("cdcFormat=DEBEZIUM needs cdcPrimaryKey"), "{}", text(&o));
}
