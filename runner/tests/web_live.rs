//! A running job with `--web`: its dashboard API and /metrics show live data.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

mod common;

use common::*;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_publishes_its_dashboard_and_metrics() {
    let s = stack();
    let f = s.fixture("web", 4).await;
    f.produce(&s, 0, 20_000, None).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let ck = tempfile::tempdir().unwrap();
    let child = spawn_job(
        "webjob",
        ck.path(),
        &f.params(&s, ""),
        &["--web", &addr, "--worker-capacity", "4MB/s", "--batch-rows", "1000"],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut job = serde_json::Value::Null;
    while Instant::now() < deadline {
        if let Some(body) = http_get(&addr, "/api/jobs/webjob/metrics") {
            if let Ok(j) = serde_json::from_str::<serde_json::Value>(&body) {
                if j["points"].as_array().is_some_and(|p| {
                    p.iter()
                        .any(|p| p["elements_read"].as_u64().unwrap_or(0) > 0 && p["stages"]["end_to_end"].is_object())
                }) {
                    job = j;
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(job.is_object(), "the job's series never showed progress");
    assert_eq!(job["template"], "kafka-to-bq");
    let first = &job["points"][0];
    assert_eq!(first["partition_backlog"].as_object().map(|m| m.len()), Some(4), "a backlog per partition: {first}");
    assert!(first["max_workers"].as_u64().unwrap_or(0) >= 1, "the limits are published: {first}");
    let metrics = http_get(&addr, "/metrics").unwrap();
    for want in [
        "job_current_num_vcpus{job=\"webjob\"} 2",
        "job_backlog_elements{job=\"webjob\"}",
        "job_stage_end_to_end_latencies{job=\"webjob\",quantile=\"0.99\",stage=\"end_to_end\"}",
        "job_partition_backlog_elements{job=\"webjob\",partition=\"3\"}",
        "job_max_worker_instances_limit{job=\"webjob\"}",
        "job_data_watermark_age{job=\"webjob\"}",
        "job_system_lag{job=\"webjob\"}",
    ] {
        assert!(metrics.contains(want), "missing {want}:\n{metrics}");
    }
    assert!(http_get(&addr, "/jobs/webjob").unwrap().contains("Job webjob"));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_with_timeout(child, Duration::from_secs(60));
    assert!(o.status.success(), "{}", text(&o));
}
