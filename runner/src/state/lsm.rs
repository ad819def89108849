//! The LSM backend: RocksDB on the local disk, as Flink's EmbeddedRocksDBStateBackend.
//!
//! - **One column family per open window** (`w<start>_<end>`). Closing a window drops
//!   its column family, and with it its files: no tombstones, no compaction to reclaim
//!   space. A window's files are written once and read once (when it closes), so
//!   automatic compaction is off for window column families: it would only rewrite
//!   files that are about to be dropped, and every rewritten file would be new bytes
//!   for the next incremental checkpoint.
//! - **Keys** are big-endian `key (u32) | partition (i32, sign flipped) | offset (i64,
//!   sign flipped)`, so RocksDB's byte order is the file order a window closes in.
//!   **Values** are the message bytes verbatim: the message is already its own compact
//!   encoding (JSON text or Avro binary), so serializing it again would only cost CPU.
//! - **No write-ahead log**: durability comes from checkpoints plus Kafka replay, as in
//!   Flink, which disables RocksDB's WAL. The local directory is wiped on start and
//!   rebuilt from the latest checkpoint.
//! - **LZ4** block compression: cheap to write and read, and it is what makes an SST
//!   file smaller than the records it holds.

use super::{Backend, Record, Snapshot, StateError, StateStats, Window, WindowState};
use rocksdb::{checkpoint::Checkpoint, ColumnFamilyDescriptor, IteratorMode, Options, WriteBatch, WriteOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

type Db = rocksdb::DBWithThreadMode<rocksdb::MultiThreaded>;

/// RocksDB window state.
pub struct LsmState {
    db: Db,
    dir: PathBuf,
    counts: Mutex<Counts>,
}

/// Per window: records and bytes per key (kept beside RocksDB so `keys` and `stats`
/// need no scan; rebuilt from the files on restore).
#[derive(Default)]
struct Counts {
    windows: BTreeMap<Window, BTreeMap<u32, (u64, u64)>>,
}

fn lsm_err(op: &'static str) -> impl FnOnce(rocksdb::Error) -> StateError {
    move |e| StateError::Lsm { op, message: e.into_string() }
}

fn db_options() -> Options {
    let mut o = Options::default();
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    o.set_max_background_jobs(2);
    // All memtables together; each window's column family flushes at 32 MiB.
    o.set_db_write_buffer_size(128 << 20);
    o
}

fn window_options() -> Options {
    let mut o = Options::default();
    o.set_compression_type(rocksdb::DBCompressionType::Lz4);
    o.set_write_buffer_size(32 << 20);
    o.set_disable_auto_compactions(true);
    // With compaction off, level 0 only grows until the window closes: do not stall.
    o.set_level_zero_slowdown_writes_trigger(1 << 20);
    o.set_level_zero_stop_writes_trigger(1 << 20);
    o
}

fn cf_name(w: Window) -> String {
    format!("w{}_{}", w.start_ms, w.end_ms)
}

fn parse_cf(name: &str) -> Option<Window> {
    let (a, b) = name.strip_prefix('w')?.split_once('_')?;
    Some(Window { start_ms: a.parse().ok()?, end_ms: b.parse().ok()? })
}

/// The RocksDB key of a record (see the module notes).
pub fn encode_key(key: u32, partition: i32, offset: i64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..4].copy_from_slice(&key.to_be_bytes());
    k[4..8].copy_from_slice(&((partition as u32) ^ 0x8000_0000).to_be_bytes());
    k[8..].copy_from_slice(&((offset as u64) ^ (1 << 63)).to_be_bytes());
    k
}

/// The inverse of [`encode_key`].
pub fn decode_key(k: &[u8]) -> Option<(u32, i32, i64)> {
    if k.len() != 16 {
        return None;
    }
    let key = u32::from_be_bytes(k[..4].try_into().ok()?);
    let partition = (u32::from_be_bytes(k[4..8].try_into().ok()?) ^ 0x8000_0000) as i32;
    let offset = (u64::from_be_bytes(k[8..].try_into().ok()?) ^ (1 << 63)) as i64;
    Some((key, partition, offset))
}

impl LsmState {
    /// An empty store in `dir` (anything there is removed first).
    pub fn open_empty(dir: &Path) -> Result<LsmState, StateError> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(StateError::io("remove", dir))?;
        }
        std::fs::create_dir_all(dir).map_err(StateError::io("mkdir", dir))?;
        let db = Db::open(&db_options(), dir).map_err(lsm_err("open"))?;
        Ok(LsmState { db, dir: dir.to_path_buf(), counts: Mutex::default() })
    }

    /// Open the files a checkpoint restored into `dir`, and count what they hold.
    pub fn open_restored(dir: &Path) -> Result<LsmState, StateError> {
        let names = Db::list_cf(&db_options(), dir).map_err(lsm_err("list column families"))?;
        let cfs = names.iter().map(|n| {
            let opts = if parse_cf(n).is_some() { window_options() } else { Options::default() };
            ColumnFamilyDescriptor::new(n, opts)
        });
        let db = Db::open_cf_descriptors(&db_options(), dir, cfs).map_err(lsm_err("open"))?;
        let s = LsmState { db, dir: dir.to_path_buf(), counts: Mutex::default() };
        s.recount(&names)?;
        Ok(s)
    }

    fn recount(&self, names: &[String]) -> Result<(), StateError> {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        for (name, w) in names.iter().filter_map(|n| parse_cf(n).map(|w| (n, w))) {
            let cf = self.db.cf_handle(name).expect("listed");
            let per_key = c.windows.entry(w).or_default();
            for item in self.db.iterator_cf(&cf, IteratorMode::Start) {
                let (k, v) = item.map_err(lsm_err("iterate"))?;
                let (key, _, _) =
                    decode_key(&k).ok_or_else(|| StateError::Corrupt(format!("{name}: a key of {} bytes", k.len())))?;
                let e = per_key.entry(key).or_default();
                e.0 += 1;
                e.1 += v.len() as u64;
            }
        }
        Ok(())
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn int_property(&self, name: &str) -> u64 {
        let c = self.counts();
        c.windows
            .keys()
            .filter_map(|w| self.db.cf_handle(&cf_name(*w)))
            .map(|cf| self.db.property_int_value_cf(&cf, name).ok().flatten().unwrap_or(0))
            .sum()
    }

    /// Where the files live.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl WindowState for LsmState {
    fn backend(&self) -> Backend {
        Backend::Lsm
    }

    fn put(&self, records: &[Record]) -> Result<(), StateError> {
        let mut c = self.counts();
        for w in records.iter().map(|(s, _)| s.window) {
            if let std::collections::btree_map::Entry::Vacant(e) = c.windows.entry(w) {
                self.db.create_cf(cf_name(w), &window_options()).map_err(lsm_err("create column family"))?;
                e.insert(BTreeMap::new());
            }
        }
        let mut batch = WriteBatch::default();
        for (s, v) in records {
            let cf = self.db.cf_handle(&cf_name(s.window)).expect("created above");
            batch.put_cf(&cf, encode_key(s.key, s.partition, s.offset), v);
        }
        let mut wo = WriteOptions::default();
        wo.disable_wal(true);
        self.db.write_opt(batch, &wo).map_err(lsm_err("write"))?;
        for (s, v) in records {
            let e = c.windows.get_mut(&s.window).expect("created above").entry(s.key).or_default();
            e.0 += 1;
            e.1 += v.len() as u64;
        }
        Ok(())
    }

    fn scan(&self, window: Window, key: u32, f: &mut dyn FnMut(i32, i64, &[u8])) -> Result<(), StateError> {
        let Some(cf) = self.db.cf_handle(&cf_name(window)) else { return Ok(()) };
        let from = encode_key(key, i32::MIN, i64::MIN);
        for item in self.db.iterator_cf(&cf, IteratorMode::From(&from, rocksdb::Direction::Forward)) {
            let (k, v) = item.map_err(lsm_err("iterate"))?;
            let Some((k2, p, o)) = decode_key(&k) else {
                return Err(StateError::Corrupt("a key of the wrong size".into()));
            };
            if k2 != key {
                break;
            }
            f(p, o, &v);
        }
        Ok(())
    }

    fn keys(&self, window: Window) -> Vec<u32> {
        self.counts().windows.get(&window).map(|k| k.keys().copied().collect()).unwrap_or_default()
    }

    fn windows(&self) -> Vec<Window> {
        self.counts().windows.keys().copied().collect()
    }

    fn drop_window(&self, window: Window) -> Result<(), StateError> {
        let mut c = self.counts();
        if c.windows.remove(&window).is_some() {
            self.db.drop_cf(&cf_name(window)).map_err(lsm_err("drop column family"))?;
        }
        Ok(())
    }

    fn stats(&self) -> StateStats {
        let (records, keys) = {
            let c = self.counts();
            let records = c.windows.values().flat_map(|k| k.values()).map(|(n, _)| n).sum();
            (records, c.windows.values().map(|k| k.len() as u64).sum())
        };
        let files = self.int_property("rocksdb.total-sst-files-size");
        let memtables = self.int_property("rocksdb.cur-size-all-mem-tables");
        let cache = self.db.property_int_value("rocksdb.block-cache-usage").ok().flatten().unwrap_or(0);
        StateStats { records, keys, bytes: files + memtables, memory_bytes: memtables + cache }
    }

    /// Flushes every memtable and hard-links the live files into `scratch/rocksdb`
    /// (RocksDB's Checkpoint API, which flushes when the WAL is off).
    fn snapshot(&self, scratch: &Path) -> Result<Snapshot, StateError> {
        let dir = scratch.join("rocksdb");
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(StateError::io("remove", &dir))?;
        }
        std::fs::create_dir_all(scratch).map_err(StateError::io("mkdir", scratch))?;
        Checkpoint::new(&self.db).and_then(|c| c.create_checkpoint(&dir)).map_err(lsm_err("create checkpoint"))?;
        Ok(Snapshot::Files(dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_as_file_order() {
        let mut v = vec![(2, 0, 5), (1, 3, 0), (1, 0, 9), (1, 0, 10), (0, 7, 1), (1, -1, 3)];
        let mut enc: Vec<[u8; 16]> = v.iter().map(|(k, p, o)| encode_key(*k, *p, *o)).collect();
        enc.sort();
        v.sort();
        assert_eq!(enc.iter().map(|k| decode_key(k).unwrap()).collect::<Vec<_>>(), v);
        assert_eq!(
            parse_cf(&cf_name(Window { start_ms: -1000, end_ms: 0 })),
            Some(Window { start_ms: -1000, end_ms: 0 })
        );
    }

    #[test]
    fn lsm_state_behaves_as_every_backend_must() {
        let d = tempfile::tempdir().unwrap();
        super::super::tests::behaves(&LsmState::open_empty(&d.path().join("db")).unwrap());
    }

    #[test]
    fn a_checkpoint_directory_reopens_with_the_same_records() {
        let d = tempfile::tempdir().unwrap();
        let s = LsmState::open_empty(&d.path().join("db")).unwrap();
        s.put(&super::super::tests::sample()).unwrap();
        let Snapshot::Files(dir) = s.snapshot(&d.path().join("scratch")).unwrap() else { panic!("files") };
        s.drop_window(Window { start_ms: 0, end_ms: 1000 }).unwrap();
        drop(s);
        let back = LsmState::open_restored(&dir).unwrap();
        assert_eq!(back.stats().records, 30, "the hard links outlive the drop");
        assert_eq!(back.keys(Window { start_ms: 0, end_ms: 1000 }), vec![0, 1, 2, 3]);
    }
}
