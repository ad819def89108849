//! End to end in headless Chromium (Debian's package; scripts/test.sh installs it):
//! the real server on loopback, the estimate form submitted and the job page loaded,
//! the rendered results and the charts checked in the final DOM, screenshots saved
//! under `test-artifacts/`.

// Needs headless Chromium (scripts/test.sh installs it and turns this feature on).
#![cfg(feature = "browser")]

use flexrun_estimator as est;
use flexrun_web::{serve, DecisionView, JobRegistry, MetricsPoint, StageLatency};
use std::path::PathBuf;
use std::process::Command;

fn chromium() -> String {
    for c in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if std::path::Path::new(c).exists() {
            return c.to_string();
        }
    }
    panic!("headless Chromium is needed for this test: scripts/test.sh installs Debian's chromium package");
}

fn artifacts() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../test-artifacts");
    std::fs::create_dir_all(&d).unwrap();
    d
}

const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=8000",
    "--window-size=1280,1600",
];

/// Load `url` and return the DOM after the page's scripts ran; also save a screenshot.
fn render(url: &str, shot: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = FLAGS.iter().map(|s| s.to_string()).collect();
    args.push(format!("--user-data-dir={}", profile.path().display()));
    let dom = Command::new(chromium()).args(&args).arg("--dump-dom").arg(url).output().expect("run chromium");
    assert!(dom.status.success(), "chromium failed: {}", String::from_utf8_lossy(&dom.stderr));
    let path = artifacts().join(shot);
    let s = Command::new(chromium())
        .args(&args)
        .arg(format!("--screenshot={}", path.display()))
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(s.status.success() && path.exists(), "screenshot failed: {}", String::from_utf8_lossy(&s.stderr));
    String::from_utf8(dom.stdout).unwrap()
}

fn job() -> JobRegistry {
    let jobs = JobRegistry::default();
    jobs.register("demo-job", "kafka-to-bq", "exactly-once");
    for i in 0..60 {
        let t = i as f64;
        let mut p = MetricsPoint {
            t_s: t,
            workers: if i < 20 { 2 } else { 7 },
            target_workers: if i < 20 { 2 } else { 7 },
            vcpus: 4.0,
            throughput_msgs: 2000.0 + 80.0 * t,
            backlog_elements: (600.0 - 10.0 * t).max(0.0) as u64,
            utilization: 0.6 + 0.003 * t,
            min_workers: 1,
            max_workers: 10,
            partition_backlog: [("0".to_string(), 12_345u64), ("1".to_string(), 0)].into_iter().collect(),
            estimated_backlog_processing_s: 4.5,
            data_watermark_age_s: 3.5,
            system_lag_s: 4.25,
            ..Default::default()
        };
        for (k, st) in ["read", "transform", "write", "end_to_end"].iter().enumerate() {
            let base = 4.0 + k as f64 * 10.0 + (t / 10.0).sin() * 2.0;
            p.stages.insert(st.to_string(), StageLatency { p50_ms: base, p95_ms: base * 2.0, p99_ms: base * 3.0 });
        }
        jobs.push_point("demo-job", p);
    }
    jobs.push_decision(
        "demo-job",
        DecisionView {
            t_s: 20.0,
            from: 2,
            to: 7,
            rationale: "High backlog".into(),
            detail: "true rate 1960 rec/s per worker".into(),
            description: "Autoscaling: Raised the number of workers to 7 so that the pipeline can catch up with its backlog and keep up with its input rate.".into(),
        },
    );
    // A kafka-to-gcs job with window state: the state section shows.
    jobs.register("state-job", "kafka-to-gcs", "exactly-once");
    for i in 0..20u64 {
        let p = MetricsPoint {
            t_s: i as f64,
            workers: 2,
            target_workers: 2,
            state: Some(flexrun_web::StatePoint {
                backend: "lsm".into(),
                kind: "incremental".into(),
                state_bytes: ((i + 1) * 10) << 20,
                state_keys: 2000,
                state_records: (i + 1) * 1000,
                rss_bytes: 200 << 20,
                heap_bytes: 50 << 20,
                cpu_s: i as f64 * 0.5,
                checkpoints: i / 3,
                last_checkpoint_bytes: 3 << 20,
                last_checkpoint_s: 0.4,
                last_checkpoint_sync_s: 0.02,
                last_checkpoint_age_s: Some((i % 3) as f64),
                recovery_s: 1.25,
            }),
            ..Default::default()
        };
        jobs.push_point("state-job", p);
    }
    jobs
}

fn api_estimate(q: &[(&str, &str)]) -> flexrun_web::api::EstimateResponse {
    let q = q.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    flexrun_web::api::estimate_from_query(&q).expect("a valid query")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_estimate_page_and_a_job_page_render_with_charts() {
    let (addr, _h) = serve("127.0.0.1:0", job()).await.unwrap();
    let base = format!("http://{addr}");
    let dom = tokio::task::spawn_blocking({
        let base = base.clone();
        move || {
            render(
                &format!(
                    "{base}/estimate?throughput=100&unit=MiB/s&mode=exactly-once&machine_type=e2-standard-2&submit=1"
                ),
                "estimate.png",
            )
        }
    })
    .await
    .unwrap();
    assert!(dom.contains(r#"data-result="ok""#), "the form was submitted and answered:\n{dom}");
    assert!(dom.contains(r#"<b id="workers">7</b>"#), "7 workers billed");
    // The page shows the API's whole-pipeline figures (their arithmetic is tested in the
    // estimator): BigQuery's lines are on it, and the total is theirs plus Dataflow's.
    let api = api_estimate(&[("throughput", "100MiB/s"), ("mode", "exactly-once")]);
    let e = &api.estimate;
    assert!(e.totals.lines.iter().any(|l| l.line == est::Line::BigqueryIngestion && l.per_hour > e.per_hour / 2.0));
    assert!(dom.contains(&format!(r#"<b id="per_hour">${:.2}</b>"#, e.per_hour)), "the whole pipeline's total:\n{dom}");
    assert!(dom.contains("Streaming Engine compute units"));
    assert!(dom.contains(r#"data-line="bigquery-ingestion""#) && dom.contains(r#"data-line="bigquery-storage""#));
    assert!(dom.contains(&e.totals.summary), "the sentence naming the largest line");
    assert!(dom.contains(r#"data-chart-drawn="1""#), "the cost chart drew");
    let parts: usize = api.modes.iter().map(|m| 2 * m.totals.lines.len()).sum();
    assert!(parts >= 12, "two modes x two months x at least three lines");
    assert!(dom.contains(&format!(r#"data-stack-drawn="{parts}""#)), "every line of every bar was drawn:\n{dom}");
    assert!(
        dom.contains(r#"href="/simulate?throughput=100MiB%2Fs&amp;mode=exactly-once""#),
        "the simulate link carries the form:\n{dom}"
    );

    // Issue 52: 1 GiB/s into a us-central1 dataset names the Storage Write quota; into US,
    // nothing.
    let dom = tokio::task::spawn_blocking({
        let base = base.clone();
        move || {
            render(
                &format!("{base}/estimate?throughput=1&unit=GiB/s&dataset_location=us-central1&submit=1"),
                "estimate-limits.png",
            )
        }
    })
    .await
    .unwrap();
    assert!(dom.contains(r#"data-limit="storage-write-throughput""#), "the quota is named on the page:\n{dom}");
    assert!(dom.contains("multi-region"), "with what to do");

    let dom = tokio::task::spawn_blocking({
        let base = base.clone();
        move || {
            render(
                &format!("{base}/simulate?throughput=100MiB/s&mode=exactly-once&hours=2&p99_limit=10s&submit=1"),
                "simulate.png",
            )
        }
    })
    .await
    .unwrap();
    assert!(dom.contains(r#"data-result="ok""#), "the sweep ran and answered:\n{dom}");
    assert!(dom.contains(r#"data-front-drawn="1""#), "the front was drawn");
    // Issue 52 item 5: the cost axis is zoomed to the points, not drawn from 0, and each
    // point names its configuration, cost and p99 on hover.
    let y_min: f64 = dom
        .split(r#"data-y-min=""#)
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|v| v.parse().ok())
        .expect("the chart states its cost axis");
    assert!(y_min > 0.0, "the cost axis starts near the cheapest point, not at 0:\n{dom}");
    assert!(dom.contains("/month, p99 ") && dom.contains("(Pareto front)"), "hover labels:\n{dom}");
    assert!(dom.contains("Cheapest with p99") || dom.contains("No configuration has p99"), "{dom}");

    let dom = tokio::task::spawn_blocking({
        let base = base.clone();
        move || render(&format!("{base}/estimate"), "estimate-first-load.png")
    })
    .await
    .unwrap();
    assert!(
        dom.contains(r#"data-result="ok""#) && dom.contains(r#"data-chart-drawn="1""#),
        "the default estimate shows on first load:\n{dom}"
    );
    assert!(dom.contains(r#"<b id="workers">7</b>"#), "100 MiB/s exactly-once by default");
    assert!(dom.contains(r#"data-stack-drawn=""#), "the stacked bill shows on first load");

    let dom = tokio::task::spawn_blocking({
        let base = base.clone();
        move || render(&format!("{base}/simulate"), "simulate-first-load.png")
    })
    .await
    .unwrap();
    assert!(
        dom.contains(r#"data-result="ok""#) && dom.contains(r#"data-front-drawn="1""#),
        "the default sweep shows on first load, without pressing Simulate:\n{dom}"
    );

    let dom = tokio::task::spawn_blocking({
        let base = base.clone();
        move || render(&format!("{base}/estimate?throughput=lots&unit=MiB/s&submit=1"), "estimate-error.png")
    })
    .await
    .unwrap();
    assert!(dom.contains(r#"data-result="error""#), "{dom}");
    assert!(dom.contains("throughput: invalid rate"), "the error names the field");

    let dom = tokio::task::spawn_blocking({
        let base = base.clone();
        move || render(&format!("{base}/jobs/demo-job"), "job.png")
    })
    .await
    .unwrap();
    assert!(dom.contains(r#"data-points="60""#), "{dom}");
    assert!(dom.contains(r#"data-charts-drawn="8""#), "4 latency charts + workers, throughput, backlog, utilization");
    assert!(dom.contains("High backlog") && dom.contains("2 → 7"), "the decision is listed");
    assert!(
        dom.contains("TARGET_NUM_WORKERS_CHANGED")
            && dom.contains("so that the pipeline can catch up with its backlog"),
        "in Dataflow's words"
    );
    assert!(dom.contains("<td>0</td><td>12,345</td><td>"), "the backlog by partition:\n{dom}");
    assert!(
        dom.contains("estimated backlog processing time: 4.5 s · data watermark age: 3.5 s · system latency: 4.3 s"),
        "{dom}"
    );
    assert!(!dom.contains(r#"<section id="state-section">"#), "no state section for a stateless job");

    let dom =
        tokio::task::spawn_blocking(move || render(&format!("{base}/jobs/state-job"), "job-state.png")).await.unwrap();
    assert!(dom.contains(r#"<section id="state-section">"#), "the state section is shown:\n{dom}");
    assert!(dom.contains(r#"data-charts-drawn="10""#), "8 charts + state and checkpoint:\n{dom}");
    assert!(
        dom.contains("lsm backend, incremental checkpoints · 20,000 records in 2000 keys · 6 checkpoints · last checkpoint 1 s ago · recovery 1.25 s"),
        "{dom}"
    );
}
