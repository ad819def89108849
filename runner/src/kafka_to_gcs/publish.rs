//! [`Publisher`]: a kafka-to-gcs job's state for the dashboard and `/metrics`, about
//! once a second: workers, throughput, backlog, the stages' latencies (`read`, `write`,
//! `end_to_end`; see [`OpenWindows`]), the data watermark age and system latency
//! (as kafka-to-bq's, with the newest Kafka timestamp read in place of the newest
//! committed), and the window state with
//! its checkpoints (size, keys, process memory and CPU, checkpoint size, duration and
//! age, recovery time).

use super::checkpoints::Checkpoints;
use super::config::KafkaToGcsConfig;
use super::open_windows::OpenWindows;
use super::pool::Workers;
use super::scale::Autoscaled;
use std::collections::BTreeMap;
use std::time::Instant;

/// Publishes a job's points to the web registry.
pub struct Publisher {
    jobs: flexrun_web::JobRegistry,
    job: String,
    vcpus_per_worker: f64,
    started: Instant,
    last: Instant,
    last_read: u64,
    last_bytes: u64,
}

impl Publisher {
    /// Register the job and publish from now on.
    pub fn new(jobs: flexrun_web::JobRegistry, cfg: &KafkaToGcsConfig, started: Instant) -> Publisher {
        jobs.register(&cfg.job_name, "kafka-to-gcs", "exactly-once");
        Publisher {
            jobs,
            job: cfg.job_name.clone(),
            vcpus_per_worker: cfg.pool.vcpus_per_worker,
            started,
            last: Instant::now(),
            last_read: 0,
            last_bytes: 0,
        }
    }

    /// Publish a point when a second has passed since the last one.
    pub fn maybe_publish(
        &mut self,
        ow: &OpenWindows,
        hw: &BTreeMap<i32, i64>,
        workers: &Workers,
        scaler: &Autoscaled,
        ck: &Checkpoints,
    ) {
        let dt = self.last.elapsed().as_secs_f64();
        if dt < 1.0 {
            return;
        }
        self.last = Instant::now();
        let c = ow.counts();
        let read = c.records + c.skipped_published + c.null_values;
        let pos = ow.read_pos();
        let by_partition: BTreeMap<String, u64> =
            hw.iter().map(|(p, h)| (p.to_string(), (h - pos.get(p).copied().unwrap_or(0)).max(0) as u64)).collect();
        let backlog: u64 = by_partition.values().sum();
        let avg = c.bytes as f64 / c.records.max(1) as f64;
        let n = workers.workers();
        let limits = scaler.limits();
        let throughput_msgs = (read - self.last_read) as f64 / dt;
        let stages: BTreeMap<String, flexrun_web::StageLatency> = ow
            .take_stages()
            .into_iter()
            .filter(|st| st.count > 0)
            .map(|st| (st.stage, flexrun_web::StageLatency { p50_ms: st.p50_ms, p95_ms: st.p95_ms, p99_ms: st.p99_ms }))
            .collect();
        let waiting: BTreeMap<i32, i64> = hw.iter().map(|(p, h)| (*p, h - pos.get(p).copied().unwrap_or(0))).collect();
        let now_ms = chrono::Utc::now().timestamp_millis();
        let watermark_age = crate::stats::watermark_age_s(&ow.newest_ts(), &waiting, now_ms)
            .unwrap_or(self.started.elapsed().as_secs_f64());
        let p = flexrun_web::MetricsPoint {
            t_s: self.started.elapsed().as_secs_f64(),
            workers: n,
            target_workers: scaler.target(n),
            vcpus: n as f64 * self.vcpus_per_worker,
            throughput_msgs,
            throughput_bytes: (c.bytes - self.last_bytes) as f64 / dt,
            backlog_elements: backlog,
            backlog_bytes: (backlog as f64 * avg) as u64,
            elements_read: read,
            min_workers: limits.min_workers,
            max_workers: limits.max_workers,
            partition_backlog: by_partition,
            estimated_backlog_processing_s: if throughput_msgs > 0.0 { backlog as f64 / throughput_msgs } else { 0.0 },
            system_lag_s: crate::stats::system_lag_s(watermark_age, stages.get("end_to_end").map(|s| s.p99_ms)),
            data_watermark_age_s: watermark_age,
            stages,
            state: Some(state_point(ow, ck)),
            events: gcs_events(&c),
            ..Default::default()
        };
        (self.last_read, self.last_bytes) = (read, c.bytes);
        self.jobs.push_point(&self.job, p);
    }
}

/// The job's reliability counters and every service's retries, as `/metrics` events.
fn gcs_events(c: &super::open_windows::Counts) -> BTreeMap<String, u64> {
    let mut e: BTreeMap<String, u64> = [
        ("timestamps_clamped", c.timestamps_clamped),
        ("consumer_errors", c.consumer_errors),
        ("offsets_lost_to_retention", c.offsets_lost_to_retention),
        ("partitions_past_end", c.partitions_past_end),
        ("partitions_discovered", c.partitions_discovered),
        ("late_records", c.late_records),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    e.extend(crate::retry::retries());
    e
}

/// The state, memory and checkpoints now.
pub fn state_point(ow: &OpenWindows, ck: &Checkpoints) -> flexrun_web::StatePoint {
    let s = ow.stats();
    let (rss, heap) = crate::stats::process_memory();
    let (u, sy) = crate::stats::process_cpu_seconds();
    let r = ck.so_far();
    let last = ck.last();
    flexrun_web::StatePoint {
        backend: r.backend.clone(),
        kind: r.kind.clone(),
        state_bytes: s.bytes,
        state_keys: s.keys,
        state_records: s.records,
        rss_bytes: rss,
        heap_bytes: heap,
        cpu_s: u + sy,
        checkpoints: r.checkpoints.len() as u64,
        last_checkpoint_bytes: last.map_or(0, |(c, _)| c.uploaded_bytes),
        last_checkpoint_s: last.map_or(0.0, |(c, _)| c.sync_s + c.upload_s),
        last_checkpoint_sync_s: last.map_or(0.0, |(c, _)| c.sync_s),
        last_checkpoint_age_s: last.map(|(_, age)| age.as_secs_f64()),
        recovery_s: r.recovery_s,
    }
}
