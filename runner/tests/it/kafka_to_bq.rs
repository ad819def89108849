//! kafka-to-bq against the real local stack: exactly-once with and without
//! SIGKILLs, at-least-once, dead-letter routing, stopping without a DLQ, and drain.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use rand::{Rng, SeedableRng};
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_100k_messages_make_100k_rows() {
    let s = stack();
    let f = s.fixture("eo100k", 8).await;
    f.produce(&s, 0, 100_000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let summary = ck.path().join("summary.json");
    let o = run_job("eo100k", ck.path(), &f.params(&s, ""), "3s", &["--summary-json", summary.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&f.table).await, (100_000, 100_000));
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    assert_eq!(j["summary"]["messages_read"], 100_000);
    assert_eq!(j["summary"]["rows_written"], 100_000);
    assert_eq!(j["delivery"], "exactly-once");
    let stages = j["summary"]["stages"].as_array().unwrap();
    assert!(stages.iter().all(|st| st["count"].as_u64().unwrap() > 0), "every stage has latency samples: {stages:?}");
}

/// `--memory-budget` sets each partition's prefetch and caps the batches (issue 63): a
/// 64 MiB budget over 8 partitions in 8 shards gives each partition 4 MiB of prefetch
/// and caps `--batch-bytes 9000000` at 2 MiB; every record lands once and the summary
/// reports the process's peak resident set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_budget_shares_prefetch_and_batches_and_the_summary_reports_peak_rss() {
    let s = stack();
    let f = s.fixture("budget", 8).await;
    f.produce(&s, 0, 20_000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let summary = ck.path().join("summary.json");
    let extra = ["--memory-budget", "64MiB", "--batch-bytes", "9000000", "--summary-json", summary.to_str().unwrap()];
    let o = job_cmd("budget", ck.path(), &f.params(&s, ""), "3s", &extra).env("FLEXRUN_LOG", "info").bounded();
    assert!(o.status.success(), "{}", text(&o));
    let log = text(&o);
    assert!(log.contains("prefetch_per_partition=4194304"), "{log}");
    assert!(log.contains("batch_bytes=2097152"), "{log}");
    assert_eq!(s.count(&f.table).await, (20_000, 20_000));
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    let rss = j["summary"]["peak_rss_bytes"].as_u64().unwrap();
    assert!(rss > 1 << 20 && rss < 64 << 30, "peak RSS {rss}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_survives_repeated_sigkill() {
    let s = stack();
    let f = s.fixture("eokill", 8).await;
    f.produce(&s, 0, 100_000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "");
    let seed = test_seed("kill schedule");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // Small batches put more of the protocol's crash points under the kills.
    let extra = ["--batch-rows", "1500"];
    // Each kill waits for a seeded row count (the k-th between k/10 and k/10 + 1/20 of
    // the topic), so every one lands while the job is writing, whatever the load.
    let n = 100_000i64;
    let mut kills = 0;
    for k in 1..=8i64 {
        let mut child = spawn_job("eokill", ck.path(), &params, &extra);
        let target = n * k / 10 + rng.random_range(0..n / 20);
        let seen = wait_for_rows(&s, &f.table, target, &mut child).await;
        assert!(child.try_wait().unwrap().is_none(), "the job ended before kill {k}");
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        kills += 1;
        let _ = child.wait();
        eprintln!("kill {k} at {seen} rows (target {target})");
        assert!(seen < n, "kill {k} came after the whole topic was written: {seen} rows");
    }
    assert_eq!(kills, 8, "every kill landed while the job was running");
    let o = run_job("eokill", ck.path(), &params, "3s", &extra);
    assert!(o.status.success(), "{}", text(&o));
    let (rows, distinct) = s.count(&f.table).await;
    eprintln!("after {kills} SIGKILLs: {rows} rows, {distinct} distinct ids");
    assert_eq!((rows, distinct), (100_000, 100_000), "exactly-once broke after {kills} kills (seed {seed})");
}

#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_loses_nothing_and_reports_duplicates() {
    let s = stack();
    let f = s.fixture("alo", 4).await;
    f.produce(&s, 0, 30_000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "useStorageWriteApiAtLeastOnce=true");
    // Each kill waits until rows are being written (5,000 and then 15,000 of 30,000).
    for target in [5_000i64, 15_000] {
        let mut child = spawn_job("alo", ck.path(), &params, &["--batch-rows", "1000"]);
        let seen = wait_for_rows(&s, &f.table, target, &mut child).await;
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        assert!(seen < 30_000, "the kill landed mid-write: {seen} rows");
    }
    let sum = ck.path().join("alo.json");
    let o =
        run_job("alo", ck.path(), &params, "3s", &["--batch-rows", "1000", "--summary-json", sum.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("at-least-once"), "{}", text(&o));
    let j = summary(&sum);
    assert_eq!(j["delivery"], "at-least-once", "{j}");
    // At-least-once keeps no write-ahead log: a restart re-reads from the last commit,
    // so the batches in flight at a kill are what can be sent twice (and nothing is
    // logged as replayed).
    assert_eq!(j["summary"]["replayed_batches"], 0, "{j}");
    let (rows, distinct) = s.count(&f.table).await;
    eprintln!("at-least-once after 2 SIGKILLs: {rows} rows, {distinct} distinct ids, {} duplicates", rows - distinct);
    assert_eq!(distinct, 30_000, "at-least-once loses nothing");
    // At most a batch per partition per kill is sent twice (4 partitions, 1,000 rows each).
    assert!(rows - distinct <= 2 * 4 * 1000, "{} duplicates: more than the batches in flight", rows - distinct);
    // The launcher saw every append on the `_default` stream and no stream created.
    let st = fault_stats(&f.table);
    assert_eq!(st["create_write_stream"], 0, "at-least-once creates no COMMITTED stream: {st}");
    assert_eq!(st["default_stream_appends"], st["append_requests"], "every append went to _default: {st}");
    assert!(st["append_requests"].as_u64().unwrap() > 0, "{st}");
    // One more kill mid-write: the restart says how many messages it may write twice,
    // an upper bound on the duplicates it then writes (kafka_to_bq::run::sent).
    let dups_before = rows - distinct;
    f.produce(&s, 30_000, 20_000, None).await;
    // The kill comes from a crash point after the 6th batch's append and before its
    // commit, so a sent, uncommitted batch is certain (a kill on a row count could land
    // between batches and leave none).
    let crash = job_cmd("alo", ck.path(), &params, "3s", &["--batch-rows", "1000"])
        .env("FAILPOINTS", "eo::before_commit_log=5*off->return")
        .bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "the crash point was reached: {}", text(&crash));
    let seen = s.count(&f.table).await.0;
    assert!(seen < rows + 20_000, "the kill landed mid-write: {seen} rows");
    let o =
        run_job("alo", ck.path(), &params, "3s", &["--batch-rows", "1000", "--summary-json", sum.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let possibly = summary(&sum)["summary"]["reliability"]["messages_possibly_duplicated"].as_u64().unwrap() as i64;
    let (rows, distinct) = s.count(&f.table).await;
    assert_eq!(distinct, 50_000, "nothing lost");
    let new_dups = rows - distinct - dups_before;
    eprintln!("the restart reported {possibly} messages possibly duplicated; it wrote {new_dups} duplicates");
    assert!(possibly > 0, "a kill mid-write leaves sent, uncommitted batches: {}", text(&o));
    assert!(new_dups <= possibly, "{new_dups} duplicates written, only {possibly} reported as possible");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_records_go_to_the_dead_letter_table_with_reasons() {
    let s = stack();
    let f = s.fixture("dlq", 2).await;
    // 60 messages, every 10th a bad one: one of each of the six transform classes.
    let p = f.produce(&s, 0, 60, Some(10)).await;
    assert_eq!((p.good, p.bad), (54, 6));
    // And one valid message whose row is too large for the --max-row-bytes below.
    flexrun::local::produce(&s.kafka, &f.topic, 1, 1000, 1, None, 3000).await.unwrap();
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, &format!("useBigQueryDLQ=true,outputDeadletterTable={}", f.dlq));
    let o = run_job("dlq", ck.path(), &params, "2s", &["--max-row-bytes", "2000"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("reconciliation: read = written + dead-lettered: yes"), "{out}");
    assert_eq!(s.count(&f.table).await, (54, 54));
    let dl = s
        .rows(&format!("SELECT errorMessage, payloadString FROM `{}.{}.{}`", f.dlq.project, f.dlq.dataset, f.dlq.table))
        .await;
    let msgs: Vec<String> = dl.iter().map(|r| r[0].clone().unwrap_or_default()).collect();
    assert_eq!(msgs.len(), 7, "{msgs:#?}");
    for want in [
        "Failed to serialize json to table row",
        "message is JSON an array, expected a JSON object",
        "not valid UTF-8",
        "unexpected field with name colour",
        "field id: expected a 64-bit integer",
        "missing required field id",
        "Row payload too large",
    ] {
        assert!(msgs.iter().any(|m| m.contains(want)), "no dead-letter row says {want:?}: {msgs:#?}");
    }
    // payloadString is the Kafka record as Google's converter pretty-prints it.
    let head = format!("{{\n  \"topic\" : \"{}\",\n  \"partition\" : ", f.topic);
    assert!(
        dl.iter().all(|r| r[1].as_deref().is_some_and(|p| p.starts_with(&head) && p.contains("\"kv\" : {"))),
        "payloadString names the source record in Google's shape: {dl:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_dead_letter_table_a_bad_record_stops_the_job_and_nothing_is_lost() {
    let s = stack();
    let f = s.fixture("nodlq", 1).await;
    f.produce(&s, 0, 20, None).await;
    // One bad message between two runs of good ones.
    let producer_bad = flexrun::local::bad_message(0).1;
    {
        use rdkafka::producer::{FutureProducer, FutureRecord};
        let p: FutureProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", &s.kafka).create().unwrap();
        p.send(FutureRecord::<(), [u8]>::to(&f.topic).payload(producer_bad.as_slice()), Duration::from_secs(10))
            .await
            .unwrap();
    }
    f.produce(&s, 20, 20, None).await;
    let ck = tempfile::tempdir().unwrap();
    let o = run_job("nodlq", ck.path(), &f.params(&s, ""), "2s", &["--batch-rows", "5"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("record {}/0@20 cannot be written", f.topic)), "{err}");
    assert!(err.contains("No dead-letter table is configured"), "{err}");
    let (before, _) = s.count(&f.table).await;
    assert!(before <= 20, "rows after the bad record were written: {before}");
    // Adding a dead-letter table and restarting the same job delivers everything, once.
    let params = f.params(&s, &format!("outputDeadletterTable={}", f.dlq));
    let o = run_job("nodlq", ck.path(), &params, "2s", &["--batch-rows", "5"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&f.table).await, (40, 40));
    let (dl, _) = flexrun::local::count_rows(&s.bq, &f.dlq, None).await.unwrap();
    assert_eq!(dl, 1);
}

/// `badRecordPolicy=LOG_AND_DROP` is Google's behaviour without a dead-letter table:
/// records that cannot be mapped, and rows BigQuery refuses, are logged, counted and
/// dropped; every other row lands once and the job does not stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_dead_letter_table_log_and_drop_logs_counts_and_goes_on() {
    let s = stack();
    let f = s.fixture("logdrop", 1).await;
    // 60 messages, every 10th bad (6 transform errors); of the good ones, the emulator
    // refuses those whose message holds the marker (seeded, so the test knows which).
    let p = f.produce(&s, 0, 60, Some(10)).await;
    let marker = "Qz";
    let refused = (0..60u64)
        .filter(|id| {
            id % 10 != 9 && String::from_utf8_lossy(&flexrun::local::seed_message(*id, 42, 962)).contains(marker)
        })
        .count() as u64;
    assert!(refused > 0, "the marker picks some good rows");
    table_faults(&f.table, &format!(r#""reject_rows_containing": "{marker}""#));
    let ck = tempfile::tempdir().unwrap();
    let sum = ck.path().join("summary.json");
    let params = f.params(&s, "badRecordPolicy=LOG_AND_DROP");
    let o =
        run_job("logdrop", ck.path(), &params, "2s", &["--batch-rows", "20", "--summary-json", sum.to_str().unwrap()]);
    reset_faults(&f.table);
    assert!(o.status.success(), "{}", text(&o));
    let sm = &summary(&sum)["summary"];
    assert_eq!(sm["bad_records_dropped"].as_u64(), Some(p.bad + refused), "{sm}");
    assert_eq!(sm["dead_lettered"].as_u64(), Some(0), "{sm}");
    let want = (p.good - refused) as i64;
    assert_eq!(s.count(&f.table).await, (want, want));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("read = written + dead-lettered + bad records dropped: yes"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    let logged = err.matches("bad record dropped (badRecordPolicy=LOG_AND_DROP").count() as u64;
    assert_eq!(logged, p.bad + refused, "each dropped record is logged once: {err}");
    assert!(err.contains(r#"stage="write" error="BigQuery rejected the row"#), "a refused row is logged: {err}");
    // With a dead-letter table the two are contradictory: exit 2, naming both.
    let both = f.params(&s, &format!("badRecordPolicy=LOG_AND_DROP,outputDeadletterTable={}", f.dlq));
    let o = run_job("logdrop2", ck.path(), &both, "2s", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("badRecordPolicy=LOG_AND_DROP is for jobs without a dead-letter table"), "{}", text(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_a_restart_resumes() {
    let s = stack();
    let f = s.fixture("drain", 4).await;
    f.produce(&s, 0, 30_000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "");
    let mut child = spawn_job("drain", ck.path(), &params, &["--batch-rows", "2000"]);
    wait_for_rows(&s, &f.table, 4_000, &mut child).await;
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_with_timeout(child, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("reconciliation: read = written + dead-lettered: yes"), "{out}");
    let (mid, _) = s.count(&f.table).await;
    assert!(mid > 0 && mid < 30_000, "the SIGTERM landed mid-topic: {mid} rows at the drain");
    f.produce(&s, 30_000, 10_000, None).await;
    let sum = ck.path().join("drain.json");
    let o = run_job("drain", ck.path(), &params, "3s", &["--summary-json", sum.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    eprintln!("{mid} rows at the drain, then resumed");
    assert_eq!(summary(&sum)["summary"]["replayed_batches"], 0, "a drained job leaves no batch to replay");
    assert_eq!(s.count(&f.table).await, (40_000, 40_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_another_topic_under_the_same_job_name_is_refused() {
    let s = stack();
    let a = s.fixture("ida", 1).await;
    let b = s.fixture("idb", 1).await;
    let ck = tempfile::tempdir().unwrap();
    let o = run_job("same", ck.path(), &a.params(&s, ""), "500ms", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run_job("same", ck.path(), &b.params(&s, ""), "500ms", &[]);
    assert_eq!(o.status.code(), Some(2), "a changed pipeline is a usage error: {}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already has a checkpoint for a different pipeline"),
        "{}",
        text(&o)
    );
}

/// Issue 27, item 1: a job that starts at `latest`, reads nothing and is run again must
/// resume where it began, not at a newly resolved `latest` that skips what was
/// produced in between. The first run's resolved start is on disk before it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_job_started_at_latest_restarts_where_it_began() {
    let s = stack();
    let f = s.fixture("idle_latest", 1).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "").replace("kafkaReadOffset=earliest", "kafkaReadOffset=latest");
    let o = run_job("idle", ck.path(), &params, "2s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let saved = flexrun::kafka::starts::read(&ck.path().join("idle")).unwrap();
    assert_eq!(saved, std::collections::BTreeMap::from([(0, 0)]), "the resolved start is saved before any read");
    f.produce(&s, 0, 100, None).await;
    let sj = ck.path().join("summary.json");
    let o = run_job("idle", ck.path(), &params, "2s", &["--summary-json", sj.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&sj)["summary"]["messages_read"], 100);
    assert_eq!(s.count(&f.table).await, (100, 100));
}

/// Commit `offset` for `partition` of `topic` to consumer group `group`, as another
/// consumer of the group would, and wait for the broker to take it.
fn commit_group_offset(conn: &flexrun::kafka::Connection, group: &str, topic: &str, partition: i32, offset: i64) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let committer: BaseConsumer = conn.client("a test committer", &[("group.id", group)]).unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(offset)).unwrap();
    committer.commit(&tpl, rdkafka::consumer::CommitMode::Sync).unwrap();
}

/// The job's one metadata client answers every start-up question: each partition's
/// watermarks in one ListOffsets request per end (checked against librdkafka's own
/// per-partition query), and the consumer group's committed offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_client_reads_watermarks_and_the_groups_committed_offsets() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let s = stack();
    let f = s.fixture("md_marks", 3).await;
    f.produce(&s, 0, 300, None).await;
    let conn = flexrun::kafka::Connection::plaintext(&s.kafka);
    let group = unique("md_group");
    let md = flexrun::kafka::Metadata::for_group(&conn, &f.topic, &group).unwrap();
    let parts = md.partitions().await.unwrap();
    let marks = md.watermarks(&parts).await.unwrap();
    let direct: BaseConsumer = conn.client("a test client", &[]).unwrap();
    for p in &parts {
        let want = direct.fetch_watermarks(&f.topic, *p, Duration::from_secs(10)).unwrap();
        assert_eq!(marks[p], want, "partition {p}");
    }
    assert_eq!(marks.values().map(|(lo, hi)| hi - lo).sum::<i64>(), 300);
    let high = md.high_watermarks(&parts).await.unwrap();
    let low = md.low_watermarks(&parts).await.unwrap();
    assert_eq!(marks, parts.iter().map(|p| (*p, (low[p], high[p]))).collect());
    assert!(md.committed(&parts).await.is_empty(), "a new group has committed nothing");
    commit_group_offset(&conn, &group, &f.topic, parts[0], high[&parts[0]] / 2);
    let committed = md.committed(&parts).await;
    assert_eq!(committed, std::collections::BTreeMap::from([(parts[0], high[&parts[0]] / 2)]));
}

/// A job with no checkpoint starts a partition at its consumer group's committed offset
/// where the group has one, and at `kafkaReadOffset` elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_without_a_checkpoint_starts_at_its_groups_committed_offsets() {
    let s = stack();
    let f = s.fixture("grp_start", 2).await;
    f.produce(&s, 0, 200, None).await;
    let conn = flexrun::kafka::Connection::plaintext(&s.kafka);
    let group = unique("grp_start_group");
    let md = flexrun::kafka::Metadata::new(&conn, &f.topic).unwrap();
    let high = md.high_watermarks(&[0, 1]).await.unwrap();
    let skip = high[&0] / 2;
    commit_group_offset(&conn, &group, &f.topic, 0, skip);
    let ck = tempfile::tempdir().unwrap();
    let sj = ck.path().join("summary.json");
    let params = f.params(&s, &format!("consumerGroupId={group}"));
    let o = run_job("grp", ck.path(), &params, "2s", &["--summary-json", sj.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&sj)["summary"]["messages_read"], 200 - skip, "partition 0 starts at the group's offset {skip}");
    assert_eq!(s.count(&f.table).await, (200 - skip, 200 - skip));
}

/// `--stop-when-caught-up` drains once the end offsets read at start are committed, long
/// before a 60 s idle timeout would, and says which of the two ended the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_when_caught_up_drains_at_the_end_offsets_read_at_start() {
    let s = stack();
    let f = s.fixture("caughtup", 3).await;
    f.produce(&s, 0, 5000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let o = job_cmd("caughtup", ck.path(), &f.params(&s, ""), "60s", &[]).env("FLEXRUN_LOG", "info").bounded();
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("caught up with the end offsets read at start: draining"), "{}", text(&o));
    assert!(!err.contains("no new messages: draining"), "the idle timeout ended it instead: {}", text(&o));
    assert_eq!(s.count(&f.table).await, (5000, 5000));
    // An empty topic: nothing to catch up with, so it drains at once.
    let e = s.fixture("caughtup_empty", 1).await;
    let o = job_cmd("caughtup_empty", ck.path(), &e.params(&s, ""), "60s", &[]).env("FLEXRUN_LOG", "info").bounded();
    assert!(o.status.success() && String::from_utf8_lossy(&o.stderr).contains("caught up"), "{}", text(&o));
    // Other templates refuse the flag instead of ignoring it.
    let o = flexrun(&[
        "--template",
        "kafka-to-gcs",
        "--stop-when-caught-up",
        "--parameters",
        "readBootstrapServerAndTopic=x:1;t,outputDirectory=/tmp/x/,messageFormat=JSON,kafkaReadAuthenticationMode=NONE",
    ])
    .bounded();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--stop-when-caught-up is supported by kafka-to-bq only"), "{}", text(&o));
}
