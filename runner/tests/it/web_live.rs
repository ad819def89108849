//! A running job with `--web`: its dashboard API and /metrics show live data.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use std::time::{Duration, Instant};

/// The value of `name{job="<job>"...}` in a Prometheus text exposition.
fn metric(text: &str, name: &str, job: &str) -> Option<f64> {
    let label = format!("job=\"{job}\"");
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Poll /metrics for up to 60 s until its text passes `want`; the last text read.
fn wait_for_metrics_text(addr: &str, want: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < deadline {
        last = http_get(addr, "/metrics").unwrap_or_default();
        if want(&last) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    last
}

/// Poll /metrics for up to 60 s until `name` for `job` passes `want`; its value.
fn wait_for_metric(addr: &str, name: &str, job: &str, want: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    while Instant::now() < deadline {
        last = http_get(addr, "/metrics").and_then(|m| metric(&m, name, job));
        if let Some(v) = last.filter(|v| want(*v)) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{name} for {job} never passed its check within 60 s (last value {last:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_publishes_its_dashboard_and_metrics() {
    let s = stack();
    let f = s.fixture("web", 4).await;
    // About 10 s of work at the 4 MB/s worker capacity below, then traffic throughout: the
    // checks below wait for the written count to grow twice, which a job that had already
    // drained a one-off backlog could never show (this failed once under load).
    f.produce(&s, 0, 40_000, None).await;
    let traffic = BackgroundProducer::start(&s, &f);
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
    let wanted = [
        "job_current_num_vcpus{job=\"webjob\"} 2",
        "job_backlog_elements{job=\"webjob\"}",
        "job_stage_end_to_end_latencies{job=\"webjob\",quantile=\"0.99\",stage=\"end_to_end\"}",
        "job_partition_backlog_elements{job=\"webjob\",partition=\"3\"}",
        "job_max_worker_instances_limit{job=\"webjob\"}",
        "job_data_watermark_age{job=\"webjob\"}",
        "job_system_lag{job=\"webjob\"}",
    ];
    // /metrics shows the latest point; one from an interval in which no batch finished
    // has no stage latencies, so poll for a point that has everything.
    let metrics = wait_for_metrics_text(&addr, |m| wanted.iter().all(|w| m.contains(w)));
    for want in wanted {
        assert!(metrics.contains(want), "missing {want}:\n{metrics}");
    }
    assert!(http_get(&addr, "/jobs/webjob").unwrap().contains("Job webjob"));
    // The values move with the job, not only the names: rows written grows and never
    // runs ahead of the table, workers match the pool's vCPUs, latency is measured.
    let w1 = wait_for_metric(&addr, "job_bigquery_write_count", "webjob", |v| v > 0.0);
    let w2 = wait_for_metric(&addr, "job_bigquery_write_count", "webjob", |v| v > w1);
    let (rows, _) = s.count(&f.table).await;
    assert!(w2 <= rows as f64, "the dashboard counts {w2} rows written, the table holds {rows}");
    let m = http_get(&addr, "/metrics").unwrap();
    let workers = metric(&m, "job_active_worker_instances", "webjob").unwrap();
    let vcpus = metric(&m, "job_current_num_vcpus", "webjob").unwrap();
    assert!(workers >= 1.0 && vcpus == 2.0 * workers, "e2-standard-2 workers: {workers} workers, {vcpus} vCPUs");
    let read = metric(&m, "job_elements_produced_count", "webjob").unwrap();
    assert!(read >= w2, "messages read ({read}) cover the rows written ({w2})");
    // From the point that had stage latencies (after traffic).
    let p99 = metrics
        .lines()
        .find(|l| {
            l.starts_with("job_stage_end_to_end_latencies{job=\"webjob\",quantile=\"0.99\",stage=\"end_to_end\"}")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap();
    assert!(p99 > 0.0, "end-to-end p99 after traffic: {p99}");
    assert!(traffic.stop().await > 0, "the background producer produced");
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
    // Traffic throughout: a point carries the stages measured in its own second, and
    // a backlog read in one go may close its last window seconds later (CI failed on
    // that once), so keep reads and window closes happening in every interval.
    let traffic = BackgroundProducer::start(&s, &f);
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
    let wanted = [
        "job_stage_end_to_end_latencies{job=\"webgcs\",quantile=\"0.99\",stage=\"read\"}",
        "job_stage_end_to_end_latencies{job=\"webgcs\",quantile=\"0.99\",stage=\"end_to_end\"}",
        "job_data_watermark_age{job=\"webgcs\"}",
        "job_system_lag{job=\"webgcs\"}",
    ];
    // /metrics shows the latest point only, so poll for one that has every line.
    let metrics = wait_for_metrics_text(&addr, |m| wanted.iter().all(|w| m.contains(w)));
    for want in wanted {
        assert!(metrics.contains(want), "missing {want}:\n{metrics}");
    }
    assert!(traffic.stop().await > 0, "the background producer produced");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_with_timeout(child, Duration::from_secs(60));
    assert!(o.status.success(), "{}", text(&o));
}

/// A producer that keeps adding 200 messages to a fixture's topic every 200 ms until
/// stopped, so that a job has something to read in every interval of its points.
struct BackgroundProducer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

impl BackgroundProducer {
    fn start(s: &Stack, f: &Fixture) -> BackgroundProducer {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (kafka, topic, partitions, flag) = (s.kafka.clone(), f.topic.clone(), f.partitions, stop.clone());
        let task = tokio::spawn(async move {
            let mut next = 0;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let call = flexrun::local::produce(&kafka, &topic, partitions, next, 200, None, 962);
                answer("produce", call).await.expect("produce");
                next += 200;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            next
        });
        BackgroundProducer { stop, task }
    }

    /// Stop producing; how many messages were produced.
    async fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.expect("the producer task")
    }
}
