//! Window state and its checkpoints (kafka-to-gcs): how much a window holds, how much
//! memory that takes, and what a checkpoint of it costs in bytes and seconds, per
//! state backend and checkpoint kind (seed 003).
//!
//! - **State** is the open window's records: `rate × time into the window`, up to
//!   `rate × window` just before it closes.
//! - **A full checkpoint** writes all of it: heap as the raw records, lsm as its SST
//!   files (compressed). **An incremental one** (lsm only) writes the SST files
//!   flushed since the last checkpoint: the bytes that arrived in the interval,
//!   compressed; a window that closed in between costs nothing, its files are gone.
//! - **Workers checkpoint in parallel**, each its own share of the state (as Flink's
//!   task managers do): a checkpoint takes as long as one worker's share takes.
//! - **Its duration** is a synchronous part (heap: copying the state's structure, per
//!   byte held; lsm: flushing the memtable, which RocksDB keeps under its write-buffer
//!   size by flushing in the background) plus the upload at the object store's rate.
//! - **Memory per worker**: heap holds its share of the state (times an overhead); lsm
//!   holds its memtables and block cache, about constant.
//!
//! The constants are [`CheckpointCosts::calibrated`], fitted to this machine's
//! measurement (scripts/bench-state.sh, BENCHMARKS.md).
//!
//! ```
//! use flexrun_estimator::state::{CheckpointCosts, CheckpointKind, StateBackend, StateModel};
//! let m = StateModel { backend: StateBackend::Lsm, kind: CheckpointKind::Incremental,
//!     window_s: 600.0, interval_s: 180.0, costs: CheckpointCosts::calibrated() };
//! let heap = StateModel { backend: StateBackend::Heap, kind: CheckpointKind::Full, ..m };
//! let (state, new) = (4e9, 1.4e9);
//! assert!(m.checkpoint(state, new, 1.0).bytes * 4.0 < heap.checkpoint(state, new, 1.0).bytes);
//! ```

/// Where window state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateBackend {
    /// In memory.
    Heap,
    /// RocksDB on local disk.
    Lsm,
}

/// What a checkpoint writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointKind {
    /// The whole state.
    Full,
    /// What is new since the last checkpoint (lsm only).
    Incremental,
}

/// What checkpoints cost on a machine.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CheckpointCosts {
    /// Bytes per second a checkpoint's upload reaches (all its requests together).
    pub upload_bytes_per_s: f64,
    /// SST bytes per record byte (zstd level 1 in 64 KiB blocks).
    pub lsm_compression: f64,
    /// Process memory per state byte with the heap backend.
    pub heap_memory_factor: f64,
    /// The lsm backend's memory beside the process's own: memtables and block cache.
    pub lsm_memory_bytes: f64,
    /// Heap's synchronous part: seconds per GiB of state held.
    pub heap_sync_s_per_gib: f64,
    /// Lsm's synchronous part: seconds per GiB flushed.
    pub lsm_flush_s_per_gib: f64,
    /// Lsm's write buffers: the most a flush at a checkpoint can find unflushed.
    pub lsm_write_buffer_bytes: f64,
}

impl CheckpointCosts {
    /// Calibrated to scripts/bench-state.sh on this project's 2-core machine, with
    /// checkpoints to the Cloud Storage emulator (BENCHMARKS.md, "Window state and
    /// checkpoints", 2026-12-01 and -02): uploads of 14–23 MB/s (the emulator serves one
    /// call at a time; Google's service is far faster, so `--checkpoint-upload-rate`
    /// should be set for a cloud estimate), SST files 0.32 of the records' bytes with
    /// zstd (incremental uploads against the interval's input, the same at all three
    /// rates; 0.6 with LZ4 in 4 KiB blocks before), the heap backend's malloc peak about 3×
    /// its state (records, the snapshot and a full checkpoint's encoded parts at once),
    /// lsm's resident set about 256 MiB beside its files, and the synchronous parts
    /// (heap 0.07 s for 155 MiB; lsm about 0.2 s to flush an interval's memtable).
    pub fn calibrated() -> CheckpointCosts {
        CheckpointCosts {
            upload_bytes_per_s: 20.0 * 1048576.0,
            lsm_compression: 0.32,
            heap_memory_factor: 3.0,
            lsm_memory_bytes: 256.0 * 1048576.0,
            heap_sync_s_per_gib: 0.4,
            lsm_flush_s_per_gib: 7.0,
            lsm_write_buffer_bytes: 128.0 * 1048576.0,
        }
    }
}

/// One checkpoint's cost.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct CheckpointCost {
    /// Bytes written.
    pub bytes: f64,
    /// The synchronous part (processing paused), seconds.
    pub sync_s: f64,
    /// The upload (processing goes on), seconds.
    pub upload_s: f64,
}

impl CheckpointCost {
    /// Synchronous part plus upload.
    pub fn duration_s(&self) -> f64 {
        self.sync_s + self.upload_s
    }
}

/// A job's state backend and checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct StateModel {
    /// The backend.
    pub backend: StateBackend,
    /// The checkpoint kind.
    pub kind: CheckpointKind,
    /// The fixed window, seconds.
    pub window_s: f64,
    /// Seconds between checkpoints.
    pub interval_s: f64,
    /// The machine's costs.
    pub costs: CheckpointCosts,
}

impl StateModel {
    /// A checkpoint of `state` bytes of records over `workers` workers, `new` of them
    /// arrived since the last checkpoint: `bytes` over all workers, the time one
    /// worker's share takes.
    pub fn checkpoint(&self, state: f64, new: f64, workers: f64) -> CheckpointCost {
        let c = &self.costs;
        let gib = 1073741824.0;
        let w = workers.max(1.0);
        let flush = (new / w).min(c.lsm_write_buffer_bytes) / gib * c.lsm_flush_s_per_gib;
        let (bytes, sync_s) = match (self.backend, self.kind) {
            (StateBackend::Heap, _) => (state, state / w / gib * c.heap_sync_s_per_gib),
            (StateBackend::Lsm, CheckpointKind::Full) => (state * c.lsm_compression, flush),
            (StateBackend::Lsm, CheckpointKind::Incremental) => (new * c.lsm_compression, flush),
        };
        CheckpointCost { bytes, sync_s, upload_s: bytes / w / c.upload_bytes_per_s }
    }

    /// Memory each of `workers` workers needs for its share of `state` bytes.
    pub fn memory_bytes(&self, state: f64, workers: f64) -> f64 {
        match self.backend {
            StateBackend::Heap => state / workers.max(1.0) * self.costs.heap_memory_factor,
            StateBackend::Lsm => self.costs.lsm_memory_bytes,
        }
    }

    /// The most state a steady `bytes_per_s` builds: one whole window.
    pub fn peak_state_bytes(&self, bytes_per_s: f64) -> f64 {
        bytes_per_s * self.window_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(backend: StateBackend, kind: CheckpointKind) -> StateModel {
        StateModel { backend, kind, window_s: 600.0, interval_s: 180.0, costs: CheckpointCosts::calibrated() }
    }

    #[test]
    fn full_writes_the_state_and_incremental_what_is_new() {
        let (state, new) = (3e9, 1e9);
        let heap = model(StateBackend::Heap, CheckpointKind::Full).checkpoint(state, new, 1.0);
        let full = model(StateBackend::Lsm, CheckpointKind::Full).checkpoint(state, new, 1.0);
        let inc = model(StateBackend::Lsm, CheckpointKind::Incremental).checkpoint(state, new, 1.0);
        assert_eq!(heap.bytes, state);
        assert!(inc.bytes < full.bytes && full.bytes < heap.bytes);
        assert!(inc.duration_s() < heap.duration_s());
        assert_eq!(model(StateBackend::Heap, CheckpointKind::Full).peak_state_bytes(1e6), 6e8);
        assert!(model(StateBackend::Heap, CheckpointKind::Full).memory_bytes(6e8, 1.0) > 6e8);
        assert!(model(StateBackend::Lsm, CheckpointKind::Full).memory_bytes(6e9, 1.0) < 1e9);
        // Ten workers: a tenth each, in parallel.
        let ten = model(StateBackend::Heap, CheckpointKind::Full).checkpoint(state, new, 10.0);
        assert_eq!(ten.bytes, heap.bytes);
        assert!((ten.upload_s * 10.0 - heap.upload_s).abs() < 1e-9);
    }
}
