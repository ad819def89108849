//! kafka-to-bq against a BigQuery that behaves as documented where exactly-once
//! depends on it (scripts/bqemulator_launcher.py), with faults injected: restarts that
//! reuse their streams, transient errors, a stall and a drain during it, a finalized
//! stream, rows refused, records too large for a request, a torn log tail, two
//! processes on one job, and partitions the checkpoint does not know.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use std::time::{Duration, Instant};

fn summary_arg(dir: &std::path::Path) -> (std::path::PathBuf, String) {
    let p = dir.join("summary.json");
    let s = p.to_str().unwrap().to_string();
    (p, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_streams_report_commit_time_equal_to_create_time_as_documented() {
    let s = stack();
    let f = s.fixture("ct", 1).await;
    let c = flexrun::bigquery::write::WriteClient::connect(&s.bq).await.unwrap();
    let name = c.create_committed_stream(&f.table).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let ws = c.get_stream(&name).await.unwrap();
    assert!(ws.commit_time.is_some(), "storage.proto: a COMMITTED stream has a commit_time");
    assert_eq!(ws.commit_time, ws.create_time, "storage.proto: commit_time same as create_time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reuses_its_streams_and_duplicates_nothing() {
    let s = stack();
    let f = s.fixture("reuse", 2).await;
    f.produce(&s, 0, 4000, Some(100)).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, &format!("outputDeadletterTable={}", f.dlq));
    let o = run_job("reuse", ck.path(), &params, "1s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let before = fault_stats(&f.table);
    f.produce(&s, 4000, 4000, Some(100)).await;
    let o = run_job("reuse", ck.path(), &params, "1s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let after = fault_stats(&f.table);
    assert_eq!(
        after["create_write_stream"], before["create_write_stream"],
        "the restart created streams: {before} → {after}"
    );
    assert_eq!(s.count(&f.table).await, (7920, 7920));
    assert_eq!(flexrun::local::count_rows(&s.bq, &f.dlq, None).await.unwrap().0, 80);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_unavailable_errors_are_retried_and_counted() {
    let s = stack();
    let f = s.fixture("unavail", 2).await;
    f.produce(&s, 0, 20_000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let (sum, sum_s) = summary_arg(ck.path());
    table_faults(&f.table, r#""fail_next": 6, "code": "UNAVAILABLE", "on": "append""#);
    let o = run_job("unavail", ck.path(), &f.params(&s, ""), "2s", &["--summary-json", &sum_s]);
    reset_faults(&f.table);
    assert!(o.status.success(), "{}", text(&o));
    let retries = &summary(&sum)["summary"]["reliability"]["retries"];
    let injected = fault_stats(&f.table)["injected_append"].as_u64().unwrap();
    assert_eq!(injected, 6, "the launcher failed six appends on this table");
    assert_eq!(retries["Unavailable"].as_u64(), Some(injected), "one retry per injected failure: {retries}");
    assert_eq!(s.count(&f.table).await, (20_000, 20_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_episode_stalls_the_job_instead_of_ending_it() {
    let s = stack();
    let f = s.fixture("quota", 1).await;
    f.produce(&s, 0, 5000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let (sum, sum_s) = summary_arg(ck.path());
    table_faults(&f.table, r#""fail_for_s": 35, "code": "RESOURCE_EXHAUSTED""#);
    let t = Instant::now();
    let o = run_job("quota", ck.path(), &f.params(&s, ""), "2s", &["--summary-json", &sum_s]);
    reset_faults(&f.table);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        t.elapsed() >= Duration::from_secs(30),
        "the job waited out the episode ({:?}), which lasts longer than the old 26 s limit",
        t.elapsed()
    );
    assert!(summary(&sum)["summary"]["reliability"]["retries"]["ResourceExhausted"].as_u64().unwrap_or(0) >= 3);
    assert_eq!(s.count(&f.table).await, (5000, 5000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_stall_drains_and_the_restart_finishes_the_batch() {
    let s = stack();
    let f = s.fixture("stalldrain", 1).await;
    f.produce(&s, 0, 3000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "");
    table_faults(&f.table, r#""fail_for_s": 120, "code": "UNAVAILABLE", "on": "append""#);
    let mut child = spawn_job("stalldrain", ck.path(), &params, &[]);
    // SIGTERM once an append has met the stall (the batch is logged, so it is replayed).
    wait_for_injected_failure(&f.table, "injected_append", &mut child).await;
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_with_timeout(child, Duration::from_secs(30));
    reset_faults(&f.table);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("will be replayed"), "{}", text(&o));
    let (sum, sum_s) = summary_arg(ck.path());
    let o = run_job("stalldrain", ck.path(), &params, "2s", &["--summary-json", &sum_s]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&sum)["summary"]["replayed_batches"], 1);
    assert_eq!(s.count(&f.table).await, (3000, 3000));
}

/// A stop that lands while the replay of a logged batch, at the shard's start, waits out
/// a BigQuery outage (a drain here; a move of the shard to another worker takes the same
/// path) ends the job cleanly with the batch still logged, and the next run replays it.
/// The chaos suite's exit 1 (RELIABILITY.md) was this: a rescale during a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_replay_in_a_stall_drains_and_the_next_run_replays() {
    let s = stack();
    let f = s.fixture("replaydrain", 1).await;
    f.produce(&s, 0, 3000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "");
    table_faults(&f.table, r#""fail_for_s": 300, "code": "UNAVAILABLE", "on": "append""#);
    // The first run logs its batch, meets the stall, and drains: the batch stays logged.
    let mut child = spawn_job("replaydrain", ck.path(), &params, &[]);
    wait_for_injected_failure(&f.table, "injected_append", &mut child).await;
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_with_timeout(child, Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The second run replays that batch as its shard opens, meets the stall there, and
    // is stopped while the replay waits to retry.
    let seen = fault_stats(&f.table)["injected_append"].as_u64().unwrap();
    let mut child = spawn_job("replaydrain", ck.path(), &params, &[]);
    wait_for_injected_failures_over(&f.table, "injected_append", seen, &mut child).await;
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_with_timeout(child, Duration::from_secs(30));
    reset_faults(&f.table);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("stopped while replaying a logged batch"), "{}", text(&o));
    assert_eq!(s.count(&f.table).await.0, 0, "nothing was written during the stall");
    let (sum, sum_s) = summary_arg(ck.path());
    let o = run_job("replaydrain", ck.path(), &params, "2s", &["--summary-json", &sum_s]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&sum)["summary"]["replayed_batches"], 1);
    assert_eq!(s.count(&f.table).await, (3000, 3000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalized_stream_after_a_clean_stop_is_replaced_without_duplicates() {
    let s = stack();
    let f = s.fixture("final", 1).await;
    f.produce(&s, 0, 2000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "");
    assert!(run_job("final", ck.path(), &params, "1s", &[]).status.success());
    let r = faults("", &format!(r#"{{"finalize_table": "{}.{}"}}"#, f.table.dataset, f.table.table));
    assert_eq!(r["finalized"].as_array().unwrap().len(), 1, "{r}");
    f.produce(&s, 2000, 2000, None).await;
    let (sum, sum_s) = summary_arg(ck.path());
    let o = run_job("final", ck.path(), &params, "1s", &["--summary-json", &sum_s]);
    assert!(o.status.success(), "{}", text(&o));
    let rel = &summary(&sum)["summary"]["reliability"];
    assert_eq!(
        (rel["streams_replaced"].as_u64(), rel["batches_possibly_duplicated"].as_u64()),
        (Some(1), Some(0)),
        "{rel}"
    );
    assert_eq!(s.count(&f.table).await, (4000, 4000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_disappeared_is_replaced_too() {
    let s = stack();
    let f = s.fixture("gone", 1).await;
    f.produce(&s, 0, 1000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "");
    assert!(run_job("gone", ck.path(), &params, "1s", &[]).status.success());
    let r = faults("", &format!(r#"{{"drop_table_streams": "{}.{}"}}"#, f.table.dataset, f.table.table));
    assert_eq!(r["dropped"].as_array().unwrap().len(), 1, "{r}");
    f.produce(&s, 1000, 1000, None).await;
    let (sum, sum_s) = summary_arg(ck.path());
    let o = run_job("gone", ck.path(), &params, "1s", &["--summary-json", &sum_s]);
    assert!(o.status.success(), "{}", text(&o));
    let rel = &summary(&sum)["summary"]["reliability"];
    assert_eq!(
        (rel["streams_replaced"].as_u64(), rel["batches_possibly_duplicated"].as_u64()),
        (Some(1), Some(0)),
        "the vanished stream was replaced once, and no sent batch was lost with it: {rel}"
    );
    assert_eq!(s.count(&f.table).await, (2000, 2000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_batches_are_split_into_requests_and_oversize_rows_are_dead_lettered_truncated() {
    let s = stack();
    let f = s.fixture("big", 1).await;
    // 60 messages of ~1 MB (several requests per batch), then one of 3 MB, over the
    // --max-row-bytes below (the same path a row over the 10 MB request limit takes;
    // records of 9.9 and 15 MB themselves are tests/it/broker.rs).
    flexrun::local::produce(&s.kafka, &f.topic, 1, 0, 60, None, 1_000_000).await.unwrap();
    flexrun::local::produce_large(&s.kafka, &f.topic, 60, 3_000_000).await.unwrap();
    let ck = tempfile::tempdir().unwrap();
    let (sum, sum_s) = summary_arg(ck.path());
    let params = f.params(&s, &format!("outputDeadletterTable={}", f.dlq));
    let before = fault_stats(&f.table);
    // Requests of at most 1.5 MB hold one ~1 MB row each, while batches hold up to 9 MB.
    let extra = [
        "--summary-json",
        &sum_s,
        "--max-row-bytes",
        "2000000",
        "--append-request-bytes",
        "1500000",
        "--batch-bytes",
        "9000000",
    ];
    let o = run_job("big", ck.path(), &params, "10s", &extra);
    assert!(o.status.success(), "{}", text(&o));
    let j = summary(&sum);
    assert_eq!(s.count(&f.table).await, (60, 60), "{}", text(&o));
    let batches = j["summary"]["batches"].as_u64().unwrap();
    // The table's requests and the dead-letter table's (the launcher counts per table).
    let requests = fault_stats(&f.table)["append_requests"].as_u64().unwrap()
        - before["append_requests"].as_u64().unwrap()
        + fault_stats(&f.dlq)["append_requests"].as_u64().unwrap();
    assert!(requests >= 61, "one request per row at least (60 rows, 1 dead letter): {requests}");
    assert!(batches < 60, "so batches of several rows were split: {requests} requests for {batches} batches");
    let dl = s
        .rows(&format!(
            "SELECT errorMessage, LENGTH(payloadBytes) FROM `{}.{}.{}`",
            f.dlq.project, f.dlq.dataset, f.dlq.table
        ))
        .await;
    assert_eq!(dl.len(), 1, "{dl:?} {}", text(&o));
    let msg = dl[0][0].clone().unwrap_or_default();
    assert!(msg.contains("Row payload too large") && msg.contains("truncated"), "{msg}");
    assert_eq!(dl[0][1].as_deref(), Some(flexrun::kafka_to_bq::map::dlq::MAX_DLQ_PAYLOAD_BYTES.to_string().as_str()));
    assert_eq!(j["summary"]["dead_lettered"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_log_tail_is_cut_and_the_job_resumes_exactly_once() {
    let s = stack();
    let f = s.fixture("torn", 1).await;
    f.produce(&s, 0, 3000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "");
    assert!(run_job("torn", ck.path(), &params, "1s", &["--batch-rows", "500"]).status.success());
    let journal = ck.path().join("torn/progress");
    let seg = std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("progress.log."))
        .max()
        .unwrap();
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&seg)
        .unwrap()
        .write_all(b"1a2b3c4d {\"shard\":0,\"offsets\":{\"batch\":99,\"ran")
        .unwrap();
    f.produce(&s, 3000, 3000, None).await;
    let o = run_job("torn", ck.path(), &params, "1s", &["--batch-rows", "500"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cutting a torn line"), "{}", text(&o));
    // A third run reads every entry the second one wrote after the cut: it finds its
    // position there, so it reads nothing again, replays nothing and cuts nothing.
    let (sum, sum_s) = summary_arg(ck.path());
    let o = run_job("torn", ck.path(), &params, "1s", &["--summary-json", &sum_s]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("cutting a torn line"), "{}", text(&o));
    let j = summary(&sum);
    assert_eq!(
        (j["summary"]["messages_read"].as_u64(), j["summary"]["replayed_batches"].as_u64()),
        (Some(0), Some(0)),
        "{j}"
    );
    assert_eq!(s.count(&f.table).await, (6000, 6000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_the_same_job_exits_2_and_names_the_holder() {
    let s = stack();
    let f = s.fixture("twice", 1).await;
    f.produce(&s, 0, 2000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "");
    let first = spawn_job("twice", ck.path(), &params, &[]);
    let lock = ck.path().join("twice/LOCK");
    let t = Instant::now();
    while std::fs::read_to_string(&lock).unwrap_or_default().trim() != first.id().to_string() {
        assert!(t.elapsed() < Duration::from_secs(30), "the first job never took its lock");
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = run_job("twice", ck.path(), &params, "1s", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains(&format!("process {} holds", first.id())), "{}", text(&o));
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    assert_eq!(wait_with_timeout(first, Duration::from_secs(30)).status.code(), Some(0));
    assert!(run_job("twice", ck.path(), &params, "1s", &[]).status.success());
    assert_eq!(s.count(&f.table).await, (2000, 2000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_the_checkpoint_does_not_know_starts_at_its_earliest_offset() {
    // "Added while the job was stopped" without a broker call: the checkpoint forgets
    // partition 1, and the restart must read it from its earliest offset, not from
    // kafkaReadOffset=latest (partitions added by CreatePartitions while a job runs are
    // tests/it/broker.rs).
    let s = stack();
    let f = s.fixture("newpart", 2).await;
    f.produce(&s, 0, 1000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "").replace("kafkaReadOffset=earliest", "kafkaReadOffset=latest");
    // First run (latest): reads nothing, remembers partitions 0 and 1.
    assert!(run_job("newpart", ck.path(), &params, "1s", &[]).status.success());
    std::fs::write(ck.path().join("newpart/partitions.json"), "[0]").unwrap();
    let (sum, sum_s) = summary_arg(ck.path());
    let o = run_job("newpart", ck.path(), &params, "1s", &["--summary-json", &sum_s]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&sum)["summary"]["reliability"]["partitions_discovered"], 1);
    let (rows, _) = s.count(&f.table).await;
    assert_eq!(rows, 500, "partition 1's 500 messages, none of partition 0's (it was at latest)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_dead_letter_table_gets_its_own_stream() {
    let s = stack();
    let f = s.fixture("dlqswap", 1).await;
    f.produce(&s, 0, 1000, Some(100)).await;
    let ck = tempfile::tempdir().unwrap();
    assert!(run_job("dlqswap", ck.path(), &f.params(&s, &format!("outputDeadletterTable={}", f.dlq)), "1s", &[])
        .status
        .success());
    let other = flexrun::bigquery::TableRef { table: format!("{}_2", f.dlq.table), ..f.dlq.clone() };
    f.produce(&s, 1000, 1000, Some(100)).await;
    let o = run_job("dlqswap", ck.path(), &f.params(&s, &format!("outputDeadletterTable={other}")), "1s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        flexrun::local::count_rows(&s.bq, &f.dlq, None).await.unwrap().0,
        10,
        "the first table keeps its rows and gets no more"
    );
    assert_eq!(
        flexrun::local::count_rows(&s.bq, &other, None).await.unwrap().0,
        10,
        "the new table gets the new dead letters"
    );
    assert_eq!(s.count(&f.table).await, (1980, 1980));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_job_sees_the_backlog_from_its_checkpoint_not_the_whole_topic() {
    let s = stack();
    let f = s.fixture("backlog", 2).await;
    f.produce(&s, 0, 4000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "");
    assert!(run_job("backlog", ck.path(), &params, "1s", &[]).status.success());
    // A quiet topic and kafkaReadOffset=earliest: the backlog must be 0, so no scale-up.
    let o = job_cmd_until_idle(
        "backlog",
        ck.path(),
        &params,
        "5s",
        &["--autoscaling-interval", "1s", "--max-workers", "2"],
    )
    .env("FLEXRUN_LOG", "info")
    .bounded();
    assert!(o.status.success(), "{}", text(&o));
    let ansi = regex::Regex::new("\x1b\\[[0-9;]*m").unwrap();
    let log = ansi.replace_all(&String::from_utf8_lossy(&o.stderr), "").into_owned();
    let backlogs: Vec<i64> = log
        .lines()
        .filter(|l| l.contains("autoscaler decision"))
        .filter_map(|l| l.split("backlog=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(!backlogs.is_empty(), "no autoscaler decisions logged: {log}");
    assert!(backlogs.iter().all(|b| *b == 0), "phantom backlog after a restart: {backlogs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_10_mb_is_refused_with_invalid_argument_as_documented() {
    let s = stack();
    let f = s.fixture("oversize", 1).await;
    let c = flexrun::bigquery::write::WriteClient::connect(&s.bq).await.unwrap();
    let stream = c.create_committed_stream(&f.table).await.unwrap();
    let schema = flexrun::local::demo_schema();
    let row = flexrun::kafka_to_bq::map::transform::Mapper::new(schema.clone(), 20_000_000)
        .map(&flexrun::local::seed_message(1, 42, 10_600_000))
        .unwrap();
    let mut conn = c.open(&stream, flexrun::bigquery::proto::descriptor(&schema, "Row")).await.unwrap();
    let e = conn.append(&[row], Some(0)).await.unwrap_err();
    assert!(!e.is_retryable(), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("invalid argument") && msg.contains("AppendRows request too large"), "{msg}");
}

/// Issue 27, item 3: a position past the end of a partition's log (a recreated topic,
/// a log cut short) is an error naming the partition under the default
/// `offsetGapPolicy=FAIL`, never a rewind to the earliest offset; under SKIP the job goes
/// on at the end, counted, and reads what is produced after. (The position is moved
/// past the end by editing the saved start, as a recreated topic would leave it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_position_past_the_end_of_the_log_stops_the_job_or_is_skipped() {
    let s = stack();
    let f = s.fixture("pastend", 1).await;
    let ck = tempfile::tempdir().unwrap();
    let latest = f.params(&s, "").replace("kafkaReadOffset=earliest", "kafkaReadOffset=latest");
    assert!(run_job("pastend", ck.path(), &latest, "1s", &[]).status.success());
    f.produce(&s, 0, 100, None).await;
    std::fs::write(ck.path().join("pastend/starts.json"), r#"{"0":500}"#).unwrap();
    let o = run_job("pastend", ck.path(), &latest, "1s", &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("/0 is at offset 500, past the end of its log (100)"), "{}", text(&o));
    assert_eq!(s.count(&f.table).await.0, 0, "nothing was rewound and re-read");
    let skip = format!("{latest},offsetGapPolicy=SKIP");
    let (sum, sum_s) = summary_arg(ck.path());
    let o = run_job("pastend", ck.path(), &skip, "1s", &["--summary-json", &sum_s]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&sum)["summary"]["reliability"]["partitions_past_end"], 1);
    f.produce(&s, 100, 10, None).await;
    let o = run_job("pastend", ck.path(), &skip, "1s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&f.table).await, (10, 10), "only what was produced after the skip");
}

/// Issue 27, item 3, while running: the consumers run with `auto.offset.reset=error`, so
/// a position the broker no longer holds reaches the job as AUTO_OFFSET_RESET instead of
/// a silent rewind. The failpoint moves the shard's first fetch 1,000 past the end (a
/// log cut short after the start-up check); the broker answers OFFSET_OUT_OF_RANGE.
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_lost_while_running_is_reported_not_rewound() {
    let s = stack();
    let f = s.fixture("cutshort", 1).await;
    f.produce(&s, 0, 100, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "");
    let o = job_cmd_until_idle("cutshort", ck.path(), &params, "3s", &[])
        .env("FAILPOINTS", "kafka::log_cut_short=return(1000)")
        .bounded();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("AUTO_OFFSET_RESET"), "the running path ran: {}", text(&o));
    assert!(text(&o).contains("/0 is at offset 1000, past the end of its log (100)"), "{}", text(&o));
    assert_eq!(s.count(&f.table).await.0, 0, "nothing was rewound and re-read");
    let ck = tempfile::tempdir().unwrap();
    let (sum, sum_s) = summary_arg(ck.path());
    let o = job_cmd_until_idle(
        "cutshort2",
        ck.path(),
        &format!("{params},offsetGapPolicy=SKIP"),
        "3s",
        &["--summary-json", &sum_s],
    )
    .env("FAILPOINTS", "kafka::log_cut_short=return(1000)")
    .bounded();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&sum)["summary"]["reliability"]["partitions_past_end"], 1);
    assert_eq!(s.count(&f.table).await.0, 0, "went on at the end: nothing re-read");
}
