//! Every way a topic joins a kafka-to-bq job starts at a stated position, tested with the
//! template's defaults (`kafkaReadOffset` latest), not with `earliest`:
//! - a topic a pattern finds while the job runs, and one created while it is down,
//!   start at their earliest offset (issue 49, item 1), and a listing that fails for a
//!   while neither ends the job nor loses a topic (item 8);
//! - a one-topic job that becomes a list, and back, resumes each topic from its own
//!   commit log: nothing read twice, nothing skipped (item 2).

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use flexrun::bigquery::{rest, TableRef};
use flexrun::local;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

fn table(name: &str) -> TableRef {
    TableRef { project: PROJECT.into(), dataset: "joining".into(), table: name.replace('.', "_") }
}

/// The table a topic's rows go to (`{topic}`), created empty; the topic is not.
async fn table_for(s: &Stack, topic: &str) -> TableRef {
    let t = table(topic);
    let c = rest::client(&s.bq).await.unwrap();
    answer("create table", rest::ensure_table(&c, &s.bq, &t, &local::demo_schema())).await.unwrap();
    t
}

async fn produce(s: &Stack, topic: &str, start: u64, n: u64) {
    answer("produce", local::produce(&s.kafka, topic, 1, start, n, None, 200)).await.unwrap();
}

/// Parameters with the template's default `kafkaReadOffset` (latest).
fn params(s: &Stack, topics: &str) -> String {
    format!(
        "readBootstrapServerAndTopic={};{topics},kafkaReadAuthenticationMode=NONE,messageFormat=JSON,outputTableSpec={PROJECT}:joining.{{topic}}",
        s.kafka
    )
}

/// Wait until `path` exists (a pipeline recorded its start positions) while `child` runs.
async fn wait_for_file(path: &Path, child: &mut Child) {
    let start = Instant::now();
    while !path.exists() {
        assert!(child.try_wait().unwrap().is_none(), "the job ended before {} appeared", path.display());
        assert!(start.elapsed() < RUN_LIMIT, "{} did not appear within {RUN_LIMIT:?}", path.display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn stop(child: Child) -> String {
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_with_timeout(child, RUN_LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    text(&o)
}

/// A pattern job with the template's defaults: topic `y`, created while the job runs
/// with 100 records produced at once, is read from its earliest offset, though two
/// listings in a row fail on the way; topic `z`, created while the job is down, is read
/// from its earliest offset at the restart; `x` resumes from its checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_that_join_a_pattern_job_start_at_their_earliest_offset() {
    let s = stack();
    let p = unique("join");
    let (x, y, z) = (format!("{p}_x"), format!("{p}_y"), format!("{p}_z"));
    let (tx, ty, tz) = (table_for(&s, &x).await, table_for(&s, &y).await, table_for(&s, &z).await);
    flexrun::kafka::create_topic(&s.kafka, &x, 1).await.unwrap();
    let ck = tempfile::tempdir().unwrap();
    let params = params(&s, &format!("/{p}_.*/"));
    let mut child = spawn_job("join", ck.path(), &params, &[]);
    wait_for_file(&ck.path().join(format!("join.{x}/starts.json")), &mut child).await;
    produce(&s, &x, 0, 200).await;
    wait_for_rows(&s, &tx, 200, &mut child).await;
    flexrun::kafka::create_topic(&s.kafka, &y, 1).await.unwrap();
    produce(&s, &y, 1000, 100).await;
    wait_for_rows(&s, &ty, 100, &mut child).await;
    stop(child);
    // While the job is down: a new topic, and more for x.
    flexrun::kafka::create_topic(&s.kafka, &z, 1).await.unwrap();
    produce(&s, &z, 2000, 50).await;
    produce(&s, &x, 200, 30).await;
    let o = run_job("join", ck.path(), &params, "30s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&tx).await, (230, 230), "x resumed from its checkpoint");
    assert_eq!(s.count(&ty).await, (100, 100), "y, found while running, from its earliest offset");
    assert_eq!(s.count(&tz).await, (50, 50), "z, created while the job was down, from its earliest offset");
    let known: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ck.path().join("join/topics.json")).unwrap()).unwrap();
    assert_eq!(known[&x], "initial", "{known}");
    assert_eq!(known[&y], "earliest", "{known}");
    assert_eq!(known[&z], "earliest", "{known}");
}

/// A listing that fails does not end the job: the failpoint fails the second and third
/// listings, the running topic goes on, and a topic created meanwhile is found by the
/// next listing that succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_listings_are_tried_again_while_the_running_topics_go_on() {
    let s = stack();
    let p = unique("relist");
    let (x, y) = (format!("{p}_x"), format!("{p}_y"));
    let (tx, ty) = (table_for(&s, &x).await, table_for(&s, &y).await);
    flexrun::kafka::create_topic(&s.kafka, &x, 1).await.unwrap();
    let ck = tempfile::tempdir().unwrap();
    let args = ["--template", "kafka-to-bq", "--job-name", "relist", "--checkpoint-dir"];
    let mut child = flexrun(&args)
        .arg(ck.path())
        .args(["--parameters", &params(&s, &format!("/{p}_.*/"))])
        .env("FAILPOINTS", "fan_out::list=1*off->2*return")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&ck.path().join(format!("relist.{x}/starts.json")), &mut child).await;
    flexrun::kafka::create_topic(&s.kafka, &y, 1).await.unwrap();
    produce(&s, &y, 0, 40).await;
    produce(&s, &x, 100, 60).await;
    wait_for_rows(&s, &tx, 60, &mut child).await;
    wait_for_rows(&s, &ty, 40, &mut child).await;
    let out = stop(child);
    assert_eq!(out.matches("listing the broker's topics failed").count(), 2, "both failures were retried: {out}");
}

/// One topic, then a list, then one topic again, then the list: each switch moves the
/// topic's checkpoint, so every record of `a` and `b` is written once, and `b`, added
/// to the list, starts at its earliest offset and later resumes where it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_switched_between_one_topic_and_a_list_resumes_every_topic() {
    let s = stack();
    let p = unique("switch");
    let (a, b) = (format!("{p}_a"), format!("{p}_b"));
    let (ta, tb) = (table_for(&s, &a).await, table_for(&s, &b).await);
    flexrun::kafka::create_topic(&s.kafka, &a, 1).await.unwrap();
    let ck = tempfile::tempdir().unwrap();
    // 1. One topic, with the template's defaults.
    let mut child = spawn_job("sw", ck.path(), &params(&s, &a), &[]);
    wait_for_file(&ck.path().join("sw/starts.json"), &mut child).await;
    produce(&s, &a, 0, 100).await;
    wait_for_rows(&s, &ta, 100, &mut child).await;
    stop(child);
    // 2. The list a|b: a's checkpoint moves to sw.a, b is new.
    produce(&s, &a, 100, 50).await;
    flexrun::kafka::create_topic(&s.kafka, &b, 1).await.unwrap();
    produce(&s, &b, 1000, 70).await;
    let o = run_job("sw", ck.path(), &params(&s, &format!("{a}|{b}")), "30s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!((s.count(&ta).await, s.count(&tb).await), ((150, 150), (70, 70)));
    assert!(ck.path().join(format!("sw.{a}/job.json")).exists() && !ck.path().join("sw/job.json").exists());
    // 3. Back to one topic: a's checkpoint moves back.
    produce(&s, &a, 150, 30).await;
    produce(&s, &b, 1070, 20).await;
    let o = run_job("sw", ck.path(), &params(&s, &a), "30s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!((s.count(&ta).await, s.count(&tb).await), ((180, 180), (70, 70)));
    assert!(ck.path().join("sw/job.json").exists() && !ck.path().join(format!("sw.{a}")).exists());
    // 4. The list again: b resumes where it stopped.
    let o = run_job("sw", ck.path(), &params(&s, &format!("{a}|{b}")), "30s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!((s.count(&ta).await, s.count(&tb).await), ((180, 180), (90, 90)));
}

/// README: "if one fails, the others drain and the job fails naming the topic". Topic
/// `b`'s table does not exist (the JSON path never creates one), so its pipeline fails
/// at start; `a`'s is drained, the job exits non-zero naming `b`; once the table exists,
/// a restart writes both topics exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_one_topic_fails_the_others_drain_and_the_job_names_it() {
    let s = stack();
    let p = unique("onefails");
    let (a, b) = (format!("{p}_a"), format!("{p}_b"));
    let ta = table_for(&s, &a).await;
    for t in [&a, &b] {
        flexrun::kafka::create_topic(&s.kafka, t, 1).await.unwrap();
        produce(&s, t, 0, 80).await;
    }
    let ck = tempfile::tempdir().unwrap();
    let params = format!("{},kafkaReadOffset=earliest", params(&s, &format!("{a}|{b}")));
    let o = run_job("onefails", ck.path(), &params, "30s", &[]);
    assert!(!o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains(&format!("topic {b}")) && out.contains("draining the others"), "{out}");
    let tb = table_for(&s, &b).await;
    let o = run_job("onefails", ck.path(), &params, "30s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!((s.count(&ta).await, s.count(&tb).await), ((80, 80), (80, 80)));
}

/// Issue 62, item 7: a topic whose pipeline fails at its job's first start, before
/// anything is read (here its table does not exist yet), kept no start position, so the
/// restart after the fix resolved `latest` again and skipped what was produced in
/// between. Its first start's position is now saved before the set-up that can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_whose_pipeline_fails_at_the_first_start_resumes_from_that_start() {
    let s = stack();
    let (a, b) = (unique("firstfail_a"), unique("firstfail_b"));
    for t in [&a, &b] {
        flexrun::kafka::create_topic(&s.kafka, t, 1).await.unwrap();
    }
    let ta = table_for(&s, &a).await;
    let ck = tempfile::tempdir().unwrap();
    let p = params(&s, &format!("{a}|{b}"));
    let o = run_job("firstfail", ck.path(), &p, "2s", &[]);
    assert_eq!(o.status.code(), Some(1), "b's table is missing: {}", text(&o));
    assert!(text(&o).contains(&format!("topic {b}")), "{}", text(&o));
    produce(&s, &a, 0, 50).await;
    produce(&s, &b, 1000, 50).await;
    let tb = table_for(&s, &b).await;
    let o = run_job("firstfail", ck.path(), &p, "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!((s.count(&ta).await, s.count(&tb).await), ((50, 50), (50, 50)), "each topic from its first start");
}

/// Issue 62, item 11: the twelfth failed listing in a row ends the job, after draining
/// the topics that run (it returned with them still running); their batches commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_listings_keep_failing_drains_its_topics_before_it_ends() {
    let s = stack();
    let p = unique("nolist");
    let x = format!("{p}_x");
    let tx = table_for(&s, &x).await;
    flexrun::kafka::create_topic(&s.kafka, &x, 1).await.unwrap();
    let ck = tempfile::tempdir().unwrap();
    let args = ["--template", "kafka-to-bq", "--job-name", "nolist", "--checkpoint-dir"];
    let mut child = flexrun(&args)
        .arg(ck.path())
        .args(["--parameters", &params(&s, &format!("/{p}_.*/"))])
        .env("FAILPOINTS", "fan_out::list=1*off->return")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&ck.path().join(format!("nolist.{x}/starts.json")), &mut child).await;
    produce(&s, &x, 0, 50).await;
    wait_for_rows(&s, &tx, 50, &mut child).await;
    let o = wait_with_timeout(child, RUN_LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("failed 12 times in a row") && text(&o).contains("draining the running topics"),
        "{}",
        text(&o)
    );
    assert_eq!(s.count(&tx).await, (50, 50));
    // Drained, not abandoned: the restart has nothing uncommitted to replay.
    let sum = ck.path().join("summary.json");
    let o = run_job("nolist", ck.path(), &params(&s, &x), "2s", &["--summary-json", sum.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&sum)["summary"]["replayed_batches"], 0);
}

/// Issue 62, item 11: a topic added to a job's list starts at its earliest offset even
/// when the job's consumer group has committed offsets for it (another consumer in that
/// group, say): the group's offsets belong to another start. They used to win.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_topic_starts_at_earliest_whatever_its_group_committed() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    let s = stack();
    let p = unique("joingrp");
    let (x, y) = (format!("{p}_x"), format!("{p}_y"));
    let (tx, ty) = (table_for(&s, &x).await, table_for(&s, &y).await);
    for t in [&x, &y] {
        flexrun::kafka::create_topic(&s.kafka, t, 1).await.unwrap();
    }
    produce(&s, &y, 0, 100).await;
    let group = format!("{p}_group");
    let c: BaseConsumer =
        flexrun::kafka::Connection::plaintext(&s.kafka).client("a consumer", &[("group.id", &group)]).unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(&y, 0, rdkafka::Offset::Offset(100)).unwrap();
    c.commit(&tpl, CommitMode::Sync).expect("commit the group's offset");
    let ck = tempfile::tempdir().unwrap();
    let with = |topics: &str| format!("{},consumerGroupId={group}", params(&s, topics));
    let o = run_job("joingrp", ck.path(), &with(&x), "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run_job("joingrp", ck.path(), &with(&format!("{x}|{y}")), "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&ty).await, (100, 100), "y joined: from its earliest offset, not the group's 100");
    assert_eq!(s.count(&tx).await, (0, 0));
}
