//! `/metrics` in Prometheus text format, named after Dataflow's job metrics
//! (`dataflow.googleapis.com/job/...`, reference §3.5) with `/` as `_`.

use crate::state::JobRegistry;
use prometheus::{Encoder, GaugeVec, Opts, Registry, TextEncoder};

/// vCPUs in use (workers × vCPUs per worker).
pub const JOB_CURRENT_NUM_VCPUS: &str = "job_current_num_vcpus";
/// Running workers.
pub const JOB_ACTIVE_WORKER_INSTANCES: &str = "job_active_worker_instances";
/// Workers the autoscaler wants.
pub const JOB_TARGET_WORKER_INSTANCES: &str = "job_target_worker_instances";
/// Mean worker utilization, 0 to 1.
pub const JOB_AGGREGATED_WORKER_UTILIZATION: &str = "job_aggregated_worker_utilization";
/// Bytes waiting at the source.
pub const JOB_BACKLOG_BYTES: &str = "job_backlog_bytes";
/// Messages waiting at the source.
pub const JOB_BACKLOG_ELEMENTS: &str = "job_backlog_elements";
/// Messages read so far.
pub const JOB_ELEMENTS_PRODUCED_COUNT: &str = "job_elements_produced_count";
/// Rows written to BigQuery so far.
pub const JOB_BIGQUERY_WRITE_COUNT: &str = "job_bigquery_write_count";
/// Rows written to the dead-letter table so far.
pub const JOB_DEAD_LETTER_COUNT: &str = "job_dead_letter_count";
/// Stage latency over the last interval, milliseconds, by stage and quantile.
pub const JOB_STAGE_END_TO_END_LATENCIES: &str = "job_stage_end_to_end_latencies";
/// Reliability counters so far, by event (`retry_<code>`, `streams_replaced`,
/// `batches_possibly_duplicated`, `offsets_lost_to_retention`, `partitions_discovered`).
pub const JOB_RELIABILITY_EVENTS: &str = "job_reliability_events";
/// The autoscaling floor in force.
pub const JOB_MIN_WORKER_INSTANCES_LIMIT: &str = "job_min_worker_instances_limit";
/// The autoscaling ceiling in force.
pub const JOB_MAX_WORKER_INSTANCES_LIMIT: &str = "job_max_worker_instances_limit";
/// Messages waiting in Kafka, by partition.
pub const JOB_PARTITION_BACKLOG_ELEMENTS: &str = "job_partition_backlog_elements";
/// Bytes waiting in Kafka, by partition (messages × the mean message size read).
pub const JOB_PARTITION_BACKLOG_BYTES: &str = "job_partition_backlog_bytes";
/// Seconds to drain the backlog at the current throughput.
pub const JOB_ESTIMATED_BACKLOG_PROCESSING_TIME: &str = "job_estimated_backlog_processing_time";
/// How far behind real time the committed data is, seconds.
pub const JOB_DATA_WATERMARK_AGE: &str = "job_data_watermark_age";
/// Dataflow's `job/system_lag`, seconds.
pub const JOB_SYSTEM_LAG: &str = "job_system_lag";
/// Messages per second read over the last interval.
pub const JOB_THROUGHPUT_ELEMENTS: &str = "job_throughput_elements_per_second";

/// The job's memory budget (`--memory-budget`), bytes.
pub const JOB_MEMORY_BUDGET_BYTES: &str = "job_memory_budget_bytes";
/// The process's peak resident set, bytes.
pub const PROCESS_PEAK_RESIDENT_MEMORY_BYTES: &str = "process_peak_resident_memory_bytes";

/// Bytes of window state.
pub const JOB_STATE_BYTES: &str = "job_state_bytes";
/// (window, key) pairs in window state.
pub const JOB_STATE_KEYS: &str = "job_state_keys";
/// The process's resident set, bytes.
pub const PROCESS_RESIDENT_MEMORY_BYTES: &str = "process_resident_memory_bytes";
/// The process's heap in use, bytes.
pub const PROCESS_HEAP_BYTES: &str = "process_heap_bytes";
/// The process's CPU seconds.
pub const PROCESS_CPU_SECONDS_TOTAL: &str = "process_cpu_seconds_total";
/// Checkpoints completed.
pub const JOB_CHECKPOINTS_TOTAL: &str = "job_checkpoints_total";
/// Bytes the latest checkpoint uploaded.
pub const JOB_LAST_CHECKPOINT_BYTES: &str = "job_last_checkpoint_bytes";
/// The latest checkpoint's duration, seconds.
pub const JOB_LAST_CHECKPOINT_DURATION: &str = "job_last_checkpoint_duration_seconds";
/// The latest checkpoint's synchronous part, seconds.
pub const JOB_LAST_CHECKPOINT_SYNC_DURATION: &str = "job_last_checkpoint_sync_duration_seconds";
/// Seconds since the latest checkpoint completed.
pub const JOB_LAST_CHECKPOINT_AGE: &str = "job_last_checkpoint_age_seconds";
/// Seconds the start spent restoring state.
pub const JOB_RECOVERY_DURATION: &str = "job_recovery_duration_seconds";

/// The state metrics: name, help, and how to read each from a [`crate::state::StatePoint`].
type StateRow = (&'static str, &'static str, fn(&crate::state::StatePoint) -> f64);

const STATE_ROWS: [StateRow; 11] = [
    (JOB_STATE_BYTES, "Bytes of window state", |s| s.state_bytes as f64),
    (JOB_STATE_KEYS, "(window, key) pairs in window state", |s| s.state_keys as f64),
    (PROCESS_RESIDENT_MEMORY_BYTES, "Resident set of the job's process, bytes", |s| s.rss_bytes as f64),
    (PROCESS_HEAP_BYTES, "Heap in use by the job's process (malloc), bytes", |s| s.heap_bytes as f64),
    (PROCESS_CPU_SECONDS_TOTAL, "CPU seconds of the job's process", |s| s.cpu_s),
    (JOB_CHECKPOINTS_TOTAL, "Checkpoints completed", |s| s.checkpoints as f64),
    (JOB_LAST_CHECKPOINT_BYTES, "Bytes the latest checkpoint uploaded", |s| s.last_checkpoint_bytes as f64),
    (JOB_LAST_CHECKPOINT_DURATION, "The latest checkpoint's duration, s", |s| s.last_checkpoint_s),
    (JOB_LAST_CHECKPOINT_SYNC_DURATION, "The latest checkpoint's synchronous part, s", |s| s.last_checkpoint_sync_s),
    (JOB_LAST_CHECKPOINT_AGE, "Seconds since the latest checkpoint completed", |s| {
        s.last_checkpoint_age_s.unwrap_or(f64::NAN)
    }),
    (JOB_RECOVERY_DURATION, "Seconds the start spent restoring state", |s| s.recovery_s),
];

fn gauge(reg: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), labels).expect("valid metric definition");
    reg.register(Box::new(g.clone())).expect("metric registered once");
    g
}

/// The text exposition of every job's latest point.
pub fn render(jobs: &JobRegistry) -> String {
    let reg = Registry::new();
    let vcpus = gauge(&reg, JOB_CURRENT_NUM_VCPUS, "vCPUs in use", &["job"]);
    let active = gauge(&reg, JOB_ACTIVE_WORKER_INSTANCES, "Running workers", &["job"]);
    let target = gauge(&reg, JOB_TARGET_WORKER_INSTANCES, "Workers the autoscaler wants", &["job"]);
    let util = gauge(&reg, JOB_AGGREGATED_WORKER_UTILIZATION, "Mean worker busy fraction (0-1)", &["job"]);
    let bb = gauge(&reg, JOB_BACKLOG_BYTES, "Bytes waiting in Kafka", &["job"]);
    let be = gauge(&reg, JOB_BACKLOG_ELEMENTS, "Messages waiting in Kafka", &["job"]);
    let read = gauge(&reg, JOB_ELEMENTS_PRODUCED_COUNT, "Messages read so far", &["job"]);
    let written = gauge(&reg, JOB_BIGQUERY_WRITE_COUNT, "Rows written to BigQuery so far", &["job"]);
    let dlq = gauge(&reg, JOB_DEAD_LETTER_COUNT, "Rows written to the dead-letter table so far", &["job"]);
    let tput = gauge(&reg, JOB_THROUGHPUT_ELEMENTS, "Messages read per second over the last interval", &["job"]);
    let min_l = gauge(&reg, JOB_MIN_WORKER_INSTANCES_LIMIT, "The autoscaling floor in force", &["job"]);
    let max_l = gauge(&reg, JOB_MAX_WORKER_INSTANCES_LIMIT, "The autoscaling ceiling in force", &["job"]);
    let part =
        gauge(&reg, JOB_PARTITION_BACKLOG_ELEMENTS, "Messages waiting in Kafka, by partition", &["job", "partition"]);
    let part_b =
        gauge(&reg, JOB_PARTITION_BACKLOG_BYTES, "Bytes waiting in Kafka, by partition", &["job", "partition"]);
    let ebpt = gauge(
        &reg,
        JOB_ESTIMATED_BACKLOG_PROCESSING_TIME,
        "Seconds to drain the backlog at the current throughput",
        &["job"],
    );
    let wm = gauge(&reg, JOB_DATA_WATERMARK_AGE, "How far behind real time the committed data is, s", &["job"]);
    let lag = gauge(&reg, JOB_SYSTEM_LAG, "Longest time an item has been processing or waiting, s", &["job"]);
    let events = gauge(
        &reg,
        JOB_RELIABILITY_EVENTS,
        "Retries, replaced streams, possible duplicates and retention gaps so far",
        &["job", "event"],
    );
    let lat = gauge(
        &reg,
        JOB_STAGE_END_TO_END_LATENCIES,
        "Stage latency over the last interval, ms",
        &["job", "stage", "quantile"],
    );
    let state: Vec<GaugeVec> =
        STATE_ROWS.iter().map(|(name, help, _)| gauge(&reg, name, help, &["job", "backend", "kind"])).collect();
    let memory = [
        gauge(&reg, JOB_MEMORY_BUDGET_BYTES, "The job's memory budget (--memory-budget), bytes", &["job"]),
        gauge(&reg, PROCESS_PEAK_RESIDENT_MEMORY_BYTES, "Peak resident set of the job's process, bytes", &["job"]),
    ];
    for j in jobs.all() {
        let Some(p) = j.points.back() else { continue };
        let l = [j.id.as_str()];
        for (g, v) in memory.iter().zip([p.memory_budget_bytes, p.peak_rss_bytes]) {
            if v > 0 {
                g.with_label_values(&l).set(v as f64);
            }
        }
        vcpus.with_label_values(&l).set(p.vcpus);
        active.with_label_values(&l).set(p.workers as f64);
        target.with_label_values(&l).set(p.target_workers as f64);
        util.with_label_values(&l).set(p.utilization);
        bb.with_label_values(&l).set(p.backlog_bytes as f64);
        be.with_label_values(&l).set(p.backlog_elements as f64);
        read.with_label_values(&l).set(p.elements_read as f64);
        written.with_label_values(&l).set(p.rows_written as f64);
        dlq.with_label_values(&l).set(p.dead_lettered as f64);
        tput.with_label_values(&l).set(p.throughput_msgs);
        min_l.with_label_values(&l).set(p.min_workers as f64);
        max_l.with_label_values(&l).set(p.max_workers as f64);
        ebpt.with_label_values(&l).set(p.estimated_backlog_processing_s);
        wm.with_label_values(&l).set(p.data_watermark_age_s);
        lag.with_label_values(&l).set(p.system_lag_s);
        let mean_bytes = if p.backlog_elements > 0 { p.backlog_bytes as f64 / p.backlog_elements as f64 } else { 0.0 };
        for (partition, n) in &p.partition_backlog {
            part.with_label_values(&[j.id.as_str(), partition.as_str()]).set(*n as f64);
            part_b.with_label_values(&[j.id.as_str(), partition.as_str()]).set(*n as f64 * mean_bytes);
        }
        for (event, n) in &p.events {
            events.with_label_values(&[j.id.as_str(), event.as_str()]).set(*n as f64);
        }
        if let Some(st) = &p.state {
            for ((_, _, read), g) in STATE_ROWS.iter().zip(&state) {
                g.with_label_values(&[j.id.as_str(), st.backend.as_str(), st.kind.as_str()]).set(read(st));
            }
        }
        for (stage, s) in &p.stages {
            for (q, v) in [("0.5", s.p50_ms), ("0.95", s.p95_ms), ("0.99", s.p99_ms)] {
                lat.with_label_values(&[j.id.as_str(), stage.as_str(), q]).set(v);
            }
        }
    }
    let mut buf = Vec::new();
    TextEncoder::new().encode(&reg.gather(), &mut buf).expect("text encoding");
    String::from_utf8(buf).expect("Prometheus text is UTF-8")
}
