//! One pool of workers for a job of several topics.
//!
//! Each topic of such a job runs as its own exactly-once pipeline (its own shards,
//! logs and streams), but all of them run on the job's one set of workers: shard `k`
//! of the job, counting every topic's shards in the order the topics joined, runs on
//! worker `k % workers`, whatever its topic. The job's one [`super::Autoscaler`] decides
//! on the whole job: every worker's busy time, the input rate and backlog summed over
//! the topics ([`SharedWorkers::load`]), as each topic's pipeline last reported them
//! ([`SharedWorkers::report`]). Each pipeline follows the job's size
//! ([`SharedWorkers::size`]) by moving its shards with the exactly-once rule of a
//! rescale, so exactly-once per topic is what it is for one topic.

use super::worker::{Capacity, WorkerSlot};
use flexrun_autoscaler::WorkerMetrics;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// What one topic's pipeline last reported of its load.
#[derive(Debug, Clone, Default)]
pub struct TopicLoad {
    /// Its partitions' high watermarks, summed (the input rate is how fast this grows).
    pub high_watermarks: i64,
    /// Records waiting in it.
    pub backlog: i64,
    /// Messages read so far.
    pub messages_read: u64,
    /// Bytes of message values read so far.
    pub bytes_read: u64,
    /// Its latest dashboard point, when the job has a dashboard.
    pub point: Option<flexrun_web::TopicPoint>,
}

/// One member of the pool: a topic, its shard count, the high watermarks it first
/// reported (so a topic joining does not count as a burst of input) and its latest load.
#[derive(Debug)]
struct Member {
    topic: String,
    shards: u32,
    first_hw: Option<i64>,
    load: TopicLoad,
}

/// The job's whole load, summed over its topics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct JobLoad {
    /// High watermarks' growth since each topic joined, summed.
    pub produced: i64,
    /// Records waiting, summed.
    pub backlog: i64,
    /// Mean message size read so far (1,000 bytes before anything is read).
    pub avg_bytes: f64,
}

/// The workers a job's topic pipelines share, and what each pipeline reports.
#[derive(Debug)]
pub struct SharedWorkers {
    capacity: Option<Capacity>,
    slots: Mutex<Vec<Arc<WorkerSlot>>>,
    size: AtomicU32,
    members: Mutex<Vec<Member>>,
}

impl SharedWorkers {
    /// A pool of `initial` workers, each with the emulated `capacity`, if any.
    pub fn new(initial: u32, capacity: Option<Capacity>) -> Arc<SharedWorkers> {
        Arc::new(SharedWorkers {
            capacity,
            slots: Mutex::new(Vec::new()),
            size: AtomicU32::new(initial.max(1)),
            members: Mutex::new(Vec::new()),
        })
    }

    /// A topic's pipeline joins with `shards` shards (again after a restart of its
    /// pipeline: its place is kept). Returns how many of the job's shards come before
    /// its first, so that its shard at position `i` runs on worker `(offset + i) % size`.
    pub fn join(&self, topic: &str, shards: u32) -> usize {
        let mut m = self.members.lock().expect("members lock");
        let pos = match m.iter().position(|x| x.topic == topic) {
            Some(pos) => {
                m[pos].shards = shards;
                pos
            }
            None => {
                m.push(Member { topic: topic.into(), shards, first_hw: None, load: TopicLoad::default() });
                m.len() - 1
            }
        };
        m[..pos].iter().map(|x| x.shards as usize).sum()
    }

    /// Worker `id`'s slot (the same one for every topic), made on first use.
    pub fn slot(&self, id: u32) -> Arc<WorkerSlot> {
        let mut s = self.slots.lock().expect("slots lock");
        while s.len() <= id as usize {
            let next = s.len() as u32;
            s.push(Arc::new(WorkerSlot::new(next, self.capacity)));
        }
        s[id as usize].clone()
    }

    /// The job's worker count now.
    pub fn size(&self) -> u32 {
        self.size.load(Ordering::Acquire)
    }

    /// Set the job's worker count (each topic's pipeline follows at its next tick).
    pub fn resize(&self, n: u32) {
        self.size.store(n.max(1), Ordering::Release);
    }

    /// Every topic's shards: the most workers that can each have one.
    pub fn shards(&self) -> u32 {
        self.members.lock().expect("members lock").iter().map(|m| m.shards).sum()
    }

    /// A topic's pipeline reports its load; a report without a dashboard point keeps
    /// the last one.
    pub fn report(&self, topic: &str, mut load: TopicLoad) {
        let mut m = self.members.lock().expect("members lock");
        if let Some(x) = m.iter_mut().find(|x| x.topic == topic) {
            x.first_hw.get_or_insert(load.high_watermarks);
            if load.point.is_none() {
                load.point = x.load.point.take();
            }
            x.load = load;
        }
    }

    /// The whole job's load from the latest reports.
    pub fn load(&self) -> JobLoad {
        let m = self.members.lock().expect("members lock");
        let produced = m.iter().map(|x| x.load.high_watermarks - x.first_hw.unwrap_or(x.load.high_watermarks)).sum();
        let backlog = m.iter().map(|x| x.load.backlog.max(0)).sum();
        let (msgs, bytes) = m.iter().fold((0u64, 0u64), |(n, b), x| (n + x.load.messages_read, b + x.load.bytes_read));
        let avg_bytes = if msgs > 0 { bytes as f64 / msgs as f64 } else { 1000.0 };
        JobLoad { produced, backlog, avg_bytes }
    }

    /// Each topic's latest load, in joining order.
    pub fn loads(&self) -> Vec<(String, TopicLoad)> {
        self.members.lock().expect("members lock").iter().map(|x| (x.topic.clone(), x.load.clone())).collect()
    }

    /// Every current worker's counters for the window that just ended.
    pub fn window(&self) -> Vec<WorkerMetrics> {
        (0..self.size()).map(|id| self.slot(id).take_window()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_take_consecutive_shard_positions_and_keep_them_on_rejoining() {
        let w = SharedWorkers::new(2, None);
        assert_eq!(w.join("a", 3), 0);
        assert_eq!(w.join("b", 2), 3);
        assert_eq!(w.join("c", 4), 5);
        assert_eq!(w.join("b", 2), 3, "a restarted pipeline keeps its place");
        assert_eq!(w.shards(), 9);
    }

    #[test]
    fn the_job_load_sums_topics_and_a_joining_topic_is_not_a_burst() {
        let w = SharedWorkers::new(1, None);
        w.join("a", 1);
        w.join("b", 1);
        let load = |hw, backlog, n, b| TopicLoad {
            high_watermarks: hw,
            backlog,
            messages_read: n,
            bytes_read: b,
            point: None,
        };
        w.report("a", load(1_000, 10, 100, 50_000));
        w.report("b", load(5_000_000, 20, 100, 150_000));
        assert_eq!(w.load(), JobLoad { produced: 0, backlog: 30, avg_bytes: 1000.0 });
        w.report("a", load(1_300, 5, 200, 100_000));
        w.report("b", load(5_000_200, 0, 200, 300_000));
        assert_eq!(w.load(), JobLoad { produced: 500, backlog: 5, avg_bytes: 1000.0 });
        w.report("a", load(1_300, 0, 300, 100_000));
        assert!((w.load().avg_bytes - 400_000.0 / 500.0).abs() < 1e-9);
        let page = flexrun_web::TopicPoint { job: "j.a".into(), ..Default::default() };
        w.report("a", TopicLoad { point: Some(page.clone()), ..load(1_400, 0, 300, 100_000) });
        w.report("a", load(1_500, 0, 300, 100_000));
        assert_eq!(w.loads()[0].1.point, Some(page), "a report without a point keeps the last one");
    }

    #[test]
    fn slots_are_shared_by_id_and_the_window_covers_the_current_size() {
        let w = SharedWorkers::new(3, None);
        assert!(Arc::ptr_eq(&w.slot(2), &w.slot(2)));
        assert_eq!(w.window().len(), 3);
        w.resize(0);
        assert_eq!(w.size(), 1, "never below one worker");
    }
}
