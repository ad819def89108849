//! Asynchronous progress tracking on the real stack: a crash replays at most about
//! one checkpoint interval, and loses nothing.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

mod common;

use common::*;
use std::time::Duration;

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
    std::thread::sleep(Duration::from_millis(4500));
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
    // At most one interval (plus the batch in flight) of ~4,000 msg/s is replayed.
    assert!(dups <= 4_000 + 2_000, "replayed {dups} messages: more than one 1 s interval's worth");
}
