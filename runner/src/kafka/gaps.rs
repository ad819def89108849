//! Positions the broker no longer has, and what a job does about them
//! (`offsetGapPolicy`), at start and while running, in both templates.
//!
//! A position is out of range in two ways:
//! - **below the earliest stored offset**: retention (or `DeleteRecords`) removed
//!   records the job never read. They are lost.
//! - **past the end of the log**: the topic was recreated, or an unclean leader election
//!   cut the log short. Records the job already read are gone from the broker, and new
//!   ones may take their offsets.
//!
//! Kafka Connect's `errors.tolerance` defaults to `none` (fail); so does this: under
//! [`GapPolicy::Fail`] the job stops with a message naming the partition, the position
//! and the range the broker holds, before anything of it is written. Under
//! [`GapPolicy::Skip`] the job goes on (below the start: at the earliest stored offset;
//! past the end: at the end), and counts and logs what it skipped.
//!
//! While running, the shards' consumers are set to `auto.offset.reset=error`
//! (librdkafka: "trigger an error (ERR__AUTO_OFFSET_RESET) which is retrieved by
//! consuming messages and checking 'message->err'"), so an out-of-range position is
//! never silently moved to the earliest offset (which would duplicate a partition
//! whose log was cut short). On that error the job reads the watermarks and applies
//! the policy here.
//!
//! ```
//! use flexrun::kafka::gaps::{check, Discontinuity};
//! use std::collections::BTreeMap;
//! let positions = BTreeMap::from([(0, 5), (1, 40), (2, 7)]);
//! let marks = BTreeMap::from([(0, (8, 50)), (1, (0, 10)), (2, (0, 9))]);
//! let found = check(&positions, &marks);
//! assert_eq!(found, vec![
//!     Discontinuity::Deleted { partition: 0, from: 5, earliest: 8 },
//!     Discontinuity::PastEnd { partition: 1, at: 40, end: 10 },
//! ]);
//! assert_eq!(found[0].lost(), 3);
//! assert_eq!(found[1].resume(), 10);
//! ```

use std::collections::BTreeMap;

/// What a job does about a position out of range (`offsetGapPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GapPolicy {
    /// Stop, naming the partition (the default, as Kafka Connect's `errors.tolerance=none`).
    #[default]
    Fail,
    /// Go on at the nearest offset the broker holds, counted and logged.
    Skip,
}

/// One partition whose position the broker does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discontinuity {
    /// Records from `from` up to `earliest` were deleted before the job read them.
    Deleted {
        /// The partition.
        partition: i32,
        /// The job's position.
        from: i64,
        /// The earliest offset still stored.
        earliest: i64,
    },
    /// The job's position `at` is past the log's `end`.
    PastEnd {
        /// The partition.
        partition: i32,
        /// The job's position.
        at: i64,
        /// The log end offset.
        end: i64,
    },
    /// The log no longer holds what the job read before `at`: the leader epoch of the
    /// last record read ends at `diverged` on the current leader (KIP-320; an unclean
    /// leader election replaced the log's tail). From `diverged` on, the log holds other
    /// records than the ones the job read, however long it has grown since.
    Truncated {
        /// The partition.
        partition: i32,
        /// The job's position.
        at: i64,
        /// Where the current log diverges from the one the job read.
        diverged: i64,
    },
}

impl Discontinuity {
    /// The partition.
    pub fn partition(&self) -> i32 {
        match self {
            Discontinuity::Deleted { partition, .. }
            | Discontinuity::PastEnd { partition, .. }
            | Discontinuity::Truncated { partition, .. } => *partition,
        }
    }

    /// Records lost (deleted unread); 0 past the end.
    pub fn lost(&self) -> i64 {
        match self {
            Discontinuity::Deleted { from, earliest, .. } => earliest - from,
            Discontinuity::PastEnd { .. } | Discontinuity::Truncated { .. } => 0,
        }
    }

    /// Where [`GapPolicy::Skip`] goes on.
    pub fn resume(&self) -> i64 {
        match self {
            Discontinuity::Deleted { earliest, .. } => *earliest,
            Discontinuity::PastEnd { end, .. } => *end,
            Discontinuity::Truncated { diverged, .. } => *diverged,
        }
    }

    /// What happened, for the log and the error.
    pub fn describe(&self, job: &str, topic: &str) -> String {
        match self {
            Discontinuity::Deleted { partition, from, earliest } => format!(
                "job {job}: {topic}/{partition} is at offset {from}, but the broker's earliest stored offset is {earliest}: {} records were deleted (retention) before the job read them",
                earliest - from
            ),
            Discontinuity::PastEnd { partition, at, end } => format!(
                "job {job}: {topic}/{partition} is at offset {at}, past the end of its log ({end}): the topic was recreated or its log cut short (an unclean leader election); the records the job read there are gone from the broker, and new records may take their offsets"
            ),
            Discontinuity::Truncated { partition, at, diverged } => format!(
                "job {job}: {topic}/{partition} is at offset {at}, but its log was truncated at offset {diverged} since the job read it (the leader epoch of the last record read ends there on the current leader: an unclean leader election); from {diverged} on the log holds other records than the ones the job read and wrote"
            ),
        }
    }

    /// The error under [`GapPolicy::Fail`].
    pub fn refusal(&self, job: &str, topic: &str) -> String {
        format!(
            "{}. offsetGapPolicy=FAIL stops the job here; nothing after the last commit was written. Set offsetGapPolicy=SKIP to go on at offset {} (counted), or start the job under another --job-name",
            self.describe(job, topic),
            self.resume()
        )
    }
}

/// The partitions of `positions` whose position is outside `marks` (partition → (low,
/// high) watermarks). A partition without marks is not judged.
pub fn check(positions: &BTreeMap<i32, i64>, marks: &BTreeMap<i32, (i64, i64)>) -> Vec<Discontinuity> {
    positions
        .iter()
        .filter_map(|(&partition, &pos)| {
            let &(low, high) = marks.get(&partition)?;
            if pos < low {
                Some(Discontinuity::Deleted { partition, from: pos, earliest: low })
            } else if pos > high {
                Some(Discontinuity::PastEnd { partition, at: pos, end: high })
            } else {
                None
            }
        })
        .collect()
}

/// Counts of what [`GapPolicy::Skip`] went past.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Records deleted before they were read.
    pub lost: u64,
    /// Partitions found past their log's end.
    pub past_end: u64,
    /// Partitions whose log was found truncated under the job's position.
    pub truncated: u64,
}

/// Apply `policy` to what [`check`] found: under FAIL the first refusal, else the
/// positions moved to where the job goes on, each logged, and the counts.
pub fn apply(
    policy: GapPolicy,
    found: &[Discontinuity],
    positions: &mut BTreeMap<i32, i64>,
    job: &str,
    topic: &str,
) -> Result<Skipped, String> {
    let mut skipped = Skipped::default();
    for d in found {
        if policy == GapPolicy::Fail {
            return Err(d.refusal(job, topic));
        }
        tracing::error!(
            job,
            topic,
            partition = d.partition(),
            resume = d.resume(),
            lost = d.lost(),
            "{}; offsetGapPolicy=SKIP: going on",
            d.describe(job, topic)
        );
        positions.insert(d.partition(), d.resume());
        skipped.lost += d.lost() as u64;
        skipped.past_end += u64::from(matches!(d, Discontinuity::PastEnd { .. }));
        skipped.truncated += u64::from(matches!(d, Discontinuity::Truncated { .. }));
    }
    Ok(skipped)
}

/// Test hook (the `failpoints` feature): the failpoint `kafka::log_cut_short=return(N)`
/// moves every position `N` past where it is, as if the partition's log had been cut
/// short between the start-up check and the first fetch, so the running path (the
/// broker's OFFSET_OUT_OF_RANGE, AUTO_OFFSET_RESET, the policy) is exercised against a
/// real broker. Does nothing otherwise.
pub fn simulate_cut_log(positions: &mut BTreeMap<i32, i64>) {
    #[cfg(feature = "failpoints")]
    if let Some(n) = fail::eval("kafka::log_cut_short", |v| v.and_then(|s| s.parse::<i64>().ok())).flatten() {
        for pos in positions.values_mut() {
            *pos += n;
        }
    }
    let _ = positions;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_refuses_naming_the_partition_and_skip_moves_and_counts() {
        let found = vec![
            Discontinuity::Deleted { partition: 3, from: 10, earliest: 25 },
            Discontinuity::PastEnd { partition: 4, at: 90, end: 12 },
        ];
        let mut pos = BTreeMap::from([(3, 10), (4, 90), (5, 1)]);
        let e = apply(GapPolicy::Fail, &found, &mut pos.clone(), "j", "t").unwrap_err();
        assert!(e.contains("t/3 is at offset 10") && e.contains("offsetGapPolicy=SKIP"), "{e}");
        let s = apply(GapPolicy::Skip, &found, &mut pos, "j", "t").unwrap();
        assert_eq!(s, Skipped { lost: 15, past_end: 1, truncated: 0 });
        assert_eq!(pos, BTreeMap::from([(3, 25), (4, 12), (5, 1)]));
    }

    #[test]
    fn positions_at_either_watermark_are_in_range() {
        let marks = BTreeMap::from([(0, (5, 9))]);
        assert!(check(&BTreeMap::from([(0, 5)]), &marks).is_empty());
        assert!(check(&BTreeMap::from([(0, 9)]), &marks).is_empty(), "the end is where the next record goes");
        assert!(check(&BTreeMap::from([(1, 100)]), &marks).is_empty(), "no marks, no judgement");
    }
}
