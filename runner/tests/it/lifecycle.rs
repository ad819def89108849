//! Jobs as Dataflow users manage them, against real running jobs on the local stack:
//! two jobs listed, one's --max-num-workers raised in flight (and it scales), one
//! drained, the other cancelled and restarted with nothing lost or duplicated.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use std::path::Path;
use std::time::{Duration, Instant};

fn jobs(ck: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["dataflow", "jobs"];
    all.extend_from_slice(args);
    all.extend(["--checkpoint-dir", ck.to_str().unwrap()]);
    flexrun(&all).bounded()
}

fn json(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", text(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

/// The state of the job named `name` in `jobs list`.
fn state(ck: &Path, name: &str) -> Option<String> {
    let list = json(&jobs(ck, &["list", "--format", "json"]));
    list.as_array().unwrap().iter().rev().find(|j| j["name"] == name).map(|j| j["state"].as_str().unwrap().to_string())
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    assert!(eventually(limit, &mut ok), "{what}: not within {limit:?}");
}

fn eventually(limit: Duration, ok: &mut impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !ok() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    true
}

fn exit_within(child: &mut std::process::Child, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        assert!(start.elapsed() < limit, "the job did not exit within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test]
async fn two_jobs_are_listed_scaled_in_flight_drained_cancelled_and_resumed() {
    let s = stack();
    let (a, b) = (s.fixture("lifea", 4).await, s.fixture("lifeb", 4).await);
    let n = 20_000;
    a.produce(&s, 0, n, None).await;
    b.produce(&s, 0, n, None).await;
    let ck = tempfile::tempdir().unwrap();
    // ~200 msg/s per worker, so the backlog lasts and the autoscaler wants more
    // workers than the ceiling of 1 allows.
    let slow = [
        "--worker-capacity",
        "200KB/s",
        "--autoscaling-policy",
        "ds2",
        "--autoscaling-interval",
        "1s",
        "--max-workers",
        "1",
        "--batch-rows",
        "500",
    ];
    let mut ja = spawn_job("life-a", ck.path(), &a.params(&s, ""), &slow);
    let mut jb = spawn_job("life-b", ck.path(), &b.params(&s, ""), &slow);
    wait_for("both jobs listed as running", Duration::from_secs(60), || {
        state(ck.path(), "life-a").as_deref() == Some("JOB_STATE_RUNNING")
            && state(ck.path(), "life-b").as_deref() == Some("JOB_STATE_RUNNING")
    });
    let table = String::from_utf8(jobs(ck.path(), &["list"]).stdout).unwrap();
    assert!(table.starts_with("JOB_ID") && table.contains("life-a") && table.contains("Running"), "{table}");

    // Raise life-a's ceiling in flight: it scales to 3 within a few 1 s intervals.
    let o = jobs(ck.path(), &["update-options", "life-a", "--max-num-workers", "3"]);
    assert!(o.status.success(), "{}", text(&o));
    let mut last = serde_json::Value::Null;
    let scaled = eventually(Duration::from_secs(20), &mut || {
        last = json(&jobs(ck.path(), &["describe", "life-a", "--format", "json"]));
        last["status"]["current_num_workers"] == 3
    });
    assert!(scaled, "life-a did not reach 3 workers within 20 s: {last:#}");
    assert_eq!(last["status"]["max_num_workers"], 3);
    let events = last["status"]["autoscaling_events"].to_string();
    assert!(
        events.contains("options updated: workers 1..3") && events.contains("Resizing worker pool from 1 to 3"),
        "{events}"
    );
    let id = last["job"]["id"].as_str().unwrap().to_string();
    assert!(id.len() > 20 && id.as_bytes()[4] == b'-' && id.as_bytes()[10] == b'_', "Dataflow's id shape: {id}");

    // A floor above the ceiling is refused, and nothing changes.
    let o = jobs(ck.path(), &["update-options", &id, "--min-num-workers", "5"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("above --max-num-workers=3"), "{}", text(&o));
    let after = json(&jobs(ck.path(), &["describe", &id, "--format", "json"]));
    assert_eq!(
        (&after["status"]["min_num_workers"], &after["status"]["max_num_workers"]),
        (&last["status"]["min_num_workers"], &last["status"]["max_num_workers"]),
        "the refused update changed neither limit: {after:#}"
    );
    assert_eq!(after["status"]["max_num_workers"], 3);
    assert!(after["status"]["min_num_workers"].is_u64(), "{after:#}");

    // Drain life-a (by id): it finishes in-flight data and exits 0.
    let o = jobs(ck.path(), &["drain", &id]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("Started draining"), "{}", text(&o));
    assert_eq!(exit_within(&mut ja, Duration::from_secs(60)), Some(0));
    assert_eq!(state(ck.path(), "life-a").as_deref(), Some("JOB_STATE_DRAINED"));
    // A registered job exports by id: its template, parameters and name, for Dataflow.
    let o = flexrun(&["export", &id, "--checkpoint-dir", ck.path().to_str().unwrap(), "--format", "json"]).bounded();
    let e = json(&o);
    let body = &e["rest"]["body"]["launchParameter"];
    assert_eq!(body["jobName"], "life-a");
    assert!(body["containerSpecGcsPath"].as_str().unwrap().ends_with("/flex/Kafka_to_BigQuery_Flex"));
    let topic_param = format!("KAFKA_BOOTSTRAP_ADDRESS:9092;{}", a.topic);
    assert_eq!(body["parameters"]["readBootstrapServerAndTopic"], topic_param.as_str(), "{e:#}");
    let o = jobs(ck.path(), &["drain", "life-a"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no longer running"), "{}", text(&o));

    // Cancel life-b: it stops at once; a restart finishes it exactly once.
    let o = jobs(ck.path(), &["cancel", "life-b"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(exit_within(&mut jb, Duration::from_secs(30)), Some(130));
    assert_eq!(state(ck.path(), "life-b").as_deref(), Some("JOB_STATE_CANCELLED"));
    let (before, _) = s.count(&b.table).await;
    assert!(before < n as i64, "cancelled before the end: {before} rows");
    let o = run_job("life-b", ck.path(), &b.params(&s, ""), "3s", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&b.table).await, (n as i64, n as i64), "every message once");
    assert_eq!(state(ck.path(), "life-b").as_deref(), Some("JOB_STATE_DRAINED"), "the restart is the latest record");

    let o = jobs(ck.path(), &["describe", "no-such-job"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no job \"no-such-job\""), "{}", text(&o));
}

/// The templates without the worker pool register too: a rate-to-stats job is listed,
/// described with its one worker, refuses update-options (it has nothing to scale),
/// drains on request with exit 0, and a second process under its name is refused.
#[test]
fn a_rate_to_stats_job_is_listed_refuses_scaling_and_drains() {
    let ck = tempfile::tempdir().unwrap();
    let ckp = ck.path().to_str().unwrap();
    let args = ["--template", "rate-to-stats", "--job-name", "rts", "--checkpoint-dir", ckp];
    let mut job = flexrun(&args)
        .args(["--parameters", "rowsPerSecond=2000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("rate-to-stats listed as running", Duration::from_secs(30), || {
        state(ck.path(), "rts").as_deref() == Some("JOB_STATE_RUNNING")
    });
    let d = json(&jobs(ck.path(), &["describe", "rts", "--format", "json"]));
    assert_eq!(d["job"]["template"], "rate-to-stats", "{d:#}");
    assert_eq!(d["status"]["current_num_workers"], 1, "{d:#}");
    let o = jobs(ck.path(), &["update-options", "rts", "--max-num-workers", "4"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("fixed number of workers"), "{}", text(&o));
    let second = flexrun(&args).args(["--parameters", "rowsPerSecond=10,messagesLimit=10"]).bounded();
    assert_eq!(second.status.code(), Some(2), "one process per job: {}", text(&second));
    let o = jobs(ck.path(), &["drain", "rts"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(exit_within(&mut job, Duration::from_secs(30)), Some(0));
    assert_eq!(state(ck.path(), "rts").as_deref(), Some("JOB_STATE_DRAINED"));
    // A finished job keeps its record and its summary.
    let d = json(&jobs(ck.path(), &["describe", "rts", "--format", "json"]));
    assert!(d["job"]["summary"]["records"].as_u64().unwrap() > 0, "{d:#}");
    assert!(d["job"]["end_time"].is_string(), "{d:#}");
}
