//! Several topics in one job end to end: three topics routed to three tables (one
//! through `topicTableMap`) and three dead-letter tables, exactly once across a kill; and
//! a topic pattern that picks up a topic created while the job runs.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use flexrun::bigquery::{rest, TableRef};
use flexrun::local;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

fn table(name: &str) -> TableRef {
    TableRef { project: PROJECT.into(), dataset: "multi".into(), table: name.into() }
}

/// A topic and, for the JSON path, its table (the demo schema).
async fn topic_and_table(s: &Stack, topic: &str, partitions: i32, table_name: &str) -> TableRef {
    flexrun::kafka::create_topic(&s.kafka, topic, partitions).await.unwrap();
    let t = table(table_name);
    let c = rest::client(&s.bq).await.unwrap();
    answer("create table", rest::ensure_table(&c, &s.bq, &t, &local::demo_schema())).await.unwrap();
    t
}

async fn produce(
    s: &Stack,
    topic: &str,
    partitions: i32,
    start: u64,
    n: u64,
    bad_every: Option<u64>,
) -> local::Produced {
    answer("produce", local::produce(&s.kafka, topic, partitions, start, n, bad_every, 200)).await.unwrap()
}

async fn rows_of(s: &Stack, t: &TableRef) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM `{}.{}.{}`", t.project, t.dataset, t.table);
    s.rows(&sql).await[0][0].as_deref().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_topics_are_routed_to_three_tables_exactly_once_across_a_kill() {
    let s = stack();
    let p = unique("three");
    let (a, b, c) = (format!("{p}_a"), format!("{p}_b"), format!("{p}.c"));
    let ta = topic_and_table(&s, &a, 2, &a).await;
    let tb = topic_and_table(&s, &b, 1, &b).await;
    // Topic c goes to a table of another name, through topicTableMap.
    let tc = topic_and_table(&s, &c, 2, &format!("{p}_renamed")).await;
    let mut made = Vec::new();
    for (topic, parts, n) in [(&a, 2, 900), (&b, 1, 500), (&c, 2, 700)] {
        made.push(produce(&s, topic, parts, 0, n, Some(40)).await);
    }
    let params = format!(
        "readBootstrapServerAndTopic={};{a}|{b}|{c},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=JSON,outputTableSpec={PROJECT}:multi.{{topic}},outputDeadletterTable={PROJECT}:multi.{{topic}}_dlq,topicTableMap={c}:{p}_renamed",
        s.kafka
    );
    let ck = tempfile::tempdir().unwrap();
    let extra = ["--batch-rows", "100"];
    // Killed when some pipeline is about to commit its third batch: the others are mid-run too.
    let crash = job_cmd("three", ck.path(), &params, "2s", &extra)
        .env("FAILPOINTS", "eo::before_commit_log=2*off->return")
        .bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "{}", text(&crash));
    let sum = ck.path().join("summary.json");
    let o =
        run_job("three", ck.path(), &params, "2s", &[&extra[..], &["--summary-json", sum.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let j = summary(&sum);
    assert!(j["summary"]["replayed_batches"].as_u64() >= Some(1), "the killed pipeline's batch was replayed: {j}");
    let topics = j["topics"].as_object().unwrap();
    assert_eq!(topics.len(), 3, "{j}");
    assert_eq!(topics[&c]["table"], format!("{PROJECT}:multi.{p}_renamed"));
    for ((topic, t), made) in [(&a, &ta), (&b, &tb), (&c, &tc)].into_iter().zip(&made) {
        assert_eq!(s.count(t).await, (made.good as i64, made.good as i64), "{topic} → {t}");
        let dlq = table(&format!("{}_dlq", topic.replace('.', "_")));
        assert_eq!(rows_of(&s, &dlq).await, made.bad as i64, "{topic}'s dead letters in {dlq}");
        assert!(ck.path().join(format!("three.{topic}")).join("job.json").exists(), "{topic} has its own checkpoint");
    }
    let per_topic: u64 = topics.values().map(|t| t["summary"]["rows_written"].as_u64().unwrap()).sum();
    assert_eq!(j["summary"]["rows_written"].as_u64(), Some(per_topic), "the summary adds the topics up: {j}");
    let good: u64 = made.iter().map(|m| m.good).sum();
    assert!(per_topic < good, "the first run had written some before it was killed: {per_topic} of {good}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_pattern_picks_up_a_topic_created_while_the_job_runs() {
    let s = stack();
    let p = unique("pat");
    let (x, y) = (format!("{p}_x"), format!("{p}_y"));
    let tx = topic_and_table(&s, &x, 1, &x).await;
    produce(&s, &x, 1, 0, 300, None).await;
    // Another topic whose name the pattern does not match in full: never read.
    let other = format!("x{p}_z");
    flexrun::kafka::create_topic(&s.kafka, &other, 1).await.unwrap();
    produce(&s, &other, 1, 0, 10, None).await;
    let params = format!(
        "readBootstrapServerAndTopic={};/{p}_.*/,kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=JSON,outputTableSpec={PROJECT}:multi.{{topic}}",
        s.kafka
    );
    let ck = tempfile::tempdir().unwrap();
    let sum = ck.path().join("summary.json");
    let mut child = spawn_job("pat", ck.path(), &params, &["--summary-json", sum.to_str().unwrap()]);
    wait_for_rows(&s, &tx, 300, &mut child).await;
    let ty = topic_and_table(&s, &y, 2, &y).await;
    produce(&s, &y, 2, 1000, 400, None).await;
    wait_for_rows(&s, &ty, 400, &mut child).await;
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_with_timeout(child, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(s.count(&tx).await, (300, 300));
    assert_eq!(s.count(&ty).await, (400, 400));
    let j = summary(&sum);
    let topics: Vec<&String> = j["topics"].as_object().unwrap().keys().collect();
    assert_eq!(topics, [&x, &y], "{j}");
    assert!(!ck.path().join(format!("pat.{other}")).exists(), "a topic the pattern does not match is not read");
}

/// A job of two topics runs on one pool. The job autoscales as a whole: its summary holds
/// the job's decisions, and each topic's pipeline moves its shards to follow them. Its
/// page shows each topic's stages and backlog. Exactly-once holds per topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_topics_share_one_autoscaled_pool_and_one_page() {
    let s = stack();
    let p = unique("pool");
    let (a, b) = (format!("{p}_a"), format!("{p}_b"));
    let (ta, tb) = (topic_and_table(&s, &a, 2, &a).await, topic_and_table(&s, &b, 2, &b).await);
    // 6,000 messages at 100 per second a worker: DS2 wants the backlog drained in 60 s, so
    // the job's backlog (never one topic's alone, 3,000) asks for two workers at once.
    produce(&s, &a, 2, 0, 3_000, None).await;
    produce(&s, &b, 2, 10_000, 3_000, None).await;
    let params = format!(
        "readBootstrapServerAndTopic={};{a}|{b},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=JSON,outputTableSpec={PROJECT}:multi.{{topic}}",
        s.kafka
    );
    let ck = tempfile::tempdir().unwrap();
    let sum = ck.path().join("summary.json");
    let addr = free_addr();
    let scaling = [
        "--num-workers",
        "1",
        "--max-workers",
        "4",
        "--worker-capacity",
        "100msg/s",
        "--autoscaling-policy",
        "ds2",
        "--autoscaling-interval",
        "2s",
        "--batch-rows",
        "200",
    ];
    let mut args = vec!["--web", addr.as_str(), "--summary-json", sum.to_str().unwrap()];
    args.extend(scaling);
    let job = ["--template", "kafka-to-bq", "--job-name", "pool", "--checkpoint-dir", ck.path().to_str().unwrap()];
    let mut all: Vec<&str> = job.into_iter().chain(["--parameters", params.as_str()]).collect();
    all.extend(args);
    // The pool's own log lines say when a topic's pipeline follows the job's size.
    let mut child = flexrun(&all)
        .env("FLEXRUN_LOG", "warn,flexrun::kafka_to_bq::run::autoscale=info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The job's page: each topic with its stages and backlog (a topic's stages show in
    // a second in which one of its batches finished, so each topic is waited for alone).
    for t in [&a, &b] {
        let (job, point) =
            wait_for_point(&addr, "pool", |pt| pt["topics"][t.as_str()]["stages"]["end_to_end"].is_object());
        assert!(job.is_object(), "the job's page never showed topic {t}'s stages");
        let x = &point["topics"][t.as_str()];
        assert!(x["backlog_elements"].is_u64() && x["partition_backlog"].as_object().unwrap().len() == 2, "{x}");
        assert_eq!(x["job"], format!("pool.{t}"), "each topic keeps a page of its own");
    }
    wait_for_rows(&s, &ta, 3_000, &mut child).await;
    wait_for_rows(&s, &tb, 3_000, &mut child).await;
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_with_timeout(child, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(s.count(&ta).await, (3_000, 3_000));
    assert_eq!(s.count(&tb).await, (3_000, 3_000));
    let j = summary(&sum);
    let up = j["decisions"]
        .as_array()
        .expect("the job's own decisions")
        .iter()
        .any(|d| d["to"].as_u64() > d["from"].as_u64());
    let log = text(&o);
    let said: Vec<&str> = log.lines().filter(|l| l.contains("decision") || l.contains("pool")).collect();
    assert!(up, "the job's pool scaled up on the two topics' backlog: {}\n{}", j["decisions"], said.join("\n"));
    for t in [&a, &b] {
        let followed = log.lines().any(|l| l.contains("following the job's pool") && l.contains(&format!("pool.{t}")));
        assert!(followed, "topic {t}'s pipeline moved its shards onto the job's new workers:\n{log}");
    }
}
