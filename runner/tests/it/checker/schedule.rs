//! What users and operators do to a job, drawn from a seed: the lifecycle checker's
//! schedules. Pure: the same seed gives the same schedule, and a schedule's prefix is a
//! schedule too (the checker shrinks a failure to its shortest failing prefix).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The jobs a schedule may run: A always; B and C sharing A's dead-letter table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Job {
    /// The job under test.
    A,
    /// A second job with its own topic and table and the same dead-letter table.
    B,
    /// A CDC job (`cdcPrimaryKey=id`, `cdcSequenceField=version`, the change's kind in
    /// the `op` header): what is exact is each key's final state.
    C,
}

/// A crash point of the exactly-once protocol (`runner/src/crash_point.rs`), or of the
/// dead-letter replay.
pub const JOB_CRASH_POINTS: [&str; 6] = [
    "eo::before_offset_log",
    "eo::after_offset_log",
    "eo::between_requests",
    "eo::after_main_append",
    "eo::before_commit_log",
    "eo::after_commit_log",
];

/// A fault of BigQuery's, armed on A's table for A's next run (the emulator launcher's
/// fault port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BqFault {
    /// The next N Storage Write calls answer UNAVAILABLE (retried).
    Unavailable(u32),
    /// Every call answers RESOURCE_EXHAUSTED for a moment (a frozen BigQuery; waited out).
    Freeze,
    /// Every COMMITTED stream of the table is finalized: the next append finds its stream gone.
    StreamGone,
}

/// One thing a user or an operator does.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Produce records to the job's topics: `good` rows, `bad` records that go to the
    /// dead-letter table (and that the fixing UDF repairs). For the CDC job, keyed
    /// changes (upserts and deletes of a few keys, some sent out of sequence order).
    Produce { job: Job, good: u32, bad: u32 },
    /// Restart the job with a changed topic list: its second topic (created the first
    /// time) listed beside the first, or taken off the list. Records go on being
    /// produced to both; the final run lists every topic.
    Relist { job: Job, listed: bool },
    /// Run the job until it has caught up with its topic, and drain.
    Run { job: Job },
    /// Run the job and abort it at the `hit`th time it reaches `point` (SIGABRT, as a
    /// SIGKILL there would; a run that never gets there ends normally).
    Crash { job: Job, point: &'static str, hit: u32 },
    /// Run the job and SIGKILL it once its table has gained `rows` rows.
    Kill { job: Job, rows: u32 },
    /// Add partitions to the job's topic while it is down.
    AddPartitions { job: Job, by: i32 },
    /// Delete a partition's records below a fraction of its end (Kafka's DeleteRecords,
    /// as retention does), while the job is down.
    DeleteRecords { job: Job, partition: i32, percent: u32 },
    /// Delete the job's topic and create it again under the same name, while the job is down.
    Recreate { job: Job },
    /// A fault of BigQuery's on A's table during A's next run.
    Fault(BqFault),
    /// Replay the job's dead letters with the fixing UDF, aborted at its `hit`th batch
    /// commit when `crash` (then replayed again).
    Replay { job: Job, crash: bool },
    /// The operator sets `offsetGapPolicy=SKIP` from now on.
    Skip { job: Job },
}

/// How a seed's job is set up, and what happens to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// The seed it was drawn from.
    pub seed: u64,
    /// Partitions of each topic at the start.
    pub partitions: i32,
    /// `numStorageWriteApiStreams` (0: one shard per partition up to 8).
    pub streams: u32,
    /// Whether the jobs start under `offsetGapPolicy=SKIP` (else the default, FAIL).
    pub skip: bool,
    /// Whether job B runs beside A.
    pub second_job: bool,
    /// Whether the CDC job C runs beside A.
    pub cdc_job: bool,
    /// `--batch-rows`: small, so that a run makes several batches and a crash point's
    /// later hits are met.
    pub batch_rows: u32,
    /// What happens, in order.
    pub ops: Vec<Op>,
}

impl Schedule {
    /// The schedule of `seed`, with `n` operations.
    pub fn generate(seed: u64, n: usize) -> Schedule {
        Self::generate_with(seed, n, true)
    }

    /// The schedule `seed` gave before the CDC job and topic-list changes were drawn
    /// (the seeds found then are kept as tests with it).
    pub fn generate_before_cdc(seed: u64, n: usize) -> Schedule {
        Self::generate_with(seed, n, false)
    }

    fn generate_with(seed: u64, n: usize, later_kinds: bool) -> Schedule {
        let mut rng = StdRng::seed_from_u64(seed);
        // The CDC job and topic-list changes came later: they are drawn from a stream
        // of their own, so a seed found before them keeps most of its schedule.
        let mut extra = StdRng::seed_from_u64(seed ^ 0x5eed_c0de_cdc0_0001);
        let second_job = rng.random_bool(0.4);
        let cdc_job = later_kinds && extra.random_bool(0.4);
        let mut s = Schedule {
            seed,
            cdc_job,
            partitions: rng.random_range(1..=3),
            streams: [0, 1, 2][rng.random_range(0..3)],
            skip: rng.random_bool(0.3),
            second_job,
            batch_rows: rng.random_range(10..80),
            ops: Vec::new(),
        };
        // A job's life begins with its first start (at `latest`, the template's
        // default); what follows is drawn.
        s.ops.push(Op::Run { job: Job::A });
        if second_job {
            s.ops.push(Op::Run { job: Job::B });
        }
        if cdc_job {
            s.ops.push(Op::Run { job: Job::C });
        }
        while s.ops.len() < n {
            let op = match later_kinds && extra.random_bool(0.25) {
                true => draw_extra(&mut extra, cdc_job),
                false => draw(&mut rng, second_job),
            };
            s.ops.push(op);
        }
        s
    }

    /// The first `n` operations of this schedule.
    pub fn prefix(&self, n: usize) -> Schedule {
        Schedule { ops: self.ops[..n.min(self.ops.len())].to_vec(), ..self.clone() }
    }
}

/// One operation, on A or (a quarter of the time) on B when it runs.
fn draw(rng: &mut StdRng, second_job: bool) -> Op {
    let job = if second_job && rng.random_bool(0.25) { Job::B } else { Job::A };
    match rng.random_range(0..100) {
        0..=29 => Op::Produce { job, good: rng.random_range(20..300), bad: rng.random_range(0..4) },
        30..=37 => Op::Run { job },
        38..=52 => Op::Crash {
            job,
            point: JOB_CRASH_POINTS[rng.random_range(0..JOB_CRASH_POINTS.len())],
            hit: rng.random_range(1..4),
        },
        53..=60 => Op::Kill { job, rows: rng.random_range(10..200) },
        61..=66 => Op::AddPartitions { job, by: rng.random_range(1..3) },
        67..=73 => Op::DeleteRecords { job, partition: rng.random_range(0..3), percent: rng.random_range(10..90) },
        74..=78 => Op::Recreate { job },
        79..=87 => Op::Fault(match rng.random_range(0..3) {
            0 => BqFault::Unavailable(rng.random_range(1..6)),
            1 => BqFault::Freeze,
            _ => BqFault::StreamGone,
        }),
        88..=95 => Op::Replay { job, crash: rng.random_bool(0.5) },
        _ => Op::Skip { job },
    }
}

/// An operation of the later kinds: a topic-list change (of A or C), or, when the CDC
/// job runs, any operation on it.
fn draw_extra(rng: &mut StdRng, cdc_job: bool) -> Op {
    let job = if cdc_job && rng.random_bool(0.5) { Job::C } else { Job::A };
    if !cdc_job || rng.random_bool(0.3) {
        return Op::Relist { job, listed: rng.random_bool(0.6) };
    }
    match draw(rng, false) {
        Op::Produce { good, bad, .. } => Op::Produce { job: Job::C, good, bad },
        Op::Run { .. } => Op::Run { job: Job::C },
        Op::Crash { point, hit, .. } => Op::Crash { job: Job::C, point, hit },
        Op::Kill { rows, .. } => Op::Kill { job: Job::C, rows },
        Op::AddPartitions { by, .. } => Op::AddPartitions { job: Job::C, by },
        Op::DeleteRecords { partition, percent, .. } => Op::DeleteRecords { job: Job::C, partition, percent },
        Op::Recreate { .. } => Op::Recreate { job: Job::C },
        Op::Replay { crash, .. } => Op::Replay { job: Job::C, crash },
        Op::Skip { .. } => Op::Skip { job: Job::C },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_schedule_and_prefixes_are_schedules() {
        let a = Schedule::generate(7, 12);
        assert_eq!(a, Schedule::generate(7, 12));
        assert_ne!(a.ops, Schedule::generate(8, 12).ops);
        assert_eq!(a.prefix(3).ops, a.ops[..3]);
        assert_eq!((a.prefix(3).partitions, a.prefix(3).skip), (a.partitions, a.skip));
    }

    #[test]
    fn many_seeds_draw_every_kind_of_operation() {
        let mut kinds = std::collections::BTreeSet::new();
        for seed in 0..200 {
            for op in Schedule::generate(seed, 10).ops {
                kinds.insert(format!("{op:?}").split([' ', '(']).next().unwrap().to_string());
                if let Op::Produce { job: Job::C, .. } = op {
                    kinds.insert("Produce C".into());
                }
            }
        }
        for k in [
            "Produce",
            "Run",
            "Crash",
            "Kill",
            "AddPartitions",
            "DeleteRecords",
            "Recreate",
            "Fault",
            "Replay",
            "Skip",
            "Relist",
            "Produce C",
        ] {
            assert!(kinds.contains(k), "{k} never drawn: {kinds:?}");
        }
    }
}
