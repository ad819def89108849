//! Where each partition starts, decided once at job start from the checkpoint, the
//! topic's watermarks and `kafkaReadOffset`, with every gap made visible.
//!
//! - A partition with a checkpoint resumes there, so the backlog the autoscaler sees
//!   after a restart is the real one (not the whole topic under `earliest`).
//! - A partition the job did not know when it last ran (added while it was stopped)
//!   starts at its first record (offset 0): none of its records have been read, and any
//!   retention deleted before the job got to them is a gap like any other.
//! - A fresh job starts where `kafkaReadOffset` (or the consumer group) says.
//! - A position the broker no longer holds (below its earliest offset: retention; past
//!   its end: a recreated topic or a log cut short) is judged by `offsetGapPolicy`
//!   ([`crate::kafka::gaps`]): the job stops naming it (the default), or goes on at the
//!   nearest stored offset and says so in its log, its summary and `/metrics`.

use crate::kafka::gaps::{self, Discontinuity, GapPolicy, Skipped};
use crate::kafka::lineage::EpochPosition;
use crate::progress::{LogMark, OffsetEntry, Recovery};
use crate::stats::{JobStats, LostRange};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Start positions, and the positions out of range found on the way.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StartPlan {
    /// Partition → the next offset to read.
    pub positions: BTreeMap<i32, i64>,
    /// Partitions the job had not seen before (an existing job only).
    pub new_partitions: Vec<i32>,
    /// Positions the broker does not hold (before [`StartPlan::settle`] moves them).
    pub found: Vec<Discontinuity>,
}

/// Decide start positions. `known` is None for a job without a checkpoint, else the
/// partitions it knew; `initial` is where `kafkaReadOffset` or the group points;
/// `marks` are the partitions' (earliest, end) offsets.
///
/// ```
/// use flexrun::kafka_to_bq::setup::positions::plan;
/// use flexrun::kafka::gaps::GapPolicy;
/// use std::collections::{BTreeMap, BTreeSet};
/// let ck = BTreeMap::from([(0, 5)]);
/// let known = BTreeSet::from([0]);
/// let initial = BTreeMap::from([(0, 100), (1, 100)]);
/// let marks = BTreeMap::from([(0, (8, 200)), (1, (3, 200))]);
/// let mut p = plan(&[0, 1], &ck, Some(&known), &initial, &marks);
/// assert_eq!(p.found[0].lost(), 3);
/// assert!(p.clone().settle(GapPolicy::Fail, "j", "t").is_err());
/// p.settle(GapPolicy::Skip, "j", "t").unwrap();
/// assert_eq!(p.positions, BTreeMap::from([(0, 8), (1, 3)]));
/// assert_eq!(p.new_partitions, vec![1]);
/// ```
pub fn plan(
    partitions: &[i32],
    checkpoint: &BTreeMap<i32, i64>,
    known: Option<&BTreeSet<i32>>,
    initial: &BTreeMap<i32, i64>,
    marks: &BTreeMap<i32, (i64, i64)>,
) -> StartPlan {
    let mut out = StartPlan::default();
    for &p in partitions {
        let low = marks.get(&p).map_or(0, |m| m.0);
        let pos = match (checkpoint.get(&p), known) {
            (Some(&c), _) => c,
            // A partition the job has not seen is read from its first record: if
            // retention deleted some before the job got to it, that is a gap like any
            // other (the lifecycle checker found such records lost unnamed).
            (None, Some(k)) if !k.contains(&p) => {
                out.new_partitions.push(p);
                0
            }
            _ => initial.get(&p).copied().unwrap_or(low),
        };
        out.positions.insert(p, pos);
    }
    out.found = gaps::check(&out.positions, marks);
    out
}

impl StartPlan {
    /// Apply `offsetGapPolicy` to the positions out of range: the refusal, or the
    /// positions moved and what was skipped.
    pub fn settle(&mut self, policy: GapPolicy, job: &str, topic: &str) -> Result<Skipped, String> {
        gaps::apply(policy, &self.found, &mut self.positions, job, topic)
    }
}

impl StartPlan {
    /// Add the partitions whose log was truncated under their position (`diverged`:
    /// partition → where the current log diverges, from [`crate::kafka::lineage::divergences`]).
    /// A truncation replaces what else was found for the partition; where the divergence
    /// is below the earliest stored offset, the job can go on only from there.
    pub fn add_truncations(&mut self, diverged: &BTreeMap<i32, i64>, marks: &BTreeMap<i32, (i64, i64)>) {
        for (&p, &d) in diverged {
            let Some(&at) = self.positions.get(&p) else { continue };
            self.found.retain(|f| f.partition() != p);
            let low = marks.get(&p).map_or(0, |m| m.0);
            self.found.push(Discontinuity::Truncated { partition: p, at, diverged: d.max(low) });
        }
        self.found.sort_by_key(Discontinuity::partition);
    }
}

/// An uncommitted batch that cannot be read again as it was logged.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreplayable {
    /// The batch.
    pub batch: u64,
    /// Why, for the log and the refusal.
    pub why: String,
    /// Its log is gone (the topic was recreated): none of its records can be read.
    pub log_gone: bool,
    /// Partition → the earliest offset still stored (records below it are deleted).
    pub floors: BTreeMap<i32, i64>,
    /// Partition → where the log diverges from the one the batch was read in.
    pub diverged: BTreeMap<i32, i64>,
}

impl Unreplayable {
    /// The error under `offsetGapPolicy=FAIL`.
    pub fn refusal(&self, job: &str, topic: &str, shard: usize) -> String {
        format!(
            "job {job} shard {shard}: the uncommitted batch {} of {topic} cannot be read again as it was logged: {}. offsetGapPolicy=FAIL stops the job here. offsetGapPolicy=SKIP settles the batch by its write streams' row counts (finalized): if its rows landed it is done, else what the log still holds of it is read again and the rest is counted as lost",
            self.batch, self.why
        )
    }

    /// The part of `[a, b)` of `p` the log still holds as the batch read it (empty
    /// when none).
    ///
    /// ```
    /// use flexrun::kafka_to_bq::setup::positions::Unreplayable;
    /// use std::collections::BTreeMap;
    /// let u = Unreplayable { batch: 3, why: String::new(), log_gone: false,
    ///     floors: BTreeMap::from([(0, 12)]), diverged: BTreeMap::from([(1, 15)]) };
    /// assert_eq!(u.readable(0, 10, 20), (12, 20), "10 and 11 deleted");
    /// assert_eq!(u.readable(1, 10, 20), (10, 15), "other records from 15 on");
    /// assert_eq!(u.resume(1, 10, 20), 10);
    /// assert_eq!(u.resume(1, 17, 20), 15, "the log diverged before the range");
    /// ```
    pub fn readable(&self, p: i32, a: i64, b: i64) -> (i64, i64) {
        if self.log_gone {
            return (b, b);
        }
        let from = a.max(self.floors.get(&p).copied().unwrap_or(a));
        let to = b.min(self.diverged.get(&p).copied().unwrap_or(b));
        (from.min(to), to)
    }

    /// Where `p` goes on when the batch's rows did not land: the first record of its
    /// range the log still holds, or where the log diverges if that is before it.
    pub fn resume(&self, p: i32, a: i64, b: i64) -> i64 {
        let floor = self.floors.get(&p).copied().unwrap_or(a);
        let diverged = self.diverged.get(&p).copied().unwrap_or(b);
        a.max(floor).min(diverged)
    }
}

/// The uncommitted batches of the checkpoint that cannot be read again as logged: read
/// from a log given up on, truncated under their ranges, or reaching below the
/// earliest stored offset. By shard.
pub fn unreplayable(
    ck: &Checkpoint,
    diverged: &BTreeMap<i32, i64>,
    marks: &BTreeMap<i32, (i64, i64)>,
) -> BTreeMap<usize, Unreplayable> {
    let floors: BTreeMap<i32, i64> = marks.iter().map(|(p, m)| (*p, m.0)).collect();
    let mut out = BTreeMap::new();
    let entry = |batch, why: String, log_gone| Unreplayable {
        batch,
        why,
        log_gone,
        floors: floors.clone(),
        diverged: diverged.clone(),
    };
    for (shard, e) in &ck.lost_replays {
        let why = "its topic was deleted and created again, so its records are gone".to_string();
        out.insert(*shard, entry(e.batch, why, true));
    }
    for (shard, e) in &ck.replays {
        let why = e.ranges.iter().find_map(|(p, (a, b))| {
            let low = floors.get(p).copied().unwrap_or(0);
            match diverged.get(p) {
                Some(d) if d < b => {
                    Some(format!("partition {p}'s log was truncated at offset {d}, inside its range {a}..{b}"))
                }
                _ if *a < low && b > a => {
                    Some(format!("retention deleted partition {p} below offset {low}, inside its range {a}..{b}"))
                }
                _ => None,
            }
        });
        if let Some(why) = why {
            out.insert(*shard, entry(e.batch, why, false));
        }
    }
    out
}

/// Make what a start skipped and found visible: the counts in the job's summary and
/// `/metrics` (`offsets_lost_to_retention`, `partitions_past_end`,
/// `partitions_discovered`); each skip was logged by [`StartPlan::settle`].
pub fn report(plan: &StartPlan, skipped: Skipped, job: &str, topic: (&str, Option<&str>), stats: &JobStats) {
    note_skipped(stats, skipped, topic, &plan.found);
    if !plan.new_partitions.is_empty() {
        tracing::info!(job, partitions = ?plan.new_partitions, "partitions added since the job last ran start at their earliest offset");
        stats.note(|r| r.partitions_discovered += plan.new_partitions.len() as u64);
    }
}

/// Count what `offsetGapPolicy=SKIP` went past, at start or while running, and name
/// each range of records lost (deleted before the job read them).
pub fn note_skipped(
    stats: &JobStats,
    skipped: Skipped,
    (topic, topic_id): (&str, Option<&str>),
    found: &[Discontinuity],
) {
    stats.note(|r| {
        r.offsets_lost_to_retention += skipped.lost;
        r.partitions_past_end += skipped.past_end;
        r.partitions_truncated += skipped.truncated;
        for d in found {
            if let Discontinuity::Deleted { partition, from, earliest } = d {
                let why = "deleted before it was read".to_string();
                let topic_id = topic_id.map(str::to_string);
                let (from, to) = (*from, Some(*earliest));
                let range = LostRange {
                    topic: topic.to_string(),
                    topic_id,
                    partition: *partition,
                    from,
                    to,
                    why,
                    replaced_by: None,
                };
                r.note_lost(range);
            }
        }
    });
}

/// One shard's place in the job's checkpoint: its newest logged batch, where its
/// partitions stand after it, in which log, and the batch to replay if it was logged
/// but not committed.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardPoint {
    /// The shard (from its directory's name).
    pub shard: usize,
    /// Its newest logged batch (0: none).
    pub batch: u64,
    /// Each partition's position after that batch.
    pub positions: BTreeMap<i32, i64>,
    /// The log the positions belong to.
    pub log: LogMark,
    /// The batch logged but not committed, which a restart replays.
    pub replay: Option<OffsetEntry>,
}

/// Every shard's place in the job's checkpoint (shards that never logged are left out),
/// from its progress journal (or the shards' own logs of an older flexrun).
pub fn read_checkpoint(job_dir: &Path) -> Result<Vec<ShardPoint>, crate::progress::ProgressError> {
    let mut out = Vec::new();
    for (shard, latest) in crate::progress::journal::peek(job_dir)? {
        let shard = shard as usize;
        let point = match latest.recovery(job_dir)? {
            Recovery::Fresh => continue,
            Recovery::Clean { commit, .. } => {
                ShardPoint { shard, batch: commit.batch, positions: commit.positions, log: commit.log, replay: None }
            }
            Recovery::Replay(entry) => ShardPoint {
                shard,
                batch: entry.batch,
                positions: entry.positions.clone(),
                log: entry.log.clone(),
                replay: Some(entry),
            },
        };
        out.push(point);
    }
    Ok(out)
}

/// The topic ids the checkpoint's positions were read in that are not the topic's id
/// now and that no earlier start gave up on: a topic deleted and created again. An
/// entry that names no id belongs to the log `saved` names. Nothing is judged when the
/// broker gives no id.
pub fn stale_topic_ids(
    points: &[ShardPoint],
    saved: Option<&str>,
    superseded: &BTreeSet<String>,
    now: Option<&str>,
) -> BTreeSet<String> {
    let Some(now) = now else { return BTreeSet::new() };
    points
        .iter()
        .filter_map(|p| p.log.topic_id.as_deref().or(saved))
        .chain(saved)
        .filter(|id| *id != now && !superseded.contains(*id))
        .map(str::to_string)
        .collect()
}

/// What the checkpoint says, once the positions of logs given up on are left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checkpoint {
    /// Where each partition with a checkpoint resumes (earlier moves applied).
    pub positions: BTreeMap<i32, i64>,
    /// The positions to validate against the log, with the epoch read before each
    /// (not those an earlier start moved: they were not read there).
    pub validate: BTreeMap<i32, EpochPosition>,
    /// Partition → its shard's newest logged batch (what a move is tied to).
    pub batches: BTreeMap<i32, u64>,
    /// Uncommitted batches of the current log, by shard.
    pub replays: BTreeMap<usize, OffsetEntry>,
    /// Uncommitted batches read from a log given up on, by shard: they cannot be
    /// replayed.
    pub lost_replays: BTreeMap<usize, OffsetEntry>,
}

/// The checkpoint of the current log: `points` whose topic id (or, without one, the
/// saved one) is not in `gone`, with `moves` applied.
pub fn checkpoint(points: &[ShardPoint], saved: Option<&str>, gone: &BTreeSet<String>, moves: &Moves) -> Checkpoint {
    let mut out = Checkpoint::default();
    for pt in points {
        let stale = pt.log.topic_id.as_deref().or(saved).is_some_and(|id| gone.contains(id));
        if stale {
            if let Some(e) = &pt.replay {
                out.lost_replays.insert(pt.shard, e.clone());
            }
            continue;
        }
        if let Some(e) = &pt.replay {
            out.replays.insert(pt.shard, e.clone());
        }
        for (&p, &pos) in &pt.positions {
            out.batches.insert(p, pt.batch);
            let moved = moves.resume(p, pos, pt.batch);
            out.positions.insert(p, moved);
            if let (true, Some(&epoch)) = (moved == pos, pt.log.epochs.get(&p)) {
                out.validate.insert(p, EpochPosition { offset: pos, epoch });
            }
        }
    }
    out
}

const MOVES_FILE: &str = "rebased.json";

/// What `offsetGapPolicy=SKIP` decided at a start, kept until the shards' logs catch up:
/// the logs given up on (topic ids of a topic since recreated), and the positions it
/// moved. The shard logs still hold an old position until the partition's shard logs a
/// batch after it, so without this a restart before then would find the old position
/// out of range again and skip a second time, past records produced in between (seen
/// on the broker after an unclean election).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Moves {
    /// Topic ids of logs the job gave up on.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub superseded: BTreeSet<String>,
    /// Partition → the position moved.
    #[serde(default)]
    pub moves: BTreeMap<i32, Move>,
}

/// One moved position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// The checkpoint's position.
    pub from: i64,
    /// Where the job went on.
    pub to: i64,
    /// The partition's shard's newest logged batch when it moved: the move holds
    /// until that shard logs another ([`ANY_BATCH`] for moves recorded before batches were).
    pub batch: u64,
}

/// A move recorded without its batch (an older version's file): it holds while the
/// checkpoint's position is the one moved.
pub const ANY_BATCH: u64 = u64::MAX;

impl Moves {
    /// Where a partition whose shard's newest batch `batch` left it at `pos` resumes.
    ///
    /// ```
    /// use flexrun::kafka_to_bq::setup::positions::{Move, Moves};
    /// let mut m = Moves::default();
    /// m.moves.insert(0, Move { from: 200, to: 110, batch: 7 });
    /// assert_eq!(m.resume(0, 200, 7), 110);
    /// assert_eq!(m.resume(0, 200, 8), 200, "batch 8 read 110..200 in the new log");
    /// ```
    pub fn resume(&self, p: i32, pos: i64, batch: u64) -> i64 {
        match self.moves.get(&p) {
            Some(m) if m.from == pos && (m.batch == batch || m.batch == ANY_BATCH) => m.to,
            _ => pos,
        }
    }
}

/// The saved moves (none before the first skip). A file that does not parse is an
/// error naming it. The older partition → (from, to) map still reads.
pub fn read_moves(job_dir: &Path) -> std::io::Result<Moves> {
    let path = job_dir.join(MOVES_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Moves::default()),
        Err(e) => return Err(e),
    };
    let bad = |e: serde_json::Error| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is damaged ({e}); it records positions offsetGapPolicy=SKIP moved", path.display()),
        )
    };
    // Through a Value: serde's untagged enums cannot read integer map keys.
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(bad)?;
    if v.get("moves").is_some() || v.get("superseded").is_some() {
        return serde_json::from_value(v).map_err(bad);
    }
    let old: BTreeMap<i32, (i64, i64)> = serde_json::from_value(v).map_err(bad)?;
    let moves = old.into_iter().map(|(p, (from, to))| (p, Move { from, to, batch: ANY_BATCH })).collect();
    Ok(Moves { superseded: BTreeSet::new(), moves })
}

/// Keep the earlier moves that still hold, add this start's (each tied to its shard's
/// newest batch) and the logs given up on (`superseded`), and make the result durable
/// before the first read. Returns the moves in force.
pub fn record_moves(
    job_dir: &Path,
    earlier: &Moves,
    superseded: &BTreeSet<String>,
    ck: &Checkpoint,
    plan: &StartPlan,
) -> std::io::Result<Moves> {
    let mut keep = Moves { superseded: superseded.clone(), moves: BTreeMap::new() };
    for (p, m) in &earlier.moves {
        if ck.positions.get(p) == Some(&m.to)
            && ck.batches.get(p).is_some_and(|b| *b == m.batch || m.batch == ANY_BATCH)
        {
            keep.moves.insert(*p, *m);
        }
    }
    for d in &plan.found {
        let p = d.partition();
        if let (Some(&from), Some(&to)) = (ck.positions.get(&p), plan.positions.get(&p)) {
            let batch = ck.batches.get(&p).copied().unwrap_or(0);
            keep.moves.insert(p, Move { from: keep.moves.get(&p).map_or(from, |m| m.from), to, batch });
        }
    }
    if keep != *earlier {
        crate::kafka::starts::write_durably(job_dir, MOVES_FILE, &serde_json::to_vec(&keep)?)?;
    }
    Ok(keep)
}

/// Which log the job reads now, and which logs its checkpoint may name that it gave up on.
#[derive(Debug, Clone, Default)]
pub struct LogState {
    /// The topic id now (None: the broker gives none).
    pub topic_id: Option<String>,
    /// Topic ids of logs given up on (a recreated topic, `offsetGapPolicy=SKIP`).
    pub gone: BTreeSet<String>,
    /// The topic id entries without one belong to (the saved start's).
    pub legacy: Option<String>,
}

impl LogState {
    /// Whether positions marked `mark` belong to a log given up on.
    pub fn is_gone(&self, mark: &crate::progress::LogMark) -> bool {
        mark.topic_id.as_deref().or(self.legacy.as_deref()).is_some_and(|id| self.gone.contains(id))
    }
}

const KNOWN_FILE: &str = "partitions.json";

/// The partitions the job knew when it last ran (None before the first run). A
/// damaged file is an error naming it, never "every partition known": read so,
/// partitions added while the job was down would start at `kafkaReadOffset`
/// (latest by default) instead of at their earliest offset.
pub fn read_known(job_dir: &Path) -> std::io::Result<Option<BTreeSet<i32>>> {
    let path = job_dir.join(KNOWN_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is damaged ({e}); it lists the partitions the job has read", path.display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Remember the partitions the job knows (atomically, and the directory fsynced).
pub fn write_known(job_dir: &Path, partitions: &BTreeSet<i32>) -> std::io::Result<()> {
    crate::kafka::starts::write_durably(job_dir, KNOWN_FILE, &serde_json::to_vec(partitions)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks(lows: &[(i32, i64)]) -> BTreeMap<i32, (i64, i64)> {
        lows.iter().map(|(p, l)| (*p, (*l, 1_000))).collect()
    }

    #[test]
    fn a_fresh_job_starts_where_kafka_read_offset_says() {
        let initial = BTreeMap::from([(0, 40), (1, 50)]);
        let p = plan(&[0, 1], &BTreeMap::new(), None, &initial, &marks(&[(0, 0), (1, 0)]));
        assert_eq!(p.positions, initial);
        assert!(p.found.is_empty() && p.new_partitions.is_empty());
    }

    #[test]
    fn a_restart_resumes_from_the_checkpoint_not_from_the_group_or_earliest() {
        let p = plan(
            &[0],
            &BTreeMap::from([(0, 900)]),
            Some(&BTreeSet::from([0])),
            &BTreeMap::from([(0, 0)]),
            &marks(&[(0, 0)]),
        );
        assert_eq!(p.positions[&0], 900);
    }

    #[test]
    fn known_partitions_without_a_checkpoint_use_the_initial_position_and_gaps_are_found() {
        let mut p = plan(
            &[0, 1],
            &BTreeMap::from([(0, 10)]),
            Some(&BTreeSet::from([0, 1])),
            &BTreeMap::from([(1, 7)]),
            &marks(&[(0, 25), (1, 0)]),
        );
        assert_eq!(p.found, vec![Discontinuity::Deleted { partition: 0, from: 10, earliest: 25 }]);
        let e = p.clone().settle(GapPolicy::Fail, "j", "t").unwrap_err();
        assert!(e.contains("t/0 is at offset 10") && e.contains("15 records were deleted"), "{e}");
        p.settle(GapPolicy::Skip, "j", "t").unwrap();
        assert_eq!(p.positions, BTreeMap::from([(0, 25), (1, 7)]));
        assert!(p.new_partitions.is_empty());
    }

    #[test]
    fn a_checkpoint_past_the_end_of_a_recreated_topic_is_found_not_rewound() {
        let mut p = plan(
            &[0],
            &BTreeMap::from([(0, 500)]),
            Some(&BTreeSet::from([0])),
            &BTreeMap::new(),
            &BTreeMap::from([(0, (0, 40))]),
        );
        assert_eq!(p.found, vec![Discontinuity::PastEnd { partition: 0, at: 500, end: 40 }]);
        assert!(p.clone().settle(GapPolicy::Fail, "j", "t").unwrap_err().contains("past the end of its log (40)"));
        assert_eq!(p.settle(GapPolicy::Skip, "j", "t").unwrap(), Skipped { lost: 0, past_end: 1, truncated: 0 });
        assert_eq!(p.positions[&0], 40, "at the end, not at 0: what was read is not read again");
    }

    /// The count itself: a restart whose checkpoint is behind retention on two
    /// partitions, with one partition new, reports what the summary and `/metrics` show.
    /// (A unit test of the arithmetic: the real gap, made with DeleteRecords on the
    /// broker, is `tests/it/broker.rs`.)
    #[test]
    fn gaps_and_new_partitions_are_counted_in_the_summary() {
        let mut p = plan(
            &[0, 1, 2, 3],
            &BTreeMap::from([(0, 10), (1, 40), (2, 5)]),
            Some(&BTreeSet::from([0, 1, 2])),
            &BTreeMap::new(),
            &marks(&[(0, 25), (1, 30), (2, 105), (3, 7)]),
        );
        let stats = JobStats::default();
        let skipped = p.settle(GapPolicy::Skip, "j", "t").unwrap();
        report(&p, skipped, "j", ("t", None), &stats);
        let mut q =
            plan(&[0], &BTreeMap::from([(0, 30)]), Some(&BTreeSet::from([0])), &BTreeMap::new(), &marks(&[(0, 31)]));
        let skipped = q.settle(GapPolicy::Skip, "j", "t").unwrap();
        report(&q, skipped, "j", ("t", None), &stats);
        let r = stats.summary().reliability;
        assert_eq!(
            r.offsets_lost_to_retention,
            15 + 100 + 7 + 1,
            "partition 0 lost 15, partition 2 lost 100, new partition 3 the 7 deleted before the job found it, then 1 more"
        );
        assert_eq!(r.partitions_discovered, 1, "partition 3 was new");
    }

    #[test]
    fn the_known_set_round_trips_and_a_damaged_one_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read_known(d.path()).unwrap(), None);
        write_known(d.path(), &BTreeSet::from([0, 3])).unwrap();
        assert_eq!(read_known(d.path()).unwrap(), Some(BTreeSet::from([0, 3])));
        // Issue 62, item 8: read as "every partition known", a damaged file made the
        // partitions added while the job was down start at `latest`.
        for damaged in [&b"[0, 3"[..], b"", b"{\"0\": 1}"] {
            std::fs::write(d.path().join(KNOWN_FILE), damaged).unwrap();
            let e = read_known(d.path()).unwrap_err();
            assert!(e.to_string().contains("partitions.json is damaged"), "{e}");
        }
    }

    fn point(shard: usize, batch: u64, pos: i64, id: Option<&str>, epoch: i32) -> ShardPoint {
        ShardPoint {
            shard,
            batch,
            positions: BTreeMap::from([(shard as i32, pos)]),
            log: LogMark { topic_id: id.map(str::to_string), epochs: BTreeMap::from([(shard as i32, epoch)]) },
            replay: None,
        }
    }

    #[test]
    fn a_checkpoint_of_another_topic_id_is_stale_unless_given_up_on() {
        let pts = [point(0, 3, 200, Some("old"), 0), point(1, 2, 50, None, 0)];
        let none = BTreeSet::new();
        assert_eq!(stale_topic_ids(&pts, Some("old"), &none, Some("new")), BTreeSet::from(["old".to_string()]));
        assert!(stale_topic_ids(&pts, Some("old"), &none, Some("old")).is_empty());
        assert!(stale_topic_ids(&pts, Some("old"), &none, None).is_empty(), "no id from the broker: no judgement");
        let gone = BTreeSet::from(["old".to_string()]);
        assert!(stale_topic_ids(&pts, Some("old"), &gone, Some("new")).is_empty());
        // Given up on: neither position counts, the one without an id included.
        let ck = checkpoint(&pts, Some("old"), &gone, &Moves::default());
        assert!(ck.positions.is_empty() && ck.validate.is_empty(), "{ck:?}");
        let ck = checkpoint(&pts, Some("old"), &BTreeSet::new(), &Moves::default());
        assert_eq!(ck.positions, BTreeMap::from([(0, 200), (1, 50)]));
        assert_eq!(ck.validate[&0], EpochPosition { offset: 200, epoch: 0 });
    }

    /// A skip past an end moved 200 to 110 at batch 3; the shard then read 110..200 in
    /// the new log and committed batch 4 at 200: the move no longer holds. (Before
    /// moves were tied to batches, a restart moved 200 back to 110 and wrote 90 records
    /// twice.)
    #[test]
    fn a_move_holds_only_until_its_shard_logs_another_batch() {
        let mut moves = Moves::default();
        moves.moves.insert(0, Move { from: 200, to: 110, batch: 3 });
        let ck = checkpoint(&[point(0, 3, 200, None, 0)], None, &BTreeSet::new(), &moves);
        assert_eq!(ck.positions[&0], 110);
        assert!(ck.validate.is_empty(), "a moved position was not read there");
        let ck = checkpoint(&[point(0, 4, 200, None, 1)], None, &BTreeSet::new(), &moves);
        assert_eq!(ck.positions[&0], 200);
        let d = tempfile::tempdir().unwrap();
        let kept = record_moves(d.path(), &moves, &BTreeSet::new(), &ck, &StartPlan::default()).unwrap();
        assert!(kept.moves.is_empty() && read_moves(d.path()).unwrap().moves.is_empty(), "the stale move is dropped");
        // A log given up on is recorded even with no move (issue 62: it once was not).
        let gone = BTreeSet::from(["old".to_string()]);
        record_moves(d.path(), &Moves::default(), &gone, &ck, &StartPlan::default()).unwrap();
        assert_eq!(read_moves(d.path()).unwrap().superseded, gone);
    }

    #[test]
    fn an_older_moves_file_still_reads() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(MOVES_FILE), br#"{"0": [200, 110]}"#).unwrap();
        let m = read_moves(d.path()).unwrap();
        assert_eq!(m.resume(0, 200, 9), 110);
        std::fs::write(d.path().join(MOVES_FILE), b"{\"0\": [2").unwrap();
        assert!(read_moves(d.path()).unwrap_err().to_string().contains("rebased.json is damaged"));
    }
}
