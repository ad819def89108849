//! The job's open windows: the records in the state backend, and beside them the
//! positions the commit protocol and checkpoints need, changed together under one lock
//! so that a checkpoint's positions always match its state.
//!
//! Readers [`OpenWindows::add`] batches; the coordinator asks for the [`due`] window,
//! [`close`]s it (from then on, late records for it go to the next window), renders
//! its shards, and once its files are published, [`committed`] drops it.
//!
//! Beside them, the stages' latencies for the dashboard: `read` (Kafka timestamp → read
//! into a window), `write` (a window's close → its files published) and `end_to_end`
//! (Kafka timestamp → the record's file published; kept per open window as a small
//! histogram of how long before the window's end each record arrived, so no record's
//! time is stored in the state).
//!
//! [`due`]: OpenWindows::due
//! [`close`]: OpenWindows::close
//! [`committed`]: OpenWindows::committed

use super::window::{assign, shard_of, Placed, Published, TimestampBounds};
use crate::state::manifest::Manifest;
use crate::state::{Record, Slot, Snapshot, StateError, StateStats, Window, WindowState};
use crate::stats::{Stage, StageStats, StageSummary};
use bytes::Bytes;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// One message as a reader hands it over.
#[derive(Debug, Clone)]
pub struct Msg {
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Kafka timestamp (ms).
    pub ts_ms: i64,
    /// The value; `None` for a tombstone.
    pub value: Option<Bytes>,
}

/// Counts of what was read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
pub struct Counts {
    /// Records placed in a window.
    pub records: u64,
    /// Records skipped on replay: a committed window holds them.
    pub skipped_published: u64,
    /// Records whose window had closed, placed in the next open one.
    pub late_records: u64,
    /// Messages without a value.
    pub null_values: u64,
    /// Windows a restored checkpoint held that the commit log had since committed
    /// (dropped at the start).
    pub dropped_on_restore: u64,
    /// Message bytes placed.
    pub bytes: u64,
    /// Records whose timestamp was out of bounds, windowed by the processing time
    /// (`timestampPolicy=CLAMP`).
    pub timestamps_clamped: u64,
    /// Errors the Kafka consumers reported (and waited out).
    pub consumer_errors: u64,
    /// Offsets deleted (retention) before they were read, skipped under
    /// `offsetGapPolicy=SKIP`.
    pub offsets_lost_to_retention: u64,
    /// Partitions found past their log's end and moved to it (`offsetGapPolicy=SKIP`).
    pub partitions_past_end: u64,
    /// Partitions found while running.
    pub partitions_discovered: u64,
}

/// Why a batch could not be placed.
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    /// The state backend failed; nothing of the batch was placed.
    #[error(transparent)]
    State(#[from] StateError),
    /// A record's timestamp is out of bounds under `timestampPolicy=FAIL`; nothing of
    /// the batch was placed.
    #[error("record at partition {partition} offset {offset}: {why}")]
    Timestamp {
        /// Its partition.
        partition: i32,
        /// Its offset.
        offset: i64,
        /// Why.
        why: String,
    },
}

/// What a checkpoint keeps beside the state: per open window and partition, the
/// smallest offset it holds (where a restart without this checkpoint would resume).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Extras {
    /// `(window, partition → smallest offset)`.
    pub min_offset: Vec<(Window, BTreeMap<i32, i64>)>,
}

struct Progress {
    read_pos: BTreeMap<i32, i64>,
    newest_ts: BTreeMap<i32, i64>,
    min_offset: BTreeMap<Window, BTreeMap<i32, i64>>,
    closed_through: Option<Window>,
    published: Published,
    counts: Counts,
    latency: Latency,
}

/// Latencies since the dashboard last took them, and what end-to-end needs per window.
#[derive(Default)]
struct Latency {
    stages: StageStats,
    /// Per open window: milliseconds from each record's timestamp to the window's end.
    before_end: BTreeMap<Window, Histogram<u64>>,
    /// When each window being committed was closed.
    closed_at: BTreeMap<Window, Instant>,
}

impl Latency {
    fn read(&mut self, w: Window, ts_ms: i64, now_ms: i64) {
        self.stages.record(Stage::Read, (now_ms - ts_ms).max(0) as u64 * 1000);
        // 1 ms to a day, 2 significant digits: a few KiB per open window.
        let h =
            self.before_end.entry(w).or_insert_with(|| Histogram::new_with_bounds(1, 86_400_000, 2).expect("bounds"));
        let _ = h.record((w.end_ms - ts_ms).clamp(1, 86_400_000) as u64);
    }

    fn published(&mut self, w: Window, now_ms: i64) {
        if let Some(t) = self.closed_at.remove(&w) {
            self.stages.record(Stage::Write, t.elapsed().as_micros() as u64);
        }
        let Some(h) = self.before_end.remove(&w) else { return };
        let after_end_ms = (now_ms - w.end_ms).max(0) as u64;
        for v in h.iter_recorded() {
            self.stages.record_n(Stage::EndToEnd, (v.value_iterated_to() + after_end_ms) * 1000, v.count_at_value());
        }
    }
}

/// Open windows over a state backend.
pub struct OpenWindows {
    size_ms: i64,
    shards: u32,
    state: Box<dyn WindowState>,
    bounds: TimestampBounds,
    p: Mutex<Progress>,
}

impl OpenWindows {
    /// Windows of `size_ms` with `shards` keys each, reading from `read_pos`, over
    /// `state` (empty, or restored with `extras`), given what is `published`.
    pub fn new(
        size_ms: i64,
        shards: u32,
        state: Box<dyn WindowState>,
        read_pos: BTreeMap<i32, i64>,
        extras: Extras,
        published: Published,
    ) -> Result<OpenWindows, StateError> {
        // Windows a restored checkpoint holds that have since been committed.
        let mut counts = Counts::default();
        for w in state.windows() {
            if published.last.is_some_and(|l| w <= l) {
                tracing::info!(window = %w.label(), "the restored state holds a window committed since its checkpoint: dropped");
                state.drop_window(w)?;
                counts.dropped_on_restore += 1;
            }
        }
        let min_offset = extras.min_offset.into_iter().filter(|(w, _)| published.last.is_none_or(|l| *w > l)).collect();
        let p = Progress {
            read_pos,
            newest_ts: BTreeMap::new(),
            min_offset,
            closed_through: published.last,
            published,
            counts,
            latency: Latency::default(),
        };
        Ok(OpenWindows { size_ms, shards, state, bounds: TimestampBounds::default(), p: Mutex::new(p) })
    }

    /// Window out-of-bounds timestamps as `bounds` says (default: clamp, 1 h ahead).
    pub fn with_timestamp_bounds(mut self, bounds: TimestampBounds) -> OpenWindows {
        self.bounds = bounds;
        self
    }

    /// Partitions a reader moved (`offsetGapPolicy=SKIP`): reading resumes there, so the
    /// next checkpoint and "caught up" see the new positions.
    pub fn move_positions(&self, moved: &BTreeMap<i32, i64>) {
        self.lock().read_pos.extend(moved);
    }

    /// Count what `offsetGapPolicy=SKIP` went past.
    pub fn note_skipped(&self, s: crate::kafka::gaps::Skipped) {
        let mut g = self.lock();
        g.counts.offsets_lost_to_retention += s.lost;
        g.counts.partitions_past_end += s.past_end;
    }

    /// Count partitions found at start that an existing job had never seen.
    pub fn note_discovered(&self, n: u64) {
        self.lock().counts.partitions_discovered += n;
    }

    /// Count one error a Kafka consumer reported.
    pub fn note_consumer_error(&self) {
        self.lock().counts.consumer_errors += 1;
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.p.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Place a batch of messages, and advance their partitions' positions with it. All
    /// or nothing: the positions, counts and windows change only once the state backend
    /// holds the batch, so a checkpoint never records a position past records that
    /// are not in its state.
    pub fn add(&self, msgs: &[Msg]) -> Result<(), AddError> {
        let mut g = self.lock();
        let now_ms = chrono::Utc::now().timestamp_millis();
        let mut batch: Vec<Record> = Vec::with_capacity(msgs.len());
        let mut placed: Vec<(Window, i64, bool)> = Vec::with_capacity(msgs.len());
        let mut times = Vec::with_capacity(msgs.len());
        for m in msgs {
            let (ts, clamped) = match self.bounds.place(m.ts_ms, now_ms) {
                Placed::Event(t) => (t, false),
                Placed::Clamped(t) => (t, true),
                Placed::Refused(why) => {
                    return Err(AddError::Timestamp { partition: m.partition, offset: m.offset, why })
                }
            };
            times.push(ts);
            let Some(v) = &m.value else { continue };
            let raw = Window::of(ts, self.size_ms);
            if g.published.holds(m.partition, m.offset, &raw) {
                continue;
            }
            let window = assign(raw, g.closed_through.as_ref(), self.size_ms);
            placed.push((window, ts, clamped));
            let key = shard_of(m.partition, m.offset, self.shards);
            batch.push((Slot { window, key, partition: m.partition, offset: m.offset }, v.clone()));
        }
        self.state.put(&batch)?;
        let mut placed = placed.into_iter();
        for (m, ts) in msgs.iter().zip(times) {
            g.read_pos.insert(m.partition, m.offset + 1);
            let e = g.newest_ts.entry(m.partition).or_insert(ts);
            *e = (*e).max(ts);
            let Some(v) = &m.value else {
                g.counts.null_values += 1;
                continue;
            };
            let raw = Window::of(ts, self.size_ms);
            if g.published.holds(m.partition, m.offset, &raw) {
                g.counts.skipped_published += 1;
                continue;
            }
            let (window, ts, clamped) = placed.next().expect("one placement per record put");
            if clamped {
                g.counts.timestamps_clamped += 1;
                let n = g.counts.timestamps_clamped;
                if n.is_power_of_two() {
                    tracing::warn!(
                        partition = m.partition,
                        offset = m.offset,
                        timestamp_ms = m.ts_ms,
                        clamped_so_far = n,
                        "timestamp out of bounds: windowed by the processing time (timestampPolicy=CLAMP)"
                    );
                }
            }
            g.counts.late_records += u64::from(window != raw);
            g.counts.records += 1;
            g.counts.bytes += v.len() as u64;
            let low = g.min_offset.entry(window).or_default().entry(m.partition).or_insert(m.offset);
            *low = (*low).min(m.offset);
            g.latency.read(window, ts, now_ms);
        }
        Ok(())
    }

    /// The earliest open window, if the watermark has passed its end: the smallest
    /// newest timestamp over partitions not `caught_up`, or `now_ms` less a second when
    /// all are.
    pub fn due(&self, caught_up: &BTreeSet<i32>, now_ms: i64) -> Option<Window> {
        let w = self.first_open()?;
        let g = self.lock();
        let watermark = g
            .read_pos
            .keys()
            .filter(|p| !caught_up.contains(p))
            .map(|p| g.newest_ts.get(p).copied().unwrap_or(i64::MIN))
            .min()
            .unwrap_or(now_ms - 1000);
        (watermark >= w.end_ms).then_some(w)
    }

    /// The earliest window not yet closed.
    pub fn first_open(&self) -> Option<Window> {
        let closed = self.lock().closed_through;
        self.state.windows().into_iter().find(|w| closed.is_none_or(|c| *w > c))
    }

    /// Close `w`: records for it read from now on go to the next window. Returns the
    /// positions when it closed and where a restart resumes (the oldest record still
    /// in a later window, else the next offset not read).
    pub fn close(&self, w: Window) -> (BTreeMap<i32, i64>, BTreeMap<i32, i64>) {
        let mut g = self.lock();
        g.closed_through = Some(g.closed_through.map_or(w, |c| c.max(w)));
        g.latency.closed_at.insert(w, Instant::now());
        let close_pos = g.read_pos.clone();
        let mut resume = close_pos.clone();
        for (_, lows) in g.min_offset.iter().filter(|(ow, _)| **ow > w) {
            for (p, o) in lows {
                let e = resume.entry(*p).or_insert(*o);
                *e = (*e).min(*o);
            }
        }
        (close_pos, resume)
    }

    /// `w`'s files are published: drop it, and skip its records on replay.
    pub fn committed(&self, w: Window, close_pos: BTreeMap<i32, i64>) -> Result<(), StateError> {
        let mut g = self.lock();
        g.published = Published { last: Some(w), close_pos };
        g.min_offset.remove(&w);
        g.latency.published(w, chrono::Utc::now().timestamp_millis());
        self.state.drop_window(w)
    }

    /// The keys (file shards) `w` holds.
    pub fn keys(&self, w: Window) -> Vec<u32> {
        self.state.keys(w)
    }

    /// `(partition, offset, value)` of every record of `w` with key `key`, in order.
    pub fn records(&self, w: Window, key: u32) -> Result<Vec<(i32, i64, Vec<u8>)>, StateError> {
        let mut out = Vec::new();
        self.state.scan(w, key, &mut |p, o, v| out.push((p, o, v.to_vec())))?;
        Ok(out)
    }

    /// The synchronous part of a checkpoint: the state's snapshot, and a manifest with
    /// the positions and extras of the same instant (no batch lands in between).
    pub fn snapshot(&self, scratch: &Path) -> Result<(Snapshot, Manifest), StateError> {
        let g = self.lock();
        let snap = self.state.snapshot(scratch)?;
        let extras = Extras { min_offset: g.min_offset.iter().map(|(w, m)| (*w, m.clone())).collect() };
        let m = Manifest {
            created_ms: chrono::Utc::now().timestamp_millis(),
            window_ms: self.size_ms,
            positions: g.read_pos.clone(),
            extra: serde_json::to_value(extras).expect("extras serialize"),
            stats: self.state.stats().into(),
            ..Manifest::default()
        };
        Ok((snap, m))
    }

    /// Positions: the next offset to read per partition.
    pub fn read_pos(&self) -> BTreeMap<i32, i64> {
        self.lock().read_pos.clone()
    }

    /// Add partitions found since the start, at their first positions.
    pub fn add_partitions(&self, start: &BTreeMap<i32, i64>) {
        let mut g = self.lock();
        let new = start.keys().filter(|p| !g.read_pos.contains_key(p)).count() as u64;
        g.counts.partitions_discovered += new;
        for (p, o) in start {
            g.read_pos.entry(*p).or_insert(*o);
        }
    }

    /// Per partition, the newest Kafka timestamp read (ms).
    pub fn newest_ts(&self) -> BTreeMap<i32, i64> {
        self.lock().newest_ts.clone()
    }

    /// Stage latencies since the last call (`read`, `write`, `end_to_end`), then reset.
    pub fn take_stages(&self) -> Vec<StageSummary> {
        self.lock().latency.stages.take()
    }

    /// Counts so far.
    pub fn counts(&self) -> Counts {
        self.lock().counts
    }

    /// The state's size.
    pub fn stats(&self) -> StateStats {
        self.state.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::heap::HeapState;

    fn msg(p: i32, o: i64, ts: i64) -> Msg {
        Msg { partition: p, offset: o, ts_ms: ts, value: Some(Bytes::from(format!("{o}"))) }
    }

    fn open(published: Published) -> OpenWindows {
        let start = [(0, 0), (1, 0)].into_iter().collect();
        OpenWindows::new(1000, 2, Box::new(HeapState::default()), start, Extras::default(), published).unwrap()
    }

    #[test]
    fn windows_close_in_order_and_late_records_move_on() {
        let ow = open(Published::default());
        ow.add(&[msg(0, 0, 100), msg(1, 0, 1500), msg(0, 1, 2500)]).unwrap();
        let none = BTreeSet::new();
        assert_eq!(ow.due(&none, 0), Some(Window::of(0, 1000)), "both partitions are past 1000");
        let w0 = Window::of(0, 1000);
        let (close_pos, resume) = ow.close(w0);
        assert_eq!(close_pos, [(0, 2), (1, 1)].into_iter().collect());
        assert_eq!(resume, [(0, 1), (1, 0)].into_iter().collect(), "the oldest record in a later window");
        ow.add(&[msg(1, 1, 999)]).unwrap();
        assert_eq!(ow.counts().late_records, 1);
        assert!(!ow.keys(w0).is_empty());
        ow.committed(w0, close_pos).unwrap();
        assert_eq!(ow.first_open(), Some(Window::of(1000, 1000)));
        let late: Vec<i64> = (0..2).flat_map(|k| ow.records(Window::of(1000, 1000), k).unwrap()).map(|r| r.1).collect();
        assert!(late.contains(&1), "offset 1 of partition 1 went to the next window: {late:?}");
    }

    /// Read latency is per record at read; end-to-end is per record at the window's
    /// publish, so it includes the wait for the window to end; write is per window.
    #[test]
    fn stage_latencies_cover_read_window_wait_and_publish() {
        let now = chrono::Utc::now().timestamp_millis();
        let ow = OpenWindows::new(
            60_000,
            2,
            Box::new(HeapState::default()),
            BTreeMap::new(),
            Extras::default(),
            Published::default(),
        )
        .unwrap();
        let w = Window::of(now - 30_000, 60_000);
        // Three records 30, 20 and 10 s old (all in one window with an end after `now`,
        // or one that ended already: either way each is older than its window's end).
        let ts: Vec<i64> =
            [30_000, 20_000, 10_000].iter().map(|a| now - a).filter(|t| Window::of(*t, 60_000) == w).collect();
        let msgs: Vec<Msg> = ts.iter().enumerate().map(|(i, t)| msg(0, i as i64, *t)).collect();
        ow.add(&msgs).unwrap();
        let read = ow.take_stages();
        assert_eq!(read[Stage::Read as usize].count, ts.len() as u64);
        assert!(read[Stage::Read as usize].p99_ms >= 10_000.0 * 0.99, "{read:?}");
        assert_eq!(read[Stage::EndToEnd as usize].count, 0, "nothing published yet");
        let (close_pos, _) = ow.close(w);
        ow.committed(w, close_pos).unwrap();
        let done = ow.take_stages();
        assert_eq!(done[Stage::Write as usize].count, 1, "one window committed");
        assert_eq!(done[Stage::Read as usize].count, 0, "taken and reset");
        let e2e = &done[Stage::EndToEnd as usize];
        assert_eq!(e2e.count, ts.len() as u64);
        // The oldest record's end-to-end is at least its age now (2 significant digits).
        let oldest = (now - ts[0]) as f64;
        assert!(e2e.max_ms >= oldest * 0.99, "{e2e:?} against {oldest} ms");
    }

    #[test]
    fn a_restored_window_already_committed_is_dropped_and_replays_are_skipped() {
        let s = HeapState::default();
        let w0 = Window::of(0, 1000);
        s.put(&[(Slot { window: w0, key: 0, partition: 0, offset: 0 }, Bytes::from_static(b"x"))]).unwrap();
        let published = Published { last: Some(w0), close_pos: [(0, 5)].into_iter().collect() };
        let ow = OpenWindows::new(1000, 1, Box::new(s), [(0, 0)].into_iter().collect(), Extras::default(), published)
            .unwrap();
        assert_eq!(ow.first_open(), None);
        assert_eq!(ow.counts().dropped_on_restore, 1);
        ow.add(&[msg(0, 0, 10), msg(0, 5, 10)]).unwrap();
        let c = ow.counts();
        assert_eq!((c.skipped_published, c.late_records, c.records), (1, 1, 1));
    }

    #[test]
    fn a_snapshot_carries_the_positions_of_its_records() {
        let ow = open(Published::default());
        ow.add(&[msg(0, 0, 100), msg(1, 0, 200)]).unwrap();
        let d = tempfile::tempdir().unwrap();
        let (Snapshot::Records(r), m) = ow.snapshot(d.path()).unwrap() else { panic!("heap") };
        assert_eq!(r.len(), 2);
        assert_eq!(m.positions, [(0, 1), (1, 1)].into_iter().collect());
        let e: Extras = serde_json::from_value(m.extra).unwrap();
        assert_eq!(e.min_offset.len(), 1);
    }

    /// Issue 27, item 5: one record in microseconds (a thousand times too far ahead)
    /// used to become the latest window; every later record was then late into a
    /// window never due. Clamped, it is windowed now, and the next windows still close.
    #[test]
    fn a_far_future_record_is_windowed_by_the_processing_time_and_windows_go_on_closing() {
        let now = chrono::Utc::now().timestamp_millis();
        let ow = OpenWindows::new(
            1000,
            1,
            Box::new(HeapState::default()),
            BTreeMap::new(),
            Extras::default(),
            Published::default(),
        )
        .unwrap();
        ow.add(&[msg(0, 0, now.saturating_mul(1000)), msg(0, 1, now - 5_000)]).unwrap();
        assert_eq!(ow.counts().timestamps_clamped, 1);
        let windows: Vec<Window> = ow.state.windows();
        assert!(windows.iter().all(|w| w.end_ms <= now + 2_000), "no window far ahead: {windows:?}");
        let none = BTreeSet::new();
        let first = ow.due(&none, now + 10_000).expect("the older record's window is due");
        assert_eq!(first, Window::of(now - 5_000, 1000));
        let (close_pos, _) = ow.close(first);
        ow.committed(first, close_pos).unwrap();
        ow.add(&[msg(0, 2, now + 500)]).unwrap();
        assert_eq!(ow.counts().late_records, 0, "a record of now is not late");
    }

    /// Under FAIL a refused timestamp places nothing of its batch, and a state backend
    /// that fails leaves the positions where they were: a checkpoint taken then does not
    /// skip the batch.
    #[test]
    fn a_batch_that_cannot_be_placed_leaves_positions_and_counts_as_they_were() {
        use super::super::window::TimestampPolicy;
        let bounds = TimestampBounds { policy: TimestampPolicy::Fail, max_future_ms: 1000 };
        let ow = open(Published::default()).with_timestamp_bounds(bounds);
        let before = ow.read_pos();
        let e = ow.add(&[msg(0, 0, 100), msg(0, 1, i64::MAX)]).unwrap_err();
        assert!(matches!(e, AddError::Timestamp { partition: 0, offset: 1, .. }), "{e}");
        assert_eq!(ow.read_pos(), before);
        assert_eq!(ow.counts().records, 0);
        assert!(ow.state.windows().is_empty(), "nothing of the batch is in state");

        struct Broken;
        impl WindowState for Broken {
            fn backend(&self) -> crate::state::Backend {
                crate::state::Backend::Heap
            }
            fn put(&self, _: &[Record]) -> Result<(), StateError> {
                let source = std::io::Error::other("disk full");
                Err(StateError::Io { op: "put", path: "state".into(), source })
            }
            fn scan(&self, _: Window, _: u32, _: &mut dyn FnMut(i32, i64, &[u8])) -> Result<(), StateError> {
                Ok(())
            }
            fn keys(&self, _: Window) -> Vec<u32> {
                Vec::new()
            }
            fn windows(&self) -> Vec<Window> {
                Vec::new()
            }
            fn drop_window(&self, _: Window) -> Result<(), StateError> {
                Ok(())
            }
            fn stats(&self) -> StateStats {
                StateStats::default()
            }
            fn snapshot(&self, _: &Path) -> Result<Snapshot, StateError> {
                Ok(Snapshot::Records(Vec::new()))
            }
        }
        let start: BTreeMap<i32, i64> = [(0, 0)].into_iter().collect();
        let ow = OpenWindows::new(1000, 1, Box::new(Broken), start.clone(), Extras::default(), Published::default())
            .unwrap();
        assert!(matches!(ow.add(&[msg(0, 0, 100), msg(0, 1, 200)]), Err(AddError::State(_))));
        assert_eq!(ow.read_pos(), start, "positions unchanged by a batch the state did not take");
    }
}
