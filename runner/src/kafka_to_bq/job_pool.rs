//! The one pool of a job of several topics: its autoscaler, its control-plane status
//! and its dashboard page.
//!
//! Every topic's pipeline runs its shards on the job's [`SharedWorkers`] and reports
//! its load there ([`super::run::autoscale`]). Here the job's one [`Autoscaler`] decides
//! every `--autoscaling-interval` on the whole job: each worker's busy time, the input
//! rate and backlog summed over the topics. Its decision sets the job's size, which each
//! pipeline follows by moving its shards as a rescale does. The job's page (`/jobs/<job>`)
//! shows the whole job, with a table of each topic's stages and backlog; each topic
//! keeps its own page as well (`/jobs/<job>.<topic>`).

use super::setup::config::KafkaToBqConfig;
use crate::control::Control;
use crate::scaling::step::{announce_decision, announce_resized, decision_view, Autoscaler};
use crate::scaling::SharedWorkers;
use flexrun_autoscaler::Decision;
use flexrun_web::{JobRegistry, MetricsPoint, StageLatency, TopicPoint};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// The job's pool, autoscaler and page.
pub struct JobPool {
    shared: Arc<SharedWorkers>,
    scaler: Autoscaler,
    job: String,
    vcpus_per_worker: f64,
    web: Option<JobRegistry>,
    control: Option<Arc<Control>>,
    started: Instant,
    last_publish: Instant,
    utilization: f64,
}

impl JobPool {
    /// The pool of job `cfg`, at its initial size; its page is registered on `web`.
    pub fn new(
        cfg: &KafkaToBqConfig,
        started: Instant,
        web: Option<JobRegistry>,
        control: Option<Arc<Control>>,
    ) -> JobPool {
        let pc = &cfg.run.pool;
        let shared = SharedWorkers::new(pc.initial_workers(u32::MAX), cfg.run.worker_capacity);
        if let Some(w) = &web {
            w.register(&cfg.job_name, "kafka-to-bq", cfg.delivery.as_str());
        }
        JobPool {
            shared,
            scaler: Autoscaler::new(pc, 1, started),
            job: cfg.job_name.clone(),
            vcpus_per_worker: pc.vcpus_per_worker,
            web,
            control,
            started,
            last_publish: Instant::now(),
            utilization: 0.0,
        }
    }

    /// The workers each topic's pipeline runs on.
    pub fn shared(&self) -> Arc<SharedWorkers> {
        self.shared.clone()
    }

    /// One tick of the job's loop: apply `update-options`, decide when a decision is
    /// due, and publish the job's point about once a second.
    pub fn tick(&mut self) {
        if let Some(c) = &self.control {
            self.scaler.sync_control(c, self.shared.size());
        }
        self.scaler.set_parallelism(self.shared.shards().max(1));
        if self.scaler.take_due() {
            self.decide();
        }
        if self.last_publish.elapsed().as_secs_f64() >= 1.0 {
            self.last_publish = Instant::now();
            self.publish();
        }
    }

    /// Decide on the window that ended, over the whole job, and resize.
    fn decide(&mut self) {
        let load = self.shared.load();
        let produced = BTreeMap::from([(0, load.produced)]);
        let step = self.scaler.decide(&produced, load.backlog, load.avg_bytes, self.shared.window());
        self.utilization = step.utilization;
        let d = &step.decision;
        if let (true, Some(w)) = (step.recorded, &self.web) {
            w.push_decision(&self.job, decision_view(d));
        }
        if d.is_change() {
            announce_decision(self.control.as_deref(), d);
            self.shared.resize(d.to);
            announce_resized(self.control.as_deref(), d, self.shared.size());
        }
    }

    /// The job's point: the topics' latest points summed, the slowest topic's latency
    /// per stage, and each topic's part.
    fn publish(&self) {
        let Some(w) = &self.web else { return };
        let topics: BTreeMap<String, TopicPoint> =
            self.shared.loads().into_iter().filter_map(|(t, l)| l.point.map(|p| (t, p))).collect();
        let load = self.shared.load();
        let limits = self.scaler.limits();
        let workers = self.shared.size();
        let sum = |f: fn(&TopicPoint) -> f64| topics.values().map(f).sum::<f64>();
        let throughput_msgs = sum(|t| t.throughput_msgs);
        let backlog = topics.values().map(|t| t.backlog_elements).sum::<u64>();
        let p = MetricsPoint {
            t_s: self.started.elapsed().as_secs_f64(),
            workers,
            target_workers: self.scaler.target(workers),
            vcpus: workers as f64 * self.vcpus_per_worker,
            throughput_msgs,
            throughput_bytes: throughput_msgs * load.avg_bytes,
            backlog_elements: backlog,
            backlog_bytes: (backlog as f64 * load.avg_bytes) as u64,
            utilization: self.utilization,
            elements_read: topics.values().map(|t| t.elements_read).sum(),
            rows_written: topics.values().map(|t| t.rows_written).sum(),
            dead_lettered: topics.values().map(|t| t.dead_lettered).sum(),
            stages: slowest(&topics),
            min_workers: limits.min_workers,
            max_workers: limits.max_workers,
            partition_backlog: topics
                .iter()
                .flat_map(|(t, x)| x.partition_backlog.iter().map(move |(p, n)| (format!("{t}/{p}"), *n)))
                .collect(),
            estimated_backlog_processing_s: if throughput_msgs > 0.0 { backlog as f64 / throughput_msgs } else { 0.0 },
            topics,
            ..Default::default()
        };
        w.push_point(&self.job, p);
    }

    /// The job has ended: its page's status, its decisions and its size at the end.
    pub fn finish(self, ok: bool) -> (Vec<Decision>, u32) {
        if let Some(w) = &self.web {
            w.set_status(&self.job, if ok { "drained" } else { "failed" });
        }
        let workers = self.shared.size();
        (self.scaler.into_decisions(), workers)
    }
}

/// Per stage, the highest of each percentile over the topics.
fn slowest(topics: &BTreeMap<String, TopicPoint>) -> BTreeMap<String, StageLatency> {
    let mut out: BTreeMap<String, StageLatency> = BTreeMap::new();
    for (stage, l) in topics.values().flat_map(|t| t.stages.iter()) {
        let e = out.entry(stage.clone()).or_default();
        e.p50_ms = e.p50_ms.max(l.p50_ms);
        e.p95_ms = e.p95_ms.max(l.p95_ms);
        e.p99_ms = e.p99_ms.max(l.p99_ms);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_shows_the_slowest_topic_for_each_percentile() {
        let at = |p50, p99| TopicPoint {
            stages: BTreeMap::from([("write".to_string(), StageLatency { p50_ms: p50, p95_ms: p50, p99_ms: p99 })]),
            ..Default::default()
        };
        let topics = BTreeMap::from([("a".to_string(), at(5.0, 90.0)), ("b".to_string(), at(8.0, 40.0))]);
        let s = slowest(&topics);
        assert_eq!(s["write"].p50_ms, 8.0);
        assert_eq!(s["write"].p99_ms, 90.0);
    }
}
