//! [`Publisher`]: a live job's state for the dashboard and `/metrics`, about once a
//! second: workers, throughput, backlog, utilization, per-stage latency and the
//! reliability counters.

use crate::kafka_to_bq::context::JobCtx;
use std::time::Instant;

/// The pool as the autoscaler sees it, for one published point.
pub struct PoolView<'a> {
    /// Workers running.
    pub workers: u32,
    /// The latest target.
    pub target: u32,
    /// Mean busy fraction of the last window.
    pub utilization: f64,
    /// The limits in force.
    pub limits: &'a flexrun_autoscaler::Limits,
}

/// Publishes a job's state to the web registry about once a second.
pub struct Publisher {
    /// The registry the web pages read.
    pub jobs: flexrun_web::JobRegistry,
    job: String,
    vcpus_per_worker: f64,
    last: Instant,
    last_read: u64,
    last_bytes: u64,
}

impl Publisher {
    /// A publisher for job `job`.
    pub fn new(jobs: flexrun_web::JobRegistry, job: String, vcpus_per_worker: f64) -> Publisher {
        Publisher { jobs, job, vcpus_per_worker, last: Instant::now(), last_read: 0, last_bytes: 0 }
    }

    /// Publish a point when a second has passed since the last one; the topic's part of
    /// it is returned, for the page of a job of several topics.
    pub async fn maybe_publish(
        &mut self,
        ctx: &JobCtx,
        partitions: &[i32],
        started: Instant,
        pool: PoolView<'_>,
    ) -> Option<flexrun_web::TopicPoint> {
        let PoolView { workers, target, utilization, limits } = pool;
        let dt = self.last.elapsed().as_secs_f64();
        if dt < 1.0 {
            return None;
        }
        self.last = Instant::now();
        let s = ctx.stats.summary();
        let by_partition = match ctx.metadata.high_watermarks(partitions).await {
            Ok(hw) => ctx.backlog_by_partition(&hw),
            Err(_) => Default::default(),
        };
        let backlog: i64 = by_partition.values().sum();
        let avg = if s.messages_read > 0 { s.bytes_read as f64 / s.messages_read as f64 } else { 0.0 };
        let stages: std::collections::BTreeMap<_, _> = ctx
            .stats
            .take_window()
            .into_iter()
            .filter(|st| st.count > 0)
            .map(|st| (st.stage, flexrun_web::StageLatency { p50_ms: st.p50_ms, p95_ms: st.p95_ms, p99_ms: st.p99_ms }))
            .collect();
        let watermark_age = ctx
            .data_watermark_age_s(&by_partition, chrono::Utc::now().timestamp_millis())
            .unwrap_or(started.elapsed().as_secs_f64());
        let system_lag = crate::stats::system_lag_s(watermark_age, stages.get("end_to_end").map(|s| s.p99_ms));
        let throughput_msgs = (s.messages_read - self.last_read) as f64 / dt;
        let p = flexrun_web::MetricsPoint {
            t_s: started.elapsed().as_secs_f64(),
            workers,
            target_workers: target,
            vcpus: workers as f64 * self.vcpus_per_worker,
            throughput_msgs,
            throughput_bytes: (s.bytes_read - self.last_bytes) as f64 / dt,
            backlog_elements: backlog as u64,
            backlog_bytes: (backlog as f64 * avg) as u64,
            utilization,
            elements_read: s.messages_read,
            rows_written: s.rows_written,
            dead_lettered: s.dead_lettered,
            stages,
            events: s.reliability.events().into_iter().chain(crate::retry::retries()).collect(),
            min_workers: limits.min_workers,
            max_workers: limits.max_workers,
            partition_backlog: by_partition.iter().map(|(p, n)| (p.to_string(), *n as u64)).collect(),
            estimated_backlog_processing_s: if throughput_msgs > 0.0 { backlog as f64 / throughput_msgs } else { 0.0 },
            data_watermark_age_s: watermark_age,
            system_lag_s: system_lag,
            state: None,
            memory_budget_bytes: ctx.cfg.run.memory_budget.0,
            peak_rss_bytes: crate::stats::peak_rss_bytes(),
            topics: Default::default(),
        };
        self.last_read = s.messages_read;
        self.last_bytes = s.bytes_read;
        let topic = flexrun_web::TopicPoint::of(&self.job, &p);
        self.jobs.push_point(&self.job, p);
        Some(topic)
    }
}
