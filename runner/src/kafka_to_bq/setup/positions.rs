//! Where each partition starts, decided once at job start from the checkpoint, the
//! topic's watermarks and `kafkaReadOffset`, with every gap made visible.
//!
//! - A partition with a checkpoint resumes there, so the backlog the autoscaler sees
//!   after a restart is the real one (not the whole topic under `earliest`).
//! - A partition the job did not know when it last ran (added while it was stopped)
//!   starts at its earliest offset: none of its records have been read.
//! - A fresh job starts where `kafkaReadOffset` (or the consumer group) says.
//! - A position the broker no longer holds (below its earliest offset: retention; past
//!   its end: a recreated topic or a log cut short) is judged by `offsetGapPolicy`
//!   ([`crate::kafka::gaps`]): the job stops naming it (the default), or goes on at the
//!   nearest stored offset and says so in its log, its summary and `/metrics`.

use crate::kafka::gaps::{self, Discontinuity, GapPolicy, Skipped};
use crate::progress::{Recovery, ShardLog};
use crate::stats::JobStats;
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
            (None, Some(k)) if !k.contains(&p) => {
                out.new_partitions.push(p);
                low
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

/// Make what a start skipped and found visible: the counts in the job's summary and
/// `/metrics` (`offsets_lost_to_retention`, `partitions_past_end`,
/// `partitions_discovered`); each skip was logged by [`StartPlan::settle`].
pub fn report(plan: &StartPlan, skipped: Skipped, job: &str, stats: &JobStats) {
    note_skipped(stats, skipped);
    if !plan.new_partitions.is_empty() {
        tracing::info!(job, partitions = ?plan.new_partitions, "partitions added since the job last ran start at their earliest offset");
        stats.note(|r| r.partitions_discovered += plan.new_partitions.len() as u64);
    }
}

/// Count what `offsetGapPolicy=SKIP` went past, at start or while running.
pub fn note_skipped(stats: &JobStats, skipped: Skipped) {
    stats.note(|r| {
        r.offsets_lost_to_retention += skipped.lost;
        r.partitions_past_end += skipped.past_end;
    });
}

/// Every partition's resume position in the job's shard logs: the last commit's, or
/// for an uncommitted batch the start of its ranges.
pub fn checkpoint_positions(job_dir: &Path) -> Result<BTreeMap<i32, i64>, crate::progress::ProgressError> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(job_dir) else { return Ok(out) };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with("shard-") {
            continue;
        }
        match ShardLog::peek(&e.path())? {
            Recovery::Fresh => {}
            Recovery::Clean { commit, .. } => out.extend(commit.positions),
            Recovery::Replay(entry) => {
                out.extend(entry.positions);
                out.extend(entry.ranges.iter().map(|(p, (a, _))| (*p, *a)));
            }
        }
    }
    Ok(out)
}

const REBASED_FILE: &str = "rebased.json";

/// Checkpoint positions that `offsetGapPolicy=SKIP` moved at a start: partition →
/// (the checkpoint's position, where the job went on). The shard logs still hold the old
/// position until the partition's next commit, so without this a restart before that
/// commit would find the old position out of range again and skip a second time, past
/// records produced in between (seen on the broker after an unclean election).
pub type Rebased = BTreeMap<i32, (i64, i64)>;

/// The saved rebases (none before the first skip).
pub fn read_rebased(job_dir: &Path) -> std::io::Result<Rebased> {
    match std::fs::read(job_dir.join(REBASED_FILE)) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Rebased::new()),
        Err(e) => Err(e),
    }
}

/// The checkpoint with each still-valid rebase applied: a partition whose checkpoint
/// position is still the one that was moved resumes where the skip went on; one that
/// has committed since resumes from its commit.
///
/// ```
/// use flexrun::kafka_to_bq::setup::positions::rebase;
/// use std::collections::BTreeMap;
/// let ck = BTreeMap::from([(0, 200), (1, 50)]);
/// let moved = BTreeMap::from([(0, (200, 110)), (1, (40, 30))]);
/// assert_eq!(rebase(&ck, &moved), BTreeMap::from([(0, 110), (1, 50)]));
/// ```
pub fn rebase(checkpoint: &BTreeMap<i32, i64>, rebased: &Rebased) -> BTreeMap<i32, i64> {
    let moved = |p: &i32, c: i64| match rebased.get(p) {
        Some(&(from, to)) if from == c => to,
        _ => c,
    };
    checkpoint.iter().map(|(p, c)| (*p, moved(p, *c))).collect()
}

/// Remember the checkpoint positions this start's plan moved (durably, before the
/// first read), keeping earlier rebases that still apply.
pub fn record_rebased(
    job_dir: &Path,
    raw: &BTreeMap<i32, i64>,
    plan: &StartPlan,
    earlier: &Rebased,
) -> std::io::Result<()> {
    let mut keep: Rebased =
        earlier.iter().filter(|(p, (from, _))| raw.get(p) == Some(from)).map(|(p, r)| (*p, *r)).collect();
    for d in &plan.found {
        let p = d.partition();
        if let (Some(&from), Some(&to)) = (raw.get(&p), plan.positions.get(&p)) {
            keep.insert(p, (from, to));
        }
    }
    if keep.is_empty() && earlier.is_empty() {
        return Ok(());
    }
    crate::kafka::starts::write_durably(job_dir, REBASED_FILE, &serde_json::to_vec(&keep)?)
}

const KNOWN_FILE: &str = "partitions.json";

/// The partitions the job knew when it last ran (None before the first run).
pub fn read_known(job_dir: &Path) -> Option<BTreeSet<i32>> {
    let bytes = std::fs::read(job_dir.join(KNOWN_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Remember the partitions the job knows (atomically).
pub fn write_known(job_dir: &Path, partitions: &BTreeSet<i32>) -> std::io::Result<()> {
    let tmp = job_dir.join(format!("{KNOWN_FILE}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec(partitions)?)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, job_dir.join(KNOWN_FILE))
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
        assert_eq!(p.settle(GapPolicy::Skip, "j", "t").unwrap(), Skipped { lost: 0, past_end: 1 });
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
        report(&p, skipped, "j", &stats);
        let mut q =
            plan(&[0], &BTreeMap::from([(0, 30)]), Some(&BTreeSet::from([0])), &BTreeMap::new(), &marks(&[(0, 31)]));
        let skipped = q.settle(GapPolicy::Skip, "j", "t").unwrap();
        report(&q, skipped, "j", &stats);
        let r = stats.summary().reliability;
        assert_eq!(r.offsets_lost_to_retention, 15 + 100 + 1, "partition 0 lost 15, partition 2 lost 100, then 1 more");
        assert_eq!(r.partitions_discovered, 1, "partition 3 was new");
    }

    #[test]
    fn the_known_set_round_trips() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read_known(d.path()), None);
        write_known(d.path(), &BTreeSet::from([0, 3])).unwrap();
        assert_eq!(read_known(d.path()), Some(BTreeSet::from([0, 3])));
    }
}
