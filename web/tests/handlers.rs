//! Handlers without a socket: the router answers requests in-process.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flexrun_web::{router, JobRegistry, MetricsPoint, StageLatency};
use http_body_util::BodyExt;
use tower::ServiceExt;

async fn get(jobs: &JobRegistry, uri: &str) -> (StatusCode, String) {
    let r = router(jobs.clone()).oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
    let status = r.status();
    let body = r.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// Issue 52: the API names the limits a pipeline crosses, by dataset location, and a
/// location BigQuery does not have is a 400 naming the field.
#[tokio::test]
async fn estimate_api_names_the_limits_by_dataset_location() {
    let jobs = JobRegistry::default();
    let (s, body) = get(&jobs, "/api/estimate?throughput=1GiB/s&dataset_location=us-central1").await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(j["estimate"]["limits"][0]["limit"], "storage-write-throughput", "{body}");
    let (_, body) = get(&jobs, "/api/estimate?throughput=1GiB/s").await;
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(j["estimate"]["limits"].as_array().map(Vec::len), Some(0), "US is the default: {body}");
    let (s, body) = get(&jobs, "/api/estimate?throughput=1GiB/s&dataset_location=moon").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("dataset_location"), "{body}");
}

#[tokio::test]
async fn estimate_api_answers_and_names_bad_fields() {
    let jobs = JobRegistry::default();
    let (s, body) = get(&jobs, "/api/estimate?throughput=100MiB/s&mode=exactly-once").await;
    assert_eq!(s, StatusCode::OK, "{body}");
    // The Managed Kafka read placement takes two words; anything else names the field.
    let (bad, why) = get(&jobs, "/api/estimate?throughput=100MiB/s&kafka=managed&kafka_reads=sideways").await;
    assert_eq!(bad, StatusCode::BAD_REQUEST, "{why}");
    assert!(why.contains("kafka_reads") && why.contains("leader or local-follower"), "{why}");
    let (ok, body2) = get(&jobs, "/api/estimate?throughput=100MiB/s&kafka=managed&kafka_reads=local-follower").await;
    assert_eq!(ok, StatusCode::OK, "{body2}");
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    // 102,400 messages/s of 1 KiB, each 49.37362 vCPU-µs + 33.92622 vCPU-ns per byte, on
    // 2-vCPU workers at Google's 70 % mean CPU.
    let want = 102_400.0 * (49.37362e-6 + 33.92622e-9 * 1024.0) / (2.0 * 0.7);
    assert!((j["estimate"]["workers_exact"].as_f64().unwrap() - want).abs() < 1e-6, "{want}: {body}");
    // Seed 001's worked example, as the page states it: 63 x 0.1 and 58 x 0.1.
    let rule = &j["estimate"]["rule_of_thumb"];
    let near = |k: &str, v: f64| (rule[k].as_f64().unwrap() - v).abs() < 1e-9;
    assert!(near("factor", 0.1) && near("workers", 6.3) && near("secu_per_hour", 5.8), "{rule}");
    assert_eq!(j["curve"].as_array().unwrap().len(), 20);
    let modes = j["modes"].as_array().unwrap();
    assert_eq!(modes.len(), 2, "exactly-once and at-least-once side by side");
    let total = |m: &serde_json::Value| m["totals"]["month_1"].as_f64().unwrap();
    assert!(total(&modes[0]) > total(&modes[1]), "exactly-once costs more CPU: {body}");
    let lines: Vec<&str> =
        j["estimate"]["totals"]["lines"].as_array().unwrap().iter().map(|l| l["line"].as_str().unwrap()).collect();
    assert!(lines.contains(&"bigquery-ingestion") && lines.contains(&"bigquery-storage"), "{lines:?}");
    let (s, body) = get(&jobs, "/api/estimate?throughput=100MiB/s&lines=dataflow").await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(j["estimate"]["totals"]["lines"].as_array().unwrap().len(), 1, "only the line asked for: {body}");
    // A CDC table: its apply jobs are a line of their own, 730 h × 4 × 500 GiB at $6.25/TiB.
    let (s, body) = get(&jobs, "/api/estimate?throughput=100MiB/s&cdc_table_size=500GiB&cdc_max_staleness=15m").await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    let cdc =
        j["estimate"]["totals"]["lines"].as_array().unwrap().iter().find(|l| l["line"] == "bigquery-cdc").cloned();
    let month = cdc.map(|l| l["month_1"].as_f64().unwrap()).unwrap_or_default();
    assert!((month - 730.0 * 4.0 * 500.0 / 1024.0 * 6.25).abs() < 1e-6, "{body}");
    for (q, field) in [
        ("throughput=100parsecs/s", "throughput"),
        ("", "throughput"),
        ("throughput=-1MiB/s", "throughput"),
        ("throughput=1MiB/s&mode=twice", "mode"),
        ("throughput=1MiB/s&machine_type=m9", "machine_type"),
        ("throughput=1MiB/s&commitment=forever", "commitment"),
        ("throughput=1msg/s&message_size=huge", "message_size"),
        ("throughput=1MiB/s&baseline=mine", "baseline"),
        ("throughput=1MiB/s&colour=red", "colour"),
        ("throughput=1MiB/s&region=europe-west1", "region"),
        ("throughput=1MiB/s&kafka=borrowed", "kafka"),
        ("throughput=1MiB/s&kafka_retention=-1h", "kafka_retention"),
        ("throughput=1MiB/s&bq_retention=-1d", "bq_retention"),
        ("throughput=1MiB/s&bq_partitioning=hourly", "bq_partitioning"),
        ("throughput=1MiB/s&cdc_table_size=500GiB", "cdc_table_size"),
        ("throughput=1MiB/s&cdc_table_size=big&cdc_max_staleness=15m", "cdc_table_size"),
        ("throughput=1MiB/s&cdc_table_size=1GiB&cdc_max_staleness=soon", "cdc_max_staleness"),
        ("throughput=1MiB/s&lines=dataflow,snowflake", "lines"),
        ("throughput=1MiB/s&row_bytes=-5", "row_bytes"),
        ("throughput=1MiB/s&message_size=-5", "message_size"),
    ] {
        let (s, body) = get(&jobs, &format!("/api/estimate?{q}")).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{q}: {body}");
        let j: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(j["field"], field, "{q}: {body}");
        assert!(!j["error"].as_str().unwrap().is_empty());
    }
}

fn point(t: f64) -> MetricsPoint {
    let mut p = MetricsPoint {
        t_s: t,
        workers: 3,
        target_workers: 4,
        vcpus: 6.0,
        throughput_msgs: 1000.0,
        backlog_elements: 42,
        backlog_bytes: 42_000,
        utilization: 0.7,
        elements_read: 10,
        rows_written: 9,
        dead_lettered: 1,
        ..Default::default()
    };
    p.stages.insert("end_to_end".into(), StageLatency { p50_ms: 12.0, p95_ms: 30.0, p99_ms: 55.0 });
    p.events.insert("offsets_lost_to_retention".into(), 7);
    p.events.insert("retry_Unavailable".into(), 3);
    (p.min_workers, p.max_workers, p.estimated_backlog_processing_s, p.data_watermark_age_s) = (1, 9, 2.5, 7.5);
    p.system_lag_s = 9.25;
    (p.memory_budget_bytes, p.peak_rss_bytes) = (1 << 30, 96 << 20);
    p.partition_backlog.insert("3".into(), 40);
    p
}

#[tokio::test]
async fn jobs_api_and_prometheus_metrics() {
    let jobs = JobRegistry::default();
    let (_, body) = get(&jobs, "/api/jobs").await;
    assert_eq!(body, "[]");
    jobs.register("j1", "kafka-to-bq", "exactly-once");
    jobs.push_point("j1", point(1.0));
    jobs.push_point("j1", point(2.0));
    let (s, body) = get(&jobs, "/api/jobs/j1/metrics").await;
    assert_eq!(s, StatusCode::OK);
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(j["points"].as_array().unwrap().len(), 2);
    jobs.push_decision(
        "j1",
        flexrun_web::DecisionView {
            t_s: 5.0,
            from: 2,
            to: 6,
            rationale: "High backlog".into(),
            detail: "d".into(),
            description: "Autoscaling: Raised the number of workers to 6 so that the pipeline can catch up with its backlog and keep up with its input rate.".into(),
        },
    );
    let (s, body) = get(&jobs, "/api/jobs/j1/autoscaling").await;
    assert_eq!(s, StatusCode::OK);
    let ev: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ev[0]["event_type"], "TARGET_NUM_WORKERS_CHANGED");
    assert_eq!((ev[0]["current_num_workers"].as_u64(), ev[0]["target_num_workers"].as_u64()), (Some(2), Some(6)));
    assert!(ev[0]["description"].as_str().unwrap().starts_with("Autoscaling: Raised the number of workers to 6"));
    assert_eq!(get(&jobs, "/api/jobs/nope/autoscaling").await.0, StatusCode::NOT_FOUND);
    let (s, body) = get(&jobs, "/api/jobs/nope/metrics").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(body.contains("no job"));
    let (_, m) = get(&jobs, "/metrics").await;
    for want in [
        "job_current_num_vcpus{job=\"j1\"} 6",
        "job_active_worker_instances{job=\"j1\"} 3",
        "job_target_worker_instances{job=\"j1\"} 4",
        "job_backlog_bytes{job=\"j1\"} 42000",
        "job_backlog_elements{job=\"j1\"} 42",
        "job_stage_end_to_end_latencies{job=\"j1\",quantile=\"0.99\",stage=\"end_to_end\"} 55",
        "job_reliability_events{event=\"offsets_lost_to_retention\",job=\"j1\"} 7",
        "job_reliability_events{event=\"retry_Unavailable\",job=\"j1\"} 3",
        "job_min_worker_instances_limit{job=\"j1\"} 1",
        "job_max_worker_instances_limit{job=\"j1\"} 9",
        "job_partition_backlog_elements{job=\"j1\",partition=\"3\"} 40",
        "job_partition_backlog_bytes{job=\"j1\",partition=\"3\"} 40000",
        "job_estimated_backlog_processing_time{job=\"j1\"} 2.5",
        "job_data_watermark_age{job=\"j1\"} 7.5",
        "job_system_lag{job=\"j1\"} 9.25",
        "job_memory_budget_bytes{job=\"j1\"} 1073741824",
        "process_peak_resident_memory_bytes{job=\"j1\"} 100663296",
    ] {
        assert!(m.contains(want), "missing {want} in\n{m}");
    }
    assert!(!m.contains("job_state_bytes"), "a stateless job has no state gauges");
    // A stateful job (kafka-to-gcs) adds its state and checkpoints, labelled with its
    // backend and checkpoint kind.
    jobs.register("g1", "kafka-to-gcs", "exactly-once");
    let mut p = point(3.0);
    p.state = Some(flexrun_web::StatePoint {
        backend: "lsm".into(),
        kind: "incremental".into(),
        state_bytes: 123_456,
        state_keys: 2000,
        state_records: 150,
        rss_bytes: 50_000_000,
        heap_bytes: 20_000_000,
        cpu_s: 4.5,
        checkpoints: 7,
        last_checkpoint_bytes: 4096,
        last_checkpoint_s: 0.25,
        last_checkpoint_sync_s: 0.01,
        last_checkpoint_age_s: Some(2.0),
        recovery_s: 1.5,
    });
    jobs.push_point("g1", p);
    let (_, m) = get(&jobs, "/metrics").await;
    for want in [
        "job_state_bytes{backend=\"lsm\",job=\"g1\",kind=\"incremental\"} 123456",
        "job_state_keys{backend=\"lsm\",job=\"g1\",kind=\"incremental\"} 2000",
        "process_resident_memory_bytes{backend=\"lsm\",job=\"g1\",kind=\"incremental\"} 50000000",
        "process_heap_bytes{backend=\"lsm\",job=\"g1\",kind=\"incremental\"} 20000000",
        "process_cpu_seconds_total{backend=\"lsm\",job=\"g1\",kind=\"incremental\"} 4.5",
        "job_checkpoints_total{backend=\"lsm\",job=\"g1\",kind=\"incremental\"} 7",
        "job_last_checkpoint_bytes{backend=\"lsm\",job=\"g1\",kind=\"incremental\"} 4096",
        "job_last_checkpoint_duration_seconds{backend=\"lsm\",job=\"g1\",kind=\"incremental\"} 0.25",
        "job_last_checkpoint_sync_duration_seconds{backend=\"lsm\",job=\"g1\",kind=\"incremental\"} 0.01",
        "job_last_checkpoint_age_seconds{backend=\"lsm\",job=\"g1\",kind=\"incremental\"} 2",
        "job_recovery_duration_seconds{backend=\"lsm\",job=\"g1\",kind=\"incremental\"} 1.5",
        "job_active_worker_instances{job=\"g1\"} 3",
    ] {
        assert!(m.contains(want), "missing {want} in\n{m}");
    }
}

#[tokio::test]
async fn pages_and_assets_are_served() {
    let jobs = JobRegistry::default();
    for (uri, want) in [
        ("/estimate", "Price a Kafka"),
        ("/jobs", "id=\"jobs\""),
        ("/jobs/some%20job", "Job some job"),
        ("/assets/uplot.js", "uPlot"),
    ] {
        let (s, body) = get(&jobs, uri).await;
        assert_eq!(s, StatusCode::OK, "{uri}");
        assert!(body.contains(want), "{uri}");
    }
    let (_, body) = get(&jobs, "/jobs/%3Cscript%3E").await;
    assert!(!body.contains("<h1>Job <script>"), "the job id is escaped");
}

#[test]
fn the_grafana_dashboard_queries_only_metrics_we_export() {
    let d: serde_json::Value = serde_json::from_str(include_str!("../grafana/flexrun-dashboard.json")).unwrap();
    let exported = [
        flexrun_web::metrics::JOB_CURRENT_NUM_VCPUS,
        flexrun_web::metrics::JOB_ACTIVE_WORKER_INSTANCES,
        flexrun_web::metrics::JOB_TARGET_WORKER_INSTANCES,
        flexrun_web::metrics::JOB_AGGREGATED_WORKER_UTILIZATION,
        flexrun_web::metrics::JOB_BACKLOG_BYTES,
        flexrun_web::metrics::JOB_BACKLOG_ELEMENTS,
        flexrun_web::metrics::JOB_ELEMENTS_PRODUCED_COUNT,
        flexrun_web::metrics::JOB_BIGQUERY_WRITE_COUNT,
        flexrun_web::metrics::JOB_DEAD_LETTER_COUNT,
        flexrun_web::metrics::JOB_STAGE_END_TO_END_LATENCIES,
        flexrun_web::metrics::JOB_THROUGHPUT_ELEMENTS,
        flexrun_web::metrics::JOB_MIN_WORKER_INSTANCES_LIMIT,
        flexrun_web::metrics::JOB_MAX_WORKER_INSTANCES_LIMIT,
        flexrun_web::metrics::JOB_PARTITION_BACKLOG_ELEMENTS,
        flexrun_web::metrics::JOB_PARTITION_BACKLOG_BYTES,
        flexrun_web::metrics::JOB_ESTIMATED_BACKLOG_PROCESSING_TIME,
        flexrun_web::metrics::JOB_DATA_WATERMARK_AGE,
        flexrun_web::metrics::JOB_SYSTEM_LAG,
        flexrun_web::metrics::JOB_STATE_BYTES,
        flexrun_web::metrics::PROCESS_RESIDENT_MEMORY_BYTES,
        flexrun_web::metrics::PROCESS_HEAP_BYTES,
        flexrun_web::metrics::PROCESS_CPU_SECONDS_TOTAL,
        flexrun_web::metrics::JOB_LAST_CHECKPOINT_BYTES,
        flexrun_web::metrics::JOB_LAST_CHECKPOINT_DURATION,
        flexrun_web::metrics::JOB_LAST_CHECKPOINT_SYNC_DURATION,
        flexrun_web::metrics::JOB_LAST_CHECKPOINT_AGE,
    ];
    let re = regex_lite_names(&d);
    assert!(re.iter().any(|n| n.starts_with("process_")), "process metrics are read too: {re:?}");
    assert!(!re.is_empty());
    for name in re {
        assert!(exported.contains(&name.as_str()), "the dashboard queries {name}, which /metrics does not export");
    }
}

/// Metric names (job_... and process_...) used in the dashboard's queries.
fn regex_lite_names(d: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let e = t["expr"].as_str().unwrap();
            let starts = e.match_indices("job_").chain(e.match_indices("process_"));
            for (i, _) in starts {
                if i > 0 && (e.as_bytes()[i - 1].is_ascii_alphanumeric() || e.as_bytes()[i - 1] == b'_') {
                    continue;
                }
                let name: String = e[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                out.push(name);
            }
        }
    }
    out
}

#[tokio::test]
async fn simulate_api_sweeps_and_marks_the_front_and_the_choice() {
    let jobs = JobRegistry::default();
    let q =
        "throughput=20MiB/s&mode=at-least-once&partitions=64&hours=2&p99_limit=3s&profile=sine:amplitude=0.3,period=1h";
    let (s, body) = get(&jobs, &format!("/api/simulate?{q}")).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    let rows = j["configurations"].as_array().unwrap();
    assert_eq!(rows.len(), 3 * 3 * 2, "machine types × hints × policies");
    let pt = |r: &serde_json::Value| (r["cost_per_month"].as_f64().unwrap(), r["p99_ms"].as_f64().unwrap());
    for r in rows {
        let (c, l) = pt(r);
        let dominated = rows.iter().map(pt).any(|(oc, ol)| oc <= c && ol <= l && (oc < c || ol < l));
        assert_eq!(r["pareto"].as_bool().unwrap(), !dominated, "{r}");
    }
    assert_eq!(j["p99_limit_ms"], 3000.0);
    if let Some(i) = j["chosen"].as_u64() {
        let (cost, p99) = pt(&rows[i as usize]);
        assert!(p99 <= 3000.0);
        assert!(rows.iter().map(pt).filter(|(_, l)| *l <= 3000.0).all(|(c, _)| c >= cost));
    } else {
        assert!(rows.iter().map(pt).all(|(_, l)| l > 3000.0), "{body}");
    }
    let (again, _) = get(&jobs, &format!("/api/simulate?{q}")).await;
    assert_eq!(again, StatusCode::OK);
    for (q, field) in [
        ("throughput=lots", "throughput"),
        ("throughput=1MiB/s&message_size=huge", "message_size"),
        ("throughput=1MiB/s&mode=twice", "mode"),
        ("throughput=1MiB/s&partitions=0", "partitions"),
        ("throughput=1MiB/s&p99_limit=soon", "p99_limit"),
        ("throughput=1MiB/s&profile=zigzag", "profile"),
        ("throughput=1MiB/s&hours=1000", "hours"),
        ("throughput=1MiB/s&streams=0", "streams"),
        ("throughput=1MiB/s&colour=red", "colour"),
        ("throughput=1MiB/s&region=europe-west1", "region"),
        ("throughput=1MiB/s&kafka=borrowed", "kafka"),
        ("throughput=1MiB/s&kafka_retention=-1h", "kafka_retention"),
        ("throughput=1MiB/s&bq_retention=-1d", "bq_retention"),
        ("throughput=1MiB/s&bq_partitioning=hourly", "bq_partitioning"),
        ("throughput=1MiB/s&lines=dataflow,snowflake", "lines"),
        ("throughput=1MiB/s&row_bytes=-5", "row_bytes"),
        ("throughput=1MiB/s&message_size=-5", "message_size"),
        ("throughput=1MiB/s&dataset_location=moon", "dataset_location"),
    ] {
        let (s, body) = get(&jobs, &format!("/api/simulate?{q}")).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{q}: {body}");
        let j: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(j["field"], field, "{q}: {body}");
    }
}

/// Issue 52: each configuration names the Storage Write quota it crosses at 1 GiB/s into
/// us-central1, and is held to it; into US none is.
#[tokio::test]
async fn simulate_api_names_and_simulates_the_write_quota_by_dataset_location() {
    let jobs = JobRegistry::default();
    let rows = |body: &str| -> Vec<serde_json::Value> {
        let j: serde_json::Value = serde_json::from_str(body).unwrap();
        j["configurations"].as_array().unwrap().clone()
    };
    let q = "throughput=1GiB/s&message_size=1KiB&partitions=2000&hours=2&profile=constant";
    let (s, body) = get(&jobs, &format!("/api/simulate?{q}&dataset_location=us-central1")).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    for r in rows(&body) {
        let limits = r["limits"].as_array().unwrap();
        assert!(limits.iter().any(|l| l.as_str().unwrap().starts_with("Storage Write API throughput")), "{r}");
        assert_eq!(r["bottleneck"], "write-quota", "{r}");
    }
    let (s, body) = get(&jobs, &format!("/api/simulate?{q}&dataset_location=US")).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    for r in rows(&body) {
        assert!(r["limits"].as_array().unwrap().iter().all(|l| !l.as_str().unwrap().contains("Storage Write")), "{r}");
        assert_ne!(r["bottleneck"], "write-quota", "{r}");
    }
}

#[tokio::test]
async fn the_cost_page_links_to_the_simulate_view() {
    let jobs = JobRegistry::default();
    let (s, page) = get(&jobs, "/estimate").await;
    assert_eq!(s, StatusCode::OK);
    assert!(page.contains(r#"id="simulate-link""#) && page.contains(r#""/simulate?" + sq"#), "{page}");
    let (s, page) = get(&jobs, "/simulate").await;
    assert_eq!(s, StatusCode::OK);
    assert!(page.contains("/api/simulate?") && page.contains(r#"id="p99_limit""#), "{page}");
}

/// Issue 52 item 7: a request past the bound on simulated work is refused at once with a
/// 400 naming the fields, and nothing is simulated.
#[tokio::test]
async fn a_simulation_past_the_work_bound_is_refused_naming_the_fields() {
    let jobs = JobRegistry::default();
    let (s, body) = get(&jobs, "/api/simulate?throughput=100000GiB/s&hours=24&partitions=100000").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(j["field"], "hours, partitions", "{body}");
    assert!(j["error"].as_str().unwrap().contains("over the bound"), "{body}");
    assert_eq!(flexrun_web::api::simulations_running(), 0);
    assert!(flexrun_web::api::simulated_work(6.0, 1000) < flexrun_web::api::MAX_SIMULATED_WORK, "the default fits");
}

/// Issue 52 item 7: a client that goes away stops its simulation. The request's future is
/// dropped once the sweep is running (what hyper does on a disconnect); the sweep then
/// ends without finishing, counted as cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulation_whose_client_went_away_is_stopped() {
    use flexrun_web::api::{simulations_cancelled, simulations_running};
    let jobs = JobRegistry::default();
    let req = Request::get("/api/simulate?throughput=1GiB/s&hours=40&partitions=100").body(Body::empty()).unwrap();
    let mut call = Box::pin(router(jobs.clone()).oneshot(req));
    while simulations_running() == 0 {
        tokio::select! {
            r = &mut call => panic!("the sweep answered before it could be abandoned: {:?}", r.map(|r| r.status())),
            _ = tokio::task::yield_now() => {}
        }
    }
    drop(call);
    while simulations_running() > 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(simulations_cancelled(), 1, "the sweep stopped because its client went away");
}
