//! The LSM backend: RocksDB on the local disk, as Flink's EmbeddedRocksDBStateBackend.
//!
//! - **A ring of [`SLOTS`] column families** (`s0` … `s3`): window *n* (its start
//!   divided by its length) lives in slot *n* mod [`SLOTS`], so consecutive windows,
//!   the usual one to three open at a time, each have a family of their own. Closing a
//!   window whose slot holds no other window drops the family, and with it its files:
//!   no tombstones, no compaction to reclaim space. When a backlog keeps more windows
//!   open than there are slots, a slot holds several; closing one of them deletes its
//!   key range, and the space comes back when the slot's last window closes. The ring
//!   is small because RocksDB rewrites (and re-parses) its OPTIONS file, naming every
//!   family, each time one is created or dropped: a catch-up of 200,000 records over
//!   200 one-second windows took 19.8 CPU-s with one family per window (half of it in
//!   `WriteOptionsFile`, by `perf`), the same with 16 slots, and 2.0 CPU-s with 4.
//! - A window's files are written once and read once (when it closes), so automatic
//!   compaction is off: it would only rewrite files that are about to be dropped, and
//!   every rewritten file would be new bytes for the next incremental checkpoint.
//! - **Keys** are big-endian `window start (i64) | key (u32) | partition (i32) | offset
//!   (i64)`, signs flipped, so RocksDB's byte order is the order a window closes in.
//!   **Values** are the message bytes verbatim: the message is already its own compact
//!   encoding (JSON text or Avro binary), so serializing it again would only cost CPU.
//! - **No write-ahead log**: durability comes from checkpoints plus Kafka replay, as in
//!   Flink, which disables RocksDB's WAL. The local directory is wiped on start and
//!   rebuilt from the latest checkpoint.
//! - **zstd** (level 1) block compression in 64 KiB blocks. Every new SST byte is an
//!   incremental checkpoint's byte, so this ratio is most of what such a checkpoint
//!   costs. On the seed-003 bench's JSON records, SST files were 0.6 of the records'
//!   bytes with LZ4 in RocksDB's default 4 KiB blocks; the zstd and lz4 command-line
//!   tools, run on 64 KiB chunks of 20,000 such records, leave 0.28 and 0.45.

use super::{Backend, Record, Snapshot, StateError, StateStats, Window, WindowState};
use rocksdb::{
    checkpoint::Checkpoint, BlockBasedOptions, ColumnFamilyDescriptor, IteratorMode, Options, WriteBatch, WriteOptions,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

type Db = rocksdb::DBWithThreadMode<rocksdb::MultiThreaded>;

/// zstd's level for SST blocks: 1 is its fastest, and on this job's records within 5%
/// of level 3's size (64 KiB blocks of the seed-003 bench's JSON: 0.28 against 0.27).
const ZSTD_LEVEL: i32 = 1;

/// SST block size. RocksDB's default is 4 KiB; a window's files are read once, in
/// order, so larger blocks cost nothing on reads and give the compressor more context
/// (the zstd tool at level 3 on the same records: 0.36 of their bytes in 4 KiB chunks,
/// 0.27 in 64 KiB).
const BLOCK_BYTES: usize = 64 << 10;

/// Column families in the ring.
pub const SLOTS: i64 = 4;

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
    o.set_compression_type(rocksdb::DBCompressionType::Zstd);
    // window bits and strategy at zstd's defaults (-14, 0), level 1, no dictionary.
    o.set_compression_options(-14, ZSTD_LEVEL, 0, 0);
    let mut table = BlockBasedOptions::default();
    table.set_block_size(BLOCK_BYTES);
    o.set_block_based_table_factory(&table);
    o.set_write_buffer_size(32 << 20);
    o.set_disable_auto_compactions(true);
    // With compaction off, level 0 only grows until the window closes: do not stall.
    o.set_level_zero_slowdown_writes_trigger(1 << 20);
    o.set_level_zero_stop_writes_trigger(1 << 20);
    o
}

/// The slot (column family) of window `w`.
fn cf_name(w: Window) -> String {
    let n = w.start_ms.div_euclid((w.end_ms - w.start_ms).max(1));
    format!("s{}", n.rem_euclid(SLOTS))
}

fn is_slot(name: &str) -> bool {
    name.strip_prefix('s').is_some_and(|n| n.parse::<i64>().is_ok_and(|n| (0..SLOTS).contains(&n)))
}

fn flip64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// The RocksDB key of a record (see the module notes).
pub fn encode_key(window_start: i64, key: u32, partition: i32, offset: i64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&flip64(window_start));
    k[8..12].copy_from_slice(&key.to_be_bytes());
    k[12..16].copy_from_slice(&((partition as u32) ^ 0x8000_0000).to_be_bytes());
    k[16..].copy_from_slice(&flip64(offset));
    k
}

/// The inverse of [`encode_key`]: `(window start, key, partition, offset)`.
pub fn decode_key(k: &[u8]) -> Option<(i64, u32, i32, i64)> {
    if k.len() != 24 {
        return None;
    }
    let unflip = |b: &[u8]| (u64::from_be_bytes(b.try_into().expect("8 bytes")) ^ (1 << 63)) as i64;
    let key = u32::from_be_bytes(k[8..12].try_into().ok()?);
    let partition = (u32::from_be_bytes(k[12..16].try_into().ok()?) ^ 0x8000_0000) as i32;
    Some((unflip(&k[..8]), key, partition, unflip(&k[16..])))
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

    /// Open the files a checkpoint restored into `dir` (windows of `size_ms`), and count
    /// what they hold.
    pub fn open_restored(dir: &Path, size_ms: i64) -> Result<LsmState, StateError> {
        let names = Db::list_cf(&db_options(), dir).map_err(lsm_err("list column families"))?;
        let cfs = names.iter().map(|n| {
            let opts = if is_slot(n) { window_options() } else { Options::default() };
            ColumnFamilyDescriptor::new(n, opts)
        });
        let db = Db::open_cf_descriptors(&db_options(), dir, cfs).map_err(lsm_err("open"))?;
        let s = LsmState { db, dir: dir.to_path_buf(), counts: Mutex::default() };
        s.recount(&names, size_ms)?;
        Ok(s)
    }

    /// Rebuild the counts from the files. A key holds its window's start; its end comes
    /// from `size_ms`, the windows' length.
    fn recount(&self, names: &[String], size_ms: i64) -> Result<(), StateError> {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        for name in names.iter().filter(|n| is_slot(n)) {
            let cf = self.db.cf_handle(name).expect("listed");
            for item in self.db.iterator_cf(&cf, IteratorMode::Start) {
                let (k, v) = item.map_err(lsm_err("iterate"))?;
                let (start, key, _, _) =
                    decode_key(&k).ok_or_else(|| StateError::Corrupt(format!("{name}: a key of {} bytes", k.len())))?;
                let w = Window { start_ms: start, end_ms: start + size_ms };
                let e = c.windows.entry(w).or_default().entry(key).or_default();
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
        (0..SLOTS)
            .filter_map(|n| self.db.cf_handle(&format!("s{n}")))
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
        let mut handles = BTreeMap::new();
        for w in records.iter().map(|(s, _)| s.window) {
            c.windows.entry(w).or_default();
            let name = cf_name(w);
            if !handles.contains_key(&name) {
                if self.db.cf_handle(&name).is_none() {
                    self.db.create_cf(&name, &window_options()).map_err(lsm_err("create column family"))?;
                }
                handles.insert(name.clone(), self.db.cf_handle(&name).expect("created above"));
            }
        }
        let mut batch = WriteBatch::default();
        for (s, v) in records {
            let cf = &handles[&cf_name(s.window)];
            batch.put_cf(cf, encode_key(s.window.start_ms, s.key, s.partition, s.offset), v);
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
        let from = encode_key(window.start_ms, key, i32::MIN, i64::MIN);
        for item in self.db.iterator_cf(&cf, IteratorMode::From(&from, rocksdb::Direction::Forward)) {
            let (k, v) = item.map_err(lsm_err("iterate"))?;
            let Some((start, k2, p, o)) = decode_key(&k) else {
                return Err(StateError::Corrupt("a key of the wrong size".into()));
            };
            if start != window.start_ms || k2 != key {
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
        if c.windows.remove(&window).is_none() {
            return Ok(());
        }
        let name = cf_name(window);
        if c.windows.keys().any(|w| cf_name(*w) == name) {
            // The slot holds later windows too (a backlog): delete this one's keys.
            let cf = self.db.cf_handle(&name).expect("a slot with windows exists");
            let (from, to) = (flip64(window.start_ms), flip64(window.start_ms + 1));
            let mut wo = WriteOptions::default();
            wo.disable_wal(true);
            let mut batch = WriteBatch::default();
            batch.delete_range_cf(&cf, from, to);
            return self.db.write_opt(batch, &wo).map_err(lsm_err("delete a window's keys"));
        }
        self.db.drop_cf(&name).map_err(lsm_err("drop column family"))
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
    fn keys_sort_as_file_order_and_windows_fill_the_ring() {
        let mut v = vec![(0, 2, 0, 5), (0, 1, 3, 0), (0, 1, 0, 9), (0, 1, 0, 10), (-5, 0, 7, 1), (7, 1, -1, 3)];
        let mut enc: Vec<[u8; 24]> = v.iter().map(|(w, k, p, o)| encode_key(*w, *k, *p, *o)).collect();
        enc.sort();
        v.sort();
        assert_eq!(enc.iter().map(|k| decode_key(k).unwrap()).collect::<Vec<_>>(), v);
        let w = |n: i64| Window { start_ms: n * 1000, end_ms: n * 1000 + 1000 };
        assert_eq!(cf_name(w(-1)), "s3");
        assert_ne!(cf_name(w(3)), cf_name(w(4)), "consecutive windows, separate families");
        assert_eq!(cf_name(w(3)), cf_name(w(3 + SLOTS)));
        assert!(is_slot("s0") && is_slot("s3") && !is_slot("s4") && !is_slot("default"));
    }

    /// More windows open than slots (a backlog): closing one deletes only its keys, and
    /// the slot's family goes when its last window closes.
    #[test]
    fn windows_sharing_a_slot_close_one_at_a_time() {
        let d = tempfile::tempdir().unwrap();
        let s = LsmState::open_empty(&d.path().join("db")).unwrap();
        let w = |n: i64| Window { start_ms: n * 1000, end_ms: n * 1000 + 1000 };
        let recs: Vec<Record> = (0..40)
            .map(|n| {
                let slot = super::super::Slot { window: w(n), key: 0, partition: 0, offset: n };
                (slot, bytes::Bytes::from_static(b"v"))
            })
            .collect();
        s.put(&recs).unwrap();
        assert_eq!(s.windows().len(), 40);
        s.drop_window(w(0)).unwrap();
        assert!(s.db.cf_handle("s0").is_some(), "windows 4 and 8 still live in slot 0");
        let mut seen = Vec::new();
        s.scan(w(4), 0, &mut |_, o, _| seen.push(o)).unwrap();
        assert_eq!(seen, vec![4], "a neighbour's records are its own only");
        for n in (4..40).step_by(4) {
            s.drop_window(w(n)).unwrap();
        }
        assert!(s.db.cf_handle("s0").is_none(), "the slot's last window closed: its family is gone");
        assert_eq!(s.stats().records, 30);
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
        let back = LsmState::open_restored(&dir, 1000).unwrap();
        assert_eq!(back.stats().records, 30, "the hard links outlive the drop");
        assert_eq!(back.keys(Window { start_ms: 0, end_ms: 1000 }), vec![0, 1, 2, 3]);
    }
}
