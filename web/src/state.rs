//! What the web server shows about running jobs: a registry the runner publishes to.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, RwLock};

/// Points kept per job (at one a second, an hour).
pub const MAX_POINTS: usize = 3600;

/// Latency percentiles of one stage over one interval, milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StageLatency {
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
}

/// A job's state at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricsPoint {
    /// Seconds since the job started.
    pub t_s: f64,
    /// Running workers.
    pub workers: u32,
    /// Workers the autoscaler wants.
    pub target_workers: u32,
    /// vCPUs in use (workers × vCPUs per worker).
    pub vcpus: f64,
    /// Messages per second read over the interval.
    pub throughput_msgs: f64,
    /// Bytes per second read over the interval.
    pub throughput_bytes: f64,
    /// Messages waiting in Kafka.
    pub backlog_elements: u64,
    /// Bytes waiting in Kafka.
    pub backlog_bytes: u64,
    /// Mean worker busy fraction.
    pub utilization: f64,
    /// Total messages read so far.
    pub elements_read: u64,
    /// Total rows written so far.
    pub rows_written: u64,
    /// Total dead-letter rows so far.
    pub dead_lettered: u64,
    /// Per-stage latency over the interval, by stage name (read, transform, write, end_to_end).
    pub stages: BTreeMap<String, StageLatency>,
    /// Reliability counters so far (retries by code, streams replaced, batches
    /// possibly duplicated, offsets lost to retention, partitions discovered).
    #[serde(default)]
    pub events: BTreeMap<String, u64>,
    /// The autoscaling floor in force.
    #[serde(default)]
    pub min_workers: u32,
    /// The autoscaling ceiling in force.
    #[serde(default)]
    pub max_workers: u32,
    /// Messages waiting in Kafka, by partition.
    #[serde(default)]
    pub partition_backlog: BTreeMap<String, u64>,
    /// Seconds to drain the backlog at the interval's throughput (Dataflow's
    /// `job/estimated_backlog_processing_time`); 0 without throughput.
    #[serde(default)]
    pub estimated_backlog_processing_s: f64,
    /// Dataflow's data watermark age, seconds: how far behind real time the job's
    /// committed data is, over the partitions with a backlog (0 when nothing waits).
    #[serde(default)]
    pub data_watermark_age_s: f64,
    /// Dataflow's system latency (`job/system_lag`), seconds: the longest time an item
    /// has been processing or waiting (the watermark age, or the interval's end-to-end
    /// p99 when that is longer).
    #[serde(default)]
    pub system_lag_s: f64,
    /// Window state and checkpoints, for templates that keep state (kafka-to-gcs).
    #[serde(default)]
    pub state: Option<StatePoint>,
    /// The job's memory budget (`--memory-budget`), bytes; 0 when it has none.
    #[serde(default)]
    pub memory_budget_bytes: u64,
    /// The process's peak resident set so far, bytes; 0 when not measured.
    #[serde(default)]
    pub peak_rss_bytes: u64,
    /// For a job of several topics on one pool: each topic's latest state, by topic.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub topics: BTreeMap<String, TopicPoint>,
}

/// One topic's state inside a job of several topics (its own pipeline's latest point).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TopicPoint {
    /// The topic's own page (`<job>.<topic>`).
    pub job: String,
    /// Messages per second read from it in the last interval.
    pub throughput_msgs: f64,
    /// Messages waiting in it.
    pub backlog_elements: u64,
    /// Messages read, rows written and dead letters so far.
    pub elements_read: u64,
    /// Rows written.
    pub rows_written: u64,
    /// Dead letters.
    pub dead_lettered: u64,
    /// Its per-stage latency over the last interval.
    pub stages: BTreeMap<String, StageLatency>,
    /// Its messages waiting, by partition.
    pub partition_backlog: BTreeMap<String, u64>,
}

impl TopicPoint {
    /// A topic's part of its pipeline's point `p`, published on page `job`.
    pub fn of(job: &str, p: &MetricsPoint) -> TopicPoint {
        TopicPoint {
            job: job.into(),
            throughput_msgs: p.throughput_msgs,
            backlog_elements: p.backlog_elements,
            elements_read: p.elements_read,
            rows_written: p.rows_written,
            dead_lettered: p.dead_lettered,
            stages: p.stages.clone(),
            partition_backlog: p.partition_backlog.clone(),
        }
    }
}

/// A stateful job's state, memory and checkpoints at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatePoint {
    /// `heap` or `lsm`.
    pub backend: String,
    /// `full` or `incremental`.
    pub kind: String,
    /// Bytes of state (heap: record bytes; lsm: SST files and memtables).
    pub state_bytes: u64,
    /// (window, key) pairs in state.
    pub state_keys: u64,
    /// Records in state.
    pub state_records: u64,
    /// The process's resident set, bytes.
    pub rss_bytes: u64,
    /// The process's heap in use (malloc), bytes.
    pub heap_bytes: u64,
    /// The process's CPU seconds so far (user + system).
    pub cpu_s: f64,
    /// Checkpoints completed.
    pub checkpoints: u64,
    /// Bytes the latest checkpoint uploaded.
    pub last_checkpoint_bytes: u64,
    /// The latest checkpoint's duration, seconds (synchronous part and upload).
    pub last_checkpoint_s: f64,
    /// The latest checkpoint's synchronous part, seconds.
    pub last_checkpoint_sync_s: f64,
    /// Seconds since the latest checkpoint completed, if any has.
    pub last_checkpoint_age_s: Option<f64>,
    /// Seconds the start spent restoring state.
    pub recovery_s: f64,
}

/// An autoscaling decision, as shown on the job page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionView {
    /// Seconds since the job started.
    pub t_s: f64,
    /// Workers before.
    pub from: u32,
    /// Workers after.
    pub to: u32,
    /// Dataflow's rationale text.
    pub rationale: String,
    /// The numbers behind it.
    pub detail: String,
    /// The decision in Dataflow's job-log words ("Autoscaling: Raised the number of
    /// workers to N ...").
    #[serde(default)]
    pub description: String,
}

/// One job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// Job name.
    pub id: String,
    /// Template.
    pub template: String,
    /// Delivery mode.
    pub delivery: String,
    /// running, drained or failed.
    pub status: String,
    /// Time series, oldest first.
    pub points: VecDeque<MetricsPoint>,
    /// Autoscaling decisions that changed the count or the rationale.
    pub decisions: Vec<DecisionView>,
}

/// All jobs this process knows, shared between the runner and the web server.
#[derive(Debug, Clone, Default)]
pub struct JobRegistry {
    inner: Arc<RwLock<BTreeMap<String, JobView>>>,
}

impl JobRegistry {
    /// Register a job (replacing one with the same id).
    pub fn register(&self, id: &str, template: &str, delivery: &str) {
        let v = JobView {
            id: id.into(),
            template: template.into(),
            delivery: delivery.into(),
            status: "running".into(),
            points: VecDeque::new(),
            decisions: Vec::new(),
        };
        self.inner.write().expect("registry lock").insert(id.into(), v);
    }

    /// Add a point to a job's series.
    pub fn push_point(&self, id: &str, p: MetricsPoint) {
        if let Some(j) = self.inner.write().expect("registry lock").get_mut(id) {
            if j.points.len() >= MAX_POINTS {
                j.points.pop_front();
            }
            j.points.push_back(p);
        }
    }

    /// Add a decision to a job.
    pub fn push_decision(&self, id: &str, d: DecisionView) {
        if let Some(j) = self.inner.write().expect("registry lock").get_mut(id) {
            j.decisions.push(d);
        }
    }

    /// Set a job's status.
    pub fn set_status(&self, id: &str, status: &str) {
        if let Some(j) = self.inner.write().expect("registry lock").get_mut(id) {
            j.status = status.into();
        }
    }

    /// A copy of one job.
    pub fn get(&self, id: &str) -> Option<JobView> {
        self.inner.read().expect("registry lock").get(id).cloned()
    }

    /// A copy of every job.
    pub fn all(&self) -> Vec<JobView> {
        self.inner.read().expect("registry lock").values().cloned().collect()
    }
}
