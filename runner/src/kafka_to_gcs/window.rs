//! Fixed windows, Google's file names, and the rule that assigns each record to a
//! window so that a replay after a crash publishes nothing twice (pure; no I/O).
//!
//! # Assignment
//! A record's *raw* window is the fixed window of its Kafka timestamp. Windows close
//! in order. A record read while its raw window is open goes there; a record whose raw
//! window has already closed (late data) goes to the earliest open window, so nothing
//! is dropped (Beam, with zero allowed lateness, drops it).
//!
//! # Replay
//! When window `W` is committed, the commit log records, per partition, the next
//! offset the job had not read (`close_pos`). A record at offset `o` of partition `p`
//! was published by a committed window exactly when its raw window is at or before the
//! latest committed window `L` and `o < close_pos_L[p]`: such a record was read while
//! some window at or after its raw window was still open, so it went into a window no
//! later than `L`; any other record went into a window after `L`. [`Published::holds`]
//! is that test, and a replay skips the records it accepts.
//!
//! ```
//! use flexrun::kafka_to_gcs::window::{Window, file_name};
//! let w = Window::of(1_714_564_812_000, 300_000);
//! assert_eq!(file_name("output", &w, 0, 10, ".json"),
//!     "output2024-05-01T12:00:00.000Z-2024-05-01T12:05:00.000Z-pane-0-last-00-of-10.json");
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

pub use crate::state::Window;

/// Google's windowed file name (`WindowedFilenamePolicy` with the shard template
/// `W-P-SS-of-NN`): `<prefix><start>-<end>-pane-0-last-<SS>-of-<NN><suffix>`, shard
/// numbers zero-padded to two digits at least. One pane per window: the template uses
/// the default trigger with no allowed lateness.
pub fn file_name(prefix: &str, w: &Window, shard: u32, shards: u32, suffix: &str) -> String {
    format!("{prefix}{}-pane-0-last-{shard:02}-of-{shards:02}{suffix}", w.label())
}

/// Google's Avro file name (`AvroWriteTransform`'s naming over Beam's
/// `FileIO.defaultNaming`): `<SchemaName>/<prefix>_<md5>-<start>-<end>-<SSSSS>-of-<NNNNN>.avro`;
/// Parquet files take the same name with `.parquet`.
pub fn avro_file_name(
    prefix: &str,
    schema_name: &str,
    md5: &str,
    w: &Window,
    shard: u32,
    shards: u32,
    suffix: &str,
) -> String {
    format!("{}-{shard:05}-of-{shards:05}{suffix}", avro_window_prefix(prefix, schema_name, md5, w))
}

/// The part of [`avro_file_name`] every shard of one window and schema shares.
pub fn avro_window_prefix(prefix: &str, schema_name: &str, md5: &str, w: &Window) -> String {
    format!("{schema_name}/{prefix}_{md5}-{}", w.label())
}

/// The prefix every file of window `w` shares (to find an earlier run's files).
pub fn window_prefix(prefix: &str, w: &Window) -> String {
    format!("{prefix}{}-pane-", w.label())
}

/// The shard of record `(partition, offset)` among `shards`: a fixed hash, so a replay
/// puts each record in the same file.
pub fn shard_of(partition: i32, offset: i64, shards: u32) -> u32 {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&partition.to_le_bytes());
    b[4..].copy_from_slice(&offset.to_le_bytes());
    crate::checksum::crc32c(&b) % shards.max(1)
}

/// Parse `windowDuration`: `Ns`, `Nm` or `Nh`, at least one second.
///
/// ```
/// use flexrun::kafka_to_gcs::window::parse_window;
/// assert_eq!(parse_window("5m").unwrap().as_secs(), 300);
/// assert!(parse_window("0s").is_err());
/// assert!(parse_window("5").is_err());
/// ```
pub fn parse_window(s: &str) -> Result<Duration, String> {
    parse_span("windowDuration", s)
}

/// Parse a span parameter `name`: `Ns`, `Nm` or `Nh`, at least one second.
pub fn parse_span(name: &str, s: &str) -> Result<Duration, String> {
    let bad = || format!("{name}={s:?}: expected a whole number with s, m or h (e.g. 30s, 5m, 1h), at least 1s");
    let (n, unit) = s.split_at(s.len().saturating_sub(1));
    let n: u64 = n.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => n,
        "m" => n.checked_mul(60).ok_or_else(bad)?,
        "h" => n.checked_mul(3600).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if secs < 1 || secs > i64::MAX as u64 / 1000 {
        return Err(bad());
    }
    Ok(Duration::from_secs(secs))
}

/// What a record's timestamp out of bounds leads to (`timestampPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampPolicy {
    /// Window the record by the processing time instead (counted as
    /// `timestamps_clamped`, and logged).
    Clamp,
    /// Stop the job, naming the record and the bound.
    Fail,
}

/// The timestamps windows accept: from the epoch to `max_future_ms` past the processing
/// time. One far-future record would otherwise become the latest window to close, and
/// every later record would be late into a window that is never due, held in state
/// until the job runs out of memory; a timestamp near `i64::MAX` has no window at all.
/// Kafka's own topic setting `message.timestamp.after.max.ms` bounds future timestamps
/// the same way (rejected at produce time when the broker enforces it).
///
/// ```
/// use flexrun::kafka_to_gcs::window::{TimestampBounds, TimestampPolicy, Placed};
/// let b = TimestampBounds { policy: TimestampPolicy::Clamp, max_future_ms: 3_600_000 };
/// let now = 1_714_564_812_000;
/// assert_eq!(b.place(now - 5_000, now), Placed::Event(now - 5_000));
/// assert_eq!(b.place(now * 1000, now), Placed::Clamped(now), "microseconds by mistake");
/// assert_eq!(b.place(-1, now), Placed::Clamped(now), "before the epoch");
/// let strict = TimestampBounds { policy: TimestampPolicy::Fail, ..b };
/// assert!(matches!(strict.place(i64::MAX, now), Placed::Refused(_)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampBounds {
    /// What an out-of-bounds timestamp leads to.
    pub policy: TimestampPolicy,
    /// How far past the processing time a timestamp may be (`maxTimestampSkew`).
    pub max_future_ms: i64,
}

impl Default for TimestampBounds {
    fn default() -> Self {
        TimestampBounds { policy: TimestampPolicy::Clamp, max_future_ms: 3_600_000 }
    }
}

/// The time a record is windowed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// Its own timestamp.
    Event(i64),
    /// The processing time: its timestamp was out of bounds.
    Clamped(i64),
    /// Out of bounds under [`TimestampPolicy::Fail`]: why.
    Refused(String),
}

impl TimestampBounds {
    /// Where a record with timestamp `ts_ms`, read at `now_ms`, is windowed.
    pub fn place(&self, ts_ms: i64, now_ms: i64) -> Placed {
        let latest = now_ms.saturating_add(self.max_future_ms);
        if (0..=latest).contains(&ts_ms) {
            return Placed::Event(ts_ms);
        }
        match self.policy {
            TimestampPolicy::Clamp => Placed::Clamped(now_ms),
            TimestampPolicy::Fail => Placed::Refused(format!(
                "timestamp {ts_ms} ms is outside the accepted range [0, {latest}] (the epoch to maxTimestampSkew={}s past the processing time); timestampPolicy=FAIL stops the job (CLAMP windows such records by the processing time)",
                self.max_future_ms / 1000
            )),
        }
    }
}

/// What the commit log says was published: the latest committed window and, per
/// partition, the next offset not read when it closed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Published {
    /// The latest committed window.
    pub last: Option<Window>,
    /// Its `close_pos`.
    pub close_pos: BTreeMap<i32, i64>,
}

impl Published {
    /// Whether the record at `(partition, offset)` with raw window `raw` is already
    /// in a published file (see the module notes).
    pub fn holds(&self, partition: i32, offset: i64, raw: &Window) -> bool {
        match &self.last {
            Some(last) => raw <= last && offset < self.close_pos.get(&partition).copied().unwrap_or(0),
            None => false,
        }
    }
}

/// The window a record goes to, given the windows that have closed.
///
/// `closed_through` is the latest closed (or committed) window, if any: a record whose
/// raw window is at or before it is late, and goes to the earliest window after it,
/// the `first_open` the caller passes.
pub fn assign(raw: Window, closed_through: Option<&Window>, size_ms: i64) -> Window {
    match closed_through {
        Some(c) if raw <= *c => Window { start_ms: c.end_ms, end_ms: c.end_ms + size_ms },
        _ => raw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_align_to_the_epoch_and_names_follow_googles_policy() {
        let w = Window::of(299_999, 300_000);
        assert_eq!((w.start_ms, w.end_ms), (0, 300_000));
        assert_eq!(Window::of(300_000, 300_000).start_ms, 300_000);
        assert_eq!(Window::of(-1, 1000).start_ms, -1000, "before the epoch too");
        assert_eq!(
            file_name("out-", &Window::of(0, 60_000), 3, 120, ".json"),
            "out-1970-01-01T00:00:00.000Z-1970-01-01T00:01:00.000Z-pane-0-last-03-of-120.json"
        );
        assert!(file_name("p", &w, 1, 2, ".json").starts_with(&window_prefix("p", &w)));
        assert_eq!(
            avro_file_name("output", "User", "5d41402abc4b2a76b9719d911017c592", &Window::of(0, 60_000), 3, 10, ".avro"),
            "User/output_5d41402abc4b2a76b9719d911017c592-1970-01-01T00:00:00.000Z-1970-01-01T00:01:00.000Z-00003-of-00010.avro"
        );
    }

    #[test]
    fn windows_at_the_ends_of_time_saturate_instead_of_overflowing() {
        let w = Window::of(i64::MAX, 300_000);
        assert!(w.end_ms == i64::MAX && w.start_ms < w.end_ms, "{w:?}");
        let v = Window::of(i64::MAX - 1, 300_000);
        assert_eq!(v, w, "neighbouring timestamps share the last window");
        assert!(Window::of(i64::MIN, 300_000).start_ms < Window::of(i64::MIN, 300_000).end_ms);
        assert_ne!(Window::of(i64::MAX, 300_000).label(), Window::of(0, 300_000).label());
    }

    #[test]
    fn timestamps_out_of_bounds_are_clamped_or_refused_by_the_policy() {
        let now = 1_000_000;
        let b = TimestampBounds { policy: TimestampPolicy::Clamp, max_future_ms: 10 };
        assert_eq!(b.place(now + 10, now), Placed::Event(now + 10), "the bound is inclusive");
        assert_eq!(b.place(now + 11, now), Placed::Clamped(now));
        assert_eq!(b.place(0, now), Placed::Event(0));
        assert_eq!(b.place(i64::MIN, now), Placed::Clamped(now));
        let b = TimestampBounds { policy: TimestampPolicy::Fail, max_future_ms: i64::MAX };
        assert_eq!(b.place(i64::MAX, now), Placed::Event(i64::MAX), "no overflow at the widest bound");
        match b.place(-5, now) {
            Placed::Refused(why) => assert!(why.contains("timestampPolicy=FAIL") && why.contains("-5"), "{why}"),
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn shards_are_stable_and_spread() {
        let mut counts = [0u32; 4];
        for o in 0..4000 {
            let s = shard_of(1, o, 4);
            assert_eq!(s, shard_of(1, o, 4));
            counts[s as usize] += 1;
        }
        assert!(counts.iter().all(|c| *c > 800), "{counts:?}");
    }

    #[test]
    fn window_durations_parse_and_bad_ones_name_the_parameter() {
        assert_eq!(parse_window("2h").unwrap().as_secs(), 7200);
        assert_eq!(parse_window("1s").unwrap().as_secs(), 1);
        for bad in ["", "m", "5", "5d", "-1m", "0m", "1.5m"] {
            assert!(parse_window(bad).unwrap_err().contains("windowDuration"), "{bad}");
        }
    }

    #[test]
    fn late_records_go_to_the_first_open_window() {
        let size = 1000;
        let (w0, w1) = (Window::of(0, size), Window::of(1000, size));
        assert_eq!(assign(w0, None, size), w0);
        assert_eq!(assign(w0, Some(&w0), size), w1, "late: the next window");
        assert_eq!(assign(Window::of(5000, size), Some(&w0), size), Window::of(5000, size));
    }

    /// Replaying a partition from any offset with the commit log's `Published` skips
    /// exactly the records that the committed windows hold.
    #[test]
    fn the_published_rule_matches_a_simulated_run() {
        let size = 1000;
        // Offsets 0..40 of one partition with out-of-order timestamps.
        let ts: Vec<i64> = (0..40).map(|o| (o * 97 % 13) * 250 + o * 50).collect();
        // A run that closes the earliest open window after every 5th record.
        let mut open: BTreeMap<Window, Vec<i64>> = BTreeMap::new();
        let mut closed: Option<Window> = None;
        let mut published: Vec<i64> = Vec::new();
        let mut log = Published::default();
        for (o, t) in ts.iter().enumerate() {
            let w = assign(Window::of(*t, size), closed.as_ref(), size);
            open.entry(w).or_default().push(o as i64);
            if o % 5 == 4 {
                let (w, recs) = open.pop_first().unwrap();
                published.extend(recs);
                closed = Some(w);
                log = Published { last: Some(w), close_pos: [(0, o as i64 + 1)].into_iter().collect() };
            }
        }
        for (o, t) in ts.iter().enumerate() {
            let o = o as i64;
            assert_eq!(log.holds(0, o, &Window::of(*t, size)), published.contains(&o), "offset {o}");
        }
    }
}
