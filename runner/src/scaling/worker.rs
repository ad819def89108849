//! A worker of the live pool: the shards it owns share one emulated CPU.
//!
//! A worker's busy time is DS2's *useful* time: the time its CPU is held to map and
//! encode a batch (plus, with `--worker-capacity`, the time that batch would take on
//! a worker of that capacity). Waiting on Kafka or BigQuery is not busy time.

use flexrun_autoscaler::WorkerMetrics;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// An emulated per-worker capacity (`--worker-capacity`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Capacity {
    /// Bytes of message values per second.
    BytesPerSecond(f64),
    /// Messages per second.
    MessagesPerSecond(f64),
}

impl Capacity {
    /// Parse `2MB/s`, `1.5MiB/s`, `500KB/s`, `2000msg/s` (the estimator's rate units).
    pub fn parse(s: &str) -> Result<Capacity, String> {
        match flexrun_estimator::Rate::parse(s) {
            Ok(flexrun_estimator::Rate::BytesPerSecond(b)) => Ok(Capacity::BytesPerSecond(b)),
            Ok(flexrun_estimator::Rate::MessagesPerSecond(m)) => Ok(Capacity::MessagesPerSecond(m)),
            Err(e) => Err(format!("invalid worker capacity {s:?}: expected {}", e.expected)),
        }
    }

    /// How long `records` messages of `bytes` bytes take at this capacity.
    pub fn time_for(&self, records: u64, bytes: u64) -> Duration {
        match self {
            Capacity::BytesPerSecond(b) => Duration::from_secs_f64(bytes as f64 / b),
            Capacity::MessagesPerSecond(m) => Duration::from_secs_f64(records as f64 / m),
        }
    }
}

/// One worker: its CPU, capacity and counters for the current window.
#[derive(Debug)]
pub struct WorkerSlot {
    /// Worker index.
    pub id: u32,
    cpu: tokio::sync::Mutex<()>,
    capacity: Option<Capacity>,
    busy_us: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
}

impl WorkerSlot {
    /// A worker with an optional emulated capacity.
    pub fn new(id: u32, capacity: Option<Capacity>) -> WorkerSlot {
        WorkerSlot {
            id,
            cpu: tokio::sync::Mutex::new(()),
            capacity,
            busy_us: AtomicU64::new(0),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    /// Run `f` (the CPU work for `records` messages of `bytes` bytes) on this worker's
    /// CPU, padded to the emulated capacity, and count it as busy time.
    pub async fn work<T>(&self, records: u64, bytes: u64, f: impl FnOnce() -> T) -> T {
        let _cpu = self.cpu.lock().await;
        let start = Instant::now();
        let out = f();
        if let Some(c) = self.capacity {
            let need = c.time_for(records, bytes);
            let spent = start.elapsed();
            if need > spent {
                tokio::time::sleep(need - spent).await;
            }
        }
        self.busy_us.fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
        self.records.fetch_add(records, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        out
    }

    /// The window's counters, reset for the next window.
    pub fn take_window(&self) -> WorkerMetrics {
        WorkerMetrics {
            busy_s: self.busy_us.swap(0, Ordering::Relaxed) as f64 / 1e6,
            records: self.records.swap(0, Ordering::Relaxed),
            bytes: self.bytes.swap(0, Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_parse_with_units_or_say_what_is_expected() {
        assert_eq!(Capacity::parse("2MB/s").unwrap(), Capacity::BytesPerSecond(2e6));
        assert_eq!(Capacity::parse("1MiB/s").unwrap(), Capacity::BytesPerSecond(1048576.0));
        assert_eq!(Capacity::parse("2000msg/s").unwrap(), Capacity::MessagesPerSecond(2000.0));
        for bad in ["", "2", "fast", "-1MB/s", "0MB/s", "2 furlongs/s", "MB/s"] {
            assert!(Capacity::parse(bad).unwrap_err().contains("expected a positive number with a unit"), "{bad}");
        }
        assert_eq!(Capacity::BytesPerSecond(2e6).time_for(0, 1_000_000), Duration::from_millis(500));
    }

    #[tokio::test]
    async fn busy_time_follows_the_emulated_capacity() {
        let w = WorkerSlot::new(0, Some(Capacity::MessagesPerSecond(1000.0)));
        w.work(100, 0, || ()).await;
        let m = w.take_window();
        assert_eq!(m.records, 100);
        assert!(m.busy_s >= 0.1 && m.busy_s < 0.2, "{m:?}");
        assert_eq!(w.take_window().records, 0, "the window resets");
    }
}
