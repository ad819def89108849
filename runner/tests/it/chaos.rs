//! The long chaos suite (ignored by default; `scripts/chaos.sh` runs it and turns its
//! `CHAOS|...` lines into the table in RELIABILITY.md). Each scenario runs the real
//! job against the real broker and emulator and prints one row: scenario, messages,
//! faults, rows, distinct ids, lost, duplicates, seconds from the last fault to a job
//! that has written everything.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

fn row(scenario: &str, messages: u64, faults: &str, rows: i64, distinct: i64, recover_s: f64) {
    let lost = messages as i64 - distinct;
    let dups = rows - distinct;
    eprintln!("CHAOS|{scenario}|{messages}|{faults}|{rows}|{distinct}|{lost}|{dups}|{recover_s:.1}");
}

fn seed() -> u64 {
    std::env::var("FLEXRUN_KILL_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| rand::rng().random())
}

/// Start the job `kills` times and SIGKILL it at a random moment each time, then let
/// it finish. Returns (kills landed, seconds of the final run).
fn kill_loop(job: &str, ck: &std::path::Path, params: &str, kills: u32, seed: u64) -> (u32, f64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut landed = 0;
    for _ in 0..kills {
        let mut child = spawn_job(job, ck, params, &["--batch-rows", "2000"]);
        std::thread::sleep(Duration::from_millis(rng.random_range(500..3000)));
        if child.try_wait().unwrap().is_none() {
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            landed += 1;
        }
        let _ = child.wait();
    }
    let t = Instant::now();
    let o = run_job(job, ck, params, "3s", &["--batch-rows", "2000"]);
    assert!(o.status.success(), "{}", text(&o));
    (landed, t.elapsed().as_secs_f64() - 3.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_20_sigkills_exactly_once_200k() {
    let s = stack();
    let f = s.fixture("chaos_eo", 8).await;
    f.produce(&s, 0, 200_000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let sd = seed();
    let (landed, rec) = kill_loop("chaos_eo", ck.path(), &f.params(&s, ""), 20, sd);
    let (rows, distinct) = s.count(&f.table).await;
    row("exactly-once, 20 random SIGKILLs", 200_000, &format!("{landed} SIGKILLs (seed {sd})"), rows, distinct, rec);
    assert_eq!((rows, distinct), (200_000, 200_000), "seed {sd}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_20_sigkills_at_least_once_200k() {
    let s = stack();
    let f = s.fixture("chaos_alo", 8).await;
    f.produce(&s, 0, 200_000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let sd = seed();
    let (landed, rec) = kill_loop("chaos_alo", ck.path(), &f.params(&s, "useStorageWriteApiAtLeastOnce=true"), 20, sd);
    let (rows, distinct) = s.count(&f.table).await;
    row("at-least-once, 20 random SIGKILLs", 200_000, &format!("{landed} SIGKILLs (seed {sd})"), rows, distinct, rec);
    assert_eq!(distinct, 200_000, "seed {sd}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_broker_sigkill_and_restart_mid_run() {
    let s = stack();
    let f = s.fixture("chaos_broker", 4).await;
    f.produce(&s, 0, 100_000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let child = spawn_job("chaos_broker", ck.path(), &f.params(&s, ""), &["--idle-timeout", "10s"]);
    std::thread::sleep(Duration::from_secs(3));
    let restart = std::env::var("FLEXRUN_RESTART_BROKER").expect("FLEXRUN_RESTART_BROKER: run via scripts/chaos.sh");
    let st = std::process::Command::new("bash").arg("-c").arg(&restart).status().unwrap();
    assert!(st.success(), "broker restart failed");
    let t = Instant::now();
    let o = wait_with_timeout(child, Duration::from_secs(600));
    let (rows, distinct) = s.count(&f.table).await;
    row(
        "broker SIGKILL + restart mid-run",
        100_000,
        "tansu SIGKILLed and restarted",
        rows,
        distinct,
        t.elapsed().as_secs_f64() - 10.0,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!((rows, distinct), (100_000, 100_000));
}

async fn fault_window(name: &str, body: &str, label: &str, window_s: u64) {
    let s = stack();
    let f = s.fixture(name, 4).await;
    f.produce(&s, 0, 100_000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let child = spawn_job(name, ck.path(), &f.params(&s, ""), &["--idle-timeout", "5s"]);
    std::thread::sleep(Duration::from_secs(2));
    faults("", body);
    let t = Instant::now();
    let o = wait_with_timeout(child, Duration::from_secs(window_s + 600));
    faults("/reset", "");
    let (rows, distinct) = s.count(&f.table).await;
    row(
        label,
        100_000,
        &format!("{window_s} s of injected errors"),
        rows,
        distinct,
        t.elapsed().as_secs_f64() - window_s as f64 - 5.0,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!((rows, distinct), (100_000, 100_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_bigquery_unavailable_for_30s() {
    fault_window("chaos_unavail", r#"{"fail_for_s": 30, "code": "UNAVAILABLE"}"#, "BigQuery UNAVAILABLE for 30 s", 30)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_resource_exhausted_for_2_minutes() {
    fault_window(
        "chaos_quota",
        r#"{"fail_for_s": 120, "code": "RESOURCE_EXHAUSTED"}"#,
        "RESOURCE_EXHAUSTED for 2 min",
        120,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_large_messages() {
    let s = stack();
    let f = s.fixture("chaos_big", 1).await;
    flexrun::local::produce(&s.kafka, &f.topic, 1, 0, 1000, None, 1_000_000).await.unwrap();
    flexrun::local::produce_large(&s.kafka, &f.topic, 1000, 9_900_000).await.unwrap();
    flexrun::local::produce_large(&s.kafka, &f.topic, 1001, 15_000_000).await.unwrap();
    let ck = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let o = run_job("chaos_big", ck.path(), &f.params(&s, &format!("outputDeadletterTable={}", f.dlq)), "3s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let (rows, distinct) = s.count(&f.table).await;
    let (dl, _) = flexrun::local::count_rows(&s.bq, &f.dlq, None).await.unwrap();
    row(
        "1,000 × 1 MB, one 9.9 MB, one 15 MB",
        1002,
        &format!("{dl} dead-lettered (too large for a request)"),
        rows + dl,
        distinct + dl,
        t.elapsed().as_secs_f64() - 3.0,
    );
    assert_eq!(rows + dl, 1002);
}
