//! One deterministic test per crash point of the exactly-once protocol (the table in
//! `runner/src/kafka_to_bq/mod.rs`): the job kills itself with SIGKILL exactly there
//! (a `fail` failpoint, built with `--features failpoints`), restarts, and the test
//! asserts no loss and no duplicate, counted in BigQuery, and that the recovery path
//! the point targets really ran (a replay, ALREADY_EXISTS answers, or neither).
#![cfg(all(feature = "failpoints", feature = "integration"))]

use crate::common::*;
use std::os::unix::process::ExitStatusExt;

/// Messages per test: 300, every 25th a bad one (12 dead-letter rows), in batches of
/// 100, so batch 2 has table rows and dead-letter rows and the crash hits it.
const MESSAGES: u64 = 300;
const BAD_EVERY: u64 = 25;

struct Outcome {
    replayed: u64,
    already_existed: u64,
    rows: (i64, i64),
    dlq_rows: i64,
}

/// Crash at `point` the `skip + 1`-th time it is reached, restart (with `then` as the
/// failpoints of the second run, if any), finish, and count.
async fn crash_then_recover(name: &str, point: &str, skip: u32, then: Option<&str>) -> Outcome {
    crash_alter_recover(name, (point, ""), skip, then, |_| {}).await
}

/// [`crash_then_recover`], with `alter` applied to the checkpoint directory between the
/// crash and the restart (to stand for what a power cut can lose), and `also` (more
/// failpoints, `;name=action` each) on the first run.
async fn crash_alter_recover(
    name: &str,
    (point, also): (&str, &str),
    skip: u32,
    then: Option<&str>,
    alter: impl FnOnce(&std::path::Path),
) -> Outcome {
    let s = stack();
    let f = s.fixture(name, 1).await;
    let p = f.produce(&s, 0, MESSAGES, Some(BAD_EVERY)).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, &format!("outputDeadletterTable={}", f.dlq));
    let extra = ["--batch-rows", "100"];
    let crash = job_cmd(name, ck.path(), &params, "2s", &extra)
        .env("FAILPOINTS", format!("{point}={skip}*off->return{also}"))
        .bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "the job did not die at {point}: {}", text(&crash));
    assert!(
        String::from_utf8_lossy(&crash.stderr).contains(&format!("crash point {point} reached")),
        "{}",
        text(&crash)
    );
    if let Some(second) = then {
        let again =
            job_cmd(name, ck.path(), &params, "2s", &extra).env("FAILPOINTS", format!("{second}=return")).bounded();
        assert_eq!(
            again.status.signal(),
            Some(libc::SIGKILL),
            "the recovery did not die at {second}: {}",
            text(&again)
        );
    }
    alter(ck.path());
    let sum = ck.path().join("summary.json");
    let o = run_job(name, ck.path(), &params, "2s", &[&extra[..], &["--summary-json", sum.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let j = summary(&sum);
    let (dlq_rows, _) = flexrun::local::count_rows(&s.bq, &f.dlq, None).await.unwrap();
    let out = Outcome {
        replayed: j["summary"]["replayed_batches"].as_u64().unwrap(),
        already_existed: j["summary"]["appends_already_existed"].as_u64().unwrap(),
        rows: s.count(&f.table).await,
        dlq_rows,
    };
    assert_eq!(out.rows, (p.good as i64, p.good as i64), "{point}: loss or duplicates in the table");
    assert_eq!(out.dlq_rows, p.bad as i64, "{point}: loss or duplicates in the dead-letter table");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_before_the_offset_log_starts_from_the_last_commit() {
    let o = crash_then_recover("cp_before_log", "eo::before_offset_log", 1, None).await;
    assert_eq!((o.replayed, o.already_existed), (0, 0), "nothing was logged, so nothing is replayed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_log_and_append_replays_and_appends_fresh() {
    let o = crash_then_recover("cp_after_log", "eo::after_offset_log", 1, None).await;
    assert_eq!((o.replayed, o.already_existed), (1, 0), "the logged batch is replayed; nothing of it had landed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_the_table_append_replays_with_already_exists_for_the_table_only() {
    let o = crash_then_recover("cp_after_main", "eo::after_main_append", 1, None).await;
    assert_eq!(
        (o.replayed, o.already_existed),
        (1, 1),
        "the table rows answer ALREADY_EXISTS, the dead-letter rows land now"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_before_the_commit_log_replays_with_already_exists_for_both_streams() {
    let o = crash_then_recover("cp_before_commit", "eo::before_commit_log", 1, None).await;
    assert_eq!((o.replayed, o.already_existed), (1, 2), "both appends had landed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_the_commit_log_continues_without_a_replay() {
    let o = crash_then_recover("cp_after_commit", "eo::after_commit_log", 1, None).await;
    assert_eq!((o.replayed, o.already_existed), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_recovery_is_recovered_by_the_next_start() {
    // First death after logging batch 2; the restart dies again in its replay, before
    // appending; the third start replays the same entry.
    let o = crash_then_recover("cp_in_replay", "eo::after_offset_log", 1, Some("eo::replay_before_append")).await;
    assert_eq!((o.replayed, o.already_existed), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_requests_of_a_large_batch_is_finished_by_the_replay() {
    // 300 rows of ~1 KB with requests of at most 100 KB: each batch of 100 goes out as
    // two requests, and the crash comes between the first two.
    let s = stack();
    let f = s.fixture("cp_requests", 1).await;
    f.produce(&s, 0, 300, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "");
    let extra = ["--batch-rows", "100", "--append-request-bytes", "100000"];
    let crash = job_cmd("cp_requests", ck.path(), &params, "2s", &extra)
        .env("FAILPOINTS", "eo::between_requests=return")
        .bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "{}", text(&crash));
    let sum = ck.path().join("summary.json");
    let o = run_job(
        "cp_requests",
        ck.path(),
        &params,
        "2s",
        &[&extra[..], &["--summary-json", sum.to_str().unwrap()]].concat(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let j = summary(&sum);
    assert_eq!(j["summary"]["replayed_batches"], 1);
    assert_eq!(j["summary"]["appends_already_existed"], 1, "the request that landed answers ALREADY_EXISTS: {j}");
    assert_eq!(s.count(&f.table).await, (300, 300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_bigquery_refuses_are_logged_so_a_crash_after_the_relog_replays_the_same_split() {
    let s = stack();
    let f = s.fixture("cp_relog", 1).await;
    let n = 200u64;
    f.produce(&s, 0, n, None).await;
    // The emulator refuses rows whose message contains this text (seeded, so the test
    // knows which): they must reach the dead-letter table once, the others the table once.
    let marker = "Qz";
    let refused = (0..n)
        .filter(|id| String::from_utf8_lossy(&flexrun::local::seed_message(*id, 42, 962)).contains(marker))
        .count() as i64;
    assert!(refused > 0 && refused < n as i64, "the marker picks some rows: {refused}");
    table_faults(&f.table, &format!(r#""reject_rows_containing": "{marker}""#));
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, &format!("outputDeadletterTable={}", f.dlq));
    let crash = job_cmd("cp_relog", ck.path(), &params, "2s", &["--batch-rows", "200"])
        .env("FAILPOINTS", "eo::after_relog_before_append=return")
        .bounded();
    let sum = ck.path().join("summary.json");
    let o = run_job(
        "cp_relog",
        ck.path(),
        &params,
        "2s",
        &["--batch-rows", "200", "--summary-json", sum.to_str().unwrap()],
    );
    reset_faults(&f.table);
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "{}", text(&crash));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&sum)["summary"]["replayed_batches"], 1);
    assert_eq!(s.count(&f.table).await, (n as i64 - refused, n as i64 - refused));
    let dl = s.rows(&format!("SELECT errorMessage FROM `{}.{}.{}`", f.dlq.project, f.dlq.dataset, f.dlq.table)).await;
    assert_eq!(dl.len() as i64, refused);
    assert!(dl.iter().all(|r| r[0].as_deref().unwrap_or_default().starts_with("BigQuery rejected the row")), "{dl:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_widened_between_crash_and_restart_replays_with_the_logged_schema() {
    let s = stack();
    let f = s.fixture("cp_widen", 1).await;
    f.produce(&s, 0, 300, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "");
    let extra = ["--batch-rows", "100"];
    let crash = job_cmd("cp_widen", ck.path(), &params, "2s", &extra)
        .env("FAILPOINTS", "eo::after_main_append=1*off->return")
        .bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "{}", text(&crash));
    // Widen the table as a user would (tables.patch with one more NULLABLE column).
    let c = flexrun::bigquery::rest::client(&s.bq).await.unwrap();
    let (p, d, t) = (&f.table.project, &f.table.dataset, &f.table.table);
    let mut table = c.table().get(p, d, t, None).await.unwrap();
    table
        .schema
        .fields
        .get_or_insert_with(Vec::new)
        .push(gcp_bigquery_client::model::table_field_schema::TableFieldSchema::string("note"));
    c.table().patch(p, d, t, table).await.unwrap();
    let widened = flexrun::bigquery::rest::table_schema(&c, &s.bq, &f.table).await.unwrap();
    assert_eq!(widened.columns.len(), 4, "the emulator took the ALTER TABLE");
    let sum = ck.path().join("summary.json");
    let o = run_job(
        "cp_widen",
        ck.path(),
        &params,
        "2s",
        &[&extra[..], &["--summary-json", sum.to_str().unwrap()]].concat(),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("replaying it with the logged schema"), "{}", text(&o));
    assert_eq!(
        std::fs::read_dir(ck.path().join("cp_widen/schemas")).unwrap().count(),
        2,
        "a copy of each schema is kept"
    );
    let j = summary(&sum);
    assert_eq!(
        (j["summary"]["replayed_batches"].as_u64(), j["summary"]["appends_already_existed"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(s.count(&f.table).await, (300, 300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_whose_logged_stream_was_finalized_is_reported_as_possibly_duplicated() {
    // The one case this protocol cannot keep exactly-once: the batch had landed on a
    // stream that is now closed. The test shows that it is detected and reported.
    let s = stack();
    let f = s.fixture("cp_finalized", 1).await;
    f.produce(&s, 0, 300, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "");
    let extra = ["--batch-rows", "100"];
    let crash = job_cmd("cp_finalized", ck.path(), &params, "2s", &extra)
        .env("FAILPOINTS", "eo::before_commit_log=1*off->return")
        .bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "{}", text(&crash));
    let r = faults("", &format!(r#"{{"finalize_table": "{}.{}"}}"#, f.table.dataset, f.table.table));
    assert_eq!(r["finalized"].as_array().unwrap().len(), 1, "{r}");
    let sum = ck.path().join("summary.json");
    let o = run_job(
        "cp_finalized",
        ck.path(),
        &params,
        "2s",
        &[&extra[..], &["--summary-json", sum.to_str().unwrap()]].concat(),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("rows are now duplicated"), "{}", text(&o));
    let rel = &summary(&sum)["summary"]["reliability"];
    assert_eq!(
        (rel["streams_replaced"].as_u64(), rel["batches_possibly_duplicated"].as_u64()),
        (Some(1), Some(1)),
        "{rel}"
    );
    // Exactly the one replayed batch (100 rows) is there twice; nothing is lost.
    assert_eq!(s.count(&f.table).await, (400, 300));
}

/// Three rows where the split changes when the middle one is refused: requests of
/// 50,000 row bytes (`--append-request-bytes 100000`) take [r0] and [r1, r2]; with r1
/// gone, r0 and r2 would fit one request. Then three small rows, a batch of their own.
fn straddling_batches(marker: &str) -> Vec<Vec<u8>> {
    let row =
        |id: u64, msg: String| serde_json::json!({"id": id, "logStreamId": 1, "message": msg}).to_string().into_bytes();
    let mut v =
        vec![row(0, "a".repeat(30_000)), row(1, format!("{marker}{}", "b".repeat(30_000))), row(2, "c".repeat(1_000))];
    v.extend((3..6).map(|id| row(id, "d".repeat(100))));
    v
}

/// Run the straddling batches with row 1 refused, crashing at `crash` (if any), then
/// finish with `restart_bytes` as the request size; the table and dead-letter counts.
async fn refuse_mid_batch(
    name: &str,
    crash: Option<&str>,
    restart_bytes: &str,
    extra: &str,
) -> (i64, i64, serde_json::Value) {
    let s = stack();
    let f = s.fixture(name, 1).await;
    let marker = "RefuseMe";
    produce_values(&s, &f.topic, &straddling_batches(marker)).await;
    table_faults(&f.table, &format!(r#""reject_rows_containing": "{marker}""#));
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, &format!("outputDeadletterTable={}{extra}", f.dlq));
    let first = ["--batch-rows", "3", "--append-request-bytes", "100000"];
    if let Some(point) = crash {
        let o = job_cmd(name, ck.path(), &params, "2s", &first).env("FAILPOINTS", format!("{point}=return")).bounded();
        assert_eq!(o.status.signal(), Some(libc::SIGKILL), "the crash point was reached: {}", text(&o));
    }
    let sum = ck.path().join("summary.json");
    let then = ["--batch-rows", "3", "--append-request-bytes", restart_bytes, "--summary-json", sum.to_str().unwrap()];
    let o = run_job(name, ck.path(), &params, "2s", &then);
    reset_faults(&f.table);
    assert!(o.status.success(), "{}", text(&o));
    let (rows, distinct) = s.count(&f.table).await;
    assert_eq!(rows, distinct, "no duplicates");
    let (dl, _) = flexrun::local::count_rows(&s.bq, &f.dlq, None).await.unwrap();
    (rows, dl, summary(&sum))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_row_in_a_later_request_resends_only_what_did_not_land() {
    // Split from scratch after the refusal, [r0, r2] would go out at r0's offset, be
    // answered ALREADY_EXISTS, and r2 would be lost (and the next batch refused as
    // OUT_OF_RANGE).
    let (rows, dl, j) = refuse_mid_batch("eo_refuse_split", None, "100000", "").await;
    assert_eq!((rows, dl), (5, 1), "rows 0 and 2-5 in the table, row 1 dead-lettered: {j}");
    assert_eq!(j["summary"]["appends_already_existed"], 0, "the request that landed is not sent again: {j}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_after_a_refusal_sends_the_logged_requests_whatever_the_request_size_now() {
    // The crash comes after the batch was logged again without row 1; the restart asks
    // for 10 MB requests, which would put r0 and r2 in one request at r0's offset.
    let (rows, dl, j) =
        refuse_mid_batch("eo_refuse_replay", Some("eo::after_relog_before_append"), "10000000", "").await;
    assert_eq!(j["summary"]["replayed_batches"], 1, "{j}");
    assert_eq!(j["summary"]["appends_already_existed"], 1, "r0's request answers ALREADY_EXISTS, r2's lands: {j}");
    assert_eq!((rows, dl), (5, 1), "rows 0 and 2-5 in the table, row 1 dead-lettered: {j}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_resends_only_the_refused_requests_good_rows() {
    // On the `_default` stream there are no offsets to deduplicate: sending [r0, r2]
    // again after r1 was refused would write r0 twice.
    let (rows, dl, j) =
        refuse_mid_batch("alo_refuse_split", None, "100000", ",useStorageWriteApiAtLeastOnce=true").await;
    assert_eq!((rows, dl), (5, 1), "rows 0 and 2-5 once each, row 1 dead-lettered: {j}");
}

/// What a power cut can take from the progress journal, whose commit entries are not
/// fsynced (issue 29, step 7): shard 0's last commit entry, written to the page cache and
/// lost. Returns the batch it named.
fn lose_the_last_commit_entry(ck: &std::path::Path) -> u64 {
    let segment = newest_journal_segment(ck);
    let text = std::fs::read_to_string(&segment).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().rposition(|l| shard0_entry(l, "commit").is_some()).expect("a commit entry of shard 0");
    let batch = shard0_entry(lines.remove(at), "commit").unwrap()["batch"].as_u64().unwrap();
    let kept: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&segment, kept).unwrap();
    batch
}

/// The `kind` (`offsets`, `commit`) entry of journal line `line`, if it is shard 0's.
fn shard0_entry(line: &str, kind: &str) -> Option<serde_json::Value> {
    let json = line.split_once(' ').map_or(line, |(_, j)| j);
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    (v["shard"] == 0 && !v[kind].is_null()).then(|| v[kind].clone())
}

/// The newest non-empty segment of the job's progress journal
/// (`<ck>/<job>/progress/progress.log.NNNNNNNNNN`).
fn newest_journal_segment(ck: &std::path::Path) -> std::path::PathBuf {
    let journal = std::fs::read_dir(ck)
        .unwrap()
        .map(|e| e.unwrap().path().join("progress"))
        .find(|p| p.is_dir())
        .expect("the job's progress journal");
    std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("progress.log."))
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
        .max()
        .expect("a journal segment with entries")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_entry_lost_after_the_commit_costs_a_replay_answered_already_exists() {
    // Batch 2 committed, then its commit entry lost: the restart replays batch 2, and
    // both its table and dead-letter requests are answered ALREADY_EXISTS.
    let o = crash_alter_recover("cp_lost_commit", ("eo::after_commit_log", ""), 1, None, |ck| {
        lose_the_last_commit_entry(ck);
    })
    .await;
    assert_eq!((o.replayed, o.already_existed), (1, 2), "the batch whose commit was lost is replayed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_entry_lost_behind_a_later_offset_entry_loses_and_repeats_nothing() {
    // Batch 2 logged (its offsets fsynced), batch 1's commit entry lost: the logs disagree
    // by a batch. The restart replays batch 2 from its logged stream offsets and does not
    // read batch 1 again, whose rows had all landed before batch 2 was logged.
    let lost = std::sync::Mutex::new(None);
    let o = crash_alter_recover("cp_lost_commit_behind", ("eo::after_offset_log", ""), 1, None, |ck| {
        *lost.lock().unwrap() = Some(lose_the_last_commit_entry(ck));
    })
    .await;
    assert!(lost.lock().unwrap().is_some());
    assert_eq!((o.replayed, o.already_existed), (1, 0), "only the logged batch is replayed; nothing of it had landed");
}

/// The newest offset entry of the job's shard 0, as JSON.
fn last_offset_entry(ck: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(newest_journal_segment(ck)).unwrap();
    text.lines().rev().find_map(|l| shard0_entry(l, "offsets")).expect("an offset entry of shard 0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_logged_by_an_older_binary_is_verified_with_its_own_digest() {
    // The first run logs digests over the rows' bytes, as binaries before issue 29 did
    // (failpoint eo::log_row_bytes_digest), and dies after batch 2's table append. The
    // restart takes row digests from CRCs for new batches, but must verify the logged
    // batch the old way: a mismatch would stop the job instead of replaying it.
    let logged = std::sync::Mutex::new(serde_json::Value::Null);
    let o = crash_alter_recover(
        "cp_older_digest",
        ("eo::after_main_append", ";eo::log_row_bytes_digest=return"),
        1,
        None,
        |ck| *logged.lock().unwrap() = last_offset_entry(ck),
    )
    .await;
    let e = logged.into_inner().unwrap();
    for slot in [&e["main"], &e["dlq"]] {
        assert!(slot["digest"].is_u64(), "the crashed batch was logged with a digest: {e}");
        assert!(slot.get("digest_kind").is_none(), "and it is the older kind (no digest_kind): {e}");
    }
    assert_eq!((o.replayed, o.already_existed), (1, 1), "the replay was verified and its table rows already existed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_entries_take_their_digest_from_row_crcs() {
    let logged = std::sync::Mutex::new(serde_json::Value::Null);
    let o = crash_alter_recover("cp_crc_digest", ("eo::after_main_append", ""), 1, None, |ck| {
        *logged.lock().unwrap() = last_offset_entry(ck)
    })
    .await;
    let e = logged.into_inner().unwrap();
    for slot in [&e["main"], &e["dlq"]] {
        assert!(slot["digest"].is_u64() && slot["digest_kind"] == "row_crcs", "{e}");
    }
    assert_eq!((o.replayed, o.already_existed), (1, 1));
}

/// A shard of two partitions whose logged batch read only one of them: the replay reads
/// partition 0's range, then the shard goes on with both. Found by the lifecycle
/// checker: the other partition's queue was split off only for the partitions the replay
/// read, so partition 1's records reached the worker's main queue, which no shard reads,
/// and were never written ("a message reached the worker consumer's main queue").
#[tokio::test]
async fn a_replay_of_a_batch_that_read_one_of_the_shards_partitions_goes_on_with_all_of_them() {
    let s = stack();
    let f = s.fixture("cp_onepart", 2).await;
    let to = |p: i32, ids: std::ops::Range<u64>| {
        let topic = f.topic.clone();
        async move {
            use rdkafka::producer::{FutureProducer, FutureRecord};
            let prod: FutureProducer =
                rdkafka::ClientConfig::new().set("bootstrap.servers", &stack().kafka).create().unwrap();
            for i in ids {
                let v = format!(r#"{{"id": {i}}}"#);
                let r = FutureRecord::<(), str>::to(&topic).payload(&v).partition(p);
                answer("produce", prod.send(r, CALL_LIMIT)).await.map_err(|(e, _)| e).unwrap();
            }
        }
    };
    to(0, 0..50).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "numStorageWriteApiStreams=1");
    let crash =
        job_cmd("onepart", ck.path(), &params, "2s", &[]).env("FAILPOINTS", "eo::after_offset_log=return").bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "{}", text(&crash));
    to(1, 50..80).await;
    let sum = ck.path().join("summary.json");
    let o = run_job("onepart", ck.path(), &params, "2s", &["--summary-json", sum.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&sum)["summary"]["replayed_batches"], 1, "the logged batch was replayed");
    assert!(!text(&o).contains("main queue"), "{}", text(&o));
    assert_eq!(s.count(&f.table).await, (80, 80), "both partitions, every record once");
}

/// A partition added while a shard's batch is logged but not committed: the replay's
/// logged positions do not name it. Found by the lifecycle checker: the shard took the
/// replayed batch's positions as all of its own, left the new partition out of its
/// assignment and never read it.
#[tokio::test]
async fn a_partition_added_under_a_logged_batch_is_read_after_the_replay() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let s = stack();
    let f = s.fixture("cp_newpart", 1).await;
    f.produce(&s, 0, 40, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "numStorageWriteApiStreams=1");
    let crash =
        job_cmd("newpart", ck.path(), &params, "2s", &[]).env("FAILPOINTS", "eo::after_offset_log=return").bounded();
    assert_eq!(crash.status.signal(), Some(libc::SIGKILL), "{}", text(&crash));
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        flexrun::kafka::Connection::plaintext(&s.kafka).client("an admin client", &[]).unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(std::time::Duration::from_secs(30)));
    let r =
        answer("create partitions", admin.create_partitions(&[NewPartitions::new(&f.topic, 2)], &opts)).await.unwrap();
    r[0].as_ref().map_err(|e| format!("{e:?}")).unwrap();
    let prod: FutureProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", &s.kafka).create().unwrap();
    for i in 100..130u64 {
        let v = format!(r#"{{"id": {i}}}"#);
        let rec = FutureRecord::<(), str>::to(&f.topic).payload(&v).partition(1);
        answer("produce", prod.send(rec, CALL_LIMIT)).await.map_err(|(e, _)| e).unwrap();
    }
    let sum = ck.path().join("summary.json");
    let o = run_job("newpart", ck.path(), &params, "2s", &["--summary-json", sum.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let j = summary(&sum);
    assert_eq!(j["summary"]["replayed_batches"], 1, "{j}");
    assert_eq!(j["summary"]["reliability"]["partitions_discovered"], 1, "{j}");
    assert_eq!(s.count(&f.table).await, (70, 70), "the replayed batch and the new partition, every record once");
}
