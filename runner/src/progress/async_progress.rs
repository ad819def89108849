//! Asynchronous progress tracking (at-least-once only), as Spark's: the shard hands
//! over its latest positions and a background thread persists them every interval,
//! off the batch's critical path. After a crash the shard replays what it processed
//! since the last persisted entry: at most one interval of data, duplicated, never lost.

use super::{CommitEntry, ProgressError, ShardLog};

/// The latest entry to persist and the stop flag, with the condvar that wakes the
/// background thread.
type Handoff = std::sync::Arc<(std::sync::Mutex<(Option<CommitEntry>, bool)>, std::sync::Condvar)>;

/// Asynchronous progress tracking (at-least-once only): see the module notes.
pub struct AsyncProgress {
    shared: Handoff,
    handle: Option<std::thread::JoinHandle<Result<(), ProgressError>>>,
}

impl AsyncProgress {
    /// Start persisting into `log` every `interval`.
    pub fn start(mut log: ShardLog, interval: std::time::Duration) -> AsyncProgress {
        let shared =
            std::sync::Arc::new((std::sync::Mutex::new((None::<CommitEntry>, false)), std::sync::Condvar::new()));
        let s = shared.clone();
        let handle = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || {
                let (lock, cv) = &*s;
                let mut written: Option<u64> = None;
                loop {
                    let (entry, stop) = {
                        let g = lock.lock().expect("progress lock");
                        let (g, _) = cv.wait_timeout_while(g, interval, |(_, stop)| !*stop).expect("progress lock");
                        (g.0.clone(), g.1)
                    };
                    if let Some(e) = entry {
                        if written != Some(e.batch) {
                            log.log_commit(&e)?;
                            written = Some(e.batch);
                        }
                    }
                    if stop {
                        return Ok(());
                    }
                }
            })
            .expect("spawn the progress thread");
        AsyncProgress { shared, handle: Some(handle) }
    }

    /// The shard's latest completed batch (persisted at the next tick).
    pub fn update(&self, e: CommitEntry) {
        self.shared.0.lock().expect("progress lock").0 = Some(e);
    }

    /// Persist the latest entry now and stop (a drain).
    pub fn finish(mut self) -> Result<(), ProgressError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), ProgressError> {
        self.shared.0.lock().expect("progress lock").1 = true;
        self.shared.1.notify_all();
        match self.handle.take() {
            Some(h) => h.join().expect("progress thread"),
            None => Ok(()),
        }
    }
}

impl Drop for AsyncProgress {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::Recovery;
    use std::collections::BTreeMap;

    #[test]
    fn async_progress_persists_the_latest_entry_each_interval_and_on_finish() {
        let d = tempfile::tempdir().unwrap();
        let p = AsyncProgress::start(ShardLog::open(d.path()).unwrap(), std::time::Duration::from_millis(100));
        for b in 1..=50u64 {
            p.update(CommitEntry { batch: b, positions: BTreeMap::from([(0, b as i64 * 10)]), ..Default::default() });
        }
        // Persisted by the background thread, without a drain: wait for it (bounded).
        // Read with `peek`: `open` would cut an entry the thread is still writing as
        // torn, and this test once failed in CI that way.
        let persisted = |b: u64| matches!(ShardLog::peek(d.path()).unwrap(), Recovery::Clean { ref commit, .. } if commit.batch == b);
        let t0 = std::time::Instant::now();
        while !persisted(50) {
            assert!(t0.elapsed() < std::time::Duration::from_secs(60), "batch 50 never persisted");
            std::thread::yield_now();
        }
        p.update(CommitEntry { batch: 51, positions: BTreeMap::from([(0, 510)]), ..Default::default() });
        p.finish().unwrap();
        let end = ShardLog::open(d.path()).unwrap().recover().unwrap();
        assert!(matches!(end, Recovery::Clean { ref commit, .. } if commit.batch == 51), "{end:?}");
        // Entries are written once per interval, not once per batch.
        let lines: usize = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("commits.log"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap().lines().count())
            .sum();
        assert!(lines <= 4, "{lines} commit entries for 51 batches: one per interval at most, not one per batch");
    }
}
