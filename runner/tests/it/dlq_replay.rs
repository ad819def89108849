//! `flexrun dlq replay` end to end: a job dead-letters records, a replay with a fixed
//! UDF lands them in the table exactly once across a SIGKILL between the table's and
//! the ledger's appends, and a second replay lands nothing twice.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use flexrun::bigquery::TableRef;

/// The fix a user would write after reading the dead-letter table: string ids
/// become numbers, records flagged `drop` are dropped, and anything else passes as
/// it was (so `[n]` still is not an object and keeps failing).
const FIX: &str = r#"
function fix(inJson) {
  var o = JSON.parse(inJson);
  if (o.drop === true) return null;
  if (typeof o.id === 'string') o.id = parseInt(o.id.substring(3), 10);
  return JSON.stringify(o);
}
"#;

/// 30 good records, 12 with a string id, 3 flagged `drop` (an unknown field), 6
/// that are not objects: interleaved, on one partition.
fn values() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for i in 0..30u64 {
        v.push(format!(r#"{{"id": {i}, "message": "ok"}}"#).into_bytes());
        if i % 5 == 0 {
            v.push(format!("[{i}]").into_bytes());
        }
        if i < 12 {
            v.push(format!(r#"{{"id": "id-{}"}}"#, 1000 + i).into_bytes());
        }
        if i < 3 {
            v.push(format!(r#"{{"id": {}, "drop": true}}"#, 2000 + i).into_bytes());
        }
    }
    v
}

fn fq(t: &TableRef) -> String {
    format!("`{}.{}.{}`", t.project, t.dataset, t.table)
}

fn replay(job: &str, ck: &std::path::Path, js: &std::path::Path, extra: &[&str]) -> std::process::Command {
    let p = format!("javascriptTextTransformGcsPath={},javascriptTextTransformFunctionName=fix", js.display());
    let mut args = vec!["dlq", "replay", "--job", job, "--checkpoint-dir", ck.to_str().unwrap(), "--parameters", &p];
    args.extend_from_slice(extra);
    flexrun(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_killed_between_table_and_ledger_lands_each_row_once_and_a_second_replay_lands_none() {
    let s = stack();
    let f = s.fixture("dlqreplay", 1).await;
    produce_values(&s, &f.topic, &values()).await;
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let job = unique("dlqr");
    let params = f.params(&s, &format!("useBigQueryDLQ=true,outputDeadletterTable={}", f.dlq));
    let o = run_job(&job, &ck, &params, "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&f.table).await, (30, 30));
    let dead = s.rows(&format!("SELECT COUNT(*) FROM {}", fq(&f.dlq))).await;
    assert_eq!(dead[0][0].as_deref(), Some("21"), "12 string ids + 3 unknown fields + 6 arrays");

    let js = dir.path().join("fix.js");
    std::fs::write(&js, FIX).unwrap();
    // A dry run writes nothing and says what would happen.
    let o = replay(&job, &ck, &js, &["--dry-run"]).bounded();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        out.contains("would replay into the table: 12")
            && out.contains("still failing (left in the dead-letter table): 6"),
        "{out}"
    );
    assert_eq!(s.count(&f.table).await, (30, 30));

    // A condition BigQuery refuses is a bad flag: exit 2, naming it; nothing is written
    // and no plan is left for the next run to finish.
    let o = replay(&job, &ck, &js, &["--where", "errorMessage LIKE AND"]).bounded();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--where \"errorMessage LIKE AND\": BigQuery refused the condition"), "{}", text(&o));
    assert_eq!(s.count(&f.table).await, (30, 30));

    // Killed in batch 2 after its rows landed in the table, before the ledger append.
    let o = replay(&job, &ck, &js, &["--batch-rows", "4"])
        .env("FAILPOINTS", "replay::between_tables=1*off->return")
        .bounded();
    assert!(!o.status.success() && text(&o).contains("crash point replay::between_tables reached"), "{}", text(&o));
    let (rows, _) = s.count(&f.table).await;
    assert!(rows > 30, "batch 1, and batch 2's table rows, landed before the kill: {rows}");

    let o = replay(&job, &ck, &js, &["--batch-rows", "4"]).bounded();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    // The recovery path ran: the plan was resumed and the logged batch sent again,
    // its table request answered ALREADY_EXISTS.
    assert!(out.contains("finished the replay an earlier run left unfinished"), "{out}");
    assert!(
        out.contains("batch 2 was logged before a crash and sent again (1 request(s) answered ALREADY_EXISTS)"),
        "{out}"
    );
    assert_eq!(s.count(&f.table).await, (42, 42), "30 good + 12 fixed, each once");
    let fixed = s.rows(&format!("SELECT COUNT(*) FROM {} WHERE id >= 1000 AND id < 1012", fq(&f.table))).await;
    assert_eq!(fixed[0][0].as_deref(), Some("12"));
    let ledger = TableRef { table: format!("{}_replayed", f.dlq.table), ..f.dlq.clone() };
    let marks = s
        .rows(&format!("SELECT outcome, COUNT(DISTINCT rowKey) FROM {} GROUP BY outcome ORDER BY outcome", fq(&ledger)))
        .await;
    assert_eq!(
        marks,
        vec![vec![Some("DROPPED_BY_UDF".into()), Some("3".into())], vec![Some("WRITTEN".into()), Some("12".into())]]
    );

    // A second replay skips what the ledger names and lands nothing.
    let o = replay(&job, &ck, &js, &[]).bounded();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(out.contains("already replayed (skipped): 15") && out.contains("replayed into the table: 0"), "{out}");
    assert!(
        out.contains("still failing (left in the dead-letter table): 6") && out.contains("expected a JSON object"),
        "{out}"
    );
    assert_eq!(s.count(&f.table).await, (42, 42));
    let total = s.rows(&format!("SELECT COUNT(*) FROM {}", fq(&ledger))).await;
    assert_eq!(total[0][0].as_deref(), Some("15"), "no ledger row twice");
}

#[tokio::test]
async fn a_replay_without_a_job_or_a_dead_letter_table_exits_2_naming_what_is_missing() {
    let s = stack();
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().to_str().unwrap();
    let o = flexrun(&["dlq", "replay", "--job", "no-such-job", "--checkpoint-dir", ck]).bounded();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no job \"no-such-job\""), "{}", text(&o));
    let p = format!(
        "readBootstrapServerAndTopic={};t,messageFormat=JSON,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE",
        s.kafka
    );
    let o = flexrun(&["dlq", "replay", "--job", "x", "--checkpoint-dir", ck, "--parameters", &p]).bounded();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no outputDeadletterTable"), "{}", text(&o));
}

/// Issue 49 item 7: a job of two topics, one routed through `topicTableMap`, with a
/// dead-letter table per topic: the replay sends each topic's dead letters to that
/// topic's own table, and a second replay lands nothing. (Before, it replayed the raw
/// `{topic}` names.) With one dead-letter table for two topics whose tables differ,
/// each topic's rows still reach their own table: every row names its topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_a_job_of_several_topics_sends_each_topics_rows_to_its_own_table() {
    let s = stack();
    let p = unique("dlqt");
    let (a, b) = (format!("{p}_a"), format!("{p}_b"));
    let table = |n: &str| TableRef { project: PROJECT.into(), dataset: "it".into(), table: n.to_string() };
    let (ta, tb) = (table(&a), table(&format!("{p}_mapped")));
    let c = flexrun::bigquery::rest::client(&s.bq).await.unwrap();
    for (topic, t) in [(&a, &ta), (&b, &tb)] {
        flexrun::kafka::create_topic(&s.kafka, topic, 1).await.unwrap();
        answer("table", flexrun::bigquery::rest::ensure_table(&c, &s.bq, t, &flexrun::local::demo_schema()))
            .await
            .unwrap();
        produce_values(&s, topic, &values()).await;
    }
    let base = format!(
        "readBootstrapServerAndTopic={};{a}|{b},messageFormat=JSON,kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,outputTableSpec={PROJECT}:it.{{topic}},topicTableMap={b}:{p}_mapped",
        s.kafka
    );
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let params = format!("{base},useBigQueryDLQ=true,outputDeadletterTable={PROJECT}:it.{{topic}}_dlq");
    let o = run_job(&p, &ck, &params, "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!((s.count(&ta).await, s.count(&tb).await), ((30, 30), (30, 30)));
    let js = dir.path().join("fix.js");
    std::fs::write(&js, FIX).unwrap();
    for round in 0..2 {
        let o = replay(&p, &ck, &js, &[]).bounded();
        assert!(o.status.success(), "{}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        let landed = if round == 0 { 12 } else { 0 };
        assert_eq!(out.matches(&format!("replayed into the table: {landed}\n")).count(), 2, "round {round}: {out}");
        assert_eq!((s.count(&ta).await, s.count(&tb).await), ((42, 42), (42, 42)), "round {round}");
    }
    // One dead-letter table for both topics, whose tables differ: every row names its
    // topic (issue 62), so each topic's rows still reach their own table.
    let (c2, d2) = (table(&format!("{p}_c")), table(&format!("{p}_d")));
    let (tc, td) = (format!("{p}_c"), format!("{p}_d"));
    for (topic, t) in [(&tc, &c2), (&td, &d2)] {
        flexrun::kafka::create_topic(&s.kafka, topic, 1).await.unwrap();
        answer("table", flexrun::bigquery::rest::ensure_table(&c, &s.bq, t, &flexrun::local::demo_schema()))
            .await
            .unwrap();
        produce_values(&s, topic, &values()).await;
    }
    let shared = format!(
        "readBootstrapServerAndTopic={};{tc}|{td},messageFormat=JSON,kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,outputTableSpec={PROJECT}:it.{{topic}},useBigQueryDLQ=true,outputDeadletterTable={PROJECT}:it.{p}_shared_dlq",
        s.kafka
    );
    let jobs = dir.path().join("ck2");
    let o = run_job(&format!("{p}s"), &jobs, &shared, "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let o = replay(&format!("{p}s"), &jobs, &js, &[]).bounded();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(out.matches("replayed into the table: 12\n").count(), 2, "{out}");
    assert_eq!(out.matches("of this job's other topics: 21").count(), 2, "{out}");
    assert_eq!((s.count(&c2).await, s.count(&d2).await), ((42, 42), (42, 42)));
}

/// Issue 62, item 2, as reproduced: jobs A (topic a → TA) and B (topic b → TB) share one
/// dead-letter table, as teams often do, and each dead-letters its bad records. Before
/// dead letters named their job, `dlq replay --job A` wrote both jobs' fixed rows into
/// TA and B's replay then wrote nothing into TB, both with exit 0. Now every row names
/// its job and topic (`attributes`): each replay takes its own job's rows only, and a
/// row that names no job (Google's template writes none) is left alone unless `--topic`
/// picks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_jobs_sharing_a_dead_letter_table_replay_only_their_own_rows() {
    let s = stack();
    let (a, b) = (s.fixture("dlqsha", 1).await, s.fixture("dlqshb", 1).await);
    let shared = TableRef { table: unique("dlqshared"), ..a.dlq.clone() };
    let values_from = |base: u64| -> Vec<Vec<u8>> {
        (0..20u64)
            .map(|i| match i % 2 {
                0 => format!(r#"{{"id": {}}}"#, base + i).into_bytes(),
                _ => format!(r#"{{"id": "id-{}"}}"#, base + i).into_bytes(),
            })
            .collect()
    };
    produce_values(&s, &a.topic, &values_from(1000)).await;
    produce_values(&s, &b.topic, &values_from(2000)).await;
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let (ja, jb) = (unique("dlqja"), unique("dlqjb"));
    let dlq = format!("useBigQueryDLQ=true,outputDeadletterTable={shared}");
    for (job, f) in [(&ja, &a), (&jb, &b)] {
        let o = run_job(job, &ck, &f.params(&s, &dlq), "2s", &[]);
        assert!(o.status.success(), "{}", text(&o));
    }
    assert_eq!((s.count(&a.table).await, s.count(&b.table).await), ((10, 10), (10, 10)));
    let job_rows = s
        .rows(&format!(
            "SELECT a.value, COUNT(*) FROM {}, UNNEST(attributes) AS a WHERE a.key = 'job' GROUP BY a.value ORDER BY a.value",
            fq(&shared)
        ))
        .await;
    let mut want = vec![vec![Some(ja.clone()), Some("10".into())], vec![Some(jb.clone()), Some("10".into())]];
    want.sort();
    assert_eq!(job_rows, want, "every dead-letter row names its job");
    let js = dir.path().join("fix.js");
    std::fs::write(&js, FIX).unwrap();
    let o = replay(&ja, &ck, &js, &[]).bounded();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(out.contains("replayed into the table: 10") && out.contains("rows of other jobs left alone: 10"), "{out}");
    assert_eq!((s.count(&a.table).await, s.count(&b.table).await), ((20, 20), (10, 10)), "A's rows only, into TA");
    let o = replay(&jb, &ck, &js, &[]).bounded();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!((s.count(&a.table).await, s.count(&b.table).await), ((20, 20), (20, 20)), "B's rows, into TB");
    let ids = s.rows(&format!("SELECT MIN(id), MAX(id) FROM {}", fq(&b.table))).await;
    assert_eq!(ids, vec![vec![Some("2000".into()), Some("2019".into())]], "no record of A's in TB");

    // A row that names no job, as Google's template writes them: left alone, and taken
    // only when --topic names its topic.
    let rec = flexrun::kafka_to_bq::map::dlq::RecordRef {
        topic: &a.topic,
        partition: 0,
        offset: 99,
        timestamp_ms: 1_700_000_000_000,
        timestamp_type: flexrun::kafka_to_bq::map::dlq::TimestampType::CreateTime,
        key: None,
        value: br#"{"id": "id-1099"}"#,
        headers: &[],
        processed_ms: Some(1_700_000_000_000),
        payload: flexrun::kafka_to_bq::map::dlq::Payload::Text,
        origin: Default::default(),
    };
    let mut row = Vec::new();
    flexrun::kafka_to_bq::map::dlq::encode(&rec, "transform", "a row of Google's", &mut row);
    let w = flexrun::bigquery::write::WriteClient::connect(&s.bq).await.unwrap();
    let mut conn = w
        .open(
            &shared.default_stream(),
            flexrun::bigquery::proto::descriptor(&flexrun::kafka_to_bq::map::dlq::write_schema(), "DeadLetter"),
        )
        .await
        .unwrap();
    conn.append(&[row], None).await.unwrap();
    let o = replay(&ja, &ck, &js, &[]).bounded();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(out.contains("rows that name no job, left alone: 1 (--topic TOPIC"), "{out}");
    assert_eq!(s.count(&a.table).await, (20, 20));
    let o = replay(&ja, &ck, &js, &["--topic", &a.topic]).bounded();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&a.table).await, (21, 21), "picked by --topic, fixed, written once");
}
