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

/// A free local address for `--web`.
fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("127.0.0.1:{port}")
}

/// Poll `job`'s series for up to 60 s; the series and its first point that `want`
/// accepts (Null, Null when none did).
fn wait_for_point(
    addr: &str,
    job: &str,
    want: impl Fn(&serde_json::Value) -> bool,
) -> (serde_json::Value, serde_json::Value) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let series = http_get(addr, &format!("/api/jobs/{job}/metrics"))
            .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok());
        if let Some(j) = series {
            if let Some(p) = j["points"].as_array().and_then(|ps| ps.iter().find(|p| want(p)).cloned()) {
                return (j, p);
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    (serde_json::Value::Null, serde_json::Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_publishes_its_dashboard_and_metrics() {
    let s = stack();
    let f = s.fixture("web", 4).await;
    f.produce(&s, 0, 20_000, None).await;
    let addr = free_addr();
    let ck = tempfile::tempdir().unwrap();
    let child = spawn_job(
        "webjob",
        ck.path(),
        &f.params(&s, ""),
        &["--web", &addr, "--worker-capacity", "4MB/s", "--batch-rows", "1000"],
    );
    let (job, _) = wait_for_point(&addr, "webjob", |p| {
        p["elements_read"].as_u64().unwrap_or(0) > 0 && p["stages"]["end_to_end"].is_object()
    });
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

/// kafka-to-gcs with `--web`: its points carry the stages' latencies (read, write,
/// end-to-end), the watermark and the window state, and /metrics exports them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_kafka_to_gcs_job_publishes_latencies_and_state() {
    let s = stack();
    let f = s.fixture("webgcs", 2).await;
    f.produce(&s, 0, 5_000, None).await;
    let addr = free_addr();
    let ck = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let p = format!(
        "readBootstrapServerAndTopic={};{},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=JSON,outputDirectory={}/,windowDuration=1s,numShards=2",
        s.kafka,
        f.topic,
        out.path().display()
    );
    let child = flexrun(&["--template", "kafka-to-gcs", "--job-name", "webgcs", "--checkpoint-dir"])
        .arg(ck.path())
        .args(["--web", &addr, "--checkpoint-interval", "1s", "--idle-timeout", "30s", "--parameters", &p])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let has = |p: &serde_json::Value, s: &str| p["stages"][s]["p99_ms"].as_f64().is_some_and(|v| v > 0.0);
    let (_, point) = wait_for_point(&addr, "webgcs", |p| has(p, "read") && has(p, "end_to_end"));
    assert!(point.is_object(), "no point with read and end-to-end latencies within 60 s");
    assert!(point["state"]["backend"] == "heap", "the default backend's state is on the point: {point}");
    let metrics = http_get(&addr, "/metrics").unwrap();
    for want in [
        "job_stage_end_to_end_latencies{job=\"webgcs\",quantile=\"0.99\",stage=\"read\"}",
        "job_data_watermark_age{job=\"webgcs\"}",
        "job_system_lag{job=\"webgcs\"}",
    ] {
        assert!(metrics.contains(want), "missing {want}:\n{metrics}");
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_with_timeout(child, Duration::from_secs(60));
    assert!(o.status.success(), "{}", text(&o));
}
