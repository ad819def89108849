//! The memory budget (`--memory-budget`): how much data a job may hold at once, shared
//! out between what it prefetches from Kafka and its batches.
//!
//! - **Prefetch, half the budget.** A worker's shards read split partition queues, and
//!   librdkafka then keeps up to `queued.min.messages` messages and
//!   `queued.max.messages.kbytes` per partition (librdkafka's CONFIGURATION.md: "Maximum
//!   number of kilobytes of queued pre-fetched messages in the local consumer queue";
//!   with split queues each partition's queue is one). Left at librdkafka's defaults
//!   (100,000 messages, 64 MiB) a job of 1,000 partitions may hold gigabytes of backlog,
//!   so both are derived from the half and the partition count, as is
//!   `fetch.message.max.bytes` (a broker still returns a larger first record batch, KIP-74,
//!   so a large record never stalls a partition).
//! - **Batches, the other half.** A shard holds an open batch while its last one is in
//!   flight, so `--batch-bytes` is capped at a quarter of the budget divided by the shards.
//!
//! The process's own footprint (code, threads, the clients' buffers) comes on top; the
//! summary's `peak_rss_bytes` says what the whole process reached.

/// The budget when `--memory-budget` is not given: 1 GiB.
pub const DEFAULT_BYTES: u64 = 1 << 30;
/// The smallest budget accepted: 64 MiB.
pub const MIN_BYTES: u64 = 64 << 20;
/// The least prefetch per partition, so that a partition always has a fetch's worth.
const MIN_PREFETCH: u64 = 64 << 10;
/// librdkafka's default `queued.max.messages.kbytes` (64 MiB) and `queued.min.messages`
/// as flexrun had it: a budget never raises them.
const MAX_PREFETCH: u64 = 64 << 20;
const MAX_QUEUED_MESSAGES: u64 = 20_000;
/// The least batch, in bytes.
const MIN_BATCH: usize = 64 << 10;

/// A job's memory budget, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudget(pub u64);

impl Default for MemoryBudget {
    fn default() -> Self {
        MemoryBudget(DEFAULT_BYTES)
    }
}

/// What a budget gives one pipeline of `partitions` partitions in `shards` shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shares {
    /// Prefetched bytes each partition may hold (`queued.max.messages.kbytes`).
    pub prefetch_per_partition: u64,
    /// `queued.min.messages`.
    pub queued_messages: u64,
    /// The batch size a shard fills before appending (`--batch-bytes`, capped).
    pub batch_bytes: usize,
}

impl MemoryBudget {
    /// Parse `1GiB`, `512MiB`, `800MB`, `2G` or a number of bytes; at least [`MIN_BYTES`].
    ///
    /// ```
    /// use flexrun::kafka::budget::MemoryBudget;
    /// assert_eq!(MemoryBudget::parse("512MiB"), Ok(MemoryBudget(512 << 20)));
    /// assert_eq!(MemoryBudget::parse("2G"), Ok(MemoryBudget(2 << 30)));
    /// assert!(MemoryBudget::parse("1MiB").unwrap_err().contains("at least 64 MiB"));
    /// assert!(MemoryBudget::parse("lots").unwrap_err().contains("expected"));
    /// ```
    pub fn parse(s: &str) -> Result<MemoryBudget, String> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (n, unit) = t.split_at(split);
        let unit_bytes: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kib" => 1 << 10,
            "kb" => 1_000,
            "m" | "mib" => 1 << 20,
            "mb" => 1_000_000,
            "g" | "gib" => 1 << 30,
            "gb" => 1_000_000_000,
            _ => u64::MAX,
        };
        let expected = "expected a size such as 1GiB, 512MiB or 800MB";
        let n: u64 = n.parse().map_err(|_| format!("--memory-budget {s}: {expected}"))?;
        if unit_bytes == u64::MAX {
            return Err(format!("--memory-budget {s}: unknown unit {unit:?}; {expected}"));
        }
        let bytes = n.saturating_mul(unit_bytes);
        if bytes < MIN_BYTES {
            return Err(format!("--memory-budget {s}: expected at least 64 MiB"));
        }
        Ok(MemoryBudget(bytes))
    }

    /// The shares of a pipeline of `partitions` partitions in `shards` shards whose
    /// batches were asked to be `batch_bytes`.
    ///
    /// ```
    /// use flexrun::kafka::budget::MemoryBudget;
    /// let b = MemoryBudget(1 << 30);
    /// // 8 partitions: librdkafka's own cap, and the asked batches.
    /// let s = b.shares(8, 8, 2 << 20);
    /// assert_eq!((s.prefetch_per_partition, s.batch_bytes), (64 << 20, 2 << 20));
    /// // 1,000 partitions in 400 shards: 512 KiB each, batches of 655 KiB.
    /// let s = b.shares(1000, 400, 2 << 20);
    /// assert_eq!(s.prefetch_per_partition, 536_870);
    /// assert_eq!(s.batch_bytes, 671_088);
    /// assert!(s.prefetch_per_partition * 1000 <= 1 << 29);
    /// ```
    pub fn shares(&self, partitions: usize, shards: usize, batch_bytes: usize) -> Shares {
        let prefetch = self.0 / 2 / partitions.max(1) as u64;
        let prefetch_per_partition = prefetch.clamp(MIN_PREFETCH, MAX_PREFETCH);
        let batch = (self.0 / 4 / shards.max(1) as u64) as usize;
        Shares {
            prefetch_per_partition,
            queued_messages: (prefetch_per_partition / 256).clamp(100, MAX_QUEUED_MESSAGES),
            batch_bytes: batch_bytes.min(batch.max(MIN_BATCH)),
        }
    }
}

impl Shares {
    /// The librdkafka settings of a worker's consumer under these shares.
    ///
    /// ```
    /// use flexrun::kafka::budget::MemoryBudget;
    /// let s = MemoryBudget(1 << 30).shares(4000, 400, 2 << 20).consumer_settings();
    /// assert!(s.contains(&("queued.max.messages.kbytes", "131".to_string())));
    /// assert!(s.contains(&("fetch.message.max.bytes", "134217".to_string())));
    /// ```
    pub fn consumer_settings(&self) -> Vec<(&'static str, String)> {
        let p = self.prefetch_per_partition;
        vec![
            ("queued.max.messages.kbytes", (p / 1024).max(1).to_string()),
            ("queued.min.messages", self.queued_messages.to_string()),
            ("fetch.message.max.bytes", p.min(1 << 20).to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_and_batches_stay_within_the_budget_whatever_the_partitions() {
        for budget in [MIN_BYTES, DEFAULT_BYTES, 8 << 30] {
            for (partitions, shards) in [(1, 1), (8, 8), (100, 100), (1000, 400), (4000, 400)] {
                let s = MemoryBudget(budget).shares(partitions, shards, 9_000_000);
                let prefetch = s.prefetch_per_partition * partitions as u64;
                let batches = 2 * s.batch_bytes as u64 * shards as u64;
                // Each half keeps to its half of the budget, or to its floor (64 KiB a
                // partition, 64 KiB a batch).
                let floor_p = MIN_PREFETCH * partitions as u64;
                let floor_b = 2 * MIN_BATCH as u64 * shards as u64;
                assert!(prefetch <= (budget / 2).max(floor_p), "{budget} {partitions} {s:?}");
                assert!(batches <= (budget / 2).max(floor_b), "{budget} {partitions} {s:?}");
            }
        }
    }

    #[test]
    fn a_budget_never_raises_librdkafkas_own_limits_or_the_asked_batch() {
        let s = MemoryBudget(64 << 30).shares(1, 1, 2 << 20);
        assert_eq!(s, Shares { prefetch_per_partition: MAX_PREFETCH, queued_messages: 20_000, batch_bytes: 2 << 20 });
    }
}
