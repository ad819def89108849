//! Asynchronous progress tracking on the real stack: a crash replays at most about
//! one checkpoint interval, and loses nothing.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_under_async_progress_replays_at_most_an_interval_and_loses_nothing() {
    let s = stack();
    let f = s.fixture("asyncprog", 4).await;
    let n = 60_000;
    f.produce(&s, 0, n, None).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "useStorageWriteApiAtLeastOnce=true");
    // 4 MB/s per worker, one worker: about 4,000 messages/s, so the crash lands mid-topic.
    let extra = [
        "--async-progress-tracking",
        "--progress-checkpoint-interval",
        "1s",
        "--worker-capacity",
        "4MB/s",
        "--autoscaling-algorithm",
        "NONE",
        "--batch-rows",
        "500",
    ];
    let mut child = spawn_job("asyncprog", ck.path(), &params, &extra);
    // Kill once a quarter of the topic is in, so the crash lands mid-topic on any load.
    wait_for_rows(&s, &f.table, n as i64 / 4, &mut child).await;
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    let (before, _) = s.count(&f.table).await;
    assert!(before > 0 && before < n as i64, "the crash should land mid-topic: {before} rows");
    let o = run_job("asyncprog", ck.path(), &params, "3s", &extra);
    assert!(o.status.success(), "{}", text(&o));
    let (rows, distinct) = s.count(&f.table).await;
    let dups = rows - distinct;
    eprintln!(
        "async progress, 1 s interval, ~4,000 msg/s: {rows} rows, {distinct} distinct, {dups} replayed after the crash"
    );
    assert_eq!(distinct, n as i64, "nothing lost");
    // What makes progress asynchronous: the commit log holds an entry per interval, not
    // per batch, so consecutive entries skip batches (synchronous progress logs every one).
    let gaps = commit_log_batch_gaps(&ck.path().join("asyncprog"));
    let mean = gaps.iter().sum::<u64>() as f64 / gaps.len().max(1) as f64;
    eprintln!("commit-log entries skip {mean:.1} batches on average over {} pairs", gaps.len());
    // Synchronous progress gives exactly 1 between every pair; at ~8 batches a second
    // and one entry a second, far more (1.9 was seen on a loaded machine).
    assert!(!gaps.is_empty() && mean > 1.2, "commit entries follow batches one by one: {gaps:?}");
    // At most one interval (plus the batch in flight) of ~4,000 msg/s is replayed.
    assert!(dups <= 4_000 + 2_000, "replayed {dups} messages: more than one 1 s interval's worth");
}

/// For every shard, the differences between consecutive batch ids of its commit entries
/// in the pipeline's journal (lines `<crc32c hex> {"shard": n, "commit": {..}}`, in
/// segments `progress/progress.log.NNNNNNNNNN`).
fn commit_log_batch_gaps(job_dir: &std::path::Path) -> Vec<u64> {
    let mut by_shard: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    for seg in std::fs::read_dir(job_dir.join("progress")).unwrap().map(|e| e.unwrap().path()) {
        if !seg.file_name().unwrap().to_string_lossy().starts_with("progress.log.") {
            continue;
        }
        for l in std::fs::read_to_string(&seg).unwrap().lines() {
            let json = l.split_once(' ').map_or(l, |(_, j)| j);
            let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else { continue };
            if let (Some(shard), Some(batch)) = (v["shard"].as_u64(), v["commit"]["batch"].as_u64()) {
                by_shard.entry(shard).or_default().push(batch);
            }
        }
    }
    let mut gaps = Vec::new();
    for batches in by_shard.values_mut() {
        batches.sort_unstable();
        batches.dedup();
        gaps.extend(batches.windows(2).map(|w| w[1] - w[0]));
    }
    gaps
}
