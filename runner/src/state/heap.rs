//! The heap backend: every open window's records in memory, as Flink's
//! HashMapStateBackend keeps them on the JVM heap. A record is the message's bytes
//! (`bytes::Bytes`), so a put copies each message once and a read or a checkpoint's
//! snapshot shares it: no serialization on access.

use super::{Backend, Record, Slot, Snapshot, StateError, StateStats, Window, WindowState};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

/// One window: per (key, partition), the records in offset order.
type WindowMap = BTreeMap<(u32, i32), Vec<(i64, Bytes)>>;

/// In-memory window state.
#[derive(Default)]
pub struct HeapState {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    windows: BTreeMap<Window, WindowMap>,
    records: u64,
    bytes: u64,
}

impl HeapState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl WindowState for HeapState {
    fn backend(&self) -> Backend {
        Backend::Heap
    }

    fn put(&self, records: &[Record]) -> Result<(), StateError> {
        let mut g = self.lock();
        for (s, v) in records {
            let list = g.windows.entry(s.window).or_default().entry((s.key, s.partition)).or_default();
            list.push((s.offset, v.clone()));
            g.records += 1;
            g.bytes += v.len() as u64;
        }
        Ok(())
    }

    fn scan(&self, window: Window, key: u32, f: &mut dyn FnMut(i32, i64, &[u8])) -> Result<(), StateError> {
        let lists: Vec<(i32, Vec<(i64, Bytes)>)> = {
            let g = self.lock();
            let Some(w) = g.windows.get(&window) else { return Ok(()) };
            w.range((key, i32::MIN)..=(key, i32::MAX)).map(|((_, p), l)| (*p, l.clone())).collect()
        };
        for (p, mut list) in lists {
            // A partition is read in offset order, so this is a no-op unless a replay
            // interleaved; it keeps the order a promise rather than an assumption.
            if !list.is_sorted_by_key(|(o, _)| *o) {
                list.sort_by_key(|(o, _)| *o);
            }
            for (o, v) in &list {
                f(p, *o, v);
            }
        }
        Ok(())
    }

    fn keys(&self, window: Window) -> Vec<u32> {
        let g = self.lock();
        let mut k: Vec<u32> = g.windows.get(&window).map(|w| w.keys().map(|(k, _)| *k).collect()).unwrap_or_default();
        k.dedup();
        k
    }

    fn windows(&self) -> Vec<Window> {
        self.lock().windows.keys().copied().collect()
    }

    fn drop_window(&self, window: Window) -> Result<(), StateError> {
        let mut g = self.lock();
        if let Some(w) = g.windows.remove(&window) {
            for list in w.values() {
                g.records -= list.len() as u64;
                g.bytes -= list.iter().map(|(_, v)| v.len() as u64).sum::<u64>();
            }
        }
        Ok(())
    }

    fn stats(&self) -> StateStats {
        let g = self.lock();
        let keys = g
            .windows
            .values()
            .map(|w| {
                let mut k: Vec<u32> = w.keys().map(|(k, _)| *k).collect();
                k.dedup();
                k.len() as u64
            })
            .sum();
        StateStats { records: g.records, keys, bytes: g.bytes, memory_bytes: g.bytes }
    }

    /// Copies the maps' structure and shares every record's bytes: O(records) pointer
    /// copies, no byte copies.
    fn snapshot(&self, _scratch: &Path) -> Result<Snapshot, StateError> {
        let g = self.lock();
        let mut out = Vec::with_capacity(g.records as usize);
        for (window, w) in &g.windows {
            for ((key, partition), list) in w {
                for (offset, v) in list {
                    let slot = Slot { window: *window, key: *key, partition: *partition, offset: *offset };
                    out.push((slot, v.clone()));
                }
            }
        }
        Ok(Snapshot::Records(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_state_behaves_as_every_backend_must() {
        super::super::tests::behaves(&HeapState::default());
    }

    #[test]
    fn a_snapshot_shares_bytes_and_holds_every_record() {
        let s = HeapState::default();
        s.put(&super::super::tests::sample()).unwrap();
        let Snapshot::Records(r) = s.snapshot(Path::new("/nonexistent")).unwrap() else { panic!("records") };
        assert_eq!(r.len(), 30);
        s.drop_window(Window { start_ms: 0, end_ms: 1000 }).unwrap();
        assert_eq!(r.len(), 30, "the snapshot outlives a drop");
    }
}
